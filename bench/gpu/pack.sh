#!/usr/bin/env bash
# Everything a lent GPU machine runs, built here so that no device time goes to compiling: a bare
# device has CUDA but none of the Debian libraries the services need (gRPC, protobuf, UCX, PCRE2,
# hiredis...). Builds in build-gpupack/ for any x86-64 CPU (-DYOCO_NATIVE=OFF), sm_90a only, without
# OpenBLAS/oneDNN (the carry limit is 64 MiB with the working tree): every `gpu`-labelled test, the
# CUDA benches, the router and the workers. Packs them, stripped, with the ctest files of tests/
# and every shared library they load that is neither glibc's, the C++ runtime's nor CUDA's (the
# device has its own), into one archive, .gpupack/pack.tar.xz (listed in .git/info/exclude; ~10 MB).
# Then, on the device (bench/gpu/device_check.sh unpacks it and links the build's absolute paths):
#   run(command="bench/gpu/device_check.sh packed", carry=[".gpupack"], timeout_s=...)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
B=build-gpupack
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DYOCO_NATIVE=OFF -DYOCO_CUDA=ON -DYOCO_CUDA_ARCHS=90a \
  -DYOCO_BUILD_TESTS=ON -DYOCO_BUILD_BENCH=ON -DYOCO_CPU_BLAS=OFF >/dev/null
tests=(cuda_backend_ops_test cuda_prefill_test cuda_causal_attention_test cuda_moe_test cuda_cluster_test
  cuda_engine_test cuda_intermediates_test)
benches=(cuda_ops_bench cuda_engine_bench)
services=(router/yoco-router prefill_service/yoco-prefill decode_service/yoco-decode)
cmake --build "$B" -j "$(nproc)" --target "${tests[@]}" "${benches[@]}" yoco-router yoco-prefill yoco-decode yoco-cli

P=.gpupack
S=$P/stage
rm -rf "$P"
mkdir -p "$S/$B/tests" "$S/$B/bench" "$S/$B/router" "$S/$B/prefill_service" "$S/$B/decode_service" "$S/$B/tools" "$S/lib"
for t in "${tests[@]}"; do cp "$B/tests/$t" "$S/$B/tests/"; done
cp "$B"/tests/*_include.cmake "$B"/tests/*_tests.cmake "$B/tests/CTestTestfile.cmake" "$S/$B/tests/"
for b in "${benches[@]}"; do cp "$B/bench/$b" "$S/$B/bench/"; done
for s in "${services[@]}"; do cp "$B/$s" "$S/$B/$s"; done
cp "$B/tools/yoco-cli" "$S/$B/tools/"
grep -q '^/.gpupack/$' .git/info/exclude 2>/dev/null || echo /.gpupack/ >>.git/info/exclude

# Shared libraries, resolved here; the device's own: glibc, libstdc++/libgcc, the CUDA driver and
# toolkit libraries.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libnvidia)'
for bin in "$S/$B"/*/*; do
  [[ -x $bin && ! -d $bin ]] || continue
  ldd "$bin" 2>/dev/null | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] || cp -n "$path" "$S/lib/"
  done
done
# UCX loads its transports as modules from <libdir>/ucx: cma (tcp, posix and sysv are built in);
# the RDMA ones would pull in rdma-core for nothing on one machine.
ucx_dir=$(dirname "$(ldd "$S/$B/decode_service/yoco-decode" | awk '/libucp/ {print $3}')")/ucx
if [[ -d $ucx_dir ]]; then
  mkdir -p "$S/lib/ucx"
  cp "$ucx_dir"/libuct_cma.so.0 "$S/lib/ucx/"
  for m in "$S"/lib/ucx/*.so.0; do
    ldd "$m" | awk '/=> \// {print $1, $3}' | while read -r name path; do
      [[ $name =~ $skip ]] || cp -n "$path" "$S/lib/"
    done
  done
fi
find "$S" -type f \( -perm -u+x -o -name '*.so*' \) -exec strip --strip-unneeded {} + 2>/dev/null || true
echo "$root" >"$S/BUILD_ROOT"  # the absolute path the ctest files name
git rev-parse HEAD >"$S/COMMIT"
tar -C "$S" -cf - . | xz -9e -T2 >"$P/pack.tar.xz"  # -9e: ~12 MB instead of 14
rm -rf "$S"
du -sh "$P/pack.tar.xz"
