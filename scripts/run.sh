#!/usr/bin/env bash
# Runs the engine on the bundled model: set-up, build yoco-cli, then a greedy continuation of
# a KJV-style prompt, printed as it streams. YOCO_MODEL and YOCO_PROMPT override the defaults;
# extra arguments go to `yoco-cli generate` (e.g. --temperature 0.8 --seed 1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target yoco-cli >/dev/null
MODEL=${YOCO_MODEL:-models/kjv-yoco}   # the bundled YOCO trained on the King James Bible
PROMPT=${YOCO_PROMPT:-In the beginning God created}
echo "model: $MODEL (models/README.md); greedy continuation of \"$PROMPT\":"
build/tools/yoco-cli generate --model "$MODEL" --prompt "$PROMPT" --max-tokens 80 "$@"
