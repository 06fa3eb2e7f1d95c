#!/usr/bin/env bash
# For a lent GPU machine (the device tool; see /work/.library/device/METHOD.md).
#
# packed [STEPS] (the way to spend a short window): runs the binaries bench/gpu/pack.sh built here
# (no compiling on the device), carried as .gpupack/pack.tar.xz:
#   bench/gpu/pack.sh      # here, once per commit (~10 MB)
#   run(command="bench/gpu/device_check.sh packed tests,inter,engine,ops,moe,serve", carry=[".gpupack"])
# (add ".whl" to carry and "fla" to the steps for the fla-core table). STEPS, comma-separated, run
# in the order given, each under its own time limit so the call ends inside the device's:
#   tests   ctest -L gpu over tests/ (kernels, engine, intermediates, MoE, the CUDA cluster)
#   inter   cuda_intermediates_test alone, every stage line printed (where a gap first grows)
#   engine  cuda_engine_bench, preset yoco-u-1.3b at T = 1 and 3: prefill 8K..256K, decode at
#           batch 32 with 128 generated tokens after each context (seed 003 Tables 8-10), a
#           prefill chunk sweep at 32K
#   decode  the decode half of engine again, as CUDA graphs (T = 1, 3)
#   gret    cuda_engine_bench on yoco-3b (gated retention): prefill 16K and 64K, decode
#   ops     cuda_ops_bench (copy bandwidth, bf16 GEMM peak, decode attention, retention, SWA,
#           causal, sampling; extra arguments after STEPS go to it), then its moe section on
#           yoco-u-moe
#   moe     cuda_engine_bench on yoco-u-moe and yoco-u-dense-active
#   serve   bench/serve_bench.sh with CUDA workers: 1 prefill + 1 decode vs colocated, 3 rates
#   fla     bench/gpu/fla_compare.py against cuda_ops_bench's retention/swa lines (carry .whl)
#   sanitize  compute-sanitizer memcheck and racecheck on the golden intermediates that fail
#   ncu     Nsight Compute's per-kernel summary of one yoco-u-1.3b 16K prefill
# Logs go to $OUT/logs.tar.gz, re-packed after every step (the tool returns 8 files; a call stopped
# at its limit still returns the steps that ended).
#
# The older modes build on the device first (minutes of device time; .deps carried):
# builds the
# kernels, the engine, their tests and benches with CMake + CUDA only (no Debian -dev packages
# there except GoogleTest, carried as .debs in .deps/ and unpacked into a private prefix), runs
# every `gpu`-labelled test, then the benches. Logs and tables go under $OUT.
#
# Here, once:  mkdir -p .deps && (cd .deps && apt-get download libgtest-dev libgmock-dev)
#              (.deps/ is listed in .git/info/exclude)
# Then:        run(command="bench/gpu/device_check.sh all", carry=[".deps"], timeout_s=600)
# Modes: tests (build + ctest -L gpu), bench (build + benches), fla (cuda_ops_bench's retention and
# swa against fla-core's Triton kernels and torch SDPA / flex_attention: bench/gpu/fla_compare.py,
# table by bench/gpu/compare_fla.py), all (the three). Extra arguments are passed to
# cuda_ops_bench in the bench step (e.g. --sections decode,retention).
# cluster: tests/gpu/cuda_cluster_test against the packed cluster binaries (built here by
# bench/gpu/pack.sh: see packed above).
# fla needs the fla-core wheel carried in .whl/ (bench/README.md, GPU section):
#              run(command="bench/gpu/device_check.sh all", carry=[".deps", ".whl"], timeout_s=600)
set -uo pipefail
mode=${1:-all}
shift || true
OUT=${OUT:-/tmp/yoco-gpu-out}
mkdir -p "$OUT"
prefix=/tmp/yoco-deps
for f in .deps/*.deb; do [[ -e $f ]] || continue; dpkg -x "$f" "$prefix" || exit 1; done
{ nvidia-smi; nvcc --version; cmake --version | head -1; g++ --version | head -1; nproc; grep -m1 "model name" /proc/cpuinfo; uname -r; } >"$OUT/device.txt" 2>&1
head -12 "$OUT/device.txt"
if [[ $mode == packed || $mode == cluster ]]; then  # prebuilt here by bench/gpu/pack.sh
  [[ -f .gpupack/pack.tar.xz ]] || { echo "$mode: carry .gpupack (bench/gpu/pack.sh)"; exit 1; }
  steps=${1:-tests,inter,engine,ops,moe,serve}
  [[ $mode == cluster ]] && steps=cluster
  L=/tmp/gpulogs/logs  # packed into $OUT/logs.tar.gz after every step: a call cut short keeps what ran
  mkdir -p "$L" /tmp/gpupack
  tar -C /tmp/gpupack -xJf .gpupack/pack.tar.xz 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpupack/pack.tar.xz /tmp/gpupack ||
    exit 1
  # The ctest files name the paths of the build here: point them at the unpacked build and this tree.
  root=$(cat /tmp/gpupack/BUILD_ROOT)
  B=/tmp/gpupack/build-gpupack
  sed -i -e "s|$root/build-gpupack|$B|g" -e "s|$root|$PWD|g" "$B"/tests/*.cmake || exit 1
  cp "$OUT/device.txt" "$L/"
  echo "pack of commit $(cat /tmp/gpupack/COMMIT); tree at $(git rev-parse HEAD 2>/dev/null)" | tee -a "$L/device.txt"
  export LD_LIBRARY_PATH=/tmp/gpupack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} UCX_MODULE_DIR=/tmp/gpupack/lib/ucx
  export YOCO_SOURCE_DIR=$PWD YOCO_BINARY_DIR=$B YOCO_PYTHON=$(command -v python3)
  export OMP_WAIT_POLICY=passive
  rc=0
  step() {  # name seconds command...: one logged, time-limited step
    local name=$1 limit=$2 t0=$SECONDS r
    shift 2
    echo "== $name (limit ${limit}s)"
    timeout -k 5 "$limit" "$@" >"$L/$name.log" 2>&1
    r=$?
    echo "== $name: rc $r, $((SECONDS - t0)) s" | tee -a "$L/summary.txt"
    [[ $r == 0 ]] || rc=1
    tar -C /tmp/gpulogs -czf "$OUT/logs.tar.gz" logs
    return $r
  }
  eb=$B/bench/cuda_engine_bench
  tables=(--prefill-lens 8192,16384,32768,65536,131072,262144 --decode-contexts 8192,16384,32768,65536,131072,262144
    --decode-batches 32 --decode-steps 128 --repeats 2 --json)
  IFS=, read -ra todo <<<"$steps"
  for s in "${todo[@]}"; do
    case $s in
      tests)
        step tests 240 env OMP_NUM_THREADS=2 ctest --test-dir "$B/tests" -L gpu -j8 --timeout 150 --output-on-failure
        grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped" "$L/tests.log" | cut -c1-200 | head -60
        if grep -q "Skipped" "$L/tests.log"; then echo "WARNING: gpu tests skipped on a device"; rc=1; fi ;;
      cluster)
        step cluster 400 "$B/tests/cuda_cluster_test" ;;
      inter)
        step inter 90 env OMP_NUM_THREADS=8 "$B/tests/cuda_intermediates_test"
        grep -E "^\[  (FAILED|     OK|  PASSED)" "$L/inter.log" | head -20 ;;
      engine)
        for T in 1 3; do
          step "engine_t$T" 150 "$eb" --preset yoco-u-1.3b --loops "$T" "${tables[@]}"
          grep -E "^ +[0-9]" "$L/engine_t$T.log"
        done
        for c in 2048 8192 16384; do
          step "engine_chunk$c" 40 "$eb" --preset yoco-u-1.3b --prefill-lens 32768 --chunk-tokens "$c" \
            --decode-contexts 1024 --decode-batches 1 --decode-steps 2 --json
        done ;;
      decode)  # the decode half of the tables alone, eager and as CUDA graphs
        for T in 1 3; do
          step "decode_t${T}_graphs" 100 "$eb" --preset yoco-u-1.3b --loops "$T" --prefill-lens 8192 --repeats 1 \
            --decode-contexts 8192,16384,32768,65536,131072,262144 --decode-batches 32 --decode-steps 128 --cuda-graphs --json
          grep -E "^ +32 " "$L/decode_t${T}_graphs.log"
        done
        ;;
      gret)  # gated retention's prefill (yoco-3b, figure 3's preset) at two lengths
        step gret 60 "$eb" --preset yoco-3b --prefill-lens 16384,65536 --repeats 2 --decode-contexts 4096 \
          --decode-batches 1,32 --decode-steps 16 --json
        grep -E "^ +[0-9]" "$L/gret.log" ;;
      ops)
        step ops 120 stdbuf -oL "$B/bench/cuda_ops_bench" "${@:2}"
        step ops_moe 60 stdbuf -oL "$B/bench/cuda_ops_bench" --preset yoco-u-moe --sections copy,moe
        tail -30 "$L/ops_moe.log" ;;
      moe)
        for p in yoco-u-moe yoco-u-dense-active; do
          step "engine_$p" 90 "$eb" --preset "$p" --prefill-lens 4096,16384 --chunk-tokens 4096 \
            --decode-contexts 4096 --decode-batches 1,8,32 --decode-steps 32 --repeats 2 --json
          grep -E "^ +[0-9]" "$L/engine_$p.log"
        done ;;
      serve)
        step serve_cuda 150 env YOCO_BUILD_DIR="$B" SERVE_DEVICE=cuda bench/serve_bench.sh 32 512 64 4 16 64
        grep -E "^==|TTFT|inter-token|p50|throughput" "$L/serve_cuda.log" | head -40 ;;
      fla)
        if compgen -G ".whl/*.whl" >/dev/null; then
          python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
            export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || { echo "fla: wheel install failed"; rc=1; }
        fi
        grep -q '"op":"retention_prefill"' "$L/ops.log" 2>/dev/null ||
          step ops_fla 90 stdbuf -oL "$B/bench/cuda_ops_bench" --sections retention,swa
        step fla 200 env PYTHONUNBUFFERED=1 python3 bench/gpu/fla_compare.py run
        cat "$L"/ops*.log >"$L/ours.txt"
        python3 bench/gpu/compare_fla.py "$L/ours.txt" "$L/fla.log" >"$L/fla_table.md" && cat "$L/fla_table.md" ;;
      sanitize)  # the two golden cases that are off in one stage, under compute-sanitizer
        for tool in memcheck racecheck; do
          step "sanitize_$tool" 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/tests/cuda_intermediates_test" \
            --gtest_filter='Configs/CudaIntermediatesTest.*/1:Configs/CudaIntermediatesTest.*/7'
          grep -E "ERROR SUMMARY|Invalid|Race|hazard" "$L/sanitize_$tool.log" | head -10
        done ;;
      ncu)
        step ncu 120 ncu --metrics gpu__time_duration.sum --print-summary per-kernel --clock-control none "$eb" --preset yoco-u-1.3b \
          --prefill-lens 16384 --repeats 1 --decode-contexts 1024 --decode-batches 1 --decode-steps 1
        tail -60 "$L/ncu.log" ;;
      *) echo "unknown step $s"; rc=1 ;;
    esac
  done
  cat "$L/summary.txt"
  tar -C /tmp/gpulogs -czf "$OUT/logs.tar.gz" logs
  exit $rc
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DYOCO_CUDA=ON -DYOCO_CUDA_ARCHS=90a \
  -DYOCO_TRANSFER=OFF -DYOCO_TOKENIZER=OFF -DYOCO_KV_STORE=OFF -DYOCO_CPU_BLAS=OFF \
  -DGTest_DIR="$prefix/usr/lib/x86_64-linux-gnu/cmake/GTest" >"$OUT/configure.log" 2>&1 ||
  { tail -40 "$OUT/configure.log"; exit 1; }
