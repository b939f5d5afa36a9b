"""The options of ``judgeopt compile``: its data, search, failure and selection arguments."""

from __future__ import annotations

import argparse

from ..evaluate import CHECK_TIMEOUT
from ._common import positive_int, seconds, share

__all__ = ["add_data_args", "add_failure_args", "add_search_args", "add_selection_args"]


def add_data_args(c: argparse.ArgumentParser) -> None:
    c.add_argument("--task", required=True, help="signature TOML file or shipped task name")
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--aspect",
        help="the aspect to judge, or several: a,b,c (one judge "
        "per aspect in the --out directory, plus index.json)",
    )
    which.add_argument(
        "--aspects",
        metavar="all|a,b,c",
        help="several aspects in one command ('all': every aspect of the "
        "task), sharing the model and its cache; --out is then a "
        "directory with <aspect>.json per aspect and index.json",
    )
    c.add_argument(
        "--data",
        required=True,
        help="labelled JSONL/CSV: example pool and (without --valid-data) scoring set",
    )
    c.add_argument("--valid-data", help="labelled data to score strategies on")
    c.add_argument("--test-data", help="held-out labelled data to evaluate the best judge on")
    c.add_argument("--limit", type=positive_int, help="use the first N records of each file")
    c.add_argument("--test-limit", type=positive_int, help="use the first N test records")


def add_search_args(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--optimizer",
        default="auto",
        help="optimizer preset TOML or name: auto (default; judgeopt's search), "
        "hpss (the paper's algorithm), greedy, stepwise, random, quick, "
        "racing (auto with racing)",
    )
    c.add_argument("--budget", type=positive_int, help="override the preset's budget")
    c.add_argument("--seed", type=int, help="override the preset's seed")
    c.add_argument(
        "--racing",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="race candidates: judge each on a growing prefix of the validation set "
        "and drop it once it cannot reach the population (default: the "
        "preset's [racing] setting, off in the shipped presets but 'racing')",
    )
    c.add_argument(
        "--candidates",
        choices=["all", "rate_first"],
        default=None,
        help="which strategies the search judges: all, or rate_first (besides the "
        "baseline, only strategies that rate before they explain, judged stopped at the "
        "rating; default: the preset's, all)",
    )
    c.add_argument(
        "--checkpoint",
        help="checkpoint directory (default: OUT.ckpt); a re-run "
        "with the same data, settings and model resumes "
        "from it",
    )
    c.add_argument(
        "--restart",
        action="store_true",
        help="discard the checkpoint and start afresh (needed when it belongs to a "
        "run with other data, settings or model)",
    )


def add_failure_args(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--max-consecutive-failures",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop the compile (resumably, exit 3) after N judge calls in a row "
        "failed with connection errors, timeouts or 5xx (default: the "
        "preset's, 5)",
    )
    c.add_argument(
        "--check-timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="how long the check call made before the search waits for the endpoint's "
        f"answer (default: the preset's check_timeout, {CHECK_TIMEOUT:g}; the judge calls "
        "keep their own timeout)",
    )
    c.add_argument(
        "--max-parse-failures",
        type=share,
        default=None,
        metavar="SHARE",
        help="largest share of the chosen judge's answers without a rating "
        "before the compile exits with 1 (default: the preset's, 0.25)",
    )


def add_selection_args(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--selection",
        choices=("confirm", "veto", "best", "shrink", "lcb", "factor", "posterior"),
        default=None,
        help="how the judge is chosen (default: the preset's, lcb; a level the "
        "preset does not state is the rule's own: lcb 0.95, else 0.8): 'confirm' "
        "searches on half the scoring set and keeps a strategy only if its "
        "gain over the baseline is confirmed on the other half; 'veto' keeps "
        "the best search score unless the other half shows it worse than the "
        "baseline; 'best' keeps the best validation score (biased upward); "
        "'shrink' and 'lcb' search on everything and compare every strategy "
        "with the baseline on all the items, pooled: the best gain shrunk "
        "toward zero by its noise (empirical Bayes), or the best lower bound "
        "of the gain corrected for the number of strategies compared, if "
        "above zero, else the baseline; 'factor' the same with the gains "
        "pooled by factor value (ridge regression, as HPSS pools its advantages); "
        "'posterior' the same with each gain weighed against what the model's "
        "judgement bank measured for the same change (the preset's gain_prior; "
        "without one for the model: 'shrink')",
    )
    c.add_argument(
        "--guard",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="cross-fit what was chosen on the items it is scored on (the --ensemble, rule "
        "'best''s judge): the same choice made on each half of the items must beat the "
        "baseline on the other half, else no ensemble is built and rule 'best' returns the "
        "baseline (default: the preset's)",
    )
    c.add_argument(
        "--frugal",
        type=share,
        default=None,
        metavar="TOL",
        help="with --guard, rule 'best' and an --ensemble the guard keeps: write rule "
        "best's single judge instead (one call per item instead of one per member) when "
        "its own cross-fitted gain is above the guard's margin and at least the "
        "ensemble's minus TOL (default: the preset's, off)",
    )
    c.add_argument(
        "--ensemble",
        type=positive_int,
        default=None,
        metavar="M",
        help="export the mean of the M best strategies' z-normalised ratings as "
        "one judge (OUT; the chosen single judge goes to OUT stem + "
        ".single.json)",
    )
    c.add_argument(
        "--ensemble-anchor",
        type=share,
        default=None,
        metavar="W",
        help="the baseline's weight in the --ensemble (default: the preset's, 0: "
        "none): the baseline at W with the M best other strategies sharing 1 - W, "
        "an ensemble hedged toward the baseline (W < 1)",
    )
    c.add_argument(
        "--ensemble-stack",
        type=float,
        default=None,
        metavar="RIDGE",
        help="fit the --ensemble's weights on the validation items instead: a ridge "
        "stack (penalty RIDGE per item, e.g. 10) of the baseline and the M best other "
        "strategies, no weight negative; strategies given no weight are left out "
        "(default: the preset's, 0: equal weights). Not with --ensemble-anchor",
    )
