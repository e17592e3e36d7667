/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The stencil kernel (kernels.h), a reduced NAS MG halo exchange: the ranks
 * split a global cube into a 3-D grid of cubic blocks (MPI_Dims_create);
 * every iteration sweeps the block with a seven-point stencil through the
 * kernel function and sends its six faces to its neighbours, each face
 * plane by plane as the sweep writes it, while the halos it needs arrive.
 */
#include "kernel_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* k->priv */
struct stencil {
    int dims[3], coord[3], nb[6];
    size_t sn;       /* edge */
    double **su;     /* u[t], t = 0..iters, n^3 each */
    double **sref_u; /* expected u[t] */
    double **sh0;    /* halos of iteration 0 (local), 6 */
    int *s_recv;     /* channel index [t*6+d] of h[t+1][d], -1 none */
    int *s_send;     /* channel index [t*6+d] of f[t+1][d], -1 none */
    double **sref_h; /* expected h[t+1][d], [t*6+d] */
};

/* Seven-point average through the kernel function (NAS MG psinv-like). */
__attribute__((noinline)) static double stencil_point(double c, double xm, double xp, double ym,
                                                      double yp, double zm, double zp, double g,
                                                      long work)
{
    return kernel_kf((c + xm + xp + ym + yp + zm + zp) * (1.0 / 7.0), g, work);
}

/* Direction d: 0 -x, 1 +x, 2 -y, 3 +y, 4 -z, 5 +z; opposite is d^1. A face
 * buffer of direction d holds the block's boundary plane on that side, in
 * loop order of the remaining two coordinates (x-faces [y][z], y-faces
 * [x][z], z-faces [x][y]), so the sweep below writes each face in order. */
static size_t face_index(int d, size_t x, size_t y, size_t z, size_t n)
{
    switch (d >> 1) {
    case 0:
        return y * n + z;
    case 1:
        return x * n + z;
    default:
        return x * n + y;
    }
}

struct sgrid {
    size_t G[3]; /* global extents */
};

static double sglobal_init(const struct sgrid *g, long gx, long gy, long gz)
{
    if (gx < 0 || gy < 0 || gz < 0 || (size_t)gx >= g->G[0] || (size_t)gy >= g->G[1] ||
        (size_t)gz >= g->G[2])
        return 0.0;
    return kernel_seed(((size_t)gx * g->G[1] + (size_t)gy) * g->G[2] + (size_t)gz, 0);
}

/* One sweep of the local block: u1 = stencil(u0, halos h[6]); writes the
 * faces f[6] (NULL where there is no neighbour) plane by plane, with the
 * channel calls around each x plane. ci/co: channel indices per direction
 * (-1: none; h[d] is then either local or absent). */
static void stencil_sweep(struct kernel *k, const double *u0, double *u1, double *const h[6],
                          double *const f[6], const int ci[6], const int co[6])
{
    const struct stencil *st = k->priv;
    const size_t n = st->sn;
    const long w = k->p.work;
    const size_t G1 = (size_t)st->dims[1] * n, G2 = (size_t)st->dims[2] * n;
    const size_t ox = (size_t)st->coord[0] * n, oy = (size_t)st->coord[1] * n,
                 oz = (size_t)st->coord[2] * n;
    for (size_t x = 0; x < n; x++) {
        /* inputs: the y/z halos of this plane; the x halos before the first / last plane */
        for (int d = 2; d < 6; d++)
            ch_need(k, kernel_chan(k, ci[d]), x * n, n);
        if (x == 0)
            ch_need(k, kernel_chan(k, ci[0]), 0, n * n);
        if (x == n - 1)
            ch_need(k, kernel_chan(k, ci[1]), 0, n * n);
        for (size_t y = 0; y < n; y++) {
            for (size_t z = 0; z < n; z++) {
                size_t i = (x * n + y) * n + z;
                double xm = x > 0 ? u0[i - n * n] : (h[0] ? h[0][face_index(0, x, y, z, n)] : 0.0);
                double xp =
                    x < n - 1 ? u0[i + n * n] : (h[1] ? h[1][face_index(1, x, y, z, n)] : 0.0);
                double ym = y > 0 ? u0[i - n] : (h[2] ? h[2][face_index(2, x, y, z, n)] : 0.0);
                double yp = y < n - 1 ? u0[i + n] : (h[3] ? h[3][face_index(3, x, y, z, n)] : 0.0);
                double zm = z > 0 ? u0[i - 1] : (h[4] ? h[4][face_index(4, x, y, z, n)] : 0.0);
                double zp = z < n - 1 ? u0[i + 1] : (h[5] ? h[5][face_index(5, x, y, z, n)] : 0.0);
                double g = (double)(((ox + x) * G1 + oy + y) * G2 + oz + z);
                double v = stencil_point(u0[i], xm, xp, ym, yp, zm, zp, g, w);
                u1[i] = v;
                if (x == 0 && f[0])
                    f[0][face_index(0, x, y, z, n)] = v;
                if (x == n - 1 && f[1])
                    f[1][face_index(1, x, y, z, n)] = v;
                if (y == 0 && f[2])
                    f[2][face_index(2, x, y, z, n)] = v;
                if (y == n - 1 && f[3])
                    f[3][face_index(3, x, y, z, n)] = v;
                if (z == 0 && f[4])
                    f[4][face_index(4, x, y, z, n)] = v;
                if (z == n - 1 && f[5])
                    f[5][face_index(5, x, y, z, n)] = v;
            }
        }
        for (int d = 2; d < 6; d++)
            ch_produced(k, kernel_chan(k, co[d]), x * n, n);
        if (x == 0)
            ch_produced(k, kernel_chan(k, co[0]), 0, n * n);
        if (x == n - 1)
            ch_produced(k, kernel_chan(k, co[1]), 0, n * n);
    }
}

