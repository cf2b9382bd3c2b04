"""`swarm` (SAPO sharing): two tiny-llama learners exchange decoded rollouts through Ray."""

import uuid

import pytest
import torch

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]

from covey.train.config import ConfigError  # noqa: E402
from covey.train.trainer import Trainer  # noqa: E402
from tests.runtime.test_thread_trainer import _cfg  # noqa: E402


def _learner(tmp_path, swarm, node, *extra):
    cfg = _cfg(tmp_path, f"rollout.strategy={{name: swarm, swarm: {swarm}, node: {node}}}", "task.params={digits: 1, n_train: 64, n_test: 16}", *extra)
    return Trainer(cfg, tmp_path / node)


def test_two_learners_share_decoded_rollouts_one_to_one(tmp_path):
    swarm = f"t{uuid.uuid4().hex[:6]}"
    a = _learner(tmp_path, swarm, "a", "seed=1")
    b = _learner(tmp_path, swarm, "b", "seed=2")
    hub = None
    try:
        batch_a, m_a = a.collect()  # nobody published yet: local groups only
        assert m_a["swarm/external_groups"] == 0 and m_a["swarm/peers"] == 0 and len(batch_a) == 16
        hub = ray.get_actor(f"covey-swarm-{swarm}", namespace="covey")
        batch_b, m_b = b.collect()  # a's 4 groups are there: 4 local + 4 external (the 1:1 mix)
        assert m_b["swarm/peers"] == 1 and m_b["swarm/available_groups"] == 4 and m_b["swarm/external_groups"] == 4
        assert len(batch_b) == 32 and len(torch.unique(batch_b.group)) == 8
        assert batch_b.rewards is not None and batch_b.recompute_old_logprobs
        ext = batch_b.select(torch.arange(16, 32))
        published = {int(g["item"]["id"]): g for g in ray.get(hub.others.remote("b"), timeout=60)["a"][1]}
        assert sorted(published) == sorted(set(batch_a.prompt_id.tolist()))
        eos = b.tokenizer.eos_token_id
        for row in range(len(ext)):  # a's completion texts, re-encoded with b's tokenizer (+ EOS when stopped)
            g = published[int(ext.prompt_id[row])]
            j = row % 4  # groups of 4, completions in a's order
            want = b.tokenizer.encode(g["completions"][j], add_special_tokens=False) + ([eos] if g["finish"][j] == "stop" else [])
            want = want[:8] or [eos]
            n = int(ext.completion_mask[row].sum())
            assert ext.completion_ids[row, :n].tolist() == want and ext.finish_reason[row] == g["finish"][j]
            assert ext.items[row] == g["item"]
        assert torch.equal(ext.behaviour_logprobs, torch.zeros_like(ext.behaviour_logprobs))
        assert torch.equal(ext.group.unique(), torch.arange(4, 8))  # after b's own groups 0..3
        m = b.step()  # trains on local + external (pi_old recomputed)
        assert m["swarm/external_groups"] == 4 and m["learn/loss"] == m["learn/loss"]
        m = a.step()  # and a now takes b's latest publication
        assert m["swarm/external_groups"] == 4
    finally:
        a.close()
        b.close()
        if hub is not None:
            ray.kill(hub)


def test_external_count_and_refusals(tmp_path):
    with pytest.raises(ConfigError, match="cannot use algo.correction"):
        _cfg(tmp_path, "rollout.strategy={name: swarm}", "algo.correction={name: tis}")
    with pytest.raises(ConfigError, match="external must be >= 0"):
        _cfg(tmp_path, "rollout.strategy={name: swarm, external: -1}")
