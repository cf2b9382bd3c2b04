"""Step-level credit estimators (gigpo, hgpo, salt, empg) against hand-computed vectors (the team's
method notes, GiGPO/HGPO/SALT/EMPG test cases and EMPG's g/f vector) on hand-built multi-turn batches."""

import math

import pytest
import torch

from covey.algos import ADVANTAGES
from covey.algos.advantages.empg import modulation
from covey.algos.advantages.hgpo import aggregate
from covey.rollouts import Rollouts, RolloutsError

ENV = [90, 91]  # two environment tokens between turns


def episodes(eps):
    """eps: dicts with group, rewards (per step), anchors (per step), optional tokens (per step id
    lists; default distinct per episode and step) and entropies (per step). One row per episode:
    turn tokens (mask 1) separated by ENV tokens (mask 0, turn -1)."""
    rows = []
    for e, ep in enumerate(eps):
        ids, mask, turn, ent = [], [], [], []
        n = len(ep["rewards"])
        for t in range(n):
            toks = ep.get("tokens", [[10 * e + t, 10 * e + t]] * n)[t]
            ids += toks
            mask += [1.0] * len(toks)
            turn += [t] * len(toks)
            ent += [ep.get("entropies", [0.0] * n)[t]] * len(toks)
            if t + 1 < n:
                ids, mask, turn, ent = ids + ENV, mask + [0.0, 0.0], turn + [-1, -1], ent + [0.0, 0.0]
        rows.append((ids, mask, turn, ent))
    width = max(len(r[0]) for r in rows)

    def pad(x, fill):
        return x + [fill] * (width - len(x))

    n = len(eps)
    return Rollouts(
        prompt_ids=[torch.tensor([1, 2])] * n,
        completion_ids=torch.tensor([pad(r[0], 0) for r in rows]),
        completion_mask=torch.tensor([pad(r[1], 0.0) for r in rows]),
        behaviour_logprobs=torch.zeros(n, width),
        group=torch.tensor([ep["group"] for ep in eps]),
        prompt_id=torch.tensor([ep["group"] for ep in eps]),
        rewards=torch.tensor([[float(sum(ep["rewards"]))] for ep in eps]),
        reward_names=("env_return",),
        entropies=torch.tensor([pad(r[3], 0.0) for r in rows]),
        episode=torch.arange(n),
        turn=torch.tensor([pad(r[2], -1) for r in rows]),
        step_rewards=[list(ep["rewards"]) for ep in eps],
        step_anchors=[list(ep["anchors"]) for ep in eps],
    ).validate()


def run(name, batch, **params):
    return ADVANTAGES[name].bind(params)(batch)


def per_step(batch, adv):
    """[N, T] advantages back to one value per step (checks the value is the same on all its tokens
    and 0 on env tokens and padding)."""
    out = []
    for i in range(len(batch)):
        turn = batch.turn[i]
        assert torch.all(adv[i][turn < 0] == 0)
        row = []
        for t in range(len(batch.step_rewards[i])):
            v = adv[i][turn == t]
            assert torch.allclose(v, v[0].expand_as(v))
            row.append(float(v[0]))
        out.append(row)
    return out


def close(got, want, tol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=tol), (got, want)


# ---------------------------------------------------------------------------- GiGPO (§19)
def diverge_once():
    """GiGPO unit case (iii): two trajectories from state s0 diverge there; only A goes on to succeed."""
    return episodes([
        {"group": 0, "rewards": [0.0, 1.0], "anchors": ["s0", "s1"]},
        {"group": 0, "rewards": [0.0, 0.0], "anchors": ["s0", "s2"]},
    ])  # fmt: skip


