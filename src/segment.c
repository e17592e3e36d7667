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
 * Handles are (slot, generation) pairs like requests, so a freed segment
 * is reported as such instead of being dereferenced. Every rank's size is
 * gathered at creation: a transfer beyond the target's size is refused at
 * the origin instead of failing inside MPI. A hidden 8-byte word after each
 * rank's bytes holds ovl_lock's lock (compare-and-swap on the target).
 */
#include "ovl_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEGS 256

static struct {
    pthread_mutex_t lock;
    struct ovl__seg *v[MAX_SEGS];
    uint32_t gen[MAX_SEGS];
    MPI_Comm comm; /* windows and the progress probe */
    atomic_int nlive;
    /* ovl_lock held by this rank: (slot, rank) pairs, few */
    int held[64][2];
    int nheld;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER, .comm = MPI_COMM_NULL };

static ovl_segment_t make_handle(uint32_t slot, uint32_t gen)
{
    return (ovl_segment_t)(uintptr_t)(((uint64_t)gen << 32) | (slot + 1));
}

int ovl__seg_lookup(const char *fn, ovl_segment_t h, struct ovl__seg **out)
{
    uint64_t v = (uint64_t)(uintptr_t)h;
    uint32_t s1 = (uint32_t)(v & 0xffffffffu), gen = (uint32_t)(v >> 32);
    if (h == OVL_SEGMENT_NULL)
        return ovl__error(OVL_ERR_ARG, fn, "segment is OVL_SEGMENT_NULL");
    struct ovl__seg *s = NULL;
    pthread_mutex_lock(&S.lock);
    if (s1 >= 1 && s1 <= MAX_SEGS && S.gen[s1 - 1] == gen)
        s = S.v[s1 - 1];
    pthread_mutex_unlock(&S.lock);
    if (!s || !s->live)
        return ovl__error(OVL_ERR_ARG, fn, "segment %p was freed or never created", (void *)h);
    *out = s;
    return OVL_SUCCESS;
}

