"""Factor-value priors: HPSS-style advantages estimated from earlier results.

PrExMe (Leiter & Eger, 2024, Sec. 5) found that a prompting pattern's *median* score over the
prompts that use it predicts its relative performance in a new setting (another task or
model) better than other aggregations. :class:`FactorPriors` turns that into a start for
HPSS: for every factor and value, an advantage in HPSS's units (score x ``score_scale``,
centred to mean zero over the factor's values) estimated from one or more earlier results
tables. ``HPSS(..., priors=...)`` and ``AutoSearch(..., priors=...)`` then start from these
advantages instead of spending evaluations on an initialisation pass.

Pure Python and numpy; the CSV reader uses the standard library.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt

from ._csv import read_csv_rows
from ._space import FactorSpace, Value, _check_value, _same_value

Aggregation: TypeAlias = Literal["median", "mean"]
Normalise: TypeAlias = Literal["none", "std"]
Row: TypeAlias = tuple[Mapping[str, Value], float]
"""One earlier result: a strategy (any mapping ``factor -> value``) and its score."""

AGGREGATIONS: tuple[str, ...] = ("median", "mean")
NORMALISATIONS: tuple[str, ...] = ("none", "std")
PRIORS_FORMAT = "judgeopt.priors"
PRIORS_VERSION = 1

FloatArray = npt.NDArray[np.float64]


def _aggregate(values: list[float], how: str) -> float:
    return float(np.median(values)) if how == "median" else float(np.mean(values))


def _find(pairs: Sequence[tuple[Value, Any]], value: Value) -> int:
    for k, (v, _) in enumerate(pairs):
        if _same_value(v, value):
            return k
    return -1


def _by_value(pairs: Iterable[tuple[Value, float]]) -> list[tuple[Value, list[float]]]:
    """The numbers of each value, values in first-seen order."""
    groups: list[tuple[Value, list[float]]] = []
    for value, x in pairs:
        k = _find(groups, value)
        if k < 0:
            groups.append((value, [x]))
        else:
            groups[k][1].append(x)
    return groups


def _setting_advantages(
    name: str,
    rows: list[Row],
    factors: tuple[str, ...] | None,
    aggregation: str,
    score_scale: float,
) -> tuple[tuple[str, ...], dict[str, list[tuple[Value, float]]], float]:
    """One setting's factors, the advantage of each value of each, and its scores' spread.

    ``factors`` are the earlier settings' (``None`` for the first): every row must name them.
    """
    finite = [(dict(s), float(v)) for s, v in rows if not math.isnan(float(v))]
    if not finite:
        raise ValueError(f"Setting {name!r} has no row with a finite score.")
    for s, _ in finite:
        names = tuple(s)
        if factors is None:
            factors = names
        elif set(names) != set(factors):
            raise ValueError(
                f"Setting {name!r} has a row with factors {sorted(names)!r}; earlier "
                f"rows have {sorted(factors)!r}. Every row must name the same factors."
            )
    assert factors is not None  # at least one finite row was read
    scores = [v * score_scale for _, v in finite]
    adv: dict[str, list[tuple[Value, float]]] = {}
    for f in factors:
        groups = _by_value(
            (_check_value(f, s[f]), r) for (s, _), r in zip(finite, scores, strict=True)
        )
        agg = [(v, _aggregate(rs, aggregation)) for v, rs in groups]
        centre = float(np.mean([a for _, a in agg]))
        adv[f] = [(v, a - centre) for v, a in agg]
    return factors, adv, float(np.std(scores))


def _combine(
    factors: tuple[str, ...],
    per_setting: list[dict[str, list[tuple[Value, float]]]],
    spreads: list[float],
    normalise: str,
) -> dict[str, tuple[tuple[Value, float], ...]]:
    """Each value's advantage averaged over the settings that saw it, re-centred per factor."""
    mean_spread = float(np.mean(spreads))
    scales = [
        (mean_spread / spread if spread > 0 else 0.0) if normalise == "std" else 1.0
        for spread in spreads
    ]
    combined: dict[str, tuple[tuple[Value, float], ...]] = {}
    for f in factors:
        sums = _by_value(
            (v, a * scale)
            for adv, scale in zip(per_setting, scales, strict=True)
            for v, a in adv[f]
        )
        means = [(v, float(np.mean(a))) for v, a in sums]
        centre = float(np.mean([a for _, a in means]))
        combined[f] = tuple((v, a - centre) for v, a in means)
    return combined


