"""`covey algos`: every algorithm component and preset with its arXiv id and status."""

from typer.testing import CliRunner

from covey.algos import PRESETS, REGISTRIES
from covey.algos.status import STATUS, STATUS_MEANING, status_of
from covey.cli import app
from covey.likelihood import LIKELIHOODS


def test_every_component_and_preset_has_a_status_and_no_row_is_stale():
    names = {(kind, n) for kind, reg in REGISTRIES.items() for n in reg} | {("preset", n) for n in PRESETS}
    names |= {("likelihood", n) for n in LIKELIHOODS}  # masked-diffusion estimators (not an REGISTRIES axis)
    missing = sorted(k for k in names if status_of(*k)[0] == "?")
    assert missing == [], f"add a row to covey.algos.status.STATUS for {missing}"
    assert sorted(set(STATUS) - names) == []
    assert {s for s, _ in STATUS.values()} <= set(STATUS_MEANING)
    assert all(src for _, src in STATUS.values())


def test_covey_algos_prints_arxiv_and_status():
    res = CliRunner().invoke(app, ["algos"])
    assert res.exit_code == 0, res.output
    rows = {(line.split("│")[1].split("(")[0].strip(), line.split("│")[2].strip()): line
            for line in res.output.splitlines() if line.count("│") > 6 and line.split("│")[2].strip()}  # fmt: skip
    assert "2601.12730" in rows["advantage", "dcpo"] and " code " in rows["advantage", "dcpo"]
    assert "2512.06337" in rows["advantage", "dagrpo_provisional"] and "reconstructed" in rows["advantage", "dagrpo_provisional"]
    assert "2402.03300" in rows["advantage", "grpo"] and "framework" in rows["advantage", "grpo"]
    assert "2505.24864" in rows["preset", "prorl"] and "partial" in rows["preset", "prorl"]
    assert "2502.09992" in rows["likelihood", "elbo_mc"] and " code " in rows["likelihood", "elbo_mc"]
    assert "status: code = checked against the authors' released code" in res.output
