"""The `maze` task: seeded mazes as items whose verifier scores a single-turn plan; the environment
that plays them turn by turn is `covey.envs.maze` (`env: {name: maze}`)."""

from __future__ import annotations

from covey.envs.maze import MOVE_WORDS, find_cell, first_prompt, make_maze, shortest_path, step_move
from covey.tasks._common import check_split
from covey.tasks.registry import register_task

__all__ = ["MazeTask"]


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
            pos, goal = find_cell(rows, "A"), find_cell(rows, "G")
            for m in MOVE_WORDS.findall(text):
                pos = step_move(rows, pos, m.lower())
                if pos == goal:
                    break
            out.append(1.0 if pos == goal else 0.0)
        return out
