/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_chain: pipelines chained through several ranks (the paper's
 * cascading), with the process's monitor.
 *  - cascade: rank 0 computes x0[i] = i into a delta send to rank 1; rank
 *    k delta-receives x from k-1 and computes y[i] = x[i] + 1 into a new
 *    buffer it delta-sends to k+1, in one pass, with no extra calls (with a
 *    fault monitor; ovl_delta_need / ovl_delta_produced per strip in
 *    explicit mode); every rank checks x and y exactly;
 *  - forwarding along a chain: rank k delta-sends to k+1 the very buffer
 *    it is still delta-receiving from k-1 (send_end right away on odd
 *    ranks, after using the buffer on even ones), and uses the data too;
 *  - forwarding along a tree: rank 0 -> 1 -> {2, 3}: one buffer still
 *    arriving is forwarded to two ranks at once.
 * Every buffer is checked on every rank, sentinels around the forwarded
 * buffers too.
 */
#include "delta_common.h"

#define N_DOUBLES ((size_t)1 << 20) /* 8 MB */
#define STRIP     4096              /* doubles per strip in explicit mode */

static int explicit_mode;

static void cascade(void)
{
    int k = th_rank, last = th_size - 1;
    double *x = k > 0 ? dt_alloc(N_DOUBLES * sizeof(double)) : NULL;
    double *y = dt_alloc(N_DOUBLES * sizeof(double));
    CHECK(y && (k == 0 || x));
    ovl_request_t rr = OVL_REQUEST_NULL, sr = OVL_REQUEST_NULL;
    if (k > 0)
        CHECK_OK(ovl_delta_recv(x, (int)N_DOUBLES, MPI_DOUBLE, k - 1, 10, NULL, &rr));
    if (k < last)
        CHECK_OK(ovl_delta_send_begin(y, (int)N_DOUBLES, MPI_DOUBLE, k + 1, 10, NULL, &sr));
    /* the computation, in one pass */
    for (size_t s = 0; s < N_DOUBLES; s += STRIP) {
        size_t len = dt_min(STRIP, N_DOUBLES - s);
        if (k > 0 && explicit_mode)
            CHECK_OK(ovl_delta_need(rr, s * sizeof(double), len * sizeof(double)));
        for (size_t i = s; i < s + len; i++)
            y[i] = k == 0 ? (double)i : x[i] + 1.0;
        if (k < last && explicit_mode)
            CHECK_OK(ovl_delta_produced(sr, s * sizeof(double), len * sizeof(double)));
    }
    if (k < last)
        CHECK_OK(ovl_delta_send_end(sr, NULL));
    ovl_status_t st = { .error = 1 };
    if (k > 0) {
        CHECK_OK(ovl_wait(&rr, &st));
        CHECK(st.source == k - 1 && st.tag == 10 && st.bytes == N_DOUBLES * sizeof(double));
    }
    for (size_t i = 0; i < N_DOUBLES; i++) {
        if (k > 0)
            CHECKF(x[i] == (double)i + k - 1, "x[%zu] = %g, expected %g", i, x[i],
                   (double)i + k - 1);
        CHECKF(y[i] == (double)i + k, "y[%zu] = %g, expected %g", i, y[i], (double)i + k);
    }
    if (k < last) {
        CHECK_OK(ovl_wait(&sr, &st));
        CHECK(st.bytes == N_DOUBLES * sizeof(double) && st.error == OVL_SUCCESS);
    }
    if (x)
        dt_free(x, N_DOUBLES * sizeof(double));
    dt_free(y, N_DOUBLES * sizeof(double));
}

/* Forward buffer `r` (arriving from `from`, or produced here if from < 0)
 * to every rank in `to`. */
