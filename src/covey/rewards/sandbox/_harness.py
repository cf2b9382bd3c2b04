# --- the test harness (runs INSIDE the sandbox after _plain.py; stdlib only) ----------------------
"""Decides each test's verdict where the model-written code cannot reach it.

Reads a JSON spec from stdin ``{"setup", "code", "asserts": [...], "io": [[stdin, stdout], ...],
"timeout_s"}`` and writes one JSON line per test to the file descriptor argv[1]:
``{"i", "passed", "status", "message", "suspect"}``; status is pass, fail, error, timeout or crash.
Exactly one line per test, in order: the host refuses anything else (`testing._verdicts`).

Trust layout (docs/sandbox.md):
  harness (this process)  never runs model code; non-dumpable, so same-uid processes cannot read or
                          ptrace it; it alone writes verdicts.
  test process            a fork of the harness per test: runs the TEST code in a pristine
                          interpreter. The program's functions are proxies: each call goes to ...
  candidate process       a fresh interpreter (exec, not fork: it holds no test text, no expected
                          values, no descriptors of ours) that loaded setup + the program and
                          answers calls with plain data only (`_plain.py`). One per problem,
                          started by the harness; each test is answered by a fork of it made for
                          that test (`begin` / `end`), so the program's memory does NOT carry over
                          between tests (MBPP's own evaluation runs all asserts in one exec: a
                          program could count the calls and answer by their order, or remember the
                          inputs of earlier tests). Replaced after a test that left it out of step
                          (timeout, crash, non-plain answer).
So rebinding builtins, walking frames, patching modules, exiting early, or returning an object that
equals everything changes nothing the verdict depends on: the assert runs on values the test
process rebuilt itself. A bare truth test of a call (``assert f(x)``, ``assert not f(x)``, ``assert f(x)
== True``) needs the call to return a bool (`_strict_truth`): ``assert is_sorted(xs)`` passes no program
that returns ``xs``. A function of the test passed to the program runs in the test process when
the program calls it (`_Candidate._answer`). stdin/stdout tests run the program as its own fresh
process, fed its text through a sealed memfd (no path in the shared /tmp); the harness compares its
output.
"""

import builtins
import ctypes
import fcntl
import re
import resource
import select
import signal
import subprocess
import sys
import time

PR_SET_DUMPABLE = 4
RESERVED = frozenset(dir(builtins)) | frozenset(sys.stdlib_module_names)  # names with a trusted meaning
MAX_MESSAGE = 300
MAX_IO_OUTPUT = 4 * 1024 * 1024
# Raised again in the test as a generic error: an AssertionError would look like the test's own, and a
# StopIteration raised by `f` inside ``all(map(f, xs))`` ends the iteration, so all() returns True.
UNRAISABLE = (AssertionError, StopIteration, StopAsyncIteration)
CANDIDATE = "candidate.py"
# Programs may print and parse ints of any length, as before Python 3.11 (and as judges expect).
NO_INT_LIMIT = ("-X", "int_max_str_digits=0")


class CandidateError(Exception):
    """The program raised an exception type the test process cannot rebuild."""


class CandidateCrashed(Exception):
    """The candidate process ended (exit, kill, crash) before answering."""


class NotPlain(Exception):
    """The program returned something other than plain data."""

    def __init__(self, kind, text):
        super().__init__(text)
        self.suspect = kind == "suspect"


def _short_error(exc):
    """``Type: message`` (no traceback module: it costs ~20 ms to import in every sandbox)."""
    text = str(exc)
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:MAX_MESSAGE]


