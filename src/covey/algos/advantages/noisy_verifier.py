"""Corrections of a binary reward from a verifier with known (or estimated) error rates.

Paper: "Reinforcement Learning with Verifiable yet Noisy Rewards under Imperfect Verifiers" (arXiv
2510.00915). The verifier is a noisy channel from the true reward R in {0, 1} to the observed one
R~ in {0, 1}, with false-positive rate rho0 = P(R~=1 | R=0) and false-negative rate rho1 = P(R~=0 | R=1):

    backward (PGBC):  R^ = (R~ - rho0) / (1 - rho0 - rho1)       E[R^ | R] = R: an unbiased surrogate reward
    forward  (PGFC):  w(R~=1) = rho1,  w(R~=0) = rho1 - 1          E[w | R] = (1 - rho0 - rho1) (R - 1)
                      (needs only rho1; the constant has zero expected score function, so
                       E[w grad log pi] = (1 - rho0 - rho1) E[R grad log pi]: the clean direction)
    appeals:          a second verifier column re-checks the observed negatives; a negative it passes
                      is overturned, and rho1^ = overturned / (positives + overturned) replaces rho1

Status: the two corrections and the appeal are the paper's (abstract and its markdown front matter,
arXiv v2/v3, where the formulas were read); no code was released
(searched), so how the paper hooks them into GRPO is a covey choice, `baseline`:

    "none"   A_i = R^_i (backward) or w_i (forward): the estimator the paper's derivation is about.
    "group"  the group mean of the corrected value is subtracted (Dr. GRPO's baseline). Both corrections
             are affine in R~, so the baseline cancels the offset: backward becomes
             (R~_i - mean_g R~) / (1 - rho0 - rho1) (a larger step, unbiased in scale) and forward becomes
             R~_i - mean_g R~, exactly `dr_grpo`. No std scaling is offered: GRPO's std division would
             cancel both corrections.

Shapes: one reward column [N] (the verifier's verdicts, 0 or 1) -> A [N].
"""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
import torch

from covey.algos.advantages._groups import F64, groups_of, reward_matrix, result
from covey.algos.registry import AdvantageCaps, AdvantageResult, register_advantage
from covey.registry import RegistryError
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["backward_corrected", "forward_weight", "noisy_verifier", "appeal_fn_rate"]

Rate = Annotated[float, pydantic.Field(ge=0.0, lt=0.5)]


def backward_corrected(observed: torch.Tensor, rho0: float, rho1: float) -> torch.Tensor:
    """PGBC's unbiased surrogate reward (R~ - rho0) / (1 - rho0 - rho1), [N] float64."""
    return (observed.to(F64) - rho0) / (1.0 - rho0 - rho1)


def forward_weight(observed: torch.Tensor, rho1: float) -> torch.Tensor:
    """PGFC's score-function weight: rho1 where R~ = 1, rho1 - 1 where R~ = 0, [N] float64."""
    o = observed.to(F64)
    return o * rho1 + (1.0 - o) * (rho1 - 1.0)


def appeal_fn_rate(observed: torch.Tensor, appeal: torch.Tensor) -> tuple[float, int]:
    """(rho1^, overturned): the negatives the appeal verifier passes (appeal >= 0.5) are false
    negatives; rho1^ = overturned / (positives + overturned) (0 when there is nothing positive)."""
    neg = observed < 0.5
    overturned = int((neg & (appeal >= 0.5)).sum())
    positives = int((~neg).sum()) + overturned
    return (overturned / positives if positives else 0.0), overturned


def _column(batch: Rollouts, name: str) -> torch.Tensor:
    if name not in batch.reward_names:
        raise RolloutsError(f"advantage 'noisy_verifier': no reward column {name!r}; columns are {list(batch.reward_names)}")
    return reward_matrix(batch)[:, batch.reward_names.index(name)]


def _check(params: dict) -> None:
    rho0, rho1 = params.get("rho0", 0.0), params.get("rho1", 0.0)
    if params.get("correction", "forward") == "backward" and params.get("appeal"):
        raise RegistryError("advantage 'noisy_verifier': appeals estimate only rho1, which the forward correction uses; "
                            "with correction: backward give rho0 and rho1, or use correction: forward")  # fmt: skip
    if isinstance(rho0, (int, float)) and isinstance(rho1, (int, float)) and rho0 + rho1 >= 1.0:
        raise RegistryError(f"advantage 'noisy_verifier': rho0 + rho1 = {rho0 + rho1} must be < 1 (the verifier must be "
                            "better than chance)")  # fmt: skip


@register_advantage(
    "noisy_verifier",
    paper="Reinforcement Learning with Verifiable yet Noisy Rewards under Imperfect Verifiers",
    arxiv="2510.00915",
    caps=AdvantageCaps(check_ready=_check),
)  # fmt: skip
def noisy_verifier(
    batch: Rollouts,
    *,
    correction: Literal["backward", "forward"] = "forward",
    rho0: Rate = 0.0,
    rho1: Rate = 0.0,
    verdict_column: str = "accuracy",
    appeal: str = "",
    baseline: Literal["none", "group"] = "none",
) -> AdvantageResult:
    """Backward (PGBC) or forward (PGFC) correction of a noisy binary verifier (module docstring).

    verdict_column: the reward column holding the noisy verifier's 0/1 verdict (default: the task's `accuracy`).
    appeal:         a second verifier's reward column (default: none): rho1 is estimated on this batch
                    from the negatives it overturns (forward correction only), instead of the configured rho1.
    baseline:      "none" (the derivation's estimator) or "group" (group mean subtracted).
    Metrics: adv/noisy_verifier/{observed_pos_frac, rho1, overturned}.
    Edge cases: a verdict other than 0 or 1 raises RolloutsError; with "group", a group of one gets 0.
    """
    g = groups_of(batch)
    observed = _column(batch, verdict_column)
    if not bool(((observed == 0) | (observed == 1)).all()):
        bad = sorted({float(v) for v in observed[(observed != 0) & (observed != 1)][:5]})
        raise RolloutsError(f"advantage 'noisy_verifier' corrects a binary verifier, but the reward holds {bad}: "
                            f"point verdict_column at a 0/1 column (it is {verdict_column!r})")  # fmt: skip
    overturned = 0
    if appeal:
        rho1, overturned = appeal_fn_rate(observed, _column(batch, appeal))
        rho1 = min(rho1, 0.5)  # the channel model's range; a verifier wrong on half its positives is no better
    value = backward_corrected(observed, rho0, rho1) if correction == "backward" else forward_weight(observed, rho1)
    if baseline == "group":
        value = torch.where(g.size[g.index] > 1, value - g.mean(value)[g.index], torch.zeros_like(value))
    return result("noisy_verifier", value, batch, g,
                  metrics={"observed_pos_frac": float(observed.mean()), "rho1": rho1, "overturned": overturned})  # fmt: skip