static void forward(int from, const int *to, int nto, int tag, uint64_t key, int end_at_once)
{
    size_t bytes = ((size_t)6 << 20) + 333;
    th_rng_t rng;
    th_rng_init(&rng, 0xf0, (uint64_t)th_rank, (uint64_t)tag);
    dt_region_t r;
    dt_region_alloc(&r, bytes, 123, key ^ 0xf00);
    ovl_request_t rr = OVL_REQUEST_NULL, sr[2] = { OVL_REQUEST_NULL, OVL_REQUEST_NULL };
    if (from >= 0)
        CHECK_OK(ovl_delta_recv(r.buf, (int)bytes, MPI_BYTE, from, tag, NULL, &rr));
    for (int j = 0; j < nto; j++)
        CHECK_OK(ovl_delta_send_begin(r.buf, (int)bytes, MPI_BYTE, to[j], tag, NULL, &sr[j]));
    if (from < 0) {
        /* the root computes the buffer (one send: its own producer) */
        CHECK(nto == 1);
        dt_produce(sr[0], r.buf, bytes, key, explicit_mode ? DT_PROD_RANDOM : DT_PROD_PLAIN, &rng);
        CHECK_OK(ovl_delta_send_end(sr[0], NULL));
    } else {
        if (end_at_once) /* the rest goes on as it arrives */
            for (int j = 0; j < nto; j++)
                CHECK_OK(ovl_delta_send_end(sr[j], NULL));
        /* read only: the buffer is being forwarded */
        size_t pg = dt_page(), n = (bytes + pg - 1) / pg;
        size_t *order = dt_perm(n, &rng);
        for (size_t i = 0; i < n; i++) {
            size_t off = order[i] * pg, len = dt_min(pg, bytes - off);
            if (explicit_mode)
                CHECK_OK(ovl_delta_need(rr, off, len));
            size_t bad = th_verify(r.buf + off, len, key, off);
            CHECKF(bad == TH_OK,
                   "tag %d: byte %zu from rank %d differs (in flight): %#x, expected %#x", tag,
                   off + bad, from, r.buf[off + bad], th_pattern_byte(key, off + bad));
        }
        free(order);
        if (!end_at_once)
            for (int j = 0; j < nto; j++)
                CHECK_OK(ovl_delta_send_end(sr[j], NULL));
        ovl_status_t st = { .error = 1 };
        CHECK_OK(ovl_wait(&rr, &st));
        CHECK(st.source == from && st.tag == tag && st.bytes == bytes);
    }
    for (int j = 0; j < nto; j++) {
        ovl_status_t st = { .error = 1 };
        CHECK_OK(ovl_wait(&sr[j], &st));
        CHECKF(st.bytes == bytes && st.error == OVL_SUCCESS, "forward to %d: {%zu, %d}", to[j],
               st.bytes, st.error);
    }
    size_t bad = th_verify(r.buf, bytes, key, 0);
    CHECKF(bad == TH_OK, "tag %d: byte %zu wrong at the end", tag, bad);
    CHECK(dt_sentinel_check(&r) == TH_OK);
    dt_region_free(&r);
}

static void forward_chain(void)
{
    int k = th_rank, next = k + 1;
    forward(k > 0 ? k - 1 : -1, &next, k < th_size - 1 ? 1 : 0, 20, 0xc4a1, k % 2);
}

/* FAILS when first written (every monitor): with two forwards of one
 * arriving buffer, rank 1's own data (fault monitors) or rank 3's
 * (explicit) has zeros; a single forward (forward_chain) works. */
static void forward_tree(void)
{
    /* 0 -> 1 -> {2, 3} (with 2 ranks: 0 -> 1) */
    int k = th_rank;
    int kids[2] = { 2, 3 };
    int nkids = k == 0 ? 1 : k == 1 ? (th_size >= 4 ? 2 : 0) : 0;
    int from = k == 0 ? -1 : k == 1 ? 0 : 1;
    int one = 1;
    if (k >= 4)
        return;
    forward(from, k == 0 ? &one : kids, nkids, 30, 0x7ee, 1);
}

int main(int argc, char **argv)
{
    dt_init(&argc, &argv, "test_delta_chain", NULL);
    explicit_mode = dt_monitor() == OVL_MONITOR_EXPLICIT;
    dt_phase("cascade", 60);
    cascade();
    dt_phase("forwarding along a chain", 60);
    forward_chain();
    dt_phase("forwarding along a tree", 60);
    forward_tree();
    return dt_finish();
}
