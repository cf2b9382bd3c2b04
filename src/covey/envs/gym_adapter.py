"""`gymnasium`: any Gymnasium environment with text observations, as a covey environment.

Optional extra: ``pip install covey[gymnasium]`` (gymnasium pinned in pyproject.toml).

    env: {name: gymnasium, id: FrozenLake-v1, kwargs: {is_slippery: false},
          actions: [left, down, right, up]}

The environment is ``gymnasium.make(id, render_mode="ansi", **kwargs)`` (render_mode only when the
environment offers "ansi"). What the model reads each turn (`observation`):

- ``text``: ``str(obs)`` (the default for a ``spaces.Text`` observation space);
- ``render``: ``env.render()`` in ansi mode (the default otherwise: the toy-text games FrozenLake,
  Taxi, CliffWalking draw their grid this way), colour codes removed and a highlighted cell (the
  agent's, drawn with a background colour) written ``[X]``.

Actions: for a ``spaces.Text`` action space the turn's text (stripped) is the action; for a
``spaces.Discrete(n, start)`` space, with `actions` (n names in index order) the earliest name in the
turn (whole word, any case), without it the first integer in the turn. A turn with no valid action is
not passed to the environment: it gets an error message, ``info["valid"] = False`` and
`invalid_reward` (and counts towards the episode's invalid streak). Other action spaces are refused
when the environment is built.

The anchor (the state without history, for GiGPO/HGPO) is the raw observation when it is an int, a
string or a tuple of them (FrozenLake's cell index, Blackjack's tuple), else the observation text.
``info["success"]`` is the environment's ``info["is_success"]`` / ``info["success"]`` when it gives one,
else "terminated with a positive reward" (FrozenLake's goal, Taxi's drop-off). `reset` uses the item's
``seed`` when it has one (a task of fixed seeds), else the episode group's seed.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Literal

from covey.envs.base import Action, MissingExtra, StepResult, register_env

__all__ = ["GymnasiumEnv"]

_INT = re.compile(r"-?\d+")
_HIGHLIGHT = re.compile(r"\x1b\[4[0-7]m(.*?)\x1b\[0m", re.DOTALL)  # a background colour: the agent's cell
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain_text(ansi: str) -> str:
    """An ansi render as plain text: a highlighted (background-coloured) span becomes ``[span]``, other
    colour codes are dropped."""
    return _ANSI.sub("", _HIGHLIGHT.sub(r"[\1]", ansi))


def _need_gymnasium():
    try:
        import gymnasium
    except ImportError:
        raise MissingExtra("the gymnasium environment needs the gymnasium package: pip install 'covey[gymnasium]'") from None
    return gymnasium


@register_env("gymnasium")
class GymnasiumEnv:
    """A Gymnasium environment (text observations; Text or Discrete actions) driven turn by turn."""

    tools = None

    def __init__(self, *, id: str, kwargs: dict | None = None, actions: list[str] | None = None,
                 observation: Literal["auto", "text", "render"] = "auto", instructions: str | None = None,
                 invalid_reward: float = 0.0):  # fmt: skip
        gym = _need_gymnasium()
        if observation not in ("auto", "text", "render"):
            raise ValueError(f"gymnasium observation must be auto, text or render, got {observation!r}")
        try:
            spec = gym.spec(id)
        except gym.error.Error as e:  # an unknown or deprecated id (with gymnasium's suggestion)
            raise ValueError(f"gymnasium: {e}") from None
        kwargs = dict(kwargs or {})
        modes = _render_modes(spec)
        self.env = gym.make(id, **({"render_mode": "ansi"} if "ansi" in modes else {}), **kwargs)
        space = self.env.action_space
        self.text_actions = isinstance(space, gym.spaces.Text)
        if not self.text_actions and not isinstance(space, gym.spaces.Discrete):
            self.env.close()
            raise ValueError(f"gymnasium: only Text and Discrete action spaces are supported, {id} has {space}")
        if not self.text_actions:
            self.n, self.start = int(space.n), int(space.start)
            if actions is not None and len(actions) != self.n:
                self.env.close()
                raise ValueError(f"gymnasium: {id} has {self.n} actions, `actions` names {len(actions)}")
        self.names = [a.lower() for a in actions] if actions is not None else None
        if observation == "auto":
            observation = "text" if isinstance(self.env.observation_space, gym.spaces.Text) else "render"
        if observation == "render" and "ansi" not in modes:
            self.env.close()
            raise ValueError(f"gymnasium: {id} has no ansi render mode; use observation: text")
        self.observation = observation
        if instructions is None:
            choices = ", ".join(actions) if actions else (
                "text" if self.text_actions else f"an integer from {self.start} to {self.start + self.n - 1}")
            instructions = f"You act in the environment {id}. Reply with one action ({choices})."
        self.instructions = instructions
        self.invalid_reward = float(invalid_reward)
        self.obs: Any = None

    def _text(self, obs) -> str:
        return str(obs) if self.observation == "text" else plain_text(str(self.env.render())).strip("\n")

    def _anchor(self, obs, text: str):
        plain = _plain(obs)
        return plain if plain is not None else text

    def reset(self, item: dict, *, seed: int) -> StepResult:
        seed = int(item["seed"]) if isinstance(item.get("seed"), int) else seed
        self.obs, _ = self.env.reset(seed=seed)
        text = self._text(self.obs)
        return StepResult([{"role": "user", "content": f"{self.instructions}\n\n{text}"}], anchor=self._anchor(self.obs, text))

    def parse(self, text: str):
        """The action named in a turn, or None."""
        if self.text_actions:
            a = text.strip()
            return a if self.env.action_space.contains(a) else None
        if self.names is not None:
            hits = [(m.start(), i) for i, name in enumerate(self.names)
                    for m in [re.search(rf"\b{re.escape(name)}\b", text, re.IGNORECASE)] if m]  # fmt: skip
            return self.start + min(hits)[1] if hits else None
        for m in _INT.finditer(text):
            if self.start <= int(m.group()) < self.start + self.n:
                return int(m.group())
        return None

    def step(self, action: Action) -> StepResult:
        a = self.parse(action.text)
        if a is None:
            text = self._text(self.obs)
            msg = "That is not a valid action. " + self.instructions
            return StepResult([{"role": "user", "content": msg}], self.invalid_reward,
                              anchor=self._anchor(self.obs, text), info={"valid": False, "success": False})  # fmt: skip
        self.obs, reward, terminated, truncated, info = self.env.step(a)
        text = self._text(self.obs)
        success = info.get("is_success", info.get("success", bool(terminated) and float(reward) > 0))
        return StepResult([] if terminated or truncated else [{"role": "user", "content": text}], float(reward),
                          terminated=bool(terminated), truncated=bool(truncated), anchor=self._anchor(self.obs, text),
                          info={"valid": True, "success": bool(success)})  # fmt: skip

    def fork(self) -> GymnasiumEnv:
        """A deep copy of the live environment (Gymnasium's toy-text envs and most pure-Python ones
        copy; one holding a process, a file or a native handle does not: NotImplementedError)."""
        new = copy.copy(self)
        try:
            new.env, new.obs = copy.deepcopy(self.env), copy.deepcopy(self.obs)
        except Exception as e:  # noqa: BLE001 - whatever deepcopy raises, the answer is "cannot fork"
            raise NotImplementedError(f"gymnasium: {self.env.spec.id if self.env.spec else self.env} cannot be forked: "
                                      f"copy.deepcopy of the environment failed ({type(e).__name__}: {e})") from None  # fmt: skip
        return new

    def close(self) -> None:
        self.env.close()


def _plain(x):
    """An int, a str or a tuple of them (numpy scalars unwrapped), else None."""
    if isinstance(x, tuple):
        parts = [_plain(v) for v in x]
        return None if any(p is None for p in parts) else tuple(parts)
    if hasattr(x, "item") and getattr(x, "shape", None) == ():
        x = x.item()
    return x if isinstance(x, (int, str)) and not isinstance(x, bool) else None


def _render_modes(spec) -> list[str]:
    """The render modes the environment class declares (without building it)."""
    from gymnasium.envs.registration import load_env_creator

    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    return list(getattr(creator, "metadata", {}).get("render_modes", []))
