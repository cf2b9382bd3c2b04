"""The regularizer axis and the wave-2 surrogates train end to end from a config on tiny-llama
(2 prompts x 2 completions x 8 new tokens, 2 steps), and regularizer state survives a checkpoint."""

import math

import pytest

from covey.train.config import load_config
from covey.train.trainer import Trainer

from test_objectives_e2e import side_rewards  # noqa: F401  (the fixture: quality / level reward columns)

TWO_UPDATES = ["optim.mini_batches=2"]  # pi_theta moves between the two optimizer steps: terms on pi_old act
METHODS = {
    "llds": ["algo.regularizers=[{name: llds}]", *TWO_UPDATES],
    # two epochs over one mini-batch of two groups in two micro-batches: the KL pre-pass spans micro-batches
    "disco_kl": ["algo.advantage={name: disco}", "algo.surrogate={name: disco}", "algo.aggregation={name: seq-mean-token-mean}",
                 "algo.regularizers=[{name: disco_kl}]", "optim.micro_batch_size=2", "optim.epochs=2"],
    "kl_old": ["algo.advantage={name: trpa}", "algo.surrogate={name: trpa}", "algo.aggregation={name: seq-mean-token-mean}",
               "algo.regularizers=[{name: kl_old}]", *TWO_UPDATES],
    "r2vpo_provisional": ["algo.surrogate={name: r2vpo_provisional}", "algo.aggregation={name: token-mean}",
                          "algo.regularizers=[{name: r2vpo_provisional, lambda0: 0.5}]", "optim.micro_batch_size=1", *TWO_UPDATES],
    "epo": ["algo.regularizers=[{name: epo, coef: 0.01}]"],
    "etr_provisional": ["algo.surrogate={name: etr_provisional}", "algo.aggregation={name: token-mean}",
                        "optim.skip_zero_advantage=false"],  # the random tiny model may score no signal
    "reg_grpo_provisional": ["algo.surrogate={name: reg_grpo_provisional}", "algo.aggregation={name: seq-mean-token-mean}",
                             "optim.micro_batch_size=2", *TWO_UPDATES],
    "rover": ["algo.advantage={name: rover}", "algo.surrogate={name: rover}", "algo.aggregation={name: token-mean}", *TWO_UPDATES],
}  # fmt: skip
PROOF = {  # metrics only the method writes
    "llds": ["reg/llds/gated_frac", "reg/llds/loss"],
    "disco_kl": ["reg/disco_kl/kl", "reg/disco_kl/coef", "adv/disco/valid_groups"],
    "kl_old": ["reg/kl_old/kl", "adv/trpa/pairs"],
    "r2vpo_provisional": ["reg/r2vpo_provisional/ratio_var", "reg/r2vpo_provisional/lambda_next"],
    "epo": ["reg/epo/entropy", "reg/epo/out_of_band_frac", "reg/epo/history_turns"],
    "etr_provisional": ["surrogate/eps_scale_mean"],
    "reg_grpo_provisional": ["surrogate/ahat_abs_mean"],
    "rover": ["surrogate/next_mean", "adv/rover/success_frac"],
}


def _config(tmp_path, side, extra):
    return load_config(None, [
        "model.name=tiny-llama", "task.name=arithmetic", "task.params={digits: 1, n_train: 16, n_test: 4}",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=8", "reward_workers=0",
        "log.progress=false", "log.tensorboard=false", "algo.kl=null", "optim.lr=1e-3", "steps=2",
        f"log.dir={tmp_path}",
        f"rewards=[{{name: '{side}:quality', weight: 0.0, in_process: true}}, {{name: '{side}:level', weight: 0.0, in_process: true}}]",
        *extra,
    ])  # fmt: skip


@pytest.mark.parametrize("method", sorted(METHODS))
def test_method_trains_two_steps_from_config(tmp_path, side_rewards, method):  # noqa: F811
    cfg = _config(tmp_path, side_rewards, METHODS[method])
    names = {cfg.algo.advantage.name, cfg.algo.surrogate.name, *(s.name for s in cfg.algo.regularizers)}
    assert method in names
    trainer = Trainer(cfg, tmp_path / method)
    try:
        for step in (1, 2):
            m = trainer.step()
            assert all(k in m for k in PROOF[method]), (method, sorted(m))
            for key in ("adv/mean", "learn/loss", "learn/grad_norm", *PROOF[method]):
                assert math.isfinite(m[key]), (step, key, m[key])
        assert trainer.step_num == 2
    finally:
        trainer.close()


def test_regularizer_state_is_checkpointed_and_restored(tmp_path, side_rewards):  # noqa: F811
    extra = ["algo.surrogate={name: r2vpo_provisional}", "algo.regularizers=[{name: r2vpo_provisional, lambda0: 0.5, delta: 0.0}, "
             "{name: epo}, {name: disco_kl, prepass: false}]", *TWO_UPDATES]  # fmt: skip
    cfg = _config(tmp_path, side_rewards, extra)
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer.step()
        state = trainer.learner.objective.regularizers.state_dict()
        trainer.save()
    finally:
        trainer.close()
    lam = state["0:r2vpo_provisional"]["lambda"]
    assert lam >= 0.5  # delta 0: lambda only grows (by eta * Var >= 0) from lambda0
    assert state["1:epo"]["hist_cnt"] == {0: 1}  # one training step of history for turn 0
    assert "last_kl" in state["2:disco_kl"]
    resumed = Trainer(cfg, tmp_path / "run", resume=True)
    try:
        assert resumed.learner.objective.regularizers.state_dict() == state
        fresh = Trainer(_config(tmp_path, side_rewards, extra), tmp_path / "fresh")
        try:
            assert fresh.learner.objective.regularizers.state_dict()["0:r2vpo_provisional"]["lambda"] == 0.5
        finally:
            fresh.close()
    finally:
        resumed.close()
