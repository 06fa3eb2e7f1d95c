#!/usr/bin/env bash
# The CPU engine against this machine's GEMM roof, in one command (bench/README.md, "CPU GEMM roof
# and the bf16 path"): GFLOP/s per engine shape for each library (bench/gemm_roof.cc), then
# engine_bench prefill/decode for each preset with the old path (OpenBLAS), the fp32 path (oneDNN)
# and the bf16 path, then a markdown summary (bench/cpu_roof.py). JSON lands in OUT_DIR.
# OPENBLAS_CORETYPE stays as the environment sets it (Haswell when unset, as on the CI machines),
# to show that the engine's speed no longer depends on it. Never asserts; run on an idle machine.
#   bench/cpu_roof.sh [THREADS] [OUT_DIR]
#   env: YOCO_BIN (build dir, default build), YOCO_ROOF_PRESETS (mid-gret,mid-swa),
#        YOCO_ROOF_PREFILL (1024,2048,4096), YOCO_ROOF_BATCHES (1,2,4,8,16,32,64), YOCO_ROOF_QUICK=1
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
out=${2:-bench/results/cpu-roof}
bin=${YOCO_BIN:-build}
presets=${YOCO_ROOF_PRESETS:-mid-gret,mid-swa}
lens=${YOCO_ROOF_PREFILL:-1024,2048,4096}
batches=${YOCO_ROOF_BATCHES:-1,2,4,8,16,32,64}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
min_s=0.2
[[ "${YOCO_ROOF_QUICK:-0}" == 1 ]] && min_s=0.02
mkdir -p "$out"
echo "{\"threads\": $threads, \"openblas_coretype\": \"$OPENBLAS_CORETYPE\", \"nproc\": $(nproc)," \
  "\"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\", \"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" \
  > "$out/machine.json"

roof() {  # library, extra args
  local lib=$1 name=$2
  shift 2
  YOCO_GEMM_LIBRARY=$lib "$bin/bench/gemm_roof" --threads "$threads" --presets "$presets" --min-seconds "$min_s" "$@" \
    > "$out/gemm-$name.json" 2> "$out/gemm-$name.log"
}
roof onednn onednn
roof openblas "openblas-$OPENBLAS_CORETYPE" --dtypes fp32
[[ "$OPENBLAS_CORETYPE" == SkylakeX ]] || OPENBLAS_CORETYPE=SkylakeX roof openblas openblas-SkylakeX --dtypes fp32

for p in ${presets//,/ }; do
  eb() {  # name, library, dtype
    YOCO_GEMM_LIBRARY=$2 "$bin/bench/engine_bench" --preset "$p" --threads "$threads" --prefill-lens "$lens" \
      --decode-batches "$batches" --decode-context 512 --decode-steps 16 --repeats 2 --dtype "$3" --json \
      > "$out/engine-$p-$1.json"
  }
  eb fp32-openblas openblas fp32  # the path before oneDNN
  eb fp32 onednn fp32
  eb bf16 onednn bf16
done
# Accuracy of the bf16 path on the bench presets (too big for CI): yoco-cli score of one random
# 512-token sequence with --dtype fp32 and bf16, max |Δ log p| over its tokens.
if [[ -x "$bin/tools/yoco-cli" ]]; then
  toks=$(python3 -c "import random; random.seed(5); print(','.join(str(random.randrange(32000)) for _ in range(512)))")
  for p in ${presets//,/ }; do
    for dt in fp32 bf16; do
      "$bin/tools/yoco-cli" score --model "/tmp/yoco-bench-$p" --tokens "$toks" --threads "$threads" --dtype "$dt" \
        --json > "$out/score-$p-$dt.json"
    done
  done
fi
python3 bench/cpu_roof.py "$out" | tee "$out/summary.md"
