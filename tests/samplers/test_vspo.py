"""`vspo`: the value function by hand, value-ranked refills, seeded draws, resume, and a real step."""

import pytest
import torch

from covey.registry import RegistryError
from covey.samplers import SAMPLERS
from covey.samplers.vspo import VspoSampler, vspo_value
from tests.samplers._helpers import ids, items, reload, scored


def test_value_by_hand():
    p = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=torch.float64)
    # beta = 1: p (1-p)^2 -> 0, 0.25*0.75*0.75 = 0.140625, 0.5*0.5*0.5 = 0.125, 0
    assert vspo_value(p, 1.0).tolist() == pytest.approx([0.0, 0.140625, 0.125, 0.0])
    # beta = 0: pure uncertainty p (1 - p)
    assert vspo_value(p, 0.0).tolist() == pytest.approx([0.0, 0.1875, 0.25, 0.0])
    # beta = 2: 0.25 * 0.75**3 = 0.10546875
    assert vspo_value(p, 2.0)[1].item() == pytest.approx(0.10546875)


def test_p_hat_counts_every_scored_round():
    s = VspoSampler(items(4), seed=0, beta=1.0, a0=0.5)
    assert s.p_hat().tolist() == [0.5] * 4
    s.observe(scored([100, 100, 100, 101, 101], [1, 1, 0, 0, 0]))
    # (2 + 0.5) / (3 + 1) = 0.625; (0 + 0.5) / (2 + 1) = 1/6
    assert s.p_hat()[:2].tolist() == pytest.approx([0.625, 1 / 6]) and s.p_hat()[2:].tolist() == [0.5, 0.5]


class _Ctx:
    """The two fields of a RolloutContext the sampler wraps."""

    def __init__(self, sampler):
        self.score = lambda batch: {"reward": 1.0}
        self.draw = lambda k: sampler.next(k, 4)


def test_refills_take_the_highest_value_prompts_not_drawn_this_step():
    s = VspoSampler(items(6), seed=0, beta=1.0)
    s.succ = torch.tensor([0, 1, 3, 8, 0, 2], dtype=torch.float64)
    s.count = torch.tensor([8, 8, 8, 8, 0, 4], dtype=torch.float64)
    value = vspo_value(s.p_hat(), 1.0)  # p_hat = 1/18, 3/18, 7/18, 17/18, 1/2, 1/2
    main = ids(s.next(2, 4))  # the uniform order
    assert main == ids(VspoSampler(items(6), seed=0).next(2, 4))
    ctx = _Ctx(s)
    s.before_rollout([], ctx)
    refill = ids(ctx.draw(2))
    free = [i for i in range(6) if 100 + i not in main]
    best = sorted(free, key=lambda i: -float(value[i]))[:2]
    assert sorted(refill) == sorted(100 + i for i in best)
    assert not set(refill) & set(main)
    # a direct next() (no ctx.draw) is a main draw again
    assert ids(s.next(1, 4)) == ids(VspoSampler(items(6), seed=0).next(3, 4))[2:]


def test_filtered_groups_count_through_the_wrapped_score():
    s = VspoSampler(items(3), seed=0)
    ctx = _Ctx(s)
    s.next(2, 4)
    s.before_rollout([], ctx)
    assert ctx.score(scored([100, 100], [0, 0])) == {"reward": 1.0}  # a zero-signal round the strategy drops
    ctx.score(scored([101, 101], [1, 0]))
    m = s.observe(scored([101, 101], [1, 0])).metrics  # only the kept group reaches observe
    assert s.count.tolist() == [2.0, 2.0, 0.0] and s.succ.tolist() == [0.0, 1.0, 0.0]
    assert m["sampler/vspo/visited_frac"] == pytest.approx(2 / 3)


def test_draws_are_deterministic_for_a_seed_and_resume_restores_them():
    def run(s, steps):
        out = []
        for _ in range(steps):
            got = ids(s.next(2, 4))
            ctx = _Ctx(s)
            s.before_rollout([], ctx)
            got += ids(ctx.draw(2))
            ctx.score(scored(got, [1, 0, 0, 1]))
            s.observe(scored(got, [1, 0, 0, 1]))
            out.append(got)
        return out

    a, b = VspoSampler(items(9), seed=4), VspoSampler(items(9), seed=4)
    assert run(a, 3) == run(b, 3)
    r = reload(a, lambda: VspoSampler(items(9), seed=4))
    assert run(a, 3) == run(r, 3)


def test_bad_parameters():
    with pytest.raises(ValueError, match="beta"):
        VspoSampler(items(2), beta=-1)
    with pytest.raises(ValueError, match="a0"):
        VspoSampler(items(2), a0=0)
    assert SAMPLERS.get("vspo").fn is VspoSampler
    with pytest.raises(RegistryError, match="'beta': Input should be greater than or equal to 0"):
        SAMPLERS.check_params("vspo", {"beta": -0.5})  # refused when the config is read
    with pytest.raises(RegistryError, match="'a0'"):
        SAMPLERS.check_params("vspo", {"a0": 0.0})


@pytest.mark.slow
def test_two_steps_with_dynamic_on_tiny_llama(tmp_path):
    from covey.train.config import validate_config
    from covey.train.trainer import Trainer

    raw = {
        "model": {"name": "tiny-llama"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 16, "n_test": 4}},
        "sampler": {"name": "vspo", "beta": 1.0},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "strategy": {"name": "dynamic", "max_rounds": 2}},
        "sampling": {"max_new_tokens": 4},
        "algo": {"preset": "grpo", "kl": None},
        "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]},
        "steps": 2,
    }
    trainer = Trainer(validate_config(raw), tmp_path / "run")
    try:
        rows = 0
        for _ in range(2):
            m = trainer.step()
            g = m["filter/gen_batches"]
            # dynamic asks for a refill after every round that left the batch short (also after its last round)
            assert m["sampler/vspo/refills"] in (2 * (g - 1), 2 * g)
            rows += 2 * 2 * g
        assert trainer.sampler.count.sum() == rows  # every scored row of both steps, filtered groups included
    finally:
        trainer.close()


def test_rows_with_offpolicy_tokens_are_not_counted():
    s = VspoSampler(items(2), seed=0)
    ctx = _Ctx(s)
    s.next(1, 4)
    s.before_rollout([], ctx)
    b = scored([100, 100, 100], [0, 0, 1])
    b.offpolicy_mask = torch.tensor([[0.0, 0, 0], [0, 0, 0], [0, 1, 1]])  # the last row: a corrector's rewrite
    ctx.score(b)
    s.observe(b)
    assert s.count.tolist() == [2.0, 0.0] and s.succ.tolist() == [0.0, 0.0]
