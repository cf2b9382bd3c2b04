"""Standard outputs of a run: folders that `transformers` and `peft` load without covey.

    RUN/final/     save_pretrained model + tokenizer (with its chat template): the trained policy,
                   LoRA adapters merged into the base weights
    RUN/adapter/   LoRA runs only: the peft adapter folder (`PeftModel.from_pretrained(base, RUN/adapter)`);
                   its base_model_name_or_path is portable: the hub id for a hub model or the
                   smollm2-135m-instruct alias (whose weights are that model's Q4_1 GGUF, dequantised)

`export_model` writes them from a live policy (end of `covey train`); `export_run` rebuilds the
policy from a run's latest checkpoint (`covey export RUN [--merge] [--out DIR]`).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import torch

__all__ = ["export_model", "export_run", "portable_base", "quiet_progress"]


def export_model(model: torch.nn.Module, tokenizer, out_dir: str | Path, *, merge: bool = True) -> dict[str, str]:
    """Write `final/` (a LoRA model merged, when `merge`) and, for LoRA, `adapter/` under `out_dir`."""
    from covey.models.state import engine_model

    out_dir = Path(out_dir)
    written: dict[str, str] = {}
    lora = hasattr(model, "get_base_model")
    if lora:
        written["adapter"] = _save(model, tokenizer, out_dir / "adapter")
    if merge or not lora:
        written["final"] = _save(engine_model(model) if lora else model, tokenizer, out_dir / "final")  # merged copy
    return written


@contextlib.contextmanager
def quiet_progress():
    """No "Writing model shards" bar from `save_pretrained` (a run saves often; its own lines say where)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def _save(model, tokenizer, dst: Path) -> str:
    """save_pretrained into a sibling temporary folder, then swap it in: a kill mid-write leaves the
    previous export whole, and no stale shard of an older export stays behind."""
    tmp, old = dst.with_name(f".{dst.name}.tmp"), dst.with_name(f".{dst.name}.old")
    for leftover in (tmp, old):
        shutil.rmtree(leftover, ignore_errors=True)
    with quiet_progress():
        model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    portable_base(tmp / "adapter_config.json")
    if dst.exists():
        dst.rename(old)
    tmp.rename(dst)
    shutil.rmtree(old, ignore_errors=True)
    return str(dst)


def portable_base(adapter_config: Path) -> None:
    """peft records the base model's local path (for an alias, covey's cache folder); record a name
    that resolves elsewhere instead (`covey.models.convert.portable_model_name`: the hub id)."""
    import json

    from covey.models.convert import portable_model_name

    if not adapter_config.is_file():
        return
    cfg = json.loads(adapter_config.read_text())
    cfg["base_model_name_or_path"] = portable_model_name(cfg.get("base_model_name_or_path"))
    adapter_config.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def export_run(run_dir: str | Path, *, merge: bool = False, out: str | Path | None = None) -> dict[str, str]:
    """Export a run's latest checkpoint: `final/` for full fine-tuning; `adapter/` (and with `merge`
    also a merged `final/`) for LoRA. Written under `out` (default: the run folder)."""
    from covey.train.setup import load_run_policy

    model, tokenizer = load_run_policy(run_dir, merge=False)
    return export_model(model, tokenizer, out or run_dir, merge=merge)
