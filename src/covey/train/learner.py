"""The learner: turns a scored `Rollouts` batch into optimizer steps.

It knows no algorithm names. At construction it looks up the surrogate, correction, KL estimator and
aggregation chosen in `AlgoConfig` and binds their parameters; after that it only calls them:

    loss_tok = surrogate(logp, old_logp, A, mask)          [N, T]
             * correction(old_logp, behaviour_logp)         (detached weights, optional)
             + kl_coef * kl(logp, ref_logp)                 (optional, "loss" mode)
             - entropy_coef * H                             (optional)
    loss     = aggregation(loss_tok, mask, totals)          totals = counts of the whole mini-batch

Mini-batches are optimizer steps; micro-batches accumulate gradients. Because the aggregation divides
by whole-mini-batch counts, the accumulated gradient equals the one-big-batch gradient.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import nullcontext

import torch
from torch import Tensor

from covey.algos import SURROGATES, BatchTotals, CorrectionInputs, LossInputs
from covey.algos.presets import AlgoConfig
from covey.engine.logprobs import completion_logprobs
from covey.rollouts import Rollouts

__all__ = ["Learner"]


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
    ):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self.epochs, self.mini_batches, self.micro_batch_size = epochs, mini_batches, micro_batch_size
        self.grad_clip = grad_clip
        self.autocast = dtype == "bf16"
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
    def _ctx(self):
        return torch.autocast("cpu", dtype=torch.bfloat16) if self.autocast else nullcontext()

    def logprobs(self, model, batch: Rollouts, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        with self._ctx():
            return completion_logprobs(
                model,
                batch.prompt_ids,
                batch.completion_ids,
                batch.completion_mask,
                temperature=self.temperature,
                with_entropy=with_entropy,
            )

    @torch.no_grad()
    def fill_logprobs(self, batch: Rollouts, model=None, field: str = "old_logprobs") -> None:
        """Write no-grad log-probs of `model` (default: the policy) into `batch.<field>`, micro-batched."""
        model = model or self.model
        parts = []
        for idx in self._chunks(torch.arange(len(batch))):
            lp, _ = self.logprobs(model, batch.select(idx))
            parts.append(lp.float())
        setattr(batch, field, torch.cat(parts) * batch.completion_mask)

    def _chunks(self, rows: Tensor) -> list[Tensor]:
        size = self.micro_batch_size or len(rows)
        return list(rows.split(size))

    # ------------------------------------------------------------------------------------------
    def update(self, batch: Rollouts, generator: torch.Generator) -> dict[str, float]:
        """Run `epochs` x `mini_batches` optimizer steps on a batch with advantages; return metrics."""
        if batch.advantages is None:
            raise ValueError("learner.update needs batch.advantages: run an advantage estimator first")
        if self.recompute_old and batch.old_logprobs is None:
            self.fill_logprobs(batch)
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        weights: dict[str, float] = defaultdict(float)
        n = len(batch)
        for _ in range(self.epochs):
            order = torch.randperm(n, generator=generator)
            for mb in order.chunk(self.mini_batches):
                stats = self._step(batch.select(mb))
                for k, (v, w) in stats.items():
                    sums[k] += v * w
                    weights[k] += w
        self.model.eval()
        return {k: sums[k] / weights[k] for k in sums if weights[k] > 0}

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
        for idx in self._chunks(torch.arange(len(mb))):
            micro = mb.select(idx)
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
        if self.kl is not None:
            if micro.ref_logprobs is None:
                raise ValueError("a KL loss is configured but the batch has no ref_logprobs")
            kl_tok = self.kl(logp, micro.ref_logprobs)
            loss_tok = loss_tok + self.kl_coef * kl_tok
            metrics["kl/mean"] = float((kl_tok.detach() * mask).sum() / mask.sum())
        if entropy is not None:
            entropy = entropy.float()
            metrics["learn/entropy"] = float((entropy.detach() * mask).sum() / mask.sum())
            if self.entropy_coef:
                loss_tok = loss_tok - self.entropy_coef * entropy
        loss = self.aggregate(loss_tok * mask, mask, totals)
        return loss, metrics

    def _clip(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.grad_clip if self.grad_clip is not None else float("inf")
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))


def _wmean(old: tuple[float, float], v: float, w: float) -> tuple[float, float]:
    total = old[1] + w
    return ((old[0] * old[1] + v * w) / total, total)
