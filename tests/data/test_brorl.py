"""BroRL (arXiv 2510.01180) is a config, not a preset: many rollouts per prompt, memory bounded by micro-batching."""

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
                       "sampling.max_new_tokens=4", "algo.dynamic_sampling=false"])  # fmt: skip (every row trains)
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
