/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_maps: delta send/receive and ovl_get when the process has
 * almost no memory mappings left (vm.max_map_count). The mprotect monitor
 * splits mappings; near the limit ovl must either still work (coarser
 * protection) or refuse the call with OVL_ERR_MONITOR (or OVL_ERR_NOMEM for
 * a staging buffer) naming max_map_count, and never crash, hang or deliver
 * wrong bytes.
 *
 * For each slack (mappings left free: 256, 16, 4, 1, 0), every rank fills
 * its map count up to the limit minus the slack (a block of pages with
 * alternating protections), then:
 *  - delta: the even rank delta-sends 1 MiB written in order (no calls),
 *    the odd rank delta-receives it and reads pages in a random order at
 *    once. A side whose post was refused tells the other (plain MPI), which
 *    then pairs with a plain ovl_isend / ovl_irecv instead, so nobody
 *    waits for a message that will never come. Data checked byte for byte.
 *  - get: each rank gets 1 MiB of its peer's segment and reads it in a
 *    random order (every page guarded, strips arriving in any order).
 * The filler is released after each slack. Under ASan or TSan 256 more
 * mappings are left free: the sanitizer's runtime maps memory as the program
 * runs (stack depot, shadow), and fails with its own error when none is
 * left, before ovl is reached; the limit itself is tested in the plain build.
 */
#include "delta_common.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static int peer;

struct filler {
    char *p;
    size_t len;
};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZER_RESERVE 256
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZER_RESERVE 256
#endif
#endif
#ifndef SANITIZER_RESERVE
#define SANITIZER_RESERVE 0
#endif
/* Open MPI's runtime maps memory on its own threads as the job runs: at
 * slack 0 its progress thread took the last mappings first (a receive's
 * piece buffer then failed with OVL_ERR_NOMEM, and Open MPI itself printed
 * "out of dynamic memory in opal_show_help_yylex()"), so 16 stay free for
 * it. MPICH's runtime maps nothing there: the limit itself is tested under
 * MPICH. */
#ifdef OMPI_MAJOR_VERSION
#define MPI_RUNTIME_RESERVE 16
#else
#define MPI_RUNTIME_RESERVE 0
#endif

/* Leave about @slack mappings free: a block whose pages alternate between
 * read-write and read-only, one mapping each. */
