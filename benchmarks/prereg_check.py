"""The pre-registered default's verdict: its criteria on the results so far (no LLM call).

``benchmarks/default_prereg.json`` names a candidate default, the pairs it is tested on, the
commands that test it and five criteria (S1-S3 on the judgement bank's two unfinished pairs,
F1-F2 on three fresh pairs), written before those pairs' items were judged. This reads what
the named commands wrote (stage 1: the ``bank_fixed.py --pairs`` replays in
``benchmarks/results/default_prereg.json``; stage 2: ``e2e.py``'s
``benchmarks/results/e2e_prereg.json``), applies the criteria as registered
(:func:`judgeopt_lab.prereg_verdict`) and prints each one's status: met, not met, or pending
while its results are not all there. The decision: adopt the candidate when all five are
met, keep the shipped default as soon as one is not, else open.

Writes ``benchmarks/results/default_prereg_verdict.json``::

    {"plan", "criteria": {NAME: {"status", "value", "detail"}}, "decision", "inputs",
     "provenance"}

Usage:
    python benchmarks/prereg_check.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from judgeopt_lab import markdown_table, prereg_verdict, write_json

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
    verdict = prereg_verdict(plan, _read(Path(args.bank)), _read(Path(args.e2e)))
    rows = [
        [name, c["status"], c["detail"], json.dumps(c["value"])]
        for name, c in verdict["criteria"].items()
    ]
    print(markdown_table(["criterion", "status", "what", "value"], rows))
    print(f"decision: {verdict['decision']}")
    payload = {
        "plan": plan_path.name,
        **verdict,
        "inputs": {"bank": str(args.bank), "e2e": str(args.e2e)},
    }
    print(f"wrote {write_json(args.out, payload)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
