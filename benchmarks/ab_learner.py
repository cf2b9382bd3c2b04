"""A/B of the learner's kernels: forward + backward of `completion_logprobs` at the step-vs-trl shapes
(8 arithmetic prompts x 8 completions x 24 tokens, shared prompts, bf16 autocast, 1 torch thread),
the arms alternating in one process. Prints each repeat's seconds, the speed-ups (ratio of the
minimums) and how far the arms' log-probs (and gradients) are apart.

attention: HF "sdpa", HF "eager" and covey's `gqa_attention` (which the CPU learner picks by itself
           for short sequences, `covey.learner.attention`; the other arms turn that off).
head:      the fused head (`covey.learner.logprobs.HeadLogprob`) vs autograd through lm_head ->
           logsumexp -> gather under checkpointing (what any head other than a plain nn.Linear gets).

    .venv/bin/python benchmarks/ab_learner.py attention tiny-llama 5
    .venv/bin/python benchmarks/ab_learner.py attention smollm2-135m-instruct 3
    .venv/bin/python benchmarks/ab_learner.py head smollm2-135m-instruct 3
"""

from __future__ import annotations

import sys
import time
from typing import Callable

import torch

from covey.learner import attention
from covey.learner.logprobs import completion_logprobs
from covey.models import apply_chat, load
from covey.tasks import get_task


def _timed(name: str, repeats: int, arms: dict[str, Callable[[torch.nn.Module], None]]):
    """Per arm: seconds of each repeat, and the last repeat's log-probs and flat gradient.
    `arms[arm](model)` sets the model up for that arm before its forward."""
    torch.set_num_threads(1)
    model, tok = load(name)
    model.float().train()
    items = get_task("arithmetic", n_train=8, n_test=8).examples("train")
    prompts = [torch.tensor(apply_chat(tok, it["prompt"])) for it in items]
    rows = [p for p in prompts for _ in range(8)]
    completions = torch.randint(0, model.config.vocab_size, (64, 24), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(64, 24)
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    results = {}
    for _ in range(repeats):
        for arm, setup in arms.items():
            setup(model)
            model.zero_grad(set_to_none=True)
            t = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lp, _ = completion_logprobs(model, rows, completions, mask)
            lp.sum().backward()
            seconds[arm].append(round(time.perf_counter() - t, 3))
            results[arm] = (lp.detach(), torch.cat([p.grad.flatten() for p in model.parameters()]))
    return model, seconds, results


def ab_attention(name: str, repeats: int) -> None:
    default = attention.MAX_SCORES

    def arm(kernel: str):
        def setup(model):
            model.set_attn_implementation("sdpa" if kernel == "covey_gqa" else kernel)
            attention.MAX_SCORES = default if kernel == "covey_gqa" else 0  # only that arm switches
        return setup

    _, seconds, results = _timed(name, repeats, {k: arm(k) for k in ("sdpa", "eager", "covey_gqa")})
    attention.MAX_SCORES = default
    base = min(seconds["sdpa"])
    print(f"{name}: seconds {seconds}; speed-up over sdpa (min) "
          + ", ".join(f"{k} {base / min(v):.2f}x" for k, v in seconds.items())
          + "; max |logp - sdpa| " + ", ".join(f"{k} {float((results[k][0] - results['sdpa'][0]).abs().max()):.3g}" for k in ("eager", "covey_gqa")))  # fmt: skip


def ab_head(name: str, repeats: int) -> None:
    classes = {}

    def arm(kind: str):
        def setup(model):
            head = model.get_output_embeddings()
            plain = classes.setdefault("plain", type(head))
            # a subclass of nn.Linear takes the autograd path
            head.__class__ = plain if kind == "fused" else classes.setdefault("sub", type("Head", (plain,), {}))
        return setup

    model, seconds, results = _timed(name, repeats, {"autograd": arm("autograd"), "fused": arm("fused")})
    model.get_output_embeddings().__class__ = classes["plain"]
    (lp_a, g_a), (lp_f, g_f) = results["autograd"], results["fused"]
    print(f"{name}: seconds {seconds}; min ratio autograd/fused {min(seconds['autograd']) / min(seconds['fused']):.3f}; "
          f"max |logp diff| {float((lp_a - lp_f).abs().max()):.3g}; "
          f"gradient max-abs diff / max {float((g_a - g_f).abs().max() / g_a.abs().max()):.3g}")  # fmt: skip


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "attention"
    if what not in ("attention", "head"):
        sys.exit("usage: ab_learner.py attention|head [model] [repeats]")
    {"attention": ab_attention, "head": ab_head}[what](
        sys.argv[2] if len(sys.argv) > 2 else "tiny-llama", int(sys.argv[3]) if len(sys.argv) > 3 else 3
    )
