#!/usr/bin/env bash
# Two builds of the services against each other on the local cluster (router + 1 prefill + 1
# decode worker, deploy/local/cluster.py), interleaved so that drift weighs on both alike: each
# round starts a cluster from BIN_A then from BIN_B (every other round B first), warms it up and
# runs `yoco-cli bench` twice with seeds of its own. Prints one line per run (round, side, TTFT
# p50 / p90 ms, ITL p50 / p90 ms, completed); compare medians. Never asserts; run on an idle machine.
#   bench/ab_cluster.sh BIN_A BIN_B ROUNDS [MODEL]
# BIN_x: a build directory, or any folder with decode_service/yoco-decode,
# prefill_service/yoco-prefill, router/yoco-router and tools/yoco-cli. Environment: AB_BENCH
# (yoco-cli bench flags, default "--requests 150 --rate 10 --prompt-tokens 200 --max-tokens 16").
set -euo pipefail
a=$1 b=$2 rounds=$3 model=${4:-models/kjv-yoco}
cd "$(dirname "$0")/.."
read -ra bench_args <<<"${AB_BENCH:---requests 150 --rate 10 --prompt-tokens 200 --max-tokens 16}"
for ((r = 0; r < rounds; r++)); do
  order=(A B)
  ((r % 2 == 0)) || order=(B A)
  for side in "${order[@]}"; do
    if [[ $side == A ]]; then bin=$a; else bin=$b; fi
    state=$(mktemp -d)
    python3 deploy/local/cluster.py --bin-dir "$bin" --model "$model" --state-dir "$state" --http-port -1 \
      >/dev/null 2>"$state/launcher.err" &
    launcher=$!
    for _ in $(seq 1200); do [[ -f $state/cluster.json ]] && break; sleep 0.1; done
    router=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["router"]["grpc"])' "$state/cluster.json")
    "$bin/tools/yoco-cli" bench --router "$router" --requests 60 --rate 20 --prompt-tokens 128 --max-tokens 24 \
      --seed 900 >/dev/null 2>&1
    for run in 1 2; do
      "$bin/tools/yoco-cli" bench --router "$router" "${bench_args[@]}" --seed $((100 * r + run)) --json |
        python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sys.argv[1], sys.argv[2], "ttft %.1f %.1f itl %.2f %.2f completed %d" % (d["ttft_ms"]["p50"], d["ttft_ms"]["p90"],
      d["itl_ms"]["p50"], d["itl_ms"]["p90"], d["completed"]))' "$((r + 1))" "$side"
    done
    kill "$launcher"
    wait "$launcher" 2>/dev/null || true
    rm -rf "$state"
  done
done
