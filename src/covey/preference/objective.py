"""The preference mode's objective: the learner's update trains a preference loss on pairs built
from the step's scored groups instead of an advantage-weighted surrogate.

    pairs    = PAIRS[preference.pairs](scalar rewards, group, generator)
    loss     = mean over units of PREFERENCE_LOSSES[preference.loss](PrefInputs)

Everything else is the learner's one path (`covey.learner.learner`): the log-prob forward (with
prompt sharing), gradient clipping, the optimizer and its schedule. The rows trained are those of the
groups that hold a unit (a pair, or preferred and other rows for a set loss); mini-batches are a
random order of those groups and micro-batches keep groups whole (pairs never cross a group, so
accumulated gradients equal the one-batch gradient). Log-probs are those of the model's own
distribution (temperature 1), as TRL's DPO trainers compute them; the reference log-probs come from
the trainer (`ref_logprobs`), those of a guidance model (TGDPO) from `guide`.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import Tensor

from covey.learner.objective import Objective, Step
from covey.preference.losses import PREFERENCE_LOSSES, PrefInputs
from covey.preference.pairs import PAIRS, explore_rows
from covey.rollouts import Rollouts

__all__ = ["PreferenceLoss", "load_guide"]


class PreferenceLoss(Objective):
    """The preference loss of `preference.loss` on the pairs of `preference.pairs` (module docstring)."""

    requires = frozenset({"ref_logprobs"})
    uses_advantages = False
    temperature = 1.0

    def __init__(self, preference, guide: torch.nn.Module | None = None):
        self.loss_fn = PREFERENCE_LOSSES.get(preference.loss.name).bind(preference.loss.params)
        self.pairs = PAIRS.get(preference.pairs.name).bind(preference.pairs.params)
        self.guide = guide
        self._groups: list[list[int]] = []
        self._pairs: list[tuple[int, int]] = []
        self._units = 0

    def prepare(self, learner, batch: Rollouts, generator) -> tuple[Rollouts | None, dict[str, Tensor], dict[str, float]]:
        if batch.rewards is None or batch.ref_logprobs is None:
            raise ValueError("preference learner: the batch needs rewards and ref_logprobs")
        pairs = self.pairs(batch, generator)
        out: dict[str, float] = {f"pref/{k}": v for k, v in pairs.metrics.items()}
        self._groups = _unit_groups(batch, pairs)
        if not self._groups:  # no group holds a preference: nothing to learn this step
            out["pref/units"] = 0.0
            return None, {}, out
        self._pairs = list(zip(pairs.chosen, pairs.rejected))
        extra = {"row": torch.arange(len(batch)), "preferred": torch.tensor(pairs.preferred, dtype=torch.bool)}
        return batch, extra, out

    def mini_batches(self, learner, batch: Rollouts, generator) -> list[Tensor]:
        """A random order of the unit groups, cut into `mini_batches` parts (rows group after group)."""
        order = torch.randperm(len(self._groups), generator=generator).tolist()
        return [torch.tensor([r for i in part.tolist() for r in self._groups[i]], dtype=torch.long)
                for part in torch.tensor(order).chunk(learner.mini_batches)]  # fmt: skip

    def begin_step(self, learner, mb: Rollouts, extra: dict[str, Tensor]) -> Step:
        """Micro-batches of whole groups up to `micro_batch_size` rows; the totals are the step's units
        (pairs, or groups with preferred and other rows), the denominator of every unit's loss."""
        size = learner.micro_batch_size or len(mb)
        micro: list[list[int]] = []
        runs: list[list[int]] = []
        group = mb.group.tolist()
        for i, g in enumerate(group):  # the mini-batch holds its groups one after the other
            if not runs or group[runs[-1][0]] != g:
                runs.append([])
            runs[-1].append(i)
        for rows in runs:
            if not micro or (micro[-1] and len(micro[-1]) + len(rows) > size):
                micro.append([])
            micro[-1].extend(rows)
        chunks = [torch.tensor(rows, dtype=torch.long) for rows in micro]
        self._units = self._count_units(mb, extra, chunks)
        return Step(mb, extra, chunks, totals=self._units)

    def _local_pairs(self, rows: list[int]) -> tuple[list[int], list[int]]:
        """The pairs inside a micro-batch of batch rows `rows`, in its local row numbers."""
        local = {r: i for i, r in enumerate(rows)}
        inside = [(local[c], local[r]) for c, r in self._pairs if c in local and r in local]
        return [c for c, _ in inside], [r for _, r in inside]

    def _count_units(self, mb: Rollouts, extra: dict[str, Tensor], chunks: list[Tensor]) -> int:
        """Units of the mini-batch: pairs, or groups with preferred and other rows (set losses)."""
        n = sum(len(self._local_pairs(extra["row"][idx].tolist())[0]) for idx in chunks)
        if n:
            return n
        count = 0
        for idx in chunks:
            seen: dict[int, set] = defaultdict(set)
            for g, p in zip(mb.group[idx].tolist(), extra["preferred"][idx].tolist()):
                seen[g].add(bool(p))
            count += sum(len(v) == 2 for v in seen.values())
        return max(count, 1)

    def loss(self, learner, micro: Rollouts, mask: Tensor, totals: int, extra: dict[str, Tensor], *,
             observe: bool = False, logp: Tensor | None = None,
             old: Tensor | None = None) -> tuple[Tensor | None, dict[str, tuple[float, float]]]:  # fmt: skip
        """Each unit's loss divided by the mini-batch's units (so micro-batches add up); metrics
        weighted by the micro-batch's units. None when the micro-batch holds no unit."""
        chosen, rejected = self._local_pairs(extra["row"].tolist())
        loss_u, metrics = self.loss_fn(self._forward(learner, micro, chosen, rejected, extra["preferred"]))
        if loss_u.numel() == 0:
            return None, {}
        n = float(loss_u.numel())
        return loss_u.sum() / totals, {f"pref/{k}": (float(v), n) for k, v in metrics.items()}

    def after_step(self) -> dict[str, float]:
        return {"pref/units": float(self._units)}

    def load_state_dict(self, state: dict) -> None:
        """Nothing to restore (a checkpoint of this mode may hold an unused regularizer state)."""

    def _forward(self, learner, micro: Rollouts, chosen: list[int], rejected: list[int], preferred: Tensor) -> PrefInputs:
        logp, _ = learner.logprobs(learner.model, micro)
        mask = micro.completion_mask
        guide = None
        if self.guide is not None:
            with torch.no_grad():
                guide = learner.logprobs(self.guide, micro)[0].float() * mask
        long = lambda xs: torch.tensor(xs, dtype=torch.long, device=mask.device)  # noqa: E731
        explore = explore_rows(micro)
        return PrefInputs(
            logp=logp.float() * mask, ref_logp=micro.ref_logprobs * mask, mask=mask,
            chosen=long(chosen), rejected=long(rejected), group=micro.group, preferred=preferred,
            explore=torch.tensor(explore, dtype=torch.bool, device=mask.device) if any(explore) else None, guide_logp=guide,
        )  # fmt: skip


def _unit_groups(batch: Rollouts, pairs) -> list[list[int]]:
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
