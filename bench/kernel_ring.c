/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ring kernel (kernels.h): iteration t computes out_t = f(in_t) (in_0
 * from seeds), sends it right and receives in_{t+1} from the left; in_{t+1}
 * is posted before iteration t computes. out_t(r) = f^{t+1}(seed of rank
 * r-t).
 */
#include "kernel_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* k->priv */
struct ring {
    int *in, *out; /* channel indices per iteration (-1 none) */
    double **dst, **ref_in, **ref_out;
};

static void setup_ring(struct kernel *k)
{
    const int r = k->rank, p = k->size, T = k->p.iters;
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    struct ring *rg = kernel_xcalloc(1, sizeof *rg);
    k->priv = rg;
    k->ranks_used = p;
    k->nonblocking = 1;
    rg->in = kernel_xcalloc((size_t)T + 1, sizeof(int));
    rg->out = kernel_xcalloc((size_t)T, sizeof(int));
    rg->dst = kernel_xcalloc((size_t)T, sizeof(double *));
    rg->ref_in = kernel_xcalloc((size_t)T + 1, sizeof(double *));
    rg->ref_out = kernel_xcalloc((size_t)T, sizeof(double *));
    rg->in[0] = -1;
    for (int t = 0; t < T; t++) {
        rg->dst[t] = kernel_alloc(k, k->n);
        rg->out[t] = kernel_chan_new(k, rg->dst[t], k->n, right, 1 + t, 1);
        rg->in[t + 1] = kernel_chan_new(k, kernel_alloc(k, k->n), k->n, left, 1 + t, 0);
    }
    /* references: kernel_op_seed already applies f once, so in_t (t >= 1)
     * is kernel_op_seed of rank r-t followed by t-1 maps; out_0 is
     * kernel_op_seed of rank r */
    for (int t = 1; t <= T; t++) {
        int src = ((r - t) % p + p) % p;
        double *x = kernel_alloc(k, k->n);
        kernel_compute_all(k, kernel_op_seed, src, x, NULL, NULL);
        for (int s = 1; s < t; s++)
            kernel_compute_all(k, kernel_op_map, 0, x, x, NULL);
        rg->ref_in[t] = x;
    }
    for (int t = 0; t < T; t++) {
        rg->ref_out[t] = kernel_alloc(k, k->n);
        if (t == 0)
            kernel_compute_all(k, kernel_op_seed, r, rg->ref_out[t], NULL, NULL);
        else
            kernel_compute_all(k, kernel_op_map, 0, rg->ref_out[t], rg->ref_in[t], NULL);
    }
}

static void run_ring(struct kernel *k)
{
    const struct ring *rg = k->priv;
    const int T = k->p.iters;
    const size_t strip = kernel_strip_elems(k);
    for (int t = 0; t < T; t++) {
        struct chan *in = kernel_chan(k, rg->in[t]), *next = kernel_chan(k, rg->in[t + 1]);
        struct chan *out = kernel_chan(k, rg->out[t]);
        ch_begin(k, next);
        ch_begin(k, out);
        for (size_t i0 = 0; i0 < k->n; i0 += strip) {
            size_t m = k->n - i0 < strip ? k->n - i0 : strip;
            ch_need(k, in, i0, m);
            if (in)
                kernel_op_map(k, 0, out->buf, in->buf, NULL, i0, m);
            else
                kernel_op_seed(k, k->rank, out->buf, NULL, NULL, i0, m);
            ch_produced(k, out, i0, m);
        }
        ch_end(k, out);
        ch_wait(k, in);
    }
    ch_wait(k, kernel_chan(k, rg->in[T]));
    for (int t = 0; t < T; t++)
        ch_wait(k, kernel_chan(k, rg->out[t]));
}

static void verify_ring(struct kernel *k)
{
    const struct ring *rg = k->priv;
    for (int t = 1; t <= k->p.iters; t++)
        kernel_verify(k, "received array", k->ch[rg->in[t]].buf, rg->ref_in[t], k->n);
    for (int t = 0; t < k->p.iters; t++)
        kernel_verify(k, "computed array", rg->dst[t], rg->ref_out[t], k->n);
}

static void teardown_ring(struct kernel *k)
{
    struct ring *rg = k->priv;
    if (!rg)
        return;
    free(rg->in);
    free(rg->out);
    free(rg->dst);
    free(rg->ref_in);
    free(rg->ref_out);
    free(rg);
}

static void describe_ring(const struct kernel *k, const char *sz, char *buf, size_t len)
{
    snprintf(buf, len, "ring of %d ranks, %d iterations, %s per link", k->size, k->p.iters, sz);
}

static void probe_ring(struct kernel *k, double *d, const double *a, const double *b)
{
    (void)b;
    kernel_compute_all(k, kernel_op_map, 0, d, a, NULL);
}

const struct kernel_ops kernel_ring_ops = {
    .setup = setup_ring,
    .run = run_ring,
    .verify = verify_ring,
    .teardown = teardown_ring,
    .describe = describe_ring,
    .probe = probe_ring,
};
