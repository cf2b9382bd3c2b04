"""covey's TorchEngine vs HF generate: prints one JSON line (same as `covey bench generate`).

    .venv/bin/python benchmarks/bench_generate.py --model smollm2-135m-instruct --batch 64 --threads 1
"""

import argparse

from covey.bench.generate import generate_cmd

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "auto"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads for both (0: torch default)")
    ap.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (CUDA when present)")
    a = ap.parse_args()
    generate_cmd(a.model, a.batch, a.prompt_tokens, a.new_tokens, a.dtype, a.repeats, a.threads, a.device)
