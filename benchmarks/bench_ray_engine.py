"""What a Ray engine worker would cost: a probe for the `ray` executor (not built yet; docs/runtime.md).

One `TorchEngine` in a Ray actor against the same engine in the driver, on one machine. It prints
one JSON object with these measurements:
- `ray.init` time and the time until the actor has loaded the model;
- generate round trip through the actor against a local generate (the same seeded tokens?);
- weight sync by `ray.put` + an actor call;
- how fast a killed actor is reported to a waiting `ray.get`. It must be an error, never a hang.

Ray is an optional extra (`pip install covey[ray]`): run it from an environment that has it, e.g.

    PYTHONPATH=src /path/to/venv-with-ray/bin/python benchmarks/bench_ray_engine.py --model tiny-llama
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from covey.engine.base import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=120.0, help="every ray.get waits at most this long")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out: dict = {}
    t = time.perf_counter()
    import ray

    out["import_s"] = time.perf_counter() - t

    @ray.remote(num_cpus=1)
    class EngineWorker:
        def __init__(self, model_name: str):
            import torch

            from covey.engine.torch_engine import TorchEngine
            from covey.train.config import ModelConfig
            from covey.train.setup import load_policy

            torch.set_num_threads(1)
            model, tok = load_policy(ModelConfig(name=model_name, dtype="fp32"), device="cpu")
            self.engine = TorchEngine(model, tok, dtype="fp32")

        def version(self):
            return self.engine.version

        def generate(self, prompts, n, sampling):
            return self.engine.generate(prompts, n, sampling)

        def load_weights(self, state, version):
            self.engine.load_weights(state, version=version)
            return self.engine.version

    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    out["ray_init_s"] = time.perf_counter() - t
    try:
        t = time.perf_counter()
        worker = EngineWorker.remote(args.model)
        ray.get(worker.version.remote(), timeout=args.timeout)  # returns once the model is loaded
        out["actor_ready_s"] = time.perf_counter() - t

        from covey.engine.torch_engine import TorchEngine
        from covey.train.config import ModelConfig
        from covey.train.setup import load_policy

        model, tok = load_policy(ModelConfig(name=args.model, dtype="fp32"), device="cpu")
        local = TorchEngine(model, tok, dtype="fp32")
        gen = torch.Generator().manual_seed(0)
        prompts = [torch.randint(5, 100, (12,), generator=gen) for _ in range(args.prompts)]
        sp = SamplingParams(max_new_tokens=args.new_tokens, seed=1, ignore_eos=True)
        local.generate(prompts, args.group, sp)  # warm-up, both sides
        ray.get(worker.generate.remote(prompts, args.group, sp), timeout=args.timeout)
        t = time.perf_counter()
        mine = local.generate(prompts, args.group, sp)
        out["local_generate_s"] = time.perf_counter() - t
        t = time.perf_counter()
        theirs = ray.get(worker.generate.remote(prompts, args.group, sp), timeout=args.timeout)
        out["actor_generate_s"] = time.perf_counter() - t
        out["same_tokens"] = bool(torch.equal(mine.completion_ids, theirs.completion_ids))

        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        out["weights_mb"] = sum(v.numel() * v.element_size() for v in state.values()) / 2**20
        t = time.perf_counter()
        out["version_after_sync"] = ray.get(worker.load_weights.remote(ray.put(state), 7), timeout=args.timeout)
        out["weight_sync_s"] = time.perf_counter() - t

        pending = worker.generate.remote(prompts, args.group, SamplingParams(max_new_tokens=200, seed=2, ignore_eos=True))
        time.sleep(0.3)
        ray.kill(worker)  # a dead engine actor while the driver waits on it
        t = time.perf_counter()
        try:
            ray.get(pending, timeout=args.timeout)
            out["killed_actor"] = "no error (the task had finished)"
        except Exception as e:  # ray.exceptions.ActorDiedError
            out["killed_actor"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        out["killed_actor_reported_s"] = time.perf_counter() - t
    finally:
        t = time.perf_counter()
        ray.shutdown()
        out["ray_shutdown_s"] = time.perf_counter() - t
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
