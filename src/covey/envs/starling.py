"""`starling_provisional`: generated text games (STARLING, arXiv 2406.05872, reconstructed).

STARLING bootstraps text-game agents on games a language model writes from a seed set of game ideas: a
slot-filled prompt with k-shot examples yields a JSON game specification, which the authors compiled to
Inform7. Their repository (IBM/starling-agent, read at fc9a1d6) holds only a README, so the specification
format, the engine and the rewards here are covey's own: a small interpreter plays a JSON spec directly (no
Inform7), and a spec is accepted only when its own walkthrough solves it (`check_game`). The games' tasks
and generators are `covey.tasks.starling`.

A spec: ``{"title", "intro", "start": room, "rooms": {name: {"description", "exits": {direction: room}}},
"objects": {name: {"room" or "inside": container, "portable", "container", "openable", "usable"}},
"goal": [facts], "walkthrough": [commands]}``; goal facts are ``{"at": room}``, ``{"holding": obj}``,
``{"in": [obj, container]}``, ``{"open": obj}`` and ``{"used": obj}`` / ``{"used": [obj, target]}``.
Commands: look, inventory, go <direction> (or the direction alone), take / drop / open <obj>,
put <obj> in <container>, use <obj> [on <target>]. The first line of a turn is its command.

Reward: 1 / len(goal) each time a goal fact becomes true for the first time; terminated (success) when all
are true; a command the engine cannot carry out is invalid (``info["valid"] = False``); `max_steps`, then
truncated. The anchor is the state (room, inventory, object places, open things, facts done).
"""

from __future__ import annotations

import copy
import re

from covey.envs.base import Action, StepResult, register_env

__all__ = ["Game", "StarlingEnv", "check_game"]

DIRECTIONS = ("north", "south", "east", "west", "up", "down")
LIMITS = {"rooms": 8, "objects": 16, "goal": 6, "walkthrough": 40}
SYSTEM = ("You play a text game. Reply with one command per turn: look, inventory, go <direction>, take <thing>, "
          "drop <thing>, open <thing>, put <thing> in <container>, use <thing> (on <thing>).")  # fmt: skip


def _key(fact: dict) -> tuple:
    (kind, value), = fact.items()
    return (kind, *(value if isinstance(value, list) else [value]))


class Game:
    """The state of one playthrough of a spec (checked by `check_game` first)."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.room = spec["start"]
        self.place = {o: d.get("inside", d.get("room")) for o, d in spec["objects"].items()}  # room, container or "@player"
        self.opened: set[str] = set()
        self.used: set[tuple] = set()
        self.done: set[tuple] = set()

    # ---------------------------------------------------------------- what the player can reach
    def _here(self, obj: str) -> bool:
        objects, where = self.spec["objects"], self.place.get(obj)
        while where in objects:  # inside a container: reachable when the container is (and is open, if it opens)
            if objects[where].get("openable") and where not in self.opened:
                return False
            where = self.place.get(where)
        return where in (self.room, "@player")

    def visible(self) -> list[str]:
        return [o for o in self.spec["objects"] if self.place[o] != "@player" and self._here(o)]

    def describe(self) -> str:
        room = self.spec["rooms"][self.room]
        things = ", ".join(self.visible()) or "nothing"
        exits = ", ".join(room.get("exits", {})) or "none"
        return f"{self.room.capitalize()}. {room['description']} You see: {things}. Exits: {exits}."

    # ---------------------------------------------------------------- one command
    def command(self, text: str) -> tuple[str, bool]:
        """(what the game answers, whether the command did something)."""
        words = text.strip().lower().rstrip(".!").split()
        if not words:
            return "Say a command.", False
        verb, rest = words[0], " ".join(words[1:])
        objects, obj = self.spec["objects"], lambda name: objects.get(name, {})
        if verb in ("look", "l"):
            return self.describe(), True
        if verb in ("inventory", "i"):
            held = [o for o in objects if self.place[o] == "@player"]
            return "You carry: " + (", ".join(held) or "nothing") + ".", True
        if verb in DIRECTIONS or verb == "go":
            where = verb if verb in DIRECTIONS else rest
            target = self.spec["rooms"][self.room].get("exits", {}).get(where)
            if target is None:
                return "You cannot go that way.", False
            self.room = target
            return self.describe(), True
        if verb in ("take", "get"):
            if not self._here(rest) or self.place.get(rest) == "@player":
                return "You see no such thing.", False
            if not obj(rest).get("portable"):
                return f"The {rest} will not move.", False
            self.place[rest] = "@player"
            return f"You take the {rest}.", True
        if verb == "drop":
            if self.place.get(rest) != "@player":
                return "You do not carry that.", False
            self.place[rest] = self.room
            return f"You drop the {rest}.", True
        if verb == "open":
            if not self._here(rest) or not obj(rest).get("openable") or rest in self.opened:
                return "You cannot open that.", False
            self.opened.add(rest)
            inside = [o for o in objects if self.place[o] == rest]
            return f"You open the {rest}." + (f" Inside: {', '.join(inside)}." if inside else ""), True
        m = re.fullmatch(r"(.+?) (?:in|into|on) (.+)", rest)
        if verb == "put" and m:
            thing, box = m.groups()
            ok = self.place.get(thing) == "@player" and self._here(box) and obj(box).get("container")
            if not ok or (obj(box).get("openable") and box not in self.opened):
                return "You cannot put that there.", False
            self.place[thing] = box
            return f"You put the {thing} in the {box}.", True
        if verb == "use":
            thing, target = (m.groups() if m else (rest, None))
            if not self._here(thing) or not obj(thing).get("usable") or (target is not None and not self._here(target)):
                return "Nothing happens.", False
            self.used.add((thing,) if target is None else (thing, target))
            return f"You use the {thing}" + (f" on the {target}." if target else "."), True
        return "I do not understand that.", False

    def satisfied(self, fact: dict) -> bool:
        (kind, value), = fact.items()
        if kind == "at":
            return self.room == value
        if kind == "holding":
            return self.place.get(value) == "@player"
        if kind == "in":
            return self.place.get(value[0]) == value[1]
        if kind == "open":
            return value in self.opened
        return (tuple(value) if isinstance(value, list) else (value,)) in self.used

    def progress(self) -> int:
        """Goal facts true now for the first time (counted once each)."""
        new = [f for f in self.spec["goal"] if _key(f) not in self.done and self.satisfied(f)]
        self.done |= {_key(f) for f in new}
        return len(new)

    def score(self) -> float:
        """The share of the goal's facts reached so far."""
        return len(self.done) / len({_key(f) for f in self.spec["goal"]})

    def state(self) -> tuple:
        return (self.room, tuple(sorted(self.place.items())), tuple(sorted(self.opened)), tuple(sorted(self.done)))