def _limit_cpu(timeout_s, new_group=False):
    """A preexec_fn: RLIMIT_CPU of ceil(timeout_s) (within the sandbox's own hard limit); own group."""
    cpu = max(1, int(-(-timeout_s // 1)))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    limits = (cpu, cpu + 1) if hard == resource.RLIM_INFINITY else (max(1, min(cpu, hard - 1)), hard)

    def limit():
        resource.setrlimit(resource.RLIMIT_CPU, limits)
        if new_group:
            os.setpgid(0, 0)

    return limit


def _recv_within(fd, buf, timeout_s):
    """One message from `fd` within `timeout_s` s (TimeoutError otherwise); None at EOF."""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        buf.extend(chunk)
        if len(buf) > 64 << 20:
            raise ValueError("message too large")
    return recv(fd, buf)


# ---------------------------------------------------------------------------- the test process
class _Candidate:
    """The fresh interpreter that runs the program; calls go over two pipes as plain data.

    The harness starts one per problem (`start`) and each test process, a fork, talks to it in turn;
    a test that leaves it out of step (killed mid-call, a crash, a non-plain answer) gets it replaced.
    """

    def __init__(self, spec, cpu_s):
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-S", "-u", *NO_INT_LIMIT, CANDIDATE, str(req_r), str(rep_w)],
            pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL,
            preexec_fn=_limit_cpu(cpu_s, new_group=True),  # prints go to our stdout
        )
        os.close(req_r)
        os.close(rep_w)
        self.buf = bytearray()
        self.violation = None  # the first NotPlain / CandidateCrashed of this test; it can never pass
        self.pending = 0  # requests out whose reply is not read (callbacks nest them): out of step
        self.callbacks = []  # the test's functions passed to the program (keys: [our pid, index])
        self.remotes = {}  # handle -> its _Remote, so the same object of the program is the same here

    @classmethod
    def start(cls, spec, cpu_s):
        """(candidate, None) once the program loaded, else (None, (status, message)) for the test."""
        try:
            cand = cls(spec, cpu_s)
        except (OSError, subprocess.SubprocessError) as e:
            return None, ("crash", f"could not start the program's process: {e}"[:MAX_MESSAGE])
        try:
            send(cand.req_w, {"setup": spec["setup"], "code": spec["code"]})
            first = _recv_within(cand.rep_r, cand.buf, spec["timeout_s"])
        except TimeoutError:
            failure = ("timeout", f"the program did not load within {spec['timeout_s']} s")
        except (OSError, ValueError, UnicodeDecodeError):
            failure = ("crash", "the program's process broke the protocol")
        else:
            if isinstance(first, dict) and "ready" in first:
                cand.ready = first["ready"]
                return cand, None
            if isinstance(first, dict) and "load_error" in first:
                failure = ("error", f"the program failed to load: {first['load_error']}"[:MAX_MESSAGE])
            else:
                failure = ("crash", "the program's process ended before it loaded (exit, crash or kill)")
        cand.close()
        return None, failure

    def _exchange(self, message, answer, timeout_s):
        try:
            send(self.req_w, message)
            reply = _recv_within(self.rep_r, self.buf, timeout_s)
        except (TimeoutError, OSError, ValueError, UnicodeDecodeError):
            return False
        return isinstance(reply, dict) and answer in reply

    def begin(self, timeout_s):
        """A test begins: the program's process forks a copy of its loaded state to answer this test alone."""
        return self._exchange({"fork": 1}, "forked", timeout_s)

    def end(self, timeout_s):
        """The test is over: its copy ends, and the program's process waits for the next `begin`."""
        return self._exchange({"end": 1}, "ended", timeout_s)

    def in_step(self):
        """Whether the next test may use this process: nothing pending, unread or refused."""
        return self.violation is None and self.pending == 0 and not self.buf

    def close(self):
        for target in (lambda: os.killpg(self.proc.pid, signal.SIGKILL), self.proc.kill):
            try:
                target()  # with everything it started
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait()
        os.close(self.req_w)
        os.close(self.rep_r)

    def refuse(self, exc):
        """Remember `exc` (not plain data, a crash) so the test fails even if it catches it; return it."""
        if self.violation is None:
            self.violation = exc
        return exc

    def _reply(self):
        try:
            msg = recv(self.rep_r, self.buf)
        except (ValueError, UnicodeDecodeError):
            raise self.refuse(CandidateCrashed("the program's process sent malformed data")) from None
        if msg is None or not isinstance(msg, dict) or "died" in msg:  # "died": the test's copy ended
            raise self.refuse(CandidateCrashed("the program's process ended before answering (exit, crash or kill)"))
        return msg

    def _ref(self, x):
        return x._id if isinstance(x, _Remote) and x._cand is self else None

    def _fn(self, f):
        self.callbacks.append(f)
        return [os.getpid(), len(self.callbacks) - 1]

    def _remote(self, i, name):
        if i not in self.remotes:
            self.remotes[i] = _Remote(self, i, name)
        return self.remotes[i]

    def _encode(self, x):
        return encode(x, ref=self._ref, fn=self._fn)

    def _decode(self, x):
        return decode(x, obj=self._remote, fn=self._own)

    def _own(self, key):
        """The test's own function the program sent back (one it was given), by its key."""
        if key[0] == os.getpid() and 0 <= key[1] < len(self.callbacks):
            return self.callbacks[key[1]]
        raise ValueError("a function of an earlier test")

    def call(self, name, args, kwargs, key="call"):
        try:
            payload = {key: name, "args": self._encode(list(args)), "kwargs": self._encode(dict(kwargs))}
        except Unsupported as e:
            raise self.refuse(NotPlain("unsupported", f"cannot pass {e} to the program")) from None
        return self._request(payload, args, name)

    def getattr(self, handle, attr):
        return self._request({"getattr": [handle, attr]}, (), attr)

    def setattr(self, handle, attr, value):
        try:
            payload = {"setattr": [handle, attr, self._encode(value)]}
        except Unsupported as e:
            raise self.refuse(NotPlain("unsupported", f"cannot pass {e} to the program")) from None
        self._request(payload, (), attr)

    def _request(self, payload, args, what):
        self.pending += 1
        try:
            send(self.req_w, payload)
        except OSError:
            raise self.refuse(CandidateCrashed("the program's process ended (exit, crash or kill)")) from None
        reply = self._reply()
        while "callback" in reply:  # the program calls one of the test's functions, then goes on
            self._answer(reply)
            reply = self._reply()
        self.pending -= 1
        if "raise" in reply:
            etype, text = (list(reply["raise"]) + ["", ""])[:2]
            cls = getattr(__builtins__, str(etype), None) if isinstance(__builtins__, type(sys)) else None
            if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, UNRAISABLE):
                raise cls(str(text))
            raise CandidateError(f"{etype}: {text}")  # StopIteration would end the test's map() / all() early
        if "bad" in reply:
            kind, text = (list(reply["bad"]) + ["", ""])[:2]
            raise self.refuse(NotPlain(kind, f"{what} returned {text}"))
        try:
            result = self._decode(reply["ok"])
            mut = {int(k): self._decode(v) for k, v in dict(reply.get("mut", {})).items()}
        except (ValueError, KeyError, TypeError):
            raise self.refuse(CandidateCrashed("the program's process sent malformed data")) from None
        for i, new in mut.items():  # in-place functions: mirror the change into the caller's objects
            if 0 <= i < len(args) and type(args[i]) is type(new) and type(new) in (list, dict, set):
                args[i].clear()
                args[i].extend(new) if type(new) is list else args[i].update(new)
        return result

    def _answer(self, msg):
        """Run the test's function the program called, on the plain data it sent; reply with its
        result. An AssertionError (or a non-Exception) there fails the test even if the program
        catches what it is told; other exceptions go to the program, which may expect them."""
        key = msg.get("callback")
        try:
            if not (isinstance(key, list) and len(key) == 2 and all(type(k) is int for k in key)):
                raise ValueError("malformed key")
            f = self.callbacks[key[1]] if key[0] == os.getpid() and 0 <= key[1] < len(self.callbacks) else None
            args, kwargs = self._decode(msg["args"]), self._decode(msg["kwargs"])
        except (ValueError, KeyError, TypeError):
            raise self.refuse(CandidateCrashed("the program's process sent malformed data")) from None
        try:
            if f is None:  # kept by the program from an earlier test, whose process is gone
                raise RuntimeError("a function of an earlier test, which has ended")
            reply = {"cbok": self._encode(f(*args, **kwargs))}
        except Unsupported as e:
            reply = {"cbraise": ["TypeError", f"the test's function returned {e}"[:MAX_MESSAGE]]}
        except Exception as e:  # noqa: BLE001 - the program may catch it, as it could in one interpreter
            if isinstance(e, AssertionError):
                self.refuse(e)
            reply = {"cbraise": [type(e).__name__, str(e)[:MAX_MESSAGE]]}
        except BaseException as e:
            self.refuse(e)
            raise
        try:
            send(self.req_w, reply)
        except OSError:
            raise self.refuse(CandidateCrashed("the program's process ended (exit, crash or kill)")) from None


class _Remote:
    """An object that lives in the candidate process (an instance of the program's class, a method):
    the test can pass it back, read its attributes and call it; every answer is rebuilt here."""

    __slots__ = ("_cand", "_id", "_type")

    def __init__(self, cand, i, type_name):
        object.__setattr__(self, "_cand", cand)
        object.__setattr__(self, "_id", i)
        object.__setattr__(self, "_type", type_name)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self._cand.getattr(self._id, attr)

    def __setattr__(self, attr, value):
        self._cand.setattr(self._id, attr, value)

    def __call__(self, *args, **kwargs):
        return self._cand.call(self._id, args, kwargs, key="callref")

    def __repr__(self):
        return f"<{self._type} object of the program>"

    def _refuse(self, *_):
        raise self._cand.refuse(NotPlain("unsupported", f"the test needs the truth value or a comparison of "
                                         f"{self!r}; only plain data can be checked"))

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __hash__ = object.__hash__


OPAQUE = (_Remote,)  # `encode` sends these back by handle (they define __eq__ only to refuse it)


def _proxy(cand, name):
    def call(*args, **kwargs):
        return cand.call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def _names_read(code):
    """Every name `code` mentions (its ast.Name nodes); empty when it does not parse."""
    import ast  # only for the hint of a failed test: ~20 ms to import

    try:
        return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()


def _test_globals(spec, cand):
    """(namespace the test runs in, program names kept out of it).

    Setup runs first (trusted). The program's names come after, except that it may not redefine a
    name with a trusted meaning: a builtin (``def abs(x): return 0``), a stdlib module's name (a
    class named ``math`` with an ``isclose`` that is always true), or a name the setup defined
    (HumanEval's ``poly`` / ``encode_cyclic`` checkers). ``spec["functions"]`` lists the names the
    test does mean to take from the program (its entry points); those are exempt. A stdlib module the
    program imported under its own name is bound to the test process's own copy.
    """
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    exec(compile(spec["setup"], "<setup>", "exec"), g)
    declared, setup_names = set(spec.get("functions") or ()), set(g)
    provided = {str(k): ("module", str(v)) for k, v in dict(cand.ready.get("modules", {})).items()}
    provided.update({str(k): ("value", v) for k, v in dict(cand.ready.get("values", {})).items()})
    provided.update({str(k): ("function", None) for k in list(cand.ready.get("functions", []))})
    kept_out = []
    for name, (kind, data) in provided.items():
        if name.startswith("__"):
            continue
        if kind == "module":
            if name == data and name in sys.stdlib_module_names and name not in setup_names and name != "__main__":
                try:
                    g[name] = __import__(name)  # our own copy, whatever the program did to its copy
                except ImportError:
                    pass
            continue  # a module under another name (import x as y) is not the test's to use
        if name not in declared and (name in RESERVED or name in setup_names):
            kept_out.append(name)
        elif kind == "value":
            try:
                g[name] = decode(data)
            except ValueError:
                pass
        else:
            g[name] = _proxy(cand, name)
    return g, kept_out


def _hint(test, kept_out):
    """Why a test that reads one of the program's kept-out names may have failed."""
    names = sorted(set(kept_out) & _names_read(test)) if kept_out else []
    if not names:
        return ""
    return (f" [the program's {', '.join(names)} not used: the test reads the builtin, stdlib module or setup "
            "definition; list the program's entry points in tests['functions'] to test them]")


def _assert_test(spec, test, cand):
    """(status, message, suspect) of one assert-style test, decided in this (trusted) process."""
    kept_out = []
    status, message, suspect = _verdict(spec, test, cand, kept_out)
    hint = _hint(test, kept_out) if status != "pass" else ""
    if hint:
        message = message[: MAX_MESSAGE - len(hint)] + hint
    return status, message, suspect


_TRUTH_TAIL = re.compile(r"(==|is)\s*\(?\s*(True|False)\s*\)?")


def _call_end(line, start):
    """Index just past the parenthesis that closes the one at `start` (strings skipped), or -1."""
    depth, quote, i = 0, None, start
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def _strict_truth(test, names):
    """`test` with every line ``assert [not] NAME(...)`` or ``assert NAME(...) ==/is True|False`` (NAME a
    program function, or ``candidate``) rewritten so the call's value must be a bool: ``any truthy value``
    and ``1 == True`` no longer pass such a test. Other lines are kept as they are."""
    out = []
    for line in test.split("\n"):
        body = line.lstrip()
        indent, neg = line[: len(line) - len(body)], ""
        if body.startswith("assert "):
            rest = body[7:].lstrip()
            if rest.startswith("not "):
                neg, rest = "not ", rest[4:].lstrip()
            name = rest.split("(", 1)[0]
            end = _call_end(rest, len(name)) if "(" in rest and name.isidentifier() and name in names else -1
            tail = rest[end:].strip() if end > 0 else None
            if tail is not None and (tail == "" or (not neg and _TRUTH_TAIL.fullmatch(tail))):
                line = f"{indent}assert {neg}__covey_bool__({rest[:end]}) {tail}".rstrip()
        out.append(line)
    return "\n".join(out)


def _covey_bool(value):
    if isinstance(value, OPAQUE):
        value._refuse()  # an object of the program: not plain data, as its truth value would be
    if type(value) is not bool:
        raise AssertionError(f"the test checks a truth value, and the program returned {type(value).__name__} "
                             f"{str(value)[:60]}, not True or False")
    return value


def _verdict(spec, test, cand, kept_out):
    try:
        g, out = _test_globals(spec, cand)
        kept_out.extend(out)
        g["__covey_bool__"] = _covey_bool
        test = _strict_truth(test, (set(cand.ready.get("functions", ())) - set(out)) | {"candidate"})
        exec(compile(test, "<test>", "exec"), g)
        if cand.violation is not None:  # the test caught it (``except Exception:``): still not a pass
            raise cand.violation
        return "pass", "", False
    except NotPlain as e:
        return "fail", str(e)[:MAX_MESSAGE], e.suspect
    except AssertionError as e:
        return "fail", _short_error(e), False
    except CandidateCrashed as e:
        return "crash", str(e), False
    except Exception as e:  # noqa: BLE001 - the test raised: an error, not a pass
        return "error", _short_error(e), False


def _test_child(spec, test, cand, w):
    os.setpgid(0, 0)
    status, message, suspect = _assert_test(spec, test, cand)
    send(w, {"status": status, "message": message, "suspect": suspect, "in_step": cand.in_step()})
    os._exit(0)


def _wait(pid, r, timeout_s):
    """(the child's report or None, timed_out): waits for the child's exit; kills its process group."""
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)
        report = None
        if ready:
            os.set_blocking(r, False)
            try:
                report = recv(r, bytearray(), limit=65536)
            except (BlockingIOError, ValueError, UnicodeDecodeError):
                report = None
        return report, not ready
    finally:
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()  # with anything the test started
            except (ProcessLookupError, PermissionError):
                pass
        os.waitpid(pid, 0)
        os.close(pidfd)


