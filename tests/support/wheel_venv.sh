#!/usr/bin/env bash
# Installs the discovm package into a fresh Python virtual environment the way a user does,
# `pip install ./python` (whose wheel carries the library built from this repository, with its
# headers, pkg-config file and CMake package), for the test of the installed package, and
# prints the environment's python as the last line on stdout.
#
#   tests/support/wheel_venv.sh            # -> .../target/python-wheel/venv/bin/python
#
# Every run deletes the environment and makes it anew. What pip installs besides discovm
# (setuptools to build it; apache-tvm-ffi, numpy and what they need) comes pinned from a
# wheelhouse next to it, which the first run downloads: that run needs access to PyPI (or a
# mirror through PIP_INDEX_URL), later ones no network. The library is built in
# target/python-wheel/cargo (CARGO_TARGET_DIR), kept between runs, so later runs rebuild only
# what changed. Needs python3 with its venv module, cargo and make. Safe to run from several
# processes at once (they take turns). All progress output goes to stderr.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv_lib.sh
. "$repo/tests/support/venv_lib.sh"

dir=$repo/target/python-wheel
venv=$dir/venv
wheelhouse=$dir/wheelhouse
pins=(setuptools==80.9.0 apache-tvm-ffi==0.1.15.post2 numpy==2.2.6)

lock_venv

command -v python3 >/dev/null 2>&1 ||
  fail "python3 not found. Install Python 3.9 or newer with its venv module" \
    "(Debian/Ubuntu: apt-get install python3 python3-venv)."
echo "$script_name: creating a fresh virtual environment in $venv" >&2
rm -rf "$venv"
python3 -m venv "$venv" >&2 ||
  fail "'python3 -m venv $venv' failed. Install the venv module" \
    "(Debian/Ubuntu: apt-get install python3-venv) and run again."
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input)
"${pip[@]}" --version >/dev/null 2>&1 ||
  fail "the virtual environment $venv has no pip. Install python3's venv module with" \
    "ensurepip (Debian/Ubuntu: apt-get install python3-venv) and run again."

# The wheelhouse is complete once it records the pins it was downloaded for.
if [[ $(cat "$wheelhouse/pins" 2>/dev/null) != "${pins[*]}" ]]; then
  echo "$script_name: downloading ${pins[*]} and what they need into $wheelhouse" >&2
  rm -rf "$wheelhouse"
  "${pip[@]}" download --dest "$wheelhouse" "${pins[@]}" >&2 ||
    fail "pip could not download ${pins[*]} into $wheelhouse. It needs access to PyPI" \
      "(or a configured index/proxy, see PIP_INDEX_URL). Fix that and run again."
  printf '%s\n' "${pins[*]}" >"$wheelhouse/pins"
fi

# setuptools builds in a directory of its own, emptied first (not in python/build, which other
# builds share), so the wheel holds only what this build made.
build=$dir/setuptools-build
rm -rf "$build"
printf '[build]\nbuild_base = %s\n[egg_info]\negg_base = %s\n' "$build" "$build" \
  >"$dir/setuptools.cfg"
mkdir -p "$build"

echo "$script_name: pip install $repo/python (the library is built in $dir/cargo)" >&2
DIST_EXTRA_CONFIG=$dir/setuptools.cfg CARGO_TARGET_DIR=$dir/cargo \
  "${pip[@]}" install --no-index --find-links "$wheelhouse" "$repo/python" >&2 ||
  fail "'pip install $repo/python' failed (its output is above). Building the wheel needs" \
    "cargo and make."
printf '%s\n' "$venv/bin/python"
