"""ArenaRL tournaments against vectors recomputed from Alibaba-NLP/qqr's code, and the
arenarl reward end to end with a scripted judge backend (both orders, tie on failure, group-wise calls)."""

import json
import math
import re

import pytest

from covey.rewards import RewardRunner, get_reward
from covey.rewards.judge.arena import TOPOLOGIES, anchor, min_rank, round_robin, seeded_bracket, single_elimination, zscore
from covey.rewards.judge.backends import JudgeReply


def toy(q):
    """judge_pairs for fixed qualities: each call returns the qualities, so a two-order match gives (2 q_p, 2 q_q)."""
    calls = []

    def judge_pairs(pairs):
        calls.append(list(pairs))
        return [(2 * q[p], 2 * q[r]) for p, r in pairs]

    return judge_pairs, calls


def approx(xs):
    return pytest.approx(xs, abs=1e-5)


def test_five_players_all_topologies_agree_with_the_spec():
    q = [0.5, 0.9, 0.1, 0.7, 0.3]
    z = [0.0, 1.264908, -1.264908, 0.632454, -0.632454]
    for name, fn in TOPOLOGIES.items():
        judge_pairs, calls = toy(q)
        r = fn(5, judge_pairs)
        assert r == approx([0.5, 1.0, 0.0, 0.75, 0.25]), name
        assert zscore(r) == approx(z), name
    judge_pairs, calls = toy(q)
    single_elimination(5, judge_pairs)
    # seeding (everyone vs the anchor, 4 matches), then rounds on the bracket [1, 4, 2, 3, 0]: (1,4), (2,3), 0 has a bye;
    # then 0 (the bye, first) vs 1, 3 has a bye; then the final 3 vs 1: G-1 = 4 matches
    assert calls == [[(1, 0), (2, 0), (3, 0), (4, 0)], [(1, 4), (2, 3)], [(0, 1)], [(3, 1)]]


def test_bracket_seeding():
    assert seeded_bracket([1, 3, 0, 4, 2]) == [1, 4, 2, 3, 0]
    assert seeded_bracket(list(range(8))) == [0, 7, 3, 4, 1, 6, 2, 5]
    assert seeded_bracket([7]) == [7]


def test_all_ties_rank_equal_except_single_elimination():
    q = [0.5] * 4
    for fn in (anchor, round_robin):
        assert zscore(fn(4, toy(q)[0])) == [0.0] * 4
    r = single_elimination(4, toy(q)[0])
    assert r == approx([1.0, 2 / 3, 0.0, 1 / 3])  # ranking [0, 1, 3, 2]: the first listed wins every tie
    assert zscore(r) == approx([1.161892, 0.387297, -1.161892, -0.387297])


def test_eight_players_single_elimination():
    q = [0.2, 0.8, 0.6, 0.4, 0.9, 0.1, 0.3, 0.7]
    judge_pairs, calls = toy(q)
    z = zscore(single_elimination(8, judge_pairs))
    assert z == approx([-1.020618, 1.020618, 0.204124, -0.204124, 1.428865, -1.428865, -0.612371, 0.612371])
    assert calls[1] == [(4, 5), (2, 3), (1, 0), (7, 6)]  # bracket [4, 5, 2, 3, 1, 0, 7, 6]
    assert sum(len(c) for c in calls) == 7 + 7


def test_min_rank_and_edge_cases():
    assert min_rank([3.0, 5.0, 3.0, 1.0]) == [2, 1, 2, 4]  # pandas rank(method="min", ascending=False)
    for fn in TOPOLOGIES.values():
        assert fn(1, toy([0.3])[0]) == [0.0]
        assert zscore(fn(1, toy([0.3])[0])) == [0.0]
    assert len(toy([0.0] * 5)[1]) == 0
    judge_pairs, calls = toy([0.1, 0.2, 0.3, 0.4])
    round_robin(4, judge_pairs)
    assert len(calls[0]) == 6  # G (G - 1) / 2 matches


