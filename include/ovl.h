/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file ovl.h
 * @brief ovl: overlap MPI communication with computation.
 *
 * The single public header of libovl. ovl sits on top of MPI and never
 * replaces it: it duplicates the communicator it is given, drives its own
 * MPI requests from a progress engine (inside ovl calls, and optionally from
 * a background thread), and runs continuations -- user callbacks -- as soon
 * as a message has left or arrived.
 *
 * Conventions (see docs/ARCHITECTURE.md):
 *  - every function returns OVL_SUCCESS (0) or a negative OVL_ERR_* code
 *    (or, under OVL_ERRORS=fatal, aborts with a message instead);
 *  - output arguments come last and are written only on success;
 *  - handles are opaque; OVL_REQUEST_NULL is the null request, as in MPI;
 *  - a call's options are one `const ovl_param_t *param` (NULL: the
 *    defaults), never a variant of the call;
 *  - a call that fails never runs the callback it was given.
 */
#ifndef OVL_H
#define OVL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

#define OVL_VERSION_MAJOR 0
#define OVL_VERSION_MINOR 1
#define OVL_VERSION_PATCH 0

/**
 * OVL_NODISCARD marks every call that returns an error code. It makes the
 * compiler warn about an ignored result (warn_unused_result) only when the
 * program defines OVL_CHECK_RESULTS before it includes ovl.h (e.g.
 * -DOVL_CHECK_RESULTS); otherwise it expands to nothing, so a program that
 * runs with OVL_ERRORS=fatal (below), or checks only some results, builds
 * without warnings. ovl's own sources, tests, tools and benchmarks define it.
 */
#if defined(OVL_CHECK_RESULTS) && (defined(__GNUC__) || defined(__clang__))
#define OVL_NODISCARD __attribute__((warn_unused_result))
#else
#define OVL_NODISCARD
#endif

/**
 * The error table: one row per code, (name, value, message). It generates the
 * ovl_error_t enum and ovl_strerror(), so the two never disagree.
 *
 * Errors are fatal on request, as MPI_ERRORS_ARE_FATAL makes MPI's: with
 * OVL_ERRORS=fatal (or ovl_config_t::errors = OVL_ERRORS_FATAL), a call that
 * would return an error prints one line on stderr instead, naming the call,
 * the code and the detail ovl_error_detail() would give, e.g.
 *
 *     ovl: rank 1: ovl_isend failed: OVL_ERR_ARG: ovl_isend: buffer is NULL
 *     with count 4 (OVL_ERRORS=fatal: MPI_Abort)
 *
 * and calls MPI_Abort(MPI_COMM_WORLD, -code); then no result needs checking.
 * Every code counts, OVL_ERR_EOF of ovl_stream_read and an operation's error
 * that ovl_wait/ovl_test return included; an operation's error aborts as
 * soon as ovl sees it, on whichever thread drives progress. Not a return:
 * the status a continuation is given (it may say OVL_ERR_CANCELLED for a
 * receive ovl_finalize cancelled). The mode is the one the last ovl_init
 * resolved, its configuration errors included; before ovl_init resolves
 * one, the OVL_ERRORS variable's. The default, OVL_ERRORS=return, returns
 * every code.
 */
#define OVL_ERROR_MAP(X)                                                                    \
    X(SUCCESS, 0, "success")                                                                \
    X(ERR_ARG, -1, "invalid argument (NULL pointer, negative count, bad value)")            \
    X(ERR_RANK, -2, "rank out of range for ovl's communicator")                             \
    X(ERR_TAG, -3, "tag out of range (0..tag upper bound, or OVL_ANY_TAG)")                 \
    X(ERR_NOT_INIT, -4, "ovl is not initialised (or already finalised)")                    \
    X(ERR_ALREADY_INIT, -5, "ovl is already initialised")                                   \
    X(ERR_REQUEST, -6, "invalid request handle (never issued, or already released)")        \
    X(ERR_NOMEM, -7, "out of memory")                                                       \
    X(ERR_MPI, -8, "an MPI call failed (communication failure)")                            \
    X(ERR_THREAD, -9, "wrong thread level, or a private domain used by another thread")     \
    X(ERR_CONFIG, -10, "invalid configuration value")                                       \
    X(ERR_TRUNCATE, -11, "message larger than the receive buffer")                          \
    X(ERR_BUSY, -12, "the request already has a continuation, or this rank holds the lock") \
    X(ERR_IN_CALLBACK, -13, "blocking ovl call made from inside a callback")                \
    X(ERR_EOF, -14, "read past the end of a stream message")                                \
    X(ERR_PENDING, -15, "requests are still pending")                                       \
    X(ERR_CANCELLED, -16, "the operation was cancelled")                                    \
    X(ERR_UNSUPPORTED, -17, "not supported by this MPI library or system")                  \
    X(ERR_INTERNAL, -18, "internal error in ovl")                                           \
    X(ERR_STALE, -19, "delta-send buffer written after that part was sent")                 \
    X(ERR_MONITOR, -20, "access monitor failed (protection, userfaultfd, map count)")       \
    X(ERR_IN_STATUS, -21, "one or more requests failed: see the error of each status")

/** Return codes of every ovl function. */
typedef enum {
#define OVL_X_ENUM(name, value, msg) OVL_##name = (value),
    OVL_ERROR_MAP(OVL_X_ENUM)
#undef OVL_X_ENUM
} ovl_error_t;

/** A static, human-readable message for an ovl return code. Never NULL. */
const char *ovl_strerror(int code);

/**
 * Details of the last error returned to the calling thread, e.g.
 * "ovl_isend: rank 7 out of range (communicator size 4)". Empty string when
 * the thread has seen no error. The pointer stays valid until the thread's
 * next ovl call.
 */
const char *ovl_error_detail(void);

/* ------------------------------------------------------------------------ */
/* Initialisation and configuration                                          */
/* ------------------------------------------------------------------------ */

/** Where progress happens. */
typedef enum {
    OVL_PROGRESS_INLINE = 0, /**< only inside ovl calls (ovl_test, ovl_wait, ovl_progress, ...) */
    OVL_PROGRESS_THREAD = 1  /**< plus a background thread (needs MPI_THREAD_MULTIPLE) */
} ovl_progress_mode_t;

/** Bits of ovl_config_t::field_mask: which fields the caller set. */
enum {
    OVL_CONFIG_FIELD_PROGRESS = 1u << 0,
    /* 1u << 1, 1u << 2: removed fields (CHANGELOG.md), refused */
    OVL_CONFIG_FIELD_FRAGMENT_SIZE = 1u << 3,
    OVL_CONFIG_FIELD_STREAM_WINDOW = 1u << 4,
    OVL_CONFIG_FIELD_STACK_SIZE = 1u << 5,
    OVL_CONFIG_FIELD_VERBOSE = 1u << 6,
    OVL_CONFIG_FIELD_MONITOR = 1u << 7,
    OVL_CONFIG_FIELD_DELTA_SIZE = 1u << 8,
    OVL_CONFIG_FIELD_EAGER_LIMIT = 1u << 9,
    /* 1u << 10, 1u << 11: removed fields, refused */
    OVL_CONFIG_FIELD_PROGRESS_PRIORITY = 1u << 12,
    OVL_CONFIG_FIELD_RMA_LOCAL = 1u << 13,
    /* 1u << 14: removed, refused */
    OVL_CONFIG_FIELD_LATENESS_US = 1u << 15,
    /* 1u << 16: removed, refused */
    OVL_CONFIG_FIELD_SERVE_US = 1u << 17,
    /* 1u << 18: removed, refused */
    OVL_CONFIG_FIELD_STREAM_WHOLE = 1u << 19,
    OVL_CONFIG_FIELD_ERRORS = 1u << 20,
    OVL_CONFIG_FIELD_DOMAINS = 1u << 21,
    OVL_CONFIG_FIELD_AM_POLL_MASK = 1u << 22
};

/** What a call that fails does (OVL_ERRORS; see OVL_ERROR_MAP). */
typedef enum {
    OVL_ERRORS_RETURN = 0, /**< return the OVL_ERR_* code (default) */
    OVL_ERRORS_FATAL = 1   /**< print the error and MPI_Abort, as MPI_ERRORS_ARE_FATAL */
} ovl_errors_t;

/**
 * How delta send/receive learns that the program has written or needs part
 * of a buffer (docs/ARCHITECTURE.md, "watch").
 */
typedef enum {
    OVL_MONITOR_AUTO = 0,     /**< uffd where this process may use it, else mprotect */
    OVL_MONITOR_UFFD = 1,     /**< Linux userfaultfd: write-protect and missing-page faults */
    OVL_MONITOR_MPROTECT = 2, /**< page protection and a SIGSEGV handler (any POSIX system) */
    OVL_MONITOR_EXPLICIT = 3  /**< no faults: ovl_delta_produced() / ovl_delta_need() annotations */
} ovl_monitor_t;

/**
 * How ovl_get()/ovl_put() and delta sends treat a peer on the calling
 * rank's node (MPI_COMM_TYPE_SHARED, the rank itself included).
 */
typedef enum {
    /** always the plain path: MPI moves such bytes with a copy by this
     *  node's own CPUs, so there is no wire time to hide and guarding only
     *  adds faults: a get or put completes inside the call, unsplit and
     *  unguarded; a delta send is never watched and leaves at
     *  ovl_delta_send_end(); a plan's reference to such a peer moves whole */
    OVL_RMA_LOCAL_DIRECT = 0,
    /** as for any other peer: delta sends in the model's pieces as the
     *  program writes; gets and puts split by the model, guarded,
     *  demand-driven (an MPI whose intra-node RMA is done by a DMA engine
     *  or the target; testing those paths on one node) */
    OVL_RMA_LOCAL_OVERLAP = 1,
    /** the model decides from the link within the node, measured apart
     *  from the links between nodes (ovl_init, or the performance
     *  database's node_* keys): overlap where the share of a transfer a
     *  computing rank does not pay, per byte, exceeds the copy overlap
     *  adds; else, and where not measured, as OVL_RMA_LOCAL_DIRECT. The
     *  rank itself is always reached directly (default) */
    OVL_RMA_LOCAL_AUTO = 2
} ovl_rma_local_t;

/** Whether a marshal stream that fits in its first window goes as one
 * message (OVL_STREAM_WHOLE). */
typedef enum {
    /** when the marshal function fills it quickly: within the per-message
     *  costs that fragment-by-fragment sending would add, plus a tenth of
     *  the wire time of what it holds (a slow one streams from its first
     *  fragment) */
    OVL_STREAM_WHOLE_AUTO = 0,
    /** whenever it fits, however long the marshal function takes */
    OVL_STREAM_WHOLE_ON = 1,
    /** never: every fragment is its own message */
    OVL_STREAM_WHOLE_OFF = 2
} ovl_stream_whole_t;

/**
 * Options for ovl_init(). Set field_mask to the OVL_CONFIG_FIELD_* bits of
 * the fields you fill in; the others take their OVL_* environment variable,
 * or the default (docs/ENV.md). Fields set here win over the environment.
 * A bit that no OVL_CONFIG_FIELD_* names makes ovl_init fail with
 * OVL_ERR_CONFIG.
 */
typedef struct {
    uint64_t field_mask;
    /** The progress engine. */
    struct {
        ovl_progress_mode_t mode; /**< OVL_PROGRESS: inline|thread (default inline) */
        unsigned
            lateness_us; /**< OVL_LATENESS_US: how late the progress thread may notice the completion of an operation a continuation waits for (ovl_continue on an operation in flight, ovl_continue_mpi): it polls at least this often while one waits; smaller: callbacks run sooner, at the cost of more wake-ups taken from the computation on the thread's core; 1-1000000 (default 30) */
        unsigned
            serve_us; /**< OVL_SERVE_US: while this rank has a live segment (ovl_segment_create) and other ranks' gets and puts on its memory progress only when MPI is polled here, the progress thread polls at least this often, also with nothing of its own in flight; larger: fewer wake-ups taken from the computation, slower remote gets and puts; 0 = 50, and only where the first ovl_segment_create measures that one-sided operations need the target's MPI calls (none on RDMA networks or shared-memory windows), which ovl_config_get() reports as 50 (default 0) */
        int priority; /**< OVL_PROGRESS_PRIORITY: 1-99 gives the progress thread SCHED_FIFO at this priority while it sleeps on its poll timer and polls, where the process may (CAP_SYS_NICE or RLIMIT_RTPRIO), so every poll wake-up preempts the computation; ovl_config_get() reports 0 when it was refused; 0 = normal scheduling (default 0) */
    } progress;
    /** Marshal streams. */
    struct {
        size_t
            fragment_size; /**< OVL_FRAGMENT_SIZE: stream fragment bytes incl. 16-byte header, 64 B - 64 MiB, same on every rank; 0 = chosen at ovl_init from the performance model: the smallest power of two from 4 KiB to 64 KiB (within the eager switch) whose per-message overhead is at most 5 % of its wire time, which ovl_config_get() then reports (default 0) */
        unsigned
            window; /**< OVL_STREAM_WINDOW: fragments in flight per stream, same on every rank (default 8) */
        size_t
            stack_size; /**< OVL_STACK_SIZE: stack bytes of a marshal coroutine (default 262144) */
        ovl_stream_whole_t
            whole; /**< OVL_STREAM_WHOLE: auto|on|off, whether a send stream whose marshal function ends within its first window (window x fragment payload, plus 16 bytes per fragment: 128 KiB with 8 fragments of 16 KiB) goes as one message instead of one per fragment; auto: when the function fills it quickly (default auto) */
    } stream;
    /** Access monitoring (delta send/receive, get/put). */
    struct {
        ovl_monitor_t
            monitor; /**< OVL_MONITOR: auto|uffd|mprotect (default auto); explicit here only */
        size_t
            delta_size; /**< OVL_DELTA_SIZE: bytes per delta; 0 = chosen at run time by the model (default 0) */
    } access;
    /** What ovl assumes of the MPI library and the node. */
    struct {
        size_t
            eager_limit; /**< OVL_EAGER_LIMIT: the MPI library's eager/rendezvous switch in bytes; 0 = detect (default 0) */
        ovl_rma_local_t
            rma_local; /**< OVL_RMA_LOCAL: auto|direct|overlap, how ovl_get/ovl_put, delta sends and plans treat a peer on this rank's node (default auto: the model's choice, ovl_rma_local_t) */
    } mpi;
    /** Errors and messages. */
    struct {
        int verbose; /**< OVL_VERBOSE: 0 silent, 1 print errors to stderr (default), 2 also info; more = 2; negative: OVL_ERR_CONFIG */
        ovl_errors_t
            errors; /**< OVL_ERRORS: return|fatal, whether a failing call returns its code or prints it and calls MPI_Abort (OVL_ERROR_MAP); resolved first, so ovl_init's own configuration errors abort under fatal too; set it on every rank (default return) */
    } report;
    /** Threads. */
    struct {
        unsigned
            domains; /**< OVL_DOMAINS: communication domains ovl_init creates, domain 0 included: 2 or more creates domains 1 .. n-1, shared, for OpenMP codes (thread t binds domain t, ovl_domain_bind); same on every rank; 1-OVL_DOMAINS_MAX (default 1) */
        unsigned
            am_poll_mask; /**< OVL_AM_POLL_MASK: a thread bound to a domain other than 0 also drives domain 0 (where active-message handlers run) every (mask + 1) x (domains - 1)-th time it drives its own: smaller, active messages are served sooner; larger, the domains' threads are interrupted less; 0-65535 (default 15) */
    } threads;
} ovl_config_t;

