"""How the compiled judge is chosen: the ``[selection]`` settings of an optimizer preset."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._cross_task_prior import GainPrior, change_key

Rule = Literal["confirm", "veto", "best", "shrink", "lcb", "factor", "posterior"]

#: Each rule's own ``confidence`` when a config does not set one: ``lcb``'s 0.95 is what the
#: judgement bank chose it at (``benchmarks/results/bank_rules.json``); ``confirm`` and
#: ``veto`` keep the 0.8 they were measured at (docs/benchmarks.md sections 11-13).
DEFAULT_CONFIDENCE: dict[str, float] = {"lcb": 0.95}
#: The ``confidence`` of a rule :data:`DEFAULT_CONFIDENCE` does not name.
BASE_CONFIDENCE = 0.8

#: A factor value in a strategy change (``{"scale": 10, "decoding": "expected"}``).
Value = str | int | float | bool


class GainPriorChange(BaseModel):
    """One change's entry in a :class:`GainPriorTable`: its mean gain over the baseline on
    the tasks that hold it, and how many they are."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    change: dict[str, Value]
    mean: float
    count: int = Field(ge=1)


class GainPriorTable(BaseModel):
    """A :class:`~judgeopt.selection.GainPrior` as settings (``[selection.gain_prior]``, or
    one per model in ``[selection.gain_priors]``): what a model's judgement bank measured
    for each change from the baseline, the prior of rule ``"posterior"``.

    Attributes:
        changes: Each change's mean gain and task count (``[[...changes]]`` in TOML).
        sd_task: The spread of one change's gain from task to task (> 0).
        sd_unseen: The prior's standard deviation for a change the table does not hold
            (its mean is 0; > 0).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    changes: list[GainPriorChange] = Field(default_factory=list)
    sd_task: float = Field(gt=0.0)
    sd_unseen: float = Field(gt=0.0)

    def to_prior(self) -> GainPrior:
        """The :class:`~judgeopt.selection.GainPrior` :func:`posterior_rule` reads."""
        means = {change_key(c.change): c.mean for c in self.changes}
        counts = {change_key(c.change): c.count for c in self.changes}
        return GainPrior(means, counts, self.sd_task, self.sd_unseen)

    @classmethod
    def from_prior(cls, prior: GainPrior) -> GainPriorTable:
        """The settings of ``prior`` (for a preset: ``benchmarks/bank_rules.py`` writes the
        bank's)."""
        return cls(
            changes=[
                GainPriorChange(change=json.loads(k), mean=m, count=prior.counts[k])
                for k, m in prior.means.items()
            ],
            sd_task=prior.sd_task,
            sd_unseen=prior.sd_unseen,
        )


class SelectionConfig(BaseModel):
    """How the compiled judge is chosen (``[selection]`` in an optimizer preset).

    Attributes:
        rule: ``"lcb"`` (default; the judgement bank's choice, docs/judge.md "How many labels you
            need"; see below). ``"confirm"``: search on one part of the scoring set, re-judge the
            finalists and the baseline on the rest, keep a finalist only if its gain is confirmed
            there (see :mod:`judgeopt.selection`). ``"veto"``: search on one part, keep the best
            search score unless the rest shows it worse than the baseline (:func:`veto`).
            ``"best"``: search on everything and keep the best validation score (the paper's rule;
            biased upward). ``"shrink"`` / ``"lcb"``: search on everything, then compare every
            strategy judged on all the items with the baseline there, pooled: the best
            empirical-Bayes shrunk gain if positive (:func:`shrink_rule`), or the best lower bound
            of the gain at ``confidence`` corrected for the number of strategies compared if above
            zero (:func:`lcb_rule`); else the baseline. ``"factor"``: the same, the gains pooled by
            factor value (a ridge regression of every strategy's gain on its factor values, as HPSS
            pools its advantages; :func:`factor_rule`): the best fitted gain if positive, else the
            baseline. ``"posterior"``: the same, each strategy's gain weighed against what the
            model's judgement bank measured for the same change from the baseline (``gain_prior``;
            :func:`posterior_rule`): the best posterior gain above ``margin``, else the baseline.
            Without a gain prior for the compile's model it is ``"shrink"`` (the same weighing with
            the prior estimated from these labels alone), and the compile says so.
        confirm_fraction: Share of the scoring set (whole groups) held out for confirmation.
        finalists: How many of the search's best distinct strategies are confirmed (rule
            ``"confirm"``; ``"veto"`` judges only the best one).
        confidence: One-sided level of the bound: for ``"confirm"`` the lower bound of a
            finalist's gain must be above zero (0.5: a positive point estimate is enough);
            for ``"veto"`` an upper bound below zero vetoes the search's best; for
            ``"lcb"`` the family-wise level of the lower bounds (Bonferroni). Not set: the
            rule's own (:func:`default_confidence`: 0.95 for ``"lcb"``, else 0.8), so
            switching the rule of a config that does not set it switches the level too.
        min_confirm_items: Below this many confirmation items (or 3 groups at group level)
            the confirmation cannot tell judges apart; the compile then uses ``"best"`` on the
            whole set and says so.
        n_resamples: Bootstrap resamples of each paired comparison (for ``"shrink"``,
            ``"lcb"`` and ``"factor"``: of the standard errors of the gains).
        seed: Seed of the split and of the bootstrap.
        prior: A *prior default*: the judge to return instead of the baseline when the rule
            keeps the baseline, given as its change from the baseline's strategy (factor ->
            value, for example ``{"scale": 10, "decoding": "expected"}``), chosen without
            these labels (on the same model's judgement bank, ``docs/judge.md``). ``None``
            (default): the baseline is the fallback.
        priors: Prior defaults per model, keyed by the model string the compile records
            (``model_name``, for example ``"local:qwen2.5-coder-1.5b"``): the compile's
            model's entry is used when ``prior`` is not set. A prior belongs to the model
            whose bank chose it; another model gets none.
        prior_veto: Keep the baseline after all when the items the rule compared on refute
            the prior: the one-sided upper bound at ``confidence`` of its paired gain over
            the baseline there is below zero (or the gain is undefined).
        margin: The smallest estimated gain over the baseline rules ``"shrink"`` and
            ``"posterior"`` act on (0: any positive one).
        ridge: Rule ``"factor"``'s ridge penalty, in units of the median weight (a value
            seen in one strategy only is shrunk toward no effect).
        gain_prior: The prior of rule ``"posterior"`` (:class:`GainPriorTable`), chosen
            without these labels (a model's judgement bank, ``docs/judge.md``).
        gain_priors: Gain priors per model, keyed as ``priors`` is: the compile's model's
            entry is used when ``gain_prior`` is not set.
        guard: Cross-fit what was chosen on the items it is scored on (the prompt ensemble,
            and rule ``"best"``'s judge): the same choice made on each half of the search's
            items must beat the baseline on the other half (:func:`crossfit_gain` above 0),
            else the compile builds no ensemble and, under rule ``"best"``, returns the
            baseline (the bank's ``anchored+guard`` and ``ensemble+guard``,
            :func:`guarded`); with halves below ``min_confirm_items`` items it cannot
            check and does not vouch (the same outcome). Other rules' single judges are not
            checked (they already hold items out or correct for the choice).
        guard_margin: The cross-fitted gain the guard asks for (0: any positive one).
        frugal: With the guard, under rule ``"best"``: when the guard keeps an ensemble,
            ship rule best's single judge instead (one call per item instead of one per
            member) if its own cross-fitted gain, made on the same halves, is above
            ``guard_margin`` and at least the ensemble's minus this tolerance (the bank's
            ``stack+guard+frugal``, :func:`frugal`). ``None`` (default): off.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: Rule = "lcb"
    confirm_fraction: float = Field(0.5, gt=0.0, lt=1.0)
    finalists: int = Field(3, ge=1)
    confidence: float = Field(BASE_CONFIDENCE, ge=0.5, lt=1.0)
    min_confirm_items: int = Field(20, ge=3)
    n_resamples: int = Field(2000, ge=100)
    seed: int = Field(0, ge=0)
    prior: dict[str, str | int | float | bool] | None = None
    priors: dict[str, dict[str, str | int | float | bool]] = Field(default_factory=dict)
    prior_veto: bool = True
    margin: float = Field(0.0, ge=0.0, lt=1.0)
    ridge: float = Field(1.0, gt=0.0)
    gain_prior: GainPriorTable | None = None
    gain_priors: dict[str, GainPriorTable] = Field(default_factory=dict)
    guard: bool = False
    guard_margin: float = Field(0.0, ge=0.0, lt=1.0)
    frugal: float | None = Field(None, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _rule_confidence(self) -> SelectionConfig:
        # NOTE: a level the caller did not set is the rule's own. It is written into the
        # (frozen) instance without marking it set, so ``model_dump(exclude_unset=True)``
        # still leaves it out and a rule switched later gets its own level again.
        if "confidence" not in self.model_fields_set:
            self.__dict__["confidence"] = default_confidence(self.rule)
        if self.frugal is not None and not (self.guard and self.rule == "best"):
            raise ValueError(
                f"selection.frugal={self.frugal!r} needs guard = true and rule 'best' (it "
                "compares rule best's judge with the ensemble the guard kept); got "
                f"guard={self.guard}, rule={self.rule!r}"
            )
        return self

    def with_rule(self, rule: str) -> SelectionConfig:
        """These settings under ``rule`` (validated: an unknown name is refused): the
        settings this config states carry over, a level it left to its rule becomes the new
        rule's own (what ``--selection RULE`` does to a preset)."""
        return SelectionConfig.model_validate({**self.model_dump(exclude_unset=True), "rule": rule})

    def prior_for(self, model: str | None) -> dict[str, str | int | float | bool] | None:
        """The prior default a compile with ``model`` uses: ``prior`` if set, else the
        model's entry in ``priors`` (``None``: the baseline is the fallback)."""
        if self.prior is not None:
            return dict(self.prior)
        entry = self.priors.get(model) if model is not None else None
        return None if entry is None else dict(entry)

    def gain_prior_for(self, model: str | None) -> GainPrior | None:
        """The gain prior rule ``"posterior"`` uses with ``model``: ``gain_prior`` if set,
        else the model's entry in ``gain_priors`` (``None``: none; the rule is then
        ``"shrink"``)."""
        table = self.gain_prior
        if table is None and model is not None:
            table = self.gain_priors.get(model)
        return None if table is None else table.to_prior()

    @property
    def compared(self) -> int:
        """How many of the search's best strategies the rule compares with the baseline on
        the confirmation part (``"veto"`` tests the search's best only)."""
        return 1 if self.rule == "veto" else self.finalists


def default_confidence(rule: str) -> float:
    """The ``confidence`` rule ``rule`` runs at when a :class:`SelectionConfig` does not set
    one (:data:`DEFAULT_CONFIDENCE`, else :data:`BASE_CONFIDENCE`)."""
    return DEFAULT_CONFIDENCE.get(rule, BASE_CONFIDENCE)
