"""Games: environments whose episodes several roles play, one conversation (thread) each.

A game environment is an `Env` (covey.envs.base) that declares its roles and says, after every step,
who acts next. The `selfplay` rollout strategy (covey.strategies.selfplay) plays it: one policy plays
every role, each role in its own conversation that opens with the role's own prompt; roles named in
`frozen_roles` are played by a frozen snapshot of the policy (the run's starting weights) and never
trained. What a game env adds to the `Env` protocol:

    roles: tuple[str, ...]          # the role names; info["agent"] is an index into them. A class
                                    # attribute, or set by the constructor when it depends on params.

and in the `info` of every `step`'s StepResult (`reset`'s: only ``agent``, whose own conversation opens):

    info["agent"]    int            # the role that acts next (0 when absent)
    info["thread"]   hashable       # the conversation of that role that goes on (default: the role's
                                    # name, one conversation per role); an id not seen before opens a
                                    # new conversation (M-GRPO's sub-agent calls, SSP's solver attempts)
    info["rewards"]  {thread: x}    # credits to other conversations at this step (the loser of a game,
                                    # a sub-agent paid by the main agent's outcome), each added to that
                                    # conversation's last turn (a role that never acted has none: dropped);
                                    # `reward` goes to the conversation that acted
    info["group"]    "game"         # read when a conversation opens: its GRPO group is the other
                                    # conversations of its role in the same game (SSP's solver attempts
                                    # on one proposed question); default: the role's conversations in all
                                    # games of the item (the G episodes of a group)

`StepResult.messages` go to the conversation that acts next (for a new one: its first messages). Each
conversation is one training row (one row per turn with layout per_step), its rewards are its own, and
its rows form a group with the same role's rows only: a group-relative estimator normalises each role
by itself. An env without `roles` is a one-role game (``roles = ("agent",)``).
"""

from __future__ import annotations

from collections.abc import Iterable

from covey.envs.base import ENVS

__all__ = ["ONE_ROLE", "check_role_names", "env_roles"]

ONE_ROLE = ("agent",)


def _valid(roles) -> bool:
    return isinstance(roles, tuple) and bool(roles) and all(isinstance(r, str) and r for r in roles) and len(set(roles)) == len(roles)


def env_roles(name: str, params: dict) -> tuple[str, ...]:
    """The roles environment `name` declares with `params`: its class attribute `roles`, else (roles
    that depend on the parameters) those of an instance built and closed here; ``("agent",)`` when it
    declares none. ValueError when the declaration is not a tuple of distinct non-empty names."""
    roles = getattr(ENVS.get(name).fn, "roles", None)
    if not isinstance(roles, tuple):
        env = ENVS.build(name, params)
        try:
            roles = getattr(env, "roles", None)
        finally:
            env.close()
    if roles is None:
        return ONE_ROLE
    if not _valid(roles):
        raise ValueError(f"environment {name!r} declares roles {roles!r}: they must be a tuple of distinct non-empty names")
    return roles


def check_role_names(env: str, roles: tuple[str, ...], names: Iterable[str], key: str) -> None:
    """ValueError (one line) naming `key` when one of `names` is not a role of environment `env`."""
    for n in names:
        if n not in roles:
            raise ValueError(f"{key}: {n!r} is not a role of environment {env!r} (its roles: {', '.join(roles)})")
