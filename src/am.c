/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Active messages (source system 5's first-domain rule): a request runs a
 * registered handler at the target, which answers every request once,
 * with its reply or an empty acknowledgement, or with OVL_ERR_ARG when no
 * handler is registered, so a sender's request always completes.
 *
 * Headers travel on comm_am (domain 0's): a request of at most
 * OVL_AM_EAGER_MAX payload bytes is one message (header + payload, TAG_REQ);
 * a larger one a header (TAG_REQ_BIG) and the payload as a bulk message on
 * comm_am_bulk, tagged by its sequence number (never probed, so the poll's
 * wildcard probe cannot take it); a reply is one message (TAG_REP). The
 * receiving side is a progress source of engine 0 only: its poll probes
 * comm_am and runs handlers on the thread driving domain 0, so handlers
 * run one at a time. Before this rank uses active messages at all
 * (registers a handler, sends or receives one) it probes every 64th drive only, so a
 * program that never uses them pays almost nothing, and a message sent to
 * it is still answered.
 */
#include "ovl_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_REQ = 1, TAG_REQ_BIG = 2, TAG_REP = 3, TAG_BULK = 16 };
#define AM_MAGIC 0x6f766c41u /* "ovlA" */

struct am_hdr {
    uint32_t magic;
    int32_t id;
    uint64_t seq;
    uint64_t bytes;
    int32_t status; /* a reply: OVL_SUCCESS or the error the request completes with */
    uint32_t reserved;
};

/* A request waiting for its reply (and, for a large one, its bulk send). */
struct pend {
    uint64_t seq;
    int rank, id;
    struct ovl__req *r;
    void *reply;
    size_t cap;
    int drop;        /* ovl_am_request: a reply's payload is not wanted */
    atomic_int left; /* the reply, plus the bulk send of a large request */
    int error;
    size_t got;
    struct pend *next;
};

/* A message this rank sends: the packed buffer it frees when done, and the
 * request a bulk send counts for. */
struct am_send {
    struct ovl__op op;
    void *buf;
    struct pend *p;
};

/* A large request's payload arriving. */
struct am_bulk {
    struct ovl__op op;
    int src;
    struct am_hdr h;
    void *payload;
};

struct ovl_am_token_s {
    uint32_t magic;
    int src, id;
    uint64_t seq;
    int replied;
};

static struct {
    _Atomic(ovl_am_fn) fn[OVL__AM_IDS]; /* the program's, then ovl's own (OVL__AM_PLAN) */
    void *_Atomic arg[OVL__AM_IDS];
    atomic_int active; /* this rank has used active messages */
    pthread_mutex_t lock;
    struct pend *head; /* requests waiting for replies */
    atomic_int npend;
    atomic_ullong next_seq;
    atomic_ullong next_data; /* ovl__am_data_tag */
    atomic_ullong handled;
    unsigned skip; /* drives since the last probe, while not active (driver) */
    char *rx;      /* the driver's receive buffer */
    size_t rx_cap;
} A = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* comm_am_bulk's tags: the lower half for large requests' payloads (from
 * the sender's sequence), the upper half for data a handler sends back to
 * a requester that chose the tag (ovl__am_data_tag), so the two never
 * match each other's messages. */
static unsigned bulk_span(void)
{
    return ((unsigned)ovl__g.mpi_tag_ub - TAG_BULK + 1u) / 2u;
}

static int bulk_tag(uint64_t seq)
{
    return TAG_BULK + (int)(seq % bulk_span());
}

int ovl__am_data_tag(void)
{
    unsigned span = bulk_span();
    return TAG_BULK + (int)span + (int)(atomic_fetch_add(&A.next_data, 1) % span);
}

/* ---- completing the sender's request ------------------------------------------ */

static void finish(struct pend *p)
{
    struct ovl__req *r = p->r;
    r->status.source = p->rank;
    r->status.tag = p->id;
    r->status.bytes = p->got;
    r->status.error = p->error;
    free(p);
    ovl__req_complete(r);
}

static void pend_done_one(struct pend *p)
{
    if (atomic_fetch_sub(&p->left, 1) == 1) {
        atomic_fetch_sub(&A.npend, 1);
        finish(p);
    }
}

static struct pend *take_pend(int rank, uint64_t seq)
{
    pthread_mutex_lock(&A.lock);
    struct pend **pp = &A.head, *p = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->seq == seq && (*pp)->rank == rank) {
            p = *pp;
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(&A.lock);
    return p;
}

static void send_done(struct ovl__op *op, MPI_Status *st)
{
    struct am_send *s = (struct am_send *)op;
    if (s->p) {
        if (st->MPI_ERROR != MPI_SUCCESS && s->p->error == OVL_SUCCESS)
            s->p->error = OVL_ERR_MPI;
        pend_done_one(s->p);
    }
    ovl__buf_free(s->buf);
    free(s);
}

/* MPI_Isend of @n bytes at @buf on @comm, an engine op of the current
 * domain (0); @own is freed once sent. */
static int post_send(const void *buf, size_t n, int dest, int tag, MPI_Comm comm, void *own,
                     struct pend *p)
{
    struct am_send *s = calloc(1, sizeof *s);
    if (!s) {
        ovl__buf_free(own);
        return OVL_ERR_NOMEM;
    }
    s->buf = own;
    s->p = p;
    s->op.done = send_done;
    s->op.ctx = s;
    s->op.kind = OVL__OP_SEND;
    s->op.peer = dest;
    if (MPI_Isend(buf, (int)n, MPI_BYTE, dest, tag, comm, &s->op.mreq) != MPI_SUCCESS) {
        ovl__buf_free(own);
        free(s);
        return OVL_ERR_MPI;
    }
    if (ovl__engine_post(&s->op, &(struct ovl__post){ .bytes = n }) != OVL_SUCCESS) {
        /* the send is under way: wait for it here rather than lose it */
        MPI_Wait(&s->op.mreq, MPI_STATUS_IGNORE);
        ovl__buf_free(own);
        free(s);
        return OVL_ERR_NOMEM;
    }
    return OVL_SUCCESS;
}

/* header + payload in one buffer (ovl__buf_alloc) */
static void *pack(const struct am_hdr *h, const void *payload, size_t bytes)
{
    char *b = ovl__buf_alloc(sizeof *h + bytes);
    if (!b)
        return NULL;
    memcpy(b, h, sizeof *h);
    if (bytes)
        memcpy(b + sizeof *h, payload, bytes);
    return b;
}

static int send_reply(int dest, uint64_t seq, int id, int status, const void *buf, size_t bytes)
{
    struct am_hdr h = { AM_MAGIC, id, seq, bytes, status, 0 };
    void *b = pack(&h, buf, bytes);
    if (!b)
        return OVL_ERR_NOMEM;
    return post_send(b, sizeof h + bytes, dest, TAG_REP, ovl__g.comm_am, b, NULL);
}

/* ---- the target -------------------------------------------------------------- */

static void run_handler(int src, const struct am_hdr *h, const void *payload, size_t bytes)
{
    ovl_am_fn fn = h->id >= 0 && h->id < OVL__AM_IDS ? atomic_load(&A.fn[h->id]) : NULL;
    /* a rank that receives active messages uses them: probe every drive */
    atomic_store_explicit(&A.active, 1, memory_order_relaxed);
    if (!fn) {
        if (send_reply(src, h->seq, h->id, OVL_ERR_ARG, NULL, 0) != OVL_SUCCESS)
            ovl__report(OVL_ERR_NOMEM, "ovl active message", "cannot answer rank %d", src);
        return;
    }
    struct ovl_am_token_s tok = { AM_MAGIC, src, h->id, h->seq, 0 };
    struct ovl__tls *t = ovl__tls();
    double t0 = ovl__trace_on ? ovl__now_us() : 0;
    t->in_callback++;
    fn(&tok, payload, bytes, atomic_load(&A.arg[h->id]));
    t->in_callback--;
    tok.magic = 0;
    if (ovl__trace_on)
        ovl__trace_complete("am", "handler", t0, ovl__now_us() - t0, "id", h->id, "bytes",
                            (long long)bytes, NULL, 0);
    atomic_fetch_add_explicit(&A.handled, 1, memory_order_relaxed);
    if (!tok.replied && send_reply(src, h->seq, h->id, OVL_SUCCESS, NULL, 0) != OVL_SUCCESS)
        ovl__report(OVL_ERR_NOMEM, "ovl active message", "cannot answer rank %d", src);
}

static void bulk_done(struct ovl__op *op, MPI_Status *st)
{
    struct am_bulk *b = (struct am_bulk *)op;
    if (st->MPI_ERROR == MPI_SUCCESS)
        run_handler(b->src, &b->h, b->payload, (size_t)b->h.bytes);
    else
        send_reply(b->src, b->h.seq, b->h.id, OVL_ERR_MPI, NULL, 0);
    ovl__buf_free(b->payload);
    free(b);
}

static int rx_grow(size_t n)
{
    if (n <= A.rx_cap)
        return 0;
    char *b = ovl__buf_realloc(A.rx, n);
    if (!b)
        return -1;
    A.rx = b;
    A.rx_cap = n;
    return 0;
}

/* One probed message (driver of domain 0). */
static void take(MPI_Message *msg, MPI_Status *st)
{
    int n = 0;
    MPI_Get_count(st, MPI_BYTE, &n);
    int src = st->MPI_SOURCE;
    if (rx_grow((size_t)n > sizeof(struct am_hdr) ? (size_t)n : sizeof(struct am_hdr)) != 0) {
        /* no room: receive the header only to answer with an error */
        static char sink[sizeof(struct am_hdr) + OVL_AM_EAGER_MAX];
        MPI_Mrecv(sink, (int)sizeof sink, MPI_BYTE, msg, MPI_STATUS_IGNORE);
        return;
    }
    MPI_Mrecv(A.rx, n, MPI_BYTE, msg, MPI_STATUS_IGNORE);
    struct am_hdr h;
    if ((size_t)n < sizeof h)
        return;
    memcpy(&h, A.rx, sizeof h);
    if (h.magic != AM_MAGIC)
        return;
    const char *payload = A.rx + sizeof h;
    size_t plen = (size_t)n - sizeof h;
    if (st->MPI_TAG == TAG_REQ) {
        run_handler(src, &h, payload, plen);
    } else if (st->MPI_TAG == TAG_REQ_BIG) {
        struct am_bulk *b = calloc(1, sizeof *b);
        void *pl = b ? ovl__buf_alloc(h.bytes ? (size_t)h.bytes : 1) : NULL;
        if (!b || !pl) {
            free(b);
            /* the bulk message is still sent: receive and drop it */
            void *tmp = ovl__buf_alloc(h.bytes ? (size_t)h.bytes : 1);
            if (tmp)
                MPI_Recv(tmp, (int)h.bytes, MPI_BYTE, src, bulk_tag(h.seq), ovl__g.comm_am_bulk,
                         MPI_STATUS_IGNORE);
            ovl__buf_free(tmp);
            send_reply(src, h.seq, h.id, OVL_ERR_NOMEM, NULL, 0);
            return;
        }
        b->src = src;
        b->h = h;
        b->payload = pl;
        b->op.done = bulk_done;
        b->op.ctx = b;
        b->op.kind = OVL__OP_FRAG; /* once started, it completes (finalize) */
        b->op.peer = src;
        if (MPI_Irecv(pl, (int)h.bytes, MPI_BYTE, src, bulk_tag(h.seq), ovl__g.comm_am_bulk,
                      &b->op.mreq) != MPI_SUCCESS ||
            ovl__engine_post(&b->op, &(struct ovl__post){ .bytes = (size_t)h.bytes }) !=
                OVL_SUCCESS) {
            ovl__buf_free(pl);
            free(b);
            send_reply(src, h.seq, h.id, OVL_ERR_MPI, NULL, 0);
        }
    } else if (st->MPI_TAG == TAG_REP) {
        struct pend *p = take_pend(src, h.seq);
        if (!p)
            return;
        if (p->drop)
            plen = 0;
        p->got = plen;
        if (p->error == OVL_SUCCESS)
            p->error = h.status;
        if (plen > p->cap) {
            if (p->error == OVL_SUCCESS)
                p->error = OVL_ERR_TRUNCATE;
            plen = p->cap;
        }
        if (plen)
            memcpy(p->reply, payload, plen);
        pend_done_one(p);
    }
}

static int am_poll(void)
{
    if (ovl__g.comm_am == MPI_COMM_NULL)
        return 0;
    if (!atomic_load_explicit(&A.active, memory_order_relaxed) && (++A.skip & 63u))
        return 0;
    int got = 0;
    for (int k = 0; k < 16; k++) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, ovl__g.comm_am, &flag, &msg, &st) !=
                MPI_SUCCESS ||
            !flag)
            break;
        take(&msg, &st);
        got++;
    }
    return got;
}

