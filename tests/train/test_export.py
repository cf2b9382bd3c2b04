"""Standard outputs: final/ loads with transformers alone and gives the trained policy's logits;
LoRA runs export a peft adapter (and a merged final/); `covey eval --run` works on both."""

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

from covey.cli import app
from covey.train.config import load_config
from covey.train.run import train
from covey.train.trainer import Trainer

runner = CliRunner()


def _cfg(tmp_path, *extra):
    return load_config(None, ["model.name=tiny-llama", "task.params={digits: 1, n_train: 16, n_test: 4}",
                              "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=4",
                              "reward_workers=0", "log.progress=false", "log.tensorboard=false", "algo.kl=null",
                              "steps=1", "optim.lr=1e-2", *extra])  # fmt: skip


def _varied(completions, **kwargs):
    """A reward that differs between completions (the random tiny model never solves the task), so
    one step changes the weights and the logit checks below can tell trained from untrained."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]  # chat prompts: messages
    return [float(sum(map(ord, t)) % 7) for t in texts]


def _train(cfg, run):
    """(summary, the live trained policy): the run's own model object, not a reload."""
    trainer = Trainer(cfg, run, reward_funcs=[_varied])
    return train(cfg, run, trainer=trainer), trainer.model


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_full_run_final_folder_loads_with_identical_logits(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from covey.train.setup import load_run_policy

    from covey.models import load as load_model

    run = tmp_path / "run"
    summary, trained = _train(_cfg(tmp_path), run)
    assert summary["final"] == str(run / "final") and "adapter" not in summary
    model = AutoModelForCausalLM.from_pretrained(run / "final")
    tok = AutoTokenizer.from_pretrained(run / "final")
    assert tok.chat_template
    ids = tok.encode("12+3=")
    assert not torch.allclose(_logits(load_model("tiny-llama")[0], ids), _logits(trained, ids), atol=1e-4)  # it learned
    assert torch.allclose(_logits(model, ids), _logits(trained, ids), atol=1e-5)
    policy, _ = load_run_policy(run)  # what `covey eval --run` and `covey export` rebuild from the checkpoint
    assert torch.allclose(_logits(policy, ids), _logits(trained, ids), atol=1e-5)
    res = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "again")])  # from the checkpoint
    assert res.exit_code == 0, res.output
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "again" / "final")
    assert torch.allclose(_logits(again, ids), _logits(trained, ids), atol=1e-5)
    res = runner.invoke(app, ["eval", "--run", str(run), "--task", "arithmetic", "--limit", "2", "--max-new-tokens", "4",
                              "--task-param", "digits=1", "--task-param", "n_train=4", "--task-param", "n_test=4"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1])["problems"] == 2


