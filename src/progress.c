/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The progress engine: the one place where ovl polls MPI. It keeps every MPI
 * request ovl has in flight (its own and those handed over with
 * ovl_continue_mpi), tests them together with MPI_Testsome, runs each
 * completed request's handler, then the continuations that were deferred
 * and the marshal coroutines that became ready.
 *
 * Exactly one thread drives at a time (the `drive` mutex, taken with
 * trylock, so a thread that finds another driving simply goes on; a
 * private domain's gate stands for it and for the engine lock). Progress
 * happens inside ovl calls and, with OVL_PROGRESS=thread, in a background
 * thread whose policy is made for machines where the application computes on
 * every core:
 *   - no work in flight: sleep on a condition variable (no CPU at all);
 *   - work in flight: poll, then sleep until the time sched.c's rule
 *     gives: the earliest max(predicted completion, now + lateness budget)
 *     over what is in flight (the budgets are listed there). A sleep that does
 *     not come from a predicted completion starts at the usual pace and
 *     doubles while polls find nothing, up to what the rule allows; timer
 *     slack is set to 1 us so the kernel honours short sleeps. A ramp from
 *     1 us made about eight wake-ups in the first quarter millisecond after
 *     every message, each preempting the computation;
 *   - work is posted in one way, ovl__engine_post, which wakes the thread
 *     by the same rule: unless it polls before the work's budget runs out
 *     anyway (or stands down for a spinning waiter); a wake-up that finds
 *     nothing took the poster's CPU (an ovl_get call took 23-26 instead of
 *     11-14 us on a pinned host; docs/PERFORMANCE.md, "Posting without a
 *     wake-up");
 *   - while an application thread waits in ovl__engine_spin (ovl_wait, a
 *     fault on data not yet there, finalize...), that thread drives, and the
 *     progress thread parks until the last such waiter leaves: its timed
 *     wake-ups would only find the drive lock taken, and cost the CPU the
 *     waiter and the kernel's network work run on.
 * MPI libraries do not offer a blocking wait that releases the CPU, so this
 * bounded sleep is the compromise: the cost is about one wake-up per
 * budget while messages are in flight, the added latency at most that
 * budget (docs/PERFORMANCE.md measures both). Every wake-up of the thread
 * goes through one place: a flag set under the engine lock (e->sig), and
 * the condition variable signalled when the lock is released (unlock_engine).
 */
#include "ovl_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

/* The time slice the progress thread asks for (ask_short_slice). */
#define OVL__SLICE_US 100u

struct ovl__engine {
    pthread_mutex_t lock;  /* op arrays, deferred list, ready queue, continuations */
    pthread_mutex_t drive; /* held by the thread driving progress */
    /* a private domain's: its gate stands for both locks, and in_drive
     * (under it) for holding the drive lock */
    struct ovl__dom *gate;
    int in_drive;
    MPI_Request *mreqs;
    struct ovl__op **ops;
    int n, cap;
    /* Testsome outputs and the completed batch (drive lock) */
    int *idx;
    MPI_Status *sts;
    struct ovl__op **batch;
    MPI_Status *batch_sts;
    int bcap;
    struct ovl__req **deferred;
    int ndef, capdef;
    /* deferred continuations and ready coroutines (ndef + the ready
     * queue's length), for the driver's check without the lock */
    atomic_int queued;
    struct ovl__coro *ready_head, *ready_tail;
    /* continuations waiting for their operation: ovl_continue on a request
     * not yet complete (ovl__req.cont_pending) and ovl_continue_mpi ops in
     * ops[]. While any waits, the thread sleeps at most OVL_LATENESS_US. */
    int conts;
    /* the progress thread */
    pthread_t thread;
    int thread_on;
    int stop;
    int posted;
    int grace; /* a pre-posted receive arrived: let its poster go on first */
    int idle;  /* the progress thread waits for work (no timed sleep) */
    pthread_cond_t cond;
    /* threads spinning in ovl__engine_spin, and whether the progress thread
     * stood down for them */
    atomic_int spinners, parked;
    /* the progress thread's timed poll sleep ends at this time (ovl__now_us
     * clock); 0 while it is not in one */
    double sleep_until_us;
    /* a wake-up asked for under the lock, signalled once it is released:
     * signalled under it, the woken thread (which may preempt the caller
     * on its core at once) would only block on the lock again */
    int sig;
    /* the progress thread runs: it decides its next sleep (under the lock)
     * after what it does now, so work posted meanwhile is seen */
    int awake;
    /* the progress thread's kernel id, and whether a gentle wake-up
     * (start_polls_locked) made it SCHED_BATCH */
    pid_t tid;
    int gentle;
    /* pacing: when the outgoing and incoming links are predicted to be free
     * of the sized transfers posted so far (ovl__now_us clock) */
    double out_free_us, in_free_us;
    /* MPI polls of the engine's requests so far (hs_until) */
    unsigned long polls;
    /* the progress sources registered with it (ovl__engine_add_source):
     * registered before the engine starts, read without a lock from then
     * on */
    const struct ovl__source *sources[OVL__MAX_SOURCES];
    int nsources;
    /* drives of a domain other than 0 (serve_domain0, after the drive
     * lock is released: any thread driving the domain counts) */
    atomic_ulong drives;
    /* run first in every drive (a domain on an MPIX stream: its progress) */
    void (*kick)(void *);
    void *kick_arg;
    /* the sleep rule's op summaries, grown with the ops in flight */
    struct ovl__sched_op *sched_ops;
    int sched_cap_n;
};

/* Engine 0: the process's, created by ovl_init (ovl__engine_start), with
 * the progress thread. Every function below acts on the engine it is
 * given; the entry points other files call act on the calling thread's
 * current domain's engine (domain.c), which code acting on an object of
 * another domain enters first (ovl__dom_enter). */
static struct ovl__engine engine0 = { .lock = PTHREAD_MUTEX_INITIALIZER,
                                      .drive = PTHREAD_MUTEX_INITIALIZER };

struct ovl__engine *ovl__engine0(void)
{
    return &engine0;
}

/* The calling thread's current domain's engine (domain.c). */
static struct ovl__engine *cur(void)
{
    struct ovl__engine *e = ovl__dom_cur()->eng;
    return e ? e : &engine0;
}

/* An engine for a domain other than 0: no progress thread (the threads
 * using the domain drive it in their ovl calls), and of engine 0's
 * sources those that keep state per domain (each_domain). NULL when out of
 * memory. */
struct ovl__engine *ovl__engine_new(void)
{
    struct ovl__engine *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->drive, NULL);
    for (int i = 0; i < engine0.nsources; i++)
        if (engine0.sources[i]->each_domain)
            e->sources[e->nsources++] = engine0.sources[i];
    return e;
}

void ovl__engine_set_kick(struct ovl__engine *e, void (*kick)(void *), void *arg)
{
    e->kick = kick;
    e->kick_arg = arg;
}

