/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The wavefront kernel (kernels.h), a reduced NAS LU sweep: rank r holds a
 * block of rows of a global (size*rows) x n grid, swept column by column
 * with the LU-like recurrence u(i,j) = f((north + west) / 2); it needs the
 * south boundary of rank r-1 and sends its own to rank r+1, column by
 * column as they finish.
 */
#include "kernel_internal.h"

#include <stdio.h>

/* k->priv: the rank's block, rows x n, column-major. dst is the south
 * boundary (last row), written as each column ends. */
static void op_wave(struct kernel *k, int r, double *dst, const double *a, const double *b,
                    size_t i0, size_t m)
{
    (void)b;
    const long w = k->p.work;
    const size_t R = (size_t)k->p.rows, N = k->n;
    double *u = k->priv;
    for (size_t j = i0; j < i0 + m; j++) {
        for (size_t i = 0; i < R; i++) {
            double north = i > 0 ? u[j * R + i - 1] : (a ? a[j] : 0.0);
            double west = j > 0 ? u[(j - 1) * R + i] : 0.0;
            size_t g = ((size_t)r * R + i) * N + j;
            u[j * R + i] = kernel_kf(0.5 * (north + west), (double)g, w);
        }
        dst[j] = u[j * R + R - 1];
    }
}

/* Rank k's block needs the south boundary of rank k-1: simulate ranks 0..k. */
static void setup_wavefront(struct kernel *k)
{
    const int r = k->rank, p = k->size;
    k->ranks_used = p;
    k->op = op_wave;
    k->priv = kernel_alloc(k, (size_t)k->p.rows * k->n);
    k->dst = kernel_alloc(k, k->n);
    if (r > 0)
        k->chin[0] = kernel_chan_new(k, kernel_alloc(k, k->n), k->n, r - 1, 1, 0);
    if (r < p - 1)
        k->chout = kernel_chan_new(k, k->dst, k->n, r + 1, 1, 1);
    double *north = NULL;
    for (int s = 0; s <= r; s++) {
        double *south = kernel_alloc(k, k->n);
        kernel_compute_all(k, op_wave, s, south, north, NULL);
        if (s == r)
            k->ref_in[0] = north;
        north = south;
    }
    k->ref_out = north;
}

static void describe_wavefront(const struct kernel *k, const char *sz, char *buf, size_t len)
{
    snprintf(buf, len, "chain of %d ranks, %d x %zu blocks, %s boundary row", k->size, k->p.rows,
             k->n, sz);
}

static void probe_wavefront(struct kernel *k, double *d, const double *a, const double *b)
{
    (void)b;
    kernel_compute_all(k, op_wave, 0, d, a, NULL);
}

const struct kernel_ops kernel_wavefront_ops = {
    .setup = setup_wavefront,
    .describe = describe_wavefront,
    .probe = probe_wavefront,
};
