"""The program's process: one per problem, loaded once; each assert test is answered by a fork of it as
loaded (nothing a test leaves in memory reaches the next); replaced after a test that left it out of step
(it hung, crashed, exited or answered with something other than plain data)."""

import pytest

from covey.rewards.sandbox import run_tests
from covey.rewards.sandbox._process import sandbox_status

pytestmark = pytest.mark.skipif(not sandbox_status()[0], reason="bubblewrap is not usable here")


def test_each_test_gets_the_program_as_it_was_loaded():
    """MBPP's own evaluation (one exec of program + asserts) shares the program's memory between tests, and so
    did this harness: a program that counts calls (or keeps the inputs of earlier tests) passed by the order
    of the tests. Now every test starts from the loaded program; what it computes within one test stays."""
    code = "calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls)\n"
    assert run_tests(code, ["assert f(0) == 1", "assert f(0) == 2"], timeout_s=3).passed == [True, False]
    assert run_tests(code, ["assert f(0) == 1 and f(0) == 2", "assert f(0) == 1"], timeout_s=3).passed == [True, True]


@pytest.mark.parametrize("first", ["import os\ndef f(x):\n    if x:\n        os._exit(0)\n    return 1\n",
                                   "import sys\ndef f(x):\n    if x:\n        sys.exit(0)\n    return 1\n"])
def test_a_test_that_ends_the_program_gets_a_fresh_one_for_the_next(first):
    rep = run_tests(first, ["assert f(1) == 1", "assert f(0) == 1"], timeout_s=3)
    assert rep.passed == [False, True], (rep.status, rep.messages)


def test_a_hung_call_is_killed_and_the_next_test_gets_a_fresh_program():
    code = "def f(x):\n    while x:\n        pass\n    return 1\n"
    rep = run_tests(code, ["assert f(1) == 1", "assert f(0) == 1"], timeout_s=1)
    assert rep.status == ["timeout", "pass"]


def test_a_non_plain_answer_does_not_leak_into_the_next_test():
    code = "class A:\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return A() if x else 1\n"
    rep = run_tests(code, ["assert f(1) == 1", "assert f(0) == 1"], timeout_s=3)
    assert rep.passed == [False, True] and rep.suspect == [True, False]


def test_a_program_that_fails_to_load_fails_every_assert_with_its_error():
    rep = run_tests("raise ValueError('no config')\ndef f():\n    return 1\n", ["assert f() == 1"] * 2, timeout_s=3)
    assert rep.status == ["error", "error"]
    assert all("failed to load" in m and "no config" in m for m in rep.messages), rep.messages


def test_a_program_that_hangs_while_loading_times_out():
    rep = run_tests("while True:\n    pass\ndef f():\n    return 1\n", ["assert f() == 1"], timeout_s=1)
    assert rep.status == ["timeout"]


# Correct programs the protocol used to fail, and a StopIteration that used to pass (issue 20 #14).
CALLBACKS = (
    "def apply(f, x):\n    return f(x)\n"
    "def twice(f, x):\n    return f(f(x))\n"
    "def inc(x):\n    return x + 1\n"
    "def by(xs, key):\n    return sorted(xs, key=key)\n"
    "def safe(f):\n    try:\n        return f()\n    except ZeroDivisionError:\n        return None\n"
    "def swallow(f):\n    try:\n        f(0)\n    except BaseException:\n        pass\n    return 1\n"
    "_kept = []\ndef keep(f):\n    _kept.append(f)\ndef fire(x):\n    return [f(x) for f in _kept]\n"
    "def ident(x):\n    return x\n"
    "def apply_all(fs, x):\n    out = [f(x) for f in fs]\n    fs.append(None)\n    fs.pop()\n    return out\n"
)


@pytest.mark.parametrize("test, passes", [
    ("assert apply(lambda v: v + 1, 2) == 3", True),
    ("assert apply(len, 'abc') == 3 and apply(str.upper, 'ab') == 'AB'", True),
    ("assert by(['bb', 'a', 'ccc'], key=len) == ['a', 'bb', 'ccc']", True),
    ("assert twice(lambda v: inc(v) * 10, 1) == 210", True),  # the test's function calls the program again
    ("assert twice(lambda v: inc(v) * 10, 1) == 120", False),
    ("assert safe(lambda: 1 / 0) is None", True),  # the program catches the test function's exception
    ("try:\n    apply(lambda: int('x'), None)\nexcept TypeError:\n    pass\nelse:\n    assert False", True),
    ("def check(v):\n    assert v == 5\nassert swallow(check) == 1", False),  # a failed assert is never swallowed
    ("assert apply(lambda v: object(), 1) is None", False),  # the test's function returned no plain data
    ("f = lambda v: v\nassert ident(f) is f and ident([f, 1])[0] is f", True),  # given back: the test's own
    ("fs = [len]\nassert apply_all(fs, 'ab') == [2] and fs[0] is len", True),  # a list argument keeps it too
])  # fmt: skip
def test_the_test_may_pass_its_functions_to_the_program(test, passes):
    rep = run_tests(CALLBACKS, [test], timeout_s=5)
    assert rep.passed == [passes], (rep.status, rep.messages)


def test_a_function_kept_from_an_earlier_test_is_gone_with_that_test():
    # each test's copy of the program starts as loaded: what the first test made it keep is not there
    rep = run_tests(CALLBACKS, ["keep(lambda v: v + 1)\nassert fire(1) == [2]", "assert fire(1) == []"], timeout_s=5)
    assert rep.passed == [True, True], (rep.status, rep.messages)


def test_the_same_object_of_the_program_is_the_same_object_in_the_test():
    code = "class S:\n    pass\n_s = S()\ndef get():\n    return _s\ndef new():\n    return S()\n"
    rep = run_tests(code, ["assert get() is get()", "assert new() is not new()", "a = get()\nassert [a, a][1] is get()"], timeout_s=5)
    assert rep.passed == [True, True, True], (rep.status, rep.messages)


def test_ints_of_any_length_cross_and_print():
    import math
    import sys

    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        big = str(math.factorial(2000))  # 5736 digits (Python's default limit is 4300)
    finally:
        sys.set_int_max_str_digits(limit)
    code = "import math\ndef f(n):\n    return math.factorial(n)\ndef digits(n):\n    return sum(map(int, str(math.factorial(n))))\n"
    tests = ["import math\nassert f(3000) == math.factorial(3000)", "assert digits(3000) == 37602",
             "assert f(4) == 24 and f(-0 + 1) == 1", f"assert f(2000) == {big}"]  # a long literal in the test too
    assert run_tests(code, tests, timeout_s=5).passed == [True] * 4
    rep = run_tests("import math\nprint(math.factorial(2000))", {"io": [["", big]]})
    assert rep.passed == [True], rep.messages


def test_a_stop_iteration_from_the_program_does_not_end_the_tests_iteration_early():
    for code in ("def f(x):\n    raise StopIteration\n", "def f(x):\n    return next(iter([]))\n"):
        rep = run_tests(code, ["assert all(map(f, [1, 2]))", "assert not any(f(x) for x in [1])"], timeout_s=5)
        assert rep.passed == [False, False] and "StopIteration" in rep.messages[0], (rep.status, rep.messages)
