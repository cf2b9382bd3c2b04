"""A simulated 2-node Ray cluster (tests/runtime/_two_nodes.py, in its own process): engines on one
node and fsdp2 learners on both train exactly as on one node; removing a node mid-step is a one-line
error naming the dead learner actor, the last checkpoint stays intact, and the run resumes from it
exactly on the nodes left (a spare among them)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_two_nodes_train_as_one_and_survive_a_lost_node(tmp_path):
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0"}
    proc = subprocess.run([sys.executable, "-m", "tests.runtime._two_nodes", str(tmp_path), str(report)], env=env,
                          capture_output=True, text=True, timeout=900, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(report.read_text())
    assert out["engine_nodes"] == 1 and out["learner_nodes"] == 2, out  # engines on one node, learners on both
    assert out["two_equals_one"], out
    error = out["error"]
    assert error is not None and len(error.splitlines()) == 1, error
    assert "learner actor 'covey-learner-" in error and "died during update" in error, error
    assert out["checkpoint_intact"] and out["resume_exact"] and out["resumed_off_the_lost_node"], out
