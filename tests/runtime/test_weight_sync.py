"""Weight sync transports (covey.runtime.weight_sync): in-process, disk (safetensors + READY marker,
LoRA adapter only) and the Ray object store, on tiny-llama."""

import json

import pytest
import torch
from safetensors import safe_open

from covey.runtime.weight_sync import DiskSync, InProcessSync, ObjectStoreSync, merge_lora
from covey.train.config import LoraConfig, ModelConfig
from covey.models.state import engine_state
from covey.train.setup import load_policy


def _model(lora=False, seed=0):
    torch.manual_seed(seed)
    model, _ = load_policy(ModelConfig(name="tiny-llama", lora=LoraConfig(r=4, alpha=8.0) if lora else None))
    if lora:  # B starts at zero: give the adapter a non-zero update
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.05)
    return model


def _same(a: dict, b: dict, atol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k].float(), b[k].float(), atol=atol, rtol=0), k


def test_inprocess_hands_back_a_detached_copy():
    model = _model()
    state, version = InProcessSync().pull(InProcessSync().push(model, 3))
    assert version == 3
    _same(state, model.state_dict())
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # the learner keeps training: the pushed copy does not change
    assert not torch.equal(next(iter(state.values())), next(model.parameters()))


def test_disk_round_trip_marker_and_keep(tmp_path):
    model = _model()
    sync = DiskSync(tmp_path, keep=2, timeout_s=0.2)
    handles = [sync.push(model, v) for v in (1, 2, 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v00000002", "v00000003"]  # keep=2: v1 removed
    state, version = sync.pull(handles[-1])
    assert version == 3
    _same(state, model.state_dict())
    (tmp_path / "v00000003" / "READY").unlink()  # a version whose marker is missing is not read
    with pytest.raises(TimeoutError, match="no READY marker"):
        sync.pull(handles[-1])


def test_disk_writes_only_the_lora_adapter_and_the_reader_merges_it(tmp_path):
    model = _model(lora=True)
    handle = DiskSync(tmp_path).push(model, 5)
    with safe_open(f"{handle}/weights.safetensors", framework="pt") as f:
        keys, meta = list(f.keys()), f.metadata()
    assert keys and all(k.endswith((".lora_A", ".lora_B")) for k in keys)
    scales = json.loads(meta["scales"])
    assert meta["kind"] == "lora" and set(scales.values()) == {2.0}  # alpha / r = 8 / 4
    base = {k: v.detach().clone() for k, v in model.get_base_model().state_dict().items() if "lora_" not in k}
    base = {k.replace(".base_layer.", "."): v for k, v in base.items()}
    state, version = DiskSync(tmp_path, base=base).pull(handle)
    assert version == 5
    _same(state, {k: v.detach() for k, v in engine_state(model).items()}, atol=1e-6)
    with pytest.raises(ValueError, match="needs its base weights"):
        DiskSync(tmp_path).pull(handle)


def test_merge_lora_by_hand():
    base = {"l.weight": torch.tensor([[1.0, 0.0], [0.0, 1.0]]), "b": torch.tensor([3.0])}
    adapter = {"l.lora_A": torch.tensor([[1.0, 2.0]]), "l.lora_B": torch.tensor([[1.0], [-1.0]])}
    out = merge_lora(base, adapter, {"l": 0.5})
    assert torch.equal(out["l.weight"], torch.tensor([[1.5, 1.0], [-0.5, 0.0]]))
    assert out["b"] is base["b"]


@pytest.mark.ray
def test_object_store_round_trip_through_an_actor(local_ray):
    ray = local_ray
    model = _model()
    sync = ObjectStoreSync(timeout_s=60)
    handle = sync.push(model, 7)

    @ray.remote(num_cpus=0)
    def reader(handle):
        state, version = ObjectStoreSync(timeout_s=60).pull(handle)
        return {k: float(v.double().sum()) for k, v in state.items()}, version

    sums, version = ray.get(reader.remote(handle), timeout=60)
    assert version == 7
    assert sums == {k: float(v.double().sum()) for k, v in model.state_dict().items()}


def _mixed_state() -> dict[str, torch.Tensor]:
    """fp32 and bf16 tensors, one larger than a bucket, odd shapes, a 0-d tensor."""
    g = torch.Generator().manual_seed(0)
    return {"a": torch.randn(3, 5, generator=g), "big": torch.randn(300, generator=g), "h": torch.randn(7, generator=g).bfloat16(),
            "s": torch.tensor(2.5), "b": torch.randn(2, 2, 2, generator=g)}  # fmt: skip


@pytest.mark.ray
def test_broadcast_gives_the_engine_the_object_store_weights_bit_for_bit(local_ray):
    """Sender (this process, rank 0) and two receiving actors in one gloo group; buckets of 512 bytes
    (the 1200-byte tensor goes alone); every tensor arrives with its dtype, shape and bits, equal to
    what object_store delivers; bytes and seconds recorded."""
    from covey.runtime.weight_sync import BroadcastSync

    ray = local_ray
    state = _mixed_state()

    @ray.remote(num_cpus=0)
    class Receiver:
        def __init__(self, sync):
            self.sync = sync

        def connect(self, rank, world, host, port):
            self.sync.connect(rank, world, host, port)

        def pull(self, handle):
            return self.sync.pull(handle)

    sync = BroadcastSync(timeout_s=60, bucket_bytes=512)
    actors = [Receiver.remote(sync) for _ in range(2)]
    host, port = sync.address()
    refs = [a.connect.remote(i + 1, 3, host, port) for i, a in enumerate(actors)]
    sync.connect(0, 3, host, port)
    ray.get(refs, timeout=60)
    handle = sync.push(state, 3)
    assert len(handle["buckets"]) >= 3 and ["big"] in [[e[0] for e in b] for b in handle["buckets"]]
    refs = [a.pull.remote(handle) for a in actors]
    sync.send(handle)
    want, _ = ObjectStoreSync(timeout_s=60).pull(ObjectStoreSync(timeout_s=60).push(state, 3))
    for got, version in ray.get(refs, timeout=60):
        assert version == 3 and got.keys() == want.keys()
        for k, v in want.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape and torch.equal(got[k], v), k
    assert sync.last["weight_sync/bytes"] == sum(t.numel() * t.element_size() for t in state.values())
    assert sync.last["time/weight_sync"] > 0
    for a in actors:
        ray.kill(a)
    sync.close()
