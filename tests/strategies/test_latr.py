"""`latr` against the released code (starreeze/latr @ 2adb0ed): the mix_ratio schedule, the branch
test, which token a branch and its parent take, greedy continuation, pruning with descendants and the
exit rule, with hand-computed values."""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.engine.tree import Row
from covey.models import build_tiny
from covey.samplers import Draw
from covey.strategies.base import RolloutContext
from covey.strategies.latr import COUNTDOWN_MIX, LATR, branch_candidates, edit_distance, latr_exit, mix_ratio_at

ITEMS = [{"id": 5, "prompt": "3+4="}, {"id": 9, "prompt": "8-1="}]
ALWAYS = dict(tau_abs=1e-4, tau_rel=1.0, tau_ed=0.0)  # the flat tiny model passes the branch test at every token


def _ctx(G, max_new=12, step=0, items=None):
    model, tok = build_tiny("tiny-llama", seed=2)
    engine = TorchEngine(model, tok, dtype="fp32")
    return RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, G) for it in (ITEMS if items is None else items)],
                          sampling=lambda r: SamplingParams(seed=7, max_new_tokens=max_new, ignore_eos=True),
                          score=lambda b: {}, draw=lambda k: [], step=step)  # fmt: skip


def _ranks(ctx, batch, row):
    """Rank (0 = argmax, 1 = second, ...) of each completion token of `row` under the raw policy."""
    ids = torch.cat([batch.prompt_ids[row], batch.completion_ids[row]])
    with torch.no_grad():
        logits = ctx.engine.model(ids[None]).logits[0].float()
    p = len(batch.prompt_ids[row])
    out = []
    for j in range(batch.completion_ids.shape[1]):
        tok = int(batch.completion_ids[row, j])
        out.append(int((logits[p - 1 + j] > logits[p - 1 + j, tok]).sum()))
    return out


def test_branch_rule_and_edit_distance():
    probs = torch.tensor([[0.40, 0.35, 0.25], [0.9, 0.05, 0.05], [0.5, 0.2, 0.3], [0.5, 0.25, 0.25]])
    c1, c2, want = branch_candidates(probs, tau_abs=0.25, tau_rel=0.15)
    # p2 > tau_abs strictly: [0.5, 0.25] is not a split (ProbFilter uses >)
    assert c1.tolist() == [0, 0, 0, 0] and c2.tolist()[:3] == [1, 1, 2] and want.tolist() == [True, False, False, False]
    assert edit_distance([1, 2, 3], [1, 2, 3]) == 0 and edit_distance([1, 2, 3], [3, 2, 1]) == 2
    assert edit_distance([], [4, 5]) == 2


def test_mix_ratio_schedule_is_the_countdown_script():
    assert COUNTDOWN_MIX == {0: 1.0, 10: 0.75, 20: 0.5, 80: 0.25, 200: 0.0}
    got = [mix_ratio_at(COUNTDOWN_MIX, s) for s in (1, 9, 10, 19, 20, 79, 80, 199, 200, 500)]
    assert got == [1.0, 1.0, 0.75, 0.75, 0.5, 0.5, 0.25, 0.25, 0.0, 0.0]
    assert mix_ratio_at({5: 0.3, 10: 0.1}, 2) == 0.3  # before the first key: the first value


@pytest.mark.parametrize("step,kt", [(0, 4), (8, 4), (9, 3), (19, 2), (79, 1), (199, 0)])
def test_default_schedule_lowers_the_latr_share(step, kt):
    # covey step s is verl global step s + 1; per root round(4 * ratio) LATR rows, the rest sampled
    batch, m = LATR(**ALWAYS, filter_steps=(50,)).rollout(ITEMS, _ctx(4, max_new=4, step=step))
    assert m["latr/kt_rows"] == kt and len(batch) == 8
    first = [p[0] for p in batch.tree_path]
    assert sum(1 for f in first if f == 0) == 2 * kt  # LATR rows hang below node 0
    assert m["latr/branches"] == 2 * max(kt - 1, 0)  # the flat model fills every root's capacity


