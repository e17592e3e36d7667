/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Communication domains (source system 5's per-thread endpoints, as
 * OpenSHMEM contexts): each is an engine instance (progress.c) with its own
 * communicators, matching state (match.c) and per-peer counts. Every
 * thread has a current domain (thread-local; domain 0 until it binds
 * another); the engine entry points, match.c and the front ends act on the
 * current one. Code acting on an object of a domain (a request, a stream, a
 * delta transfer, a monitored buffer) enters that object's domain first,
 * so a request posted on domain 2 is driven by domain 2's engine whichever
 * thread waits for it.
 *
 * The mapping onto MPI is chosen per domain when it is created: a
 * serialized or private domain, whose MPI calls never overlap, gets an
 * MPIX stream of its own where the library has them (a VCI of its own in
 * MPICH), and its communicators are stream communicators; any other
 * domain, or one whose stream MPI refuses (MPICH started without
 * MPIR_CVAR_CH4_RESERVE_VCIS), gets duplicates of ovl's communicator.
 * MPI_Comm_dup_with_info's assertions cannot be used: ovl's own matching
 * probes with MPI_ANY_SOURCE and MPI_ANY_TAG (match.c).
 */
#include "ovl_internal.h"

#include <linux/membarrier.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct ovl__dom dom0;

static struct {
    pthread_mutex_t lock;                         /* create and free */
    struct ovl__dom *_Atomic at[OVL_DOMAINS_MAX]; /* by index; NULL: free */
    unsigned gen[OVL_DOMAINS_MAX];                /* creation of the domain there */
    unsigned next_gen;
    int n, on_streams, hi; /* live domains, on streams, highest index + 1 */
} D = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The calling thread's domain: index and the generation it had when bound
 * (a domain created later at the same index is another one). */
static __thread int tls_id __attribute__((tls_model("initial-exec")));
static __thread unsigned tls_gen __attribute__((tls_model("initial-exec")));

struct ovl__dom *ovl__dom0(void)
{
    return &dom0;
}

void *ovl__dom_state(int slot)
{
    return slot >= 0 && slot < OVL__MAX_SOURCES ? ovl__dom_cur()->state[slot] : NULL;
}

struct ovl__dom *ovl__dom_cur(void)
{
    int id = tls_id;
    if (id == 0)
        return &dom0;
    struct ovl__dom *d = atomic_load_explicit(&D.at[id], memory_order_acquire);
    return d && __atomic_load_n(&D.gen[id], __ATOMIC_RELAXED) == tls_gen ? d : &dom0;
}

struct ovl__dom *ovl__dom_enter(struct ovl__dom *d)
{
    struct ovl__dom *prev = ovl__dom_cur();
    tls_id = d->id;
    tls_gen = __atomic_load_n(&D.gen[d->id], __ATOMIC_RELAXED);
    return prev;
}

void ovl__dom_leave(struct ovl__dom *prev)
{
    ovl__dom_enter(prev);
}

static int owner_ok(const struct ovl__dom *d)
{
    return d->mode != OVL_DOMAIN_PRIVATE || !atomic_load(&d->owned) ||
           pthread_equal(d->owner, pthread_self());
}

static int not_owner(const char *fn, const struct ovl__dom *d)
{
    return ovl__error(OVL_ERR_THREAD, fn,
                      "domain %d is private and owned by another thread (the first that bound "
                      "it); use a shared or serialized domain to share it between threads",
                      d->id);
}

int ovl__dom_enter_checked(const char *fn, struct ovl__dom *d, struct ovl__dom **prev)
{
    if (d != &dom0 && !atomic_load(&d->live)) {
        /* freed since (its requests had completed): nothing to drive */
        *prev = ovl__dom_cur();
        return OVL_SUCCESS;
    }
    if (!owner_ok(d))
        return not_owner(fn, d);
    *prev = ovl__dom_enter(d);
    return OVL_SUCCESS;
}

/* ---- a private domain's gate ------------------------------------------------ */

/* membarrier(PRIVATE_EXPEDITED) registered: a foreign thread makes the
 * owner's stores visible, so the owner's side needs no fence. Without it
 * (an old kernel, or ThreadSanitizer, which cannot see it) the owner's
 * store is sequentially consistent. */
