/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_atomic: a call that fails leaves no trace, an empty buffer is
 * never taken for a pending one, and a delta send that fails once part of
 * its message has left fails on both ends, nobody waiting for ever (issue
 * 34).
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
 *    eight that work: the eight deliver the whole buffer;
 *  - no memory after part of a message has left (white-box: the third
 *    piece of a delta send fails to allocate, ovl__delta_fail_piece): the
 *    call that sent it (ovl_delta_produced in explicit mode) or else
 *    ovl_delta_send_end returns OVL_ERR_NOMEM, as ovl_wait does; the
 *    receiver does not hang, not even in a read of the part that never
 *    came: its receive completes with OVL_ERR_CANCELLED and 0 bytes, and
 *    so do a send forwarding that receive as it arrived and the receive
 *    of that forwarded copy (an error, never wrong bytes); a delta
 *    transfer on another tag in flight meanwhile arrives intact, and a
 *    delta and a plain message on the failed tag right after it too.
 * Run under every monitor and progress mode. Pairs: rank r with r^1, the
 * even rank sends; the empty exchange goes round the ring.
 */
#include "delta_common.h"
#include "ovl_internal.h" /* white-box: ovl__delta_fail_piece */

static int peer, even, explicit_mode;

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
    CHECK_OK(ovl_delta_recv(p, 0, MPI_DOUBLE, from, tag, NULL, &r));
    CHECK_OK(ovl_delta_send_begin(p, 0, MPI_DOUBLE, to, tag, NULL, &s));
    CHECK_OK(ovl_delta_send_end(s, NULL));
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
    CHECK_OK(ovl_delta_recv(in.buf, (int)bytes, MPI_BYTE, from, tag, NULL, &r));
    CHECK_OK(ovl_delta_send_begin(in.buf, 0, MPI_BYTE, to, tag + 1, NULL, &e));
    CHECK_OK(ovl_delta_send_end(e, NULL));
    expect_done(&e, th_rank, 0);
    CHECK_OK(ovl_irecv(NULL, 0, MPI_BYTE, from, tag + 1, &er));
    expect_done(&er, from, 0);
    CHECK_OK(ovl_delta_send_begin(out.buf, (int)bytes, MPI_BYTE, to, tag, NULL, &s));
    dt_produce(s, out.buf, bytes, out_key, explicit_mode ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
    CHECK_OK(ovl_delta_send_end(s, NULL));
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
            CHECK_OK(ovl_delta_send_begin(b.buf, (int)bytes, MPI_BYTE, peer, tag, NULL, &d));
        memset(small, 0x77, sizeof small);
        EXPECT_REJECTED(ovl_isend(small, 1, t, peer, tag + 1, &r), OVL_ERR_MPI);
        th_fill(small, SMALL, key + 1, 0);
        th_fill(small2, SMALL, key + 2, 0);
        CHECK_OK(ovl_isend(small, SMALL, MPI_BYTE, peer, tag + 1, &q[0]));
        CHECK_OK(ovl_isend(small2, SMALL, MPI_BYTE, peer, tag + 2, &q[1]));
        if (delta) {
            dt_produce(d, b.buf, bytes, key, explicit_mode ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
            CHECK_OK(ovl_delta_send_end(d, NULL));
            expect_done(&d, th_rank, bytes);
        }
        expect_done(&q[0], th_rank, SMALL);
        expect_done(&q[1], th_rank, SMALL);
    } else {
        if (delta)
            CHECK_OK(ovl_delta_recv(b.buf, (int)bytes, MPI_BYTE, peer, tag, NULL, &d));
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
            CHECK_OK(
                ovl_delta_recv(back[k].buf, (int)bytes, MPI_BYTE, peer, tag + 1 + k, NULL, &f[k]));
        }
        /* not before the ninth was refused: a receive complete by then
         * would no longer be forwarded, and the ninth would be a plain send */
        char go = 0;
        CHECK_MPI(MPI_Recv(&go, 1, MPI_CHAR, peer, 900 + tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_OK(ovl_delta_send_begin(b.buf, (int)bytes, MPI_BYTE, peer, tag, NULL, &d));
        dt_produce(d, b.buf, bytes, key, explicit_mode ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
        CHECK_OK(ovl_delta_send_end(d, NULL));
        expect_done(&d, th_rank, bytes);
        for (int k = 0; k < NF; k++) {
            expect_done(&f[k], peer, bytes);
            CHECKF(th_verify(back[k].buf, bytes, key, 0) == TH_OK, "forwarded copy %d", k);
            CHECK(dt_sentinel_check(&back[k]) == TH_OK);
            dt_region_free(&back[k]);
        }
    } else {
        CHECK_OK(ovl_delta_recv(b.buf, (int)bytes, MPI_BYTE, peer, tag, NULL, &d));
        for (int k = 0; k < NF; k++)
            CHECK_OK(
                ovl_delta_send_begin(b.buf, (int)bytes, MPI_BYTE, peer, tag + 1 + k, NULL, &f[k]));
        EXPECT_REJECTED(
            ovl_delta_send_begin(b.buf, (int)bytes, MPI_BYTE, peer, tag + 1 + NF, NULL, &r),
            OVL_ERR_NOMEM);
        char go = 1;
        CHECK_MPI(MPI_Send(&go, 1, MPI_CHAR, peer, 900 + tag, MPI_COMM_WORLD));
        for (int k = 0; k < NF; k++)
            CHECK_OK(ovl_delta_send_end(f[k], NULL));
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

/* ---- no memory after part of a message has left ----------------------- */

/* Write pattern @key into b[lo, hi) in strips of 1-3 pages (as
 * dt_produce), with ovl_delta_produced in explicit mode: there the call
 * that sends a piece that finds no memory fails, and every later one.
 * Returns whether one failed. */
static int produce_part(ovl_request_t s, unsigned char *b, size_t lo, size_t hi, uint64_t key,
                        th_rng_t *rng)
{
    size_t pg = dt_page();
    int failed = 0;
    for (size_t o = lo; o < hi;) {
        size_t len = dt_min(hi - o, 1 + (size_t)th_below(rng, 3 * pg));
        th_fill(b + o, len, key, o);
        if (explicit_mode) {
            int rc = ovl_delta_produced(s, o, len);
            if (failed)
                EXPECT_ERR(rc, OVL_ERR_NOMEM);
            else
                CHECKF(rc == OVL_SUCCESS || rc == OVL_ERR_NOMEM, "ovl_delta_produced: %s",
                       th_code_name(rc));
            failed |= rc == OVL_ERR_NOMEM;
        }
        o += len;
    }
    return failed;
}

/* The even rank's delta send F of @bytes on @tag loses its third piece
 * (no memory) while a delta send V on tag + 1 is half sent; the odd rank
 * forwards F as it arrives back on tag + 2. Then a delta message and a
 * plain one on @tag. */
static void nomem_after_pieces(size_t bytes, int tag)
{
    enum { SMALL = 64 };
    const size_t vbytes = 64 * dt_page() + 17; /* watched, in pieces (not on this node) */
    uint64_t key = 0xe70000u + (uint64_t)tag, vkey = key + 1, key2 = key + 2, skey = key + 3;
    unsigned char small[SMALL];
    th_rng_t rng;
    th_rng_init(&rng, (uint64_t)th_rank, (uint64_t)tag, bytes);
    dt_region_t f, v;
    dt_region_alloc(&f, bytes, 100, 0x5d0000u + (uint64_t)tag);
    dt_region_alloc(&v, vbytes, 200, 0x5d1000u + (uint64_t)tag);
    ovl_request_t fr, vr, fw, q;
    ovl_status_t st;
    char go = 1;
    if (even) {
        dt_region_t back;
        dt_region_alloc(&back, bytes, 300, 0x5d2000u + (uint64_t)tag);
        CHECK_OK(ovl_delta_recv(back.buf, (int)bytes, MPI_BYTE, peer, tag + 2, NULL, &fw));
        /* not before the peer's forwarding send has begun: a receive
         * complete by then would not be forwarded */
        CHECK_MPI(MPI_Recv(&go, 1, MPI_CHAR, peer, 900 + tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_OK(ovl_delta_send_begin(v.buf, (int)vbytes, MPI_BYTE, peer, tag + 1, NULL, &vr));
        CHECK(!produce_part(vr, v.buf, 0, vbytes / 2, vkey, &rng));
        ovl_stats_t s0 = dt_stats();
        CHECK_OK(ovl_delta_send_begin(f.buf, (int)bytes, MPI_BYTE, peer, tag, NULL, &fr));
        /* explicit mode: pieces leave as ranges are produced, the third
         * before the end, so a call to ovl_delta_produced fails; else the
         * fault handler or send_end finds no memory. To a peer on this
         * node on the plain path the message is one piece, at send_end. */
        const int whole = ovl__model_direct(peer);
        CHECK_OK(ovl__delta_fail_piece(fr, whole ? 1 : 3));
        int failed = produce_part(fr, f.buf, 0, bytes, key, &rng);
        CHECKF(failed == explicit_mode, "ovl_delta_produced %s",
               failed ? "failed" : "never failed");
        EXPECT_ERR(ovl_delta_send_end(fr, NULL), OVL_ERR_NOMEM);
        ovl_stats_t s1 = dt_stats();
        CHECKF(s1.deltas_sent - s0.deltas_sent >= (whole ? 1u : 2u),
               "%llu pieces (and the abort marker) left by the failure",
               (unsigned long long)(s1.deltas_sent - s0.deltas_sent));
        CHECK(!produce_part(vr, v.buf, vbytes / 2, vbytes, vkey, &rng));
        CHECK_OK(ovl_delta_send_end(vr, NULL));
        EXPECT_ERR(ovl_wait(&fr, &st), OVL_ERR_NOMEM);
        CHECK(fr == OVL_REQUEST_NULL && st.error == OVL_ERR_NOMEM);
        expect_done(&vr, th_rank, vbytes);
        /* the copy the peer forwarded of what reached it: an error */
        EXPECT_ERR(ovl_wait(&fw, &st), OVL_ERR_CANCELLED);
        CHECKF(st.error == OVL_ERR_CANCELLED && st.bytes == 0, "forwarded copy: %s, %zu bytes",
               th_code_name(st.error), st.bytes);
        CHECK(dt_sentinel_check(&back) == TH_OK);
        dt_region_free(&back);
        /* the same tag again: a delta message, then a plain one */
        CHECK_OK(ovl_delta_send_begin(f.buf, (int)bytes, MPI_BYTE, peer, tag, NULL, &fr));
        dt_produce(fr, f.buf, bytes, key2, explicit_mode ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
        CHECK_OK(ovl_delta_send_end(fr, NULL));
        th_fill(small, SMALL, skey, 0);
        CHECK_OK(ovl_isend(small, SMALL, MPI_BYTE, peer, tag, &q));
        expect_done(&fr, th_rank, bytes);
        expect_done(&q, th_rank, SMALL);
    } else {
        CHECK_OK(ovl_delta_recv(f.buf, (int)bytes, MPI_BYTE, peer, tag, NULL, &fr));
        CHECK_OK(ovl_delta_recv(v.buf, (int)vbytes, MPI_BYTE, peer, tag + 1, NULL, &vr));
        CHECK_OK(ovl_delta_send_begin(f.buf, (int)bytes, MPI_BYTE, peer, tag + 2, NULL, &fw));
        CHECK_OK(ovl_delta_send_end(fw, NULL)); /* its source's completion ends it */
        CHECK_MPI(MPI_Send(&go, 1, MPI_CHAR, peer, 900 + tag, MPI_COMM_WORLD));
        dt_use(vr, explicit_mode, v.buf, vbytes, vkey, &rng);
        expect_done(&vr, peer, vbytes);
        size_t bad = dt_check_used(v.buf, vbytes, vkey);
        CHECKF(bad == TH_OK, "byte %zu of %zu of the message in flight received wrong", bad,
               vbytes);
        /* the failed message's third piece never comes: an access to it
         * (a read of every page) waits for the end of the message, not
         * for ever */
        if (explicit_mode) {
            int rc = ovl_delta_need(fr, 0, bytes);
            CHECKF(rc == OVL_SUCCESS || rc == OVL_ERR_CANCELLED, "ovl_delta_need: %s",
                   th_code_name(rc));
        } else {
            volatile unsigned char *b = f.buf;
            for (size_t o = 0; o < bytes; o += dt_page())
                (void)b[o];
            (void)b[bytes - 1];
        }
        EXPECT_ERR(ovl_wait(&fr, &st), OVL_ERR_CANCELLED);
        CHECKF(st.error == OVL_ERR_CANCELLED && st.bytes == 0 && st.source == peer,
               "failed message: %s, %zu bytes, source %d", th_code_name(st.error), st.bytes,
               st.source);
        EXPECT_ERR(ovl_wait(&fw, &st), OVL_ERR_CANCELLED);
        CHECK(st.error == OVL_ERR_CANCELLED);
        CHECK(dt_sentinel_check(&f) == TH_OK);
        /* the same tag again */
        CHECK_OK(ovl_delta_recv(f.buf, (int)bytes, MPI_BYTE, peer, tag, NULL, &fr));
        memset(small, 0, sizeof small);
        CHECK_OK(ovl_irecv(small, SMALL, MPI_BYTE, peer, tag, &q));
        dt_use(fr, explicit_mode, f.buf, bytes, key2, &rng);
        expect_done(&fr, peer, bytes);
        bad = dt_check_used(f.buf, bytes, key2);
        CHECKF(bad == TH_OK, "byte %zu of %zu of the next message received wrong", bad, bytes);
        expect_done(&q, peer, SMALL);
        CHECKF(th_verify(small, SMALL, skey, 0) == TH_OK, "the plain message after the failure");
    }
    CHECK(dt_sentinel_check(&f) == TH_OK);
    CHECK(dt_sentinel_check(&v) == TH_OK);
    dt_region_free(&f);
    dt_region_free(&v);
}

int main(int argc, char **argv)
{
    dt_init(&argc, &argv, "test_delta_atomic", NULL);
    peer = dt_pair("test_delta_atomic", &even);
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
    /* more than four pieces whatever the delta size (at most 256 KiB) */
    dt_phase("no memory after part of a message has left", 30);
    nomem_after_pieces(((size_t)1 << 20) + 3 * pg + 11, 60);
    return dt_finish();
}
