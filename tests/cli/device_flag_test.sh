#!/usr/bin/env bash
# Worker start-up refusals: a bad --device value exits 2 naming --device; a CUDA device that is
# not there (no GPU, or an ordinal past the last one) exits 1 with the device's error; a
# Transformer-baseline model (no hand-off format) exits 2 naming --model. All at start-up,
# without serving. Usage: device_flag_test.sh YOCO_PREFILL YOCO_DECODE MODEL_DIR YOCO_CLI
set -uo pipefail
PREFILL=$1 DECODE=$2 MODEL=$3 CLI=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# run NAME EXPECTED_CODE NEEDLE BINARY ARGS...: the process must end by itself within 60 s.
run() {
  local name=$1 want=$2 needle=$3 bin=$4; shift 4
  timeout 60 "$bin" --model "${MODEL_OVERRIDE:-$MODEL}" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --threads 1 "$@" \
    >"$dir/$name.out" 2>"$dir/$name.err"
  local code=$?
  [[ $code == 124 ]] && fail "$name: still running after 60 s (it must refuse to start)"
  [[ $code == "$want" ]] || { cat "$dir/$name.err" >&2; fail "$name: exit code $code, expected $want"; }
  grep -q -- "$needle" "$dir/$name.err" || { cat "$dir/$name.err" >&2; fail "$name: stderr lacks '$needle'"; }
  echo "ok: $name ($(head -c 200 "$dir/$name.err" | tr '\n' ' '))"
}

run decode_bad 2 "--device: must be cpu, cuda or cuda:N" "$DECODE" --ucx-listen 127.0.0.1:0 --device gpu
run prefill_bad 2 "--device: must be cpu, cuda or cuda:N" "$PREFILL" --device cuda:x
# No machine has 100 GPUs: without one the build has no CUDA engine or finds no device.
run decode_absent 1 "--device cuda:99: " "$DECODE" --ucx-listen 127.0.0.1:0 --device cuda:99
run prefill_absent 1 "--device cuda:99: " "$PREFILL" --device cuda:99

"$CLI" make-random-model --preset tiny-transformer --out "$dir/tf" --seed 3 >/dev/null || fail "make-random-model"
MODEL_OVERRIDE=$dir/tf run decode_transformer 2 '--model: arch "transformer"' "$DECODE" --ucx-listen 127.0.0.1:0
MODEL_OVERRIDE=$dir/tf run prefill_transformer 2 '--model: arch "transformer"' "$PREFILL"
echo "worker start-up refusal tests passed"