static atomic_int gate_asym = -1;

static void gate_asym_init(void)
{
    if (atomic_load(&gate_asym) >= 0)
        return;
    int on = 0;
#if !defined(__SANITIZE_THREAD__) && defined(SYS_membarrier)
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    on = q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
         syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
    atomic_store(&gate_asym, on);
}

/* the private domain whose gate this thread passed as its owner, how deep,
 * and whether through gate_x (another thread was in) */
static __thread struct ovl__dom *tls_gate __attribute__((tls_model("initial-exec")));
static __thread int tls_gate_depth __attribute__((tls_model("initial-exec")));
static __thread int tls_gate_slow __attribute__((tls_model("initial-exec")));

static int gate_owner(const struct ovl__dom *d)
{
    return atomic_load_explicit(&d->owned, memory_order_acquire) &&
           pthread_equal(d->owner, pthread_self());
}

/* The owner's way in: 1 in without a lock, 0 another thread is in or
 * getting in (inside withdrawn). */
static int owner_in(struct ovl__dom *d)
{
    if (atomic_load_explicit(&gate_asym, memory_order_relaxed) > 0) {
        atomic_store_explicit(&d->gate_inside, 1, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst);
    } else {
        atomic_store(&d->gate_inside, 1);
    }
    if (!atomic_load(&d->gate_foreign))
        return 1;
    atomic_store_explicit(&d->gate_inside, 0, memory_order_release);
    return 0;
}

/* Another thread, gate_x held: the first level raises gate_foreign and
 * waits for the owner to leave (@wait 0: gives up instead; 0 returned).
 * gate_foreign stays raised when it leaves, until the owner comes by (and
 * lowers it, gate_x held): while it is raised the owner cannot be in, so
 * a thread driving the domain again and again (a wait in ovl_lock) costs
 * the owner's CPU one membarrier, not one per drive. */
static int foreign_in(struct ovl__dom *d, int wait)
{
    if (d->gate_xdepth++ > 0 || atomic_load(&d->gate_foreign))
        return 1;
    atomic_store(&d->gate_foreign, 1);
    if (atomic_load_explicit(&gate_asym, memory_order_relaxed) > 0)
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    while (atomic_load(&d->gate_inside)) {
        if (!wait) {
            d->gate_xdepth = 0;
            atomic_store_explicit(&d->gate_foreign, 0, memory_order_release);
            return 0;
        }
        ovl__relax();
    }
    return 1;
}

void ovl__gate_enter(struct ovl__dom *d)
{
    if (tls_gate == d) {
        tls_gate_depth++;
        return;
    }
    if (!tls_gate && gate_owner(d)) {
        tls_gate = d;
        tls_gate_depth = 1;
        tls_gate_slow = !owner_in(d);
        if (tls_gate_slow) {
            pthread_mutex_lock(&d->gate_x);
            atomic_store_explicit(&d->gate_foreign, 0, memory_order_relaxed);
        }
        return;
    }
    pthread_mutex_lock(&d->gate_x);
    foreign_in(d, 1);
}

int ovl__gate_try(struct ovl__dom *d)
{
    if (tls_gate == d) {
        tls_gate_depth++;
        return 1;
    }
    if (!tls_gate && gate_owner(d)) {
        int slow = !owner_in(d);
        if (slow) {
            if (pthread_mutex_trylock(&d->gate_x) != 0)
                return 0;
            atomic_store_explicit(&d->gate_foreign, 0, memory_order_relaxed);
        }
        tls_gate = d;
        tls_gate_depth = 1;
        tls_gate_slow = slow;
        return 1;
    }
    if (pthread_mutex_trylock(&d->gate_x) != 0)
        return 0;
    if (foreign_in(d, 0))
        return 1;
    pthread_mutex_unlock(&d->gate_x);
    return 0;
}

void ovl__gate_exit(struct ovl__dom *d)
{
    if (tls_gate == d) {
        if (--tls_gate_depth > 0)
            return;
        tls_gate = NULL;
        if (tls_gate_slow)
            pthread_mutex_unlock(&d->gate_x);
        else
            atomic_store_explicit(&d->gate_inside, 0, memory_order_release);
        return;
    }
    d->gate_xdepth--;
    pthread_mutex_unlock(&d->gate_x);
}

