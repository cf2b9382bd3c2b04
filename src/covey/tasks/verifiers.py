"""The `verifiers` task: a prime-intellect verifiers environment's dataset as covey items, scored by its
rubric as one-turn episodes (`covey.envs.verifiers_adapter` loads the environments; the
`verifiers` rollout strategy runs their episodes)."""

from __future__ import annotations

import asyncio

from covey.envs.verifiers_adapter import env_spec, load_env, require_verifiers, rollout_input
from covey.tasks._common import check_split
from covey.tasks.registry import TaskCaps, register_task

__all__ = ["VerifiersTask"]


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
