/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The delta send/receive kernels (kernels.h) and their four communication
 * variants.
 *
 * A kernel is written once, against "channels": one message of one rep,
 * sent or received. The computation calls, per strip of the message,
 *   ch_need(in, i0, m)       before it reads elements [i0, i0+m) of an input
 *   ch_produced(out, i0, m)  after it wrote elements [i0, i0+m) of an output
 * between ch_begin (before the computation) and ch_end/ch_wait (after it).
 * What these do depends on the variant: nothing but a blocking MPI call at
 * begin/end for `mpi`, MPI_Pready/MPI_Parrived for `part`, ovl_delta_* for
 * the ovl variants (ovl-os ignores the strip calls: faults do the work).
 * So every variant computes with exactly the same loops and arithmetic, and
 * the results must be bit-identical to the references computed at set-up.
 *
 * Message buffers are page-aligned and padded to whole pages (the paper's
 * "array padding"), so a page fault on one is never about other data.
 */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(OVL_HAVE_MPI_PARTITIONED) && defined(MPI_VERSION) && MPI_VERSION >= 4
#define BENCH_HAVE_PART 1
#else
#define BENCH_HAVE_PART 0
#endif

static const char *const var_names[KV_COUNT] = { "mpi", "part", "ovl-os", "ovl-explicit" };
static const char *const kind_names[KK_COUNT] = { "pair",      "cascade",   "ring",   "reduce",
                                                  "wavefront", "rowreduce", "stencil" };

const char *kvar_name(enum kvar v)
{
    return (unsigned)v < KV_COUNT ? var_names[v] : "?";
}

const char *kkind_name(enum kkind k)
{
    return (unsigned)k < KK_COUNT ? kind_names[k] : "?";
}

int kvar_parse(const char *s)
{
    for (int i = 0; i < KV_COUNT; i++)
        if (!strcmp(s, var_names[i]))
            return i;
    return -1;
}

int kkind_parse(const char *s)
{
    for (int i = 0; i < KK_COUNT; i++)
        if (!strcmp(s, kind_names[i]))
            return i;
    return -1;
}

int kvar_available(enum kvar v)
{
    return v != KV_PART || BENCH_HAVE_PART;
}

int kkind_min_ranks(enum kkind k)
{
    (void)k;
    return 2;
}

void kparams_default(struct kparams *p)
{
    p->bytes = 400 * 1024;
    p->work = 2;
    p->strip = 4096;
    p->part_size = 16 * 1024;
    p->iters = 4;
    p->rows = 4;
    p->cols = 2;
    p->stencil_n = 48;
    p->sleep_us = 0;
    p->ovl_memory = 0;
}

/* ---- the computation -------------------------------------------------------------- */

/* The paper's per-element work, sin(x)*sin(i) + cos(i)*cos(x), applied `work`
 * times in a chain so it cannot be hoisted. noinline: one copy of the
 * arithmetic for the timed loops and the references alike. */
__attribute__((noinline)) static double kf(double x, double i, long work)
{
    for (long w = 0; w < work; w++)
        x = sin(x) * sin(i) + cos(i) * cos(x);
    return x;
}

static double seed(size_t i, int r)
{
    return 0.001 * (double)((i * 7u + (size_t)r * 131u) % 1000u);
}

/* ---- buffers -------------------------------------------------------------------- */

struct alloc {
    void *p;
    size_t len;
};

/* ---- channels ---------------------------------------------------------------------- */

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

enum op { OP_SEED, OP_MAP, OP_REDUCE, OP_ROWSUM, OP_WAVE };

struct kernel {
    /* begin calls of the current run (ch_begin): count, seconds, over 200 us */
    long begin_n, begin_slow;
    double begin_s;
    enum kkind kind;
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
    int op;
    double *dst;       /* output (channel buffer or local) */
    double *ref_in[2]; /* expected contents of the inputs */
    double *ref_out;   /* expected output */

    /* wavefront */
    double *block; /* rows x n, column-major */

    /* ring */
    int *ring_in, *ring_out; /* channel indices per iteration (-1 none) */
    double **ring_dst, **ring_ref_in, **ring_ref_out;

    /* stencil */
    int dims[3], coord[3], nb[6];
    size_t sn;       /* edge */
    double **su;     /* u[t], t = 0..iters, n^3 each */
    double **sref_u; /* expected u[t] */
    double **sh0;    /* halos of iteration 0 (local), 6 */
    int *s_recv;     /* channel index [t*6+d] of h[t+1][d], -1 none */
    int *s_send;     /* channel index [t*6+d] of f[t+1][d], -1 none */
    double **sref_h; /* expected h[t+1][d], [t*6+d] */
};

static void *kalloc(struct kernel *k, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (n * sizeof(double) + page - 1) / page * page;
    if (len == 0)
        len = page;
    void *p = MAP_FAILED;
    if (k->p.ovl_memory)
        BENCH_OVL(ovl_alloc(len, &p));
    else
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        bench_fail("kernels: cannot map %zu bytes", len);
    struct alloc *a = realloc(k->allocs, (size_t)(k->nallocs + 1) * sizeof *a);
    if (!a)
        bench_fail("out of memory");
    k->allocs = a;
    k->allocs[k->nallocs].p = p;
    k->allocs[k->nallocs].len = len;
    k->nallocs++;
    return p;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p)
        bench_fail("out of memory");
    return p;
}

static int chan_new(struct kernel *k, double *buf, size_t n, int peer, int tag, int send)
{
    if (k->nch == k->capch) {
        k->capch = k->capch ? 2 * k->capch : 16;
        struct chan *c = realloc(k->ch, (size_t)k->capch * sizeof *c);
        if (!c)
            bench_fail("out of memory");
        k->ch = c;
    }
    struct chan *c = &k->ch[k->nch];
    memset(c, 0, sizeof *c);
    c->buf = buf;
    c->n = n;
    c->peer = peer;
    c->tag = tag;
    c->send = send;
    c->mreq = MPI_REQUEST_NULL;
    c->preq = MPI_REQUEST_NULL;
    c->oreq = OVL_REQUEST_NULL;
    return k->nch++;
}

static struct chan *CH(struct kernel *k, int i)
{
    return i >= 0 ? &k->ch[i] : NULL;
}

/* Partitions: as close to part_size as divides the message evenly. */
__attribute__((unused)) /* only with MPI-4 partitioned communication */
static int
choose_parts(size_t n, size_t part_elems)
{
    size_t p = part_elems ? n / part_elems : 1;
    if (p < 1)
        p = 1;
    if (p > 4096)
        p = 4096;
    while (p > 1 && n % p)
        p--;
    return (int)p;
}

