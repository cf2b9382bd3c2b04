"""oblr_baseline: hand-checked vector (token and sequence variants, zero tail), edge
cases, and the trainer's sum_p2 against a full softmax."""

import math

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES


def _batch(rewards=(1.0, 0.0), groups=None):
    # row 0: pi = [0.9, 0.5, 0.7], sum_p2 = [0.82, 0.5, 0.6]; row 1: pi = [0.6, 0.3], sum_p2 = [0.5, 0.4]
    b = rollouts(list(rewards), groups=groups, lengths=[3, 2], width=3,
                 logprobs=[[math.log(0.9), math.log(0.5), math.log(0.7)], [math.log(0.6), math.log(0.3), 0.0]])  # fmt: skip
    b.sum_p2 = torch.tensor([[0.82, 0.5, 0.6], [0.5, 0.4, 0.0]])
    return b


def run(b, **params):
    return ADVANTAGES["oblr_baseline"].bind(params)(b)


def test_token_variant_spec_vector():
    a = run(_batch(), variant="token").advantages
    assert a[0].tolist() == pytest.approx([0.9375, 0.6790, 1.0], abs=1e-4)  # zero tail: B = 0 at t = 2
    assert a[1, :2].tolist() == pytest.approx([-0.0625, -0.3210], abs=1e-4) and a[1, 2] == 0
    b = run(_batch(), variant="token", zero_tail=False).advantages
    assert b[0].tolist() == pytest.approx([0.9375, 0.6790, 0.0], abs=1e-4)


def test_sequence_variant_spec_vector():
    a = run(_batch()).advantages
    assert a.tolist() == pytest.approx([0.6044, -0.3956], abs=1e-4)  # b = (0.72 * 1 + 1.1 * 0) / 1.82


def test_groups_of_one_and_equal_rewards():
    assert run(_batch(groups=[0, 1])).advantages.tolist() == pytest.approx([0.0, 0.0], abs=1e-6)  # b = own reward
    a = run(_batch(groups=[0, 1]), variant="token", zero_tail=False).advantages  # a group of one: B = 0, A = r
    assert a[0].tolist() == pytest.approx([1.0, 1.0, 1.0]) and a[1].abs().sum() == 0
    eq = run(_batch(rewards=(1.0, 1.0)), variant="token", zero_tail=False).advantages
    assert eq[:, :2].abs().max() < 1e-6


def test_trainer_fills_sum_p2_of_pi_old(tmp_path):
    from covey.train.config import load_config
    from covey.train.trainer import Trainer

    cfg = load_config(None, [
        "model.name=tiny-llama", "task.name=arithmetic", "task.params={digits: 1, n_train: 16, n_test: 4}",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=5", "reward_workers=0",
        "log.progress=false", "log.tensorboard=false", "algo.kl=null", "steps=1", f"log.dir={tmp_path}",
        "model.dtype=fp32", "sampling.temperature=0.8", "algo.advantage={name: oblr_baseline}",
    ])  # fmt: skip
    tr = Trainer(cfg, tmp_path / "run")
    batch, _ = tr.collect()
    tr.fill_fields(batch)
    with torch.no_grad():
        for i in range(len(batch)):
            n = int(batch.completion_mask[i].sum())
            ids = torch.cat([batch.prompt_ids[i], batch.completion_ids[i, :n]])[None]
            z = tr.model(ids).logits[0, len(batch.prompt_ids[i]) - 1 : len(batch.prompt_ids[i]) - 1 + n] / 0.8
            want = torch.softmax(z, -1).pow(2).sum(-1)
            assert torch.allclose(batch.sum_p2[i, :n], want, atol=1e-5)
            assert batch.sum_p2[i, n:].abs().sum() == 0