void ovl__dom_lock(pthread_mutex_t *m)
{
    struct ovl__dom *d = ovl__dom_cur();
    if (d->mode == OVL_DOMAIN_PRIVATE)
        ovl__gate_enter(d);
    else
        pthread_mutex_lock(m);
}

void ovl__dom_unlock(pthread_mutex_t *m)
{
    struct ovl__dom *d = ovl__dom_cur();
    if (d->mode == OVL_DOMAIN_PRIVATE)
        ovl__gate_exit(d);
    else
        pthread_mutex_unlock(m);
}

int ovl__doms_count(void)
{
    return D.n;
}

int ovl__doms_on_streams(void)
{
    return D.on_streams;
}

struct ovl__dom *ovl__dom_at(int i)
{
    return i >= 0 && i < OVL_DOMAINS_MAX ? atomic_load(&D.at[i]) : NULL;
}

void ovl__doms_spin(int (*done)(const void *), const void *arg)
{
    if (D.hi <= 1) {
        ovl__engine_spin(done, arg);
        return;
    }
    while (!done(arg)) {
        for (int i = 0; i < D.hi; i++) {
            struct ovl__dom *d = ovl__dom_at(i);
            if (!d)
                continue;
            struct ovl__dom *prev = ovl__dom_enter(d);
            ovl__engine_drive();
            ovl__dom_leave(prev);
        }
        ovl__relax();
    }
}

/* ---- one domain ------------------------------------------------------------ */

static MPI_Comm *comms_of(struct ovl__dom *d, int k)
{
    MPI_Comm *c[] = { &d->comm_msg, &d->comm_stream, &d->comm_frag, &d->comm_delta };
    return c[k];
}

/* The domain's own parts: engine, matching state, counters (NULL on
 * failure; the comms are made collectively by the caller). */
/* Freed domains' structs are kept for the next ones, never returned to
 * the system: a request completed on a domain that was freed before the
 * program waited for it still names it (ovl__req.dom), and a wait then
 * reads its `live` flag, not freed memory. */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ovl__dom *spare;

static struct ovl__dom *dom_struct(void)
{
    pthread_mutex_lock(&spare_lock);
    struct ovl__dom *d = spare;
    if (d)
        spare = d->next_spare;
    pthread_mutex_unlock(&spare_lock);
    if (!d) {
        d = calloc(1, sizeof *d);
        if (d) {
            pthread_mutexattr_t a;
            pthread_mutexattr_init(&a);
            pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
            pthread_mutex_init(&d->gate_x, &a);
            pthread_mutexattr_destroy(&a);
        }
        return d;
    }
    atomic_store(&d->live, 0);
    atomic_store(&d->owned, 0);
    atomic_store(&d->gate_inside, 0);
    atomic_store(&d->gate_foreign, 0);
    d->gate_xdepth = 0;
    d->next_spare = NULL;
    d->on_stream = 0;
    memset(d->state, 0, sizeof d->state);
    return d;
}

static void dom_shelve(struct ovl__dom *d)
{
    atomic_store(&d->live, 0);
    d->eng = NULL;
    d->sent_to = d->recvd_from = NULL;
    d->headed_to = NULL;
    pthread_mutex_lock(&spare_lock);
    d->next_spare = spare;
    spare = d;
    pthread_mutex_unlock(&spare_lock);
}

static struct ovl__dom *dom_alloc(int id, int mode)
{
    struct ovl__dom *d = dom_struct();
    if (!d)
        return NULL;
    d->id = id;
    d->mode = mode;
    for (int k = 0; k < 4; k++)
        *comms_of(d, k) = MPI_COMM_NULL;
#ifdef OVL_HAVE_MPIX_STREAM
    d->stream = MPIX_STREAM_NULL;
#endif
    size_t n = (size_t)ovl__g.size;
    if (mode == OVL_DOMAIN_PRIVATE)
        gate_asym_init();
    d->eng = ovl__engine_new();
    if (d->eng && mode == OVL_DOMAIN_PRIVATE)
        ovl__engine_set_gate(d->eng, d);
    int st = ovl__engine_sources_dom_new(d->state);
    d->sent_to = calloc(n, sizeof *d->sent_to);
    d->recvd_from = calloc(n, sizeof *d->recvd_from);
    d->headed_to = calloc(n, sizeof *d->headed_to);
    if (!d->eng || st != OVL_SUCCESS || !d->sent_to || !d->recvd_from || !d->headed_to) {
        ovl__engine_free(d->eng);
        if (st == OVL_SUCCESS)
            ovl__engine_sources_dom_free(d->state);
        free(d->sent_to);
        free(d->recvd_from);
        free(d->headed_to);
        dom_shelve(d);
        return NULL;
    }
    return d;
}

