/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_rma: one-sided get/put on segments (ovl_get, ovl_put, HUNT). Every
 * rank fills its segment with pattern key SEGKEY(rank); data read from a
 * segment is checked byte for byte against that pattern at the target
 * offset. Phases (argv[1] picks one; "all" runs every phase but sizes):
 *  - sizes:   gets of every 2^k - 1, 2^k, 2^k + 1 from 1 byte to 8 MiB + 1,
 *             and of 16 MiB + 1, 32 MiB - 1, 64 MiB + 1, at destination
 *             offsets 0, 1 and page - 3 (one of them from 1 MiB) inside pages whose other bytes are sentinels (checked);
 *             the data is used at once, without any wait call (explicit
 *             monitor: ovl_get_need first); puts of the same sizes up to
 *             4 MiB + 1, their sources rewritten at once, checked at the
 *             target;
 *  - orders:  a split get read upwards, downwards (OVL_ORDER_DOWN hint) and
 *             in random page order with writes (RANDOM): split (CMake pins
 *             the model to its built-in figures for orders, many, put and
 *             sizes, and the phase asserts the splits through ovl_stats),
 *             at most one fault a strip under mprotect with UP/DOWN (lazy
 *             protection); ovl_get with a request (UP and DOWN): it completes
 *             when the large strip read first is in place (read with no
 *             wait and no fault), one `nonblocking` decision counted, the
 *             rest demand-driven;
 *  - many:    16 outstanding gets from every other rank (some split), used
 *             in a random order; small gets behind a watched one join a
 *             train by default under the explicit monitor only, and are
 *             read before it; then a train under the piggyback hint 2
 *             used in issue order;
 *  - put:     puts (unaligned, 1 MiB + 3, split; 100 bytes) whose source is
 *             rewritten immediately: the target sees the old values after
 *             ovl_fence + ovl_barrier, the source holds the new ones;
 *  - sync:    a counter on rank 0 incremented under ovl_lock by every rank
 *             (get, need, put, unlock) ends at size * iterations, the lock's
 *             ticket counters crossing their wrap (white-box); a put
 *             retired by ovl_barrier alone is visible to its target;
 *  - hints:   (4 MiB gets) the decomp hint 0 never splits, a large factor splits into
 *             many strips (when the model splits at all), counters move;
 *             white-box: a get's strips in flight are engine ops of their
 *             own kind, not waiting continuations (which would make the
 *             progress thread poll at the callback pace);
 *  - reuse:   gets of 2, 3 and 4 pages again and again, the geometry
 *             changing under each page count (whole pages, both edge
 *             pages shared with sentinels, only the first, only the last),
 *             into pages never touched (holes) or holding old data, used
 *             upwards or in random order: uffd reuses its receive shadows
 *             across gets, and each must come back empty;
 *  - local:   (run without OVL_RMA_LOCAL, every other phase with
 *             OVL_RMA_LOCAL=overlap) gets and puts with targets on this
 *             node complete inside the call: data read at once, no fault,
 *             no split, a get's request already complete; targets on
 *             other nodes stay demand-driven in the same run;
 *  - serve:   (progress thread) rank 0 computes without any MPI or ovl
 *             call until every other rank has read its segment (data
 *             checked) and put a flag into it: served, whoever serves them (ovl's progress
 *             thread, or MPI itself where the probe at the first
 *             ovl_segment_create found that it needs no target: white-box
 *             ovl__rma_serving()); a rank that does not serve does not wake
 *             for an idle segment. argv[2] "on" / "off" expects the probe's
 *             answer ("on": MPICH over TCP or shared memory, checked under
 *             MPICH only; "off": MPICH with its own progress thread,
 *             MPIR_CVAR_ASYNC_PROGRESS=1, or Open MPI on one node);
 *  - errors:  bad rank, range beyond the target's size, NULL pointers,
 *             freed / null segment, overlapping outstanding gets, a stack
 *             buffer under a fault monitor, bad hints, lock misuse; segment
 *             creation failing on one rank or all (too large, NULL) is an
 *             error on every rank, none hangs; the 257th live segment is
 *             refused; OVL_ERR_IN_CALLBACK inside a continuation; a segment
 *             left for ovl_finalize to free, then OVL_ERR_NOT_INIT.
 */
#include "delta_common.h"
#include "ovl_internal.h" /* white-box: the engine's counts (phase hints) */

#include <stddef.h>
#include <sys/mman.h>

#define SEGKEY(r) (0x5e600000ull + (uint64_t)(r))
#define MiB       ((size_t)1 << 20)

static int rank, nranks, explicit_mon;
static ovl_segment_t seg;
static unsigned char *segbase;
static size_t segbytes;

static void new_segment(size_t bytes)
{
    void *b = NULL;
    CHECK_OK(ovl_segment_create(bytes, &b, &seg));
    CHECK(bytes == 0 || b != NULL);
    segbase = b;
    segbytes = bytes;
    th_fill(segbase, bytes, SEGKEY(rank), 0);
    CHECK_OK(ovl_barrier()); /* every segment filled before anyone reads */
}

static void free_segment(void)
{
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_segment_free(&seg));
    CHECK(seg == OVL_SEGMENT_NULL);
}

/* Use a pending get destination upwards: check each page's bytes as they
 * come (the first access to a page waits for its strip). */
static void use_up(unsigned char *buf, size_t bytes, uint64_t key, size_t toff)
{
    size_t pg = dt_page();
    for (size_t o = 0; o < bytes;) {
        size_t len = dt_min(bytes - o, pg - ((uintptr_t)(buf + o) % pg));
        if (explicit_mon)
            CHECK_OK(ovl_get_need(buf + o, len));
        size_t bad = th_verify(buf + o, len, key, toff + o);
        CHECKF(bad == TH_OK, "byte %zu of %zu: %#x, expected %#x", o + bad, bytes, buf[o + bad],
               th_pattern_byte(key, toff + o + bad));
        o += len;
    }
}

static void use_down(unsigned char *buf, size_t bytes, uint64_t key, size_t toff)
{
    size_t pg = dt_page();
    for (size_t e = bytes; e > 0;) {
        size_t back = ((uintptr_t)(buf + e)) % pg;
        size_t len = dt_min(e, back ? back : pg);
        size_t o = e - len;
        if (explicit_mon)
            CHECK_OK(ovl_get_need(buf + o, len));
        size_t bad = th_verify(buf + o, len, key, toff + o);
        CHECKF(bad == TH_OK, "byte %zu of %zu differs (downwards)", o + bad, bytes);
        e = o;
    }
}

/* Random page order, writing every page's first byte before reading the
 * rest (a write to a page not yet arrived waits too). */
static void use_random(unsigned char *buf, size_t bytes, uint64_t key, size_t toff)
{
    size_t pg = dt_page(), n = (bytes + pg - 1) / pg;
    size_t *ord = dt_perm(n, th_rng());
    for (size_t k = 0; k < n; k++) {
        size_t o = ord[k] * pg, len = dt_min(pg, bytes - o);
        if (explicit_mon)
            CHECK_OK(ovl_get_need(buf + o, len));
        buf[o] = dt_flip(th_pattern_byte(key, toff + o));
        size_t bad = th_verify(buf + o + 1, len - 1, key, toff + o + 1);
        CHECKF(bad == TH_OK, "byte %zu of %zu differs (random order)", o + 1 + bad, bytes);
    }
    for (size_t k = 0; k < n; k++)
        CHECK(buf[k * pg] == dt_flip(th_pattern_byte(key, toff + k * pg)));
    free(ord);
}

/* Whether the model in force splits a get of @n bytes from @peer
 * (white-box). CMake runs the phases that need splits (orders, many, put,
 * sizes) with OVL_CALIBRATE=0 and OVL_PERFDB=off: the model keeps its
 * built-in figures (1 Gbit/s Ethernet), under which their large transfers split
 * whatever this machine measures, so @must (a size the phase relies on)
 * is then required to split, unless its target is completed directly. */
static int model_splits(size_t n, int peer, int must)
{
    struct ovl__split sp;
    CHECK(ovl__model_split(n, peer, &sp) == 0);
    /* A target on this node reached directly (the cluster tests'
     * hosts with 2 ranks) is completed in the call, never split. */
    if (must && ovl__m.source == OVL__MODEL_DEFAULTS && !ovl__model_direct(peer))
        CHECKF(sp.should_split, "the built-in model does not split %zu bytes: %s", n, sp.why);
    return sp.should_split;
}

/* Split decisions counted for @reason (white-box), and for all reasons. */
static unsigned long long reasons(int reason)
{
    unsigned long long n = 0;
    for (int i = 0; i < OVL__SPLIT_NREASONS; i++)
        if (reason < 0 || i == reason)
            n += atomic_load(&ovl__g.st_split[i]);
    return n;
}

