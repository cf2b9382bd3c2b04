"""The learner: turns a scored `Rollouts` batch into optimizer steps.

It knows no algorithm names. At construction it looks up the surrogate, correction, KL estimator and
aggregation chosen in `AlgoConfig` and binds their parameters; after that it only calls them:

    loss_tok = surrogate(logp, old_logp, A, mask)          [N, T]
             * correction(old_logp, behaviour_logp)         (detached weights, optional)
             + kl_coef * kl(logp, ref_logp, mask)           (optional, "loss" mode)
             - entropy_coef * H                             (optional)
             + regularizers' [N, T] terms                   (algo.regularizers, optional)
    loss     = aggregation(loss_tok, mask, totals)          totals = counts of the whole mini-batch
             + regularizers' scalar terms                   (whole-mini-batch denominators)

What the components declare in `requires` decides what the forward computes: the token entropy
("entropies", "stat:entropy"), logit statistics ("stat:sum_p2", "stat:vocab_mean_logp", from the
chunked head, for pi_theta and for pi_old), whole groups per micro- and mini-batch with per-row
values ("group"; "row" for the per-row values alone). A regularizer with a pre-pass gets a no-grad forward over the mini-batch first
(`covey.algos.regularizers.base`).

With `algo.likelihood` (a masked-diffusion model, docs/diffusion.md) the policy's log-probs come from
that estimator and pi_old is always recomputed (the engine has none); a `per_mc` surrogate (bgpo)
gets one forward and one backward per Monte Carlo sample, against pi_old's value of that sample.

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
from covey.algos.loop import keep_large_advantages, trajectory_kl
from covey.algos.presets import AlgoConfig
from covey.algos.surrogates import offpolicy_shaped_loss
from covey.algos.regularizers import RegularizerSet
from covey.algos.regularizers.base import detached
from covey.dtypes import model_device, resolve_dtype_name
from covey.learner.logprobs import STATS, completion_logprobs_stats
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
        skip_zero_advantage: bool = True,
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
        self.regularizers = RegularizerSet(algo.regularizers)
        needs = set(SURROGATES[algo.surrogate.name].requires) | self.regularizers.requires
        self.need_entropy = self.entropy_coef != 0 or bool({"entropies", "stat:entropy"} & needs)
        self.stats = tuple(n for n in STATS if f"stat:{n}" in needs)  # logit statistics for LossInputs
        self.need_group = "group" in needs  # whole groups per micro- and mini-batch
        self.need_rows = self.need_group or "row" in needs  # per-row values (reward, group mean / std)
        self.abs_adv_threshold, self.high_kl_threshold = algo.abs_adv_threshold, algo.high_kl_threshold  # LOOP (algos/loop.py)
        self._kl_rows: list[Tensor] = []
        self.likelihood, self.per_mc = None, 0
        if algo.likelihood is not None:  # a masked-diffusion model: log-probs from a likelihood estimator
            from covey.likelihood import LIKELIHOODS, mc_samples

            if self.need_entropy or self.stats:
                raise ValueError("algo.likelihood gives sequence-likelihood estimates, no token entropies or logit statistics")
            self.likelihood = LIKELIHOODS.get(algo.likelihood.name).bind(algo.likelihood.params)
            if getattr(SURROGATES[algo.surrogate.name].fn, "per_mc", False):  # bgpo: one backward per MC sample
                self.per_mc = mc_samples(algo.likelihood.name, algo.likelihood.params)
            recompute_old_logprobs = "always"  # the engine has no behaviour log-probs to stand for pi_old
        # rows whose advantages are all 0 add nothing to the update: leave them out (exact; see OptimConfig)
        self.skip_zero_rows = (
            skip_zero_advantage and getattr(SURROGATES[algo.surrogate.name].fn, "zero_at_zero_advantage", False)
            and self.kl is None and not self.entropy_coef and not len(self.regularizers) and not self.need_group
            and not self.stats and self.likelihood is None and self.high_kl_threshold is None  # LOOP: a KL mean over all rows
        )  # fmt: skip
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

    # ------------------------------------------------------------------------------------------
    def update(self, batch: Rollouts, generator: torch.Generator) -> dict[str, float]:
        """Run `epochs` x `mini_batches` optimizer steps on a batch with advantages; return metrics."""
        if batch.advantages is None:
            raise ValueError("learner.update needs batch.advantages: run an advantage estimator first")
        loop_metrics: dict[str, float] = {}
        if self.abs_adv_threshold is not None:  # LOOP: drop rows with |A| < threshold before the epochs
            keep = keep_large_advantages(batch.advantages, batch.loss_mask(), self.abs_adv_threshold)
            loop_metrics["learn/adv_filtered_frac"] = 1.0 - len(keep) / max(len(batch), 1)
            if len(keep) < len(batch):
                batch = batch.select(keep)
        extra: dict[str, Tensor] = {}  # per-row inputs carried through mini/micro-batch selection
        # a strategy may ask for it (APRIL: pi_old of the current weights over carried tokens too)
        if (self.recompute_old or batch.recompute_old_logprobs) and batch.old_logprobs is None:
            extra.update({f"old:{k}": v for k, v in self.fill_logprobs(batch, stats=self.stats).items()})
        elif self.stats and batch.old_logprobs is not None:  # pi_old given: its statistics from the current (= old) weights
            extra.update({f"old:{k}": v for k, v in self.token_stats(batch, self.stats).items()})
        # else: one update on the sampling policy's log-probs; pi_old's statistics are the current ones (detached)
        if self.need_rows:
            extra.update(_row_values(batch))
        # the engine/learner gap (a masked-diffusion engine has no behaviour log-probs to compare)
        gap = logprob_gap(batch) if batch.old_logprobs is not None and self.likelihood is None else {}
        if self.per_mc:
            self._fill_mc_terms(batch)
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        weights: dict[str, float] = defaultdict(float)
        stopped = False
        for _ in range(self.epochs):
            for mb in self._mini_batches(batch, generator):
                stats = self._step(batch.select(mb), {k: v[mb.to(v.device)] for k, v in extra.items()})
                stopped = stats.pop("learn/high_kl_stop", None) is not None
                for k, (v, w) in stats.items():
                    sums[k] += v * w
                    weights[k] += w
                if stopped:
                    break
            if stopped:
                break
        self.model.eval()
        out = {k: sums[k] / weights[k] for k in sums if weights[k] > 0}
        out.update(loop_metrics)
        if self.high_kl_threshold is not None:
            out["learn/high_kl_stop"] = float(stopped)
        out.update(self.regularizers.after_update())
        out["memory/peak_gb"] = peak_memory_gb(self.device)
        out.update(gap)
        return out

    def _mini_batches(self, batch: Rollouts, generator: torch.Generator) -> list[Tensor]:
        """Row indices [CPU long] of one epoch's mini-batches: a random order of the rows, or of whole
        groups when a component reads groups (a group is never split across optimizer steps)."""
        n = len(batch)
        if not self.need_group:
            return list(torch.randperm(n, generator=generator, device="cpu").chunk(self.mini_batches))
        _, inv = torch.unique(batch.group.cpu(), return_inverse=True)
        order = torch.randperm(int(inv.max()) + 1 if n else 0, generator=generator, device="cpu")
        out = []
        for part in order.chunk(self.mini_batches):
            rank = torch.full((int(order.numel()),), -1, dtype=torch.long)
            rank[part] = torch.arange(len(part))
            rows = torch.nonzero(rank[inv] >= 0).flatten()
            out.append(rows[torch.argsort(rank[inv][rows], stable=True)])
        return out

    def _step(self, mb: Rollouts, extra: dict[str, Tensor] | None = None) -> dict[str, tuple[float, float]]:
        """One optimizer step on mini-batch `mb` (`extra`: its per-row inputs); returns {metric: (value, weight)}."""
        extra = extra or {}
        mask_all = mb.loss_mask()
        totals = BatchTotals(
            num_tokens=float(mask_all.sum()),
            num_seqs=float((mask_all.sum(-1) > 0).sum()),
            max_new_tokens=self.max_new_tokens,
        )
        self.optimizer.zero_grad(set_to_none=True)
        self._kl_rows = []
        stats: dict[str, tuple[float, float]] = {}
        rows = len(mb)
        if self.skip_zero_rows:  # after the totals: they still count the skipped rows
            keep = rows_with_signal(mb, mask_all)
            if len(keep) < rows:
                mb, extra = mb.select(keep), {k: v[keep.to(v.device)] for k, v in extra.items()}
            stats["learn/skipped_rows"] = ((rows - len(keep)) / max(rows, 1), 1.0)
        loss_total = 0.0
        chunks = self._chunks(mb)
        if self.need_group:
            _check_whole_groups(mb, chunks)
        self.regularizers.begin()
        observe_inline = self.regularizers.prepass and len(chunks) == 1
        if self.regularizers.prepass and not observe_inline:  # whole-mini-batch statistics before any backward
            with torch.no_grad():
                for idx in chunks:
                    micro, mask, sub = self._micro(mb, extra, idx)
                    if float(mask.sum()) > 0:
                        self.regularizers.observe(self._inputs(micro, mask, sub)[0], totals)
        for idx in chunks:
            micro, mask, sub = self._micro(mb, extra, idx)
            tokens = float(mask.sum())
            if tokens == 0:
                continue
            if self.per_mc:
                loss_value, metrics = self._per_mc_backward(micro, mask, totals, sub)
            else:
                loss, metrics = self._loss(micro, mask, totals, sub, observe_inline)
                loss.backward()
                loss_value = float(loss.detach())
            loss_total += loss_value
            for k, v in metrics.items():
                stats[k] = (float(v), tokens) if k not in stats else _wmean(stats[k], float(v), tokens)
        if self.skip_zero_rows and not len(mb) and totals.num_tokens > 0:
            for p in self.model.parameters():  # every row skipped: the zero gradient the full pass would give
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
        if self.high_kl_threshold is not None and self._kl_rows:  # LOOP: a high KL skips this step, ends the update
            kl = float(torch.cat(self._kl_rows).mean())
            self._kl_rows = []
            stats["learn/kl_estimate"] = (kl, 1.0)
            if abs(kl) > self.high_kl_threshold:
                self.optimizer.zero_grad(set_to_none=True)
                stats["learn/loss"] = (loss_total, 1.0)
                stats["learn/high_kl_stop"] = (1.0, 1.0)
                return stats
        grad_norm = self._clip()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        stats.update({k: (v, 1.0) for k, v in self.regularizers.after_step().items()})
        stats["learn/loss"] = (loss_total, 1.0)
        stats["learn/grad_norm"] = (grad_norm, 1.0)
        stats["learn/lr"] = (self.optimizer.param_groups[0]["lr"], 1.0)
        return stats

    @torch.no_grad()
    def _fill_mc_terms(self, batch: Rollouts) -> None:
        """pi_old's value of each Monte Carlo sample of each row (`per_mc` surrogates), by row seed."""
        from covey.likelihood import estimate, row_seeds

        self._old_terms: dict[int, Tensor] = {}
        for idx in self._chunks(batch):
            sub = to_device(batch.select(idx), self.device)
            with self._ctx():
                terms = torch.stack([estimate(self.likelihood, self.model, None, sub, sample=j)[:, 0] for j in range(self.per_mc)], 1)
            for seed, t in zip(row_seeds(sub.prompt_ids, sub.completion_ids, sub.policy_version), terms.float()):
                self._old_terms[seed] = t

    def _per_mc_backward(self, micro: Rollouts, mask: Tensor, totals: BatchTotals,
                         extra: dict[str, Tensor]) -> tuple[float, dict[str, float]]:  # fmt: skip
        """BGPO: the surrogate on each Monte Carlo sample's term with its own forward and backward
        (loss / samples), so memory does not grow with the number of samples. Returns the loss value."""
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

    def _micro(self, mb: Rollouts, extra: dict[str, Tensor], idx: Tensor) -> tuple[Rollouts, Tensor, dict[str, Tensor]]:
        micro = to_device(mb.select(idx), self.device)
        return micro, micro.loss_mask(), {k: v[idx.to(v.device)].to(self.device) for k, v in extra.items()}

    def _inputs(self, micro: Rollouts, mask: Tensor, extra: dict[str, Tensor], logp: Tensor | None = None,
                old: Tensor | None = None) -> tuple[LossInputs, Tensor | None]:  # fmt: skip
        """The LossInputs of one micro-batch (one forward of the policy) and the raw entropy; `logp` /
        `old` given (one Monte Carlo term of a `per_mc` surrogate): no forward, these stand for them."""
        entropy, cur = None, {}
        if logp is None:
            logp, entropy, *rest = self.logprobs(self.model, micro, with_entropy=self.need_entropy, stats=self.stats)
            cur = rest[0] if rest else {}
        logp = logp.float()
        if old is None:
            old = micro.old_logprobs if micro.old_logprobs is not None else micro.behaviour_logprobs
        adv = micro.advantages
        adv = adv[:, None].expand_as(logp) if adv.dim() == 1 else adv  # [N] -> [N, T]
        old_stats = {k: extra.get(f"old:{k}", v.detach()) for k, v in cur.items()}
        rows = {k[4:]: v for k, v in extra.items() if k.startswith("row:")}
        inp = LossInputs(logp, old, adv * mask, mask, None if entropy is None else entropy.float(), cur, old_stats,
                         micro.group if self.need_group else None, rows, micro.turn, micro.ref_logprobs)  # fmt: skip
        return inp, entropy

    def _loss(self, micro: Rollouts, mask: Tensor, totals: BatchTotals, extra: dict[str, Tensor] | None = None,
              observe: bool = False, logp: Tensor | None = None, old: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:  # fmt: skip
        inp, entropy = self._inputs(micro, mask, extra or {}, logp, old)
        logp = inp.logp
        old = inp.old_logp
        if self.high_kl_threshold is not None:
            self._kl_rows.append(trajectory_kl(logp, old, mask).cpu())
        if observe:  # one micro-batch: the pre-pass statistics come from this forward
            self.regularizers.observe(detached(inp), totals)
        loss_tok, metrics = self.surrogate(inp)
        metrics = dict(metrics)
        if self.correction is not None:
            w, m = self.correction(CorrectionInputs(old, micro.behaviour_logprobs, mask))
            loss_tok = loss_tok * w.detach()
            metrics.update(m)
        if micro.offpolicy_mask is not None:  # corrector tokens (step_correction): LUFFY's shaped loss instead
            loss_tok = offpolicy_shaped_loss(loss_tok, logp, inp.advantages, micro.offpolicy_mask)
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
        reg_scalar = None
        if len(self.regularizers):
            reg_tok, reg_scalar, m = self.regularizers(inp, totals)
            if reg_tok is not None:
                loss_tok = loss_tok + reg_tok
            metrics.update(m)
        loss, m = self.aggregate(loss_tok * mask, mask, totals)
        metrics.update(m)
        return (loss if reg_scalar is None else loss + reg_scalar), metrics

    def _clip(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.grad_clip if self.grad_clip is not None else float("inf")
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))


