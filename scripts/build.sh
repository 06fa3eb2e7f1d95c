#!/usr/bin/env bash
# Configures build/ (Release, Ninja, ccache; tests and benchmarks on) and builds it.
# Arguments go to `cmake --build`, e.g. `scripts/build.sh --target yoco-cli`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"   # cache hits across checkouts (scripts/test.sh)
if [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc   # lets YOCO_CUDA default to ON when the toolkit exists
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DYOCO_BUILD_TESTS=ON -DYOCO_BUILD_BENCH=ON >/dev/null
cmake --build build -j "$(nproc)" "$@"
