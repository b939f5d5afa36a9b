"""The report's HTML page: the verdict first (chosen against the baseline, the gain with its
interval and n, every problem and passed-over strategy the compile printed), then the details."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._effects import baseline_strategy_of, finite, fmt
from ._figures import FIGURES

__all__ = ["page", "verdict"]

DASH = "\u2013"

CAPTIONS = {
    "trace": "Search trace: each evaluated strategy's score in search order, the best so far, "
    "and the baseline's score (dashed).",
    "factors": "Mean score of the evaluated strategies with each factor value; the bar is its "
    "95 % interval (normal approximation); a hollow point is a value seen once, which has "
    "no interval.",
    "gain": "The chosen judge's gain over the baseline per split with its 95 % paired "
    "bootstrap interval (green: above 0, red: below 0, blue: within noise).",
    "scatter": "The judge's ratings against the human scores on the test items, on the full "
    "rating scale and human score range (points jittered by 1.5 % of each axis so that equal "
    "pairs stay visible).",
}


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _table(
    rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None, cls: str = ""
) -> str:
    """A table; without ``header`` a key-value table (the first cell of each row is its
    header). Cells are text (escaped); ``None`` shows as a dash."""
    head = (
        "<thead><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in header) + "</tr></thead>"
        if header
        else ""
    )
    body = []
    for row in rows:
        cells = [DASH if c is None else c for c in row]
        if header:
            body.append("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
        else:
            body.append(
                f'<tr><th scope="row">{_esc(cells[0])}</th>'
                + "".join(f"<td>{_esc(c)}</td>" for c in cells[1:])
                + "</tr>"
            )
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}>{head}<tbody>{''.join(body)}</tbody></table>"


def _reading(c: Mapping[str, Any]) -> str:
    lo, hi = (list(c.get("gain_ci") or []) + [None, None])[:2]
    if not finite(c.get("gain")):
        return "gain undefined (a score is undefined)"
    if not (finite(lo) and finite(hi)):
        return "no interval"
    return "better" if lo > 0 else "worse" if hi < 0 else "within noise"


def _unrated(side: Mapping[str, Any] | None) -> str:
    side = side or {}
    n = side.get("n")
    bad = int(side.get("parse_failures") or 0) + int(side.get("call_failures") or 0)
    return f"{bad} of {n}" if n else DASH


def verdict(data: Mapping[str, Any]) -> dict[str, Any]:
    """The report's verdict: ``{"state", "headline", "split", "problems", "passed_over",
    "messages"}`` (``state``: ``untrustworthy``, ``better``, ``worse``, ``within noise``,
    ``undefined``, ``not compared``, or ``baseline`` when the judge is the baseline itself)."""
    search = data.get("search") or {}
    selection = data.get("selection") or {}
    problems = [str(p) for p in search.get("problems") or []]
    comparisons = data.get("comparisons") or {}
    split = next((s for s in ("test", "confirmation", "validation") if s in comparisons), None)
    if split is None and comparisons:
        split = next(iter(comparisons))
    if split is None:
        state, headline = "not compared", "Not compared with the baseline"
    else:
        c = comparisons[split]
        reading = _reading(c)
        state = reading if reading in ("better", "worse", "within noise") else "undefined"
        headline = {
            "better": f"Better than the baseline on {split}",
            "worse": f"Worse than the baseline on {split}",
            "within noise": f"Not distinguishable from the baseline on {split} (within noise)",
        }.get(state, f"Gain over the baseline undefined on {split}")
    if selection.get("kept_baseline") and not data.get("members"):
        state = "baseline"
        headline = "The baseline was kept: the rule found no strategy better than it"
    if problems:
        state = "untrustworthy"
        headline = (
            f"Not trustworthy: the compile reported {len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''}"
        )
    return {
        "state": state,
        "headline": headline,
        "split": split,
        "problems": problems,
        "passed_over": list(selection.get("excluded") or []),
        "messages": [str(m) for m in selection.get("messages") or []],
    }


def _strategy_line(data: Mapping[str, Any]) -> str:
    chosen = dict(data.get("strategy") or {})
    base = baseline_strategy_of(data)
    if base is None:
        return "<p>Chosen strategy: " + _esc(", ".join(f"{k}={v}" for k, v in chosen.items()))
    diff = [k for k in chosen if k in base and chosen[k] != base[k]]
    if not diff:
        return (
            "<p><b>Chosen: the baseline's strategy</b> ("
            + _esc(", ".join(f"{k}={v}" for k, v in base.items()))
            + ").</p>"
        )
    return (
        "<p><b>Chosen:</b> "
        + _esc(", ".join(f"{k}={chosen[k]}" for k in diff))
        + " &nbsp; <b>instead of the baseline's</b> "
        + _esc(", ".join(f"{k}={base[k]}" for k in diff))
        + " (the other factors as the baseline's).</p>"
    )


def _changes(data: Mapping[str, Any], score: Any) -> str:
    """The factors of the evaluated strategy with search score ``score`` that differ from
    the baseline's (matched by score, which the compile's messages print)."""
    base = baseline_strategy_of(data) or {}
    for t in (data.get("search") or {}).get("trace") or []:
        if finite(score) and t.get("score") == score:
            strategy = t.get("strategy") or {}
            diff = [f"{k}={v}" for k, v in strategy.items() if base.get(k) != v]
            return ", ".join(diff) or "the baseline"
    return "not in the trace"


def _gains_html(comparisons: Mapping[str, Any]) -> list[str]:
    if not comparisons:
        return [
            "<h3>Gain over the baseline</h3>",
            "<p>This judge file has no comparison with the baseline (it was not compiled, "
            "or compiled without a selection).</p>",
        ]
    rows = []
    for split, c in comparisons.items():
        ci = (list(c.get("gain_ci") or []) + [None, None])[:2]
        rows.append(
            [
                split,
                c.get("n"),
                fmt((c.get("baseline") or {}).get("score"), "undefined"),
                fmt((c.get("chosen") or {}).get("score"), "undefined"),
                fmt(c.get("gain"), "undefined", signed=True),
                f"[{fmt(ci[0], DASH, True)}, {fmt(ci[1], DASH, True)}]"
                if finite(ci[0]) and finite(ci[1])
                else "none (gain undefined)",
                _reading(c),
                _unrated(c.get("chosen")),
                _unrated(c.get("baseline")),
            ]
        )
    metric = next(iter(comparisons.values())).get("metric") or "score"
    parts = [
        "<h3>Gain over the baseline</h3>",
        _table(
            rows,
            [
                "split",
                "n",
                f"baseline {metric}",
                f"chosen {metric}",
                "gain",
                "95 % interval",
                "reading",
                "chosen: no rating",
                "baseline: no rating",
            ],
            cls="gains",
        ),
    ]
    notes = [f"{s}: {c['note']}" for s, c in comparisons.items() if c.get("note")]
    if notes:
        parts.append('<p class="note">' + "<br>".join(_esc(n) for n in notes) + "</p>")
    return parts


def _cost_html(cost: Mapping[str, Any] | None) -> list[str]:
    """Each judge's cost per judged item (the selection's ``cost_per_item``), if recorded."""
    if not cost:
        return []

    def num(x: Any, digits: int) -> str:
        return DASH if not finite(x) else f"{float(x):,.{digits}f}"

    rows = [
        [
            name,
            num(c.get("calls"), 0),
            num(c.get("prompt_tokens"), 0),
            num(c.get("completion_tokens"), 0),
            num(c.get("seconds"), 1),
        ]
        for name, c in cost.items()
        if isinstance(c, Mapping)
    ]
    return [
        "<h3>Cost per judged item</h3>",
        _table(rows, ["judge", "calls", "prompt tokens", "completion tokens", "seconds"]),
        "<p class=\"note\">Measured on the search's own calls: each member's mean per call "
        "times its calls per item; seconds are wall time at the compile's concurrency "
        "(a dash: not measured, every answer came from the cache).</p>",
    ]


def _verdict_html(data: Mapping[str, Any], v: Mapping[str, Any]) -> list[str]:
    css = {"untrustworthy": "bad", "worse": "bad", "better": "good"}.get(v["state"], "neutral")
    parts = [f'<section id="verdict" class="verdict {css}">', f"<h2>{_esc(v['headline'])}</h2>"]
    if v["problems"]:
        parts.append(
            "<p>The compile exited with status 1 and wrote this judge for inspection only. "
            'Its problems:</p><ul class="problems">'
            + "".join(f"<li>{_esc(p)}</li>" for p in v["problems"])
            + "</ul>"
        )
    parts.append(_strategy_line(data))
    parts += _gains_html(data.get("comparisons") or {})
    parts += _cost_html((data.get("selection") or {}).get("cost_per_item"))
    if v["messages"]:
        parts.append(
            '<p>The selection said:</p><ul class="messages">'
            + "".join(f"<li>{_esc(m)}</li>" for m in v["messages"])
            + "</ul>"
        )
    if v["passed_over"]:
        parts.append(
            f"<p>Passed over ({len(v['passed_over'])}): strategies whose search score rests "
            "on too few rated answers.</p>"
        )
        parts.append(
            _table(
                [
                    [
                        e.get("key"),
                        _changes(data, e.get("search_score")),
                        fmt(e.get("search_score")),
                        f"{e.get('unrated')} of {e.get('n')}",
                    ]
                    for e in v["passed_over"]
                ],
                [
                    "as the compile named it",
                    "changes from the baseline",
                    "search score",
                    "no rating",
                ],
                cls="passed-over",
            )
        )
    parts.append("</section>")
    return parts


def _results(data: Mapping[str, Any]) -> list[str]:
    metric = (data.get("search") or {}).get("metric") or "spearman"
    rows = []
    for split in ("validation", "test"):
        s = data.get(split)
        if not s:
            continue
        rows.append(
            [
                split,
                s.get("n"),
                s.get("parse_failures"),
                s.get("call_failures"),
                *(fmt(s.get(m), "undefined") for m in ("spearman", "kendall", "pearson")),
                s.get("calls"),
            ]
        )
    if not rows:
        return []
    return [
        "<h2>The chosen judge's results</h2>",
        _table(
            rows,
            ["split", "n", "unparsed", "failed calls", "spearman", "kendall", "pearson", "calls"],
        ),
        f'<p class="note">The search maximised {_esc(metric)}; &ldquo;undefined&rdquo;: too '
        "few rated answers, or one rating for every item.</p>",
    ]


def _robustness_html(data: Mapping[str, Any]) -> list[str]:
    """The robustness bound's checks (``judgeopt compile --max-attack-success``)."""
    rob = (data.get("selection") or {}).get("robustness")
    screen = _screen_html(data)
    if not rob:
        return ["<h2>Under attack</h2>", *screen] if screen else []
    base = baseline_strategy_of(data) or {}
    rows = []
    for i, c in enumerate(rob.get("checked") or [], start=1):
        strategy = c.get("strategy") or {}
        diff = ", ".join(f"{k}={v}" for k, v in strategy.items() if base.get(k) != v)
        worst = max(
            ((k, x) for k, x in (c.get("attacks") or {}).items() if finite(x)),
            key=lambda kv: kv[1],
            default=None,
        )
        rows.append(
            [
                i,
                diff or "the baseline",
                fmt(c.get("mean_success"), "undefined"),
                DASH if worst is None else f"{worst[0]} ({worst[1]:.0%})",
                fmt(c.get("clean"), "undefined"),
                "within" if c.get("passed") else "above",
            ]
        )
    verdict_text = "meets" if rob.get("met") else "does not meet"
    return [
        "<h2>Under attack</h2>",
        f"<p>The returned judge {verdict_text} the robustness bound: attack success at most "
        f"{_esc(fmt(rob.get('bound')))} averaged over the injection suite "
        f"<code>{_esc(rob.get('suite'))}</code>, on {_esc(rob.get('items'))} validation items "
        f"({_esc(rob.get('calls', DASH))} calls). Attack success: the share of items an "
        "attack moves by at least a quarter of the scale in its direction.</p>",
        _table(
            rows,
            [
                "checked",
                "changes from the baseline",
                "attack success",
                "worst attack",
                "clean agreement",
                "bound",
            ],
            cls="robustness",
        ),
        *screen,
    ]


