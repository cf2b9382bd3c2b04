"""The `starling_provisional` task: generated text games for the `starling_provisional` environment (STARLING,
arXiv 2406.05872, reconstructed; the spec format and engine are `covey.envs.starling`).

Games come from seed game ideas (`IDEAS`: make tea, plant a seed, feed the cat, pack for a trip, fix a lamp,
bake bread, wash the dishes, water the garden) in one of two ways:

- `slot_fill(idea, rng)`: covey's seeded slot filler. Each idea fixes a skill pattern (fetch a thing, maybe
  from a closed container, bring it to a place, put it in something, use a tool); the filler draws the
  rooms, their layout, where things start, distractors, and writes the walkthrough by planning the moves.
  The shipped set (`games: builtin`, 32 games in `data/starling/games.jsonl`, written by
  `scripts/make_starling_games.py`) comes from it: procedurally filled, not written by a language model.
- `generate_games(asker, ideas, n)`: STARLING's way, a model writes each spec from an idea and k example
  specs (a judge backend, `covey.envs.llm.Asker`: the policy, a local model or an endpoint); a reply is
  kept only when it parses and `check_game` plays its walkthrough to the goal. `scripts/make_starling_games.py
  --backend ...` writes such a set to a JSONL file for ``games: path/to/games.jsonl``.
"""

from __future__ import annotations

import json
import random
from collections import deque
from pathlib import Path

from covey.envs.llm import json_block
from covey.envs.starling import DIRECTIONS, check_game
from covey.tasks._common import check_split
from covey.tasks.registry import register_task

__all__ = ["IDEAS", "StarlingTask", "generate_games", "slot_fill"]

BUILTIN = Path(__file__).parent / "data" / "starling" / "games.jsonl"
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east", "up": "down", "down": "up"}
DISTRACTORS = ("umbrella", "old newspaper", "blue mug", "candle", "key ring", "pillow", "toy car", "map")

# idea: the thing to fetch (and its closed container, if any), where it goes, what is used at the end
IDEAS = {
    "make tea": {"rooms": ["kitchen", "pantry", "hall"], "thing": "tea bag", "box": "tin", "into": "kettle",
                 "use": "stove", "where": "kitchen"},
    "plant a seed": {"rooms": ["garden", "shed", "porch"], "thing": "seed", "box": "packet", "into": "pot",
                     "use": ["watering can", "pot"], "where": "garden"},
    "feed the cat": {"rooms": ["kitchen", "cellar", "living room"], "thing": "cat food", "box": "cupboard",
                     "into": "bowl", "use": None, "where": "kitchen"},
    "pack for a trip": {"rooms": ["bedroom", "study", "hall"], "thing": "passport", "box": "drawer",
                        "into": "suitcase", "use": None, "where": "hall"},
    "fix a lamp": {"rooms": ["living room", "storeroom", "hall"], "thing": "bulb", "box": "box", "into": "lamp",
                   "use": "lamp switch", "where": "living room"},
    "bake bread": {"rooms": ["kitchen", "pantry", "dining room"], "thing": "dough", "box": "fridge", "into": "oven",
                   "use": "oven", "where": "kitchen"},
    "wash the dishes": {"rooms": ["kitchen", "dining room", "hall"], "thing": "dirty plate", "box": None, "into": "sink",
                        "use": "tap", "where": "kitchen"},
    "water the garden": {"rooms": ["garden", "shed", "yard"], "thing": "watering can", "box": None, "into": None,
                         "use": ["watering can", "flowers"], "where": "garden"},
}  # fmt: skip


def _layout(rooms: list[str], rng: random.Random) -> dict[str, dict]:
    """A random tree of rooms with consistent two-way exits."""
    exits = {r: {} for r in rooms}
    for i, room in enumerate(rooms[1:], 1):
        for _ in range(20):
            other = rooms[rng.randrange(i)]
            free = [d for d in DIRECTIONS[:4] if d not in exits[other] and OPPOSITE[d] not in exits[room]]
            if free:
                d = rng.choice(free)
                exits[other][d], exits[room][OPPOSITE[d]] = room, other
                break
    return exits


