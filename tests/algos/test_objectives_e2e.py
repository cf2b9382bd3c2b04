"""Every objectives-wave-2 method trains end to end from a config on tiny-llama (2 prompts x 2
completions x 8 new tokens, 2 steps): the config resolves, the trainer fills what the method
requires, the advantages are finite and the optimizer steps."""

import math

import pytest

from covey.train.config import load_config
from covey.train.trainer import Trainer

# Reward columns some methods read (weight 0: they are inputs, not part of the scalar reward).
SIDE_REWARDS = '''
def quality(prompts, completions, **columns):
    """A fine-grained score in [0, 1]: the fraction of digit characters (dagrpo's score column)."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]

def level(prompts, completions, **columns):
    """A TRPA-style preference level (1 best): 1 if the text has a digit, 2 if it has a letter, else 3."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [1.0 if any(ch.isdigit() for ch in t) else 2.0 if any(ch.isalpha() for ch in t) else 3.0 for t in texts]
'''

METHODS = {
    "dagrpo_provisional": ["algo.advantage={name: dagrpo_provisional, score_column: quality}"],
    "disco": ["algo.advantage={name: disco}", "algo.surrogate={name: reinforce}", "algo.aggregation={name: seq-mean-token-mean}"],
    "trpa": ["algo.advantage={name: trpa}", "algo.surrogate={name: reinforce}", "algo.aggregation={name: seq-mean-token-mean}"],
    "hapo": ["algo.advantage={name: hapo}", "algo.surrogate={name: hapo}", "algo.aggregation={name: token-mean}"],
    "spo_tree": ["algo.advantage={name: spo_tree}", "rollout.strategy={name: branch, segment_tokens: 4, branch_factor: 2}"],
    "polychromic": ["algo.advantage={name: polychromic}"],
    "dcpo": ["algo.advantage={name: dcpo}", "rollout.strategy={name: dcpo}"],
    "aepo_entropy": ["algo.advantage={name: aepo_entropy}", "rollout.strategy={name: aepo_entropy, extra_prompts: 1}"],
    "spo_chain": ["algo.advantage={name: spo_chain}", "rollout.strategy={name: spo_chain, samples: 2, interval: 3}"],
    "mssr": ["algo.advantage={name: mssr}", "sampler={name: spo, n: 2, rho_type: constant}"],
}

PROOF = {  # metrics only the method writes
    "dagrpo_provisional": ["adv/dagrpo_provisional/masked_pair_frac"],
    "disco": ["adv/disco/valid_groups"],
    "trpa": ["adv/trpa/pairs"],
    "hapo": ["adv/hapo/fallback_groups", "surrogate/h_hat_mean"],
    "polychromic": ["adv/polychromic/distinct_frac"],
    "mssr": ["adv/mssr/psi_mean"],
    "spo_tree": ["adv/spo_tree/kept_token_frac", "tree/leaves"],
    "spo_chain": ["adv/spo_chain/kept_token_frac", "spo_chain/mc_rollouts"],
    "dcpo": ["adv/dcpo/alpha", "dcpo/temperature"],
    "aepo_entropy": ["adv/aepo_entropy/reinforce_rows", "aepo/temperature"],
}


@pytest.fixture
def side_rewards(tmp_path, monkeypatch):
    (tmp_path / "side_rewards.py").write_text(SIDE_REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "side_rewards"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_method_trains_two_steps_from_config(tmp_path, side_rewards, method):
    cfg = load_config(None, [
        "model.name=tiny-llama", "task.name=arithmetic", "task.params={digits: 1, n_train: 16, n_test: 4}",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=8", "reward_workers=0",
        "log.progress=false", "log.tensorboard=false", "algo.kl=null", "optim.lr=1e-3", "steps=2",
        f"log.dir={tmp_path}",
        f"rewards=[{{name: '{side_rewards}:quality', weight: 0.0, in_process: true}}, "
        f"{{name: '{side_rewards}:level', weight: 0.0, in_process: true}}]",
        *METHODS[method],
    ])  # fmt: skip
    assert method in (cfg.algo.advantage.name, cfg.algo.surrogate.name)
    trainer = Trainer(cfg, tmp_path / method)
    for step in (1, 2):
        m = trainer.step()
        assert m["time/step"] > 0
        assert all(k in m for k in PROOF[method]), (method, sorted(m))  # the method's own metrics: it ran
        for key in ("adv/mean", "adv/std", "learn/loss", "learn/grad_norm"):
            assert math.isfinite(m[key]), (step, key, m[key])
    assert trainer.step_num == 2
