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
 * Pre-posting. A probed message is received only when the driver next runs,
 * and over TCP that costs a whole message time: both ranks of an exchange
 * send a rendezvous request, and if a rank handles its peer's
 * ready-to-receive reply in the same MPI progress call as the peer's
 * request, its own data is queued before its reply, which then waits behind
 * it (measured: a 1 MB exchange took 17 ms instead of 8.7 in about half the
 * runs). A receive that MPI already holds answers on arrival. So an
 * ovl_irecv with a definite source and tag (and a predefined datatype, see
 * message.c) is handed to MPI as a real receive (`prepost`) when that
 * cannot break the rules above:
 *   - no queued receive that could take the same message was posted before
 *     it (a wildcard, say), and nothing probed matches it;
 *   - its source has never sent this rank a delta header ("mixed").
 * A sender that has sent a delta to a peer sends its later plain messages
 * to that peer as header + body (a 32-byte header in the delta tag space,
 * the body on comm_delta), so no plain message ever follows a delta from
 * the same sender. When the first header from a source is probed, every
 * plain message that source sent earlier has been matched already (MPI's
 * non-overtaking rule, since the probe is a wildcard), so its pre-posted
 * receives still waiting can only be waiting for that header or later: they
 * are cancelled and queued again in posting order ("demoted"). Until the
 * cancellations settle, and while a header's body has not been probed, the
 * source is held: its messages wait in the unexpected list.
 *
 * Probing runs only while a receive is posted (queued or pre-posted), so
 * programs that never receive never probe.
 */
#include "ovl_internal.h"

#include <stdlib.h>

struct unexp {
    MPI_Message msg;
    MPI_Status st;
    struct unexp *next;
    /* a header + body message whose body has not been probed yet */
    int body_pending;
    int utag;
    unsigned sid;
};

/* One domain's matching state (domain.c): domain 0's is M0. */
struct ovl__match_state {
    pthread_mutex_t lock;
    struct ovl__match *posted, *posted_tail;
    struct unexp *unexp, *unexp_tail;
    atomic_int nposted;
    atomic_int npatient; /* of those in `posted`, the patient ones */
    /* receives matched at posting time, handed to the driver: every
     * `matched` callback runs on the driving thread, never concurrently */
    struct ready {
        struct ovl__match *m;
        struct unexp *u;
        struct ready *next;
    } * ready, *ready_tail;
    atomic_int has_ready; /* ready != NULL, for the driver's unlocked check */
    atomic_int cancel;    /* finalize asked the driver to cancel every posted receive */
    atomic_int closing;   /* finalize is cancelling: demoted receives are not queued again */
    /* pre-posting */
    struct ovl__match *pre; /* receives handed to MPI */
    atomic_int npre;
    uint64_t seq;
    unsigned char *mixed; /* per source: a delta header seen, pre-post no more */
    int *hold;            /* per source: demotions and bodies outstanding */
    atomic_int nheld;     /* sum of hold[] */
    int size;
};
static struct ovl__match_state M0 = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The current domain's state: code acting on a receive or message of a
 * domain runs with that domain entered (domain.c). */
/* the match source's slot (ovl__engine_source_slot): found once, by any
 * thread, always the same */
static atomic_int match_slot = -1;

static struct ovl__match_state *match_cur(void)
{
    int slot = atomic_load_explicit(&match_slot, memory_order_relaxed);
    if (slot < 0) {
        slot = ovl__engine_source_slot(&ovl__match_source);
        atomic_store_explicit(&match_slot, slot, memory_order_relaxed);
    }
    struct ovl__match_state *m = ovl__dom_state(slot);
    return m ? m : &M0;
}

/* Append @x to the singly linked list @head..@tail (each has `next`). */
#define LIST_APPEND(head, tail, x) \
    do {                           \
        (x)->next = NULL;          \
        if (tail)                  \
            (tail)->next = (x);    \
        else                       \
            (head) = (x);          \
        (tail) = (x);              \
    } while (0)