def _screen_html(data: Mapping[str, Any]) -> list[str]:
    """The ``screened`` (``vetted``) defence's threshold, and how it was set (``[]``: no
    screen); ``vetted``: its format check first."""
    scoring = data.get("scoring") or {}
    threshold = scoring.get("screen_threshold")
    if threshold is None:
        return []
    cal = scoring.get("screen_calibration") or {}
    how = "fixed, not calibrated"
    if cal:
        bound = (
            f"at most {cal['false_flags']:.0%} of clean texts refused"
            if cal.get("guaranteed")
            else f"too few items for {cal['false_flags']:.0%}"
        )
        how = f"calibrated on {cal.get('n')} clean validation texts, {bound}"
    vetted = (data.get("strategy") or {}).get("defence") == "vetted"
    first = (
        "A judged text holding a rating in the judge's answer format ([[5]], Rating: 5) is "
        "refused before any call. "
        if vetted
        else ""
    )
    return [
        f'<p class="screen">{_esc(first)}The screen refuses a text whose probability of "Yes" '
        f"is above {_esc(f'{float(threshold):.3f}')} ({_esc(how)}).</p>"
    ]


def _figures_html(files: Mapping[str, Path], absent: Mapping[str, str]) -> list[str]:
    parts = ["<h2>Figures</h2>"]
    for name in FIGURES:
        if name in files:
            b64 = base64.b64encode(files[name].read_bytes()).decode("ascii")
            parts.append(
                f'<figure><img id="fig-{name}" alt="{name}" '
                f'src="data:image/png;base64,{b64}"><figcaption>'
                f"{_esc(CAPTIONS[name])} ({files[name].name})</figcaption>"
                "</figure>"
            )
        else:
            reason = absent.get(name, "not drawn")
            parts.append(
                f'<p class="absent" id="absent-{name}">No {name} figure: {_esc(reason)}.</p>'
            )
    return parts


