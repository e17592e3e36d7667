/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The pair kernel (kernels.h): rank 0 computes an array from seeds and sends
 * it to rank 1, which maps it through the kernel function. Two stages, one
 * link; the other ranks idle.
 */
#include "kernel_internal.h"

#include <stdio.h>

static void setup_pair(struct kernel *k)
{
    k->ranks_used = 2;
    if (k->rank == 0) {
        double *x = kernel_alloc(k, k->n);
        k->op = kernel_op_seed;
        k->chout = kernel_chan_new(k, x, k->n, 1, 1, 1);
        k->dst = x;
        k->ref_out = kernel_alloc(k, k->n);
        kernel_compute_all(k, kernel_op_seed, 0, k->ref_out, NULL, NULL);
    } else if (k->rank == 1) {
        double *x = kernel_alloc(k, k->n);
        k->op = kernel_op_map;
        k->chin[0] = kernel_chan_new(k, x, k->n, 0, 1, 0);
        k->dst = kernel_alloc(k, k->n);
        k->ref_in[0] = kernel_alloc(k, k->n);
        k->ref_out = kernel_alloc(k, k->n);
        kernel_compute_all(k, kernel_op_seed, 0, k->ref_in[0], NULL, NULL);
        kernel_compute_all(k, kernel_op_map, 1, k->ref_out, k->ref_in[0], NULL);
    }
}

static void describe_pair(const struct kernel *k, const char *sz, char *buf, size_t len)
{
    (void)k;
    snprintf(buf, len, "rank 0 -> rank 1, %s", sz);
}

static void probe_pair(struct kernel *k, double *d, const double *a, const double *b)
{
    (void)b;
    kernel_compute_all(k, kernel_op_map, 0, d, a, NULL);
}

static int bound_pair(const struct kernel *k, double C, double T, double *path, double *bottleneck)
{
    (void)k;
    (void)bottleneck;
    *path = 2 * C + T;
    return 2;
}

const struct kernel_ops kernel_pair_ops = {
    .setup = setup_pair,
    .describe = describe_pair,
    .probe = probe_pair,
    .bound = bound_pair,
};
