/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One-sided get/put with demand-driven synchronisation (HUNT). ovl_get and
 * ovl_put return at once; the program's first access to data that is not
 * there yet is what waits, through the access monitor (watch.c).
 *
 * Get: the transfer is cut into strips (model.c decides, HUNT 5.1), every
 * strip is an MPI_Rget into a staging buffer, and all strips are issued
 * together. The destination is a watch receive region: MPI never touches a
 * guarded page; when a strip's request completes the engine installs it
 * through watch, which opens every page that is complete. A read of a page
 * still in flight waits in the fault handler, which drives the engine, so
 * it waits for exactly the strip holding that page.
 *
 * Put: the source's interior pages become a watch hold region (read-only);
 * each strip is an MPI_Rput straight from the user's memory, and when its
 * request completes (the data has left) its pages are writable again. A
 * write before that waits. The bytes on the source's partial first and
 * last pages are copied at the call (never protected: they share pages
 * with other data); so is a whole source without full pages, a source
 * that overlaps another outstanding put, and every source under the
 * explicit monitor.
 *
 * Trains (HUNT 5.3): a get that joins a train is neither split nor
 * guarded: it lands directly in the destination, and the last strip of the
 * watched get before it (its anchor) is held back until the train has
 * arrived, so touching that strip retires the train. Who joins: on a
 * segment with the piggyback hint n (ovl_segment_hint), a get issued while
 * n others are outstanding (the program promises to use destinations in
 * issue order); by default, a get
 * smaller than the model's piggyback threshold (its guard would cost more
 * than its wire time could hide), but only under the explicit monitor:
 * there ovl_get_need waits for a member, whereas under a fault monitor an
 * unguarded member read before its anchor would show bytes not yet arrived.
 *
 * Targets on the caller's node, by default where the model measured that
 * MPI copies their bytes with this rank's CPU (shared memory; OVL_RMA_LOCAL
 * forces either way): there is nothing to overlap;
 * the transfer completes inside the call, unsplit and unguarded (direct();
 * the model's rule, ovl__model_direct).
 *
 * Every MPI request of a guarded transfer is an engine op (progress.c) of
 * the domain it was issued on, through that domain's window of the segment
 * (segment.c); nothing here polls MPI. Waits (ovl_get_need, retiring)
 * enter the domain of each transfer they wait for.
 * Synchronisation (ovl_fence, ovl_barrier, ovl_lock/unlock, segment free)
 * retires transfers through ovl__rma_retire.
 */
#include "ovl_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STRIPS 64
#define MAX_STRIP  ((size_t)1 << 30) /* MPI counts are int */

struct xfer;

struct strip {
    struct ovl__op op;
    struct xfer *x;
    size_t off, len; /* in the user's buffer */
    int user;        /* put: sent from the user's (held) memory */
    int held;        /* get: arrived, install deferred (piggyback anchor) */
    int arrived;     /* get: its request completed */
    double t_issue;  /* OVL_TRACE: when its request was started (us) */
};

struct xfer {
    int is_put;
    struct ovl__seg *seg;
    struct ovl__dom *dom; /* issued on it: its engine drives the strips */
    MPI_Win win;          /* the segment's window of that domain */
    int rank;
    size_t toff, bytes;
    char *ubuf;
    ovl_monitor_t mon;
    struct ovl__watch *w;     /* get: receive region; put: hold region */
    char *staging;            /* get: whole transfer; put: copied bytes */
    size_t staging_cap;       /* its size (stage_get/stage_put) */
    int nstrips, left, first; /* first: index of the strip issued first */
    struct strip *st;
    struct ovl__req *req; /* ovl_get with a request */
    int err;
    int direct;          /* piggybacked get: MPI writes into dst, no guard */
    struct xfer *anchor; /* piggybacked: the get whose last strip waits for it */
    int nfollow;         /* anchor: piggybacked gets not yet arrived */
    int last;            /* anchor: index of its last-issued strip */
    int last_arrived;    /* that strip's request has completed */
    int lazy;            /* HUNT 5.2: only the next outstanding strip's first page is guarded */
    int down;            /* strips issued (and read) from the end */
    int gpos;            /* lazy: position (issue order) of the guarded strip */
    struct xfer *next, *prev;
};

static struct {
    pthread_mutex_t lock; /* the list and every xfer's counters */
    struct xfer *head;
    int n;
    int err; /* first transfer error not yet reported by a retire */
    /* stats */
    atomic_ullong transfers, strips, split, bytes, waits, wait_ns;
} X = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ---- hints ------------------------------------------------------------------ */

/* Kept in the segment (struct ovl__seg), read under X.lock when a transfer
 * on it is planned. */
int ovl_segment_hint(ovl_segment_t seg, const ovl_param_t *param)
{
    static const char *fn = "ovl_segment_hint";
    int rc;
    struct ovl__seg *s = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__seg_lookup(fn, seg, &s)) ||
        (rc = ovl__param_check(fn, param,
                               OVL_PARAM_FIELD_DECOMP | OVL_PARAM_FIELD_ORDER |
                                   OVL_PARAM_FIELD_PIGGYBACK)))
        return rc;
    if (!param)
        return OVL_SUCCESS;
    const uint64_t m = param->field_mask;
    if ((m & OVL_PARAM_FIELD_DECOMP) && param->decomp > MAX_STRIPS)
        return ovl__error(OVL_ERR_ARG, fn, "param->decomp %u above %d", param->decomp, MAX_STRIPS);
    if ((m & OVL_PARAM_FIELD_ORDER) && (unsigned)param->order > OVL_ORDER_RANDOM)
        return ovl__error(OVL_ERR_ARG, fn, "unknown param->order %d", (int)param->order);
    pthread_mutex_lock(&X.lock);
    if (m & OVL_PARAM_FIELD_DECOMP)
        s->decomp = param->decomp;
    if (m & OVL_PARAM_FIELD_ORDER)
        s->order = param->order;
    if (m & OVL_PARAM_FIELD_PIGGYBACK) {
        s->piggyback = param->piggyback;
        s->piggy_hint = 1;
    }
    pthread_mutex_unlock(&X.lock);
    return OVL_SUCCESS;
}