class ScriptedJudge:
    """A backend: completions are numbers (their quality); the reply scores Agent_A / Agent_B by them, plus
    `bias_a` for whichever answer is shown first. A completion "bad" makes every reply about it unreadable."""

    kind = "scripted"
    fingerprint = "scripted-v1"

    def __init__(self, bias_a=0.0):
        self.bias_a, self.requests = bias_a, []

    def complete(self, requests):
        self.requests.extend(requests)
        out = []
        for r in requests:
            user = r.messages[-1][1]
            a = re.search(r"<Answer_A>\n(.*?)\n</Answer_A>", user, re.S).group(1)
            b = re.search(r"<Answer_B>\n(.*?)\n</Answer_B>", user, re.S).group(1)
            if "bad" in (a, b):
                out.append(JudgeReply(text="I cannot decide."))
                continue
            body = {"combined_scores": {"Agent_A": float(a) + self.bias_a, "Agent_B": float(b)}, "winner": "Tie"}
            out.append(JudgeReply(text=json.dumps(body)))
        return out


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_arenarl_reward_end_to_end_both_orders_cancel_position_bias(topology):
    completions = ["0.5", "0.9", "0.1", "0.7", "0.3", "4", "2", "6"]
    group = [7, 7, 7, 7, 7, 3, 3, 3]  # unequal groups: 5 and 3
    scores = {}
    for bias in (0.0, 3.0):
        backend = ScriptedJudge(bias_a=bias)
        reward = get_reward("arenarl", backend=backend, topology=topology, parse_retries=0)
        out = reward(prompts=["q"] * 5 + ["p"] * 3, completions=completions, group=group)
        scores[bias] = out.scores
        assert all(r.temperature == 0.0 for r in backend.requests)
    assert scores[0.0] == scores[3.0]  # each match asks both orders, so a bias towards Agent_A cancels
    assert scores[0.0][:5] == approx([0.0, 1.264908, -1.264908, 0.632454, -0.632454])
    if topology == "single_elimination":
        # [4, 2, 6]: bracket [6, 4, 2]; 6 beats 4 in round one while 2 has a bye, then loses the final: 2 ranks second
        assert scores[0.0][5:] == approx([-1.0, 0.0, 1.0])
    else:
        assert scores[0.0][5:] == approx([0.0, -1.0, 1.0])  # [4, 2, 6]: ranks 2, 3, 1 -> r = [0.5, 0, 1]
    assert get_reward("arenarl", backend=ScriptedJudge()).prenormalized


def test_arenarl_failed_match_is_a_tie_or_fails_the_group():
    backend = ScriptedJudge()
    reward = get_reward("arenarl", backend=backend, topology="anchor", parse_retries=0)
    out = reward(prompts=["q"] * 3, completions=["bad", "9", "1"], group=[0, 0, 0])
    # anchor "bad": both matches are (5+5, 5+5) ties -> anchor mean 10, others 10 -> all rank 1 -> z = 0
    assert out.scores == [0.0, 0.0, 0.0]
    assert out.metrics["parse_fail_frac"] == [1.0] * 4 and out.metrics["tie_frac"] == [1.0, 1.0]
    strict = get_reward("arenarl", backend=ScriptedJudge(), topology="anchor", on_fail="none", parse_retries=0)
    out = strict(prompts=["q"] * 5, completions=["bad", "9", "1", "3", "4"], group=[0, 0, 0, 1, 1])
    assert all(math.isnan(x) for x in out.scores[:3]) and out.scores[3:] == approx([-0.707106, 0.707106])


def test_arenarl_in_the_runner_sees_whole_groups_and_caches(tmp_path):
    backend = ScriptedJudge()
    spec = {"name": "arenarl", "params": {"backend": backend, "topology": "round_robin", "parse_retries": 0,
                                          "cache_file": str(tmp_path / "judge_cache.sqlite")}}
    runner = RewardRunner([spec], workers=0, chunk_size=2)
    batch = runner(["q"] * 6, ["1", "2", "3", "5", "4", "0"], group=[0, 0, 0, 1, 1, 1])
    assert batch.rewards[:, 0].tolist() == approx([-1.0, 0.0, 1.0, 1.0, 0.0, -1.0])
    assert len(backend.requests) == 2 * 3 * 2  # two groups, 3 matches each, two orders
    again = runner(["q"] * 6, ["1", "2", "3", "5", "4", "0"], group=[0, 0, 0, 1, 1, 1])
    assert len(backend.requests) == 12 and torch_equal(again.rewards, batch.rewards)
    assert again.metrics["reward/arenarl/cache_hit_frac"] == 1.0


def torch_equal(a, b):
    return bool((a == b).all())


def test_arenarl_config_errors():
    with pytest.raises(ValueError, match="topology"):
        get_reward("arenarl", backend=ScriptedJudge(), topology="swiss")
    with pytest.raises(ValueError, match=r"\{a\} and \{b\}"):
        get_reward("arenarl", backend=ScriptedJudge(), template="yes_no_match")
    with pytest.raises(ValueError, match="json_pair"):
        get_reward("arenarl", backend=ScriptedJudge(), parser="yes_no")


def test_single_elimination_warns_once_when_every_match_ties(caplog):
    reward = get_reward("arenarl", backend=ScriptedJudge(), parse_retries=0)
    with caplog.at_level("WARNING", logger="covey.rewards.judge.arena"):
        out = reward(prompts=["q"] * 4, completions=["3", "3", "3", "3"], group=[0] * 4)
        reward(prompts=["q"] * 4, completions=["3", "3", "3", "3"], group=[0] * 4)
    assert out.scores == approx([1.161892, 0.387297, -1.161892, -0.387297])  # the bracket order, as in the reference
    assert caplog.text.count("every match of a group tied") == 1
    caplog.clear()
    with caplog.at_level("WARNING", logger="covey.rewards.judge.arena"):
        get_reward("arenarl", backend=ScriptedJudge(), topology="anchor")(prompts=["q"] * 2, completions=["3", "3"], group=[0, 0])
    assert "tied" not in caplog.text
