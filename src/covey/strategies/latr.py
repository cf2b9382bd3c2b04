"""`latr`: Lookahead Tree-Based Rollouts.

Paper: "Lookahead Tree-Based Rollouts for Enhanced Trajectory-Level Exploration in Reinforcement
Learning with Verifiable Rewards" (arXiv 2510.24302); code starreeze/latr (`model/generation.py`,
`model/sample_filter.py`, `model/metrics.py`). Spec: shared/specs/rollouts-data-agents.md §10.

Per prompt, n = the group size branches are grown token by token (mix_ratio 1: all n by LATR):

    p = softmax(logits) of each live branch, WITHOUT temperature; (c1, p1), (c2, p2) = its top 2
    branch when p2 > tau_abs and p1 - p2 < tau_rel and the root has < n live branches
        (candidates in row order): a child = parent prefix + c2; the parent takes c1
    otherwise the branch takes c1 (greedy, sample_nk "none")
    lookahead pruning: a child born r steps ago (r in filter_steps) whose last r tokens are too close
        to its parent's last r tokens (edit distance / r < tau_ed) is removed (frees capacity);
        skipped when either holds a stop token
    LATR ends when every root is full (>= n branches, finished ones included) and no branch is
        younger than max(filter_steps), or at force_return_step; every unfinished branch then
        continues with ordinary sampling (the engine's temperature / truncation) to max_new_tokens
    a root with fewer than n branches is filled by duplicating its first branch
    mix_ratio < 1: only round(mix_ratio * n) (at least 1) of a root's n rows are LATR branches (the
        capacity above); the other rows are ordinary samples of the prompt, started when LATR ends
        and decoded with the branches (their own first-level node in `tree_path`)

Defaults are the paper's countdown settings (tau_abs 0.25, tau_rel 0.15, tau_ed 0.4, filter steps
20/30/50) scaled: force_return_step defaults to half of max_new_tokens. The suffix-match and ROUGE-L
pruning tests of the code are not implemented (edit distance only). `mix_ratio` is the code's option
of that name read as "the LATR share of each group, the rest sampled" (the exact split is UNVERIFIED).
When a whole answer fits in the LATR phase (short answers), a pure-LATR group holds only top-1/top-2
tokens: no token outside them is ever sampled, so nothing in the update pushes the tail down and the
T=1 policy can drift into it (docs/rollouts.md "Learning runs"); sampled rows (mix_ratio < 1) cover it. Behaviour log-probs of the
greedy/branch tokens are those of the tempered distribution (what the learner recomputes); the
branch choice itself is not a sample of it, so the first PPO ratio is exactly 1 on-policy only
in the recomputed sense. `tree_path` records each branch's node ids (a new node at every split).
"""

from __future__ import annotations

from typing import Any

import torch

from covey.engine.tree import Row, TreeDecoder
from covey.strategies._rows import prompt_ids, rows_to_batch
from covey.strategies.base import RolloutContext, register_strategy
from covey.rollouts import Rollouts

__all__ = ["LATR", "branch_candidates", "edit_distance"]