static int state_init(struct ovl__match_state *m, int size)
{
    m->mixed = calloc((size_t)size, sizeof *m->mixed);
    m->hold = calloc((size_t)size, sizeof *m->hold);
    if (!m->mixed || !m->hold) {
        free(m->mixed);
        free(m->hold);
        m->mixed = NULL;
        m->hold = NULL;
        return OVL_ERR_NOMEM;
    }
    m->size = size;
    m->pre = NULL;
    m->seq = 0;
    atomic_store(&m->npre, 0);
    atomic_store(&m->nheld, 0);
    atomic_store(&m->closing, 0);
    return OVL_SUCCESS;
}

int ovl__match_init(int size)
{
    return state_init(&M0, size);
}

void ovl__match_fini(void)
{
    free(M0.mixed);
    free(M0.hold);
    M0.mixed = NULL;
    M0.hold = NULL;
    M0.size = 0;
}

static void *match_dom_new(void)
{
    struct ovl__match_state *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    if (state_init(m, M0.size) != OVL_SUCCESS) {
        free(m);
        return NULL;
    }
    return m;
}

static void match_dom_free(void *p)
{
    struct ovl__match_state *m = p;
    if (!m || m == &M0)
        return;
    free(m->mixed);
    free(m->hold);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static int match_held(void)
{
    struct ovl__match_state *const ms = match_cur();
    int n = 0;
    ovl__dom_lock(&ms->lock);
    for (struct unexp *u = ms->unexp; u; u = u->next)
        n++;
    ovl__dom_unlock(&ms->lock);
    return n;
}

static int held(const struct ovl__match_state *ms, int src)
{
    return src >= 0 && src < ms->size && ms->hold[src] > 0;
}

static void hold_add(struct ovl__match_state *ms, int src, int d)
{
    ms->hold[src] += d;
    atomic_fetch_add(&ms->nheld, d);
}

/* Messages probed from @source that no receive has taken yet: finalize
 * counts them as arrived (the program sent what nobody receives). */
int ovl__match_unexpected_from(int source)
{
    struct ovl__match_state *const ms = match_cur();
    int n = 0;
    ovl__dom_lock(&ms->lock);
    for (struct unexp *u = ms->unexp; u; u = u->next)
        if (u->st.MPI_SOURCE == source)
            n++;
    ovl__dom_unlock(&ms->lock);
    return n;
}

int ovl__match_posted(void)
{
    struct ovl__match_state *const ms = match_cur();
    return atomic_load_explicit(&ms->nposted, memory_order_relaxed);
}

void ovl__match_hurry(struct ovl__match *m)
{
    struct ovl__match_state *const ms = match_cur();
    ovl__dom_lock(&ms->lock);
    if (m->patient) {
        m->patient = 0;
        for (const struct ovl__match *p = ms->posted; p; p = p->next)
            if (p == m) {
                atomic_fetch_sub(&ms->npatient, 1);
                break;
            }
    }
    ovl__dom_unlock(&ms->lock);
}

int ovl__match_urgent(void)
{
    struct ovl__match_state *const ms = match_cur();
    return atomic_load_explicit(&ms->nposted, memory_order_relaxed) -
           atomic_load_explicit(&ms->npatient, memory_order_relaxed);
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

static void count_received(int src)
{
    if (src >= 0 && src < ovl__g.size)
        atomic_fetch_add(&ovl__dom_cur()->recvd_from[src], 1);
}

/* Hand a matched message to its receive (no lock held). */
static void deliver(struct ovl__match *m, MPI_Message msg, MPI_Status *st)
{
    int delta;
    user_tag(st->MPI_TAG, &delta);
    count_received(st->MPI_SOURCE);
    m->matched(m, msg, st, delta);
}

/* Whether @m may be handed to MPI now (lock held; see the file comment). */
static int can_prepost_locked(struct ovl__match_state *ms, const struct ovl__match *m)
{
    if (!m->prepost || m->source < 0 || m->source >= ms->size || m->tag < 0 ||
        ms->mixed[m->source] || held(ms, m->source))
        return 0;
    for (const struct ovl__match *p = ms->posted; p; p = p->next)
        if ((p->source == MPI_ANY_SOURCE || p->source == m->source) &&
            (p->tag == MPI_ANY_TAG || p->tag == m->tag))
            return 0;
    return 1;
}

/* Queue @m for a message of the unexpected entry @u, for the driver (lock
 * held). 0 without memory. */
static int make_ready_locked(struct ovl__match_state *ms, struct ovl__match *m, struct unexp *u)
{
    struct ready *rd = malloc(sizeof *rd);
    if (!rd)
        return 0;
    rd->m = m;
    rd->u = u;
    LIST_APPEND(ms->ready, ms->ready_tail, rd);
    atomic_store(&ms->has_ready, 1);
    atomic_fetch_add(&ms->nposted, 1);
    return 1;
}

void ovl__match_post(struct ovl__match *m)
{
    struct ovl__match_state *const ms = match_cur();
    m->next = NULL;
    m->demoting = 0;
    ovl__dom_lock(&ms->lock);
    m->seq = ++ms->seq;
    struct unexp **pp = &ms->unexp, *prev = NULL;
    for (struct unexp *u = ms->unexp; u; prev = u, pp = &u->next, u = u->next) {
        if (u->body_pending || held(ms, u->st.MPI_SOURCE) || !matches(m, &u->st))
            continue;
        *pp = u->next;
        if (ms->unexp_tail == u)
            ms->unexp_tail = prev;
        if (!make_ready_locked(ms, m, u)) { /* no memory to defer it: match it here */
            ovl__dom_unlock(&ms->lock);
            deliver(m, u->msg, &u->st);
            free(u);
            return;
        }
        ovl__dom_unlock(&ms->lock);
        ovl__engine_wake();
        return;
    }
    if (can_prepost_locked(ms, m) && m->prepost(m) == 0) {
        m->next = ms->pre;
        ms->pre = m;
        atomic_fetch_add(&ms->npre, 1);
        ovl__dom_unlock(&ms->lock);
        return; /* the engine was woken when the receive was added */
    }
    LIST_APPEND(ms->posted, ms->posted_tail, m);
    int patient = m->patient;
    if (patient)
        atomic_fetch_add(&ms->npatient, 1);
    atomic_fetch_add(&ms->nposted, 1);
    ovl__dom_unlock(&ms->lock);
    if (patient)
        ovl__engine_start_polls();
    else
        ovl__engine_wake();
}

/* Queue @m again in posting order (lock held). */
static void insert_posted_locked(struct ovl__match_state *ms, struct ovl__match *m)
{
    struct ovl__match *prev = NULL, *p = ms->posted;
    while (p && p->seq < m->seq) {
        prev = p;
        p = p->next;
    }
    m->next = p;
    if (prev)
        prev->next = m;
    else
        ms->posted = m;
    if (!p)
        ms->posted_tail = m;
    if (m->patient)
        atomic_fetch_add(&ms->npatient, 1);
    atomic_fetch_add(&ms->nposted, 1);
}

static struct ovl__match *take_posted(struct ovl__match_state *ms, const MPI_Status *st);

/* Pair unexpected messages of sources no longer held with queued
 * receives, in arrival order (lock held); the driver delivers them. */
static void rescan_locked(struct ovl__match_state *ms)
{
    struct unexp *prev = NULL, *u = ms->unexp;
    while (u) {
        struct unexp *next = u->next;
        struct ovl__match *m = NULL;
        if (!u->body_pending && !held(ms, u->st.MPI_SOURCE) &&
            (m = take_posted(ms, &u->st)) != NULL) {
            if (!make_ready_locked(ms, m, u)) {
                insert_posted_locked(ms, m); /* no memory: try again at the next rescan */
                break;
            }
            if (prev)
                prev->next = next;
            else
                ms->unexp = next;
            if (ms->unexp_tail == u)
                ms->unexp_tail = prev;
            u->next = NULL;
        } else {
            prev = u;
        }
        u = next;
    }
}

/* The first delta header from @src: cancel its receives still pre-posted,
 * and hold the source until they are back in the queue (lock held). */
static void demote_locked(struct ovl__match_state *ms, int src)
{
    ms->mixed[src] = 1;
    for (struct ovl__match *m = ms->pre; m; m = m->next)
        if (m->source == src && !m->demoting) {
            m->demoting = 1;
            hold_add(ms, src, 1);
            m->cancel(m);
        }
}

int ovl__match_prepost_done(struct ovl__match *m, int cancelled)
{
    struct ovl__match_state *const ms = match_cur();
    int again = 0;
    ovl__dom_lock(&ms->lock);
    for (struct ovl__match **pp = &ms->pre; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            atomic_fetch_sub(&ms->npre, 1);
            break;
        }
    m->next = NULL;
    if (!cancelled)
        count_received(m->source);
    if (m->demoting) {
        m->demoting = 0;
        hold_add(ms, m->source, -1);
        if (cancelled && !atomic_load(&ms->closing)) {
            insert_posted_locked(ms, m);
            again = 1;
        }
        if (!held(ms, m->source))
            rescan_locked(ms);
    }
    ovl__dom_unlock(&ms->lock);
    if (again || atomic_load(&ms->has_ready))
        ovl__engine_wake();
    return again;
}

/* Remove and return the first posted receive matching @st (lock held). */
static struct ovl__match *take_posted(struct ovl__match_state *ms, const MPI_Status *st)
{
    struct ovl__match *prev = NULL;
    for (struct ovl__match *m = ms->posted; m; prev = m, m = m->next) {
        if (!matches(m, st))
            continue;
        if (prev)
            prev->next = m->next;
        else
            ms->posted = m->next;
        if (ms->posted_tail == m)
            ms->posted_tail = prev;
        if (m->patient)
            atomic_fetch_sub(&ms->npatient, 1);
        atomic_fetch_sub(&ms->nposted, 1);
        return m;
    }
    return NULL;
}

static int cancel_posted(struct ovl__match_state *ms)
{
    ovl__dom_lock(&ms->lock);
    struct ovl__match *m = ms->posted;
    ms->posted = ms->posted_tail = NULL;
    int np = 0, npat = 0;
    for (struct ovl__match *x = m; x; x = x->next) {
        np++;
        npat += x->patient != 0;
    }
    atomic_fetch_sub(&ms->npatient, npat);
    atomic_fetch_sub(&ms->nposted, np);
    atomic_store(&ms->cancel, 0);
    ovl__dom_unlock(&ms->lock);
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
static int run_ready(struct ovl__match_state *ms)
{
    ovl__dom_lock(&ms->lock);
    struct ready *rd = ms->ready;
    ms->ready = ms->ready_tail = NULL;
    atomic_store(&ms->has_ready, 0);
    ovl__dom_unlock(&ms->lock);
    int n = 0;
    while (rd) {
        struct ready *next = rd->next;
        atomic_fetch_sub(&ms->nposted, 1);
        deliver(rd->m, rd->u->msg, &rd->u->st);
        free(rd->u);
        free(rd);
        rd = next;
        n++;
    }
    return n;
}

/* Look for the body of a header + body message (lock held). When it is
 * there, the entry becomes that body, with the header's source and user
 * tag, and the source's hold is released: 1. */
static int try_body_locked(struct ovl__match_state *ms, struct unexp *u)
{
    int flag = 0, src = u->st.MPI_SOURCE;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(src, (int)u->sid, ovl__dom_cur()->comm_delta, &flag, &msg, &st) !=
            MPI_SUCCESS ||
        !flag)
        return 0;
    u->msg = msg;
    u->st = st;
    u->st.MPI_SOURCE = src;
    u->st.MPI_TAG = u->utag;
    u->body_pending = 0;
    hold_add(ms, src, -1);
    return 1;
}

/* A probed header + body header: receive the header, hold the source until
 * the body is probed (lock held). NULL if it cannot be parked. */
static struct unexp *plain_header_locked(struct ovl__match_state *ms, MPI_Message msg,
                                         const MPI_Status *st)
{
    struct ovl__plain_hdr h;
    int delta;
    MPI_Mrecv(&h, (int)sizeof h, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    if (h.magic != OVL__PLAIN_MAGIC) {
        ovl__report(OVL_ERR_INTERNAL, "ovl progress",
                    "dropped a message from rank %d: bad header (magic %#x)", st->MPI_SOURCE,
                    h.magic);
        return NULL;
    }
    struct unexp *u = calloc(1, sizeof *u);
    if (!u) {
        ovl__report(OVL_ERR_NOMEM, "ovl progress", "dropped a message: no memory");
        return NULL;
    }
    u->msg = MPI_MESSAGE_NULL;
    u->st = *st;
    u->utag = user_tag(st->MPI_TAG, &delta);
    u->sid = h.sid;
    u->body_pending = 1;
    hold_add(ms, st->MPI_SOURCE, 1);
    try_body_locked(ms, u);
    return u;
}

int ovl__match_poll(void)
{
    struct ovl__match_state *const ms = match_cur();
    if (!atomic_load_explicit(&ms->nposted, memory_order_relaxed) && !atomic_load(&ms->npre) &&
        !atomic_load(&ms->nheld))
        return 0;
    /* ms->ready itself is ms->lock's: read without the lock it races with a
     * receive posted on another thread (TSan) */
    int nready = atomic_load(&ms->has_ready) ? run_ready(ms) : 0;
    if (atomic_load(&ms->cancel))
        return nready + cancel_posted(ms);
    struct hit {
        struct ovl__match *m;
        MPI_Message msg;
        MPI_Status st;
    } hits[16];
    int n = 0, rescan = 0;
    ovl__dom_lock(&ms->lock);
    /* A source whose hold ends has its parked messages paired at once,
     * before any newer message of it is probed. */
    if (atomic_load(&ms->nheld))
        for (struct unexp *u = ms->unexp; u; u = u->next)
            if (u->body_pending && try_body_locked(ms, u) && !held(ms, u->st.MPI_SOURCE))
                rescan = 1;
    if (rescan)
        rescan_locked(ms);
    while (n < 16 && (ms->posted || ms->pre || atomic_load(&ms->nheld))) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, ovl__dom_cur()->comm_msg, &flag, &msg, &st) !=
                MPI_SUCCESS ||
            !flag)
            break;
        const int src = st.MPI_SOURCE;
        int delta;
        user_tag(st.MPI_TAG, &delta);
        if (delta && src >= 0 && src < ms->size) {
            if (!ms->mixed[src])
                demote_locked(ms, src);
            int bytes = 0;
            MPI_Get_count(&st, MPI_BYTE, &bytes);
            if (bytes == (int)sizeof(struct ovl__plain_hdr)) {
                struct unexp *u = plain_header_locked(ms, msg, &st);
                if (u) {
                    LIST_APPEND(ms->unexp, ms->unexp_tail, u);
                    if (!held(ms, src)) {
                        rescan = 1;
                        rescan_locked(ms);
                    }
                }
                continue;
            }
        }
        struct ovl__match *m = held(ms, src) ? NULL : take_posted(ms, &st);
        if (m) {
            hits[n].m = m;
            hits[n].msg = msg;
            hits[n].st = st;
            n++;
            continue;
        }
        struct unexp *u = calloc(1, sizeof *u);
        if (!u) {
            /* Cannot park it: receive it now rather than lose it. */
            MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            ovl__report(OVL_ERR_NOMEM, "ovl progress", "dropped an unexpected message: no memory");
            continue;
        }
        u->msg = msg;
        u->st = st;
        LIST_APPEND(ms->unexp, ms->unexp_tail, u);
    }
    ovl__dom_unlock(&ms->lock);
    for (int i = 0; i < n; i++)
        deliver(hits[i].m, hits[i].msg, &hits[i].st);
    if (rescan && atomic_load(&ms->has_ready))
        nready += run_ready(ms);
    return n + nready;
}