/**
 * Start ovl on (a private duplicate of) @p comm. Collective over @p comm.
 * MPI must be initialised. With OVL_PROGRESS_THREAD the MPI library must
 * provide MPI_THREAD_MULTIPLE (MPI_Init_thread); otherwise OVL_ERR_THREAD.
 * Every rank must use the same fragment size and stream window (checked:
 * OVL_ERR_CONFIG). A configuration error or OVL_ERR_THREAD on some ranks
 * only fails the call on every rank, none initialised: a failing rank
 * returns its own code and detail, every other rank the same code (the
 * most negative one if ranks failed differently) with a detail naming the
 * rank that failed. (OVL_ERR_ALREADY_INIT and OVL_ERR_ARG are returned at
 * once, before any collective.) OVL_ERRORS is resolved first: under fatal
 * (the variable, or the errors field) a configuration error aborts the job
 * instead, from the rank that has it. ovl_init and ovl_finalize leave the C
 * library's allocator as they found it: ovl maps its large buffers (the
 * quick estimate's, its request table) with mmap, never malloc, whose
 * free() would raise glibc's mmap threshold and move the program's later
 * large blocks into the heap. One MPI setting changes for a moment: where
 * the MPI library raises a completed request's error on MPI_COMM_WORLD's
 * or MPI_COMM_SELF's error handler instead of its communicator's (Debian's
 * MPICH 4.0: WORLD; MPICH 5: SELF; ovl_init probes it, OVL_VERBOSE=2 says
 * which), that communicator's handler is MPI_ERRORS_RETURN while ovl calls
 * MPI_Testsome, and the program's own is put back after each call, so a
 * truncated ovl receive completes with OVL_ERR_TRUNCATE rather than
 * reaching the program's handler. A thread calling MPI on that
 * communicator at the same moment sees errors returned. The first private
 * domain (ovl_domains_create) registers the process for Linux's
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), where the kernel has it;
 * the registration lasts for the process's life and changes nothing else.
 * Signal handlers: where a fault monitor can work (/proc/self/mem writes
 * protected pages; ovl-info says), ovl_init installs one handler for
 * SIGSEGV (mprotect) and SIGBUS (userfaultfd), whatever OVL_MONITOR says,
 * since a request may ask for a fault monitor of its own; on x86-64 also
 * one for SIGTRAP, to single-step an instruction over other data on a
 * guarded page. A signal that is not a fault on memory ovl guards (one
 * sent with kill(), a SIGTRAP while ovl steps nothing) goes to the handler
 * installed before ovl_init, else takes the default action.
 * ovl_finalize puts the previous handlers back, unless the program
 * replaced ovl's meanwhile. A handler for these signals that the program
 * installs after ovl_init must pass on to ovl's (the old action sigaction
 * returned) the faults it does not own: else an access to a guarded
 * buffer reaches the program's handler instead of waiting for its data.
 *
 * @param comm  communicator (MPI_COMM_WORLD in most programs)
 * @param cfg   options, or NULL for environment and defaults
 * @return OVL_SUCCESS, OVL_ERR_ALREADY_INIT, OVL_ERR_ARG (MPI not initialised,
 *         MPI_COMM_NULL), OVL_ERR_CONFIG, OVL_ERR_THREAD, OVL_ERR_NOMEM, OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_init(MPI_Comm comm, const ovl_config_t *cfg);

/**
 * Stop ovl. Collective over the ovl communicator. Pending operations are
 * completed first (their continuations run); requests the user still holds
 * become invalid. Must not be called from a callback.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_IN_CALLBACK, OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_finalize(void);

/** 1 if ovl is initialised, else 0. Never fails. */
int ovl_initialized(void);

/**
 * Largest tag ovl accepts (half of MPI's MPI_TAG_UB: ovl keeps the upper
 * half to mark delta messages). 0 before ovl_init.
 */
int ovl_tag_ub(void);

/** ovl's private communicator (MPI_COMM_NULL before ovl_init). */
MPI_Comm ovl_comm(void);

/** The configuration in force (after environment and defaults). */
OVL_NODISCARD int ovl_config_get(ovl_config_t *cfg);

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct ovl_request_s *ovl_request_t;
#define OVL_REQUEST_NULL ((ovl_request_t)0)

#define OVL_ANY_SOURCE MPI_ANY_SOURCE
#define OVL_ANY_TAG    MPI_ANY_TAG

/** Completion status of an operation. */
typedef struct {
    int source;   /**< sender's rank in ovl's communicator (receives) */
    int tag;      /**< message tag */
    size_t bytes; /**< bytes transferred */
    int error;    /**< OVL_SUCCESS or the OVL_ERR_* the operation failed with */
} ovl_status_t;

/** Pass where a status is not wanted. */
#define OVL_STATUS_IGNORE ((ovl_status_t *)0)

/**
 * Wait for @p req to complete, then release it and set *req to
 * OVL_REQUEST_NULL. Waiting on OVL_REQUEST_NULL returns at once with an empty
 * status, as in MPI. A handle that was already released (e.g. a copy of one
 * already waited on) gives OVL_ERR_REQUEST. Calls racing on copies of one
 * handle (two threads waiting, a wait against ovl_request_free) release it
 * once: one call succeeds, the others return OVL_ERR_REQUEST.
 *
 * @return OVL_SUCCESS, or the operation's error (also in status->error):
 *         OVL_ERR_MPI, OVL_ERR_TRUNCATE, OVL_ERR_EOF, OVL_ERR_CANCELLED, a
 *         marshal function's own error; or OVL_ERR_ARG, OVL_ERR_REQUEST,
 *         OVL_ERR_NOT_INIT, OVL_ERR_IN_CALLBACK for misuse.
 */
OVL_NODISCARD int ovl_wait(ovl_request_t *req, ovl_status_t *status);

/**
 * Drive progress once and check @p req. *flag = 1 when complete, in which
 * case the request is released as by ovl_wait. Never blocks; may be called
 * from callbacks. Errors as ovl_wait.
 */
OVL_NODISCARD int ovl_test(ovl_request_t *req, int *flag, ovl_status_t *status);

/**
 * Wait for all @p count requests, as MPI_Waitall. Every valid request is
 * completed and released (its entry set to OVL_REQUEST_NULL), whatever
 * happens to the others: a stale entry (never issued, already released)
 * or an operation that failed stops none of them. statuses[i] (when
 * @p statuses is not OVL_STATUS_IGNORE) describes entry i: as ovl_wait
 * gives it for a released request, its error OVL_SUCCESS or the error its
 * operation failed with (OVL_ERR_TRUNCATE, OVL_ERR_MPI, ...); for a stale
 * entry error OVL_ERR_REQUEST, the rest empty, the entry left as it was;
 * for OVL_REQUEST_NULL an empty status with error OVL_SUCCESS.
 *
 * @return OVL_SUCCESS when every request succeeded; OVL_ERR_IN_STATUS when
 *         one or more failed (see each status's error; the detail names
 *         how many and the first); or, with nothing touched,
 *         OVL_ERR_NOT_INIT, OVL_ERR_ARG (negative count, NULL array with
 *         count > 0), OVL_ERR_IN_CALLBACK (called from a callback while a
 *         request of the array is not complete).
 */
OVL_NODISCARD int ovl_waitall(int count, ovl_request_t reqs[], ovl_status_t statuses[]);

/**
 * Release @p req without waiting; *req becomes OVL_REQUEST_NULL. The
 * operation still runs to completion, and its continuation (if any) still
 * runs. Freeing an already-released handle gives OVL_ERR_REQUEST.
 */
OVL_NODISCARD int ovl_request_free(ovl_request_t *req);

/**
 * Drive the progress engine once: poll MPI, complete what is ready, run
 * ready continuations and resume ready marshal functions. Never blocks.
 * Useful in compute loops when the progress thread is off.
 */
OVL_NODISCARD int ovl_progress(void);

/* ------------------------------------------------------------------------ */
/* Optional parameters of a call                                             */
/* ------------------------------------------------------------------------ */

/** Access order of get destinations (OVL_PARAM_FIELD_ORDER, ovl_segment_hint()). */
typedef enum {
    OVL_ORDER_UP = 0,    /**< from the first byte to the last */
    OVL_ORDER_DOWN = 1,  /**< from the last byte to the first */
    OVL_ORDER_RANDOM = 2 /**< any order (default) */
} ovl_order_t;

/** How a loop-nest plan moves its references (OVL_PARAM_FIELD_PROTOCOL,
 *  ovl_plan_commit()). */
typedef enum {
    OVL_PLAN_AUTO = 0,     /**< the protocol of least predicted time (default) */
    OVL_PLAN_DATATYPE = 1, /**< one MPI_Rget per strip and reference, derived datatypes on
                                both sides (MPI packs). Under Open MPI not for a layout
                                with a negative stride or overlapping blocks, which Open
                                MPI 4.1 moves out of order */
    OVL_PLAN_RUNS = 2,     /**< one MPI_Rget per contiguous run, a strip's issued together
                                (a reference whose strips are contiguous: one transfer per
                                strip, the paper's contiguous protocol) */
    OVL_PLAN_BBOX = 3,     /**< one MPI_Rget of the strip's bounding box into staging, the
                                runs copied out when the strip is handed out (reads only) */
    OVL_PLAN_PACK = 4      /**< packed at the source: an active message asks the target to
                                pack a read strip's points and send them (one message,
                                unpacked by MPI into the local layout); a write strip is
                                packed here and unpacked by the target's handler. The
                                target packs only while it drives ovl's progress (an ovl
                                call, or the progress thread). Chosen automatically:
                                without the progress thread, a read strip the target has
                                not packed within 2 ms + 10 x its predicted time is
                                fetched by MPI_Rget instead, and the plan leaves PACK
                                (ovl_plan_explain says why); a plan that writes only
                                with OVL_PROGRESS=thread. Forced, the program promises
                                its targets are in ovl calls */
} ovl_plan_protocol_t;
/** Entries of per-protocol arrays (ovl_plan_info_t), OVL_PLAN_AUTO's unused. */
#define OVL_PLAN_PROTOCOLS 5

/** Bits of ovl_param_t::field_mask: which fields the caller set. */
enum {
    OVL_PARAM_FIELD_MONITOR = 1u << 0,   /**< ovl_param_t::monitor */
    OVL_PARAM_FIELD_COUNT = 1u << 1,     /**< ovl_param_t::count */
    OVL_PARAM_FIELD_DECOMP = 1u << 2,    /**< ovl_param_t::decomp */
    OVL_PARAM_FIELD_ORDER = 1u << 3,     /**< ovl_param_t::order */
    OVL_PARAM_FIELD_PIGGYBACK = 1u << 4, /**< ovl_param_t::piggyback */
    OVL_PARAM_FIELD_PROTOCOL = 1u << 5,  /**< ovl_param_t::protocol */
    OVL_PARAM_FIELD_STRIP = 1u << 6,     /**< ovl_param_t::strip */
    OVL_PARAM_FIELD_LOOKAHEAD = 1u << 7, /**< ovl_param_t::lookahead */
    OVL_PARAM_FIELD_LEVEL = 1u << 8      /**< ovl_param_t::level */
};

/**
 * Optional parameters of a call, as UCX's ucp_request_param_t: one struct
 * for every call that takes options, instead of a variant of the call per
 * option. Set field_mask to the OVL_PARAM_FIELD_* bits of the fields you
 * fill in; the others are not read. Each call that takes a
 * `const ovl_param_t *param` says which fields it takes; a NULL param is the
 * same as field_mask 0 (every option at its default). A bit that no
 * OVL_PARAM_FIELD_* names, or one the call does not take, fails the call
 * with OVL_ERR_ARG before it does anything, its detail naming the bit.
 * Fields are only ever appended, and ovl reads only those whose bit is set,
 * so a program built against an older ovl.h keeps working.
 * With a compound literal an option fits in the call:
 *
 *     ovl_delta_recv(buf, n, MPI_DOUBLE, src, tag,
 *                    &(ovl_param_t){ .field_mask = OVL_PARAM_FIELD_MONITOR,
 *                                    .monitor = OVL_MONITOR_EXPLICIT },
 *                    &req);
 */
