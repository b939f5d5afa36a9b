"""judgeopt.analysis: results tables, top-2 % shares, rankings, stability, clusters, report."""

from __future__ import annotations

import csv
import doctest
import importlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

import judgeopt.analysis as an
from judgeopt.analysis import (
    AGGREGATIONS,
    ItemScores,
    ResultsTable,
    aggregate,
    analyze,
    best_between,
    best_strategies,
    compare_aggregations,
    fisher_z_pvalue,
    kendall_tau_b,
    load_items,
    load_results,
    pattern_ranking,
    pattern_scores,
    ranking_stability,
    top_prompts,
    write_report,
)

PREXME_FACTORS = ["base_prompt", "task_description", "format_requirement"]
LABELS = ["easy token labels", "complex token labels"]


def _table(rows: list[dict[str, Any]], **kw: Any) -> ResultsTable:
    kw.setdefault("factors", ["fmt", "td"])
    kw.setdefault("objective", "kd")
    return ResultsTable.from_records(rows, **kw)


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


# ----------------------------------------------------------------------------- public surface
def test_all_matches_public_names() -> None:
    public = {n for n in vars(an) if not n.startswith("_")} - {"annotations"}
    modules = {n for n in public if type(getattr(an, n)).__name__ == "module"}
    assert set(an.__all__) == public - modules


