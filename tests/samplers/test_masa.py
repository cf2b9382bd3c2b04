import torch

from covey.samplers.masa import MasaSampler, cutoff_rows
from covey.train.config import validate_config
from covey.train.trainer import Trainer
from tests.samplers._helpers import FlagTask, ids, items, observe, one_step, reload, scored


def test_zero_variance_groups_are_filtered_and_their_prompts_gated():
    s = MasaSampler(items(3), seed=0)
    s.next(3, 4)
    b = scored([100] * 2 + [101] * 2 + [102] * 2, [0, 0, 1, 0, 1, 1])
    m = observe(s, b)
    assert b.completion_mask.sum(-1).tolist() == [0, 0, 3, 3, 0, 0]
    assert m["sampler/masa/filtered_rows_frac"] == 4 / 6 and set(s.gated) == {100, 102}
    assert ids(s.next(1, 4)) == [101]  # epoch 1 skips the gated prompts


def test_gate_after_needs_visits_in_a_row():
    s = MasaSampler(items(2), gate_after=2, filter_zero_variance=False)
    s.observe(scored([100, 100], [0, 0]))
    assert s.gated == {}
    s.observe(scored([100, 100], [0, 1]))  # signal resets the streak
    s.observe(scored([100, 100], [0, 0]))
    assert s.gated == {}
    s.observe(scored([100, 100], [1, 1]))
    assert set(s.gated) == {100}


