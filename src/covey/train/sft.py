"""`covey sft`: a short supervised warm start on a task's demonstrations.

Random tiny models cannot produce a single correct answer, so RL has no signal to start from. A few
hundred steps of next-token training on `task.demonstration(item)` (prompt tokens masked out) give
them a format and some skill; the saved folder then loads like any model (`model.name: <folder>`).
A masked-diffusion model (bidirectional, e.g. tiny-llada) is trained with LLaDA's SFT loss instead
(`covey.likelihood.sft`: answer tokens masked at a random rate, EOS-padded answers).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import torch

from covey.devices import resolve_device
from covey.learner.prefix import is_causal
from covey.likelihood.sft import encode_sft, llada_sft_loss
from covey.tasks.base import hooks_of
from covey.models.diffusion import mask_token_id
from covey.models import apply_chat
from covey.models import load as load_model
from covey.train.sft_losses import SFT_LOSSES

__all__ = ["check_sft_args", "check_sft_loss", "run_sft", "sft_with_progress"]

_DIFFUSION_LOSS = ("--loss {loss}: model {name!r} is a masked-diffusion model, which covey sft trains with LLaDA's "
                   "masked-token loss only; use --loss ce (the default) with it")  # fmt: skip


def check_sft_args(steps: int, batch_size: int, lr: float, seed: int) -> None:
    """ValueError naming the first argument out of range (run before any model loads)."""
    if type(steps) is not int or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if type(batch_size) is not int or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if type(seed) is not int or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in 0..{2**32 - 1}, got {seed!r}")


def check_sft_loss(model_name: str, loss: str) -> None:
    """ValueError when SFT loss `loss` cannot train `model_name` (read from its config.json, before it
    loads): a masked-diffusion model takes only the default (`ce` selects LLaDA's masked-token loss)."""
    from covey.models.diffusion import family_of_config
    from covey.models.loading import model_config

    if loss != "ce" and family_of_config(model_config(model_name)) == "masked_diffusion":
        raise ValueError(_DIFFUSION_LOSS.format(name=model_name, loss=loss))


def run_sft(model_name: str, task, out: str | Path, *, steps: int = 200, batch_size: int = 32, lr: float = 1e-3,
            seed: int = 0, dtype: str = "bf16", device: str = "auto", loss: str = "ce",
            loss_params: dict | None = None, progress: Callable[[int, float], None] | None = None,
            stop: Callable[[], bool] | None = None) -> dict:  # fmt: skip
    """Train `model_name` on the task's demonstrations with SFT loss `loss` (`covey.train.sft_losses`:
    ce, otr; a masked-diffusion model: LLaDA's masked-token loss, with `ce` only); device auto = CUDA
    when present. `progress(step, loss)` is called after every step; when `stop()` turns true the
    training ends after the current step and the model so far is saved (the result says
    `"stopped_at"`)."""
    check_sft_args(steps, batch_size, lr, seed)
    check_sft_loss(model_name, loss)
    loss_fn = SFT_LOSSES.get(loss).bind(loss_params or {})  # a bad name or parameter fails before the model loads
    demo = hooks_of(task).demonstration
    if demo is None:
        raise ValueError(f"task {task.name!r} has no demonstrations (a `demonstration(item)` method) to imitate")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model, tok = load_model(model_name)
    dev = resolve_device(device)
    model.float().to(dev).train()
    items = list(task.examples("train"))
    eos = tok.eos_token or ""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / 10) * max(0.0, 1 - i / steps))
    losses, extra = [], {}
    gen = torch.Generator(device=dev).manual_seed(seed)
    diffusion = not is_causal(model)
    if diffusion and loss != "ce":  # a folder without a readable family reaches here
        raise ValueError(_DIFFUSION_LOSS.format(name=model_name, loss=loss))
    mask_id = mask_token_id(model, tok) if diffusion else None
    done = 0
    for done in range(1, steps + 1):
        batch = [items[rng.randrange(len(items))] for _ in range(batch_size)]
        if diffusion:  # LLaDA's masked-token SFT loss: its own loss path (`covey.likelihood.sft`)
            ids, answer = (t.to(dev) for t in encode_sft(tok, batch, demo, apply_chat))
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
                loss_value = llada_sft_loss(model, ids, answer, mask_id)
        else:
            ids, labels = (t.to(dev) for t in _encode(tok, batch, demo, eos))
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
                logits = model(input_ids=ids).logits  # right padding: causal attention never sees it
            target = labels[:, 1:]
            loss_tok, extra = loss_fn(logits[:, :-1], target, gen)
            loss_value = loss_tok.sum() / (target != -100).sum().clamp_min(1)
        opt.zero_grad(set_to_none=True)
        loss_value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss_value.detach()))
        if progress is not None:
            progress(done, losses[-1])
        if stop is not None and stop():
            break
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out)
    tok.save_pretrained(out)
    stopped = {"stopped_at": done} if done < steps else {}
    return {"out": str(out), "steps": steps, **stopped, "sft_loss": "llada_masked" if diffusion else loss_fn.__name__,
            "loss_first": losses[0], "loss_last": sum(losses[-10:]) / len(losses[-10:]), **extra}  # fmt: skip


