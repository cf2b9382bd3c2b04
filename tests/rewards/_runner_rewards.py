"""Module-level reward functions for test_runner.py (workers import them by name, so no closures)."""

import math
import os
import time


def length_reward(prompts, completions, **_):
    return [float(len(c)) for c in completions]


def echo_column(prompts, completions, score, **_):
    return list(score)


def flaky(prompts, completions, **_):
    """Raises when any completion is 'boom'; NaN for 'nan', None for 'none', hangs on 'hang'."""
    if "boom" in completions:
        raise ValueError("boom completion")
    if "hang" in completions:
        time.sleep(60)
    if "die" in completions:
        os._exit(3)
    return [math.nan if c == "nan" else None if c == "none" else 1.0 for c in completions]


def wrong_length(prompts, completions, **_):
    return [1.0] * (len(completions) + 1)


def always_raises(prompts, completions, **_):
    raise RuntimeError("this reward is broken")


def trl_style(completions, **kwargs):
    """A TRL reward: completions only, chat messages, extra columns in kwargs."""
    return [1.0 if c[0]["content"] == kwargs["solution"][i] else 0.0 for i, c in enumerate(completions)]


class GroupSizes:
    """Group-aware: every call must hold whole groups; scores each sample with its group's size."""

    group_aware = True

    def __init__(self, sizes):
        self.sizes = sizes

    def __call__(self, prompts, completions, group, **_):
        counts = {g: group.count(g) for g in group}
        for g, c in counts.items():
            assert c == self.sizes[g], f"group {g} split: {c} of {self.sizes[g]}"
        return [float(counts[g]) for g in group]


def uses_alarm(prompts, completions, **_):
    """signal.signal raises ValueError outside the main thread, as math-verify's timeout would."""
    import signal

    old = signal.signal(signal.SIGALRM, lambda *a: None)
    signal.alarm(30)
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
    return [1.0] * len(completions)
