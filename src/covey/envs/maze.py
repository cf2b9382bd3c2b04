"""`maze`: a seeded text grid maze environment (its task, seeded mazes as items: `covey.tasks.maze`). States repeat across the G episodes of a
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

__all__ = ["MOVE_WORDS", "MazeEnv", "find_cell", "first_prompt", "make_maze", "render", "shortest_path", "solve", "step_move"]

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
MOVE_WORDS = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)
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


def find_cell(rows: list[str], ch: str) -> tuple[int, int]:
    for r, row in enumerate(rows):
        if ch in row:
            return r, row.index(ch)
    raise ValueError(f"maze has no {ch!r}")


def step_move(rows: list[str], pos: tuple[int, int], move: str) -> tuple[int, int]:
    dr, dc = MOVES[move]
    r, c = pos[0] + dr, pos[1] + dc
    if 0 <= r < len(rows) and 0 <= c < len(rows[0]) and rows[r][c] != "#":
        return r, c
    return pos


def shortest_path(rows: list[str]) -> list[str] | None:
    """The moves of a shortest path from A to G (BFS, moves tried in the order up, down, left, right),
    or None when G cannot be reached."""
    start, goal = find_cell(rows, "A"), find_cell(rows, "G")
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
            q = step_move(rows, p, m)
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
    return [{"role": "user", "content": f"{RULES}\n{render(rows, find_cell(rows, 'A'))}"}]


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
        self.pos, self.goal, self.steps = find_cell(self.rows, "A"), find_cell(self.rows, "G"), 0
        return StepResult(first_prompt(self.rows), anchor=render(self.rows, self.pos))

    def step(self, action: Action) -> StepResult:
        self.steps += 1
        m = MOVE_WORDS.search(action.text)
        if m is None:
            msg, reward, valid = "Invalid action. Reply with one move: up, down, left or right.", self.invalid_reward, False
        else:
            new = step_move(self.rows, self.pos, m.group(1).lower())
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
