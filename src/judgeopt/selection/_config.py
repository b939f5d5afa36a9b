"""How the compiled judge is chosen: the ``[selection]`` settings of an optimizer preset."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Rule = Literal["confirm", "veto", "best", "shrink", "lcb", "factor"]


class SelectionConfig(BaseModel):
    """How the compiled judge is chosen (``[selection]`` in an optimizer preset).

    Attributes:
        rule: ``"confirm"`` (default): search on one part of the scoring set, re-judge the
            finalists and the baseline on the rest, keep a finalist only if its gain is
            confirmed there (see :mod:`judgeopt.selection`). ``"veto"``: search on one part,
            keep the best search score unless the rest shows it worse than the baseline
            (:func:`veto`). ``"best"``: search on everything and keep the best validation
            score (the paper's rule; biased upward). ``"shrink"`` / ``"lcb"``: search on
            everything, then compare every strategy judged on all the items with the
            baseline there, pooled: the best empirical-Bayes shrunk gain if positive
            (:func:`shrink_rule`), or the best lower bound of the gain at ``confidence``
            corrected for the number of strategies compared if above zero
            (:func:`lcb_rule`); else the baseline. ``"factor"``: the same, the gains
            pooled by factor value (a ridge regression of every strategy's gain on its
            factor values, as HPSS pools its advantages; :func:`factor_rule`): the best
            fitted gain if positive, else the baseline.
        confirm_fraction: Share of the scoring set (whole groups) held out for confirmation.
        finalists: How many of the search's best distinct strategies are confirmed (rule
            ``"confirm"``; ``"veto"`` judges only the best one).
        confidence: One-sided level of the bound: for ``"confirm"`` the lower bound of a
            finalist's gain must be above zero (0.5: a positive point estimate is enough);
            for ``"veto"`` an upper bound below zero vetoes the search's best; for
            ``"lcb"`` the family-wise level of the lower bounds (Bonferroni).
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
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: Rule = "confirm"
    confirm_fraction: float = Field(0.5, gt=0.0, lt=1.0)
    finalists: int = Field(3, ge=1)
    confidence: float = Field(0.8, ge=0.5, lt=1.0)
    min_confirm_items: int = Field(20, ge=3)
    n_resamples: int = Field(2000, ge=100)
    seed: int = Field(0, ge=0)
    prior: dict[str, str | int | float | bool] | None = None
    priors: dict[str, dict[str, str | int | float | bool]] = Field(default_factory=dict)
    prior_veto: bool = True

    def prior_for(self, model: str | None) -> dict[str, str | int | float | bool] | None:
        """The prior default a compile with ``model`` uses: ``prior`` if set, else the
        model's entry in ``priors`` (``None``: the baseline is the fallback)."""
        if self.prior is not None:
            return dict(self.prior)
        entry = self.priors.get(model) if model is not None else None
        return None if entry is None else dict(entry)

    @property
    def compared(self) -> int:
        """How many of the search's best strategies the rule compares with the baseline on
        the confirmation part (``"veto"`` tests the search's best only)."""
        return 1 if self.rule == "veto" else self.finalists
