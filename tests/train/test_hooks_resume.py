"""The trainer hooks keep their state across a SIGKILL + resume, bit-exact: the dcpo strategy's
entropy controller."""

import pytest

from covey.train.checkpoint import load_checkpoint
from tests._kill_resume import kill_and_resume

pytestmark = pytest.mark.slow  # each test: two `covey train` processes, one killed with SIGKILL and resumed

BASE = {
    "model": {"name": "tiny-llama"},
    "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 64, "n_test": 16}},
    "rollout": {"prompts_per_step": 2, "group_size": 2},
    "sampling": {"max_new_tokens": 6},
    "optim": {"lr": 3e-3},
    "reward_workers": 0,
    "log": {"progress": False, "tensorboard": False},
    "checkpoint": {"every": 2},
    "steps": 3,
}


def test_dcpo_controller_state_resumes_exactly(tmp_path):
    cfg = {**BASE, "rollout": {**BASE["rollout"], "strategy": {"name": "dcpo", "h0": 0.5}},
           "algo": {"preset": "grpo", "advantage": {"name": "dcpo"}, "kl": None}}  # fmt: skip
    seen = {}

    def inspect(ckpt):
        payload, _ = load_checkpoint(ckpt)
        seen["h_hat"] = payload["strategy"]["h_hat"]

    metrics, _, _ = kill_and_resume(tmp_path, cfg, inspect=inspect)
    assert seen["h_hat"] > 0  # the controller's estimate after step 2 is in the checkpoint
    assert metrics[0]["dcpo/h_hat"] == 0.0 and metrics[2]["dcpo/h_hat"] == seen["h_hat"]


def test_reference_reset_resumes_exactly_with_the_reset_reference(tmp_path):
    cfg = {**BASE, "algo": {"preset": "grpo", "kl": {"name": "k3", "coef": 0.5},
                            "reference_reset": {"every": 2}}}  # fmt: skip
    seen = {}

    def inspect(ckpt):
        payload, _ = load_checkpoint(ckpt)
        seen["ref"] = payload["reference"]

    metrics, straight, _ = kill_and_resume(tmp_path, cfg, inspect=inspect)
    assert seen["ref"]["step"] == 2 and seen["ref"]["weights"]  # the reset reference is checkpointed
    assert [m.get("ref/reset") for m in metrics] == [None, 1.0, None]
    assert metrics[2]["kl/mean"] == 0.0  # step 3 starts from pi_ref = pi_theta (one update per batch)