int ovl__rma_wants_progress(void)
{
    return atomic_load_explicit(&S.nlive, memory_order_relaxed) > 0;
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

int ovl_segment_create(size_t bytes, void **base, ovl_segment_t *seg)
{
    static const char *fn = "ovl_segment_create";
    int rc;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)))
        return rc;
    if (!base || !seg)
        return ovl__error(OVL_ERR_ARG, fn, "%s is NULL", base ? "seg" : "base");
    if (bytes > (size_t)1 << 46)
        return ovl__error(OVL_ERR_ARG, fn, "segment of %zu bytes is too large", bytes);
    pthread_mutex_lock(&S.lock);
    if (S.comm == MPI_COMM_NULL) {
        rc = MPI_Comm_dup(ovl__g.comm_msg, &S.comm);
        if (rc == MPI_SUCCESS)
            MPI_Comm_set_errhandler(S.comm, MPI_ERRORS_RETURN);
    }
    int slot = -1;
    for (int i = 0; i < MAX_SEGS && slot < 0; i++)
        if (!S.v[i])
            slot = i;
    pthread_mutex_unlock(&S.lock);
    if (rc != MPI_SUCCESS)
        return ovl__mpi_error(rc, fn, "MPI_Comm_dup");
    /* Agree on failure before the collective window creation. */
    int bad = slot < 0, anybad = 0;
    MPI_Request r;
    if ((rc = MPI_Iallreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, S.comm, &r)) != MPI_SUCCESS ||
        (rc = ovl__engine_spin_mpi(&r)) != MPI_SUCCESS)
        return ovl__mpi_error(rc, fn, "MPI_Iallreduce");
    if (anybad)
        return ovl__error(OVL_ERR_NOMEM, fn, "more than %d segments on some rank", MAX_SEGS);

    struct ovl__seg *s = calloc(1, sizeof *s);
    size_t *sizes = calloc((size_t)ovl__g.size, sizeof *sizes);
    unsigned long long mine = bytes, *all = calloc((size_t)ovl__g.size, sizeof *all);
    if (!s || !sizes || !all) {
        rc = ovl__error(OVL_ERR_NOMEM, fn, "no memory for a segment");
        goto fail_alloc;
    }
    if ((rc = MPI_Iallgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG,
                             S.comm, &r)) != MPI_SUCCESS ||
        (rc = ovl__engine_spin_mpi(&r)) != MPI_SUCCESS) {
        rc = ovl__mpi_error(rc, fn, "MPI_Iallgather of the sizes");
        goto fail_alloc;
    }
    for (int i = 0; i < ovl__g.size; i++)
        sizes[i] = (size_t)all[i];
    free(all);
    all = NULL;
    s->bytes = bytes;
    s->sizes = sizes;
    s->lock_at = (bytes + 7) / 8 * 8;
    void *b = NULL;
    /* whole cache lines: MPICH 4.0 (ch4, shared memory) misplaces remote
     * displacements when the ranks' sizes are not multiples of 16 */
    rc = MPI_Win_allocate((MPI_Aint)((s->lock_at + 8 + 63) / 64 * 64), 1, MPI_INFO_NULL, S.comm, &b,
                          &s->win);
    if (rc != MPI_SUCCESS) {
        rc = ovl__mpi_error(rc, fn, "MPI_Win_allocate");
        goto fail_alloc;
    }
    MPI_Win_set_errhandler(s->win, MPI_ERRORS_RETURN);
    s->base = b;
    memset(s->base + s->lock_at, 0, 8);
    if ((rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win)) != MPI_SUCCESS) {
        MPI_Win_free(&s->win);
        rc = ovl__mpi_error(rc, fn, "MPI_Win_lock_all");
        goto fail_alloc;
    }
    /* Every rank's lock word is zero before anyone may lock it. */
    if ((rc = MPI_Ibarrier(S.comm, &r)) != MPI_SUCCESS ||
        (rc = ovl__engine_spin_mpi(&r)) != MPI_SUCCESS) {
        MPI_Win_unlock_all(s->win);
        MPI_Win_free(&s->win);
        rc = ovl__mpi_error(rc, fn, "MPI_Ibarrier");
        goto fail_alloc;
    }
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
    free(s);
    return rc;
}

static int free_seg(struct ovl__seg *s, const char *fn)
{
    int rc = ovl__rma_retire(s, -1);
    pthread_mutex_lock(&S.lock);
    s->live = 0;
    S.v[s->slot] = NULL;
    for (int i = 0; i < S.nheld;)
        if (S.held[i][0] == (int)s->slot) {
            S.held[i][0] = S.held[S.nheld - 1][0];
            S.held[i][1] = S.held[S.nheld - 1][1];
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
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Win_unlock_all(s->win);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Win_free(&s->win);
    free(s->sizes);
    free(s);
    if (mrc != MPI_SUCCESS && rc == OVL_SUCCESS)
        rc = ovl__mpi_error(mrc, fn, "freeing the window");
    return rc;
}

int ovl_segment_free(ovl_segment_t *seg)
{
    static const char *fn = "ovl_segment_free";
    int rc;
    struct ovl__seg *s;
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
            free_seg(s, "ovl_finalize");
        }
    }
    pthread_mutex_lock(&S.lock);
    if (S.comm != MPI_COMM_NULL)
        MPI_Comm_free(&S.comm);
    pthread_mutex_unlock(&S.lock);
}

/* ---- ovl_barrier ------------------------------------------------------------ */

int ovl_barrier(void)
{
    static const char *fn = "ovl_barrier";
    int rc;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)))
        return rc;
    int first = ovl__rma_retire(NULL, -1); /* every segment, puts flushed */
    MPI_Comm c = S.comm != MPI_COMM_NULL ? S.comm : ovl__g.comm_msg;
    MPI_Request r;
    int mrc = MPI_Ibarrier(c, &r);
    if (mrc == MPI_SUCCESS)
        mrc = ovl__engine_spin_mpi(&r);
    if (mrc != MPI_SUCCESS)
        return ovl__mpi_error(mrc, fn, "MPI_Ibarrier");
    /* Make remote writes to this rank's memory visible to its loads. */
    pthread_mutex_lock(&S.lock);
    for (int i = 0; i < MAX_SEGS; i++)
        if (S.v[i])
            MPI_Win_sync(S.v[i]->win);
    pthread_mutex_unlock(&S.lock);
    return first;
}