def test_gigpo_only_steps_at_the_shared_state_get_step_credit():
    b = diverge_once()
    res = run("gigpo", b, gamma=1.0, step_advantage_w=1.0, mode="mean_norm")
    # A_E: step-weighted mean of [1, 1, 0, 0] = 0.5 -> +-0.5; A_S at s0: returns [1, 0] -> +-0.5;
    # s1 and s2 are singleton step groups -> 0
    assert per_step(b, res.advantages) == [[1.0, 0.5], [-1.0, -0.5]]
    only_step = run("gigpo", b, gamma=1.0, step_advantage_w=1.0, mode="mean_norm").advantages - run(
        "gigpo", b, gamma=1.0, step_advantage_w=0.0, mode="mean_norm").advantages  # fmt: skip
    assert per_step(b, only_step) == [[0.5, 0.0], [-0.5, 0.0]]


def test_gigpo_mean_std_norm_uses_unbiased_std_over_steps():
    b = diverge_once()
    res = run("gigpo", b, gamma=1.0, mode="mean_std_norm")
    # A_E = +-0.5 / (std([1,1,0,0], unbiased)=sqrt(1/3) + 1e-6); A_S = +-0.5 / (std([1,0])=sqrt(1/2) + 1e-6)
    e, s = 0.8660239037870368, 0.7071057811879616
    close(per_step(b, res.advantages)[0], [e + s, e])
    close(per_step(b, res.advantages)[1], [-e - s, -e])


def test_gigpo_discounting_step_weighted_episode_stats_and_singletons():
    b = episodes([
        {"group": 0, "rewards": [0.0, 0.0, 1.0], "anchors": ["a", "b", "a"]},  # returns .9025 .95 1
        {"group": 0, "rewards": [0.0, 0.0], "anchors": ["a", "c"]},  # returns 0 0
        {"group": 0, "rewards": [0.5], "anchors": ["a"]},  # return .5
        {"group": 1, "rewards": [2.0], "anchors": ["a"]},  # a group of one episode: mean 0, std 1 (code quirk)
    ])  # fmt: skip
    res = run("gigpo", b)  # defaults: gamma 0.95, omega 1, mean_norm
    # episode mean over the group's 6 steps: (1*3 + 0*2 + .5*1) / 6 = 0.583333
    # step group "a" in group 0: .9025, 1.0, 0, .5 -> mean .600625; "b", "c": singletons -> 0;
    # "a" in group 1 is another group's state: not pooled with group 0
    got = per_step(b, res.advantages)
    close(got[0], [0.416667 + 0.301875, 0.416667, 0.416667 + 0.399375])
    close(got[1], [-0.583333 - 0.600625, -0.583333])
    close(got[2], [-0.083333 - 0.100625])
    close(got[3], [2.0])
    assert res.advantages.shape == b.completion_ids.shape


def test_gigpo_similarity_groups_close_text_anchors_and_none_anchors_are_singletons():
    b = episodes([
        {"group": 0, "rewards": [1.0], "anchors": ["#..A"]},
        {"group": 0, "rewards": [0.0], "anchors": ["#..B"]},  # SequenceMatcher ratio 0.75
        {"group": 0, "rewards": [0.0], "anchors": [None]},
    ])  # fmt: skip
    ep = [2 / 3, -1 / 3, -1 / 3]  # A_E: mean of [1, 0, 0]
    close([r[0] for r in per_step(b, run("gigpo", b).advantages)], ep)
    grouped = per_step(b, run("gigpo", b, similarity_thresh=0.7).advantages)
    close([r[0] for r in grouped], [ep[0] + 0.5, ep[1] - 0.5, ep[2]])
    close([r[0] for r in per_step(b, run("gigpo", b, similarity_thresh=0.8).advantages)], ep)


def test_step_estimators_refuse_single_turn_batches():
    b = diverge_once()
    b.turn = b.step_rewards = b.step_anchors = None
    for name in ("gigpo", "hgpo", "salt", "empg"):
        with pytest.raises(RolloutsError, match="multi-turn episodes"):
            run(name, b)


