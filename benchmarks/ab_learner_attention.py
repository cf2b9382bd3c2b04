"""A/B/C of the learner's attention kernel: forward + backward of `completion_logprobs` with HF "sdpa",
HF "eager" and covey's `gqa_attention` (which the CPU learner picks by itself for short sequences,
`covey.engine.attention`), alternating in one process, at the step-vs-trl shapes (8 arithmetic
prompts x 8 completions x 24 tokens, shared prompts, bf16 autocast, 1 torch thread). Prints each
repeat's seconds, each kernel's speed-up over sdpa (ratio of the minimums) and the largest log-prob
difference from sdpa.

    .venv/bin/python benchmarks/ab_learner_attention.py tiny-llama 5
    .venv/bin/python benchmarks/ab_learner_attention.py smollm2-135m-instruct 3
"""

from __future__ import annotations

import sys
import time

import torch

from covey.engine import attention
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
    seconds: dict[str, list[float]] = {"sdpa": [], "eager": [], "covey_gqa": []}
    logps: dict[str, torch.Tensor] = {}
    default = attention.MAX_SCORES
    for _ in range(repeats):
        for kernel in seconds:
            model.set_attn_implementation("sdpa" if kernel == "covey_gqa" else kernel)
            attention.MAX_SCORES = default if kernel == "covey_gqa" else 0  # only that arm switches
            model.zero_grad(set_to_none=True)
            t = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lp, _ = completion_logprobs(model, rows, completions, mask)
            lp.sum().backward()
            seconds[kernel].append(round(time.perf_counter() - t, 3))
            logps.setdefault(kernel, lp.detach())
    attention.MAX_SCORES = default
    base = min(seconds["sdpa"])
    print(f"{name}: seconds {seconds}; speed-up over sdpa (min) "
          + ", ".join(f"{k} {base / min(v):.2f}x" for k, v in seconds.items())
          + "; max |logp - sdpa| " + ", ".join(f"{k} {float((logps[k] - logps['sdpa']).abs().max()):.3g}" for k in ("eager", "covey_gqa")))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama", int(sys.argv[2]) if len(sys.argv) > 2 else 5)
