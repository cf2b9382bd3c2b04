# --- the candidate server (runs INSIDE the sandbox after _plain.py; stdlib only) ------------------
"""Loads the model-written program in a fresh interpreter and answers calls to its functions.

argv: <request fd> <reply fd>. First message in: {"setup", "code"}; first reply: {"ready": {...}}
listing the program's functions, imported modules and plain-valued globals (or {"load_error"}).
Then, per request {"call": name | "callref": id, "args", "kwargs"}, {"getattr": [id, name]} or
{"setattr": [id, name, value]}:
{"ok": value, "mut": {index: value}} (the list/dict/set arguments after the call, for tests of
in-place functions), {"raise": [type, text]}, or {"bad": [kind, text]} when the result imitates
plain data. Other objects (instances of the program's classes, methods) go back as opaque handles. Nothing here is trusted: the harness
only reads plain data from this process and decides every verdict itself.
"""

import builtins
import sys


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
    handles = []  # objects the test holds as opaque references (e.g. instances of the program's classes)

    def ref(x):
        handles.append(x)
        return len(handles) - 1

    def obj(i, _name):
        if not 0 <= i < len(handles):
            raise ValueError(f"no object #{i}")
        return handles[i]

    buf = bytearray()
    while True:
        req = recv(rfd, buf)
        if req is None:
            return
        try:
            if "getattr" in req:
                target, attr = obj(int(req["getattr"][0]), ""), str(req["getattr"][1])
                fn, args, kwargs = getattr, [target, attr], {}
            elif "setattr" in req:
                target, attr = obj(int(req["setattr"][0]), ""), str(req["setattr"][1])
                fn, args, kwargs = setattr, [target, attr, decode(req["setattr"][2], obj=obj)], {}
            else:
                fn = g[req["call"]] if "call" in req else obj(int(req["callref"]), "")
                args, kwargs = decode(req["args"], obj=obj), decode(req["kwargs"], obj=obj)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            send(wfd, {"bad": ["protocol", f"{type(e).__name__}: {e}"]})
            continue
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - reported to the test, which may expect it
            send(wfd, {"raise": [type(e).__name__, str(e)[:300]]})
            continue
        try:
            mut = {str(i): encode(a, ref=ref) for i, a in enumerate(args) if type(a) in (list, dict, set)}
            send(wfd, {"ok": encode(result, ref=ref), "mut": mut})
        except Suspect as e:
            send(wfd, {"bad": ["suspect", str(e)]})
        except Unsupported as e:
            send(wfd, {"bad": ["unsupported", str(e)]})


def main():
    rfd, wfd = int(sys.argv[1]), int(sys.argv[2])
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
