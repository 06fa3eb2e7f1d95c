#!/usr/bin/env bash
# The sanitizer stages of scripts/test.sh; each runs alone too:
#   scripts/sanitize.sh asan [build|test]   ASan + UBSan (build-asan/): labels unit, integration and cluster
#   scripts/sanitize.sh tsan   TSan (build-tsan/): the concurrent parts (batcher, prefill scheduler,
#                              transfer, KV store, router policy and stall watch, API keys and their
#                              file watcher, server kit, the metrics and the streaming HTTP servers). Not the cluster
#                              suite: Debian's gRPC/protobuf/abseil are not TSan-instrumented, so every
#                              completion-queue hand-off between gRPC threads reads as a race
#                              (thousands of reports in grpc::/protobuf inline code per cluster_test run)
#                              and a suppression wide enough to hide them would hide races in our
#                              handlers too. YOCO_TSAN_CLUSTER=1 adds the TSan-built servers and
#                              cluster_test anyway (for a gRPC built with -fsanitize=thread).
# A second argument runs one half: `build` configures and builds the stage's targets, `test` runs its
# suites on what is built (scripts/test.sh builds both stages while the main ctest run goes, then
# tests them); without it, both. CPU code only: both dirs are configured with YOCO_CUDA=OFF (CUDA code is not sanitized). Each
# stage builds only the targets its suites need. A finding fails the stage: the runtime options
# halt on the first report (the process exits non-zero, its test fails), and ASan/LSan/TSan reports
# (also from a server process a test started) go to BUILD/sanitizer-logs/, which must be empty at
# the end; UBSan's report is in the failing test's output. Suppressions (third-party code only):
# tests/sanitizers/{lsan,ubsan,tsan}.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
stage=${1:?usage: scripts/sanitize.sh asan|tsan [build|test]}
phase=${2:-all}
case "$phase" in
  all | build | test) ;;
  *)
    echo "sanitize.sh: unknown phase '$phase' (build, test, or none for both)" >&2
    exit 2
    ;;
esac
jobs=${YOCO_SANITIZE_JOBS:-$(nproc)}
supp=$root/tests/sanitizers

# The concurrent parts (TSan) and, for ASan, every test executable of labels unit, integration and
# cluster plus the binaries the cluster suite starts.
concurrent=(batcher_test prefill_scheduler_test transfer_test transfer_peer transfer_unit_test kv_store_test
            router_policy_test router_test api_keys_test server_kit_test metrics_test http_listener_test
            structured_test)
servers=(yoco-router yoco-prefill yoco-decode)
case "$stage" in
  asan)
    dir=build-asan
    flags=(-DYOCO_SANITIZE=ON)
    targets=("${concurrent[@]}" "${servers[@]}" yoco-cli golden_test intermediates_test kernels_test engine_test checkpoint_test
             sampler_test common_test handoff_test presets_test kv_pool_test transformer_test
             tensor_parallel_test proto_test tokenizer_test openai_test cluster_test documents_test colocated_test
             api_keys_cluster_test tls_test chat_template_test render_cases gemv_test checksum_test bf16_test
             kv_routing_cluster_test model_unit_test moe_cluster_test)
    labels='^(unit|integration|cluster)$'
    # The house-rule checks are scripts (no sanitized code); the main ctest run has them.
    exclude='^(layers_check|layers_check_self_test|format_check)$'
    ;;
  tsan)
    dir=build-tsan
    flags=(-DYOCO_TSAN=ON)
    # The chat templates: one compiled template rendered from several threads (chat_template_test), and
    # chat_template_jinja2 (labelled unit) needs its render_cases tool built here.
    targets=("${concurrent[@]}" chat_template_test render_cases)
    labels='^(unit|integration)$'
    if [[ "${YOCO_TSAN_CLUSTER:-0}" == 1 ]]; then
      targets+=("${servers[@]}" cluster_test)
      labels='^(unit|integration|cluster)$'
    fi
    # Only what is built here runs: a test executable not built leaves an unlabelled *_NOT_BUILT entry.
    # The kernels' per-ISA runs (kernels_test_isa_*, gemv_test_isa_*, bf16_test_isa_*) are plain add_test entries of
    # executables built only in the ASan stage.
    exclude='^(layers_check|layers_check_self_test|format_check|tokenizer_reference_data|cluster_cli_test|cluster_cli_colocated_test|openai_sdk_test|openai_sse_curl_test|openai_hostile_http_test|kernels_test_isa_[a-z0-9]+|gemv_test_isa_[a-z0-9]+|bf16_test_isa_[a-z0-9]+)$'
    ;;
  *)
    echo "sanitize.sh: unknown stage '$stage' (asan or tsan)" >&2
    exit 2
    ;;
esac

start=$SECONDS
# The Python-side tests (tokenizer reference data, chat_template_jinja2) use the main build's venv.
# -O1 -g1 (line tables: reports keep file:line), the sanitizers' usual level: compiling is most of
# this stage's time in CI, and against -O2 -g the heaviest unit (server/http_stream_server.cc,
# Boost.Beast under ASan+UBSan) takes 166 s of CPU instead of 273 s and 2.7 GB instead of 4.6 GB
# (README.md, "Where CI's time goes").
if [[ "$phase" != test ]]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DYOCO_CUDA=OFF -DYOCO_BUILD_BENCH=OFF \
    -DYOCO_BUILD_TESTS=ON -DYOCO_VENV="$root/build/.venv" "${flags[@]}" >/dev/null
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
fi
built=$SECONDS
if [[ "$phase" == build ]]; then
  echo "sanitize.sh: $stage build $((built - start)) s"
  exit 0
fi
if [[ ! -f "$dir/CTestTestfile.cmake" ]]; then
  echo "sanitize.sh: $dir is not built: run 'scripts/sanitize.sh $stage build' first" >&2
  exit 2
fi

logs=$root/$dir/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
# halt_on_error: the first report ends the process (with a non-zero status), so a test fails.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=0:log_path=$logs/asan"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp:log_path=$logs/ubsan"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:log_path=$logs/tsan"
# UCX's memory hooks (libucm) patch mmap/madvise/malloc; under a sanitizer its madvise hook runs in
# thread exit after the sanitizer's per-thread state is gone (a crash in TSan's MutexPreReadLock from
# ucm_event_enter). The transfer tests use tcp/shm without registration-cache events: hooks off.
export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no
if [[ "$stage" == tsan ]]; then
  # libgomp is not TSan-instrumented: its barriers are invisible to TSan, so every OpenMP region
  # would report false races. One OpenMP thread keeps the compute serial; the threads under test
  # (servers, schedulers, transfer) are ours and fully instrumented.
  export OMP_NUM_THREADS=1
fi
status=0
(cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 600 -L "$labels" -E "$exclude") || status=$?
if compgen -G "$logs/*" >/dev/null; then
  echo "sanitize.sh: $stage reports (in $logs):" >&2
  cat "$logs"/* >&2
  status=1
fi
echo "sanitize.sh: $stage stage: build $((built - start)) s, tests $((SECONDS - built)) s, status $status"
exit $status
