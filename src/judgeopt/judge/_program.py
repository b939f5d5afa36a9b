"""`JudgeProgram`: a judge as a DSPy module, with its own adapter."""

from __future__ import annotations

import asyncio
import copy
import functools
import os
from collections.abc import (
    Callable,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import Any

import dspy

from judgeopt.data import Record
from judgeopt.search import FactorGraph, Strategy, Value

from ._adapter import (
    ARTIFACTS_KEY,
    SCORE_STOP,
    JudgeAdapter,
    answers,
    choose_lm,
    close_score,
    empty_output,
    predict_with,
)
from ._artifacts import ArtifactMaker, ArtifactStore, sample_id_of
from ._catalog import load_task
from ._compiled import CompiledViews, CompileReport
from ._decoding import (
    DECODING_PARAMS,
    Decoding,
    decoding_for,
    expected_prediction,
    logprobs_known,
    samples_prediction,
)
from ._defences import SCREEN_THRESHOLD, SCREENED_DEFENCES, screen_messages
from ._examples import ExamplePool
from ._export import export_judge, read_judge, save_judge
from ._factors import baseline_strategy, hpss_graph, hpss_space, hpss_strategy
from ._metric import JudgeMetric
from ._predict import JudgePredict
from ._records import as_example_pool
from ._refusals import check_echo, screen, screen_kwargs, vet
from ._task import JudgeTask

__all__ = ["EXPLAINS_FIRST", "JudgeProgram", "rates_first"]


class _Load:
    """``load`` that works on the class and on an instance, like ``dspy.Module.load``.

    * ``JudgeProgram.load(path, **kwargs)`` returns a new judge built from the file;
    * ``judge.load(path, **kwargs)`` makes ``judge`` itself the judge in the file (task,
      aspect, strategy, artifacts, results) and returns it; it keeps ``judge``'s LM unless
      ``lm=`` is given. DSPy's ``allow_pickle`` / ``allow_unsafe_lm_state`` are accepted and
      ignored: the file is JSON, validated, never unpickled.
    """

    def __get__(
        self, obj: JudgeProgram | None, owner: type[JudgeProgram]
    ) -> Callable[..., JudgeProgram]:
        if obj is not None:
            return functools.partial(obj._load_into)

        def load(path: str | os.PathLike[str], **kwargs: Any) -> JudgeProgram:
            """Rebuild a judge from its JSON file (validated; no pickle).

            Args:
                path: The exported judge.
                **kwargs: Passed to the constructor (e.g. ``lm=``).
            """
            kwargs.pop("allow_pickle", None)
            kwargs.pop("allow_unsafe_lm_state", None)
            return read_judge(JudgeProgram, path, **kwargs)

        return load


#: The factor values that make a judge write before its rating: an explanation first
#: (``cot`` ``prefix``) or a reference answer of its own (``reference`` ``dialectic``).
EXPLAINS_FIRST: dict[str, tuple[str, ...]] = {"cot": ("prefix",), "reference": ("dialectic",)}


def rates_first(strategy: Mapping[str, Any]) -> bool:
    """Whether a judge with ``strategy`` answers with its rating before anything else (no
    value of :data:`EXPLAINS_FIRST`); such a judge can stop at the rating."""
    return not any(strategy.get(f) in values for f, values in EXPLAINS_FIRST.items())


class JudgeProgram(CompiledViews, dspy.Module):
    """An LLM judge for one aspect of a task under one prompting strategy.

    Call it like any DSPy module: ``judge(source=..., summary=...)`` returns a
    ``dspy.Prediction`` with ``score`` (a float rating, or ``"a"``/``"b"``/``"tie"`` for a
    pairwise task; ``None`` when the output could not be parsed), ``rationale`` (the
    output, when the strategy asks for an explanation), ``raw`` (the output), ``parse_error``
    and ``decoding``. The strategy's ``decoding`` decides how the score is made (see
    :mod:`judgeopt.judge._decoding`): ``expected`` adds ``distribution`` (``P(rating)``) and
    ``greedy_score``; ``sc5`` adds ``samples`` (each sample's rating) and its ``raw`` and
    ``rationale`` are those of the first sample; ``greedy`` stopped at its rating on an LM
    known to give logprobs adds ``distribution`` and ``expected_score`` (:meth:`twin_read`).
    The LM is the one given here, else the one configured the DSPy way
    (``dspy.configure(lm=...)`` / ``dspy.context(lm=...)``).

    A compile's results are one frozen :class:`~judgeopt.judge.CompileReport` attached to
    the judge it returns (``judge.report_``); ``search_result``, ``validation``, ``test``,
    ``selection``, ``comparisons``, ``ensemble``, ``model_name`` and ``test_items`` are
    read-only views of it (``model_name`` can be set: that derives a new report).
    :meth:`with_report` returns a copy carrying another report.

    Args:
        task: A :class:`JudgeTask` or the name/path of a signature TOML file.
        aspect: The aspect to judge.
        strategy: The prompting strategy (factor -> value); default: the MT-Bench baseline.
        trainset: Labelled records (or ``dspy.Example``) to draw in-context examples from.
        artifacts: Store of generated artifacts (shared between programs of one compile).
        example_seed: Seed of the stratified example selection.
        lm: The LM to use instead of DSPy's configured one.
        max_tokens: Output token limit; default: 64 without an explanation, 256 with one
            (prefix/suffix CoT), 512 when the judge also writes its own reference (dialectic).
        fixed_examples: In-context examples as exported with a judge (used by ``load``).
        decoding_params: Overrides of the parameters of the strategy's ``decoding`` (keys
            of :class:`~judgeopt.judge._decoding.Decoding`: ``samples``, ``temperature``,
            ``top_logprobs``, ``seed``); ``load`` passes the exported ones.
        explain: Whether a strategy that rates *before* explaining (``cot`` ``none`` or
            ``suffix``, without a ``dialectic`` reference) writes its explanation. ``False``
            stops the answer at the end of its rating (:data:`SCORE_STOP`): the rating and its
            distribution are those of the whole answer (a causal model has fixed them before
            the explanation after them), for a fraction of the tokens. Measuring a judge
            (``evaluate``, a compile, a grid) scores it this way; a judge you call yourself
            explains (``True``). Strategies that explain first always do.
        screen_threshold: Defence ``screened``: refuse a text whose screen's P(yes) is above
            this; default :data:`SCREEN_THRESHOLD`, see :func:`calibrate_screen`.

    Raises:
        ValueError: On an unknown aspect or an invalid strategy (naming factor, value and
            allowed values).
    """

    def __init__(
        self,
        task: JudgeTask | str | os.PathLike[str],
        aspect: str,
        strategy: Mapping[str, Value] | Strategy | None = None,
        *,
        trainset: Sequence[Record | Mapping[str, Any] | dspy.Example] | ExamplePool | None = None,
        artifacts: ArtifactStore | None = None,
        example_seed: int = 0,
        lm: dspy.BaseLM | None = None,
        max_tokens: int | None = None,
        fixed_examples: Mapping[str, list[dict[str, Any]]] | None = None,
        decoding_params: Mapping[str, Any] | None = None,
        explain: bool = True,
        screen_threshold: float | None = None,
    ) -> None:
        super().__init__()
        self.task = task if isinstance(task, JudgeTask) else load_task(task)
        self.task.aspect(aspect)
        self.aspect = aspect
        self.strategy = (
            baseline_strategy(self.task) if strategy is None else hpss_strategy(self.task, strategy)
        )
        self.space = hpss_space(self.task, defences="defence" in self.strategy)
        self.decoding_params = dict(decoding_params or {})
        decoding_for(self.strategy, self.decoding_params)  # validate them now
        self.store = artifacts if artifacts is not None else ArtifactStore()
        self.pool = as_example_pool(trainset, self.task, aspect)
        self.example_seed = example_seed
        self.maker = ArtifactMaker(
            self.task,
            aspect,
            self.store,
            pool=self.pool,
            example_seed=example_seed,
            fixed_examples=fixed_examples,
        )
        self.max_tokens = max_tokens
        if not isinstance(explain, bool):
            raise TypeError(f"The `explain` argument must be a bool. Got {explain!r} instead.")
        self.explain = explain
        self.screen_threshold = SCREEN_THRESHOLD if screen_threshold is None else screen_threshold
        self.screen_calibration: dict[str, Any] | None = None
        self.adapter = JudgeAdapter(self)
        self.signature = _signature(self.task)
        #: What DSPy sees of the judge (``named_predictors``, ``set_lm``); holds its LM.
        self.predictor = JudgePredict(self.signature, lm)

    # Derived -----------------------------------------------------------------------------
    @property
    def lm(self) -> dspy.BaseLM | None:
        """The judge's own LM (``None``: DSPy's configured one), held by its predictor.

        ``judge.set_lm(lm)`` (or an outer program's ``set_lm``) sets it too.
        """
        return self.predictor.lm

    @lm.setter
    def lm(self, value: dspy.BaseLM | None) -> None:
        self.predictor.lm = value

    @property
    def rating_bounds(self) -> tuple[int, int]:
        """``(min, max)`` rating of a pointwise judge at its strategy's scale."""
        return self.task.rating_bounds(self.aspect, int(self.strategy["scale"]))

    @property
    def decoding(self) -> Decoding:
        """How this judge's answers become a score (its strategy's ``decoding``)."""
        return decoding_for(self.strategy, self.decoding_params)

    @property
    def rates_first(self) -> bool:
        """Whether the answer begins with the rating: ``cot`` ``none`` or ``suffix``, and no
        reference of the judge's own written before it (``dialectic``)."""
        return rates_first(self.strategy)

    @property
    def stops_at_score(self) -> bool:
        """Whether calls stop at the end of the rating (``explain=False`` and the strategy
        rates first)."""
        return not self.explain and self.rates_first

    @property
    def writes_explanation(self) -> bool:
        """Whether the answer carries an explanation (the prediction's ``rationale``)."""
        return self.strategy.get("cot", "none") != "none" and not self.stops_at_score

    def with_explain(self, explain: bool) -> JudgeProgram:
        """This judge, or a copy of it that writes (``True``) or skips (``False``) the
        explanation after its rating (see ``explain`` in the class docstring)."""
        if explain == self.explain:
            return self
        new = self._copy()
        new.explain = bool(explain)
        return new

    def lm_kwargs(self) -> dict[str, Any]:
        """Per-call LM arguments (the output budget depends on the strategy; a judge scored
        without its explanation stops at the end of its rating)."""
        stop = {"stop": [SCORE_STOP]} if self.stops_at_score else {}
        if self.max_tokens is not None:
            return {"max_tokens": self.max_tokens, **stop}
        # NOTE: small models at temperature 0 sometimes loop until the limit; a "short
        # explanation" fits in 256 tokens, so the limit caps what a loop costs.
        if self.strategy["reference"] == "dialectic":
            return {"max_tokens": 512, **stop}
        return {"max_tokens": 256 if self.strategy["cot"] != "none" else 64, **stop}

    # Copies (the protocol teleprompters compile through, :class:`JudgeStudent`) -----------
    def _copy(self) -> JudgeProgram:
        """A shallow copy with its own adapter and predictor (sharing artifacts, pool, LM)."""
        new = copy.copy(self)
        new.adapter = JudgeAdapter(new)
        new.predictor = JudgePredict(new.signature, self.lm)
        return new

    def with_strategy(self, strategy: Mapping[str, Value] | Strategy) -> JudgeProgram:
        """A copy judging with another strategy (sharing artifacts, pool and LM), without
        compile results (it keeps ``model_name``).

        ``decoding_params`` are kept while the ``decoding`` stays the same, and dropped (the
        new decoding's defaults) when it changes.
        """
        new = self._copy()
        new.strategy = hpss_strategy(self.task, strategy)
        new.space = hpss_space(self.task, defences="defence" in new.strategy)
        if new.strategy.get("decoding") != self.strategy.get("decoding"):
            new.decoding_params = {}
        new.report_ = CompileReport(model_name=self.model_name)
        return new

    def fresh_copy(
        self,
        *,
        trainset: Sequence[Record | Mapping[str, Any] | dspy.Example] | ExamplePool | None = None,
        artifacts: ArtifactStore | None = None,
        example_seed: int | None = None,
        lm: dspy.BaseLM | None = None,
    ) -> JudgeProgram:
        """A new judge with this one's task, aspect, strategy and settings, without
        compile results (what a teleprompter compiles; ``None`` keeps this judge's own).

        Args:
            trainset: Labelled examples to draw in-context examples from, instead of this
                judge's pool (and its fixed examples, if it was loaded).
            artifacts: The store of generated artifacts to use; this judge's artifacts that
                the store lacks are added to it.
            example_seed: Seed of the example selection.
            lm: The LM to use.
        """
        store = self.store
        if artifacts is not None:
            for key, value in self.store.to_dict().items():
                if key not in artifacts:
                    artifacts.set(key, value)
            store = artifacts
        return type(self)(
            self.task,
            self.aspect,
            self.strategy,
            trainset=self.pool if trainset is None else trainset,
            artifacts=store,
            example_seed=self.example_seed if example_seed is None else example_seed,
            lm=self.lm if lm is None else lm,
            max_tokens=self.max_tokens,
            decoding_params=self.decoding_params,
            fixed_examples=self.maker.fixed_examples if trainset is None else None,
            explain=self.explain,
        ).with_screen_threshold(self.screen_threshold, self.screen_calibration)

    def search_graph(self) -> FactorGraph:
        """A new factor graph of the HPSS strategies of this judge's task
        (:func:`~judgeopt.judge.hpss_graph`), with the ``defence`` factor when this judge's
        strategy names it."""
        return hpss_graph(self.task, defences="defence" in self.strategy)

    def resolve_lm(self, lm: dspy.BaseLM | None = None) -> dspy.BaseLM:
        """The LM a call uses: ``lm``, else the program's, else DSPy's configured one."""
        return choose_lm(lm, self.lm, "JudgeProgram")

    # Judging -----------------------------------------------------------------------------
    def judge(
        self,
        inputs: Mapping[str, Any],
        *,
        sample_id: str | None = None,
        lm: dspy.BaseLM | None = None,
    ) -> dspy.Prediction:
        """Judge one sample. Like calling the module, with an explicit id and LM.

        Raises:
            ValueError: On a missing input field (naming it and the fields given).
            NoLMError: When no LM is configured.
            judgeopt.lm.LMError / ArtifactError: When an LM call fails.
        """
        missing = [f for f in self.task.input_names if f not in inputs]
        if missing:
            raise ValueError(
                f"Missing input field(s) {missing!r} for task `{self.task.name}`; "
                f"got {sorted(inputs)!r}."
            )
        fields = {f: str(inputs[f]) for f in self.task.input_names}
        if (refused := vet(self, fields)) is not None:
            return refused  # defence 'vetted': a forged rating, refused before any call
        the_lm = self.resolve_lm(lm)
        sid = sample_id or sample_id_of(fields, self.task.input_names)
        artifacts = self.maker.prepare(self.strategy, fields, sample_id=sid, lm=the_lm)
        inputs = {**fields, ARTIFACTS_KEY: artifacts}
        decoding = self.decoding
        if (twin := self.twin_read(the_lm)) is not None:
            pred = self._read_greedy(twin, the_lm, inputs)
        elif decoding.name == "greedy":
            pred = predict_with(
                self.adapter, the_lm, self.lm_kwargs(), self.signature, inputs, decoding="greedy"
            )
        else:
            pred = self._decode(decoding, the_lm, inputs)
        pred = check_echo(self, pred, fields)
        if self.screens and pred.get("score") is not None:
            msgs, kw = self.screen_messages(fields), self.screen_kwargs()
            pred = screen(pred, msgs, kw, the_lm, self.screen_threshold)
        return pred

    @property
    def screens(self) -> bool:
        """Whether each judgement makes one more call, the ``screened`` defence's screen."""
        return self.strategy.get("defence") in SCREENED_DEFENCES

    def screen_messages(self, fields: Mapping[str, str]) -> list[dict[str, str]]:
        """The ``screened`` defence's screen call for one sample's input fields."""
        judged = [str(fields[f]) for f in self.task.judged_fields]
        return screen_messages(judged, self.task.text_values(self.aspect))

    def screen_kwargs(self) -> dict[str, Any]:
        """The screen call's LM arguments (:func:`~judgeopt.judge._refusals.screen_kwargs`)."""
        return screen_kwargs(self.decoding.needs_logprobs)

    def with_screen_threshold(self, threshold: float, calibration: Any = None) -> JudgeProgram:
        """A copy refusing texts whose screen's P(yes) is above ``threshold`` (``calibration``:
        its record, exported with the judge; :func:`calibrate_screen` makes both)."""
        new = self._copy()
        new.screen_threshold, new.screen_calibration = float(threshold), calibration
        return new

    def twin_read(self, lm: Any) -> Decoding | None:
        """The ``expected`` decoding whose call this judge makes for its greedy rating, or
        ``None`` (it makes its own).

        A greedy pointwise judge stopped at its rating (:attr:`stops_at_score`), on an LM
        known to return logprobs (:func:`~judgeopt.judge.logprobs_known`: nothing is asked
        to find out), asks its call for them: the call is then exactly the one its
        ``expected`` twin (the same strategy with ``decoding`` ``expected``) makes, so one
        answer, cached once, serves both, and the greedy prediction carries the rating's
        distribution beside the parsed rating. At temperature 0 asking for logprobs does not
        change the answer (``tests/test_decoding_real.py`` checks it on the embedded model).
        """
        pointwise_greedy = self.task.mode != "pairwise" and self.decoding.name == "greedy"
        if not (pointwise_greedy and self.stops_at_score and logprobs_known(lm)):
            return None
        return DECODING_PARAMS["expected"]

    def _read_greedy(
        self, twin: Decoding, lm: dspy.BaseLM, inputs: dict[str, Any]
    ) -> dspy.Prediction:
        """A greedy judgement made with its ``expected`` twin's call (:meth:`twin_read`):
        the rating parsed as the greedy path parses it, plus ``expected_score`` and
        ``distribution`` read from the same answer."""
        kwargs = {**self.lm_kwargs(), **twin.call_kwargs()}
        text, logprobs = answers(self.adapter, lm, kwargs, self.signature, inputs)[0]
        parsed = self.adapter.parse(self.signature, text) if text.strip() else empty_output(text)
        read = expected_prediction(
            str(parsed["raw"]),
            logprobs,
            bounds=self.rating_bounds,
            top_logprobs=int(twin.top_logprobs or 1),
        )
        return dspy.Prediction(
            **parsed,
            decoding="greedy",
            expected_score=read["score"],
            distribution=read["distribution"],
        )

    def _decode(
        self, decoding: Decoding, lm: dspy.BaseLM, inputs: dict[str, Any]
    ) -> dspy.Prediction:
        """Judge with a decoding other than greedy (pointwise only)."""
        rationale_too = self.writes_explanation
        closing = close_score if self.stops_at_score else str
        if decoding.needs_logprobs:
            kwargs = {**self.lm_kwargs(), **decoding.call_kwargs()}
            text, logprobs = answers(self.adapter, lm, kwargs, self.signature, inputs)[0]
            text = closing(text)
            fields = expected_prediction(
                text,
                logprobs,
                bounds=self.rating_bounds,
                top_logprobs=int(decoding.top_logprobs or 1),
            )
        else:
            texts = []
            for i in range(decoding.samples):
                kwargs = {**self.lm_kwargs(), **decoding.call_kwargs(i)}
                texts.append(
                    closing(answers(self.adapter, lm, kwargs, self.signature, inputs)[0][0])
                )
            fields = samples_prediction(texts, bounds=self.rating_bounds)
            text = texts[0]
        return dspy.Prediction(
            rationale=text.strip() if rationale_too else None,
            raw=text,
            decoding=decoding.name,
            **fields,
        )

    def forward(self, **inputs: Any) -> dspy.Prediction:
        """Judge one sample given its input fields as keyword arguments."""
        sample_id = inputs.pop("sample_id", None)
        return self.judge(inputs, sample_id=sample_id)

    async def aforward(self, **inputs: Any) -> dspy.Prediction:
        """Judge one sample asynchronously (``await judge.acall(**fields)``).

        The judge call runs in a worker thread (``asyncio.to_thread``), which sees the
        caller's ``dspy.context`` settings.
        """
        sample_id = inputs.pop("sample_id", None)
        return await asyncio.to_thread(self.judge, inputs, sample_id=sample_id)

    def as_metric(
        self,
        threshold: float | None = None,
        *,
        on_unparsed: float | str = 0.0,
        fields: Mapping[str, str | Callable[[Any, Any], Any]] | None = None,
        prefer: str = "b",
    ) -> Any:
        """This judge as a DSPy metric: ``metric(example, pred, trace=None)``.

        See :class:`judgeopt.judge.JudgeMetric` (``docs/judge.md``, "The judge as a DSPy
        metric"): the rating is mapped to [0, 1] over the judge's scale; ``threshold`` turns
        it into pass/fail when DSPy passes a ``trace`` (optimizers); an unparsed answer gives
        ``on_unparsed`` (default 0.0) or, with ``on_unparsed="raise"``, an
        :class:`~judgeopt.judge.UnparsedJudgement`.
        """
        return JudgeMetric(
            self, threshold=threshold, on_unparsed=on_unparsed, fields=fields, prefer=prefer
        )

    # Export ------------------------------------------------------------------------------
    def save(
        self,
        path: str | os.PathLike[str],
        save_program: bool = False,
        modules_to_serialize: Any = None,
    ) -> None:
        """Write the judge as one JSON file (see ``docs/judge.md``); never pickles.

        Raises:
            ValueError: On ``save_program=True`` or ``modules_to_serialize`` (DSPy's
                cloudpickle mode: a judge is saved as JSON only), or a path not ending in
                ``.json``.
        """
        if save_program or modules_to_serialize is not None:
            raise ValueError(
                "JudgeProgram.save does not support save_program=True / modules_to_serialize "
                "(DSPy's cloudpickle mode): a judge is always saved as one JSON file that "
                "rebuilds it without pickle. Call judge.save('judge.json')."
            )
        if Path(path).suffix != ".json":
            raise ValueError(
                f"JudgeProgram.save writes JSON: the path must end in `.json`; got {str(path)!r}."
            )
        save_judge(self, path)

    load = _Load()

    def _load_into(self, path: str | os.PathLike[str], **kwargs: Any) -> JudgeProgram:
        """``judge.load(path)``: make this judge the one in the file (see :attr:`load`)."""
        kwargs.pop("allow_pickle", None)  # never pickled: nothing to allow
        kwargs.pop("allow_unsafe_lm_state", None)
        kwargs.setdefault("lm", self.lm)
        new = read_judge(JudgeProgram, path, **kwargs)
        # dspy.Module sets these two in its own __init__ (untyped): keep them across the swap.
        callbacks: Any = self.__dict__.get("callbacks")
        history: Any = self.__dict__.get("history")
        self.__dict__.clear()
        self.__dict__.update(new.__dict__)
        self.callbacks, self.history = callbacks, history
        self.adapter = JudgeAdapter(self)
        return self

    def export(self) -> dict[str, Any]:
        """The exported form as a dict."""
        return export_judge(self).model_dump(mode="json")

    def __repr__(self) -> str:
        return f"JudgeProgram({self.task.name}/{self.aspect}: {self.strategy})"


def _signature(task: JudgeTask) -> type[dspy.Signature]:
    fields: dict[str, Any] = {name: (str, dspy.InputField()) for name in task.input_names}
    if task.mode == "pairwise":
        fields["score"] = (str, dspy.OutputField(desc="a, b or tie"))
    else:
        fields["score"] = (float, dspy.OutputField(desc="the rating"))
    fields["rationale"] = (str, dspy.OutputField(desc="the judge's explanation, if any"))
    # Bookkeeping outputs the adapter fills (DSPy keeps only declared output fields).
    fields["raw"] = (str, dspy.OutputField(desc="the judge's output text"))
    fields["parse_error"] = (str, dspy.OutputField(desc="why no rating was found, if so"))
    fields["parse_method"] = (str, dspy.OutputField(desc="which parsing rule matched"))
    signature: type[Any] = dspy.make_signature(fields, f"Judge {task.target}.")
    return signature
