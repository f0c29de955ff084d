#!/usr/bin/env bash
# Makes (once) the Python virtual environment of tests/support/tvm_ffi_venv.sh hold numpy too,
# for the DLPack tests, and prints the environment's python as the last line on stdout.
#
#   tests/support/numpy_venv.sh            # -> .../target/tvm-ffi-venv/bin/python
#
# The first run needs python3 with its venv module and access to PyPI (or a mirror through
# PIP_INDEX_URL); later runs only check. Safe to run from several processes at once. All
# progress output goes to stderr.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv_lib.sh
. "$repo/tests/support/venv_lib.sh"
use_venv DVM_TVM_FFI_VENV tvm-ffi-venv
build_on tvm_ffi_venv.sh

lock_venv
require_package numpy 2.2.6
printf '%s\n' "$venv/bin/python"