static struct filler fill_maps(long limit, long slack)
{
    struct filler fl = { NULL, 0 };
    long want = limit - dt_map_count() - slack - SANITIZER_RESERVE - MPI_RUNTIME_RESERVE;
    if (want < 2)
        return fl;
    size_t pg = dt_page();
    fl.len = (size_t)want * pg;
    fl.p = mmap(NULL, fl.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(fl.p != MAP_FAILED);
    for (long i = 1; i < want; i += 2)
        if (mprotect(fl.p + (size_t)i * pg, pg, PROT_READ) != 0)
            break; /* the limit came sooner (other mappings appeared) */
    return fl;
}

/* OVL_ERR_MONITOR is an allowed answer near the limit, if it says why; so is
 * OVL_ERR_NOMEM for a staging buffer that could not be mapped. */
static int refused(int rc, const char *what)
{
    if (rc == OVL_SUCCESS)
        return 0;
    CHECKF(rc == OVL_ERR_MONITOR || rc == OVL_ERR_NOMEM, "%s: %s (%s)", what, th_code_name(rc),
           ovl_error_detail());
    CHECKF(strstr(ovl_error_detail(), "max_map_count") != NULL,
           "%s: the error does not say why: %s", what, ovl_error_detail());
    return 1;
}

static void delta_round(long slack, unsigned char *buf, size_t n, unsigned char *spare, int *nref)
{
    int even = th_rank % 2 == 0;
    uint64_t key = 0x3a90 + (uint64_t)slack;
    th_rng_t rng;
    th_rng_init(&rng, 0x3a91, (uint64_t)th_rank, (uint64_t)slack);
    ovl_request_t req = OVL_REQUEST_NULL;
    ovl_status_t st;
    int mine_ok, peer_ok;
    if (even) {
        mine_ok = !refused(ovl_delta_send_begin(buf, (int)n, MPI_BYTE, peer, 7, NULL, &req),
                           "ovl_delta_send_begin");
    } else {
        memset(buf, 0, n);
        mine_ok =
            !refused(ovl_delta_recv(buf, (int)n, MPI_BYTE, peer, 7, NULL, &req), "ovl_delta_recv");
    }
    *nref += !mine_ok;
    CHECK(MPI_Sendrecv(&mine_ok, 1, MPI_INT, peer, 70, &peer_ok, 1, MPI_INT, peer, 70,
                       MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    if (even) {
        if (mine_ok) {
            dt_produce(req, buf, n, key, DT_PROD_PLAIN, &rng);
            CHECK_OK(ovl_wait(&req, &st));
            CHECKF(st.error == OVL_SUCCESS && st.bytes == n, "send status {%d, %zu}", st.error,
                   st.bytes);
        } else if (peer_ok) { /* the receiver waits for a message: a plain one */
            th_fill(spare, n, key, 0);
            CHECK_OK(ovl_isend(spare, (int)n, MPI_BYTE, peer, 7, &req));
            CHECK_OK(ovl_wait(&req, &st));
        }
    } else {
        if (mine_ok) {
            dt_use(req, 0, buf, n, key, &rng);
            CHECK_OK(ovl_wait(&req, &st));
            CHECKF(st.error == OVL_SUCCESS && st.bytes == n, "receive status {%d, %zu}", st.error,
                   st.bytes);
            size_t bad = dt_check_used(buf, n, key);
            CHECKF(bad == TH_OK, "slack %ld: byte %zu wrong", slack, bad);
        } else if (peer_ok) { /* drain the delta message with a plain receive */
            CHECK_OK(ovl_irecv(spare, (int)n, MPI_BYTE, peer, 7, &req));
            CHECK_OK(ovl_wait(&req, &st));
            CHECK(st.bytes == n && th_verify(spare, n, key, 0) == TH_OK);
        }
    }
}

static void get_round(long slack, ovl_segment_t seg, unsigned char *buf, size_t n, int *nref)
{
    th_rng_t rng;
    th_rng_init(&rng, 0x3a92, (uint64_t)th_rank, (uint64_t)slack);
    int rc = ovl_get(buf, peer, 0, n, seg, NULL, NULL);
    if (refused(rc, "ovl_get")) {
        (*nref)++;
        return;
    }
    size_t pg = dt_page(), np = n / pg;
    size_t *order = dt_perm(np, &rng);
    for (size_t k = 0; k < np; k++) {
        size_t off = order[k] * pg;
        size_t bad = th_verify(buf + off, pg, 0x5e90 + (uint64_t)peer, off);
        CHECKF(bad == TH_OK, "slack %ld: get byte %zu wrong", slack, off + bad);
    }
    free(order);
    CHECK_OK(ovl_fence(seg));
}

int main(int argc, char **argv)
{
    dt_init(&argc, &argv, "test_delta_maps", NULL);
    peer = th_rank ^ 1;
    CHECKF(peer < th_size, "test_delta_maps needs an even number of ranks");
    long limit = dt_map_limit();
    if (limit <= 0 || limit > 1000000) {
        if (th_rank == 0)
            printf("test_delta_maps: vm.max_map_count unreadable or huge (%ld): skipped\n", limit);
        MPI_Barrier(MPI_COMM_WORLD);
        dt_finish();
        return 77;
    }
    const size_t n = (size_t)1 << 20;
    /* everything allocated before the map count is filled */
    unsigned char *buf = dt_alloc(n), *gbuf = dt_alloc(n), *spare = dt_alloc(n);
    void *base = NULL;
    ovl_segment_t seg;
    CHECK_OK(ovl_segment_create(n, &base, &seg));
    th_fill(base, n, 0x5e90 + (uint64_t)th_rank, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    static const long slacks[] = { 256, 16, 4, 1, 0 };
    int nref = 0;
    for (size_t s = 0; s < sizeof slacks / sizeof *slacks; s++) {
        dt_phase("delta and get near vm.max_map_count", 60);
        struct filler fl = fill_maps(limit, slacks[s]);
        if (th_rank == 0)
            printf("test_delta_maps: slack %ld: %ld of %ld mappings in use\n", slacks[s],
                   dt_map_count(), limit);
        delta_round(slacks[s], buf, n, spare, &nref);
        get_round(slacks[s], seg, gbuf, n, &nref);
        if (fl.p)
            munmap(fl.p, fl.len);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (th_rank == 0)
        printf("test_delta_maps: limit %ld, %d call(s) refused with OVL_ERR_MONITOR on rank 0\n",
               limit, nref);
    CHECK_OK(ovl_segment_free(&seg));
    dt_free(buf, n);
    dt_free(gbuf, n);
    dt_free(spare, n);
    return dt_finish();
}
