/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_rma: one-sided get/put on segments (ovl_get, ovl_put, HUNT). Every
 * rank fills its segment with pattern key SEGKEY(rank); data read from a
 * segment is checked byte for byte against that pattern at the target
 * offset. Phases (argv[1] picks one; "all" runs every phase but sizes):
 *  - sizes:   gets of 1, 7, 4095, 4096, 4097, 65537, 1 MiB + 3 bytes at
 *             destination offsets 0, 1 and page - 3 inside pages whose other
 *             bytes are sentinels (checked), and one of 64 MiB; the data is
 *             used at once, without any wait call (explicit monitor:
 *             ovl_get_need first);
 *  - orders:  a split get read upwards, downwards (ovl_hint_order DOWN) and
 *             in random page order with writes (RANDOM); ovl_get_nb's
 *             request completes and the rest is demand-driven;
 *  - many:    16 outstanding gets from every other rank, used in a random
 *             order; then a train under ovl_hint_piggyback(2) used in issue
 *             order;
 *  - put:     puts (unaligned, 1 MiB + 3; 100 bytes) whose source is
 *             rewritten immediately: the target sees the old values after
 *             ovl_fence + ovl_barrier, the source holds the new ones;
 *  - sync:    a counter on rank 0 incremented under ovl_lock by every rank
 *             (get, need, put, unlock) ends at size * iterations, the lock's
 *             ticket counters crossing their wrap (white-box); a put
 *             retired by ovl_barrier alone is visible to its target;
 *  - hints:   (4 MiB gets) ovl_hint_decomp(0) never splits, a large factor splits into
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
 *             no split, ovl_get_nb's request already complete; targets on
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
 *             buffer under a fault monitor, bad hints, lock misuse; a
 *             segment left for ovl_finalize to free.
 */
#include "delta_common.h"
#include "ovl_internal.h" /* white-box: the engine's counts (phase hints) */

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

/* ---- phases ---------------------------------------------------------------- */

