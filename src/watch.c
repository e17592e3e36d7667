/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * watch: the access monitor. A region's pages become valid over time
 * (receive) or are reported as the program finishes writing them (send).
 * This file holds what every backend shares: the registry of regions, the
 * page bookkeeping of send, receive and hold regions, and the edge pages.
 * The one fault handler for SIGSEGV (page protection) and SIGBUS
 * (userfaultfd in SIGBUS mode) is watch_fault.c; which monitor a process
 * or a request gets, and what each costs, watch_monitor.c; the backends
 * that guard and open interior pages, watch_uffd.c and watch_mprotect.c.
 *
 * The fault handler reads the registry without a lock: it scans a fixed
 * array of atomic pointers, and regions are freed only when no handler is
 * running (`in_handler`), so a handler never reads freed memory. Nothing
 * here takes a lock the handler takes.
 */

#include "watch_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_size;

struct ovl__watch_state ovl__watch_g = { .lock = PTHREAD_MUTEX_INITIALIZER, .mem_fd = -1 };

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

/* Below this, glibc's malloc never maps a block of its own (its mmap
 * threshold starts at 128 KiB and only rises): half of that, so a block's
 * header never takes it across. */
#define BUF_MAPPED ((size_t)64 << 10)

/* The header before an ovl__buf_alloc block: its size and where it came
 * from; 16 bytes, so the block keeps malloc's alignment. */
struct buf_hdr {
    size_t bytes;
    size_t mapped;
};

void *ovl__buf_alloc(size_t bytes)
{
    if (bytes > SIZE_MAX - sizeof(struct buf_hdr))
        return NULL;
    size_t n = sizeof(struct buf_hdr) + bytes;
    struct buf_hdr *h = n >= BUF_MAPPED ? ovl__page_alloc(n) : malloc(n);
    if (!h)
        return NULL;
    *h = (struct buf_hdr){ bytes, n >= BUF_MAPPED };
    return h + 1;
}

void *ovl__buf_realloc(void *p, size_t bytes)
{
    if (!p)
        return ovl__buf_alloc(bytes);
    const struct buf_hdr *h = (const struct buf_hdr *)p - 1;
    void *q = ovl__buf_alloc(bytes);
    if (!q)
        return NULL;
    memcpy(q, p, h->bytes < bytes ? h->bytes : bytes);
    ovl__buf_free(p);
    return q;
}

void ovl__buf_free(void *p)
{
    if (!p)
        return;
    struct buf_hdr *h = (struct buf_hdr *)p - 1;
    if (h->mapped)
        ovl__page_free(h);
    else
        free(h);
}

/* ---- /proc/self/mem ---------------------------------------------------- */

