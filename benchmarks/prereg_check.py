"""The pre-registered default's verdict: its criteria on the results so far (no LLM call).

``benchmarks/default_prereg.json`` names a candidate default, the pairs it is tested on, the
commands that test it and five criteria (S1-S3 on the judgement bank's two unfinished pairs,
F1-F2 on three fresh pairs), written before those pairs' items were judged. This reads what
the named commands wrote (stage 1: the ``bank_fixed.py --pairs`` replays in
``benchmarks/results/default_prereg.json``; stage 2: ``e2e.py``'s
``benchmarks/results/e2e_prereg.json``), applies the criteria as registered
(:func:`judgeopt_lab.prereg_verdict`) and prints each one's status: met, not met, or pending
while its results are not all there. The decision: adopt the candidate when all five are
met, keep the shipped default as soon as one is not, else open. Beside the criteria, for each
fresh pair tested so far, what no criterion reads (:func:`judgeopt_lab.stage_2_beside`): the
shipped judge's gain on the test items the baseline rated, and its calls and seconds per item.

Writes ``benchmarks/results/default_prereg_verdict.json``::

    {"plan", "criteria": {NAME: {"status", "value", "detail"}}, "decision",
     "beside": {PAIR: {"shipped", "gain", "gain_ci", "rated_by_baseline", "calls_per_item",
     "seconds_per_item"}}, "inputs", "provenance"}

Usage:
    python benchmarks/prereg_check.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from judgeopt_lab import markdown_table, prereg_verdict, stage_2_beside, write_json

ROOT = Path(__file__).resolve().parent
PLAN = ROOT / "default_prereg.json"
BANK = ROOT / "results" / "default_prereg.json"
E2E = ROOT / "results" / "e2e_prereg.json"
OUT = ROOT / "results" / "default_prereg_verdict.json"


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _gain(gain: float | None, ci: list[float] | None) -> str:
    if gain is None:
        return "-"
    return f"{gain:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")


def _beside_rows(beside: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows = []
    for pair, b in beside.items():
        rated = b["rated_by_baseline"]
        rows.append(
            [
                pair,
                str(b["shipped"]),
                _gain(b["gain"], b["gain_ci"]),
                "-"
                if rated is None
                else f"{_gain(rated['gain'], rated['gain_ci'])} on {rated['n_items']} of "
                f"{rated['n_test']}",
                "-" if b["calls_per_item"] is None else f"{b['calls_per_item']:.1f}",
                "-" if b["seconds_per_item"] is None else f"{b['seconds_per_item']:.1f}",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", default=str(PLAN), help="the pre-registration")
    ap.add_argument("--bank", default=str(BANK), help="stage 1's bank_fixed.py results")
    ap.add_argument("--e2e", default=str(E2E), help="stage 2's e2e.py results")
    ap.add_argument("--out", default=str(OUT), help="where the verdict goes")
    args = ap.parse_args(argv)
    plan_path = Path(args.plan)
    if not plan_path.is_file():
        ap.error(f"--plan {args.plan!r}: no such file")
    plan = _read(plan_path)
    e2e = _read(Path(args.e2e))
    verdict = prereg_verdict(plan, _read(Path(args.bank)), e2e)
    beside = stage_2_beside(plan, e2e)
    rows = [
        [name, c["status"], c["detail"], json.dumps(c["value"])]
        for name, c in verdict["criteria"].items()
    ]
    print(markdown_table(["criterion", "status", "what", "value"], rows))
    print(f"decision: {verdict['decision']}")
    if beside:
        print("\nbeside stage 2's criteria (no criterion reads these):")
        head = ["pair", "shipped", "gain (headline)", "gain where the baseline rated"]
        print(markdown_table([*head, "calls/item", "s/item"], _beside_rows(beside)))
    payload = {
        "plan": plan_path.name,
        **verdict,
        "beside": beside,
        "inputs": {"bank": str(args.bank), "e2e": str(args.e2e)},
    }
    print(f"wrote {write_json(args.out, payload)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