typedef struct {
    uint64_t field_mask;
    /** ovl_delta_send_begin(), ovl_delta_recv(): the monitor of this
     *  request (OVL_MONITOR_AUTO: the process's, ovl_config_t::monitor);
     *  OVL_MONITOR_EXPLICIT is chosen here or in ovl_config_t only */
    ovl_monitor_t monitor;
    /** ovl_delta_send_end(): only the first @c count elements were
     *  produced, the message is that long (at least what has already been
     *  sent, at most the count the send began with) */
    int count;
    /** ovl_segment_hint(): decomposition of later transfers, 0-64 (1) */
    unsigned decomp;
    /** ovl_segment_hint(): how the program reads later gets' destinations
     *  (OVL_ORDER_RANDOM) */
    ovl_order_t order;
    /** ovl_segment_hint(): a get started while at least this many others
     *  are outstanding joins a train; 0 turns trains off (the runtime
     *  decides until it is set) */
    unsigned piggyback;
    /** ovl_plan_commit(): the protocol (OVL_PLAN_AUTO: the model's choice) */
    ovl_plan_protocol_t protocol;
    /** ovl_plan_commit(): iterations of the outermost loop per strip, at
     *  least 1 (the model's choice) */
    int64_t strip;
    /** ovl_plan_commit(): strips in flight beyond the one the program works
     *  on, 0-64 (the model's choice) */
    unsigned lookahead;
    /** ovl_plan_commit(): the deepest loop depth strips may be cut from
     *  (0: the outermost only, the default); above 0, ovl_plan_next()
     *  counts the iterations of depths 0 to @c level flattened (see
     *  ovl_plan_commit()) */
    int level;
} ovl_param_t;

/* ------------------------------------------------------------------------ */
/* Point-to-point messages                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Start sending @p count elements of @p datatype from @p buf to @p dest.
 * The buffer must not be modified until the request completes (the
 * continuation is a good place to reuse it). Tags: 0 .. ovl tag upper bound.
 * A buffer that is still arriving through a fault-monitored
 * ovl_delta_recv() (the whole buffer, contiguous datatype) is forwarded
 * piece by piece as it arrives, as ovl_delta_send_begin() would (the
 * receiver may use ovl_irecv or ovl_delta_recv). A buffer that only
 * overlaps bytes not yet arrived (part of a delta receive, a pending
 * ovl_get) is refused with OVL_ERR_PENDING, nothing sent.
 * As in MPI, @p dest may be MPI_PROC_NULL (the edge of a halo exchange):
 * nothing is sent and the request completes at once, its status giving
 * source MPI_PROC_NULL, tag MPI_ANY_TAG and 0 bytes. The same holds for
 * ovl_irecv(), ovl_isend_stream() and ovl_irecv_stream() (whose function
 * then never runs).
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG, OVL_ERR_RANK,
 *         OVL_ERR_TAG, OVL_ERR_NOMEM, OVL_ERR_MPI, OVL_ERR_PENDING
 */
OVL_NODISCARD int ovl_isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                            ovl_request_t *req);

/**
 * Start receiving up to @p count elements of @p datatype into @p buf from
 * @p source (or OVL_ANY_SOURCE) with @p tag (or OVL_ANY_TAG). A longer
 * message completes with OVL_ERR_TRUNCATE. @p source may be MPI_PROC_NULL:
 * the request completes at once with 0 bytes, @p buf untouched. A
 * datatype MPI would refuse (not committed) fails the call at once
 * (OVL_ERR_MPI), before any message is matched.
 * @return as ovl_isend.
 */
OVL_NODISCARD int ovl_irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
                            ovl_request_t *req);

/* ------------------------------------------------------------------------ */
/* Continuations                                                             */
/* ------------------------------------------------------------------------ */

/**
 * A continuation. @p status describes the completed operation (valid only
 * during the call). @p arg is the pointer given at registration.
 */
typedef void (*ovl_continue_fn)(const ovl_status_t *status, void *arg);

/**
 * Run @p fn(status, arg) exactly once, as soon as the operation of @p req has
 * completed: the send buffer may be reused / the received data is in place.
 *
 * Threads: the callback runs on whichever thread drives progress -- the
 * progress thread when OVL_PROGRESS=thread, else an application thread
 * inside an ovl call. It never runs inside ovl_continue() itself: if the
 * operation has already completed, it runs at the next progress step.
 * While it waits, the progress thread polls every OVL_POLL_CALLBACK_US
 * (default 30 us) rather than OVL_POLL_MAX_US, so it runs within about that
 * long of the completion. Callbacks run one at a time. A callback may post new operations (ovl_isend,
 * ovl_irecv, streams, ovl_continue) and call ovl_test/ovl_progress; blocking
 * calls (ovl_wait, ovl_waitall, ovl_finalize) return OVL_ERR_IN_CALLBACK.
 *
 * The request still has to be waited on or freed; freeing it right after
 * ovl_continue gives fire-and-forget messaging.
 *
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (fn NULL),
 *         OVL_ERR_REQUEST (also a request already given to
 *         ovl_request_free, or released by another thread meanwhile),
 *         OVL_ERR_BUSY (already has a continuation)
 */
OVL_NODISCARD int ovl_continue(ovl_request_t req, ovl_continue_fn fn, void *arg);

/** A continuation for a plain MPI request: gets the MPI status. */
typedef void (*ovl_mpi_continue_fn)(MPI_Status *status, void *arg);

/**
 * Hand a plain MPI request the user started (on any communicator) to ovl,
 * which runs @p fn(status, arg) once it completes; *mpireq is set to
 * MPI_REQUEST_NULL, as ovl now owns (and will complete) the request. Lets
 * existing MPI code adopt continuations one call at a time. Same threading
 * rules as ovl_continue(). With the progress thread on, the MPI library must
 * be in MPI_THREAD_MULTIPLE (ovl_init checked it).
 *
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL pointer,
 *         MPI_REQUEST_NULL, fn NULL), OVL_ERR_NOMEM
 */
OVL_NODISCARD int ovl_continue_mpi(MPI_Request *mpireq, ovl_mpi_continue_fn fn, void *arg);

/* ------------------------------------------------------------------------ */
/* Marshal streams                                                           */
/* ------------------------------------------------------------------------ */

/**
 * A stream of values being marshalled into, or unmarshalled from, a message.
 * Its fields are ovl's, not the program's: the typed helpers below use them
 * to write or read a value inside the current fragment without a call (a
 * bounds check and a copy). Both windows are empty whenever the stream's
 * function is not running, so every misuse reaches ovl_stream_write() /
 * ovl_stream_read() and their error checks.
 */
struct ovl_stream_s {
    unsigned char *ovl_wpos_, *ovl_wend_;       /**< write window (send streams) */
    const unsigned char *ovl_rpos_, *ovl_rend_; /**< read window (receive streams) */
};
typedef struct ovl_stream_s *ovl_stream_t;

/**
 * A marshal (send) or unmarshal (receive) function. It runs as a coroutine:
 * ovl_stream_write() suspends it while every fragment buffer is in flight,
 * ovl_stream_read() while the next fragment has not arrived, and the
 * progress engine resumes it when that changes. Return OVL_SUCCESS, or an
 * error code (< 0) to abort the message; the request then completes with
 * that code. It must not rely on thread-local state: it may be resumed on
 * another thread (the progress thread).
 */
typedef int (*ovl_marshal_fn)(ovl_stream_t stream, void *arg);

/**
 * Send a message whose contents @p fn writes with ovl_stream_write*(). The
 * length need not be known in advance. Fragments of OVL_FRAGMENT_SIZE bytes
 * are sent as they fill, so marshalling overlaps the transfer, and at most
 * OVL_STREAM_WINDOW fragments are buffered: a slow receiver suspends the
 * marshal function instead of growing memory. A stream that @p fn fills
 * within the first window, quickly, goes as one message instead
 * (OVL_STREAM_WHOLE). @p fn starts inside this call and runs until it first
 * suspends or returns. The request completes when the last fragment has
 * been delivered to the receiver.
 * Receive it with ovl_irecv_stream() (not ovl_irecv).
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG, OVL_ERR_RANK,
 *         OVL_ERR_TAG, OVL_ERR_NOMEM, OVL_ERR_MPI, OVL_ERR_IN_CALLBACK
 *         (from inside a marshal function)
 */
OVL_NODISCARD int ovl_isend_stream(int dest, int tag, ovl_marshal_fn fn, void *arg,
                                   ovl_request_t *req);

/**
 * Receive a stream message: @p fn reads values with ovl_stream_read*() as
 * fragments arrive, not after the whole message. @p source may be
 * OVL_ANY_SOURCE and @p tag OVL_ANY_TAG. If @p fn returns before reading
 * everything, the rest is received and discarded (status.bytes counts the
 * whole message). The request completes when @p fn has returned and the
 * message has ended. @return as ovl_isend_stream.
 */
OVL_NODISCARD int ovl_irecv_stream(int source, int tag, ovl_marshal_fn fn, void *arg,
                                   ovl_request_t *req);

/**
 * Append @p bytes from @p data to the stream (marshal functions only).
 * @return OVL_SUCCESS, OVL_ERR_ARG (NULL data with bytes > 0, a receive
 *         stream), OVL_ERR_MPI, OVL_ERR_CANCELLED (ovl is finalising)
 */
OVL_NODISCARD int ovl_stream_write(ovl_stream_t stream, const void *data, size_t bytes);

/**
 * Read exactly @p bytes from the stream into @p data (unmarshal functions
 * only), suspending until they have arrived.
 * @return OVL_SUCCESS; OVL_ERR_EOF if the message ends first (the bytes that
 *         were there are consumed); OVL_ERR_ARG; OVL_ERR_MPI; OVL_ERR_CANCELLED
 */
OVL_NODISCARD int ovl_stream_read(ovl_stream_t stream, void *data, size_t bytes);

/** Bytes written to / read from the stream so far. Never fails; 0 for NULL. */
size_t ovl_stream_tell(ovl_stream_t stream);

/* Typed helpers (native representation; ovl does not convert byte order).
 * Same results and errors as ovl_stream_write/read of sizeof(type) bytes, but
 * inline: a value that fits in the current fragment costs a bounds check and
 * a copy (about 1 ns), the call is made only at a fragment's end or on error.
 * A send error that happens while a fragment fills is returned by the write
 * that completes that fragment, and by the request. */
#define OVL_STREAM_TYPED(name, type)                                                \
    OVL_NODISCARD static inline int ovl_stream_write_##name(ovl_stream_t s, type v) \
    {                                                                               \
        if (s && (size_t)(s->ovl_wend_ - s->ovl_wpos_) >= sizeof v) {               \
            memcpy(s->ovl_wpos_, &v, sizeof v);                                     \
            s->ovl_wpos_ += sizeof v;                                               \
            return OVL_SUCCESS;                                                     \
        }                                                                           \
        return ovl_stream_write(s, &v, sizeof v);                                   \
    }                                                                               \
    OVL_NODISCARD static inline int ovl_stream_read_##name(ovl_stream_t s, type *v) \
    {                                                                               \
        if (s && v && (size_t)(s->ovl_rend_ - s->ovl_rpos_) >= sizeof *v) {         \
            memcpy(v, s->ovl_rpos_, sizeof *v);                                     \
            s->ovl_rpos_ += sizeof *v;                                              \
            return OVL_SUCCESS;                                                     \
        }                                                                           \
        return ovl_stream_read(s, v, sizeof *v);                                    \
    }
OVL_STREAM_TYPED(int8, int8_t)
OVL_STREAM_TYPED(int16, int16_t)
OVL_STREAM_TYPED(int32, int32_t)
OVL_STREAM_TYPED(int64, int64_t)
OVL_STREAM_TYPED(uint8, uint8_t)
OVL_STREAM_TYPED(uint16, uint16_t)
OVL_STREAM_TYPED(uint32, uint32_t)
OVL_STREAM_TYPED(uint64, uint64_t)
OVL_STREAM_TYPED(float, float)
OVL_STREAM_TYPED(double, double)
#undef OVL_STREAM_TYPED

/* ------------------------------------------------------------------------ */
/* Access monitoring and delta send/receive                                  */
/* ------------------------------------------------------------------------ */

/** The name of a monitor ("auto", "uffd", "mprotect", "explicit"); never NULL. */
const char *ovl_monitor_name(ovl_monitor_t monitor);

/**
 * Which monitor @p requested resolves to in this process, and why, e.g.
 * "uffd: userfaultfd works (...), allowed by UFFD_USER_MODE_ONLY ...": the
 * same resolver ovl_init() and every request use, so *@p chosen is what
 * they pick. Needs neither MPI nor ovl_init (the ovl-info tool calls it).
 * @p why may be NULL. Without a /proc/self/mem that writes protected pages
 * no fault monitor works: auto then gives explicit (ovl_init warns), and a
 * delta receive or ovl_get whose monitor the code did not choose completes
 * inside the call, so nothing is read before it arrives. The explicit
 * monitor is chosen in code (ovl_config_t.monitor, or a request's
 * ovl_param_t::monitor);
 * OVL_MONITOR=explicit in the environment makes ovl_init fail
 * (OVL_ERR_CONFIG).
 * @return OVL_SUCCESS; OVL_ERR_ARG (chosen NULL, unknown monitor);
 *         OVL_ERR_UNSUPPORTED (uffd requested but unavailable: *@p chosen
 *         is the fallback ovl_init takes, mprotect; @p why says why);
 *         OVL_ERR_MONITOR (uffd or mprotect requested where no fault
 *         monitor works: ovl_init, or a request asking for it, fails)
 */
OVL_NODISCARD int ovl_monitor_probe(ovl_monitor_t requested, ovl_monitor_t *chosen, char *why,
                                    size_t why_len);

/**
 * Allocate @p bytes of memory for delta receives and gets, as
 * MPI_Alloc_mem does for RMA: *(void **)@p baseptr receives a page-aligned
 * block (bytes rounded up to whole pages, zero-filled; 0 gives one page).
 * ovl maps its pages a second time (a memfd), so while a fault monitor
 * guards a pending buffer in it, MPI and ovl write arriving data through
 * that second mapping: no staging copy, no /proc/self/mem write, and the
 * monitors accept it although it is shared memory. The memory behaves as
 * malloc'd memory otherwise, except that a fork() child shares it with the
 * parent. Without memfd (old kernel, seccomp) the block is private
 * anonymous memory, handled like any other buffer. Usable before
 * ovl_init() and after ovl_finalize(); thread-safe.
 * @return OVL_SUCCESS, OVL_ERR_ARG (@p baseptr NULL), OVL_ERR_NOMEM
 */
