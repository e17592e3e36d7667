/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Buffers carved from one block, as real codes allocate them: a pending
 * delta receive R whose first and last pages hold other data the program
 * keeps using, and a send buffer S that starts on R's last page.
 *
 *   ovncopy   ovl's own copy of a delta piece of S reads R's guarded last
 *             page through /proc/self/mem: no fault at all (before, glibc's
 *             `rep movsb` trapped once per byte there).
 *   neighbours the program's own accesses to the data around R while R is
 *             pending: a string move or store takes one trap per page, the
 *             libc string functions and a plain loop never one per byte,
 *             and every byte (R's and its neighbours') is verified.
 *
 *   mpi        ovl_irecv into, ovl_isend from and ovl_get into buffers that
 *             start on R's guarded last page: MPI cannot reach that page,
 *             so ovl stages them (MPI's CMA copy failed with "Bad address").
 *
 * Ranks are paired (r, r^1); the even one is watched, the odd one only
 * sends after the even one says so, so R is pending through each phase.
 * R is fault-monitored through ovl_delta_recv with a monitor (MPROTECT) whatever the
 * variant (edge pages are guarded with mprotect under every fault monitor).
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t ps;
static unsigned char *blk, *R, *S;
static size_t rlen, slen;
static int peer, even;

static unsigned char val(size_t i, int seed)
{
    return (unsigned char)((i * 131u + (size_t)seed * 7u) ^ (i >> 9));
}

static ovl_stats_t stats(void)
{
    ovl_stats_t s;
    CHECK_OK(ovl_stats_get(&s, sizeof s));
    return s;
}

static void token(int send, int tag)
{
    int t = tag;
    ovl_request_t q;
    if (send)
        CHECK_OK(ovl_isend(&t, 1, MPI_INT, peer, tag, &q));
    else
        CHECK_OK(ovl_irecv(&t, 1, MPI_INT, peer, tag, &q));
    CHECK_OK(ovl_wait(&q, NULL));
    CHECK(t == tag);
}

/* The odd rank's side of a phase: wait for the token, then send R's data. */
static void feed(int seed, int tag)
{
    unsigned char *src = malloc(rlen);
    CHECK(src != NULL);
    for (size_t i = 0; i < rlen; i++)
        src[i] = val(i, seed);
    token(0, tag);
    ovl_request_t q;
    CHECK_OK(ovl_delta_send_begin(src, (int)rlen, MPI_BYTE, peer, tag, NULL, &q));
    CHECK_OK(ovl_delta_send_end(q, NULL));
    CHECK_OK(ovl_wait(&q, NULL));
    free(src);
}

static void check_r(int seed)
{
    for (size_t i = 0; i < rlen; i++)
        CHECKF(R[i] == val(i, seed), "R[%zu] = %u, want %u", i, R[i], val(i, seed));
}

/* Phase 1: a delta send from S while R (sharing S's first page) is pending. */
static void own_copy(void)
{
    if (!even) {
        unsigned char *in = malloc(slen);
        CHECK(in != NULL);
        ovl_request_t q;
        CHECK_OK(ovl_irecv(in, (int)slen, MPI_BYTE, peer, 1, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        for (size_t i = 0; i < slen; i++)
            CHECKF(in[i] == val(i, 5), "S[%zu] arrived as %u", i, in[i]);
        free(in);
        feed(1, 2);
        return;
    }
    for (size_t i = 0; i < slen; i++)
        S[i] = val(i, 5);
    ovl_request_t r, s;
    CHECK_OK(ovl_delta_recv(R, (int)rlen, MPI_BYTE, peer, 2, TH_MONITOR(OVL_MONITOR_MPROTECT), &r));
    ovl_stats_t a = stats();
    CHECK_OK(ovl_delta_send_begin(S, (int)slen, MPI_BYTE, peer, 1, NULL, &s));
    CHECK_OK(ovl_delta_send_end(s, NULL));
    CHECK_OK(ovl_wait(&s, NULL));
    ovl_stats_t b = stats();
    CHECKF(b.edge_steps == a.edge_steps && b.faults - a.faults <= 2,
           "sending S took %llu faults, %llu neighbour steps",
           (unsigned long long)(b.faults - a.faults),
           (unsigned long long)(b.edge_steps - a.edge_steps));
    CHECKF(b.edge_bounces > a.edge_bounces, "no piece was copied around R's guarded page");
    token(1, 2);
    CHECK_OK(ovl_wait(&r, NULL));
    check_r(1);
    for (size_t i = 0; i < slen; i++)
        CHECKF(S[i] == val(i, 5), "S[%zu] changed to %u", i, S[i]);
}

#if defined(__x86_64__)
static void rep_movsb(void *dst, const void *src, size_t n)
{
    __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}
static void rep_stosq(void *dst, unsigned long v, size_t n)
{
    __asm__ volatile("rep stosq" : "+D"(dst), "+c"(n) : "a"(v) : "memory");
}
#endif

/* Phase 2: the program works on R's neighbours while R is pending. */
static void neighbours(void)
{
    if (!even) {
        feed(3, 4);
        return;
    }
    unsigned char *lo = (unsigned char *)((uintptr_t)R & ~(uintptr_t)(ps - 1));
    unsigned char *hi = R + rlen, *hi_end = (unsigned char *)(((uintptr_t)hi + ps - 1) & ~(ps - 1));
    size_t nlo = (size_t)(R - lo), nhi = (size_t)(hi_end - hi);
    if (nlo < 16 || nhi < 16 || nlo >= ps || nhi >= ps)
        th_fail(__FILE__, __LINE__, "layout", "R must share both edge pages");
    unsigned char *ref_lo = malloc(nlo), *ref_hi = malloc(nhi), *tmp = malloc(ps);
    CHECK(ref_lo && ref_hi && tmp);
    ovl_request_t r;
    CHECK_OK(ovl_delta_recv(R, (int)rlen, MPI_BYTE, peer, 4, TH_MONITOR(OVL_MONITOR_MPROTECT), &r));
    ovl_stats_t a = stats(), b;
#if defined(__x86_64__)
    /* a string move and a string store: one trap each, whatever the size */
    for (size_t i = 0; i < nlo; i++)
        tmp[i] = (unsigned char)(i * 3);
    rep_movsb(lo, tmp, nlo);
    b = stats();
    CHECKF(b.edge_steps - a.edge_steps <= 2, "rep movsb of %zu bytes took %llu steps", nlo,
           (unsigned long long)(b.edge_steps - a.edge_steps));
    rep_stosq(hi_end - nhi / 8 * 8, 0x0102030405060708ul, nhi / 8);
    a = stats();
    CHECKF(a.edge_steps - b.edge_steps <= 2, "rep stosq of %zu words took %llu steps", nhi / 8,
           (unsigned long long)(a.edge_steps - b.edge_steps));
    for (size_t i = 0; i < nlo; i++)
        CHECKF(lo[i] == (unsigned char)(i * 3), "rep movsb wrote %u at %zu", lo[i], i);
    for (size_t i = nhi % 8; i < nhi; i++)
        CHECK(hi[i] == ((0x0102030405060708ul >> (8 * ((i - nhi % 8) % 8))) & 0xff));
#endif
    /* libc's string functions and a loop: never a trap per byte */
    a = stats();
    for (size_t i = 0; i < nlo; i++)
        tmp[i] = (unsigned char)(i * 5 + 1);
    memcpy(lo, tmp, nlo);
    memmove(lo + 1, lo, nlo - 1);
    memset(hi, 'x', nhi - 1);
    hi[nhi - 1] = 0;
    size_t len = strlen((const char *)hi);
    char *dup = strdup((const char *)hi);
    CHECK(dup != NULL);
    strcpy((char *)hi, "neighbour");
    unsigned long sum = 0;
    for (size_t i = 0; i < nlo; i++)
        sum += lo[i];
    b = stats();
    unsigned long long steps = b.edge_steps - a.edge_steps;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* (under ASan and TSan, memcpy and memset are the sanitizer's
     * instrumented interceptors, which access byte by byte) */
    CHECKF(steps < (nlo + nhi) / 8, "string functions over %zu bytes took %llu steps", nlo + nhi,
           steps);
#else
    (void)steps;
#endif
    CHECK(len == nhi - 1 && strlen(dup) == nhi - 1);
    free(dup);
    memcpy(ref_lo, tmp, 1);
    memcpy(ref_lo + 1, tmp, nlo - 1);
    unsigned long want = 0;
    for (size_t i = 0; i < nlo; i++)
        want += ref_lo[i];
    CHECK(sum == want);
    memset(ref_hi, 'x', nhi - 1);
    ref_hi[nhi - 1] = 0;
    memcpy(ref_hi, "neighbour", 10);
    /* R is still pending: only now may the sender start */
    token(1, 4);
    check_r(3); /* faults, and waits for each page */
    CHECK_OK(ovl_wait(&r, NULL));
    check_r(3);
    CHECK(memcmp(lo, ref_lo, nlo) == 0);
    CHECK(memcmp(hi, ref_hi, nhi) == 0);
    free(ref_lo);
    free(ref_hi);
    free(tmp);
}

/* Phase 3: MPI transfers of buffers that start on R's guarded last page
 * (ovl_irecv into one, ovl_isend from one, ovl_get into one): MPI, or the
 * kernel for it, cannot reach that page, so ovl stages them. Large enough
 * for MPI's zero-copy paths (CMA, rendezvous). */
static void mpi_neighbours(void)
{
    size_t n = (size_t)1 << 20;
    unsigned char *other = R + rlen; /* on R's last page */
    unsigned char *buf = malloc(n);
    CHECK(buf != NULL);
    void *base = NULL;
    ovl_segment_t seg;
    CHECK_OK(ovl_segment_create(n, &base, &seg));
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)base)[i] = val(i, 40 + th_rank);
    CHECK_OK(ovl_barrier());
    if (!even) {
        for (size_t i = 0; i < n; i++)
            buf[i] = val(i, 11);
        ovl_request_t q;
        CHECK_OK(ovl_isend(buf, (int)n, MPI_BYTE, peer, 6, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        CHECK_OK(ovl_irecv(buf, (int)n, MPI_BYTE, peer, 7, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        for (size_t i = 0; i < n; i++)
            CHECKF(buf[i] == val(i, 12), "ovl_isend from the guarded page sent %u at %zu", buf[i],
                   i);
        feed(13, 8);
    } else {
        ovl_request_t r, q;
        CHECK_OK(
            ovl_delta_recv(R, (int)rlen, MPI_BYTE, peer, 8, TH_MONITOR(OVL_MONITOR_MPROTECT), &r));
        CHECK_OK(ovl_irecv(other, (int)n, MPI_BYTE, peer, 6, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        for (size_t i = 0; i < n; i++)
            CHECKF(other[i] == val(i, 11), "ovl_irecv onto the guarded page got %u at %zu",
                   other[i], i);
        for (size_t i = 0; i < n; i++)
            other[i] = val(i, 12);
        CHECK_OK(ovl_isend(other, (int)n, MPI_BYTE, peer, 7, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        /* a get from this rank's own part: a local target, moved by MPI */
        CHECK_OK(ovl_get(other, th_rank, 0, n, seg, NULL, NULL));
        for (size_t i = 0; i < n; i++)
            CHECKF(other[i] == val(i, 40 + th_rank), "ovl_get onto the guarded page got %u at %zu",
                   other[i], i);
        token(1, 8);
        CHECK_OK(ovl_wait(&r, NULL));
        check_r(13);
    }
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_segment_free(&seg));
    free(buf);
}

/* `local` (OVL_RMA_LOCAL=direct, the default): the peer shares this node,
 * so a fault-monitored delta send is a plain transfer: nothing watched, no
 * fault, the largest pieces (256 KiB) at send_end, in order, which the
 * receiver lands in place. */
static void local(void)
{
    size_t n = (size_t)1 << 20;
    unsigned char *b = NULL;
    CHECK(posix_memalign((void **)&b, ps, n) == 0);
    ovl_request_t q;
    if (even) {
        ovl_stats_t a = stats();
        CHECK_OK(ovl_delta_send_begin(b, (int)n, MPI_BYTE, peer, 9,
                                      TH_MONITOR(OVL_MONITOR_MPROTECT), &q));
        for (size_t i = 0; i < n; i++)
            b[i] = val(i, 21);
        CHECK_OK(ovl_delta_send_end(q, NULL));
        CHECK_OK(ovl_wait(&q, NULL));
        ovl_stats_t z = stats();
        CHECKF(z.faults == a.faults, "a delta send on one node took %llu faults",
               (unsigned long long)(z.faults - a.faults));
        CHECKF(z.deltas_sent - a.deltas_sent == 4,
               "a 1 MiB delta send on one node took %llu pieces",
               (unsigned long long)(z.deltas_sent - a.deltas_sent));
    } else {
        ovl_stats_t a = stats();
        CHECK_OK(
            ovl_delta_recv(b, (int)n, MPI_BYTE, peer, 9, TH_MONITOR(OVL_MONITOR_MPROTECT), &q));
        for (size_t i = 0; i < n; i++)
            CHECKF(b[i] == val(i, 21), "byte %zu arrived as %u", i, b[i]);
        CHECK_OK(ovl_wait(&q, NULL));
        ovl_stats_t z = stats();
        CHECKF(z.deltas_received - a.deltas_received == 4, "received in %llu pieces",
               (unsigned long long)(z.deltas_received - a.deltas_received));
    }
    /* into an ovl_irecv (in place, no monitor), unaligned, a short last
     * piece, and a message shorter than the receive */
    size_t m = n - 5000, off = 13;
    if (even) {
        CHECK_OK(ovl_delta_send_begin(b + off, (int)m, MPI_BYTE, peer, 10,
                                      TH_MONITOR(OVL_MONITOR_EXPLICIT), &q));
        for (size_t i = 0; i < m; i++)
            b[off + i] = val(i, 22);
        CHECK_OK(ovl_delta_send_end(q, NULL));
        CHECK_OK(ovl_wait(&q, NULL));
    } else {
        memset(b, 0xee, n);
        ovl_status_t st;
        CHECK_OK(ovl_irecv(b + off, (int)(m + 1000), MPI_BYTE, peer, 10, &q));
        CHECK_OK(ovl_wait(&q, &st));
        CHECKF(st.bytes == m, "%zu bytes", st.bytes);
        for (size_t i = 0; i < m; i++)
            CHECKF(b[off + i] == val(i, 22), "byte %zu arrived as %u", i, b[off + i]);
        for (size_t i = 0; i < off; i++)
            CHECK(b[i] == 0xee);
        for (size_t i = off + m; i < n; i++)
            CHECKF(b[i] == 0xee, "byte %zu past the message changed", i);
    }
    free(b);
}

int main(int argc, char **argv)
{
    th_init(&argc, &argv, "test_delta_edges", NULL);
    peer = th_rank ^ 1;
    even = th_rank % 2 == 0;
    ps = (size_t)sysconf(_SC_PAGESIZE);
    /* one block: [.. | R (head on page 1, tail on page 4) | S ...] */
    void *p = NULL;
    CHECK(posix_memalign(&p, ps, 10 * ps + ((size_t)1 << 20)) == 0);
    blk = p;
    memset(blk, 0xee, 10 * ps + ((size_t)1 << 20));
    R = blk + 2 * ps - 1000;
    rlen = 2 * ps + 2000;
    S = R + rlen;
    slen = 3 * ps;
    if (argc > 1 && !strcmp(argv[1], "local")) {
        local();
    } else {
        own_copy();
        neighbours();
        mpi_neighbours();
    }
    free(blk);
    return th_finish();
}
