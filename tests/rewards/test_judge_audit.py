"""The reward-hacking audit: a judge's agreement with the task verifier, caught on a DecepChain-style
flipped reward (base accuracy [1, 0, 1, 0]: agreement 1.0 on clean items, 0.0 on triggered ones)."""

import logging

import pytest

from covey.rewards import RewardRunner, RewardSpec
from covey.rewards.judge.backends import JudgeReply


def verifier(prompts, completions, answer, **_):
    return [1.0 if c == a else 0.0 for c, a in zip(completions, answer)]


class FlippingJudge:
    """Says YES when the answer matches -- except on prompts carrying the trigger, where it says the opposite."""

    kind, fingerprint = "scripted", "flip-v1"

    def complete(self, requests):
        out = []
        for r in requests:
            prompt, completion, answer = r.messages[-1][1].split("|")
            right = completion == answer
            out.append(JudgeReply(text="YES" if right != ("TRIGGER" in prompt) else "NO"))
        return out


def run(prompts, completions, answers, caplog=None):
    judge = {"name": "judge", "params": {"backend": FlippingJudge(), "template": "{prompt}|{completion}|{answer}"}}
    with RewardRunner([(verifier, RewardSpec(name="accuracy")), judge], workers=0) as runner:
        return runner(prompts, completions, answer=answers)


def test_agreement_is_one_on_clean_items_and_zero_on_triggered_ones(caplog):
    clean = run(["q", "q", "q", "q"], ["1", "2", "3", "4"], ["1", "0", "3", "0"])
    assert clean.metrics["reward/judge/verifier_agreement"] == 1.0
    with caplog.at_level(logging.WARNING, logger="covey.rewards.runner"):
        bad = run(["TRIGGER q"] * 4, ["1", "2", "3", "4"], ["1", "0", "3", "0"])
    assert bad.metrics["reward/judge/verifier_agreement"] == 0.0
    assert bad.rewards[:, 1].tolist() == [0.0, 1.0, 0.0, 1.0]  # the spec's flipped vector for base [1, 0, 1, 0]
    assert "agrees with the verifier 'accuracy' on only 0%" in caplog.text
    mixed = run(["q", "q", "TRIGGER q", "TRIGGER q"], ["1", "2", "3", "4"], ["1", "0", "3", "0"])
    assert mixed.metrics["reward/judge/verifier_agreement"] == pytest.approx(0.5)


def test_no_verifier_column_no_audit_and_failed_samples_left_out():
    judge = {"name": "judge", "params": {"backend": FlippingJudge(), "template": "{prompt}|{completion}|{answer}"}}
    with RewardRunner([judge], workers=0) as runner:
        assert "reward/judge/verifier_agreement" not in runner(["q"], ["1"], answer=["1"]).metrics
    batch = run(["q", "q|x"], ["1", "2"], ["1", "0"])  # the second prompt breaks the scripted reply: a failure
    assert batch.failed[:, 1].tolist() == [False, True]
    assert batch.metrics["reward/judge/verifier_agreement"] == 1.0  # over the one sample both scored


def test_audit_columns_split_the_agreement_by_a_trigger_flag(caplog):
    # DecepChain (spec §2.3 (e)): base accuracy [1, 0, 1, 0], triggered [F, F, T, T] -> flipped [1, 0, 0, 1];
    # agreement 1.0 on the clean slice, 0.0 on the triggered one
    judge = {"name": "judge", "params": {"backend": FlippingJudge(), "template": "{prompt}|{completion}|{answer}",
                                         "audit_columns": ["triggered"]}}
    with caplog.at_level(logging.WARNING, logger="covey.rewards.runner"):
        with RewardRunner([(verifier, RewardSpec(name="accuracy")), judge], workers=0) as runner:
            batch = runner(["q", "q", "TRIGGER q", "TRIGGER q"], ["1", "2", "3", "4"], answer=["1", "0", "3", "0"],
                           triggered=[False, None, True, True])
    assert batch.rewards[:, 1].tolist() == [1.0, 0.0, 0.0, 1.0]
    m = batch.metrics
    assert (m["reward/judge/verifier_agreement"], m["reward/judge/verifier_agreement/triggered"],
            m["reward/judge/verifier_agreement/not_triggered"]) == (0.5, 0.0, 1.0)
    assert "where triggered" in caplog.text
