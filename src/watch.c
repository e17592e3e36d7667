/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * watch: the access monitor. A region's pages become valid over time
 * (receive) or are reported as the program finishes writing them (send).
 * This file holds what every backend shares: the registry of regions, the
 * page bookkeeping, the edge pages, and the one fault handler for SIGSEGV
 * (page protection) and SIGBUS (userfaultfd in SIGBUS mode).
 *
 * The fault handler never allocates and never takes a lock a non-handler
 * path could hold while faulting. To find a region it scans a fixed array
 * of atomic pointers; regions are freed only when no handler is running
 * (`in_handler`), so a handler never reads freed memory. A fault that is
 * not ovl's goes to the handler that was installed before ovl's (the
 * application's, a debugger's, or the default action, which crashes with
 * the usual signal).
 *
 * Waiting in the handler: the faulting thread drives the progress engine
 * (or, when another thread is driving, yields) until the page is valid. So
 * a fault costs nothing extra when the data is already there: the engine
 * installed it when it arrived and there is no fault at all.
 */

#include "watch_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define MAX_REGIONS 1024
#define MAX_EDGES   2048
#define RECENT      256

static size_t page_size;

static struct {
    pthread_mutex_t lock; /* registry, edges, zombies (never taken by the handler) */
    struct ovl__watch *_Atomic regs[MAX_REGIONS];
    atomic_int nregs; /* registered regions (ovl__watch_idle) */
    struct {
        _Atomic uintptr_t page;
        _Atomic int refs;
        ovl__spin_t busy;            /* orders a release against a single-step re-guard */
        _Atomic unsigned long steps; /* neighbour accesses let through while guarded */
    } edges[MAX_EDGES];
    atomic_int said_steps; /* the many-steps advice is given once */
    /* ranges of regions released lately: a fault racing with the release
     * is retried once instead of being taken for a genuine one */
    struct {
        _Atomic uintptr_t lo, hi;
        _Atomic unsigned long gen; /* which release this entry records */
    } recent[RECENT];
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
} W = { .lock = PTHREAD_MUTEX_INITIALIZER, .mem_fd = -1 };

size_t ovl__watch_page(void)
{
    if (!page_size)
        page_size = (size_t)sysconf(_SC_PAGESIZE);
    return page_size;
}

/* Straight from mmap, never from malloc: glibc gives a large block a
 * mapping of its own, and freeing one raises its mmap threshold, after
 * which the program's own large blocks come from the heap. ovl leaves the
 * allocator as it found it. The page before the block holds the mapping's
 * length for ovl__page_free. */
static size_t page_map_len(size_t bytes)
{
    size_t ps = ovl__watch_page();
    if (bytes > SIZE_MAX - 2 * ps)
        return 0;
    return ps + (bytes ? (bytes + ps - 1) / ps * ps : ps);
}

/* Blocks of up to PAGE_CACHE_MAX bytes are kept for reuse (delta pieces,
 * staging, a stream's fragment window: one mmap and munmap each, with their
 * page faults, per piece or stream would be paid on every transfer). The
 * limit covers the default window of 8 fragments of 64 KiB with its
 * headers; at most 32 blocks stay mapped until ovl_finalize. */
#define PAGE_CACHE_N   32
#define PAGE_CACHE_MAX ((size_t)1 << 20)
static struct {
    pthread_mutex_t lock;
    char *v[PAGE_CACHE_N];
    int n;
} PC = { .lock = PTHREAD_MUTEX_INITIALIZER };

void *ovl__page_alloc(size_t bytes)
{
    size_t len = page_map_len(bytes);
    if (!len)
        return NULL;
    if (len <= PAGE_CACHE_MAX) {
        char *hit = NULL;
        pthread_mutex_lock(&PC.lock);
        for (int i = 0; i < PC.n && !hit; i++)
            if (*(const size_t *)PC.v[i] == len) {
                hit = PC.v[i];
                PC.v[i] = PC.v[--PC.n];
            }
        pthread_mutex_unlock(&PC.lock);
        if (hit)
            return hit + ovl__watch_page();
    }
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    *(size_t *)m = len;
    return m + ovl__watch_page();
}

void *ovl__page_realloc(void *p, size_t bytes)
{
    if (!p)
        return ovl__page_alloc(bytes);
    size_t len = page_map_len(bytes);
    char *m = (char *)p - ovl__watch_page();
    size_t old = *(const size_t *)m;
    if (!len)
        return NULL;
    if (len == old)
        return p;
    char *n = mremap(m, old, len, MREMAP_MAYMOVE);
    if (n == MAP_FAILED)
        return NULL;
    *(size_t *)n = len;
    return n + ovl__watch_page();
}

void ovl__page_free(void *p)
{
    if (!p)
        return;
    char *m = (char *)p - ovl__watch_page();
    size_t len = *(const size_t *)m;
    if (len <= PAGE_CACHE_MAX) {
        pthread_mutex_lock(&PC.lock);
        int kept = PC.n < PAGE_CACHE_N;
        if (kept)
            PC.v[PC.n++] = m;
        pthread_mutex_unlock(&PC.lock);
        if (kept)
            return;
    }
    munmap(m, len);
}

void ovl__page_trim(void)
{
    pthread_mutex_lock(&PC.lock);
    while (PC.n > 0) {
        char *m = PC.v[--PC.n];
        munmap(m, *(const size_t *)m);
    }
    pthread_mutex_unlock(&PC.lock);
}

/* ---- helpers usable from the handler -------------------------------------- */

