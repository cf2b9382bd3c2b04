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


def test_trl_example_script_runs(tmp_path):
    import json

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(EXAMPLES / "trl_script.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    row = json.loads((tmp_path / "runs" / "trl-script" / "metrics.jsonl").read_text())
    # 8 rows / 4 generations = 2 prompts: 8 samples, each scored by exactly one of the two task rewards
    assert row["reward/math_reward/none"] + row["reward/echo_reward/none"] == 8.0 and row["reward/unscorable"] == 0.0
    assert row["reward/brevity/none"] == 0.0 and row["reward/brevity/failures"] == 0.0


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


# ------------------------------------------------------------------ TRL scripts with only the import changed
def _trl_script(GRPOConfig, GRPOTrainer, out_dir, **extra):
    """A TRL GRPO script, verbatim except for where GRPOConfig / GRPOTrainer come from."""
    from datasets import Dataset, DatasetDict
    from peft import LoraConfig

    model, tok = load_model("tiny-llama")
    ds = DatasetDict({"train": Dataset.from_list([{"prompt": f"What is {a} + 1?", "answer": str(a + 1)} for a in range(4)])})

    def reward_len(completions, **kwargs):
        return [-abs(5 - len(c)) / 5 for c in completions]

    def reward_answer(completions, answer, **kwargs):  # multi-task style: None where it does not apply
        return [1.0 if a in c else None for c, a in zip(completions, answer)]

    args = GRPOConfig(output_dir=str(out_dir), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=6, report_to="none", learning_rate=1e-5, reward_weights=[1.0, 2.0],
                      use_cpu=True, bf16=False, save_strategy="no", gradient_checkpointing=False, **extra)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward_len, reward_answer], args=args, train_dataset=ds,
                          processing_class=tok, peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    trainer.train()
    return trainer


def test_a_trl_script_runs_with_only_the_import_changed(tmp_path):
    import json

    from covey import GRPOConfig

    trainer = _trl_script(GRPOConfig, GRPOTrainer, tmp_path / "out")
    trainer.close()
    cfg = trainer.config
    assert trainer.run_dir == tmp_path / "out" and trainer.processing_class is trainer.tokenizer
    assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.sampling.max_new_tokens, cfg.steps) == (2, 2, 6, 1)
    assert cfg.model.lora.r == 4 and cfg.model.lora.alpha == 8.0 and cfg.model.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.algo.kl is None and cfg.algo.aggregation.name == "token-mean" and cfg.optim.schedule == "linear"
    assert cfg.log.report_to == ["jsonl"] and cfg.task.params["verifier"] == "none"  # no extra `accuracy` reward
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and "reward/reward_answer/none" in rows[0] and "reward/accuracy/mean" not in rows[0]
    assert trainer.trainer.rewards.weights.tolist() == [1.0, 2.0]


def test_trls_own_config_object_maps_like_covey_s(tmp_path):
    import trl

    from covey import GRPOConfig
    from covey.trl_args import covey_config

    fields = dict(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, gradient_accumulation_steps=2,
                  steps_per_generation=4, num_iterations=2, max_steps=12, loss_type="grpo", beta=0.04, epsilon_high=0.28,
                  scale_rewards="batch", warmup_steps=0.3, lr_scheduler_type="cosine", report_to="wandb", seed=7,
                  use_bias_correction_kl=False, use_cpu=True)
    with _no_warning():  # use_bias_correction_kl=False: nothing to warn about
        ours, extras = covey_config(GRPOConfig(**fields))
    theirs, _ = covey_config(trl.GRPOConfig(**fields))
    assert ours == theirs
    # hand-computed: 8 rows x 4 steps_per_generation = 32 rows / 4 = 8 prompts; 4 / 2 accumulation = 2 updates per
    # batch, x 2 iterations = 4 updates per covey step; 12 / 4 = 3 steps; warmup ceil(0.3 x 12) = 4 updates = 1 step
    assert ours["rollout"] == {"prompts_per_step": 8, "group_size": 4} and ours["steps"] == 3
    assert {k: ours["optim"][k] for k in ("epochs", "mini_batches", "micro_batch_size", "warmup_steps", "schedule", "lr")} == {
        "epochs": 2, "mini_batches": 2, "micro_batch_size": 8, "warmup_steps": 1, "schedule": "cosine", "lr": 1e-6}
    assert ours["algo"]["surrogate"] == {"name": "ppo_clip", "eps_low": 0.2, "eps_high": 0.28, "delta": None,
                                         "log_ratio_clamp": None}
    assert ours["algo"]["advantage"] == {"name": "grpo", "eps": 1e-4, "scale": "batch"}
    assert ours["algo"]["aggregation"] == {"name": "seq-mean-token-mean"}
    assert ours["algo"]["kl"] == {"name": "k3", "coef": 0.04, "mode": "loss"}
    assert ours["log"]["report_to"] == ["jsonl", "wandb"] and ours["seed"] == 7 and extras["output_dir"] == str(tmp_path)