def test_import_loads_no_scipy_matplotlib_or_llm_stack() -> None:
    code = (
        "import sys, judgeopt.analysis; print(sorted(m for m in ('scipy', 'matplotlib', "
        "'dspy', 'litellm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["_table", "_aggregate", "_patterns", "_clusters"])
def test_docstring_examples(module: str) -> None:
    mod = importlib.import_module(f"judgeopt.analysis.{module}")
    result = doctest.testmod(
        mod, extraglobs={"ResultsTable": ResultsTable, "top_prompts": top_prompts}
    )
    assert result.failed == 0


# ----------------------------------------------------------------------------- the table
def test_table_levels_codes_and_missing() -> None:
    t = _table(
        [
            {"m": "A", "fmt": "lab", "td": "x", "kd": "0.5"},
            {"m": "A", "fmt": "num", "td": "x", "kd": ""},
            {"m": "B", "fmt": "lab", "td": "x", "kd": "nan"},
            {"m": "B", "fmt": "num", "td": "x", "kd": 0.25},
        ],
        group=["m"],
    )
    assert t.dimensions == ("m", "fmt", "td")
    assert t.levels["fmt"] == ("lab", "num")
    assert t.codes["m"].tolist() == [0, 0, 1, 1]
    assert t.n_rows == 4 and t.n_missing == 2
    assert t.missing_by_setting() == {"A": 1, "B": 1}
    assert t.values[3] == 0.25


def test_load_results_unknown_column_lists_available(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "r.csv", [{"m": "A", "fmt": "x", "td": "y", "kd": 0.1}])
    with pytest.raises(
        ValueError,
        match=r"The `factors` column 'nope' is not in r.csv\. "
        r"Available columns: \['m', 'fmt', 'td', 'kd'\]",
    ):
        load_results(path, factors=["fmt", "nope"], objective="kd")
    with pytest.raises(ValueError, match=r"The `objective` column 'acc'"):
        load_results(path, factors=["fmt"], objective="acc")
    with pytest.raises(ValueError, match=r"The `group` column 'model'"):
        load_results(path, factors=["fmt"], objective="kd", group=["model"])
    with pytest.raises(ValueError, match="not found"):
        load_results(tmp_path / "missing.csv", factors=["fmt"], objective="kd")


@pytest.mark.parametrize(
    ("rows", "kw", "match"),
    [
        (
            [{"fmt": "a", "td": "x", "kd": "high"}],
            {},
            r"row 1: `kd` must be a number or empty. "
            r"Got 'high'",
        ),
        (
            [{"fmt": "a", "td": "x", "kd": 1}, {"fmt": "a", "td": "x", "kd": 2}],
            {},
            r"row 2: strategy \{'fmt': 'a', 'td': 'x'\} repeats",
        ),
        ([{"fmt": "a", "td": "x", "kd": 1}], {"factors": "fmt"}, r"`factors` must be a sequence"),
        ([{"fmt": "a", "td": "x", "kd": 1}], {"factors": []}, r"at least one column"),
        (
            [{"fmt": "a", "td": "x", "kd": 1}],
            {"group": ["fmt"]},
            r"both as `factors` and as "
            r"`group`",
        ),
        ([], {}, r"has no rows"),
        ([{"fmt": "a", "td": "x", "kd": 1, "n": 0}], {"n_column": "n"}, r"`n` must be >= 1"),
    ],
)
def test_table_errors(rows: list[dict[str, Any]], kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _table(rows, **kw)


# ----------------------------------------------------------------------------- top 2 %
def _two_models() -> ResultsTable:
    # 10 strategies per model; with fraction 0.2 the cut-off is the 0.8 quantile, i.e. the
    # best 2 of 10 (position 0.8 * 9 = 7.2 lies between the 8th and 9th value).
    m1 = {
        ("lab", "t0"): 0.9,
        ("lab", "t1"): 0.8,
        ("lab", "t2"): 0.1,
        ("lab", "t3"): 0.2,
        ("lab", "t4"): 0.3,
        ("num", "t0"): 0.4,
        ("num", "t1"): 0.5,
        ("num", "t2"): 0.6,
        ("num", "t3"): 0.7,
        ("num", "t4"): 0.05,
    }
    m2 = {
        ("lab", "t0"): 0.1,
        ("lab", "t1"): 0.2,
        ("lab", "t2"): 0.3,
        ("lab", "t3"): 0.95,
        ("lab", "t4"): 0.0,
        ("num", "t0"): 0.9,
        ("num", "t1"): 0.5,
        ("num", "t2"): 0.6,
        ("num", "t3"): 0.7,
        ("num", "t4"): 0.4,
    }
    rows = [
        {"m": m, "fmt": f, "td": d, "kd": v}
        for m, vals in (("m1", m1), ("m2", m2))
        for (f, d), v in vals.items()
    ]
    return _table(rows, group=["m"])


def test_top_shares_hand_computed() -> None:
    top = top_prompts(_two_models(), fraction=0.2)
    assert top.n_top == 4
    assert top.shares("fmt", by=["m"]) == {
        ("m1",): {"lab": 1.0, "num": 0.0},
        ("m2",): {"lab": 0.5, "num": 0.5},
    }
    assert top.shares("fmt") == {(): {"lab": 0.75, "num": 0.25}}
    assert top.counts("td") == {(): {"t0": 2, "t1": 1, "t2": 0, "t3": 1, "t4": 0}}
    assert top.shares("fmt", among="all") == {(): {"lab": 0.5, "num": 0.5}}
    assert top.thresholds["m1"] == pytest.approx(
        np.quantile([0.9, 0.8, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.05], 0.8)
    )
    grouped = top.shares("td", value_groups={"early": ["t0", "t1"]})
    assert grouped == {(): {"early": 0.75, "t2": 0.0, "t3": 0.25, "t4": 0.0}}


def test_top_keeps_ties_and_skips_missing() -> None:
    rows = [
        {"fmt": f"f{i}", "td": "x", "kd": v} for i, v in enumerate([0.5, 0.5, 0.5, 0.1, None, 0.2])
    ]
    top = top_prompts(_table(rows), fraction=0.2)
    # Finite values [0.5, 0.5, 0.5, 0.1, 0.2]: the 0.8 quantile is 0.5; all three ties stay.
    assert top.counts("fmt")[()] == {"f0": 1, "f1": 1, "f2": 1, "f3": 0, "f4": 0, "f5": 0}


def test_top_errors() -> None:
    t = _two_models()
    for bad in (0, 1.5, True, "0.02"):
        with pytest.raises(ValueError, match=r"`fraction` must be a number in \(0, 1\]"):
            top_prompts(t, fraction=bad)  # type: ignore[arg-type]
    top = top_prompts(t, fraction=0.2)
    with pytest.raises(
        ValueError,
        match=r"names 'lbl', which is not a value of 'fmt'; "
        r"allowed: \['lab', 'num'\]",
    ):
        top.shares("fmt", value_groups={"labels": ["lbl"]})
    with pytest.raises(ValueError, match=r"puts 'lab' in both"):
        top.shares("fmt", value_groups={"a": ["lab"], "b": ["lab", "num"]})
    with pytest.raises(ValueError, match=r"`column` must be a group or factor column"):
        top.shares("kd")


def test_prexme_top_two_percent_is_fifteen_of_720(shared_data: Path) -> None:
    t = _dev_table(shared_data)
    top = top_prompts(t)
    counts = top.counts("format_requirement", by=["model", "task"])
    # 720 strategies (711 with a value for NousHermes-13B / en_de): 15 per setting.
    assert {sum(c.values()) for c in counts.values()} == {15}


# ----------------------------------------------------------------------------- rankings
def _stability_table() -> ResultsTable:
    # fmt a > b > c on tasks t1 and t2, reversed on t3; td adds spread around each cell.
    centre = {
        "t1": {"a": 0.3, "b": 0.2, "c": 0.1},
        "t2": {"a": 0.6, "b": 0.5, "c": 0.4},
        "t3": {"a": 0.1, "b": 0.2, "c": 0.3},
    }
    rows = []
    for task, by_fmt in centre.items():
        for fmt, c in by_fmt.items():
            for td, off in (("x", -0.05), ("y", 0.0), ("z", 0.04)):
                rows.append({"task": task, "fmt": fmt, "td": td, "kd": c + off})
    return _table(rows, group=["task"])


def test_pattern_scores_and_ranking_hand_computed() -> None:
    t = _stability_table()
    # fmt "a": values 0.25 0.3 0.34 | 0.55 0.6 0.64 | 0.05 0.1 0.14
    a_vals = [0.25, 0.3, 0.34, 0.55, 0.6, 0.64, 0.05, 0.1, 0.14]
    for how, expect in (
        ("median", 0.3),
        ("mean", np.mean(a_vals)),
        ("max", 0.64),
        ("min", 0.05),
        ("q75", np.quantile(a_vals, 0.75)),
    ):
        assert pattern_scores(t, "fmt", aggregation=how)["a"] == pytest.approx(expect)
    assert pattern_scores(t, "fmt", where={"task": "t3"}) == pytest.approx(
        {"a": 0.1, "b": 0.2, "c": 0.3}
    )
    assert [v for v, _ in pattern_ranking(t, "fmt", where={"task": "t1"})] == ["a", "b", "c"]
    with pytest.raises(ValueError, match=r"`where` value 't9' is not a value of 'task'"):
        pattern_scores(t, "fmt", where={"task": "t9"})


def test_aggregate_values() -> None:
    v = [0.1, 0.4, 0.2, float("nan")]
    assert aggregate(v, "median") == pytest.approx(0.2)
    assert aggregate(v, "q90") == pytest.approx(np.quantile([0.1, 0.4, 0.2], 0.9))
    assert aggregate(v, "std") == pytest.approx(np.std([0.1, 0.4, 0.2]))
    mean = (0.1 + 0.4 + 0.2) / 3
    assert aggregate(v, "saturation") == pytest.approx((1 - (0.4 - mean)) * 0.4)
    assert math.isnan(aggregate([float("nan")], "mean"))
    with pytest.raises(ValueError, match=r"The `aggregation` must be one of \['median', "):
        aggregate(v, "avg")
    assert set(AGGREGATIONS) >= {"median", "mean", "max", "min", "q75"}


def test_kendall_tau_b_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.integers(0, 4, size=12).astype(float)
        y = rng.integers(0, 4, size=12).astype(float)
        if len(set(x)) > 1 and len(set(y)) > 1:
            assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)
    assert math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))
    assert kendall_tau_b([1, 2, float("nan"), 3], [1, 2, 5, 3]) == pytest.approx(1.0)


