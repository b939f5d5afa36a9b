"""DSPy teleprompters that search a judge's prompting strategy (HPSS and its baselines).

Each teleprompter is a thin loop around a search of :mod:`judgeopt.search`::

    strategy = search.ask() -> judge = student.with_strategy(strategy)
    -> evaluate(judge, valset) -> search.tell(strategy, correlation)

with a checkpoint after every evaluation (search state, evaluation summaries and
artifacts), so an interrupted compile resumes where it stopped; the LM's persistent cache
makes finished judge calls free on a re-run.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import inspect  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import tomllib  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Literal  # noqa: E402

from dspy.teleprompt import Teleprompter  # noqa: E402
from pydantic import BaseModel, ConfigDict, Field, ValidationError  # noqa: E402

from ._io import write_text_atomic  # noqa: E402
from .data import Record, validate_records  # noqa: E402
from .evaluate import evaluate  # noqa: E402
from .judge import JudgeProgram, hpss_graph  # noqa: E402
from .judge._artifacts import ArtifactStore  # noqa: E402
from .judge._decoding import check_decodings  # noqa: E402
from .judge._program import to_records  # noqa: E402
from .search import SEARCHES, FactorGraph, SearchStrategy, Value  # noqa: E402

__all__ = [
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

Metric = Literal["spearman", "kendall", "pearson", "accuracy"]


class OptimizerConfig(BaseModel):
    """An optimizer preset (``optimizers/*.toml``).

    Attributes:
        search: The search, one of :data:`judgeopt.search.SEARCHES`.
        budget: Unique strategy evaluations, initialisation included.
        seed: The search's seed.
        params: Keyword arguments of the search class (e.g. HPSS's ``k``, ``rho``).
        space: Factor -> allowed values, to restrict the space (other factors keep all).
        threads: Judge calls in flight at once.
        metric: What the search maximises (default: ``spearman``; ``accuracy`` pairwise).
        example_seed: Seed of the in-context example selection.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    search: str = "auto"
    budget: int = Field(71, ge=1)
    seed: int = Field(0, ge=0)
    params: dict[str, Any] = Field(default_factory=dict)
    space: dict[str, list[Value]] = Field(default_factory=dict)
    threads: int = Field(1, ge=1)
    metric: Metric | None = None
    example_seed: int = Field(0, ge=0)

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
        shipped = Path(__file__).resolve().parents[2] / "optimizers" / f"{path_or_name}.toml"
        packaged = Path(__file__).resolve().parent / "_presets" / f"{path_or_name}.toml"
        path = shipped if shipped.is_file() else packaged
    if not path.is_file():
        raise ValueError(f"Optimizer preset {str(path_or_name)!r} not found (a TOML file or "
                         "one of: hpss, greedy, stepwise, random, quick).")
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
    """What a compile did: the search, its trace, and its cost."""

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
        metric: What to maximise (default ``spearman``; ``accuracy`` for pairwise tasks).
        threads: Judge calls in flight at once (1 for the in-process local model).
        checkpoint_dir: Directory for the resumable checkpoint (search state, evaluation
            summaries, artifacts). ``None``: no checkpoint.
        progress: Show progress bars.
        example_seed: Seed of the in-context example selection.

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
        metric: Metric | None = None,
        threads: int = 1,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        progress: bool = True,
        example_seed: int = 0,
    ) -> None:
        super().__init__()
        self.config = OptimizerConfig(
            search=search, budget=budget, seed=seed, params=dict(params or {}),
            space={k: list(v) for k, v in (space or {}).items()}, threads=threads,
            metric=metric, example_seed=example_seed)
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.progress = progress

    @classmethod
    def from_config(cls, config: OptimizerConfig, **overrides: Any) -> JudgeSearch:
        """Build from a preset, with keyword overrides (e.g. ``budget=20``)."""
        kw = config.model_dump()
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
                raise ValueError(
                    f"The student's strategy {base} (the search's baseline) is outside the "
                    f"optimizer's `space`; the {self.config.search} search starts from it, so "
                    "allow its values or build the student with a strategy inside the space.")
            kwargs["baseline"] = base
        return cls(graph.space, budget=self.config.budget, seed=self.config.seed, graph=graph,
                   **kwargs)

    def _records(self, data: Sequence[Any], student: JudgeProgram, name: str) -> list[Record]:
        records = to_records(data, student.task, student.aspect)
        if not records:
            raise ValueError(f"`{name}` is empty.")
        pairwise = student.task.mode == "pairwise"
        validate_records(records, required_fields=student.task.input_names,
                         aspect=None if pairwise else student.aspect,
                         score_range=None if pairwise else student.task.human_range(
                             student.aspect),
                         pairwise=pairwise)
        return records

    # Checkpoint ---------------------------------------------------------------------------
    def _paths(self) -> dict[str, Path] | None:
        if self.checkpoint_dir is None:
            return None
        d = self.checkpoint_dir
        return {"state": d / "search_state.json", "evals": d / "evaluations.jsonl",
                "artifacts": d / "artifacts.json"}


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
        """
        task = student.task
        metric = self.config.metric or ("accuracy" if task.mode == "pairwise" else "spearman")
        if (metric == "accuracy") != (task.mode == "pairwise"):
            raise ValueError(f"metric {metric!r} does not fit a {task.mode} task.")
        train = self._records(trainset, student, "trainset")
        val = self._records(valset, student, "valset") if valset is not None else train
        lm = student.resolve_lm()
        paths = self._paths()
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
                summaries = [json.loads(line) for line in
                             paths["evals"].read_text(encoding="utf-8").splitlines() if line]
            log.info("resumed from %s: %d evaluations done", paths["state"],
                     search.n_evaluations)
        t0 = time.perf_counter()
        totals = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        outer = None
        if self.progress:
            from tqdm import tqdm

            outer = tqdm(total=self.config.budget, initial=search.n_evaluations,
                         desc=f"{self.config.search} {task.name}/{student.aspect}",
                         unit="strategy")
        while (strategy := search.ask()) is not None:
            result = evaluate(base.with_strategy(strategy), val, lm=lm,
                              threads=self.config.threads, progress=self.progress,
                              desc=f"strategy {search.n_evaluations + 1}")
            score = result.metric(metric)
            search.tell(strategy, score)
            for k in totals:
                totals[k] += int(getattr(result, k))
            summary = {"number": search.n_evaluations - 1, "strategy": strategy.as_dict(),
                       **result.summary()}
            summaries.append(summary)
            log.info("[%d/%d] %s -> %s=%s", search.n_evaluations, self.config.budget,
                     strategy, metric, score)
            if paths:
                store.save()
                with paths["evals"].open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(summary, ensure_ascii=False) + "\n")
                write_text_atomic(paths["state"], json.dumps(search.state_dict()))
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
        compiled = base.with_strategy(best_trial.strategy)
        compiled.search_result = CompileResult(
            search=self.config.search, budget=self.config.budget, seed=self.config.seed,
            metric=metric, evaluations=search.n_evaluations,
            best_strategy=best_trial.strategy.as_dict(), best_score=best_trial.score,
            trace=search.trace(), evaluation_summaries=summaries,
            seconds=time.perf_counter() - t0, **totals)
        # NOTE: through the judge's space, so summaries of a checkpoint written before the
        # `decoding` factor existed (strategies without it) still match.
        compiled.validation = next(
            (s for s in reversed(summaries)
             if base.with_strategy(s["strategy"]).strategy == compiled.strategy), None)
        compiled.model_name = getattr(lm, "model", None)
        return compiled


class Auto(JudgeSearch):
    """judgeopt's default search (:class:`judgeopt.search.AutoSearch`: HPSS without the
    initialisation pass, with shrunken advantages) as a DSPy teleprompter. Keyword arguments
    as :class:`JudgeSearch`."""

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

