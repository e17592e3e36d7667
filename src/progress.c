/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The progress engine: the one place where ovl polls MPI. It keeps every MPI
 * request ovl has in flight (its own and those handed over with
 * ovl_continue_mpi), tests them together with MPI_Testsome, runs each
 * completed request's handler, then the continuations that were deferred
 * and the marshal coroutines that became ready.
 *
 * Exactly one thread drives at a time (the `drive` mutex, taken with
 * trylock, so a thread that finds another driving simply goes on). Progress
 * happens inside ovl calls and, with OVL_PROGRESS=thread, in a background
 * thread whose policy is made for machines where the application computes on
 * every core:
 *   - no work in flight: sleep on a condition variable (no CPU at all);
 *   - work in flight: poll; after a poll that completed something keep
 *     polling for OVL_SPIN_US, then sleep between polls, first for
 *     OVL_POLL_MIN_US, doubling up to OVL_POLL_MAX_US (by default both are
 *     the same: a steady interval; timer slack set to 1 us so the kernel
 *     honours short sleeps). A ramp from 1 us made about eight wake-ups in
 *     the first quarter millisecond after every message, each preempting the
 *     computation, and the thread that had just used so much CPU then waited
 *     milliseconds for its next turn (docs/PERFORMANCE.md, "Steady polling");
 *     when all that is in flight is sized
 *     transfers predicted to take longer, or patient ops (delta receive
 *     pieces, whose consumer drives progress itself when it needs them;
 *     sleep_cap_locked), the interval may grow up to OVL_POLL_QUIET_US;
 *     while a continuation waits for its operation (E.conts), the usual
 *     interval is OVL_POLL_CALLBACK_US instead of OVL_POLL_MAX_US: the
 *     interval is what a callback's delay is made of (p90 about 0.9 of it),
 *     and work without a callback keeps the cheaper pace;
 *   - an ovl call that posts work wakes the thread at once, except an
 *     operation that needs a round trip (RMA strips, sends above the eager
 *     limit) while the thread stands down for a spinning waiter or is in a
 *     timed sleep ending within the interval the operation asks for
 *     (wake_for_remote_locked): a poll then finds nothing, and the wake-up
 *     took the poster's CPU (an ovl_get call took 23-26 instead of 11-14
 *     us on a pinned host; docs/PERFORMANCE.md, "Posting without a
 *     wake-up");
 *   - while an application thread waits in ovl__engine_spin (ovl_wait, a
 *     fault on data not yet there, finalize...), that thread drives, and the
 *     progress thread parks until the last such waiter leaves: its timed
 *     wake-ups would only find the drive lock taken, and cost the CPU the
 *     waiter and the kernel's network work run on.
 * MPI libraries do not offer a blocking wait that releases the CPU, so this
 * bounded sleep is the compromise: the cost is about one wake-up per
 * OVL_POLL_MAX_US while messages are in flight, the added latency at most
 * that interval (docs/PERFORMANCE.md measures both).
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

static struct {
    pthread_mutex_t lock;  /* op arrays, deferred list, ready queue, continuations */
    pthread_mutex_t drive; /* held by the thread driving progress */
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
    struct ovl__coro *ready_head, *ready_tail;
    /* continuations waiting for their operation: ovl_continue on a request
     * not yet complete (ovl__req.cont_pending) and ovl_continue_mpi ops in
     * ops[]. While any waits, the thread sleeps at most poll_callback_us. */
    int conts;
    /* get/put strips in ops[] (OVL__OP_RMA) */
    int nrma;
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
} E = { .lock = PTHREAD_MUTEX_INITIALIZER, .drive = PTHREAD_MUTEX_INITIALIZER };

/* ---- progress sources ----------------------------------------------------- */

/* Registered once, before the engine starts (init.c); read without a lock
 * from then on. */
static const struct ovl__source *sources[OVL__MAX_SOURCES];
static int nsources;

int ovl__engine_add_source(const struct ovl__source *src)
{
    for (int i = 0; i < nsources; i++)
        if (sources[i] == src)
            return OVL_SUCCESS; /* a second ovl_init */
    if (nsources == OVL__MAX_SOURCES)
        return OVL_ERR_NOMEM;
    sources[nsources++] = src;
    return OVL_SUCCESS;
}

static int sources_poll(void)
{
    int n = 0;
    for (int i = 0; i < nsources; i++)
        n += sources[i]->poll();
    return n;
}

