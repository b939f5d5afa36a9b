"""The output cap of judges that explain first, chosen on the judgement bank (no LLM call).

A judge that explains before it rates (``cot`` ``prefix``) writes its explanation, then its
rating, within an output cap (256 tokens by default). At temperature 0 its answer under a
smaller cap ``C`` is the first ``C`` tokens of its answer under the larger one, so the bank's
stored answers (written under 256) show what every smaller cap would have rated: each answer
is cut at ``C`` tokens of the embedded model's tokenizer and parsed again, exactly as the
judge parses it. An answer whose rating lies beyond ``C`` loses it (unparsed); an answer
that loops until the cap had none to lose.

For each cap of ``--caps`` this script reports, per pair:

* the ratings kept: the share of the explanation-first judgements whose rating is the same
  (``both unparsed`` counts as the same), those left without one, those changed to another;
* the completion tokens the cap saves (the share of those judgements' written tokens beyond
  ``C``);
* the default rule replayed on the bank with every explanation-first column cut at ``C``
  (:func:`judgeopt_lab.replay_bank`, the same splits, constants chosen leave-one-pair-out,
  ``--n-valid`` labelled items): its mean test gain over the (cut) baseline, its per-pair
  gains and the paired difference from the uncut replay, and the test score of what it
  ships (the baseline's score plus the gain), against the uncut one's.

The choice (``--choose``): the smallest cap whose replayed default gain is within one
standard error of the uncut default's (issue 57's bound for a saving that changes what is
judged) *and* whose shipped judge's mean test score is within that standard error too (the
baseline is cut as well: a cap that hurts the baseline would otherwise look like a gain), and
which keeps at least ``--min-agreement`` of the ratings on every bank pair (the worst pair
decides). The pairs the bank does not hold (``benchmarks/runs/e2e_runs``'s other pairs,
judged by the e2e benchmark's searches) are then the held-out check: the chosen cap's
agreement there, reported as it falls.

An expected-decoding column cut at ``C`` keeps its recorded rating where the cut answer
parses to the same rating; where the cut answer has none, it is unparsed; where it parses to
another rating (an earlier ``[[n]]`` in the explanation), that rating stands in for the
distribution the bank did not record there (counted as ``approximated``).

Writes ``--json`` (default ``benchmarks/results/explanation_cap.json``)::

    {"caps": {C: {"agreement": {PAIR: {...}}, "tokens_saved": {...}, "replay": {...}}},
     "chosen": C | null, "held_out": {PAIR: {...}}, "reference": {...}, "settings", ...}

Usage:
    python benchmarks/explanation_cap.py [--caps 96,128,160,192] [--n-valid 100]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.judge import load_task, parse_rating, rates_first
from judgeopt.lm import DEFAULT_LOCAL_MODEL, ensure_local_model
from judgeopt_lab import (
    RULES,
    BankColumn,
    BankPair,
    bank_lines,
    keep_judgement,
    load_bank,
    markdown_table,
    replay_bank,
    strategy_json,
    write_json,
)

ROOT = Path(__file__).resolve().parent
#: The cap the bank's explanation-first answers were written under.
RECORDED_CAP = 256
DEFAULT_CAPS = (96, 128, 160, 192)
#: Pairs of benchmarks/runs/e2e_runs the bank does not hold: the held-out check.
E2E_DIR = ROOT / "runs" / "e2e_runs"


# Cutting answers ---------------------------------------------------------------------------
class Cutter:
    """Cuts an answer at ``cap`` tokens of a GGUF's tokenizer (loaded vocabulary only)."""

    def __init__(self, model: str = DEFAULT_LOCAL_MODEL) -> None:
        from llama_cpp import Llama

        path = ensure_local_model(model)
        self.model = model
        self._llama = Llama(model_path=str(path), vocab_only=True, verbose=False)
        self._tokens = lru_cache(maxsize=None)(self._tokenize)

    def _tokenize(self, text: str) -> tuple[int, ...]:
        return tuple(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def tokens(self, text: str) -> tuple[int, ...]:
        """The answer's tokens."""
        return self._tokens(text)

    def text(self, tokens: Sequence[int]) -> str:
        """The text of ``tokens`` (a prefix of an answer's)."""
        return self._llama.detokenize(list(tokens)).decode("utf-8", errors="ignore")

    def length(self, text: str) -> int:
        """The answer's length in tokens."""
        return len(self._tokens(text))

    def cut(self, text: str, cap: int) -> str:
        """The first ``cap`` tokens of ``text`` (all of it when shorter)."""
        tokens = self._tokens(text)
        if len(tokens) <= cap:
            return text
        return self.text(tokens[:cap])


def capped(strategy: Mapping[str, Any]) -> bool:
    """Whether the cap applies to a strategy: it explains before it rates and has the
    explanation cap (``cot`` ``prefix`` without a ``dialectic`` reference, whose cap is
    larger: it writes a reference too)."""
    return not rates_first(strategy) and strategy.get("reference") != "dialectic"


def rating(text: str | None, bounds: tuple[int, int]) -> float | None:
    """The rating the judge parses from ``text`` (``None``: unparsed)."""
    if text is None:
        return None
    lo, hi = bounds
    return parse_rating(text, scale=hi, rating_min=lo).score


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b)


