"""``judgeopt demo``: compile a Topical-Chat naturalness judge and compare it with MT-Bench's.

With the embedded default model (Qwen2.5-Coder-1.5B-Instruct in process) it searches the
``quick`` preset's strategies on a small validation subset, then scores the best judge and the
MT-Bench baseline prompt on held-out test items. About 17 minutes on 2 idle CPU cores.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

__all__ = ["find_shared_data", "run_demo"]


def find_shared_data() -> Path:
    """The shared datasets: ``$JUDGEOPT_DATA``, else ``../shared/data`` beside the project.

    Raises:
        FileNotFoundError: When neither exists.
    """
    env = os.environ.get("JUDGEOPT_DATA")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parents[3] / "shared" / "data",
                   Path.cwd().parent / "shared" / "data", Path.cwd() / "shared" / "data"]
    for c in candidates:
        if (c / "topical_chat").is_dir():
            return c
    raise FileNotFoundError(
        "The demo needs the shared datasets: set JUDGEOPT_DATA to the folder that holds "
        "topical_chat/valid.jsonl, or put it at ../shared/data beside the project.")


def _sample(records: list, n: int, seed: int) -> list:  # type: ignore[type-arg]
    if n >= len(records):
        return records
    idx = np.sort(np.random.default_rng(seed).choice(len(records), size=n, replace=False))
    return [records[int(i)] for i in idx]


def run_demo(*, model: str = "local", api_base: str | None = None, n_valid: int = 12,
             n_test: int = 30, budget: int = 8, out_dir: Path = Path("runs/demo"),
             progress: bool = True) -> int:
    """Run the demo; print a comparison table; write the judge and a JSON summary.

    Returns:
        The process exit status (0).
    """
    from .data import load_records
    from .evaluate import evaluate
    from .judge import JudgeProgram, baseline_strategy, load_task
    from .lm import make_lm
    from .teleprompt import JudgeSearch, load_optimizer

    data = find_shared_data() / "topical_chat"
    valid = _sample(load_records(data / "valid.jsonl"), n_valid, seed=0)
    test = _sample(load_records(data / "test.jsonl"), n_test, seed=1)
    task = load_task("topical_chat")
    aspect = "naturalness"
    print(f"judgeopt demo: Topical-Chat {aspect}, model {model}; {len(valid)} validation and "
          f"{len(test)} held-out test items, {budget} strategies.")
    t0 = time.perf_counter()
    lm = make_lm(model, api_base=api_base)
    out_dir.mkdir(parents=True, exist_ok=True)
    optimizer = JudgeSearch.from_config(load_optimizer("quick"), budget=budget,
                                        checkpoint_dir=out_dir / "checkpoint", progress=progress)
    judge = optimizer.compile(JudgeProgram(task, aspect, lm=lm), trainset=valid)
    judge.model_name = model
    baseline = JudgeProgram(task, aspect, baseline_strategy(task), lm=lm)
    base_valid = next((s for s in judge.search_result.evaluation_summaries
                       if s["number"] == 0), None)
    rows = []
    for name, prog in (("MT-Bench baseline", baseline), ("best found", judge)):
        res = evaluate(prog, test, progress=progress, desc=f"test: {name}")
        rows.append((name, prog.strategy, res))
    judge.test = rows[1][2].summary()
    judge.save(out_dir / "judge.json")
    seconds = time.perf_counter() - t0
    print()
    print(f"{'judge':<20}{'valid rho':>10}{'test rho':>10}{'parse fail':>12}  strategy")
    valid_scores = [base_valid["spearman"] if base_valid else None,
                    judge.search_result.best_score]
    for (name, strategy, res), v in zip(rows, valid_scores, strict=True):
        vs = "n/a" if v is None else f"{v:.3f}"
        ts = "n/a" if res.spearman is None else f"{res.spearman:.3f}"
        print(f"{name:<20}{vs:>10}{ts:>10}{res.parse_failures:>12}  {strategy}")
    stats = lm.stats() if hasattr(lm, "stats") else None
    calls = "" if stats is None else f", {stats.calls} LLM calls, {stats.total_tokens} tokens"
    print(f"\n{seconds / 60:.1f} minutes{calls}. Judge written to {out_dir / 'judge.json'}.")
    summary = {"model": model, "n_valid": len(valid), "n_test": len(test), "budget": budget,
               "baseline": rows[0][2].summary(), "best": rows[1][2].summary(),
               "best_strategy": judge.strategy.as_dict(), "seconds": seconds}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0
