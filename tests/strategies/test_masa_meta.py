"""`masa_meta` (MASA, akatigre/MASA-RL @ fad5726): the meta reward's three parts by hand, the released
JSON extraction and its fallback, and a scripted engine through the strategy (solution rows keep the
run's rewards, meta rows get the meta reward in their own groups)."""

import dataclasses

import pytest

from covey.engine.base import SamplingParams
from covey.samplers.base import Draw
from covey.strategies import STRATEGIES
from covey.strategies.base import RolloutContext
from covey.strategies.masa_meta import meta_json, meta_score, singularize
from tests.strategies._fake_engine import CharTok, ScriptedEngine, exact_score

RESPS = ["use the sine rule, get 7", "by symmetry 7", "sine guess 3", "3"]
OK, LENS, PROBLEM = [True, True, False, False], [10, 20, 30, 5], "Find x in the triangle."


def test_singularize_is_the_released_rule():
    assert [singularize(w) for w in ["identities", "cosines", "medians", "matches", "glass", "series", "symmetry"]] == \
        ["identity", "cosine", "median", "match", "glass", "series", "symmetry"]


def test_meta_score_hand_values():
    pred = {"math_notion": ["sines", "symmetry", "cosines", "Find"], "pass_rate": 4, "solution_length": 15}
    s = meta_score(pred, PROBLEM, RESPS, OK, LENS)
    # notions: sine (+1 -1 = 0), symmetry (+1), cosine (0); "Find" is in the problem: dropped -> 1/3
    # pass rate 4/8 = mean(c) 0.5 -> 0.01^0 = 1; length 10 < 15 < 20 -> 1
    assert (s["notion_score"], s["pred_acc_score"], s["length_score"]) == (pytest.approx(1 / 3), 1.0, 1.0)
    assert s["score"] == pytest.approx((1 / 3 + 2) / 3)
    s = meta_score({"pass_rate": 8, "solution_length": 20}, PROBLEM, RESPS, OK, LENS)
    assert s["pred_acc_score"] == pytest.approx(0.1) and s["length_score"] == 0.0  # 0.01^0.5; 20 is not < 20
    assert s["score"] == pytest.approx(0.1 / 3)
    s = meta_score({"math_notion": "sines, symmetry", "pass_rate": "4", "solution_length": 15.0}, PROBLEM, RESPS, OK, LENS)
    assert (s["notion_score"], s["pred_acc_score"], s["length_score"]) == (0.5, 0.0, 0.0)  # a string list; non-int parts 0
    assert meta_score({"math_notion": None}, PROBLEM, RESPS, OK, LENS)["notion_score"] == 0.0
    assert meta_score({"solution_length": 3}, PROBLEM, RESPS, [False] * 4, LENS)["length_score"] == 0.0  # none correct
    assert meta_score({"pass_rate": 2}, PROBLEM, RESPS, OK, LENS, pass_rate_scale=4)["pred_acc_score"] == 1.0


def test_meta_json_last_object_and_the_fallback():
    text = '<meta>x</meta> {"math_notion": ["a"], "pass_rate": 1} then {"math_notion": ["b"], "pass_rate": 3, "solution_length": 200}'
    assert meta_json(text) == {"math_notion": ["b"], "pass_rate": 3, "solution_length": 200}
    assert meta_json("math_notion: [a, b] solution_length: 99") == {"math_notion": ["a", "b"], "solution_length": None}
    assert meta_json('math_notion: ["x"]') == {"math_notion": ["x"]}
    assert meta_json("no json here") == {}


ITEMS = [{"id": 0, "prompt": "Q0", "answer": "7"}, {"id": 1, "prompt": "Q1", "answer": "5"}]
META = '{"math_notion": ["7"], "pass_rate": 4, "solution_length": 2}'


def rule(prompt, k):
    if "<meta>" in prompt:
        return META
    if prompt.startswith("Q1"):
        return "5"
    return "7" if k % 2 == 0 else "12345"


def test_strategy_meta_rows_get_the_meta_reward_in_their_own_groups():
    engine = ScriptedEngine(rule)
    strat = STRATEGIES.build("masa_meta", {})
    sp = SamplingParams(max_new_tokens=200, seed=0)
    ctx = RolloutContext(engine=engine, tokenizer=CharTok(), draws=[Draw(item=it, n=2) for it in ITEMS],
                         sampling=lambda r: dataclasses.replace(sp, seed=r), score=exact_score, draw=lambda k: [])  # fmt: skip
    batch, m = strat.rollout(ITEMS, ctx)
    assert len(batch) == 8 and batch.reward_names == ("accuracy", "meta")
    assert batch.rewards[:4].tolist() == [[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]]  # Q0: "7", "12345"; Q1: "5", "5"
    # Q0: notion "7" in the correct row only (1); pass rate 1/2 = 4/8 (1); one correct length: no interval (0) -> 2/3
    # Q1: "7" in no row (0); mean 1 vs 0.5 -> 0.01^0.5 = 0.1; length 0 -> 0.1/3
    assert batch.rewards[4:, 1].tolist() == pytest.approx([2 / 3, 2 / 3, 0.1 / 3, 0.1 / 3])
    assert batch.rewards[4:, 0].tolist() == [0.0] * 4
    assert batch.group.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    meta_prompts = [p for p in engine.prompts_seen if "<meta>" in p]
    assert len(meta_prompts) == 2 and "Problem: Q0" in meta_prompts[0] and "integer from 128 to 200" in meta_prompts[0]
    assert m["masa/json_ok"] == 1.0 and m["masa/meta_reward"] == pytest.approx((2 / 3 + 0.1 / 3) / 2)


def test_bad_parameters():
    with pytest.raises(ValueError, match="meta_n"):
        STRATEGIES.build("masa_meta", {"meta_n": 0})
    with pytest.raises(ValueError, match="template must contain"):
        STRATEGIES.build("masa_meta", {"template": "no slot"})
