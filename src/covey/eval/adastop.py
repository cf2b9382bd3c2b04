"""AdaStop: a sequential permutation test to compare agents over seeds (Mathieu et al., arXiv 2306.10882).

Checked against the released code: TimotheeMathieu/adastop `adastop/compare_agents.py`
(`MultipleAgentsComparator.compute_mean_diffs` and `.partial_compare`, commit 0229e4e76e48, the
PyPI 0.1.3 variant: admissible boundary with ``level_spent + tail <= clevel``, early accept with
`beta`), re-expressed as one pure function that replays the interims from the scores (the random
permutations come from ``numpy.random.RandomState(seed)`` drawn in the reference's order, so the
same seed gives the reference's boundaries). Per interim k (each agent in an undecided comparison
has scores for blocks 0..k of `n` seeds):

* statistic of comparison (a, b): ``T = (k+1) * |mean(Z_a[:(k+1)n]) - mean(Z_b[:(k+1)n])|``;
* permutation paths: at k = 0 every split of the 2n pooled scores when ``B > C(2n, n)`` (else the
  identity and B-1 random splits), value = mean(group 1) - mean(group 2); at k > 0 the paths whose
  max |value| over the comparisons exceeded the last boundary are dropped, and each survivor is
  extended with every split of block k (``B > C(2n, n)^(k+1)``) or with one random split;
* boundary (linear alpha spending, ``clevel = alpha (k+1) / K``): over the sorted max-over-comparisons
  values, the smallest v whose tail ``#larger / normalization`` plus the level spent is <= clevel;
* step-down: while the largest T of the undecided comparisons exceeds the boundary, decide it
  ("larger" when mean(a) > mean(b), else "smaller") and recompute over the rest; with ``beta > 0``
  a smallest T under the lower boundary is accepted ("equal") early; at k = K-1 the rest are "equal".
"""

from __future__ import annotations

import itertools
import math

import numpy as np

__all__ = ["adastop"]


def _split_means(z: np.ndarray, perms) -> list[tuple[float, float]]:
    """(mean of group 1, mean of group 2) per split; callers add them as the reference does,
    ``prev + m1 - m2`` left to right (the float rounding decides ties at a boundary)."""
    out = []
    for perm in perms:
        mask = np.zeros(len(z), dtype=bool)
        mask[list(perm)] = True
        out.append((np.mean(z[mask]), np.mean(z[~mask])))
    return out


