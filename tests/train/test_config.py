import pytest

from covey.train.config import ConfigError, load_config, parse_overrides


def _write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_overrides_parse_nested_keys_and_yaml_values():
    assert parse_overrides(["rollout.group_size=4", "algo=dapo", "sampling.stop_strings=[a, b]"]) == {
        "rollout": {"group_size": 4},
        "algo": "dapo",
        "sampling": {"stop_strings": ["a", "b"]},
    }


def test_override_without_equals_sign_is_rejected():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["rollout.group_size"])


def test_preset_override_then_key_by_key(tmp_path):
    cfg = load_config(_write(tmp_path, "algo: grpo\n"), ["algo=dapo", "algo.surrogate.eps_high=0.3"])
    assert cfg.algo.preset == "dapo"
    assert cfg.algo.surrogate.params["eps_high"] == 0.3
    assert cfg.algo.surrogate.params["dual_clip"] == 10.0  # the rest of dapo's ppo_clip is kept
    assert cfg.algo.dynamic_sampling


def test_unknown_key_names_the_key_and_lists_allowed(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, "rollout:\n  groupsize: 4\n"))
    msg = str(e.value)
    assert "rollout.groupsize" in msg and "group_size" in msg


def test_wrong_type_names_the_key_and_value(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(None, ["optim.lr=fast"])
    assert "optim.lr" in str(e.value) and "fast" in str(e.value)


def test_batch_not_divisible_into_mini_batches_fails_before_loading(tmp_path):
    with pytest.raises(ConfigError, match="mini_batches=3 must divide"):
        load_config(None, ["rollout.prompts_per_step=2", "rollout.group_size=4", "optim.mini_batches=3"])


def test_unknown_algorithm_component_lists_known_names():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["algo.advantage.name=nope"])
    assert "grpo" in str(e.value) and "nope" in str(e.value)


def test_unknown_component_parameter_is_rejected():
    with pytest.raises(ConfigError, match="eps_hi"):
        load_config(None, ["algo.surrogate.eps_hi=0.3"])


def test_missing_file_and_non_mapping_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(_write(tmp_path, "- a\n- b\n"))


def test_resolved_config_reads_back_the_same_with_presets_and_both_param_forms():
    from covey.train.config import validate_config

    cfg = load_config(None, ["sampler={name: dars_b, schedule: et}", "algo=dapo", "algo.surrogate.eps_high=0.3",
                             "task={name: arithmetic, params: {digits: 2}}", "engine={dtype: fp32}",
                             "rewards=[{name: format, params: {tags: [answer]}}, {name: length, target: 4}]"])  # fmt: skip
    dump = cfg.model_dump(mode="json")
    assert dump["rollout"]["strategy"] == {"name": "dars", "params": {"schedule": "et"}} and dump["sampler"]["name"] == "dars_b"
    assert dump["engine"] == {"name": "torch", "params": {"dtype": "fp32"}} and dump["task"]["params"] == {"digits": 2}
    assert [r["params"] for r in dump["rewards"]] == [{"tags": ["answer"]}, {"target": 4}]
    assert dump["algo"]["surrogate"]["params"]["eps_high"] == 0.3 and dump["algo"]["surrogate"]["params"]["dual_clip"] == 10.0
    assert validate_config(dump).model_dump(mode="json") == dump
    with pytest.raises(ConfigError, match=r"parameter\(s\) \['digits'\] given both as keys and under params"):
        load_config(None, ["task={name: arithmetic, digits: 1, params: {digits: 2}}"])
