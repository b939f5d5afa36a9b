"""The prompt ensemble a compile exports beside its single judge (``--ensemble``).

:func:`build_ensemble` turns the chosen members' judgements on the items the judge was chosen
on into a :class:`~judgeopt.judge.JudgeEnsemble`: each member's mean and spread there (for
the z-normalisation), the weights (equal, or the baseline as anchor at its weight), the
ensemble's predictions and its comparison with the baseline.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from ..data import Record
from ..evaluate import EvalResult, compare, ensemble_result
from ..judge import JudgeEnsemble
from ..selection import RuleInput, SelectionConfig, stack_rule

__all__ = ["build_ensemble", "stack_members"]


def build_ensemble(
    members: list[Any],
    results: list[EvalResult],
    records: list[Record],
    base_res: EvalResult,
    *,
    split: str,
    note: str,
    messages: list[str],
    pairwise: bool,
    metric: str,
    sel: SelectionConfig,
    weights: list[float] | None = None,
    stack: float = 0.0,
) -> JudgeEnsemble | None:
    """The ensemble of ``members`` (at ``weights``, default equal; with weights and no
    ``stack`` the first member is the baseline, the anchor; with ``stack`` the weights were
    fitted with that ridge penalty, :func:`stack_members`), normalised on ``records`` and
    compared there with the baseline (``base_res``) by ``metric``, bootstrapped as ``sel``
    says.

    A member whose ratings do not vary on ``records`` is left out (an anchor among them:
    the others at equal weights; stacked: the others at their weights); with fewer than two
    members left, or a pairwise task, no ensemble is built. Each case is said in
    ``messages``.
    """
    if pairwise:
        messages.append(
            "ensemble: a pairwise judge has no ratings to average; no ensemble is built"
        )
        return None
    keep, means, sds, kept_w = [], [], [], []
    for prog, res, w in zip(members, results, weights or [1.0] * len(members), strict=True):
        mean, sd = _spread(res)
        if sd > 0:
            keep.append((prog, res))
            means.append(mean)
            sds.append(sd)
            kept_w.append(w)
        elif weights is not None and not stack and prog is members[0]:
            messages.append(
                "ensemble: the baseline gave no varying ratings, so the ensemble has no "
                "anchor (its other members at equal weights)"
            )
            weights = None
    if len(keep) < 2:
        messages.append(
            f"ensemble: fewer than 2 of the {len(members)} best strategies gave varying "
            "ratings; no ensemble is built"
        )
        return None
    ens = JudgeEnsemble(
        [p for p, _ in keep], means, sds, weights=kept_w if weights is not None else None
    )
    kept_res = [res for _, res in keep]
    ens_res = ensemble_result(ens, kept_res, records)
    comparisons = {
        split: compare(
            ens_res,
            base_res,
            records,
            metric=metric,
            labels=("baseline", "ensemble"),
            n_resamples=sel.n_resamples,
            seed=sel.seed,
            note=note,
        ).to_dict()
    }
    chosen = {
        "members": [p.strategy.as_dict() for p, _ in keep],
        "weights": ens.weights,
        "anchor": float(kept_w[0]) if weights is not None and not stack else 0.0,
        "stack": stack,
        "normalised_on": split,
        "items": len(records),
    }
    return ens.with_report(replace(ens.report_, comparisons=comparisons, selection=chosen))


def _spread(res: EvalResult) -> tuple[float, float]:
    """The mean and sample standard deviation of a member's parsed ratings (0 and 0 without
    any; standard deviation 0 with one)."""
    parsed = [float(i.score) for i in res.items if i.score is not None]
    mean = sum(parsed) / len(parsed) if parsed else 0.0
    if len(parsed) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((x - mean) ** 2 for x in parsed) / (len(parsed) - 1))


def stack_members(
    members: list[Any],
    results: list[EvalResult],
    preds: list[list[float]],
    human: list[Any],
    groups: list[str] | None,
    *,
    ridge: float,
    messages: list[str],
) -> tuple[list[Any], list[EvalResult], list[float]] | None:
    """The weights of a stacked ensemble: a non-negative ridge stack
    (:func:`judgeopt.selection.stack_rule`, ``nonneg``, penalty ``ridge`` per item) of the
    human scores' ranks on ``members``' z-normalised ratings ``preds`` (the baseline first;
    ``nan`` where unparsed). Returns the members it gives weight to, their results and
    weights; ``None`` (said in ``messages``) when it keeps one judge alone."""
    data = RuleInput(
        human=np.asarray(human, dtype=float),
        preds=np.asarray(preds, dtype=float),
        baseline=0,
        groups=groups,
    )
    pick = stack_rule(data, ridge=ridge, nonneg=True)
    what = (
        f"ensemble: the non-negative stack (ridge {ridge:g} per item) of the baseline and "
        f"the {len(members) - 1} best others"
    )
    if pick.single is not None:
        who = "the baseline" if pick.single == 0 else f"its member {pick.single + 1}"
        messages.append(f"{what} gave weight to {who} alone; no ensemble is built")
        return None
    keep = [(i, w) for i, w in zip(pick.members, pick.weights, strict=True) if w > 0]
    messages.append(
        f"{what} kept {len(keep)} of them"
        + ("" if any(i == 0 for i, _ in keep) else " (not the baseline)")
    )
    return [members[i] for i, _ in keep], [results[i] for i, _ in keep], [w for _, w in keep]
