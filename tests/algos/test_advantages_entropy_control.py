"""dcpo and aepo_entropy: hand-checked vectors, the controller, the quirk
options (DCPO's NaN with no correct row, AEPO's replacement of the first rows) and checkpointed state."""

import math

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.rollouts import RolloutsError
from covey.strategies import STRATEGIES
from covey.strategies.entropy import EntropyController

Z = torch.tensor([[2.0, 1.0, 0.0], [0.5, 0.5, -1.0]])  # old logits at the two positions
IDS = [[0, 0], [1, 2], [2, 1], [0, 1]]


def _logp(temperature):
    lp = torch.log_softmax(Z / temperature, -1)
    return [[float(lp[t, i]) for t, i in enumerate(row)] for row in IDS]


def _dcpo_batch(h_hat, rewards=(1, 0, 0, 1)):
    t = 1.2 if h_hat <= 0.5 else 0.8
    b = rollouts(list(rewards), ids=IDS, logprobs=_logp(1.0))
    b.probe_logprobs = torch.tensor(_logp(t))
    b.controller = {"h_hat": h_hat, "h0": 0.5, "probe_temperature": t}
    return b


def test_dcpo_spec_vector_low_entropy():
    assert _logp(1.0)[1] == pytest.approx([-1.4076, -2.2989], abs=1e-4)
    assert _logp(1.2)[0] == pytest.approx([-0.4846, -0.8270], abs=1e-4)
    out = ADVANTAGES["dcpo"].bind({})(_dcpo_batch(0.3))
    want = torch.tensor([[0.8760, 0.8837], [-0.7217, -0.7217], [-0.7217, -0.7217], [0.8760, 0.8837]])
    assert torch.allclose(out.advantages, want, atol=1e-4)
    assert out.metrics["adv/dcpo/alpha"] == pytest.approx(1 / 6)
    assert out.metrics["adv/dcpo/rho_mean"] == pytest.approx((0.9259 + 0.9723) / 2, abs=1e-4)


def test_dcpo_spec_vector_high_entropy():
    a = ADVANTAGES["dcpo"].bind({})(_dcpo_batch(0.62)).advantages
    assert a[0].tolist() == pytest.approx([0.9047, 0.8938], abs=1e-4)
    assert a[3].tolist() == pytest.approx([0.9047, 0.8938], abs=1e-4)
    assert a[1].tolist() == pytest.approx([-0.7217, -0.7217], abs=1e-4)


def test_dcpo_no_correct_row_zero_or_the_code_s_nan():
    b = _dcpo_batch(0.3, rewards=(0, 0, 0, 0))
    out = ADVANTAGES["dcpo"].bind({})(b)
    assert out.advantages.abs().sum() == 0 and out.metrics["adv/dcpo/alpha"] == 0
    assert torch.isnan(ADVANTAGES["dcpo"].bind({"no_correct": "nan"})(b).advantages).all()


def test_dcpo_needs_the_controller():
    b = _dcpo_batch(0.3)
    b.controller = None
    with pytest.raises(RolloutsError, match="rollout.strategy: {name: dcpo}"):
        ADVANTAGES["dcpo"].bind({})(b)


def test_controller_temperature_and_state():
    c = EntropyController(0.5, 1.2, 0.8)
    assert c.temperature() == 1.2  # H_hat = 0 before the first update
    b = rollouts([1.0], width=3, logprobs=[[-0.2, -1.0, -0.66]])
    c.observe(b)
    assert c.h_hat == pytest.approx(0.62) and c.temperature() == 0.8
    d = EntropyController(0.5, 1.2, 0.8)
    d.load_state_dict(c.state_dict())
    assert d.h_hat == c.h_hat


def test_aepo_advantage_keeps_fixed_rows():
    b = rollouts([1, 0, 1, 0, 1], groups=[0, 0, 0, 0, 7])
    b.fixed_advantage = torch.tensor([math.nan] * 4 + [1.0])
    a = ADVANTAGES["aepo_entropy"].bind({})(b).advantages
    assert a.tolist() == pytest.approx([0.866, -0.866, 0.866, -0.866, 1.0], abs=1e-3)


class _Recording:
    """The tiny engine, recording each call's sampling temperature."""

    def __init__(self, engine):
        self.engine, self.temps = engine, []
        self.pad_token_id = engine.pad_token_id

    def generate(self, prompts, n, sampling):
        self.temps.append(sampling.temperature)
        return self.engine.generate(prompts, n, sampling)


