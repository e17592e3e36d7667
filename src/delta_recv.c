/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Delta send/receive, the receive side: ovl_delta_recv, its pieces, a
 * plain message it matches, an ovl_irecv that meets a delta message,
 * ovl_delta_need. The wire protocol is in delta_wire.c.
 *
 * The receiver keeps a few piece receives posted into staging buffers and
 * installs each piece through the access monitor (watch.c), which makes
 * every page that is complete accessible at once. ovl_irecv receives a
 * delta message the same way with no monitor; ovl_delta_recv receives a
 * plain message whole and installs it.
 */
#include "delta_internal.h"

#include <limits.h>
#include <string.h>

/* ---- receive side ------------------------------------------------------------- */

static void forward_from(struct ovl__delta *src)
{
    for (int k = 0; k < NFWD; k++) {
        ovl__engine_lock();
        struct ovl__delta *f = src->fwd_dst[k];
        ovl__engine_unlock();
        if (f)
            ovl__delta_forward_one(src, f, k);
    }
}

static void finish_recv(struct ovl__delta *d, int err)
{
    struct ovl__req *r = d->req;
    if (d->w)
        ovl__watch_recv_finish(d->w);
    for (int i = 0; i < NSLOTS; i++) {
        ovl__page_free(d->slots[i].buf);
        d->slots[i].buf = NULL;
    }
    ovl__stage_put(d->staging, d->staging_cap);
    d->staging = NULL;
    ovl__stage_put(d->edge_buf, d->edge_cap);
    d->edge_buf = NULL;
    if (!err)
        err = d->err;
    if (!err && d->aborted)
        err = ovl__error(OVL_ERR_CANCELLED, d->plain ? "ovl_irecv" : "ovl_delta_recv",
                         "the sender aborted the message after part of it had left: %s",
                         ovl_strerror(d->aborted));
    if (!err && d->stale)
        err = ovl__error(OVL_ERR_STALE, "ovl_delta_recv",
                         "the sender wrote its buffer after sending part of it");
    if (!err && d->total_r > d->cap)
        err = ovl__error(OVL_ERR_TRUNCATE, d->plain ? "ovl_irecv" : "ovl_delta_recv",
                         "message of %zu bytes, buffer of %zu", d->total_r, d->cap);
    r->status.bytes = d->total_r > d->cap ? d->cap : d->total_r;
    r->status.error = err;
    ovl__stats_transfer(r->status.bytes, d->npieces);
    if (ovl__trace_on)
        ovl__trace_complete("delta", "delta-recv", d->t_trace, ovl__now_us() - d->t_trace, "bytes",
                            (long long)r->status.bytes, "pieces", d->npieces, "peer", d->peer);
    atomic_store(&d->done, 1);
    forward_from(d);
    ovl__delta_active_remove(d);
    ovl__req_complete(r);
}

static int post_slot(struct ovl__delta *d, struct slot *s);

static void maybe_finish(struct ovl__delta *d)
{
    if (d->last_seen && d->arrived >= d->total_r && d->posted == 0 && !atomic_load(&d->done))
        finish_recv(d, OVL_SUCCESS);
}

/* The abort marker @h ended the message: the sender's error (in its
 * offset), and nothing of it counts. */
static void take_abort(struct ovl__delta *d, const struct piece_hdr *h)
{
    d->aborted = -(int)(int64_t)h->off;
    if (d->aborted >= 0)
        d->aborted = OVL_ERR_INTERNAL;
    d->total_r = 0;
}