/* sources_posted() etc.: whether any source's hook of that name says yes. */
#define SOURCES_ANY(hook)                               \
    static int sources_##hook(void)                     \
    {                                                   \
        for (int i = 0; i < nsources; i++)              \
            if (sources[i]->hook && sources[i]->hook()) \
                return 1;                               \
        return 0;                                       \
    }
SOURCES_ANY(posted)
SOURCES_ANY(urgent)
SOURCES_ANY(serving)

void ovl__engine_lock(void)
{
    pthread_mutex_lock(&E.lock);
}

static void unlock_E(void)
{
    int sig = E.sig;
    E.sig = 0;
    if (sig)
        E.awake = 1; /* about to run: no second wake-up needed */
    pthread_mutex_unlock(&E.lock);
    if (sig)
        pthread_cond_signal(&E.cond);
}

void ovl__engine_unlock(void)
{
    unlock_E();
}

/* engine lock held */
void ovl__engine_wake_locked(void)
{
    E.posted = 1;
    if (E.thread_on)
        E.sig = 1;
}

static void wake_for_remote_locked(void);
static int ask_short_slice(unsigned us);

void ovl__engine_continuation_locked(struct ovl__req *r)
{
    if (!r->completed && !r->cont_pending) {
        r->cont_pending = 1;
        E.conts++;
    }
    /* the thread may be in a longer sleep than the next interval */
    wake_for_remote_locked();
}

int ovl__engine_continuations(void)
{
    pthread_mutex_lock(&E.lock);
    int n = E.conts;
    unlock_E();
    return n;
}

void ovl__engine_wake(void)
{
    pthread_mutex_lock(&E.lock);
    ovl__engine_wake_locked();
    unlock_E();
}

/* Predicted completion of a sized transfer posted now: the link in its
 * direction carries the transfers before it first, at the model's bandwidth.
 * 0 (unknown) for the rank itself, whose copies the model does not cover. */
static double due_locked(const struct ovl__op *op, size_t bytes)
{
    if (!bytes || ovl__m.bw_Bpus <= 0 || op->peer == ovl__g.rank || op->peer < 0 ||
        (op->kind != OVL__OP_SEND && op->kind != OVL__OP_RECV && op->kind != OVL__OP_FRAG))
        return 0;
    double now = ovl__now_us();
    double *link = op->kind == OVL__OP_SEND ? &E.out_free_us : &E.in_free_us;
    if (E.n == 0 || *link < now)
        *link = now;
    *link += (double)bytes / ovl__m.bw_Bpus;
    return *link;
}

int ovl__engine_add(struct ovl__op *op)
{
    return ovl__engine_add_sized(op, 0);
}

/* The kinds whose ops in flight set the progress thread's pace: ovl_continue_mpi
 * requests (E.conts) and get/put strips (E.nrma). @d: +1 added, -1 done.
 * Engine lock held. */
static void count_kind_locked(const struct ovl__op *op, int d)
{
    if (op->kind == OVL__OP_USER)
        E.conts += d;
    else if (op->kind == OVL__OP_RMA)
        E.nrma += d;
}

/* engine lock held */
static int add_locked(struct ovl__op *op, size_t bytes, int (*patient)(const struct ovl__op *op))
{
    if (E.n == E.cap) {
        /* the engine's tables grow with the work in flight, past glibc's
         * mmap threshold: mapped, never malloc'd (ovl__page_realloc) */
        int ncap = E.cap ? 2 * E.cap : 64;
        MPI_Request *m = ovl__page_realloc(E.mreqs, (size_t)ncap * sizeof *m);
        if (m)
            E.mreqs = m;
        struct ovl__op **o = m ? ovl__page_realloc(E.ops, (size_t)ncap * sizeof *o) : NULL;
        if (!o)
            return OVL_ERR_NOMEM;
        E.ops = o;
        E.cap = ncap;
    }
    op->due_us = due_locked(op, bytes);
    op->hs_until = 0;
    op->slack_us = 0;
    op->quiet = 0;
    op->patient = patient;
    count_kind_locked(op, 1);
    E.mreqs[E.n] = op->mreq;
    E.ops[E.n] = op;
    E.n++;
    return OVL_SUCCESS;
}

/* Whether the progress thread polls within @iv us without a wake-up (engine
 * lock held): it runs (awake: it decides its next sleep under this lock,
 * after what it does now, so it sees the new work), it has been signalled
 * and not yet run, it is in a timed sleep ending within @iv, or it stands
 * down for a spinning waiter, who drives every op. */
