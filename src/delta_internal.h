/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private to delta send/receive: delta_wire.c (the wire protocol these
 * structs carry, the active list, delta ids, argument checks, the request
 * hooks), delta_send.c (the send side) and delta_recv.c (the receive
 * side). One struct ovl__delta is one transfer, send or receive; both
 * sides read a receive's fields when a send forwards it.
 */
#ifndef OVL_DELTA_INTERNAL_H
#define OVL_DELTA_INTERNAL_H

#include "ovl_internal.h"

#define HDR_MAGIC 0x6f766c44u /* "ovlD" */
#define NSLOTS    8
#define NFWD      8 /* sends that may forward one arriving buffer */

enum { P_LAST = 1u, P_STALE = 2u, P_ABORT = 4u };
/* delta_hdr.flags: the message comes as one piece; H_SPLIT: that piece's
 * header and bytes come as two messages (delta_wire.c) */
enum { H_WHOLE = 1u, H_SPLIT = 2u };

struct delta_hdr {
    uint32_t magic, sid;
    uint64_t cap;
    uint32_t max_piece, flags;
    uint32_t pgoff, page; /* H_SPLIT: the buffer's offset in its page, the page size */
    uint64_t reserved;    /* (40 bytes: match.c tells a plain header, 32, by its size) */
};
_Static_assert(sizeof(struct delta_hdr) != sizeof(struct ovl__plain_hdr),
               "a probe tells a delta header from a plain one by its size");

struct piece_hdr {
    uint64_t off, total;
    uint32_t len, flags;
};

/* H_SPLIT: of a message of @len bytes whose first byte lies @pgoff bytes
 * into a page of @page bytes at the sender, the bytes before its first
 * page boundary (*head) and after its last (*tail) go behind the piece
 * header; the rest, whole pages at the sender (never another receive's
 * guarded edge, so MPI reads them in place), follows as the bytes'
 * message, empty or not (delta_wire.c). */
static inline void ovl__delta_edges(size_t pgoff, size_t page, size_t len, size_t *head,
                                    size_t *tail)
{
    size_t h = page && pgoff % page ? page - pgoff % page : 0;
    size_t t = page ? (pgoff + len) % page : 0;
    if (h > len)
        h = len;
    if (t > len - h)
        t = len - h;
    *head = h;
    *tail = t;
}

struct range {
    size_t lo, hi;
};

struct slot {
    struct ovl__op op;
    struct ovl__delta *d;
    uint64_t seq;
    int posted;
    char *buf;
};

struct ovl__delta {
    struct ovl__req *req;
    int is_send;
    char *buf;
    size_t cap;
    int peer;
    uint32_t sid;
    ovl_monitor_t mon;
    struct ovl__watch *w;
    _Atomic size_t dsize, max_piece; /* ovl_delta_size reads them from any thread */
    ovl__spin_t lock; /* not a mutex: a futex word on a guarded page would fail (EFAULT) */
    struct ovl__delta *next, *prev; /* active list */
    int active;

    /* send */
    struct delta_hdr hdr;
    struct ovl__op hdr_op;
    size_t sent_prefix;         /* fault mode, forwarding: [0, sent_prefix) is sent */
    struct range *ready, *sent; /* explicit mode: produced-unsent, sent (sorted, merged) */
    int nready, capready, nsent, capsent;
    int inflight;
    atomic_int ended;
    int last_sent, finished;
    size_t total;
    int err;
    int use_ranges; /* explicit mode (not forwarding): ready/sent range lists */
    double t_begin;
    double t_ovl;     /* sender: ovl's own time while the program produces (pieces, faults) */
    double t_trace;   /* OVL_TRACE / stats: creation time */
    unsigned npieces; /* pieces sent or received */
    struct ovl__delta *fwd_src; /* forwarding: the receive this send follows */
    int forwarding;             /* fwd_src was set at begin (never changes after) */
    unsigned fail_in;           /* ovl__delta_fail_piece: the piece that fails (0: none) */
    int last_left;              /* a piece flagged P_LAST (or the abort marker) went to MPI */
    struct piece_hdr end_h;     /* the abort marker */
    struct ovl__op end_op;

