"""Choosing the compiled judge so that the choice survives noise (the winner's curse).

A search evaluates many strategies on one validation set and keeps the best score. With a few
dozen items each score carries sampling noise of about +-0.2 (Spearman), so the maximum of
twenty noisy scores is biased upward: the "best" strategy is often one that was lucky on
those items, and on new items it can be worse than the baseline it replaced.

judgeopt's rule (``rule="confirm"``, the default; ``docs/judge.md``, "Choosing the judge"):

1. **Split** the scoring set once, seeded, into a *search* part and a *confirmation* part
   (:func:`confirmation_split`): whole groups (items that share a source) go to one side,
   and the split is stratified by the human score, so both parts span the score range.
2. **Search** on the search part only, with the whole budget.
3. **Confirm**: judge the ``finalists`` best distinct strategies of the search (by their
   search score) and the baseline on the confirmation part, which the search never saw.
4. **Choose** (:func:`choose`): for every finalist, the paired bootstrap of its gain over the
   baseline on the confirmation items (both judges see the same resampled items, or whole
   groups for a group-level correlation). A finalist is *confirmed* when the one-sided lower
   bound of its gain at level ``confidence`` is above zero; among the confirmed finalists
   the one with the highest lower bound is chosen. When none is confirmed the baseline is
   returned, and the result says so (with the best finalist's gain and interval).

``rule="veto"`` (:func:`veto`) splits and searches the same way but trusts the search: it
returns the strategy with the best search score (the baseline when that is the baseline's)
unless the confirmation vetoes it, that is unless the one-sided upper bound at
``confidence`` of its paired gain over the baseline on the confirmation items is below zero.
Only that one strategy (and the baseline) is judged on the confirmation part. It returns
more gains than ``confirm`` and, when no strategy is truly better, more worse judges (the
simulation's table in ``docs/judge.md``); a judge it keeps with a negative confirmation gain
is reported as such.

So the confirm rule can only return a judge whose confirmed gain is positive. For one finalist whose
true gain is zero or negative, the chance that its lower bound clears zero is at most about
``1 - confidence``; with several finalists the chances add up (at most ``finalists * (1 -
confidence)``, usually far less because the finalists' errors are correlated).
:func:`simulate_selection` measures the probability of returning a truly worse judge, and
the expected true gain, by simulation against the rule that keeps the best validation score
(``rule="best"``, the paper's and the behaviour before this module); the defaults
(``confidence=0.8``, 3 finalists, half the items for confirmation) were chosen on those
simulations (``docs/judge.md``, "Choosing the judge", has the table).

The confirmation gain of the chosen judge is still an optimistic estimate (it was used to
choose); an unbiased estimate needs items that played no part in the choice: evaluate on a
held-out test set (``--test-data``).

Everything here is a pure function of numbers (numpy and :mod:`judgeopt.metrics`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .metrics import (
    Groups,
    PairedBootstrapResult,
    Scores,
    paired_bootstrap,
    paired_bootstrap_mean,
    validate_pair,
)
from .racing import unit_keys

__all__ = [
    "Finalist",
    "SelectionConfig",
    "SelectionResult",
    "choose",
    "confirmation_split",
    "simulate_selection",
    "veto",
]

Rule = Literal["confirm", "veto", "best"]


class SelectionConfig(BaseModel):
    """How the compiled judge is chosen (``[selection]`` in an optimizer preset).

    Attributes:
        rule: ``"confirm"`` (default): search on one part of the scoring set, re-judge the
            finalists and the baseline on the rest, keep a finalist only if its gain is
            confirmed there (see the module docstring). ``"veto"``: search on one part,
            keep the best search score unless the rest shows it worse than the baseline
            (:func:`veto`). ``"best"``: search on everything and keep the best validation
            score (the paper's rule; biased upward).
        confirm_fraction: Share of the scoring set (whole groups) held out for confirmation.
        finalists: How many of the search's best distinct strategies are confirmed (rule
            ``"confirm"``; ``"veto"`` judges only the best one).
        confidence: One-sided level of the bound: for ``"confirm"`` the lower bound of a
            finalist's gain must be above zero (0.5: a positive point estimate is enough);
            for ``"veto"`` an upper bound below zero vetoes the search's best.
        min_confirm_items: Below this many confirmation items (or 3 groups at group level)
            the confirmation cannot tell judges apart; the compile then uses ``"best"`` on the
            whole set and says so.
        n_resamples: Bootstrap resamples of each paired comparison.
        seed: Seed of the split and of the bootstrap.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: Rule = "confirm"
    confirm_fraction: float = Field(0.5, gt=0.0, lt=1.0)
    finalists: int = Field(3, ge=1)
    confidence: float = Field(0.8, ge=0.5, lt=1.0)
    min_confirm_items: int = Field(20, ge=3)
    n_resamples: int = Field(2000, ge=100)
    seed: int = Field(0, ge=0)

    @property
    def compared(self) -> int:
        """How many of the search's best strategies the rule compares with the baseline on
        the confirmation part (``"veto"`` tests the search's best only)."""
        return 1 if self.rule == "veto" else self.finalists


