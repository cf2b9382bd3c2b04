"""The learner: turns a scored `Rollouts` batch into optimizer steps.

It knows no algorithm names. At construction it looks up the surrogate, correction, KL estimator and
aggregation chosen in `AlgoConfig` and binds their parameters; after that it only calls them:

    loss_tok = surrogate(logp, old_logp, A, mask)          [N, T]
             * correction(old_logp, behaviour_logp)         (detached weights, optional)
             + kl_coef * kl(logp, ref_logp, mask)           (optional, "loss" mode)
             - entropy_coef * H                             (optional)
    loss     = aggregation(loss_tok, mask, totals)          totals = counts of the whole mini-batch

Each of them returns its value and its metrics; the learner only gathers the metrics (averaged over
micro-batches weighted by their tokens), adding its own `learn/*` figures (loss, grad norm, lr, entropy).

Mini-batches are optimizer steps; micro-batches accumulate gradients. Because the aggregation divides
by whole-mini-batch counts, the accumulated gradient equals the one-big-batch gradient. Micro-batches
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

from covey.algos import SURROGATES, BatchTotals, CorrectionInputs, LossInputs
from covey.algos.presets import AlgoConfig
from covey.algos.surrogates import offpolicy_shaped_loss
from covey.dtypes import model_device, resolve_dtype_name
from covey.learner.logprobs import completion_logprobs
from covey.learner.prefix import prompt_groups
from covey.rollouts import Rollouts

__all__ = ["Learner", "peak_memory_gb", "reset_peak_memory"]


class Learner:
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
    ):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self.epochs, self.mini_batches, self.micro_batch_size = epochs, mini_batches, micro_batch_size
        self.grad_clip = grad_clip
        self.device = model_device(model)
        hidden = getattr(getattr(model, "config", None), "hidden_size", 1024)
        self.dtype = resolve_dtype_name(dtype, self.device, hidden)  # "bf16" or "fp32"
        self.autocast = self.dtype == "bf16"
        self.share_prompts = share_prompts
        self.surrogate = algo.bind("surrogate")
        self.aggregate = algo.bind("aggregation")
        self.correction = algo.bind("correction")
        kl = algo.active().get("kl")
        self.kl = algo.bind("kl") if kl is not None and kl.mode == "loss" else None
        self.kl_coef = kl.coef if self.kl is not None else 0.0
        self.entropy_coef = algo.entropy_coef
        surrogate_needs = SURROGATES[algo.surrogate.name].requires
        self.need_entropy = self.entropy_coef != 0 or "entropies" in surrogate_needs
        updates = epochs * mini_batches
        if recompute_old_logprobs == "auto":
            # One update per batch: the policy has not moved since sampling, so the engine's behaviour
            # log-probs are pi_old and no extra forward pass is needed. A correction needs the
            # trainer-side pi_old to compare against the engine's numbers, so it recomputes.
            recompute_old_logprobs = "always" if (updates > 1 or self.correction is not None) else "never"
        self.recompute_old = recompute_old_logprobs == "always"

    # ------------------------------------------------------------------------------------------
    def _ctx(self, model=None):
        if not self.autocast:
            return nullcontext()
        return torch.autocast(model_device(model or self.model).type, dtype=torch.bfloat16)

    def logprobs(self, model, batch: Rollouts, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        """Log-probs (and entropies) of `batch`'s completions under `model`, on the model's device."""
        with self._ctx(model):
            return completion_logprobs(
                model,
                batch.prompt_ids,
                batch.completion_ids,
                batch.completion_mask,
                temperature=self.temperature,
                with_entropy=with_entropy,
                share_prompts=self.share_prompts,
            )

    @torch.no_grad()
    def fill_logprobs(self, batch: Rollouts, model=None, field: str = "old_logprobs") -> None:
        """Write no-grad log-probs of `model` (default: the policy) into `batch.<field>`, micro-batched."""
        model = model or self.model
        out = torch.zeros(batch.completion_mask.shape, dtype=torch.float32, device=batch.completion_mask.device)
        for idx in self._chunks(batch):
            lp, _ = self.logprobs(model, batch.select(idx))
            out[idx.to(out.device)] = lp.float().to(out.device)
        setattr(batch, field, out * batch.completion_mask)

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

    # ------------------------------------------------------------------------------------------
    def update(self, batch: Rollouts, generator: torch.Generator) -> dict[str, float]:
        """Run `epochs` x `mini_batches` optimizer steps on a batch with advantages; return metrics."""
        if batch.advantages is None:
            raise ValueError("learner.update needs batch.advantages: run an advantage estimator first")
        # a strategy may ask for it (APRIL: pi_old of the current weights over carried tokens too)
        if (self.recompute_old or batch.recompute_old_logprobs) and batch.old_logprobs is None:
            self.fill_logprobs(batch)
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        weights: dict[str, float] = defaultdict(float)
        n = len(batch)
        for _ in range(self.epochs):
            order = torch.randperm(n, generator=generator, device="cpu")  # row indices of the (CPU) batch
            for mb in order.chunk(self.mini_batches):
                stats = self._step(batch.select(mb))
                for k, (v, w) in stats.items():
                    sums[k] += v * w
                    weights[k] += w
        self.model.eval()
        out = {k: sums[k] / weights[k] for k in sums if weights[k] > 0}
        out["memory/peak_gb"] = peak_memory_gb(self.device)
        return out

    def _step(self, mb: Rollouts) -> dict[str, tuple[float, float]]:
        """One optimizer step on mini-batch `mb`; returns {metric: (value, weight)}."""
        mask_all = mb.loss_mask()
        totals = BatchTotals(
            num_tokens=float(mask_all.sum()),
            num_seqs=float((mask_all.sum(-1) > 0).sum()),
            max_new_tokens=self.max_new_tokens,
        )
        self.optimizer.zero_grad(set_to_none=True)
        stats: dict[str, tuple[float, float]] = {}
        loss_total = 0.0
        for idx in self._chunks(mb):
            micro = to_device(mb.select(idx), self.device)
            mask = micro.loss_mask()
            tokens = float(mask.sum())
            if tokens == 0:
                continue
            loss, metrics = self._loss(micro, mask, totals)
            loss.backward()
            loss_total += float(loss.detach())
            for k, v in metrics.items():
                stats[k] = (float(v), tokens) if k not in stats else _wmean(stats[k], float(v), tokens)
        grad_norm = self._clip()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        stats["learn/loss"] = (loss_total, 1.0)
        stats["learn/grad_norm"] = (grad_norm, 1.0)
        stats["learn/lr"] = (self.optimizer.param_groups[0]["lr"], 1.0)
        return stats

    def _loss(self, micro: Rollouts, mask: Tensor, totals: BatchTotals) -> tuple[Tensor, dict[str, float]]:
        logp, entropy = self.logprobs(self.model, micro, with_entropy=self.need_entropy)
        logp = logp.float()
        old = micro.old_logprobs if micro.old_logprobs is not None else micro.behaviour_logprobs
        adv = micro.advantages
        adv = adv[:, None].expand_as(logp) if adv.dim() == 1 else adv  # [N] -> [N, T]
        loss_tok, metrics = self.surrogate(LossInputs(logp, old, adv * mask, mask, entropy))
        metrics = dict(metrics)
        if self.correction is not None:
            w, m = self.correction(CorrectionInputs(old, micro.behaviour_logprobs, mask))
            loss_tok = loss_tok * w.detach()
            metrics.update(m)
        if micro.offpolicy_mask is not None:  # corrector tokens (step_correction): LUFFY's shaped loss instead
            loss_tok = offpolicy_shaped_loss(loss_tok, logp, adv * mask, micro.offpolicy_mask)
            metrics["learn/offpolicy_frac"] = float((micro.offpolicy_mask * mask).sum() / mask.sum())
        if self.kl is not None:
            if micro.ref_logprobs is None:
                raise ValueError("a KL loss is configured but the batch has no ref_logprobs")
            kl_tok, m = self.kl(logp, micro.ref_logprobs, mask)
            loss_tok = loss_tok + self.kl_coef * kl_tok
            metrics.update(m)
        if entropy is not None:
            entropy = entropy.float()
            metrics["learn/entropy"] = float((entropy.detach() * mask).sum() / mask.sum())
            if self.entropy_coef:
                loss_tok = loss_tok - self.entropy_coef * entropy
        loss, m = self.aggregate(loss_tok * mask, mask, totals)
        metrics.update(m)
        return loss, metrics

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
