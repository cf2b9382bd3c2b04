import json

import pytest

from covey.tasks import GSM8K, MATH500, get_task
from covey.tasks._data import SHIPPED, data_file, resolve_data_dir
from covey.tasks.gsm8k import gsm8k_gold


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_gsm8k_reads_shipped_data_and_strips_commas():
    task = get_task("gsm8k", chat=False)
    assert len(task.examples("train")) == 7473 and len(task.examples("test")) == 1319
    golds = [x["answer"] for x in task.examples("test")]
    assert "," not in "".join(golds) and all(g for g in golds)
    first = task.examples("test")[0]
    assert first["answer"] == "18" and first["prompt"].endswith("in the form '#### <number>'.")


def test_gsm8k_gold_after_marker():
    assert gsm8k_gold("a\nb\n#### 1,080") == "1080"
    with pytest.raises(ValueError, match="no '#### <answer>' line"):
        gsm8k_gold("just text")


def test_gsm8k_reward_extraction_order():
    task = GSM8K(limit=1)
    completions = ["so 18\n#### 18", r"\boxed{18}", "The answer is $18.", "it is 18", "#### 17 not 18", "none"]
    assert task.reward(None, completions, answer=["18"] * 6) == [1, 1, 1, 1, 0, 0]


def test_explicit_path_folder_or_file_and_env_var(tmp_path, monkeypatch):
    rows = [{"question": "1+1?", "answer": "#### 2"}, {"question": "2+2?", "answer": "#### 4"}]
    (tmp_path / "gsm8k").mkdir()
    _write(tmp_path / "gsm8k" / "test.jsonl", rows)
    assert [x["answer"] for x in GSM8K(path=tmp_path).examples("test")] == ["2", "4"]
    assert [x["answer"] for x in GSM8K(path=tmp_path / "gsm8k" / "test.jsonl").examples("train")] == ["2", "4"]
    monkeypatch.setenv("COVEY_DATA", str(tmp_path))
    assert resolve_data_dir(None, "gsm8k") == tmp_path / "gsm8k"
    assert len(GSM8K(limit=1).examples("test")) == 1


def test_missing_data_names_the_places_tried(tmp_path):
    with pytest.raises(FileNotFoundError, match="no 'gsm8k' data folder found .*nowhere/gsm8k.*set COVEY_DATA"):
        GSM8K(path=tmp_path / "nowhere").examples("test")


def test_default_is_the_shipped_gzipped_copy_even_with_a_covey_data_lacking_the_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("COVEY_DATA", str(tmp_path))  # holds no gsm8k folder: falls through to the shipped copy
    assert resolve_data_dir(None, "gsm8k") == SHIPPED / "gsm8k"
    assert data_file(None, "gsm8k", "test.jsonl") == SHIPPED / "gsm8k" / "test.jsonl.gz"
    assert (SHIPPED / "gsm8k" / "LICENSE").is_file() and (SHIPPED / "math500" / "LICENSE").is_file()
    assert GSM8K(limit=2).examples("test")[1]["answer"] == "3"


def test_gzipped_user_files_are_read_and_errors_name_the_line(tmp_path):
    import gzip

    (tmp_path / "gsm8k").mkdir()
    with gzip.open(tmp_path / "gsm8k" / "train.jsonl.gz", "wt") as f:
        f.write(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"train.jsonl.gz:2: not valid JSON"):
        GSM8K(path=tmp_path).examples("train")


class _FakeHub:
    """Stands in for datasets.load_dataset (no network in tests): records the calls, serves local rows."""

    def __init__(self, rows):
        self.rows, self.calls = rows, []

    def __call__(self, repo, config=None, split=None):
        from datasets import Dataset

        self.calls.append((repo, config, split))
        if split not in self.rows:
            raise ValueError(f"Unknown split {split!r}")
        return Dataset.from_list(self.rows[split])