/* ---- strips ------------------------------------------------------------------ */

/* Cut [0, bytes) of a buffer at @addr into strips whose inner boundaries
 * fall on page boundaries of the buffer; returns the count, and in *reason
 * why (enum ovl__split_reason; the caller counts one per transfer). */
static int plan(uintptr_t addr, size_t bytes, int peer, int may_split, unsigned decomp,
                ovl_order_t order, size_t *sz, int *reason)
{
    size_t n = 1;
    sz[0] = bytes;
    *reason = OVL__SPLIT_HINT;
    if (may_split && decomp > 0)
        n = ovl__model_strips(bytes, peer, sz, MAX_STRIPS, reason);
    if (n > 1 && decomp > 1) { /* more aggressive: equal strips */
        n = n * decomp > MAX_STRIPS ? MAX_STRIPS : n * decomp;
        for (size_t i = 0; i < n; i++)
            sz[i] = bytes / n + (i < bytes % n ? 1 : 0);
    }
    int big = 0;
    for (size_t i = 0; i < n; i++)
        big |= sz[i] > MAX_STRIP;
    if (big) { /* only beyond MPI's int counts: equal strips that fit */
        size_t m = (bytes + MAX_STRIP - 1) / MAX_STRIP;
        n = m > n ? (m > MAX_STRIPS ? MAX_STRIPS : m) : n;
        for (size_t i = 0; i < n; i++)
            sz[i] = bytes / n + (i < bytes % n ? 1 : 0);
    }
    if (order == OVL_ORDER_DOWN) /* the part read first is the end: small strips there */
        for (size_t i = 0; i < n / 2; i++) {
            size_t t = sz[i];
            sz[i] = sz[n - 1 - i];
            sz[n - 1 - i] = t;
        }
    /* boundaries on pages of the destination, no empty strips */
    size_t ps = ovl__watch_page(), at = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t end = i + 1 == n ? bytes : at + sz[i];
        if (i + 1 < n) {
            uintptr_t e = addr + end;
            uintptr_t r = (e + ps / 2) / ps * ps; /* nearest page boundary */
            end = r > addr ? (size_t)(r - addr) : 0;
            if (end > bytes)
                end = bytes;
        }
        if (end > at) {
            sz[k++] = end - at;
            at = end;
        }
    }
    if (at < bytes) {
        if (k)
            sz[k - 1] += bytes - at;
        else
            sz[k++] = bytes;
    }
    return (int)(k ? k : 1);
}

/* ---- list -------------------------------------------------------------------- */

static void list_add_locked(struct xfer *x)
{
    x->prev = NULL;
    x->next = X.head;
    if (X.head)
        X.head->prev = x;
    X.head = x;
    X.n++;
}

static void list_remove_locked(struct xfer *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        X.head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    X.n--;
}

int ovl__rma_outstanding(struct ovl__seg *s)
{
    int n = 0;
    pthread_mutex_lock(&X.lock);
    for (struct xfer *x = X.head; x; x = x->next)
        if (!s || x->seg == s)
            n++;
    pthread_mutex_unlock(&X.lock);
    return n;
}

static int overlaps(const char *a, size_t an, const char *b, size_t bn)
{
    return an && bn && a < b + bn && b < a + an;
}

static void lazy_advance(struct xfer *x, int first);

/* ---- completion (driver) ------------------------------------------------------- */

static void xfer_free(struct xfer *x)
{
    if (x->w)
        ovl__watch_destroy(x->w);
    if (x->staging_cap) /* else none, or the monitor's landing */
        ovl__stage_put(x->staging, x->staging_cap);
    free(x->st);
    free(x);
}

static void install(struct xfer *x, struct strip *p)
{
    if (x->err)
        return;
    double t0 = ovl__trace_on ? ovl__now_us() : 0;
    ovl__watch_recv_install(x->w, p->off, x->staging + p->off, p->len);
    if (ovl__trace_on)
        ovl__trace_complete("rma", "install", t0, ovl__now_us() - t0, "offset", (long long)p->off,
                            "bytes", (long long)p->len, NULL, 0);
}

/* The last strip of @x arrived (lock held): finish it. Returns a transfer
 * to finish in turn (an anchor whose train has now arrived), or NULL. */
