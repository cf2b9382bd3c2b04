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


def huge(prompts, completions, **_):
    """Finite in float64 but beyond float32: 1e308 for 'huge', -1e39 for 'neg', else 1.0."""
    return [1e308 if c == "huge" else -1e39 if c == "neg" else 1.0 for c in completions]


def bad_entries(prompts, completions, **_):
    """One score per completion, but the second is a string and the third None."""
    return [1.0, "high", None][: len(completions)]


def exits(prompts, completions, **_):
    import sys

    sys.exit(0)


class Stop(BaseException):
    """A BaseException that is neither SystemExit nor KeyboardInterrupt."""


def raises_base(prompts, completions, **_):
    raise Stop("stop everything")


def interrupts(prompts, completions, **_):
    raise KeyboardInterrupt


def spawn_sleeper(prompts, completions, pid_file, **_):
    """Starts `sleep 1000` per completion and appends its pid to pid_file; hangs on 'hang'."""
    import subprocess

    for c, path in zip(completions, pid_file):
        proc = subprocess.Popen(["sleep", "1000"])
        with open(path, "a") as f:
            f.write(f"{proc.pid}\n")
        if c == "hang":
            time.sleep(60)
    return [1.0] * len(completions)


def message_length(completions, **kw):
    """TRL-style: chat completions only, extra columns in kwargs."""
    return [float(len(c[0]["content"])) for c in completions]


def completion_kind(prompts, completions):
    """No **kwargs: 1.0 for a plain string completion, 2.0 for chat messages."""
    return [1.0 if isinstance(c, str) else 2.0 for c in completions]


def id_count(completions, completion_ids):
    """No prompts, no **kwargs: the number of token ids."""
    return [float(len(ids)) for ids in completion_ids]


def alarm_then_hang(prompts, completions, **_):
    """Uses and cancels signal.alarm as math-verify does, then hangs on 'hang'."""
    import signal

    old = signal.signal(signal.SIGALRM, lambda *a: None)
    signal.alarm(30)
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
    if "hang" in completions:
        time.sleep(60)
    return [1.0] * len(completions)


async def async_length(prompts, completions, **_):
    """TRL allows async rewards; awaits a real sleep so the event loop is exercised."""
    import asyncio

    await asyncio.sleep(0.01)
    return [float(len(c)) if c != "skip" else None for c in completions]


async def async_hang(prompts, completions, **_):
    import asyncio

    await asyncio.sleep(60)
    return [0.0] * len(completions)


def spins(prompts, completions, **_):
    """A Python loop that never ends on 'hang' (an asynchronous exception stops it between bytecodes)."""
    out = []
    for c in completions:
        while c == "hang":
            pass
        out.append(1.0)
    return out


CALLS = {"hangs_on_second_call": 0}


def hangs_on_second_call(prompts, completions, **_):
    """Length of each completion; the second and third calls never return (a Python loop): a chunk, then the
    first sample it is re-scored with."""
    CALLS["hangs_on_second_call"] += 1
    while CALLS["hangs_on_second_call"] in (2, 3):
        pass
    return [float(len(c)) for c in completions]

