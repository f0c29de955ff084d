/*
 * Session benchmark: the interface every measured runtime implements.
 *
 * The harness (main.c) composes the metrics out of a few primitives, so every runtime is
 * measured by exactly the same loops:
 *
 *   sync worker 0          sync_worker0()
 *   call + sync worker 0   call(); sync_worker0()
 *   call + sync all        call(); sync_all()
 *   pipelined              call() x 10 000; sync_all()
 *   copy to worker 0       copy_to_worker0(); sync_worker0()
 *   copy from worker 0     copy_from_worker0()
 *   copy round trip        copy_to_worker0(); copy_from_worker0()
 *
 * A runtime is one C file that defines its `const bench_backend`s and is compiled in with a
 * flag: disco.c (HAVE_DISCO, TVM's Disco through libtvm_ffi) and discovm.c (HAVE_DISCOVM, our
 * library through include/discovm.h). Each file defines two backends that share every
 * function but open(): one for threaded sessions and one for sessions of worker processes.
 * main.c lists all four; a column whose file was not compiled in prints "-".
 *
 * Every function returning int returns 0 on success and nonzero on failure, after which
 * last_error() on the same thread describes the failure. A failure ends that runtime's
 * measurements for the rest of the run; the other columns go on.
 */
#ifndef DVM_SESSION_BENCH_H
#define DVM_SESSION_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* Defined by each backend file: its session state, and the state of one prepared copy. */
typedef struct bench_session bench_session;
typedef struct bench_copy bench_copy;

typedef struct bench_backend {
    /* Column name in the table: "disco", "disco process", "discovm" or "discovm process". */
    const char *name;

    /* A short description of the runtime and its version, printed in the table's header.
     * The string is static. */
    const char *(*version)(void);


    /* Opens a session of num_workers workers in one group (of threads or of processes, as the
     * backend says), and looks up the cheap worker function that call() runs
     * (runtime.disco.worker_id). Returns NULL on failure. */
    bench_session *(*open)(int32_t num_workers);

    /* Returns once worker 0 has finished everything sent to it before. */
    int (*sync_worker0)(bench_session *s);

    /* Sends one call of the cheap worker function to every worker and drops the result
     * reference at once (as a caller that ignores the result would). May return before any
     * worker has run it. */
    int (*call)(bench_session *s);

    /* Returns once every worker has finished everything sent to it before. */
    int (*sync_all)(bench_session *s);

    /* Allocates a float32 tensor of nbytes / 4 elements on worker 0 and prepares whatever the
     * two copy functions need to move data between it and the caller's buffers host_src and
     * host_dst (each nbytes long, 64-byte aligned, owned by the caller and alive until
     * copy_release). nbytes is a multiple of 4. Returns NULL on failure. */
    bench_copy *(*copy_prepare)(bench_session *s, void *host_src, void *host_dst, size_t nbytes);

    /* Copies host_src into the worker-0 tensor. May return before the copy is done, as long
     * as a later copy_from_worker0 on the same session sees the data. */
    int (*copy_to_worker0)(bench_copy *c);

    /* Copies the worker-0 tensor into host_dst. Returns only once host_dst holds the data
     * (a runtime whose copy is asynchronous waits for it here). */
    int (*copy_from_worker0)(bench_copy *c);

    /* Frees the worker-0 tensor and the copy state. Accepts NULL. */
    void (*copy_release)(bench_copy *c);

    /* Shuts the session down, joins its workers and frees it. Accepts NULL. */
    void (*close)(bench_session *s);

    /* The message of the last failure on the calling thread (never NULL). */
    const char *(*last_error)(void);
} bench_backend;

#ifdef HAVE_DISCO
extern const bench_backend bench_disco_backend;         /* ThreadedSession */
extern const bench_backend bench_disco_process_backend; /* ProcessSession */

/* Disco's ProcessSession starts workers 1..N-1 through a pool function it finds by name; the
 * one disco.c registers runs this program again as
 *   session_bench --disco-worker WORKER_ID NUM_WORKERS NUM_GROUPS READ_FD WRITE_FD
 * (the arguments of Disco's own Python worker, tvm.exec.disco_worker), and main() hands such
 * a run to bench_disco_worker_main, which serves the controller through Disco's
 * runtime.disco.WorkerProcess and returns the process's exit status. */
#define BENCH_DISCO_WORKER_FLAG "--disco-worker"
int bench_disco_worker_main(int argc, char **argv);
#endif
#ifdef HAVE_DISCOVM
extern const bench_backend bench_discovm_backend;         /* dvm_session_new_threaded */
extern const bench_backend bench_discovm_process_backend; /* dvm_session_new_process */
/* The same two, with a trace running from each session's start to its close. */
extern const bench_backend bench_discovm_traced_backend;
extern const bench_backend bench_discovm_process_traced_backend;
#endif

/* ---- floors (floors.c): the same work without any runtime ---------------------------------- */

/* Collects up to max_samples round trips of a two-thread ping-pong over two atomics (the
 * partner spins, then yields), stopping after budget_ns; writes one time in ns per sample and
 * returns how many it wrote, or -1 if the thread could not start. */
int floor_spin_pingpong(double *samples, int max_samples, uint64_t budget_ns);

/* Same with a mutex and two condition variables, signalling only a waiting thread: the
 * wake-up pattern of Disco's message queue, without any message. */
int floor_condvar_pingpong(double *samples, int max_samples, uint64_t budget_ns);

/* nbytes through plain memcpy: copies = 1 (host -> host) or 2 (host -> staging -> host, the
 * floor of a round trip). */
int floor_memcpy(size_t nbytes, int copies, double *samples, int max_samples, uint64_t budget_ns);

/* ---- shared helpers (main.c) ---------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* One step of a bounded wait: a CPU pause for the first polls, then a yield of the CPU, so
 * that a waiter sharing a CPU with the thread it waits for does not hold it. */
void bench_wait_step(unsigned *polls);

/* 64-byte aligned, zeroed, touched memory of nbytes (freed with free()); NULL on failure. */
void *bench_alloc(size_t nbytes);

#endif /* DVM_SESSION_BENCH_H */
