"""From the bank's choice to a compile's settings: the ``[selection]`` block a preset ships.

:func:`judgeopt_lab.replay_bank` names rules as the replay runs them (``"shrink+prior(veto)"``,
``"lcb"`` with ``alpha``); a compile reads :class:`judgeopt.selection.SelectionConfig` fields
(``rule``, ``margin``, ``confidence``, ``priors`` per model, ...). :func:`selection_settings`
translates one into the other, with the constants and priors chosen on every pair of the bank,
and :func:`preset_toml` writes them as the optimizer-preset text (``optimizers/*.toml``), so
shipping the bank's default is a copy, not a re-derivation. A rule the compile cannot run
(``stack`` of every strategy with weights of either sign; ``prior`` alone, which ignores the
labels; ``baseline``) is refused with the reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from judgeopt.selection import RULES, GainPrior, GainPriorTable, SelectionConfig

__all__ = ["preset_toml", "selection_settings"]

#: Replay rules the compile cannot run, and why.
_NOT_A_COMPILE_RULE = {
    "baseline": "it never changes the judge (the compile's fallback, not a rule)",
    "stack": "it stacks every evaluated strategy with weights of either sign (about 20 calls "
    "per item); the compile stacks the baseline and the m best others with no negative "
    "weight (use 'stack+guard' at m >= 1, nonneg true)",
    "prior": "it ignores the labels; the compile returns a prior only when its rule keeps "
    "the baseline (use 'confirm+prior' or 'shrink+prior')",
}


def selection_settings(
    payload: Mapping[str, Any],
    *,
    model: str,
    rule: str | None = None,
    n_valid: int = 100,
) -> dict[str, Any]:
    """The optimizer-preset settings that make a compile with ``model`` run ``rule`` (default:
    the payload's ``default``) as the bank replayed it at ``n_valid``.

    Returns ``{"selection": {...}}`` (the :class:`~judgeopt.selection.SelectionConfig`
    fields that differ from the defaults, a prior default or gain prior keyed by ``model``)
    plus ``"ensemble": m`` for the ``ensemble`` rule (the compile's ``--ensemble`` under rule
    ``best``: the mean of the ``m`` best validation scores, as the replay's rule is), and
    also ``"ensemble_anchor": w`` for ``anchored`` (the baseline at ``w`` with the ``m``
    best others); ``+guard`` sets the selection's ``guard`` (the compile's cross-fitted
    guard, as :func:`judgeopt.selection.guarded` replays it); ``stack+guard`` also sets
    ``"ensemble_stack": ridge`` (the compile's non-negative stack of the baseline and the
    ``m`` best others). A rule the registry gives a ``config`` is translated by it.

    Raises:
        ValueError: For a rule the replay did not run at ``n_valid``, one the compile cannot
            run (naming why), or a payload without the prior the rule needs.
    """
    name = rule if rule is not None else payload.get("default")
    if not isinstance(name, str):
        raise ValueError("selection_settings: the payload names no `default` rule; pass rule=")
    if name in _NOT_A_COMPILE_RULE:
        raise ValueError(f"rule {name!r} is not one a compile runs: {_NOT_A_COMPILE_RULE[name]}")
    rules = payload.get("rules", {})
    row = rules.get(name, {}).get("n_valid", {}).get(str(n_valid))
    if row is None:
        raise ValueError(
            f"rule {name!r} was not replayed at n_valid={n_valid}; replayed: "
            f"{', '.join(sorted(rules)) or 'none'}"
        )
    setting = dict(row.get("setting", {}))
    whole = RULES.get(name)
    if whole is not None and whole.config is not None:
        # A composed rule the compile runs as one (the guarded ensembles and stack).
        made = whole.config(setting)
        SelectionConfig(**made["selection"])  # every field checked as a preset's would be
        return made
    base, _, suffix = name.partition("+")
    sel: dict[str, Any] = {}
    out: dict[str, Any] = {"selection": sel}
    spec = RULES.get(base)
    if spec is not None and spec.config is not None:
        # The registry's translation of the rule's setting (judgeopt.selection.RULES).
        made = spec.config(setting)
        sel |= made.get("selection", {})
        out |= {k: v for k, v in made.items() if k != "selection"}
    elif base == "posterior":
        table = payload.get("gain_prior")
        if not table:
            raise ValueError("rule 'posterior' needs the payload's `gain_prior`; it has none")
        prior = GainPriorTable.from_prior(GainPrior(**table)).model_dump()
        for c in prior["changes"]:  # four decimals: far below the bank's precision
            c["mean"] = round(c["mean"], 4)
        prior |= {k: round(prior[k], 4) for k in ("sd_task", "sd_unseen")}
        sel |= {
            "rule": "posterior",
            "margin": setting.get("margin", 0.0),
            "gain_priors": {model: prior},
        }
    else:
        raise ValueError(f"rule {name!r}: no compile settings are known for it")
    if suffix == "guard":
        raise ValueError(f"rule {name!r}: the compile guards ensembles and rule best only")
    if suffix:
        change = payload.get("prior")
        if change is None:
            raise ValueError(f"rule {name!r} needs the payload's `prior`; it has none")
        sel["priors"] = {model: dict(change)}
        sel["prior_veto"] = suffix == "prior(veto)"
    SelectionConfig(**sel)  # every field checked as a preset's would be
    return out


def _value(v: Any) -> str:
    """A TOML value: a number, string, boolean or inline table of them."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"a preset cannot hold {v!r}")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise ValueError(f"a preset value must be a scalar or a table; got {v!r}")


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() and k.isascii() else json.dumps(k)


def preset_toml(settings: Mapping[str, Any]) -> str:
    """:func:`selection_settings`'s result as optimizer-preset TOML (what
    :func:`judgeopt.teleprompt.load_optimizer` reads back to the same settings)."""
    lines = [
        f"{k} = {_value(settings[k])}"
        for k in ("ensemble", "ensemble_anchor", "ensemble_stack")
        if k in settings
    ]
    sel = dict(settings.get("selection", {}))
    priors = sel.pop("priors", {})
    gain_priors = sel.pop("gain_priors", {})
    lines += ["[selection]"] + [f"{_key(k)} = {_value(v)}" for k, v in sel.items()]
    if priors:
        lines += ["", "[selection.priors]"]
        lines += [f"{_key(m)} = {_value(change)}" for m, change in priors.items()]
    for m, table in gain_priors.items():
        head = f"selection.gain_priors.{_key(m)}"
        lines += ["", f"[{head}]"]
        lines += [f"sd_task = {_value(table['sd_task'])}"]
        lines += [f"sd_unseen = {_value(table['sd_unseen'])}"]
        for c in table["changes"]:
            lines += ["", f"[[{head}.changes]]"]
            lines += [f"{k} = {_value(c[k])}" for k in ("change", "mean", "count")]
    return "\n".join(lines) + "\n"
