"""The program's process: one per problem, shared by its assert tests, replaced after a test that
left it out of step (it hung, crashed, exited or answered with something other than plain data)."""

import pytest

from covey.rewards.sandbox import run_tests
from covey.rewards.sandbox._process import sandbox_status

pytestmark = pytest.mark.skipif(not sandbox_status()[0], reason="bubblewrap is not usable here")


def test_tests_of_one_problem_share_the_program_state_like_mbpp():
    code = "calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls)\n"
    assert run_tests(code, ["assert f(0) == 1", "assert f(0) == 2"], timeout_s=3).passed == [True, True]


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
