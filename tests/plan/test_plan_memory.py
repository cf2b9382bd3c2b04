"""The plan's arithmetic on hand-computed cases: bytes per parameter by sharding, offload, LoRA, the KV
cache, activations, and where each pool sits."""

import dataclasses

import pytest

from covey.models.loading import bundled_config, model_config
from covey.plan import Architecture, GiB, Settings, engine_pool, learner_pool
from covey.plan.memory import activation_bytes
from covey.plan.planner import _devices

Q7 = Architecture.from_config(bundled_config("Qwen/Qwen2.5-7B-Instruct"))
P7 = 7_615_616_512
TINY = Architecture.from_config(model_config("tiny-llama"))


def _s(**kw) -> Settings:
    base = dict(device="cuda", dtype="bf16", prompts_per_step=64, group_size=8, prompt_tokens=512, new_tokens=1024,
                micro_batch_size=4, gradient_checkpointing=True, executor="ray", learner_workers=8, engine_workers=8)  # fmt: skip
    return Settings(**{**base, **kw})


def _item(pool, name):
    return next(i for i in pool.items if i.name == name)


def test_a_7b_under_ddp_needs_16_bytes_per_parameter_per_rank_and_does_not_fit_80_gib():
    pool = learner_pool(Q7, _s(sharding="ddp"))
    static = pool.phase("static")
    assert static == 16 * P7  # 4 (fp32 weights) + 4 (gradients) + 8 (AdamW moments)
    assert round(static / GiB, 1) == 113.5 and pool.peak > 80 * GiB


def test_fsdp2_over_8_ranks_divides_the_static_state_by_8_and_fits():
    pool = learner_pool(Q7, _s(sharding="fsdp2"))
    assert pool.phase("static") == 16 * P7 / 8  # 14.2 GiB
    gathered = _item(pool, "gathered units").bytes
    assert gathered == 2 * (Q7.root + 2 * Q7.layer)  # bf16 root (embedding, norm, head) and two layers
    assert pool.peak < 40 * GiB
    twice = learner_pool(Q7, _s(sharding="fsdp2", learner_workers=16))
    for name in ("weights", "gradients", "optimizer state"):
        assert _item(pool, name).bytes == 2 * _item(twice, name).bytes


def test_offload_moves_the_sharded_state_to_host_memory():
    on, off = learner_pool(Q7, _s(sharding="fsdp2")), learner_pool(Q7, _s(sharding="fsdp2", fsdp_offload=True))
    assert off.phase("static") == 0 and off.host == on.phase("static") == 2 * P7
    assert off.peak == on.peak - 2 * P7


def test_lora_trains_only_the_adapters():
    r = 16
    pool = learner_pool(Q7, _s(sharding="ddp", lora_rank=r))
    h, i, q, kv = 3584, 18944, 3584, 512
    adapters = 28 * r * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))  # q, k, v, o, gate, up, down
    assert _item(pool, "weights").bytes == 4 * (P7 + adapters)
    assert _item(pool, "gradients").bytes == 4 * adapters and _item(pool, "optimizer state").bytes == 8 * adapters
    assert pool.peak < 80 * GiB


def test_a_reference_copy_only_with_a_kl_term_and_without_lora():
    with_ref = learner_pool(Q7, _s(sharding="fsdp2", reference=True))
    assert _item(with_ref, "reference model").bytes == 4 * P7 / 8
    assert not [i for i in learner_pool(Q7, _s(reference=True, lora_rank=8)).items if i.name == "reference model"]


def test_ddp_ranks_add_the_flat_all_reduce_buffer_at_the_step():
    pool = learner_pool(TINY, _s(sharding="ddp", learner_workers=2))
    assert _item(pool, "all-reduce buffer").bytes == 4 * TINY.total and _item(pool, "all-reduce buffer").phase == "step"
    assert not [i for i in learner_pool(TINY, _s(executor="inline")).items if i.phase == "step"]


def test_kv_cache_is_a_wave_of_rows_times_tokens_times_layers_kv_heads_and_head_dim():
    pool = engine_pool(Q7, _s(), 80 * GiB)
    # 64 prompts / 8 actors = 8 prompts x 8 = 64 rows; a row: 1536 tokens x 28 layers x 2 x 4 heads x 128 x 2 B
    row = 1536 * 28 * 2 * 4 * 128 * 2
    assert row == 88_080_384
    # max_cache_bytes 2 GiB -> 24 rows -> 3 whole prompts of 8 rows per wave
    assert _item(pool, "KV cache").bytes == 24 * row
    assert _item(pool, "KV cache").note == "24 of 64 rows x 1536 tokens"
    assert _item(pool, "model copy").bytes == 4 * P7 and _item(pool, "bf16 weights").bytes == 2 * P7


