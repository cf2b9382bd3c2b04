"""Presets resolve to registered components; resolve_algo merges user keys; errors name the problem."""

import pydantic
import pytest

from covey.algos import AGGREGATIONS, SURROGATES
from covey.algos.presets import PRESETS, AlgoConfig, OverlongSpec, resolve_algo

REQUIRED_PRESETS = [
    "grpo", "dr_grpo", "dapo", "gspo", "cispo", "sapo", "mc_grpo", "gdpo",
    "ngrpo", "dgpo", "riskpo", "gtpo", "drpo", "luspo",
]


def test_required_presets_exist():
    assert set(REQUIRED_PRESETS) <= set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_resolves_to_registered_components(name):
    cfg = resolve_algo({"preset": name})
    assert cfg.preset == name
    for axis, spec in cfg.active().items():
        assert cfg.bind(axis) is not None, (name, axis, spec.name)


def test_dapo_preset_is_clip_higher_dual_clip_token_mean_with_shaping_and_filter():
    cfg = resolve_algo({"preset": "dapo"})
    assert cfg.advantage.name == "grpo"
    assert cfg.surrogate.name == "ppo_clip"
    assert cfg.surrogate.params == {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": 10.0}
    assert cfg.aggregation.name == "token-mean"
    assert cfg.overlong == OverlongSpec(buffer_frac=0.2, penalty_factor=1.0)
    assert cfg.dynamic_sampling and cfg.max_gen_batches == 10
    assert cfg.kl is None and cfg.correction is None


def test_user_param_is_merged_into_the_preset_component():
    cfg = resolve_algo({"preset": "dapo", "surrogate": {"eps_high": 0.3}})
    assert cfg.surrogate.params == {"eps_low": 0.2, "eps_high": 0.3, "dual_clip": 10.0}
    assert cfg.dynamic_sampling  # the rest of dapo is kept


def test_changing_a_component_name_drops_the_old_components_params():
    cfg = resolve_algo({"preset": "dapo", "surrogate": {"name": "sapo", "tau_neg": 1.2}})
    assert cfg.surrogate.name == "sapo" and cfg.surrogate.params == {"tau_neg": 1.2}
    assert resolve_algo({"preset": "gspo", "surrogate": "cispo"}).surrogate.params == {}


def test_kl_coef_and_mode_survive_an_estimator_change():
    cfg = resolve_algo({"preset": "grpo", "kl": {"name": "low_var_kl"}})
    assert (cfg.kl.name, cfg.kl.coef, cfg.kl.mode) == ("low_var_kl", 0.04, "loss")


def test_none_removes_an_optional_part():
    cfg = resolve_algo({"preset": "grpo", "kl": None})
    assert cfg.kl is None and "ref_logprobs" not in cfg.requires()
    assert resolve_algo({"preset": "dapo", "overlong": None}).overlong is None


def test_nested_overlong_merge_keeps_preset_keys():
    cfg = resolve_algo({"preset": "dapo", "overlong": {"penalty_factor": 0.5}})
    assert cfg.overlong.buffer_frac == 0.2 and cfg.overlong.penalty_factor == 0.5


def test_missing_preset_key_starts_from_grpo_and_null_starts_from_nothing():
    assert resolve_algo({}).surrogate.name == "ppo_clip"
    assert resolve_algo(None).preset == "grpo"
    with pytest.raises(pydantic.ValidationError, match="advantage"):
        resolve_algo({"preset": None, "surrogate": "ppo_clip", "aggregation": "token-mean"})
    cfg = resolve_algo({"preset": None, "advantage": "grpo", "surrogate": "reinforce", "aggregation": "token-sum"})
    assert cfg.kl is None and cfg.preset is None


def test_kl_added_to_a_preset_without_kl_gets_the_default_estimator():
    cfg = resolve_algo({"preset": "dapo", "kl": {"coef": 0.001}})
    assert cfg.kl.name == "low_var_kl" and cfg.requires() == {"ref_logprobs"}


def test_zero_kl_coef_is_inactive():
    cfg = resolve_algo({"preset": "grpo", "kl": {"coef": 0.0}})
    assert cfg.bind("kl") is None and "kl" not in cfg.active()


def test_values_are_coerced_and_bound_functions_use_them():
    cfg = resolve_algo({"preset": "grpo", "surrogate": {"eps_high": "0.3"}})
    assert cfg.surrogate.params["eps_high"] == 0.3
    assert cfg.bind("surrogate").entry is SURROGATES["ppo_clip"]
    assert cfg.bind("aggregation").entry is AGGREGATIONS["seq-mean-token-mean"]


def test_dhpo_entropy_requirement_is_reported():
    assert "entropies" in resolve_algo({"surrogate": "dhpo", "kl": None}).requires()


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="known presets: .*dapo"):
        resolve_algo({"preset": "dappo"})


