"""Module-level rewards for test_runner_guards.py (workers import them by name)."""

import subprocess

from covey.rewards import RewardOutput


def text_metric(prompts, completions, **_):
    return RewardOutput([1.0] * len(completions), {"label": ["good"] * len(completions), "hits": [2.0, 4.0]})


def huge(prompts, completions, **_):
    return [3e38] * len(completions)


def chatty(prompts, completions, **_):
    for _ in range(1000):
        print("x" * 1000)  # 1 MB per call
    return [1.0] * len(completions)


def starts_sleeper(prompts, completions, **_):
    proc = subprocess.Popen(["sleep", "600"], start_new_session=len(completions) > 1)
    with open(completions[0], "a") as f:
        f.write(f"{proc.pid}\n")
    return [1.0] * len(completions)


def nan_metric(prompts, completions, **_):
    return RewardOutput([1.0] * len(completions), {"ratio": [float("nan")] * len(completions), "hits": [2.0, 4.0]})


def nones(prompts, completions, **_):
    return [None if c == "none" else 1.0 for c in completions]


def ones(prompts, completions, **_):
    return [1.0] * len(completions)