static void slot_done(struct ovl__op *op, MPI_Status *st)
{
    struct slot *s = op->ctx;
    struct ovl__delta *d = s->d;
    int cancelled = 0;
    s->posted = 0;
    d->posted--;
    MPI_Test_cancelled(st, &cancelled);
    if (cancelled) {
        maybe_finish(d);
        return;
    }
    if (st->MPI_ERROR != MPI_SUCCESS) {
        int err = ovl__mpi_error(st->MPI_ERROR, "ovl_delta_recv", "piece transfer");
        /* stop: cancel the others, complete with the error once they are back */
        for (int i = 0; i < NSLOTS; i++)
            if (d->slots[i].posted)
                MPI_Cancel(&d->slots[i].op.mreq);
        d->last_seen = 1;
        d->total_r = d->arrived;
        if (d->posted == 0)
            finish_recv(d, err);
        return;
    }
    struct piece_hdr h;
    memcpy(&h, s->buf, sizeof h);
    atomic_fetch_add_explicit(&ovl__g.st_deltas_recv, 1, memory_order_relaxed);
    d->npieces++;
    if (ovl__trace_on)
        ovl__trace_instant("delta", "piece-recv", "offset", (long long)h.off, "bytes",
                           (long long)h.len);
    if (h.len && h.off < d->cap && d->w) {
        size_t n = h.len;
        if (n > d->cap - h.off)
            n = d->cap - h.off;
        ovl__watch_recv_install(d->w, h.off, s->buf + sizeof h, n);
    }
    d->arrived += h.len;
    if (h.flags & P_LAST) {
        d->last_seen = 1;
        d->total_r = h.total;
        d->stale = (h.flags & P_STALE) != 0;
        if (h.flags & P_ABORT) /* no more comes: complete with what is posted */
            take_abort(d, &h);
        d->last_seq = s->seq;
        for (int i = 0; i < NSLOTS; i++)
            if (d->slots[i].posted && d->slots[i].seq > s->seq)
                MPI_Cancel(&d->slots[i].op.mreq);
    } else if (!d->last_seen) {
        post_slot(d, s);
    }
    forward_from(d);
    maybe_finish(d);
}

/* Whether sends forward @d onward as it arrives (engine lock held). */
static int forwarded(const struct ovl__delta *d)
{
    for (int k = 0; k < NFWD; k++)
        if (d->fwd_dst[k])
            return 1;
    return 0;
}

/* A piece receive may be polled slowly (struct ovl__op, `patient`) while
 * only the program waits for this message and it waits by touching the
 * buffer or calling ovl_delta_need, both of which drive progress. Not for
 * a message with a continuation or one forwarded onward as it arrives
 * (their callbacks and sends must not lag); nor, unless this rank's CPU
 * moves the bytes anyway, for an ovl_irecv of a delta message or pieces
 * above the eager limit: the sender's rendezvous would wait for this
 * rank's polls. Engine lock held (fwd_dst, cont_registered). */
static int slot_patient(const struct ovl__op *op)
{
    const struct slot *s = op->ctx;
    const struct ovl__delta *d = s->d;
    if (d->req->cont_registered || forwarded(d))
        return 0;
    /* this rank's CPU moves the bytes anyway: the program's calls move
     * them, and the thread's slow polls (msg_patient in message.c) */
    if (ovl__model_cpu_bound(op->peer))
        return 1;
    if (d->plain)
        return 0;
    return ovl__m.eager == 0 ||
           atomic_load(&d->max_piece) + sizeof(struct piece_hdr) <= ovl__m.eager;
}

static int post_slot(struct ovl__delta *d, struct slot *s)
{
    size_t len = sizeof(struct piece_hdr) + d->max_piece;
    if (!s->buf && !(s->buf = ovl__page_alloc(len)))
        return OVL_ERR_NOMEM;
    s->d = d;
    s->seq = ++d->seq;
    s->op.ctx = s;
    s->op.done = slot_done;
    s->op.kind = OVL__OP_FRAG;
    s->op.peer = d->peer;
    int rc = MPI_Irecv(s->buf, (int)len, MPI_BYTE, d->peer, (int)d->sid, ovl__dom_cur()->comm_delta,
                       &s->op.mreq);
    if (rc != MPI_SUCCESS)
        return ovl__mpi_error(rc, "ovl_delta_recv", "MPI_Irecv of a piece");
    s->posted = 1;
    d->posted++;
    if (ovl__engine_post(&s->op, &(struct ovl__post){ .patient = slot_patient }) != OVL_SUCCESS) {
        MPI_Cancel(&s->op.mreq);
        MPI_Wait(&s->op.mreq, MPI_STATUS_IGNORE);
        s->posted = 0;
        d->posted--;
        return OVL_ERR_NOMEM;
    }
    return OVL_SUCCESS;
}

/* The bytes of an H_WHOLE message with piece header @h have come where
 * whole_dst put them: into the buffer. */
