"""The `loop` preset (LOOP, arXiv 2502.01600) against apple/ml-loop's loss: leave-one-out advantages,
per-token PPO clip to [1/(1+0.1), 1+0.1], each rollout's loss the mean over its tokens, no KL."""

import math

import torch

from covey.algos.presets import resolve_algo
from covey.algos.registry import BatchTotals, LossInputs
from covey.rollouts import Rollouts


def test_loop_preset_components():
    cfg = resolve_algo({"preset": "loop"})
    assert cfg.advantage.name == "rloo" and cfg.aggregation.name == "seq-mean-token-mean" and cfg.kl is None
    assert cfg.surrogate.name == "ppo_clip" and cfg.surrogate.params == {"eps_low": 1 - 1 / 1.1, "eps_high": 0.1}


def test_loop_loss_matches_ml_loop_by_hand():
    cfg = resolve_algo({"preset": "loop"})
    # ml-loop _compute_adv_estimates (LOO, no normalisation): returns [1, 0, 0] -> [1, -0.5, -0.5]
    batch = Rollouts(
        prompt_ids=[torch.tensor([1])] * 3, completion_ids=torch.ones(3, 2, dtype=torch.long),
        completion_mask=torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]]), behaviour_logprobs=torch.zeros(3, 2),
        group=torch.zeros(3, dtype=torch.long), prompt_id=torch.zeros(3, dtype=torch.long),
        finish_reason=["stop"] * 3, rewards=torch.tensor([[1.0], [0.0], [0.0]]), reward_names=("env_return",),
    )  # fmt: skip
    adv = cfg.bind("advantage")(batch).advantages
    assert adv.tolist() == [1.0, -0.5, -0.5]
    # ml-loop _ppo_loss per token: -min(w A, g(A)) with g(A) = 1.1 A (A >= 0) or A / 1.1 (A < 0)
    ratios = torch.tensor([[1.5, 0.5], [0.5, 1.05], [1.2, 1.0]])
    a = adv[:, None].expand(3, 2)
    mask = batch.completion_mask
    tok, _ = cfg.bind("surrogate")(LossInputs(logp=ratios.log(), old_logp=torch.zeros(3, 2), advantages=a, mask=mask))
    g = torch.where(a >= 0, 1.1 * a, a / 1.1)
    want_tok = -torch.minimum(ratios * a, g)
    assert torch.allclose(tok * mask, want_tok * mask, atol=1e-6)
    # row 0: -min(1.5, 1.1), -min(0.5, 1.1) -> mean -0.8; row 1: 0.5 -> -min(-0.25, -0.4545) = 0.4545 and
    # 1.05 -> 0.525, mean 0.4898; row 2: one token, 1.2 * -0.5 = -0.6 vs -0.4545 -> 0.6
    want = [(-1.1 - 0.5) / 2, (0.5 / 1.1 + 0.525) / 2, 0.6]
    per_row = [(want_tok[i] * mask[i]).sum() / mask[i].sum() for i in range(3)]
    assert [round(float(x), 6) for x in per_row] == [round(x, 6) for x in want]
    loss, _ = cfg.bind("aggregation")(tok, mask, BatchTotals(num_tokens=5.0, num_seqs=3.0, max_new_tokens=2))
    assert math.isclose(float(loss), sum(want) / 3, rel_tol=1e-6)  # the mean over rollouts of their token means
