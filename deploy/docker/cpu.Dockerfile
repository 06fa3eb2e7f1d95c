# syntax=docker/dockerfile:1
# The CPU image: yoco-router, yoco-prefill, yoco-decode and yoco-cli on Debian 12 slim, with the
# bundled model (models/kjv-yoco at /opt/yoco/models/kjv-yoco). Build from the repository root:
#   docker build -f deploy/docker/cpu.Dockerfile -t yoco:cpu .
# One image serves all three roles; the Kubernetes manifests pick the binary with `command`.

FROM debian:12 AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
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
# The whole tree minus build outputs, tests and benchmarks (cpu.Dockerfile.dockerignore).
COPY . .
# Portable code for any x86-64 node from the last decade; the default build's -march=native would
# tie the image to the build machine's CPU. Only the four binaries and what they link are built.
ARG YOCO_CXX_FLAGS="-march=x86-64-v2"
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DYOCO_NATIVE=OFF -DYOCO_CUDA=OFF \
      -DYOCO_BUILD_TESTS=OFF -DYOCO_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="${YOCO_CXX_FLAGS}" \
      -DYOCO_XGRAMMAR_DIR=/opt/deps/xgrammar-0.2.8 \
 && cmake --build build -j"$(nproc)" --target yoco-router yoco-prefill yoco-decode yoco-cli

FROM debian:12-slim
ARG YOCO_VERSION=0.1.0
LABEL org.opencontainers.image.title="yoco-cpu" \
      org.opencontainers.image.description="YOCO serving cluster (router, prefill and decode workers, CLI) for CPUs, with the bundled kjv-yoco model" \
      org.opencontainers.image.version="${YOCO_VERSION}" \
      org.opencontainers.image.base.name="docker.io/library/debian:12-slim" \
      io.yoco.model="/opt/yoco/models/kjv-yoco"
# Runtime libraries only (the binaries' `ldd`, mapped to Debian packages; their dependencies follow):
# gRPC + protobuf for the APIs, UCX for KV transfer (ucx-utils: `ucx_info -d` to see transports),
# OpenBLAS (OpenMP build; the binaries' RUNPATH names its directory), PCRE2 for the tokenizer,
# hiredis for the KV store's redis backend; python3 for the SLA planner (tools/planner, standard
# library only: deploy/k8s/components/planner runs it from this image).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libucx0 ucx-utils libopenblas0-openmp libdnnl2 libpcre2-8-0 libutf8proc2 libgomp1 \
      libhiredis0.14 python3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 yoco \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin yoco
COPY --from=build /src/build/router/yoco-router /src/build/prefill_service/yoco-prefill \
                  /src/build/decode_service/yoco-decode /src/build/tools/yoco-cli /usr/local/bin/
COPY --from=build /opt/deps/xgrammar-0.2.8/LICENSE /opt/deps/xgrammar-0.2.8/NOTICE /usr/share/doc/xgrammar/
COPY models/kjv-yoco /opt/yoco/models/kjv-yoco
COPY tools/planner /opt/yoco/planner
# A numeric user, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
ENV OMP_WAIT_POLICY=passive \
    UCX_TLS=tcp \
    YOCO_METRICS_PORT=9090
# gRPC (--listen), Prometheus /metrics (--metrics-listen), decode's UCX listener (--ucx-listen).
EXPOSE 7000 9090 7100
# For plain `docker run`: the /metrics endpoint answers 200 while the process serves. Kubernetes
# ignores this and probes grpc.health.v1 instead (deploy/k8s). bash's /dev/tcp: no curl needed.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${YOCO_METRICS_PORT} && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && head -c 12 <&3 | grep -q ' 200'"]
CMD ["yoco-cli", "--help"]
