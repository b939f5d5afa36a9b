"""``python -m judgeopt.lm.prepare NAME...``: join and verify local models ahead of use."""

from __future__ import annotations

import sys

from ._models import LOCAL_MODELS, ensure_local_model


def main(argv: list[str] | None = None) -> int:
    """Join and verify each named registry model; print its path."""
    names = (sys.argv[1:] if argv is None else argv) or ["qwen2.5-coder-1.5b"]
    unknown = [n for n in names if n not in LOCAL_MODELS]
    if unknown:
        print(f"unknown model(s) {unknown}; known: {sorted(LOCAL_MODELS)}", file=sys.stderr)
        return 2
    for name in names:
        print(f"{name}: {ensure_local_model(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
