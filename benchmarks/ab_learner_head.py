"""A/B of the learner's head: forward + backward of `completion_logprobs` with the fused head
(`covey.engine.logprobs.HeadLogprob`) vs autograd through lm_head -> logsumexp -> gather under
checkpointing (what any head other than a plain nn.Linear gets), alternating in one process, at the
step-vs-trl shapes (8 arithmetic prompts x 8 completions x 24 tokens, bf16 autocast, 1 thread).
Prints each repeat's seconds, the ratio of the minimums, and the log-prob and gradient differences.

    .venv/bin/python benchmarks/ab_learner_head.py smollm2-135m-instruct 3
"""

from __future__ import annotations

import sys
import time

import torch

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
    head = model.get_output_embeddings()
    plain, subclass = type(head), type("Head", (torch.nn.Linear,), {})  # a subclass takes the autograd path
    seconds: dict[str, list[float]] = {"autograd": [], "fused": []}
    results = {}
    for _ in range(repeats):
        for arm in seconds:
            head.__class__ = subclass if arm == "autograd" else plain
            model.zero_grad(set_to_none=True)
            t = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lp, _ = completion_logprobs(model, rows, completions, mask)
            lp.sum().backward()
            seconds[arm].append(round(time.perf_counter() - t, 3))
            results[arm] = (lp.detach(), torch.cat([p.grad.flatten() for p in model.parameters()]))
    head.__class__ = plain
    (lp_a, g_a), (lp_f, g_f) = results["autograd"], results["fused"]
    print(f"{name}: seconds {seconds}; min ratio autograd/fused {min(seconds['autograd']) / min(seconds['fused']):.3f}; "
          f"max |logp diff| {float((lp_a - lp_f).abs().max()):.3g}; "
          f"gradient max-abs diff / max {float((g_a - g_f).abs().max() / g_a.abs().max()):.3g}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama", int(sys.argv[2]) if len(sys.argv) > 2 else 3)
