import pytest

from covey.models import load
from covey.tasks import get_task
from covey.train.sft import run_sft


def test_sft_lowers_the_loss_and_saves_a_loadable_model(tmp_path):
    task = get_task("arithmetic", n_train=64, n_test=8)
    res = run_sft("tiny-llama", task, tmp_path / "sft", steps=30, batch_size=16, lr=3e-3)
    assert res["loss_last"] < 0.5 * res["loss_first"]
    model, tok = load(str(tmp_path / "sft"))
    assert model.config.model_type == "llama" and tok.eos_token == "<|im_end|>"


def test_sft_needs_demonstrations():
    class NoDemos:
        name = "nodemos"

    with pytest.raises(ValueError, match="no demonstrations"):
        run_sft("tiny-llama", NoDemos(), "unused", steps=1)
