"""One rule registry (``judgeopt.selection.RULES``) for the compile and the judgement bank.

For every rule a compile runs on its validation table, the compile's binding (the constants
a :class:`SelectionConfig` sets, :func:`compile_rule`) and the bank's (the replay's setting,
:meth:`RuleSpec.bind`) must pick the same judges on the same table; and the bank's setting,
turned into a preset's settings, must give back the same constants.
"""

from __future__ import annotations

import typing

import numpy as np
import pytest

from judgeopt.selection import (
    RULES,
    GainPrior,
    Rule,
    RuleInput,
    RuleSpec,
    SelectionConfig,
    change_key,
    compile_rule,
    table_rules,
)
from judgeopt_lab import RULES as BANK_RULES
from judgeopt_lab import selection_settings

N_RESAMPLES = 200


def table(signal: float, seed: int, *, grouped: bool = False) -> RuleInput:
    """Eight judges on 60 items: row 0 the baseline, row 3 better by ``signal``."""
    rng = np.random.default_rng(seed)
    n, k = 60, 8
    human = rng.normal(size=n)
    noise = np.full(k, 1.5)
    noise[3] = 1.5 - signal
    preds = human[None, :] + rng.normal(size=(k, n)) * noise[:, None]
    strategies = [{"scale": 5, "cot": "prefix" if i % 2 else "none", "n": i} for i in range(k)]
    groups = [f"g{i // 4}" for i in range(n)] if grouped else None
    return RuleInput(
        human=human, preds=preds, baseline=0, groups=groups, strategies=strategies, seed=seed
    )


TABLES = [
    ("strong", table(1.2, 0)),
    ("weak", table(0.4, 1)),
    ("flat", table(0.0, 2)),
    ("grouped", table(0.8, 3, grouped=True)),
]


def gain_prior() -> GainPrior:
    return GainPrior.from_gains(
        [{change_key({"cot": "prefix"}): 0.05, change_key({"n": 3}): 0.1}, {}]
    )


def cases() -> list[tuple[str, dict[str, typing.Any]]]:
    return [(name, setting) for name in table_rules() for setting in RULES[name].settings()]


def config_for(name: str, setting: dict[str, typing.Any]) -> SelectionConfig:
    spec = RULES[name]
    if spec.config is not None:
        return SelectionConfig(**spec.config(setting)["selection"], n_resamples=N_RESAMPLES)
    assert name == "posterior"  # its preset settings carry the bank's gain prior too
    return SelectionConfig(rule="posterior", margin=setting["margin"], n_resamples=N_RESAMPLES)


@pytest.mark.parametrize(("name", "setting"), cases())
def test_the_compile_and_the_bank_pick_the_same_judges(
    name: str, setting: dict[str, typing.Any]
) -> None:
    spec = RULES[name]
    sel = config_for(name, setting)
    prior = gain_prior()
    applied, got_spec, compiled = compile_rule(sel, gain_prior=prior)
    assert applied == name and got_spec is spec
    replayed = spec.bind(setting, prior=prior, n_resamples=N_RESAMPLES)
    for label, data in TABLES:
        a, b = compiled(data), replayed(data)
        assert a.members == b.members and a.weights == b.weights, (label, a.reason, b.reason)
    # The settings the compile reads give back the bank's constants.
    constants = spec.constants(sel)  # type: ignore[misc]
    assert constants.pop("n_resamples") == N_RESAMPLES
    assert constants == pytest.approx(setting)


def test_every_configurable_rule_is_registered() -> None:
    names = set(typing.get_args(Rule))
    assert names <= set(RULES)
    assert set(table_rules()) <= names
    assert all(RULES[n].config is not None for n in names - {"posterior"})
    # The bank reads the same objects.
    assert BANK_RULES is RULES and all(isinstance(s, RuleSpec) for s in RULES.values())


def test_posterior_without_a_gain_prior_is_shrink_and_a_holdout_rule_is_refused() -> None:
    applied, spec, rule = compile_rule(SelectionConfig(rule="posterior", margin=0.02))
    assert applied == "shrink" and spec is RULES["shrink"]
    data = TABLES[0][1]
    assert (
        rule(data).members == RULES["shrink"].bind({"margin": 0.02}, n_resamples=2000)(data).members
    )
    with pytest.raises(ValueError, match="does not choose on the whole validation table"):
        compile_rule(SelectionConfig(rule="confirm"))


@pytest.mark.parametrize("name", ["lcb", "shrink", "factor", "ensemble", "anchored", "best"])
def test_a_preset_runs_the_rule_the_bank_replayed(name: str) -> None:
    setting = RULES[name].settings()[0]
    payload = {"default": name, "rules": {name: {"n_valid": {"100": {"setting": setting}}}}}
    made = selection_settings(payload, model="local")
    assert made == RULES[name].config(setting)  # type: ignore[misc]
