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


def compiled_stack(
    data: RuleInput, setting: dict[str, typing.Any]
) -> tuple[list[int], list[float]] | None:
    """What a compile run with ``stack+guard``'s config ships on the table ``data`` (its
    search scored every candidate on these items, so the search's order is the table's): the
    guard of :mod:`judgeopt.teleprompt._guard`, then the members and weights of
    :func:`judgeopt.teleprompt._ensembling.stack_members`; ``None`` when the guard returns
    the baseline, no members when the stack keeps one judge (no ensemble is built)."""
    from judgeopt.teleprompt._ensembling import stack_members
    from judgeopt.teleprompt._guard import run_guard
    from judgeopt.teleprompt._pooling import ValidationTable

    made = RULES["stack+guard"].config(setting)  # type: ignore[misc]
    sel = SelectionConfig(**made["selection"])
    m, ridge = made["ensemble"], made["ensemble_stack"]
    k = data.preds.shape[0]
    built = ValidationTable(data, list(range(1, k)), [], [], [])
    check = run_guard(
        sel,
        lambda: built,
        n_items=len(data.human),
        ensemble=m,
        anchor=0.0,
        stack=ridge,
        rule="best",
        chose_baseline=False,
        metric="spearman",
    )
    if not check.passed:
        return None
    ranked = sorted((i for i in range(k) if i != data.baseline), key=lambda i: -data.scores[i])
    rows = [data.baseline, *ranked[:m]]
    stacked = stack_members(
        rows,
        rows,
        [list(data.preds[i]) for i in rows],
        list(data.human),
        data.groups,
        ridge=ridge,
        messages=[],
    )
    if stacked is None:  # a stack of one judge: the compile builds no ensemble
        return [], []
    members, _, weights = stacked
    return members, weights


STACK_SETTINGS = [s for s in RULES["stack+guard"].settings() if s["m"] >= 1 and s["nonneg"]]


def stack_table(rows: list[tuple[float, float]], seed: int) -> RuleInput:
    """Judges on 60 items, row ``i`` = ``a * human + b * noise`` for ``rows[i] = (a, b)``;
    row 0 is the baseline."""
    rng = np.random.default_rng(seed)
    human = rng.normal(size=60)
    preds = np.array([a * human + b * rng.normal(size=60) for a, b in rows])
    strategies = [{"scale": 5, "n": i} for i in range(len(rows))]
    return RuleInput(human=human, preds=preds, baseline=0, strategies=strategies, seed=seed)


#: Tables for the stack: (how made, seed) -> the branch each exercises.
STACK_TABLES: list[tuple[str, typing.Callable[[], RuleInput]]] = [
    *((label, lambda data=data: data) for label, data in TABLES),
    # the baseline far better than the others: the guard refuses every stack
    ("baseline best", lambda: stack_table([(1.0, 0.3)] + [(1.0, 3.0)] * 5 + [(0.0, 1.0)], 5)),
    # the baseline and every other but one point the wrong way: the stack keeps one judge
    ("one judge", lambda: stack_table([(-0.3, 1.0), (1.0, 0.3)] + [(-1.0, 1.0)] * 5, 6)),
]