class Tally:
    """What a cap does to a set of answers."""

    def __init__(self) -> None:
        self.n = self.same = self.lost = self.changed = 0
        self.tokens = self.saved = 0

    def add(self, full: float | None, cut: float | None, length: int, cap: int) -> None:
        self.n += 1
        self.tokens += length
        self.saved += max(0, length - cap)
        if _same(full, cut):
            self.same += 1
        elif cut is None:
            self.lost += 1
        else:
            self.changed += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "judgements": self.n,
            "same": self.same,
            "lost": self.lost,
            "changed": self.changed,
            "agreement": self.same / self.n if self.n else None,
            "tokens": self.tokens,
            "tokens_saved": self.saved,
            "tokens_saved_share": self.saved / self.tokens if self.tokens else None,
        }


# The bank, cut -----------------------------------------------------------------------------
def explained_lines(directory: Path, pair: str) -> dict[str, dict[str, Any]]:
    """The pair's explanation-first judgements the bank keeps, by (strategy JSON, item id)
    joined with a tab."""
    held: dict[tuple[str, str], dict[str, Any]] = {}
    for line in bank_lines(directory, pair):
        if line.get("kind") == "judgement" and capped(line["strategy"]):
            keep_judgement(held, line)
    return {f"{s}\t{i}": line for (s, i), line in held.items()}


def cut_pair(
    pair: BankPair, lines: Mapping[str, Mapping[str, Any]], cutter: Cutter, cap: int
) -> tuple[BankPair, Tally, int]:
    """``pair`` with every explanation-first column cut at ``cap``; the tally over its
    judgements, and how many expected ratings were approximated."""
    task = load_task(pair.task)
    columns, tally, approximated = [], Tally(), 0
    for column in pair.columns:
        strategy = dict(column.strategy)
        decoding = strategy.pop("decoding", "greedy")
        if not capped(strategy):
            columns.append(column)
            continue
        bounds = task.rating_bounds(pair.aspect, int(strategy["scale"]))
        base = strategy_json(strategy)
        preds = column.predictions.copy()
        for k, rid in enumerate(pair.ids):
            line = lines.get(f"{base}\t{rid}")
            if line is None or line.get("error") is not None or line.get("raw") is None:
                continue
            raw = str(line["raw"])
            full, cut = rating(raw, bounds), rating(cutter.cut(raw, cap), bounds)
            if decoding == "greedy":
                tally.add(full, cut, cutter.length(raw), cap)
            if _same(full, cut):
                continue
            if cut is None:
                preds[k] = np.nan
            else:
                preds[k] = cut
                approximated += decoding != "greedy"
        columns.append(BankColumn(column.key, column.strategy, column.roles, preds))
    return replace(pair, columns=tuple(columns)), tally, approximated


# The held-out pairs ------------------------------------------------------------------------
def e2e_answers(pair_dir: Path) -> Iterable[tuple[dict[str, Any], str]]:
    """(strategy, raw answer) of every explanation-first judgement an e2e run stored."""
    items = pair_dir / "ckpt" / "items.jsonl"
    if not items.is_file():
        return
    with items.open(encoding="utf-8") as fh:
        for text in fh:
            if not text.strip():
                continue
            row = json.loads(text)
            strategy = json.loads(row["strategy"])
            item = row["item"]
            if capped(strategy) and item.get("error") is None and item.get("raw") is not None:
                yield strategy, str(item["raw"])