static void part_create(struct kernel *k)
{
#if BENCH_HAVE_PART
    for (int i = 0; i < k->nch; i++) {
        struct chan *c = &k->ch[i];
        c->nparts = choose_parts(c->n, k->p.part_size / sizeof(double));
        c->pelems = c->n / (size_t)c->nparts;
        c->pcount = xcalloc((size_t)c->nparts, sizeof *c->pcount);
        c->parrived = xcalloc((size_t)c->nparts, 1);
        if (c->send)
            BENCH_MPI(MPI_Psend_init(c->buf, c->nparts, (MPI_Count)c->pelems, MPI_DOUBLE, c->peer,
                                     c->tag, MPI_COMM_WORLD, MPI_INFO_NULL, &c->preq));
        else
            BENCH_MPI(MPI_Precv_init(c->buf, c->nparts, (MPI_Count)c->pelems, MPI_DOUBLE, c->peer,
                                     c->tag, MPI_COMM_WORLD, MPI_INFO_NULL, &c->preq));
    }
#else
    (void)k;
#endif
}

static void ovl_check(const struct chan *c, const ovl_status_t *st, const char *what)
{
    if (st->error != OVL_SUCCESS)
        bench_fail("%s %s (peer %d, tag %d) completed with %s", what, c->send ? "send" : "receive",
                   c->peer, c->tag, ovl_strerror(st->error));
    if (!c->send && st->bytes != c->n * sizeof(double))
        bench_fail("%s receive (peer %d, tag %d): status says %zu bytes, expected %zu", what,
                   c->peer, c->tag, st->bytes, c->n * sizeof(double));
}

static ovl_monitor_t monitor_of(enum kvar v)
{
    return v == KV_OVL_EXPLICIT ? OVL_MONITOR_EXPLICIT : OVL_MONITOR_AUTO;
}

/* MPI_Wait, or with sleep_us > 0 MPI_Test and a sleep between tests, so a
 * waiting rank leaves the core to ranks that compute (--mpi-wait sleep). */
static void mwait(const struct kernel *k, MPI_Request *r)
{
    if (k->p.sleep_us <= 0) {
        BENCH_MPI(MPI_Wait(r, MPI_STATUS_IGNORE));
        return;
    }
    for (;;) {
        int flag = 0;
        BENCH_MPI(MPI_Test(r, &flag, MPI_STATUS_IGNORE));
        if (flag)
            return;
        struct timespec ts = { 0, 1000L * k->p.sleep_us };
        nanosleep(&ts, NULL);
    }
}

static void ch_begin_call(struct kernel *k, struct chan *c);

/* Before the computation: post / start the transfer, timed. */
static void ch_begin(struct kernel *k, struct chan *c)
{
    if (!c)
        return;
    double t = bench_now();
    ch_begin_call(k, c);
    t = bench_now() - t;
    k->begin_n++;
    k->begin_s += t;
    if (t > 200e-6)
        k->begin_slow++;
}

