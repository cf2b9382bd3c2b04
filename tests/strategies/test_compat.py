"""Sampler x strategy x advantage constraints (covey.compat): declared by the components, checked when
the config is read; contradictions refused by name, wasteful combinations warned about."""

import logging

import pytest
from typer.testing import CliRunner

from covey.cli import app
from covey.compat import features_of
from covey.samplers import SAMPLERS
from covey.strategies import STRATEGIES
from covey.train.config import ConfigError, load_config

BASE = ["model.name=tiny-llama", "task.params={digits: 1, n_train: 8, n_test: 4}", "reward_workers=0"]


@pytest.mark.parametrize("overrides, words", [
    (["rollout.strategy.name=tppo"], ["algo.advantage 'grpo'", "single_rows", "rollout.strategy 'tppo'", "tppo"]),
    (["rollout.strategy.name=tppo", "algo=dapo"], ["rollout.strategy 'dynamic'", "single_rows", "dynamic(inner=tppo)"]),
    (["sampler.name=spo", "algo.advantage.name=spo", "algo.dynamic_sampling=true"], ["rollout.strategy 'dynamic'", "sampler 'spo'"]),
    (["sampler.name=spo"], ["algo.advantage 'grpo'", "sampler 'spo'", "every advantage would be 0"]),
    (["algo.advantage.name=treepo"], ["algo.advantage 'treepo'", "tree_path", "rollout.strategy treepo", "latr", "branch"]),
    (["rollout.strategy.name=treepo", "algo.advantage.name=branch_grpo"], ["'branch_grpo'", "segment_tokens", "rollout.strategy branch"]),
    (["algo.advantage.name=tppo"], ["algo.advantage 'tppo'", "tppo_advantages", "rollout.strategy tppo"]),
    (["rollout.strategy.name=latr", "algo.advantage.name=spo"], ["algo.advantage 'spo'", "spo_baseline", "sampler spo"]),
])  # fmt: skip
def test_contradictions_are_refused_by_name(overrides, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, BASE + overrides)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize("overrides", [
    ["rollout.strategy.name=tppo", "algo.advantage.name=tppo"],
    ["sampler.name=spo", "algo.advantage.name=spo"],
    ["sampler={name: spo, n: 4}", "algo.advantage.name=grpo"],  # groups of 4: fine
    ["rollout.strategy.name=branch", "algo.advantage.name=branch_grpo"],
    ["rollout.strategy.name=latr", "algo.advantage.name=treepo"],
    ["rollout.strategy.name=treepo", "algo.advantage.name=treepo", "algo.dynamic_sampling=true"],
    ["rollout.strategy.name=tppo", "algo.advantage={name: grpo, singleton: raw}"],  # A = r for singletons
    ["sampler=brorl", "rollout.group_size=4"],  # its micro-batch of 32 holds the whole mini-batch
])  # fmt: skip
def test_consistent_runs_are_accepted(overrides):
    load_config(None, BASE + overrides)


def test_dynamic_with_an_estimator_that_is_not_group_relative_is_warned(caplog):
    with caplog.at_level(logging.WARNING, logger="covey"):
        load_config(None, BASE + ["algo.dynamic_sampling=true", "algo.advantage.name=reinforce_pp_baseline"])
    assert any("rollout.strategy 'dynamic'" in r.message and "wasted" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="covey"):
        load_config(None, BASE + ["algo.dynamic_sampling=true"])  # grpo: group-relative, no warning
    assert not [r for r in caplog.records if "dynamic" in r.message]


def test_declarations():
    assert features_of(STRATEGIES.get("branch"), "provides", {}) == {"tree_path", "segment_tokens"}
    assert features_of(STRATEGIES.get("tppo"), "provides", {}) == {"tppo_advantages", "single_rows"}
    assert features_of(STRATEGIES.get("dynamic"), "requires", {}) == {"!single_rows"}
    assert features_of(STRATEGIES.get("group"), "provides", {}) == set()
    spo = SAMPLERS.get("spo")
    assert features_of(spo, "provides", {}) == {"spo_baseline", "single_rows"}
    assert features_of(spo, "provides", {"n": 3}) == {"spo_baseline"}


def test_config_show_refuses_before_any_model_loads():
    r = CliRunner().invoke(app, ["config", "show", *BASE, "rollout.strategy.name=tppo"])
    assert r.exit_code == 2 and "error:" in r.output and "single_rows" in r.output
    r = CliRunner().invoke(app, ["train", *BASE, "rollout.strategy.name=group", "algo.advantage.name=treepo", "model.name=/no/such/model"])
    assert r.exit_code == 2 and "tree_path" in r.output  # refused by the config check, not by the model load
