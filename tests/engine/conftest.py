"""Engine tests run single-threaded: their tiny models gain nothing from a second thread, and on a
shared, oversubscribed CPU two OpenMP threads waiting on each other make small ops many times slower."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
