"""``judgeopt glassbox``: glass-box (token-probability) features of each record and their
correlation with the human scores."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ._common import CLIError, Subparsers, csv_list, load_data, positive_int

#: Where glassbox's plain columns come from (it has no task), ending a data error.
_COLUMNS_HINT = (
    "glassbox reads plain columns (or JSON keys) named by its options: the inputs of "
    "--instruction-field or --instruction-template, --field and --reference-field, and the "
    "human scores of --scores (e.g. --scores helpfulness); other columns need the schema's "
    "names (inputs.<name>, scores.<aspect>, meta.<key>)"
)


def _plain_columns(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The plain layout's ``(input columns, {score column: aspect})`` of the options: the
    inputs the features read and the score columns of ``--scores``."""
    fields = [args.field, args.instruction_field, args.reference_field]
    if args.instruction_template:
        from ..judge import template_placeholders  # lazy: loads DSPy, as filling it does

        fields += sorted(template_placeholders(args.instruction_template))
    inputs = list(dict.fromkeys(f for f in fields if f))
    both = [c for c in args.scores or () if c in inputs]
    if both:
        raise CLIError(
            f"--scores {','.join(args.scores)}: {', '.join(both)} is an input field "
            f"(the inputs read are {', '.join(inputs)}); --scores names human score columns"
        )
    return inputs, {c: c for c in args.scores or ()}


def _cmd_glassbox(args: argparse.Namespace) -> int:
    from .. import glassbox  # lazy: its backends load the model runtimes (LiteLLM, llama.cpp)

    records = load_data(args.data, args.limit, columns=_plain_columns(args), hint=_COLUMNS_HINT)
    try:
        with glassbox.make_backend(
            args.model or "local",
            backend=args.backend,
            api_base=args.api_base,
            n_threads=args.n_threads,
            n_ctx=args.n_ctx,
            dtype=args.dtype,
            prompt_logprobs=args.prompt_logprobs,
        ) as backend:
            result = glassbox.compute_features(
                records,
                backend,
                args.features,
                instruction_field=args.instruction_field,
                instruction_template=args.instruction_template,
                response_field=args.field,
                reference_field=args.reference_field,
                system=args.system,
                topk=args.topk,
                vocab_size=args.vocab_size,
                n_ensemble=args.n_ensemble,
                seed=args.seed,
                progress=not args.no_progress,
            )
        corr = glassbox.correlate_features(result, level=args.level)
    except (ValueError, ImportError) as e:
        raise CLIError(str(e)) from e
    print(corr.table())
    print(
        f"{len(result.ids)} items, {len(result.errors)} failed, {result.seconds:.1f} s "
        f"({result.backend}, {result.model})"
    )
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {**result.to_dict(), "correlations": corr.to_dict()}
        out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    return 0


def add_parser(sub: Subparsers) -> None:
    """Add ``judgeopt glassbox``."""
    gb = sub.add_parser(
        "glassbox",
        help="glass-box (token-probability) features and their correlation with human scores",
        description="Score each record's (instruction, response) pair with a model's token "
        "probabilities (SentProb, Softmax-Ent/Var/combo, ensembles, reference "
        "features; Huang et al. 2024) and correlate each feature with every "
        "human aspect. Local models give the full vocabulary; servers only "
        "top-k logprobs (pass --topk for the approximation); attention "
        "features need --backend transformers.",
    )
    _add_data_args(gb)
    gb.add_argument(
        "--features",
        type=csv_list,
        default=["sentprob", "softmax_ent", "softmax_var", "softmax_combo"],
        help="comma-separated features (default sentprob,softmax_ent,"
        "softmax_var,softmax_combo); see docs/glassbox.md",
    )
    _add_model_args(gb)
    _add_feature_args(gb)
    gb.add_argument("--limit", type=positive_int, help="use the first N records")
    gb.add_argument(
        "--n-threads",
        type=positive_int,
        default=None,
        help="CPU threads of a local model (default $JUDGEOPT_THREADS or 2)",
    )
    gb.add_argument(
        "--n-ctx",
        type=positive_int,
        default=None,
        help="context window of a local model (default 4096)",
    )
    gb.add_argument("--json", help="write the features and correlations to this file")
    gb.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    gb.set_defaults(func=_cmd_glassbox)


def _add_data_args(gb: argparse.ArgumentParser) -> None:
    gb.add_argument(
        "--data",
        required=True,
        help="labelled JSONL/CSV: the shared schema, or plain columns named by --field, "
        "--instruction-field, --reference-field, the template's {fields} and --scores",
    )
    gb.add_argument(
        "--scores",
        type=csv_list,
        default=None,
        metavar="COL,COL",
        help="plain columns (JSON keys) of --data that hold human scores, e.g. helpfulness "
        "(each is an aspect the features are correlated with); the schema's "
        "scores.<aspect> need no option",
    )
    gb.add_argument("--field", default="response", help="input field of the scored response")
    gb_instr = gb.add_mutually_exclusive_group(required=True)
    gb_instr.add_argument("--instruction-field", help="input field of the instruction")
    gb_instr.add_argument(
        "--instruction-template",
        help="instruction built from input fields, e.g. 'Summarize the article: {source}'",
    )
    gb.add_argument("--reference-field", help="input field of a reference answer")
    gb.add_argument("--system", help="system message before the instruction")


def _add_model_args(gb: argparse.ArgumentParser) -> None:
    gb.add_argument(
        "--model",
        default=None,
        help="'local' (default), 'local:NAME', 'local:PATH.gguf', "
        "'local:HF_FOLDER' (transformers only) or a LiteLLM model string",
    )
    gb.add_argument(
        "--backend",
        choices=["llama.cpp", "transformers", "litellm"],
        default=None,
        help="how to run the model (default: llama.cpp for local models, LiteLLM "
        "otherwise); 'transformers' runs a local model with CPU torch and "
        "gives attention weights (attn_ent_min, attn_ent_avg; needs "
        "pip install 'judgeopt[transformers]')",
    )
    gb.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default=None,
        help="weights of the transformers backend (default float32)",
    )
    gb.add_argument("--api-base", default=None, help="endpoint of a LiteLLM model")
    gb.add_argument(
        "--prompt-logprobs",
        action="store_true",
        help="vLLM only: score given texts through its prompt logprobs",
    )


def _add_feature_args(gb: argparse.ArgumentParser) -> None:
    gb.add_argument(
        "--topk",
        type=positive_int,
        default=None,
        help="Softmax-Ent from the top-K logprobs (approximation; the variance features have none)",
    )
    gb.add_argument(
        "--vocab-size",
        type=positive_int,
        default=None,
        help="the model's vocabulary size, for --topk with a server",
    )
    gb.add_argument(
        "--n-ensemble",
        type=positive_int,
        default=10,
        help="forward passes of the ensemble features (10)",
    )
    gb.add_argument("--seed", type=int, default=0, help="seed of the ensembles (0)")
    gb.add_argument(
        "--level",
        choices=["dataset", "group"],
        default="dataset",
        help="correlation level (dataset)",
    )
