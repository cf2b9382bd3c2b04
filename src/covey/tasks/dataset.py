"""`dataset`: train and evaluate on your own data (JSONL, JSON, Parquet, a `save_to_disk` folder, a
hub dataset already in the local cache, or in-memory rows), loaded through HF `datasets` (JSONL
by covey's own line reader, so a row may mix prompt types with the next and errors name the line).

    task: {name: dataset, params: {path: data/train.jsonl, eval_path: data/test.jsonl,
                                   prompt_key: question, system_prompt: "Be brief."}}

Each row needs a prompt under `prompt_key`: a string or a chat message list
(``[{"role": "user", "content": ...}]``; the rollout applies the chat template). Every other column
reaches reward functions as a keyword argument (TRL's convention). covey assigns item ids 0..n-1; a
column named ``id`` is kept as ``row_id``. With a column `answer_key` (default ``answer``) the task's
verifier is the final-answer math check (reward column ``accuracy``); without one (or with
``verifier: none``) the run uses only the configured rewards.

Images (a vision-language policy, docs/vlm.md): columns ``image`` / ``images`` (paths, bytes, PIL images,
a `datasets` Image feature) and ``video`` (frames with timestamps), or {"type": "image"} parts in chat
messages; `covey.tasks._images` checks them when the data loads and puts them into the prompt. They
also reach reward functions as keyword arguments, as given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from covey.models.chat import check_role
from covey.tasks._common import FinalAnswerTask
from covey.tasks._data import read_jsonl
from covey.tasks._images import IMAGE_COLUMNS, ImageColumnKinds, decode_datasets_images, place_images
from covey.tasks.registry import register_task

__all__ = ["DatasetTask", "load_rows"]

_FILE_TYPES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class _MathVerifier(FinalAnswerTask):
    """The verifier alone (small to send to reward workers; the rows stay behind), reading the gold
    answer from column `answer_key`."""

    order = ("boxed", "gsm8k", "answer_is", "last_number")

    def __init__(self, answer_key: str = "answer"):
        self.answer_key = answer_key

    def reward(self, prompts, completions, **columns) -> list[float | None]:
        if self.answer_key not in columns:
            raise ValueError(f"task 'dataset': the math verifier needs the {self.answer_key!r} column")
        return super().reward(prompts, completions, answer=columns[self.answer_key])


@register_task("dataset")
class DatasetTask:
    """Your own prompts. Parameters (config `task.params`, or keyword arguments from Python):

    path / rows:            training data: a file or folder path (or hub id in the local cache), or
                            in-memory rows (list of dicts or a `datasets.Dataset`, Python API).
    eval_path / eval_rows:  held-out data for `covey eval` and `eval.size` (split "test").
    split / eval_split:     the split to take from a saved DatasetDict or a hub dataset.
    prompt_key:             the prompt column (str or chat messages).
    system_prompt:          prepended as a system message (a string prompt becomes a chat).
    answer_key:             the gold-answer column of the math verifier.
    verifier:               "auto" (math when `answer_key` is a column), "math", or "none".
    max_prompt_tokens:      the longest prompt (chat-templated tokens) to train on; the trainer
                            also caps it at the model's context minus `sampling.max_new_tokens`.
                            A longer prompt fails at start naming the item, or is skipped and
                            counted with `task.on_long_prompt: skip` (`covey.samplers.lengths`).
    limit:                  keep the first n rows of each split.
    completion_key:         a column of target completions: `covey sft` imitates them (the task's
                            demonstrations); without it the task has none.
    """

    name = "dataset"
    answer_format = "Whatever your reward functions check; with an answer column, a final answer (\\boxed{}, '####', 'The answer is', or the last number)."

    def __init__(self, path: str | os.PathLike | None = None, *, rows: Any = None, prompt_key: str = "prompt",
                 split: str = "train", eval_path: str | os.PathLike | None = None, eval_rows: Any = None,
                 eval_split: str = "test", system_prompt: str | None = None, answer_key: str = "answer",
                 verifier: str = "auto", max_prompt_tokens: int | None = None, limit: int | None = None,
                 completion_key: str | None = None):  # fmt: skip
        if (path is None) == (rows is None):
            raise ValueError("task 'dataset' needs exactly one of path=... (a file, folder or cached hub id) or rows=...")
        if verifier not in ("auto", "math", "none"):
            raise ValueError(f"task 'dataset': verifier must be auto, math or none, got {verifier!r}")
        for key, val in (("limit", limit), ("max_prompt_tokens", max_prompt_tokens)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
                raise ValueError(f"task 'dataset': {key} must be a positive int, got {val!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"task 'dataset': system_prompt must be a string, got {type(system_prompt).__name__}")
        self.prompt_key, self.answer_key, self.system_prompt = prompt_key, answer_key, system_prompt
        self.max_prompt_tokens, self.verifier = max_prompt_tokens, verifier
        self._splits: dict[str, list[dict]] = {"train": self._items(path, rows, split, limit)}
        if eval_path is not None or eval_rows is not None:
            self._splits["test"] = self._items(eval_path, eval_rows, eval_split, limit)
        answered = {split: all(answer_key in it for it in items) for split, items in self._splits.items()}
        if verifier != "none" and len(set(answered.values())) > 1:  # else the verifier would switch off silently
            has, lacks = ("train", "eval") if answered["train"] else ("eval", "train")
            raise ValueError(f"task 'dataset': the {has} rows have an {answer_key!r} column and the {lacks} rows do not; "
                             f"the final-answer check (reward accuracy, held-out accuracy) needs it in both: add it to the "
                             f"{lacks} rows, or set verifier=none to score with your rewards only")  # fmt: skip
        has_answer = all(answered.values())
        if verifier == "math" and not has_answer:
            raise ValueError(f"task 'dataset': verifier=math needs an {answer_key!r} column in every row")
        self.reward = _MathVerifier(answer_key).reward if verifier != "none" and has_answer else None
        self.extract_answer = _MathVerifier(answer_key).extract_answer if self.reward is not None else None
        self.reward_origin = (f"added because the data has an {answer_key!r} column; task.params.verifier=none turns it off"
                              if verifier == "auto" else None)  # fmt: skip
        if completion_key is not None:
            self.demonstration = self._demonstration
            bad = next((it for items in self._splits.values() for it in items if not isinstance(it.get(completion_key), str)), None)
            if bad is not None:
                raise ValueError(f"task 'dataset': completion_key={completion_key!r}, but item {bad['id']} has no string in that column")
        self.completion_key = completion_key

    def _demonstration(self, item: dict) -> str:
        return item[self.completion_key]

    def has_split(self, split: str) -> bool:
        return split in self._splits

    def examples(self, split: str = "train") -> Sequence[dict]:
        if split not in self._splits:
            raise ValueError(f"task 'dataset' has no {split!r} data: give eval_path=... (or eval_rows) for a held-out split"
                             if split == "test" else f"task 'dataset' has splits {sorted(self._splits)}, not {split!r}")  # fmt: skip
        return self._splits[split]

    # ------------------------------------------------------------------ loading
    def _items(self, path, rows, split: str, limit: int | None) -> list[dict]:
        located = load_rows(path, split) if path is not None else [(f"rows[{i}]", r) for i, r in enumerate(_as_list(rows))]
        if not located:
            raise ValueError(f"{path if path is not None else 'rows'}: no rows")
        located = located[:limit] if limit else located
        base = None if path is None else Path(path).expanduser() if Path(path).expanduser().is_dir() else Path(path).expanduser().parent
        kinds = ImageColumnKinds()  # an image column holds one kind of image in every row
        items = [self._item(i, row, where, base, kinds) for i, (where, row) in enumerate(located)]
        with_answer = sum(self.answer_key in it for it in items)
        if self.verifier != "none" and 0 < with_answer < len(items):  # else the verifier would switch off silently
            where = next(w for (w, _), it in zip(located, items) if self.answer_key not in it)
            raise ValueError(f"{where}: no {self.answer_key!r} column, which {with_answer} of {len(items)} rows have; "
                             "give every row an answer, or set verifier=none to score with your rewards only")  # fmt: skip
        return items

    def _item(self, i: int, row: Any, where: str, base: Path | None = None, kinds: ImageColumnKinds | None = None) -> dict:
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a mapping of columns, got {type(row).__name__}")
        if self.prompt_key not in row:
            raise ValueError(f"{where}: no {self.prompt_key!r} column (columns: {sorted(row)}); set prompt_key=...")
        prompt = _check_prompt(row[self.prompt_key], where, self.prompt_key)
        if self.system_prompt is not None:
            msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            prompt = [{"role": "system", "content": self.system_prompt}] + msgs
        if any(row.get(c) is not None for c in IMAGE_COLUMNS) or not isinstance(prompt, str):
            row = decode_datasets_images(row)  # PIL images in the columns too, as TRL's rewards get them
            prompt = place_images(prompt, row, where, base, kinds or ImageColumnKinds())
        verified = self.verifier != "none" and self.answer_key in row  # a plain column otherwise
        if verified:
            ans = row[self.answer_key]
            if isinstance(ans, bool) or not isinstance(ans, (str, int, float)):
                raise ValueError(f"{where}: {self.answer_key!r} must be a string or a number, got {type(ans).__name__} {ans!r}")
        if self.prompt_key != "prompt" and "prompt" in row:
            raise ValueError(f"{where}: column 'prompt' would be overwritten by the prompt covey builds from {self.prompt_key!r}; rename it")
        if "id" in row and "row_id" in row:  # covey's ids are 0..n-1; a column 'id' is kept as 'row_id'
            raise ValueError(f"{where}: column 'row_id' would be overwritten by the renamed 'id' column; rename it")
        item = {"id": i, "prompt": prompt}
        for k, v in row.items():
            if k != self.prompt_key:
                item["row_id" if k == "id" else k] = str(v) if verified and k == self.answer_key else v
        return item


def _check_prompt(prompt: Any, where: str, key: str):
    if prompt is None:
        raise ValueError(f"{where}: {key!r} is null")
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError(f"{where}: {key!r} is an empty string")
        return prompt
    if isinstance(prompt, (list, tuple)) and prompt:
        msgs = []
        for j, m in enumerate(prompt):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not _content_ok(m.get("content")):
                raise ValueError(f"{where}: message {j} of {key!r} must be {{'role': str, 'content': str or a list of "
                                 f"{{'type': 'text', 'text': str}} / {{'type': 'image'}} parts}}, got {m!r}"[:400])  # fmt: skip
            check_role(m["role"], f"{where}: message {j} of {key!r}")
            content = m["content"] if isinstance(m["content"], str) else [dict(p) for p in m["content"]]
            msgs.append({"role": m["role"], "content": content})
        return msgs
    raise ValueError(f"{where}: {key!r} must be a string or a list of chat messages, got {type(prompt).__name__} {prompt!r}")


def _content_ok(content) -> bool:
    """A message content: a string, or TRL's list of text / image parts (an image part's payload, if any,
    is checked with the row's images)."""
    if isinstance(content, str):
        return True
    if not isinstance(content, (list, tuple)) or not content:
        return False
    return all(isinstance(p, dict) and (p.get("type") == "image" or (p.get("type") == "text" and isinstance(p.get("text"), str)))
               for p in content)  # fmt: skip


