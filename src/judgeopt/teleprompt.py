"""DSPy teleprompters that search a judge's prompting strategy (HPSS and its baselines).

Each teleprompter is a thin loop around a search of :mod:`judgeopt.search`::

    strategy = search.ask() -> judge = student.with_strategy(strategy)
    -> evaluate(judge, valset) -> search.tell(strategy, correlation)

with a checkpoint after every evaluation (search state, evaluation summaries and
artifacts) and after every judged item of the candidate in progress, so an interrupted
compile resumes where it stopped without repeating a finished judge call; the LM's
persistent cache also makes finished judge calls free on a re-run.

With racing (:mod:`judgeopt.racing`) a candidate is judged on a growing, fixed-order prefix
of the validation set and dropped as soon as an upper confidence bound on its full-set
score falls below the population's ``top``-th best; the search is told its partial score.
"""

from __future__ import annotations

import os


import inspect
import json
import logging
import math
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from dspy.teleprompt import Teleprompter
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._checkpoint import (
    FINGERPRINT_FILE,
    CheckpointMismatchError,
    check_fingerprint,
    run_fingerprint,
)
from ._io import write_text_atomic
from ._resources import shipped_file, shipped_names
from .data import Record
from .evaluate import (
    EvalResult,
    ItemResult,
    check_label_spread,
    check_records,
    compare,
    correct,
    evaluate,
    item_predictions,
    merge_results,
)
from .judge import (
    ArtifactStore,
    JudgeEnsemble,
    JudgeProgram,
    check_decodings,
    hpss_graph,
    to_records,
)
from .lm import TRANSIENT_KINDS, LMError, LMUnavailable, model_spec
from .metrics import group_correlation
from .racing import (
    RacingConfig,
    checkpoint_sizes,
    race_decision,
    race_order,
    threshold,
    unit_keys,
)
from .search import SEARCHES, FactorGraph, SearchStrategy, Strategy, Value
from .selection import SelectionConfig, choose, confirmation_split, veto

__all__ = [
    "CheckpointMismatchError",
    "CompileResult",
    "Greedy",
    "GridSearch",
    "HPSS",
    "JudgeSearch",
    "OptimizerConfig",
    "RandomSearch",
    "StepwiseGreedy",
    "load_optimizer",
]

log = logging.getLogger(__name__)
#: One line per finished strategy and where a run resumes; ``judgeopt compile`` prints it.
progress_log = logging.getLogger("judgeopt.progress")

#: Marks log records whose text is also in the compiled judge (``selection.messages``,
#: ``search_result.problems``): ``judgeopt compile`` prints those in its summary and drops
#: the records, so that no line appears twice.
_REPORTED = {"judgeopt_reported": True}

Metric = Literal["spearman", "kendall", "pearson", "accuracy"]


class OptimizerConfig(BaseModel):
    """An optimizer preset (``optimizers/*.toml``).

    Attributes:
        search: The search, one of :data:`judgeopt.search.SEARCHES`.
        budget: Unique strategy evaluations, initialisation included.
        seed: The search's seed.
        params: Keyword arguments of the search class (e.g. HPSS's ``k``, ``rho``).
        space: Factor -> allowed values, to restrict the space (other factors keep all).
        forbid: Forbidden combinations: each entry is a partial assignment (``{"cot":
            "prefix", "scale": 10}``), and no strategy holding all of an entry's values is
            evaluated (TOML: ``[[forbid]]`` tables). The baseline must not be forbidden.
        threads: Judge calls in flight at once (``None``: what the LM keeps busy,
            :func:`judgeopt.evaluate.default_threads`).
        metric: What the search maximises (default: ``spearman``; ``accuracy`` pairwise).
        example_seed: Seed of the in-context example selection.
        racing: Early stopping of hopeless candidates (:class:`judgeopt.racing.RacingConfig`;
            off by default: every candidate is judged on every item).
        selection: How the compiled judge is chosen (:class:`judgeopt.selection.
            SelectionConfig`; default: search on half the scoring set, confirm the best
            strategies against the baseline on the other half).
        ensemble: Also build a prompt ensemble of this many of the best strategies
            (:class:`judgeopt.judge.JudgeEnsemble`; 0 or 1: none).
        max_consecutive_failures: Circuit breaker: stop the compile (resumably) after this
            many judge calls in a row failed transiently (connection, timeout, 5xx, rate
            limit, each after the LM's own retries).
        max_parse_failures: Largest share of the chosen judge's answers on its scoring
            items that may give no rating (unparsed, or a failed call) before the compile
            reports the judge as untrustworthy (``judgeopt compile`` then exits with 1).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    search: str = "auto"
    budget: int = Field(71, ge=1)
    seed: int = Field(0, ge=0)
    params: dict[str, Any] = Field(default_factory=dict)
    space: dict[str, list[Value]] = Field(default_factory=dict)
    forbid: list[dict[str, Value]] = Field(default_factory=list)
    threads: int | None = Field(None, ge=1)
    metric: Metric | None = None
    example_seed: int = Field(0, ge=0)
    racing: RacingConfig = Field(default_factory=RacingConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    ensemble: int = Field(0, ge=0)
    max_consecutive_failures: int = Field(5, ge=1)
    max_parse_failures: float = Field(0.25, ge=0.0, le=1.0)

    def model_post_init(self, __context: Any) -> None:
        if self.search not in SEARCHES:
            raise ValueError(f"The `search` field must be one of {sorted(SEARCHES)!r}. "
                             f"Got {self.search!r} instead.")
        allowed = set(inspect.signature(SEARCHES[self.search]).parameters) - {
            "space", "budget", "seed", "graph", "baseline"}
        unknown = sorted(set(self.params) - allowed)
        if unknown:
            raise ValueError(f"Unknown `params` {unknown!r} for search {self.search!r}. "
                             f"Allowed: {sorted(allowed)!r}.")


def load_optimizer(path_or_name: str | os.PathLike[str]) -> OptimizerConfig:
    """Load an optimizer preset from a TOML file, or a shipped preset by name (``hpss``).

    Raises:
        ValueError: On a missing file, bad TOML, or invalid fields (naming them).
    """
    path = Path(path_or_name)
    if not path.is_file():
        path = shipped_file("optimizers", str(path_or_name)) or path
    if not path.is_file():
        raise ValueError(f"Optimizer preset {str(path_or_name)!r} not found (a TOML file or "
                         f"one of: {', '.join(shipped_names('optimizers'))}).")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return OptimizerConfig(**data)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: invalid TOML: {e}") from e
    except ValidationError as e:
        problems = "; ".join(
            f"`{'.'.join(str(p) for p in err['loc'])}`: {err['msg']} (got {err.get('input')!r})"
            for err in e.errors())
        raise ValueError(f"{path}: {problems}") from None


@dataclass(frozen=True)
class CompileResult:
    """What a compile did: the search, its trace, and its cost.

    ``calls`` (and the token counts) are the LM calls of the search's strategy evaluations
    over every session of a resumed compile; ``calls_this_run`` those made by this process;
    ``selection_calls`` those of choosing the judge after the search (confirmation,
    comparison with the baseline, ensemble). ``problems`` lists why the returned judge
    should not be trusted (every strategy scored NaN, too many answers without a rating);
    empty when none was found.
    """

    search: str
    budget: int
    seed: int
    metric: str
    evaluations: int
    best_strategy: dict[str, Value]
    best_score: float
    trace: list[dict[str, Any]] = field(repr=False)
    evaluation_summaries: list[dict[str, Any]] = field(repr=False)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    racing: dict[str, Any] | None = None
    calls_this_run: int = 0
    selection_calls: int = 0
    problems: list[str] = field(default_factory=list)

    def best_so_far(self) -> list[tuple[int, float]]:
        """``(evaluation number, best score so far)`` after each evaluation."""
        out, best = [], -math.inf
        for t in self.trace:
            s = t["score"]
            if s is not None and s > best:
                best = s
            out.append((t["number"], best if best > -math.inf else math.nan))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (for the exported judge)."""
        return {
            "search": self.search, "budget": self.budget, "seed": self.seed,
            "metric": self.metric, "evaluations": self.evaluations,
            "best_strategy": self.best_strategy,
            "best_score": None if math.isnan(self.best_score) else self.best_score,
            "best_so_far": [[n, None if math.isnan(v) else v] for n, v in self.best_so_far()],
            "trace": self.trace, "calls": self.calls, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "seconds": round(self.seconds, 3),
            "racing": self.racing, "calls_this_run": self.calls_this_run,
            "selection_calls": self.selection_calls, "problems": list(self.problems),
        }


