"""Policy-gradient surrogates: the per-token loss each method minimises.

Every function here has the SURROGATES signature (see `covey.algos.registry`):

    fn(inp: LossInputs, *, **params) -> (loss_tok [N, T], metrics)

`inp.logp` carries gradient; `inp.old_logp` is pi_old (or AReaL's proximal policy) without gradient;
`inp.advantages` is already broadcast to [N, T]. The loss is returned per token *before* masking and
reduction: `covey.algos.aggregation` reduces it, `covey.algos.corrections` multiplies it by detached
importance weights, KL and entropy terms are added by the learner. Metrics are python floats over
the tokens where `inp.mask` is 1, with keys "surrogate/...":

    surrogate/clip_frac       tokens whose gradient the clip removed (any reason)
    surrogate/clip_frac_low   A < 0 and ratio below 1 - eps_low
    surrogate/clip_frac_high  A > 0 and ratio above 1 + eps_high
    surrogate/clip_frac_dual  dual clip active (A < 0, ratio > c)
    surrogate/ratio_mean|min|max   the ratio the method uses (token ratio, or GSPO's sequence ratio)

Sequence-level methods (gspo, luspo) return the per-sequence loss repeated on every token of the row,
so "seq-mean-token-mean" aggregation gives exactly mean_i l_i.
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field
from torch import Tensor

from covey.algos.aggregation import masked_row_mean, masked_summary
from covey.algos.registry import LossInputs, SurrogateCaps, register_surrogate

NonNeg = Annotated[float, Field(ge=0.0)]
Positive = Annotated[float, Field(gt=0.0)]
AboveOne = Annotated[float, Field(gt=1.0)]


# ---------------------------------------------------------------------------- shared pieces
def _check(inp: LossInputs) -> None:
    want = tuple(inp.mask.shape)
    for name in ("logp", "old_logp", "advantages"):
        got = tuple(getattr(inp, name).shape)
        if got != want:
            raise ValueError(f"LossInputs.{name} has shape {got}; it must match mask {want} (advantages broadcast to [N, T])")


def _log_ratio(inp: LossInputs, clamp: float | None) -> Tensor:
    """log pi_theta - log pi_old per token [N, T]; clamped to +-clamp (verl) so exp never overflows."""
    d = inp.logp - inp.old_logp
    return d if clamp is None else d.clamp(-clamp, clamp)


def _seq_log_ratio(inp: LossInputs, max_log: float | None) -> Tensor:
    """Length-normalised sequence log-ratio [N] with gradient; L_i = 0 gives 0 (s_i = 1)."""
    lr = masked_row_mean(inp.logp - inp.old_logp, inp.mask)
    return lr if max_log is None else lr.clamp(max=max_log)


def _seq_advantage(inp: LossInputs) -> Tensor:
    """Masked row mean of the token advantages [N] (= A_i for outcome advantages; 0 for empty rows)."""
    return masked_row_mean(inp.advantages, inp.mask)


def _fracs(mask: Tensor, **flags: Tensor) -> dict[str, float]:
    """Masked fraction of each boolean flag [N, T], in one device sync."""
    denom = mask.sum().clamp(min=1.0)
    keys = list(flags)
    vals = torch.stack([(flags[k].float() * mask).sum() / denom for k in keys]).tolist()
    return {f"surrogate/{k}": v for k, v in zip(keys, vals)}


def _clipped_pg(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO pessimistic clipped loss max(-A r, -A clip(r)) and the clip flags (shapes follow `ratio`)."""
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    r = ratio.detach()
    flags = {"clip_frac_low": (adv < 0) & (r < 1.0 - eps_low), "clip_frac_high": (adv > 0) & (r > 1.0 + eps_high)}
    return loss, flags


def offpolicy_shaped_loss(loss_tok: Tensor, logp: Tensor, adv: Tensor, offpolicy: Tensor, gamma: float = 0.1) -> Tensor:
    """LUFFY's off-policy term (arXiv 2504.14945) on tokens another model wrote (`Rollouts.offpolicy_mask`):
    -A · f(pi_theta), f(x) = x / (x + gamma), no clipping and no ratio to a behaviour policy; `loss_tok`
    elsewhere. Only the gradient matters: d f / d logp = pi gamma / (pi + gamma)^2 (low-probability
    tokens are up-weighted relative to pi)."""
    p = logp.exp()
    return torch.where(offpolicy > 0, -adv * p / (p + gamma), loss_tok)


