"""The preference mode's learn stage: a `Learner` whose update trains a preference loss on pairs
built from the step's scored groups instead of an advantage-weighted surrogate.

    pairs    = PAIRS[preference.pairs](scalar rewards, group, generator)
    loss     = mean over units of PREFERENCE_LOSSES[preference.loss](PrefInputs)

Everything else is the RL learner's: the log-prob forward (with prompt sharing), micro-batches that
keep groups whole (pairs never cross a group, so accumulated gradients equal the one-batch
gradient), gradient clipping, the optimizer and its schedule. Log-probs are those of the model's own
distribution (temperature 1), as TRL's DPO trainers compute them; the reference log-probs come from
the trainer (`ref_logprobs`), those of a guidance model (TGDPO) from `guide`.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import Tensor

from covey.learner.learner import Learner, _wmean, peak_memory_gb, to_device
from covey.preference.losses import PREFERENCE_LOSSES, PrefInputs
from covey.preference.pairs import PAIRS, explore_rows
from covey.rollouts import Rollouts

__all__ = ["PreferenceLearner", "load_guide"]


class PreferenceLearner(Learner):
    def __init__(self, *args, preference, guide: torch.nn.Module | None = None, **kwargs):
        kwargs["temperature"] = 1.0
        kwargs["recompute_old_logprobs"] = "never"  # no pi_old in a preference loss
        super().__init__(*args, **kwargs)
        self.loss = PREFERENCE_LOSSES.get(preference.loss.name).bind(preference.loss.params)
        self.pairs = PAIRS.get(preference.pairs.name).bind(preference.pairs.params)
        self.guide = guide

    def update(self, batch: Rollouts, generator: torch.Generator) -> dict[str, float]:
        """`epochs` x `mini_batches` optimizer steps on the pairs of a scored batch; returns metrics."""
        if batch.rewards is None or batch.ref_logprobs is None:
            raise ValueError("preference learner: the batch needs rewards and ref_logprobs")
        pairs = self.pairs(batch, generator)
        out: dict[str, float] = {f"pref/{k}": v for k, v in pairs.metrics.items()}
        groups = self._unit_groups(batch, pairs)
        if not groups:  # no group holds a preference: nothing to learn this step
            out["pref/units"] = 0.0
            return out
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        weights: dict[str, float] = defaultdict(float)
        for _ in range(self.epochs):
            order = torch.randperm(len(groups), generator=generator).tolist()
            for part in torch.tensor(order).chunk(self.mini_batches):
                stats = self._pref_step(batch, pairs, [groups[i] for i in part.tolist()])
                for k, (v, w) in stats.items():
                    sums[k] += v * w
                    weights[k] += w
        self.model.eval()
        out.update({k: sums[k] / weights[k] for k in sums if weights[k] > 0})
        out["memory/peak_gb"] = peak_memory_gb(self.device)
        return out

    def _unit_groups(self, batch: Rollouts, pairs) -> list[list[int]]:
        """Row lists of the groups that hold a unit (a pair, or preferred and other rows)."""
        rows_of: dict[int, list[int]] = {}
        for i, g in enumerate(batch.group.tolist()):
            rows_of.setdefault(g, []).append(i)
        used = {int(batch.group[i]) for i in pairs.chosen}
        pref = pairs.preferred
        for g, rows in rows_of.items():
            if any(pref[i] for i in rows) and not all(pref[i] for i in rows):
                used.add(g)
        return [rows for g, rows in rows_of.items() if g in used]

    def _pref_step(self, batch: Rollouts, pairs, groups: list[list[int]]) -> dict[str, tuple[float, float]]:
        """One optimizer step over `groups`: micro-batches of whole groups, the loss of each unit
        divided by the number of units of the mini-batch (so micro-batches add up)."""
        size = self.micro_batch_size or sum(len(g) for g in groups)
        micro: list[list[int]] = [[]]
        for rows in groups:
            if micro[-1] and len(micro[-1]) + len(rows) > size:
                micro.append([])
            micro[-1].extend(rows)
        parts = [self._inputs(batch, pairs, rows) for rows in micro]
        units_total = self._count_units(parts)
        self.optimizer.zero_grad(set_to_none=True)
        stats: dict[str, tuple[float, float]] = {}
        loss_total = 0.0
        for sub, local in parts:
            loss_u, metrics = self.loss(self._forward(sub, local))
            if loss_u.numel() == 0:
                continue
            loss = loss_u.sum() / units_total
            loss.backward()
            loss_total += float(loss.detach())
            n = float(loss_u.numel())
            for k, v in metrics.items():
                key = f"pref/{k}"
                stats[key] = (float(v), n) if key not in stats else _wmean(stats[key], float(v), n)
        grad_norm = self._clip()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        stats["learn/loss"] = (loss_total, 1.0)
        stats["learn/grad_norm"] = (grad_norm, 1.0)
        stats["learn/lr"] = (self.optimizer.param_groups[0]["lr"], 1.0)
        stats["pref/units"] = (float(units_total), 1.0)
        return stats

    def _inputs(self, batch: Rollouts, pairs, rows: list[int]) -> tuple[Rollouts, dict]:
        """The micro-batch's rows and its pairs in local row numbers."""
        local = {r: i for i, r in enumerate(rows)}
        chosen = [local[c] for c, r in zip(pairs.chosen, pairs.rejected) if c in local and r in local]
        rejected = [local[r] for c, r in zip(pairs.chosen, pairs.rejected) if c in local and r in local]
        sub = batch.select(rows)
        return sub, {"chosen": chosen, "rejected": rejected, "preferred": [pairs.preferred[r] for r in rows],
                     "explore": explore_rows(sub)}  # fmt: skip

    def _count_units(self, parts) -> int:
        """Units of the mini-batch: pairs, or groups with preferred and other rows (set losses)."""
        n = sum(len(local["chosen"]) for _, local in parts)
        if n:
            return n
        count = 0
        for sub, local in parts:
            seen: dict[int, set] = defaultdict(set)
            for g, p in zip(sub.group.tolist(), local["preferred"]):
                seen[g].add(bool(p))
            count += sum(len(v) == 2 for v in seen.values())
        return max(count, 1)

    def _forward(self, sub: Rollouts, local: dict) -> PrefInputs:
        micro = to_device(sub, self.device)
        logp, _ = self.logprobs(self.model, micro)
        mask = micro.completion_mask
        guide = None
        if self.guide is not None:
            with torch.no_grad():
                guide = self.logprobs(self.guide, micro)[0].float() * mask
        long = lambda xs: torch.tensor(xs, dtype=torch.long, device=mask.device)  # noqa: E731
        return PrefInputs(
            logp=logp.float() * mask, ref_logp=micro.ref_logprobs * mask, mask=mask,
            chosen=long(local["chosen"]), rejected=long(local["rejected"]), group=micro.group,
            preferred=torch.tensor(local["preferred"], dtype=torch.bool, device=mask.device), guide_logp=guide,
            explore=torch.tensor(local["explore"], dtype=torch.bool, device=mask.device) if any(local["explore"]) else None,
        )  # fmt: skip



def load_guide(preference, policy: torch.nn.Module, device) -> torch.nn.Module | None:
    """TGDPO's frozen guidance model on `device` (None when the loss reads none). It scores the
    policy's token ids, so its vocabulary must be the policy's."""
    if preference.guide_model is None:
        return None
    from covey.models import load as load_model

    model, _ = load_model(preference.guide_model)
    want, got = policy.get_output_embeddings().weight.shape[0], model.get_output_embeddings().weight.shape[0]
    if want != got:
        raise ValueError(f"preference.guide_model {preference.guide_model!r} has a vocabulary of {got} tokens, "
                         f"the policy {want}: the guidance model must share the policy's tokenizer")  # fmt: skip
    return model.float().to(device).eval().requires_grad_(False)
