"""prime-intellect `verifiers` environments in covey: the `verifiers` task (its dataset as covey items).

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

import asyncio
import importlib
import json
from typing import Any

from covey.envs.base import MissingExtra
from covey.tasks._common import check_split
from covey.tasks.registry import TaskCaps, register_task

__all__ = ["VerifiersTask", "env_spec", "load_env", "rollout_input"]

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


@register_task("verifiers", caps=TaskCaps(strategy="verifiers"))
class VerifiersTask:
    """A verifiers environment's dataset as covey items (see the module docstring). Params: env, args."""

    name = "verifiers"
    answer_format = "What the verifiers environment's rubric rewards."

    def __init__(self, *, env: str, args: dict | None = None):
        if not isinstance(env, str) or not env:
            raise ValueError(f"verifiers: env must be an environment id or package.module:function, got {env!r}")
        if args is not None and not isinstance(args, dict):
            raise ValueError(f"verifiers: args must be a mapping of the environment's arguments, got {args!r}")
        self.spec = env_spec(env, args or {})
        load_env(self.spec)  # a missing package, a bad id or bad arguments fail now, before any model loads

    @property
    def env(self):
        return load_env(self.spec)

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        data = self.env.get_dataset() if split == "train" else self.env.get_eval_dataset()
        return [{**row, "id": i, "vf_env": self.spec} for i, row in enumerate(data)]

    def reward(self, prompts, completions, **columns) -> list[float]:
        """The rubric's reward of each completion as a one-turn episode."""
        rows = [{k: v[i] for k, v in columns.items()} for i in range(len(completions))]
        return asyncio.run(self._score(prompts, completions, rows))

    async def _score(self, prompts, completions, rows) -> list[float]:
        vf = require_verifiers()
        from covey.envs.verifiers_client import EngineClient

        env, out = self.env, []
        for prompt, completion, row in zip(prompts, completions, rows):
            text = completion if isinstance(completion, str) else completion[-1]["content"]
            state = await env.init_state({**rollout_input(row), "prompt": prompt}, EngineClient(None, None), "covey")
            state["completion"] = [vf.AssistantMessage(content=text)]
            await env.rubric.score_rollout(state)
            out.append(float(state["reward"]))
        return out

    def __getstate__(self) -> dict:  # reward workers get the spec and load the environment themselves
        return {"spec": self.spec}