def held_out(
    pairs: Sequence[str], cutter: Cutter, caps: Sequence[int]
) -> dict[str, dict[str, Any]]:
    """Per e2e pair the bank does not hold, per cap, what the cap does to its answers."""
    out: dict[str, dict[str, Any]] = {}
    for name in pairs:
        task_name, aspect = task_aspect(name)
        task = load_task(task_name)
        tallies = {c: Tally() for c in caps}
        for strategy, raw in e2e_answers(E2E_DIR / name):
            bounds = task.rating_bounds(aspect, int(strategy["scale"]))
            full, length = rating(raw, bounds), cutter.length(raw)
            for c in caps:
                tallies[c].add(full, rating(cutter.cut(raw, c), bounds), length, c)
        out[name] = {str(c): t.as_dict() for c, t in tallies.items()}
    return out


def task_aspect(name: str) -> tuple[str, str]:
    """``(task, aspect)`` of an e2e run's folder name (``hanna_coherence``)."""
    task, _, aspect = name.rpartition("_")
    return task, aspect


# The replay --------------------------------------------------------------------------------
def replay(bank: Mapping[str, BankPair], rule: str, n_valid: int, splits: int, seed: int) -> Any:
    """The default rule's row at ``n_valid`` (:func:`judgeopt_lab.replay_bank`)."""
    payload = replay_bank(bank, {rule: RULES[rule]}, n_valids=[n_valid], n_splits=splits, seed=seed)
    return payload["rules"][rule]["n_valid"][str(n_valid)]


def compare(row: Mapping[str, Any], ref: Mapping[str, Any]) -> dict[str, Any]:
    """A cut replay's row against the uncut one: the paired differences over pairs of the
    gain and of the shipped judge's test score (baseline + gain)."""
    pairs = sorted(ref["per_pair"])

    def shipped(r: Mapping[str, Any], p: str) -> float:
        q = r["per_pair"][p]
        return float(q["baseline"] + q["mean_gain"])

    gain_d = np.array(
        [row["per_pair"][p]["mean_gain"] - ref["per_pair"][p]["mean_gain"] for p in pairs]
    )
    ship_d = np.array([shipped(row, p) - shipped(ref, p) for p in pairs])
    base_d = np.array(
        [row["per_pair"][p]["baseline"] - ref["per_pair"][p]["baseline"] for p in pairs]
    )
    se = float(ref["se"])

    def stats(d: np.ndarray) -> dict[str, Any]:
        return {
            "mean": float(d.mean()),
            "se": float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else None,
            "per_pair": dict(zip(pairs, d.tolist(), strict=True)),
        }

    return {
        "mean_gain": row["mean_gain"],
        "se": row["se"],
        "worse_share": row["worse_share"],
        "max_pair_worse_share": row["max_pair_worse_share"],
        "gain_difference": stats(gain_d),
        "shipped_difference": stats(ship_d),
        "baseline_difference": stats(base_d),
        "gain_within_one_se": row["mean_gain"] >= ref["mean_gain"] - se,
        "shipped_within_one_se": float(ship_d.mean()) >= -se,
        "per_pair": {
            p: {
                "gain": row["per_pair"][p]["mean_gain"],
                "baseline": row["per_pair"][p]["baseline"],
                "worse_share": row["per_pair"][p]["worse_share"],
            }
            for p in pairs
        },
    }


def choose(caps: Mapping[int, Mapping[str, Any]], min_agreement: float) -> int | None:
    """The smallest cap that meets the criterion (module docstring), else ``None``."""
    for cap in sorted(caps):
        c = caps[cap]
        worst = min(a["agreement"] for a in c["agreement"].values() if a["agreement"] is not None)
        r = c["replay"]
        if r["gain_within_one_se"] and r["shipped_within_one_se"] and worst >= min_agreement:
            return cap
    return None


