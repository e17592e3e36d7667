/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: request.c: the request table.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_REQUEST_H
#define OVL_INTERNAL_REQUEST_H

/* ---- request.c -------------------------------------------------------- */

enum ovl__req_kind {
    OVL__REQ_SEND,
    OVL__REQ_RECV,
    OVL__REQ_SSEND,
    OVL__REQ_SRECV,
    OVL__REQ_DSEND,
    OVL__REQ_DRECV,
    OVL__REQ_RMA /* ovl_get with a request: completes when the first strip is in place */
};

struct ovl__op;
typedef void (*ovl__op_done_fn)(struct ovl__op *op, MPI_Status *status);

/* One MPI request the engine drives, with the handler run when it completes
 * (on the thread driving progress, engine lock not held). */
struct ovl__op {
    MPI_Request mreq;
    ovl__op_done_fn done;
    void *ctx;
    int kind;      /* OVL__OP_* below: finalize needs to tell sends from receives */
    int peer;      /* for receives: the source asked for */
    double due_us; /* set by the engine: predicted completion (ovl__now_us
                    * clock), 0 = unknown, so poll at the usual pace */
    /* set by the engine (ovl__post.follows): the op sets no
     * pace of its own (a stream fragment between two checkpoints: a later
     * fragment of its stream asks for the poll that settles it too) */
    int quiet;
    /* set by the engine (ovl__post.slack_us): non-zero marks a
     * stream's checkpoint, whose window has room for a late poll: the
     * thread sleeps until due_us, not halfway there, and once due_us has
     * passed without completion (its sender is behind), until this much
     * later instead of at the usual pace */
    double slack_us;
    /* set by the engine (ovl__post.patient): non-zero from
     * it means that nothing but the op's own consumer waits for it now, and
     * that consumer drives progress itself when it needs the data, so the
     * progress thread may poll it at a slower pace. Engine lock held. */
    int (*patient)(const struct ovl__op *op);
    /* set by the engine (ovl__post.handshake): until the
     * engine's poll count reaches this, the op keeps the usual pace
     * instead of sleeping towards due_us */
    unsigned long hs_until;
};
/* OVL__OP_FRAG: a receive for a later fragment of a stream that has begun
 * arriving; finalize must let it complete rather than cancel it.
 * OVL__OP_USER: an MPI request of the program's (ovl_continue_mpi), whose
 * continuation waits: the progress thread polls within OVL_LATENESS_US.
 * OVL__OP_RMA: a strip of ovl_get/ovl_put; nobody waits on a callback, so
 * the usual pace (polling it at the callback pace cost a computation that
 * runs while a get arrives 5-10 % on the Xeon, docs/PERFORMANCE.md). */
enum { OVL__OP_SEND, OVL__OP_RECV, OVL__OP_USER, OVL__OP_FRAG, OVL__OP_RMA };

/* A receive waiting in match.c for a message on comm_msg. `matched` runs
 * once: with the matched message (delta = 1 for a delta header), or with
 * msg == MPI_MESSAGE_NULL and st == NULL when cancelled (finalize). It runs
 * on the driving thread or inside ovl__match_post, no lock held.
 *
 * A receive with `prepost` set may instead be handed to MPI as a real
 * receive when match.c finds that safe (see match.c): `prepost` posts it
 * (0 on success), `cancel` cancels that MPI receive, and its engine
 * handler reports the outcome with ovl__match_prepost_done. */
struct ovl__match {
    int source, tag;
    void (*matched)(struct ovl__match *m, MPI_Message msg, MPI_Status *st, int delta);
    int (*prepost)(struct ovl__match *m);
    void (*cancel)(struct ovl__match *m);
    struct ovl__match *next;
    uint64_t seq; /* posting order */
    int demoting; /* its MPI receive is being cancelled (match.c lock) */
    /* set before posting: the thread may poll slowly for it (a delta
     * receive: the program's access drives its matching); cleared only by
     * ovl__match_hurry (match.c lock) */
    int patient;
};

struct ovl__req {
    uint32_t gen; /* generation; a handle is valid while its gen matches */
    uint32_t idx; /* slot index in the request table */
    int in_use;   /* atomic access: lookups race with releases */
    int kind;     /* enum ovl__req_kind; first field cleared by ovl__req_alloc */
    /* Completion. `done` is set once the operation has completed and its
     * continuation (if any) has run: ovl_wait returning implies both. */
    atomic_int done;
    int completed; /* operation finished (engine lock) */
    int detached;  /* user released it before completion (engine lock) */
    ovl_status_t status;
    ovl_continue_fn cont; /* engine lock */
    void *cont_arg;
    int cont_registered;        /* one continuation per request */
    int cont_pending;           /* counted as waiting by the engine (engine lock) */
    struct ovl__op op;          /* send/recv */
    struct ovl__stream *stream; /* stream requests */
    /* receives matched by match.c */
    struct ovl__match match;
    void *buf;
    int count;
    MPI_Datatype dt; /* owned copy for derived types (freed at match) */
    int dt_owned;
    struct ovl__delta *delta;       /* delta requests, and ovl_irecv of a delta */
    const struct ovl__req_ops *ops; /* the front end's hooks, NULL: none */
    double t_post_us;               /* OVL_TRACE: when it was posted */
    /* ovl_isend/ovl_irecv of a buffer on another pending receive's guarded
     * edge page: MPI moves the bytes through this staging (message.c) */
    char *bounce;
    size_t bounce_cap, bounce_len;
    char *bounce_to; /* the program's span of the buffer */
    /* the domain it was created in, whose engine drives it (domain.c) */
    struct ovl__dom *dom;
};

/* Hooks a front end attaches to a request (r->ops), so that the request
 * table calls none of it by name. Each may be NULL. */
struct ovl__req_ops {
    /* the slot is recycled: free what the front end attached */
    void (*release)(struct ovl__req *r);
    /* a wait, test or free meets the request not yet complete: what the
     * call implies first (a delta send: its end) */
    void (*unfinished)(struct ovl__req *r);
};

/* The request a receive's match entry belongs to (match.c hands back @m). */
static inline struct ovl__req *ovl__req_of_match(struct ovl__match *m)
{
    return (struct ovl__req *)((char *)m - offsetof(struct ovl__req, match));
}

int ovl__req_table_init(void);
void ovl__req_table_fini(void);
int ovl__req_alloc(int kind, struct ovl__req **out, ovl_request_t *handle);
/* Validate a handle; OVL_ERR_REQUEST for stale/foreign ones. */
int ovl__req_lookup(ovl_request_t h, struct ovl__req **out);
/* Hold @r (looked up from @h) against release by other calls until
 * ovl__req_unpin; OVL_ERR_REQUEST if it was released or freed meanwhile. */
int ovl__req_pin(ovl_request_t h, struct ovl__req *r);
void ovl__req_unpin(ovl_request_t h, struct ovl__req *r);
void ovl__req_release(struct ovl__req *r);
/* message.c: a request of @kind to or from MPI_PROC_NULL, completed at once
 * as MPI does (source MPI_PROC_NULL, tag MPI_ANY_TAG, 0 bytes). */
int ovl__post_proc_null(const char *fn, int kind, ovl_request_t *req);
/* delta_recv.c: MPI_Imrecv of a matched message of @n bytes, any size (over
 * 2 GiB as one element of an @n-byte type). */
int ovl__imrecv_bytes(void *buf, size_t n, MPI_Message *msg, MPI_Request *rq);

#endif /* OVL_INTERNAL_REQUEST_H */
