"""``judgeopt serve``: local llama.cpp or vLLM servers on 127.0.0.1 and the router config that
lists them, kept in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from ._common import CLIError, Subparsers, csv_list, positive_int


class _Stopped(Exception):
    """SIGINT or SIGTERM reached `judgeopt serve`."""


def _cmd_serve(args: argparse.Namespace) -> int:
    from ..lm import start_servers  # lazy: judgeopt.lm loads DSPy and LiteLLM

    model, settings = _model_and_settings(args)

    def stop_now(signum: int, frame: Any) -> None:
        raise _Stopped(signal.Signals(signum).name)

    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, stop_now) for sig in handled}
    group = None
    try:
        group = start_servers(
            model,
            replicas=args.replicas,
            engine=args.engine,
            config_path=args.out,
            n_threads=args.threads,
            n_ctx=args.n_ctx,
            ports=args.ports,
            alias=args.alias,
            logits_all=args.logits_all,
            model_name=args.model_name,
            router_settings=settings,
        )
        _print_started(args, model, settings, group)
        _watch(group)
    except _Stopped as e:
        if group is None:
            # start_servers stopped the servers it had started.
            print(
                f"judgeopt serve: {e} during start-up; no server is left running", file=sys.stderr
            )
            return 130
        print(
            f"judgeopt serve: {e}: stopping {len(group.servers)} server(s) (pids "
            f"{', '.join(str(p) for p in group.pids)})",
            flush=True,
        )
    except ValueError as e:
        raise CLIError(str(e)) from e
    finally:
        for sig in handled:  # a second Ctrl-C must not interrupt the stopping
            signal.signal(sig, signal.SIG_IGN)
        try:
            if group is not None:
                group.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return 0


def _model_and_settings(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The served model of ``--model`` and the router settings of the options."""
    # lazy: judgeopt.lm loads DSPy and LiteLLM
    from ..lm import DEFAULT_SERVE_SETTINGS, ENGINES, parse_local_model

    if args.engine not in ENGINES:
        raise CLIError(f"--engine must be one of {sorted(ENGINES)}; got {args.engine!r}")
    try:
        model = parse_local_model(args.model) or args.model
    except ValueError as e:
        raise CLIError(str(e)) from e
    settings = dict(DEFAULT_SERVE_SETTINGS)
    if args.routing_strategy:
        settings["routing_strategy"] = args.routing_strategy
    if args.num_retries is not None:
        settings["num_retries"] = args.num_retries
    return model, settings


def _print_started(
    args: argparse.Namespace, model: Any, settings: dict[str, Any], group: Any
) -> None:
    """Print the servers, the router config and how to use it."""
    each = f", {args.threads} thread(s) each" if args.threads else ""
    print(
        f"judgeopt serve: {len(group.servers)} {args.engine} server(s) of {model} on "
        f"127.0.0.1{each}",
        flush=True,
    )
    for server in group.servers:
        print(f"  {server.api_base}  pid {server.pid}", flush=True)
    print(
        f"wrote {group.config_path} (model group {group.model_name!r}, "
        f"routing {settings.get('routing_strategy')})"
    )
    # About two calls in flight per replica keep every one busy (docs/lm.md, Concurrency).
    threads = 2 * len(group.servers)
    print("use it with:")
    print(
        f"  judgeopt compile --router {group.config_path} --threads {threads} "
        "--task ... --aspect ... --data ... --out judge.json"
    )
    print(
        f"  judgeopt evaluate judge.json --router {group.config_path} --threads "
        f"{threads} --data ..."
    )
    print(f"  make_lm({group.spec!r})  # Python")
    print("SIGINT (Ctrl-C) or SIGTERM stops every server.", flush=True)


def _watch(group: Any) -> None:
    """Report each server that exits, until a signal stops the command."""
    reported: set[int] = set()
    while True:
        time.sleep(1.0)
        for server in group.dead():
            if server.pid not in reported:
                reported.add(server.pid)
                print(
                    f"judgeopt serve: the server at {server.api_base} (pid "
                    f"{server.pid}) exited; the router sends requests to the others",
                    file=sys.stderr,
                    flush=True,
                )


def add_parser(sub: Subparsers) -> None:
    """Add ``judgeopt serve``."""
    from ..lm import SERVE_ENGINES  # one light module of judgeopt.lm (no DSPy)

    sv = sub.add_parser(
        "serve",
        help="start local llama.cpp or vLLM servers on 127.0.0.1 and write a router config",
        description=(
            "Start REPLICAS inference servers of one model on 127.0.0.1 (free ports unless "
            "--ports), write a LiteLLM Router config listing them as one model group (--out), "
            "print how to use it, and stay in the foreground: SIGINT (Ctrl-C) or SIGTERM "
            "stops every server. Then judge through all of them with "
            "`judgeopt compile --router FILE --threads N ...`."
        ),
    )
    sv.add_argument(
        "--model",
        required=True,
        help="a registry model (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b, "
        "smollm2-135m; 'local:NAME' works too) or a .gguf file; with "
        "--engine vllm also a Hugging Face model folder or hub id",
    )
    sv.add_argument("--replicas", type=positive_int, default=2, help="servers to start (2)")
    sv.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="CPU threads per server (default $JUDGEOPT_THREADS or 2; replicas x "
        "threads should not exceed the cores)",
    )
    sv.add_argument(
        "--n-ctx",
        type=positive_int,
        default=4096,
        help="context window per server (4096; vLLM's --max-model-len)",
    )
    sv.add_argument(
        "--ports",
        type=lambda t: [positive_int(x) for x in csv_list(t)],
        default=None,
        help="comma-separated port per replica (default: free ports)",
    )
    sv.add_argument(
        "--engine",
        metavar="{" + ",".join(sorted(SERVE_ENGINES)) + "}",
        default="llama.cpp",
        help="inference runtime: llama.cpp (default) or vllm (needs a vLLM "
        "environment: $JUDGEOPT_VLLM_PYTHON, see scripts/install_vllm.sh)",
    )
    sv.add_argument(
        "--out", default="servers.yaml", help="the router config to write (servers.yaml)"
    )
    sv.add_argument(
        "--alias", default=None, help="served model name (default: the model name or file stem)"
    )
    sv.add_argument("--model-name", default="judge", help="the config's model group (judge)")
    sv.add_argument(
        "--routing-strategy",
        default=None,
        help="LiteLLM routing strategy (default least-busy; e.g. simple-shuffle)",
    )
    sv.add_argument(
        "--num-retries", type=int, default=None, help="the Router's retries of a failed request (2)"
    )
    sv.add_argument(
        "--logits-all",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the logits that logprobs need (default on; --no-logits-all saves memory)",
    )
    sv.set_defaults(func=_cmd_serve)
