"""What `runtime.learner_workers`, `reward_workers` and `actor_cpus` refuse when the config is read
(one-line errors before any model loads; no Ray needed except for the ray-only checks' import test)."""

import importlib.util

import pytest

from covey.train.config import ConfigError
from tests.runtime.test_thread_trainer import _cfg

RAY = ["runtime.executor=ray", "runtime.learner_workers=2"]
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the ray extra is not installed")


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["runtime.executor=thread", "runtime.learner_workers=2"], "needs runtime.executor: ray"),
        (["runtime.sharding=fsdp2", "runtime.colocate=true"], "need runtime.executor: ray"),
        (["runtime.reward_workers=2"], "needs runtime.executor: ray"),
        (["runtime.executor=thread", "runtime.actor_cpus=0.5"], "needs runtime.executor: ray"),
        (["runtime.executor=ray", "runtime.learner_workers=0"], "greater than or equal to 1"),
        (["runtime.executor=ray", "runtime.actor_cpus=0"], "greater than 0"),
        (["runtime.executor=ray", "runtime.reward_workers=-1"], "greater than or equal to 0"),
    ],
)
def test_refused_outside_ray_or_out_of_range(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        _cfg(tmp_path, *overrides)


@needs_ray
@pytest.mark.parametrize(
    "overrides, match",
    [
        (["algo.regularizers=[{name: llds, coef: 0.05}]"], r"learner_workers=2 cannot run algo.regularizers \(llds\)"),
        (["algo.logprob_source={layer: 1, until_step: 2}"], "cannot run algo.logprob_source"),
    ],
)
def test_the_learner_group_refuses_what_it_cannot_run(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        _cfg(tmp_path, *RAY, *overrides)
