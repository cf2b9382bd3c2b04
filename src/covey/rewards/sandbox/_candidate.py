# --- the candidate server (runs INSIDE the sandbox after _plain.py; stdlib only) ------------------
"""Loads the model-written program in a fresh interpreter and answers calls to its functions.

argv: <request fd> <reply fd>. First message in: {"setup", "code"}; first reply: {"ready": {...}}
listing the program's functions, imported modules and plain-valued globals (or {"load_error"}).
Then, per request {"call": name | "callref": id, "args", "kwargs"}, {"getattr": [id, name]} or
{"setattr": [id, name, value]} (a function of the test among the arguments arrives as a key; calling
it sends {"callback": key, "args", "kwargs"} and serves requests until {"cbok": value} or
{"cbraise": [type, text]} comes back):
{"ok": value, "mut": {index: value}} (the list/dict/set arguments after the call, for tests of
in-place functions), {"raise": [type, text]}, or {"bad": [kind, text]} when the result imitates
plain data. Other objects (instances of the program's classes, methods) go back as opaque handles. Nothing here is trusted: the harness
only reads plain data from this process and decides every verdict itself.

Each test gets the program as it was loaded: {"fork"} makes this process fork (reply {"forked": pid});
the child answers that test's requests and ends at {"end"} (reply {"ended"}), while this process waits
for it and then for the next {"fork"}. So a counter or a list of earlier inputs kept in the program's
memory starts afresh in every test, and a program cannot answer by the order of the harness's calls.
"""

import builtins
import sys


_ENDED = 121  # the exit status of a test's copy that ended at {"end"}


def _describe(g):
    funcs, modules, values = [], {}, {}
    for k, v in list(g.items()):
        if k.startswith("__"):
            continue
        if isinstance(v, type(sys)):
            modules[k] = v.__name__
        elif callable(v):
            funcs.append(k)
        else:
            try:
                values[k] = encode(v)
            except Unsupported:
                pass
    return {"functions": funcs, "modules": modules, "values": values}


def _serve(g, rfd, wfd):
    handles, ids = [], {}  # objects the test holds as opaque references; id(object) -> its handle

    def ref(x):
        if id(x) not in ids:  # the same object keeps its handle, so the test sees `f() is f()`
            handles.append(x)
            ids[id(x)] = len(handles) - 1
        return ids[id(x)]

    def obj(i, _name):
        if not 0 <= i < len(handles):
            raise ValueError(f"no object #{i}")
        return handles[i]

    def callback(key):
        """A function of the test passed as an argument: calling it asks the test process, which
        may call the program again (served here) before it answers."""

        def call(*args, **kwargs):
            try:
                send(wfd, {"callback": key, "args": encode(list(args), ref=ref, fn=stub_key),
                           "kwargs": encode(dict(kwargs), ref=ref, fn=stub_key)})
            except Unsupported as e:
                raise TypeError(f"cannot pass {e} to the test's function") from None
            while True:
                msg = recv(rfd, buf)
                if msg is None:
                    raise SystemExit(0)
                if "cbok" in msg:
                    return decode(msg["cbok"], obj=obj, fn=callback)
                if "cbraise" in msg:
                    etype, text = (list(msg["cbraise"]) + ["", ""])[:2]
                    cls = getattr(builtins, str(etype), None)
                    raise (cls if isinstance(cls, type) and issubclass(cls, Exception) else RuntimeError)(str(text))
                handle(msg)

        call.covey_key = key  # sent back as the test's own function (`stub_key`)
        return call

    def stub_key(x):
        return getattr(x, "covey_key", None) if type(x) is type(_serve) else None

    def handle(req):
        try:
            if "getattr" in req:
                target, attr = obj(int(req["getattr"][0]), ""), str(req["getattr"][1])
                fn, args, kwargs = getattr, [target, attr], {}
            elif "setattr" in req:
                target, attr = obj(int(req["setattr"][0]), ""), str(req["setattr"][1])
                fn, args, kwargs = setattr, [target, attr, decode(req["setattr"][2], obj=obj, fn=callback)], {}
            else:
                fn = g[req["call"]] if "call" in req else obj(int(req["callref"]), "")
                args, kwargs = decode(req["args"], obj=obj, fn=callback), decode(req["kwargs"], obj=obj, fn=callback)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            send(wfd, {"bad": ["protocol", f"{type(e).__name__}: {e}"]})
            return
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - reported to the test, which may expect it
            send(wfd, {"raise": [type(e).__name__, str(e)[:300]]})
            return
        try:
            mut = {str(i): encode(a, ref=ref, fn=stub_key) for i, a in enumerate(args) if type(a) in (list, dict, set)}
            send(wfd, {"ok": encode(result, ref=ref, fn=stub_key), "mut": mut})
        except Suspect as e:
            send(wfd, {"bad": ["suspect", str(e)]})
        except Unsupported as e:
            send(wfd, {"bad": ["unsupported", str(e)]})

    buf = bytearray()
    while True:
        req = recv(rfd, buf)
        if req is None:
            return
        if "fork" in req:  # a test begins: a copy of the loaded program answers it; this one waits
            pid = os.fork()
            if pid == 0:
                send(wfd, {"forked": os.getpid()})
                continue
            _, status = os.waitpid(pid, 0)
            if status != _ENDED << 8:  # the copy died mid-test (exit, kill): the test must not wait for it
                send(wfd, {"died": status})
                return
            continue
        if "end" in req:  # the test is over (in the copy that answered it)
            send(wfd, {"ended": 1})
            os._exit(_ENDED)
        handle(req)


def main():
    rfd, wfd = int(sys.argv[1]), int(sys.argv[2])
    if hasattr(sys, "set_int_max_str_digits"):  # also set by the harness's -X int_max_str_digits=0
        sys.set_int_max_str_digits(0)
    spec = recv(rfd, bytearray())
    g = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(spec["setup"], "<setup>", "exec"), g)
        exec(compile(spec["code"], "<solution>", "exec"), g)
    except BaseException as e:  # noqa: BLE001
        send(wfd, {"load_error": f"{type(e).__name__}: {e}"[:300]})
        return
    send(wfd, {"ready": _describe(g)})
    _serve(g, rfd, wfd)


main()
