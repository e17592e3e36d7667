/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: progress.c and sched.c (the progress
 * engine and its pacing rule).
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_ENGINE_H
#define OVL_INTERNAL_ENGINE_H

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
/* Post @op and @op2 (NULL: none) the same way, both or neither (no room:
 * OVL_ERR_NOMEM): a pair of receives whose messages MPI matches in order. */
int ovl__engine_post_pair(struct ovl__op *op, struct ovl__op *op2, const struct ovl__post *how);
/* The progress engine: the ops in flight, the drive lock, deferred
 * continuations, ready coroutines, the progress sources and the progress
 * thread (progress.c). Engine 0 is the process's, started by ovl_init,
 * domain 0's; the ovl__engine_* entry points act on the calling thread's
 * current domain's (ovl__dom_cur, domain.c). */
struct ovl__engine;
struct ovl__dom; /* ovl_domain.h */
struct ovl__engine *ovl__engine0(void);
/* Another domain's engine (no progress thread; engine 0's sources marked
 * each_domain), NULL when out of memory; and its end (nothing in flight). */
struct ovl__engine *ovl__engine_new(void);
void ovl__engine_free(struct ovl__engine *e);
/* Run kick(arg) first in every drive of @e (before it is shared). */
void ovl__engine_set_kick(struct ovl__engine *e, void (*kick)(void *), void *arg);
/* A private domain's engine: its lock and drive lock are @d's gate
 * (ovl__gate_enter), so its owner takes no lock. */
void ovl__engine_set_gate(struct ovl__engine *e, struct ovl__dom *d);
/* Drive progress once if no other thread is; returns the number of
 * operations completed, or -1 when another thread was driving. */
int ovl__engine_drive(void);
/* Hold domain 0's drive lock: no thread of this process drives domain 0
 * (calls MPI through it) until ovl__engine_release. */
void ovl__engine_hold(void);
void ovl__engine_release(void);
/* The error handlers of the communicators in @which (OVL__ERRORS_ON_WORLD,
 * OVL__ERRORS_ON_SELF) return errors between these two calls (the first in
 * switches one, the last out puts the program's back): around MPI calls
 * that report errors there, not on a communicator of ovl's (MPICH's
 * MPI_Testsome, MPIX_Stream_create). Both calls with the same @which. */
void ovl__errors_return_enter(int which);
void ovl__errors_return_leave(int which);
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
/* ovl__engine_spin, counted as wait time in the statistics and the trace
 * (timed only when OVL_STATS or OVL_TRACE asks). */
void ovl__engine_wait(int (*done)(const void *), const void *arg);
/* ovl__engine_wait until *flag is non-zero. */
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
/* Ops in flight may now need the usual poll pace (they were patient): wake
 * the progress thread if it is in a longer sleep and any op is not
 * patient now. */
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
 * init.c registers each before ovl__engine_start; every hook may be NULL.
 * The last five are ovl_finalize's drain, each step taken over every
 * source in the order they were registered (init.c says the order). */
struct ovl__source {
    const char *name;
    int (*poll)(void);    /* each pass, before the ops are tested: the completions it made */
    int (*posted)(void);  /* receives posted that a message may match at any moment */
    int (*urgent)(void);  /* of those, the ones that need the usual pace */
    int (*serving)(void); /* MPI needs polls here for other ranks' transfers */
    void (*close)(void);  /* finalize 1: end what the program left open (collective) */
    int (*sending)(void); /* finalize 2: its messages not yet gone from this rank */
    int (*active)(void);  /* finalize 3: anything of it in flight, receives included */
    void (*cancel)(void); /* finalize 4: receives that can no longer match: cancel */
    void (*forget)(void); /* finalize 5: drop what is left, ready for another ovl_init */
    /* its state is per domain (it acts on the current domain's): every
     * domain's engine runs it, not engine 0's alone. Domain 0's state is
     * the source's own; for each other domain, dom_new makes one (NULL:
     * out of memory) and dom_free ends it (ovl__dom_state finds it) */
    int each_domain;
    void *(*dom_new)(void);
    void (*dom_free)(void *state);
    /* messages that arrived on the current domain and no receive took
     * (ovl_domains_free) */
    int (*held)(void);
    /* collective, every rank for the same domains in the same order:
     * attach gives @n new domains what the source keeps per domain across
     * ranks (an ovl error code, agreed on every rank; on failure nothing
     * is left attached); detach takes it away before they are freed */
    int (*dom_attach)(struct ovl__dom *const *d, int n);
    void (*dom_detach)(struct ovl__dom *const *d, int n);
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
/* CPUs a rank may count as its own: the @affinity CPUs it may run on, but
 * no more than its share of the node's @online CPUs among its @node_ranks
 * ranks (unbound ranks all may run everywhere); either figure unknown
 * (0 or less): the other. At least 1. */
int ovl__sched_cpus_per_rank(int affinity, long online, int node_ranks);

/* OVL_ERR_NOMEM past OVL__MAX_SOURCES. */
#define OVL__MAX_SOURCES 8
int ovl__engine_add_source(const struct ovl__source *src);
/* ovl_finalize's steps over every source (struct ovl__source): run each
 * one's close (engine 0's sources), cancel or forget hook (the current
 * domain's engine's); whether any one's sending or active hook says yes
 * (the current domain's engine's). */
void ovl__engine_sources_close(void);
int ovl__engine_sources_sending(void);
int ovl__engine_sources_active(void);
void ovl__engine_sources_cancel(void);
void ovl__engine_sources_forget(void);
/* Per-domain source state (domain.c): make every each_domain source's
 * state for a new domain in @state[slot] (0, or OVL_ERR_NOMEM with
 * nothing left made); end them; a source's slot (-1: not registered). */
int ovl__engine_sources_dom_new(void **state);
void ovl__engine_sources_dom_free(void **state);
int ovl__engine_source_slot(const struct ovl__source *src);
/* Every source's dom_attach (collective; on failure the sources attached
 * before are detached) and dom_detach, for @n domains. */
int ovl__engine_sources_dom_attach(struct ovl__dom *const *d, int n);
void ovl__engine_sources_dom_detach(struct ovl__dom *const *d, int n);
/* The current domain's sources: messages held (their held hooks). */
int ovl__engine_sources_held(void);
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

#endif /* OVL_INTERNAL_ENGINE_H */
