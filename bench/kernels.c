/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The delta send/receive kernels (kernels.h): what they share. Each kernel
 * is a file of its own (kernel_<name>.c) that fills a struct kernel_ops
 * (kernel_internal.h); this file holds the channels and the four
 * communication variants behind them, the stage runner, set-up, runs with
 * their verification, the probes, the pipeline bound and the interleaved
 * measurement.
 *
 * Channels: what ch_begin/ch_need/ch_produced/ch_end/ch_wait do depends on
 * the variant: nothing but a blocking MPI call at begin/end for `mpi`,
 * MPI_Pready/MPI_Parrived for `part`, ovl_delta_* for the ovl variants
 * (ovl-os ignores the strip calls: faults do the work). So every variant
 * computes with exactly the same loops and arithmetic, and the results must
 * be bit-identical to the references computed at set-up.
 */
#include "kernel_internal.h"

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

static const struct kernel_ops *const kind_ops[KK_COUNT] = {
    [KK_PAIR] = &kernel_pair_ops,           [KK_CASCADE] = &kernel_cascade_ops,
    [KK_RING] = &kernel_ring_ops,           [KK_REDUCE] = &kernel_reduce_ops,
    [KK_WAVEFRONT] = &kernel_wavefront_ops, [KK_ROWREDUCE] = &kernel_rowreduce_ops,
    [KK_STENCIL] = &kernel_stencil_ops,
};

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

/* noinline: one copy of the arithmetic for the timed loops and the
 * references alike. */
__attribute__((noinline)) double kernel_kf(double x, double i, long work)
{
    for (long w = 0; w < work; w++)
        x = sin(x) * sin(i) + cos(i) * cos(x);
    return x;
}

void kernel_op_seed(struct kernel *k, int r, double *dst, const double *a, const double *b,
                    size_t i0, size_t m)
{
    (void)a;
    (void)b;
    const long w = k->p.work;
    for (size_t i = i0; i < i0 + m; i++)
        dst[i] = kernel_kf(kernel_seed(i, r), (double)i, w);
}

void kernel_op_map(struct kernel *k, int r, double *dst, const double *a, const double *b,
                   size_t i0, size_t m)
{
    (void)r;
    (void)b;
    const long w = k->p.work;
    for (size_t i = i0; i < i0 + m; i++)
        dst[i] = kernel_kf(a[i], (double)i, w);
}

void kernel_compute_all(struct kernel *k, kernel_op_fn op, int r, double *dst, const double *a,
                        const double *b)
{
    op(k, r, dst, a, b, 0, k->n);
}

size_t kernel_strip_elems(const struct kernel *k)
{
    return k->p.strip / sizeof(double) ? k->p.strip / sizeof(double) : 1;
}

/* ---- buffers and channels ---------------------------------------------------------- */

void *kernel_alloc(struct kernel *k, size_t n)
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

void *kernel_xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p)
        bench_fail("out of memory");
    return p;
}

int kernel_chan_new(struct kernel *k, double *buf, size_t n, int peer, int tag, int send)
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

struct chan *kernel_chan(struct kernel *k, int i)
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
        c->pcount = kernel_xcalloc((size_t)c->nparts, sizeof *c->pcount);
        c->parrived = kernel_xcalloc((size_t)c->nparts, 1);
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
void ch_begin(struct kernel *k, struct chan *c)
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
            BENCH_OVL(ovl_delta_send_begin(c->buf, cnt, MPI_DOUBLE, c->peer, c->tag,
                                           BENCH_MONITOR(monitor_of(k->v)), &c->oreq));
            size_t d = 0;
            BENCH_OVL(ovl_delta_size(c->oreq, &d));
            if (d > k->delta_seen)
                k->delta_seen = d;
            if (d && (!k->delta_seen_min || d < k->delta_seen_min))
                k->delta_seen_min = d;
        } else {
            BENCH_OVL(ovl_delta_recv(c->buf, cnt, MPI_DOUBLE, c->peer, c->tag,
                                     BENCH_MONITOR(monitor_of(k->v)), &c->oreq));
        }
        break;
    default:
        break;
    }
}

/* Elements [i0, i0+m) of an output are final. */
void ch_produced(struct kernel *k, struct chan *c, size_t i0, size_t m)
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
void ch_need(struct kernel *k, struct chan *c, size_t i0, size_t m)
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
void ch_end(struct kernel *k, struct chan *c)
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
        BENCH_OVL(ovl_delta_send_end(c->oreq, NULL));
        break;
    default:
        break;
    }
}

/* Complete and release the request. */
void ch_wait(struct kernel *k, struct chan *c)
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

/* ---- stages ----------------------------------------------------------------------------- */

/* A stage: begin the inputs and the output, compute strip by strip with
 * need/produced around each, end the output, release everything. */
