/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: watch.c: the access monitor, seen from the other layers.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_WATCH_H
#define OVL_INTERNAL_WATCH_H

/* ---- watch.c: the access monitor ------------------------------------- */

struct ovl__watch;
int ovl__watch_init(void);
void ovl__watch_fini(void);
/* 1 if [buf, buf+len) overlaps the calling thread's stack, which fault
 * monitors cannot guard (the signal frame and the handler need it). */
int ovl__watch_on_my_stack(const void *buf, size_t len);
/* Resolve OVL_MONITOR_AUTO (and check uffd) for this process. */
ovl_monitor_t ovl__watch_resolve(ovl_monitor_t m);
int ovl__watch_degraded(const char *fn, ovl_monitor_t asked, ovl_monitor_t got);
/* Receive region: pages of [base, base+len) not yet arrived are guarded
 * (accesses wait) until installed. */
int ovl__watch_recv_create(const char *fn, ovl_monitor_t m, void *base, size_t len,
                           struct ovl__watch **out);
/* Lazy receive region (HUNT 5.2, mprotect only): interior pages start
 * unguarded; the caller guards single pages with ovl__watch_recv_guard
 * (the page holding byte @off; no-op if valid or an edge page). Only for
 * programs that read in a known order: an unguarded page reads stale. */
int ovl__watch_recv_create_lazy(const char *fn, void *base, size_t len, struct ovl__watch **out);
int ovl__watch_recv_guard(struct ovl__watch *w, size_t off);
/* Bytes [off, off+len) arrived in @src: place them and make every page now
 * complete accessible (driver). */
void ovl__watch_recv_install(struct ovl__watch *w, size_t off, const void *src, size_t len);
/* 1 if every page holding bytes [off, off+len) is valid. */
int ovl__watch_recv_ready(struct ovl__watch *w, size_t off, size_t len);
/* Where the bytes for base+off may be written directly (by MPI) before
 * they are installed: landing + off; ovl__watch_recv_install(w, off,
 * landing + off, len) then copies nothing it need not. NULL when the
 * backend has no such place (mprotect): install from a buffer of your own.
 * Valid from create to finish. */
char *ovl__watch_recv_landing(struct ovl__watch *w);
/* Bytes from the start that are valid (whole installed pages). */
size_t ovl__watch_recv_prefix(struct ovl__watch *w);
/* The message is over: every page becomes accessible and the region is
 * unregistered (ovl__watch_destroy frees it). */
void ovl__watch_recv_finish(struct ovl__watch *w);
/* Free a finished region (once no fault handler can be looking at it). */
void ovl__watch_destroy(struct ovl__watch *w);
/* Send region: the program writes [base, base+len) in order. When it first
 * writes a page past the current delta, @produced(ctx, upto) is called (in
 * the faulting thread) with the bytes before that page, and returns the
 * delta size in bytes to use from there. */
typedef size_t (*ovl__watch_produced_fn)(void *ctx, size_t upto);
int ovl__watch_send_create(ovl_monitor_t m, void *base, size_t len, size_t delta,
                           ovl__watch_produced_fn fn, void *ctx, struct ovl__watch **out);
/* First offset written after it was sent, or (size_t)-1. */
size_t ovl__watch_send_stale(struct ovl__watch *w);
/* Everything was sent: write-protect the whole buffer (later writes are
 * reported stale). */
void ovl__watch_send_seal(struct ovl__watch *w);
void ovl__watch_send_finish(struct ovl__watch *w);
size_t ovl__watch_page(void);
/* Memory for ovl's own buffers that MPI may fill or read (piece slots,
 * staging): whole pages of their own, so that no page is shared with a
 * user buffer whose edge is guarded -- the kernel (CMA, /proc/self/mem)
 * cannot pass a guarded page, only this process's threads can. Zeroed.
 * Mapped with mmap, never malloc'd: glibc raises its mmap threshold when a
 * large block of its own is freed, which would move the program's large
 * blocks into the heap: any internal buffer that can reach 128 KiB comes
 * from here. Free with ovl__page_free (NULL is ignored), never free(). */
void *ovl__page_alloc(size_t bytes);
/* realloc for ovl__page_alloc memory: NULL @p allocates; on failure NULL,
 * @p untouched. For tables that grow with the work in flight. */
