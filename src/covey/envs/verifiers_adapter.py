"""prime-intellect `verifiers` environments in covey: loading them (the `verifiers` task, its dataset as
covey items, is `covey.tasks.verifiers`).

A verifiers environment owns its episode loop (it asks a model client for each turn, steps itself,
and scores the episode with its rubric), so it is not a covey `Env` (reset/step): covey runs it
with the `verifiers` rollout strategy (`covey.strategies.verifiers_rollout`), which gives it covey's
engine as its client (`covey.envs.verifiers_client.EngineClient`). This module loads environments
and turns their datasets into covey items:

    task: {name: verifiers, params: {env: <id or package.module:function>, args: {...}}}
    rollout: {strategy: {name: verifiers}}

`env` is a verifiers environment id installed as a package (``vf.load_environment(id, **args)``,
e.g. one from ``prime env install``) or an import path ``package.module:function`` called with
``**args`` (``covey.envs.verifiers_example:load_environment`` is a tiny local one). Train items come
from the environment's dataset, test items from its eval dataset (verifiers falls back to the train
dataset when it has none). Each item is the dataset row (prompt messages, answer, info, ...) plus
covey's ``id`` and ``vf_env`` (the environment's spec, so the strategy finds the environment).

The task's verifier (`reward`, used by held-out evaluation and single-turn strategies) scores one
completion with the environment's rubric as a one-turn episode: exact for single-turn environments,
a first-turn-only score for multi-turn ones (their training reward is the whole episode's).

Checked against verifiers 0.3.1 (the classic `verifiers.legacy` stack that prime-rl's orchestrator
drives; verifiers 0.4 keeps only the `v1` harness stack, which runs agents behind an interception
server and pins openai<3). Needs ``pip install 'covey[verifiers]'`` (verifiers==0.3.1).
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from covey.envs.base import MissingExtra

__all__ = ["env_spec", "load_env", "require_verifiers", "rollout_input"]

_ENVS: dict[str, Any] = {}  # spec -> loaded environment (one per process)
_COVEY_KEYS = ("id", "vf_env")


def require_verifiers():
    try:
        import verifiers
    except ImportError:
        raise MissingExtra("verifiers environments need the verifiers package: pip install 'covey[verifiers]'") from None
    return verifiers


def env_spec(env: str, args: dict) -> str:
    return json.dumps({"env": env, "args": args}, sort_keys=True)


def load_env(spec: str):
    """The verifiers environment of a spec (`env_spec`), loaded once per process."""
    if spec not in _ENVS:
        vf = require_verifiers()
        d = json.loads(spec)
        env, args = d["env"], d["args"]
        if ":" in env:
            module, _, name = env.partition(":")
            try:
                factory = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError) as e:
                raise ValueError(f"verifiers env {env!r}: cannot import it ({type(e).__name__}: {e})") from None
            out = factory(**args)
        else:
            try:
                out = vf.load_environment(env, **args)
            except (ImportError, AttributeError) as e:
                raise ValueError(f"verifiers env {env!r} is not installed as a package ({e}); give an import path "
                                 "package.module:load_environment for a local one") from None  # fmt: skip
        if not isinstance(out, vf.MultiTurnEnv):
            raise ValueError(f"verifiers env {env!r} is a {type(out).__name__}: covey runs verifiers MultiTurnEnv "
                             "environments (SingleTurnEnv, ToolEnv, StatefulToolEnv, ... are MultiTurnEnvs)")  # fmt: skip
        _ENVS[spec] = out
    return _ENVS[spec]


def rollout_input(item: dict) -> dict:
    """The verifiers `RolloutInput` of a covey item: the dataset row without covey's keys."""
    return {k: v for k, v in item.items() if k not in _COVEY_KEYS}
