"""Environments for multi-turn agents (the `Env` seam, registry `ENVS`, config ``env:``).

Built in: maze (a seeded text grid maze; its task is `covey.tasks.maze`), calculator (arithmetic with a
calculator tool over any task with answers), search_qa (a search tool over a local corpus,
search.py; its task is `covey.tasks.search_qa`), solver_verifier (two agents, a solver and a verifier, for per-agent credit), gui_sim (a text phone replaying
expert trajectories semi-online, UI-S1; its task is `covey.tasks.gui_sim`), skill_library (arithmetic with skills
the agent saves and reuses, SAGE; its task is `covey.tasks.skill_chains`), starling_provisional
(generated text games, STARLING; its task is `covey.tasks.starling`), trace_provisional (a base env plus a
reward for exercising one capability, TRACE). Games of several
roles (roles.py: the protocol the `selfplay` strategy plays): textarena_selfplay (every TextArena player a role), red_team (Self-RedTeam's attacker and defender), ssp
(search self-play: proposer and solver), planner_executor (M-GRPO's main agent and sub-agents). Adapters (optional extras): gymnasium (gym_adapter.py), textarena (textarena_adapter.py); prime-intellect
verifiers environments own their loop, so they are a task (`covey.tasks.verifiers`) + the `verifiers` rollout strategy (verifiers_adapter.py loads them). Tool-call parsing and the calculator live in tools.py.
The `episodes` rollout strategy runs them. See docs/agents.md.
"""

from covey.envs.base import ENVS, Action, Env, MissingExtra, StepResult, ToolCall, fork_env, register_env
from covey.envs.calculator import CalculatorEnv
from covey.envs.gui_sim import GuiSimEnv
from covey.envs.gym_adapter import GymnasiumEnv
from covey.envs.maze import MazeEnv
from covey.envs.planner_executor import PlannerExecutorEnv
from covey.envs.red_team import RedTeamEnv
from covey.envs.search import SearchQAEnv
from covey.envs.skills import SkillLibraryEnv
from covey.envs.starling import StarlingEnv
from covey.envs.trace import TraceCapabilityEnv
from covey.envs.solver_verifier import SolverVerifierEnv
from covey.envs.ssp import SearchSelfPlayEnv
from covey.envs.textarena_adapter import TextArenaEnv
from covey.envs.textarena_selfplay import TextArenaGame
from covey.envs.tools import calculate, parse_tool_calls

__all__ = [
    "ENVS",
    "Action",
    "CalculatorEnv",
    "Env",
    "GuiSimEnv",
    "GymnasiumEnv",
    "MazeEnv",
    "MissingExtra",
    "PlannerExecutorEnv",
    "RedTeamEnv",
    "SearchQAEnv",
    "SearchSelfPlayEnv",
    "SkillLibraryEnv",
    "StarlingEnv",
    "SolverVerifierEnv",
    "StepResult",
    "TextArenaEnv",
    "TextArenaGame",
    "ToolCall",
    "TraceCapabilityEnv",
    "calculate",
    "fork_env",
    "parse_tool_calls",
    "register_env",
]
