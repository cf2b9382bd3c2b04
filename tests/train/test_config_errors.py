"""Values that used to fail late (after the model loaded, or never) are refused when the config is read,
and `check_run` (what `covey config show` and the trainer run before loading a model) warns about
group-relative estimators with groups of one."""

import logging

import pytest

from covey.train.config import ConfigError, load_config
from covey.train.setup import check_run

BASE = ["model.name=tiny-llama", "task.params={digits: 1, n_train: 8, n_test: 4}", "reward_workers=0"]


@pytest.mark.parametrize(
    "override, key",
    [
        ("eval.max_new_tokens=-5", "eval.max_new_tokens"),
        ("optim.betas=[2,3]", "optim.betas.0"),
        ("optim.betas=[0.9,1.0]", "optim.betas.1"),
        ("task_reward_weight=.nan", "task_reward_weight"),
        ("optim.lr=.nan", "optim.lr"),
        ("sampling.temperature=.inf", "sampling.temperature"),
        ("algo.entropy_coef=.inf", "algo.entropy_coef"),
        ("algo.kl.coef=.inf", "algo.kl.coef"),
        ("algo.surrogate.eps_high=.inf", "eps_high"),
        ("rollout.strategy={name: dynamic, max_rounds: .nan}", "rollout.strategy.params.max_rounds"),
        ("engine={name: torch, compact_fraction: .inf}", "engine.params.compact_fraction"),
        ("rewards=[{name: format, weight: .nan}]", "rewards.0.weight"),
        ("model.name=''", "model.name"),
        ("sampling.stop_strings=['</answer>', '']", "sampling.stop_strings"),
        ("eval.every=5", "eval.every=5 evaluates nothing because eval.size is 0"),
    ],
)
def test_late_failures_are_config_errors_naming_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        load_config(None, BASE + [override])
    assert key in str(e.value), str(e.value)


def test_non_finite_message_says_finite():
    with pytest.raises(ConfigError, match=r"algo.kl.coef: must be a finite number, got inf"):
        load_config(None, BASE + ["algo.kl.coef=.inf"])


def test_finite_values_and_defaults_still_load():
    cfg = load_config(None, BASE + ["algo=dapo", "algo.kl.coef=0.01", "task_reward_weight=0.5", "optim.betas=[0.0,0.99]"])
    assert cfg.algo.kl.coef == 0.01 and cfg.optim.betas == (0.0, 0.99)
    assert cfg.sampling.stop_strings == []


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "ngrpo", "gtpo", "a_grae"])
def test_group_size_one_warns_naming_the_group_relative_estimator(estimator, caplog):
    cfg = load_config(None, BASE + ["rollout.group_size=1", f"algo.advantage.name={estimator}"])
    with caplog.at_level(logging.WARNING, logger="covey"):
        check_run(cfg)
    assert "every advantage is zero" in caplog.text and repr(estimator) in caplog.text


@pytest.mark.parametrize(
    "overrides",
    [
        ["rollout.group_size=1", "algo.advantage.name=reinforce_pp_baseline"],  # a batch baseline, not a group one
        ["rollout.group_size=1", "algo.advantage.singleton=raw"],  # verl's raw rewards for groups of one
        ["rollout.group_size=2"],
    ],
)
def test_no_warning_when_advantages_can_move(overrides, caplog):
    with caplog.at_level(logging.WARNING, logger="covey"):
        check_run(load_config(None, BASE + overrides))
    assert "every advantage is zero" not in caplog.text


def test_group_size_one_warning_follows_the_estimators_own_singleton_default(tmp_path, monkeypatch, caplog):
    (tmp_path / "raw_adv.py").write_text(
        "from covey.algos.registry import AdvantageResult\n"
        "def adv(batch, *, singleton: str = 'raw'):\n"
        "    r = batch.scalar_rewards()\n"
        "    return AdvantageResult(r - r.mean(), {})\n"
        "adv.group_relative = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="covey"):
        check_run(load_config(None, BASE + ["rollout.group_size=1", "algo.advantage.name=raw_adv:adv"]))
    assert "every advantage is zero" not in caplog.text  # its default already keeps raw rewards
    with caplog.at_level(logging.WARNING, logger="covey"):
        check_run(load_config(None, BASE + ["rollout.group_size=1", "algo.advantage={name: 'raw_adv:adv', singleton: zero}"]))
    assert "'raw_adv:adv': every advantage is zero" in caplog.text


@pytest.mark.parametrize("algo, rewards, problem", [
    ("{name: trpa}", "[]", "level_column='level' is not a reward column (columns are ['accuracy'])"),
    ("{name: trpa, level_column: lvl}", "[{name: format}]", "level_column='lvl' is not a reward column (columns are ['accuracy', 'format'])"),
    ("{name: dagrpo_provisional}", "[]", "'dagrpo_provisional' needs score_column"),
])  # fmt: skip
def test_reward_columns_a_method_reads_are_checked_when_the_config_is_read(algo, rewards, problem):
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        load_config(None, [*BASE, f"algo.advantage={algo}", f"rewards={rewards}"])
    ok = load_config(None, [*BASE, "algo.advantage={name: trpa, level_column: format}", "rewards=[{name: format}]"])
    assert ok.algo.advantage.params["level_column"] == "format"


def test_column_error_through_the_cli_is_exit_2():
    from typer.testing import CliRunner

    from covey.cli import app

    res = CliRunner().invoke(app, ["config", "show", *BASE, "algo.advantage={name: trpa}"])
    assert res.exit_code == 2 and "error:" in res.output and "level_column='level' is not a reward column" in res.output