def _run_assert(spec, test, cand):
    """(status, message, suspect, whether `cand` is still in step) of one test, run in a forked test process."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            _test_child(spec, test, cand, w)
        finally:
            os._exit(1)
    os.close(w)
    report, timed_out = _wait(pid, r, spec["timeout_s"])
    os.close(r)
    if timed_out:
        return "timeout", f"test did not finish within {spec['timeout_s']} s", False, False
    if not isinstance(report, dict) or report.get("status") not in ("pass", "fail", "error", "crash"):
        return "crash", "the test process ended without a verdict", False, False
    status, message = report["status"], str(report.get("message", ""))[:MAX_MESSAGE]
    return status, message, bool(report.get("suspect")), report.get("in_step") is True


# ---------------------------------------------------------------------------- stdin/stdout tests
def _normalise_output(text):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _program_fd(text):
    """A sealed, read-only memfd holding `text`: no path the program could plant a symlink at.

    (Writing the program to a named file in the shared /tmp let an earlier program point that name
    at our result descriptor and have us write its own text, with forged verdict lines, into it.)
    """
    fd = os.memfd_create("program", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        data = memoryview(text.encode("utf-8", "replace"))
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, os.SEEK_SET)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _run_io(spec, stdin_text, expected):
    """The program as its own fresh process (it never sees the expected output); we compare.

    It reads its text from an inherited memfd (``/proc/self/fd/N`` is its own descriptor), so the
    harness opens no path in the sandbox's /tmp, where the program may have planted symlinks.
    """
    prog = _program_fd(spec["setup"] + "\n" + spec["code"])
    try:
        proc = subprocess.run([sys.executable, "-I", "-B", "-S", *NO_INT_LIMIT, f"/proc/self/fd/{prog}"], input=stdin_text.encode(),
                              capture_output=True, timeout=spec["timeout_s"], pass_fds=(prog,),
                              preexec_fn=_limit_cpu(spec["timeout_s"]), start_new_session=True)
    except subprocess.TimeoutExpired:
        return "timeout", f"test did not finish within {spec['timeout_s']} s", False
    finally:
        os.close(prog)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return "error", (err[-1] if err else f"exit code {proc.returncode}")[:MAX_MESSAGE], False
    got = _normalise_output(proc.stdout[:MAX_IO_OUTPUT].decode("utf-8", "replace"))
    if got != _normalise_output(expected):
        return "fail", f"expected {_normalise_output(expected)[:120]!r}, got {got[:120]!r}", False
    return "pass", "", False


def main():
    result_fd = int(sys.argv[1])
    if hasattr(sys, "set_int_max_str_digits"):  # the tests' own long int literals (Python >= 3.11)
        sys.set_int_max_str_digits(0)
    spec = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    try:
        protected = ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        protected = False
    tests = [("assert", t) for t in spec["asserts"]] + [("io", t) for t in spec["io"]]
    if not protected:  # the program could read our memory and descriptors through /proc: fail closed
        for i in range(len(tests)):
            res = {"i": i, "passed": False, "status": "crash", "suspect": False,
                   "message": "the harness could not make itself non-dumpable (prctl); no test can be trusted"}
            os.write(result_fd, (json.dumps(res) + "\n").encode())
        return
    try:
        compile(spec["setup"], "<setup>", "exec")
        compile(spec["code"], "<solution>", "exec")
        syntax_error = None
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as e:
        syntax_error = _short_error(e)
    cand, load_error = None, None
    cand_cpu_s = spec["timeout_s"] * (len(spec["asserts"]) + 1)
    for i, (kind, test) in enumerate(tests):
        if syntax_error is not None:
            status, message, suspect = "error", syntax_error, False
        elif kind == "assert" and load_error is not None:
            status, message, suspect = "error", load_error, False
        elif kind == "assert":
            failure = None
            if cand is not None and cand.proc.poll() is not None:  # it ended after its last answer
                cand.close()
                cand = None
            if cand is None:  # one program process for all asserts; a new one after a test that broke step
                cand, failure = _Candidate.start(spec, cand_cpu_s)
            if failure is not None:
                (status, message), suspect = failure, False
                load_error = message if status == "error" else None  # deterministic: every assert gets it
            elif not cand.begin(spec["timeout_s"]):
                status, message, suspect = "crash", "the program's process did not start the test", False
                cand.close()
                cand = None
            else:
                status, message, suspect, in_step = _run_assert(spec, test, cand)
                if not (in_step and cand.end(spec["timeout_s"])):
                    cand.close()
                    cand = None
        else:
            status, message, suspect = _run_io(spec, test[0], test[1])
        res = {"i": i, "passed": status == "pass", "status": status, "message": message, "suspect": suspect}
        os.write(result_fd, (json.dumps(res) + "\n").encode())


main()
