/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Segments: the memory each rank exposes to ovl_get/ovl_put. A segment is
 * an MPI-3 RMA window (MPI_Win_allocate) on a private duplicate of ovl's
 * communicator, opened for passive-target access (MPI_Win_lock_all) for
 * its whole life, so a transfer never needs the target's cooperation in
 * the program -- only in MPI's progress, which the engine provides
 * (ovl__rma_poll: while a segment exists the progress thread keeps polling
 * instead of sleeping, so a computing target still answers over TCP or
 * shared memory, where one-sided operations are emulated with messages).
 *
 * Serving is needed only where MPI moves one-sided traffic through the
 * target's progress (TCP, MPICH's shared memory); where the network or a
 * shared-memory window does it alone (RDMA, Open MPI on one node), polling
 * would only take wake-ups from the computation. The first segment's
 * creation measures which (probe_serving) unless OVL_SERVE_US is set.
 *
 * Handles are (slot, generation) pairs like requests, so a freed segment
 * is reported as such instead of being dereferenced. Every rank's size is
 * gathered at creation: a transfer beyond the target's size is refused at
 * the origin instead of failing inside MPI. A hidden 8-byte word after each
 * rank's bytes holds ovl_lock's ticket lock (fetch-and-add on the
 * target), and 64 bytes after it the serving probe's words.
 */
#include "ovl_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SEGS 256 /* live segments at once (ovl.h says so) */
/* largest part of a segment one rank may ask for (ovl.h says so): 64 TiB */
#define MAX_SEG_BYTES ((size_t)1 << 46)
/* The serving probe: its words after the lock word, and how long the
 * target stays out of MPI (with nothing arrived; with the first steps
 * arrived). */
#define PROBE_BYTES     64
#define PROBE_MARK      0x6f766c2d70726f62ull /* "ovl-prob" */
#define PROBE_TARGET_US 5000.0
#define PROBE_LATE_US   50000.0
#define PROBE_TAG       1 /* on S.comm */

static struct {
    pthread_mutex_t lock;
    struct ovl__seg *v[MAX_SEGS];
    uint32_t gen[MAX_SEGS];
    MPI_Comm comm; /* windows and the progress probe */
    atomic_int nlive;
    /* whether this rank serves while a segment lives (polls MPI for other
     * ranks' one-sided operations), decided by the probe at the first
     * segment after ovl_init (probed), and that decision in words for
     * OVL_VERBOSE and OVL_STATS; all kept until the end of ovl_finalize */
    atomic_int serving;
    int probed;
    char said[96];
    /* ovl_lock held by this rank: (slot, rank) pairs, few */
    struct {
        int slot, rank;
        uint32_t ticket; /* its ticket, the lock word's serving count */
    } held[64];
    int nheld;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER, .comm = MPI_COMM_NULL };

static ovl_segment_t make_handle(uint32_t slot, uint32_t gen)
{
    return (ovl_segment_t)(uintptr_t)(((uint64_t)gen << 32) | (slot + 1));
}

struct ovl__seg *ovl__seg_find(ovl_segment_t h)
{
    uint64_t v = (uint64_t)(uintptr_t)h;
    uint32_t s1 = (uint32_t)(v & 0xffffffffu), gen = (uint32_t)(v >> 32);
    struct ovl__seg *s = NULL;
    pthread_mutex_lock(&S.lock);
    if (s1 >= 1 && s1 <= MAX_SEGS && S.gen[s1 - 1] == gen && S.v[s1 - 1] && S.v[s1 - 1]->live)
        s = S.v[s1 - 1];
    pthread_mutex_unlock(&S.lock);
    return s;
}

int ovl__seg_lookup(const char *fn, ovl_segment_t h, struct ovl__seg **out)
{
    if (h == OVL_SEGMENT_NULL)
        return ovl__error(OVL_ERR_ARG, fn, "segment is OVL_SEGMENT_NULL");
    struct ovl__seg *s = ovl__seg_find(h);
    if (!s)
        return ovl__error(OVL_ERR_ARG, fn, "segment %p was freed or never created", (void *)h);
    *out = s;
    return OVL_SUCCESS;
}

int ovl__rma_wants_progress(void)
{
    return atomic_load_explicit(&S.nlive, memory_order_relaxed) > 0 &&
           atomic_load_explicit(&S.serving, memory_order_relaxed);
}

int ovl__rma_serving(void)
{
    return atomic_load(&S.serving);
}

const char *ovl__rma_serving_said(void)
{
    return S.said[0] ? S.said : "no segment created";
}

/* Where @rank keeps its lock word (after its own bytes). */
static MPI_Aint lock_disp(const struct ovl__seg *s, int rank)
{
    return (MPI_Aint)((s->sizes[rank] + 7) / 8 * 8);
}

