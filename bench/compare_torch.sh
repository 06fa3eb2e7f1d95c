#!/usr/bin/env bash
# Engine vs the PyTorch baseline on the same random model (bf16 file, fp32 compute) and the
# same thread count. Writes bench/results/<preset>-t<threads>.{engine,torch}.json and prints a
# markdown table (bench/compare.py). Run on an otherwise idle machine.
#   bench/compare_torch.sh PRESET [THREADS] [PREFILL_LENS] [DECODE_BATCHES]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:?preset, e.g. small-gret}
threads=${2:-2}
lens=${3:-1024,2048,4096,8192,16384,32768}
batches=${4:-1,2,4,8,16,32}
model=${YOCO_BENCH_MODELS:-/tmp/yoco-bench-models}/$preset
out=bench/results
mkdir -p "$out"
[[ -f "$model/params.json" ]] || build/tools/yoco-cli make-random-model --preset "$preset" --seed 1 --dtype bf16 --out "$model"
tag="$out/$preset-t$threads"
build/bench/engine_bench --model "$model" --threads "$threads" --prefill-lens "$lens" --decode-batches "$batches" \
  --decode-context 512 --decode-steps 16 --json > "$tag.engine.json"
/usr/bin/python3 bench/torch_baseline.py --model "$model" --threads "$threads" --prefill-lens "$lens" \
  --decode-batches "$batches" --decode-context 512 --decode-steps 16 --json > "$tag.torch.json"
python3 bench/compare.py "$tag.engine.json" "$tag.torch.json"
