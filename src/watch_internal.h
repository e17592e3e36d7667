/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private to the access monitor (watch.c, watch_fault.c, watch_monitor.c
 * and the backends). A region is a buffer [base, base + len) seen as pages
 * P0 .. P0 + npages - 1. Its first and last pages may be shared with other
 * data ("edge" pages); the pages wholly inside it are "interior", indices
 * [ilo, ihi).
 *
 * Receive regions: every page holding a byte that has not arrived is
 * guarded. Interior pages are guarded by the backend; edge pages always by
 * page protection (they hold live neighbour data, which userfaultfd's
 * missing mode would discard), shared between regions with a reference
 * count. Send regions guard interior pages only, write-protected.
 */
#ifndef OVL_WATCH_INTERNAL_H
#define OVL_WATCH_INTERNAL_H

#include "ovl_internal.h"

#include <signal.h>

struct ovl__watch {
    int is_send;
    ovl_monitor_t mon; /* UFFD, MPROTECT or EXPLICIT */
    char *base;
    size_t len;
    uintptr_t p0; /* address of the first page */
    size_t npages, ilo, ihi;
    int slot;             /* index in the registry, -1 when unregistered */
    struct ovl__dom *dom; /* the domain of the transfer it belongs to (domain.c) */
    char *alias;          /* ovl_alloc memory: base's second mapping, never guarded */

    /* receive */
    uint32_t *got;          /* bytes arrived, per page (driver) */
    _Atomic uint8_t *valid; /* page accessible (readable by the fault handler) */
    char *shadow;           /* uffd: page-aligned twin of the buffer's pages */
    size_t shadow_len;
    int moved;            /* uffd: the interior's own pages wait in the shadow */
    int shadow_reg;       /* uffd: the shadow is registered for good (from the cache) */
    int shadow_dirty;     /* uffd: an interior shadow page may still hold a page */
    int open_deferred;    /* mprotect hit the map-count limit: open later, coarser */
    int edge_lo, edge_hi; /* holds a reference on its first / last page */
    int edge_stuck;       /* a complete edge page could not be opened yet (map count) */
    /* OVL_TRACE page-access trace: pages in the order of their first fault */
    uint32_t *touch;
    _Atomic uint8_t *touched;
    atomic_uint ntouch;

    /* send */
    ovl__spin_t busy;  /* fault handler vs. finish */
    size_t s_lo, s_hi; /* writable window [s_lo, s_hi) of interior pages */
    ovl__watch_produced_fn produced;
    void *ctx;
    _Atomic size_t stale; /* first offset written after being sent, or -1 */
};

#define OVL__WATCH_MAX_REGIONS 1024
#define OVL__WATCH_MAX_EDGES   2048
#define OVL__WATCH_RECENT      256

/* The registry and what the fault handler shares with the rest (watch.c
 * defines it). */
struct ovl__watch_state {
    pthread_mutex_t lock; /* registry, edges, zombies (never taken by the handler) */
    struct ovl__watch *_Atomic regs[OVL__WATCH_MAX_REGIONS];
    atomic_int nregs; /* registered regions (ovl__watch_idle) */
    /* one past the highest slot of regs and of edges ever used: scans stop
     * there (slots are taken lowest first, so this is the most ever live at
     * once, not the table's size). Raised before a slot is filled, never
     * lowered, so a lock-free scan never misses a live slot. */
    atomic_int regs_hi, edges_hi;
    /* a new edge's guard against the end of a step under the protection
     * key, which resets the page's key (watch_fault.c) */
    ovl__spin_t step_lock;
    struct {
        _Atomic uintptr_t page;
        _Atomic int refs;
        ovl__spin_t busy;            /* orders a release against a single-step re-guard */
        _Atomic unsigned long steps; /* neighbour accesses let through while guarded */
    } edges[OVL__WATCH_MAX_EDGES];
    atomic_int said_steps; /* the many-steps advice is given once */
    /* ranges of regions released lately: a fault racing with the release
     * is retried once instead of being taken for a genuine one */
    struct {
        _Atomic uintptr_t lo, hi;
        _Atomic unsigned long gen; /* which release this entry records */
    } recent[OVL__WATCH_RECENT];
    unsigned long recent_next;
    struct ovl__watch *zombies;
    struct ovl__watch **zombie_v;
    size_t nzombies, capzombies;
    atomic_int in_handler;
    int installed;
    struct sigaction old_segv, old_bus, old_trap;
    int mem_fd; /* /proc/self/mem */
    /* probe page for measuring the fault cost */
    _Atomic uintptr_t probe;
    int probe_uffd;
    double fault_us[4];
};
extern struct ovl__watch_state ovl__watch_g;

