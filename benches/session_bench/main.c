/*
 * Session benchmark: TVM's Disco and discovm side by side, each with a threaded session and a
 * session of worker processes, against floors measured in the same run.
 *
 * For N = 1, 2, 4 workers, every round opens a fresh session per runtime, in a child process
 * of its own (the order of the runtimes rotates from round to round, so slow drift of the
 * machine spreads evenly; the separate processes keep either runtime's leftovers, such as
 * thread placement, from touching the other's numbers), warms it up, and measures each metric many times; a round keeps the median of its samples. The table
 * shows the median of the rounds' medians and, in brackets, the best round. Absolute times on
 * small shared machines drift a lot between runs; the ratios within one run do not.
 *
 * Other processes on the machine disturb every number here. Before each round the harness
 * waits (briefly) for them to go quiet, and it reports how much CPU they took.
 *
 * Usage: session_bench [--rounds R] [--workers 1,2,4]
 *                      [--backends disco,disco_process,discovm,discovm_process,
 *                                  discovm_traced,discovm_process_traced]
 *                      [--budget-s S] [--quiet-wait-s S] [--metric-ms MS] [--warm-ms MS]
 *                      [--samples K] [--pipe-calls K] [--csv PATH] [--quick]
 * (--help describes them.)
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- shared helpers --------------------------------------------------------------------------- */

uint64_t bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* About 6 µs of pauses before the first yield: longer than any cross-CPU round trip, shorter
 * than a scheduler time slice. */
#define WAIT_PAUSE_POLLS 256

void bench_wait_step(unsigned *polls) {
    if (*polls < WAIT_PAUSE_POLLS) {
        ++*polls;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ volatile("yield");
#endif
    } else {
        sched_yield();
    }
}

void *bench_alloc(size_t nbytes) {
    size_t rounded = (nbytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded); /* touch every page before anything is timed */
    return p;
}

/* CPU seconds of this process and of its finished children (each runtime is measured in a
 * child process). */
static double process_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    struct rusage children;
    getrusage(RUSAGE_CHILDREN, &children);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (double)children.ru_utime.tv_sec +
           (double)children.ru_utime.tv_usec * 1e-6 + (double)children.ru_stime.tv_sec +
           (double)children.ru_stime.tv_usec * 1e-6;
}

/* CPU seconds all CPUs spent busy since boot (from /proc/stat), or NAN where unavailable. */
static double machine_busy_s(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return NAN;
    unsigned long long user, nice, sys, idle, iowait, irq, softirq, steal;
    int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle,
                     &iowait, &irq, &softirq, &steal);
    fclose(f);
    if (got != 8) return NAN;
    return (double)(user + nice + sys + irq + softirq) / (double)sysconf(_SC_CLK_TCK);
}

/* CPUs' worth of load from other processes over the last interval (>= 0). */
struct load_mark {
    double wall_s, busy_s, own_s;
};

static struct load_mark load_mark_now(void) {
    struct load_mark m = {(double)bench_now_ns() * 1e-9, machine_busy_s(), process_cpu_s()};
    return m;
}

static double foreign_load_since(struct load_mark a) {
    struct load_mark b = load_mark_now();
    double wall = b.wall_s - a.wall_s;
    double load = (b.busy_s - a.busy_s - (b.own_s - a.own_s)) / (wall > 0 ? wall : 1);
    return isnan(load) || load < 0 ? 0.0 : load;
}

/* Waits, at most max_s, until other processes use less than a quarter of a CPU over 200 ms.
 * Returns the last load seen. */
static double wait_for_quiet(double max_s) {
    const struct timespec window = {0, 200 * 1000 * 1000};
    uint64_t end = bench_now_ns() + (uint64_t)(max_s * 1e9);
    double load = 0;
    do {
        struct load_mark m = load_mark_now();
        nanosleep(&window, NULL);
        load = foreign_load_since(m);
    } while (load >= 0.25 && bench_now_ns() < end);
    return load;
}

/* ---- what is measured ------------------------------------------------------------------------- */

#define NUM_SIZES 3
static const size_t copy_bytes[NUM_SIZES] = {64, 64 << 10, 16 << 20};
static const char *const copy_names[NUM_SIZES] = {"64 B", "64 KiB", "16 MiB"};
static const char *const copy_keys[NUM_SIZES] = {"64B", "64KiB", "16MiB"};

/* Copies are measured three ways: to worker 0 (then a sync of worker 0, as the copy may be
 * asynchronous), from worker 0, and the round trip (to, then from). */
enum copy_dir { D_TO, D_FROM, D_ROUND_TRIP, NUM_DIRS };

enum metric {
    M_SYNC0,
    M_CALL_SYNC0,
    M_CALL_SYNC_ALL,
    M_PIPELINED,
    M_COPY_FIRST,
    M_COUNT = M_COPY_FIRST + NUM_SIZES * NUM_DIRS
};
#define M_COPY(size, dir) (M_COPY_FIRST + (size) * NUM_DIRS + (dir))

/* Floors: two ping-pongs, and memcpy of each size with one copy (for the one-way copies)
 * and two copies (for the round trip). */
