"""One local Ray (num_cpus=2) for every Ray test of the session: `ray.init` costs seconds, so the
tests marked `ray` share it (started on first use, stopped at the end)."""

import pytest


@pytest.fixture(scope="session")
def local_ray():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