static void dom_release(struct ovl__dom *d)
{
    for (int k = 0; k < 4; k++)
        if (*comms_of(d, k) != MPI_COMM_NULL)
            MPI_Comm_free(comms_of(d, k));
#ifdef OVL_HAVE_MPIX_STREAM
    if (d->stream != MPIX_STREAM_NULL)
        MPIX_Stream_free(&d->stream);
#endif
    ovl__engine_free(d->eng);
    ovl__engine_sources_dom_free(d->state);
    free(d->sent_to);
    free(d->recvd_from);
    free(d->headed_to);
    dom_shelve(d);
}

#ifdef OVL_HAVE_MPIX_STREAM
/* A domain's own stream progresses only when asked (MPICH polls the VCI of
 * a request it tests, not the stream's others): every drive asks. */
static void stream_progress(void *arg)
{
    struct ovl__dom *d = arg;
    MPIX_Stream_progress(d->stream);
}
#endif

/* Its communicators, collectively (every rank calls it for the same
 * domain): a stream of its own where allowed and available, else
 * duplicates. An MPI error code, or MPI_SUCCESS. */
static int dom_comms(struct ovl__dom *d)
{
#ifdef OVL_HAVE_MPIX_STREAM
    if (d->mode != OVL_DOMAIN_SHARED) {
        /* Local: another rank may get none, and its stream communicators
         * are then plain ones (MPIX_STREAM_NULL), which MPI allows. */
        /* MPICH raises its refusal on MPI_COMM_SELF */
        ovl__errors_return_enter(OVL__ERRORS_ON_WORLD | OVL__ERRORS_ON_SELF);
        int src = MPIX_Stream_create(MPI_INFO_NULL, &d->stream);
        ovl__errors_return_leave(OVL__ERRORS_ON_WORLD | OVL__ERRORS_ON_SELF);
        if (src != MPI_SUCCESS) {
            d->stream = MPIX_STREAM_NULL;
            ovl__info("domain %d: no MPIX stream of its own (%s); its communicators are "
                      "duplicates sharing MPI's endpoint (MPICH gives one stream per "
                      "MPIR_CVAR_CH4_RESERVE_VCIS)",
                      d->id, "MPIX_Stream_create failed");
        }
        for (int k = 0; k < 4; k++) {
            int rc = MPIX_Stream_comm_create(ovl__g.comm_msg, d->stream, comms_of(d, k));
            if (rc != MPI_SUCCESS)
                return rc;
            MPI_Comm_set_errhandler(*comms_of(d, k), MPI_ERRORS_RETURN);
        }
        d->on_stream = d->stream != MPIX_STREAM_NULL;
        if (d->on_stream)
            ovl__engine_set_kick(d->eng, stream_progress, d);
        return MPI_SUCCESS;
    }
#endif
    for (int k = 0; k < 4; k++) {
        int rc = MPI_Comm_dup(ovl__g.comm_msg, comms_of(d, k));
        if (rc != MPI_SUCCESS)
            return rc;
        MPI_Comm_set_errhandler(*comms_of(d, k), MPI_ERRORS_RETURN);
    }
    return MPI_SUCCESS;
}

/* MPI_Iallreduce on domain 0's communicator, driving the caller's domain
 * while it completes (a peer may need this rank's progress first). */
static int allreduce(void *in, void *out, int count, MPI_Datatype dt, MPI_Op op)
{
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(in, out, count, dt, op, ovl__g.comm_msg, &r);
    return rc == MPI_SUCCESS ? ovl__engine_spin_mpi(&r) : rc;
}

