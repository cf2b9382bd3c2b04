"""The `dataset` task: your own data from every supported source, and every malformed row named."""

import json

import pytest

from covey.tasks import get_task

ROWS = [
    {"prompt": "What is 1 + 1?", "answer": "2", "level": 1},
    {"prompt": [{"role": "user", "content": "What is 2 + 2?"}], "answer": 4, "level": 2},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _check_items(task):
    items = task.examples("train")
    assert [it["id"] for it in items] == [0, 1]
    assert items[0]["prompt"] == "What is 1 + 1?" and items[1]["prompt"][0]["role"] == "user"
    assert items[1]["answer"] == "4" and items[0]["level"] == 1  # answers as strings; other columns kept
    assert task.reward(["p", "p"], ["so 2", "\\boxed{5}"], answer=["2", "4"]) == [1.0, 0.0]


def test_jsonl_parquet_save_to_disk_and_in_memory_sources(tmp_path):
    from datasets import Dataset, DatasetDict

    _check_items(get_task("dataset", path=str(_jsonl(tmp_path / "d.jsonl", ROWS))))
    flat = [{"prompt": "What is 1 + 1?", "answer": "2", "level": 1}, {"prompt": "What is 2 + 2?", "answer": "4", "level": 2}]
    Dataset.from_list(flat).to_parquet(str(tmp_path / "d.parquet"))
    task = get_task("dataset", path=str(tmp_path / "d.parquet"))
    assert [it["prompt"] for it in task.examples()] == ["What is 1 + 1?", "What is 2 + 2?"]
    DatasetDict({"train": Dataset.from_list(flat), "test": Dataset.from_list(flat[:1])}).save_to_disk(str(tmp_path / "dd"))
    task = get_task("dataset", path=str(tmp_path / "dd"), eval_path=str(tmp_path / "dd"), eval_split="test")
    assert len(task.examples("train")) == 2 and len(task.examples("test")) == 1
    _check_items(get_task("dataset", rows=ROWS))
    chat = [{"prompt": [{"role": "user", "content": "Hi"}], "answer": "1"}] * 2
    assert get_task("dataset", rows=Dataset.from_list(chat)).examples()[1]["prompt"][0]["content"] == "Hi"


def test_system_prompt_ids_and_verifier_choices(tmp_path):
    rows = [{"id": "q-7", "question": "Hi?", "tag": "x"}]
    task = get_task("dataset", rows=rows, prompt_key="question", system_prompt="Be brief.")
    item = task.examples()[0]
    assert item["id"] == 0 and item["row_id"] == "q-7" and item["tag"] == "x"
    assert item["prompt"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    assert task.reward is None  # no answer column: only the configured rewards score
    assert get_task("dataset", rows=ROWS, verifier="none").reward is None
    with pytest.raises(ValueError, match="verifier=math needs an 'answer' column"):
        get_task("dataset", rows=rows, prompt_key="question", verifier="math")
    with pytest.raises(ValueError, match="no 'test' data"):
        task.examples("test")


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"prompt": "ok", "answer": "1"}\n{"prompt": "caf\xe9"}\n', r"d.jsonl:2: not valid UTF-8"),
        (b'{"prompt": "ok"}\n\n{"prompt": null}\n', r"d.jsonl:3: 'prompt' is null"),
        (b'{"prompt": "ok", "answer": [18]}\n', r"d.jsonl:1: 'answer' must be a string or a number"),
        (b'{"question": "ok"}\n', r"d.jsonl:1: no 'prompt' column"),
        (b'{"prompt": 7}\n', r"d.jsonl:1: 'prompt' must be a string or a list of chat messages"),
        (b'{"prompt": [{"role": "user"}]}\n', r"d.jsonl:1: message 0 of 'prompt'"),
        (b'{"prompt": "ok"}\nnot json\n', r"d.jsonl:2: not valid JSON"),
        (b"[1, 2]\n", r"d.jsonl:1: expected a JSON object"),
    ],
)
def test_malformed_rows_name_the_file_and_line(tmp_path, content, message):
    (tmp_path / "d.jsonl").write_bytes(content)
    with pytest.raises(ValueError, match=message):
        get_task("dataset", path=str(tmp_path / "d.jsonl"))


def test_missing_sources_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        get_task("dataset", path=str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match="not in the local HF cache"):
        get_task("dataset", path="some-org/some-dataset-that-is-not-cached")
    with pytest.raises(ValueError, match="exactly one of path"):
        get_task("dataset")


