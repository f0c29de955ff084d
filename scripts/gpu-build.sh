#!/usr/bin/env bash
# Builds the bundle that scripts/gpu-check.sh runs on a GPU machine with the NVIDIA driver but
# no Rust toolchain and no network: target/gpu-bundle/ with the release library, the headers,
# the CUDA and NCCL test programs and the CUDA copy benchmark compiled for x86-64 Linux, the
# DLPack consumer check (Python), and the check script. Needs cargo and gcc (not CUDA: the library and the benchmark load the driver at run
# time). The binaries need glibc 2.34 or later on the GPU machine (built against Debian 12's 2.36,
# using nothing newer than 2.34).
#
#   scripts/gpu-build.sh                 # builds target/gpu-bundle (and .tar.gz next to it)
#   copy target/gpu-bundle.tar.gz to the GPU machine, then there:
#   tar xzf gpu-bundle.tar.gz && gpu-bundle/gpu-check.sh [results-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=target/gpu-bundle
cargo build --release --lib
rm -rf "$bundle" "$bundle.tar.gz"
mkdir -p "$bundle/lib" "$bundle/bin" "$bundle/include" "$bundle/python"
cp target/release/libdiscovm.so "$bundle/lib/"
strip --strip-debug "$bundle/lib/libdiscovm.so"
cp include/discovm.h include/discovm_abi.h "$bundle/include/"
cflags=(-std=c11 -Wall -Wextra -Werror -O2 -Iinclude)
link=(-L"$bundle/lib" -ldiscovm '-Wl,-rpath,$ORIGIN/../lib')
for test in device_count cuda_roundtrip cuda_soft_sync cuda_small_access cuda_default_stream \
  cuda_session cuda_nccl cuda_nccl_trace cuda_nccl_peers; do
  gcc "${cflags[@]}" "tests/c/$test.c" -o "$bundle/bin/$test" "${link[@]}" -ldl
done
gcc "${cflags[@]}" benches/cuda_copy/main.c -o "$bundle/bin/cuda_copy_bench" "${link[@]}" -ldl
cp tests/python/test_dlpack_cuda.py tests/python/dlpack_ctypes.py tests/python/object_header.py \
  "$bundle/python/"
cp scripts/gpu-check.sh "$bundle/"
git rev-parse HEAD > "$bundle/COMMIT" 2>/dev/null || echo unknown > "$bundle/COMMIT"
tar czf "$bundle.tar.gz" -C target gpu-bundle
size=$(stat -c %s "$bundle.tar.gz")
unpacked=$(du -sb "$bundle" | cut -f1)
limit=$((64 * 1024 * 1024))
if [ "$unpacked" -ge "$limit" ]; then
  echo "the bundle is $unpacked bytes, over the 64 MiB limit" >&2
  exit 1
fi
echo "built $bundle ($unpacked bytes; $bundle.tar.gz: $size bytes)"
