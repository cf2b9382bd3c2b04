"""Per-token logit statistics (sum_p2, vocab_mean_logp) from the chunked head equal a naive
full-softmax computation, on the fused path and the entropy (checkpointed) path, and leave the
log-probs and their gradients unchanged."""

import pytest
import torch

from covey.learner.logprobs import completion_logprobs, completion_logprobs_stats, token_stats_from_logits
from covey.models import load


@pytest.fixture(scope="module")
def batch():
    model, tok = load("tiny-qwen2", seed=2, initializer_range=0.1)
    prompts = [torch.tensor(tok.encode(s)) for s in ("12+7=", "a", "12+7=")]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (3, 7), generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 1, 1, 0, 0]], dtype=torch.float32)
    return model, prompts, ids, mask


def _naive(model, prompts, ids, mask, temperature):
    """Row by row, the full [T, V] softmax: sum_v p^2 and mean_v log p."""
    sp2, vm = torch.zeros(ids.shape), torch.zeros(ids.shape)
    for i, p in enumerate(prompts):
        logits = model(torch.cat([p, ids[i]])[None]).logits[0, len(p) - 1 : -1].float() / temperature
        logq = logits.log_softmax(-1)
        sp2[i] = logq.exp().pow(2).sum(-1)
        vm[i] = logq.mean(-1)
    return sp2 * mask, vm * mask


def test_stats_of_hand_logits():
    z = torch.tensor([[1.0, 0.0, -1.0], [2.0, 2.0, 2.0]])
    lse = torch.logsumexp(z, -1)
    sp2, vm = token_stats_from_logits(z, lse, ("sum_p2", "vocab_mean_logp"))
    assert vm[0].item() == pytest.approx(-1.4076, abs=1e-4)  # hand-checked: u(z = [1, 0, -1])
    p = torch.softmax(z[0], -1)
    assert sp2[0].item() == pytest.approx(float((p**2).sum()), abs=1e-6)
    assert sp2[1].item() == pytest.approx(1 / 3, abs=1e-6) and vm[1].item() == pytest.approx(-torch.log(torch.tensor(3.0)).item(), abs=1e-6)
    with pytest.raises(ValueError, match="unknown token statistic"):
        token_stats_from_logits(z, lse, ("sum_p3",))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("with_entropy", [False, True])  # False: the fused head; True: the checkpointed path
@pytest.mark.parametrize("chunk", [2, 512])
def test_chunked_stats_equal_full_softmax(batch, temperature, with_entropy, chunk):
    model, prompts, ids, mask = batch
    logp, ent, stats = completion_logprobs_stats(model, prompts, ids, mask, temperature=temperature, with_entropy=with_entropy,
                                                 stats=("sum_p2", "vocab_mean_logp"), chunk_size=chunk)  # fmt: skip
    with torch.no_grad():
        sp2, vm = _naive(model, prompts, ids, mask, temperature)
    assert set(stats) == {"sum_p2", "vocab_mean_logp"}
    assert (stats["sum_p2"] - sp2).abs().max() < 1e-5
    assert (stats["vocab_mean_logp"] - vm).abs().max() < 1e-4
    assert not stats["sum_p2"].requires_grad and (stats["sum_p2"][mask == 0] == 0).all()
    assert (stats["sum_p2"][mask == 1] > 0).all() and (stats["sum_p2"] <= 1).all()


def test_stats_leave_logprobs_and_gradients_unchanged(batch):
    model, prompts, ids, mask = batch
    grads = []
    for stats in ((), ("sum_p2", "vocab_mean_logp")):
        model.zero_grad()
        logp, _, out = completion_logprobs_stats(model, prompts, ids, mask, stats=stats, chunk_size=3)
        logp.sum().backward()
        grads.append((logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
        assert set(out) == set(stats)
    (a, ga), (b, gb) = grads
    assert torch.equal(a, b) and ga.keys() == gb.keys()
    assert all(torch.equal(ga[k], gb[k]) for k in ga)
    plain, _ = completion_logprobs(model, prompts, ids, mask, chunk_size=3)
    assert torch.equal(plain.detach(), a)


def test_unknown_stat_is_refused(batch):
    model, prompts, ids, mask = batch
    with pytest.raises(ValueError, match="unknown token statistic"):
        completion_logprobs_stats(model, prompts, ids, mask, stats=("entropy2",))
