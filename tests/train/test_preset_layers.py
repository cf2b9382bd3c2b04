"""One rule for `algo=<preset>` and `algo.preset=<preset>` (issues 36 item 14, 37 item 1): a preset fills the
keys its source does not set, a later source wins (the command line over the file), an explicit key wins
within a source; what a later preset replaced is logged once."""

import logging
from pathlib import Path

import pytest

from covey.algos.presets import PRESET_KEYS, layer_algo
from covey.train.config import load_config

MAZE = Path(__file__).parents[2] / "examples/agents/maze_gigpo.yaml"  # algo: {preset: grpo, advantage: {name: gigpo, gamma: 0.95, ...}, kl: null}


def _load(caplog, path, *overrides):
    with caplog.at_level(logging.WARNING, logger="covey"):
        cfg = load_config(path, list(overrides))
    notes = [r.message for r in caplog.records if r.message.startswith("algo: preset")]
    caplog.clear()
    return cfg, notes


@pytest.mark.parametrize("spelling", ["algo.preset=loop", "algo=loop"])
def test_a_preset_on_the_command_line_beats_the_file_s_explicit_keys(caplog, spelling):
    cfg, notes = _load(caplog, MAZE, spelling)
    a = cfg.algo
    assert a.preset == "loop" and a.advantage.name == "rloo" and a.abs_adv_threshold == 0.01 and a.kl is None
    assert len(notes) == 1 and "the file maze_gigpo.yaml's advantage: {name: gigpo" in notes[0]
    assert "replaces preset grpo" in notes[0] and "sets advantage, surrogate, aggregation" in notes[0]


def test_both_spellings_resolve_to_the_same_config(caplog):
    a, _ = _load(caplog, MAZE, "algo.preset=prorl", "algo.surrogate.eps_high=0.3")
    b, _ = _load(caplog, MAZE, "algo=prorl", "algo.surrogate.eps_high=0.3")
    assert a.algo == b.algo and a.algo.surrogate.params["eps_high"] == 0.3 and a.algo.dynamic_sampling
    assert a.algo.kl.coef == 1e-4  # prorl's KL replaces the file's kl: null


def test_an_explicit_key_wins_over_its_own_source_s_preset(caplog):
    cfg, notes = _load(caplog, MAZE, "algo=loop", "algo.kl.coef=0.01")
    assert cfg.algo.advantage.name == "rloo" and cfg.algo.kl.coef == 0.01 and cfg.algo.kl.mode == "loss"
    assert "the command line overrides its kl" in notes[0]


@pytest.mark.parametrize("spelling", ["algo.advantage.name=hgpo", "algo.advantage=hgpo"])
def test_a_new_component_name_drops_the_file_s_parameters_for_it(caplog, spelling):
    cfg, notes = _load(caplog, MAZE, spelling)
    assert cfg.algo.advantage.name == "hgpo" and "gamma" not in cfg.algo.advantage.params
    assert cfg.algo.preset == "grpo" and cfg.algo.kl is None and notes == []  # no preset named: nothing replaced


def test_keys_no_preset_decides_survive_a_later_preset(tmp_path, caplog):
    # the issue-37 YAML: KL 0.001, token mean, dynamic sampling, plus an entropy regulariser and a correction
    p = tmp_path / "c.yaml"
    p.write_text("algo: {kl: {name: k3, coef: 0.001}, aggregation: token-mean, dynamic_sampling: true,\n"
                 "       regularizers: [{name: epo, coef: 0.01}], correction: {name: tis}}\n")  # fmt: skip
    cfg, notes = _load(caplog, p, "algo=grpo")
    a = cfg.algo
    assert [s.name for s in a.regularizers] == ["epo"] and a.correction.name == "tis"  # kept (algo= used to drop them)
    assert a.kl.coef == 0.04 and a.aggregation.name == "seq-mean-token-mean" and not a.dynamic_sampling  # grpo's
    assert len(notes) == 1 and "kl: {name: k3, coef: 0.001}" in notes[0] and "dynamic_sampling: True" in notes[0]
    kept, _ = _load(caplog, p, "algo=grpo", "algo.kl.coef=0.001", "algo.aggregation=token-mean", "algo.dynamic_sampling=true")
    assert kept.algo.kl.coef == 0.001 and kept.algo.aggregation.name == "token-mean" and kept.algo.dynamic_sampling


def test_a_later_source_without_a_preset_merges_key_by_key(caplog):
    cfg, notes = _load(caplog, MAZE, "algo.advantage.gamma=0.9")
    assert cfg.algo.advantage.name == "gigpo" and cfg.algo.advantage.params["gamma"] == 0.9
    assert cfg.algo.advantage.params["step_advantage_w"] == 1.0 and notes == []


def test_layer_algo_by_hand():
    raw, notes = layer_algo({"preset": "dapo", "kl": None, "entropy_coef": 0.01}, "grpo", ("a", "b"))
    assert raw == {"entropy_coef": 0.01, "preset": "grpo"} and len(notes) == 1
    assert "it replaces preset dapo (a)" in notes[0] and "a's kl: null no longer apply" in notes[0]
    raw, notes = layer_algo({"preset": "grpo"}, {"preset": "grpo"})  # nothing replaced: no note
    assert raw == {"preset": "grpo"} and notes == []
    assert {"advantage", "kl", "dynamic_sampling", "overlong"} <= set(PRESET_KEYS)
    assert not {"regularizers", "correction", "entropy_coef", "logprob_source"} & set(PRESET_KEYS)
