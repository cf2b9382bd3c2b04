"""`igrpo` and `cog_rethinker`: the second stage is conditioned on the first stage's answers, rewards
stay on the original item, group ids stay unique; one training step from config each."""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import build_tiny
from covey.samplers import Draw
from covey.strategies.base import RolloutContext
from covey.strategies.cog_rethinker import REFINE, CogRethinker
from covey.strategies.group import completion_texts
from covey.strategies.igrpo import IGRPO
from covey.train.config import validate_config
from covey.train.trainer import Trainer

ITEMS = [{"id": 3, "prompt": "2+2=", "answer": "4"}, {"id": 8, "prompt": "5-1=", "answer": "4"}]


scored: list[tuple[list[str], list[float]]] = []  # (texts, rewards) of every ctx.score call


def _ctx(reward, seen):
    scored.clear()
    model, tok = build_tiny("tiny-llama", seed=4)
    engine = TorchEngine(model, tok, dtype="fp32")

    def score(batch):
        texts = completion_texts(tok, batch)
        seen.append([it["prompt"] for it in batch.items])
        batch.rewards = torch.tensor([[reward(t)] for t in texts], dtype=torch.float32)
        scored.append((texts, [reward(t) for t in texts]))
        batch.reward_names = ("r",)
        return {}

    return RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, 4) for it in ITEMS],
                          sampling=lambda r: SamplingParams(seed=r, max_new_tokens=6, ignore_eos=True),
                          score=score, draw=lambda k: [], step=0), tok  # fmt: skip


def test_igrpo_refines_the_best_draft():
    seen = []
    ctx, tok = _ctx(lambda t: float(sum(c.isalpha() for c in t)), seen)
    batch, m = IGRPO(drafts=3).rollout(ITEMS, ctx)
    assert len(batch) == 8 and batch.group.tolist() == [0] * 4 + [1] * 4 and batch.prompt_id.tolist() == [3] * 4 + [8] * 4
    assert all(p in ("2+2=", "5-1=") for p in seen[1])  # rewards read the original prompts
    for g, it in enumerate(ITEMS):
        ids = batch.prompt_ids[4 * g].tolist()
        base = tok.encode(it["prompt"])
        assert ids[: len(base)] == base and len(ids) > len(base) + 6  # q + draft + instruction
    texts, r = scored[0]  # the 3 drafts of each prompt, in order
    best = [max(range(3 * g, 3 * g + 3), key=lambda k: (r[k], -k)) for g in range(2)]  # ties: the first
    assert m["igrpo/draft_reward"] == pytest.approx((r[best[0]] + r[best[1]]) / 2)
    assert m["igrpo/refine_gain"] == pytest.approx(sum(scored[1][1]) / 8 - m["igrpo/draft_reward"], abs=1e-6)
    for g in range(2):  # the refinement prompt holds the best draft's text
        assert texts[best[g]] in tok.decode(batch.prompt_ids[4 * g].tolist())


def test_cog_rethinker_replaces_unsolved_groups_stage_by_stage():
    seen = []
    ctx, tok = _ctx(lambda t: 0.0, seen)  # nothing is ever solved: both stages run for both prompts
    batch, m = CogRethinker(show_wrong=2).rollout(ITEMS, ctx)
    assert m["cog/decompose_frac"] == 1.0 and m["cog/refine_frac"] == 1.0 and len(seen) == 3
    assert len(batch) == 8 and batch.num_groups == 2 and sorted(batch.prompt_id.tolist()) == [3] * 4 + [8] * 4
    text = tok.decode(batch.prompt_ids[0].tolist())
    assert REFINE in text and all(p in ("2+2=", "5-1=") for p in seen[2])
    seen.clear()
    ctx2, _ = _ctx(lambda t: 1.0, seen)  # everything solved: only the direct rollout
    b2, m2 = CogRethinker().rollout(ITEMS, ctx2)
    assert m2["cog/decompose_frac"] == 0.0 and len(seen) == 1 and len(b2) == 8


@pytest.mark.parametrize("name", ["igrpo", "cog_rethinker"])
def test_trains_one_step_from_config(tmp_path, name):
    cfg = validate_config({
        "model": {"name": "tiny-llama"}, "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 16, "n_test": 4}},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "strategy": {"name": name}}, "sampling": {"max_new_tokens": 6},
        "algo": {"kl": None}, "reward_workers": 0, "log": {"progress": False, "tensorboard": False, "dir": str(tmp_path)}, "steps": 1,
    })  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    assert trainer.step()["time/step"] > 0
    trainer.close()
