"""Configuration and user errors: caught before the model loads, one `error:` line, exit code 2."""

import json
import subprocess
import sys

import pytest
import torch
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
    from covey.algos import ADVANTAGES
    from covey.registry import RegistryError
    from covey.rollouts import Rollouts

    (tmp_path / "wrong_adv.py").write_text(WRONG_TYPE_ADV)
    monkeypatch.syspath_prepend(str(tmp_path))
    import torch

    fn = ADVANTAGES.get("wrong_adv:adv").bind({})
    z = torch.zeros(2, 1)
    batch = Rollouts([torch.tensor([1])] * 2, z.long(), z + 1, z, torch.tensor([0, 0]), torch.tensor([0, 0]),
                     rewards=torch.tensor([[1.0], [0.0]]), reward_names=("r",))  # fmt: skip
    with pytest.raises(RegistryError, match=r"advantage 'wrong_adv:adv' returned a Tensor; it must return AdvantageResult"):
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
    assert not (tmp_path / "r").exists()  # no run folder left behind


def test_debug_shows_the_traceback():
    res = runner.invoke(app, ["--debug", "config", "show", *BASE, "task.name=nope"])
    assert res.exit_code != 0 and isinstance(res.exception, ValueError)


# ------------------------------------------------------------------------------------ unknown models
class _NoNetwork:
    """socket.getaddrinfo / create_connection replacements that record every attempt and fail."""

    def __init__(self):
        self.calls = []

    def getaddrinfo(self, host, *a, **k):
        self.calls.append(("dns", host))
        raise OSError(f"no network in this test ({host})")

    def create_connection(self, address, *a, **k):
        self.calls.append(("connect", address))
        raise OSError(f"no network in this test ({address})")


@pytest.fixture
def no_network(monkeypatch):
    import socket

    net = _NoNetwork()
    monkeypatch.setattr(socket, "getaddrinfo", net.getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", net.create_connection)
    return net


def test_unknown_model_offline_makes_no_network_call(no_network, monkeypatch):
    from covey.models import load

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match=r"unknown model 'some-org/not-a-model': not an alias \(smollm2-135m-instruct, tiny-llama"):
        load("some-org/not-a-model")
    assert no_network.calls == []


def test_unknown_model_without_network_probes_the_hub_once(no_network, monkeypatch):
    from covey.models import load

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    with pytest.raises(FileNotFoundError, match=r"unknown model 'some-org/not-a-model'.*hub is not reachable"):
        load("some-org/not-a-model")
    assert no_network.calls in ([("dns", "huggingface.co")], [("connect", ("huggingface.co", 443))]), no_network.calls


def test_hub_probe_does_not_wait_for_a_hanging_dns(monkeypatch):
    import socket
    import threading

    from covey.models.loading import hub_reachable

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    gate, finished = threading.Event(), threading.Event()

    def hanging_dns(*a, **k):
        gate.wait(30)
        finished.set()
        raise OSError("timed out")

    monkeypatch.setattr(socket, "getaddrinfo", hanging_dns)
    try:
        assert hub_reachable(timeout=0.1) is False
        assert not finished.is_set()  # it gave up on the probe instead of waiting for the resolver
    finally:
        gate.set()


