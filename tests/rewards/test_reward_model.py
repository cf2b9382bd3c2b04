"""Reward models as rewards (TRL's pattern): logit 0 of a sequence classifier on prompt + completion."""

import pytest
import torch

from covey.models import load
from covey.rewards import ModelReward, RewardRunner


@pytest.fixture(scope="module")
def tiny_rm():
    """A 1-layer Llama sequence classifier built from a config (no hub), with tiny-llama's tokenizer."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    _, tok = load("tiny-llama")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, num_labels=1, pad_token_id=tok.pad_token_id)
    return LlamaForSequenceClassification(cfg).eval(), tok


def _alone(model, tok, text: str) -> float:
    """The logit of one text scored alone (no padding): what a batched, padded call must reproduce."""
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        return model(**ids).logits[0, 0].item()


def test_batched_padded_scores_match_each_text_alone(tiny_rm):
    model, tok = tiny_rm
    reward = ModelReward(model, tokenizer=tok, batch_size=2)  # 3 texts of different lengths: 2 batches, padding
    prompts, completions = ["What is 2+2?", "Hi", "Say a long sentence please"], [" 4", " hello there", "!"]
    scores = reward(prompts, completions)
    expected = [_alone(model, tok, p + c) for p, c in zip(prompts, completions)]
    assert scores == pytest.approx(expected, abs=1e-5)
    assert len(set(round(s, 6) for s in scores)) == 3  # a random head really tells the texts apart
    assert not any(p.grad is not None for p in model.parameters())


def test_chat_prompts_go_through_the_reward_tokenizers_template(tiny_rm):
    model, tok = tiny_rm
    prompt = [{"role": "user", "content": "What is 2+2?"}]
    completion = [{"role": "assistant", "content": "4"}]
    text = tok.apply_chat_template(prompt + completion, tokenize=False)
    assert ModelReward(model, tokenizer=tok)([prompt], [completion]) == pytest.approx([_alone(model, tok, text)], abs=1e-5)


def test_model_object_in_the_runner_is_a_reward_model_in_process(tiny_rm):
    model, tok = tiny_rm
    model.config._name_or_path = ""  # no saved tokenizer to fall back on
    with pytest.raises(Exception, match="pass tokenizer="):
        ModelReward(model)(["p"], ["c"])
    runner = RewardRunner([ModelReward(model, tokenizer=tok)], workers=2)
    batch = runner(["ab", "abc"], ["c", "d"])
    runner.close()
    assert runner.entries[0].in_process and not batch.failed.any()
    assert batch.rewards[:, 0].tolist() == pytest.approx([_alone(model, tok, "abc"), _alone(model, tok, "abcd")], abs=1e-5)


def test_a_saved_folder_loads_by_path_and_by_the_plain_model_object(tiny_rm, tmp_path):
    model, tok = tiny_rm
    model.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    want = [_alone(model, tok, "q a"), _alone(model, tok, "q bb")]
    by_path = RewardRunner([{"name": "reward_model", "params": {"model": str(tmp_path / "rm")}}], workers=0)
    assert by_path.names == ("reward_model",)
    assert by_path(["q ", "q "], ["a", "bb"]).rewards[:, 0].tolist() == pytest.approx(want, abs=1e-5)
    from transformers import AutoModelForSequenceClassification

    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm")
    runner = RewardRunner([loaded], workers=0)  # a bare model object: tokenizer from its folder, name from it
    assert runner.names == ("rm",) and runner.entries[0].in_process
    assert runner(["q ", "q "], ["a", "bb"]).rewards[:, 0].tolist() == pytest.approx(want, abs=1e-5)


def test_bad_reward_model_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="not a model folder"):
        ModelReward(str(tmp_path))
    with pytest.raises(ValueError, match="batch_size"):
        ModelReward(str(tmp_path), batch_size=0)
    with pytest.raises(ValueError, match="model must be"):
        ModelReward(3.5)
    with pytest.raises(ValueError, match="neither a model folder nor a hub id"):
        ModelReward("fromat")


def test_offline_hub_id_must_be_cached(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="not in the local Hugging Face cache"):
        ModelReward("nobody-here/no-such-reward-model")
