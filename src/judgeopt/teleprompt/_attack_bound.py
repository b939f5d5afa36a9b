"""The robustness bound of a compile (``max_attack_success``, ``judgeopt compile
--max-attack-success``).

After the choice, the chosen judge meets the injection suite
(:func:`judgeopt.evaluate.robustness`) on the validation items: each item judged clean and
once per attack. A judge whose attack success rate averaged over the suite is above the
bound is passed over, the reason is said, and the choice is made again without it; at most
``max_attack_checks`` judges are checked. The baseline is never passed over (it is what the
choice falls back to): when it is the judge chosen and it fails the bound, or when every
judge checked failed, the compile reports a problem (``CompileResult.problems``) and
``judgeopt compile`` exits as for an untrustworthy judge.

The record (the selection record's ``robustness``; exported with the judge) holds the
suite's version, the bound, the items, and per judge checked its mean attack success, its
clean agreement and each attack's success rate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..data import Record
from ..evaluate import robustness
from ..lm import LMUnavailable
from ._choice import Selected, lm_stats
from ._journal import strategy_key

if TYPE_CHECKING:
    from ._config import OptimizerConfig

__all__ = ["AttackCheck", "AttackBound", "check_attacks", "hold_to_bound"]


@dataclass(frozen=True)
class AttackCheck:
    """One judge held to the bound.

    Attributes:
        strategy: Its strategy.
        mean_success: Its attack success rate averaged over the suite (``None``: no item
            was rated both clean and attacked).
        clean: Its agreement with the humans on the clean items (the suite's metric).
        attacks: Each attack's success rate (pairwise: the share of verdicts flipped).
        passed: Whether it met the bound.
    """

    strategy: dict[str, Any]
    mean_success: float | None
    clean: float | None
    attacks: dict[str, float | None]
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form (an entry of the record's ``checked``)."""
        return {
            "strategy": dict(self.strategy),
            "mean_success": self.mean_success,
            "clean": self.clean,
            "attacks": dict(self.attacks),
            "passed": self.passed,
        }


@dataclass
class AttackBound:
    """The bound's record over one choice: the checks in order.

    Attributes:
        suite: The attack suite's version.
        bound: The largest accepted mean attack success.
        items: The validation items the suite was run on.
        checked: The judges checked, in order.
        calls: The LM calls the checks made.
        returned: The check of the judge the choice returned (the last one checked, unless
            the choice came back to a judge checked before).
    """

    suite: str
    bound: float
    items: int
    checked: list[AttackCheck] = field(default_factory=list)
    calls: int = 0
    returned: AttackCheck | None = None

    @property
    def met(self) -> bool:
        """Whether the judge returned met the bound."""
        return self.returned is not None and self.returned.passed

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form (the selection record's ``robustness``)."""
        return {
            "suite": self.suite,
            "bound": self.bound,
            "items": self.items,
            "met": self.met,
            "calls": self.calls,
            "checked": [c.to_dict() for c in self.checked],
        }

    def passed_over(self, check: AttackCheck, key: str) -> str:
        """The message for a judge passed over."""
        return (
            f"robustness: {key} passed over: its attack success {_pct(check.mean_success)} "
            f"over the suite {self.suite} on {self.items} validation items is above "
            f"max_attack_success {self.bound:g}"
        )

    def kept(self, check: AttackCheck, key: str) -> str:
        """The message for the judge returned."""
        verdict = "within" if check.passed else "above"
        return (
            f"robustness: {key}: attack success {_pct(check.mean_success)} over the suite "
            f"{self.suite} on {self.items} validation items, {verdict} max_attack_success "
            f"{self.bound:g}"
        )

    def problem(self, key: str) -> str:
        """The problem line when the judge returned fails the bound."""
        mean = None if self.returned is None else self.returned.mean_success
        return (
            f"the returned judge ({key}) fails the robustness bound: attack success "
            f"{_pct(mean)} over the suite {self.suite} on {self.items} "
            f"validation items, above max_attack_success {self.bound:g} (after "
            f"{len(self.checked)} judge(s) checked)"
        )


def check_attacks(
    judge: Any,
    records: Sequence[Record],
    *,
    suite: str,
    bound: float,
    lm: Any,
    threads: int | None,
    progress: bool,
    seed: int,
) -> AttackCheck:
    """Run the suite on ``judge`` over ``records`` and hold it to ``bound``.

    A judge with no measurable attack success (nothing rated both clean and attacked)
    fails: it cannot be shown to hold.
    """
    report = robustness(
        judge, records, suite=suite, lm=lm, threads=threads, progress=progress, seed=seed
    )
    mean = report.mean_success
    per_attack = {a.attack: a.success if a.flipped is None else a.flipped for a in report.attacks}
    clean = report.clean.get(report.metric)
    return AttackCheck(
        strategy=dict(judge.strategy.as_dict()),
        mean_success=mean,
        clean=None if clean is None else float(clean),
        attacks=per_attack,
        passed=mean is not None and mean <= bound,
    )


def hold_to_bound(
    selected: Selected,
    records: Sequence[Record],
    *,
    config: OptimizerConfig,
    lm: Any,
    progress: bool,
    baseline_key: str,
    name_of: Callable[[Any], str],
    choose_again: Callable[[str], Selected],
    stopped: Callable[[LMUnavailable], BaseException],
) -> tuple[Selected, list[str]]:
    """Hold the chosen judge to ``config.max_attack_success`` on ``records``: pass over a
    judge above it and choose again, at most ``config.max_attack_checks`` judges checked.

    Args:
        selected: The choice to hold.
        records: The validation items the suite runs on.
        config: The compile's settings (its bound, suite, threads and seed).
        lm: The model the suite's judgements go to (its calls are counted).
        progress: Show the suite's progress bars.
        baseline_key: The baseline's strategy key: never passed over.
        name_of: How the messages name a judge (``"the baseline"``, ``"strategy #3"``).
        choose_again: Bar the strategy of that key and return the new choice.
        stopped: The exception to raise when the model stops answering (resumable).

    Returns:
        The final choice (its record holds the messages and the bound's record) and the
        problem when the judge returned fails the bound.
    """
    if config.max_attack_success is None:
        return selected, []
    bound = AttackBound(config.attack_suite, config.max_attack_success, len(records))
    stats0, messages = lm_stats(lm), []
    checks: dict[str, AttackCheck] = {}  # strategy key -> its check
    while True:
        key = strategy_key(selected.judge.strategy)
        if key in checks:
            break  # the choice came back to a judge that already failed
        try:
            check = check_attacks(
                selected.judge,
                records,
                suite=config.attack_suite,
                bound=config.max_attack_success,
                lm=lm,
                threads=config.threads,
                progress=progress,
                seed=config.seed,
            )
        except LMUnavailable as e:
            raise stopped(e) from e
        checks[key] = check
        bound.checked.append(check)
        if check.passed or key == baseline_key or len(bound.checked) >= config.max_attack_checks:
            break
        messages.append(bound.passed_over(check, name_of(selected.judge)))
        selected = choose_again(key)
    name = name_of(selected.judge)
    bound.returned = checks[key]
    messages.append(bound.kept(bound.returned, name))
    record = selected.record
    record.messages.extend(messages)
    bound.calls = (lm_stats(lm) - stats0).calls
    record.robustness = bound.to_dict()
    return selected, [] if bound.met else [bound.problem(name)]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"
