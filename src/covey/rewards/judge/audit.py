"""The reward-hacking audit: how often a judge's verdict agrees with the task's verifier.

For every reward that declares ``audit_against = "<column>"`` (the `judge` reward: "accuracy", the
task verifier's column) and a batch that has that column, the runner logs

    reward/<name>/verifier_agreement = mean over samples both scored (not failed, not None) of
                                       [judge >= audit_threshold] == [verifier >= 0.5]

and warns once per run when it falls below `audit_warn_below` (0.5: worse than a coin on a balanced
task). A judge that agrees with the verifier on some items and not on others (a flipped reward on a
triggered slice, DecepChain arXiv 2510.00319) shows up as agreement well below 1.
"""

from __future__ import annotations

import logging

__all__ = ["audit_verifier"]

log = logging.getLogger("covey.rewards.runner")


def audit_verifier(batch, entries, logged: set) -> None:
    """Add ``reward/<name>/verifier_agreement`` to `batch.metrics` for each audited reward (in place)."""
    names = list(batch.names)
    for k, e in enumerate(entries):
        against = getattr(e.fn, "audit_against", None)
        if not against or against not in names or names.index(against) == k:
            continue
        v = names.index(against)
        ok = ~(batch.failed[:, k] | batch.missing[:, k] | batch.failed[:, v] | batch.missing[:, v])
        if not bool(ok.any()):
            continue
        verdict = batch.rewards[ok, k] >= float(getattr(e.fn, "audit_threshold", 0.5))
        truth = batch.rewards[ok, v] >= 0.5
        agreement = float((verdict == truth).float().mean())
        batch.metrics[f"reward/{e.label}/verifier_agreement"] = agreement
        below = float(getattr(e.fn, "audit_warn_below", 0.5))
        if agreement < below and (e.label, "audit") not in logged:
            logged.add((e.label, "audit"))
            log.warning("reward %r agrees with the verifier %r on only %.0f%% of %d samples (audit threshold %.0f%%): "
                        "the judge may be rewarding something else than the task (reward hacking?)",
                        e.label, against, 100 * agreement, int(ok.sum()), 100 * below)