def confirmation_split(
    humans: Sequence[Any] | np.ndarray,
    groups: Groups | None,
    *,
    fraction: float,
    seed: int,
) -> tuple[list[int], list[int]]:
    """Seeded split of a scoring set into (search indices, confirmation indices).

    Units are items, or whole groups when ``groups`` is given (a group never straddles the
    split). Units are sorted by their human score (a group's mean; pairwise labels sort as
    text), ties in seeded random order, and taken by systematic sampling with a random
    offset: every run of ``1 / fraction`` consecutive units gives one to the confirmation
    part, so both parts cover the score range.

    Args:
        humans: Human score (or pairwise label) per item.
        groups: Group id per item, or ``None``.
        fraction: Share of the units for confirmation, in (0, 1).
        seed: Seed of the tie-breaking and the offset.

    Returns:
        Item indices of the search part and of the confirmation part, each in input order.

    Raises:
        ValueError: When ``fraction`` is outside (0, 1) or either part would be empty.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"`fraction` must be in (0, 1). Got {fraction!r} instead.")
    _, keys, members = unit_keys(list(humans), None if groups is None else list(groups))
    n = len(members)
    rng = np.random.default_rng(seed)
    tie = rng.permutation(n)
    numeric = all(isinstance(k, (int, float)) for k in keys)
    order = sorted(
        range(n), key=lambda u: ((float(keys[u]) if numeric else str(keys[u])), int(tie[u]))
    )
    offset = float(rng.random())
    confirm_units = {
        u
        for rank, u in enumerate(order)
        if math.floor((rank + 1) * fraction + offset) - math.floor(rank * fraction + offset) == 1
    }
    if not confirm_units or len(confirm_units) == n:
        raise ValueError(
            f"a confirmation split of {n} units at fraction {fraction} leaves a "
            "part empty; give more items or another fraction"
        )
    search = sorted(i for u in range(n) if u not in confirm_units for i in members[u])
    confirm = sorted(i for u in confirm_units for i in members[u])
    return search, confirm


@dataclass(frozen=True)
class Finalist:
    """One strategy re-judged on the confirmation part.

    Attributes:
        key: The caller's identifier (e.g. the evaluation number).
        search_score: Its score on the search part.
        confirm_score: Its score on the confirmation part.
        gain: Paired comparison with the baseline on the confirmation part
            (``delta`` = finalist minus baseline, a two-sided interval).
        lower_bound: One-sided lower bound of the gain at the rule's ``confidence``.
        confirmed: ``lower_bound > 0``.
        error: Why the comparison is undefined (for example, a finalist that gave one rating
            to every item of every group cannot rank anything at group level), or ``None``.
            Such a finalist is not confirmed; its scores and bounds are NaN.
        upper_bound: One-sided upper bound of the gain at the rule's ``confidence`` (what
            :func:`veto` tests).
    """

    key: Any
    search_score: float
    confirm_score: float
    gain: PairedBootstrapResult
    lower_bound: float
    confirmed: bool
    error: str | None = None
    upper_bound: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {
            "key": self.key,
            "search_score": _num(self.search_score),
            "confirm_score": _num(self.confirm_score),
            "gain": _num(self.gain.delta),
            "gain_ci": [_num(self.gain.low), _num(self.gain.high)],
            "lower_bound": _num(self.lower_bound),
            "upper_bound": _num(self.upper_bound),
            "confirmed": self.confirmed,
            "error": self.error,
        }


@dataclass(frozen=True)
class SelectionResult:
    """The outcome of :func:`choose`.

    Attributes:
        chosen: Index into the finalists, or ``None`` for the baseline.
        finalists: Every finalist's confirmation.
        baseline_score: The baseline's score on the confirmation part.
        confidence: The one-sided level used.
        reason: One sentence for the compile's summary.
    """

    chosen: int | None
    finalists: list[Finalist]
    baseline_score: float
    confidence: float
    reason: str = field(default="")

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {
            "chosen": self.chosen,
            "baseline_score": _num(self.baseline_score),
            "confidence": self.confidence,
            "reason": self.reason,
            "finalists": [f.to_dict() for f in self.finalists],
        }


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


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
    base = out[defined[0]].gain.b
    confirmed = [i for i, f in enumerate(out) if f.confirmed]
    if confirmed:
        chosen = max(confirmed, key=lambda i: (out[i].lower_bound, -i))
        f = out[chosen]
        reason = (
            f"finalist {f.key!r} confirmed: gain {f.gain.delta:+.3f} over the baseline on "
            f"the confirmation items ({interval:.0%} interval {f.gain.low:+.3f} to "
            f"{f.gain.high:+.3f}; one-sided {confidence:.0%} lower bound "
            f"{f.lower_bound:+.3f} > 0)"
        )
        return SelectionResult(chosen, out, base, confidence, reason + _undefined_note(out))
    best = max(defined, key=lambda i: (out[i].gain.delta, -i))
    f = out[best]
    reason = (
        f"no finalist beat the baseline on the confirmation items: the best, "
        f"{f.key!r}, gained {f.gain.delta:+.3f} ({interval:.0%} interval "
        f"{f.gain.low:+.3f} to {f.gain.high:+.3f}; one-sided {confidence:.0%} lower "
        f"bound {f.lower_bound:+.3f} <= 0), so the baseline is kept"
    )
    return SelectionResult(None, out, base, confidence, reason + _undefined_note(out))


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
    f = out[0]
    base = f.gain.b
    if (
        baseline_search_score is not None
        and math.isfinite(baseline_search_score)
        and not baseline_search_score < search_score
    ):
        reason = (
            f"the baseline has the best search score ({baseline_search_score:.3f}; the "
            f"best other strategy, {key!r}, {search_score:.3f}), so it is kept"
        )
        return SelectionResult(None, out, base, confidence, reason)
    if f.error is not None:
        reason = (
            f"the search's best, {key!r}, cannot be compared with the baseline on the "
            f"confirmation items ({f.error}), so the baseline is kept"
        )
        return SelectionResult(None, out, base, confidence, reason)
    told = (
        f"gain {f.gain.delta:+.3f} on the confirmation items ({interval:.0%} interval "
        f"{f.gain.low:+.3f} to {f.gain.high:+.3f}; one-sided {confidence:.0%} upper bound "
        f"{f.upper_bound:+.3f}"
    )
    if f.upper_bound < 0:
        reason = f"the search's best, {key!r}, was vetoed: {told} < 0), so the baseline is kept"
        return SelectionResult(None, out, base, confidence, reason)
    if f.gain.delta < 0:
        reason = (
            f"the search's best, {key!r}, is kept although it scored below the "
            f"baseline on the confirmation items, not significantly: {told} >= 0)"
        )
    else:
        reason = f"the search's best, {key!r}, is kept (not vetoed: {told} >= 0)"
    return SelectionResult(0, out, base, confidence, reason)


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


def _undefined_note(out: Sequence[Finalist]) -> str:
    bad = [f for f in out if f.error is not None]
    if not bad:
        return ""
    return "; " + "; ".join(f"finalist {f.key!r} was not comparable ({f.error})" for f in bad)


# ------------------------------------------------------------------------------ simulation


def _spearman_rows(h: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman of ``h`` (n,) with each row of ``y`` (R, n), average ranks for ties."""
    from scipy.stats import rankdata  # type: ignore[import-untyped, unused-ignore]

    rh = rankdata(h)
    ry = rankdata(y, axis=1)
    rh = rh - rh.mean()
    ry = ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rh**2).sum() * (ry**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (ry @ rh) / den
    return np.where(den > 0, out, 0.0)


def _rating_cuts(levels: int, mode_share: float | None) -> np.ndarray:
    """Cut points on the standard normal that make ``levels`` rating values.

    Without ``mode_share`` every value is equally likely. With it, the central value (the
    lower of the two central ones for an even ``levels``) holds ``mode_share`` of the
    ratings and the other values split the rest equally: the shape of a small model that
    gives one rating to most items.
    """
    from statistics import NormalDist

    if mode_share is None:
        cum = np.arange(1, levels) / levels
    else:
        probs = np.full(levels, (1.0 - mode_share) / (levels - 1))
        probs[(levels - 1) // 2] = mode_share
        cum = np.cumsum(probs)[:-1]
    return np.array([NormalDist().inv_cdf(float(q)) for q in cum])


def _judge_outputs(
    rng: np.random.Generator,
    h: np.ndarray,
    rho: np.ndarray,
    error_correlation: float,
    levels: int | None,
    mode_share: float | None = None,
) -> np.ndarray:
    """Ratings of judges with Pearson correlation ``rho`` to ``h`` and correlated errors."""
    n = h.size
    shared = rng.standard_normal(n)
    own = rng.standard_normal((rho.size, n))
    err = math.sqrt(error_correlation) * shared + math.sqrt(1 - error_correlation) * own
    y = rho[:, None] * h[None, :] + np.sqrt(1 - rho**2)[:, None] * err
    if levels is not None:
        # A coarse rating scale: cut at standard normal quantiles (ties, as judges give).
        # Every judge's ratings are standard normal before the cut, so the cut gives each
        # judge the same distribution of rating values.
        y = np.searchsorted(_rating_cuts(levels, mode_share), y).astype(float)
    return np.asarray(y, dtype=float)


def simulate_selection(
    *,
    n_valid: int = 100,
    budget: int = 20,
    baseline_rho: float = 0.3,
    gain_mean: float = -0.05,
    gain_sd: float = 0.06,
    error_correlation: float = 0.5,
    levels: int | None = 10,
    mode_share: float | None = None,
    configs: Mapping[str, SelectionConfig] | None = None,
    n_runs: int = 200,
    n_resamples: int = 500,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """How often each rule returns a judge that is truly worse than the baseline.

    Each run draws ``budget - 1`` candidate strategies whose true Pearson correlation with
    the humans is ``baseline_rho + d`` with ``d ~ N(gain_mean, gain_sd)`` (clipped to a valid
    correlation), and a validation set of ``n_valid`` items with standard normal human scores.
    A judge's ratings are ``rho * h + sqrt(1 - rho^2) * e``, with errors correlated
    ``error_correlation`` across judges (one model, several prompts), cut to ``levels``
    rating values. The "search" evaluates every candidate (an oracle-free stand-in for any
    search: it sees exactly the budget's scores) and ranks by Spearman on the items it is
    given. ``rule="best"`` searches on all ``n_valid`` items and keeps the best (or the
    baseline when nothing beats it); ``rule="confirm"`` searches on the search part, then
    :func:`choose` on the confirmation part; ``rule="veto"`` searches on the search part,
    then :func:`veto` on the confirmation part. A judge's true quality is its population
    Spearman, ``(6 / pi) asin(rho / 2)``.

    Args:
        n_valid: Validation items.
        budget: Strategies evaluated, the baseline included.
        baseline_rho: The baseline's true Pearson correlation.
        gain_mean: Mean true gain of a candidate (Pearson scale).
        gain_sd: Spread of the candidates' true gains.
        error_correlation: Correlation of the judges' errors.
        levels: Rating values (``None``: continuous ratings).
        mode_share: Share of every judge's ratings on its central value, the others
            splitting the rest equally (``None``: all values equally likely). The embedded
            1.5B gives its most frequent rating to a median 0.62-0.82 of the items on the
            five e2e pairs, using a median of 2-3 values (docs/judge.md).
        configs: Rules to compare by name (default: ``best`` and the default ``confirm``).
        n_runs: Simulated compiles.
        n_resamples: Bootstrap resamples per comparison.
        seed: Seed of the whole simulation.

    Returns:
        Per rule: ``p_worse`` (share of runs whose returned judge is truly worse than the
        baseline), ``p_baseline`` (share returning the baseline), ``mean_true_gain`` and
        ``mean_claimed_gain`` (Spearman scale; the claimed gain is the validation gain for
        ``best`` and the confirmation gain for ``confirm`` and ``veto``), ``p_best_exists``
        (share of runs with a truly better candidate) and ``se_true_gain``.
    """
    if levels is not None:
        # numpy integers count (a grid over np.arange); bools do not.
        if (
            isinstance(levels, (bool, np.bool_))
            or not isinstance(levels, numbers.Integral)
            or levels < 2
        ):
            raise ValueError(f"`levels` must be an integer >= 2 or None, got {levels!r}")
        levels = int(levels)
    if mode_share is not None:
        if levels is None:
            raise ValueError(
                "`mode_share` needs `levels` (ratings cut to rating values), got levels=None"
            )
        if (
            isinstance(mode_share, (bool, np.bool_))
            or not isinstance(mode_share, numbers.Real)
            or not 1.0 / levels < mode_share < 1.0
        ):
            raise ValueError(
                f"`mode_share` must be above 1/levels = {1.0 / levels:.3f} and "
                f"below 1, got {mode_share!r}"
            )
    if configs is None:
        configs = {"best": SelectionConfig(rule="best"), "confirm": SelectionConfig()}
    # One stream for the simulated data and one per run for the rules' randomness, so the
    # rules compared in a run see the same data, split and resamples, and adding a rule to
    # ``configs`` does not change the data of later runs.
    rng = np.random.default_rng(seed)
    run_seeds = np.random.default_rng([seed, 1]).integers(2**31, size=(n_runs, 2))
    stats: dict[str, dict[str, list[float]]] = {
        name: {"worse": [], "baseline": [], "true": [], "claimed": []} for name in configs
    }
    exists = []
    for run in range(n_runs):
        split_seed, boot_seed = (int(x) for x in run_seeds[run])
        d = rng.normal(gain_mean, gain_sd, size=budget - 1)
        rho = np.clip(np.concatenate([[baseline_rho], baseline_rho + d]), -0.95, 0.95)
        true = (6 / math.pi) * np.arcsin(rho / 2)
        exists.append(float((true[1:] > true[0]).any()))
        h = rng.standard_normal(n_valid)
        y = _judge_outputs(rng, h, rho, error_correlation, levels, mode_share)
        for name, cfg in configs.items():
            if cfg.rule == "best":
                scores = _spearman_rows(h, y)
                pick = int(np.argmax(scores))  # the baseline wins ties (index 0)
                claimed = float(scores[pick] - scores[0])
            else:
                search, confirm = confirmation_split(
                    h, None, fraction=cfg.confirm_fraction, seed=split_seed
                )
                s_scores = _spearman_rows(h[search], y[:, search])
                ranked = [int(i) for i in np.argsort(-s_scores, kind="stable") if i != 0]
                top = ranked[: cfg.compared]
                if cfg.rule == "veto":
                    result = veto(
                        h[confirm],
                        y[0, confirm],
                        y[top[0], confirm],
                        search_score=float(s_scores[top[0]]),
                        baseline_search_score=float(s_scores[0]),
                        confidence=cfg.confidence,
                        n_resamples=n_resamples,
                        seed=boot_seed,
                    )
                else:
                    result = choose(
                        h[confirm],
                        y[0, confirm],
                        [y[i, confirm] for i in top],
                        confidence=cfg.confidence,
                        n_resamples=n_resamples,
                        seed=boot_seed,
                    )
                pick = 0 if result.chosen is None else top[result.chosen]
                claimed = (
                    0.0 if result.chosen is None else result.finalists[result.chosen].gain.delta
                )
            stats[name]["worse"].append(float(true[pick] < true[0]))
            stats[name]["baseline"].append(float(pick == 0))
            stats[name]["true"].append(float(true[pick] - true[0]))
            stats[name]["claimed"].append(claimed)
    out: dict[str, dict[str, float]] = {}
    for name, s in stats.items():
        t = np.asarray(s["true"])
        out[name] = {
            "p_worse": float(np.mean(s["worse"])),
            "p_baseline": float(np.mean(s["baseline"])),
            "mean_true_gain": float(t.mean()),
            "se_true_gain": float(t.std(ddof=1) / math.sqrt(t.size)) if t.size > 1 else math.nan,
            "mean_claimed_gain": float(np.mean(s["claimed"])),
            "p_best_exists": float(np.mean(exists)),
        }
    return out