/* ---- the serving probe ------------------------------------------------------
 * Whether other ranks' one-sided operations on this rank's memory complete
 * while it makes no MPI call. One origin/target pair: the target holds the
 * engine (none of its threads calls MPI through ovl), tells the origin to
 * go as its last MPI call (a target still inside the barrier before would
 * serve it) and watches its memory for up to PROBE_TARGET_US (longer if
 * the first steps arrived, below); the origin gets 48 bytes and
 * waits, adds 1 to a counter (MPI_Fetch_and_op, as ovl_unlock) and
 * flushes, then puts a mark and flushes. The pair needs no serving only
 * if the target finds the mark and the count in its memory before it
 * calls MPI again: each step waited for the one before, so all completed
 * without it. An origin too slow even for the extended watch finds its
 * operations served after the target gave up, and the target votes for
 * serving: the probe's errors only ever keep serving on.
 * No MPI_Compare_and_swap (ovl_lock's): Open MPI 4.1's default one-sided
 * component over shared memory (osc/rdma on btl/vader) crashes on it, and
 * the probe runs in every first ovl_segment_create. Collective over
 * S.comm; returns this rank's vote (1: serving is needed). */
static int probe_pair(struct ovl__seg *s, int origin, int target)
{
    int me = ovl__g.rank, vote = 0;
    MPI_Aint at = lock_disp(s, target) + 8; /* the target's size, not this rank's */
    uint64_t *words = (uint64_t *)(void *)(s->base + s->lock_at + 8);
    MPI_Request r;
    if (me == target) {
        ovl__engine_hold();
        /* its last MPI call before the sleep: the origin starts only now
         * (a target still in the barrier would serve it) */
        if (MPI_Send(&vote, 1, MPI_INT, origin, PROBE_TAG, S.comm) != MPI_SUCCESS)
            vote = 1;
        /* Watch the memory, out of MPI: the mark ends the probe at once.
         * A count without the mark after PROBE_TARGET_US means the first
         * steps went through without this rank and the origin is slow (a
         * busy machine): give it up to PROBE_LATE_US. Nothing at all means
         * MPI waits for this rank. */
        double t0 = ovl__now_us(), dt = 0;
        int seen = 0;
        while (!(seen = __atomic_load_n(&words[0], __ATOMIC_ACQUIRE) == PROBE_MARK) &&
               ((dt = ovl__now_us() - t0) < PROBE_TARGET_US ||
                (dt < PROBE_LATE_US && __atomic_load_n(&words[1], __ATOMIC_ACQUIRE) == 1))) {
            struct timespec ts = { 0, 100000 };
            nanosleep(&ts, NULL);
        }
        vote |= !(seen && __atomic_load_n(&words[1], __ATOMIC_ACQUIRE) == 1);
        ovl__engine_release();
    } else if (me == origin) {
        uint64_t mark = PROBE_MARK, one = 1, old = 0;
        char got[PROBE_BYTES - 16];
        MPI_Request q = MPI_REQUEST_NULL;
        MPI_Status st;
        int go = 0;
        if (MPI_Recv(&go, 1, MPI_INT, target, PROBE_TAG, S.comm, &st) != MPI_SUCCESS ||
            MPI_Rget(got, (int)sizeof got, MPI_BYTE, target, at + 16, (int)sizeof got, MPI_BYTE,
                     s->win, &q) != MPI_SUCCESS ||
            MPI_Wait(&q, &st) != MPI_SUCCESS ||
            MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, target, at + 8, MPI_SUM, s->win) !=
                MPI_SUCCESS ||
            MPI_Win_flush(target, s->win) != MPI_SUCCESS ||
            MPI_Put(&mark, 8, MPI_BYTE, target, at, 8, MPI_BYTE, s->win) != MPI_SUCCESS ||
            MPI_Win_flush(target, s->win) != MPI_SUCCESS)
            vote = 1;
    }
    if (MPI_Ibarrier(S.comm, &r) != MPI_SUCCESS || ovl__engine_spin_mpi(&r) != MPI_SUCCESS)
        vote = 1;
    if (me == target)
        memset(words, 0, PROBE_BYTES);
    return vote;
}

/* Decide, once per ovl_init, whether a rank with a live segment serves:
 * probe one pair of ranks on different nodes (rank 0 and the first rank
 * off its node) and one pair on the same node, where they exist, since
 * MPI may take different paths for the two. Collective. */
