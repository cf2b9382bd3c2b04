"""BroRL (arXiv 2510.01180): many rollouts per prompt, memory bounded by micro-batching; `sampler: brorl` fills that recipe."""

from pathlib import Path

from covey.train.config import load_config
from covey.train.trainer import Trainer

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_brorl_configs_ask_for_large_groups_and_micro_batches():
    for path, g in ((EXAMPLES / "tiny" / "brorl.yaml", 128), (EXAMPLES / "smollm2" / "brorl.yaml", 256)):
        cfg = load_config(path)
        assert cfg.rollout.group_size == g and cfg.rollout.prompts_per_step == 2
        assert cfg.optim.micro_batch_size < cfg.rollout.group_size and cfg.strategy_spec().name == "dynamic"


def test_one_large_group_step_never_runs_more_than_a_micro_batch(tmp_path):
    cfg = load_config(EXAMPLES / "tiny" / "brorl.yaml",
                      ["steps=1", "reward_workers=0", "log.progress=false", "log.report_to=[jsonl]",
                       "sampling.max_new_tokens=4", "algo.dynamic_sampling=false", "optim.skip_zero_advantage=false"])  # fmt: skip (every row trains)
    trainer = Trainer(cfg, tmp_path / "run")
    seen = []
    inner = trainer.learner.logprobs

    def spy(model, batch, **kw):
        seen.append(len(batch))
        return inner(model, batch, **kw)

    trainer.learner.logprobs = spy
    try:
        m = trainer.step()
    finally:
        trainer.close()
    assert m["prompts/rollouts_per_prompt_max"] == 128.0 and m["prompts/unique"] == 2.0
    assert max(seen) <= 32 and sum(seen) >= 256  # 256 rows, at most 32 per forward/backward


def test_sampler_name_brorl_fills_the_recipe_where_the_config_is_silent():
    cfg = load_config(None, ["sampler=brorl"])
    assert cfg.rollout.group_size == 128 and cfg.algo.dynamic_sampling and cfg.optim.micro_batch_size == 32
    assert cfg.sampler_spec().name == "uniform" and cfg.strategy_spec().name == "dynamic"
    mine = load_config(None, ["sampler=brorl", "rollout.group_size=64", "algo=dr_grpo", "optim.micro_batch_size=16"])
    assert mine.rollout.group_size == 64 and mine.optim.micro_batch_size == 16  # the user's values win
    assert mine.algo.preset == "dr_grpo" and mine.algo.dynamic_sampling  # `algo: dr_grpo` still gets dynamic sampling
    assert not load_config(None, ["sampler=brorl", "algo.dynamic_sampling=false"]).algo.dynamic_sampling


def test_brorl_preset_refuses_parameters_by_name():
    import pytest

    from covey.train.config import ConfigError

    with pytest.raises(ConfigError, match="sampler brorl is a preset and takes no parameters"):
        load_config(None, ["sampler={name: brorl, n: 512}"])


def test_sampler_name_dars_b_is_dars_with_breadth():
    cfg = load_config(None, ["sampler=dars_b"])
    assert cfg.strategy_spec().name == "dars" and cfg.rollout.prompts_per_step == 64
    assert cfg.optim.mini_batches == 1 and cfg.optim.epochs == 2
    plain = load_config(None, ["sampler=dars"])
    assert plain.rollout.prompts_per_step == 8 and plain.optim.epochs == 1
    assert load_config(None, ["sampler={name: dars_b, schedule: hw}", "optim.epochs=3"]).optim.epochs == 3
