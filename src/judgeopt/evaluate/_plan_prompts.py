"""The prompts a cost plan renders and counts before a run makes them.

A plan renders each judge's prompts on a few of the run's items (:func:`plan_sample`: spread
over the data), artifacts not made yet stood in for by texts of about their length (the
in-context examples are the judge's own: they need no LM call), and counts them with the
model's tokenizer; on a model with a prefix cache it also counts the
share of those tokens the model computes on the first :data:`PLAN_WINDOW` items in judging
order (:func:`computed_share`). :mod:`judgeopt.evaluate._plan` adds them up;
:mod:`judgeopt.evaluate._timed` times them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "PLAN_WINDOW",
    "artifact_tokens",
    "cap_of",
    "computed_share",
    "counts_computed",
    "inputs_of",
    "judges_of",
    "plan_messages",
    "plan_sample",
    "prompt_tokens_of",
    "same_calls",
]


#: Items, in judging order, a plan renders each judge's prompts on to count what the model's
#: prefix cache leaves to compute (the first of them, which reads the instructions, is left
#: out of the share: a run reads them once). All of a 100-label compile's search items: a
#: shorter window sees fewer of a grouped dataset's group changes (SummEval's articles,
#: Topical-Chat's dialogues). Against the engine's count on the prompts a run sends
#: (benchmarks/plan_tokens.py, 4 pairs x 4 strategies, 100 items), the mean absolute error of
#: the computed tokens per call was 21 % with 16 items, 13 % with 32, 11 % with 64 and 10 %
#: with 100; rendering 100 prompts takes 0.2-0.7 s per strategy.
PLAN_WINDOW = 100


def plan_sample(records: Sequence[Any], k: int) -> list[Any]:
    """Up to ``k`` of ``records`` spread evenly over them (the first and the last among them):
    the items a plan renders its prompts on. The first ``k`` alone would be one group of a
    grouped dataset (SummEval keeps an article's summaries together) and measure that group's
    length, not the data's."""
    n = len(records)
    if k <= 0 or n == 0:
        return []
    if n <= k:
        return list(records)
    if k == 1:
        return [records[0]]
    return [records[round(i * (n - 1) / (k - 1))] for i in range(k)]


def judges_of(judge: Any) -> list[Any]:
    """The single judges an ensemble (or a judge) calls for each item."""
    members = getattr(judge, "members", None)
    return list(members) if members else [judge]


def inputs_of(program: Any, record: Any) -> dict[str, str]:
    return {f: str(record.inputs[f]) for f in program.task.input_names}


def cap_of(judge: Any) -> int:
    """The judge's ``max_tokens`` per call."""
    kwargs = getattr(judge, "lm_kwargs", None)
    if callable(kwargs):
        return int(kwargs().get("max_tokens") or 256)
    return int(getattr(judge, "max_tokens", None) or 256)


def _stand_ins(judge: Any, records: Sequence[Any], index: int) -> dict[str, Any]:
    """Artifacts of a realistic length for rendering a prompt before the run makes them:
    the task's human criteria for generated criteria, AutoCoT steps and metrics questions;
    the judged text for a self-written reference. In-context examples are not made by the
    LM: they are the judge's own (:func:`_examples_of`), or, when it has no pool to select
    them from, the last records."""
    from ..judge import ARTIFACTS_KEY, Artifacts  # lazy: judgeopt.judge loads DSPy

    strategy = judge.strategy.as_dict()
    task, aspect = judge.task, judge.aspect
    try:
        criteria = task.criteria_text(aspect, int(strategy.get("scale", 5)))
    except (TypeError, ValueError):
        criteria = ""
    record = records[index]
    shots = int(strategy.get("examples", 0) or 0)
    names = task.input_names
    examples = _examples_of(judge, record) if shots else []
    if shots and examples is None:
        # A judge's examples are the same for every item it judges (HPSS's stratified draw):
        # without its pool, the same records stand in for them whatever the item, from the
        # end of ``records``.
        others = [records[(len(records) - 1 - k) % len(records)] for k in range(shots)]
        lo, hi = getattr(judge, "rating_bounds", (1, 5))
        examples = [({f: str(r.inputs[f]) for f in names}, (lo + hi) // 2) for r in others]
    return {
        ARTIFACTS_KEY: Artifacts(
            criteria_text=criteria,
            autocot_steps=criteria,
            metrics=criteria,
            reference=str(record.inputs[names[-1]]),
            examples=examples or [],
        )
    }


def _examples_of(judge: Any, record: Any) -> list[tuple[Mapping[str, str], Any]] | None:
    """The in-context examples ``judge`` shows when it judges ``record``
    (``ArtifactMaker.examples_shown``: its own selection, made without an LM call), so that
    the plan renders the prompts the run sends and counts the prefix they share; ``None``
    when the judge cannot select them (no labelled pool)."""
    shown = getattr(getattr(judge, "maker", None), "examples_shown", None)
    if not callable(shown):
        return None
    try:
        examples = shown(judge.strategy, record.inputs, sample_id=record.id)
    except Exception:  # noqa: BLE001 - no pool, no rating to show: stood in for
        return None
    return list(examples) or None


def artifact_tokens(judge: Any, name: str, records: Sequence[Any], lm: Any) -> float:
    """Tokens the LM is expected to write for the generated artifact ``name`` of ``judge``
    (``self_criteria``, ``autocot_steps``, ``metrics_questions``, ``self_reference``): the
    length on ``lm`` of the text that stands in for it when prompts are rendered before it
    exists (:func:`_stand_ins`: the task's criteria; the judged text, averaged over
    ``records``, for a reference), at most the LM's ``max_tokens``."""
    if not records:
        raise ValueError("artifact_tokens() needs at least one record to stand in for it.")
    cap = int(getattr(lm, "kwargs", {}).get("max_tokens") or 1024)

    def stand_in(index: int) -> Any:  # the Artifacts of _stand_ins' one entry
        return next(iter(_stand_ins(judge, records, index).values()))

    if name == "self_reference":
        texts = [stand_in(i).reference for i in range(len(records))]
    else:  # the criteria are the same for every record
        texts = [stand_in(0).criteria_text]
    counts = [lm.count_prompt_tokens([{"role": "user", "content": str(t or "")}]) for t in texts]
    return float(min(cap, sum(counts) / len(counts)))


def plan_messages(judge: Any, records: Sequence[Any], index: int) -> list[dict[str, Any]]:
    """The messages of the call judging ``records[index]``, artifacts not made yet stood in
    for by texts of about their length (:func:`_stand_ins`)."""
    fields = inputs_of(judge, records[index])
    render = getattr(judge, "render", None)  # a PrExMe judge renders one user prompt
    if callable(render):
        return [{"role": "user", "content": str(render(fields))}]
    inputs = {**fields, **_stand_ins(judge, records, index)}
    return list(judge.adapter.format(judge.signature, [], inputs))


def same_calls(first: Any, second: Any, records: Sequence[Any]) -> bool:
    """Whether judge ``second`` sends ``first``'s calls on ``records`` (one judge each, the
    same LM object, decoding, output cap and messages on the first three records): its
    answers are then read from the response cache, as ``evaluate --baseline`` reads them on a
    judge that is the baseline."""
    if len(judges_of(first)) != 1 or len(judges_of(second)) != 1:
        return False
    if getattr(first, "lm", None) is not getattr(second, "lm", None):
        return False
    if cap_of(first) != cap_of(second):
        return False
    if repr(getattr(first, "decoding", None)) != repr(getattr(second, "decoding", None)):
        return False
    shown = list(records[:3])
    return all(
        plan_messages(first, shown, i) == plan_messages(second, shown, i) for i in range(len(shown))
    )


def prompt_tokens_of(judge: Any, records: Sequence[Any], index: int, lm: Any) -> int:
    """Prompt tokens of the call judging ``records[index]`` (:func:`plan_messages`)."""
    return int(lm.count_prompt_tokens(plan_messages(judge, records, index)))


def counts_computed(lm: Any) -> bool:
    """Whether ``lm`` counts the prompt tokens its prefix cache leaves to compute."""
    return callable(getattr(lm, "computed_prompt_tokens", None)) and callable(
        getattr(lm, "prompt_token_ids", None)
    )


def computed_share(
    judge: Any, window: Sequence[Any], lm: Any, *, in_flight: int | None = None
) -> float:
    """The share of its prompt tokens ``lm`` computes when ``judge`` judges ``window`` in
    that order, ``in_flight`` calls at once (``lm.computed_prompt_tokens``: the rest comes
    from its prefix cache). The first prompt, which computes the instructions a run reads
    once, is left out; 1.0 with fewer than two records."""
    if len(window) < 2:
        return 1.0
    ids = [lm.prompt_token_ids(plan_messages(judge, window, i)) for i in range(len(window))]
    done = lm.computed_prompt_tokens(ids, in_flight=in_flight)
    total = sum(len(t) for t in ids[1:])
    return sum(done[1:]) / total if total else 1.0