static void probe_serving(struct ovl__seg *s)
{
    int n = ovl__g.size, off = -1, a = -1, b = -1;
    for (int i = 1; i < n && off < 0; i++)
        if (ovl__g.node_of[i] != ovl__g.node_of[0])
            off = i;
    for (int i = 0; i < n && a < 0; i++)
        for (int j = i + 1; j < n; j++)
            if (ovl__g.node_of[j] == ovl__g.node_of[i]) {
                a = i;
                b = j;
                break;
            }
    double t0 = ovl__now_us();
    int vote = 0, need = 0;
    if (off >= 0)
        vote |= probe_pair(s, 0, off);
    if (a >= 0)
        vote |= probe_pair(s, a, b);
    MPI_Request r;
    if (MPI_Iallreduce(&vote, &need, 1, MPI_INT, MPI_MAX, S.comm, &r) != MPI_SUCCESS ||
        ovl__engine_spin_mpi(&r) != MPI_SUCCESS)
        need = 1;
    S.probed = 1;
    atomic_store(&S.serving, need || !ovl__g.serve_auto);
    snprintf(S.said, sizeof S.said, "%s (probe: MPI %s the target's calls, %.1f ms)",
             !ovl__g.serve_auto ? "yes, OVL_SERVE_US is set"
             : need             ? "yes"
                                : "no",
             need ? "needs" : "does without", (ovl__now_us() - t0) / 1e3);
    ovl__info("segments: serving others' gets and puts while a segment lives: %s", S.said);
}

int ovl__rma_poll(void)
{
    if (!ovl__rma_wants_progress())
        return 0;
    /* Any MPI call runs the library's progress; a probe on a communicator
     * nobody sends on is the cheapest that is always valid. */
    int flag = 0;
    if (pthread_mutex_trylock(&S.lock) != 0)
        return 0; /* a segment is being created or freed: next time */
    if (S.comm != MPI_COMM_NULL)
        MPI_Iprobe(MPI_ANY_SOURCE, 0, S.comm, &flag, MPI_STATUS_IGNORE);
    pthread_mutex_unlock(&S.lock);
    return 0;
}

static void serving_forget(void)
{
    S.probed = 0; /* measured again after the next ovl_init */
    atomic_store(&S.serving, 0);
    S.said[0] = 0;
}

static int seg_dom_attach(struct ovl__dom *const *d, int n);
static void seg_dom_detach(struct ovl__dom *const *d, int n);

const struct ovl__source ovl__rma_source = {
    .name = "rma",
    .poll = ovl__rma_poll,
    .serving = ovl__rma_wants_progress,
    .close = ovl__rma_finalize,
    .forget = serving_forget,
    .dom_attach = seg_dom_attach,
    .dom_detach = seg_dom_detach,
};

/* Agree on failure before the next collective, so that no rank returns
 * while the others wait in it: every rank passes its own error (@mine, 0
 * if none; recorded already) and @flag (ORed over the ranks into *@any);
 * returns 0 if no rank failed, else @mine on a rank that failed and the
 * failing rank's code on the others. An MPI failure of the agreement
 * itself is returned as such (nothing can be agreed then). */
static int agree(const char *fn, MPI_Comm comm, int mine, int flag, int *any)
{
    /* the code (negated, so the maximum is the lowest code), the highest
     * failing rank + 1, the flag */
    int v[3] = { -mine, mine ? ovl__g.rank + 1 : 0, flag != 0 }, all[3] = { 0, 0, 0 };
    MPI_Request r;
    int mrc = MPI_Iallreduce(v, all, 3, MPI_INT, MPI_MAX, comm, &r);
    if (mrc == MPI_SUCCESS)
        mrc = ovl__engine_spin_mpi(&r);
    if (mrc != MPI_SUCCESS)
        return mine ? mine : ovl__mpi_error(mrc, fn, "MPI_Iallreduce (agreeing on failure)");
    if (any)
        *any = all[2];
    if (!all[0] || mine)
        return mine;
    return ovl__error(-all[0], fn, "rank %d could not create its part of the segment (%s)",
                      all[1] - 1, ovl_strerror(-all[0]));
}

/* ---- one window per domain -------------------------------------------------
 * Every domain reaches a segment through a window of its own over the same
 * memory (MPI_Win_create on the segment's communicator), so its transfers,
 * flushes and MPI's per-window state are its own; ovl_lock's atomics stay
 * on domain 0's window, the only one MPI makes them atomic in. */

MPI_Win ovl__seg_win(const struct ovl__seg *s, const struct ovl__dom *d)
{
    MPI_Win w = d && d->id > 0 ? s->dwin[d->id] : MPI_WIN_NULL;
    return w != MPI_WIN_NULL ? w : s->win;
}

/* S.lock held (or @s not shared yet) when @d is NULL: the windows may change */
static int flush_locked(struct ovl__seg *s, const struct ovl__dom *d, int rank)
{
    if (d) {
        MPI_Win w = ovl__seg_win(s, d);
        return rank < 0 ? MPI_Win_flush_all(w) : MPI_Win_flush(rank, w);
    }
    int rc = MPI_SUCCESS;
    for (int i = 0; i < OVL_DOMAINS_MAX && rc == MPI_SUCCESS; i++)
        if (s->dwin[i] != MPI_WIN_NULL)
            rc = rank < 0 ? MPI_Win_flush_all(s->dwin[i]) : MPI_Win_flush(rank, s->dwin[i]);
    return rc;
}

