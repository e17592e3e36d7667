/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_atomic: a call that fails leaves no trace, and an empty buffer
 * is never taken for a pending one (issue 34, items 2 and 3).
 *  - empty exchanges (a ring): ovl_delta_recv(p, 0) and
 *    ovl_delta_send_begin(p, 0) with the same pointer p, and with NULL,
 *    complete with 0 bytes; a zero-length delta send that starts where a
 *    pending non-empty delta receive does is an ordinary empty message,
 *    not a forwarding of that receive: it completes before the receive's
 *    data is even sent, and the receive then arrives intact with its
 *    sentinels;
 *  - failed ovl_isend (OVL_ERR_MPI: a datatype not committed) to a peer
 *    with no delta send yet, and to one this rank has a delta send open
 *    to (header + body messages): *req untouched, nothing arrives; a valid
 *    message on the same tag right after it is the one the peer's receive
 *    gets, the open delta transfer completes with every byte right;
 *  - failed ovl_irecv (OVL_ERR_MPI, the same datatype) while a delta
 *    receive is pending: refused at once, no message consumed; the valid
 *    receive posted next gets the message;
 *  - a ninth send forwarding one arriving buffer (OVL_ERR_NOMEM) among
 *    eight that work: the eight deliver the whole buffer.
 * Run under every monitor and progress mode. Pairs: rank r with r^1, the
 * even rank sends; the empty exchange goes round the ring.
 */
#include "delta_common.h"

static int peer, even, explicit_mode;

#define SENTINEL ((ovl_request_t)(uintptr_t)0x5e5e5e5eull)

/* The call fails with `code` and does not write *r. */
#define EXPECT_REJECTED(call, code) \
    do {                            \
        r = SENTINEL;               \
        EXPECT_ERR(call, code);     \
        CHECK(r == SENTINEL);       \
    } while (0)

static void expect_done(ovl_request_t *q, int source, size_t bytes)
{
    ovl_status_t st;
    CHECK_OK(ovl_wait(q, &st));
    CHECK(*q == OVL_REQUEST_NULL);
    CHECKF(st.error == OVL_SUCCESS && st.bytes == bytes && (source < 0 || st.source == source),
           "status: error %d, %zu bytes (want %zu), source %d (want %d)", st.error, st.bytes, bytes,
           st.source, source);
}

/* ---- item 2: empty buffers ---------------------------------------------- */

static void empty_exchange(void *p, int tag)
{
    int to = (th_rank + 1) % th_size, from = (th_rank + th_size - 1) % th_size;
    ovl_request_t r, s;
    CHECK_OK(ovl_delta_recv(p, 0, MPI_DOUBLE, from, tag, &r));
    CHECK_OK(ovl_delta_send_begin(p, 0, MPI_DOUBLE, to, tag, &s));
    CHECK_OK(ovl_delta_send_end(s));
    expect_done(&s, th_rank, 0);
    expect_done(&r, from, 0);
}

/* A zero-length send at the start of a pending receive: each rank's
 * receive gets its data only after the next rank has received this
 * empty message, so a forwarding of the receive would wait round the
 * ring for ever. */