/* Flush puts of every live segment (ovl__rma_retire(NULL, ...)). */
int ovl__seg_flush_all(void)
{
    int rc = MPI_SUCCESS;
    pthread_mutex_lock(&S.lock);
    for (int i = 0; i < MAX_SEGS; i++)
        if (S.v[i] && rc == MPI_SUCCESS)
            rc = MPI_Win_flush_all(S.v[i]->win);
    pthread_mutex_unlock(&S.lock);
    return rc == MPI_SUCCESS ? OVL_SUCCESS : ovl__mpi_error(rc, "ovl_barrier", "MPI_Win_flush_all");
}

/* ---- ovl_lock / ovl_unlock ----------------------------------------------- */

/* Where @rank keeps its lock word (after its own bytes). */
static MPI_Aint lock_disp(const struct ovl__seg *s, int rank)
{
    return (MPI_Aint)((s->sizes[rank] + 7) / 8 * 8);
}

static int held_index(struct ovl__seg *s, int rank)
{
    for (int i = 0; i < S.nheld; i++)
        if (S.held[i][0] == (int)s->slot && S.held[i][1] == rank)
            return i;
    return -1;
}

int ovl_lock(ovl_segment_t seg, int rank)
{
    static const char *fn = "ovl_lock";
    int rc;
    struct ovl__seg *s;
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
    if ((rc = ovl__rma_retire(s, rank)))
        return rc;
    long long want = (long long)ovl__g.rank + 1, zero = 0, got = -1;
    for (unsigned spin = 0;; spin++) {
        int mrc = MPI_Compare_and_swap(&want, &zero, &got, MPI_LONG_LONG, rank, lock_disp(s, rank),
                                       s->win);
        if (mrc == MPI_SUCCESS)
            mrc = MPI_Win_flush(rank, s->win);
        if (mrc != MPI_SUCCESS)
            return ovl__mpi_error(mrc, fn, "MPI_Compare_and_swap on the lock word");
        if (got == 0)
            break;

        /* Held by another rank: keep serving transfers while waiting. */
        if (ovl__engine_drive() < 0 || spin > 64)
            ovl__relax();
    }
    MPI_Win_sync(s->win);
    pthread_mutex_lock(&S.lock);
    S.held[S.nheld][0] = (int)s->slot;
    S.held[S.nheld][1] = rank;
    S.nheld++;
    pthread_mutex_unlock(&S.lock);
    return OVL_SUCCESS;
}

int ovl_unlock(ovl_segment_t seg, int rank)
{
    static const char *fn = "ovl_unlock";
    int rc;
    struct ovl__seg *s;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)) ||
        (rc = ovl__seg_lookup(fn, seg, &s)) || (rc = ovl__check_peer(fn, rank, 0)))
        return rc;
    pthread_mutex_lock(&S.lock);
    int k = held_index(s, rank);
    pthread_mutex_unlock(&S.lock);
    if (k < 0)
        return ovl__error(OVL_ERR_ARG, fn, "the lock of rank %d is not held by this rank", rank);
    int trc = ovl__rma_retire(s, rank); /* puts complete at the target before release */
    long long zero = 0, old = 0;
    int mrc =
        MPI_Fetch_and_op(&zero, &old, MPI_LONG_LONG, rank, lock_disp(s, rank), MPI_REPLACE, s->win);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Win_flush(rank, s->win);
    pthread_mutex_lock(&S.lock);
    k = held_index(s, rank);
    if (k >= 0) {
        S.held[k][0] = S.held[S.nheld - 1][0];
        S.held[k][1] = S.held[S.nheld - 1][1];
        S.nheld--;
    }
    pthread_mutex_unlock(&S.lock);
    if (mrc != MPI_SUCCESS)
        return ovl__mpi_error(mrc, fn, "releasing the lock word");
    return trc;
}