int ovl__seg_flush(struct ovl__seg *s, const struct ovl__dom *d, int rank)
{
    if (d)
        return flush_locked(s, d, rank);
    pthread_mutex_lock(&S.lock);
    int rc = flush_locked(s, NULL, rank);
    pthread_mutex_unlock(&S.lock);
    return rc;
}

/* Free @s's window of domain @id (collective). */
static void win_free(struct ovl__seg *s, int id)
{
    pthread_mutex_lock(&S.lock);
    MPI_Win w = s->dwin[id];
    s->dwin[id] = MPI_WIN_NULL;
    pthread_mutex_unlock(&S.lock);
    if (w != MPI_WIN_NULL) {
        MPI_Win_unlock_all(w);
        MPI_Win_free(&w);
    }
}

/* Windows of @s for domains @ids[0..n) (collective: every rank takes
 * every step, then agrees). On failure none is left: each window every
 * rank has is freed, any other left to MPI_Finalize (MPI_Win_free is
 * collective). */
static int wins_make(struct ovl__seg *s, const int *ids, int n, const char *fn)
{
    int bad = OVL_SUCCESS, lacks = 0, any = 0;
    MPI_Win *w = malloc((size_t)n * sizeof *w);
    int *locked = calloc((size_t)n, sizeof *locked);
    if (!w || !locked)
        bad = ovl__error(OVL_ERR_NOMEM, fn, "no memory for %d windows", n);
    for (int i = 0; i < n; i++) {
        MPI_Win wi = MPI_WIN_NULL;
        int mrc = MPI_Win_create(s->base, (MPI_Aint)s->win_bytes, 1, MPI_INFO_NULL, S.comm, &wi);
        if (mrc != MPI_SUCCESS) {
            lacks = 1;
            if (!bad)
                bad = ovl__mpi_error(mrc, fn,
                                     "MPI_Win_create of a domain's window (MPI may have run out "
                                     "of communicator contexts: one per window)");
        } else {
            MPI_Win_set_errhandler(wi, MPI_ERRORS_RETURN);
            if ((mrc = MPI_Win_lock_all(MPI_MODE_NOCHECK, wi)) != MPI_SUCCESS && !bad)
                bad = ovl__mpi_error(mrc, fn, "MPI_Win_lock_all");
        }
        if (w) {
            w[i] = wi;
            locked[i] = wi != MPI_WIN_NULL && mrc == MPI_SUCCESS;
        }
    }
    int rc = agree(fn, S.comm, bad, lacks || !w, &any);
    if (rc && w && any) {
        /* free each window every rank has (the others are left to
         * MPI_Finalize): which, by one MPI_MIN over the ranks */
        MPI_Request r;
        for (int i = 0; i < n; i++)
            locked[i] = (locked[i] ? 2 : 0) | (w[i] != MPI_WIN_NULL);
        int *all = malloc((size_t)n * sizeof *all);
        if (all && MPI_Iallreduce(locked, all, n, MPI_INT, MPI_MIN, S.comm, &r) == MPI_SUCCESS &&
            ovl__engine_spin_mpi(&r) == MPI_SUCCESS)
            for (int i = 0; i < n; i++) {
                if (locked[i] & 2)
                    MPI_Win_unlock_all(w[i]);
                if (all[i] & 1)
                    MPI_Win_free(&w[i]);
            }
        free(all);
    } else if (rc && w) {
        for (int i = 0; i < n; i++) {
            if (locked[i])
                MPI_Win_unlock_all(w[i]);
            if (w[i] != MPI_WIN_NULL)
                MPI_Win_free(&w[i]);
        }
    } else if (!rc) {
        pthread_mutex_lock(&S.lock);
        for (int i = 0; i < n; i++)
            s->dwin[ids[i]] = w[i];
        pthread_mutex_unlock(&S.lock);
    }
    free(w);
    free(locked);
    return rc;
}

/* The live segments in slot order (the same on every rank). */
static int live_segs(struct ovl__seg **v)
{
    int n = 0;
    pthread_mutex_lock(&S.lock);
    for (int i = 0; i < MAX_SEGS; i++)
        if (S.v[i])
            v[n++] = S.v[i];
    pthread_mutex_unlock(&S.lock);
    return n;
}

static int *ids_of(struct ovl__dom *const *d, int n)
{
    int *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    for (int i = 0; ids && i < n; i++)
        ids[i] = d[i]->id;
    return ids;
}

