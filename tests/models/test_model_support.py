"""An architecture the engine does not implement is refused from its config.json, in one line, before loading."""

import json

import pytest
from typer.testing import CliRunner

from covey.cli import app
from covey.engine import ENGINES, TorchEngine
from covey.engine.support import UnsupportedModel, check_model_support, engine_model_types
from covey.models.loading import model_config
from covey.train.config import ConfigError, load_config

runner = CliRunner()
BASE = ["task.params={digits: 1, n_train: 8, n_test: 4}", "reward_workers=0"]


@pytest.fixture
def gpt2_folder(tmp_path):
    from transformers import GPT2Config

    folder = tmp_path / "gpt2"
    GPT2Config(n_layer=1, n_head=2, n_embd=8).save_pretrained(folder)  # config only, no weights
    return folder


def test_torch_engine_declares_the_hand_written_forward_types_and_the_vision_families():
    assert engine_model_types("torch") == ("llama", "qwen2", "qwen3", "mistral", "qwen2_vl", "qwen2_5_vl", "idefics3",
                                           "smolvlm", "gemma3")  # the last five: the HF-forward backend (docs/vlm.md)
    assert ENGINES.get("torch").fn is TorchEngine and TorchEngine.caps.model_types == engine_model_types("torch")


def test_model_config_reads_aliases_folders_and_gives_up_offline(gpt2_folder, tmp_path):
    assert model_config("tiny-qwen2")["model_type"] == "qwen2"
    assert model_config("smollm2-135m-instruct")["architectures"] == ["LlamaForCausalLM"]
    cfg = model_config(str(gpt2_folder))
    assert cfg["model_type"] == "gpt2" and cfg["n_layer"] == 1
    assert model_config(str(tmp_path / "missing")) is None
    assert model_config(str(tmp_path)) is None  # a folder without config.json


@pytest.mark.parametrize("command", [["config", "show"], ["train"]])
def test_gpt2_is_refused_in_one_line_with_exit_2(gpt2_folder, tmp_path, command):
    res = runner.invoke(app, [*command, f"model.name={gpt2_folder}", f"log.dir={tmp_path / 'runs'}", *BASE])
    assert res.exit_code == 2, res.output
    first = res.output.splitlines()[0]
    assert first == (f"error: model '{gpt2_folder}' (model_type gpt2) is not supported by engine 'torch'; "
                     "supported: llama, qwen2, qwen3, mistral, qwen2_vl, qwen2_5_vl, idefics3, smolvlm, gemma3")
    assert "Traceback" not in res.output
    assert not (tmp_path / "runs").exists()  # refused before a run folder is made


def test_covey_eval_refuses_it_too(gpt2_folder):
    res = runner.invoke(app, ["eval", "--model", str(gpt2_folder), "--task", "arithmetic"])
    assert res.exit_code == 2, res.output
    assert res.output.splitlines()[0].startswith(f"error: model '{gpt2_folder}' (model_type gpt2) is not supported")


def test_supported_models_and_engines_without_a_list_pass(gpt2_folder, tmp_path):
    check_model_support("tiny-llama", "torch")
    check_model_support(str(tmp_path / "not-there"), "torch")  # unreadable: check_name reports it
    (tmp_path / "engine_mod.py").write_text(
        "class AnyEngine:\n    def __init__(self, model, tokenizer):\n        pass\n"
        "    def generate(self, prompts, n, sampling): ...\n    def load_weights(self, source, version=None): ...\n"
        "    def close(self): ...\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        check_model_support(str(gpt2_folder), "engine_mod:AnyEngine")  # no model_types: every model goes
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.raises(UnsupportedModel, match="model_type gpt2"):
        check_model_support(str(gpt2_folder), "torch")
    with pytest.raises(ConfigError, match="not supported by engine 'torch'"):
        load_config(None, [f"model.name={gpt2_folder}"])


def test_a_config_json_with_a_supported_type_passes(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}))
    check_model_support(str(tmp_path), "torch")