@pytest.mark.parametrize(
    "setting", STACK_SETTINGS, ids=lambda s: f"m{s['m']}-r{s['ridge']}-margin{s['margin']}"
)
def test_the_compiles_guarded_stack_is_the_banks(setting: dict[str, typing.Any]) -> None:
    """``stack+guard`` at the settings a compile runs (``--ensemble m --ensemble-stack ridge
    --guard``): the compile's guard keeps the stack exactly when the bank's does, and ships
    the same members at the same weights (a member the stack gives weight 0 is left out)."""
    seen = set()
    for label, make in STACK_TABLES:
        # Each side gets its own table: a table memoises its cross-fitted halves and gains.
        bank = RULES["stack+guard"].bind(setting)(make())
        compiled = compiled_stack(make(), setting)
        if bank.single == 0:
            assert compiled is None, (label, bank.reason)
            seen.add("baseline")
        elif bank.single is not None:
            # A stack that kept one judge: the bank ships that judge; the compile builds no
            # ensemble and ships its rule's pick (rule best: the best validation score, the
            # same judge here).
            assert compiled == ([], []), (label, bank.reason)
            assert int(np.argmax(make().scores)) == bank.single
            seen.add("one judge")
        else:
            assert compiled is not None, (label, bank.reason)
            members, weights = compiled
            positive = [(i, w) for i, w in zip(bank.members, bank.weights, strict=True) if w > 0]
            assert members == [i for i, _ in positive], label
            assert weights == pytest.approx([w for _, w in positive]), label
            seen.add("ensemble")
    assert seen == {"baseline", "one judge", "ensemble"}  # every branch was compared


FRUGAL_TABLES = [
    *STACK_TABLES,
    # one judge carries the signal, the others a little: the single judge does as well
    ("single", lambda: stack_table([(0.3, 1.0), (1.0, 0.4)] + [(0.4, 1.0)] * 5, 7)),
]


@pytest.mark.parametrize(
    "setting", RULES["stack+guard+frugal"].settings(), ids=lambda s: f"tol{s['tolerance']}"
)
def test_the_compiles_frugal_stack_is_the_banks(setting: dict[str, typing.Any]) -> None:
    """``stack+guard+frugal`` (``[selection] frugal``): the compile ships rule best's single
    judge exactly when the bank's rule does, the stack when it does, the baseline when
    the guard refutes the stack."""
    from judgeopt.teleprompt._guard import run_guard
    from judgeopt.teleprompt._pooling import ValidationTable

    made = RULES["stack+guard+frugal"].config(setting)  # type: ignore[misc]
    sel = SelectionConfig(**made["selection"])
    assert sel.frugal == setting["tolerance"] and sel.guard and sel.rule == "best"
    seen = set()
    for label, make in FRUGAL_TABLES:
        bank = RULES["stack+guard+frugal"].bind(setting)(make())
        data = make()
        k = data.preds.shape[0]
        check = run_guard(
            sel,
            lambda data=data, k=k: ValidationTable(data, list(range(1, k)), [], [], []),
            n_items=len(data.human),
            ensemble=made["ensemble"],
            anchor=0.0,
            stack=made["ensemble_stack"],
            rule="best",
            chose_baseline=False,
            metric="spearman",
        )
        if bank.single == 0:
            assert not check.passed, label
            seen.add("baseline")
        elif "fewer calls" in bank.reason:
            assert check.passed and check.single, (label, check.message)
            assert bank.single == int(np.argmax(data.scores))
            assert check.record["frugal"]["single"] is True
            seen.add("single")
        else:
            assert check.passed and not check.single, (label, check.message)
            seen.add("stack")
    assert {"baseline", "single", "stack"} <= seen, seen


def test_frugal_needs_the_guard_and_rule_best() -> None:
    with pytest.raises(ValueError, match=r"frugal=0.0 needs guard = true and rule 'best'"):
        SelectionConfig(rule="best", frugal=0.0)
    with pytest.raises(ValueError, match=r"rule='lcb'"):
        SelectionConfig(rule="lcb", guard=True, frugal=0.02)
    assert SelectionConfig(rule="best", guard=True, frugal=0.02).frugal == 0.02
    assert SelectionConfig().frugal is None


def test_a_stack_the_compile_cannot_export_has_no_compile_setting() -> None:
    config = RULES["stack+guard"].config
    assert config is not None
    with pytest.raises(ValueError, match=r"m=0, nonneg=True.*m >= 1 and nonneg true"):
        config({"m": 0, "ridge": 10.0, "margin": 0.1, "nonneg": True})
    with pytest.raises(ValueError, match="m=3, nonneg=False"):
        config({"m": 3, "ridge": 1.0, "margin": 0.0, "nonneg": False})
