#!/usr/bin/env bash
# The libFuzzer stage of scripts/test.sh; runs alone too:
#   scripts/fuzz.sh [build|run] [SECONDS]
# build: the fuzz targets (safetensors header, tokenizer, KV store objects, chat templates, OpenAI and
# HTTP requests) in build-fuzz/ with clang (libFuzzer needs it); run: each target for SECONDS (20 by
# default) from its seed corpus (tests/fuzz/corpus/), two at a time on two or more cores; without a
# phase, both. A crash, leak or timeout fails the run and prints libFuzzer's report.
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-all}
seconds=${2:-20}
case "$phase" in
  all | build | run) ;;
  *)
    echo "fuzz.sh: unknown phase '$phase' (build, run, or none for both)" >&2
    exit 2
    ;;
esac
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (scripts/setup.sh installs it)" >&2
  exit 2
fi
targets=(safetensors_header tokenizer kv_store chat_template openai_request http_request)

if [[ "$phase" != run ]]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DYOCO_FUZZ=ON \
    -DYOCO_CUDA=OFF -DYOCO_BUILD_TESTS=OFF -DYOCO_BUILD_BENCH=OFF -DYOCO_CPU_BLAS=OFF -DYOCO_NATIVE=OFF >/dev/null
  cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/%/_fuzz}"
fi
[[ "$phase" != build ]] || exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run_one() {
  local target=$1 seeds=tests/fuzz/corpus/${1%_header}
  mkdir -p "$work/$target"
  cp "$seeds"/* "$work/$target"/
  [[ $target != chat_template ]] || cp tests/data/chat_templates/*.jinja "$work/$target"/
  if build-fuzz/tests/fuzz/"${target}"_fuzz -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
    "$work/$target" >"$work/$target.log" 2>&1; then
    tail -n 4 "$work/$target.log"
    echo "libFuzzer: ${target}_fuzz ran ${seconds}s with no crash"
  else
    cat "$work/$target.log"
    echo "libFuzzer: ${target}_fuzz failed" >&2
    return 1
  fi
}
# Each fuzzer is one process on one core: two at a time where there are two cores.
lanes=$(($(nproc) >= 2 ? 2 : 1))
status=0
for ((i = 0; i < ${#targets[@]}; i += lanes)); do
  pids=()
  for ((j = i; j < i + lanes && j < ${#targets[@]}; j++)); do
    run_one "${targets[j]}" >"$work/out.$j" 2>&1 &
    pids+=($!)
  done
  for ((j = i; j < i + ${#pids[@]}; j++)); do
    wait "${pids[j - i]}" || status=1
    cat "$work/out.$j"
  done
done
exit $status