static void phase_sizes(void)
{
    dt_phase("sizes", 120);
    size_t pg = dt_page();
    const size_t sizes[] = { 1, 7, 4095, 4096, 4097, 65537, MiB + 3, 64 * MiB };
    const size_t nsz = sizeof sizes / sizeof sizes[0];
    new_segment(64 * MiB + 64);
    int peer = (rank + 1) % nranks;
    for (size_t i = 0; i < nsz; i++) {
        size_t offs[3] = { 0, 1, pg - 3 };
        int noffs = sizes[i] >= 64 * MiB ? 1 : 3;
        for (int k = 0; k < noffs; k++) {
            size_t toff = (i * 7 + (size_t)k * 13) % 61;
            dt_region_t r;
            dt_region_alloc(&r, sizes[i], offs[k] + (sizes[i] >= 64 * MiB ? 5 : 0),
                            0xabc00 + i * 4 + (size_t)k);
            CHECK_OK(ovl_get(r.buf, peer, toff, sizes[i], seg));
            use_up(r.buf, sizes[i], SEGKEY(peer), toff);
            size_t bad = dt_sentinel_check(&r);
            CHECKF(bad == TH_OK, "sentinel byte %zu changed (size %zu, offset %zu)", bad, sizes[i],
                   r.off);
            CHECK_OK(ovl_fence(seg));
            CHECK(th_verify(r.buf, sizes[i], SEGKEY(peer), toff) == TH_OK);
            dt_region_free(&r);
        }
    }
    /* two gets whose buffers share their edge pages, used in reverse order */
    dt_region_t r;
    dt_region_alloc(&r, 3 * pg, 100, 0x5151);
    size_t a = pg + 50;
    CHECK_OK(ovl_get(r.buf, peer, 0, a, seg));
    CHECK_OK(ovl_get(r.buf + a, peer, 1000, 3 * pg - a, seg));
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
        CHECK_OK(ovl_get(r.buf, peer, toff, bytes, seg));
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
    for (int k = 0; k < 3; k++) {
        CHECK_OK(ovl_hint_order(ord[k]));
        dt_region_t r;
        dt_region_alloc(&r, n, 11 + (size_t)k, 0x0d0 + (uint64_t)k);
        size_t toff = 17 * (size_t)k;
        CHECK_OK(ovl_get(r.buf, peer, toff, n, seg));
        if (ord[k] == OVL_ORDER_UP)
            use_up(r.buf, n, SEGKEY(peer), toff);
        else if (ord[k] == OVL_ORDER_DOWN)
            use_down(r.buf, n, SEGKEY(peer), toff);
        else
            use_random(r.buf, n, SEGKEY(peer), toff);
        CHECK(dt_sentinel_check(&r) == TH_OK);
        CHECK_OK(ovl_fence(seg));
        dt_region_free(&r);
    }
    /* ovl_get_nb: a handle for the first strip (read upwards, lazily) */
    CHECK_OK(ovl_hint_order(OVL_ORDER_UP));
    dt_region_t r;
    dt_region_alloc(&r, n, 1, 0x0b0);
    ovl_request_t req = OVL_REQUEST_NULL;
    ovl_status_t st;
    CHECK_OK(ovl_get_nb(r.buf, peer, 3, n, seg, &req));
    CHECK(req != OVL_REQUEST_NULL);
    CHECK_OK(ovl_wait(&req, &st));
    CHECK(req == OVL_REQUEST_NULL);
    CHECKF(st.bytes > 0 && st.bytes <= n, "first strip %zu bytes", (size_t)st.bytes);
    CHECK(st.source == peer);
    use_up(r.buf, n, SEGKEY(peer), 3);
    CHECK(dt_sentinel_check(&r) == TH_OK);
    /* zero bytes: completes at once */
    CHECK_OK(ovl_get_nb(r.buf, peer, 0, 0, seg, &req));
    CHECK_OK(ovl_wait(&req, &st));
    CHECK_OK(ovl_fence(seg));
    CHECK_OK(ovl_hint_order(OVL_ORDER_RANDOM)); /* the default, for later phases */
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
    for (int i = 0; i < nget; i++) {
        src[i] = (rank + 1 + i % (nranks - 1)) % nranks;
        size_t n = 1 + th_size_log(g, 300000);
        toff[i] = (size_t)th_below(g, 2 * MiB - n);
        dt_region_alloc(&r[i], n, (size_t)th_below(g, dt_page()), 0x3a00 + (uint64_t)i);
        CHECK_OK(ovl_get(r[i].buf, src[i], toff[i], n, seg));
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
    for (int i = 0; i < nget; i++)
        dt_region_free(&r[i]);
    free(ord);

    /* a train: gets beyond the second outstanding one piggyback (read in
     * issue order, upwards: lazy protection on the guarded ones too) */
    CHECK_OK(ovl_hint_piggyback(2));
    CHECK_OK(ovl_hint_order(OVL_ORDER_UP));
    for (int i = 0; i < nget; i++) {
        size_t n = 4096 + th_size_log(g, 200000);
        toff[i] = (size_t)th_below(g, 2 * MiB - n);
        dt_region_alloc(&r[i], n, (size_t)th_below(g, dt_page()), 0x3b00 + (uint64_t)i);
        CHECK_OK(ovl_get(r[i].buf, src[i], toff[i], n, seg));
    }
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
    CHECK_OK(ovl_hint_piggyback(0));
    CHECK_OK(ovl_hint_order(OVL_ORDER_RANDOM));
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
    CHECK_OK(ovl_put(s.buf, peer, 0, n, seg));
    CHECK_OK(ovl_put(t.buf, peer, MiB + 64, small, seg));
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
    CHECK_OK(ovl_put(s.buf, peer, 0, n, seg));
    CHECK_OK(ovl_put(s.buf, from, 2 * MiB, n, seg));
    CHECK_OK(ovl_barrier());
    CHECK(th_verify(segbase, n, 0x9200 + (uint64_t)from, 0) == TH_OK);
    CHECK(th_verify(segbase + 2 * MiB, n, 0x9200 + (uint64_t)peer, 0) == TH_OK);
    /* a put from a get still arriving forwards the data that arrived */
    dt_region_t g;
    dt_region_alloc(&g, 200000, 9, 0x9500);
    CHECK_OK(ovl_barrier());
    th_fill(segbase + MiB, 200000, SEGKEY(rank), MiB);
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_get(g.buf, peer, MiB, 200000, seg));
    CHECK_OK(ovl_put(g.buf, peer, 0, 200000, seg));
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
        CHECK_OK(ovl_get(v, 0, 0, 8, seg));
        CHECK_OK(ovl_get_need(v, 8));
        uint64_t x = *v + 1;
        *v = x;
        CHECK_OK(ovl_put(v, 0, 0, 8, seg));
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
    CHECK_OK(ovl_put(b + 8, peer, 100, 3000, seg));
    CHECK_OK(ovl_barrier());
    CHECK(th_verify(segbase + 100, 3000, 0x7700 + (uint64_t)from, 0) == TH_OK);
    /* lock retires gets to that rank */
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_get(b, peer, 100, 3000, seg));
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
    CHECK_OK(ovl_hint_decomp(0));
    CHECK(ovl__engine_continuations() == 0);
    CHECK_OK(ovl_get(b, peer, 0, n, seg));
    /* Continuations are counted first: the count only falls as strips
     * complete, so a strip counted as one cannot hide behind a late look. */
    int conts = ovl__engine_continuations(), strips = ovl__engine_count(OVL__OP_RMA);
    CHECKF(conts == 0, "a get's strips count as %d waiting continuations", conts);
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    if (cfg.progress == OVL_PROGRESS_INLINE) /* nothing else drives: still in flight */
        CHECKF(strips == 1, "%d strips of the unsplit get in flight", strips);
    use_up(b, n, SEGKEY(peer), 0);
    CHECK_OK(ovl_fence(seg));
    ovl_stats_t s1 = dt_stats();
    CHECK(s1.rma_transfers == s0.rma_transfers + 1);
    CHECK(s1.rma_strips == s0.rma_strips + 1);
    CHECK(s1.rma_split == s0.rma_split);
    CHECK(s1.rma_bytes == s0.rma_bytes + n);
    CHECK_OK(ovl_hint_decomp(16));
    CHECK_OK(ovl_get(b, peer, 0, n, seg));
    use_random(b, n, SEGKEY(peer), 0);
    CHECK_OK(ovl_fence(seg));
    ovl_stats_t s2 = dt_stats();
    CHECK(s2.rma_transfers == s1.rma_transfers + 1);
    CHECKF(s2.rma_split == s1.rma_split || s2.rma_strips >= s1.rma_strips + 16,
           "split into %llu strips", (unsigned long long)(s2.rma_strips - s1.rma_strips));
    if (rank == 0)
        printf("  4 MiB get with decomp 16: %llu strips\n",
               (unsigned long long)(s2.rma_strips - s1.rma_strips));
    CHECK_OK(ovl_hint_decomp(1));
    EXPECT_ERR(ovl_hint_decomp(65), OVL_ERR_ARG);
    EXPECT_ERR(ovl_hint_order((ovl_order_t)7), OVL_ERR_ARG);
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

