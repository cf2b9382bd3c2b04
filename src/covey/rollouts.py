"""The `Rollouts` batch: one object that every stage of a training step reads and extends.

Shapes (the letters of docs/algorithms.md): N samples (rows), T completion tokens (right-padded), K reward columns.
Everything here is plain tensors; no model, no tokenizer. `validate()` checks shapes and dtypes and
fails with a message naming the field, what it got and what it needs.

Every field is tagged with its axis (`AXES`, in the field's metadata): `row` (one value per row: [N]
tensors and N-lists, the per-turn step lists included), `token` ([N, T]), `row|token` (either),
`reward` ([N, K]) or `batch` (one value for the whole batch). `select`, `concat` and `validate`
work from the tags, so a new field is one declaration. `Groups` is the one dense view of a group
id column (`Rollouts.groups()`): per-group sizes, sums, means, standard deviations, extremes and ranks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["AXES", "Groups", "Rollouts", "RolloutsError", "item_columns"]

AXES = ("row", "token", "row|token", "reward", "batch")
"""The axis tags of `Rollouts` fields (module docstring)."""


class RolloutsError(ValueError):
    """A `Rollouts` field has the wrong shape, dtype or content."""


def _f(axis: str, default=dataclasses.MISSING, *, dtype: torch.dtype | None = None, pad: int = 0):
    """A field on `axis` (required unless it has a `default`); `dtype`: what `validate` checks a tensor
    against (None: a field with its own check); `pad`: the value `concat` right-pads a token field with."""
    return dataclasses.field(default=default, metadata={"axis": axis, "dtype": dtype, "pad": pad})


class Groups(NamedTuple):
    """Dense view of a group id column: row i belongs to group ``index[i]`` in ``[0, num)``, whose id
    is ``ids[index[i]]`` (ids sorted). Arithmetic keeps the dtype and device of its input."""

    index: Tensor  # [N] long
    size: Tensor  # [B] float64, rows per group
    num: int  # B
    ids: Tensor | None = None  # [B], the group ids in ascending order

    @classmethod
    def of(cls, group: Tensor) -> "Groups":
        """The view of an [N] id column (any ids: not contiguous, sorted or small)."""
        ids, inv, counts = torch.unique(group, return_inverse=True, return_counts=True)
        return cls(inv, counts.to(torch.float64), int(counts.numel()), ids)

    def sum(self, x: Tensor) -> Tensor:
        """[N] -> [B] per-group sum."""
        return torch.zeros(self.num, dtype=x.dtype, device=x.device).index_add_(0, self.index, x)

    def mean(self, x: Tensor) -> Tensor:
        """[N] -> [B] per-group mean."""
        return self.sum(x) / self.size.to(x.dtype)

    def std(self, x: Tensor) -> Tensor:
        """[N] -> [B] unbiased (N-1) standard deviation; 0 for groups with a single row."""
        mean = self.mean(x)[self.index]
        ss = self.sum((x - mean) ** 2)
        n = self.size.to(x.dtype)
        return torch.where(n > 1, ss / (n - 1).clamp(min=1), torch.zeros_like(ss)).sqrt()

    def amax(self, x: Tensor) -> Tensor:
        """[N] -> [B] per-group maximum."""
        out = torch.full((self.num,), -torch.inf, dtype=x.dtype, device=x.device)
        return out.scatter_reduce(0, self.index, x, reduce="amax")

    def amin(self, x: Tensor) -> Tensor:
        """[N] -> [B] per-group minimum."""
        out = torch.full((self.num,), torch.inf, dtype=x.dtype, device=x.device)
        return out.scatter_reduce(0, self.index, x, reduce="amin")

    def rank(self, key: Tensor | None = None) -> Tensor:
        """[N] long: position of each row inside its group, ordered by ``key`` (stable; row order if None)."""
        n = self.index.numel()
        dev = self.index.device
        order = torch.arange(n, device=dev) if key is None else torch.argsort(key, stable=True)
        order = order[torch.argsort(self.index[order], stable=True)]  # rows sorted by (group, key)
        start = torch.cumsum(self.size.long(), 0) - self.size.long()  # [B] first slot of each group
        rank = torch.empty(n, dtype=torch.long, device=dev)
        rank[order] = torch.arange(n, device=dev) - start[self.index[order]]
        return rank

    def first_row(self) -> Tensor:
        """[B] long: the smallest row index of each group (its first appearance in the batch)."""
        n, dev = self.index.numel(), self.index.device
        out = torch.full((self.num,), n, dtype=torch.long, device=dev)
        return out.scatter_reduce(0, self.index, torch.arange(n, device=dev), reduce="amin")


@dataclass
class Rollouts:
    """One batch of sampled completions.

    Required (written by the engine):
        prompt_ids:          list of N 1-D long tensors, the prompt tokens of each sample.
        completion_ids:      [N, T] long, sampled tokens, right-padded.
        completion_mask:     [N, T] float32, 1.0 on real completion tokens, 0.0 on padding and on
                             tokens a method masks out.
        behaviour_logprobs:  [N, T] float32, log pi of each sampled token under the policy that
                             produced it (after temperature), 0 on padding.
        group:               [N] long, rows with equal values were drawn for the same prompt.
        prompt_id:           [N] long, the dataset item each row came from.
    Optional:
        finish_reason:       list of N strings, "stop" or "length".
        rewards:             [N, K] float32, one column per reward function, named by reward_names.
        reward_weights:      [K] float32, weights of the scalar reward (default: all ones).
        advantages:          [N] or [N, T] float32, written by the advantage estimator.
        sample_mask:         [N] float32, 0 for rows an estimator excluded (e.g. MC-GRPO's pivot), or
                             [N, T] for single tokens (BranchGRPO trains a shared tree edge once).
        entropies:           [N, T] float32, per-token entropy of the sampling distribution.
        ref_logprobs:        [N, T] float32, log pi_ref of each token (KL terms, ACE).
        old_logprobs:        [N, T] float32, log pi_old recomputed by the learner (proximal policy).
        policy_version:      [N, T] long, which weights produced each token (partial/async rollouts).
        tree_path:           list of N tuples of node ids from root to leaf (tree rollouts).
        episode, turn, step_rewards, step_anchors: multi-turn episodes (`covey.strategies.episodes`):
                             episode [N] long (id of the row's episode; rows of one episode share
                             it in layout per_step, one row per turn); turn [N, T] long (the agent
                             turn of each token, -1 on environment tokens and padding); step_rewards
                             / step_anchors: N lists, one entry per turn of the row's episode (env
                             reward; hashable state or None); step_agents: N lists, the agent
                             (role id, int >= 0) that acted each turn of the row's episode (multi-
                             agent envs, `info["agent"]`; None = agent 0 on every turn);
                             step_valid: N lists, whether each turn of the row's episode was a valid
                             action (the env's ``info["valid"]``; UI-S1 stops its discounted return at
                             an invalid, i.e. patched, turn).
        reward_text:         list of N strings, what reward functions read as the row's completion
                             instead of its decoded ids (an episode's final model turn, `episodes`
                             with ``rewards: functions``).
        items:               list of N dataset items (dicts, shared not copied): the item each row
                             answers; rewards read their columns from it (set by the rollout strategy).
        baseline:            [N] float32, a per-row value baseline from outside the batch (the `spo`
                             sampler's tracked success probability; read by the `spo` estimator).
        token_advantages:    [N, T] float32, advantages computed at rollout time (the `tppo`
                             strategy's Extended GAE; read by the `tppo` estimator), 0 on padding.
        segment_tokens:      int, tokens per tree segment (scalar metadata of the whole batch, set by
                             the `branch` strategy; read by `branch_grpo`).
        probe_logprobs:      [N, T] float32, no-grad log pi_old of each token at the probe temperature
                             `controller["probe_temperature"]` (filled by the trainer for DCPO).
        sum_p2:              [N, T] float32, sum_v pi_old(v|s_t)^2 at each position (at the sampling
                             temperature; filled by the trainer for OBLR-PO's baseline).
        fixed_advantage:     [N] float32, an advantage a rollout strategy fixed for a row (AEPO's
                             REINFORCE rows: 1), NaN where the estimator decides.
        controller:          dict of floats, what a strategy's controller chose for this step (the
                             entropy controller of dcpo / aepo_entropy: h_hat, h0, probe_temperature).
        offpolicy_mask:      [N, T] float32, 1.0 on tokens another model wrote (the `step_correction`
                             strategy's corrector), 0 elsewhere; only on completion tokens. The learner
                             gives them LUFFY's shaped, unclipped loss (`offpolicy_shaped_loss`).
        soft_ids, soft_scores: N tensors [L_i, k] (long, float32): the soft tokens of soft-thinking rows
                             (`soft_thinking`, SofT-GRPO): per completion token the k candidate ids (the first is
                             the row's token; [token, 0, ..., 0] after the thinking span) and their Gumbel scores.
        candidate:           [N] long, the population member (a candidate set of weights an evolution
                             strategy proposed) whose weights generated the row (`es_population`).
        recompute_old_logprobs: bool, the learner recomputes log pi_old with the current weights
                             before the update even when the algorithm does not ask for it (APRIL's
                             default for carried partial rollouts).
        vision:              list of N `covey.models.vision.VisionInputs` or None: the image tensors of each
                             row's prompt (a vision-language policy, docs/vlm.md; the rows of a group share
                             one object); written by the engine, read by the learner's forward.
    Every field carries its axis tag (module docstring): `select` slices the row and token fields and
    `concat` joins them; the `batch` fields (`reward_names`, `reward_weights`, `segment_tokens`,
    `controller`, `recompute_old_logprobs`) describe the whole batch and must agree across `concat`.
    """

    prompt_ids: list[Tensor] = _f("row")
    completion_ids: Tensor = _f("token")
    completion_mask: Tensor = _f("token")
    behaviour_logprobs: Tensor = _f("token")
    group: Tensor = _f("row")
    prompt_id: Tensor = _f("row")
    finish_reason: list[str] | None = _f("row", None)
    rewards: Tensor | None = _f("reward", None)
    reward_names: tuple[str, ...] = _f("batch", ())
    reward_weights: Tensor | None = _f("batch", None)
    advantages: Tensor | None = _f("row|token", None)
    sample_mask: Tensor | None = _f("row|token", None, dtype=torch.float32)
    entropies: Tensor | None = _f("token", None, dtype=torch.float32)
    ref_logprobs: Tensor | None = _f("token", None, dtype=torch.float32)
    old_logprobs: Tensor | None = _f("token", None, dtype=torch.float32)
    policy_version: Tensor | None = _f("token", None, dtype=torch.long)
    tree_path: list[tuple[int, ...]] | None = _f("row", None)
    episode: Tensor | None = _f("row", None)
    turn: Tensor | None = _f("token", None, pad=-1)  # -1 marks environment tokens and padding
    step_rewards: list[list[float]] | None = _f("row", None)
    step_anchors: list[list] | None = _f("row", None)
    step_agents: list[list[int]] | None = _f("row", None)
    step_valid: list[list[bool]] | None = _f("row", None)
    reward_text: list[str] | None = _f("row", None)
    items: list[dict] | None = _f("row", None)
    baseline: Tensor | None = _f("row", None, dtype=torch.float32)
    token_advantages: Tensor | None = _f("token", None, dtype=torch.float32)
    segment_tokens: int | None = _f("batch", None)
    probe_logprobs: Tensor | None = _f("token", None, dtype=torch.float32)
    sum_p2: Tensor | None = _f("token", None, dtype=torch.float32)
    fixed_advantage: Tensor | None = _f("row", None, dtype=torch.float32)
    controller: dict[str, float] | None = _f("batch", None)
    offpolicy_mask: Tensor | None = _f("token", None, dtype=torch.float32)
    candidate: Tensor | None = _f("row", None, dtype=torch.long)
    soft_ids: list[Tensor] | None = _f("row", None)
    soft_scores: list[Tensor] | None = _f("row", None)
    recompute_old_logprobs: bool = _f("batch", False)
    vision: list | None = _f("row", None)

    @classmethod
    def from_generation(cls, gen, group: Tensor, items: list[dict]) -> "Rollouts":
        """A batch from an engine's `Generation`: `group` [N] long, `items` the item of each row
        (its int ``id`` becomes `prompt_id`)."""
        return cls(
            prompt_ids=gen.prompt_ids,
            completion_ids=gen.completion_ids,
            completion_mask=gen.completion_mask,
            behaviour_logprobs=gen.logprobs,
            group=group,
            prompt_id=torch.tensor([int(it["id"]) for it in items], dtype=torch.long),
            finish_reason=list(gen.finish_reason),
            entropies=gen.entropies,
            policy_version=gen.policy_version,
            items=list(items),
            vision=gen.vision,
        ).validate()

    @classmethod
    def empty(cls) -> "Rollouts":
        """A batch of no rows (a skipped step)."""
        z = torch.zeros(0, 0)
        return cls(prompt_ids=[], completion_ids=z.long(), completion_mask=z, behaviour_logprobs=z,
                   group=torch.zeros(0, dtype=torch.long), prompt_id=torch.zeros(0, dtype=torch.long), items=[])  # fmt: skip

    # ------------------------------------------------------------------ derived views
    def __len__(self) -> int:
        return int(self.completion_ids.shape[0])

    @property
    def lengths(self) -> Tensor:
        """[N] long: number of real completion tokens per row."""
        return self.completion_mask.sum(-1).round().long()

    @property
    def num_groups(self) -> int:
        return int(torch.unique(self.group).numel())

    def groups(self) -> Groups:
        """The dense view of `group` (per-group statistics, `Groups`)."""
        return Groups.of(self.group)

    def scalar_rewards(self) -> Tensor:
        """[N] float32: the weighted sum of reward columns (the reward single-reward methods use)."""
        if self.rewards is None:
            raise RolloutsError("rollouts have no rewards yet: score them before computing advantages")
        w = self.reward_weights if self.reward_weights is not None else torch.ones(self.rewards.shape[1])
        return self.rewards @ w.to(self.rewards.dtype)

    def reward(self, name: str) -> Tensor:
        """[N] float32: one named reward column."""
        if name not in self.reward_names:
            raise RolloutsError(f"no reward column {name!r}; columns are {list(self.reward_names)}")
        return self.rewards[:, self.reward_names.index(name)]

    def loss_mask(self) -> Tensor:
        """[N, T] float32: completion_mask with rows (or tokens) excluded by `sample_mask` zeroed."""
        if self.sample_mask is None:
            return self.completion_mask
        m = self.sample_mask if self.sample_mask.dim() == 2 else self.sample_mask[:, None]
        return self.completion_mask * m.to(self.completion_mask.dtype)

    # ------------------------------------------------------------------ validation
    def validate(self) -> "Rollouts":
        """Check every field's shape and dtype; raise `RolloutsError` naming the first bad field."""
        ids = self.completion_ids
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            raise RolloutsError(f"completion_ids must be a 2-D [N, T] tensor, got {_desc(ids)}")
        n, t = ids.shape
        _check(ids, "completion_ids", (n, t), (torch.long,))
        _check(self.completion_mask, "completion_mask", (n, t), (torch.float32,))
        _check(self.behaviour_logprobs, "behaviour_logprobs", (n, t), (torch.float32,))
        _check(self.group, "group", (n,), (torch.long,))
        _check(self.prompt_id, "prompt_id", (n,), (torch.long,))
        if len(self.prompt_ids) != n:
            raise RolloutsError(f"prompt_ids must hold N={n} tensors, got {len(self.prompt_ids)}")
        for i, p in enumerate(self.prompt_ids):
            if not isinstance(p, Tensor) or p.dim() != 1 or p.dtype != torch.long:
                raise RolloutsError(f"prompt_ids[{i}] must be a 1-D long tensor, got {_desc(p)}")
        m = self.completion_mask
        if not torch.all((m == 0) | (m == 1)):
            raise RolloutsError("completion_mask must hold only 0.0 and 1.0")
        if self.finish_reason is not None:
            if len(self.finish_reason) != n:
                raise RolloutsError(f"finish_reason must hold N={n} strings, got {len(self.finish_reason)}")
            bad = sorted({r for r in self.finish_reason if r not in ("stop", "length")})
            if bad:
                raise RolloutsError(f"finish_reason values must be 'stop' or 'length', got {bad}")
        if self.rewards is not None:
            k = len(self.reward_names)
            _check(self.rewards, "rewards", (n, k), (torch.float32,))
            if not torch.isfinite(self.rewards).all():
                rows = torch.nonzero(~torch.isfinite(self.rewards))[:5].tolist()
                raise RolloutsError(
                    f"rewards contain NaN/inf at [row, column] {rows}: a reward function returned a "
                    "non-finite value; replace it with a fallback before computing advantages"
                )
            if self.reward_weights is not None:
                _check(self.reward_weights, "reward_weights", (k,), (torch.float32,))
        if self.advantages is not None:
            shape = tuple(self.advantages.shape)
            if shape not in ((n,), (n, t)):
                raise RolloutsError(f"advantages must have shape [N]=({n},) or [N, T]=({n}, {t}), got {shape}")
            _check(self.advantages, "advantages", shape, (torch.float32,))
        for f in dataclasses.fields(self):  # the optional tensors of one dtype: shape from the axis tag
            val, dtype = getattr(self, f.name), f.metadata["dtype"]
            if val is not None and dtype is not None:
                two_d = f.metadata["axis"] == "token" or (isinstance(val, Tensor) and val.dim() == 2)
                _check(val, f.name, (n, t) if two_d else (n,), (dtype,))
        om = self.offpolicy_mask
        if om is not None and (not torch.all((om == 0) | (om == 1)) or bool(((om > 0) & (self.completion_mask == 0)).any())):
            raise RolloutsError("offpolicy_mask must hold only 0.0 and 1.0, and 1.0 only on completion tokens")
        if self.segment_tokens is not None and (not isinstance(self.segment_tokens, int) or self.segment_tokens < 1):
            raise RolloutsError(f"segment_tokens must be a positive int, got {self.segment_tokens!r}")
        _check_episodes(self, n, t)
        _check_soft(self, n)
        if self.tree_path is not None and len(self.tree_path) != n:
            raise RolloutsError(f"tree_path must hold N={n} tuples, got {len(self.tree_path)}")
        if self.reward_text is not None and (len(self.reward_text) != n or not all(isinstance(x, str) for x in self.reward_text)):
            raise RolloutsError(f"reward_text must hold N={n} strings")
        if self.items is not None and len(self.items) != n:
            raise RolloutsError(f"items must hold N={n} dataset items, got {len(self.items)}")
        if self.vision is not None and len(self.vision) != n:
            raise RolloutsError(f"vision must hold N={n} entries (image inputs or None), got {len(self.vision)}")
        return self

    # ------------------------------------------------------------------ row selection and joining
    def select(self, index: Tensor | list[int]) -> "Rollouts":
        """A new `Rollouts` with the given rows (a [M] long index or a [N] bool mask)."""
        idx = torch.as_tensor(index)
        if idx.dtype == torch.bool:
            idx = torch.nonzero(idx).flatten()
        rows = idx.tolist()
        out = {}
        for f in dataclasses.fields(self):
            val = getattr(self, f.name)
            if val is None or f.metadata["axis"] == "batch":
                out[f.name] = val
            elif isinstance(val, list):
                out[f.name] = [val[i] for i in rows]
            else:
                out[f.name] = val[idx]
        return Rollouts(**out)

    @staticmethod
    def concat(parts: list["Rollouts"]) -> "Rollouts":
        """Stack batches row-wise, right-padding token tensors to the widest T.

        Group ids are kept as they are: callers that join independent batches must make them unique.
        """
        if not parts:
            raise RolloutsError("cannot concatenate an empty list of Rollouts")
        t = max(p.completion_ids.shape[1] for p in parts)
        out = {}
        for f in dataclasses.fields(Rollouts):
            vals = [getattr(p, f.name) for p in parts]
            present = [v is not None for v in vals]
            if f.metadata["axis"] == "batch":
                if any(not _same(v, vals[0]) for v in vals[1:]):
                    raise RolloutsError(f"cannot concatenate: {f.name} differs between batches ({vals[0]!r} vs {vals[1]!r}, ...)")
                out[f.name] = vals[0]
                continue
            if not any(present):
                out[f.name] = None
                continue
            if not all(present):
                raise RolloutsError(f"cannot concatenate: field {f.name!r} is set in some batches and not others")
            if isinstance(vals[0], list):
                out[f.name] = [x for v in vals for x in v]
            elif f.metadata["axis"] != "reward" and vals[0].dim() == 2:  # a token field: right-padded to T
                out[f.name] = torch.cat([torch.nn.functional.pad(v, (0, t - v.shape[1]), value=f.metadata["pad"]) for v in vals])
            else:
                out[f.name] = torch.cat(vals)
        return Rollouts(**out)


def item_columns(rows: list[dict]) -> dict[str, list]:
    """Reward-function keyword columns from the item of each row: every key but id and prompt."""
    keys = dict.fromkeys(k for r in rows for k in r if k not in ("id", "prompt"))
    return {k: [r.get(k) for r in rows] for k in keys}


def _same(a, b) -> bool:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    return a == b


def _check_episodes(b: Rollouts, n: int, t: int) -> None:
    """The multi-turn fields: shapes, an entry per turn in the step lists, no trained env token."""
    if b.episode is not None:
        _check(b.episode, "episode", (n,), (torch.long,))
    if b.turn is None:
        if b.step_agents is not None:
            raise RolloutsError("step_agents must be set together with turn")
        return
    _check(b.turn, "turn", (n, t), (torch.long,))
    if bool(((b.completion_mask > 0) & (b.turn < 0)).any()):
        raise RolloutsError("completion_mask is 1 on a token with turn -1 (environment tokens are never trained)")
    turns = (b.turn.amax(-1) + 1).tolist()
    for name in ("step_rewards", "step_anchors"):
        val = getattr(b, name)
        if val is None:
            raise RolloutsError(f"{name} must be set together with turn")
        if len(val) != n or any(len(v) < k for v, k in zip(val, turns)):
            raise RolloutsError(f"{name} must hold N={n} lists with one entry per turn of the row's episode")
    v = b.step_valid
    if v is not None and (len(v) != n or any(len(x) < k or any(not isinstance(y, bool) for y in x) for x, k in zip(v, turns))):
        raise RolloutsError(f"step_valid must hold N={n} lists with one bool per turn of the row's episode")
    a = b.step_agents
    if a is not None and (len(a) != n or any(len(v) < k or any(not isinstance(x, int) or x < 0 for x in v) for v, k in zip(a, turns))):
        raise RolloutsError(f"step_agents must hold N={n} lists with one agent id (int >= 0) per turn of the row's episode")


def _check_soft(b: Rollouts, n: int) -> None:
    """Soft tokens: both lists or neither, one [L_i, k] tensor per row (L_i its completion length)."""
    if (b.soft_ids is None) != (b.soft_scores is None):
        raise RolloutsError("soft_ids and soft_scores must be set together")
    if b.soft_ids is None:
        return
    lengths = b.lengths.tolist()
    if len(b.soft_ids) != n or len(b.soft_scores) != n:
        raise RolloutsError(f"soft_ids and soft_scores must hold N={n} tensors")
    for i, (a, c) in enumerate(zip(b.soft_ids, b.soft_scores)):
        if a.dim() != 2 or a.dtype != torch.long or tuple(c.shape) != tuple(a.shape) or c.dtype != torch.float32 or a.shape[0] != lengths[i]:
            raise RolloutsError(f"soft_ids[{i}] / soft_scores[{i}] must be [L, k] long / float32 with L = the row's "
                                f"{lengths[i]} completion tokens, got {_desc(a)} and {_desc(c)}")  # fmt: skip


def _desc(x) -> str:
    if isinstance(x, Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__


def _check(x, name: str, shape: tuple, dtypes: tuple) -> None:
    if not isinstance(x, Tensor):
        raise RolloutsError(f"{name} must be a tensor of shape {shape}, got {_desc(x)}")
    if tuple(x.shape) != tuple(shape):
        raise RolloutsError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")
    if x.dtype not in dtypes:
        allowed = ", ".join(str(d) for d in dtypes)
        raise RolloutsError(f"{name} must have dtype {allowed}, got {x.dtype}")
