"""Rewards that used to end or flood a run quietly (issue 20 #14, issue 35): a non-numeric metric, a weighted
sum beyond float32, a reward that applies to no sample, unbounded printing, and processes left running by an
in-process reward."""

import logging
import math
import os
import subprocess
import sys
import time

import pytest

import _guard_rewards  # noqa: F401 - importable by the workers
from covey.rewards import RewardReturnError, RewardRunner
from covey.rewards._deadline import PRINT_LIMIT


@pytest.mark.parametrize("workers", [0, 1])
def test_a_non_numeric_metric_is_the_rewards_bug_named_in_one_error(workers):
    """It used to kill the worker on every call, then was dropped with a warning (accepted); a string where a
    number belongs is the reward's bug, as a wrong number of scores is: RewardReturnError, in both places."""
    with RewardRunner([{"name": "_guard_rewards:text_metric"}], workers=workers) as runner:
        with pytest.raises(RewardReturnError, match="reward 'text_metric' returned metric 'label' with a value 'good' "
                                                    r"\(str\) that is not a number"):
            runner(["p", "p"], ["a", "b"])


@pytest.mark.parametrize("workers", [0, 1])
def test_a_non_finite_metric_is_dropped_with_a_warning_and_the_scores_kept(workers, caplog):
    with RewardRunner([{"name": "_guard_rewards:nan_metric"}], workers=workers) as runner, caplog.at_level(logging.WARNING):
        for _ in range(2):
            batch = runner(["p", "p"], ["a", "b"])
            assert batch.rewards[:, 0].tolist() == [1.0, 1.0] and not batch.failed.any()
            assert batch.metrics["reward/nan_metric/hits"] == 3.0 and "reward/nan_metric/ratio" not in batch.metrics
    assert caplog.text.count("metric 'ratio' has a value that is not a finite number") == 1


def test_a_reward_that_applies_to_no_sample_of_a_batch_is_a_counted_warning(caplog):
    with RewardRunner([{"name": "_guard_rewards:nones"}, {"name": "_guard_rewards:ones"}], workers=0) as runner, \
            caplog.at_level(logging.WARNING):
        batch = runner(["p", "p"], ["none", "none"])
        assert batch.metrics["reward/nones/none_batch"] == 1.0 and batch.metrics["reward/ones/none_batch"] == 0.0
        assert batch.total.tolist() == [1.0, 1.0] and batch.metrics["reward/unscorable"] == 0.0
        batch = runner(["p", "p"], ["a", "none"])  # applies to one sample: not counted
        assert batch.metrics["reward/nones/none_batch"] == 0.0
    assert caplog.text.count("reward 'nones' returned None (not applicable) for every sample of a batch of 2") == 1


def test_a_weighted_sum_beyond_float32_gets_the_fallbacks_and_is_counted(caplog):
    rewards = [{"name": "_guard_rewards:huge", "alias": "a", "fallback": -1.0},
               {"name": "_guard_rewards:huge", "alias": "b", "weight": 0.5}]  # fmt: skip
    with RewardRunner(rewards, workers=0) as runner, caplog.at_level(logging.WARNING):
        batch = runner(["p", "p"], ["a", "b"])
    # 3e38 + 0.5 * 3e38 = 4.5e38 > 3.4e38: every column of both rows falls back (a: -1, b: 0)
    assert batch.rewards.tolist() == [[-1.0, 0.0], [-1.0, 0.0]] and batch.failed.all()
    assert batch.total.tolist() == [-1.0, -1.0] and math.isfinite(batch.metrics["reward/total/mean"])
    assert batch.metrics["reward/total/overflow"] == 2.0 and "beyond float32's range for 2 sample(s)" in caplog.text
    with RewardRunner([{"name": "_guard_rewards:huge"}], workers=0) as runner:  # 3e38 alone fits
        batch = runner(["p"], ["a"])
    assert batch.metrics["reward/total/overflow"] == 0.0 and batch.rewards.item() == pytest.approx(3e38)
    # weight 2: 6e38 overflows; the per-reward metrics stay finite (a float32 mean of two 3e38 was inf)
    with RewardRunner([{"name": "_guard_rewards:huge", "weight": 2.0}], workers=0) as runner:
        batch = runner(["p", "p"], ["a", "b"])
    assert batch.metrics["reward/total/overflow"] == 2.0 and batch.total.tolist() == [0.0, 0.0]
    assert batch.metrics["reward/huge/mean"] == pytest.approx(3e38) and math.isfinite(batch.metrics["reward/huge/std"])


@pytest.mark.parametrize("workers", [0, 1])
def test_what_a_reward_prints_is_capped_per_call(workers):
    """In a fresh process, whose stdout holds what its workers print too."""
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
            "from covey.rewards import RewardRunner\n"
            f"with RewardRunner([{{'name': '_guard_rewards:chatty'}}], workers={workers}) as runner:\n"
            "    for _ in range(3):\n"
            "        assert runner(['p'], ['a']).rewards.item() == 1.0\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    assert out.count("x") <= 3 * PRINT_LIMIT and len(out) < 4 * PRINT_LIMIT  # 3 MB printed
    assert out.count("[covey: reward 'chatty' printed ") == 3 and "dropped (at most 65536 per call are kept)" in out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_processes_an_in_process_reward_leaves_running_end_with_the_runner(tmp_path):
    log = tmp_path / "pids"
    runner = RewardRunner([{"name": "_guard_rewards:starts_sleeper", "in_process": True}], workers=0)
    runner(["p"], [str(log)])  # a child in our process group
    runner(["p", "p"], [str(log), "x"])  # a child in its own session
    pids = [int(x) for x in log.read_text().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    runner.close()
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
    assert os.getpid() > 0  # and this process is still here