/* OVL_RMA_LOCAL=direct (the default): a transfer with a target on this
 * node is complete when the call returns (read at once with no
 * ovl_get_need, even under the explicit monitor; no fault, no split; an
 * ovl_get_nb request already complete; a put's source rewritten at once
 * without waiting), while targets on other nodes (on the emulated cluster)
 * stay demand-driven in the same run. */
static void phase_local(void)
{
    dt_phase("local", 60);
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    CHECKF(cfg.rma_local == OVL_RMA_LOCAL_DIRECT, "run without OVL_RMA_LOCAL (got %d)",
           (int)cfg.rma_local);
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
            CHECK_OK(ovl_get(r.buf, peer, toff, n, seg));
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
        /* ovl_get_nb: complete at once on this node */
        dt_region_t r;
        dt_region_alloc(&r, MiB, 0, 0x10d00);
        ovl_request_t req = OVL_REQUEST_NULL;
        ovl_status_t st;
        CHECK_OK(ovl_get_nb(r.buf, peer, 64, MiB, seg, &req));
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
    CHECK_OK(ovl_get_split_threshold(&thr));
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
    CHECK_OK(ovl_put(p.buf, to, 32, n, seg));
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
    EXPECT_ERR(ovl_get(small, rank, 2 * MiB + 1, 64, seg), OVL_ERR_ARG);
    EXPECT_ERR(ovl_put(small, rank, 2 * MiB + 1, 64, seg), OVL_ERR_ARG);
    if (!explicit_mon)
        EXPECT_ERR(ovl_get(small, rank, 0, sizeof small, seg), OVL_ERR_ARG); /* on the stack */
    CHECK_OK(ovl_get(small, rank, 0, 0, seg));                               /* zero bytes */
    free_segment();
}