static void say(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void say_hex(uintptr_t v)
{
    char b[2 + 16 + 1];
    b[0] = '0';
    b[1] = 'x';
    for (int i = 0; i < 16; i++)
        b[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 15];
    b[18] = 0;
    say(b);
}

/* The last fault retried because its region was being released: a fault
 * at the same address under the same release is a genuine one. */
static __thread uintptr_t last_recent_fault __attribute__((tls_model("initial-exec")));
static __thread unsigned long last_recent_gen __attribute__((tls_model("initial-exec")));

/* ---- /proc/self/mem ---------------------------------------------------- */

int ovl__watch_poke(void *dst, const void *src, size_t len)
{
    while (len > 0) {
        ssize_t n = pwrite(W.mem_fd, src, len, (off_t)(uintptr_t)dst);
        if (n < 0 && errno == EFAULT) {
            /* The source shares a guarded page (a malloc'd buffer next to a
             * pending receive): the kernel cannot read it, but this thread
             * can (the fault handler lets neighbours through). Bounce. */
            char b[256];
            size_t m = len < sizeof b ? len : sizeof b;
            memcpy(b, src, m);
            n = pwrite(W.mem_fd, b, m, (off_t)(uintptr_t)dst);
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        dst = (char *)dst + n;
        src = (const char *)src + n;
        len -= (size_t)n;
    }
    return 0;
}

/* The calling thread's stack, looked up once per thread (for the main
 * thread pthread_getattr_np parses /proc/self/maps, far too slow for every
 * small transfer). */
static __thread uintptr_t stack_lo, stack_hi;

int ovl__watch_on_my_stack(const void *buf, size_t len)
{
    if (!stack_hi) {
        pthread_attr_t a;
        void *lo = NULL;
        size_t sz = 0;
        if (pthread_getattr_np(pthread_self(), &a) != 0)
            return 0;
        pthread_attr_getstack(&a, &lo, &sz);
        pthread_attr_destroy(&a);
        stack_lo = (uintptr_t)lo;
        stack_hi = stack_lo + sz;
    }
    uintptr_t b = (uintptr_t)buf;
    return len > 0 && b < stack_hi && b + len > stack_lo;
}

/* ---- page geometry ---------------------------------------------------- */

static void geometry(struct ovl__watch *w, void *base, size_t len)
{
    size_t ps = ovl__watch_page();
    uintptr_t b = (uintptr_t)base, e = b + len;
    w->base = base;
    w->len = len;
    w->p0 = b & ~(uintptr_t)(ps - 1);
    w->npages = len ? ((e + ps - 1) / ps) - (b / ps) : 0;
    w->ilo = (b % ps) ? 1 : 0;
    w->ihi = w->npages - ((e % ps) && w->npages ? 1 : 0);
    if (w->ihi < w->ilo)
        w->ihi = w->ilo; /* a buffer inside one page has no interior */
    w->slot = -1;
    atomic_store(&w->stale, (size_t)-1);
    ovl__spin_unlock(&w->busy); /* starts unlocked */
}

/* Bytes of the buffer that lie in page i. */
static size_t page_bytes(const struct ovl__watch *w, size_t i)
{
    uintptr_t lo = w->p0 + i * ovl__watch_page(), hi = lo + ovl__watch_page();
    uintptr_t b = (uintptr_t)w->base, e = b + w->len;
    if (lo < b)
        lo = b;
    if (hi > e)
        hi = e;
    return hi > lo ? hi - lo : 0;
}

static int is_edge(const struct ovl__watch *w, size_t i)
{
    return i < w->ilo || i >= w->ihi;
}

/* ---- registry ----------------------------------------------------------- */

static int reg_add(struct ovl__watch *w)
{
    for (int i = 0; i < MAX_REGIONS; i++) {
        if (!atomic_load(&W.regs[i])) {
            atomic_store(&W.regs[i], w);
            w->slot = i;
            atomic_fetch_add(&W.nregs, 1);
            return 0;
        }
    }
    return -1;
}

/* A region and its page arrays on pages of their own: the fault handler
 * reads them, and a heap block could share a page with a guarded edge
 * (the handler would fault on its own bookkeeping). */
static struct ovl__watch *new_region(size_t npages)
{
    size_t n = npages ? npages : 1;
    size_t head = (sizeof(struct ovl__watch) + 15) & ~(size_t)15;
    size_t bytes = head + n * sizeof(uint32_t) + n;
    struct ovl__watch *w = ovl__page_alloc(bytes);
    if (!w)
        return NULL;
    memset(w, 0, bytes);
    w->got = (uint32_t *)((char *)w + head);
    w->valid = (_Atomic uint8_t *)((char *)w->got + n * sizeof(uint32_t));
    return w;
}

static const struct ovl__watch_backend *backend(const struct ovl__watch *w);

static void free_region(struct ovl__watch *w)
{
    if (w->shadow) /* only backends with a shadow make one */
        backend(w)->recv_release(w);
    ovl__page_free(w->touch); /* w->touched lives in the same block */
    ovl__page_free(w);
}

/* Free released regions once no fault handler can still be looking at
 * them (lock held). */
static void reap_locked(void)
{
    if (!W.nzombies || atomic_load(&W.in_handler))
        return;
    for (size_t i = 0; i < W.nzombies; i++)
        free_region(W.zombie_v[i]);
    W.nzombies = 0;
}

static void reg_remove_locked(struct ovl__watch *w)
{
    if (w->slot >= 0) {
        /* Recorded as recently released before it leaves the registry: a
         * handler that no longer finds the region must find it here, or
         * it would take a fault raised while the page was still guarded
         * for the program's own (and crash it). */
        unsigned long g = ++W.recent_next;
        unsigned k = (unsigned)(g % RECENT);
        atomic_store(&W.recent[k].hi, 0);
        atomic_store(&W.recent[k].gen, g);
        atomic_store(&W.recent[k].lo, w->p0);
        atomic_store(&W.recent[k].hi, w->p0 + w->npages * ovl__watch_page());
        atomic_store(&W.regs[w->slot], NULL);
        w->slot = -1;
        atomic_fetch_sub(&W.nregs, 1);
    }
}

void ovl__watch_destroy(struct ovl__watch *w)
{
    if (!w)
        return;
    if (w->mon == OVL_MONITOR_EXPLICIT) {
        free_region(w);
        return;
    }
    pthread_mutex_lock(&W.lock);
    reg_remove_locked(w);
    if (W.nzombies == W.capzombies) {
        size_t ncap = W.capzombies ? 2 * W.capzombies : 16;
        struct ovl__watch **v = realloc(W.zombie_v, ncap * sizeof *v);
        if (!v) { /* cannot defer: wait for handlers to leave */
            while (atomic_load(&W.in_handler))
                ovl__relax();
            free_region(w);
            pthread_mutex_unlock(&W.lock);
            return;
        }
        W.zombie_v = v;
        W.capzombies = ncap;
    }
    W.zombie_v[W.nzombies++] = w;
    reap_locked();
    pthread_mutex_unlock(&W.lock);
}

/* ---- edge pages ---------------------------------------------------------- */

/* Take a reference on a shared edge page, guarding it on the first one. */
/* Can ovl write a guarded page holding @addr (a byte of a receive buffer,
 * which nothing else writes)? Not in shared memory (MAP_SHARED, POSIX or
 * System V shm, an MPI shared window): /proc/self/mem refuses to write a
 * shared page the mapping does not allow writing. Then EXDEV. */
int ovl__watch_mem_probe(uintptr_t addr)
{
    char c;
    if (pread(W.mem_fd, &c, 1, (off_t)addr) != 1 || pwrite(W.mem_fd, &c, 1, (off_t)addr) != 1)
        return errno == EFAULT || errno == EIO || errno == 0 ? EXDEV : errno;
    return 0;
}

int ovl__watch_protect_probed(void *a, size_t len, uintptr_t probe)
{
    if (mprotect(a, len, PROT_NONE) != 0)
        return errno;
    int err = probe ? ovl__watch_mem_probe(probe) : 0;
    if (err)
        mprotect(a, len, PROT_READ | PROT_WRITE);
    return err;
}

/* Guard edge page @page (refcounted); @probe: a byte of the buffer on it,
 * or 0 when ovl writes the page through an alias (ovl_alloc memory). */
static int edge_get_locked(uintptr_t page, uintptr_t probe)
{
    int free_slot = -1;
    for (int i = 0; i < MAX_EDGES; i++) {
        uintptr_t p = atomic_load(&W.edges[i].page);
        if (p == page && atomic_load(&W.edges[i].refs) > 0) {
            atomic_fetch_add(&W.edges[i].refs, 1);
            return 0;
        }
        if (free_slot < 0 && atomic_load(&W.edges[i].refs) == 0)
            free_slot = i;
    }
    if (free_slot < 0)
        return ENOSPC;
    int err = ovl__watch_protect_probed((void *)page, ovl__watch_page(), probe);
    if (err)
        return err;
    atomic_store(&W.edges[free_slot].steps, 0);
    atomic_store(&W.edges[free_slot].page, page);
    atomic_store(&W.edges[free_slot].refs, 1);
    return 0;
}

/* Open edge page @page (its last reference is going). mprotect needs a
 * new mapping when the page shares one with other guarded pages, and at
 * vm.max_map_count that fails with ENOMEM: the cached uffd shadows are
 * given back and it is tried once more. Never retried in a loop: nothing
 * says a mapping will ever free up. 0 or an errno. */
static int edge_open_page(uintptr_t page)
{
    if (mprotect((void *)page, ovl__watch_page(), PROT_READ | PROT_WRITE) == 0)
        return 0;
    if (errno != ENOMEM)
        return errno;
    ovl__uffd_shadow_trim();
    return mprotect((void *)page, ovl__watch_page(), PROT_READ | PROT_WRITE) == 0 ? 0 : errno;
}

/* Neighbour accesses on one guarded edge page during one transfer beyond
 * which the program is told, once, how to avoid them: each costs a trap
 * (two signals and two mprotect calls), so this many cost milliseconds. */
#define STEP_ADVICE 64

static void advise_steps(uintptr_t page, unsigned long steps, const struct ovl__watch *w)
{
    if (steps < STEP_ADVICE || ovl__g.cfg.verbose < 1 || atomic_exchange(&W.said_steps, 1))
        return;
    fprintf(stderr,
            "ovl: rank %d: the program touched other data on page %p, which it shares with the "
            "pending buffer [%p, +%zu), %lu times during one transfer; each such access is let "
            "through one instruction at a time (OVL_STATS counts them as neighbour accesses). "
            "Give the buffer pages of its own (ovl_alloc, posix_memalign to the page size with "
            "a size rounded up to pages) and these costs disappear (said once)\n",
            ovl__g.rank, (void *)page, w->base, w->len, steps);
}

/* Drop a reference on edge page @page; with the last one, open the page
 * first (@open; else the caller has opened it), so a waiter that sees
 * refs == 0 retries an accessible page. 0, or an errno with the page still
 * guarded and the reference kept. */
static int edge_put_locked(uintptr_t page, int open, const struct ovl__watch *w)
{
    for (int i = 0; i < MAX_EDGES; i++) {
        if (atomic_load(&W.edges[i].page) == page && atomic_load(&W.edges[i].refs) > 0) {
            ovl__spin_lock(&W.edges[i].busy);
            int err = 0;
            if (open && atomic_load(&W.edges[i].refs) == 1)
                err = edge_open_page(page);
            if (!err && atomic_fetch_sub(&W.edges[i].refs, 1) == 1)
                advise_steps(page, atomic_load(&W.edges[i].steps), w);
            ovl__spin_unlock(&W.edges[i].busy);
            return err;
        }
    }
    return 0;
}

static int edge_guarded(uintptr_t page);

/* Give back @w's references on its edge pages (lock held; the message is
 * over). An edge that cannot be opened alone (map count) is opened with
 * the buffer's other pages, except an edge another region still guards:
 * one call, which needs no new mapping when the guarded pages are a
 * mapping of their own. If even that fails the references go anyway, with
 * an error on stderr: an access to the page then crashes with the usual
 * SIGSEGV, where keeping them would leave its waiters waiting forever. */
static void edges_release_locked(struct ovl__watch *w)
{
    const size_t ps = ovl__watch_page();
    uintptr_t last = w->p0 + (w->npages ? w->npages - 1 : 0) * ps;
    if (w->edge_lo && edge_put_locked(w->p0, 1, w) == 0)
        w->edge_lo = 0;
    if (w->edge_hi && edge_put_locked(last, 1, w) == 0)
        w->edge_hi = 0;
    if (!w->edge_lo && !w->edge_hi)
        return;
    uintptr_t lo = w->edge_lo || !edge_guarded(w->p0) ? w->p0 : w->p0 + ps;
    uintptr_t hi = w->edge_hi || !edge_guarded(last) ? last + ps : last;
    if (hi > lo && mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0)
        ovl__error(OVL_ERR_MONITOR, "ovl delta receive",
                   "cannot open the first or last page of buffer [%p, +%zu): %s%s", w->base, w->len,
                   strerror(errno),
                   errno == ENOMEM ? " (vm.max_map_count reached, or the buffer was unmapped)"
                                   : "");
    if (w->edge_lo)
        edge_put_locked(w->p0, 0, w);
    if (w->edge_hi)
        edge_put_locked(last, 0, w);
    w->edge_lo = w->edge_hi = 0;
}

/* From the handler: the slot of a guarded edge page, or -1. */
static int edge_slot(uintptr_t page)
{
    for (int i = 0; i < MAX_EDGES; i++)
        if (atomic_load(&W.edges[i].page) == page && atomic_load(&W.edges[i].refs) > 0)
            return i;
    return -1;
}

static int edge_guarded(uintptr_t page)
{
    return edge_slot(page) >= 0;
}

int ovl__watch_idle(void)
{
    return atomic_load(&W.nregs) == 0;
}

int ovl__watch_edge_touch(const void *p, size_t len)
{
    if (len == 0 || ovl__watch_idle())
        return 0;
    uintptr_t mask = ~(uintptr_t)(ovl__watch_page() - 1);
    uintptr_t lo = (uintptr_t)p & mask, hi = ((uintptr_t)p + len - 1) & mask;
    return edge_guarded(lo) || (hi != lo && edge_guarded(hi));
}

void ovl__watch_write(void *dst, const void *src, size_t len)
{
    if (W.mem_fd < 0 || !ovl__watch_edge_touch(dst, len) || ovl__watch_poke(dst, src, len) != 0)
        memcpy(dst, src, len);
}

/* Only the first and last pages of [src, +len) can be another buffer's
 * guarded edge: a page strictly inside would hold bytes of that pending
 * buffer, an overlap the callers refuse. /proc/self/mem ignores the guard,
 * so the program's neighbour-access path (a trap per instruction, a trap
 * per byte for a string move) is never taken for ovl's own copies. */
void ovl__watch_read(void *dst, const void *src, size_t len)
{
    if (W.mem_fd < 0 || !ovl__watch_edge_touch(src, len)) {
        memcpy(dst, src, len);
        return;
    }
    atomic_fetch_add_explicit(&ovl__g.st_edge_bounces, 1, memory_order_relaxed);
    char *d = dst;
    uintptr_t s = (uintptr_t)src;
    while (len > 0) {
        ssize_t n = pread(W.mem_fd, d, len, (off_t)s);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            memcpy(d, (const void *)s, len); /* cannot happen with a readable fd */
            return;
        }
        d += n;
        s += (size_t)n;
        len -= (size_t)n;
    }
}

int ovl__watch_pending(const void *p, size_t len, int missing)
{
    uintptr_t lo = (uintptr_t)p, hi = lo + len;
    size_t ps = ovl__watch_page();
    int hit = 0;
    if (len == 0 || ovl__watch_idle())
        return 0;
    pthread_mutex_lock(&W.lock);
    for (int k = 0; k < MAX_REGIONS && !hit; k++) {
        struct ovl__watch *w = atomic_load(&W.regs[k]);
        uintptr_t b = w ? (uintptr_t)w->base : 0, e = w ? b + w->len : 0;
        if (!w || b >= hi || e <= lo)
            continue;
        if (!missing) {
            hit = 1;
        } else if (!w->is_send) { /* a receive page in the overlap not yet valid? */
            size_t i = ((lo > b ? lo : b) - w->p0) / ps, j = ((hi < e ? hi : e) - 1 - w->p0) / ps;
            for (; i <= j && !hit; i++)
                hit = !atomic_load(&w->valid[i]);
        }
    }
    pthread_mutex_unlock(&W.lock);
    return hit;
}

/* The pending receive whose buffer holds @addr, or NULL. */
static struct ovl__watch *pending_buffer_of(uintptr_t addr)
{
    for (int k = 0; k < MAX_REGIONS; k++) {
        struct ovl__watch *w = atomic_load(&W.regs[k]);
        if (w && !w->is_send && addr >= (uintptr_t)w->base && addr < (uintptr_t)w->base + w->len)
            return w;
    }
    return NULL;
}

/* Neighbour data on a guarded edge page (malloc's own headers, other
 * variables) must not wait for a message: the access may come from inside
 * malloc or MPI, where driving progress would deadlock. It is let through
 * by opening the page for one instruction (x86-64 trap flag) and guarding
 * it again in the SIGTRAP that follows. Elsewhere it waits like the
 * buffer's own bytes. */
#if defined(__x86_64__) && defined(__linux__)
#define OVL_SINGLE_STEP 1
/* Pages this thread opened for its current instruction (a string move
 * can touch four: source and destination, each straddling two pages). */
#define STEP_MAX 4
static __thread uintptr_t step_pages[STEP_MAX] __attribute__((tls_model("initial-exec")));

static int step_over(uintptr_t page, void *uc)
{
    ucontext_t *u = uc;
    int k = -1;
    /* The same page again: another thread's trap guarded it before this
     * instruction ran. Open it again in the same slot. */
    for (int j = 0; j < STEP_MAX && k < 0; j++)
        if (step_pages[j] == page)
            k = j;
    for (int j = 0; j < STEP_MAX && k < 0; j++)
        if (!step_pages[j])
            k = j;
    if (k < 0 || !u)
        return 0;
    if (mprotect((void *)page, ovl__watch_page(), PROT_READ | PROT_WRITE) != 0)
        return 0;
    step_pages[k] = page;
    u->uc_mcontext.gregs[REG_EFL] |= 0x100; /* TF */
    return 1;
}

/* Is @page either no region's, or a guarded edge page (which ovl writes
 * and reads through /proc/self/mem whatever its protection)? */
static int page_plain_or_edge(uintptr_t page)
{
    if (edge_guarded(page))
        return 1;
    size_t ps = ovl__watch_page();
    for (int k = 0; k < MAX_REGIONS; k++) {
        struct ovl__watch *w = atomic_load(&W.regs[k]);
        if (w && page >= w->p0 && page < w->p0 + w->npages * ps)
            return 0;
    }
    return 1;
}

/* Does [lo, hi) hold a byte of a pending receive buffer? */
static int range_pending(uintptr_t lo, uintptr_t hi)
{
    for (int k = 0; k < MAX_REGIONS; k++) {
        struct ovl__watch *w = atomic_load(&W.regs[k]);
        if (w && !w->is_send && lo < (uintptr_t)w->base + w->len && (uintptr_t)w->base < hi)
            return 1;
    }
    return 0;
}

/* A string move or store (rep movs, rep stos: glibc's memcpy and memset
 * for a few KiB and more) single-stepped would trap once per element. Do
 * the part of it that stays on the pages it is on now through
 * /proc/self/mem, advance its registers, and let it run on: one trap per
 * page. Only forward moves whose bytes on these pages are no pending
 * buffer's; anything else is stepped. 1 if done. */
static int string_move(void *uc)
{
    ucontext_t *u = uc;
    greg_t *g = u->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    int rep = 0, osize = 0, rexw = 0, n = 0;
    for (; n < 4; n++) {
        if (ip[n] == 0xf3)
            rep = 1;
        else if (ip[n] == 0x66)
            osize = 1;
        else if (ip[n] != 0x2e && ip[n] != 0x3e && ip[n] != 0x26 && ip[n] != 0x36)
            break;
    }
    if ((ip[n] & 0xf0) == 0x40) {
        rexw = (ip[n] & 0x08) != 0;
        n++;
    }
    unsigned char op = ip[n++];
    if (!rep || W.mem_fd < 0 || (g[REG_EFL] & 0x400) ||
        (op != 0xa4 && op != 0xa5 && op != 0xaa && op != 0xab))
        return 0;
    size_t sz = (op == 0xa4 || op == 0xaa) ? 1 : rexw ? 8 : osize ? 2 : 4;
    int move = op == 0xa4 || op == 0xa5;
    size_t ps = ovl__watch_page();
    uintptr_t dst = (uintptr_t)g[REG_RDI], src = move ? (uintptr_t)g[REG_RSI] : 0;
    size_t count = (size_t)g[REG_RCX];
    size_t k = count, room = (ps - (dst & (ps - 1))) / sz;
    if (room < k)
        k = room;
    if (move && (room = (ps - (src & (ps - 1))) / sz) < k)
        k = room;
    size_t bytes = k * sz;
    if (k == 0 || !page_plain_or_edge(dst & ~(uintptr_t)(ps - 1)) ||
        range_pending(dst, dst + bytes))
        return 0;
    if (move && (!page_plain_or_edge(src & ~(uintptr_t)(ps - 1)) ||
                 range_pending(src, src + bytes) || (dst > src && dst < src + bytes)))
        return 0;
    unsigned char b[4096];
    if (move) {
        if (pread(W.mem_fd, b, bytes, (off_t)src) != (ssize_t)bytes)
            return 0;
    } else {
        uint64_t v = (uint64_t)g[REG_RAX];
        for (size_t i = 0; i < bytes; i++)
            b[i] = (unsigned char)(v >> (8 * (i % sz)));
    }
    if (pwrite(W.mem_fd, b, bytes, (off_t)dst) != (ssize_t)bytes)
        return 0;
    g[REG_RDI] = (greg_t)(dst + bytes);
    if (move)
        g[REG_RSI] = (greg_t)(src + bytes);
    g[REG_RCX] = (greg_t)(count - k);
    if (count == k)
        g[REG_RIP] += n;
    return 1;
}

static void on_trap(int sig, siginfo_t *si, void *uc)
{
    if (!step_pages[0]) {
        struct sigaction *old = &W.old_trap;
        if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction)
            old->sa_sigaction(sig, si, uc);
        else if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler != SIG_DFL &&
                 old->sa_handler != SIG_IGN)
            old->sa_handler(sig);
        else if (old->sa_handler == SIG_DFL) {
            signal(SIGTRAP, SIG_DFL);
            raise(SIGTRAP);
        }
        return;
    }
    int saved = errno;
    ((ucontext_t *)uc)->uc_mcontext.gregs[REG_EFL] &= ~0x100;
    for (int k = 0; k < STEP_MAX; k++) {
        uintptr_t page = step_pages[k];
        step_pages[k] = 0;
        if (!page)
            continue;
        int e = edge_slot(page);
        if (e < 0)
            continue;
        ovl__spin_lock(&W.edges[e].busy);
        if (atomic_load(&W.edges[e].page) == page && atomic_load(&W.edges[e].refs) > 0)
            mprotect((void *)page, ovl__watch_page(), PROT_NONE);
        ovl__spin_unlock(&W.edges[e].busy);
    }
    errno = saved;
}
#endif

