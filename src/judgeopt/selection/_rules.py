"""The decision rules: :func:`choose` (``rule="confirm"``) and :func:`veto` (``rule="veto"``).

Both compare finalists with the baseline on the confirmation items by the paired bootstrap
(:func:`_compare_finalists`, the same resamples for every finalist) and return a
:class:`~judgeopt.selection.SelectionResult`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..metrics import (
    Groups,
    PairedBootstrapResult,
    Scores,
    paired_bootstrap,
    paired_bootstrap_mean,
    validate_pair,
)
from ._rule_result import Finalist, SelectionResult


def choose(
    human: Scores,
    baseline: Scores,
    finalists: Sequence[Scores],
    *,
    search_scores: Sequence[float] | None = None,
    keys: Sequence[Any] | None = None,
    method: str = "spearman",
    groups: Groups | None = None,
    confidence: float = 0.8,
    interval: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> SelectionResult:
    """Choose among finalists by the lower bound of their paired gain over the baseline.

    All score vectors are on the same confirmation items (unparsed ratings already
    imputed). Each finalist's gain is bootstrapped with the same resamples (same seed).

    Args:
        human: Human scores of the confirmation items (ignored for ``accuracy``).
        baseline: The baseline judge's scores (for ``accuracy``: its 0/1 correctness per
            item).
        finalists: Each finalist's scores (or correctness).
        search_scores: Each finalist's search score (for the record).
        keys: Each finalist's identifier (default: its index).
        method: The correlation, or ``"accuracy"`` (a difference of mean correctness).
        groups: Group id per item, for a group-level correlation (groups are resampled).
        confidence: One-sided level of the lower bound that must exceed 0.
        interval: Two-sided level of the reported interval.
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed.

    A finalist whose comparison with the baseline is undefined (at group level: it gave one
    rating to every item of every group, so it ranks nothing) is recorded with the reason and
    is not confirmed; the other finalists are compared as usual.

    Returns:
        The :class:`SelectionResult`.

    Raises:
        ValueError: On no finalists, mismatched lengths or invalid data (see
            :func:`judgeopt.metrics.paired_bootstrap`), or when no finalist's comparison
            is defined (for example, constant human scores, or a baseline that ranks
            nothing at group level).
    """
    if not finalists:
        raise ValueError("choose() needs at least one finalist.")
    out = _compare_finalists(
        human,
        baseline,
        finalists,
        search_scores=search_scores,
        keys=keys,
        method=method,
        groups=groups,
        confidence=confidence,
        interval=interval,
        n_resamples=n_resamples,
        seed=seed,
    )
    defined = [i for i, f in enumerate(out) if f.error is None]
    if not defined:
        raise ValueError(out[0].error)
    chosen, reason = _choice(out, defined, confidence, interval)
    base = out[defined[0]].gain.b
    return SelectionResult(chosen, out, base, confidence, reason + _undefined_note(out))


def veto(
    human: Scores,
    baseline: Scores,
    candidate: Scores,
    *,
    search_score: float = math.nan,
    baseline_search_score: float | None = None,
    key: Any = 0,
    method: str = "spearman",
    groups: Groups | None = None,
    confidence: float = 0.8,
    interval: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> SelectionResult:
    """Keep the search's best strategy unless the confirmation items show it worse.

    ``candidate`` is the strategy with the best search score other than the baseline, judged
    on the confirmation items. The rule returns, in this order:

    1. the baseline, when the baseline's search score is at least the candidate's (the
       search's best *is* the baseline: there is nothing to confirm);
    2. the baseline, when the comparison with the baseline on the confirmation items is
       undefined (for example, a candidate that gave every item, or at group level every
       item of every group, one rating ranks nothing);
    3. the baseline, when the one-sided upper bound at ``confidence`` of the candidate's
       paired gain is below zero (the confirmation *vetoes* it);
    4. otherwise the candidate, also when its confirmation gain is negative but not
       significantly so (the reason then says so).

    Unlike :func:`choose` it does not ask the confirmation items to prove a gain, only not
    to refute one: the search half's evidence counts. Arguments are those of :func:`choose`
    for one finalist, plus ``baseline_search_score``.

    Returns:
        The :class:`SelectionResult`: ``chosen`` is ``0`` (the candidate) or ``None``.

    Raises:
        ValueError: On mismatched lengths or invalid data, or ``confidence`` outside
            [0.5, 1).
    """
    out = _compare_finalists(
        human,
        baseline,
        [candidate],
        search_scores=[search_score],
        keys=[key],
        method=method,
        groups=groups,
        confidence=confidence,
        interval=interval,
        n_resamples=n_resamples,
        seed=seed,
    )
    chosen, reason = _veto_choice(
        out[0], key, search_score, baseline_search_score, confidence, interval
    )
    return SelectionResult(chosen, out, out[0].gain.b, confidence, reason)


def _compare_finalists(
    human: Scores,
    baseline: Scores,
    finalists: Sequence[Scores],
    *,
    search_scores: Sequence[float] | None,
    keys: Sequence[Any] | None,
    method: str,
    groups: Groups | None,
    confidence: float,
    interval: float,
    n_resamples: int,
    seed: int,
) -> list[Finalist]:
    """Each finalist's paired comparison with the baseline (same resamples for all).

    Malformed input raises, naming the finalist; an undefined comparison is recorded in the
    finalist's ``error``.
    """
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"`confidence` must be in [0.5, 1). Got {confidence!r} instead.")
    keys = list(keys) if keys is not None else list(range(len(finalists)))
    scores = list(search_scores) if search_scores is not None else [math.nan] * len(finalists)
    if len(keys) != len(finalists) or len(scores) != len(finalists):
        raise ValueError(
            f"{len(finalists)} finalists need as many keys and search scores; "
            f"got {len(keys)} keys and {len(scores)} search scores."
        )
    out: list[Finalist] = []

    def boot(pred: Scores, level: float) -> PairedBootstrapResult:
        if method == "accuracy":
            return paired_bootstrap_mean(
                pred, baseline, n_resamples=n_resamples, confidence=level, seed=seed
            )
        return paired_bootstrap(
            human,
            pred,
            baseline,
            method,
            groups,
            n_resamples=n_resamples,
            confidence=level,
            seed=seed,
        )

    # Malformed input (a length that differs, NaN) is the caller's error and raises here,
    # naming the finalist; only an undefined comparison is recorded per finalist below.
    first = baseline if method == "accuracy" else human
    first_name = "baseline" if method == "accuracy" else "human"
    validate_pair(first, baseline, (first_name, "baseline"), allow_constant=True)
    for key, pred in zip(keys, finalists, strict=True):
        validate_pair(first, pred, (first_name, f"finalist {key!r}"), allow_constant=True)
    for key, s, pred in zip(keys, scores, finalists, strict=True):
        try:
            two_sided = boot(pred, interval)
        except ValueError as e:
            # The input was validated above, so the comparison is undefined (constant human
            # scores or groups, or a judge that ranks nothing): this finalist is not
            # confirmed; the rule decides what that means for the choice.
            nan = math.nan
            undefined = PairedBootstrapResult(
                nan, nan, nan, nan, nan, interval, nan, 0, n_resamples, n_resamples
            )
            out.append(Finalist(key, float(s), nan, undefined, nan, False, str(e)))
            continue
        if confidence > 0.5:
            # The central (2c - 1) interval's ends are the one-sided bounds at level c.
            one_sided = boot(pred, 2 * confidence - 1)
            lower, upper = one_sided.low, one_sided.high
        else:
            lower = upper = two_sided.delta
        out.append(
            Finalist(key, float(s), two_sided.a, two_sided, lower, lower > 0, upper_bound=upper)
        )
    return out


def _choice(
    out: Sequence[Finalist], defined: Sequence[int], confidence: float, interval: float
) -> tuple[int | None, str]:
    """:func:`choose`'s pick among the compared finalists (``None``: the baseline), and why."""
    confirmed = [i for i, f in enumerate(out) if f.confirmed]
    if confirmed:
        chosen = max(confirmed, key=lambda i: (out[i].lower_bound, -i))
        f = out[chosen]
        return chosen, (
            f"finalist {f.key!r} confirmed: gain {f.gain.delta:+.3f} over the baseline on "
            f"the confirmation items ({interval:.0%} interval {f.gain.low:+.3f} to "
            f"{f.gain.high:+.3f}; one-sided {confidence:.0%} lower bound "
            f"{f.lower_bound:+.3f} > 0)"
        )
    best = max(defined, key=lambda i: (out[i].gain.delta, -i))
    f = out[best]
    return None, (
        f"no finalist beat the baseline on the confirmation items: the best, "
        f"{f.key!r}, gained {f.gain.delta:+.3f} ({interval:.0%} interval "
        f"{f.gain.low:+.3f} to {f.gain.high:+.3f}; one-sided {confidence:.0%} lower "
        f"bound {f.lower_bound:+.3f} <= 0), so the baseline is kept"
    )


def _veto_choice(
    f: Finalist,
    key: Any,
    search_score: float,
    baseline_search_score: float | None,
    confidence: float,
    interval: float,
) -> tuple[int | None, str]:
    """:func:`veto`'s pick (``0``: the candidate, ``None``: the baseline), and why."""
    if (
        baseline_search_score is not None
        and math.isfinite(baseline_search_score)
        and not baseline_search_score < search_score
    ):
        return None, (
            f"the baseline has the best search score ({baseline_search_score:.3f}; the "
            f"best other strategy, {key!r}, {search_score:.3f}), so it is kept"
        )
    if f.error is not None:
        return None, (
            f"the search's best, {key!r}, cannot be compared with the baseline on the "
            f"confirmation items ({f.error}), so the baseline is kept"
        )
    told = (
        f"gain {f.gain.delta:+.3f} on the confirmation items ({interval:.0%} interval "
        f"{f.gain.low:+.3f} to {f.gain.high:+.3f}; one-sided {confidence:.0%} upper bound "
        f"{f.upper_bound:+.3f}"
    )
    if f.upper_bound < 0:
        return None, f"the search's best, {key!r}, was vetoed: {told} < 0), so the baseline is kept"
    if f.gain.delta < 0:
        return 0, (
            f"the search's best, {key!r}, is kept although it scored below the "
            f"baseline on the confirmation items, not significantly: {told} >= 0)"
        )
    return 0, f"the search's best, {key!r}, is kept (not vetoed: {told} >= 0)"


def _undefined_note(out: Sequence[Finalist]) -> str:
    bad = [f for f in out if f.error is not None]
    if not bad:
        return ""
    return "; " + "; ".join(f"finalist {f.key!r} was not comparable ({f.error})" for f in bad)
