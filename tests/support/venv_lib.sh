# Shared steps of the tests/support/*_venv.sh scripts, which each make (once) a Python virtual
# environment holding pinned packages. Sourced, not run: the sourcing script sets `repo` (the
# repository's root) first, then calls `use_venv`. Every message goes to stderr and starts with
# the sourcing script's name.

script_name=$(basename "$0")

# Sets `venv`, the environment's directory, to the value of the variable named $1 (which a user
# sets to point at another environment), or by default to <repo>/target/$2; keeps the
# variable's name in `env_var` for the messages.
use_venv() {
  env_var=$1
  venv=${!env_var:-$repo/target/$2}
}

# Runs tests/support/$1, the script that makes the environment this one adds packages to.
build_on() {
  "$repo/tests/support/$1" >/dev/null ||
    fail "tests/support/$1 could not make the virtual environment $venv (see the message" \
      "above)."
}

fail() {
  printf '%s: %s\n' "$script_name" "$*" >&2
  exit 1
}

# Takes the lock next to the environment for the rest of the script, so several test processes
# can run the same script at once and take turns.
lock_venv() {
  mkdir -p "$(dirname "$venv")" || fail "cannot create the parent directory of $venv"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$venv.lock" || fail "cannot open the lock file $venv.lock"
    flock 9 || fail "cannot lock $venv.lock"
  else
    echo "$script_name: flock not found; not guarding against concurrent runs" >&2
  fi
}

# Creates the environment with pip if it does not exist yet.
create_venv() {
  if [[ ! -x $venv/bin/python ]]; then
    command -v python3 >/dev/null 2>&1 ||
      fail "python3 not found. Install Python 3.9 or newer with its venv module" \
        "(Debian/Ubuntu: apt-get install python3 python3-venv), or set $env_var to a" \
        "virtual environment that already has the packages installed."
    echo "$script_name: creating a virtual environment in $venv" >&2
    python3 -m venv "$venv" >&2 ||
      fail "'python3 -m venv $venv' failed. Install the venv module" \
        "(Debian/Ubuntu: apt-get install python3-venv), delete $venv, and run again."
  fi
  "$venv/bin/python" -m pip --version >/dev/null 2>&1 ||
    fail "the virtual environment $venv has no pip. Install python3's venv module with" \
      "ensurepip (Debian/Ubuntu: apt-get install python3-venv), delete $venv, and run again."
}

# Whether the environment's python sees distribution $1 at exactly version $2.
has_package() {
  "$venv/bin/python" - "$1" "$2" 2>/dev/null <<'EOF_PY'
import importlib.metadata, sys
try:
    sys.exit(0 if importlib.metadata.version(sys.argv[1]) == sys.argv[2] else 1)
except importlib.metadata.PackageNotFoundError:
    sys.exit(1)
EOF_PY
}

# Runs pip install with the given arguments; $1 says what is installed, for the messages.
pip_install() {
  local what=$1
  shift
  echo "$script_name: installing $what into $venv" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check --no-input "$@" >&2 ||
    fail "pip could not install $what into $venv. It needs access to PyPI" \
      "(or a configured index/proxy, see PIP_INDEX_URL). Fix that and run again, or point" \
      "$env_var at a virtual environment that already has it."
}

# Makes sure the environment exists and holds distribution $1 at version $2.
require_package() {
  create_venv
  if ! has_package "$1" "$2"; then
    pip_install "$1==$2" "$1==$2"
    has_package "$1" "$2" || fail "$1==$2 was installed into $venv but is not found there."
  fi
}

# Whether `import discovm` in the environment finds this repository's python/discovm.
discovm_package_ready() {
  "$venv/bin/python" - "$repo/python/discovm" 2>/dev/null <<'EOF_PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("discovm")
found = spec is not None and list(spec.submodule_search_locations or [])
sys.exit(0 if found and os.path.samefile(found[0], sys.argv[1]) else 1)
EOF_PY
}

# Makes sure the environment imports the discovm package from this repository's python/
# (installed in editable mode, without its dependencies, which the caller installs pinned).
require_discovm_package() {
  if ! discovm_package_ready; then
    pip_install "the discovm package from $repo/python" --no-deps -e "$repo/python"
    discovm_package_ready || fail "the discovm package was installed into $venv, but its" \
      "python does not import it from $repo/python/discovm."
  fi
}
