"""`sol_rl_provisional`: Sol-RL's two stages for LLM rollouts: a large low-precision candidate pool, then
the most contrastive candidates regenerated in full precision and trained on.

Paper: "FP4 Explore, BF16 Train: Diffusion Reinforcement Learning via Efficient Rollout Scaling"
(Sol-RL, arXiv 2604.06916; project page). RECONSTRUCTED: no code was found (searched); the abstract and
the project page give the mechanism for diffusion models: NVFP4 rollouts make a pool of candidates per
prompt (96), the best-K and worst-K by reward (12 + 12) are regenerated in BF16 from the same initial
noise (the seed fixes an ODE sample's outcome, so the low-precision reward ranks the regenerations) and
the policy trains on those only. covey's LLM reading:

    per prompt with group size G: pool = pool_factor x G candidates from the engine (quantized: int8 on
        the CPU, fp8 on a CUDA device with fp8 matmuls; `engine.quantize`), scored by the run's rewards
    keep the `best` highest and the `worst` lowest scalar rewards (best + worst = G by default G/2 each;
        ties by pool order; a pool row is kept at most once)
    regenerate the kept rows on the unquantized weights with the same sampling uniforms (the LLM
        counterpart of the same noise: a row repeats its low-precision tokens until the two precisions
        first pick differently), score the regenerations and train on them: behaviour log-probs are then
        the full-precision policy's, so no importance correction is needed
    an engine without quantization samples the pool at full precision already: the rows are kept as
        sampled (the selective-training baseline of the paper, no regeneration)

Metrics: sol_rl/pool_reward_mean, sol_rl/kept_reward_mean (low precision), sol_rl/regen_reward_mean,
sol_rl/regen_identical (kept rows whose regeneration has the same tokens), sol_rl/rank_agree (kept rows
whose regenerated reward stays on their side of the pool median: the ranking the pool gave held).
"""

from __future__ import annotations

from typing import Any

import torch

from covey.engine.base import RegeneratingEngine
from covey.rollouts import Rollouts
from covey.samplers.groups import apply_chat
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["SolRL", "contrastive_rows"]


def contrastive_rows(rewards: list[float], best: int, worst: int) -> list[int]:
    """Indices of the `best` highest and the `worst` lowest rewards (stable: earlier rows first on ties),
    best first then worst, no index twice (a pool smaller than best + worst is an error)."""
    if best + worst > len(rewards):
        raise ValueError(f"sol_rl: keeping {best} + {worst} rows needs a pool of at least that many, got {len(rewards)}")
    order = sorted(range(len(rewards)), key=lambda i: (-rewards[i], i))
    top = order[:best]
    low = [i for i in sorted(range(len(rewards)), key=lambda i: (rewards[i], i)) if i not in top][:worst]
    return top + low


@register_strategy("sol_rl_provisional")
class SolRL:
    """Sol-RL's explore-in-low-precision, train-on-full-precision rollouts (see the module docstring).

    pool_factor: candidates per prompt as a multiple of the group size (the paper: 96 for 24 kept, 4).
    best: rows kept from the top of the pool (None: half the group size, rounded up); the rest of the
        group comes from the bottom.
    """

    caps = StrategyCaps(engine_protocols=(RegeneratingEngine,))

    def __init__(self, *, pool_factor: int = 4, best: int | None = None):
        if isinstance(pool_factor, bool) or not isinstance(pool_factor, int) or pool_factor < 1:
            raise ValueError(f"sol_rl_provisional: pool_factor must be an integer >= 1, got {pool_factor!r}")
        if best is not None and best < 0:
            raise ValueError(f"sol_rl_provisional: best must be >= 0, got {best}")
        self.pool_factor, self.best = pool_factor, best

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        engine, tok, draws = ctx.engine, ctx.tokenizer, ctx.draws
        sp = ctx.sampling(0)
        if sp.seed is None and not sp.greedy:
            raise ValueError("sol_rl_provisional: the sampling has no seed, so kept rows cannot be regenerated with the same uniforms")
        prompts = [apply_chat(tok, d.item["prompt"]) for d in draws]
        parts, metrics = [], {}
        pool_r, kept_r, regen_r, same, agree = [], [], [], [], []
        for g_size in sorted({d.n for d in draws}):
            idx = [i for i, d in enumerate(draws) if d.n == g_size]
            best = (g_size + 1) // 2 if self.best is None else self.best
            if best > g_size:
                raise ValueError(f"sol_rl_provisional: best={best} exceeds the group size {g_size}")
            n = self.pool_factor * g_size
            sub = [prompts[i] for i in idx]
            gen = engine.generate(sub, n, sp)
            pool = Rollouts.from_generation(gen, group=torch.tensor(idx)[gen.prompt_index],
                                            items=[draws[idx[int(p)]].item for p in gen.prompt_index.tolist()])  # fmt: skip
            ctx.score(pool)
            r = pool.scalar_rewards().tolist()
            pool_r += r
            rows = []
            for j in range(len(idx)):
                mine = r[j * n : (j + 1) * n]
                rows += [j * n + k for k in contrastive_rows(mine, best, g_size - best)]
            kept_r += [r[k] for k in rows]
            if engine.low_precision:
                regen = engine.regenerate(sub, n, sp, rows)
                out = Rollouts.from_generation(regen, group=torch.tensor(idx)[regen.prompt_index],
                                               items=[draws[idx[int(p)]].item for p in regen.prompt_index.tolist()])  # fmt: skip
                ctx.score(out)
                rr = out.scalar_rewards().tolist()
                regen_r += rr
                lo_len, hi_len = pool.lengths[rows].tolist(), out.lengths.tolist()
                for a, (k, ln) in enumerate(zip(rows, hi_len)):
                    same.append(float(lo_len[a] == ln and torch.equal(pool.completion_ids[k, :ln], out.completion_ids[a, :ln])))
                    grp = r[(k // n) * n : (k // n + 1) * n]
                    med = sorted(grp)[len(grp) // 2]
                    agree.append(float((r[k] >= med) == (rr[a] >= med)))
            else:
                out = pool.select(torch.tensor(rows))
            parts.append(out)
        batch = Rollouts.concat(parts) if len(parts) > 1 else parts[0]
        batch = batch.select(torch.argsort(batch.group, stable=True))
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        metrics.update({"sol_rl/pool_reward_mean": mean(pool_r), "sol_rl/kept_reward_mean": mean(kept_r),
                        "sol_rl/regen_reward_mean": mean(regen_r) if regen_r else mean(kept_r),
                        "sol_rl/regen_identical": mean(same) if same else 1.0, "sol_rl/rank_agree": mean(agree) if agree else 1.0,
                        "sol_rl/regenerated": float(len(regen_r))})  # fmt: skip
        return batch, metrics

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

