"""`covey bench step-vs-trl`: one GRPO training step in TRL's `GRPOTrainer` and in covey's `Trainer`.

Both run in the same process, from the same weights (`covey.models.load`), on the same prompts
(`prompts` items of covey's arithmetic task, chat messages, so both apply the same chat template)
with the same settings: `group_size` completions per prompt at temperature 1, each exactly
`new_tokens` long (TRL: `min_new_tokens`; covey: `sampling.ignore_eos`), the arithmetic verifier
as the only reward, one AdamW update per batch at a constant learning rate with gradient clipping
at 1.0, no KL, and the same loss: TRL's default `loss_type="dapo"` (token mean over the batch),
`scale_rewards="group"`, advantage eps 1e-4, clip eps 0.2 = covey's grpo preset with
`aggregation: token-mean`, `advantage: {name: grpo, eps: 1e-4}`, `kl: null`.

Timing: the frameworks take turns (a TRL callback runs covey's step after each TRL step), so both
see the same machine load; the first step of each is a warm-up, then `steps` steps are timed and
the medians compared. A TRL step is everything between two `on_step_end` callbacks (data, generation,
rewards, loss, backward, optimizer); a covey step is `Trainer.step()`.

Dtypes: one such pair per dtype, both frameworks in it: bf16 (TRL `bf16=True`, covey's bf16
autocast learner and bf16 engine) and fp32. Neither is the fast one everywhere: on one 2-core
AVX512-BF16 machine bf16 matmuls ran at ~2x fp32, on another at ~0.7x. So the result has a ratio per
pair and `ratio_best`, each framework at its faster dtype of this run.

Loss match: a separate fp32 TRL run records its first batch (prompt and completion ids, masks,
rewards, advantages), its loss and its gradient; covey's learner then evaluates its loss and
gradient on exactly those samples from the same initial weights (`first_step_match`).

Device: `device` (cpu, cuda, cuda:N, auto = CUDA when present) is used by both frameworks (TRL
through `use_cpu`, covey through its `device` key) and by the loss match. On CUDA each step is
timed up to its end (both frameworks return losses to the host at the end of a step).

Not covered here: generation-only speed (`covey.bench.generate`) and learning curves (docs).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import torch

from covey.algos import BatchTotals
from covey.devices import resolve_device
from covey.dtypes import PAIR_DTYPES, check_pair_dtypes
from covey.models import load
from covey.rollouts import Rollouts
from covey.tasks import get_task
from covey.train.config import RunConfig, validate_config
from covey.learner.learner import Learner, peak_memory_gb, reset_peak_memory
from covey.learner.optim import build_optimizer

__all__ = ["covey_config", "first_step_match", "step_vs_trl", "trl_args"]

LR = 1e-5
CLIP_EPS = 0.2
ADV_EPS = 1e-4  # TRL's hard-coded std epsilon


def _log(msg: str) -> None:
    print(f"[step-vs-trl] {msg}", file=sys.stderr, flush=True)


def _task(prompts: int):
    # The task's own defaults (1-digit operands, so every prompt has the same token count and TRL
    # needs no left padding); both splits sized to `prompts` so each step sees all of them.
    return get_task("arithmetic", n_train=prompts, n_test=prompts)


def covey_config(
    model: str, *, prompts: int, group_size: int, new_tokens: int, dtype: str = "bf16", steps: int = 4, seed: int = 0,
    device: str = "cpu",
) -> RunConfig:
    """covey's run config matching TRL's GRPO defaults (see the module docstring)."""
    return validate_config(
        {
            "model": {"name": model, "dtype": dtype},
            "task": {"name": "arithmetic", "params": {"n_train": prompts, "n_test": prompts}},
            "sampling": {"temperature": 1.0, "max_new_tokens": new_tokens, "ignore_eos": True},
            "rollout": {"prompts_per_step": prompts, "group_size": group_size},
            "engine": {"name": "torch", "dtype": dtype},
            "algo": {
                "preset": "grpo",
                "advantage": {"name": "grpo", "eps": ADV_EPS, "scale": "group"},
                "surrogate": {"name": "ppo_clip", "eps_low": CLIP_EPS, "eps_high": CLIP_EPS},
                "aggregation": {"name": "token-mean"},
                "kl": None,
            },
            "optim": {"lr": LR, "schedule": "constant", "grad_clip": 1.0, "epochs": 1, "mini_batches": 1},
            "log": {"report_to": ["jsonl"], "progress": False},
            "steps": steps,
            "seed": seed,
            "device": device,
        },
        source="step-vs-trl",
    )


def trl_args(
    *, prompts: int, group_size: int, new_tokens: int, bf16: bool, steps: int, seed: int = 0, fixed_length: bool = True,
    device: str = "cpu",
):
    """TRL `GRPOConfig` with the same settings: one update per generated batch of prompts*group_size rows."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="covey-trl-"),
        use_cpu=torch.device(device).type == "cpu",
        bf16=bf16,
        learning_rate=LR,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        per_device_train_batch_size=prompts * group_size,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        num_generations=group_size,
        max_completion_length=new_tokens,
        # EOS cannot be sampled before min_new_tokens: every completion is exactly new_tokens long.
        generation_kwargs={"min_new_tokens": new_tokens} if fixed_length else None,
        temperature=1.0,
        beta=0.0,
        epsilon=CLIP_EPS,
        loss_type="dapo",
        scale_rewards="group",
        # TRL's base config turns gradient checkpointing on; covey's default is off, so compare like with like.
        gradient_checkpointing=False,
        shuffle_dataset=False,
        max_steps=steps,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        disable_tqdm=True,
        seed=seed,
    )


