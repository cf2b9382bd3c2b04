"""Configuration and user errors: caught before the model loads, one `error:` line, exit code 2."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from covey.cli import app

runner = CliRunner()
BASE = ["model.name=tiny-llama", "task.params={digits: 1, n_train: 8, n_test: 4}", "reward_workers=0"]

BAD_ADV = '''
def adv(x, y):  # an advantage takes one input (the batch)
    return x
'''
WRONG_TYPE_ADV = '''
def adv(batch):
    return batch.scalar_rewards()  # a tensor, not an AdvantageResult
'''


def _show(*args):
    return runner.invoke(app, ["config", "show", *BASE, *args])


@pytest.mark.parametrize(
    "override, message",
    [
        ("task.name=nope", "unknown task 'nope'"),
        ("task.params={digits: 99}", "digits must be an int"),
        ("rewards=[{name: nope}]", "unknown reward 'nope'"),
        ("rewards=[{name: format, params: {colour: 1}}]", "colour"),
        ("eval.max_new_tokens=-5", "eval.max_new_tokens"),
        ("optim.betas=[2,3]", "optim.betas"),
        ("task_reward_weight=.nan", "task_reward_weight"),
        ("optim.lr=.inf", "optim.lr"),
        ("algo.aggregation.name=os.path:getsize", "aggregation 'os.path:getsize' has signature"),
        ("sampler=nope", "unknown sampler"),
    ],
)
def test_config_show_validates_what_train_validates(override, message):
    res = _show(override)
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and message in res.output and "Traceback" not in res.output


def test_config_show_accepts_a_good_config_without_a_yaml():
    res = _show("algo=dapo")
    assert res.exit_code == 0, res.output
    assert "preset: dapo" in res.output


def test_wrong_signature_import_path_component_fails_at_config_time(tmp_path, monkeypatch):
    (tmp_path / "bad_adv.py").write_text(BAD_ADV)
    monkeypatch.syspath_prepend(str(tmp_path))
    res = _show("algo.advantage.name=bad_adv:adv")
    assert res.exit_code == 2 and "takes 1 positional input" in res.output, res.output


def test_component_returning_the_wrong_type_is_named(tmp_path, monkeypatch):
    from covey.algos import ADVANTAGES, ComponentError
    from covey.rollouts import Rollouts

    (tmp_path / "wrong_adv.py").write_text(WRONG_TYPE_ADV)
    monkeypatch.syspath_prepend(str(tmp_path))
    import torch

    fn = ADVANTAGES.get("wrong_adv:adv").bind({})
    z = torch.zeros(2, 1)
    batch = Rollouts([torch.tensor([1])] * 2, z.long(), z + 1, z, torch.tensor([0, 0]), torch.tensor([0, 0]),
                     rewards=torch.tensor([[1.0], [0.0]]), reward_names=("r",))  # fmt: skip
    with pytest.raises(ComponentError, match=r"advantage 'wrong_adv:adv' returned a Tensor; it must return AdvantageResult"):
        fn(batch)


def test_group_size_one_warns_for_group_relative_estimators(caplog):
    import logging

    from covey.train.config import load_config
    from covey.train.setup import check_run

    with caplog.at_level(logging.WARNING):
        check_run(load_config(None, BASE + ["rollout.group_size=1"]))
    assert "every advantage is zero" in caplog.text and "'grpo'" in caplog.text


def test_train_without_a_yaml_reads_overrides_and_unknown_models_fail_fast(tmp_path):
    cmd = [sys.executable, "-m", "covey.cli", "train", "model.name=some-org/not-a-model", "steps=1",
           "--run-dir", str(tmp_path / "r")]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2, out.stderr[-2000:]
    assert "error: unknown model 'some-org/not-a-model'" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 3


def test_debug_shows_the_traceback():
    res = runner.invoke(app, ["--debug", "config", "show", *BASE, "task.name=nope"])
    assert res.exit_code != 0 and isinstance(res.exception, ValueError)
