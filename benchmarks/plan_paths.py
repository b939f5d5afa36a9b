"""Are the plan's simulated paths like the searches compiles really made? (no judge call)

A compile's cost plan runs its search :data:`judgeopt.teleprompt.PLAN_PATHS` times on
made-up scores (independent normal, standard deviation ``PLAN_SCORE_SD`` 0.12) and prices the
strategies those paths visit (docs/benchmarks.md, "The plan on the search's own paths"). The
plan's errors on single compiles left open whether the made-up scores let a simulated search
walk differently from a real one: farther (more costly strategies: in-context examples,
generated criteria or references, metrics questions, AutoCoT steps, self-consistency) or with
fewer decoding twins (a rate-first strategy judged after its greedy or ``expected`` twin costs
no call).

This script rebuilds every real search that was recorded with its scores (the end-to-end
benchmark's budget-20 compiles in ``e2e*.json`` and the default compile of
``compile_cost.json``'s ``full`` entry), checks the rebuild by telling it the recorded scores
(it must ask for the recorded strategies, in order; a search that does not is reported and left
out), and then runs it from its start on made-up scores, many paths per score model. For each
real search and statistic (costly strategies, free twins, per kind), the real path's mid-rank
percentile among the simulated paths: a calibrated model puts the real searches' percentiles
around 0.5 (uniform over searches). The 30-item compiles whose judged strategies (not their
scores) were recorded (``--counts-only`` sources) are compared on the counts alone.

The score models: the plan's (independent normal, 0.12), the same at 0.05 and 0.25, and an
additive landscape (each factor value's effect drawn once per path, normal 0.08, plus normal
0.06 per strategy), to show how much the choice of made-up scores moves the paths.

    python benchmarks/plan_paths.py        # about 2 minutes; benchmarks/results/plan_paths.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from compile_cost import _lm_maker, validation_part  # noqa: E402
from judgeopt.lm import RECOMMENDED_PARALLEL  # noqa: E402
from judgeopt.search import Search, Strategy  # noqa: E402
from judgeopt.teleprompt._planning import PLAN_SCORE_SD  # noqa: E402
from judgeopt_lab import markdown_table, provenance, write_json  # noqa: E402
from plan_replay import COSTLY, compile_run  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = RESULTS / "plan_paths.json"
#: Files whose ``pairs`` hold a real search's trace with its scores (budget 20, ~100 items);
#: ``e2e_budget20.json`` ran after the first reading of this benchmark (a check of it).
TRACE_SOURCES = (
    "e2e.json",
    "e2e_heldout.json",
    "e2e_fresh.json",
    "e2e_prereg.json",
    "e2e_budget20.json",
)
#: Files of compile_cost.py's schema whose ``estimate`` recorded the strategies judged with
#: calls (no scores): 30-item, budget-10 compiles of the default.
COUNT_SOURCES = (
    "tail_once_sfres.json",
    "tail_once_topical_chat.json",
    "plan_heldout_sfhot.json",
    "plan_heldout_topical_chat.json",
)
#: A score model: given a path's generator, the made-up score of each strategy it is asked.
Scorer = Callable[[np.random.Generator], Callable[[Strategy], float]]


def iid(sd: float) -> Scorer:
    """Independent normal scores (the plan's model at ``PLAN_SCORE_SD``)."""

    def make(rng: np.random.Generator) -> Callable[[Strategy], float]:
        return lambda s: sd * float(rng.standard_normal())

    return make


def additive(effect_sd: float, noise_sd: float, baseline: Mapping[str, Any]) -> Scorer:
    """A landscape with structure: each factor value other than the baseline's has an effect
    drawn once per path (normal, ``effect_sd``); a strategy scores the sum of its values'
    effects plus its own normal noise (``noise_sd``)."""

    def make(rng: np.random.Generator) -> Callable[[Strategy], float]:
        effects: dict[tuple[str, str], float] = {}

        def score(s: Strategy) -> float:
            total = 0.0
            for name, value in s.as_dict().items():
                if value == baseline.get(name):
                    continue
                key = (name, json.dumps(value))
                if key not in effects:
                    effects[key] = effect_sd * float(rng.standard_normal())
                total += effects[key]
            return total + noise_sd * float(rng.standard_normal())

        return score

    return make


def _key(values: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    return frozenset((k, json.dumps(v)) for k, v in values.items())


def free_twins(path: Sequence[Mapping[str, Any]]) -> int:
    """Strategies of ``path`` that rate first (``cot`` none or suffix) and whose decoding twin
    (greedy and ``expected``) came before them: a compile reads them from their twin's calls."""
    seen: set[frozenset[tuple[str, str]]] = set()
    n = 0
    for d in path:
        if d.get("decoding") in ("greedy", "expected") and d.get("cot") in ("none", "suffix"):
            other = {**d, "decoding": "expected" if d["decoding"] == "greedy" else "greedy"}
            n += _key(other) in seen
        seen.add(_key(d))
    return n


def statistics(path: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """A path's costly strategies (any :data:`plan_replay.COSTLY` kind), per kind, and its free
    twins (the first strategy, the baseline, included: it is the same for real and simulated)."""
    out = {"costly": sum(any(t(d) for t in COSTLY.values()) for d in path)}
    out.update({k: sum(t(d) for d in path) for k, t in COSTLY.items()})
    out["twins"] = free_twins(path)
    return out


def rebuild(task_name: str, aspect: str, n_items: int, settings: Mapping[str, Any], lm: Any):
    """The compile's run up to its plan (its search at the start)."""
    preset = str(settings["optimizer"])
    if preset.endswith(".toml"):  # a file named from the project's root (e2e_prereg.json)
        preset = str(Path(__file__).resolve().parents[1] / preset)
    items = validation_part(task_name)[:n_items]
    overrides = dict(settings.get("overrides") or {})
    return compile_run(task_name, aspect, items, {**settings, "optimizer": preset}, overrides, lm)


def reproduces(search: Search, trace: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``search`` told the recorded scores asks for the recorded strategies in order."""
    copy = Search.from_state(search.state_dict())
    for row in trace:
        s = copy.ask()
        if s is None or _key(s.as_dict()) != _key(row["strategy"]):
            return False
        score = row.get("score")
        copy.tell(s, float("nan") if score is None else float(score))
    return copy.ask() is None


def simulate(search: Search, n_paths: int, scorer: Scorer, seed: int) -> list[list[dict[str, Any]]]:
    """``n_paths`` paths of ``search`` from its start on ``scorer``'s made-up scores."""
    rng = np.random.default_rng(seed)
    state = search.state_dict()
    paths = []
    for _ in range(n_paths):
        copy = Search.from_state(state)
        score = scorer(rng)
        path = []
        while (s := copy.ask()) is not None:
            path.append(s.as_dict())
            copy.tell(s, score(s))
        paths.append(path)
    return paths


def mid_rank(real: float, simulated: Sequence[float]) -> float:
    """The share of ``simulated`` below ``real`` plus half the share equal to it."""
    sim = np.asarray(simulated, dtype=float)
    return float(np.mean(sim < real) + 0.5 * np.mean(sim == real))


def compare(real: Mapping[str, int], paths: Sequence[Sequence[Mapping[str, Any]]]) -> dict:
    """Per statistic: the real value, the simulated mean and 10th/90th percentiles, and the
    real value's mid-rank among the simulated paths."""
    stats = [statistics(p) for p in paths]
    out = {}
    for k, v in real.items():
        sim = [s[k] for s in stats]
        out[k] = {
            "real": v,
            "simulated_mean": round(float(np.mean(sim)), 3),
            "simulated_p10_p90": [float(np.percentile(sim, 10)), float(np.percentile(sim, 90))],
            "mid_rank": round(mid_rank(v, sim), 3),
        }
    return out


def real_searches(results: Path) -> list[dict[str, Any]]:
    """Every recorded real search: with its trace (scores) or with its counts only."""
    out: list[dict[str, Any]] = []
    for name in TRACE_SOURCES:
        data = json.loads((results / name).read_text())
        settings = dict(data["settings"])
        for p in data["pairs"]:
            out.append(
                {
                    "source": name,
                    "pair": f"{p['task']}:{p['aspect']}",
                    "n_items": int(p["n_valid"]),
                    "settings": settings,
                    "trace": p["search"]["trace"],
                }
            )
    full = json.loads((results / "compile_cost.json").read_text())["full"]
    out.append(
        {
            "source": "compile_cost.json full",
            "pair": full["pair"],
            "n_items": int(full["n_valid"]),
            "settings": {**full["settings"], "overrides": full["run"].get("overrides") or {}},
            "trace": [
                {"strategy": json.loads(r["strategy"]), "score": r["score"]}
                for r in full["run"]["path"]
            ],
        }
    )
    for name in COUNT_SOURCES:
        entry = json.loads((results / name).read_text())["estimate"]
        judged = [json.loads(r["strategy"]) for r in entry["time_model"]["strategies"]]
        out.append(
            {
                "source": name,
                "pair": entry["settings"]["pair"],
                "n_items": int(entry["plan"]["what"].split(" on ")[1].split()[0]),
                "settings": {
                    **entry["settings"],
                    "overrides": entry["settings"].get("new_overrides"),
                },
                "judged_with_calls": judged,
            }
        )
    return out


#: Overrides tried, in order, until the rebuilt search reproduces the recorded trace (the
#: end-to-end compiles before rate-first candidates judged every candidate).
CANDIDATE_OVERRIDES: tuple[dict[str, Any], ...] = (
    {},
    {"candidates": "all"},
    {"candidates": "rate_first"},
)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paths", type=int, default=500, help="simulated paths per search and model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(DEFAULT_OUT))
    args = p.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="judgeopt-plan-paths-") as tmp:
        lm = _lm_maker("local", RECOMMENDED_PARALLEL, Path(tmp))("paths")  # tokenizer only
        for real in real_searches(RESULTS):
            task_name, aspect = real["pair"].split(":", 1)
            trace = real.get("trace")
            run = None
            used: dict[str, Any] | None = None
            for extra in CANDIDATE_OVERRIDES:
                settings = {
                    **real["settings"],
                    "overrides": {**(real["settings"].get("overrides") or {}), **extra},
                }
                candidate = rebuild(task_name, aspect, real["n_items"], settings, lm)
                if trace is None or reproduces(candidate.search, trace):
                    run, used = candidate, settings["overrides"]
                    break
            row: dict[str, Any] = {
                "source": real["source"],
                "pair": real["pair"],
                "n_items": real["n_items"],
                "budget": int(real["settings"]["budget"]),
            }
            row["scored"] = trace is not None
            if run is None:
                row["reproduced"] = False
                rows.append(row)
                print(f"{real['source']} {real['pair']}: the rebuilt search does not reproduce it")
                continue
            row["reproduced"] = True if trace is not None else None  # counts: not checkable
            row["overrides"] = used
            row["candidates"] = run.config.candidates
            if trace is not None:
                real_stats = statistics([r["strategy"] for r in trace])
            else:
                judged = real["judged_with_calls"]
                real_stats = statistics(judged)
                # A twin read from its twin's calls makes none: the strategies without calls.
                real_stats["twins"] = int(real["settings"]["budget"]) - len(judged)
            base = run.student.strategy.as_dict()
            models = {
                "iid 0.12 (the plan's)": iid(PLAN_SCORE_SD),
                "iid 0.05": iid(0.05),
                "iid 0.25": iid(0.25),
                "additive 0.08 + 0.06": additive(0.08, 0.06, base),
            }
            row["models"] = {
                name: compare(real_stats, simulate(run.search, args.paths, m, args.seed))
                for name, m in models.items()
            }
            rows.append(row)
            plan = row["models"]["iid 0.12 (the plan's)"]
            print(
                f"{real['source']} {real['pair']}: costly {plan['costly']['real']} "
                f"(simulated {plan['costly']['simulated_mean']}, mid-rank "
                f"{plan['costly']['mid_rank']}), twins {plan['twins']['real']} (simulated "
                f"{plan['twins']['simulated_mean']}, mid-rank {plan['twins']['mid_rank']})",
                flush=True,
            )
    summary = summarise(rows)
    print(markdown_table(*summary_table(summary)))
    write_json(
        Path(args.out),
        {
            "paths_per_model": args.paths,
            "summary": summary,
            "searches": rows,
            "provenance": provenance(),
        },
    )
    print(f"wrote {args.out}")
    return 0


def summarise(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per model, group (scored traces at budget 20 by candidates; 30-item counts; every
    rate-first search, the default's candidates) and statistic: the mean
    real-minus-simulated difference with its standard error over searches, and the mean
    mid-rank (0.5 when calibrated; its standard error under uniform ranks, 0.289/sqrt(n))."""
    out: dict[str, Any] = {}
    used = [r for r in rows if "models" in r]
    groups = {
        "scored, every candidate, budget 20": [
            r for r in used if r["scored"] and r["candidates"] == "all"
        ],
        "scored, rate-first, budget 20": [
            r for r in used if r["scored"] and r["candidates"] == "rate_first"
        ],
        "counts only, rate-first, budget 10": [r for r in used if not r["scored"]],
        "rate-first, both budgets": [r for r in used if r["candidates"] == "rate_first"],
    }
    for model in used[0]["models"] if used else []:
        for group, members in groups.items():
            if not members:
                continue
            for stat in ("costly", "twins"):
                cells = [r["models"][model][stat] for r in members]
                diff = np.array([c["real"] - c["simulated_mean"] for c in cells])
                ranks = np.array([c["mid_rank"] for c in cells])
                n = len(cells)
                out.setdefault(model, {}).setdefault(group, {})[stat] = {
                    "n": n,
                    "real_minus_simulated": round(float(diff.mean()), 3),
                    "se": round(float(diff.std(ddof=1) / np.sqrt(n)), 3) if n > 1 else None,
                    "mean_mid_rank": round(float(ranks.mean()), 3),
                    "mid_rank_se_if_calibrated": round(0.289 / np.sqrt(n), 3),
                }
    return out


def summary_table(summary: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    header = ["score model", "searches", "statistic", "n", "real - simulated (se)", "mean mid-rank"]
    rows = []
    for model, groups in summary.items():
        for group, stats in groups.items():
            for stat, c in stats.items():
                se = "" if c["se"] is None else f" ({c['se']:.2f})"
                rows.append(
                    [
                        model,
                        group,
                        stat,
                        c["n"],
                        f"{c['real_minus_simulated']:+.2f}{se}",
                        f"{c['mean_mid_rank']:.2f} (+-{c['mid_rank_se_if_calibrated']:.2f})",
                    ]
                )
    return header, rows


if __name__ == "__main__":
    raise SystemExit(main())
