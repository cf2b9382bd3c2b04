"""`latr`: Lookahead Tree-Based Rollouts.

Paper: "Lookahead Tree-Based Rollouts for Enhanced Trajectory-Level Exploration in Reinforcement
Learning with Verifiable Rewards" (arXiv 2510.24302). Checked against the released code:
starreeze/latr @ 2adb0edf24cc9a9342ac021892897adcec1a2738 (`model/generation.py::generate`,
`_sample_new_sequence_with_rollout`; `model/sample_filter.py::ProbFilter, RolloutFilter`;
`model/utils.py::BranchParamScheduler, KeyTokenGenConfigMixin, BranchInfo.remove`;
`verl/workers/rollout/kt_rollout.py`; `scripts/grpo-kt-countdown.sh`). Notes: docs/rollouts.md.

Per prompt with group size n, at training step s (verl's global step, covey's step + 1):

    kt_n = round(n * mix_ratio(s)) rows are LATR branches, the other n - kt_n ordinary samples;
        mix_ratio(s) = the value of the largest schedule key <= s (`BranchParamScheduler.set_step`),
        default the countdown script's {0: 1, 10: 0.75, 20: 0.5, 80: 0.25, 200: 0}; Python's round
        (round(0.5) = 0: no LATR row)
    each LATR step t (0-based), for every unfinished branch: p = softmax(logits) WITHOUT temperature,
        (c1, p1), (c2, p2) its top 2; the branch wants a split when p2 > tau_abs and p1 - p2 < tau_rel
        capacity: a root holds at most kt_n branches (finished ones included); splits are granted in
        branch-creation order (the code's row order)
        a split: the branch appends c1, a new child branch = its prefix + c2 (birth step t)
        no split: the branch appends c1 (greedy; the code's default sample_nk "none")
    lookahead pruning after step t: a child born r = t + 1 - birth steps ago (r in filter_steps) whose
        last r tokens a are too close to its parent's last r tokens b (edit_distance(a, b) / r < tau_ed)
        is removed with all its descendants (`BranchInfo.remove`); skipped when a or b holds a stop
        token, or (keep_math_symbols) when b's first token decodes to a piece of "+-*/\\<>=()[]{}_^&%$0123456789"
    exit after step t when (`generate`, return_on_full):
        sum over roots of (kt_n if every branch of the root finished else its branch count)
            >= round(sum kt_n * (thres_init - thres_decay * t / max_new_tokens))
        and every branch, roots included (birth 0), has birth + max(filter_steps) < t;
        or after force_return_step steps. Every unfinished branch then continues with ordinary
        sampling (the engine's temperature / truncation) up to max_new_tokens
    a root with fewer than kt_n branches is filled by duplicating its first branch (fill_return_sequences)

The pruning tests (`RolloutFilter`; any one prunes; tau_ed 0 / tau_sm 1 / tau_rouge 1 switch one off,
as a null threshold does in the scripts):
    edit_distance(a, b) / r < tau_ed;  suffix_match(a, b) > tau_sm;  rouge_l(a, b) > tau_rouge
    suffix_match(a, b) = max(longest prefix of reversed(a) occurring in reversed(b), the same with a
        and b swapped) / len(a)  (`model/metrics.py::suffix_match_score`: the longest suffix of one
        window found anywhere in the other)
    rouge_l(a, b) = 2 P R / (P + R), P = LCS / len(a), R = LCS / len(b)  (`rouge_l_score`; 0 if LCS 0)

`recipe` picks the released script's defaults: "countdown" (`scripts/grpo-kt-countdown.sh`: tau_abs
0.25, tau_rel 0.15, tau_ed 0.4, no suffix / ROUGE-L test, the mix_ratio schedule above,
force_return_step 512 of 1024 = max_new_tokens / 2) or "math" (`scripts/grpo-kt-math.sh`: tau_abs
0.15, tau_rel 0.25, no edit-distance test, tau_sm 0.2, tau_rouge 0.5, mix_ratio {0: 1, 100: 0.75,
200: 0.5, 300: 0.25}, force_return_step 1024 of 8192 = max_new_tokens / 8); both: filter steps
20/30/50, thres_init 0.98, thres_decay 0.05. A parameter given explicitly overrides the recipe's. `mix_ratio` may also be one number (covey's option: the same share
at every step; mix_ratio 1 throughout makes groups of top-1/top-2 tokens only, which on short answers
collapse: docs/rollouts.md "Learning runs").

Differences from the code (all choices): the ordinary rows start when the LATR phase ends instead of
beside it (same distribution: they are i.i.d. samples of the prompt); the learned-judge and
random pruning options of `RolloutFilter` (off in both scripts) are not built; in the code the keep_math_symbols
skip drops entries from one of two lists it later zips together (a misalignment), here it skips the
candidate it names. Behaviour log-probs of the greedy/branch tokens are those of the tempered
distribution (what the learner recomputes); the branch choice itself is not a sample of it.
`tree_path` records each branch's node ids (a new node at every split). Metrics: latr/kt_rows (LATR
rows per group), latr/exit_step (-1: LATR ran to force_return_step or every row finished),
latr/branches, latr/pruned, latr/distinct_ratio, tree/decoded_tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from covey.engine.base import ForkingEngine, Row, TreeSession
from covey.strategies._rows import prompt_ids, rows_to_batch
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.rollouts import Rollouts

__all__ = ["LATR", "RECIPES", "branch_candidates", "edit_distance", "latr_exit", "mix_ratio_at", "rouge_l_score",
           "suffix_match_score"]

COUNTDOWN_MIX = {0: 1.0, 10: 0.75, 20: 0.5, 80: 0.25, 200: 0.0}  # scripts/grpo-kt-countdown.sh
MATH_MIX = {0: 1.0, 100: 0.75, 200: 0.5, 300: 0.25}  # scripts/grpo-kt-math.sh
# the released scripts' thresholds; force: force_return_step as a share of the response length
RECIPES = {
# (a test is off at tau_ed 0 and at tau_sm / tau_rouge 1: neither can then prune)
    "countdown": dict(tau_abs=0.25, tau_rel=0.15, tau_ed=0.4, tau_sm=1.0, tau_rouge=1.0, mix=COUNTDOWN_MIX, force=1 / 2),
    "math": dict(tau_abs=0.15, tau_rel=0.25, tau_ed=0.0, tau_sm=0.2, tau_rouge=0.5, mix=MATH_MIX, force=1 / 8),
}
MATH_CORE_SYMBOLS = "+-*/\\<>=()[]{}_^&%$0123456789"  # model/sample_filter.py


def edit_distance(a: list[int], b: list[int]) -> int:
    """Levenshtein distance between two token lists (plain DP; r <= 50 in practice)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def _longest_prefix_in_text(pattern: list[int], text: list[int]) -> int:
    """The longest L with pattern[:L] a contiguous run of text (KMP, as `model/metrics.py`)."""
    m = len(pattern)
    if m == 0:
        return 0
    pi, j = [0] * m, 0
    for i in range(1, m):
        while j > 0 and pattern[i] != pattern[j]:
            j = pi[j - 1]
        if pattern[i] == pattern[j]:
            j += 1
        pi[i] = j
    q = best = 0
    for t in text:
        while q > 0 and pattern[q] != t:
            q = pi[q - 1]
        if pattern[q] == t:
            q += 1
        best = max(best, q)
        if q == m:
            q = pi[q - 1]
    return best


