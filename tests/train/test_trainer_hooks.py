"""Trainer hooks: ProRL's reference reset (`algo.reference_reset`), the `prorl` preset, and the probe
log-probs an estimator requires (DCPO: pi_old at the controller's temperature)."""

import pytest
import torch

from covey.algos import KL_ESTIMATORS, resolve_algo
from covey.train.config import load_config
from covey.train.trainer import Trainer


def test_schedule_and_config_errors():
    spec = resolve_algo({"kl": {"name": "k3", "coef": 0.1}, "reference_reset": {"every": 3, "steps": [5]}}).reference_reset
    assert [s for s in range(1, 10) if spec.due(s)] == [3, 5, 6, 9]
    with pytest.raises(ValueError, match="needs `every`"):
        resolve_algo({"kl": {"name": "k3", "coef": 0.1}, "reference_reset": {"reset_optimizer": False}})
    with pytest.raises(ValueError, match="no component uses one"):
        resolve_algo({"kl": None, "reference_reset": {"every": 2}})
    with pytest.raises(ValueError, match="1-based"):
        resolve_algo({"kl": {"name": "k3", "coef": 0.1}, "reference_reset": {"steps": [0]}})


def test_k3_spec_vector_and_zero_after_a_reset():
    m = torch.ones(1, 1)
    kl, _ = KL_ESTIMATORS["k3"].bind({})(torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), m)
    assert float(kl) == pytest.approx(0.1065, abs=1e-4)
    kl, _ = KL_ESTIMATORS["k3"].bind({})(torch.tensor([[-1.0]]), torch.tensor([[-1.0]]), m)
    assert float(kl) == 0.0


def test_prorl_preset():
    a = resolve_algo({"preset": "prorl"})
    assert a.surrogate.params == {**a.surrogate.params, "eps_low": 0.2, "eps_high": 0.4}
    assert a.dynamic_sampling and a.kl.name == "k3" and a.kl.coef > 0 and a.reference_reset.every == 200


TOY = '''
def length(prompts, completions, **columns):
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [float(len(t)) / 10 for t in texts]
'''


def test_reset_copies_the_policy_and_clears_the_optimizer(tmp_path, monkeypatch):
    (tmp_path / "toy_len.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, [
        "rewards=[{name: 'toy_len:length', in_process: true}]", "rollout.group_size=4",
        "model.name=tiny-llama", "task.name=arithmetic", "task.params={digits: 1, n_train: 16, n_test: 4}",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=6", "reward_workers=0",
        "log.progress=false", "log.tensorboard=false", "optim.lr=1e-2", "steps=3", f"log.dir={tmp_path}",
        "algo.kl={name: k3, coef: 0.5}", "algo.reference_reset={steps: [2]}",
    ])  # fmt: skip
    tr = Trainer(cfg, tmp_path / "run")
    m1 = tr.step()
    assert "ref/reset" not in m1 and len(tr.optimizer.state) > 0
    with tr.reference.active() as ref:
        assert any(not torch.equal(p, q) for p, q in zip(ref.parameters(), tr.model.parameters()))
    m2 = tr.step()
    assert m2["ref/reset"] == 1.0 and len(tr.optimizer.state) == 0 and tr.hooks[0].last_reset == 2
    with tr.reference.active() as ref:
        assert all(torch.equal(p, q) for p, q in zip(ref.parameters(), tr.model.parameters()))
    m3 = tr.step()
    assert m3["kl/mean"] == 0.0


def test_lora_is_refused_before_the_model_loads(tmp_path):
    from covey.train.setup import check_run

    cfg = load_config(None, ["model.name=tiny-llama", "model.lora={r: 4}", "algo.kl={name: k3, coef: 0.1}",
                             "algo.reference_reset={every: 2}", "task.name=arithmetic", f"log.dir={tmp_path}"])  # fmt: skip
    with pytest.raises(ValueError, match="model.lora"):
        check_run(cfg)


def test_probe_logprobs_are_pi_old_at_the_controller_temperature(tmp_path):
    from covey.learner.logprobs import completion_logprobs

    cfg = load_config(None, [
        "model.name=tiny-llama", "task.name=arithmetic", "task.params={digits: 1, n_train: 16, n_test: 4}",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=6", "reward_workers=0",
        "log.progress=false", "log.tensorboard=false", "algo.kl=null", "steps=1", f"log.dir={tmp_path}",
        "model.dtype=fp32", "algo.advantage={name: dcpo}", "rollout.strategy={name: dcpo, t_high: 1.7}",
    ])  # fmt: skip
    tr = Trainer(cfg, tmp_path / "run")
    batch, _ = tr.collect()
    assert batch.controller["probe_temperature"] == 1.7  # H_hat = 0 <= h0 at the first step
    tr.fill_fields(batch)
    with torch.no_grad():
        want, _ = completion_logprobs(tr.model, batch.prompt_ids, batch.completion_ids, batch.completion_mask, temperature=1.7)
    assert torch.allclose(batch.probe_logprobs, want * batch.completion_mask, atol=1e-5)
    assert not torch.allclose(batch.probe_logprobs, batch.behaviour_logprobs, atol=1e-3)
    assert tr.learner.temperature == 1.0  # the learner's own temperature is restored
