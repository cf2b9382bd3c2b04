"""The methods of issue 40 (hints, value-model samplers, new training modes, the rewards that were
partial) each train two steps on tiny-llama with `covey train` from their example config in `examples/tiny/`,
shrunk to 2 prompts x 2 completions x 8 new tokens; each proves it ran by a metric only it writes. The
contradictory combinations are refused by `covey train` with an `error:` and exit 2 before a run folder exists."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from covey.cli import app

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
    run = tmp_path / name
    res = CliRunner().invoke(app, ["train", str(EXAMPLES / f"{name}.yaml"), *small, *extra, "--run-dir", str(run)])
    assert res.exit_code == 0, (res.output, res.exception)
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if m.get("step", 0) >= 1]
    assert [m["step"] for m in steps] == [1, 2], steps
    for m in steps:
        missing = [k for k in proof if k not in m]
        assert not missing, (name, missing, sorted(m))
        for key in ("learn/loss", "learn/grad_norm"):
            if key in m:
                assert math.isfinite(m[key]), (key, m[key])
    assert (run / "final").is_dir()


REFUSED = {  # the contradictory combinations: example, overrides, the error's words
    "soft thinking, an engine without soft tokens": (
        "soft_grpo", ["engine={name: masked_diffusion}"], "does not provide SoftThinkingEngine (no generate_soft)"),
    "ESSA on a model without LoRA": (
        "essa_provisional", ["model.lora=null"], "searches the singular values of LoRA adapters: set model.lora"),
    "direct advantage without offline data": (
        "direct_advantage", ["task.name=arithmetic", "task.params={}", "rollout.strategy={name: group}"],
        "trains on offline step data: set rollout.strategy: offline_steps"),
    "direct advantage without a critic's advantages": (
        "direct_advantage", ["task.params={path: examples/tiny/hnpg/offline.jsonl, verifier: none}"],
        "needs a critic's advantages, and 16 of 16 rows have no 'advantages' list"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_contradictory_combinations_are_refused_before_the_model_loads(tmp_path, case):
    name, overrides, message = REFUSED[case]
    res = CliRunner().invoke(app, ["train", str(EXAMPLES / f"{name}.yaml"), *overrides, "--run-dir", str(tmp_path / "run")])
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and message in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "run").exists()


def test_covey_list_names_the_objectives():
    import subprocess
    import sys

    # a fresh process: nothing has imported covey.objectives before `covey list` does
    res = subprocess.run([sys.executable, "-m", "covey.cli", "list", "objective"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for name in ("soft_grpo", "essa_provisional", "ctrls_provisional", "direct_advantage_provisional", "hnpg"):
        assert name in out, name
    assert "objective (algo.objective)" in out and "arithmetic" not in out