/* ovl_domains_create (collective): windows of every live segment for the
 * new domains. */
static int seg_dom_attach(struct ovl__dom *const *d, int n)
{
    static const char *fn = "ovl_domains_create";
    struct ovl__seg *v[MAX_SEGS];
    int nv = live_segs(v), rc = OVL_SUCCESS, any = 0;
    if (!nv)
        return OVL_SUCCESS;
    int *ids = ids_of(d, n);
    if ((rc = agree(fn, S.comm, ids ? 0 : ovl__error(OVL_ERR_NOMEM, fn, "no memory"), 0, &any))) {
        free(ids);
        return rc;
    }
    for (int k = 0; k < nv; k++)
        if ((rc = wins_make(v[k], ids, n, fn))) {
            while (k-- > 0)
                for (int i = 0; i < n; i++)
                    win_free(v[k], ids[i]);
            break;
        }
    free(ids);
    return rc;
}

/* ovl_domains_free (collective; nothing is in flight on the domains). */
static void seg_dom_detach(struct ovl__dom *const *d, int n)
{
    struct ovl__seg *v[MAX_SEGS];
    int nv = live_segs(v);
    for (int k = 0; k < nv; k++)
        for (int i = 0; i < n; i++)
            win_free(v[k], d[i]->id);
}

static int segment_create_dom0(size_t bytes, void **base, ovl_segment_t *seg)
{
    static const char *fn = "ovl_segment_create";
    int rc, bad = 0, any = 0, mrc;
    /* These two cannot be agreed on (no communicator; a callback must not
     * block): every rank gets them alike when every rank calls alike. */
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)))
        return rc;
    /* Every failure below is agreed on by all ranks before the next
     * collective (agree()), so each rank returns an error instead of some
     * waiting forever in a collective the others have left. */
    if (!base || !seg)
        bad = ovl__error(OVL_ERR_ARG, fn, "%s is NULL", base ? "seg" : "base");
    else if (bytes > MAX_SEG_BYTES)
        bad = ovl__error(OVL_ERR_ARG, fn, "segment of %zu bytes is too large (at most %zu)", bytes,
                         (size_t)MAX_SEG_BYTES);
    struct ovl__seg *s = calloc(1, sizeof *s);
    size_t *sizes = calloc((size_t)ovl__g.size, sizeof *sizes);
    unsigned long long mine = bytes, *all = calloc((size_t)ovl__g.size, sizeof *all);
    MPI_Win *dwin = malloc(OVL_DOMAINS_MAX * sizeof *dwin);
    int *ids = malloc(OVL_DOMAINS_MAX * sizeof *ids);
    for (int i = 0; dwin && i < OVL_DOMAINS_MAX; i++)
        dwin[i] = MPI_WIN_NULL;
    if ((!s || !sizes || !all || !dwin || !ids) && !bad)
        bad = ovl__error(OVL_ERR_NOMEM, fn, "no memory for a segment");
    pthread_mutex_lock(&S.lock);
    int slot = -1, dup = S.comm == MPI_COMM_NULL; /* the same on every rank */
    for (int i = 0; i < MAX_SEGS && slot < 0; i++)
        if (!S.v[i])
            slot = i;
    pthread_mutex_unlock(&S.lock);
    if (slot < 0 && !bad)
        bad = ovl__error(OVL_ERR_NOMEM, fn, "more than %d segments", MAX_SEGS);
    /* The first segment's communicator: collective, so every rank makes it
     * (even one that failed above); kept only if every rank has it. */
    MPI_Comm c = S.comm;
    if (dup) {
        if ((mrc = MPI_Comm_dup(ovl__g.comm_msg, &c)) == MPI_SUCCESS) {
            MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
        } else {
            c = MPI_COMM_NULL;
            if (!bad)
                bad = ovl__mpi_error(mrc, fn, "MPI_Comm_dup");
        }
    }
    rc = agree(fn, ovl__g.comm_msg, bad, dup && c == MPI_COMM_NULL, &any);
    if (dup && c != MPI_COMM_NULL) {
        pthread_mutex_lock(&S.lock);
        if (!any) /* every rank has it: keep it for later segments */
            S.comm = c;
        pthread_mutex_unlock(&S.lock);
        if (any) /* some rank has none (MPI frees a communicator locally) */
            MPI_Comm_free(&c);
    }
    if (rc)
        goto fail_alloc;

    /* From here every rank takes every collective step, and a failure is
     * agreed on after the window's creation. */
    MPI_Request r;
    if ((mrc = MPI_Iallgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG,
                              S.comm, &r)) != MPI_SUCCESS ||
        (mrc = ovl__engine_spin_mpi(&r)) != MPI_SUCCESS)
        bad = ovl__mpi_error(mrc, fn, "MPI_Iallgather of the sizes");
    for (int i = 0; i < ovl__g.size; i++)
        sizes[i] = (size_t)all[i];
    free(all);
    all = NULL;
    s->bytes = bytes;
    s->sizes = sizes;
    s->lock_at = (bytes + 7) / 8 * 8;
    s->decomp = 1; /* ovl_segment_hint's defaults (ovl.h) */
    s->order = OVL_ORDER_RANDOM;
    void *b = NULL;
    /* whole cache lines: MPICH 4.0 (ch4, shared memory) misplaces remote
     * displacements when the ranks' sizes are not multiples of 16 */
    s->win_bytes = (s->lock_at + 8 + PROBE_BYTES + 63) / 64 * 64;
    mrc = MPI_Win_allocate((MPI_Aint)s->win_bytes, 1, MPI_INFO_NULL, S.comm, &b, &s->win);
    int have_win = mrc == MPI_SUCCESS, locked = 0;
    if (!have_win) {
        bad = bad ? bad : ovl__mpi_error(mrc, fn, "MPI_Win_allocate");
    } else {
        MPI_Win_set_errhandler(s->win, MPI_ERRORS_RETURN);
        s->base = b;
        memset(s->base + s->lock_at, 0, 8 + PROBE_BYTES);
        if ((mrc = MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win)) == MPI_SUCCESS)
            locked = 1;
        else if (!bad)
            bad = ovl__mpi_error(mrc, fn, "MPI_Win_lock_all");
    }
    /* Agreed on by every rank; also the barrier after which every rank's
     * lock word is zero, before anyone may lock it. */
    if ((rc = agree(fn, S.comm, bad, !have_win, &any))) {
        if (locked)
            MPI_Win_unlock_all(s->win);
        /* MPI_Win_free is collective: only where every rank has the window
         * (else this rank's part is left to MPI_Finalize) */
        if (have_win && !any)
            MPI_Win_free(&s->win);
        goto fail_alloc;
    }
    /* A window over the same memory for every other domain (reachability:
     * a domain's transfers and flushes are its own). */
    s->dwin = dwin;
    s->dwin[0] = s->win;
    int nd = 0;
    for (int i = 1; i < OVL_DOMAINS_MAX; i++)
        if (ovl__dom_at(i))
            ids[nd++] = i;
    if (nd && (rc = wins_make(s, ids, nd, fn))) {
        MPI_Win_unlock_all(s->win);
        MPI_Win_free(&s->win);
        goto fail_alloc;
    }
    free(ids);
    ids = NULL;
    if (!S.probed) /* the same on every rank: segments are collective */
        probe_serving(s);
    pthread_mutex_lock(&S.lock);
    s->slot = (uint32_t)slot;
    s->gen = ++S.gen[slot] ? S.gen[slot] : ++S.gen[slot];
    s->live = 1;
    S.v[slot] = s;
    pthread_mutex_unlock(&S.lock);
    atomic_fetch_add(&S.nlive, 1);
    ovl__engine_wake();
    *base = bytes ? s->base : NULL;
    *seg = make_handle(s->slot, s->gen);
    return OVL_SUCCESS;