def _path(exits: dict, start: str, goal: str) -> list[str]:
    """The moves of a shortest walk from `start` to `goal` (breadth-first)."""
    prev, queue = {start: None}, deque([start])
    while queue:
        room = queue.popleft()
        for d, to in exits[room].items():
            if to not in prev:
                prev[to] = (room, d)
                queue.append(to)
    moves, room = [], goal
    while prev[room] is not None:
        room, d = prev[room]
        moves.append(f"go {d}")
    return moves[::-1]


def slot_fill(idea: str, rng: random.Random) -> dict:
    """One game of `idea` (module docstring), with its walkthrough; `check_game` accepts it."""
    if idea not in IDEAS:
        raise ValueError(f"starling: unknown idea {idea!r}; ideas are {', '.join(IDEAS)}")
    slots = IDEAS[idea]
    rooms = list(slots["rooms"])
    rng.shuffle(rooms)
    rooms = rooms[: rng.randint(2, len(rooms))]
    if slots["where"] not in rooms:
        rooms[-1] = slots["where"]
    exits = _layout(rooms, rng)
    start, source = rng.choice(rooms), rng.choice([r for r in rooms if r != slots["where"]] or rooms)
    objects, goal, walk, here = {}, [], [], start
    box, thing, use = slots["box"], slots["thing"], slots["use"]
    user = use[0] if isinstance(use, list) else use  # the thing that is used
    if box:
        objects[box] = {"room": source, "container": True, "openable": True, "portable": False}
        objects[thing] = {"inside": box, "portable": True, "usable": thing == user}
    else:
        objects[thing] = {"room": source, "portable": True, "usable": thing == user}
    walk += _path(exits, here, source)
    here = source
    if box:
        walk.append(f"open {box}")
    walk.append(f"take {thing}")
    walk += _path(exits, here, slots["where"])
    here = slots["where"]
    into = slots["into"]
    if into:
        objects.setdefault(into, {"room": slots["where"], "container": True, "portable": False,
                                  "openable": into in ("oven",), "usable": use == into})  # fmt: skip
        if objects[into].get("openable"):
            walk.append(f"open {into}")
        walk.append(f"put {thing} in {into}")
        goal.append({"in": [thing, into]})
    else:
        goal.append({"at": slots["where"]})
    if isinstance(use, list):  # use a thing on a target
        target = use[1]
        objects.setdefault(target, {"room": slots["where"], "portable": False})
        if use[0] != thing:
            objects[use[0]] = {"room": rng.choice(rooms), "portable": True, "usable": True}
            walk += _path(exits, here, objects[use[0]]["room"]) + [f"take {use[0]}"] + _path(exits, objects[use[0]]["room"], slots["where"])
        walk.append(f"use {use[0]} on {target}")
        goal.append({"used": [use[0], target]})
    elif use:
        objects.setdefault(use, {"room": slots["where"], "portable": False})
        objects[use]["usable"] = True
        walk.append(f"use {use}")
        goal.append({"used": use})
    for extra in rng.sample(DISTRACTORS, rng.randint(1, 3)):
        objects[extra] = {"room": rng.choice(rooms), "portable": True}
    descriptions = {r: f"It is a quiet {r}." for r in rooms}
    spec = {"title": idea.capitalize(), "idea": idea, "intro": f"Your task: {idea}.", "start": start,
            "rooms": {r: {"description": descriptions[r], "exits": exits[r]} for r in rooms},
            "objects": objects, "goal": goal, "walkthrough": walk}  # fmt: skip
    why = check_game(spec)
    if why is not None:  # pragma: no cover - the filler is tested over many seeds
        raise AssertionError(f"slot_fill made an unplayable {idea!r} game: {why}")
    return spec