static void empty_at_pending(size_t bytes, size_t off, int tag)
{
    int to = (th_rank + 1) % th_size, from = (th_rank + th_size - 1) % th_size;
    uint64_t key = 0xa70000u + (uint64_t)from, out_key = 0xa70000u + (uint64_t)th_rank;
    dt_region_t in, out;
    dt_region_alloc(&in, bytes, off, 0x5e0000u + (uint64_t)th_rank);
    dt_region_alloc(&out, bytes, off, 0x5f0000u + (uint64_t)th_rank);
    th_rng_t rng;
    th_rng_init(&rng, (uint64_t)th_rank, (uint64_t)tag, bytes);
    ovl_request_t r, e, er, s;
    CHECK_OK(ovl_delta_recv(in.buf, (int)bytes, MPI_BYTE, from, tag, &r));
    CHECK_OK(ovl_delta_send_begin(in.buf, 0, MPI_BYTE, to, tag + 1, &e));
    CHECK_OK(ovl_delta_send_end(e));
    expect_done(&e, th_rank, 0);
    CHECK_OK(ovl_irecv(NULL, 0, MPI_BYTE, from, tag + 1, &er));
    expect_done(&er, from, 0);
    CHECK_OK(ovl_delta_send_begin(out.buf, (int)bytes, MPI_BYTE, to, tag, &s));
    dt_produce(s, out.buf, bytes, out_key, explicit_mode ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
    CHECK_OK(ovl_delta_send_end(s));
    dt_use(r, explicit_mode, in.buf, bytes, key, &rng);
    expect_done(&r, from, bytes);
    expect_done(&s, th_rank, bytes);
    size_t bad = dt_check_used(in.buf, bytes, key);
    CHECKF(bad == TH_OK, "byte %zu of %zu received wrong", bad, bytes);
    CHECK(dt_sentinel_check(&in) == TH_OK);
    CHECK(dt_sentinel_check(&out) == TH_OK);
    dt_region_free(&in);
    dt_region_free(&out);
}

/* ---- item 3: failed calls among valid transfers --------------------------- */

/* A derived datatype of 4 bytes that is never committed: MPI refuses it. */
static MPI_Datatype uncommitted(void)
{
    MPI_Datatype t;
    CHECK_MPI(MPI_Type_contiguous(4, MPI_BYTE, &t));
    return t;
}

/* The even rank's failed ovl_isend, then a valid message on the same tag;
 * with @delta, while a delta send to the same peer is open (its messages
 * then go as header + body). The odd rank's failed ovl_irecv on another
 * tag, then a valid receive of the message sent there. */
static void failed_post(int delta, size_t bytes, int tag)
{
    enum { SMALL = 64 };
    unsigned char small[SMALL], small2[SMALL];
    uint64_t key = 0xfa0000u + (uint64_t)tag;
    th_rng_t rng;
    th_rng_init(&rng, (uint64_t)(th_rank & ~1), (uint64_t)tag, bytes);
    dt_region_t b;
    dt_region_alloc(&b, bytes, 200, 0x5a0000u + (uint64_t)tag);
    ovl_request_t r, d = OVL_REQUEST_NULL, q[2];
    MPI_Datatype t = uncommitted();
    if (even) {
        if (delta)
            CHECK_OK(ovl_delta_send_begin(b.buf, (int)bytes, MPI_BYTE, peer, tag, &d));
        memset(small, 0x77, sizeof small);
        EXPECT_REJECTED(ovl_isend(small, 1, t, peer, tag + 1, &r), OVL_ERR_MPI);
        th_fill(small, SMALL, key + 1, 0);
        th_fill(small2, SMALL, key + 2, 0);
        CHECK_OK(ovl_isend(small, SMALL, MPI_BYTE, peer, tag + 1, &q[0]));
        CHECK_OK(ovl_isend(small2, SMALL, MPI_BYTE, peer, tag + 2, &q[1]));
        if (delta) {
            dt_produce(d, b.buf, bytes, key, explicit_mode ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
            CHECK_OK(ovl_delta_send_end(d));
            expect_done(&d, th_rank, bytes);
        }
        expect_done(&q[0], th_rank, SMALL);
        expect_done(&q[1], th_rank, SMALL);
    } else {
        if (delta)
            CHECK_OK(ovl_delta_recv(b.buf, (int)bytes, MPI_BYTE, peer, tag, &d));
        memset(small2, 0x77, sizeof small2);
        EXPECT_REJECTED(ovl_irecv(small2, SMALL / 4, t, peer, tag + 2, &r), OVL_ERR_MPI);
        CHECK_OK(ovl_irecv(small, SMALL, MPI_BYTE, peer, tag + 1, &q[0]));
        CHECK_OK(ovl_irecv(small2, SMALL, MPI_BYTE, peer, tag + 2, &q[1]));
        if (delta) {
            dt_use(d, explicit_mode, b.buf, bytes, key, &rng);
            expect_done(&d, peer, bytes);
            size_t bad = dt_check_used(b.buf, bytes, key);
            CHECKF(bad == TH_OK, "byte %zu of %zu received wrong", bad, bytes);
        }
        expect_done(&q[0], peer, SMALL);
        expect_done(&q[1], peer, SMALL);
        CHECKF(th_verify(small, SMALL, key + 1, 0) == TH_OK,
               "the message after the failed ovl_isend");
        CHECKF(th_verify(small2, SMALL, key + 2, 0) == TH_OK,
               "the message after the failed ovl_irecv");
    }
    CHECK(dt_sentinel_check(&b) == TH_OK);
    CHECK_MPI(MPI_Type_free(&t));
    dt_region_free(&b);
}

/* Eight sends forwarding one arriving buffer back to its sender, and a
 * ninth refused. */
static void forward_overflow(size_t bytes, int tag)
{
    enum { NF = 8 };
    uint64_t key = 0xf00000u + (uint64_t)tag;
    th_rng_t rng;
    th_rng_init(&rng, (uint64_t)(th_rank & ~1), (uint64_t)tag, bytes);
    dt_region_t b, back[NF];
    dt_region_alloc(&b, bytes, 0, 0x5b0000u + (uint64_t)tag);
    ovl_request_t r, d, f[NF];
    if (even) {
        for (int k = 0; k < NF; k++) {
            dt_region_alloc(&back[k], bytes, 300, 0x5c0000u + (uint64_t)k);
            CHECK_OK(ovl_delta_recv(back[k].buf, (int)bytes, MPI_BYTE, peer, tag + 1 + k, &f[k]));
        }
        /* not before the ninth was refused: a receive complete by then
         * would no longer be forwarded, and the ninth would be a plain send */
        char go = 0;
        CHECK_MPI(MPI_Recv(&go, 1, MPI_CHAR, peer, 900 + tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_OK(ovl_delta_send_begin(b.buf, (int)bytes, MPI_BYTE, peer, tag, &d));
        dt_produce(d, b.buf, bytes, key, explicit_mode ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
        CHECK_OK(ovl_delta_send_end(d));
        expect_done(&d, th_rank, bytes);
        for (int k = 0; k < NF; k++) {
            expect_done(&f[k], peer, bytes);
            CHECKF(th_verify(back[k].buf, bytes, key, 0) == TH_OK, "forwarded copy %d", k);
            CHECK(dt_sentinel_check(&back[k]) == TH_OK);
            dt_region_free(&back[k]);
        }
    } else {
        CHECK_OK(ovl_delta_recv(b.buf, (int)bytes, MPI_BYTE, peer, tag, &d));
        for (int k = 0; k < NF; k++)
            CHECK_OK(ovl_delta_send_begin(b.buf, (int)bytes, MPI_BYTE, peer, tag + 1 + k, &f[k]));
        EXPECT_REJECTED(ovl_delta_send_begin(b.buf, (int)bytes, MPI_BYTE, peer, tag + 1 + NF, &r),
                        OVL_ERR_NOMEM);
        char go = 1;
        CHECK_MPI(MPI_Send(&go, 1, MPI_CHAR, peer, 900 + tag, MPI_COMM_WORLD));
        for (int k = 0; k < NF; k++)
            CHECK_OK(ovl_delta_send_end(f[k]));
        if (explicit_mode)
            CHECK_OK(ovl_delta_need(d, 0, bytes));
        expect_done(&d, peer, bytes);
        CHECKF(th_verify(b.buf, bytes, key, 0) == TH_OK, "the forwarded receive");
        for (int k = 0; k < NF; k++)
            expect_done(&f[k], th_rank, bytes);
    }
    CHECK(dt_sentinel_check(&b) == TH_OK);
    dt_region_free(&b);
}

int main(int argc, char **argv)
{
    dt_init(&argc, &argv, "test_delta_atomic", NULL);
    peer = th_rank ^ 1;
    even = th_rank % 2 == 0;
    CHECKF(peer < th_size, "test_delta_atomic needs an even number of ranks");
    explicit_mode = dt_monitor() == OVL_MONITOR_EXPLICIT;
    size_t pg = dt_page();

    /* before any delta send to the peer: plain messages */
    dt_phase("failed isend and irecv, plain messages", 20);
    failed_post(0, pg, 10);

    dt_phase("empty exchange, one pointer", 20);
    void *p = dt_alloc(pg);
    empty_exchange(p, 1);
    dt_phase("empty exchange, NULL", 20);
    empty_exchange(NULL, 2);
    dt_free(p, pg);
    dt_phase("empty send at a pending receive, aligned", 20);
    empty_at_pending(3 * pg, 0, 3);
    dt_phase("empty send at a pending receive, unaligned", 20);
    empty_at_pending(5 * pg + 17, 100, 5);

    /* the empty exchanges made every later message to the next rank go as
     * header + body; a delta transfer open makes it so for the peer */
    dt_phase("failed isend and irecv, a delta transfer open", 20);
    failed_post(1, 6 * pg + 5, 20);
    dt_phase("failed isend and irecv, a small delta transfer open", 20);
    failed_post(1, 100, 30);
    dt_phase("a ninth forwarding send", 30);
    forward_overflow(4 * pg + 3, 40);
    return dt_finish();
}