fail_alloc:
    free(all);
    free(sizes);
    free(dwin);
    free(ids);
    free(s);
    return rc;
}

static int free_seg(struct ovl__seg *s, const char *fn)
{
    int rc = ovl__rma_retire(s, -1, NULL);
    pthread_mutex_lock(&S.lock);
    s->live = 0;
    S.v[s->slot] = NULL;
    for (int i = 0; i < S.nheld;)
        if (S.held[i].slot == (int)s->slot) {
            S.held[i] = S.held[S.nheld - 1];
            S.nheld--;
        } else {
            i++;
        }
    pthread_mutex_unlock(&S.lock);
    atomic_fetch_sub(&S.nlive, 1);
    /* No rank frees the window while another still reads from this one. */
    MPI_Request r;
    int mrc = MPI_Ibarrier(S.comm, &r);
    if (mrc == MPI_SUCCESS)
        mrc = ovl__engine_spin_mpi(&r);
    for (int i = 1; i < OVL_DOMAINS_MAX && mrc == MPI_SUCCESS; i++)
        if (s->dwin[i] != MPI_WIN_NULL) { /* every rank has the same */
            mrc = MPI_Win_unlock_all(s->dwin[i]);
            if (mrc == MPI_SUCCESS)
                mrc = MPI_Win_free(&s->dwin[i]);
        }
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Win_unlock_all(s->win);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Win_free(&s->win);
    free(s->sizes);
    free(s->dwin);
    free(s);
    if (mrc != MPI_SUCCESS && rc == OVL_SUCCESS)
        rc = ovl__mpi_error(mrc, fn, "freeing the window");
    return rc;
}

