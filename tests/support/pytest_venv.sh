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

# The package is ready when `import discovm` finds this repository's python/discovm.
package_ready() {
  "$venv/bin/python" - "$repo/python/discovm" 2>/dev/null <<'EOF_PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("discovm")
found = spec is not None and list(spec.submodule_search_locations or [])
sys.exit(0 if found and os.path.samefile(found[0], sys.argv[1]) else 1)
EOF_PY
}

lock_venv
require_package pytest 8.3.5
if ! package_ready; then
  pip_install "the discovm package from $repo/python" --no-deps -e "$repo/python"
  package_ready || fail "the discovm package was installed into $venv, but its python does" \
    "not import it from $repo/python/discovm."
fi
printf '%s\n' "$venv/bin/python"
