#!/usr/bin/env bash
# Configures and builds into build/ (Release, Ninja, ccache). Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc   # lets YOCO_CUDA default to ON when the toolkit exists
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$(nproc)"
