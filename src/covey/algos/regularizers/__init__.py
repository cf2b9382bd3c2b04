"""Regularizers (`algo.regularizers: [{name, ...}]`): extra loss terms with their own gates,
normalisation and state. The protocol is in `covey.algos.regularizers.base`. Files:

    llds.py    llds                 likelihood-preserving penalty on displaced tokens (LLDS)
    kl.py      disco_kl, kl_old     trust regions to pi_old (DisCO's squared hinge, TRPA's KL)
    r2vpo.py   r2vpo_provisional    ratio-variance constraint with a dual variable (R2VPO)
    epo.py     epo                  entropy bonus with per-turn entropy smoothing (EPO, agents)

Importing this package registers them in `REGULARIZERS`.
"""

from covey.algos.regularizers.base import REGULARIZERS, Regularizer, RegularizerCaps, RegularizerSet, register_regularizer
from covey.algos.regularizers.epo import EPO
from covey.algos.regularizers.kl import DiscoKL, KLOld
from covey.algos.regularizers.llds import LLDS
from covey.algos.regularizers.r2vpo import R2VPO

__all__ = ["EPO", "LLDS", "R2VPO", "REGULARIZERS", "DiscoKL", "KLOld", "Regularizer", "RegularizerCaps", "RegularizerSet", "register_regularizer"]
