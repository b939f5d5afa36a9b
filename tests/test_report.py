"""The compile report: self-contained HTML and PNG figures, validated without a browser."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from judgeopt.cli import main
from judgeopt.report import factor_effects, write_judge_report
from judgeopt.testing import ScriptedLM

mpimg = pytest.importorskip("matplotlib.image")

PNG = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    """Collects images, headings and checks that tags are balanced."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.images: dict[str, str] = {}
        self.headings: list[str] = []
        self._in: str | None = None
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.images[str(a.get("id"))] = str(a.get("src"))
        if tag not in self.VOID:
            self.stack.append(tag)
        self._in = tag

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unbalanced </{tag}> (open: {self.stack[-3:]})")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self._in in ("h1", "h2", "h3") and data.strip():
            self.headings.append(data.strip())


def rate(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1]["content"])
    m = re.search(r"scale of (\d+) to (\d+)", text)
    hi = int(m.group(2)) if m else 3
    return f"<b>Fine</b> & done. Rating: [[{1 + len(text) % hi}]]"


def check_page(index: Path, want: set[str]) -> _Page:
    page = _Page()
    page.feed(index.read_text(encoding="utf-8"))
    page.close()
    assert not page.errors and not page.stack, (page.errors, page.stack)
    assert set(page.images) == {f"fig-{n}" for n in want}
    for name, src in page.images.items():
        assert src.startswith("data:image/png;base64,"), name  # self-contained
        raw = base64.b64decode(src.split(",", 1)[1])
        assert raw.startswith(PNG)
        img = mpimg.imread(io.BytesIO(raw), format="png")
        assert img.shape[0] > 100 and img.shape[1] > 200 and img.std() > 0.01  # not blank
        png = index.parent / f"{name.removeprefix('fig-')}.png"
        assert png.read_bytes() == raw  # the same PNG on disk
    return page


