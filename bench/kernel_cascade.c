/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The cascade kernel (kernels.h): a chain of all ranks; rank 0 computes an
 * array from seeds, every later rank maps the array of the rank before it
 * through the kernel function and passes it on.
 */
#include "kernel_internal.h"

#include <stdio.h>

static void setup_cascade(struct kernel *k)
{
    const int r = k->rank, p = k->size;
    k->ranks_used = p;
    k->op = r == 0 ? kernel_op_seed : kernel_op_map;
    k->dst = kernel_alloc(k, k->n);
    if (r > 0)
        k->chin[0] = kernel_chan_new(k, kernel_alloc(k, k->n), k->n, r - 1, 1, 0);
    if (r < p - 1)
        k->chout = kernel_chan_new(k, k->dst, k->n, r + 1, 1, 1);
    /* stage s computes x_s = f(x_{s-1}), x_0 from seeds */
    double *prev = kernel_alloc(k, k->n);
    kernel_compute_all(k, kernel_op_seed, 0, prev, NULL, NULL);
    for (int s = 1; s <= r; s++) {
        double *next = kernel_alloc(k, k->n);
        kernel_compute_all(k, kernel_op_map, s, next, prev, NULL);
        if (s == r)
            k->ref_in[0] = prev;
        prev = next;
    }
    k->ref_out = prev;
}

static void describe_cascade(const struct kernel *k, const char *sz, char *buf, size_t len)
{
    snprintf(buf, len, "chain of %d ranks, %s per link", k->size, sz);
}

static void probe_cascade(struct kernel *k, double *d, const double *a, const double *b)
{
    (void)b;
    kernel_compute_all(k, kernel_op_map, 0, d, a, NULL);
}

static int bound_cascade(const struct kernel *k, double C, double T, double *path,
                         double *bottleneck)
{
    (void)bottleneck;
    int p = k->size;
    *path = p * C + (p - 1) * T;
    return p;
}

const struct kernel_ops kernel_cascade_ops = {
    .setup = setup_cascade,
    .describe = describe_cascade,
    .probe = probe_cascade,
    .bound = bound_cascade,
};
