"""BLEU reward (BLEUBERI): nmt-style smoothed sentence BLEU over 13a tokens."""

import math

import pytest
import sacrebleu

from covey.rewards import BleuReward, bleu_score


def test_identical_text_scores_one():
    assert bleu_score("The quick brown fox.", ["The quick brown fox."]) == 1.0


def test_smoothed_value_by_hand():
    # hyp "the cat sat" vs ref "the cat sat on the mat": matches 3, 2, 1, 0 of possible 3, 2, 1, 0
    # smoothed p = 4/4, 3/3, 2/2, 1/1 -> geo mean 1; BP = exp(1 - 6/3) = e^-1
    assert bleu_score("the cat sat", ["the cat sat on the mat"]) == pytest.approx(math.exp(-1))


def test_unsmoothed_single_reference_matches_sacrebleu():
    hyp = "the quick brown fox jumps over the lazy cat today"
    ref = "the quick brown fox jumps over the lazy dog"
    ours = bleu_score(hyp, [ref], smooth=False)
    theirs = sacrebleu.sentence_bleu(hyp, [ref], smooth_method="none").score / 100
    assert ours == pytest.approx(theirs, abs=1e-9) and 0 < ours < 1


def test_brevity_penalty_uses_the_shortest_reference():
    # refs of 6 and 3 tokens, hyp of 3 tokens equal to the short ref: r = 3, BP = 1, all p = 1
    assert bleu_score("a cat sat", ["the cat sat on the mat", "a cat sat"]) == 1.0


def test_empty_answer_scores_zero_and_missing_references_none():
    r = BleuReward()
    assert r(None, ["   ", "<answer> </answer>", "hi"], references=["x", "x", None]) == [0.0, 0.0, None]


def test_answer_tag_text_is_scored():
    r = BleuReward()
    assert r(None, ["<think>zzz</think><answer>hello world</answer>"], references=[["hello world"]]) == [1.0]
    assert BleuReward(answer_tag=False)(None, ["<answer>hello world</answer>"], references=["hello world"])[0] < 1.0


def test_missing_column_is_named():
    with pytest.raises(ValueError, match="'references' column"):
        BleuReward()(None, ["x"])


def test_prs_length_aware_bleu_scores_short_answers_fairly():
    from covey.rewards import get_reward
    from covey.rewards.bleu import bleu_score

    prs = get_reward("prs_bleu_provisional")
    # smoothed BLEU-4 gives a wrong one-word answer (1/2)^(1/4); the length-aware form only the unigram order: 0
    assert bleu_score("London", ["Paris"]) == pytest.approx(0.5**0.25)
    assert prs(prompts=None, completions=["London", "Paris"], references=[["Paris"], ["Paris"]]) == [0.0, 1.0]
    # two-word reference, two orders: "new york" -> 1; "york new" -> p1 1, p2 0 -> 0; "new" -> N 1, BP e^(1 - 2) -> 0.3679
    out = prs(prompts=None, completions=["new york", "york new", "new"], references=[["new york"]] * 3)
    assert out == pytest.approx([1.0, 0.0, math.exp(-1.0)])
    # repeating the reference does not pay: clipped matches 1 of 3 unigrams
    assert prs(prompts=None, completions=["Paris Paris Paris"], references=[["Paris"]]) == pytest.approx([1 / 3])
