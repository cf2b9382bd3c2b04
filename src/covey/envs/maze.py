"""`maze`: a seeded text grid maze (environment + task). States repeat across the G episodes of a
group and within an episode (a bump into a wall stays put), so GiGPO/HGPO find anchor groups.

The grid is `size` x `size`: ``#`` wall, ``.`` open, ``A`` the agent, ``G`` the goal. Each turn the
model answers with one move: up, down, left or right (the first of these words in its turn counts).
A move into a wall or off the grid leaves the agent in place. Reward: `goal_reward` on reaching the
goal (terminated), `step_reward` per other step (default 0), `invalid_reward` for a turn without a
move (marked ``info["valid"] = False``). The anchor is the rendered grid (the state without history).
"""

from __future__ import annotations

import copy

import random
import re
from collections import deque

from covey.envs.base import Action, StepResult, register_env
from covey.tasks._common import check_split
from covey.tasks.registry import register_task

__all__ = ["MazeEnv", "MazeTask", "make_maze", "render", "shortest_path", "solve"]

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_MOVE = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)
RULES = ("You are the agent A in a grid maze; # is a wall, . is open floor, G is the goal. "
         "Reply with one move: up, down, left or right.")  # fmt: skip


def make_maze(size: int, seed: int, wall_density: float = 0.3) -> list[str]:
    """A solvable `size` x `size` maze from `seed`: A in the top-left corner, G in the bottom-right,
    walls drawn with probability `wall_density` (redrawn until a path exists)."""
    if size < 2:
        raise ValueError(f"maze size must be >= 2, got {size}")
    rng = random.Random(seed)
    while True:
        grid = [["#" if rng.random() < wall_density else "." for _ in range(size)] for _ in range(size)]
        grid[0][0], grid[-1][-1] = "A", "G"
        rows = ["".join(r) for r in grid]
        if solve(rows) is not None:
            return rows


def _find(rows: list[str], ch: str) -> tuple[int, int]:
    for r, row in enumerate(rows):
        if ch in row:
            return r, row.index(ch)
    raise ValueError(f"maze has no {ch!r}")


def _move(rows: list[str], pos: tuple[int, int], move: str) -> tuple[int, int]:
    dr, dc = MOVES[move]
    r, c = pos[0] + dr, pos[1] + dc
    if 0 <= r < len(rows) and 0 <= c < len(rows[0]) and rows[r][c] != "#":
        return r, c
    return pos


def shortest_path(rows: list[str]) -> list[str] | None:
    """The moves of a shortest path from A to G (BFS, moves tried in the order up, down, left, right),
    or None when G cannot be reached."""
    start, goal = _find(rows, "A"), _find(rows, "G")
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    todo = deque([start])
    while todo:
        p = todo.popleft()
        if p == goal:
            moves = []
            while came[p] is not None:
                p, m = came[p]
                moves.append(m)
            return moves[::-1]
        for m in MOVES:
            q = _move(rows, p, m)
            if q not in came:
                came[q] = (p, m)
                todo.append(q)
    return None


def solve(rows: list[str]) -> int | None:
    """Length of the shortest path from A to G, or None when G cannot be reached."""
    path = shortest_path(rows)
    return None if path is None else len(path)


def render(rows: list[str], pos: tuple[int, int]) -> str:
    """The grid with the agent at `pos` (the start cell shown as open floor)."""
    out = [list(r.replace("A", ".")) for r in rows]
    if out[pos[0]][pos[1]] != "G":
        out[pos[0]][pos[1]] = "A"
    return "\n".join("".join(r) for r in out)


def first_prompt(rows: list[str]) -> list[dict]:
    return [{"role": "user", "content": f"{RULES}\n{render(rows, _find(rows, 'A'))}"}]


