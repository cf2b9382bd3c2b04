"""Held-out evaluation of a multi-turn agent: run episodes (greedy by default) in the environment.

With an ``env:`` in the config, `eval.size` items of the eval split are played as episodes (one per
item, the training run's `episodes` settings: max_turns, limits, layout) instead of being scored by
the task's single-turn verifier. An episode is solved when its environment reported
``info["success"]`` true (environments that never report success: when its return is >= 1).
Episodes that failed (env_error, env_timeout) count as unsolved.
"""

from __future__ import annotations

from collections.abc import Callable

from covey.engine.base import Engine, SamplingParams
from covey.samplers import Draw
from covey.strategies.base import RolloutContext

__all__ = ["evaluate_episodes"]


def evaluate_episodes(engine: Engine, tokenizer, strategy, items: list[dict], *, temperature: float = 0.0,
                      max_new_tokens: int = 64, seed: int = 0, batch_prompts: int = 64,
                      progress: Callable[[int], None] | None = None) -> dict[str, float]:  # fmt: skip
    """{"accuracy": solved episodes / episodes, "episodes": n, "return_mean", "length_mean" (turns of the
    episodes that did not fail), "failed"} over one episode per item. `strategy` is an `Episodes`."""
    greedy = temperature == 0
    solved = returns = turns = failed = 0.0
    for start in range(0, len(items), batch_prompts):
        chunk = items[start : start + batch_prompts]

        def sampling(r: int, s=seed + start) -> SamplingParams:
            return SamplingParams(temperature=1.0 if greedy else temperature, greedy=greedy, max_new_tokens=max_new_tokens,
                                  seed=s + 100_003 * r)  # fmt: skip

        ctx = RolloutContext(engine=engine, tokenizer=tokenizer, draws=[Draw(it, 1) for it in chunk], sampling=sampling,
                             score=_no_scoring, draw=_no_refill)  # fmt: skip
        batch, m = strategy.rollout(chunk, ctx)
        failed += m.get("episodes/failed", 0.0)
        seen = set()
        for i, e in enumerate(batch.episode.tolist() if len(batch) else []):
            if e in seen:
                continue
            seen.add(e)
            ret, ok = float(batch.rewards[i, 0]), batch.items[i]["episode_success"]
            solved += float(ok if ok is not None else ret >= 1.0)
            returns += ret
            turns += len(batch.step_rewards[i])
        if progress is not None:
            progress(start + len(chunk))
    n, kept = len(items), len(items) - failed
    return {"accuracy": solved / max(n, 1), "episodes": float(n), "failed": failed,
            "return_mean": returns / max(kept, 1), "length_mean": turns / max(kept, 1)}  # fmt: skip


def _no_scoring(batch):
    raise RuntimeError("episodes are scored by their environment")


def _no_refill(k):
    raise RuntimeError("an evaluation draws no more prompts")
