/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Point-to-point messages: ovl_isend / ovl_irecv. A send is one MPI request
 * on ovl's private communicator, handed to the progress engine, whose
 * handler fills the ovl status and completes the request (running its
 * continuation); to a peer this rank has sent a delta message it is a
 * 32-byte header followed by the body on comm_delta (match.c says why). A
 * receive goes to match.c, which either hands it to MPI at once as a real
 * receive (pre-posting, when safe) or matches it itself: a plain message is
 * then received with MPI_Imrecv straight into the user's buffer, a delta
 * header hands the request to delta_recv.c, which assembles the pieces.
 */
#include "ovl_internal.h"

#include <stdlib.h>

/* Staging for a buffer that shares a page another pending receive guards
 * as its edge (buffers carved from one block): MPI, or the kernel on its
 * behalf (sockets, CMA), cannot read or write that page. The staging
 * starts as a copy of the buffer's span, so a receive writes back the gaps
 * of a non-contiguous datatype as they were. Returns the pointer MPI gets
 * in place of @buf, or @buf itself when no staging is needed. */
static void *bounce(struct ovl__req *r, void *buf, int count, MPI_Datatype dt, int recv)
{
    MPI_Aint lb = 0, ext = 0, tlb = 0, text = 0;
    if (count <= 0 || ovl__watch_idle() || MPI_Type_get_extent(dt, &lb, &ext) != MPI_SUCCESS ||
        MPI_Type_get_true_extent(dt, &tlb, &text) != MPI_SUCCESS || ext < 0 || text <= 0)
        return buf;
    char *lo = (char *)buf + tlb;
    size_t span = (size_t)(count - 1) * (size_t)ext + (size_t)text;
    if (!ovl__watch_edge_touch(lo, span) || !(r->bounce = ovl__stage_get(span, &r->bounce_cap)))
        return buf;
    ovl__watch_read(r->bounce, lo, span);
    if (recv) {
        r->bounce_to = lo;
        r->bounce_len = span;
    }
    return (void *)((uintptr_t)r->bounce - (uintptr_t)tlb);
}

/* Write a received staging back (@copy) and give it up. */
static void unbounce(struct ovl__req *r, int copy)
{
    if (!r->bounce)
        return;
    if (copy && r->bounce_to)
        ovl__watch_write(r->bounce_to, r->bounce, r->bounce_len);
    ovl__stage_put(r->bounce, r->bounce_cap);
    r->bounce = r->bounce_to = NULL;
}

/* A message may be polled slowly (struct ovl__op, `patient`) when this
 * rank's CPU moves its bytes anyway (ovl__model_cpu_bound: a peer on this
 * node, and no CPU for the progress thread) and no continuation waits for
 * it: the program's own ovl calls then move it, and the thread's slow
 * polls. Engine lock held (cont_registered). */
static int msg_patient(const struct ovl__op *op)
{
    const struct ovl__req *r = op->ctx;
    return !r->cont_registered;
}

/* The rule for a message with @peer, given only where it can hold: any
 * other message is posted as urgent work (a wake-up, or the grace of a
 * pre-posted receive). */
static int (*msg_patience(int peer))(const struct ovl__op *)
{
    return ovl__model_cpu_bound(peer) ? msg_patient : NULL;
}

static void msg_done(struct ovl__op *op, MPI_Status *st)
{
    struct ovl__req *r = op->ctx;
    int err = st->MPI_ERROR, cancelled = 0;
    r->status.error = OVL_SUCCESS;
    if (r->kind == OVL__REQ_RECV) {
        /* source and tag were set when the message was matched (a body
         * arrives with its delta id as tag) */
        MPI_Test_cancelled(st, &cancelled);
        if (cancelled) {
            r->status.error = OVL_ERR_CANCELLED;
        } else {
            MPI_Count n = 0;
            MPI_Get_elements_x(st, MPI_BYTE, &n);
            r->status.bytes = n > 0 ? (size_t)n : 0;
        }
    }
    if (err != MPI_SUCCESS && !cancelled)
        r->status.error = ovl__mpi_error(err, r->kind == OVL__REQ_RECV ? "ovl_irecv" : "ovl_isend",
                                         "message transfer");
    unbounce(r, !cancelled && err == MPI_SUCCESS);
    if (!cancelled)
        ovl__stats_transfer(r->status.bytes, 1);
    if (ovl__trace_on) {
        double t = ovl__now_us();
        ovl__trace_complete("msg", r->kind == OVL__REQ_RECV ? "recv" : "send", r->t_post_us,
                            t - r->t_post_us, "bytes", (long long)r->status.bytes, "peer",
                            r->kind == OVL__REQ_RECV ? r->status.source : op->peer, "tag",
                            r->status.tag);
    }
    ovl__req_complete(r);
}

