/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations shared by the files of libovl. Nothing here is
 * public. The layers, bottom up:
 *   error.c, config.c   -- error table and details; options from cfg/env
 *   request.c           -- the request table: generation-checked handles
 *   progress.c          -- the progress engine: MPI requests in flight,
 *                          their completion handlers, the progress thread
 *   coro.c              -- coroutines that run marshal functions
 *   continue.c          -- continuations on ovl and plain MPI requests
 *   match.c             -- ovl's own matching of comm_msg messages (plain
 *                          and delta) to posted receives, with MPI_Improbe
 *   watch.c, watch_*.c  -- the access monitor: regions whose pages become
 *                          valid over time; backends uffd, mprotect, explicit
 *   model.c             -- the performance model: link calibration, delta size
 *   message.c, stream.c -- front ends: point-to-point and marshal streams
 *   delta.c             -- front end: delta send/receive
 *   init.c              -- ovl_init / ovl_finalize and the global state
 */
#ifndef OVL_INTERNAL_H
#define OVL_INTERNAL_H

#include "ovl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define OVL__UNUSED(x) ((void)(x))

/* ---- error.c ---------------------------------------------------------- */

/* Record @code with a printf-style detail for ovl_error_detail(), print it if
 * verbose, and return @code so callers can `return ovl__error(...)`. */