/* ---- the fault handler ---------------------------------------------------- */

static void fatal(const char *what, uintptr_t addr)
{
    say("ovl: ");
    say(what);
    say(" (address ");
    say_hex(addr);
    say(")\n");
    abort();
}

struct fault_wait {
    int (*ready)(const void *, size_t);
    const void *arg;
    size_t i;
    uintptr_t addr;
};

static int fault_served(const void *p)
{
    const struct fault_wait *f = p;
    if (f->ready(f->arg, f->i))
        return 1;
    if (!atomic_load(&ovl__g.initialized))
        fatal("access to a delta buffer still pending after ovl_finalize", f->addr);
    return 0;
}

/* Wait in the faulting thread until @ready(arg) holds. */
static void wait_for(int (*ready)(const void *, size_t), const void *arg, size_t i, uintptr_t addr)
{
    uint64_t t0 = ovl__now_ns();
    atomic_fetch_add_explicit(&ovl__g.st_fault_waits, 1, memory_order_relaxed);
    if (ovl__engine_driving())
        fatal("a continuation or progress handler touched a delta-receive buffer whose data "
              "has not arrived; it would wait for itself forever",
              addr);
    struct fault_wait f = { ready, arg, i, addr };
    ovl__engine_spin(fault_served, &f);
    uint64_t dt = ovl__now_ns() - t0;
    ovl__stats_wait_ns(dt);
    if (ovl__trace_on)
        ovl__trace_complete("watch", "fault-wait", (double)t0 / 1e3, (double)dt / 1e3, "addr",
                            (long long)addr, NULL, 0, NULL, 0);
}

