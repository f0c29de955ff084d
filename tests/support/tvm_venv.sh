#!/usr/bin/env bash
# Makes (once) a Python virtual environment that holds Apache TVM (apache-tvm, the compiler and
# runtime with its Relax VM and Disco), the tvm-ffi runtime it is built on, numpy, pytest and
# the discovm package (installed from python/ in editable mode), for the tests that run modules
# TVM compiles on discovm's workers, and prints the environment's python as the last line on
# stdout.
#
#   tests/support/tvm_venv.sh            # -> .../target/tvm-venv/bin/python
#
# The environment lives in $DVM_TVM_VENV, by default <repo>/target/tvm-venv (its own: apache-tvm
# is about 100 MB, which the other Python tests do without). apache-tvm 0.27.0.post1 asks for
# apache-tvm-ffi >= 0.1.14.post0, so the environment holds the same apache-tvm-ffi as the other
# tests' (0.1.15.post2), installed first so that pip keeps it. The first run needs python3 with
# its venv module and access to PyPI (or a mirror through PIP_INDEX_URL); later runs only check.
# Safe to run from several processes at once. All progress output goes to stderr.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv_lib.sh
. "$repo/tests/support/venv_lib.sh"
use_venv DVM_TVM_VENV tvm-venv

lock_venv
require_package apache-tvm-ffi 0.1.15.post2
require_package numpy 2.2.6
require_package pytest 8.3.5
require_package apache-tvm 0.27.0.post1
has_package apache-tvm-ffi 0.1.15.post2 ||
  fail "installing apache-tvm into $venv replaced apache-tvm-ffi 0.1.15.post2; delete $venv" \
    "and run again."
require_discovm_package
printf '%s\n' "$venv/bin/python"