static struct xfer *finish_locked(struct xfer *x)
{
    struct xfer *next = NULL;
    if (x->is_put) {
        if (x->w)
            ovl__watch_hold_finish(x->w);
    } else if (x->w) {
        ovl__watch_recv_finish(x->w);
    }
    if (x->err && !X.err)
        X.err = x->err;
    list_remove_locked(x);
    struct xfer *a = x->anchor;
    if (a && --a->nfollow == 0 && a->st[a->last].held) {
        a->st[a->last].held = 0;
        a->st[a->last].arrived = 1;
        if (a->lazy)
            lazy_advance(a, 0);
        install(a, &a->st[a->last]);
        if (--a->left == 0)
            next = a;
    }
    if (x->nfollow > 0) /* followers outlive their anchor: detach them */
        for (struct xfer *f = X.head; f; f = f->next)
            if (f->anchor == x)
                f->anchor = NULL;
    xfer_free(x);
    return next;
}

/* Strip at position @k of the issue (= reading) order. */
static struct strip *in_order(struct xfer *x, int k)
{
    return &x->st[x->down ? x->nstrips - 1 - k : k];
}

/* Lazy protection (lock held): guard the first page the program will read
 * of the first strip still outstanding, skipping every strip that arrived.
 * Runs before the strip that just arrived is opened, so a sequential reader
 * always meets the guard before data that is not there. */
static void lazy_advance(struct xfer *x, int first)
{
    int k = x->gpos;
    while (k < x->nstrips && in_order(x, k)->arrived)
        k++;
    if (k == x->gpos && !first)
        return; /* that strip's page is guarded already */
    x->gpos = k;
    if (k >= x->nstrips)
        return;
    struct strip *p = in_order(x, k);
    if (ovl__watch_recv_guard(x->w, x->down ? p->off + p->len - 1 : p->off) != 0 && !x->err)
        x->err = ovl__error(OVL_ERR_MONITOR, "ovl_get",
                            "cannot guard a page for lazy protection (vm.max_map_count?)");
}

static void strip_done(struct ovl__op *op, MPI_Status *st)
{
    struct strip *p = op->ctx;
    struct xfer *x = p->x;
    struct ovl__req *first = NULL;
    pthread_mutex_lock(&X.lock);
    if (st->MPI_ERROR != MPI_SUCCESS && !x->err)
        x->err = ovl__mpi_error(st->MPI_ERROR, x->is_put ? "ovl_put" : "ovl_get", "strip transfer");
    if (ovl__trace_on)
        ovl__trace_complete("rma", x->is_put ? "put-strip" : "get-strip", p->t_issue,
                            ovl__now_us() - p->t_issue, "peer", x->rank, "offset",
                            (long long)p->off, "bytes", (long long)p->len);
    int count = 1;
    if (x->is_put) {
        if (p->user && x->w)
            ovl__watch_hold_release(x->w, p->off, p->len);
    } else if (x->w) {
        if (p == &x->st[x->last])
            x->last_arrived = 1;
        if (p == &x->st[x->last] && x->nfollow > 0) {
            p->held = 1; /* shown once the train behind it has arrived */
            count = 0;
        } else {
            p->arrived = 1;
            if (x->lazy)
                lazy_advance(x, 0); /* before opening it */
            install(x, p);
        }
    }
    if (x->req && p == &x->st[x->first]) {
        first = x->req;
        x->req = NULL;
        first->status.bytes = p->len;
        first->status.error = x->err;
        first->status.source = x->rank;
    }
    struct xfer *fin = NULL;
    if (count && --x->left == 0)
        fin = x;
    while (fin)
        fin = finish_locked(fin);
    pthread_mutex_unlock(&X.lock);
    if (first)
        ovl__req_complete(first);
}

/* ---- issuing -------------------------------------------------------------------- */

static int check_common(const char *fn, const void *buf, int rank, size_t offset, size_t bytes,
                        ovl_segment_t seg, struct ovl__seg **out)
{
    int rc;
    struct ovl__seg *s = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__seg_lookup(fn, seg, &s)) ||
        (rank != MPI_PROC_NULL && (rc = ovl__check_peer(fn, rank, 0))))
        return rc;
    if (!buf && bytes > 0)
        return ovl__error(OVL_ERR_ARG, fn, "buffer is NULL with %zu bytes", bytes);
    *out = NULL;
    if (rank == MPI_PROC_NULL)
        return OVL_SUCCESS; /* as in MPI: no transfer (the caller sees no segment) */
    size_t cap = s->sizes[rank];
    if (offset > cap || bytes > cap - offset)
        return ovl__error(OVL_ERR_ARG, fn, "range [%zu, %zu) beyond rank %d's segment of %zu bytes",
                          offset, offset + bytes, rank, cap);
    *out = s;
    return OVL_SUCCESS;
}

