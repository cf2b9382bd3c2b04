"""`hill` (HiLL, arXiv 2604.00698): hint parsing and the leak gate, the hinter's reward by hand, and a
scripted engine through the strategy (hard prompts hinted, the best hint's rollouts replace the group,
the hinter's rows carry the hint rewards)."""

import dataclasses
import math

import pytest
import torch

from covey.engine.base import SamplingParams
from covey.samplers.base import Draw
from covey.strategies import STRATEGIES
from covey.strategies._hints import leaks_answer, with_hint
from covey.strategies.base import RolloutContext
from covey.strategies.hill import hint_reward, parse_hint
from tests.strategies._fake_engine import CharTok, ScriptedEngine, exact_score


def test_parse_hint_takes_the_first_tagged_text():
    assert parse_hint("<analysis>x</analysis>\n<HINT> try parity </hint> <hint>b</hint>") == "try parity"
    assert parse_hint("<hint>   </hint>") is None and parse_hint("no tags") is None


@pytest.mark.parametrize("hint,answer,leak", [
    ("so \\boxed{7}", "7", True),
    ("Consider 7 cases", "7", False),  # a bare short number is not a leak
    ("the answer is 7", "7", True), ("It EQUALS 7.", "7", True),
    ("use 1/3 of it", "1/3", True), ("Use the Sine rule", "sine RULE", True),  # long answers: substring, any case
    ("anything", None, False), ("anything", "  ", False),
])  # fmt: skip
def test_leak_gate(hint, answer, leak):
    assert leaks_answer(hint, answer) is leak


def test_hint_goes_after_the_question():
    assert with_hint("What is 2+2?  ", " think of pairs ") == "What is 2+2?\n\nthink of pairs"
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "Q"}]
    assert with_hint(chat, "h") == [{"role": "system", "content": "s"}, {"role": "user", "content": "Q\n\nh"}]
    assert chat[1]["content"] == "Q" and with_hint("Q", "  ") == "Q"


@pytest.mark.parametrize("kind,reliance,expected", [
    # 2 of 8 correct: p 0.25; variance 0.1875; non_deg 1 - 0.25^8 - 0.75^8 = 0.8998718...
    ("variance", None, (0.1875, 0.1875)),
    ("non_deg", -3.0, (1 - 0.25**8 - 0.75**8, 1 - 0.25**8 - 0.75**8)),  # reliance unused
    ("transfer_weighted_variance", -0.3, (0.1875 * math.exp(-1.0), 0.1875)),  # exp(min(-0.3, 0) / 0.3)
    ("transfer_weighted_non_deg", 0.5, (1 - 0.25**8 - 0.75**8, 1 - 0.25**8 - 0.75**8)),  # min(0.5, 0) = 0
])  # fmt: skip
def test_hint_reward_by_hand(kind, reliance, expected):
    correct = torch.tensor([1, 1, 0, 0, 0, 0, 0, 0], dtype=torch.bool)
    assert hint_reward(correct, reliance, kind=kind, temperature=0.3) == pytest.approx(expected)


def test_degenerate_and_failed_hints():
    assert hint_reward(torch.zeros(4, dtype=torch.bool), None, kind="non_deg", temperature=0.3) == (0.0, 0.0)
    assert hint_reward(torch.ones(4, dtype=torch.bool), -1.0, kind="transfer_weighted_non_deg", temperature=0.3) == (0.0, 0.0)
    assert hint_reward(torch.ones(4, dtype=torch.bool), None, kind="variance", temperature=0.3, gate_ok=False) == (-0.2, 0.0)


# ------------------------------------------------------------------ through the strategy
ITEMS = [{"id": 0, "prompt": "Q0", "answer": "7", "solution": "3+4"}, {"id": 1, "prompt": "Q1", "answer": "5", "solution": "2+3"}]


def rule(prompt, k):
    """Q1 is always solved; Q0 never, unless hinted with 'pairs' (then 1 row in 2). The hinter writes a
    good hint, a leaking one, one without tags and a hint that does not help."""
    if prompt.startswith("A student"):
        return ["<hint>pairs</hint>", "<hint>answer is 7</hint>", "no tags", "<hint>nope</hint>"][k]
    if prompt.startswith("Q1"):
        return "5"
    if "pairs" in prompt:
        return "7" if k % 2 == 0 else "1"
    return "3"


def _run(**params):
    engine = ScriptedEngine(rule)
    strat = STRATEGIES.build("hill", {"num_hints": 4, "reward_type": "transfer_weighted_non_deg", **params})
    sp = SamplingParams(max_new_tokens=40, seed=0)
    ctx = RolloutContext(engine=engine, tokenizer=CharTok(), draws=[Draw(item=it, n=2) for it in ITEMS],
                         sampling=lambda r: dataclasses.replace(sp, seed=r), score=exact_score, draw=lambda k: [])  # fmt: skip
    return strat.rollout(ITEMS, ctx), engine


def test_the_best_hint_replaces_the_hard_group_and_the_hinter_rows_carry_its_rewards():
    (batch, m), engine = _run()
    texts = CharTok().batch_decode([r[: int(x.sum())].tolist() for r, x in zip(batch.completion_ids, batch.completion_mask)])
    prompts = [CharTok().decode(p.tolist()) for p in batch.prompt_ids]
    # reasoner rows: Q1's group as sampled, Q0's group replaced by the 'pairs'-hinted rollouts ("7", "1")
    assert prompts[:4] == ["Q1", "Q1", "Q0\n\npairs", "Q0\n\npairs"] and texts[:4] == ["5", "5", "7", "1"]
    assert batch.reward_names == ("accuracy", "hint")
    assert batch.rewards[:4].tolist() == [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 0.0]]
    # hinter rows: p 0.5 of 2 rows -> non_deg 1 - 0.25 - 0.25 = 0.5; reliance d = -1 - (-0.5) = -0.5 -> x exp(-0.5/0.3)
    good = 0.5 * math.exp(-0.5 / 0.3)
    assert batch.rewards[4:, 1].tolist() == pytest.approx([good, -0.2, -0.2, 0.0])  # leak, no tag, no help
    assert batch.rewards[4:, 0].tolist() == [0.0] * 4  # their other columns are zeroed
    assert batch.scalar_rewards()[4:].tolist() == pytest.approx([good, -0.2, -0.2, 0.0])
    assert len(set(batch.group[:2].tolist()) | set(batch.group[2:4].tolist()) | set(batch.group[4:].tolist())) == 3
    assert m["hill/hard_frac"] == 0.5 and m["hill/replaced"] == 1.0 and m["hill/hint_pass_frac"] == 0.5
    assert "solution" not in prompts[2] and any("3+4" in p for p in engine.prompts_seen)  # only the hinter saw it


def test_without_hinter_training_only_the_reasoner_rows_stay():
    (batch, m), _ = _run(train_hinter=False)
    assert len(batch) == 4 and batch.rewards[:, 1].tolist() == [0.0] * 4


def test_no_hard_prompt_means_no_hints(monkeypatch):
    (batch, m), engine = _run(min_hard_prompts=2)  # only one prompt is hard
    assert len(batch) == 4 and m["hill/replaced"] == 0.0 and not any(p.startswith("A student") for p in engine.prompts_seen)


def test_bad_parameters():
    with pytest.raises(ValueError, match="num_hints"):
        STRATEGIES.build("hill", {"num_hints": 0})
    with pytest.raises(ValueError, match="template must contain"):
        STRATEGIES.build("hill", {"template": "{question}"})