static void whole_install(struct ovl__delta *d, const struct piece_hdr *h)
{
    const char *src = d->staging ? d->staging : d->landing;
    if (src && h->len)
        ovl__watch_recv_install(d->w, 0, src, h->len > d->cap ? d->cap : h->len);
    d->arrived = h->len;
    d->total_r = h->total;
    d->stale = (h->flags & P_STALE) != 0;
}

/* An H_WHOLE message has arrived: its piece header in d->whole_h, its
 * bytes where whole_post put them. */
static void whole_done(struct ovl__op *op, MPI_Status *st)
{
    struct ovl__delta *d = op->ctx;
    int err = d->err, cancelled = 0;
    MPI_Test_cancelled(st, &cancelled);
    if (!err && cancelled) /* ovl_finalize: its sender never ended it */
        err = OVL_ERR_CANCELLED;
    if (!err && st->MPI_ERROR != MPI_SUCCESS)
        err = ovl__mpi_error(st->MPI_ERROR, "ovl_delta_recv", "message transfer");
    d->last_seen = 1;
    if (!err) {
        const struct piece_hdr h = d->whole_h;
        atomic_fetch_add_explicit(&ovl__g.st_deltas_recv, 1, memory_order_relaxed);
        d->npieces++;
        if (h.flags & P_ABORT) { /* the sender failed before its bytes left */
            take_abort(d, &h);
        } else {
            whole_install(d, &h);
        }
    }
    finish_recv(d, err);
}

/* Where MPI may write @n bytes of @d's message directly: the monitor's
 * landing (the buffer itself under the explicit monitor, or a shadow),
 * unless that is the buffer and it shares a page with another pending
 * receive's guarded edge, which neither MPI nor the kernel (CMA) can
 * write; NULL then, and the bytes go through staging and the install. */
static char *landing_for(struct ovl__delta *d, size_t n)
{
    char *l = ovl__watch_recv_landing(d->w);
    return l && l == (char *)d->buf && ovl__watch_edge_touch(l, n) ? NULL : l;
}

/* An H_WHOLE message comes from a peer on this node, whose bytes this
 * rank's CPU moves: patient as piece receives are (slot_patient). */
static int whole_patient(const struct ovl__op *op)
{
    const struct ovl__delta *d = op->ctx;
    return !d->req->cont_registered && !forwarded(d) && ovl__model_cpu_bound(op->peer);
}

/* H_SPLIT: the edge bytes that came behind the piece header, to their
 * places around the bytes' message (ovl__delta_edges) in a message of
 * @len bytes. */
static void split_edges_place(struct ovl__delta *d, size_t len)
{
    char *dst = d->staging ? d->staging : d->landing;
    size_t eh, et;
    ovl__delta_edges(d->sp_pgoff, d->sp_page, len, &eh, &et);
    if (!dst || !d->edge_buf || eh + et == 0 || len > d->sp_bytes)
        return;
    const char *e = d->edge_buf + sizeof(struct piece_hdr);
    memcpy(dst, e, eh);
    memcpy(dst + len - et, e + eh, et);
}

/* H_SPLIT: both receives are back (driver). */
static void split_finish(struct ovl__delta *d)
{
    int err = d->err;
    const struct piece_hdr h = d->whole_h;
    d->last_seen = 1;
    if (!err) {
        atomic_fetch_add_explicit(&ovl__g.st_deltas_recv, 1, memory_order_relaxed);
        d->npieces++;
        if (h.flags & P_ABORT) { /* the sender failed before its bytes left */
            take_abort(d, &h);
        } else if (h.len > 0 && d->body_n < 0) { /* ovl_finalize: they never came */
            err = OVL_ERR_CANCELLED;
        } else if (d->edge_n + (size_t)(d->body_n > 0 ? d->body_n : 0) != h.len) {
            err = ovl__error(OVL_ERR_MPI, "ovl_delta_recv",
                             "%zu of the message's %u bytes came: its sender failed",
                             d->edge_n + (size_t)(d->body_n > 0 ? d->body_n : 0), h.len);
        } else {
            split_edges_place(d, h.len);
            whole_install(d, &h);
        }
    }
    finish_recv(d, err);
}

