/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * watch: the fault handler, one for SIGSEGV (page protection) and SIGBUS
 * (userfaultfd in SIGBUS mode), and SIGTRAP's for single-stepping over
 * neighbour data on a guarded edge page. It finds the faulting page's
 * region in the registry (watch.c) and serves the fault: a receive page
 * waits for its data, a send page reports how far the program has written.
 *
 * Everything here but the installation runs inside a signal handler: it
 * never allocates and never takes a lock a non-handler path could hold
 * while faulting, and its messages go out with write(2). To find a region
 * it scans the registry's fixed array of atomic pointers (watch.c). A
 * fault that is not ovl's goes to the handler that was installed before
 * ovl's (the application's, a debugger's, or the default action, which
 * crashes with the usual signal).
 *
 * Waiting in the handler: the faulting thread drives the progress engine
 * (or, when another thread is driving, yields) until the page is valid. So
 * a fault costs nothing extra when the data is already there: the engine
 * installed it when it arrived and there is no fault at all.
 */

#include "watch_internal.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

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

/* The pending receive whose buffer holds @addr, or NULL. */
static struct ovl__watch *pending_buffer_of(uintptr_t addr)
{
    for (int k = 0, rhi = ovl__watch_regs_hi(); k < rhi; k++) {
        struct ovl__watch *w = atomic_load(&ovl__watch_g.regs[k]);
        if (w && !w->is_send && addr >= (uintptr_t)w->base && addr < (uintptr_t)w->base + w->len)
            return w;
    }
    return NULL;
}

/* Neighbour data on a guarded edge page (malloc's own headers, other
 * variables) must not wait for a message: the access may come from inside
 * malloc or MPI, where driving progress would deadlock. ovl does the
 * access itself where it can (watch_emulate.c); else it is let through by
 * opening the page for one instruction (x86-64 trap flag) and guarding it
 * again in the SIGTRAP that follows. Elsewhere it waits like the buffer's
 * own bytes.
 *
 * Opened for whom: where the CPU and kernel have protection keys (x86
 * PKU), for the stepping thread alone. The page is made accessible under
 * a key of ovl's (step_key) that every thread's rights deny, and only the
 * stepping thread's rights, as its return from the handler loads them,
 * allow it for the one instruction; another thread that touches the page
 * meanwhile faults (SEGV_PKUERR) and waits for the step to end, so it
 * cannot read the buffer's pending bytes there. Without keys the page is
 * opened for every thread for that instruction. */
#if defined(__x86_64__) && defined(__linux__)
#define OVL_SINGLE_STEP 1
/* Pages this thread opened for its current instruction (a string move
 * can touch four: source and destination, each straddling two pages),
 * whether each is open under the key, and the thread's rights before. */
#define STEP_MAX 4
static __thread uintptr_t step_pages[STEP_MAX] __attribute__((tls_model("initial-exec")));
static __thread unsigned char step_keyed[STEP_MAX] __attribute__((tls_model("initial-exec")));
static __thread uint32_t step_rights __attribute__((tls_model("initial-exec")));

/* The key, or -1 (no keys: the page opens for every thread); the pages
 * open under it, each with the number of steps in flight on it. */
#define KEYED_MAX 16
static int step_key = -1;

/* The C library's protection-key calls, where it has them. */
#ifdef OVL_HAVE_PKEYS
static int key_new(void)
{
    return pkey_alloc(0, PKEY_DISABLE_ACCESS);
}
static int key_protect(void *a, size_t len, int prot, int key)
{
    return pkey_mprotect(a, len, prot, key);
}
static void key_deny(int key)
{
    pkey_set(key, PKEY_DISABLE_ACCESS);
}
static void key_free(int key)
{
    pkey_free(key);
}
#else
static int key_new(void)
{
    return -1;
}
static int key_protect(void *a, size_t len, int prot, int key)
{
    (void)key;
    return mprotect(a, len, prot);
}
static void key_deny(int key)
{
    (void)key;
}
static void key_free(int key)
{
    (void)key;
}
#endif
static struct {
    _Atomic uintptr_t page;
    _Atomic int n;       /* steps in flight */
    _Atomic int stalled; /* of those, waiting in a fault of their own */
} keyed[KEYED_MAX];