def test_ranking_stability_hand_computed() -> None:
    st = ranking_stability(_stability_table(), "fmt", "task")
    assert st.labels == ("t1", "t2", "t3")
    np.testing.assert_allclose(st.tau, [[1, 1, -1], [1, 1, -1], [-1, -1, 1]])
    assert st.mean_tau == pytest.approx(-1 / 3)
    assert st.most_stable_pair() == ("t1", "t2", 1.0)
    assert st.least_stable_pair()[2] == -1.0  # type: ignore[index]
    # The task ranking when fmt changes: medians per fmt are t2 > t1 > t3 for "a",
    # t2 > t1 = t3 for "b" and t2 > t3 > t1 for "c".
    back = ranking_stability(_stability_table(), "task", "fmt")
    assert back.tau[0, 2] == pytest.approx(1 / 3)
    assert back.tau[0, 1] == pytest.approx(
        stats.kendalltau([0.3, 0.6, 0.1], [0.2, 0.5, 0.2]).statistic
    )
    with pytest.raises(ValueError, match="must differ"):
        ranking_stability(_stability_table(), "fmt", "fmt")
    with pytest.raises(ValueError, match=r"`changed` must be a group or factor column"):
        ranking_stability(_stability_table(), "fmt", "kd")


def _outlier_table(seed: int) -> ResultsTable:
    """fmt a > b > c > d in the bulk of every task; one random outlier per cell moves max."""
    rng = np.random.default_rng(seed)
    rows = []
    for task in [f"t{i}" for i in range(6)]:
        for k, fmt in enumerate("abcd"):
            outlier = rng.integers(0, 9)
            for i, td in enumerate("uvwxyzpqr"):
                v = 0.5 - 0.1 * k + 0.01 * (i - 4)
                if i == outlier:
                    v = float(rng.uniform(0.7, 1.0))
                rows.append({"task": task, "fmt": fmt, "td": td, "kd": v})
    return _table(rows, group=["task"])


