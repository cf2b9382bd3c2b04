"""completion_logprobs: teacher-forced log-probs with autograd, chunked lm_head, masks, autocast."""

import pytest
import torch

from covey.learner.logprobs import completion_logprobs, token_logprobs_from_logits
from covey.models import load


@pytest.fixture(scope="module")
def batch():
    model, tok = load("tiny-qwen2", seed=2, initializer_range=0.1)
    prompts = [torch.tensor(tok.encode(s)) for s in ("12+7=", "a", "hello there")]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (3, 9), generator=g)
    mask = torch.tensor(
        [
            [1, 1, 1, 1, 1, 1, 1, 1, 1],
            [1, 1, 1, 0, 0, 0, 0, 0, 0],  # short row
            [1, 1, 0, 1, 1, 0, 0, 0, 0],  # a method masked token 2 out
        ],
        dtype=torch.float32,
    )
    return model, prompts, ids, mask


def _reference(model, prompts, ids, mask, temperature):
    """Row by row: full forward on prompt + completion, log_softmax over the whole vocab."""
    out = torch.zeros(ids.shape)
    for i, p in enumerate(prompts):
        seq = torch.cat([p, ids[i]])[None]
        logits = model(seq).logits[0, len(p) - 1 : -1] / temperature  # [T, V] predicting each completion token
        out[i] = logits.log_softmax(-1).gather(-1, ids[i][:, None]).squeeze(-1)
    return out * mask


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_matches_row_by_row_full_forward(batch, temperature):
    model, prompts, ids, mask = batch
    with torch.no_grad():
        logp, _ = completion_logprobs(model, prompts, ids, mask, temperature=temperature)
        ref = _reference(model, prompts, ids, mask, temperature)
    assert (logp - ref).abs().max() < 1e-5
    assert (logp[mask == 0] == 0).all()


def test_chunked_equals_unchunked_values_and_gradients(batch):
    model, prompts, ids, mask = batch
    results = []
    for chunk in (3, 10_000):
        model.zero_grad()
        logp, ent = completion_logprobs(model, prompts, ids, mask, with_entropy=True, chunk_size=chunk)
        (logp.sum() + 0.1 * ent.sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logp.detach(), ent.detach(), grads))
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = results
    assert torch.allclose(lp_a, lp_b, atol=1e-6) and torch.allclose(ent_a, ent_b, atol=1e-6)
    assert g_a.keys() == g_b.keys() and "model.embed_tokens.weight" in g_a
    # summation order differs between chunkings: equal up to fp32 rounding (gradients reach ~17)
    assert all(torch.allclose(g_a[k], g_b[k], rtol=1e-4, atol=1e-4) for k in g_a)
    assert g_a["model.layers.0.self_attn.q_proj.weight"].abs().sum() > 0  # reaches the first layer


def test_entropy_is_of_the_tempered_distribution():
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    _, ent = token_logprobs_from_logits(logits, torch.tensor([0]), temperature=2.0, with_entropy=True)
    p = (logits / 2.0).softmax(-1)
    assert ent.item() == pytest.approx(-(p * p.log()).sum().item(), abs=1e-6)


def test_fully_masked_batch_gives_zeros_and_still_backpropagates(batch):
    model, prompts, ids, _ = batch
    logp, ent = completion_logprobs(model, prompts, ids, torch.zeros(ids.shape), with_entropy=True)
    assert (logp == 0).all() and (ent == 0).all()
    logp.sum().backward()  # connected to the graph: no "does not require grad" error


def test_bf16_autocast_close_to_fp32(batch):
    model, prompts, ids, mask = batch
    with torch.no_grad():
        ref, _ = completion_logprobs(model, prompts, ids, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low, _ = completion_logprobs(model, prompts, ids, mask)
    assert low.dtype == torch.float32
    assert (low - ref).abs().max() < 0.15  # bf16 logits at this init scale


def test_bad_arguments_name_the_problem(batch):
    model, prompts, ids, mask = batch
    with pytest.raises(ValueError, match="prompt_ids must hold N=3"):
        completion_logprobs(model, prompts[:2], ids, mask)
    with pytest.raises(ValueError, match="completion_mask must have shape"):
        completion_logprobs(model, prompts, ids, mask[:, :4])
    with pytest.raises(ValueError, match="temperature"):
        completion_logprobs(model, prompts, ids, mask, temperature=0.0)
    with pytest.raises(ValueError, match="at least one token"):
        completion_logprobs(model, [torch.tensor([], dtype=torch.long)] + prompts[1:], ids, mask)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("autocast", [False, True])
def test_fused_head_equals_autograd_through_logsumexp(with_bias, autocast):
    """HeadLogprob (saves only the log-normaliser, gradient in place) against plain autograd through
    lm_head -> fp32 log-softmax -> gather, in fp32 and under bf16 autocast, at temperature 0.7."""
    from covey.learner.logprobs import HeadLogprob

    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=with_bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(50, 16, generator=g))
        if with_bias:
            head.bias.copy_(torch.randn(50, generator=g))
    h0 = torch.randn(7, 16, generator=g)
    targets = torch.randint(0, 50, (7,), generator=g)
    weights = torch.randn(7, generator=g)  # a non-uniform incoming gradient
    out = {}
    for fused in (False, True):
        head.zero_grad(set_to_none=True)
        h = h0.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            if fused:
                dtype = torch.bfloat16 if autocast else torch.float32
                lp = HeadLogprob.apply(h, head.weight, head.bias, targets, 0.7, dtype)
            else:
                lp, _ = token_logprobs_from_logits(head(h), targets, 0.7)
        (lp * weights).sum().backward()
        out[fused] = [lp.detach(), h.grad, head.weight.grad] + ([head.bias.grad] if with_bias else [])
    tol = 2e-2 if autocast else 1e-5  # bf16: the two round the [M, V] gradient at different points
    for a, b in zip(out[False], out[True]):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert (a - b).abs().max() <= tol * max(float(a.abs().max()), 1.0)


def test_fused_head_skips_the_weight_gradient_of_a_frozen_head(batch):
    model, rows, ids, mask = batch
    model.get_output_embeddings().weight.requires_grad_(False)
    try:
        model.zero_grad(set_to_none=True)
        lp, _ = completion_logprobs(model, rows, ids, mask)
        lp.sum().backward()
        assert model.get_output_embeddings().weight.grad is None
        assert model.model.layers[0].mlp.up_proj.weight.grad is not None
    finally:
        model.get_output_embeddings().weight.requires_grad_(True)
