"""`judgeopt grid` and run_grid: selection, tables, items, resume (scripted LM), and one
real-model run (slow)."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from judgeopt.cli import main
from judgeopt.data import Record, load_records
from judgeopt.evaluate import evaluate
from judgeopt.grid import (
    GridError,
    load_grid_config,
    parse_factor_options,
    run_grid,
    select_subspace,
    table_columns,
)
from judgeopt.judge import JudgeProgram, PrExMeProgram, load_task, prexme_space
from judgeopt.testing import ScriptedLM, ScriptedServer

SUB = {
    "base_prompt": ["PZS", "ZS-CoT"],
    "task_description": ["Neutral", "Threat"],
    "format_requirement": ["0 to 100", "easy token labels"],
}


@pytest.fixture(scope="module")
def data_file(shared_data: Path) -> Path:
    return shared_data / "eval4nlp2023" / "dev_zh_en.jsonl"


@pytest.fixture(scope="module")
def records(data_file: Path) -> list[Record]:
    return load_records(data_file, limit=6)


def respond(messages: list[dict[str, Any]]) -> str:
    """A deterministic judge: a number or label from the translation's length."""
    text = str(messages[-1]["content"])
    hyp = text.split("\nTranslation: ")[-1].split(" \n")[0]
    if "bad" in text and '"good"' in text:
        return ["bad", "neutral", "good"][len(hyp) % 3]
    if "delete your program" in text and len(hyp) % 4 == 0:
        return "I refuse."
    return f"Score: {len(hyp) % 97}"


