"""The public surface is deliberate: `__all__` lists exactly the public names."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module", ["judgeopt.search", "judgeopt.metrics", "judgeopt.bench", "judgeopt.testing"]
)
def test_all_matches_public_names(module: str) -> None:
    mod = importlib.import_module(module)
    public = {n for n in vars(mod) if not n.startswith("_")} - {"annotations"}
    modules = {n for n in public if type(getattr(mod, n)).__name__ == "module"}
    assert set(mod.__all__) == public - modules
    for name in mod.__all__:
        assert getattr(mod, name) is not None


def test_search_core_imports_no_llm_stack() -> None:
    """The search core and metrics stay pure: importing them loads neither DSPy nor LiteLLM."""
    code = (
        "import sys, judgeopt.search, judgeopt.metrics, judgeopt.bench; "
        "print(sorted(m for m in ('dspy', 'litellm', 'openai') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_command_lines_help_loads_no_llm_stack_and_no_scipy() -> None:
    """``judgeopt --help`` (and every subcommand's parser) is built without DSPy, LiteLLM or
    scipy: their imports took seconds before anything was printed."""
    code = (
        "import sys\n"
        "from judgeopt.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('dspy', 'litellm', 'scipy', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "compile" in out.stdout and out.stdout.strip().splitlines()[-1] == "[]"


def test_every_library_exception_derives_from_judgeopt_error() -> None:
    """One exception tree: each exception class judgeopt defines has JudgeoptError as a base
    (and keeps its built-in base, so ``except ValueError`` still catches what it caught)."""
    import inspect
    import pkgutil

    import judgeopt

    found = []
    for info in pkgutil.walk_packages(judgeopt.__path__, "judgeopt."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, Exception)
                and not issubclass(obj, Warning)  # warnings are issued, not raised
                and obj.__module__ == info.name
                and not obj.__name__.startswith("_")
            ):
                found.append(obj)
    assert len(found) >= 20
    assert [c.__qualname__ for c in found if not issubclass(c, judgeopt.JudgeoptError)] == []
    from judgeopt.data import DataFormatError

    assert issubclass(DataFormatError, ValueError)


def test_teleprompters_show_their_parameters() -> None:
    import inspect

    import judgeopt

    for cls in (judgeopt.HPSS, judgeopt.Auto, judgeopt.Greedy, judgeopt.RandomJudgeSearch):
        params = inspect.signature(cls).parameters
        assert {"budget", "seed"} <= set(params), cls
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), cls


def test_one_meaning_per_name_between_the_searches_and_the_teleprompters() -> None:
    """A search algorithm (``judgeopt.search``, ``...Search``) and the DSPy teleprompter that
    runs it (``judgeopt.teleprompt``) never share a name."""
    import judgeopt.search
    import judgeopt.teleprompt

    shared = set(judgeopt.search.__all__) & set(judgeopt.teleprompt.__all__)
    assert not shared, shared
    algorithms = [n for n in judgeopt.search.SEARCHES.values()]
    assert all(cls.__name__.endswith("Search") for cls in algorithms), algorithms


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("judgeopt.search", "HPSS", "HPSSSearch"),
        ("judgeopt.search", "Greedy", "GreedySearch"),
        ("judgeopt.search", "StepwiseGreedy", "StepwiseGreedySearch"),
        ("judgeopt.search", "SearchStrategy", "Search"),
        ("judgeopt.teleprompt", "RandomSearch", "RandomJudgeSearch"),
        ("judgeopt.teleprompt", "GridSearch", "GridJudgeSearch"),
        ("judgeopt", "RandomSearch", "RandomJudgeSearch"),
        ("judgeopt", "GridSearch", "GridJudgeSearch"),
        ("judgeopt.judge", "load_any_judge", "load_judge"),
    ],
)
def test_renamed_names_still_work_with_a_deprecation_warning(
    module: str, old: str, new: str
) -> None:
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is deprecated.*{module}\.{new}"):
        assert getattr(mod, old) is getattr(mod, new)
    assert old not in mod.__all__ and old not in dir(mod)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = mod.Nope


def test_one_load_judge() -> None:
    """``judgeopt.load_judge`` is ``judgeopt.judge.load_judge`` (a judge or an ensemble); the
    loader of a single judge only is ``load_program``."""
    import judgeopt
    import judgeopt.judge

    assert judgeopt.load_judge is judgeopt.judge.load_judge
    assert judgeopt.load_judges is judgeopt.judge.load_judges
    assert judgeopt.judge.load_program is not judgeopt.judge.load_judge