static int mprotect_mon(void)
{
    return dt_monitor() == OVL_MONITOR_MPROTECT;
}

/* ---- phases ---------------------------------------------------------------- */

/* Powers of two and their neighbours, 2^k - 1, 2^k, 2^k + 1, from 1 byte
 * to 2^@kmax + 1, ascending; returns the count (at most 3 * (kmax + 1)). */
static size_t pow2_sizes(int kmax, size_t *out)
{
    size_t n = 0;
    for (int k = 0; k <= kmax; k++)
        for (int d = -1; d <= 1; d++) {
            size_t v = ((size_t)1 << k) + (size_t)(ptrdiff_t)d;
            if (v > 0 && (n == 0 || v > out[n - 1]))
                out[n++] = v;
        }
    return n;
}

static void phase_sizes(void)
{
    dt_phase("sizes", 120);
    size_t pg = dt_page();
    /* 1 B .. 8 MiB + 1, then one neighbour of each larger power (each of
     * these gets costs seconds under ASan, where inline progress leaves
     * the target serving only inside its own ovl calls) */
    size_t sizes[3 * 24 + 3];
    size_t nsz = pow2_sizes(23, sizes);
    sizes[nsz++] = 16 * MiB + 1;
    sizes[nsz++] = 32 * MiB - 1;
    sizes[nsz++] = 64 * MiB + 1;
    new_segment(64 * MiB + 64);
    int peer = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    for (size_t i = 0; i < nsz; i++) {
        /* destination offsets 0, 1 and page - 3 below 1 MiB, one of them
         * (in turn) from 1 MiB, where the bytes, not the edges, cost */
        size_t offs[3] = { 0, 1, pg - 3 };
        int big = sizes[i] >= MiB, noffs = big ? 1 : 3;
        for (int k = 0; k < noffs; k++) {
            size_t toff = (i * 7 + (size_t)k * 13) % 61, off = offs[big ? i % 3 : (size_t)k];
            dt_region_t r;
            dt_region_alloc(&r, sizes[i], off, 0xabc00 + i * 4 + (size_t)k);
            CHECK_OK(ovl_get(r.buf, peer, toff, sizes[i], seg, NULL, NULL));
            use_up(r.buf, sizes[i], SEGKEY(peer), toff);
            size_t bad = dt_sentinel_check(&r);
            CHECKF(bad == TH_OK, "sentinel byte %zu changed (size %zu, offset %zu)", bad, sizes[i],
                   r.off);
            CHECK_OK(ovl_fence(seg));
            if (!big) /* still there after the fence (use_up read it all) */
                CHECK(th_verify(r.buf, sizes[i], SEGKEY(peer), toff) == TH_OK);
            dt_region_free(&r);
        }
    }
    /* puts, 1 B .. 4 MiB + 1, each at its own place in the target's
     * segment (the sizes summed, from 0) from an unaligned source that is
     * rewritten at once (a write to a held page waits for its strip); the
     * target checks them all after one fence and barrier */
    size_t psz[3 * 23];
    const size_t np = pow2_sizes(22, psz);
    dt_region_t *src = calloc(np, sizeof *src);
    CHECK(src != NULL);
    size_t at = 0;
    for (size_t i = 0; i < np; i++) {
        size_t offs[3] = { 0, 1, pg - 3 };
        dt_region_alloc(&src[i], psz[i], offs[i % 3], 0xabe00 + i);
        th_fill(src[i].buf, psz[i], 0xa5000 + (uint64_t)rank, at);
        CHECK_OK(ovl_put(src[i].buf, peer, at, psz[i], seg, NULL));
#if defined(__SANITIZE_THREAD__)
        /* MPI reads the source on the progress thread; the rewrite below
         * waits in the kernel (userfaultfd) until its strip is done, an
         * order TSan cannot see, so it reports MPI's read against the
         * write (its stack lost, beyond tsan.supp), and handling a race
         * per byte took this phase past its watchdog. Under TSan complete
         * the puts first: the fence orders the write after the read. */
        CHECK_OK(ovl_fence(seg));
#endif
        th_fill(src[i].buf, psz[i], 0xa6000 + (uint64_t)rank, at);
        at += psz[i];
    }
    CHECK(at <= 64 * MiB);
    CHECK_OK(ovl_fence(seg));
    CHECK_OK(ovl_barrier());
    at = 0;
    for (size_t i = 0; i < np; i++) {
        size_t bad = th_verify(segbase + at, psz[i], 0xa5000 + (uint64_t)from, at);
        CHECKF(bad == TH_OK, "put of %zu bytes from rank %d: byte %zu", psz[i], from, bad);
        CHECK(th_verify(src[i].buf, psz[i], 0xa6000 + (uint64_t)rank, at) == TH_OK);
        CHECK(dt_sentinel_check(&src[i]) == TH_OK);
        dt_region_free(&src[i]);
        at += psz[i];
    }
    free(src);
    /* the segment's own pattern back where the gets below read it */
    th_fill(segbase, at, SEGKEY(rank), 0);
    CHECK_OK(ovl_barrier());
    /* two gets whose buffers share their edge pages, used in reverse order */
    dt_region_t r;
    dt_region_alloc(&r, 3 * pg, 100, 0x5151);
    size_t a = pg + 50;
    CHECK_OK(ovl_get(r.buf, peer, 0, a, seg, NULL, NULL));
    CHECK_OK(ovl_get(r.buf + a, peer, 1000, 3 * pg - a, seg, NULL, NULL));
    use_up(r.buf + a, 3 * pg - a, SEGKEY(peer), 1000);
    use_up(r.buf, a, SEGKEY(peer), 0);
    CHECK(dt_sentinel_check(&r) == TH_OK);
    CHECK_OK(ovl_fence(seg));
    dt_region_free(&r);
    free_segment();
}

static void phase_reuse(void)
{
    dt_phase("reuse", 60);
    size_t pg = dt_page();
    new_segment(8 * pg + 64);
    int peer = (rank + 1) % nranks;
    for (int it = 0; it < 48; it++) {
        size_t np = 2 + (size_t)it % 3;
        int geo = (it / 3) % 4;
        size_t off = geo == 1 || geo == 2 ? 100 : 0;
        size_t bytes = geo == 0 ? np * pg : geo == 1 ? np * pg - 200 : np * pg - 100;
        size_t toff = (size_t)it * 5 % 61;
        dt_region_t r;
        dt_region_alloc(&r, bytes, off, 0x7e000 + (uint64_t)it);
        if (it % 2)
            memset(r.buf, 0x77, bytes); /* old data, else never-touched pages */
        CHECK_OK(ovl_get(r.buf, peer, toff, bytes, seg, NULL, NULL));
        if (it % 4 < 2)
            use_up(r.buf, bytes, SEGKEY(peer), toff);
        else
            use_random(r.buf, bytes, SEGKEY(peer), toff);
        size_t bad = dt_sentinel_check(&r);
        CHECKF(bad == TH_OK, "sentinel byte %zu changed (%zu pages, geometry %d)", bad, np, geo);
        CHECK_OK(ovl_fence(seg));
        dt_region_free(&r);
    }
    free_segment();
}