class JudgeSearch(Teleprompter):
    """Search a :class:`JudgeProgram`'s prompting strategy on labelled data.

    Args:
        search: Search name (``hpss``, ``greedy``, ``stepwise``, ``random``, ``grid``,
            ``tpe``).
        budget: Unique strategy evaluations, initialisation included.
        seed: The search's seed.
        params: Extra keyword arguments of the search class.
        space: Factor -> allowed values, restricting the HPSS space.
        forbid: Forbidden combinations of factor values (partial assignments; see
            :class:`OptimizerConfig`).
        metric: What to maximise (default ``spearman``; ``accuracy`` for pairwise tasks).
        threads: Judge calls in flight at once (``None``: what the LM keeps busy: an
            embedded model's ``parallel``, else 1).
        checkpoint_dir: Directory for the resumable checkpoint (search state, evaluation
            summaries, artifacts). ``None``: no checkpoint.
        progress: Show progress bars.
        example_seed: Seed of the in-context example selection.
        racing: ``True`` / ``False`` to switch racing on or off with default settings, or a
            :class:`judgeopt.racing.RacingConfig` (or its fields as a mapping).
        selection: ``"confirm"`` (default), ``"veto"`` or ``"best"`` (the rule, other
            settings default), or a :class:`judgeopt.selection.SelectionConfig` (or its
            fields as a mapping): how the compiled judge is chosen (``docs/judge.md``,
            "Choosing the judge").
        ensemble: Also build a prompt ensemble of this many of the best strategies
            (``compiled.ensemble``; 0 or 1: none).
        max_consecutive_failures: Stop the compile after this many judge calls in a row
            failed transiently (the endpoint is down); a re-run continues.
        max_parse_failures: Share of the chosen judge's answers without a rating above which
            the compile reports a problem (``CompileResult.problems``).
        restart: Discard the checkpoint in ``checkpoint_dir`` and start afresh (needed when
            it belongs to a run with other data, settings or model).
        check_endpoint: Make one short call before the search, so a dead or misnamed
            endpoint stops the compile at once with a clear error.

    Raises:
        ValueError: On an unknown search, parameter, factor or value.
    """

    def __init__(
        self,
        search: str = "auto",
        *,
        budget: int = 71,
        seed: int = 0,
        params: Mapping[str, Any] | None = None,
        space: Mapping[str, Sequence[Value]] | None = None,
        forbid: Sequence[Mapping[str, Value]] | None = None,
        metric: Metric | None = None,
        threads: int | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        progress: bool = True,
        example_seed: int = 0,
        racing: bool | RacingConfig | Mapping[str, Any] | None = None,
        selection: str | SelectionConfig | Mapping[str, Any] | None = None,
        ensemble: int = 0,
        max_consecutive_failures: int = 5,
        max_parse_failures: float = 0.25,
        restart: bool = False,
        check_endpoint: bool = True,
    ) -> None:
        super().__init__()
        if racing is None or isinstance(racing, bool):
            race = RacingConfig(enabled=bool(racing))
        elif isinstance(racing, RacingConfig):
            race = racing
        else:
            race = RacingConfig(**racing)
        self.config = OptimizerConfig(
            search=search, budget=budget, seed=seed, params=dict(params or {}),
            space={k: list(v) for k, v in (space or {}).items()},
            forbid=[dict(a) for a in (forbid or [])], threads=threads,
            metric=metric, example_seed=example_seed, racing=race,
            selection=_selection_config(selection), ensemble=ensemble,
            max_consecutive_failures=max_consecutive_failures,
            max_parse_failures=max_parse_failures)
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.progress = progress
        self.restart = restart
        self.check_endpoint = check_endpoint
        self._split_note: str | None = None

    @classmethod
    def from_config(cls, config: OptimizerConfig, **overrides: Any) -> JudgeSearch:
        """Build from a preset, with keyword overrides (e.g. ``budget=20``).

        ``racing=True`` / ``False`` switches the preset's racing on or off and keeps its other
        racing settings; ``selection="best"`` / ``"confirm"`` changes the preset's selection
        rule and keeps its other selection settings.
        """
        kw = config.model_dump()
        race = overrides.pop("racing", None)
        if isinstance(race, bool):
            kw["racing"] = config.racing.model_copy(update={"enabled": race})
        elif race is not None:
            kw["racing"] = race
        rule = overrides.pop("selection", None)
        if isinstance(rule, str):
            kw["selection"] = config.selection.model_copy(update={"rule": rule})
        elif rule is not None:
            kw["selection"] = rule
        kw.update({k: v for k, v in overrides.items() if v is not None})
        search = kw.pop("search")
        return JudgeSearch(search, **kw)

    # The pieces ---------------------------------------------------------------------------
    def _graph(self, student: JudgeProgram) -> FactorGraph:
        graph = hpss_graph(student.task)
        space = graph.space
        for name, allowed in self.config.space.items():
            if name not in space:
                raise ValueError(f"The optimizer's `space` names unknown factor `{name}`. "
                                 f"Factors of task `{student.task.name}`: {list(space.names)!r}.")
            factor = space[name]
            for v in allowed:
                factor.index(v)
            for v in factor.values:
                if not any(type(v) is type(a) and v == a for a in allowed):
                    graph.forbid({name: v}, reason="outside the optimizer's space")
        for i, assignment in enumerate(self.config.forbid):
            try:
                graph.forbid(assignment, reason="the optimizer's `forbid`")
            except ValueError as e:
                raise ValueError(f"The optimizer's `forbid` entry {i + 1} ({assignment!r}): "
                                 f"{e}") from None
        return graph

    def _check_decodings(self, student: JudgeProgram, graph: FactorGraph, lm: Any) -> None:
        """Forbid the decodings the LM cannot serve; raise if the user asked for one.

        A decoding is asked for explicitly when the optimizer's ``space`` lists it or the
        student's strategy uses it.
        """
        if "decoding" not in graph.space:
            return
        explicit = [str(v) for v in self.config.space.get("decoding", [])]
        explicit.append(str(student.strategy["decoding"]))
        values = explicit if "decoding" in self.config.space else [
            str(v) for v in graph.space["decoding"].values]
        for v in check_decodings(lm, values, explicit=explicit):
            graph.forbid({"decoding": v}, reason="the LM gives no logprobs")

    def _make_search(self, student: JudgeProgram, graph: FactorGraph) -> SearchStrategy:
        cls = SEARCHES[self.config.search]
        kwargs: dict[str, Any] = dict(self.config.params)
        if "baseline" in inspect.signature(cls).parameters:
            # The search starts from the student's strategy: the MT-Bench baseline unless the
            # student was built with another one.
            base = student.strategy
            if not graph.is_valid(base):
                outside = [f"{name}={base[name]!r} (the space allows "
                           f"{list(self.config.space[name])!r})"
                           for name in self.config.space if name in base
                           and not any(type(base[name]) is type(a) and base[name] == a
                                       for a in self.config.space[name])]
                what = "; ".join(outside) if outside else "a forbidden combination"
                raise ValueError(
                    f"The student's strategy {base} (the search's baseline) is outside the "
                    f"optimizer's `space`: {what}. The {self.config.search} search starts "
                    "from it, so add its values to the preset's [space] (e.g. the task's "
                    "baseline_scale to `scale`), or build the student with a strategy inside "
                    "the space.")
            kwargs["baseline"] = base
        return cls(graph.space, budget=self.config.budget, seed=self.config.seed, graph=graph,
                   **kwargs)

    def _records(self, data: Sequence[Any], student: JudgeProgram, name: str) -> list[Record]:
        records = to_records(data, student.task, student.aspect)
        if not records:
            raise ValueError(f"`{name}` is empty.")
        try:
            check_records(student, records)
        except ValueError as e:
            raise ValueError(f"`{name}`: {e}") from None
        return records

    # Checkpoint ---------------------------------------------------------------------------
    def _paths(self) -> dict[str, Path] | None:
        if self.checkpoint_dir is None:
            return None
        d = self.checkpoint_dir
        return {"state": d / "search_state.json", "evals": d / "evaluations.jsonl",
                "artifacts": d / "artifacts.json", "pending": d / "pending.jsonl",
                "items": d / "items.jsonl", "fingerprint": d / FINGERPRINT_FILE}

    # Racing -------------------------------------------------------------------------------
    def _race_top(self) -> int:
        """The population size racing compares with: the config's, the search's ``k``, or 1."""
        if self.config.racing.top is not None:
            return self.config.racing.top
        if "k" in self.config.params:
            return int(self.config.params["k"])
        param = inspect.signature(SEARCHES[self.config.search]).parameters.get("k")
        return int(param.default) if param is not None else 1

    def _plan(self, val: list[Record], student: JudgeProgram, level: str) -> _Plan:
        """The fixed item order and checkpoints of racing (one chunk of everything without)."""
        race = self.config.racing
        if not race.enabled:
            return _Plan([val], [1])
        pairwise = student.task.mode == "pairwise"
        humans = [r.label if pairwise else r.scores[student.aspect] for r in val]
        groups = [r.group_id or r.id for r in val] if level == "group" else None
        _, keys, members = unit_keys(humans, groups)
        per_unit = len(val) / len(members)
        min_units = max(3, math.ceil(race.min_items / per_unit)) if groups else race.min_items
        sizes = checkpoint_sizes(len(members), race.checkpoints, min_units)
        order = race_order(keys, n_strata=sizes[0], seed=race.seed)
        units = [[val[i] for i in members[u]] for u in order]
        return _Plan(units, sizes)

    def _judge(self, program: JudgeProgram, strategy: Strategy, number: int, plan: _Plan,
               val: list[Record], lm: Any, *, metric: str, level: str, bar_to: float | None,
               pending: _Pending, store: _ItemStore
               ) -> tuple[EvalResult, dict[str, Any] | None]:
        """Judge one candidate chunk by chunk; stop early when racing drops it.

        Returns the evaluation (on the items judged) and the racing record (``None``
        without racing).
        """
        race = self.config.racing
        pairwise = program.task.mode == "pairwise"
        done = pending.resume(number, strategy)
        parts: list[EvalResult] = []
        if done:
            parts.append(EvalResult(n=len(done), parse_failures=0, call_failures=0,
                                    level=level, items=list(done.values())))
        checks: list[dict[str, Any]] = []
        n_items = len(val)
        for size in plan.sizes:
            recs = plan.records(size)
            todo = [r for r in recs if r.id not in done]
            if todo:
                res = self._evaluate_retrying(
                    program, todo, lm, desc=f"strategy {number + 1}", level=level,
                    on_item=lambda item: (pending.add(item), store.add(program.strategy, item)))
                parts.append(res)
                done.update((i.id, i) for i in res.items)
            if not race.enabled:
                break
            if size == plan.sizes[-1]:
                checks.append({"items": len(recs), "estimate": None, "bound": None})
                break
            partial = merge_results(parts, recs, pairwise=pairwise, level=level)
            estimate = _finite_or_none(partial.metric(metric))
            sd = _group_sd(partial.items, recs, metric) if level == "group" else None
            decision = race_decision(estimate, size, len(plan.units), bar_to, metric=metric,
                                     z=race.z, level=level, group_sd=sd)
            checks.append({"items": len(recs), "estimate": estimate, "bound": decision.bound})
            if decision.drop:
                info = {"dropped": True, "items": len(recs), "of": n_items,
                        "estimate": estimate, "bound": decision.bound, "threshold": bar_to,
                        "checks": checks}
                return partial, info
        result = parts[0] if len(parts) == 1 and not race.enabled else merge_results(
            parts, val, pairwise=pairwise, level=level)
        if not race.enabled:
            return result, None
        checks[-1]["estimate"] = _finite_or_none(result.metric(metric))
        return result, {"dropped": False, "items": n_items, "of": n_items,
                        "estimate": checks[-1]["estimate"], "bound": None,
                        "threshold": bar_to, "checks": checks}


    # Compile ------------------------------------------------------------------------------
    def compile(self, student: JudgeProgram, *, trainset: Sequence[Any],  # type: ignore[override]
                teacher: Any = None, valset: Sequence[Any] | None = None,
                **kwargs: Any) -> JudgeProgram:
        """Search the strategy of ``student`` and return the best judge found.

        Args:
            student: The judge to optimise: its task, aspect and LM are used, and its
                strategy (by default the MT-Bench baseline) is where the search starts.
            trainset: Labelled examples: the in-context example pool, and the scoring set
                when ``valset`` is not given (an item never serves as its own example).
            teacher: Unused (DSPy's signature).
            valset: Labelled examples the strategies are scored on.

        Returns:
            A new :class:`JudgeProgram` with the best strategy, ``search_result`` (a
            :class:`CompileResult`) and ``validation`` (its evaluation summary).

        Raises:
            ValueError: On invalid data (a missing field, a score out of range) or config.
            NoLMError: When no LM is configured.
            LogprobsUnavailableError: At the start, when the optimizer's ``space`` or the
                student's strategy names a decoding that needs logprobs (``expected``) and
                the LM gives none. Without such a request those decodings are left out of
                the search with a logged warning (see ``docs/judge.md``, "Decoding").
            CheckpointMismatchError: (a ``ValueError``) When ``checkpoint_dir`` holds
                results of a run with other data, settings or model (naming what differs;
                ``restart=True`` discards them).
            LMUnavailable: When the endpoint fails its check call before the search, or
                the circuit breaker stops the compile; everything judged is kept in the
                checkpoint and a re-run continues.

        See ``docs/judge.md``, "What happens when things go wrong".
        """
        task = student.task
        metric = self.config.metric or ("accuracy" if task.mode == "pairwise" else "spearman")
        if (metric == "accuracy") != (task.mode == "pairwise"):
            raise ValueError(f"metric {metric!r} does not fit a {task.mode} task.")
        train = self._records(trainset, student, "trainset")
        val = self._records(valset, student, "valset") if valset is not None else train
        check_label_spread(val, student.task, student.aspect,
                           "valset" if valset is not None else "trainset")
        lm = student.resolve_lm()
        paths = self._paths()
        resuming = False
        if paths:
            fingerprint = run_fingerprint(
                task=task, aspect=student.aspect, baseline=student.strategy.as_dict(),
                trainset=train, valset=None if valset is None else val,
                config=self.config.model_dump(mode="json"), lm=lm,
                max_tokens=student.max_tokens, decoding_params=student.decoding_params)
            if self.restart:
                self._discard(paths)
            has_results = any(p.is_file() for k, p in paths.items() if k != "fingerprint")
            resuming = check_fingerprint(paths["fingerprint"].parent, fingerprint,
                                         has_results=has_results)
        if self.check_endpoint:
            _check_endpoint(lm)
        store = ArtifactStore(paths["artifacts"] if paths else None)
        store_data = student.store.to_dict()
        for k, v in store_data.items():
            if k not in store:
                store.set(k, v)
        base = JudgeProgram(task, student.aspect, student.strategy, trainset=train,
                            artifacts=store, example_seed=self.config.example_seed, lm=lm,
                            max_tokens=student.max_tokens,
                            decoding_params=student.decoding_params)
        graph = self._graph(student)
        self._check_decodings(student, graph, lm)
        search = self._make_search(student, graph)
        summaries: list[dict[str, Any]] = []
        if paths and paths["state"].is_file():
            state = json.loads(paths["state"].read_text(encoding="utf-8"))
            if state.get("search") != self.config.search or state["params"].get(
                    "seed") != self.config.seed:
                raise ValueError(
                    f"Checkpoint {paths['state']} is for search {state.get('search')!r} seed "
                    f"{state['params'].get('seed')!r}; this compile is {self.config.search!r} "
                    f"seed {self.config.seed}. Use another checkpoint_dir.")
            state["params"]["budget"] = self.config.budget
            search = SearchStrategy.from_state(state)
            if paths["evals"].is_file():
                # A line written just before an interruption, for an evaluation the state
                # does not hold yet, is dropped: that candidate is judged again (from the
                # pending items, so with no repeated call).
                summaries = [s for s in (json.loads(line) for line in
                             paths["evals"].read_text(encoding="utf-8").splitlines() if line)
                             if s["number"] < search.n_evaluations]
            pending_note = ""
            if paths["pending"].is_file():
                n_pending = max(0, len(paths["pending"].read_text(
                    encoding="utf-8").splitlines()) - 1)
                if n_pending:
                    pending_note = (f"; {n_pending} judged item(s) of strategy "
                                    f"{search.n_evaluations + 1} kept")
            progress_log.info("resuming from %s (%d of %d strategies done%s)",
                              self.checkpoint_dir, search.n_evaluations, self.config.budget,
                              pending_note)
        elif resuming and paths:
            progress_log.info("resuming from %s (0 of %d strategies done; the judgements "
                              "made so far are kept)", self.checkpoint_dir, self.config.budget)
        t0 = time.perf_counter()
        totals = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        level = "dataset" if task.mode == "pairwise" else (task.correlation_level or "dataset")
        search_val, confirm_val = self._split(val, student, level)
        plan = self._plan(search_val, student, level)
        race = self.config.racing
        top = self._race_top()
        dropped = {s["number"] for s in summaries if (s.get("racing") or {}).get("dropped")}
        pending = _Pending(paths["pending"] if paths else None)
        # Every judged item of every strategy (search, confirmation, comparison), so that no
        # judgement is made twice, with or without the LM's cache.
        judged = _ItemStore(paths["items"] if paths else None)
        outer = None
        if self.progress:
            from tqdm import tqdm

            outer = tqdm(total=self.config.budget, initial=search.n_evaluations,
                         desc=f"{self.config.search} {task.name}/{student.aspect}",
                         unit="strategy")
        while (strategy := search.ask()) is not None:
            number = search.n_evaluations
            bar_to = threshold([t.score for t in search.trials if t.number not in dropped],
                               top) if race.enabled else None
            try:
                result, info = self._judge(base.with_strategy(strategy), strategy, number,
                                           plan, search_val, lm, metric=metric, level=level,
                                           bar_to=bar_to, pending=pending, store=judged)
            except LMUnavailable as e:
                if outer is not None:
                    outer.close()
                raise self._stopped(e, f"strategy {number + 1} of {self.config.budget}",
                                    search.n_evaluations) from e
            score = result.metric(metric)
            if info is not None and info["dropped"]:
                dropped.add(number)
                if race.dropped_score == "bound":
                    score = info["bound"]
            search.tell(strategy, score)
            for k in totals:
                totals[k] += int(getattr(result, k))
            summary = {"number": number, "strategy": strategy.as_dict(), **result.summary()}
            if info is not None:
                summary["racing"] = info
            summaries.append(summary)
            log.info("[%d/%d] %s -> %s=%s", search.n_evaluations, self.config.budget,
                     strategy, metric, score)
            if not self.progress:
                progress_log.info(
                    "strategy %d of %d: %s %s (%d of %d unparsed, %d failed calls; %d calls, "
                    "%.0f s); best so far %s", search.n_evaluations, self.config.budget, metric,
                    _fmt(score), result.parse_failures, result.n, result.call_failures,
                    result.calls, result.seconds, _fmt(search.best_score))
            if paths:
                store.save()
                with paths["evals"].open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(summary, ensure_ascii=False) + "\n")
                write_text_atomic(paths["state"], json.dumps(search.state_dict()))
            pending.clear()
            if outer is not None:
                outer.update(1)
                best = search.best_score
                outer.set_postfix({f"best {metric}": "nan" if best is None or math.isnan(best)
                                   else f"{best:.3f}"})
        if outer is not None:
            outer.close()
        best_trial = search.best_trial
        if best_trial is None:
            raise RuntimeError("The search evaluated no strategy.")
        try:
            selected = self._select(search, base, student, search_val, confirm_val, lm,
                                    metric=metric, level=level, store=judged,
                                    summaries=summaries)
        except LMUnavailable as e:
            raise self._stopped(e, "choosing the judge after the search",
                                search.n_evaluations) from e
        compiled = selected.judge
        selection_calls = int(selected.record.get("cost", {}).get("calls", 0))
        this_run = dict(totals)
        # Over every session of the checkpoint (the summaries of earlier sessions included).
        totals = {k: sum(int(s.get(k, 0) or 0) for s in summaries) for k in totals}
        trace = search.trace()
        racing_summary = None
        if race.enabled:
            by_number = {s["number"]: s.get("racing") for s in summaries}
            for t in trace:
                if by_number.get(t["number"]) is not None:
                    t["racing"] = by_number[t["number"]]
            n_judged = [s["n"] for s in summaries]
            racing_summary = {**race.model_dump(mode="json"), "top": top,
                              "dropped": len(dropped),
                              "items_judged": sum(n_judged),
                              "items_full": len(search_val) * len(summaries)}
        compiled.search_result = CompileResult(
            search=self.config.search, budget=self.config.budget, seed=self.config.seed,
            metric=metric, evaluations=search.n_evaluations,
            best_strategy=best_trial.strategy.as_dict(), best_score=best_trial.score,
            trace=trace, evaluation_summaries=summaries,
            seconds=time.perf_counter() - t0, racing=racing_summary,
            calls=totals["calls"], prompt_tokens=totals["prompt_tokens"],
            completion_tokens=totals["completion_tokens"], calls_this_run=this_run["calls"],
            selection_calls=selection_calls)
        # NOTE: through the judge's space, so summaries of a checkpoint written before the
        # `decoding` factor existed (strategies without it) still match.
        compiled.validation = next(
            (s for s in reversed(summaries)
             if base.with_strategy(s["strategy"]).strategy == compiled.strategy), None)
        problems = self._problems(search, summaries, compiled, selected.comparisons, metric)
        compiled.search_result.problems.extend(problems)
        for line in problems:
            log.warning("%s", line, extra=_REPORTED)
        # A model string that loads again ("local:NAME", "router:FILE#GROUP", LiteLLM's).
        compiled.model_name = model_spec(lm)
        compiled.selection = selected.record
        compiled.comparisons = selected.comparisons
        compiled.ensemble = selected.ensemble
        if selected.ensemble is not None:
            selected.ensemble.model_name = compiled.model_name
            selected.ensemble.validation = compiled.validation
        for line in selected.record.get("messages", []):
            log.log(logging.WARNING if selected.warn else logging.INFO, "%s", line,
                    extra=_REPORTED)
        return compiled

    def _problems(self, search: SearchStrategy, summaries: list[dict[str, Any]],
                  compiled: JudgeProgram, comparisons: Mapping[str, Mapping[str, Any]],
                  metric: str) -> list[str]:
        """Why the compiled judge should not be trusted (``docs/judge.md``, "What happens
        when things go wrong"); empty when nothing was found."""
        out = []
        n_items = sum(int(s.get("n", 0)) for s in summaries)
        unparsed = sum(int(s.get("parse_failures", 0)) for s in summaries)
        failed = sum(int(s.get("call_failures", 0)) for s in summaries)
        if search.trials and all(t.failed for t in search.trials):
            out.append(
                f"every one of the {search.n_evaluations} strategies scored NaN ({metric} "
                f"undefined): {unparsed} of {n_items} answers gave no rating and {failed} "
                "calls failed, or the judge gave one rating to every item; the returned "
                "judge is the baseline, not a judge that was shown to work")
        elif compiled.validation is not None and compiled.validation.get(metric) is None:
            out.append(f"the chosen judge's {metric} on the validation items is undefined "
                       "(NaN)")
        limit = self.config.max_parse_failures
        splits: list[tuple[str, Mapping[str, Any]]] = []
        if compiled.validation is not None:
            splits.append(("validation", compiled.validation))
        for split, comp in comparisons.items():
            if split != "validation":
                splits.append((split, comp.get("chosen", {})))
        for split, summ in splits:
            n = int(summ.get("n") or 0)
            bad = int(summ.get("parse_failures") or 0) + int(summ.get("call_failures") or 0)
            if n and bad / n > limit:
                out.append(
                    f"the chosen judge gave no rating for {bad} of {n} {split} items "
                    f"({bad / n:.0%}; {summ.get('parse_failures')} unparsed, "
                    f"{summ.get('call_failures')} failed calls), more than "
                    f"max_parse_failures={limit:g}: too many of its answers are not in the "
                    "expected format (a model too small for the prompt, or a max_tokens "
                    "too low)")
        return out

    def _discard(self, paths: Mapping[str, Path]) -> None:
        """Delete the checkpoint's files (``restart``)."""
        removed = [p.name for p in paths.values() if p.is_file()]
        for p in paths.values():
            p.unlink(missing_ok=True)
        if removed:
            progress_log.info("restart: discarded the checkpoint in %s (%s)",
                              self.checkpoint_dir, ", ".join(removed))

    def _stopped(self, error: LMUnavailable, where: str, done: int) -> LMUnavailable:
        """``error`` with where the compile stopped and what is kept."""
        kept = (f"{done} finished strategies and every judgement made so far are kept in "
                f"{self.checkpoint_dir}; run the same command again to continue from there"
                if self.checkpoint_dir is not None else
                "no checkpoint_dir was given, so the judgements made are lost")
        return LMUnavailable(f"the compile stopped at {where}: {error}. {kept}.",
                             model=error.model, endpoint=error.endpoint, last=error)

    # Selection ----------------------------------------------------------------------------
    def _split(self, val: list[Record], student: JudgeProgram, level: str
               ) -> tuple[list[Record], list[Record] | None]:
        """The search part and the confirmation part (``None``: rule ``best``)."""
        sel = self.config.selection
        if sel.rule == "best":
            return val, None
        pairwise = student.task.mode == "pairwise"
        humans = [r.label if pairwise else r.scores[student.aspect] for r in val]
        grouped = any(r.group_id for r in val)
        groups = [r.group_id or r.id for r in val] if grouped else None
        n_units = len(set(groups)) if groups else len(val)
        too_few = (f"{len(val)} scoring items ({n_units} units) are too few to hold out "
                   f"{sel.confirm_fraction:.0%} for confirmation (at least "
                   f"{sel.min_confirm_items} confirmation items are needed)")
        if n_units < 2 or len(val) * sel.confirm_fraction < sel.min_confirm_items:
            self._split_note = too_few
            return val, None
        search_idx, confirm_idx = confirmation_split(humans, groups,
                                                     fraction=sel.confirm_fraction,
                                                     seed=sel.seed)
        confirm = [val[i] for i in confirm_idx]
        if len(confirm) < sel.min_confirm_items or len(search_idx) < 3 or (
                level == "group" and len({r.group_id or r.id for r in confirm}) < 3):
            self._split_note = too_few
            return val, None
        self._split_note = None
        return [val[i] for i in search_idx], confirm

    def _finalists(self, search: SearchStrategy, base: JudgeProgram, n: int,
                   unrated: Mapping[int, tuple[int, int]] | None = None,
                   excluded: list[dict[str, Any]] | None = None) -> list[Any]:
        """The ``n`` best distinct trials other than the baseline, by search score.

        A trial that gave no rating (unparsed or failed) for more than
        ``max_parse_failures`` of its search items (``unrated``: number -> (no rating,
        items)) is passed over: its score rests on the few answers that parsed (the rest
        are imputed), and as the compiled judge it would be reported as untrustworthy.
        The trials passed over before the last finalist are appended to ``excluded``.
        """
        limit = self.config.max_parse_failures
        trials = [t for t in search.trials
                  if t.score is not None and math.isfinite(t.score)]
        trials.sort(key=lambda t: (-t.score, t.number))
        out, seen = [], {_strategy_key(base.strategy)}
        for t in trials:
            key = _strategy_key(base.with_strategy(t.strategy).strategy)
            if key in seen:
                continue
            seen.add(key)
            bad, n_items = (unrated or {}).get(t.number, (0, 0))
            if n_items and bad / n_items > limit:
                if excluded is not None:
                    excluded.append({"key": f"#{t.number}", "search_score": t.score,
                                     "unrated": bad, "n": n_items})
                continue
            out.append(t)
            if len(out) == n:
                break
        return out

    def _best_rated(self, search: SearchStrategy, unrated: Mapping[int, tuple[int, int]],
                    excluded: list[dict[str, Any]]) -> Any | None:
        """The trial with the best search score (the baseline's included) among those that
        rated at least ``1 - max_parse_failures`` of their items; ``None`` if none did. The
        trials passed over are appended to ``excluded``."""
        limit = self.config.max_parse_failures
        trials = sorted((t for t in search.trials
                         if t.score is not None and math.isfinite(t.score)),
                        key=lambda t: (-t.score, t.number))
        for t in trials:
            bad, n_items = unrated.get(t.number, (0, 0))
            if not (n_items and bad / n_items > limit):
                return t
            excluded.append({"key": f"#{t.number}", "search_score": t.score,
                             "unrated": bad, "n": n_items})
        return None

    @staticmethod
    def _search_score(search: SearchStrategy, base: JudgeProgram, program: JudgeProgram
                      ) -> float | None:
        """The best search score of ``program``'s strategy (``None``: not scored)."""
        key = _strategy_key(program.strategy)
        scores = [t.score for t in search.trials
                  if t.score is not None and math.isfinite(t.score)
                  and _strategy_key(base.with_strategy(t.strategy).strategy) == key]
        return max(scores) if scores else None

    def _select(self, search: SearchStrategy, base: JudgeProgram, student: JudgeProgram,
                search_val: list[Record], confirm_val: list[Record] | None, lm: Any, *,
                metric: str, level: str, store: _ItemStore,
                summaries: Sequence[Mapping[str, Any]] = ()) -> _Selected:
        """Choose the compiled judge (``docs/judge.md``, "Choosing the judge")."""
        sel = self.config.selection
        baseline = base.with_strategy(student.strategy)
        best_trial = search.best_trial
        assert best_trial is not None
        stats0 = _lm_stats(lm)
        t0 = time.perf_counter()
        n_members = self.config.ensemble if self.config.ensemble >= 2 else 0
        record: dict[str, Any] = {"rule": sel.rule, **sel.model_dump(mode="json"),
                                  "search_items": len(search_val), "messages": []}
        comparisons: dict[str, dict[str, Any]] = {}
        unrated = {int(s["number"]): (int(s.get("parse_failures") or 0)
                                      + int(s.get("call_failures") or 0), int(s.get("n") or 0))
                   for s in summaries}
        excluded: list[dict[str, Any]] = []
        if confirm_val is None:
            # Rule "best" (asked for, or too few items to confirm): the best search score
            # among the strategies that rated enough of their items.
            record["rule"] = "best"
            record["confirm_items"] = 0
            if sel.rule != "best":
                record["messages"].append(
                    f"selection: {self._split_note}; the judge with the best validation score "
                    "is returned, which is biased upward (winner's curse)")
            top = self._best_rated(search, unrated, excluded) or best_trial
            chosen = base.with_strategy(top.strategy)
            finalists = [top] if n_members == 0 else self._finalists(
                search, base, n_members, unrated, excluded)
            if not finalists:
                finalists = [top]
            judged_on, split = search_val, "validation"
            note = ("the items the search chose the judge on: the gain is biased upward; "
                    "evaluate on held-out test items for an unbiased estimate")
        else:
            finalists = self._finalists(search, base, max(sel.compared, n_members), unrated,
                                        excluded)
            record["confirm_items"] = len(confirm_val)
            judged_on, split = confirm_val, "confirmation"
            note = ("the confirmation items also chose among the finalists: the gain is "
                    "somewhat optimistic; evaluate on held-out test items for an unbiased "
                    "estimate")
            chosen = baseline
        if excluded:
            unique = list({e["key"]: e for e in excluded}.values())
            record["excluded"] = unique
            listed = ", ".join(f"{e['key']} ({e['unrated']} of {e['n']}; search score "
                               f"{e['search_score']:.3f})" for e in unique)
            record["messages"].append(
                f"selection: passed over {len(unique)} strateg{'y' if len(unique) == 1 else 'ies'}"
                f" with a high search score that gave no rating for more than "
                f"max_parse_failures={self.config.max_parse_failures:g} of their search "
                f"items (their score rests on the few answers that parsed): {listed}")
        pairwise = base.task.mode == "pairwise"
        results: dict[str, EvalResult] = {}

        def judged(program: JudgeProgram, desc: str) -> EvalResult:
            key = _strategy_key(program.strategy)
            if key not in results:
                results[key] = self._evaluate_stored(program, judged_on, lm, store, desc=desc,
                                                     level=level)
            return results[key]

        base_res = judged(baseline, f"{split}: baseline")
        fin_progs = [base.with_strategy(t.strategy) for t in finalists]
        fin_res = [judged(p, f"{split}: finalist {i + 1}") for i, p in enumerate(fin_progs)]
        humans = [r.label if pairwise else r.scores[base.aspect] for r in judged_on]
        groups = [r.group_id or r.id for r in judged_on] if level == "group" else None

        def vector(res: EvalResult) -> list[float]:
            items = _in_order(res, judged_on)
            return correct(items) if pairwise else item_predictions(items)

        if confirm_val is not None and fin_progs:
            confirm_n = min(sel.compared, len(fin_progs))
            try:
                if sel.rule == "veto":
                    base_score = self._search_score(search, base, baseline)
                    record["baseline_search_score"] = base_score
                    result = veto(humans, vector(base_res), vector(fin_res[0]),
                                  search_score=finalists[0].score,
                                  baseline_search_score=base_score,
                                  key=f"#{finalists[0].number}", method=metric,
                                  groups=groups, confidence=sel.confidence,
                                  n_resamples=sel.n_resamples, seed=sel.seed)
                else:
                    result = choose(humans, vector(base_res),
                                    [vector(r) for r in fin_res[:confirm_n]],
                                    search_scores=[t.score for t in finalists[:confirm_n]],
                                    keys=[f"#{t.number}" for t in finalists[:confirm_n]],
                                    method=metric, groups=groups, confidence=sel.confidence,
                                    n_resamples=sel.n_resamples, seed=sel.seed)
            except ValueError as e:
                record["messages"].append(f"selection: the confirmation failed ({e}); the "
                                          "baseline is kept")
                result = None
            if result is not None:
                record.update(result.to_dict())
                for f, t in zip(record["finalists"], finalists, strict=False):
                    f["strategy"] = base.with_strategy(t.strategy).strategy.as_dict()
                record["messages"].append(f"selection: {result.reason}")
                if result.chosen is not None:
                    chosen = fin_progs[result.chosen]
        elif confirm_val is not None:
            record["messages"].append("selection: the search found no strategy other than "
                                      "the baseline with a score; the baseline is kept")
        chosen_res = judged(chosen, f"{split}: chosen")
        comparison = compare(chosen_res, base_res, judged_on, metric=metric,
                             n_resamples=sel.n_resamples, seed=sel.seed, note=note)
        comparisons[split] = comparison.to_dict()
        ensemble = None
        if n_members:
            ensemble = self._ensemble(fin_progs[:n_members], fin_res[:n_members], judged_on,
                                      base_res, metric=metric, split=split, note=note,
                                      record=record, pairwise=pairwise)
        stats1 = _lm_stats(lm)
        record["cost"] = {k: stats1[k] - stats0[k] for k in stats0}
        record["cost"]["seconds"] = round(time.perf_counter() - t0, 3)
        compiled = chosen.with_strategy(chosen.strategy)
        warn = comparison.gain is not None and comparison.gain < 0
        if warn:
            record["messages"].append(
                f"selection: the returned judge scores {comparison.gain:+.3f} against the "
                f"baseline on the {split} items")
        return _Selected(compiled, record, comparisons, ensemble,
                         warn or record["rule"] != sel.rule)

    def _ensemble(self, members: list[JudgeProgram], results: list[EvalResult],
                  records: list[Record], base_res: EvalResult, *, metric: str, split: str,
                  note: str, record: dict[str, Any], pairwise: bool) -> JudgeEnsemble | None:
        """The ensemble of ``members``, normalised on ``records`` and compared there."""
        if pairwise:
            record["messages"].append("ensemble: a pairwise judge has no ratings to average; "
                                      "no ensemble is built")
            return None
        keep, means, sds = [], [], []
        for prog, res in zip(members, results, strict=True):
            parsed = [float(i.score) for i in res.items if i.score is not None]  # type: ignore[arg-type]
            if len(parsed) < 2:
                continue
            mean = sum(parsed) / len(parsed)
            sd = math.sqrt(sum((x - mean) ** 2 for x in parsed) / (len(parsed) - 1))
            if sd > 0:
                keep.append((prog, res))
                means.append(mean)
                sds.append(sd)
        if len(keep) < 2:
            record["messages"].append(
                f"ensemble: fewer than 2 of the {len(members)} best strategies gave varying "
                "ratings; no ensemble is built")
            return None
        ens = JudgeEnsemble([p for p, _ in keep], means, sds)
        items = []
        for i, r in enumerate(records):
            ratings = []
            for _, res in keep:
                item = _in_order(res, records)[i]
                ratings.append(None if item.score is None else float(item.score))  # type: ignore[arg-type]
            score, _ = ens.combine(ratings)
            items.append(ItemResult(r.id, r.scores.get(ens.aspect), score,
                                    parse_error=None if score is not None else "no member parsed"))
        ens_res = merge_results([EvalResult(n=len(items), parse_failures=0, call_failures=0,
                                            level=base_res.level, items=items)], records,
                                pairwise=False, level=base_res.level)
        ens.comparisons = {split: compare(ens_res, base_res, records, metric=metric,
                                          labels=("baseline", "ensemble"),
                                          n_resamples=self.config.selection.n_resamples,
                                          seed=self.config.selection.seed,
                                          note=note).to_dict()}
        ens.selection = {"members": [p.strategy.as_dict() for p, _ in keep],
                         "normalised_on": split, "items": len(records)}
        return ens

    def _evaluate_stored(self, program: JudgeProgram, records: list[Record], lm: Any,
                         store: _ItemStore, *, desc: str, level: str) -> EvalResult:
        """Evaluate ``program`` on ``records``, reusing and recording items in ``store``."""
        pairwise = program.task.mode == "pairwise"
        done = store.items(program.strategy)
        todo = [r for r in records if r.id not in done]
        parts = []
        if len(done):
            parts.append(EvalResult(n=len(done), parse_failures=0, call_failures=0,
                                    level=level, items=[done[r.id] for r in records
                                                        if r.id in done]))
        if todo:
            parts.append(self._evaluate_retrying(
                program, todo, lm, desc=desc, level=level,
                on_item=lambda item: store.add(program.strategy, item)))
        return merge_results(parts, records, pairwise=pairwise, level=level)

    def _evaluate_retrying(self, program: JudgeProgram, records: list[Record], lm: Any, *,
                           desc: str, level: str,
                           on_item: Any) -> EvalResult:
        """Evaluate ``records``; judge the items whose call failed transiently once more.

        A judgement is final only when its call did not fail transiently (see
        :data:`judgeopt.lm.TRANSIENT_KINDS`): items that still fail after the second try
        stop the compile (:class:`judgeopt.lm.LMUnavailable`), so no strategy is scored with
        judgements the endpoint never made; the items judged are kept in the checkpoint and
        a re-run judges only the failed ones. The circuit breaker stops a dead endpoint
        after ``max_consecutive_failures`` calls in a row.
        """
        limit = self.config.max_consecutive_failures
        res = evaluate(program, records, lm=lm, threads=self.config.threads,
                       progress=self.progress, desc=desc, on_item=on_item,
                       max_consecutive_failures=limit)
        failed = {i.id for i in res.items if i.transient}
        if not failed:
            return res
        log.info("%s: %d judge call(s) failed transiently; trying them once more", desc,
                 len(failed))
        again = evaluate(program, [r for r in records if r.id in failed], lm=lm,
                         threads=self.config.threads, progress=self.progress,
                         desc=f"{desc} (retry)", on_item=on_item,
                         max_consecutive_failures=limit)
        still = [i for i in again.items if i.transient]
        if still:
            raise LMUnavailable(
                f"{desc}: {len(still)} of {len(records)} judge calls failed twice ("
                f"{still[-1].error}); their strategy is not scored with missing judgements",
                last=None)
        return merge_results([res, again], records, pairwise=program.task.mode == "pairwise",
                             level=level)


