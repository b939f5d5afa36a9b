"""Run a judge over a labelled dataset and measure its agreement with the human labels."""

from __future__ import annotations

import contextvars
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .data import Record
from .metrics import correlation, paired_bootstrap, paired_bootstrap_mean

if TYPE_CHECKING:
    from .judge import JudgeProgram

__all__ = [
    "Comparison",
    "EvalResult",
    "ItemResult",
    "compare",
    "default_threads",
    "evaluate",
    "evaluate_against",
    "check_label_spread",
    "check_records",
    "item_predictions",
    "merge_results",
    "score_items",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ItemResult:
    """One judged item.

    Attributes:
        id: The record id.
        human: The human score (pointwise) or label (pairwise).
        score: The judge's rating or verdict; ``None`` when the call failed or the output
            could not be parsed.
        parse_error: Why the output could not be parsed.
        error: Why the call failed (LM error, artifact error).
        raw: The judge's output text.
        error_kind: The failure's :attr:`judgeopt.lm.LMError.kind` (``"connection"``,
            ``"timeout"``, ``"context_overflow"``...; ``"error"`` for another exception).
    """

    id: str
    human: float | str | None
    score: float | str | None
    parse_error: str | None = None
    error: str | None = None
    raw: str | None = None
    error_kind: str | None = None

    @property
    def transient(self) -> bool:
        """The call failed for a reason outside the request (endpoint down, timeout,
        overload): trying again later may succeed (:data:`judgeopt.lm.TRANSIENT_KINDS`)."""
        from .lm import TRANSIENT_KINDS

        return self.error is not None and self.error_kind in TRANSIENT_KINDS


@dataclass(frozen=True)
class EvalResult:
    """The outcome of :func:`evaluate`.

    Correlations (pointwise) are computed with unparsed or failed items imputed by the
    mean of the parsed ratings (PrExMe's "template average" fallback), so that a judge is
    not rewarded for failing on hard items; a judge whose ratings are all equal gets 0.
    ``accuracy`` (pairwise) counts unparsed verdicts as wrong.
    """

    n: int
    parse_failures: int
    call_failures: int
    level: str
    spearman: float | None = None
    kendall: float | None = None
    pearson: float | None = None
    accuracy: float | None = None
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    items: list[ItemResult] = field(default_factory=list, repr=False)

    def metric(self, name: str) -> float:
        """A metric by name (``spearman``, ``kendall``, ``pearson``, ``accuracy``); NaN if none."""
        value = getattr(self, name, None)
        if name not in ("spearman", "kendall", "pearson", "accuracy"):
            raise ValueError(f"Unknown metric {name!r}. Allowed: spearman, kendall, pearson, "
                             "accuracy.")
        return math.nan if value is None else float(value)

    def summary(self) -> dict[str, Any]:
        """The JSON summary printed by ``judgeopt evaluate``."""
        out: dict[str, Any] = {"n": self.n, "parse_failures": self.parse_failures,
                               "call_failures": self.call_failures}
        if self.accuracy is not None:
            out["accuracy"] = self.accuracy
        else:
            out.update(spearman=self.spearman, kendall=self.kendall, pearson=self.pearson)
        out.update(level=self.level, calls=self.calls, cache_hits=self.cache_hits,
                   prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                   seconds=round(self.seconds, 3))
        return out

    def to_dict(self) -> dict[str, Any]:
        """Summary plus every item."""
        return {**self.summary(), "items": [asdict(i) for i in self.items]}


def _stats(lm: Any) -> Any:
    fn = getattr(lm, "stats", None)
    return fn() if callable(fn) else None


def _record_finished(futures: Mapping[Any, int], results: Sequence[ItemResult | None],
                     on_item: Callable[[ItemResult], Any]) -> None:
    """Hand ``on_item`` the calls that finished while an interrupt waited to be handled.

    A signal reaches Python's main thread only when it runs again, and the workers go on
    meanwhile; their finished items would otherwise be lost to a checkpoint. Best effort:
    a failing ``on_item`` stops the recording, never hides the interrupt.
    """
    for fut, i in futures.items():
        if results[i] is None and fut.done() and not fut.cancelled() \
                and fut.exception() is None:
            try:
                on_item(fut.result())
            except Exception:  # the interrupt is what gets reported
                return


def _judge_one(program: JudgeProgram, record: Record, lm: Any, aspect: str) -> ItemResult:
    human: float | str | None
    if program.task.mode == "pairwise":
        human = record.label
    else:
        human = record.scores.get(aspect)
    try:
        pred = program.judge(record.inputs, sample_id=record.id, lm=lm)
    except Exception as e:  # noqa: BLE001 - a failed call is recorded, never fatal
        log.warning("judging %s failed: %s", record.id, e)
        return ItemResult(record.id, human, None, error=f"{type(e).__name__}: {e}",
                          error_kind=_error_kind(e))
    return ItemResult(record.id, human, pred.score, parse_error=pred.parse_error, raw=pred.raw)


def check_records(program: Any, records: Sequence[Record]) -> None:
    """Check that ``records`` fit the judge's task before any call is made.

    Every record needs the task's input fields and the judged aspect's score (pointwise,
    within the task's human range) or a pairwise label. Data of another task (no record has
    a needed field or score) gets one message naming what is missing and what the records
    have. Judges without a signature task (PrExMe programs) are not checked here.

    Raises:
        ValueError: Naming the task, the aspect, the missing fields or scores and what the
            records have instead (or, for a few bad records, up to five of them).
    """
    from .data import validate_records

    task: Any = getattr(program, "task", None)
    names = getattr(task, "input_names", None)
    if task is None or names is None or not hasattr(task, "human_range") or not records:
        return
    pairwise = task.mode == "pairwise"
    aspect = program.aspect
    what = f"the judge's task `{task.name}`" + ("" if pairwise else f" (aspect `{aspect}`)")
    n = len(records)
    absent = [f for f in names if all(f not in r.inputs for r in records)]
    problems = []
    if absent:
        has = sorted({k for r in records for k in r.inputs})
        problems.append(f"no record has the input field(s) {absent!r} (the records have: "
                        f"{', '.join(has) or 'none'}; the task needs: {', '.join(names)})")
    if pairwise and all(r.label is None for r in records):
        problems.append("no record has a pairwise label ('a', 'b' or 'tie')")
    if not pairwise and all(aspect not in r.scores for r in records):
        has = sorted({k for r in records for k in r.scores})
        problems.append(f"no record has a score for `{aspect}` (the records have scores "
                        f"for: {', '.join(has) or 'nothing'})")
    if problems:
        raise ValueError(f"the {n} records do not fit {what}: " + "; ".join(problems)
                         + ". Is this the data of another task?")
    # NOTE: repeated ids are the caller's business here (the same item judged twice).
    unique = list({r.id: r for r in records}.values())
    try:
        validate_records(unique, required_fields=names,
                         aspect=None if pairwise else aspect,
                         score_range=None if pairwise else task.human_range(aspect),
                         pairwise=pairwise)
    except ValueError as e:
        raise ValueError(f"records that do not fit {what}:\n{e}") from None


def _error_kind(exc: BaseException) -> str:
    """The ``kind`` of the first :class:`judgeopt.lm.LMError` in ``exc``'s chain, else
    ``"error"`` (an artifact or adapter failure wraps the LM's error)."""
    from .lm import LMError

    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 10 and all(current is not e for e in seen):
        if isinstance(current, LMError):
            return current.kind
        seen.append(current)
        current = current.__cause__ or current.__context__
    return "error"


class _Breaker:
    """Counts judge calls that failed transiently in a row; trips at ``limit``."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.streak = 0

    def see(self, item: ItemResult) -> None:
        """Record one finished item; raise :class:`judgeopt.lm.LMUnavailable` on a trip."""
        if self.limit is None:
            return
        self.streak = self.streak + 1 if item.transient else 0
        if self.streak >= self.limit:
            from .lm import LMUnavailable

            raise LMUnavailable(
                f"{self.streak} judge calls in a row failed ({item.error}); the model "
                "endpoint looks down, so judging stopped (circuit breaker, "
                f"max_consecutive_failures={self.limit})")


def check_label_spread(records: Sequence[Record], task: Any, aspect: str, name: str) -> None:
    """Refuse records whose human scores cannot be correlated with any judge.

    Pointwise tasks only (a pairwise verdict is scored by accuracy). At dataset level the
    scores must take two values or more; at group level they must vary within at least one
    group. Called before any judge call, so a hopeless run costs nothing.

    Args:
        records: The labelled records to score a judge on.
        task: The task (its ``mode`` and ``correlation_level`` decide the check).
        aspect: The human score to correlate with.
        name: How the records are named in the message (``trainset``, ``--data``).

    Raises:
        ValueError: Naming ``name``, the aspect, and the constant value or the group count.
    """
    if task.mode == "pairwise":
        return
    level = task.correlation_level or "dataset"
    humans = [r.scores[aspect] for r in records]
    if level == "group":
        by: dict[str, set[float]] = {}
        for r in records:
            by.setdefault(r.group_id or r.id, set()).add(r.scores[aspect])
        if all(len(v) < 2 for v in by.values()):
            raise ValueError(
                f"`{name}`: the human `{aspect}` scores are constant within every one of its "
                f"{len(by)} groups, so the group-level correlation that scores a judge is "
                "undefined for any judge; use records whose scores vary within groups")
        return
    if len(set(humans)) < 2:
        raise ValueError(
            f"`{name}`: every one of its {len(humans)} human `{aspect}` scores is "
            f"{humans[0]:g}, so the correlation that scores a judge is undefined for any "
            "judge; use records whose human scores vary")


def score_items(items: Sequence[ItemResult], *, pairwise: bool, level: str,
                groups: Sequence[Any] | None = None) -> dict[str, float | None]:
    """Correlations (pointwise) or accuracy (pairwise) of judged items with the humans."""
    if pairwise:
        # An unparsed verdict counts as wrong.
        correct = sum(i.score is not None and str(i.score) == str(i.human) for i in items)
        return {"accuracy": correct / len(items) if items else None}
    human = np.asarray([float(i.human) for i in items], dtype=float)  # type: ignore[arg-type]
    parsed = [float(i.score) for i in items if i.score is not None]  # type: ignore[arg-type]
    out: dict[str, float | None] = {"spearman": None, "kendall": None, "pearson": None}
    if len(parsed) < 3 or len(items) < 3:
        return out
    fill = float(np.mean(parsed))
    pred = np.asarray([fill if i.score is None else float(i.score) for i in items])  # type: ignore[arg-type]
    use_groups = list(groups) if level == "group" and groups is not None else None
    for method in ("spearman", "kendall", "pearson"):
        try:
            out[method] = correlation(human, pred, method=method, groups=use_groups)
        except ValueError as e:
            # A judge that gives one rating to every item cannot rank anything: 0. Constant
            # human scores leave every correlation undefined: None, never a fake 0.
            human_constant = _constant(human, use_groups)
            out[method] = 0.0 if "constant" in str(e).lower() and not human_constant else None
    return out


def _constant(values: np.ndarray, groups: Sequence[Any] | None) -> bool:
    """No variation to correlate with: constant overall, or within every group."""
    if groups is None:
        return bool(np.all(values == values[0])) if len(values) else True
    by: dict[Any, list[float]] = {}
    for g, v in zip(groups, values, strict=True):
        by.setdefault(g, []).append(float(v))
    return all(len(set(vs)) < 2 for vs in by.values())


def default_threads(lm: Any) -> int:
    """Judge calls to keep in flight for ``lm`` when the caller does not say: its
    ``preferred_threads`` (an embedded model's ``parallel``: the requests it decodes
    together), else 1."""
    value = getattr(lm, "preferred_threads", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def evaluate(
    program: JudgeProgram,
    records: Sequence[Record],
    *,
    lm: Any = None,
    threads: int | None = None,
    progress: bool = True,
    desc: str | None = None,
    on_item: Callable[[ItemResult], None] | None = None,
    max_consecutive_failures: int | None = None,
) -> EvalResult:
    """Judge every record and compare with the human labels.

    Failed calls and unparseable outputs are recorded and counted, never raised; only a
    streak of transient call failures (the endpoint is down) stops the run, when
    ``max_consecutive_failures`` is set.

    Args:
        program: The judge.
        records: Labelled records (the aspect's score, or a pairwise label).
        lm: The LM (default: the program's, else DSPy's configured one).
        threads: Judge calls in flight at once; ``None``: what the LM keeps busy
            (:func:`default_threads`: ``parallel`` for an embedded model, else 1).
        progress: Show a progress bar.
        desc: Progress bar label.
        on_item: Called with every judged item as it finishes (in the calling thread, in
            completion order), e.g. to checkpoint finished judgements.
        max_consecutive_failures: Stop after this many judge calls in a row (in completion
            order) failed transiently (connection, timeout, 5xx, rate limit after the LM's
            own retries); ``None``: never stop.

    Returns:
        An :class:`EvalResult` at the task's correlation level (group level for tasks whose
        ``correlation_level`` is ``"group"``, e.g. SummEval; else dataset level).

    Raises:
        ValueError: When there are no records, a record does not fit the judge's task (a
            missing input field, no score for the aspect or no pairwise label; naming the
            record), or ``threads < 1``.
        NoLMError: When no LM is configured.
        LMUnavailable: When ``max_consecutive_failures`` calls in a row failed
            transiently (the items judged before were passed to ``on_item``).
    """
    if not records:
        raise ValueError("evaluate() needs at least one record.")
    if threads is not None and threads < 1:
        raise ValueError(f"`threads` must be >= 1. Got {threads}.")
    if max_consecutive_failures is not None and max_consecutive_failures < 1:
        raise ValueError("`max_consecutive_failures` must be an int >= 1 or None. Got "
                         f"{max_consecutive_failures!r} instead.")
    check_records(program, records)
    breaker = _Breaker(max_consecutive_failures)
    the_lm = program.resolve_lm(lm)
    if threads is None:
        threads = default_threads(the_lm)
    before = _stats(the_lm)
    t0 = time.perf_counter()
    aspect = program.aspect
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(records), desc=desc or f"judging {aspect}", unit="item",
                   leave=False)
    results: list[ItemResult | None] = [None] * len(records)
    # NOTE: judging the members of a group one after another lets a server or llama.cpp reuse
    # the shared prompt prefix (the same article or dialogue); results keep the input order.
    order = sorted(range(len(records)), key=lambda i: (records[i].group_id or "", i))
    if threads == 1:
        for i in order:
            results[i] = _judge_one(program, records[i], the_lm, aspect)
            if on_item is not None:
                on_item(results[i])  # type: ignore[arg-type]
            if bar is not None:
                bar.update(1)
            try:
                breaker.see(results[i])  # type: ignore[arg-type]
            except BaseException:
                if bar is not None:
                    bar.close()
                raise
    else:
        pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="judgeopt-judge")
        futures: dict[Any, int] = {}
        try:
            # NOTE: each call runs in a copy of the caller's context, so DSPy settings made
            # with dspy.context(...) (usage tracking, callbacks, adapter) reach the workers.
            futures = {pool.submit(contextvars.copy_context().run, _judge_one, program,
                                   records[i], the_lm, aspect): i for i in order}
            # Collected as they finish: the bar and on_item follow real completion (a slow
            # item holds nothing up); results keep the input order.
            for fut in as_completed(futures):
                item = results[futures[fut]] = fut.result()
                if on_item is not None:
                    on_item(item)
                if bar is not None:
                    bar.update(1)
                breaker.see(item)
        except BaseException as e:
            # Interrupted (Ctrl-C, a failing on_item): drop the queued calls instead of
            # running them all before re-raising; calls in flight finish in the background.
            pool.shutdown(wait=False, cancel_futures=True)
            if isinstance(e, KeyboardInterrupt) and on_item is not None:
                _record_finished(futures, results, on_item)
            if bar is not None:
                bar.close()
            raise
        pool.shutdown(wait=True)
    if bar is not None:
        bar.close()
    items = [r for r in results if r is not None]
    seconds = time.perf_counter() - t0
    after = _stats(the_lm)
    pairwise = program.task.mode == "pairwise"
    level = "dataset" if pairwise else (program.task.correlation_level or "dataset")
    kw: dict[str, Any] = {}
    if before is not None and after is not None:
        kw = {"calls": after.calls - before.calls,
              "cache_hits": after.cache_hits - before.cache_hits,
              "prompt_tokens": after.prompt_tokens - before.prompt_tokens,
              "completion_tokens": after.completion_tokens - before.completion_tokens}
    return _result(items, records, pairwise=pairwise, level=level, seconds=seconds, **kw)


def _result(items: Sequence[ItemResult], records: Sequence[Record], *, pairwise: bool,
            level: str, seconds: float, **counters: int) -> EvalResult:
    metrics = score_items(items, pairwise=pairwise, level=level,
                          groups=[r.group_id or r.id for r in records])
    return EvalResult(
        n=len(items),
        parse_failures=sum(i.error is None and i.score is None for i in items),
        call_failures=sum(i.error is not None for i in items),
        level="dataset" if pairwise else level,
        seconds=seconds,
        items=list(items),
        **metrics,  # type: ignore[arg-type]
        **counters,
    )


def merge_results(parts: Sequence[EvalResult], records: Sequence[Record], *, pairwise: bool,
                  level: str) -> EvalResult:
    """One :class:`EvalResult` from evaluations of disjoint parts of ``records``.

    Items are put in the order of ``records`` (matched by id; every record must have been
    judged in exactly one part); the correlations are computed over all of them and the
    counters (calls, tokens, seconds) are summed.

    Raises:
        ValueError: When a record has no judged item.
    """
    by_id = {i.id: i for p in parts for i in p.items}
    missing = [r.id for r in records if r.id not in by_id]
    if missing:
        raise ValueError(f"merge_results: no judged item for records {missing[:5]!r}.")
    items = [by_id[r.id] for r in records]
    counters = {k: sum(getattr(p, k) for p in parts)
                for k in ("calls", "cache_hits", "prompt_tokens", "completion_tokens")}
    return _result(items, records, pairwise=pairwise, level=level,
                   seconds=sum(p.seconds for p in parts), **counters)


def item_predictions(items: Sequence[ItemResult]) -> list[float]:
    """The judge's ratings as scored: unparsed or failed items take the mean of the parsed
    ratings (as :func:`score_items` imputes them); all failed gives zeros."""
    parsed = [float(i.score) for i in items if i.score is not None]  # type: ignore[arg-type]
    fill = float(np.mean(parsed)) if parsed else 0.0
    return [fill if i.score is None else float(i.score) for i in items]  # type: ignore[arg-type]


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
        out = [f"{split} ({self.n} items{'' if unit == 'items' else f', {self.n_units} groups'}"
               f", {self.metric}{', group level' if self.level == 'group' else ''}):",
               f"  {self.baseline['label']:<{width}} {score(self.baseline):>7}   "
               f"({fails(self.baseline)})",
               f"  {self.chosen['label']:<{width}} {score(self.chosen):>7}   "
               f"({fails(self.chosen)})"]
        if self.gain is None:
            out.append(f"  {'gain':<{width}} n/a (a score is undefined)")
        else:
            lo, hi = self.gain_ci
            ci = ("" if lo is None or hi is None
                  else f"  {self.confidence:.0%} interval [{lo:+.3f}, {hi:+.3f}]"
                       f", bootstrap over {self.n_units} {unit}")
            verdict = ""
            if lo is not None and hi is not None:
                verdict = ("  (better)" if lo > 0 else "  (worse)" if hi < 0
                           else "  (within noise)")
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
    by_a = {i.id: i for i in chosen.items}
    by_b = {i.id: i for i in baseline.items}
    missing = [i for i in ids if i not in by_a or i not in by_b]
    if missing:
        raise ValueError(f"compare(): both evaluations must cover the same records; "
                         f"{len(missing)} are missing (first: {missing[:3]!r}).")
    items_a = [by_a[i] for i in ids]
    items_b = [by_b[i] for i in ids]
    pairwise = chosen.accuracy is not None or baseline.accuracy is not None
    metric = metric or ("accuracy" if pairwise else "spearman")
    level = "dataset" if pairwise else chosen.level
    groups = [r.group_id or r.id for r in records]

    def side(res: EvalResult, label: str) -> dict[str, Any]:
        v = res.metric(metric)
        return {"label": label, "score": None if math.isnan(v) else v, "n": res.n,
                "parse_failures": res.parse_failures, "call_failures": res.call_failures}

    a_side, b_side = side(chosen, labels[1]), side(baseline, labels[0])
    gain: float | None = None
    lo = hi = p_not = None
    n_units = len(set(groups)) if level == "group" else len(ids)
    if a_side["score"] is not None and b_side["score"] is not None:
        gain = a_side["score"] - b_side["score"]
        try:
            if metric == "accuracy":
                m = paired_bootstrap_mean(correct(items_a), correct(items_b),
                                          n_resamples=n_resamples, confidence=confidence,
                                          seed=seed)
                lo, hi, p_not = m.low, m.high, m.p_not_positive
            else:
                r = paired_bootstrap([float(i.human) for i in items_a],  # type: ignore[arg-type]
                                     item_predictions(items_a), item_predictions(items_b),
                                     metric, groups if level == "group" else None,
                                     n_resamples=n_resamples, confidence=confidence,
                                     seed=seed)
                lo, hi, p_not = r.low, r.high, r.p_not_positive
        except ValueError as e:
            log.warning("no interval for the gain: %s", e)
    return Comparison(metric=metric, level=level, n=len(ids), n_units=n_units,
                      baseline=b_side, chosen=a_side, gain=gain, gain_ci=(lo, hi),
                      confidence=confidence, p_not_positive=p_not, n_resamples=n_resamples,
                      note=note)


def correct(items: Sequence[ItemResult]) -> list[float]:
    """1.0 where a pairwise verdict equals the human label, else 0.0 (unparsed: wrong)."""
    return [float(i.score is not None and str(i.score) == str(i.human)) for i in items]


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

    Returns:
        ``(program's result, reference's result, comparison)``.
    """
    prefix = f"{desc}: " if desc else ""
    ref = evaluate(reference, records, lm=lm, threads=threads, progress=progress,
                   desc=f"{prefix}{labels[0]}",
                   max_consecutive_failures=max_consecutive_failures)
    res = evaluate(program, records, lm=lm, threads=threads, progress=progress,
                   desc=f"{prefix}{labels[1]}",
                   max_consecutive_failures=max_consecutive_failures)
    return res, ref, compare(res, ref, records, labels=labels, seed=seed, note=note)
