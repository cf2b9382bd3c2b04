"""`covey.devices`: one parser for `device:` used by config, eval, sft and the bench commands."""

import pytest
import torch

from covey.devices import check_device, resolve_device


def test_auto_and_cpu_resolve_on_this_machine():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:x", "CPU", "", "mps"])
def test_misspelled_devices_are_named(bad):
    with pytest.raises(ValueError, match=f"device must be auto, cpu, cuda or cuda:N, got {bad!r}"):
        check_device(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_a_clear_error(spec):
    with pytest.raises(ValueError, match="CUDA is not available on this machine"):
        resolve_device(spec)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_index_past_the_visible_devices_is_named():
    with pytest.raises(ValueError, match="CUDA device"):
        check_device(f"cuda:{torch.cuda.device_count()}")


def test_threads_key_sets_torch_threads_and_may_change_on_resume(tmp_path):
    from covey.train.config import SAFE_ON_RESUME, ConfigError, load_config
    from covey.train.trainer import Trainer

    with pytest.raises(ConfigError, match="threads"):
        load_config(None, ["threads=-1"])
    cfg = load_config(None, ["model.name=tiny-llama", "task.params={digits: 1, n_train: 8, n_test: 2}", "threads=1",
                             "reward_workers=0", "log.progress=false", "log.tensorboard=false", f"log.dir={tmp_path}"])  # fmt: skip
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        Trainer(cfg, tmp_path / "run").close()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert "threads" in SAFE_ON_RESUME
