"""What every ``judgeopt`` command shares: the user error, the exit statuses, the argparse
types, the model options (``--model``, ``--router``, ...) and loading ``--data``."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeAlias

from .._errors import JudgeoptError
from ..data import DataFormatError, load_records


class CLIError(JudgeoptError):
    """A user error reported as ``judgeopt: error: ...`` with exit status 2."""


#: Exit statuses: 0 done; 1 the compile finished but its judge is not trustworthy (see the
#: printed problems; the judge is written anyway), or evaluate's judge gave no rating for
#: more than max_parse_failures of its items (its summary is written anyway); 2 a usage,
#: data or configuration error; 3 the model endpoint failed (a re-run continues from the
#: checkpoint); 130 interrupted.
EXIT_UNTRUSTED = 1
EXIT_UNAVAILABLE = 3

#: What ``ArgumentParser.add_subparsers`` returns: each command group adds its parsers to it.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def share(text: str) -> float:
    """argparse type: a float between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a share between 0 and 1, got {text!r}"
        ) from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {value:g}")
    return value


def csv_list(text: str) -> list[str]:
    """argparse type: a non-empty comma-separated list."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, got an empty one")
    return items


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def seconds(text: str) -> float:
    """argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def json_object(text: str) -> dict[str, object]:
    """argparse type: a JSON object given inline or as a path to a JSON file."""
    path = Path(text)
    raw = path.read_text(encoding="utf-8") if path.is_file() else text
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not a JSON object or JSON file: {e}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError('expected a JSON object such as \'{"factor": "value"}\'')
    return data


def _model_string(args: argparse.Namespace, default_model: str | None = None) -> str:
    """The model string of ``--model`` / ``--router`` (``router:FILE`` or ``router:FILE#GROUP``
    with ``--router``, where ``--model`` names a model group of the file)."""
    router = getattr(args, "router", None)
    if router:
        if getattr(args, "api_base", None):
            raise CLIError(
                "--api-base does not apply with --router: the endpoints come from "
                f"the router config {router}"
            )
        if args.model and (args.model.startswith(("local", "router:")) or "/" in args.model):
            raise CLIError(
                f"with --router, --model names a model group of {router} (its "
                f"model_name), not a model string; got {args.model!r}"
            )
        return f"router:{router}" + (f"#{args.model}" if args.model else "")
    if not args.model and default_model:
        from ..lm import loadable_spec  # lazy: judgeopt.lm loads DSPy and LiteLLM

        try:
            return loadable_spec(default_model)
        except ValueError as e:
            raise CLIError(str(e)) from e
    return str(args.model or default_model or "local")


def load_lm(args: argparse.Namespace, default_model: str | None = None) -> Any:
    """``(model string, LM)`` of the command's model options (``--model``, ``--router``,
    ``--api-base``, ``--parallel``, ``--n-ctx``); a bad option raises :class:`CLIError`.

    Every command loads its model through ``judgeopt.cli.load_lm`` (see :func:`lm_from_args`):
    replacing that name, as the tests do with a scripted LM, reaches all of them.
    """
    # lazy: judgeopt.lm loads DSPy and LiteLLM (and make_lm is looked up when called)
    from ..lm import RECOMMENDED_PARALLEL, make_lm, parse_local_model

    model = _model_string(args, default_model)
    kwargs: dict[str, Any] = {}
    if getattr(args, "n_ctx", None):
        kwargs["n_ctx"] = args.n_ctx
    parallel = getattr(args, "parallel", None)
    try:
        local = parse_local_model(model) is not None
    except ValueError as e:
        raise CLIError(str(e)) from e
    if local:
        kwargs["parallel"] = RECOMMENDED_PARALLEL if parallel is None else parallel
    elif parallel is not None:
        raise CLIError(
            f"--parallel only applies to local models ('local', 'local:...'), not "
            f"to {model!r}; for a server, use --threads"
        )
    if getattr(args, "logprobs", False):
        print(
            "judgeopt: --logprobs is no longer needed (the embedded model gives the "
            "expected rating's logprobs without logits_all) and is ignored",
            file=sys.stderr,
        )
    try:
        return model, make_lm(model, api_base=args.api_base, **kwargs)
    except ValueError as e:
        raise CLIError(str(e)) from e


