/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the kernels (kernel_<name>.c, one file each) share with the framework
 * that sets them up, runs them in the four variants and measures them
 * (kernels.c): the kernel's state, the channels, the per-strip computation
 * and a small ops table each kernel fills.
 *
 * A kernel is written once, against "channels": one message of one rep,
 * sent or received. The computation calls, per strip of the message,
 *   ch_need(in, i0, m)       before it reads elements [i0, i0+m) of an input
 *   ch_produced(out, i0, m)  after it wrote elements [i0, i0+m) of an output
 * between ch_begin (before the computation) and ch_end/ch_wait (after it).
 * A "stage" kernel (pair, cascade, reduce, wavefront, rowreduce) only says
 * which channels are its inputs and output and which function computes a
 * strip; kernel_stage_run does the rest.
 */
#ifndef OVL_BENCH_KERNEL_INTERNAL_H
#define OVL_BENCH_KERNEL_INTERNAL_H

#include "kernels.h"

struct alloc {
    void *p;
    size_t len;
};

struct chan {
    double *buf;
    size_t n; /* elements */
    int peer, tag, send;
    /* mpi */
    MPI_Request mreq;
    int mdone;
    /* ovl */
    ovl_request_t oreq;
    /* part */
    MPI_Request preq;
    int nparts;
    size_t pelems;  /* elements per partition */
    size_t *pcount; /* send: elements produced per partition */
    char *parrived; /* recv: partition known to have arrived */
};

/* One strip [i0, i0+m) of a stage's output dst, as rank r computes it, from
 * inputs a and b (either may be NULL). */
typedef void (*kernel_op_fn)(struct kernel *k, int r, double *dst, const double *a, const double *b,
                             size_t i0, size_t m);

/* What differs from kernel to kernel. NULL entries take the stage
 * behaviour (run, verify) or do nothing (poison, teardown). */
struct kernel_ops {
    /* Allocate buffers and channels, compute the references (not timed). */
    void (*setup)(struct kernel *k);
    /* One run on a rank that takes part. NULL: kernel_stage_run. */
    void (*run)(struct kernel *k);
    /* Check a run's results. NULL: the stage's inputs and output. */
    void (*verify)(struct kernel *k);
    /* Poison what a run writes besides the channels and k->dst. */
    void (*poison)(struct kernel *k);
    /* Free k->priv. */
    void (*teardown)(struct kernel *k);
    /* One line describing the shape; sz is the message size, formatted. */
    void (*describe)(const struct kernel *k, const char *sz, char *buf, size_t len);
    /* One stage's computation for the compute probe, into the scratch d,
     * from scratch inputs a and b (k->n elements each). */
    void (*probe)(struct kernel *k, double *d, const double *a, const double *b);
    /* kernel_bound's stages (returned), path and bottleneck (which comes in
     * as max(C, T)). NULL: the kernel has no bound. */
    int (*bound)(const struct kernel *k, double C, double T, double *path, double *bottleneck);
};

extern const struct kernel_ops kernel_pair_ops, kernel_cascade_ops, kernel_ring_ops,
    kernel_reduce_ops, kernel_wavefront_ops, kernel_rowreduce_ops, kernel_stencil_ops;

struct kernel {
    /* begin calls of the current run (ch_begin): count, seconds, over 200 us */
    long begin_n, begin_slow;
    double begin_s;
    enum kkind kind;
    const struct kernel_ops *ops;
    struct kparams p;
    unsigned var_mask;
    int rank, size;
    size_t n; /* elements per message */
    int nonblocking;
    int ranks_used; /* ranks that take part (pair: 2) */

    struct alloc *allocs;
    int nallocs;
    struct chan *ch;
    int nch, capch;

    /* run state */
    enum kvar v;
    size_t delta_seen, delta_seen_min; /* largest / smallest ovl_delta_size of a run's sends */

    /* stage kernels (pair, cascade, reduce, wavefront, rowreduce) */
    int chin[2], chout; /* indices into ch, -1 if none */
    kernel_op_fn op;
    double *dst;       /* output (channel buffer or local) */
    double *ref_in[2]; /* expected contents of the inputs */
    double *ref_out;   /* expected output */

    /* the kernel's own state (ring, wavefront, stencil) */
    void *priv;
};

/* ---- the computation (kernels.c) ---- */

/* The paper's per-element work, sin(x)*sin(i) + cos(i)*cos(x), applied
 * `work` times in a chain so it cannot be hoisted. One copy of the
 * arithmetic for the timed loops and the references alike. */
double kernel_kf(double x, double i, long work);
/* The initial value of element i on rank r. */
static inline double kernel_seed(size_t i, int r)
{
    return 0.001 * (double)((i * 7u + (size_t)r * 131u) % 1000u);
}
/* x = f(seed): the first stage of pair, cascade and ring. */
void kernel_op_seed(struct kernel *k, int r, double *dst, const double *a, const double *b,
                    size_t i0, size_t m);
/* x = f(a): the later stages of pair, cascade and ring. */
void kernel_op_map(struct kernel *k, int r, double *dst, const double *a, const double *b,
                   size_t i0, size_t m);
/* The whole output of op at once (references, probes). */
void kernel_compute_all(struct kernel *k, kernel_op_fn op, int r, double *dst, const double *a,
                        const double *b);
/* The strip size of the computation, in elements (at least 1). */
size_t kernel_strip_elems(const struct kernel *k);

/* ---- buffers and channels (kernels.c) ---- */

/* n doubles, page-aligned and padded to whole pages (the paper's "array
 * padding", so a page fault on one is never about other data); freed by
 * kernel_teardown. */
void *kernel_alloc(struct kernel *k, size_t n);
/* calloc that fails the job when out of memory */
void *kernel_xcalloc(size_t n, size_t sz);
/* A channel of n elements at buf to/from peer; its index in k->ch. */
int kernel_chan_new(struct kernel *k, double *buf, size_t n, int peer, int tag, int send);
/* The channel of index i, NULL for -1. */
struct chan *kernel_chan(struct kernel *k, int i);

void ch_begin(struct kernel *k, struct chan *c);
void ch_produced(struct kernel *k, struct chan *c, size_t i0, size_t m);
void ch_need(struct kernel *k, struct chan *c, size_t i0, size_t m);
void ch_end(struct kernel *k, struct chan *c);
void ch_wait(struct kernel *k, struct chan *c);

/* Fail the job if got differs from want (n elements) anywhere. */
void kernel_verify(const struct kernel *k, const char *what, const double *got, const double *want,
                   size_t n);

#define KERNEL_POISON 0xff /* a byte that makes every double a NaN */

#endif /* OVL_BENCH_KERNEL_INTERNAL_H */
