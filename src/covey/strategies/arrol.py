"""`arrol`: prune partial rollouts with an online quality head, keeping groups correctness-balanced.

Paper: "Prune as You Generate: Online Rollout Pruning for Faster and Better RLVR" (arrol,
arXiv 2603.24840; code Hsu1023/ARRoL, not read: no code was found there). Notes: docs/rollouts.md.
Only the abstract is confirmed: a lightweight quality head trained on the fly predicts the
success of partial rollouts, rollouts are pruned during generation while steering the survivors to
be correctness-balanced, survivors are re-batched for the update. Everything below is covey's
UNVERIFIED sketch, exposed as options:

    each group is over-provisioned to ceil(oversample * G) completions (forked from one prefill)
    at `check_tokens` generated tokens: features h = the policy's last hidden state at the row's
        last token (prompt + partial completion, one `engine.hidden_states` forward); p = sigmoid(w.h + b)
    per group, while more than G rows remain: if the mean p of the remaining rows >= 0.5 drop the
        row with the highest p (a redundant predicted success), else the lowest (balance)
    survivors decode to the end; the strategy scores the batch and trains the head with a few
        gradient steps of logistic regression on (h, reward > success_threshold)
    until the head has seen `warmup_rows` labelled rows, pruning drops rows at random (seeded)

The head (w, b, rows seen) is in `state_dict()`. Metrics: arrol/pruned_rows, arrol/head_loss,
arrol/head_acc (the head's accuracy on this step's survivors before its update), arrol/pred_pass.
Not done: the paper's test-time reweighting.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch
from torch import Tensor

from covey.engine.base import ForkingEngine, HiddenStatesEngine, Row
from covey.strategies._rows import prompt_ids, rows_to_batch
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.rollouts import Rollouts

__all__ = ["ARRoL", "balanced_keep", "train_head"]


def balanced_keep(p: list[float], keep: int) -> list[int]:
    """Indices (ascending) of the `keep` rows left after dropping, one at a time, the highest-p row
    when the remaining rows' mean p >= 0.5 and the lowest-p row otherwise."""
    alive = list(range(len(p)))
    while len(alive) > keep:
        mean = sum(p[i] for i in alive) / len(alive)
        drop = max(alive, key=lambda i: p[i]) if mean >= 0.5 else min(alive, key=lambda i: p[i])
        alive.remove(drop)
    return alive


def train_head(w: Tensor, b: Tensor, x: Tensor, y: Tensor, *, lr: float, steps: int, l2: float = 1e-3) -> tuple[Tensor, Tensor, float]:
    """Logistic regression by full-batch gradient descent from (w [H], b []): x [M, H], y [M] in {0, 1}.
    Returns the new (w, b) and the final mean BCE."""
    w, b = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    opt = torch.optim.SGD([w, b], lr=lr)
    loss = torch.tensor(0.0)
    with torch.enable_grad():
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y) + l2 * (w * w).sum()
            loss.backward()
            opt.step()
    return w.detach(), b.detach(), float(loss.detach())


@register_strategy("arrol")
class ARRoL:
    """Online rollout pruning with a quality head (see the module docstring)."""

    caps = StrategyCaps(engine_protocols=(ForkingEngine, HiddenStatesEngine))

    def __init__(self, *, oversample: float = 2.0, check_tokens: int = 16, success_threshold: float = 0.5,
                 head_lr: float = 0.5, head_steps: int = 50, warmup_rows: int = 32):  # fmt: skip
        if oversample < 1.0 or check_tokens < 1 or head_steps < 1 or warmup_rows < 0 or head_lr <= 0:
            raise ValueError("arrol: need oversample >= 1, check_tokens >= 1, head_steps >= 1, head_lr > 0, warmup_rows >= 0")
        self.oversample, self.check, self.threshold = float(oversample), int(check_tokens), float(success_threshold)
        self.lr, self.steps, self.warmup = float(head_lr), int(head_steps), int(warmup_rows)
        self.w: Tensor | None = None
        self.b = torch.zeros(())
        self.seen = 0

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sp = ctx.sampling(0)
        sizes = [d.n for d in ctx.draws]
        over = [math.ceil(self.oversample * g) for g in sizes]
        dec = ctx.engine.tree_session(sp)
        dec.add([Row(p, payload=(i, ())) for i, p in enumerate(prompt_ids(ctx.tokenizer, items))])
        index = [i for i, k in enumerate(over) for _ in range(k)]
        dec.fork(index, [(i, (j,)) for i, k in enumerate(over) for j in range(k)])
        done = dec.decode(self.check)
        rows = done + list(dec.rows)
        feats = _features(ctx.engine, rows, self.check)
        if self.w is None:
            self.w = torch.zeros(feats.shape[1])
        p = torch.sigmoid(feats @ self.w + self.b).tolist()
        rng = random.Random(sp.seed)
        kept: set[int] = set()
        for i, g in enumerate(sizes):
            mine = [k for k, r in enumerate(rows) if r.payload[0] == i]
            if self.seen < self.warmup:
                kept.update(sorted(rng.sample(mine, g)))
            else:
                kept.update(mine[j] for j in balanced_keep([p[k] for k in mine], g))
        n_done = len(done)
        live = [k - n_done for k in sorted(kept) if k >= n_done]
        dec.fork(live)
        final = [rows[k] for k in sorted(kept) if k < n_done] + dec.decode(sp.max_new_tokens)
        order = sorted(range(len(final)), key=lambda k: final[k].payload)
        final = [final[k] for k in order]
        fx = {id(r): feats[k] for k, r in enumerate(rows)}
        x = torch.stack([fx[id(r)] for r in final])
        groups = [r.payload[0] for r in final]
        batch = rows_to_batch(final, [items[g] for g in groups], groups, ctx.engine.pad_token_id)
        metrics = dict(ctx.score(batch))
        y = (batch.scalar_rewards() > self.threshold).float()
        prior = torch.sigmoid(x @ self.w + self.b)
        acc = float(((prior >= 0.5).float() == y).float().mean())
        self.w, self.b, loss = train_head(self.w, self.b, x, y, lr=self.lr, steps=self.steps)
        self.seen += len(final)
        metrics.update({"arrol/pruned_rows": float(len(rows) - len(final)), "arrol/head_loss": loss,
                        "arrol/head_acc": acc, "arrol/pred_pass": float(prior.mean())})  # fmt: skip
        return batch, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"w": self.w, "b": self.b, "seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.w, self.b, self.seen = state.get("w"), state.get("b", torch.zeros(())), int(state.get("seen", 0))


def _features(engine: HiddenStatesEngine, rows: list[Row], upto: int) -> Tensor:
    """[R, H] float32: the policy's last hidden state (after the final norm; `engine.hidden_states`)
    at each row's last token of prompt + the first `upto` completion tokens, scaled to unit norm."""
    h = torch.stack([x[-1] for x in engine.hidden_states([r.prompt + r.tokens[:upto] for r in rows])]).float()
    return h / h.norm(dim=-1, keepdim=True).clamp_min(1e-6)  # unit rows: the head's step size is scale-free
