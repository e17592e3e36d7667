/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The paper's exchange (Strumpen 1995, section 5): two ranks simultaneously
 * send each other one message of equal payload, by one of several
 * mechanisms (variants), while daxpy runs or not. latency_hiding.c measures
 * it the paper's way; overview.c reuses it for its summary tables.
 */
#ifndef OVL_BENCH_EXCHANGE_H
#define OVL_BENCH_EXCHANGE_H

#include "common.h"

enum xchg_kind {
    XK_OVL,              /* ovl_isend/ovl_irecv + ovl_continue, progress thread */
    XK_OVL_MARSHAL,      /* ovl_isend_stream/ovl_irecv_stream, one double at a time */
    XK_MPI_POLL,         /* MPI_Isend/MPI_Irecv, MPI_Test every k daxpys */
    XK_MPI_POLL_MARSHAL, /* same, packing/unpacking one double at a time around it */
    XK_TCP_THREAD        /* reference, not MPI: blocking TCP send/recv in two helper
                          * threads, the least CPU any mechanism can take on this kernel */
};

struct xchg_variant {
    char name[32];
    enum xchg_kind kind;
    long k; /* MPI_Test period in daxpys (mpi-poll kinds) */
};

enum { XT_SEND = 0, XT_RECV = 1 };

/* Per-payload results of the latency-hiding measurement (all reps kept). */
struct lh_result {
    size_t payload;
    int reps;
    struct bench_stat transfer_ms;  /* exchange alone */
    struct bench_stat dedicated;    /* daxpys in transfer_ms (median) of dedicated CPU */
    struct bench_stat ovl_daxpy[2]; /* daxpys overlapped, loop stopped by send / recv */
    struct bench_stat comm_ms[2];   /* communication time in those overlapped runs */
    struct bench_stat loop_ms[2];   /* length of the overlapped daxpy loop */
    double util[2];                 /* ovl_daxpy.med / dedicated.med (the paper's ratio) */
    double cpu_share[2];            /* daxpy rate in the loop / dedicated rate */
    double wakeups[2];              /* progress-thread wake-ups per overlapped rep (rank 0) */
    double transfer_wakeups;        /* the same per rep of the exchange alone */
    double oncpu[2];                /* median share of the loop's wall time the main thread
                                     * was on a CPU (CLOCK_THREAD_CPUTIME_ID) */
    struct bench_stat post_us;      /* posting both messages (and their continuations):
                                     * mean over ranks, over the overlapped reps */
};

/* Payload buffers for one size; both ranks call it. */
void xchg_setup(size_t payload);
void xchg_teardown(void);

/* Close what the tcp-thread variant opened (its socket, its helper
 * threads); both ranks call it once at the end. */
void xchg_shutdown(void);

/* Measure one variant at the current payload the paper's way. */
void lh_measure(const struct xchg_variant *v, int reps, int warmup, struct lh_result *out);

/* Seconds for an exchange alone (median over reps; same value on both ranks). */
double xchg_transfer_time(const struct xchg_variant *v, int reps, int warmup);

/* Time (max over ranks, seconds) of one exchange overlapped with exactly
 * @p work daxpys; work is done with no exchange when v is NULL, and after
 * the exchange (blocking) when @p blocking is set. */
double xchg_fixed_work(const struct xchg_variant *v, long work, int blocking);

/* Daxpys (with a clock read each) that fit in @p seconds: median over
 * @p reps runs on both ranks at once, the same value on both ranks. */
long xchg_dedicated(double seconds, int reps);

/* Nanoseconds per daxpy + clock read, measured for ~50 ms (both ranks). */
double xchg_daxpy_ns(void);

#endif /* OVL_BENCH_EXCHANGE_H */
