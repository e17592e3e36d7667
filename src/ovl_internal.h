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
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdbool.h>

#define OVL__UNUSED(x) ((void)(x))

/* ---- error.c ---------------------------------------------------------- */

/* Record @code with a printf-style detail for ovl_error_detail(), print it if
 * verbose, and return @code so callers can `return ovl__error(...)`. @fn is
 * the public call that returns the error (also through a request's status);
 * under OVL_ERRORS=fatal this prints the error and aborts the job instead. */
int ovl__error(int code, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* ovl__error for a failure ovl handles itself, which no call returns (a
 * message dropped, a trace file not written): never aborts. An @fn that
 * names a part of ovl, not a call ("ovl progress"), makes ovl__error such a
 * report too. */
int ovl__report(int code, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Map an MPI error code to an ovl code, recording MPI's message. */
int ovl__mpi_error(int mpierr, const char *fn, const char *what);
/* @fn returns @code, which no ovl__error recorded (an operation's status: a
 * marshal function's own code, a stream its sender aborted): under
 * OVL_ERRORS=fatal, abort as ovl__error does. Returns @code. */
int ovl__error_returned(int code, const char *fn);
/* OVL_ERRORS: ovl_init sets the mode it resolved; before, the variable's. */
void ovl__errors_set(ovl_errors_t mode);
int ovl__errors_fatal(void);
void ovl__info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- param.c: optional parameters (ovl_param_t) ----------------------- */

/* OVL_SUCCESS when @p (NULL allowed) sets no field_mask bit outside
 * @takes (OVL_PARAM_FIELD_* bits), else OVL_ERR_ARG for @fn naming the
 * bit. */
int ovl__param_check(const char *fn, const ovl_param_t *p, uint64_t takes);

/* ---- config.c --------------------------------------------------------- */

/* @serve_auto (may be NULL): set to 1 if OVL_SERVE_US was left
 * automatic (0), which segment.c's probe then decides. */
int ovl__config_resolve(const ovl_config_t *user, ovl_config_t *out, int *serve_auto);

/* ---- thread-local state (error.c) --------------------------------------
 * Marshal functions are coroutines that can migrate between threads, so
 * thread-local state is only reached through this non-inlined accessor: a
 * compiler may not cache its result across a context switch. */
struct ovl__tls {
    int in_callback;        /* depth of continuation callbacks on this thread */
    struct ovl__coro *coro; /* coroutine running on this thread, if any */
    int reports_only;       /* depth of code whose errors ovl handles itself: ovl__error
                               is ovl__report there (segments ovl_finalize frees) */
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
/* delta.c: MPI_Imrecv of a matched message of @n bytes, any size (over
 * 2 GiB as one element of an @n-byte type). */
int ovl__imrecv_bytes(void *buf, size_t n, MPI_Message *msg, MPI_Request *rq);

/* ---- progress.c -------------------------------------------------------- */

/* How an op is posted to the engine (ovl__engine_post). All zero: an op
 * that may complete at any moment, the thread woken unless it polls within
 * its budget anyway. */
enum {
    OVL__WAKE_RULE = 0, /* by the rule (ovl__engine_post) */
    /* nobody waits for it soon (a delta message's header: its wait drives
     * it): an idle thread is woken gently, a sleeping one left asleep */
    OVL__WAKE_GENTLE,
    /* a receive handed to MPI before its message (match.c pre-posting):
     * the thread is woken but lets one budget pass before it polls, unless
     * work is posted meanwhile; polling at once, MPI could answer the
     * peer's rendezvous request before this rank's own send, posted right
     * after the receive in an exchange, has gone out, and the peer's data
     * would then queue behind this rank's */
    OVL__WAKE_GRACE,
};
struct ovl__post {
    /* the transfer's bytes (op->kind SEND, RECV or FRAG, posted when its
     * data starts to move): the model predicts when it completes */
    size_t bytes;
    /* while it returns non-zero (engine lock held), nothing but the op's
     * own consumer waits for it, and that consumer drives progress itself
     * when it needs the data: the patient pace */
    int (*patient)(const struct ovl__op *op);
    /* a send that nothing else in flight will poll for: if it goes by
     * rendezvous (bytes at or above the protocol switch) the thread keeps
     * the usual pace for two polls (the peer's request to send, then its
     * answer to ours) before it sleeps towards the predicted completion */
    int handshake;
    /* a stream fragment between two checkpoints: follows its stream's
     * next checkpoint (OVL__PACE_FOLLOWS) */
    int follows;
    /* > 0: a stream checkpoint; once overdue, the thread may poll this
     * much later (its window's room) */
    double slack_us;
    int wake; /* OVL__WAKE_* */
};
/* Add @op (its MPI request started) to the engine as @how (NULL: all
 * zero) says. OVL_ERR_NOMEM when the tables cannot grow. */
int ovl__engine_post(struct ovl__op *op, const struct ovl__post *how);
/* The progress engine: the ops in flight, the drive lock, deferred
 * continuations, ready coroutines, the progress sources and the progress
 * thread (progress.c). Engine 0 is the process's, started by ovl_init; the
 * ovl__engine_* entry points act on it. */
struct ovl__engine;
struct ovl__engine *ovl__engine0(void);
/* Drive progress once if no other thread is; returns the number of
 * operations completed, or -1 when another thread was driving. */
int ovl__engine_drive(void);
/* Hold the drive lock: no thread of this process drives (calls MPI through
 * ovl) until ovl__engine_release. */
void ovl__engine_hold(void);
void ovl__engine_release(void);
/* Called by front ends when a request's operation has finished: runs (or
 * queues) the continuation and publishes completion. Driving thread only. */
void ovl__req_complete(struct ovl__req *r);
/* Drive progress on the calling thread until done(arg) is true. The one
 * spin loop of the library: while any thread is in it, the progress thread
 * stands down (no timed wake-ups) and the last thread out wakes it. Not for
 * a thread that is driving (a continuation): it would wait for itself. */
void ovl__engine_spin(int (*done)(const void *), const void *arg);
/* ovl__engine_spin until the MPI request completes (a collective that a
 * peer reaches only once this rank's progress served it); MPI's code. */
int ovl__engine_spin_mpi(MPI_Request *req);
/* ovl__engine_spin until *flag is non-zero, counted as wait time in the
 * statistics and the trace. */
void ovl__engine_wait_flag(atomic_int *flag);
/* OVL_PROGRESS_PRIORITY: a progress thread under SCHED_FIFO returns to
 * normal scheduling (no-op on any other thread). Async-signal-safe. */
void ovl__rt_leave(void);
/* The pause in a spin on a lock or flag another thread will release:
 * ovl__rt_leave, then sched_yield (which lets no normal thread run while
 * the caller is SCHED_FIFO). */
void ovl__relax(void);
void ovl__engine_lock(void);
void ovl__engine_unlock(void);
void ovl__engine_wake(void);
/* Ops in flight now need the usual poll pace (they were patient): wake the
 * progress thread if it is in a longer sleep. */
void ovl__engine_hurry(void);
/* Patient work was posted: wake the progress thread only if it waits for
 * work, so that it starts its slow polls. */
void ovl__engine_start_polls(void);
/* The same with the engine lock held. */
void ovl__engine_wake_locked(void);
/* ovl_continue registered a continuation on @r (engine lock held): while
 * @r's operation is not complete, the progress thread polls at most every
 * OVL_LATENESS_US; wakes the thread. */
void ovl__engine_continuation_locked(struct ovl__req *r);
/* How many continuations wait for their operation (tests). */
int ovl__engine_continuations(void);
/* Queue a continuation whose operation already completed (engine lock held). */
void ovl__engine_defer_callback(struct ovl__req *r);
/* Coroutines ready to resume are queued here (engine lock held). */
void ovl__engine_schedule_coro(struct ovl__coro *c);
/* A progress source: work a front end has besides its ops in flight,
 * which the engine runs on every pass and weighs when it decides how long
 * the progress thread may sleep (as a UCX worker's progress callbacks).
 * init.c registers each before ovl__engine_start; every hook but @poll may
 * be NULL. */
struct ovl__source {
    const char *name;
    int (*poll)(void);    /* each pass, before the ops are tested: the completions it made */
    int (*posted)(void);  /* receives posted that a message may match at any moment */
    int (*urgent)(void);  /* of those, the ones that need the usual pace */
    int (*serving)(void); /* MPI needs polls here for other ranks' transfers */
};
/* ---- sched.c: the progress thread's sleep, a pure function ----------- */

/* How an op in flight sets the thread's pace (its lateness budget; the
 * table is at the top of sched.c). */
enum {
    OVL__PACE_SOON,       /* may complete at any moment, or when predicted */
    OVL__PACE_PATIENT,    /* the program drives it when it needs it */
    OVL__PACE_STRIP,      /* a get/put strip */
    OVL__PACE_CHECKPOINT, /* a stream checkpoint: due_us is its deadline */
    OVL__PACE_FOLLOWS     /* a stream fragment paced by its checkpoint */
};
/* One op in flight as the rule sees it. */
struct ovl__sched_op {
    int pace;        /* OVL__PACE_* */
    double due_us;   /* predicted completion (0: at any moment) */
    double slack_us; /* a checkpoint's budget: its window's room for a late poll */
};
/* The engine's state: counts, and the ops in flight. */
struct ovl__sched_in {
    int conts;                       /* continuations waiting for their operation */
    int deferred;                    /* continuations queued for the driver */
    int ready;                       /* coroutines ready to run */
    int posted, urgent, serving;     /* the progress sources (struct ovl__source) */
    int n;                           /* ops in flight */
    const struct ovl__sched_op *ops; /* n of them */
};
/* The two knobs the rule reads (OVL_LATENESS_US, OVL_SERVE_US). */
struct ovl__sched_cfg {
    unsigned lateness_us, serve_us;
};
/* How long the progress thread may sleep at @now (ovl__now_us clock);
 * *@predicted: the time comes from a predicted completion (taken at once,
 * not ramped up to). */
unsigned ovl__sched_cap(const struct ovl__sched_in *in, const struct ovl__sched_cfg *c, double now,
                        int *predicted);
/* The rule's fixed budgets: the usual pace, and the longest sleep. */
unsigned ovl__sched_poll_us(void);
unsigned ovl__sched_longest_us(void);

/* OVL_ERR_NOMEM past OVL__MAX_SOURCES. */
#define OVL__MAX_SOURCES 8
int ovl__engine_add_source(const struct ovl__source *src);
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

int ovl__match_init(int size);
void ovl__match_fini(void);
/* Post a receive: matched at once against messages already probed, else
 * pre-posted to MPI (m->prepost, when safe), else queued. Wakes the engine. */
void ovl__match_post(struct ovl__match *m);
/* The MPI receive of a pre-posted receive completed (driver). Returns 1
 * when match.c took the receive back (it was cancelled to let a delta
 * header through: it will be matched again); else the caller completes it
 * (@cancelled: by finalize). */
int ovl__match_prepost_done(struct ovl__match *m, int cancelled);
/* The header of a plain message sent as header + body (message.c, to a
 * peer that has been sent delta messages): 32 bytes, so a probe tells it
 * from a 24-byte delta header by its size. The body follows on comm_delta
 * with tag sid. */
struct ovl__plain_hdr {
    uint32_t magic, sid;
    uint64_t bytes;
    uint64_t reserved[2];
};
#define OVL__PLAIN_MAGIC 0x6f766c50u /* "ovlP" */
/* Probe comm_msg for messages and hand them to posted receives (driver). */
int ovl__match_poll(void);
int ovl__match_posted(void);
/* Posted receives that are not patient (struct ovl__match). */
int ovl__match_urgent(void);
/* Matching as a progress source (poll, posted, urgent), registered by init.c. */
extern const struct ovl__source ovl__match_source;
/* @m (posted, or matched already) is no longer patient. */
void ovl__match_hurry(struct ovl__match *m);
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
/* 1 if [buf, buf+len) overlaps the calling thread's stack, which fault
 * monitors cannot guard (the signal frame and the handler need it). */
int ovl__watch_on_my_stack(const void *buf, size_t len);
/* Resolve OVL_MONITOR_AUTO (and check uffd) for this process. */
ovl_monitor_t ovl__watch_resolve(ovl_monitor_t m);
int ovl__watch_degraded(const char *fn, ovl_monitor_t asked, ovl_monitor_t got);
/* Receive region: pages of [base, base+len) not yet arrived are guarded
 * (accesses wait) until installed. */
int ovl__watch_recv_create(const char *fn, ovl_monitor_t m, void *base, size_t len,
                           struct ovl__watch **out);
/* Lazy receive region (HUNT 5.2, mprotect only): interior pages start
 * unguarded; the caller guards single pages with ovl__watch_recv_guard
 * (the page holding byte @off; no-op if valid or an edge page). Only for
 * programs that read in a known order: an unguarded page reads stale. */
int ovl__watch_recv_create_lazy(const char *fn, void *base, size_t len, struct ovl__watch **out);
int ovl__watch_recv_guard(struct ovl__watch *w, size_t off);
/* Bytes [off, off+len) arrived in @src: place them and make every page now
 * complete accessible (driver). */
void ovl__watch_recv_install(struct ovl__watch *w, size_t off, const void *src, size_t len);
/* 1 if every page holding bytes [off, off+len) is valid. */
int ovl__watch_recv_ready(struct ovl__watch *w, size_t off, size_t len);
/* Where the bytes for base+off may be written directly (by MPI) before
 * they are installed: landing + off; ovl__watch_recv_install(w, off,
 * landing + off, len) then copies nothing it need not. NULL when the
 * backend has no such place (mprotect): install from a buffer of your own.
 * Valid from create to finish. */
char *ovl__watch_recv_landing(struct ovl__watch *w);
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
/* Memory for ovl's own buffers that MPI may fill or read (piece slots,
 * staging): whole pages of their own, so that no page is shared with a
 * user buffer whose edge is guarded -- the kernel (CMA, /proc/self/mem)
 * cannot pass a guarded page, only this process's threads can. Zeroed.
 * Mapped with mmap, never malloc'd: glibc raises its mmap threshold when a
 * large block of its own is freed, which would move the program's large
 * blocks into the heap: any internal buffer that can reach 128 KiB comes
 * from here. Free with ovl__page_free (NULL is ignored), never free(). */
void *ovl__page_alloc(size_t bytes);
/* realloc for ovl__page_alloc memory: NULL @p allocates; on failure NULL,
 * @p untouched. For tables that grow with the work in flight. */
void *ovl__page_realloc(void *p, size_t bytes);
void ovl__page_free(void *p);
/* Unmap the blocks ovl__page_free keeps for reuse (ovl_finalize). */
void ovl__page_trim(void);
/* Staging buffers (stage.c): whole pages, cached for the next transfer.
 * get: at least @bytes, *cap receives the size to give back; NULL: no
 * memory. put: back to the cache (or freed); NULL is ignored. */
char *ovl__stage_get(size_t bytes, size_t *cap);
void ovl__stage_put(char *p, size_t cap);
/* Free the cached ones (ovl_finalize). */
void ovl__stage_drop_all(void);
/* Is no region registered (nothing pending under a fault monitor)? One
 * atomic load. */
int ovl__watch_idle(void);
/* Does [p, +len) touch a page guarded as another pending receive's edge?
 * MPI, and the kernel on its behalf, cannot read or write such a page. */
int ovl__watch_edge_touch(const void *p, size_t len);
/* memcpy from program memory that may share a guarded edge page, without
 * faulting (through /proc/self/mem when it does). */
void ovl__watch_read(void *dst, const void *src, size_t len);
/* memcpy into program memory that may share a guarded edge page. */
void ovl__watch_write(void *dst, const void *src, size_t len);
/* Does a registered region (pending delta, get or put) touch [p, p+len)?
 * With @missing: does a pending receive (delta receive or get) still wait
 * for a byte of it? MPI must not be given such memory: its reads through
 * the kernel or another process would not wait. */
int ovl__watch_pending(const void *p, size_t len, int missing);
/* delta.c: is [buf, buf+len) a pending delta receive's buffer (from its
 * start), which a delta send can forward as it arrives? */
int ovl__delta_arriving(const void *buf, size_t len);
/* ovl_alloc (alloc.c): where [base, base+len) of a block is mapped a second
 * time, for ovl's writes, or NULL (not ovl_alloc memory). */
char *ovl__alloc_alias(const void *base, size_t len);

/* A lock for ovl objects that live in the heap, which may share a page with
 * a guarded buffer edge: a mutex's futex system call cannot reach such a
 * page (EFAULT, glibc aborts), a spin on an atomic can (a fault handled as
 * a neighbour access). Held briefly: a few instructions, or one protection
 * change (watch.c). */
typedef struct {
    atomic_flag f;
} ovl__spin_t;
static inline void ovl__spin_lock(ovl__spin_t *s)
{
    while (atomic_flag_test_and_set_explicit(&s->f, memory_order_acquire))
        ovl__relax();
}
static inline void ovl__spin_unlock(ovl__spin_t *s)
{
    atomic_flag_clear_explicit(&s->f, memory_order_release);
}
/* Measured cost of one access fault served by @m's mechanism, in
 * microseconds (mprotect: SIGSEGV + mprotect; uffd: SIGBUS +
 * UFFDIO_ZEROPAGE). Best of a few; <= 0 when @m is unavailable here. */
double ovl__watch_fault_cost_us(ovl_monitor_t m);
/* Measured cost of guarding @npages populated pages with @m's mechanism
 * (mprotect PROT_NONE, or UFFDIO_WRITEPROTECT), in microseconds; < 0 when
 * unavailable. Best of @reps. */
double ovl__watch_protect_cost_us(ovl_monitor_t m, size_t npages, int reps);

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

/* Where the figures in force came from (OVL_STATS prints it). */
enum { OVL__MODEL_DEFAULTS, OVL__MODEL_INIT, OVL__MODEL_PERFDB };

struct ovl__model {
    double lat_us;        /* one-way small-message time (L) */
    double bw_Bpus;       /* bytes per microsecond (1/G) */
    double fault_us;      /* cost of one access fault (I) of the monitor in use */
    size_t eager;         /* eager/rendezvous switch of the MPI library */
    size_t piece_switch;  /* smallest message size whose one-way time jumps
                          * (a protocol change below the eager limit, such as
                          * UCX's TCP copy-to-zero-copy switch); 0 = none seen */
    double oneway_us[16]; /* one-way time of the sizes of ovl__model_switch_sizes
                           * (measured at init; 0 = not measured) */
    size_t burst_B;       /* bytes of a message the link passes in one burst before
                           * its long-run rate applies (a shaper's token bucket, a
                           * switch buffer): the one-way time of 128 KiB less what
                           * the long-run rate explains; 0 = none */
    double poll_sleep_us; /* one poll-interval sleep of the progress thread, as
                           * it really lasts (0: no progress thread) */
    int calibrated;
    /* LogGP and HUNT 5.1 terms; the defaults are conservative guesses,
     * replaced by the performance database (perfdb.c) or the quick estimate
     * at ovl_init. */
    double o_us;                             /* per-message CPU overhead o = o_s + o_r */
    double gap_us;                           /* g: minimum interval between two messages */
    double rtt_us;                           /* round trip of a small message */
    double fault_mprotect_us, fault_uffd_us; /* I per backend (<= 0: unknown) */
    double prot_base_us;                     /* M(N) = prot_base_us + N * prot_page_us (mprotect) */
    double prot_page_us;
    double uffd_wp_base_us; /* the same for userfaultfd write-protect */
    double uffd_wp_page_us;
    double compute_us_per_B; /* C(n) >= n * this: memory-to-cache rate */
    double rma_lat_us;       /* MPI_Rget of a small block, round trip */
    double rma_bw_Bpus;      /* MPI_Rget bandwidth */
    int source;              /* OVL__MODEL_* */
    int db_link;             /* a perfdb's `link`: 0 not given, 1 intra-node, 2 inter-node */
    double init_us;          /* time ovl_init spent measuring */
    char source_detail[320]; /* perfdb path, or why it was not used */
};
extern struct ovl__model ovl__m;
/* Collective (inside ovl_init): load the performance database, or measure
 * a quick estimate of latency, bandwidth, fault and copy cost. */
int ovl__model_calibrate(void);
/* The eager limit as model.c detects it without measuring (OVL_EAGER_LIMIT,
 * MPI_T, UCX_RNDV_THRESH, 64 KiB). */
size_t ovl__model_detect_eager(void);
/* Protocol switch below the eager limit (model.c): the sizes to measure
 * (page multiples up to min(eager, @limit)), and the first size after a
 * jump in the one-way times @t of sizes @sz (0 = no jump). */
size_t ovl__model_switch_sizes(size_t *sz, int max, size_t limit);
size_t ovl__model_find_switch(const size_t *sz, const double *t, int n, double lat);
/* The smallest message the MPI library sends by rendezvous, as far as the
 * model knows: the protocol switch measured below the eager limit, else
 * the eager limit. */
size_t ovl__model_rendezvous_bytes(void);
/* M(N): predicted cost of protecting @npages pages with @mon's mechanism. */
double ovl__model_protect_us(ovl_monitor_t mon, size_t npages);

/* The performance database (perfdb.c; format in docs/PERFDB.md). */
/* Default path: $XDG_CACHE_HOME/ovl/perfdb, else $HOME/.cache/ovl/perfdb.
 * Returns @buf, or NULL if neither variable is set. */
char *ovl__perfdb_default_path(char *buf, size_t len);
/* Read @path into @m (only the fields it holds). Returns 0, -1 if the file
 * does not exist, -2 if it is unusable (corrupt, truncated, another MPI);
 * @why says which and why. Never crashes on any input. */
int ovl__perfdb_load(const char *path, struct ovl__model *m, char *why, size_t why_len);
/* The MPI library's version string as the perfdb header stores it: first
 * line of MPI_Get_library_version, trimmed. */
void ovl__perfdb_mpi_id(char *buf, size_t len);

/* Whether and how to split a transfer into strips (HUNT 5.1, 5.3). */
enum ovl__split_reason {
    OVL__SPLIT_YES,         /* split: both HUNT 5.1 inequalities hold */
    OVL__SPLIT_SMALL,       /* too small: first strip cannot pay its setup */
    OVL__SPLIT_NO_OVERLAP,  /* second strip would not be covered */
    OVL__SPLIT_NO_GAIN,     /* inequalities hold but the predicted time is not lower */
    OVL__SPLIT_LOCAL,       /* peer is this rank, or on its node (OVL_RMA_LOCAL=direct) */
    OVL__SPLIT_TRAIN,       /* front end: others outstanding, piggybacked (5.3) */
    OVL__SPLIT_NONBLOCKING, /* front end: explicit non-blocking call (5.3) */
    OVL__SPLIT_HINT,        /* front end: a user hint decided */
    OVL__SPLIT_NREASONS
};
/* Short name of a reason, for OVL_STATS. */
const char *ovl__split_reason_name(int reason);
struct ovl__split {
    int should_split;
    int reason;        /* enum ovl__split_reason */
    int nstrips;       /* 1 when not split */
    size_t first;      /* first strip in bytes (page multiple unless the whole transfer) */
    double growth;     /* strip k+1 = growth * strip k (1.0: equal strips) */
    double t_plain_us; /* predicted time: one guarded transfer, unsplit */
    double t_split_us; /* predicted time with the chosen strips */
    const char *why;   /* one line, static storage */
};
/* Decide how to move @bytes to/from @peer, assuming the data is then read
 * in order at the memory-to-cache rate (the worst case HUNT 5.1 uses).
 * Returns 0; *out always filled. */
int ovl__model_split(size_t bytes, int peer, struct ovl__split *out);
/* Smallest transfer that the model splits (HUNT 5.1's lower bound);
 * SIZE_MAX if none up to 1 GiB. */
size_t ovl__model_split_threshold(int peer);
/* The peer whose link the model's figures describe: the first rank on
 * another node, else a neighbour on this one (rank ^ 1), else this rank. */
int ovl__model_link_peer(void);
/* A get/put with @peer completes inside the call, unsplit and unguarded:
 * @peer is on this rank's node and OVL_RMA_LOCAL=direct (rma.c). */
int ovl__model_direct(int peer);
/* Size of strip @k (0-based) of a split @bytes transfer. */
size_t ovl__model_strip_size(const struct ovl__split *s, size_t bytes, int k);
/* Transfers smaller than this, posted while others are outstanding, are
 * not guarded: their synchronisation piggybacks on the last guarded one
 * (HUNT 5.3's "train"). */
size_t ovl__model_piggyback_threshold(void);
/* Delta size for a message of @bytes produced at @rate bytes/us (0 =
 * unknown), fault-triggered or annotated. */
size_t ovl__model_delta_size(size_t bytes, double rate, int faults);
/* The production rate (bytes/us) a delta send of @cap bytes to @peer is
 * sized with: the median of the last five sends of the same size, peer and
 * triggering (@faults: a fault monitor, not explicit), else the last send
 * of any kind; 0 if none. */
double ovl__delta_rate_for(size_t cap, int peer, int faults);
/* Largest delta piece (receivers size their buffers with it). */
size_t ovl__model_max_delta(void);
/* Default stream fragment size (OVL_FRAGMENT_SIZE=0): the smallest power of
 * two from 4 KiB to 64 KiB, and within the eager switch, whose per-message
 * overhead o is at most 5 % of its wire time (F >= 20 o B). */
size_t ovl__model_fragment_size(void);
/* A delta piece whose message (header and bytes) is @len bytes is copied
 * and sent contiguous (under the protocol switch), not as a struct. */
int ovl__model_copy_piece(size_t len);

/* One-sided transfers (rma.c): strip sizes for a transfer of @bytes from
 * @peer (HUNT 5.1); fills sizes[0..n) (n <= max) and returns n, 1 = no split;
 * *reason: the decision's enum ovl__split_reason (not counted). */
size_t ovl__model_strips(size_t bytes, int peer, size_t *sizes, size_t max, int *reason);

/* ---- delta.c ---------------------------------------------------------- */

struct ovl__delta;
/* A fresh delta id: the tag of a message's pieces (or body) on comm_delta. */
unsigned ovl__delta_new_sid(void);
/* Give back @sid, taken by a call that then failed before using it, if no
 * id was taken since (a gap otherwise: ids need only be distinct). */
void ovl__delta_return_sid(unsigned sid);
/* A receive posted by ovl_irecv / ovl_delta_recv matched a delta header. */
void ovl__delta_matched_header(struct ovl__req *r, MPI_Message msg, MPI_Status *st);
/* ovl_finalize: end delta sends the program never ended. */
void ovl__delta_end_all(void);
int ovl__delta_active(int sends_only);
/* Free a delta state (its request's release hook, and failed posts). */
void ovl__delta_free(struct ovl__delta *d);
/* Fault injection, for tests only (no public call or variable reaches
 * it): the @n-th piece delta send @req sends from now on (1: the next)
 * finds no memory, as if malloc or ovl__page_alloc had returned NULL; 0
 * disarms. The pieces before it leave as usual. Costs the normal path one
 * test of a field per piece. OVL_ERR_REQUEST: not a delta send. */
int ovl__delta_fail_piece(ovl_request_t req, unsigned n);

/* ---- segment.c, rma.c: one-sided get/put ------------------------------- */

struct ovl__seg {
    MPI_Win win;
    char *base;
    size_t bytes;   /* this rank's size */
    size_t *sizes;  /* every rank's size (checked before each transfer) */
    size_t lock_at; /* offset of the hidden lock word (ovl_lock) */
    uint32_t slot, gen;
    int live;
    /* ovl_segment_hint (rma.c, under its lock); segment.c sets the defaults */
    unsigned decomp, piggyback;
    int piggy_hint; /* piggyback was set: its count decides trains */
    ovl_order_t order;
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
/* Serving others' RMA as a progress source (poll, serving), registered by init.c. */
extern const struct ovl__source ovl__rma_source;
int ovl__rma_wants_progress(void);
/* Whether this rank serves others' one-sided operations while a segment
 * lives (segment.c's probe, or OVL_SERVE_US set); 0 before the first
 * segment. */
int ovl__rma_serving(void);
/* That decision in words for OVL_STATS; forget clears it, and the
 * decision itself, at the end of ovl_finalize. */
const char *ovl__rma_serving_said(void);
void ovl__rma_serving_forget(void);
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
/* @owner and its step that resumes @c and handles what follows, which the
 * engine's driver runs for a ready coroutine (ovl__coro_run). */
void ovl__coro_set_owner(struct ovl__coro *c, void *owner, void (*run)(struct ovl__coro *));
void ovl__coro_run(struct ovl__coro *c);
struct ovl__coro **ovl__coro_next(struct ovl__coro *c);

/* ---- stream.c --------------------------------------------------------- */

int ovl__stream_active(void);
/* Send streams not yet complete (finalize's first step waits for these). */
int ovl__stream_active_sends(void);
/* Every how many fragments a stream asks for a poll (its
 * checkpoints; the fragments between them are quiet), with @window
 * fragments in flight of @frag_bytes at @bw_Bpus: half the window for a
 * send; for a receive, which cannot know which fragment is the last one,
 * 1 + @age_us (how long it has been arriving) / 20 fragment times, at most
 * half the window, so its end is seen at most 5 % of its age late. 1
 * (every fragment) without a model or with a window below 4. */
unsigned ovl__stream_stride(unsigned window, size_t frag_bytes, double bw_Bpus, int is_send,
                            double age_us);
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
    int serve_auto; /* OVL_SERVE_US left 0: serve only where the probe says so */
    /* finalize's drain: messages sent to / received from each peer */
    atomic_ullong *sent_to;
    atomic_ullong *recvd_from;
    /* peers this rank has sent a delta message to: its plain messages to
     * them go as header + body from then on (match.c explains why) */
    atomic_int *headed_to;
    /* node of each rank: the lowest rank on it (MPI_COMM_TYPE_SHARED) */
    int *node_of;
    /* statistics */
    atomic_ullong st_polls, st_wakeups, st_completions, st_callbacks, st_frag_sent, st_frag_recv,
        st_switches, st_faults, st_fault_waits, st_deltas_sent, st_deltas_recv, st_stream_msgs,
        st_edge_steps, st_edge_bounces;
    /* OVL_STATS: transfers of every front end, their strips, bytes, time
     * spent waiting, and the split decisions by reason */
    atomic_ullong st_transfers, st_strips, st_bytes, st_wait_ns;
    atomic_ullong st_split[OVL__SPLIT_NREASONS];
};
extern struct ovl__global ovl__g;

/* Common argument checks; return 0 or an ovl error (recorded). */
int ovl__check_init(const char *fn);
int ovl__check_peer(const char *fn, int rank, int any_ok);
int ovl__check_tag(const char *fn, int tag, int any_ok);
int ovl__check_not_in_callback(const char *fn);
/* @peer runs on this rank's node (this rank included). */
int ovl__peer_on_node(int peer);

/* ---- statistics (init.c), for every front end ----------------------------- */

/* One transfer of @bytes moved in @nstrips strips (pieces, fragments). */
void ovl__stats_transfer(size_t bytes, unsigned nstrips);
/* A split decision was taken, for the reason (enum ovl__split_reason). */
void ovl__stats_split_reason(int reason);
/* Time spent blocked waiting for data or completion. */
void ovl__stats_wait_ns(uint64_t ns);
/* CLOCK_MONOTONIC in nanoseconds (async-signal-safe). */
uint64_t ovl__now_ns(void);

/* ---- trace.c: OVL_TRACE timeline ------------------------------------------ */

/* Non-zero while OVL_TRACE records. Test it before building arguments:
 * `if (ovl__trace_on) ovl__trace_complete(...)`. */
extern int ovl__trace_on;
/* Read OVL_TRACE (ovl_init, rank known); write the file (ovl_finalize). */
void ovl__trace_init(void);
void ovl__trace_fini(void);
/* Microseconds on ovl's monotonic clock (ovl__now_ns / 1000): every timing
 * in the library and the trace's timestamps. */
double ovl__now_us(void);
/* A complete event ("ph":"X") that began at @t0_us and lasted @dur_us, with
 * up to three integer arguments (@k* NULL: unused). @cat, @name and the
 * keys must be string literals (stored by pointer). Async-signal-safe: no
 * allocation, no lock (the fault handler records too). */
void ovl__trace_complete(const char *cat, const char *name, double t0_us, double dur_us,
                         const char *k1, long long v1, const char *k2, long long v2, const char *k3,
                         long long v3);
/* An instant event ("ph":"i"). */
void ovl__trace_instant(const char *cat, const char *name, const char *k1, long long v1,
                        const char *k2, long long v2);
/* An instant whose arguments are a JSON object body written by the caller
 * (taken over; freed after writing). Not for signal handlers. */
void ovl__trace_instant_json(const char *cat, const char *name, char *json_args);
/* Name the calling thread in the timeline (@name: a string literal). */
void ovl__trace_thread_name(const char *name);
/* The page-access trace of a watched transfer: @order[0..n) are the page
 * indices in the order the program first touched them, of @npages. */
void ovl__trace_page_access(const void *base, size_t len, size_t npages, const uint32_t *order,
                            size_t n);

static inline int ovl__delta_tag(int t)
{
    return t + ovl__g.tag_ub + 1;
}

#endif /* OVL_INTERNAL_H */
