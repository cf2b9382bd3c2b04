"""RUN/provenance.json: written when training starts, extended on resume, used by `covey compare export`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import covey
from covey.cli import app
from covey.train import provenance
from covey.train.provenance import config_sha256, write_provenance

SRC = Path(covey.__file__).parent


def test_config_hash_is_the_sha256_of_canonical_json():
    # sha256(b'{"a":1,"b":[2,3]}'): key order and spacing do not change it, a value does
    want = "efbd0040190fb0871831e606c581f8a66db79d8e2bb836745a70051306956070"
    assert config_sha256({"b": [2, 3], "a": 1}) == want
    assert config_sha256({"a": 1, "b": [2, 3]}) == want
    assert config_sha256({"a": 1, "b": [3, 2]}) != want


def test_fresh_record_then_resumes_append(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["covey", "train", "cfg.yaml", "seed=3"])
    first = write_provenance(tmp_path, {"seed": 3, "steps": 2})
    on_disk = json.loads((tmp_path / "provenance.json").read_text())
    assert on_disk == first and first["resumes"] == []
    assert first["command"] == ["covey", "train", "cfg.yaml", "seed=3"]
    assert first["config_sha256"] == config_sha256({"seed": 3, "steps": 2})
    assert first["covey"] == covey.__version__ and first["python"] == sys.version.split()[0]
    assert set(first) >= {"torch", "transformers", "numpy", "platform", "cpu", "cpu_count", "git", "start_time"}
    assert first["start_time"].endswith("+00:00")  # UTC
    monkeypatch.setattr(sys, "argv", ["covey", "train", "--resume", str(tmp_path), "steps=5"])
    again = write_provenance(tmp_path, {"seed": 3, "steps": 5}, resume=True)
    assert again["command"] == first["command"] and again["config_sha256"] == first["config_sha256"]  # the first start stays
    assert len(again["resumes"]) == 1 and again["resumes"][0]["command"][-1] == "steps=5"
    assert again["resumes"][0]["config_sha256"] == config_sha256({"seed": 3, "steps": 5})
    assert len(write_provenance(tmp_path, {}, resume=True)["resumes"]) == 2
    assert write_provenance(tmp_path, {})["resumes"] == []  # a fresh start replaces the record


def test_an_unreadable_record_is_replaced_on_resume(tmp_path):
    (tmp_path / "provenance.json").write_text("{torn")
    rec = write_provenance(tmp_path, {"x": 1}, resume=True)
    assert rec["resumes"] == [] and rec["config_sha256"] == config_sha256({"x": 1})


def test_git_commit_of_the_checkout_or_none(tmp_path):
    head = subprocess.run(["git", "-C", str(SRC), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("covey is not running from a git checkout")
    got = provenance._git(SRC)
    assert got["commit"] == head.stdout.strip() and isinstance(got["dirty"], bool)
    assert provenance._git(tmp_path) is None  # not a checkout


def test_cpu_model_is_the_cpuinfo_model_name():
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        pytest.skip("no /proc/cpuinfo")
    names = [ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines() if ln.startswith("model name")]
    if not names:
        pytest.skip("/proc/cpuinfo names no model")
    assert provenance._cpu_model() == names[0]


def _run(root: Path, name: str) -> Path:
    run = root / name
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"algo": {"preset": "grpo"}, "seed": 0, "steps": 1}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    return run


def test_export_puts_the_runs_own_provenance_in_run_json(tmp_path):
    with_rec, without = _run(tmp_path, "a"), _run(tmp_path, "b")
    rec = write_provenance(with_rec, {"seed": 0})
    out = tmp_path / "orb"
    res = CliRunner().invoke(app, ["compare", "export", str(with_rec), str(without), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads((out / "covey" / "covey" / "a" / "run.json").read_text())["provenance"]
    assert got["recorded"].startswith("at train time") and got["config_sha256"] == rec["config_sha256"]
    assert got["start_time"] == rec["start_time"] and got["command"] == rec["command"]
    assert got["export"]["recorded"].startswith("at export") and "packages_sha256" in got["export"]
    assert set(got["sha256"]) == {"config.yaml", "metrics.jsonl"}
    other = json.loads((out / "covey" / "covey" / "b" / "run.json").read_text())["provenance"]
    assert other["recorded"].startswith("at export") and "export" not in other  # no record: the exporting environment