/* The bounds of the scans of ovl__watch_g.regs and .edges. */
static inline int ovl__watch_regs_hi(void)
{
    return atomic_load(&ovl__watch_g.regs_hi);
}
static inline int ovl__watch_edges_hi(void)
{
    return atomic_load(&ovl__watch_g.edges_hi);
}

/* watch.c: a guarded edge page's slot in ovl__watch_g.edges, or -1; and
 * whether @page is one. Safe in the fault handler. */
int ovl__watch_edge_slot(uintptr_t page);
int ovl__watch_edge_guarded(uintptr_t page);

/* watch_fault.c: install the fault handler (ovl_init; OVL_SUCCESS or
 * OVL_ERR_MONITOR), and put back the handlers it replaced (finalize; does
 * nothing when not installed). */
int ovl__watch_handler_install(void);
/* watch_emulate.c: from the handler, do the program's access to neighbour
 * data on a guarded edge page that faulted at @addr (a string move's part
 * on its current pages, or a plain load or store) through /proc/self/mem
 * and move the instruction pointer past it. 1 if done, 0 if the access is
 * not one it does (x86-64 only). */
int ovl__watch_emulate(void *uc, uintptr_t addr);
/* watch_emulate.c: the protection-key rights (PKRU) the return from the
 * handler whose context is @uc will load, to change; NULL where the
 * frame holds none (x86-64 only). */
uint32_t *ovl__watch_frame_pkru(void *uc);
void ovl__watch_handler_remove(void);

int ovl__watch_mem_probe(uintptr_t addr);
/* Protect [a, a+len) (PROT_NONE) and check that ovl can still write it at
 * @probe (ovl__watch_mem_probe); on failure the protection is undone. 0 or
 * an errno (EXDEV: shared memory). */
int ovl__watch_protect_probed(void *a, size_t len, uintptr_t probe);

/* A backend guards and opens interior pages. All return 0 or an errno
 * (EXDEV: shared memory, which cannot be guarded). */
struct ovl__watch_backend {
    int (*recv_guard)(struct ovl__watch *w);
    /* place bytes at base+off (all within interior pages) */
    void (*recv_place)(struct ovl__watch *w, size_t off, const void *src, size_t len);
    /* make interior pages [i, j) accessible, with their data */
    int (*recv_open)(struct ovl__watch *w, size_t i, size_t j);
    /* the message is over: open every interior page, release the backend */
    void (*recv_done)(struct ovl__watch *w);
    /* where MPI may write bytes for base+off directly (landing + off), or
     * NULL: bytes come through recv_place. Optional. */
    char *(*recv_landing)(struct ovl__watch *w);
    /* the region is freed: give back its shadow (backends that make one) */
    void (*recv_release)(struct ovl__watch *w);
    int (*send_guard)(struct ovl__watch *w);
    /* write-protect (protect = 1) or allow writes to interior pages [i, j) */
    int (*send_protect)(struct ovl__watch *w, size_t i, size_t j, int protect);
    void (*send_done)(struct ovl__watch *w);
};

extern const struct ovl__watch_backend ovl__watch_mprotect;
extern const struct ovl__watch_backend ovl__watch_uffd;
/* Regions in ovl_alloc memory, under either fault monitor: the view is
 * guarded with mprotect, bytes are written (or land) in the alias. */
extern const struct ovl__watch_backend ovl__watch_alias;

/* The backend that guards @w's pages. */
static inline const struct ovl__watch_backend *ovl__watch_backend_of(const struct ovl__watch *w)
{
    if (w->alias)
        return &ovl__watch_alias;
    return w->mon == OVL_MONITOR_UFFD ? &ovl__watch_uffd : &ovl__watch_mprotect;
}

static inline char *ovl__watch_page_addr(const struct ovl__watch *w, size_t i)
{
    return (char *)(w->p0 + i * ovl__watch_page());
}

/* Write @len bytes at @dst whatever its protection (through /proc/self/mem). */
int ovl__watch_poke(void *dst, const void *src, size_t len);

/* uffd */
int ovl__uffd_open(char *why, size_t why_len);
int ovl__uffd_fd(void);
void ovl__uffd_close(void);
/* Unmap the cached receive shadows (finalize, or mappings ran out). */
void ovl__uffd_shadow_trim(void);

#endif