int ovl__error(int code, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Map an MPI error code to an ovl code, recording MPI's message. */
int ovl__mpi_error(int mpierr, const char *fn, const char *what);
void ovl__info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- config.c --------------------------------------------------------- */

int ovl__config_resolve(const ovl_config_t *user, ovl_config_t *out);

/* ---- thread-local state (error.c) --------------------------------------
 * Marshal functions are coroutines that can migrate between threads, so
 * thread-local state is only reached through this non-inlined accessor: a
 * compiler may not cache its result across a context switch. */
struct ovl__tls {
    int in_callback;        /* depth of continuation callbacks on this thread */
    struct ovl__coro *coro; /* coroutine running on this thread, if any */
    char detail[256];       /* ovl_error_detail() */
};
struct ovl__tls *ovl__tls(void) __attribute__((noinline));

/* ---- request.c -------------------------------------------------------- */

enum ovl__req_kind {
    OVL__REQ_SEND,
    OVL__REQ_RECV,
    OVL__REQ_SSEND,
    OVL__REQ_SRECV,
    OVL__REQ_DSEND,
    OVL__REQ_DRECV,
    OVL__REQ_RMA /* ovl_get_nb: completes when the first strip is in place */
};

struct ovl__op;
typedef void (*ovl__op_done_fn)(struct ovl__op *op, MPI_Status *status);

/* One MPI request the engine drives, with the handler run when it completes
 * (on the thread driving progress, engine lock not held). */
struct ovl__op {
    MPI_Request mreq;
    ovl__op_done_fn done;
    void *ctx;
    int kind; /* OVL__OP_* below: finalize needs to tell sends from receives */
    int peer; /* for receives: the source asked for */
};
/* OVL__OP_FRAG: a receive for a later fragment of a stream that has begun
 * arriving; finalize must let it complete rather than cancel it. */
enum { OVL__OP_SEND, OVL__OP_RECV, OVL__OP_USER, OVL__OP_FRAG };

/* A receive waiting in match.c for a message on comm_msg. `matched` runs
 * once: with the matched message (delta = 1 for a delta header), or with
 * msg == MPI_MESSAGE_NULL and st == NULL when cancelled (finalize). It runs
 * on the driving thread or inside ovl__match_post, no lock held. */
struct ovl__match {
    int source, tag;
    void (*matched)(struct ovl__match *m, MPI_Message msg, MPI_Status *st, int delta);
    struct ovl__match *next;
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
    struct ovl__op op;          /* send/recv */
    struct ovl__stream *stream; /* stream requests */
    /* receives matched by match.c */
    struct ovl__match match;
    void *buf;
    int count;
    MPI_Datatype dt; /* owned copy for derived types (freed at match) */
    int dt_owned;
    struct ovl__delta *delta; /* delta requests, and ovl_irecv of a delta */
};

int ovl__req_table_init(void);
void ovl__req_table_fini(void);
int ovl__req_alloc(int kind, struct ovl__req **out, ovl_request_t *handle);
/* Validate a handle; OVL_ERR_REQUEST for stale/foreign ones. */
int ovl__req_lookup(ovl_request_t h, struct ovl__req **out);
void ovl__req_release(struct ovl__req *r);

/* ---- progress.c -------------------------------------------------------- */

/* Add an MPI request to the engine; wakes the progress thread. */
int ovl__engine_add(struct ovl__op *op);
/* Drive progress once if no other thread is; returns the number of
 * operations completed (0 when another thread was driving). */
int ovl__engine_drive(void);
/* Called by front ends when a request's operation has finished: runs (or
 * queues) the continuation and publishes completion. Driving thread only. */
void ovl__req_complete(struct ovl__req *r);
/* Block until *flag is non-zero, driving progress. */
void ovl__engine_wait_flag(atomic_int *flag);
void ovl__engine_lock(void);
void ovl__engine_unlock(void);
void ovl__engine_wake(void);
/* Queue a continuation whose operation already completed (engine lock held). */
void ovl__engine_defer_callback(struct ovl__req *r);
/* Coroutines ready to resume are queued here (engine lock held). */
void ovl__engine_schedule_coro(struct ovl__coro *c);
int ovl__engine_start(void);
void ovl__engine_stop(void);
/* Number of ops in flight of a kind (-1: all, plus deferred continuations
 * and ready coroutines still waiting for the driver). */
int ovl__engine_count(int kind);
/* MPI_Cancel every receive op still pending (finalize). */
void ovl__engine_cancel_receives(void);

/* Stats and ovl_wait need no change for delta; the engine also calls: */
/* Whether the thread calling is inside ovl__engine_drive (continuations and
 * handlers run there). Async-signal-safe. */
int ovl__engine_driving(void);
int ovl__engine_thread_on(void);

/* ---- match.c ---------------------------------------------------------- */

/* Post a receive: matched at once against messages already probed, else
 * queued. Wakes the engine. */
void ovl__match_post(struct ovl__match *m);
/* Probe comm_msg for messages and hand them to posted receives (driver). */
int ovl__match_poll(void);
int ovl__match_posted(void);
int ovl__match_unexpected_from(int source);
/* Finalize: cancel every posted receive; receive and drop probed messages
 * nobody took. */
void ovl__match_cancel_all(void);
void ovl__match_drop_unexpected(void);
/* The MPI tag of a delta header carrying user tag @t. */
static inline int ovl__delta_tag(int t);
/* Helpers for receives matched by match.c: keep a derived datatype alive. */
int ovl__dt_keep(MPI_Datatype dt, MPI_Datatype *out, int *owned);
void ovl__dt_release(struct ovl__req *r);

/* ---- watch.c: the access monitor ------------------------------------- */

struct ovl__watch;
int ovl__watch_init(void);
void ovl__watch_fini(void);
/* Resolve OVL_MONITOR_AUTO (and check uffd) for this process. */
ovl_monitor_t ovl__watch_resolve(ovl_monitor_t m);
/* Receive region: pages of [base, base+len) not yet arrived are guarded
 * (accesses wait) until installed. */
int ovl__watch_recv_create(ovl_monitor_t m, void *base, size_t len, struct ovl__watch **out);
/* Lazy receive region (HUNT 5.2, mprotect only): interior pages start
 * unguarded; the caller guards single pages with ovl__watch_recv_guard
 * (the page holding byte @off; no-op if valid or an edge page). Only for
 * programs that read in a known order: an unguarded page reads stale. */
int ovl__watch_recv_create_lazy(void *base, size_t len, struct ovl__watch **out);
int ovl__watch_recv_guard(struct ovl__watch *w, size_t off);
/* Bytes [off, off+len) arrived in @src: place them and make every page now
 * complete accessible (driver). */
void ovl__watch_recv_install(struct ovl__watch *w, size_t off, const void *src, size_t len);
/* 1 if every page holding bytes [off, off+len) is valid. */
int ovl__watch_recv_ready(struct ovl__watch *w, size_t off, size_t len);
/* Bytes from the start that are valid (whole installed pages). */
size_t ovl__watch_recv_prefix(struct ovl__watch *w);
/* The message is over: every page becomes accessible and the region is
 * unregistered (ovl__watch_destroy frees it). */
void ovl__watch_recv_finish(struct ovl__watch *w);
/* Free a finished region (once no fault handler can be looking at it). */
void ovl__watch_destroy(struct ovl__watch *w);
/* Send region: the program writes [base, base+len) in order. When it first
 * writes a page past the current delta, @produced(ctx, upto) is called (in
 * the faulting thread) with the bytes before that page, and returns the
 * delta size in bytes to use from there. */
typedef size_t (*ovl__watch_produced_fn)(void *ctx, size_t upto);
int ovl__watch_send_create(ovl_monitor_t m, void *base, size_t len, size_t delta,
                           ovl__watch_produced_fn fn, void *ctx, struct ovl__watch **out);
/* First offset written after it was sent, or (size_t)-1. */
size_t ovl__watch_send_stale(struct ovl__watch *w);
/* Everything was sent: write-protect the whole buffer (later writes are
 * reported stale). */
void ovl__watch_send_seal(struct ovl__watch *w);
void ovl__watch_send_finish(struct ovl__watch *w);
size_t ovl__watch_page(void);
/* One-shot probe of fault cost in microseconds for the model. */
double ovl__watch_fault_cost_us(ovl_monitor_t m);

/* Hold region (one-sided put source): interior pages are write-protected;
 * a write waits until ovl__watch_hold_release covers its page. Edge pages
 * are never protected (the caller copies their bytes). */
enum { OVL__WATCH_HOLD = 2 }; /* struct ovl__watch::is_send of a hold region */
int ovl__watch_hold_create(ovl_monitor_t m, const void *base, size_t len, struct ovl__watch **out);
/* Bytes [off, off+len) have left: their whole interior pages become writable. */
void ovl__watch_hold_release(struct ovl__watch *w, size_t off, size_t len);
/* Release everything and unregister (ovl__watch_destroy frees it). */
void ovl__watch_hold_finish(struct ovl__watch *w);

/* ---- model.c ---------------------------------------------------------- */

struct ovl__model {
    double lat_us;   /* one-way small-message time */
    double bw_Bpus;  /* bytes per microsecond */
    double fault_us; /* cost of one access fault */
    size_t eager;    /* eager/rendezvous switch of the MPI library */
    int calibrated;
};
extern struct ovl__model ovl__m;
/* Collective (inside ovl_init): measure latency and bandwidth. */
int ovl__model_calibrate(void);
/* Delta size for a message of @bytes produced at @rate bytes/us (0 =
 * unknown), fault-triggered or annotated. */
size_t ovl__model_delta_size(size_t bytes, double rate, int faults);
/* Largest delta piece (receivers size their buffers with it). */
size_t ovl__model_max_delta(void);

/* One-sided transfers (rma.c): strip sizes for a transfer of @bytes from
 * @peer (HUNT 5.1); fills sizes[0..n) (n <= max) and returns n, 1 = no split. */
size_t ovl__model_strips(size_t bytes, int peer, size_t *sizes, size_t max);
/* Smallest transfer the model splits (for ovl-bench and OVL_STATS). */
size_t ovl__model_split_threshold(void);

/* ---- delta.c ---------------------------------------------------------- */

struct ovl__delta;
/* A receive posted by ovl_irecv / ovl_delta_recv matched a delta header. */
void ovl__delta_matched_header(struct ovl__req *r, MPI_Message msg, MPI_Status *st);
/* ovl_finalize: end delta sends the program never ended. */
void ovl__delta_end_all(void);
int ovl__delta_active(int sends_only);
/* ovl_wait / ovl_test / ovl_request_free on a delta send not yet ended. */
void ovl__delta_implied_end(struct ovl__req *r);
/* Request released: free what is left of its delta state. */
void ovl__delta_free(struct ovl__delta *d);

/* ---- segment.c, rma.c: one-sided get/put ------------------------------- */

struct ovl__seg {
    MPI_Win win;
    char *base;
    size_t bytes;   /* this rank's size */
    size_t *sizes;  /* every rank's size (checked before each transfer) */
    size_t lock_at; /* offset of the hidden lock word (ovl_lock) */
    uint32_t slot, gen;
    int live;
};
/* A valid segment for a handle, or an error recorded for @fn. */
int ovl__seg_lookup(const char *fn, ovl_segment_t h, struct ovl__seg **out);
/* Retire every outstanding transfer on @s (NULL: all) to @rank (-1: all):
 * gets installed, puts left and flushed. Blocking. */
int ovl__rma_retire(struct ovl__seg *s, int rank);
/* Transfers outstanding on @s (NULL: any). */
int ovl__rma_outstanding(struct ovl__seg *s);
/* Progress hook (driver): keeps passive-target RMA moving while segments exist. */
int ovl__rma_poll(void);
int ovl__rma_wants_progress(void);
/* ovl_finalize: free leftover segments, print OVL_STATS. */
void ovl__rma_finalize(void);
void ovl__rma_stats(ovl_stats_t *s);
void ovl__segment_free_all(void);
int ovl__seg_flush_all(void);

/* ---- coro.c ----------------------------------------------------------- */

typedef void (*ovl__coro_fn)(void *arg);
struct ovl__coro;
int ovl__coro_create(size_t stack_size, ovl__coro_fn fn, void *arg, struct ovl__coro **out);
/* Run @c until it yields or returns. Returns 1 if it has finished. */
int ovl__coro_resume(struct ovl__coro *c);
/* From inside a coroutine: go back to whoever resumed it. */
void ovl__coro_yield(void);
void ovl__coro_destroy(struct ovl__coro *c);
/* Scheduling state of a coroutine, kept by stream.c and progress.c under the
 * engine lock: RUNNING (some thread is in it), WAITING (parked until a
 * completion makes it ready), READY (queued for the driver), DONE. */
enum { OVL__CO_RUNNING, OVL__CO_WAITING, OVL__CO_READY, OVL__CO_DONE };
int *ovl__coro_state(struct ovl__coro *c);
void *ovl__coro_owner(struct ovl__coro *c);
void ovl__coro_set_owner(struct ovl__coro *c, void *owner);
struct ovl__coro **ovl__coro_next(struct ovl__coro *c);

/* ---- stream.c --------------------------------------------------------- */

/* Resume a stream's coroutine and handle what follows (driver only). */
void ovl__stream_run(struct ovl__coro *c);
int ovl__stream_active(void);
/* Send streams not yet complete (finalize's first step waits for these). */
int ovl__stream_active_sends(void);
/* Per-peer message counts for finalize's drain. */

/* ---- init.c: global state ---------------------------------------------- */

struct ovl__global {
    atomic_int initialized;
    MPI_Comm comm_msg;    /* ovl_isend / ovl_irecv */
    MPI_Comm comm_stream; /* first fragment of a stream, user tag */
    MPI_Comm comm_frag;   /* later fragments, tag = stream id */
    MPI_Comm comm_delta;  /* delta pieces, tag = delta id */
    int mpi_tag_ub;       /* MPI's; ovl's tag_ub is half of it */
    int rank, size;
    int tag_ub;
    int thread_level;
    ovl_config_t cfg;
    /* finalize's drain: messages sent to / received from each peer */
    atomic_ullong *sent_to;
    atomic_ullong *recvd_from;
    /* statistics */
    atomic_ullong st_polls, st_wakeups, st_completions, st_callbacks, st_frag_sent, st_frag_recv,
        st_switches, st_faults, st_fault_waits, st_deltas_sent, st_deltas_recv;
};
extern struct ovl__global ovl__g;

/* Common argument checks; return 0 or an ovl error (recorded). */
int ovl__check_init(const char *fn);
int ovl__check_peer(const char *fn, int rank, int any_ok);
int ovl__check_tag(const char *fn, int tag, int any_ok);
int ovl__check_not_in_callback(const char *fn);

static inline int ovl__delta_tag(int t)
{
    return t + ovl__g.tag_ub + 1;
}

#endif /* OVL_INTERNAL_H */