@dataclass(frozen=True)
class FactorPriors:
    """Per factor and value, an advantage estimated from earlier results.

    Build one with :meth:`estimate` (rows of ``(strategy, score)`` per earlier setting),
    :meth:`from_csv` (a tidy results table such as ``prexme_surface/dev.csv`` or the CSV
    ``judgeopt grid`` writes) or :meth:`from_dict` / :meth:`from_json`.

    **Estimation.** In each earlier setting (e.g. one model on one task) and for each factor,
    a value's score is the ``aggregation`` (median by default, as PrExMe recommends; or
    mean) of the scores of every row that uses it; its advantage is that minus the mean of
    those aggregates over the factor's values seen in the setting. Settings are then combined
    by averaging each value's advantage over the settings that saw it, and each factor is
    re-centred to mean zero. With ``normalise="std"`` each setting's advantages are first
    divided by the standard deviation of that setting's scores and the average is multiplied
    back by the mean of those deviations, so a setting whose scores spread widely does not
    outweigh the others while the result stays in score units (docs/search.md compares the
    two on PrExMe's surfaces). Rows with a NaN score are left out.

    **Units.** Advantages are in ``score * score_scale`` (percent for correlations with the
    default 100), the units of HPSS's advantages; a search with another ``score_scale``
    rescales them.

    **Matching a space** (:meth:`check`, :meth:`vectors`). Every factor and value of the
    priors must exist in the space (values compare by type, as in :class:`FactorSpace`):
    an unknown one is a ``ValueError`` that names it. A factor of the space the priors do
    not cover gets advantage 0 for every value; a value the priors do not cover gets 0, the
    mean of the covered values (the priors of a factor sum to zero, so the known values
    keep their advantages), and counts as unobserved in the search.

    Attributes:
        advantages: ``{factor: ((value, advantage), ...)}`` in first-seen value order.
        aggregation: How a value's scores were aggregated within a setting.
        normalise: ``"none"`` or ``"std"`` (see above).
        score_scale: The factor scores were multiplied by.
        settings: Names of the earlier settings the priors come from.

    Example:
        >>> rows = [({"fmt": "labels", "cot": "no"}, 0.30), ({"fmt": "labels", "cot": "yes"}, 0.34),
        ...         ({"fmt": "0-100", "cot": "no"}, 0.20), ({"fmt": "0-100", "cot": "yes"}, 0.22)]
        >>> priors = FactorPriors.estimate({"earlier": rows})
        >>> priors.advantage("fmt", "labels"), priors.advantage("cot", "yes")
        (5.5, 1.5)
    """

    advantages: Mapping[str, tuple[tuple[Value, float], ...]]
    aggregation: str = "median"
    normalise: str = "none"
    score_scale: float = 100.0
    settings: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(
                f"The `aggregation` of FactorPriors must be one of "
                f"{list(AGGREGATIONS)!r}. Got {self.aggregation!r} instead."
            )
        if self.normalise not in NORMALISATIONS:
            raise ValueError(
                f"The `normalise` of FactorPriors must be one of "
                f"{list(NORMALISATIONS)!r}. Got {self.normalise!r} instead."
            )
        if not (
            isinstance(self.score_scale, int | float)
            and math.isfinite(self.score_scale)
            and self.score_scale > 0
        ):
            raise ValueError(
                f"The `score_scale` of FactorPriors must be a finite float > 0. "
                f"Got {self.score_scale!r} instead."
            )
        clean: dict[str, tuple[tuple[Value, float], ...]] = {}
        for name, pairs in self.advantages.items():
            if not isinstance(name, str) or not name:
                raise ValueError(
                    f"A factor name in FactorPriors must be a non-empty string. Got {name!r}."
                )
            out: list[tuple[Value, float]] = []
            for pair in pairs:
                value, adv = pair
                value = _check_value(name, value)
                if _find(out, value) >= 0:
                    raise ValueError(
                        f"FactorPriors lists the value {value!r} of factor `{name}` twice."
                    )
                a = float(adv)
                if not math.isfinite(a):
                    raise ValueError(
                        f"The prior advantage of `{name}`={value!r} must be finite. Got {adv!r}."
                    )
                out.append((value, a))
            clean[name] = tuple(out)
        object.__setattr__(self, "advantages", clean)
        object.__setattr__(self, "settings", tuple(str(s) for s in self.settings))
        object.__setattr__(self, "score_scale", float(self.score_scale))

    # Estimation --------------------------------------------------------------------------
    @classmethod
    def estimate(
        cls,
        results: Mapping[str, Iterable[Row]] | Iterable[Row],
        *,
        aggregation: Aggregation = "median",
        normalise: Normalise = "none",
        score_scale: float = 100.0,
    ) -> FactorPriors:
        """Estimate priors from earlier results.

        Args:
            results: Either ``{setting_name: rows}`` for several earlier settings, or the
                rows of one setting. A row is ``(strategy, score)``: a mapping
                ``factor -> value`` (a :class:`Strategy` works) and its score, higher is
                better, NaN for a failure (left out). Every row names the same factors.
            aggregation: ``"median"`` (PrExMe's recommendation) or ``"mean"``.
            normalise: ``"none"`` or ``"std"`` (see the class docstring).
            score_scale: Multiplies the scores (100: correlations in percent).

        Returns:
            The priors.

        Raises:
            ValueError: On an unknown aggregation or normalisation, no setting, a setting
                without a finite score, or rows that name different factors.
        """
        if aggregation not in AGGREGATIONS:
            raise ValueError(
                f"The `aggregation` must be one of {list(AGGREGATIONS)!r}. "
                f"Got {aggregation!r} instead."
            )
        if normalise not in NORMALISATIONS:
            raise ValueError(
                f"The `normalise` must be one of {list(NORMALISATIONS)!r}. "
                f"Got {normalise!r} instead."
            )
        settings: dict[str, list[Row]] = (
            {str(k): list(v) for k, v in results.items()}
            if isinstance(results, Mapping)
            else {"results": list(results)}
        )
        if not settings:
            raise ValueError("FactorPriors.estimate needs at least one setting.")
        factors: tuple[str, ...] | None = None
        per_setting: list[dict[str, list[tuple[Value, float]]]] = []
        spreads: list[float] = []
        for name, rows in settings.items():
            factors, adv, spread = _setting_advantages(
                name, rows, factors, aggregation, score_scale
            )
            per_setting.append(adv)
            spreads.append(spread)
        assert factors is not None
        combined = _combine(factors, per_setting, spreads, normalise)
        return cls(combined, aggregation, normalise, score_scale, tuple(settings))

    @classmethod
    def from_csv(
        cls,
        path: str | Path,
        *,
        factors: Sequence[str],
        objective: str,
        group: Sequence[str] = (),
        where: Mapping[str, Sequence[str]] | None = None,
        aggregation: Aggregation = "median",
        normalise: Normalise = "none",
        score_scale: float = 100.0,
    ) -> FactorPriors:
        """Estimate priors from a tidy CSV with one row per (setting, strategy).

        Factor values are read as strings (as :func:`judgeopt.bench.load_surfaces` and
        :func:`judgeopt.analysis.load_results` read them); an empty objective cell is a
        failure and left out.

        Args:
            path: The CSV file (with a header row).
            factors: Columns holding the factor values.
            objective: Column with the score (higher is better).
            group: Columns whose values identify one earlier setting (e.g. ``model, task``).
            where: Keep only rows whose column values are among those given, e.g.
                ``{"model": ["LLaMA3-8B", "Mixtral-8x7B"]}``.
            aggregation: See :meth:`estimate`.
            normalise: See :meth:`estimate`.
            score_scale: See :meth:`estimate`.

        Raises:
            ValueError: On a missing file or column, a non-numeric score, or no row left
                after ``where``.
        """
        path = Path(path)
        rows = read_csv_rows(path, [*group, *factors, objective, *(where or {})], "Results CSV")
        keep = {k: {str(x) for x in v} for k, v in (where or {}).items()}
        settings: dict[str, list[Row]] = {}
        for line, row in enumerate(rows, start=2):
            if any(row[k] not in allowed for k, allowed in keep.items()):
                continue
            cell = (row[objective] or "").strip()
            try:
                score = float(cell) if cell else math.nan
            except ValueError:
                raise ValueError(
                    f"{path.name} line {line}: `{objective}` must be a number "
                    f"or empty. Got {cell!r}."
                ) from None
            name = "/".join(row[g] for g in group) if group else path.stem
            settings.setdefault(name, []).append(({f: row[f] for f in factors}, score))
        if not settings:
            raise ValueError(f"No row of {path.name} matches `where`={dict(where or {})!r}.")
        return cls.estimate(
            settings, aggregation=aggregation, normalise=normalise, score_scale=score_scale
        )

    # Reading ------------------------------------------------------------------------------
    def advantage(self, factor: str, value: Value) -> float:
        """The prior advantage of ``factor=value`` (0 for a value or factor not covered)."""
        pairs = self.advantages.get(factor, ())
        k = _find(pairs, value)
        return pairs[k][1] if k >= 0 else 0.0

    def check(self, space: FactorSpace) -> None:
        """Raise ``ValueError`` if a factor or value of the priors is not in ``space``.

        The message names every unknown factor and value and lists what the space allows.
        """
        unknown_f = [f for f in self.advantages if f not in space]
        if unknown_f:
            raise ValueError(
                f"The priors name factor(s) {unknown_f!r} that the space does not "
                f"have. Factors: {list(space.names)!r}."
            )
        problems = []
        for f, pairs in self.advantages.items():
            bad = [v for v, _ in pairs if v not in space[f]]
            if bad:
                problems.append(
                    f"factor `{f}` has no value(s) {bad!r} (allowed: {list(space[f].values)!r})"
                )
        if problems:
            raise ValueError("The priors do not fit the space: " + "; ".join(problems) + ".")

    def vectors(
        self, space: FactorSpace, score_scale: float | None = None
    ) -> list[tuple[FloatArray, npt.NDArray[np.bool_]]]:
        """Per factor of ``space`` (in its order): the advantage of every value and a mask of
        the values the priors cover. Uncovered values get 0 (see the class docstring).

        Args:
            space: The space to match (checked with :meth:`check`).
            score_scale: The search's score scale; the advantages are rescaled from
                :attr:`score_scale` to it. ``None`` keeps :attr:`score_scale`.

        Raises:
            ValueError: If the priors do not fit ``space``.
        """
        self.check(space)
        ratio = 1.0 if score_scale is None else float(score_scale) / self.score_scale
        out = []
        for f in space.factors:
            pairs = self.advantages.get(f.name, ())
            a = np.zeros(len(f.values))
            known = np.zeros(len(f.values), dtype=bool)
            for j, v in enumerate(f.values):
                k = _find(pairs, v)
                if k >= 0:
                    a[j] = pairs[k][1] * ratio
                    known[j] = True
            if known.any():
                a[known] -= a[known].mean()  # already ~0; guards against rounding in JSON
            out.append((a, known))
        return out

    # Serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; values keep their JSON type (``10`` vs ``"10"``)."""
        return {
            "format": PRIORS_FORMAT,
            "version": PRIORS_VERSION,
            "aggregation": self.aggregation,
            "normalise": self.normalise,
            "score_scale": self.score_scale,
            "settings": list(self.settings),
            "advantages": {f: [[v, a] for v, a in pairs] for f, pairs in self.advantages.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FactorPriors:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: On another format or version, or malformed advantages.
        """
        if data.get("format") != PRIORS_FORMAT or data.get("version") != PRIORS_VERSION:
            raise ValueError(
                f"Not a judgeopt priors object (format {data.get('format')!r}, version "
                f"{data.get('version')!r}); expected {PRIORS_FORMAT!r} version {PRIORS_VERSION}."
            )
        raw = data.get("advantages")
        if not isinstance(raw, Mapping):
            raise ValueError(
                "The `advantages` of a priors object must be an object "
                "{factor: [[value, advantage], ...]}."
            )
        advantages: dict[str, tuple[tuple[Value, float], ...]] = {}
        for f, pairs in raw.items():
            if not isinstance(pairs, list) or not all(
                isinstance(p, list | tuple) and len(p) == 2 for p in pairs
            ):
                raise ValueError(
                    f"The priors of factor `{f}` must be a list of [value, advantage] pairs."
                )
            advantages[f] = tuple((p[0], p[1]) for p in pairs)
        return cls(
            advantages,
            str(data.get("aggregation", "median")),
            str(data.get("normalise", "none")),
            float(data.get("score_scale", 100.0)),
            tuple(data.get("settings", ())),
        )

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> FactorPriors:
        """Parse :meth:`to_json` output (or a file's text)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"Priors JSON is malformed: {e}") from e
        if not isinstance(data, dict):
            raise ValueError("Priors JSON must be an object.")
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path``."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> FactorPriors:
        """Read priors written by :meth:`save`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))
