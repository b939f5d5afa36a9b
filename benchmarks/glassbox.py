"""Glass-box features and rating scorers against human scores, with a local model.

For each dataset (Topical-Chat, SummEval subsets of whole groups):

1. the self-evaluation features of seed 003 for each (instruction, response) pair, and the
   correlation of each with every human aspect;
2. the error of the top-k approximation (k = 5, 10, 20, as a server would report) against
   the full vocabulary, for Softmax-Ent / Softmax-Var and for the expected rating;
3. greedy vs expected rating (full vocabulary, and top-k) vs self-consistency for the
   baseline (MT-Bench) judge prompt, correlated with the judged aspect.

With ``--backend transformers`` (CPU torch, ``pip install 'judgeopt[transformers]'``) the
attention features AttnEnt-Min / AttnEnt-Avg are computed alongside the others, from the
same item's attention weights right after its forced-decoding pass (the prompt is then in
the KV cache, so only the response is evaluated again); ``--compare-with`` a previous run's
JSON (e.g. the llama.cpp one) reports how the shared features agree between the backends.

Prints tables and writes JSON (default ``benchmarks/results/glassbox.json``).

Usage:
    python benchmarks/glassbox.py [--model local:qwen2.5-coder-0.5b] [--limit 20]
        [--backend llama.cpp|transformers] [--dtype float32|bfloat16]
        [--datasets topical_chat,summeval] [--n-ensemble 10] [--decoding-ensemble]
        [--skip-prompt-ensemble] [--sc-n 5] [--rating-scale N] [--rating-cot prefix|none]
        [--max-tokens 256] [--n-threads 1] [--compare-with benchmarks/results/glassbox.json]
        [--json benchmarks/results/glassbox.json]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from judgeopt.data import load_records
from judgeopt.glassbox import (
    Capability,
    FeatureResult,
    attention_entropy,
    compute_features,
    correlate_features,
    make_backend,
    rating_from_generation,
    self_consistency_rating,
    softmax_combo,
    token_entropies,
    token_entropies_topk,
    token_logprob_variances,
    token_logprob_variances_topk,
    topk_logprobs,
)
from judgeopt.judge import baseline_strategy, load_task, parse_rating, render_messages
from judgeopt.metrics import correlation
from judgeopt_lab import sample_groups, shared_data_dir, write_json

ROOT = Path(__file__).resolve().parents[1]
DATA = shared_data_dir()

DATASETS: dict[str, dict[str, Any]] = {
    "topical_chat": {
        "file": "topical_chat/valid.jsonl",
        "instruction": "Fact: {fact}\n\nConversation:\n{context}\n\n"
        "Write the next turn of the conversation.",
        "response": "response",
        "reference": None,
        "aspect": "naturalness",
        "level": "dataset",
    },
    "summeval": {
        "file": "summeval/full.jsonl",
        "instruction": "Summarize the following news article in a few sentences.\n\n{source}",
        "response": "summary",
        "reference": "reference",
        "aspect": "coherence",
        "level": "group",
    },
}
TOPK = (5, 10, 20)


def _corr(human: np.ndarray, pred: np.ndarray, groups: list[Any] | None) -> float:
    mask = np.isfinite(human) & np.isfinite(pred)
    try:
        g = [groups[i] for i in np.flatnonzero(mask)] if groups is not None else None
        return correlation(human[mask], pred[mask], "spearman", groups=g)
    except ValueError:
        return float("nan")


def _err(exact: np.ndarray, approx: np.ndarray) -> dict[str, float]:
    mask = np.isfinite(exact) & np.isfinite(approx)
    e, a = exact[mask], approx[mask]
    out = {"n": int(mask.sum()), "n_undefined": int((~np.isfinite(approx)).sum())}
    if e.size:
        out["mae"] = float(np.mean(np.abs(a - e)))
        out["mean_rel_err"] = float(np.mean(np.abs(a - e) / np.maximum(np.abs(e), 1e-12)))
        out["spearman_with_exact"] = (
            float(stats.spearmanr(e, a).statistic)
            if e.size > 2 and np.ptp(e) > 0 and np.ptp(a) > 0
            else float("nan")
        )
    return out


def base_features(records: list[Any], backend: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """SentProb, Softmax-Ent/Var exact and their top-k approximations, one pass per item."""
    from judgeopt.judge import fill_template

    vocab = backend.vocab_size
    exact: dict[str, list[float]] = {"sentprob": [], "softmax_ent": [], "softmax_var": []}
    attention = backend.supports(Capability.ATTENTION)
    if attention:
        exact.update(attn_ent_min=[], attn_ent_avg=[])
    approx: dict[str, list[float]] = {}
    started = time.monotonic()
    attention_seconds = 0.0
    for rec in records:
        msgs = [{"role": "user", "content": fill_template(spec["instruction"], rec.inputs)}]
        scored = backend.score(msgs, rec.inputs[spec["response"]], full_vocabulary=True)
        if attention:
            t0 = time.monotonic()
            per_head = attention_entropy(backend.attentions(msgs, rec.inputs[spec["response"]]))
            exact["attn_ent_min"].append(float(np.min(per_head)))
            exact["attn_ent_avg"].append(float(np.mean(per_head)))
            attention_seconds += time.monotonic() - t0
        exact["sentprob"].append(float(np.mean(scored.token_logprobs)))
        exact["softmax_ent"].append(float(np.mean(token_entropies(scored.logits))))
        exact["softmax_var"].append(float(np.mean(token_logprob_variances(scored.logits))))
        for k in TOPK:
            top = topk_logprobs(scored.logits, k)
            for tail in ("ignore", "uniform"):
                approx.setdefault(f"softmax_ent@top{k}/{tail}", []).append(
                    float(np.mean(token_entropies_topk(top, tail=tail, vocab_size=vocab)))
                )
                approx.setdefault(f"softmax_var@top{k}/{tail}", []).append(
                    float(np.mean(token_logprob_variances_topk(top, tail=tail, vocab_size=vocab)))
                )
    seconds = time.monotonic() - started
    ex = {k: np.asarray(v) for k, v in exact.items()}
    errors = {name: _err(ex[name.split("@")[0]], np.asarray(v)) for name, v in approx.items()}
    return {
        "exact": ex,
        "approx": {k: np.asarray(v) for k, v in approx.items()},
        "topk_error": errors,
        "seconds": seconds - attention_seconds,
        "attention_seconds": attention_seconds if attention else None,
    }


def ratings(
    records: list[Any], backend: Any, dataset: str, spec: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """Greedy vs expected (exact, top-k) vs self-consistency for the baseline prompt."""
    task = load_task(dataset)
    strategy = baseline_strategy(task)
    if args.rating_scale:
        strategy = strategy.replace(scale=args.rating_scale)
    if args.rating_cot:
        strategy = strategy.replace(cot=args.rating_cot)
    scale = int(strategy["scale"])
    aspect = spec["aspect"]
    cols: dict[str, list[float]] = {
        "greedy": [],
        "expected": [],
        **{f"expected@top{k}": [] for k in TOPK},
        **{f"expected@top{k}/stop": [] for k in TOPK},
    }
    if args.sc_n:
        cols["self_consistency"] = []
    sc_failed = 0
    unresolved: dict[str, list[float]] = {f"top{k}": [] for k in TOPK}
    started = time.monotonic()
    gen_seconds = sc_seconds = 0.0
    for i, rec in enumerate(records):
        msgs = render_messages(task, aspect, strategy, rec.inputs)
        t0 = time.monotonic()
        gen = backend.generate(msgs, max_tokens=args.max_tokens, full_logprobs=True)
        greedy = parse_rating(gen.text, scale=scale)
        cols["greedy"].append(greedy.score if greedy.ok else math.nan)
        full = rating_from_generation(gen, scale=scale, backend=backend)
        cols["expected"].append(full.score if full.ok else math.nan)
        for k in TOPK:
            approx = rating_from_generation(gen, scale=scale, backend=backend, top_k=k)
            cols[f"expected@top{k}"].append(approx.score if approx.ok else math.nan)
            if approx.distribution is not None:
                unresolved[f"top{k}"].append(approx.distribution.unresolved)
            stop = rating_from_generation(
                gen, scale=scale, backend=backend, top_k=k, unknown_continuation="stop"
            )
            cols[f"expected@top{k}/stop"].append(stop.score if stop.ok else math.nan)
        gen_seconds += time.monotonic() - t0
        if args.sc_n:
            t0 = time.monotonic()
            sc = self_consistency_rating(
                msgs,
                backend,
                scale=scale,
                n=args.sc_n,
                temperature=1.0,
                seed=1000 * i,
                max_tokens=args.max_tokens,
            )
            cols["self_consistency"].append(sc.score if sc.score is not None else math.nan)
            sc_failed += sc.n_failed
            sc_seconds += time.monotonic() - t0
        del gen
    human = np.asarray([r.scores.get(aspect, math.nan) for r in records], dtype=np.float64)
    groups = [r.group_id for r in records] if spec["level"] == "group" else None
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}
    return {
        "aspect": aspect,
        "scale": scale,
        "strategy": dict(strategy),
        "level": spec["level"],
        "spearman": {k: _corr(human, v, groups) for k, v in arrays.items()},
        "n_defined": {k: int(np.isfinite(v).sum()) for k, v in arrays.items()},
        "topk_error": {
            f"top{k}{policy}": _err(arrays["expected"], arrays[f"expected@top{k}{policy}"])
            for k in TOPK
            for policy in ("", "/stop")
        },
        "topk_unresolved_mass": {
            k: float(np.mean(v)) if v else math.nan for k, v in unresolved.items()
        },
        "greedy_values": sorted({float(x) for x in arrays["greedy"] if np.isfinite(x)}),
        "self_consistency_failed_samples": sc_failed,
        "seconds": {
            "greedy_and_expected": gen_seconds,
            "self_consistency": sc_seconds,
            "total": time.monotonic() - started,
        },
        "scores": {
            k: [None if not np.isfinite(x) else float(x) for x in v] for k, v in arrays.items()
        },
    }


def run_dataset(dataset: str, backend: Any, args: argparse.Namespace) -> dict[str, Any]:
    spec = DATASETS[dataset]
    # Whole groups in the order drawn, cut to the limit.
    records = sample_groups(load_records(DATA / spec["file"]), args.limit, args.seed, cut=True)
    print(
        f"\n=== {dataset}: {len(records)} records, {len({r.group_id for r in records})} groups ===",
        flush=True,
    )
    out: dict[str, Any] = {"n_items": len(records), "ids": [r.id for r in records]}
    if not args.skip_features:
        out.update(features_section(records, backend, spec, args))
    if not args.skip_ratings:
        out["ratings"] = ratings_section(records, backend, dataset, spec, args)
    return out


def features_section(
    records: list[Any], backend: Any, spec: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    base = base_features(records, backend, spec)
    extra = [] if args.skip_prompt_ensemble else ["unt_exp_prompt", "unt_var_prompt"]
    if args.decoding_ensemble:
        extra += ["unt_exp_dec", "unt_var_dec"]
    if spec["reference"]:
        extra += ["sentprob_ref", "sentprob_illus", "softmax_ent_illus", "softmax_var_illus"]
    t0 = time.monotonic()
    if extra:
        more = compute_features(
            records,
            backend,
            extra,
            instruction_template=spec["instruction"],
            response_field=spec["response"],
            reference_field=spec["reference"],
            n_ensemble=args.n_ensemble,
            sample_max_tokens=args.sample_max_tokens,
            seed=args.seed,
            progress=False,
        )
    else:  # nothing beyond the base pass: no model call, only the records' human scores
        aspects = sorted({a for r in records for a in r.scores})
        more = FeatureResult(
            features=(),
            ids=tuple(r.id for r in records),
            group_ids=tuple(r.group_id for r in records),
            values={},
            human={
                a: np.asarray([r.scores.get(a, math.nan) for r in records], dtype=float)
                for a in aspects
            },
            errors={},
            model=backend.model,
            backend=backend.name,
            seconds=0.0,
            settings={},
        )
    extra_seconds = time.monotonic() - t0
    values = dict(base["exact"])
    values["softmax_combo"] = softmax_combo(values["softmax_ent"], values["softmax_var"])
    values.update(more.values)
    if spec["reference"]:
        values["softmax_ent_calib"] = values["softmax_ent"] - values["sentprob_ref"]
        values["softmax_var_calib"] = values["softmax_var"] - values["sentprob_ref"]
    for name in ("softmax_ent", "softmax_var"):
        for k in TOPK:
            values[f"{name}@top{k}"] = base["approx"][f"{name}@top{k}/ignore"]
    merged = FeatureResult(
        features=tuple(values),
        ids=more.ids,
        group_ids=more.group_ids,
        values=values,
        human=more.human,
        errors=more.errors,
        model=more.model,
        backend=more.backend,
        seconds=base["seconds"] + extra_seconds,
        settings=more.settings,
    )
    corr = correlate_features(merged, methods=("spearman",), level=spec["level"])
    print(corr.table())
    if spec["level"] != "dataset":  # instruction-level features are constant within a group
        out["features_dataset_level"] = correlate_features(
            merged, methods=("spearman",), level="dataset"
        ).to_dict()
    attn = base["attention_seconds"]
    print(
        f"features: {base['seconds']:.0f} s base pass"
        + (f" + {attn:.0f} s attention" if attn is not None else "")
        + f" + {extra_seconds:.0f} s ensembles/reference ({len(records)} items)"
    )
    print("\ntop-k approximation error vs full vocabulary (per-item feature values):")
    for name, e in base["topk_error"].items():
        print(
            f"  {name:<28} MAE {e['mae']:.4f}  rel {e['mean_rel_err']:.3f}  "
            f"spearman(exact, approx) {e['spearman_with_exact']:.3f}"
        )
    out["features"] = corr.to_dict()
    out["feature_values"] = {
        k: [None if not np.isfinite(x) else float(x) for x in v] for k, v in values.items()
    }
    out["feature_topk_error"] = base["topk_error"]
    out["feature_seconds"] = {
        "base": base["seconds"],
        "attention": base["attention_seconds"],
        "ensembles_and_reference": extra_seconds,
        "base_per_item": base["seconds"] / max(len(records), 1),
        "attention_per_item": (
            base["attention_seconds"] / max(len(records), 1)
            if base["attention_seconds"] is not None
            else None
        ),
    }
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


def _peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def compare_runs(results: dict[str, Any], other_path: str) -> dict[str, Any]:
    """How the per-item features of this run agree with another run's (same items)."""
    other = json.loads(Path(other_path).read_text(encoding="utf-8"))
    out: dict[str, Any] = {
        "other": other_path,
        "other_model": other.get("model"),
        "other_backend": other.get("args", {}).get("backend") or "llama.cpp",
        "datasets": {},
    }
    print(f"\nagreement with {other_path}:")
    for name, res in results.items():
        theirs = other.get("datasets", {}).get(name, {})
        if "feature_values" not in res or "feature_values" not in theirs:
            continue
        index = {rid: i for i, rid in enumerate(theirs["ids"])}
        shared = [(i, index[rid]) for i, rid in enumerate(res["ids"]) if rid in index]
        rows = {}
        for feature, ours in res["feature_values"].items():
            if feature not in theirs["feature_values"] or "@" in feature:
                continue
            a = np.asarray([ours[i] for i, _ in shared], dtype=np.float64)
            b = np.asarray(
                [theirs["feature_values"][feature][j] for _, j in shared], dtype=np.float64
            )
            rows[feature] = _err(b, a)
            e = rows[feature]
            print(
                f"  {name:<13} {feature:<18} n={e['n']:>3}  MAE {e.get('mae', math.nan):.4f}  "
                f"spearman {e.get('spearman_with_exact', math.nan):.3f}"
            )
        out["datasets"][name] = rows
    return out