/* One MPI_MAX over every rank of a collective call: a failure (its code
 * over the complement of the rank, so the maximum names the most negative
 * code and the lowest rank with it), then @a and @b, each with its
 * complement, to find any difference (*@differs). Returns this rank's
 * @local error, another rank's failure (recorded, saying @what), an MPI
 * error, or OVL_SUCCESS. */
static int agree(const char *fn, int local, unsigned long long a, unsigned long long b,
                 const char *what, int *differs)
{
    unsigned long long here[5] = { 0, a, ~a, b, ~b }, all[5];
    if (local != OVL_SUCCESS)
        here[0] = ((unsigned long long)(-local) << 32) | (0xffffffffull - (unsigned)ovl__g.rank);
    int rc = allreduce(here, all, 5, MPI_UNSIGNED_LONG_LONG, MPI_MAX);
    if (rc != MPI_SUCCESS)
        return ovl__mpi_error(rc, fn, "MPI_Iallreduce");
    *differs = all[1] != ~all[2] || all[3] != ~all[4];
    if (local != OVL_SUCCESS)
        return local;
    if (!all[0])
        return OVL_SUCCESS;
    int code = -(int)(all[0] >> 32), who = (int)(0xffffffffull - (all[0] & 0xffffffffull));
    return ovl__error(code, fn, "rank %d failed (%s; its own error says why): %s", who,
                      ovl_strerror(code), what);
}

static int mode_ok(int mode)
{
    return mode == OVL_DOMAIN_SHARED || mode == OVL_DOMAIN_SERIALIZED || mode == OVL_DOMAIN_PRIVATE;
}

/* Create @n domains of @mode (collective): local checks first, then one
 * agreement, then the communicators, then one more agreement. */
static int create(const char *fn, int n, int mode, ovl_domain_t out[], int local)
{
    if (local != OVL_SUCCESS)
        ;
    else if (n < 0)
        local = ovl__error(OVL_ERR_ARG, fn, "negative count %d", n);
    else if (n > 0 && !out)
        local = ovl__error(OVL_ERR_ARG, fn, "out is NULL with n = %d", n);
    else if (!mode_ok(mode))
        local = ovl__error(OVL_ERR_ARG, fn,
                           "unknown mode %d (OVL_DOMAIN_SHARED, OVL_DOMAIN_SERIALIZED or "
                           "OVL_DOMAIN_PRIVATE)",
                           mode);
    else if (n > 0 && ovl__g.thread_level < MPI_THREAD_MULTIPLE)
        local = ovl__error(OVL_ERR_THREAD, fn,
                           "domains are used by several threads at once: MPI must provide "
                           "MPI_THREAD_MULTIPLE (it provides level %d)",
                           ovl__g.thread_level);
    else if (D.n + n > OVL_DOMAINS_MAX)
        local = ovl__error(OVL_ERR_ARG, fn, "%d domains exist; %d more exceed OVL_DOMAINS_MAX (%d)",
                           D.n, n, OVL_DOMAINS_MAX);
    int differs = 0;
    int rc = agree(fn, local, (unsigned)n, (unsigned)mode, "no domain created", &differs);
    if (rc)
        return rc;
    if (differs)
        return ovl__error(OVL_ERR_ARG, fn,
                          "n or mode differs between ranks (this rank n = %d, mode = %d): every "
                          "rank must pass the same",
                          n, mode);
    if (n == 0)
        return OVL_SUCCESS;

    struct ovl__dom **made = calloc((size_t)n, sizeof *made);
    int failed_nomem = made == NULL, mrc = MPI_SUCCESS, k = 0;
    pthread_mutex_lock(&D.lock);
    for (int id = 1; made && k < n && id < OVL_DOMAINS_MAX; id++) {
        if (atomic_load(&D.at[id]))
            continue;
        int taken = 0;
        for (int j = 0; j < k; j++)
            taken |= made[j]->id == id;
        if (taken)
            continue;
        if (!(made[k] = dom_alloc(id, mode))) {
            failed_nomem = 1;
            break;
        }
        k++;
    }
    pthread_mutex_unlock(&D.lock);
    /* communicators: collective, so every rank makes as many as the first
     * failure anywhere allows; one agreement at the end */
    int bad = failed_nomem ? 1 : 0;
    int bad_all = 0;
    rc = allreduce(&bad, &bad_all, 1, MPI_INT, MPI_MAX);
    if (rc == MPI_SUCCESS && !bad_all) {
        for (int i = 0; i < n && mrc == MPI_SUCCESS; i++)
            mrc = dom_comms(made[i]);
        bad = mrc != MPI_SUCCESS;
        rc = allreduce(&bad, &bad_all, 1, MPI_INT, MPI_MAX);
    }
    /* what the sources keep per domain across ranks (segments' windows):
     * collective and agreed by each source */
    int arc = rc == MPI_SUCCESS && !bad_all ? ovl__engine_sources_dom_attach(made, n) : OVL_SUCCESS;
    if (rc != MPI_SUCCESS || bad_all || arc != OVL_SUCCESS) {
        for (int i = 0; i < k; i++)
            dom_release(made[i]);
        free(made);
        if (rc != MPI_SUCCESS)
            return ovl__mpi_error(rc, fn, "MPI_Iallreduce");
        if (arc != OVL_SUCCESS)
            return arc;
        if (failed_nomem)
            return ovl__error(OVL_ERR_NOMEM, fn, "allocating a domain's engine and tables");
        if (mrc != MPI_SUCCESS)
            return ovl__mpi_error(mrc, fn,
                                  "creating a domain's communicators (MPI may have run out of "
                                  "communicators; the domains that exist stay usable)");
        return ovl__error(OVL_ERR_MPI, fn,
                          "another rank could not create a domain's communicators (MPI may have "
                          "run out of them: %d domains exist; those stay usable)",
                          D.n);
    }
    pthread_mutex_lock(&D.lock);
    for (int i = 0; i < n; i++) {
        struct ovl__dom *d = made[i];
        __atomic_store_n(&D.gen[d->id], ++D.next_gen, __ATOMIC_RELAXED);
        atomic_store(&d->live, 1);
        atomic_store_explicit(&D.at[d->id], d, memory_order_release);
        D.n++;
        D.on_streams += d->on_stream;
        if (d->id + 1 > D.hi)
            D.hi = d->id + 1;
        out[i] = d->id;
    }
    pthread_mutex_unlock(&D.lock);
    free(made);
    return OVL_SUCCESS;
}