static int page_valid(const void *w, size_t i)
{
    return atomic_load(&((const struct ovl__watch *)w)->valid[i]) != 0;
}

static int edge_open(const void *page, size_t unused)
{
    (void)unused;
    return !edge_guarded((uintptr_t)page);
}

static void send_fault(struct ovl__watch *w, size_t i, uintptr_t addr);

/* 1 if the fault was ovl's (and the access can be retried). */
static int handle(int sig, uintptr_t addr, void *uc)
{
    size_t ps = ovl__watch_page();
    uintptr_t page = addr & ~(uintptr_t)(ps - 1);

    uintptr_t probe = atomic_load(&W.probe);
    if (probe && page == probe) {
        if (W.probe_uffd) { /* a missing page: fill it, as a receive install does */
            struct uffdio_zeropage z = { .range = { .start = page, .len = ps }, .mode = 0 };
            ioctl(ovl__uffd_fd(), UFFDIO_ZEROPAGE, &z);
            return 1;
        }
        mprotect((void *)page, ps, PROT_READ | PROT_WRITE);
        return 1;
    }
    atomic_fetch_add_explicit(&ovl__g.st_faults, 1, memory_order_relaxed);
    if (edge_guarded(page)) {
#ifdef OVL_SINGLE_STEP
        /* A byte of a pending buffer on a page another buffer still guards
         * (two buffers share it): once its own bytes there are in, the
         * access is let through like a neighbour's. Waiting for the page
         * to open would wait for the other buffer too, which may never
         * come before this access is done. */
        struct ovl__watch *own = pending_buffer_of(addr);
        if (own && own->p0 <= page) {
            size_t i = (page - own->p0) / ps;
            if (i < own->npages && !atomic_load(&own->valid[i]))
                wait_for(page_valid, own, i, addr);
            if (!edge_guarded(page))
                return 1; /* opened meanwhile: retry */
        }
        if (string_move(uc) || step_over(page, uc)) {
            int e = edge_slot(page);
            atomic_fetch_add_explicit(&ovl__g.st_edge_steps, 1, memory_order_relaxed);
            if (e >= 0)
                atomic_fetch_add_explicit(&W.edges[e].steps, 1, memory_order_relaxed);
            return 1;
        }
#else
        (void)uc;
#endif
        wait_for(edge_open, (const void *)page, 0, addr);
        return 1;
    }
    for (int k = 0; k < MAX_REGIONS; k++) {
        struct ovl__watch *w = atomic_load(&W.regs[k]);
        if (!w || page < w->p0 || page >= w->p0 + w->npages * ps)
            continue;
        size_t i = (page - w->p0) / ps;
        if (ovl__trace_on)
            ovl__trace_instant("watch", w->is_send ? "fault-send" : "fault-recv", "page",
                               (long long)i, "addr", (long long)addr);
        if (w->is_send == OVL__WATCH_HOLD) {
            /* a hold region never guards its edge pages: not this one's */
            if (i < w->ilo || i >= w->ihi)
                continue;
            if (!atomic_load(&w->valid[i]))
                wait_for(page_valid, w, i, addr);
            return 1;
        }
        if (w->is_send) {
            send_fault(w, i, addr);
            return 1;
        }
        if (w->touch && w->touched && !atomic_exchange(&w->touched[i], 1))
            w->touch[atomic_fetch_add(&w->ntouch, 1)] = (uint32_t)i;
        if (!atomic_load(&w->valid[i]))
            wait_for(page_valid, w, i, addr);
        return 1;
    }
    (void)sig;
    /* Released while this fault was on its way: retry once per release
     * (a buffer used again and again faults at the same address each time
     * it races with its region's release). */
    for (int k = 0; k < RECENT; k++) {
        uintptr_t hi = atomic_load(&W.recent[k].hi), lo = atomic_load(&W.recent[k].lo);
        unsigned long g = atomic_load(&W.recent[k].gen);
        if (page >= lo && page < hi && (last_recent_fault != addr || last_recent_gen != g)) {
            last_recent_fault = addr;
            last_recent_gen = g;
            return 1;
        }
    }
    atomic_fetch_sub_explicit(&ovl__g.st_faults, 1, memory_order_relaxed);
    return 0;
}

static void chain(int sig, siginfo_t *si, void *uc)
{
    struct sigaction *old = sig == SIGBUS ? &W.old_bus : &W.old_segv;
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) {
            old->sa_sigaction(sig, si, uc);
            return;
        }
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    /* Default action: uninstall for this signal and return; the access
     * faults again and the kernel applies the default (crash, core). */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (si->si_code <= 0) /* sent with kill(): deliver it again */
        raise(sig);
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    int handled = 0;
    if (si && si->si_code > 0) { /* a real fault, not kill() */
        atomic_fetch_add(&W.in_handler, 1);
        handled = handle(sig, (uintptr_t)si->si_addr, uc);
        atomic_fetch_sub(&W.in_handler, 1);
    }
    if (!handled)
        chain(sig, si, uc);
    errno = saved;
}

/* ---- send regions ---------------------------------------------------------- */

static const struct ovl__watch_backend *backend(const struct ovl__watch *w)
{
    if (w->alias)
        return &ovl__watch_alias;
    return w->mon == OVL_MONITOR_UFFD ? &ovl__watch_uffd : &ovl__watch_mprotect;
}