void ovl__engine_set_gate(struct ovl__engine *e, struct ovl__dom *d)
{
    e->gate = d;
}

static void lock_engine(struct ovl__engine *e)
{
    if (e->gate)
        ovl__gate_enter(e->gate);
    else
        pthread_mutex_lock(&e->lock);
}

/* The drive lock: 0 if another thread holds it (or this one, driving). */
static int drive_try(struct ovl__engine *e)
{
    if (!e->gate)
        return pthread_mutex_trylock(&e->drive) == 0;
    if (!ovl__gate_try(e->gate))
        return 0;
    if (e->in_drive) {
        ovl__gate_exit(e->gate);
        return 0;
    }
    e->in_drive = 1;
    return 1;
}

static void drive_unlock(struct ovl__engine *e)
{
    if (!e->gate) {
        pthread_mutex_unlock(&e->drive);
        return;
    }
    e->in_drive = 0;
    ovl__gate_exit(e->gate);
}

static void free_tables(struct ovl__engine *e);

void ovl__engine_free(struct ovl__engine *e)
{
    if (!e || e == &engine0)
        return;
    free_tables(e);
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->drive);
    free(e);
}

/* ---- progress sources ----------------------------------------------------- */

int ovl__engine_add_source(const struct ovl__source *src)
{
    struct ovl__engine *e = &engine0;
    for (int i = 0; i < e->nsources; i++)
        if (e->sources[i] == src)
            return OVL_SUCCESS; /* a second ovl_init */
    if (e->nsources == OVL__MAX_SOURCES)
        return OVL_ERR_NOMEM;
    e->sources[e->nsources++] = src;
    return OVL_SUCCESS;
}

static int sources_poll(struct ovl__engine *e)
{
    int n = 0;
    for (int i = 0; i < e->nsources; i++)
        if (e->sources[i]->poll)
            n += e->sources[i]->poll();
    return n;
}

/* ovl__engine_sources_close() etc.: run that hook of every source of
 * engine @which (close: engine 0's, process-wide; the others: the current
 * domain's). */
#define SOURCES_RUN(hook, which)              \
    void ovl__engine_sources_##hook(void)     \
    {                                         \
        struct ovl__engine *e = which;        \
        for (int i = 0; i < e->nsources; i++) \
            if (e->sources[i]->hook)          \
                e->sources[i]->hook();        \
    }
SOURCES_RUN(close, &engine0)
SOURCES_RUN(cancel, cur())
SOURCES_RUN(forget, cur())

/* sources_posted() etc.: whether any source's hook of that name says yes. */
#define SOURCES_ANY(hook)                                     \
    static int sources_##hook(struct ovl__engine *e)          \
    {                                                         \
        for (int i = 0; i < e->nsources; i++)                 \
            if (e->sources[i]->hook && e->sources[i]->hook()) \
                return 1;                                     \
        return 0;                                             \
    }
SOURCES_ANY(posted)
SOURCES_ANY(urgent)
SOURCES_ANY(serving)
SOURCES_ANY(sending)
SOURCES_ANY(active)

int ovl__engine_sources_dom_new(void **state)
{
    struct ovl__engine *e = &engine0;
    for (int i = 0; i < e->nsources; i++) {
        state[i] = NULL;
        if (!e->sources[i]->each_domain || !e->sources[i]->dom_new)
            continue;
        if (!(state[i] = e->sources[i]->dom_new())) {
            ovl__engine_sources_dom_free(state);
            return OVL_ERR_NOMEM;
        }
    }
    return OVL_SUCCESS;
}

void ovl__engine_sources_dom_free(void **state)
{
    struct ovl__engine *e = &engine0;
    for (int i = 0; i < e->nsources; i++) {
        if (state[i] && e->sources[i]->dom_free)
            e->sources[i]->dom_free(state[i]);
        state[i] = NULL;
    }
}

int ovl__engine_sources_dom_attach(struct ovl__dom *const *d, int n)
{
    struct ovl__engine *e = &engine0;
    for (int i = 0; i < e->nsources; i++) {
        int rc;
        if (e->sources[i]->dom_attach && (rc = e->sources[i]->dom_attach(d, n)) != OVL_SUCCESS) {
            while (i-- > 0)
                if (e->sources[i]->dom_detach)
                    e->sources[i]->dom_detach(d, n);
            return rc;
        }
    }
    return OVL_SUCCESS;
}

void ovl__engine_sources_dom_detach(struct ovl__dom *const *d, int n)
{
    struct ovl__engine *e = &engine0;
    for (int i = e->nsources; i-- > 0;)
        if (e->sources[i]->dom_detach)
            e->sources[i]->dom_detach(d, n);
}

int ovl__engine_source_slot(const struct ovl__source *src)
{
    for (int i = 0; i < engine0.nsources; i++)
        if (engine0.sources[i] == src)
            return i;
    return -1;
}

int ovl__engine_sources_held(void)
{
    struct ovl__engine *e = cur();
    int n = 0;
    for (int i = 0; i < e->nsources; i++)
        if (e->sources[i]->held)
            n += e->sources[i]->held();
    return n;
}

int ovl__engine_sources_sending(void)
{
    return sources_sending(cur());
}

int ovl__engine_sources_active(void)
{
    return sources_active(cur());
}

void ovl__engine_lock(void)
{
    struct ovl__engine *e = cur();
    lock_engine(e);
}

static void unlock_engine(struct ovl__engine *e)
{
    int sig = e->sig;
    e->sig = 0;
    if (sig)
        e->awake = 1; /* about to run: no second wake-up needed */
    if (e->gate)
        ovl__gate_exit(e->gate);
    else
        pthread_mutex_unlock(&e->lock);
    if (sig)
        pthread_cond_signal(&e->cond);
}

void ovl__engine_unlock(void)
{
    struct ovl__engine *e = cur();
    unlock_engine(e);
}

/* engine lock held */
void ovl__engine_wake_locked(void)
{
    struct ovl__engine *e = cur();
    e->posted = 1;
    if (e->thread_on)
        e->sig = 1;
}

static void wake_for_remote_locked(struct ovl__engine *e);
static int ask_short_slice(unsigned us);

void ovl__engine_continuation_locked(struct ovl__req *r)
{
    struct ovl__engine *e = cur();
    if (!r->completed && !r->cont_pending) {
        r->cont_pending = 1;
        e->conts++;
    }
    /* the thread may be in a longer sleep than the next interval */
    wake_for_remote_locked(e);
}

int ovl__engine_continuations(void)
{
    struct ovl__engine *e = cur();
    lock_engine(e);
    int n = e->conts;
    unlock_engine(e);
    return n;
}

void ovl__engine_wake(void)
{
    struct ovl__engine *e = cur();
    lock_engine(e);
    ovl__engine_wake_locked();
    unlock_engine(e);
}

