"""The compile report: self-contained HTML and PNG figures, validated without a browser."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
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


def test_report_renders_in_a_headless_browser(tmp_path: Path) -> None:
    """Only where Playwright and its Chromium are installed (not installed here: skipped)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    trace = [
        {"number": i, "strategy": {"scale": s, "cot": c}, "score": x}
        for i, (s, c, x) in enumerate(
            [(3, "none", 0.1), (10, "none", 0.3), (3, "prefix", 0.2), (10, "prefix", 0.25)]
        )
    ]
    from judgeopt.judge import JudgeProgram, load_task

    data = JudgeProgram(load_task("topical_chat"), "naturalness").export()
    data["search"] = {"search": "hpss", "metric": "spearman", "trace": trace}
    files = write_judge_report(data, tmp_path / "r")
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch()
            page = browser.new_page()
            page.goto(files[0].resolve().as_uri())
            widths = page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)")
            browser.close()
    except Exception as e:  # noqa: BLE001 - no browser binary installed
        pytest.skip(f"no headless Chromium: {e}")
    assert widths and all(w > 100 for w in widths)
