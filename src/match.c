/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Matching of messages on comm_msg. ovl_isend sends a plain MPI message with
 * the user's tag; a delta send first sends a small header whose MPI tag is
 * the user's tag plus (tag_ub + 1), i.e. in the upper half of MPI's tag
 * space. A receive (ovl_irecv or ovl_delta_recv) must accept either, in the
 * order they were sent, and MPI cannot post one receive for two tags. So ovl
 * matches itself: the driver takes messages off MPI's queue with
 * MPI_Improbe(ANY_SOURCE, ANY_TAG) and pairs them, in arrival order, with
 * receives in posting order -- MPI's own rules (non-overtaking per sender,
 * first posted receive wins). A message nobody has asked for yet waits in
 * the unexpected list as its MPI_Message handle (MPI keeps the data).
 *
 * Probing runs only while a receive is posted, so programs that never
 * receive never probe.
 */
#include "ovl_internal.h"

#include <stdlib.h>

struct unexp {
    MPI_Message msg;
    MPI_Status st;
    struct unexp *next;
};

static struct {
    pthread_mutex_t lock;
    struct ovl__match *posted, *posted_tail;
    struct unexp *unexp, *unexp_tail;
    atomic_int nposted;
    /* receives matched at posting time, handed to the driver: every
     * `matched` callback runs on the driving thread, never concurrently */
    struct ready {
        struct ovl__match *m;
        struct unexp *u;
        struct ready *next;
    } * ready, *ready_tail;
    atomic_int has_ready; /* ready != NULL, for the driver's unlocked check */
    atomic_int cancel;    /* finalize asked the driver to cancel every posted receive */
} M = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Messages probed from @source that no receive has taken yet: finalize
 * counts them as arrived (the program sent what nobody receives). */
int ovl__match_unexpected_from(int source)
{
    int n = 0;
    pthread_mutex_lock(&M.lock);
    for (struct unexp *u = M.unexp; u; u = u->next)
        if (u->st.MPI_SOURCE == source)
            n++;
    pthread_mutex_unlock(&M.lock);
    return n;
}

int ovl__match_posted(void)
{
    return atomic_load_explicit(&M.nposted, memory_order_relaxed);
}

/* Decode an MPI tag on comm_msg: the user's tag, and whether it marks a
 * delta header. */
static int user_tag(int mpitag, int *delta)
{
    *delta = mpitag > ovl__g.tag_ub;
    return *delta ? mpitag - ovl__g.tag_ub - 1 : mpitag;
}

static int matches(const struct ovl__match *m, const MPI_Status *st)
{
    int delta;
    int t = user_tag(st->MPI_TAG, &delta);
    return (m->source == MPI_ANY_SOURCE || m->source == st->MPI_SOURCE) &&
           (m->tag == MPI_ANY_TAG || m->tag == t);
}

static void count_received(const MPI_Status *st)
{
    if (st->MPI_SOURCE >= 0 && st->MPI_SOURCE < ovl__g.size)
        atomic_fetch_add(&ovl__g.recvd_from[st->MPI_SOURCE], 1);
}

/* Hand a matched message to its receive (no lock held). */
static void deliver(struct ovl__match *m, MPI_Message msg, MPI_Status *st)
{
    int delta;
    user_tag(st->MPI_TAG, &delta);
    count_received(st);
    m->matched(m, msg, st, delta);
}

void ovl__match_post(struct ovl__match *m)
{
    m->next = NULL;
    pthread_mutex_lock(&M.lock);
    struct unexp **pp = &M.unexp, *prev = NULL;
    for (struct unexp *u = M.unexp; u; prev = u, pp = &u->next, u = u->next) {
        if (!matches(m, &u->st))
            continue;
        struct ready *rd = malloc(sizeof *rd);
        *pp = u->next;
        if (M.unexp_tail == u)
            M.unexp_tail = prev;
        if (!rd) { /* no memory to defer it: match it here */
            pthread_mutex_unlock(&M.lock);
            deliver(m, u->msg, &u->st);
            free(u);
            return;
        }
        rd->m = m;
        rd->u = u;
        rd->next = NULL;
        if (M.ready_tail)
            M.ready_tail->next = rd;
        else
            M.ready = rd;
        M.ready_tail = rd;
        atomic_store(&M.has_ready, 1);
        atomic_fetch_add(&M.nposted, 1);
        pthread_mutex_unlock(&M.lock);
        ovl__engine_wake();
        return;
    }
    if (M.posted_tail)
        M.posted_tail->next = m;
    else
        M.posted = m;
    M.posted_tail = m;
    atomic_fetch_add(&M.nposted, 1);
    pthread_mutex_unlock(&M.lock);
    ovl__engine_wake();
}