/* Predicted completion of a sized transfer posted now: the link in its
 * direction carries the transfers before it first, at the model's bandwidth.
 * 0 (unknown) for the rank itself, whose copies the model does not cover,
 * and where no progress thread paces polls by it (no clock read then). */
static double due_locked(struct ovl__engine *e, const struct ovl__op *op, size_t bytes)
{
    if (!e->thread_on || !bytes || ovl__m.bw_Bpus <= 0 || op->peer == ovl__g.rank || op->peer < 0 ||
        (op->kind != OVL__OP_SEND && op->kind != OVL__OP_RECV && op->kind != OVL__OP_FRAG))
        return 0;
    double now = ovl__now_us();
    double *link = op->kind == OVL__OP_SEND ? &e->out_free_us : &e->in_free_us;
    if (e->n == 0 || *link < now)
        *link = now;
    *link += (double)bytes / ovl__m.bw_Bpus;
    return *link;
}

/* ovl_continue_mpi requests are continuations waiting (e->conts). @d: +1
 * added, -1 done. Engine lock held. */
static void count_kind_locked(struct ovl__engine *e, const struct ovl__op *op, int d)
{
    if (op->kind == OVL__OP_USER)
        e->conts += d;
}

/* Whether the progress thread may poll @op at the patient pace now (engine
 * lock held): the op's own rule (struct ovl__op, `patient`). */
static int op_patient_locked(const struct ovl__op *op)
{
    return op->patient && op->patient(op);
}

/* Room in the engine's tables for @k more ops (engine lock held). */
static int room_locked(struct ovl__engine *e, int k)
{
    while (e->n + k > e->cap) {
        /* the engine's tables grow with the work in flight, past glibc's
         * mmap threshold: mapped, never malloc'd (ovl__page_realloc) */
        int ncap = e->cap ? 2 * e->cap : 64;
        MPI_Request *m = ovl__page_realloc(e->mreqs, (size_t)ncap * sizeof *m);
        if (m)
            e->mreqs = m;
        struct ovl__op **o = m ? ovl__page_realloc(e->ops, (size_t)ncap * sizeof *o) : NULL;
        if (!o)
            return OVL_ERR_NOMEM;
        e->ops = o;
        e->cap = ncap;
    }
    return OVL_SUCCESS;
}

/* engine lock held */
static int add_locked(struct ovl__engine *e, struct ovl__op *op, const struct ovl__post *how)
{
    if (room_locked(e, 1) != OVL_SUCCESS)
        return OVL_ERR_NOMEM;
    op->due_us = due_locked(e, op, how->bytes);
    /* below the rendezvous switch a message leaves eagerly: no handshake */
    op->hs_until = how->handshake && how->bytes >= ovl__model_rendezvous_bytes() ? e->polls + 2 : 0;
    op->slack_us = how->slack_us > 0 ? how->slack_us : 0;
    op->quiet = how->follows;
    op->patient = how->patient;
    count_kind_locked(e, op, 1);
    e->mreqs[e->n] = op->mreq;
    e->ops[e->n] = op;
    e->n++;
    return OVL_SUCCESS;
}

/* Whether the progress thread polls within @iv us without a wake-up (engine
 * lock held): it runs (awake: it decides its next sleep under this lock,
 * after what it does now, so it sees the new work), it has been signalled
 * and not yet run, it is in a timed sleep ending within @iv, or it stands
 * down for a spinning waiter, who drives every op. */
static int polls_soon_locked(struct ovl__engine *e, double iv)
{
    if (!e->thread_on)
        return 1; /* progress is the caller's own */
    if (atomic_load(&e->parked))
        return atomic_load(&e->spinners) > 0; /* a parked thread without one is woken */
    if (e->awake)
        return 1;
    return e->sleep_until_us > 0 && e->sleep_until_us <= ovl__now_us() + iv;
}

/* Wake the thread unless it polls within one interval, or before @due_us
 * (ovl__now_us clock; 0: none) if that is later (engine lock held). */
static void wake_unless_polled_by_locked(struct ovl__engine *e, double due_us)
{
    double iv = e->conts > 0 ? ovl__g.cfg.progress.lateness_us : ovl__sched_poll_us();
    double until = due_us - ovl__now_us();
    if (!polls_soon_locked(e, until > iv ? until : iv))
        ovl__engine_wake_locked();
}

/* Posted work that needs no poll at once (engine lock held): a send (an
 * eager one has left with MPI_Isend, or is written out by the kernel; a
 * rendezvous one needs the receiver's answer first), an RMA strip (a
 * round trip), a continuation on a request in flight. The thread is woken
 * only if it would not poll within one interval anyway: a wake-up takes the
 * poster's CPU on a machine whose cores all compute (a context switch, a
 * contended MPI lock, and a poll that finds nothing: about 10 us per post
 * on a pinned host, and an exchange's four posting calls took 77 us instead
 * of 19; docs/PERFORMANCE.md, "Posting without a wake-up" and "Cheaper
 * posting"). */
static void wake_for_remote_locked(struct ovl__engine *e)
{
    wake_unless_polled_by_locked(e, 0);
}

static int urgent_work_locked(struct ovl__engine *e);

void ovl__engine_hurry(void)
{
    struct ovl__engine *e = cur();
    lock_engine(e);
    if (urgent_work_locked(e))
        wake_for_remote_locked(e);
    unlock_engine(e);
}

/* Patient work was posted (engine lock held): it asks for no poll soon,
 * so the thread is woken only if it waits for work, to start its slow
 * polls, and gently: it is first made SCHED_BATCH, which the kernel never
 * lets preempt the running thread on a wake-up, so it starts at the next
 * scheduling point of its CPU (at once if the CPU is free; on a busy one
 * within a tick) and returns to normal scheduling when it runs. Woken
 * normally, it preempted the poster, and on a CPU shared by two ranks the
 * poster then waited for the other rank's time slice: a delta begin
 * (its header send, its patient receive) took about 1 ms in one call of
 * eight in the 4-rank stencil on 2 cores (docs/PERFORMANCE.md, "Gentle
 * wake-ups"). */
static void start_polls_locked(struct ovl__engine *e)
{
    if (!e->thread_on || !e->idle || e->awake)
        return;
    if (!e->gentle && e->tid > 0) {
        struct sched_param sp = { .sched_priority = 0 };
        if (sched_setscheduler(e->tid, SCHED_BATCH, &sp) == 0)
            e->gentle = 1;
    }
    e->sig = 1;
}

/* The thread, woken from its idle wait (engine lock held): back to normal
 * scheduling if a gentle wake-up made it SCHED_BATCH. */
static void after_idle_locked(struct ovl__engine *e)
{
    if (!e->gentle)
        return;
    e->gentle = 0;
    struct sched_param sp = { .sched_priority = 0 };
    if (sched_setscheduler(0, SCHED_OTHER, &sp) == 0)
        ask_short_slice(OVL__SLICE_US);
    else
        e->tid = 0; /* no more gentle wake-ups */
}

