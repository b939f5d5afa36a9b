"""Optimizer settings: :class:`OptimizerConfig` and the shipped presets (``optimizers/*.toml``)."""

from __future__ import annotations

import inspect
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._resources import shipped_file, shipped_names
from ..evaluate import ATTACK_SUITES, CHECK_TIMEOUT, SUITE_VERSION
from ..racing import RacingConfig
from ..search import SEARCHES, Value
from ..selection import SelectionConfig

__all__ = ["Metric", "OptimizerConfig", "load_optimizer", "racing_config", "selection_config"]

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
        candidates: Which strategies the search may judge: ``"all"`` (the default), or
            ``"rate_first"``: apart from the student's own strategy (the baseline), only
            strategies that give their rating before any explanation
            (:func:`judgeopt.judge.rates_first`), which a compile judges stopped at the
            rating, for a fraction of an explanation's cost (docs/judge.md, "Candidates
            that rate first").
        threads: Judge calls in flight at once (``None``: what the LM keeps busy,
            :func:`judgeopt.evaluate.default_threads`).
        metric: What the search maximises (default: ``spearman``; ``accuracy`` pairwise).
        example_seed: Seed of the in-context example selection.
        racing: Early stopping of hopeless candidates (:class:`judgeopt.racing.RacingConfig`;
            off by default: every candidate is judged on every item).
        selection: How the compiled judge is chosen (:class:`judgeopt.selection.
            SelectionConfig`; default: search on the whole scoring set, keep the strategy
            with the best Bonferroni lower bound of its gain over the baseline at 0.95 if
            above zero; TOML ``[selection]`` with ``rule = "lcb"``, ``"confirm"``,
            ``"veto"``, ``"best"``, ``"shrink"``, ``"factor"`` or ``"posterior"``).
        ensemble: Also build a prompt ensemble of this many of the best strategies
            (:class:`judgeopt.judge.JudgeEnsemble`; 0 or 1: none).
        ensemble_anchor: The baseline's weight in the ensemble (0: none, the ``ensemble``
            best strategies at equal weights; ``w`` in (0, 1): the baseline at ``w`` and the
            ``ensemble`` best *other* strategies sharing ``1 - w``, an ensemble hedged toward
            the baseline; then ``ensemble`` = 1 is allowed).
        ensemble_stack: Fit the ensemble's weights on the validation items instead (0: no):
            a ridge regression, penalty ``ensemble_stack`` per item, of the human scores'
            ranks on the z-normalised ratings of the baseline and the ``ensemble`` best
            other strategies, no weight negative (:func:`judgeopt.selection.stack_rule`
            with ``nonneg``); the strategies it gives no weight are left out, which makes
            the judge cheaper. Not with ``ensemble_anchor``.
        max_consecutive_failures: Circuit breaker: stop the compile (resumably) after this
            many judge calls in a row failed transiently (connection, timeout, 5xx, rate
            limit, each after the LM's own retries).
        check_timeout: Seconds the check call before the search waits for its one-token
            answer (apart from the LM's per-call ``timeout``, 120 s by default): a server
            that accepts connections but never answers stops the compile after about this
            long.
        max_parse_failures: Largest share of the chosen judge's answers on its scoring
            items that may give no rating (unparsed, or a failed call) before the compile
            reports the judge as untrustworthy (``judgeopt compile`` then exits with 1).
        max_attack_success: Hold the chosen judge to this attack success rate, averaged
            over the injection suite and measured on the validation items
            (:mod:`judgeopt.teleprompt._attack_bound`): a judge above it is passed over and
            the choice made again (``None``, the default: no check, no extra call).
        attack_suite: The injection suite of that check (:data:`judgeopt.evaluate.
            ATTACK_SUITES`).
        max_attack_checks: The most judges the check runs the suite on (each costs the
            validation items times the suite's attacks plus one in calls).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    search: str = "auto"
    budget: int = Field(71, ge=1)
    seed: int = Field(0, ge=0)
    params: dict[str, Any] = Field(default_factory=dict)
    space: dict[str, list[Value]] = Field(default_factory=dict)
    forbid: list[dict[str, Value]] = Field(default_factory=list)
    candidates: Literal["all", "rate_first"] = "all"
    threads: int | None = Field(None, ge=1)
    metric: Metric | None = None
    example_seed: int = Field(0, ge=0)
    racing: RacingConfig = Field(default_factory=RacingConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    ensemble: int = Field(0, ge=0)
    ensemble_anchor: float = Field(0.0, ge=0.0, lt=1.0)
    ensemble_stack: float = Field(0.0, ge=0.0)
    max_consecutive_failures: int = Field(5, ge=1)
    check_timeout: float = Field(CHECK_TIMEOUT, gt=0)
    max_parse_failures: float = Field(0.25, ge=0.0, le=1.0)
    max_attack_success: float | None = Field(None, ge=0.0, le=1.0)
    attack_suite: str = SUITE_VERSION
    max_attack_checks: int = Field(3, ge=1)

    def model_post_init(self, __context: Any) -> None:
        if self.ensemble_stack and self.ensemble_anchor:
            raise ValueError(
                "The `ensemble_stack` and `ensemble_anchor` fields cannot both be set: a "
                "stacked ensemble fits the baseline's weight, an anchored one fixes it. Got "
                f"ensemble_stack={self.ensemble_stack!r}, ensemble_anchor={self.ensemble_anchor!r}."
            )
        if self.attack_suite not in ATTACK_SUITES:
            raise ValueError(
                f"The `attack_suite` field must be one of {sorted(ATTACK_SUITES)!r}. "
                f"Got {self.attack_suite!r} instead."
            )
        if self.search not in SEARCHES:
            raise ValueError(
                f"The `search` field must be one of {sorted(SEARCHES)!r}. "
                f"Got {self.search!r} instead."
            )
        allowed = set(inspect.signature(SEARCHES[self.search]).parameters) - {
            "space",
            "budget",
            "seed",
            "graph",
            "baseline",
        }
        unknown = sorted(set(self.params) - allowed)
        if unknown:
            raise ValueError(
                f"Unknown `params` {unknown!r} for search {self.search!r}. "
                f"Allowed: {sorted(allowed)!r}."
            )

    def race_top(self) -> int:
        """The population size racing compares with: the racing setting's ``top``, the
        search's ``k``, or 1."""
        if self.racing.top is not None:
            return self.racing.top
        if "k" in self.params:
            return int(self.params["k"])
        param = inspect.signature(SEARCHES[self.search]).parameters.get("k")
        return int(param.default) if param is not None else 1


def load_optimizer(path_or_name: str | os.PathLike[str]) -> OptimizerConfig:
    """Load an optimizer preset from a TOML file, or a shipped preset by name (``hpss``).

    Raises:
        ValueError: On a missing file, bad TOML, or invalid fields (naming them).
    """
    path = Path(path_or_name)
    if not path.is_file():
        path = shipped_file("optimizers", str(path_or_name)) or path
    if not path.is_file():
        raise ValueError(
            f"Optimizer preset {str(path_or_name)!r} not found (a TOML file or "
            f"one of: {', '.join(shipped_names('optimizers'))})."
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return OptimizerConfig(**data)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: invalid TOML: {e}") from e
    except ValidationError as e:
        problems = "; ".join(
            f"`{'.'.join(str(p) for p in err['loc'])}`: {err['msg']} (got {err.get('input')!r})"
            for err in e.errors()
        )
        raise ValueError(f"{path}: {problems}") from None


def racing_config(value: bool | RacingConfig | Mapping[str, Any] | None) -> RacingConfig:
    """A teleprompter's ``racing`` argument as a :class:`RacingConfig` (``None``: off)."""
    if value is None or isinstance(value, bool):
        return RacingConfig(enabled=bool(value))
    if isinstance(value, RacingConfig):
        return value
    return RacingConfig(**value)


def selection_config(value: str | SelectionConfig | Mapping[str, Any] | None) -> SelectionConfig:
    """A teleprompter's ``selection`` argument (a rule name, a config or its fields) as a
    :class:`SelectionConfig` (``None``: the default rule)."""
    if value is None:
        return SelectionConfig()
    if isinstance(value, SelectionConfig):
        return value
    if isinstance(value, str):
        return SelectionConfig(rule=value)
    return SelectionConfig(**value)
