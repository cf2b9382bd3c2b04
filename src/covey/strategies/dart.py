"""`dart`: DART's adaptive data curation around an episode strategy (arXiv 2509.23866, "Efficient Multi-turn RL
for GUI Agents via Decoupled Training and Adaptive Data Curation"). Status CODE: checked against
Computer-use-agents/dart-gui e0e606d (`verl/utils/dataset/trainable_filter.py` `filter_fn`, called by
`osworld_dataset_iter.py` with per_task_limit = rollout_n and acc_max 1.0; the truncated importance weight of
`verl/trainer/ppo/core_algos.py` `compute_policy_loss(_gspo)` with ``use_vllm_logp``; the settings of
`examples/osworld/async/run_trainer_debug_w_rollout_stepwise_train_pt.sh`).

DART's data manager keeps every finished trajectory in a database and hands the trainer, each step, the
trajectories of tasks worth training on. Here each step's episodes pass the same filter, per task (a
group: the G episodes of one item), with `success` = reward > 0:

    mean reward in [0, acc_max)     kept (acc_max 1.0: a task every episode solved is dropped)
    mean reward == 0, a success of this task in the replay store:
                                    the task's newest successful episode (from any earlier step) replaces
                                    the group's first episode (the code replaces the oldest row)
    mean reward == 0, none stored:  dropped
    more than per_task_limit episodes: trimmed at random to the limit, keeping one success and one
                                    failure when the group has both
    every successful episode becomes its task's newest stored success (the replay store, checkpointed)

A replayed episode keeps its own behaviour log-probs and policy versions: the truncated importance weight
min(pi_old / pi_rollout, 1) per token (`algo.correction: {name: tis, cap: 1.0}` beside the `dart` preset)
discounts what an older policy sampled, as DART's rollout log-probs do for its asynchronous workers. A
step whose every group is dropped trains on nothing (DART's trainer waits for more data). Differences:
covey filters within the step's own episodes (plus the replay store), not across the database's newest
`top_mvs_n` model versions: the runtime's `max_staleness` bounds their age instead (docs/agents.md, "DART");
DART's reward -1 (a broken run) is covey's failed episode, already dropped by `episodes`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.rollouts import Rollouts
from covey.strategies.base import STRATEGIES, RolloutContext, StrategyCaps, flag_of_inner, inner_with_env, register_strategy

__all__ = ["DART", "curate"]


_inner_of = inner_with_env("episodes")


def _episodes(batch: Rollouts) -> list[int]:
    return batch.episode.tolist() if batch.episode is not None else list(range(len(batch)))


def curate(rewards: list[float], groups: list[int], tasks: list[int], stored: set[int], acc_max: float = 1.0,
           per_task_limit: int | None = None, generator: torch.Generator | None = None) -> tuple[list[int], dict[int, int], dict[str, float]]:  # fmt: skip
    """DART's filter over episodes (one entry each: reward, group, task). Returns (the kept episode
    indices, {group: episode index replaced by the task's stored success}, counts); `stored` holds the
    tasks with a stored success.

    >>> curate([1, 0, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 2, 2, 3, 3], [5, 5, 6, 6, 7, 7, 8, 8], stored={7})[:2]
    ([0, 1, 4, 5], {2: 4})
    """
    by: dict[int, list[int]] = {}
    for j, g in enumerate(groups):
        by.setdefault(g, []).append(j)
    kept, replace = [], {}
    counts = {"groups": float(len(by)), "kept_groups": 0.0, "dropped_solved": 0.0, "dropped_unsolved": 0.0,
              "replayed": 0.0, "trimmed": 0.0}  # fmt: skip
    for g, members in by.items():
        mean = sum(rewards[j] for j in members) / len(members)
        if not 0 <= mean < acc_max:
            counts["dropped_solved" if mean >= acc_max else "dropped_unsolved"] += 1
            continue
        if mean == 0:
            if tasks[members[0]] not in stored:
                counts["dropped_unsolved"] += 1
                continue
            replace[g] = members[0]  # the code drops the group's oldest row for the newest stored success
            counts["replayed"] += 1
        if per_task_limit is not None and len(members) > per_task_limit:
            members = _trim(members, rewards, per_task_limit, generator, exclude=replace.get(g))
            counts["trimmed"] += 1
        kept += members
        counts["kept_groups"] += 1
    return sorted(kept), replace, counts


def _trim(members: list[int], rewards: list[float], limit: int, generator, exclude: int | None) -> list[int]:
    """`limit` of `members` at random, one success and one failure first when both exist (the code)."""
    pos = [j for j in members if rewards[j] > 0]
    neg = [j for j in members if rewards[j] == 0]

    def pick(pool, k):
        order = torch.randperm(len(pool), generator=generator).tolist()
        return [pool[i] for i in order[:k]]

    chosen = (pick(pos, 1) + pick(neg, 1)) if pos and neg else pick(pos or neg or members, 1)
    rest = [j for j in members if j not in chosen]
    chosen += pick(rest, max(limit - len(chosen), 0))
    if exclude is not None and exclude in members and exclude not in chosen:  # the row the replay replaces stays in
        chosen[-1] = exclude
    return sorted(chosen)


@register_strategy("dart")
class DART:
    """DART's curation of the inner strategy's episodes (module docstring).

    inner, inner_params: the episode strategy (default `episodes`; it takes the run's env).
    acc_max:        groups whose mean reward reaches it are dropped (1.0: only all-solved tasks).
    replay:         an all-failed group gets its task's newest stored success (false: it is dropped).
    per_task_limit: at most this many episodes per task (null: the group size, as the code's rollout_n).
    """

    caps = StrategyCaps(inner=_inner_of, takes_env=flag_of_inner(_inner_of, "takes_env"),
                        env_reward=flag_of_inner(_inner_of, "env_reward"))  # fmt: skip

    def __init__(self, *, inner: str = "episodes", inner_params: dict[str, Any] | None = None, env: dict | None = None,
                 acc_max: float = 1.0, replay: bool = True, per_task_limit: int | None = None):  # fmt: skip
        if inner == "dart":
            raise ValueError("dart cannot wrap itself; give inner: episodes")
        if not 0 < acc_max <= 1:
            raise ValueError(f"dart: acc_max must be in (0, 1], got {acc_max}")
        if per_task_limit is not None and per_task_limit < 2:
            raise ValueError(f"dart: per_task_limit must be >= 2 (a group of one has no signal), got {per_task_limit}")
        name, params = _inner_of({"inner": inner, "inner_params": inner_params, **({"env": env} if env else {})})
        self.inner = STRATEGIES.build(name, params)
        self.acc_max, self.replay, self.per_task_limit = float(acc_max), bool(replay), per_task_limit
        self.store: dict[int, Rollouts] = {}  # task (prompt_id) -> its newest successful episode's rows

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        batch, metrics = self.inner.rollout(items, ctx)
        metrics = dict(metrics)
        if not len(batch):
            return batch, metrics
        if batch.rewards is None:
            metrics.update(ctx.score(batch))
        ep_ids = _episodes(batch)
        order = list(dict.fromkeys(ep_ids))  # episodes in order of first row
        first = {e: ep_ids.index(e) for e in order}
        scores = batch.scalar_rewards().tolist()
        rewards = [float(scores[first[e]]) for e in order]
        groups = [int(batch.group[first[e]]) for e in order]
        tasks = [int(batch.prompt_id[first[e]]) for e in order]
        gen = torch.Generator().manual_seed(ctx.sampling(0).seed or 0)
        stored = set(self.store) if self.replay else set()
        kept, replace, counts = curate(rewards, groups, tasks, stored, self.acc_max, self.per_task_limit, gen)
        replayed = {g: self.store[tasks[j]] for g, j in replace.items()}  # what the filter saw, before this step's
        for j, e in enumerate(order):  # every success becomes its task's newest stored one
            if rewards[j] > 0:
                self.store[tasks[j]] = _rows_of(batch, ep_ids, e)
        keep = {order[j] for j in kept} - {order[j] for j in replace.values()}
        rows = [i for i, e in enumerate(ep_ids) if e in keep]
        parts = [batch.select(rows)] if rows else []
        for k, (g, stored_rows) in enumerate(replayed.items()):
            parts.append(_as_member(stored_rows, group=g, episode=max(ep_ids) + 1 + k))
        out = Rollouts.concat(parts) if parts else batch.select(torch.zeros(0, dtype=torch.long))  # nothing to train on
        metrics.update({f"dart/{k}": v for k, v in counts.items()})
        metrics["dart/stored_tasks"] = float(len(self.store))
        return out, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"store": {t: _to_state(r) for t, r in self.store.items()}, "inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.store = {int(t): Rollouts(**r) for t, r in (state.get("store") or {}).items()}
        self.inner.load_state_dict(state.get("inner", {}))


def _rows_of(batch: Rollouts, ep_ids: list[int], episode: int) -> Rollouts:
    """The rows of one episode, as a batch of their own (detached copies)."""
    rows = batch.select([i for i, e in enumerate(ep_ids) if e == episode])
    return Rollouts(**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in _to_state(rows).items()})


def _as_member(rows: Rollouts, group: int, episode: int) -> Rollouts:
    """A stored episode's rows joining `group` as episode `episode` of this step's batch."""
    n = len(rows)
    return dataclasses.replace(rows, group=torch.full((n,), group, dtype=torch.long),
                               episode=None if rows.episode is None else torch.full((n,), episode, dtype=torch.long))  # fmt: skip


def _to_state(rows: Rollouts) -> dict[str, Any]:
    return {f.name: getattr(rows, f.name) for f in dataclasses.fields(rows)}
