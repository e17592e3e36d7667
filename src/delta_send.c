/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Delta send/receive, the send side: ovl_delta_send_begin, the pieces as
 * the program produces them, ovl_delta_send_end, and forwarding's send
 * half. The wire protocol and what both sides share are in delta_wire.c.
 *
 * Sender: with a fault monitor, the first write into a page past the
 * current delta sends everything before it (watch.c calls `produced`);
 * explicit mode merges the ranges ovl_delta_produced reports and sends a
 * contiguous range once it reaches the delta size. The delta size comes
 * from the model (model.c), fed with the production rate of the last sends
 * of the same kind (ovl__delta_rate_for: the median of the last five).
 * A send whose buffer is a pending delta receive forwards it: every piece
 * that arrives is sent on at once (cascades and broadcast trees).
 */
#include "delta_internal.h"

#include <limits.h>

#include <stdlib.h>
#include <string.h>

struct send_piece {
    struct ovl__op op;
    struct ovl__delta *d;
    int paged; /* a copy, from ovl__page_alloc; else malloc'd */
    struct piece_hdr h;
    char data[]; /* a copied piece: the bytes right after h */
};

/* Production rates remembered per kind of message: a program sends the
 * same messages again and again (a halo to each neighbour, every
 * iteration), and the rates of the last messages of the same kind predict
 * the next one far better than the last message of any kind, whose rate
 * may come from another size (fixed costs weigh more on a small message)
 * or another loop. The median of the last RATE_HIST of a kind: one message
 * produced slowly (preempted, its first touch of cold memory) then does not
 * move the next one's delta size (in the delta-size sweep, OS-triggered 32
 * KB messages at about 180 B/us went to 4 KiB pieces after one at 76 B/us,
 * 4-9 % slower than the 8 KiB the usual rate gives). Kept for the life of
 * the process. */
#define NRATES    32
#define RATE_HIST 5
struct rate_seen {
    size_t cap; /* 0: unused */
    int peer, faults;
    double hist[RATE_HIST]; /* the last rates, oldest replaced first */
    unsigned n;             /* rates stored so far */
};