def _aepo_ctx(plan):
    from covey.engine import SamplingParams, TorchEngine
    from covey.models import build_tiny
    from covey.samplers import Draw
    from covey.strategies.base import RolloutContext

    calls = [0]

    def score(b):
        b.rewards = torch.tensor(plan[calls[0]][: len(b)], dtype=torch.float32)[:, None]
        b.reward_names = ("accuracy",)
        calls[0] += 1
        return {}

    model, tok = build_tiny("tiny-llama", seed=2)
    items = [{"id": i, "prompt": p} for i, p in enumerate("abcd")]
    eng = _Recording(TorchEngine(model, tok, dtype="fp32"))
    ctx = RolloutContext(engine=eng, tokenizer=tok, draws=[Draw(it, 4) for it in items],
                         sampling=lambda r: SamplingParams(seed=7 + r, max_new_tokens=3), score=score, draw=lambda k: [])  # fmt: skip
    return items, ctx, eng


@pytest.mark.parametrize("mode", ["append", "replace"])
def test_aepo_strategy_spec_vector(mode):
    # H_hat 0.62 > 0.5 -> T = 0.8; 4 prompts -> floor(4/4) = 1 re-sampled; rewards [1,0,1,0] -> kept rows
    # [0, 2]; k = floor(min(60, 2) / 2) = 1
    items, ctx, eng = _aepo_ctx([[0.0] * 16, [1, 0, 1, 0]])
    s = STRATEGIES.build("aepo_entropy", {"mode": mode})
    s.load_state_dict({"h_hat": 0.62})
    batch, m = s.rollout(items, ctx)
    assert eng.temps == [1.0, 0.8] and m["aepo/temperature"] == 0.8 and m["aepo/reinforce_rows"] == 1
    fixed = batch.fixed_advantage
    if mode == "append":
        assert len(batch) == 17 and fixed[-1] == 1 and torch.isnan(fixed[:-1]).all()
    else:  # the code: the first k rows of the batch are replaced; the rest keep their full-group GRPO (0 here)
        assert len(batch) == 16 and fixed[0] == 1 and fixed[1:].tolist() == [0.0] * 15
        assert batch.group[1:].tolist() == [0, 0, 0] + [1] * 4 + [2] * 4 + [3] * 4
    assert batch.recompute_old_logprobs and batch.controller["h_hat"] == pytest.approx(0.62)
    a = ADVANTAGES["aepo_entropy"].bind({})(batch).advantages
    assert a[batch.group >= 4].tolist() == [1.0] and a[batch.group < 4].abs().sum() == 0  # main rewards all 0
    assert s.state_dict()["h_hat"] > 0  # observed this step's main rows for the next step


def test_aepo_replace_is_the_default_and_keeps_full_group_advantages():
    # main group 0 rewards [1, 0, 0, 0]: GRPO mean 0.25, unbiased std 0.5 -> [1.5, -0.5, -0.5, -0.5]. The
    # released trainer computes that on the whole batch, then replaces row 0 by the REINFORCE row: rows 1-3
    # keep -0.5. Recomputing GRPO on the shortened group [0, 0, 0] would give 0.
    items, ctx, _ = _aepo_ctx([[1.0, 0, 0, 0] + [0.0] * 12, [1, 0, 1, 0]])
    s = STRATEGIES.build("aepo_entropy", {})
    assert s.mode == "replace"
    s.load_state_dict({"h_hat": 0.62})  # k = 1
    batch, _ = s.rollout(items, ctx)
    a = ADVANTAGES["aepo_entropy"].bind({})(batch).advantages
    assert len(batch) == 16 and a[:4].tolist() == pytest.approx([1.0, -0.5, -0.5, -0.5], abs=1e-5)
    assert a[4:].abs().sum() == 0


def test_aepo_strategy_low_entropy_samples_hot_and_keeps_all():
    items, ctx, eng = _aepo_ctx([[0.0] * 16, [1, 0, 1, 0]])
    s = STRATEGIES.build("aepo_entropy", {"mode": "append"})
    batch, m = s.rollout(items, ctx)  # H_hat 0 <= 0.5 -> T = 1.2, no halving: k = 2
    assert eng.temps == [1.0, 1.2] and m["aepo/reinforce_rows"] == 2 and len(batch) == 18


def test_aepo_no_kept_row_is_a_plain_step():
    items, ctx, _ = _aepo_ctx([[0.0] * 16, [0, 0, 0, 0]])
    batch, m = STRATEGIES.build("aepo_entropy", {}).rollout(items, ctx)
    assert len(batch) == 16 and batch.fixed_advantage is None and m["aepo/reinforce_rows"] == 0