def test_config_show_refuses_an_unknown_model_offline(no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = runner.invoke(app, ["config", "show", *BASE, "model.name=some-org/not-a-model"])
    assert res.exit_code == 2 and "error: unknown model 'some-org/not-a-model'" in res.output, res.output
    assert no_network.calls == []
    res = runner.invoke(app, ["config", "show", *BASE, "model.name=./no/such/folder"])
    assert res.exit_code == 2 and "is not a folder with a saved model" in res.output, res.output


def test_cached_hub_id_loads_from_its_snapshot_without_network(no_network, monkeypatch, tmp_path):
    from huggingface_hub import constants

    from covey.models import load

    model, tok = load("tiny-llama", seed=1)
    snapshot = tmp_path / "models--some-org--tiny" / "snapshots" / "abc123"
    model.save_pretrained(snapshot)
    tok.save_pretrained(snapshot)
    (tmp_path / "models--some-org--tiny" / "refs").mkdir()
    (tmp_path / "models--some-org--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    loaded, _ = load("some-org/tiny")
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight.float())
    assert no_network.calls == []


# ------------------------------------------------------------------------------- errors vs bugs
def test_debug_is_per_invocation_and_covey_debug_env_shows_tracebacks(monkeypatch):
    bad = ["config", "show", *BASE, "task.name=nope"]
    assert isinstance(runner.invoke(app, ["--debug", *bad]).exception, ValueError)
    res = runner.invoke(app, bad)  # the earlier --debug does not stick
    assert res.exit_code == 2 and "error: unknown task 'nope'" in res.output
    monkeypatch.setenv("COVEY_DEBUG", "1")
    assert isinstance(runner.invoke(app, bad).exception, ValueError)
    monkeypatch.setenv("COVEY_DEBUG", "0")
    assert runner.invoke(app, bad).exit_code == 2


def test_a_value_error_from_inside_a_library_is_a_bug_with_a_traceback(monkeypatch):
    import json

    import covey.train.setup as setup

    def broken_check_run(cfg):  # a covey bug: a library raises on input covey built wrongly
        json.loads("{not json")

    monkeypatch.setattr(setup, "check_run", broken_check_run)
    res = runner.invoke(app, ["config", "show", *BASE])
    assert res.exit_code == 1 and isinstance(res.exception, json.JSONDecodeError)
    assert "error:" not in res.output


def test_a_value_error_raised_by_covey_itself_is_a_user_error():
    from covey.cli import _is_user_error
    from covey.tasks import get_task

    with pytest.raises(ValueError) as e:
        get_task("nope")
    assert _is_user_error(e.value)
    assert not _is_user_error(RuntimeError("a bug")) and not _is_user_error(KeyError("x"))


def test_eval_k_that_is_not_a_number_is_named():
    res = runner.invoke(app, ["eval", "--task", "arithmetic", "--model", "tiny-llama", "--n", "4", "--k", "1,a"])
    assert res.exit_code == 2 and "error: --k must be comma-separated integers (e.g. 1,4,8), got '1,a'" in res.output


def test_checking_a_model_name_imports_no_transformers():
    code = ("import sys; from covey.models import check_name; check_name('tiny-llama'); check_name('smollm2-135m-instruct'); "
            "assert 'transformers' not in sys.modules, 'transformers imported'")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.parametrize(
    ("device", "message"),
    [("gpu", "device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
     pytest.param("cuda", "device='cuda' but CUDA is not available", marks=pytest.mark.skipif(torch.cuda.is_available(), reason="has CUDA"))],
)  # fmt: skip
def test_eval_bad_device_is_named_before_the_model_loads(device, message):
    res = runner.invoke(app, ["eval", "--task", "arithmetic", "--model", "no-such-model", "--device", device])
    assert res.exit_code == 2 and message in res.output


def test_eval_runs_on_an_explicit_cpu_device():
    res = runner.invoke(app, ["eval", "--task", "arithmetic", "--model", "tiny-llama", "--limit", "2", "--max-new-tokens", "2",
                              "--device", "cpu", "--dtype", "fp32"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1])["problems"] == 2


COLUMN_REWARDS = '''
def needs_x(prompts, completions, x):
    return [float(v == "1") for v in x]

def maybe_x(prompts, completions, x=None, **kw):
    return [0.0 for _ in completions]
'''


@pytest.mark.parametrize("rows, reward, message", [
    ([{"prompt": "a", "x": "1"}, {"prompt": "b"}, {"prompt": "c", "x": "2"}, {"prompt": "d"}], "needs_x",
     "error: reward 'needs_x' reads column 'x', missing in rows 2, 4 of the train split (4 rows): every row needs it"),
    ([{"prompt": "a"}, {"prompt": "b", "x": "2"}], "maybe_x",  # a default does not help: those rows would get None
     "error: reward 'maybe_x' reads column 'x', missing in row 1 of the train split (2 rows)"),
    ([{"prompt": "a"}, {"prompt": "b"}], "needs_x",
     "error: reward 'needs_x' reads column 'x', which no row of the train split has"),
])  # fmt: skip
def test_a_reward_column_missing_from_rows_is_refused_at_start(tmp_path, monkeypatch, rows, reward, message):
    (tmp_path / "col_rewards.py").write_text(COLUMN_REWARDS)
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["model.name=tiny-llama", "reward_workers=0", "task.name=dataset", f"task.params={{path: {tmp_path / 'd.jsonl'}}}",
            f"rewards=[{{name: 'col_rewards:{reward}'}}]"]  # fmt: skip
    res = runner.invoke(app, ["config", "show", *args])
    assert res.exit_code == 2 and message in res.output, res.output
    for row in rows:  # every row has it: accepted; none has it and the parameter has a default: accepted
        row["x"] = "1"
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert runner.invoke(app, ["config", "show", *args]).exit_code == 0
    if reward == "maybe_x":
        (tmp_path / "d.jsonl").write_text("".join(json.dumps({"prompt": r["prompt"]}) + "\n" for r in rows))
        assert runner.invoke(app, ["config", "show", *args]).exit_code == 0


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefg", "bcdefgh")) + "task: {name: arithmetic, params: {x: *h}}\n"


@pytest.mark.parametrize("text, message", [
    (ALIAS_BOMB, "the config expands to more than 1,000,000 values through YAML aliases"),  # 9**8 = 43M values
    ("a: &a [1, *a]\n", "a YAML alias refers to a value that contains it"),
    ("steps: 3\nseed: 1\nsteps: 4\n", "duplicate key 'steps' (line 1 and line 3): give each key once"),
    ("rollout:\n  group_size: 2\n  group_size: 4\n", "duplicate key 'group_size' (line 2 and line 3)"),
])  # fmt: skip
def test_yaml_that_would_exhaust_memory_or_hide_a_key_is_refused(tmp_path, text, message):
    import time

    path = tmp_path / "c.yaml"
    path.write_text(text)
    start = time.monotonic()
    res = runner.invoke(app, ["config", "show", str(path), *BASE])
    assert res.exit_code == 2 and f"error: {path}: {message}" in res.output, res.output
    assert time.monotonic() - start < 20  # the bomb took 28 s and 1.1 GB before


def test_yaml_aliases_and_merge_keys_within_bounds_still_work(tmp_path):
    from covey.train.config import load_yaml

    assert load_yaml("a: &a {x: 1, y: 2}\nb: {<<: *a, y: 3}\nc: [*a, *a]\n", "t") == {
        "a": {"x": 1, "y": 2}, "b": {"x": 1, "y": 3}, "c": [{"x": 1, "y": 2}, {"x": 1, "y": 2}]}
    path = tmp_path / "c.yaml"
    path.write_text("sampling: &s {max_new_tokens: 8, temperature: 0.5}\neval: {size: 2, max_new_tokens: 8}\n"
                    "rollout: {<<: {group_size: 2}, group_size: 4}\n")
    res = runner.invoke(app, ["config", "show", str(path), *BASE])
    assert res.exit_code == 0 and "group_size: 4" in res.output, res.output


@pytest.mark.parametrize("override, message", [
    ("rollout.group_size=1000000000", "rollout.group_size: Input should be less than or equal to 4096"),
    ("rollout.prompts_per_step=1000000000", "rollout.prompts_per_step: Input should be less than or equal to 65536"),
    ("rollout.prompts_per_step=65536", "rollout.prompts_per_step*rollout.group_size = 524288 rows per step; at most 262144"),
    ("steps=true", "steps: must be an integer, got True"),
    ("steps=2.5", "steps: must be an integer, got 2.5"),
    ("rollout.group_size=4.0", "rollout: group_size: must be an integer, got 4.0"),
    ("optim.micro_batch_size=false", "optim: micro_batch_size: must be an integer, got False"),
    ("seed=99999999999999999999999", "seed: Input should be less than or equal to 4294967295"),
    ("seed=-1", "seed: Input should be greater than or equal to 0"),
])  # fmt: skip
def test_numbers_that_never_start_or_are_not_integers_are_refused(override, message):
    res = _show(override)
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output


@pytest.fixture
def no_model_load(monkeypatch):
    """A model load fails the test: these errors must come before it."""
    import covey.models
    import covey.train.setup

    def loaded(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(covey.train.setup, "load_policy", loaded)
    monkeypatch.setattr(covey.train.setup, "load_run_policy", loaded)
    monkeypatch.setattr(covey.models, "load", loaded)


EVAL = ["eval", "--task", "arithmetic", "--model", "tiny-llama"]
SFT = ["sft", "--model", "tiny-llama", "--task", "arithmetic", "--task-param", "digits=1"]


@pytest.mark.parametrize("args, message", [
    (EVAL + ["--limit", "-1"], "--limit must be >= 0 (0 = all), got -1"),
    (EVAL + ["--n", "0"], "--n must be >= 1, got 0"),
    (EVAL + ["--k", "0"], "every k must be >= 1; got k=0"),
    (EVAL + ["--temperature", "nan"], "--temperature must be a finite number >= 0 (0 = greedy), got nan"),
    (EVAL + ["--temperature", "-1"], "--temperature must be a finite number >= 0"),
    (EVAL + ["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (EVAL + ["--dtype", "fp16"], "--dtype must be one of auto, bf16, bfloat16, fp32, float32, got 'fp16'"),
    (EVAL + ["--seed", str(2**64)], f"--seed must be in 0..{2**32 - 1}, got {2**64}"),
    (["eval", "--task", "arithmetic", "--model", "some-org/not-a-model"], "unknown model 'some-org/not-a-model'"),
    (SFT + ["--out", "OUT", "--steps", "-1"], "--steps must be an integer >= 1, got -1"),
    (SFT + ["--out", "OUT", "--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (SFT + ["--out", "OUT", "--lr", "0"], "--lr must be a finite number > 0, got 0.0"),
    (SFT + ["--out", "OUT", "--batch-size", "0"], "--batch-size must be an integer >= 1, got 0"),
    (SFT + ["--out", "OUT", "--seed", "-3"], f"--seed must be an integer in 0..{2**32 - 1}, got -3"),
    (["sft", "--model", "tiny-llama", "--task", "mbpp", "--out", "OUT"], "task 'mbpp' has no demonstrations"),
    (["sft", "--model", "some-org/not-a-model", "--task", "arithmetic", "--out", "OUT"], "unknown model 'some-org/not-a-model'"),
    (["sft", "--model", "tiny-llada", "--task", "arithmetic", "--out", "OUT", "--loss", "otr"],
     "--loss otr: model 'tiny-llada' is a masked-diffusion model, which covey sft trains with LLaDA's masked-token loss only"),
])  # fmt: skip
def test_eval_and_sft_arguments_are_checked_before_the_model_loads(no_model_load, monkeypatch, tmp_path, args, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = runner.invoke(app, [str(tmp_path / "out") if a == "OUT" else a for a in args])
    assert res.exit_code == 2 and f"error: {message}" in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_an_unknown_chat_role_is_refused_before_the_model_loads(tmp_path):
    from covey.models.chat import apply_chat

    rows = [{"prompt": [{"role": "user", "content": "hi"}], "answer": "1"},
            {"prompt": [{"role": "system", "content": "s"}, {"role": "robot", "content": "beep"}], "answer": "2"}]  # fmt: skip
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _show("task.name=dataset", f"task.params={{path: {tmp_path / 'd.jsonl'}}}")
    assert res.exit_code == 2, res.output
    assert "message 1 of 'prompt': unknown chat role 'robot'; a message's role is one of system, user, assistant, tool" in res.output
    with pytest.raises(ValueError, match="prompt message 0: unknown chat role 'robot'"):
        apply_chat(object(), [{"role": "robot", "content": "x"}])