/* The whole global grid, one step, with the same point function. */
static void stencil_global_step(const struct kernel *k, const struct sgrid *g, const double *a,
                                double *b)
{
    const size_t X = g->G[0], Y = g->G[1], Z = g->G[2];
    for (size_t x = 0; x < X; x++)
        for (size_t y = 0; y < Y; y++)
            for (size_t z = 0; z < Z; z++) {
                size_t i = (x * Y + y) * Z + z;
                double xm = x > 0 ? a[i - Y * Z] : 0.0, xp = x < X - 1 ? a[i + Y * Z] : 0.0;
                double ym = y > 0 ? a[i - Z] : 0.0, yp = y < Y - 1 ? a[i + Z] : 0.0;
                double zm = z > 0 ? a[i - 1] : 0.0, zp = z < Z - 1 ? a[i + 1] : 0.0;
                b[i] = stencil_point(a[i], xm, xp, ym, yp, zm, zp, (double)i, k->p.work);
            }
}

static void setup_stencil(struct kernel *k)
{
    const int p = k->size, r = k->rank, T = k->p.iters;
    const size_t n = (size_t)k->p.stencil_n;
    struct stencil *st = kernel_xcalloc(1, sizeof *st);
    k->priv = st;
    k->ranks_used = p;
    k->nonblocking = 1;
    st->sn = n;
    k->n = n * n; /* one face */
    st->dims[0] = st->dims[1] = st->dims[2] = 0;
    BENCH_MPI(MPI_Dims_create(p, 3, st->dims));
    st->coord[0] = r / (st->dims[1] * st->dims[2]);
    st->coord[1] = (r / st->dims[2]) % st->dims[1];
    st->coord[2] = r % st->dims[2];
    for (int d = 0; d < 6; d++) {
        int c[3] = { st->coord[0], st->coord[1], st->coord[2] };
        c[d >> 1] += (d & 1) ? 1 : -1;
        if (c[d >> 1] < 0 || c[d >> 1] >= st->dims[d >> 1])
            st->nb[d] = -1;
        else
            st->nb[d] = (c[0] * st->dims[1] + c[1]) * st->dims[2] + c[2];
    }
    struct sgrid g = { { (size_t)st->dims[0] * n, (size_t)st->dims[1] * n,
                         (size_t)st->dims[2] * n } };
    const long ox = st->coord[0] * (long)n, oy = st->coord[1] * (long)n,
               oz = st->coord[2] * (long)n;

    st->su = kernel_xcalloc((size_t)T + 1, sizeof(double *));
    st->sref_u = kernel_xcalloc((size_t)T + 1, sizeof(double *));
    st->sh0 = kernel_xcalloc(6, sizeof(double *));
    st->s_recv = kernel_xcalloc((size_t)T * 6, sizeof(int));
    st->s_send = kernel_xcalloc((size_t)T * 6, sizeof(int));
    st->sref_h = kernel_xcalloc((size_t)T * 6, sizeof(double *));
    for (int t = 0; t <= T; t++)
        st->su[t] = kernel_alloc(k, n * n * n);
    for (int t = 0; t < T; t++)
        for (int d = 0; d < 6; d++) {
            int i = t * 6 + d;
            st->s_recv[i] = st->s_send[i] = -1;
            if (st->nb[d] < 0)
                continue;
            /* my face toward d travels in direction d; the neighbour on side d
             * receives it as its halo from side d^1, tag by direction of travel */
            st->s_send[i] =
                kernel_chan_new(k, kernel_alloc(k, n * n), n * n, st->nb[d], 1 + t * 6 + d, 1);
            st->s_recv[i] = kernel_chan_new(k, kernel_alloc(k, n * n), n * n, st->nb[d],
                                            1 + t * 6 + (d ^ 1), 0);
        }
    /* u_0 and the halos of iteration 0 come from the initial global field */
    for (size_t x = 0; x < n; x++)
        for (size_t y = 0; y < n; y++)
            for (size_t z = 0; z < n; z++)
                st->su[0][(x * n + y) * n + z] =
                    sglobal_init(&g, ox + (long)x, oy + (long)y, oz + (long)z);
    for (int d = 0; d < 6; d++) {
        if (st->nb[d] < 0)
            continue;
        st->sh0[d] = kernel_alloc(k, n * n);
        for (size_t a = 0; a < n; a++)
            for (size_t b = 0; b < n; b++) {
                long c[3];
                if ((d >> 1) == 0) {
                    c[0] = (d & 1) ? ox + (long)n : ox - 1;
                    c[1] = oy + (long)a;
                    c[2] = oz + (long)b;
                } else if ((d >> 1) == 1) {
                    c[0] = ox + (long)a;
                    c[1] = (d & 1) ? oy + (long)n : oy - 1;
                    c[2] = oz + (long)b;
                } else {
                    c[0] = ox + (long)a;
                    c[1] = oy + (long)b;
                    c[2] = (d & 1) ? oz + (long)n : oz - 1;
                }
                st->sh0[d][a * n + b] = sglobal_init(&g, c[0], c[1], c[2]);
            }
    }
    /* references: step the global grid T times, cut out the block and halos */
    size_t GN = g.G[0] * g.G[1] * g.G[2];
    double *ga = kernel_xcalloc(GN, sizeof(double)), *gb = kernel_xcalloc(GN, sizeof(double));
    for (size_t x = 0; x < g.G[0]; x++)
        for (size_t y = 0; y < g.G[1]; y++)
            for (size_t z = 0; z < g.G[2]; z++)
                ga[(x * g.G[1] + y) * g.G[2] + z] = sglobal_init(&g, (long)x, (long)y, (long)z);
    st->sref_u[0] = st->su[0];
    for (int t = 1; t <= T; t++) {
        stencil_global_step(k, &g, ga, gb);
        double *tmp = ga;
        ga = gb;
        gb = tmp;
        double *u = kernel_alloc(k, n * n * n);
        for (size_t x = 0; x < n; x++)
            for (size_t y = 0; y < n; y++)
                for (size_t z = 0; z < n; z++)
                    u[(x * n + y) * n + z] =
                        ga[(((size_t)ox + x) * g.G[1] + (size_t)oy + y) * g.G[2] + (size_t)oz + z];
        st->sref_u[t] = u;
        for (int d = 0; d < 6; d++) {
            if (st->nb[d] < 0)
                continue;
            double *h = kernel_alloc(k, n * n);
            for (size_t a = 0; a < n; a++)
                for (size_t b = 0; b < n; b++) {
                    size_t c[3];
                    if ((d >> 1) == 0) {
                        c[0] = (d & 1) ? (size_t)ox + n : (size_t)ox - 1;
                        c[1] = (size_t)oy + a;
                        c[2] = (size_t)oz + b;
                    } else if ((d >> 1) == 1) {
                        c[0] = (size_t)ox + a;
                        c[1] = (d & 1) ? (size_t)oy + n : (size_t)oy - 1;
                        c[2] = (size_t)oz + b;
                    } else {
                        c[0] = (size_t)ox + a;
                        c[1] = (size_t)oy + b;
                        c[2] = (d & 1) ? (size_t)oz + n : (size_t)oz - 1;
                    }
                    h[a * n + b] = ga[(c[0] * g.G[1] + c[1]) * g.G[2] + c[2]];
                }
            st->sref_h[(t - 1) * 6 + d] = h;
        }
    }
    free(ga);
    free(gb);
}

