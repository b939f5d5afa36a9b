"""A prompt ensemble: several judges of one task and aspect, their ratings averaged.

Beyond the HPSS paper. Each member is a :class:`JudgeProgram` (one prompting strategy, its
own artifacts and decoding). A member's rating ``r`` is z-normalised with the mean and
standard deviation of that member's ratings on validation items (``z = (r - mean) / sd``), so
that a 1-3 judge and a 1-10 judge weigh the same; the ensemble's score is the weighted mean
``z`` of the members whose rating parsed (equal weights unless given; an unparsed member's
weight is shared by the others), reported on the first member's scale (``mean_1 + sd_1 * z``)
so it reads like a rating. An item on which no member parsed is an unparsed item
(``score=None``), counted like any other.

The compile builds one with ``--ensemble M`` (the ``M`` best strategies of the search; with
``--ensemble-anchor W`` the baseline at weight ``W`` and the ``M`` best other strategies
sharing the rest; with ``--ensemble-stack RIDGE`` weights fitted on the labels, none
negative); its exported JSON holds every member's own export and weight
(``docs/judge.md``, "Prompt ensembles").
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dspy

from judgeopt import __version__
from judgeopt._io import write_text_atomic
from judgeopt.scoring import combine_z

from ._compiled import CompiledViews, CompileReport
from ._export import ENSEMBLE_FORMAT, FORMAT_VERSION, export_judge, read_judge_file
from ._load import judge_from_dict
from ._program import JudgeProgram

__all__ = ["INDEX_FORMAT", "JudgeEnsemble", "load_judge", "load_judges", "write_judge_index"]


class JudgeEnsemble(CompiledViews, dspy.Module):  # type: ignore[misc]  # dspy: no type information
    """The mean of several judges' z-normalised ratings, as one DSPy module.

    Call it like a :class:`JudgeProgram`: ``ensemble(**fields)`` returns a
    ``dspy.Prediction`` with ``score`` (``None`` when no member's rating parsed),
    ``member_scores`` (each member's rating or ``None``), ``z`` (the mean z-score),
    ``parse_error`` and ``raw`` (the first member's output).

    What the compile found out about it (``validation``, ``test``, ``selection``,
    ``comparisons``, ``model_name``) is its :attr:`report_` (a
    :class:`~judgeopt.judge.CompileReport`), read through read-only properties as a
    :class:`JudgeProgram`'s; :meth:`with_report` derives a copy with another one.

    Args:
        members: Judges of one pointwise task and aspect (at least two).
        means: Each member's mean rating on validation items.
        sds: Each member's standard deviation there (> 0).
        weights: Each member's weight (finite, >= 0, summing to more than 0; stored
            normalised to sum 1). ``None``: equal weights.
        lm: The LM for every member (default: each member's own, else DSPy's configured).

    Raises:
        ValueError: On fewer than two members, members of different tasks or aspects, a
            pairwise task, mismatched lengths, a non-positive standard deviation or
            invalid weights.
    """

    def __init__(
        self,
        members: Sequence[JudgeProgram],
        means: Sequence[float],
        sds: Sequence[float],
        *,
        weights: Sequence[float] | None = None,
        lm: dspy.BaseLM | None = None,
    ) -> None:
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"A JudgeEnsemble needs at least 2 members; got {len(members)}.")
        if not len(members) == len(means) == len(sds):
            raise ValueError(
                f"JudgeEnsemble: {len(members)} members but {len(means)} means "
                f"and {len(sds)} standard deviations."
            )
        first = members[0]
        if first.task.mode != "pointwise":
            raise ValueError(
                "A JudgeEnsemble averages ratings: it needs a pointwise task; "
                f"{first.task.name!r} is {first.task.mode}."
            )
        for i, m in enumerate(members):
            if m.task.name != first.task.name or m.aspect != first.aspect:
                raise ValueError(
                    f"Member {i} judges {m.task.name}/{m.aspect}, member 0 "
                    f"{first.task.name}/{first.aspect}: one task and aspect only."
                )
        for i, (mu, sd) in enumerate(zip(means, sds, strict=True)):
            if not math.isfinite(mu) or not (math.isfinite(sd) and sd > 0):
                raise ValueError(
                    f"Member {i}: the normalisation needs a finite mean and a "
                    f"standard deviation > 0; got mean={mu!r}, sd={sd!r}."
                )
        if weights is None:
            weights = [1.0] * len(members)
        w = [float(x) for x in weights]
        if len(w) != len(members):
            raise ValueError(f"JudgeEnsemble: {len(members)} members but {len(w)} weights.")
        if not all(math.isfinite(x) and x >= 0 for x in w) or sum(w) <= 0:
            raise ValueError(
                "JudgeEnsemble: `weights` must be finite, >= 0 and sum to more than 0; "
                f"got {list(weights)!r}."
            )
        self.weights = [x / sum(w) for x in w]
        self.members = list(members)
        self.means = [float(x) for x in means]
        self.sds = [float(x) for x in sds]
        self.lm = lm
        self.task = first.task
        self.aspect = first.aspect
        self.report_ = CompileReport(model_name=first.model_name)

    def _copy(self) -> JudgeEnsemble:
        return copy.copy(self)

    @property
    def strategy(self) -> list[Any]:
        """The members' strategies."""
        return [m.strategy for m in self.members]

    def resolve_lm(self, lm: dspy.BaseLM | None = None) -> dspy.BaseLM:
        """The LM a call uses: ``lm``, else the ensemble's, else the first member's rule."""
        return self.members[0].resolve_lm(lm or self.lm)

    def with_explain(self, explain: bool) -> JudgeEnsemble:
        """This ensemble, or a copy whose members write (``True``) or skip (``False``) the
        explanation after their rating (``explain`` of :class:`JudgeProgram`)."""
        members = [m.with_explain(explain) for m in self.members]
        if all(a is b for a, b in zip(members, self.members, strict=True)):
            return self
        new = self._copy()
        new.members = members
        return new

    def combine(self, ratings: Sequence[float | None]) -> tuple[float | None, float | None]:
        """``(score, mean z)`` of the members' ratings (``None`` for an unparsed one)."""
        rows = [[math.nan if r is None else float(r)] for r in ratings]
        z = float(combine_z(rows, self.means, self.sds, self.weights)[0])
        if math.isnan(z):
            return None, None
        return self.means[0] + self.sds[0] * z, z

    def judge(
        self,
        inputs: Mapping[str, Any],
        *,
        sample_id: str | None = None,
        lm: dspy.BaseLM | None = None,
    ) -> dspy.Prediction:
        """Judge one sample with every member and combine (see the class docstring).

        Raises:
            ValueError: On a missing input field. LM errors of a member propagate (as for a
                single judge, :func:`judgeopt.evaluate.evaluate` records them).
        """
        use = lm or self.lm
        preds = [m.judge(inputs, sample_id=sample_id, lm=use) for m in self.members]
        ratings = [None if p.score is None else float(p.score) for p in preds]
        score, z = self.combine(ratings)
        error = None
        if score is None:
            error = "no member's rating parsed: " + "; ".join(
                f"member {i}: {p.parse_error}" for i, p in enumerate(preds)
            )
        return dspy.Prediction(
            score=score,
            z=z,
            member_scores=ratings,
            raw=preds[0].raw,
            rationale=preds[0].get("rationale"),
            parse_error=error,
            decoding="ensemble",
        )

    def forward(self, **inputs: Any) -> dspy.Prediction:
        """Judge one sample given its input fields as keyword arguments."""
        sample_id = inputs.pop("sample_id", None)
        return self.judge(inputs, sample_id=sample_id)

    # Export ------------------------------------------------------------------------------
    def export(self) -> dict[str, Any]:
        """The exported form (a JSON object)."""
        return {
            "format": ENSEMBLE_FORMAT,
            "format_version": FORMAT_VERSION,
            "judgeopt_version": __version__,
            "task_name": self.task.name,
            "aspect": self.aspect,
            "combine": (
                "weighted mean of the members' z-scores (rating - mean) / sd over the "
                "members whose rating parsed (their weights renormalised), reported as "
                "mean_1 + sd_1 * z"
            ),
            "members": [
                {
                    "mean": mu,
                    "sd": sd,
                    "weight": w,
                    "judge": export_judge(m).model_dump(mode="json"),
                }
                for m, mu, sd, w in zip(
                    self.members, self.means, self.sds, self.weights, strict=True
                )
            ],
            "model": self.model_name,
            "validation": self.validation,
            "test": self.test,
            "selection": self.selection,
            "comparisons": self.comparisons,
        }

    def save(self, path: str | os.PathLike[str], **_: Any) -> None:
        """Write the ensemble as one JSON file; never pickles."""
        write_text_atomic(path, json.dumps(self.export(), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def from_dict(
        cls, raw: Mapping[str, Any], *, source: str = "<dict>", **kwargs: Any
    ) -> JudgeEnsemble:
        """Rebuild from :meth:`export` output.

        Raises:
            ValueError: On a malformed file (naming the field).
        """
        if raw.get("format") != ENSEMBLE_FORMAT:
            raise ValueError(
                f"{source}: not a judge ensemble (`format` is "
                f"{raw.get('format')!r}, expected {ENSEMBLE_FORMAT!r})."
            )
        if raw.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{source}: format_version {raw.get('format_version')!r} is not "
                f"supported (this judgeopt reads {FORMAT_VERSION})."
            )
        entries = raw.get("members")
        if not isinstance(entries, list) or len(entries) < 2:
            raise ValueError(f"{source}: `members` must be a list of at least 2 members.")
        members, means, sds, weights = [], [], [], []
        lm = kwargs.pop("lm", None)
        for i, e in enumerate(entries):
            if not isinstance(e, Mapping) or not {"mean", "sd", "judge"} <= set(e):
                raise ValueError(f"{source}: `members[{i}]` needs `mean`, `sd` and `judge`.")
            members.append(
                judge_from_dict(dict(e["judge"]), source=f"{source} members[{i}]", lm=lm, **kwargs)
            )
            means.append(float(e["mean"]))
            sds.append(float(e["sd"]))
            w = e.get("weight")
            if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float))):
                raise ValueError(f"{source}: `members[{i}].weight` must be a number; got {w!r}.")
            weights.append(w)
        if any(w is None for w in weights) and not all(w is None for w in weights):
            raise ValueError(
                f"{source}: every member needs a `weight`, or none (equal weights); "
                f"got {weights!r}."
            )
        ens = cls(
            members,
            means,
            sds,
            weights=None if weights[0] is None else [float(w or 0.0) for w in weights],
            lm=lm,
        )
        return ens.with_report(
            CompileReport(
                validation=raw.get("validation"),
                test=raw.get("test"),
                selection=raw.get("selection"),
                comparisons=raw.get("comparisons"),
                model_name=raw.get("model"),
            )
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str], **kwargs: Any) -> JudgeEnsemble:
        """Rebuild an ensemble from its JSON file (validated; no pickle).

        Args:
            path: The exported ensemble.
            **kwargs: Passed to every member's constructor (e.g. ``lm=``).
        """
        return cls.from_dict(read_judge_file(path), source=str(path), **kwargs)

    def __repr__(self) -> str:
        return f"JudgeEnsemble({self.task.name}/{self.aspect}: {len(self.members)} members)"


