"""The typed algorithm configuration (`AlgoConfig`) and the named presets (plain data).

An algorithm is a choice on each registry axis (advantage, surrogate, aggregation, KL, correction)
plus a few sampler/reward settings. A preset is nothing but such a choice written as a dict: no
preset has code of its own, and nothing in covey branches on a preset's name.

    resolve_algo({"preset": "dapo", "surrogate": {"eps_high": 0.3}})   # dapo with eps_high 0.3

`resolve_algo` starts from the preset ("grpo" when the key is absent; `preset: null` starts from
nothing), merges the user's keys into it key by key, and validates every component name and
parameter against its registry before any model is loaded. Building the learner from the result
(binding each component once) is the trainer's job: see `AlgoConfig.bind`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from covey.algos.registry import ADVANTAGES, AGGREGATIONS, CORRECTIONS, KL_ESTIMATORS, SURROGATES
from covey.registry import Registry, Spec

__all__ = ["PRESETS", "PRESET_KEYS", "PRESET_NOTES", "SAMPLER_PRESETS", "AlgoConfig", "KLSpec", "LogprobSourceSpec", "OverlongSpec", "ReferenceResetSpec", "apply_sampler_preset",
           "layer_algo", "resolve_algo", "sampler_spec", "strategy_spec"]

DEFAULT_PRESET = "grpo"

# ---------------------------------------------------------------------------- presets (data only)
# Parameters not written here take the component's documented defaults. Sources and the reasons
# for each choice: docs/algorithms.md, "Presets".
_PPO = {"name": "ppo_clip", "eps_low": 0.2, "eps_high": 0.2}
PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {  # DeepSeekMath: seq-mean-token-mean, per-token k3 with beta 0.04 (paper value, UNVERIFIED)
        "advantage": {"name": "grpo"},
        "surrogate": {**_PPO},
        "aggregation": {"name": "seq-mean-token-mean"},
        "kl": {"name": "k3", "coef": 0.04, "mode": "loss"},
    },
    "dr_grpo": {  # official Dr.GRPO (oat): mean_i sum_t l / C, no KL
        "advantage": {"name": "dr_grpo"},
        "surrogate": {**_PPO},
        "aggregation": {"name": "seq-mean-token-sum-constant"},
    },
    "dapo": {  # verl recipe run_dapo_qwen2.5_32b.sh
        "advantage": {"name": "grpo"},
        "surrogate": {"name": "ppo_clip", "eps_low": 0.2, "eps_high": 0.28, "dual_clip": 10.0},
        "aggregation": {"name": "token-mean"},
        "overlong": {"buffer_frac": 0.2, "penalty_factor": 1.0},  # 4096 / 20480
        "dynamic_sampling": True,
        "max_gen_batches": 10,
    },
    "gspo": {
        "advantage": {"name": "grpo"},
        "surrogate": {"name": "gspo", "eps_low": 3e-4, "eps_high": 4e-4},
        "aggregation": {"name": "seq-mean-token-mean"},
    },
    "cispo": {  # verl example: no lower bound, cap 1 + 0.2
        "advantage": {"name": "grpo"},
        "surrogate": {"name": "cispo", "eps_low": None, "eps_high": 0.2, "cap_mode": "relative"},
        "aggregation": {"name": "token-mean"},
    },
    "sapo": {
        "advantage": {"name": "grpo"},
        "surrogate": {"name": "sapo", "tau_pos": 1.0, "tau_neg": 1.05},
        "aggregation": {"name": "seq-mean-token-mean"},
    },
    "mc_grpo": {  # sample G + 1, train on G (pivot removed); recipe beta 0.04, TRL loss_type grpo
        "advantage": {"name": "mc_grpo"},
        "surrogate": {**_PPO},
        "aggregation": {"name": "seq-mean-token-mean"},
        "kl": {"name": "k3", "coef": 0.04, "mode": "loss"},
        "group_size_extra": 1,
    },
    "gdpo": {
        "advantage": {"name": "gdpo"},
        "surrogate": {**_PPO},
        "aggregation": {"name": "token-mean"},
    },
    "ngrpo": {  # train_qwen2.5-math-7b_ngrpo.sh: asymmetric clip 0.16 / 0.24, token mean, no KL
        "advantage": {"name": "ngrpo"},
        "surrogate": {"name": "ppo_clip", "eps_low": 0.16, "eps_high": 0.24},
        "aggregation": {"name": "token-mean"},
    },
    "dgpo": {  # MathForge run_dgpo.sh: TRL bnpo (token mean), eps 0.2, beta 0
        "advantage": {"name": "dgpo"},
        "surrogate": {**_PPO},
        "aggregation": {"name": "token-mean"},
    },
    "riskpo": {  # RiskPO script: verl defaults (token-mean), no KL, entropy 0
        "advantage": {"name": "riskpo"},
        "surrogate": {**_PPO},
        "aggregation": {"name": "token-mean"},
    },
    "gtpo": {  # released loss: on-policy REINFORCE, per-row token mean; no KL, no reference model
        "advantage": {"name": "gtpo"},
        "surrogate": {"name": "reinforce"},
        "aggregation": {"name": "seq-mean-token-mean"},
    },
    "drpo": {  # DRPO's discriminative loss expressed as an advantage (see the drpo estimator)
        "advantage": {"name": "drpo"},
        "surrogate": {"name": "reinforce"},
        "aggregation": {"name": "seq-mean-token-mean"},
    },
    "luspo": {  # TRL: mean_i(L_i l_i)
        "advantage": {"name": "grpo"},
        "surrogate": {"name": "luspo", "eps_low": 2e-3, "eps_high": 2.5e-3},
        "aggregation": {"name": "seq-mean-token-mean"},
    },
    "rloo": {
        "advantage": {"name": "rloo"},
        "surrogate": {**_PPO},
        "aggregation": {"name": "token-mean"},
    },
    "prorl": {  # ProRL: DAPO clip-higher 0.2 / 0.4 and dynamic sampling, KL kept, reference resets (period: choice)
        "advantage": {"name": "grpo"},
        "surrogate": {"name": "ppo_clip", "eps_low": 0.2, "eps_high": 0.4},
        "aggregation": {"name": "token-mean"},
        "kl": {"name": "k3", "coef": 1e-4, "mode": "loss"},
        "dynamic_sampling": True,
        "max_gen_batches": 10,
        "reference_reset": {"every": 200, "reset_optimizer": True},
    },
    "loop": {  # apple/ml-loop 6ade7b9 conf/rl/params/default.yaml + train.py: leave_one_out baseline,
        # adv_normalization false, pg_per_token with clip [1/(1+eps), 1+eps], eps 0.1 (eps_low =
        # 1 - 1/1.1), loss = mean over the rollout's tokens, rloo_kl_lambda 0 (no KL)
        "advantage": {"name": "rloo"},
        "surrogate": {"name": "ppo_clip", "eps_low": 1 - 1 / 1.1, "eps_high": 0.1},
        "aggregation": {"name": "seq-mean-token-mean"},
        "abs_adv_threshold": 0.01,  # _filter_rollouts: drop rollouts with |A| < 0.01 (keep >= 1)
        "high_kl_threshold": 20.0,  # _gradient_step: |KL estimate| > 20 skips the step and stops the update
    },
    "seeupo": {  # modelscope/AgentEvolver e59dea4 (branch seeupo) launcher/qwen3_bfcl/qwen3-seeupo-bfcl.yaml:
        # GRAE mean-centred + special_norm, gspo with verl's actor clip 0.2 / 0.2, seq-mean-token-mean,
        # low_var_kl 0.002 in the loss, sequential_update reverse with adv_updator seeupo (clip 0.2 / 0.2)
        "advantage": {"name": "seeupo"},
        "surrogate": {"name": "gspo", "eps_low": 0.2, "eps_high": 0.2},
        "aggregation": {"name": "seq-mean-token-mean"},
        "kl": {"name": "low_var_kl", "coef": 0.002, "mode": "loss"},
        "turn_updates": {"order": "reverse", "clip_low": 0.2, "clip_high": 0.2},
    },
    "dart": {  # Computer-use-agents/dart-gui e0e606d run_trainer_debug_w_rollout_stepwise_train_pt.sh: grpo
        # advantages, loss_mode gspo with clip_ratio_low 0.1 / high 0.28, seq-mean-token-mean, kl loss 0.1
        # (verl's low_var_kl). Its truncated IS (use_vllm_logp: w = min(pi_old / pi_rollout, 1)) is a run
        # setting, as every correction is: algo.correction: {name: tis, cap: 1.0} (examples/agents/maze_dart.yaml)
        "advantage": {"name": "grpo"},
        "surrogate": {"name": "gspo", "eps_low": 0.1, "eps_high": 0.28},
        "aggregation": {"name": "seq-mean-token-mean"},
        "kl": {"name": "low_var_kl", "coef": 0.1, "mode": "loss"},
    },
    # masked-diffusion LMs (model.family: masked_diffusion; docs/diffusion.md): each names a likelihood
    "diffu_grpo": {  # d1 train.yaml: one-step estimate (p_mask_prompt 0.15), mean-centred A, eps 0.5, k3 0.04, TRL token mean
        "likelihood": {"name": "d1_one_step", "p_mask_prompt": 0.15},
        "advantage": {"name": "dr_grpo"},
        "surrogate": {"name": "ppo_clip", "eps_low": 0.5, "eps_high": 0.5},
        "aggregation": {"name": "token-mean"},
        "kl": {"name": "k3", "coef": 0.04, "mode": "loss"},
    },
    "espo": {  # ESPO recipes/train.yaml: antithetic ELBO, sequence ratio, mean-centred A, eps 0.2, k2 0.01 (per token of ELBO/L)
        "likelihood": {"name": "elbo_antithetic", "num_mc": 1},
        "advantage": {"name": "dr_grpo"},
        "surrogate": {**_PPO},
        "aggregation": {"name": "seq-mean-token-mean"},
        "kl": {"name": "k2", "coef": 0.01, "mode": "loss"},
    },
    "dlm_gdpo": {  # GDPO for diffusion LMs: SDMC ELBO (N 3, K 1) and clip 0.2 are UNVERIFIED placeholders
        "likelihood": {"name": "elbo_sdmc", "nodes": 3, "masks_per_node": 1},
        "advantage": {"name": "grpo"},
        "surrogate": {**_PPO},
        "aggregation": {"name": "seq-mean-token-mean"},
    },
    "bgpo": {  # BGPO: per-sample bound over elbo_mc samples (mc_num 16 UNVERIFIED), dual clip 3 (port)
        "likelihood": {"name": "elbo_mc", "mc_num": 16},
        "advantage": {"name": "grpo"},
        "surrogate": {"name": "bgpo", "eps_low": 0.2, "eps_high": 0.2, "clip_ratio_c": 3.0},
        "aggregation": {"name": "seq-mean-token-mean"},
    },
}


PRESET_NOTES: dict[str, str] = {
    "grpo": "DeepSeekMath (arXiv 2402.03300): group-normalised advantages, PPO clip, per-token k3 KL (beta 0.04)",
    "dr_grpo": "Dr. GRPO (arXiv 2503.20783): mean-centred advantages, constant-normalised token sums, no KL (oat code)",
    "dapo": "DAPO (arXiv 2503.14476): clip-higher 0.28, token mean, soft overlong punishment, dynamic sampling (verl recipe)",
    "gspo": "GSPO (arXiv 2507.18071): sequence-level ratio clipped at 3e-4 / 4e-4",
    "cispo": "CISPO (MiniMax-M1, arXiv 2506.13585): clipped IS weight, token mean (verl example)",
    "sapo": "SAPO (arXiv 2511.20347): soft gate instead of the clip, tau 1.0 / 1.05",
    "mc_grpo": "MC-GRPO: median baseline from G + 1 samples, the pivot masked; k3 KL 0.04",
    "gdpo": "GDPO: per-reward group normalisation, then the weighted sum; token mean",
    "ngrpo": "NGRPO: virtual max-reward sample in all-wrong groups, asymmetric clip 0.16 / 0.24",
    "dgpo": "DGPO (MathForge): difficulty-weighted group advantages, token mean",
    "riskpo": "RiskPO: bundle-level risk-seeking advantages, token mean (verl defaults)",
    "gtpo": "GTPO: entropy-shaped token credit, on-policy REINFORCE",
    "drpo": "DRPO: the discriminative loss expressed as an advantage, REINFORCE",
    "luspo": "LUSPO: length-unbiased sequence ratio, clip 2e-3 / 2.5e-3 (TRL)",
    "rloo": "RLOO (arXiv 2402.14740): leave-one-out baseline, PPO clip, token mean",
    "prorl": "ProRL (arXiv 2505.24864): clip 0.2 / 0.4, dynamic sampling, k3 KL kept, reference + optimizer reset every 200 steps",
    "loop": "LOOP (arXiv 2502.01600): leave-one-out PPO over episodes, per-token clip 1/1.1 .. 1.1, no KL (apple/ml-loop)",
    "seeupo": "SeeUPO (arXiv 2602.06554): turn-by-turn GSPO updates in reverse order, batch-normalised GRAE, low_var_kl 0.002 (AgentEvolver)",
    "dart": "DART (arXiv 2509.23866): GSPO clip 0.1 / 0.28, low_var_kl 0.1; with algo.correction tis cap 1 (dart-gui)",
    "diffu_grpo": "diffu-GRPO / d1 (arXiv 2504.12216): masked diffusion, one-step log-probs, eps 0.5, k3 0.04 (d1 code)",
    "espo": "ESPO (arXiv 2512.03759): masked diffusion, antithetic ELBO sequence ratio, k2 0.01 (ESPO code)",
    "dlm_gdpo": "GDPO for diffusion LMs (arXiv 2510.08554): semi-deterministic MC ELBO (3 Gauss-Legendre nodes)",
    "bgpo": "BGPO (arXiv 2510.11683): masked diffusion, per-MC-sample bound, one backward per sample",
}
"""One line per preset for `covey list` (sources and choices in docs/algorithms.md, "Presets")."""

# ---------------------------------------------------------------------------- sampler presets
SAMPLER_PRESETS: dict[str, dict[str, Any]] = {
    "dynamic": {
        "about": "DAPO dynamic sampling (arXiv 2503.14476) by a sampler name: the dynamic strategy, uniform prompts",
        "strategy": "dynamic",
    },
    "dars": {
        "about": "DARS (arXiv 2508.13755) by a sampler name: the dars strategy (extra rollouts for hard prompts)",
        "strategy": "dars",
    },
    "dars_b": {
        # the paper: 3072 prompts, one full-batch update per epoch, 2 epochs (code yangzhch6/DARS); 64
        # prompts here, a CPU-scale choice
        "about": "DARS-B (arXiv 2508.13755): dars with breadth, a large prompt batch and full-batch updates",
        "strategy": "dars",
        "fill": {"rollout": {"prompts_per_step": 64}, "optim": {"mini_batches": 1, "epochs": 2}},
    },
    "brorl": {
        # BroRL (arXiv 2510.01180, ABSTRACT): the paper's N ~ 512 is UNVERIFIED; 128 here
        "about": "BroRL (arXiv 2510.01180): many rollouts per prompt with dynamic sampling, micro-batched learner",
        "fill": {"rollout": {"group_size": 128}, "algo": {"dynamic_sampling": True}, "optim": {"micro_batch_size": 32}},
    },
}
"""Sampling recipes named like samplers but made of other settings (data, applied by
`apply_sampler_preset`). `strategy`: the rollout strategy the name selects (the sampler's parameters
become its parameters; prompts are drawn uniformly). `fill`: config keys set wherever the config
does not set them itself (the user's values win). A preset without a strategy takes no parameters."""


def apply_sampler_preset(raw: dict[str, Any]) -> dict[str, Any]:
    """The raw run config with its sampler preset (if `sampler` names one) written out: the strategy
    it selects under `rollout.strategy`, its `fill` keys where the config is silent. The sampler keeps
    the preset's name (it draws uniformly, `sampler_spec`). Applying it twice changes nothing, so a
    run's saved config.yaml reads back the same."""
    spec = raw.get("sampler")
    if not isinstance(spec, (str, Mapping, Spec)):
        return raw  # nothing to expand (or not a spec: validation reports it)
    sampler = Spec.model_validate(spec if not isinstance(spec, Spec) else spec.model_dump())
    preset = SAMPLER_PRESETS.get(sampler.name)
    if preset is None:
        return raw
    out = dict(raw)
    out["sampler"] = {"name": sampler.name}
    if "strategy" in preset:
        rollout = dict(out.get("rollout") or {})
        mine = rollout.get("strategy")
        mine = Spec.model_validate(mine.model_dump() if isinstance(mine, Spec) else mine) if mine is not None else None
        if mine is not None and mine.name not in ("group", preset["strategy"]):
            raise ValueError(f"sampler {sampler.name!r} runs as the rollout strategy {preset['strategy']!r}; it cannot be "
                             f"combined with rollout.strategy={mine.name!r} (choose one)")  # fmt: skip
        own = mine.params if mine is not None and mine.name == preset["strategy"] else {}
        rollout["strategy"] = {"name": preset["strategy"], "params": {**own, **sampler.params}}
        out["rollout"] = rollout
    elif sampler.params:
        keys = ", ".join(_dotted(preset.get("fill", {})))
        raise ValueError(f"sampler {sampler.name} is a preset and takes no parameters (got {sorted(sampler.params)}); "
                         f"set the keys it fills instead: {keys}")  # fmt: skip
    return _fill_defaults(out, preset.get("fill", {}))


def sampler_spec(sampler: Spec) -> Spec:
    """The sampler to build: `sampler`, or `uniform` when it names a sampler preset."""
    return Spec(name="uniform") if sampler.name in SAMPLER_PRESETS else sampler


DYNAMIC_SAMPLING_STRATEGY = "dynamic"
"""The rollout strategy that implements `algo.dynamic_sampling` (DAPO's group filter and refill)."""


def strategy_spec(strategy: Spec, algo: AlgoConfig) -> Spec:
    """The rollout strategy to build: `strategy`, wrapped in the dynamic-sampling strategy when the
    algorithm asks for it (`algo.dynamic_sampling`, with `algo.max_gen_batches` rounds)."""
    if not algo.dynamic_sampling or strategy.name == DYNAMIC_SAMPLING_STRATEGY:
        return strategy
    params = {"inner": strategy.name, "inner_params": strategy.params, "max_rounds": algo.max_gen_batches}
    return Spec(name=DYNAMIC_SAMPLING_STRATEGY, params=params)


def _dotted(d: Mapping[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for k, v in d.items():
        out += _dotted(v, f"{prefix}{k}.") if isinstance(v, Mapping) else [f"{prefix}{k}"]
    return out


def _fill_defaults(raw: dict[str, Any], preset: Mapping[str, Any]) -> dict[str, Any]:
    """`raw` with `preset`'s keys added where `raw` has none (nested sections merged)."""
    out = dict(raw)
    for key, value in preset.items():
        mine = out.get(key)
        if key == "algo" and isinstance(mine, str):  # `algo: dapo` is `algo: {preset: dapo}`
            mine = {"preset": mine}
        if mine is None and key not in out:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, Mapping) and isinstance(mine, Mapping):
            out[key] = _fill_defaults(dict(mine), value)
    return out


# ---------------------------------------------------------------------------- typed config
class KLSpec(Spec):
    """KL to the reference policy: estimator `name`, weight `coef`, and where it acts.

    mode="loss":   loss += coef * aggregation(kl_tok) (verl use_kl_loss; GRPO paper).
    mode="reward": reward -= kl_reward_penalty(kl_tok, mask, coef) before advantages.
    coef = 0 disables the term (and the reference model).
    """

    name: str = "low_var_kl"
    params: dict[str, Any] = Field(default_factory=dict)
    """Parameters of the estimator (flat keys other than coef and mode are read as these)."""
    coef: float = Field(0.0, ge=0.0)
    mode: Literal["loss", "reward"] = "loss"


class _Strict(BaseModel):
    """extra="forbid", with an error that lists the allowed keys."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    where: ClassVar[str] = "algo"  # the config path used in error messages

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = [k for k in data if k not in cls.model_fields]
            if unknown:
                raise ValueError(f"{cls.where} has no key {unknown[0]!r}; allowed keys: {', '.join(cls.model_fields)}")
        return data


class OverlongSpec(_Strict):
    """DAPO soft overlong punishment: added to the scalar reward (see `covey.algos.shaping`).

    The soft zone is `buffer_len` tokens when given, else `buffer_frac` of the generation budget
    (DAPO: 4096 of 20480 = 0.2), so a preset works at any max_new_tokens.
    """

    where: ClassVar[str] = "algo.overlong"

    buffer_len: int | None = Field(None, gt=0)
    buffer_frac: float = Field(0.2, gt=0.0, le=1.0)
    penalty_factor: float = Field(1.0, ge=0.0)

    def buffer_tokens(self, max_len: int) -> int:
        """Width of the soft zone in tokens for a generation budget `max_len`."""
        tokens = self.buffer_len if self.buffer_len is not None else max(1, round(self.buffer_frac * max_len))
        if tokens > max_len:
            raise ValueError(f"algo.overlong.buffer_len={tokens} exceeds max_new_tokens={max_len}; use at most {max_len}")
        return tokens


class ReferenceResetSpec(_Strict):
    """ProRL's reference reset: after step `every`, 2 `every`, ... and after each step in `steps`
    (1-based step numbers), the reference model becomes a copy of the policy (pi_ref <- pi_theta) and,
    with `reset_optimizer`, the optimizer's moments are cleared. The learning-rate schedule goes on."""

    where: ClassVar[str] = "algo.reference_reset"

    every: int | None = Field(None, ge=1)
    steps: list[int] = Field(default_factory=list)
    reset_optimizer: bool = True

    @model_validator(mode="after")
    def _some_schedule(self) -> ReferenceResetSpec:
        if self.every is None and not self.steps:
            raise ValueError("algo.reference_reset needs `every` (a period in steps) or `steps` (a list of steps)")
        if any(s < 1 for s in self.steps):
            raise ValueError(f"algo.reference_reset.steps are 1-based step numbers, got {self.steps}")
        return self

    def due(self, step: int) -> bool:
        """Whether the reset runs after (1-based) step `step`."""
        return (self.every is not None and step % self.every == 0) or step in self.steps


class LogprobSourceSpec(_Strict):
    """BuPO's learner log-prob source: for steps 1..`until_step` the learner's log-probs (pi_theta and
    the recomputed pi_old) come from decoder layer `layer` (0-based) through the unembedding, without
    the final norm unless `final_norm` (`covey.algos.hooks`, `covey.models.internal_layer`)."""

    where: ClassVar[str] = "algo.logprob_source"

    layer: int = Field(..., ge=0)
    until_step: int = Field(..., ge=1)
    final_norm: bool = False


class TurnUpdatesSpec(_Strict):
    """SeeUPO's turn-by-turn updates (`covey.algos.seeupo`): `order` reverse (turns T-1 .. 0, backward
    induction) or sequential (0 .. T-1); each turn's advantage scaled by the clipped product of the later
    turns' sequence ratios, each clipped to [1 - clip_low, 1 + clip_high] (0.2, 0.2: the code's
    adv_clip_ratio_low / high); `ratios` false leaves the advantages unscaled (the code's adv_updator None)."""

    where: ClassVar[str] = "algo.turn_updates"

    order: Literal["reverse", "sequential"] = "reverse"
    clip_low: float = Field(0.2, ge=0, lt=1)
    clip_high: float = Field(0.2, ge=0)
    ratios: bool = True


_AXES: dict[str, Registry] = {
    "advantage": ADVANTAGES,
    "surrogate": SURROGATES,
    "aggregation": AGGREGATIONS,
    "kl": KL_ESTIMATORS,
    "correction": CORRECTIONS,
}


class AlgoConfig(_Strict):
    """The full algorithm choice. Build it with `resolve_algo`, which applies presets."""

    preset: str | None = None
    """Name of the preset this config started from (informational once resolved)."""
    advantage: Spec
    surrogate: Spec
    aggregation: Spec
    kl: KLSpec | None = None
    """KL to a reference policy; None (or coef 0) = no reference model."""
    correction: Spec | None = None
    """Importance correction (tis, mis, decoupled) multiplying the surrogate's per-token loss."""
    entropy_coef: float = 0.0
    """loss += -entropy_coef * aggregation(H); > 0 rewards entropy."""
    overlong: OverlongSpec | None = None
    """DAPO soft overlong punishment added to the scalar reward."""
    dynamic_sampling: bool = False
    """DAPO group filter: drop groups whose rewards are all equal and refill the batch."""
    max_gen_batches: int = Field(10, ge=1)
    """Dynamic sampling gives up (falls back) after this many generation batches."""
    group_size_extra: int = Field(0, ge=0)
    """Extra samples per prompt beyond the trained group size G (MC-GRPO samples G + 1)."""
    reference_reset: ReferenceResetSpec | None = None
    """ProRL: reset the reference model to the policy (and the optimizer state) on a schedule."""
    logprob_source: LogprobSourceSpec | None = None
    """BuPO: the learner's log-probs from an internal layer for the first steps."""
    regularizers: list[Spec] = Field(default_factory=list)
    """Extra loss terms (`covey.algos.regularizers`), each `{name, ...params}`, in order; a list in
    the user's config replaces the preset's."""
    abs_adv_threshold: float | None = Field(None, ge=0)
    """LOOP's rollout filter: rows whose |advantage| is below it are dropped before the update (at
    least one row is kept); None = off (`covey.algos.loop`)."""
    high_kl_threshold: float | None = Field(None, gt=0)
    """LOOP's early stop: a mini-batch whose |KL estimate| (-mean over rows of sum_t log pi/pi_old)
    exceeds it skips its optimizer step and ends the update's epochs; None = off (`covey.algos.loop`)."""
    objective: Spec | None = None
    """The learner's objective when it is not the policy-gradient loss of the axes: an entry of
    `covey.learner.objective.OBJECTIVES` (`covey.objectives`), checked by `covey.compat.check_objective`."""
    turn_updates: TurnUpdatesSpec | None = None
    """SeeUPO: one optimizer step per turn of the episodes, last turn first, each turn's advantage scaled by
    the later turns' importance ratios (`covey.algos.seeupo`); None = one update over every turn."""
    likelihood: Spec | None = None
    """Sequence-likelihood estimator of a masked-diffusion model (`covey.likelihood.LIKELIHOODS`:
    d1_one_step, elbo_mc, elbo_antithetic, elbo_sdmc, elbo_double_mc); None: autoregressive log-probs (docs/diffusion.md)."""

    @model_validator(mode="after")
    def _check_components(self) -> AlgoConfig:
        for axis, registry in _AXES.items():
            spec = getattr(self, axis)
            if spec is None:
                continue
            try:
                validated = registry.get(spec.name).validate_params(spec.params)
            except ValueError as e:
                raise ValueError(f"algo.{axis}: {e}") from None
            spec.params.update(validated)  # keep the coerced values (e.g. "0.3" -> 0.3)
        if self.logprob_source is not None and self.correction is not None:
            raise ValueError("algo.logprob_source trains an internal layer's policy, which is not the engine's: an "
                             "importance correction against the engine's log-probs is meaningless then; set algo.correction: null")  # fmt: skip
        kl = self.active().get("kl")
        loss_ref = [f"algo.surrogate {self.surrogate.name!r}"] if "ref_logprobs" in SURROGATES.get(self.surrogate.name).requires else []
        loss_ref += [f"algo.kl (mode loss, coef {kl.coef})"] if kl is not None and kl.mode == "loss" else []
        if self.logprob_source is not None and loss_ref:
            raise ValueError(f"algo.logprob_source trains decoder layer {self.logprob_source.layer}'s policy for steps 1.."
                             f"{self.logprob_source.until_step}, but {' and '.join(loss_ref)} compares the loss's log-probs with "
                             "the full model's reference: different policies (BuPO's released code has no internal layer in its "
                             "reference and its script runs without KL); set algo.kl: null, or mode: reward, or drop logprob_source")  # fmt: skip
        if self.turn_updates is not None and "group" in self.requires():
            raise ValueError("algo.turn_updates takes one optimizer step per turn, but a configured component reads whole "
                             "groups per mini-batch (requires 'group'): choose another surrogate or drop turn_updates")  # fmt: skip
        if self.reference_reset is not None and "ref_logprobs" not in self.requires():
            raise ValueError("algo.reference_reset resets the reference model, but no component uses one: "
                             "set algo.kl with coef > 0 (or drop reference_reset)")  # fmt: skip
        from covey.algos.regularizers import REGULARIZERS

        seen: set[str] = set()
        for i, spec in enumerate(self.regularizers):
            if spec.name in seen:
                raise ValueError(f"algo.regularizers[{i}]: {spec.name!r} is listed twice; give each regularizer once")
            seen.add(spec.name)
            try:
                spec.params.update(REGULARIZERS.get(spec.name).validate_params(spec.params))
                REGULARIZERS.build(spec.name, spec.params)  # its own checks of its parameters (cheap, no state)
            except ValueError as e:
                raise ValueError(f"algo.regularizers[{i}]: {e}") from None
        if self.likelihood is not None:
            from covey.likelihood import LIKELIHOODS

            try:
                self.likelihood.params.update(LIKELIHOODS.get(self.likelihood.name).validate_params(self.likelihood.params))
            except ValueError as e:
                raise ValueError(f"algo.likelihood: {e}") from None
        return self

    def active(self) -> dict[str, Spec]:
        """The axes in use: always advantage/surrogate/aggregation; kl when coef > 0; correction when set."""
        out = {axis: getattr(self, axis) for axis in _AXES if getattr(self, axis) is not None}
        if self.kl is not None and self.kl.coef == 0.0:
            del out["kl"]
        return out

    def bind(self, axis: str) -> Callable[..., Any] | None:
        """The bound function of one axis ("advantage", "surrogate", ...), or None when unused."""
        if axis not in _AXES:
            raise ValueError(f"unknown axis {axis!r}; axes are {', '.join(_AXES)}")
        spec = self.active().get(axis)
        return None if spec is None else _AXES[axis].get(spec.name).bind(spec.params)

    def requires(self) -> set[str]:
        """Optional Rollouts fields and learner inputs the active components read (e.g. "ref_logprobs",
        "entropies", "stat:vocab_mean_logp", "group"), regularizers included."""
        from covey.algos.regularizers import REGULARIZERS

        out = {f for axis, spec in self.active().items() for f in _AXES[axis].get(spec.name).requires}
        return out | {f for spec in self.regularizers for f in REGULARIZERS.get(spec.name).requires}


# ---------------------------------------------------------------------------- resolution
_SPEC_TYPES: dict[str, type[Spec]] = {
    "advantage": Spec,
    "surrogate": Spec,
    "aggregation": Spec,
    "kl": KLSpec,
    "correction": Spec,
    "likelihood": Spec,
}


def _merge_component(axis: str, base: Any, user: Any) -> Any:
    """User settings over the preset's for one component; a new `name` drops the old component's params."""
    if user is None or not isinstance(user, (str, Mapping)):
        return user  # None removes the component; anything else is left for validation to report
    user, base = _flat(user), _flat(base or {})
    if "name" in user and user["name"] != base.get("name"):
        own_fields = set(_SPEC_TYPES[axis].model_fields) - {"name", "params"}  # e.g. KL's coef/mode survive
        base = {k: v for k, v in base.items() if k in own_fields}
    return {**base, **user}


def _flat(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    """A component in the flat form `{name, key: value}` (a bare name, or nested `params:` lifted)."""
    if isinstance(spec, str):
        return {"name": spec}
    out = dict(spec)
    nested = out.pop("params", None)
    if isinstance(nested, Mapping):
        clash = sorted(set(nested) & set(out))
        if clash:
            raise ValueError(f"parameter(s) {clash} given both as keys and under params")
        return {**out, **nested}
    if nested is not None:
        out["params"] = nested  # not a mapping: validation reports it
    return out


def _merge(base: dict[str, Any], user: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in user.items():
        if key in _SPEC_TYPES:
            out[key] = _merge_component(key, out.get(key), value)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


PRESET_KEYS = tuple(sorted({k for bundle in PRESETS.values() for k in bundle}))
"""The algo keys a preset decides: every key some preset writes (the axes, KL, overlong, dynamic sampling,
group_size_extra, reference_reset, likelihood, LOOP's thresholds). A preset decides all of them, the ones
it does not write at their defaults (dr_grpo: no KL). Other keys (correction, entropy_coef, regularizers,
logprob_source) are never a preset's."""


def _block(raw: Any) -> Any:
    """An `algo` block as a dict: a bare preset name is `{preset: name}`, None is {}."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        return {"preset": raw}
    return dict(raw) if isinstance(raw, Mapping) else raw


def _show(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    return "null" if value is None else str(value)


def _preset_value(preset: Any, key: str) -> Any:
    """What preset `preset` gives key `key` (its value, else the field's default)."""
    bundle = PRESETS.get(preset, {}) if isinstance(preset, str) else {}
    if key in bundle:
        return bundle[key]
    field = AlgoConfig.model_fields[key]
    return None if field.is_required() else field.get_default(call_default_factory=True)


def _same(a: Any, b: Any) -> bool:
    """Whether two raw values of one algo key say the same (components compared in their flat form)."""
    try:
        norm = lambda v: _flat(v) if isinstance(v, (str, Mapping)) else v  # noqa: E731
        return norm(a) == norm(b)
    except ValueError:
        return False


def layer_algo(earlier: Any, later: Any, sources: tuple[str, str] = ("the earlier config", "the override")) -> tuple[Any, list[str]]:
    """Two `algo` blocks from two sources, the later one on top, as one raw block (for `resolve_algo`),
    and notes on what a preset replaced (empty when nothing was).

    The rule (docs/algorithms.md, "Presets"): a preset decides every key in `PRESET_KEYS` and fills the
    keys its own source does not set; a later source wins over an earlier one; within one source an
    explicit key wins over that source's preset. So a later source that names a preset replaces the
    earlier source's preset and its explicit `PRESET_KEYS` (reported in the notes), and keeps its other
    keys (regularizers, correction, ...). Explicit keys of the two sources merge key by key; a component
    given a new `name` drops the earlier source's parameters for it (`algo.advantage.name=hgpo` over a
    file's gigpo with gigpo's parameters)."""
    e, lt = _block(earlier), _block(later)
    if not isinstance(e, dict) or not isinstance(lt, dict):
        return later, []  # not a block: validation reports it
    notes: list[str] = []
    if "preset" in lt:
        was, now = e.get("preset", DEFAULT_PRESET), lt["preset"]
        replaced = {k: e[k] for k in PRESET_KEYS if k in e and k not in lt and _same(e[k], _preset_value(now, k)) is False}
        if was != now or replaced:
            bundle = ", ".join(PRESETS[now]) if now in PRESETS else "nothing"
            parts = [f"algo: preset {now} ({sources[1]}) sets {bundle} (the other preset keys at their defaults)"]
            if was != now:
                parts.append(f"it replaces preset {was} ({sources[0]})")
            if replaced:
                parts.append(f"{sources[0]}'s " + ", ".join(f"{k}: {_show(v)}" for k, v in replaced.items())
                             + " no longer apply (a later source wins; set them after the preset to keep them)")
            mine = [k for k in PRESET_KEYS if k in lt]
            if mine:
                parts.append(f"{sources[1]} overrides its {', '.join(mine)}")
            notes.append("; ".join(parts))
        e = {k: v for k, v in e.items() if k not in PRESET_KEYS and k != "preset"}
    return _merge(e, lt), notes


def resolve_algo(raw: Mapping[str, Any] | AlgoConfig | None = None) -> AlgoConfig:
    """Preset + user overrides -> validated `AlgoConfig`.

    * `raw["preset"]` names the starting bundle (default "grpo"; None = start from nothing).
    * Each user key overrides the preset's key by key: component dicts and `overlong` are merged,
      scalars replaced. `{"preset": "dapo", "surrogate": {"eps_high": 0.3}}` keeps dapo's
      ppo_clip with eps_low 0.2 and dual_clip 10.
    * Giving a component a different `name` drops the preset's parameters for it (they belonged to
      the old component); a bare string is a name: `"surrogate": "cispo"`.
    * `"kl": None` / `"correction": None` / `"overlong": None` remove that part.
    Raises pydantic.ValidationError (a ValueError) naming the key, the value and what is allowed.
    """
    if isinstance(raw, AlgoConfig):
        return raw
    raw = dict(raw or {})
    preset = raw.pop("preset", DEFAULT_PRESET)
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"algo.preset: unknown preset {preset!r}; known presets: {', '.join(sorted(PRESETS))} (or null)")
    base = PRESETS[preset] if preset is not None else {}
    return AlgoConfig.model_validate({**_merge(base, raw), "preset": preset})
