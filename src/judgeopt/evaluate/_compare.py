"""Two judges on the same records: the paired-bootstrap comparison of their scores."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..data import Record
from ..metrics import paired_bootstrap, paired_bootstrap_mean
from ._eval_result import EvalResult, ItemResult, correct, item_predictions
from ._run import evaluate

__all__ = ["Comparison", "compare", "evaluate_against"]

log = logging.getLogger("judgeopt.evaluate")


@dataclass(frozen=True)
class Comparison:
    """Two judges on the same items: their scores and the paired difference.

    The exported judge's ``comparisons`` and ``judgeopt evaluate --compare/--baseline`` show
    this. ``gain`` is ``chosen - baseline``; its interval comes from a paired bootstrap
    (:func:`judgeopt.metrics.paired_bootstrap`: the same resampled items, or whole groups
    for a group-level correlation, for both judges; pairwise accuracy: items).

    Attributes:
        metric: ``spearman``, ``kendall``, ``pearson`` or ``accuracy``.
        level: ``dataset`` or ``group``.
        n: Items compared.
        n_units: Units resampled (items, or groups at group level).
        baseline: ``{"label", "score", "parse_failures", "call_failures", "n"}``.
        chosen: The same for the other judge.
        gain: ``chosen.score - baseline.score``.
        gain_ci: The bootstrap interval of ``gain``.
        confidence: Its coverage.
        p_not_positive: Share of resamples with a gain <= 0.
        n_resamples: Bootstrap resamples.
        note: Caveat for the reader (e.g. that the items were used to choose the judge).
    """

    metric: str
    level: str
    n: int
    n_units: int
    baseline: dict[str, Any]
    chosen: dict[str, Any]
    gain: float | None
    gain_ci: tuple[float | None, float | None]
    confidence: float
    p_not_positive: float | None
    n_resamples: int
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (the exported judge's ``comparisons`` entries)."""
        out = asdict(self)
        out["gain_ci"] = list(self.gain_ci)
        return out

    def lines(self, split: str) -> list[str]:
        """A short human-readable report."""

        def score(d: dict[str, Any]) -> str:
            v = d["score"]
            return "n/a" if v is None else f"{v:.3f}"

        def fails(d: dict[str, Any]) -> str:
            return f"{d['parse_failures']} unparsed, {d['call_failures']} failed calls"

        unit = "groups" if self.level == "group" else "items"
        width = max(10, len(self.baseline["label"]), len(self.chosen["label"]))
        out = [
            f"{split} ({self.n} items{'' if unit == 'items' else f', {self.n_units} groups'}"
            f", {self.metric}{', group level' if self.level == 'group' else ''}):",
            f"  {self.baseline['label']:<{width}} {score(self.baseline):>7}   "
            f"({fails(self.baseline)})",
            f"  {self.chosen['label']:<{width}} {score(self.chosen):>7}   ({fails(self.chosen)})",
        ]
        if self.gain is None:
            out.append(f"  {'gain':<{width}} n/a (a score is undefined)")
        else:
            lo, hi = self.gain_ci
            ci = (
                ""
                if lo is None or hi is None
                else f"  {self.confidence:.0%} interval [{lo:+.3f}, {hi:+.3f}]"
                f", bootstrap over {self.n_units} {unit}"
            )
            verdict = ""
            if lo is not None and hi is not None:
                verdict = "  (better)" if lo > 0 else "  (worse)" if hi < 0 else "  (within noise)"
            out.append(f"  {'gain':<{width}} {self.gain:+.3f}{ci}{verdict}")
        if self.note:
            out.append(f"  note: {self.note}")
        return out


def compare(
    chosen: EvalResult,
    baseline: EvalResult,
    records: Sequence[Record],
    *,
    metric: str | None = None,
    labels: tuple[str, str] = ("baseline", "chosen"),
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    note: str | None = None,
) -> Comparison:
    """Compare two evaluations of the same records (paired bootstrap of the difference).

    Args:
        chosen: One judge's evaluation (the gain is this minus ``baseline``).
        baseline: The other judge's evaluation, on the same records.
        records: The records both judged (for the human scores and groups).
        metric: The metric (default ``spearman``; ``accuracy`` for pairwise results).
        labels: Names of ``baseline`` and ``chosen`` in the report.
        n_resamples: Bootstrap resamples.
        confidence: Coverage of the interval.
        seed: Bootstrap seed.
        note: A caveat printed with the report.

    Raises:
        ValueError: When the evaluations do not cover the same records.
    """
    ids = [r.id for r in records]
    items_a, items_b = _paired_items(chosen, baseline, ids)
    pairwise = chosen.accuracy is not None or baseline.accuracy is not None
    metric = metric or ("accuracy" if pairwise else "spearman")
    level = "dataset" if pairwise else chosen.level
    groups = [r.group_id or r.id for r in records]
    a_side, b_side = _side(chosen, labels[1], metric), _side(baseline, labels[0], metric)
    gain: float | None = None
    lo = hi = p_not = None
    n_units = len(set(groups)) if level == "group" else len(ids)
    if a_side["score"] is not None and b_side["score"] is not None:
        gain = a_side["score"] - b_side["score"]
        lo, hi, p_not = _gain_interval(
            items_a,
            items_b,
            metric,
            groups if level == "group" else None,
            n_resamples=n_resamples,
            confidence=confidence,
            seed=seed,
        )
    return Comparison(
        metric=metric,
        level=level,
        n=len(ids),
        n_units=n_units,
        baseline=b_side,
        chosen=a_side,
        gain=gain,
        gain_ci=(lo, hi),
        confidence=confidence,
        p_not_positive=p_not,
        n_resamples=n_resamples,
        note=note,
    )


