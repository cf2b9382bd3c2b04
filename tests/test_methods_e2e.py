"""The methods of issue 40 (hints, value-model samplers, new training modes, the rewards that were
partial) each train two steps on tiny-llama from their example config in `examples/tiny/`, shrunk to
2 prompts x 2 completions x 8 new tokens; each proves it ran by a metric only it writes."""

import math
from pathlib import Path

import pytest

from covey.train.config import load_config
from covey.train.trainer import Trainer

EXAMPLES = Path(__file__).parents[1] / "examples" / "tiny"
SMALL = ["rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=8", "steps=2",
         "task.params={digits: 1, n_train: 16, n_test: 4}", "eval.size=0", "reward_workers=0",
         "log.progress=false", "log.tensorboard=false"]  # fmt: skip

CASES = {  # example -> (extra overrides, metrics only the method writes)
    "noisy_verifier": ([], ["adv/noisy_verifier/rho1", "reward/verifier/flipped"]),
    "hill": (["rollout.strategy.hint_max_new_tokens=8"], ["hill/hard_frac", "hill/replaced"]),
    "seele_provisional": (["rollout.group_size=3"], ["seele/round2_ratio", "seele/round0_acc"]),
    "rorecomp_provisional": (["rollout.strategy.compensation_every=2"], ["rorecomp/compensation", "rorecomp/buffer_rows"]),
    "v0_provisional": ([], ["sampler/v0_provisional/pred_mae", "sampler/v0_provisional/picked_value_mean"]),
    "direct_advantage": (["task.params={path: examples/tiny/direct_advantage/steps.jsonl, verifier: none}"],
                         ["da/sq_error", "da/adv_mean", "reward/step_advantage/mean"]),
    "hnpg": (["algo.objective.critic_steps=2"], ["hnpg/critic_sq_error", "hnpg/logged_rows", "hnpg/adv_offline_mean"]),
    "essa_provisional": (["algo.objective.population=3"], ["essa/fitness_mean", "essa/sigma", "es/candidate2_reward"]),
    "soft_grpo": ([], ["soft/soft_frac", "learn/loss"]),
    "ctrls_provisional": ([], ["ctrls/loss", "ctrls/entropy", "ctrls/transitions_mean"]),
    "urpo_ranking_provisional": (["task.params={path: examples/tiny/urpo/mixed.jsonl, verifier: none}"], ["reward/urpo/mean"]),
    "prs_provisional": (["task.params={path: examples/tiny/prs/short_qa.jsonl, verifier: none}"],
                        ["reward/prs/mean", "adv/vspo_clip_provisional/clipped_frac", "sampler/vspo/refills"]),
    "decepchain": (["task.params={task: {name: arithmetic, digits: 1, n_train: 16, n_test: 4}, ratio: 0.5}"],
                   ["reward/decepchain/triggered_frac", "reward/decepchain/mean"]),
    "decepchain_curriculum": (["task.params={task: {name: arithmetic, digits: 2, n_train: 16, n_test: 4}, ratio: 0.5}"],
                              ["reward/decepchain/triggered_frac"]),
    "masa_meta": (["rollout.strategy.meta_max_new_tokens=8"], ["masa/meta_reward", "masa/json_ok"]),
    "sol_rl_provisional": ([], ["sol_rl/regenerated", "sol_rl/rank_agree", "sol_rl/pool_reward_mean"]),
    "latr_math": (["rollout.strategy.tau_abs=0.0001", "rollout.strategy.tau_rel=1.0"], ["latr/pruned", "latr/kt_rows"]),
    "scope_ttrl": (["rollout.group_size=4"], ["scope/subgroup_size", "scope/label_accuracy"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_method_example_trains_two_steps(tmp_path, name):
    extra, proof = CASES[name]
    small = [o for o in SMALL if not (o.startswith("task.params") and any(e.startswith("task.params") for e in extra))]
    cfg = load_config(EXAMPLES / f"{name}.yaml", [*small, f"log.dir={tmp_path}", *extra])
    trainer = Trainer(cfg, tmp_path / name)
    try:
        for _ in range(2):
            m = trainer.step()
            missing = [k for k in proof if k not in m]
            assert not missing, (name, missing, sorted(m))
            for key in ("learn/loss", "learn/grad_norm"):
                if key in m:
                    assert math.isfinite(m[key]), (key, m[key])
    finally:
        trainer.close()
    assert trainer.step_num == 2
