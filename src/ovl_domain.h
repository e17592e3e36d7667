/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: domain.c: communication domains.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_DOMAIN_H
#define OVL_INTERNAL_DOMAIN_H

/* ---- domain.c ---------------------------------------------------------- */

/* One communication domain: an engine instance (progress.c), the
 * communicators the front ends send on, matching state (match.c) and the
 * per-peer counts finalize's drain and match.c's header rule use. Domain 0
 * is ovl_init's; its communicators are ovl__g's. */
struct ovl__dom {
    int id;
    int mode;                    /* OVL_DOMAIN_* */
    atomic_int live;             /* created and not freed (domain 0: always) */
    struct ovl__dom *next_spare; /* domain.c's list of freed structs */
    int on_stream;               /* its communicators are on an MPIX stream of its own */
    /* a private domain's owner (the first thread that bound it) */
    pthread_t owner;
    atomic_int owned;
    /* a private domain's gate, which stands for its engine's and matching
     * state's locks (ovl__gate_enter) */
    atomic_int gate_inside;  /* the owner is in (written by the owner only) */
    atomic_int gate_foreign; /* another thread is in, or is getting in */
    pthread_mutex_t gate_x;  /* recursive: other threads, and the owner once one is in */
    int gate_xdepth;         /* the nesting of gate_x's holder (gate_x held) */
    MPI_Comm comm_msg;       /* ovl_isend / ovl_irecv, delta headers */
    MPI_Comm comm_stream;    /* first fragment of a stream, user tag */
    MPI_Comm comm_frag;      /* later fragments, tag = stream id */
    MPI_Comm comm_delta;     /* delta pieces, tag = delta id */
#ifdef OVL_HAVE_MPIX_STREAM
    MPIX_Stream stream;
#endif
    struct ovl__engine *eng;
    /* the progress sources' state for it, by slot (each_domain sources;
     * NULL for domain 0, whose state is the sources' own) */
    void *state[OVL__MAX_SOURCES];
    /* finalize's drain: messages sent to / received from each peer */
    atomic_ullong *sent_to, *recvd_from;
    /* peers this domain has sent a delta message to (match.c) */
    atomic_int *headed_to;
};

/* The calling thread's current domain (domain 0 until it binds another,
 * or when the one it bound was freed). Not inlined: a marshal coroutine
 * may resume on another thread (struct ovl__tls). */
struct ovl__dom *ovl__dom_cur(void) __attribute__((noinline));
struct ovl__dom *ovl__dom0(void);
/* The current domain's state of the source in @slot (ovl__engine_source_slot);
 * NULL on domain 0 (the source's own) or for a slot below 0. */
void *ovl__dom_state(int slot);
/* Make @d the calling thread's domain for the code that follows, until
 * ovl__dom_leave(previous); returns the previous one. For code acting on an
 * object of @d (a request, stream, delta, monitored buffer): all it posts
 * and drives is @d's. */
struct ovl__dom *ovl__dom_enter(struct ovl__dom *d);
void ovl__dom_leave(struct ovl__dom *prev);
/* The same for a public call on an object of @d: OVL_ERR_THREAD (recorded
 * as @fn's) when @d is private and the caller is not its owner. */
int ovl__dom_enter_checked(const char *fn, struct ovl__dom *d, struct ovl__dom **prev);
/* A private domain's gate: its owner passes it with plain stores and
 * loads (a thread-local depth; nested entries are free); any other thread
 * (a foreign driver: ovl_barrier, ovl_lock, a fault's wait, finalize)
 * takes gate_x, raises gate_foreign, makes the owner's stores visible
 * (membarrier, where the kernel has it) and waits for it to leave. The
 * owner, finding gate_foreign raised, takes gate_x too. ovl__gate_try is
 * the trylock form (0: not entered). */
void ovl__gate_enter(struct ovl__dom *d);
int ovl__gate_try(struct ovl__dom *d);
void ovl__gate_exit(struct ovl__dom *d);
/* The current domain's lock for state guarded by @m: the gate of a
 * private domain, else @m (ovl__dom_unlock undoes it). */
void ovl__dom_lock(pthread_mutex_t *m);
void ovl__dom_unlock(pthread_mutex_t *m);
/* ovl_init: domain 0 over ovl__g's communicators; then, once the engine
 * runs, the domains OVL_DOMAINS asks for (collective; on failure nothing
 * is left but domain 0). */
int ovl__doms_init(void);
int ovl__doms_create_env(void);
/* ovl_finalize, after draining: free every domain but 0; then domain 0's
 * counters. */
void ovl__doms_fini(void);
/* How many domains exist (domain 0 included), and the one of index @i
 * (NULL if none); for finalize's drain over all of them. */
int ovl__doms_count(void);
int ovl__doms_on_streams(void);
struct ovl__dom *ovl__dom_at(int i);
/* Spin until done(arg), driving every domain's engine in turn (finalize's
 * drain); with domain 0 alone, ovl__engine_spin. */
void ovl__doms_spin(int (*done)(const void *), const void *arg);

#endif /* OVL_INTERNAL_DOMAIN_H */
