"""MBPP task: splits, items, prompts, and verification in the sandbox."""

import pytest

from covey.tasks import get_task


@pytest.fixture(scope="module")
def task():
    return get_task("mbpp", chat=False)


def test_official_test_split_is_task_ids_11_to_510(task):
    test_ids = [it["id"] for it in task.examples("test")]
    train_ids = [it["id"] for it in task.examples("train")]
    assert test_ids == list(range(11, 511))
    assert len(train_ids) == 474 and not set(train_ids) & set(test_ids)


def test_prompt_asks_for_a_python_block_and_shows_one_test(task):
    item = task.examples("test")[0]
    assert "```python" in item["prompt"]
    assert item["tests"]["asserts"][0] in item["prompt"] and item["tests"]["asserts"][1] not in item["prompt"]
    assert get_task("mbpp", chat=True).examples("test")[0]["prompt"][0]["role"] == "user"


def test_reference_solutions_pass_and_wrong_code_fails(task):
    items = [it for it in task.examples("test") if it["id"] in (11, 12, 13)]
    good = ["```python\n" + it["answer"] + "\n```" for it in items]
    assert task.reward(None, good, tests=[it["tests"] for it in items]) == [1.0, 1.0, 1.0]
    assert task.reward(None, ["```python\ndef remove_Occ(s, ch):\n    return s\n```"], tests=[items[0]["tests"]]) == [0.0]


def test_setup_code_runs_after_the_solution(task):
    # task 367's test_setup_code builds trees from the solution's Node class
    item = next(it for it in task.examples("test") if it["id"] == 367)
    assert task.reward(None, ["```python\n" + item["answer"] + "\n```"], tests=[item["tests"]]) == [1.0]


def test_missing_data_dir_is_reported(tmp_path):
    with pytest.raises(FileNotFoundError, match="COVEY_DATA"):
        get_task("mbpp", path=str(tmp_path))


def test_bad_show_tests_is_named():
    with pytest.raises(ValueError, match="show_tests"):
        get_task("mbpp", show_tests=5)