def read_table(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def read_items(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------------------ selection


def test_parse_factor_options_and_select_subspace() -> None:
    sel = parse_factor_options(
        [
            "base_prompt=ZS-CoT,PZS",
            "format_requirement=simple labels",
            "format_requirement=0 to 100, simple labels",
        ]
    )
    assert sel == {
        "base_prompt": ["ZS-CoT", "PZS"],
        "format_requirement": ["simple labels", "0 to 100"],
    }
    sub = select_subspace(prexme_space(), sel)
    # Values stay in the space's order; unnamed factors keep all values.
    assert sub["base_prompt"].values == ("PZS", "ZS-CoT")
    assert sub["format_requirement"].values == ("0 to 100", "easy token labels")
    assert len(sub["task_description"].values) == 24 and sub.size == 96
    assert select_subspace(prexme_space(), {"base_prompt": "all"}).size == 1440
    with pytest.raises(GridError, match="Unknown factor"):
        select_subspace(prexme_space(), {"scale": ["3"]})
    with pytest.raises(GridError, match="Allowed values"):
        select_subspace(prexme_space(), {"base_prompt": ["PZS", "FS"]})
    with pytest.raises(GridError, match="NAME=VALUE"):
        parse_factor_options(["base_prompt"])


def test_select_subspace_parses_numbers_of_hpss_factors() -> None:
    from judgeopt.judge import hpss_space

    sub = select_subspace(
        hpss_space(load_task("topical_chat")), {"scale": ["10", "3"], "examples": [0]}
    )
    assert sub["scale"].values == (3, 10) and sub["examples"].values == (0,)


def test_grid_toml(tmp_path: Path) -> None:
    path = tmp_path / "grid.toml"
    path.write_text(
        'task = "zh_en"\n[factors]\nbase_prompt = ["PZS"]\nformat_requirement = "all"\n',
        encoding="utf-8",
    )
    cfg = load_grid_config(path)
    assert cfg.task == "zh_en" and cfg.factors["base_prompt"] == ["PZS"]
    path.write_text('tasks = "zh_en"\n', encoding="utf-8")
    with pytest.raises(GridError, match="tasks"):
        load_grid_config(path)


# ----------------------------------------------------------------------------------- runs


def test_run_grid_writes_table_and_items(tmp_path: Path, records: list[Record]) -> None:
    fake = ScriptedLM(respond)
    program = PrExMeProgram("zh_en", lm=fake.lm)
    space = select_subspace(program.space, SUB)
    res = run_grid(
        program,
        records,
        table=tmp_path / "t.csv",
        space=space,
        dataset="dev_zh_en",
        model="scripted",
        progress=False,
    )
    assert (res.evaluated, res.skipped, res.calls) == (8, 0, 8 * len(records))
    rows = read_table(tmp_path / "t.csv")
    assert list(rows[0]) == table_columns(space)
    assert len(rows) == 8 and {r["task"] for r in rows} == {"zh_en"}
    assert [(r["base_prompt"], r["task_description"], r["format_requirement"]) for r in rows] == [
        tuple(s.values()) for s in space.strategies()
    ]
    items = read_items(tmp_path / "t.items.jsonl")
    assert len(items) == 8 * len(records)
    assert set(items[0]) == {
        "model",
        "dataset",
        "task",
        "base_prompt",
        "task_description",
        "format_requirement",
        "strategy",
        "id",
        "judge_score",
        "human_score",
        "parsed",
        "error",
    }
    # Each row equals a direct evaluate() of its strategy; items fill unparsed scores with
    # the template average, and the counts agree.
    for row in rows:
        s = {k: row[k] for k in SUB}
        direct = evaluate(program.with_strategy(s), records, progress=False)
        assert float(row["kendall"] or "nan") == pytest.approx(
            direct.kendall or float("nan"), nan_ok=True
        )
        assert int(row["n_unparsed"]) == direct.parse_failures
        assert int(row["n"]) == len(records) and row["n_failed"] == "0"
        mine = [i for i in items if i["strategy"] == row["strategy"]]
        assert [i["id"] for i in mine] == [r.id for r in records]
        assert sum(not i["parsed"] for i in mine) == direct.parse_failures
        parsed = [i["judge_score"] for i in mine if i["parsed"]]
        for i in mine:
            if not i["parsed"] and parsed:
                assert i["judge_score"] == pytest.approx(sum(parsed) / len(parsed))
    labels = [r for r in rows if r["format_requirement"] == "easy token labels"]
    assert all(r["n_unparsed"] == "0" for r in labels)
    assert res.best("kendall", k=1)[0]["kendall"] == max(
        (r["kendall"] for r in rows if r["kendall"]), key=float
    )


class Interrupt(Exception):
    pass


def test_killed_grid_resumes_without_redoing_finished_strategies(
    tmp_path: Path, records: list[Record]
) -> None:
    calls = {"n": 0}
    stop_after = 3 * len(records) + 2  # in the middle of the 4th strategy

    def dying(messages: list[dict[str, Any]]) -> str | BaseException:
        calls["n"] += 1
        if calls["n"] > stop_after:
            return KeyboardInterrupt()  # not an Exception: evaluate() cannot swallow it
        return respond(messages)

    program = PrExMeProgram("zh_en", lm=ScriptedLM(dying).lm)
    space = select_subspace(program.space, SUB)
    table, items = tmp_path / "t.csv", tmp_path / "items.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_grid(
            program,
            records,
            table=table,
            items=items,
            space=space,
            dataset="d",
            model="m",
            progress=False,
        )
    assert len(read_table(table)) == 3
    assert len(read_items(items)) == 3 * len(records)
    # A kill in the middle of a write leaves half a line in each file.
    with items.open("a", encoding="utf-8") as fh:
        fh.write('{"model": "m", "dataset": "d", "task": "zh_en", "strat')
    with table.open("a", encoding="utf-8") as fh:
        fh.write("m,d,zh_en,PZS,Thr")

    fresh = ScriptedLM(respond)
    res = run_grid(
        program.with_strategy(program.strategy),
        records,
        table=table,
        items=items,
        space=space,
        dataset="d",
        model="m",
        lm=fresh.lm,
        progress=False,
    )
    assert (res.evaluated, res.skipped) == (5, 3)
    # nothing finished was judged again (the run's check call is not a judgement)
    assert len(fresh.judge_requests) == 5 * len(records)
    rows = read_table(table)
    assert len(rows) == 8 and len({r["strategy"] for r in rows}) == 8
    lines = read_items(items)
    assert len(lines) == 8 * len(records)
    assert len({(i["strategy"], i["id"]) for i in lines}) == len(lines)
    # A third run has nothing left to do.
    again = run_grid(
        program,
        records,
        table=table,
        items=items,
        space=space,
        dataset="d",
        model="m",
        lm=ScriptedLM(respond).lm,
        progress=False,
    )
    assert (again.evaluated, again.skipped, again.calls) == (0, 8, 0)
    assert len(again.rows) == 8


def test_items_of_an_unfinished_strategy_are_dropped(tmp_path: Path, records: list[Record]) -> None:
    program = PrExMeProgram("zh_en", lm=ScriptedLM(respond).lm)
    space = select_subspace(program.space, {**SUB, "base_prompt": ["PZS"]})
    table = tmp_path / "t.csv"
    run_grid(program, records, table=table, space=space, dataset="d", model="m", progress=False)
    # Simulate a crash between the items and the row of the last strategy.
    text = table.read_text(encoding="utf-8").splitlines(keepends=True)
    table.write_text("".join(text[:-1]), encoding="utf-8")
    res = run_grid(
        program, records, table=table, space=space, dataset="d", model="m", progress=False
    )
    assert (res.evaluated, res.skipped) == (1, 3)
    lines = read_items(tmp_path / "t.items.jsonl")
    assert len(lines) == 4 * len(records)


def test_one_table_holds_several_models_but_not_two_samples(
    tmp_path: Path, records: list[Record]
) -> None:
    program = PrExMeProgram("zh_en", lm=ScriptedLM(respond).lm)
    space = select_subspace(
        program.space, {**SUB, "base_prompt": ["PZS"], "task_description": ["Neutral"]}
    )
    table = tmp_path / "t.csv"
    for model in ("m1", "m2"):
        run_grid(
            program, records, table=table, space=space, dataset="d", model=model, progress=False
        )
    assert [r["model"] for r in read_table(table)] == ["m1", "m1", "m2", "m2"]
    with pytest.raises(GridError, match="another sample"):
        run_grid(
            program, records[:4], table=table, space=space, dataset="d", model="m1", progress=False
        )
    other = select_subspace(prexme_space(), {})
    with pytest.raises(GridError, match="one-shot base prompt"):
        run_grid(
            program,
            records,
            table=tmp_path / "u.csv",
            space=other,
            dataset="d",
            model="m1",
            progress=False,
        )
    with pytest.raises(GridError, match="lack the human score"):
        bad = [Record("x", None, None, dict(records[0].inputs), {"da": 1.0})]
        run_grid(
            program,
            bad,
            table=tmp_path / "v.csv",
            space=space,
            dataset="d",
            model="m1",
            progress=False,
        )
    res = run_grid(
        program,
        records[:4],
        table=table,
        space=space,
        dataset="d",
        model="m1",
        progress=False,
        overwrite=True,
    )
    assert res.evaluated == 2 and len(read_table(table)) == 2


def test_grid_of_an_hpss_judge(tmp_path: Path, shared_data: Path) -> None:
    recs = load_records(shared_data / "topical_chat" / "valid.jsonl", limit=5)
    fake = ScriptedLM(lambda m: f"Rating: [[{1 + len(str(m[-1]['content'])) % 3}]]")
    program = JudgeProgram(load_task("topical_chat"), "naturalness", lm=fake.lm)
    space = select_subspace(
        program.space,
        {
            "scale": ["3", "5"],
            "examples": ["0"],
            "criteria": ["human"],
            "reference": ["none"],
            "cot": ["none"],
            "autocot": ["off"],
            "metrics": ["off"],
            "order": ["TD-ER-IC"],
            "decoding": ["greedy"],
        },
    )
    res = run_grid(
        program,
        recs,
        table=tmp_path / "h.csv",
        space=space,
        dataset="tc",
        model="m",
        progress=False,
    )
    rows = read_table(tmp_path / "h.csv")
    assert res.evaluated == 2 and [r["scale"] for r in rows] == ["3", "5"]
    assert rows[0]["task"] == "topical_chat:naturalness"


# ------------------------------------------------------------------------------------ CLI


@pytest.fixture
def scripted_cli(monkeypatch: pytest.MonkeyPatch) -> ScriptedLM:
    fake = ScriptedLM(respond)
    monkeypatch.setattr(
        "judgeopt.cli.load_lm",
        lambda args, default_model=None: (args.model or "local", fake.lm),
    )
    return fake


def test_cli_grid_factors_and_resume(
    tmp_path: Path, data_file: Path, scripted_cli: ScriptedLM, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.csv"
    argv = [
        "grid",
        "--data",
        str(data_file),
        "--limit",
        "5",
        "--out",
        str(out),
        "--factors",
        "base_prompt=PZS,ZS-CoT",
        "--factors",
        "task_description=Neutral",
        "--factors",
        "format_requirement=0 to 100,simple labels",
        "--model",
        "fake",
        "--no-progress",
    ]
    assert main(argv) == 0
    text = capsys.readouterr()
    assert "4 strategies evaluated, 0 already done; 20 LM calls" in text.out
    assert "grid: 4 strategies x 5 items of dev_zh_en with fake" in text.err
    rows = read_table(out)
    assert {r["task"] for r in rows} == {"zh_en"} and {r["dataset"] for r in rows} == {"dev_zh_en"}
    assert main(argv) == 0
    assert "0 strategies evaluated, 4 already done; 0 LM calls" in capsys.readouterr().out
    assert len(read_table(out)) == 4 and len(scripted_cli.judge_requests) == 20


def test_cli_grid_toml_and_errors(
    tmp_path: Path, data_file: Path, scripted_cli: ScriptedLM, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "space.toml"
    spec.write_text(
        'task = "zh_en"\n[factors]\nbase_prompt = ["POS"]\n'
        'task_description = ["Polite"]\nformat_requirement = ["0 or 1"]\n',
        encoding="utf-8",
    )
    base = ["grid", "--data", str(data_file), "--limit", "3", "--no-progress"]
    # One-shot prompts need examples.
    assert main([*base, "--space", str(spec), "--out", str(tmp_path / "a.csv")]) == 2
    assert "need --examples" in capsys.readouterr().err
    # With examples (the same file: never a demo with the item's own source).
    assert (
        main(
            [
                *base,
                "--space",
                str(spec),
                "--examples",
                str(data_file),
                "--out",
                str(tmp_path / "a.csv"),
                "--factors",
                "base_prompt=POS,PZS",
            ]
        )
        == 0
    )
    assert [r["base_prompt"] for r in read_table(tmp_path / "a.csv")] == ["PZS", "POS"]
    capsys.readouterr()
    # Without examples and without naming base prompts: the zero-shot ones only.
    assert (
        main(
            [
                *base,
                "--out",
                str(tmp_path / "b.csv"),
                "--factors",
                "task_description=Neutral",
                "--factors",
                "format_requirement=0 or 1",
            ]
        )
        == 0
    )
    assert "only the zero-shot base prompts" in capsys.readouterr().err
    assert len(read_table(tmp_path / "b.csv")) == 3
    for extra, message in [
        (["--factors", "base_prompt=XYZ"], "Allowed values"),
        (["--factors", "colour=red"], "Unknown factor"),
        (["--max-strategies", "10"], "more than --max-strategies"),
        (["--data", str(tmp_path / "x.jsonl")], "cannot tell the task"),
        # A signature task without --aspect: the message says to give one, and names them.
        (["--task", "topical_chat"], "is a signature task: give --aspect"),
    ]:
        assert main([*base, "--out", str(tmp_path / "c.csv"), *extra]) == 2
        assert message in capsys.readouterr().err, extra
    assert not (tmp_path / "c.csv").exists()


def test_cli_grid_dead_endpoint_exits_3_without_a_row(
    tmp_path: Path, data_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.csv"
    argv = [
        "grid",
        "--data",
        str(data_file),
        "--limit",
        "6",
        "--out",
        str(out),
        "--factors",
        "base_prompt=PZS",
        "--factors",
        "task_description=Neutral",
        "--factors",
        "format_requirement=0 to 100",
        "--no-progress",
    ]
    dead = ["--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1"]
    t0 = time.monotonic()
    status = main([*argv, *dead])
    err = capsys.readouterr().err
    assert status == 3 and time.monotonic() - t0 < 20
    assert "does not answer a check call made before the grid" in err and "127.0.0.1:9" in err
    assert "Traceback" not in err
    # Nothing was judged, so nothing is stored as a result: the re-run judges the strategy.
    assert not out.exists() or len(read_table(out)) == 0
    with ScriptedServer(reply=lambda body: respond(body["messages"])) as srv:
        assert main([*argv, "--model", "openai/x", "--api-base", srv.api_base]) == 0
    assert "1 strategies evaluated, 0 already done" in capsys.readouterr().out
    rows = read_table(out)
    assert len(rows) == 1 and rows[0]["n_failed"] == "0" and rows[0]["kendall"]


def test_cli_grid_endpoint_dying_mid_run_keeps_no_failed_row_and_resumes(
    tmp_path: Path,
    data_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = {"alive": True, "judged": 0}
    flaky: dict[str, int] = {}

    def dying(messages: list[dict[str, Any]]) -> str | BaseException:
        if not state["alive"]:
            return ConnectionRefusedError("refused")
        text = str(messages[-1]["content"])
        if "Translation:" in text:
            state["judged"] += 1
            if state["judged"] == 7:  # the second strategy's second item fails once
                flaky[text] = flaky.get(text, 0) + 1
                return ConnectionRefusedError("refused")
            if state["judged"] == 13:  # the endpoint dies in the third strategy
                state["alive"] = False
        return respond(messages)

    fake = ScriptedLM(dying)
    monkeypatch.setattr("judgeopt.cli.load_lm", lambda args, default_model=None: ("fake", fake.lm))
    out = tmp_path / "g.csv"
    argv = [
        "grid",
        "--data",
        str(data_file),
        "--limit",
        "5",
        "--out",
        str(out),
        "--factors",
        "base_prompt=PZS",
        "--factors",
        "task_description=Neutral,Threat",
        "--factors",
        "format_requirement=0 to 100,easy token labels",
        "--max-consecutive-failures",
        "3",
        "--no-progress",
    ]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "3 judge calls in a row failed" in err and "run the same command again" in err
    assert "2 of 4 finished" in err
    rows = read_table(out)
    # The flaky item was judged again, so its strategy has a full row; the dying one none.
    assert len(rows) == 2 and all(r["n_failed"] == "0" for r in rows)
    assert list(flaky.values()) == [1]
    items = read_items(out.with_suffix(".items.jsonl"))
    assert len(items) == 10 and all(i["error"] is None for i in items)

    # The endpoint is back: the re-run judges the two strategies left, and only them.
    healthy = ScriptedLM(respond)
    monkeypatch.setattr(
        "judgeopt.cli.load_lm", lambda args, default_model=None: ("fake", healthy.lm)
    )
    assert main(argv) == 0
    assert "2 strategies evaluated, 2 already done" in capsys.readouterr().out
    rows = read_table(out)
    assert len(rows) == 4 and all(r["n_failed"] == "0" for r in rows)
    assert len(healthy.judge_requests) == 2 * 5
    assert len(read_items(out.with_suffix(".items.jsonl"))) == 20


# ----------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_real_grid_with_a_local_model(
    tmp_path: Path,
    data_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """3 zh-en segments x 2 strategies with the small Qwen model, through the CLI."""
    pytest.importorskip("llama_cpp")
    monkeypatch.setenv("JUDGEOPT_THREADS", "1")
    monkeypatch.setenv("JUDGEOPT_CACHE_DIR", str(tmp_path / "lm-cache"))
    from judgeopt.lm import make_lm

    try:
        make_lm("local:qwen2.5-coder-0.5b", n_threads=1, cache=False)
    except Exception as e:  # noqa: BLE001 - the model packages are an optional install
        pytest.skip(f"qwen2.5-coder-0.5b is not installed: {e}")
    out = tmp_path / "real.csv"
    argv = [
        "grid",
        "--data",
        str(data_file),
        "--limit",
        "3",
        "--out",
        str(out),
        "--factors",
        "base_prompt=PZS",
        "--factors",
        "task_description=Neutral",
        "--factors",
        "format_requirement=0 to 100,easy token labels",
        "--model",
        "local:qwen2.5-coder-0.5b",
        "--no-progress",
    ]
    assert main(argv) == 0
    rows = read_table(out)
    assert len(rows) == 2 and all(r["n"] == "3" for r in rows)
    # A real instruction model answers these formats with a number or a label mostly.
    assert sum(int(r["n_unparsed"]) for r in rows) <= 2, rows
    assert all(int(r["calls"]) + int(r["cache_hits"]) == 3 for r in rows)
    items = read_items(out.with_suffix(".items.jsonl"))
    assert len(items) == 6 and all(
        isinstance(i["judge_score"], float) for i in items if i["parsed"]
    )
    capsys.readouterr()
    assert main(argv) == 0  # resumed: nothing left
    assert "0 strategies evaluated, 2 already done" in capsys.readouterr().out
    assert os.path.getsize(out) > 0


def test_cli_grid_plan_only_prints_the_plan_and_judges_nothing(
    tmp_path: Path, data_file: Path, scripted_cli: ScriptedLM, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.csv"
    argv = [
        "grid", "--data", str(data_file), "--limit", "5", "--out", str(out),
        "--factors", "base_prompt=PZS,ZS-CoT", "--factors", "task_description=Neutral",
        "--factors", "format_requirement=0 to 100,simple labels",
        "--model", "fake", "--no-progress", "--plan-only",
    ]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr()
    assert text.out.startswith("grid: plan (4 strategies on 5 items): about 20 judge calls")
    # A scripted LM without a response cache: nothing is timed, so no judge call at all.
    assert not out.exists() and scripted_cli.judge_requests == []
