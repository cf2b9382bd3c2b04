"""A verl user's first config (issue 37, item 12): examples/from_verl/dapo.yaml, verl's DAPO recipe written key by
key for covey (docs/from-verl.md), loads and is the DAPO recipe; verl's own keys get one line each."""

from pathlib import Path

import pytest

from covey.train.config import ConfigError, load_config

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "from_verl" / "dapo.yaml"


def test_the_verl_dapo_example_loads_with_the_recipes_algorithm():
    cfg = load_config(EXAMPLE)
    a = cfg.algo
    # recipe/dapo: clip_ratio_low 0.2, clip_ratio_high 0.28, clip_ratio_c 10, loss_agg_mode token-mean,
    # no KL (kl_loss_coef 0, kl_coef 0), filter_groups on with max_num_gen_batches 10, overlong buffer factor 1
    assert (a.advantage.name, a.surrogate.name, a.aggregation.name) == ("grpo", "ppo_clip", "token-mean")
    assert a.surrogate.params == {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": 10.0}
    assert a.kl is None and a.entropy_coef == 0.0
    assert a.dynamic_sampling is True and a.max_gen_batches == 10
    assert a.overlong.buffer_len == 4 and a.overlong.penalty_factor == 1.0
    # data.train_batch_size -> prompts_per_step, rollout.n -> group_size, 2 mini-batches per step
    assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.optim.mini_batches) == (8, 4, 2)
    assert (cfg.optim.weight_decay, cfg.optim.grad_clip, cfg.optim.warmup_steps) == (0.1, 1.0, 10)


def test_the_example_agrees_with_covey_dapo_preset_on_the_loss():
    ours, preset = load_config(EXAMPLE).algo, load_config(None, ["algo.preset=dapo"]).algo
    for axis in ("advantage", "surrogate", "aggregation"):
        assert getattr(ours, axis).name == getattr(preset, axis).name
    assert ours.surrogate.params == preset.surrogate.params
    assert ours.dynamic_sampling == preset.dynamic_sampling and ours.max_gen_batches == preset.max_gen_batches


def test_verl_keys_are_refused_one_line_each():
    with pytest.raises(ConfigError) as e:
        load_config(EXAMPLE, ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.clip_ratio_low=0.2"])
    lines = [x for x in str(e.value).splitlines()[1:] if x.strip()]
    assert [x.split(":")[0].strip() for x in lines] == ["algorithm", "actor_rollout_ref"]
    assert all("unknown key" in x for x in lines)