start=$(date +%s)
targets=()
[[ $mode == fla ]] && targets=(cuda_ops_bench)  # fla alone needs only the ops bench
ninja -C build-gpu -j"$(nproc)" ${targets[@]+"${targets[@]}"} >"$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build: $(($(date +%s) - start)) s"
rc=0
if [[ $mode == tests || $mode == all ]]; then
  ctest --test-dir build-gpu -L gpu --output-on-failure -j4 --timeout 300 >"$OUT/ctest-gpu.log" 2>&1 || rc=1
  grep -E "tests passed|tests failed|Failed|\(Failed\)|\(Timeout\)|SKIPPED" "$OUT/ctest-gpu.log" | head -40
  # The skip count must be zero on a device: a skipped GPU test here would be a silent pass.
  if grep -q "Skipped" "$OUT/ctest-gpu.log"; then echo "WARNING: gpu tests skipped on a device"; rc=1; fi
fi
if [[ $mode == bench || $mode == all ]]; then
  build-gpu/bench/cuda_ops_bench "$@" 2>&1 | tee "$OUT/cuda_ops_bench.txt" || rc=1
  if [[ -x build-gpu/bench/cuda_engine_bench ]]; then
    build-gpu/bench/cuda_engine_bench 2>&1 | tee "$OUT/cuda_engine_bench.txt" || rc=1
  fi