def test_json_array_with_mixed_prompt_types_and_its_bad_bytes(tmp_path):
    (tmp_path / "d.json").write_text(json.dumps(ROWS))
    _check_items(get_task("dataset", path=str(tmp_path / "d.json")))
    (tmp_path / "bad.json").write_bytes(b'[{"prompt": "ok"},\n {"prompt": "caf\xe9"}]\n')
    with pytest.raises(ValueError, match=r"bad.json:2: not valid UTF-8 \(byte 0xe9"):
        get_task("dataset", path=str(tmp_path / "bad.json"))
    (tmp_path / "d.csv").write_text("prompt,answer,level\nWhat is 1 + 1?,2,1\nWhat is 2 + 2?,4,2\n")
    items = get_task("dataset", path=str(tmp_path / "d.csv")).examples()
    assert [(it["prompt"], it["answer"], it["level"]) for it in items] == [("What is 1 + 1?", "2", 1), ("What is 2 + 2?", "4", 2)]
    (tmp_path / "nul.json").write_text(json.dumps([{"prompt": "ok"}, {"prompt": None}]))
    with pytest.raises(ValueError, match=r"nul.json: row 2: 'prompt' is null"):
        get_task("dataset", path=str(tmp_path / "nul.json"))


def _fake_hub_cache(tmp_path):
    """A datasets cache holding hub dataset `me/tiny` as `load_dataset` would have left it online."""
    import glob
    import os
    import shutil

    import datasets

    cache = tmp_path / "cache"
    datasets.load_dataset("json", data_files={"train": str(_jsonl(tmp_path / "t.jsonl", ROWS[:1] * 3))}, cache_dir=str(cache))
    shutil.copytree(glob.glob(str(cache / "json" / "*"))[0], cache / "me___tiny" / "default")
    for f in glob.glob(str(cache / "me___tiny" / "**" / "json-train.arrow"), recursive=True):
        os.rename(f, f.replace("json-train", "tiny-train"))
    return cache


def test_cached_hub_dataset_loads_offline_and_a_missing_one_fails_fast(tmp_path, monkeypatch):
    import time

    import datasets

    import huggingface_hub.constants as hub

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(_fake_hub_cache(tmp_path)))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)  # as on a machine with network
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    task = get_task("dataset", path="me/tiny")
    assert [it["prompt"] for it in task.examples()] == ["What is 1 + 1?"] * 3 and task.reward is not None
    assert hub.HF_HUB_OFFLINE is False and datasets.config.HF_HUB_OFFLINE is False  # switched back after the call
    start = time.monotonic()
    with pytest.raises(ValueError, match="'me/absent': not a local file or folder, and not in the local HF cache"):
        get_task("dataset", path="me/absent")
    assert time.monotonic() - start < 5  # no network retries (they took ~25 s)


def test_max_prompt_tokens_and_limit_are_checked():
    assert get_task("dataset", rows=ROWS, max_prompt_tokens=64).max_prompt_tokens == 64
    assert len(get_task("dataset", rows=ROWS, limit=1).examples()) == 1
    for bad in (0, -3, 2.5, True, "64"):
        with pytest.raises(ValueError, match="max_prompt_tokens"):
            get_task("dataset", rows=ROWS, max_prompt_tokens=bad)


def test_verifier_reads_the_named_answer_column():
    task = get_task("dataset", rows=[{"prompt": "1 + 1?", "gold": 2, "answer": "not the gold"}], answer_key="gold")
    assert task.examples()[0]["gold"] == "2"
    assert task.reward(["p", "p"], ["\\boxed{2}", "\\boxed{3}"], gold=["2", "2"], answer=["x", "x"]) == [1.0, 0.0]


def test_columns_that_would_be_overwritten_are_refused():
    with pytest.raises(ValueError, match=r"rows\[0\]: column 'prompt' would be overwritten by the prompt covey builds from 'question'"):
        get_task("dataset", rows=[{"question": "Q?", "prompt": "something else"}], prompt_key="question")
    with pytest.raises(ValueError, match=r"rows\[0\]: column 'row_id' would be overwritten by the renamed 'id' column"):
        get_task("dataset", rows=[{"prompt": "Q?", "id": 3, "row_id": 9}])
    assert get_task("dataset", rows=[{"prompt": "Q?", "row_id": 9}]).examples()[0]["row_id"] == 9  # no 'id': kept


def test_answer_in_some_rows_only_is_an_error_unless_verifier_none(tmp_path):
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b"}, {"prompt": "c", "answer": "3"}]
    with pytest.raises(ValueError, match=r"d.jsonl:2: no 'answer' column, which 2 of 3 rows have"):
        get_task("dataset", path=str(_jsonl(tmp_path / "d.jsonl", rows)))
    task = get_task("dataset", rows=rows + [{"prompt": "d", "answer": [1, 2]}], verifier="none")  # plain columns
    assert task.reward is None and task.examples()[3]["answer"] == [1, 2] and "answer" not in task.examples()[1]
