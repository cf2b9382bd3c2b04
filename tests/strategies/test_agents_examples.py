"""Each method of the second agents wave trains 2 steps end to end from its example config with the tiny
model, through the CLI (`covey train`): MARS (and MARS against a frozen snapshot), Self-RedTeam, SSP,
M-GRPO and PORTool. One subprocess runs them all (the CLI app in process, one import), each run's
metrics are checked here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
# run name -> (example, extra overrides); mars_frozen: player_1 played by the frozen snapshot
RUNS = {"mars_tictactoe": ("mars_tictactoe", []), "mars_frozen": ("mars_tictactoe", ["rollout.strategy.frozen_roles=[player_1]"]),
        "self_redteam": ("self_redteam", []), "ssp_search": ("ssp_search", []), "m_grpo_search": ("m_grpo_search", []),
        "portool_search": ("portool_search", [])}  # fmt: skip
DRIVER = """
import json, sys
from typer.testing import CliRunner
from covey.cli import app
out, runs = sys.argv[1], json.loads(sys.argv[2])
for name, (ex, extra) in runs.items():
    res = CliRunner().invoke(app, ["train", f"examples/agents/{ex}.yaml", "--run-dir", f"{out}/{name}", "steps=2",
                                   "reward_workers=0", "log.report_to=[jsonl]", "log.progress=false",
                                   "log.completions_every=1", "rollout.prompts_per_step=1", "sampling.max_new_tokens=8", *extra])
    if res.exit_code != 0:
        sys.exit(f"{name}: exit {res.exit_code}: {res.output[-2000:]}")
"""
# what each run must show in its metrics (every step)
WANT = {
    "mars_tictactoe": ["selfplay/games", "selfplay/player_0/rows", "adv/mars/roles"],
    "mars_frozen": ["selfplay/frozen_turns", "selfplay/player_1/rows"],
    "self_redteam": ["selfplay/attacker/rows", "selfplay/defender/return_mean", "adv/self_redteam/roles"],
    "ssp_search": ["selfplay/proposer/rows", "selfplay/solver/rows"],
    "m_grpo_search": ["selfplay/main/rows", "selfplay/sub/padded", "selfplay/sub/dropped"],
    "portool_search": ["tool_tree/candidates", "tool_tree/nodes_shared_frac", "adv/portool_provisional/forks_branching_frac"],
}


@pytest.mark.slow  # one subprocess: six 2-step CLI runs with the tiny model (about 35 s on 2 cores)
def test_each_second_wave_agent_example_trains_two_steps_through_the_cli(tmp_path):
    pytest.importorskip("textarena")
    pytest.importorskip("bm25s")
    out = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path), json.dumps(RUNS)], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=900)  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    for ex in RUNS:
        steps = [json.loads(x) for x in (tmp_path / ex / "metrics.jsonl").read_text().splitlines()]
        assert [s["step"] for s in steps] == [1, 2], ex
        for s in steps:
            assert all(k in s for k in WANT[ex]), (ex, sorted(s))
            assert s.get("selfplay/failed_games", 0.0) == 0.0 and "learn/loss" in s
        assert (tmp_path / ex / "checkpoint-2").is_dir()
    frozen = [json.loads(x) for x in (tmp_path / "mars_frozen" / "metrics.jsonl").read_text().splitlines()]
    assert all(s["selfplay/player_1/rows"] == 0 for s in frozen)  # the frozen player never trains
    samples = [json.loads(x) for x in (tmp_path / "self_redteam" / "samples.jsonl").read_text().splitlines()]
    roles = [{m["agent"] for m in s["episode"] if m["role"] == "assistant"} for s in samples]
    assert all(len(r) == 1 for r in roles) and set().union(*roles) == {0, 1}  # one role per conversation, both trained