int ovl__watch_poke(void *dst, const void *src, size_t len)
{
    while (len > 0) {
        ssize_t n = pwrite(ovl__watch_g.mem_fd, src, len, (off_t)(uintptr_t)dst);
        if (n < 0 && errno == EFAULT) {
            /* The source shares a guarded page (a malloc'd buffer next to a
             * pending receive): the kernel cannot read it, but this thread
             * can (the fault handler lets neighbours through). Bounce. */
            char b[256];
            size_t m = len < sizeof b ? len : sizeof b;
            memcpy(b, src, m);
            n = pwrite(ovl__watch_g.mem_fd, b, m, (off_t)(uintptr_t)dst);
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
    for (int i = 0; i < OVL__WATCH_MAX_REGIONS; i++) {
        if (!atomic_load(&ovl__watch_g.regs[i])) {
            if (i >= atomic_load(&ovl__watch_g.regs_hi))
                atomic_store(&ovl__watch_g.regs_hi, i + 1);
            atomic_store(&ovl__watch_g.regs[i], w);
            w->slot = i;
            atomic_fetch_add(&ovl__watch_g.nregs, 1);
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
    w->dom = ovl__dom_cur(); /* its transfer's domain: the fault handler waits there */
    return w;
}

static void free_region(struct ovl__watch *w)
{
    if (w->shadow) /* only backends with a shadow make one */
        ovl__watch_backend_of(w)->recv_release(w);
    ovl__page_free(w->touch); /* w->touched lives in the same block */
    ovl__page_free(w);
}

/* Free released regions once no fault handler can still be looking at
 * them (lock held). */
static void reap_locked(void)
{
    if (!ovl__watch_g.nzombies || atomic_load(&ovl__watch_g.in_handler))
        return;
    for (size_t i = 0; i < ovl__watch_g.nzombies; i++)
        free_region(ovl__watch_g.zombie_v[i]);
    ovl__watch_g.nzombies = 0;
}

static void reg_remove_locked(struct ovl__watch *w)
{
    if (w->slot >= 0) {
        /* Recorded as recently released before it leaves the registry: a
         * handler that no longer finds the region must find it here, or
         * it would take a fault raised while the page was still guarded
         * for the program's own (and crash it). */
        unsigned long g = ++ovl__watch_g.recent_next;
        unsigned k = (unsigned)(g % OVL__WATCH_RECENT);
        atomic_store(&ovl__watch_g.recent[k].hi, 0);
        atomic_store(&ovl__watch_g.recent[k].gen, g);
        atomic_store(&ovl__watch_g.recent[k].lo, w->p0);
        atomic_store(&ovl__watch_g.recent[k].hi, w->p0 + w->npages * ovl__watch_page());
        atomic_store(&ovl__watch_g.regs[w->slot], NULL);
        w->slot = -1;
        atomic_fetch_sub(&ovl__watch_g.nregs, 1);
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
    pthread_mutex_lock(&ovl__watch_g.lock);
    reg_remove_locked(w);
    if (ovl__watch_g.nzombies == ovl__watch_g.capzombies) {
        size_t ncap = ovl__watch_g.capzombies ? 2 * ovl__watch_g.capzombies : 16;
        struct ovl__watch **v = realloc(ovl__watch_g.zombie_v, ncap * sizeof *v);
        if (!v) { /* cannot defer: wait for handlers to leave */
            while (atomic_load(&ovl__watch_g.in_handler))
                ovl__relax();
            free_region(w);
            pthread_mutex_unlock(&ovl__watch_g.lock);
            return;
        }
        ovl__watch_g.zombie_v = v;
        ovl__watch_g.capzombies = ncap;
    }
    ovl__watch_g.zombie_v[ovl__watch_g.nzombies++] = w;
    reap_locked();
    pthread_mutex_unlock(&ovl__watch_g.lock);
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
    if (pread(ovl__watch_g.mem_fd, &c, 1, (off_t)addr) != 1 ||
        pwrite(ovl__watch_g.mem_fd, &c, 1, (off_t)addr) != 1)
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
    int free_slot = -1, hi = ovl__watch_edges_hi();
    for (int i = 0; i < hi; i++) {
        uintptr_t p = atomic_load(&ovl__watch_g.edges[i].page);
        if (p == page && atomic_load(&ovl__watch_g.edges[i].refs) > 0) {
            atomic_fetch_add(&ovl__watch_g.edges[i].refs, 1);
            return 0;
        }
        if (free_slot < 0 && atomic_load(&ovl__watch_g.edges[i].refs) == 0)
            free_slot = i;
    }
    if (free_slot < 0 && hi < OVL__WATCH_MAX_EDGES)
        free_slot = hi;
    if (free_slot < 0)
        return ENOSPC;
    /* Published before the page is guarded: another thread's access that
     * faults once it is must find it an edge (neighbour data: done or
     * stepped), not a page of the buffer waiting for its data. */
    if (free_slot >= hi)
        atomic_store(&ovl__watch_g.edges_hi, free_slot + 1);
    ovl__spin_lock(&ovl__watch_g.step_lock);
    atomic_store(&ovl__watch_g.edges[free_slot].steps, 0);
    atomic_store(&ovl__watch_g.edges[free_slot].page, page);
    atomic_store(&ovl__watch_g.edges[free_slot].refs, 1);
    int err = ovl__watch_protect_probed((void *)page, ovl__watch_page(), probe);
    if (err)
        atomic_store(&ovl__watch_g.edges[free_slot].refs, 0);
    ovl__spin_unlock(&ovl__watch_g.step_lock);
    return err;
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
 * which the program is told, once, how to avoid them: each costs a fault
 * (and, unless watch_emulate.c made it, a trap and two mprotect calls), so
 * this many cost hundreds of microseconds to milliseconds. */
#define STEP_ADVICE 64

static void advise_steps(uintptr_t page, unsigned long steps, const struct ovl__watch *w)
{
    if (steps < STEP_ADVICE || ovl__g.cfg.report.verbose < 1 ||
        atomic_exchange(&ovl__watch_g.said_steps, 1))
        return;
    fprintf(stderr,
            "ovl: rank %d: the program touched other data on page %p, which it shares with the "
            "pending buffer [%p, +%zu), %lu times during one transfer; each such access faults "
            "(OVL_STATS counts them as neighbour accesses). "
            "Give the buffer pages of its own (ovl_alloc, posix_memalign to the page size with "
            "a size rounded up to pages), or receive it with ovl_irecv and wait before reading "
            "it (docs/PORTING.md), and these costs disappear (said once)\n",
            ovl__g.rank, (void *)page, w->base, w->len, steps);
}

/* Drop a reference on edge page @page; with the last one, open the page
 * first (@open; else the caller has opened it), so a waiter that sees
 * refs == 0 retries an accessible page. 0, or an errno with the page still
 * guarded and the reference kept. */
static int edge_put_locked(uintptr_t page, int open, const struct ovl__watch *w)
{
    for (int i = 0, hi = ovl__watch_edges_hi(); i < hi; i++) {
        if (atomic_load(&ovl__watch_g.edges[i].page) == page &&
            atomic_load(&ovl__watch_g.edges[i].refs) > 0) {
            ovl__spin_lock(&ovl__watch_g.edges[i].busy);
            int err = 0;
            if (open && atomic_load(&ovl__watch_g.edges[i].refs) == 1)
                err = edge_open_page(page);
            if (!err && atomic_fetch_sub(&ovl__watch_g.edges[i].refs, 1) == 1)
                advise_steps(page, atomic_load(&ovl__watch_g.edges[i].steps), w);
            ovl__spin_unlock(&ovl__watch_g.edges[i].busy);
            return err;
        }
    }
    return 0;
}

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
    uintptr_t lo = w->edge_lo || !ovl__watch_edge_guarded(w->p0) ? w->p0 : w->p0 + ps;
    uintptr_t hi = w->edge_hi || !ovl__watch_edge_guarded(last) ? last + ps : last;
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
int ovl__watch_edge_slot(uintptr_t page)
{
    for (int i = 0, hi = ovl__watch_edges_hi(); i < hi; i++)
        if (atomic_load(&ovl__watch_g.edges[i].page) == page &&
            atomic_load(&ovl__watch_g.edges[i].refs) > 0)
            return i;
    return -1;
}

int ovl__watch_edges_live(void)
{
    for (int i = 0, hi = ovl__watch_edges_hi(); i < hi; i++)
        if (atomic_load(&ovl__watch_g.edges[i].refs) > 0)
            return 1;
    return 0;
}

int ovl__watch_edge_guarded(uintptr_t page)
{
    return ovl__watch_edge_slot(page) >= 0;
}

int ovl__watch_idle(void)
{
    return atomic_load(&ovl__watch_g.nregs) == 0;
}

int ovl__watch_edge_touch(const void *p, size_t len)
{
    if (len == 0 || ovl__watch_idle())
        return 0;
    uintptr_t mask = ~(uintptr_t)(ovl__watch_page() - 1);
    uintptr_t lo = (uintptr_t)p & mask, hi = ((uintptr_t)p + len - 1) & mask;
    return ovl__watch_edge_guarded(lo) || (hi != lo && ovl__watch_edge_guarded(hi));
}

void ovl__watch_write(void *dst, const void *src, size_t len)
{
    if (ovl__watch_g.mem_fd < 0 || !ovl__watch_edge_touch(dst, len) ||
        ovl__watch_poke(dst, src, len) != 0)
        memcpy(dst, src, len);
}

/* A read through /proc/self/mem, which ignores the guard. */
static void read_bounced(void *dst, const void *src, size_t len)
{
    atomic_fetch_add_explicit(&ovl__g.st_edge_bounces, 1, memory_order_relaxed);
    char *d = dst;
    uintptr_t s = (uintptr_t)src;
    while (len > 0) {
        ssize_t n = pread(ovl__watch_g.mem_fd, d, len, (off_t)s);
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

/* Only the first and last pages of [src, +len) can be another buffer's
 * guarded edge: a page strictly inside would hold bytes of that pending
 * buffer, an overlap the callers refuse. Those pages go through
 * /proc/self/mem, so the program's neighbour-access path (a trap per
 * instruction, a trap per byte for a string move) is never taken for
 * ovl's own copies; the pages between them by memcpy (an 8 MiB send next
 * to a pending receive: one page of 2048 through the kernel). */
void ovl__watch_read(void *dst, const void *src, size_t len)
{
    if (ovl__watch_g.mem_fd < 0 || !ovl__watch_edge_touch(src, len)) {
        memcpy(dst, src, len);
        return;
    }
    size_t ps = ovl__watch_page();
    uintptr_t lo = (uintptr_t)src, hi = lo + len;
    uintptr_t a = (lo / ps + 1) * ps, b = (hi - 1) / ps * ps; /* first page's end, last's start */
    if (len <= 2 * ps || ovl__watch_edge_touch((const void *)a, b - a)) {
        read_bounced(dst, src, len);
        return;
    }
    char *d = dst;
    ovl__watch_read(d, src, a - lo);
    memcpy(d + (a - lo), (const void *)a, b - a);
    ovl__watch_read(d + (b - lo), (const void *)b, hi - b);
}

int ovl__watch_pending(const void *p, size_t len, int missing)
{
    uintptr_t lo = (uintptr_t)p, hi = lo + len;
    size_t ps = ovl__watch_page();
    int hit = 0;
    if (len == 0 || ovl__watch_idle())
        return 0;
    pthread_mutex_lock(&ovl__watch_g.lock);
    for (int k = 0, rhi = ovl__watch_regs_hi(); k < rhi && !hit; k++) {
        struct ovl__watch *w = atomic_load(&ovl__watch_g.regs[k]);
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
    pthread_mutex_unlock(&ovl__watch_g.lock);
    return hit;
}

/* ---- send regions ---------------------------------------------------------- */

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
    pthread_mutex_lock(&ovl__watch_g.lock);
    int rc = reg_add(w);
    pthread_mutex_unlock(&ovl__watch_g.lock);
    if (rc) {
        ovl__page_free(w);
        return ovl__error(OVL_ERR_MONITOR, "ovl_delta_send_begin",
                          "more than %d delta buffers pending at once", OVL__WATCH_MAX_REGIONS);
    }
    int err = 0;
    if (w->s_hi < w->ihi) {
        const struct ovl__watch_backend *b = ovl__watch_backend_of(w);
        if ((err = b->send_guard(w)) == 0 && (err = b->send_protect(w, w->s_hi, w->ihi, 1)) != 0)
            b->send_done(w);
    }
    if (err) {
        ovl__watch_destroy(w);
        return ovl__error(OVL_ERR_MONITOR, "ovl_delta_send_begin",
                          "cannot write-protect the buffer with %s: %s%s", ovl_monitor_name(m),
                          strerror(err),
                          err == ENOMEM ? " (vm.max_map_count reached? try OVL_MONITOR=uffd, "
                                          "or OVL_MONITOR_EXPLICIT in code)"
                                        : "");
    }
    *out = w;
    return OVL_SUCCESS;
}

void ovl__watch_send_seal(struct ovl__watch *w)
{
    ovl__spin_lock(&w->busy);
    if (w->s_hi > w->s_lo)
        ovl__watch_backend_of(w)->send_protect(w, w->s_lo, w->s_hi, 1);
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
        ovl__watch_backend_of(w)->send_done(w);
    ovl__spin_unlock(&w->busy);
    pthread_mutex_lock(&ovl__watch_g.lock);
    reg_remove_locked(w);
    pthread_mutex_unlock(&ovl__watch_g.lock);
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
    pthread_mutex_lock(&ovl__watch_g.lock);
    reap_locked();
    int err = 0;
    if (reg_add(w) != 0) {
        pthread_mutex_unlock(&ovl__watch_g.lock);
        free_region(w);
        return ovl__error(OVL_ERR_MONITOR, fn, "more than %d delta buffers pending at once",
                          OVL__WATCH_MAX_REGIONS);
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
        err = ovl__watch_backend_of(w)->recv_guard(w);
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
        pthread_mutex_unlock(&ovl__watch_g.lock);
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
    pthread_mutex_unlock(&ovl__watch_g.lock);
    *out = w;
    return OVL_SUCCESS;
}

/* Open interior pages [i, j) (driver). */
static void open_interior(struct ovl__watch *w, size_t i, size_t j)
{
    if (i >= j)
        return;
    if (w->mon != OVL_MONITOR_EXPLICIT && ovl__watch_backend_of(w)->recv_open(w, i, j) != 0) {
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
        pthread_mutex_lock(&ovl__watch_g.lock);
        if ((i == 0 && w->edge_lo) || (i == w->npages - 1 && w->edge_hi)) {
            err = edge_put_locked((uintptr_t)ovl__watch_page_addr(w, i), 1, w);
            if (!err && i == 0)
                w->edge_lo = 0;
            else if (!err)
                w->edge_hi = 0;
        }
        pthread_mutex_unlock(&ovl__watch_g.lock);
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
            ovl__watch_backend_of(w)->recv_place(w, off, s, len);
        } else {
            if (h_end > a)
                ovl__watch_poke((void *)a, s, h_end - a);
            if (m_hi > m_lo)
                ovl__watch_backend_of(w)->recv_place(w, m_lo - (uintptr_t)w->base, s + (m_lo - a),
                                                     m_hi - m_lo);
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
        if (all && lo < hi && ovl__watch_backend_of(w)->recv_open(w, lo, hi) == 0)
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
    const struct ovl__watch_backend *b = ovl__watch_backend_of(w);
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
    pthread_mutex_lock(&ovl__watch_g.lock);
    edges_release_locked(w);
    pthread_mutex_unlock(&ovl__watch_g.lock);
    if (w->ihi > w->ilo)
        ovl__watch_backend_of(w)->recv_done(w);
    if (w->touch && w->touched)
        ovl__trace_page_access(w->base, w->len, w->npages, w->touch, atomic_load(&w->ntouch));
    pthread_mutex_lock(&ovl__watch_g.lock);
    for (size_t i = 0; i < w->npages; i++)
        atomic_store(&w->valid[i], 1);
    reg_remove_locked(w);
    pthread_mutex_unlock(&ovl__watch_g.lock);
}

/* ---- life cycle --------------------------------------------------------------- */

void ovl__watch_fini(void)
{
    pthread_mutex_lock(&ovl__watch_g.lock);
    while (atomic_load(&ovl__watch_g.in_handler))
        ovl__relax();
    reap_locked();
    free(ovl__watch_g.zombie_v);
    ovl__watch_g.zombie_v = NULL;
    ovl__watch_g.capzombies = 0;
    pthread_mutex_unlock(&ovl__watch_g.lock);
    ovl__uffd_shadow_trim();
    ovl__watch_handler_remove();
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
    pthread_mutex_lock(&ovl__watch_g.lock);
    reap_locked();
    if (reg_add(w) != 0) {
        pthread_mutex_unlock(&ovl__watch_g.lock);
        free_region(w);
        return ovl__error(OVL_ERR_MONITOR, fn, "more than %d monitored buffers at once",
                          OVL__WATCH_MAX_REGIONS);
    }
    pthread_mutex_unlock(&ovl__watch_g.lock);
    const struct ovl__watch_backend *b = ovl__watch_backend_of(w);
    int err = b->send_guard(w);
    if (!err && (err = b->send_protect(w, w->ilo, w->ihi, 1)) != 0)
        b->send_done(w);
    if (err) {
        ovl__watch_destroy(w);
        return ovl__error(OVL_ERR_MONITOR, fn, "cannot write-protect the source with %s: %s%s",
                          ovl_monitor_name(m), strerror(err),
                          err == ENOMEM ? " (vm.max_map_count reached? try OVL_MONITOR=uffd, "
                                          "or OVL_MONITOR_EXPLICIT in code)"
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
        if (ovl__watch_backend_of(w)->send_protect(w, i, j, 0) != 0)
            ovl__watch_backend_of(w)->send_protect(w, w->ilo, w->ihi, 0); /* coarser */
        ovl__spin_unlock(&w->busy);
    }
    for (size_t k = i; k < j; k++)
        atomic_store(&w->valid[k], 1);
}

void ovl__watch_hold_finish(struct ovl__watch *w)
{
    if (w->mon != OVL_MONITOR_EXPLICIT && w->ihi > w->ilo) {
        ovl__spin_lock(&w->busy);
        ovl__watch_backend_of(w)->send_done(w);
        ovl__spin_unlock(&w->busy);
    }
    for (size_t i = 0; i < w->npages; i++)
        atomic_store(&w->valid[i], 1);
    pthread_mutex_lock(&ovl__watch_g.lock);
    reg_remove_locked(w);
    pthread_mutex_unlock(&ovl__watch_g.lock);
}