static void send_fault(struct ovl__watch *w, size_t i, uintptr_t addr)
{
    ovl__spin_lock(&w->busy);
    const struct ovl__watch_backend *b = backend(w);
    if ((i >= w->s_lo && i < w->s_hi) || i < w->ilo || i >= w->ihi) {
        /* already writable (raced with another thread's fault): retry */
    } else if (i < w->s_lo) {
        /* A write into a part already sent. */
        size_t off = addr - (uintptr_t)w->base;
        size_t expect = (size_t)-1;
        atomic_compare_exchange_strong(&w->stale, &expect, off);
        if (expect == (size_t)-1) {
            say("ovl: delta send buffer ");
            say_hex((uintptr_t)w->base);
            say(" written at offset ");
            say_hex(off);
            say(" after that part was sent (OS-triggered delta send needs the buffer written "
                "in order; choose OVL_MONITOR_EXPLICIT in code and call ovl_delta_produced for "
                "other orders); "
                "the message is marked stale (OVL_ERR_STALE)\n");
        }
        b->send_protect(w, i, i + 1, 0);
    } else {
        /* A store may straddle pages i-1 and i and fault on page i before
         * writing anything: the last bytes of page i-1 are not final yet.
         * Send up to SLACK bytes before page i, and leave page i-1 writable
         * until the next delta. */
        enum { SLACK = 64 };
        size_t upto = (size_t)((uintptr_t)ovl__watch_page_addr(w, i) - (uintptr_t)w->base);
        upto = upto > SLACK ? upto - SLACK : 0;
        if (ovl__engine_driving())
            fatal("a continuation wrote a delta-send buffer that is being monitored", addr);
        size_t d = w->produced(w->ctx, upto);
        size_t dp = d / ovl__watch_page();
        if (dp < 1)
            dp = 1;
        size_t hi = i + dp > w->ihi ? w->ihi : i + dp;
        size_t lo = i > w->s_lo ? i - 1 : i;
        /* Open the next delta first, then write-protect what was sent. */
        if (b->send_protect(w, i, hi, 0) != 0)
            b->send_protect(w, i, w->ihi, 0); /* coarser: stop monitoring */
        if (lo > w->s_lo)
            b->send_protect(w, w->s_lo, lo, 1);
        w->s_lo = lo;
        w->s_hi = hi;
    }
    ovl__spin_unlock(&w->busy);
}

int ovl__watch_send_create(ovl_monitor_t m, void *base, size_t len, size_t delta,
                           ovl__watch_produced_fn fn, void *ctx, struct ovl__watch **out)
{
    struct ovl__watch *w = new_region(0);
    if (!w)
        return OVL_ERR_NOMEM;
    geometry(w, base, len);
    w->is_send = 1;
    w->mon = m;
    w->alias = ovl__alloc_alias(base, len);
    w->produced = fn;
    w->ctx = ctx;
    size_t dp = delta / ovl__watch_page();
    if (dp < 1)
        dp = 1;
    w->s_lo = w->ilo;
    w->s_hi = w->ilo + dp > w->ihi ? w->ihi : w->ilo + dp;
    pthread_mutex_lock(&W.lock);
    int rc = reg_add(w);
    pthread_mutex_unlock(&W.lock);
    if (rc) {
        ovl__page_free(w);
        return ovl__error(OVL_ERR_MONITOR, "ovl_delta_send_begin",
                          "more than %d delta buffers pending at once", MAX_REGIONS);
    }
    int err = 0;
    if (w->s_hi < w->ihi) {
        const struct ovl__watch_backend *b = backend(w);
        if ((err = b->send_guard(w)) == 0 && (err = b->send_protect(w, w->s_hi, w->ihi, 1)) != 0)
            b->send_done(w);
    }
    if (err) {
        ovl__watch_destroy(w);
        return ovl__error(OVL_ERR_MONITOR, "ovl_delta_send_begin",
                          "cannot write-protect the buffer with %s: %s%s", ovl_monitor_name(m),
                          strerror(err),
                          err == ENOMEM ? " (vm.max_map_count reached? try OVL_MONITOR=uffd "
                                          "or explicit)"
                                        : "");
    }
    *out = w;
    return OVL_SUCCESS;
}

void ovl__watch_send_seal(struct ovl__watch *w)
{
    ovl__spin_lock(&w->busy);
    if (w->s_hi > w->s_lo)
        backend(w)->send_protect(w, w->s_lo, w->s_hi, 1);
    w->s_lo = w->s_hi = w->ihi;
    ovl__spin_unlock(&w->busy);
}

size_t ovl__watch_send_stale(struct ovl__watch *w)
{
    return atomic_load(&w->stale);
}

void ovl__watch_send_finish(struct ovl__watch *w)
{
    ovl__spin_lock(&w->busy);
    if (w->ihi > w->ilo)
        backend(w)->send_done(w);
    ovl__spin_unlock(&w->busy);
    pthread_mutex_lock(&W.lock);
    reg_remove_locked(w);
    pthread_mutex_unlock(&W.lock);
}

/* ---- receive regions ------------------------------------------------------- */

static int recv_create(const char *fn, ovl_monitor_t m, void *base, size_t len, int lazy,
                       struct ovl__watch **out);

int ovl__watch_recv_create(const char *fn, ovl_monitor_t m, void *base, size_t len,
                           struct ovl__watch **out)
{
    return recv_create(fn, m, base, len, 0, out);
}

int ovl__watch_recv_create_lazy(const char *fn, void *base, size_t len, struct ovl__watch **out)
{
    return recv_create(fn, OVL_MONITOR_MPROTECT, base, len, 1, out);
}

int ovl__watch_recv_guard(struct ovl__watch *w, size_t off)
{
    if (off >= w->len || w->mon != OVL_MONITOR_MPROTECT)
        return 0;
    size_t i = ((uintptr_t)w->base + off - w->p0) / ovl__watch_page();
    if (is_edge(w, i) || atomic_load(&w->valid[i]))
        return 0;
    return mprotect(ovl__watch_page_addr(w, i), ovl__watch_page(), PROT_NONE) == 0 ? 0 : errno;
}

static int recv_create(const char *fn, ovl_monitor_t m, void *base, size_t len, int lazy,
                       struct ovl__watch **out)
{
    struct ovl__watch probe;
    geometry(&probe, base, len);
    struct ovl__watch *w = new_region(probe.npages);
    if (!w)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory to track %zu pages", probe.npages);
    geometry(w, base, len);
    w->mon = m;
    for (size_t i = 0; i < w->npages; i++)
        if (page_bytes(w, i) == 0)
            atomic_store(&w->valid[i], 1);
    if (ovl__trace_on && m != OVL_MONITOR_EXPLICIT && w->npages < UINT32_MAX) {
        /* best effort: without memory, no page-access trace */
        w->touch = ovl__page_alloc(w->npages * (sizeof *w->touch + 1)); /* handler reads it */
        if (w->touch) {
            w->touched = (_Atomic uint8_t *)(w->touch + w->npages);
            memset((void *)w->touched, 0, w->npages);
        }
    }
    if (m == OVL_MONITOR_EXPLICIT) {
        *out = w;
        return OVL_SUCCESS;
    }
    w->alias = ovl__alloc_alias(base, len);
    pthread_mutex_lock(&W.lock);
    reap_locked();
    int err = 0;
    if (reg_add(w) != 0) {
        pthread_mutex_unlock(&W.lock);
        free_region(w);
        return ovl__error(OVL_ERR_MONITOR, fn, "more than %d delta buffers pending at once",
                          MAX_REGIONS);
    }
    int probe_mem = !w->alias; /* /proc/self/mem writes: will they pass? */
    if (w->npages > 0 && is_edge(w, 0) &&
        (err = edge_get_locked(w->p0, probe_mem ? (uintptr_t)base : 0)) == 0)
        w->edge_lo = 1;
    if (!err && w->npages > 1 && is_edge(w, w->npages - 1) &&
        (err = edge_get_locked((uintptr_t)ovl__watch_page_addr(w, w->npages - 1),
                               probe_mem ? (uintptr_t)base + len - 1 : 0)) == 0)
        w->edge_hi = 1;
    if (!err && w->ihi > w->ilo && !lazy)
        err = backend(w)->recv_guard(w);
    if (!err && w->ihi > w->ilo && lazy && probe_mem) { /* guarded later: shared memory? */
        void *pg = ovl__watch_page_addr(w, w->ilo);
        err = ovl__watch_protect_probed(pg, ovl__watch_page(), (uintptr_t)pg);
        if (err == 0)
            mprotect(pg, ovl__watch_page(), PROT_READ | PROT_WRITE);
        else if (err != EXDEV)
            err = 0; /* cannot protect it now: the later guard finds out */
    }
    if (err) {
        edges_release_locked(w);
        pthread_mutex_unlock(&W.lock);
        ovl__watch_destroy(w);
        if (err == EXDEV)
            return ovl__error(OVL_ERR_MONITOR, fn,
                              "buffer [%p, +%zu) is shared memory (MAP_SHARED, shm, an MPI "
                              "shared window), which the %s monitor cannot guard: use private "
                              "memory, or OVL_MONITOR_EXPLICIT for this request",
                              base, len, ovl_monitor_name(m));
        return ovl__error(OVL_ERR_MONITOR, fn, "cannot guard the buffer with %s: %s%s",
                          ovl_monitor_name(m), strerror(err),
                          err == ENOMEM && m == OVL_MONITOR_MPROTECT
                              ? " (vm.max_map_count reached? try OVL_MONITOR=uffd, or "
                                "OVL_MONITOR_EXPLICIT in code)"
                          : err == ENOMEM
                              ? " (vm.max_map_count reached? try OVL_MONITOR_EXPLICIT in code)"
                          : err == ENOSPC ? " (too many buffers share pages)"
                                          : "");
    }
    pthread_mutex_unlock(&W.lock);
    *out = w;
    return OVL_SUCCESS;
}