/* Start every strip's MPI request (lock held; x is on the list). */
static int issue_locked(struct xfer *x, const char *fn)
{
    int rc = MPI_SUCCESS, issued = 0;
    int n = x->nstrips;
    for (int k = 0; k < n && rc == MPI_SUCCESS; k++) {
        /* DOWN: the end is read first, so it leaves first */
        int i = x->down ? n - 1 - k : k;
        struct strip *p = &x->st[i];
        if (k == 0)
            x->first = i;
        if (k == n - 1)
            x->last = i;
        p->x = x;
        p->op.ctx = p;
        p->op.done = strip_done;
        p->op.kind = OVL__OP_RMA;
        p->op.peer = x->rank;
        p->op.mreq = MPI_REQUEST_NULL;
        if (ovl__trace_on)
            p->t_issue = ovl__now_us();
        MPI_Aint disp = (MPI_Aint)(x->toff + p->off);
        if (x->is_put) {
            const char *src = p->user ? x->ubuf + p->off : x->staging + p->off;
            rc = MPI_Rput(src, (int)p->len, MPI_BYTE, x->rank, disp, (int)p->len, MPI_BYTE, x->win,
                          &p->op.mreq);
        } else {
            char *dst = x->direct ? x->ubuf + p->off : x->staging + p->off;
            rc = MPI_Rget(dst, (int)p->len, MPI_BYTE, x->rank, disp, (int)p->len, MPI_BYTE, x->win,
                          &p->op.mreq);
        }
        if (rc != MPI_SUCCESS)
            break;
        issued++;
    }
    if (rc != MPI_SUCCESS) {
        x->err = ovl__mpi_error(rc, fn, x->is_put ? "MPI_Rput" : "MPI_Rget");
        /* the strips that were not issued count as done */
        x->left -= n - issued;
    }
    return issued;
}

/* Hand the issued strips to the engine (no lock: the engine may complete
 * them at once on another thread). */
static void engine_add_all(struct xfer *x, int issued, int n)
{
    for (int k = 0; k < issued; k++) {
        int i = x->down ? n - 1 - k : k;
        if (ovl__engine_post(&x->st[i].op, NULL) != OVL_SUCCESS) {
            MPI_Status st;
            MPI_Wait(&x->st[i].op.mreq, &st);
            st.MPI_ERROR = MPI_SUCCESS;
            strip_done(&x->st[i].op, &st);
        }
    }
}

static void count(size_t bytes, int nstrips)
{
    atomic_fetch_add_explicit(&X.transfers, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&X.strips, (unsigned long long)nstrips, memory_order_relaxed);
    atomic_fetch_add_explicit(&X.bytes, bytes, memory_order_relaxed);
    if (nstrips > 1)
        atomic_fetch_add_explicit(&X.split, 1, memory_order_relaxed);
    ovl__stats_transfer(bytes, (unsigned)nstrips);
}

/* A destination overlaps outstanding transfer @o (lock held): unlock and
 * report it. */
static int overlap_error_unlock(const char *fn, const struct xfer *o, const void *dst, size_t bytes)
{
    /* read o before unlocking: the driver may free it at once */
    int o_put = o->is_put;
    void *o_buf = o->ubuf;
    size_t o_bytes = o->bytes;
    pthread_mutex_unlock(&X.lock);
    return ovl__error(OVL_ERR_ARG, fn,
                      "destination [%p, +%zu) overlaps an outstanding %s buffer [%p, +%zu): "
                      "retire it first (ovl_fence, ovl_get_need)",
                      dst, bytes, o_put ? "ovl_put source" : "ovl_get destination", o_buf, o_bytes);
}

/* ---- targets on this node reached directly (ovl__model_direct) -----------------
 * MPI moves such bytes with a copy made by this rank's own CPU (shared
 * memory): there is no wire time to hide, and strips would only add
 * installs and faults. The transfer completes inside the call, straight
 * between the user's buffer and the window, neither split nor guarded.
 * The calls are those of a blocking get or put in MPI code (MPI_Get or
 * MPI_Put, then MPI_Win_flush_local), the baseline ovl is measured
 * against. Nothing else of this rank to @rank is outstanding (every
 * transfer to it is direct), so the flush waits for this one alone. */
static int direct(const char *fn, int is_put, char *buf, struct ovl__seg *s, int rank,
                  size_t offset, size_t bytes)
{
    double t0 = ovl__trace_on ? ovl__now_us() : 0;
    int rc = MPI_SUCCESS;
    /* A buffer on another pending receive's guarded edge page: MPI (or the
     * kernel for it) cannot reach that page, so the bytes go through
     * staging of ovl's own. */
    char *user = buf, *stage = NULL;
    size_t cap = 0;
    if (ovl__watch_edge_touch(buf, bytes) && (stage = ovl__stage_get(bytes, &cap)) != NULL) {
        if (is_put)
            ovl__watch_read(stage, buf, bytes);
        buf = stage;
    }
    MPI_Win win = ovl__seg_win(s, ovl__dom_cur());
    for (size_t at = 0; at < bytes && rc == MPI_SUCCESS;) {
        int n = (int)(bytes - at < MAX_STRIP ? bytes - at : MAX_STRIP);
        MPI_Aint disp = (MPI_Aint)(offset + at);
        rc = is_put ? MPI_Put(buf + at, n, MPI_BYTE, rank, disp, n, MPI_BYTE, win)
                    : MPI_Get(buf + at, n, MPI_BYTE, rank, disp, n, MPI_BYTE, win);
        if (rc == MPI_SUCCESS)
            rc = MPI_Win_flush_local(rank, win);
        at += (size_t)n;
    }
    if (stage) {
        if (!is_put && rc == MPI_SUCCESS)
            ovl__watch_write(user, stage, bytes);
        ovl__stage_put(stage, cap);
    }
    ovl__stats_split_reason(OVL__SPLIT_LOCAL);
    count(bytes, 1);
    if (ovl__trace_on)
        ovl__trace_complete("rma", is_put ? "put-local" : "get-local", t0, ovl__now_us() - t0,
                            "peer", rank, "offset", (long long)offset, "bytes", (long long)bytes);
    return rc == MPI_SUCCESS ? OVL_SUCCESS : ovl__mpi_error(rc, fn, is_put ? "MPI_Put" : "MPI_Get");
}