static void irecv_matched(struct ovl__match *m, MPI_Message msg, MPI_Status *st, int delta)
{
    struct ovl__req *r = ovl__req_of_match(m);
    if (!st) { /* cancelled by ovl_finalize */
        unbounce(r, 0);
        ovl__dt_release(r);
        r->status.error = OVL_ERR_CANCELLED;
        ovl__req_complete(r);
        return;
    }
    if (delta) {
        /* delta_recv.c writes a delta message's pieces through watch itself */
        if (r->bounce) {
            MPI_Aint tlb = 0, text = 0;
            MPI_Type_get_true_extent(r->dt, &tlb, &text);
            r->buf = r->bounce_to - tlb;
            unbounce(r, 0);
        }
        ovl__delta_matched_header(r, msg, st);
        return;
    }
    int bytes = 0;
    MPI_Get_count(st, MPI_BYTE, &bytes);
    r->status.source = st->MPI_SOURCE;
    r->status.tag = st->MPI_TAG;
    r->op.done = msg_done;
    int rc = MPI_Imrecv(r->buf, r->count, r->dt, &msg, &r->op.mreq);
    ovl__dt_release(r); /* MPI keeps what it needs of the type */
    if (rc == MPI_SUCCESS &&
        (rc = ovl__engine_post(&r->op, &(struct ovl__post){ .bytes = bytes > 0 ? (size_t)bytes : 0,
                                                            .patient = msg_patience(
                                                                st->MPI_SOURCE) })) == OVL_SUCCESS)
        return;
    if (r->op.mreq != MPI_REQUEST_NULL)
        MPI_Wait(&r->op.mreq, MPI_STATUS_IGNORE);
    unbounce(r, 0);
    r->status.error = rc == OVL_ERR_NOMEM ? ovl__error(rc, "ovl_irecv", "no memory")
                                          : ovl__mpi_error(rc, "ovl_irecv", "MPI_Imrecv");
    ovl__req_complete(r);
}

/* The MPI receive of a pre-posted ovl_irecv completed: with its message,
 * cancelled by finalize, or cancelled by match.c to let a delta header
 * through (then match.c has queued the receive again). */
static void prepost_done(struct ovl__op *op, MPI_Status *st)
{
    struct ovl__req *r = op->ctx;
    int cancelled = 0;
    MPI_Test_cancelled(st, &cancelled);
    if (ovl__match_prepost_done(&r->match, cancelled))
        return;
    ovl__dt_release(r);
    msg_done(op, st);
}

/* match.c's `prepost`: hand the receive to MPI. */
static int prepost_recv(struct ovl__match *m)
{
    struct ovl__req *r = ovl__req_of_match(m);
    int tsize = 0;
    MPI_Type_size(r->dt, &tsize);
    r->status.source = m->source;
    r->status.tag = m->tag;
    r->op.done = prepost_done;
    if (MPI_Irecv(r->buf, r->count, r->dt, m->source, m->tag, ovl__dom_cur()->comm_msg,
                  &r->op.mreq) != MPI_SUCCESS)
        return -1;
    /* sized as if the message were on its way: right for an exchange; a
     * receive posted long before its send polls at the usual pace once
     * that predicted time has passed */
    if (ovl__engine_post(&r->op, &(struct ovl__post){ .bytes = (size_t)r->count * (size_t)tsize,
                                                      .wake = OVL__WAKE_GRACE,
                                                      .patient = msg_patience(m->source) }) !=
        OVL_SUCCESS) {
        MPI_Cancel(&r->op.mreq);
        MPI_Wait(&r->op.mreq, MPI_STATUS_IGNORE);
        return -1;
    }
    return 0;
}

