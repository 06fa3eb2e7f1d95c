#!/usr/bin/env bash
# Builds xgrammar's C++ library (structured outputs; not in Debian) from its PyPI source
# distribution, pinned by version and sha256, into $YOCO_DEPS_DIR/xgrammar-VERSION (default
# ~/.cache/yoco), with its LICENSE and NOTICE; structured/CMakeLists.txt finds it there
# (YOCO_XGRAMMAR_DIR). A stamp makes a re-run a no-op. Run by scripts/setup.sh and by the build
# stage of both images (deploy/docker/). Needs curl, cmake, ninja and a C++ compiler; the only
# network access is the download from files.pythonhosted.org.
set -euo pipefail
# xgrammar (structured outputs, docs/design.md §3.2c): its C++ core only (no Python bindings), a
# static library built once per version into a cache shared by every build directory and worktree.
# -fno-lto: the archive holds plain objects (GCC's LTO bytecode would not link under clang's fuzz
# build); ccache makes a rebuild after the cache was wiped mostly hits.
xgr_version=0.2.8
xgr_sha256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
xgr_url=https://files.pythonhosted.org/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/xgrammar-$xgr_version.tar.gz
deps="${YOCO_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/yoco}"
mkdir -p "$deps"
xgr_prefix="$deps/xgrammar-$xgr_version"
if [[ ! -f "$xgr_prefix/.installed-$xgr_sha256" ]]; then
  echo "build_xgrammar.sh: building xgrammar $xgr_version's C++ library into $xgr_prefix"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # YOCO_CA_BUNDLE: a CA file to trust instead of the system's (behind a TLS-intercepting proxy).
  curl -fsSL --retry 3 ${YOCO_CA_BUNDLE:+--cacert "$YOCO_CA_BUNDLE"} -o "$work/xgrammar.tar.gz" "$xgr_url"
  echo "$xgr_sha256  $work/xgrammar.tar.gz" | sha256sum -c --quiet -
  tar -xzf "$work/xgrammar.tar.gz" -C "$work"
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Its cmake/config.cmake turns the Python bindings on; a config.cmake in the build directory is
  # read instead of it.
  mkdir -p "$work/build"
  printf 'set(%s OFF)\n' XGRAMMAR_BUILD_PYTHON_BINDINGS XGRAMMAR_BUILD_CXX_TESTS XGRAMMAR_ENABLE_CPPTRACE \
    XGRAMMAR_ENABLE_COVERAGE XGRAMMAR_ENABLE_INTERNAL_CHECK >"$work/build/config.cmake"
  cmake -S "$work/xgrammar-$xgr_version" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" -DCMAKE_INSTALL_PREFIX="$xgr_prefix" "${launcher[@]}" >/dev/null
  cmake --build "$work/build" -j "$(nproc)"
  rm -rf "$xgr_prefix"
  cmake --install "$work/build" >/dev/null
  cp "$work/xgrammar-$xgr_version/LICENSE" "$work/xgrammar-$xgr_version/NOTICE" "$xgr_prefix/"
  touch "$xgr_prefix/.installed-$xgr_sha256"
fi
