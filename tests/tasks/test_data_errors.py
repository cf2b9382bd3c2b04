"""Every data error of the built-in dataset tasks names the file and the line."""

import json

import pytest

from covey.tasks import get_task


def _write(folder, name, lines: list[bytes]):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"".join(lines))


GOOD_GSM = json.dumps({"question": "Q?", "answer": "x\n#### 18"}).encode() + b"\n"


@pytest.mark.parametrize(
    "line, message",
    [
        (b'{"question": "caf\xe9", "answer": "#### 1"}\n', r"train.jsonl:2: not valid UTF-8"),
        (b'{"question": "Q", "answer": 18}\n', r"train.jsonl:2: field 'answer' must be str, got int 18"),
        (b'{"question": null, "answer": "#### 1"}\n', r"train.jsonl:2: field 'question' must be str, got NoneType"),
        (b'{"question": "Q"}\n', r"train.jsonl:2: missing field\(s\) \['answer'\]"),
    ],
)
def test_gsm8k_data_errors_name_file_and_line(tmp_path, line, message):
    _write(tmp_path / "gsm8k", "train.jsonl", [GOOD_GSM, line])
    with pytest.raises(ValueError, match=message):
        get_task("gsm8k", path=str(tmp_path)).examples("train")


def test_math500_null_problem_is_named(tmp_path):
    _write(tmp_path / "math500", "test.jsonl", [b'{"problem": null, "answer": "1"}\n'])
    with pytest.raises(ValueError, match=r"test.jsonl:1: field 'problem' must be str"):
        get_task("math500", path=str(tmp_path)).examples("test")


def test_math500_numeric_answer_is_read_as_text(tmp_path):
    _write(tmp_path / "math500", "test.jsonl", [b'{"problem": "1 + 17?", "answer": 18}\n'])
    assert get_task("math500", path=str(tmp_path)).examples("test")[0]["answer"] == "18"


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"test_list": ["assert f() is None", 5]}, r"mbpp.jsonl:1: test_list entry 5 is not a string"),
        ({"test_list": ["assert f() is None"], "test_setup_code": 3}, r"mbpp.jsonl:1: test_setup_code 3 is not a string"),
        ({"test_list": ["assert f() is None"], "text": None}, r"mbpp.jsonl:1: field 'text' must be str, got NoneType"),
    ],
)
def test_mbpp_wrong_types_name_file_and_line(tmp_path, extra, message):
    row = {"task_id": 11, "text": "t", "code": "def f(): pass", **extra}
    _write(tmp_path / "mbpp", "mbpp.jsonl", [json.dumps(row).encode() + b"\n"])
    with pytest.raises(ValueError, match=message):
        get_task("mbpp", path=str(tmp_path)).examples("train")