def test_compare_aggregations_prefers_robust_one() -> None:
    t = _outlier_table(0)
    comp = compare_aggregations(
        t, "fmt", changed=["task"], aggregations=["median", "max"], n_resamples=500, seed=1
    )
    assert comp.stability["median"] == pytest.approx(1.0)
    assert comp.stability["max"] < 0.5
    assert comp.best == "median"
    assert comp.p_values[0, 1] < 0.01 and comp.p_values[1, 0] > 0.5
    assert comp.significantly_better("median") == ["max"]
    again = compare_aggregations(
        t, "fmt", changed=["task"], aggregations=["median", "max"], n_resamples=500, seed=1
    )
    np.testing.assert_array_equal(comp.p_values, again.p_values)
    with pytest.raises(ValueError, match="at least two aggregations"):
        compare_aggregations(t, "fmt", aggregations=["median"])
    with pytest.raises(ValueError, match=r"`aggregations` must be one of"):
        compare_aggregations(t, "fmt", aggregations=["median", "avg"])


# ----------------------------------------------------------------------------- clusters
def _synthetic_items(seed: int = 0) -> tuple[ResultsTable, list[dict[str, Any]]]:
    """Two models x one task, three strategies each, 120 shared items.

    Per model: "good" = human + noise, "twin" = good + tiny noise (same quality),
    "bad" = independent noise.
    """
    rng = np.random.default_rng(seed)
    human = rng.normal(size=120)
    item_rows, table_rows = [], []
    for m, noise in (("m1", 0.6), ("m2", 3.0)):
        good = human + rng.normal(scale=noise, size=120)
        judges = {
            "good": good,
            "twin": good + rng.normal(scale=0.01, size=120),
            "bad": rng.normal(size=120),
        }
        for fmt, judge in judges.items():
            for i in range(120):
                item_rows.append(
                    {
                        "model": m,
                        "task": "t",
                        "fmt": fmt,
                        "id": f"s{i}",
                        "judge_score": float(judge[i]),
                        "human_score": float(human[i]),
                    }
                )
            table_rows.append(
                {
                    "model": m,
                    "task": "t",
                    "fmt": fmt,
                    "kendall": float(stats.kendalltau(human, judge).statistic),
                    "n": 120,
                }
            )
    table = ResultsTable.from_records(
        table_rows, factors=["fmt"], objective="kendall", group=["model", "task"], n_column="n"
    )
    return table, item_rows