/* Cancellation completes requests, which only the driver may do: leave
 * the work to the next ovl__match_poll. */
static void cancel_all(void)
{
    struct ovl__match_state *const ms = match_cur();
    atomic_store(&ms->closing, 1);
    atomic_store(&ms->cancel, 1);
    ovl__engine_wake();
}

static void drop_unexpected(void)
{
    struct ovl__match_state *const ms = match_cur();
    ovl__dom_lock(&ms->lock);
    atomic_store(&ms->cancel, 0); /* not to cancel the next ovl_init's receives */
    atomic_store(&ms->closing, 0);
    struct unexp *u = ms->unexp;
    ms->unexp = ms->unexp_tail = NULL;
    ovl__dom_unlock(&ms->lock);
    while (u) {
        struct unexp *next = u->next;
        if (u->body_pending) { /* its sender has sent the body: take it */
            MPI_Status bst;
            MPI_Mprobe(u->st.MPI_SOURCE, (int)u->sid, ovl__dom_cur()->comm_delta, &u->msg, &bst);
            u->st = bst;
            u->body_pending = 0;
        }
        MPI_Count n = 0;
        MPI_Get_elements_x(&u->st, MPI_BYTE, &n);
        void *tmp = ovl__page_alloc(n > 0 ? (size_t)n : 1); /* any size: never malloc'd */
        MPI_Request rq = MPI_REQUEST_NULL;
        if (tmp && ovl__imrecv_bytes(tmp, n > 0 ? (size_t)n : 0, &u->msg, &rq) == MPI_SUCCESS)
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
        ovl__page_free(tmp);
        free(u);
        u = next;
    }
}