int ovl_domains_create(int n, int mode, ovl_domain_t out[])
{
    static const char *fn = "ovl_domains_create";
    int rc;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)))
        return rc;
    return create(fn, n, mode, out, OVL_SUCCESS);
}

int ovl_domain_bind(ovl_domain_t id)
{
    static const char *fn = "ovl_domain_bind";
    int rc;
    if ((rc = ovl__check_init(fn)))
        return rc;
    struct ovl__dom *d = ovl__dom_at(id);
    if (!d)
        return ovl__error(OVL_ERR_ARG, fn, "no domain %d (ovl_domains_create makes them)", id);
    struct ovl__dom *was = ovl__dom_cur();
    if (was == d)
        return OVL_SUCCESS;
    if (tls_gate)
        return ovl__error(OVL_ERR_IN_CALLBACK, fn,
                          "called from a continuation or coroutine that private domain %d runs; "
                          "its owner keeps it until the callback returns",
                          tls_gate->id);
    if (d->mode == OVL_DOMAIN_PRIVATE && !atomic_load(&d->owned)) {
        pthread_mutex_lock(&D.lock);
        if (!atomic_load(&d->owned)) {
            d->owner = pthread_self();
            atomic_store(&d->owned, 1);
        }
        pthread_mutex_unlock(&D.lock);
    }
    if (!owner_ok(d))
        return not_owner(fn, d);
    /* a private domain's owner leaving it gives it up */
    if (was->mode == OVL_DOMAIN_PRIVATE && atomic_load(&was->owned) &&
        pthread_equal(was->owner, pthread_self()))
        atomic_store(&was->owned, 0);
    ovl__dom_enter(d);
    return OVL_SUCCESS;
}