static int polls_soon_locked(double iv)
{
    if (!E.thread_on)
        return 1; /* progress is the caller's own */
    if (atomic_load(&E.parked))
        return atomic_load(&E.spinners) > 0; /* a parked thread without one is woken */
    if (E.awake)
        return 1;
    return E.sleep_until_us > 0 && E.sleep_until_us <= ovl__now_us() + iv;
}

/* Wake the thread unless it polls within one interval, or before @due_us
 * (ovl__now_us clock; 0: none) if that is later (engine lock held). */
static void wake_unless_polled_by_locked(double due_us)
{
    double iv = E.conts > 0 ? ovl__g.cfg.poll_callback_us : ovl__g.cfg.poll_max_us;
    double until = due_us - ovl__now_us();
    if (!polls_soon_locked(until > iv ? until : iv))
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
static void wake_for_remote_locked(void)
{
    wake_unless_polled_by_locked(0);
}

void ovl__engine_hurry(void)
{
    pthread_mutex_lock(&E.lock);
    wake_for_remote_locked();
    unlock_E();
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
static void start_polls_locked(void)
{
    if (!E.thread_on || !E.idle || E.awake)
        return;
    if (!E.gentle && E.tid > 0) {
        struct sched_param sp = { .sched_priority = 0 };
        if (sched_setscheduler(E.tid, SCHED_BATCH, &sp) == 0)
            E.gentle = 1;
    }
    E.sig = 1;
}

/* The thread, woken from its idle wait (engine lock held): back to normal
 * scheduling if a gentle wake-up made it SCHED_BATCH. */
static void after_idle_locked(void)
{
    if (!E.gentle)
        return;
    E.gentle = 0;
    struct sched_param sp = { .sched_priority = 0 };
    if (sched_setscheduler(0, SCHED_OTHER, &sp) == 0)
        ask_short_slice(ovl__g.cfg.progress_slice_us);
    else
        E.tid = 0; /* no more gentle wake-ups */
}

int ovl__engine_add_gentle(struct ovl__op *op)
{
    pthread_mutex_lock(&E.lock);
    int rc = add_locked(op, 0, NULL);
    if (rc == OVL_SUCCESS)
        start_polls_locked();
    unlock_E();
    return rc;
}

void ovl__engine_start_polls(void)
{
    pthread_mutex_lock(&E.lock);
    start_polls_locked();
    unlock_E();
}

/* Add @op and wake the thread as its kind needs; @hs_polls: polls at the
 * usual pace before it may sleep towards the op's completion (hs_until). */
static int add_and_wake(struct ovl__op *op, size_t bytes, int (*patient)(const struct ovl__op *op),
                        int remote, unsigned hs_polls)
{
    pthread_mutex_lock(&E.lock);
    int rc = add_locked(op, bytes, patient);
    if (rc == OVL_SUCCESS) {
        if (hs_polls)
            op->hs_until = E.polls + hs_polls;
        if (patient) {
            start_polls_locked();
        } else if (remote) {
            wake_for_remote_locked();
        } else {
            ovl__engine_wake_locked();
        }
    }
    unlock_E();
    return rc;
}

int ovl__engine_add_sized(struct ovl__op *op, size_t bytes)
{
    return add_and_wake(op, bytes, NULL, 0, 0);
}

int ovl__engine_add_remote(struct ovl__op *op, size_t bytes)
{
    return add_and_wake(op, bytes, NULL, 1, 0);
}

int ovl__engine_add_handshake(struct ovl__op *op, size_t bytes)
{
    /* below the rendezvous the message leaves eagerly: no handshake */
    return add_and_wake(op, bytes, NULL, 1, bytes >= ovl__model_rendezvous_bytes() ? 2 : 0);
}

int ovl__engine_add_patient(struct ovl__op *op, int (*patient)(const struct ovl__op *op))
{
    return add_and_wake(op, 0, patient, 0, 0);
}

int ovl__engine_add_stream(struct ovl__op *op, size_t bytes, int quiet, double slack_us)
{
    pthread_mutex_lock(&E.lock);
    int rc = add_locked(op, bytes, NULL);
    if (rc == OVL_SUCCESS) {
        op->quiet = quiet;
        op->slack_us = slack_us > 0 ? slack_us : 0;
        /* a thread whose sleep ends before the fragment is due is left
         * asleep: a stream posting its window would otherwise wake it once
         * a fragment (docs/PERFORMANCE.md, "Streams at the pace of their
         * window") */
        wake_unless_polled_by_locked(op->due_us);
    }
    unlock_E();
    return rc;
}

/* A receive handed to MPI before its message is there (match.c). The
 * progress thread is woken, but waits up to one callback interval
 * (OVL_POLL_CALLBACK_US) before it polls, unless work that needs a poll at
 * once is posted first: if it polled at once, MPI
 * could answer the peer's rendezvous request before this rank's own send,
 * posted right after the receive in an exchange, has gone out, and the
 * peer's data would then queue behind this rank's (match.c). */
int ovl__engine_add_receive(struct ovl__op *op, size_t bytes)
{
    pthread_mutex_lock(&E.lock);
    int rc = add_locked(op, bytes, NULL);
    if (rc == OVL_SUCCESS) {
        E.grace = 1;
        if (E.thread_on)
            E.sig = 1;
    }
    unlock_E();
    return rc;
}

int ovl__engine_count(int kind)
{
    int c = 0;
    pthread_mutex_lock(&E.lock);
    for (int i = 0; i < E.n; i++)
        if (kind < 0 || E.ops[i]->kind == kind)
            c++;
    if (kind < 0) /* finalize must also run what is queued for the driver */
        c += E.ndef + (E.ready_head != NULL);
    unlock_E();
    return c;
}

void ovl__engine_cancel_receives(void)
{
    pthread_mutex_lock(&E.lock);
    for (int i = 0; i < E.n; i++)
        if ((E.ops[i]->kind == OVL__OP_RECV || E.ops[i]->kind == OVL__OP_USER) &&
            E.mreqs[i] != MPI_REQUEST_NULL)
            MPI_Cancel(&E.mreqs[i]);
    unlock_E();
}

void ovl__engine_defer_callback(struct ovl__req *r)
{
    if (E.ndef == E.capdef) {
        int ncap = E.capdef ? 2 * E.capdef : 16;
        struct ovl__req **d = ovl__page_realloc(E.deferred, (size_t)ncap * sizeof *d);
        if (!d)
            abort(); /* cannot lose a continuation; 16+ pointers */
        E.deferred = d;
        E.capdef = ncap;
    }
    E.deferred[E.ndef++] = r;
    ovl__engine_wake_locked();
}

void ovl__engine_schedule_coro(struct ovl__coro *c)
{
    *ovl__coro_next(c) = NULL;
    if (E.ready_tail)
        *ovl__coro_next(E.ready_tail) = c;
    else
        E.ready_head = c;
    E.ready_tail = c;
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
static void publish(struct ovl__req *r)
{
    pthread_mutex_lock(&E.lock);
    if (r->cont) {
        /* ovl_continue came in after the completion took the (then empty)
         * continuation: it is deferred now, and its run publishes. Setting
         * `done` here would let ovl_wait return, and release the request,
         * before the callback has run. */
        unlock_E();
        return;
    }
    int detached = r->detached;
    atomic_store_explicit(&r->done, 1, memory_order_release);
    unlock_E();
    if (detached)
        ovl__req_release(r);
}

/* Entered with the engine lock held; releases it. Takes the continuation
 * under the lock, so it runs exactly once, then publishes completion. */
static void run_continuation_and_publish(struct ovl__req *r)
{
    ovl_continue_fn fn = r->cont;
    void *arg = r->cont_arg;
    r->cont = NULL;
    if (r->cont_pending) {
        r->cont_pending = 0;
        E.conts--;
    }
    unlock_E();
    if (fn)
        run_callback(r, fn, arg);
    publish(r);
}

void ovl__req_complete(struct ovl__req *r)
{
    pthread_mutex_lock(&E.lock);
    r->completed = 1;
    run_continuation_and_publish(r);
}

static int grow_batch(int need)
{
    if (need <= E.bcap)
        return 0;
    int ncap = E.bcap ? E.bcap : 64;
    while (ncap < need)
        ncap *= 2;
    int *idx = ovl__page_realloc(E.idx, (size_t)ncap * sizeof *idx);
    if (idx)
        E.idx = idx;
    MPI_Status *sts = idx ? ovl__page_realloc(E.sts, (size_t)ncap * sizeof *sts) : NULL;
    if (sts)
        E.sts = sts;
    struct ovl__op **b = sts ? ovl__page_realloc(E.batch, (size_t)ncap * sizeof *b) : NULL;
    if (b)
        E.batch = b;
    MPI_Status *bs = b ? ovl__page_realloc(E.batch_sts, (size_t)ncap * sizeof *bs) : NULL;
    if (!bs)
        return -1;
    E.batch_sts = bs;
    E.bcap = ncap;
    return 0;
}

/* MPI_Testsome with the errors of completed requests returned in their
 * statuses. MPICH 4.0 raises them on MPI_COMM_WORLD's error handler (MPI-4
 * says MPI_COMM_SELF) whatever the request's communicator, so with the
 * default handler a truncated receive would abort the program instead of
 * completing with OVL_ERR_TRUNCATE. Engine lock held. */
static int testsome_errors_return(int *outcount)
{
    MPI_Errhandler world = MPI_ERRHANDLER_NULL, self = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
    MPI_Comm_get_errhandler(MPI_COMM_SELF, &self);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int rc = MPI_Testsome(E.n, E.mreqs, outcount, E.idx, E.sts);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, self);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
    MPI_Errhandler *h[] = { &world, &self };
    for (int i = 0; i < 2; i++)
        if (*h[i] != MPI_ERRORS_ARE_FATAL && *h[i] != MPI_ERRORS_RETURN)
            MPI_Errhandler_free(h[i]);
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

/* Keep every thread of this process from driving, and so from calling MPI
 * through ovl, until ovl__engine_release (segment.c's serving probe). */
void ovl__engine_hold(void)
{
    pthread_mutex_lock(&E.drive);
}

void ovl__engine_release(void)
{
    pthread_mutex_unlock(&E.drive);
}

int ovl__engine_thread_on(void)
{
    return E.thread_on;
}

int ovl__engine_drive(void)
{
    if (pthread_mutex_trylock(&E.drive) != 0)
        return -1;
    driving = 1;
    /* The sources first (matching messages, serving other ranks' RMA), so
     * that the receives they start are tested in the same pass. */
    int matched = sources_poll();
    int nb = 0, npat = 0;

    pthread_mutex_lock(&E.lock);
    if (E.n > 0 && grow_batch(E.n) == 0) {
        int outcount = 0;
        int rc = testsome_errors_return(&outcount);
        E.polls++;
        atomic_fetch_add_explicit(&ovl__g.st_polls, 1, memory_order_relaxed);
        if (outcount != MPI_UNDEFINED && outcount > 0) {
            for (int k = 0; k < outcount; k++) {
                int i = E.idx[k];
                E.batch[nb] = E.ops[i];
                E.batch_sts[nb] = E.sts[k];
                if (rc != MPI_ERR_IN_STATUS)
                    E.batch_sts[nb].MPI_ERROR = MPI_SUCCESS;
                E.ops[i]->mreq = MPI_REQUEST_NULL;
                if (E.ops[i]->patient && E.ops[i]->patient(E.ops[i]))
                    npat++;
                count_kind_locked(E.ops[i], -1);
                E.ops[i] = NULL;
                nb++;
            }
            /* compact: keep the order of the survivors */
            int w = 0;
            for (int i = 0; i < E.n; i++) {
                if (E.ops[i]) {
                    E.ops[w] = E.ops[i];
                    E.mreqs[w] = E.mreqs[i];
                    w++;
                }
            }
            E.n = w;
        }
    }
    unlock_E();

    for (int k = 0; k < nb; k++)
        E.batch[k]->done(E.batch[k], &E.batch_sts[k]);
    if (nb)
        atomic_fetch_add_explicit(&ovl__g.st_completions, (unsigned long long)nb,
                                  memory_order_relaxed);

    nb += matched;
    /* Deferred continuations (registered after their operation completed). */
    for (;;) {
        pthread_mutex_lock(&E.lock);
        if (E.ndef == 0) {
            unlock_E();
            break;
        }
        run_continuation_and_publish(E.deferred[--E.ndef]);
        nb++;
    }

    /* Marshal coroutines whose fragment arrived or whose buffer came free. */
    for (;;) {
        pthread_mutex_lock(&E.lock);
        struct ovl__coro *c = E.ready_head;
        if (c) {
            E.ready_head = *ovl__coro_next(c);
            if (!E.ready_head)
                E.ready_tail = NULL;
        }
        unlock_E();
        if (!c)
            break;
        ovl__rt_leave(); /* marshalling outranks no computation */
        ovl__coro_run(c);
        nb++;
    }

    patient_got = npat;
    driving = 0;
    pthread_mutex_unlock(&E.drive);
    return nb;
}

/* Work that must be polled at the usual pace (engine lock held): anything
 * but patient ops. */
static int urgent_work_locked(void)
{
    if (E.ndef > 0 || E.ready_head != NULL || E.conts > 0 || sources_urgent() || sources_serving())
        return 1;
    for (int i = 0; i < E.n; i++)
        if (!E.ops[i]->patient || !E.ops[i]->patient(E.ops[i]))
            return 1;
    return 0;
}

void ovl__engine_spin(int (*done)(const void *), const void *arg)
{
    if (done(arg))
        return;
    atomic_fetch_add(&E.spinners, 1);
    while (!done(arg))
        if (ovl__engine_drive() < 0)
            ovl__relax(); /* another thread is driving */
    /* The last spinner out wakes a progress thread that stood down for it,
     * unless all that is left in flight is patient (delta pieces the
     * program's next access drives): the parked thread then comes back by
     * itself at the patient pace, and a wake-up after every wait would take
     * the CPU of the computation that follows it. */
    if (atomic_fetch_sub(&E.spinners, 1) == 1 && atomic_load(&E.parked)) {
        pthread_mutex_lock(&E.lock);
        if (urgent_work_locked())
            ovl__engine_wake_locked();
        unlock_E();
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

void ovl__engine_wait_flag(atomic_int *flag)
{
    if (flag_set(flag))
        return;
    uint64_t t0 = ovl__now_ns();
    ovl__engine_spin(flag_set, flag);
    uint64_t dt = ovl__now_ns() - t0;
    ovl__stats_wait_ns(dt);
    if (ovl__trace_on)
        ovl__trace_complete("wait", "wait", (double)t0 / 1e3, (double)dt / 1e3, NULL, 0, NULL, 0,
                            NULL, 0);
}

static int has_work_locked(void)
{
    return E.n > 0 || E.ndef > 0 || E.ready_head != NULL || sources_posted() || sources_serving();
}

/* The engine's state as the sleep rule sees it (engine lock held); the
 * rule itself is sched.c's, a pure function. Op summaries go to a scratch
 * array that grows with the ops in flight. */
static struct ovl__sched_op *sched_ops;
static int sched_cap_n;

static unsigned sleep_cap_locked(const struct ovl__sched_cfg *cfg, int *predicted)
{
    struct ovl__sched_in in = {
        .conts = E.conts,
        .deferred = E.ndef,
        .ready = E.ready_head != NULL,
        .posted = sources_posted(),
        .urgent = sources_urgent(),
        .serving = sources_serving(),
        .n = E.n,
        .nrma = E.nrma,
    };
    if (E.n > sched_cap_n) {
        int ncap = E.n > 2 * sched_cap_n ? E.n : 2 * sched_cap_n;
        struct ovl__sched_op *o = ovl__page_realloc(sched_ops, (size_t)ncap * sizeof *o);
        if (!o) { /* no summary: the usual pace */
            *predicted = 0;
            return cfg->max_us;
        }
        sched_ops = o;
        sched_cap_n = ncap;
    }
    for (int i = 0; i < E.n; i++) {
        const struct ovl__op *op = E.ops[i];
        sched_ops[i] = (struct ovl__sched_op){
            .patient = op->patient && op->patient(op),
            .quiet = op->quiet,
            .handshake = op->hs_until > E.polls,
            .due_us = op->due_us,
            .slack_us = op->slack_us,
        };
    }
    in.ops = sched_ops;
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
    struct sched_param sp = { .sched_priority = ovl__g.cfg.progress_priority };
    if (sched_setscheduler(0, SCHED_FIFO, &sp) == 0)
        rt_now = 1;
    else
        *fifo = 0; /* no longer allowed (RLIMIT_RTPRIO lowered) */
}

/* Normal scheduling with the short slice (or the kernel's, where it has no
 * custom slices or none is asked for); returns ask_short_slice's result. */
static int to_normal(void)
{
    int rc = ask_short_slice(ovl__g.cfg.progress_slice_us);
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

static void *progress_thread(void *unused)
{
    OVL__UNUSED(unused);
    /* Short sleeps must stay short: the default 50 us timer slack would add
     * up to 50 us to every poll interval. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    /* Under OVL_PROGRESS_PRIORITY the thread starts under SCHED_FIFO
     * (start_realtime), and leaves it until its first timed sleep. */
    int fifo = ovl__g.cfg.progress_priority > 0;
    if (to_normal() != 0 && ovl__g.cfg.progress_slice_us)
        ovl__info("progress thread: no custom time slice (%s)", strerror(errno));
    ovl__trace_thread_name("ovl progress");
    const unsigned max_us = ovl__g.cfg.poll_max_us, spin_us = ovl__g.cfg.spin_us;
    const unsigned quiet_us = ovl__g.cfg.poll_quiet_us, min_us = ovl__g.cfg.poll_min_us;
    const unsigned callback_us = ovl__g.cfg.poll_callback_us;
    const struct ovl__sched_cfg scfg = {
        .max_us = max_us,
        .quiet_us = quiet_us,
        .callback_us = callback_us,
        .rma_us = ovl__g.cfg.poll_rma_us,
        .serve_us = ovl__g.cfg.poll_serve_us,
        .quiet_share = ovl__g.cfg.poll_quiet_share,
    };
    unsigned backoff = 0;
    double last_activity = ovl__now_us();

    /* Gentle wake-ups (start_polls_locked) need the way back from
     * SCHED_BATCH; where the thread cannot take it, it is always woken
     * normally. */
    struct sched_param sp0 = { .sched_priority = 0 };
    int can_batch = !fifo && sched_setscheduler(0, SCHED_BATCH, &sp0) == 0 &&
                    sched_setscheduler(0, SCHED_OTHER, &sp0) == 0;
    if (can_batch)
        to_normal();
    pthread_mutex_lock(&E.lock);
    E.tid = can_batch ? (pid_t)syscall(SYS_gettid) : 0;
    E.awake = 1;
    while (!E.stop) {
        if (E.grace) {
            E.grace = 0;
            /* the shorter pace: a continuation is usually registered on
             * the receive next, and need not wake the thread again
             * (wake_for_remote_locked) */
            const unsigned grace_us = callback_us < max_us ? callback_us : max_us;
            if (!E.posted && grace_us > 0) {
                struct timespec ts;
                deadline_in(grace_us, &ts);
                E.sleep_until_us = ovl__now_us() + grace_us;
                E.awake = 0;
                while (!E.stop && !E.posted &&
                       pthread_cond_timedwait(&E.cond, &E.lock, &ts) != ETIMEDOUT)
                    ;
                E.awake = 1;
                E.sleep_until_us = 0;
            }
        }
        E.posted = 0;
        unlock_E();
        int got = ovl__engine_drive();
        pthread_mutex_lock(&E.lock);
        if (E.stop)
            break;
        /* Only patient ops completed: the program drives those when it
         * needs them, so the thread keeps slowing down (a reset here kept
         * it polling every interval while pieces arrived one per poll). */
        if ((got > patient_got) || E.posted) {
            last_activity = ovl__now_us();
            backoff = 0;
            continue;
        }
        if (!has_work_locked()) {
            backoff = 0;
            double t0 = ovl__trace_on ? ovl__now_us() : 0;
            ovl__rt_leave();
            E.idle = 1;
            E.awake = 0;
            while (!E.stop && !E.posted && !has_work_locked())
                pthread_cond_wait(&E.cond, &E.lock);
            E.awake = 1;
            E.idle = 0;
            after_idle_locked();
            if (ovl__trace_on)
                ovl__trace_complete("progress", "idle", t0, ovl__now_us() - t0, NULL, 0, NULL, 0,
                                    NULL, 0);
            atomic_fetch_add_explicit(&ovl__g.st_wakeups, 1, memory_order_relaxed);
            last_activity = ovl__now_us();
            continue;
        }
        if (atomic_load(&E.spinners) > 0) {
            /* An application thread spins in a wait and drives everything:
             * timed wake-ups would only take its CPU (and the kernel's, which
             * moves the data) to find the drive lock taken. */
            atomic_store(&E.parked, 1);
            ovl__rt_leave();
            double t0 = ovl__trace_on ? ovl__now_us() : 0;
            /* Timed: the last spinner out does not wake it for patient
             * work alone (ovl__engine_spin). */
            const unsigned park_us = quiet_us > max_us ? quiet_us : max_us;
            for (;;) {
                struct timespec ts;
                deadline_in(park_us, &ts);
                E.awake = 0;
                int rc = pthread_cond_timedwait(&E.cond, &E.lock, &ts);
                E.awake = 1;
                if (E.stop || atomic_load(&E.spinners) == 0) {
                    if (rc != ETIMEDOUT && !urgent_work_locked() && !E.stop)
                        continue; /* a wake-up for nothing urgent */
                    break;
                }
            }
            atomic_store(&E.parked, 0);
            if (ovl__trace_on)
                ovl__trace_complete("progress", "parked", t0, ovl__now_us() - t0, NULL, 0, NULL, 0,
                                    NULL, 0);
            atomic_fetch_add_explicit(&ovl__g.st_wakeups, 1, memory_order_relaxed);
            backoff = 0;
            last_activity = ovl__now_us();
            continue;
        }
        if (ovl__now_us() - last_activity < spin_us)
            continue;
        int predicted;
        const unsigned cap = sleep_cap_locked(&scfg, &predicted);
        /* min_us and callback_us <= max_us (config.c); the cap is below
         * max_us only while a continuation waits, or while only strips are
         * in flight and OVL_POLL_RMA_US is set below it. A cap from the
         * predicted completions is taken at once: it already closes in on
         * them, and a ramp from min_us after every poll that completed
         * something (each poll of a stream settles fragments) kept a stream
         * at two wake-ups per fragment (docs/PERFORMANCE.md, "Streams at
         * the pace of their window"). */
        backoff = predicted ? cap : backoff ? backoff * 2 : min_us;
        if (backoff > cap)
            backoff = cap;
        struct timespec ts;
        deadline_in(backoff, &ts);
        if (!E.posted) {
            double t0 = ovl__trace_on ? ovl__now_us() : 0;
            rt_enter(&fifo);
            E.sleep_until_us = ovl__now_us() + backoff;
            E.awake = 0;
            pthread_cond_timedwait(&E.cond, &E.lock, &ts);
            E.awake = 1;
            E.sleep_until_us = 0;
            if (ovl__trace_on)
                ovl__trace_complete("progress", "sleep", t0, ovl__now_us() - t0, "backoff_us",
                                    backoff, NULL, 0, NULL, 0);
        }
        atomic_fetch_add_explicit(&ovl__g.st_wakeups, 1, memory_order_relaxed);
    }
    unlock_E();
    return NULL;
}

/* OVL_PROGRESS_PRIORITY: start the progress thread under SCHED_FIFO, which
 * tells at once (ovl_init, ovl_config_get) whether this process may use it;
 * the thread then holds it only as rt_enter/ovl__rt_leave say. Returns 0
 * when started, -1 when not asked for or not allowed (the caller starts it
 * normally; the effective configuration then says 0). */
static int start_realtime(void)
{
    int prio = ovl__g.cfg.progress_priority;
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
        rc = pthread_create(&E.thread, &at, progress_thread, NULL);
    pthread_attr_destroy(&at);
    if (!rc)
        return 0;
    ovl__g.cfg.progress_priority = 0;
    if (ovl__g.cfg.verbose >= 2 || (ovl__g.cfg.verbose >= 1 && ovl__g.rank == 0))
        fprintf(stderr,
                "ovl: OVL_PROGRESS_PRIORITY=%d: SCHED_FIFO refused (%s); the progress thread runs "
                "under normal scheduling (needs CAP_SYS_NICE or RLIMIT_RTPRIO >= %d)\n",
                prio, strerror(rc), prio);
    return -1;
}

int ovl__engine_start(void)
{
    E.n = 0;
    E.ndef = 0;
    E.ready_head = E.ready_tail = NULL;
    E.conts = 0;
    E.nrma = 0;
    E.stop = 0;
    E.posted = 0;
    E.grace = 0;
    E.awake = 0;
    E.tid = 0;
    E.gentle = 0;
    E.thread_on = 0;
    if (ovl__g.cfg.progress != OVL_PROGRESS_THREAD)
        return OVL_SUCCESS;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&E.cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc)
        return OVL_ERR_NOMEM;
    E.thread_on = 1;
    if (start_realtime() != 0 && pthread_create(&E.thread, NULL, progress_thread, NULL) != 0) {
        E.thread_on = 0;
        pthread_cond_destroy(&E.cond);
        return OVL_ERR_NOMEM;
    }
    return OVL_SUCCESS;
}

void ovl__engine_stop(void)
{
    if (E.thread_on) {
        pthread_mutex_lock(&E.lock);
        E.stop = 1;
        pthread_cond_signal(&E.cond);
        pthread_mutex_unlock(&E.lock);
        pthread_join(E.thread, NULL);
        E.thread_on = 0;
        pthread_cond_destroy(&E.cond);
    }
    ovl__page_free(E.mreqs);
    ovl__page_free(E.ops);
    ovl__page_free(E.idx);
    ovl__page_free(E.sts);
    ovl__page_free(E.batch);
    ovl__page_free(E.batch_sts);
    ovl__page_free(E.deferred);
    E.mreqs = NULL;
    E.ops = NULL;
    E.idx = NULL;
    E.sts = NULL;
    E.batch = NULL;
    E.batch_sts = NULL;
    E.deferred = NULL;
    E.n = E.cap = E.bcap = E.ndef = E.capdef = 0;
}
