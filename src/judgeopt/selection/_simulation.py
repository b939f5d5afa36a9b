"""The selection simulation: how often each rule returns a judge truly worse than the baseline.

:func:`simulate_selection` draws simulated compiles (candidate judges of known true quality
with correlated errors on a coarse rating scale) and runs each rule on them;
``benchmarks/selection_sim.py`` and the table in ``docs/judge.md`` use it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np

from ._config import SelectionConfig
from ._rules import choose, veto
from ._split import confirmation_split

#: The rules :func:`simulate_selection` runs.
_SIMULATED = ("best", "confirm", "veto")


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
        configs: Rules to compare by name (default: ``best`` and ``confirm``; the
            simulation runs these two and ``veto``).
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
    levels = _checked_levels(levels, mode_share)
    configs = _checked_configs(configs)
    # One stream for the simulated data and one per run for the rules' randomness, so the
    # rules compared in a run see the same data, split and resamples, and adding a rule to
    # ``configs`` does not change the data of later runs.
    rng = np.random.default_rng(seed)
    run_seeds = np.random.default_rng([seed, 1]).integers(2**31, size=(n_runs, 2))
    picks: dict[str, list[tuple[int, float]]] = {name: [] for name in configs}
    trues: list[np.ndarray] = []
    for split_seed, boot_seed in run_seeds.tolist():
        rho, true = _draw_judges(rng, budget, baseline_rho, gain_mean, gain_sd)
        trues.append(true)
        h = rng.standard_normal(n_valid)
        y = _judge_outputs(rng, h, rho, error_correlation, levels, mode_share)
        for name, cfg in configs.items():
            picks[name].append(_run_rule(cfg, h, y, split_seed, boot_seed, n_resamples))
    return _summary(picks, trues)


def _checked_levels(levels: int | None, mode_share: float | None) -> int | None:
    """``levels`` as an ``int`` (or ``None``) once it and ``mode_share`` are checked."""
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
    return levels


def _checked_configs(
    configs: Mapping[str, SelectionConfig] | None,
) -> Mapping[str, SelectionConfig]:
    """The rules to simulate (default: ``best`` and ``confirm``), each one simulated here."""
    if configs is None:
        configs = {"best": SelectionConfig(rule="best"), "confirm": SelectionConfig(rule="confirm")}
    for name, cfg in configs.items():
        if cfg.rule not in _SIMULATED:
            raise ValueError(
                f"configs[{name!r}]: rule {cfg.rule!r} is not simulated here (one of "
                f"{', '.join(_SIMULATED)}; the pooled rules are replayed on a judgement bank, "
                "judgeopt.bench)"
            )
    return configs


def _draw_judges(
    rng: np.random.Generator, budget: int, baseline_rho: float, gain_mean: float, gain_sd: float
) -> tuple[np.ndarray, np.ndarray]:
    """One run's judges: their true Pearson correlations and true qualities (Spearman)."""
    d = rng.normal(gain_mean, gain_sd, size=budget - 1)
    rho = np.clip(np.concatenate([[baseline_rho], baseline_rho + d]), -0.95, 0.95)
    return rho, (6 / math.pi) * np.arcsin(rho / 2)


def _run_rule(
    cfg: SelectionConfig,
    h: np.ndarray,
    y: np.ndarray,
    split_seed: int,
    boot_seed: int,
    n_resamples: int,
) -> tuple[int, float]:
    """The judge ``cfg``'s rule returns on one run (``0``: the baseline), and its claimed gain."""
    if cfg.rule == "best":
        scores = _spearman_rows(h, y)
        pick = int(np.argmax(scores))  # the baseline wins ties (index 0)
        return pick, float(scores[pick] - scores[0])
    search, confirm = confirmation_split(h, None, fraction=cfg.confirm_fraction, seed=split_seed)
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
    if result.chosen is None:
        return 0, 0.0
    return top[result.chosen], result.finalists[result.chosen].gain.delta


def _summary(
    picks: Mapping[str, list[tuple[int, float]]], trues: list[np.ndarray]
) -> dict[str, dict[str, float]]:
    """Per rule, from its pick and claimed gain in each run: :func:`simulate_selection`'s stats."""
    exists = [float((true[1:] > true[0]).any()) for true in trues]
    out: dict[str, dict[str, float]] = {}
    for name, runs in picks.items():
        worse = [float(true[p] < true[0]) for true, (p, _) in zip(trues, runs, strict=True)]
        gains = [float(true[p] - true[0]) for true, (p, _) in zip(trues, runs, strict=True)]
        t = np.asarray(gains)
        out[name] = {
            "p_worse": float(np.mean(worse)),
            "p_baseline": float(np.mean([float(p == 0) for p, _ in runs])),
            "mean_true_gain": float(t.mean()),
            "se_true_gain": float(t.std(ddof=1) / math.sqrt(t.size)) if t.size > 1 else math.nan,
            "mean_claimed_gain": float(np.mean([c for _, c in runs])),
            "p_best_exists": float(np.mean(exists)),
        }
    return out