enum floor_metric {
    F_SPIN,
    F_CONDVAR,
    F_MEMCPY_FIRST,
    F_COUNT = F_MEMCPY_FIRST + NUM_SIZES * 2
};
#define F_MEMCPY(size, copies) (F_MEMCPY_FIRST + (size) * 2 + (copies) - 1)

static struct metric_info {
    char key[32];   /* for the CSV */
    char label[40]; /* for the tables */
    int floor;      /* the floor_metric it is compared with, or -1 */
    double bytes;   /* bytes moved per operation (copies), for GB/s */
    int size;       /* copies: the index in copy_bytes; -1 for the other metrics */
} metric_info[M_COUNT];

static char floor_keys[F_COUNT][32] = {"spin_pingpong", "condvar_pingpong"};

static void set_metric(int m, const char *key, const char *label, int floor, double bytes) {
    snprintf(metric_info[m].key, sizeof metric_info[m].key, "%s", key);
    snprintf(metric_info[m].label, sizeof metric_info[m].label, "%s", label);
    metric_info[m].floor = floor;
    metric_info[m].bytes = bytes;
    metric_info[m].size = -1;
}

static void init_metric_info(void) {
    set_metric(M_SYNC0, "sync_worker0", "sync worker 0", F_SPIN, 0);
    set_metric(M_CALL_SYNC0, "call_sync_worker0", "call + sync worker 0", F_SPIN, 0);
    set_metric(M_CALL_SYNC_ALL, "call_sync_all", "call + sync all", F_SPIN, 0);
    set_metric(M_PIPELINED, "pipelined_call", "pipelined call", -1, 0);
    static const char *const dir_keys[NUM_DIRS] = {"copy_to_w0", "copy_from_w0", "copy_to_from_w0"};
    static const char *const dir_labels[NUM_DIRS] = {"to w0 + sync", "from w0", "to+from w0"};
    for (int k = 0; k < NUM_SIZES; k++) {
        double b = (double)copy_bytes[k];
        for (int d = 0; d < NUM_DIRS; d++) {
            char key[32], label[40];
            snprintf(key, sizeof key, "%s_%s", dir_keys[d], copy_keys[k]);
            snprintf(label, sizeof label, "copy %s %s", copy_names[k], dir_labels[d]);
            int copies = d == D_ROUND_TRIP ? 2 : 1;
            set_metric(M_COPY(k, d), key, label, F_MEMCPY(k, copies), copies * b);
            metric_info[M_COPY(k, d)].size = k;
        }
        snprintf(floor_keys[F_MEMCPY(k, 1)], sizeof floor_keys[0], "memcpy_%s", copy_keys[k]);
        snprintf(floor_keys[F_MEMCPY(k, 2)], sizeof floor_keys[0], "memcpy_x2_%s", copy_keys[k]);
    }
}

/* ---- the columns ------------------------------------------------------------------------------ */

#ifdef HAVE_DISCO
#define DISCO_IMPL (&bench_disco_backend)
#define DISCO_PROCESS_IMPL (&bench_disco_process_backend)
#else
#define DISCO_IMPL NULL
#define DISCO_PROCESS_IMPL NULL
#endif
#ifdef HAVE_DISCOVM
#define DISCOVM_IMPL (&bench_discovm_backend)
#define DISCOVM_PROCESS_IMPL (&bench_discovm_process_backend)
#define DISCOVM_TRACED_IMPL (&bench_discovm_traced_backend)
#define DISCOVM_PROCESS_TRACED_IMPL (&bench_discovm_process_traced_backend)
#else
#define DISCOVM_IMPL NULL
#define DISCOVM_PROCESS_IMPL NULL
#define DISCOVM_TRACED_IMPL NULL
#define DISCOVM_PROCESS_TRACED_IMPL NULL
#endif

enum {
    C_DISCO,
    C_DISCO_PROCESS,
    C_DISCOVM,
    C_DISCOVM_PROCESS,
    C_DISCOVM_TRACED,
    C_DISCOVM_PROCESS_TRACED,
    NUM_COLUMNS
};

static struct column {
    const char *key;  /* for --backends and the CSV */
    const char *name; /* for the tables */
    const bench_backend *impl; /* NULL: not compiled in, or not selected */
    int failed;
    char error[512];
} columns[NUM_COLUMNS] = {
    [C_DISCO] = {"disco", "disco", DISCO_IMPL, 0, ""},
    [C_DISCO_PROCESS] = {"disco_process", "disco process", DISCO_PROCESS_IMPL, 0, ""},
    [C_DISCOVM] = {"discovm", "discovm", DISCOVM_IMPL, 0, ""},
    [C_DISCOVM_PROCESS] = {"discovm_process", "discovm process", DISCOVM_PROCESS_IMPL, 0, ""},
    /* Measured only when --backends names them. */
    [C_DISCOVM_TRACED] = {"discovm_traced", "dvm traced", DISCOVM_TRACED_IMPL, 0, ""},
    [C_DISCOVM_PROCESS_TRACED] = {"discovm_process_traced", "dvm-p traced",
                                  DISCOVM_PROCESS_TRACED_IMPL, 0, ""},
};

#define MAX_WORKER_COUNTS 8
#define MAX_ROUNDS 64