def _fmt(value: float | None) -> str:
    return "nan" if value is None or math.isnan(value) else f"{value:.4f}"


#: The messages of the check call a compile makes before the search.
ENDPOINT_CHECK: tuple[dict[str, str], ...] = ({"role": "user", "content": "Reply with OK."},)


def _check_endpoint(lm: Any) -> None:
    """One short call, uncached, before any judging: a dead endpoint stops at once."""
    from .lm import JudgeLM, RouterLM

    if not isinstance(lm, (JudgeLM, RouterLM)):
        # In process (nothing to reach) or not a judgeopt LM: the breaker still guards it.
        return
    quiet = lm.copy()
    # A one-token answer ends with finish_reason="length" by design.
    quiet._check_truncation = lambda *_a, **_k: None
    if isinstance(quiet, JudgeLM):
        # One retry at most: a dead endpoint is reported in about a second, not after the
        # full backoff of a judge call.
        quiet.num_retries = min(1, quiet.num_retries)
    try:
        quiet.forward(messages=[dict(m) for m in ENDPOINT_CHECK], max_tokens=1, cache=False)
    except LMError as e:
        if e.kind not in TRANSIENT_KINDS | {"auth", "bad_request"}:
            # Not a sign of an unusable endpoint (e.g. an odd answer to the odd question):
            # the judge calls will tell.
            log.warning("the check call before the search failed (%s); judging anyway", e)
            return
        raise LMUnavailable(
            f"the model does not answer a check call made before the search, so nothing "
            f"was judged: {e}", model=e.model, endpoint=e.endpoint, last=e) from e