def _encode(tok, batch: list[dict], demo, eos: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded [B, L] input ids (pad = eos id) and labels (-100 on prompt and padding)."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    seqs, labs = [], []
    for item in batch:
        p = apply_chat(tok, item["prompt"])
        c = tok.encode(demo(item) + eos, add_special_tokens=False)
        seqs.append(p + c)
        labs.append([-100] * len(p) + c)
    width = max(len(s) for s in seqs)
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
    labels = torch.tensor([lb + [-100] * (width - len(lb)) for lb in labs])
    return ids, labels


def sft_with_progress(model_name: str, task, out: str | Path, *, console=None, live: bool = True, **kwargs) -> dict:
    """`run_sft` as `covey sft` runs it, with `covey train`'s progress and Ctrl-C: a live bar on a terminal, else
    a plain line every few seconds (``sft step 40/200 | loss 1.234 | 0.31s/step | elapsed 0:12 | ETA 0:49``, on
    stderr); the first Ctrl-C / SIGTERM ends the training after the current step and saves the model so far,
    then raises `TrainingInterrupted`; a second exits at once."""
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from covey.eval.runner import clock
    from covey.train.interrupt import TrainingInterrupted, signal_name, stop_signals

    console = console or Console(stderr=True)
    steps = kwargs.get("steps", 200)
    started, last = time.perf_counter(), [0.0]
    live = live and console.is_terminal

    def on_first(signum: int) -> None:
        console.print(f"[yellow]{signal_name(signum)}: stopping after this step and saving the model so far to {out} "
                      "(send it again to exit at once)[/]", soft_wrap=True)  # fmt: skip

    columns = [TextColumn("[bold]sft step"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]  # fmt: skip
    with stop_signals(on_first) as signals, Progress(*columns, console=console, disable=not live) as bar:
        task_id = bar.add_task("sft", total=steps, info="")

        def progress(step: int, loss: float) -> None:
            elapsed = time.perf_counter() - started
            info = f"loss {loss:.3f} | {elapsed / step:.2f}s/step"
            bar.update(task_id, completed=step, info=info)
            if not live and (elapsed - last[0] >= 5.0 or step in (1, steps)):
                last[0] = elapsed
                eta = clock(elapsed / step * (steps - step))
                console.print(f"sft step {step}/{steps} | {info} | elapsed {clock(elapsed)} | ETA {eta}", markup=False, highlight=False)

        result = run_sft(model_name, task, out, progress=progress, stop=lambda: signals["signum"] is not None, **kwargs)
    if signals["signum"] is not None:
        console.print(f"stopped at step {result['stopped_at']} of {steps}; the model so far is in {out}", markup=False,
                      highlight=False, soft_wrap=True)  # fmt: skip
        raise TrainingInterrupted({**result, "step": result["stopped_at"]}, signals["signum"])
    return result
