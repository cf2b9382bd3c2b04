"""The built-in environments (maze, calculator), the `maze` task, the ENVS registry and the `env:` config."""

import pytest

from covey.envs import ENVS, Action, Env, StepResult
from covey.envs.maze import MazeEnv, make_maze, render, solve
from covey.tasks.maze import MazeTask
from covey.envs.tools import parse_tool_calls
from covey.train.config import ConfigError, load_config

MAZE = ["A.#", "#..", "#.G"]  # shortest path: right, down, down, right (4)


def act(text):
    return Action(text, [], parse_tool_calls(text))


def test_maze_moves_walls_repeats_goal_and_anchors():
    env = ENVS.build("maze", {"max_steps": 10})
    assert isinstance(env, Env)
    first = env.reset({"id": 0, "maze": MAZE}, seed=0)
    assert first.anchor == "A.#\n#..\n#.G" and first.messages[0]["role"] == "user" and not first.done
    r = env.step(act("I go left"))  # off the grid: stays, same anchor (a repeated state)
    assert r.anchor == first.anchor and r.info == {"valid": True, "success": False} and "hit a wall" in r.messages[0]["content"]
    r = env.step(act("hmm"))
    assert r.info["valid"] is False and r.anchor == first.anchor and r.reward == 0.0
    for move in ("right", "Down please", "down"):
        r = env.step(act(move))
        assert not r.done and r.reward == 0.0
    assert r.anchor == "..#\n#..\n#AG"
    r = env.step(act("right"))
    assert r.terminated and r.reward == 1.0 and r.info["success"] and r.messages == []


def test_maze_truncates_at_max_steps_with_rewards_as_configured():
    env = MazeEnv(max_steps=2, step_reward=-0.1, invalid_reward=-0.5)
    env.reset({"id": 0, "maze": MAZE}, seed=0)
    assert env.step(act("nothing")).reward == -0.5
    r = env.step(act("right"))
    assert r.truncated and not r.terminated and r.reward == -0.1


def test_make_maze_is_seeded_and_solvable_and_task_splits_differ():
    assert make_maze(5, 7) == make_maze(5, 7) != make_maze(5, 8)
    for seed in range(20):
        rows = make_maze(4, seed, 0.45)
        assert rows[0][0] == "A" and rows[-1][-1] == "G" and solve(rows) is not None
    assert solve(MAZE) == 4 and solve(["A#", "#G"]) is None
    task = MazeTask(size=4, n_train=5, n_test=3)
    train, test = task.examples("train"), task.examples("test")
    assert len(train) == 5 and len(test) == 3 and train[0]["maze"] != test[0]["maze"]
    assert train[1]["prompt"][0]["content"].endswith(render(train[1]["maze"], (0, 0)))
    with pytest.raises(ValueError, match="no split"):
        task.examples("dev")


def test_maze_task_verifier_scores_a_plan_and_demonstrations_solve():
    task = MazeTask()
    assert task.demonstration({"maze": MAZE}) == "right down down right"
    for item in MazeTask(size=4, n_train=10).examples("train"):
        assert task.reward([None], [task.demonstration(item)], maze=[item["maze"]]) == [1.0]
    got = task.reward([None] * 3, ["right down down right", "down right", [{"role": "assistant", "content": "right, down, down, right!"}]],
                      maze=[MAZE] * 3)  # fmt: skip
    assert got == [1.0, 0.0, 1.0]


def test_calculator_env_tool_turns_errors_and_final_answer():
    env = ENVS.build("calculator", {"max_calls": 3})
    first = env.reset({"id": 1, "prompt": "What is 12*3+4?", "answer": "40"}, seed=0)
    assert [m["role"] for m in first.messages] == ["system", "user"] and env.tools[0]["function"]["name"] == "calculator"
    r = env.step(act('<tool_call>{"name": "calculator", "arguments": {"expression": "12*3"}}</tool_call>'))
    assert r.messages == [{"role": "tool", "content": "36"}] and r.info["tool_errors"] == 0 and r.info["valid"]
    r = env.step(act('<tool_call>{oops}</tool_call><tool_call>{"name": "python", "arguments": {}}</tool_call>'))
    assert [m["content"][:6] for m in r.messages] == ["error:", "error:"] and r.info["tool_errors"] == 2
    assert "unknown tool 'python'" in r.messages[1]["content"] and r.info["valid"] is True  # one call parsed
    r = env.step(act("The answer is 40"))
    assert r.terminated and r.reward == 1.0 and r.info["success"]