def test_vllm_takes_its_share_of_the_device():
    pool = engine_pool(Q7, _s(engine="vllm", vllm_memory_fraction=0.5), 80 * GiB)
    assert pool.peak == 40 * GiB and _item(pool, "weights").bytes == 2 * P7
    assert "raise gpu_memory_utilization" not in pool.notes[0]
    small = engine_pool(Q7, _s(engine="vllm", vllm_memory_fraction=0.1), 80 * GiB)
    assert "raise gpu_memory_utilization" in small.notes[0]


def test_activations_of_a_hand_counted_micro_batch():
    # tiny-llama (H 192, I 512, 6/2 heads of 32, 4 layers), bf16 on CUDA, 2 rows of one group, prompt 3, completion 4
    s = Settings(device="cuda", dtype="bf16", prompts_per_step=1, group_size=2, prompt_tokens=3, new_tokens=4)
    per_token = 16 * 192 + 2 * (5 * 192 + 192) + 4 * 2 * 512 + 2 * (192 + 2 * 64)  # norms, linear inputs, MLP, q/k/v
    tokens = 1 * 3 + 2 * 4  # the shared prompt once, each row's completion
    attention = tokens * (2 * 192 + 4 * 6)  # fused kernel: output + log-sum-exp
    kv_rows = 2 * 2 * 2 * 64 * 7 * 3  # each row's K and V of 7 keys, repeated to the 6 query heads (3 x)
    layer = tokens * per_token + attention + kv_rows
    head_inputs = tokens * 8 * 192 + 2 * 4 * 4 * 192  # final norm; the head's input rows
    assert activation_bytes(TINY, s, 2) == (4 * layer + head_inputs, "1 prompt(s) x 3 + 2 rows x 4 tokens (shared prompts)")
    ckpt = dataclasses.replace(s, gradient_checkpointing=True)  # no sharing; each layer's fp32 input + one layer
    tokens = 2 * 7
    layer = tokens * per_token + tokens * (2 * 192 + 4 * 6)  # the one layer being recomputed
    assert activation_bytes(TINY, ckpt, 2)[0] == 4 * tokens * 4 * 192 + layer + tokens * 8 * 192 + 2 * 4 * 4 * 192


def test_cpu_short_sequences_keep_the_score_matrices():
    s = Settings(device="cpu", dtype="bf16", prompts_per_step=1, group_size=1, prompt_tokens=3, new_tokens=4)
    cuda = dataclasses.replace(s, device="cuda")
    # one row of 7 tokens: 6 heads x 7 x 7 scores, fp32 softmax + bf16 probabilities, instead of output + lse
    diff = activation_bytes(TINY, s, 1)[0] - activation_bytes(TINY, cuda, 1)[0]
    assert diff == 4 * (6 * 7 * 7 * (4 + 2) - 7 * (2 * 192 + 4 * 6))


@pytest.mark.parametrize("executor, expect", [("inline", "max"), ("thread", "sum")])
def test_one_process_devices_hold_both_pools(executor, expect):
    s = _s(executor=executor, sharding="ddp")
    learner, engine = learner_pool(TINY, s), engine_pool(TINY, s, 80 * GiB)
    (device,) = _devices(s, learner, engine, 80 * GiB)
    fixed = learner.phase("static") + engine.phase("static")
    turns = (learner.transient, engine.transient)
    assert device.bytes == fixed + (max(turns) if expect == "max" else sum(turns))


def test_colocated_ray_devices_add_the_two_peaks():
    s = _s(colocate=True, learner_workers=8, engine_workers=4, sharding="fsdp2")
    learner, engine = learner_pool(Q7, s), engine_pool(Q7, s, 80 * GiB)
    shared, alone = _devices(s, learner, engine, 80 * GiB)
    assert (shared.count, shared.bytes) == (4, learner.peak + engine.peak)
    assert (alone.count, alone.bytes) == (4, learner.peak)
    separate = _devices(dataclasses.replace(s, colocate=False), learner, engine, 80 * GiB)
    assert [(d.name, d.count) for d in separate] == [("learner device", 8), ("engine device", 4)]


def test_fsdp2_gathers_bf16_on_cuda_and_fp32_with_autocast_copies_elsewhere():
    # covey.runtime.sharded: MixedPrecisionPolicy(bf16, fp32) on CUDA; on the CPU fp32 shards and the learner's autocast
    cuda = learner_pool(TINY, _s(sharding="fsdp2", learner_workers=2))
    cpu = learner_pool(TINY, _s(sharding="fsdp2", learner_workers=2, device="cpu"))
    assert _item(cuda, "gathered units").bytes == 2 * (TINY.root + 2 * TINY.layer)
    assert _item(cpu, "gathered units").bytes == 4 * (TINY.root + 2 * TINY.layer)
    assert not [i for i in cuda.items if i.name == "bf16 weight copies"]
    assert _item(cpu, "bf16 weight copies").bytes == 2 * TINY.layers * TINY.layer_matmul