/* A step on @page starts (@again: this thread's instruction faulted on it
 * again). 1 if the page is open under the key. */
static int key_open(uintptr_t page, int again)
{
    ovl__spin_lock(&ovl__watch_g.step_lock);
    int k = -1;
    for (int j = 0; j < KEYED_MAX && k < 0; j++)
        if (atomic_load(&keyed[j].page) == page)
            k = j;
    for (int j = 0; j < KEYED_MAX && k < 0 && !again; j++)
        if (!atomic_load(&keyed[j].page))
            k = j;
    int ok = k >= 0 &&
             key_protect((void *)page, ovl__watch_page(), PROT_READ | PROT_WRITE, step_key) == 0;
    if (ok && !again) {
        atomic_store(&keyed[k].page, page);
        atomic_fetch_add(&keyed[k].n, 1);
    }
    ovl__spin_unlock(&ovl__watch_g.step_lock);
    return ok;
}

/* A step on @page is over: guarded again if it is still a guarded edge
 * (its release, under the slot's busy lock, opens it otherwise); @rekey:
 * it was open under the key, which it leaves either way. */
static void step_end(uintptr_t page, int rekey)
{
    int e = ovl__watch_edge_slot(page);
    if (e < 0) {
        if (rekey)
            key_protect((void *)page, ovl__watch_page(), PROT_READ | PROT_WRITE, 0);
        return;
    }
    ovl__spin_lock(&ovl__watch_g.edges[e].busy);
    int guarded = atomic_load(&ovl__watch_g.edges[e].page) == page &&
                  atomic_load(&ovl__watch_g.edges[e].refs) > 0;
    /* without the key, plain mprotect: pkey_mprotect with key 0 fails
     * (EINVAL) where the kernel has no protection keys */
    if (rekey)
        key_protect((void *)page, ovl__watch_page(), guarded ? PROT_NONE : PROT_READ | PROT_WRITE,
                    0);
    else if (guarded)
        mprotect((void *)page, ovl__watch_page(), PROT_NONE);
    ovl__spin_unlock(&ovl__watch_g.edges[e].busy);
}

/* A step on @page is over: with the last one, the page leaves the key,
 * guarded again if it is still a guarded edge, else open. */
static void key_close(uintptr_t page)
{
    ovl__spin_lock(&ovl__watch_g.step_lock);
    for (int j = 0; j < KEYED_MAX; j++) {
        if (atomic_load(&keyed[j].page) != page)
            continue;
        if (atomic_fetch_sub(&keyed[j].n, 1) == 1) {
            step_end(page, 1);
            atomic_store(&keyed[j].page, 0);
        }
        break;
    }
    ovl__spin_unlock(&ovl__watch_g.step_lock);
}

/* 0: no step on @page; 1: one in flight; 2: one waits in a fault of its
 * own (its instruction touched a page still to arrive). */
static int key_busy(uintptr_t page)
{
    for (int j = 0; j < KEYED_MAX; j++)
        if (atomic_load(&keyed[j].page) == page && atomic_load(&keyed[j].n) > 0)
            return atomic_load(&keyed[j].stalled) > 0 ? 2 : 1;
    return 0;
}

/* This thread's steps under the key wait in a fault (@d = 1) or no
 * longer (-1). */
static void key_stall(int d)
{
    for (int k = 0; k < STEP_MAX; k++)
        if (step_pages[k] && step_keyed[k])
            for (int j = 0; j < KEYED_MAX; j++)
                if (atomic_load(&keyed[j].page) == step_pages[k])
                    atomic_fetch_add(&keyed[j].stalled, d);
}

/* Rights that let the thread returning to @pk through the key. */
static void key_allow(uint32_t *pk)
{
    *pk &= ~(3U << (2 * step_key));
}

