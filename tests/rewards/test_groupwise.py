"""Group-wise rewards: called once per unit (a prompt's group, or a `group_key` column), with unequal
units, in-process and in a worker, never split by chunking or retries; `prenormalized` declared."""

import logging

import _groupwise_rewards as gr
import pytest

from covey.rewards import RewardRunner
from covey.rewards.group import GroupWise, iter_units

COMPLETIONS = ["aaa", "a", "aa", "bbbb", "b", "cc", "c", "ccc", "cccc"]
GROUP = [5, 5, 5, 9, 9, 2, 2, 2, 2]  # unequal groups: 3, 2 and 4 rows


@pytest.mark.parametrize("workers", [0, 1])
def test_group_wise_reward_is_called_once_per_group_with_unequal_groups(workers):
    with RewardRunner([{"name": "_groupwise_rewards:rank_in_group"}], workers=workers, chunk_size=2) as runner:
        batch = runner(["p"] * 9, COMPLETIONS, group=GROUP)
    assert batch.rewards[:, 0].tolist() == [0.0, 2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 1.0, 0.0]
    assert not batch.failed.any()
    assert batch.metrics["reward/rank_in_group/unit_size"] == pytest.approx(3.0)  # mean of 3, 2, 4: one value per call


def test_direct_call_splits_by_group_and_keeps_row_order():
    out = gr.rank_in_group(prompts=["p"] * 4, completions=["x", "yyy", "zz", "w"], group=[1, 0, 1, 0])
    assert out.scores == [1.0, 0.0, 0.0, 1.0] and out.metrics["unit_size"] == [2.0, 2.0]
    with pytest.raises(ValueError, match="needs the 'group' column"):
        gr.rank_in_group(prompts=["p"], completions=["x"])


def test_group_key_spans_prompts_and_is_never_split():
    sets = ["s1", "s1", "s2", "s1", "s2", "s3"]  # a paraphrase set spans several prompts' groups
    with RewardRunner([{"name": "_groupwise_rewards:set_size"}], workers=0, chunk_size=1) as runner:
        batch = runner(["p"] * 6, ["a"] * 6, group=[0, 0, 1, 2, 3, 4], paraphrase_set=sets)
    assert batch.rewards[:, 0].tolist() == [3.0, 3.0, 2.0, 3.0, 2.0, 1.0]
    with RewardRunner([{"name": "_groupwise_rewards:set_size"}], workers=0) as runner:
        with pytest.raises(ValueError, match="paraphrase_set"):
            runner(["p"], ["a"], group=[0])


def test_prenormalized_is_declared_and_mixing_warns(caplog):
    assert gr.centred.prenormalized and not gr.rank_in_group.prenormalized
    with caplog.at_level(logging.WARNING, logger="covey.rewards.runner"):
        RewardRunner([{"name": "_groupwise_rewards:centred"}], workers=0).close()
        assert "prenormalized" not in caplog.text
        RewardRunner([{"name": "_groupwise_rewards:centred"}, {"name": "format", "weight": 0.5}], workers=0).close()
    assert "prenormalized" in caplog.text and "'format'" in caplog.text


def test_iter_units_and_bad_returns():
    assert iter_units(["b", "a", "b"]) == {"b": [0, 2], "a": [1]}
    bad = GroupWise(lambda prompts, completions, **_: [1.0])
    with pytest.raises(ValueError, match="returned 1 scores for a unit of 2"):
        bad(prompts=["p", "p"], completions=["a", "b"], group=[0, 0])


def test_reward_caps_read_what_a_callable_declares_and_default_the_rest():
    from covey.rewards.registry import RewardCaps, reward_caps

    def plain(prompts, completions, **columns):
        return [0.0] * len(completions)

    def grouped(prompts, completions, **columns):
        return [0.0] * len(completions)

    grouped.group_aware, grouped.group_key, grouped.audit_columns = True, "episode", ["hard"]
    assert reward_caps(plain) == RewardCaps()
    caps = reward_caps(grouped)
    assert caps.group_aware and caps.group_key == "episode" and caps.audit_columns == ("hard",) and not caps.in_process
