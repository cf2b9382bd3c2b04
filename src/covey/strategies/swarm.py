"""`swarm`: SAPO's swarm sharing (Gensyn, "Sharing is Caring", arXiv 2509.08721), a strategy
wrapped around another one. Not covey's `sapo` surrogate (soft adaptive policy optimization).

Several learners (each its own `covey train`, model and optimizer) train side by side and share
**decoded** rollouts, never weights or gradients. Each step a learner

1. generates its own groups with the inner strategy (the *local* rollouts, I groups);
2. publishes them as text (the item, the G completion strings, their finish reasons) to a Ray actor
   `covey-swarm-<swarm>` (namespace `covey`, detached: learners may come and go), replacing its
   previous publication;
3. takes J *external* groups from the other learners' latest publications, uniformly at random
   among the groups with a local group size (rl-swarm keeps only payloads with `num_generations`
   completions), all of them when fewer are there;
4. re-encodes them with its own tokenizer (prompt through its chat template, completion text plus
   EOS when it stopped) and trains on local + external groups. The trainer scores the external rows
   with the local rewards, and the learner recomputes pi_old with its own weights for the whole
   batch (`recompute_old_logprobs`): another model's sampling log-probs are unknown, so external
   rows are trained as if sampled now (rl-swarm's GRPO trainer does the same). Their behaviour
   log-probs are 0 and their `policy_version` is the current one; a correction (`algo.correction`)
   is refused with `swarm`.

Checked against gensyn-ai/rl-swarm @ 116c92bd509537ac4091bdd8220307201f3ab231,
`rgym_exp/src/data.py` (`transplant_trees`: candidates from agents other than this one whose payload
has `num_generations` completions, `random.sample` of `num_transplant_trees`, all when fewer) and
`rgym_exp/config/rg-swarm.yaml` (`num_train_samples: 2`, `num_transplant_trees: 2`, so one external
group per local one; the paper's best split is 4 local / 4 external). covey's default `external:
null` takes as many external groups as local ones (the 1:1 mix). The exchange goes through a Ray
actor instead of rl-swarm's hivemind DHT; there is no round barrier (SAPO is asynchronous: a learner
takes what the others last published, nothing when none has).

Several learners on one machine or a cluster: `ray start --head`, then each learner with
`RAY_ADDRESS=<head>:6379 covey train ... rollout.strategy='{name: swarm, swarm: demo}'`. Without an
address a learner starts a private local Ray and only shares with learners in its own process.
"""

from __future__ import annotations

import os
import random
import uuid
from typing import Any

import torch

from covey.models import apply_chat
from covey.rollouts import Rollouts
from covey.strategies.base import STRATEGIES, RolloutContext, StrategyCaps, register_strategy
from covey.strategies.group import completion_texts

__all__ = ["SwarmSharing", "external_rollouts"]


def _hub(swarm: str):
    import ray

    @ray.remote(num_cpus=0)
    class SwarmHub:
        """The latest publication of every learner: node -> (step, groups)."""

        def __init__(self):
            self.latest: dict[str, tuple[int, list]] = {}

        def publish(self, node: str, step: int, groups: list) -> int:
            self.latest[node] = (step, groups)
            return len(self.latest)

        def others(self, node: str) -> dict[str, tuple[int, list]]:
            return {n: v for n, v in self.latest.items() if n != node}

    return SwarmHub.options(name=f"covey-swarm-{swarm}", namespace="covey", get_if_exists=True,
                            lifetime="detached").remote()  # fmt: skip


