"""Containment tests for covey.rewards.sandbox: each hostile program ends within its limits, nothing
outside the sandbox changes, and this (host) process keeps running. Needs bubblewrap (make installs it)."""

import logging
import os
import socket
import threading

import pytest

from covey.rewards import sandbox
from covey.rewards.sandbox import SandboxLimits, SandboxUnavailable, run, run_tests
from covey.rewards.sandbox import _process

from _non_root import run_as_non_root

SANDBOX_UID_MIN = 1_000_000


def _sandbox_processes():
    """pids of live processes owned by a sandbox uid of this process (there must be none after a run
    returns). Each sandbox gets uid 1_000_000 + 64 * pid + slot of the process that started it: other
    processes' sandboxes (a parallel test worker's) are not this test's leftovers."""
    own = range(SANDBOX_UID_MIN + 64 * os.getpid(), SANDBOX_UID_MIN + 64 * (os.getpid() + 1))
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                status = f.read()
        except OSError:
            continue
        uid = int(status.split("Uid:")[1].split()[0])
        if uid in own and "State:\tZ" not in status:
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
            except OSError:
                cmd = "?"
            found.append((int(d), cmd, status.split("State:")[1].split("\n")[0].strip()))
    return found


@pytest.fixture(autouse=True)
def _no_leftovers():
    yield
    assert _sandbox_processes() == []


def test_sandbox_is_available_here():
    ok, reason = sandbox.sandbox_status()
    if not ok and os.geteuid() != 0:  # `make` installs bubblewrap only as root: elsewhere code rewards refuse
        with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
            run("print(1)")
        pytest.skip(f"bubblewrap cannot run for this non-root user ({reason}); code rewards refuse clearly")
    assert ok, reason


def test_code_runs_as_unprivileged_uid_without_capabilities():
    r = run(
        "import os\n"
        "s = open('/proc/self/status').read()\n"
        "print(os.getuid(), os.getgid(), os.getgroups())\n"
        "print([l.split()[1] for l in s.splitlines() if l.startswith(('CapEff', 'CapPrm', 'NoNewPrivs'))])"
    )
    uid, gid, *_ = r.stdout.split()
    assert r.exit_code == 0 and r.sandboxed
    if os.geteuid() == 0:  # a fresh uid; a non-root host keeps its own (already unprivileged) uid
        assert int(uid) >= SANDBOX_UID_MIN and int(gid) >= SANDBOX_UID_MIN
    else:
        assert (int(uid), int(gid)) == (os.getuid(), os.getgid())
    assert "'0000000000000000', '0000000000000000', '1'" in r.stdout  # no capabilities, no_new_privs
    assert "[]" in r.stdout.splitlines()[0]  # no supplementary groups


def test_infinite_loop_is_stopped():
    r = run("while True:\n    pass", timeout_s=1)
    assert r.exit_code != 0
    assert r.limit_hit in ("timeout", "cpu")


def test_sleeping_past_the_timeout_is_killed():
    r = run("import time\nprint('start', flush=True)\ntime.sleep(60)\nprint('end')", timeout_s=1)
    assert r.timed_out and r.limit_hit == "timeout"
    assert r.stdout == "start\n"


def test_fork_bomb_hits_the_process_limit():
    code = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(10000):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('refused after', n, type(e).__name__)\n"
    )
    r = run(code, timeout_s=5, limits=SandboxLimits(nproc=8))
    assert r.stdout.startswith("refused after"), (r.stdout, r.stderr)
    assert int(r.stdout.split()[2]) < 8
    # the sleeping children died with the sandbox (checked by the autouse fixture)


def test_recursive_fork_bomb_ends_at_the_timeout():
    r = run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", timeout_s=2)
    assert r.exit_code != 0 and r.limit_hit in ("timeout", "cpu")


def test_memory_bomb_gets_memory_error():
    r = run("x = bytearray(4 * 1024 ** 3)", memory_mb=256)
    assert r.exit_code == 1 and r.limit_hit == "memory"
    r = run("a = []\nwhile True:\n    a.append(' ' * 10 ** 6)", memory_mb=256, timeout_s=10)
    assert r.exit_code == 1 and r.limit_hit == "memory"


def test_filling_the_disk_stops_at_the_limits(tmp_path):
    marker = f"covey_fill_{os.getpid()}"
    one_file = f"with open('{marker}', 'wb') as f:\n    while True:\n        f.write(b'0' * 2 ** 20)"
    r = run(one_file, limits=SandboxLimits(file_mb=4))
    assert r.exit_code == 1 and r.limit_hit == "file_size", r.stderr
    many_files = "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'0' * 2 ** 20)\n    i += 1"
    r = run(many_files, limits=SandboxLimits(file_mb=4, tmpfs_mb=8))
    assert r.exit_code == 1 and "No space left on device" in r.stderr
    assert not os.path.exists(f"/tmp/{marker}")  # the sandbox's /tmp is its own tmpfs


