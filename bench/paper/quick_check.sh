#!/usr/bin/env bash
# ctest paper_quick (label paper): bench/paper/run.sh --quick runs, writes valid JSON for every
# figure, and plot.py renders every PNG from it, all into a temporary directory. Correctness of
# the scripts only: no timing or figure is asserted (bench/paper/README.md).
#   bench/paper/quick_check.sh BUILD_DIR [FIGURES]
set -euo pipefail
build=$(cd "$1" && pwd)
figures=${2:-1,2,3,4,5,6}
cd "$(dirname "$0")/../.."
work=$(mktemp -d -t yoco-paper-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
bench/paper/run.sh --quick --build-dir "$build" --out "$work/results" --figures "$figures"
/usr/bin/python3 - "$work/results" "$figures" <<'PY'
import json, os, sys
names = {"1": "fig1_memory", "2": "fig2_kv_per_token", "3": "fig3_prefill", "4": "fig4_throughput",
         "5": "fig5_yocou_loops", "6": "fig6_serving"}
for f in sys.argv[2].split(","):
    with open(os.path.join(sys.argv[1], names[f] + ".json")) as fp:
        doc = json.load(fp)
    for key in ("figure", "command", "git_commit", "threads", "machine", "data"):
        assert key in doc, "%s: no %r" % (names[f], key)
    rows = doc["data"]["rows"]
    assert rows and any("skipped" not in r for r in rows), "%s: no measured rows" % names[f]
    print("paper_quick: %s ok (%d rows)" % (names[f], len(rows)))
PY
/usr/bin/python3 bench/paper/plot.py --results "$work/results" --out "$work/figures"
for f in ${figures//,/ }; do
  ls "$work/figures"/fig"$f"_*.png >/dev/null
done
echo "paper_quick: every figure rendered"
