"""Bad scale settings are one line (`error: ...`, exit 2) from `covey train`, before any model loads:
fsdp2 with one learner, colocate outside Ray or unpaired, offload on the CPU, more GPUs or CPUs than
the Ray cluster has, CUDA on a machine without it, and an unreachable `runtime.ray_address` (within
its timeout, never a hang)."""

import socket
import subprocess
import sys
import time

import pytest
import torch

from tests._kill_resume import ENV

# covey train, with the policy loader replaced by a failure: an error that comes after the model loads fails the test
COVEY = [sys.executable, "-c", "import sys, covey.train.setup as s\n"
         "def loaded(*a, **k): raise SystemExit('the model was loaded')\n"
         "s.load_policy = loaded\nfrom covey.cli import app\nsys.argv[0] = 'covey'\napp()", "train"]
TINY = ["model.name=tiny-llama", "task.name=arithmetic", "steps=1", "log.progress=false", "log.tensorboard=false"]
RAY = ["runtime.executor=ray", "runtime.timeout_s=20"]


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr[-2000:]
    assert "the model was loaded" not in stderr and "Traceback" not in stderr
    return stderr  # (a config error's message follows its `error:` line, indented)


def _fails(tmp_path, *overrides, timeout=120):
    """`covey train` in a new interpreter: (its stderr, seconds)."""
    t0 = time.monotonic()
    out = subprocess.run([*COVEY, *TINY, *overrides, "--run-dir", str(tmp_path / "run")], capture_output=True, text=True,
                         timeout=timeout, env=ENV)  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    return _one_error_line(out.stderr), time.monotonic() - t0


@pytest.fixture
def refused(tmp_path, monkeypatch):
    """`covey train` in this process (typer's runner), the policy loader replaced by a failure: its stderr."""
    import covey.train.setup as setup
    import covey.train.trainer as trainer

    def loaded(*a, **k):
        raise SystemExit("the model was loaded")

    monkeypatch.setattr(setup, "load_policy", loaded)
    monkeypatch.setattr(trainer, "load_policy", loaded)

    def run(*overrides):
        from typer.testing import CliRunner

        from covey.cli import app

        out = CliRunner().invoke(app, ["train", *TINY, *overrides, "--run-dir", str(tmp_path / "run")])
        assert out.exit_code == 2, (out.output[-2000:], out.exception)
        assert not (tmp_path / "run").exists()  # refused before the run folder is made
        return _one_error_line(out.stderr)

    return run


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["runtime.executor=ray", "runtime.sharding=fsdp2"], "sharding: fsdp2 shards the learner over runtime.learner_workers >= 2"),
        (["runtime.colocate=true"], "runtime.colocate needs runtime.executor: ray"),
        ([*RAY, "runtime.colocate=true", "runtime.learner_workers=2"], "learner_workers == runtime.engine_workers >= 2"),
        ([*RAY, "runtime.learner_workers=2", "runtime.sharding=fsdp2", "runtime.fsdp_offload=true", "device=cpu"],
         "fsdp_offload: true offloads a GPU learner"),
        ([*RAY, "runtime.learner_workers=2", "runtime.sharding=ddp", "runtime.fsdp_offload=true"], "needs runtime.sharding: fsdp2"),
    ],
)
def test_refused_at_config_time(refused, overrides, message):
    text = refused(*overrides)
    assert message in text, text


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_machine_without_it(refused):
    text = refused("device=cuda")
    assert "CUDA is not available on this machine" in text, text


def test_an_unreachable_ray_address_fails_within_its_timeout(tmp_path):
    """In a new interpreter (the whole command's time, start-up included)."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text, seconds = _fails(tmp_path, *RAY, f"runtime.ray_address=127.0.0.1:{port}")
    assert f"runtime.ray_address '127.0.0.1:{port}': no Ray cluster answers there" in text, text
    assert seconds < 60


@pytest.mark.ray
def test_more_cpus_than_a_running_cluster_has(tmp_path, local_ray, monkeypatch):
    """The tests' running Ray (2 CPUs) and a run that asks for 64 engine actors of 1 CPU: refused before
    the model loads. (A Ray that covey starts itself gets enough logical CPUs for the run instead.)"""
    import covey.train.trainer as trainer_module
    from covey.train.trainer import Trainer
    from tests._configs import tiny_config

    def loaded(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(trainer_module, "load_policy", loaded)
    with pytest.raises(ValueError, match=r"runtime asks for 64 CPUs in its placement group .* but the Ray cluster has 2"):
        Trainer(tiny_config(tmp_path, *RAY, "runtime.engine_workers=64"), tmp_path / "run")


def test_more_gpus_than_the_cluster_has_is_named():
    """8 engine + 8 learner actors of 1 GPU each on a cluster of 2 nodes x 4 GPUs (the check itself: a
    CPU machine cannot configure CUDA actors)."""
    from covey.runtime.placement import Placement, check_cluster

    gpu = {"num_cpus": 0.0, "num_gpus": 1.0}
    layout = Placement([{"GPU": 1.0}] * 16, list(range(8)), list(range(8, 16)), [], gpu, gpu)
    with pytest.raises(ValueError, match=r"runtime asks for 16 GPUs .* but the Ray cluster has 8 on 2 node\(s\)"):
        check_cluster(layout, {"GPU": 8.0, "CPU": 64.0}, nodes=2)
    check_cluster(layout, {"GPU": 16.0, "CPU": 64.0}, nodes=2)  # fits
    spread = Placement([{"GPU": 1.0}] * 3, [0, 1, 2], [], [], gpu, strategy="STRICT_SPREAD")
    with pytest.raises(ValueError, match="STRICT_SPREAD puts each of the 3 bundles on its own node"):
        check_cluster(spread, {"GPU": 8.0}, nodes=2)


def test_colocated_placement_pairs_engine_and_learner_in_one_bundle(tmp_path):
    """The plan's bundles: separate pools [E engines, L learners, R rewards]; colocated [E pairs, R]."""
    from covey.runtime.placement import plan
    from tests._configs import tiny_config

    base = ["runtime.executor=ray", "runtime.engine_workers=2", "runtime.learner_workers=2", "runtime.reward_workers=1",
            "runtime.actor_cpus=0.5"]  # fmt: skip
    apart = plan(tiny_config(tmp_path, *base))
    assert apart.bundles == [{"CPU": 0.5}] * 5 and (apart.engine, apart.learner, apart.reward) == ([0, 1], [2, 3], [4])
    together = plan(tiny_config(tmp_path, *base, "runtime.colocate=true", "runtime.placement_strategy=SPREAD"))
    assert together.bundles == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 0.5}]
    assert (together.engine, together.learner, together.reward, together.strategy) == ([0, 1], [0, 1], [2], "SPREAD")