/* Once this rank uses active messages, the progress thread polls for
 * them at the serving pace (OVL_SERVE_US). */
static int am_serving(void)
{
    return atomic_load_explicit(&A.active, memory_order_relaxed);
}

static int am_sending(void)
{
    return atomic_load(&A.npend) > 0;
}

static void am_forget(void)
{
    ovl__buf_free(A.rx);
    A.rx = NULL;
    A.rx_cap = 0;
    atomic_store(&A.active, 0);
    for (int i = 0; i < OVL_AM_MAX; i++)
        atomic_store(&A.fn[i], NULL);
}

const struct ovl__source ovl__am_source = {
    .name = "am",
    .poll = am_poll,
    .serving = am_serving,
    .sending = am_sending,
    .active = am_sending,
    .forget = am_forget,
};

uint64_t ovl__am_handled(void)
{
    return atomic_load(&A.handled);
}

/* ---- the public calls ---------------------------------------------------------- */

int ovl_am_register(int id, ovl_am_fn fn, void *arg)
{
    static const char *name = "ovl_am_register";
    int rc;
    if ((rc = ovl__check_init(name)))
        return rc;
    if (id < 0 || id >= OVL_AM_MAX)
        return ovl__error(OVL_ERR_ARG, name, "id %d outside [0, %d]", id, OVL_AM_MAX - 1);
    atomic_store(&A.arg[id], arg);
    atomic_store(&A.fn[id], fn);
    atomic_store(&A.active, 1);
    ovl__engine_wake();
    return OVL_SUCCESS;
}

