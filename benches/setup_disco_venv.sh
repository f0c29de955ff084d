#!/usr/bin/env bash
# Creates (once) the Python virtual environment that holds the baseline for the session
# benchmark: Apache TVM's Disco (apache-tvm) and the tvm-ffi runtime it is built on.
#
# Usage: benches/setup_disco_venv.sh
#   DVM_BENCH_VENV   where the venv lives (default: <repo>/target/bench-venv)
#   DVM_BENCH_PYTHON the interpreter that creates it (default: python3)
#
# Prints four lines on stdout, for the link line of a C program that drives Disco and for the
# Python benchmark:
#   TVM_FFI_INCLUDE=<dir>   headers of tvm-ffi (tvm/ffi/c_api.h, dlpack/dlpack.h)
#   TVM_FFI_LIB=<dir>       libtvm_ffi.so
#   TVM_LIB=<dir>           libtvm_runtime.so and libtvm_runtime_extra.so (Disco lives here)
#   VENV_PYTHON=<file>      the venv's python
# Link with: -L$TVM_FFI_LIB -L$TVM_LIB -Wl,--no-as-needed -ltvm_ffi -ltvm_runtime
#            -ltvm_runtime_extra -Wl,--as-needed -Wl,-rpath,$TVM_FFI_LIB:$TVM_LIB
# (--no-as-needed keeps libtvm_runtime_extra.so, whose static initialisers register the
# runtime.disco.* globals, although the program calls none of its symbols directly.)
# Progress goes to stderr. Running it again only checks the installed versions.
set -euo pipefail

TVM_VERSION="0.27.0.post1"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DVM_BENCH_VENV:-$repo/target/bench-venv}"
python="${DVM_BENCH_PYTHON:-python3}"

log() { echo "setup_disco_venv: $*" >&2; }

installed_ok() {
    [ -x "$venv/bin/python" ] || return 1
    "$venv/bin/python" - "$TVM_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("apache-tvm") == sys.argv[1]
version("apache-tvm-ffi")
PY
}

if ! installed_ok; then
    if [ ! -x "$venv/bin/python" ]; then
        log "creating venv at $venv"
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv "$venv"
    fi
    log "installing apache-tvm==$TVM_VERSION and apache-tvm-ffi (this takes a minute)"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "apache-tvm==$TVM_VERSION" apache-tvm-ffi >&2
    installed_ok || { log "install finished but the versions do not match"; exit 1; }
else
    log "venv at $venv is ready"
fi

# Locate the packages without importing tvm (importing it loads every backend).
"$venv/bin/python" - <<'PY'
import os, sys
from importlib.util import find_spec

def pkg_dir(name):
    spec = find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"setup_disco_venv: package {name} not found in the venv")
    return list(spec.submodule_search_locations)[0]

ffi = pkg_dir("tvm_ffi")
tvm = pkg_dir("tvm")
paths = {
    "TVM_FFI_INCLUDE": os.path.join(ffi, "include"),
    "TVM_FFI_LIB": os.path.join(ffi, "lib"),
    "TVM_LIB": os.path.join(tvm, "lib"),
}
need = {
    "TVM_FFI_INCLUDE": "tvm/ffi/c_api.h",
    "TVM_FFI_LIB": "libtvm_ffi.so",
    "TVM_LIB": "libtvm_runtime_extra.so",
}
for key, path in paths.items():
    if not os.path.exists(os.path.join(path, need[key])):
        sys.exit(f"setup_disco_venv: {need[key]} missing under {path}")
    print(f"{key}={path}")
print(f"VENV_PYTHON={sys.executable}")
PY
