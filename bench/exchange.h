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
    XK_MPI_WAIT,         /* MPI_Isend/MPI_Irecv, compute, MPI_Wait: no MPI call in the loop */
    XK_MPI_ASYNC,        /* the same code with MPICH's asynchronous progress thread on
                          * (MPIR_CVAR_ASYNC_PROGRESS=1): a process of its own */
    XK_TCP_THREAD        /* not MPI, not a bound: blocking TCP send/recv in two helper
                          * threads, woken by the kernel, nothing polls */
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
    int fixed;                      /* xchg_fixed_kind(): a fixed amount of work (the
                                     * dedicated count), then MPI_Wait; util is then
                                     * 2 - comm_ms / transfer_ms (see lh_fixed) */
};

/* The useful-CPU bound of one payload: what the exchange alone costs the
 * ranks' cores when nothing polls (xchg_bound). */
struct xchg_bound {
    double transfer_ms; /* MPI exchange alone, MPI_Wait (median over reps) */
    double core_ms;     /* busy CPU time per exchange on each rank's cores, nothing
                         * polling (mean over ranks; per core of a rank's CPU set) */
    double share;       /* core_ms / transfer_ms: share of a core the transfer takes */
    double bound;       /* 1 - share, at least 0: useful CPU cannot exceed it */
    double err;         /* +- on share and bound from /proc/stat's resolution */
    double background;  /* share of a core busy with no message in flight, both
                         * ranks polling the same way (taken off share) */
    double window_s;    /* length of the measured window */
    long exchanges;     /* exchanges in it */
    long poll_us;       /* MPI_Testall period of the sleeping waits */
    int ncpu;           /* CPUs in rank 0's set */
};

/* Payload buffers for one size; both ranks call it. */
void xchg_setup(size_t payload);
void xchg_teardown(void);

/* Close what the tcp-thread variant opened (its socket, its helper
 * threads); both ranks call it once at the end. */
void xchg_shutdown(void);

/* 1 for the variants that compute a fixed amount and then wait (mpi-wait,
 * mpi-async): nothing tells them of a completion while they compute. */
int xchg_fixed_kind(enum xchg_kind k);

/* Check the rule of the mpi-async variant for @p cmd: MPICH with its
 * asynchronous progress thread on, MPI_THREAD_MULTIPLE, and no other variant
 * in the process (@p others: how many other variants were asked for).
 * Exits with a usage error naming MPIR_CVAR_ASYNC_PROGRESS otherwise. When
 * mpi-async is not asked for (@p want_async 0) but the thread is on, warns
 * that it shares the cores with every variant. Returns 1 if the thread is on. */
int xchg_check_async(const char *cmd, int want_async, int others);

/* Measure one variant at the current payload the paper's way (fixed-work
 * variants: see struct lh_result.fixed). */
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

/* Daxpys a dedicated CPU does in @p seconds from the rate measured before
 * MPI_Init (bench_daxpy_ns_clean; mean over ranks): the dedicated count of a
 * process where MPICH's progress thread runs. 0 if that rate is unknown. */
double xchg_dedicated_clean(double seconds);

/* The background of the bound (collective): the share of each rank's cores
 * busy over @p secs seconds while both ranks poll an empty receive every
 * @p poll_us, as xchg_bound's waits do (mean over ranks), and its resolution.
 * Returns 0, or -1 if /proc/stat is unreadable. */
int xchg_bound_background(double secs, long poll_us, double *share, double *err);

/* The useful-CPU bound at the current payload (collective): the exchange
 * alone with MPI_Wait (@p reps after @p warmup), then back-to-back exchanges
 * for about @p secs seconds in which both ranks sleep @p poll_us between
 * MPI_Testall calls, while each reads from /proc/stat how busy the CPUs it may
 * run on were, less the background @p bg (+- @p bg_err). Fills @p out;
 * returns 0, or -1 if /proc/stat is unreadable. */
int xchg_bound(int reps, int warmup, double secs, long poll_us, double bg, double bg_err,
               struct xchg_bound *out);

#endif /* OVL_BENCH_EXCHANGE_H */