/* Median of the rates a kind has stored (rlock held). */
static double rate_median_locked(const struct rate_seen *k)
{
    unsigned n = k->n < RATE_HIST ? k->n : RATE_HIST;
    if (n == 0)
        return 0;
    double v[RATE_HIST];
    for (unsigned i = 0; i < n; i++) { /* insertion sort of at most RATE_HIST */
        double x = k->hist[i];
        unsigned j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct {
    _Atomic double rate; /* last observed production rate, bytes/us (any thread) */
    pthread_mutex_t rlock;
    struct rate_seen rates[NRATES];
    unsigned rnext; /* the slot a new kind replaces */
} D = { .rlock = PTHREAD_MUTEX_INITIALIZER };

/* The slot of kind (@cap, @peer, @faults), or -1 (rlock held). */
static int rate_slot_locked(size_t cap, int peer, int faults)
{
    for (int i = 0; i < NRATES; i++)
        if (D.rates[i].cap == cap && D.rates[i].peer == peer && D.rates[i].faults == faults)
            return i;
    return -1;
}

/* The production rate to size a send of @cap bytes to @peer with: the
 * median of the last sends of the same size, peer and triggering, else the
 * last of any (0: none yet). */
double ovl__delta_rate_for(size_t cap, int peer, int faults)
{
    pthread_mutex_lock(&D.rlock);
    int i = rate_slot_locked(cap, peer, faults);
    double r = i >= 0 ? rate_median_locked(&D.rates[i]) : 0;
    pthread_mutex_unlock(&D.rlock);
    return r > 0 ? r : atomic_load(&D.rate);
}

static void rate_store(size_t cap, int peer, int faults, double rate)
{
    atomic_store(&D.rate, rate);
    pthread_mutex_lock(&D.rlock);
    int i = rate_slot_locked(cap, peer, faults);
    if (i < 0) {
        i = (int)(D.rnext++ % NRATES); /* a new kind replaces the oldest */
        D.rates[i] = (struct rate_seen){ .cap = cap, .peer = peer, .faults = faults };
    }
    struct rate_seen *k = &D.rates[i];
    k->hist[k->n++ % RATE_HIST] = rate;
    pthread_mutex_unlock(&D.rlock);
}

/* ---- send side --------------------------------------------------------------- */

static void finish_send(struct ovl__delta *d)
{
    struct ovl__req *r = d->req;
    size_t stale = (size_t)-1;
    if (d->w) {
        stale = ovl__watch_send_stale(d->w);
        ovl__watch_send_finish(d->w);
    }
    ovl__stage_put(d->staging, d->staging_cap); /* a split piece's copy */
    d->staging = NULL;
    r->status.bytes = d->total;
    r->status.error = d->err ? d->err : stale != (size_t)-1 ? OVL_ERR_STALE : OVL_SUCCESS;
    if (d->err == 0 && stale != (size_t)-1)
        ovl__error(OVL_ERR_STALE, "ovl_delta_send",
                   "buffer %p written at offset %zu after that part was sent", (void *)d->buf,
                   stale);
    ovl__stats_transfer(d->total, d->npieces);
    if (ovl__trace_on)
        ovl__trace_complete("delta", "delta-send", d->t_trace, ovl__now_us() - d->t_trace, "bytes",
                            (long long)d->total, "pieces", d->npieces, "peer", d->peer);
    ovl__delta_active_remove(d);
    ovl__req_complete(r);
}

/* Done handler of the header and of every piece. */
static void piece_sent(struct ovl__op *op, MPI_Status *st)
{
    /* op is d->hdr_op or d->end_op (peer -2, ctx = d) or a piece (ctx = piece) */
    struct ovl__delta *d;
    struct send_piece *p = NULL;
    if (op->peer == -2) { /* header */
        d = op->ctx;
    } else {
        p = op->ctx;
        d = p->d;
    }
    ovl__spin_lock(&d->lock);
    if (st->MPI_ERROR != MPI_SUCCESS && !d->err)
        d->err = ovl__mpi_error(st->MPI_ERROR, "ovl_delta_send", "piece transfer");
    d->inflight--;
    /* (the last piece may leave before send_end: the request completes
     * only after it) */
    int fin = d->last_sent && atomic_load(&d->ended) && d->inflight == 0 && !d->finished;
    if (fin)
        d->finished = 1;
    ovl__spin_unlock(&d->lock);
    if (p && p->paged)
        ovl__page_free(p);
    else
        free(p);
    if (fin)
        finish_send(d);
}

/* A piece send may be polled slowly (struct ovl__op, `patient`) while the
 * program is still producing its message: the program's next fault,
 * ovl_delta_produced or ovl_delta_send_end comes soon and drives progress,
 * and a poll by the progress thread in between would only take the CPU the
 * production runs on. Not for a send with a continuation or one
 * forwarding a receive (arrivals drive it); nor, unless this rank's CPU
 * moves the bytes anyway, once the send has ended (send_end wakes the
 * thread) or for pieces above the eager limit, whose rendezvous waits for
 * polls. Engine lock held (cont_registered). */
static int piece_patient(const struct ovl__op *op)
{
    const struct send_piece *p = op->ctx;
    const struct ovl__delta *d = p->d;
    if (d->req->cont_registered || d->forwarding)
        return 0;
    /* this rank's CPU moves the bytes anyway, ended or not: the program's
     * calls move them, and the thread's slow polls (msg_patient in message.c) */
    if (ovl__model_cpu_bound(op->peer))
        return 1;
    if (atomic_load(&d->ended))
        return 0;
    return ovl__m.eager == 0 || sizeof p->h + p->h.len <= ovl__m.eager;
}

/* End the message with the abort marker (lock held): an empty piece
 * flagged P_LAST | P_ABORT, the sender's error in its offset, sent from
 * the delta's own state, so that it leaves when no piece could. One try: a
 * marker MPI refuses could not be sent again either. */
static void send_abort(struct ovl__delta *d)
{
    d->last_left = 1;
    d->end_h = (struct piece_hdr){ .off = (uint64_t)(-(int64_t)d->err),
                                   .total = d->total,
                                   .flags = P_LAST | P_ABORT };
    d->end_op = (struct ovl__op){
        .ctx = d, .done = piece_sent, .kind = OVL__OP_SEND, .peer = -2, .mreq = MPI_REQUEST_NULL
    };
    if (MPI_Isend(&d->end_h, (int)sizeof d->end_h, MPI_BYTE, d->peer, (int)d->sid,
                  ovl__dom_cur()->comm_delta, &d->end_op.mreq) != MPI_SUCCESS)
        return;
    atomic_fetch_add_explicit(&ovl__g.st_deltas_sent, 1, memory_order_relaxed);
    int flag = 0;
    if (MPI_Test(&d->end_op.mreq, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag)
        return;
    d->inflight++;
    if (ovl__engine_post(&d->end_op, NULL) != OVL_SUCCESS) {
        MPI_Wait(&d->end_op.mreq, MPI_STATUS_IGNORE);
        d->inflight--;
    }
}

/* The send has failed with @err (the first error stays; lock held): no
 * more of it is sent, and unless its last piece has gone, the abort marker
 * ends it now, so the receiver does not wait for the rest (the pieces
 * before it may have left already). The request completes with the error
 * once ended. Returns the error. */
static int fail_locked(struct ovl__delta *d, int err)
{
    if (!d->err)
        d->err = err;
    if (!d->last_left)
        send_abort(d);
    return d->err;
}

/* Whether the send @mreq of a piece has left already (its error fails
 * the send); lock held. */
static int left_now(struct ovl__delta *d, MPI_Request *mreq)
{
    int flag = 0;
    int trc = MPI_Test(mreq, &flag, MPI_STATUS_IGNORE);
    if (trc != MPI_SUCCESS)
        fail_locked(d, ovl__mpi_error(trc, "ovl_delta_send", "piece transfer"));
    return flag || *mreq == MPI_REQUEST_NULL;
}

/* Send bytes [off, off+len) as one piece (len <= max_piece); lock held.
 * Nothing once the send has failed. */
static int send_piece(struct ovl__delta *d, size_t off, size_t len, uint32_t flags)
{
    if (d->err)
        return d->err;
    /* H_SPLIT: the piece header, the bytes on the buffer's partial first
     * and last page behind it (ovl__delta_edges), then the rest as a
     * contiguous message of its own */
    const int split = len > 0 && (d->hdr.flags & H_SPLIT);
    size_t eh = 0, et = 0; /* off is 0: an H_SPLIT message is one piece */
    if (split)
        ovl__delta_edges(d->hdr.pgoff, d->hdr.page, len, &eh, &et);
    const char *src = d->buf + off + eh; /* what follows the header(s) */
    const size_t blen = len - eh - et;
    /* A piece on a page guarded as another pending receive's edge is
     * copied whatever its size: MPI (or the kernel for it) cannot read it.
     * (A split piece's bytes are whole pages, which no edge guards.) */
    const int copy =
        blen > 0 && ((!split && ovl__model_copy_piece(sizeof(struct piece_hdr) + len)) ||
                     ovl__watch_edge_touch(src, blen));
    const int whole = !split && (copy || len == 0); /* one contiguous block from p->h */
    /* A copy may be read by another process (shared-memory zero-copy:
     * CMA), which a guarded page makes fail: it gets pages of its own, never
     * one shared with a heap buffer that is a pending delta receive. A split
     * piece's header and edge bytes go from staging (ovl__stage_get: kept
     * between sends), held by the send until it finishes: it has one piece. */
    struct send_piece *p = NULL;
    if (!d->fail_in || --d->fail_in > 0)
        p = copy ? ovl__page_alloc(sizeof *p + blen) : malloc(sizeof *p);
    if (p && (eh || et) &&
        !(d->staging = ovl__stage_get(sizeof(struct piece_hdr) + eh + et, &d->staging_cap))) {
        free(p);
        p = NULL;
    }
    if (!p)
        return fail_locked(d, ovl__error(OVL_ERR_NOMEM, "ovl_delta_send", "no memory for a piece"));
    p->paged = copy;
    p->h.off = off;
    p->h.len = (uint32_t)len;
    p->h.flags = flags;
    p->h.total = d->total;
    p->d = d;
    p->op.ctx = p;
    p->op.done = piece_sent;
    p->op.kind = OVL__OP_SEND;
    p->op.peer = d->peer;
    p->op.mreq = MPI_REQUEST_NULL;
    const char *body = copy ? p->data : src;
    if (copy)
        ovl__watch_read(p->data, src, blen);
    MPI_Comm comm = ovl__dom_cur()->comm_delta;
    int rc;
    if (split) {
        /* the header from the send's own state: an H_SPLIT message is one
         * piece, and after it no abort marker can go (last_left) */
        d->end_h = p->h;
        d->end_op = (struct ovl__op){
            .ctx = d, .done = piece_sent, .kind = OVL__OP_SEND, .peer = -2, .mreq = MPI_REQUEST_NULL
        };
        const char *head = (const char *)&d->end_h;
        if (d->staging) { /* the edge bytes behind the piece header */
            memcpy(d->staging, &d->end_h, sizeof d->end_h);
            ovl__watch_read(d->staging + sizeof d->end_h, d->buf + off, eh);
            ovl__watch_read(d->staging + sizeof d->end_h + eh, d->buf + off + len - et, et);
            head = d->staging;
        }
        rc = MPI_Isend(head, (int)(sizeof d->end_h + eh + et), MPI_BYTE, d->peer, (int)d->sid, comm,
                       &d->end_op.mreq);
        if (rc == MPI_SUCCESS && (rc = MPI_Isend(body, (int)blen, MPI_BYTE, d->peer, (int)d->sid,
                                                 comm, &p->op.mreq)) != MPI_SUCCESS) {
            /* The header has gone: its receiver takes the next message as
             * the bytes. An empty one, never the abort marker (which could
             * pass for them), tells it they will not come. */
            MPI_Wait(&d->end_op.mreq, MPI_STATUS_IGNORE);
            d->last_left = 1;
            MPI_Send(NULL, 0, MPI_BYTE, d->peer, (int)d->sid, comm);
        }
    } else if (whole) {
        rc = MPI_Isend(&p->h, (int)(sizeof p->h + (copy ? blen : 0)), MPI_BYTE, d->peer,
                       (int)d->sid, comm, &p->op.mreq);
    } else {
        MPI_Aint disp[2];
        int bl[2] = { (int)sizeof p->h, (int)len };
        MPI_Datatype ty[2] = { MPI_BYTE, MPI_BYTE }, t;
        MPI_Get_address(&p->h, &disp[0]);
        MPI_Get_address(d->buf + off, &disp[1]);
        rc = MPI_Type_create_struct(2, bl, disp, ty, &t);
        if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(&t)) == MPI_SUCCESS) {
            rc = MPI_Isend(MPI_BOTTOM, 1, t, d->peer, (int)d->sid, comm, &p->op.mreq);
            MPI_Type_free(&t);
        }
    }
    if (rc != MPI_SUCCESS) {
        p->paged ? ovl__page_free(p) : free(p);
        return fail_locked(d, ovl__mpi_error(rc, "ovl_delta_send", "MPI_Isend of a piece"));
    }
    if (flags & P_LAST)
        d->last_left = 1;
    d->inflight++;
    d->npieces++;
    atomic_fetch_add_explicit(&ovl__g.st_deltas_sent, 1, memory_order_relaxed);
    if (ovl__trace_on)
        ovl__trace_instant("delta", "piece-send", "offset", (long long)off, "bytes",
                           (long long)len);
    if (split) {
        /* the header is small: it has usually left inside MPI_Isend */
        d->inflight++;
        if (left_now(d, &d->end_op.mreq)) {
            d->inflight--;
        } else if (ovl__engine_post(&d->end_op, NULL) != OVL_SUCCESS) {
            MPI_Wait(&d->end_op.mreq, MPI_STATUS_IGNORE);
            d->inflight--;
        }
    }
    if (whole) {
        /* A copied piece under the protocol switch has usually left inside
         * MPI_Isend: finish it here rather than wake the progress thread,
         * which on a busy node takes the CPU from the computation. */
        if (left_now(d, &p->op.mreq)) {
            d->inflight--;
            p->paged ? ovl__page_free(p) : free(p);
            return OVL_SUCCESS;
        }
    }
    if (ovl__engine_post(&p->op, &(struct ovl__post){ .patient = piece_patient }) != OVL_SUCCESS) {
        MPI_Wait(&p->op.mreq, MPI_STATUS_IGNORE);
        d->inflight--;
        p->paged ? ovl__page_free(p) : free(p);
        return fail_locked(d, ovl__error(OVL_ERR_NOMEM, "ovl_delta_send", "no memory"));
    }
    return OVL_SUCCESS;
}

/* Send [lo, hi) in pieces of at most max_piece, the last one with
 * @last_flags; lock held. */
static int send_range_flags(struct ovl__delta *d, size_t lo, size_t hi, uint32_t last_flags)
{
    int rc = OVL_SUCCESS;
    while (lo < hi && rc == OVL_SUCCESS) {
        size_t n = hi - lo > d->max_piece ? d->max_piece : hi - lo;
        rc = send_piece(d, lo, n, lo + n == hi ? last_flags : 0);
        lo += n;
    }
    return rc;
}

static int send_range(struct ovl__delta *d, size_t lo, size_t hi)
{
    double t0 = ovl__now_us();
    int rc = send_range_flags(d, lo, hi, 0);
    d->t_ovl += ovl__now_us() - t0;
    return rc;
}

/* Insert [lo, hi) into a sorted, merged range list; returns the index of the
 * merged range that contains it. */
static int range_add(struct range **v, int *n, int *cap, size_t lo, size_t hi)
{
    int i = 0;
    while (i < *n && (*v)[i].hi < lo)
        i++;
    int j = i;
    while (j < *n && (*v)[j].lo <= hi) {
        if ((*v)[j].lo < lo)
            lo = (*v)[j].lo;
        if ((*v)[j].hi > hi)
            hi = (*v)[j].hi;
        j++;
    }
    /* replace [i, j) by one range */
    if (i == j) {
        if (*n == *cap) {
            int nc = *cap ? 2 * *cap : 8;
            struct range *nv = realloc(*v, (size_t)nc * sizeof *nv);
            if (!nv)
                return -1;
            *v = nv;
            *cap = nc;
        }
        memmove(&(*v)[i + 1], &(*v)[i], (size_t)(*n - i) * sizeof **v);
        (*n)++;
    } else if (j - i > 1) {
        memmove(&(*v)[i + 1], &(*v)[j], (size_t)(*n - j) * sizeof **v);
        *n -= j - i - 1;
    }
    (*v)[i].lo = lo;
    (*v)[i].hi = hi;
    return i;
}

static int range_overlaps(const struct range *v, int n, size_t lo, size_t hi)
{
    for (int i = 0; i < n; i++)
        if (v[i].lo < hi && lo < v[i].hi)
            return 1;
    return 0;
}

/* Explicit mode: send ready range k and move it to `sent`; lock held. */
static int flush_ready(struct ovl__delta *d, int k)
{
    struct range g = d->ready[k];
    memmove(&d->ready[k], &d->ready[k + 1], (size_t)(d->nready - k - 1) * sizeof *d->ready);
    d->nready--;
    if (range_add(&d->sent, &d->nsent, &d->capsent, g.lo, g.hi) < 0)
        return fail_locked(
            d, ovl__error(OVL_ERR_NOMEM, "ovl_delta_produced", "no memory for the range list"));
    if (d->nsent == 1 && d->sent[0].lo == 0 && d->sent[0].hi == d->cap) {
        /* The whole buffer has now been produced: the message can be no
         * shorter, so this range ends it (no empty last piece at send_end,
         * which would keep the receiver waiting one more message). */
        d->total = d->cap;
        d->last_sent = 1;
        return send_range_flags(d, g.lo, g.hi, P_LAST);
    }
    return send_range(d, g.lo, g.hi);
}

/* Fault monitor: the program has started writing past @upto. Runs in the
 * faulting thread (signal handler); returns the next delta size. */
static size_t produced_upto(void *ctx, size_t upto)
{
    struct ovl__delta *d = ctx;
    ovl__spin_lock(&d->lock);
    if (upto > d->sent_prefix && !atomic_load(&d->ended)) {
        send_range(d, d->sent_prefix, upto);
        d->sent_prefix = upto;
    }
    d->t_ovl += ovl__m.fault_us; /* the fault itself, outside this call */
    size_t ds = d->dsize;
    ovl__spin_unlock(&d->lock);
    if (!ovl__engine_thread_on())
        ovl__engine_drive(); /* push what is in flight while we are here */
    return ds;
}

/* Forwarding: send on whatever of the source receive is valid; lock held.
 * A source that completed without its data (its sender aborted, MPI
 * failed, ovl_finalize cancelled it) fails the send: the bytes it lacks
 * are not sent on as data. A truncated source holds its first bytes, a
 * stale one every byte: those are sent. */
static void forward_locked(struct ovl__delta *d, int src_done)
{
    if (src_done && d->fwd_src) {
        int e = d->fwd_src->req->status.error;
        if (e != OVL_SUCCESS && e != OVL_ERR_TRUNCATE && e != OVL_ERR_STALE) {
            if (!d->err)
                fail_locked(d, ovl__error(OVL_ERR_CANCELLED, "ovl_delta_send",
                                          "the receive it forwards failed: %s", ovl_strerror(e)));
            return;
        }
    }
    size_t avail = d->cap;
    if (!src_done && d->fwd_src && d->fwd_src->w)
        avail = ovl__watch_recv_prefix(d->fwd_src->w);
    size_t lim = atomic_load(&d->ended) ? d->total : d->cap;
    if (avail > lim)
        avail = lim;
    if (avail > d->sent_prefix) {
        send_range(d, d->sent_prefix, avail);
        d->sent_prefix = avail;
    }
}

/* Send the rest and the last piece; lock held. */
static void send_last_locked(struct ovl__delta *d)
{
    if (d->last_sent)
        return;
    if (d->fwd_src && !atomic_load(&d->fwd_src->done))
        return; /* the source's completion sends it */
    uint32_t flags = P_LAST;
    if (d->w && ovl__watch_send_stale(d->w) != (size_t)-1)
        flags |= P_STALE;
    /* The final piece carries P_LAST; a separate empty one only when the
     * end of the message has already left. */
    int flagged = 0;
    if (d->use_ranges) {
        /* everything in [0, total) not yet sent goes now */
        size_t at = 0;
        for (int i = 0; i <= d->nsent; i++) {
            size_t lo = i < d->nsent ? d->sent[i].lo : d->total;
            if (lo > d->total)
                lo = d->total;
            if (lo > at) {
                flagged = lo == d->total;
                send_range_flags(d, at, lo, flagged ? flags : 0);
            }
            if (i < d->nsent && d->sent[i].hi > at)
                at = d->sent[i].hi;
        }
        d->nready = 0;
    } else {
        if (d->w) /* from now on every write to the buffer is a stale one */
            ovl__watch_send_seal(d->w);
        if (d->total > d->sent_prefix) {
            send_range_flags(d, d->sent_prefix, d->total, flags);
            flagged = 1;
        }
        d->sent_prefix = d->total;
    }
    if (!flagged)
        send_piece(d, d->total, 0, flags);
    if (d->err && !d->last_left) /* failed earlier (an MPI error seen by piece_sent) */
        send_abort(d);
    d->last_sent = 1;
}

/* Without a progress thread nothing moves a message between the program's
 * calls: what MPI could not hand to the wire at once would wait for this
 * rank's next call, after whatever it computes next, while the receiver
 * waits for it. So an ended send is driven until it has left, as MPI_Send
 * returns once its message has, unless none of its pieces leaves within
 * four times the model's wire time for one, and at least a millisecond (on
 * one node a receiver inside MPI takes a 60 KiB piece in 0.1 - 0.4 ms, far
 * slower than the model's copy rate): a receiver that does not drain its
 * end (it computes) then holds the sender no longer than that, and the
 * rest leaves at the next call. */
static void push_out(struct ovl__delta *d)
{
    struct ovl__req *r = d->req;
    double stall = 4 * (ovl__m.lat_us + (double)d->max_piece / ovl__m.bw_Bpus);
    if (stall < 1000)
        stall = 1000;
    double last = ovl__now_us();
    int left = -1;
    for (;;) {
        ovl__engine_drive();
        if (atomic_load(&r->done))
            return; /* (d may go with the request from here) */
        ovl__spin_lock(&d->lock);
        int n = d->inflight;
        ovl__spin_unlock(&d->lock);
        double now = ovl__now_us();
        if (n != left) {
            left = n;
            last = now;
        } else if (now - last > stall) {
            return;
        }
    }
}

static int end_send(struct ovl__delta *d, size_t total, int observed, const char *fn)
{
    ovl__spin_lock(&d->lock);
    if (atomic_load(&d->ended)) {
        ovl__spin_unlock(&d->lock);
        return ovl__error(OVL_ERR_REQUEST, fn, "delta send already ended");
    }
    size_t sent_hi = d->sent_prefix;
    if (d->nsent && d->sent[d->nsent - 1].hi > sent_hi)
        sent_hi = d->sent[d->nsent - 1].hi;
    if (total < sent_hi) {
        ovl__spin_unlock(&d->lock);
        return ovl__error(OVL_ERR_ARG, fn,
                          "count gives %zu bytes but %zu bytes were already produced and sent",
                          total, sent_hi);
    }
    d->total = total;
    atomic_store(&d->ended, 1);
    /* The production rate of this message sizes the pieces of the next of
     * its kind (ovl__delta_rate_for; ovl_wait's implied end would count
     * the work after production). It is the program's rate: ovl's own time
     * in between (sending pieces, faults) is left out, since the model
     * charges it separately. */
    double t = ovl__now_us() - d->t_begin;
    if (d->t_ovl < t / 2)
        t -= d->t_ovl;
    double rate =
        observed && !d->fwd_src && total >= 2 * ovl__watch_page() && t > 0 ? (double)total / t : 0;
    const size_t cap = d->cap;
    const int peer = d->peer, faults = d->mon != OVL_MONITOR_EXPLICIT;
    if (d->fwd_src)
        forward_locked(d, atomic_load(&d->fwd_src->done));
    send_last_locked(d);
    int rc = d->err;
    int fin = d->last_sent && d->inflight == 0 && !d->finished;
    if (fin)
        d->finished = 1;
    ovl__spin_unlock(&d->lock);
    if (rate > 0)
        rate_store(cap, peer, faults, rate);
    if (fin)
        finish_send(d);
    ovl__engine_drive();
    if (!fin) {
        ovl__engine_hurry(); /* its pieces are no longer patient */
        if (ovl__g.cfg.progress.mode != OVL_PROGRESS_THREAD && !d->forwarding)
            push_out(d);
    }
    return rc;
}

void ovl__delta_implied_end(struct ovl__req *r)
{
    struct ovl__delta *d = r->delta;
    if (d && !atomic_load(&d->ended))
        end_send(d, d->cap, 0, "ovl_wait");
}

void ovl__delta_end_all(void)
{
    for (;;) {
        struct ovl__delta *todo = NULL;
        pthread_mutex_lock(&ovl__delta_g.lock);
        for (struct ovl__delta *d = ovl__delta_g.head; d; d = d->next)
            if (d->is_send && !atomic_load(&d->ended)) {
                todo = d;
                break;
            }
        pthread_mutex_unlock(&ovl__delta_g.lock);
        if (!todo)
            return;
        struct ovl__dom *prev = ovl__dom_enter(todo->req->dom);
        end_send(todo, todo->cap, 0, "ovl_finalize");
        ovl__dom_leave(prev);
    }
}

/* A pending receive whose buffer starts at @buf and holds @len bytes
 * (forwarding source). An empty send overlaps nothing, so it forwards
 * nothing: taken for a forwarding, the empty halo of a rank with nothing
 * to exchange (one pointer for its receive and its send) would wait for
 * its own receive, and a ring of them for ever. */
static struct ovl__delta *find_recv(void *buf, size_t len)
{
    struct ovl__delta *hit = NULL;
    if (len == 0)
        return NULL;
    pthread_mutex_lock(&ovl__delta_g.lock);
    for (struct ovl__delta *d = ovl__delta_g.head; d; d = d->next)
        if (!d->is_send && !d->plain && d->buf == buf && len <= d->cap && !atomic_load(&d->done)) {
            hit = d;
            break;
        }
    pthread_mutex_unlock(&ovl__delta_g.lock);
    return hit;
}

int ovl__delta_arriving(const void *buf, size_t len)
{
    return find_recv((void *)(uintptr_t)buf, len) != NULL;
}

/* Does a pending fault-monitored delta receive hold any byte of
 * [buf, buf+len)? */
static int overlaps_recv(const void *buf, size_t len)
{
    uintptr_t lo = (uintptr_t)buf, hi = lo + len;
    int hit = 0;
    pthread_mutex_lock(&ovl__delta_g.lock);
    for (struct ovl__delta *d = ovl__delta_g.head; d && !hit; d = d->next)
        hit = !d->is_send && !d->plain && d->mon != OVL_MONITOR_EXPLICIT && d->cap > 0 &&
              !atomic_load(&d->done) && (uintptr_t)d->buf < hi && lo < (uintptr_t)d->buf + d->cap;
    pthread_mutex_unlock(&ovl__delta_g.lock);
    return hit;
}

/* A delta send of a buffer that a fault-monitored receive (a delta receive
 * or a get) still guards, other than a delta receive's buffer from its
 * start (forwarded as it arrives): MPI would read bytes not yet there
 * without waiting, and the send's own monitoring would fight the
 * receive's guards (mprotect: its write protection opens pages still
 * pending; uffd: its write-protect registration replaces the missing-page
 * one, so pending pages read as zeros and their data is lost). Refused, as
 * ovl_isend and ovl_put refuse it. */
static int check_pending(const char *fn, const void *buf, size_t len)
{
    if (len == 0 || (!ovl__watch_pending(buf, len, 1) && !overlaps_recv(buf, len)))
        return OVL_SUCCESS;
    return ovl__error(OVL_ERR_PENDING, fn,
                      "buffer [%p, +%zu) overlaps a delta receive or ovl_get still pending: "
                      "wait for its data first (ovl_delta_need, ovl_get_need, ovl_wait), or "
                      "send the delta receive's buffer from its start, which is forwarded as "
                      "it arrives",
                      buf, len);
}

int ovl_delta_send_begin(void *buf, int count, MPI_Datatype dt, int dest, int tag,
                         const ovl_param_t *param, ovl_request_t *req)
{
    static const char *fn = "ovl_delta_send_begin";
    size_t cap = 0;
    ovl_monitor_t monitor, mon;
    int rc =
        ovl__delta_check_args(fn, buf, count, dt, dest, tag, 0, param, req, &cap, &monitor, &mon);
    if (rc)
        return rc;

    struct ovl__req *r = NULL;
    ovl_request_t h;
    if (ovl__req_alloc(OVL__REQ_DSEND, &r, &h) != OVL_SUCCESS)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a request");
    struct ovl__delta *d = ovl__delta_new(r, 1, buf, cap);
    if (!d) {
        ovl__req_release(r);
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory");
    }
    r->status.source = ovl__g.rank;
    r->status.tag = tag;
    r->count = count;
    d->peer = dest;
    d->mon = mon;
    d->t_begin = ovl__now_us();
    size_t maxp = ovl__model_max_delta();
    d->max_piece = cap < maxp ? (cap ? cap : 1) : maxp;
    const int faults = d->mon != OVL_MONITOR_EXPLICIT;
    /* A peer on this node: MPI moves the bytes with a CPU copy on this
     * node, so no overlap can pay for pieces, guards and faults. The
     * largest pieces, all sent at send_end (the same rule as a local get,
     * ovl__model_direct). */
    const int local = ovl__model_direct(dest);
    d->dsize = local ? d->max_piece
                     : ovl__model_delta_size(cap, ovl__delta_rate_for(cap, dest, faults), faults);
    if (d->dsize > d->max_piece)
        d->dsize = d->max_piece;
    /* Pieces of a delta size within the eager limit stay within it when
     * produced ranges merge: a piece above it would need a rendezvous, and
     * the receiver would have to poll for every piece at the usual pace
     * (slot_patient) in case one is that large. */
    size_t page = ovl__watch_page(), hdr = sizeof(struct piece_hdr);
    size_t room = ovl__m.eager > hdr + page ? (ovl__m.eager - hdr) / page * page : 0;
    if (room && d->dsize <= room && d->max_piece > room)
        d->max_piece = room;
    d->total = cap;
    /* the header's share of inflight: set before a forwarding send is
     * published to the driver, which may send pieces at once */
    d->inflight = 1;

    d->fwd_src = find_recv(buf, cap);
    d->forwarding = d->fwd_src != NULL;
    if (!d->fwd_src && ((rc = check_pending(fn, buf, cap)) != OVL_SUCCESS ||
                        (rc = ovl__delta_check_stack(fn, d->mon, buf, cap)) != OVL_SUCCESS)) {
        r->delta = NULL;
        ovl__delta_free(d);
        ovl__req_release(r);
        return rc;
    }
    /* Taken after the checks, given back by the failures below (a failed
     * call changes nothing); a forwarding's source changes pace only once
     * this send is published. */
    d->sid = ovl__delta_new_sid();
    /* To a peer on this node the whole message as one piece (H_WHOLE,
     * delta_wire.c), when MPI can count it in one datatype. A buffer that
     * shares a page with a pending receive's guarded edge is copied when
     * it leaves (send_piece), into a staging buffer kept between sends. */
    const int whole = local && !d->fwd_src && cap > 0 && cap <= INT_MAX - sizeof(struct piece_hdr);
    if (whole)
        d->max_piece = d->dsize = cap;
    /* Above the protocol switch its bytes go as a contiguous message of
     * their own after the piece header (H_SPLIT): MPICH moves a two-block
     * struct datatype through shared memory slower (8 MiB: median 2.85 ms
     * against 2.36 contiguous). */
    const int split = whole && !ovl__model_copy_piece(sizeof(struct piece_hdr) + cap);
    if (d->fwd_src) {
        struct ovl__delta *src = d->fwd_src;
        int k = 0;
        /* fwd_dst is read by the driver of the receive's domain, under its
         * engine lock, and the receive is in that domain's matching: it
         * may not be this send's */
        struct ovl__dom *sprev = ovl__dom_enter(src->req->dom);
        ovl__engine_lock();
        while (k < NFWD && src->fwd_dst[k])
            k++;
        if (k < NFWD)
            src->fwd_dst[k] = d;
        ovl__engine_unlock();
        /* its arrivals now drive this send: match it at the usual pace */
        if (k < NFWD)
            ovl__match_hurry(&src->req->match);
        ovl__dom_leave(sprev);
        if (k == NFWD) {
            ovl__delta_return_sid(d->sid);
            r->delta = NULL;
            ovl__delta_free(d);
            ovl__req_release(r);
            return ovl__error(OVL_ERR_NOMEM, fn,
                              "more than %d sends forward the same arriving buffer", NFWD);
        }
        d->mon = OVL_MONITOR_EXPLICIT; /* arrivals drive it, not writes */
    } else if (d->mon == OVL_MONITOR_EXPLICIT || local ||
               (d->dsize >= cap && ovl__model_copy_piece(sizeof(struct piece_hdr) + cap))) {
        /* Explicit mode; or one piece, copied when it leaves at send_end
         * (or once ovl_delta_produced covers it): no write before then has
         * anything to trigger, and none after it can reach the message, so
         * a fault monitor would only add its set-up and faults. */
        d->use_ranges = 1;
    } else {
        rc = ovl__watch_send_create(d->mon, buf, cap, d->dsize, produced_upto, d, &d->w);
        if (rc) {
            ovl__delta_return_sid(d->sid);
            r->delta = NULL;
            ovl__delta_free(d);
            ovl__req_release(r);
            return rc;
        }
    }

    d->hdr = (struct delta_hdr){ HDR_MAGIC,
                                 d->sid,
                                 cap,
                                 (uint32_t)d->max_piece,
                                 (whole ? H_WHOLE : 0u) | (split ? H_SPLIT : 0u),
                                 split ? (uint32_t)((uintptr_t)buf % page) : 0u,
                                 split ? (uint32_t)page : 0u,
                                 0 };
    d->hdr_op.ctx = d;
    d->hdr_op.done = piece_sent;
    d->hdr_op.kind = OVL__OP_SEND;
    d->hdr_op.peer = -2; /* marks the header for piece_sent */
    ovl__delta_active_add(d);
    rc = MPI_Isend(&d->hdr, (int)sizeof d->hdr, MPI_BYTE, dest, ovl__delta_tag(tag),
                   ovl__dom_cur()->comm_msg, &d->hdr_op.mreq);
    if (rc == MPI_SUCCESS) {
        /* from now on plain messages to dest go as header + body (match.c) */
        atomic_store(&ovl__dom_cur()->headed_to[dest], 1);
        atomic_fetch_add(&ovl__dom_cur()->sent_to[dest], 1);
    } else if (!d->fwd_src) {
        ovl__delta_return_sid(d->sid); /* (a forwarding may have sent pieces with it) */
    }
    if (rc != MPI_SUCCESS ||
        ovl__engine_post(&d->hdr_op, &(struct ovl__post){ .wake = OVL__WAKE_GENTLE }) !=
            OVL_SUCCESS) {
        if (rc == MPI_SUCCESS)
            MPI_Wait(&d->hdr_op.mreq, MPI_STATUS_IGNORE);
        ovl__delta_active_remove(d);
        if (d->w)
            ovl__watch_send_finish(d->w);
        if (d->fwd_src) {
            struct ovl__dom *sprev = ovl__dom_enter(d->fwd_src->req->dom);
            ovl__engine_lock();
            for (int k = 0; k < NFWD; k++)
                if (d->fwd_src->fwd_dst[k] == d)
                    d->fwd_src->fwd_dst[k] = NULL;
            ovl__engine_unlock();
            ovl__dom_leave(sprev);
        }
        ovl__req_release(r);
        return rc != MPI_SUCCESS ? ovl__mpi_error(rc, fn, "MPI_Isend of the header")
                                 : ovl__error(OVL_ERR_NOMEM, fn, "no memory");
    }
    if (d->forwarding) {
        /* under the lock: the driver (ovl__delta_forward_one) clears fwd_src once the
         * receive has completed, possibly since it was published above */
        ovl__spin_lock(&d->lock);
        if (d->fwd_src) {
            int done = atomic_load(&d->fwd_src->done);
            forward_locked(d, done);
            if (done)
                d->fwd_src = NULL; /* it completed before it could see us */
        }
        ovl__spin_unlock(&d->lock);
    }
    *req = h;
    return OVL_SUCCESS;
}

static int send_end_entered(const char *fn, struct ovl__req *r, const ovl_param_t *param);

int ovl_delta_send_end(ovl_request_t req, const ovl_param_t *param)
{
    static const char *fn = "ovl_delta_send_end";
    int rc;
    struct ovl__req *r = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__param_check(fn, param, OVL_PARAM_FIELD_COUNT)) ||
        (rc = ovl__delta_lookup(fn, req, OVL__REQ_DSEND, &r)))
        return rc;
    struct ovl__dom *prev;
    if ((rc = ovl__dom_enter_checked(fn, r->dom, &prev)))
        return rc;
    rc = send_end_entered(fn, r, param);
    ovl__dom_leave(prev);
    return rc;
}