@register_env("maze")
class MazeEnv:
    """The maze of `item["maze"]` (rows of text, e.g. from the `maze` task; the seed is not used: the
    layout is the item's). `max_steps` moves at most (then truncated)."""

    tools = None

    def __init__(self, *, max_steps: int = 12, goal_reward: float = 1.0, step_reward: float = 0.0,
                 invalid_reward: float = 0.0):  # fmt: skip
        if max_steps < 1:
            raise ValueError(f"maze max_steps must be >= 1, got {max_steps}")
        self.max_steps, self.goal_reward, self.step_reward, self.invalid_reward = max_steps, goal_reward, step_reward, invalid_reward
        self.rows: list[str] = []
        self.pos, self.goal, self.steps = (0, 0), (0, 0), 0

    def reset(self, item: dict, *, seed: int) -> StepResult:
        self.rows = list(item["maze"])
        self.pos, self.goal, self.steps = _find(self.rows, "A"), _find(self.rows, "G"), 0
        return StepResult(first_prompt(self.rows), anchor=render(self.rows, self.pos))

    def step(self, action: Action) -> StepResult:
        self.steps += 1
        m = _MOVE.search(action.text)
        if m is None:
            msg, reward, valid = "Invalid action. Reply with one move: up, down, left or right.", self.invalid_reward, False
        else:
            new = _move(self.rows, self.pos, m.group(1).lower())
            msg = "You hit a wall." if new == self.pos else "OK."
            self.pos, reward, valid = new, self.step_reward, True
        success = self.pos == self.goal
        if success:
            return StepResult([], self.goal_reward, terminated=True, anchor=render(self.rows, self.pos),
                              info={"valid": valid, "success": True})  # fmt: skip
        truncated = self.steps >= self.max_steps
        content = f"{msg}\n{render(self.rows, self.pos)}"
        return StepResult([{"role": "user", "content": content}], reward, truncated=truncated,
                          anchor=render(self.rows, self.pos), info={"valid": valid, "success": False})  # fmt: skip

    def fork(self) -> MazeEnv:
        """A copy of the live maze (position, steps taken): the two go on independently."""
        new = copy.copy(self)
        new.rows = list(self.rows)
        return new

    def close(self) -> None:
        pass


@register_task("maze")
class MazeTask:
    """Seeded mazes as task items ``{"id", "prompt", "maze"}`` (the prompt is the first user message the
    `maze` environment shows). The verifier scores a single-turn plan: the moves named in the
    completion, in order, must reach the goal (1.0) or not (0.0). Train and test mazes come from
    separate seeded streams. Params: size, wall_density, n_train, n_test, seed."""

    name = "maze"
    answer_format = "Moves (up, down, left, right) in order; the goal must be reached."

    def __init__(self, *, size: int = 4, wall_density: float = 0.3, n_train: int = 64, n_test: int = 32, seed: int = 0):
        if size < 2 or not 0 <= wall_density < 1 or n_train < 1 or n_test < 0:
            raise ValueError(f"maze: need size >= 2, 0 <= wall_density < 1, n_train >= 1, n_test >= 0 "
                             f"(got {size}, {wall_density}, {n_train}, {n_test})")  # fmt: skip
        self.size, self.density, self.n, self.seed = size, wall_density, {"train": n_train, "test": n_test}, seed

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        base = (self.seed * 2 + (split == "test")) * 1_000_003
        out = []
        for i in range(self.n[split]):
            rows = make_maze(self.size, base + i, self.density)
            out.append({"id": i, "prompt": first_prompt(rows), "maze": rows})
        return out

    def demonstration(self, item: dict) -> str:
        """A shortest plan, e.g. "right down down right" (for `covey sft`: a warm start whose first
        word is also the right first move of an episode)."""
        return " ".join(shortest_path(item["maze"]))

    def reward(self, prompts, completions, maze, **_) -> list[float]:
        out = []
        for text, rows in zip(completions, maze):
            text = text if isinstance(text, str) else text[-1]["content"]
            pos, goal = _find(rows, "A"), _find(rows, "G")
            for m in _MOVE.findall(text):
                pos = _move(rows, pos, m.lower())
                if pos == goal:
                    break
            out.append(1.0 if pos == goal else 0.0)
        return out
