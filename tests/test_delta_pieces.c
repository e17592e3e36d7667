/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_pieces: how many messages a delta send makes, and that the
 * data stays exact when it makes fewer. Run with OVL_DELTA_SIZE=16384,
 * OVL_EAGER_LIMIT=65536 and OVL_CALIBRATE=0, so that a piece of 16 KiB or
 * less is copied behind its header (model.c, ovl__model_copy_piece).
 *  - one piece: a message no larger than the delta size goes as a single
 *    piece carrying the end of the message, at send_end; under a fault
 *    monitor the sender takes no fault (the buffer is not watched) and
 *    the buffer may be rewritten after send_end without changing what the
 *    receiver gets (the piece was copied);
 *  - one piece, shorter: ovl_delta_send_end with a count gives the real size to
 *    the receiver, which still gets exactly that many bytes;
 *  - several pieces under a fault monitor: 8 pages in 16 KiB deltas are
 *    two pieces (the second carries the end: no empty last piece);
 *  - several pieces, annotated (ovl_delta_produced in order): the range
 *    that completes the buffer ends the message, before send_end, and the
 *    request still completes only after send_end;
 *  - unaligned buffers with sentinel bytes on their first and last pages,
 *    received into unaligned buffers too: neighbours are never touched.
 * Every received byte is checked; the receiver uses the buffer at once,
 * without ovl_wait. Pairs: rank r with r^1; the even rank sends.
 */
#include "delta_common.h"

#include <inttypes.h>

static int peer, even;
static ovl_monitor_t mon;

/* Send @bytes (of a @cap-byte buffer at offset @off in its pages) from the
 * even rank; @end_at < @cap ends it early with ovl_delta_send_end and a count.
 * Checks the pieces and faults of the sender against @want_pieces
 * (0: not checked) and @want_no_fault. */
