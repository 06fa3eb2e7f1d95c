#!/usr/bin/env bash
# Two builds of the engine compared by the instructions they execute (valgrind's cachegrind, no
# cache simulation): a count that neighbours and clock drift do not move, for a redesign's "adds no
# work" check where timings on a shared machine are too noisy (docs/design.md §2.9). Per decode
# step: the difference between runs of 16 and 48 steps over 32; per prefill token: 256 against 768
# tokens over 512. One thread. Valgrind reports no AVX-512, so the builds must be configured with
# -DYOCO_NATIVE=OFF and run their AVX2 kernels. Never asserts.
#   bench/ab_instructions.sh BUILD_A BUILD_B [PRESET (tiny-gret)] [DTYPES ("fp32 bf16")]
set -euo pipefail
a=$1 b=$2 preset=${3:-tiny-gret} dtypes=${4:-fp32 bf16}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
count() {  # BUILD DTYPE ARGS... -> instructions executed
  local build=$1 dtype=$2
  shift 2
  OMP_NUM_THREADS=1 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
    "$build/bench/engine_bench" --preset "$preset" --threads 1 --dtype "$dtype" "$@" >"$work/out" 2>&1
  sed -n 's/.*I *refs: *//p' "$work/out" | tr -d ,
}
for dtype in $dtypes; do
  for build in "$a" "$b"; do
    d16=$(count "$build" "$dtype" --prefill-lens 64 --decode-batches 1 --decode-context 256 --decode-steps 16 --repeats 1)
    d48=$(count "$build" "$dtype" --prefill-lens 64 --decode-batches 1 --decode-context 256 --decode-steps 48 --repeats 1)
    p256=$(count "$build" "$dtype" --prefill-lens 256 --decode-batches 1 --decode-context 16 --decode-steps 1 --repeats 1)
    p768=$(count "$build" "$dtype" --prefill-lens 768 --decode-batches 1 --decode-context 16 --decode-steps 1 --repeats 1)
    echo "$build $preset $dtype: $(((d48 - d16) / 32)) instructions per decode step, $(((p768 - p256) / 512)) per prefill token"
  done
done