void *ovl__page_realloc(void *p, size_t bytes);
void ovl__page_free(void *p);
/* Unmap the blocks ovl__page_free keeps for reuse (ovl_finalize). */
void ovl__page_trim(void);
/* ovl's own buffers whose size depends on the work (active-message and
 * packed payloads, piece and run tables, staging for a plan's strips):
 * from ovl__page_alloc at 64 KiB and more, from malloc below (where glibc
 * never maps a block, so freeing one leaves its mmap threshold alone).
 * Not zeroed. realloc keeps the first min(old, new) bytes; on failure NULL
 * and @p untouched. Free with ovl__buf_free (NULL is ignored). */
void *ovl__buf_alloc(size_t bytes);
void *ovl__buf_realloc(void *p, size_t bytes);
void ovl__buf_free(void *p);
/* Staging buffers (stage.c): whole pages, cached for the next transfer.
 * get: at least @bytes, *cap receives the size to give back; NULL: no
 * memory. put: back to the cache (or freed); NULL is ignored. */
char *ovl__stage_get(size_t bytes, size_t *cap);
void ovl__stage_put(char *p, size_t cap);
/* Free the cached ones (ovl_finalize). */
void ovl__stage_drop_all(void);
/* Is no region registered (nothing pending under a fault monitor)? One
 * atomic load. */
int ovl__watch_idle(void);
/* Does [p, +len) touch a page guarded as another pending receive's edge?
 * MPI, and the kernel on its behalf, cannot read or write such a page. */
int ovl__watch_edge_touch(const void *p, size_t len);
/* Does any pending receive guard a page it shares with other data now? */
int ovl__watch_edges_live(void);
/* memcpy from program memory that may share a guarded edge page, without
 * faulting (through /proc/self/mem when it does). */
void ovl__watch_read(void *dst, const void *src, size_t len);
/* memcpy into program memory that may share a guarded edge page. */
void ovl__watch_write(void *dst, const void *src, size_t len);
/* Does a registered region (pending delta, get or put) touch [p, p+len)?
 * With @missing: does a pending receive (delta receive or get) still wait
 * for a byte of it? MPI must not be given such memory: its reads through
 * the kernel or another process would not wait. */
int ovl__watch_pending(const void *p, size_t len, int missing);
/* delta_send.c: is [buf, buf+len) a pending delta receive's buffer (from its
 * start), which a delta send can forward as it arrives? */
int ovl__delta_arriving(const void *buf, size_t len);
/* ovl_alloc (alloc.c): where [base, base+len) of a block is mapped a second
 * time, for ovl's writes, or NULL (not ovl_alloc memory). */
char *ovl__alloc_alias(const void *base, size_t len);

/* A lock for ovl objects that live in the heap, which may share a page with
 * a guarded buffer edge: a mutex's futex system call cannot reach such a
 * page (EFAULT, glibc aborts), a spin on an atomic can (a fault handled as
 * a neighbour access). Held briefly: a few instructions, or one protection
 * change (watch.c). */
typedef struct {
    atomic_flag f;
} ovl__spin_t;
static inline void ovl__spin_lock(ovl__spin_t *s)
{
    while (atomic_flag_test_and_set_explicit(&s->f, memory_order_acquire))
        ovl__relax();
}
static inline void ovl__spin_unlock(ovl__spin_t *s)
{
    atomic_flag_clear_explicit(&s->f, memory_order_release);
}
/* Measured cost of one access fault served by @m's mechanism, in
 * microseconds (mprotect: SIGSEGV + mprotect; uffd: SIGBUS +
 * UFFDIO_ZEROPAGE). Best of a few; <= 0 when @m is unavailable here. */
double ovl__watch_fault_cost_us(ovl_monitor_t m);
/* Measured cost of guarding @npages populated pages with @m's mechanism
 * (mprotect PROT_NONE, or UFFDIO_WRITEPROTECT), in microseconds; < 0 when
 * unavailable. Best of @reps. */
double ovl__watch_protect_cost_us(ovl_monitor_t m, size_t npages, int reps);

/* Hold region (one-sided put source): interior pages are write-protected;
 * a write waits until ovl__watch_hold_release covers its page. Edge pages
 * are never protected (the caller copies their bytes). */
enum { OVL__WATCH_HOLD = 2 }; /* struct ovl__watch::is_send of a hold region */
int ovl__watch_hold_create(ovl_monitor_t m, const void *base, size_t len, struct ovl__watch **out);
/* Bytes [off, off+len) have left: their whole interior pages become writable. */
void ovl__watch_hold_release(struct ovl__watch *w, size_t off, size_t len);
/* Release everything and unregister (ovl__watch_destroy frees it). */
void ovl__watch_hold_finish(struct ovl__watch *w);

#endif /* OVL_INTERNAL_WATCH_H */