static void run_stencil(struct kernel *k)
{
    const struct stencil *st = k->priv;
    const int T = k->p.iters;
    const int none[6] = { -1, -1, -1, -1, -1, -1 };
    for (int t = 0; t < T; t++) {
        const int *ri = &st->s_recv[t * 6], *so = &st->s_send[t * 6];
        const int *ci = t > 0 ? &st->s_recv[(t - 1) * 6] : none;
        double *h[6], *f[6];
        for (int d = 0; d < 6; d++) {
            h[d] = t == 0 ? st->sh0[d] : (ci[d] >= 0 ? k->ch[ci[d]].buf : NULL);
            f[d] = so[d] >= 0 ? k->ch[so[d]].buf : NULL;
        }
        for (int d = 0; d < 6; d++)
            ch_begin(k, kernel_chan(k, ri[d]));
        for (int d = 0; d < 6; d++)
            ch_begin(k, kernel_chan(k, so[d]));
        stencil_sweep(k, st->su[t], st->su[t + 1], h, f, ci, so);
        for (int d = 0; d < 6; d++)
            ch_end(k, kernel_chan(k, so[d]));
        for (int d = 0; d < 6; d++)
            ch_wait(k, kernel_chan(k, ci[d]));
    }
    for (int d = 0; d < 6; d++)
        ch_wait(k, kernel_chan(k, st->s_recv[(T - 1) * 6 + d]));
    for (int i = 0; i < T * 6; i++)
        ch_wait(k, kernel_chan(k, st->s_send[i]));
}