static int segment_free_dom0(ovl_segment_t *seg)
{
    static const char *fn = "ovl_segment_free";
    int rc;
    struct ovl__seg *s = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)))
        return rc;
    if (!seg)
        return ovl__error(OVL_ERR_ARG, fn, "seg is NULL");
    if ((rc = ovl__seg_lookup(fn, *seg, &s)))
        return rc;
    rc = free_seg(s, fn);
    *seg = OVL_SEGMENT_NULL;
    return rc;
}

/* Leftover segments, in slot order on every rank (creation order when no
 * slot was reused differently: collective frees keep ranks in step). */
void ovl__segment_free_all(void)
{
    for (int i = 0; i < MAX_SEGS; i++) {
        pthread_mutex_lock(&S.lock);
        struct ovl__seg *s = S.v[i];
        pthread_mutex_unlock(&S.lock);
        if (s) {
            ovl__info("ovl_finalize: segment %d was not freed; freeing it", i);
            /* ovl_finalize returns none of its errors: reports, never fatal */
            ovl__tls()->reports_only++;
            free_seg(s, "ovl_finalize");
            ovl__tls()->reports_only--;
        }
    }
    pthread_mutex_lock(&S.lock);
    if (S.comm != MPI_COMM_NULL)
        MPI_Comm_free(&S.comm);
    pthread_mutex_unlock(&S.lock);
}

/* ---- ovl_barrier ------------------------------------------------------------ */

static void sync_all(void);

static int barrier_dom0(void)
{
    static const char *fn = "ovl_barrier";
    int rc;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)))
        return rc;
    int first = ovl__rma_retire(NULL, -1, NULL); /* every segment and domain, puts flushed */
    /* This rank's own stores into its segments, visible to the gets the
     * others start after the barrier (MPI's store, MPI_Win_sync, barrier). */
    sync_all();
    MPI_Comm c = S.comm != MPI_COMM_NULL ? S.comm : ovl__g.comm_msg;
    MPI_Request r;
    int mrc = MPI_Ibarrier(c, &r);
    if (mrc == MPI_SUCCESS)
        mrc = ovl__engine_spin_mpi(&r);
    if (mrc != MPI_SUCCESS)
        return ovl__mpi_error(mrc, fn, "MPI_Ibarrier");
    /* Remote writes to this rank's memory, visible to its loads. */
    sync_all();
    return first;
}

/* MPI_Win_sync on every window of every live segment. */
static void sync_all(void)
{
    pthread_mutex_lock(&S.lock);
    for (int i = 0; i < MAX_SEGS; i++)
        for (int k = 0; S.v[i] && k < OVL_DOMAINS_MAX; k++)
            if (S.v[i]->dwin[k] != MPI_WIN_NULL)
                MPI_Win_sync(S.v[i]->dwin[k]);
    pthread_mutex_unlock(&S.lock);
}

/* Flush puts of every live segment (ovl__rma_retire(NULL, ...)). */
int ovl__seg_flush_all(void)
{
    int rc = MPI_SUCCESS;
    pthread_mutex_lock(&S.lock);
    for (int i = 0; i < MAX_SEGS; i++)
        if (S.v[i] && rc == MPI_SUCCESS)
            rc = flush_locked(S.v[i], NULL, -1);
    pthread_mutex_unlock(&S.lock);
    return rc == MPI_SUCCESS ? OVL_SUCCESS : ovl__mpi_error(rc, "ovl_barrier", "MPI_Win_flush_all");
}

/* ---- ovl_lock / ovl_unlock ----------------------------------------------- */

/* One atomic operation on @rank's lock word, complete at return: @op with
 * @v; the word as it was before in *@old. */
static int lock_word_op(struct ovl__seg *s, int rank, uint64_t v, MPI_Op op, uint64_t *old)
{
    int mrc = MPI_Fetch_and_op(&v, old, MPI_UINT64_T, rank, lock_disp(s, rank), op, s->win);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Win_flush(rank, s->win);
    return mrc;
}

static int held_index(struct ovl__seg *s, int rank)
{
    for (int i = 0; i < S.nheld; i++)
        if (S.held[i].slot == (int)s->slot && S.held[i].rank == rank)
            return i;
    return -1;
}

