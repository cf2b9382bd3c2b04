"""Learner: shared-prompt forward (same log-probs and gradients as the plain one), group-keeping
micro-batches, device placement (checked on CPU with a meta default device), peak memory, dtype auto."""

import copy

import pytest
import torch

from covey.algos.presets import resolve_algo
from covey.learner.logprobs import completion_logprobs
from covey.models import load
from covey.rollouts import Rollouts
from covey.train.config import ConfigError, validate_config
from covey.learner.learner import Learner, to_device


def _batch(vocab: int, seed: int = 0) -> Rollouts:
    """4 groups (prompt lengths 5, 9, 5, 3) of 3, 2, 2, 1 rows; ragged masks, one all-masked row."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(5, vocab, (n,), generator=g) for n in (5, 9, 5, 3)]
    group = torch.tensor([0, 1, 0, 2, 1, 0, 2, 3])  # groups interleaved: the learner must regroup them
    n, t = len(group), 7
    mask = torch.ones(n, t)
    mask[1, 4:] = 0
    mask[3, 2] = 0
    mask[5, 1:] = 0
    mask[7] = 0
    return Rollouts(
        prompt_ids=[prompts[i].clone() for i in group.tolist()],
        completion_ids=torch.randint(5, vocab, (n, t), generator=g),
        completion_mask=mask,
        behaviour_logprobs=-torch.rand(n, t, generator=g) * mask,
        group=group,
        prompt_id=group.clone(),
        advantages=torch.randn(n, generator=g),
        ref_logprobs=-torch.rand(n, t, generator=g) * mask,
    ).validate()


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen2"])
def tiny(request):
    model, _ = load(request.param, seed=3, initializer_range=0.1)
    return model.float()


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_shared_prompt_logprobs_and_gradients_equal_the_plain_forward_fp32(tiny):
    b = _batch(tiny.config.vocab_size)
    out = {}
    for share in (False, True):
        tiny.zero_grad(set_to_none=True)
        lp, ent = completion_logprobs(tiny, b.prompt_ids, b.completion_ids, b.completion_mask, temperature=0.7,
                                      with_entropy=True, share_prompts=share)  # fmt: skip
        (lp * torch.linspace(-1, 1, lp.shape[1])).sum().add(ent.sum()).backward()
        out[share] = (lp.detach(), ent.detach(), _grads(tiny))
    (lp0, ent0, g0), (lp1, ent1, g1) = out[False], out[True]
    assert (lp0 - lp1).abs().max() < 1e-5 and (ent0 - ent1).abs().max() < 1e-5
    assert (lp1[b.completion_mask == 0] == 0).all()
    assert set(g0) == set(g1) and len(g0) == len(list(tiny.parameters()))
    for k in g0:
        scale = float(g0[k].abs().max())
        assert float((g0[k] - g1[k]).abs().max()) <= 1e-5 * max(scale, 1e-6), k


def test_learner_update_with_shared_prompts_equals_unshared_fp32(tiny):
    algo = resolve_algo({"preset": "grpo"})
    results = []
    for share in (False, True):
        model = copy.deepcopy(tiny)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        learner = Learner(model, opt, None, algo, temperature=1.0, max_new_tokens=7, dtype="fp32", micro_batch_size=3,
                          share_prompts=share)  # fmt: skip
        metrics = learner.update(_batch(tiny.config.vocab_size), torch.Generator().manual_seed(0))
        results.append((metrics, [p.detach() for p in model.parameters()]))
    (m0, p0), (m1, p1) = results
    assert abs(m0["learn/loss"] - m1["learn/loss"]) < 1e-6 * max(1.0, abs(m0["learn/loss"]))
    assert abs(m0["learn/grad_norm"] - m1["learn/grad_norm"]) < 1e-5 * max(1.0, m0["learn/grad_norm"])
    assert max(float((a - b).abs().max()) for a, b in zip(p0, p1)) < 1e-6
    assert m1["memory/peak_gb"] > 0


def test_micro_batches_keep_prompt_groups_together(tiny):
    algo = resolve_algo({"preset": "grpo"})
    b = _batch(tiny.config.vocab_size)
    learner = Learner(tiny, torch.optim.SGD(tiny.parameters(), lr=0.0), None, algo, temperature=1.0, max_new_tokens=7,
                      dtype="fp32", micro_batch_size=3)  # fmt: skip
    chunks = [c.tolist() for c in learner._chunks(b)]
    assert sorted(r for c in chunks for r in c) == list(range(len(b)))  # every row once
    assert all(len(c) <= 3 for c in chunks)
    group = b.group.tolist()
    split = [g for g in set(group) if len({i for i, c in enumerate(chunks) if any(group[r] == g for r in c)}) > 1]
    assert split == []  # groups of <= 3 rows are never split across micro-batches
    assert [r for c in learner._chunks(b) for r in c.tolist()][:3] == [0, 2, 5]  # group 0 first, together
    one = Learner(tiny, torch.optim.SGD(tiny.parameters(), lr=0.0), None, algo, temperature=1.0, max_new_tokens=7,
                  dtype="fp32", micro_batch_size=2)  # fmt: skip
    assert all(len(c) <= 2 for c in one._chunks(b))  # group 0 (3 rows) is split, nothing is larger


def test_learner_creates_its_tensors_on_the_model_device(tiny, monkeypatch):
    """Default device meta: any tensor made without the model's device breaks the update.

    `Rollouts.select` (row selection of the CPU batch, not learner code) runs with the default
    device restored: its `torch.as_tensor(index)` would otherwise move a CPU index to meta."""
    select = Rollouts.select

    def cpu_select(self, index):
        with torch.device("cpu"):
            return select(self, index)

    monkeypatch.setattr(Rollouts, "select", cpu_select)
    algo = resolve_algo({"preset": "grpo"})  # with its KL loss: ref_logprobs move too
    b = _batch(tiny.config.vocab_size)
    model = copy.deepcopy(tiny)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    learner = Learner(model, opt, None, algo, temperature=1.0, max_new_tokens=7, dtype="bf16", micro_batch_size=4)
    with torch.device("meta"):
        learner.fill_logprobs(b)
        metrics = learner.update(b, torch.Generator(device="cpu").manual_seed(0))
    assert b.old_logprobs.device.type == "cpu" and torch.isfinite(b.old_logprobs).all()
    assert all(p.device.type == "cpu" and torch.isfinite(p).all() for p in model.parameters())
    assert all(s.device.type == "cpu" for st in opt.state.values() for s in st.values())
    assert metrics["learn/grad_norm"] > 0 and metrics["memory/peak_gb"] > 0.01


def test_to_device_moves_every_tensor_field():
    b = _batch(100)
    moved = to_device(b, torch.device("cpu"))
    assert moved.completion_ids is b.completion_ids  # no copy when already there
    assert len(moved.prompt_ids) == len(b) and moved.advantages is b.advantages


def test_learner_dtype_auto_and_device_config_errors(tiny):
    algo = resolve_algo({"preset": "grpo"})
    learner = Learner(tiny, torch.optim.SGD(tiny.parameters(), lr=0.0), None, algo, temperature=1.0, max_new_tokens=4,
                      dtype="auto")  # fmt: skip
    assert learner.dtype in ("bf16", "fp32") and learner.autocast == (learner.dtype == "bf16")
    assert validate_config({"model": {"dtype": "auto"}, "engine": {"dtype": "auto"}}).model.dtype == "auto"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            validate_config({"device": "cuda"})
        with pytest.raises(ConfigError, match="CUDA is not available"):
            validate_config({"device": "cuda:1"})


@pytest.mark.parametrize("share", [False, True])
def test_cpu_gqa_attention_switch_equals_sdpa_and_restores_the_model(tiny, monkeypatch, share):
    """Short sequences on CPU run covey's grouped-query attention (faster backward than CPU flash);
    the result equals the sdpa kernel's in fp32 and the model keeps its own setting afterwards."""
    from covey.learner import attention

    b = _batch(tiny.config.vocab_size, seed=1)
    calls: list[str] = []
    real = type(tiny).set_attn_implementation
    monkeypatch.setattr(type(tiny), "set_attn_implementation", lambda self, impl: (calls.append(impl), real(self, impl))[1])
    out = {}
    for limit in (attention.MAX_SCORES, 0):  # default (gqa here), then sdpa
        monkeypatch.setattr(attention, "MAX_SCORES", limit)
        tiny.zero_grad(set_to_none=True)
        lp, _ = completion_logprobs(tiny, b.prompt_ids, b.completion_ids, b.completion_mask, share_prompts=share)
        (lp * torch.linspace(-1, 1, lp.shape[1])).sum().backward()
        out[limit] = (lp.detach(), _grads(tiny))
        assert tiny.config._attn_implementation == "sdpa"
    assert calls == [attention.NAME, "sdpa"]  # switched for the first call only, and restored
    (lp0, g0), (lp1, g1) = out.values()
    assert (lp0 - lp1).abs().max() < 1e-5
    for k in g0:
        assert float((g0[k] - g1[k]).abs().max()) <= 1e-5 * max(float(g0[k].abs().max()), 1e-6), k