static struct options {
    int rounds;
    int worker_counts[MAX_WORKER_COUNTS];
    int num_worker_counts;
    double budget_s;
    double quiet_wait_s; /* per round, waiting for other processes to go quiet */
    uint64_t metric_ns; /* time cap per metric per round */
    uint64_t warm_ns;   /* warm-up after each session opens */
    int samples;        /* sample cap per metric per round */
    int pipe_calls;     /* calls per pipelined batch */
    int pipe_batches;   /* batches per round */
    const char *csv_path;
} opt = {
    .rounds = 11,
    .worker_counts = {1, 2, 4},
    .num_worker_counts = 3,
    .budget_s = 100,
    .quiet_wait_s = 2,
    .metric_ns = 60 * 1000 * 1000ull,
    .warm_ns = 100 * 1000 * 1000ull,
    .samples = 3000,
    .pipe_calls = 10000,
    .pipe_batches = 3,
    .csv_path = NULL,
};

/* Per-round medians in ns (NAN = not measured). */
static double results[NUM_COLUMNS][MAX_WORKER_COUNTS][M_COUNT][MAX_ROUNDS];
static double floor_results[F_COUNT][MAX_ROUNDS];
static int rounds_done;
static double *samples;

/* ---- statistics ------------------------------------------------------------------------------- */

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the non-NAN values (sorts a copy); NAN if there are none. */
static double median_of(const double *values, int n) {
    double tmp[MAX_ROUNDS > 1 ? MAX_ROUNDS : 1];
    double *buf = n <= MAX_ROUNDS ? tmp : malloc(sizeof(double) * (size_t)n);
    if (!buf) return NAN;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(values[i])) buf[m++] = values[i];
    double med = NAN;
    if (m > 0) {
        qsort(buf, (size_t)m, sizeof(double), compare_doubles);
        med = m % 2 ? buf[m / 2] : 0.5 * (buf[m / 2 - 1] + buf[m / 2]);
    }
    if (buf != tmp) free(buf);
    return med;
}

static double min_of(const double *values, int n) {
    double best = NAN;
    for (int i = 0; i < n; i++)
        if (!isnan(values[i]) && (isnan(best) || values[i] < best)) best = values[i];
    return best;
}

static int count_of(const double *values, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) m += !isnan(values[i]);
    return m;
}

/* ---- measuring a runtime ---------------------------------------------------------------------- */

struct op_ctx {
    const bench_backend *b;
    bench_session *s;
    bench_copy *c;
};

typedef int (*op_fn)(struct op_ctx *);

static int op_sync0(struct op_ctx *x) { return x->b->sync_worker0(x->s); }

static int op_call_sync0(struct op_ctx *x) {
    return x->b->call(x->s) || x->b->sync_worker0(x->s);
}

static int op_call_sync_all(struct op_ctx *x) { return x->b->call(x->s) || x->b->sync_all(x->s); }

static int op_copy_to(struct op_ctx *x) {
    return x->b->copy_to_worker0(x->c) || x->b->sync_worker0(x->s);
}

static int op_copy_from(struct op_ctx *x) { return x->b->copy_from_worker0(x->c); }

static int op_copy_round_trip(struct op_ctx *x) {
    return x->b->copy_to_worker0(x->c) || x->b->copy_from_worker0(x->c);
}

/* Runs op back to back, timing each run, until the sample or time cap; *median gets the
 * median in ns. At least 5 samples are taken whatever the time cap. */
static int measure_op(op_fn op, struct op_ctx *x, double *median) {
    int n = 0;
    uint64_t start = bench_now_ns(), t0 = start;
    while (n < opt.samples && (n < 5 || t0 - start < opt.metric_ns)) {
        if (op(x) != 0) return -1;
        uint64_t t1 = bench_now_ns();
        samples[n++] = (double)(t1 - t0);
        t0 = t1;
    }
    *median = median_of(samples, n);
    return 0;
}

/* Several batches of calls followed by one sync all; *median gets ns per call. */
static int measure_pipelined(struct op_ctx *x, double *median) {
    double per_call[16];
    int batches = opt.pipe_batches < 16 ? opt.pipe_batches : 16;
    if (x->b->sync_all(x->s) != 0) return -1;
    for (int k = 0; k < batches; k++) {
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < opt.pipe_calls; i++)
            if (x->b->call(x->s) != 0) return -1;
        if (x->b->sync_all(x->s) != 0) return -1;
        per_call[k] = (double)(bench_now_ns() - t0) / opt.pipe_calls;
    }
    *median = median_of(per_call, batches);
    return 0;
}

static void column_fail(struct column *col, const char *what) {
    col->failed = 1;
    snprintf(col->error, sizeof col->error, "%s: %s", what, col->impl->last_error());
    fprintf(stderr, "session_bench: %s: %s (no further measurements of %s)\n", col->name,
            col->error, col->name);
}

/* Fills host_src with a pattern that differs per round, clears host_dst, does one round trip
 * and compares: a copy that returns before the data arrived shows up here. */
static int check_copy(struct op_ctx *x, float *src, float *dst, size_t nbytes, int round,
                      const char **what) {
    size_t elems = nbytes / sizeof(float);
    for (size_t i = 0; i < elems; i++) src[i] = (float)(i % 4093) + 0.25f * (float)(round + 1);
    memset(dst, 0, nbytes);
    *what = "copy round trip";
    if (op_copy_round_trip(x) != 0) return -1;
    if (memcmp(src, dst, nbytes) != 0) {
        *what = "copy round trip returned different data";
        return 1;
    }
    return 0;
}