int ovl_domain_current(ovl_domain_t *id)
{
    int rc;
    if ((rc = ovl__check_init("ovl_domain_current")))
        return rc;
    if (!id)
        return ovl__error(OVL_ERR_ARG, "ovl_domain_current", "id is NULL");
    *id = ovl__dom_cur()->id;
    return OVL_SUCCESS;
}

/* ---- freeing ----------------------------------------------------------------- */

/* Work of this rank on @d: ops, queued continuations, posted receives,
 * messages nobody received. */
static int pending_on(struct ovl__dom *d)
{
    struct ovl__dom *prev = ovl__dom_enter(d);
    int p =
        ovl__engine_count(-1) > 0 || ovl__engine_sources_active() || ovl__engine_sources_held() > 0;
    ovl__dom_leave(prev);
    return p;
}

int ovl_domains_free(int n, ovl_domain_t ids[])
{
    static const char *fn = "ovl_domains_free";
    int rc;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)))
        return rc;
    int local = OVL_SUCCESS;
    struct ovl__dom **d = NULL;
    unsigned long long hash = 1469598103934665603ull;
    if (n < 0)
        local = ovl__error(OVL_ERR_ARG, fn, "negative count %d", n);
    else if (n > 0 && !ids)
        local = ovl__error(OVL_ERR_ARG, fn, "ids is NULL with n = %d", n);
    else if (n > 0 && !(d = calloc((size_t)n, sizeof *d)))
        local = ovl__error(OVL_ERR_NOMEM, fn, "allocating the domain list");
    for (int i = 0; local == OVL_SUCCESS && i < n; i++) {
        hash = (hash ^ (unsigned)ids[i]) * 1099511628211ull;
        if (ids[i] == 0)
            local = ovl__error(OVL_ERR_ARG, fn, "ids[%d] is domain 0, which ovl_finalize frees", i);
        else if (!(d[i] = ovl__dom_at(ids[i])))
            local = ovl__error(OVL_ERR_ARG, fn, "ids[%d]: no domain %d", i, ids[i]);
        for (int j = 0; local == OVL_SUCCESS && j < i; j++)
            if (ids[j] == ids[i])
                local = ovl__error(OVL_ERR_ARG, fn, "domain %d is listed twice", ids[i]);
    }
    int differs = 0;
    rc = agree(fn, local, (unsigned)n, hash, "nothing freed", &differs);
    if (!rc && differs)
        rc = ovl__error(OVL_ERR_ARG, fn,
                        "the list of domains differs between ranks: every rank must free the "
                        "same domains in the same order");
    if (rc) {
        free(d);
        return rc;
    }
    if (n == 0)
        return OVL_SUCCESS;
    /* Messages still travelling to a domain would be lost with its
     * communicators: learn how many each peer sent on each, then agree
     * that every one was received and nothing is pending anywhere. */
    size_t cells = (size_t)ovl__g.size * (size_t)n;
    unsigned long long *sent = malloc(cells * sizeof *sent),
                       *expected = malloc(cells * sizeof *expected);
    int pending = 0, pending_all = 0;
    if (!sent || !expected) {
        free(sent);
        free(expected);
        free(d);
        return ovl__error(OVL_ERR_NOMEM, fn, "allocating message counts");
    }
    for (int q = 0; q < ovl__g.size; q++)
        for (int i = 0; i < n; i++)
            sent[(size_t)q * (size_t)n + (size_t)i] = atomic_load(&d[i]->sent_to[q]);
    MPI_Request r = MPI_REQUEST_NULL;
    rc = MPI_Ialltoall(sent, n, MPI_UNSIGNED_LONG_LONG, expected, n, MPI_UNSIGNED_LONG_LONG,
                       ovl__g.comm_msg, &r);
    if (rc == MPI_SUCCESS)
        rc = ovl__engine_spin_mpi(&r);
    if (rc == MPI_SUCCESS) {
        /* a message sent here on a domain and not received yet, wherever it
         * is (on its way, or waiting unexpected), is work left */
        for (int i = 0; i < n; i++) {
            pending |= pending_on(d[i]);
            for (int q = 0; q < ovl__g.size; q++)
                pending |=
                    atomic_load(&d[i]->recvd_from[q]) < expected[(size_t)q * (size_t)n + (size_t)i];
        }
        rc = allreduce(&pending, &pending_all, 1, MPI_INT, MPI_MAX);
    }
    free(sent);
    free(expected);
    if (rc != MPI_SUCCESS) {
        free(d);
        return ovl__mpi_error(rc, fn, "MPI_Ialltoall/MPI_Iallreduce");
    }
    if (pending_all) {
        free(d);
        return ovl__error(OVL_ERR_PENDING, fn,
                          "%s work in flight on the domains (operations, posted receives, or "
                          "messages that arrived and were never received): complete it first; "
                          "nothing freed",
                          pending ? "this rank has" : "another rank has");
    }
    ovl__engine_sources_dom_detach(d, n);
    pthread_mutex_lock(&D.lock);
    for (int i = 0; i < n; i++) {
        atomic_store(&D.at[d[i]->id], NULL);
        D.n--;
        D.on_streams -= d[i]->on_stream;
    }
    while (D.hi > 1 && !atomic_load(&D.at[D.hi - 1]))
        D.hi--;
    pthread_mutex_unlock(&D.lock);
    for (int i = 0; i < n; i++)
        dom_release(d[i]);
    free(d);
    return OVL_SUCCESS;
}

