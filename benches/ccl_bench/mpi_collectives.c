/*
 * The Open MPI side of the CPU collectives benchmark: the same collectives, sizes and units as
 * benches/ccl_bench/main.rs, with N MPI processes on this machine over shared memory. Built
 * and run by benches/ccl_bench/run_openmpi.sh.
 *
 * Sizes are the bytes of one float32 buffer; allreduce is out of place (send and receive of S
 * bytes), allgather gathers S bytes (S/N from each rank), broadcast sends S bytes from rank 0.
 * Each measurement: a barrier, `iters` back-to-back calls, the slowest rank's time / iters.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t iterations(size_t bytes) {
  size_t n = (512u << 20) / bytes;
  return n < 3 ? 3 : (n > 20000 ? 20000 : n);
}

static void* buffer(size_t bytes) {
  void* p = NULL;
  if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(p, 1, bytes);
  return p;
}

/* Seconds per call of `kind` (0 allreduce, 1 allgather, 2 broadcast), slowest rank. */
static double measure(int kind, size_t bytes, int n) {
  size_t count = bytes / 4;
  float* send = buffer(bytes);
  float* recv = buffer(bytes);
  size_t iters = iterations(bytes);
  double start = 0;
  for (size_t i = 0; i < iters + 2; i++) {
    if (i == 2) {
      MPI_Barrier(MPI_COMM_WORLD);
      start = MPI_Wtime();
    }
    if (kind == 0) {
      MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (kind == 1) {
      MPI_Allgather(send, (int)(count / n), MPI_FLOAT, recv, (int)(count / n), MPI_FLOAT,
                    MPI_COMM_WORLD);
    } else {
      MPI_Bcast(send, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    }
  }
  double mine = (MPI_Wtime() - start) / (double)iters, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  free(send);
  free(recv);
  return slowest;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const size_t sizes[4] = {4u << 10, 1u << 20, 16u << 20, 64u << 20};
  for (int s = 0; s < 4; s++) {
    double ar = measure(0, sizes[s], n), ag = measure(1, sizes[s], n),
           bc = measure(2, sizes[s], n);
    if (rank == 0) {
      printf("| %zu KiB | %d | %.2f | %.2f | %.2f |\n", sizes[s] >> 10, n, sizes[s] / ar / 1e9,
             sizes[s] / ag / 1e9, sizes[s] / bc / 1e9);
      if (s == 0) {
        printf("| (4 KiB allreduce latency, N = %d: %.2f us) |\n", n, ar * 1e6);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