def test_python_round_as_the_code():
    # round(2 * 0.25) = round(0.5) = 0 in Python: no LATR row, all sampled
    batch, m = LATR(**ALWAYS, mix_ratio=0.25).rollout(ITEMS, _ctx(2, max_new=3))
    assert m["latr/kt_rows"] == 0 and m["latr/branches"] == 0 and m["latr/exit_step"] == -1 and len(batch) == 4


def test_parent_takes_top1_child_top2_and_both_continue_greedily():
    ctx = _ctx(2, max_new=6, items=ITEMS[:1])
    # filter step 50 > max_new_tokens: LATR never exits early, every token is chosen by the LATR rule
    batch, m = LATR(**ALWAYS, filter_steps=(50,), force_return_step=6).rollout(ITEMS[:1], ctx)
    assert m["latr/branches"] == 1 and m["latr/exit_step"] == -1
    parent = [k for k, p in enumerate(batch.tree_path) if p == (0, 1)]
    child = [k for k, p in enumerate(batch.tree_path) if p == (0, 2)]
    assert len(parent) == len(child) == 1
    assert _ranks(ctx, batch, parent[0]) == [0] * 6  # c1, then greedy
    assert _ranks(ctx, batch, child[0]) == [1] + [0] * 5  # c2 at the split, then greedy


@pytest.mark.parametrize("G", [1, 2])
def test_exit_rule_counts_roots_and_waits_past_the_last_filter_step(G):
    ctx = _ctx(G, max_new=12, items=ITEMS[:1])
    batch, m = LATR(**ALWAYS, filter_steps=(3,), force_return_step=12).rollout(ITEMS[:1], ctx)
    # G = 1: the root alone is full at once, but it was born at step 0: exit at the first t with 0 + 3 < t
    # G = 2: the split at t = 0 gives a child born at 0: the same step
    assert m["latr/exit_step"] == 4
    for row in range(len(batch)):
        ranks = _ranks(ctx, batch, row)
        assert all(r <= 1 for r in ranks[:5]) and sum(ranks[:5]) == (1 if batch.tree_path[row] == (0, 2) else 0)
        assert any(r > 1 for r in ranks[5:])  # sampled after the exit (flat model: argmax is rare)


def test_exit_rule_hand_values():
    kw = dict(max_new_tokens=1024, max_filter_step=50, thres_init=0.98, thres_decay=0.05)
    # 8 of 8 branches; youngest born at 3: needs 3 + 50 < t
    assert latr_exit([8], [False], [8], [0, 3], 54, **kw) and not latr_exit([8], [False], [8], [0, 3], 53, **kw)
    assert not latr_exit([1], [False], [1], [0], 50, **kw) and latr_exit([1], [False], [1], [0], 51, **kw)  # roots count
    # aggregate over roots: 14 of 16 < round(16 * 0.98) = 16; at thres 0.9, round(14.4) = 14 is enough
    assert not latr_exit([8, 6], [False, False], [8, 8], [0], 60, **kw)
    assert latr_exit([8, 6], [False, False], [8, 8], [0], 60, **{**kw, "thres_init": 0.9})
    assert latr_exit([8, 3], [False, True], [8, 8], [0], 60, **kw)  # an all-finished root counts as full
    # decay: 30 of 32; round(32 * 0.98) = 31 at t = 60 (0.98 - 0.05 * 60 / 1024 = 0.9771 -> 31.27 -> 31)
    assert not latr_exit([16, 14], [False, False], [16, 16], [0], 60, **kw)
    assert latr_exit([16, 14], [False, False], [16, 16], [0], 1000, **kw)  # 0.9312 * 32 = 29.8 -> 30


