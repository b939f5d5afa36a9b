"""Would stopping a looping explanation save time without changing a rating? (no LLM call)

A judge that explains before it rates sometimes loops at temperature 0: it writes the same
sentence again and again until the output cap (256 tokens), and such an answer has no rating.
A stop in the decoding loop that ends an answer once it repeats itself would save those
tokens; it changes a rating only where the answer would have left the loop and rated after
all. At temperature 0 an answer stopped at token ``t`` is the first ``t`` tokens of the
stored one, so the judgement bank's stored answers (and the e2e runs' answers on the pairs the
bank does not hold) show what every detector would do:

* ``span W R``: stop when a span of ``W`` tokens has been written ``R`` times anywhere in the
  answer (catches loops early, but also lists whose items share a phrase);
* ``tandem K L``: stop when the answer ends in one block of at most 64 tokens written ``K``
  times in a row, ``K`` blocks at least ``L`` tokens long (only a verbatim loop).

Per detector and pair: the answers it stops, how many of those had a rating and which of them
lose or change it (parsed as the judge parses), and the share of the explanation-first
completion tokens it saves. A detector is worth building only if it changes no rating on any
pair and saves a share of tokens that matters.

Writes ``benchmarks/results/loop_stop.json``::

    {"detectors": {NAME: {"pairs": {PAIR: {"answers", "tokens", "stopped", "stopped_at_cap",
     "stopped_rated", "ratings_changed", "tokens_saved", "tokens_saved_share"}},
     "total": {...}}},
     "cap_tokens_share": {PAIR: share of tokens in answers that reached the cap}, "settings"}

Usage:
    python benchmarks/loop_stop.py
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from explanation_cap import (
    E2E_DIR,
    RECORDED_CAP,
    Cutter,
    e2e_answers,
    explained_lines,
    rating,
    task_aspect,
)
from judgeopt.judge import load_task
from judgeopt.lm import LOOP_MAX_PERIOD, LOOP_TIMES, LOOP_TOKENS, ends_in_loop
from judgeopt_lab import BankPair, load_bank, markdown_table, write_json

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "results" / "loop_stop.json"
#: An answer this long (re-tokenised from its stored text, which can be a few tokens shorter
#: than the tokens written) ran to the cap.
AT_CAP = RECORDED_CAP - 6
#: The longest block the tandem detector looks for (the decoding loop's).
MAX_PERIOD = LOOP_MAX_PERIOD
Detector = Callable[[Sequence[int]], int | None]
#: What :func:`measure` counts per detector and pair (and sums over the pairs).
COUNTS = (
    "answers",
    "tokens",
    "stopped",
    "stopped_at_cap",
    "stopped_rated",
    "ratings_changed",
    "tokens_saved",
)


def span_detector(width: int, times: int) -> Detector:
    """The first token count at which some ``width``-token span has been written ``times``
    times (``None``: never)."""

    def stop(tokens: Sequence[int]) -> int | None:
        seen: Counter[tuple[int, ...]] = Counter()
        for t in range(width, len(tokens) + 1):
            span = tuple(tokens[t - width : t])
            seen[span] += 1
            if seen[span] >= times:
                return t
        return None

    return stop


def tandem_detector(times: int, least: int) -> Detector:
    """The first token count at which the answer so far ends in one block (at most
    :data:`MAX_PERIOD` tokens) written ``times`` times in a row, ``times`` blocks at least
    ``least`` tokens long (:func:`judgeopt.lm.ends_in_loop`, the decoding loop's own test)."""

    def stop(tokens: Sequence[int]) -> int | None:
        for t in range(least, len(tokens) + 1):
            if ends_in_loop(tokens[:t], times, least, MAX_PERIOD):
                return t
        return None

    return stop


DETECTORS: dict[str, Detector] = {
    "span 8 x3": span_detector(8, 3),
    "span 16 x2": span_detector(16, 2),
    "span 16 x3": span_detector(16, 3),
    "span 32 x2": span_detector(32, 2),
    f"tandem x{LOOP_TIMES}, {LOOP_TOKENS}+ (the decoding loop's)": tandem_detector(
        LOOP_TIMES, LOOP_TOKENS
    ),
    "tandem x3, 48+": tandem_detector(3, 48),
    "tandem x2, 64+": tandem_detector(2, 64),
}


def answers(bank: Mapping[str, BankPair]) -> dict[str, list[tuple[str, tuple[int, int]]]]:
    """Per pair, every stored explanation-first answer with its rating bounds: the bank's
    judgements (one per strategy and item), then the e2e runs' answers on the pairs the bank
    does not hold."""
    out: dict[str, list[tuple[str, tuple[int, int]]]] = {}
    for name, pair in sorted(bank.items()):
        task = load_task(pair.task)
        rows = []
        for line in explained_lines(ROOT / "runs" / "bank", name).values():
            if line.get("error") is None and line.get("raw"):
                bounds = task.rating_bounds(pair.aspect, int(line["strategy"]["scale"]))
                rows.append((str(line["raw"]), bounds))
        out[name] = rows
    if E2E_DIR.is_dir():
        for d in sorted(E2E_DIR.iterdir()):
            if not d.is_dir() or d.name in out:
                continue
            task_name, aspect = task_aspect(d.name)
            task = load_task(task_name)
            rows = [(raw, task.rating_bounds(aspect, int(s["scale"]))) for s, raw in e2e_answers(d)]
            if rows:
                out[f"{d.name} (e2e)"] = rows
    return out


def measure(
    pairs: Mapping[str, Sequence[tuple[str, tuple[int, int]]]],
    cutter: Any,
    detectors: Mapping[str, Detector] = DETECTORS,
) -> dict[str, Any]:
    """Every detector on every pair's answers (``cutter``: ``tokens(text)`` and
    ``text(tokens)``, :class:`explanation_cap.Cutter`)."""
    result: dict[str, Any] = {"detectors": {}, "cap_tokens_share": {}}
    # Each answer tokenised and parsed once, for every detector.
    tokenised = {
        name: [(cutter.tokens(raw), rating(raw, bounds), bounds) for raw, bounds in rows]
        for name, rows in pairs.items()
    }
    for name, rows in tokenised.items():
        total = sum(len(t) for t, _, _ in rows)
        at_cap = sum(len(t) for t, _, _ in rows if len(t) >= AT_CAP)
        result["cap_tokens_share"][name] = at_cap / total if total else None
    for label, detect in detectors.items():
        per: dict[str, Any] = {}
        for name, rows in tokenised.items():
            c: Counter[str] = Counter()
            for tokens, full, bounds in rows:
                c["answers"] += 1
                c["tokens"] += len(tokens)
                t = detect(tokens)
                if t is None or t >= len(tokens):
                    continue
                c["stopped"] += 1
                c["stopped_at_cap"] += len(tokens) >= AT_CAP
                c["tokens_saved"] += len(tokens) - t
                if full is None:
                    continue
                c["stopped_rated"] += 1
                c["ratings_changed"] += rating(cutter.text(tokens[:t]), bounds) != full
            per[name] = _row(c)
        total: Counter[str] = Counter()
        for v in per.values():
            total.update({k: v[k] for k in COUNTS})
        result["detectors"][label] = {"pairs": per, "total": _row(total)}
        print(f"  {label}: done", file=sys.stderr)
    return result


def _row(c: Counter[str]) -> dict[str, Any]:
    row: dict[str, Any] = {k: int(c[k]) for k in COUNTS}
    row["tokens_saved_share"] = c["tokens_saved"] / c["tokens"] if c["tokens"] else None
    return row


def table(result: dict[str, Any]) -> str:
    names = list(next(iter(result["detectors"].values()))["pairs"])
    rows = []
    for label, v in result["detectors"].items():
        t = v["total"]
        rows.append(
            [
                label,
                t["stopped"],
                t["stopped_rated"],
                t["ratings_changed"],
                f"{100 * t['tokens_saved_share']:.1f} %",
                " ".join(f"{100 * v['pairs'][n]['tokens_saved_share']:.1f}" for n in names),
            ]
        )
    head = ["detector", "stopped", "of them rated", "ratings changed", "tokens saved"]
    return (
        markdown_table([*head, "saved per pair, % (" + ", ".join(names) + ")"], rows)
        + "\n\nshare of tokens in answers that reached the cap: "
        + ", ".join(f"{n} {100 * s:.1f} %" for n, s in result["cap_tokens_share"].items())
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    bank = load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank", complete_only=True)
    cutter = Cutter()
    result = measure(answers(bank), cutter)
    result["settings"] = {
        "recorded_cap": RECORDED_CAP,
        "max_period": MAX_PERIOD,
        "tokenizer": cutter.model,
        "bank_pairs": sorted(bank),
    }
    print(table(result))
    write_json(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
