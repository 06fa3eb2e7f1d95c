#!/usr/bin/env bash
# Measures the paper's efficiency figures on our engine and writes raw JSON, one file per figure
# (bench/paper/README.md shows them; bench/paper/plot.py draws them from the JSON alone).
#
#   bench/paper/run.sh [--quick | --full] [--device cpu|cuda] [--out DIR] [--threads N]
#                      [--build-dir DIR] [--figures 1,2,3,4,5,6]
#
#   --quick         small models and lengths, a few minutes (CI runs it for correctness only)
#   --full          the figures of the page (default): mid-size models, 4K..256K; ~45 min on 2 cores
#   --device cpu    the CPU engine (engine_bench) for figures 1-5, the local cluster for figure 6
#   --device cuda   the CUDA engine (cuda_engine_bench, e.g. --build-dir build-gpu from
#                   bench/gpu/device_check.sh) for figures 1, 3 and 5; files get a _cuda suffix
#   --out DIR       default bench/results/paper
#   --threads N     CPU threads of the engine (default 2)
#   --build-dir DIR where bench/engine_bench etc. are (default build)
#
# Needs only python3's standard library; any failing step stops the run with its error.
set -euo pipefail
exec python3 "$(dirname "$0")/run.py" "$@"
