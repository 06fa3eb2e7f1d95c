#!/usr/bin/env bash
# Runs a Python-side test (chat_template_jinja2, deploy_test, image_test, openai_sdk_test) once the
# tests' virtualenv exists, or fails saying how to make it: a missing venv is a failed test with
# the command to run, never a "Not Run" entry. The venv is CMake's YOCO_VENV (default: the build
# directory's .venv; tests/CMakeLists.txt).
# Usage: with_venv.sh VENV COMMAND [ARGS...]
set -euo pipefail
venv=$1
shift
if [[ ! -x "$venv/bin/python3" ]]; then
  src=$(cd "$(dirname "$0")/../.." && pwd)
  {
    echo "with_venv.sh: the tests' Python virtualenv $venv is missing (CMake's YOCO_VENV)."
    echo "Create it (tokenizers, tiktoken, jinja2, kubernetes-validate, openai) with:"
    echo "  $src/scripts/setup.sh --venv $venv"
    echo "or configure this build with one that exists: cmake -B BUILD_DIR -DYOCO_VENV=/path/to/.venv"
  } >&2
  exit 1
fi
exec "$@"