class _no_warning:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


def test_covey_defaults_are_trls():
    import dataclasses

    import trl

    from covey.trl_args import DEFAULTS, FIELDS

    fields = {f.name: f for f in dataclasses.fields(trl.GRPOConfig) if f.init}
    assert FIELDS == set(fields)
    for name, value in DEFAULTS.items():
        f = fields[name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert default == value, name


@pytest.mark.parametrize("loss_type, level, surrogate, aggregation", [
    ("dr_grpo", "token", "ppo_clip", "seq-mean-token-sum-constant"),
    ("bnpo", "token", "ppo_clip", "token-mean"),
    ("cispo", "token", "cispo", "token-mean"),
    ("sapo", "token", "sapo", "seq-mean-token-mean"),
    ("grpo", "sequence", "gspo", "seq-mean-token-mean"),
])
def test_loss_types_map_to_surrogate_and_aggregation(loss_type, level, surrogate, aggregation):
    from covey.trl_args import covey_config
    from covey.train.config import validate_config

    cfg, _ = covey_config({"loss_type": loss_type, "importance_sampling_level": level, "max_steps": 1, "epsilon_high": 5.0})
    assert (cfg["algo"]["surrogate"]["name"], cfg["algo"]["aggregation"]["name"]) == (surrogate, aggregation)
    if loss_type == "cispo":  # TRL: clamp(r, max=epsilon_high), no lower bound
        assert cfg["algo"]["surrogate"] == {"name": "cispo", "eps_low": None, "eps_high": 5.0, "cap_mode": "absolute"}
    validate_config(cfg)


def test_unhonourable_fields_fail_or_warn_by_name():
    from covey import GRPOConfig
    from covey.trl_args import covey_config

    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['num_generation'\]"):
        GRPOConfig(num_generation=4)
    with pytest.raises(ValueError, match="repetition_penalty=1.1 .*mask_truncated_completions=True"):
        covey_config(GRPOConfig(max_steps=1, mask_truncated_completions=True, repetition_penalty=1.1))
    with pytest.raises(ValueError, match="loss_type='vespo' has no covey mapping"):
        covey_config({"max_steps": 1, "loss_type": "vespo"})
    with pytest.raises(ValueError, match="must be a multiple of num_generations=3"):
        covey_config({"max_steps": 1, "num_generations": 3})
    with pytest.raises(ValueError, match="2 reward_weights for 1 reward functions"):
        covey_config({"max_steps": 1, "reward_weights": [1.0, 2.0]}, n_rewards=1)
    with pytest.warns(UserWarning, match=r"ignores these GRPOConfig fields: hub_model_id, push_to_hub$"):
        _, extras = covey_config(GRPOConfig(max_steps=1, hub_model_id="x/y", push_to_hub=True, generation_kwargs={}))
    assert extras["ignored"] == ["hub_model_id", "push_to_hub"]  # use_vllm: tests/test_trl_vllm.py


def test_epochs_count_the_dataset_when_max_steps_is_unset():
    from covey.trl_args import covey_config

    # 8 rows x 1 / 4 generations = 2 prompts per step; 3 epochs over 10 rows (5 full batches) = 15 steps
    cfg, _ = covey_config({"per_device_train_batch_size": 8, "num_generations": 4}, n_rows=10)
    assert cfg["steps"] == 15 and cfg["checkpoint"] == {"every": 500, "keep": 15}
    with pytest.raises(ValueError, match="max_steps=-1 counts num_train_epochs over the train_dataset"):
        covey_config({})


def test_datasetdict_and_peft_and_unsupported_arguments(tmp_path):
    from datasets import Dataset, DatasetDict
    from peft import LoraConfig

    reward = [lambda completions, **kw: [0.0] * len(completions)]
    with pytest.raises(ValueError, match=r"splits \['other'\]; covey takes train"):
        GRPOTrainer(model="tiny-llama", reward_funcs=reward, args={"max_steps": 1},
                    train_dataset=DatasetDict({"other": Dataset.from_list(_rows(False))}), run_dir=tmp_path / "a")
    with pytest.raises(ValueError, match="use_dora=True"):
        GRPOTrainer(model="tiny-llama", reward_funcs=reward, args={"max_steps": 1}, train_dataset=_rows(False),
                    peft_config=LoraConfig(target_modules="all-linear", use_dora=True), run_dir=tmp_path / "b")
    with pytest.raises(ValueError, match="callbacks .*TrainerCallback"):
        GRPOTrainer(model="tiny-llama", reward_funcs=reward, callbacks=[object()], train_dataset=_rows(False))
    with pytest.raises(ValueError, match="unknown reward 'fromat'"):  # no '/', no folder: a covey name, not a model id
        GRPOTrainer(model="tiny-llama", reward_funcs=["fromat"], args={"max_steps": 1}, train_dataset=_rows(False),
                    run_dir=tmp_path / "c")
    assert not any((tmp_path / d).exists() for d in "abc")


def test_resume_from_checkpoint_continues_the_run(tmp_path):
    import json

    from covey import GRPOConfig

    def make(steps):
        args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=4, use_cpu=True, bf16=False, gradient_checkpointing=False)
        return GRPOTrainer(model="tiny-llama", reward_funcs=[lambda completions, **kw: [float(len(c)) for c in completions]],
                           args=args, train_dataset=_rows(False), config={"log": {"progress": False}})

    first = make(1)
    first.train()
    first.close()
    again = make(2)
    with pytest.raises(FileExistsError, match="resume_from_checkpoint=True"):
        again.train()
    with pytest.raises(ValueError, match="covey resumes the run in"):
        again.train(resume_from_checkpoint=str(tmp_path / "elsewhere"))
    again.train(resume_from_checkpoint=True)
    again.close()
    steps = [json.loads(x)["step"] for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2] and again.trainer.step_num == 2