static void measure_column(struct column *col, int wi, int round) {
    const bench_backend *b = col->impl;
    int workers = opt.worker_counts[wi];
    double(*out)[MAX_ROUNDS] = results[col - columns][wi];
#define OUT(m) out[m][round]
    struct op_ctx x = {b, b->open(workers), NULL};
    if (!x.s) {
        column_fail(col, "open");
        return;
    }
    const char *what = "warm-up";
    uint64_t warm_end = bench_now_ns() + opt.warm_ns;
    while (bench_now_ns() < warm_end)
        if (op_call_sync_all(&x) != 0 || op_sync0(&x) != 0) goto failed;

    what = "sync worker 0";
    if (measure_op(op_sync0, &x, &OUT(M_SYNC0)) != 0) goto failed;
    what = "call + sync worker 0";
    if (measure_op(op_call_sync0, &x, &OUT(M_CALL_SYNC0)) != 0) goto failed;
    what = "call + sync all";
    if (measure_op(op_call_sync_all, &x, &OUT(M_CALL_SYNC_ALL)) != 0) goto failed;
    what = "pipelined calls";
    if (measure_pipelined(&x, &OUT(M_PIPELINED)) != 0) goto failed;

    for (int k = 0; k < NUM_SIZES; k++) {
        static const op_fn copy_ops[NUM_DIRS] = {op_copy_to, op_copy_from, op_copy_round_trip};
        size_t nbytes = copy_bytes[k];
        float *src = bench_alloc(nbytes), *dst = bench_alloc(nbytes);
        int rc = -1;
        what = "copy: out of memory";
        if (src && dst) {
            what = "copy prepare";
            x.c = b->copy_prepare(x.s, src, dst, nbytes);
            if (x.c) {
                rc = check_copy(&x, src, dst, nbytes, round, &what);
                for (int d = 0; d < NUM_DIRS && rc == 0; d++) {
                    what = metric_info[M_COPY(k, d)].label;
                    rc = measure_op(copy_ops[d], &x, &OUT(M_COPY(k, d)));
                }
                b->copy_release(x.c);
                x.c = NULL;
            }
        }
        free(src);
        free(dst);
        if (rc > 0) {
            col->failed = 1;
            snprintf(col->error, sizeof col->error, "%s (%s)", what, copy_names[k]);
            fprintf(stderr, "session_bench: %s: %s\n", col->name, col->error);
            break;
        }
        if (rc < 0) goto failed;
    }
    b->close(x.s);
    return;
failed:
    column_fail(col, what);
    b->close(x.s);
#undef OUT
}

/* Measures one runtime in a child process, so that nothing it leaves behind (threads, thread
 * placement, allocator state) touches the other runtime's numbers, and reads the results
 * back through a pipe. */