static void stage_run(struct kernel *k)
{
    struct chan *in0 = kernel_chan(k, k->chin[0]), *in1 = kernel_chan(k, k->chin[1]);
    struct chan *out = kernel_chan(k, k->chout);
    ch_begin(k, in0);
    ch_begin(k, in1);
    ch_begin(k, out);
    const size_t strip = kernel_strip_elems(k);
    const double *a = in0 ? in0->buf : NULL, *b = in1 ? in1->buf : NULL;
    for (size_t i0 = 0; i0 < k->n; i0 += strip) {
        size_t m = k->n - i0 < strip ? k->n - i0 : strip;
        ch_need(k, in0, i0, m);
        ch_need(k, in1, i0, m);
        k->op(k, k->rank, k->dst, a, b, i0, m);
        ch_produced(k, out, i0, m);
    }
    ch_end(k, out);
    ch_wait(k, in0);
    ch_wait(k, in1);
    ch_wait(k, out);
}

static void stage_verify(struct kernel *k)
{
    if (k->rank >= k->ranks_used)
        return;
    for (int j = 0; j < 2; j++)
        if (k->chin[j] >= 0)
            kernel_verify(k, "received array", k->ch[k->chin[j]].buf, k->ref_in[j], k->n);
    kernel_verify(k, "computed array", k->dst, k->ref_out, k->n);
}

/* ---- verification --------------------------------------------------------------------- */

void kernel_verify(const struct kernel *k, const char *what, const double *got, const double *want,
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

/* ---- set-up, run, teardown ------------------------------------------------------------- */

struct kernel *kernel_setup(enum kkind kind, const struct kparams *p, unsigned var_mask)
{
    if ((unsigned)kind >= KK_COUNT)
        bench_fail("kernels: unknown kernel %d", (int)kind);
    struct kernel *k = kernel_xcalloc(1, sizeof *k);
    k->kind = kind;
    k->ops = kind_ops[kind];
    k->p = *p;
    k->var_mask = var_mask;
    k->rank = bench_rank;
    k->size = bench_size;
    k->n = p->bytes / sizeof(double);
    k->chin[0] = k->chin[1] = k->chout = -1;
    if (k->n == 0)
        bench_fail("kernels: message of %zu bytes is too small", p->bytes);
    k->ops->setup(k);
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
    if (k->ops->teardown)
        k->ops->teardown(k);
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
    k->ops->describe(k, sz, buf, len);
    return buf;
}

static void poison(struct kernel *k)
{
    for (int i = 0; i < k->nch; i++)
        memset(k->ch[i].buf, KERNEL_POISON, k->ch[i].n * sizeof(double));
    if (k->dst)
        memset(k->dst, KERNEL_POISON, k->n * sizeof(double));
    if (k->ops->poison)
        k->ops->poison(k);
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
        BENCH_OVL(ovl_stats_get(&s0, sizeof s0));
    k->begin_n = k->begin_slow = 0;
    k->begin_s = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    if (k->rank < k->ranks_used) {
        if (k->ops->run)
            k->ops->run(k);
        else
            stage_run(k);
    }
    double t = bench_now() - t0;
    bench_polite_barrier();
    if (is_ovl)
        BENCH_OVL(ovl_stats_get(&s1, sizeof s1));
    if (k->ops->verify)
        k->ops->verify(k);
    else
        stage_verify(k);
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
        double *a = kernel_xcalloc(n, sizeof(double)), *b = kernel_xcalloc(n, sizeof(double));
        double *d = kernel_xcalloc(n, sizeof(double));
        for (size_t i = 0; i < n; i++) {
            a[i] = kernel_seed(i, 1);
            b[i] = kernel_seed(i, 2);
        }
        double t0 = bench_now();
        k->ops->probe(k, d, a, b);
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
    double *buf = kernel_xcalloc(k->n, sizeof(double));
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
    if (!k->ops->bound)
        return 0;
    double path, bottleneck = C > T ? C : T;
    int p = k->ops->bound(k, C, T, &path, &bottleneck);
    double flow = m > 0 ? bottleneck + (path - bottleneck) / m : bottleneck;
    int kc = cores < p ? cores : p;
    if (kc < 1)
        kc = 1;
    double work = p * C / kc;
    return flow > work ? flow : work;
}

int kernel_has_bound(const struct kernel *k)
{
    return k->ops->bound != NULL;
}

int bench_cores(void)
{
    char id[64];
    bench_boot_id(id);
    if (id[0] == '\0')
        snprintf(id, sizeof id, "rank-%d", bench_rank);
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    char *ids = kernel_xcalloc((size_t)bench_size, sizeof id);
    int *cpus = kernel_xcalloc((size_t)bench_size, sizeof(int));
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
    double *t[KV_COUNT], *c = kernel_xcalloc((size_t)reps, sizeof(double));
    double *tt = kernel_xcalloc((size_t)reps, sizeof(double));
    for (int v = 0; v < KV_COUNT; v++)
        t[v] = kernel_xcalloc((size_t)reps, sizeof(double));
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