static void phase_orders(void)
{
    dt_phase("orders", 60);
    size_t pg = dt_page(), n = 4 * MiB + 3;
    new_segment(n + 4096);
    int peer = (rank + 1) % nranks;
    ovl_order_t ord[3] = { OVL_ORDER_UP, OVL_ORDER_DOWN, OVL_ORDER_RANDOM };
    int split = model_splits(n, peer, 1);
    for (int k = 0; k < 3; k++) {
        CHECK_OK(ovl_segment_hint(seg, TH_ORDER(ord[k])));
        dt_region_t r;
        dt_region_alloc(&r, n, 11 + (size_t)k, 0x0d0 + (uint64_t)k);
        size_t toff = 17 * (size_t)k;
        ovl_stats_t s0 = dt_stats();
        CHECK_OK(ovl_get(r.buf, peer, toff, n, seg, NULL, NULL));
        if (ord[k] == OVL_ORDER_UP)
            use_up(r.buf, n, SEGKEY(peer), toff);
        else if (ord[k] == OVL_ORDER_DOWN)
            use_down(r.buf, n, SEGKEY(peer), toff);
        else
            use_random(r.buf, n, SEGKEY(peer), toff);
        CHECK(dt_sentinel_check(&r) == TH_OK);
        CHECK_OK(ovl_fence(seg));
        ovl_stats_t s1 = dt_stats();
        unsigned long long strips = s1.rma_strips - s0.rma_strips, faults = s1.faults - s0.faults;
        if (rank == 0)
            printf("  order %d: %llu strips, %llu faults\n", (int)ord[k], strips, faults);
        if (split) { /* strip-level waits, and the strips' own geometry */
            CHECK(s1.rma_transfers == s0.rma_transfers + 1 && s1.rma_split == s0.rma_split + 1);
            CHECKF(strips >= 2, "split get of %zu bytes in %llu strips", n, strips);
            /* lazy protection: one guarded page at a time, strips that
             * arrived skipped: a sequential reader faults once a strip at
             * most */
            if (ord[k] != OVL_ORDER_RANDOM && mprotect_mon())
                CHECKF(faults <= strips, "%llu faults reading %llu strips in order %d", faults,
                       strips, (int)ord[k]);
        }
        dt_region_free(&r);
    }
    /* ovl_get with a request: it completes when the strip read first is in
     * place, a large one (HUNT 5.3), which leaves first: under UP the
     * destination's start, under DOWN its end; the rest is demand-driven.
     * One split decision is counted for it, `nonblocking`. */
    ovl_request_t req = OVL_REQUEST_NULL;
    ovl_status_t st;
    dt_region_t r;
    for (int k = 0; k < 2; k++) {
        int down = k == 1;
        CHECK_OK(ovl_segment_hint(seg, TH_ORDER(down ? OVL_ORDER_DOWN : OVL_ORDER_UP)));
        dt_region_alloc(&r, n, 1 + (size_t)k, 0x0b0 + (uint64_t)k);
        unsigned long long nb0 = reasons(OVL__SPLIT_NONBLOCKING), all0 = reasons(-1);
        CHECK_OK(ovl_get(r.buf, peer, 3, n, seg, NULL, &req));
        CHECK(reasons(-1) == all0 + 1); /* one decision, one reason */
        CHECK(req != OVL_REQUEST_NULL);
        CHECK_OK(ovl_wait(&req, &st));
        CHECK(req == OVL_REQUEST_NULL);
        CHECKF(st.bytes > 0 && st.bytes <= n, "first strip %zu bytes", (size_t)st.bytes);
        CHECK(st.source == peer && st.error == OVL_SUCCESS);
        if (split) {
            CHECKF(st.bytes >= n / 4 && st.bytes <= 3 * n / 4,
                   "ovl_get request (%s): covers %zu of %zu bytes, not the large strip",
                   down ? "DOWN" : "UP", (size_t)st.bytes, n);
            CHECK(reasons(OVL__SPLIT_NONBLOCKING) == nb0 + 1);
        }
        /* the bytes it covers are in place: read without a wait or a fault
         * (not even ovl_get_need under the explicit monitor) */
        size_t at = down ? n - st.bytes : 0;
        ovl_stats_t s0 = dt_stats();
        size_t bad = th_verify(r.buf + at, st.bytes, SEGKEY(peer), 3 + at);
        ovl_stats_t s1 = dt_stats();
        CHECKF(bad == TH_OK,
               "ovl_get request (%s) complete, byte %zu of its strip [%zu, +%zu) not there",
               down ? "DOWN" : "UP", bad, at, (size_t)st.bytes);
        CHECKF(s1.faults == s0.faults, "%llu faults reading the completed strip",
               (unsigned long long)(s1.faults - s0.faults));
        if (down)
            use_down(r.buf, n, SEGKEY(peer), 3);
        else
            use_up(r.buf, n, SEGKEY(peer), 3);
        CHECK(dt_sentinel_check(&r) == TH_OK);
        CHECK_OK(ovl_fence(seg));
        if (!down)
            dt_region_free(&r);
    }
    /* zero bytes: completes at once */
    CHECK_OK(ovl_get(r.buf, peer, 0, 0, seg, NULL, &req));
    CHECK_OK(ovl_wait(&req, &st));
    CHECK_OK(ovl_fence(seg));
    CHECK_OK(ovl_segment_hint(seg, TH_ORDER(OVL_ORDER_RANDOM))); /* the default, for later phases */
    dt_region_free(&r);
    (void)pg;
    free_segment();
}

static void phase_many(void)
{
    dt_phase("many", 60);
    enum { PER = 16 };
    new_segment(2 * MiB);
    int nget = PER * (nranks - 1);
    dt_region_t *r = calloc((size_t)nget, sizeof *r);
    size_t *toff = calloc((size_t)nget, sizeof *toff);
    int *src = calloc((size_t)nget, sizeof *src);
    CHECK(r && toff && src);
    th_rng_t *g = th_rng();
    ovl_stats_t s0 = dt_stats();
    int nsplit = 0;
    for (int i = 0; i < nget; i++) {
        src[i] = (rank + 1 + i % (nranks - 1)) % nranks;
        size_t n = 1 + th_size_log(g, 300000);
        if (i == 0)
            n = 300000; /* one split get at least (the model pinned: CMake) */
        nsplit += model_splits(n, src[i], i == 0);
        toff[i] = (size_t)th_below(g, 2 * MiB - n);
        dt_region_alloc(&r[i], n, (size_t)th_below(g, dt_page()), 0x3a00 + (uint64_t)i);
        CHECK_OK(ovl_get(r[i].buf, src[i], toff[i], n, seg, NULL, NULL));
    }
    size_t *ord = dt_perm((size_t)nget, g);
    for (int k = 0; k < nget; k++) {
        int i = (int)ord[k];
        if (k % 2)
            use_random(r[i].buf, r[i].bytes, SEGKEY(src[i]), toff[i]);
        else
            use_up(r[i].buf, r[i].bytes, SEGKEY(src[i]), toff[i]);
        CHECK(dt_sentinel_check(&r[i]) == TH_OK);
    }
    CHECK_OK(ovl_fence(seg));
    ovl_stats_t s1 = dt_stats();
    CHECK(s1.rma_transfers == s0.rma_transfers + (unsigned)nget);
    if (nsplit) /* strips that end in pages of their own are rounded away */
        CHECKF(s1.rma_split > s0.rma_split && s1.rma_strips - s0.rma_strips > (unsigned)nget,
               "%d gets the model splits: %llu split, %llu strips for %d gets", nsplit,
               (unsigned long long)(s1.rma_split - s0.rma_split),
               (unsigned long long)(s1.rma_strips - s0.rma_strips), nget);
    for (int i = 0; i < nget; i++)
        dt_region_free(&r[i]);
    free(ord);

    /* Trains by default (no piggyback hint): gets below the model's
     * piggyback threshold, issued behind a watched one whose last strip has
     * not arrived, join its train, but only under the explicit monitor
     * (ovl_get_need waits for a member); under a fault monitor they stay
     * guarded, since the program may read them first. Read here in random
     * order, members before their anchor, data checked. The engine is held
     * while they are issued, so the anchor is still outstanding (white-box). */
    {
        enum { SMALL = 8 };
        size_t pg = dt_page(), big = MiB + 5, thr = ovl__model_piggyback_threshold();
        int peer = (rank + 1) % nranks;
        /* one mapping: the anchor, a page, then the members */
        size_t bigp = (big + pg - 1) / pg * pg, mlen = bigp + pg + 2 * SMALL * pg;
        unsigned char *bb = dt_alloc(mlen), *sb = bb + bigp + pg;
        size_t sn[SMALL], so[SMALL];
        CHECKF(thr >= pg, "piggyback threshold %zu", thr);
        unsigned long long t0 = reasons(OVL__SPLIT_TRAIN);
        ovl__engine_hold();
        CHECK_OK(ovl_get(bb, peer, 64, big, seg, NULL, NULL));
        for (int i = 0; i < SMALL; i++) { /* every other page: none shared or adjacent */
            sn[i] = 1 + (size_t)th_below(g, pg - 100);
            so[i] = (size_t)th_below(g, 2 * MiB - sn[i]);
            CHECK_OK(ovl_get(sb + (size_t)(2 * i) * pg, peer, so[i], sn[i], seg, NULL, NULL));
        }
        ovl__engine_release();
        unsigned long long trains = reasons(OVL__SPLIT_TRAIN) - t0;
        if (rank == 0)
            printf("  default trains: %llu of %d small gets (threshold %zu B)\n", trains, SMALL,
                   thr);
        CHECKF(trains == (explicit_mon ? SMALL : 0),
               "%llu of %d small gets behind a watched one joined a train (%s monitor)", trains,
               SMALL, ovl_monitor_name(dt_monitor()));
        size_t *o = dt_perm(SMALL, g);
        for (int k = 0; k < SMALL; k++) {
            int i = (int)o[k];
            use_up(sb + (size_t)(2 * i) * pg, sn[i], SEGKEY(peer), so[i]);
        }
        use_random(bb, big, SEGKEY(peer), 64);
        CHECK_OK(ovl_fence(seg));
        free(o);
        dt_free(bb, mlen);
    }

    /* a train: gets beyond the second outstanding one piggyback (read in
     * issue order, upwards: lazy protection on the guarded ones too); the
     * engine held while they are issued, so none has arrived yet */
    CHECK_OK(ovl_segment_hint(seg, TH_PIGGYBACK(2)));
    CHECK_OK(ovl_segment_hint(seg, TH_ORDER(OVL_ORDER_UP)));
    unsigned long long t0 = reasons(OVL__SPLIT_TRAIN);
    ovl__engine_hold();
    for (int i = 0; i < nget; i++) {
        size_t n = 4096 + th_size_log(g, 200000);
        if (i == 0)
            n = 300000; /* a split anchor */
        toff[i] = (size_t)th_below(g, 2 * MiB - n);
        dt_region_alloc(&r[i], n, (size_t)th_below(g, dt_page()), 0x3b00 + (uint64_t)i);
        CHECK_OK(ovl_get(r[i].buf, src[i], toff[i], n, seg, NULL, NULL));
    }
    ovl__engine_release();
    /* every get from the third on, unless its buffer shares a page with
     * one outstanding */
    CHECKF(reasons(OVL__SPLIT_TRAIN) - t0 >= 1, "no train among %d gets", nget);
    for (int i = 0; i < nget; i++) { /* issue order */
#if defined(__SANITIZE_THREAD__)
        /* A piggybacked get lands straight in its destination (MPI writes
         * it, on the progress thread here); the program may read it once
         * the train's anchor page was opened, a page-table change TSan
         * does not see as synchronisation, so it reports MPI's write
         * against the read below (its stack is often lost, so tsan.supp
         * cannot match it). Under TSan wait for the first byte through
         * ovl_get_need instead (X.lock orders it after the completion); a
         * guarded get still waits in the fault handler past its first page. */
        CHECK_OK(ovl_get_need(r[i].buf, 1));
#endif
        use_up(r[i].buf, r[i].bytes, SEGKEY(src[i]), toff[i]);
    }
    CHECK_OK(ovl_fence(seg));
    for (int i = 0; i < nget; i++) {
        CHECK(th_verify(r[i].buf, r[i].bytes, SEGKEY(src[i]), toff[i]) == TH_OK);
        CHECK(dt_sentinel_check(&r[i]) == TH_OK);
        dt_region_free(&r[i]);
    }
    CHECK_OK(ovl_segment_hint(seg, TH_PIGGYBACK(0)));
    CHECK_OK(ovl_segment_hint(seg, TH_ORDER(OVL_ORDER_RANDOM)));
    free(r);
    free(toff);
    free(src);
    free_segment();
}

