"""`runtime.executor: ray` (the engine in a Ray actor) on tiny-llama; skipped where Ray is not installed."""

import re

import pytest
import torch

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]

from covey.runtime.thread import GenerationFailed  # noqa: E402
from covey.train.trainer import Trainer  # noqa: E402
from tests.runtime.test_thread_trainer import _cfg, _comparable, _train  # noqa: E402


def test_ray_with_zero_staleness_reproduces_inline_bit_exactly(tmp_path):
    inline, w_inline = _train(_cfg(tmp_path), tmp_path / "inline")
    remote, w_remote = _train(_cfg(tmp_path, "runtime.executor=ray"), tmp_path / "ray")
    assert [_comparable(m) for m in inline] == [_comparable(m) for m in remote]
    for name, p in w_inline.items():
        assert torch.equal(p, w_remote[name]), name


def test_a_killed_engine_actor_is_a_one_line_error_naming_it(tmp_path):
    trainer = Trainer(_cfg(tmp_path, "runtime.executor=ray", "runtime.timeout_s=60"), tmp_path / "run")
    try:
        trainer.step()
        with trainer.paused():  # the generator is between batches: kill the actor before the next one
            ray.kill(trainer.engine._actor)
        with pytest.raises(GenerationFailed) as e:
            trainer.step()  # batch 1 may have been made before the kill: then batch 2 fails
            trainer.step()
    finally:
        trainer.close()
    msg = str(e.value)
    assert len(msg.splitlines()) == 1, msg
    # the generator either loads version 2 into the dead actor or asks it to generate
    assert re.search(rf"engine actor {trainer.engine.actor_name!r} died during (load_weights|generate): ", msg), msg
