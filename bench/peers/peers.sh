#!/usr/bin/env bash
# Our CPU engine against llama.cpp on the same Transformer, on this machine (bench/README.md,
# "Peers: llama.cpp on the same Transformer"). One command, one table (and plot) per machine:
#   bench/peers/peers.sh [--preset mid-gret] [--threads 2] [--lens 512,1024,2048,4096] [--context 2048]
#                        [--steps 32] [--out bench/results/peers]
# Steps (each skipped when its output exists, so a rerun only redoes what failed):
#   1. llama.cpp's llama-bench from the pinned PyPI source distribution of llama-cpp-python
#      (version and sha256 below; `pip download`, the only network access), built twice: AVX2-only
#      (-march without AVX-512, what an AVX2 desktop or cloud instance runs) and native.
#   2. A virtualenv with the `gguf` package from the same sources, which writes the GGUF (LLaMA
#      architecture, random weights, F32 and BF16) of the preset's Transformer with exactly the
#      sizes of our checkpoint (bench/peers/write_gguf.py).
#   3. llama-bench (prefill at --lens, decode of --steps tokens at an empty and a --context
#      context; its defaults otherwise: flash attention auto, K/V f16) and our engine_bench on the
#      same Transformer and on the YOCO preset, fp32 and bf16, all with --threads threads. Ours
#      runs twice: YOCO_CPU_ISA=avx2 (our kernels and oneDNN narrowed to AVX2: how it runs on an
#      AVX2-only CPU, emulated on this one) and native; on a CPU without AVX-512 the two are one.
#   4. bench/peers/table.py: one Markdown table and one SVG plot naming the CPU and its flags.
# Needs: build/bench/engine_bench (cmake --build build --target engine_bench), cmake, a C++
# compiler, python3 with venv, PyPI. Environment: YOCO_BUILD_DIR (default build), PEERS_WORK
# (llama.cpp builds, venv and models; default /tmp/yoco-peers).
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
BUILD=${YOCO_BUILD_DIR:-build}
WORK=${PEERS_WORK:-/tmp/yoco-peers}
PRESET=mid-gret THREADS=2 LENS=512,1024,2048,4096 CONTEXT=2048 STEPS=32 OUT=bench/results/peers
while [[ $# -gt 0 ]]; do
  case $1 in
    --preset) PRESET=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --lens) LENS=$2; shift 2 ;;
    --context) CONTEXT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "peers.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $BUILD/bench/engine_bench ]] || { echo "peers.sh: no $BUILD/bench/engine_bench (cmake --build $BUILD --target engine_bench)" >&2; exit 2; }
mkdir -p "$WORK" "$OUT"
RAW=$OUT/raw-$(hostname -s)
mkdir -p "$RAW"
log() { echo "== $(date -u +%H:%M:%S) $* (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2; }
has_avx512=$(grep -qw avx512f /proc/cpuinfo && echo 1 || echo 0)

# 1. llama-bench from the pinned source distribution.
SRC=$WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION
if [[ ! -d $SRC ]]; then
  log "pip download llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (source distribution)"
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$WORK"
  echo "$LLAMA_CPP_PYTHON_SHA256  $WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" | sha256sum -c --quiet
  tar xzf "$WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$WORK"
fi
LLAMA=$SRC/vendor/llama.cpp
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
build_llama() {  # build_llama NAME CMAKE_FLAGS...
  local name=$1; shift
  [[ -x $WORK/llama-$name/bin/llama-bench ]] && return
  log "build llama-bench ($name)"
  cmake -S "$LLAMA" -B "$WORK/llama-$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DGGML_OPENMP=ON "${launcher[@]}" "$@" >/dev/null
  cmake --build "$WORK/llama-$name" --target llama-bench -j "$(nproc)" >/dev/null
}
build_llama avx2 -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
  -DGGML_AVX512=OFF
[[ $has_avx512 == 1 ]] && build_llama native -DGGML_NATIVE=ON

# 2. The gguf package (from the same sources) and the models.
VENV=$WORK/venv
if [[ ! -x $VENV/bin/python ]]; then
  log "virtualenv with gguf"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "$LLAMA/gguf-py"
fi
M=$WORK/models-$PRESET
if [[ ! -f $M/transformer-bf16.gguf ]]; then
  log "models of $PRESET"
  "$BUILD/bench/engine_bench" --preset "$PRESET" --transformer --write-model "$M/transformer" >/dev/null
  "$BUILD/bench/engine_bench" --preset "$PRESET" --write-model "$M/yoco" >/dev/null
  "$VENV/bin/python" bench/peers/write_gguf.py "$M/transformer" "$M/transformer-f32.gguf" --dtype f32
  "$VENV/bin/python" bench/peers/write_gguf.py "$M/transformer" "$M/transformer-bf16.gguf" --dtype bf16
fi

# 3. The runs: prefill at every length, decode at an empty and a long context.
builds=(avx2)
[[ $has_avx512 == 1 ]] && builds+=(native)
for b in "${builds[@]}"; do
  for dt in f32 bf16; do
    f=$RAW/llama-$b-$dt.json
    [[ -s $f ]] && continue
    log "llama-bench $b $dt"
    "$WORK/llama-$b/bin/llama-bench" -m "$M/transformer-$dt.gguf" -t "$THREADS" -r 1 -o json \
      -p "$LENS" -n 0 >"$f.prefill"
    "$WORK/llama-$b/bin/llama-bench" -m "$M/transformer-$dt.gguf" -t "$THREADS" -r 1 -o json \
      -p 0 -n "$STEPS" -d "0,$CONTEXT" >"$f.decode"
    "$VENV/bin/python" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])) + json.load(open(sys.argv[2]))))' \
      "$f.prefill" "$f.decode" >"$f"
    rm -f "$f.prefill" "$f.decode"
  done
done
for b in "${builds[@]}"; do
  isa_env=(env -u YOCO_CPU_ISA)
  [[ $b == avx2 ]] && isa_env=(env YOCO_CPU_ISA=avx2)
  for model in transformer yoco; do
    for dt in fp32 bf16; do
      f=$RAW/ours-$b-$model-$dt.json
      [[ -s $f ]] && continue
      for ctx in 1 "$CONTEXT"; do
        log "engine_bench $b $model $dt, decode context $ctx"
        lens=$LENS
        [[ $ctx != 1 ]] && lens=1   # the prefill lengths once, with the empty context
        "${isa_env[@]}" "$BUILD/bench/engine_bench" --model "$M/$model" --threads "$THREADS" --dtype "$dt" --json \
          --prefill-lens "$lens" --repeats 2 --decode-batches 1 --decode-context "$ctx" --decode-steps "$STEPS" \
          >"$f.ctx$ctx"
      done
      "$VENV/bin/python" -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); a["decode"]+=b["decode"]; print(json.dumps(a))' \
        "$f.ctx1" "$f.ctx$CONTEXT" >"$f"
      rm -f "$f.ctx1" "$f.ctx$CONTEXT"
    done
  done
done

# 4. The table and the plot.
"$VENV/bin/python" bench/peers/table.py "$RAW" --preset "$PRESET" --threads "$THREADS" --context "$CONTEXT" \
  --out "$OUT/$(hostname -s)"