def _as_list(rows: Any) -> list:
    if hasattr(rows, "to_list") and hasattr(rows, "column_names"):  # datasets.Dataset
        return rows.to_list()
    if isinstance(rows, (list, tuple)):
        return list(rows)
    raise ValueError(f"rows must be a list of dicts or a datasets.Dataset, got {type(rows).__name__}")


def load_rows(path: str | os.PathLike, split: str = "train") -> list[tuple[str, dict]]:
    """``(where, row)`` pairs of a data file, a `save_to_disk` folder (`split` of a DatasetDict), or a
    cached hub dataset; `where` names the place for error messages (``file:line`` for JSONL)."""
    p = Path(path).expanduser()
    if p.suffix == ".jsonl":
        if not p.is_file():
            raise FileNotFoundError(f"dataset file {str(p)!r} does not exist")
        return [(f"{p}:{lineno}", row) for lineno, row in read_jsonl(p, required=())]  # errors name the line
    import datasets

    if p.is_file():
        kind = _FILE_TYPES.get(p.suffix)
        if kind is None:
            raise ValueError(f"{p}: unsupported file type {p.suffix!r}; use one of {sorted(_FILE_TYPES)} or a save_to_disk folder")
        if p.suffix != ".parquet":
            _check_utf8(p)  # arrow's reader would say only "An error occurred while generating the dataset"
        try:
            return _located(p, datasets.load_dataset(kind, data_files=str(p), split="train").to_list())
        except Exception as e:  # noqa: BLE001 - arrow/json errors come in many types
            cause = f"; {type(e.__cause__).__name__}: {e.__cause__}" if e.__cause__ is not None else ""
            raise ValueError(f"{p}: cannot read it as {kind} ({type(e).__name__}: {e}{cause})"[:500]) from None
    if p.is_dir():
        try:
            ds = datasets.load_from_disk(str(p))
        except Exception as e:  # noqa: BLE001
            raise ValueError(f"{p}: not a datasets save_to_disk folder ({e})") from None
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ValueError(f"{p}: has splits {sorted(ds)}, not {split!r}; set split=...")
            ds = ds[split]
        return _located(p, ds.to_list())
    if str(path).startswith((".", "/", "~")) or p.suffix:
        raise FileNotFoundError(f"dataset file {str(path)!r} does not exist")
    return _load_cached_hub(str(path), split)


