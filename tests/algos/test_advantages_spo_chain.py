"""spo_chain: hand-checked chain vectors (cut points, segment advantages, probability
mask), whitening, and the `spo_chain` strategy's MC values on a scripted scorer."""

import math

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.algos.advantages.spo_segment import chain_advantages, chain_cut_points
from covey.rollouts import RolloutsError

P1 = [0.95, 0.5, 0.99, 0.3, 0.97, 0.6]
P2 = [0.5, 0.95, 0.3, 0.99]


def test_cut_points_spec():
    assert chain_cut_points(P1) == [0, 2, 4]
    assert chain_cut_points(P1, interval=2) == [0, 4]
    assert chain_cut_points(P2) == [-1, 1]  # a cut at -1 (the prompt) only when token 0 has p < 0.9
    assert chain_cut_points([0.95, 0.99]) == []


def test_chain_advantages_spec():
    raw = chain_advantages({0: 0.4, 2: 0.2, 4: 0.7}, 6, 1.0)
    assert raw == pytest.approx([0, -0.2, -0.2, 0.5, 0.5, 0.3])
    raw2 = chain_advantages({-1: 0.5, 1: 0.25}, 4, 0.0)
    assert raw2 == pytest.approx([-0.25] * 4)
    assert chain_advantages({}, 3, 1.0) == [0.0, 0.0, 0.0]  # no cut point: all 0


def _batch(raw, probs):
    b = rollouts([1.0] * len(raw), groups=list(range(len(raw))), width=len(raw[0]), logprobs=[[math.log(p) for p in ps] for ps in probs])
    b.token_advantages = torch.tensor(raw, dtype=torch.float32)
    return b


def test_prob_mask_and_loss_mask_spec():
    b = _batch([[0, -0.2, -0.2, 0.5, 0.5, 0.3]], [P1])
    out = ADVANTAGES["spo_chain"].bind({"whiten": False})(b)
    assert torch.allclose(out.advantages, torch.tensor([[0, -0.2, 0, 0.5, 0, 0.3]]), atol=1e-6)
    assert out.sample_mask.tolist() == [[0, 1, 0, 1, 0, 1]]
    b2 = _batch([[-0.25] * 4], [P2])
    out2 = ADVANTAGES["spo_chain"].bind({"whiten": False, "loss_mask": False})(b2)
    assert torch.allclose(out2.advantages, torch.tensor([[-0.25, 0, -0.25, 0]]), atol=1e-6)
    assert out2.sample_mask is None


def test_whitening_over_kept_tokens_only():
    b = _batch([[0, -0.2, -0.2, 0.5, 0.5, 0.3]], [P1])
    a = ADVANTAGES["spo_chain"].bind({})(b).advantages[0]
    kept = torch.tensor([-0.2, 0.5, 0.3], dtype=torch.float64)  # mean 0.2, unbiased var 0.13
    want = (kept - 0.2) / math.sqrt(0.13 + 1e-8)
    assert torch.allclose(a[[1, 3, 5]].double(), want, atol=1e-5)
    assert a[[0, 2, 4]].abs().sum() == 0


def test_missing_token_advantages_is_named():
    b = rollouts([1.0, 0.0])
    with pytest.raises(RolloutsError, match="token_advantages"):
        ADVANTAGES["spo_chain"].bind({})(b)


def test_strategy_values_from_scored_continuations():
    """Real tiny engine; reward = parity of the completion's token-id sum. Every continuation starts
    with its row's prefix o_{<=c}, stays within max_new_tokens, and V(c) is the mean reward of its
    `samples` continuations; the raw advantages are `chain_advantages` of those values."""
    from covey.engine import SamplingParams, TorchEngine
    from covey.models import build_tiny
    from covey.samplers import Draw
    from covey.strategies import STRATEGIES
    from covey.strategies.base import RolloutContext

    seen = []

    def score(b):
        seen.append(b)
        b.rewards = torch.tensor([float(sum(row[:n].tolist()) % 2) for row, n in zip(b.completion_ids, b.lengths.tolist())])[:, None]
        b.reward_names = ("accuracy",)
        return {}

    model, tok = build_tiny("tiny-llama", seed=2)
    items = [{"id": 1, "prompt": "a"}, {"id": 2, "prompt": "b"}]
    ctx = RolloutContext(engine=TorchEngine(model, tok, dtype="fp32"), tokenizer=tok, draws=[Draw(it, 2) for it in items],
                         sampling=lambda r: SamplingParams(seed=7 + r, max_new_tokens=5, ignore_eos=True), score=score,
                         draw=lambda k: [])  # fmt: skip
    strat = STRATEGIES.build("spo_chain", {"samples": 3, "interval": 2, "prob_threshold": 1.0})
    batch, m = strat.rollout(items, ctx)
    assert batch.lengths.tolist() == [5, 5, 5, 5]
    cuts = [-1, 1, 3]  # threshold 1.0: a cut before every token (-1..3), every 2nd kept
    assert m["spo_chain/cuts_per_row"] == 3 and m["spo_chain/mc_rollouts"] == 4 * 3 * 3
    main, cont = seen
    assert cont.lengths.max() <= 5 and len(cont) == 36
    r = cont.rewards[:, 0].double()
    for i in range(4):
        values = {}
        for k, c in enumerate(cuts):
            job = i * len(cuts) + k
            rows = (cont.group == job).nonzero().flatten()
            assert len(rows) == 3
            for j in rows.tolist():
                assert torch.equal(cont.completion_ids[j, : c + 1], main.completion_ids[i, : c + 1])
                assert torch.equal(cont.prompt_ids[j], main.prompt_ids[i])
            values[c] = float(r[rows].mean())
        want = chain_advantages(values, 5, float(main.rewards[i, 0]))
        assert batch.token_advantages[i].tolist() == pytest.approx(want, abs=1e-6)
