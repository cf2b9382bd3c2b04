"""The masked-diffusion family's attention is bidirectional under every attention path covey may select
(a later token changes an earlier position's output), and prompt sharing is refused for it."""

import pytest
import torch

from covey.learner.attention import attention_kernel
from covey.learner.logprobs import completion_logprobs
from covey.learner.prefix import is_causal, shared_prompt_hidden
from covey.models import load


@pytest.fixture(scope="module")
def llada():
    return load("tiny-llada")


def _first_logits(model, ids, attn_mask: bool):
    kw = {"attention_mask": torch.ones_like(ids)} if attn_mask else {}
    with torch.no_grad():
        return model(input_ids=ids, **kw).logits[0, 0]


@pytest.mark.parametrize("impl", ["sdpa", "eager", "covey_gqa"])
@pytest.mark.parametrize("attn_mask", [False, True])
def test_last_token_changes_first_position(llada, impl, attn_mask):
    model, _ = llada
    x = torch.tensor([[5, 6, 7, 8, 9]])
    y = x.clone()
    y[0, -1] = 20
    model.set_attn_implementation(impl)
    try:
        diff = (_first_logits(model, x, attn_mask) - _first_logits(model, y, attn_mask)).abs().max()
    finally:
        model.set_attn_implementation("sdpa")
    assert diff > 1e-3


def test_covey_gqa_matches_sdpa_bidirectional_and_stays_causal_for_llama(llada):
    model, _ = llada
    x = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        ref = model(input_ids=x).logits
        with attention_kernel(model, torch.device("cpu"), 100, False):  # the learner's CPU switch
            assert model.config._attn_implementation == "covey_gqa"
            got = model(input_ids=x).logits
    assert torch.allclose(got, ref, atol=1e-5)
    causal, _ = load("tiny-llama")
    y = x.clone()
    y[0, -1] = 20
    causal.set_attn_implementation("covey_gqa")
    with torch.no_grad():
        assert torch.equal(causal(input_ids=x).logits[0, :5], causal(input_ids=y).logits[0, :5])


def test_prompt_sharing_refused_and_auto_off(llada):
    model, _ = llada
    assert not is_causal(model) and is_causal(load("tiny-llama")[0])
    prompts = [torch.tensor([5, 6, 7])] * 2
    comp = torch.tensor([[8, 9], [9, 8]])
    with pytest.raises(ValueError, match="causal model"):
        shared_prompt_hidden(model.get_decoder(), prompts, comp)
    with pytest.raises(ValueError, match="causal model"):
        completion_logprobs(model, prompts, comp, torch.ones(2, 2), share_prompts=True)
    lp, _ = completion_logprobs(model, prompts, comp, torch.ones(2, 2))  # auto: no sharing, no error
    assert torch.isfinite(lp).all()


def test_tiny_llada_facts(llada):
    model, tok = llada
    assert (len(tok), tok.mask_token_id, tok.pad_token_id) == (359, 358, 0)
    assert model.config.is_causal is False and model.config.mask_token_id == 358
    assert tok.decode([358]) == "<|mask|>" and tok.encode("<|mask|>", add_special_tokens=False) == [358]
    assert sum(p.numel() for p in model.parameters()) == 1_712_448
