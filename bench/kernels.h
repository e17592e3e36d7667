/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The kernels of the delta send/receive paper (Ding et al., "delta
 * send-recv", section III): pair, cascade, ring, array reduce, and reduced
 * versions of NAS LU's wavefront sweep, HYCOM's xcsum row reduction and NAS
 * MG's 3-D stencil halo exchange. Each kernel runs in one of four variants
 * of the same computation:
 *
 *   mpi           blocking MPI_Send/MPI_Recv around the computation (ring and
 *                 stencil: MPI_Irecv early, MPI_Isend after, MPI_Wait before
 *                 use, as blocking calls would deadlock there)
 *   part          MPI-4 partitioned: MPI_Pready per partition as the
 *                 computation finishes it, MPI_Parrived before using one
 *   ovl-os        ovl_delta_* with monitor OVL_MONITOR_AUTO: page faults tell ovl
 *                 what was written / is needed
 *   ovl-explicit  ovl_delta_* with monitor OVL_MONITOR_EXPLICIT: ovl_delta_produced
 *                 after each strip, ovl_delta_need before using one
 *
 * Every run is verified byte for byte against results computed locally at
 * set-up (not timed); a mismatch aborts the job. delta.c (ovl-bench delta,
 * delta-sweep) and overview.c drive them.
 */
#ifndef OVL_BENCH_KERNELS_H
#define OVL_BENCH_KERNELS_H

#include "common.h"

enum kvar { KV_MPI, KV_PART, KV_OVL_OS, KV_OVL_EXPLICIT, KV_COUNT };
enum kkind {
    KK_PAIR,
    KK_CASCADE,
    KK_RING,
    KK_REDUCE,
    KK_WAVEFRONT,
    KK_ROWREDUCE,
    KK_STENCIL,
    KK_COUNT
};

const char *kvar_name(enum kvar v);
const char *kkind_name(enum kkind k);
/* -1 when unknown */
int kvar_parse(const char *s);
int kkind_parse(const char *s);
/* 0 for `part` when the MPI library lacks partitioned communication. */
int kvar_available(enum kvar v);
/* Smallest number of ranks the kernel runs on (2; stencil 1 would be pointless). */
int kkind_min_ranks(enum kkind k);

struct kparams {
    size_t bytes;     /* message size (pair, cascade, ring, reduce, wavefront, rowreduce) */
    long work;        /* repetitions of the trigonometric formula per element */
    size_t strip;     /* bytes per strip: ovl_delta_produced/need and MPI_Parrived granularity */
    size_t part_size; /* bytes per partition of the part variant */
    int iters;        /* ring and stencil iterations */
    int rows;         /* wavefront: rows of each rank's block */
    int cols;         /* rowreduce: columns summed per row on each rank */
    int stencil_n;    /* stencil: edge of each rank's cubic block */
    long sleep_us;    /* mpi/part waits: 0 = MPI_Wait/MPI_Recv/MPI_Send (they spin);
                       * > 0: MPI_Test (MPI_Parrived) with sleeps of this many us */
    int ovl_memory;   /* message buffers from ovl_alloc (all variants), else mmap */
};
void kparams_default(struct kparams *p);

struct kernel;

/* Allocate, compute references, create persistent partitioned requests (if
 * KV_PART is in var_mask). Collective over MPI_COMM_WORLD. */
struct kernel *kernel_setup(enum kkind kind, const struct kparams *p, unsigned var_mask);
void kernel_teardown(struct kernel *k);
/* One line describing the kernel's shape ("4 ranks, chain, 400 KB"). */
const char *kernel_describe(const struct kernel *k, char *buf, size_t len);
/* Bytes of one message of the kernel (stencil: one face). */
size_t kernel_msg_bytes(const struct kernel *k);

struct krun {
    double time;            /* seconds from the start barrier to the last rank done */
    double deltas;          /* ovl delta pieces sent, all ranks (ovl variants) */
    double faults;          /* ovl access faults handled, all ranks */
    size_t delta_bytes;     /* largest delta size ovl reported on a send (0: none) */
    size_t delta_bytes_min; /* smallest (0: none) */
    int parts;              /* partitions per message (part) */
    double begin_us;        /* mean wall time of one begin call (post, start, delta begin);
                         * the largest of the ranks' means */
    double begin_slow;      /* share of begin calls over 200 us, all ranks */
};
/* Run the kernel once in variant v, verify, return the measurements (same on
 * every rank). Collective. ovl must be initialised for the ovl variants. */
void kernel_run(struct kernel *k, enum kvar v, struct krun *out);
/* Non-zero: kernel_run prints "[trace rank R] kernel/variant, N B messages"
 * to stderr before each run (--trace), to locate a crash or hang. */
extern int kernel_trace;

/* Seconds for one stage's computation alone on rank 0 (others idle without
 * spinning), and for a plain MPI_Send/MPI_Recv of one message from rank 0 to
 * rank 1 alone. Collective; same value on every rank. */
double kernel_probe_compute(struct kernel *k);
double kernel_probe_transfer(struct kernel *k);

/* The ideal pipeline bound (kernels.c explains the formula) for a message
 * cut into m pieces (m = 1: no pipelining; m <= 0: unbounded pipelining),
 * with per-stage compute C, per-message transfer T and `cores` cores in
 * total. 0 for kernels without a bound (ring, wavefront, rowreduce, stencil). */
double kernel_bound(const struct kernel *k, double C, double T, int cores, double m);
int kernel_has_bound(const struct kernel *k);

/* All variants of var_mask and both probes, interleaved: every rep runs each
 * once, in an order rotated by one per rep (so none always runs first after
 * the probes or last before them). Collective; same results on every rank. */
struct kmeasure {
    int reps;
    struct bench_stat t[KV_COUNT]; /* seconds */
    double C, T;                   /* medians of the probes, seconds */
    double deltas[KV_COUNT];       /* ovl delta pieces sent per rep (all ranks) */
    double faults[KV_COUNT];       /* ovl faults per rep (all ranks) */
    size_t delta_bytes[KV_COUNT];  /* delta size ovl reported (largest) */
    int parts;                     /* partitions per message (part) */
    double begin_us[KV_COUNT];     /* mean of krun.begin_us over the reps */
    double begin_slow[KV_COUNT];   /* mean of krun.begin_slow over the reps */
};
void kernel_measure(struct kernel *k, unsigned var_mask, int reps, int warmup,
                    struct kmeasure *out);

/* Rank 0 prints the kernel's table (time, speedup over mpi, delta size,
 * pieces, faults, bound) and writes its rows to csv (KERNEL_CSV_HEADER
 * columns) if not NULL; other ranks return. In delta.c. */
#define KERNEL_CSV_HEADER                                                                      \
    "bench,kernel,variant,ranks,hosts,cores,bytes,msg_bytes,work,strip,part_size,reps,warmup," \
    "time_ms_med,time_ms_min,time_ms_max,speedup,compute_ms,transfer_ms,delta_bytes,parts,"    \
    "deltas_per_rep,faults_per_rep,bound_ms,bound_inf_ms,bound_frac,mpi_wait_sleep_us,"        \
    "begin_us,begin_slow\n"
void kernel_report(FILE *csv, const char *bench, struct kernel *k, const struct kmeasure *m,
                   unsigned vmask, int hosts, int cores, const struct kparams *p, int warmup);
enum kkind kernel_kind(const struct kernel *k);

/* Cores the job can compute on: the online CPUs of each distinct kernel
 * (boot_id) among the ranks, summed. Collective. */
int bench_cores(void);
/* Wait for every rank without spinning a core (MPI_Ibarrier, MPI_Test and
 * 100 us sleeps): ranks that are done must not steal CPU from ranks that are
 * still computing on an oversubscribed machine. Collective. */
void bench_polite_barrier(void);

#endif /* OVL_BENCH_KERNELS_H */