def test_permutation_clusters_from_items(tmp_path: Path) -> None:
    table, rows = _synthetic_items()
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    items = load_items(path, columns=table.dimensions)
    clusters = best_strategies(table, items=items, n_resamples=300, seed=0)
    assert [c.setting for c in clusters] == [
        {"model": "m1", "task": "t"},
        {"model": "m2", "task": "t"},
    ]
    c1 = clusters[0]
    assert c1.test == "permutation" and c1.method == "kendall" and c1.n_tested == 2
    flags = {r.config["fmt"]: r.in_cluster for r in c1.ranked}
    assert flags["bad"] is False
    assert flags["good"] is True and flags["twin"] is True
    assert c1.size == 2
    bad = next(r for r in c1.ranked if r.config["fmt"] == "bad")
    assert bad.p_value is not None and bad.p_value < 0.01
    # Across models: m1's best is far better than m2's on the same items.
    (versus,) = best_between(table, "model", items=items, n_resamples=300, seed=0)
    assert versus.setting == {"task": "t"}
    assert [r.config["model"] for r in versus.ranked] == ["m1", "m2"]
    assert versus.ranked[1].in_cluster is False and versus.size == 1
    # The same from a CSV file, with renamed columns.
    csv_rows = [
        {
            **{k: v for k, v in r.items() if k not in ("id", "judge_score", "human_score")},
            "item": r["id"],
            "judge": r["judge_score"],
            "human": r["human_score"],
        }
        for r in rows
    ]
    csv_path = _write_csv(tmp_path / "items.csv", csv_rows)
    again = load_items(
        csv_path,
        columns=table.dimensions,
        item_column="item",
        judge_column="judge",
        human_column="human",
    )
    assert best_strategies(table, items=again, n_resamples=300, seed=0)[0].size == 2


def test_permutation_cluster_untestable_and_mismatched_items() -> None:
    table, rows = _synthetic_items()
    # A candidate without item scores is untested (in_cluster None) and not in the cluster.
    partial = ItemScores.from_records(
        [r for r in rows if r["fmt"] != "bad"], columns=table.dimensions
    )
    c = best_strategies(table, items=partial, n_resamples=100)[0]
    bad = next(r for r in c.ranked if r.config["fmt"] == "bad")
    assert bad.in_cluster is None and bad.p_value is None and c.n_tested == 1
    # Different human scores under one item id: the ids do not identify the same items.
    broken = [
        dict(r, human_score=r["human_score"] + (1.0 if r["fmt"] == "twin" else 0.0)) for r in rows
    ]
    items = ItemScores.from_records(broken, columns=table.dimensions)
    with pytest.raises(ValueError, match="different human scores for the same item id"):
        best_strategies(table, items=items, n_resamples=50)


def test_item_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(
        json.dumps({"model": "m", "fmt": "a", "id": "1", "judge_score": 1}) + "\n", encoding="utf-8"
    )
    with pytest.raises(
        ValueError,
        match=r"Column 'human_score' is not in items.jsonl.*"
        r"Available columns: \['fmt', 'id', 'judge_score', "
        r"'model'\]",
    ):
        load_items(path, columns=["model", "fmt"])
    path.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"items.jsonl line 1: not valid JSON"):
        load_items(path, columns=["model"])
    with pytest.raises(ValueError, match="item 'x' repeats"):
        ItemScores.from_records(
            [{"k": "a", "id": "x", "judge_score": 1, "human_score": 1}] * 2, columns=["k"]
        )


