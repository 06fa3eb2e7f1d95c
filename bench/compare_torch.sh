#!/usr/bin/env bash
# Engine vs the PyTorch baseline on the same random model (bf16 file) and the same thread count, in
# both precisions in one run: fp32 (fp32 weights and products on both sides) and bf16 (bf16
# weights and products, fp32 norms/softmax/states: engine --dtype bf16, torch.bfloat16 matrices).
# Writes bench/results/<preset>-t<threads>.<dtype>.{engine,torch}.json and prints markdown tables
# (bench/compare.py). Run on an otherwise idle machine.
#   bench/compare_torch.sh PRESET [THREADS] [PREFILL_LENS] [DECODE_BATCHES] [DTYPES]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:?preset, e.g. small-gret}
threads=${2:-2}
lens=${3:-1024,2048,4096,8192,16384,32768}
batches=${4:-1,2,4,8,16,32}
dtypes=${5:-fp32,bf16}
model=${YOCO_BENCH_MODELS:-/tmp/yoco-bench-models}/$preset
out=bench/results
mkdir -p "$out"
bin=${YOCO_BIN:-build}
# The same file engine_bench --preset makes: seed 1, bf16.
[[ -f "$model/params.json" ]] || "$bin/bench/engine_bench" --preset "$preset" --write-model "$model"
for dtype in ${dtypes//,/ }; do
  tag="$out/$preset-t$threads.$dtype"
  "$bin/bench/engine_bench" --model "$model" --threads "$threads" --prefill-lens "$lens" --decode-batches "$batches" \
    --decode-context 512 --decode-steps 16 --dtype "$dtype" --json > "$tag.engine.json"
  /usr/bin/python3 bench/torch_baseline.py --model "$model" --threads "$threads" --prefill-lens "$lens" \
    --decode-batches "$batches" --decode-context 512 --decode-steps 16 --dtype "$dtype" --json > "$tag.torch.json"
  python3 bench/compare.py "$tag.engine.json" "$tag.torch.json"
done