/* H_SPLIT: the piece header has come, or its receive failed. Without
 * bytes to follow (empty, the abort marker, an error) the bytes' receive
 * is cancelled: nothing will match it (its tag, the delta id, is not used
 * again before the id space wraps). */
static void split_hdr_done(struct ovl__op *op, MPI_Status *st)
{
    struct ovl__delta *d = op->ctx;
    int cancelled = 0;
    MPI_Test_cancelled(st, &cancelled);
    int failed = cancelled || st->MPI_ERROR != MPI_SUCCESS;
    if (!d->err && cancelled)
        d->err = OVL_ERR_CANCELLED;
    if (!d->err && st->MPI_ERROR != MPI_SUCCESS)
        d->err = ovl__mpi_error(st->MPI_ERROR, "ovl_delta_recv", "message transfer");
    if (!failed && d->edge_buf) { /* the piece header, then the edge bytes */
        int n = 0;
        if (MPI_Get_count(st, MPI_BYTE, &n) != MPI_SUCCESS || n < (int)sizeof d->whole_h) {
            failed = 1;
            if (!d->err)
                d->err = ovl__error(OVL_ERR_INTERNAL, "ovl_delta_recv", "short piece header");
        } else {
            memcpy(&d->whole_h, d->edge_buf, sizeof d->whole_h);
            size_t eh, et;
            ovl__delta_edges(d->sp_pgoff, d->sp_page, d->whole_h.len, &eh, &et);
            d->edge_n = n - (int)sizeof d->whole_h;
            if ((d->whole_h.flags & P_ABORT) || d->whole_h.len == 0)
                d->edge_n = 0;
            else if ((size_t)d->edge_n != eh + et && !d->err)
                d->err = ovl__error(OVL_ERR_INTERNAL, "ovl_delta_recv",
                                    "%d edge bytes behind the piece header, %zu expected",
                                    d->edge_n, eh + et);
        }
    }
    /* (an error found at the post, d->err, leaves the bytes' receive to take
     * them, truncated, so that their sender completes; a receive that came
     * back in the same poll has no request left to cancel) */
    if (d->body_posted && d->plain_op.mreq != MPI_REQUEST_NULL &&
        (failed || (d->whole_h.flags & P_ABORT) || d->whole_h.len == 0))
        MPI_Cancel(&d->plain_op.mreq);
    if (--d->split_left == 0)
        split_finish(d);
}

/* H_SPLIT: the bytes have come, or their receive was cancelled. */
static void split_body_done(struct ovl__op *op, MPI_Status *st)
{
    struct ovl__delta *d = op->ctx;
    int cancelled = 0;
    d->body_posted = 0;
    MPI_Test_cancelled(st, &cancelled);
    if (cancelled)
        d->body_n = -1;
    else if (st->MPI_ERROR != MPI_SUCCESS) {
        if (!d->err) /* (refused already: its zero-byte receive truncated it) */
            d->err = ovl__mpi_error(st->MPI_ERROR, "ovl_delta_recv", "message transfer");
    } else if (MPI_Get_count(st, MPI_BYTE, &d->body_n) != MPI_SUCCESS || d->body_n < 0)
        d->body_n = 0;
    if (--d->split_left == 0)
        split_finish(d);
}

/* Where the bytes of an H_WHOLE message of at most @bytes go: the buffer
 * where the monitor lets MPI write (explicit, or the shadow of a
 * zero-copy monitor), else staging; NULL with *@bytes 0 without staging
 * memory, and the message is still taken (truncated), so that its sender
 * completes. */
static char *whole_dst(struct ovl__delta *d, size_t *bytes)
{
    /* refused already (ovl_irecv into a non-contiguous type): the bytes
     * go to staging, dropped at the end (a receive that truncates them to
     * nothing corrupted memory under Open MPI 4.1's UCX) */
    char *dst = !d->err && *bytes && *bytes <= d->cap ? landing_for(d, *bytes) : NULL;
    d->landing = dst;
    if (!dst && *bytes) {
        d->staging = ovl__stage_get(*bytes, &d->staging_cap);
        dst = d->staging;
        if (!dst) {
            if (!d->err)
                d->err = ovl__error(OVL_ERR_NOMEM, "ovl_delta_recv", "staging buffer");
            *bytes = 0;
        }
    }
    return dst;
}