def test_fisher_z_clusters() -> None:
    expect = stats.norm.sf((math.atanh(0.3) - math.atanh(0.25)) / math.sqrt(2 * 0.437 / (500 - 4)))
    assert fisher_z_pvalue(0.3, 500, 0.25, 500, "kendall") == pytest.approx(expect)
    assert fisher_z_pvalue(0.3, 100, 0.25, 100, "pearson") == pytest.approx(
        stats.norm.sf((math.atanh(0.3) - math.atanh(0.25)) / math.sqrt(2 / 97))
    )
    rows = [
        {"fmt": f, "td": "x", "kd": v, "n": 500} for f, v in (("a", 0.30), ("b", 0.29), ("c", 0.10))
    ]
    t = _table(rows, n_column="n")
    (c,) = best_strategies(t, method="kendall")
    assert c.test == "fisher-z" and c.size == 2
    assert [r.in_cluster for r in c.ranked] == [True, True, False]
    (plain,) = best_strategies(_table([{k: v for k, v in r.items() if k != "n"} for r in rows]))
    assert plain.test == "none" and plain.size is None
    assert [m.config["fmt"] for m in plain.members] == ["a"]
    with pytest.raises(ValueError, match=r"Cannot tell which correlation the objective 'kd'"):
        best_strategies(t)
    with pytest.raises(ValueError, match=r"needs per-item scores"):
        best_strategies(t, test="permutation", method="kendall")
    with pytest.raises(ValueError, match=r"`alpha` must be a number in \(0, 1\)"):
        best_strategies(t, method="kendall", alpha=1.5)
    with pytest.raises(ValueError, match=r"`between` must be one of the group columns"):
        best_between(t, "fmt")


# ----------------------------------------------------------------------------- PrExMe data
def _dev_table(shared_data: Path) -> ResultsTable:
    return load_results(
        shared_data / "prexme_surface" / "dev.csv",
        factors=PREXME_FACTORS,
        objective="kendall",
        group=["model", "task"],
        n_column="n_segments",
    )


@pytest.fixture(scope="module")
def dev_analysis(shared_data: Path) -> an.Analysis:
    groups = {"format_requirement": {"textual labels": LABELS}}
    return analyze(_dev_table(shared_data), value_groups=groups, n_resamples=500)


# PrExMe Table 10 (phase 1, Eval4NLP train): best prompt and Kendall per model and task.
TABLE_10 = {
    ("LLaMA3-8B", "en_de"): ("PZS", "Strong Urgency", "-1 or 0 or 1", 0.251),
    ("LLaMA3-8B", "zh_en"): ("PZS", "Excited", "complex token labels", 0.236),
    ("LLaMA3-8B", "summarization"): ("PZS", "Appreciative", "easy token labels", 0.334),
    ("Mixtral-8x7B", "en_de"): ("PZS", "Casual", "easy token labels", 0.268),
    ("Mixtral-8x7B", "zh_en"): ("PZS", "Reward", "easy token labels", 0.264),
    ("Mixtral-8x7B", "summarization"): ("PZS", "Neutral", "easy token labels", 0.365),
    ("NousHermes-13B", "en_de"): ("ZS-CoT-EM", "Urgent situation", "-100 to 100", 0.230),
    ("NousHermes-13B", "zh_en"): ("ZS-CoT-EM", "Threat", "easy token labels", 0.201),
    ("NousHermes-13B", "summarization"): ("PZS", "Dire Warning", "0 to 100", 0.225),
}


def test_dev_reproduces_table_10(dev_analysis: an.Analysis) -> None:
    best = {(c.setting["model"], c.setting["task"]): c.best for c in dev_analysis.best}
    for key, (bp, td, fr, kd) in TABLE_10.items():
        assert tuple(best[key].config.values()) == (bp, td, fr)
        assert round(best[key].value, 3) == kd
    assert dev_analysis.test == "fisher-z"