void ovl__engine_start_polls(void)
{
    struct ovl__engine *e = cur();
    lock_engine(e);
    start_polls_locked(e);
    unlock_engine(e);
}

/* Add @op as @how says, and wake the thread by the same rule as it
 * sleeps: unless it polls before the op's budget runs out anyway (from its
 * predicted completion, or from now). A wake-up it does not need takes the
 * poster's CPU on a machine whose cores all compute (a context switch, a
 * contended MPI lock, and a poll that finds nothing: about 10 us per post
 * on a pinned host; docs/PERFORMANCE.md, "Posting without a wake-up"), and
 * a stream posting its window woke it once a fragment ("Streams at the
 * pace of their window"). Patient work, and work posted gently, wakes an idle thread only,
 * gently (start_polls_locked). */
int ovl__engine_post(struct ovl__op *op, const struct ovl__post *how)
{
    return ovl__engine_post_pair(op, NULL, how);
}

int ovl__engine_post_pair(struct ovl__op *op, struct ovl__op *op2, const struct ovl__post *how)
{
    struct ovl__engine *e = cur();
    static const struct ovl__post plain;
    if (!how)
        how = &plain;
    lock_engine(e);
    int rc = room_locked(e, op2 ? 2 : 1);
    if (rc == OVL_SUCCESS)
        rc = add_locked(e, op, how);
    if (rc == OVL_SUCCESS && op2)
        rc = add_locked(e, op2, how); /* room made above: cannot fail */
    if (rc == OVL_SUCCESS) {
        if (how->patient || how->wake == OVL__WAKE_GENTLE) {
            start_polls_locked(e);
        } else if (how->wake == OVL__WAKE_GRACE) {
            e->grace = 1;
            if (e->thread_on)
                e->sig = 1;
        } else {
            wake_unless_polled_by_locked(e, op->hs_until ? 0 : op->due_us);
        }
    }
    unlock_engine(e);
    return rc;
}

int ovl__engine_count(int kind)
{
    struct ovl__engine *e = cur();
    int c = 0;
    lock_engine(e);
    for (int i = 0; i < e->n; i++)
        if (kind < 0 || e->ops[i]->kind == kind)
            c++;
    if (kind < 0) /* finalize must also run what is queued for the driver */
        c += e->ndef + (e->ready_head != NULL);
    unlock_engine(e);
    return c;
}

void ovl__engine_cancel_receives(void)
{
    struct ovl__engine *e = cur();
    lock_engine(e);
    for (int i = 0; i < e->n; i++)
        if ((e->ops[i]->kind == OVL__OP_RECV || e->ops[i]->kind == OVL__OP_USER) &&
            e->mreqs[i] != MPI_REQUEST_NULL)
            MPI_Cancel(&e->mreqs[i]);
    unlock_engine(e);
}

void ovl__engine_defer_callback(struct ovl__req *r)
{
    struct ovl__engine *e = cur();
    if (e->ndef == e->capdef) {
        int ncap = e->capdef ? 2 * e->capdef : 16;
        struct ovl__req **d = ovl__page_realloc(e->deferred, (size_t)ncap * sizeof *d);
        if (!d)
            abort(); /* cannot lose a continuation; 16+ pointers */
        e->deferred = d;
        e->capdef = ncap;
    }
    e->deferred[e->ndef++] = r;
    atomic_fetch_add_explicit(&e->queued, 1, memory_order_relaxed);
    ovl__engine_wake_locked();
}

void ovl__engine_schedule_coro(struct ovl__coro *c)
{
    struct ovl__engine *e = cur();
    *ovl__coro_next(c) = NULL;
    if (e->ready_tail)
        *ovl__coro_next(e->ready_tail) = c;
    else
        e->ready_head = c;
    e->ready_tail = c;
    atomic_fetch_add_explicit(&e->queued, 1, memory_order_relaxed);
    ovl__engine_wake_locked();
}

static void run_callback(struct ovl__req *r, ovl_continue_fn fn, void *arg)
{
    struct ovl__tls *t = ovl__tls();
    double t0 = ovl__trace_on ? ovl__now_us() : 0;
    t->in_callback++;
    fn(&r->status, arg);
    t->in_callback--;
    if (ovl__trace_on)
        ovl__trace_complete("cont", "continuation", t0, ovl__now_us() - t0, "error",
                            r->status.error, "bytes", (long long)r->status.bytes, NULL, 0);
    atomic_fetch_add_explicit(&ovl__g.st_callbacks, 1, memory_order_relaxed);
}

/* Publish completion of r: waiters may return, detached requests go. */
static void publish(struct ovl__engine *e, struct ovl__req *r)
{
    lock_engine(e);
    if (r->cont) {
        /* ovl_continue came in after the completion took the (then empty)
         * continuation: it is deferred now, and its run publishes. Setting
         * `done` here would let ovl_wait return, and release the request,
         * before the callback has run. */
        unlock_engine(e);
        return;
    }
    int detached = r->detached;
    atomic_store_explicit(&r->done, 1, memory_order_release);
    unlock_engine(e);
    if (detached)
        ovl__req_release(r);
}

/* Entered with the engine lock held; releases it. Takes the continuation
 * under the lock, so it runs exactly once, then publishes completion. */
static void run_continuation_and_publish(struct ovl__engine *e, struct ovl__req *r)
{
    ovl_continue_fn fn = r->cont;
    void *arg = r->cont_arg;
    r->cont = NULL;
    if (r->cont_pending) {
        r->cont_pending = 0;
        e->conts--;
    }
    unlock_engine(e);
    if (fn)
        run_callback(r, fn, arg);
    publish(e, r);
}

void ovl__req_complete(struct ovl__req *r)
{
    struct ovl__engine *e = cur();
    lock_engine(e);
    r->completed = 1;
    run_continuation_and_publish(e, r);
}

static int grow_batch(struct ovl__engine *e, int need)
{
    if (need <= e->bcap)
        return 0;
    int ncap = e->bcap ? e->bcap : 64;
    while (ncap < need)
        ncap *= 2;
    int *idx = ovl__page_realloc(e->idx, (size_t)ncap * sizeof *idx);
    if (idx)
        e->idx = idx;
    MPI_Status *sts = idx ? ovl__page_realloc(e->sts, (size_t)ncap * sizeof *sts) : NULL;
    if (sts)
        e->sts = sts;
    struct ovl__op **b = sts ? ovl__page_realloc(e->batch, (size_t)ncap * sizeof *b) : NULL;
    if (b)
        e->batch = b;
    MPI_Status *bs = b ? ovl__page_realloc(e->batch_sts, (size_t)ncap * sizeof *bs) : NULL;
    if (!bs)
        return -1;
    e->batch_sts = bs;
    e->bcap = ncap;
    return 0;
}

