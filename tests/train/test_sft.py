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


def test_otr_spec_vector_and_reductions():
    import torch

    from covey.train.sft_losses import otr_token_loss

    logp = torch.log_softmax(torch.tensor([2.0, 1.0, 0.0]), -1)  # [-0.4076, -1.4076, -2.4076]
    loss = otr_token_loss(logp, torch.tensor(0), torch.tensor([0, 1, 0, 2]), beta_neg=0.1)
    assert loss.item() == pytest.approx(0.1084, abs=1e-4)
    # K = 1, beta_neg = 0: SFT on the positions where the sample matched, nothing elsewhere
    assert otr_token_loss(logp, torch.tensor(0), torch.tensor([0]), 0.0).item() == pytest.approx(0.4076, abs=1e-4)
    assert otr_token_loss(logp, torch.tensor(0), torch.tensor([1]), 0.0).item() == 0.0


def test_otr_masks_prompt_positions_and_is_seeded():
    import torch

    from covey.train.sft_losses import SFT_LOSSES

    fn = SFT_LOSSES.get("otr").bind({"k": 4})
    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[-100, 1, 2], [3, -100, -100]])
    a, m = fn(logits, labels, torch.Generator().manual_seed(0))
    b, _ = fn(logits, labels, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == labels.shape
    assert (a[labels == -100] == 0).all() and 0 <= m["sft/otr_hit_frac"] <= 1
    with pytest.raises(ValueError):
        SFT_LOSSES.get("otr").bind({"k": 0})


def test_sft_with_otr_lowers_the_cross_entropy(tmp_path):
    task = get_task("arithmetic", n_train=64, n_test=8)
    res = run_sft("tiny-llama", task, tmp_path / "otr", steps=30, batch_size=16, lr=3e-3, loss="otr", loss_params={"k": 4})
    assert res["sft_loss"] == "otr" and 0 <= res["sft/otr_hit_frac"] <= 1
    ce = run_sft(str(tmp_path / "otr"), task, tmp_path / "probe", steps=1, batch_size=16, lr=1e-9)
    base = run_sft("tiny-llama", task, tmp_path / "probe0", steps=1, batch_size=16, lr=1e-9)
    assert ce["loss_first"] < 0.7 * base["loss_first"]  # OTR training also fits the demonstrations


def test_covey_sft_prints_progress_and_ctrl_c_saves_the_model_so_far(tmp_path, monkeypatch):
    """`covey sft` is not silent until it ends: a progress line with the loss and an ETA; the first Ctrl-C stops
    after the current step, saves what it has and exits with 130 (as `covey train` does)."""
    import json
    import os
    import signal

    from typer.testing import CliRunner

    import covey.train.sft as sft
    from covey.cli import app

    res = CliRunner().invoke(app, ["sft", "--model", "tiny-llama", "--task", "arithmetic", "--out", str(tmp_path / "a"),
                                   "--steps", "3", "--batch-size", "2"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "sft step 1/3 | loss " in res.stderr and "sft step 3/3" in res.stderr and "ETA" in res.stderr
    real = sft.run_sft

    def run_sft(*a, progress=None, **k):  # Ctrl-C during step 2
        def hook(step, loss):
            progress(step, loss)
            if step == 2:
                os.kill(os.getpid(), signal.SIGINT)

        return real(*a, progress=hook, **k)

    monkeypatch.setattr(sft, "run_sft", run_sft)
    res = CliRunner().invoke(app, ["sft", "--model", "tiny-llama", "--task", "arithmetic", "--out", str(tmp_path / "b"),
                                   "--steps", "50", "--batch-size", "2"])  # fmt: skip
    assert res.exit_code == 130, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["stopped_at"] == 2 and out["interrupted"] and (tmp_path / "b" / "config.json").is_file()
    assert "Ctrl-C: stopping after this step" in res.stderr
    load(str(tmp_path / "b"))  # the model so far loads
