"""Each masked-diffusion preset trains 2 steps end to end on tiny-llada; contradictory settings are
refused when the config is read; BGPO's per-sample bound has the ELBO-ratio loss's value and gradient
on-policy; at unchanged weights every estimator's ratio is exactly 1."""

import pytest
import torch

from covey.algos import SURROGATES, LossInputs
from covey.algos.presets import PRESETS
from covey.train.config import ConfigError, load_config
from covey.train.trainer import Trainer

DIFFUSION_PRESETS = sorted(p for p in PRESETS if "likelihood" in PRESETS[p])
TOY = '''
def digits(completions, **kw):
    """Dense toy reward: the fraction of digit characters (a random model's groups differ)."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]
'''


@pytest.fixture(autouse=True)
def toy_reward(tmp_path, monkeypatch):
    (tmp_path / "dlm_toy.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))


def _cfg(tmp_path, *overrides):
    base = [
        "model.name=tiny-llada", "model.family=masked_diffusion", "model.dtype=fp32",
        "engine={name: masked_diffusion, block_length: 4, steps: 4}",
        "task.name=arithmetic", "task.params={digits: 1, n_train: 32, n_test: 8}",
        "rollout.prompts_per_step=2", "rollout.group_size=3", "sampling.max_new_tokens=8",
        "reward_workers=0", "rewards=[{name: 'dlm_toy:digits'}]", "log.progress=false", "log.tensorboard=false", "optim.lr=1e-3", f"log.dir={tmp_path}",
    ]  # fmt: skip
    return load_config(None, base + list(overrides))


def test_diffusion_presets_are_the_four():
    assert DIFFUSION_PRESETS == ["bgpo", "diffu_grpo", "dlm_gdpo", "espo"]


@pytest.mark.parametrize("preset", DIFFUSION_PRESETS)
def test_preset_trains_two_steps(tmp_path, preset):
    extra = ["algo.likelihood.mc_num=2"] if preset == "bgpo" else []
    cfg = _cfg(tmp_path, f"algo.preset={preset}", "steps=2", *extra)
    trainer = Trainer(cfg, tmp_path / preset)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    try:
        rows = [trainer.step() for _ in range(2)]
    finally:
        trainer.close()
    for m in rows:
        assert all(torch.isfinite(torch.tensor(m[k])) for k in ("learn/loss", "learn/grad_norm", "reward/mean"))
        assert m["surrogate/ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # one update per batch: pi_old = pi_theta, same masks
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


def test_two_epochs_move_the_ratio(tmp_path):
    cfg = _cfg(tmp_path, "algo.preset=dlm_gdpo", "steps=1", "optim.epochs=2", "optim.lr=1e-2")
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        m = trainer.step()
    finally:
        trainer.close()
    assert m["surrogate/ratio_max"] > 1.0 + 1e-6 or m["surrogate/ratio_min"] < 1.0 - 1e-6


@pytest.mark.parametrize("overrides,match", [
    (["model.family=causal"], "is a masked-diffusion model"),
    (["engine=torch"], "needs engine: masked_diffusion"),
    (["engine=vllm"], "masked_diffusion|vLLM|vllm"),
    (["algo.likelihood=null"], "needs algo.likelihood"),
    (["sampling.top_p=0.9"], "top_p"),
    (["sampling.stop_strings=[x]"], "stop_strings"),
    (["algo.entropy_coef=0.01"], "entropies"),
    (["algo.correction={name: tis}"], "behaviour log-probs"),
    (["engine.block_length=3"], "must divide"),
    (["rollout.strategy=treepo"], "ForkingEngine"),
    (["algo.regularizers=[{name: epo}]"], "reads stat:entropy"),
    (["algo.logprob_source={layer: 0, until_step: 1}"], "remove algo.logprob_source"),
    (["algo.surrogate={name: bgpo}", "algo.regularizers=[{name: kl_old}]"], "one backward per Monte Carlo sample"),
])  # fmt: skip
def test_contradictions_refused_at_config_time(tmp_path, overrides, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        _cfg(tmp_path, "algo.preset=dlm_gdpo", *overrides)


def test_causal_model_refuses_the_family_parts(tmp_path):
    base = ["model.name=tiny-llama", "task.name=arithmetic", "reward_workers=0", f"log.dir={tmp_path}"]
    with pytest.raises(ConfigError, match="is a causal model"):
        load_config(None, base + ["model.family=masked_diffusion", "engine={name: masked_diffusion}", "algo.preset=dlm_gdpo"])
    with pytest.raises(ConfigError, match="needs model.family: masked_diffusion"):
        load_config(None, base + ["algo.preset=dlm_gdpo"])
    with pytest.raises(ConfigError, match="generates with masked-diffusion models"):
        load_config(None, base + ["engine={name: masked_diffusion}"])


def test_config_error_is_one_line_exit_2(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "covey.cli", "config", "show", "model.name=tiny-llada", "algo.preset=dlm_gdpo",
                          "model.family=masked_diffusion"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 2 and "needs engine: masked_diffusion" in out.stderr and "Traceback" not in out.stderr


def test_bgpo_vectors_and_on_policy_gradient():
    fn = SURROGATES.get("bgpo").bind({})
    old = torch.tensor([[-2.0], [-2.2]])
    new = torch.tensor([[-1.9], [-2.3]])
    mask = torch.ones(2, 1)
    loss, _ = fn(LossInputs(new, old, torch.ones(2, 1), mask))
    assert loss.flatten().tolist() == pytest.approx([-1.1, -0.9])
    loss, _ = fn(LossInputs(new, old, -torch.ones(2, 1), mask))
    assert loss.flatten().tolist() == pytest.approx([1.105171, 0.904837], abs=1e-6)
    assert float(loss.mean()) == pytest.approx(1.005004, abs=1e-6)
    # dual clip: A < 0 and a ratio far above 1 is capped at -A c
    loss, m = fn(LossInputs(torch.tensor([[0.0]]), torch.tensor([[-5.0]]), -torch.ones(1, 1), torch.ones(1, 1)))
    assert float(loss) == pytest.approx(3.0) and m["surrogate/clip_frac_dual"] == 1.0
    # on-policy: sum_j bgpo(l_j)/m has the value and gradient of ppo_clip on the ELBO mean
    ppo = SURROGATES.get("ppo_clip").bind({})
    theta = torch.tensor([0.3, -0.7], requires_grad=True)
    c = torch.tensor([[1.0, 2.0], [-1.0, 0.5], [0.2, -3.0]])  # l_j = c_j . theta, 3 samples
    for a in (1.0, -1.0):
        adv = torch.full((1, 1), a)
        terms = [(c[j] @ theta).reshape(1, 1) for j in range(3)]
        bg = sum(fn(LossInputs(t, t.detach(), adv, torch.ones(1, 1)))[0] for t in terms) / 3
        g_bg = torch.autograd.grad(bg.sum(), theta, retain_graph=True)[0]
        mean = sum(terms) / 3
        pp = ppo(LossInputs(mean, mean.detach(), adv, torch.ones(1, 1)))[0]
        g_pp = torch.autograd.grad(pp.sum(), theta)[0]
        assert float(bg.detach()) == pytest.approx(float(pp.detach())) == pytest.approx(-a)
        assert torch.allclose(g_bg, g_pp, atol=1e-6)


def test_a_logp_regularizer_trains_on_the_estimator(tmp_path):
    """kl_old reads only log-probs: with two epochs it acts on the ELBO estimates (pi_old recomputed)."""
    cfg = _cfg(tmp_path, "algo.preset=dlm_gdpo", "steps=1", "optim.epochs=2", "optim.lr=1e-2",
               "algo.regularizers=[{name: kl_old}]")  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        m = trainer.step()
    finally:
        trainer.close()
    assert m["reg/kl_old/kl"] > 0 and torch.isfinite(torch.tensor(m["reg/kl_old/loss"])), sorted(m)  # epoch 2 moved
    assert torch.isfinite(torch.tensor(m["learn/loss"]))