def test_pruning_removes_too_close_children_with_their_descendants():
    strat = LATR(filter_steps=(2,), tau_ed=0.4, keep_math_symbols=False)
    dec = type("D", (), {"stop_ids": torch.tensor([99])})()
    parent = Row([1], tokens=[1, 2, 3, 4, 5], payload=(0, (1,), 0, -1, 0))
    alike = Row([1], tokens=[1, 9, 3, 4, 5], payload=(0, (2,), 1, 0, 2))  # born at step 2, same next tokens
    grandchild = Row([1], tokens=[1, 9, 3, 7, 7], payload=(0, (3,), 2, 1, 3))
    other = Row([1], tokens=[1, 9, 5, 6], payload=(0, (4,), 3, 0, 2))
    stopped = Row([1], tokens=[1, 9, 3, 99], payload=(0, (5,), 4, 0, 2))
    by_uid = {0: parent}
    a2 = Row([1], tokens=[1, 9, 3, 4], payload=(0, (2,), 1, 0, 2))
    assert strat._too_close(a2, by_uid, 4, dec) and not strat._too_close(other, by_uid, 4, dec)
    assert not strat._too_close(a2, by_uid, 3, dec)  # only r in filter_steps steps after birth
    assert not strat._too_close(stopped, by_uid, 4, dec)  # a stop token in either window: skipped
    alike.tokens = alike.tokens[:4]
    grandchild.tokens = grandchild.tokens[:4]
    parent.tokens = parent.tokens[:4]
    assert strat._pruned([parent, alike, grandchild, other], 4, dec, None) == {1, 2}


def test_latr_branches_within_capacity():
    strat = LATR(**ALWAYS, filter_steps=(2,), force_return_step=8, mix_ratio=1.0)
    batch, m = strat.rollout(ITEMS, _ctx(4))
    assert batch.num_groups == 2 and len(batch) == 8
    assert m["latr/pruned"] == 0 and m["latr/branches"] == 2 * 3  # capacity: 4 branches per root
    assert m["latr/distinct_ratio"] == 1.0
    assert len(set(zip(batch.group.tolist(), batch.tree_path))) == 8


def test_constant_mix_ratio_samples_the_rest_of_each_group():
    from covey.learner.logprobs import completion_logprobs

    ctx = _ctx(4)
    strat = LATR(**ALWAYS, filter_steps=(2,), force_return_step=8, mix_ratio=0.5)
    batch, m = strat.rollout(ITEMS, ctx)  # per root: round(0.5 * 4) = 2 LATR branches + 2 samples
    assert batch.group.tolist() == [0] * 4 + [1] * 4 and batch.prompt_id.tolist() == [5] * 4 + [9] * 4
    assert m["latr/branches"] == 2  # capacity 2 per root: one split each
    first = [p[0] for p in batch.tree_path]
    assert first == [0, 0, first[2], first[3], 0, 0, first[6], first[7]] and 0 not in first[2:4] + first[6:8]
    assert len(set(zip(batch.group.tolist(), batch.tree_path))) == 8
    lp, _ = completion_logprobs(ctx.engine.model, batch.prompt_ids, batch.completion_ids, batch.completion_mask, temperature=1.0)
    assert torch.allclose(lp * batch.completion_mask, batch.behaviour_logprobs, atol=1e-4)
    for bad in (1.5, {0: 1.0, 10: -0.1}, "half"):
        with pytest.raises(ValueError, match="mix_ratio"):
            LATR(mix_ratio=bad)


def test_suffix_match_and_rouge_l_hand_values():
    from covey.strategies.latr import rouge_l_score, suffix_match_score

    # reversed a = 4 3 2 1 holds "4 3" inside reversed b = 8 4 3 9; reversed b starts with 8 (not in a)
    assert suffix_match_score([1, 2, 3, 4], [9, 3, 4, 8]) == 0.5
    assert suffix_match_score([1, 2, 3, 4], [5, 6, 7, 4]) == 0.25  # only the last token
    assert suffix_match_score([4, 7], [3, 4]) == 0.5  # b's suffix "4" inside a: the other direction counts
    assert suffix_match_score([1, 2, 3], [1, 2, 3]) == 1.0
    assert suffix_match_score([1, 2], [3, 4]) == 0.0
    assert rouge_l_score([1, 2, 3, 4], [1, 3, 5, 4]) == 0.75  # LCS 1 3 4
    assert rouge_l_score([1, 2], [1, 2, 3, 4]) == pytest.approx(2 / 3)  # P 1, R 1/2
    assert rouge_l_score([5, 3, 6], [3, 7, 6]) == pytest.approx(2 / 3)
    assert rouge_l_score([1, 2], [3, 4]) == 0.0
    with pytest.raises(ValueError, match="one length"):
        suffix_match_score([1, 2], [1])


