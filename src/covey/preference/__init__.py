"""Preference mode (`preference:` in the run config): DPO and its relatives trained on pairs, sharing
the RL trainer's rollout, rewards, learner forward, checkpoints and logging (docs/preference.md).

Registries: `PREFERENCE_LOSSES` (`preference.loss`: dpo — with loss_type sigmoid / hinge (RSO, SLiC) /
ipo —, xpo, tgdpo, gepo_provisional) and `PAIRS` (`preference.pairs`: best_worst, all_pairs, rso, sets,
xpo). Offline pairs come from a dataset through the `offline_pairs` rollout strategy."""

from covey.preference.losses import PREFERENCE_LOSSES, PrefInputs, rso_accept
from covey.preference.pairs import PAIRS, Pairs

__all__ = ["PAIRS", "PREFERENCE_LOSSES", "Pairs", "PrefInputs", "rso_accept"]
