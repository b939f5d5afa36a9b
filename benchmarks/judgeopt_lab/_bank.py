"""A judgement bank: strategies x items judged once, replayed many times without a call.

A bank is to the judge what a :class:`~judgeopt.bench.Surface` is to the search. It is
recorded by ``benchmarks/bank.py`` from a plan (``benchmarks/bank_plan.json``, committed
before any item was judged) into one file per task-aspect pair, ``<pair>.jsonl.gz`` (packed)
and ``<pair>.jsonl`` (lines recorded since the last pack). Each line is a JSON object with a
``kind``:

* ``header``: ``plan_sha``, ``pair``;
* ``judgement``: ``strategy`` (without its decoding), ``id``, ``greedy`` and ``expected``
  ratings (``None`` when unparsed or not recorded), ``probs``, ``parse_error``, ``error``,
  ``raw``, ``seconds`` and ``source`` (``bank`` for a bank call, ``e2e:<file>`` for a stored
  judgement of ``benchmarks/e2e.py`` imported without a call);
* ``chunk``: the calls, tokens and seconds of one batch of bank calls;
* ``verify``: a stored judgement judged again, as a check of the import.

:func:`load_bank` turns a pair's file and its plan into a :class:`BankPair`: the human
scores, groups and one prediction vector per planned *column* (a strategy with its decoding).
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BANK_FORMAT",
    "BankColumn",
    "BankPair",
    "bank_lines",
    "judgement_covers",
    "keep_judgement",
    "load_bank",
    "pack_bank",
    "rates_first",
    "strategy_json",
]

BANK_FORMAT = 1


def bank_lines(directory: str | os.PathLike[str], pair: str) -> Iterator[dict[str, Any]]:
    """Every line of ``pair``'s bank in ``directory``: the packed ones, then the recent ones.

    A line cut by an interruption (the last one of the plain file) is skipped.
    """
    d = Path(directory)
    packed, plain = d / f"{pair}.jsonl.gz", d / f"{pair}.jsonl"
    if packed.is_file():
        with gzip.open(packed, "rt", encoding="utf-8") as fh:
            for text in fh:
                yield json.loads(text)
    if plain.is_file():
        for text in plain.read_text(encoding="utf-8").splitlines():
            try:
                yield json.loads(text)
            except ValueError:
                continue


def pack_bank(directory: str | os.PathLike[str], pair: str) -> Path | None:
    """Move ``pair``'s recent lines into its packed file (rewritten atomically); the plain
    file is removed. Returns the packed path (``None`` when there is nothing to pack)."""
    d = Path(directory)
    plain, packed = d / f"{pair}.jsonl", d / f"{pair}.jsonl.gz"
    if not plain.is_file():
        return packed if packed.is_file() else None
    lines = list(bank_lines(d, pair))
    tmp = packed.with_suffix(".gz.tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as fh:
        for line in lines:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    os.replace(tmp, packed)
    plain.unlink()
    return packed


@dataclass(frozen=True)
class BankColumn:
    """One planned strategy (with its decoding) of a pair: its predictions on the pool.

    Attributes:
        key: The plan's column key (``C01`` is the baseline).
        strategy: The strategy's plain-data form, decoding included.
        roles: Why the plan holds it (``baseline``, ``search #n``, ``finalist``...).
        predictions: One rating per pool item; ``nan`` where unparsed or failed.
        judged: Per pool item, whether the bank holds this column's judgement of it (an
            unparsed answer is judged, a rating not yet recorded is not); ``None``: all.
    """

    key: str
    strategy: Mapping[str, Any]
    roles: tuple[str, ...]
    predictions: np.ndarray
    judged: np.ndarray | None = None

    @property
    def unparsed(self) -> int:
        """Pool items without a rating."""
        return int(np.isnan(self.predictions).sum())


@dataclass(frozen=True)
class BankPair:
    """One task-aspect pair of a bank: the pool's humans and groups, and its columns.

    ``complete`` is False when some column lacks a judgement of some pool item (a bank
    still being recorded); such a column's missing items are ``nan`` like unparsed ones,
    and :attr:`missing` counts them. ``twins_missing``: the rating-first columns whose twin
    (the other decoding of the same calls) the bank cannot give (``load_bank(twins=True)``).
    """

    name: str
    task: str
    aspect: str
    level: str
    ids: tuple[str, ...]
    human: np.ndarray
    groups: np.ndarray
    columns: tuple[BankColumn, ...]
    missing: int = 0
    seconds: float = 0.0
    calls: int = 0
    tokens: Mapping[str, int] = field(default_factory=dict)
    twins_missing: int = 0

    @property
    def complete(self) -> bool:
        """Every column holds a judgement of every pool item."""
        return self.missing == 0

    @property
    def baseline(self) -> BankColumn:
        """The MT-Bench baseline's column."""
        for c in self.columns:
            if "baseline" in c.roles:
                return c
        raise KeyError(f"{self.name}: the bank has no baseline column")

    def matrix(self) -> np.ndarray:
        """The predictions as a (columns x items) array (``nan``: no rating)."""
        return np.vstack([c.predictions for c in self.columns])

    def judged_groups(self) -> BankPair:
        """The pair restricted to the groups whose every item is judged by every column
        (``self`` when the pair is complete): the usable part of a bank still being
        recorded. The recorder fills a pair group by group, and the pool's groups were
        drawn without looking at labels, so the part is an unbiased sub-pool."""
        if self.complete:
            return self
        n = len(self.ids)
        judged = np.ones(n, dtype=bool)
        for c in self.columns:
            if c.judged is not None:
                judged &= c.judged
        whole = {g for g in set(self.groups.tolist()) if judged[self.groups == g].all()}
        keep = np.array([g in whole for g in self.groups.tolist()], dtype=bool)
        return BankPair(
            name=self.name,
            task=self.task,
            aspect=self.aspect,
            level=self.level,
            ids=tuple(i for i, k in zip(self.ids, keep, strict=True) if k),
            human=self.human[keep],
            groups=self.groups[keep],
            columns=tuple(
                BankColumn(c.key, c.strategy, c.roles, c.predictions[keep]) for c in self.columns
            ),
            seconds=self.seconds,
            calls=self.calls,
            tokens=self.tokens,
            twins_missing=self.twins_missing,
        )


