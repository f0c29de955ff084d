#!/usr/bin/env bash
# CPU collectives: discovm and Open MPI in one run, for the ratios BENCHMARKS.md reports.
#
# Usage: benches/ccl_bench/run_openmpi.sh
#   1. installs Debian's openmpi-bin and libopenmpi-dev if mpicc is missing (needs root);
#   2. runs the discovm benchmark (cargo bench --bench ccl_bench: floors and N = 2, 4);
#   3. compiles benches/ccl_bench/mpi_collectives.c and runs it with 2 and 4 ranks over
#      shared memory (ob1 + vader, oversubscribed as on a 2-CPU machine).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$repo/target/bench"
mkdir -p "$out"

if ! command -v mpicc > /dev/null; then
    echo "run_openmpi.sh: installing openmpi-bin and libopenmpi-dev" >&2
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y openmpi-bin libopenmpi-dev >&2
fi

echo "## discovm"
(cd "$repo" && cargo bench -q --bench ccl_bench)

mpicc -O3 -march=native -Wall -o "$out/mpi_collectives" "$repo/benches/ccl_bench/mpi_collectives.c"
echo
echo "## Open MPI $(mpirun --version | head -1 | awk '{print $NF}')"
echo
echo "| size | N | allreduce | allgather | broadcast |"
echo "|---|---|---|---|---|"
for n in 2 4; do
    mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader -np "$n" \
        "$out/mpi_collectives"
done
