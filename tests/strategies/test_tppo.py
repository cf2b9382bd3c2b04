"""`tppo`: Extended GAE on complete / truncated responses, windows carried across steps with their
earlier tokens masked out, state through state_dict, one training step from config."""

import pytest
import torch

from covey.algos.advantages.egae import egae, tppo
from covey.engine import SamplingParams, TorchEngine
from covey.models import build_tiny
from covey.samplers import Draw
from covey.strategies.base import RolloutContext
from covey.strategies.tppo import TPPO
from covey.rollouts import RolloutsError
from covey.train.config import validate_config
from covey.train.trainer import Trainer


def test_egae_is_gae_on_complete_responses_and_bootstraps_truncated_ones():
    assert egae(torch.zeros(4), 1.0, True, gamma=1.0, lam=1.0).tolist() == [1.0, 1.0, 1.0]  # MC return, V = 0
    assert egae(torch.zeros(4), 1.0, False).tolist() == [0.0, 0.0, 0.0]  # no reward yet, V = 0: nothing
    c = torch.full((4,), 0.25)
    assert egae(c, 0.0, False, gamma=1.0, lam=0.9).abs().max() < 1e-12  # constant V bootstraps to 0
    got = egae(c, 1.0, True, gamma=1.0, lam=0.5)  # delta only at the end: (R - c) (gamma lam)^(L-1-t)
    assert got.tolist() == pytest.approx([0.75 * 0.25, 0.75 * 0.5, 0.75])
    v = torch.tensor([0.1, 0.4, 0.2, 0.7])
    g = egae(v, 0.0, False, gamma=0.9, lam=0.8)
    d = [0.9 * 0.4 - 0.1, 0.9 * 0.2 - 0.4, 0.9 * 0.7 - 0.2]
    assert g.tolist() == pytest.approx([d[0] + 0.72 * d[1] + 0.72**2 * d[2], d[1] + 0.72 * d[2], d[2]])


def test_tppo_windows_carry_and_mask_earlier_tokens():
    model, tok = build_tiny("tiny-llama", seed=8)
    engine = TorchEngine(model, tok, dtype="fp32")

    def score(batch):
        batch.rewards, batch.reward_names = (batch.completion_ids[:, 0] % 2 == 0).float()[:, None], ("r",)
        return {}

    def ctx(items):
        return RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, 2) for it in items],
                              sampling=lambda r: SamplingParams(seed=3, max_new_tokens=6, ignore_eos=True),
                              score=score, draw=lambda k: [], step=0)  # fmt: skip

    strat = TPPO(window_tokens=4)
    first = [{"id": 1, "prompt": "1+2="}, {"id": 2, "prompt": "3+4="}]
    b1, m1 = strat.rollout(first, ctx(first))
    assert len(b1) == 4 and m1["tppo/finished"] == 0 and m1["tppo/inflight"] == 4
    assert b1.lengths.tolist() == [4] * 4 and (b1.rewards == 0).all()
    assert b1.token_advantages.shape == b1.completion_mask.shape
    first = [row[:4].tolist() for row in b1.completion_ids]
    saved = strat.state_dict()
    again = TPPO(window_tokens=4)
    again.load_state_dict(saved)
    b2, m2 = again.rollout([{"id": 3, "prompt": "5+6="}], ctx([{"id": 3, "prompt": "5+6="}]))  # no free slot: the prompt waits
    assert m2["tppo/finished"] == 4 and m2["tppo/queued"] == 1 and m2["tppo/value_loss"] > 0 and again.w.abs().sum() > 0
    assert [row[:4].tolist() for row in b2.completion_ids] == first  # resumed from the carried tokens
    assert (b2.completion_mask[:, :4] == 0).all() and (b2.completion_mask[:, 4:6] == 1).all()
    b2.token_advantages = b2.token_advantages[:2]
    with pytest.raises(RolloutsError, match="token_advantages"):
        tppo(b2)


def test_tppo_trains_one_step_from_config(tmp_path):
    cfg = validate_config({
        "model": {"name": "tiny-llama"}, "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 16, "n_test": 4}},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "strategy": {"name": "tppo", "window_tokens": 4}},
        "sampling": {"max_new_tokens": 6}, "algo": {"advantage": {"name": "tppo"}, "kl": None}, "reward_workers": 0,
        "log": {"progress": False, "tensorboard": False, "dir": str(tmp_path)}, "steps": 2,
    })  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    trainer.step()
    m = trainer.step()
    assert m["tppo/finished"] >= 1 and m["time/step"] > 0
    trainer.close()
