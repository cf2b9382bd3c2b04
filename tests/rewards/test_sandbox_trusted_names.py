"""The test reads builtins, stdlib modules and setup helpers with their trusted meaning (issue 12).

The test runs in a process the program cannot reach, but it still reads names: a program that
redefines `abs`, a setup checker such as HumanEval's ``poly``, or names a class ``math`` must not
decide the verdict through them. Objects of the program's own classes have no truth value and no
comparisons in the test. Each WRONG program below passed before; none may pass now.
"""

import pytest

from covey.rewards.sandbox import CodeTests, run_tests
from covey.rewards.sandbox._process import sandbox_status

pytestmark = pytest.mark.skipif(not sandbox_status()[0], reason="bubblewrap is not usable here")

SHADOWING = {
    "abs": ("def abs(x):\n    return 0\ndef area(r):\n    return 1\n", "assert abs(area(2) - 12.566) < 1e-3"),
    "set": ("def set(*a):\n    return 0\ndef f(x):\n    return [9]\n", "assert set(f(1)) == set([1, 2])"),
    "sorted": ("def sorted(*a, **k):\n    return 0\ndef f(x):\n    return [9]\n", "assert sorted(f(1)) == sorted([1, 2])"),
    "all": ("def all(*a):\n    return True\ndef f(x):\n    return [9]\n", "assert all(a == b for a, b in zip(f(1), [1, 2]))"),
    "round": ("def round(*a):\n    return 3\ndef f(x):\n    return 9.9\n", "assert round(f(1), 2) == 3"),
    "len as a value": ("len = lambda x: 2\ndef f(x):\n    return [1]\n", "assert len(f(1)) == 2"),
    "class named math": (
        "class math:\n    @staticmethod\n    def isclose(*a, **k):\n        return True\ndef f(x):\n    return 0.0\n",
        "assert math.isclose(f(1), 2.0)",
    ),
    "patched module named math": (
        "import math\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 0.0\n",
        "assert math.isclose(f(1), 2.0)",
    ),
}


@pytest.mark.parametrize("name", sorted(SHADOWING))
def test_program_cannot_redefine_a_builtin_or_stdlib_module_the_test_uses(name):
    code, test = SHADOWING[name]
    rep = run_tests(code, [test], timeout_s=3)
    assert rep.passed == [False], (name, rep.status, rep.messages)


def test_program_cannot_redefine_a_checker_the_setup_defines():
    # HumanEval/32 shape: the prompt (setup) defines poly, the test checks find_zero with it.
    setup = "import math\ndef poly(xs, x):\n    return sum(c * math.pow(x, i) for i, c in enumerate(xs))\ndef find_zero(xs):\n    pass\n"
    test = "def check(candidate):\n    assert math.fabs(poly([1, 2], candidate([1, 2]))) < 1e-4\ncheck(find_zero)"
    cheat = "def poly(xs, x):\n    return 0\ndef find_zero(xs):\n    return 7.0\n"
    honest = "def find_zero(xs):\n    return -xs[0] / xs[1]\n"
    tests = {"setup": setup, "asserts": [test], "functions": ["find_zero"]}
    assert run_tests(cheat, tests, timeout_s=3).passed == [False]
    assert run_tests(honest, tests, timeout_s=3).passed == [True]


def test_program_cannot_redefine_the_setup_encoder_it_is_tested_against():
    # HumanEval/38 shape: decode(encode(s)) == s with the setup's encode.
    setup = "def encode(s):\n    return s[::-1]\ndef decode(s):\n    pass\n"
    tests = {"setup": setup, "asserts": ["assert decode(encode('abc')) == 'abc'"], "functions": ["decode"]}
    assert run_tests("def encode(s):\n    return s\ndef decode(s):\n    return s\n", tests, timeout_s=3).passed == [False]
    assert run_tests("def decode(s):\n    return s[::-1]\n", tests, timeout_s=3).passed == [True]


@pytest.mark.parametrize("test", ["assert is_prime(8)", "assert is_prime(8) != False", "assert not is_prime(8) == 0",
                                  "assert is_prime(8) >= 0"])
def test_an_object_of_the_program_has_no_truth_value_or_comparison(test):
    code = "class Yes:\n    def __bool__(self):\n        return True\ndef is_prime(n):\n    return Yes()\n"
    rep = run_tests(code, [test], timeout_s=3)
    assert rep.passed == [False] and rep.status == ["fail"], (rep.status, rep.messages)
    assert "only plain data can be checked" in rep.messages[0]


def test_a_test_that_catches_exception_does_not_hide_a_crash_or_non_plain_result():
    test = "try:\n    f(-1)\nexcept Exception:\n    pass\nelse:\n    assert False"
    exits = "import os\ndef f(x):\n    os._exit(0)\n"
    assert run_tests(exits, [test], timeout_s=3).status == ["crash"]
    assert run_tests("def f(x):\n    raise ValueError(x)\n", [test], timeout_s=3).passed == [True]


def test_declared_entry_point_may_carry_a_builtins_name():
    # MBPP 126 tests a function named sum: declared, the program's sum is tested.
    code = "def sum(a, b):\n    return a + b + 1\n"
    assert run_tests(code, {"asserts": ["assert sum(1, 2) == 4"], "functions": ["sum"]}, timeout_s=3).passed == [True]
    rep = run_tests(code, ["assert sum(1, 2) == 4"], timeout_s=3)  # undeclared: the builtin, and a hint why
    assert rep.passed == [False] and "tests['functions']" in rep.messages[0], rep.messages


