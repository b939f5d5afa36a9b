"""Exported judges record a model string that loads again (issue 18, point 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from judgeopt.cli import build_parser, main
from judgeopt.judge import JudgeProgram, load_task
from judgeopt.lm import LlamaCppLM, RouterLM, make_lm, model_spec
from judgeopt.lm._spec import loadable_spec


def test_local_models_record_local_specs(tmp_path: Path) -> None:
    lm = LlamaCppLM("smollm2-135m", cache=False)  # lazy: nothing is loaded
    assert lm.model == "local/smollm2-135m" and model_spec(lm) == "local:smollm2-135m"
    gguf = tmp_path / "my model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    by_path = LlamaCppLM(str(gguf), cache=False)
    assert model_spec(by_path) == f"local:{gguf.resolve()}"
    # The recorded string builds the same kind of LM again.
    again = make_lm(model_spec(by_path), cache=False)
    assert isinstance(again, LlamaCppLM) and again.spec == by_path.spec
    assert (
        model_spec(make_lm("openai/qwen", api_base="http://127.0.0.1:9/v1", cache=False))
        == "openai/qwen"
    )
    assert model_spec(None) is None


def test_router_spec(tmp_path: Path) -> None:
    cfg = tmp_path / "servers.yaml"
    cfg.write_text(
        "model_list:\n  - model_name: judge\n    litellm_params:\n"
        "      model: openai/x\n      api_base: http://127.0.0.1:9/v1\n"
    )
    lm = make_lm(f"router:{cfg}", cache=False)
    assert isinstance(lm, RouterLM) and model_spec(lm) == f"router:{cfg}#judge"


def test_old_display_names_map_back_or_fail_clearly() -> None:
    assert loadable_spec("local/SmolLM2-135M-Instruct.Q4_1.gguf") == "local:smollm2-135m"
    assert loadable_spec("openai/x") == "openai/x"
    with pytest.raises(ValueError, match="local:PATH.gguf"):
        loadable_spec("local/mine.gguf")


def test_evaluate_with_an_unloadable_recorded_model_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shared_data: Path
) -> None:
    judge = JudgeProgram(load_task("summeval"), "coherence")
    judge = judge.with_model_name("local/mine.gguf")
    judge.save(tmp_path / "judge.json")
    code = main(
        [
            "evaluate",
            str(tmp_path / "judge.json"),
            "--data",
            str(shared_data / "summeval" / "full.jsonl"),
            "--limit",
            "2",
        ]
    )
    assert code == 2
    assert "--model local:PATH.gguf" in capsys.readouterr().err


def test_evaluate_help_names_the_judges_model_as_default() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = sub.choices["evaluate"].format_help()
    assert "the model the judge records" in " ".join(text.split())
    assert "Qwen2.5-Coder-1.5B) by default" not in text
    assert "by default" in " ".join(sub.choices["compile"].format_help().split())