/* The installation's check that a handler's change to the rights in its
 * frame takes effect (the kernel loads them on return): the test page,
 * and how often it faulted. */
static _Atomic uintptr_t key_probe;
static _Atomic int key_probe_hits;

static int step_over(uintptr_t page, void *uc);

/* A key fault (SEGV_PKUERR) on ovl's key at @page: 1 once the access can
 * be retried. */
static int key_fault(uintptr_t page, void *uc)
{
    uint32_t *pk = ovl__watch_frame_pkru(uc);
    if (page == atomic_load(&key_probe)) {
        if (atomic_fetch_add(&key_probe_hits, 1) == 0 && pk)
            key_allow(pk);
        else /* the frame's rights were not loaded: no key for steps */
            key_protect((void *)page, ovl__watch_page(), PROT_READ | PROT_WRITE, 0);
        return 1;
    }
    for (int j = 0; j < STEP_MAX; j++)
        if (step_pages[j] == page && step_keyed[j] && pk) {
            /* this thread's own step, from a handler that ran before its
             * instruction did: as the instruction */
            key_allow(pk);
            return 1;
        }
    /* Another thread's step: its one instruction, then the page is
     * guarded again. Should that instruction wait in a fault of its own
     * (a page of a buffer still to arrive), which may need this thread,
     * this access goes through too, as without keys: stepped itself, so
     * the thread's rights are its own again after the one instruction. */
    int b;
    while ((b = key_busy(page)) != 0) {
        if (b == 2) {
            if (!step_over(page, uc) && pk)
                key_allow(pk);
            return 1;
        }
        sched_yield();
    }
    return 1;
}

static int step_over(uintptr_t page, void *uc)
{
    ucontext_t *u = uc;
    int k = -1, stepping = 0;
    /* The same page again: another thread's trap guarded it before this
     * instruction ran. Open it again in the same slot. */
    for (int j = 0; j < STEP_MAX && k < 0; j++)
        if (step_pages[j] == page)
            k = j;
    for (int j = 0; j < STEP_MAX; j++)
        stepping |= step_pages[j] != 0 && step_keyed[j];
    int again = k >= 0;
    for (int j = 0; j < STEP_MAX && k < 0; j++)
        if (!step_pages[j])
            k = j;
    if (k < 0 || !u)
        return 0;
    uint32_t *pk = step_key >= 0 && (!again || step_keyed[k]) ? ovl__watch_frame_pkru(u) : NULL;
    if (pk && key_open(page, again)) {
        if (!stepping)
            step_rights = *pk;
        key_allow(pk);
        step_keyed[k] = 1;
    } else if (mprotect((void *)page, ovl__watch_page(), PROT_READ | PROT_WRITE) != 0) {
        return 0;
    } else {
        step_keyed[k] = 0;
    }
    step_pages[k] = page;
    u->uc_mcontext.gregs[REG_EFL] |= 0x100; /* TF */
    return 1;
}

