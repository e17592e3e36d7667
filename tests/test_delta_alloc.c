/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_alloc: memory from ovl_alloc (mapped twice: fault monitors
 * guard the program's mapping, data arrives through the second one). Pairs
 * of ranks (r, r^1); every byte and every sentinel checked.
 *  - errors: NULL baseptr, an impossible size, ovl_free of memory ovl did
 *    not allocate, of an inner pointer, twice; ovl_free(NULL); a 0-byte
 *    block is one zeroed, writable page; blocks are page-aligned;
 *  - sizes: delta transfers of 1 B to 8 MiB + 5 from ovl_alloc memory into
 *    ovl_alloc memory, at offsets 0, 1 and page - 3 of the receive block
 *    (its other bytes are sentinels, on the buffer's shared edge pages),
 *    the receive buffer used at once in random order; under a fault
 *    monitor ovl_free of a block with a pending receive is OVL_ERR_PENDING
 *    and leaves the block (the MAP_SHARED memory itself would be refused
 *    with OVL_ERR_MONITOR: this is the second mapping at work);
 *  - plain: ovl_isend into ovl_delta_recv (MPI receives into the second
 *    mapping), and a delta send into ovl_irecv, both in ovl_alloc memory;
 *  - get: ovl_get into ovl_alloc memory (1 B, unaligned 3 pages, 1 MiB + 3
 *    split into strips), used at once in random order.
 */
#include "delta_common.h"

#include <errno.h>

#define MiB ((size_t)1 << 20)

static int peer, sender, explicit_mon;

/* ovl_alloc as a dt_region_alloc_with mapper. */
static void *map_ovl(size_t len)
{
    void *p = NULL;
    CHECK_OK(ovl_alloc(len, &p));
    return p;
}

/* A receive region inside an ovl_alloc block (free with ovl_free(r.base)). */
static void region_alloc(dt_region_t *r, size_t bytes, size_t off, uint64_t skey)
{
    dt_region_alloc_with(r, bytes, off, skey, map_ovl);
}

static void phase_errors(void)
{
    dt_phase("errors", 30);
    size_t pg = dt_page();
    void *p = NULL;
    EXPECT_ERR(ovl_alloc(10, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_alloc(SIZE_MAX, &p), OVL_ERR_NOMEM);
    EXPECT_ERR(ovl_alloc(SIZE_MAX / 2, &p), OVL_ERR_NOMEM);
    CHECK(p == NULL);
    CHECK_OK(ovl_free(NULL));
    char *heap = malloc(64);
    CHECK(heap != NULL);
    EXPECT_ERR(ovl_free(heap), OVL_ERR_ARG);
    free(heap);
    unsigned char *z = NULL;
    CHECK_OK(ovl_alloc(0, &z));
    CHECK(z != NULL && (uintptr_t)z % pg == 0);
    for (size_t i = 0; i < pg; i++)
        CHECKF(z[i] == 0, "byte %zu of a fresh block is %#x", i, z[i]);
    memset(z, 0xa5, pg);
    EXPECT_ERR(ovl_free(z + 1), OVL_ERR_ARG);
    CHECK(z[pg - 1] == 0xa5); /* still mapped */
    CHECK_OK(ovl_free(z));
    EXPECT_ERR(ovl_free(z), OVL_ERR_ARG);
    /* many blocks at once, freed out of order */
    enum { N = 40 };
    unsigned char *v[N];
    for (int i = 0; i < N; i++) {
        CHECK_OK(ovl_alloc((size_t)i * 1000 + 1, &v[i]));
        th_fill(v[i], (size_t)i * 1000 + 1, 0xb10c + (uint64_t)i, 0);
    }
    for (int i = 0; i < N; i += 2)
        CHECK_OK(ovl_free(v[i]));
    for (int i = 1; i < N; i += 2) {
        CHECK(th_verify(v[i], (size_t)i * 1000 + 1, 0xb10c + (uint64_t)i, 0) == TH_OK);
        CHECK_OK(ovl_free(v[i]));
    }
}

static void one_transfer(size_t bytes, size_t off, int k, int check_pending)
{
    size_t pg = dt_page();
    uint64_t key = 0xa110c000 + (uint64_t)k;
    th_rng_t rng;
    th_rng_init(&rng, 0xa11, (uint64_t)th_rank, (uint64_t)k);
    ovl_request_t req;
    if (sender) {
        unsigned char *blk = NULL;
        size_t soff = (size_t)k * 7 % pg;
        CHECK_OK(ovl_alloc(soff + bytes, &blk));
        if (check_pending)
            MPI_Barrier(MPI_COMM_WORLD);
        CHECK_OK(ovl_delta_send_begin(blk + soff, (int)bytes, MPI_BYTE, peer, k, NULL, &req));
        dt_produce(req, blk + soff, bytes, key, explicit_mon ? DT_PROD_RANDOM : DT_PROD_PLAIN,
                   &rng);
        CHECK_OK(ovl_delta_send_end(req, NULL));
        CHECK_OK(ovl_wait(&req, NULL));
        CHECK(th_verify(blk + soff, bytes, key, 0) == TH_OK);
        CHECK_OK(ovl_free(blk));
        return;
    }
    dt_region_t r;
    region_alloc(&r, bytes, off, 0x5e7000 + (uint64_t)k);
    memset(r.buf, 0x3c, bytes);
    CHECK_OK(ovl_delta_recv(r.buf, (int)bytes, MPI_BYTE, peer, k, NULL, &req));
    if (check_pending) {
        /* nothing has been sent yet: the block is still pending */
        EXPECT_ERR(ovl_free(r.base), OVL_ERR_PENDING);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    dt_use(req, explicit_mon, r.buf, bytes, key, &rng);
    ovl_status_t st;
    CHECK_OK(ovl_wait(&req, &st));
    CHECKF(st.bytes == bytes, "status says %zu bytes, sent %zu", (size_t)st.bytes, bytes);
    size_t bad = dt_check_used(r.buf, bytes, key);
    CHECKF(bad == TH_OK, "byte %zu of %zu (offset %zu) wrong after use", bad, bytes, off);
    bad = dt_sentinel_check(&r);
    CHECKF(bad == TH_OK, "sentinel byte %zu changed (%zu bytes at offset %zu)", bad, bytes, off);
    CHECK_OK(ovl_free(r.base));
}

static void phase_sizes(void)
{
    dt_phase("sizes", 120);
    size_t pg = dt_page();
    const size_t sizes[] = { 1, 100, pg - 1, pg, pg + 1, 3 * pg + 17, MiB + 3, 8 * MiB + 5 };
    const size_t offs[] = { 0, 1, pg - 3 };
    int k = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (size_t j = 0; j < sizeof offs / sizeof *offs; j++, k++)
            one_transfer(sizes[i], offs[j], k, !explicit_mon && k == 10);
}

static void phase_plain(void)
{
    dt_phase("plain", 60);
    size_t bytes = 2 * MiB + 321;
    uint64_t key = 0x91a1;
    th_rng_t rng;
    th_rng_init(&rng, 0x91a, (uint64_t)th_rank, 0);
    if (sender) {
        unsigned char *a = NULL, *b = NULL;
        CHECK_OK(ovl_alloc(bytes, &a));
        CHECK_OK(ovl_alloc(bytes, &b));
        th_fill(a, bytes, key, 0);
        ovl_request_t r1, r2;
        CHECK_OK(ovl_isend(a, (int)bytes, MPI_BYTE, peer, 1, &r1));
        CHECK_OK(ovl_irecv(b, (int)bytes, MPI_BYTE, peer, 2, &r2));
        CHECK_OK(ovl_wait(&r1, NULL));
        CHECK_OK(ovl_wait(&r2, NULL));
        size_t bad = th_verify(b, bytes, key + 1, 0);
        CHECKF(bad == TH_OK, "ovl_irecv into ovl_alloc memory: byte %zu wrong", bad);
        CHECK_OK(ovl_free(a));
        CHECK_OK(ovl_free(b));
        return;
    }
    dt_region_t r;
    region_alloc(&r, bytes, 100, 0x91a5e);
    ovl_request_t rr, sr;
    CHECK_OK(ovl_delta_recv(r.buf, (int)bytes, MPI_BYTE, peer, 1, NULL, &rr));
    dt_use(rr, explicit_mon, r.buf, bytes, key, &rng);
    ovl_status_t st;
    CHECK_OK(ovl_wait(&rr, &st));
    CHECK(st.bytes == bytes);
    CHECK(dt_check_used(r.buf, bytes, key) == TH_OK);
    CHECK(dt_sentinel_check(&r) == TH_OK);
    unsigned char *s = NULL;
    CHECK_OK(ovl_alloc(bytes, &s));
    CHECK_OK(ovl_delta_send_begin(s, (int)bytes, MPI_BYTE, peer, 2, NULL, &sr));
    dt_produce(sr, s, bytes, key + 1, explicit_mon ? DT_PROD_RANDOM : DT_PROD_PLAIN, &rng);
    CHECK_OK(ovl_wait(&sr, NULL));
    CHECK_OK(ovl_free(s));
    CHECK_OK(ovl_free(r.base));
}

static void phase_get(void)
{
    dt_phase("get", 60);
    size_t pg = dt_page();
    size_t segbytes = 2 * MiB;
    ovl_segment_t seg;
    unsigned char *segbase = NULL;
    CHECK_OK(ovl_segment_create(segbytes, (void **)&segbase, &seg));
    th_fill(segbase, segbytes, 0x5e6 + (uint64_t)th_rank, 0);
    CHECK_OK(ovl_barrier());
    const size_t sizes[] = { 1, 3 * pg - 200, MiB + 3 };
    for (int k = 0; k < 3; k++) {
        size_t bytes = sizes[k], toff = (size_t)k * 4099;
        dt_region_t r;
        region_alloc(&r, bytes, k == 1 ? 100 : 0, 0x6e7000 + (uint64_t)k);
        CHECK_OK(ovl_get(r.buf, peer, toff, bytes, seg, NULL, NULL));
        if (explicit_mon)
            CHECK_OK(ovl_get_need(r.buf, bytes));
        th_rng_t rng;
        th_rng_init(&rng, 0x6e7, (uint64_t)th_rank, (uint64_t)k);
        size_t n = (bytes + pg - 1) / pg;
        size_t *order = dt_perm(n, &rng);
        for (size_t q = 0; q < n; q++) {
            size_t o = order[q] * pg, len = dt_min(pg, bytes - o);
            size_t bad = th_verify(r.buf + o, len, 0x5e6 + (uint64_t)peer, toff + o);
            CHECKF(bad == TH_OK, "get of %zu bytes: byte %zu wrong", bytes, o + bad);
        }
        free(order);
        CHECK_OK(ovl_fence(seg));
        CHECK(dt_sentinel_check(&r) == TH_OK);
        CHECK_OK(ovl_free(r.base));
    }
    CHECK_OK(ovl_segment_free(&seg));
}

int main(int argc, char **argv)
{
    dt_init(&argc, &argv, "test_delta_alloc", NULL);
    CHECKF(th_size % 2 == 0, "needs an even number of ranks, got %d", th_size);
    peer = th_rank ^ 1;
    sender = th_rank % 2 == 0;
    explicit_mon = dt_monitor() == OVL_MONITOR_EXPLICIT;
    phase_errors();
    phase_sizes();
    phase_plain();
    phase_get();
    return dt_finish();
}