fi
if [[ $mode == fla || $mode == all ]]; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || { echo "fla: wheel install failed"; rc=1; }
  else
    echo "fla: no .whl/*.whl carried: fla-core is missing, only the SDPA rows will be timed"
  fi
  # Our side: cuda_ops_bench's retention/swa JSON lines, from the bench step when it ran both
  # (mode all without --sections), else run here (appended; the join takes the last line per shape).
  if [[ $mode == fla ]]; then
    build-gpu/bench/cuda_ops_bench --sections retention,swa 2>&1 | tee "$OUT/cuda_ops_bench.txt" || rc=1
  elif ! grep -q '"op":"retention_prefill"' "$OUT/cuda_ops_bench.txt" 2>/dev/null ||
    ! grep -q '"op":"swa_prefill"' "$OUT/cuda_ops_bench.txt"; then
    build-gpu/bench/cuda_ops_bench --sections retention,swa 2>&1 | tee -a "$OUT/cuda_ops_bench.txt" || rc=1
  fi
  PYTHONUNBUFFERED=1 python3 bench/gpu/fla_compare.py run 2>&1 | tee "$OUT/fla_compare.txt" || rc=1
  python3 bench/gpu/compare_fla.py "$OUT/cuda_ops_bench.txt" "$OUT/fla_compare.txt" >"$OUT/fla_table.md" || rc=1
  cat "$OUT/fla_table.md"
fi
exit $rc