def _paired_items(
    chosen: EvalResult, baseline: EvalResult, ids: Sequence[str]
) -> tuple[list[ItemResult], list[ItemResult]]:
    """Both evaluations' items in the order of ``ids`` (a ``ValueError`` if one lacks any)."""
    by_a = {i.id: i for i in chosen.items}
    by_b = {i.id: i for i in baseline.items}
    missing = [i for i in ids if i not in by_a or i not in by_b]
    if missing:
        raise ValueError(
            f"compare(): both evaluations must cover the same records; "
            f"{len(missing)} are missing (first: {missing[:3]!r})."
        )
    return [by_a[i] for i in ids], [by_b[i] for i in ids]


def _side(res: EvalResult, label: str, metric: str) -> dict[str, Any]:
    """One judge's part of a :class:`Comparison` (``score`` ``None`` when undefined)."""
    v = res.metric(metric)
    return {
        "label": label,
        "score": None if math.isnan(v) else v,
        "n": res.n,
        "parse_failures": res.parse_failures,
        "call_failures": res.call_failures,
    }


def _gain_interval(
    items_a: Sequence[ItemResult],
    items_b: Sequence[ItemResult],
    metric: str,
    groups: Sequence[str] | None,
    *,
    n_resamples: int,
    confidence: float,
    seed: int,
) -> tuple[float | None, float | None, float | None]:
    """The gain's bootstrap interval and ``p_not_positive`` (``None``s, logged, if undefined)."""
    try:
        if metric == "accuracy":
            m = paired_bootstrap_mean(
                correct(items_a),
                correct(items_b),
                n_resamples=n_resamples,
                confidence=confidence,
                seed=seed,
            )
            return m.low, m.high, m.p_not_positive
        r = paired_bootstrap(
            [float(i.human) for i in items_a],  # type: ignore[arg-type]
            item_predictions(items_a),
            item_predictions(items_b),
            metric,
            groups,
            n_resamples=n_resamples,
            confidence=confidence,
            seed=seed,
        )
        return r.low, r.high, r.p_not_positive
    except ValueError as e:
        log.warning("no interval for the gain: %s", e)
        return None, None, None


def evaluate_against(
    program: Any,
    reference: Any,
    records: Sequence[Record],
    *,
    labels: tuple[str, str] = ("baseline", "chosen"),
    lm: Any = None,
    threads: int | None = None,
    progress: bool = True,
    desc: str = "",
    note: str | None = None,
    seed: int = 0,
    max_consecutive_failures: int | None = None,
    explain: bool = False,
) -> tuple[EvalResult, EvalResult, Comparison]:
    """Evaluate ``program`` and ``reference`` on the same records and compare them.

    Args:
        program: The judge whose gain is reported (a judge or an ensemble).
        reference: The judge it is compared with (e.g. the MT-Bench baseline).
        records: Labelled records.
        labels: Names of ``reference`` and ``program`` in the report.
        lm: The LM for both (default: each one's own, else DSPy's configured one).
        threads: Judge calls in flight at once (``None``: :func:`default_threads`).
        progress: Show progress bars.
        desc: Prefix of the progress bars' labels.
        note: A caveat for the report.
        seed: Bootstrap seed.
        max_consecutive_failures: Stop (:class:`judgeopt.lm.LMUnavailable`) after this many
            judge calls in a row failed transiently (see :func:`evaluate`).
        explain: Let judges that rate first write their explanations (see
            :func:`evaluate`); default: stop at the rating.

    Returns:
        ``(program's result, reference's result, comparison)``.
    """
    prefix = f"{desc}: " if desc else ""
    ref = evaluate(
        reference,
        records,
        lm=lm,
        threads=threads,
        progress=progress,
        desc=f"{prefix}{labels[0]}",
        max_consecutive_failures=max_consecutive_failures,
        explain=explain,
    )
    res = evaluate(
        program,
        records,
        lm=lm,
        threads=threads,
        progress=progress,
        desc=f"{prefix}{labels[1]}",
        max_consecutive_failures=max_consecutive_failures,
        explain=explain,
    )
    return res, ref, compare(res, ref, records, labels=labels, seed=seed, note=note)
