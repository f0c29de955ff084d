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

package=apache-tvm-ffi
version=0.1.15.post2

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${DVM_TVM_FFI_VENV:-$repo/target/tvm-ffi-venv}

fail() {
  printf 'tvm_ffi_venv.sh: %s\n' "$*" >&2
  exit 1
}

# Prints the include directory if $venv already has the pinned package; fails otherwise.
include_dir_if_ready() {
  [[ -x $venv/bin/python ]] || return 1
  "$venv/bin/python" - "$package" "$version" 2>/dev/null <<'EOF'
import importlib.metadata, importlib.util, os, sys
package, version = sys.argv[1], sys.argv[2]
if importlib.metadata.version(package) != version:
    sys.exit(1)
spec = importlib.util.find_spec("tvm_ffi")
include = os.path.join(list(spec.submodule_search_locations)[0], "include")
for header in ("tvm/ffi/c_api.h", "dlpack/dlpack.h"):
    if not os.path.isfile(os.path.join(include, header)):
        sys.exit(1)
print(include)
EOF
}

mkdir -p "$(dirname "$venv")" || fail "cannot create the parent directory of $venv"

if command -v flock >/dev/null 2>&1; then
  exec 9>"$venv.lock" || fail "cannot open the lock file $venv.lock"
  flock 9 || fail "cannot lock $venv.lock"
else
  echo "tvm_ffi_venv.sh: flock not found; not guarding against concurrent runs" >&2
fi

if include=$(include_dir_if_ready); then
  printf '%s\n' "$include"
  exit 0
fi

command -v python3 >/dev/null 2>&1 ||
  fail "python3 not found. Install Python 3.9 or newer with its venv module" \
    "(Debian/Ubuntu: apt-get install python3 python3-venv), or set DVM_TVM_FFI_VENV to a" \
    "virtual environment that already has $package==$version installed."

if [[ ! -x $venv/bin/python ]]; then
  echo "tvm_ffi_venv.sh: creating a virtual environment in $venv" >&2
  python3 -m venv "$venv" >&2 ||
    fail "'python3 -m venv $venv' failed. Install the venv module" \
      "(Debian/Ubuntu: apt-get install python3-venv), delete $venv, and run again."
fi

"$venv/bin/python" -m pip --version >/dev/null 2>&1 ||
  fail "the virtual environment $venv has no pip. Install python3's venv module with" \
    "ensurepip (Debian/Ubuntu: apt-get install python3-venv), delete $venv, and run again."

echo "tvm_ffi_venv.sh: installing $package==$version into $venv" >&2
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input "$package==$version" >&2 ||
  fail "pip could not install $package==$version into $venv. It needs access to PyPI" \
    "(or a configured index/proxy, see PIP_INDEX_URL). Fix that and run again, or point" \
    "DVM_TVM_FFI_VENV at a virtual environment that already has the package."

include=$(include_dir_if_ready) ||
  fail "$package==$version was installed into $venv, but its include directory" \
    "(with tvm/ffi/c_api.h and dlpack/dlpack.h) was not found there."
printf '%s\n' "$include"