static int get_impl(const char *fn, void *dst, int rank, size_t offset, size_t bytes,
                    ovl_segment_t seg, ovl_request_t *req)
{
    int rc;
    struct ovl__seg *s = NULL;
    if ((rc = check_common(fn, dst, rank, offset, bytes, seg, &s)))
        return rc;
    ovl_monitor_t mon = ovl__watch_resolve(OVL_MONITOR_AUTO);
    /* a get with a request is waited for by the program; a plain get nobody chose the
     * explicit monitor for, where no fault monitor works, completes here */
    const int degraded = !req && bytes > 0 && s && ovl__watch_degraded(fn, OVL_MONITOR_AUTO, mon);
    if (degraded && (rc = ovl__check_not_in_callback(fn)))
        return rc;
    struct ovl__req *r = NULL;
    ovl_request_t h = OVL_REQUEST_NULL;
    if (req && ovl__req_alloc(OVL__REQ_RMA, &r, &h) != OVL_SUCCESS)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a request");
    if (bytes == 0 || !s) {
        count(0, 0);
        if (r) {
            r->status.source = rank;
            ovl__req_complete(r); /* nothing to wait for */
            *req = h;
        }
        return OVL_SUCCESS;
    }
    if (mon != OVL_MONITOR_EXPLICIT && ovl__watch_on_my_stack(dst, bytes)) {
        rc = ovl__error(OVL_ERR_ARG, fn,
                        "destination %p is on the thread's stack: the %s monitor cannot guard "
                        "stack pages; use heap memory or OVL_MONITOR_EXPLICIT",
                        dst, ovl_monitor_name(mon));
        goto fail_req;
    }
    if (ovl__model_direct(rank)) {
        pthread_mutex_lock(&X.lock);
        for (struct xfer *o = X.head; o; o = o->next)
            if (overlaps(o->ubuf, o->bytes, dst, bytes)) {
                rc = overlap_error_unlock(fn, o, dst, bytes);
                goto fail_req;
            }
        pthread_mutex_unlock(&X.lock);
        if ((rc = direct(fn, 0, dst, s, rank, offset, bytes)))
            goto fail_req;
        if (r) { /* complete already */
            r->status.bytes = bytes;
            r->status.source = rank;
            ovl__req_complete(r);
            *req = h;
        }
        return OVL_SUCCESS;
    }
    struct xfer *x = calloc(1, sizeof *x);
    size_t sz[MAX_STRIPS + 2];
    if (!x) {
        rc = ovl__error(OVL_ERR_NOMEM, fn, "no memory for a transfer");
        goto fail_req;
    }
    x->seg = s;
    x->dom = ovl__dom_cur();
    x->win = ovl__seg_win(s, x->dom);
    x->rank = rank;
    x->toff = offset;
    x->bytes = bytes;
    x->ubuf = dst;
    x->mon = mon;
    x->req = r;

    pthread_mutex_lock(&X.lock);
    /* Refuse a destination that overlaps an outstanding transfer's buffer;
     * find the train's anchor (HUNT 5.3). */
    size_t ps = ovl__watch_page();
    uintptr_t plo = (uintptr_t)dst / ps * ps, phi = ((uintptr_t)dst + bytes + ps - 1) / ps * ps;
    int ngets = 0, page_shared = 0;
    struct xfer *anchor = NULL;
    for (struct xfer *o = X.head; o; o = o->next) {
        if (overlaps(o->ubuf, o->bytes, dst, bytes)) {
            rc = overlap_error_unlock(fn, o, dst, bytes);
            free(x);
            goto fail_req;
        }
        if (o->is_put)
            continue;
        ngets++;
        if ((uintptr_t)o->ubuf < phi && (uintptr_t)o->ubuf + o->bytes + ps > plo)
            page_shared = 1;
        /* the list is newest first; a get with a request still
         * waiting for its only strip cannot hold that strip back */
        if (!anchor && !o->direct && o->w && !o->last_arrived && !(o->req && o->first == o->last) &&
            o->dom == x->dom)
            anchor = o; /* (its domain drives the train too) */
    }
    /* A train (HUNT 5.3): under the segment's piggyback hint, by its count of
     * outstanding gets, with any monitor (the program promised to use
     * destinations in issue order); by default, below the model's
     * piggyback threshold and only under the explicit monitor, where
     * ovl_get_need waits for an unguarded member (under a fault monitor a
     * member read before its anchor would show bytes not yet there). */
    int piggy =
        anchor && !page_shared && !r &&
        (s->piggy_hint ? s->piggyback > 0 && (unsigned)ngets >= s->piggyback
                       : mon == OVL_MONITOR_EXPLICIT && bytes < ovl__model_piggyback_threshold());
    int reason = OVL__SPLIT_TRAIN;
    x->nstrips = piggy ? 1 : plan((uintptr_t)dst, bytes, rank, 1, s->decomp, s->order, sz, &reason);
    if (piggy)
        sz[0] = bytes;
    if (r && x->nstrips > 1) {
        /* Explicitly non-blocking (HUNT 5.3), a get the model splits: the
         * program overlaps already. One large strip, about half, is read
         * first and leaves first (the request completes with it); the rest
         * is planned as a get of its own, demand-driven. Under DOWN the part
         * read first is the end. The cut falls on a page boundary of dst, as
         * the strips' do, and the large strip fits MPI's int count. */
        size_t half = bytes / 2 < MAX_STRIP - ps ? bytes / 2 : MAX_STRIP - ps;
        uintptr_t a = (uintptr_t)dst;
        uintptr_t cut = (a + (s->order == OVL_ORDER_DOWN ? bytes - half : half) + ps / 2) / ps * ps;
        if (cut > a && cut < a + bytes) {
            size_t lo = (size_t)(cut - a), hi = bytes - lo, k;
            int ignored;
            if (s->order == OVL_ORDER_DOWN) { /* [rest][large] */
                k = (size_t)plan(a, lo, rank, 1, s->decomp, s->order, sz, &ignored);
                sz[k] = hi;
            } else { /* [large][rest] */
                k = (size_t)plan(cut, hi, rank, 1, s->decomp, s->order, sz + 1, &ignored);
                sz[0] = lo;
            }
            x->nstrips = (int)k + 1;
            reason = OVL__SPLIT_NONBLOCKING;
        }
    }
    ovl__stats_split_reason(reason);
    x->st = calloc((size_t)x->nstrips, sizeof *x->st);
    if (!x->st) {
        pthread_mutex_unlock(&X.lock);
        rc = ovl__error(OVL_ERR_NOMEM, fn, "no memory for %d strips", x->nstrips);
        free(x);
        goto fail_req;
    }
    size_t at = 0;
    for (int i = 0; i < x->nstrips; i++) {
        x->st[i].off = at;
        x->st[i].len = sz[i];
        at += sz[i];
    }
    if (piggy) {
        x->direct = 1;
        x->anchor = anchor;
        anchor->nfollow++;
    } else if ((rc = (x->lazy = mon == OVL_MONITOR_MPROTECT && s->order != OVL_ORDER_RANDOM)
                         ? ovl__watch_recv_create_lazy(fn, dst, bytes, &x->w)
                         : ovl__watch_recv_create(fn, mon, dst, bytes, &x->w)) != OVL_SUCCESS) {
        pthread_mutex_unlock(&X.lock);
        free(x->st);
        free(x);
        goto fail_req;
    } else if (!(x->staging = ovl__watch_recv_landing(x->w))) {
        /* the monitor has no place MPI may write to: a staging buffer */
        if (!(x->staging = ovl__stage_get(bytes, &x->staging_cap))) {
            pthread_mutex_unlock(&X.lock);
            ovl__watch_recv_finish(x->w);
            ovl__watch_destroy(x->w);
            free(x->st);
            free(x);
            rc = ovl__error(OVL_ERR_NOMEM, fn,
                            "no memory for %zu bytes of staging (out of memory, or "
                            "vm.max_map_count reached)",
                            bytes);
            goto fail_req;
        }
    }
    x->left = x->nstrips;
    x->down = s->order == OVL_ORDER_DOWN;
    if (x->lazy)
        lazy_advance(x, 1); /* the first strip's first page */
    list_add_locked(x);
    int n = x->nstrips;
    int issued = issue_locked(x, fn);
    int err = x->err;
    struct xfer *fin = x->left == 0 ? x : NULL;
    while (fin)
        fin = finish_locked(fin);
    pthread_mutex_unlock(&X.lock);
    count(bytes, n);
    if (issued)
        engine_add_all(x, issued, n);
    if (err) {
        if (r && !issued)
            ovl__req_release(r);
        return err;
    }
    if (req)
        *req = h;
    return degraded ? ovl_get_need(dst, bytes) : OVL_SUCCESS;

fail_req:
    if (r)
        ovl__req_release(r);
    return rc;
}

