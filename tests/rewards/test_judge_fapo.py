"""FAPO's flawed-positive reward (yyDing1/FAPO compute_score_fapo): +1 correct and clean, 0 correct but
flawed, -1 incorrect without asking the GenRM; GenRM failures are 'not flawed' unless on_fail: none."""

import math

import pytest

from covey.rewards import get_reward
from covey.rewards.judge.backends import JudgeReply


class GenRM:
    """Answers with the box written after "VERDICT=" in the solution (the test's way to script the GenRM)."""

    kind, fingerprint = "scripted", "genrm-v1"

    def __init__(self):
        self.asked = []

    def complete(self, requests):
        out = []
        for r in requests:
            user = r.messages[-1][1]
            self.asked.append(user)
            verdict = user.split("VERDICT=")[1].split()[0]
            out.append(JudgeReply(text=f"The steps... so \\boxed{{{verdict}}}" if verdict != "none" else "no idea"))
        return out


def test_fapo_vectors():
    genrm = GenRM()
    reward = get_reward("fapo", backend=genrm)
    completions = [r"VERDICT=-1 so \boxed{4}", r"VERDICT=3 so \boxed{4}", r"VERDICT=-1 so \boxed{5}",
                   r"VERDICT=none so \boxed{4}", r"VERDICT=0 so \boxed{\frac{8}{2}}"]
    out = reward(prompts=["What is 2+2?"] * 5, completions=completions, answer=["4"] * 5)
    assert out.scores == [1.0, 0.0, -1.0, 1.0, 0.0]
    assert len(genrm.asked) == 4 and not any("VERDICT=-1 so \\boxed{5}" in a for a in genrm.asked)  # incorrect: no call
    assert genrm.asked[0].startswith("The following is a math problem with its ground truth answer")
    assert "[Math Problem]\n\nWhat is 2+2?\n\n[Ground Truth]\n\n4\n\n[AI Solution]\n\nVERDICT=-1" in genrm.asked[0]
    assert out.metrics["flawed_positive_frac"] == [0.0, 1.0, 1.0] and out.metrics["rule_accuracy"] == [1, 1, 0, 1, 1]
    assert out.metrics["parse_fail_frac"] == [0.0, 0.0, 1.0, 0.0]

    strict = get_reward("fapo", backend=GenRM(), on_fail="none")
    out = strict(prompts=["q"], completions=[r"VERDICT=none \boxed{4}"], answer=["4"])
    assert math.isnan(out.scores[0])


def test_fapo_config_errors():
    with pytest.raises(ValueError, match="on_fail"):
        get_reward("fapo", backend=GenRM(), on_fail="zero")
    with pytest.raises(ValueError, match="boxed_int"):
        get_reward("fapo", backend=GenRM(), parser="yes_no")
    with pytest.raises(ValueError, match="ground truth column 'solution'"):
        get_reward("fapo", backend=GenRM(), answer_column="solution")(prompts=["q"], completions=["x"], answer=["1"])


def test_fapo_genrm_reward_spec_vectors():
    from covey.rewards import get_reward

    fn = get_reward("fapo_genrm")
    replies = ["so \\boxed{5}", "\\boxed{3}", "\\boxed{-1}", "\\boxed{-1}", "\\boxed{2}", "no box", "\\boxed{10}",
               "\\boxed{4}" + " " * 300, "x"]
    out = fn(prompts=["q"] * 9, completions=replies, error_step=[3, 3, 3, -1, -1, 2, 2, 2, None],
             total_steps=[10] * 9)
    # the spec's vectors (total_steps 10); index 10 is out of range; a box before the last 300 characters is not read
    assert out == pytest.approx([0.8, 1.0, -1.0, 1.0, -1.0, -1.0, -1.0, -1.0, None])