def test_lora_run_exports_adapter_and_merged_model(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from covey.models import load as load_model
    from covey.train.setup import load_run_policy

    run = tmp_path / "lora"
    summary, trained = _train(_cfg(tmp_path, "model.lora={r: 4, alpha: 8}"), run)
    assert {"final", "adapter"} <= set(summary)
    merged = AutoModelForCausalLM.from_pretrained(run / "final")
    base, tok = load_model("tiny-llama")
    ids = tok.encode("7+1=")
    assert not torch.allclose(_logits(base, ids), _logits(trained, ids), atol=1e-4)  # the adapters learned
    with_adapter = PeftModel.from_pretrained(base, run / "adapter")
    assert torch.allclose(_logits(merged, ids), _logits(trained, ids), atol=1e-5)
    assert torch.allclose(_logits(with_adapter, ids), _logits(trained, ids), atol=1e-5)
    policy, _ = load_run_policy(run)  # merged for engines and eval
    assert torch.allclose(_logits(policy, ids), _logits(trained, ids), atol=1e-5)
    out = tmp_path / "exported"
    res = runner.invoke(app, ["export", str(run), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "adapter" / "adapter_config.json").is_file() and not (out / "final").exists()
    res = runner.invoke(app, ["export", str(run), "--out", str(out), "--merge"])
    assert res.exit_code == 0 and (out / "final" / "config.json").is_file()
    assert torch.allclose(_logits(AutoModelForCausalLM.from_pretrained(out / "final"), ids), _logits(trained, ids), atol=1e-5)
    res = runner.invoke(app, ["eval", "--run", str(run), "--task", "arithmetic", "--limit", "2", "--max-new-tokens", "4",
                              "--task-param", "digits=1", "--task-param", "n_train=4", "--task-param", "n_test=4"])  # fmt: skip
    assert res.exit_code == 0, res.output


def test_run_config_stores_absolute_model_paths(tmp_path, monkeypatch):
    from covey.models import load as load_model

    model, tok = load_model("tiny-llama")
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["model.name=m"])
    assert cfg.model.name == str((tmp_path / "m").resolve())
    assert yaml.safe_load(yaml.safe_dump(cfg.model_dump(mode="json")))["model"]["name"].startswith("/")


def test_run_config_stores_absolute_data_paths(tmp_path, monkeypatch):
    (tmp_path / "d.jsonl").write_text('{"prompt": "1 + 1 =", "answer": "2"}\n')
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["task.name=dataset", "task.params={path: d.jsonl, eval_path: d.jsonl, prompt_key: prompt}"])
    assert cfg.task.params["path"] == cfg.task.params["eval_path"] == str((tmp_path / "d.jsonl").resolve())
    assert cfg.task.params["prompt_key"] == "prompt"
    cfg = load_config(None, ["task.name=dataset", "task.params={path: org/hub-id}"])  # not a local path: kept
    assert cfg.task.params["path"] == "org/hub-id"


def test_export_of_a_non_run_is_a_clear_error(tmp_path):
    res = runner.invoke(app, ["export", str(tmp_path)])
    assert res.exit_code == 2 and "not a covey run folder" in res.output


def test_re_export_replaces_the_folder_whole(tmp_path):
    from covey.models import load as load_model
    from covey.train.export import export_model

    model, tok = load_model("tiny-llama")
    export_model(model, tok, tmp_path)
    (tmp_path / "final" / "model-00002-of-00002.safetensors").write_bytes(b"stale shard of an older export")
    export_model(model, tok, tmp_path)
    assert not (tmp_path / "final" / "model-00002-of-00002.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]  # no temporary folders left


def test_lora_adapter_records_a_portable_base_model(tmp_path):
    """peft writes the base model's local path (for the smollm2 alias: covey's cache folder); the
    export records the hub id instead, and a plain folder path stays as it is."""
    from peft import LoraConfig, PeftModel, get_peft_model

    from covey.models import load as load_model
    from covey.models.convert import CHECKSUM_FILE
    from covey.train.export import export_model

    alias_folder = tmp_path / "cache" / "models" / "smollm2-135m-instruct"  # what prepare() writes, in short
    alias_folder.mkdir(parents=True)
    (alias_folder / CHECKSUM_FILE).write_text(json.dumps({"alias": "smollm2-135m-instruct", "files": {}}))
    for base, recorded in ((alias_folder, "HuggingFaceTB/SmolLM2-135M-Instruct"), (tmp_path / "mine", str(tmp_path / "mine"))):
        model, tok = load_model("tiny-llama")
        model.name_or_path = str(base)  # as from_pretrained(base) sets it (peft reads it)
        lora = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear"))
        out = tmp_path / "out" / base.name
        written = export_model(lora, tok, out, merge=False)
        assert set(written) == {"adapter"}
        adapter_cfg = json.loads((out / "adapter" / "adapter_config.json").read_text())
        assert adapter_cfg["base_model_name_or_path"] == recorded and adapter_cfg["r"] == 2
        PeftModel.from_pretrained(load_model("tiny-llama")[0], out / "adapter")  # still a valid peft folder