def _verifier(task) -> Callable:
    def accuracy(prompts, completions, answer, **_):  # TRL's reward signature; the task's own verifier
        return task.reward(prompts, completions, answer=answer)

    return accuracy


def _recording_trainer(base):
    """A GRPOTrainer subclass that records its first batch, loss and gradient, and times generation."""

    class Recording(base):
        def __init__(self, *a, record_grads: bool = False, **kw):
            super().__init__(*a, **kw)
            self.record: dict[str, Any] = {}
            self.record_grads = record_grads
            self.gen_times: list[float] = []

        def _calculate_rewards(self, *a, **kw):
            out = super()._calculate_rewards(*a, **kw)
            self.record.setdefault("rewards", out.detach().clone())
            return out

        def _generate_and_score_completions(self, inputs):
            t = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            self.gen_times.append(time.perf_counter() - t)
            if "batch" not in self.record:  # before TRL shuffles the rows: groups are contiguous here
                keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")
                self.record["batch"] = {k: out[k].detach().clone() for k in keys}
            return out

        def compute_loss(self, model, inputs, *a, **kw):
            loss = super().compute_loss(model, inputs, *a, **kw)
            self.record.setdefault("loss", float(loss.detach()))
            return loss

        def training_step(self, model, inputs, *a, **kw):
            out = super().training_step(model, inputs, *a, **kw)
            if self.record_grads and "grads" not in self.record:  # after backward, before clip and step
                named = model.named_parameters()
                self.record["grads"] = {n: p.grad.detach().clone() for n, p in named if p.grad is not None}
            return out

    return Recording


def _dataset(task):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": it["prompt"], "answer": it["answer"]} for it in task.examples("train")])


