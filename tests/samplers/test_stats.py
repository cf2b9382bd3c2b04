import pytest
import torch

from covey.samplers.stats import pass_rate_histogram, prompt_stats
from tests.samplers._helpers import one_step, scored


def test_pass_rate_histogram_bins_by_hand():
    h = pass_rate_histogram(torch.tensor([0.0, 0.25, 0.5, 0.6, 1.0, 0.9, 0.1, 0.0]))
    assert h == {
        "prompts/pass_rate_hist/0": 2 / 8, "prompts/pass_rate_hist/0-25": 2 / 8, "prompts/pass_rate_hist/25-50": 1 / 8,
        "prompts/pass_rate_hist/50-75": 1 / 8, "prompts/pass_rate_hist/75-100": 1 / 8, "prompts/pass_rate_hist/100": 1 / 8,
    }  # fmt: skip


def test_prompt_stats_counts_zero_signal_groups_and_rollouts_per_prompt():
    # prompt 1: 3 rows all right; prompt 2: 2 rows mixed; prompt 3: 1 row (a singleton: no signal)
    b = scored([1, 1, 1, 2, 2, 3], [1, 1, 1, 0, 1, 0])
    m = prompt_stats(b)
    assert m["prompts/zero_signal_frac"] == pytest.approx(2 / 3)
    assert m["prompts/rollouts_per_prompt_mean"] == 2.0
    assert (m["prompts/rollouts_per_prompt_min"], m["prompts/rollouts_per_prompt_max"]) == (1.0, 3.0)
    assert m["prompts/pass_rate_hist/100"] == pytest.approx(1 / 3)
    assert m["prompts/pass_rate_hist/25-50"] == pytest.approx(1 / 3)
    assert m["prompts/unique"] == 3.0


def test_a_prompt_split_over_two_groups_is_one_prompt():
    b = scored([7, 7, 7, 7], [0, 0, 1, 1], groups=[0, 0, 1, 1])
    m = prompt_stats(b)
    assert m["prompts/unique"] == 1.0 and m["prompts/rollouts_per_prompt_mean"] == 4.0
    assert m["prompts/zero_signal_frac"] == 1.0 and m["prompts/pass_rate_hist/25-50"] == 1.0


def test_trainer_logs_prompt_stats(tmp_path):
    m = one_step(tmp_path)
    assert m["prompts/rollouts_per_prompt_mean"] == 2.0 and "prompts/zero_signal_frac" in m
    assert sum(v for k, v in m.items() if k.startswith("prompts/pass_rate_hist/")) == pytest.approx(1.0)
