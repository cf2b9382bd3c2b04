"""`covey plan`: tables or JSON, a verdict per device, and one-line errors (exit 2) before anything loads."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from covey.cli import app

SCALING = str(Path(__file__).parents[2] / "examples" / "scaling" / "qwen2.5-grpo.yaml")


def _plan(*args):
    return CliRunner().invoke(app, ["plan", *args])


def test_a_7b_on_8_gpus_does_not_fit_under_ddp_and_fits_under_fsdp2():
    """The question covey plan must answer on paper (docs/scaling.md), learner and engine on separate GPUs."""
    common = [SCALING, "device=cuda", "--prompt-tokens", "512", "--device-memory-gb", "80", "--json"]
    ddp, fsdp2 = (json.loads(_plan(*common, f"runtime.sharding={s}").output) for s in ("ddp", "fsdp2"))
    learner = {p["settings"]["sharding"]: p["devices"][0] for p in (ddp, fsdp2)}
    assert learner["ddp"]["name"] == "learner device" and learner["ddp"]["count"] == 8
    assert not learner["ddp"]["fits"] and learner["ddp"]["gib"] > 113  # 16 bytes x 7.6B parameters alone
    assert learner["fsdp2"]["fits"] and learner["fsdp2"]["verdict"].startswith("fits on 80 GiB with")
    static = [i for i in fsdp2["pools"]["learner"]["items"] if i["phase"] == "static"]
    assert round(sum(i["gib"] for i in static), 1) == 14.2  # 16 B x 7.62B / 8 ranks


def test_tables_name_each_pool_and_a_verdict_per_device():
    r = _plan("model.name=tiny-llama", "device=cpu", "--prompt-tokens", "16", "--device-memory-gb", "1")
    assert r.exit_code == 0, r.output
    for text in ("learner: 1 device(s)", "engine: 1 device(s)", "optimizer state", "KV cache", "activations",
                 "1 x cpu device (learner and engine, inline executor):", "fits on 1 GiB with"):  # fmt: skip
        assert text in r.output, text


def test_too_small_a_device_is_a_does_not_fit_verdict():
    r = _plan("model.name=tiny-llama", "device=cpu", "--device-memory-gb", "0.01", "--json")
    d = json.loads(r.output)["devices"][0]
    assert not d["fits"] and d["verdict"].startswith("does not fit on 0.01 GiB: needs")


@pytest.mark.parametrize("args, message", [
    (["model.name=no-such/model-xyz"], "cannot read the config.json of model 'no-such/model-xyz'"),
    (["model.name=/no/such/folder"], "cannot read the config.json of model '/no/such/folder'"),
    (["runtime.sharding=zero3"], "runtime.sharding: Input should be 'ddp' or 'fsdp2'"),
    (["runtime.learner_gpus=0"], "runtime.learner_gpus"),
    (["device=tpu"], "device must be auto, cpu, cuda or cuda:N"),
    (["rollout.group_size=x"], "rollout.group_size"),
    (["model.name=tiny-llama", "oops"], "must look like key=value"),
    (["no-such.yaml"], "config file 'no-such.yaml' does not exist"),
    (["model.name=tiny-llama", "--prompt-tokens", "0"], "--prompt-tokens must be >= 1"),
    (["model.name=tiny-llama", "--device-memory-gb", "-1"], "--device-memory-gb must be > 0"),
    (["model.lora={r: 4, target_modules: [lm_head]}"], "are not linear layers"),
])  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = _plan(*args)
    assert r.exit_code == 2, r.output
    first = r.output.strip().splitlines()[0]
    assert first.startswith("error: ") and message in r.output, r.output


def test_settings_train_refuses_today_are_planned():
    """colocate (not built yet), fsdp2 with offload and cuda on a machine without CUDA: covey plan plans them."""
    r = _plan("model.name=tiny-llama", "device=cuda", "runtime.executor=ray", "runtime.learner_workers=2",
              "runtime.sharding=fsdp2", "runtime.colocate=true", "runtime.fsdp_offload=true", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert plan["settings"]["device"] == "cuda" and plan["devices"][0]["name"].startswith("shared device")
    assert plan["pools"]["learner"]["host_gib"] > 0


def test_the_scaling_tables_in_the_docs_are_what_covey_plan_prints():
    """docs/scaling.md's tables are generated (benchmarks/plan_scaling.py); rerun it when the plan changes."""
    import importlib.util

    path = Path(__file__).parents[2] / "benchmarks" / "plan_scaling.py"
    spec = importlib.util.spec_from_file_location("plan_scaling", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.DOC.read_text()
    assert gen.render_doc(text) == text, "docs/scaling.md is stale: run benchmarks/plan_scaling.py"
    assert "| Qwen2.5-7B (7.62B) | ddp | 141.9 **no**" in text and "| Qwen2.5-7B (7.62B) | fsdp2 | 28.8 yes" in text
