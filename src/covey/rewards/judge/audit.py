"""The reward-hacking audit: how often a judge's verdict agrees with the task's verifier.

For every reward that declares ``audit_against = "<column>"`` (the `judge` reward: "accuracy", the
task verifier's column) and a batch that has that column, the runner logs

    reward/<name>/verifier_agreement = mean over samples both scored (not failed, not None) of
                                       [judge >= audit_threshold] == [verifier >= 0.5]

and warns once per run when it falls below `audit_warn_below` (0.5: worse than a coin on a balanced
task). A reward may also declare ``audit_columns`` (item columns read as booleans, e.g. a trigger flag):
the same agreement is then logged per slice, ``verifier_agreement/<column>`` over the rows where the
column is true and ``verifier_agreement/not_<column>`` over the others (a missing value counts as false),
and a slice below the threshold warns too. A judge that agrees with the verifier on some items and not on others (a flipped reward on a
triggered slice, DecepChain arXiv 2510.00319) shows up as agreement well below 1.
"""

from __future__ import annotations

import logging

from covey.rewards.registry import reward_caps

__all__ = ["audit_verifier"]

log = logging.getLogger("covey.rewards.runner")


def audit_verifier(batch, entries, logged: set, columns: dict | None = None) -> None:
    """Add ``reward/<name>/verifier_agreement`` (and its slices by ``audit_columns``, read from `columns`)
    to `batch.metrics` for each audited reward (in place)."""
    import torch

    names = list(batch.names)
    for k, e in enumerate(entries):
        caps = reward_caps(e.fn)
        against = caps.audit_against
        if not against or against not in names or names.index(against) == k:
            continue
        v = names.index(against)
        ok = ~(batch.failed[:, k] | batch.missing[:, k] | batch.failed[:, v] | batch.missing[:, v])
        if not bool(ok.any()):
            continue
        agree = (batch.rewards[:, k] >= float(caps.audit_threshold)) == (batch.rewards[:, v] >= 0.5)
        slices = {"": ok}
        for col in caps.audit_columns:
            flag = torch.tensor([bool(x) for x in (columns or {}).get(col, [False] * len(ok))])
            slices[f"/{col}"], slices[f"/not_{col}"] = ok & flag, ok & ~flag
        below = float(caps.audit_warn_below)
        for suffix, rows in slices.items():
            if not bool(rows.any()):
                continue
            agreement = float(agree[rows].float().mean())
            batch.metrics[f"reward/{e.label}/verifier_agreement{suffix}"] = agreement
            if agreement < below and (e.label, "audit" + suffix) not in logged:
                logged.add((e.label, "audit" + suffix))
                log.warning("reward %r agrees with the verifier %r on only %.0f%% of %d samples%s (audit threshold %.0f%%): "
                            "the judge may be rewarding something else than the task (reward hacking?)",
                            e.label, against, 100 * agreement, int(rows.sum()),
                            f" where {suffix[1:]}" if suffix else "", 100 * below)
