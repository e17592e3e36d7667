/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Delta send/receive: a message sent while it is being computed, and used
 * while it is still arriving. This file holds what both sides share: the
 * wire protocol (delta_internal.h's structs), the list of active
 * transfers, delta ids, argument checks and the request hooks; the send
 * side is delta_send.c, the receive side delta_recv.c.
 *
 * Wire protocol. A delta send first sends a 40-byte header on comm_msg
 * with tag (user tag + tag_ub + 1), which match.c pairs with a receive like
 * any other message, in order. The header names a delta id (sid) and the
 * largest piece. The data then follows on comm_delta, tag = sid, as pieces
 * of [24-byte piece header | bytes]: a piece under the MPI library's
 * protocol switch is copied behind its header and sent as one contiguous
 * block (MPICH sends a two-block struct datatype of 4-16 KiB 1.5-4x slower
 * than the copy and send together); a larger one goes straight from the
 * user's buffer with a two-block struct datatype (no copy). The piece
 * header says where the bytes go, so pieces may be produced in any order;
 * the last piece carries the final size (which may be below the buffer's)
 * and whether the sender saw a write after send (stale). To a peer on the
 * sender's node that takes the plain path (ovl__model_direct) the header
 * is flagged H_WHOLE and the message goes as one piece at send_end: the
 * receiver posts one receive, its piece header into the delta's state and
 * the bytes straight into the buffer (or the monitor's shadow), as MPI
 * would (PRK Transpose by the porting guide's recipe on one node: 1.10x
 * plain MPI's time in 256 KiB pieces through staging, docs/PERFORMANCE.md).
 * Above the protocol switch the header is also flagged H_SPLIT: the piece
 * header goes first, then the bytes as a contiguous message of their own,
 * and the receiver posts two receives, which MPI matches in order (the
 * two-block struct cost the recipe 4 % against one contiguous message).
 * The bytes on the sender's partial first and last page (at most a page
 * less a byte each) ride behind the piece header, copied, and the bytes'
 * message holds the whole pages between, read by MPI in place
 * (ovl__delta_edges): a partial page may be another receive's guarded
 * edge, which MPI cannot read, and copying the whole message instead made
 * the fault-monitored PRK Transpose on one node 1.20x plain MPI's time
 * against 1.16x now (docs/PERFORMANCE.md);
 * with no bytes to follow (an empty message, the abort marker) the second
 * receive is cancelled, which is safe because nothing else is sent with
 * its tag, the delta id, before the id space wraps. A send that fails
 * once part of its message has left (no memory for a piece, MPI refusing
 * one) sends nothing more of it but an abort marker, an empty last piece
 * kept in the send's own state (it needs no memory): the receiver then
 * completes with OVL_ERR_CANCELLED instead of waiting for pieces that will
 * never come, and so does a send forwarding that receive.
 */
#include "delta_internal.h"

#include <stdlib.h>

struct ovl__delta_state ovl__delta_g = { .lock = PTHREAD_MUTEX_INITIALIZER };

void ovl__delta_active_add(struct ovl__delta *d)
{
    pthread_mutex_lock(&ovl__delta_g.lock);
    d->prev = NULL;
    d->next = ovl__delta_g.head;
    if (ovl__delta_g.head)
        ovl__delta_g.head->prev = d;
    ovl__delta_g.head = d;
    d->active = 1;
    pthread_mutex_unlock(&ovl__delta_g.lock);
}

void ovl__delta_active_remove(struct ovl__delta *d)
{
    pthread_mutex_lock(&ovl__delta_g.lock);
    if (d->active) {
        if (d->prev)
            d->prev->next = d->next;
        else
            ovl__delta_g.head = d->next;
        if (d->next)
            d->next->prev = d->prev;
        d->active = 0;
    }
    pthread_mutex_unlock(&ovl__delta_g.lock);
}

static int delta_count(int sends_only)
{
    int n = 0;
    pthread_mutex_lock(&ovl__delta_g.lock);
    for (struct ovl__delta *d = ovl__delta_g.head; d; d = d->next)
        if (!sends_only || d->is_send)
            n++;
    pthread_mutex_unlock(&ovl__delta_g.lock);
    return n;
}

static int delta_sending(void)
{
    return delta_count(1);
}

static int delta_active(void)
{
    return delta_count(0);
}

/* Delta messages run as ops and match entries: this source ends the
 * sends the program left open at ovl_finalize and says what is in flight. */
const struct ovl__source ovl__delta_source = {
    .name = "delta",
    .close = ovl__delta_end_all,
    .sending = delta_sending,
    .active = delta_active,
};

void ovl__delta_free(struct ovl__delta *d)
{
    ovl__watch_destroy(d->w);
    ovl__stage_put(d->edge_buf, d->edge_cap);
    free(d->ready);
    free(d->sent);
    free(d);
}

/* ---- argument checks ----------------------------------------------------- */

/* Bytes of @count elements of @dt if they are one contiguous block, else
 * OVL_ERR_ARG (nothing recorded). */
int ovl__delta_contiguous(int count, MPI_Datatype dt, size_t *bytes)
{
    int size = 0;
    MPI_Aint lb, extent, tlb, textent;
    if (MPI_Type_size(dt, &size) != MPI_SUCCESS || MPI_Type_get_extent(dt, &lb, &extent) ||
        MPI_Type_get_true_extent(dt, &tlb, &textent))
        return OVL_ERR_ARG;
    if (size > 0 && (tlb != 0 || textent != size || (count > 1 && extent != size)))
        return OVL_ERR_ARG;
    *bytes = (size_t)count * (size_t)size;
    return OVL_SUCCESS;
}

/* The monitor a request asked for in its param (AUTO: the process's). */
static ovl_monitor_t param_monitor(const ovl_param_t *param)
{
    return param && (param->field_mask & OVL_PARAM_FIELD_MONITOR) ? param->monitor
                                                                  : OVL_MONITOR_AUTO;
}

/* A fault monitor asked for by name (not auto) that cannot work in this
 * process (ovl__watch_resolve gave explicit: no /proc/self/mem): an
 * error, not a silent switch to annotations the program does not make. */
static int check_monitor(const char *fn, ovl_monitor_t asked, ovl_monitor_t got)
{
    if (got != OVL_MONITOR_EXPLICIT || asked == OVL_MONITOR_AUTO || asked == OVL_MONITOR_EXPLICIT)
        return OVL_SUCCESS;
    ovl_monitor_t c;
    char why[480] = "";
    int prc = ovl_monitor_probe(asked, &c, why, sizeof why);
    (void)prc; /* only the reason is wanted */
    return ovl__error(OVL_ERR_MONITOR, fn, "the %s monitor cannot work in this process: %s",
                      ovl_monitor_name(asked), why);
}

/* The argument checks both delta calls share (@param takes the monitor
 * field only): @cap gets the buffer bytes, @asked the monitor asked for,
 * @mon the one that will work (ovl__watch_resolve). */
int ovl__delta_check_args(const char *fn, void *buf, int count, MPI_Datatype dt, int peer, int tag,
                          int any_ok, const ovl_param_t *param, ovl_request_t *req, size_t *cap,
                          ovl_monitor_t *asked, ovl_monitor_t *mon)
{
    int rc;
    if ((rc = ovl__param_check(fn, param, OVL_PARAM_FIELD_MONITOR)) || (rc = ovl__check_init(fn)))
        return rc;
    const ovl_monitor_t monitor = param_monitor(param);
    if (!req)
        return ovl__error(OVL_ERR_ARG, fn, "request pointer is NULL");
    if ((unsigned)monitor > OVL_MONITOR_EXPLICIT)
        return ovl__error(OVL_ERR_ARG, fn, "unknown monitor %d", (int)monitor);
    if (count < 0)
        return ovl__error(OVL_ERR_ARG, fn, "negative count %d", count);
    if (dt == MPI_DATATYPE_NULL)
        return ovl__error(OVL_ERR_ARG, fn, "datatype is MPI_DATATYPE_NULL");
    int size = 0;
    if (MPI_Type_size(dt, &size) != MPI_SUCCESS)
        return ovl__error(OVL_ERR_ARG, fn, "invalid or uncommitted datatype");
    if (ovl__delta_contiguous(count, dt, cap) != OVL_SUCCESS) {
        MPI_Aint lb, extent, tlb, textent;
        MPI_Type_get_extent(dt, &lb, &extent);
        MPI_Type_get_true_extent(dt, &tlb, &textent);
        return ovl__error(OVL_ERR_ARG, fn,
                          "datatype is not contiguous (size %d, extent %ld, true lb %ld): delta "
                          "send/receive works on contiguous buffers",
                          size, (long)extent, (long)tlb);
    }
    if (!buf && *cap > 0)
        return ovl__error(OVL_ERR_ARG, fn, "buffer is NULL with count %d", count);
    if (peer == MPI_PROC_NULL)
        return ovl__error(OVL_ERR_RANK, fn,
                          "MPI_PROC_NULL: a delta transfer needs a real peer (ovl_isend and "
                          "ovl_irecv accept MPI_PROC_NULL)");
    if ((rc = ovl__check_peer(fn, peer, any_ok)) || (rc = ovl__check_tag(fn, tag, any_ok)))
        return rc;
    *asked = monitor;
    *mon = ovl__watch_resolve(monitor);
    return check_monitor(fn, monitor, *mon);
}

int ovl__delta_check_stack(const char *fn, ovl_monitor_t mon, const void *buf, size_t len)
{
    if (mon != OVL_MONITOR_EXPLICIT && ovl__watch_on_my_stack(buf, len))
        return ovl__error(OVL_ERR_ARG, fn,
                          "buffer %p is on the thread's stack: the %s monitor cannot guard stack "
                          "pages; use heap memory or OVL_MONITOR_EXPLICIT",
                          buf, ovl_monitor_name(mon));
    return OVL_SUCCESS;
}

int ovl__delta_lookup(const char *fn, ovl_request_t h, int kind, struct ovl__req **out)
{
    struct ovl__req *r = NULL;
    if (ovl__req_lookup(h, &r) != OVL_SUCCESS || r->detached)
        return ovl__error(OVL_ERR_REQUEST, fn, "invalid or released request handle %p", (void *)h);
    if (r->kind != kind || !r->delta)
        return ovl__error(OVL_ERR_REQUEST, fn, "request %p is not a delta %s", (void *)h,
                          kind == OVL__REQ_DSEND ? "send" : "receive");
    *out = r;
    return OVL_SUCCESS;
}

/* The request table's hooks (struct ovl__req_ops): a recycled slot frees
 * the delta state; a send waited on, tested or freed before its end is
 * ended first. */
static void req_release(struct ovl__req *r)
{
    if (r->delta) {
        ovl__delta_free(r->delta);
        r->delta = NULL;
    }
}

static const struct ovl__req_ops recv_ops = { .release = req_release };
static const struct ovl__req_ops send_ops = { .release = req_release,
                                              .unfinished = ovl__delta_implied_end };

struct ovl__delta *ovl__delta_new(struct ovl__req *r, int is_send, void *buf, size_t cap)
{
    struct ovl__delta *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    atomic_flag_clear(&d->lock.f);
    d->req = r;
    d->is_send = is_send;
    d->buf = buf;
    d->cap = cap;
    d->t_trace = ovl__now_us();
    r->delta = d;
    /* atomic: an ovl_irecv matched to a delta header gets its ops here, on
     * the driver, while its owner may be testing it (request.c) */
    __atomic_store_n(&r->ops, is_send ? &send_ops : &recv_ops, __ATOMIC_RELEASE);
    return d;
}

unsigned ovl__delta_new_sid(void)
{
    return atomic_fetch_add(&ovl__delta_g.next_sid, 1) % ((unsigned)ovl__g.mpi_tag_ub + 1u);
}

void ovl__delta_return_sid(unsigned sid)
{
    unsigned cur = atomic_load(&ovl__delta_g.next_sid);
    if ((cur - 1u) % ((unsigned)ovl__g.mpi_tag_ub + 1u) == sid)
        atomic_compare_exchange_strong(&ovl__delta_g.next_sid, &cur, cur - 1u);
}

int ovl_delta_size(ovl_request_t req, size_t *bytes)
{
    static const char *fn = "ovl_delta_size";
    int rc;
    struct ovl__req *r = NULL;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (!bytes)
        return ovl__error(OVL_ERR_ARG, fn, "bytes is NULL");
    if (ovl__req_lookup(req, &r) != OVL_SUCCESS || !r->delta)
        return ovl__error(OVL_ERR_REQUEST, fn, "not a pending delta request");
    *bytes = r->delta->is_send ? r->delta->dsize : r->delta->max_piece;
    return OVL_SUCCESS;
}
