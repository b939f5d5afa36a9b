"""Meta-evaluation metrics for LLM judges (pure numpy/scipy).

How well does a judge agree with humans?

* :func:`correlation`, :func:`correlations`, :func:`group_correlation`:
  dataset-level or group-level Spearman / Kendall tau-b / Pearson correlation.
* :func:`pairwise_accuracy`: accuracy of a pairwise judge (labels a / b / tie).
* :func:`pairwise_agreement`, :func:`pairwise_agreement_details`: win/tie/lose
  agreement of pointwise scores over within-group pairs (HPSS, AlignBench).
* :func:`tie_calibrated_accuracy`: ``acc_eq`` with tie calibration (Deutsch et al. 2023).
* :func:`permutation_test`: PERM-INPUTS test of "judge A beats judge B"
  (Deutsch, Dror & Roth 2021).
* :func:`bootstrap_ci`: percentile bootstrap interval over items or groups.
* :func:`paired_bootstrap`: interval of the difference of two judges' correlations
  on the same items (paired resampling of items or groups).

See ``docs/metrics.md`` for the formulas and the choices made.
"""

from __future__ import annotations

from judgeopt.metrics._correlation import (
    GroupCorrelation,
    correlation,
    correlations,
    group_correlation,
)
from judgeopt.metrics._pairwise import (
    PAIRWISE_LABELS,
    PairwiseAgreement,
    TieCalibration,
    pairwise_accuracy,
    pairwise_agreement,
    pairwise_agreement_details,
    tie_calibrated_accuracy,
)
from judgeopt.metrics._significance import (
    BootstrapResult,
    PairedBootstrapResult,
    PermutationResult,
    bootstrap_ci,
    paired_bootstrap,
    paired_bootstrap_mean,
    permutation_test,
)
from judgeopt.metrics._validation import METHODS, Groups, Scores, validate_pair

__all__ = [
    "Groups",
    "Scores",
    "validate_pair",
    "METHODS",
    "PAIRWISE_LABELS",
    "BootstrapResult",
    "GroupCorrelation",
    "PairedBootstrapResult",
    "PairwiseAgreement",
    "PermutationResult",
    "TieCalibration",
    "bootstrap_ci",
    "correlation",
    "correlations",
    "group_correlation",
    "pairwise_accuracy",
    "pairwise_agreement",
    "pairwise_agreement_details",
    "paired_bootstrap",
    "paired_bootstrap_mean",
    "permutation_test",
    "tie_calibrated_accuracy",
]