def join_pairs(base: BankPair, extension: BankPair) -> BankPair:
    """``base`` with ``extension``'s columns after its own: a pair's bank and the bank of its
    search continued to a larger budget (``benchmarks/bank.py extend``), one pool. The
    costs add up; the name is the extension's.

    Raises:
        ValueError: When the two pairs are not of one task, aspect and pool, or share a
            column key.
    """
    if (base.task, base.aspect, base.ids) != (extension.task, extension.aspect, extension.ids):
        raise ValueError(
            f"join_pairs: {extension.name} is not an extension of {base.name} (another "
            "task, aspect or pool)"
        )
    clash = {c.key for c in base.columns} & {c.key for c in extension.columns}
    if clash:
        raise ValueError(f"join_pairs: both pairs have columns {sorted(clash)}")
    tokens = dict(base.tokens)
    for k, v in extension.tokens.items():
        tokens[k] = tokens.get(k, 0) + v
    return replace(
        base,
        name=extension.name,
        columns=base.columns + extension.columns,
        missing=base.missing + extension.missing,
        seconds=base.seconds + extension.seconds,
        calls=base.calls + extension.calls,
        tokens=tokens,
        twins_missing=base.twins_missing + extension.twins_missing,
    )


def along_path(pair: BankPair, path: Sequence[Mapping[str, Any]]) -> BankPair:
    """``pair``'s columns in the order of another search ``path`` (a ``path`` plan's
    ``path``: each entry's ``strategy`` and its ``role``, ``search #n``), each holding that
    role alone (the path's first, the baseline, also ``baseline``), columns off the path left
    out; twin columns count (a path's ``expected`` strategy is its greedy twin's column when
    the bank read both from one call). A replay then cuts the path at any budget
    (:func:`judgeopt_lab.first_k`, :func:`judgeopt_lab.rate_first_k`).

    Raises:
        ValueError: When a strategy of ``path`` is no column of ``pair`` (other than a
            self-consistency strategy, which no bank plan holds), or the path does not start
            with the pair's baseline.
    """
    by_key: dict[str, BankColumn] = {}
    for col in pair.columns:
        by_key.setdefault(strategy_json(col.strategy), col)
    baseline = next((c for c in pair.columns if "baseline" in c.roles), None)
    columns: list[BankColumn] = []
    for n, entry in enumerate(path):
        key = strategy_json(entry["strategy"])
        if n == 0 and (baseline is None or key != strategy_json(baseline.strategy)):
            raise ValueError(
                f"along_path: the path of {pair.name} does not start with its baseline"
            )
        col = by_key.get(key)
        if col is None:
            if str(entry["strategy"].get("decoding", "")).startswith("sc"):
                continue
            raise ValueError(f"along_path: {pair.name} has no column for {key}")
        roles = (("baseline",) if n == 0 else ()) + (str(entry["role"]),)
        columns.append(replace(col, roles=roles))
    missing = sum(int((~c.judged).sum()) for c in columns if c.judged is not None)
    return replace(pair, columns=tuple(columns), missing=missing)


