"""Weight sync: `broadcast` (a gloo process group, bucketed) against `object_store` (ray.put / ray.get),
the driver's SmolLM2 weights (fp32, as the trainer sends them) to E receiving Ray actors (issue 33).

Each repeat times one whole transfer, from the driver's push until every actor holds the tensors
(the engine's own load_weights is left out: it is the same for both). Transports alternate (object_store,
broadcast, ...) on the same local Ray; the first transfer of each is a warm-up. One JSON line.

    python benchmarks/bench_weight_sync.py [--model smollm2-135m-instruct] [--actors 1] [--repeats 4] [--bucket-mb 256]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import ray


@ray.remote(num_cpus=0)
class Receiver:
    def __init__(self, sync):
        self.sync = sync

    def connect(self, rank, world, host, port):
        self.sync.connect(rank, world, host, port)

    def pull(self, handle) -> int:
        state, _ = self.sync.pull(handle)
        return sum(t.numel() for t in state.values())


def main() -> None:
    from covey.bench.trl import _cpu_name
    from covey.models import load
    from covey.runtime.weight_sync import BroadcastSync, ObjectStoreSync

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--actors", type=int, default=1)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--bucket-mb", type=float, default=256)
    args = p.parse_args()
    load_avg = round(os.getloadavg()[0], 2)
    model, _ = load(args.model)
    model = model.float()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    store = ObjectStoreSync(timeout_s=600)
    bcast = BroadcastSync(timeout_s=600, bucket_bytes=int(args.bucket_mb * 2**20))
    store_actors = [Receiver.remote(store) for _ in range(args.actors)]
    bcast_actors = [Receiver.remote(bcast) for _ in range(args.actors)]
    host, port = bcast.address()
    refs = [a.connect.remote(i + 1, args.actors + 1, host, port) for i, a in enumerate(bcast_actors)]
    bcast.connect(0, args.actors + 1, host, port)
    ray.get(refs)
    times: dict[str, list[float]] = {"object_store": [], "broadcast": []}
    numel = sum(p.numel() for p in model.state_dict().values())
    for i in range(args.repeats + 1):
        for name, sync, actors in (("object_store", store, store_actors), ("broadcast", bcast, bcast_actors)):
            t0 = time.perf_counter()
            handle = sync.push(model, i)
            refs = [a.pull.remote(handle) for a in actors]
            sync.send(handle)
            got = ray.get(refs)
            if i:
                times[name].append(time.perf_counter() - t0)
            assert all(g == numel for g in got), (got, numel)
    med = {k: statistics.median(v) for k, v in times.items()}
    bcast.close()
    ray.shutdown()
    print(json.dumps({
        "bench": "weight-sync", "model": args.model, "actors": args.actors, "bytes": numel * 4, "bucket_mb": args.bucket_mb,
        "machine": _cpu_name(), "load_avg_before_after": [load_avg, round(os.getloadavg()[0], 2)],
        "s_per_sync": {k: [round(x, 3) for x in v] for k, v in times.items()}, "median_s": {k: round(v, 3) for k, v in med.items()},
        "ratio_broadcast_over_object_store": round(med["broadcast"] / med["object_store"], 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