static void phase_put(void)
{
    dt_phase("put", 60);
    size_t n = MiB + 3, small = 100;
    new_segment(3 * MiB + 4096);
    int peer = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    uint64_t oldk = 0x9100 + (uint64_t)rank, newk = 0x9200 + (uint64_t)rank;
    dt_region_t s, t;
    dt_region_alloc(&s, n, 7, 0x9300);
    dt_region_alloc(&t, small, 33, 0x9400);
    th_fill(s.buf, n, oldk, 0);
    th_fill(t.buf, small, oldk, 5);
    /* the source's whole pages are held and split (the edges are copied;
     * all of it under the explicit monitor) */
    size_t pg = dt_page(), a = (uintptr_t)s.buf;
    size_t held = (a + n) / pg * pg - (a + pg - 1) / pg * pg;
    int split = model_splits(explicit_mon ? n : held, peer, 1);
    ovl_stats_t p0 = dt_stats();
    CHECK_OK(ovl_put(s.buf, peer, 0, n, seg, NULL));
    ovl_stats_t p1 = dt_stats();
    if (split)
        CHECKF(p1.rma_split == p0.rma_split + 1 && p1.rma_strips - p0.rma_strips >= 3,
               "put of %zu bytes: %llu strips", n,
               (unsigned long long)(p1.rma_strips - p0.rma_strips));
    CHECK_OK(ovl_put(t.buf, peer, MiB + 64, small, seg, NULL));
    /* rewrite the sources at once, from the end (waits for each strip) */
    for (size_t o = n; o > 0;) {
        size_t len = dt_min(o, 4000);
        o -= len;
        th_fill(s.buf + o, len, newk, o);
    }
    th_fill(t.buf, small, newk, 5);
    CHECK(th_verify(s.buf, n, newk, 0) == TH_OK);
    CHECK(dt_sentinel_check(&s) == TH_OK && dt_sentinel_check(&t) == TH_OK);
    CHECK_OK(ovl_fence(seg));
    CHECK_OK(ovl_barrier());
    uint64_t fk = 0x9100 + (uint64_t)from;
    size_t bad = th_verify(segbase, n, fk, 0);
    CHECKF(bad == TH_OK, "put byte %zu from rank %d: %#x, expected %#x", bad, from, segbase[bad],
           th_pattern_byte(fk, bad));
    CHECK(th_verify(segbase + MiB + 64, small, fk, 5) == TH_OK);
    /* the segment's own bytes around the puts are untouched */
    CHECK(th_verify(segbase + n, MiB + 64 - n, SEGKEY(rank), n) == TH_OK);
    /* put the same buffer to two ranks (copied: the first put holds it) */
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_put(s.buf, peer, 0, n, seg, NULL));
    CHECK_OK(ovl_put(s.buf, from, 2 * MiB, n, seg, NULL));
    CHECK_OK(ovl_barrier());
    CHECK(th_verify(segbase, n, 0x9200 + (uint64_t)from, 0) == TH_OK);
    CHECK(th_verify(segbase + 2 * MiB, n, 0x9200 + (uint64_t)peer, 0) == TH_OK);
    /* a put from a get still arriving forwards the data that arrived */
    dt_region_t g;
    dt_region_alloc(&g, 200000, 9, 0x9500);
    CHECK_OK(ovl_barrier());
    th_fill(segbase + MiB, 200000, SEGKEY(rank), MiB);
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_get(g.buf, peer, MiB, 200000, seg, NULL, NULL));
    CHECK_OK(ovl_put(g.buf, peer, 0, 200000, seg, NULL));
    CHECK_OK(ovl_barrier());
    CHECK(th_verify(segbase, 200000, SEGKEY(rank), MiB) == TH_OK);
    dt_region_free(&g);
    dt_region_free(&s);
    dt_region_free(&t);
    free_segment();
}

static void phase_sync(void)
{
    dt_phase("sync", 60);
    enum { ITERS = 20 };
    new_segment(4096);
    /* white-box: rank 0's lock word (after its 4096 bytes, src/segment.c)
     * two tickets before its halves wrap, so the rounds below cross it */
    const uint64_t wrap = 0xfffffffefffffffeull;
    if (rank == 0) {
        memset(segbase, 0, 8);
        memcpy(segbase + 4096, &wrap, 8);
    }
    CHECK_OK(ovl_barrier());
    uint64_t *v = dt_alloc(4096);
    for (int i = 0; i < ITERS; i++) {
        CHECK_OK(ovl_lock(seg, 0));
        CHECK_OK(ovl_get(v, 0, 0, 8, seg, NULL, NULL));
        CHECK_OK(ovl_get_need(v, 8));
        uint64_t x = *v + 1;
        *v = x;
        CHECK_OK(ovl_put(v, 0, 0, 8, seg, NULL));
        CHECK_OK(ovl_unlock(seg, 0));
    }
    CHECK_OK(ovl_barrier());
    if (rank == 0) {
        uint64_t got;
        memcpy(&got, segbase, 8);
        CHECKF(got == (uint64_t)nranks * ITERS, "counter %llu, expected %d",
               (unsigned long long)got, nranks * ITERS);
        uint64_t w;
        memcpy(&w, segbase + 4096, 8);
        uint32_t turn = (uint32_t)wrap + (uint32_t)(nranks * ITERS);
        CHECKF((uint32_t)(w >> 32) == turn && (uint32_t)w == turn,
               "lock word %016llx after %d rounds across the wrap", (unsigned long long)w,
               nranks * ITERS);
    }
    /* put retired by the barrier alone */
    int peer = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    unsigned char *b = dt_alloc(4096);
    th_fill(b + 8, 3000, 0x7700 + (uint64_t)rank, 0);
    CHECK_OK(ovl_put(b + 8, peer, 100, 3000, seg, NULL));
    CHECK_OK(ovl_barrier());
    CHECK(th_verify(segbase + 100, 3000, 0x7700 + (uint64_t)from, 0) == TH_OK);
    /* lock retires gets to that rank */
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_get(b, peer, 100, 3000, seg, NULL, NULL));
    CHECK_OK(ovl_lock(seg, peer));
    CHECK_OK(ovl_unlock(seg, peer));
    CHECK(th_verify(b, 3000, 0x7700 + (uint64_t)rank, 0) == TH_OK);
    dt_free(b, 4096);
    dt_free(v, 4096);
    free_segment();
}