def check_game(spec) -> str | None:
    """Why a spec is not a playable game (schema, limits, references, its walkthrough reaching the goal),
    or None."""
    if not isinstance(spec, dict):
        return "a game is a JSON object"
    for key, kind in (("title", str), ("intro", str), ("start", str), ("rooms", dict), ("objects", dict), ("goal", list), ("walkthrough", list)):
        if not isinstance(spec.get(key), kind):
            return f"{key!r} must be a {kind.__name__}"
    rooms, objects = spec["rooms"], spec["objects"]
    for key in ("rooms", "objects", "goal", "walkthrough"):
        if not 1 <= len(spec[key]) <= LIMITS[key]:
            return f"{key!r} must have 1 to {LIMITS[key]} entries"
    if spec["start"] not in rooms:
        return f"start room {spec['start']!r} is not a room"
    for name, r in rooms.items():
        if not isinstance(r, dict) or not isinstance(r.get("description"), str):
            return f"room {name!r} needs a description"
        for d, to in (r.get("exits") or {}).items():
            if d not in DIRECTIONS or to not in rooms:
                return f"room {name!r} has a bad exit {d!r} -> {to!r}"
    for name, o in objects.items():
        if not isinstance(o, dict) or name in rooms or (o.get("room") not in rooms and o.get("inside") not in objects):
            return f"object {name!r} needs a room (or a container it is inside)"
    for fact in spec["goal"]:
        if not isinstance(fact, dict) or len(fact) != 1 or next(iter(fact)) not in ("at", "holding", "in", "open", "used"):
            return f"goal fact {fact!r} must be one of at, holding, in, open, used"
        names = fact[next(iter(fact))]
        names = names if isinstance(names, list) else [names]
        if not all(isinstance(n, str) and (n in objects or n in rooms) for n in names):
            return f"goal fact {fact!r} names something the game does not have"
    game = Game(copy.deepcopy(spec))
    for command in spec["walkthrough"]:
        if not isinstance(command, str):
            return "the walkthrough must be a list of commands"
        game.command(command)
        game.progress()
    return None if game.score() == 1.0 else "its walkthrough does not reach the goal"


@register_env("starling_provisional")
class StarlingEnv:
    """One generated text game per episode, the item's ``game`` spec (module docstring)."""

    tools = None

    def __init__(self, *, max_steps: int = 20):
        if max_steps < 1:
            raise ValueError(f"starling_provisional: max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self.game: Game | None = None
        self.steps = 0

    def reset(self, item: dict, *, seed: int) -> StepResult:
        why = check_game(item.get("game"))
        if why is not None:
            raise ValueError(f"starling_provisional: item {item.get('id')} has no playable game: {why}")
        self.game, self.steps = Game(copy.deepcopy(item["game"])), 0
        intro = f"{item['game']['intro']}\n\n{self.game.describe()}"
        return StepResult([{"role": "system", "content": SYSTEM}, {"role": "user", "content": intro}], anchor=self.game.state())

    def step(self, action: Action) -> StepResult:
        self.steps += 1
        first = (action.text.strip().splitlines() or [""])[0]
        answer, ok = self.game.command(first)
        reward = self.game.progress() / len(self.game.spec["goal"])
        won = self.game.score() == 1.0
        info = {"valid": ok, "success": won}
        return StepResult([] if won else [{"role": "user", "content": answer}], reward, terminated=won,
                          truncated=not won and self.steps >= self.max_steps, anchor=self.game.state(), info=info)  # fmt: skip

    def fork(self) -> StarlingEnv:
        return copy.deepcopy(self)

    def close(self) -> None:
        pass
