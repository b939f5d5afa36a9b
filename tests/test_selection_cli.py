"""`judgeopt compile` from the command line: gains, ensembles, the guard, selection rules
and SIGTERM with resume (scripted LM in place of the model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _selection_scripts import ASPECT, respond_with, sigterm_lm, topical_records, write_preset
from judgeopt.data import load_records
from judgeopt.testing import ScriptedLM


@pytest.fixture(scope="module")
def records(shared_data: Path) -> Any:
    return topical_records(shared_data)


def _check_cost_lines(printed: str) -> None:
    """Each judge's cost per judged item, the ensemble marked as the judge written."""
    lines = printed.splitlines()
    at = lines.index("cost per judged item (the search's own calls; wall time at its concurrency):")
    assert lines[at + 1].startswith("  baseline  1 call, about ")
    assert lines[at + 2].startswith("  chosen    1 call, about ")
    assert lines[at + 3].startswith("  ensemble  2 calls, about ")
    assert lines[at + 3].endswith("s  (the judge written)")


def test_cli_compile_reports_gains_ensemble_and_evaluate_compare(
    shared_data: Path, records, tmp_path: Path, monkeypatch, capsys
) -> None:
    import judgeopt.lm
    from judgeopt.cli import main

    fakes: list[ScriptedLM] = []

    def fake_make_lm(model: str, **kw: Any) -> Any:
        fakes.append(ScriptedLM(respond_with(records + test_records, "scale10")))
        return fakes[-1].lm

    test_records = load_records(shared_data / "topical_chat" / "test.jsonl")[:40]
    monkeypatch.setattr(judgeopt.lm, "make_lm", fake_make_lm)
    valid = str(shared_data / "topical_chat" / "valid.jsonl")
    test = str(shared_data / "topical_chat" / "test.jsonl")
    out = tmp_path / "judge.json"
    space = write_preset(tmp_path, budget=6)
    rc = main(
        [
            "compile",
            "--task",
            "topical_chat",
            "--aspect",
            ASPECT,
            "--data",
            valid,
            "--limit",
            "96",
            "--test-data",
            test,
            "--test-limit",
            "40",
            "--optimizer",
            str(space),
            "--ensemble",
            "2",
            "--selection",
            "confirm",
            "--model",
            "scripted",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "selection: finalist" in printed and "confirmed" in printed
    assert "confirmation (47 items" in printed and "test (40 items" in printed
    assert "95% interval" in printed and "ensemble of 2 strategies" in printed
    _check_cost_lines(printed)
    ens = json.loads(out.read_text())
    single = json.loads((tmp_path / "judge.single.json").read_text())
    assert ens["format"] == "judgeopt-ensemble" and len(ens["members"]) == 2
    assert set(ens["comparisons"]) == {"confirmation", "test"}
    assert set(single["comparisons"]) == {"confirmation", "test"}
    t = single["comparisons"]["test"]
    assert t["n"] == 40 and t["baseline"]["label"] == "baseline" and t["gain"] > 0
    assert t["gain_ci"][0] <= t["gain"] <= t["gain_ci"][1]
    assert single["selection"]["rule"] == "confirm" and single["test"]["n"] == 40
    # evaluate --baseline / --compare, on an ensemble file too.
    summary = tmp_path / "cmp.json"
    assert (
        main(
            [
                "evaluate",
                str(tmp_path / "judge.single.json"),
                "--data",
                test,
                "--limit",
                "40",
                "--baseline",
                "--json",
                str(summary),
                "--no-progress",
            ]
        )
        == 0
    )
    cmp = json.loads(summary.read_text())
    assert cmp["comparison"]["gain"] == pytest.approx(t["gain"])
    assert "(better)" in capsys.readouterr().out
    assert (
        main(
            [
                "evaluate",
                str(out),
                "--data",
                test,
                "--limit",
                "40",
                "--compare",
                str(tmp_path / "judge.single.json"),
                "--json",
                str(summary),
                "--no-progress",
            ]
        )
        == 0
    )
    cmp = json.loads(summary.read_text())
    assert cmp["comparison"]["chosen"]["label"] == "judge.json"
    assert cmp["comparison"]["baseline"]["label"] == "judge.single.json"
    assert cmp["judge"]["spearman"] == pytest.approx(ens["test"]["spearman"])
    with pytest.raises(SystemExit):
        main(["evaluate", str(out), "--data", test, "--baseline", "--compare", str(out)])
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    assert "member 2" in capsys.readouterr().out
    # --selection veto: the summary says what the rule did, the export records it.
    vetoed = tmp_path / "veto.json"
    assert (
        main(
            [
                "compile",
                "--task",
                "topical_chat",
                "--aspect",
                ASPECT,
                "--data",
                valid,
                "--limit",
                "96",
                "--optimizer",
                str(space),
                "--selection",
                "veto",
                "--model",
                "scripted",
                "--out",
                str(vetoed),
                "--no-progress",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "on 49 search items" in printed and "confirmation (47 items" in printed
    assert "selection: the search's best" in printed and "is kept" in printed
    data = json.loads(vetoed.read_text())
    assert data["selection"]["rule"] == "veto" and len(data["selection"]["finalists"]) == 1


def _scripted_compile(
    shared_data: Path, records, tmp_path: Path, monkeypatch, out: Path
) -> list[str]:
    """``judgeopt compile`` arguments for Topical-Chat naturalness on 96 validation items,
    a budget-6 preset and a scripted model (every LM the CLI makes answers by
    :func:`respond_with` ``scale10``), writing ``out`` without a report."""
    import judgeopt.lm

    monkeypatch.setattr(
        judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(respond_with(records, "scale10")).lm
    )
    data_file = str(shared_data / "topical_chat" / "valid.jsonl")
    args = ["compile", "--task", "topical_chat", "--aspect", ASPECT, "--data", data_file]
    args += ["--limit", "96", "--optimizer", str(write_preset(tmp_path, budget=6))]
    return args + ["--model", "scripted", "--out", str(out), "--no-progress", "--no-report"]


def test_cli_compile_with_the_guard(
    shared_data: Path, records, tmp_path: Path, monkeypatch
) -> None:
    """``--guard`` with ``--selection best --ensemble 2 --ensemble-anchor 0.4``: the
    ensemble is cross-fitted, kept, written to OUT; the single judge's record says so."""
    from judgeopt.cli import main

    out = tmp_path / "guarded.json"
    args = _scripted_compile(shared_data, records, tmp_path, monkeypatch, out)
    args += ["--selection", "best", "--ensemble", "2", "--ensemble-anchor", "0.4", "--guard"]
    assert main(args) == 0
    assert json.loads(out.read_text())["format"] == "judgeopt-ensemble"
    single = json.loads(out.with_name("guarded.single.json").read_text())
    assert single["selection"]["guard"]["passed"] is True


def test_cli_compile_frugal_writes_the_single_judge_or_names_what_it_needs(
    shared_data: Path, records, tmp_path: Path, monkeypatch, capsys
) -> None:
    """``--frugal TOL`` with ``--selection best --guard`` and a stacked ``--ensemble``: the
    guard's record says what the single judge gained cross-fitted against the ensemble, and
    exactly when it says "single" no ensemble is written. Without the guard and rule best
    the option is refused, naming both."""
    from judgeopt.cli import main

    out = tmp_path / "frugal.json"
    args = _scripted_compile(shared_data, records, tmp_path, monkeypatch, out)
    stack = ["--selection", "best", "--guard", "--ensemble", "2", "--ensemble-stack", "10"]
    for tol in ("0.9", "0"):  # almost any single judge above the margin; then no slack
        assert main([*args, *stack, "--frugal", tol]) == 0
        printed = capsys.readouterr().out
        written = json.loads(out.read_text())
        if written.get("format") == "judgeopt-ensemble":
            record = json.loads(out.with_name("frugal.single.json").read_text())["selection"]
        else:
            record = written["selection"]
        frugal = record["guard"]["frugal"]
        assert frugal["tolerance"] == float(tol)
        assert "selection: frugal: rule best's judge" in printed
        assert frugal["single"] == (written.get("format") != "judgeopt-ensemble")
        if tol == "0.9":  # the single judge is written whenever it clears the margin
            assert frugal["single"] is (frugal["single_crossfit_gain"] > 0)
        out.unlink()
    assert main([*args, "--frugal", "0.02"]) != 0
    err = capsys.readouterr().err
    assert "error: selection.frugal=0.02 needs guard = true and rule 'best'" in err, err
    assert "got guard=False, rule='lcb'" in err and "pydantic" not in err


def test_cli_compile_with_selection_shrink(
    shared_data: Path, records, tmp_path: Path, monkeypatch, capsys
) -> None:
    """``--selection shrink``: the search sees every item, the summary says which rule
    chose and why, the export records it."""
    import judgeopt.lm
    from judgeopt.cli import main

    def fake_make_lm(model: str, **kw: Any) -> Any:
        return ScriptedLM(respond_with(records, "scale10")).lm

    monkeypatch.setattr(judgeopt.lm, "make_lm", fake_make_lm)
    out = tmp_path / "shrink.json"
    rc = main(
        [
            "compile",
            "--task",
            "topical_chat",
            "--aspect",
            ASPECT,
            "--data",
            str(shared_data / "topical_chat" / "valid.jsonl"),
            "--limit",
            "96",
            "--optimizer",
            str(write_preset(tmp_path, budget=6)),
            "--selection",
            "shrink",
            "--model",
            "scripted",
            "--out",
            str(out),
            "--no-progress",
            "--no-report",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    sel = data["selection"]
    assert sel["rule"] == "shrink" and sel["chosen"] is not None
    key = sel["candidates"][sel["chosen"]]["key"]
    assert "on 96 validation items" in printed and "confirmation:" not in printed
    assert (
        f"selection: rule shrink (empirical-Bayes shrunk gain over the baseline) chose {key}: "
        "shrunk gain +"
    ) in printed
    assert "validation (96 items" in printed
    assert data["strategy"]["scale"] == 10
    with pytest.raises(SystemExit):
        main(["compile", "--task", "topical_chat", "--aspect", ASPECT, "--data", "x",
              "--selection", "median", "--out", str(out)])  # fmt: skip
    assert "invalid choice: 'median'" in capsys.readouterr().err


def test_cli_compile_stops_on_sigterm_and_says_how_to_resume(
    shared_data: Path, records, tmp_path: Path, monkeypatch, capsys
) -> None:
    """SIGTERM mid-compile: exit 130, a line naming the checkpoint, the previous handler
    back; the same command then finishes without repeating the finished judgements."""
    import signal

    import judgeopt.lm
    from judgeopt._signals import interrupt_reason
    from judgeopt.cli import main

    state, fakes, fake_make_lm = sigterm_lm(respond_with(records, "scale10"))
    monkeypatch.setattr(judgeopt.lm, "make_lm", fake_make_lm)
    preset = write_preset(tmp_path, budget=6)

    def compile_args(name: str) -> list[str]:
        return [
            "compile",
            "--task",
            "topical_chat",
            "--aspect",
            ASPECT,
            "--data",
            str(shared_data / "topical_chat" / "valid.jsonl"),
            "--limit",
            "96",
            "--optimizer",
            str(preset),
            "--model",
            "scripted",
            "--out",
            str(tmp_path / f"{name}.json"),
            "--no-progress",
            "--threads",
            "2",
        ]

    assert main(compile_args("ref")) == 0
    n_ref = len(fakes[-1].judge_requests)
    state.update(n=0, kill_at=n_ref // 2)
    capsys.readouterr()
    assert main(compile_args("run")) == 130
    err = capsys.readouterr().err
    assert "judgeopt compile: stopped (SIGTERM); the judgements made so far for " in err
    assert f"{tmp_path / 'run.json'}.ckpt: run the same command to resume" in err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert not (tmp_path / "run.json").exists()
    first = len(fakes[-1].judge_requests)
    assert 0 < first < n_ref
    state.update(n=0, kill_at=0)
    assert main(compile_args("run")) == 0
    # Only the calls in flight are repeated (measured: 1-3 with 2 threads). The scripted LM
    # answers at once, so its workers finish many items while the signal waits for the
    # main thread: those are recorded on the way out (without that, 9-19 were repeated).
    assert first + len(fakes[-1].judge_requests) <= n_ref + 4
    ref, run = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("ref", "run"))
    assert run["strategy"] == ref["strategy"]
    assert interrupt_reason(KeyboardInterrupt()) == "Ctrl-C"