def test_gqa_attention_equals_eager_attention_with_masks_and_without():
    """The kernel against HF's eager attention (repeat_kv + softmax) on random heads: an additive
    padding mask, no mask (causal, queries at the last positions), and dropout off in eval."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    from covey.learner.attention import gqa_attention

    g = torch.Generator().manual_seed(0)
    module = torch.nn.Module().eval()
    module.num_key_value_groups = 3
    q, k, v = torch.randn(2, 6, 4, 8, generator=g), torch.randn(2, 2, 7, 8, generator=g), torch.randn(2, 2, 7, 8, generator=g)
    causal = torch.ones(4, 7, dtype=torch.bool).tril(3)  # query i sits at position 3 + i
    pad = torch.ones(2, 7, dtype=torch.bool)
    pad[0, :2] = False  # left padding in row 0
    allowed = causal[None, None] & pad[:, None, None]
    additive = torch.zeros(2, 1, 4, 7).masked_fill(~allowed, torch.finfo(torch.float32).min)
    for mask, ref_mask in ((additive, additive), (None, torch.zeros(1, 1, 4, 7).masked_fill(~causal, float("-inf")))):
        out, _ = gqa_attention(module, q, k, v, mask, scaling=0.3)
        ref, _ = eager_attention_forward(module, q, k, v, ref_mask, scaling=0.3)
        assert out.shape == (2, 4, 6, 8)
        assert (out - ref).abs().max() < 1e-6
    with pytest.raises(NotImplementedError, match="sliding_window"):
        gqa_attention(module, q, k, v, None, sliding_window=4)


def test_gradient_checkpointing_keeps_the_model_kernel(tiny):
    """Checkpointing recomputes the forward during backward, after the kernel switch has ended: the
    learner must not switch then (a different kernel breaks the recompute check)."""
    model = copy.deepcopy(tiny).train()
    b = _batch(model.config.vocab_size, seed=2)
    ref, _ = completion_logprobs(model, b.prompt_ids, b.completion_ids, b.completion_mask)
    ref.sum().backward()
    want = _grads(model)
    model.zero_grad(set_to_none=True)
    model.gradient_checkpointing_enable()
    lp, _ = completion_logprobs(model, b.prompt_ids, b.completion_ids, b.completion_mask)
    lp.sum().backward()
    assert (lp - ref).abs().max() < 1e-5
    got = _grads(model)
    for k in want:
        assert float((want[k] - got[k]).abs().max()) <= 1e-5 * max(float(want[k].abs().max()), 1e-6), k