static void phase_hints(void)
{
    dt_phase("hints", 60);
    size_t n = 4 * MiB;
    new_segment(n);
    int peer = (rank + 1) % nranks;
    unsigned char *b = dt_alloc(n);
    ovl_stats_t s0 = dt_stats();
    CHECK_OK(ovl_segment_hint(seg, TH_DECOMP(0)));
    CHECK(ovl__engine_continuations() == 0);
    CHECK_OK(ovl_get(b, peer, 0, n, seg, NULL, NULL));
    /* Continuations are counted first: the count only falls as strips
     * complete, so a strip counted as one cannot hide behind a late look. */
    int conts = ovl__engine_continuations(), strips = ovl__engine_count(OVL__OP_RMA);
    CHECKF(conts == 0, "a get's strips count as %d waiting continuations", conts);
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    if (cfg.progress.mode == OVL_PROGRESS_INLINE) /* nothing else drives: still in flight */
        CHECKF(strips == 1, "%d strips of the unsplit get in flight", strips);
    use_up(b, n, SEGKEY(peer), 0);
    CHECK_OK(ovl_fence(seg));
    ovl_stats_t s1 = dt_stats();
    CHECK(s1.rma_transfers == s0.rma_transfers + 1);
    CHECK(s1.rma_strips == s0.rma_strips + 1);
    CHECK(s1.rma_split == s0.rma_split);
    CHECK(s1.rma_bytes == s0.rma_bytes + n);
    CHECK_OK(ovl_segment_hint(seg, TH_DECOMP(16)));
    CHECK_OK(ovl_get(b, peer, 0, n, seg, NULL, NULL));
    use_random(b, n, SEGKEY(peer), 0);
    CHECK_OK(ovl_fence(seg));
    ovl_stats_t s2 = dt_stats();
    CHECK(s2.rma_transfers == s1.rma_transfers + 1);
    CHECKF(s2.rma_split == s1.rma_split || s2.rma_strips >= s1.rma_strips + 16,
           "split into %llu strips", (unsigned long long)(s2.rma_strips - s1.rma_strips));
    if (rank == 0)
        printf("  4 MiB get with decomp 16: %llu strips\n",
               (unsigned long long)(s2.rma_strips - s1.rma_strips));
    CHECK_OK(ovl_segment_hint(seg, TH_DECOMP(1)));
    EXPECT_ERR(ovl_segment_hint(seg, TH_DECOMP(65)), OVL_ERR_ARG);
    EXPECT_ERR(ovl_segment_hint(seg, TH_ORDER((ovl_order_t)7)), OVL_ERR_ARG);

    /* Hints belong to their segment: decomp 0 on seg, a second segment
     * keeps the model's choice, and starts with the defaults. */
    CHECK_OK(ovl_segment_hint(seg, TH_DECOMP(0)));
    void *base2 = NULL;
    ovl_segment_t seg2 = OVL_SEGMENT_NULL;
    CHECK_OK(ovl_segment_create(n, &base2, &seg2));
    CHECK_OK(ovl_barrier());
    int split = model_splits(n, peer, 0) && !ovl__model_direct(peer);
    ovl_stats_t s3 = dt_stats();
    CHECK_OK(ovl_get(b, peer, 0, n, seg2, NULL, NULL));
    CHECK_OK(ovl_get_need(b, n));
    CHECK_OK(ovl_fence(seg2));
    ovl_stats_t s4 = dt_stats();
    CHECKF(s4.rma_split - s3.rma_split == (uint64_t)split,
           "a get on a second segment split %llu times, the model says %d",
           (unsigned long long)(s4.rma_split - s3.rma_split), split);
    CHECK_OK(ovl_get(b, peer, 0, n, seg, NULL, NULL));
    use_up(b, n, SEGKEY(peer), 0);
    CHECK_OK(ovl_fence(seg));
    ovl_stats_t s5 = dt_stats();
    CHECK(s5.rma_split == s4.rma_split && s5.rma_strips == s4.rma_strips + 1);
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_segment_free(&seg2));
    EXPECT_ERR(ovl_segment_hint(seg2, TH_DECOMP(1)), OVL_ERR_ARG); /* freed */
    dt_free(b, n);
    free_segment();
}

/* Does @r run on this rank's node? (MPI_COMM_TYPE_SHARED, as ovl asks) */
static int on_node(int r)
{
    static int *lead;
    if (!lead) {
        MPI_Comm node;
        CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
              MPI_SUCCESS);
        int me = rank;
        CHECK(MPI_Allreduce(MPI_IN_PLACE, &me, 1, MPI_INT, MPI_MIN, node) == MPI_SUCCESS);
        MPI_Comm_free(&node);
        lead = calloc((size_t)nranks, sizeof *lead);
        CHECK(lead != NULL);
        CHECK(MPI_Allgather(&me, 1, MPI_INT, lead, 1, MPI_INT, MPI_COMM_WORLD) == MPI_SUCCESS);
    }
    return lead[r] == lead[rank];
}

/* OVL_RMA_LOCAL=auto (the default), where MPI moves a node's bytes through
 * shared memory with the ranks' own CPUs (the model measures at ovl_init
 * that a computing rank hides none of it, or does not measure ranks that
 * share CPUs): a transfer with a target on this node is complete when the
 * call returns (read at once with no
 * ovl_get_need, even under the explicit monitor; no fault, no split; an
 * get's request already complete; a put's source rewritten at once
 * without waiting), while targets on other nodes (on the emulated cluster)
 * stay demand-driven in the same run. */
static void phase_local(void)
{
    dt_phase("local", 60);
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    CHECKF(cfg.mpi.rma_local == OVL_RMA_LOCAL_AUTO, "run without OVL_RMA_LOCAL (got %d)",
           (int)cfg.mpi.rma_local);
    size_t pg = dt_page();
    const size_t sizes[] = { 1, 4097, 3 * pg, MiB + 3 };
    new_segment(2 * MiB + 64);
    int nlocal = 0;
    for (int d = 0; d < nranks; d++) {
        int peer = (rank + d) % nranks; /* d = 0: this rank itself */
        int near = on_node(peer);
        nlocal += near;
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i], toff = 5 * i + (size_t)d, at = i % 2 ? 1 : pg - 3;
            dt_region_t r;
            dt_region_alloc(&r, n, at, 0x10c00 + i);
            ovl_stats_t s0 = dt_stats();
            CHECK_OK(ovl_get(r.buf, peer, toff, n, seg, NULL, NULL));
            if (near) {
                ovl_stats_t s1 = dt_stats();
                size_t bad = th_verify(r.buf, n, SEGKEY(peer), toff);
                CHECKF(bad == TH_OK, "get of %zu from rank %d (this node): byte %zu not there", n,
                       peer, bad);
                ovl_stats_t s2 = dt_stats();
                CHECK(s1.rma_transfers == s0.rma_transfers + 1);
                CHECK(s1.rma_strips == s0.rma_strips + 1 && s1.rma_split == s0.rma_split);
                CHECKF(s2.faults == s0.faults, "%llu faults reading a direct get",
                       (unsigned long long)(s2.faults - s0.faults));
            } else {
                use_up(r.buf, n, SEGKEY(peer), toff);
            }
            CHECK(dt_sentinel_check(&r) == TH_OK);
            CHECK_OK(ovl_fence(seg));
            dt_region_free(&r);
        }
        /* a get's request: complete at once on this node */
        dt_region_t r;
        dt_region_alloc(&r, MiB, 0, 0x10d00);
        ovl_request_t req = OVL_REQUEST_NULL;
        ovl_status_t st;
        CHECK_OK(ovl_get(r.buf, peer, 64, MiB, seg, NULL, &req));
        CHECK(req != OVL_REQUEST_NULL);
        if (near) {
            int flag = 0;
            CHECK_OK(ovl_test(&req, &flag, &st));
            CHECK(flag == 1 && req == OVL_REQUEST_NULL);
            CHECK(st.bytes == MiB && st.source == peer && st.error == OVL_SUCCESS);
        } else {
            CHECK_OK(ovl_wait(&req, &st));
        }
        use_up(r.buf, MiB, SEGKEY(peer), 64);
        CHECK_OK(ovl_fence(seg));
        dt_region_free(&r);
    }
    CHECK(nlocal >= 1); /* this rank at least */
    size_t thr = 0;
    CHECK_OK(ovl_model_split_threshold(&thr));
    if (nlocal == nranks)
        CHECKF(thr == SIZE_MAX, "one node, split threshold %zu", thr);
    else
        CHECKF(thr != SIZE_MAX && thr >= pg, "split threshold %zu with another node", thr);

    /* put: the source is rewritten at once (no wait), the target has the
     * old bytes; every rank puts to the next one */
    int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    size_t n = MiB + 3;
    dt_region_t p;
    dt_region_alloc(&p, n, 7, 0x10e00);
    uint64_t oldk = 0x10f00 + (uint64_t)rank, newk = 0x11000 + (uint64_t)rank;
    th_fill(p.buf, n, oldk, 0);
    ovl_stats_t s0 = dt_stats();
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_put(p.buf, to, 32, n, seg, NULL));
    th_fill(p.buf, n, newk, 0);
    ovl_stats_t s1 = dt_stats();
    if (on_node(to))
        CHECKF(s1.faults == s0.faults, "%llu faults rewriting a direct put's source",
               (unsigned long long)(s1.faults - s0.faults));
    CHECK(dt_sentinel_check(&p) == TH_OK);
    CHECK_OK(ovl_fence(seg));
    CHECK_OK(ovl_barrier());
    size_t bad = th_verify(segbase + 32, n, 0x10f00 + (uint64_t)from, 0);
    CHECKF(bad == TH_OK, "put from rank %d: byte %zu", from, bad);
    CHECK(th_verify(segbase, 32, SEGKEY(rank), 0) == TH_OK);
    CHECK(th_verify(segbase + 32 + n, 2 * MiB + 64 - 32 - n, SEGKEY(rank), 32 + n) == TH_OK);
    dt_region_free(&p);
    /* the argument checks are those of any target */
    unsigned char small[64];
    EXPECT_ERR(ovl_get(small, rank, 2 * MiB + 1, 64, seg, NULL, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_put(small, rank, 2 * MiB + 1, 64, seg, NULL), OVL_ERR_ARG);
    if (!explicit_mon)
        EXPECT_ERR(ovl_get(small, rank, 0, sizeof small, seg, NULL, NULL),
                   OVL_ERR_ARG);                           /* on the stack */
    CHECK_OK(ovl_get(small, rank, 0, 0, seg, NULL, NULL)); /* zero bytes */
    free_segment();
}