/* Post the receives of an H_SPLIT message of at most @bytes: its piece
 * header into d->whole_h, then its bytes as a contiguous message where
 * whole_dst puts them (MPI matches the two in order). */
static void split_post(struct ovl__delta *d, size_t bytes)
{
    char *dst = whole_dst(d, &bytes);
    MPI_Comm comm = ovl__dom_cur()->comm_delta;
    /* the piece header and the edge bytes behind it; the bytes' message
     * after the head edge (the same for any length that has one) */
    if (d->sp_page > (1u << 24)) {
        finish_recv(d, ovl__error(OVL_ERR_INTERNAL, "ovl_delta_recv", "bad delta header"));
        return;
    }
    size_t eh = 0, et = 0, hn = sizeof d->whole_h;
    ovl__delta_edges(d->sp_pgoff, d->sp_page, bytes, &eh, &et);
    d->sp_bytes = bytes;
    if (d->sp_page) { /* pages of its own: MPI may write it through the kernel */
        hn += 2 * (size_t)d->sp_page;
        if (!(d->edge_buf = ovl__stage_get(hn, &d->edge_cap))) {
            finish_recv(d, ovl__error(OVL_ERR_NOMEM, "ovl_delta_recv", "no memory"));
            return;
        }
    }
    d->whole_hop = (struct ovl__op){ .ctx = d,
                                     .done = split_hdr_done,
                                     .kind = OVL__OP_FRAG,
                                     .peer = d->peer,
                                     .mreq = MPI_REQUEST_NULL };
    d->plain_op = d->whole_hop;
    d->plain_op.done = split_body_done;
    int rc = MPI_Irecv(d->edge_buf ? d->edge_buf : (char *)&d->whole_h, (int)hn, MPI_BYTE, d->peer,
                       (int)d->sid, comm, &d->whole_hop.mreq);
    if (rc == MPI_SUCCESS &&
        (rc = MPI_Irecv(dst ? dst + eh : (char *)&d->whole_h, (int)(bytes - eh), MPI_BYTE, d->peer,
                        (int)d->sid, comm, &d->plain_op.mreq)) != MPI_SUCCESS) {
        MPI_Cancel(&d->whole_hop.mreq);
        MPI_Wait(&d->whole_hop.mreq, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) {
        finish_recv(d, ovl__mpi_error(rc, "ovl_delta_recv", "MPI_Irecv of the message"));
        return;
    }
    /* set before the post: the driver may complete both at once */
    d->split_left = 2;
    d->body_posted = 1;
    /* both or neither: with only the bytes' receive posted, it would take
     * the piece header */
    if (ovl__engine_post_pair(&d->whole_hop, &d->plain_op,
                              &(struct ovl__post){ .patient = whole_patient }) != OVL_SUCCESS) {
        MPI_Cancel(&d->whole_hop.mreq); /* not matched yet: do not wait for them */
        MPI_Cancel(&d->plain_op.mreq);
        MPI_Wait(&d->whole_hop.mreq, MPI_STATUS_IGNORE);
        MPI_Wait(&d->plain_op.mreq, MPI_STATUS_IGNORE);
        finish_recv(d, ovl__error(OVL_ERR_NOMEM, "ovl_delta_recv", "no memory"));
    }
}

/* Post the one receive of an H_WHOLE message of at most @bytes: its piece
 * header into d->whole_h, its bytes where whole_dst puts them. */
static void whole_post(struct ovl__delta *d, size_t bytes)
{
    char *dst = whole_dst(d, &bytes);
    MPI_Aint disp[2];
    int bl[2] = { (int)sizeof d->whole_h, (int)bytes };
    MPI_Datatype ty[2] = { MPI_BYTE, MPI_BYTE }, t = MPI_DATATYPE_NULL;
    MPI_Get_address(&d->whole_h, &disp[0]);
    MPI_Get_address(dst ? dst : (char *)&d->whole_h, &disp[1]);
    d->plain_op.ctx = d;
    d->plain_op.done = whole_done;
    d->plain_op.kind = OVL__OP_FRAG;
    d->plain_op.peer = d->peer;
    int rc = MPI_Type_create_struct(bytes ? 2 : 1, bl, disp, ty, &t);
    if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(&t)) == MPI_SUCCESS)
        rc = MPI_Irecv(MPI_BOTTOM, 1, t, d->peer, (int)d->sid, ovl__dom_cur()->comm_delta,
                       &d->plain_op.mreq);
    if (t != MPI_DATATYPE_NULL)
        MPI_Type_free(&t);
    if (rc != MPI_SUCCESS) {
        finish_recv(d, ovl__mpi_error(rc, "ovl_delta_recv", "MPI_Irecv of the message"));
        return;
    }
    if (ovl__engine_post(&d->plain_op, &(struct ovl__post){ .patient = whole_patient }) !=
        OVL_SUCCESS) {
        MPI_Cancel(&d->plain_op.mreq); /* not matched yet: do not wait for it */
        MPI_Wait(&d->plain_op.mreq, MPI_STATUS_IGNORE);
        finish_recv(d, ovl__error(OVL_ERR_NOMEM, "ovl_delta_recv", "no memory"));
    }
}

