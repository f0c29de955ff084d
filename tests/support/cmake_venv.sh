#!/usr/bin/env bash
# Makes (once) a Python virtual environment that holds CMake, for the test that builds a CMake
# project against an installed discovm, and prints the path of its `cmake` as the last line on
# stdout.
#
#   tests/support/cmake_venv.sh            # -> .../target/cmake-venv/bin/cmake
#
# The environment lives in $DVM_CMAKE_VENV, by default <repo>/target/cmake-venv. The first run
# needs python3 with its venv module and access to PyPI (or a mirror through PIP_INDEX_URL);
# later runs only check. Safe to run from several processes at once (they take turns on a lock
# file next to the environment). All progress output goes to stderr.
set -euo pipefail

version=3.31.6

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv_lib.sh
. "$repo/tests/support/venv_lib.sh"
use_venv DVM_CMAKE_VENV cmake-venv

cmake=$venv/bin/cmake

lock_venv
require_package cmake "$version"
"$cmake" --version 2>/dev/null | head -n 1 | grep -qx "cmake version $version" ||
  fail "cmake==$version was installed into $venv, but $cmake does not run or reports" \
    "another version."
printf '%s\n' "$cmake"
