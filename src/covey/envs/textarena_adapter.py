"""`textarena`: TextArena games (https://github.com/LeonGuertler/TextArena) as covey environments.

Optional extra: ``pip install covey[textarena]`` (textarena pinned in pyproject.toml).

    env: {name: textarena, game: GuessTheNumber-v0}                        # a single-player game
    env: {name: textarena, game: TicTacToe-v0, num_players: 2, opponent: mypkg.bots:first_free}

The game is ``textarena.make(game)`` with TextArena's observation/action wrappers removed (they
re-render the whole history as one string every turn; covey keeps the conversation itself): each
turn the model's player gets the game's new messages since its last turn (its own echoed action
left out) as one user message, and the turn's text is the action (most games read a ``[move]`` in
it). With `num_players` > 1 the model plays `player` and the others are played by `opponent`, an
import path ``module:function`` of ``f(observation: str) -> str`` called on their turns inside
`step` (no network agents).

Reward: the model's player's entry of TextArena's final rewards (0 on the turns before the end).
``info["success"]`` = that reward >= 1 (a solved puzzle or a won game in TextArena's convention);
``info["valid"] = False`` when the game answered the turn with its "attempted an invalid move"
message. The anchor is ``repr`` of the game's ``state.game_state`` (the board, the guesses so far).

TextArena seeds Python's global `random` in `reset` and draws from it during the game; covey keeps
one `random` state per environment and swaps it in around each call under a lock, so concurrent
episodes neither disturb each other nor the trainer's global `random`.
"""

from __future__ import annotations

import copy
import random
import threading

from covey.envs.base import Action, MissingExtra, StepResult, register_env
from covey.registry import import_object

__all__ = ["TextArenaEnv"]

_RANDOM = threading.Lock()


def _need_textarena():
    try:
        import textarena
    except ImportError:
        raise MissingExtra("the textarena environment needs the textarena package: pip install 'covey[textarena]'") from None
    return textarena


def _load(path: str):
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"textarena opponent must be an import path 'module:function', got {path!r}")
    return import_object(path, "textarena opponent")


@register_env("textarena")
class TextArenaEnv:
    """A TextArena game; the model plays `player`, `opponent` the others."""

    tools = None

    def __init__(self, *, game: str, num_players: int = 1, player: int = 0, opponent: str | None = None,
                 kwargs: dict | None = None):  # fmt: skip
        ta = _need_textarena()
        if num_players < 1 or not 0 <= player < num_players:
            raise ValueError(f"textarena: need num_players >= 1 and 0 <= player < num_players, got {num_players}, {player}")
        if num_players > 1 and opponent is None:
            raise ValueError(f"textarena: {game} with {num_players} players needs an `opponent` (module:function)")
        self.opponent = _load(opponent) if opponent is not None else None
        self.ta, self.game, self.num_players, self.player = ta, game, num_players, player
        env = ta.make(game, **(kwargs or {}))  # ValueError for an unknown game
        while isinstance(env, ta.Wrapper):
            env = env.env
        self.env = env
        self.rng: object = None  # this game's `random` state between calls

    def _call(self, fn, *args, seed: bool = False):
        """`fn(*args)` with this environment's `random` state swapped in (`seed`: reset seeds it)."""
        with _RANDOM:
            saved = random.getstate()
            try:
                if not seed:
                    random.setstate(self.rng)
                out = fn(*args)
                self.rng = random.getstate()
            finally:
                random.setstate(saved)
        return out

    def _observe(self) -> tuple[int, str]:
        """(whose turn, the new messages for that player as one text), own echoed actions left out."""
        pid, obs = self._call(self.env.get_observation)
        kind = self.ta.ObservationType.PLAYER_ACTION
        parts = [msg for src, msg, typ in obs if not (typ == kind and src == pid)]
        return pid, "\n".join(p.strip() for p in parts if p.strip())

    def _anchor(self) -> str:
        return repr(getattr(self.env.state, "game_state", None))

    def _advance(self) -> tuple[bool, str]:
        """Play the opponents until it is the model's turn or the game ends; (done, the model's text)."""
        done, texts = bool(self.env.state.done), []
        while not done:
            pid, text = self._observe()
            if pid == self.player:
                texts.append(text)
                break
            done, _ = self._call(self.env.step, str(self.opponent(text)))
        return done, "\n".join(t for t in texts if t)

    def reset(self, item: dict, *, seed: int) -> StepResult:
        self._call(self.env.reset, self.num_players, seed, seed=True)
        done, text = self._advance()
        if done:
            raise RuntimeError(f"textarena: {self.game} ended before the model's first turn")
        return StepResult([{"role": "user", "content": text}], anchor=self._anchor())

    def step(self, action: Action) -> StepResult:
        done, _ = self._call(self.env.step, action.text)
        if not done:
            done, text = self._advance()
        if done:
            rewards, _ = self._call(self.env.close)
            reward = float((rewards or {}).get(self.player, 0.0))
            return StepResult([], reward, terminated=True, anchor=self._anchor(), info={"success": reward >= 1.0})
        invalid = "attempted an invalid move" in text
        return StepResult([{"role": "user", "content": text}], 0.0, anchor=self._anchor(),
                          info={"valid": not invalid, "success": False})  # fmt: skip

    def fork(self) -> TextArenaEnv:
        """A deep copy of the live game (its state and its `random` state); NotImplementedError when
        the game cannot be deep-copied."""
        new = copy.copy(self)
        try:
            new.env = copy.deepcopy(self.env)
        except Exception as e:  # noqa: BLE001 - whatever deepcopy raises, the answer is "cannot fork"
            raise NotImplementedError(f"textarena: {self.game} cannot be forked: copy.deepcopy of the game failed "
                                      f"({type(e).__name__}: {e})") from None  # fmt: skip
        return new

    def close(self) -> None:
        pass
