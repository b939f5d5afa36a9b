"""Which strategies a grid runs: sub-spaces by factor values, from options or a TOML file."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from .._errors import JudgeoptError
from ..search import Factor, FactorSpace, Value

__all__ = [
    "GridConfig",
    "GridError",
    "check_subspace",
    "load_grid_config",
    "parse_factor_options",
    "select_subspace",
]


class GridError(JudgeoptError, ValueError):
    """A grid run cannot start: bad selection, or an output file from another run."""


def _resolve(factor: Factor, text: Value) -> Value:
    if not isinstance(text, str):
        if text in factor:
            return text
        text = str(text)
    from ..judge import resolve_prexme_value  # lazy: judgeopt.judge loads DSPy

    return resolve_prexme_value(factor, text)


def select_subspace(
    space: FactorSpace, selection: Mapping[str, Sequence[Value] | str]
) -> FactorSpace:
    """The sub-space keeping only the selected values of the named factors.

    A factor that ``selection`` does not name keeps all its values; ``"all"`` (or ``["all"]``)
    does the same explicitly. Values may be given as text (``"10"`` for the value ``10``) and,
    for PrExMe, by the paper's spellings (``"simple labels"``). The kept values stay in the
    space's order, so the grid order does not depend on how they were listed.

    Raises:
        GridError: On an unknown factor or value (naming the allowed ones), or an empty
            selection.
    """
    unknown = [name for name in selection if name not in space]
    if unknown:
        raise GridError(f"Unknown factor(s) {unknown!r}. Factors: {list(space.names)!r}.")
    factors = []
    for f in space.factors:
        wanted = selection.get(f.name, "all")
        if isinstance(wanted, str):
            wanted = [wanted]
        if not wanted:
            raise GridError(f"No value selected for factor `{f.name}`.")
        if any(isinstance(w, str) and w.strip().lower() == "all" for w in wanted):
            factors.append(f)
            continue
        try:
            keep = {f.index(_resolve(f, w)) for w in wanted}
        except ValueError as e:
            raise GridError(str(e)) from e
        factors.append(Factor(f.name, tuple(f.values[i] for i in sorted(keep)), f.description))
    return FactorSpace(factors)


def parse_factor_options(options: Iterable[str]) -> dict[str, list[str]]:
    """Turn ``["base_prompt=PZS,ZS-CoT", "format_requirement=0 to 100"]`` into a selection.

    Values are comma-separated; naming a factor twice adds to its values.

    Raises:
        GridError: On an option without ``=`` or without values.
    """
    out: dict[str, list[str]] = {}
    for option in options:
        name, sep, values = option.partition("=")
        name = name.strip()
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not items:
            raise GridError(f"--factors expects NAME=VALUE[,VALUE...]; got {option!r}.")
        out.setdefault(name, [])
        out[name].extend(v for v in items if v not in out[name])
    return out


class GridConfig(BaseModel):
    """A grid run described in TOML (every key optional; command-line options override).

    Example file::

        task = "zh_en"
        [factors]
        base_prompt = ["PZS", "ZS-CoT", "ZS-CoT-EM"]
        task_description = ["Neutral", "Polite", "Threat", "Curious"]
        format_requirement = ["0 to 100", "easy token labels", "complex token labels"]
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str | None = None
    aspect: str | None = None
    factors: dict[str, list[str | int | float | bool] | str] = {}


def load_grid_config(path: str | os.PathLike[str]) -> GridConfig:
    """Read and validate a grid TOML file.

    Raises:
        GridError: On malformed TOML or unknown keys (naming the file and the key).
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
        return GridConfig.model_validate(data)
    except tomllib.TOMLDecodeError as e:
        raise GridError(f"{p}: malformed TOML: {e}") from e
    except ValidationError as e:
        problems = "; ".join(
            f"`{'.'.join(str(x) for x in err['loc'])}`: {err['msg']}" for err in e.errors()
        )
        raise GridError(f"{p}: {problems}") from e


def check_subspace(space: FactorSpace, full: FactorSpace) -> None:
    """Raise :class:`GridError` unless ``space`` has the judge's factors and only their values."""
    if space.names != full.names:
        raise GridError(
            f"The grid's factors {list(space.names)!r} are not the judge's {list(full.names)!r}."
        )
    for f in space.factors:
        outside = [v for v in f.values if v not in full[f.name]]
        if outside:
            raise GridError(
                f"Values {outside!r} are not values of factor `{f.name}`. Allowed "
                f"values: {list(full[f.name].values)!r}."
            )