# ---------------------------------------------------------------------------- HGPO (§20)
def hgpo_batch():
    """E1 and E3 reach s through x, E2 through y: all share the k=1 group of s, only E1 and E3 the
    k=2 group (x, s). gamma 1: returns E1 [1, 1], E2 [0, 0], E3 [0, 0]."""
    return episodes([
        {"group": 0, "rewards": [0.0, 1.0], "anchors": ["x", "s"]},
        {"group": 0, "rewards": [0.0, 0.0], "anchors": ["y", "s"]},
        {"group": 0, "rewards": [0.0, 0.0], "anchors": ["x", "s"]},
    ])  # fmt: skip


def test_hgpo_history_groups_and_length_weights():
    b = hgpo_batch()
    got = per_step(b, run("hgpo", b, history_length=1, mode="mean_norm", gamma=1.0, alpha=1.0).advantages)
    # t0: (1,x): E1 +.5, E3 -.5; (1,y) singleton. t1: (1,s): 2/3, -1/3, -1/3; (2,(x,s)): E1 +.5, E3 -.5
    # weights (k+1)^1 normalised by (sum + 1e-6)
    close(got[0], [0.5 * 2 / 2.000001, (2 * 2 / 3 + 3 * 0.5) / 5.000001])
    close(got[1], [0.0, -1 / 3 * 2 / 2.000001])
    close(got[2], [-0.5 * 2 / 2.000001, -(2 * 1 / 3 + 3 * 0.5) / 5.000001])


def test_hgpo_base_group_and_history_length_zero_is_anchor_only():
    b = hgpo_batch()
    got = per_step(b, run("hgpo", b, history_length=1, mode="mean_norm", gamma=1.0, base_group=True).advantages)
    # base (k=0, weight 1): episode reward over the group's 6 steps, mean 1/3 -> E1 2/3, E2 E3 -1/3
    close(got[0], [0.555555370370432, 0.5833332361111273])
    close(got[1], [-0.33333300000033333, -0.33333322222225925])
    close(got[2], [-0.44444429629634563, -0.41666659722223376])
    anchor_only = per_step(b, run("hgpo", b, history_length=0, mode="mean_norm", gamma=1.0).advantages)
    close(anchor_only[0], [0.5 * 2 / 2.000001, 2 / 3 * 2 / 2.000001])


def test_hgpo_mean_std_norm_uses_population_std():
    b = hgpo_batch()
    got = per_step(b, run("hgpo", b, history_length=0, gamma=1.0).advantages)  # default mean_std_norm
    # (1,s): returns [1,0,0], population std sqrt(2/9) = 0.471405 -> (2/3)/(0.471405+1e-6)
    s = math.sqrt(2 / 9) + 1e-6
    close(got[0], [(0.5 / (0.5 + 1e-6)) * 2 / 2.000001, (2 / 3) / s * 2 / 2.000001])


def test_hgpo_base_group_std_is_the_recipe_s_unbiased_std():
    b = hgpo_batch()
    # base over the group's 6 steps, episode rewards [1, 1, 0, 0, 0, 0]: mean 1/3; torch.std (unbiased)
    # sqrt((12/9) / 5) = 0.516398 (population: sqrt(2/9) = 0.471405). history_length 0, t1 of E1: items
    # (0, base) and (1, (1,s) group: (2/3) / (sqrt(2/9) + 1e-6)), weights 1 and 2, over (3 + 1e-6)
    kw = dict(history_length=0, gamma=1.0, base_group=True)
    base = (2 / 3) / (math.sqrt(4 / 15) + 1e-6)
    anchor = (2 / 3) / (math.sqrt(2 / 9) + 1e-6)
    got = per_step(b, run("hgpo", b, **kw).advantages)
    close(got[0][1:], [(base + 2 * anchor) / 3.000001])
    pop = per_step(b, run("hgpo", b, base_std="population", **kw).advantages)
    close(pop[0][1:], [((2 / 3) / (math.sqrt(2 / 9) + 1e-6) + 2 * anchor) / 3.000001])


