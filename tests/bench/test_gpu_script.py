"""benchmarks/gpu/run.sh under SMOKE=1 (toy sizes on the CPU): the GPU script that a session lent a GPU
runs in one go must work before it costs device time. Its parts offload, fsdp2, quick and generate run here
(steps' step-vs-trl is tested in tests/bench/test_trl.py); each writes its figures to $OUT as it
finishes, with a {"part", "rc", "seconds"} line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_script_runs_its_parts_at_toy_sizes(tmp_path):
    env = {**os.environ, "SMOKE": "1", "OUT": str(tmp_path), "PY": sys.executable, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks/gpu/run.sh"), "offload", "fsdp2", "quick", "generate"], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    parts = {r["part"]: r["rc"] for r in rows if "part" in r}
    assert parts == {"offload": 0, "fsdp2": 0, "quick": 0, "generate": 0}, (parts, (tmp_path / "log.txt").read_text()[-3000:])
    smoke = [r for r in rows if r.get("bench") == "fsdp2-smoke"]
    assert [r["offload"] for r in smoke] == [True, False]
    for fsdp2 in smoke:  # one rank: the plain learner's loss, with the shards offloaded or not
        assert fsdp2["loss"]["fsdp2"] == pytest.approx(fsdp2["loss"]["plain"], rel=1e-5)
    assert {r["quickstart"] for r in rows if "quickstart" in r} == {"gpu", "cpu"}  # both runs (the "gpu" one on cpu here)
    assert any("covey_tok_s" in r for r in rows)
    assert (tmp_path / "machine.txt").is_file() and (tmp_path / "quickstart_compare.txt").is_file()
    assert len(list(tmp_path.iterdir())) <= 8  # the device tool brings back at most 8 files