def test_cutoff_by_hand():
    assert cutoff_rows(torch.tensor([3.0, float("nan")]), 1.5).tolist() == [5, -1]
    s = MasaSampler(items(1), cutoff_margin=1.0, filter_zero_variance=False)
    first = scored([100] * 3, [1, 1, 0])
    first.completion_mask = torch.tensor([[1.0, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    first.completion_ids = torch.ones(3, 5, dtype=torch.long)
    first.behaviour_logprobs = torch.zeros(3, 5)
    s.observe(first)
    assert s.pred_len == {100: 3.0}  # mean length of the correct rows (2 and 4)
    second = scored([100] * 2, [1, 1])
    second.completion_mask = torch.tensor([[1.0, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    second.completion_ids, second.behaviour_logprobs = torch.ones(2, 5, dtype=torch.long), torch.zeros(2, 5)
    m = observe(s, second)  # row 1 (5 tokens) runs past ceil(1.0 * 3) = 3: reward 0, tokens 4-5 masked
    assert second.rewards[:, 0].tolist() == [1.0, 0.0] and second.completion_mask[1].tolist() == [1, 1, 1, 0, 0]
    assert m["sampler/masa/cutoff_rows"] == 1.0


def test_everything_gated_still_fills_the_batch():
    s = MasaSampler(items(2), seed=1, skip_epochs=3)
    s.next(2, 4)
    s.observe(scored([100, 100, 101, 101], [0, 0, 1, 1]))
    # both gated through epoch 3: one whole pass (epoch 1) is skipped, then gated prompts are drawn anyway
    assert len(s.next(6, 4)) == 6 and (s.skipped, s.forced) == (2, 4)


def test_state_round_trip_is_exact():
    make = lambda: MasaSampler(items(6), seed=5, cutoff_margin=2.0)  # noqa: E731
    s = make()
    s.next(4, 4)
    s.observe(scored([100, 100, 103, 103], [0, 0, 1, 0]))
    r = reload(s, make)
    assert s.next(11, 4) == r.next(11, 4) and (s.gated, s.streak, s.pred_len) == (r.gated, r.streak, r.pred_len)


def test_one_training_step(tmp_path):
    m = one_step(tmp_path, {"name": "masa", "cutoff_margin": 1.5})
    assert "sampler/masa/filtered_rows_frac" in m and "learn/loss" in m


# ---------------------------------------------------------------- early cut-off that stops generation
def test_generation_limits_by_hand():
    s = MasaSampler(items(3), cutoff_margin=1.5)
    s.pred_len = {100: 3.0, 102: 4.0}
    # L = ceil(1.5 * 3) = 5 and ceil(1.5 * 4) = 6; the engine may write L + 1 tokens (the one that exceeds L)
    draws = s.next(3, 2)
    assert {d.item["id"]: d.max_new_tokens for d in draws} == {100: 6, 101: None, 102: 7}  # 101: no prediction
    assert [d.n for d in draws] == [2, 2, 2]
    assert s.observe(scored([100, 101], [0, 1])).metrics["sampler/masa/limited_prompts"] == 2.0
    assert {d.max_new_tokens for d in MasaSampler(items(3)).next(3, 2)} == {None}  # cut-off off


def test_a_row_stopped_at_its_limit_is_cut_like_a_longer_one(caplog):
    s = MasaSampler(items(1), cutoff_margin=1.0, filter_zero_variance=False)
    s.pred_len = {100: 2.0}
    b = scored([100] * 3, [1, 1, 1])  # lengths 3 (stopped at L + 1 = 3: cut), 2 and 1 (kept)
    b.completion_mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 0, 0]])
    m = observe(s, b)
    assert b.rewards[:, 0].tolist() == [0.0, 1.0, 1.0] and b.completion_mask[0].tolist() == [1, 1, 0]
    assert m["sampler/masa/cutoff_rows"] == 1.0 and "ignores per-prompt generation limits" not in caplog.text
    s.pred_len = {100: 1.0}
    s.observe(scored([100], [1]))  # 3 tokens > L + 1 = 2: the strategy did not stop it -> warned once
    s.observe(scored([100], [1]))
    assert caplog.text.count("ignores per-prompt generation limits") == 1


def _masa_trainer(tmp_path, margin):
    raw = {
        "model": {"name": "tiny-llama"}, "task": {"name": "arithmetic"},
        "sampler": {"name": "masa", "cutoff_margin": margin, "gate_after": 0, "filter_zero_variance": False},
        "rollout": {"prompts_per_step": 4, "group_size": 4},
        # the random byte-level tiny Llama rarely ends a row; stopping at any letter gives varied lengths
        "sampling": {"max_new_tokens": 16, "stop_strings": list("abcdefghijklmnopqrstuvwxyz")},
        "algo": {"preset": "grpo", "kl": None}, "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]}, "steps": 2,
    }  # fmt: skip
    return Trainer(validate_config(raw), tmp_path / f"run-{margin}", task=FlagTask(4, solved={0, 1, 2, 3}))


def test_cutoff_stops_generation_in_a_training_run(tmp_path):
    """Every answer is correct (so every prompt gets a predicted length at step 1); 4 prompts, 4 per step:
    step 2 revisits all of them. Both runs are identical through step 1; at step 2 the cut-off run
    generates each row only up to its limit, with the same tokens as the run without cut-off."""
    free, cut = _masa_trainer(tmp_path, None), _masa_trainer(tmp_path, 1.0)
    try:
        m1f, m1c = free.step(), cut.step()
        assert m1f["length/mean"] == m1c["length/mean"] and m1c["sampler/masa/limited_prompts"] == 0.0
        limits = {it["id"]: cut.sampler.generation_limit(it["id"]) for it in cut.sampler.items}
        assert None not in limits.values() and sorted(limits) == [0, 1, 2, 3]
        bf, m2f = free.collect()
        bc, m2c = cut.collect()
        assert m2c["sampler/masa/limited_prompts"] == 4.0 and m2c["sampler/masa/cutoff_rows"] > 0
        assert bf.prompt_id.tolist() == bc.prompt_id.tolist()
        want = [min(n, limits[p]) for n, p in zip(bf.lengths.tolist(), bf.prompt_id.tolist())]
        assert m2c["length/mean"] * len(bc) == sum(want) < m2f["length/mean"] * len(bf)  # fewer tokens generated
        for i, n in enumerate(want):  # same tokens up to the limit; a row stopped there finished "length"
            assert bc.completion_ids[i, :n].tolist() == bf.completion_ids[i, :n].tolist()
            if bf.lengths[i] > n:
                assert bc.finish_reason[i] == "length" and bc.rewards[i].abs().sum() == 0
    finally:
        free.close()
        cut.close()
