"""The generation benchmark runs both engines on the same prompts and reports comparable numbers."""

import pytest

from covey.bench.generate import bench_generate, bench_generate_dtypes


def test_bench_generate_reports_both_engines_on_a_tiny_run():
    r = bench_generate("tiny-llama", batch=2, prompt_tokens=4, new_tokens=3, dtype="fp32", repeats=1)
    assert r["batch"] == 2 and r["new_tokens"] == 3 and r["dtype"] == "fp32"
    assert r["covey_tok_s"] > 0 and r["hf_tok_s"] > 0 and r["ratio"] > 0
    assert r["ratio"] == pytest.approx(r["hf_s"][0] / r["covey_s"][0], rel=0.02)
    assert 0 < r["ceiling_fraction"] < 1


def test_bench_generate_times_hf_static_cache_when_asked(capfd):
    r = bench_generate("tiny-llama", batch=2, prompt_tokens=4, new_tokens=3, dtype="fp32", repeats=1, hf_static="yes")
    assert r["hf_static_tok_s"] > 0 and r["ratio_vs_hf_static"] > 0 and len(r["hf_static_s"]) == 1
    # tok/s is rounded to 0.1: on a slow, busy machine (3 tok/s) that is more than 1%
    assert r["hf_static_tok_s"] == pytest.approx(2 * 3 / r["hf_static_s"][0], rel=0.01, abs=0.05) and r["hf_static_warmup_s"] > 0
    assert "hf_static_tok_s" not in bench_generate("tiny-llama", batch=2, prompt_tokens=4, new_tokens=3, dtype="fp32", repeats=1)
    log = capfd.readouterr().err  # each phase is logged with its time (a timeout shows where it was)
    for phase in ("loaded tiny-llama", "covey warm-up:", "HF warm-up (dynamic cache):", "repeat 1/1: covey",
                  "HF static warm-up:", "HF static repeat 1/1"):  # fmt: skip
        assert phase in log, phase


def test_hf_static_runs_past_their_budget_are_skipped_and_said_so():
    r = bench_generate("tiny-llama", batch=2, prompt_tokens=4, new_tokens=3, dtype="fp32", repeats=1, hf_static="yes",
                       hf_static_budget_s=0.5)  # fmt: skip (a child process cannot even import torch in 0.5 s)
    assert r["hf_static"].startswith("skipped: not done within the 0.5 s budget")
    assert "hf_static_tok_s" not in r and "ratio_vs_hf_static" not in r
    assert r["covey_tok_s"] > 0 and r["hf_tok_s"] > 0  # the main pair still comes back


def test_bench_generate_rejects_bad_settings():
    with pytest.raises(ValueError, match="dtype"):
        bench_generate("tiny-llama", dtype="int8")
    with pytest.raises(ValueError, match=">= 1"):
        bench_generate("tiny-llama", batch=0)
    with pytest.raises(ValueError, match="hf_static"):
        bench_generate("tiny-llama", hf_static="maybe")
    with pytest.raises(ValueError, match="hf_static_budget_s must be > 0"):
        bench_generate("tiny-llama", hf_static_budget_s=0)


def test_bench_generate_pairs_each_dtype_and_takes_each_engine_at_its_faster_one():
    r = bench_generate_dtypes("tiny-llama", batch=2, prompt_tokens=4, new_tokens=3, repeats=1)
    assert (r["bf16"]["dtype"], r["fp32"]["dtype"]) == ("bf16", "fp32")
    best = r["best_dtypes"]
    assert r[best["covey"]]["covey_tok_s"] == max(r[d]["covey_tok_s"] for d in ("bf16", "fp32"))
    assert r["ratio_best"] == round(r[best["covey"]]["covey_tok_s"] / r[best["hf"]]["hf_tok_s"], 2)
    with pytest.raises(ValueError, match="distinct entries"):
        bench_generate_dtypes("tiny-llama", ("fp32", "fp32"))


def test_bench_generate_cli_names_its_dtype_choices():
    from typer.testing import CliRunner

    from covey.cli import app

    r = CliRunner().invoke(app, ["bench", "generate", "--dtype", "int8"])
    assert r.exit_code != 0 and "'bf16', 'fp32', 'auto' or 'both'" in r.output