/* The header of a delta message matched receive @r (driver, no lock). */
static void header_matched(struct ovl__delta *d, MPI_Message msg, MPI_Status *st)
{
    struct ovl__req *r = d->req;
    struct delta_hdr h;
    MPI_Status st2;
    int rc = MPI_Mrecv(&h, (int)sizeof h, MPI_BYTE, &msg, &st2);
    r->status.source = st->MPI_SOURCE;
    r->status.tag = st->MPI_TAG - ovl__g.tag_ub - 1;
    if (rc != MPI_SUCCESS || h.magic != HDR_MAGIC) {
        finish_recv(d, rc != MPI_SUCCESS
                           ? ovl__mpi_error(rc, "ovl_delta_recv", "header")
                           : ovl__error(OVL_ERR_INTERNAL, "ovl_delta_recv", "bad delta header"));
        return;
    }
    d->peer = st->MPI_SOURCE;
    d->sid = h.sid;
    d->max_piece = h.max_piece ? h.max_piece : 1;
    d->sp_pgoff = h.pgoff;
    d->sp_page = h.page;
    if (h.flags & H_WHOLE) {
        (h.flags & H_SPLIT ? split_post : whole_post)(d, (size_t)h.cap);
        return;
    }
    size_t npieces = h.cap / d->max_piece + 2;
    int n = npieces < NSLOTS ? (int)npieces : NSLOTS;
    for (int i = 0; i < n; i++) {
        if ((rc = post_slot(d, &d->slots[i])) != OVL_SUCCESS) {
            if (d->posted == 0) {
                finish_recv(d, ovl__error(rc, "ovl_delta_recv", "cannot post piece receives"));
                return;
            }
            break;
        }
    }
}

static void plain_done(struct ovl__op *op, MPI_Status *st)
{
    struct ovl__delta *d = op->ctx;
    int err = OVL_SUCCESS;
    MPI_Count n = 0;
    if (st->MPI_ERROR != MPI_SUCCESS) {
        err = ovl__mpi_error(st->MPI_ERROR, "ovl_delta_recv", "message transfer");
    } else {
        /* as probed: the receive took all of it (its buffer is that size;
         * over 2 GiB its datatype is not MPI_BYTE, ovl__imrecv_bytes) */
        n = (MPI_Count)d->plain_bytes;
        const char *src = d->staging ? d->staging : d->landing;
        if (src)
            ovl__watch_recv_install(d->w, 0, src, (size_t)n > d->cap ? d->cap : (size_t)n);
    }
    d->total_r = (size_t)n;
    d->last_seen = 1;
    finish_recv(d, err);
}

/* Receive the matched message @msg of @n bytes into @buf. MPI counts are
 * int: a message of 2 GiB or more is received as one element of a type of
 * exactly @n bytes (blocks of 1 GiB and the rest), which every MPI library
 * has, MPI-4's large-count calls or not. */
