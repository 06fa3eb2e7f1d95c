#!/usr/bin/env bash
# For a lent GPU machine (the device tool; see /work/.library/device/METHOD.md): builds the
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
# bench/gpu/pack_cluster.sh into .gpupack/, with the shared libraries the device lacks):
#              run(command="bench/gpu/device_check.sh cluster", carry=[".deps", ".gpupack"], timeout_s=600)
# fla needs the fla-core wheel carried in .whl/ (bench/README.md, GPU section):
#              run(command="bench/gpu/device_check.sh all", carry=[".deps", ".whl"], timeout_s=600)
set -uo pipefail
mode=${1:-all}
shift || true
OUT=${OUT:-/tmp/yoco-gpu-out}
mkdir -p "$OUT"
prefix=/tmp/yoco-deps
for f in .deps/*.deb; do dpkg -x "$f" "$prefix" || exit 1; done
{ nvidia-smi; nvcc --version; cmake --version | head -1; g++ --version | head -1; } >"$OUT/device.txt" 2>&1
head -12 "$OUT/device.txt"
if [[ $mode == cluster ]]; then  # prebuilt here: no build on the device
  [[ -x .gpupack/build/cuda_cluster_test ]] || { echo "cluster: carry .gpupack (bench/gpu/pack_cluster.sh)"; exit 1; }
  export LD_LIBRARY_PATH=$PWD/.gpupack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} UCX_MODULE_DIR=$PWD/.gpupack/lib/ucx
  export YOCO_SOURCE_DIR=$PWD YOCO_BINARY_DIR=$PWD/.gpupack/build YOCO_PYTHON=$(command -v python3)
  export OMP_WAIT_POLICY=passive
  .gpupack/build/cuda_cluster_test "$@" 2>&1 | tee "$OUT/cuda_cluster_test.log"
  rc=${PIPESTATUS[0]}
  grep -q "SKIPPED" "$OUT/cuda_cluster_test.log" && { echo "WARNING: skipped on a device"; rc=1; }
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