static int send_end_entered(const char *fn, struct ovl__req *r, const ovl_param_t *param)
{
    struct ovl__delta *d = r->delta;
    if (!param || !(param->field_mask & OVL_PARAM_FIELD_COUNT))
        return end_send(d, d->cap, 1, fn);
    int count = param->count;
    size_t esize = r->count > 0 ? d->cap / (size_t)r->count : 1;
    if (count < 0 || (size_t)count * esize > d->cap)
        return ovl__error(OVL_ERR_ARG, fn, "param->count %d outside [0, %d]", count, r->count);
    return end_send(d, (size_t)count * esize, 1, fn);
}

static int produced_entered(const char *fn, struct ovl__req *r, size_t offset, size_t bytes);

int ovl_delta_produced(ovl_request_t req, size_t offset, size_t bytes)
{
    static const char *fn = "ovl_delta_produced";
    int rc;
    struct ovl__req *r = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__delta_lookup(fn, req, OVL__REQ_DSEND, &r)))
        return rc;
    struct ovl__dom *prev;
    if ((rc = ovl__dom_enter_checked(fn, r->dom, &prev)))
        return rc;
    rc = produced_entered(fn, r, offset, bytes);
    ovl__dom_leave(prev);
    return rc;
}

static int produced_entered(const char *fn, struct ovl__req *r, size_t offset, size_t bytes)
{
    int rc;
    struct ovl__delta *d = r->delta;
    if (offset > d->cap || bytes > d->cap - offset)
        return ovl__error(OVL_ERR_ARG, fn, "range [%zu, %zu) outside the %zu-byte buffer", offset,
                          offset + bytes, d->cap);
    if (bytes == 0)
        return OVL_SUCCESS;
    ovl__spin_lock(&d->lock);
    if (atomic_load(&d->ended)) {
        ovl__spin_unlock(&d->lock);
        return ovl__error(OVL_ERR_REQUEST, fn, "delta send already ended");
    }
    if (d->fwd_src) { /* forwarding: arrivals decide */
        ovl__spin_unlock(&d->lock);
        return OVL_SUCCESS;
    }
    if (d->w) {
        /* Fault-monitored: a hint that can only move the prefix forward. */
        if (offset <= d->sent_prefix && offset + bytes > d->sent_prefix) {
            send_range(d, d->sent_prefix, offset + bytes);
            d->sent_prefix = offset + bytes;
        } else if (offset + bytes <= d->sent_prefix) {
            ovl__spin_unlock(&d->lock);
            return ovl__error(OVL_ERR_STALE, fn, "range [%zu, %zu) was already sent", offset,
                              offset + bytes);
        }
        rc = d->err;
        ovl__spin_unlock(&d->lock);
        return rc;
    }
    if (range_overlaps(d->sent, d->nsent, offset, offset + bytes)) {
        ovl__spin_unlock(&d->lock);
        return ovl__error(OVL_ERR_STALE, fn,
                          "range [%zu, %zu) of buffer %p overlaps a part already sent", offset,
                          offset + bytes, (void *)d->buf);
    }
    int k = range_add(&d->ready, &d->nready, &d->capready, offset, offset + bytes);
    if (k < 0) {
        ovl__spin_unlock(&d->lock);
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for the range list");
    }
    if (d->ready[k].hi - d->ready[k].lo >= d->dsize)
        flush_ready(d, k);
    rc = d->err;
    ovl__spin_unlock(&d->lock);
    return rc;
}