/* ---- ovl_init / ovl_finalize ------------------------------------------------- */

int ovl__doms_init(void)
{
    static const char *fn = "ovl_init";
    size_t n = (size_t)ovl__g.size;
    memset(&dom0, 0, sizeof dom0);
    dom0.mode = OVL_DOMAIN_SHARED;
    dom0.comm_msg = ovl__g.comm_msg;
    dom0.comm_stream = ovl__g.comm_stream;
    dom0.comm_frag = ovl__g.comm_frag;
    dom0.comm_delta = ovl__g.comm_delta;
#ifdef OVL_HAVE_MPIX_STREAM
    dom0.stream = MPIX_STREAM_NULL;
#endif
    dom0.eng = ovl__engine0(); /* its sources' state: their own */
    dom0.sent_to = calloc(n, sizeof *dom0.sent_to);
    dom0.recvd_from = calloc(n, sizeof *dom0.recvd_from);
    dom0.headed_to = calloc(n, sizeof *dom0.headed_to);
    if (!dom0.sent_to || !dom0.recvd_from || !dom0.headed_to) {
        ovl__doms_fini();
        return ovl__error(OVL_ERR_NOMEM, fn, "allocating per-rank counters");
    }
    pthread_mutex_lock(&D.lock);
    D.gen[0] = 0;
    atomic_store(&D.at[0], &dom0);
    D.n = 1;
    D.on_streams = 0;
    D.hi = 1;
    pthread_mutex_unlock(&D.lock);
    tls_id = 0;
    return OVL_SUCCESS;
}

/* OVL_DOMAINS=n (threads.domains): domains 1..n-1, shared, for OpenMP
 * codes (ovl_init, once the engine runs). */
int ovl__doms_create_env(void)
{
    static const char *fn = "ovl_init";
    /* collective even when 1: every rank must ask the same */
    int want = (int)ovl__g.cfg.threads.domains, local = OVL_SUCCESS;
    ovl_domain_t *ids = want > 1 ? malloc((size_t)(want - 1) * sizeof *ids) : NULL;
    if (want > 1 && !ids)
        local = ovl__error(OVL_ERR_NOMEM, fn, "OVL_DOMAINS");
    int rc = create(fn, want - 1, OVL_DOMAIN_SHARED, ids, local);
    free(ids);
    return rc;
}

void ovl__doms_fini(void)
{
    pthread_mutex_lock(&D.lock);
    for (int i = 1; i < OVL_DOMAINS_MAX; i++) {
        struct ovl__dom *d = atomic_load(&D.at[i]);
        if (d) {
            atomic_store(&D.at[i], NULL);
            dom_release(d);
        }
    }
    atomic_store(&D.at[0], NULL);
    D.n = 0;
    D.on_streams = 0;
    D.hi = 0;
    pthread_mutex_unlock(&D.lock);
    free(dom0.sent_to);
    free(dom0.recvd_from);
    free(dom0.headed_to);
    dom0.sent_to = dom0.recvd_from = NULL;
    dom0.headed_to = NULL;
    tls_id = 0;
}
