"""`sage_provisional`: SAGE's sequential rollout over chains of similar tasks with a growing skill library, and its
skill-integrated reward. Paper: "Reinforcement Learning for Self-Improving Agent with Skill Library" (SAGE,
arXiv 2512.17102). Status RECONSTRUCTED (hence the suffix): the authors' code (amazon-science/SAGE) could not
be read here (no snapshot); the structure follows the abstract and secondary summaries (chains of two similar
tasks in the main experiments; skills made in a task are available to the next; an extra reward for making a
skill that a later task uses successfully and for a successful use), the constants are covey's choices.

Per drawn item (the first task of a chain; the rest in its `chain_column`, e.g. the `skill_chains` task):

    position 0:  G episodes of the first task (the inner strategy, `episodes`), each with an empty library
    position p:  each chain's next task, rolled out once, with the library its previous episode ended with
                 (``item["skill_library"]`` <- that episode's `skills_after` column); the G episodes of one
                 task at one position form a group (group id p * K + k for the k-th item)
    reward of the episode at position p of a chain (columns env_return + skill_bonus):
        env_return                     the environment's outcome o_p
        + bonus, when a later episode of the chain succeeds using a skill made at p   (skill generation)
        + bonus, when o_p > 0 and the episode used a skill that came in with its library (skill use)

A chain whose episode failed (env error) stops there. The environment must report `skills_after`,
`skills_made` and `skills_used` in ``info["columns"]`` (`covey.envs.skills`). Follow-up tasks keep their own
ids, so `prompt_id` names the task each row answers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.rollouts import Rollouts
from covey.samplers.base import Draw
from covey.strategies.base import STRATEGIES, RolloutContext, StrategyCaps, flag_of_inner, inner_with_env, register_strategy

__all__ = ["SAGE", "skill_bonus"]


_inner_of = inner_with_env("episodes")


def skill_bonus(chain: list[dict], bonus: float = 1.0) -> list[float]:
    """The skill part of the reward of each episode of one chain (module docstring); each entry has
    `success` (bool), `made` and `used` (skill names).

    >>> skill_bonus([{"success": True, "made": ["p"], "used": []}, {"success": True, "made": [], "used": ["p"]}])
    [1.0, 1.0]
    >>> skill_bonus([{"success": True, "made": ["p"], "used": []}, {"success": False, "made": [], "used": ["p"]}])
    [0.0, 0.0]
    """
    out = []
    for p, ep in enumerate(chain):
        made = set(ep["made"])
        reused = any(later["success"] and made & set(later["used"]) for later in chain[p + 1 :])
        out.append(bonus * reused + bonus * (ep["success"] and bool(ep["used"])))
    return out


@register_strategy("sage_provisional")
class SAGE:
    """SAGE's sequential rollout and skill-integrated reward (module docstring).

    inner, inner_params: the episode strategy (default `episodes`; it takes the run's env).
    chain_column:  the item column holding the chain's next tasks.
    bonus:         the skill reward for a reused skill and for a successful use.
    """

    caps = StrategyCaps(inner=_inner_of, takes_env=flag_of_inner(_inner_of, "takes_env"),
                        env_reward=flag_of_inner(_inner_of, "env_reward"))  # fmt: skip

    def __init__(self, *, inner: str = "episodes", inner_params: dict[str, Any] | None = None, env: dict | None = None,
                 chain_column: str = "chain", bonus: float = 1.0):  # fmt: skip
        if inner == "sage_provisional":
            raise ValueError("sage_provisional cannot wrap itself; give inner: episodes")
        if bonus < 0:
            raise ValueError(f"sage_provisional: bonus must be >= 0, got {bonus}")
        name, params = _inner_of({"inner": inner, "inner_params": inner_params, **({"env": env} if env else {})})
        self.inner = STRATEGIES.build(name, params)
        self.chain_column, self.bonus = chain_column, float(bonus)

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        k_items = len(ctx.draws)
        batch, metrics = self.inner.rollout(items, ctx)
        metrics = dict(metrics)
        # a chain: (item index, [(position, batch index, episode id)])
        chains = [(int(batch.group[first]), [(0, 0, e)]) for e, first in _firsts(batch).items()]
        batches = [batch]
        for p in range(1, 1 + max((len(it.get(self.chain_column) or []) for it in items), default=0) if len(batch) else 1):
            alive = [c for c in chains if len(c[1]) == p and len(items[c[0]].get(self.chain_column) or []) >= p]
            if not alive:
                break
            draws = []
            for k, links in alive:
                prev_batch, prev_ep = batches[links[-1][1]], links[-1][2]
                view = prev_batch.items[_firsts(prev_batch)[prev_ep]]
                task = dict(items[k][self.chain_column][p - 1])
                draws.append(Draw({**task, "skill_library": view.get("skills_after") or {}}, 1))
            sub = dataclasses.replace(ctx, draws=draws, sampling=lambda r, p=p: ctx.sampling(1000 * p + r))
            nxt, _ = self.inner.rollout([d.item for d in draws], sub)
            if not len(nxt):
                break
            nxt.episode = nxt.episode + max(int(b.episode.max()) + 1 for b in batches if len(b))  # unique ids
            for e, first in _firsts(nxt).items():  # one episode per draw: its group is the draw's index
                alive[int(nxt.group[first])][1].append((p, len(batches), e))
            nxt.group = torch.tensor([p * k_items + alive[int(g)][0] for g in nxt.group.tolist()], dtype=torch.long)
            batches.append(nxt)
        return self._scored(batches, chains, metrics)

    def _scored(self, batches: list[Rollouts], chains, metrics: dict[str, float]) -> tuple[Rollouts, dict[str, float]]:
        """Add the skill_bonus column to every batch, join them, and the sage/* metrics."""
        bonus = [torch.zeros(len(b)) for b in batches]
        made_frac, used, first_used = [], [], []
        for _, links in chains:
            eps = []
            for p, bi, e in links:
                b = batches[bi]
                view, ret = b.items[_firsts(b)[e]], float(b.rewards[_firsts(b)[e], 0])
                eps.append({"success": ret > 0, "made": view.get("skills_made") or [], "used": view.get("skills_used") or []})
            for (p, bi, e), v in zip(links, skill_bonus(eps, self.bonus)):
                rows = (batches[bi].episode == e).nonzero().flatten()
                bonus[bi][rows] = v
            made_frac.append(float(bool(eps[0]["made"])))
            used += [float(bool(x["used"])) for x in eps[1:]]
            first_used += [float(x["success"]) for x in eps]
        for b, extra in zip(batches, bonus):
            b.rewards = torch.cat([b.rewards, extra[:, None]], dim=1)
            b.reward_names = (*b.reward_names, "skill_bonus")
        out = Rollouts.concat(batches) if len(batches) > 1 else batches[0]
        metrics.update({
            "sage/chains": float(len(chains)),
            "sage/made_skill_frac": sum(made_frac) / max(len(made_frac), 1),
            "sage/used_skill_frac": sum(used) / max(len(used), 1),
            "sage/success_rate": sum(first_used) / max(len(first_used), 1),
            "sage/bonus_mean": float(torch.cat(bonus).mean()) if len(out) else 0.0,
            "reward/mean": float(out.scalar_rewards().mean()) if len(out) else 0.0,
        })  # fmt: skip
        return out, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state.get("inner", {}))


def _firsts(batch: Rollouts) -> dict[int, int]:
    """{episode id: its first row}, in order."""
    out: dict[int, int] = {}
    for i, e in enumerate(batch.episode.tolist() if batch.episode is not None else range(len(batch))):
        out.setdefault(int(e), i)
    return out
