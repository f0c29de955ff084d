#!/usr/bin/env bash
# Makes (once) the Python virtual environment of tests/support/numpy_venv.sh (apache-tvm-ffi and
# numpy) hold pytest and the discovm package too (installed from python/ in editable mode), for
# the Python tests of the tvm-ffi module and the package, and prints the environment's python as
# the last line on stdout.
#
#   tests/support/pytest_venv.sh            # -> .../target/tvm-ffi-venv/bin/python
#
# The first run needs python3 with its venv module and access to PyPI (or a mirror through
# PIP_INDEX_URL); later runs only check. Safe to run from several processes at once. All
# progress output goes to stderr.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv_lib.sh
. "$repo/tests/support/venv_lib.sh"
use_venv DVM_TVM_FFI_VENV tvm-ffi-venv
build_on numpy_venv.sh

lock_venv
require_package pytest 8.3.5
require_discovm_package
printf '%s\n' "$venv/bin/python"