def test_compile_writes_a_report_and_report_command(
    shared_data: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    import judgeopt.lm

    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda m, **kw: ScriptedLM(rate).lm)
    data = shared_data / "topical_chat" / "valid.jsonl"
    test = shared_data / "topical_chat" / "test.jsonl"
    out = tmp_path / "judge.json"
    rc = main(
        [
            "compile",
            "--task",
            "topical_chat",
            "--aspect",
            "naturalness",
            "--data",
            str(data),
            "--limit",
            "16",
            "--test-data",
            str(test),
            "--test-limit",
            "12",
            "--optimizer",
            "quick",
            "--budget",
            "4",
            "--selection",
            "best",
            "--out",
            str(out),
            "--no-progress",
            "--model",
            "openai/x",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    index = tmp_path / "judge.report" / "index.html"
    assert index.is_file()
    page = check_page(index, {"trace", "factors", "gain", "scatter"})
    assert {"Chosen strategy", "Gain over the baseline", "The chosen prompt"} <= set(page.headings)
    exported = json.loads(out.read_text())
    assert len(exported["test_items"]) == 12
    assert exported["comparisons"]["test"]["n"] == 12
    # `judgeopt report` from the file alone gives the same figures.
    shutil.rmtree(tmp_path / "judge.report")
    assert main(["report", str(out), "--out", str(tmp_path / "r")]) == 0
    check_page(tmp_path / "r" / "index.html", {"trace", "factors", "gain", "scatter"})
    effects = json.loads((tmp_path / "r" / "report.json").read_text())["factor_effects"]
    assert set(effects) >= {"scale", "cot"}
    # --no-report writes none.
    rc = main(
        [
            "compile",
            "--task",
            "topical_chat",
            "--aspect",
            "naturalness",
            "--data",
            str(data),
            "--limit",
            "16",
            "--optimizer",
            "quick",
            "--budget",
            "2",
            "--selection",
            "best",
            "--out",
            str(tmp_path / "j2.json"),
            "--no-progress",
            "--model",
            "openai/x",
            "--no-report",
        ]
    )
    assert rc == 0 and not (tmp_path / "j2.report").exists()


def test_report_of_a_judge_without_search_and_errors(tmp_path: Path, capsys) -> None:
    from judgeopt.judge import JudgeProgram, load_task

    judge = JudgeProgram(load_task("summeval"), "coherence")
    files = write_judge_report(judge, tmp_path / "bare")
    assert files[0].name == "index.html"
    check_page(files[0], set())
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "not found" in capsys.readouterr().err
    ens = tmp_path / "ens.json"
    ens.write_text(json.dumps({"format": "judgeopt-ensemble", "format_version": 1}))
    assert main(["report", str(ens)]) == 2
    assert "single.json" in capsys.readouterr().err


def test_factor_effects_means_and_intervals() -> None:
    trace = [
        {"strategy": {"scale": 3, "cot": "none"}, "score": 0.2},
        {"strategy": {"scale": 3, "cot": "prefix"}, "score": 0.4},
        {"strategy": {"scale": 10, "cot": "none"}, "score": None},
        {"strategy": {"scale": 10, "cot": "prefix"}, "score": 0.6},
    ]
    eff = factor_effects(trace)
    scale3 = eff["scale"][0]
    assert scale3["value"] == "3" and scale3["n"] == 2 and scale3["mean"] == pytest.approx(0.3)
    assert scale3["lo"] < 0.3 < scale3["hi"]
    assert eff["scale"][1] == {"value": "10", "n": 1, "mean": 0.6, "lo": None, "hi": None}


# --- The verdict first, in plain HTML and in a real browser (issue 34, points 3 and 4) ---------


def _compile(shared_data: Path, out: Path, unparsed: bool) -> int:
    """``judgeopt compile`` with a scripted LM; ``unparsed``: 4 answers in 5 give no rating."""
    import judgeopt.lm

    calls = [0]

    def respond(messages: list[dict[str, Any]]) -> str:
        calls[0] += 1
        if unparsed and calls[0] % 5:
            return "I cannot decide."
        return rate(messages)

    data = shared_data / "topical_chat"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(judgeopt.lm, "make_lm", lambda m, **kw: ScriptedLM(respond).lm)
        return main(
            [
                "compile",
                "--task",
                "topical_chat",
                "--aspect",
                "naturalness",
                "--data",
                str(data / "valid.jsonl"),
                "--limit",
                "16",
                "--test-data",
                str(data / "test.jsonl"),
                "--test-limit",
                "12",
                "--optimizer",
                "quick",
                "--budget",
                "4",
                "--selection",
                "best",
                "--out",
                str(out),
                "--no-progress",
                "--model",
                "openai/x",
            ]
        )


@pytest.fixture(scope="module")
def compiled(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A good compile (exit 0) and a failed one (exit 1: most answers unparsed)."""
    root = tmp_path_factory.mktemp("compiled")
    assert _compile(shared_data, root / "good" / "judge.json", unparsed=False) == 0
    assert _compile(shared_data, root / "bad" / "judge.json", unparsed=True) == 1
    return {"good": root / "good" / "judge.json", "bad": root / "bad" / "judge.json"}


class _Text(HTMLParser):
    """The page's text in order, and its table headers."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []
        self.headers: list[str] = []
        self._th = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "th":
            self._th, self.headers = True, [*self.headers, ""]

    def handle_endtag(self, tag: str) -> None:
        if tag == "th":
            self._th = False

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.chunks.append(data.strip())
        if self._th:
            self.headers[-1] += data


def _text(index: Path) -> tuple[str, list[str]]:
    parser = _Text()
    parser.feed(index.read_text(encoding="utf-8"))
    return " ".join(parser.chunks), parser.headers


def _sign(x: float) -> str:
    return f"{x:+.3f}"


def test_report_of_a_failed_compile_leads_with_its_problems(compiled: dict[str, Path]) -> None:
    """The page of a compile that exited 1 (81 % unparsed) opens with "Not trustworthy", every
    problem, the selection's message and each passed-over strategy, before anything else."""
    judge = json.loads(compiled["bad"].read_text())
    problems = judge["search"]["problems"]
    excluded = judge["selection"]["excluded"]
    assert problems and excluded  # the scripted failure happened
    index = compiled["bad"].with_name("judge.report") / "index.html"  # written by compile
    page = check_page(index, {"trace", "factors", "gain", "scatter"})
    assert page.headings[1].startswith("Not trustworthy: the compile reported 2 problems")
    text, headers = _text(index)
    details = text.index("The judge")
    for line in [*problems, *judge["selection"]["messages"]]:
        assert 0 < text.index(line) < details, line
    for e in excluded:
        assert f"{e['key']} " in text[:details] and f"{e['unrated']} of {e['n']}" in text
    # The undefined test gain is said in words; no Python None, no empty table header.
    assert "None" not in text and "nan" not in text.split()
    assert "gain undefined" in text[:details]
    assert all(h.strip() for h in headers), headers
    # `judgeopt report` says the same.
    out = compiled["bad"].parent / "r"
    assert main(["report", str(compiled["bad"]), "--out", str(out)]) == 0
    assert json.loads((out / "report.json").read_text())["verdict"]["state"] == "untrustworthy"
    assert _text(out / "index.html")[0][:details] == text[:details]


def test_report_of_a_good_compile_leads_with_the_gain(compiled: dict[str, Path]) -> None:
    judge = json.loads(compiled["good"].read_text())
    index = compiled["good"].with_name("judge.report") / "index.html"
    text, headers = _text(index)
    details = text.index("The judge")
    test = judge["comparisons"]["test"]
    lo, hi = test["gain_ci"]
    assert "baseline on test" in text[:details]
    assert f"test 12 {test['baseline']['score']:.3f} {test['chosen']['score']:.3f}" in text
    assert f"{_sign(test['gain'])} [{_sign(lo)}, {_sign(hi)}]" in text[:details]
    assert "Not trustworthy" not in text and "None" not in text
    assert all(h.strip() for h in headers), headers
    # Each judge's cost per judged item, before the details.
    cost = judge["selection"]["cost_per_item"]
    assert "Cost per judged item" in text[:details]
    base = cost["baseline"]
    row = f"baseline {base['calls']:,.0f} {base['prompt_tokens']:,.0f} "
    assert row in text[:details], row


def test_a_kept_baseline_is_said_to_be_the_baseline() -> None:
    """A judge that is the baseline itself is not "not distinguishable from the baseline":
    the verdict says the baseline was kept (an ensemble, or a compile with problems, keeps its
    own verdict)."""
    from judgeopt.report._page import verdict

    comp = {"gain": 0.0, "gain_ci": [0.0, 0.0], "baseline": {}, "chosen": {}}
    data: dict[str, Any] = {"selection": {"kept_baseline": True}, "comparisons": {"test": comp}}
    kept = verdict(data)
    assert kept["state"] == "baseline" and kept["headline"].startswith("The baseline was kept")
    data["selection"]["kept_baseline"] = False
    assert verdict(data)["state"] == "within noise"
    data["selection"]["kept_baseline"] = True
    assert verdict({**data, "members": [{}]})["state"] == "within noise"
    bad = verdict({**data, "search": {"problems": ["most answers unparsed"]}})
    assert bad["state"] == "untrustworthy"


def test_absent_figures_are_explained(tmp_path: Path, monkeypatch) -> None:
    from judgeopt.judge import JudgeProgram, load_task

    data = JudgeProgram(load_task("topical_chat"), "naturalness").export()
    files = write_judge_report(data, tmp_path / "bare")
    text, _ = _text(files[0])
    assert "No trace figure: the judge file has no search trace" in text
    assert "No scatter figure: the judge has no test items (compile with --test-data" in text
    assert "None" not in text
    write_judge_report(data, tmp_path / "nofig", figures=False)
    assert (
        "No gain figure: figures were not asked for" in _text(tmp_path / "nofig" / "index.html")[0]
    )
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # matplotlib not installed
    write_judge_report(data, tmp_path / "nompl")
    assert "matplotlib is not installed" in _text(tmp_path / "nompl" / "index.html")[0]


def test_scatter_axes_are_the_rating_scale_and_factor_intervals_drawn() -> None:
    """Two ratings of 3 on a 1-3 scale are drawn on a y axis from about 1 to 3, not 2.92..2.93;
    each factor value seen twice or more gets its interval bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from judgeopt.report._figures import _factors, _scatter

    data = {
        "task": {"score_range": [1.0, 5.0], "aspects": {"a": {"score_range": None}}},
        "aspect": "a",
        "scoring": {"rating_min": 1, "rating_max": 3},
        "test_items": [{"human": 2.0, "score": 3.0}, {"human": 4.5, "score": 3.0}],
    }
    ax = _scatter(plt, data).axes[0]
    y0, y1 = ax.get_ylim()
    x0, x1 = ax.get_xlim()
    assert y0 <= 1 and y1 >= 3 and y1 - y0 < 2.5
    assert x0 <= 1 and x1 >= 5
    trace = [
        {"number": i, "strategy": {"scale": s, "cot": c}, "score": x}
        for i, (s, c, x) in enumerate(
            [(3, "none", 0.1), (10, "none", 0.3), (3, "prefix", 0.2), (5, "prefix", 0.25)]
        )
    ]
    fig = _factors(plt, {"search": {"trace": trace, "metric": "spearman"}})
    bars = sum(
        len(c.get_segments())
        for ax in fig.axes
        for c in ax.collections
        if isinstance(c, matplotlib.collections.LineCollection)
    )
    assert bars == 3  # scale=3, cot=none, cot=prefix (n=2 each); scale 10 and 5 seen once
    plt.close("all")


# --- In a real browser -------------------------------------------------------------------------

CHROMIUM = next(
    (shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)),
    None,
)

#: Appended to a copy of the page: after load, the rendered text and each image's natural width.
PROBE = """<script>
window.addEventListener("load", () => {
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({
    text: document.body.innerText,
    images: Array.from(document.images).map(i => [i.id, i.complete, i.naturalWidth]),
  });
  document.body.appendChild(out);
});
</script>"""


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _in_browser(index: Path, shot: Path) -> tuple[dict[str, Any], list[str]]:
    """Screenshot ``index`` and return what the probe saw and the console messages."""
    run = _chromium("--window-size=1100,1600", f"--screenshot={shot}", index.resolve().as_uri())
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    probe = index.with_name("probe.html")
    probe.write_text(
        index.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8"
    )
    dom = _chromium("--dump-dom", probe.resolve().as_uri())
    console += [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert m, dom.stdout[-2000:] + dom.stderr[-2000:]
    return json.loads(html.unescape(m.group(1))), console


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")
def test_report_in_a_headless_browser(compiled: dict[str, Path], tmp_path: Path) -> None:
    """Both reports open in headless Chromium: a screenshot, the verdict with the gain and its
    interval in the rendered text, every figure loaded, no console message."""
    for name in ("good", "bad"):
        judge = json.loads(compiled[name].read_text())
        index = compiled[name].with_name("judge.report") / "index.html"
        shot = tmp_path / f"{name}.png"
        seen, console = _in_browser(index, shot)
        assert shot.read_bytes().startswith(PNG) and shot.stat().st_size > 20_000
        assert not console, console
        ids = {i[0] for i in seen["images"]}
        assert ids == {"fig-trace", "fig-factors", "fig-gain", "fig-scatter"}
        assert all(complete and width > 0 for _, complete, width in seen["images"])
        text = seen["text"]
        details = text.index("The judge")
        for split, c in judge["comparisons"].items():  # the verdict's rows, as rendered
            cells = [split, str(c["n"])]
            if c["gain"] is None:
                cells += ["undefined"] * 3 + ["none (gain undefined)"]
            else:
                lo, hi = c["gain_ci"]
                cells += [f"{c['baseline']['score']:.3f}", f"{c['chosen']['score']:.3f}"]
                cells += [_sign(c["gain"]), f"[{_sign(lo)}, {_sign(hi)}]"]
            assert "\t".join(cells) in text[:details], (cells, text[:details])
        if name == "bad":
            assert text.index("Not trustworthy") < text.index("Chosen:") < details
            for line in judge["search"]["problems"]:
                assert line in text[:details]
        else:
            assert "baseline on test" in text[:details] and "Not trustworthy" not in text
