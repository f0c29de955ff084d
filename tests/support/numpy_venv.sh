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

numpy_version=2.2.6

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${DVM_TVM_FFI_VENV:-$repo/target/tvm-ffi-venv}

fail() {
  printf 'numpy_venv.sh: %s\n' "$*" >&2
  exit 1
}

"$repo/tests/support/tvm_ffi_venv.sh" >/dev/null ||
  fail "could not make the virtual environment $venv (see the message above)."

python=$venv/bin/python

numpy_ready() {
  "$python" - "$numpy_version" 2>/dev/null <<'EOF_PY'
import importlib.metadata, sys
sys.exit(0 if importlib.metadata.version("numpy") == sys.argv[1] else 1)
EOF_PY
}

if command -v flock >/dev/null 2>&1; then
  exec 9>"$venv.lock" || fail "cannot open the lock file $venv.lock"
  flock 9 || fail "cannot lock $venv.lock"
fi

if ! numpy_ready; then
  echo "numpy_venv.sh: installing numpy==$numpy_version into $venv" >&2
  "$python" -m pip install --disable-pip-version-check --no-input "numpy==$numpy_version" >&2 ||
    fail "pip could not install numpy==$numpy_version into $venv. It needs access to PyPI" \
      "(or a configured index/proxy, see PIP_INDEX_URL). Fix that and run again, or point" \
      "DVM_TVM_FFI_VENV at a virtual environment that already has it (and apache-tvm-ffi)."
  numpy_ready || fail "numpy==$numpy_version was installed into $venv but does not import."
fi
printf '%s\n' "$python"
