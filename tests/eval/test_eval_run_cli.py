"""`covey eval --run`: the run's task settings (params, eval split) and its rewards, unless overridden."""

import json

from typer.testing import CliRunner

from covey.cli import app

runner = CliRunner()
REWARD = '''
def topic_a(completions, topic, **kwargs):
    return [1.0 if t == "a" else 0.0 for t in topic]
'''


def _rows(path, topics):
    path.write_text("".join(json.dumps({"q": f"{i}+1=", "answer": str(i + 1), "topic": t}) + "\n" for i, t in enumerate(topics)))
    return path


def test_eval_run_uses_the_runs_task_and_rewards(tmp_path):
    train = _rows(tmp_path / "train.jsonl", ["a", "b", "b", "b"])
    test = _rows(tmp_path / "test.jsonl", ["a", "a", "b"])
    (tmp_path / "rw.py").write_text(REWARD)
    run = tmp_path / "run"
    res = runner.invoke(app, ["train", "--run-dir", str(run), "model.name=tiny-llama", "task.name=dataset",
                              f"task.params={{path: {train}, eval_path: {test}, prompt_key: q}}",
                              f"rewards=[{{name: {tmp_path / 'rw.py'}:topic_a, weight: 0.5}}]", "reward_workers=0", "steps=1",
                              "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=4",
                              "log.report_to=[jsonl]"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["eval", "--run", str(run), "--max-new-tokens", "4"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["task"] == "dataset" and out["split"] == "test" and out["problems"] == 3  # the run's eval data
    assert abs(out["reward/topic_a"] - 2 / 3) < 1e-6  # the run's custom reward, on its columns
    assert abs(out["reward"] - (out["reward/accuracy"] + 0.5 * 2 / 3)) < 1e-6
    assert out["accuracy"] == out["reward/accuracy"] and "pass@1" in out
    assert "eval: 3/3 problems" in res.output  # progress, plain off a terminal
    res = runner.invoke(app, ["eval", "--run", str(run), "--max-new-tokens", "4", "--split", "train", "--task-param", "limit=2"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["split"] == "train" and out["problems"] == 2 and out["reward/topic_a"] == 0.5  # rows a, b
    res = runner.invoke(app, ["eval", "--model", "tiny-llama"])
    assert res.exit_code == 2 and "--task is needed with --model" in res.output
