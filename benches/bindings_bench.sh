#!/usr/bin/env bash
# Bindings benchmark: the cost of a call from Go and from Node.js over the same loop in C, in
# the same run. Each program makes pipelined calls of a no-op worker function (the built-in
# runtime.disco.worker_rank, on a threaded session of one worker; each result dropped at
# once, then one sync) and call + sync round trips, and prints its best of five rounds in ns
# per call; this prints them side by side with each binding's ratio over C.
#
# Usage: benches/bindings_bench.sh [PIPELINED_CALLS [ROUND_TRIPS]]
#   needs cargo, gcc, pkg-config, go (1.19 or later) and node with npm; builds the release
#   library (cargo build --release --lib) and installs koffi into bindings/node when missing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/target/bench/bindings"
lib="$repo/target/release"
mkdir -p "$out"

(cd "$repo" && cargo build --release --lib >&2)
gcc -O2 -std=c11 -Wall -Wextra -Werror -I"$repo/include" "$repo/benches/bindings/calls.c" \
    -o "$out/calls" -L"$lib" -ldiscovm -Wl,-rpath,"$lib"
sed -e "s|@PREFIX@|$repo|" -e "s|@LIBDIR@|$lib|" -e "s|@INCLUDEDIR@|$repo/include|" \
    -e "s|@VERSION@|0|" -e "s|@NATIVE_STATIC_LIBS@||" "$repo/packaging/discovm.pc.in" \
    > "$out/discovm.pc"
(cd "$repo/benches/bindings/go" && PKG_CONFIG_PATH="$out" go build -o "$out/calls-go" .)
[ -d "$repo/bindings/node/node_modules/koffi" ] ||
    (cd "$repo/bindings/node" && npm install --no-audit --no-fund >&2)

export LD_LIBRARY_PATH="$lib" DISCOVM_LIBRARY="$lib/libdiscovm.so"
c=$("$out/calls" "$@")
go=$("$out/calls-go" "$@")
node=$(node "$repo/benches/bindings/calls.mjs" "$@")
field() { sed -n -E "s/(^|.* )$1=([0-9.]+).*/\2/p" <<<"$2"; }
printf '%-8s %16s %16s\n' "" "pipelined ns" "round trip ns"
for row in "C:$c" "Go:$go" "Node.js:$node"; do
    name=${row%%:*} line=${row#*:}
    printf '%-8s %16s %16s\n' "$name" "$(field pipelined_ns "$line")" "$(field round_trip_ns "$line")"
done
echo "Node.js async round trip (await syncAll()): $(field async_round_trip_ns "$node") ns"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
for row in "Go:$go" "Node.js:$node"; do
    name=${row%%:*} line=${row#*:}
    echo "$name over C: pipelined $(ratio "$(field pipelined_ns "$line")" "$(field pipelined_ns "$c")")x," \
        "round trip $(ratio "$(field round_trip_ns "$line")" "$(field round_trip_ns "$c")")x"
done
