# syntax=docker/dockerfile:1
# The CUDA image: the same four binaries built with the CUDA backend, on NVIDIA's CUDA runtime
# base. No model inside: GPU-sized weights come from a volume (deploy/k8s/overlays/gpu).
#   docker build -f deploy/docker/cuda.Dockerfile -t yoco:cuda .
# NVIDIA publishes CUDA images on Ubuntu, not Debian; Ubuntu 24.04 ships the same gRPC (1.51) and
# protobuf (3.21) as Debian 12, under t64 package names.
ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake ninja-build g++ pkg-config \
      libopenblas-openmp-dev libdnnl-dev libboost-dev libpcre2-dev libutf8proc-dev libucx-dev libhiredis-dev nlohmann-json3-dev libcli11-dev \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc curl ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# xgrammar's C++ library (structured outputs; not in Debian or Ubuntu), from its pinned PyPI source
# distribution, in a layer of its own that only a new version rebuilds. Linked statically.
# Behind a TLS-intercepting proxy, give its CA: --build-arg YOCO_CA_BUNDLE=PATH with the file mounted
# there (podman build -v HOST_FILE:PATH:ro; tests/image/image_test.py does so).
COPY scripts/build_xgrammar.sh scripts/
ARG YOCO_CA_BUNDLE=
RUN YOCO_DEPS_DIR=/opt/deps scripts/build_xgrammar.sh
# The whole tree minus build outputs, tests, benchmarks and models (cuda.Dockerfile.dockerignore).
COPY . .
# sm_80 (A100) and sm_90a (H100/H200), as kernels/cuda/CMakeLists.txt defaults to.
ARG CUDA_ARCHITECTURES="80;90a"
ARG YOCO_CXX_FLAGS="-march=x86-64-v2"
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DYOCO_NATIVE=OFF -DYOCO_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
      -DYOCO_BUILD_TESTS=OFF -DYOCO_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="${YOCO_CXX_FLAGS}" \
      -DYOCO_XGRAMMAR_DIR=/opt/deps/xgrammar-0.2.8 \
 && cmake --build build --target yoco-router yoco-prefill yoco-decode yoco-cli

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}
ARG CUDA_VERSION
ARG UBUNTU
ARG YOCO_VERSION=0.1.0
LABEL org.opencontainers.image.title="yoco-cuda" \
      org.opencontainers.image.description="YOCO serving cluster (router, prefill and decode workers, CLI) with the CUDA backend" \
      org.opencontainers.image.version="${YOCO_VERSION}" \
      org.opencontainers.image.base.name="docker.io/nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}"
# Runtime libraries only: the CPU image's list under Ubuntu 24.04's names (oneDNN through its -dev
# package, which pulls the runtime library whatever its soname). The CUDA runtime comes with the
# base image; the driver is mounted by the NVIDIA container toolkit.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51t64 libprotobuf32t64 libucx0 ucx-utils libopenblas0-openmp libdnnl-dev libpcre2-8-0 libutf8proc3 libgomp1 \
      libhiredis1.1.0 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 yoco \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin yoco
COPY --from=build /src/build/router/yoco-router /src/build/prefill_service/yoco-prefill \
                  /src/build/decode_service/yoco-decode /src/build/tools/yoco-cli /usr/local/bin/
COPY --from=build /opt/deps/xgrammar-0.2.8/LICENSE /opt/deps/xgrammar-0.2.8/NOTICE /usr/share/doc/xgrammar/
USER 10001:10001
ENV OMP_WAIT_POLICY=passive \
    YOCO_METRICS_PORT=9090 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
EXPOSE 7000 9090 7100
# For plain `docker run`; Kubernetes probes grpc.health.v1 instead (deploy/k8s).
HEALTHCHECK --interval=15s --timeout=3s --start-period=300s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${YOCO_METRICS_PORT} && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && head -c 12 <&3 | grep -q ' 200'"]
CMD ["yoco-cli", "--help"]
