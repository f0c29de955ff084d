#!/usr/bin/env bash
# Runs the CUDA tests and the CUDA copy benchmark from a bundle made by scripts/gpu-build.sh,
# on a machine with the NVIDIA driver (no Rust, no network needed). Prints one PASS / FAIL /
# SKIP line per test, then the benchmark's table; exits non-zero if a test failed or skipped
# (a skip here means the library found no GPU). Each test has 30 s and the benchmark 120 s, so
# the whole run stays under 5 minutes. Logs go to a fresh directory under $TMPDIR (or /tmp).
#
#   gpu-bundle/gpu-check.sh
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
logs="$(mktemp -d "${TMPDIR:-/tmp}/discovm-gpu-check.XXXXXX")" # the bundle may be read-only
echo "== discovm GPU check, commit $(cat "$here/COMMIT" 2>/dev/null || echo unknown), $(date -u)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "(nvidia-smi not found)"
fi
failed=0
for test in device_count cuda_roundtrip cuda_soft_sync cuda_small_access cuda_session; do
  start=$(date +%s%N)
  timeout 30 "$here/bin/$test" >"$logs/$test.log" 2>&1
  rc=$?
  took_ms=$((($(date +%s%N) - start) / 1000000))
  case $rc in
    0) verdict=PASS ;;
    77) verdict=SKIP; failed=1 ;;
    124) verdict="FAIL (timed out after 30 s)"; failed=1 ;;
    *) verdict="FAIL (exit $rc)"; failed=1 ;;
  esac
  printf '%-20s %s  (%d ms)\n' "$test" "$verdict" "$took_ms"
  if [ "$rc" -ne 0 ]; then sed 's/^/    /' "$logs/$test.log" | tail -20; fi
done
echo "== benchmark"
timeout 120 "$here/bin/cuda_copy_bench"
rc=$?
[ "$rc" -eq 0 ] || echo "cuda_copy_bench: exit $rc"
if [ "$failed" -ne 0 ]; then
  echo "== GPU check: FAILED"
  exit 1
fi
echo "== GPU check: every CUDA test passed"
