"""A/B of the learner's attention kernel: forward + backward of `completion_logprobs` with HF "sdpa"
vs "eager" attention (the CPU learner now picks eager for short sequences by itself,
`covey.engine.logprobs.EAGER_MAX_SCORES`; the sdpa arm turns that off), at the step-vs-trl shapes (8 arithmetic prompts x 8 completions x 24 tokens,
shared prompts, bf16 autocast, 1 torch thread), alternating in one process; prints each repeat's
seconds, the ratio of the minimums and the largest log-prob difference between the two kernels.

    .venv/bin/python benchmarks/ab_learner_attention.py tiny-llama 5
    .venv/bin/python benchmarks/ab_learner_attention.py smollm2-135m-instruct 3
"""

from __future__ import annotations

import sys
import time

import torch

from covey.engine import logprobs
from covey.engine.logprobs import completion_logprobs
from covey.models import apply_chat, load
from covey.tasks import get_task


def main(name: str, repeats: int) -> None:
    torch.set_num_threads(1)
    model, tok = load(name)
    model.float().train()
    items = get_task("arithmetic", n_train=8, n_test=8).examples("train")
    prompts = [torch.tensor(apply_chat(tok, it["prompt"])) for it in items]
    rows = [p for p in prompts for _ in range(8)]
    completions = torch.randint(0, model.config.vocab_size, (64, 24), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(64, 24)
    seconds: dict[str, list[float]] = {"sdpa": [], "eager": []}
    logps: dict[str, torch.Tensor] = {}
    default = logprobs.EAGER_MAX_SCORES
    for _ in range(repeats):
        for impl in seconds:
            model.set_attn_implementation(impl)
            logprobs.EAGER_MAX_SCORES = default if impl == "eager" else 0  # sdpa arm: no automatic switch
            model.zero_grad(set_to_none=True)
            t = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lp, _ = completion_logprobs(model, rows, completions, mask)
            lp.sum().backward()
            seconds[impl].append(round(time.perf_counter() - t, 3))
            logps.setdefault(impl, lp.detach())
    print(f"{name}: sdpa {seconds['sdpa']} s, eager {seconds['eager']} s, "
          f"min ratio sdpa/eager {min(seconds['sdpa']) / min(seconds['eager']):.2f}, "
          f"max |logp diff| {float((logps['sdpa'] - logps['eager']).abs().max()):.3g}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama", int(sys.argv[2]) if len(sys.argv) > 2 else 5)