def test_calculator_env_invalid_turn_and_truncation():
    env = ENVS.build("calculator", {"max_calls": 1})
    env.reset({"id": 1, "prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}, seed=0)
    r = env.step(act("<tool_call>nope</tool_call>"))
    assert r.info["valid"] is False and r.truncated
    env.reset({"id": 1, "prompt": "2+2?", "answer": "4"}, seed=0)
    assert env.step(act("5")).reward == 0.0
    with pytest.raises(ValueError, match="answer"):
        env.reset({"id": 2, "prompt": "x"}, seed=0)


def test_env_registry_accepts_import_paths_and_names_params():
    env = ENVS.build("tests.envs.test_envs:EchoEnv", {"turns": 2})
    assert type(env).__name__ == "EchoEnv" and env.turns == 2
    with pytest.raises(Exception, match="no parameter"):
        ENVS.check_params("maze", {"size": 3})


class EchoEnv:
    tools = None

    def __init__(self, *, turns: int = 1):
        self.turns = turns

    def reset(self, item, *, seed):
        return StepResult([{"role": "user", "content": "say hi"}], anchor="start")

    def step(self, action):
        return StepResult([], 1.0 if "hi" in action.text else 0.0, terminated=True)

    def close(self):
        pass


def test_env_config_needs_the_episodes_strategy_and_vice_versa(tmp_path):
    cfg = load_config(None, ["env.name=maze", "rollout.strategy.name=episodes", "task.name=maze"])
    spec = cfg.strategy_spec()
    assert spec.name == "episodes" and spec.params["env"] == {"name": "maze"}
    with pytest.raises(ConfigError, match="needs rollout.strategy: episodes"):
        load_config(None, ["env.name=maze"])
    with pytest.raises(ConfigError, match="needs an environment"):
        load_config(None, ["rollout.strategy.name=episodes"])
    with pytest.raises(ConfigError, match="env: .*no parameter"):
        load_config(None, ["env.name=maze", "env.bogus=1", "rollout.strategy.name=episodes"])
    with pytest.raises(ConfigError, match="unknown environment"):
        load_config(None, ["env.name=nope", "rollout.strategy.name=episodes"])
    with pytest.raises(ConfigError, match="top-level `env:`"):
        load_config(None, ["env.name=maze", "rollout.strategy.name=episodes", "rollout.strategy.env=x"])


def test_covey_list_shows_the_environments():
    from typer.testing import CliRunner

    from covey.cli import app

    res = CliRunner().invoke(app, ["list", "environment"])
    assert res.exit_code == 0 and "environment (env)" in res.output
    assert "maze" in res.output and "calculator" in res.output


def test_env_config_refuses_reward_functions_and_shaping_it_would_not_apply():
    base = ["env.name=maze", "rollout.strategy.name=episodes", "task.name=maze"]
    with pytest.raises(ConfigError, match="rewards: reward functions are not applied to episodes"):
        load_config(None, [*base, "rewards=[{name: format}]"])
    with pytest.raises(ConfigError, match="algo.overlong: overlong shaping is not applied to episodes"):
        load_config(None, [*base, "algo.overlong.buffer_frac=0.2"])
    with pytest.raises(ConfigError, match="algo.kl.mode reward: .* use algo.kl.mode loss"):
        load_config(None, [*base, "algo.kl.coef=0.1", "algo.kl.mode=reward"])
    assert load_config(None, [*base, "algo.kl.coef=0.1", "algo.kl.mode=loss"]).algo.kl.coef == 0.1
    assert load_config(None, [*base, "algo.preset=loop"]).algo.advantage.name == "rloo"