def test_hgpo_aggregate_drops_zeros():
    assert aggregate([], 1.0, 1e-6) == 0.0
    assert aggregate([(1, 0.0), (2, 0.0)], 1.0, 1e-6) == 0.0
    assert aggregate([(1, 0.0), (2, 1.0)], 1.0, 1e-6) == pytest.approx(3 / 3.000001)
    assert aggregate([(1, 1.0), (2, -1.0)], 2.0, 0.0) == pytest.approx((4 - 9) / 13)


# ---------------------------------------------------------------------------- SALT (§21)
def test_salt_shared_steps_are_neutral_and_decisive_steps_keep_the_outcome_advantage():
    same = [[5, 6], [7]]
    b = episodes([
        {"group": 0, "rewards": [0.0, 0.0, 1.0], "anchors": ["a", "b", "c"], "tokens": [*same, [8]]},
        {"group": 0, "rewards": [0.0, 0.0, 0.0], "anchors": ["a", "b", "c"], "tokens": [*same, [9]]},
    ])  # fmt: skip
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO: rewards [1, 0], unbiased std
    got = per_step(b, run("salt", b).advantages)
    close(got[0], [0.0, 0.0, a])
    close(got[1], [0.0, 0.0, -a])


def test_salt_edges_need_the_same_history_and_the_same_action():
    b = episodes([
        {"group": 0, "rewards": [0.0, 1.0], "anchors": ["a", "b"], "tokens": [[5], [8]]},
        {"group": 0, "rewards": [0.0, 0.0], "anchors": ["a", "b"], "tokens": [[5], [9]]},
        {"group": 0, "rewards": [0.0, 1.0], "anchors": ["a", "b"], "tokens": [[6], [8]]},  # other first action
    ])  # fmt: skip
    s = math.sqrt(1 / 3) + 1e-6  # rewards [1, 0, 1]: mean 2/3, unbiased std sqrt(1/3)
    a = [(1 / 3) / s, -(2 / 3) / s, (1 / 3) / s]
    got = per_step(b, run("salt", b).advantages)
    close(got[0], [(a[0] + a[1]) / 2, a[0]])
    close(got[1], [(a[0] + a[1]) / 2, a[1]])
    close(got[2], [a[2], a[2]])  # its own edge from the first step on


# ---------------------------------------------------------------------------- EMPG (§22)
def test_empg_modulation_matches_the_spec_vector():
    g, f = modulation(torch.tensor([0.2, 1.0, 0.5, 2.0], dtype=torch.float64), 1.0, 1.0)
    close(g.tolist(), [1.4008, 0.8982, 1.1857, 0.5153], tol=1e-4)
    close(f.tolist(), [1.0, 0.6412, 0.8465, 0.3679], tol=1e-4)
    assert float(g.mean()) == pytest.approx(1.0, abs=1e-7)


def test_empg_combination_next_step_bonus_and_centring():
    b = episodes([
        {"group": 0, "rewards": [0.0, 1.0], "anchors": [0, 1], "entropies": [0.2, 1.0]},
        {"group": 0, "rewards": [0.0, 0.0], "anchors": [0, 1], "entropies": [0.5, 2.0]},
    ])  # fmt: skip
    # A = +-0.5/(sqrt(.5)+1e-6); A_mod = g_t A + 0.1 f_{t+1} (no bonus on the last step), minus the mean
    raw = per_step(b, run("empg", b, center=False).advantages)
    close(raw[0], [1.0546212506648012, 0.6350912355636401])
    close(raw[1], [-0.8016549235734179, -0.3643857700096487])
    got = per_step(b, run("empg", b).advantages)
    close(got[0], [0.9237033025034576, 0.5041732874022965])
    close(got[1], [-0.9325728717347616, -0.49530371817099234])
    assert ADVANTAGES["empg"].requires == ("entropies",)