static void on_trap(int sig, siginfo_t *si, void *uc)
{
    if (!step_pages[0]) {
        struct sigaction *old = &ovl__watch_g.old_trap;
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
    int saved = errno, keyed_any = 0;
    ((ucontext_t *)uc)->uc_mcontext.gregs[REG_EFL] &= ~0x100;
    for (int k = 0; k < STEP_MAX; k++) {
        uintptr_t page = step_pages[k];
        int under_key = step_keyed[k];
        step_pages[k] = 0;
        step_keyed[k] = 0;
        if (!page)
            continue;
        if (under_key)
            key_close(page);
        else
            step_end(page, 0);
        keyed_any |= under_key;
    }
    uint32_t *pk = keyed_any ? ovl__watch_frame_pkru(uc) : NULL;
    if (pk)
        *pk = step_rights;
    errno = saved;
}

/* Take a key for steps where the CPU and kernel have them and a handler's
 * change to the rights in its frame takes effect (checked on a page of
 * its own). Without one, steps open the page for every thread. */
static void key_setup(void)
{
    int k = key_new();
    if (k < 0)
        return;
    size_t ps = ovl__watch_page();
    void *p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        key_free(k);
        return;
    }
    *(volatile char *)p = 1;
    int ok = 0;
    step_key = k;
    if (key_protect(p, ps, PROT_READ | PROT_WRITE, k) == 0) {
        atomic_store(&key_probe_hits, 0);
        atomic_store(&key_probe, (uintptr_t)p);
        ok = *(volatile char *)p == 1 && atomic_load(&key_probe_hits) == 1;
        atomic_store(&key_probe, 0);
    }
    key_deny(k); /* this thread's rights, opened by the check */
    munmap(p, ps);
    if (!ok) {
        step_key = -1;
        key_free(k);
    }
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

/* Wait in the faulting thread until @ready(arg) holds, driving @dom's
 * engine (the transfer's), or every domain's (NULL: another buffer's edge,
 * whose domain the page does not say). */
static void wait_for(struct ovl__dom *dom, int (*ready)(const void *, size_t), const void *arg,
                     size_t i, uintptr_t addr)
{
    uint64_t t0 = ovl__now_ns();
    atomic_fetch_add_explicit(&ovl__g.st_fault_waits, 1, memory_order_relaxed);
    if (ovl__engine_driving())
        fatal("a continuation or progress handler touched a delta-receive buffer whose data "
              "has not arrived; it would wait for itself forever",
              addr);
    struct fault_wait f = { ready, arg, i, addr };
#ifdef OVL_SINGLE_STEP
    key_stall(1);
#endif
    if (dom) {
        struct ovl__dom *prev = ovl__dom_enter(dom);
        ovl__engine_spin(fault_served, &f);
        ovl__dom_leave(prev);
    } else {
        ovl__doms_spin(fault_served, &f);
    }
#ifdef OVL_SINGLE_STEP
    key_stall(-1);
#endif
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
    return !ovl__watch_edge_guarded((uintptr_t)page);
}

static void send_fault(struct ovl__watch *w, size_t i, uintptr_t addr);

/* 1 if the fault was ovl's (and the access can be retried). */
static int handle(int sig, uintptr_t addr, void *uc)
{
    size_t ps = ovl__watch_page();
    uintptr_t page = addr & ~(uintptr_t)(ps - 1);

    uintptr_t probe = atomic_load(&ovl__watch_g.probe);
    if (probe && page == probe) {
        if (ovl__watch_g.probe_uffd) { /* a missing page: fill it, as a receive install does */
            struct uffdio_zeropage z = { .range = { .start = page, .len = ps }, .mode = 0 };
            ioctl(ovl__uffd_fd(), UFFDIO_ZEROPAGE, &z);
            return 1;
        }
        mprotect((void *)page, ps, PROT_READ | PROT_WRITE);
        return 1;
    }
    atomic_fetch_add_explicit(&ovl__g.st_faults, 1, memory_order_relaxed);
    if (ovl__watch_edge_guarded(page)) {
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
                wait_for(own->dom, page_valid, own, i, addr);
            if (!ovl__watch_edge_guarded(page))
                return 1; /* opened meanwhile: retry */
        }
        int emulated = ovl__watch_emulate(uc, addr);
        if (emulated || step_over(page, uc)) {
            int e = ovl__watch_edge_slot(page);
            if (emulated)
                atomic_fetch_add_explicit(&ovl__g.st_edge_emulated, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&ovl__g.st_edge_steps, 1, memory_order_relaxed);
            if (e >= 0)
                atomic_fetch_add_explicit(&ovl__watch_g.edges[e].steps, 1, memory_order_relaxed);
            return 1;
        }
#else
        (void)uc;
#endif
        wait_for(NULL, edge_open, (const void *)page, 0, addr);
        return 1;
    }
    for (int k = 0, rhi = ovl__watch_regs_hi(); k < rhi; k++) {
        struct ovl__watch *w = atomic_load(&ovl__watch_g.regs[k]);
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
                wait_for(w->dom, page_valid, w, i, addr);
            return 1;
        }
        if (w->is_send) {
            send_fault(w, i, addr);
            return 1;
        }
        if (addr < (uintptr_t)w->base || addr >= (uintptr_t)w->base + w->len)
            /* Neighbour data on one of its partial pages, which are guarded
             * only as edges (above): the fault was raised while an edge
             * guarded the page, which is open now (this region's, released
             * as it ends) or is about to be guarded as this region's edge
             * (an earlier transfer's). Retried, never waited on: this
             * region's data may come only after the access is done. */
            return 1;
        if (w->touch && w->touched && !atomic_exchange(&w->touched[i], 1))
            /* atomic: the region's finisher may read the list meanwhile */
            __atomic_store_n(&w->touch[atomic_fetch_add(&w->ntouch, 1)], (uint32_t)i,
                             __ATOMIC_RELAXED);
        if (!atomic_load(&w->valid[i]))
            wait_for(w->dom, page_valid, w, i, addr);
        return 1;
    }
    (void)sig;
    /* Released while this fault was on its way: retry once per release
     * (a buffer used again and again faults at the same address each time
     * it races with its region's release). */
    for (int k = 0; k < OVL__WATCH_RECENT; k++) {
        uintptr_t hi = atomic_load(&ovl__watch_g.recent[k].hi),
                  lo = atomic_load(&ovl__watch_g.recent[k].lo);
        unsigned long g = atomic_load(&ovl__watch_g.recent[k].gen);
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
    struct sigaction *old = sig == SIGBUS ? &ovl__watch_g.old_bus : &ovl__watch_g.old_segv;
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
        atomic_fetch_add(&ovl__watch_g.in_handler, 1);
#ifdef OVL_SINGLE_STEP
        if (sig == SIGSEGV && si->si_code == SEGV_PKUERR && step_key >= 0 &&
            (int)si->si_pkey == step_key)
            handled = key_fault((uintptr_t)si->si_addr & ~(uintptr_t)(ovl__watch_page() - 1), uc);
        else
#endif
            handled = handle(sig, (uintptr_t)si->si_addr, uc);
        atomic_fetch_sub(&ovl__watch_g.in_handler, 1);
    }
    if (!handled)
        chain(sig, si, uc);
    errno = saved;
}