/* match.c's `cancel`. The handle stays valid: the engine tests it. */
static void cancel_recv(struct ovl__match *m)
{
    struct ovl__req *r = ovl__req_of_match(m);
    MPI_Request h = r->op.mreq;
    MPI_Cancel(&h);
}

/* ---- header + body: plain messages to a peer sent delta messages ---- */

struct body_hdr_send {
    struct ovl__op op; /* first: the engine hands back &op */
    struct ovl__plain_hdr h;
};

static void body_hdr_sent(struct ovl__op *op, MPI_Status *st)
{
    OVL__UNUSED(st);
    free(op);
}

/* Send @r's message to a peer sent delta messages: the body on comm_delta
 * (tag: a fresh delta id), then the header naming it in the delta tag
 * space, which match.c pairs with a receive. The body goes first, so a
 * failure leaves nothing behind: MPI refuses a bad datatype there before
 * the header has left (the id is given back), and a header that cannot
 * follow takes its body back; a header without its body would hold every
 * later message from this rank at the receiver (match.c). */
static int send_header_body(const char *fn, struct ovl__req *r, const void *buf, int count,
                            MPI_Datatype dt, int dest, int tag)
{
    struct body_hdr_send *b = calloc(1, sizeof *b);
    if (!b)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a message header");
    unsigned sid = ovl__delta_new_sid();
    int rc = MPI_Isend(buf, count, dt, dest, (int)sid, ovl__dom_cur()->comm_delta, &r->op.mreq);
    if (rc != MPI_SUCCESS) {
        ovl__delta_return_sid(sid);
        free(b);
        return ovl__mpi_error(rc, fn, "MPI_Isend");
    }
    b->h.magic = OVL__PLAIN_MAGIC;
    b->h.sid = sid;
    b->h.bytes = r->status.bytes;
    b->op.ctx = b;
    b->op.done = body_hdr_sent;
    b->op.kind = OVL__OP_SEND;
    b->op.peer = dest;
    rc = MPI_Isend(&b->h, (int)sizeof b->h, MPI_BYTE, dest, ovl__delta_tag(tag),
                   ovl__dom_cur()->comm_msg, &b->op.mreq);
    if (rc != MPI_SUCCESS) {
        MPI_Cancel(&r->op.mreq);
        MPI_Wait(&r->op.mreq, MPI_STATUS_IGNORE);
        free(b);
        return ovl__mpi_error(rc, fn, "MPI_Isend of a message header");
    }
    if (ovl__engine_post(&b->op, NULL) != OVL_SUCCESS) {
        MPI_Wait(&b->op.mreq, MPI_STATUS_IGNORE);
        free(b);
    }
    return OVL_SUCCESS;
}

static int check_buf(const char *fn, const void *buf, int count, MPI_Datatype dt,
                     ovl_request_t *req)
{
    if (!req)
        return ovl__error(OVL_ERR_ARG, fn, "request pointer is NULL");
    if (count < 0)
        return ovl__error(OVL_ERR_ARG, fn, "negative count %d", count);
    if (dt == MPI_DATATYPE_NULL)
        return ovl__error(OVL_ERR_ARG, fn, "datatype is MPI_DATATYPE_NULL");
    if (!buf && count > 0)
        return ovl__error(OVL_ERR_ARG, fn, "buffer is NULL with count %d", count);
    return OVL_SUCCESS;
}

/* MPI checks a receive's datatype (valid, committed) when the receive is
 * posted, but ovl posts it to MPI only once its message has been matched
 * (match.c), and a failure there would take that message with it. A
 * receive from MPI_PROC_NULL has MPI check it now and moves nothing. */
