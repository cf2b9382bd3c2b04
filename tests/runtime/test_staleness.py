"""StalenessGate (AReaL's admission control), staleness metrics, and the thread executor on fake work."""

import random
import threading
import time

import pytest
import torch

from covey.runtime.staleness import StalenessGate, staleness_metrics
from covey.runtime.thread import GenerationFailed, ThreadExecutor


def test_capacity_matches_the_worked_example_of_the_spec():
    # spec §14: eta=2, v=3, B=4, accepted 14, running 3, max concurrent 8 -> min(8-3, 6*4-17) = 5
    gate = StalenessGate(max_staleness=2, batch_size=4, max_concurrent=8, running=3, accepted=14)
    assert gate.capacity(3) == 5
    gate.running = 6  # concurrency binds: min(8-6, 24-20) = 2
    assert gate.capacity(3) == 2
    gate.running = 3
    assert gate.capacity(2) == 3  # an older version: min(5, 20-17)
    assert gate.capacity(1) == -1  # over the staleness budget: min(5, 16-17)


def test_zero_staleness_admits_one_batch_per_version():
    gate = StalenessGate(max_staleness=0)
    assert gate.admit(0) and not gate.admit(0)  # batch 0 runs; nothing more at version 0
    gate.finish()
    assert not gate.admit(0)  # batch 1 needs version 1
    assert gate.admit(1) and (gate.running, gate.accepted) == (1, 1)


def test_staleness_two_admits_batches_ahead_then_paces():
    gate = StalenessGate(max_staleness=2)
    for k in range(3):  # batches 0, 1, 2 at version 0: lags 0, 1, 2
        assert gate.admit(0)
        gate.finish()
    assert not gate.admit(0)  # batch 3 at version 0 would be 3 behind
    assert gate.admit(1)


def test_rejected_units_free_their_slot_and_restore_counts_the_carried():
    gate = StalenessGate(max_staleness=0)
    assert gate.admit(0)
    gate.finish(accepted=False)
    assert gate.rejected == 1 and gate.admit(0)  # the rejected unit is regenerated at the same version
    gate.restore(5, carried=1)
    assert (gate.accepted, gate.running) == (6, 0)
    assert not gate.admit(5)  # batch 5 is the carried one; batch 6 needs version 6
    assert gate.admit(6) and gate.running == 1 and gate.capacity(6) == 0
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessGate(max_staleness=-1)
    with pytest.raises(RuntimeError, match="without a running"):
        StalenessGate(max_staleness=0).finish()


@pytest.mark.parametrize("eta", [0, 1, 2, 3])
def test_the_bound_holds_and_is_reached_under_random_interleavings(eta):
    """A producer and a consumer in random order: every consumed batch k was made at a version
    >= k - eta, and the producer runs ahead as far as the bound allows (it paces, never drops)."""
    rng = random.Random(eta)
    worst = 0
    for _ in range(200):
        gate, version, made, ready = StalenessGate(max_staleness=eta), 0, 0, []
        running: list[int] = []  # behaviour versions of the units being generated
        while version < 30:
            move = rng.random()
            if move < 0.4 and gate.admit(version):
                running.append(version)
            elif move < 0.7 and running:
                ready.append((made, running.pop(0)))
                made += 1
                gate.finish()
            elif ready:
                k, behaviour = ready.pop(0)
                assert k == version and k - behaviour <= eta  # trained at step k with weights version k
                worst = max(worst, k - behaviour)
                version += 1
            assert gate.running + gate.accepted - version <= eta + 1  # started, not yet trained
    assert worst == eta  # the producer reaches the bound (it paces, it is not stricter)


def test_staleness_metrics_histogram_by_hand():
    versions = torch.tensor([[3, 3, 2, 0], [1, 0, 0, 0]])
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 1]])
    m = staleness_metrics(3, 2, versions, mask)
    # lags of the 7 tokens: 0 0 1 2 3 3 3
    assert m["async/staleness"] == 1.0
    assert m["async/token_lag_mean"] == pytest.approx(12 / 7)
    assert m["async/token_lag_max"] == 3.0
    assert m["async/token_lag/0"] == pytest.approx(2 / 7) and m["async/token_lag/1"] == pytest.approx(1 / 7)
    assert m["async/token_lag/3"] == pytest.approx(3 / 7) and m["async/token_lag/4+"] == 0.0
    assert staleness_metrics(3, 3, None, None) == {"async/staleness": 0.0}
    m = staleness_metrics(9, 0, versions, mask, max_lag=2)
    assert m["async/token_lag/2+"] == 1.0


