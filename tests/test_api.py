"""The Python API (covey.GRPOTrainer): objects in, the same training loop out."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from covey import GRPOTrainer
from covey.models import load as load_model

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

SMALL = {
    "steps": 2,
    "rollout": {"prompts_per_step": 2, "group_size": 2},
    "sampling": {"max_new_tokens": 4},
    "reward_workers": 0,
    "log": {"progress": False, "tensorboard": False},
    "algo": {"preset": "grpo", "kl": None},
}


def _rows(chat: bool):
    rows = []
    for a in range(4):
        q = f"What is {a} + 1?"
        rows.append({"prompt": [{"role": "user", "content": q}] if chat else q, "answer": str(a + 1), "hint": a})
    return rows


def test_runnable_example_script_trains_once_without_a_main_guard(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(EXAMPLES / "python_api.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if "reward/concise/mean" in ln]
    assert len(lines) == 1, out.stdout  # the script ran once: workers did not re-execute it
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "metrics.jsonl").is_file()


def test_chat_dataset_trl_style_reward_and_model_object(tmp_path):
    from datasets import Dataset

    seen = {}

    def trl_reward(completions, hint, completion_ids, **kwargs):  # a closure, TRL's conversational format
        seen["first"] = completions[0]
        assert len(completion_ids) == len(completions) and all(isinstance(i, int) for i in completion_ids[0])
        return [float(len(c[0]["content"]) > h) for c, h in zip(completions, hint)]

    model, tok = load_model("tiny-llama")
    trainer = GRPOTrainer(model=model, tokenizer=tok, reward_funcs=trl_reward, train_dataset=Dataset.from_list(_rows(True)),
                          config=SMALL, run_dir=tmp_path / "run")  # fmt: skip
    assert trainer.model is model
    metrics = trainer.train()
    trainer.close()
    assert seen["first"][0]["role"] == "assistant" and isinstance(seen["first"][0]["content"], str)
    assert "reward/trl_reward/mean" in metrics and "reward/accuracy/mean" in metrics
    assert metrics["run_dir"] == str(tmp_path / "run")


def test_dataset_path_is_recorded_in_the_run_config(tmp_path):
    import json

    import yaml

    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(False)))
    trainer = GRPOTrainer(model="tiny-llama", reward_funcs=[], train_dataset=str(path), config=SMALL, run_dir=tmp_path / "run")
    trainer.train()
    trainer.close()
    cfg = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert cfg["task"]["name"] == "dataset" and cfg["task"]["params"]["path"] == str(path.resolve())


def test_wrong_length_reward_is_an_error_naming_it(tmp_path):
    def broken(completions, **kw):
        return [1.0]

    trainer = GRPOTrainer(model="tiny-llama", reward_funcs=[broken], train_dataset=_rows(False), config=SMALL,
                          run_dir=tmp_path / "run")  # fmt: skip
    with pytest.raises(Exception, match="broken"):
        trainer.step()
    trainer.close()


def test_eval_dataset_without_answers_is_refused(tmp_path):
    rows = [{"prompt": "hi"}] * 3
    with pytest.raises(ValueError, match="verifier"):
        GRPOTrainer(model="tiny-llama", reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                    train_dataset=rows, eval_dataset=rows, config={**SMALL, "eval": {"size": 2}}, run_dir=tmp_path / "r")  # fmt: skip
