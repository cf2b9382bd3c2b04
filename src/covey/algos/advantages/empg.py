"""EMPG: Entropy-Modulated Policy Gradients (step advantages scaled by the step's confidence).

Paper: EMPG, Entropy-Modulated Policy Gradients for long-horizon LLM agents, arXiv 2509.09265
(ByteDance Seed; the full title was not checked). Status: the step entropy, its batch min-max normalisation, g
(Eq. 10, normalised to mean 1) and f (Eq. 11) follow the official pseudocode on the project page
(empgseed-seed.github.io, `compute_empg_advantage(tokenizer, batch, k=1.0, k_f=1.0, zeta=0.1)`); the
final combination A_mod = g(H_t) A_i + zeta f(H_{t+1}) and the zero-mean centring are RECONSTRUCTED
(the part of the pseudocode that was readable stops before them).
"""

from __future__ import annotations

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, groups_of, result
from covey.algos.advantages._steps import step_table, to_tokens, turn_mean
from covey.algos.advantages.grpo import grpo
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["empg", "modulation"]


def modulation(h: torch.Tensor, k: float, k_f: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, f) of step entropies `h` [S]: H_norm = (H - min) / (max - min + 1e-8) over all steps,
    g = exp(-k H_norm) / mean(exp(-k H_norm)) (+1e-8 in the mean), f = exp(-k_f H_norm)."""
    hn = (h - h.min()) / (h.max() - h.min() + 1e-8)
    g = torch.exp(-k * hn)
    return g / (g.mean() + 1e-8), torch.exp(-k_f * hn)


@register_advantage("empg", group_relative=True, requires=("entropies",),
                    paper="Entropy-Modulated Policy Gradients (EMPG; g, f from the official pseudocode, combination RECONSTRUCTED)",
                    arxiv="2509.09265")  # fmt: skip
def empg(batch: Rollouts, *, k: float = 1.0, k_f: float = 1.0, zeta: NonNegFloat = 0.1, eps: NonNegFloat = 1e-6,
         center: bool = True) -> AdvantageResult:  # fmt: skip
    """A_mod(i, t) = g(H_t) * A_i + zeta * f(H_{t+1}) (no bonus on an episode's last step), on the
    step's tokens ([N, T]); H_t = mean sampling entropy of the step's tokens (old policy); A_i = GRPO
    advantage of episode i (eps); center: subtract the mean A_mod over all steps of the batch.
    """
    st = step_table(batch, "empg")
    if batch.entropies is None:
        raise RolloutsError("advantage 'empg' needs Rollouts.entropies (requires=('entropies',))")
    g_rows = groups_of(batch)
    a = grpo(batch.select(st.rows), eps=eps).advantages.to(F64).tolist()  # one outcome advantage per episode
    steps = [(j, t) for j, r in enumerate(st.rewards) for t in range(len(r))]
    if not steps:
        return result("empg", torch.zeros(batch.completion_ids.shape, dtype=F64), batch, g_rows)
    ent = turn_mean(batch, st, batch.entropies)
    h = torch.tensor([ent[j][t] for j, t in steps], dtype=F64)
    g, f = modulation(h, k, k_f)
    index = {st_: s for s, st_ in enumerate(steps)}
    mod = []
    for s, (j, t) in enumerate(steps):
        nxt = index.get((j, t + 1))
        mod.append(float(g[s]) * a[j] + (zeta * float(f[nxt]) if nxt is not None else 0.0))
    mean = sum(mod) / len(mod) if center else 0.0
    values = [[0.0] * len(r) for r in st.rewards]
    for s, (j, t) in enumerate(steps):
        values[j][t] = mod[s] - mean
    return result("empg", to_tokens(batch, st, values), batch, g_rows, metrics={"step_entropy_mean": float(h.mean())})