def test_network_is_unreachable_even_on_loopback():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(3.0)  # bounded: the server stops by itself
    port = server.getsockname()[1]
    accepted = []

    def serve():
        try:
            conn, _ = server.accept()
            accepted.append(conn)
            conn.close()
        except OSError:
            pass

    t = threading.Thread(target=serve)
    t.start()
    code = (
        "import socket\n"
        f"for addr in [('127.0.0.1', {port}), ('localhost', {port})]:\n"
        "    try:\n"
        "        socket.create_connection(addr, timeout=1).close()\n"
        "        print('CONNECTED')\n"
        "    except OSError as e:\n"
        "        print('blocked', type(e).__name__)\n"
    )
    r = run(code, timeout_s=5)
    t.join()
    server.close()
    assert "CONNECTED" not in r.stdout and r.stdout.count("blocked") == 2, (r.stdout, r.stderr)
    assert accepted == []


def test_files_outside_the_working_dir_are_not_readable(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    code = (
        "import os\n"
        f"for p in ['/etc/shadow', '/etc/passwd', {str(secret)!r}, os.path.expanduser('~root/.bashrc'),"
        " '/root/.bashrc', '/work/main/pyproject.toml']:\n"
        "    try:\n"
        "        print('READ', p, open(p).read()[:20])\n"
        "    except OSError as e:\n"
        "        print('denied', p, type(e).__name__)\n"
        "print('cwd', os.getcwd(), sorted(os.listdir('.')))\n"
    )
    r = run(code)
    assert r.exit_code == 0, r.stderr
    assert "READ" not in r.stdout and "s3cret" not in r.stdout
    assert "cwd /tmp ['main.py']" in r.stdout


def test_writing_outside_the_working_dir_fails(tmp_path):
    before = sorted(os.listdir(tmp_path))
    targets = ["/usr/covey_x", "/etc/covey_x", "/root/covey_x", str(tmp_path / "x"), "/covey_x", "/dev/shm/x"]
    code = (
        f"for p in {targets!r}:\n"
        "    try:\n"
        "        open(p, 'w').write('x')\n"
        "        print('WROTE', p)\n"
        "    except OSError as e:\n"
        "        print('denied', p)\n"
        "open('inside.txt', 'w').write('ok')\n"
        "print(open('inside.txt').read())\n"
    )
    r = run(code)
    # A non-root host's sandbox owns its fresh /dev (a private tmpfs, its /dev/shm too): writable there,
    # and gone with the sandbox. Nothing lands on the host either way (checked below).
    wrote = {line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith("WROTE")}
    assert wrote <= ({"/dev/shm/x"} if os.geteuid() != 0 else set()) and r.stdout.rstrip().endswith("ok"), (r.stdout, r.stderr)
    assert sorted(os.listdir(tmp_path)) == before
    for p in targets:
        assert not os.path.exists(p)


def test_killing_the_parent_leaves_the_host_running():
    host = os.getpid()
    code = (
        "import os, signal\n"
        "for target in (os.getppid(), 1):\n"
        "    try:\n"
        "        os.kill(target, signal.SIGKILL)\n"
        "        print('KILLED', target)\n"
        "    except OSError as e:\n"
        "        print('refused', target, type(e).__name__)\n"
        "for target in (-1, " + str(host) + "):\n"
        "    try:\n"
        "        os.kill(target, signal.SIGKILL)\n"
        "    except OSError as e:\n"
        "        print('refused', target, type(e).__name__)\n"
        "print('alive')\n"
    )
    r = run(code)
    # Root: the program's uid may not signal the sandbox's init. Non-root: the program shares the init's
    # uid, but an init ignores SIGKILL from inside its own namespace; the run goes on either way.
    assert ("KILLED" not in r.stdout if os.geteuid() == 0 else "KILLED 1" in r.stdout), r.stdout
    assert r.stdout.endswith("alive\n") and f"refused {host} ProcessLookupError" in r.stdout, r.stdout
    assert "refused -1" in r.stdout  # nothing outside the pid namespace to signal
    assert os.getpid() == host  # still here
    assert run("print(1)").stdout == "1\n"  # and the sandbox still works


def test_huge_stdout_is_truncated_and_stopped():
    lim = SandboxLimits(max_output_bytes=1000, max_drain_bytes=1_000_000)
    r = run("while True:\n    print('x' * 10000)", limits=lim)
    assert r.limit_hit == "output" and r.stdout_truncated
    assert len(r.stdout) == 1000


def test_background_process_does_not_outlive_the_run():
    code = (
        "import os, subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        import time; time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    r = run(code, timeout_s=5)
    assert r.exit_code == 0 and r.stdout == "parent done\n" and not r.timed_out
    assert _sandbox_processes() == []


def test_test_runner_reports_each_test():
    rep = run_tests(
        "def add(a, b):\n    return a + b",
        ["assert add(1, 2) == 3", "assert add(1, 1) == 3", "raise ValueError('x')"],
    )
    assert rep.passed == [True, False, False]
    assert rep.status == ["pass", "fail", "error"]
    assert rep.fraction == pytest.approx(1 / 3) and not rep.all_passed


def test_exiting_early_does_not_count_as_passing():
    for code in ("import os\nos._exit(0)", "import sys\nsys.exit(0)", "exit()", "print('pass')\nraise SystemExit"):
        rep = run_tests(code, ["assert False"])
        assert rep.passed == [False], code


def test_hanging_test_times_out_and_others_still_run():
    rep = run_tests("def f():\n    while True: pass", ["f()", "assert 1 == 1"], timeout_s=1)
    assert rep.status == ["timeout", "pass"]


def test_stdin_stdout_tests_compare_output():
    code = "a, b = map(int, input().split())\nprint(a + b)"
    rep = run_tests(code, {"io": [["1 2\n", "3\n"], ["2 2", "5"], {"input": "0 0", "output": "0  \n\n"}]})
    assert rep.passed == [True, False, True]


def test_setup_runs_before_the_code():
    rep = run_tests("def f():\n    return math.pi", {"setup": "import math", "asserts": ["assert f() > 3"]})
    assert rep.passed == [True]


def test_syntax_error_fails_every_test():
    rep = run_tests("def f(:\n", ["assert True", "assert True"])
    assert rep.status == ["error", "error"] and "SyntaxError" in rep.messages[0]


def test_missing_bubblewrap_refuses_without_opt_in(monkeypatch):
    monkeypatch.setattr(_process, "sandbox_status", lambda: (False, "bwrap not found (test)"))
    monkeypatch.delenv("COVEY_ALLOW_UNSANDBOXED", raising=False)
    with pytest.raises(SandboxUnavailable, match="allow_unsandboxed"):
        run("print(1)")


def test_rlimit_only_mode_runs_with_a_loud_warning(monkeypatch, caplog):
    monkeypatch.setattr(_process, "sandbox_status", lambda: (False, "bwrap not found (test)"))
    monkeypatch.setenv("COVEY_ALLOW_UNSANDBOXED", "1")
    _process._warn_unsandboxed.cache_clear()
    with caplog.at_level(logging.WARNING):
        r = run("import os\nprint(os.getuid())")
        slow = run("import time\ntime.sleep(30)", timeout_s=1)
    assert r.exit_code == 0 and not r.sandboxed
    assert int(r.stdout) >= SANDBOX_UID_MIN if os.geteuid() == 0 else int(r.stdout) == os.getuid()
    assert slow.timed_out
    assert "WITHOUT A SANDBOX" in caplog.text


def test_bad_limits_name_the_field():
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxLimits(memory_mb=0)


def test_non_root_host_sandboxes_with_a_user_namespace():
    # As a non-root user would run it (bwrap then makes a user namespace), from a copy of the package.
    script = (
        "import os\n"
        "code = 'import os, socket; print(os.getuid(), socket.socket().connect_ex((\"127.0.0.1\", 9)) != 0)'\n"
        "try:\n"
        "    r = sbx.run(code, timeout_s=10)\n"
        "except sbx.SandboxUnavailable as e:\n"
        "    print('refused', e)\n"
        "    raise SystemExit\n"
        "print(r.sandboxed, r.stdout.strip() == f'{os.getuid()} True')\n"
        "print(sbx.run('import time; time.sleep(30)', timeout_s=1).timed_out)\n"
        "print(sbx.run_tests('def f():\\n    return 1', ['assert f() == 1', 'assert f() == 2']).passed)\n"
    )
    out, why = run_as_non_root(script, timeout=60)
    if out is None:
        pytest.skip(why)
    if out.stdout.startswith("refused"):  # code rewards refuse clearly; nothing to contain
        pytest.skip(f"bubblewrap cannot run for a non-root user here: {out.stdout.strip()}")
    assert out.stdout.split("\n")[:3] == ["True True", "True", "[True, False]"], (out.stdout, out.stderr)


def test_tested_code_cannot_reach_the_harness_descriptors():
    code = "import os\ntry:\n    os.listdir(f'/proc/{os.getppid()}/fd')\n    print('OPEN')\nexcept OSError:\n    print('denied')"
    rep = run_tests(code, ["assert True"])
    assert rep.passed == [True] and "denied" in rep.run.stdout and "OPEN" not in rep.run.stdout