def strategy_json(strategy: Mapping[str, Any]) -> str:
    """A strategy's plain-data form as a sorted JSON string: the bank's key of a strategy."""
    return json.dumps(dict(strategy), sort_keys=True)


def keep_judgement(held: dict[tuple[str, str], dict[str, Any]], line: Mapping[str, Any]) -> None:
    """Add a ``judgement`` line to ``held`` (by strategy and item id) unless a better one is
    held: a bank call replaces an imported judgement and any failed call, and a failed call
    replaces nothing that succeeded."""
    key = (strategy_json(line["strategy"]), str(line["id"]))
    old = held.get(key)
    if old is None or (
        (old.get("error") is not None or line.get("source") == "bank") and line.get("error") is None
    ):
        held[key] = dict(line)


def load_bank(
    plan: Mapping[str, Any] | str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    data_dir: str | os.PathLike[str] | None = None,
    pairs: Sequence[str] | None = None,
    complete_only: bool = False,
    twins: bool = False,
) -> dict[str, BankPair]:
    """The bank's pairs by name, from its plan and the recorded files in ``directory``.

    With ``twins``, each planned column of a strategy that rates before it explains (``cot``
    ``none`` or ``suffix``, no ``dialectic`` reference) also gets its *twin*: the same calls
    read with the other decoding (``greedy`` <-> ``expected``), which a bank call records
    both of. A twin is added when the plan lacks it and every pool item's judgement carries
    its rating: an imported greedy judgement has no expected one, so the ``twin`` lines of
    ``<pair>.twins.jsonl`` (``benchmarks/bank.py twins``: those items judged again, stopped at
    the rating) fill the gaps; they never replace a planned column's own ratings. Its key is
    the column's with ``~``, its role ``twin of KEY``. :attr:`BankPair.twins_missing`
    counts the rating-first columns whose twin the bank cannot give.

    Args:
        plan: The plan (``benchmarks/bank_plan.json``) or its path.
        directory: Where the pair files are (``benchmarks/runs/bank``).
        data_dir: The shared datasets (human scores and groups of the pool);
            default :func:`judgeopt.bench.shared_data_dir`.
        pairs: Only these pairs (default: every pair of the plan).
        complete_only: Leave out the pairs whose bank is not complete.

    Raises:
        ValueError: On a plan of another format, an unknown pair name, or a pair file
            recorded under another plan.
    """
    from judgeopt.data import load_records

    from ._harness import shared_data_dir

    if not isinstance(plan, Mapping):
        plan_path = Path(plan)
        raw = plan_path.read_bytes()
        plan = json.loads(raw)
        import hashlib

        sha: str | None = hashlib.sha256(raw).hexdigest()[:16]
    else:
        sha = None
    assert isinstance(plan, Mapping)
    if plan.get("format") != BANK_FORMAT:
        raise ValueError(f"bank plan format {plan.get('format')!r}; this version reads 1")
    names = [p["name"] for p in plan["pairs"]]
    unknown = [p for p in pairs or () if p not in names]
    if unknown:
        raise ValueError(f"pairs: unknown pair(s) {unknown}; the plan has {names}")
    data = Path(data_dir) if data_dir is not None else shared_data_dir()
    out: dict[str, BankPair] = {}
    for p in plan["pairs"]:
        if pairs is not None and p["name"] not in pairs:
            continue
        bp = _load_pair(p, directory, data, sha, load_records, twins=twins)
        if bp is None or (complete_only and not bp.complete):
            continue
        out[bp.name] = bp
    return out