def _selection_config(value: str | SelectionConfig | Mapping[str, Any] | None
                      ) -> SelectionConfig:
    if value is None:
        return SelectionConfig()
    if isinstance(value, SelectionConfig):
        return value
    if isinstance(value, str):
        return SelectionConfig(rule=value)  # type: ignore[arg-type]
    return SelectionConfig(**value)


def _lm_stats(lm: Any) -> dict[str, int]:
    fn = getattr(lm, "stats", None)
    st = fn() if callable(fn) else None
    keys = ("calls", "cache_hits", "prompt_tokens", "completion_tokens")
    return {k: int(getattr(st, k, 0) or 0) for k in keys}


def _in_order(res: EvalResult, records: Sequence[Record]) -> list[ItemResult]:
    by_id = {i.id: i for i in res.items}
    return [by_id[r.id] for r in records]


@dataclass(frozen=True)
class _Selected:
    judge: JudgeProgram
    record: dict[str, Any]
    comparisons: dict[str, dict[str, Any]]
    ensemble: JudgeEnsemble | None
    warn: bool


def _strategy_key(strategy: Strategy | Mapping[str, Any]) -> str:
    """A strategy's identity as text (its values, sorted by factor): the key of the judged
    items and of the distinct strategies."""
    values = strategy.as_dict() if isinstance(strategy, Strategy) else dict(strategy)
    return json.dumps(values, sort_keys=True, default=str)