def task_columns(task: Any, aspect: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The plain layout's columns of ``task``: its input fields, and its score columns
    (column -> aspect: each aspect name of a pointwise task, and ``score`` for ``aspect``)."""
    if task is None or not hasattr(task, "input_names"):
        return [], {}
    fields = list(task.input_names)
    scores = (
        {a: a for a in getattr(task, "aspect_names", ())}
        if getattr(task, "mode", "") == "pointwise"
        else {}
    )
    if aspect is not None and scores and "score" not in scores:
        scores["score"] = aspect
    return fields, {k: v for k, v in scores.items() if k not in fields}


def load_data(
    path: str,
    limit: int | None,
    task: Any = None,
    aspect: str | None = None,
    *,
    option: str = "--data",
    columns: tuple[Sequence[str], Mapping[str, str]] | None = None,
    hint: str = "",
) -> list[Any]:
    """Records of ``path``; with a ``task``, also in the plain layout (its input fields and
    aspect names as bare columns, ``score`` for ``aspect``; docs/tasks.md, "Your data").

    ``columns``: ``(input columns, {score column: aspect})`` of the plain layout when the
    command has no task (``judgeopt glassbox``), instead of :func:`task_columns`. ``hint``
    ends the message of a data error (where the command's plain columns come from). Errors
    name ``option``, the option that gave the path (``--data``, ``--test-data``).
    """
    fields, scores = (list(columns[0]), dict(columns[1])) if columns else task_columns(task, aspect)
    kwargs: dict[str, Any] = {"fields": fields, "scores": scores} if fields or scores else {}
    try:
        records = load_records(path, limit=limit, **kwargs)
    except DataFormatError as e:
        raise CLIError(f"{option} {path}: {e}" + (f". {hint}" if hint else "")) from e
    except (ValueError, OSError) as e:
        raise CLIError(f"{option} {path}: {e}") from e
    if not records:
        raise CLIError(
            f"{option} {path}: the file holds no records (expected one JSON object "
            "per line, or a CSV header row and rows)"
        )
    return records


def lm_from_args(args: argparse.Namespace, default_model: str | None = None) -> Any:
    """``(model string, LM)`` of the command's model options, with its spending limits set.

    The LM comes from ``judgeopt.cli.load_lm``, looked up when this is called, so that replacing
    it (as the tests do with a scripted LM) reaches every command that loads a model.
    """
    from . import load_lm as load  # the package face's name, not this module's

    model, lm = load(args, default_model)
    limit_spending(args, lm)
    return model, lm


def limit_spending(args: argparse.Namespace, lm: Any) -> None:
    """Set the command's ``--max-calls`` / ``--max-cost`` on ``lm`` (see :func:`add_spend_limits`).

    Raises:
        CLIError: On a dollar limit for a model without a known price, or an LM that cannot
            count its calls.
    """
    max_calls = getattr(args, "max_calls", None)
    max_cost = getattr(args, "max_cost", None)
    if max_calls is None and max_cost is None:
        return
    limit = getattr(lm, "limit_spending", None)
    if not callable(limit):
        raise CLIError(
            f"--max-calls / --max-cost need a judgeopt LM; {type(lm).__name__} counts no calls"
        )
    try:
        limit(max_calls=max_calls, max_cost=max_cost)
    except ValueError as e:
        raise CLIError(str(e).replace("max_cost=", "--max-cost ")) from e


def add_spend_limits(p: argparse.ArgumentParser) -> None:
    """Add ``--max-calls``, ``--max-cost`` and ``--plan-only`` to a command that judges."""
    p.add_argument(
        "--max-calls",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="stop before the model call that would make more than N calls in this run "
        "(answers from the cache are free): the run stops as on Ctrl-C, with what it "
        "judged kept (a compile's checkpoint); the same command with a higher limit goes on",
    )
    p.add_argument(
        "--max-cost",
        type=non_negative_float,
        default=None,
        metavar="USD",
        help="stop, the same way, before the call that could take the run's spending above "
        "USD dollars by LiteLLM's price list (hosted models; the embedded model is free)",
    )
    p.add_argument(
        "--plan-only",
        action="store_true",
        help="print the cost plan (calls, tokens, time, money) and stop before judging: "
        "only the plan's check call and its timed judgement are made, and their answers "
        "are cached, so the run that follows does not pay for them again",
    )


def plan_first(args: argparse.Namespace, command: str, print_plan: Callable[[TextIO], Any]) -> bool:
    """Print the cost plan of a command that judges, before its first judge call.

    With ``--plan-only`` the plan goes to stdout and is all that was asked for: a plan that
    cannot be made is a :class:`CLIError`, and ``True`` tells the command to stop (exit 0).
    Otherwise it goes to stderr and never stops the run it estimates: a plan that cannot be
    made is a one-line note (``command: no cost plan (...)``), and ``False`` lets the run go
    on.
    """
    if getattr(args, "plan_only", False):
        try:
            print_plan(sys.stdout)
        except Exception as e:  # noqa: BLE001 - the plan is all that was asked for
            raise CLIError(f"no cost plan could be made: {e}") from e
        return True
    try:
        print_plan(sys.stderr)
    except Exception as e:  # noqa: BLE001 - an estimate never stops the run it estimates
        print(f"{command}: no cost plan ({e})", file=sys.stderr)
    return False


def add_model(
    p: argparse.ArgumentParser, default: str = "'local' (embedded Qwen2.5-Coder-1.5B) by default"
) -> None:
    """Add the model options (``--model``, ``--api-base``, ``--router``, ``--threads``,
    ``--parallel``, ``--n-ctx``, ``--no-progress``) to a command; ``default`` ends the help of
    ``--model``."""
    p.add_argument(
        "--model",
        default=None,
        help=f"'local', 'local:NAME' or 'local:PATH.gguf', or any LiteLLM model string; {default}",
    )
    p.add_argument("--api-base", default=None, help="endpoint of a LiteLLM model")
    p.add_argument(
        "--router",
        metavar="FILE",
        default=None,
        help="judge through a LiteLLM Router over several servers, configured "
        "by FILE (a LiteLLM model_list YAML/JSON; `judgeopt serve` writes "
        "one); --model then names one of its model groups",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="judge calls in flight at once (default: --parallel for a local "
        "model, else 1; with --router or a server, about the servers' "
        "total parallel slots)",
    )
    p.add_argument(
        "--parallel",
        type=positive_int,
        default=None,
        help="local model: judge calls decoded together (default 16, "
        "judgeopt.lm.RECOMMENDED_PARALLEL; 1: one at a time)",
    )
    p.add_argument(
        "--n-ctx",
        type=positive_int,
        default=None,
        help="context window of a local model (default 4096)",
    )
    # NOTE: kept (hidden, ignored) so that older scripts still run.
    p.add_argument("--logprobs", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