/* Open interior pages [i, j) (driver). */
static void open_interior(struct ovl__watch *w, size_t i, size_t j)
{
    if (i >= j)
        return;
    if (w->mon != OVL_MONITOR_EXPLICIT && backend(w)->recv_open(w, i, j) != 0) {
        w->open_deferred = 1; /* map count: retried coarser, or at finish */
        return;
    }
    for (size_t k = i; k < j; k++)
        atomic_store(&w->valid[k], 1);
}

/* A page is complete: make it accessible. */
static void page_complete(struct ovl__watch *w, size_t i)
{
    if (w->mon == OVL_MONITOR_EXPLICIT) {
        atomic_store(&w->valid[i], 1);
        return;
    }
    if (is_edge(w, i)) {
        int err = 0;
        pthread_mutex_lock(&W.lock);
        if ((i == 0 && w->edge_lo) || (i == w->npages - 1 && w->edge_hi)) {
            err = edge_put_locked((uintptr_t)ovl__watch_page_addr(w, i), 1, w);
            if (!err && i == 0)
                w->edge_lo = 0;
            else if (!err)
                w->edge_hi = 0;
        }
        pthread_mutex_unlock(&W.lock);
        if (err) { /* map count: tried again at the next piece, opened at finish */
            w->edge_stuck = 1;
            return;
        }
        atomic_store(&w->valid[i], 1);
    }
}

void ovl__watch_recv_install(struct ovl__watch *w, size_t off, const void *src, size_t len)
{
    if (len == 0 || off >= w->len)
        return;
    if (len > w->len - off)
        len = w->len - off;
    size_t ps = ovl__watch_page();
    const char *s = src;
    uintptr_t a = (uintptr_t)w->base + off, e = a + len;
    /* 1. place the bytes */
    if (w->mon == OVL_MONITOR_EXPLICIT) {
        if (w->base + off != src) /* else it landed in place; the buffer may
                                   * share another receive's guarded edge */
            ovl__watch_write(w->base + off, src, len);
    } else {
        uintptr_t ilo_a = (uintptr_t)ovl__watch_page_addr(w, w->ilo);
        uintptr_t ihi_a = (uintptr_t)ovl__watch_page_addr(w, w->ihi);
        /* head in the first edge page, interior, tail in the last edge page */
        uintptr_t h_end = a < ilo_a ? (e < ilo_a ? e : ilo_a) : a;
        uintptr_t m_lo = a > ilo_a ? a : ilo_a, m_hi = e < ihi_a ? e : ihi_a;
        uintptr_t t_lo = a > ihi_a ? a : ihi_a;
        if (w->alias) { /* edges too: ovl writes every page through the alias */
            backend(w)->recv_place(w, off, s, len);
        } else {
            if (h_end > a)
                ovl__watch_poke((void *)a, s, h_end - a);
            if (m_hi > m_lo)
                backend(w)->recv_place(w, m_lo - (uintptr_t)w->base, s + (m_lo - a), m_hi - m_lo);
            if (e > t_lo && t_lo >= a)
                ovl__watch_poke((void *)t_lo, s + (t_lo - a), e - t_lo);
        }
    }
    /* 2. count, and open what is complete (runs of interior pages at once) */
    size_t i0 = (a - w->p0) / ps, i1 = (e - 1 - w->p0) / ps;
    size_t run = (size_t)-1;
    for (size_t i = i0; i <= i1; i++) {
        uintptr_t lo = w->p0 + i * ps, hi = lo + ps;
        if (lo < a)
            lo = a;
        if (hi > e)
            hi = e;
        w->got[i] += (uint32_t)(hi - lo);
        int done = w->got[i] >= page_bytes(w, i);
        if (done && !is_edge(w, i)) {
            if (run == (size_t)-1)
                run = i;
            continue;
        }
        if (run != (size_t)-1) {
            open_interior(w, run, i);
            run = (size_t)-1;
        }
        if (done)
            page_complete(w, i);
    }
    if (run != (size_t)-1)
        open_interior(w, run, i1 + 1);
    if (w->edge_stuck) { /* complete edge pages that could not be opened yet */
        size_t last = w->npages - 1;
        w->edge_stuck = 0;
        if (w->edge_lo && w->got[0] >= page_bytes(w, 0))
            page_complete(w, 0);
        if (last > 0 && w->edge_hi && w->got[last] >= page_bytes(w, last))
            page_complete(w, last);
    }
    if (w->open_deferred && w->mon == OVL_MONITOR_MPROTECT) {
        /* coarser: open the longest complete run around this piece */
        size_t lo = i0, hi = i1 + 1;
        while (lo > w->ilo && w->got[lo - 1] >= page_bytes(w, lo - 1))
            lo--;
        while (hi < w->ihi && w->got[hi] >= page_bytes(w, hi))
            hi++;
        if (lo < w->ilo)
            lo = w->ilo;
        if (hi > w->ihi)
            hi = w->ihi;
        int all = 1;
        for (size_t k = lo; k < hi; k++)
            if (w->got[k] < page_bytes(w, k))
                all = 0;
        if (all && lo < hi && backend(w)->recv_open(w, lo, hi) == 0)
            for (size_t k = lo; k < hi; k++)
                atomic_store(&w->valid[k], 1);
    }
}

char *ovl__watch_recv_landing(struct ovl__watch *w)
{
    if (!w)
        return NULL;
    if (w->mon == OVL_MONITOR_EXPLICIT)
        return w->base; /* nothing guarded: bytes may land in the buffer */
    const struct ovl__watch_backend *b = backend(w);
    return b->recv_landing ? b->recv_landing(w) : NULL;
}

int ovl__watch_recv_ready(struct ovl__watch *w, size_t off, size_t len)
{
    if (len == 0 || off >= w->len)
        return 1;
    if (len > w->len - off)
        len = w->len - off;
    size_t ps = ovl__watch_page();
    uintptr_t a = (uintptr_t)w->base + off;
    size_t i0 = (a - w->p0) / ps, i1 = (a + len - 1 - w->p0) / ps;
    for (size_t i = i0; i <= i1; i++)
        if (!atomic_load(&w->valid[i]))
            return 0;
    return 1;
}

size_t ovl__watch_recv_prefix(struct ovl__watch *w)
{
    size_t i = 0;
    while (i < w->npages && atomic_load(&w->valid[i]))
        i++;
    if (i == w->npages)
        return w->len;
    uintptr_t end = w->p0 + i * ovl__watch_page();
    return end > (uintptr_t)w->base ? end - (uintptr_t)w->base : 0;
}

void ovl__watch_recv_finish(struct ovl__watch *w)
{
    if (w->mon == OVL_MONITOR_EXPLICIT) {
        for (size_t i = 0; i < w->npages; i++)
            atomic_store(&w->valid[i], 1);
        return;
    }
    /* Pages the message ended in (or that got part of a truncated one)
     * hold data that must be installed before the rest is opened. */
    for (size_t i = w->ilo; i < w->ihi;) {
        if (atomic_load(&w->valid[i]) || w->got[i] == 0) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < w->ihi && !atomic_load(&w->valid[j]) && w->got[j] > 0)
            j++;
        open_interior(w, i, j);
        i = j;
    }
    /* Edges first: one that cannot be opened alone (map count) is opened
     * with the interior, after which the backend has nothing left to split. */
    pthread_mutex_lock(&W.lock);
    edges_release_locked(w);
    pthread_mutex_unlock(&W.lock);
    if (w->ihi > w->ilo)
        backend(w)->recv_done(w);
    if (w->touch && w->touched)
        ovl__trace_page_access(w->base, w->len, w->npages, w->touch, atomic_load(&w->ntouch));
    pthread_mutex_lock(&W.lock);
    for (size_t i = 0; i < w->npages; i++)
        atomic_store(&w->valid[i], 1);
    reg_remove_locked(w);
    pthread_mutex_unlock(&W.lock);
}

/* ---- choosing a monitor ------------------------------------------------------ */

const char *ovl_monitor_name(ovl_monitor_t m)
{
    switch (m) {
    case OVL_MONITOR_AUTO:
        return "auto";
    case OVL_MONITOR_UFFD:
        return "uffd";
    case OVL_MONITOR_MPROTECT:
        return "mprotect";
    case OVL_MONITOR_EXPLICIT:
        return "explicit";
    }
    return "unknown";
}

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int uffd_ok;
static char uffd_why[256];

