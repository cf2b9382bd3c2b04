"""Module-level group-wise rewards for test_groupwise.py (a worker imports them by name)."""

import os

from covey.rewards import RewardOutput
from covey.rewards.group import GroupWise, group_wise


@group_wise()
def rank_in_group(prompts, completions, group):
    """Each row's rank (0 = longest) among its unit; fails loudly if a unit arrives split or mixed."""
    assert len(set(group)) == 1, f"one call saw several groups: {group}"
    order = sorted(range(len(completions)), key=lambda i: -len(completions[i]))
    out = [0.0] * len(completions)
    for rank, i in enumerate(order):
        out[i] = float(rank)
    return RewardOutput(out, {"unit_size": [float(len(completions))], "pid": [float(os.getpid())]})


def _set_size(prompts, completions, paraphrase_set, **_):
    assert len(set(paraphrase_set)) == 1
    return [float(len(completions))] * len(completions)


set_size = GroupWise(_set_size, group_key="paraphrase_set")


@group_wise(prenormalized=True)
def centred(prompts, completions, **_):
    mean = sum(len(c) for c in completions) / len(completions)
    return [len(c) - mean for c in completions]
