/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The array reduce kernel (kernels.h): a binary tree of all ranks (children
 * 2r+1, 2r+2); each rank adds its children's arrays to its own, in the same
 * loop that computes its own, and sends the sum to its parent.
 */
#include "kernel_internal.h"

#include <stdio.h>

static void op_reduce(struct kernel *k, int r, double *dst, const double *a, const double *b,
                      size_t i0, size_t m)
{
    const long w = k->p.work;
    for (size_t i = i0; i < i0 + m; i++) {
        double v = kernel_kf(kernel_seed(i, r), (double)i, w);
        if (a)
            v += a[i];
        if (b)
            v += b[i];
        dst[i] = v;
    }
}

static double *reduce_ref(struct kernel *k, int r)
{
    double *c[2] = { NULL, NULL };
    for (int j = 0; j < 2; j++)
        if (2 * r + 1 + j < k->size)
            c[j] = reduce_ref(k, 2 * r + 1 + j);
    double *out = kernel_alloc(k, k->n);
    kernel_compute_all(k, op_reduce, r, out, c[0], c[1]);
    if (r == k->rank) {
        k->ref_in[0] = c[0];
        k->ref_in[1] = c[1];
    }
    return out;
}

static void setup_reduce(struct kernel *k)
{
    const int r = k->rank;
    k->ranks_used = k->size;
    k->op = op_reduce;
    k->dst = kernel_alloc(k, k->n);
    for (int j = 0; j < 2; j++)
        if (2 * r + 1 + j < k->size)
            k->chin[j] = kernel_chan_new(k, kernel_alloc(k, k->n), k->n, 2 * r + 1 + j, 1, 0);
    if (r > 0)
        k->chout = kernel_chan_new(k, k->dst, k->n, (r - 1) / 2, 1, 1);
    k->ref_out = reduce_ref(k, r);
}

static void describe_reduce(const struct kernel *k, const char *sz, char *buf, size_t len)
{
    snprintf(buf, len, "binary tree of %d ranks, %s arrays", k->size, sz);
}

static void probe_reduce(struct kernel *k, double *d, const double *a, const double *b)
{
    kernel_compute_all(k, op_reduce, 0, d, a, b);
}

/* The longest root-leaf path; a link into a node with c children carries c
 * messages through one downlink (c*T). */
static int bound_reduce(const struct kernel *k, double C, double T, double *path,
                        double *bottleneck)
{
    int p = k->size;
    *path = 0;
    for (int leaf = 0; leaf < p; leaf++) {
        if (2 * leaf + 1 < p)
            continue;
        double s = C;
        for (int r = leaf; r > 0; r = (r - 1) / 2) {
            int parent = (r - 1) / 2;
            int nch = (2 * parent + 1 < p) + (2 * parent + 2 < p);
            s += nch * T + C;
            if (nch * T > *bottleneck)
                *bottleneck = nch * T;
        }
        if (s > *path)
            *path = s;
    }
    return p;
}

const struct kernel_ops kernel_reduce_ops = {
    .setup = setup_reduce,
    .describe = describe_reduce,
    .probe = probe_reduce,
    .bound = bound_reduce,
};
