"""`textarena_selfplay`: a TextArena game whose every player is a role of one policy (covey.envs.roles).

    env: {name: textarena_selfplay, game: TicTacToe-v0, num_players: 2}
    rollout: {strategy: {name: selfplay}}                       # both players trained (MARS self-play)
    rollout: {strategy: {name: selfplay, frozen_roles: [player_1]}}   # against a frozen snapshot

The game is the `textarena` adapter's (covey.envs.textarena_adapter: wrappers removed, a per-game
`random` state): roles ``player_0 .. player_{n-1}``, one conversation each, ``info["agent"]`` the
player whose turn it is. Each turn the player gets the game's new messages since its last turn (its
own echoed action left out; TextArena's prompt says which player it is, the role prompt). When the
game ends, each player's final TextArena reward goes to its last turn: the mover's as `reward`, the
others' through ``info["rewards"]`` (MARS credits the opponent's last turn the same way,
thu-nics/MARSHAL ``env_manager._log_env_state``). ``info["success"]`` = the mover's reward >= 1; a turn
TextArena answers with "attempted an invalid move" is invalid (TextArena lets the player retry, then
ends the game against it). Playing against a fixed opponent function instead is the `textarena` env's
``opponent``.
"""

from __future__ import annotations

from covey.envs.base import Action, StepResult, register_env
from covey.envs.textarena_adapter import TextArenaEnv

__all__ = ["TextArenaGame"]


@register_env("textarena_selfplay")
class TextArenaGame(TextArenaEnv):
    """A TextArena game of `num_players` (>= 2) players, each a role."""

    def __init__(self, *, game: str, num_players: int = 2, kwargs: dict | None = None):
        if num_players < 2:
            raise ValueError(f"textarena_selfplay: a game of roles needs num_players >= 2, got {num_players} "
                             "(the textarena env plays one-player games)")  # fmt: skip
        super().__init__(game=game, kwargs=kwargs)  # one player while building: TextArena takes the count at reset
        self.num_players = num_players
        self.roles = tuple(f"player_{i}" for i in range(num_players))

    def reset(self, item: dict, *, seed: int) -> StepResult:
        self._call(self.env.reset, self.num_players, seed, seed=True)
        pid, text = self._observe()
        return StepResult([{"role": "user", "content": text}], anchor=self._anchor(), info={"agent": pid})

    def step(self, action: Action) -> StepResult:
        mover = self.env.state.current_player_id
        done, _ = self._call(self.env.step, action.text)
        if done:
            rewards, _ = self._call(self.env.close)
            rewards = {int(p): float(r) for p, r in (rewards or {}).items()}
            mine = rewards.get(mover, 0.0)
            others = {self.roles[p]: r for p, r in rewards.items() if p != mover and p < self.num_players}
            return StepResult([], mine, terminated=True, anchor=self._anchor(),
                              info={"agent": mover, "rewards": others, "success": mine >= 1.0})  # fmt: skip
        pid, text = self._observe()
        invalid = pid == mover and "attempted an invalid move" in text
        return StepResult([{"role": "user", "content": text}], 0.0, anchor=self._anchor(),
                          info={"agent": pid, "valid": not invalid, "success": False})  # fmt: skip
