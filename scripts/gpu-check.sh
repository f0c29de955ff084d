#!/usr/bin/env bash
# Runs the GPU checks from a bundle made by scripts/gpu-build.sh, on a machine with the NVIDIA
# driver (no Rust, no network needed), in this order:
#   1. the CUDA C tests (device count, round trips, soft sync, small accesses, the default
#      stream, CUDA workers);
#   2. the NCCL tests (tests/c/cuda_nccl.c: every collective, one worker per GPU, on worker
#      threads and then on worker processes; one GPU runs the single-rank path, since NCCL
#      needs a GPU of its own for each worker; cuda_nccl_trace.c: a trace has each
#      all-reduce's run on each worker's GPU, its files left in the results; and with two GPUs
#      cuda_nccl_peers.c: a wait for a peer that passed its collective fails at once);
#   3. the DLPack consumer check (torch and/or cupy read our CUDA tensors), with python3;
#   4. the CUDA copy benchmark, whose Markdown tables go to benchmarks.md for BENCHMARKS.md.
# NCCL: DISCOVM_NCCL_LIBRARY if set; else the libnccl.so.2 of python3's nvidia-nccl-cu* wheel
# (what PyTorch installs), if there is one; else the loader's search path.
#
# Prints one PASS / FAIL / SKIP line per step and a summary. Exit status: 0 if every step
# passed, 1 if one failed, 77 if none failed but some skipped (no GPU here, no NCCL, no torch
# or cupy: each SKIP line says why). Every step has a time limit (the tests 15 s each, NCCL's three
# 30 s, the Python check 75 s, since torch and cupy load from a cold disk, the benchmark
# 100 s: under 6 minutes in all). A machine whose nvidia-smi lists GPUs but where the library counts none
# (another libcuda.so first on the loader's path) fails the first step.
#
#   gpu-bundle/gpu-check.sh [results-dir]    # results-dir: logs and benchmarks.md
#                                            # (default: a fresh directory under $TMPDIR)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ $# -ge 1 ]; then
  results="$1"
  mkdir -p "$results"
else
  results="$(mktemp -d "${TMPDIR:-/tmp}/discovm-gpu-check.XXXXXX")" # the bundle may be read-only
fi
commit="$(cat "$here/COMMIT" 2>/dev/null || echo unknown)"
echo "== discovm GPU check, commit $commit, $(date -u)"
gpu="(nvidia-smi not found)"
if command -v nvidia-smi >/dev/null; then
  gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
fi
echo "$gpu"

if [ -z "${DISCOVM_NCCL_LIBRARY:-}" ] && command -v python3 >/dev/null; then
  wheel="$(python3 - 2>/dev/null <<'EOF_PY'
import importlib.util, os
spec = importlib.util.find_spec("nvidia.nccl")
for root in (spec.submodule_search_locations or []) if spec else []:
    path = os.path.join(root, "lib", "libnccl.so.2")
    if os.path.exists(path):
        print(path)
        break
EOF_PY
)"
  if [ -n "$wheel" ]; then export DISCOVM_NCCL_LIBRARY="$wheel"; fi
fi
nccl="libnccl.so.2 from the search path of the dynamic loader"
echo "NCCL: ${DISCOVM_NCCL_LIBRARY:-$nccl}"

passed=0 failed=0 skipped=0
# step NAME LIMIT COMMAND...: runs one step with a time limit and reports it.
step() {
  local name=$1 limit=$2
  shift 2
  local start rc took_ms verdict
  start=$(date +%s%N)
  timeout --kill-after=5 "$limit" "$@" >"$results/$name.log" 2>&1
  rc=$?
  took_ms=$((($(date +%s%N) - start) / 1000000))
  case $rc in
    0) verdict=PASS; passed=$((passed + 1)) ;;
    77) verdict=SKIP; skipped=$((skipped + 1)) ;;
    124 | 137) verdict="FAIL (timed out after $limit s)"; failed=$((failed + 1)) ;;
    *) verdict="FAIL (exit $rc)"; failed=$((failed + 1)) ;;
  esac
  printf '%-22s %s  (%d ms)\n' "$name" "$verdict" "$took_ms"
  case $rc in
    0) ;;
    77) grep -m1 -i 'skipped' "$results/$name.log" | sed 's/^/    /' ;;
    *) tail -20 "$results/$name.log" | sed 's/^/    /' ;;
  esac
}

echo "== CUDA tests"
step device_count 15 "$here/bin/device_count"
listed=0
if command -v nvidia-smi >/dev/null; then listed="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"; fi
if [ "$listed" -gt 0 ] && grep -q '^device_count: 0 CUDA' "$results/device_count.log"; then
  echo "    FAIL: nvidia-smi lists $listed GPU(s), the library none: is another libcuda.so first?"
  passed=$((passed - 1)) failed=$((failed + 1))
fi
for test in cuda_roundtrip cuda_soft_sync cuda_small_access cuda_default_stream cuda_session; do
  step "$test" 15 "$here/bin/$test"
done
echo "== NCCL"
step cuda_nccl 30 env NCCL_DEBUG="${NCCL_DEBUG:-WARN}" "$here/bin/cuda_nccl"
step cuda_nccl_trace 30 env NCCL_DEBUG="${NCCL_DEBUG:-WARN}" CUDA_NCCL_TRACE_DIR="$results" \
  "$here/bin/cuda_nccl_trace"
step cuda_nccl_peers 30 env NCCL_DEBUG="${NCCL_DEBUG:-WARN}" "$here/bin/cuda_nccl_peers"
echo "== DLPack consumers"
if command -v python3 >/dev/null; then
  step dlpack_cuda 75 python3 "$here/python/test_dlpack_cuda.py" "$here/lib/libdiscovm.so"
else
  echo "dlpack_cuda            SKIP"
  echo "    dlpack with CUDA consumers: skipped: python3 not found"
  skipped=$((skipped + 1))
fi
echo "== CUDA copy benchmark"
step cuda_copy_bench 100 "$here/bin/cuda_copy_bench"
{
  echo "### CUDA copies against raw driver calls ($(date -u +%Y-%m-%d))"
  echo
  echo "GPU: $gpu; commit $commit."
  echo
  cat "$results/cuda_copy_bench.log"
} >"$results/benchmarks.md"
if grep -q '^|' "$results/cuda_copy_bench.log"; then sed 's/^/    /' "$results/cuda_copy_bench.log"; fi

echo "== $passed passed, $failed failed, $skipped skipped; logs and benchmarks.md in $results"
if [ "$failed" -ne 0 ]; then
  echo "== GPU check: FAILED"
  exit 1
fi
if [ "$skipped" -ne 0 ]; then
  echo "== GPU check: nothing failed, but some steps were skipped (see the SKIP lines)"
  exit 77
fi
echo "== GPU check: every step passed"