    /* receive */
    int plain; /* ovl_irecv of a delta message */
    struct slot slots[NSLOTS];
    int posted;
    uint64_t seq, last_seq;
    int last_seen, stale;
    int aborted; /* the sender's error, from its abort marker (0: none) */
    size_t total_r, arrived;
    char *landing; /* a plain message received where the monitor lets MPI write */
    char *staging; /* a plain message received into a guarded buffer; a split send's copy */
    size_t staging_len, staging_cap;
    size_t plain_bytes;       /* the plain message's size, from its probe */
    struct piece_hdr whole_h; /* an H_WHOLE message's piece header */
    struct ovl__op plain_op;
    struct ovl__op whole_hop;   /* H_SPLIT: the receive of the piece header */
    int split_left;             /* H_SPLIT: receives not back yet (header, bytes) */
    int body_posted;            /* H_SPLIT: the bytes' receive (plain_op) is pending */
    int body_n;                 /* H_SPLIT: the bytes that came (-1: cancelled) */
    uint32_t sp_pgoff, sp_page; /* H_SPLIT: the sender's delta_hdr.pgoff, page */
    char *edge_buf;             /* H_SPLIT: the piece header and the edge bytes behind it */
    size_t edge_cap;            /* (ovl__stage_get) */
    int edge_n;                 /* H_SPLIT: the edge bytes that came */
    size_t sp_bytes;            /* H_SPLIT: the room where the message's bytes go */
    atomic_int done;
    struct ovl__delta *fwd_dst[NFWD]; /* sends forwarding this receive */
};

/* The transfers in progress (the active list) and the next delta id
 * (delta_wire.c defines it). */
struct ovl__delta_state {
    pthread_mutex_t lock;
    struct ovl__delta *head;
    atomic_uint next_sid;
};
extern struct ovl__delta_state ovl__delta_g;

/* ---- delta_wire.c ---------------------------------------------------------- */

/* Add @d to the active list, take it off (once). */
void ovl__delta_active_add(struct ovl__delta *d);
/* ovl_finalize (the source's close hook): end delta sends the program
 * never ended. */
void ovl__delta_end_all(void);
void ovl__delta_active_remove(struct ovl__delta *d);
/* A new delta state for request @r, which gets it and its hooks. */
struct ovl__delta *ovl__delta_new(struct ovl__req *r, int is_send, void *buf, size_t cap);
int ovl__delta_contiguous(int count, MPI_Datatype dt, size_t *bytes);
/* The checks ovl_delta_send_begin and ovl_delta_recv share, param
 * included; @mon gets the monitor that will work, @asked the one asked for. */
int ovl__delta_check_args(const char *fn, void *buf, int count, MPI_Datatype dt, int peer, int tag,
                          int any_ok, const ovl_param_t *param, ovl_request_t *req, size_t *cap,
                          ovl_monitor_t *asked, ovl_monitor_t *mon);
int ovl__delta_check_stack(const char *fn, ovl_monitor_t mon, const void *buf, size_t len);
/* The pending delta request @h of @kind (OVL__REQ_DSEND, OVL__REQ_DRECV),
 * or OVL_ERR_REQUEST. */
int ovl__delta_lookup(const char *fn, ovl_request_t h, int kind, struct ovl__req **out);

/* ---- delta_send.c ---------------------------------------------------------- */

/* The request hook of a send waited on, tested or freed before its end:
 * ends it. */
void ovl__delta_implied_end(struct ovl__req *r);
/* Forwarding: send on to @f, the k-th send forwarding receive @src
 * (src->fwd_dst[k]), what @src holds now; once @src is done, unlink them
 * and, if the program has ended @f, send its last piece. */
void ovl__delta_forward_one(struct ovl__delta *src, struct ovl__delta *f, int k);

#endif
