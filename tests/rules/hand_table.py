"""The tiny table every rule's test derives its counts from by hand.

The table used throughout (probabilities; q = sampler, p = trainer):

  seq 1: A q=0.5 p=0.2  (r = 0.4,  p-q = -0.3, l = -0.916291)
         B q=0.2 p=0.6  (r = 3,    p-q = +0.4, l = +1.098612)
         C q=0.9 p=0.9  (r = 1)
  seq 2: D q=0.5 p=1e-5 (r = 2e-5, p-q = -0.49999, l = -10.819778)
         E q=0.5 p=0.5  (r = 1)
"""

from __future__ import annotations

import numpy as np

from mismatchscope.divergence import token_terms
from mismatchscope.rules import KEEP, REJECT, REWEIGHT, SequenceInputs, make_instance

Q = np.array([0.5, 0.2, 0.9, 0.5, 0.5])
P = np.array([0.2, 0.6, 0.9, 1e-5, 0.5])
T = token_terms(np.log(P), np.log(Q))
POS = np.ones(5)
NEG = -np.ones(5)


def tok(name, adv=None, **params):
    """The rule's action on each token of the table (advantages ``adv``, parameters ``params``)."""
    return list(make_instance(name, params).token_actions(T, adv))


R, W, K = int(REJECT), int(REWEIGHT), int(KEEP)


def seq_inputs(adv):
    """The two sequences of the table as a sequence rule reads them."""
    # seq 1: S = log 0.4 + log 3 + 0 = log 1.2 = 0.182322; mean l = 0.060774; geo = 1.2^(1/3) = 1.062659
    #        k3 = [0.316291, 0.901388, 0] -> mean 0.405893; min r 0.4
    # seq 2: S = log 2e-5 = -10.819778; mean l = -5.409889; geo = 0.004472; min r 2e-5
    #        k3(D) = (2e-5 - 1) + 10.819778 = 9.819798 -> mean 4.909899
    return SequenceInputs(
        n_tokens_S=np.array([3.0, 2.0]),
        seq_log_ratio_S=np.array([T.log_ratio_T[:3].sum(), T.log_ratio_T[3:].sum()]),
        min_log_ratio_S=np.array([T.log_ratio_T[:3].min(), T.log_ratio_T[3:].min()]),
        max_log_ratio_S=np.array([T.log_ratio_T[:3].max(), T.log_ratio_T[3:].max()]),
        mean_k3_S=np.array([T.k3_T[:3].mean(), T.k3_T[3:].mean()]),
        advantage_S=adv,
        clamped_sum_k1_S=np.array([T.k1_T[:3].sum(), T.k1_T[3:].sum()]),  # every |l| < 20: clamping changes nothing
        clamped_sum_k2_S=np.array([T.k2_T[:3].sum(), T.k2_T[3:].sum()]),
        clamped_sum_k3_S=np.array([T.k3_T[:3].sum(), T.k3_T[3:].sum()]),
    )


def seq(name, adv=None, **params):
    """The rule's action on each of the two sequences of the table."""
    return list(make_instance(name, params).sequence_actions(seq_inputs(adv)))