def _check_utf8(p: Path) -> None:
    with open(p, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{p}:{lineno}: not valid UTF-8 (byte {raw[e.start]:#x} at column {e.start + 1})") from None


def _load_cached_hub(name: str, split: str) -> list[tuple[str, dict]]:
    """A hub dataset from the local `datasets` cache, offline: the cache or an immediate error.

    `datasets` and `huggingface_hub` read HF_HUB_OFFLINE once, at import, so the environment
    variable alone would still cost ~25 s of network retries; their flags are switched for the call."""
    import datasets
    import huggingface_hub.constants as hub

    flags = [(datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE"), (hub, "HF_HUB_OFFLINE")]
    old = [getattr(mod, key) for mod, key in flags]
    for mod, key in flags:
        setattr(mod, key, True)
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"dataset {name!r}: not a local file or folder, and not in the local HF cache "
                         f"({type(e).__name__}: {str(e)[:200]}); covey loads hub datasets offline only: "
                         "download it where there is network (or save_to_disk) and pass the file or folder") from None  # fmt: skip
    finally:
        for (mod, key), val in zip(flags, old):
            setattr(mod, key, val)
    return _located(name, ds.to_list())


def _located(source, rows: list) -> list[tuple[str, dict]]:
    return [(f"{source}: row {i + 1}", r) for i, r in enumerate(rows)]