def page(data: Mapping[str, Any], files: Mapping[str, Path], absent: Mapping[str, str]) -> str:
    """The report's HTML (self-contained: the figures are embedded as data URIs)."""
    title = f"judgeopt report: {data.get('task_name')} / {data.get('aspect')}"
    search = data.get("search") or {}
    v = verdict(data)
    parts = [f"<h1>{_esc(title)}</h1>", *_verdict_html(data, v)]
    parts.append("<h2>The judge</h2>")
    parts.append(
        _table(
            [
                ["task", data.get("task_name")],
                ["aspect", data.get("aspect")],
                ["mode", data.get("mode")],
                ["model", data.get("model") or "not recorded"],
                [
                    "search",
                    f"{search.get('search')}, {search.get('evaluations')} evaluations, "
                    f"seed {search.get('seed')}, {search.get('metric')}"
                    if search
                    else "none (not compiled)",
                ],
                ["judgeopt", data.get("judgeopt_version")],
            ]
        )
    )
    parts.append("<h2>Chosen strategy</h2>")
    parts.append(
        _table(sorted((k, v) for k, v in (data.get("strategy") or {}).items()), ["factor", "value"])
    )
    parts += _results(data)
    parts += _robustness_html(data)
    parts += _figures_html(files, absent)
    messages = data.get("messages") or (
        [{"role": "user", "content": data.get("template")}] if data.get("template") else []
    )
    if messages:
        parts.append("<h2>The chosen prompt</h2>")
        if data.get("placeholders"):
            parts.append(
                "<p>Placeholders: "
                + ", ".join(f"<code>{{{_esc(p)}}}</code>" for p in data["placeholders"])
                + "</p>"
            )
        for m in messages:
            parts.append(f"<h3>{_esc(m.get('role'))}</h3><pre>{_esc(m.get('content'))}</pre>")
    style = (
        "body{font-family:sans-serif;max-width:64em;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
        "padding:.2em .6em;text-align:left}th{background:#f3f3f3}"
        "pre{white-space:pre-wrap;background:#f6f6f6;padding:.6em}img{max-width:100%}"
        ".verdict{border:2px solid #4477aa;border-radius:6px;padding:.2em 1em 1em;"
        "margin:1em 0 2em}.verdict.bad{border-color:#cc3344;background:#fff4f4}"
        ".verdict.good{border-color:#228833;background:#f4fff4}.verdict h2{margin:.4em 0}"
        ".verdict.bad h2{color:#aa2233}.problems li{margin:.3em 0}"
        ".note{color:#555;font-size:90%}.absent{color:#555;font-style:italic}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_esc(title)}</title><style>{style}</style></head><body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
