#!/usr/bin/env bash
# Runs the engine on a model: set-up, build yoco-cli, make the bundled random model if needed,
# then a greedy generation printed as it streams.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target yoco-cli >/dev/null
MODEL=${YOCO_MODEL:-build/models/tiny-gret}
if [[ ! -f "$MODEL/params.json" ]]; then
  build/tools/yoco-cli make-random-model --preset tiny-gret --seed 1 --out "$MODEL"
fi
build/tools/yoco-cli info --model "$MODEL"
echo "generate (greedy, 24 tokens) from prompt tokens 1,2,3,4,5:"
build/tools/yoco-cli generate --model "$MODEL" --tokens 1,2,3,4,5 --max-tokens 24 "$@"
