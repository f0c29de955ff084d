#!/usr/bin/env bash
# Session benchmark: TVM's Disco against discovm, threaded sessions and sessions of worker
# processes, with floors measured in the same run.
#
# Usage: benches/run.sh [session_bench options, e.g. --quick, --rounds 5, --workers 1,4]
#   DVM_BENCH_VENV       venv holding the Disco baseline (default: <repo>/target/bench-venv)
#   DVM_BENCH_BUILD_LIB  set to 1 to run `cargo build --release` first
#   CC                   C compiler (default: gcc)
#
# 1. sets up the venv with apache-tvm and apache-tvm-ffi (benches/setup_disco_venv.sh);
# 2. compiles benches/session_bench/*.c into target/bench/session_bench, with the discovm
#    columns when include/discovm.h, target/release/libdiscovm.so and
#    benches/session_bench/discovm.c all exist (otherwise Disco and the floors only), and
#    programs/discovm-worker.c into target/release/discovm-worker, next to the library that
#    finds it there (the worker program of the "discovm process" column);
# 3. runs it: the table goes to stdout, progress to stderr, and the numbers (ns) to
#    target/bench/session_bench.csv;
# 4. runs benches/python_session_bench.py in the venv: the same sessions through Disco's Python
#    API and discovm's package, side by side (with --quick, its quick run); then
#    benches/numpy_tp_bench.py: a tensor-parallel step of numpy worker functions, on worker
#    threads and on worker processes.
# The whole run takes under two minutes on a 2-CPU machine.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/benches/session_bench"
out="$repo/target/bench"
cc="${CC:-gcc}"
mkdir -p "$out"

eval "$("$repo/benches/setup_disco_venv.sh")"

if [ "${DVM_BENCH_BUILD_LIB:-0}" = 1 ]; then
    (cd "$repo" && cargo build --release >&2)
fi

sources=("$src/main.c" "$src/floors.c" "$src/disco.c")
flags=(-O2 -std=gnu11 -Wall -Wextra -DHAVE_DISCO -I"$TVM_FFI_INCLUDE")
libs=(-L"$TVM_FFI_LIB" -L"$TVM_LIB"
      -Wl,--no-as-needed -ltvm_ffi -ltvm_runtime -ltvm_runtime_extra -Wl,--as-needed)
rpath="$TVM_FFI_LIB:$TVM_LIB"

if [ -f "$repo/include/discovm.h" ] && [ -f "$repo/target/release/libdiscovm.so" ] &&
   [ -f "$src/discovm.c" ]; then
    echo "run.sh: building with the discovm columns (threaded and process sessions)" >&2
    sources+=("$src/discovm.c")
    flags+=(-DHAVE_DISCOVM -I"$repo/include")
    libs+=(-L"$repo/target/release" -ldiscovm)
    rpath="$repo/target/release:$rpath"
    # The worker program of process sessions, built as `make lib` builds it for debug.
    "$cc" -std=c11 -O2 -Wall -Wextra -I"$repo/include" "$repo/programs/discovm-worker.c" \
        -o "$repo/target/release/discovm-worker" \
        -L"$repo/target/release" -ldiscovm -Wl,-rpath,"$repo/target/release"
else
    echo "run.sh: discovm columns left empty (need include/discovm.h," \
         "target/release/libdiscovm.so and benches/session_bench/discovm.c)" >&2
fi

"$cc" "${flags[@]}" "${sources[@]}" -o "$out/session_bench" \
    "${libs[@]}" -Wl,-rpath,"$rpath" -lpthread -lm

"$out/session_bench" --csv "$out/session_bench.csv" "$@"

# The same sessions through the two Python APIs, Disco's and discovm's package, in the same venv.
if [ -f "$repo/target/release/libdiscovm.so" ]; then
    python_args=()
    for arg in "$@"; do [ "$arg" = --quick ] && python_args+=(--quick); done
    echo
    DISCOVM_LIBRARY="$repo/target/release/libdiscovm.so" PYTHONPATH="$repo/python" \
        "$VENV_PYTHON" "$repo/benches/python_session_bench.py" "${python_args[@]}"
    echo
    DISCOVM_LIBRARY="$repo/target/release/libdiscovm.so" PYTHONPATH="$repo/python" \
        "$VENV_PYTHON" "$repo/benches/numpy_tp_bench.py" "${python_args[@]}"
fi