static void send_fault(struct ovl__watch *w, size_t i, uintptr_t addr)
{
    ovl__spin_lock(&w->busy);
    const struct ovl__watch_backend *b = ovl__watch_backend_of(w);
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
        struct ovl__dom *prev = ovl__dom_enter(w->dom);
        size_t d = w->produced(w->ctx, upto);
        ovl__dom_leave(prev);
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

/* ---- installing ---------------------------------------------------------------- */

int ovl__watch_handler_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &ovl__watch_g.old_segv) != 0 ||
        sigaction(SIGBUS, &sa, &ovl__watch_g.old_bus) != 0)
        return ovl__error(OVL_ERR_MONITOR, "ovl_init", "cannot install the fault handler: %s",
                          strerror(errno));
#ifdef OVL_SINGLE_STEP
    sa.sa_sigaction = on_trap;
    sigaction(SIGTRAP, &sa, &ovl__watch_g.old_trap);
    key_setup();
#endif
    ovl__watch_g.installed = 1;
    return OVL_SUCCESS;
}

void ovl__watch_handler_remove(void)
{
    if (!ovl__watch_g.installed)
        return;
    /* Put back the previous handlers, unless someone replaced ours. */
    struct sigaction cur;
    if (sigaction(SIGSEGV, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == on_fault)
        sigaction(SIGSEGV, &ovl__watch_g.old_segv, NULL);
    if (sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == on_fault)
        sigaction(SIGBUS, &ovl__watch_g.old_bus, NULL);
#ifdef OVL_SINGLE_STEP
    if (sigaction(SIGTRAP, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == on_trap)
        sigaction(SIGTRAP, &ovl__watch_g.old_trap, NULL);
    if (step_key >= 0) {
        key_free(step_key);
        step_key = -1;
    }
#endif
    ovl__watch_g.installed = 0;
}