def external_rollouts(groups: list[dict], tokenizer, *, max_new_tokens: int, version: int, first_group: int,
                      with_versions: bool) -> Rollouts:  # fmt: skip
    """Rows for shared groups ({"item", "completions", "finish"}), re-encoded with `tokenizer`:
    the item's prompt through the chat template, each completion's text (plus EOS when it
    stopped), at most `max_new_tokens`; group ids from `first_group` on; behaviour log-probs 0."""
    eos = tokenizer.eos_token_id
    prompts, rows, finish, items, group = [], [], [], [], []
    for g, shared in enumerate(groups):
        prompt = torch.tensor(apply_chat(tokenizer, shared["item"]["prompt"]), dtype=torch.long)
        for text, reason in zip(shared["completions"], shared["finish"]):
            ids = list(tokenizer.encode(text, add_special_tokens=False))
            if reason == "stop" and eos is not None:
                ids.append(int(eos))
            ids = ids[:max_new_tokens] or [int(eos if eos is not None else 0)]
            prompts.append(prompt.clone())
            rows.append(ids)
            finish.append(reason)
            items.append(shared["item"])
            group.append(first_group + g)
    t = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    completion = torch.full((len(rows), t), int(pad), dtype=torch.long)
    mask = torch.zeros(len(rows), t)
    for i, ids in enumerate(rows):
        completion[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[i, : len(ids)] = 1.0
    return Rollouts(
        prompt_ids=prompts,
        completion_ids=completion,
        completion_mask=mask,
        behaviour_logprobs=torch.zeros(len(rows), t),
        group=torch.tensor(group, dtype=torch.long),
        prompt_id=torch.tensor([int(it["id"]) for it in items], dtype=torch.long),
        finish_reason=finish,
        policy_version=(mask > 0).long() * int(version) if with_versions else None,
        items=items,
        recompute_old_logprobs=True,
    ).validate()


@register_strategy("swarm")
class SwarmSharing:
    """Local groups of `inner` plus `external` groups shared by the other learners of `swarm`.

    swarm:        the swarm's name (learners with the same name share).
    node:         this learner's name in the swarm (default: random per run).
    external:     J, external groups per step (default null: as many as local groups, the 1:1 mix).
    inner:        the strategy that makes the local groups (name or import path), inner_params its
                  parameters.
    timeout_s:    the longest a call to the swarm actor may take (one-line error after).
    """

    @staticmethod
    def inner_strategy(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return params.get("inner", "group"), params.get("inner_params") or {}

    caps = StrategyCaps(inner=inner_strategy, needs_ray=True, foreign_rows=True)

    def __init__(self, *, swarm: str = "covey", node: str | None = None, external: int | None = None,
                 inner: str = "group", inner_params: dict[str, Any] | None = None, timeout_s: float = 60.0):  # fmt: skip
        if external is not None and external < 0:
            raise ValueError(f"external must be >= 0 (external groups per step), got {external}")
        if inner == "swarm":
            raise ValueError("swarm cannot wrap itself; give inner: group (or another strategy)")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.inner = STRATEGIES.build(inner, inner_params or {})
        self.swarm, self.node = swarm, node or uuid.uuid4().hex[:8]
        self.external, self.timeout_s = external, float(timeout_s)
        self._actor = None

    def _call(self, method: str, *args):
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        if self._actor is None:
            if not ray.is_initialized():
                ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
            self._actor = _hub(self.swarm)
        try:
            return ray.get(getattr(self._actor, method).remote(*args), timeout=self.timeout_s)
        except GetTimeoutError:
            raise RuntimeError(f"swarm actor 'covey-swarm-{self.swarm}': {method} took longer than timeout_s={self.timeout_s:g} s") from None
        except RayActorError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise RuntimeError(f"swarm actor 'covey-swarm-{self.swarm}' died during {method}: {first}") from None

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        local, metrics = self.inner.rollout(items, ctx)
        metrics = dict(metrics)
        texts = completion_texts(ctx.tokenizer, local)
        rows: dict[int, list[int]] = {}
        for i, g in enumerate(local.group.tolist()):
            rows.setdefault(g, []).append(i)
        finish = local.finish_reason or ["length"] * len(local)
        shared = [{"item": local.items[r[0]], "completions": [texts[i] for i in r], "finish": [finish[i] for i in r]}
                  for r in rows.values()]  # fmt: skip
        peers = self._call("publish", self.node, int(ctx.step), shared) - 1
        sizes = {len(r) for r in rows.values()}
        pool = [g for _, (_, groups) in sorted(self._call("others", self.node).items()) for g in groups
                if len(g["completions"]) in sizes]  # fmt: skip
        want = len(rows) if self.external is None else self.external
        taken = random.Random(f"{self.node}:{ctx.step}").sample(pool, min(want, len(pool)))
        metrics.update({"swarm/peers": float(peers), "swarm/available_groups": float(len(pool)),
                        "swarm/external_groups": float(len(taken)), "swarm/local_groups": float(len(rows))})  # fmt: skip
        local.recompute_old_logprobs = True  # the batch is one: pi_old recomputed for every row
        if not taken:
            return local, metrics
        ext = external_rollouts(taken, ctx.tokenizer, max_new_tokens=ctx.sampling(0).max_new_tokens,
                                version=ctx.policy_version, first_group=int(local.group.max()) + 1,
                                with_versions=local.policy_version is not None)  # fmt: skip
        if local.rewards is not None:  # the inner strategy scored its batch: score the external rows too
            for k, v in ctx.score(ext).items():
                metrics[f"swarm/external_{k}"] = v
        local.entropies = None  # unknown for external rows
        return Rollouts.concat([local, ext]), metrics

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state.get("inner", {}))