/* MPI_Testsome with the errors of completed requests returned in their
 * statuses. MPICH 4.0 raises them on MPI_COMM_WORLD's error handler (MPI-4
 * says MPI_COMM_SELF) whatever the request's communicator, so with the
 * default handler a truncated receive would abort the program instead of
 * completing with OVL_ERR_TRUNCATE: where ovl_init found that
 * (errors_on_world says on which), that handler returns around the call.
 * Elsewhere the requests' own communicators return, and MPI_COMM_WORLD,
 * which the program's other threads may be using, is left alone. Engine
 * lock held. */
static pthread_mutex_t eh_lock = PTHREAD_MUTEX_INITIALIZER;
static int eh_users[2];            /* callers inside, per communicator (eh_lock) */
static MPI_Errhandler eh_saved[2]; /* the program's handlers meanwhile */

static MPI_Comm eh_comm(int k)
{
    return k == 0 ? MPI_COMM_WORLD : MPI_COMM_SELF;
}

static int eh_bit(int k)
{
    return k == 0 ? OVL__ERRORS_ON_WORLD : OVL__ERRORS_ON_SELF;
}

void ovl__errors_return_enter(int which)
{
    /* Several domains' engines may poll at once: the first in sets a
     * communicator's handler to return, the last out puts the program's
     * back. */
    pthread_mutex_lock(&eh_lock);
    for (int k = 0; k < 2; k++) {
        if (!(which & eh_bit(k)) || eh_users[k]++ > 0)
            continue;
        eh_saved[k] = MPI_ERRHANDLER_NULL;
        MPI_Comm_get_errhandler(eh_comm(k), &eh_saved[k]);
        if (eh_saved[k] != MPI_ERRORS_RETURN)
            MPI_Comm_set_errhandler(eh_comm(k), MPI_ERRORS_RETURN);
    }
    pthread_mutex_unlock(&eh_lock);
}

void ovl__errors_return_leave(int which)
{
    pthread_mutex_lock(&eh_lock);
    for (int k = 1; k >= 0; k--) {
        if (!(which & eh_bit(k)) || --eh_users[k] > 0)
            continue;
        MPI_Errhandler *h = &eh_saved[k];
        if (*h == MPI_ERRHANDLER_NULL)
            continue;
        if (*h != MPI_ERRORS_RETURN)
            MPI_Comm_set_errhandler(eh_comm(k), *h);
        if (*h != MPI_ERRORS_ARE_FATAL && *h != MPI_ERRORS_RETURN)
            MPI_Errhandler_free(h);
        *h = MPI_ERRHANDLER_NULL;
    }
    pthread_mutex_unlock(&eh_lock);
}

static int testsome_errors_return(struct ovl__engine *e, int *outcount)
{
    if (!ovl__g.errors_on_world)
        return MPI_Testsome(e->n, e->mreqs, outcount, e->idx, e->sts);
    ovl__errors_return_enter(ovl__g.errors_on_world);
    int rc = MPI_Testsome(e->n, e->mreqs, outcount, e->idx, e->sts);
    ovl__errors_return_leave(ovl__g.errors_on_world);
    return rc;
}

/* Set while this thread drives: the fault handler reads it (initial-exec
 * TLS is async-signal-safe). */
static __thread int driving __attribute__((tls_model("initial-exec")));
/* Of the last drive's completions on this thread, those of patient ops. */
static __thread int patient_got;

int ovl__engine_driving(void)
{
    return driving;
}

/* Keep every thread of this process from driving domain 0, and so from
 * calling MPI through it, until ovl__engine_release (segment.c's serving
 * probe). */
void ovl__engine_hold(void)
{
    pthread_mutex_lock(&engine0.drive);
}

void ovl__engine_release(void)
{
    pthread_mutex_unlock(&engine0.drive);
}

int ovl__engine_thread_on(void)
{
    struct ovl__engine *e = cur();
    return e->thread_on;
}

/* The first-domain rule: a thread driving another domain also drives
 * domain 0 every (OVL_AM_POLL_MASK + 1) x (domains - 1)-th time, while
 * domain 0 has serving work (active-message handlers registered), so that
 * the more domains poll, the less often each one does. */
static int serve_domain0(struct ovl__engine *e)
{
    int others = ovl__doms_count() - 1;
    unsigned long period = ((unsigned long)ovl__g.cfg.threads.am_poll_mask + 1ul) *
                           (unsigned long)(others > 1 ? others : 1);
    if ((atomic_fetch_add_explicit(&e->drives, 1, memory_order_relaxed) + 1) % period != 0 ||
        !sources_serving(&engine0))
        return 0;
    struct ovl__dom *prev = ovl__dom_enter(ovl__dom0());
    int n = ovl__engine_drive();
    ovl__dom_leave(prev);
    return n > 0 ? n : 0;
}

/* The drive's queues: deferred continuations, then the marshal coroutines
 * made ready; how many ran. */
static int run_queued(struct ovl__engine *e)
{
    int nb = 0;
    for (;;) {
        lock_engine(e);
        if (e->ndef == 0) {
            unlock_engine(e);
            break;
        }
        atomic_fetch_sub_explicit(&e->queued, 1, memory_order_relaxed);
        run_continuation_and_publish(e, e->deferred[--e->ndef]);
        nb++;
    }
    for (;;) {
        lock_engine(e);
        struct ovl__coro *c = e->ready_head;
        if (c) {
            atomic_fetch_sub_explicit(&e->queued, 1, memory_order_relaxed);
            e->ready_head = *ovl__coro_next(c);
            if (!e->ready_head)
                e->ready_tail = NULL;
        }
        unlock_engine(e);
        if (!c)
            break;
        ovl__rt_leave(); /* marshalling outranks no computation */
        ovl__coro_run(c);
        nb++;
    }
    return nb;
}

