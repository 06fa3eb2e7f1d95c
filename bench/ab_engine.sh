#!/usr/bin/env bash
# Two builds of the engine against each other on one machine, interleaved so that drift and
# neighbours weigh on both alike (a redesign's "no regression" check: docs/design.md §2.9).
# Each round runs engine_bench from BUILD_A then BUILD_B (every other round B first); compare
# medians. Never asserts; run on an idle machine.
#   bench/ab_engine.sh BUILD_A BUILD_B PRESET DTYPE ROUNDS [prefill|decode]
# PRESET may be a model directory (engine_bench --model; --write-model makes one, so the rounds
# do not each generate random weights). Environment: AB_CONTEXT (decode context, default 512),
# AB_BATCHES (default 1,2), YOCO_CPU_ISA (passed on: avx2 runs an AVX2-only CPU's path),
# AB_ARGS_A / AB_ARGS_B (more engine_bench flags for one side: one build against itself with two
# settings, e.g. AB_ARGS_A="--kv-pool" AB_ARGS_B="--kv-dtype bf16" for 16-bit K/V).
set -euo pipefail
a=$1 b=$2 preset=$3 dtype=$4 rounds=$5 what=${6:-decode}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
model=(--preset "$preset")
[[ -d $preset ]] && model=(--model "$preset")
if [[ $what == prefill ]]; then args=(--prefill-lens 1024,2048 --decode-batches 1 --decode-steps 2 --repeats 2)
else
  args=(--prefill-lens 16 --decode-batches "${AB_BATCHES:-1,2}" --decode-context "${AB_CONTEXT:-512}" --decode-steps 48
    --repeats 3)
fi
for ((r = 0; r < rounds; r++)); do
  order=(A B)
  ((r % 2 == 0)) || order=(B A)
  for side in "${order[@]}"; do
    if [[ $side == A ]]; then build=$a extra=${AB_ARGS_A:-}; else build=$b extra=${AB_ARGS_B:-}; fi
    # shellcheck disable=SC2086  # the extra flags are words
    "$build/bench/engine_bench" "${model[@]}" --threads 2 --dtype "$dtype" --json "${args[@]}" $extra 2>/dev/null |
      python3 -c '
import json, sys
d = json.load(sys.stdin)
pre = " ".join("prefill %d tok %.0f tok/s" % (x["tokens"], x["tokens_per_s"]) for x in d["prefill"])
dec = " ".join("B%d %.1f ms/step" % (x["batch"], x["ms_per_step"]) for x in d["decode"])
print(sys.argv[1], pre if sys.argv[2] == "prefill" else dec)' "$build${extra:+ $extra}" "$what"
  done
done
