"""Text templates: ``{name}`` placeholders, filled in one pass.

Every prompt text of a task (:mod:`._task`) and every rendered prompt (:mod:`._render`) is a
template. :func:`substitute` fills it in a single pass that never re-reads inserted text, so
input text containing braces is harmless; ``{{`` and ``}}`` stand for literal braces.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["check_placeholders", "placeholders", "substitute"]

_PLACEHOLDER: Final = re.compile(r"\{\{|\}\}|( ?)\{([A-Za-z_][A-Za-z0-9_]*)\}")


def placeholders(template: str) -> frozenset[str]:
    """The placeholder names ``{name}`` used in ``template`` (``{{``/``}}`` are escapes)."""
    return frozenset(m.group(2) for m in _PLACEHOLDER.finditer(template) if m.group(2))


def substitute(
    template: str,
    values: Mapping[str, str],
    *,
    keep_unknown: bool = False,
    collapse_empty: bool = True,
) -> str:
    """Fill ``{name}`` placeholders in one pass; inserted text is never re-scanned.

    With ``collapse_empty``, a placeholder preceded by one space and filled with an empty
    string takes the space with it, so ``"of the summary. {criteria}"`` becomes
    ``"of the summary."`` when there are no criteria. ``{{`` and ``}}`` become ``{`` and
    ``}`` (with ``keep_unknown`` they are left as they are).

    Args:
        template: The template text.
        values: Placeholder name -> text.
        keep_unknown: Leave placeholders that ``values`` does not name, and ``{{``/``}}``,
            as they are (otherwise an unknown placeholder is an error).
        collapse_empty: Drop the space before a placeholder filled with ``""``.

    Returns:
        The filled text.

    Raises:
        ValueError: On a placeholder ``values`` does not name (unless ``keep_unknown``).
    """

    def fill(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "{{":
            return "{" if not keep_unknown else token
        if token == "}}":
            return "}" if not keep_unknown else token
        space, name = m.group(1), m.group(2)
        if name not in values:
            if keep_unknown:
                return token
            raise ValueError(
                f"Template placeholder {{{name}}} has no value. Known: {sorted(values)!r}."
            )
        value = values[name]
        if not value and space and collapse_empty:
            return ""
        return space + value

    return _PLACEHOLDER.sub(fill, template)


def check_placeholders(
    where: str,
    template: str,
    allowed: Iterable[str],
    required: Iterable[str] = (),
) -> None:
    """Refuse a template using a placeholder outside ``allowed`` or missing a ``required`` one.

    Args:
        where: The template's key, for the message (``"prompt.rules[0]"``).
        template: The template text.
        allowed: The placeholder names it may use.
        required: The placeholder names it must use (allowed too).

    Raises:
        ValueError: Naming the template, the offending placeholders and the allowed ones.
    """
    used = placeholders(template)
    allowed_s = frozenset(allowed) | frozenset(required)
    unknown = sorted(used - allowed_s)
    if unknown:
        raise ValueError(
            f"`{where}` uses unknown placeholder(s) "
            + ", ".join("{" + u + "}" for u in unknown)
            + f"; allowed here: {', '.join('{' + a + '}' for a in sorted(allowed_s))}."
        )
    missing = sorted(frozenset(required) - used)
    if missing:
        raise ValueError(
            f"`{where}` must contain the placeholder(s) "
            + ", ".join("{" + m + "}" for m in missing)
            + f". Got {template!r}."
        )