int ovl__engine_drive(void)
{
    struct ovl__engine *e = cur();
    if (!drive_try(e))
        return -1;
    driving = 1;
    if (e->kick)
        e->kick(e->kick_arg);
    /* The sources first (matching messages, serving other ranks' RMA), so
     * that the receives they start are tested in the same pass. */
    int matched = sources_poll(e);
    int nb = 0, npat = 0;

    lock_engine(e);
    if (e->n > 0 && grow_batch(e, e->n) == 0) {
        int outcount = 0;
        int rc = testsome_errors_return(e, &outcount);
        e->polls++;
        atomic_fetch_add_explicit(&ovl__g.st_polls, 1, memory_order_relaxed);
        if (outcount != MPI_UNDEFINED && outcount > 0) {
            for (int k = 0; k < outcount; k++) {
                int i = e->idx[k];
                e->batch[nb] = e->ops[i];
                e->batch_sts[nb] = e->sts[k];
                if (rc != MPI_ERR_IN_STATUS)
                    e->batch_sts[nb].MPI_ERROR = MPI_SUCCESS;
                e->ops[i]->mreq = MPI_REQUEST_NULL;
                if (e->ops[i]->patient && e->ops[i]->patient(e->ops[i]))
                    npat++;
                count_kind_locked(e, e->ops[i], -1);
                e->ops[i] = NULL;
                nb++;
            }
            /* compact: keep the order of the survivors */
            int w = 0;
            for (int i = 0; i < e->n; i++) {
                if (e->ops[i]) {
                    e->ops[w] = e->ops[i];
                    e->mreqs[w] = e->mreqs[i];
                    w++;
                }
            }
            e->n = w;
        }
    }
    unlock_engine(e);

    for (int k = 0; k < nb; k++)
        e->batch[k]->done(e->batch[k], &e->batch_sts[k]);
    if (nb)
        atomic_fetch_add_explicit(&ovl__g.st_completions, (unsigned long long)nb,
                                  memory_order_relaxed);

    nb += matched;
    /* Deferred continuations (registered after their operation completed),
     * then marshal coroutines whose fragment arrived or whose buffer came
     * free; none queued (the usual case) costs no lock. One queued while
     * this is read is run by the next drive, as one queued just after the
     * lock was released would be. */
    if (atomic_load_explicit(&e->queued, memory_order_relaxed) > 0)
        nb += run_queued(e);

    patient_got = npat;
    driving = 0;
    drive_unlock(e);
    if (e != &engine0)
        nb += serve_domain0(e);
    return nb;
}

/* Work that must be polled at the usual pace (engine lock held): anything
 * but patient ops. */
static int urgent_work_locked(struct ovl__engine *e)
{
    if (e->ndef > 0 || e->ready_head != NULL || e->conts > 0 || sources_urgent(e) ||
        sources_serving(e))
        return 1;
    for (int i = 0; i < e->n; i++)
        if (!op_patient_locked(e->ops[i]))
            return 1;
    return 0;
}

void ovl__engine_spin(int (*done)(const void *), const void *arg)
{
    struct ovl__engine *e = cur();
    if (done(arg))
        return;
    atomic_fetch_add(&e->spinners, 1);
    while (!done(arg))
        if (ovl__engine_drive() < 0)
            ovl__relax(); /* another thread is driving */
    /* The last spinner out wakes a progress thread that stood down for it,
     * unless all that is left in flight is patient (delta pieces the
     * program's next access drives): the parked thread then comes back by
     * itself at the patient pace, and a wake-up after every wait would take
     * the CPU of the computation that follows it. */
    if (atomic_fetch_sub(&e->spinners, 1) == 1 && atomic_load(&e->parked)) {
        lock_engine(e);
        if (urgent_work_locked(e))
            ovl__engine_wake_locked();
        unlock_engine(e);
    }
}

struct mpi_wait {
    MPI_Request *req;
    int rc;
};

static int mpi_done(const void *p)
{
    struct mpi_wait *w = (struct mpi_wait *)(uintptr_t)p;
    int done = 0;
    w->rc = MPI_Test(w->req, &done, MPI_STATUS_IGNORE);
    return done || w->rc != MPI_SUCCESS;
}

int ovl__engine_spin_mpi(MPI_Request *req)
{
    struct mpi_wait w = { req, MPI_SUCCESS };
    ovl__engine_spin(mpi_done, &w);
    return w.rc;
}

static int flag_set(const void *flag)
{
    return atomic_load_explicit((const atomic_int *)flag, memory_order_acquire);
}

void ovl__engine_wait(int (*done)(const void *), const void *arg)
{
    if (!ovl__g.stats_on && !ovl__trace_on) {
        ovl__engine_spin(done, arg);
        return;
    }
    uint64_t t0 = ovl__now_ns();
    ovl__engine_spin(done, arg);
    uint64_t dt = ovl__now_ns() - t0;
    ovl__stats_wait_ns(dt);
    if (ovl__trace_on)
        ovl__trace_complete("wait", "wait", (double)t0 / 1e3, (double)dt / 1e3, NULL, 0, NULL, 0,
                            NULL, 0);
}

void ovl__engine_wait_flag(atomic_int *flag)
{
    if (!flag_set(flag))
        ovl__engine_wait(flag_set, flag);
}

static int has_work_locked(struct ovl__engine *e)
{
    return e->n > 0 || e->ndef > 0 || e->ready_head != NULL || sources_posted(e) ||
           sources_serving(e);
}

/* The engine's state as the sleep rule sees it (engine lock held); the
 * rule itself is sched.c's, a pure function. Op summaries go to a scratch
 * array that grows with the ops in flight. */

static unsigned sleep_cap_locked(struct ovl__engine *e, const struct ovl__sched_cfg *cfg,
                                 int *predicted)
{
    struct ovl__sched_in in = {
        .conts = e->conts,
        .deferred = e->ndef,
        .ready = e->ready_head != NULL,
        .posted = sources_posted(e),
        .urgent = sources_urgent(e),
        .serving = sources_serving(e),
        .n = e->n,
    };
    if (e->n > e->sched_cap_n) {
        int ncap = e->n > 2 * e->sched_cap_n ? e->n : 2 * e->sched_cap_n;
        struct ovl__sched_op *o = ovl__page_realloc(e->sched_ops, (size_t)ncap * sizeof *o);
        if (!o) { /* no summary: the usual pace */
            *predicted = 0;
            return ovl__sched_poll_us();
        }
        e->sched_ops = o;
        e->sched_cap_n = ncap;
    }
    for (int i = 0; i < e->n; i++) {
        const struct ovl__op *op = e->ops[i];
        struct ovl__sched_op *so = &e->sched_ops[i];
        *so = (struct ovl__sched_op){ .pace = OVL__PACE_SOON, .due_us = op->due_us };
        if (op_patient_locked(op))
            so->pace = OVL__PACE_PATIENT, so->due_us = 0;
        else if (op->hs_until > e->polls) /* a rendezvous in its handshake */
            so->due_us = 0;
        else if (op->kind == OVL__OP_RMA)
            so->pace = OVL__PACE_STRIP, so->due_us = 0;
        else if (op->quiet)
            so->pace = OVL__PACE_FOLLOWS, so->due_us = 0;
        else if (op->slack_us > 0 && op->due_us > 0)
            so->pace = OVL__PACE_CHECKPOINT, so->slack_us = op->slack_us;
    }
    in.ops = e->sched_ops;
    return ovl__sched_cap(&in, cfg, ovl__now_us(), predicted);
}

/* Ask the scheduler for a short time slice (EEVDF custom slice, Linux >=
 * 6.12: sched_setattr's sched_runtime for SCHED_OTHER). A task with a
 * shorter slice gets an earlier virtual deadline, so when its poll timer
 * fires it preempts a computing thread at once instead of waiting for that
 * thread's slice (milliseconds) to run out. Older kernels ignore it.
 * Returns 0 when set. System calls only (async-signal-safe). */
