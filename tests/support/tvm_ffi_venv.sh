#!/usr/bin/env bash
# Makes (once) a Python virtual environment that holds Apache TVM's FFI package, whose headers
# the ABI tests compare discovm's against, and prints the package's include directory (the one
# that contains tvm/ffi/c_api.h and dlpack/dlpack.h) as the last line on stdout.
#
#   tests/support/tvm_ffi_venv.sh            # -> .../site-packages/tvm_ffi/include
#
# The environment lives in $DVM_TVM_FFI_VENV, by default <repo>/target/tvm-ffi-venv. The first
# run needs python3 with its venv module and access to PyPI; later runs only check. Safe to run
# from several processes at once (they take turns on a lock file next to the environment).
# All progress output goes to stderr.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv_lib.sh
. "$repo/tests/support/venv_lib.sh"
use_venv DVM_TVM_FFI_VENV tvm-ffi-venv

# Prints the package's include directory if it has both headers; fails otherwise.
include_dir() {
  "$venv/bin/python" - 2>/dev/null <<'EOF_PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("tvm_ffi")
include = os.path.join(list(spec.submodule_search_locations)[0], "include")
for header in ("tvm/ffi/c_api.h", "dlpack/dlpack.h"):
    if not os.path.isfile(os.path.join(include, header)):
        sys.exit(1)
print(include)
EOF_PY
}

lock_venv
require_package apache-tvm-ffi 0.1.15.post2
include_dir ||
  fail "apache-tvm-ffi is installed in $venv, but its include directory (with" \
    "tvm/ffi/c_api.h and dlpack/dlpack.h) was not found there."
