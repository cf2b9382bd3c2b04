"""`covey sft` on a masked-diffusion model: LLaDA's SFT loss (prompt never masked, EOS-padded answers)."""

from types import SimpleNamespace

import math

import torch

from covey.likelihood.sft import encode_sft, llada_sft_loss
from covey.models import apply_chat, load
from covey.tasks import get_task
from covey.train.sft import run_sft


class Uniform(torch.nn.Module):
    """Equal logits everywhere: every masked token costs ln V; records what it was fed."""

    def __init__(self, v=10):
        super().__init__()
        self.v, self.seen = v, []

    def forward(self, input_ids):
        self.seen.append(input_ids.clone())
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, self.v))


def test_encode_pads_answers_with_eos():
    _, tok = load("tiny-llada")
    items = [{"prompt": "a", "answer": "12"}, {"prompt": "bb", "answer": "3"}]
    ids, answer = encode_sft(tok, items, lambda it: it["answer"], apply_chat)
    p0, p1 = len(apply_chat(tok, "a")), len(apply_chat(tok, "bb"))
    assert ids.shape[1] == max(p0 + 3, p1 + 2)
    eos = tok.eos_token_id
    assert ids[1, p1 + 1 :].tolist() == [eos] * (ids.shape[1] - p1 - 1)
    assert answer[0].tolist() == [False] * p0 + [True] * (ids.shape[1] - p0)


def test_llada_sft_loss_is_ln_v_in_expectation_and_never_masks_the_prompt():
    model = Uniform(v=10)
    ids = torch.randint(0, 9, (64, 12))
    answer = torch.arange(12)[None].expand(64, 12) >= 4
    g = torch.Generator().manual_seed(0)
    losses = [float(llada_sft_loss(model, ids, answer, mask_id=9, generator=g)) for _ in range(200)]
    assert sum(losses) / len(losses) == pytest_approx(math.log(10), 0.05)
    for x in model.seen:
        assert torch.equal(x[:, :4], ids[:, :4])  # the prompt is never masked
        assert ((x == 9) <= answer).all()


def pytest_approx(v, rel):
    import pytest

    return pytest.approx(v, rel=rel)


def test_run_sft_lowers_the_loss_on_tiny_llada(tmp_path):
    task = get_task("arithmetic", digits=1, n_train=32, n_test=4)
    res = run_sft("tiny-llada", task, tmp_path / "m", steps=30, batch_size=16, lr=3e-3, dtype="fp32", device="cpu")
    assert res["loss_last"] < res["loss_first"]
    model, tok = load(str(tmp_path / "m"))
    assert model.config.is_causal is False and tok.mask_token_id == 358
