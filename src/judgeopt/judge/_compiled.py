"""What a compile attaches to a judge, and the copy protocol teleprompters rely on.

A teleprompter never edits the program it returns: it attaches one frozen
:class:`CompileReport` (``judge.report_``, in scikit-learn's spirit of fitted attributes) to a
fresh copy. ``judge.search_result``, ``judge.validation``, ``judge.test``, ... are read-only
views of that report. Whoever adds to a compile's results afterwards (the CLI testing the judge
on held-out items, the demo) derives a new report and a new program::

    tested = judge.with_report(judge.report_.with_test(res.summary(), res.items,
                                                       comparison=comp.to_dict()))

:class:`JudgeStudent` is the protocol a judge program provides so that the teleprompters can
compile it (:class:`~judgeopt.judge.JudgeProgram` and :class:`~judgeopt.judge.PrExMeProgram`
do), as DSPy optimizers copy their student instead of building one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from judgeopt.data import Record
from judgeopt.search import FactorGraph, Strategy, Value

from ._artifacts import ArtifactStore

__all__ = ["CompileReport", "CompiledViews", "JudgeStudent"]

_P = TypeVar("_P", bound="CompiledViews")


@dataclass(frozen=True)
class CompileReport:
    """The results of one compile, attached once to the judge it returned (``report_``).

    Every field is ``None`` for a judge that was not compiled (and not loaded from a compiled
    one). The dicts are the JSON forms written by ``judge.save``; treat them as read-only and
    derive a new report (:meth:`with_test`, :meth:`with_model`, :func:`dataclasses.replace`)
    to change anything.

    Attributes:
        search_result: The search's trace and cost (:class:`judgeopt.teleprompt.CompileResult`).
        validation: The chosen judge's evaluation summary on the search items.
        test: Its evaluation summary on held-out test items, once tested.
        selection: How the compile chose this judge (:mod:`judgeopt.selection`).
        comparisons: Split name (``confirmation``, ``validation``, ``test``) -> this judge
            against the baseline (:class:`judgeopt.evaluate.Comparison` as a dict).
        ensemble: The prompt ensemble the compile built beside this judge (``ensemble=M``).
        model_name: A model string that loads the judge's model again (``local:NAME``,
            ``router:FILE#GROUP``, LiteLLM's).
        test_items: Per-item test judgements (``ItemResult`` or ``{"id", "human", "score"}``).
    """

    search_result: Any = None
    validation: dict[str, Any] | None = None
    test: dict[str, Any] | None = None
    selection: dict[str, Any] | None = None
    comparisons: dict[str, dict[str, Any]] | None = None
    ensemble: Any = None
    model_name: str | None = None
    test_items: list[Any] | None = None

    def with_model(self, model_name: str | None) -> CompileReport:
        """This report naming another model string (e.g. the one the user typed)."""
        return dataclasses.replace(self, model_name=model_name)

    def with_test(
        self,
        summary: Mapping[str, Any],
        items: Sequence[Any] | None = None,
        *,
        comparison: Mapping[str, Any] | None = None,
        problems: Sequence[str] = (),
    ) -> CompileReport:
        """This report with the judge's results on held-out test items.

        Args:
            summary: The test evaluation's summary (``EvalResult.summary()``).
            items: The per-item test judgements.
            comparison: The judge against the baseline on the test items (stored as
                ``comparisons["test"]``).
            problems: Lines to add to ``search_result.problems`` (why the judge should not
                be trusted).

        Raises:
            ValueError: When ``problems`` are given but the report has no search result.
        """
        comparisons = self.comparisons
        if comparison is not None:
            comparisons = {**(self.comparisons or {}), "test": dict(comparison)}
        search = self.search_result
        if problems:
            if search is None:
                raise ValueError("A report without a search result cannot record problems.")
            search = dataclasses.replace(search, problems=[*search.problems, *problems])
        return dataclasses.replace(
            self,
            test=dict(summary),
            test_items=None if items is None else list(items),
            comparisons=comparisons,
            search_result=search,
        )


_EMPTY = CompileReport()


class CompiledViews:
    """``report_`` and its read-only views, for a judge program (a mixin).

    The class provides :attr:`report_` (an empty report until a compile or ``load`` attaches
    one) and one read-only property per report field; :meth:`with_report` and
    :meth:`with_model_name` derive a copy with another report. Subclasses implement
    :meth:`_copy` (a shallow copy that does not share mutable per-program state such as an
    adapter bound to the original).
    """

    #: The compile's results (:class:`CompileReport`); an empty report before a compile.
    report_: CompileReport = _EMPTY

    def _copy(self: _P) -> _P:
        raise NotImplementedError

    def with_report(self: _P, report: CompileReport) -> _P:
        """A copy of this judge carrying ``report`` (this judge is left as it is)."""
        new = self._copy()
        new.report_ = report
        return new

    @property
    def search_result(self) -> Any:
        """The search's trace and cost (``report_.search_result``); ``None`` if not compiled."""
        return self.report_.search_result

    @property
    def validation(self) -> dict[str, Any] | None:
        """The evaluation summary on the search items (``report_.validation``)."""
        return self.report_.validation

    @property
    def test(self) -> dict[str, Any] | None:
        """The evaluation summary on held-out test items (``report_.test``)."""
        return self.report_.test

    @property
    def selection(self) -> dict[str, Any] | None:
        """How the compile chose this judge (``report_.selection``)."""
        return self.report_.selection

    @property
    def comparisons(self) -> dict[str, dict[str, Any]] | None:
        """Split name -> this judge against the baseline (``report_.comparisons``)."""
        return self.report_.comparisons

    @property
    def ensemble(self) -> Any:
        """The prompt ensemble built beside this judge, if any (``report_.ensemble``)."""
        return self.report_.ensemble

    @property
    def test_items(self) -> list[Any] | None:
        """Per-item test judgements for reports, if any (``report_.test_items``)."""
        return self.report_.test_items

    @property
    def model_name(self) -> str | None:
        """The model string the judge records (``report_.model_name``)."""
        return self.report_.model_name

    def with_model_name(self: _P, model_name: str | None) -> _P:
        """A copy of this judge recording ``model_name`` (a model string that loads its model
        again: ``local:NAME``, ``router:FILE#GROUP``, LiteLLM's) in its report."""
        return self.with_report(self.report_.with_model(model_name))


