import pytest
import torch

from covey.samplers import Feedback
from covey.samplers.self_curation import SelfSampler, likely_rows
from covey.train.config import validate_config
from covey.train.metrics import read_metrics
from covey.train.trainer import Trainer
from tests.samplers._helpers import FlagTask, ids, items, observe, one_step, reload, scored


def _batch(success, logp_rows, prompt_ids):
    b = scored(prompt_ids, success)
    b.behaviour_logprobs = torch.tensor(logp_rows, dtype=torch.float32)
    return b


def test_most_likely_row_by_hand():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.4], [-0.1, -3.0], [-0.2, -0.2]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    inv, best = likely_rows(logp, mask, torch.tensor([0, 0, 1, 1]), "max_logprob")
    assert best.tolist() == [1, 2] and inv.tolist() == [0, 0, 1, 1]  # sums -3, -0.9 | -0.1, -0.4
    _, best = likely_rows(logp, mask, torch.tensor([0, 0, 1, 1]), "max_mean_logprob")
    assert best.tolist() == [1, 2]  # means -1.5, -0.45 | -0.1, -0.2
    _, best = likely_rows(torch.zeros(3, 2), torch.ones(3, 2), torch.tensor([4, 4, 4]), "max_logprob")
    assert best.tolist() == [0]  # ties: the first row


def test_prompts_the_mode_solves_never_enter_the_loss():
    s = SelfSampler(items(2), greedy_check="proxy")
    # prompt 100: its most likely row (row 1) is correct -> dropped; prompt 101: most likely row (2) wrong -> kept
    b = _batch([0, 1, 0, 1], [[-2.0] * 3, [-0.1] * 3, [-0.1] * 3, [-2.0] * 3], [100, 100, 101, 101])
    m = observe(s, b)
    assert b.completion_mask.sum(-1).tolist() == [0.0, 0.0, 3.0, 3.0]
    assert m["sampler/self/high_likelihood_frac"] == 0.5 and s.gated == {100: 0}


def test_gated_prompts_are_skipped_for_skip_epochs_then_rechecked():
    s = SelfSampler(items(3), seed=0, skip_epochs=1, greedy_check="proxy")
    s.next(3, 4)  # epoch 0
    s.observe(_batch([1, 1], [[-0.1] * 3] * 2, [100, 100]))
    assert 100 not in ids(s.next(2, 4)) and s.epoch == 1  # epoch 1: the two other prompts
    rest = ids(s.next(3, 4))  # all of epoch 2: checked again
    assert 100 in rest and s.epoch == 2


def test_by_default_solved_prompts_are_checked_again_every_step():
    # the released trainer draws every prompt and greedy-checks it each step (no gating between steps)
    s = SelfSampler(items(3), seed=0)
    assert s.skip_epochs == 0
    s.next(3, 4)  # epoch 0
    s.gate(100, True)  # its greedy answer was correct
    assert sorted(ids(s.next(3, 4))) == [100, 101, 102] and s.epoch == 1


def test_everything_gated_still_fills_the_batch():
    s = SelfSampler(items(2), seed=0, skip_epochs=5, greedy_check="proxy")
    s.next(2, 4)
    s.observe(_batch([1, 1], [[-0.1] * 3] * 2, [100, 101]))
    out = s.next(5, 4)
    assert len(out) == 5 and s.forced == 5
    b = _batch([1, 1], [[-0.1] * 3] * 2, [100, 101])
    observe(s, b)  # an all-solved batch: an empty loss, no crash
    assert float(b.completion_mask.sum()) == 0.0


def test_state_round_trip_is_exact():
    make = lambda: SelfSampler(items(5), seed=4, greedy_check="proxy")  # noqa: E731
    s = make()
    s.next(5, 4)
    s.observe(_batch([1, 0], [[-0.1] * 3, [-1.0] * 3], [102, 102]))
    r = reload(s, make)
    assert s.next(9, 4) == r.next(9, 4) and s.gated == r.gated


def test_one_training_step_with_the_proxy(tmp_path):
    m = one_step(tmp_path, {"name": "self", "greedy_check": "proxy"})
    assert 0.0 <= m["sampler/self/high_likelihood_frac"] <= 1.0 and "learn/loss" in m


# ---------------------------------------------------------------- greedy_check "decode" (the released code)
def _trainer(tmp_path, task, **over):
    raw = {
        "model": {"name": "tiny-llama"}, "task": {"name": "arithmetic"},
        "sampler": {"name": "self"},  # the defaults: greedy decode, every prompt re-checked every step
        "rollout": {"prompts_per_step": 6, "group_size": 2}, "sampling": {"max_new_tokens": 4},
        "algo": {"preset": "grpo", "kl": None}, "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]}, "steps": 2, **over,
    }  # fmt: skip
    return Trainer(validate_config(raw), tmp_path / "run", task=task)


def test_prompts_the_greedy_policy_solves_are_never_rolled_out(tmp_path):
    trainer = _trainer(tmp_path, FlagTask(6, solved={0, 3}))
    try:
        batch, m = trainer.collect()  # one epoch: all six prompts drawn, greedy-checked first
        assert sorted(set(batch.prompt_id.tolist())) == [1, 2, 4, 5] and len(batch) == 8
        assert m["sampler/self/greedy_solved_frac"] == 2 / 6
        assert 6 <= m["sampler/self/greedy_tokens"] <= 6 * 4  # one greedy completion per prompt
        m = trainer.step()  # a full step: the solved prompts are dropped again, the rest is trained on
        assert m["sampler/self/greedy_solved_frac"] == 2 / 6 and "learn/loss" in m and "train/skipped_step" not in m
    finally:
        trainer.close()


def test_an_all_solved_batch_skips_the_step_without_crashing(tmp_path):
    over = {"checkpoint": {"every": 1}, "log": {"progress": False, "report_to": ["jsonl", "tensorboard"], "completions_every": 1}}
    trainer = _trainer(tmp_path, FlagTask(4, solved={0, 1, 2, 3}), rollout={"prompts_per_step": 4, "group_size": 2}, **over)
    try:
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        m1, m2 = trainer.step(), trainer.step()
        for m in (m1, m2):
            assert m["train/skipped_step"] == 1.0 and m["sampler/self/greedy_solved_frac"] == 1.0
            assert "learn/loss" not in m and "length/mean" not in m
        assert trainer.step_num == 2 and trainer.last_samples == []
        assert all(torch.equal(v, trainer.model.state_dict()[k]) for k, v in before.items())  # nothing was learned
        assert (tmp_path / "run" / "checkpoint-2").is_dir()
        assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2]
    finally:
        trainer.close()


def test_decode_options_are_checked():
    with pytest.raises(ValueError, match="greedy_check 'decode' decodes it"):
        SelfSampler(items(2), greedy_proxy="max_mean_logprob")
    with pytest.raises(ValueError, match="greedy_check must be 'decode' or 'proxy'"):
        SelfSampler(items(2), greedy_check="sample")
    s = SelfSampler(items(2))
    assert s.observe(scored([100], [1])) == Feedback()  # decode: nothing to do after the rollout
