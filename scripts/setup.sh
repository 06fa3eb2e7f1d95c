#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need. Idempotent and
# non-interactive: packages already present are not touched, apt runs only when one is missing.
#   scripts/setup.sh            build + test dependencies
#   scripts/setup.sh --bench    also what the benchmarks compare against (python3-torch)
#   scripts/setup.sh --train    also what tools/train/ needs (python3-torch, bible-kjv; then
#                               pip install tokenizers into a venv, see tools/train/README.md)
#   scripts/setup.sh --venv DIR the tests' virtualenv in DIR instead of build/.venv (for a build
#                               directory configured elsewhere: DIR is BUILD_DIR/.venv, CMake's YOCO_VENV)
# It also builds xgrammar's C++ library (structured outputs, not in Debian) from its PyPI source
# distribution, pinned by version and sha256, into $YOCO_DEPS_DIR (default ~/.cache/yoco), where
# CMake's YOCO_XGRAMMAR_DIR looks; skipped when that version is already installed there.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
extra=""
venv="$root/build/.venv"   # scripts/build.sh's build directory; CMake's YOCO_VENV defaults to BUILD_DIR/.venv
while (($#)); do
  case "$1" in
    --bench | --train) extra=$1 ;;
    --venv)
      [[ -n "${2:-}" ]] || { echo "setup.sh: --venv DIR: the directory is missing" >&2; exit 2; }
      venv=$(realpath -m "$2")
      shift
      ;;
    *) echo "setup.sh: unknown argument '$1' (--bench, --train, --venv DIR)" >&2; exit 2 ;;
  esac
  shift
done

packages=(
  cmake ninja-build g++ pkg-config ccache
  libopenblas-openmp-dev      # CPU BLAS; the OpenMP build nests cleanly in our OpenMP regions
  libdnnl-dev                 # oneDNN: the large CPU matrix products and the bf16 path (AVX-512/AMX at run time)
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev libomp-dev   # libFuzzer targets (clang + its OpenMP runtime)
  clang-format                # scripts/check_format.sh (the format_check test)
  python3 python3-numpy       # the float64 reference (tests/reference/)
  python3-torch               # tools/train: training model + checkpoint converter tests
  libboost-dev prometheus     # /metrics endpoint (Beast); promtool and a real scrape in tests
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc   # the services' APIs
  libpcre2-dev                # the tokenizer's pre-tokenization regexes
  libutf8proc-dev             # the tokenizer's NFC normalizer (Qwen2-style tokenizer.json)
  nlohmann-json3-dev          # JSON parsing (common/json.cc, the chat templates' key order)
  libcli11-dev                # command-line flags (common/flags.cc: declared once, --help, --config)
  python3-venv                # build/.venv (or --venv DIR): the Python-side tests' packages
  libucx-dev ucx-utils        # transfer/: the KV transfer engine over UCX; ucx_perftest for bench/
  libhiredis-dev redis-server # kv_store/: the redis backend; its tests start a redis-server
  redis-tools                 # redis-cli: the tests' Redis Cluster (--cluster create / reshard), key checks
  libssl-dev openssl          # the redis backend's TLS (rediss://); tests make throwaway certificates
  curl                        # tests/openai: SSE framing as `curl -N` sees it; scripts/run.sh
  python3-grpcio              # tests/openai/hostile_http_test.py: raw protobuf on the gRPC API
  podman debootstrap          # tests/image (label image): the CPU image built and run, base images from a mirror
  python3-matplotlib          # bench/paper/plot.py (the figures; the paper_quick test renders them)
)
if [[ "$extra" == "--bench" ]]; then
  packages+=(python3-torch)
fi
if [[ "$extra" == "--train" ]]; then
  packages+=(python3-torch bible-kjv python3-venv)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} > 0)); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The tokenizer test compares with the real `tokenizers` and `tiktoken` (PyPI), the chat-template
# test with `jinja2` (what transformers renders chat templates with), the deploy test validates the
# Kubernetes manifests with `kubernetes-validate` (the API's JSON schemas, bundled), and the HTTP
# API test drives the router with the official `openai` SDK: a virtualenv in build/.venv, or the
# --venv DIR given (with --system-site-packages). Quick when it is already there.
if ! "$venv/bin/python3" -c "import tokenizers, tiktoken, kubernetes_validate, jinja2, openai; assert jinja2.__version__ == '3.1.6'" 2>/dev/null; then
  echo "setup.sh: creating $venv with tokenizers, tiktoken, jinja2, kubernetes-validate and openai"
  python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "tokenizers==0.23.3" "tiktoken==0.14.0" \
    "kubernetes-validate==1.37.0" "jinja2==3.1.6" "openai==3.51.0"
fi

# xgrammar (structured outputs, docs/design.md §3.2c): its C++ core, built once per version into a
# cache shared by every build directory and worktree (scripts/build_xgrammar.sh; the images run it too).
"$root/scripts/build_xgrammar.sh"