# ---------------------------------------------------------------------------- token-level surrogates
@register_surrogate("ppo_clip", paper="Proximal Policy Optimization Algorithms", arxiv="1707.06347")
def ppo_clip(
    inp: LossInputs,
    *,
    eps_low: NonNeg = 0.2,
    eps_high: NonNeg = 0.2,
    dual_clip: AboveOne | None = None,
    delta: AboveOne | None = None,
    log_ratio_clamp: Positive | None = 20.0,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate with decoupled clip range (DAPO clip-higher), optional dual clip and TRL `delta`.

    Paper: "Proximal Policy Optimization Algorithms" (Schulman et al., arXiv 1707.06347); decoupled
    eps_low/eps_high from DAPO (arXiv 2503.14476); dual clip from "Mastering Complex Control in MOBA
    Games with Deep RL" (Ye et al., arXiv 1912.09729); `delta` from INTELLECT-2 (arXiv 2505.07291).

        r      = exp(clamp(logp - old_logp, +-log_ratio_clamp))                [N, T]
        l_clip = max(-A r_d, -A clip(r, 1 - eps_low, 1 + eps_high)),  r_d = min(r, delta) (r if delta None)
        loss   = min(l_clip, -A c)  where A < 0 (dual clip c), else l_clip

    Shapes: all [N, T]. Defaults: verl/TRL eps 0.2/0.2; DAPO uses eps_high=0.28, dual_clip=10
    (verl's default c when dual clip is on is 3.0). Clipped tokens get exactly zero gradient.
    Edge cases: A = 0 gives loss 0; masked/padded tokens are left to the aggregation.
    Departures: verl always applies the dual clip (c=3) and the +-20 log-ratio clamp; TRL applies
    neither. Here dual_clip=None is off (TRL) and log_ratio_clamp=None removes the clamp.
    """
    _check(inp)
    adv = inp.advantages
    ratio = torch.exp(_log_ratio(inp, log_ratio_clamp))
    unclipped = ratio if delta is None else ratio.clamp(max=delta)
    loss = torch.maximum(-adv * unclipped, -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    r = ratio.detach()
    flags = {"clip_frac_low": (adv < 0) & (r < 1.0 - eps_low), "clip_frac_high": (adv > 0) & (r > 1.0 + eps_high)}
    if delta is not None:
        flags["clip_frac_delta"] = (adv < 0) & (r > delta)
    if dual_clip is not None:
        dual = -adv * dual_clip
        flags["clip_frac_dual"] = (adv < 0) & (dual < loss.detach())
        loss = torch.where(adv < 0, torch.minimum(loss, dual), loss)
    any_clip = torch.stack(list(flags.values())).any(0)
    metrics = _fracs(inp.mask, clip_frac=any_clip, **flags)
    metrics.update(masked_summary(r, inp.mask, "surrogate/ratio"))
    return loss, metrics


@register_surrogate("reinforce", paper="Simple statistical gradient-following algorithms (REINFORCE)")
def reinforce(inp: LossInputs) -> tuple[Tensor, dict[str, float]]:
    """Plain policy gradient: loss = -A * logp (no ratio, no clip).

    Paper: Williams (1992), "Simple statistical gradient-following algorithms for connectionist
    reinforcement learning" (no arXiv id). Gradient per token: -A * d logp. Correct only on-policy
    (one update per batch); add a correction (tis/decoupled) for off-policy data.
    Shapes: [N, T]. Edge cases: A = 0 gives loss 0. The logged ratio exp(logp - old_logp) is a
    diagnostic of how off-policy the update is; it does not enter the loss.
    """
    _check(inp)
    metrics = masked_summary(torch.exp((inp.logp - inp.old_logp).detach().clamp(-20, 20)), inp.mask, "surrogate/ratio")
    return -inp.advantages * inp.logp, metrics


@register_surrogate(
    "cispo",
    paper="MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention",
    arxiv="2506.13585",
)
def cispo(
    inp: LossInputs,
    *,
    eps_low: NonNeg | None = None,
    eps_high: Positive | None = 0.2,
    cap_mode: Literal["relative", "absolute"] = "relative",
    log_ratio_clamp: Positive | None = 20.0,
) -> tuple[Tensor, dict[str, float]]:
    """CISPO: REINFORCE with a clipped, stop-gradient importance weight; no token is ever zeroed.

    Paper: "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention" (arXiv 2506.13585).

        w    = sg(clamp(r, 1 - eps_low, 1 + eps_high))    cap_mode="relative" (verl)
        w    = sg(clamp(r, max=eps_high))                  cap_mode="absolute" (TRL; ScaleRL uses 5.0)
        loss = -w * A * logp                               [N, T];  d loss / d logp = -w A

    eps_low=None means no lower bound (the paper tunes only the upper one); eps_high=None no cap.
    Defaults follow verl's example (no lower bound, cap 1.2); MiniMax's own eps is UNVERIFIED.
    Edge cases: on-policy (r = 1) CISPO is REINFORCE with group advantages; loss values are
    -w A logp, not comparable with PPO-style ratio losses. "absolute" with eps_low set is rejected
    (TRL has no lower bound there).
    """
    _check(inp)
    if cap_mode == "absolute" and eps_low is not None:
        raise ValueError(f"cispo cap_mode='absolute' takes only eps_high (an absolute cap); got eps_low={eps_low}, use None")
    ratio = torch.exp(_log_ratio(inp, log_ratio_clamp)).detach()
    shift = 1.0 if cap_mode == "relative" else 0.0
    upper = None if eps_high is None else shift + eps_high
    lower = None if eps_low is None else 1.0 - eps_low
    weight = ratio if lower is None and upper is None else ratio.clamp(min=lower, max=upper)
    flags = {
        "clip_frac_low": ratio < lower if lower is not None else torch.zeros_like(ratio, dtype=torch.bool),
        "clip_frac_high": ratio > upper if upper is not None else torch.zeros_like(ratio, dtype=torch.bool),
    }
    metrics = _fracs(inp.mask, clip_frac=flags["clip_frac_low"] | flags["clip_frac_high"], **flags)
    metrics.update(masked_summary(ratio, inp.mask, "surrogate/ratio"))
    metrics.update(masked_summary(weight, inp.mask, "surrogate/weight"))
    return -weight * inp.advantages * inp.logp, metrics


@register_surrogate("sapo", paper="Soft Adaptive Policy Optimization", arxiv="2511.20347")
def sapo(
    inp: LossInputs, *, tau_pos: Positive = 1.0, tau_neg: Positive = 1.05, log_ratio_clamp: Positive | None = 20.0
) -> tuple[Tensor, dict[str, float]]:
    """SAPO: a smooth sigmoid gate on the ratio replaces the hard clip.

    Paper: "Soft Adaptive Policy Optimization" (Qwen, arXiv 2511.20347).

        tau  = tau_pos where A > 0 else tau_neg          (A = 0 takes tau_neg)
        f    = sigmoid(tau (r - 1)) * 4 / tau            d f / d r = 4 s (1 - s), s = sigmoid(tau (r - 1))
        loss = -f(r) * A                                 [N, T]

    The gate's slope is 1 at r = 1 (the unclipped PPO gradient on-policy) and decays smoothly as
    |r - 1| grows; f(1) = 2 / tau is a constant offset without gradient effect. Defaults tau_pos=1.0,
    tau_neg=1.05 (verl and TRL, citing the paper). Pair with seq-mean-token-mean (verl forces it).
    Metric surrogate/gate_grad_mean is the mean gate slope 4 s (1 - s).
    """
    _check(inp)
    adv = inp.advantages
    ratio = torch.exp(_log_ratio(inp, log_ratio_clamp))
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    s = torch.sigmoid(tau * (ratio - 1.0))
    metrics = masked_summary(ratio.detach(), inp.mask, "surrogate/ratio")
    metrics.update(masked_summary((4.0 * s * (1.0 - s)).detach(), inp.mask, "surrogate/gate_grad", stats=("mean",)))
    return -(s * 4.0 / tau) * adv, metrics


# ---------------------------------------------------------------------------- sequence-level surrogates
def _gspo_seq(inp: LossInputs, eps_low: float, eps_high: float, max_log: float | None):
    """Per-sequence GSPO loss l_i [N], the sequence ratio s_i [N] and clip flags [N, T]."""
    s = torch.exp(_seq_log_ratio(inp, max_log))  # [N]
    adv = _seq_advantage(inp)  # [N]
    loss_seq, flags = _clipped_pg(s, adv, eps_low, eps_high)
    flags = {k: v[:, None].expand_as(inp.mask) for k, v in flags.items()}  # [N] -> [N, T]
    return loss_seq, s, flags


def _seq_metrics(inp: LossInputs, s: Tensor, flags: dict[str, Tensor]) -> dict[str, float]:
    metrics = _fracs(inp.mask, clip_frac=flags["clip_frac_low"] | flags["clip_frac_high"], **flags)
    metrics.update(masked_summary(s.detach(), (inp.mask.sum(-1) > 0).float(), "surrogate/ratio"))
    return metrics


@register_surrogate("gspo", paper="Group Sequence Policy Optimization", arxiv="2507.18071")
def gspo(
    inp: LossInputs, *, eps_low: NonNeg = 3e-4, eps_high: NonNeg = 4e-4, log_ratio_max: Positive | None = 10.0
) -> tuple[Tensor, dict[str, float]]:
    """GSPO: PPO clip on the length-normalised sequence ratio; one loss per sequence.

    Paper: "Group Sequence Policy Optimization" (Qwen, arXiv 2507.18071).

        s_i  = exp( min( (1/L_i) sum_t mask (logp - old_logp), log_ratio_max ) )     [N]
        l_i  = max(-A_i s_i, -A_i clip(s_i, 1 - eps_low, 1 + eps_high))               [N]
        loss_tok[i, t] = l_i                                                          [N, T]

    A_i is the masked row mean of the token advantages (= the sequence advantage for outcome
    rewards). d s_i / d logp_it = s_i mask_it / L_i. Defaults: paper §5.1 clip range 3e-4 / 4e-4;
    log-ratio cap 10 as verl. Pair with "seq-mean-token-mean" to get the paper's mean_i l_i.
    Edge cases: L_i = 0 gives s_i = 1, A_i = 0, loss 0. The tiny clip range clips many sequences;
    that is expected. Ratio metrics are over non-empty sequences.
    """
    _check(inp)
    loss_seq, s, flags = _gspo_seq(inp, eps_low, eps_high, log_ratio_max)
    return loss_seq[:, None].expand_as(inp.mask), _seq_metrics(inp, s, flags)


@register_surrogate("gspo_token", paper="Group Sequence Policy Optimization", arxiv="2507.18071")
def gspo_token(
    inp: LossInputs, *, eps_low: NonNeg = 3e-4, eps_high: NonNeg = 4e-4, log_ratio_max: Positive | None = 10.0
) -> tuple[Tensor, dict[str, float]]:
    """GSPO-token: the sequence ratio's value with per-token gradients and per-token advantages.

    Paper: "Group Sequence Policy Optimization" (arXiv 2507.18071), eq. for GSPO-token; verl
    `compute_policy_loss_gspo`.

        log s_it = min( logp_it - sg(logp_it) + sg(mean_t log-ratio_i), log_ratio_max )   value log s_i
        loss_it  = max(-A_it s_it, -A_it clip(s_it, 1 - eps_low, 1 + eps_high))             [N, T]

    With A_it = A_i and "seq-mean-token-mean" this has the same value and gradient as `gspo`;
    it differs when advantages vary along the sequence (per-token credit). Edge cases as `gspo`.
    """
    _check(inp)
    seq_lr = _seq_log_ratio(inp, None).detach()  # [N]
    log_s = inp.logp - inp.logp.detach() + seq_lr[:, None]  # [N, T]
    if log_ratio_max is not None:
        log_s = log_s.clamp(max=log_ratio_max)
    s_tok = torch.exp(log_s)
    loss, flags = _clipped_pg(s_tok, inp.advantages, eps_low, eps_high)
    s_seq = torch.exp(seq_lr if log_ratio_max is None else seq_lr.clamp(max=log_ratio_max))  # [N]
    return loss, _seq_metrics(inp, s_seq, flags)


@register_surrogate("luspo", paper="Length-Unbiased Sequence Policy Optimization", arxiv="2602.05261")
def luspo(
    inp: LossInputs, *, eps_low: NonNeg = 2e-3, eps_high: NonNeg = 2.5e-3, log_ratio_max: Positive | None = 10.0
) -> tuple[Tensor, dict[str, float]]:
    """LUSPO: GSPO with each sequence's loss multiplied by its length L_i.

    Paper: "Length-Unbiased Sequence Policy Optimization" (Meituan, arXiv 2602.05261); TRL
    `loss_type="luspo"`.

        loss_tok[i, t] = L_i * l_i        (l_i the GSPO sequence loss, `gspo` above)       [N, T]

    With "seq-mean-token-mean" this is mean_i(L_i l_i), TRL's LUSPO loss (TRL averages over all rows,
    covey over non-empty rows). The same value and gradient come from `gspo` with
    "seq-mean-token-sum" (a test pins this). Defaults eps 2e-3 / 2.5e-3 (paper §5.1 via TRL's paper
    index). Gradient magnitude grows with length by design; loss values are not comparable with GSPO.
    """
    _check(inp)
    loss_seq, s, flags = _gspo_seq(inp, eps_low, eps_high, log_ratio_max)
    lengths = inp.mask.sum(-1)  # [N]
    return (loss_seq * lengths)[:, None].expand_as(inp.mask), _seq_metrics(inp, s, flags)


@register_surrogate(
    "dhpo",
    paper="Dynamic Hybrid Policy Optimization (UNVERIFIED reconstruction)",
    arxiv="2601.05607",
    requires=("entropies",),
)
def dhpo(
    inp: LossInputs,
    *,
    mixing: Literal["average", "entropy"] = "average",
    eps_tok_low: NonNeg = 0.2,
    eps_tok_high: NonNeg = 0.28,
    eps_seq_low: NonNeg = 3e-4,
    eps_seq_high: NonNeg = 4e-4,
    entropy_temp: Positive = 1.0,
    log_ratio_clamp: Positive | None = 20.0,
) -> tuple[Tensor, dict[str, float]]:
    """DHPO (UNVERIFIED reconstruction): mix token-level PPO and sequence-level GSPO, each clipped in its own range.

    Paper: "Dynamic Hybrid Policy Optimization" (arXiv 2601.05607). UNVERIFIED: only the abstract's
    structure was confirmed (token and sequence ratios mixed, averaged or entropy-guided mixing,
    branch-specific clipping before mixing); no code was released. covey's choices:

        J_tok = min(r_it A, clip(r_it, 1 - eps_tok_low, 1 + eps_tok_high) A)        PPO branch
        J_seq = min(s_it A, clip(s_it, 1 - eps_seq_low, 1 + eps_seq_high) A)        GSPO-token branch
        w_it  = 0.5                                               mixing="average"
        w_it  = sigmoid((H_it - Hbar_i) / entropy_temp)           mixing="entropy" (detached; Hbar_i
                masked row mean of inp.entropy): high-entropy "fork" tokens lean on the token ratio
        loss  = -(w J_tok + (1 - w) J_seq)                                           [N, T]

    (arithmetic mixing of the already-clipped branch objectives, no outer clip; the paper may mix
    geometrically or clip once more). Do not report results as "DHPO" without checking the paper.
    Edge cases: at average entropy w = 0.5, so both variants agree there; L_i = 0 rows give 0.
    """
    _check(inp)
    adv = inp.advantages
    tok_loss, tok_flags = _clipped_pg(torch.exp(_log_ratio(inp, log_ratio_clamp)), adv, eps_tok_low, eps_tok_high)
    seq_lr = _seq_log_ratio(inp, None).detach()
    s_tok = torch.exp((inp.logp - inp.logp.detach() + seq_lr[:, None]).clamp(max=10.0))  # verl's GSPO cap
    seq_loss, seq_flags = _clipped_pg(s_tok, adv, eps_seq_low, eps_seq_high)
    if mixing == "entropy":
        if inp.entropy is None:
            raise ValueError("dhpo mixing='entropy' needs LossInputs.entropy [N, T] (current-policy token entropy); got None")
        h = inp.entropy.detach()
        h_bar = (h * inp.mask).sum(-1, keepdim=True) / inp.mask.sum(-1, keepdim=True).clamp(min=1.0)  # [N, 1]
        w = torch.sigmoid((h - h_bar) / entropy_temp)
    else:
        w = torch.full_like(adv, 0.5)
    flags = {"clip_frac_tok": tok_flags["clip_frac_low"] | tok_flags["clip_frac_high"],
             "clip_frac_seq": seq_flags["clip_frac_low"] | seq_flags["clip_frac_high"]}
    metrics = _fracs(inp.mask, clip_frac=flags["clip_frac_tok"] & flags["clip_frac_seq"], **flags)
    metrics.update(masked_summary(w, inp.mask, "surrogate/token_weight", stats=("mean",)))
    metrics.update(masked_summary(torch.exp(seq_lr), (inp.mask.sum(-1) > 0).float(), "surrogate/ratio"))
    return w * tok_loss + (1.0 - w) * seq_loss, metrics


# ---------------------------------------------------------------------------- entropy-adaptive token surrogates
def hapo_entropy_stats(entropy: Tensor, mask: Tensor, pivot: float, eps: float = 1e-8) -> tuple[float, float, float, float] | None:
    """(m, rms, pos, neg) of HAPO's entropy normalisation over the unmasked tokens (None: no token).

        l   = log(max(H, eps));   m = l's `pivot` quantile over unmasked tokens ("nearest": the
              kthvalue at round(pivot (n - 1)), Python rounding, as `torch_quantile`)
        rms = sqrt(max(mean_mask((l - m)^2), eps))                     (RMS about m, not a std)
        pos = max(max(h over mask, h > 0), eps);  neg = min(min(h over mask, h < 0), -eps),  h = (l - m) / rms
    """
    keep = mask > 0
    n = int(keep.sum())
    if n == 0:
        return None
    lg = torch.log(entropy.detach().float().clamp_min(eps))
    m = torch.kthvalue(lg[keep], round(pivot * (n - 1)) + 1).values
    rms = ((lg - m).pow(2) * keep).sum().div(n).clamp_min(eps).sqrt()
    h = (lg - m) / rms
    pos = h.masked_fill(~(keep & (h > 0)), 0.0).max().clamp_min(eps)
    neg = h.masked_fill(~(keep & (h < 0)), 0.0).min().clamp_max(-eps)
    return float(m), float(rms), float(pos), float(neg)


def hapo_h_hat(entropy: Tensor, stats: tuple[float, float, float, float], signed: bool, eps: float = 1e-8) -> Tensor:
    """h_hat of `entropy` (any shape) under normalisation `stats` (`hapo_entropy_stats`):
    h = (log(max(H, eps)) - m) / rms;  h / pos where h > 0;  h / neg where h <= 0 (released: >= 0, the
    sign is lost), h / |neg| with `signed` (h_hat in [-1, 1] on the tokens the stats came from)."""
    m, rms, pos, neg = stats
    h = (torch.log(entropy.detach().float().clamp_min(eps)) - m) / rms
    return torch.where(h > 0, h / pos, h / (abs(neg) if signed else neg))


def hapo_entropy_norm(entropy: Tensor, mask: Tensor, pivot: float, signed: bool, eps: float = 1e-8) -> Tensor:
    """HAPO's normalised log-entropy h_hat [N, T] over the unmasked tokens of `entropy` (no gradient):
    the statistics of these tokens (`hapo_entropy_stats`) applied to them (`hapo_h_hat`).
    No unmasked token: h_hat = 0 everywhere."""
    stats = hapo_entropy_stats(entropy, mask, pivot, eps)
    return torch.zeros_like(entropy) if stats is None else hapo_h_hat(entropy, stats, signed, eps)


@register_surrogate(
    "hapo",
    paper="Heterogeneous Adaptive Policy Optimization: Tailoring Optimization to Every Token's Nature (VERIFIED-CODE)",
    arxiv="2509.16591",
    requires=("entropies",),
)
def hapo(
    inp: LossInputs,
    *,
    eps_low: NonNeg = 0.2,
    eps_high: NonNeg = 0.2,
    dual_clip: AboveOne | None = 10.0,
    pivot: Annotated[float, Field(ge=0.0, le=1.0)] = 0.8,
    adaptive_clip: bool = True,
    clip_alpha: NonNeg = 1.0,
    adaptive_advantage: bool = True,
    adv_beta: NonNeg = 1.0,
    signed: bool = False,
    log_ratio_clamp: Positive | None = 20.0,
) -> tuple[Tensor, dict[str, float]]:
    """HAPO: PPO clip whose bounds and advantage adapt to each token's normalised entropy.

    Paper: "Heterogeneous Adaptive Policy Optimization" (arXiv 2509.16591); starriver030515/HAPO
    `7671dde3e268` `compute_entropy_h`, `ada_clip`, `ada_advantage`, `compute_policy_loss`.

        h_hat    = hapo_entropy_norm(H, mask, pivot, signed)             H = inp.entropy (current policy)
        eps_low  = eps_low (1 - clip_alpha h_hat) where h_hat <= 0      (adaptive_clip)
        eps_high = eps_high (1 + clip_alpha h_hat) where h_hat > 0
        A_ent    = A (1 + adv_beta h_hat);  band = 1 - eps_low/2 < sg(r) < 1 + eps_high/2   (adaptive_advantage)
        A_t      = (A if band else A_ent) where h_hat > 0;  (A_ent if band else A) where h_hat <= 0
        loss     = max(-A_t r, -A_t clip(r, 1 - eps_low, 1 + eps_high)), then min(., -A_t c) where A_t < 0

    Defaults are the recipe's (eps 0.2/0.2, pivot 0.8, clip_alpha = adv_beta = 1, dual clip c = 10).
    Released-code behaviours kept on purpose: (1) h_hat is >= 0 (h / neg with neg < 0), so low-entropy
    tokens are treated like high-entropy ones and eps_low never moves; ``signed=True`` gives the
    abstract's reading (h_hat in [-1, 1]). (2) The entropy statistics are over the tokens the surrogate
    sees, i.e. one micro-batch, as in the reference: results depend on micro_batch_size. The ±20
    log-ratio clamp is covey's overflow guard (the reference has none). Pair with "token-mean".
    Metrics: surrogate/clip_frac(_low/_high/_dual), surrogate/ratio_*, surrogate/h_hat_mean,
    surrogate/adv_shaped_frac (tokens whose advantage was scaled).
    """
    _check(inp)
    if inp.entropy is None:
        raise ValueError("surrogate 'hapo' needs LossInputs.entropy [N, T] (current-policy token entropy); got None")
    adv = inp.advantages
    ratio = torch.exp(_log_ratio(inp, log_ratio_clamp))
    r = ratio.detach()
    h_hat = hapo_entropy_norm(inp.entropy, inp.mask, pivot, signed)
    lo = torch.full_like(h_hat, eps_low)
    hi = torch.full_like(h_hat, eps_high)
    if adaptive_clip:
        lo = torch.where(h_hat <= 0, lo * (1 - clip_alpha * h_hat), lo)
        hi = torch.where(h_hat > 0, hi * (1 + clip_alpha * h_hat), hi)
    shaped = torch.zeros_like(h_hat, dtype=torch.bool)
    if adaptive_advantage:
        band = (r > 1 - lo / 2) & (r < 1 + hi / 2)
        shaped = torch.where(h_hat > 0, ~band, band)
        adv = torch.where(shaped, adv * (1 + adv_beta * h_hat), adv)
    loss = torch.maximum(-adv * ratio, -adv * torch.minimum(torch.maximum(ratio, 1 - lo), 1 + hi))
    flags = {"clip_frac_low": (adv < 0) & (r < 1 - lo), "clip_frac_high": (adv > 0) & (r > 1 + hi)}
    if dual_clip is not None:
        dual = -adv * dual_clip
        flags["clip_frac_dual"] = (adv < 0) & (dual < loss.detach())
        loss = torch.where(adv < 0, torch.minimum(loss, dual), loss)
    metrics = _fracs(inp.mask, clip_frac=torch.stack(list(flags.values())).any(0), adv_shaped_frac=shaped & (adv != 0), **flags)
    metrics.update(masked_summary(r, inp.mask, "surrogate/ratio"))
    metrics.update(masked_summary(h_hat, inp.mask, "surrogate/h_hat", stats=("mean",)))
    return loss, metrics


# ---------------------------------------------------------------------------- per-sample trust regions
@register_surrogate(
    "etr_provisional",
    paper="Outcome-Guided Elastic Trust Regions (UNVERIFIED reconstruction)",
    arxiv="2601.03723",
    requires=("row",),
)  # fmt: skip
def etr_provisional(
    inp: LossInputs,
    *,
    eps_low: NonNeg = 0.2,
    eps_high: NonNeg = 0.28,
    kappa: NonNeg = 0.5,
    scale: Positive = 0.5,
    log_ratio_clamp: Positive | None = 20.0,
) -> tuple[Tensor, dict[str, float]]:
    """ETR (UNVERIFIED reconstruction): PPO clip with per-sample bounds, wider for large |A| and for
    groups with a high reward spread.

    Paper: ETR, Outcome-Guided Elastic Trust Regions (arXiv 2601.03723). UNVERIFIED: only the abstract's mechanism (micro level: |A|; macro level: the group's
    reward variance) was read, no code; the parametrisation is covey's:

        A_i      = masked row mean of the token advantages;  sigma_g = unbiased std of the group's rewards
        e_i      = 1 + kappa |A_i| sigma_g / scale       (= 1 + 2 kappa |r_i - mean_g r| for GRPO, scale 0.5)
        loss     = max(-A r, -A clip(r, 1 - eps_low e_i, 1 + eps_high e_i))                     [N, T]

    sigma_g comes from `LossInputs.row["group_std"]` (whole-batch groups; requires "row"). Defaults:
    eps 0.2 / 0.28 (DAPO's), kappa 0.5, scale 0.5 (suggested, not the paper's). Edge cases:
    zero-variance groups have A = 0 (no update whatever the bounds); kappa = 0 is `ppo_clip`.
    Metrics: surrogate/clip_frac(_low/_high), ratio, surrogate/eps_scale_mean.
    """
    _check(inp)
    if "group_std" not in inp.row:
        raise ValueError("surrogate 'etr_provisional' needs LossInputs.row['group_std'] (the learner fills it when 'row' is required)")
    adv = inp.advantages
    e = 1.0 + kappa * _seq_advantage(inp).abs() * inp.row["group_std"].to(adv.dtype) / scale  # [N]
    lo, hi = (eps_low * e)[:, None], (eps_high * e)[:, None]
    ratio = torch.exp(_log_ratio(inp, log_ratio_clamp))
    loss = torch.maximum(-adv * ratio, -adv * torch.minimum(torch.maximum(ratio, 1.0 - lo), 1.0 + hi))
    r = ratio.detach()
    flags = {"clip_frac_low": (adv < 0) & (r < 1.0 - lo), "clip_frac_high": (adv > 0) & (r > 1.0 + hi)}
    metrics = _fracs(inp.mask, clip_frac=flags["clip_frac_low"] | flags["clip_frac_high"], **flags)
    metrics.update(masked_summary(r, inp.mask, "surrogate/ratio"))
    metrics.update(masked_summary(e[:, None].expand_as(r), inp.mask, "surrogate/eps_scale", stats=("mean",)))
    return loss, metrics


@register_surrogate(
    "r2vpo_provisional",
    paper="Ratio-Variance Regularized Policy Optimization (UNVERIFIED reconstruction)",
    arxiv="2601.03320",
)  # fmt: skip
def r2vpo_provisional(inp: LossInputs, *, log_ratio_clamp: Positive | None = 20.0) -> tuple[Tensor, dict[str, float]]:
    """R2VPO (UNVERIFIED reconstruction): the unclipped ratio term; its trust region is the
    `r2vpo_provisional` regularizer (lambda * Var(ratio) with a dual update of lambda).

    Paper: arXiv 2601.03320 (no code, no equations read):

        loss = -r A,   r = exp(clamp(logp - old_logp, +-log_ratio_clamp))        [N, T]

    With token-mean aggregation plus the regularizer: loss = -token-mean(r A) + lambda Var_tok(r)
    (spec vector: ratios [1.1, 0.9, 1.3], A [1, -1, 1], lambda 0.5 -> -0.4867). A config with this
    surrogate and without the regularizer is refused (no clip and no constraint).
    """
    _check(inp)
    ratio = torch.exp(_log_ratio(inp, log_ratio_clamp))
    return -inp.advantages * ratio, masked_summary(ratio.detach(), inp.mask, "surrogate/ratio")


# ---------------------------------------------------------------------------- masked diffusion (docs/diffusion.md)
@register_surrogate("bgpo", paper="BGPO: boundary-guided policy optimization for diffusion LLMs", arxiv="2510.11683")
def bgpo(
    inp: LossInputs,
    *,
    eps_low: NonNeg = 0.2,
    eps_high: NonNeg = 0.2,
    clip_ratio_c: AboveOne = 3.0,
) -> tuple[Tensor, dict[str, float]]:
    """BGPO's per-Monte-Carlo-sample lower bound: applied to one ELBO sample at a time (`per_mc`: the
    learner runs one forward and one backward per sample, loss / mc_num, so memory stays flat in
    the number of samples).

        d = l_j - l_j_old                      (per-token-normalised ELBO sample j, broadcast on the row)
        r = 1 + d          where A > 0         (tangent: e^d >= 1 + d, a lower bound of A e^d)
          = exp(d)         where A <= 0        (Jensen: mean_j e^d_j >= e^(mean d_j))
        loss = dual-clip PPO(r, A; eps_low, eps_high, c)

    On-policy (d = 0) value and gradient equal the ELBO-ratio PPO loss's (tests). RECONSTRUCTED
    from a description of a third-party port's `compute_policy_loss_bgpo` (the port itself was not read); it computes
    the A > 0 ratio as exp(log(1 + d)), NaN for d <= -1: here 1 + d, clamped at 1e-6. mc_num and
    the clip values of the paper are UNVERIFIED (the port's c = 3.0).
    """
    _check(inp)
    adv = inp.advantages
    d = inp.logp - inp.old_logp
    ratio = torch.where(adv > 0, (1.0 + d).clamp(min=1e-6), torch.exp(d.clamp(-20.0, 20.0)))
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    r = ratio.detach()
    flags = {"clip_frac_low": (adv < 0) & (r < 1.0 - eps_low), "clip_frac_high": (adv > 0) & (r > 1.0 + eps_high)}
    dual = -adv * clip_ratio_c
    flags["clip_frac_dual"] = (adv < 0) & (dual < loss.detach())
    loss = torch.where(adv < 0, torch.minimum(loss, dual), loss)
    metrics = _fracs(inp.mask, clip_frac=torch.stack(list(flags.values())).any(0), **flags)
    metrics.update(masked_summary(r, inp.mask, "surrogate/ratio"))
    return loss, metrics


bgpo.caps = SurrogateCaps(per_mc=True)  # the learner applies it to each Monte Carlo term of the likelihood, one backward each


# Row-local, and zero with its gradient wherever the advantage is 0 (any ratio, any weight): a row whose
# advantages are all 0 adds nothing to the update, so the learner may leave it out of the forward and
# backward passes (`optim.skip_zero_advantage`). Not hapo (its entropy statistics pool the micro-batch's
# rows), bgpo (per Monte Carlo term), nor the regression surrogates (they pull a ratio towards a target).
for _fn in (ppo_clip, reinforce, cispo, sapo, gspo, gspo_token, luspo, dhpo, etr_provisional):
    _fn.caps = SurrogateCaps(zero_at_zero_advantage=True)
r2vpo_provisional.caps = SurrogateCaps(zero_at_zero_advantage=True, trust_region="r2vpo_provisional")  # unclipped