static void verify_stencil(struct kernel *k)
{
    const struct stencil *st = k->priv;
    const size_t n3 = st->sn * st->sn * st->sn;
    for (int t = 1; t <= k->p.iters; t++) {
        kernel_verify(k, "block", st->su[t], st->sref_u[t], n3);
        for (int d = 0; d < 6; d++)
            if (st->s_recv[(t - 1) * 6 + d] >= 0)
                kernel_verify(k, "halo", k->ch[st->s_recv[(t - 1) * 6 + d]].buf,
                              st->sref_h[(t - 1) * 6 + d], k->n);
    }
}

static void poison_stencil(struct kernel *k)
{
    const struct stencil *st = k->priv;
    for (int t = 1; t <= k->p.iters; t++)
        memset(st->su[t], KERNEL_POISON, st->sn * st->sn * st->sn * sizeof(double));
}

static void teardown_stencil(struct kernel *k)
{
    struct stencil *st = k->priv;
    if (!st)
        return;
    free(st->su);
    free(st->sref_u);
    free(st->sh0);
    free(st->s_recv);
    free(st->s_send);
    free(st->sref_h);
    free(st);
}

static void describe_stencil(const struct kernel *k, const char *sz, char *buf, size_t len)
{
    const struct stencil *st = k->priv;
    snprintf(buf, len, "%dx%dx%d ranks, %zu^3 blocks, %d iterations, %s faces", st->dims[0],
             st->dims[1], st->dims[2], st->sn, k->p.iters, sz);
}

/* One sweep of the block, without channels (as under `mpi`, whose need and
 * produced calls do nothing here). */
static void probe_stencil(struct kernel *k, double *d, const double *a, const double *b)
{
    (void)d;
    (void)a;
    (void)b;
    const struct stencil *st = k->priv;
    double *u = kernel_xcalloc(st->sn * st->sn * st->sn, sizeof(double));
    double *h[6] = { 0 }, *f[6] = { 0 };
    const int none[6] = { -1, -1, -1, -1, -1, -1 };
    enum kvar saved = k->v;
    k->v = KV_MPI;
    stencil_sweep(k, st->su[0], u, h, f, none, none);
    k->v = saved;
    free(u);
}

const struct kernel_ops kernel_stencil_ops = {
    .setup = setup_stencil,
    .run = run_stencil,
    .verify = verify_stencil,
    .poison = poison_stencil,
    .teardown = teardown_stencil,
    .describe = describe_stencil,
    .probe = probe_stencil,
};