def test_dev_reproduces_pattern_shares(dev_analysis: an.Analysis) -> None:
    top = dev_analysis.top
    labels = top.shares("format_requirement", by=["model"], value_groups={"labels": LABELS})
    share = {k[0]: v["labels"] for k, v in labels.items()}
    # Sec. 5: Mixtral uses textual labels in 80 % of its best prompts; LLaMA3-8B prefers them
    # to a smaller degree; NousHermes-13B shows no clear preference.
    assert share["Mixtral-8x7B"] == pytest.approx(36 / 45)
    assert share["LLaMA3-8B"] == pytest.approx(25 / 45)
    assert share["NousHermes-13B"] == pytest.approx(12 / 45)
    cot = top.shares("base_prompt", by=["model"], value_groups={"CoT": ["ZS-CoT", "ZS-CoT-EM"]})
    cot_share = {k[0]: v["CoT"] for k, v in cot.items()}
    # Sec. 5: NOUS uses ZS-CoT(-EM) often (44.9 % over all datasets), the others < 10 %.
    assert cot_share["NousHermes-13B"] == pytest.approx(17 / 45)
    assert cot_share["LLaMA3-8B"] < 0.1 and cot_share["Mixtral-8x7B"] < 0.1
    # Sec. 5: the format requirement ranking is more stable than the task description's
    # when the base prompt changes.
    st = dev_analysis.stability
    assert (
        st[("format_requirement", "base_prompt")].mean_tau
        > st[("task_description", "base_prompt")].mean_tau
    )
    text = " ".join(dev_analysis.findings)
    assert "Mixtral-8x7B 80.0% (36/45" in text
    assert any("11 of 6480 rows have no `kendall` value" in n for n in dev_analysis.notes)


def test_dev_stability_numbers_quoted_in_docs(dev_analysis: an.Analysis) -> None:
    st = dev_analysis.stability

    def tau(target: str, changed: str, a: str, b: str) -> float:
        s = st[(target, changed)]
        return float(s.tau[s.labels.index(a), s.labels.index(b)])

    assert tau("format_requirement", "base_prompt", "PZS", "ZS-CoT") == pytest.approx(
        0.067, abs=5e-4
    )
    assert tau("format_requirement", "base_prompt", "ZS-CoT", "ZS-CoT-EM") == pytest.approx(
        0.689, abs=5e-4
    )
    assert tau(
        "task_description", "format_requirement", "0 to 100", "-1.0 to 1.0"
    ) == pytest.approx(0.043, abs=5e-4)
    assert tau("model", "format_requirement", "0 to 100", "-100 to 100") == 1.0
    assert tau("task", "format_requirement", "0 to 5", "-5 to 5") == 1.0
    assert tau("task", "base_prompt", "ZS-CoT", "ZS-CoT-EM") == -1.0
    # The median is not the most stable aggregation on these three models.
    means = {
        g: np.mean([c.stability[g] for c in dev_analysis.comparisons.values()])
        for g in AGGREGATIONS
    }
    assert max(means, key=means.__getitem__) == "mean"
    assert means["median"] > max(means["max"], means["min"], means["saturation"])


def test_dev_analysis_json_round_trip(dev_analysis: an.Analysis) -> None:
    data = json.loads(json.dumps(dev_analysis.to_dict()))
    assert data["n_rows"] == 6480 and data["n_missing"] == 11
    assert data["top"]["n_top"] == 135
    shares = data["top"]["value_group_shares"]["format_requirement"]
    assert shares["by"]["model"]["Mixtral-8x7B"]["textual labels"] == 0.8
    assert {c["target"] for c in data["stability"]} == {"model", "task", *PREXME_FACTORS}
    assert set(data["aggregation_comparison"]) == set(PREXME_FACTORS)