OVL_NODISCARD int ovl_alloc(size_t bytes, void *baseptr);

/**
 * Free a block from ovl_alloc() (NULL: nothing). Every transfer on it must
 * be complete: a pending delta transfer or get/put watched by a fault
 * monitor gives OVL_ERR_PENDING and the block stays; one in explicit mode
 * is not detected (freeing it then is erroneous, as with MPI_Free_mem).
 * @return OVL_SUCCESS, OVL_ERR_ARG (not from ovl_alloc, or already freed),
 *         OVL_ERR_PENDING
 */
OVL_NODISCARD int ovl_free(void *base);

/**
 * Start a delta send of @p count elements of @p datatype at @p buf to @p dest,
 * BEFORE the computation that writes the buffer. ovl sends the buffer in
 * pieces ("deltas") as the program finishes writing them, so the transfer
 * overlaps the computation that produces it. Call ovl_delta_send_end() when
 * the buffer is written, and ovl_wait() later (it implies send_end).
 *
 * With a fault-based monitor (uffd, mprotect) the program must write the
 * buffer from its first to its last byte (in order, at page granularity);
 * a write into a part already sent is caught, reported on stderr naming
 * the buffer and offset, and the request (and the receiver's, when the
 * write came before the last piece left) completes with OVL_ERR_STALE.
 * Not checked: the buffer's partial first and last pages (shared with
 * other data, never protected) and the page being written when the next
 * delta left. A message that goes in one piece (no larger than the delta
 * size, and under the MPI library's protocol switch) is not watched: it
 * is copied and sent at ovl_delta_send_end(), so nothing can be stale.
 * Nor is a send to a peer on this node that takes the plain path
 * (ovl_rma_local_t: by default where the model finds that overlap cannot
 * pay, as through shared memory): it leaves at ovl_delta_send_end().
 * Fault monitors refuse buffers on the calling thread's stack
 * (OVL_ERR_ARG). With OVL_MONITOR_EXPLICIT the program instead calls
 * ovl_delta_produced() for each range it has finished, in any order.
 *
 * @p param (NULL: defaults) takes OVL_PARAM_FIELD_MONITOR: a monitor for
 * this request only (OVL_MONITOR_AUTO: the process's OVL_MONITOR).
 *
 * The datatype must be contiguous (MPI_DOUBLE, MPI_BYTE, a contiguous
 * type, ...). The message can be received with ovl_delta_recv() or
 * ovl_irecv(). A buffer that is itself still arriving through
 * ovl_delta_recv() is forwarded piece by piece as it arrives, if it
 * starts where the receive's buffer does and is not empty (an empty
 * send, count 0, overlaps nothing and is an empty message, whatever its
 * pointer: a halo with nothing to exchange); one overlapping a pending
 * fault-monitored delta receive or ovl_get any other way is refused
 * (OVL_ERR_PENDING) until that has completed.
 *
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL pointer,
 *         negative count, non-contiguous datatype, a field_mask bit
 *         other than OVL_PARAM_FIELD_MONITOR, unknown monitor), OVL_ERR_RANK (also
 *         MPI_PROC_NULL, which delta transfers do not take, unlike
 *         ovl_isend/ovl_irecv), OVL_ERR_TAG, OVL_ERR_NOMEM, OVL_ERR_MONITOR (also: a fault
 *         monitor asked for by name that cannot work here), OVL_ERR_PENDING,
 *         OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_delta_send_begin(void *buf, int count, MPI_Datatype datatype, int dest,
                                       int tag, const ovl_param_t *param, ovl_request_t *req);

/**
 * The buffer is fully written: send what has not been sent. The request
 * remains to be waited on or freed. Without a progress thread
 * (OVL_PROGRESS=inline) it returns once the message has left, as MPI_Send
 * does, so the receiver does not wait for this rank's next ovl call; if
 * the receiver takes none of it for a while (four times the model's time
 * for one piece, at least 1 ms: it is computing, not in MPI), it returns
 * earlier and the rest leaves at the next call.
 *
 * A send that fails once part of its message has left (no memory for a
 * piece, MPI refusing one) sends no more of it: this call, the later ones
 * on the request and its wait return that error, and the receiver's
 * request (and that of a send forwarding it) completes with
 * OVL_ERR_CANCELLED and 0 bytes, its buffer's contents undefined.
 *
 * @p param (NULL: defaults) takes OVL_PARAM_FIELD_COUNT: only the first
 * ovl_param_t::count elements were produced, and the message is that long
 * (the receiver sees the real size in its status); it may not be below
 * what has already been sent.
 * @return OVL_SUCCESS, OVL_ERR_REQUEST (not a delta send, or already
 *         ended), OVL_ERR_ARG (a bad count, a field_mask bit other than
 *         OVL_PARAM_FIELD_COUNT), OVL_ERR_NOMEM, OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_delta_send_end(ovl_request_t req, const ovl_param_t *param);

/**
 * Explicit mode, sender: bytes [@p offset, @p offset + @p bytes) of the
 * buffer are final. Ranges may come in any order; ovl merges them and sends
 * a contiguous piece once it reaches the delta size. Also accepted on a
 * fault-monitored request (it then sends earlier than the faults would).
 * @return OVL_SUCCESS, OVL_ERR_ARG (range outside the buffer), OVL_ERR_STALE
 *         (the range overlaps a part already sent), OVL_ERR_REQUEST,
 *         OVL_ERR_NOMEM, OVL_ERR_MPI (the send failed: ovl_delta_send_end())
 */
OVL_NODISCARD int ovl_delta_produced(ovl_request_t req, size_t offset, size_t bytes);

/**
 * Start a delta receive of up to @p count elements into @p buf, BEFORE the
 * computation that uses them. The program may then read and write @p buf
 * at once, in any order and from any thread: with a fault-based monitor an
 * access to a part that has not arrived waits for it (page granularity;
 * data on the buffer's first and last pages that is not part of the
 * buffer is never modified, at worst an access to it waits too). No
 * ovl_wait is needed to use the data; the request completes when every
 * byte has arrived, and must still be released with ovl_wait/ovl_test/
 * ovl_request_free. Internal resources are freed at completion; a request
 * freed early keeps receiving in the background; ovl_finalize completes
 * (or cancels, if nothing was sent) what is pending.
 *
 * Receives from ovl_delta_send_begin() or ovl_isend(). The status carries
 * the real size; bytes past it keep what they held before. Fault monitors
 * refuse a buffer in shared memory (MAP_SHARED, shm, an MPI shared window):
 * OVL_ERR_MONITOR, the buffer untouched; use OVL_MONITOR_EXPLICIT there, or
 * memory from ovl_alloc(), which is also received without a copy. A
 * longer message gives OVL_ERR_TRUNCATE (the buffer then
 * holds the first @p count elements). With OVL_MONITOR_EXPLICIT, call
 * ovl_delta_need() before using a range.
 *
 * While data is pending, the buffer must not be given to a system call
 * (read, write, send, ...): the kernel does not wait and the call fails
 * with EFAULT (nothing is read or written; the data still arrives). Nor
 * to MPI directly (MPI_Send, MPI_Put, ...): MPI reads through the kernel or from another process (shared-memory copy, CMA,
 * sockets, RDMA), which does not wait either; measured with MPICH, an
 * MPI_Send of a pending buffer sent zeros for the missing pages, or hung.
 * Call ovl_delta_need() or ovl_wait() first, or send it with ovl_isend()
 * or ovl_delta_send_begin(), which forward it as it arrives.
 *
 * Under a fault monitor the buffer's partial first and last pages are
 * guarded too, with whatever else lives there. Other data on them stays
 * usable by the program, but each access to it while the receive is
 * pending faults: on x86-64 ovl's handler makes a plain load or store
 * itself (mov, movzx, movsx, vector loads and stores of xmm, ymm and zmm
 * registers, integer add, sub, and, or, xor, cmp, test, inc, dec on
 * memory; about 3.5-4 us) and a
 * memcpy or memset's part on each page; any other instruction is let
 * through one at a time (a fault and a trap, 18-27 us). ovl_stats_t counts
 * these accesses as edge_steps (edge_emulated: those ovl made), and ovl
 * reports once on stderr past 64 on one page in one transfer. ovl_isend,
 * ovl_irecv, ovl_get and ovl_put of other buffers on those pages work
 * (ovl stages them). The kernel cannot reach that data
 * (a mutex or a read() buffer there fails; so does MPI's own data there:
 * MPICH 5 between ranks of one node fails such a transfer with
 * OVL_ERR_MPI, "process_vm_readv failed (errno 14)"), and with several
 * threads, where the CPU or kernel has no protection keys (x86 PKU),
 * another thread may briefly see old bytes of the buffer on those pages
 * while one instruction is let through.
 * Give such a buffer pages of its own (ovl_alloc(), posix_memalign to the
 * page size with a whole number of pages), or, to keep a layout where it
 * shares pages with data written meanwhile, receive it with ovl_irecv()
 * or the explicit monitor (docs/PORTING.md).
 *
 * @p param (NULL: defaults) takes OVL_PARAM_FIELD_MONITOR: a monitor for
 * this request only (OVL_MONITOR_AUTO: the process's OVL_MONITOR).
 * @return as ovl_delta_send_begin() (but not OVL_ERR_PENDING)
 */
OVL_NODISCARD int ovl_delta_recv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
                                 const ovl_param_t *param, ovl_request_t *req);

/**
 * Explicit mode, receiver: wait until bytes [@p offset, @p offset + @p bytes)
 * of the buffer have arrived (also valid on fault-monitored requests). A
 * range beyond the real message size returns once the message has ended.
 * @return OVL_SUCCESS, OVL_ERR_ARG, OVL_ERR_REQUEST, OVL_ERR_IN_CALLBACK,
 *         or the receive's error
 */
OVL_NODISCARD int ovl_delta_need(ovl_request_t req, size_t offset, size_t bytes);

/** The delta size ovl uses for @p req (fixed or chosen by the model). */
OVL_NODISCARD int ovl_delta_size(ovl_request_t req, size_t *bytes);

/* ------------------------------------------------------------------------ */
/* One-sided get/put on segments                                             */
/* ------------------------------------------------------------------------ */

/** A segment: memory every rank exposes for ovl_get/ovl_put (an MPI-3 RMA
 *  window with passive-target access). OVL_SEGMENT_NULL is the null handle. */
typedef struct ovl_segment_s *ovl_segment_t;
#define OVL_SEGMENT_NULL ((ovl_segment_t)0)

/**
 * Collective over ovl's communicator: every rank allocates @p bytes (0 is
 * allowed; sizes may differ between ranks) that other ranks can read with
 * ovl_get() and write with ovl_put(). *base receives this rank's memory
 * (MPI_Win_allocate), which the program may use directly. The segment is
 * open for passive-target access from creation to ovl_segment_free().
 * A computing target stays responsive only while something calls MPI:
 * with OVL_PROGRESS=thread the progress thread polls while a segment
 * exists; with OVL_PROGRESS=inline only ovl calls on that rank do.
 * At most 256 segments live at once, each rank's part at most 2^46 bytes.
 * An error on one rank (a bad argument, no memory, the limit, a failed
 * MPI call on its part) is an error on every rank: the ranks agree before
 * each collective step, so none waits for the others forever, and a rank
 * whose own arguments were fine returns the failing rank's code, its
 * detail naming that rank. OVL_ERR_NOT_INIT and OVL_ERR_IN_CALLBACK are
 * returned at once (nothing is agreed then). *base and *seg are written
 * only on success.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL pointer, more
 *         than 2^46 bytes), OVL_ERR_NOMEM (no memory, more than 256
 *         segments), OVL_ERR_MPI, OVL_ERR_IN_CALLBACK
 */
OVL_NODISCARD int ovl_segment_create(size_t bytes, void **base, ovl_segment_t *seg);

/**
 * Collective: retire every transfer on the segment (gets in place, puts
 * complete at their targets), then free it. *seg becomes OVL_SEGMENT_NULL.
 * Segments should be freed before ovl_finalize(), which frees leftovers
 * (collectively, so every rank must have left the same ones).
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL, freed or
 *         unknown segment), OVL_ERR_MPI, OVL_ERR_IN_CALLBACK
 */
OVL_NODISCARD int ovl_segment_free(ovl_segment_t *seg);

