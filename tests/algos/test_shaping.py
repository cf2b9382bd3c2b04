"""DAPO soft overlong punishment (§3.3 e)."""

import doctest

import pytest
import torch

from covey.algos import shaping
from covey.algos.shaping import overlong_penalty


def test_spec_vector():
    # L_max 20480, L_cache 4096: expected 16384; 18432 exceeds by 2048 -> -2048/4096 = -0.5
    out = overlong_penalty(torch.tensor([16000, 16384, 18432, 20480]), max_len=20480, buffer_len=4096)
    assert out.tolist() == [0.0, 0.0, -0.5, -1.0]
    assert out.dtype == torch.float32


def test_penalty_factor_scales_and_beyond_max_len_is_capped_at_minus_factor():
    out = overlong_penalty(torch.tensor([90, 100, 150]), max_len=100, buffer_len=20, penalty_factor=0.5)
    assert torch.allclose(out, torch.tensor([-0.25, -0.5, -0.5]))  # (90-80)/20 * 0.5


def test_empty_batch_and_zero_length():
    assert overlong_penalty(torch.tensor([], dtype=torch.long), 10, 5).numel() == 0
    assert overlong_penalty(torch.tensor([0]), 10, 5).tolist() == [0.0]


@pytest.mark.parametrize("buffer_len", [0, 11])
def test_bad_buffer_is_rejected(buffer_len):
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(torch.tensor([1]), max_len=10, buffer_len=buffer_len)


def test_docstring_example_runs():
    result = doctest.testmod(shaping)
    assert result.attempted == 1 and result.failed == 0
