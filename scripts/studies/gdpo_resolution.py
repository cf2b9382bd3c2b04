"""GDPO's claim (arXiv 2601.05242, Fig. 2): normalising the SUM of several rewards in a group (GRPO)
maps distinct reward combinations to the same advantages; normalising each reward in the group first
(GDPO) keeps more of them apart. Counts the distinct advantage groups over every group of G rollouts
with K binary rewards, through covey's own `grpo` and `gdpo` estimators (docs/studies.md).

    PYTHONPATH=src python scripts/studies/gdpo_resolution.py [--out docs/img/gdpo_resolution.png]

All configurations go into ONE batch (one group each), so GDPO's batch whitening is a single affine map
and does not merge or split groups; a group is its multiset of reward vectors, its advantage group the
sorted (reward vector, advantage) pairs with the reward vectors dropped, rounded to 1e-6.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch

from covey.algos import ADVANTAGES
from covey.rollouts import Rollouts


def batch(groups: list[tuple[tuple[int, ...], ...]], summed: bool) -> Rollouts:
    rows = [r for g in groups for r in g]
    r = torch.tensor([[float(sum(x))] if summed else [float(v) for v in x] for x in rows])
    gid = torch.tensor([i for i, g in enumerate(groups) for _ in g])
    n = len(rows)
    return Rollouts(prompt_ids=[torch.tensor([1, 2])] * n, completion_ids=torch.arange(n)[:, None] + 10,
                    completion_mask=torch.ones(n, 1), behaviour_logprobs=-torch.ones(n, 1), group=gid, prompt_id=gid,
                    rewards=r, reward_names=("r",) if summed else tuple(f"r{k}" for k in range(r.shape[1])))


def distinct(groups, name: str) -> int:
    adv = ADVANTAGES[name].bind({})(batch(groups, summed=(name == "grpo"))).advantages.double()
    out, i = set(), 0
    for g in groups:
        out.add(tuple(sorted(round(float(a), 6) for a in adv[i : i + len(g)])))
        i += len(g)
    return len(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="PNG of the counts")
    a = ap.parse_args()
    rows = []
    for k in (2, 3):
        vectors = list(itertools.product((0, 1), repeat=k))
        for g in (2, 3, 4, 6, 8):
            groups = [c for c in itertools.combinations_with_replacement(vectors, g) if len(set(map(sum, c))) > 1 or len(set(c)) > 1]
            rows.append({"rewards": k, "G": g, "groups": len(groups), "grpo": distinct(groups, "grpo"), "gdpo": distinct(groups, "gdpo")})
            print(json.dumps(rows[-1]))
    if a.out:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        for ax, k in zip(axes, (2, 3)):
            sel = [r for r in rows if r["rewards"] == k]
            for name in ("grpo", "gdpo"):
                ax.plot([r["G"] for r in sel], [r[name] for r in sel], marker="o", label=name)
            ax.set(title=f"{k} binary rewards", xlabel="rollouts per group G", ylabel="distinct advantage groups", yscale="log")
            ax.legend()
        fig.tight_layout()
        fig.savefig(a.out, dpi=100)


if __name__ == "__main__":
    main()
