"""The README's main command: `make demo` runs exactly as written (the quickstart cut to one small
step), so the Makefile and the CLI cannot drift apart again."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STAMP = REPO / ".venv" / ".covey-installed"


@pytest.mark.parametrize("model", ["tiny-llama", pytest.param("smollm2-135m-instruct", marks=pytest.mark.slow)])
def test_make_demo_runs(tmp_path, model):
    """Both demo commands as the Makefile writes them (`models prepare` of the real model included);
    the fast variant trains a tiny random model instead, the slow one the quickstart's own model."""
    if not STAMP.exists():
        pytest.skip("make demo needs the .venv that `make test` builds")
    short = (f"model.name={model} steps=1 eval.size=2 rollout.prompts_per_step=2 rollout.group_size=2 sampling.max_new_tokens=8 "
             f"optim.micro_batch_size=2 log.dir={tmp_path} log.progress=false")  # fmt: skip
    # run as a top-level make even when the suite itself runs under `make test` (no "make[1]: ..." lines)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")} | {"OMP_NUM_THREADS": "1"}
    # -o: use the installed venv as it is (no reinstall inside the test)
    out = subprocess.run(["make", "--no-print-directory", "-o", str(STAMP.relative_to(REPO)), "demo", f"DEMO_ARGS={short}"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "held-out accuracy before training" in out.stdout and "held-out accuracy after training" in out.stdout
    summary = json.loads(next(ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("{")))
    run = Path(summary["run_dir"])
    # the quickstart's dtype: auto resolves on this machine, and the run says what it chose
    assert summary["compute"]["device"] == "cpu" and {summary["compute"]["learner"], summary["compute"]["engine"]} <= {"bf16", "fp32"}
    c = summary["compute"]
    assert (f"compute: cpu, learner {c['learner']} (model.dtype auto), engine {c['engine']} (engine.dtype auto: follows the "
            "learner)") in out.stdout and c["engine"] == c["learner"]  # fmt: skip
    assert (run / "final" / "config.json").is_file() and (run / "metrics.jsonl").is_file()