/* Remove and return the first posted receive matching @st (lock held). */
static struct ovl__match *take_posted(const MPI_Status *st)
{
    struct ovl__match *prev = NULL;
    for (struct ovl__match *m = M.posted; m; prev = m, m = m->next) {
        if (!matches(m, st))
            continue;
        if (prev)
            prev->next = m->next;
        else
            M.posted = m->next;
        if (M.posted_tail == m)
            M.posted_tail = prev;
        atomic_fetch_sub(&M.nposted, 1);
        return m;
    }
    return NULL;
}

static int cancel_posted(void)
{
    pthread_mutex_lock(&M.lock);
    struct ovl__match *m = M.posted;
    M.posted = M.posted_tail = NULL;
    int np = 0;
    for (struct ovl__match *x = m; x; x = x->next)
        np++;
    atomic_fetch_sub(&M.nposted, np);
    atomic_store(&M.cancel, 0);
    pthread_mutex_unlock(&M.lock);
    int n = 0;
    while (m) {
        struct ovl__match *next = m->next;
        m->matched(m, MPI_MESSAGE_NULL, NULL, 0);
        m = next;
        n++;
    }
    return n;
}

/* Run the receives matched at posting time (driver). */
static int run_ready(void)
{
    pthread_mutex_lock(&M.lock);
    struct ready *rd = M.ready;
    M.ready = M.ready_tail = NULL;
    atomic_store(&M.has_ready, 0);
    pthread_mutex_unlock(&M.lock);
    int n = 0;
    while (rd) {
        struct ready *next = rd->next;
        atomic_fetch_sub(&M.nposted, 1);
        deliver(rd->m, rd->u->msg, &rd->u->st);
        free(rd->u);
        free(rd);
        rd = next;
        n++;
    }
    return n;
}

int ovl__match_poll(void)
{
    if (!ovl__match_posted())
        return 0;
    /* M.ready itself is M.lock's: read without the lock it races with a
     * receive posted on another thread (TSan) */
    int nready = atomic_load(&M.has_ready) ? run_ready() : 0;
    if (atomic_load(&M.cancel))
        return nready + cancel_posted();
    struct hit {
        struct ovl__match *m;
        MPI_Message msg;
        MPI_Status st;
    } hits[16];
    int n = 0;
    pthread_mutex_lock(&M.lock);
    while (n < 16 && M.posted) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, ovl__g.comm_msg, &flag, &msg, &st) !=
                MPI_SUCCESS ||
            !flag)
            break;
        struct ovl__match *m = take_posted(&st);
        if (m) {
            hits[n].m = m;
            hits[n].msg = msg;
            hits[n].st = st;
            n++;
            continue;
        }
        struct unexp *u = malloc(sizeof *u);
        if (!u) {
            /* Cannot park it: receive it now rather than lose it. */
            MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            ovl__error(OVL_ERR_NOMEM, "ovl progress", "dropped an unexpected message: no memory");
            continue;
        }
        u->msg = msg;
        u->st = st;
        u->next = NULL;
        if (M.unexp_tail)
            M.unexp_tail->next = u;
        else
            M.unexp = u;
        M.unexp_tail = u;
    }
    pthread_mutex_unlock(&M.lock);
    for (int i = 0; i < n; i++)
        deliver(hits[i].m, hits[i].msg, &hits[i].st);
    return n + nready;
}

/* Cancellation completes requests, which only the driver may do: leave
 * the work to the next ovl__match_poll. */
void ovl__match_cancel_all(void)
{
    atomic_store(&M.cancel, 1);
    ovl__engine_wake();
}

void ovl__match_drop_unexpected(void)
{
    pthread_mutex_lock(&M.lock);
    atomic_store(&M.cancel, 0); /* not to cancel the next ovl_init's receives */
    struct unexp *u = M.unexp;
    M.unexp = M.unexp_tail = NULL;
    pthread_mutex_unlock(&M.lock);
    while (u) {
        struct unexp *next = u->next;
        MPI_Count n = 0;
        MPI_Get_elements_x(&u->st, MPI_BYTE, &n);
        void *tmp = malloc(n > 0 ? (size_t)n : 1);
        if (tmp)
            MPI_Mrecv(tmp, (int)n, MPI_BYTE, &u->msg, MPI_STATUS_IGNORE);
        free(tmp);
        free(u);
        u = next;
    }
}

int ovl__dt_keep(MPI_Datatype dt, MPI_Datatype *out, int *owned)
{
    int ni, na, nd, comb;
    *owned = 0;
    *out = dt;
    if (MPI_Type_get_envelope(dt, &ni, &na, &nd, &comb) != MPI_SUCCESS)
        return OVL_ERR_ARG;
    if (comb == MPI_COMBINER_NAMED)
        return OVL_SUCCESS;
    if (MPI_Type_dup(dt, out) != MPI_SUCCESS)
        return OVL_ERR_ARG;
    *owned = 1;
    return OVL_SUCCESS;
}

void ovl__dt_release(struct ovl__req *r)
{
    if (r->dt_owned) {
        MPI_Type_free(&r->dt);
        r->dt_owned = 0;
    }
}