def load_judge(path: str | os.PathLike[str], **kwargs: Any) -> JudgeProgram | JudgeEnsemble:
    """Load an exported judge or ensemble, whichever the file holds (``judgeopt.load_judge``;
    :func:`~judgeopt.judge.load_program` loads a single judge only).

    Args:
        path: The JSON file.
        **kwargs: Passed to the judge's (every member's) constructor (e.g. ``lm=``).

    Raises:
        ValueError: On a missing or invalid file.
    """
    raw = read_judge_file(Path(path))
    if raw.get("format") == ENSEMBLE_FORMAT:
        return JudgeEnsemble.from_dict(raw, source=str(path), **kwargs)
    return judge_from_dict(raw, source=str(path), **kwargs)


#: The ``format`` field of the index of several judges (``compile --aspects``).
INDEX_FORMAT = "judgeopt-index"


def write_judge_index(
    path: str | os.PathLike[str],
    task: str,
    judges: dict[str, str],
    *,
    model: str | None = None,
    merge: bool = False,
) -> Path:
    """Write the index of the judges of several aspects of one task (``compile --aspects``).

    ``judges`` maps each aspect to its judge file, relative to the index's directory. The
    file is ``{"format": "judgeopt-index", "format_version": 1, "task", "model",
    "judges": {aspect: file}}``; read it with :func:`load_judges`.

    With ``merge=True`` an index already at ``path`` for the same task keeps its other
    aspects' entries whose judge files still exist (in their order, ``judges`` replacing the
    aspects it names, new aspects last), so recompiling two aspects of four does not drop
    the other two. ``model`` becomes ``None`` when a kept entry was compiled with another
    model. An unreadable index, or one of another task, is replaced.
    """
    p = Path(path)
    merged: dict[str, str] = {}
    if merge:
        old = _previous_index(p, task)
        if old is not None:
            kept = {
                a: f for a, f in old["judges"].items() if a in judges or (p.parent / f).is_file()
            }
            merged = {a: judges.get(a, f) for a, f in kept.items()}
            if any(a not in judges for a in kept) and old.get("model") != model:
                model = None
    merged.update(judges)
    data = {
        "format": INDEX_FORMAT,
        "format_version": 1,
        "judgeopt_version": __version__,
        "task": task,
        "model": model,
        "judges": merged,
    }
    return write_text_atomic(p, json.dumps(data, indent=2) + "\n")


