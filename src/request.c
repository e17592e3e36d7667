/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The request table. A handle is not a pointer: it packs a slot index and the
 * slot's generation, so a stale copy of a released handle (double wait,
 * double free) is recognised and rejected with OVL_ERR_REQUEST instead of
 * touching memory that now belongs to another request. Slots live in chunks
 * that never move until ovl_finalize, so lookups need no lock.
 *
 * A lookup alone does not make a handle safe to release: two threads may
 * wait on copies of one handle, or one waits while another frees it. The
 * slot's generation word is therefore also its state, changed only by
 * compare-and-swap from the handle's generation: a caller *pins* the slot
 * (GEN_BUSY) while it decides, then releases it (the next generation),
 * marks it freed by the user (GEN_DETACHED: the engine releases it once
 * complete) or unpins it. Exactly one holder of a handle gets to release
 * its slot; every other gets OVL_ERR_REQUEST.
 *
 * Free slots are cached per thread (up to TCACHE indices, moved to and
 * from the table's free stack TCACHE/2 at a time), so threads posting on
 * domains of their own do not meet on the table's lock for every request.
 * A cache belongs to one table generation (tab.epoch, raised by
 * ovl_finalize): a cache from before is dropped, never used. A thread's
 * cache goes back to the table when the thread exits.
 */
#include "ovl_internal.h"

#include <stddef.h>
#include <stdlib.h>

#define TCACHE 32

_Static_assert(sizeof(uintptr_t) >= 8, "handles pack index and generation in 64 bits");

#define CHUNK_BITS  10
#define CHUNK_SLOTS (1u << CHUNK_BITS)
#define MAX_CHUNKS  4096u /* 4 M live requests */

static struct {
    pthread_mutex_t lock;
    struct ovl__req *_Atomic chunks[MAX_CHUNKS];
    unsigned nchunks;
    uint32_t *free_idx; /* stack of free slot indices */
    unsigned nfree, cap_free;
    /* Generation of fresh slots. Raised past every generation handed out
     * before ovl_finalize, so a handle kept across finalize and a new
     * ovl_init never matches a new request in the same slot. */
    uint32_t first_gen;
    atomic_uint epoch; /* raised at every ovl_finalize: caches of before are void */
} tab = { .lock = PTHREAD_MUTEX_INITIALIZER, .first_gen = 1 };

static _Thread_local struct tcache {
    unsigned epoch, n;
    int keyed; /* the exit hook knows it */
    uint32_t idx[TCACHE];
} tc;
static pthread_key_t tc_key;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;

/* The generation word of a slot: a generation (what handles carry) and two
 * state bits that no handle has. */
#define GEN_BUSY     (1u << 30) /* pinned by a caller that holds its handle */
#define GEN_DETACHED (1u << 31) /* freed by the user before completion */
#define GEN_MASK     (GEN_BUSY - 1u)

static uint32_t gen_next(uint32_t g)
{
    uint32_t n = ((g & GEN_MASK) + 1u) & GEN_MASK;
    return n ? n : 1u;
}

static inline ovl_request_t make_handle(uint32_t idx, uint32_t gen)
{
    return (ovl_request_t)(uintptr_t)(((uint64_t)gen << 32) | (uint64_t)(idx + 1));
}

int ovl__req_table_init(void)
{
    tab.nchunks = 0;
    tab.nfree = 0;
    return OVL_SUCCESS;
}

void ovl__req_table_fini(void)
{
    pthread_mutex_lock(&tab.lock);
    uint32_t max_gen = tab.first_gen;
    for (unsigned i = 0; i < tab.nchunks; i++) {
        struct ovl__req *c = atomic_load(&tab.chunks[i]);
        for (uint32_t k = 0; k < CHUNK_SLOTS; k++)
            if ((c[k].gen & GEN_MASK) > max_gen)
                max_gen = c[k].gen & GEN_MASK;
    }
    tab.first_gen = gen_next(max_gen);
    for (unsigned i = 0; i < tab.nchunks; i++) {
        ovl__page_free(atomic_load(&tab.chunks[i]));
        atomic_store(&tab.chunks[i], NULL);
    }
    tab.nchunks = 0;
    ovl__page_free(tab.free_idx);
    tab.free_idx = NULL;
    tab.nfree = tab.cap_free = 0;
    atomic_fetch_add(&tab.epoch, 1);
    pthread_mutex_unlock(&tab.lock);
}

static struct ovl__req *slot(uint32_t idx)
{
    struct ovl__req *c = atomic_load(&tab.chunks[idx >> CHUNK_BITS]);
    return c ? &c[idx & (CHUNK_SLOTS - 1)] : NULL;
}

static int grow(void)
{
    if (tab.nchunks == MAX_CHUNKS)
        return OVL_ERR_NOMEM;
    /* hundreds of KiB: mapped, never malloc'd (ovl__page_alloc) */
    struct ovl__req *c = ovl__page_alloc(CHUNK_SLOTS * sizeof *c);
    if (!c)
        return OVL_ERR_NOMEM;
    if (tab.cap_free < (tab.nchunks + 1) * CHUNK_SLOTS) {
        unsigned ncap = (tab.nchunks + 1) * CHUNK_SLOTS;
        uint32_t *f = ovl__page_realloc(tab.free_idx, ncap * sizeof *f);
        if (!f) {
            ovl__page_free(c);
            return OVL_ERR_NOMEM;
        }
        tab.free_idx = f;
        tab.cap_free = ncap;
    }
    uint32_t base = tab.nchunks * CHUNK_SLOTS;
    for (uint32_t i = 0; i < CHUNK_SLOTS; i++) {
        c[i].gen = tab.first_gen;
        tab.free_idx[tab.nfree++] = base + CHUNK_SLOTS - 1 - i;
    }
    atomic_store(&tab.chunks[tab.nchunks], c);
    tab.nchunks++;
    return OVL_SUCCESS;
}

/* A thread's exit: its cached slots back to the table (lock not held). */
static void tc_exit(void *arg)
{
    struct tcache *c = arg;
    pthread_mutex_lock(&tab.lock);
    if (c->epoch == atomic_load(&tab.epoch))
        while (c->n)
            tab.free_idx[tab.nfree++] = c->idx[--c->n];
    c->n = 0;
    pthread_mutex_unlock(&tab.lock);
}

static void tc_key_make(void)
{
    if (pthread_key_create(&tc_key, tc_exit) != 0)
        tc_key = (pthread_key_t)-1;
}

/* The calling thread's cache, valid for the table's generation (lock
 * held); NULL when it cannot have one (no exit hook). */
static struct tcache *tc_get_locked(void)
{
    unsigned e = atomic_load(&tab.epoch);
    if (tc.epoch != e) {
        tc.epoch = e;
        tc.n = 0;
    }
    if (!tc.keyed) {
        pthread_once(&tc_once, tc_key_make);
        if (tc_key == (pthread_key_t)-1 || pthread_setspecific(tc_key, &tc) != 0)
            return NULL;
        tc.keyed = 1;
    }
    return &tc;
}

int ovl__req_alloc(int kind, struct ovl__req **out, ovl_request_t *handle)
{
    uint32_t idx;
    if (tc.n > 0 && tc.epoch == atomic_load_explicit(&tab.epoch, memory_order_relaxed)) {
        idx = tc.idx[--tc.n];
    } else {
        pthread_mutex_lock(&tab.lock);
        struct tcache *c = tc_get_locked();
        /* half a cache's worth, the first for this call */
        for (unsigned k = 0; c && k < TCACHE / 2 - 1 && (tab.nfree > 1 || grow() == OVL_SUCCESS);
             k++)
            c->idx[c->n++] = tab.free_idx[--tab.nfree];
        if (tab.nfree == 0 && grow() != OVL_SUCCESS) {
            pthread_mutex_unlock(&tab.lock);
            return OVL_ERR_NOMEM;
        }
        idx = tab.free_idx[--tab.nfree];
        pthread_mutex_unlock(&tab.lock);
    }
    struct ovl__req *r = slot(idx);
    if (!r) /* (a free index names a slot of a chunk that exists) */
        return OVL_ERR_INTERNAL;
    uint32_t gen = __atomic_load_n(&r->gen, __ATOMIC_ACQUIRE);

    memset((char *)r + offsetof(struct ovl__req, kind), 0,
           sizeof *r - offsetof(struct ovl__req, kind));
    r->idx = idx;
    __atomic_store_n(&r->in_use, 1, __ATOMIC_RELEASE);
    r->kind = kind;
    atomic_init(&r->done, 0);
    r->status.source = MPI_PROC_NULL;
    r->status.tag = MPI_ANY_TAG;
    r->op.mreq = MPI_REQUEST_NULL;
    r->op.ctx = r;
    r->dom = ovl__dom_cur();
    *out = r;
    *handle = make_handle(idx, gen);
    return OVL_SUCCESS;
}

static int split_handle(ovl_request_t h, uint32_t *idx, uint32_t *gen)
{
    uint64_t v = (uint64_t)(uintptr_t)h;
    uint32_t idx1 = (uint32_t)(v & 0xffffffffu);
    *gen = (uint32_t)(v >> 32);
    if (idx1 == 0 || idx1 > MAX_CHUNKS * CHUNK_SLOTS || (*gen & ~GEN_MASK) != 0)
        return OVL_ERR_REQUEST;
    *idx = idx1 - 1;
    return OVL_SUCCESS;
}

static uint32_t handle_gen(ovl_request_t h)
{
    return (uint32_t)((uint64_t)(uintptr_t)h >> 32);
}

int ovl__req_lookup(ovl_request_t h, struct ovl__req **out)
{
    uint32_t idx, gen;
    if (split_handle(h, &idx, &gen) != OVL_SUCCESS)
        return OVL_ERR_REQUEST;
    struct ovl__req *r = slot(idx);
    /* Atomic loads: a stale handle may be looked up while another thread
     * releases the slot; the answer is then simply "invalid". A pinned slot
     * is still valid (its pinner may unpin it); a detached one is not. */
    if (!r || !__atomic_load_n(&r->in_use, __ATOMIC_ACQUIRE) ||
        (__atomic_load_n(&r->gen, __ATOMIC_ACQUIRE) & ~GEN_BUSY) != gen)
        return OVL_ERR_REQUEST;
    *out = r;
    return OVL_SUCCESS;
}

/* Pin @r for a holder of generation @g: 1 once pinned, 0 if the slot was
 * released or detached meanwhile. Another holder's pin lasts a few
 * instructions (never across a wait or a lock), so it is waited out. */
static int pin(struct ovl__req *r, uint32_t g)
{
    for (;;) {
        uint32_t cur = g;
        if (__atomic_compare_exchange_n(&r->gen, &cur, g | GEN_BUSY, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return 1;
        if (cur != (g | GEN_BUSY))
            return 0;
        ovl__relax();
    }
}

static void unpin(struct ovl__req *r, uint32_t g)
{
    __atomic_store_n(&r->gen, g, __ATOMIC_RELEASE);
}

int ovl__req_pin(ovl_request_t h, struct ovl__req *r)
{
    return pin(r, handle_gen(h)) ? OVL_SUCCESS : OVL_ERR_REQUEST;
}

void ovl__req_unpin(ovl_request_t h, struct ovl__req *r)
{
    unpin(r, handle_gen(h));
}

/* The front end's hooks: set on the driver for an ovl_irecv that a delta
 * message matched, so read atomically. */
static const struct ovl__req_ops *req_ops(struct ovl__req *r)
{
    return __atomic_load_n(&r->ops, __ATOMIC_ACQUIRE);
}

/* Give the slot back with generation @next. The generation goes first:
 * stale handles fail from here on, and it ends the caller's pin, so no
 * other caller waits on it through what follows (ovl_continue waits under
 * the engine lock, which freeing a delta's monitor state may take). */
static void recycle(struct ovl__req *r, uint32_t next)
{
    __atomic_store_n(&r->gen, next, __ATOMIC_RELEASE);
    const struct ovl__req_ops *ops = req_ops(r);
    if (ops && ops->release)
        ops->release(r);
    __atomic_store_n(&r->in_use, 0, __ATOMIC_RELEASE);
    if (tc.n < TCACHE && tc.epoch == atomic_load_explicit(&tab.epoch, memory_order_relaxed) &&
        tc.keyed) {
        tc.idx[tc.n++] = r->idx;
        return;
    }
    pthread_mutex_lock(&tab.lock);
    struct tcache *c = tc_get_locked();
    tab.free_idx[tab.nfree++] = r->idx;
    /* a full cache keeps half */
    while (c && c->n > TCACHE / 2)
        tab.free_idx[tab.nfree++] = c->idx[--c->n];
    pthread_mutex_unlock(&tab.lock);
}

/* The owner's release: a request whose handle was never handed out, or one
 * the user detached (nobody else can pin it). */
void ovl__req_release(struct ovl__req *r)
{
    recycle(r, gen_next(__atomic_load_n(&r->gen, __ATOMIC_ACQUIRE)));
}

/* ---- public request calls ------------------------------------------------ */

enum { CLAIM_OK, CLAIM_NOT_DONE, CLAIM_GONE };

/* Claim a request for release by a holder of generation @g: CLAIM_OK (it
 * is complete and stays pinned: take_status releases it), CLAIM_NOT_DONE
 * (not complete: a continuation registered after the completion runs
 * first), CLAIM_GONE (another call released or freed it). */
static int claim(struct ovl__req *r, uint32_t g)
{
    if (!pin(r, g))
        return CLAIM_GONE;
    if (!atomic_load_explicit(&r->done, memory_order_acquire)) {
        unpin(r, g);
        return CLAIM_NOT_DONE;
    }
    return CLAIM_OK;
}

/* Claimed: hand out the status and release the slot; @fn returns the
 * operation's error (under OVL_ERRORS=fatal, one that ovl__error already
 * recorded has aborted: this catches the others). */
static int take_status(const char *fn, struct ovl__req *r, uint32_t g, ovl_status_t *status)
{
    int err = r->status.error;
    if (status)
        *status = r->status;
    recycle(r, gen_next(g));
    return ovl__error_returned(err, fn);
}

static void empty_status(ovl_status_t *status)
{
    if (status) {
        status->source = MPI_PROC_NULL;
        status->tag = MPI_ANY_TAG;
        status->bytes = 0;
        status->error = OVL_SUCCESS;
    }
}

static int lookup_checked(const char *fn, ovl_request_t h, struct ovl__req **r)
{
    /* (a request freed with ovl_request_free is detached: its generation
     * word no longer matches, so the lookup refuses it too) */
    if (ovl__req_lookup(h, r) != OVL_SUCCESS)
        return ovl__error(OVL_ERR_REQUEST, fn,
                          "request handle %p was never issued or was already released "
                          "(waited on, tested complete or freed)",
                          (void *)h);
    return OVL_SUCCESS;
}

static int gone(const char *fn, ovl_request_t h)
{
    return ovl__error(OVL_ERR_REQUEST, fn,
                      "request %p was released by another call (ovl_wait, ovl_test or "
                      "ovl_request_free on a copy of the handle) while this one used it",
                      (void *)h);
}

struct waiter {
    struct ovl__req *r;
    uint32_t gen;
};

/* Complete, or no longer this generation's (released or detached by
 * another call): the generation word is read first, so a slot released
 * meanwhile is not read further. */
static int wait_over(const void *p)
{
    const struct waiter *w = p;
    if ((__atomic_load_n(&w->r->gen, __ATOMIC_ACQUIRE) & ~GEN_BUSY) != w->gen)
        return 1;
    return atomic_load_explicit(&w->r->done, memory_order_acquire);
}

/* ovl__engine_wait until r->done, which also stops if another call
 * releases the request meanwhile. */
static void wait_done(struct ovl__req *r, uint32_t g)
{
    struct waiter w = { r, g };
    if (!wait_over(&w))
        ovl__engine_wait(wait_over, &w);
}

static int wait_entered(const char *fn, ovl_request_t *req, ovl_status_t *status,
                        struct ovl__req *r);

/* ovl_wait, its errors recorded as @fn's. */
static int wait_one(const char *fn, ovl_request_t *req, ovl_status_t *status)
{
    int rc;
    struct ovl__req *r = NULL;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (!req)
        return ovl__error(OVL_ERR_ARG, fn, "request pointer is NULL");
    if (*req == OVL_REQUEST_NULL) {
        empty_status(status);
        return OVL_SUCCESS;
    }
    if ((rc = lookup_checked(fn, *req, &r)))
        return rc;
    /* the request's domain drives it, whichever thread waits */
    struct ovl__dom *prev;
    if ((rc = ovl__dom_enter_checked(fn, r->dom, &prev)))
        return rc;
    rc = wait_entered(fn, req, status, r);
    ovl__dom_leave(prev);
    return rc;
}

static int wait_entered(const char *fn, ovl_request_t *req, ovl_status_t *status,
                        struct ovl__req *r)
{
    int rc;
    ovl_request_t h = *req;
    uint32_t g = handle_gen(h);
    if (!atomic_load_explicit(&r->done, memory_order_acquire)) {
        if ((rc = ovl__check_not_in_callback(fn)))
            return rc;
        const struct ovl__req_ops *ops = req_ops(r);
        if (ops && ops->unfinished)
            ops->unfinished(r); /* ovl_wait implies ovl_delta_send_end */
    }
    int c;
    for (;;) {
        wait_done(r, g);
        if ((c = claim(r, g)) != CLAIM_NOT_DONE)
            break;
        /* a continuation registered after the completion runs first */
        if ((rc = ovl__check_not_in_callback(fn)))
            return rc;
    }
    if (c == CLAIM_GONE)
        return gone(fn, h);
    *req = OVL_REQUEST_NULL;
    return take_status(fn, r, g, status);
}

int ovl_wait(ovl_request_t *req, ovl_status_t *status)
{
    return wait_one("ovl_wait", req, status);
}

int ovl_test(ovl_request_t *req, int *flag, ovl_status_t *status)
{
    static const char *fn = "ovl_test";
    int rc;
    struct ovl__req *r;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (!req || !flag)
        return ovl__error(OVL_ERR_ARG, fn, "%s pointer is NULL", req ? "flag" : "request");
    if (*req == OVL_REQUEST_NULL) {
        empty_status(status);
        *flag = 1;
        return OVL_SUCCESS;
    }
    if ((rc = lookup_checked(fn, *req, &r)))
        return rc;
    ovl_request_t h = *req;
    uint32_t g = handle_gen(h);
    if (!atomic_load_explicit(&r->done, memory_order_acquire)) {
        struct ovl__dom *prev;
        if ((rc = ovl__dom_enter_checked(fn, r->dom, &prev)))
            return rc;
        const struct ovl__req_ops *ops = req_ops(r);
        if (ops && ops->unfinished)
            ops->unfinished(r);
        ovl__engine_drive();
        ovl__dom_leave(prev);
    }
    struct waiter w = { r, g };
    int c = wait_over(&w) ? claim(r, g) : CLAIM_NOT_DONE;
    if (c == CLAIM_GONE)
        return gone(fn, h);
    if (c == CLAIM_NOT_DONE) {
        *flag = 0;
        return OVL_SUCCESS;
    }
    *flag = 1;
    *req = OVL_REQUEST_NULL;
    return take_status(fn, r, g, status);
}

int ovl_waitall(int count, ovl_request_t reqs[], ovl_status_t statuses[])
{
    static const char *fn = "ovl_waitall";
    int rc, nfailed = 0, first = -1, first_rc = OVL_SUCCESS;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (count < 0)
        return ovl__error(OVL_ERR_ARG, fn, "negative count %d", count);
    if (count > 0 && !reqs)
        return ovl__error(OVL_ERR_ARG, fn, "request array is NULL");
    /* From a callback, a request not complete yet refuses the whole call
     * before any request is touched. */
    for (int i = 0; i < count; i++) {
        struct ovl__req *r;
        if (reqs[i] != OVL_REQUEST_NULL && ovl__req_lookup(reqs[i], &r) == OVL_SUCCESS &&
            !atomic_load_explicit(&r->done, memory_order_acquire) &&
            (rc = ovl__check_not_in_callback(fn)))
            return rc;
    }
    /* As MPI_Waitall: one request's failure (a stale handle, an operation
     * that failed) stops none of the others, each status says how its
     * request ended, and the call says that some failed. */
    for (int i = 0; i < count; i++) {
        ovl_status_t st;
        empty_status(&st);
        if ((rc = wait_one(fn, &reqs[i], &st)) != OVL_SUCCESS) {
            st.error = rc;
            if (nfailed++ == 0) {
                first = i;
                first_rc = rc;
            }
        }
        if (statuses)
            statuses[i] = st;
    }
    if (nfailed == 0)
        return OVL_SUCCESS;
    return ovl__error(OVL_ERR_IN_STATUS, fn,
                      "%d of %d requests failed, the first reqs[%d] with %s: each status has its "
                      "error; the others completed and were released",
                      nfailed, count, first, ovl_strerror(first_rc));
}

static int free_entered(const char *fn, ovl_request_t *req, struct ovl__req *r);

int ovl_request_free(ovl_request_t *req)
{
    static const char *fn = "ovl_request_free";
    int rc;
    struct ovl__req *r = NULL;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (!req)
        return ovl__error(OVL_ERR_ARG, fn, "request pointer is NULL");
    if (*req == OVL_REQUEST_NULL)
        return ovl__error(OVL_ERR_REQUEST, fn, "request is OVL_REQUEST_NULL");
    if ((rc = lookup_checked(fn, *req, &r)))
        return rc;
    struct ovl__dom *prev;
    if ((rc = ovl__dom_enter_checked(fn, r->dom, &prev)))
        return rc;
    rc = free_entered(fn, req, r);
    ovl__dom_leave(prev);
    return rc;
}

static int free_entered(const char *fn, ovl_request_t *req, struct ovl__req *r)
{
    ovl_request_t h = *req;
    uint32_t g = handle_gen(h);
    const struct ovl__req_ops *ops = req_ops(r);
    if (ops && ops->unfinished && !atomic_load(&r->done))
        ops->unfinished(r); /* nobody could end it after this */
    /* Under the engine lock `done` cannot change (completion publishes it,
     * and ovl_continue withdraws it, under this lock). */
    ovl__engine_lock();
    if (!pin(r, g)) {
        ovl__engine_unlock();
        return gone(fn, h);
    }
    int done = atomic_load(&r->done);
    if (!done) {
        r->detached = 1; /* released by the engine once complete */
        __atomic_store_n(&r->gen, g | GEN_DETACHED, __ATOMIC_RELEASE);
    }
    ovl__engine_unlock();
    if (done)
        recycle(r, gen_next(g));
    *req = OVL_REQUEST_NULL;
    return OVL_SUCCESS;
}

int ovl_progress(void)
{
    int rc;
    if ((rc = ovl__check_init("ovl_progress")))
        return rc;
    ovl__engine_drive();
    return OVL_SUCCESS;
}
