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
 *   message.c, stream.c -- front ends: point-to-point and marshal streams
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

enum ovl__req_kind { OVL__REQ_SEND, OVL__REQ_RECV, OVL__REQ_SSEND, OVL__REQ_SRECV };

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
    int rank, size;
    int tag_ub;
    int thread_level;
    ovl_config_t cfg;
    /* finalize's drain: messages sent to / received from each peer */
    atomic_ullong *sent_to;
    atomic_ullong *recvd_from;
    /* statistics */
    atomic_ullong st_polls, st_wakeups, st_completions, st_callbacks, st_frag_sent, st_frag_recv,
        st_switches;
};
extern struct ovl__global ovl__g;

/* Common argument checks; return 0 or an ovl error (recorded). */
int ovl__check_init(const char *fn);
int ovl__check_peer(const char *fn, int rank, int any_ok);
int ovl__check_tag(const char *fn, int tag, int any_ok);
int ovl__check_not_in_callback(const char *fn);

#endif /* OVL_INTERNAL_H */