def rows_with_signal(batch: Rollouts, mask: Tensor) -> Tensor:
    """Row indices [CPU long] of `batch` with a nonzero advantage on a loss token, or with tokens another
    model wrote (`offpolicy_mask`); the other rows add nothing to a `zero_at_zero_advantage` loss."""
    adv = batch.advantages
    adv = adv[:, None] if adv.dim() == 1 else adv
    signal = ((adv * mask) != 0).any(-1)
    if batch.offpolicy_mask is not None:
        signal |= ((batch.offpolicy_mask * mask) != 0).any(-1)
    return torch.nonzero(signal.cpu()).flatten()


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


def _row_values(batch: Rollouts) -> dict[str, Tensor]:
    """Per-row inputs of group-coupled components ("row:<name>" [N] float32, on the batch's device):
    the scalar reward and its whole-group mean and unbiased std (0 for a group of one), and each
    reward column as "row:col:<column name>"."""
    r = batch.scalar_rewards().double()
    _, inv = torch.unique(batch.group, return_inverse=True)
    k = int(inv.max()) + 1 if len(r) else 0
    size = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, inv, torch.ones_like(r))
    mean = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, inv, r) / size
    ss = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, inv, (r - mean[inv]) ** 2)
    std = torch.where(size > 1, (ss / (size - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))
    cols = {f"row:col:{name}": batch.rewards[:, k].float() for k, name in enumerate(batch.reward_names)}
    return {"row:reward": r.float(), "row:group_mean": mean[inv].float(), "row:group_std": std[inv].float(), **cols}


def _check_whole_groups(mb: Rollouts, chunks: list[Tensor]) -> None:
    """A group-coupled component needs each group in one micro-batch."""
    seen: dict[int, int] = {}
    for c, idx in enumerate(chunks):
        for g in torch.unique(mb.group[idx.to(mb.group.device)]).tolist():
            if seen.setdefault(g, c) != c:
                raise ValueError(f"a configured component reads whole groups, but group {g} spans micro-batches: set "
                                 "optim.micro_batch_size to at least the group size (or leave it unset)")  # fmt: skip


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


def logprob_gap(batch: Rollouts) -> dict[str, float]:
    """The engine/learner mismatch the importance corrections act on, per step: mean and max over
    generated tokens of |pi_old - pi_behaviour| (the learner's recomputed log-prob minus the
    engine's), e.g. an int8 or vLLM engine against a full-precision learner. Carried tokens of an
    older policy version (april) add their staleness to it."""
    mask = batch.completion_mask > 0
    if not bool(mask.any()):
        return {}
    d = (batch.old_logprobs.float() - batch.behaviour_logprobs.float()).abs()[mask]
    return {"rollout/logprob_gap_mean": float(d.mean()), "rollout/logprob_gap_max": float(d.max())}