/**
 * Start reading @p bytes at @p offset of @p rank's part of @p seg into
 * @p dst, and return at once. The program may use @p dst immediately: with
 * a fault monitor (uffd, mprotect) an access to a part that has not
 * arrived waits for the strip that holds it, and computation proceeds on
 * each strip as soon as it lands. Large transfers are split into strips by
 * the performance model (ovl_segment_hint()). Bytes of @p dst's first and
 * last pages that are not part of it are never modified (an access to them
 * may wait too). With the explicit monitor (ovl_config_t.monitor) call ovl_get_need() before using
 * a range. As with delta receives, @p dst must not be given to a system
 * call while pending, fault monitors refuse a @p dst on the calling
 * thread's stack or in shared memory (MAP_SHARED, shm, an MPI shared
 * window: OVL_ERR_MONITOR, @p dst untouched; ovl_alloc() memory is
 * accepted, and MPI writes it in place), and a continuation must not
 * touch it.
 *
 * A target on the calling rank's node (the rank itself included) is
 * different by default (ovl_rma_local_t): where MPI copies those bytes
 * with this rank's CPU (shared memory; the model measures it at
 * ovl_init), there is nothing to overlap, and the get completes inside
 * the call, unsplit and unguarded; @p dst is ready on return.
 * As in MPI, @p rank may be MPI_PROC_NULL: nothing moves, @p dst is left
 * as it is (ovl_put() too; a request completes at once).
 *
 * Consistency: the data is that of the target at some time between the
 * call and the arrival; order against remote writes with ovl_fence(),
 * ovl_barrier() or ovl_lock().
 *
 * @p param (NULL: defaults) takes no field yet: its field_mask must be 0.
 *
 * @p req may be NULL, the usual form above: no request, the program's
 * accesses are the synchronisation. Given a @p req, *req receives a request
 * that completes when the FIRST strip is in place (HUNT's explicitly
 * non-blocking form, as MPI_Rget is to MPI_Get: the program overlaps
 * already, so a split get's first strip is large, about half, and later
 * strips are still demand-driven). The first strip is the one read first:
 * it starts at @p dst, or, on a segment hinted OVL_ORDER_DOWN
 * (ovl_segment_hint()), ends at @p dst + @p bytes; the status's bytes is
 * its length, and those bytes may be used without a wait (even under the
 * explicit monitor). Complete it with ovl_wait()/ovl_test()/
 * ovl_request_free(). A target on this node reached directly (ovl_get), or
 * MPI_PROC_NULL: the request is already complete. Such a get never joins
 * a train.
 *
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL pointer, freed
 *         segment, range beyond the target's segment size, @p dst
 *         overlapping an outstanding ovl_get or ovl_put buffer, stack
 *         buffer, a field_mask bit set), OVL_ERR_RANK, OVL_ERR_NOMEM,
 *         OVL_ERR_MONITOR, OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_get(void *dst, int rank, size_t offset, size_t bytes, ovl_segment_t seg,
                          const ovl_param_t *param, ovl_request_t *req);

/**
 * Wait until bytes [@p dst, @p dst + @p bytes) of outstanding gets have
 * arrived (any monitor; needed before using them under the explicit monitor).
 * Memory that is not the destination of an outstanding get returns at once.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL with bytes > 0),
 *         OVL_ERR_IN_CALLBACK, or the transfer's error
 */
OVL_NODISCARD int ovl_get_need(const void *dst, size_t bytes);

/**
 * Start writing @p bytes from @p src to @p offset of @p rank's part of
 * @p seg, and return at once. The program may go on reading @p src; with a
 * fault monitor a write to it waits until the strip holding that page has
 * left (the bytes of @p src's partial first and last pages, and whole
 * transfers without a full page, are copied at the call). With
 * the explicit monitor the source is copied at the call. Remote
 * completion: ovl_fence(), ovl_barrier(), ovl_unlock(). A @p src that is
 * an outstanding get's destination is waited for first; one holding bytes
 * of a fault-monitored delta receive that have not arrived is refused
 * (OVL_ERR_PENDING, nothing sent: wait for them with ovl_delta_need).
 * A target on this rank's node reached directly (as for ovl_get(), the
 * default through shared memory): the bytes have left @p src when the
 * call returns, nothing is held.
 * @p param (NULL: defaults) takes no field yet: its field_mask must be 0.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG, OVL_ERR_RANK,
 *         OVL_ERR_NOMEM, OVL_ERR_MONITOR, OVL_ERR_MPI, OVL_ERR_PENDING,
 *         OVL_ERR_IN_CALLBACK (inside a callback, @p src an outstanding
 *         get's destination that would have to be waited for)
 */
OVL_NODISCARD int ovl_put(const void *src, int rank, size_t offset, size_t bytes, ovl_segment_t seg,
                          const ovl_param_t *param);

/**
 * Retire every transfer this rank started on @p seg: gets are in place,
 * puts complete at their targets and their sources writable. Local (not
 * collective). @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG,
 *         OVL_ERR_IN_CALLBACK, OVL_ERR_MPI, or a transfer's error
 */
OVL_NODISCARD int ovl_fence(ovl_segment_t seg);

/**
 * Collective over ovl's communicator: retire every transfer on every
 * segment, then synchronise, so data put before the barrier, and what
 * each rank stored into its own part of a segment before it, is visible
 * to every rank after it (HUNT 5.4). The wait keeps driving progress.
 * @return as ovl_fence()
 */
OVL_NODISCARD int ovl_barrier(void);

/**
 * Acquire the exclusive lock of @p rank's part of @p seg (one lock per rank
 * and segment, kept in the segment; other ranks' ovl_lock on it wait).
 * Transfers to @p rank are retired first. Waiting ranks are served in the
 * order they asked (a ticket lock, one MPI_Fetch_and_op when the lock is
 * free). @return OVL_SUCCESS,
 * OVL_ERR_NOT_INIT, OVL_ERR_ARG, OVL_ERR_RANK, OVL_ERR_BUSY (this rank
 * already holds it), OVL_ERR_IN_CALLBACK, OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_lock(ovl_segment_t seg, int rank);

/**
 * Retire every transfer to @p rank on @p seg (complete at the target), then
 * release the lock. @return as ovl_lock(); OVL_ERR_ARG if not held
 */
OVL_NODISCARD int ovl_unlock(ovl_segment_t seg, int rank);

/**
 * The smallest transfer the performance model splits into strips (HUNT
 * 5.1), from the link figures in force, for a target on another node if
 * there is one; SIZE_MAX if it never splits (every rank on this node,
 * reached directly: ovl_rma_local_t).
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL)
 */
OVL_NODISCARD int ovl_model_split_threshold(size_t *bytes);

/**
 * Hints for the transfers this rank starts later on @p seg (local, not
 * collective; each segment starts with the defaults). @p param takes:
 *
 * - OVL_PARAM_FIELD_DECOMP, decomposition: 0 never splits; 1 (default)
 *   lets the model choose (HUNT 5.1: geometrically growing strips above
 *   its threshold); @c decomp > 1 splits above the same threshold into
 *   @c decomp times as many equal strips (more aggressive), at most 64.
 *
 * - OVL_PARAM_FIELD_ORDER, how the program will read the destinations of
 *   gets. UP and DOWN issue the strips in that order (the part read first
 *   leaves first) and, with the mprotect monitor, turn on lazy protection
 *   (HUNT 5.2): only the first page of the next outstanding strip is
 *   guarded, and when a strip arrives every strip already there is
 *   skipped, so a sequential scan costs one protection change and at most
 *   one fault per strip. A program that then reads out of order may see
 *   bytes that have not arrived: give UP or DOWN only for sequential
 *   scans. RANDOM (default) guards every page.
 *
 * - OVL_PARAM_FIELD_PIGGYBACK, trains (HUNT 5.3): a get that joins a train
 *   is neither split nor guarded (it lands straight in its destination),
 *   and its synchronisation is piggybacked on the last watched get before
 *   it: that get's last strip is only made visible once the train has
 *   arrived. Until this field is set the runtime decides from the
 *   performance model: a get smaller than the model's piggyback threshold
 *   (below it, guarding costs more than the transfer's wire time could
 *   hide), started while a watched get is outstanding, joins, under the
 *   explicit monitor, where ovl_get_need() waits for it as for any get;
 *   under a fault monitor no get joins by default, as an unguarded
 *   destination read before the train has arrived would show old bytes.
 *   Set, a get on @p seg started while at least @c piggyback others are
 *   outstanding joins, with any monitor; the program promises to read
 *   destinations in the order the gets were started (touching the get
 *   before a train retires it), or to call ovl_get_need() first. 0 turns
 *   trains off.
 *
 * Fields not set keep their value; NULL changes nothing. Nothing changes
 * when the call fails.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL, freed or
 *         unknown segment, decomp above 64, unknown order, another
 *         field_mask bit)
 */
OVL_NODISCARD int ovl_segment_hint(ovl_segment_t seg, const ovl_param_t *param);

/* ------------------------------------------------------------------------ */
/* Communication domains                                                     */
/* ------------------------------------------------------------------------ */

/**
 * A communication domain: one instance of ovl's progress engine with its
 * own MPI communicators, matching queue and operations in flight, as an
 * OpenSHMEM context or a UPC++ persona. Threads bound to different domains
 * communicate without sharing ovl's locks or MPI's matching, so a hybrid
 * program's threads can communicate about as fast as processes do.
 *
 * Every thread starts on domain 0 (OVL_DOMAIN_DEFAULT), ovl_init's. Every
 * ovl call a thread makes acts on its current domain (ovl_domain_bind());
 * a call on a request, stream or delta handle acts on the domain the
 * handle was created in, from whichever thread makes it.
 *
 * What crosses domains:
 *  - two-sided messages (ovl_isend/ovl_irecv), streams and delta transfers
 *    match only within the same domain index on both ranks: a message sent
 *    from domain 2 is received by a receive posted on domain 2 of the
 *    peer, never by one on another domain (as MPI messages on two
 *    communicators);
 *  - segments are reachable from every domain: each domain has a window of
 *    its own over every segment's memory (made by ovl_segment_create for
 *    the domains that exist, by ovl_domains_create for the segments that
 *    exist: one MPI window per domain and segment, so MPI may run out of
 *    them, OVL_ERR_MPI, before domains or segments run out). ovl_get and
 *    ovl_put go through the caller's domain's window and are driven by its
 *    engine; ovl_fence(seg) retires the calling domain's transfers on seg
 *    only; ovl_barrier, ovl_segment_free and ovl_lock/ovl_unlock (for the
 *    rank locked) retire every domain's. ovl_get_need waits for a get
 *    whichever domain issued it. Locks (ovl_lock) are global, a rank's,
 *    not a thread's: their atomics always go through domain 0's window,
 *    the only one in which MPI makes them atomic;
 *  - the progress thread (OVL_PROGRESS=thread) drives domain 0 only: a
 *    domain of its own is driven by the ovl calls of the threads using it.
 *
 * How a domain maps onto MPI is probed when it is created: where the MPI
 * library has MPIX streams (MPICH 4.1 and later) and the domain is
 * serialized or private, its communicators are on an MPIX stream of its
 * own (its own virtual communication interface, when MPICH was started
 * with MPIR_CVAR_CH4_RESERVE_VCIS at least the number of such domains);
 * otherwise they are duplicates of ovl's communicator. ovl_stats_t says
 * how many domains got a stream, OVL_VERBOSE=2 why one did not.
 */
typedef int ovl_domain_t;
#define OVL_DOMAIN_DEFAULT 0 /**< domain 0, every thread's until it binds another */
/** How many domains may exist at once, domain 0 included. */
#define OVL_DOMAINS_MAX 1024

/** Who may use a domain (as OpenSHMEM's context options). */
typedef enum {
    OVL_DOMAIN_SHARED = 0,     /**< any threads, concurrently */
    OVL_DOMAIN_SERIALIZED = 1, /**< any thread, but one call at a time (the program ensures it) */
    OVL_DOMAIN_PRIVATE = 2     /**< one thread at a time: the thread bound to it owns it until it
                                    binds another domain; a call by any other thread on it or on
                                    its requests is OVL_ERR_THREAD. Its owner takes none of ovl's
                                    locks on it (ovl_barrier, ovl_lock, ovl_segment_free, a fault's
                                    wait and ovl_finalize, which drive every domain, wait for the
                                    owner to leave ovl's code instead); MPI's own locks remain */
} ovl_domain_mode_t;

/**
 * Create @p n domains (collective over ovl's communicator: every rank
 * passes the same @p n and @p mode; a failure on one rank fails the call
 * on all, nothing created). Their indices, the same on every rank, go to
 * @p out[0..n-1]. Needs MPI_THREAD_MULTIPLE unless @p n is 0.
 * OVL_DOMAINS=n (ovl_config_t::threads.domains) creates domains 1..n-1 as
 * shared ones at ovl_init, for OpenMP codes (thread t binds domain t).
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_IN_CALLBACK, OVL_ERR_ARG
 *         (n negative, out NULL, unknown mode, n or mode differing between
 *         ranks, more than OVL_DOMAINS_MAX in all), OVL_ERR_THREAD (MPI
 *         below MPI_THREAD_MULTIPLE), OVL_ERR_NOMEM, OVL_ERR_MPI (MPI ran
 *         out of communicators: the domains created so far stay usable)
 */
OVL_NODISCARD int ovl_domains_create(int n, int mode, ovl_domain_t out[]);

/**
 * Make @p d the calling thread's current domain. Binding a private domain
 * no thread owns makes the calling thread its owner; binding another
 * domain afterwards gives it up.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (no such domain),
 *         OVL_ERR_THREAD (a private domain another thread owns),
 *         OVL_ERR_IN_CALLBACK (binding another domain from a continuation or
 *         a marshal coroutine run by a private domain's owner)
 */
OVL_NODISCARD int ovl_domain_bind(ovl_domain_t d);

/** The calling thread's current domain. @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG */
OVL_NODISCARD int ovl_domain_current(ovl_domain_t *d);

/**
 * Free @p n domains (collective, same list on every rank). Refused on
 * every rank, nothing freed, with OVL_ERR_PENDING if any rank has work
 * in flight on one of them (operations, posted receives, or messages that
 * arrived on it and were never received). Threads bound to a freed domain
 * are back on domain 0. Any thread may free a domain, a private one
 * included, once no thread uses it any more. Domain 0 cannot be freed;
 * ovl_finalize frees the others after draining them as it drains domain 0.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_IN_CALLBACK, OVL_ERR_ARG
 *         (NULL, domain 0, no such domain, a domain twice, lists differing
 *         between ranks), OVL_ERR_PENDING, OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_domains_free(int n, ovl_domain_t doms[]);

/* ------------------------------------------------------------------------ */
/* Active messages                                                           */
/* ------------------------------------------------------------------------ */

/**
 * Active messages: a message that runs a function (its handler) at the
 * target with the payload, and may send a reply back (as GASNet's or
 * UPC++'s RPCs). Handlers run on domain 0 only, one at a time, on the
 * thread driving domain 0's progress (the progress thread, or a thread in
 * an ovl call on domain 0); a thread bound to another domain also serves
 * domain 0 every (OVL_AM_POLL_MASK + 1) x (domains - 1)-th time it drives
 * its own (docs/ENV.md). A handler must not block: ovl_wait, ovl_test's
 * blocking relatives and every collective return OVL_ERR_IN_CALLBACK
 * there; it may post operations (ovl_isend, ovl_am_request, ...) and reply
 * once (ovl_am_reply). Payloads up to OVL_AM_EAGER_MAX bytes travel in one
 * message with the header; larger ones as the header and a bulk transfer.
 */
