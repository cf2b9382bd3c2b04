"""Every config in examples/judge/ trains (tiny random judge, one step): a local judge, the Writing-Zero
pairwise GenRM with brpo, the ArenaRL tournament, and step_correction with vspo. In process through
`covey.train.run.train` (what `covey train` calls), and the local judge once more from the command line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from covey.train.config import load_config
from covey.train.run import train

ONE_STEP = ["steps=1", "log.progress=false", "log.tensorboard=false"]
FOLDER = Path(__file__).resolve().parents[2] / "examples" / "judge"
EXAMPLES = [FOLDER / n for n in ("arenarl.yaml", "local_judge.yaml", "pairwise_genrm.yaml", "step_correction.yaml")]
TESTED_ELSEWHERE = {  # real models or an optional toolchain: trained by their own (slow or skipping) tests
    "step_correction_smollm2.yaml": "tests/strategies/test_step_correction_e2e.py",
    "table2latex.yaml": "tests/rewards/test_table_latex.py",
}


def test_every_example_is_trained_by_a_test():
    assert sorted(p.name for p in FOLDER.glob("*.yaml")) == sorted([p.name for p in EXAMPLES] + list(TESTED_ELSEWHERE))


def _check_one_step(path: Path, run: Path) -> None:
    """The run's single metrics row shows every judge of the example asked, without failures."""
    names = [r.get("alias") or r["name"] for r in yaml.safe_load(path.read_text())["rewards"]]
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for name in names:
        assert row[f"reward/{name}/judge_requests"] > 0, name  # the judge was asked
        assert row[f"reward/{name}/failures"] == 0.0, name
    if path.stem == "step_correction":  # the judge lives in the rollout strategy, the refill in the sampler
        assert row["step_correction/judge_requests"] > 0 and "sampler/vspo/p_hat_mean" in row


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_trains_one_step(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths in the example (the judge cache) land here, as with the CLI below
    train(load_config(path, ONE_STEP), tmp_path / "run")
    _check_one_step(path, tmp_path / "run")


def test_the_cli_trains_the_local_judge_example(tmp_path):
    (path,) = [p for p in EXAMPLES if p.stem == "local_judge"]
    cmd = [sys.executable, "-m", "covey.cli", "train", str(path), *ONE_STEP, "--run-dir", str(tmp_path / "run")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    _check_one_step(path, tmp_path / "run")
