"""The planner's model shapes: parameter counts equal the models transformers builds, from config.json alone."""

import pytest
import torch

from covey.models.loading import bundled_config, model_config
from covey.plan import Architecture


def _meta_model(config: dict):
    """The model transformers builds from `config`, on the meta device (no memory)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **fields))


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "smollm2-135m-instruct", "Qwen/Qwen2.5-0.5B-Instruct",
                                  "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"])  # fmt: skip
def test_parameter_count_equals_the_built_model(name):
    config = model_config(name)
    model = _meta_model(config)
    assert Architecture.from_config(config).total == sum(p.numel() for p in model.parameters())


def test_published_sizes_of_the_bundled_qwen_configs():
    # Qwen2.5's model cards: 0.49B, 1.54B, 7.61B, 32.5B parameters (rounded); 32B: 31.0B without embeddings
    sizes = {s: Architecture.from_config(bundled_config(f"Qwen/Qwen2.5-{s}-Instruct")).total for s in ("0.5B", "1.5B", "7B", "32B")}
    assert sizes["7B"] == 7_615_616_512  # 2 x 152064 x 3584 + 3584 + 28 x 233,057,792 (hand count in docs/scaling.md)
    assert round(sizes["0.5B"] / 1e9, 2) == 0.49 and round(sizes["1.5B"] / 1e9, 2) == 1.54
    a = Architecture.from_config(bundled_config("Qwen/Qwen2.5-32B-Instruct"))
    assert round(a.total / 1e9, 1) == 32.8 and round((a.total - 2 * a.embed) / 1e9, 1) == 31.2


def test_tiny_config_is_what_build_tiny_builds():
    from covey.models import load

    for name in ("tiny-llama", "tiny-qwen2", "tiny-llada"):
        model, _ = load(name)
        built = model.config.to_dict()
        assert type(model).__name__ in model_config(name)["architectures"]
        for key, value in model_config(name).items():
            if key != "architectures":  # set by save_pretrained, not by the config class
                assert built[key] == value, (name, key)


def test_smollm2_bundled_config_matches_the_prepared_folder():
    from covey.models.convert import cache_root

    prepared = cache_root() / "models" / "smollm2-135m-instruct" / "config.json"
    if not prepared.is_file():
        pytest.skip("smollm2-135m-instruct is not prepared (covey models prepare)")
    a = Architecture.from_config(model_config("smollm2-135m-instruct"))
    assert a == Architecture.from_config(bundled_config("HuggingFaceTB/SmolLM2-135M-Instruct"))


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "v_proj"]])
def test_lora_count_equals_peft(targets):
    from peft import LoraConfig, get_peft_model

    from covey.models import load

    model, _ = load("tiny-llama")
    peft = get_peft_model(model, LoraConfig(r=8, target_modules=targets))
    trainable = sum(p.numel() for p in peft.parameters() if p.requires_grad)
    assert Architecture.from_config(model_config("tiny-llama")).lora(8, targets) == trainable


def test_unknown_lora_targets_and_missing_fields_are_named():
    a = Architecture.from_config(model_config("tiny-llama"))
    with pytest.raises(ValueError, match=r"\['lm_head'\] are not linear layers"):
        a.lora(8, ["lm_head"])
    with pytest.raises(ValueError, match="no hidden_size.*under 'text_config'"):
        Architecture.from_config({"vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 2,
                                  "intermediate_size": 8, "text_config": {}})  # fmt: skip