static int check_recv_type(const char *fn, void *buf, int count, MPI_Datatype dt)
{
    int ni, na, nd, comb;
    if (ovl__dt_common(dt))
        return OVL_SUCCESS;
    if (MPI_Type_get_envelope(dt, &ni, &na, &nd, &comb) != MPI_SUCCESS)
        return ovl__error(OVL_ERR_ARG, fn, "invalid datatype");
    if (comb == MPI_COMBINER_NAMED)
        return OVL_SUCCESS;
    MPI_Request rq = MPI_REQUEST_NULL;
    int rc = MPI_Irecv(buf, count, dt, MPI_PROC_NULL, 0, ovl__dom_cur()->comm_msg, &rq);
    if (rc != MPI_SUCCESS)
        return ovl__mpi_error(rc, fn, "MPI_Irecv");
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    return OVL_SUCCESS;
}

/* A send buffer some of whose bytes are still arriving (a fault-monitored
 * delta receive or get): MPI would read them without waiting. The whole
 * buffer of a delta receive is forwarded as a delta send (which ovl_irecv
 * receives too); anything else is refused. 0: not pending (post it).
 * Arguments already checked by post(). */
static int isend_arriving(const void *buf, int count, MPI_Datatype dt, int tsize, int dest, int tag,
                          ovl_request_t *req, int *rc)
{
    MPI_Aint lb = 0, ext = 0, tlb = 0, text = 0;
    if (count <= 0 || ovl__watch_idle() || MPI_Type_get_extent(dt, &lb, &ext) != MPI_SUCCESS ||
        MPI_Type_get_true_extent(dt, &tlb, &text) != MPI_SUCCESS || ext < 0 || text <= 0)
        return 0; /* nothing pending, or nothing to read */
    const char *lo = (const char *)buf + tlb;
    size_t span = (size_t)(count - 1) * (size_t)ext + (size_t)text;
    if (!ovl__watch_pending(lo, span, 1))
        return 0;
    size_t bytes = (size_t)count * (size_t)tsize;
    if (tlb == 0 && span == bytes && ovl__delta_arriving(buf, bytes)) {
        *rc = ovl_delta_send_begin((void *)(uintptr_t)buf, count, dt, dest, tag, NULL, req);
        if (*rc == OVL_SUCCESS) {
            /* The send has begun: an error of its transfer from here on is
             * the request's, in its status (ovl_wait), as for any send. */
            int erc = ovl_delta_send_end(*req, NULL);
            (void)erc;
        }
        return 1;
    }
    /* the receive may have completed since the first look: its region goes
     * before it is marked done (finish_recv), so look again */
    if (!ovl__watch_pending(lo, span, 1))
        return 0;
    *rc = ovl__error(OVL_ERR_PENDING, "ovl_isend",
                     "buffer [%p, +%zu) holds bytes that have not arrived yet (a delta receive "
                     "or ovl_get still pending): MPI would send stale data. Wait for them first "
                     "(ovl_delta_need, ovl_get_need, ovl_wait), or send the delta receive's "
                     "whole buffer, which is forwarded as it arrives",
                     (const void *)lo, span);
    return 1;
}

int ovl__post_proc_null(const char *fn, int kind, ovl_request_t *req)
{
    struct ovl__req *r;
    ovl_request_t h;
    if (ovl__req_alloc(kind, &r, &h) != OVL_SUCCESS)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a request");
    r->status.source = MPI_PROC_NULL;
    r->status.tag = MPI_ANY_TAG;
    r->status.bytes = 0;
    r->status.error = OVL_SUCCESS;
    *req = h;
    ovl__req_complete(r);
    return OVL_SUCCESS;
}