int ovl_get(void *dst, int rank, size_t offset, size_t bytes, ovl_segment_t seg,
            const ovl_param_t *param, ovl_request_t *req)
{
    int rc = ovl__param_check("ovl_get", param, 0);
    return rc ? rc : get_impl("ovl_get", dst, rank, offset, bytes, seg, req);
}

struct pending_arg {
    int (*pending)(const void *);
    const void *arg;
};

static int pending_not(const void *p)
{
    const struct pending_arg *a = p;
    return !a->pending(a->arg);
}

/* Wait (driving progress) while @pending() holds; counts the wait and, under
 * OVL_TRACE, records it as a `wait` event, as ovl_wait's are, with @key
 * (a string literal) = @val saying what was waited for. */
static int wait_while(const char *fn, int (*pending)(const void *), const void *arg,
                      const char *key, long long val)
{
    if (!pending(arg))
        return OVL_SUCCESS;
    int rc;
    if ((rc = ovl__check_not_in_callback(fn)))
        return rc;
    double t0 = ovl__now_us();
    ovl__engine_spin(pending_not, &(struct pending_arg){ pending, arg });
    unsigned long long ns = (unsigned long long)((ovl__now_us() - t0) * 1e3);
    atomic_fetch_add_explicit(&X.waits, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&X.wait_ns, ns, memory_order_relaxed);
    ovl__stats_wait_ns(ns);
    if (ovl__trace_on)
        ovl__trace_complete("wait", "wait", t0, (double)ns / 1e3, key, val, NULL, 0, NULL, 0);
    return OVL_SUCCESS;
}

