"""Best strategies with significance clusters (PrExMe Sec. 3 "Score Extraction & Evaluation").

PrExMe marks the strategies (or models) that are in the best *significance cluster* according
to a permute-input test (Deutsch, Dror & Roth 2021; ``p <= 0.075``). Here a candidate is in the
top cluster when it is **not significantly worse than the best**: the one-sided test of "the
best correlates better than this candidate" gives ``p > alpha``.

Three tests, chosen by what the data holds:

* ``"permutation"``: per-item judge and human scores are given (:class:`ItemScores`); the
  paired PERM-INPUTS test :func:`judgeopt.metrics.permutation_test` on the items both
  strategies scored.
* ``"fisher-z"``: only aggregate correlations and their number of items are known (e.g.
  PrExMe's published table with ``n_segments``); an approximation that treats the two
  correlations as independent: ``z = atanh(r)`` with variance ``1/(n-3)`` (Pearson),
  ``1.06/(n-3)`` (Spearman) or ``0.437/(n-4)`` (Kendall; Fieller, Hartley & Pearson 1957).
  It ignores that both correlations share the human scores, which the paired test exploits,
  so its clusters are wider (more conservative) than PrExMe's.
* ``"none"``: neither is available; strategies are only ranked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import check_int
from ._items import ItemScores
from ._table import FloatArray, ResultsTable

__all__ = [
    "TESTS",
    "Cluster",
    "RankedStrategy",
    "best_between",
    "best_strategies",
    "fisher_z_pvalue",
]

TESTS: tuple[str, ...] = ("permutation", "fisher-z", "none")
"""The significance tests a :class:`Cluster` can be built with."""

# The correlations of judgeopt.metrics (not imported here: it loads scipy, and the CLI builds
# its parser from this package's constants).
METHODS: tuple[str, ...] = ("spearman", "kendall", "pearson")

# Variance factor c and offset k of atanh(r): var = c / (n - k).
_FISHER = {"pearson": (1.0, 3.0), "spearman": (1.06, 3.0), "kendall": (0.437, 4.0)}


# --------------------------------------------------------------------------- tests
def fisher_z_pvalue(
    r_best: float, n_best: float, r_other: float, n_other: float, method: str = "kendall"
) -> float:
    """One-sided p-value of "``r_best`` > ``r_other``" for two independent correlations.

    Fisher's ``z = atanh(r)`` with the variance of ``method`` (see the module docstring).

    Example:
        >>> round(fisher_z_pvalue(0.30, 500, 0.20, 500, "kendall"), 4)
        0.0055
    """
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    if method not in _FISHER:
        raise ValueError(f"`method` must be one of {list(METHODS)!r}. Got {method!r} instead.")
    c, k = _FISHER[method]
    if not (n_best > k and n_other > k):
        raise ValueError(
            f"The Fisher-z test of {method} needs more than {k:g} items; "
            f"got {n_best:g} and {n_other:g}."
        )
    lim = 1.0 - 1e-9
    z_b = math.atanh(min(lim, max(-lim, r_best)))
    z_o = math.atanh(min(lim, max(-lim, r_other)))
    se = math.sqrt(c / (n_best - k) + c / (n_other - k))
    return float(stats.norm.sf((z_b - z_o) / se))


def _infer_method(objective: str, method: str | None) -> str:
    if method is not None:
        if method not in METHODS:
            raise ValueError(f"`method` must be one of {list(METHODS)!r}. Got {method!r} instead.")
        return method
    for m in METHODS:
        if m in objective.lower():
            return m
    raise ValueError(
        f"Cannot tell which correlation the objective {objective!r} is; pass `method` "
        f"(one of {list(METHODS)!r}) for the significance test."
    )


def _paired_pvalue(
    best: tuple[tuple[str, ...], FloatArray, FloatArray],
    other: tuple[tuple[str, ...], FloatArray, FloatArray],
    method: str,
    n_resamples: int,
    rng: np.random.Generator,
) -> float:
    """PERM-INPUTS p-value of "best beats other" on the items both scored (NaN if untestable)."""
    from ..metrics import permutation_test  # lazy: judgeopt.metrics loads SciPy

    pos = {item: i for i, item in enumerate(other[0])}
    ia: list[int] = []
    ib: list[int] = []
    for i, item in enumerate(best[0]):
        j = pos.get(item)
        if j is not None and math.isfinite(best[1][i]) and math.isfinite(other[1][j]):
            ia.append(i)
            ib.append(j)
    a_idx, b_idx = np.asarray(ia, dtype=np.intp), np.asarray(ib, dtype=np.intp)
    human = best[2][a_idx]
    if not np.allclose(human, other[2][b_idx], rtol=0.0, atol=1e-9):
        raise ValueError(
            "The item scores give different human scores for the same item id in "
            "the two compared strategies; item ids must identify the same item."
        )
    try:
        res = permutation_test(
            human, best[1][a_idx], other[1][b_idx], method=method, n_resamples=n_resamples, seed=rng
        )
    except ValueError:
        # Fewer than 3 shared items, or a constant side: the correlation is undefined.
        return math.nan
    return res.p_value


@dataclass(frozen=True)
class RankedStrategy:
    """One candidate of a :class:`Cluster`.

    Attributes:
        config: What identifies it: the factor values (and the compared column's value).
        value: Its objective.
        n_items: Its number of items, when known.
        p_value: One-sided p-value of "the best beats it" (``None`` for the best itself or an
            untested candidate; ``NaN`` when the test was undefined).
        in_cluster: Whether it is in the top cluster (``None`` when not tested).
    """

    config: dict[str, str]
    value: float
    n_items: float | None = None
    p_value: float | None = None
    in_cluster: bool | None = None

    @property
    def label(self) -> str:
        """The config's values joined by ``", "``."""
        return ", ".join(self.config.values())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable form."""

        def num(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else round(float(v), 6)

        return {
            "config": dict(self.config),
            "value": num(self.value),
            "n_items": num(self.n_items),
            "p_value": num(self.p_value),
            "in_cluster": self.in_cluster,
        }


@dataclass(frozen=True)
class Cluster:
    """The candidates of one setting, best first, with the top significance cluster.

    Attributes:
        setting: The fixed columns and their values (e.g. ``{"model": ..., "task": ...}``).
        compared: ``"strategy"``, or the column whose values compete (e.g. ``"model"``).
        test: One of :data:`TESTS`.
        method: The correlation the test used (``None`` for ``"none"``).
        alpha: Significance level.
        n_candidates: Candidates with an objective.
        n_tested: Candidates compared with the best.
        size: Candidates in the top cluster, the best included (``None`` without a test).
        ranked: The first candidates in objective order (all cluster members among them).
    """

    setting: dict[str, str]
    compared: str
    test: str
    method: str | None
    alpha: float
    n_candidates: int
    n_tested: int
    size: int | None
    ranked: tuple[RankedStrategy, ...]

    @property
    def best(self) -> RankedStrategy:
        """The candidate with the highest objective."""
        return self.ranked[0]

    @property
    def members(self) -> list[RankedStrategy]:
        """The listed candidates in the top cluster (just the best without a test)."""
        return [r for i, r in enumerate(self.ranked) if i == 0 or r.in_cluster]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable form."""
        return {
            "setting": dict(self.setting),
            "compared": self.compared,
            "test": self.test,
            "method": self.method,
            "alpha": self.alpha,
            "n_candidates": self.n_candidates,
            "n_tested": self.n_tested,
            "size": self.size,
            "ranked": [r.to_dict() for r in self.ranked],
        }


def _choose_test(
    table: ResultsTable, items: ItemScores | None, method: str | None, test: str | None
) -> tuple[str, str | None]:
    if test is None:
        test = (
            "permutation"
            if items is not None
            else ("fisher-z" if table.n_items is not None else "none")
        )
    if test not in TESTS:
        raise ValueError(f"`test` must be one of {list(TESTS)!r}. Got {test!r} instead.")
    if test == "permutation" and items is None:
        raise ValueError("The permutation test needs per-item scores: pass `items`.")
    if test == "fisher-z" and table.n_items is None:
        raise ValueError(
            "The Fisher-z test needs the number of items behind each value: load "
            "the table with `n_column`."
        )
    if test == "none":
        return test, None
    return test, _infer_method(table.objective, method)


def _build_cluster(
    setting: dict[str, str],
    compared: str,
    cands: list[tuple[dict[str, str], float, float | None, dict[str, str]]],
    *,
    test: str,
    method: str | None,
    items: ItemScores | None,
    alpha: float,
    max_candidates: int,
    n_resamples: int,
    rng: np.random.Generator,
) -> Cluster:
    """``cands``: (config, value, n_items, item key) sorted best first."""
    n = len(cands)
    pvals: list[float | None] = [None] * n
    n_tested = 0
    if test == "fisher-z" and method is not None:
        _, v0, n0, _ = cands[0]
        for i in range(1, n):
            _, v, ni, _ = cands[i]
            if n0 is None or ni is None or not (math.isfinite(n0) and math.isfinite(ni)):
                continue
            pvals[i] = fisher_z_pvalue(v0, n0, v, ni, method)
            n_tested += 1
    elif test == "permutation" and method is not None and items is not None:
        best = items.get(cands[0][3])
        if best is not None:
            for i in range(1, min(n, max_candidates)):
                other = items.get(cands[i][3])
                if other is None:
                    continue
                pvals[i] = _paired_pvalue(best, other, method, n_resamples, rng)
                n_tested += 1
    flags: list[bool | None] = [
        None if p is None or not math.isfinite(p) else bool(p > alpha) for p in pvals
    ]
    size: int | None = None
    # Without a test, or when the best itself could not be tested, there is no cluster.
    if test != "none" and (n == 1 or n_tested):
        flags[0] = True
        size = 1 + sum(1 for f in flags[1:] if f)
    keep = max(max_candidates, 1)
    # NOTE: every cluster member is listed even beyond max_candidates, so the report can
    # name them all (Fisher-z tests every candidate).
    shown = [i for i in range(n) if i < keep or flags[i]]
    ranked = tuple(
        RankedStrategy(
            config=cands[i][0],
            value=cands[i][1],
            n_items=cands[i][2],
            p_value=pvals[i],
            in_cluster=flags[i],
        )
        for i in shown
    )
    return Cluster(
        setting=setting,
        compared=compared,
        test=test,
        method=method,
        alpha=alpha,
        n_candidates=n,
        n_tested=n_tested,
        size=size,
        ranked=ranked,
    )


def _check_common(alpha: float, max_candidates: int, n_resamples: int) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise ValueError(f"`alpha` must be a number in (0, 1). Got {alpha!r} instead.")
    check_int(max_candidates, "max_candidates", min_value=1)
    check_int(n_resamples, "n_resamples", min_value=1)


def _n(table: ResultsTable, row: int) -> float | None:
    return None if table.n_items is None else float(table.n_items[row])


def best_strategies(
    table: ResultsTable,
    *,
    items: ItemScores | None = None,
    test: str | None = None,
    method: str | None = None,
    alpha: float = 0.075,
    max_candidates: int = 20,
    n_resamples: int = 1000,
    seed: int | np.random.Generator | None = 0,
) -> list[Cluster]:
    """The best strategies of every setting (group) with their top significance cluster.

    Args:
        table: The results.
        items: Per-item scores for the permute-input test.
        test: One of :data:`TESTS`; default ``"permutation"`` with ``items``, else
            ``"fisher-z"`` when the table has item counts, else ``"none"``.
        method: Correlation of the objective (default: read from the objective's name).
        alpha: Significance level (PrExMe uses 0.075).
        max_candidates: With the permutation test, only the best ``max_candidates`` are
            tested (each test costs ``n_resamples`` correlations); also the number of
            candidates listed besides the cluster members.
        n_resamples: Permutations per test.
        seed: Seed or generator of the permutations.

    Returns:
        One :class:`Cluster` per setting, in order of first appearance.

    Raises:
        ValueError: On bad arguments, a test the data cannot support, or an objective whose
            correlation cannot be inferred without ``method``.
    """
    _check_common(alpha, max_candidates, n_resamples)
    test, method = _choose_test(table, items, method, test)
    rng = np.random.default_rng(seed)
    ids, keys = table.setting_index()
    finite = table.finite
    out = []
    for k, key in enumerate(keys):
        rows = np.flatnonzero(finite & (ids == k))
        if rows.size == 0:
            continue
        rows = rows[np.argsort(-table.values[rows], kind="stable")]
        setting = dict(zip(table.group, key, strict=True))
        cands = [
            (
                table.config(int(r)),
                float(table.values[r]),
                _n(table, int(r)),
                {**setting, **table.config(int(r))},
            )
            for r in rows
        ]
        out.append(
            _build_cluster(
                setting,
                "strategy",
                cands,
                test=test,
                method=method,
                items=items,
                alpha=alpha,
                max_candidates=max_candidates,
                n_resamples=n_resamples,
                rng=rng,
            )
        )
    return out


def best_between(
    table: ResultsTable,
    between: str,
    *,
    items: ItemScores | None = None,
    test: str | None = None,
    method: str | None = None,
    alpha: float = 0.075,
    n_resamples: int = 1000,
    seed: int | np.random.Generator | None = 0,
) -> list[Cluster]:
    """Compare the best strategy of every value of ``between`` (PrExMe Tables 2 and 10).

    For every setting of the other group columns (e.g. every task), each value of
    ``between`` (e.g. each model) contributes its best strategy; the cluster holds the values
    whose best is not significantly worse than the overall best.

    Args:
        table: The results.
        between: A group column, e.g. ``"model"``.
        items, test, method, alpha, n_resamples, seed: As :func:`best_strategies`. With the
            permutation test, the item ids of one setting must be shared across ``between``.

    Returns:
        One :class:`Cluster` per setting of the other group columns.

    Raises:
        ValueError: If ``between`` is not a group column, or as :func:`best_strategies`.
    """
    if between not in table.group:
        raise ValueError(
            f"`between` must be one of the group columns {list(table.group)!r}. "
            f"Got {between!r} instead."
        )
    _check_common(alpha, 1, n_resamples)
    test, method = _choose_test(table, items, method, test)
    rng = np.random.default_rng(seed)
    others = tuple(c for c in table.group if c != between)
    ids, keys = table.setting_index(others)
    finite = table.finite
    codes = table.codes[between]
    out = []
    for k, key in enumerate(keys):
        setting = dict(zip(others, key, strict=True))
        cands = []
        for v, name in enumerate(table.levels[between]):
            rows = np.flatnonzero(finite & (ids == k) & (codes == v))
            if rows.size == 0:
                continue
            r = int(rows[np.argmax(table.values[rows])])
            cands.append(
                (
                    {between: name, **table.config(r)},
                    float(table.values[r]),
                    _n(table, r),
                    {**setting, between: name, **table.config(r)},
                )
            )
        if not cands:
            continue
        cands.sort(key=lambda c: -c[1])
        out.append(
            _build_cluster(
                setting,
                between,
                cands,
                test=test,
                method=method,
                items=items,
                alpha=alpha,
                max_candidates=len(cands),
                n_resamples=n_resamples,
                rng=rng,
            )
        )
    return out
