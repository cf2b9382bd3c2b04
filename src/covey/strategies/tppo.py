"""`tppo`: truncated rollouts in fixed windows with Extended GAE (T-PPO).

Paper: "Truncated Proximal Policy Optimization" (arXiv 2506.15050). Status ABSTRACT + SECONDARY
(EGAE as standard GAE with a bootstrap at the cut, window sizes UNVERIFIED); notes: docs/rollouts.md.

Per step (successive batching: the batch of in-flight responses stays full):

    in flight = responses carried from the last step + G new responses per prompt for the free slots
        (prompts the trainer handed over but that found no slot wait in a queue, saved in state_dict)
    every in-flight response decodes `window_tokens` more tokens (one `TreeDecoder` pass)
    finished responses are scored; per token of THIS window, EGAE (`covey.algos.advantages.egae`)
        with V from a value head, bootstrapped with V(s_L) for unfinished responses
    the batch: every response of this window, its earlier tokens kept as completion tokens but
        masked out (the policy loss covers this window's tokens only, the paper's "filtering of prompt
        and truncated tokens"); unfinished responses go back in flight
    value head: trained only on COMPLETED responses, Monte-Carlo targets gamma^(L-1-t) R

The value model is a linear head on the policy's hidden states (`engine.hidden_states`: one forward
per response per step, of the weights the engine holds), fitted by ridge regression on running
statistics, not a critic network: a CPU-scale stand-in for T-PPO's value model (documented
choice). Pick `algo.advantage: tppo`. Rewards of unfinished rows are 0 in the batch (they have none yet); `tppo/finished_reward` is the
mean over finished responses. State (in-flight rows, queue, value head) is in `state_dict()`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from covey.algos.advantages.egae import egae
from covey.engine.base import ForkingEngine, HiddenStatesEngine, Row
from covey.strategies._rows import prompt_ids, rows_to_batch
from covey.engine.carry import row_from, row_state
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.rollouts import Rollouts

__all__ = ["TPPO"]


@register_strategy("tppo")
class TPPO:
    """Truncated PPO rollouts with Extended GAE (see the module docstring).

    window_tokens: tokens decoded per response per step.
    gamma, lam:    discount and GAE lambda (spec: 1.0 and ~0.95, UNVERIFIED).
    ridge, decay:  the value head is ridge regression on decayed running statistics (X'X, X'y) of
                   completed responses' states; `decay` per step weights older steps down.
    """

    # unfinished responses go on in the next step, their earlier windows masked out (the async bound holds);
    # each row is its own group
    caps = StrategyCaps(engine_protocols=(ForkingEngine, HiddenStatesEngine), carries_rollouts=True,
                        trains_carried_tokens=False, provides=("tppo_advantages", "single_rows"))

    def __init__(self, *, window_tokens: int = 16, gamma: float = 1.0, lam: float = 0.95, ridge: float = 1.0,
                 decay: float = 0.9):  # fmt: skip
        if window_tokens < 1 or ridge <= 0 or not (0 <= decay <= 1 and 0 < gamma <= 1 and 0 <= lam <= 1):
            raise ValueError("tppo: need window_tokens >= 1, ridge > 0, 0 <= decay <= 1, 0 < gamma <= 1, 0 <= lam <= 1")
        self.window, self.gamma, self.lam, self.ridge, self.decay = window_tokens, gamma, lam, ridge, decay
        self.xtx: Tensor | None = None  # [H+1, H+1] running X'X of (features, 1)
        self.xty: Tensor | None = None
        self.inflight: list[dict] = []  # {"item": dict, "row": Row}
        self.queue: list[dict] = []
        self.capacity = 0
        self.w: Tensor | None = None
        self.b = torch.zeros(())

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sizes = [d.n for d in ctx.draws]
        self.capacity = self.capacity or sum(sizes)
        self.queue += [{"item": it, "n": n} for it, n in zip(items, sizes)]
        slots = []
        while self.queue and len(self.inflight) + len(slots) + self.queue[0]["n"] <= self.capacity:
            slots.append(self.queue.pop(0))
        sp = ctx.sampling(0)
        dec = ctx.engine.tree_session(sp)
        carried = [x["row"] for x in self.inflight]
        for k, x in enumerate(self.inflight):
            x["row"].payload = k
        dec.add(carried)
        entries = list(self.inflight)
        fresh = prompt_ids(ctx.tokenizer, [s["item"] for s in slots])
        n0 = len(dec)
        dec.add([Row(p, payload=None) for p in fresh])
        index, payloads = list(range(n0)), list(range(n0))
        for j, s in enumerate(slots):
            for _ in range(s["n"]):
                payloads.append(len(entries))
                index.append(n0 + j)
                entries.append({"item": s["item"], "row": None})
        dec.fork(index, payloads)
        start = {x["row"].payload: len(x["row"].tokens) for x in self.inflight}
        finished = dec.decode(self.window)
        rows = sorted(finished + dec.take(), key=lambda r: r.payload)
        for r in rows:
            entries[r.payload]["row"] = r
        done = [r.finish_reason is not None for r in rows]
        its = [entries[r.payload]["item"] for r in rows]
        full = rows_to_batch(rows, its, list(range(len(rows))), ctx.engine.pad_token_id)
        metrics: dict[str, float] = {}
        fin = [k for k, d in enumerate(done) if d]
        sub = full.select(fin) if fin else full  # nothing finished: score all once for the reward columns
        metrics.update(ctx.score(sub))
        reward = torch.zeros(len(rows), sub.rewards.shape[1])
        if fin:
            reward[fin] = sub.rewards
        full.reward_names, full.reward_weights = sub.reward_names, sub.reward_weights
        scalar = reward @ (full.reward_weights if full.reward_weights is not None else torch.ones(reward.shape[1]))
        hidden = ctx.engine.hidden_states([r.prompt + r.tokens for r in rows])  # per row [P + L, H]
        if self.w is None:
            self.w = torch.zeros(hidden[0].shape[1])
        adv = torch.zeros_like(full.completion_mask)
        mask = torch.zeros_like(full.completion_mask)
        for k, r in enumerate(rows):
            s0, L, p = start.get(r.payload, 0), len(r.tokens), len(r.prompt)
            v = hidden[k][p - 1 + s0 : p + L] @ self.w + self.b  # V(s_t), t = s0 .. L
            adv[k, s0:L] = egae(v, float(scalar[k]), done[k], gamma=self.gamma, lam=self.lam).float()
            mask[k, s0:L] = 1.0
        full.completion_mask, full.rewards = mask, reward
        full.token_advantages = adv
        value_loss = self._fit_value([hidden[k] for k in fin], [rows[k] for k in fin], [float(scalar[k]) for k in fin])
        self.inflight = [entries[r.payload] for r, d in zip(rows, done) if not d]
        for x in self.inflight:
            x["row"].payload = None
        metrics.update({
            "tppo/finished": float(len(fin)), "tppo/inflight": float(len(self.inflight)), "tppo/queued": float(len(self.queue)),
            "tppo/finished_reward": float(scalar[fin].mean()) if fin else 0.0, "tppo/value_loss": value_loss,
        })  # fmt: skip
        return full, metrics

    def _fit_value(self, hidden: list[Tensor], rows: list[Row], rewards: list[float]) -> float:
        """Ridge regression of the linear value head on completed responses (MC targets
        gamma^(L-1-t) R), on running statistics decayed by `decay` each step; returns the head's
        mean squared error on this step's completed states (before refitting)."""
        if not rows:
            return 0.0
        xs, ys = [], []
        for h, r, R in zip(hidden, rows, rewards):
            p, L = len(r.prompt), len(r.tokens)
            xs.append(h[p - 1 : p - 1 + L])
            ys.append(torch.tensor([self.gamma ** (L - 1 - t) * R for t in range(L)]))
        x, y = torch.cat(xs).double(), torch.cat(ys).double()
        err = float(((x.float() @ self.w + self.b - y.float()) ** 2).mean())
        xa = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
        if self.xtx is None:
            self.xtx, self.xty = torch.zeros(xa.shape[1], xa.shape[1], dtype=x.dtype), torch.zeros(xa.shape[1], dtype=x.dtype)
        self.xtx = self.decay * self.xtx + xa.T @ xa
        self.xty = self.decay * self.xty + xa.T @ y
        sol = torch.linalg.solve(self.xtx + self.ridge * torch.eye(xa.shape[1], dtype=x.dtype), self.xty)
        self.w, self.b = sol[:-1].float(), sol[-1].float()
        return err

    def state_dict(self) -> dict[str, Any]:
        return {"inflight": [{"item": x["item"], "row": row_state(x["row"])} for x in self.inflight],
                "queue": list(self.queue), "capacity": self.capacity, "w": self.w, "b": self.b,
                "xtx": self.xtx, "xty": self.xty}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inflight = [{"item": x["item"], "row": row_from(x["row"])} for x in state.get("inflight", [])]
        self.queue, self.capacity = list(state.get("queue", [])), int(state.get("capacity", 0))
        self.w, self.b = state.get("w"), state.get("b", torch.zeros(()))
        self.xtx, self.xty = state.get("xtx"), state.get("xty")

