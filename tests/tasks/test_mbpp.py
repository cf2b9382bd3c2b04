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


def test_sanitized_subset_splits_prompts_and_imports():
    task = get_task("mbpp", subset="sanitized", chat=False)
    test, train = task.examples("test"), task.examples("train")
    assert len(test) == 257 and len(train) == 170 and all(11 <= it["id"] <= 510 for it in test)
    first = test[0]
    assert first["id"] == 11 and "Write a python function to remove first and last occurrence" in first["prompt"]
    with_imports = next(it for it in test + train if it["tests"]["asserts"][0].startswith("import math\n"))
    good = "```python\n" + with_imports["answer"] + "\n```"
    assert task.reward(None, [good], tests=[with_imports["tests"]]) == [1.0]
    with pytest.raises(ValueError, match="subset must be 'full' or 'sanitized'"):
        get_task("mbpp", subset="plus")


def test_hub_path_concatenates_every_split(monkeypatch):
    import datasets

    calls = []

    def fake_load(repo, config=None, split=None):
        calls.append((repo, config, split))
        row = {"task_id": {"train": 600, "test": 11, "validation": 511, "prompt": 1}[split], "text": "t",
               "code": "def f():\n    return 1", "test_list": ["assert f() == 1"], "test_setup_code": ""}
        return datasets.Dataset.from_list([row])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    task = get_task("mbpp", path="hub", chat=False)
    assert [it["id"] for it in task.examples("train")] == [1, 511, 600] and [it["id"] for it in task.examples("test")] == [11]
    assert calls == [("google-research-datasets/mbpp", "full", s) for s in ("train", "test", "validation", "prompt")]


def test_missing_data_dir_is_reported(tmp_path):
    with pytest.raises(FileNotFoundError, match="COVEY_DATA"):
        get_task("mbpp", path=str(tmp_path))


def test_bad_show_tests_is_named():
    with pytest.raises(ValueError, match="show_tests"):
        get_task("mbpp", show_tests=5)