def suffix_match_score(a: list[int], b: list[int]) -> float:
    """The longest suffix of either window found anywhere in the other, over len(a) (equal lengths)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"suffix_match_score needs two non-empty windows of one length, got {len(a)} and {len(b)}")
    ra, rb = a[::-1], b[::-1]
    return max(_longest_prefix_in_text(ra, rb), _longest_prefix_in_text(rb, ra)) / len(a)


def rouge_l_score(a: list[int], b: list[int]) -> float:
    """ROUGE-L F1 from the longest common subsequence: 2PR / (P + R), P = LCS/len(a), R = LCS/len(b)."""
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    prec, rec = lcs / len(a), lcs / len(b)
    return 0.0 if prec + rec == 0 else 2 * prec * rec / (prec + rec)


def branch_candidates(probs: torch.Tensor, tau_abs: float, tau_rel: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """probs [R, V] (raw softmax) -> (c1 [R], c2 [R], branch [R] bool: p2 > tau_abs and p1 - p2 < tau_rel)."""
    top = probs.topk(2, dim=-1)
    p1, p2 = top.values[:, 0], top.values[:, 1]
    return top.indices[:, 0], top.indices[:, 1], (p2 > tau_abs) & ((p1 - p2) < tau_rel)


def mix_ratio_at(schedule: dict[int, float], global_step: int) -> float:
    """`BranchParamScheduler.set_step`: the value of the largest key <= global_step (the first
    value before the first key)."""
    keys = sorted(schedule)
    k = keys[0]
    for key in keys[1:]:
        if key <= global_step:
            k = key
    return schedule[k]


def latr_exit(branches: list[int], finished: list[bool], kt_n: list[int], births: list[int], t: int, *,
              max_new_tokens: int, max_filter_step: int, thres_init: float, thres_decay: float) -> bool:  # fmt: skip
    """The code's early return after LATR step t (0-based). Per root: its branch count, whether all
    of them finished, its kt_n; `births`: every branch's birth step (roots 0). Full when the roots'
    effective counts (kt_n for an all-finished root) reach round(sum kt_n * thres), and no branch
    was born within max_filter_step steps (birth + max_filter_step < t)."""
    eff = sum(n if done else b for b, done, n in zip(branches, finished, kt_n))
    thres = thres_init - thres_decay * t / max_new_tokens
    if eff < round(sum(kt_n) * thres):
        return False
    return all(b + max_filter_step < t for b in births)


@register_strategy("latr")
class LATR:
    """LATR rollouts (see the module docstring).

    mix_ratio: {training step: LATR share of each group} (the code's mix_ratio_schedule), or one number.
    recipe: "countdown" or "math", the released script whose thresholds fill the parameters not given.
    tau_abs, tau_rel, tau_ed, tau_sm, tau_rouge: None takes the recipe's value.
    tau_ed / tau_sm / tau_rouge: the edit-distance, suffix-match and ROUGE-L pruning thresholds
        (tau_ed 0, tau_sm 1, tau_rouge 1: that test is off, as a null threshold in the scripts).
    """

    caps = StrategyCaps(engine_protocols=(ForkingEngine,), provides=("tree_path",))

    def __init__(self, *, recipe: str = "countdown", tau_abs: float | None = None, tau_rel: float | None = None,
                 tau_ed: float | None = None, tau_sm: float | None = None, tau_rouge: float | None = None,
                 filter_steps: tuple[int, ...] = (20, 30, 50), force_return_step: int | None = None,
                 mix_ratio: float | dict[int, float] | None = None, thres_init: float = 0.98,
                 thres_decay: float = 0.05, keep_math_symbols: bool = True):  # fmt: skip
        if recipe not in RECIPES:
            raise ValueError(f"latr: recipe must be one of {sorted(RECIPES)} (the released scripts), got {recipe!r}")
        base = RECIPES[recipe]
        pick = lambda v, k: base[k] if v is None else v  # noqa: E731
        tau_abs, tau_rel, tau_ed = pick(tau_abs, "tau_abs"), pick(tau_rel, "tau_rel"), pick(tau_ed, "tau_ed")
        tau_sm, tau_rouge = pick(tau_sm, "tau_sm"), pick(tau_rouge, "tau_rouge")
        if not (0 < tau_abs < 1 and 0 < tau_rel <= 1):
            raise ValueError(f"need 0 < tau_abs < 1 and 0 < tau_rel <= 1; got {tau_abs}, {tau_rel}")
        for key, val in (("tau_ed", tau_ed), ("tau_sm", tau_sm), ("tau_rouge", tau_rouge)):
            if not 0 <= val <= 1:
                raise ValueError(f"latr: {key} must be in [0, 1] (tau_ed 0, tau_sm 1, tau_rouge 1: that test off), got {val!r}")
        schedule = dict(base["mix"]) if mix_ratio is None else mix_ratio
        if not isinstance(schedule, dict):
            schedule = {0: schedule}
        try:
            schedule = {int(k): float(v) for k, v in schedule.items()}
        except (TypeError, ValueError):
            raise ValueError(f"mix_ratio must be a number or a {{step: ratio}} mapping, got {mix_ratio!r}") from None
        if not schedule or any(k < 0 or not 0 <= v <= 1 for k, v in schedule.items()):
            raise ValueError(f"mix_ratio: steps must be >= 0 and ratios in [0, 1] (the LATR share of each group), got {mix_ratio!r}")
        if not filter_steps or any(r < 1 for r in filter_steps):
            raise ValueError(f"filter_steps must be positive step counts, got {filter_steps}")
        if not 0 < thres_init <= 1 or thres_decay < 0:
            raise ValueError(f"need 0 < thres_init <= 1 and thres_decay >= 0, got {thres_init}, {thres_decay}")
        self.tau_abs, self.tau_rel, self.tau_ed, self.tau_sm, self.tau_rouge = tau_abs, tau_rel, tau_ed, tau_sm, tau_rouge
        self.force_share = base["force"]
        self.filter_steps, self.force = tuple(sorted(filter_steps)), force_return_step
        self.schedule, self.thres_init, self.thres_decay = schedule, thres_init, thres_decay
        self.keep_math = keep_math_symbols

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sp = ctx.sampling(0)
        sizes = [d.n for d in ctx.draws]
        mix = mix_ratio_at(self.schedule, ctx.step + 1)  # verl's global_steps start at 1
        n = [round(g * mix) for g in sizes]  # LATR branches per root (Python round, as the code)
        force = self.force if self.force is not None else max(1, int(sp.max_new_tokens * self.force_share))
        dec = ctx.engine.tree_session(sp)
        prompts = prompt_ids(ctx.tokenizer, items)
        # payload: (root, path, uid, parent uid, birth step); uid order = the code's branch order
        dec.add([Row(prompts[i], payload=(i, (0,), i, -1, 0)) for i in range(len(items)) if n[i] > 0])
        uid, next_node = len(items), [1] * len(items)
        done: list[Row] = []
        births = pruned = 0
        exit_step = -1
        for t in range(min(force, sp.max_new_tokens) if any(n) else 0):
            if not len(dec):
                break
            count = [sum(1 for r in dec.rows + done if r.payload[0] == i) for i in range(len(items))]
            c1, c2, want = branch_candidates(dec.logits.float().softmax(-1), self.tau_abs, self.tau_rel)
            split = set()
            for j in sorted(range(len(dec)), key=lambda j: dec.rows[j].payload[2]):  # creation order
                i = dec.rows[j].payload[0]
                if bool(want[j]) and count[i] < n[i]:
                    count[i] += 1
                    split.add(j)
            index, payloads, toks = [], [], []
            for j, r in enumerate(dec.rows):
                i, path, u, parent, born = r.payload
                if j in split:
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
            gone = self._pruned(dec.rows + done, t + 1, dec, ctx.tokenizer)
            if gone:
                pruned += sum(1 for r in dec.rows + done if r.payload[2] in gone)
                done = [r for r in done if r.payload[2] not in gone]
                dec.fork([j for j, r in enumerate(dec.rows) if r.payload[2] not in gone])
            mine = [[r for r in dec.rows + done if r.payload[0] == i] for i in range(len(items))]
            if latr_exit([len(m) for m in mine], [all(r.finish_reason for r in m) for m in mine], n,
                         [r.payload[4] for r in dec.rows + done], t, max_new_tokens=sp.max_new_tokens,
                         max_filter_step=self.filter_steps[-1], thres_init=self.thres_init,
                         thres_decay=self.thres_decay):  # fmt: skip
                exit_step = t
                break
        # the other rows of each group are ordinary samples from the prompt
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
            while 0 < len(mine) < n[i]:  # fill_return_sequences: duplicate the first branch
                mine.append(mine[0].copy((i, mine[0].payload[1] + (next_node[i],), -1, -1, -1)))
                next_node[i] += 1
            leaves += mine[: n[i]] + sorted((r for r in done if r.payload[0] == i and r.payload[2] < 0), key=lambda r: r.payload[1])
        groups = [r.payload[0] for r in leaves]
        batch = rows_to_batch(leaves, [items[g] for g in groups], groups, ctx.engine.pad_token_id, paths=True)
        distinct = len({(r.payload[0], tuple(r.tokens)) for r in leaves})
        return batch, {
            "latr/kt_rows": sum(n) / max(len(n), 1), "latr/exit_step": float(exit_step),
            "latr/branches": float(births), "latr/pruned": float(pruned),
            "latr/distinct_ratio": distinct / len(leaves), "tree/decoded_tokens": float(dec.decoded),
        }  # fmt: skip

    def _pruned(self, rows: list[Row], t: int, dec: TreeSession, tokenizer) -> set[int]:
        """uids removed after step t - 1 (`t` = steps done): too-close children and their descendants."""
        by_uid = {r.payload[2]: r for r in rows}
        gone = {r.payload[2] for r in rows if self._too_close(r, by_uid, t, dec, tokenizer)}
        grew = bool(gone)
        while grew:  # BranchInfo.remove: descendants go too
            more = {r.payload[2] for r in rows if r.payload[3] in gone} - gone
            gone |= more
            grew = bool(more)
        return gone

    def _too_close(self, r: Row, by_uid: dict[int, Row], t: int, dec: TreeSession, tokenizer=None) -> bool:
        _, _, _, parent, born = r.payload
        if parent < 0 or parent not in by_uid or (t - born) not in self.filter_steps:
            return False
        k = t - born
        a, b = r.tokens[-k:], by_uid[parent].tokens[len(r.tokens) - k : len(r.tokens)]
        if len(b) < k or dec.stop_ids.numel() and (torch.isin(torch.tensor(a + b), dec.stop_ids.cpu()).any()):
            return False
        if self.keep_math and tokenizer is not None and tokenizer.decode([b[0]]).strip() in MATH_CORE_SYMBOLS:
            return False
        return ((self.tau_ed > 0 and edit_distance(a, b) / k < self.tau_ed)
                or (self.tau_sm < 1 and suffix_match_score(a, b) > self.tau_sm)
                or (self.tau_rouge < 1 and rouge_l_score(a, b) > self.tau_rouge))  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