def table(payload: Mapping[str, Any]) -> str:
    rows = []
    for cap, c in payload["caps"].items():
        a = c["agreement"]
        worst = min(v["agreement"] for v in a.values())
        n = sum(v["judgements"] for v in a.values())
        same = sum(v["same"] for v in a.values())
        tok = sum(v["tokens"] for v in a.values())
        saved = sum(v["tokens_saved"] for v in a.values())
        r = c["replay"]
        g, s = r["gain_difference"], r["shipped_difference"]
        rows.append(
            [
                cap,
                f"{same}/{n}",
                f"{worst:.3f}",
                f"{saved / tok:.1%}",
                f"{r['mean_gain']:+.3f} ({r['se']:.3f})",
                f"{g['mean']:+.4f} ({g['se']:.4f})",
                f"{s['mean']:+.4f} ({s['se']:.4f})",
                f"{r['max_pair_worse_share']:.1%}",
            ]
        )
    ref = payload["reference"]
    head = [
        "cap",
        "same rating",
        "worst pair",
        "tokens saved",
        "default gain (se)",
        "gain diff (se)",
        "shipped diff (se)",
        "worst pair worse",
    ]
    lines = [
        f"reference (cap {RECORDED_CAP}): {payload['rule']} gain {ref['mean_gain']:+.3f} "
        f"(se {ref['se']:.3f}), worst pair worse {ref['max_pair_worse_share']:.1%}",
        markdown_table(head, rows),
        f"chosen: {payload['chosen']}",
    ]
    if payload.get("held_out") and payload["chosen"] is not None:
        key = str(payload["chosen"])
        held = [
            [p, f"{v[key]['same']}/{v[key]['judgements']}", f"{v[key]['agreement']:.3f}"]
            for p, v in payload["held_out"].items()
            if v[key]["judgements"]
        ]
        lines.append(markdown_table(["held-out pair", "same rating", "agreement"], held))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--caps", default=",".join(map(str, DEFAULT_CAPS)))
    p.add_argument("--n-valid", type=int, default=100)
    p.add_argument("--splits", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rule", default=None, help="default: bank_rules.json's default")
    p.add_argument("--min-agreement", type=float, default=0.98)
    p.add_argument("--json", default=str(ROOT / "results" / "explanation_cap.json"))
    args = p.parse_args(argv)
    caps = sorted({int(c) for c in args.caps.split(",")})
    if not caps or caps[0] < 1 or caps[-1] >= RECORDED_CAP:
        p.error(f"--caps: token counts from 1 to {RECORDED_CAP - 1}; got {args.caps!r}")
    rule = args.rule or json.loads((ROOT / "results" / "bank_rules.json").read_text())["default"]
    t0 = time.perf_counter()
    bank_dir = ROOT / "runs" / "bank"
    bank = load_bank(ROOT / "bank_plan.json", bank_dir, complete_only=True)
    cutter = Cutter()
    lines = {name: explained_lines(bank_dir, name) for name in bank}
    print(f"replaying {rule} uncut on {len(bank)} pairs", file=sys.stderr)
    ref = replay(bank, rule, args.n_valid, args.splits, args.seed)
    out_caps: dict[int, dict[str, Any]] = {}
    for cap in caps:
        print(f"cap {cap}: cutting and replaying", file=sys.stderr)
        cut, tallies, approximated = {}, {}, 0
        for name, pair in bank.items():
            cut[name], tallies[name], a = cut_pair(pair, lines[name], cutter, cap)
            approximated += a
        out_caps[cap] = {
            "agreement": {name: t.as_dict() for name, t in tallies.items()},
            "expected_approximated": approximated,
            "replay": compare(replay(cut, rule, args.n_valid, args.splits, args.seed), ref),
        }
    chosen = choose(out_caps, args.min_agreement)
    others = (
        sorted(d.name for d in E2E_DIR.iterdir() if d.is_dir() and d.name not in bank)
        if E2E_DIR.is_dir()
        else []
    )
    payload = {
        "rule": rule,
        "reference": {
            k: ref[k] for k in ("mean_gain", "se", "worse_share", "max_pair_worse_share")
        },
        "caps": {str(c): v for c, v in out_caps.items()},
        "chosen": chosen,
        "criterion": (
            "the smallest cap whose replayed default gain >= the uncut gain - its se, whose "
            "shipped judge's mean test score >= the uncut one's - that se, and which keeps "
            f">= {args.min_agreement} of the ratings on every bank pair"
        ),
        "held_out": held_out(others, cutter, caps),
        "settings": {
            "caps": caps,
            "recorded_cap": RECORDED_CAP,
            "n_valid": args.n_valid,
            "splits": args.splits,
            "seed": args.seed,
            "min_agreement": args.min_agreement,
            "tokenizer": cutter.model,
            "pairs": sorted(bank),
        },
        "seconds": round(time.perf_counter() - t0, 1),
    }
    write_json(Path(args.json), payload, indent=1)
    print(table(payload))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