typedef struct ovl_am_token_s *ovl_am_token_t;
/** A handler: @p buf holds @p bytes of payload, valid until it returns. */
typedef void (*ovl_am_fn)(ovl_am_token_t token, const void *buf, size_t bytes, void *arg);
#define OVL_AM_MAX       256  /**< handler ids are 0 .. OVL_AM_MAX-1 */
#define OVL_AM_EAGER_MAX 8192 /**< payload bytes sent with the header; also the largest reply */

/**
 * Register @p fn (with @p arg) as this rank's handler for @p id; NULL
 * removes it. Local; register before the peers send (a barrier after the
 * registrations is the usual way).
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (id out of range)
 */
OVL_NODISCARD int ovl_am_register(int id, ovl_am_fn fn, void *arg);

/**
 * Run handler @p id on @p rank with @p bytes of @p buf. @p req completes
 * when the handler has run there (status.error OVL_SUCCESS), or when the
 * target had no handler for @p id (status.error OVL_ERR_ARG): never
 * silently. A reply the handler sends is dropped (ovl_am_call keeps it).
 * Payloads up to OVL_AM_EAGER_MAX are copied, so @p buf may be reused at
 * once; a larger one is sent from @p buf, which must stay untouched until
 * @p req completes. Rank may be this rank's own.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (id out of range, NULL
 *         buf with bytes > 0, NULL req), OVL_ERR_RANK, OVL_ERR_NOMEM,
 *         OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_am_request(int rank, int id, const void *buf, size_t bytes,
                                 ovl_request_t *req);

/**
 * The request/reply form: as ovl_am_request, and the handler's reply
 * (ovl_am_reply) lands in @p reply (at most @p reply_cap bytes);
 * status.bytes says its size (0 if the handler did not reply), a longer
 * reply completes with OVL_ERR_TRUNCATE.
 * @return as ovl_am_request; OVL_ERR_ARG also for a NULL reply with
 *         reply_cap > 0
 */
OVL_NODISCARD int ovl_am_call(int rank, int id, const void *buf, size_t bytes, void *reply,
                              size_t reply_cap, ovl_request_t *req);

/**
 * Inside a handler: reply to its request with @p bytes of @p buf (at most
 * OVL_AM_EAGER_MAX, copied). At most once per handler run.
 * @return OVL_SUCCESS, OVL_ERR_ARG (NULL or stale token, a second reply,
 *         bytes above OVL_AM_EAGER_MAX, NULL buf with bytes > 0),
 *         OVL_ERR_NOMEM, OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_am_reply(ovl_am_token_t token, const void *buf, size_t bytes);

/** Inside a handler: the rank that sent its message. @return OVL_SUCCESS, OVL_ERR_ARG */
OVL_NODISCARD int ovl_am_source(ovl_am_token_t token, int *rank);

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */
/* ------------------------------------------------------------------------ */

/**
 * Counters of the calling process since ovl_init. New counters are only
 * ever appended, so a program built against an older ovl.h keeps working
 * with a newer library and the other way round: ovl_stats_get() takes the
 * size of the caller's struct.
 */
typedef struct {
    uint64_t polls;              /**< progress polls (MPI_Testsome calls) */
    uint64_t thread_wakeups;     /**< times the progress thread woke up */
    uint64_t completions;        /**< MPI requests completed by the engine */
    uint64_t callbacks;          /**< continuations run */
    uint64_t fragments_sent;     /**< stream fragments sent (in stream_messages messages) */
    uint64_t fragments_received; /**< stream fragments received */
    uint64_t coroutine_switches;
    uint64_t faults;          /**< access faults handled by the monitor */
    uint64_t fault_waits;     /**< faults that had to wait for data */
    uint64_t deltas_sent;     /**< delta pieces sent */
    uint64_t deltas_received; /**< delta pieces received */
    uint64_t rma_transfers;   /**< ovl_get/ovl_put calls */
    uint64_t rma_strips;      /**< strips they were split into (= transfers: none split) */
    uint64_t rma_split;       /**< transfers split into more than one strip */
    uint64_t rma_bytes;       /**< bytes got and put */
    uint64_t rma_waits;       /**< ovl_get_need/fence/barrier/lock calls that had to wait */
    double rma_wait_us;       /**< time spent in those waits, microseconds */
    uint64_t
        stream_messages; /**< MPI messages the fragments sent went in (a stream sent whole: one) */
    uint64_t edge_steps; /**< faults that were the program's accesses to other data on a
                                pending buffer's partial first or last page (made by ovl, see
                                edge_emulated, or let through one instruction at a time) */
    uint64_t edge_bounces; /**< ovl's own copies from such pages, made through /proc/self/mem so
                                they never fault */
    uint64_t domains;      /**< communication domains that exist now, domain 0 included */
    uint64_t
        domains_on_streams; /**< of those, the ones whose communicators are on an MPIX stream of their own */
    uint64_t am_handled;    /**< active-message handlers run on this rank */
    uint64_t edge_emulated; /**< of edge_steps, the accesses ovl made itself through
                                 /proc/self/mem (x86-64: plain loads and stores, vector
                                 ones included, integer operations on memory, string moves),
                                 one fault each and the page kept guarded */
} ovl_stats_t;

/**
 * Copy the counters into @p stats, a struct of @p size bytes: pass
 * sizeof(ovl_stats_t) as the program's ovl.h declares it,
 *
 *     ovl_stats_t st;
 *     ovl_stats_get(&st, sizeof st);
 *
 * ovl fills the counters that fit in @p size bytes; those the library
 * does not know (a program built against a newer ovl.h) are set to 0.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL, @p size 0)
 */
OVL_NODISCARD int ovl_stats_get(ovl_stats_t *stats, size_t size);

/* ------------------------------------------------------------------------ */
/* Access descriptors (LMAD)                                                 */
/* ------------------------------------------------------------------------ */

/*
 * A linear memory access descriptor (LMAD) describes the bytes a loop
 * nest's reference touches in one buffer: a base, an element of contiguous
 * bytes, and per dimension a stride and a count. The loop-nest planner
 * analyses references through these calls; a program can use them to
 * reason about its own layouts, or to turn an MPI datatype into runs and
 * back.
 *
 * Every call of this section is a pure function of its arguments: none
 * needs ovl_init() (they work before it and after ovl_finalize()), none
 * communicates, none keeps state, and any thread may call them at once.
 * The datatype calls (ovl_lmad_from_datatype(), ovl_lmad_to_datatype())
 * need MPI initialised, for MPI's datatype calls only. Errors are recorded
 * as every call's are (ovl_error_detail(), OVL_ERRORS).
 */

/** Most dimensions an LMAD has. */
#define OVL_LMAD_MAX_DIMS 8

/** One dimension of an LMAD. */
typedef struct {
    int64_t stride; /**< bytes from one point to the next (any sign; 0 repeats a point) */
    int64_t count;  /**< points, at least 1 */
    int depth;      /**< depth of the loop that drives it (0: the outermost), -1: none or
                         unknown */
} ovl_lmad_dim_t;

/**
 * A linear memory access descriptor: the byte ranges
 *
 *     base + sum_i k_i * dim[i].stride + [0, elem)   for 0 <= k_i < dim[i].count,
 *
 * offsets relative to the start of a buffer (base and strides may be
 * negative). The points are ordered with dim[0] varying fastest, each
 * dimension from k_i = 0 upwards: the order of an MPI type map, which
 * ovl_lmad_from_subarray(), ovl_lmad_from_datatype() and
 * ovl_lmad_to_datatype() keep. The ranges may overlap (a stride 0, or one
 * shorter than the block it repeats): such a byte is covered more than
 * once.
 *
 * Valid: 0 <= ndims <= OVL_LMAD_MAX_DIMS, elem >= 1, every count >= 1,
 * every depth >= -1, and every byte offset, the number of points and the
 * number of bytes covered fit in int64_t. Every call refuses an invalid
 * LMAD with OVL_ERR_ARG. Entries of dim[] beyond ndims are never read.
 */
typedef struct {
    int64_t base; /**< byte offset of the first point */
    int64_t elem; /**< contiguous bytes at each point, at least 1 */
    int ndims;    /**< dimensions in use, 0 to OVL_LMAD_MAX_DIMS */
    ovl_lmad_dim_t dim[OVL_LMAD_MAX_DIMS];
} ovl_lmad_t;

/** An LMAD reduced to runs (ovl_lmad_runs()). */
typedef struct {
    int64_t n;      /**< runs: points after coalescing */
    int64_t size;   /**< bytes of each run: the element after coalescing */
    int64_t lo;     /**< lowest byte offset covered */
    int64_t extent; /**< bytes from lo to one past the highest byte covered */
} ovl_lmad_runs_t;

/** What ovl_lmad_combine() and ovl_lmad_interleave() did. */
typedef struct {
    int combined; /**< 1: the output covers exactly the bytes of both; 0: not combined */
    int dim;      /**< the output's dimension that grew; -1: none (the element grew, the
                       references interleave, or they are the same) */
    int depth;    /**< that dimension's depth (-1 when dim is -1) */
    /** the memory distance between the two bases: points of dimension
     *  @c dim (the lookahead, in iterations of that dimension's loop, that
     *  one transfer of the output needs to serve both references), or
     *  bytes when @c dim is -1 (both within one point) */
    int64_t distance;
} ovl_lmad_combine_t;

/** Answers of ovl_lmad_overlap(). */
typedef enum {
    OVL_LMAD_DISJOINT = 0,   /**< no byte in common (certain) */
    OVL_LMAD_OVERLAP = 1,    /**< at least one byte in common (certain) */
    OVL_LMAD_MAY_OVERLAP = 2 /**< not decided: too many runs to compare (conservative) */
} ovl_lmad_overlap_t;

/**
 * The LMAD of MPI_Type_create_subarray(ndims, sizes, subsizes, starts,
 * order, t) for a type t of @p elem contiguous bytes (extent = size =
 * @p elem), used with count 1 at the start of the array: one dimension per
 * array dimension, none dropped, dim[0] the fastest-varying array
 * dimension (the last in MPI_ORDER_C, the first in MPI_ORDER_FORTRAN).
 * Depths follow the loop nest that walks the array in memory order: the
 * slowest array dimension has depth 0, dim[0] depth @p ndims - 1.
 * @return OVL_SUCCESS, OVL_ERR_ARG (a NULL pointer, @p ndims outside
 *         1..OVL_LMAD_MAX_DIMS, a size or subsize below 1, a start below 0
 *         or with start + subsize above size, an order that is neither
 *         MPI_ORDER_C nor MPI_ORDER_FORTRAN, @p elem below 1, an array
 *         whose byte offsets overflow int64_t)
 */
OVL_NODISCARD int ovl_lmad_from_subarray(int ndims, const int sizes[], const int subsizes[],
                                         const int starts[], int order, int64_t elem,
                                         ovl_lmad_t *lmad);

/**
 * The LMAD of @p count items of @p type at a buffer's start, as MPI reads
 * them (MPI_Send(buf, count, type, ...)), in the type map's order. Types
 * are taken apart with MPI_Type_get_envelope()/MPI_Type_get_contents(),
 * recursively: predefined types whose bytes are contiguous (not
 * MPI_SHORT_INT, MPI_LONG_DOUBLE_INT and other pair types with a hole),
 * contiguous, vector, hvector, subarray, resized and dup types, and
 * indexed, hindexed, indexed_block, hindexed_block and struct types of
 * exactly one block (a displacement). Each constructor adds dimensions
 * (depth -1); dimensions of one point are dropped, and neighbours that
 * tile each other in order are merged (a dimension whose stride is the
 * element's size grows the element; one whose stride is the span of the
 * next-inner one's points joins it), so the order of the bytes is kept.
 * @p type need not be committed; MPI must be initialised (ovl need not).
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT (MPI not initialised or already
 *         finalised), OVL_ERR_ARG (NULL @p lmad, MPI_DATATYPE_NULL,
 *         @p count below 1, a type of size 0, byte offsets that overflow
 *         int64_t), OVL_ERR_UNSUPPORTED (any other constructor, a block
 *         count above 1, a predefined type with a hole, more than
 *         OVL_LMAD_MAX_DIMS dimensions left after merging: the detail
 *         names which), OVL_ERR_NOMEM, OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_lmad_from_datatype(MPI_Datatype type, int count, ovl_lmad_t *lmad);

/**
 * A committed MPI datatype whose type map is @p lmad's bytes in
 * @p lmad's order: MPI_BYTE blocks of elem bytes nested in one hvector per
 * dimension (negative and zero strides as given), displaced by base with
 * a one-block hindexed, resized to the bounding box (ovl_lmad_runs(): lo,
 * extent: its lower bound and extent, set rather than left to the
 * library). Use it with count 1 at the buffer's start. The caller frees it
 * with MPI_Type_free(). MPI must be initialised. Open MPI 4.1 packs some
 * types with negative strides or overlapping blocks in another order, or
 * from other bytes, than their type map says (MPICH follows it): with
 * Open MPI keep strides positive and blocks disjoint.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT (MPI not initialised or already
 *         finalised), OVL_ERR_ARG (NULL pointer, invalid @p lmad),
 *         OVL_ERR_UNSUPPORTED (elem or a count above INT_MAX, which MPI's
 *         int arguments cannot hold), OVL_ERR_MPI; *type is written only
 *         on success
 */
OVL_NODISCARD int ovl_lmad_to_datatype(const ovl_lmad_t *lmad, MPI_Datatype *type);

/**
 * Normalise: every negative stride made positive by moving the base to
 * that dimension's last point, dimensions of one point dropped, the rest
 * sorted by increasing stride (then count, then depth). The bytes covered,
 * and how often each is, do not change; their order may. @p out may be
 * @p lmad.
 * @return OVL_SUCCESS, OVL_ERR_ARG (NULL pointer, invalid @p lmad)
 */