@runtime_checkable
class JudgeStudent(Protocol):
    """What a teleprompter needs of the program it compiles (the copy protocol).

    Attributes:
        task: The task (``name``, ``mode``, ``correlation_level``, ``input_names`` and a
            ``model_dump(mode="json")`` description for the checkpoint's fingerprint).
        aspect: The human score the judge is compared with.
        strategy: The judge's strategy: where the search starts.
        max_tokens: The output limit (``None``: by strategy), part of the fingerprint.
        report_: The compile's results (empty before a compile).
    """

    task: Any
    aspect: str
    strategy: Strategy
    max_tokens: int | None
    report_: CompileReport

    def resolve_lm(self, lm: Any = None) -> Any:
        """The LM a call uses: ``lm``, else the program's, else DSPy's configured one."""
        ...

    def search_graph(self) -> FactorGraph:
        """A new factor graph of the strategies a search may try for this judge."""
        ...

    def fresh_copy(
        self,
        *,
        trainset: Sequence[Record] | None = None,
        artifacts: ArtifactStore | None = None,
        example_seed: int | None = None,
        lm: Any = None,
    ) -> Any:
        """A copy with the same strategy and settings, without compile results.

        ``trainset`` replaces the labelled examples the judge draws in-context examples
        from, ``artifacts`` the store of generated artifacts (the copy adds this judge's
        artifacts the store lacks), ``example_seed`` and ``lm`` their counterparts; ``None``
        keeps the judge's own.
        """
        ...

    def with_strategy(self, strategy: Mapping[str, Value] | Strategy) -> Any:
        """A copy judging with another strategy, without compile results."""
        ...

    def with_report(self, report: CompileReport) -> Any:
        """A copy carrying ``report``."""
        ...
