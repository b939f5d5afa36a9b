"""The teleprompters: :class:`JudgeSearch` and one class per search (``HPSS``, ``Greedy``, ...).

Each is a DSPy teleprompter whose ``compile`` runs :class:`~judgeopt.teleprompt._loop.CompileRun`
with the teleprompter's settings (an :class:`OptimizerConfig`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, cast

from dspy.teleprompt import Teleprompter
from pydantic import ValidationError

from ..evaluate import CHECK_TIMEOUT, SUITE_VERSION, CostPlan, Timing
from ..judge import JudgeStudent
from ..lm import LMUnavailable
from ..racing import RacingConfig
from ..search import Value
from ..selection import SelectionConfig
from ._config import Metric, OptimizerConfig, racing_config, selection_config
from ._loop import CompileRun

_Student = TypeVar("_Student", bound=JudgeStudent)

__all__ = [
    "Auto",
    "GridJudgeSearch",
    "Greedy",
    "HPSS",
    "JudgeSearch",
    "RandomJudgeSearch",
    "StepwiseGreedy",
]


class JudgeSearch(Teleprompter):
    """Search a judge program's prompting strategy on labelled data (a DSPy teleprompter).

    Args:
        search: Search name (``auto``, the default, ``hpss``, ``greedy``, ``stepwise``,
            ``random``, ``grid``, ``tpe``). The subclasses (:class:`HPSS`, :class:`Greedy`,
            ...) fix it: leave it out there.
        budget: Unique strategy evaluations, initialisation included.
        seed: The search's seed.
        params: Extra keyword arguments of the search class.
        space: Factor -> allowed values, restricting the HPSS space.
        forbid: Forbidden combinations of factor values (partial assignments; see
            :class:`OptimizerConfig`).
        candidates: ``"all"``, or ``"rate_first"``: besides the student's own strategy,
            judge only strategies that rate before they explain (judged stopped at the
            rating; see :class:`OptimizerConfig`).
        metric: What to maximise (default ``spearman``; ``accuracy`` for pairwise tasks).
        threads: Judge calls in flight at once (``None``: what the LM keeps busy: an
            embedded model's ``parallel``, else 1).
        checkpoint_dir: Directory for the resumable checkpoint (search state, evaluation
            summaries, artifacts). ``None``: no checkpoint.
        progress: Show progress bars.
        example_seed: Seed of the in-context example selection.
        racing: ``True`` / ``False`` to switch racing on or off with default settings, or a
            :class:`judgeopt.racing.RacingConfig` (or its fields as a mapping).
        selection: ``"lcb"`` (default), ``"confirm"``, ``"veto"``, ``"best"``, ``"shrink"``,
            ``"factor"`` or ``"posterior"`` (the rule, other settings default), or a
            :class:`judgeopt.selection.SelectionConfig` (or its fields as a mapping): how the
            compiled judge is chosen (``docs/judge.md``, "Choosing the judge").
        ensemble: Also build a prompt ensemble of this many of the best strategies
            (``compiled.ensemble``; 0 or 1: none).
        ensemble_anchor: The baseline's weight in that ensemble (0: none; ``w`` in (0, 1):
            the baseline at ``w`` with the ``ensemble`` best other strategies, which may then
            be 1; see :class:`OptimizerConfig`).
        ensemble_stack: Fit that ensemble's weights on the validation items, a non-negative
            ridge stack with this penalty per item (0: equal weights; see
            :class:`OptimizerConfig`).
        max_consecutive_failures: Stop the compile after this many judge calls in a row
            failed transiently (the endpoint is down); a re-run continues.
        check_timeout: Seconds the check call before the search waits for its answer
            (apart from the LM's per-call timeout; :data:`judgeopt.evaluate.CHECK_TIMEOUT`).
        max_parse_failures: Share of the chosen judge's answers without a rating above which
            the compile reports a problem (``CompileResult.problems``).
        max_attack_success: Hold the chosen judge to this attack success rate over the
            injection suite, on the validation items: a judge above it is passed over
            (``None``: no check; see :class:`OptimizerConfig`).
        attack_suite: The injection suite of that check.
        max_attack_checks: The most judges that check runs the suite on.
        restart: Discard the checkpoint in ``checkpoint_dir`` and start afresh (needed when
            it belongs to a run with other data, settings or model).
        check_endpoint: Make one short call before the search, so a dead or misnamed
            endpoint stops the compile at once with a clear error.
        plan_cost: Estimate the compile's calls, tokens, time and money before its first
            judge call and log the plan (``judgeopt.progress``); the baseline is judged and
            timed for it (the search reads those answers from the response cache). The
            compile's :class:`CompileResult` keeps the plan beside what was spent.

    Raises:
        ValueError: On an unknown search, parameter, factor or value, or a subclass given
            another search than its own.
    """

    #: The search a subclass runs (``None``: the ``search`` argument says, default ``auto``).
    _search: ClassVar[str | None] = None

    def __init__(
        self,
        search: str | None = None,
        *,
        budget: int = 71,
        seed: int = 0,
        params: Mapping[str, Any] | None = None,
        space: Mapping[str, Sequence[Value]] | None = None,
        forbid: Sequence[Mapping[str, Value]] | None = None,
        candidates: Literal["all", "rate_first"] = "all",
        metric: Metric | None = None,
        threads: int | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        progress: bool = True,
        example_seed: int = 0,
        racing: bool | RacingConfig | Mapping[str, Any] | None = None,
        selection: str | SelectionConfig | Mapping[str, Any] | None = None,
        ensemble: int = 0,
        ensemble_anchor: float = 0.0,
        ensemble_stack: float = 0.0,
        max_consecutive_failures: int = 5,
        check_timeout: float = CHECK_TIMEOUT,
        max_parse_failures: float = 0.25,
        max_attack_success: float | None = None,
        attack_suite: str = SUITE_VERSION,
        max_attack_checks: int = 3,
        restart: bool = False,
        check_endpoint: bool = True,
        plan_cost: bool = True,
    ) -> None:
        super().__init__()
        own = type(self)._search
        if own is not None and search not in (None, own):
            raise ValueError(
                f"{type(self).__name__} runs search {own!r}; got search={search!r} "
                f"(JudgeSearch({search!r}, ...) runs that one)"
            )
        self.config = OptimizerConfig(
            search=own or search or "auto",
            budget=budget,
            seed=seed,
            params=dict(params or {}),
            space={k: list(v) for k, v in (space or {}).items()},
            forbid=[dict(a) for a in (forbid or [])],
            candidates=candidates,
            threads=threads,
            metric=metric,
            example_seed=example_seed,
            racing=racing_config(racing),
            selection=selection_config(selection),
            ensemble=ensemble,
            ensemble_anchor=ensemble_anchor,
            ensemble_stack=ensemble_stack,
            max_consecutive_failures=max_consecutive_failures,
            check_timeout=check_timeout,
            max_parse_failures=max_parse_failures,
            max_attack_success=max_attack_success,
            attack_suite=attack_suite,
            max_attack_checks=max_attack_checks,
        )
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.progress = progress
        self.restart = restart
        self.check_endpoint = check_endpoint
        self.plan_cost = plan_cost

    @classmethod
    def from_config(cls, config: OptimizerConfig, **overrides: Any) -> JudgeSearch:
        """Build from a preset, with keyword overrides (e.g. ``budget=20``).

        ``racing=True`` / ``False`` switches the preset's racing on or off and keeps its other
        racing settings; ``selection="best"`` / ``"confirm"`` (any rule's name) changes the
        preset's selection rule and keeps its other selection settings; ``guard=True`` /
        ``False`` switches the cross-fitted guard (``SelectionConfig.guard``) on or off;
        ``frugal=TOL`` sets ``SelectionConfig.frugal``.

        Raises:
            ValueError: On an unknown rule name (naming the allowed ones), or ``frugal``
                without the guard and rule best.
        """
        race = overrides.pop("racing", None)
        racing: Any = config.racing.model_dump() if race is None else race
        if isinstance(race, bool):
            racing = config.racing.model_copy(update={"enabled": race})
        rule = overrides.pop("selection", None)
        selection: Any = config.selection.model_dump() if rule is None else rule
        if isinstance(rule, str):
            selection = config.selection.with_rule(rule)
        update: dict[str, Any] = {}
        guard = overrides.pop("guard", None)
        if guard is not None:
            update["guard"] = bool(guard)
        frugal = overrides.pop("frugal", None)
        if frugal is not None:
            update["frugal"] = float(frugal)
        if update:
            # Validated again: frugal needs the guard and rule best.
            stated = selection_config(selection).model_dump(exclude_unset=True)
            try:
                selection = SelectionConfig.model_validate({**stated, **update})
            except ValidationError as e:
                said = (str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
                raise ValueError("; ".join(said)) from None
        kw = config.model_dump(exclude={"racing", "selection"})
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return JudgeSearch(kw.pop("search"), racing=racing, selection=selection, **kw)

    def compile(
        self,
        student: _Student,
        *,
        trainset: Sequence[Any],
        teacher: Any = None,
        valset: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> _Student:
        """Search the strategy of ``student`` and return the best judge found.

        The student is never changed: the strategies are judged with its fresh copies
        (:meth:`~judgeopt.judge.JudgeStudent.fresh_copy`), so any judge program that provides
        the copy protocol (:class:`~judgeopt.judge.JudgeProgram`,
        :class:`~judgeopt.judge.PrExMeProgram`) compiles.

        Args:
            student: The judge to optimise: its task, aspect and LM are used, and its
                strategy (by default the MT-Bench baseline) is where the search starts.
            trainset: Labelled examples: the in-context example pool, and the scoring set
                when ``valset`` is not given (an item never serves as its own example).
            teacher: Unused (DSPy's signature).
            valset: Labelled examples the strategies are scored on.

        Returns:
            A new judge of the student's class with the chosen strategy, carrying the
            compile's :class:`~judgeopt.judge.CompileReport` as ``report_``
            (``search_result``: a :class:`CompileResult`; ``validation``: its evaluation
            summary; ``selection``, ``comparisons``, ``ensemble``, ``model_name``).

        Raises:
            TypeError: When ``student`` is not a judge program (it lacks part of the copy
                protocol, :class:`~judgeopt.judge.JudgeStudent`), before anything is called.
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
        run = self._run(student, trainset, valset, plan=self.plan_cost)
        return cast(_Student, run.run())

    def _run(
        self, student: _Student, trainset: Sequence[Any], valset: Sequence[Any] | None, plan: bool
    ) -> CompileRun:
        """The compile of ``student`` with this teleprompter's settings, up to its first call."""
        return CompileRun(
            self.config,
            student,
            trainset=trainset,
            valset=valset,
            checkpoint_dir=self.checkpoint_dir,
            restart=self.restart,
            check_lm=self.check_endpoint,
            progress=self.progress,
            plan=plan,
        )

    def plan(
        self,
        student: _Student,
        *,
        trainset: Sequence[Any],
        valset: Sequence[Any] | None = None,
        timing: Timing | None = None,
    ) -> CostPlan:
        """What :meth:`compile` with these arguments would cost, estimated without running
        its search (a dry run, as DSPy's MIPROv2 projects its calls before it starts).

        The plan is the one :meth:`compile` logs before its first judge call: calls, prompt
        and completion tokens, time on this endpoint and money by LiteLLM's price list, with
        the 10th-90th percentile over the search's simulated paths (``CostPlan.spread``).
        To time the calls, the baseline is judged for real on as many validation items as
        calls in flight (with ``check_endpoint``, after one short check call); those answers
        go into the LM's response cache, so the compile that follows does not pay for them
        again. With ``checkpoint_dir`` the plan covers what the checkpoint leaves to judge
        (the checkpoint is opened, or started, as :meth:`compile` opens it).

        Args:
            student: The judge :meth:`compile` would optimise.
            trainset: As for :meth:`compile`.
            valset: As for :meth:`compile`.
            timing: A :class:`~judgeopt.evaluate.Timing` measured before (for example a
                recorded compile's ``report_.search_result.plan["timing"]``): then nothing
                is judged (with ``check_endpoint=False`` the only call left is the
                one-token probe of whether the LM gives logprobs, made when the space
                holds the ``expected`` decoding).

        Returns:
            The :class:`~judgeopt.evaluate.CostPlan` (``line()`` is the text the compile
            logs; ``to_dict()`` its figures). A search the checkpoint holds whole plans 0
            calls.

        Raises:
            The errors of :meth:`compile` that come before its search (invalid data or
            config, no LM, a checkpoint of another run, a dead endpoint), and
            ``RuntimeError`` when the plan cannot be made (the baseline's timed judgement
            failed: the message says why).
        """
        run = self._run(student, trainset, valset, plan=False)
        try:
            return run.estimate_cost(timing)
        except (LMUnavailable, ValueError):
            raise
        except Exception as e:
            raise RuntimeError(f"no cost plan could be made: {e}") from e


class Auto(JudgeSearch):
    """judgeopt's default search (:class:`judgeopt.search.AutoSearch`: HPSS with a
    budget-aware start, shrunken advantages and constants chosen per budget) as a DSPy
    teleprompter.

    The arguments are :class:`JudgeSearch`'s (its ``search`` is ``"auto"``), with the same
    defaults.
    """

    _search = "auto"


class HPSS(JudgeSearch):
    """HPSS as a DSPy teleprompter (paper defaults: budget 71, k=5, g=2, rho=0.2, tau=5,
    lambda=4; HPSS's own parameters go in ``params``, e.g. ``params={"k": 3}``).

    The arguments are :class:`JudgeSearch`'s (its ``search`` is ``"hpss"``), with the same
    defaults.
    """

    _search = "hpss"


class Greedy(JudgeSearch):
    """Greedy search (HPSS App. F.2) as a DSPy teleprompter.

    The arguments are :class:`JudgeSearch`'s (its ``search`` is ``"greedy"``), with the same
    defaults.
    """

    _search = "greedy"


class StepwiseGreedy(JudgeSearch):
    """Stepwise-Greedy (HPSS App. F.2) as a DSPy teleprompter.

    The arguments are :class:`JudgeSearch`'s (its ``search`` is ``"stepwise"``), with the same
    defaults.
    """

    _search = "stepwise"


class RandomJudgeSearch(JudgeSearch):
    """Uniform random search as a DSPy teleprompter.

    The arguments are :class:`JudgeSearch`'s (its ``search`` is ``"random"``), with the same
    defaults.
    """

    _search = "random"


class GridJudgeSearch(JudgeSearch):
    """Every strategy of the (restricted) space, as a DSPy teleprompter.

    The arguments are :class:`JudgeSearch`'s (its ``search`` is ``"grid"``), with the same
    defaults.
    """

    _search = "grid"
