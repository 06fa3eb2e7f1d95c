#!/usr/bin/env bash
# The whole test suite: set-up, build, every ctest suite (labels unit, cli, fuzz, model, integration,
# redis, deploy, cluster, image: the CPU image built with podman and run, as root; gpu skips without a
# device), then a time-boxed libFuzzer run of each fuzz target (safetensors header, tokenizer, KV store
# objects, chat templates, HTTP requests), then the sanitizer stages
# (scripts/sanitize.sh: ASan+UBSan over labels unit, integration and cluster; TSan over the
# concurrent parts). YOCO_SANITIZERS picks the stages ("asan tsan" by default, "none" skips them);
# YOCO_FUZZ_SECONDS=0 skips the fuzz run. Each stage ends with a "test.sh: STAGE took N s" line
# (README.md, "Where CI's time goes").
set -euo pipefail
cd "$(dirname "$0")/.."
stage_start=$SECONDS
took() {
  echo "test.sh: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}
scripts/setup.sh
took setup
scripts/build.sh
took build
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600)
took ctest

# libFuzzer needs clang: a separate build of just the fuzz targets.
FUZZ_SECONDS=${YOCO_FUZZ_SECONDS:-20}
if command -v clang++ >/dev/null && [[ "$FUZZ_SECONDS" -gt 0 ]]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DYOCO_FUZZ=ON \
    -DYOCO_CUDA=OFF -DYOCO_BUILD_TESTS=OFF -DYOCO_BUILD_BENCH=OFF -DYOCO_CPU_BLAS=OFF -DYOCO_NATIVE=OFF >/dev/null
  cmake --build build-fuzz -j "$(nproc)" --target safetensors_header_fuzz tokenizer_fuzz kv_store_fuzz chat_template_fuzz \
    openai_request_fuzz http_request_fuzz
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  for target in safetensors_header tokenizer kv_store chat_template openai_request http_request; do
    seeds=tests/fuzz/corpus/${target%_header}
    mkdir -p "$work/$target"
    cp "$seeds"/* "$work/$target"/
    [[ $target != chat_template ]] || cp tests/data/chat_templates/*.jinja "$work/$target"/
    build-fuzz/tests/fuzz/${target}_fuzz -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 \
      -print_final_stats=1 "$work/$target" 2>&1 | tail -n 4
    echo "libFuzzer: ${target}_fuzz ran ${FUZZ_SECONDS}s with no crash"
  done
  took "fuzz (build and run)"
fi

# Sanitizer stages, each in its own build dir (build-asan/, build-tsan/; CPU code only).
for stage in ${YOCO_SANITIZERS:-asan tsan}; do
  [[ "$stage" == none ]] || scripts/sanitize.sh "$stage"
  took "sanitizer stage $stage"
done
