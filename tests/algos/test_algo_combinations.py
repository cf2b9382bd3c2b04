"""Contradictory algorithm choices are refused when the config is read (`covey config show`: an
`error:` message naming the keys, exit code 2, no traceback, no model loaded); terms that cannot act
are warned about."""

import logging

import pytest
from typer.testing import CliRunner

from covey.cli import app
from covey.train.config import load_config

runner = CliRunner()
BASE = ["model.name=tiny-llama", "task.params={digits: 1, n_train: 8, n_test: 4}", "reward_workers=0",
        "rollout.group_size=4", "rollout.prompts_per_step=2"]  # fmt: skip


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algo.surrogate={name: r2vpo_provisional}"], "add algo.regularizers: [{name: r2vpo_provisional}]"),
        (["algo.regularizers=[{name: epo}]", "algo.entropy_coef=0.01"], "would add it a second time"),
        (["algo.surrogate={name: reg_grpo_provisional}", "optim.micro_batch_size=2"],
         "algo.surrogate 'reg_grpo_provisional' reads whole groups, but optim.micro_batch_size=2 is below the group size 4"),
        (["algo.regularizers=[{name: llds}, {name: llds}]"], "listed twice"),
        (["algo.regularizers=[{name: llds, coef: -1}]"], "algo.regularizers[0]"),
        (["algo.regularizers=[{name: nope}]"], "unknown regularizer 'nope'"),
    ],
)
def test_contradictions_exit_2_with_one_line(overrides, message):
    result = runner.invoke(app, ["config", "show", *BASE, *overrides])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error:") and message in result.output, result.output
    assert "Traceback" not in result.output


def test_accepted_combinations_and_the_idle_trust_region_warning(caplog):
    ok = load_config(None, [*BASE, "algo.surrogate={name: r2vpo_provisional}", "algo.regularizers=[{name: r2vpo_provisional}]",
                            "optim.mini_batches=2"])  # fmt: skip
    assert [s.name for s in ok.algo.regularizers] == ["r2vpo_provisional"]
    ok = load_config(None, [*BASE, "algo.surrogate={name: reg_grpo_provisional}", "optim.micro_batch_size=4"])
    assert ok.optim.micro_batch_size == 4
    with caplog.at_level(logging.WARNING, logger="covey"):
        load_config(None, [*BASE, "algo.regularizers=[{name: disco_kl}]"])
    assert any("never acts with one update per batch" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="covey"):
        load_config(None, [*BASE, "algo.regularizers=[{name: disco_kl}]", "optim.mini_batches=2"])
    assert not any("never acts" in r.message for r in caplog.records)


def test_a_users_regularizer_list_replaces_the_presets():
    cfg = load_config(None, [*BASE, "algo.regularizers=[{name: epo, coef: 0.002}]"])
    assert cfg.algo.regularizers[0].params == {"coef": 0.002}
    dumped = cfg.model_dump(mode="json")["algo"]["regularizers"]
    assert dumped == [{"name": "epo", "params": {"coef": 0.002}}]
    again = load_config(None, [*BASE, "algo.regularizers=[]"])
    assert again.algo.regularizers == []
