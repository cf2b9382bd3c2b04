"""`covey plan` against what tiny-llama's learner update and engine actually hold on the CPU (within 20%).

Measured by `covey.bench.memory` (live tensor bytes, like CUDA's max_memory_allocated): weights, AdamW
state and batch before the update, plus the high-water mark of what the update allocates. SmolLM2's
figures are in benchmarks/README.md (benchmarks/plan_check.py).
"""

import pytest

from covey.bench.memory import engine_peak, learner_peak
from covey.plan import plan_config
from covey.train.config import load_config

BASE = ["model.name=tiny-llama", "model.dtype=bf16", "engine.dtype=bf16", "device=cpu", "algo.kl=null",
        "rollout.prompts_per_step=8", "rollout.group_size=8", "sampling.max_new_tokens=64", "optim.micro_batch_size=16"]  # fmt: skip
PROMPT = 40


@pytest.mark.parametrize("extra", [[], ["model.gradient_checkpointing=true"], ["model.lora={r: 16}"],
                                   ["algo.kl={name: k3, coef: 0.04}", "optim.micro_batch_size=64"]],
                         ids=["base", "checkpointing", "lora", "kl-whole-batch"])  # fmt: skip
def test_learner_plan_is_within_20_percent_of_the_measured_update(extra):
    overrides = BASE + extra
    planned = plan_config(None, overrides, prompt_tokens=PROMPT).learner.peak
    measured = learner_peak(load_config(None, overrides), PROMPT)["peak"]
    assert 0.8 <= planned / measured <= 1.2, (planned, measured)


def test_engine_plan_is_within_20_percent_of_the_measured_generate():
    planned = plan_config(None, BASE, prompt_tokens=PROMPT).engine.peak
    measured = engine_peak(load_config(None, BASE), PROMPT)["peak"]
    assert 0.8 <= planned / measured <= 1.2, (planned, measured)


def test_the_measure_counts_what_an_update_allocates():
    """LiveBytes sees new storages, not views of old ones, and drops them when freed."""
    import torch

    from covey.bench.memory import LiveBytes

    w = torch.ones(1000)
    with LiveBytes() as live:
        v = w[10:]  # a view: no new memory
        a = torch.ones(2000)  # 8000 bytes
        b = a * 2  # 8000 more: peak 16000
        del a, b
        c = w.detach()  # the old storage again
    assert (live.peak, live.live) == (16000, 0) and v is not None and c is not None