static int am_send(const char *name, int rank, int id, const void *buf, size_t bytes, void *reply,
                   size_t cap, int drop, ovl_request_t *req, int ids)
{
    int rc;
    if ((rc = ovl__check_init(name)))
        return rc;
    if (!req)
        return ovl__error(OVL_ERR_ARG, name, "req is NULL");
    if (id < 0 || id >= ids)
        return ovl__error(OVL_ERR_ARG, name, "id %d outside [0, %d]", id, OVL_AM_MAX - 1);
    if (!buf && bytes > 0)
        return ovl__error(OVL_ERR_ARG, name, "buf is NULL with %zu bytes", bytes);
    if (!reply && cap > 0)
        return ovl__error(OVL_ERR_ARG, name, "reply is NULL with reply_cap %zu", cap);
    if (bytes > (size_t)INT_MAX)
        return ovl__error(OVL_ERR_ARG, name, "%zu bytes: at most %d", bytes, INT_MAX);
    if ((rc = ovl__check_peer(name, rank, 0)))
        return rc;
    atomic_store(&A.active, 1);
    struct ovl__req *r;
    ovl_request_t h;
    if ((rc = ovl__req_alloc(OVL__REQ_SEND, &r, &h)) != OVL_SUCCESS)
        return ovl__error(rc, name, "no request slot");
    struct pend *p = calloc(1, sizeof *p);
    if (!p) {
        ovl__req_release(r);
        return ovl__error(OVL_ERR_NOMEM, name, "allocating the request's state");
    }
    int big = bytes > OVL_AM_EAGER_MAX;
    p->seq = atomic_fetch_add(&A.next_seq, 1);
    p->rank = rank;
    p->id = id;
    p->r = r;
    p->reply = reply;
    p->cap = cap;
    p->drop = drop;
    atomic_init(&p->left, 1 + big);
    struct am_hdr hd = { AM_MAGIC, id, p->seq, bytes, OVL_SUCCESS, 0 };
    void *b = pack(&hd, buf, big ? 0 : bytes);
    if (!b) {
        free(p);
        ovl__req_release(r);
        return ovl__error(OVL_ERR_NOMEM, name, "allocating the message");
    }
    pthread_mutex_lock(&A.lock);
    p->next = A.head;
    A.head = p;
    pthread_mutex_unlock(&A.lock);
    atomic_fetch_add(&A.npend, 1);
    rc = post_send(b, sizeof hd + (big ? 0 : bytes), rank, big ? TAG_REQ_BIG : TAG_REQ,
                   ovl__g.comm_am, b, NULL);
    if (rc == OVL_SUCCESS && big)
        rc = post_send(buf, bytes, rank, bulk_tag(p->seq), ovl__g.comm_am_bulk, NULL, p);
    if (rc != OVL_SUCCESS) {
        /* Nothing sent (the header failed), or the header went and the
         * payload did not: the target then waits for it, which the
         * program learns from this error. */
        if (take_pend(rank, p->seq)) {
            atomic_fetch_sub(&A.npend, 1);
            free(p);
            ovl__req_release(r);
        }
        return ovl__error(rc, name, "sending to rank %d", rank);
    }
    *req = h;
    return OVL_SUCCESS;
}