/* The descriptor is kept open: it serves every region of the process. */
static void probe_uffd(void)
{
    uffd_ok = ovl__uffd_open(uffd_why, sizeof uffd_why) == 0;
}

static pthread_once_t mem_once = PTHREAD_ONCE_INIT;
static char mem_why[160]; /* why /proc/self/mem cannot serve; "" when it can */

/* /proc/self/mem, through which fault monitors write arriving bytes onto
 * guarded pages: opened once, kept for the life of the process. Checked by
 * writing a PROT_NONE page, as a receive does: the open may succeed where
 * that write is refused (proc_mem.force_override=never, a security
 * module). */
static void open_mem(void)
{
    size_t ps = ovl__watch_page();
    int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(mem_why, sizeof mem_why, "/proc/self/mem cannot be opened for writing (%s)",
                 strerror(errno));
        return;
    }
    char *p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) { /* else: cannot tell, assume it works */
        const char c = 0x5a;
        p[0] = 0;
        int e = 0;
        ssize_t n = -1;
        if (mprotect(p, ps, PROT_NONE) == 0) {
            n = pwrite(fd, &c, 1, (off_t)(uintptr_t)p);
            e = errno;
            mprotect(p, ps, PROT_READ);
        }
        if (n == 1 && p[0] != c)
            n = 0;
        if (n != 1) {
            snprintf(mem_why, sizeof mem_why, "/proc/self/mem does not write protected pages (%s)",
                     n < 0 ? strerror(e) : "nothing written");
            close(fd);
            fd = -1;
        }
        munmap(p, ps);
    }
    W.mem_fd = fd;
}

/* The one resolver behind ovl_monitor_probe (so ovl-info) and the library
 * (ovl_init, every request): what @req gives in this process, and why
 * (@why may be NULL). OVL_SUCCESS; OVL_ERR_UNSUPPORTED: uffd was asked for
 * and is unavailable, *chosen is the fallback ovl_init takes (mprotect);
 * OVL_ERR_MONITOR: a fault monitor was asked for where none can work
 * (ovl_init fails), *chosen = @req. Auto then gives explicit: nothing
 * guards arriving data, and ovl_init warns. */
static int resolve(ovl_monitor_t req, ovl_monitor_t *chosen, char *why, size_t len)
{
    pthread_once(&mem_once, open_mem);
    const char *name = ovl_monitor_name(req);
    if (req == OVL_MONITOR_EXPLICIT) {
        *chosen = OVL_MONITOR_EXPLICIT;
        if (why)
            snprintf(why, len,
                     "explicit: no faults, ovl_delta_produced/ovl_delta_need annotations "
                     "(requested)");
        return OVL_SUCCESS;
    }
    if (mem_why[0]) {
        if (req == OVL_MONITOR_AUTO) {
            *chosen = OVL_MONITOR_EXPLICIT;
            if (why)
                snprintf(why, len,
                         "auto -> explicit: %s, so no fault monitor can work: a program that "
                         "does not call ovl_delta_need/ovl_get_need reads data before it arrives",
                         mem_why);
            return OVL_SUCCESS;
        }
        *chosen = req;
        if (why)
            snprintf(why, len,
                     "%s: unusable: %s (fault monitors write arriving data through it); "
                     "asked for by name, ovl_init and requests fail with OVL_ERR_MONITOR",
                     name, mem_why);
        return OVL_ERR_MONITOR;
    }
    if (req == OVL_MONITOR_MPROTECT) {
        *chosen = OVL_MONITOR_MPROTECT;
        if (why)
            snprintf(why, len, "mprotect: page protection and a SIGSEGV handler (requested)");
        return OVL_SUCCESS;
    }
    pthread_once(&probe_once, probe_uffd);
    *chosen = uffd_ok ? OVL_MONITOR_UFFD : OVL_MONITOR_MPROTECT;
    if (why && uffd_ok)
        snprintf(why, len, "%s: %s", req == OVL_MONITOR_AUTO ? "auto -> uffd" : "uffd", uffd_why);
    else if (why)
        snprintf(why, len, "%s -> mprotect: %s%s", name, uffd_why,
                 req == OVL_MONITOR_UFFD ? "; ovl_init falls back to mprotect" : "");
    return uffd_ok || req == OVL_MONITOR_AUTO ? OVL_SUCCESS : OVL_ERR_UNSUPPORTED;
}

int ovl_monitor_probe(ovl_monitor_t req, ovl_monitor_t *chosen, char *why, size_t why_len)
{
    if (!chosen || (unsigned)req > OVL_MONITOR_EXPLICIT)
        return OVL_ERR_ARG;
    char buf[480];
    int rc = resolve(req, chosen, buf, sizeof buf);
    if (why && why_len) {
        strncpy(why, buf, why_len - 1);
        why[why_len - 1] = 0;
    }
    return rc;
}

/* A transfer whose monitor nobody chose in code (the request's is auto and so
 * is the configuration's) resolved to explicit because no fault monitor works
 * here: nothing would stop the program from reading bytes that have not
 * arrived, so the caller completes it inside the call. Says so once. */
int ovl__watch_degraded(const char *fn, ovl_monitor_t asked, ovl_monitor_t got)
{
    static atomic_int said;
    if (got != OVL_MONITOR_EXPLICIT || asked != OVL_MONITOR_AUTO ||
        ovl__g.cfg.monitor != OVL_MONITOR_AUTO)
        return 0;
    if (ovl__g.cfg.verbose >= 1 && !atomic_exchange(&said, 1))
        fprintf(stderr,
                "ovl: warning: %s (rank %d): no fault monitor works here (%s), so delta "
                "receives and gets complete inside the call, without overlap; choose "
                "OVL_MONITOR_EXPLICIT in code with ovl_delta_need/ovl_get_need to overlap\n",
                fn, ovl__g.rank, mem_why[0] ? mem_why : "fault handler not installed");
    return 1;
}

ovl_monitor_t ovl__watch_resolve(ovl_monitor_t m)
{
    if (m == OVL_MONITOR_AUTO)
        m = ovl__g.cfg.monitor;
    ovl_monitor_t chosen = OVL_MONITOR_EXPLICIT;
    if (resolve(m, &chosen, NULL, 0) == OVL_ERR_MONITOR || !W.installed)
        return OVL_MONITOR_EXPLICIT; /* no fault can be served (ovl_init said so) */
    return chosen;
}

/* ---- fault cost ------------------------------------------------------------- */

static double measure_mprotect_fault(void)
{
    size_t ps = ovl__watch_page();
    char *p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 5.0;
    p[0] = 1;
    atomic_store(&W.probe, (uintptr_t)p);
    double best = 1e9;
    for (int k = 0; k < 8; k++) {
        mprotect(p, ps, PROT_NONE);
        double t0 = ovl__now_us();
        *(volatile char *)p = (char)k;
        double t = ovl__now_us() - t0;
        if (t < best)
            best = t;
    }
    atomic_store(&W.probe, 0);
    munmap(p, ps);
    return best;
}

/* userfaultfd in SIGBUS mode: a missing-page fault on a registered page,
 * resolved by the handler with UFFDIO_ZEROPAGE (as a receive is installed
 * with UFFDIO_COPY). */
static double measure_uffd_fault(void)
{
    size_t ps = ovl__watch_page();
    int fd = ovl__uffd_fd();
    if (fd < 0)
        return -1;
    char *p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    struct uffdio_register r = { .range = { .start = (uintptr_t)p, .len = ps },
                                 .mode = UFFDIO_REGISTER_MODE_MISSING };
    double best = -1;
    if (ioctl(fd, UFFDIO_REGISTER, &r) == 0) {
        W.probe_uffd = 1;
        atomic_store(&W.probe, (uintptr_t)p);
        best = 1e9;
        for (int k = 0; k < 8; k++) {
            madvise(p, ps, MADV_DONTNEED);
            double t0 = ovl__now_us();
            (void)*(volatile char *)p;
            double t = ovl__now_us() - t0;
            if (t < best)
                best = t;
        }
        atomic_store(&W.probe, 0);
        W.probe_uffd = 0;
        struct uffdio_range u = { .start = (uintptr_t)p, .len = ps };
        ioctl(fd, UFFDIO_UNREGISTER, &u);
    }
    munmap(p, ps);
    return best;
}

double ovl__watch_fault_cost_us(ovl_monitor_t m)
{
    if (m == OVL_MONITOR_EXPLICIT)
        return 0.1;
    if (!W.installed)
        return -1;
    if (m == OVL_MONITOR_UFFD) {
        if (ovl__watch_resolve(OVL_MONITOR_UFFD) != OVL_MONITOR_UFFD)
            return -1;
        if (W.fault_us[OVL_MONITOR_UFFD] == 0)
            W.fault_us[OVL_MONITOR_UFFD] = measure_uffd_fault();
        return W.fault_us[OVL_MONITOR_UFFD];
    }
    if (W.fault_us[OVL_MONITOR_MPROTECT] == 0)
        W.fault_us[OVL_MONITOR_MPROTECT] = measure_mprotect_fault();
    return W.fault_us[OVL_MONITOR_MPROTECT];
}

