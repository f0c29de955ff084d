/*
 * Floors: what the session metrics would cost with no runtime at all.
 *
 * - spin ping-pong: the controller stores a sequence number, a partner thread that polls it
 *   stores it back. Nobody sleeps, so this is the cost of moving two cache lines between
 *   CPUs: the floor for any round trip to a worker (sync worker 0, call + sync).
 * - condvar ping-pong: the same over a mutex and condition variables with "signal only if the
 *   other side waits", i.e. a sleeping thread is woken for every message. This is the
 *   wake-up pattern of Disco's queues; it is printed as a reference, not used as a floor.
 * - memcpy: the bandwidth floor; one memcpy for a copy to or from worker 0, two for the round
 *   trip (to worker 0 and back).
 */
#define _GNU_SOURCE
#include "bench.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Time spent before measuring, so that the scheduler has placed both threads. */
#define FLOOR_WARM_NS (20 * 1000 * 1000ull)

/* ---- spin ping-pong ------------------------------------------------------------------------- */

#define PINGPONG_STOP UINT64_MAX

struct spin_pair {
    alignas(64) _Atomic uint64_t ping; /* written by the controller */
    alignas(64) _Atomic uint64_t pong; /* written by the partner */
};

static void *spin_partner(void *arg) {
    struct spin_pair *p = arg;
    uint64_t seen = 0;
    for (;;) {
        unsigned polls = 0;
        uint64_t v;
        while ((v = atomic_load_explicit(&p->ping, memory_order_acquire)) == seen)
            bench_wait_step(&polls);
        if (v == PINGPONG_STOP) return NULL;
        seen = v;
        atomic_store_explicit(&p->pong, v, memory_order_release);
    }
}

static inline void spin_round_trip(struct spin_pair *p, uint64_t seq) {
    unsigned polls = 0;
    atomic_store_explicit(&p->ping, seq, memory_order_release);
    while (atomic_load_explicit(&p->pong, memory_order_acquire) != seq) bench_wait_step(&polls);
}

int floor_spin_pingpong(double *samples, int max_samples, uint64_t budget_ns) {
    struct spin_pair *p = aligned_alloc(64, sizeof *p);
    if (!p) return -1;
    atomic_init(&p->ping, 0);
    atomic_init(&p->pong, 0);
    pthread_t partner;
    if (pthread_create(&partner, NULL, spin_partner, p) != 0) {
        free(p);
        return -1;
    }
    uint64_t seq = 0;
    uint64_t warm_end = bench_now_ns() + FLOOR_WARM_NS;
    while (bench_now_ns() < warm_end) spin_round_trip(p, ++seq);

    int n = 0;
    uint64_t start = bench_now_ns(), t0 = start;
    while (n < max_samples && t0 - start < budget_ns) {
        spin_round_trip(p, ++seq);
        uint64_t t1 = bench_now_ns();
        samples[n++] = (double)(t1 - t0);
        t0 = t1;
    }
    atomic_store_explicit(&p->ping, PINGPONG_STOP, memory_order_release);
    pthread_join(partner, NULL);
    free(p);
    return n;
}

/* ---- condvar ping-pong ---------------------------------------------------------------------- */

/* One direction: a slot, a flag saying the receiver sleeps, and its condition variable. */
struct cv_slot {
    uint64_t value;
    bool has_value;
    bool receiver_waiting;
    pthread_cond_t cv;
};

struct cv_pair {
    pthread_mutex_t mu;
    struct cv_slot to_partner, to_controller;
};

static void cv_send(struct cv_pair *p, struct cv_slot *s, uint64_t v) {
    pthread_mutex_lock(&p->mu);
    s->value = v;
    s->has_value = true;
    bool wake = s->receiver_waiting;
    s->receiver_waiting = false;
    pthread_mutex_unlock(&p->mu);
    if (wake) pthread_cond_signal(&s->cv);
}

static uint64_t cv_recv(struct cv_pair *p, struct cv_slot *s) {
    pthread_mutex_lock(&p->mu);
    while (!s->has_value) {
        s->receiver_waiting = true;
        pthread_cond_wait(&s->cv, &p->mu);
    }
    s->has_value = false;
    s->receiver_waiting = false;
    uint64_t v = s->value;
    pthread_mutex_unlock(&p->mu);
    return v;
}

static void *cv_partner(void *arg) {
    struct cv_pair *p = arg;
    for (;;) {
        uint64_t v = cv_recv(p, &p->to_partner);
        if (v == PINGPONG_STOP) return NULL;
        cv_send(p, &p->to_controller, v);
    }
}

int floor_condvar_pingpong(double *samples, int max_samples, uint64_t budget_ns) {
    struct cv_pair p;
    memset(&p, 0, sizeof p);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.to_partner.cv, NULL);
    pthread_cond_init(&p.to_controller.cv, NULL);
    pthread_t partner;
    int n = -1;
    if (pthread_create(&partner, NULL, cv_partner, &p) != 0) goto out;

    uint64_t seq = 0;
    uint64_t warm_end = bench_now_ns() + FLOOR_WARM_NS;
    while (bench_now_ns() < warm_end) {
        cv_send(&p, &p.to_partner, ++seq);
        cv_recv(&p, &p.to_controller);
    }
    n = 0;
    uint64_t start = bench_now_ns(), t0 = start;
    while (n < max_samples && t0 - start < budget_ns) {
        cv_send(&p, &p.to_partner, ++seq);
        cv_recv(&p, &p.to_controller);
        uint64_t t1 = bench_now_ns();
        samples[n++] = (double)(t1 - t0);
        t0 = t1;
    }
    cv_send(&p, &p.to_partner, PINGPONG_STOP);
    pthread_join(partner, NULL);
out:
    pthread_cond_destroy(&p.to_partner.cv);
    pthread_cond_destroy(&p.to_controller.cv);
    pthread_mutex_destroy(&p.mu);
    return n;
}

/* ---- memcpy --------------------------------------------------------------------------------- */

int floor_memcpy(size_t nbytes, int copies, double *samples, int max_samples, uint64_t budget_ns) {
    unsigned char *src = bench_alloc(nbytes), *mid = bench_alloc(nbytes),
                  *dst = bench_alloc(nbytes);
    int n = -1;
    if (!src || !mid || !dst) goto out;
    for (size_t i = 0; i < nbytes; i++) src[i] = (unsigned char)(i * 7 + 1);
    /* one copy: src -> dst; two: src -> mid -> dst */
    unsigned char *first = copies == 2 ? mid : dst;

    /* One untimed pass warms caches and TLBs as a runtime's first copy would. */
    memcpy(first, src, nbytes);
    if (copies == 2) memcpy(dst, mid, nbytes);
    n = 0;
    uint64_t start = bench_now_ns(), t0 = start;
    while (n < max_samples && (n < 3 || t0 - start < budget_ns)) {
        memcpy(first, src, nbytes);
        if (copies == 2) memcpy(dst, mid, nbytes);
        /* The buffers escape through the barrier, so no copy can be dropped. */
        __asm__ volatile("" : : "r"(mid), "r"(dst) : "memory");
        uint64_t t1 = bench_now_ns();
        samples[n++] = (double)(t1 - t0);
        t0 = t1;
    }
    if (memcmp(src, dst, nbytes) != 0) n = -1;
out:
    free(src);
    free(mid);
    free(dst);
    return n;
}