int ovl_am_request(int rank, int id, const void *buf, size_t bytes, ovl_request_t *req)
{
    struct ovl__dom *prev = ovl__dom_enter(ovl__dom0());
    int rc = am_send("ovl_am_request", rank, id, buf, bytes, NULL, 0, 1, req, OVL_AM_MAX);
    ovl__dom_leave(prev);
    return rc;
}

int ovl_am_call(int rank, int id, const void *buf, size_t bytes, void *reply, size_t reply_cap,
                ovl_request_t *req)
{
    struct ovl__dom *prev = ovl__dom_enter(ovl__dom0());
    int rc = am_send("ovl_am_call", rank, id, buf, bytes, reply, reply_cap, 0, req, OVL_AM_MAX);
    ovl__dom_leave(prev);
    return rc;
}

void ovl__am_register(int id, ovl_am_fn fn, void *arg)
{
    atomic_store(&A.arg[id], arg);
    atomic_store(&A.fn[id], fn);
}

int ovl__am_call(const char *fn, int rank, int id, const void *buf, size_t bytes, void *reply,
                 size_t reply_cap, ovl_request_t *req)
{
    struct ovl__dom *prev = ovl__dom_enter(ovl__dom0());
    int rc = am_send(fn, rank, id, buf, bytes, reply, reply_cap, reply == NULL, req, OVL__AM_IDS);
    ovl__dom_leave(prev);
    return rc;
}