static int lock_dom0(ovl_segment_t seg, int rank)
{
    static const char *fn = "ovl_lock";
    int rc;
    struct ovl__seg *s = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)) ||
        (rc = ovl__seg_lookup(fn, seg, &s)) || (rc = ovl__check_peer(fn, rank, 0)))
        return rc;
    pthread_mutex_lock(&S.lock);
    int k = held_index(s, rank), full = S.nheld >= 64;
    pthread_mutex_unlock(&S.lock);
    if (k >= 0)
        return ovl__error(OVL_ERR_BUSY, fn, "this rank already holds the lock of rank %d", rank);
    if (full)
        return ovl__error(OVL_ERR_NOMEM, fn, "more than 64 locks held");
    if ((rc = ovl__rma_retire(s, rank, NULL)))
        return rc;
    /* A ticket lock in one 64-bit word: tickets handed out in the high
     * half, the ticket being served in the low half. Taking a ticket
     * returns both, so a free lock is taken in one round trip, as with a
     * compare-and-swap, which Open MPI 4.1's default one-sided component
     * on one node crashes on (open-mpi/ompi#11349); and waiting ranks are
     * served in order. */
    uint64_t word = 0;
    int mrc = lock_word_op(s, rank, (uint64_t)1 << 32, MPI_SUM, &word);
    uint32_t ticket = (uint32_t)(word >> 32);
    for (unsigned spin = 0; mrc == MPI_SUCCESS && (uint32_t)word != ticket; spin++) {
        /* Held by another rank: keep serving transfers while waiting. */
        if (ovl__engine_drive() < 0 || spin > 64)
            ovl__relax();
        mrc = lock_word_op(s, rank, 0, MPI_NO_OP, &word);
    }
    if (mrc != MPI_SUCCESS)
        return ovl__mpi_error(mrc, fn, "MPI_Fetch_and_op on the lock word");
    MPI_Win_sync(s->win);
    pthread_mutex_lock(&S.lock);
    S.held[S.nheld].slot = (int)s->slot;
    S.held[S.nheld].rank = rank;
    S.held[S.nheld].ticket = ticket;
    S.nheld++;
    pthread_mutex_unlock(&S.lock);
    return OVL_SUCCESS;
}

static int unlock_dom0(ovl_segment_t seg, int rank)
{
    static const char *fn = "ovl_unlock";
    int rc;
    struct ovl__seg *s = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)) ||
        (rc = ovl__seg_lookup(fn, seg, &s)) || (rc = ovl__check_peer(fn, rank, 0)))
        return rc;
    pthread_mutex_lock(&S.lock);
    int k = held_index(s, rank);
    pthread_mutex_unlock(&S.lock);
    if (k < 0)
        return ovl__error(OVL_ERR_ARG, fn, "the lock of rank %d is not held by this rank", rank);
    int trc = ovl__rma_retire(s, rank, NULL); /* puts complete at the target before release */
    pthread_mutex_lock(&S.lock);
    if ((k = held_index(s, rank)) < 0) { /* another thread released it meanwhile */
        pthread_mutex_unlock(&S.lock);
        return ovl__error(OVL_ERR_ARG, fn, "the lock of rank %d is not held by this rank", rank);
    }
    uint32_t ticket = S.held[k].ticket;
    S.held[k] = S.held[S.nheld - 1];
    S.nheld--;
    pthread_mutex_unlock(&S.lock);
    /* Serve the next ticket: add 1 to the low half, and where it wraps,
     * take the carry back out of the high half (modulo 2^64). */
    uint64_t old = 0;
    int mrc =
        lock_word_op(s, rank, ticket == UINT32_MAX ? 0xffffffff00000001ull : 1, MPI_SUM, &old);
    if (mrc != MPI_SUCCESS)
        return ovl__mpi_error(mrc, fn, "releasing the lock word");
    return trc;
}

/* ---- entry points --------------------------------------------------------
 * One-sided transfers, segments and locks go through domain 0 (its
 * windows, its engine) whatever the caller's domain: memory is reachable
 * from every domain (ovl.h). */

int ovl_barrier(void)
{
    struct ovl__dom *prev = ovl__dom_enter(ovl__dom0());
    int rc = barrier_dom0();
    ovl__dom_leave(prev);
    return rc;
}

int ovl_lock(ovl_segment_t seg, int rank)
{
    struct ovl__dom *prev = ovl__dom_enter(ovl__dom0());
    int rc = lock_dom0(seg, rank);
    ovl__dom_leave(prev);
    return rc;
}

int ovl_unlock(ovl_segment_t seg, int rank)
{
    struct ovl__dom *prev = ovl__dom_enter(ovl__dom0());
    int rc = unlock_dom0(seg, rank);
    ovl__dom_leave(prev);
    return rc;
}

int ovl_segment_create(size_t bytes, void **base, ovl_segment_t *seg)
{
    struct ovl__dom *prev = ovl__dom_enter(ovl__dom0());
    int rc = segment_create_dom0(bytes, base, seg);
    ovl__dom_leave(prev);
    return rc;
}

int ovl_segment_free(ovl_segment_t *seg)
{
    struct ovl__dom *prev = ovl__dom_enter(ovl__dom0());
    int rc = segment_free_dom0(seg);
    ovl__dom_leave(prev);
    return rc;
}
