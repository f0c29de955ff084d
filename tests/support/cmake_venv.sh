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

package=cmake
version=3.31.6

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${DVM_CMAKE_VENV:-$repo/target/cmake-venv}
cmake=$venv/bin/cmake

fail() {
  printf 'cmake_venv.sh: %s\n' "$*" >&2
  exit 1
}

# Whether $cmake is there and reports the pinned version.
cmake_ready() {
  [[ -x $cmake ]] && "$cmake" --version 2>/dev/null | head -n 1 | grep -qx "cmake version $version"
}

mkdir -p "$(dirname "$venv")" || fail "cannot create the parent directory of $venv"

if command -v flock >/dev/null 2>&1; then
  exec 9>"$venv.lock" || fail "cannot open the lock file $venv.lock"
  flock 9 || fail "cannot lock $venv.lock"
else
  echo "cmake_venv.sh: flock not found; not guarding against concurrent runs" >&2
fi

if cmake_ready; then
  printf '%s\n' "$cmake"
  exit 0
fi

command -v python3 >/dev/null 2>&1 ||
  fail "python3 not found. Install Python 3.9 or newer with its venv module" \
    "(Debian/Ubuntu: apt-get install python3 python3-venv), or set DVM_CMAKE_VENV to a" \
    "virtual environment that already has $package==$version installed."

if [[ ! -x $venv/bin/python ]]; then
  echo "cmake_venv.sh: creating a virtual environment in $venv" >&2
  python3 -m venv "$venv" >&2 ||
    fail "'python3 -m venv $venv' failed. Install the venv module" \
      "(Debian/Ubuntu: apt-get install python3-venv), delete $venv, and run again."
fi

"$venv/bin/python" -m pip --version >/dev/null 2>&1 ||
  fail "the virtual environment $venv has no pip. Install python3's venv module with" \
    "ensurepip (Debian/Ubuntu: apt-get install python3-venv), delete $venv, and run again."

echo "cmake_venv.sh: installing $package==$version into $venv" >&2
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input "$package==$version" >&2 ||
  fail "pip could not install $package==$version into $venv. It needs access to PyPI" \
    "(or a configured index/proxy, see PIP_INDEX_URL). Fix that and run again, or point" \
    "DVM_CMAKE_VENV at a virtual environment that already has the package."

cmake_ready ||
  fail "$package==$version was installed into $venv, but $cmake does not run or reports" \
    "another version."
printf '%s\n' "$cmake"
