"""ShardedLearner (runtime.sharding fsdp2): 2 gloo processes, one AdamW step, equal to the one-process
step within 1e-5 relative (fp32); grpo (ppo_clip, seq-mean-token-mean), gspo (sequence-level ratio),
LoRA (adapters trained, base frozen) and gradient checkpointing; micro-batches of 2 rows, so the
shards run different numbers of micro-batches and the shorter one pads (an all-masked row too).
Per-rank bytes of parameters, gradients and AdamW state measured from the local shards."""


import pytest
import torch
import torch.multiprocessing as mp

from covey.algos.presets import resolve_algo
from covey.learner.learner import Learner
from covey.learner.logprobs import completion_logprobs
from covey.models import load
from tests.learner.test_learner_shared import _batch

CASES = {  # name: (algo, lora, gradient checkpointing)
    "grpo": ({"preset": "grpo"}, False, False),
    "gspo": ({"preset": "gspo"}, False, False),
    "lora": ({"preset": "grpo"}, True, False),
    "checkpointing": ({"preset": "dapo"}, False, True),
}


def _model(lora: bool = False, checkpointing: bool = False):
    model, _ = load("tiny-llama", seed=3, initializer_range=0.1)
    model = model.float()
    if checkpointing:
        model.gradient_checkpointing_enable()
    if lora:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(0)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        with torch.no_grad():  # B = 0 at init would give A no gradient: start from a nonzero adapter
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.05)
    return model


def _prepared_batch(model):
    batch = _batch(model.config.vocab_size, seed=1)
    with torch.no_grad():  # sampled by these weights: ratios near 1, gradients of a realistic size
        lp, _ = completion_logprobs(model, batch.prompt_ids, batch.completion_ids, batch.completion_mask, temperature=1.0)
    batch.behaviour_logprobs = lp * batch.completion_mask
    return batch


def _one_process(name):
    algo, lora, ckpt = CASES[name]
    model = _model(lora, ckpt)
    batch = _prepared_batch(model)
    learner = Learner(**_kw(model, algo))
    before = local_state(model)
    metrics = learner.update(batch, torch.Generator().manual_seed(0))
    from covey.runtime.sharded import local_bytes

    return before, (local_state(model), _moments(model, learner.optimizer)), metrics, local_bytes(model, learner.optimizer)


def _full(t):
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def _moments(model, optimizer):
    """AdamW's first moment of each trainable parameter: (1 - beta1) x the clipped gradient after one step."""
    return {n: _full(optimizer.state[p]["exp_avg"]) for n, p in model.named_parameters() if p.requires_grad}


def local_state(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _rank(rank, world, init, out):
    torch.set_num_threads(1)
    from covey.runtime.data_parallel import init_group
    from covey.runtime.sharded import ShardedLearner, local_bytes, shard_model

    init_group(rank, world, init, backend="gloo")
    results = {}
    for name, (algo, lora, ckpt) in CASES.items():
        model = _model(lora, ckpt)
        batch = _prepared_batch(model)
        if rank == 1:  # a different init on rank 1: sharding starts from rank 0's weights
            with torch.no_grad():
                next(p for p in model.parameters() if p.requires_grad).add_(1.0)
        root = shard_model(model, bf16=False)
        learner = ShardedLearner(root, **_kw(model, algo))
        metrics = learner.update(batch, torch.Generator().manual_seed(0))
        full = {n: _full(p) for n, p in model.named_parameters()}
        results[name] = ((full, _moments(model, learner.optimizer)), metrics, local_bytes(model, learner.optimizer))
    model = _model()  # no signal anywhere: every row is skipped, no rank runs a forward in the update
    batch = _prepared_batch(model)
    batch.advantages = torch.zeros_like(batch.advantages)
    learner = ShardedLearner(shard_model(model, bf16=False), **_kw(model, {"preset": "dapo"}))  # no KL: rows skippable
    learner.fill_logprobs(batch)  # a no-grad forward first (pi_old), as a multi-update run does
    results["zero"] = learner.update(batch, torch.Generator().manual_seed(0))
    torch.save(results, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def _kw(model, algo):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    return dict(model=model, optimizer=opt, scheduler=None, algo=resolve_algo(algo), temperature=1.0, max_new_tokens=7,
                dtype="fp32", micro_batch_size=2, grad_clip=0.5)  # fmt: skip


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp2")
    mp.spawn(_rank, args=(2, f"file://{tmp}/rendezvous", str(tmp)), nprocs=2, join=True)
    return [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.mark.parametrize("name", list(CASES))
def test_one_fsdp2_step_equals_the_one_process_step(two_ranks, name):
    """Weights within 1e-5 of their size (AdamW, lr 1e-6 as RL runs use); since Adam's first step is
    sign-like (it hides a wrong gradient scale, and amplifies float noise where |g| ~ eps), the
    gradient itself is checked through AdamW's first moment, (1 - beta1) x the clipped gradient,
    within 1e-5 of its largest entry; and the loss and the grad norm (before clipping)."""
    before, (ref, ref_m), ref_metrics, _ = _one_process(name)
    assert max(float((ref[n] - before[n]).abs().max()) for n in ref) > 1e-7  # the step moved the weights
    for (full, moments), metrics, _ in (r[name] for r in two_ranks):
        assert full.keys() == ref.keys() and moments.keys() == ref_m.keys()
        for n, w in ref.items():
            assert float((full[n] - w).abs().max()) <= 1e-5 * float(w.abs().max()), (name, n)
        for n, m in ref_m.items():
            scale = float(m.abs().max())
            assert scale > 0 and float((moments[n] - m).abs().max()) <= 1e-5 * scale, (name, n)
        assert metrics["learn/loss"] == pytest.approx(ref_metrics["learn/loss"], rel=1e-5, abs=1e-7)
        assert metrics["learn/grad_norm"] == pytest.approx(ref_metrics["learn/grad_norm"], rel=1e-5)


def test_each_rank_holds_about_half_the_state(two_ranks):
    *_, one = _one_process("grpo")
    for _, _, held in (r["grpo"] for r in two_ranks):
        for part in ("params", "grads", "optimizer"):
            assert one[part] > 0
            assert held[part] <= 0.55 * one[part], (part, held[part], one[part])


def test_a_step_where_every_row_is_skipped_runs_on_every_rank(two_ranks):
    for r in two_ranks:
        assert r["zero"]["learn/grad_norm"] == 0.0 and r["zero"]["learn/loss"] == 0.0
        assert r["zero"]["learn/skipped_rows"] == 1.0