/* Waiting for transfers that may have been issued on other domains: the
 * domain of one still pending, entered while its own are waited for (its
 * engine drives them), until none is left. */
struct range_arg {
    const char *p;
    size_t n;
};

/* The domain (@d, or any if NULL) of an outstanding get into [p, p+n)
 * with a page there not yet valid; NULL if none. */
static struct ovl__dom *range_pending_on(const struct range_arg *a, struct ovl__dom *d)
{
    struct ovl__dom *pend = NULL;
    pthread_mutex_lock(&X.lock);
    for (struct xfer *x = X.head; x && !pend; x = x->next) {
        if (x->is_put || (d && x->dom != d) || !overlaps(x->ubuf, x->bytes, a->p, a->n))
            continue;
        if (x->direct || !x->w) {
            pend = x->dom;
            continue;
        }
        const char *lo = a->p > x->ubuf ? a->p : x->ubuf;
        const char *hi = a->p + a->n < x->ubuf + x->bytes ? a->p + a->n : x->ubuf + x->bytes;
        if (!ovl__watch_recv_ready(x->w, (size_t)(lo - x->ubuf), (size_t)(hi - lo)))
            pend = x->dom;
    }
    pthread_mutex_unlock(&X.lock);
    return pend;
}

static int range_pending_here(const void *arg)
{
    return range_pending_on(arg, ovl__dom_cur()) != NULL;
}

int ovl_get_need(const void *dst, size_t bytes)
{
    static const char *fn = "ovl_get_need";
    int rc;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (!dst && bytes > 0)
        return ovl__error(OVL_ERR_ARG, fn, "dst is NULL with %zu bytes", bytes);
    struct range_arg a = { dst, bytes };
    struct ovl__dom *d;
    while ((d = range_pending_on(&a, NULL)) != NULL) {
        struct ovl__dom *prev = ovl__dom_enter(d);
        rc = wait_while(fn, range_pending_here, &a, "bytes", (long long)bytes);
        ovl__dom_leave(prev);
        if (rc)
            return rc;
    }
    return OVL_SUCCESS;
}

int ovl_put(const void *src, int rank, size_t offset, size_t bytes, ovl_segment_t seg,
            const ovl_param_t *param)
{
    static const char *fn = "ovl_put";
    int rc;
    struct ovl__seg *s = NULL;
    if ((rc = ovl__param_check(fn, param, 0)) ||
        (rc = check_common(fn, src, rank, offset, bytes, seg, &s)))
        return rc;
    if (bytes == 0 || !s) {
        count(0, 0);
        return OVL_SUCCESS;
    }
    /* A source still arriving through ovl_get: MPI must not read guarded
     * pages, so wait for it (as a read by the program would). */
    if ((rc = ovl_get_need(src, bytes)))
        return rc;
    if (ovl__watch_pending(src, bytes, 1))
        return ovl__error(OVL_ERR_PENDING, fn,
                          "source [%p, +%zu) holds bytes of a delta receive that have not "
                          "arrived yet: wait for them first (ovl_delta_need, ovl_wait)",
                          src, bytes);
    if (ovl__model_direct(rank))
        return direct(fn, 1, (char *)src, s, rank, offset, bytes);
    ovl_monitor_t mon = ovl__watch_resolve(OVL_MONITOR_AUTO);
    size_t ps = ovl__watch_page();
    uintptr_t a = (uintptr_t)src, e = a + bytes;
    uintptr_t ia = (a + ps - 1) / ps * ps, ie = e / ps * ps; /* interior pages */
    int hold = mon != OVL_MONITOR_EXPLICIT && ie > ia && !ovl__watch_on_my_stack(src, bytes);
    struct xfer *x = calloc(1, sizeof *x);
    if (!x)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a transfer");
    x->is_put = 1;
    x->seg = s;
    x->dom = ovl__dom_cur();
    x->win = ovl__seg_win(s, x->dom);
    x->rank = rank;
    x->toff = offset;
    x->bytes = bytes;
    x->ubuf = (char *)src;
    x->mon = mon;

    pthread_mutex_lock(&X.lock);
    for (struct xfer *o = X.head; o && hold; o = o->next)
        if (overlaps(o->ubuf, o->bytes, src, bytes))
            hold = 0; /* another put holds these pages: copy instead */
    size_t head = hold ? ia - a : 0, tail = hold ? e - ie : 0, mid = hold ? ie - ia : 0;
    size_t sz[MAX_STRIPS + 2];
    int nm = 0;
    int reason;
    if (hold)
        nm = plan(ia, mid, rank, 1, s->decomp, OVL_ORDER_UP, sz + (head ? 1 : 0), &reason);
    else
        nm = plan(a, bytes, rank, 1, s->decomp, OVL_ORDER_UP, sz, &reason);
    ovl__stats_split_reason(reason);
    int n = nm;
    if (hold) {
        if (head)
            sz[0] = head, n++;
        if (tail)
            sz[n++] = tail;
    }
    x->st = calloc((size_t)n, sizeof *x->st);
    x->staging = ovl__stage_get(hold ? (head + tail ? bytes : 1) : bytes, &x->staging_cap);
    if (!x->st || !x->staging) {
        pthread_mutex_unlock(&X.lock);
        free(x->st);
        ovl__stage_put(x->staging, x->staging_cap);
        free(x);
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a transfer of %zu bytes", bytes);
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        x->st[i].off = at;
        x->st[i].len = sz[i];
        x->st[i].user = hold && at >= head && at < head + mid;
        at += sz[i];
    }
    if (!hold) {
        ovl__watch_read(x->staging, src, bytes);
    } else {
        /* the copied bytes sit at their own offsets in staging */
        if (head)
            ovl__watch_read(x->staging, src, head);
        if (tail)
            ovl__watch_read(x->staging + head + mid, (const char *)src + head + mid, tail);
        if ((rc = ovl__watch_hold_create(mon, src, bytes, &x->w)) != OVL_SUCCESS) {
            pthread_mutex_unlock(&X.lock);
            free(x->st);
            ovl__stage_put(x->staging, x->staging_cap);
            free(x);
            return rc;
        }
    }
    x->nstrips = x->left = n;
    list_add_locked(x);
    int issued = issue_locked(x, fn);
    int err = x->err;
    struct xfer *fin = x->left == 0 ? x : NULL;
    while (fin)
        fin = finish_locked(fin);
    pthread_mutex_unlock(&X.lock);
    count(bytes, n);
    if (issued)
        engine_add_all(x, issued, n);
    return err;
}