static int mpi_is_mpich(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(v, &n);
    return strstr(v, "MPICH") != NULL;
}

static void phase_serve(const char *expect)
{
    dt_phase("serve", 60);
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    if (cfg.progress != OVL_PROGRESS_THREAD) {
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
    if (getenv("OVL_POLL_SERVE_US"))
        CHECKF(serving, "OVL_POLL_SERVE_US is set, yet the rank does not serve");
    if (expect && !strcmp(expect, "on") && mpi_is_mpich()) /* over TCP or shared memory */
        CHECKF(serving, "the probe found serving unneeded where MPI needs it");
    if (expect && !strcmp(expect, "off"))
        CHECKF(!serving, "MPI progresses one-sided traffic itself here, yet the rank serves");
    /* every rank decided the same */
    int lo = 0, hi = 0;
    CHECK_MPI(MPI_Allreduce(&serving, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(&serving, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    CHECKF(lo == hi || getenv("OVL_POLL_SERVE_US"), "ranks disagree on serving (%d..%d)", lo, hi);

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
            CHECK_OK(ovl_get(buf, 0, toff, n, seg));
            size_t bad = th_verify(buf, n, SEGKEY(0), toff);
            CHECKF(bad == TH_OK, "get %d from a computing rank 0: byte %zu wrong", k, bad);
        }
        uint64_t one = 1;
        memcpy(buf, &one, 8);
        CHECK_OK(ovl_put(buf, 0, flags + 8 * (size_t)rank, 8, seg));
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

static void phase_errors(void)
{
    dt_phase("errors", 60);
    new_segment(4096 + rank); /* sizes differ between ranks */
    int peer = (rank + 1) % nranks;
    size_t psz = 4096 + (size_t)peer;
    unsigned char *b = dt_alloc(3 * 4096);
    EXPECT_ERR(ovl_get(b, nranks, 0, 8, seg), OVL_ERR_RANK);
    EXPECT_ERR(ovl_get(b, -1, 0, 8, seg), OVL_ERR_RANK);
    EXPECT_ERR(ovl_put(b, nranks, 0, 8, seg), OVL_ERR_RANK);
    EXPECT_ERR(ovl_get(b, peer, psz - 7, 8, seg), OVL_ERR_ARG);
    EXPECT_ERR(ovl_get(b, peer, psz + 1, 0, seg), OVL_ERR_ARG);
    EXPECT_ERR(ovl_get(b, peer, (size_t)-1, 8, seg), OVL_ERR_ARG);
    EXPECT_ERR(ovl_put(b, peer, 0, psz + 1, seg), OVL_ERR_ARG);
    CHECK_OK(ovl_get(b, peer, psz - 8, 8, seg)); /* the last bytes are fine */
    CHECK_OK(ovl_get_need(b, 8));
    CHECKF(th_verify(b, 8, SEGKEY(peer), psz - 8) == TH_OK, "got %02x%02x%02x%02x want %02x%02x",
           b[0], b[1], b[2], b[3], th_pattern_byte(SEGKEY(peer), psz - 8),
           th_pattern_byte(SEGKEY(peer), psz - 7));
    EXPECT_ERR(ovl_get(NULL, peer, 0, 8, seg), OVL_ERR_ARG);
    EXPECT_ERR(ovl_put(NULL, peer, 0, 8, seg), OVL_ERR_ARG);
    EXPECT_ERR(ovl_get(b, peer, 0, 8, OVL_SEGMENT_NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_get_nb(b, peer, 0, 8, seg, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_get_need(NULL, 8), OVL_ERR_ARG);
    EXPECT_ERR(ovl_fence(OVL_SEGMENT_NULL), OVL_ERR_ARG);
    /* overlapping outstanding gets into one destination */
    CHECK_OK(ovl_get(b + 10, peer, 0, 4000, seg));
    /* (the progress thread may have completed the first one already) */
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    int rc = ovl_get(b + 3000, peer, 0, 2000, seg);
    if (cfg.progress == OVL_PROGRESS_INLINE || rc != OVL_SUCCESS) {
        EXPECT_ERR(rc, OVL_ERR_ARG);
        CHECK(strstr(ovl_error_detail(), "overlaps") != NULL);
    } else {
        use_up(b + 3000, 2000, SEGKEY(peer), 0);
        CHECK_OK(ovl_fence(seg));
        CHECK_OK(ovl_get(b + 10, peer, 0, 4000, seg));
    }
    CHECK_OK(ovl_get(b + 4010, peer, 0, 100, seg)); /* shares a page, not bytes */
    use_up(b + 10, 4000, SEGKEY(peer), 0);
    use_up(b + 4010, 100, SEGKEY(peer), 0);
    CHECK_OK(ovl_fence(seg));
    /* stack buffers cannot be guarded by fault monitors */
    unsigned char st[64];
    if (!explicit_mon) {
        EXPECT_ERR(ovl_get(st, peer, 0, sizeof st, seg), OVL_ERR_ARG);
        CHECK(strstr(ovl_error_detail(), "stack") != NULL);
    } else {
        CHECK_OK(ovl_get(st, peer, 0, sizeof st, seg));
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
            CHECK_OK(ovl_hint_order(OVL_ORDER_UP));
        if (!explicit_mon) {
            EXPECT_ERR(ovl_get(d, peer, 0, n, seg), OVL_ERR_MONITOR);
            CHECKF(strstr(ovl_error_detail(), "shared memory") != NULL, "case %d: %s", k,
                   ovl_error_detail());
            for (size_t i = 0; i < shn; i++)
                CHECKF(sh[i] == 0x7e, "case %d: byte %zu changed", k, i);
            sh[0] = 1; /* and it is not left guarded */
        } else {
            CHECK_OK(ovl_get(d, peer, 0, n, seg));
            CHECK_OK(ovl_get_need(d, n));
            CHECK(th_verify(d, n, SEGKEY(peer), 0) == TH_OK);
        }
        if (k == 2)
            CHECK_OK(ovl_hint_order(OVL_ORDER_RANDOM));
    }
    CHECK_OK(ovl_fence(seg));
    munmap(sh, shn);
    /* puts from the stack are copied: fine with every monitor */
    th_fill(st, sizeof st, 0x51, 0);
    CHECK_OK(ovl_put(st, peer, 0, sizeof st, seg));
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
    EXPECT_ERR(ovl_get(b, peer, 0, 8, old), OVL_ERR_ARG);
    CHECK(strstr(ovl_error_detail(), "freed") != NULL);
    EXPECT_ERR(ovl_put(b, peer, 0, 8, old), OVL_ERR_ARG);
    EXPECT_ERR(ovl_segment_free(&old), OVL_ERR_ARG);
    EXPECT_ERR(ovl_segment_free(NULL), OVL_ERR_ARG);
    void *base = NULL;
    EXPECT_ERR(ovl_segment_create(8, NULL, &seg), OVL_ERR_ARG);
    EXPECT_ERR(ovl_segment_create(8, &base, NULL), OVL_ERR_ARG);
    /* zero-byte segment on every rank but 0: a get from one is refused */
    CHECK_OK(ovl_segment_create(rank == 0 ? 64 : 0, &base, &seg));
    CHECK((rank == 0) == (base != NULL));
    EXPECT_ERR(ovl_get(b, nranks - 1, 0, 1, seg), OVL_ERR_ARG);
    CHECK_OK(ovl_get(b, nranks - 1, 0, 0, seg));
    dt_free(b, 3 * 4096);
    /* left for ovl_finalize, with a get outstanding (its buffer stays) */
    static unsigned char *keep;
    keep = dt_alloc(4096);
    CHECK_OK(ovl_get(keep + 1, 0, 0, 64, seg));
    /* left for ovl_finalize, with a get outstanding */
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