int ovl__imrecv_bytes(void *buf, size_t n, MPI_Message *msg, MPI_Request *rq)
{
    if (n <= INT_MAX)
        return MPI_Imrecv(buf, (int)n, MPI_BYTE, msg, rq);
    const size_t blk = (size_t)1 << 30;
    MPI_Datatype gib = MPI_DATATYPE_NULL, blocks = MPI_DATATYPE_NULL, t = MPI_DATATYPE_NULL;
    int bl[2] = { 1, (int)(n % blk) };
    MPI_Aint disp[2] = { 0, (MPI_Aint)(n - n % blk) };
    int rc = MPI_Type_contiguous((int)blk, MPI_BYTE, &gib);
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_contiguous((int)(n / blk), gib, &blocks);
    if (rc == MPI_SUCCESS) {
        MPI_Datatype ty[2] = { blocks, MPI_BYTE };
        rc = MPI_Type_create_struct(bl[1] ? 2 : 1, bl, disp, ty, &t);
    }
    if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(&t)) == MPI_SUCCESS)
        rc = MPI_Imrecv(buf, 1, t, msg, rq); /* the type may go: the receive keeps it */
    if (t != MPI_DATATYPE_NULL)
        MPI_Type_free(&t);
    if (blocks != MPI_DATATYPE_NULL)
        MPI_Type_free(&blocks);
    if (gib != MPI_DATATYPE_NULL)
        MPI_Type_free(&gib);
    return rc;
}

/* A plain message (ovl_isend) matched an ovl_delta_recv. */
static void plain_matched(struct ovl__delta *d, MPI_Message msg, MPI_Status *st)
{
    struct ovl__req *r = d->req;
    MPI_Count n = 0;
    MPI_Get_elements_x(st, MPI_BYTE, &n);
    r->status.source = st->MPI_SOURCE;
    r->status.tag = st->MPI_TAG;
    d->staging_len = (size_t)n;
    d->plain_bytes = (size_t)n;
    d->plain_op.ctx = d;
    d->plain_op.done = plain_done;
    d->plain_op.kind = OVL__OP_FRAG;
    int rc;
    if ((size_t)n <= d->cap && (d->landing = landing_for(d, (size_t)n)) != NULL) {
        /* straight into the buffer (explicit) or the monitor's shadow */
        d->staging_len = 0;
        rc = ovl__imrecv_bytes(d->landing, (size_t)n, &msg, &d->plain_op.mreq);
    } else {
        d->staging = ovl__stage_get((size_t)n, &d->staging_cap);
        if (!d->staging) {
            MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            finish_recv(d, ovl__error(OVL_ERR_NOMEM, "ovl_delta_recv", "staging buffer"));
            return;
        }
        rc = ovl__imrecv_bytes(d->staging, (size_t)n, &msg, &d->plain_op.mreq);
    }
    if (rc != MPI_SUCCESS) {
        finish_recv(d, ovl__mpi_error(rc, "ovl_delta_recv", "MPI_Imrecv"));
        return;
    }
    if (ovl__engine_post(&d->plain_op, NULL) != OVL_SUCCESS) {
        MPI_Wait(&d->plain_op.mreq, MPI_STATUS_IGNORE);
        finish_recv(d, ovl__error(OVL_ERR_NOMEM, "ovl_delta_recv", "no memory"));
    }
}

static void drecv_matched(struct ovl__match *m, MPI_Message msg, MPI_Status *st, int delta)
{
    struct ovl__req *r = ovl__req_of_match(m);
    struct ovl__delta *d = r->delta;
    if (!st) {
        d->last_seen = 1;
        finish_recv(d, OVL_ERR_CANCELLED);
        return;
    }
    if (delta)
        header_matched(d, msg, st);
    else
        plain_matched(d, msg, st);
}

