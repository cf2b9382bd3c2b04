"""Tests run single-threaded: their small models gain little from a second thread, and on a shared,
oversubscribed CPU two OpenMP threads waiting on each other make small ops many times slower
(measured: the engine and model tests took 156 s with 2 threads, ~10 s with 1)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
