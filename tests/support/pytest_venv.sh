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

pytest_version=8.3.5

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${DVM_TVM_FFI_VENV:-$repo/target/tvm-ffi-venv}

fail() {
  printf 'pytest_venv.sh: %s\n' "$*" >&2
  exit 1
}

python=$("$repo/tests/support/numpy_venv.sh" | tail -n 1) ||
  fail "could not make the virtual environment $venv with numpy (see the message above)."

pytest_ready() {
  "$python" - "$pytest_version" 2>/dev/null <<'EOF_PY'
import importlib.metadata, sys
sys.exit(0 if importlib.metadata.version("pytest") == sys.argv[1] else 1)
EOF_PY
}

# The package is ready when `import discovm` finds this repository's python/discovm.
package_ready() {
  "$python" - "$repo/python/discovm" 2>/dev/null <<'EOF_PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("discovm")
found = spec is not None and list(spec.submodule_search_locations or [])
sys.exit(0 if found and os.path.samefile(found[0], sys.argv[1]) else 1)
EOF_PY
}

if command -v flock >/dev/null 2>&1; then
  exec 9>"$venv.lock" || fail "cannot open the lock file $venv.lock"
  flock 9 || fail "cannot lock $venv.lock"
fi

if ! pytest_ready; then
  echo "pytest_venv.sh: installing pytest==$pytest_version into $venv" >&2
  "$python" -m pip install --disable-pip-version-check --no-input "pytest==$pytest_version" >&2 ||
    fail "pip could not install pytest==$pytest_version into $venv. It needs access to PyPI" \
      "(or a configured index/proxy, see PIP_INDEX_URL). Fix that and run again, or point" \
      "DVM_TVM_FFI_VENV at a virtual environment that already has it (and numpy, apache-tvm-ffi)."
  pytest_ready || fail "pytest==$pytest_version was installed into $venv but does not import."
fi

if ! package_ready; then
  echo "pytest_venv.sh: installing the discovm package from $repo/python into $venv" >&2
  "$python" -m pip install --disable-pip-version-check --no-input --no-deps -e "$repo/python" >&2 ||
    fail "pip could not install $repo/python into $venv (building it needs setuptools from" \
      "PyPI, or a configured index/proxy, see PIP_INDEX_URL). Fix that and run again."
  package_ready || fail "the discovm package was installed into $venv, but its python does" \
    "not import it from $repo/python/discovm."
fi
printf '%s\n' "$python"