def test_unknown_component_name_lists_the_known_ones():
    with pytest.raises(pydantic.ValidationError, match=r"algo\.surrogate: unknown surrogate 'ppo'.*ppo_clip"):
        resolve_algo({"surrogate": "ppo"})


def test_unknown_component_param_names_the_allowed_params():
    with pytest.raises(pydantic.ValidationError, match=r"algo\.surrogate: .*'epsilon'.*eps_low"):
        resolve_algo({"surrogate": {"epsilon": 0.2}})


def test_bad_param_value_names_the_parameter():
    with pytest.raises(pydantic.ValidationError, match="dual_clip"):
        resolve_algo({"preset": "dapo", "surrogate": {"dual_clip": 0.5}})


def test_unknown_top_level_key_lists_the_allowed_keys():
    with pytest.raises(pydantic.ValidationError, match="no key 'loss_type'.*surrogate"):
        resolve_algo({"loss_type": "dapo"})


@pytest.mark.parametrize("bad", [{"buffer_len": 0}, {"penalty_factor": -1.0}, {"buffer_tokens": 3}])
def test_bad_overlong_settings_are_rejected(bad):
    with pytest.raises(pydantic.ValidationError):
        resolve_algo({"preset": "dapo", "overlong": bad})


def test_overlong_buffer_tokens_from_fraction_or_absolute():
    assert OverlongSpec().buffer_tokens(20480) == 4096
    assert OverlongSpec(buffer_len=100, buffer_frac=0.9).buffer_tokens(512) == 100
    with pytest.raises(ValueError, match="exceeds max_new_tokens"):
        OverlongSpec(buffer_len=600).buffer_tokens(512)


def test_mc_grpo_samples_one_extra_rollout():
    assert resolve_algo({"preset": "mc_grpo"}).group_size_extra == 1


def test_import_path_component_is_accepted():
    cfg = resolve_algo({"aggregation": "covey.algos.aggregation:token_mean"})
    assert cfg.bind("aggregation").entry.name == "covey.algos.aggregation:token_mean"


def test_algo_config_passes_through():
    cfg = resolve_algo({"preset": "gspo"})
    assert resolve_algo(cfg) is cfg and isinstance(cfg, AlgoConfig)


# ---------------------------------------------------------------------------- sampler presets (data)
from covey.algos.presets import SAMPLER_PRESETS, apply_sampler_preset, sampler_spec  # noqa: E402
from covey.registry import Spec  # noqa: E402


def test_sampler_preset_writes_its_strategy_and_fills_only_silent_keys():
    out = apply_sampler_preset({"sampler": {"name": "dars_b", "schedule": "hw"}, "optim": {"epochs": 3}})
    assert out["sampler"] == {"name": "dars_b"}
    assert out["rollout"] == {"strategy": {"name": "dars", "params": {"schedule": "hw"}}, "prompts_per_step": 64}
    assert out["optim"] == {"epochs": 3, "mini_batches": 1}  # the user's epochs win
    assert apply_sampler_preset(out) == out  # idempotent: a saved config.yaml reads back the same
    assert sampler_spec(Spec.model_validate(out["sampler"])).name == "uniform"
    assert sampler_spec(Spec(name="vade")).name == "vade"


def test_sampler_preset_conflicts_and_parameters_are_refused():
    with pytest.raises(ValueError, match="sampler 'dars' runs as the rollout strategy 'dars'; it cannot be combined "
                                         "with rollout.strategy='treepo'"):
        apply_sampler_preset({"sampler": "dars", "rollout": {"strategy": {"name": "treepo"}}})
    with pytest.raises(ValueError, match="set the keys it fills instead: rollout.group_size, algo.dynamic_sampling, "
                                         "optim.micro_batch_size"):
        apply_sampler_preset({"sampler": {"name": "brorl", "params": {"n": 512}}})
    plain = {"sampler": {"name": "vade"}, "rollout": {"group_size": 4}}
    assert apply_sampler_preset(plain) is plain


def test_every_sampler_preset_is_data_with_a_summary():
    for name, preset in SAMPLER_PRESETS.items():
        assert preset["about"] and set(preset) <= {"about", "strategy", "fill"}, name
