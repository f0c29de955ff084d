#!/usr/bin/env bash
# The tensor-parallel decoder benchmark (benches/tp_decode_bench.py) against the release
# library, in the TVM environment the tests use (tests/support/tvm_venv.sh makes it once).
#
# Usage: benches/tp_decode_bench.sh [tp_decode_bench.py options, e.g. --rounds 5, --quick]
#   DVM_BENCH_BUILD_LIB  set to 1 to run `cargo build --release` first
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${DVM_BENCH_BUILD_LIB:-0}" = 1 ]; then
    (cd "$repo" && cargo build --release >&2)
fi
lib="$repo/target/release"
if [ ! -f "$lib/libdiscovm.so" ]; then
    echo "tp_decode_bench.sh: $lib/libdiscovm.so is missing: cargo build --release" >&2
    exit 1
fi
# Two nodes meet through Gloo: its plugin goes next to the library, where sessions look.
make -C "$repo" --no-print-directory gloo-plugin PLUGIN_DIR="$lib" >&2
python="$("$repo/tests/support/tvm_venv.sh" | tail -n 1)"
DISCOVM_LIBRARY="$lib/libdiscovm.so" exec "$python" "$repo/benches/tp_decode_bench.py" "$@"
