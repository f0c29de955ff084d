#!/usr/bin/env bash
# The session benchmark of two trees, before (A) and after (B) a change, run in turns on one
# machine, so that both see the same drift: each pair runs A then B with the same options.
#
# Usage: benches/before_after.sh A_TREE B_TREE PAIRS [session_bench options]
#   e.g. benches/before_after.sh ../before . 4 --backends discovm,discovm_process --workers 1,2
#        --rounds 7 --quiet-wait-s 0
#
# Each tree must have its release library built (`cargo build --release` there). The benchmark
# program of each tree is compiled against that tree's header and library, as benches/run.sh
# compiles it; the numbers of pair i go to A_TREE/target/bench/before_after_i.csv and
# B_TREE/target/bench/before_after_i.csv, the tables to stdout, A's first in each pair.
set -euo pipefail

if [ $# -lt 3 ]; then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
trees=("$(cd "$1" && pwd)" "$(cd "$2" && pwd)")
pairs="$3"
shift 3
cc="${CC:-gcc}"

eval "$("$repo/benches/setup_disco_venv.sh")"

for tree in "${trees[@]}"; do
    lib="$tree/target/release"
    if [ ! -f "$lib/libdiscovm.so" ]; then
        echo "before_after.sh: $lib/libdiscovm.so is missing: cargo build --release in $tree" >&2
        exit 1
    fi
    mkdir -p "$tree/target/bench"
    "$cc" -std=c11 -O2 -Wall -Wextra -I"$tree/include" "$tree/programs/discovm-worker.c" \
        -o "$lib/discovm-worker" -L"$lib" -ldiscovm -Wl,-rpath,"$lib"
    src="$tree/benches/session_bench"
    "$cc" -O2 -std=gnu11 -Wall -Wextra -DHAVE_DISCO -DHAVE_DISCOVM -I"$TVM_FFI_INCLUDE" \
        -I"$tree/include" "$src/main.c" "$src/floors.c" "$src/disco.c" "$src/discovm.c" \
        -o "$tree/target/bench/session_bench" \
        -L"$TVM_FFI_LIB" -L"$TVM_LIB" -L"$lib" \
        -Wl,--no-as-needed -ltvm_ffi -ltvm_runtime -ltvm_runtime_extra -Wl,--as-needed \
        -ldiscovm -Wl,-rpath,"$lib:$TVM_FFI_LIB:$TVM_LIB" -lpthread -lm
done

for pair in $(seq 1 "$pairs"); do
    for side in 0 1; do
        tree="${trees[$side]}"
        echo "== pair $pair, $([ "$side" = 0 ] && echo A || echo B): $tree"
        "$tree/target/bench/session_bench" --csv "$tree/target/bench/before_after_$pair.csv" "$@"
    done
done
