"""The learner: turns a scored `Rollouts` batch into optimizer steps, one path for every update.

It runs an update and knows no loss. The `Objective` it is handed (`covey.learner.objective`: the
policy-gradient loss of `covey.learner.policy_loss` by default, or the preference loss) decides which
rows train, what each micro-batch's loss is and what its totals are; the learner cuts the batch into
mini-batches (optimizer steps) and micro-batches (gradient accumulation), runs the forward passes,
the backward passes, clipping, the optimizer and its schedule, and gathers the objective's metrics
(weighted means over micro-batches), adding its own `learn/*` figures (loss, grad norm, lr).

The policy's log-probs come from one source chosen at construction: the token forward
(`covey.learner.logprobs`, with prompt sharing and the chunked head) or, with `algo.likelihood` (a
masked-diffusion model, docs/diffusion.md), that estimator's values; pi_old is then always
recomputed (the engine has none), and an objective with `per_mc` gets one forward and one backward
per Monte Carlo sample, against pi_old's value of that sample.

Mini-batches are optimizer steps; micro-batches accumulate gradients. Because the losses divide by
whole-mini-batch counts, the accumulated gradient equals the one-big-batch gradient. Micro-batches
keep rows with the same prompt together (up to `micro_batch_size` rows), so the log-prob forward
computes each prompt once for its whole group (`covey.learner.prefix`).

Devices: the batch stays where it is (the engine returns it on the CPU); each micro-batch is moved
to the model's device, and log-probs written back into the batch come back to the batch's device.
bf16 autocast runs on the model's device type (CUDA or CPU); dtype "auto" is bf16 on CUDA and
measured on CPU (`covey.dtypes`). `memory/peak_gb` in the metrics is `torch.cuda.max_memory_allocated`
since the last `reset_peak_memory` on CUDA (the Trainer resets it as each step begins, so it is the
step's peak: generation, scoring and update), the process's RSS high-water mark (getrusage) on CPU.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
from collections import defaultdict
from contextlib import nullcontext

import torch
from torch import Tensor

from covey.algos.presets import AlgoConfig
from covey.dtypes import model_device, resolve_dtype_name
from covey.learner.logprobs import completion_logprobs_stats
from covey.learner.objective import Objective
from covey.learner.policy_loss import PolicyLoss
from covey.learner.prefix import prompt_groups
from covey.rollouts import Groups, Rollouts

__all__ = ["Learner", "peak_memory_gb", "reset_peak_memory", "to_device"]

_STOP = "learn/stop"  # a stats key: the objective ended the update (never logged)


class Learner:
    """The update's backend (module docstring). `algo` chooses the log-prob source and, unless an
    `objective` is handed in, the policy-gradient loss. `device`: where the forward runs (default: the
    model's first parameter's; a sharded learner whose shards are offloaded to the CPU passes its GPU)."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler,
        algo: AlgoConfig,
        *,
        temperature: float,
        max_new_tokens: int,
        epochs: int = 1,
        mini_batches: int = 1,
        micro_batch_size: int | None = None,
        grad_clip: float | None = 1.0,
        dtype: str = "bf16",
        recompute_old_logprobs: str = "auto",
        share_prompts: bool | str = "auto",
        skip_zero_advantage: bool = True,
        objective: Objective | None = None,
        device: torch.device | str | None = None,
    ):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        if objective is None:
            objective = PolicyLoss(algo, max_new_tokens=max_new_tokens, skip_zero_advantage=skip_zero_advantage)
        self.objective = objective
        self.temperature = objective.temperature if objective.temperature is not None else temperature
        self.max_new_tokens = max_new_tokens
        self.epochs, self.mini_batches, self.micro_batch_size = epochs, mini_batches, micro_batch_size
        self.grad_clip = grad_clip
        self.device = torch.device(device) if device is not None else model_device(model)  # the device computing
        hidden = getattr(getattr(model, "config", None), "hidden_size", 1024)
        self.dtype = resolve_dtype_name(dtype, self.device, hidden)  # "bf16" or "fp32"
        self.autocast = self.dtype == "bf16"
        self.share_prompts = share_prompts
        self.likelihood, self.per_mc = None, 0
        if algo.likelihood is not None:  # a masked-diffusion model: log-probs from a likelihood estimator
            from covey.likelihood import LIKELIHOODS, mc_samples

            self.likelihood = LIKELIHOODS.get(algo.likelihood.name).bind(algo.likelihood.params)
            if objective.per_mc:  # one backward per Monte Carlo sample
                self.per_mc = mc_samples(algo.likelihood.name, algo.likelihood.params)
            recompute_old_logprobs = "always"  # the engine has no behaviour log-probs to stand for pi_old
        updates = epochs * mini_batches
        if recompute_old_logprobs == "auto":
            # One update per batch: the policy has not moved since sampling, so the engine's behaviour
            # log-probs are pi_old and no extra forward pass is needed. A correction needs the
            # trainer-side pi_old to compare against the engine's numbers, so it recomputes.
            recompute_old_logprobs = "always" if (updates > 1 or algo.correction is not None) else "never"
        self.recompute_old = recompute_old_logprobs == "always"
        self.optimizer_steps = self._first_step = 0  # taken so far (the trainer tells an untouched policy by it)
        self.stop_check = None
        """A callable run before each micro-batch until the update's first optimizer step (a safe point
        to abandon the step: `covey.train.interrupt`); None: no checks."""

    # ------------------------------------------------------------------------------------------
    def _ctx(self, model=None):
        if not self.autocast:
            return nullcontext()
        return torch.autocast(model_device(model or self.model).type, dtype=torch.bfloat16)

    def logprobs(self, model, batch: Rollouts, with_entropy: bool = False, stats: tuple[str, ...] = ()) -> tuple:
        """Log-probs and entropies of `batch`'s completions under `model`, on the model's device; with
        `stats` also {name: [N, T]} logit statistics (`covey.learner.logprobs.STATS`). With
        `algo.likelihood` (masked diffusion): the estimator's values, with the same masks for every
        model, and no entropies or statistics (refused at construction)."""
        if self.likelihood is not None:
            from covey.likelihood import estimate

            with self._ctx(model):
                logp = estimate(self.likelihood, model, None, batch)
            return (logp, None, {}) if stats else (logp, None)
        with self._ctx(model):
            logp, entropy, out = completion_logprobs_stats(
                model,
                batch.prompt_ids,
                batch.completion_ids,
                batch.completion_mask,
                temperature=self.temperature,
                with_entropy=with_entropy,
                stats=stats,
                share_prompts=self.share_prompts,
                vision=batch.vision,
            )
        return (logp, entropy, out) if stats else (logp, entropy)

    @torch.no_grad()
    def fill_logprobs(self, batch: Rollouts, model=None, field: str | None = "old_logprobs",
                      stats: tuple[str, ...] = ()) -> dict[str, Tensor]:  # fmt: skip
        """Write no-grad log-probs of `model` (default: the policy) into `batch.<field>` (None: do not
        write), micro-batched; return {name: [N, T]} logit statistics `stats` of the same forward
        (on the batch's device, 0 on padding)."""
        model = model or self.model
        like = batch.completion_mask
        out = torch.zeros(like.shape, dtype=torch.float32, device=like.device)
        stat_out = {k: torch.zeros(like.shape, dtype=torch.float32, device=like.device) for k in stats}
        for idx in self._chunks(batch):
            res = self.logprobs(model, batch.select(idx), stats=stats)
            out[idx.to(out.device)] = res[0].float().to(out.device)
            for k in stats:
                stat_out[k][idx.to(like.device)] = res[2][k].to(like.device)
        if field is not None:
            setattr(batch, field, out * like)
        return {k: v * like for k, v in stat_out.items()}

    def token_stats(self, batch: Rollouts, stats: tuple[str, ...], model=None) -> dict[str, Tensor]:
        """{name: [N, T]} no-grad logit statistics (`STATS`) of `batch` under `model` (default: the policy)."""
        return self.fill_logprobs(batch, model=model, field=None, stats=stats)

    def _chunks(self, batch: Rollouts) -> list[Tensor]:
        """Row indices [CPU long] of the micro-batches: rows with the same prompt stay together,
        whole prompt groups are packed up to `micro_batch_size` rows (a larger group is split)."""
        n = len(batch)
        size = self.micro_batch_size or n
        _, prompt_of = prompt_groups(batch.prompt_ids)
        groups: dict[int, list[int]] = {}
        for row, u in enumerate(prompt_of.tolist()):
            groups.setdefault(u, []).append(row)
        chunks: list[list[int]] = [[]]
        for rows in groups.values():
            if chunks[-1] and len(chunks[-1]) + len(rows) > size:
                chunks.append([])
            while len(rows) > size:  # a group larger than a micro-batch fills whole ones
                if chunks[-1]:
                    chunks.append([])
                chunks[-1].extend(rows[:size])
                rows = rows[size:]
                chunks.append([])
            chunks[-1].extend(rows)
        return [torch.tensor(c, dtype=torch.long, device="cpu") for c in chunks if c]

    def mini_batch_rows(self, batch: Rollouts, generator: torch.Generator, whole_groups: bool = False) -> list[Tensor]:
        """Row indices [CPU long] of one epoch's mini-batches: a random order of the rows, or of whole
        groups with `whole_groups` (a group is never split across optimizer steps)."""
        n = len(batch)
        if not whole_groups:
            return list(torch.randperm(n, generator=generator, device="cpu").chunk(self.mini_batches))
        groups = Groups.of(batch.group.cpu())
        inv = groups.index
        order = torch.randperm(groups.num, generator=generator, device="cpu")
        out = []
        for part in order.chunk(self.mini_batches):
            rank = torch.full((int(order.numel()),), -1, dtype=torch.long)
            rank[part] = torch.arange(len(part))
            rows = torch.nonzero(rank[inv] >= 0).flatten()
            out.append(rows[torch.argsort(rank[inv][rows], stable=True)])
        return out

    # ------------------------------------------------------------------------------------------
    def update(self, batch: Rollouts, generator: torch.Generator) -> dict[str, float]:
        """Run `epochs` x `mini_batches` optimizer steps of the objective on a scored batch; return metrics."""
        batch, extra, out = self.objective.prepare(self, batch, generator)
        if batch is None:  # nothing to learn this step
            return out
        if self.per_mc:
            self._fill_mc_terms(batch)
        self.model.train()
        self._first_step = self.optimizer_steps  # stop checks run until this update's first optimizer step
        sums: dict[str, float] = defaultdict(float)
        weights: dict[str, float] = defaultdict(float)
        stopped = False
        for _ in range(self.epochs):
            for mb in self.objective.mini_batches(self, batch, generator):
                stats = self._step(batch.select(mb), {k: v[mb.to(v.device)] for k, v in extra.items()})
                stopped = stats.pop(_STOP, None) is not None
                for k, (v, w) in stats.items():
                    sums[k] += v * w
                    weights[k] += w
                if stopped:
                    break
            if stopped:
                break
        self.model.eval()
        out.update({k: sums[k] / weights[k] for k in sums if weights[k] > 0})
        out.update(self.objective.finish(stopped))
        out["memory/peak_gb"] = peak_memory_gb(self.device)
        return out

    def _step(self, mb: Rollouts, extra: dict[str, Tensor] | None = None) -> dict[str, tuple[float, float]]:
        """One optimizer step on mini-batch `mb` (`extra`: its per-row inputs); returns {metric: (value, weight)}."""
        self.optimizer.zero_grad(set_to_none=True)
        step = self.objective.begin_step(self, mb, extra or {})
        stats = step.stats
        loss_total = 0.0
        for idx in step.chunks:
            if self.stop_check is not None and self.optimizer_steps == self._first_step:
                self.stop_check()
            micro, mask, sub = self._micro(step.rows, step.extra, idx)
            if float(mask.sum()) == 0:
                continue
            loss_value, metrics = self._backward(micro, mask, step.totals, sub, step.observe)
            if loss_value is None:
                continue
            loss_total += loss_value
            for k, (v, w) in metrics.items():
                stats[k] = (v, w) if k not in stats else _wmean(stats[k], v, w)
        if self.objective.end_step(self, step.rows, step.totals, stats):  # the objective stops the update
            self.optimizer.zero_grad(set_to_none=True)
            stats["learn/loss"] = (loss_total, 1.0)
            stats[_STOP] = (1.0, 1.0)
            return stats
        grad_norm = self._clip()
        self.optimizer.step()
        self.optimizer_steps += 1
        if self.scheduler is not None:
            self.scheduler.step()
        stats.update({k: (v, 1.0) for k, v in self.objective.after_step().items()})
        stats["learn/loss"] = (loss_total, 1.0)
        stats["learn/grad_norm"] = (grad_norm, 1.0)
        stats["learn/lr"] = (self.optimizer.param_groups[0]["lr"], 1.0)
        return stats

    def _backward(self, micro: Rollouts, mask: Tensor, totals, extra: dict[str, Tensor],
                  observe: bool = False) -> tuple[float | None, dict[str, tuple[float, float]]]:  # fmt: skip
        """The loss of one micro-batch and its backward pass: one forward, or with `per_mc` one forward
        and one backward per Monte Carlo sample (loss / samples, so memory does not grow with the
        number of samples). Returns (the loss value, or None when the objective has no loss there; metrics)."""
        if not self.per_mc:
            loss, metrics = self._loss(micro, mask, totals, extra, observe)
            if loss is None:
                return None, metrics
            loss.backward()
            return float(loss.detach()), metrics
        from covey.likelihood import estimate, row_seeds

        old = torch.stack([self._old_terms[s] for s in row_seeds(micro.prompt_ids, micro.completion_ids, micro.policy_version)])
        total, metrics = 0.0, {}
        for j in range(self.per_mc):
            with self._ctx():
                logp = estimate(self.likelihood, self.model, None, micro, sample=j)
            loss, metrics = self._loss(micro, mask, totals, extra, logp=logp, old=old[:, j : j + 1].expand(logp.shape) * mask)
            (loss / self.per_mc).backward()
            total += float(loss.detach()) / self.per_mc
        return total, metrics

    @torch.no_grad()
    def _fill_mc_terms(self, batch: Rollouts) -> None:
        """pi_old's value of each Monte Carlo sample of each row (`per_mc`), by row seed."""
        from covey.likelihood import estimate, row_seeds

        self._old_terms: dict[int, Tensor] = {}
        for idx in self._chunks(batch):
            sub = to_device(batch.select(idx), self.device)
            with self._ctx():
                terms = torch.stack([estimate(self.likelihood, self.model, None, sub, sample=j)[:, 0] for j in range(self.per_mc)], 1)
            for seed, t in zip(row_seeds(sub.prompt_ids, sub.completion_ids, sub.policy_version), terms.float()):
                self._old_terms[seed] = t

    def _micro(self, mb: Rollouts, extra: dict[str, Tensor], idx: Tensor) -> tuple[Rollouts, Tensor, dict[str, Tensor]]:
        micro = to_device(mb.select(idx), self.device)
        return micro, micro.loss_mask(), {k: v[idx.to(v.device)].to(self.device) for k, v in extra.items()}

    def _loss(self, micro: Rollouts, mask: Tensor, totals, extra: dict[str, Tensor] | None = None, observe: bool = False,
              logp: Tensor | None = None, old: Tensor | None = None) -> tuple[Tensor | None, dict[str, tuple[float, float]]]:  # fmt: skip
        """The objective's loss of one micro-batch and its metrics {key: (value, weight)}."""
        return self.objective.loss(self, micro, mask, totals, extra or {}, observe=observe, logp=logp, old=old)

    def _clip(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.grad_clip if self.grad_clip is not None else float("inf")
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))


def to_device(batch: Rollouts, device: torch.device) -> Rollouts:
    """A copy of `batch` whose tensors (and prompt tensors) are on `device` (no copy when already there)."""
    changes = {}
    for f in dataclasses.fields(batch):
        val = getattr(batch, f.name)
        if isinstance(val, Tensor):
            changes[f.name] = val.to(device, non_blocking=True)
        elif f.name == "prompt_ids":
            changes[f.name] = [p.to(device, non_blocking=True) for p in val]
    return dataclasses.replace(batch, **changes)


def reset_peak_memory(device: torch.device) -> None:
    """Start a new CUDA peak-memory window (no-op elsewhere: the CPU figure is the process's high-water mark)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gb(device: torch.device) -> float:
    """Peak memory in GiB: CUDA allocator peak since the last reset on CUDA, else the process's RSS
    high-water mark (ru_maxrss: KiB on Linux, bytes on macOS)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (2**30 if sys.platform == "darwin" else 2**20)


def _wmean(old: tuple[float, float], v: float, w: float) -> tuple[float, float]:
    total = old[1] + w
    return ((old[0] * old[1] + v * w) / total, total)