def adastop(
    scores: dict[str, list[float]],
    *,
    n: int = 5,
    K: int = 5,
    B: int = 10000,
    alpha: float = 0.05,
    beta: float = 0.0,
    seed: int | None = 0,
    compare_to_first: bool = False,
) -> dict:
    """Run AdaStop's interims on `scores` (agent -> its scores in seed order) as far as they go.

    Interim k needs (k+1)*n scores of every agent in a still undecided comparison; the replay stops
    at the first interim that lacks them. Returns ``{"decisions": {"a vs b": "larger" | "smaller" |
    "equal" | "continue"}, "interims": [{"k", "boundary", "boundary_low", "level_spent", "T",
    "decided"}], "finished", "need_more": {agent: seeds it must reach for the next interim},
    "n_iters": {agent: scores used}}``. Defaults: the adastop CLI's (n 5, K 5, B 10000, alpha 0.05).
    """
    names = list(scores)
    if len(names) < 2:
        raise ValueError("AdaStop compares at least two agents")
    if n < 1 or K < 1 or B < 1 or not 0 < alpha < 1 or not 0 <= beta < 1:
        raise ValueError(f"need n, K, B >= 1, 0 < alpha < 1, 0 <= beta < 1; got n={n}, K={K}, B={B}, alpha={alpha}, beta={beta}")
    Z = [np.asarray(scores[a], dtype=float) for a in names]
    comps = [(0, j) for j in range(1, len(names))] if compare_to_first else list(itertools.combinations(range(len(names)), 2))
    key = {c: f"{names[c[0]]} vs {names[c[1]]}" for c in comps}
    decisions = {c: "continue" for c in comps}
    rng = np.random.RandomState(seed)
    n_perm = math.comb(2 * n, n)
    tracked = list(comps)  # comparisons still undecided at the start of an interim
    diffs: dict = {}
    level_spent = power_spent = 0.0
    boundary_sup = np.inf
    interims = []
    used = {a: 0 for a in names}
    k = 0
    while k < K and tracked:
        need = (k + 1) * n
        short = {names[i]: need for c in tracked for i in c if len(Z[i]) < need}
        if short:
            return _result(key, decisions, interims, used, need_more=short)
        # permutation paths (compute_mean_diffs)
        if k == 0:
            for c in tracked:
                z = np.concatenate([Z[c[0]][:n], Z[c[1]][:n]])
                if B > n_perm:
                    perms, normalization = itertools.combinations(range(2 * n), n), n_perm
                else:
                    perms, normalization = [np.arange(n)] + [rng.permutation(2 * n)[:n] for _ in range(B - 1)], B
                diffs[c] = [m1 - m2 for m1, m2 in _split_means(z, perms)]
        else:
            paths = len(diffs[tracked[0]])
            keep = [i for i in range(paths) if max(abs(diffs[c][i]) for c in diffs) <= boundary_sup]
            diffs = {c: [diffs[c][i] for i in keep] for c in diffs}
            for c in tracked:
                z = np.concatenate([Z[c[0]][k * n : (k + 1) * n], Z[c[1]][k * n : (k + 1) * n]])
                if B > n_perm ** (k + 1):  # every block-k split for every surviving path
                    block = _split_means(z, itertools.combinations(range(2 * n), n))
                    diffs[c] = [prev + m1 - m2 for m1, m2 in block for prev in diffs[c]]
                    normalization = n_perm ** (k + 1)
                else:  # one random split per path (the first the identity)
                    block = _split_means(z, [np.arange(n)] + [rng.permutation(2 * n)[:n] for _ in range(len(keep) - 1)])
                    diffs[c] = [prev + m1 - m2 for prev, (m1, m2) in zip(diffs[c], block)]
                    normalization = n_perm ** np.floor(np.log(B) / np.log(n_perm))
        # boundaries and step-down (partial_compare)
        clevel, dlevel = alpha * (k + 1) / K, beta * (k + 1) / K
        open_ = list(tracked)
        stat = {c: (k + 1) * (Z[c[0]][: (k + 1) * n].mean() - Z[c[1]][: (k + 1) * n].mean()) for c in tracked}
        decided = []
        for _ in range(len(tracked)):
            values = np.sort([max(diffs[c][i] for c in open_) for i in range(len(diffs[open_[0]]))])
            tail = np.arange(len(values))[::-1] / normalization  # P(T > t)
            ok = level_spent + tail <= clevel
            bk_sup, level_add = (values[ok][0], tail[ok][0]) if ok.any() else (np.inf, 0.0)
            head = np.arange(len(values)) / normalization  # P(T < t)
            ok_inf = power_spent + head < dlevel
            if ok_inf.any():
                bk_inf, power_add = values[ok_inf][-1], head[power_spent + head <= dlevel][-1]
            else:
                bk_inf, power_add = -np.inf, 0.0
            t_abs = {c: abs(stat[c]) for c in open_}
            cmax = max(open_, key=lambda c: t_abs[c])  # first of the largest, as the reference's strict >
            cmin = min(open_, key=lambda c: t_abs[c])
            if t_abs[cmax] > bk_sup:
                decisions[cmax] = "larger" if stat[cmax] > 0 else "smaller"
                open_.remove(cmax)
                decided.append(cmax)
            elif t_abs[cmin] < bk_inf:
                decisions[cmin] = "equal"
                open_.remove(cmin)
                decided.append(cmin)
            else:
                break
        boundary_sup = bk_sup
        level_spent += level_add
        power_spent += power_add
        if k == K - 1:
            decisions = {c: ("equal" if d == "continue" else d) for c, d in decisions.items()}
        for i, z in enumerate(Z):
            used[names[i]] = min(len(z), (k + 1) * n) if any(i in c for c in tracked) else used[names[i]]
        interims.append({"k": k, "boundary": float(bk_sup), "boundary_low": float(bk_inf), "level_spent": float(level_spent),
                         "T": {key[c]: float(abs(stat[c])) for c in tracked}, "decided": [key[c] for c in decided]})  # fmt: skip
        # the reference keeps the paths of the comparisons open at the last step-down pass
        diffs = {c: diffs[c] for c in (open_ if open_ else decided[-1:])}
        tracked = [c for c in tracked if decisions[c] == "continue"]
        k += 1
    return _result(key, decisions, interims, used, need_more={})


def _result(key, decisions, interims, used, need_more) -> dict:
    return {
        "decisions": {key[c]: d for c, d in decisions.items()},
        "interims": interims,
        "finished": all(d != "continue" for d in decisions.values()),
        "need_more": need_more,
        "n_iters": used,
    }