static void measure_column_isolated(struct column *col, int wi, int round) {
    struct report {
        double values[M_COUNT];
        int failed;
        char error[sizeof col->error];
    } report;
    int fds[2];
    if (pipe(fds) != 0) {
        measure_column(col, wi, round);
        return;
    }
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        measure_column(col, wi, round);
        for (int m = 0; m < M_COUNT; m++) report.values[m] = results[col - columns][wi][m][round];
        report.failed = col->failed;
        memcpy(report.error, col->error, sizeof report.error);
        ssize_t written = write(fds[1], &report, sizeof report);
        fflush(NULL);
        _exit(written == (ssize_t)sizeof report ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    while (child > 0 && got < sizeof report) {
        ssize_t n = read(fds[0], (char *)&report + got, sizeof report - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    if (child > 0) waitpid(child, &status, 0);
    if (child < 0 || got != sizeof report) {
        col->failed = 1;
        if (child > 0 && WIFSIGNALED(status))
            snprintf(col->error, sizeof col->error,
                     "the measuring process ended early (killed by signal %d, %s)",
                     WTERMSIG(status), strsignal(WTERMSIG(status)));
        else if (child > 0 && WIFEXITED(status))
            snprintf(col->error, sizeof col->error,
                     "the measuring process ended early (exit status %d)", WEXITSTATUS(status));
        else
            snprintf(col->error, sizeof col->error, "the measuring process ended early");
        fprintf(stderr, "session_bench: %s: %s\n", col->name, col->error);
        return;
    }
    for (int m = 0; m < M_COUNT; m++) results[col - columns][wi][m][round] = report.values[m];
    col->failed = report.failed;
    memcpy(col->error, report.error, sizeof col->error);
}

static void measure_floors(int round) {
    int n = floor_spin_pingpong(samples, opt.samples, opt.metric_ns);
    floor_results[F_SPIN][round] = n > 0 ? median_of(samples, n) : NAN;
    n = floor_condvar_pingpong(samples, opt.samples, opt.metric_ns);
    floor_results[F_CONDVAR][round] = n > 0 ? median_of(samples, n) : NAN;
    for (int k = 0; k < NUM_SIZES; k++)
        for (int copies = 1; copies <= 2; copies++) {
            n = floor_memcpy(copy_bytes[k], copies, samples, opt.samples, opt.metric_ns);
            floor_results[F_MEMCPY(k, copies)][round] = n > 0 ? median_of(samples, n) : NAN;
        }
}

/* ---- printing --------------------------------------------------------------------------------- */

/* A number with about three significant digits and no exponent. */
static void fmt_num(char *buf, size_t len, double v) {
    double a = fabs(v);
    if (isnan(v))
        snprintf(buf, len, "-");
    else if (a >= 100)
        snprintf(buf, len, "%.0f", v);
    else if (a >= 10)
        snprintf(buf, len, "%.1f", v);
    else if (a >= 1)
        snprintf(buf, len, "%.2f", v);
    else if (a >= 0.01)
        snprintf(buf, len, "%.3f", v);
    else
        snprintf(buf, len, "%.4f", v);
}

enum unit { U_US, U_NS, U_MCALLS, U_GBPS };

/* Converts ns per operation into the unit of a row (bytes: bytes moved per operation). */
static double convert(double ns, enum unit u, double bytes) {
    switch (u) {
    case U_US: return ns / 1000.0;
    case U_NS: return ns;
    case U_MCALLS: return 1000.0 / ns;
    case U_GBPS: return bytes / ns;
    }
    return NAN;
}

/* "median [best]" of per-round values in ns, in the row's unit. */
static void fmt_cell(char *buf, size_t len, const double *rounds, enum unit u, double bytes,
                     int failed) {
    if (count_of(rounds, rounds_done) == 0) {
        snprintf(buf, len, "%s", failed ? "err" : "-");
        return;
    }
    char a[24], b[24];
    fmt_num(a, sizeof a, convert(median_of(rounds, rounds_done), u, bytes));
    fmt_num(b, sizeof b, convert(min_of(rounds, rounds_done), u, bytes));
    snprintf(buf, len, "%s [%s]", a, b);
}

#define LABEL_WIDTH 34
#define CELL_WIDTH 18
#define RATIO_WIDTH 15

/* A ratio as "1.23x", or "-" when either side is missing. */
static void fmt_ratio(char *buf, size_t len, double ratio) {
    fmt_num(buf, len, ratio);
    if (!isnan(ratio)) strncat(buf, "x", len - strlen(buf) - 1);
}

static void print_row(const char *label, const char *unit_name, int wi, int metric,
                      enum unit u, double bytes) {
    char text[64], cell[64];
    snprintf(text, sizeof text, "  %s (%s)", label, unit_name);
    printf("%-*s", LABEL_WIDTH, text);
    for (int c = 0; c < NUM_COLUMNS; c++) {
        fmt_cell(cell, sizeof cell, results[c][wi][metric], u, bytes, columns[c].failed);
        printf("%-*s", CELL_WIDTH, cell);
    }
    int f = metric_info[metric].floor;
    if (f >= 0)
        fmt_cell(cell, sizeof cell, floor_results[f], u, bytes, 0);
    else
        snprintf(cell, sizeof cell, "-");
    printf("%s\n", cell);
}

static void print_table(double foreign_load, int disturbed_rounds, double elapsed_s) {
    printf("\n== session benchmark: %d round%s in %.0f s; other processes used %.2f CPUs "
           "on average ==\n",
           rounds_done, rounds_done == 1 ? "" : "s", elapsed_s, foreign_load);
    if (disturbed_rounds)
        printf("WARNING: other processes used a quarter of a CPU or more in %d of %d rounds; "
               "absolute\nnumbers (and ratios to the floors) are disturbed. Rerun on a quiet "
               "machine.\n",
               disturbed_rounds, rounds_done);
    printf("Cells: median of the rounds' medians [best round]. Floors: spin ping-pong round "
           "trip for\nlatencies; one memcpy for a one-way copy, two for a round trip.\n");
    for (int c = 0; c < NUM_COLUMNS; c++)
        printf("  %-16s %s\n", columns[c].name,
               columns[c].impl ? columns[c].impl->version() : "not built or not selected (\"-\")");

    for (int wi = 0; wi < opt.num_worker_counts; wi++) {
        char head[64];
        snprintf(head, sizeof head, "\nN = %d worker%s", opt.worker_counts[wi],
                 opt.worker_counts[wi] == 1 ? "" : "s");
        printf("%-*s", LABEL_WIDTH + 1, head);
        for (int c = 0; c < NUM_COLUMNS; c++) printf("%-*s", CELL_WIDTH, columns[c].name);
        printf("floor\n");
        print_row("sync worker 0", "us", wi, M_SYNC0, U_US, 0);
        print_row("call + sync worker 0", "us", wi, M_CALL_SYNC0, U_US, 0);
        print_row("call + sync all", "us", wi, M_CALL_SYNC_ALL, U_US, 0);
        print_row("pipelined call", "ns/call", wi, M_PIPELINED, U_NS, 0);
        print_row("pipelined", "M calls/s", wi, M_PIPELINED, U_MCALLS, 0);
        for (int k = 0; k < NUM_SIZES; k++)
            for (int d = 0; d < NUM_DIRS; d++) {
                int m = M_COPY(k, d);
                print_row(metric_info[m].label, "us", wi, m, U_US, 0);
                /* 64 B copies are pure latency; bandwidth only for the larger sizes */
                if (k > 0) print_row(metric_info[m].label, "GB/s", wi, m, U_GBPS, metric_info[m].bytes);
            }
    }

    char cell[64];
    printf("\nPlatform, same rounds:\n");
    fmt_cell(cell, sizeof cell, floor_results[F_SPIN], U_US, 0, 0);
    printf("  %-*s%s\n", LABEL_WIDTH - 2, "spin ping-pong round trip (us)", cell);
    fmt_cell(cell, sizeof cell, floor_results[F_CONDVAR], U_US, 0, 0);
    printf("  %-*s%s\n", LABEL_WIDTH - 2, "condvar wake round trip (us)", cell);
    printf("  (the condvar round trip is the wake-up pattern of Disco's queues; on small VMs it\n"
           "  is bimodal, a few us when the woken thread shares the waker's CPU, tens of us\n"
           "  when a halted CPU has to be woken)\n");

    /* Each ratio column divides one column's medians by another's (or by the floor). */
    static const struct {
        const char *head;
        int num, den; /* column indices; den -1: the floor */
    } ratio_cols[] = {
        {"disco/floor", C_DISCO, -1},
        {"discovm/floor", C_DISCOVM, -1},
        {"disco/discovm", C_DISCO, C_DISCOVM},
        {"disco-p/disco", C_DISCO_PROCESS, C_DISCO},
        {"dvm-p/discovm", C_DISCOVM_PROCESS, C_DISCOVM},
        {"disco-p/dvm-p", C_DISCO_PROCESS, C_DISCOVM_PROCESS},
        {"traced/dvm", C_DISCOVM_TRACED, C_DISCOVM},
        {"traced/dvm-p", C_DISCOVM_PROCESS_TRACED, C_DISCOVM_PROCESS},
    };
    enum { NUM_RATIOS = sizeof ratio_cols / sizeof ratio_cols[0] };
    printf("\nRatios of medians (time per operation; below 1 means faster than the divisor;\n"
           "disco-p: disco process, dvm-p: discovm process):\n");
    printf("%-*s", LABEL_WIDTH, "");
    for (int r = 0; r < NUM_RATIOS; r++)
        printf("%-*s", r + 1 < NUM_RATIOS ? RATIO_WIDTH : 0, ratio_cols[r].head);
    printf("\n");
    for (int wi = 0; wi < opt.num_worker_counts; wi++) {
        printf("N = %d\n", opt.worker_counts[wi]);
        for (int m = 0; m < M_COUNT; m++) {
            double t[NUM_COLUMNS], fl = NAN;
            for (int c = 0; c < NUM_COLUMNS; c++) t[c] = median_of(results[c][wi][m], rounds_done);
            if (metric_info[m].floor >= 0)
                fl = median_of(floor_results[metric_info[m].floor], rounds_done);
            printf("  %-*s", LABEL_WIDTH - 2, metric_info[m].label);
            for (int r = 0; r < NUM_RATIOS; r++) {
                double den = ratio_cols[r].den < 0 ? fl : t[ratio_cols[r].den];
                char num[32];
                fmt_ratio(num, sizeof num, t[ratio_cols[r].num] / den);
                printf("%-*s", r + 1 < NUM_RATIOS ? RATIO_WIDTH : 0, num);
            }
            printf("\n");
        }
    }

    /* The targets of process sessions, against the threaded session of the same rounds. */
    printf("\nProcess sessions against threaded ones, discovm, same rounds (targets):\n");
    for (int wi = 0; wi < opt.num_worker_counts; wi++) {
        const double *proc = results[C_DISCOVM_PROCESS][wi][M_SYNC0],
                     *thr = results[C_DISCOVM][wi][M_SYNC0];
        double sync_ratio = median_of(proc, rounds_done) / median_of(thr, rounds_done);
        proc = results[C_DISCOVM_PROCESS][wi][M_PIPELINED];
        thr = results[C_DISCOVM][wi][M_PIPELINED];
        /* throughput ratio: threaded time per call over process time per call */
        double pipe_ratio = median_of(thr, rounds_done) / median_of(proc, rounds_done);
        char num[32];
        fmt_ratio(num, sizeof num, sync_ratio);
        printf("  N = %-3d sync worker 0, process/threaded time:         %-8s(at most 1.5x): %s\n",
               opt.worker_counts[wi], num,
               isnan(sync_ratio) ? "no data" : sync_ratio <= 1.5 ? "met" : "NOT met");
        fmt_ratio(num, sizeof num, pipe_ratio);
        printf("  N = %-3d pipelined calls, process/threaded throughput: %-8s(at least 0.5x): %s\n",
               opt.worker_counts[wi], num,
               isnan(pipe_ratio) ? "no data" : pipe_ratio >= 0.5 ? "met" : "NOT met");
        /* the largest copy's round trip against two memcpys of the same rounds */
        int trip = M_COPY(NUM_SIZES - 1, NUM_DIRS - 1);
        double copy_ratio = median_of(floor_results[metric_info[trip].floor], rounds_done) /
                            median_of(results[C_DISCOVM_PROCESS][wi][trip], rounds_done);
        fmt_ratio(num, sizeof num, copy_ratio);
        printf("  N = %-3d %s round trip, process/memcpy throughput: %-8s(at least 0.8x): %s\n",
               opt.worker_counts[wi], copy_names[NUM_SIZES - 1], num,
               isnan(copy_ratio) ? "no data" : copy_ratio >= 0.8 ? "met" : "NOT met");
    }

    /* The targets of a running trace, against the same sessions without one. */
    if (columns[C_DISCOVM_TRACED].impl || columns[C_DISCOVM_PROCESS_TRACED].impl)
        printf("\nA trace running against none, same rounds, time (targets):\n");
    for (int pair = 0; pair < 2; pair++) {
        int traced = pair ? C_DISCOVM_PROCESS_TRACED : C_DISCOVM_TRACED;
        int plain = pair ? C_DISCOVM_PROCESS : C_DISCOVM;
        if (!columns[traced].impl) continue;
        for (int wi = 0; wi < opt.num_worker_counts; wi++) {
            int trip = M_COPY(NUM_SIZES - 1, NUM_DIRS - 1);
            double pipe = median_of(results[traced][wi][M_PIPELINED], rounds_done) /
                          median_of(results[plain][wi][M_PIPELINED], rounds_done);
            double copy = median_of(results[traced][wi][trip], rounds_done) /
                          median_of(results[plain][wi][trip], rounds_done);
            char num[32];
            fmt_ratio(num, sizeof num, pipe);
            printf("  %-16s N = %-3d pipelined calls: %-8s(at most 1.25x): %s\n",
                   columns[traced].name, opt.worker_counts[wi], num,
                   isnan(pipe) ? "no data" : pipe <= 1.25 ? "met" : "NOT met");
            fmt_ratio(num, sizeof num, copy);
            printf("  %-16s N = %-3d %s round trip: %-8s(at most 1.02x): %s\n",
                   columns[traced].name, opt.worker_counts[wi], copy_names[NUM_SIZES - 1], num,
                   isnan(copy) ? "no data" : copy <= 1.02 ? "met" : "NOT met");
        }
    }

    int any_error = 0;
    for (int c = 0; c < NUM_COLUMNS; c++)
        if (columns[c].failed) {
            if (!any_error) printf("\nErrors:\n");
            any_error = 1;
            printf("  %s: %s\n", columns[c].name, columns[c].error);
        }
}

static int write_csv(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "session_bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "column,workers,metric,unit,median,best,rounds\n");
    for (int c = 0; c < NUM_COLUMNS; c++)
        for (int wi = 0; wi < opt.num_worker_counts; wi++)
            for (int m = 0; m < M_COUNT; m++) {
                const double *r = results[c][wi][m];
                if (count_of(r, rounds_done) == 0) continue;
                fprintf(f, "%s,%d,%s,ns,%.1f,%.1f,%d\n", columns[c].key, opt.worker_counts[wi],
                        metric_info[m].key, median_of(r, rounds_done), min_of(r, rounds_done),
                        count_of(r, rounds_done));
            }
    for (int fm = 0; fm < F_COUNT; fm++) {
        const double *r = floor_results[fm];
        if (count_of(r, rounds_done) == 0) continue;
        fprintf(f, "floor,0,%s,ns,%.1f,%.1f,%d\n", floor_keys[fm], median_of(r, rounds_done),
                min_of(r, rounds_done), count_of(r, rounds_done));
    }
    fclose(f);
    return 0;
}

/* ---- options ---------------------------------------------------------------------------------- */

static void usage(FILE *to) {
    fprintf(to,
            "usage: session_bench [options]\n"
            "  --rounds R          rounds (default 11, at most %d)\n"
            "  --workers LIST      worker counts, comma-separated (default 1,2,4)\n"
            "  --backends LIST     columns to measure, of disco, disco_process, discovm,\n"
            "                      discovm_process (default: these four, where built in), and\n"
            "                      discovm_traced and discovm_process_traced (a trace running)\n"
            "  --budget-s S        start no round that would end after S seconds (default 100)\n"
            "  --quiet-wait-s S    before each round, wait up to S seconds for other processes\n"
            "                      to go quiet (default 2; 0 = do not wait)\n"
            "  --metric-ms MS      time cap per metric per round (default 60)\n"
            "  --warm-ms MS        warm-up after a session opens (default 100)\n"
            "  --samples K         sample cap per metric per round (default 3000)\n"
            "  --pipe-calls K      calls per pipelined batch (default 10000)\n"
            "  --csv PATH          also write the results (ns) as CSV\n"
            "  --quick             3 rounds, 20 ms per metric, 30 ms warm-up, no waiting\n"
            "                      (a smoke test)\n",
            MAX_ROUNDS);
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_options(int argc, char **argv) {
    const char *backends = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--quick")) {
            opt.rounds = 3;
            opt.metric_ns = 20 * 1000 * 1000ull;
            opt.warm_ns = 30 * 1000 * 1000ull;
            opt.quiet_wait_s = 0;
            continue;
        }
        if (!v) goto bad;
        i++;
        if (!strcmp(a, "--rounds")) {
            if (parse_int(v, 1, MAX_ROUNDS, &opt.rounds)) goto bad;
        } else if (!strcmp(a, "--workers")) {
            char copy[128];
            snprintf(copy, sizeof copy, "%s", v);
            opt.num_worker_counts = 0;
            for (char *save, *tok = strtok_r(copy, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save)) {
                if (opt.num_worker_counts == MAX_WORKER_COUNTS || parse_int(tok, 1, 256, &n))
                    goto bad;
                opt.worker_counts[opt.num_worker_counts++] = n;
            }
            if (!opt.num_worker_counts) goto bad;
        } else if (!strcmp(a, "--backends")) {
            backends = v;
        } else if (!strcmp(a, "--budget-s")) {
            if (parse_int(v, 1, 86400, &n)) goto bad;
            opt.budget_s = n;
        } else if (!strcmp(a, "--quiet-wait-s")) {
            if (parse_int(v, 0, 3600, &n)) goto bad;
            opt.quiet_wait_s = n;
        } else if (!strcmp(a, "--metric-ms")) {
            if (parse_int(v, 1, 60000, &n)) goto bad;
            opt.metric_ns = (uint64_t)n * 1000000ull;
        } else if (!strcmp(a, "--warm-ms")) {
            if (parse_int(v, 0, 60000, &n)) goto bad;
            opt.warm_ns = (uint64_t)n * 1000000ull;
        } else if (!strcmp(a, "--samples")) {
            if (parse_int(v, 5, 10000000, &opt.samples)) goto bad;
        } else if (!strcmp(a, "--pipe-calls")) {
            if (parse_int(v, 1, 100000000, &opt.pipe_calls)) goto bad;
        } else if (!strcmp(a, "--csv")) {
            opt.csv_path = v;
        } else {
            goto bad;
        }
        continue;
    bad:
        fprintf(stderr, "session_bench: bad option %s%s%s\n", a, v ? " " : "", v ? v : "");
        usage(stderr);
        return -1;
    }
    if (!backends) {
        columns[C_DISCOVM_TRACED].impl = NULL;
        columns[C_DISCOVM_PROCESS_TRACED].impl = NULL;
    } else {
        for (int c = 0; c < NUM_COLUMNS; c++) {
            const char *p = strstr(backends, columns[c].key);
            size_t len = strlen(columns[c].key);
            int selected = 0;
            while (p && !selected) {
                selected = (p == backends || p[-1] == ',') && (p[len] == ',' || p[len] == 0);
                p = strstr(p + 1, columns[c].key);
            }
            if (selected && !columns[c].impl) {
                fprintf(stderr, "session_bench: backend %s was not built in\n", columns[c].key);
                return -1;
            }
            if (!selected) columns[c].impl = NULL;
        }
    }
    return 0;
}

/* ---- main ------------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
#ifdef HAVE_DISCO
    /* A worker process of a Disco process session (disco.c starts them). */
    if (argc > 1 && !strcmp(argv[1], BENCH_DISCO_WORKER_FLAG))
        return bench_disco_worker_main(argc, argv);
#endif
    init_metric_info();
    if (parse_options(argc, argv) != 0) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    samples = malloc(sizeof(double) * (size_t)opt.samples);
    if (!samples) return 1;
    for (int c = 0; c < NUM_COLUMNS; c++)
        for (int wi = 0; wi < MAX_WORKER_COUNTS; wi++)
            for (int m = 0; m < M_COUNT; m++)
                for (int r = 0; r < MAX_ROUNDS; r++) results[c][wi][m][r] = NAN;
    for (int f = 0; f < F_COUNT; f++)
        for (int r = 0; r < MAX_ROUNDS; r++) floor_results[f][r] = NAN;

    fprintf(stderr, "session_bench: %ld CPUs online, up to %d rounds, budget %.0f s\n",
            sysconf(_SC_NPROCESSORS_ONLN), opt.rounds, opt.budget_s);
    uint64_t run_start = bench_now_ns();
    double longest_round_s = 0, load_sum = 0;
    int disturbed_rounds = 0;
    for (int round = 0; round < opt.rounds; round++) {
        double elapsed_s = (double)(bench_now_ns() - run_start) * 1e-9;
        if (round > 0 && elapsed_s + longest_round_s + opt.quiet_wait_s > opt.budget_s) {
            fprintf(stderr, "session_bench: stopping after %d rounds (time budget)\n", round);
            break;
        }
        if (opt.quiet_wait_s > 0) wait_for_quiet(opt.quiet_wait_s);
        uint64_t t0 = bench_now_ns();
        struct load_mark mark = load_mark_now();
        measure_floors(round);
        for (int wi = 0; wi < opt.num_worker_counts; wi++)
            for (int k = 0; k < NUM_COLUMNS; k++) {
                struct column *col = &columns[(k + round) % NUM_COLUMNS];
                if (col->impl && !col->failed) measure_column_isolated(col, wi, round);
            }
        rounds_done = round + 1;
        double round_s = (double)(bench_now_ns() - t0) * 1e-9;
        if (round_s > longest_round_s) longest_round_s = round_s;
        double load = foreign_load_since(mark);
        load_sum += load;
        disturbed_rounds += load >= 0.25;
        fprintf(stderr, "session_bench: round %d/%d done in %.1f s (other processes: %.2f CPUs)\n",
                round + 1, opt.rounds, round_s, load);
    }
    double total_s = (double)(bench_now_ns() - run_start) * 1e-9;
    print_table(rounds_done ? load_sum / rounds_done : 0.0, disturbed_rounds, total_s);
    if (opt.csv_path && write_csv(opt.csv_path) != 0) return 1;
    free(samples);
    for (int c = 0; c < NUM_COLUMNS; c++)
        if (columns[c].failed) return 1;
    return 0;
}