def _executor(eta, produce, timeout_s=5.0):
    return ThreadExecutor(produce, lambda w, v: None, max_staleness=eta, timeout_s=timeout_s)


@pytest.mark.parametrize("eta", [0, 1, 2])
def test_executor_with_random_delays_keeps_order_and_bound(eta):
    rng = random.Random(eta)
    loads = []
    ex = ThreadExecutor(lambda k, v: (f"b{k}", {"k": k}), lambda w, v: loads.append((w, v)),
                        max_staleness=eta, timeout_s=5.0)  # fmt: skip
    lags = []
    for step in range(12):
        batch, metrics, version = ex.next_batch(step)
        assert batch == f"b{step}" and metrics["k"] == step and step - version <= eta
        lags.append(step - version)
        time.sleep(rng.random() * 0.01)  # "training"
        ex.publish(f"w{step + 1}" if step % 3 else None, step + 1)  # some steps change nothing (skipped)
    ex.close()
    assert max(lags) == eta  # the generator ran ahead as far as allowed
    assert all(w == f"w{v}" for w, v in loads)  # loaded weights carry the version they were published with


def test_pause_holds_the_generator_at_a_boundary_and_loads_pending_weights():
    started = []
    ex = ThreadExecutor(lambda k, v: started.append(k) or (k, {}), lambda w, v: started.append(("load", v)),
                        max_staleness=3, timeout_s=5.0)  # fmt: skip
    ex.next_batch(0)
    ex.pause()
    n = len(started)
    ex.publish("w1", 1)
    time.sleep(0.05)
    assert len(started) == n  # nothing starts while paused
    ex.pause()  # pending weights are loaded by the paused caller
    assert started[-1] == ("load", 1)
    state = ex.state_dict()
    assert [r[0] for r in state["ready"]] == list(range(1, state["next"]))
    ex.resume()
    assert ex.next_batch(1)[0] == 1
    ex.close()


def test_a_failing_producer_surfaces_in_the_caller_as_one_line():
    def produce(k, v):
        if k == 1:
            raise ValueError("engine exploded\non two lines")
        return k, {}

    ex = _executor(1, produce)
    ex.next_batch(0)
    with pytest.raises(GenerationFailed) as e:
        ex.next_batch(1)
    assert str(e.value) == ("runtime: the generation thread failed generating batch 1 (step 2) at policy version 0: "
                            "ValueError: engine exploded on two lines")  # fmt: skip
    assert isinstance(e.value.__cause__, ValueError)
    ex.close()


def test_a_hanging_producer_times_out_instead_of_hanging():
    release = threading.Event()
    ex = _executor(0, lambda k, v: release.wait(10) and (k, {}), timeout_s=0.3)
    t = time.perf_counter()
    with pytest.raises(GenerationFailed, match=r"no batch .* within runtime.timeout_s=0.3 s \(it is generating batch 0"):
        ex.next_batch(0)
    with pytest.raises(GenerationFailed, match="did not reach a batch boundary"):
        ex.pause()
    assert time.perf_counter() - t < 3
    release.set()
    ex.close()


def test_the_generator_stops_at_the_runs_last_step_unless_asked_for_more():
    made = []
    ex = ThreadExecutor(lambda k, v: made.append(k) or (k, {}), lambda w, v: None, max_staleness=4, timeout_s=5.0, limit=2)
    assert ex.next_batch(0)[0] == 0
    time.sleep(0.05)
    assert made == [0, 1]  # eta 4 would allow more; the run has 2 steps
    ex.publish(None, 1)
    assert ex.next_batch(1)[0] == 1
    assert ex.next_batch(2)[0] == 2  # a step past the configured ones (the Python API): made on demand
    ex.close()