GENERATE = ("Write a small text adventure game as JSON for this idea: {idea}.\nUse exactly these keys: title, intro, start, "
            "rooms ({{name: {{description, exits: {{direction: room}}}}}}), objects ({{name: {{room or inside, portable, "
            "container, openable, usable}}}}), goal (a list of facts: {{\"at\": room}}, {{\"holding\": thing}}, {{\"in\": "
            "[thing, container]}}, {{\"open\": thing}}, {{\"used\": thing}} or {{\"used\": [thing, target]}}) and walkthrough "
            "(the commands that win: go <direction>, take, drop, open, put <thing> in <container>, use <thing> on <target>)."
            "\n\nExamples:\n{examples}\n\nAnswer with the JSON inside ```json ... ```.")  # fmt: skip


def generate_games(asker, ideas: list[str], n: int, examples: list[dict], seed: int = 0) -> tuple[list[dict], dict[str, int]]:
    """Up to `n` games written by a model (`asker`, `covey.envs.llm.Asker`), cycling through `ideas`, each
    prompt showing the `examples` (k-shot); a reply is kept when `check_game` accepts it. Returns (the games,
    counts of replies that were accepted, did not parse, or were not playable)."""
    shots = "\n".join(json.dumps(e, ensure_ascii=False) for e in examples)
    ideas_n = [ideas[i % len(ideas)] for i in range(n)]
    replies = asker.ask([[{"role": "user", "content": GENERATE.format(idea=idea, examples=shots)}] for idea in ideas_n], seed)
    games, counts = [], {"accepted": 0, "unparsed": 0, "unplayable": 0}
    for idea, reply in zip(ideas_n, replies):
        spec = json_block(reply)
        if not isinstance(spec, dict):
            counts["unparsed"] += 1
        elif check_game(spec) is not None:
            counts["unplayable"] += 1
        else:
            games.append({**spec, "idea": spec.get("idea", idea)})
            counts["accepted"] += 1
    return games, counts


@register_task("starling_provisional")
class StarlingTask:
    """Generated text games as items ``{"id", "prompt", "game"}`` (module docstring). Params: games (builtin, or a
    JSONL file of specs), n_test (the last games are the test split). The verifier plays a single-turn answer's
    lines as commands and scores the share of the goal reached (so the games also work without an env)."""

    name = "starling_provisional"
    answer_format = "One command per line, e.g. go north / take tea bag / put tea bag in kettle."

    def __init__(self, *, games: str = "builtin", n_test: int = 8):
        path = BUILTIN if games == "builtin" else Path(games)
        if not path.is_file():
            raise ValueError(f"starling_provisional: games must be 'builtin' or a JSONL file of game specs, got {games!r}")
        specs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        bad = [(i, why) for i, s in enumerate(specs) if (why := check_game(s)) is not None]
        if bad:
            raise ValueError(f"starling_provisional: game {bad[0][0] + 1} of {path} is not playable: {bad[0][1]}")
        if not 0 <= n_test < len(specs):
            raise ValueError(f"starling_provisional: n_test must be in [0, {len(specs) - 1}] for {len(specs)} games, got {n_test}")
        self.specs, self.n_test = specs, n_test

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        cut = len(self.specs) - self.n_test
        chosen = self.specs[:cut] if split == "train" else self.specs[cut:]
        return [{"id": i, "prompt": s["intro"], "game": s} for i, s in enumerate(chosen)]

    def demonstration(self, item: dict) -> str:
        return item["game"]["walkthrough"][0]

    def reward(self, prompts, completions, game, **_) -> list[float]:
        from covey.envs.starling import Game

        out = []
        for c, spec in zip(completions, game):
            g = Game(json.loads(json.dumps(spec)))
            for line in (c if isinstance(c, str) else c[-1]["content"]).splitlines()[: len(spec["walkthrough"]) * 2]:
                g.command(line)
                g.progress()
            out.append(g.score())
        return out