OVL_NODISCARD int ovl_lmad_normalize(const ovl_lmad_t *lmad, ovl_lmad_t *out);

/**
 * Normalise, then merge dimensions that tile each other exactly until none
 * do: a dimension whose stride is the element's size grows the element
 * (elem *= count); a dimension whose stride is count * stride of another
 * joins it (counts multiplied, the outer dimension's depth kept). The
 * result is sorted as ovl_lmad_normalize()'s. The bytes covered, and how
 * often each is, do not change. @p out may be @p lmad.
 * @return OVL_SUCCESS, OVL_ERR_ARG (NULL pointer, invalid @p lmad)
 */
OVL_NODISCARD int ovl_lmad_coalesce(const ovl_lmad_t *lmad, ovl_lmad_t *out);

/**
 * Reduce @p lmad to @p runs->n runs of @p runs->size contiguous bytes (its
 * coalesced form's points and element) inside the bounding box
 * [lo, lo + extent). n * size is the number of bytes covered counted with
 * their multiplicity: the number of distinct bytes when no two runs
 * overlap.
 * @return OVL_SUCCESS, OVL_ERR_ARG (NULL pointer, invalid @p lmad)
 */
OVL_NODISCARD int ovl_lmad_runs(const ovl_lmad_t *lmad, ovl_lmad_runs_t *runs);

/**
 * Combine two references of one shape whose bases differ by a multiple of
 * a stride, such as b[i][j] and b[i+1][j]: @p a and @p b must have the same
 * element and, normalised, the same dimensions (strides, counts, depths).
 * When the bases differ by m points of a dimension, with 1 <= m <= its
 * count, @p out is the normalised @p a from the lower base with m more
 * points in that dimension (the smallest such m over the dimensions; a
 * larger m would leave a gap, and is not combined), and @p how says which
 * dimension and m, the memory distance. Otherwise, when the bases differ
 * by at most the element, the element grows by the difference (distance in
 * bytes, dimension -1). @p out covers exactly the bytes of @p a and @p b.
 * @p how is always written; @p out only when they combine, and may be
 * @p a or @p b.
 * @return OVL_SUCCESS (combined or not: see @p how), OVL_ERR_ARG (NULL
 *         pointer, invalid @p a or @p b)
 */
OVL_NODISCARD int ovl_lmad_combine(const ovl_lmad_t *a, const ovl_lmad_t *b, ovl_lmad_t *out,
                                   ovl_lmad_combine_t *how);

/**
 * Combine two interleaved references of one shape, such as a[2*i] and
 * a[2*i+1] (same element and normalised dimensions as ovl_lmad_combine()
 * asks, bases d bytes apart, usually less than the smallest stride): their
 * union is @p a with one more dimension (stride d, count 2). They combine
 * when that dimension coalesces away, so the result is denser and has no
 * more dimensions than @p a coalesced: a[2*i] and a[2*i+1] become one run,
 * a[4*i] and a[4*i+2] become a[2*i]; a[10*i] and a[10*i+3] do not combine.
 * @p out, when they combine, is the coalesced union (covering exactly the
 * bytes of both) and @p how says dimension -1 and distance d bytes.
 * @p how is always written; @p out only when they combine, and may be
 * @p a or @p b.
 * @return OVL_SUCCESS (combined or not: see @p how), OVL_ERR_ARG (NULL
 *         pointer, invalid @p a or @p b)
 */
OVL_NODISCARD int ovl_lmad_interleave(const ovl_lmad_t *a, const ovl_lmad_t *b, ovl_lmad_t *out,
                                      ovl_lmad_combine_t *how);

/**
 * Whether @p a and @p b have a byte in common (*result: an
 * ovl_lmad_overlap_t). The answer is exact (OVL_LMAD_DISJOINT or
 * OVL_LMAD_OVERLAP) when
 *  - the bounding boxes are disjoint;
 *  - both, coalesced, have one dimension of the same nonzero stride (a
 *    formula);
 *  - one has at most 65536 runs after coalescing and the other's runs are
 *    ordered and disjoint (each stride, sorted, at least the span of the
 *    dimensions inside it): each run of the first is looked up in the
 *    second;
 *  - or they have at most 65536 runs together (all compared, sorted).
 * Otherwise it is OVL_LMAD_MAY_OVERLAP, which a caller refusing
 * overlapping writes must treat as an overlap.
 * @return OVL_SUCCESS, OVL_ERR_ARG (NULL pointer, invalid @p a or @p b),
 *         OVL_ERR_NOMEM (sorting the runs needs 8 bytes each)
 */
OVL_NODISCARD int ovl_lmad_overlap(const ovl_lmad_t *a, const ovl_lmad_t *b, int *result);

/* ------------------------------------------------------------------------ */
/* Loop-nest planner                                                         */
/* ------------------------------------------------------------------------ */

/*
 * A plan describes a loop nest's remote reads and writes once: the nest's
 * depths and trip counts, and per reference the segment, target rank, the
 * bytes there (an LMAD on the target's part of the segment) and the bytes
 * here (an LMAD on a local buffer); ovl_plan_read_subarray() does it in
 * one call for the common case. ovl_plan_commit() analyses it and chooses
 * how to move the bytes (ovl_plan_protocol_t), how many iterations of the
 * outermost loop one strip covers, and how many strips are in flight
 * ahead of the one the program computes on. The program then runs
 *
 *     ovl_plan_begin(plan);
 *     int64_t i0, n;
 *     while (ovl_plan_next(plan, &i0, &n) == OVL_SUCCESS && n > 0)
 *         for (int64_t i = i0; i < i0 + n; i++)
 *             ...iteration i of the outermost loop: its bytes are in place...
 *     ovl_plan_end(plan);
 *
 * or ovl_plan_run(plan, fn, arg) with a callback per strip.
 *
 * Strip-mining: every reference must be driven by the outermost loop
 * through its slowest dimension (dim[ndims - 1], depth 0, count equal to
 * that loop's trip count) on both sides, or not at all (no dimension of
 * depth 0: read whole with the first strip, written with the last).
 * Remote and local LMADs pair their bytes in order (the type map's, dim[0]
 * fastest) and cover the same number of bytes. Depths are those ovl_lmad_from_subarray() gives (the
 * slowest array dimension 0) or -1.
 *
 * The plan cache: a plan created with a key (any string) stays in the
 * process's cache until ovl_plan_free() or ovl_finalize(), and
 * ovl_plan_create() with the same key returns that plan (*found = 1)
 * instead of a new one, so a loop executed many times is analysed once.
 * The program may skip the description then, or give it again: the
 * description is compared at ovl_plan_commit(), which does nothing more
 * when it is the same (local buffer addresses may change: they are taken
 * over) and fails with OVL_ERR_ARG when the nest, a reference or the
 * commit's param differs (the committed plan stays as it was). A NULL key
 * makes a plan nobody finds again.
 *
 * A plan is used by one thread at a time, on one domain (the one in force
 * at ovl_plan_begin()). Transfers are MPI_Rget and MPI_Rput on the
 * segment's window of that domain, driven by its progress engine; the
 * target's data is that of some time between ovl_plan_begin() and the
 * strip's arrival (order against writes with ovl_barrier()). End a plan before freeing a segment
 * it reads. The local buffers are written by MPI or by ovl's copies: they
 * must not be the destination of an outstanding ovl_get.
 */

/** A loop-nest plan. OVL_PLAN_NULL is the null handle. */
typedef struct ovl_plan_s *ovl_plan_t;
#define OVL_PLAN_NULL ((ovl_plan_t)0)

/** Most loop depths of a plan, and most references. */
#define OVL_PLAN_MAX_DEPTH 8
#define OVL_PLAN_MAX_REFS  16

/** What ovl_plan_query() reports of a committed plan. */
typedef struct {
    ovl_plan_protocol_t protocol; /**< chosen (or forced) */
    int forced;                   /**< 1: the protocol came from the commit's param */
    int64_t strip;                /**< S: iterations per strip of the loop strips are cut
                                       from (depth @c level; the outermost by default) */
    int64_t nstrips;              /**< strips of one execution */
    unsigned lookahead;           /**< strips in flight ahead of the current one */
    int64_t ops;                  /**< N: MPI operations of one execution */
    int64_t bytes;                /**< bytes moved by one execution (staging excluded) */
    unsigned long analyses;       /**< times this plan was analysed (1 after a commit) */
    unsigned long runs;           /**< executions begun */
    /** predicted time of one execution's transfers per protocol, microseconds,
     *  indexed by ovl_plan_protocol_t (index 0 unused; < 0: not applicable) */
    double predicted_us[OVL_PLAN_PROTOCOLS];
    /** time one execution spent in ovl_plan_begin / _next / _end with each
     *  protocol: the median of its last 3 whole executions, the mean of
     *  fewer (the first execution not counted), microseconds; < 0: not
     *  measured */
    double measured_us[OVL_PLAN_PROTOCOLS];
    /** times the plan changed protocol because its executions took
     *  longer than predicted (ovl_plan_commit(): re-ranking) */
    unsigned reranks;
    /** computation per iteration of the loop strips are cut from (depth
     *  @c level; the outermost by default) measured in the first
     *  whole execution (time between ovl_plan_next() handing a strip out and
     *  the next call), microseconds; < 0: not yet */
    double compute_us;
    /** times the strip size was chosen again from compute_us (0 or 1) */
    unsigned replans;
    /** load estimation: the flows taken to cross this node's link at once
     *  (ranks of the node x the plan's targets on other nodes; 0: none or no
     *  load table in the performance database) and the factor the
     *  transfers' predicted time beyond latency was multiplied by (1: none) */
    int flows;
    double load_factor;
    /** read references combined with another (the paper's memory
     *  distance): a read whose bytes, on both sides, are those of another
     *  read of the same segment, rank and local buffer d outer iterations
     *  later (0 < d < trips) reads only its first d iterations, the rest
     *  arriving with the other; ovl_plan_explain() names the pairs */
    int combined;
    /** references merged into another (the paper's interleaved
     *  references): k >= 2 reads (or writes) of one segment, rank, local
     *  buffer and shape whose bases step by the same bytes on the target
     *  and here (a[2i] and a[2i+1]; the fields of an array of structures),
     *  whose union is no less regular than one of them (on the target,
     *  and on both sides in the order the points pair: coalesces and
     *  folds into no more dimensions), move as one reference: k - 1
     *  counted here; ovl_plan_explain() names the groups (its reference
     *  numbers are then the merged ones) */
    int interleaved;
    /** the depth strips are cut from (Init_Level = Sync_Level of the
     *  paper's tuple; 0 unless the commit's param allows deeper) */
    int level;
} ovl_plan_info_t;

/**
 * The plan of @p key: the cached one (*found = 1), or a new, empty one
 * entered in the cache (*found = 0). @p key NULL: a new plan, never cached.
 * @p found may be NULL. Keys are compared as strings, at most 255 bytes.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (NULL @p plan, a key
 *         longer than 255 bytes), OVL_ERR_NOMEM
 */
OVL_NODISCARD int ovl_plan_create(const char *key, ovl_plan_t *plan, int *found);

/**
 * Declare loop depth @p depth (0: the outermost) with @p trips iterations.
 * Depths are declared in order, 0 first, each once.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (unknown plan, depth
 *         out of order or beyond OVL_PLAN_MAX_DEPTH - 1, declared after a
 *         reference, @p trips below 1, a plan executing)
 */
OVL_NODISCARD int ovl_plan_loop(ovl_plan_t plan, int depth, int64_t trips);

/**
 * Add a read: the bytes @p remote describes on @p rank's part of @p seg
 * go to the bytes @p local describes at @p local_base, in order.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (unknown plan, no
 *         loop declared, NULL pointer, invalid LMAD, freed segment,
 *         @p remote outside the target's part of the segment, byte counts
 *         that differ, a dimension's depth not declared, a depth-0
 *         dimension that is not the slowest or whose count is not the
 *         outermost trip count, or on one side only, more than
 *         OVL_PLAN_MAX_REFS references, a plan executing), OVL_ERR_RANK
 */
OVL_NODISCARD int ovl_plan_read(ovl_plan_t plan, ovl_segment_t seg, int rank,
                                const ovl_lmad_t *remote, void *local_base,
                                const ovl_lmad_t *local);

/**
 * The common case in one call: read the subarray (@p ndims, @p sizes,
 * @p subsizes, @p starts, @p order as MPI_Type_create_subarray() takes
 * them, elements of @p elem bytes) of @p rank's array starting at byte
 * @p offset of its part of @p seg into a dense array of @p subsizes at
 * @p local_base. On a plan with no loop yet it also declares the nest
 * that walks the subarray in memory order: depth d has the subsize of the
 * d-th slowest dimension as trips. Otherwise the nest must match the
 * subarray's (ovl_plan_read()'s rules). No LMAD code needed.
 * @return as ovl_plan_loop() and ovl_plan_read(), and
 *         ovl_lmad_from_subarray()'s OVL_ERR_ARG cases
 */
OVL_NODISCARD int ovl_plan_read_subarray(ovl_plan_t plan, ovl_segment_t seg, int rank,
                                         size_t offset, int ndims, const int sizes[],
                                         const int subsizes[], const int starts[], int order,
                                         int64_t elem, void *local_base);

/**
 * A strided reference in one call, as ARMCI's and UPC++'s strided
 * transfers take it: the loop nest
 *
 *     for (i0 = 0; i0 < counts[0]; i0++)          // depth 0, the outermost
 *       ...
 *         for (i{n-1} = 0; ...; i{n-1}++)        // depth ndims - 1
 *           elem bytes at offset + i0 * strides[0] + ... + i{n-1} * strides[n-1]
 *
 * of @p rank's part of @p seg (strides in bytes, any sign), read into a
 * dense local array at @p local_base in loop order
 * (counts[0] x ... x counts[ndims - 1] elements of @p elem bytes). On a
 * plan with no loop yet it also declares this nest (depth d: counts[d]
 * trips); otherwise the nest must match (ovl_plan_read()'s rules). The
 * macros OVL_PLAN_READ_1D/2D/3D and OVL_PLAN_WRITE_1D/2D/3D write the
 * arrays for the common nests.
 * @return as ovl_plan_loop() and ovl_plan_read(), and OVL_ERR_ARG for
 *         NULL @p counts or @p strides, @p ndims outside 1 ..
 *         OVL_PLAN_MAX_DEPTH, a count below 1, @p elem below 1
 */
