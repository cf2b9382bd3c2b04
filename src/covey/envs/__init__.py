"""Environments for multi-turn agents (the `Env` seam, registry `ENVS`, config ``env:``).

Built in: maze (a seeded text grid maze; also the `maze` task), calculator (arithmetic with a
calculator tool over any task with answers). Tool-call parsing and the calculator live in tools.py.
The `episodes` rollout strategy runs them. See docs/agents.md.
"""

from covey.envs.base import ENVS, Action, Env, StepResult, ToolCall, register_env
from covey.envs.calculator import CalculatorEnv
from covey.envs.maze import MazeEnv, MazeTask
from covey.envs.tools import calculate, parse_tool_calls

__all__ = [
    "ENVS",
    "Action",
    "CalculatorEnv",
    "Env",
    "MazeEnv",
    "MazeTask",
    "StepResult",
    "ToolCall",
    "calculate",
    "parse_tool_calls",
    "register_env",
]