int ovl_am_reply(ovl_am_token_t tok, const void *buf, size_t bytes)
{
    static const char *name = "ovl_am_reply";
    if (!tok || tok->magic != AM_MAGIC)
        return ovl__error(OVL_ERR_ARG, name, "not a token of a handler that is running");
    if (tok->replied)
        return ovl__error(OVL_ERR_ARG, name, "the handler already replied");
    if (bytes > OVL_AM_EAGER_MAX)
        return ovl__error(OVL_ERR_ARG, name, "%zu bytes: a reply holds at most %d", bytes,
                          OVL_AM_EAGER_MAX);
    if (!buf && bytes > 0)
        return ovl__error(OVL_ERR_ARG, name, "buf is NULL with %zu bytes", bytes);
    int rc = send_reply(tok->src, tok->seq, tok->id, OVL_SUCCESS, buf, bytes);
    if (rc != OVL_SUCCESS)
        return ovl__error(rc, name, "replying to rank %d", tok->src);
    tok->replied = 1;
    return OVL_SUCCESS;
}

int ovl_am_source(ovl_am_token_t tok, int *rank)
{
    if (!tok || tok->magic != AM_MAGIC || !rank)
        return ovl__error(OVL_ERR_ARG, "ovl_am_source",
                          rank ? "not a token of a handler that is running" : "rank is NULL");
    *rank = tok->src;
    return OVL_SUCCESS;
}