def test_math_recipe_is_the_released_math_script():
    s = LATR(recipe="math")
    assert (s.tau_abs, s.tau_rel, s.tau_ed, s.tau_sm, s.tau_rouge) == (0.15, 0.25, 0.0, 0.2, 0.5)
    assert s.schedule == {0: 1.0, 100: 0.75, 200: 0.5, 300: 0.25} and s.force_share == 1 / 8
    c = LATR()
    assert (c.tau_abs, c.tau_rel, c.tau_ed, c.tau_sm, c.tau_rouge) == (0.25, 0.15, 0.4, 1.0, 1.0)
    assert c.schedule == COUNTDOWN_MIX and c.force_share == 1 / 2
    assert LATR(recipe="math", tau_sm=0.3).tau_sm == 0.3  # an explicit value overrides the recipe
    with pytest.raises(ValueError, match="recipe must be one of"):
        LATR(recipe="code")
    with pytest.raises(ValueError, match="tau_rouge must be in"):
        LATR(tau_rouge=1.5)


def _window_pair(child_tail, parent_tail):
    k = len(child_tail)
    parent = Row([1], tokens=[1, 2] + list(parent_tail), payload=(0, (1,), 0, -1, 0))
    child = Row([1], tokens=[1, 9] + list(child_tail), payload=(0, (2,), 1, 0, 2))
    return child, {0: parent}, 2 + k


def test_math_recipe_prunes_by_suffix_match_and_rouge_l_not_edit_distance():
    dec = type("D", (), {"stop_ids": torch.tensor([99])})()
    math_ = LATR(recipe="math", filter_steps=(2, 3), keep_math_symbols=False)
    count = LATR(filter_steps=(2, 3), keep_math_symbols=False)
    # suffix match 0.5 > 0.2 prunes under math; edit distance 2/2 = 1 keeps it under countdown
    child, by_uid, t = _window_pair([4, 7], [3, 4])
    assert math_._too_close(child, by_uid, t, dec) and not count._too_close(child, by_uid, t, dec)
    # ROUGE-L 2/3 > 0.5 prunes (suffix match 1/3 alone would too: switch it off to see ROUGE-L's own)
    rouge_only = LATR(recipe="math", tau_sm=1.0, filter_steps=(3,), keep_math_symbols=False)
    child, by_uid, t = _window_pair([5, 3, 6], [3, 7, 6])
    assert rouge_only._too_close(child, by_uid, t, dec)
    assert not LATR(recipe="math", tau_sm=1.0, tau_rouge=0.7, filter_steps=(3,), keep_math_symbols=False)._too_close(child, by_uid, t, dec)
    child, by_uid, t = _window_pair([5, 6], [3, 4])  # nothing shared: kept by both
    assert not math_._too_close(child, by_uid, t, dec) and not count._too_close(child, by_uid, t, dec)


def test_math_recipe_rolls_out_within_capacity():
    strat = LATR(recipe="math", tau_abs=1e-4, tau_rel=1.0, filter_steps=(2,), mix_ratio=1.0)
    batch, m = strat.rollout(ITEMS, _ctx(4, max_new=16))
    assert batch.num_groups == 2 and len(batch) == 8 and m["latr/branches"] <= 2 * 3 + m["latr/pruned"]
    assert m["latr/exit_step"] <= 16 // 8  # force_return_step = max_new_tokens / 8
