"""mpo: the rubric judge sums per-criterion scores; the meta-judge refines the rubric every `interval` calls
from the previous call's rows; iterations are written and read back (resume); an empty merge keeps the rubric."""

import re

import pytest

from covey.rewards import RewardRunner, get_reward
from covey.rewards.judge.backends import JudgeReply
from covey.rewards.judge.mpo import parse_items


class Grader:
    """Item judge: 'Score: 10' when the criterion's keyword ("mentions X") is in the response, else 'Score: 0';
    a criterion 'broken' gets an unreadable reply. Meta requests get `proposal` / the merge gets `merged`."""

    kind = "scripted"
    fingerprint = "mpo-v1"

    def __init__(self, proposal="<item>mentions dogs</item>", merged="<item>mentions cats</item><item>mentions dogs</item>"):
        self.proposal, self.merged, self.item_requests, self.meta_requests = proposal, merged, 0, []

    def complete(self, requests):
        out = []
        for r in requests:
            text = r.messages[-1][1]
            if text.startswith("Merge these"):
                self.meta_requests.append(text)
                out.append(JudgeReply(text=self.merged))
            elif text.startswith("You maintain"):
                self.meta_requests.append(text)
                out.append(JudgeReply(text=self.proposal))
            else:
                self.item_requests += 1
                crit = text.split("[Criterion]\n")[1].split("\n")[0]
                resp = text.split("[Response]\n")[1].split("\n\n[Criterion]")[0]
                if crit == "broken":
                    out.append(JudgeReply(text="hmm"))
                else:
                    word = crit.split()[-1].rstrip("s")
                    out.append(JudgeReply(text=f"Because.\nScore: {10 if word in resp else 0}"))
        return out


def test_rubric_sum_refinement_and_resume(tmp_path):
    g = Grader()
    reward = get_reward("mpo", rubric=["mentions cats", "broken"], backend=g, interval=2, samples=1,
                        rubric_dir=str(tmp_path / "rubrics"))
    assert reward.in_process
    texts = ["a cat and a dog", "a dog"]
    first = reward(prompts=["q", "q"], completions=texts)
    assert first.scores == [10.0, 0.0] and first.metrics["item_fail_frac"] == [0.0, 1.0, 0.0, 1.0]
    assert first.metrics["rubric_iter"] == [0.0] and g.meta_requests == []
    reward(prompts=["q", "q"], completions=texts)  # call 2: no refinement yet
    assert g.meta_requests == []
    third = reward(prompts=["q", "q"], completions=texts)  # call 3 (after 2 = interval): refine from call 2's rows
    assert len(g.meta_requests) == 2  # samples=1 meta request + one merge
    assert "a cat and a dog" in g.meta_requests[0] and "[Score given]\n10.0" in g.meta_requests[0]
    assert "<item>mentions dogs</item>" in g.meta_requests[1]
    assert reward.items == ["mentions cats", "mentions dogs"] and third.metrics["rubric_iter"] == [1.0]
    assert third.scores == [20.0, 10.0]
    assert parse_items((tmp_path / "rubrics" / "iter_1.txt").read_text()) == ["mentions cats", "mentions dogs"]
    again = get_reward("mpo", rubric=["mentions cats"], backend=Grader(), rubric_dir=str(tmp_path / "rubrics"))
    assert again.items == ["mentions cats", "mentions dogs"] and again.iteration == 1


def test_empty_merge_keeps_the_rubric_and_runner_keeps_it_in_process():
    g = Grader(merged="no items at all")
    runner = RewardRunner([{"name": "mpo", "params": {"rubric": "<item>mentions cats</item>", "backend": g, "interval": 1}}],
                          workers=2)
    try:
        assert runner.entries[0].in_process
        for _ in range(3):
            out = runner(["q"], ["cats"])
        assert out.rewards[0, 0].item() == 10.0
        reward = runner.entries[0].fn
        assert reward.items == ["mentions cats"] and reward.iteration == 0 and len(g.meta_requests) == 4
    finally:
        runner.close()


def test_mpo_config_errors(tmp_path):
    with pytest.raises(ValueError, match="rubric"):
        get_reward("mpo", rubric=[], backend=Grader())
    with pytest.raises(ValueError, match="interval"):
        get_reward("mpo", rubric=["x"], backend=Grader(), interval=0)
    (tmp_path / "r.txt").write_text("<item>clear</item>\n<item>short</item>")
    assert get_reward("mpo", rubric=str(tmp_path / "r.txt"), backend=Grader()).items == ["clear", "short"]
    assert re.search("Score", get_reward("mpo", rubric=["x"], backend=Grader()).judge.template.user)