def test_reward_model_by_folder_with_its_processing_class(tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    _, tok = load_model("tiny-llama")
    torch.manual_seed(0)
    rm = LlamaForSequenceClassification(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                                    num_hidden_layers=1, num_attention_heads=2, num_labels=1))
    rm.save_pretrained(tmp_path / "rm")
    trainer = GRPOTrainer(model="tiny-llama", reward_funcs=[str(tmp_path / "rm")], args={"max_steps": 1, "num_generations": 2,
                          "per_device_train_batch_size": 2, "max_completion_length": 4, "use_cpu": True, "bf16": False},
                          train_dataset=_rows(False), reward_processing_classes=[tok], run_dir=tmp_path / "run",
                          config={"log": {"progress": False}})  # fmt: skip
    metrics = trainer.step()
    trainer.close()
    assert trainer.trainer.rewards.names == ("rm",) and metrics["reward/rm/failures"] == 0.0


# ------------------------------------------------------------------ a run started here, continued from the CLI (issue 37)
def longer_than_two(completions, **kw):
    """A module-level reward: importable by name, so the CLI can rebuild it."""
    return [float(len(c) > 2) for c in completions]


def test_a_python_run_resumes_and_evaluates_from_the_cli(tmp_path):
    import json

    import yaml
    from typer.testing import CliRunner

    from covey.cli import app

    run = tmp_path / "run"
    trainer = GRPOTrainer(model="tiny-llama", reward_funcs=[longer_than_two], train_dataset=_rows(False),
                          eval_dataset=_rows(False), config=SMALL, run_dir=run)  # fmt: skip
    trainer.train()
    trainer.close()
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["task"]["params"]["path"] == str(run / "data" / "train.jsonl")  # the rows, kept with the run
    assert [json.loads(x) for x in (run / "data" / "train.jsonl").read_text().splitlines()] == _rows(False)
    assert cfg["rewards"] == [{**cfg["rewards"][0], "name": f"{__name__}:longer_than_two", "alias": "longer_than_two"}]
    assert not (run / "python_only.json").exists()
    res = CliRunner().invoke(app, ["train", "--resume", str(run), "steps=3"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if "reward/mean" in x]
    assert [r["step"] for r in rows] == [1, 2, 3] and "reward/longer_than_two/mean" in rows[-1]  # the same reward column
    res = CliRunner().invoke(app, ["eval", "--run", str(run), "--max-new-tokens", "2"])
    assert res.exit_code == 0 and '"reward/longer_than_two"' in res.output, res.output


def test_a_run_the_cli_cannot_rebuild_says_how_to_resume(tmp_path):
    from typer.testing import CliRunner

    from covey.cli import app

    run = tmp_path / "run"
    trainer = GRPOTrainer(model="tiny-llama", reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          train_dataset=_rows(False), config=SMALL, run_dir=run)  # fmt: skip
    trainer.train()
    trainer.close()
    assert "<lambda>" in (run / "python_only.json").read_text()
    res = CliRunner().invoke(app, ["train", "--resume", str(run), "steps=3"])
    assert res.exit_code == 2 and "resume it from Python" in res.output and "<lambda>" in res.output, res.output
    from covey.train.run import resume_hint

    assert "GRPOTrainer(<the same arguments>" in resume_hint(run) and "covey train" not in resume_hint(run)


def test_trl_trainer_surface_state_evaluate_save_model_and_push_offline(tmp_path, monkeypatch):
    """What a TRL user reaches for: trainer.state, trainer.evaluate(), save_model (LoRA: the adapter),
    push_to_hub (offline: one line)."""
    from peft import LoraConfig
    from transformers.trainer_utils import get_last_checkpoint

    trainer = GRPOTrainer(model="tiny-llama", reward_funcs=[longer_than_two], train_dataset=_rows(False), eval_dataset=_rows(False),
                          peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]), config=SMALL,
                          run_dir=tmp_path / "run")  # fmt: skip
    before = trainer.evaluate(max_new_tokens=2)
    assert before["eval_samples"] == 4 and 0.0 <= before["eval_accuracy"] <= 1.0
    trainer.train()
    state = trainer.state
    assert state.global_step == 2 and state.max_steps == 2
    logged = [e for e in state.log_history if "reward" in e]
    assert [e["step"] for e in logged] == [1, 2] and "completions/mean_length" in logged[0] and "loss" in logged[0]
    assert get_last_checkpoint(str(tmp_path / "run")) == str(tmp_path / "run" / "checkpoint-2")  # transformers finds it
    assert (tmp_path / "run" / "checkpoint-2" / "adapter_model.safetensors").is_file()
    out = trainer.save_model(tmp_path / "saved")
    names = {p.name for p in out.iterdir()}
    assert "adapter_model.safetensors" in names and "model.safetensors" not in names  # the adapter, as peft saves it
    merged = trainer.save_model(tmp_path / "merged", merge=True)
    assert (merged / "model.safetensors").is_file()
    assert trainer.evaluate(_rows(False)[:2], max_new_tokens=2)["eval_samples"] == 2  # after train(): its own engine
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="^push_to_hub: the Hugging Face Hub is not reachable"):
        trainer.push_to_hub("me/model")
    trainer.close()
