"""Scripted LMs and a small search space shared by the selection tests.

The scripted responders rate by the human score for some prompts and by hash noise for
the others: they exercise the control flow and bookkeeping of selection, never a judge.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from judgeopt.data import Record, load_records
from judgeopt.judge import JudgeProgram, JudgeTask, baseline_strategy, load_task
from judgeopt.teleprompt import HPSS
from judgeopt.testing import ScriptedLM

ASPECT = "naturalness"

SPACE = {
    "scale": [3, 10],
    "examples": [0],
    "criteria": ["none", "human"],
    "reference": ["none"],
    "cot": ["none", "prefix"],
    "autocot": ["off"],
    "metrics": ["off"],
    "order": ["TD-ER-IC", "IC-TD-ER"],
    "decoding": ["greedy"],
}


def respond_with(records, good: str) -> Any:
    """``good="scale10"``: scale-10 prompts rate by the human score, others hash noise.
    ``good="baseline"``: the baseline's prompt rates by the human score plus noise; every
    other prompt is hash noise."""
    from judgeopt.judge import render_messages

    task = load_task("topical_chat")
    human = {r.inputs["response"]: r.scores[ASPECT] for r in records}
    base = {
        render_messages(task, ASPECT, baseline_strategy(task), r.inputs)[-1]["content"]
        for r in records
    }

    def respond(messages: list[dict[str, Any]]) -> str:
        text = str(messages[-1]["content"])
        response = text.split("## The Start of the Response")[-1].split("## The End")[0].strip()
        m = re.search(r"scale of (\d+) to (\d+)", text)
        hi = int(m.group(2)) if m else 3
        h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
        informative = (hi == 10) if good == "scale10" else text in base
        if informative and response in human:
            value = human[response] + (0.6 * ((h % 7) - 3) / 3 if good == "baseline" else 0)
            value = min(3.0, max(1.0, value))
            return f"Rating: [[{round(1 + (value - 1) * (hi - 1) / 2)}]]"
        return f"Rating: [[{1 + h % hi}]]"

    return respond


def compile_with(task, records, respond, **kw: Any) -> tuple[JudgeProgram, ScriptedLM]:
    """An HPSS compile over ``SPACE`` with the scripted ``respond``; the selection rule is
    ``confirm`` unless ``selection`` names another (these scripts were written for its
    confirmation stage; the default rule's compile is tested on its own)."""
    sel = kw.get("selection")
    if sel is None:
        kw["selection"] = "confirm"
    elif isinstance(sel, dict) and "rule" not in sel:
        kw["selection"] = {"rule": "confirm", **sel}
    fake = ScriptedLM(respond)
    opt = HPSS(budget=kw.pop("budget", 8), space=SPACE, progress=False, params={"k": 2}, **kw)
    return opt.compile(JudgeProgram(task, ASPECT, lm=fake.lm), trainset=records), fake


def respond_noise(messages: list[dict[str, Any]]) -> str:
    """Every prompt rates by a hash of its text: no strategy carries information."""
    text = str(messages[-1]["content"])
    m = re.search(r"scale of (\d+) to (\d+)", text)
    hi = int(m.group(2)) if m else 3
    return f"Rating: [[{1 + int(hashlib.sha256(text.encode()).hexdigest(), 16) % hi}]]"


def write_preset(tmp_path: Path, budget: int | None = None, rule: str | None = None) -> Path:
    """A small HPSS preset (``SPACE``, k = 2, optional budget and selection rule; without
    one, the default rule) under ``tmp_path``."""
    preset = tmp_path / "preset.toml"
    preset.write_text(
        "search = 'hpss'\n"
        + (f"budget = {budget}\n" if budget else "")
        + "[params]\nk = 2\n[space]\n"
        + "\n".join(f"{k} = {json.dumps(v)}" for k, v in SPACE.items())
        + "\n"
        + (f"[selection]\nrule = {json.dumps(rule)}\n" if rule else "")
    )
    return preset


def sigterm_lm(
    respond: Any, *, keep_cache: bool = False
) -> tuple[dict[str, int], list[ScriptedLM], Any]:
    """A ``make_lm`` replacement whose scripted LMs answer with ``respond`` and send this
    process SIGTERM at call ``state["kill_at"]`` (counted in ``state["n"]``; 0: never).

    Returns ``(state, fakes, make_lm)``; ``fakes`` collects every LM made. With
    ``keep_cache`` the LMs use the ``cache`` the caller asks for.
    """
    import os
    import signal

    fakes: list[ScriptedLM] = []
    state = {"n": 0, "kill_at": 0}

    def killing(messages: list[dict[str, Any]]) -> str:
        state["n"] += 1
        if state["n"] == state["kill_at"]:
            os.kill(os.getpid(), signal.SIGTERM)
        return respond(messages)

    def make_lm(model: str, **kw: Any) -> Any:
        fakes.append(
            ScriptedLM(killing, cache=kw.get("cache")) if keep_cache else ScriptedLM(killing)
        )
        return fakes[-1].lm

    return state, fakes, make_lm


def topical_task() -> JudgeTask:
    """The Topical-Chat judge task."""
    return load_task("topical_chat")


def topical_records(shared_data: Path) -> list[Record]:
    """The first 96 Topical-Chat validation records."""
    return load_records(shared_data / "topical_chat" / "valid.jsonl")[:96]