/* ---- retiring ------------------------------------------------------------------- */

struct retire_arg {
    struct ovl__seg *s;
    int rank;
};

/* The domain (@d, or any if NULL) of an outstanding transfer matching @a. */
static struct ovl__dom *retire_pending_on(const struct retire_arg *a, struct ovl__dom *d)
{
    struct ovl__dom *pend = NULL;
    pthread_mutex_lock(&X.lock);
    for (struct xfer *x = X.head; x && !pend; x = x->next)
        if ((!a->s || x->seg == a->s) && (a->rank < 0 || x->rank == a->rank) && (!d || x->dom == d))
            pend = x->dom;
    pthread_mutex_unlock(&X.lock);
    return pend;
}

static int retire_pending_here(const void *arg)
{
    return retire_pending_on(arg, ovl__dom_cur()) != NULL;
}

int ovl__rma_retire(struct ovl__seg *s, int rank, struct ovl__dom *only)
{
    struct retire_arg a = { s, rank };
    struct ovl__dom *d;
    int rc = OVL_SUCCESS;
    while (!rc && (d = retire_pending_on(&a, only)) != NULL) {
        struct ovl__dom *prev = ovl__dom_enter(d);
        rc = wait_while("ovl_fence", retire_pending_here, &a, "peer", rank);
        ovl__dom_leave(prev);
    }
    if (rc)
        return rc;
    /* Puts complete at their targets. */
    if (!s) {
        rc = ovl__seg_flush_all();
    } else {
        int mrc = ovl__seg_flush(s, only, rank);
        if (mrc != MPI_SUCCESS)
            rc = ovl__mpi_error(mrc, "ovl_fence", "MPI_Win_flush");
    }
    pthread_mutex_lock(&X.lock);
    if (!rc && X.err)
        rc = X.err;
    X.err = 0;
    pthread_mutex_unlock(&X.lock);
    return rc;
}

/* The calling domain's transfers on @seg (ovl.h: a fence retires the
 * calling domain's; ovl_barrier every domain's). */
int ovl_fence(ovl_segment_t seg)
{
    static const char *fn = "ovl_fence";
    int rc;
    struct ovl__seg *s = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__seg_lookup(fn, seg, &s)))
        return rc;
    struct ovl__dom *d = ovl__dom_cur();
    if ((rc = ovl__rma_retire(s, -1, d)))
        return rc;
    MPI_Win_sync(ovl__seg_win(s, d));
    return OVL_SUCCESS;
}

/* ---- statistics ------------------------------------------------------------------ */

void ovl__rma_stats(ovl_stats_t *st)
{
    st->rma_transfers = atomic_load(&X.transfers);
    st->rma_strips = atomic_load(&X.strips);
    st->rma_split = atomic_load(&X.split);
    st->rma_bytes = atomic_load(&X.bytes);
    st->rma_waits = atomic_load(&X.waits);
    st->rma_wait_us = (double)atomic_load(&X.wait_ns) / 1e3;
}

void ovl__rma_finalize(void)
{
    ovl__segment_free_all();
    atomic_store(&X.transfers, 0);
    atomic_store(&X.strips, 0);
    atomic_store(&X.split, 0);
    atomic_store(&X.bytes, 0);
    atomic_store(&X.waits, 0);
    atomic_store(&X.wait_ns, 0);
    pthread_mutex_lock(&X.lock);
    X.err = 0;
    pthread_mutex_unlock(&X.lock);
}
