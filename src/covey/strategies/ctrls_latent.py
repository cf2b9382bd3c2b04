"""`ctrls_latent`: reasoning steps each preceded by a latent action of the `ctrls_provisional` objective.

For every row the completion is `steps` segments of `step_tokens` tokens (0: max_new_tokens / steps). Before
segment t the engine reads the frozen LM's last hidden state of the context (prompt + the row's tokens so far,
`HiddenStatesEngine`), the objective (`RolloutContext.objective`) picks a latent action for it, and the segment is
generated with the action's vector as an input after the context (`SoftThinkingEngine.generate_soft(lead=...)`,
ordinary tokens). A row that stops (EOS) stops its episode. Each row's item records its transitions
(``ctrls``: states [m, H], actions [m]) for the objective. arXiv 2507.08182 (reconstructed: docs/algorithms.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.engine.base import HiddenStatesEngine, SoftThinkingEngine
from covey.models import apply_chat
from covey.rollouts import Rollouts
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["CTRLSLatent"]


@register_strategy("ctrls_latent", paper="CTRLS: Chain-of-Thought Reasoning via Latent State-Transition", arxiv="2507.08182")
class CTRLSLatent:
    """Latent-action-steered reasoning segments (module docstring). steps: segments per row; step_tokens: their length."""

    caps = StrategyCaps(engine_protocols=(SoftThinkingEngine, HiddenStatesEngine), objective="ctrls_provisional")

    def __init__(self, *, steps: int = 2, step_tokens: int = 0):
        if steps < 1 or step_tokens < 0:
            raise ValueError(f"ctrls_latent: steps must be >= 1 and step_tokens >= 0 (got {steps}, {step_tokens})")
        self.steps, self.step_tokens = steps, step_tokens

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        obj, tok, eng = ctx.objective, ctx.tokenizer, ctx.engine
        if obj is None or not hasattr(obj, "act"):
            raise ValueError("ctrls_latent needs algo.objective ctrls_provisional")
        sp = ctx.sampling(0)
        seg = self.step_tokens or max(1, sp.max_new_tokens // self.steps)
        prompts, owner = [], []
        for g, d in enumerate(ctx.draws):
            p = list(apply_chat(tok, d.item["prompt"]))
            prompts += [p] * d.n
            owner += [g] * d.n
        rows = len(prompts)
        tokens = [[] for _ in range(rows)]
        logps = [[] for _ in range(rows)]
        states, actions = [[] for _ in range(rows)], [[] for _ in range(rows)]
        alive = list(range(rows))
        stopped = [False] * rows
        for t in range(self.steps):
            if not alive:
                break
            budget = min(seg, sp.max_new_tokens - max(len(tokens[i]) for i in alive))
            if budget < 1:
                break
            ctxs = [prompts[i] + tokens[i] for i in alive]
            s = torch.stack([h[-1] for h in eng.hidden_states(ctxs)])
            a = obj.act(s)
            gen, _, _ = eng.generate_soft(ctxs, 1, dataclasses.replace(sp, max_new_tokens=budget, seed=(sp.seed or 0) + t), None,
                                          lead=obj.latent_vectors(a))  # fmt: skip
            for j, i in enumerate(alive):
                k = int(gen.completion_mask[j].sum())
                tokens[i] += gen.completion_ids[j, :k].tolist()
                logps[i] += gen.logprobs[j, :k].tolist()
                states[i].append(s[j])
                actions[i].append(int(a[j]))
                stopped[i] = gen.finish_reason[j] == "stop"
            alive = [i for i in alive if not stopped[i]]
        t_max = max(1, max(len(x) for x in tokens))
        ids = torch.full((rows, t_max), eng.pad_token_id, dtype=torch.long)
        mask, lp = torch.zeros(rows, t_max), torch.zeros(rows, t_max)
        for i, (x, l) in enumerate(zip(tokens, logps)):
            ids[i, : len(x)], mask[i, : len(x)], lp[i, : len(x)] = torch.tensor(x, dtype=torch.long), 1.0, torch.tensor(l)
        row_items = [{**ctx.draws[owner[i]].item, "ctrls": {"states": torch.stack(states[i]), "actions": torch.tensor(actions[i])}}
                     for i in range(rows)]  # fmt: skip
        batch = Rollouts(prompt_ids=[torch.tensor(p, dtype=torch.long) for p in prompts], completion_ids=ids, completion_mask=mask,
                         behaviour_logprobs=lp, group=torch.tensor(owner, dtype=torch.long),
                         prompt_id=torch.tensor([int(it["id"]) for it in row_items]),
                         finish_reason=["stop" if s_ else "length" for s_ in stopped], items=row_items).validate()  # fmt: skip
        return batch, {"ctrls/transitions_mean": sum(len(a_) for a_ in actions) / rows}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