static int post(const char *fn, int kind, void *buf, int count, MPI_Datatype dt, int peer, int tag,
                ovl_request_t *req)
{
    int rc;
    if ((rc = ovl__check_init(fn)) || (rc = check_buf(fn, buf, count, dt, req)) ||
        (peer != MPI_PROC_NULL && (rc = ovl__check_peer(fn, peer, kind == OVL__REQ_RECV))) ||
        (rc = ovl__check_tag(fn, tag, kind == OVL__REQ_RECV)))
        return rc;
    int tsize = 0;
    if (MPI_Type_size(dt, &tsize) != MPI_SUCCESS)
        return ovl__error(OVL_ERR_ARG, fn, "invalid or uncommitted datatype");
    if (kind == OVL__REQ_RECV && (rc = check_recv_type(fn, buf, count, dt)))
        return rc;
    if (peer == MPI_PROC_NULL)
        return ovl__post_proc_null(fn, kind, req);
    if (kind == OVL__REQ_SEND && isend_arriving(buf, count, dt, tsize, peer, tag, req, &rc))
        return rc;

    struct ovl__req *r;
    ovl_request_t h;
    if (ovl__req_alloc(kind, &r, &h) != OVL_SUCCESS)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a request");
    r->status.tag = tag;
    if (ovl__trace_on)
        r->t_post_us = ovl__now_us();
    r->op.done = msg_done;
    r->op.peer = peer;
    struct ovl__dom *dom = ovl__dom_cur();
    if (kind == OVL__REQ_SEND) {
        r->op.kind = OVL__OP_SEND;
        r->status.source = ovl__g.rank;
        r->status.bytes = (size_t)count * (size_t)tsize;
        buf = bounce(r, buf, count, dt, 0);
        if (!atomic_load(&dom->headed_to[peer])) {
            rc = MPI_Isend(buf, count, dt, peer, tag, dom->comm_msg, &r->op.mreq);
        } else if ((rc = send_header_body(fn, r, buf, count, dt, peer, tag)) != OVL_SUCCESS) {
            unbounce(r, 0);
            ovl__req_release(r);
            return rc;
        }
    } else {
        r->op.kind = OVL__OP_RECV;
        r->buf = bounce(r, buf, count, dt, 1);
        r->count = count;
        if (ovl__dt_keep(dt, &r->dt, &r->dt_owned) != OVL_SUCCESS) {
            unbounce(r, 0);
            ovl__req_release(r);
            return ovl__error(OVL_ERR_ARG, fn, "invalid datatype");
        }
        r->match.source = peer;
        r->match.tag = tag;
        r->match.matched = irecv_matched;
        /* from a peer whose bytes this rank's CPU moves anyway, matched
         * when the program's ovl calls drive (msg_patient) */
        r->match.patient = ovl__model_cpu_bound(peer);
        /* Derived datatypes stay with ovl's matching: MPICH 4.0 leaks a
         * cancelled receive of one (demotion cancels). */
        r->match.prepost = r->dt_owned ? NULL : prepost_recv;
        r->match.cancel = cancel_recv;
        *req = h;
        ovl__match_post(&r->match);
        return OVL_SUCCESS;
    }
    if (rc != MPI_SUCCESS) {
        unbounce(r, 0);
        ovl__req_release(r);
        return ovl__mpi_error(rc, fn, kind == OVL__REQ_SEND ? "MPI_Isend" : "MPI_Irecv");
    }
    if (kind == OVL__REQ_SEND)
        atomic_fetch_add(&dom->sent_to[peer], 1);
    if ((rc = ovl__engine_post(&r->op, &(struct ovl__post){ .bytes = r->status.bytes,
                                                            .patient = msg_patience(peer) })) !=
        OVL_SUCCESS) {
        /* The MPI request exists: finish it here rather than leak it. */
        MPI_Wait(&r->op.mreq, MPI_STATUS_IGNORE);
        unbounce(r, 0);
        ovl__req_release(r);
        return ovl__error(rc, fn, "no memory to track the request");
    }
    *req = h;
    return OVL_SUCCESS;
}

int ovl_isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              ovl_request_t *req)
{
    return post("ovl_isend", OVL__REQ_SEND, (void *)(uintptr_t)buf, count, datatype, dest, tag,
                req);
}

int ovl_irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, ovl_request_t *req)
{
    return post("ovl_irecv", OVL__REQ_RECV, buf, count, datatype, source, tag, req);
}
