#!/usr/bin/env bash
# The SLA planner's calibration end to end (bench/README.md, "SLA planner"): builds what it needs,
# measures this machine's CPU profile on a 1 + 1 local cluster, then the simulator against the
# local cluster at three loads on two traces, and the planner's two scenarios next to measured runs
# of what it recommends. Results in bench/results/planner/ (calibration.md, .json, .png).
# Run on an idle machine; about 7 minutes. Arguments go to calibrate.py (--quick: a smoke run).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --build build --target yoco-cli yoco-router yoco-prefill yoco-decode engine_bench transfer_bench >/dev/null
# --pin: each worker's threads on a core of their own (bench/README.md: the runs of a cell agree far
# better than with the workers free to share a core).
exec /usr/bin/python3 bench/planner/calibrate.py --scenarios --pin "$@"
