"""The logging users expect: metric sinks, sample completions, plain lines off a terminal."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
import yaml

from covey.train.config import load_config
from covey.train.setup import check_run

CFG = {"model": {"name": "tiny-llama"}, "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 16, "n_test": 4}},
       "rollout": {"prompts_per_step": 2, "group_size": 2}, "sampling": {"max_new_tokens": 4}, "reward_workers": 0,
       "algo": {"preset": "grpo", "kl": None}, "steps": 2,
       "log": {"report_to": ["jsonl"], "completions_every": 1, "completions_rows": 3}}  # fmt: skip


def test_samples_plain_lines_and_sinks(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(CFG))
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "covey.cli", "train", str(path), "--run-dir", str(run)],
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[0] == f"run folder: {run}"  # first, before the model loads
    assert "compute: cpu, learner bf16 (model.dtype bf16), engine bf16 (engine.dtype unset: follows the learner)" in out.stdout
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("step ")]
    assert [ln.split(" | ")[0] for ln in lines] == ["step 1/2", "step 2/2"]  # stdout is a pipe: one plain line per step
    assert all(" | elapsed " in ln and " | ETA " in ln for ln in lines) and lines[-1].endswith("ETA 0:00")
    assert "samples at step 1" in out.stdout
    samples = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [1, 1, 1, 2, 2, 2]
    assert {"prompt", "completion", "rewards", "advantage", "group"} <= set(samples[0])
    assert "accuracy" in samples[0]["rewards"]
    assert not (run / "tb").exists()  # tensorboard not in report_to


def test_tensorboard_shorthand_and_wandb_checks():
    assert load_config(None, ["log.tensorboard=false"]).log.report_to == ["jsonl"]
    cfg = load_config(None, ["model.name=tiny-llama", "log.report_to=[jsonl,wandb]"])
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ValueError, match="wandb package is not installed"):
            check_run(cfg)
    else:
        check_run(cfg)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is optional and not installed")
def test_wandb_offline_needs_no_network(tmp_path):
    from covey.train.metrics import MetricsLogger

    log = MetricsLogger(tmp_path, report_to=["jsonl", "wandb"], wandb_mode="offline")
    log.log(1, {"x": 1.0})
    log.close()
    assert (tmp_path / "wandb").is_dir()


def test_step_line_elapsed_and_eta_from_this_process_steps():
    from covey.train.run import step_line

    m = {"reward/mean": 0.5, "time/step": 10.0}
    # 3 of 10 steps in 30 s: 10 s a step, 7 left -> ETA 70 s
    assert step_line(3, 10, m, 30.0, 3) == "step 3/10 | reward 0.500 | 10.0s/step | elapsed 0:30 | ETA 1:10"
    # resumed at step 6: 2 steps here in 20 s, 2 left -> 20 s (not 20/8*2 = 5 s)
    assert step_line(8, 10, m, 20.0, 2).endswith("elapsed 0:20 | ETA 0:20")
    assert step_line(5, 10, m, 0.0, 0).endswith("ETA ?")
    assert step_line(1, 3000, m, 4.0, 1).endswith("ETA 3:19:56")  # 2999 * 4 s


def test_samples_go_to_tensorboard_as_a_text_table(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from covey.train.metrics import MetricsLogger

    log = MetricsLogger(tmp_path, report_to=["jsonl", "tensorboard"])
    rows = [{"group": 0, "prompt": "2+2?", "completion": "4 | yes", "rewards": {"accuracy": 1.0, "format": 0.0}, "advantage": 0.5},
            {"group": 0, "prompt": [{"role": "user", "content": "3+3?"}], "completion": "6\nok", "rewards": {"accuracy": 0.0, "format": 1.0},
             "advantage": -0.5}]  # fmt: skip
    log.log(3, {"x": 1.0})
    log.log_samples(3, rows)
    log.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0})
    acc.Reload()
    (event,) = acc.Tensors("samples/text_summary")
    assert event.step == 3
    text = event.tensor_proto.string_val[0].decode()
    assert text.splitlines() == [
        "| group | prompt | completion | advantage | accuracy | format |",
        "|---|---|---|---|---|---|",
        "| 0 | 2+2? | 4 \\| yes | 0.5 | 1 | 0 |",
        '| 0 | [{"role": "user", "content": "3+3?"}] | 6<br>ok | -0.5 | 0 | 1 |',
    ]
    assert len((tmp_path / "samples.jsonl").read_text().splitlines()) == 2


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is optional and not installed")
def test_samples_go_to_wandb_as_a_table(tmp_path):
    from covey.train.metrics import MetricsLogger

    log = MetricsLogger(tmp_path, report_to=["jsonl", "wandb"], wandb_mode="offline")
    log.log_samples(2, [{"group": 1, "prompt": "p", "completion": "c", "rewards": {"accuracy": 1.0}, "advantage": 0.0}])
    log.close()
    (table,) = (tmp_path / "wandb").glob("offline-run-*/files/media/table/samples_*.table.json")
    table = json.loads(table.read_text())
    assert table["columns"] == ["step", "group", "prompt", "completion", "advantage", "accuracy"]
    assert table["data"] == [[2, 1, "p", "c", 0.0, 1.0]]


def _trainer(tmp_path, overrides):
    from covey.train.trainer import Trainer

    cfg = load_config(None, ["model.name=tiny-llama", "reward_workers=0", "rollout.prompts_per_step=2", "rollout.group_size=2",
                             "log.report_to=[jsonl]", *overrides])  # fmt: skip
    return cfg, Trainer(cfg, tmp_path / "run")


@pytest.mark.parametrize("overrides, engine, why", [
    (["model.dtype=fp32"], torch.float32, "engine fp32 (engine.dtype unset: follows the learner)"),
    (["model.dtype=bf16"], torch.bfloat16, "engine bf16 (engine.dtype unset: follows the learner)"),
    (["model.dtype=fp32", "engine.dtype=auto"], torch.float32, "engine fp32 (engine.dtype auto: follows the learner)"),
    (["model.dtype=fp32", "engine.dtype=bf16"], torch.bfloat16, "engine bf16 (engine.dtype bf16)"),
])  # fmt: skip
def test_engine_dtype_follows_model_dtype_unless_set(tmp_path, overrides, engine, why):
    from covey.train.run import start_lines

    cfg, trainer = _trainer(tmp_path, ["task.params={digits: 1, n_train: 4, n_test: 2}", *overrides])
    try:
        assert trainer.engine.dtype == engine
        lines = start_lines(cfg, trainer, tmp_path / "run")
    finally:
        trainer.close()
    learner = cfg.model.dtype
    assert lines[0] == f"compute: cpu, learner {learner} (model.dtype {learner}), {why}"
    assert lines[1:] == ["reward accuracy (weight 1): the verifier of task 'arithmetic'"]


def test_answer_column_reward_is_announced_and_can_be_switched_off(tmp_path):
    from covey.train.run import start_lines

    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+1=", "answer": "3"}\n')
    cfg, trainer = _trainer(tmp_path, ["task.name=dataset", f"task.params.path={data}", "rewards=[{name: length, params: {target: 4}}]"])
    try:
        lines = start_lines(cfg, trainer, tmp_path / "run")
    finally:
        trainer.close()
    assert lines[1:] == ["reward accuracy (weight 1): added because the data has an 'answer' column; "
                         "task.params.verifier=none turns it off",
                         "reward length (weight 1): configured in rewards"]  # fmt: skip
    cfg, trainer = _trainer(tmp_path, ["task.name=dataset", f"task.params={{path: {data}, verifier: none}}",
                                       "rewards=[{name: length, params: {target: 4}}]"])  # fmt: skip
    try:
        assert trainer.rewards.names == ("length",)
        assert start_lines(cfg, trainer, tmp_path / "run")[1:] == ["reward length (weight 1): configured in rewards"]
    finally:
        trainer.close()


def test_plot_panels_one_unit_each_per_reward_columns_and_no_twin_lines(tmp_path):
    from covey.train.metrics import MetricsLogger
    from covey.train.plots import chart_panels, plot_run

    rows = [
        {"step": 1, "reward/mean": 0.25, "reward/total/mean": 0.25, "reward/accuracy/mean": 0.25, "reward/format/mean": 0.5,
         "length/mean": 12.0, "length/max": 30, "length/truncated_frac": 0.125, "eval/accuracy": 0.1},
        {"step": 2, "reward/mean": 0.5, "reward/total/mean": 0.5, "reward/accuracy/mean": 0.5, "reward/format/mean": 0.75,
         "length/mean": 14.0, "length/max": 32, "length/truncated_frac": 0.25},
    ]  # fmt: skip
    charts = chart_panels(rows)
    assert set(charts) == {"reward.png", "length.png"}  # nothing to draw in the others
    title, panels = charts["reward.png"]
    training, held_out = panels
    # reward/mean equals reward/accuracy/mean at every step: one line with both names; total/mean not drawn
    assert [label for label, _, _ in training[1]] == ["reward/mean = reward/accuracy/mean", "reward/format/mean"]
    assert training[1][1] == ("reward/format/mean", [1, 2], [0.5, 0.75])
    assert held_out[1] == [("eval/accuracy", [1], [0.1])]
    tokens, fraction = charts["length.png"][1]
    assert [s[0] for s in tokens[1]] == ["length/mean", "length/max"] and [s[0] for s in fraction[1]] == ["length/truncated_frac"]
    # a series that differs at one step stays its own line
    rows[1]["reward/accuracy/mean"] = 0.4
    assert [s[0] for s in chart_panels(rows)["reward.png"][1][0][1]] == ["reward/mean", "reward/accuracy/mean", "reward/format/mean"]

    log = MetricsLogger(tmp_path, report_to=["jsonl"])
    for r in rows:
        log.log(r["step"], {k: v for k, v in r.items() if k != "step"})
    log.close()
    import matplotlib.image

    files = plot_run(tmp_path)
    assert [p.name for p in files] == ["reward.png", "length.png"]
    height, width = matplotlib.image.imread(files[0]).shape[:2]
    assert (width, height) == (700, 580)  # two panels: 7 x (2 * 2.6 + 0.6) inches at 100 dpi