void ovl__delta_forward_one(struct ovl__delta *src, struct ovl__delta *f, int k)
{
    int done = atomic_load(&src->done);
    /* the send's pieces go on its own domain (the receive's may differ) */
    struct ovl__dom *prev = ovl__dom_enter(f->req->dom);
    ovl__spin_lock(&f->lock);
    forward_locked(f, done);
    int fin = 0;
    if (done) {
        f->fwd_src = NULL;
        if (atomic_load(&f->ended)) {
            send_last_locked(f);
            fin = f->last_sent && f->inflight == 0 && !f->finished;
            if (fin)
                f->finished = 1;
        }
    }
    ovl__spin_unlock(&f->lock);
    if (fin)
        finish_send(f);
    ovl__dom_leave(prev);
    if (done) {
        ovl__engine_lock();
        src->fwd_dst[k] = NULL;
        ovl__engine_unlock();
    }
}

int ovl__delta_fail_piece(ovl_request_t req, unsigned n)
{
    struct ovl__req *r = NULL;
    int rc = ovl__delta_lookup("ovl__delta_fail_piece", req, OVL__REQ_DSEND, &r);
    if (rc)
        return rc;
    struct ovl__delta *d = r->delta;
    ovl__spin_lock(&d->lock);
    d->fail_in = n;
    ovl__spin_unlock(&d->lock);
    return OVL_SUCCESS;
}