# ----------------------------------------------------------------------------- report & CLI
def test_report_with_figures(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    analysis = analyze(
        _stability_table(), value_groups={"fmt": {"ab": ["a", "b"]}}, n_resamples=200
    )
    files = write_report(analysis, tmp_path / "out")
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    pngs = [f for f in files if f.suffix == ".png"]
    assert files[0].name == "report.md" and files[1].name == "analysis.json"
    assert pngs and all(f.stat().st_size > 1000 for f in pngs)
    for f in pngs:
        assert f"]({f.name})" in report  # relative links
    assert "## Findings" in report and "## 4. Stability of the rankings" in report
    assert "stability_fmt_by_task.png" in {f.name for f in pngs}


def test_report_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("judgeopt.analysis._report.figures_available", lambda: False)
    files = write_report(analyze(_stability_table(), n_resamples=100), tmp_path)
    report = files[0].read_text(encoding="utf-8")
    assert "Figures were skipped: matplotlib is not installed" in report
    assert not list(tmp_path.glob("*.png"))


def test_analyze_errors() -> None:
    t = _stability_table()
    with pytest.raises(ValueError, match=r"`value_groups` names 'task', which is not a factor"):
        analyze(t, value_groups={"task": {"x": ["t1"]}})
    with pytest.raises(ValueError, match=r"The `aggregation` must be one of"):
        analyze(t, aggregation="mode")
    empty = _table([{"fmt": "a", "td": "x", "kd": ""}])
    with pytest.raises(ValueError, match=r"No row of <records> has a `kd` value"):
        analyze(empty)


def test_cli_analyze_with_items(tmp_path: Path) -> None:
    from judgeopt.cli import main

    table, rows = _synthetic_items()
    results = _write_csv(
        tmp_path / "grid.csv",
        [
            {
                "model": table.value("model", r),
                "task": table.value("task", r),
                "fmt": table.value("fmt", r),
                "n": 120,
                "kendall": float(table.values[r]),
            }
            for r in range(table.n_rows)
        ],
    )
    items = tmp_path / "grid.items.jsonl"
    items.write_text(
        "".join(json.dumps({**r, "parsed": True}) + "\n" for r in rows), encoding="utf-8"
    )
    out = tmp_path / "analysis"
    assert (
        main(
            [
                "analyze",
                "--results",
                str(results),
                "--factors",
                "fmt",
                "--objective",
                "kendall",
                "--group",
                "model,task",
                "--items",
                str(items),
                "--out",
                str(out),
                "--n-resamples",
                "200",
                "--no-figures",
            ]
        )
        == 0
    )
    data = json.loads((out / "analysis.json").read_text(encoding="utf-8"))
    assert data["significance"] == {"test": "permutation", "method": "kendall", "alpha": 0.075}
    assert [c["size"] for c in data["best"]] == [2, 2]
    assert "permute-input test" in (out / "report.md").read_text(encoding="utf-8")


def test_cli_analyze_dev_end_to_end(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from judgeopt.cli import main

    groups = json.dumps({"format_requirement": {"textual labels": LABELS}})
    out = tmp_path / "prexme"
    code = main(
        [
            "analyze",
            "--results",
            str(shared_data / "prexme_surface" / "dev.csv"),
            "--factors",
            ",".join(PREXME_FACTORS),
            "--objective",
            "kendall",
            "--group",
            "model,task",
            "--out",
            str(out),
            "--value-groups",
            groups,
            "--n-resamples",
            "300",
            "--no-figures",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "Mixtral-8x7B has the best `kendall` in 3 of 3 settings" in printed
    data = json.loads((out / "analysis.json").read_text(encoding="utf-8"))
    assert data["significance"]["test"] == "fisher-z"  # n_segments found automatically
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| Mixtral-8x7B | en_de | PZS, Casual, easy token labels | 0.2678 |" in report
    assert "Fisher-z approximation" in report and not list(out.glob("*.png"))


def test_cli_analyze_reports_user_errors(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from judgeopt.cli import main

    code = main(
        [
            "analyze",
            "--results",
            str(shared_data / "prexme_surface" / "dev.csv"),
            "--factors",
            "base_prompt,prompt",
            "--objective",
            "kendall",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "The `factors` column 'prompt' is not in dev.csv. Available columns:" in err
    code = main(
        [
            "analyze",
            "--results",
            str(shared_data / "prexme_surface" / "dev.csv"),
            "--factors",
            ",".join(PREXME_FACTORS),
            "--objective",
            "kendall",
            "--group",
            "model,task",
            "--out",
            str(tmp_path),
            "--value-groups",
            '{"model": {"big": ["Mixtral-8x7B"]}}',
        ]
    )
    assert code == 2
    assert "`value_groups` names 'model', which is not a factor" in capsys.readouterr().err