class _ItemStore:
    """Judged items per strategy (``items.jsonl``), so a resumed compile repeats no call.

    A failed call is not stored: it is tried again on resume.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._items: dict[str, dict[str, ItemResult]] = {}
        if path is not None and path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    item = ItemResult(**row["item"])
                except (ValueError, TypeError, KeyError):
                    continue  # a line cut by an interruption
                self._items.setdefault(row["strategy"], {})[item.id] = item

    def items(self, strategy: Strategy | Mapping[str, Any]) -> dict[str, ItemResult]:
        """The stored items of ``strategy`` (or its plain-data form) by id."""
        return dict(self._items.get(_strategy_key(strategy), {}))

    def add(self, strategy: Strategy, item: ItemResult) -> None:
        """Store one judged item (not a failed call)."""
        if item.error is not None:
            return
        key = _strategy_key(strategy)
        self._items.setdefault(key, {})[item.id] = item
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"strategy": key, "item": asdict(item)},
                                    ensure_ascii=False) + "\n")


def _finite_or_none(value: float) -> float | None:
    """A metric for the racing record: ``None`` for NaN (no correlation defined)."""
    return None if math.isnan(value) else value


@dataclass(frozen=True)
class _Plan:
    """Validation units in judging order and the unit counts after which racing checks."""

    units: list[list[Record]]
    sizes: list[int]

    def records(self, n_units: int) -> list[Record]:
        """The records of the first ``n_units`` units."""
        return [r for unit in self.units[:n_units] for r in unit]


class _Pending:
    """The judged items of the candidate in progress, one JSON line each (``pending.jsonl``).

    The first line names the candidate (evaluation number and strategy); a resumed compile
    reuses the items only for that same candidate, so an interruption mid-candidate repeats
    no finished judge call even without the LM's cache. Cleared once the candidate is told.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._active = False

    def resume(self, number: int, strategy: Strategy) -> dict[str, ItemResult]:
        """Items judged earlier for this candidate; starts a fresh file otherwise."""
        done: dict[str, ItemResult] = {}
        if self.path is None:
            return done
        header = {"number": number, "strategy": strategy.as_dict()}
        if self.path.is_file():
            lines = self.path.read_text(encoding="utf-8").splitlines()
            try:
                if lines and json.loads(lines[0]) == header:
                    for line in lines[1:]:
                        item = ItemResult(**json.loads(line))
                        done[item.id] = item
            except (ValueError, TypeError):
                # A line cut by the interruption ends the usable part.
                pass
        lines = [json.dumps(header, ensure_ascii=False)] + [
            json.dumps(asdict(item), ensure_ascii=False) for item in done.values()]
        write_text_atomic(self.path, "\n".join(lines) + "\n")
        self._active = True
        return done

    def add(self, item: ItemResult) -> None:
        """Record one judged item (a failed call is not recorded: it is retried on resume)."""
        if self.path is None or not self._active or item.error is not None:
            return
        # NOTE: opened per item, so an interruption leaves no open handle and at most one
        # cut line (ignored on resume); negligible next to a judge call.
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(asdict(item), ensure_ascii=False) + "\n")

    def clear(self) -> None:
        """The candidate was told: forget its items."""
        self._active = False
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def _group_sd(items: Sequence[ItemResult], records: Sequence[Record], metric: str
              ) -> float | None:
    """Spread of the per-group correlations of judged items (mean-imputed, as scored)."""
    parsed = [float(i.score) for i in items if i.score is not None]  # type: ignore[arg-type]
    if len(parsed) < 3:
        return None
    fill = sum(parsed) / len(parsed)
    pred = [fill if i.score is None else float(i.score) for i in items]  # type: ignore[arg-type]
    human = [float(i.human) for i in items]  # type: ignore[arg-type]
    try:
        per = list(group_correlation(human, pred, [r.group_id or r.id for r in records],
                                     metric).per_group.values())
    except ValueError:
        return None
    if len(per) < 2:
        return None
    mean = sum(per) / len(per)
    return math.sqrt(sum((v - mean) ** 2 for v in per) / (len(per) - 1))


class Auto(JudgeSearch):
    """judgeopt's default search (:class:`judgeopt.search.AutoSearch`: HPSS with a
    budget-aware start, shrunken advantages and constants chosen per budget) as a DSPy
    teleprompter. Keyword arguments as :class:`JudgeSearch`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("auto", **kwargs)


class HPSS(JudgeSearch):
    """HPSS as a DSPy teleprompter (paper defaults: budget 71, k=5, g=2, rho=0.2, tau=5,
    lambda=4). Keyword arguments as :class:`JudgeSearch`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("hpss", **kwargs)


class Greedy(JudgeSearch):
    """Greedy search (HPSS App. F.2) as a DSPy teleprompter."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("greedy", **kwargs)


class StepwiseGreedy(JudgeSearch):
    """Stepwise-Greedy (HPSS App. F.2) as a DSPy teleprompter."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("stepwise", **kwargs)


class RandomSearch(JudgeSearch):
    """Uniform random search as a DSPy teleprompter."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("random", **kwargs)


class GridSearch(JudgeSearch):
    """Every strategy of the (restricted) space, as a DSPy teleprompter."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("grid", **kwargs)

