/*
 * The Open MPI side of the CPU collectives benchmark: the same collectives, sizes and units as
 * benches/ccl_bench/main.rs, with N MPI processes on this machine over shared memory. Built
 * and run by benches/ccl_bench/run_openmpi.sh.
 *
 * Sizes are the bytes of one float32 buffer; allreduce is out of place (send and receive of S
 * bytes), allgather gathers S bytes (S/N from each rank), broadcast sends S bytes from rank 0.
 * Each figure: the median of `samples` samples; a sample is a barrier, then `batch`
 * back-to-back calls, timed on every rank, the slowest rank's time / batch (as in main.rs).
 *
 * With the argument `allreduce` it measures the allreduce of 4 KiB and 16 MiB alone and prints
 * "BYTES SECONDS" lines (the node benchmark runs it that way, over TCP).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SAMPLES 101

static size_t clamp(size_t n, size_t lo, size_t hi) { return n < lo ? lo : (n > hi ? hi : n); }

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
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
  size_t batch = clamp((1u << 20) / bytes, 1, 200);
  int samples = (int)clamp((512u << 20) / bytes / batch, 11, MAX_SAMPLES);
  double mine[MAX_SAMPLES], slowest[MAX_SAMPLES];
  for (int s = -1; s < samples; s++) { /* sample -1 warms up */
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (size_t i = 0; i < batch; i++) {
      if (kind == 0) {
        MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      } else if (kind == 1) {
        MPI_Allgather(send, (int)(count / n), MPI_FLOAT, recv, (int)(count / n), MPI_FLOAT,
                      MPI_COMM_WORLD);
      } else {
        MPI_Bcast(send, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      }
    }
    if (s >= 0) {
      mine[s] = (MPI_Wtime() - start) / (double)batch;
    }
  }
  MPI_Allreduce(mine, slowest, samples, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  qsort(slowest, (size_t)samples, sizeof slowest[0], by_value);
  free(send);
  free(recv);
  return slowest[samples / 2];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc > 1 && strcmp(argv[1], "allreduce") == 0) {
    const size_t sizes[2] = {4u << 10, 16u << 20};
    for (int s = 0; s < 2; s++) {
      double ar = measure(0, sizes[s], n);
      if (rank == 0) {
        printf("%zu %.9f\n", sizes[s], ar);
      }
    }
    MPI_Finalize();
    return 0;
  }
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