static int ask_short_slice(unsigned us)
{
#ifdef SYS_sched_setattr
    if (!us)
        return -1;
    struct {
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
    } a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.policy = 0; /* SCHED_OTHER */
    int saved = errno;
    errno = 0;
    a.nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (errno)
        a.nice = 0;
    errno = saved;
    a.runtime = (uint64_t)us * 1000u;
    return syscall(SYS_sched_setattr, 0, &a, 0) == 0 ? 0 : -1;
#else
    (void)us;
    return -1;
#endif
}

/* OVL_PROGRESS_PRIORITY. The progress thread takes SCHED_FIFO when it goes
 * to sleep on its poll timer, so the wake-up preempts a computing thread at
 * once, and keeps it while it polls and runs continuations. It gives it up
 * (ovl__rt_leave) before anything that may take long or wait for another
 * thread: running a marshal coroutine, waiting idle, and any spin on a lock
 * (ovl__relax): a normal thread holding that lock, preempted on this CPU,
 * would otherwise not run again while this thread spins. */
static __thread int rt_now __attribute__((tls_model("initial-exec")));

static void rt_enter(int *fifo)
{
    if (!*fifo || rt_now)
        return;
    struct sched_param sp = { .sched_priority = ovl__g.cfg.progress.priority };
    if (sched_setscheduler(0, SCHED_FIFO, &sp) == 0)
        rt_now = 1;
    else
        *fifo = 0; /* no longer allowed (RLIMIT_RTPRIO lowered) */
}

/* Normal scheduling with the short slice (or the kernel's, where it has no
 * custom slices or none is asked for); returns ask_short_slice's result. */
static int to_normal(void)
{
    int rc = ask_short_slice(OVL__SLICE_US);
    if (rc != 0 && sched_getscheduler(0) == SCHED_FIFO) {
        struct sched_param sp = { .sched_priority = 0 };
        sched_setscheduler(0, SCHED_OTHER, &sp);
    }
    return rc;
}

void ovl__rt_leave(void)
{
    if (rt_now) {
        rt_now = 0;
        to_normal();
    }
}

void ovl__relax(void)
{
    ovl__rt_leave();
    sched_yield();
}