void ovl__delta_matched_header(struct ovl__req *r, MPI_Message msg, MPI_Status *st)
{
    /* ovl_irecv met a delta message: assemble it into the user's buffer with
     * no monitor (the request completes when all of it is there). */
    size_t cap = 0;
    int is_contiguous = ovl__delta_contiguous(r->count, r->dt, &cap) == OVL_SUCCESS;
    if (!is_contiguous)
        cap = 0;
    ovl__dt_release(r);
    struct ovl__delta *d = ovl__delta_new(r, 0, r->buf, cap);
    if (!d || ovl__watch_recv_create("ovl_delta_recv", OVL_MONITOR_EXPLICIT, r->buf, cap, &d->w) !=
                  OVL_SUCCESS) {
        MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        if (d) {
            r->delta = NULL;
            ovl__delta_free(d);
        }
        r->status.error = ovl__error(OVL_ERR_NOMEM, "ovl_irecv", "no memory for a delta message");
        ovl__req_complete(r);
        return;
    }
    d->plain = 1;
    d->mon = OVL_MONITOR_EXPLICIT;
    if (!is_contiguous)
        d->err = ovl__error(OVL_ERR_UNSUPPORTED, "ovl_irecv",
                            "a delta message can only be received into a contiguous datatype");
    ovl__delta_active_add(d);
    header_matched(d, msg, st);
}

struct need_arg {
    struct ovl__delta *d;
    size_t offset, bytes;
};

static int need_served(const void *p)
{
    const struct need_arg *a = p;
    return atomic_load(&a->d->done) || ovl__watch_recv_ready(a->d->w, a->offset, a->bytes);
}

int ovl_delta_recv(void *buf, int count, MPI_Datatype dt, int source, int tag,
                   const ovl_param_t *param, ovl_request_t *req)
{
    static const char *fn = "ovl_delta_recv";
    size_t cap = 0;
    ovl_monitor_t monitor, mon;
    int rc =
        ovl__delta_check_args(fn, buf, count, dt, source, tag, 1, param, req, &cap, &monitor, &mon);
    if (rc)
        return rc;
    const int degraded = ovl__watch_degraded(fn, monitor, mon);
    if (degraded && (rc = ovl__check_not_in_callback(fn)))
        return rc;
    struct ovl__req *r = NULL;
    ovl_request_t h;
    if (ovl__req_alloc(OVL__REQ_DRECV, &r, &h) != OVL_SUCCESS)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a request");
    struct ovl__delta *d = ovl__delta_new(r, 0, buf, cap);
    if (!d) {
        ovl__req_release(r);
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory");
    }
    r->count = count;
    d->mon = mon;
    if ((rc = ovl__delta_check_stack(fn, d->mon, buf, cap)) != OVL_SUCCESS ||
        (rc = ovl__watch_recv_create("ovl_delta_recv", d->mon, buf, cap, &d->w)) != OVL_SUCCESS) {
        ovl__req_release(r);
        return rc;
    }
    ovl__delta_active_add(d);
    r->match.source = source;
    r->match.tag = tag;
    r->match.matched = drecv_matched;
    r->match.prepost = NULL;
    r->match.patient = 1; /* the program's access or wait drives it */
    *req = h;
    ovl__match_post(&r->match);
    if (degraded)
        ovl__engine_spin(need_served, &(struct need_arg){ d, 0, cap });
    return OVL_SUCCESS;
}

static int need_entered(const char *fn, struct ovl__req *r, size_t offset, size_t bytes);

int ovl_delta_need(ovl_request_t req, size_t offset, size_t bytes)
{
    static const char *fn = "ovl_delta_need";
    int rc;
    struct ovl__req *r = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__delta_lookup(fn, req, OVL__REQ_DRECV, &r)))
        return rc;
    struct ovl__dom *prev;
    if ((rc = ovl__dom_enter_checked(fn, r->dom, &prev)))
        return rc;
    rc = need_entered(fn, r, offset, bytes);
    ovl__dom_leave(prev);
    return rc;
}

static int need_entered(const char *fn, struct ovl__req *r, size_t offset, size_t bytes)
{
    int rc;
    struct ovl__delta *d = r->delta;
    if (offset > d->cap || bytes > d->cap - offset)
        return ovl__error(OVL_ERR_ARG, fn, "range [%zu, %zu) outside the %zu-byte buffer", offset,
                          offset + bytes, d->cap);
    if (!atomic_load(&d->done) && !ovl__watch_recv_ready(d->w, offset, bytes)) {
        if ((rc = ovl__check_not_in_callback(fn)))
            return rc;
        ovl__engine_spin(need_served, &(struct need_arg){ d, offset, bytes });
    }
    if (atomic_load(&d->done) && atomic_load(&r->done))
        return r->status.error;
    return OVL_SUCCESS;
}