def test_honest_program_keeps_its_imports_helpers_and_classes():
    code = (
        "import math\n"
        "def helper(x):\n    return x * 2\n"
        "def area(r):\n    return math.pi * r * r\n"
        "class Node:\n    def __init__(self, v):\n        self.v, self.left = v, None\n"
        "def depth(n):\n    return 0 if n is None else 1 + depth(n.left)\n"
    )
    tests = [
        "assert math.isclose(area(1), 3.14159, rel_tol=1e-4)",
        "assert helper(2) == 4 and abs(area(1) - math.pi) < 1e-9",
        "root = Node(1)\nroot.left = Node(2)\nassert depth(root) == 2 and root.left.v == 2 and root.left.left is None",
    ]
    rep = run_tests(code, tests, timeout_s=5)
    assert rep.passed == [True, True, True], list(zip(rep.status, rep.messages))


WRONG = "def add(a, b):\n    return 0\n"
PASS_LINE = '{"i": 0, "passed": true, "status": "pass", "message": "", "suspect": false}\\n'
MORE_ESCAPES = {  # from the list; the verdict never reads the program's output, so all fail
    "atexit prints a pass record": f"import atexit, os\natexit.register(lambda: [os.write(fd, b'{PASS_LINE}') for fd in (1, 2)])\n" + WRONG,
    "thread writes to every descriptor later": (
        "import os, threading, time\n"
        "def spam():\n    time.sleep(0.05)\n    for fd in range(64):\n"
        f"        try: os.write(fd, b'{PASS_LINE}')\n        except OSError: pass\n"
        "threading.Thread(target=spam).start()\n" + WRONG
    ),
    "patch json and sys.stdout": "import json, sys, io\njson.dumps = lambda *a, **k: '{}'\nsys.stdout = io.StringIO()\n" + WRONG,
    "raise KeyboardInterrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "raise a BaseException subclass": "class Out(BaseException): pass\ndef add(a, b):\n    raise Out()\n",
    "return unittest.mock.ANY": "from unittest.mock import ANY\ndef add(a, b):\n    return ANY\n",
    "raise StopIteration": "def add(a, b):\n    raise StopIteration\n",
    "read the test process's memory": (
        "import os\ndef add(a, b):\n    open(f'/proc/{os.getppid()}/mem', 'rb')\n    return 0\n"
    ),
}


@pytest.mark.parametrize("name", sorted(MORE_ESCAPES))
def test_more_escape_attempts_do_not_pass(name):
    rep = run_tests(MORE_ESCAPES[name], ["assert add(1, 2) == 5", "assert add(2, 2) == 4"], timeout_s=3)
    assert rep.passed == [False, False], (name, rep.status, rep.messages)


def test_the_test_process_memory_is_closed_to_the_program():
    code = "import os\ndef probe():\n    try:\n        open(f'/proc/{os.getppid()}/mem', 'rb').read(1)\n        return 'open'\n    except OSError:\n        return 'denied'\n"
    assert run_tests(code, ["assert probe() == 'denied'"], timeout_s=3).passed == [True]


OBJECT_TRICKS = {  # name: (program, test); the program is wrong each time
    "a name the setup imported": ("def isclose(*a, **k):\n    return True\ndef f(x):\n    return 0.0\n",
                                  {"setup": "from math import isclose", "asserts": ["assert isclose(f(1), 2.0)"]}),
    "__eq__ from a base class": ("class B:\n    def __eq__(self, o):\n        return True\nclass T(B):\n    pass\n"
                                 "def f(n):\n    return T()\n", ["assert f(8) == 3"]),
    "reflected __eq__": ("class T:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
                         "def f(n):\n    return T()\n", ["assert 3 == f(8)"]),
    "a method returns an always-equal object": (
        "class T:\n    def __eq__(self, o):\n        return True\nclass S:\n    def get(self):\n        return T()\n"
        "def f(n):\n    return S()\n", ["assert f(8).get() == 3"]),
    "__lt__ and __abs__ on own object": (
        "class T:\n    def __lt__(self, o):\n        return True\n    def __sub__(self, o):\n        return self\n"
        "    def __abs__(self):\n        return self\ndef f(n):\n    return T()\n", ["assert abs(f(8) - 3) < 1e-6"]),
}


@pytest.mark.parametrize("name", sorted(OBJECT_TRICKS))
def test_object_and_setup_tricks_do_not_pass(name):
    code, tests = OBJECT_TRICKS[name]
    rep = run_tests(code, tests, timeout_s=3)
    assert rep.passed == [False], (name, rep.status, rep.messages)


def test_functions_are_read_from_a_tests_dict():
    assert CodeTests.coerce({"asserts": ["assert f()"], "functions": ["f"]}).functions == ("f",)
    assert CodeTests.coerce({"asserts": ["assert f()"], "functions": "f"}).functions == ("f",)
    with pytest.raises(ValueError, match="allowed: setup, asserts, io, functions"):
        CodeTests.coerce({"asserts": [], "entry": "f"})