# --------------------------------------------------------------------------------------------- loss match
def first_step_match(
    model: str = "tiny-llama",
    *,
    prompts: int = 8,
    group_size: int = 8,
    new_tokens: int = 24,
    reward: Callable | None = None,
    fixed_length: bool = True,
    seed: int = 0,
    device: str = "cpu",
) -> dict[str, Any]:
    """TRL's first-step loss, advantages and gradient vs covey's learner on the same samples, fp32.

    `reward` (TRL signature) defaults to the arithmetic verifier. Returns the two losses, their
    absolute difference, the largest advantage difference, and the gradient difference (max abs
    difference over all weights divided by the largest TRL gradient entry, and relative L2).
    """
    from trl import GRPOTrainer

    task = _task(prompts)
    policy, tokenizer = load(model)
    policy.float().to(device)
    initial = copy.deepcopy(policy)  # covey starts from these weights (TRL patches its own model)
    trl_tok = copy.deepcopy(tokenizer)
    args = trl_args(
        prompts=prompts, group_size=group_size, new_tokens=new_tokens, bf16=False, steps=1, seed=seed,
        fixed_length=fixed_length, device=device,
    )  # fmt: skip
    trainer = _recording_trainer(GRPOTrainer)(
        model=policy, reward_funcs=reward or _verifier(task), args=args, train_dataset=_dataset(task),
        processing_class=trl_tok, record_grads=True,
    )  # fmt: skip
    with contextlib.redirect_stdout(sys.stderr):
        trainer.train()
    rec = trainer.record
    b = {k: v.cpu() for k, v in rec["batch"].items()}

    cfg = covey_config(model, prompts=prompts, group_size=group_size, new_tokens=new_tokens, dtype="fp32")
    optimizer, scheduler = build_optimizer(initial, cfg.optim, 1)
    learner = Learner(initial, optimizer, scheduler, cfg.algo, temperature=1.0, max_new_tokens=new_tokens, dtype="fp32")
    n = b["completion_ids"].shape[0]
    group = torch.arange(n // group_size).repeat_interleave(group_size)
    batch = Rollouts(
        prompt_ids=[row[m.bool()].long() for row, m in zip(b["prompt_ids"], b["prompt_mask"])],
        completion_ids=b["completion_ids"].long(),
        completion_mask=b["completion_mask"].float(),
        behaviour_logprobs=torch.zeros(b["completion_ids"].shape),
        group=group,
        prompt_id=group.clone(),
        rewards=rec["rewards"].float().cpu(),
        reward_names=("accuracy",),
        reward_weights=torch.ones(1),
    ).validate()
    # TRL's on-policy step uses pi_old = pi_theta (detached); covey's equivalent is the policy's own
    # log-probs as the behaviour log-probs (the engine's numbers in a real step).
    learner.fill_logprobs(batch, field="behaviour_logprobs")
    adv = cfg.algo.bind("advantage")(batch)
    batch.advantages, batch.sample_mask = adv.advantages.float(), adv.sample_mask
    mask = batch.loss_mask()
    seqs = float((mask.sum(-1) > 0).sum())
    totals = BatchTotals(num_tokens=float(mask.sum()), num_seqs=seqs, max_new_tokens=new_tokens)
    initial.train()
    initial.zero_grad(set_to_none=True)
    # The batch reaches the loss as in an update: one micro-batch of all rows, moved to the learner's
    # device by the learner's own `_micro` (the batch itself stays on the CPU, like the engine's).
    micro, micro_mask, extra = learner._micro(batch, {}, torch.arange(len(batch)))
    loss, _ = learner._loss(micro, micro_mask, totals, extra)  # the exact loss an update would backpropagate
    loss.backward()

    g_trl = rec["grads"]
    g_cov = {n: p.grad for n, p in initial.named_parameters() if p.grad is not None}
    if set(g_trl) != set(g_cov):
        raise RuntimeError(f"TRL and covey trained different weights: {sorted(set(g_trl) ^ set(g_cov))[:5]}")
    diff = max(float((g_trl[k] - g_cov[k]).abs().max()) for k in g_trl)
    scale = max(float(g.abs().max()) for g in g_trl.values())
    l2 = lambda gs: sum(float(g.double().pow(2).sum()) for g in gs) ** 0.5  # noqa: E731
    return {
        "first_step_loss_trl": rec["loss"],
        "first_step_loss_covey": float(loss.detach()),
        "loss_abs_diff": abs(rec["loss"] - float(loss.detach())),
        "advantages_max_abs_diff": float((b["advantages"].float() - batch.advantages).abs().max()),
        "advantages_nonzero": int((batch.advantages != 0).sum()),
        "grad_max_abs_diff_rel": diff / max(scale, 1e-30),
        "grad_l2_diff_rel": l2(g_trl[k] - g_cov[k] for k in g_trl) / max(l2(g_trl.values()), 1e-30),
        "grad_norm_trl": l2(g_trl.values()),
        "reward_mean": float(rec["rewards"].mean()),
        "completion_tokens": int(mask.sum()),
    }


# --------------------------------------------------------------------------------------------- timing
def step_vs_trl(
    model: str, *, steps: int = 3, prompts: int = 8, group_size: int = 8, new_tokens: int = 24,
    dtypes: tuple[str, ...] = PAIR_DTYPES, threads: int = 0, device: str = "cpu",
) -> dict:  # fmt: skip
    """Median seconds per training step of TRL and covey, one same-dtype pair per entry of `dtypes`.

    Each dtype is a pair: TRL with `bf16=True` (accelerate bf16 autocast over fp32 weights,
    generation included) against covey in bf16 (autocast learner, bf16 engine weights), or both
    fully fp32; within a pair the two frameworks take turns. Which dtype is faster depends on the
    CPU (`covey.dtypes`), so the headline `ratio_best` compares each framework at its
    faster dtype; `ratio_<dtype>` compares the pair. The bf16 pair also fills the unsuffixed keys
    (`trl_s_per_step`, `covey_s_per_step`, `ratio_trl_over_covey`).

    threads: torch intra-op threads for both frameworks (0 = torch's default). On a shared machine
    1 thread gives steadier numbers (oversubscribed OpenMP threads wait on each other).
    On CUDA each framework's peak memory per step is reported (`*_peak_gb`, the median over the
    timed steps). If TRL runs out of GPU memory in the loss match, or fails in training (out of
    memory; on random weights TRL's bf16 sampling has crashed on NaN probabilities), that is
    recorded (`match_error`, `trl_error`, `trl_fp32_error`) and covey's steps are timed on their own.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if threads < 0:
        raise ValueError(f"threads must be >= 0 (0 = torch's default), got {threads}")
    dtypes = check_pair_dtypes(dtypes)
    if threads:
        torch.set_num_threads(threads)
    dev = resolve_device(device)
    device = str(dev)
    load_before = os.getloadavg()
    shape = {"prompts": prompts, "group_size": group_size, "new_tokens": new_tokens}
    errors: dict[str, str] = {}
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the CLI's JSON line
        _log(f"{model}: first-step loss match (fp32)")
        try:
            match = first_step_match(model, **shape, device=device)
        except torch.OutOfMemoryError as e:
            match, errors["match_error"] = {}, f"TRL out of memory: {str(e).splitlines()[0]}"
            _free(dev)
        _log(f"loss match: {match or errors}")
        pairs = {dt: _timed_pair(model, dt, shape, steps, dev) for dt in dtypes}

    out: dict[str, Any] = {
        "bench": "step-vs-trl",
        "model": model,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{_cpu_name()}, {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads",
        "device": device,
        "load_avg_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "settings": {**shape, "steps_timed": steps, "lr": LR, "loss": "token-mean (TRL dapo)", "adv_eps": ADV_EPS,
                     "clip_eps": CLIP_EPS, "kl": 0, "dtypes": list(dtypes)},
        "dtype_pairs": {"bf16": "TRL bf16=True (accelerate autocast over fp32 weights, generation too) vs covey bf16 "
                                "autocast learner + bf16 engine weights",
                        "fp32": "both fully fp32"},
        **errors,
    }  # fmt: skip
    for dt, pair in pairs.items():
        sfx = "" if dt == "bf16" else f"_{dt}"  # trl_s_per_step, trl_fp32_s_per_step, ...
        out |= {"{}{}_{}".format(k.split("_", 1)[0], sfx, k.split("_", 1)[1]): v for k, v in pair.items() if k != "ratio"}
        if "ratio" in pair:
            out[f"ratio_{dt}"] = pair["ratio"]
            if dt == "bf16":
                out["ratio_trl_over_covey"] = pair["ratio"]
    trl = {dt: p["trl_s_per_step"] for dt, p in pairs.items() if "trl_s_per_step" in p}
    covey = {dt: p["covey_s_per_step"] for dt, p in pairs.items()}
    if trl:
        t_dt, c_dt = min(trl, key=trl.get), min(covey, key=covey.get)
        out |= {"ratio_best": trl[t_dt] / covey[c_dt], "best_dtypes": {"trl": t_dt, "covey": c_dt}}
    out |= match
    return out


class _CoveyFailed(Exception):
    """covey's step raised inside TRL's callback (re-raised as itself, never recorded as TRL's failure)."""


def _timed_pair(model: str, dtype: str, shape: dict, steps: int, dev: torch.device) -> dict[str, Any]:
    """TRL and covey in `dtype`, taking turns: after each TRL step one covey step. Median s/step of
    each (after one warm-up step), their ratio, the step breakdowns and, on CUDA, peak memory."""
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from covey.train.trainer import Trainer

    device = str(dev)
    _log(f"{dtype} pair: TRL and covey take turns")
    covey = Trainer(covey_config(model, **shape, dtype=dtype, steps=steps + 1, device=device),
                    tempfile.mkdtemp(prefix="covey-bench-"))  # fmt: skip
    times: dict[str, list[float]] = {"trl": [], "covey": []}
    peaks: dict[str, list[float]] = {"trl": [], "covey": []}
    parts: list[dict] = []
    clock = {"t": 0.0}
    out: dict[str, Any] = {}

    def covey_step() -> None:
        reset_peak_memory(dev)
        t = time.perf_counter()
        parts.append(covey.step())
        times["covey"].append(time.perf_counter() - t)
        peaks["covey"].append(peak_memory_gb(dev))

    class Alternate(TrainerCallback):  # after each TRL step, one covey step
        def on_step_begin(self, args, state, control, **kw):
            reset_peak_memory(dev)

        def on_train_begin(self, args, state, control, **kw):
            clock["t"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times["trl"].append(time.perf_counter() - clock["t"])
            peaks["trl"].append(peak_memory_gb(dev))
            try:
                covey_step()
            except Exception as e:  # not TRL's failure: must not be recorded as one
                raise _CoveyFailed from e
            _log(f"{dtype} step {state.global_step}: TRL {times['trl'][-1]:.2f}s, covey {times['covey'][-1]:.2f}s")
            clock["t"] = time.perf_counter()

    try:
        task = _task(shape["prompts"])
        policy, tokenizer = load(model)
        policy.float()
        trainer = _recording_trainer(GRPOTrainer)(
            model=policy, reward_funcs=_verifier(task), train_dataset=_dataset(task), processing_class=tokenizer,
            args=trl_args(**shape, bf16=dtype == "bf16", steps=steps + 1, device=device), callbacks=[Alternate()],
        )  # fmt: skip
        try:
            trainer.train()
        except _CoveyFailed as e:
            raise e.__cause__ from None
        except Exception as e:  # TRL's own failure: out of memory, or a crash such as bf16 sampling NaNs
            what = "out of memory" if isinstance(e, torch.OutOfMemoryError) else f"failed ({type(e).__name__})"
            first = (str(e).strip().splitlines() or [""])[0]
            out["trl_error"] = f"TRL {what} at step {len(times['trl']) + 1}: {first}"
            trainer.accelerator.free_memory()  # drops TRL's model and optimizer references
            trainer.model = trainer.model_wrapped = trainer.optimizer = policy = None
            _free(dev)
            _log(f"{dtype}: {out['trl_error']}; timing covey on its own")
            while len(times["covey"]) < steps + 1:
                covey_step()
    finally:
        covey.close()  # reward worker processes, metrics files, the run folder's lock
    med = {k: statistics.median(v[1:]) for k, v in times.items() if len(v) > 1}
    out |= {"covey_s_per_step": med["covey"], "covey_steps_s": times["covey"], "covey_breakdown_s": _breakdown(parts)}
    if "trl" in med:
        trl_gen = statistics.median(trainer.gen_times[1:])
        out |= {
            "trl_s_per_step": med["trl"],
            "ratio": med["trl"] / med["covey"],
            "trl_steps_s": times["trl"],
            "trl_breakdown_s": {"generate_score": trl_gen, "learn_other": med["trl"] - trl_gen},
        }
    if dev.type == "cuda":
        out |= {f"{k}_peak_gb": round(statistics.median(v[1:]), 3) for k, v in peaks.items() if len(v) > 1}
    return out


def _free(dev: torch.device) -> None:
    import gc

    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        return names[0] if names else platform.machine()
    except OSError:
        return platform.processor() or platform.machine()


def _breakdown(metrics: list[dict]) -> dict[str, float]:
    keys = ("time/generate", "time/reward", "time/learn")
    return {k.split("/")[1]: statistics.median(m[k] for m in metrics[1:]) for k in keys}