def ratings_section(
    records: list[Any], backend: Any, dataset: str, spec: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    r = ratings(records, backend, dataset, spec, args)
    print(
        f"\nbaseline prompt, {r['aspect']}, scale {r['scale']} "
        f"(cot={r['strategy']['cot']}), spearman at {r['level']} level:"
    )
    for k, v in r["spearman"].items():
        print(f"  {k:<18} {v:>7.3f}  (defined on {r['n_defined'][k]} items)")
    print(f"  greedy ratings seen: {r['greedy_values']}")
    for k, e in r["topk_error"].items():
        print(
            f"  expected@{k:<9} MAE vs full {e.get('mae', math.nan):.4f}, "
            f"spearman(full, top-k) {e.get('spearman_with_exact', math.nan):.3f}, "
            f"undefined {e['n_undefined']}"
        )
    print(
        "  mean mass left out (drop policy): "
        + ", ".join(f"{k} {v:.4f}" for k, v in r["topk_unresolved_mass"].items())
    )
    s = r["seconds"]
    print(
        f"  {s['greedy_and_expected']:.0f} s greedy+expected, "
        f"{s['self_consistency']:.0f} s self-consistency"
    )
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="local:qwen2.5-coder-0.5b")
    parser.add_argument(
        "--backend",
        default=None,
        choices=["llama.cpp", "transformers"],
        help="in-process backend (default llama.cpp); transformers adds the attention features",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bfloat16"],
        help="weights of the transformers backend (float32)",
    )
    parser.add_argument(
        "--skip-prompt-ensemble",
        action="store_true",
        help="leave out the prompt-based ensemble (the most expensive part)",
    )
    parser.add_argument(
        "--compare-with",
        default=None,
        help="a previous run's JSON: report how the shared features agree",
    )
    parser.add_argument("--datasets", default="topical_chat,summeval")
    parser.add_argument("--limit", type=int, default=20, help="records per dataset (20)")
    parser.add_argument("--n-ensemble", type=int, default=10)
    parser.add_argument(
        "--decoding-ensemble",
        action="store_true",
        help="also the decoding-based ensemble (n-ensemble sampled responses)",
    )
    parser.add_argument("--sample-max-tokens", type=int, default=64)
    parser.add_argument("--sc-n", type=int, default=5, help="self-consistency samples (5)")
    parser.add_argument("--rating-scale", type=int, default=None)
    parser.add_argument("--rating-cot", default=None, choices=["none", "prefix", "suffix"])
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--skip-ratings", action="store_true")
    parser.add_argument("--skip-features", action="store_true")
    parser.add_argument("--n-threads", type=int, default=1)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/glassbox.json"))
    args = parser.parse_args()

    started = time.monotonic()
    backend = make_backend(
        args.model,
        backend=args.backend,
        n_threads=args.n_threads,
        n_ctx=args.n_ctx,
        dtype=args.dtype,
    )
    t0 = time.monotonic()
    vocab = backend.vocab_size  # loads the model
    load_seconds = time.monotonic() - t0
    load_rss = _peak_rss_mb()
    print(
        f"{backend!r}: loaded in {load_seconds:.1f} s (vocabulary {vocab}, peak RSS "
        f"{load_rss:.0f} MB)"
    )
    results = {name: run_dataset(name, backend, args) for name in args.datasets.split(",")}
    total = time.monotonic() - started
    print(f"\ntotal {total:.0f} s, peak RSS {_peak_rss_mb():.0f} MB")
    payload = {
        "model": args.model,
        "backend": backend.name,
        "args": vars(args),
        "seconds": total,
        "load_seconds": load_seconds,
        "peak_rss_mb_after_load": load_rss,
        "peak_rss_mb": _peak_rss_mb(),
        "datasets": results,
    }
    if args.compare_with:
        payload["comparison"] = compare_runs(results, args.compare_with)
    out = Path(args.json)
    write_json(out, payload)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
