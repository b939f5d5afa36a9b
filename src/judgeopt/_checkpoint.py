"""What a compile checkpoint belongs to: its fingerprint, and the check on resume.

A checkpoint directory (``OUT.ckpt/``) holds results that are only valid for the run that
wrote them: the same task and aspect, the same records, the same search, space and selection
settings, the same model and decoding. :func:`run_fingerprint` describes all of that as a flat
JSON object (``fingerprint.json``); :func:`fingerprint_differences` names what changed, so a
re-run with other settings stops instead of silently reusing results of another run.

The budget, the number of threads, the ensemble size and the failure limits are left out on
purpose: a larger budget extends a finished search, and the others change no stored result.
The endpoint (``api_base``) is left out too, since a restarted server often gets another port;
the model's identity is its model string (a local GGUF: its verified hash, or its path, size
and mtime).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import JudgeoptError
from ._io import write_text_atomic

if TYPE_CHECKING:  # a foundation module: the data layer above it is named in types only
    from .data import Record

__all__ = [
    "CheckpointMismatchError",
    "FINGERPRINT_FILE",
    "check_fingerprint",
    "fingerprint_differences",
    "records_digest",
    "run_fingerprint",
]

log = logging.getLogger(__name__)

FINGERPRINT_FILE = "fingerprint.json"
_FORMAT = 1


class CheckpointMismatchError(JudgeoptError, ValueError):
    """A checkpoint directory was written by a run with other settings, data or model.

    Attributes:
        path: The checkpoint directory.
        differences: ``(what, checkpoint's value, this run's value)`` for every difference.
    """

    def __init__(self, path: Path, differences: list[tuple[str, Any, Any]]) -> None:
        self.path = path
        self.differences = differences
        shown = "; ".join(
            f"{what}: {_short(old)} in the checkpoint, {_short(new)} now"
            for what, old, new in differences
        )
        super().__init__(
            f"the checkpoint {path} belongs to another run ({shown}). Its results do not "
            "apply to this one: run again with --restart (Python: restart=True) to discard "
            "it, or give another checkpoint directory (--checkpoint DIR, or another --out)."
        )


def records_digest(records: Sequence[Record]) -> dict[str, Any]:
    """``{"records": n, "sha256": ...}`` of records' content (ids, groups, inputs, labels)."""
    h = hashlib.sha256()
    for r in records:
        row = {
            "id": r.id,
            "group_id": r.group_id,
            "system_id": r.system_id,
            "inputs": r.inputs,
            "scores": r.scores,
            "label": r.label,
        }
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode())
        h.update(b"\n")
    return {"records": len(records), "sha256": h.hexdigest()[:16]}