static void ch_begin_call(struct kernel *k, struct chan *c)
{
    if (!c)
        return;
    const int cnt = (int)c->n;
    switch (k->v) {
    case KV_MPI:
        c->mdone = 0;
        if (c->send)
            break;
        if (k->nonblocking) {
            BENCH_MPI(
                MPI_Irecv(c->buf, cnt, MPI_DOUBLE, c->peer, c->tag, MPI_COMM_WORLD, &c->mreq));
        } else {
            BENCH_MPI(MPI_Recv(c->buf, cnt, MPI_DOUBLE, c->peer, c->tag, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
            c->mdone = 1;
        }
        break;
    case KV_PART:
#if BENCH_HAVE_PART
        memset(c->pcount, 0, (size_t)c->nparts * sizeof *c->pcount);
        memset(c->parrived, 0, (size_t)c->nparts);
        BENCH_MPI(MPI_Start(&c->preq));
#endif
        break;
    case KV_OVL_OS:
    case KV_OVL_EXPLICIT:
        if (c->send) {
            BENCH_OVL(ovl_delta_send_begin_with(c->buf, cnt, MPI_DOUBLE, c->peer, c->tag,
                                                monitor_of(k->v), &c->oreq));
            size_t d = 0;
            BENCH_OVL(ovl_delta_size(c->oreq, &d));
            if (d > k->delta_seen)
                k->delta_seen = d;
            if (d && (!k->delta_seen_min || d < k->delta_seen_min))
                k->delta_seen_min = d;
        } else {
            BENCH_OVL(ovl_delta_recv_with(c->buf, cnt, MPI_DOUBLE, c->peer, c->tag,
                                          monitor_of(k->v), &c->oreq));
        }
        break;
    default:
        break;
    }
}

/* Elements [i0, i0+m) of an output are final. */
static void ch_produced(struct kernel *k, struct chan *c, size_t i0, size_t m)
{
    if (!c)
        return;
    if (k->v == KV_OVL_EXPLICIT) {
        BENCH_OVL(ovl_delta_produced(c->oreq, i0 * sizeof(double), m * sizeof(double)));
    } else if (k->v == KV_PART) {
#if BENCH_HAVE_PART
        size_t end = i0 + m;
        for (size_t p = i0 / c->pelems; p < (size_t)c->nparts && p * c->pelems < end; p++) {
            size_t lo = p * c->pelems, hi = lo + c->pelems;
            size_t a = lo > i0 ? lo : i0, b = hi < end ? hi : end;
            c->pcount[p] += b - a;
            if (c->pcount[p] == c->pelems)
                BENCH_MPI(MPI_Pready((int)p, c->preq));
        }
#endif
    }
}

/* Elements [i0, i0+m) of an input are about to be read. */
static void ch_need(struct kernel *k, struct chan *c, size_t i0, size_t m)
{
    if (!c)
        return;
    switch (k->v) {
    case KV_MPI:
        if (!c->mdone) {
            mwait(k, &c->mreq);
            c->mdone = 1;
        }
        break;
    case KV_PART:
#if BENCH_HAVE_PART
        for (size_t p = i0 / c->pelems; p < (size_t)c->nparts && p * c->pelems < i0 + m; p++) {
            while (!c->parrived[p]) {
                int flag = 0;
                BENCH_MPI(MPI_Parrived(c->preq, (int)p, &flag));
                c->parrived[p] = (char)flag;
                if (!flag && k->p.sleep_us > 0) {
                    struct timespec ts = { 0, 1000L * k->p.sleep_us };
                    nanosleep(&ts, NULL);
                }
            }
        }
#endif
        break;
    case KV_OVL_EXPLICIT:
        BENCH_OVL(ovl_delta_need(c->oreq, i0 * sizeof(double), m * sizeof(double)));
        break;
    default:
        break;
    }
}

/* After the computation (send side): everything is produced. */
static void ch_end(struct kernel *k, struct chan *c)
{
    if (!c)
        return;
    const int cnt = (int)c->n;
    switch (k->v) {
    case KV_MPI:
        if (k->nonblocking) {
            BENCH_MPI(
                MPI_Isend(c->buf, cnt, MPI_DOUBLE, c->peer, c->tag, MPI_COMM_WORLD, &c->mreq));
        } else {
            BENCH_MPI(MPI_Send(c->buf, cnt, MPI_DOUBLE, c->peer, c->tag, MPI_COMM_WORLD));
            c->mdone = 1;
        }
        break;
    case KV_PART:
#if BENCH_HAVE_PART
        for (int p = 0; p < c->nparts; p++)
            if (c->pcount[p] < c->pelems) {
                c->pcount[p] = c->pelems;
                BENCH_MPI(MPI_Pready(p, c->preq));
            }
#endif
        break;
    case KV_OVL_OS:
    case KV_OVL_EXPLICIT:
        BENCH_OVL(ovl_delta_send_end(c->oreq));
        break;
    default:
        break;
    }
}

/* Complete and release the request. */
static void ch_wait(struct kernel *k, struct chan *c)
{
    if (!c)
        return;
    switch (k->v) {
    case KV_MPI:
        if (!c->mdone) {
            mwait(k, &c->mreq);
            c->mdone = 1;
        }
        break;
    case KV_PART:
        mwait(k, &c->preq);
        break;
    case KV_OVL_OS:
    case KV_OVL_EXPLICIT: {
        ovl_status_t st;
        memset(&st, 0, sizeof st);
        BENCH_OVL(ovl_wait(&c->oreq, &st));
        ovl_check(c, &st, kvar_name(k->v));
        break;
    }
    default:
        break;
    }
}

/* ---- strips of computation ------------------------------------------------------------ */

/* One strip [i0, i0+m) of the output of op. a, b: inputs (may be NULL). */
static void compute_strip(struct kernel *k, int op, int r, double *dst, const double *a,
                          const double *b, size_t i0, size_t m)
{
    const long w = k->p.work;
    switch (op) {
    case OP_SEED:
        for (size_t i = i0; i < i0 + m; i++)
            dst[i] = kf(seed(i, r), (double)i, w);
        break;
    case OP_MAP:
        for (size_t i = i0; i < i0 + m; i++)
            dst[i] = kf(a[i], (double)i, w);
        break;
    case OP_REDUCE:
        for (size_t i = i0; i < i0 + m; i++) {
            double v = kf(seed(i, r), (double)i, w);
            if (a)
                v += a[i];
            if (b)
                v += b[i];
            dst[i] = v;
        }
        break;
    case OP_ROWSUM: {
        const size_t cols = (size_t)k->p.cols;
        for (size_t i = i0; i < i0 + m; i++) {
            double s = 0;
            for (size_t c = 0; c < cols; c++)
                s += kf(seed(i * cols + c, r), (double)(i * cols + c), w);
            dst[i] = (a ? a[i] : 0.0) + s;
        }
        break;
    }
    case OP_WAVE: {
        /* rank r's block of a global (size*rows) x n grid, swept column by
         * column: u(i,j) = f((north + west) / 2), the LU-like recurrence.
         * dst is the south boundary (last row), written as each column ends. */
        const size_t R = (size_t)k->p.rows, N = k->n;
        double *u = k->block;
        for (size_t j = i0; j < i0 + m; j++) {
            for (size_t i = 0; i < R; i++) {
                double north = i > 0 ? u[j * R + i - 1] : (a ? a[j] : 0.0);
                double west = j > 0 ? u[(j - 1) * R + i] : 0.0;
                size_t g = ((size_t)r * R + i) * N + j;
                u[j * R + i] = kf(0.5 * (north + west), (double)g, w);
            }
            dst[j] = u[j * R + R - 1];
        }
        break;
    }
    default:
        break;
    }
}

/* The whole output of op at once (references, probes). */
static void compute_all(struct kernel *k, int op, int r, double *dst, const double *a,
                        const double *b)
{
    compute_strip(k, op, r, dst, a, b, 0, k->n);
}

/* A stage: begin the inputs and the output, compute strip by strip with
 * need/produced around each, end the output, release everything. */
static void stage_run(struct kernel *k)
{
    struct chan *in0 = CH(k, k->chin[0]), *in1 = CH(k, k->chin[1]), *out = CH(k, k->chout);
    ch_begin(k, in0);
    ch_begin(k, in1);
    ch_begin(k, out);
    const size_t strip = k->p.strip / sizeof(double) ? k->p.strip / sizeof(double) : 1;
    const double *a = in0 ? in0->buf : NULL, *b = in1 ? in1->buf : NULL;
    for (size_t i0 = 0; i0 < k->n; i0 += strip) {
        size_t m = k->n - i0 < strip ? k->n - i0 : strip;
        ch_need(k, in0, i0, m);
        ch_need(k, in1, i0, m);
        compute_strip(k, k->op, k->rank, k->dst, a, b, i0, m);
        ch_produced(k, out, i0, m);
    }
    ch_end(k, out);
    ch_wait(k, in0);
    ch_wait(k, in1);
    ch_wait(k, out);
}

/* ---- verification --------------------------------------------------------------------- */

static void verify(const struct kernel *k, const char *what, const double *got, const double *want,
                   size_t n)
{
    if (!memcmp(got, want, n * sizeof(double)))
        return;
    size_t i = 0;
    while (i < n && !memcmp(&got[i], &want[i], sizeof(double)))
        i++;
    size_t bad = 0;
    for (size_t j = 0; j < n; j++)
        bad += memcmp(&got[j], &want[j], sizeof(double)) != 0;
    bench_fail("%s/%s: %s is WRONG on rank %d: %zu of %zu elements differ, first at element "
               "%zu (byte %zu): got %.17g, expected %.17g",
               kkind_name(k->kind), kvar_name(k->v), what, k->rank, bad, n, i, i * sizeof(double),
               got[i], want[i]);
}

static const unsigned char POISON = 0xff; /* a NaN in every double */

/* ---- set-up per kernel ------------------------------------------------------------------ */

static void setup_pair(struct kernel *k)
{
    k->ranks_used = 2;
    if (k->rank == 0) {
        double *x = kalloc(k, k->n);
        k->op = OP_SEED;
        k->chout = chan_new(k, x, k->n, 1, 1, 1);
        k->dst = x;
        k->ref_out = kalloc(k, k->n);
        compute_all(k, OP_SEED, 0, k->ref_out, NULL, NULL);
    } else if (k->rank == 1) {
        double *x = kalloc(k, k->n);
        k->op = OP_MAP;
        k->chin[0] = chan_new(k, x, k->n, 0, 1, 0);
        k->dst = kalloc(k, k->n);
        k->ref_in[0] = kalloc(k, k->n);
        k->ref_out = kalloc(k, k->n);
        compute_all(k, OP_SEED, 0, k->ref_in[0], NULL, NULL);
        compute_all(k, OP_MAP, 1, k->ref_out, k->ref_in[0], NULL);
    }
}

static void setup_cascade(struct kernel *k)
{
    const int r = k->rank, p = k->size;
    k->ranks_used = p;
    k->op = r == 0 ? OP_SEED : OP_MAP;
    k->dst = kalloc(k, k->n);
    if (r > 0)
        k->chin[0] = chan_new(k, kalloc(k, k->n), k->n, r - 1, 1, 0);
    if (r < p - 1)
        k->chout = chan_new(k, k->dst, k->n, r + 1, 1, 1);
    /* stage s computes x_s = f(x_{s-1}), x_0 from seeds */
    double *prev = kalloc(k, k->n);
    compute_all(k, OP_SEED, 0, prev, NULL, NULL);
    for (int s = 1; s <= r; s++) {
        double *next = kalloc(k, k->n);
        compute_all(k, OP_MAP, s, next, prev, NULL);
        if (s == r)
            k->ref_in[0] = prev;
        prev = next;
    }
    k->ref_out = prev;
}

/* Binary tree: children 2r+1, 2r+2; each rank adds its children's arrays to
 * its own, in the same loop that computes its own. */
static double *reduce_ref(struct kernel *k, int r)
{
    double *c[2] = { NULL, NULL };
    for (int j = 0; j < 2; j++)
        if (2 * r + 1 + j < k->size)
            c[j] = reduce_ref(k, 2 * r + 1 + j);
    double *out = kalloc(k, k->n);
    compute_all(k, OP_REDUCE, r, out, c[0], c[1]);
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
    k->op = OP_REDUCE;
    k->dst = kalloc(k, k->n);
    for (int j = 0; j < 2; j++)
        if (2 * r + 1 + j < k->size)
            k->chin[j] = chan_new(k, kalloc(k, k->n), k->n, 2 * r + 1 + j, 1, 0);
    if (r > 0)
        k->chout = chan_new(k, k->dst, k->n, (r - 1) / 2, 1, 1);
    k->ref_out = reduce_ref(k, r);
}

/* Rank k's block needs the south boundary of rank k-1: simulate ranks 0..k. */
static void setup_wavefront(struct kernel *k)
{
    const int r = k->rank, p = k->size;
    k->ranks_used = p;
    k->op = OP_WAVE;
    k->block = kalloc(k, (size_t)k->p.rows * k->n);
    k->dst = kalloc(k, k->n);
    if (r > 0)
        k->chin[0] = chan_new(k, kalloc(k, k->n), k->n, r - 1, 1, 0);
    if (r < p - 1)
        k->chout = chan_new(k, k->dst, k->n, r + 1, 1, 1);
    double *north = NULL;
    for (int s = 0; s <= r; s++) {
        double *south = kalloc(k, k->n);
        compute_all(k, OP_WAVE, s, south, north, NULL);
        if (s == r)
            k->ref_in[0] = north;
        north = south;
    }
    k->ref_out = north;
}

/* xcsum-like: row sums accumulated in a fixed order (rank p-1 first) along a
 * chain down to rank 0, so the result is reproducible. */
static void setup_rowreduce(struct kernel *k)
{
    const int r = k->rank, p = k->size;
    k->ranks_used = p;
    k->op = OP_ROWSUM;
    k->dst = kalloc(k, k->n);
    if (r < p - 1)
        k->chin[0] = chan_new(k, kalloc(k, k->n), k->n, r + 1, 1, 0);
    if (r > 0)
        k->chout = chan_new(k, k->dst, k->n, r - 1, 1, 1);
    double *acc = NULL;
    for (int s = p - 1; s >= r; s--) {
        double *next = kalloc(k, k->n);
        compute_all(k, OP_ROWSUM, s, next, acc, NULL);
        if (s == r)
            k->ref_in[0] = acc;
        acc = next;
    }
    k->ref_out = acc;
}

/* Ring: iteration t computes out_t = f(in_t) (in_0 from seeds), sends it
 * right and receives in_{t+1} from the left; in_{t+1} is posted before
 * iteration t computes. out_t(r) = f^{t+1}(seed of rank r-t). */
static void setup_ring(struct kernel *k)
{
    const int r = k->rank, p = k->size, T = k->p.iters;
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    k->ranks_used = p;
    k->nonblocking = 1;
    k->ring_in = xcalloc((size_t)T + 1, sizeof(int));
    k->ring_out = xcalloc((size_t)T, sizeof(int));
    k->ring_dst = xcalloc((size_t)T, sizeof(double *));
    k->ring_ref_in = xcalloc((size_t)T + 1, sizeof(double *));
    k->ring_ref_out = xcalloc((size_t)T, sizeof(double *));
    k->ring_in[0] = -1;
    for (int t = 0; t < T; t++) {
        k->ring_dst[t] = kalloc(k, k->n);
        k->ring_out[t] = chan_new(k, k->ring_dst[t], k->n, right, 1 + t, 1);
        k->ring_in[t + 1] = chan_new(k, kalloc(k, k->n), k->n, left, 1 + t, 0);
    }
    /* references: OP_SEED already applies f once, so in_t (t >= 1) is
     * OP_SEED of rank r-t followed by t-1 maps; out_0 is OP_SEED of rank r */
    for (int t = 1; t <= T; t++) {
        int src = ((r - t) % p + p) % p;
        double *x = kalloc(k, k->n);
        compute_all(k, OP_SEED, src, x, NULL, NULL);
        for (int s = 1; s < t; s++)
            compute_all(k, OP_MAP, 0, x, x, NULL);
        k->ring_ref_in[t] = x;
    }
    for (int t = 0; t < T; t++) {
        k->ring_ref_out[t] = kalloc(k, k->n);
        if (t == 0)
            compute_all(k, OP_SEED, r, k->ring_ref_out[t], NULL, NULL);
        else
            compute_all(k, OP_MAP, 0, k->ring_ref_out[t], k->ring_ref_in[t], NULL);
    }
}

/* ---- stencil ----------------------------------------------------------------------------- */

/* Seven-point average through the kernel function (NAS MG psinv-like). */
__attribute__((noinline)) static double stencil_point(double c, double xm, double xp, double ym,
                                                      double yp, double zm, double zp, double g,
                                                      long work)
{
    return kf((c + xm + xp + ym + yp + zm + zp) * (1.0 / 7.0), g, work);
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
    return seed(((size_t)gx * g->G[1] + (size_t)gy) * g->G[2] + (size_t)gz, 0);
}

/* One sweep of the local block: u1 = stencil(u0, halos h[6]); writes the
 * faces f[6] (NULL where there is no neighbour) plane by plane, with the
 * channel calls around each x plane. ci/co: channel indices per direction
 * (-1: none; h[d] is then either local or absent). */
static void stencil_sweep(struct kernel *k, const double *u0, double *u1, double *const h[6],
                          double *const f[6], const int ci[6], const int co[6])
{
    const size_t n = k->sn;
    const long w = k->p.work;
    const size_t G1 = (size_t)k->dims[1] * n, G2 = (size_t)k->dims[2] * n;
    const size_t ox = (size_t)k->coord[0] * n, oy = (size_t)k->coord[1] * n,
                 oz = (size_t)k->coord[2] * n;
    for (size_t x = 0; x < n; x++) {
        /* inputs: the y/z halos of this plane; the x halos before the first / last plane */
        for (int d = 2; d < 6; d++)
            ch_need(k, CH(k, ci[d]), x * n, n);
        if (x == 0)
            ch_need(k, CH(k, ci[0]), 0, n * n);
        if (x == n - 1)
            ch_need(k, CH(k, ci[1]), 0, n * n);
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
            ch_produced(k, CH(k, co[d]), x * n, n);
        if (x == 0)
            ch_produced(k, CH(k, co[0]), 0, n * n);
        if (x == n - 1)
            ch_produced(k, CH(k, co[1]), 0, n * n);
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
    k->ranks_used = p;
    k->nonblocking = 1;
    k->sn = n;
    k->n = n * n; /* one face */
    k->dims[0] = k->dims[1] = k->dims[2] = 0;
    BENCH_MPI(MPI_Dims_create(p, 3, k->dims));
    k->coord[0] = r / (k->dims[1] * k->dims[2]);
    k->coord[1] = (r / k->dims[2]) % k->dims[1];
    k->coord[2] = r % k->dims[2];
    for (int d = 0; d < 6; d++) {
        int c[3] = { k->coord[0], k->coord[1], k->coord[2] };
        c[d >> 1] += (d & 1) ? 1 : -1;
        if (c[d >> 1] < 0 || c[d >> 1] >= k->dims[d >> 1])
            k->nb[d] = -1;
        else
            k->nb[d] = (c[0] * k->dims[1] + c[1]) * k->dims[2] + c[2];
    }
    struct sgrid g = { { (size_t)k->dims[0] * n, (size_t)k->dims[1] * n, (size_t)k->dims[2] * n } };
    const long ox = k->coord[0] * (long)n, oy = k->coord[1] * (long)n, oz = k->coord[2] * (long)n;

    k->su = xcalloc((size_t)T + 1, sizeof(double *));
    k->sref_u = xcalloc((size_t)T + 1, sizeof(double *));
    k->sh0 = xcalloc(6, sizeof(double *));
    k->s_recv = xcalloc((size_t)T * 6, sizeof(int));
    k->s_send = xcalloc((size_t)T * 6, sizeof(int));
    k->sref_h = xcalloc((size_t)T * 6, sizeof(double *));
    for (int t = 0; t <= T; t++)
        k->su[t] = kalloc(k, n * n * n);
    for (int t = 0; t < T; t++)
        for (int d = 0; d < 6; d++) {
            int i = t * 6 + d;
            k->s_recv[i] = k->s_send[i] = -1;
            if (k->nb[d] < 0)
                continue;
            /* my face toward d travels in direction d; the neighbour on side d
             * receives it as its halo from side d^1, tag by direction of travel */
            k->s_send[i] = chan_new(k, kalloc(k, n * n), n * n, k->nb[d], 1 + t * 6 + d, 1);
            k->s_recv[i] = chan_new(k, kalloc(k, n * n), n * n, k->nb[d], 1 + t * 6 + (d ^ 1), 0);
        }
    /* u_0 and the halos of iteration 0 come from the initial global field */
    for (size_t x = 0; x < n; x++)
        for (size_t y = 0; y < n; y++)
            for (size_t z = 0; z < n; z++)
                k->su[0][(x * n + y) * n + z] =
                    sglobal_init(&g, ox + (long)x, oy + (long)y, oz + (long)z);
    for (int d = 0; d < 6; d++) {
        if (k->nb[d] < 0)
            continue;
        k->sh0[d] = kalloc(k, n * n);
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
                k->sh0[d][a * n + b] = sglobal_init(&g, c[0], c[1], c[2]);
            }
    }
    /* references: step the global grid T times, cut out the block and halos */
    size_t GN = g.G[0] * g.G[1] * g.G[2];
    double *ga = xcalloc(GN, sizeof(double)), *gb = xcalloc(GN, sizeof(double));
    for (size_t x = 0; x < g.G[0]; x++)
        for (size_t y = 0; y < g.G[1]; y++)
            for (size_t z = 0; z < g.G[2]; z++)
                ga[(x * g.G[1] + y) * g.G[2] + z] = sglobal_init(&g, (long)x, (long)y, (long)z);
    k->sref_u[0] = k->su[0];
    for (int t = 1; t <= T; t++) {
        stencil_global_step(k, &g, ga, gb);
        double *tmp = ga;
        ga = gb;
        gb = tmp;
        double *u = kalloc(k, n * n * n);
        for (size_t x = 0; x < n; x++)
            for (size_t y = 0; y < n; y++)
                for (size_t z = 0; z < n; z++)
                    u[(x * n + y) * n + z] =
                        ga[(((size_t)ox + x) * g.G[1] + (size_t)oy + y) * g.G[2] + (size_t)oz + z];
        k->sref_u[t] = u;
        for (int d = 0; d < 6; d++) {
            if (k->nb[d] < 0)
                continue;
            double *h = kalloc(k, n * n);
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
            k->sref_h[(t - 1) * 6 + d] = h;
        }
    }
    free(ga);
    free(gb);
}

static void run_stencil(struct kernel *k)
{
    const int T = k->p.iters;
    const int none[6] = { -1, -1, -1, -1, -1, -1 };
    for (int t = 0; t < T; t++) {
        const int *ri = &k->s_recv[t * 6], *so = &k->s_send[t * 6];
        const int *ci = t > 0 ? &k->s_recv[(t - 1) * 6] : none;
        double *h[6], *f[6];
        for (int d = 0; d < 6; d++) {
            h[d] = t == 0 ? k->sh0[d] : (ci[d] >= 0 ? k->ch[ci[d]].buf : NULL);
            f[d] = so[d] >= 0 ? k->ch[so[d]].buf : NULL;
        }
        for (int d = 0; d < 6; d++)
            ch_begin(k, CH(k, ri[d]));
        for (int d = 0; d < 6; d++)
            ch_begin(k, CH(k, so[d]));
        stencil_sweep(k, k->su[t], k->su[t + 1], h, f, ci, so);
        for (int d = 0; d < 6; d++)
            ch_end(k, CH(k, so[d]));
        for (int d = 0; d < 6; d++)
            ch_wait(k, CH(k, ci[d]));
    }
    for (int d = 0; d < 6; d++)
        ch_wait(k, CH(k, k->s_recv[(T - 1) * 6 + d]));
    for (int i = 0; i < T * 6; i++)
        ch_wait(k, CH(k, k->s_send[i]));
}

static void run_ring(struct kernel *k)
{
    const int T = k->p.iters;
    const size_t strip = k->p.strip / sizeof(double) ? k->p.strip / sizeof(double) : 1;
    for (int t = 0; t < T; t++) {
        struct chan *in = CH(k, k->ring_in[t]), *next = CH(k, k->ring_in[t + 1]);
        struct chan *out = CH(k, k->ring_out[t]);
        ch_begin(k, next);
        ch_begin(k, out);
        for (size_t i0 = 0; i0 < k->n; i0 += strip) {
            size_t m = k->n - i0 < strip ? k->n - i0 : strip;
            ch_need(k, in, i0, m);
            if (in)
                compute_strip(k, OP_MAP, 0, out->buf, in->buf, NULL, i0, m);
            else
                compute_strip(k, OP_SEED, k->rank, out->buf, NULL, NULL, i0, m);
            ch_produced(k, out, i0, m);
        }
        ch_end(k, out);
        ch_wait(k, in);
    }
    ch_wait(k, CH(k, k->ring_in[T]));
    for (int t = 0; t < T; t++)
        ch_wait(k, CH(k, k->ring_out[t]));
}

/* ---- set-up, run, teardown ------------------------------------------------------------- */

struct kernel *kernel_setup(enum kkind kind, const struct kparams *p, unsigned var_mask)
{
    struct kernel *k = xcalloc(1, sizeof *k);
    k->kind = kind;
    k->p = *p;
    k->var_mask = var_mask;
    k->rank = bench_rank;
    k->size = bench_size;
    k->n = p->bytes / sizeof(double);
    k->chin[0] = k->chin[1] = k->chout = -1;
    if (k->n == 0)
        bench_fail("kernels: message of %zu bytes is too small", p->bytes);
    switch (kind) {
    case KK_PAIR:
        setup_pair(k);
        break;
    case KK_CASCADE:
        setup_cascade(k);
        break;
    case KK_RING:
        setup_ring(k);
        break;
    case KK_REDUCE:
        setup_reduce(k);
        break;
    case KK_WAVEFRONT:
        setup_wavefront(k);
        break;
    case KK_ROWREDUCE:
        setup_rowreduce(k);
        break;
    case KK_STENCIL:
        setup_stencil(k);
        break;
    default:
        bench_fail("kernels: unknown kernel %d", (int)kind);
    }
    if ((var_mask & (1u << KV_PART)) && BENCH_HAVE_PART)
        part_create(k);
    MPI_Barrier(MPI_COMM_WORLD);
    return k;
}

void kernel_teardown(struct kernel *k)
{
    if (!k)
        return;
    for (int i = 0; i < k->nch; i++) {
        struct chan *c = &k->ch[i];
        if (c->preq != MPI_REQUEST_NULL)
            MPI_Request_free(&c->preq);
        free(c->pcount);
        free(c->parrived);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < k->nallocs; i++) {
        if (k->p.ovl_memory)
            BENCH_OVL(ovl_free(k->allocs[i].p));
        else
            munmap(k->allocs[i].p, k->allocs[i].len);
    }
    free(k->allocs);
    free(k->ch);
    free(k->ring_in);
    free(k->ring_out);
    free(k->ring_dst);
    free(k->ring_ref_in);
    free(k->ring_ref_out);
    free(k->su);
    free(k->sref_u);
    free(k->sh0);
    free(k->s_recv);
    free(k->s_send);
    free(k->sref_h);
    free(k);
}

enum kkind kernel_kind(const struct kernel *k)
{
    return k->kind;
}

size_t kernel_msg_bytes(const struct kernel *k)
{
    return k->n * sizeof(double);
}

const char *kernel_describe(const struct kernel *k, char *buf, size_t len)
{
    char sz[32];
    bench_fmt_size(kernel_msg_bytes(k), sz, sizeof sz);
    switch (k->kind) {
    case KK_PAIR:
        snprintf(buf, len, "rank 0 -> rank 1, %s", sz);
        break;
    case KK_CASCADE:
        snprintf(buf, len, "chain of %d ranks, %s per link", k->size, sz);
        break;
    case KK_RING:
        snprintf(buf, len, "ring of %d ranks, %d iterations, %s per link", k->size, k->p.iters, sz);
        break;
    case KK_REDUCE:
        snprintf(buf, len, "binary tree of %d ranks, %s arrays", k->size, sz);
        break;
    case KK_WAVEFRONT:
        snprintf(buf, len, "chain of %d ranks, %d x %zu blocks, %s boundary row", k->size,
                 k->p.rows, k->n, sz);
        break;
    case KK_ROWREDUCE:
        snprintf(buf, len, "%zu rows x %d cols per rank, chain of %d ranks, %s row sums", k->n,
                 k->p.cols, k->size, sz);
        break;
    case KK_STENCIL:
        snprintf(buf, len, "%dx%dx%d ranks, %zu^3 blocks, %d iterations, %s faces", k->dims[0],
                 k->dims[1], k->dims[2], k->sn, k->p.iters, sz);
        break;
    default:
        snprintf(buf, len, "?");
    }
    return buf;
}

static void poison(struct kernel *k)
{
    for (int i = 0; i < k->nch; i++)
        memset(k->ch[i].buf, POISON, k->ch[i].n * sizeof(double));
    if (k->dst)
        memset(k->dst, POISON, k->n * sizeof(double));
    if (k->kind == KK_STENCIL)
        for (int t = 1; t <= k->p.iters; t++)
            memset(k->su[t], POISON, k->sn * k->sn * k->sn * sizeof(double));
}

static void verify_run(struct kernel *k)
{
    switch (k->kind) {
    case KK_RING:
        for (int t = 1; t <= k->p.iters; t++)
            verify(k, "received array", k->ch[k->ring_in[t]].buf, k->ring_ref_in[t], k->n);
        for (int t = 0; t < k->p.iters; t++)
            verify(k, "computed array", k->ring_dst[t], k->ring_ref_out[t], k->n);
        break;
    case KK_STENCIL: {
        const size_t n3 = k->sn * k->sn * k->sn;
        for (int t = 1; t <= k->p.iters; t++) {
            verify(k, "block", k->su[t], k->sref_u[t], n3);
            for (int d = 0; d < 6; d++)
                if (k->s_recv[(t - 1) * 6 + d] >= 0)
                    verify(k, "halo", k->ch[k->s_recv[(t - 1) * 6 + d]].buf,
                           k->sref_h[(t - 1) * 6 + d], k->n);
        }
        break;
    }
    default:
        if (k->rank >= k->ranks_used)
            break;
        for (int j = 0; j < 2; j++)
            if (k->chin[j] >= 0)
                verify(k, "received array", k->ch[k->chin[j]].buf, k->ref_in[j], k->n);
        verify(k, "computed array", k->dst, k->ref_out, k->n);
        break;
    }
}

void bench_polite_barrier(void)
{
    MPI_Request r;
    BENCH_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &r));
    for (;;) {
        int flag = 0;
        BENCH_MPI(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
        if (flag)
            return;
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
}

static double max_all(double v)
{
    double m = v;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static double min_all(double v)
{
    double m = v;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    return m;
}

static double sum_all(double v)
{
    double s = v;
    MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return s;
}

int kernel_trace;

void kernel_run(struct kernel *k, enum kvar v, struct krun *out)
{
    if (!kvar_available(v) || !(k->var_mask & (1u << v)))
        bench_fail("kernels: variant %s was not set up", kvar_name(v));
    k->v = v;
    k->delta_seen = k->delta_seen_min = 0;
    if (kernel_trace) {
        fprintf(stderr, "[trace rank %d] %s/%s, %zu B messages\n", k->rank, kkind_name(k->kind),
                kvar_name(v), kernel_msg_bytes(k));
        fflush(stderr);
    }
    poison(k);
    int is_ovl = v == KV_OVL_OS || v == KV_OVL_EXPLICIT;
    ovl_stats_t s0, s1;
    memset(&s0, 0, sizeof s0);
    memset(&s1, 0, sizeof s1);
    if (is_ovl)
        BENCH_OVL(ovl_stats_get(&s0));
    k->begin_n = k->begin_slow = 0;
    k->begin_s = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    if (k->rank < k->ranks_used) {
        switch (k->kind) {
        case KK_RING:
            run_ring(k);
            break;
        case KK_STENCIL:
            run_stencil(k);
            break;
        default:
            stage_run(k);
            break;
        }
    }
    double t = bench_now() - t0;
    bench_polite_barrier();
    if (is_ovl)
        BENCH_OVL(ovl_stats_get(&s1));
    verify_run(k);
    memset(out, 0, sizeof *out);
    out->time = max_all(t);
    out->deltas = sum_all((double)(s1.deltas_sent - s0.deltas_sent));
    out->faults = sum_all((double)(s1.faults - s0.faults));
    out->begin_us = max_all(k->begin_n ? k->begin_s / (double)k->begin_n * 1e6 : 0);
    double nb = sum_all((double)k->begin_n);
    out->begin_slow = nb > 0 ? sum_all((double)k->begin_slow) / nb : 0;
    out->delta_bytes = (size_t)max_all((double)k->delta_seen);
    /* ranks that sent nothing report 0: the smallest of those that sent */
    double dmin = min_all(k->delta_seen_min ? (double)k->delta_seen_min : 1e300);
    out->delta_bytes_min = dmin < 1e299 ? (size_t)dmin : 0;
    int parts = 0;
    for (int i = 0; i < k->nch; i++)
        if (k->ch[i].nparts > parts)
            parts = k->ch[i].nparts;
    out->parts = (int)max_all((double)parts);
}

/* ---- probes ------------------------------------------------------------------------------ */

double kernel_probe_compute(struct kernel *k)
{
    double t = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (k->rank == 0) {
        /* scratch inputs with values like the kernels' (in [0, 1): zeros
         * would take libm's fast path for sin(0)), output to scratch */
        size_t n = k->n;
        double *a = xcalloc(n, sizeof(double)), *b = xcalloc(n, sizeof(double));
        double *d = xcalloc(n, sizeof(double));
        for (size_t i = 0; i < n; i++) {
            a[i] = seed(i, 1);
            b[i] = seed(i, 2);
        }
        double t0 = bench_now();
        switch (k->kind) {
        case KK_PAIR:
        case KK_CASCADE:
        case KK_RING:
            compute_all(k, OP_MAP, 0, d, a, NULL);
            break;
        case KK_REDUCE:
            compute_all(k, OP_REDUCE, 0, d, a, b);
            break;
        case KK_WAVEFRONT:
            compute_all(k, OP_WAVE, 0, d, a, NULL);
            break;
        case KK_ROWREDUCE:
            compute_all(k, OP_ROWSUM, 0, d, a, NULL);
            break;
        case KK_STENCIL: {
            double *u = xcalloc(k->sn * k->sn * k->sn, sizeof(double));
            double *h[6] = { 0 }, *f[6] = { 0 };
            const int none[6] = { -1, -1, -1, -1, -1, -1 };
            enum kvar saved = k->v;
            k->v = KV_MPI;
            stencil_sweep(k, k->su[0], u, h, f, none, none);
            k->v = saved;
            free(u);
            break;
        }
        default:
            break;
        }
        t = bench_now() - t0;
        free(a);
        free(b);
        free(d);
    }
    bench_polite_barrier();
    return max_all(t);
}

double kernel_probe_transfer(struct kernel *k)
{
    double *buf = xcalloc(k->n, sizeof(double));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now(), t = 0;
    if (k->rank == 0) {
        BENCH_MPI(MPI_Send(buf, (int)k->n, MPI_DOUBLE, 1, 99, MPI_COMM_WORLD));
        t = bench_now() - t0;
    } else if (k->rank == 1) {
        BENCH_MPI(MPI_Recv(buf, (int)k->n, MPI_DOUBLE, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        t = bench_now() - t0;
    }
    bench_polite_barrier();
    free(buf);
    return max_all(t);
}

/* ---- the ideal pipeline bound -------------------------------------------------------------
 *
 * A chain (pair: 2 stages, cascade: p) or tree (reduce) of stages, each
 * computing one array in time C, joined by links that carry one message in
 * time T (a link into a node with c children carries c messages through one
 * downlink: c*T). Cut every message into m equal pieces and let each piece
 * move on as soon as it is done: this is a flow shop of equal jobs, whose
 * makespan along the longest root-leaf path is exactly
 *
 *     bottleneck + (path - bottleneck) / m
 *
 * with path = the sum of the stage and link times on that path and
 * bottleneck = the largest single stage or link time (every piece must pass
 * the slowest stage; the first piece must cross the whole path). That
 * assumes every stage has its own core. With K cores for p stages, the
 * p*C of computation cannot finish before p*C/min(p, K). The bound is the
 * larger of the two:
 *
 *     B(m) = max( bottleneck + (path - bottleneck)/m,  p*C/min(p,K) )
 *
 * It is a lower bound on any schedule (it ignores per-piece message costs,
 * fault or annotation overhead, and the CPU the network itself needs). m = 1
 * is the blocking baseline's ideal (path, e.g. 2C+T for pair); m -> infinity
 * gives max(bottleneck, p*C/min(p,K)), e.g. max(C,T) for a pair on 2 cores.
 */
double kernel_bound(const struct kernel *k, double C, double T, int cores, double m)
{
    int p;
    double path, bottleneck = C > T ? C : T;
    switch (k->kind) {
    case KK_PAIR:
        p = 2;
        path = 2 * C + T;
        break;
    case KK_CASCADE:
        p = k->size;
        path = p * C + (p - 1) * T;
        break;
    case KK_REDUCE: {
        p = k->size;
        path = 0;
        for (int leaf = 0; leaf < p; leaf++) {
            if (2 * leaf + 1 < p)
                continue;
            double s = C;
            for (int r = leaf; r > 0; r = (r - 1) / 2) {
                int parent = (r - 1) / 2;
                int nch = (2 * parent + 1 < p) + (2 * parent + 2 < p);
                s += nch * T + C;
                if (nch * T > bottleneck)
                    bottleneck = nch * T;
            }
            if (s > path)
                path = s;
        }
        break;
    }
    default:
        return 0;
    }
    double flow = m > 0 ? bottleneck + (path - bottleneck) / m : bottleneck;
    int kc = cores < p ? cores : p;
    if (kc < 1)
        kc = 1;
    double work = p * C / kc;
    return flow > work ? flow : work;
}

int kernel_has_bound(const struct kernel *k)
{
    return k->kind == KK_PAIR || k->kind == KK_CASCADE || k->kind == KK_REDUCE;
}

int bench_cores(void)
{
    char id[64];
    bench_boot_id(id);
    if (id[0] == '\0')
        snprintf(id, sizeof id, "rank-%d", bench_rank);
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    char *ids = xcalloc((size_t)bench_size, sizeof id);
    int *cpus = xcalloc((size_t)bench_size, sizeof(int));
    MPI_Allgather(id, (int)sizeof id, MPI_CHAR, ids, (int)sizeof id, MPI_CHAR, MPI_COMM_WORLD);
    MPI_Allgather(&ncpu, 1, MPI_INT, cpus, 1, MPI_INT, MPI_COMM_WORLD);
    int total = 0;
    for (int i = 0; i < bench_size; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = !memcmp(ids + (size_t)i * sizeof id, ids + (size_t)j * sizeof id, sizeof id);
        if (!seen)
            total += cpus[i] > 0 ? cpus[i] : 1;
    }
    free(ids);
    free(cpus);
    return total;
}

/* ---- interleaved measurement ---------------------------------------------------------------- */

void kernel_measure(struct kernel *k, unsigned var_mask, int reps, int warmup, struct kmeasure *out)
{
    /* steps: 0 = compute probe, 1 = transfer probe, 2 + v = variant v */
    int steps[2 + KV_COUNT], nsteps = 0;
    steps[nsteps++] = 0;
    steps[nsteps++] = 1;
    for (int v = 0; v < KV_COUNT; v++)
        if ((var_mask & (1u << v)) && kvar_available((enum kvar)v))
            steps[nsteps++] = 2 + v;
    double *t[KV_COUNT], *c = xcalloc((size_t)reps, sizeof(double));
    double *tt = xcalloc((size_t)reps, sizeof(double));
    for (int v = 0; v < KV_COUNT; v++)
        t[v] = xcalloc((size_t)reps, sizeof(double));
    memset(out, 0, sizeof *out);
    out->reps = reps;
    for (int r = -warmup; r < reps; r++) {
        int rot = ((r % nsteps) + nsteps) % nsteps;
        for (int i = 0; i < nsteps; i++) {
            int s = steps[(i + rot) % nsteps];
            if (s == 0) {
                double x = kernel_probe_compute(k);
                if (r >= 0)
                    c[r] = x;
            } else if (s == 1) {
                double x = kernel_probe_transfer(k);
                if (r >= 0)
                    tt[r] = x;
            } else {
                struct krun kr;
                int v = s - 2;
                kernel_run(k, (enum kvar)v, &kr);
                if (r < 0)
                    continue;
                t[v][r] = kr.time;
                out->deltas[v] += kr.deltas / reps;
                out->faults[v] += kr.faults / reps;
                out->begin_us[v] += kr.begin_us / reps;
                out->begin_slow[v] += kr.begin_slow / reps;
                if (kr.delta_bytes > out->delta_bytes[v])
                    out->delta_bytes[v] = kr.delta_bytes;
                if (v == KV_PART)
                    out->parts = kr.parts;
            }
        }
    }
    for (int v = 0; v < KV_COUNT; v++) {
        if ((var_mask & (1u << v)) && kvar_available((enum kvar)v))
            out->t[v] = bench_stat_of(t[v], reps);
        free(t[v]);
    }
    out->C = bench_stat_of(c, reps).med;
    out->T = bench_stat_of(tt, reps).med;
    free(c);
    free(tt);
}
