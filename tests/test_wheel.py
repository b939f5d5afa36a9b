"""The wheel a user installs works without the source tree: it carries the task signatures and
the optimizer presets (the repository's top-level ``signatures/`` and ``optimizers/``), and a
compile with a shipped preset runs from it."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Run inside a virtual environment that holds only the wheel (its dependencies come from the
# running environment's site-packages, read-only), from a folder outside the checkout.
SCRIPT = textwrap.dedent("""
    import json, pathlib, sys
    import judgeopt
    from judgeopt.judge import JudgeProgram, available_tasks, load_task
    from judgeopt.teleprompt import JudgeSearch, load_optimizer
    from judgeopt.testing import ScriptedLM

    where = pathlib.Path(judgeopt.__file__).resolve()
    tasks = available_tasks()
    preset = load_optimizer("quick")
    task = load_task("sfres")
    records = [{"source": f"inform(name=place {i})", "output": f"place {i} is nice",
                "naturalness": 1 + i % 5}
               for i in range(24)]
    fake = ScriptedLM(lambda m: f"Rating: [[{1 + len(str(m[-1]['content'])) % 5}]]")
    opt = JudgeSearch.from_config(preset, budget=3, progress=False, checkpoint_dir=None)
    judge = opt.compile(JudgeProgram(task, "naturalness", lm=fake.lm), trainset=records)
    print(json.dumps({"file": str(where), "tasks": list(tasks), "search": preset.search,
                      "evaluated": len(judge.search_result.evaluation_summaries)}))
""")


def _see_running_site_packages(python: Path) -> None:
    """Let the virtual environment at ``python`` import this process's packages.

    ``venv --system-site-packages`` would give it the *base* interpreter's site-packages, which
    lack the dependencies when this suite runs inside a virtual environment itself (the usual
    way). Instead, one ``.pth`` file in the new environment adds every site-packages folder of
    the running interpreter after its own (``site.addsitedir``, so their ``.pth`` files apply
    too): the wheel installed there comes first, the dependencies come from here.
    """
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run(
        [str(python), "-c", probe], check=True, capture_output=True, text=True
    ).stdout.strip()
    folders = [p for p in site.getsitepackages() if Path(p).is_dir()]
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in folders)
    (Path(purelib) / "_running_site_packages.pth").write_text(lines)


@pytest.mark.slow
def test_wheel_ships_tasks_and_presets_and_compiles(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    (wheel,) = dist.glob("judgeopt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {p.name for p in (ROOT / "signatures").glob("*.toml")}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("judgeopt/signatures/")} == shipped
    presets = {p.name for p in (ROOT / "optimizers").glob("*.toml")}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("judgeopt/optimizers/")} == presets
    # The product only: the research harness (bank, replays, e2e reports) stays in benchmarks/.
    lab = [n for n in names if "judgeopt_lab" in n or n.startswith(("benchmarks/", "tests/"))]
    assert not lab, lab
    bench = {n.rsplit("/", 1)[1] for n in names if n.startswith("judgeopt/bench/")}
    assert bench == {"__init__.py", "_runner.py", "_surface.py"}, bench

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    _see_running_site_packages(python)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    # The wheel's own files went into the new environment, nothing into the running one.
    installed = subprocess.run(
        [str(python), "-m", "pip", "show", "-f", "judgeopt"], capture_output=True, text=True
    )
    assert str(venv) in installed.stdout, installed.stdout[-2000:]
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [str(python), "-c", SCRIPT], cwd=away, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    # The package came from the wheel, not from the checkout.
    assert Path(result["file"]).is_relative_to(venv), result["file"]
    assert sorted(result["tasks"]) == sorted(p.removesuffix(".toml") for p in shipped)
    assert result["search"] == "auto"
    assert result["evaluated"] == 3