def edit_distance(a: list[int], b: list[int]) -> int:
    """Levenshtein distance between two token lists (plain DP; r <= 50 in practice)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def branch_candidates(probs: torch.Tensor, tau_abs: float, tau_rel: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """probs [R, V] (raw softmax) -> (c1 [R], c2 [R], branch [R] bool: p2 > tau_abs and p1 - p2 < tau_rel)."""
    top = probs.topk(2, dim=-1)
    p1, p2 = top.values[:, 0], top.values[:, 1]
    return top.indices[:, 0], top.indices[:, 1], (p2 > tau_abs) & ((p1 - p2) < tau_rel)


@register_strategy("latr")
class LATR:
    """LATR rollouts (see the module docstring)."""

    def __init__(self, *, tau_abs: float = 0.25, tau_rel: float = 0.15, tau_ed: float = 0.4,
                 filter_steps: tuple[int, ...] = (20, 30, 50), force_return_step: int | None = None,
                 mix_ratio: float = 1.0):  # fmt: skip
        if not (0 < tau_abs < 1 and 0 < tau_rel <= 1 and 0 <= tau_ed <= 1):
            raise ValueError(f"need 0 < tau_abs < 1, 0 < tau_rel <= 1, 0 <= tau_ed <= 1; got {tau_abs}, {tau_rel}, {tau_ed}")
        if not 0 < mix_ratio <= 1:
            raise ValueError(f"mix_ratio must be in (0, 1] (the LATR share of each group), got {mix_ratio}")
        if not filter_steps or any(r < 1 for r in filter_steps):
            raise ValueError(f"filter_steps must be positive step counts, got {filter_steps}")
        self.tau_abs, self.tau_rel, self.tau_ed = tau_abs, tau_rel, tau_ed
        self.filter_steps, self.force = tuple(sorted(filter_steps)), force_return_step
        self.mix = float(mix_ratio)

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sp = ctx.sampling(0)
        sizes = [d.n for d in ctx.draws]
        n = [max(1, round(self.mix * g)) for g in sizes]  # LATR branches per root; the rest are sampled
        force = self.force if self.force is not None else max(1, sp.max_new_tokens // 2)
        dec = TreeDecoder(ctx.engine, sp)
        prompts = prompt_ids(ctx.tokenizer, items)
        # payload: (root, path, uid, parent uid, birth step)
        dec.add([Row(p, payload=(i, (0,), i, -1, 0)) for i, p in enumerate(prompts)])
        uid, next_node = len(items), [1] * len(items)
        done: list[Row] = []
        by_uid: dict[int, Row] = {}
        births = pruned = 0
        for t in range(min(force, sp.max_new_tokens)):
            if not len(dec):
                break
            live = [sum(1 for r in dec.rows if r.payload[0] == i) for i in range(len(items))]
            c1, c2, want = branch_candidates(dec.logits.float().softmax(-1), self.tau_abs, self.tau_rel)
            index, payloads, toks = [], [], []
            for j, r in enumerate(dec.rows):
                i, path, u, parent, born = r.payload
                split = bool(want[j]) and live[i] + sum(1 for x in done if x.payload[0] == i) < n[i]
                if split:
                    live[i] += 1
                    births += 1
                    index += [j, j]
                    payloads += [(i, path + (next_node[i],), u, parent, born), (i, path + (next_node[i] + 1,), uid, u, t)]
                    toks += [int(c1[j]), int(c2[j])]
                    next_node[i] += 2
                    uid += 1
                else:
                    index.append(j)
                    payloads.append(r.payload)
                    toks.append(int(c1[j]))
            dec.fork(index, payloads)
            done += dec.step(torch.tensor(toks))
            by_uid = {r.payload[2]: r for r in dec.rows + done}
            keep = [j for j, r in enumerate(dec.rows) if not self._too_close(r, by_uid, t + 1, dec)]
            pruned += len(dec) - len(keep)
            if len(keep) < len(dec):
                dec.fork(keep)
            if self._all_full(dec, done, n, t + 1):
                break
        # mix_ratio < 1: the other rows of each group are ordinary samples from the prompt
        sampled = [Row(prompts[i], payload=(i, (next_node[i] + k,), -1, -1, -1)) for i in range(len(items))
                   for k in range(sizes[i] - n[i])]  # fmt: skip
        for r in sampled:
            next_node[r.payload[0]] = max(next_node[r.payload[0]], r.payload[1][0] + 1)
        dec.add(sampled)
        # continue every unfinished branch with ordinary sampling
        done += dec.decode(sp.max_new_tokens)
        leaves = []
        for i in range(len(items)):
            mine = sorted((r for r in done if r.payload[0] == i and r.payload[2] >= 0), key=lambda r: r.payload[2])
            while len(mine) < n[i]:  # fill_return_sequences: duplicate the first branch
                mine.append(mine[0].copy((i, mine[0].payload[1] + (next_node[i],), -1, -1, -1)))
                next_node[i] += 1
            leaves += mine[: n[i]] + sorted((r for r in done if r.payload[0] == i and r.payload[2] < 0), key=lambda r: r.payload[1])
        groups = [r.payload[0] for r in leaves]
        batch = rows_to_batch(leaves, [items[g] for g in groups], groups, ctx.engine.pad_token_id, paths=True)
        distinct = len({(r.payload[0], tuple(r.tokens)) for r in leaves})
        return batch, {
            "latr/branches": float(births), "latr/pruned": float(pruned),
            "latr/distinct_ratio": distinct / len(leaves), "tree/decoded_tokens": float(dec.decoded),
        }  # fmt: skip

    def _too_close(self, r: Row, by_uid: dict[int, Row], t: int, dec: TreeDecoder) -> bool:
        _, _, _, parent, born = r.payload
        if parent < 0 or parent not in by_uid or (t - born) not in self.filter_steps:
            return False
        k = t - born
        a, b = r.tokens[-k:], by_uid[parent].tokens[len(r.tokens) - k : len(r.tokens)]
        if len(b) < k or dec.stop_t.numel() and (torch.isin(torch.tensor(a + b), dec.stop_t.cpu()).any()):
            return False
        return edit_distance(a, b) / k < self.tau_ed

    def _all_full(self, dec: TreeDecoder, done: list[Row], n: list[int], t: int) -> bool:
        for i, want in enumerate(n):
            if sum(1 for r in dec.rows + done if r.payload[0] == i) < want:
                return False
        return all(t - r.payload[4] >= self.filter_steps[-1] for r in dec.rows if r.payload[3] >= 0)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