const struct ovl__source ovl__match_source = {
    .name = "match",
    .poll = ovl__match_poll,
    .posted = ovl__match_posted,
    .urgent = ovl__match_urgent,
    .active = ovl__match_posted,
    .cancel = cancel_all,
    .forget = drop_unexpected,
    .each_domain = 1,
    .dom_new = match_dom_new,
    .dom_free = match_dom_free,
    .held = match_held,
};

int ovl__dt_common(MPI_Datatype dt)
{
    /* handle comparisons only: no MPI call, so no MPI lock */
    static const MPI_Datatype common[] = {
        MPI_BYTE,      MPI_DOUBLE,        MPI_INT,
        MPI_CHAR,      MPI_FLOAT,         MPI_LONG,
        MPI_UNSIGNED,  MPI_UNSIGNED_CHAR, MPI_UNSIGNED_LONG,
        MPI_LONG_LONG, MPI_SHORT,         MPI_UNSIGNED_SHORT,
        MPI_INT64_T,   MPI_UINT64_T,      MPI_INT32_T,
        MPI_UINT32_T,  MPI_UINT8_T,       MPI_C_DOUBLE_COMPLEX,
        MPI_PACKED,
    };
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        if (dt == common[i])
            return 1;
    return 0;
}

int ovl__dt_keep(MPI_Datatype dt, MPI_Datatype *out, int *owned)
{
    int ni, na, nd, comb;
    *owned = 0;
    *out = dt;
    if (ovl__dt_common(dt))
        return OVL_SUCCESS;
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