def _load_pair(
    p: Mapping[str, Any],
    directory: str | os.PathLike[str],
    data: Path,
    sha: str | None,
    load_records: Any,
    *,
    twins: bool = False,
) -> BankPair | None:
    lines: dict[tuple[str, str], dict[str, Any]] = {}
    seconds, calls = 0.0, 0
    tokens = {"prompt_tokens": 0, "completion_tokens": 0}
    seen = False
    for line in bank_lines(directory, p["name"]):
        seen = True
        kind = line.get("kind")
        if kind == "header" and sha is not None and line.get("plan_sha") != sha:
            raise ValueError(f"{p['name']}: recorded under plan {line.get('plan_sha')}, not {sha}")
        if kind == "judgement":
            keep_judgement(lines, line)
        elif kind == "chunk":
            seconds += float(line.get("seconds") or 0.0)
            calls += int(line.get("calls") or 0)
            for k in tokens:
                tokens[k] += int(line.get(k) or 0)
    if not seen:
        return None
    twin_lines: dict[tuple[str, str], dict[str, Any]] = {}
    if twins:
        for line in bank_lines(directory, f"{p['name']}.twins"):
            if line.get("kind") == "twin":
                keep_judgement(twin_lines, {**line, "source": "bank"})
    records = {r.id: r for r in load_records(data / p["task"] / "full.jsonl")}
    ids = tuple(p["pool"])
    human = np.array([float(records[i].scores[p["aspect"]]) for i in ids], dtype=float)
    groups = np.array([records[i].group_id or records[i].id for i in ids], dtype=object)
    columns, missing, twins_missing = _columns(p["columns"], lines, twin_lines, ids, twins)
    return BankPair(
        name=p["name"],
        task=p["task"],
        aspect=p["aspect"],
        level=p["level"],
        ids=ids,
        human=human,
        groups=groups,
        columns=tuple(columns),
        missing=missing,
        seconds=seconds,
        calls=calls,
        tokens=tokens,
        twins_missing=twins_missing,
    )


def _columns(
    planned_columns: Sequence[Mapping[str, Any]],
    lines: Mapping[tuple[str, str], Mapping[str, Any]],
    twin_lines: Mapping[tuple[str, str], Mapping[str, Any]],
    ids: Sequence[str],
    twins: bool,
) -> tuple[list[BankColumn], int, int]:
    """The planned columns (then, with ``twins``, the twin columns), the judgements they
    miss, and the rating-first columns whose twin the bank cannot give."""
    columns, missing = [], 0
    planned = {strategy_json(c["strategy"]) for c in planned_columns}
    twin_columns, twins_missing = [], 0
    for c in planned_columns:
        strategy = dict(c["strategy"])
        decoding = strategy.pop("decoding")
        field_name = "greedy" if decoding == "greedy" else "expected"
        base = strategy_json(strategy)
        preds, judged = _read(lines, base, ids, field_name)
        missing += int((~judged).sum())
        columns.append(
            BankColumn(
                c["key"],
                c["strategy"],
                tuple(c.get("roles") or ()),
                predictions=preds,
                judged=judged,
            )
        )
        twin = {**strategy, "decoding": "expected" if field_name == "greedy" else "greedy"}
        if not twins or not rates_first(strategy) or strategy_json(twin) in planned:
            continue
        merged = {**twin_lines, **{k: v for k, v in lines.items() if k[0] == base}}
        for key, line in twin_lines.items():
            if key[0] == base and not judgement_covers(merged.get(key), str(twin["decoding"])):
                merged[key] = line
        twin_preds, twin_judged = _read(merged, base, ids, str(twin["decoding"]))
        if not twin_judged.all():
            twins_missing += 1
            continue
        twin_columns.append(
            BankColumn(f"{c['key']}~", twin, (f"twin of {c['key']}",), predictions=twin_preds)
        )
    return columns + twin_columns, missing, twins_missing


def rates_first(strategy: Mapping[str, Any]) -> bool:
    """The answer begins with the rating (:func:`judgeopt.judge.rates_first`: ``cot``
    ``none`` or ``suffix``, and no ``dialectic`` reference written before it)."""
    from judgeopt.judge import rates_first as judge_rates_first  # lazy: it loads DSPy

    return judge_rates_first(strategy)


def _read(
    lines: Mapping[tuple[str, str], Mapping[str, Any]],
    base: str,
    ids: Sequence[str],
    decoding: str,
) -> tuple[np.ndarray, np.ndarray]:
    """One decoding's ratings of a base strategy on the pool (``nan``: none) and which items
    the bank holds a judgement of."""
    preds = np.full(len(ids), np.nan)
    judged = np.ones(len(ids), dtype=bool)
    for k, rid in enumerate(ids):
        line = lines.get((base, rid))
        if line is None or not judgement_covers(line, decoding):
            judged[k] = False
            continue
        value = line.get(decoding)
        if value is not None and math.isfinite(float(value)):
            preds[k] = float(value)
    return preds, judged


def judgement_covers(line: Mapping[str, Any] | None, decoding: str) -> bool:
    """A bank ``judgement`` line gives the rating of its strategy with ``decoding``
    (``greedy`` or ``expected``; an unparsed answer counts: it is a recorded outcome).

    A failed call covers nothing; an imported greedy judgement has no expected rating.
    """
    if line is None or line.get("error") is not None:
        return False
    if decoding == "greedy":
        return True
    return (
        line.get("source") == "bank" or line.get("expected") is not None or "expected_error" in line
    )
