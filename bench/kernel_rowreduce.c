/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rowreduce kernel (kernels.h), a reduced HYCOM xcsum: every rank sums
 * `cols` columns per row of its part and adds the row sums of the rank
 * after it, along a chain down to rank 0, in a fixed order (rank p-1
 * first) so the result is reproducible.
 */
#include "kernel_internal.h"

#include <stdio.h>

static void op_rowsum(struct kernel *k, int r, double *dst, const double *a, const double *b,
                      size_t i0, size_t m)
{
    (void)b;
    const long w = k->p.work;
    const size_t cols = (size_t)k->p.cols;
    for (size_t i = i0; i < i0 + m; i++) {
        double s = 0;
        for (size_t c = 0; c < cols; c++)
            s += kernel_kf(kernel_seed(i * cols + c, r), (double)(i * cols + c), w);
        dst[i] = (a ? a[i] : 0.0) + s;
    }
}

static void setup_rowreduce(struct kernel *k)
{
    const int r = k->rank, p = k->size;
    k->ranks_used = p;
    k->op = op_rowsum;
    k->dst = kernel_alloc(k, k->n);
    if (r < p - 1)
        k->chin[0] = kernel_chan_new(k, kernel_alloc(k, k->n), k->n, r + 1, 1, 0);
    if (r > 0)
        k->chout = kernel_chan_new(k, k->dst, k->n, r - 1, 1, 1);
    double *acc = NULL;
    for (int s = p - 1; s >= r; s--) {
        double *next = kernel_alloc(k, k->n);
        kernel_compute_all(k, op_rowsum, s, next, acc, NULL);
        if (s == r)
            k->ref_in[0] = acc;
        acc = next;
    }
    k->ref_out = acc;
}

static void describe_rowreduce(const struct kernel *k, const char *sz, char *buf, size_t len)
{
    snprintf(buf, len, "%zu rows x %d cols per rank, chain of %d ranks, %s row sums", k->n,
             k->p.cols, k->size, sz);
}

static void probe_rowreduce(struct kernel *k, double *d, const double *a, const double *b)
{
    (void)b;
    kernel_compute_all(k, op_rowsum, 0, d, a, NULL);
}

const struct kernel_ops kernel_rowreduce_ops = {
    .setup = setup_rowreduce,
    .describe = describe_rowreduce,
    .probe = probe_rowreduce,
};
