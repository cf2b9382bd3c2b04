"""The policy-gradient objective, the learner's default: the loss assembled from the algorithm axes.

At construction it looks up the surrogate, correction, KL estimator and aggregation chosen in
`AlgoConfig` and binds their parameters; after that it only calls them:

    loss_tok = surrogate(logp, old_logp, A, mask)          [N, T]
             * correction(old_logp, behaviour_logp)         (detached weights, optional)
             (tokens of another model, `offpolicy_mask`: the off-policy shaped loss instead)
             + kl_coef * kl(logp, ref_logp, mask)           (optional, "loss" mode)
             - entropy_coef * H                             (optional)
             + regularizers' [N, T] terms                   (algo.regularizers, optional)
    loss     = aggregation(loss_tok, mask, totals)          totals = counts of the whole mini-batch
             + regularizers' scalar terms                   (whole-mini-batch denominators)

What the components declare in `requires` decides what the forward computes: the token entropy
("entropies", "stat:entropy"), logit statistics ("stat:sum_p2", "stat:vocab_mean_logp", from the
chunked head, for pi_theta and for pi_old), whole groups per micro- and mini-batch with per-row
values ("group"; "row" for the per-row values alone). A regularizer with a pre-pass gets a no-grad
forward over the mini-batch first (`covey.algos.regularizers.base`). The update guards of
`covey.algos.loop` (a row filter before the update, a stop signal after a mini-batch) and the turn
schedule of `covey.algos.seeupo` (one optimizer step per turn, in reverse order) are called on every
update; they are no-ops unless configured.

Each component returns its value and its metrics; the objective only gathers them, weighted by the
micro-batch's loss tokens (`covey.learner.objective`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from covey.algos import SURROGATES, BatchTotals, CorrectionInputs, LossInputs
from covey.algos.loop import UpdateGuards
from covey.algos.presets import AlgoConfig
from covey.algos.regularizers import RegularizerSet
from covey.algos.regularizers.base import detached
from covey.algos.seeupo import TurnSchedule
from covey.algos.surrogates import offpolicy_shaped_loss
from covey.learner.logprobs import STATS
from covey.learner.objective import Objective, Step
from covey.rollouts import Rollouts

__all__ = ["PolicyLoss", "logprob_gap", "rows_with_signal"]


class PolicyLoss(Objective):
    """surrogate x correction + KL - entropy + regularizers, aggregated (module docstring)."""

    def __init__(self, algo: AlgoConfig, *, max_new_tokens: int, skip_zero_advantage: bool = True):
        self.max_new_tokens = max_new_tokens
        self.requires = frozenset(algo.requires())
        self.surrogate = algo.bind("surrogate")
        self.aggregate = algo.bind("aggregation")
        self.correction = algo.bind("correction")
        kl = algo.active().get("kl")
        self.kl = algo.bind("kl") if kl is not None and kl.mode == "loss" else None
        self.kl_coef = kl.coef if self.kl is not None else 0.0
        self.entropy_coef = algo.entropy_coef
        self.regularizers = RegularizerSet(algo.regularizers)
        self.guards = UpdateGuards(algo.abs_adv_threshold, algo.high_kl_threshold)
        self.turns = TurnSchedule(algo.turn_updates)  # SeeUPO's turn-by-turn steps; a no-op unless configured
        surrogate = SURROGATES[algo.surrogate.name]
        needs = set(surrogate.requires) | self.regularizers.requires
        self.need_entropy = self.entropy_coef != 0 or bool({"entropies", "stat:entropy"} & needs)
        self.stats = tuple(n for n in STATS if f"stat:{n}" in needs)  # logit statistics for LossInputs
        self.need_group = "group" in needs  # whole groups per micro- and mini-batch
        self.need_rows = self.need_group or "row" in needs  # per-row values (reward, group mean / std)
        self.likelihood = algo.likelihood is not None  # sequence-likelihood estimates (masked diffusion)
        if self.likelihood and (self.need_entropy or self.stats):
            raise ValueError("algo.likelihood gives sequence-likelihood estimates, no token entropies or logit statistics")
        self.per_mc = self.likelihood and surrogate.caps.per_mc
        # rows whose advantages are all 0 add nothing to the update: leave them out (exact; see OptimConfig)
        self.skip_zero_rows = (
            skip_zero_advantage and surrogate.caps.zero_at_zero_advantage
            and self.kl is None and not self.entropy_coef and not len(self.regularizers) and not self.need_group
            and not self.stats and not self.likelihood and not self.guards.reads_every_row
        )  # fmt: skip

    # ------------------------------------------------------------------ the update
    def prepare(self, learner, batch: Rollouts, generator) -> tuple[Rollouts, dict[str, Tensor], dict[str, float]]:
        if batch.advantages is None:
            raise ValueError("learner.update needs batch.advantages: run an advantage estimator first")
        batch, metrics = self.guards.filter(batch)
        extra: dict[str, Tensor] = {}  # per-row inputs carried through mini/micro-batch selection
        # a strategy may ask for it (carried partial rollouts: pi_old of the current weights over carried tokens too)
        if (learner.recompute_old or batch.recompute_old_logprobs) and batch.old_logprobs is None:
            extra.update({f"old:{k}": v for k, v in learner.fill_logprobs(batch, stats=self.stats).items()})
        elif self.stats and batch.old_logprobs is not None:  # pi_old given: its statistics from the current (= old) weights
            extra.update({f"old:{k}": v for k, v in learner.token_stats(batch, self.stats).items()})
        # else: one update on the sampling policy's log-probs; pi_old's statistics are the current ones (detached)
        if self.need_rows:
            extra.update(_row_values(batch))
        # the engine/learner gap (a masked-diffusion engine has no behaviour log-probs to compare)
        if batch.old_logprobs is not None and not self.likelihood:
            metrics.update(logprob_gap(batch))
        return batch, extra, metrics

    def mini_batches(self, learner, batch: Rollouts, generator) -> list[Tensor]:
        default = lambda: learner.mini_batch_rows(batch, generator, whole_groups=self.need_group)  # noqa: E731
        return self.turns.mini_batches(learner, batch, generator, default)

    def begin_step(self, learner, mb: Rollouts, extra: dict[str, Tensor]) -> Step:
        mb, turn_stats = self.turns.begin(learner, mb)  # SeeUPO: this turn's tokens, pi_old now, A scaled
        mask_all = mb.loss_mask()
        totals = BatchTotals(
            num_tokens=float(mask_all.sum()),
            num_seqs=float((mask_all.sum(-1) > 0).sum()),
            max_new_tokens=self.max_new_tokens,
        )
        self.guards.begin()
        stats: dict[str, tuple[float, float]] = dict(turn_stats)
        rows = len(mb)
        if self.skip_zero_rows:  # after the totals: they still count the skipped rows
            keep = rows_with_signal(mb, mask_all)
            if len(keep) < rows:
                mb, extra = mb.select(keep), {k: v[keep.to(v.device)] for k, v in extra.items()}
            stats["learn/skipped_rows"] = ((rows - len(keep)) / max(rows, 1), 1.0)
        chunks = learner._chunks(mb)
        if self.need_group:
            _check_whole_groups(mb, chunks)
        self.regularizers.begin()
        observe_inline = self.regularizers.prepass and len(chunks) == 1
        if self.regularizers.prepass and not observe_inline:  # whole-mini-batch statistics before any backward
            with torch.no_grad():
                for idx in chunks:
                    micro, mask, sub = learner._micro(mb, extra, idx)
                    if float(mask.sum()) > 0:
                        self.regularizers.observe(self._inputs(learner, micro, mask, sub)[0], totals)
        return Step(mb, extra, chunks, totals, stats, observe_inline)

    def end_step(self, learner, mb: Rollouts, totals: BatchTotals, stats: dict[str, tuple[float, float]]) -> bool:
        if self.skip_zero_rows and not len(mb) and totals.num_tokens > 0:
            for p in learner.model.parameters():  # every row skipped: the zero gradient the full pass would give
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
        return self.guards.stop(stats)  # a high KL skips this step and ends the update

    def after_step(self) -> dict[str, float]:
        return self.regularizers.after_step()

    def finish(self, stopped: bool) -> dict[str, float]:
        return {**self.guards.finish(stopped), **self.regularizers.after_update()}

    def state_dict(self) -> dict:
        return self.regularizers.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.regularizers.load_state_dict(state)

    # ------------------------------------------------------------------ one micro-batch
    def _inputs(self, learner, micro: Rollouts, mask: Tensor, extra: dict[str, Tensor], logp: Tensor | None = None,
                old: Tensor | None = None) -> tuple[LossInputs, Tensor | None]:  # fmt: skip
        """The LossInputs of one micro-batch (one forward of the policy) and the raw entropy; `logp` /
        `old` given (one Monte Carlo term of a `per_mc` surrogate): no forward, these stand for them."""
        entropy, cur = None, {}
        if logp is None:
            logp, entropy, *rest = learner.logprobs(learner.model, micro, with_entropy=self.need_entropy, stats=self.stats)
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

    def loss(self, learner, micro: Rollouts, mask: Tensor, totals: BatchTotals, extra: dict[str, Tensor], *,
             observe: bool = False, logp: Tensor | None = None,
             old: Tensor | None = None) -> tuple[Tensor, dict[str, tuple[float, float]]]:  # fmt: skip
        tokens = float(mask.sum())
        inp, entropy = self._inputs(learner, micro, mask, extra, logp, old)
        logp, old = inp.logp, inp.old_logp
        self.guards.observe(logp, old, mask)
        if observe:  # one micro-batch: the pre-pass statistics come from this forward
            self.regularizers.observe(detached(inp), totals)
        loss_tok, metrics = self.surrogate(inp)
        metrics = dict(metrics)
        if self.correction is not None:
            w, m = self.correction(CorrectionInputs(old, micro.behaviour_logprobs, mask))
            loss_tok = loss_tok * w.detach()
            metrics.update(m)
        if micro.offpolicy_mask is not None:  # tokens another model wrote: the off-policy shaped loss instead
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
        loss = loss if reg_scalar is None else loss + reg_scalar
        return loss, {k: (float(v), tokens) for k, v in metrics.items()}


def rows_with_signal(batch: Rollouts, mask: Tensor) -> Tensor:
    """Row indices [CPU long] of `batch` with a nonzero advantage on a loss token, or with tokens another
    model wrote (`offpolicy_mask`); the other rows add nothing to a `zero_at_zero_advantage` loss."""
    adv = batch.advantages
    adv = adv[:, None] if adv.dim() == 1 else adv
    signal = ((adv * mask) != 0).any(-1)
    if batch.offpolicy_mask is not None:
        signal |= ((batch.offpolicy_mask * mask) != 0).any(-1)
    return torch.nonzero(signal.cpu()).flatten()


def _row_values(batch: Rollouts) -> dict[str, Tensor]:
    """Per-row inputs of group-coupled components ("row:<name>" [N] float32, on the batch's device):
    the scalar reward and its whole-group mean and unbiased std (0 for a group of one), and each
    reward column as "row:col:<column name>"."""
    r = batch.scalar_rewards().double()
    g = batch.groups()
    mean, std = g.mean(r)[g.index], g.std(r)[g.index]
    cols = {f"row:col:{name}": batch.rewards[:, k].float() for k, name in enumerate(batch.reward_names)}
    return {"row:reward": r.float(), "row:group_mean": mean.float(), "row:group_std": std.float(), **cols}


def _check_whole_groups(mb: Rollouts, chunks: list[Tensor]) -> None:
    """A group-coupled component needs each group in one micro-batch."""
    seen: dict[int, int] = {}
    for c, idx in enumerate(chunks):
        for g in torch.unique(mb.group[idx.to(mb.group.device)]).tolist():
            if seen.setdefault(g, c) != c:
                raise ValueError(f"a configured component reads whole groups, but group {g} spans micro-batches: set "
                                 "optim.micro_batch_size to at least the group size (or leave it unset)")  # fmt: skip


def logprob_gap(batch: Rollouts) -> dict[str, float]:
    """The engine/learner mismatch the importance corrections act on, per step: mean and max over
    generated tokens of |pi_old - pi_behaviour| (the learner's recomputed log-prob minus the
    engine's), e.g. an int8 or vLLM engine against a full-precision learner. Carried tokens of an
    older policy version add their staleness to it."""
    mask = batch.completion_mask > 0
    if not bool(mask.any()):
        return {}
    d = (batch.old_logprobs.float() - batch.behaviour_logprobs.float()).abs()[mask]
    return {"rollout/logprob_gap_mean": float(d.mean()), "rollout/logprob_gap_max": float(d.max())}
