#!/usr/bin/env bash
# The whole cluster for a lent GPU machine, which has CUDA but none of the Debian libraries the
# services need (gRPC, protobuf, UCX, PCRE2, hiredis...). Builds here, for any x86-64 CPU
# (-DYOCO_NATIVE=OFF), sm_90a and without OpenBLAS (36 MB; the carry limit is 64 MiB), the router,
# prefill and decode workers and cuda_cluster_test,
# and packs them with every shared library they load that is neither glibc's, the C++ runtime's
# nor CUDA's (the device has its own) into .gpupack/ (listed in .git/info/exclude). Then
#   run(command="bench/gpu/device_check.sh cluster", carry=[".deps", ".gpupack"], timeout_s=600)
# runs tests/gpu/cuda_cluster_test there against the packed binaries.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build-gpupack
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DYOCO_NATIVE=OFF -DYOCO_CUDA=ON -DYOCO_CUDA_ARCHS=90a \
  -DYOCO_BUILD_TESTS=ON -DYOCO_BUILD_BENCH=OFF -DYOCO_CPU_BLAS=OFF >/dev/null
cmake --build "$B" -j "$(nproc)" --target yoco-router yoco-prefill yoco-decode cuda_cluster_test

P=.gpupack
rm -rf "$P"
mkdir -p "$P/build/router" "$P/build/prefill_service" "$P/build/decode_service" "$P/lib"
cp "$B/router/yoco-router" "$P/build/router/"
cp "$B/prefill_service/yoco-prefill" "$P/build/prefill_service/"
cp "$B/decode_service/yoco-decode" "$P/build/decode_service/"
cp "$B/tests/cuda_cluster_test" "$P/build/"
grep -q '^/.gpupack/$' .git/info/exclude 2>/dev/null || echo /.gpupack/ >>.git/info/exclude

# Shared libraries, resolved here; the device's own: glibc, libstdc++/libgcc, the CUDA driver and
# toolkit libraries.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libnvidia)'
for bin in "$P"/build/*/yoco-* "$P/build/cuda_cluster_test"; do
  ldd "$bin" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] || cp -n "$path" "$P/lib/"
  done
done
# UCX loads its transports as modules from <libdir>/ucx: cma (tcp, posix and sysv are built in);
# the RDMA ones would pull in rdma-core for nothing on one machine.
ucx_dir=$(dirname "$(ldd "$P/build/decode_service/yoco-decode" | awk '/libucp/ {print $3}')")/ucx
if [[ -d $ucx_dir ]]; then
  mkdir -p "$P/lib/ucx"
  cp "$ucx_dir"/libuct_cma.so.0 "$P/lib/ucx/"
  for m in "$P"/lib/ucx/*.so.0; do
    ldd "$m" | awk '/=> \// {print $1, $3}' | while read -r name path; do
      [[ $name =~ $skip ]] || cp -n "$path" "$P/lib/"
    done
  done
fi
du -sh "$P" "$P/lib" "$P/build"