def test_hub_path_loads_through_datasets(monkeypatch):
    import datasets

    hub = _FakeHub({"test": [{"question": "1+1?", "answer": "x\n#### 1,002"}]})
    monkeypatch.setattr(datasets, "load_dataset", hub)
    items = GSM8K(path="hub").examples("test")
    assert hub.calls == [("openai/gsm8k", "main", "test")] and items[0]["answer"] == "1002"
    with pytest.raises(FileNotFoundError, match=r"could not load 'me/gsm' .*split 'train'.*Unknown split"):
        GSM8K(path="hub:me/gsm").examples("train")
    hub.rows["test"] = [{"problem": "p", "answer": 7}]
    assert MATH500(path="hub").examples("test")[0]["answer"] == "7" and hub.calls[-1] == ("HuggingFaceH4/MATH-500", None, "test")
    hub.rows["test"] = [{"problem": "p"}]
    with pytest.raises(ValueError, match=r"hub:HuggingFaceH4/MATH-500\[test\]:1: missing field\(s\) \['answer'\]"):
        MATH500(path="hub").examples("test")


def test_malformed_rows_name_file_and_line(tmp_path):
    bad_json = _write(tmp_path / "a.jsonl", [{"question": "q", "answer": "#### 1"}, "", "{not json"])
    with pytest.raises(ValueError, match=r"a.jsonl:3: not valid JSON"):
        GSM8K(path=bad_json).examples("test")
    missing = _write(tmp_path / "b.jsonl", [{"question": "q"}])
    with pytest.raises(ValueError, match=r"b.jsonl:1: missing field\(s\) \['answer'\]"):
        GSM8K(path=missing).examples("test")
    no_marker = _write(tmp_path / "c.jsonl", [{"question": "q", "answer": "#### 1"}, {"question": "q", "answer": "5"}])
    with pytest.raises(ValueError, match=r"c.jsonl:2: GSM8K solution has no"):
        GSM8K(path=no_marker).examples("test")
    not_object = _write(tmp_path / "d.jsonl", ["[1, 2]"])
    with pytest.raises(ValueError, match=r"d.jsonl:1: expected a JSON object, got list"):
        MATH500(path=not_object).examples("test")


def test_math500_reads_500_test_problems_and_has_no_train():
    task = MATH500()
    items = task.examples("test")
    assert len(items) == 500 and items[0]["prompt"][0]["content"].endswith("within \\boxed{}.")
    assert {x["level"] for x in items} == {1, 2, 3, 4, 5}
    with pytest.raises(ValueError, match="no split 'train'; allowed: test"):
        task.examples("train")


def test_math500_reward_accepts_equivalent_latex():
    task = MATH500(limit=1)
    completions = [r"\boxed{\frac{\sqrt{2}}{2}}", r"\boxed{1/\sqrt{2}}", r"answer: \boxed{0.7}", r"\boxed{\sqrt{2}}", "0.7071"]
    gold = [r"\frac{\sqrt2}{2}"] * 5
    assert task.reward(None, completions, answer=gold) == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_math500_golds_verify_against_themselves_when_boxed():
    # every gold answer, written back into a box, must be recognised (catches extraction bugs)
    task = MATH500(limit=60)
    items = task.examples("test")
    scores = task.reward(None, [f"so \\boxed{{{x['answer']}}}" for x in items], answer=[x["answer"] for x in items])
    assert scores == [1.0] * len(items)


def test_bad_params_are_named():
    with pytest.raises(ValueError, match="limit must be a positive int"):
        GSM8K(limit=0)
    with pytest.raises(ValueError, match="order must list modes"):
        MATH500(order=["regex"])
    with pytest.raises(ValueError, match="template must contain '{problem}'"):
        MATH500(template="no slot")


def test_docstring_examples_hold():
    import doctest

    import covey.tasks.gsm8k as g
    import covey.tasks.math500 as m

    for mod in (g, m):
        result = doctest.testmod(mod)
        assert result.attempted >= 3 and result.failed == 0
