#!/usr/bin/env bash
# A bounded fuzzing run of every target in fuzz/fuzz_targets/: each for SECONDS seconds
# (default 20), starting from its committed corpus, built with AddressSanitizer, debug
# assertions and overflow checks. Any crash, sanitizer report or failed check fails the run;
# the input that caused it lands in target/fuzz/artifacts/<target>/. Prints the executions of
# each target. See fuzz/README.md.
#
#   fuzz/run.sh [SECONDS]
#
# It needs cargo-fuzz, which it installs into target/tools on first use (from crates.io, the
# version below, with its lock file), and a C++ compiler for libFuzzer.
set -euo pipefail

seconds="${1:-20}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

version=0.13.2
tools="$root/target/tools"
cargo_fuzz="$tools/bin/cargo-fuzz"
mkdir -p "$tools"
(
    # One installer at a time; a second run waits, then finds it installed.
    flock 9
    if ! "$cargo_fuzz" --version 2>/dev/null | grep -qF "$version"; then
        echo "fuzz/run.sh: installing cargo-fuzz $version into target/tools (first run only;" \
            "needs crates.io)" >&2
        cargo install --locked --quiet --root "$tools" --version "$version" cargo-fuzz
    fi
) 9>"$tools/.install-lock"

# AddressSanitizer is a `-Z` option of rustc; the stable compiler accepts it with
# RUSTC_BOOTSTRAP=1. DVM_FUZZ_SANITIZER=none fuzzes without it (no nightly-only flag at all).
export RUSTC_BOOTSTRAP=1
sanitizer="${DVM_FUZZ_SANITIZER:-address}"
out="$root/target/fuzz"
"$cargo_fuzz" build --fuzz-dir fuzz --sanitizer "$sanitizer" --debug-assertions \
    --target-dir "$out"

for target in $("$cargo_fuzz" list --fuzz-dir fuzz); do
    # New inputs go to a scratch corpus under target/; the committed one only seeds the run.
    work="$out/corpus/$target"
    artifacts="$out/artifacts/$target"
    mkdir -p "$work" "$artifacts"
    log="$out/$target.log"
    if ! "$cargo_fuzz" run --fuzz-dir fuzz --sanitizer "$sanitizer" --debug-assertions \
        --target-dir "$out" "$target" "$work" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts/" \
        >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz/run.sh: $target failed; the input is in $artifacts" >&2
        exit 1
    fi
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    echo "fuzz $target: $runs executions in ${seconds} s, no failure"
done