OVL_NODISCARD int ovl_plan_read_strided(ovl_plan_t plan, ovl_segment_t seg, int rank, size_t offset,
                                        int ndims, const int64_t counts[], const int64_t strides[],
                                        int64_t elem, void *local_base);

/** ovl_plan_read_strided() for a write: the dense local array goes to the
 *  strided bytes (ovl_plan_write()'s rules). @return as ovl_plan_read_strided() */
OVL_NODISCARD int ovl_plan_write_strided(ovl_plan_t plan, ovl_segment_t seg, int rank,
                                         size_t offset, int ndims, const int64_t counts[],
                                         const int64_t strides[], int64_t elem, void *local_base);

/* The common nests, without arrays or descriptors. For a row-major
 * double a[N][LD] on rank r, the column block a[0..n)[c0..c0+k) is
 *     OVL_PLAN_READ_2D(plan, seg, r, c0 * 8, 8, n, LD * 8, k, 8, panel);
 * (n rows, the outermost loop; k elements of 8 bytes, 8 apart). */
#define OVL_PLAN_READ_1D(plan, seg, rank, offset, elem, n0, s0, local)                   \
    ovl_plan_read_strided((plan), (seg), (rank), (offset), 1, (const int64_t[]){ (n0) }, \
                          (const int64_t[]){ (s0) }, (elem), (local))
#define OVL_PLAN_READ_2D(plan, seg, rank, offset, elem, n0, s0, n1, s1, local)                 \
    ovl_plan_read_strided((plan), (seg), (rank), (offset), 2, (const int64_t[]){ (n0), (n1) }, \
                          (const int64_t[]){ (s0), (s1) }, (elem), (local))
#define OVL_PLAN_READ_3D(plan, seg, rank, offset, elem, n0, s0, n1, s1, n2, s2, local) \
    ovl_plan_read_strided((plan), (seg), (rank), (offset), 3,                          \
                          (const int64_t[]){ (n0), (n1), (n2) },                       \
                          (const int64_t[]){ (s0), (s1), (s2) }, (elem), (local))
#define OVL_PLAN_WRITE_1D(plan, seg, rank, offset, elem, n0, s0, local)                   \
    ovl_plan_write_strided((plan), (seg), (rank), (offset), 1, (const int64_t[]){ (n0) }, \
                           (const int64_t[]){ (s0) }, (elem), (local))
#define OVL_PLAN_WRITE_2D(plan, seg, rank, offset, elem, n0, s0, n1, s1, local)                 \
    ovl_plan_write_strided((plan), (seg), (rank), (offset), 2, (const int64_t[]){ (n0), (n1) }, \
                           (const int64_t[]){ (s0), (s1) }, (elem), (local))
#define OVL_PLAN_WRITE_3D(plan, seg, rank, offset, elem, n0, s0, n1, s1, n2, s2, local) \
    ovl_plan_write_strided((plan), (seg), (rank), (offset), 3,                          \
                           (const int64_t[]){ (n0), (n1), (n2) },                       \
                           (const int64_t[]){ (s0), (s1), (s2) }, (elem), (local))

/**
 * Add a write: the bytes @p local describes at @p local_base go to the
 * bytes @p remote describes on @p rank's part of @p seg, in order. A
 * strip's bytes leave when the strip is final: at the ovl_plan_next()
 * after the one that handed it out, or at ovl_plan_end() (a write with no
 * depth-0 dimension leaves with the last strip); the program must not
 * change them afterwards until ovl_plan_end(), which returns once every
 * put is complete at its target. Write references of a plan that may
 * overlap on one target are refused at ovl_plan_commit(). Reads and
 * writes of the same remote bytes in one plan are not ordered.
 * @return as ovl_plan_read()
 */
OVL_NODISCARD int ovl_plan_write(ovl_plan_t plan, ovl_segment_t seg, int rank,
                                 const ovl_lmad_t *remote, void *local_base,
                                 const ovl_lmad_t *local);

/**
 * Analyse the plan and choose its protocol, strip size and lookahead (see
 * ovl_plan_explain()); for a cached plan described again, compare the
 * description instead. Each protocol's time is predicted from the
 * performance database's protocol maps (`ovl-calibrate --maps`,
 * docs/PERFDB.md) where the references' runs fall inside the measured
 * grid, else from the model's formulas. A plan whose protocol the model
 * chose is re-ranked when its executions take longer than predicted:
 * when the time of its whole executions in ovl_plan_begin(),
 * ovl_plan_next() and ovl_plan_end() (the first execution not counted;
 * from the second on, their mean, then the median of the last 3) exceeds
 * 1.25 x the prediction + 5 microseconds, the next execution tries the
 * protocol predicted best among those not tried (if predicted below the
 * best measured so far), one execution each; then the plan keeps the
 * least measured for good (ovl_plan_query(): measured_us, reranks). A
 * forced protocol is never re-ranked. The strip size (unless the param sets it) is the one
 * of least predicted time for a pipeline of the strips' transfers and the
 * computation on them, taking as much computation per iteration as
 * communication until the first whole execution measures it; then it is
 * chosen again once from the measurement (ovl_plan_query(): compute_us,
 * replans). A reference whose target is on this rank's node
 * reached directly (as for ovl_get(), the default through shared memory) moves whole, read
 * with the first strip (written with the last), and a plan of such
 * references only is one strip: MPI copies those bytes with this CPU, so
 * strips would only add operations. With a load table in the database (`ovl-calibrate --loaded`)
 * the predictions assume that every rank of this node runs the same plan:
 * the node's ranks x the plan's targets on other nodes share the link
 * (ovl_plan_query(): flows, load_factor). @p param (NULL: the model decides) takes
 * OVL_PARAM_FIELD_PROTOCOL (a protocol forced, OVL_PLAN_AUTO: the model's),
 * OVL_PARAM_FIELD_STRIP (iterations per strip of the loop strips are cut
 * from, at least 1; more than its trip count is one strip per iteration of
 * the loops above), OVL_PARAM_FIELD_LOOKAHEAD (0-64) and
 * OVL_PARAM_FIELD_LEVEL.
 *
 * Strips at inner depths (OVL_PARAM_FIELD_LEVEL, the paper's Init_Level
 * and Sync_Level): by default strips are cut from the outermost loop
 * (depth 0), so a nest whose outer loop is short (4 planes of 256 rows)
 * gets at most that many strips. With param->level L > 0 (a depth of the
 * plan) the program counts iterations of depths 0..L flattened:
 * ovl_plan_next()'s *first and *iters are positions in the order
 * i0 * trips[1] * ... * trips[L] + ... + iL (at L = 1: i0 * trips[1] + i1),
 * and the planner cuts strips from the shallowest depth l <= L whose loops
 * 0..l run at least 64 iterations between them (else from L): a strip is
 * then S iterations of depth l within one iteration of the depths above
 * it (never spanning two), S x trips[l+1] x ... x trips[L] flattened
 * iterations. Every reference that moves in strips must be driven by
 * depths 0..l through its l + 1 slowest dimensions, depth d the d+1-th
 * slowest, each with its loop's trip count, on both sides (what
 * ovl_plan_read_subarray() and ovl_plan_read_strided() describe); else a
 * shallower depth is taken (ovl_plan_explain() says why;
 * ovl_plan_query(): level). A loop-invariant reference is still read
 * with the first strip.
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (unknown plan, no
 *         loop or reference, a description that differs from the cached
 *         plan's, a bad param (a level that is not a depth of the plan, or
 *         whose iterations do not fit in int64_t), a forced protocol that cannot move these
 *         references: the detail says why, write references that overlap
 *         or may overlap on one target: ovl_lmad_overlap()), OVL_ERR_NOMEM,
 *         OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_plan_commit(ovl_plan_t plan, const ovl_param_t *param);

/**
 * Start an execution: issue the first strips (1 + lookahead). Not from a
 * continuation, marshal function or active-message handler: there the
 * plan could be neither stepped nor ended (ovl_plan_next() and
 * ovl_plan_end() block).
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (unknown plan, not
 *         committed, described again and not committed, already begun, a
 *         segment freed), OVL_ERR_IN_CALLBACK (called from one of those:
 *         nothing done, the plan as it was), OVL_ERR_NOMEM,
 *         OVL_ERR_MPI
 */
OVL_NODISCARD int ovl_plan_begin(ovl_plan_t plan);

/**
 * Hand out the next strip: the strip the program was working on (if any)
 * is done with (its writes leave), the strip @p lookahead places further is issued, and the
 * call returns when the next strip's bytes are in place: iterations
 * [*first, *first + *iters) of the outermost loop (committed with
 * OVL_PARAM_FIELD_LEVEL L > 0: of depths 0..L flattened, see
 * ovl_plan_commit()). After the last strip *iters is 0 (and stays 0 until
 * ovl_plan_end()).
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (unknown plan, NULL
 *         pointer, not begun, a segment of the plan freed, a PACK target
 *         that could not pack its strip), OVL_ERR_IN_CALLBACK (called from
 *         a continuation, an active-message handler or a marshal function,
 *         where waiting for a strip could wait for the very progress that
 *         is running: nothing done, the plan stays begun), OVL_ERR_NOMEM
 *         (a PACK write strip), OVL_ERR_MPI (a transfer failed)
 */
OVL_NODISCARD int ovl_plan_next(ovl_plan_t plan, int64_t *first, int64_t *iters);

/* The strip loop in one line: @p first and @p iters are declared by the
 * macro, @p rc (an int of the caller) holds ovl_plan_next()'s result when
 * the loop ends (OVL_SUCCESS after the last strip):
 *
 *     ovl_plan_begin(plan);
 *     OVL_PLAN_FOR_STRIPS(plan, i0, n, rc)
 *         for (int64_t i = i0; i < i0 + n; i++)
 *             ...
 *     ovl_plan_end(plan);
 */
#define OVL_PLAN_FOR_STRIPS(plan, first, iters, rc) \
    for (int64_t first = 0, iters = 0;              \
         ((rc) = ovl_plan_next((plan), &first, &iters)) == OVL_SUCCESS && iters > 0;)

/** A strip of a plan: iterations [@p first, @p first + @p iters) of the
 *  outermost loop (of depths 0..level flattened under
 *  OVL_PARAM_FIELD_LEVEL, as ovl_plan_next() counts them) are in place;
 *  return 0 to go on, anything else to stop. */
typedef int (*ovl_plan_strip_fn)(int64_t first, int64_t iters, void *arg);

/**
 * Execute the plan with a callback per strip: ovl_plan_begin(), then
 * @p fn for each strip as ovl_plan_next() hands it out, on the calling
 * thread (not inside the progress engine: @p fn may call any ovl function
 * but this plan's), then ovl_plan_end(). A non-zero return of @p fn stops
 * the execution (the strips after it are retired, not handed out).
 * Not from a continuation, marshal function or active-message handler (it
 * blocks).
 * @return OVL_SUCCESS, OVL_ERR_CANCELLED (@p fn returned non-zero: the
 *         execution was ended, the plan is ready for another), OVL_ERR_ARG
 *         (NULL @p fn), OVL_ERR_IN_CALLBACK (called from one of those:
 *         nothing done, the plan not begun), or what ovl_plan_begin(),
 *         ovl_plan_next() and ovl_plan_end() return
 */
OVL_NODISCARD int ovl_plan_run(ovl_plan_t plan, ovl_plan_strip_fn fn, void *arg);

/**
 * End the execution: the strip handed out last is final (its writes
 * leave); wait for every transfer still in flight, writes complete at
 * their targets (strips not handed out may be left partly read, and
 * their writes never leave). The plan stays committed, ready
 * for ovl_plan_begin().
 * @return OVL_SUCCESS, OVL_ERR_NOT_INIT, OVL_ERR_ARG (unknown plan, not
 *         begun, a segment of the plan freed, a PACK target that could not
 *         pack a strip), OVL_ERR_IN_CALLBACK (called from a continuation,
 *         an active-message handler or a marshal function, as for
 *         ovl_plan_next(): nothing done, the plan stays begun),
 *         OVL_ERR_NOMEM (a PACK write strip), OVL_ERR_MPI (a transfer
 *         failed)
 */
OVL_NODISCARD int ovl_plan_end(ovl_plan_t plan);

/**
 * Print the plan to @p out: the nest, each reference (rank, bytes, runs,
 * bounding box), the plan tuple (Type, Comm_Args, N, S, B_Issue,
 * Init_Level, Sync_Level, B_Sync), and the predicted time of every
 * protocol with the reason it was chosen or left.
 * @return OVL_SUCCESS, OVL_ERR_ARG (unknown plan, NULL @p out, not
 *         committed)
 */
OVL_NODISCARD int ovl_plan_explain(ovl_plan_t plan, FILE *out);

/**
 * What ovl_plan_commit() chose (ovl_plan_info_t).
 * @return OVL_SUCCESS, OVL_ERR_ARG (unknown plan, NULL @p info, not
 *         committed)
 */
OVL_NODISCARD int ovl_plan_query(ovl_plan_t plan, ovl_plan_info_t *info);

/**
 * Remove the plan from the cache and free it; *plan becomes OVL_PLAN_NULL.
 * @return OVL_SUCCESS, OVL_ERR_ARG (NULL, unknown plan), OVL_ERR_PENDING
 *         (begun and not ended: nothing freed, ovl_plan_end() first)
 */
OVL_NODISCARD int ovl_plan_free(ovl_plan_t *plan);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* OVL_H */
