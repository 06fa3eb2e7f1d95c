#!/usr/bin/env bash
# The whole test suite: set-up, build, every ctest suite (labels unit, cli, fuzz, model, integration,
# redis, deploy, cluster, image: the CPU image built with podman and run, as root; gpu skips without a
# device), then a time-boxed libFuzzer run of each fuzz target (scripts/fuzz.sh: safetensors header,
# tokenizer, KV store objects, chat templates, HTTP requests), then the sanitizer stages
# (scripts/sanitize.sh: ASan+UBSan over labels unit, integration and cluster; TSan over the
# concurrent parts). YOCO_SANITIZERS picks the stages ("asan tsan" by default, "none" skips them);
# YOCO_FUZZ_SECONDS=0 skips the fuzz run. The later stages' builds (fuzz targets, ASan, TSan)
# compile while ctest runs, at SCHED_IDLE priority (`chrt --idle 0`): they take only the CPU time
# the tests leave idle, and a test's process always runs first. Each stage ends with a
# "test.sh: STAGE took N s" line (README.md, "Where CI's time goes").
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere (CI's) reuses what
# an earlier build of another checkout on this machine compiled, in every build directory below.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
stage_start=$SECONDS
took() {
  echo "test.sh: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}
scripts/setup.sh
took setup
scripts/build.sh
took build

FUZZ_SECONDS=${YOCO_FUZZ_SECONDS:-20}
fuzz=0
if command -v clang++ >/dev/null && [[ "$FUZZ_SECONDS" -gt 0 ]]; then fuzz=1; fi
sanitizers=()
for stage in ${YOCO_SANITIZERS:-asan tsan}; do
  [[ "$stage" == none ]] || sanitizers+=("$stage")
done

# The later builds, in their own session (setsid: one process group to stop if this script ends
# first) and at SCHED_IDLE (nice 19 where chrt cannot set it). A new session is a new scheduler
# autogroup where the kernel has them (Debian's: /proc/sys/kernel/sched_autogroup_enabled), and an
# autogroup shares the CPU equally with ctest's whatever its tasks' policy: measured on a 2-core VM,
# two SCHED_IDLE busy loops of their own session took 63% of the cores from two normal ones. So the
# group is niced too (/proc/self/autogroup, inherited by the builds). Their output goes to a log
# printed after ctest.
later_log=$(mktemp)
later_pid=
stop_later() {
  [[ -z "$later_pid" ]] || kill -- "-$later_pid" 2>/dev/null || true
  rm -f "$later_log"
}
trap stop_later EXIT
if ((fuzz)) || ((${#sanitizers[@]})); then
  # shellcheck disable=SC2016  # expanded by the inner bash
  setsid bash -c '
    echo 19 >/proc/self/autogroup 2>/dev/null || true
    chrt --idle -p 0 $$ >/dev/null 2>&1 || renice -n 19 -p $$ >/dev/null
    set -e
    start=$SECONDS
    if (($1)); then scripts/fuzz.sh build; echo "test.sh: fuzz build took $((SECONDS - start)) s of background"; fi
    shift
    for stage in "$@"; do
      start=$SECONDS
      scripts/sanitize.sh "$stage" build
      echo "test.sh: $stage build took $((SECONDS - start)) s of background"
    done' later-builds "$fuzz" "${sanitizers[@]}" >"$later_log" 2>&1 &
  later_pid=$!
fi

(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600)
took "ctest${later_pid:+ (the later builds beside it)}"

if [[ -n "$later_pid" ]]; then
  later_status=0
  wait "$later_pid" || later_status=$?
  later_pid=
  cat "$later_log"
  took "the later builds' rest, after ctest"
  if ((later_status)); then
    echo "test.sh: the later builds failed (status $later_status)" >&2
    exit "$later_status"
  fi
fi

if ((fuzz)); then
  scripts/fuzz.sh run "$FUZZ_SECONDS"
  took "fuzz run"
fi

# Sanitizer stages, each in its own build dir (build-asan/, build-tsan/; CPU code only).
for stage in "${sanitizers[@]}"; do
  scripts/sanitize.sh "$stage" test
  took "sanitizer stage $stage tests"
done