def _plain(value: Any) -> Any:
    """A JSON round trip (tuples become lists, unknown objects their ``str``)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def model_identity(lm: Any) -> dict[str, Any]:
    """What model ``lm`` runs and how it decodes by default (no endpoint, never a key)."""
    ident = getattr(lm, "spec", None) or getattr(lm, "model", None) or type(lm).__name__
    try:
        cache_id = lm._cache_identity()[0]
    except Exception:  # noqa: BLE001 - an LM without judgeopt's cache identity
        cache_id = None
    kwargs = {
        k: v
        for k, v in dict(getattr(lm, "kwargs", {}) or {}).items()
        if k not in ("api_key", "api_base", "base_url", "cache", "num_retries")
        and not k.startswith("_")
    }
    out: dict[str, Any] = {"model": str(ident), "decoding": _plain(kwargs)}
    if cache_id is not None and str(cache_id) != str(ident):
        out["weights"] = str(cache_id)
    n_ctx = getattr(lm, "n_ctx", None)
    if isinstance(n_ctx, int):
        out["n_ctx"] = n_ctx
    return out


def run_fingerprint(
    *,
    task: Any,
    aspect: str,
    baseline: Mapping[str, Any],
    trainset: Sequence[Record],
    valset: Sequence[Record] | None,
    config: Mapping[str, Any],
    lm: Any,
    max_tokens: int | None,
    decoding_params: Mapping[str, Any],
) -> dict[str, Any]:
    """The flat description of a compile whose results a checkpoint holds.

    Args:
        task: The :class:`judgeopt.judge.JudgeTask` (its whole definition is hashed).
        aspect: The judged aspect.
        baseline: The student's strategy (where the search starts).
        trainset: The example pool (and scoring set without ``valset``).
        valset: The scoring set, when given apart.
        config: The optimizer settings (:class:`judgeopt.teleprompt.OptimizerConfig` as a
            dict); ``budget``, ``threads``, ``ensemble`` (and its anchor), the selection's
            ``guard`` (and its margin), the failure limits and the check call's timeout are ignored.
        lm: The judge's LM.
        max_tokens: The student's output limit (``None``: by strategy).
        decoding_params: The student's decoding overrides.
    """
    task_def = json.dumps(task.model_dump(mode="json"), sort_keys=True, default=str)
    model = model_identity(lm)
    # NOTE: the ensemble size only changes what is built after the search from the stored
    # judgements, so adding --ensemble to a finished compile reuses its checkpoint.
    ignored = {
        "budget",
        "threads",
        "max_consecutive_failures",
        "check_timeout",
        "max_parse_failures",
        "ensemble",
        "ensemble_anchor",
        "ensemble_stack",
    }
    fp: dict[str, Any] = {
        "format": _FORMAT,
        "task": f"{task.name} (definition sha256 "
        f"{hashlib.sha256(task_def.encode()).hexdigest()[:16]})",
        "aspect": aspect,
        "baseline strategy": _plain(dict(baseline)),
        "trainset": records_digest(trainset),
        "valset": "the trainset" if valset is None else records_digest(valset),
        "model": model.pop("model"),
        "model decoding": {
            **model.pop("decoding"),
            "judge max_tokens": max_tokens,
            "decoding_params": _plain(dict(decoding_params)),
        },
    }
    fp.update({f"model {k}": v for k, v in model.items()})
    for key, value in sorted(config.items()):
        if key == "selection" and isinstance(value, Mapping):
            # NOTE: the guard and frugal only read the stored judgements after the search
            # (as the ensemble does), and checkpoints older than them do not name them.
            value = {k: v for k, v in value.items() if k not in ("guard", "guard_margin", "frugal")}
        # NOTE: no `forbid` is the default and older checkpoints do not name it; they stay
        # resumable.
        if key not in ignored and not (key == "forbid" and not value):
            fp[f"optimizer {key}"] = _plain(value)
    return fp


def fingerprint_differences(
    old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[tuple[str, Any, Any]]:
    """``(key, old value, new value)`` for every key whose value differs (missing: ``None``)."""
    keys = list(old) + [k for k in new if k not in old]
    return [(k, old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)]


def check_fingerprint(
    directory: Path, fingerprint: Mapping[str, Any], *, has_results: bool
) -> bool:
    """Check a checkpoint directory against this run's fingerprint, and record it.

    Args:
        directory: The checkpoint directory.
        fingerprint: This run's :func:`run_fingerprint`.
        has_results: Whether the directory already holds results of a run.

    Returns:
        ``True`` when the directory holds results this run resumes from.

    Raises:
        CheckpointMismatchError: When the recorded fingerprint differs (naming what).
    """
    path = directory / FINGERPRINT_FILE
    # NOTE: without results there is nothing to protect (e.g. the first run stopped at the
    # endpoint check because --model was misspelt): the new fingerprint replaces the old.
    if path.is_file() and has_results:
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            old = None
        if not isinstance(old, dict):
            raise CheckpointMismatchError(
                directory, [("fingerprint.json", "unreadable", "a valid one")]
            )
        diffs = fingerprint_differences(old, fingerprint)
        if diffs:
            raise CheckpointMismatchError(directory, diffs)
        return has_results
    if has_results:
        # NOTE: written by a judgeopt without fingerprints; its results are kept (they
        # cost compute) but cannot be checked.
        log.warning(
            "the checkpoint %s has no fingerprint (written by an older judgeopt): "
            "its results are reused unchecked; use --restart if the data, the model "
            "or the settings changed since",
            directory,
        )
    write_text_atomic(path, json.dumps(dict(fingerprint), indent=1, ensure_ascii=False) + "\n")
    return has_results


def _short(value: Any, limit: int = 120) -> str:
    text = (
        json.dumps(value, ensure_ascii=False, default=str)
        if not isinstance(value, str)
        else repr(value)
    )
    return text if len(text) <= limit else text[: limit - 3] + "..."