/* MPICH 4 (Debian's 4.0.2): a get needs the target's progress over TCP
 * and over shared memory alike. MPICH 5 moves a same-node get without it,
 * and the probe rightly finds serving unneeded there. */
static int mpi_is_mpich4(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(v, &n);
    const char *p = strstr(v, "MPICH Version:");
    if (!p)
        return 0;
    p += strlen("MPICH Version:");
    while (*p == ' ' || *p == '\t')
        p++;
    return *p == '4';
}

static void phase_serve(const char *expect)
{
    dt_phase("serve", 60);
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    if (cfg.progress.mode != OVL_PROGRESS_THREAD) {
        printf("test_rma serve: needs the progress thread; skipped\n");
        return;
    }
    /* the data read, then one 8-byte flag per rank, put when it is done */
    size_t pg = dt_page(), bytes = 16 * pg, flags = bytes;
    new_segment(bytes + 8 * (size_t)nranks);
    int serving = ovl__rma_serving();
    /* A probe whose origin was descheduled past the target's watch (two
     * cores, MPICH's spinning progress threads) keeps serving on; measure
     * again after a new ovl_init, up to three times. */
    for (int again = 1; again < 3 && expect && !strcmp(expect, "off"); again++) {
        int any = 0;
        CHECK_MPI(MPI_Allreduce(&serving, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        if (!any)
            break;
        free_segment();
        CHECK_OK(ovl_finalize());
        CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
        new_segment(bytes + 8 * (size_t)nranks);
        serving = ovl__rma_serving();
    }
    if (getenv("OVL_SERVE_US"))
        CHECKF(serving, "OVL_SERVE_US is set, yet the rank does not serve");
    if (expect && !strcmp(expect, "on") && mpi_is_mpich4())
        CHECKF(serving, "the probe found serving unneeded where MPI needs it");
    if (expect && !strcmp(expect, "off"))
        CHECKF(!serving, "MPI progresses one-sided traffic itself here, yet the rank serves");
    /* every rank decided the same */
    int lo = 0, hi = 0;
    CHECK_MPI(MPI_Allreduce(&serving, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(&serving, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    CHECKF(lo == hi || getenv("OVL_SERVE_US"), "ranks disagree on serving (%d..%d)", lo, hi);

    /* Rank 0 computes without any MPI or ovl call until every other rank
     * has put its flag into its memory (up to 20 s): the others' gets and
     * puts must be served meanwhile, by its progress thread or by MPI. */
    if (rank == 0)
        memset(segbase + flags, 0, 8 * (size_t)nranks);
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        double t0 = th_now();
        volatile double x = 1;
        int done = 0;
        while (!done && th_now() - t0 < 20) {
            for (int i = 0; i < 1000; i++)
                x = x * 1.0000001 + 1e-9;
            done = 1;
            for (int r = 1; r < nranks; r++)
                done &= __atomic_load_n((uint64_t *)(void *)(segbase + flags + 8 * (size_t)r),
                                        __ATOMIC_ACQUIRE) == 1;
        }
        CHECKF(done,
               "gets and puts on a rank computing without MPI calls were not served in "
               "20 s (%s)",
               serving ? "its progress thread serves" : "the probe said MPI needs no serving");
    } else {
        unsigned char *buf = dt_alloc(bytes);
        for (int k = 0; k < 8; k++) {
            size_t toff = (size_t)k * pg + (size_t)rank * 8;
            size_t n = bytes - toff;
            CHECK_OK(ovl_get(buf, 0, toff, n, seg, NULL, NULL));
            size_t bad = th_verify(buf, n, SEGKEY(0), toff);
            CHECKF(bad == TH_OK, "get %d from a computing rank 0: byte %zu wrong", k, bad);
        }
        uint64_t one = 1;
        memcpy(buf, &one, 8);
        CHECK_OK(ovl_put(buf, 0, flags + 8 * (size_t)rank, 8, seg, NULL));
        CHECK_OK(ovl_fence(seg)); /* complete at rank 0 */
        dt_free(buf, bytes);
    }
    CHECK_OK(ovl_barrier());
    if (!serving) { /* an idle segment costs no wake-ups */
        ovl_stats_t a = dt_stats();
        th_sleep_ms(300);
        ovl_stats_t b = dt_stats();
        unsigned long long w = (unsigned long long)(b.thread_wakeups - a.thread_wakeups);
        CHECKF(w <= 10, "%llu wake-ups in 0.3 s for an idle segment no rank needs served", w);
    }
    free_segment();
}

/* What blocking get/put calls return inside a continuation (they would
 * wait there for something only this thread can drive). The callback
 * starts a get (which does not block), so a wait for it is certain. */
struct in_cb {
    unsigned char *buf;
    int peer, ran;
    int get, need, fence, put, barrier, lock, create, segfree;
};

static void rma_in_callback(const ovl_status_t *st, void *arg)
{
    struct in_cb *c = arg;
    (void)st;
    void *b = NULL;
    ovl_segment_t s2 = seg;
    c->get = ovl_get(c->buf, c->peer, 0, 3 * dt_page(), seg, NULL, NULL);
    c->need = ovl_get_need(c->buf, 3 * dt_page());
    c->fence = ovl_fence(seg);
    c->put = ovl_put(c->buf, c->peer, 0, 3 * dt_page(), seg, NULL);
    c->barrier = ovl_barrier();
    c->lock = ovl_lock(seg, c->peer);
    c->create = ovl_segment_create(64, &b, &s2);
    c->segfree = ovl_segment_free(&s2);
    c->ran = 1;
}

/* Segment creation fails on every rank when it fails on one (a too-large
 * request, a NULL pointer): none returns early while the others wait in a
 * collective. @bad: this rank's part fails; @code: what it returns. */
static void create_fails(int bad, int null_base)
{
    void *b = (void *)1;
    ovl_segment_t s2 = (ovl_segment_t)(uintptr_t)7;
    size_t bytes = bad && !null_base ? (size_t)1 << 47 : 4096;
    int rc = ovl_segment_create(bytes, bad && null_base ? NULL : &b, &s2);
    EXPECT_ERR(rc, OVL_ERR_ARG);
    CHECK(b == (void *)1 && s2 == (ovl_segment_t)(uintptr_t)7); /* outputs untouched */
    if (!bad)
        CHECKF(strstr(ovl_error_detail(), "rank") != NULL, "detail: %s", ovl_error_detail());
}

static void phase_errors(void)
{
    dt_phase("errors", 60);
    /* (run alone: before any segment, so the first one's communicator is
     * made, and kept, by a creation that fails) */
    create_fails(rank == nranks - 1, 0);
    new_segment(4096 + rank); /* sizes differ between ranks */
    int peer = (rank + 1) % nranks;
    size_t psz = 4096 + (size_t)peer;
    unsigned char *b = dt_alloc(3 * 4096);
    EXPECT_ERR(ovl_get(b, nranks, 0, 8, seg, NULL, NULL), OVL_ERR_RANK);
    EXPECT_ERR(ovl_get(b, -5, 0, 8, seg, NULL, NULL), OVL_ERR_RANK);
    EXPECT_ERR(ovl_put(b, nranks, 0, 8, seg, NULL), OVL_ERR_RANK);
    /* MPI_PROC_NULL: nothing moves, whatever the range; dst untouched */
    memset(b, 0x5c, 4096);
    CHECK_OK(ovl_get(b, MPI_PROC_NULL, 0, 4096, seg, NULL, NULL));
    CHECK_OK(ovl_put(b, MPI_PROC_NULL, 1u << 30, 8, seg, NULL));
    ovl_request_t pr;
    ovl_status_t pst;
    CHECK_OK(ovl_get(b, MPI_PROC_NULL, 0, 4096, seg, NULL, &pr));
    CHECK_OK(ovl_wait(&pr, &pst));
    CHECK(pst.source == MPI_PROC_NULL && pst.error == OVL_SUCCESS);
    CHECK_OK(ovl_fence(seg));
    for (int i = 0; i < 4096; i++)
        CHECKF(b[i] == 0x5c, "ovl_get from MPI_PROC_NULL wrote byte %d", i);
    EXPECT_ERR(ovl_get(b, peer, psz - 7, 8, seg, NULL, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_get(b, peer, psz + 1, 0, seg, NULL, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_get(b, peer, (size_t)-1, 8, seg, NULL, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_put(b, peer, 0, psz + 1, seg, NULL), OVL_ERR_ARG);
    CHECK_OK(ovl_get(b, peer, psz - 8, 8, seg, NULL, NULL)); /* the last bytes are fine */
    CHECK_OK(ovl_get_need(b, 8));
    CHECKF(th_verify(b, 8, SEGKEY(peer), psz - 8) == TH_OK, "got %02x%02x%02x%02x want %02x%02x",
           b[0], b[1], b[2], b[3], th_pattern_byte(SEGKEY(peer), psz - 8),
           th_pattern_byte(SEGKEY(peer), psz - 7));
    EXPECT_ERR(ovl_get(NULL, peer, 0, 8, seg, NULL, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_put(NULL, peer, 0, 8, seg, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_get(b, peer, 0, 8, OVL_SEGMENT_NULL, NULL, NULL), OVL_ERR_ARG);
    /* optional parameters: gets and puts take no field yet, a hint only
     * its three; any other bit is refused and named, nothing changes */
    ovl_request_t untouched = DT_SENTINEL;
    EXPECT_ERR(ovl_get(b, peer, 0, 8, seg, TH_MONITOR(OVL_MONITOR_AUTO), &untouched), OVL_ERR_ARG);
    CHECKF(untouched == DT_SENTINEL &&
               strstr(ovl_error_detail(), "sets OVL_PARAM_FIELD_MONITOR, which this call does "
                                          "not take (it takes: none)"),
           "%s", ovl_error_detail());
    EXPECT_ERR(ovl_get(b, peer, 0, 8, seg, &(ovl_param_t){ .field_mask = 1ull << 33 }, NULL),
               OVL_ERR_ARG);
    CHECKF(strstr(ovl_error_detail(), "bit 33, which no OVL_PARAM_FIELD_* names") != NULL, "%s",
           ovl_error_detail());
    EXPECT_ERR(ovl_put(b, peer, 0, 8, seg, TH_DECOMP(0)), OVL_ERR_ARG);
    EXPECT_ERR(ovl_segment_hint(seg, TH_COUNT(1)), OVL_ERR_ARG);
    CHECKF(strstr(ovl_error_detail(), "OVL_PARAM_FIELD_DECOMP, OVL_PARAM_FIELD_ORDER, "
                                      "OVL_PARAM_FIELD_PIGGYBACK") != NULL,
           "%s", ovl_error_detail());
    /* all or nothing: a bad value leaves the hints as they were */
    EXPECT_ERR(ovl_segment_hint(seg, &(ovl_param_t){ .field_mask = OVL_PARAM_FIELD_DECOMP |
                                                                   OVL_PARAM_FIELD_ORDER,
                                                     .decomp = 0,
                                                     .order = (ovl_order_t)9 }),
               OVL_ERR_ARG);
    CHECK_OK(ovl_segment_hint(seg, NULL)); /* changes nothing */
    EXPECT_ERR(ovl_segment_hint(OVL_SEGMENT_NULL, TH_DECOMP(1)), OVL_ERR_ARG);
    EXPECT_ERR(ovl_segment_hint(seg, &(ovl_param_t){ .field_mask = 1ull << 5 }), OVL_ERR_ARG);
    /* the statistics: the caller's size decides what is written */
    {
        ovl_stats_t st;
        memset(&st, 0xab, sizeof st);
        CHECK_OK(ovl_stats_get(&st, offsetof(ovl_stats_t, thread_wakeups)));
        const unsigned char *u = (const unsigned char *)&st;
        for (size_t i = offsetof(ovl_stats_t, thread_wakeups); i < sizeof st; i++)
            CHECKF(u[i] == 0xab, "ovl_stats_get wrote byte %zu past the size given", i);
        struct {
            ovl_stats_t st;
            uint64_t later[4]; /* counters of a newer ovl.h */
        } big;
        memset(&big, 0xab, sizeof big);
        CHECK_OK(ovl_stats_get(&big.st, sizeof big));
        for (int i = 0; i < 4; i++)
            CHECKF(big.later[i] == 0, "a counter this library does not know is %llx",
                   (unsigned long long)big.later[i]);
        CHECK(big.st.polls >= st.polls && big.st.rma_transfers > 0);
        EXPECT_ERR(ovl_stats_get(&st, 0), OVL_ERR_ARG);
        EXPECT_ERR(ovl_stats_get(NULL, sizeof st), OVL_ERR_ARG);
    }
    EXPECT_ERR(ovl_get_need(NULL, 8), OVL_ERR_ARG);
    EXPECT_ERR(ovl_fence(OVL_SEGMENT_NULL), OVL_ERR_ARG);
    /* overlapping outstanding gets into one destination */
    CHECK_OK(ovl_get(b + 10, peer, 0, 4000, seg, NULL, NULL));
    /* (the progress thread may have completed the first one already) */
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    int rc = ovl_get(b + 3000, peer, 0, 2000, seg, NULL, NULL);
    if (cfg.progress.mode == OVL_PROGRESS_INLINE || rc != OVL_SUCCESS) {
        EXPECT_ERR(rc, OVL_ERR_ARG);
        CHECK(strstr(ovl_error_detail(), "overlaps") != NULL);
    } else {
        use_up(b + 3000, 2000, SEGKEY(peer), 0);
        CHECK_OK(ovl_fence(seg));
        CHECK_OK(ovl_get(b + 10, peer, 0, 4000, seg, NULL, NULL));
    }
    CHECK_OK(ovl_get(b + 4010, peer, 0, 100, seg, NULL, NULL)); /* shares a page, not bytes */
    use_up(b + 10, 4000, SEGKEY(peer), 0);
    use_up(b + 4010, 100, SEGKEY(peer), 0);
    CHECK_OK(ovl_fence(seg));
    /* stack buffers cannot be guarded by fault monitors */
    unsigned char st[64];
    if (!explicit_mon) {
        EXPECT_ERR(ovl_get(st, peer, 0, sizeof st, seg, NULL, NULL), OVL_ERR_ARG);
        CHECK(strstr(ovl_error_detail(), "stack") != NULL);
    } else {
        CHECK_OK(ovl_get(st, peer, 0, sizeof st, seg, NULL, NULL));
        CHECK_OK(ovl_get_need(st, sizeof st));
        CHECK(th_verify(st, sizeof st, SEGKEY(peer), 0) == TH_OK);
    }
    /* shared memory cannot be guarded either (its pages stay in the page
     * cache, /proc/self/mem will not write them): a clear error, the buffer
     * untouched; explicit works. Whole pages, an edge page only, and with
     * an order hint (lazy protection under mprotect). */
    size_t shn = 3 * dt_page();
    unsigned char *sh = mmap(NULL, shn, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    for (int k = 0; k < 3; k++) {
        unsigned char *d = k == 1 ? sh + 100 : sh;
        size_t n = k == 1 ? 200 : psz; /* psz: at least one whole page */
        memset(sh, 0x7e, shn);
        if (k == 2)
            CHECK_OK(ovl_segment_hint(seg, TH_ORDER(OVL_ORDER_UP)));
        if (!explicit_mon) {
            EXPECT_ERR(ovl_get(d, peer, 0, n, seg, NULL, NULL), OVL_ERR_MONITOR);
            CHECKF(strstr(ovl_error_detail(), "shared memory") != NULL, "case %d: %s", k,
                   ovl_error_detail());
            for (size_t i = 0; i < shn; i++)
                CHECKF(sh[i] == 0x7e, "case %d: byte %zu changed", k, i);
            sh[0] = 1; /* and it is not left guarded */
        } else {
            CHECK_OK(ovl_get(d, peer, 0, n, seg, NULL, NULL));
            CHECK_OK(ovl_get_need(d, n));
            CHECK(th_verify(d, n, SEGKEY(peer), 0) == TH_OK);
        }
        if (k == 2)
            CHECK_OK(ovl_segment_hint(seg, TH_ORDER(OVL_ORDER_RANDOM)));
    }
    CHECK_OK(ovl_fence(seg));
    munmap(sh, shn);
    /* puts from the stack are copied: fine with every monitor */
    th_fill(st, sizeof st, 0x51, 0);
    CHECK_OK(ovl_put(st, peer, 0, sizeof st, seg, NULL));
    CHECK_OK(ovl_fence(seg));
    /* lock misuse */
    EXPECT_ERR(ovl_unlock(seg, peer), OVL_ERR_ARG);
    CHECK_OK(ovl_lock(seg, peer));
    EXPECT_ERR(ovl_lock(seg, peer), OVL_ERR_BUSY);
    CHECK_OK(ovl_unlock(seg, peer));
    EXPECT_ERR(ovl_lock(seg, nranks), OVL_ERR_RANK);
    /* freed segment */
    ovl_segment_t old = seg;
    free_segment();
    EXPECT_ERR(ovl_get(b, peer, 0, 8, old, NULL, NULL), OVL_ERR_ARG);
    CHECK(strstr(ovl_error_detail(), "freed") != NULL);
    EXPECT_ERR(ovl_put(b, peer, 0, 8, old, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_segment_free(&old), OVL_ERR_ARG);
    EXPECT_ERR(ovl_segment_free(NULL), OVL_ERR_ARG);
    void *base = NULL;
    EXPECT_ERR(ovl_segment_create(8, NULL, &seg), OVL_ERR_ARG);
    EXPECT_ERR(ovl_segment_create(8, &base, NULL), OVL_ERR_ARG);
    /* a failure on one rank is an error on every rank (none hangs): too
     * large (above 2^46 bytes, ovl.h) everywhere, then on the last rank
     * only, a NULL pointer on rank 0 only; then creation works again */
    create_fails(1, 0);
    create_fails(rank == nranks - 1, 0);
    create_fails(rank == 0, 1);
    new_segment(4096);
    free_segment();
    /* at most 256 segments at once (ovl.h): the 257th fails on every rank
     * (with 2 ranks and inline progress only: more ranks share the 2 cores
     * of the test machine, and each of the thousand collectives then waits
     * for time slices, 20 s in all; 1-5 s under ASan even so) */
    ovl_config_t lc;
    CHECK_OK(ovl_config_get(&lc));
    if (nranks == 2 && lc.progress.mode == OVL_PROGRESS_INLINE) {
        enum { LIMIT = 256 };
        static ovl_segment_t many[LIMIT];
        for (int i = 0; i < LIMIT; i++)
            CHECK_OK(ovl_segment_create(64, &base, &many[i]));
        ovl_segment_t extra = OVL_SEGMENT_NULL;
        EXPECT_ERR(ovl_segment_create(64, &base, &extra), OVL_ERR_NOMEM);
        CHECK(extra == OVL_SEGMENT_NULL);
        for (int i = LIMIT; i-- > 0;)
            CHECK_OK(ovl_segment_free(&many[i]));
    }
    /* inside a continuation, calls that would wait are refused
     * (OVL_ERR_IN_CALLBACK); ovl_get does not wait and is not */
    new_segment(4 * 4096);
    {
        struct in_cb c = { .buf = dt_alloc(3 * dt_page()), .peer = peer };
        ovl_request_t q = OVL_REQUEST_NULL;
        CHECK_OK(ovl_get(c.buf, peer, 0, 0, seg, NULL, &q)); /* complete at once */
        CHECK_OK(ovl_continue(q, rma_in_callback, &c));
        CHECK_OK(ovl_wait(&q, NULL)); /* the callback runs in here */
        CHECK(c.ran);
        CHECK_OK(c.get);
        EXPECT_ERR(c.need, OVL_ERR_IN_CALLBACK);
        EXPECT_ERR(c.fence, OVL_ERR_IN_CALLBACK);
        EXPECT_ERR(c.put, OVL_ERR_IN_CALLBACK);
        EXPECT_ERR(c.barrier, OVL_ERR_IN_CALLBACK);
        EXPECT_ERR(c.lock, OVL_ERR_IN_CALLBACK);
        EXPECT_ERR(c.create, OVL_ERR_IN_CALLBACK);
        EXPECT_ERR(c.segfree, OVL_ERR_IN_CALLBACK);
        use_up(c.buf, 3 * dt_page(), SEGKEY(peer), 0);
        CHECK_OK(ovl_fence(seg));
        dt_free(c.buf, 3 * dt_page());
    }
    free_segment();
    /* zero-byte segment on every rank but 0: a get from one is refused */
    CHECK_OK(ovl_segment_create(rank == 0 ? 64 : 0, &base, &seg));
    CHECK((rank == 0) == (base != NULL));
    if (rank == 0)
        th_fill(base, 64, SEGKEY(0), 0);
    CHECK_OK(ovl_barrier());
    EXPECT_ERR(ovl_get(b, nranks - 1, 0, 1, seg, NULL, NULL), OVL_ERR_ARG);
    CHECK_OK(ovl_get(b, nranks - 1, 0, 0, seg, NULL, NULL));
    dt_free(b, 3 * 4096);
    /* left for ovl_finalize, with a get outstanding (its buffer stays) */
    static unsigned char *keep;
    keep = dt_alloc(4096);
    CHECK_OK(ovl_get(keep + 1, 0, 0, 64, seg, NULL, NULL));
    CHECK_OK(ovl_finalize());
    /* after ovl_finalize (as before ovl_init): OVL_ERR_NOT_INIT */
    ovl_request_t q = OVL_REQUEST_NULL;
    size_t thr = 0;
    EXPECT_ERR(ovl_get(keep, 0, 0, 8, seg, NULL, NULL), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_get(keep, 0, 0, 8, seg, NULL, &q), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_get(keep, 0, 0, 8, seg, NULL, NULL), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_put(keep, 0, 0, 8, seg, NULL), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_get_need(keep, 8), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_fence(seg), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_barrier(), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_lock(seg, 0), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_unlock(seg, 0), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_segment_create(64, &base, &seg), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_segment_free(&seg), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_segment_hint(seg, TH_DECOMP(1)), OVL_ERR_NOT_INIT);
    EXPECT_ERR(ovl_model_split_threshold(&thr), OVL_ERR_NOT_INIT);
    CHECK(q == OVL_REQUEST_NULL);
    CHECK(keep[1] == th_pattern_byte(SEGKEY(0), 0)); /* retired by ovl_finalize */
}

int main(int argc, char **argv)
{
    dt_init(&argc, &argv, "test_rma", NULL);
    rank = th_rank;
    nranks = th_size;
    explicit_mon = dt_monitor() == OVL_MONITOR_EXPLICIT;
    const char *what = argc > 1 ? argv[1] : "all";
    int all = strcmp(what, "all") == 0;
    if (!strcmp(what, "sizes"))
        phase_sizes();
    if (all || !strcmp(what, "orders"))
        phase_orders();
    if (all || !strcmp(what, "reuse"))
        phase_reuse();
    if (all || !strcmp(what, "many"))
        phase_many();
    if (all || !strcmp(what, "put"))
        phase_put();
    if (all || !strcmp(what, "sync"))
        phase_sync();
    if (all || !strcmp(what, "hints"))
        phase_hints();
    if (all || !strcmp(what, "errors"))
        phase_errors();
    if (!strcmp(what, "local"))
        phase_local();
    if (!strcmp(what, "serve"))
        phase_serve(argc > 2 ? argv[2] : NULL);
    return dt_finish();
}