/* CLOCK_MONOTONIC time @p us from now (the condition variable's clock). */
static void deadline_in(unsigned us, struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_nsec += (long)us * 1000L;
    while (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *progress_thread(void *arg)
{
    struct ovl__engine *e = arg;
    /* Short sleeps must stay short: the default 50 us timer slack would add
     * up to 50 us to every poll interval. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    /* Under OVL_PROGRESS_PRIORITY the thread starts under SCHED_FIFO
     * (start_realtime), and leaves it until its first timed sleep. */
    int fifo = ovl__g.cfg.progress.priority > 0;
    if (to_normal() != 0)
        ovl__info("progress thread: no custom time slice (%s)", strerror(errno));
    ovl__trace_thread_name("ovl progress");
    const unsigned poll_us = ovl__sched_poll_us(), longest_us = ovl__sched_longest_us();
    const unsigned lateness_us = ovl__g.cfg.progress.lateness_us;
    const struct ovl__sched_cfg scfg = {
        .lateness_us = lateness_us,
        .serve_us = ovl__g.cfg.progress.serve_us,
    };
    unsigned backoff = 0;

    /* Gentle wake-ups (start_polls_locked) need the way back from
     * SCHED_BATCH; where the thread cannot take it, it is always woken
     * normally. */
    struct sched_param sp0 = { .sched_priority = 0 };
    int can_batch = !fifo && sched_setscheduler(0, SCHED_BATCH, &sp0) == 0 &&
                    sched_setscheduler(0, SCHED_OTHER, &sp0) == 0;
    if (can_batch)
        to_normal();
    lock_engine(e);
    e->tid = can_batch ? (pid_t)syscall(SYS_gettid) : 0;
    e->awake = 1;
    while (!e->stop) {
        if (e->grace) {
            e->grace = 0;
            /* the shorter pace: a continuation is usually registered on
             * the receive next, and need not wake the thread again
             * (wake_for_remote_locked) */
            const unsigned grace_us = lateness_us < poll_us ? lateness_us : poll_us;
            if (!e->posted && grace_us > 0) {
                struct timespec ts;
                deadline_in(grace_us, &ts);
                e->sleep_until_us = ovl__now_us() + grace_us;
                int rc = 0;
                while (!e->stop && !e->posted && rc != ETIMEDOUT) {
                    e->awake = 0;
                    rc = pthread_cond_timedwait(&e->cond, &e->lock, &ts);
                }
                e->awake = 1;
                e->sleep_until_us = 0;
            }
        }
        e->posted = 0;
        unlock_engine(e);
        int got = ovl__engine_drive();
        lock_engine(e);
        if (e->stop)
            break;
        /* Only patient ops completed: the program drives those when it
         * needs them, so the thread keeps slowing down (a reset here kept
         * it polling every interval while pieces arrived one per poll). */
        if ((got > patient_got) || e->posted) {
            backoff = 0;
            continue;
        }
        if (!has_work_locked(e)) {
            backoff = 0;
            double t0 = ovl__trace_on ? ovl__now_us() : 0;
            ovl__rt_leave();
            e->idle = 1;
            /* awake is cleared before every wait: a wake-up for work a
             * spinner completed before this thread ran set it
             * (unlock_engine), and left set while the thread waits again
             * it told every later poster that a poll was due (a post
             * that wakes no thread then waited for the next wake-up) */
            while (!e->stop && !e->posted && !has_work_locked(e)) {
                e->awake = 0;
                pthread_cond_wait(&e->cond, &e->lock);
            }
            e->awake = 1;
            e->idle = 0;
            after_idle_locked(e);
            if (ovl__trace_on)
                ovl__trace_complete("progress", "idle", t0, ovl__now_us() - t0, NULL, 0, NULL, 0,
                                    NULL, 0);
            atomic_fetch_add_explicit(&ovl__g.st_wakeups, 1, memory_order_relaxed);
            continue;
        }
        if (atomic_load(&e->spinners) > 0) {
            /* An application thread spins in a wait and drives everything:
             * timed wake-ups would only take its CPU (and the kernel's, which
             * moves the data) to find the drive lock taken. */
            atomic_store(&e->parked, 1);
            ovl__rt_leave();
            double t0 = ovl__trace_on ? ovl__now_us() : 0;
            /* Timed: the last spinner out does not wake it for patient
             * work alone (ovl__engine_spin). */
            const unsigned park_us = longest_us;
            for (;;) {
                struct timespec ts;
                deadline_in(park_us, &ts);
                e->awake = 0;
                int rc = pthread_cond_timedwait(&e->cond, &e->lock, &ts);
                e->awake = 1;
                if (e->stop || atomic_load(&e->spinners) == 0) {
                    if (rc != ETIMEDOUT && !urgent_work_locked(e) && !e->stop)
                        continue; /* a wake-up for nothing urgent */
                    break;
                }
            }
            atomic_store(&e->parked, 0);
            if (ovl__trace_on)
                ovl__trace_complete("progress", "parked", t0, ovl__now_us() - t0, NULL, 0, NULL, 0,
                                    NULL, 0);
            atomic_fetch_add_explicit(&ovl__g.st_wakeups, 1, memory_order_relaxed);
            backoff = 0;
            continue;
        }
        int predicted;
        const unsigned cap = sleep_cap_locked(e, &scfg, &predicted);
        /* A time from a predicted completion is taken at once: the rule
         * already closes in on it, and a ramp after every poll that
         * completed something (each poll of a stream settles fragments)
         * kept a stream at two wake-ups per fragment. Any other starts at
         * the usual pace and doubles while polls find nothing, up to what
         * the rule allows (patient work alone: up to the longest sleep). */
        backoff = predicted ? cap : backoff ? backoff * 2 : poll_us;
        if (backoff > cap)
            backoff = cap;
        /* Patient work alone, and every peer's bytes move with this rank's
         * own CPU (ovl__model_all_cpu_bound): while the program keeps
         * calling ovl, its calls move that work, and a poll here would take
         * the computation's CPU for what the next call does anyway (under
         * Open MPI, a whole message's copy in slices of the computation's
         * core). The thread polls once a whole sleep passed without an ovl
         * call, so a program waiting in plain MPI still sees ovl's share of
         * the work, a sleep later. */
        const int lazy = !predicted && backoff >= longest_us && ovl__model_all_cpu_bound();
        if (lazy)
            atomic_store_explicit(&ovl__g.called, 0, memory_order_relaxed);
        struct timespec ts;
        for (;;) {
            deadline_in(backoff, &ts);
            if (!e->posted) {
                double t0 = ovl__trace_on ? ovl__now_us() : 0;
                rt_enter(&fifo);
                e->sleep_until_us = ovl__now_us() + backoff;
                e->awake = 0;
                pthread_cond_timedwait(&e->cond, &e->lock, &ts);
                e->awake = 1;
                e->sleep_until_us = 0;
                if (ovl__trace_on)
                    ovl__trace_complete("progress", "sleep", t0, ovl__now_us() - t0, "backoff_us",
                                        backoff, NULL, 0, NULL, 0);
            }
            atomic_fetch_add_explicit(&ovl__g.st_wakeups, 1, memory_order_relaxed);
            /* work the program's calls completed meanwhile: to the idle wait */
            if (!lazy || e->stop || e->posted || atomic_load(&e->spinners) > 0 ||
                !has_work_locked(e) || urgent_work_locked(e) ||
                !atomic_exchange_explicit(&ovl__g.called, 0, memory_order_relaxed))
                break;
        }
    }
    unlock_engine(e);
    return NULL;
}

/* OVL_PROGRESS_PRIORITY: start the progress thread under SCHED_FIFO, which
 * tells at once (ovl_init, ovl_config_get) whether this process may use it;
 * the thread then holds it only as rt_enter/ovl__rt_leave say. Returns 0
 * when started, -1 when not asked for or not allowed (the caller starts it
 * normally; the effective configuration then says 0). */
static int start_realtime(struct ovl__engine *e)
{
    int prio = ovl__g.cfg.progress.priority;
    if (prio <= 0)
        return -1;
    pthread_attr_t at;
    struct sched_param sp = { .sched_priority = prio };
    int rc = pthread_attr_init(&at);
    if (!rc)
        rc = pthread_attr_setinheritsched(&at, PTHREAD_EXPLICIT_SCHED);
    if (!rc)
        rc = pthread_attr_setschedpolicy(&at, SCHED_FIFO);
    if (!rc)
        rc = pthread_attr_setschedparam(&at, &sp);
    if (!rc)
        rc = pthread_create(&e->thread, &at, progress_thread, e);
    pthread_attr_destroy(&at);
    if (!rc)
        return 0;
    ovl__g.cfg.progress.priority = 0;
    if (ovl__g.cfg.report.verbose >= 2 || (ovl__g.cfg.report.verbose >= 1 && ovl__g.rank == 0))
        fprintf(stderr,
                "ovl: OVL_PROGRESS_PRIORITY=%d: SCHED_FIFO refused (%s); the progress thread runs "
                "under normal scheduling (needs CAP_SYS_NICE or RLIMIT_RTPRIO >= %d)\n",
                prio, strerror(rc), prio);
    return -1;
}

int ovl__engine_start(void)
{
    struct ovl__engine *e = &engine0;
    e->n = 0;
    e->ndef = 0;
    e->ready_head = e->ready_tail = NULL;
    atomic_store(&e->queued, 0);
    e->conts = 0;
    e->stop = 0;
    e->posted = 0;
    e->grace = 0;
    e->awake = 0;
    e->tid = 0;
    e->gentle = 0;
    e->thread_on = 0;
    if (ovl__g.cfg.progress.mode != OVL_PROGRESS_THREAD)
        return OVL_SUCCESS;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&e->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc)
        return OVL_ERR_NOMEM;
    e->thread_on = 1;
    if (start_realtime(e) != 0 && pthread_create(&e->thread, NULL, progress_thread, e) != 0) {
        e->thread_on = 0;
        pthread_cond_destroy(&e->cond);
        return OVL_ERR_NOMEM;
    }
    return OVL_SUCCESS;
}

void ovl__engine_stop(void)
{
    struct ovl__engine *e = &engine0;
    if (e->thread_on) {
        lock_engine(e);
        e->stop = 1;
        e->sig = 1;
        unlock_engine(e);
        pthread_join(e->thread, NULL);
        e->thread_on = 0;
        pthread_cond_destroy(&e->cond);
    }
    free_tables(e);
}

/* The tables an engine grew (engine 0's are kept for a later ovl_init). */
static void free_tables(struct ovl__engine *e)
{
    ovl__page_free(e->mreqs);
    ovl__page_free(e->ops);
    ovl__page_free(e->idx);
    ovl__page_free(e->sts);
    ovl__page_free(e->batch);
    ovl__page_free(e->batch_sts);
    ovl__page_free(e->deferred);
    ovl__page_free(e->sched_ops);
    e->sched_ops = NULL;
    e->sched_cap_n = 0;
    e->mreqs = NULL;
    e->ops = NULL;
    e->idx = NULL;
    e->sts = NULL;
    e->batch = NULL;
    e->batch_sts = NULL;
    e->deferred = NULL;
    e->n = e->cap = e->bcap = e->ndef = e->capdef = 0;
    atomic_store(&e->queued, 0);
}