double ovl__watch_protect_cost_us(ovl_monitor_t m, size_t npages, int reps)
{
    size_t ps = ovl__watch_page(), len = npages * ps;
    if (!npages || m == OVL_MONITOR_EXPLICIT || m == OVL_MONITOR_AUTO)
        return -1;
    int fd = -1;
    if (m == OVL_MONITOR_UFFD) {
        if (ovl__watch_resolve(OVL_MONITOR_UFFD) != OVL_MONITOR_UFFD)
            return -1;
        fd = ovl__uffd_fd();
    }
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    memset(p, 1, len); /* populated, as a buffer the program wrote */
    double best = -1;
    if (fd >= 0) {
        struct uffdio_register r = { .range = { .start = (uintptr_t)p, .len = len },
                                     .mode = UFFDIO_REGISTER_MODE_WP };
        if (ioctl(fd, UFFDIO_REGISTER, &r) == 0) {
            best = 1e30;
            for (int k = 0; k < reps; k++) {
                struct uffdio_writeprotect w = { .range = { .start = (uintptr_t)p, .len = len },
                                                 .mode = UFFDIO_WRITEPROTECT_MODE_WP };
                double t0 = ovl__now_us();
                int rc = ioctl(fd, UFFDIO_WRITEPROTECT, &w);
                double t = ovl__now_us() - t0;
                w.mode = 0;
                ioctl(fd, UFFDIO_WRITEPROTECT, &w);
                if (rc != 0) {
                    best = -1;
                    break;
                }
                if (t < best)
                    best = t;
            }
            struct uffdio_range u = { .start = (uintptr_t)p, .len = len };
            ioctl(fd, UFFDIO_UNREGISTER, &u);
        }
    } else {
        best = 1e30;
        for (int k = 0; k < reps; k++) {
            double t0 = ovl__now_us();
            mprotect(p, len, PROT_NONE);
            double t = ovl__now_us() - t0;
            mprotect(p, len, PROT_READ | PROT_WRITE);
            if (t < best)
                best = t;
        }
    }
    munmap(p, len);
    return best;
}

/* ---- life cycle --------------------------------------------------------------- */

int ovl__watch_init(void)
{
    ovl__watch_page();
    ovl_monitor_t m = ovl__g.cfg.monitor, chosen;
    char why[480];
    int rc = resolve(m, &chosen, why, sizeof why);
    if (rc == OVL_ERR_MONITOR)
        return ovl__error(OVL_ERR_MONITOR, "ovl_init",
                          "OVL_MONITOR=%s cannot work in this process: %s. Use "
                          "OVL_MONITOR=auto, choose OVL_MONITOR_EXPLICIT in code with "
                          "ovl_delta_produced/ovl_delta_need and ovl_get_need, or make "
                          "/proc/self/mem writable (ovl-info)",
                          ovl_monitor_name(m), mem_why);
    if (W.mem_fd < 0 && m == OVL_MONITOR_AUTO &&
        (ovl__g.cfg.verbose >= 2 ||
         (ovl__g.cfg.verbose >= 1 &&
          (!ovl__g.node_of || ovl__g.node_of[ovl__g.rank] == ovl__g.rank))))
        fprintf(stderr,
                "ovl: warning: %s: no fault monitor, OVL_MONITOR=auto gives explicit: delta "
                "receives and gets complete inside the call unless the code chooses "
                "OVL_MONITOR_EXPLICIT (ovl-info)\n",
                mem_why);
    if (!W.installed && W.mem_fd >= 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, &W.old_segv) != 0 || sigaction(SIGBUS, &sa, &W.old_bus) != 0)
            return ovl__error(OVL_ERR_MONITOR, "ovl_init", "cannot install the fault handler: %s",
                              strerror(errno));
#ifdef OVL_SINGLE_STEP
        sa.sa_sigaction = on_trap;
        sigaction(SIGTRAP, &sa, &W.old_trap);
#endif
        W.installed = 1;
    }
    return OVL_SUCCESS;
}

void ovl__watch_fini(void)
{
    pthread_mutex_lock(&W.lock);
    while (atomic_load(&W.in_handler))
        ovl__relax();
    reap_locked();
    free(W.zombie_v);
    W.zombie_v = NULL;
    W.capzombies = 0;
    pthread_mutex_unlock(&W.lock);
    ovl__uffd_shadow_trim();
    if (W.installed) {
        /* Put back the previous handlers, unless someone replaced ours. */
        struct sigaction cur;
        if (sigaction(SIGSEGV, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
            cur.sa_sigaction == on_fault)
            sigaction(SIGSEGV, &W.old_segv, NULL);
        if (sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
            cur.sa_sigaction == on_fault)
            sigaction(SIGBUS, &W.old_bus, NULL);
#ifdef OVL_SINGLE_STEP
        if (sigaction(SIGTRAP, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
            cur.sa_sigaction == on_trap)
            sigaction(SIGTRAP, &W.old_trap, NULL);
#endif
        W.installed = 0;
    }
}

/* ---- hold regions (one-sided put sources) -------------------------------------
 * The program may read the buffer but a write to an interior page waits
 * until that page is released (its data has left). Edge pages are never
 * protected: the caller copies their bytes before the transfer. Uses the
 * send backends' write protection and the receive side's `valid` array. */

int ovl__watch_hold_create(ovl_monitor_t m, const void *base, size_t len, struct ovl__watch **out)
{
    static const char *fn = "ovl_put";
    struct ovl__watch probe;
    geometry(&probe, (void *)base, len);
    struct ovl__watch *w = new_region(probe.npages);
    if (!w)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory to track %zu pages", probe.npages);
    geometry(w, (void *)base, len);
    w->is_send = OVL__WATCH_HOLD;
    w->mon = m;
    w->alias = ovl__alloc_alias(base, len);
    for (size_t i = 0; i < w->npages; i++)
        if (is_edge(w, i))
            atomic_store(&w->valid[i], 1);
    if (m == OVL_MONITOR_EXPLICIT || w->ihi == w->ilo) {
        for (size_t i = 0; i < w->npages; i++)
            atomic_store(&w->valid[i], 1);
        *out = w;
        return OVL_SUCCESS;
    }
    pthread_mutex_lock(&W.lock);
    reap_locked();
    if (reg_add(w) != 0) {
        pthread_mutex_unlock(&W.lock);
        free_region(w);
        return ovl__error(OVL_ERR_MONITOR, fn, "more than %d monitored buffers at once",
                          MAX_REGIONS);
    }
    pthread_mutex_unlock(&W.lock);
    const struct ovl__watch_backend *b = backend(w);
    int err = b->send_guard(w);
    if (!err && (err = b->send_protect(w, w->ilo, w->ihi, 1)) != 0)
        b->send_done(w);
    if (err) {
        ovl__watch_destroy(w);
        return ovl__error(OVL_ERR_MONITOR, fn, "cannot write-protect the source with %s: %s%s",
                          ovl_monitor_name(m), strerror(err),
                          err == ENOMEM ? " (vm.max_map_count reached? try OVL_MONITOR=uffd "
                                          "or explicit)"
                                        : "");
    }
    *out = w;
    return OVL_SUCCESS;
}

void ovl__watch_hold_release(struct ovl__watch *w, size_t off, size_t len)
{
    if (len == 0 || off >= w->len || w->ihi == w->ilo)
        return;
    if (len > w->len - off)
        len = w->len - off;
    size_t ps = ovl__watch_page();
    uintptr_t a = (uintptr_t)w->base + off, e = a + len;
    /* interior pages wholly inside [a, e) */
    size_t i = (a - w->p0 + ps - 1) / ps, j = (e - w->p0) / ps;
    if (i < w->ilo)
        i = w->ilo;
    if (j > w->ihi)
        j = w->ihi;
    if (i >= j)
        return;
    if (w->mon != OVL_MONITOR_EXPLICIT) {
        ovl__spin_lock(&w->busy);
        if (backend(w)->send_protect(w, i, j, 0) != 0)
            backend(w)->send_protect(w, w->ilo, w->ihi, 0); /* coarser */
        ovl__spin_unlock(&w->busy);
    }
    for (size_t k = i; k < j; k++)
        atomic_store(&w->valid[k], 1);
}

void ovl__watch_hold_finish(struct ovl__watch *w)
{
    if (w->mon != OVL_MONITOR_EXPLICIT && w->ihi > w->ilo) {
        ovl__spin_lock(&w->busy);
        backend(w)->send_done(w);
        ovl__spin_unlock(&w->busy);
    }
    for (size_t i = 0; i < w->npages; i++)
        atomic_store(&w->valid[i], 1);
    pthread_mutex_lock(&W.lock);
    reg_remove_locked(w);
    pthread_mutex_unlock(&W.lock);
}
