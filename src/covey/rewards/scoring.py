"""Scoring a `Rollouts` batch: reward functions, then reward-side shaping terms, in one place.

    batch.rewards [N, K] = [reward functions (RewardRunner) | shaping columns]
    scalar reward        = batch.rewards @ batch.reward_weights      (`Rollouts.scalar_rewards`)

A shaping term is a component with a `name` and `__call__(batch) -> [N]` float column, added with
weight 1 after the reward functions: DAPO's soft overlong punishment (`overlong`) and the KL
penalty in the reward (`kl_penalty`, `algo.kl.mode: reward`). They are built from the algorithm
config by `shaping_terms`; nothing else adds to the reward.

Every column has its own name, and a penalty is counted once: `check_reward_columns` (run when the
config is read) refuses two columns with the same name, and a configured reward that is the same
penalty as a shaping term (the `overlong` reward next to `algo.overlong`, which the dapo preset
sets), naming `algo.overlong` as the one place to configure it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from covey.algos.kl import kl_reward_penalty
from covey.algos.shaping import overlong_penalty
from covey.rollouts import Rollouts, item_columns

__all__ = ["KLRewardPenalty", "OverlongShaping", "Scorer", "ShapingTerm", "check_reward_columns", "shaping_terms"]


class ShapingTerm(Protocol):
    name: str  # its reward column
    key: str  # the AlgoConfig field that switches it on
    reward: str | None  # the registered reward that computes the same penalty (never configure both), if any

    def __call__(self, batch: Rollouts) -> Tensor: ...


class OverlongShaping:
    """DAPO soft overlong punishment (arXiv 2503.14476, eq. 13) as a reward column."""

    name = "overlong"
    key = "overlong"  # the AlgoConfig field that switches it on
    reward = "overlong"  # the registered reward that computes the same penalty (never configure both)

    def __init__(self, max_len: int, buffer_len: int, penalty_factor: float = 1.0):
        self.max_len, self.buffer_len, self.penalty_factor = max_len, buffer_len, penalty_factor

    def __call__(self, batch: Rollouts) -> Tensor:
        return overlong_penalty(batch.lengths, self.max_len, self.buffer_len, self.penalty_factor).float()


class KLRewardPenalty:
    """-coef * sum_t kl(behaviour, ref) per row: KL to the reference in the reward (verl use_kl_in_reward).

    `fill_ref(batch)` writes `batch.ref_logprobs` (the trainer's reference model)."""

    name = "kl_penalty"
    key = "kl"
    reward = None

    def __init__(self, estimator: Callable[[Tensor, Tensor], Tensor], coef: float, fill_ref: Callable[[Rollouts], None]):
        self.estimator, self.coef, self.fill_ref = estimator, coef, fill_ref

    def __call__(self, batch: Rollouts) -> Tensor:
        self.fill_ref(batch)
        kl_tok, _ = self.estimator(batch.behaviour_logprobs, batch.ref_logprobs, batch.completion_mask)
        return -kl_reward_penalty(kl_tok, batch.completion_mask, self.coef).float()


def shaping_terms(algo, max_new_tokens: int, fill_ref: Callable[[Rollouts], None]) -> list[ShapingTerm]:
    """The shaping terms an `AlgoConfig` asks for (overlong punishment, KL in the reward)."""
    terms: list[ShapingTerm] = []
    if algo.overlong is not None:
        o = algo.overlong
        terms.append(OverlongShaping(max_new_tokens, o.buffer_tokens(max_new_tokens), o.penalty_factor))
    kl = algo.active().get("kl")
    if kl is not None and kl.mode == "reward":
        terms.append(KLRewardPenalty(algo.bind("kl"), kl.coef, fill_ref))
    return terms


def _no_reference(batch: Rollouts) -> None:
    raise RuntimeError("shaping terms built for a config check cannot score")


def check_reward_columns(rewards: Sequence, algo, max_new_tokens: int) -> list[str]:
    """The names of the configured reward columns and shaping columns (after the task's `accuracy`),
    refusing two columns with one name and a reward that repeats a shaping term's penalty."""
    from covey.algos.presets import PRESETS
    from covey.rewards.registry import REWARDS

    terms = shaping_terms(algo, max_new_tokens, _no_reference)
    seen: dict[str, str] = {}
    for i, spec in enumerate(rewards):
        if spec.label in seen:
            raise ValueError(f"rewards[{i}]: a second reward column named {spec.label!r} ({seen[spec.label]} has it); "
                             "give one an alias")  # fmt: skip
        seen[spec.label] = f"rewards[{i}]"
    for term in terms:
        same = term.reward
        for i, spec in enumerate(rewards):
            if same is not None and REWARDS.get(spec.name).fn is REWARDS.get(same).fn:
                key = f"algo.{term.key}"
                where = f" (set by the {algo.preset} preset)" if term.key in PRESETS.get(algo.preset or "", {}) else ""
                raise ValueError(f"rewards[{i}]: reward {spec.name!r} is the {term.name} penalty that {key}{where} already "
                                 f"adds, so it would count twice: remove it from rewards and configure {key} instead "
                                 f"(or set {key}: null)")  # fmt: skip
        if term.name in seen:
            raise ValueError(f"{seen[term.name]}: the reward column name {term.name!r} is taken by the shaping term of "
                             f"the algorithm config; give the reward another alias")  # fmt: skip
        seen[term.name] = "the algorithm config"
    return list(seen)


class Scorer:
    """`scorer(batch) -> metrics`: fills `batch.rewards`, `reward_names`, `reward_weights`.

    runner:  a `RewardRunner` (the task verifier as column `accuracy` plus configured rewards).
    decode:  `decode(batch) -> [N] completion texts`.
    shaping: shaping terms, each adding one weight-1 column.

    Reward functions get TRL's arguments: prompts, completions, every item column, `group` (ids of
    samples drawn for the same prompt), `completion_ids` (token ids) and `completion_length`. A row's
    completion is `batch.reward_text` when the strategy set it (an episode's final model turn), else
    its decoded ids.
    """

    def __init__(self, runner, decode: Callable[[Rollouts], list[str]], shaping: Sequence[ShapingTerm] = ()):
        self.runner, self.decode, self.shaping = runner, decode, list(shaping)

    def __call__(self, batch: Rollouts) -> dict[str, Any]:
        if batch.items is None:
            raise ValueError("cannot score a batch without `items`: the rollout strategy must set the item of every row")
        rows = batch.items
        lengths = batch.lengths.tolist()
        columns = item_columns(rows)
        columns["completion_length"] = lengths
        columns["completion_ids"] = [ids[:n].tolist() for ids, n in zip(batch.completion_ids, lengths)]
        texts = batch.reward_text if batch.reward_text is not None else self.decode(batch)  # an episode: its final turn
        result = self.runner([r["prompt"] for r in rows], texts, group=batch.group.tolist(), **columns)
        cols, names, weights = [result.rewards], list(result.names), list(result.weights)
        for term in self.shaping:
            cols.append(term(batch).reshape(-1, 1))
            names.append(term.name)
            weights.append(1.0)
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"reward columns {twice} appear twice: each column needs its own name (see check_reward_columns)")
        batch.rewards = torch.cat(cols, dim=1).float()
        batch.reward_names, batch.reward_weights = tuple(names), torch.tensor(weights, dtype=torch.float32)
        batch.validate()
        out = dict(result.metrics)
        scalar = batch.scalar_rewards()
        out["reward/mean"] = float(scalar.mean())  # what advantages see (with shaping)
        out["reward/std"] = float(scalar.std()) if len(scalar) > 1 else 0.0  # unbiased, over the batch (TRL's reward_std)
        for i in range(len(result.names), len(names)):
            out[f"reward/{names[i]}/mean"] = float(batch.rewards[:, i].mean())
        return out