static void one_case(const char *what, size_t cap, size_t off, size_t end_at, int annotate,
                     uint64_t want_pieces, int want_no_fault, int round)
{
    uint64_t key = th_mix(th_seed() + 101u * (uint64_t)round), skey = th_mix(key + 7);
    dt_region_t rg;
    dt_region_alloc(&rg, cap, off, skey);
    ovl_request_t r = OVL_REQUEST_NULL;
    ovl_status_t st;
    MPI_Barrier(MPI_COMM_WORLD);
    if (even) {
        ovl_stats_t s0 = dt_stats();
        CHECK_OK(ovl_delta_send_begin(rg.buf, (int)cap, MPI_BYTE, peer, 40 + round, NULL, &r));
        size_t dsz = 0;
        CHECK_OK(ovl_delta_size(r, &dsz));
        CHECKF(dsz == dt_min(16384, cap), "%s: delta size %zu, expected the configured 16384", what,
               dsz);
        /* produce in order, one page-sized strip at a time */
        size_t pg = dt_page();
        for (size_t o = 0; o < end_at; o += pg) {
            size_t len = dt_min(pg, end_at - o);
            th_fill(rg.buf + o, len, key, o);
            if (annotate)
                CHECK_OK(ovl_delta_produced(r, o, len));
        }
        ovl_stats_t s1 = dt_stats();
        if (end_at < cap)
            CHECK_OK(ovl_delta_send_end(r, TH_COUNT((int)end_at)));
        else
            CHECK_OK(ovl_delta_send_end(r, NULL));
        /* A one-piece message was copied when it left: rewriting the buffer
         * now is invisible to the receiver (checked there). */
        if (want_no_fault)
            memset(rg.buf, 0x5a, end_at);
        st = (ovl_status_t){ .error = 1 };
        CHECK_OK(ovl_wait(&r, &st));
        CHECKF(st.error == OVL_SUCCESS && st.bytes == end_at, "%s: send status {%zu, %d}", what,
               st.bytes, st.error);
        ovl_stats_t s2 = dt_stats();
        if (want_pieces)
            CHECKF(s2.deltas_sent - s0.deltas_sent == want_pieces,
                   "%s: %" PRIu64 " pieces sent, expected %" PRIu64, what,
                   s2.deltas_sent - s0.deltas_sent, want_pieces);
        if (want_no_fault)
            CHECKF(s1.faults == s0.faults,
                   "%s: the sender took %" PRIu64 " faults writing a one-piece message", what,
                   s1.faults - s0.faults);
        else if (mon != OVL_MONITOR_EXPLICIT && !annotate)
            CHECKF(s1.faults > s0.faults, "%s: no fault while writing %zu bytes in 16 KiB deltas",
                   what, cap);
    } else {
        ovl_stats_t s0 = dt_stats();
        CHECK_OK(ovl_delta_recv(rg.buf, (int)cap, MPI_BYTE, peer, 40 + round, NULL, &r));
        /* use what was sent at once: read every page in order, need first
         * in explicit mode */
        size_t pg = dt_page();
        for (size_t o = 0; o < end_at; o += pg) {
            size_t len = dt_min(pg, end_at - o);
            if (mon == OVL_MONITOR_EXPLICIT)
                CHECK_OK(ovl_delta_need(r, o, len));
            size_t bad = th_verify(rg.buf + o, len, key, o);
            CHECKF(bad == TH_OK, "%s: byte %zu of %zu: %#x, expected %#x", what, o + bad, end_at,
                   rg.buf[o + bad], th_pattern_byte(key, o + bad));
        }
        st = (ovl_status_t){ .error = 1 };
        CHECK_OK(ovl_wait(&r, &st));
        CHECKF(st.error == OVL_SUCCESS && st.bytes == end_at && st.source == peer &&
                   st.tag == 40 + round,
               "%s: receive status {%d, %d, %zu, %d}, expected %zu bytes", what, st.source, st.tag,
               st.bytes, st.error, end_at);
        size_t bad = th_verify(rg.buf, end_at, key, 0);
        CHECKF(bad == TH_OK, "%s: byte %zu of %zu wrong after ovl_wait", what, bad, end_at);
        ovl_stats_t s1 = dt_stats();
        if (want_pieces)
            CHECKF(s1.deltas_received - s0.deltas_received == want_pieces,
                   "%s: %" PRIu64 " pieces received, expected %" PRIu64, what,
                   s1.deltas_received - s0.deltas_received, want_pieces);
    }
    size_t sb = dt_sentinel_check(&rg);
    CHECKF(sb == TH_OK, "%s: sentinel byte %zu around the buffer changed", what, sb);
    dt_region_free(&rg);
    if (th_rank == 0)
        printf("test_delta_pieces: %s: ok\n", what);
}

int main(int argc, char **argv)
{
    dt_init(&argc, &argv, "test_delta_pieces", NULL);
    CHECKF(th_size % 2 == 0, "needs an even number of ranks, got %d", th_size);
    peer = th_rank ^ 1;
    even = th_rank % 2 == 0;
    mon = dt_monitor();
    const size_t pg = dt_page();
    const int fault = mon != OVL_MONITOR_EXPLICIT;

    dt_phase("one piece", 30);
    one_case("one piece, aligned", 3 * pg + 100, 0, 3 * pg + 100, 0, 1, fault, 1);
    one_case("one piece, unaligned", 2 * pg, 1000, 2 * pg, 0, 1, fault, 2);
    dt_phase("one piece, shorter", 30);
    one_case("one piece, ended at 5000 of 3 pages", 3 * pg, 0, 5000, 0, 1, fault, 3);
    dt_phase("several pieces", 30);
    /* fault-triggered: 2 pieces; explicit without annotations: all at
     * send_end, one 32 KiB piece */
    one_case("8 pages in 16 KiB deltas", 8 * pg, 0, 8 * pg, 0, fault ? 2 : 1, 0, 4);
    one_case("8 pages in 16 KiB deltas, unaligned", 8 * pg, 24, 8 * pg, 0, 0, 0, 5);
    dt_phase("several pieces, annotated", 30);
    /* 2 pieces as produced, the second ends the message; under a fault
     * monitor the annotations move the sent prefix (one piece per page
     * once the first delta has been opened) and the rest goes at send_end */
    one_case("8 pages annotated", 8 * pg, 0, 8 * pg, 1, fault ? 0 : 2, 0, 6);
    return dt_finish();
}