def _previous_index(path: Path, task: str) -> dict[str, Any] | None:
    """The index of ``task`` at ``path``, if a valid one is there."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("format") != INDEX_FORMAT or raw.get("task") != task:
        return None
    judges = raw.get("judges")
    if not isinstance(judges, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in judges.items()
    ):
        return None
    return raw


def load_judges(
    path: str | os.PathLike[str], **kwargs: Any
) -> dict[str, JudgeProgram | JudgeEnsemble]:
    """Load every judge of an index written by ``judgeopt compile --aspects`` (or a directory
    holding one as ``index.json``): aspect -> judge (or ensemble), in the index's order.

    Args:
        path: The index file, or its directory.
        **kwargs: Passed to every judge's constructor (e.g. ``lm=``).

    Raises:
        ValueError: On a missing or invalid index (naming the field) or judge file.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "index.json"
    raw = read_judge_file(p)
    if raw.get("format") != INDEX_FORMAT:
        raise ValueError(
            f"{p}: not a judge index (`format` is {raw.get('format')!r}, expected "
            f"{INDEX_FORMAT!r}); load a single judge with judgeopt.load_judge()."
        )
    judges = raw.get("judges")
    if (
        not isinstance(judges, dict)
        or not judges
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in judges.items())
    ):
        raise ValueError(
            f"{p}: `judges` must be a non-empty object of aspect -> judge file; got {judges!r}."
        )
    out: dict[str, JudgeProgram | JudgeEnsemble] = {}
    for aspect, file in judges.items():
        judge = load_judge(p.parent / file, **kwargs)
        if judge.aspect != aspect:
            raise ValueError(f"{p}: `judges.{aspect}` is {file}, which judges {judge.aspect!r}.")
        out[aspect] = judge
    return out
