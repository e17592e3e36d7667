/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_interop: delta messages meet plain ones, and monitors mix.
 *  - the first delta message after plain ones (runs first, before any
 *    delta has been exchanged): receives posted early are pre-posted to
 *    MPI, and must still take the messages in order when a delta header
 *    arrives among them; the plain messages after it (header + body, one
 *    with a derived datatype on both sides) and a wildcard receive too;
 *  - every pairing of sender (ovl_isend, delta send with uffd / mprotect /
 *    explicit, chosen per request in their ovl_param_t) and receiver
 *    (ovl_irecv, delta receive with each monitor): all in flight at once in
 *    one program, buffers produced interleaved, receive buffers used before
 *    ovl_wait in random order; status and every byte checked;
 *  - OVL_ANY_SOURCE / OVL_ANY_TAG delta receives (each monitor) report the
 *    real source, tag and size, the data used while pending;
 *  - order: ovl_isend and delta sends on one tag are received in the order
 *    they were started (by ovl_irecv and ovl_delta_recv, alternating), also
 *    when a later delta send is finished before an earlier one;
 *  - truncation: a longer message into a delta receive, and a delta send
 *    into a short ovl_irecv -> OVL_ERR_TRUNCATE, the first count elements
 *    in place, nothing written past the buffer;
 *  - resend: ovl_isend of a delta receive's whole buffer before anything
 *    arrived is forwarded as it arrives (received by ovl_irecv, checked);
 *    ovl_isend of a part of it, ovl_put of it, and delta sends of a part
 *    of it or of a range shifted from its start (any monitor) are
 *    OVL_ERR_PENDING until it has arrived (fault monitors), and the
 *    receive's data still arrives intact; afterwards the part goes by
 *    ovl_isend and by delta send.
 * Pairs: rank r with r^1; wildcards: a ring. Mode "big" (its own ctest):
 * a plain message over 2 GiB into a delta receive.
 */
#include "delta_common.h"

#define KIND_PLAIN (-1) /* ovl_isend / ovl_irecv */

static int peer, even;
static ovl_monitor_t monitors[3];
static int nmon;

static const char *kind_name(int k)
{
    return k == KIND_PLAIN ? "plain" : ovl_monitor_name((ovl_monitor_t)k);
}

/* ---- the first delta after plain messages ---------------------------------------- */

static void first_delta(void)
{
    enum { N = 6, TAG = 650, NBLK = 64, BLK = 16, STRIDE = 40 };
    /* message i: size (0: the strided one), delta or not */
    static const size_t sizes[N] = { 300000, 3000, 200000, 0, 1, 70000 };
    static const int is_delta[N] = { 0, 0, 1, 0, 0, 1 };
    const size_t vspan = (size_t)(NBLK - 1) * STRIDE + BLK, vbytes = (size_t)NBLK * BLK;
    MPI_Datatype vec;
    CHECK_MPI(MPI_Type_vector(NBLK, BLK, STRIDE, MPI_BYTE, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    unsigned char *in[N], *out[N];
    ovl_request_t rq[N], sq[N];
    for (int i = 0; i < N; i++) {
        size_t n = sizes[i] ? sizes[i] : vspan;
        in[i] = dt_alloc(n + 64);
        out[i] = dt_alloc(n);
        CHECK(in[i] && out[i]);
        memset(in[i], 0xee, n + 64);
        th_fill(out[i], n, 0x1f00 + (uint64_t)(th_rank * 16 + i), 0);
    }
    /* all receives before any message: nothing is mixed yet, so those with
     * a definite source are handed to MPI; the last is a wildcard */
    for (int i = 0; i < N; i++) {
        int src = i == N - 1 ? OVL_ANY_SOURCE : peer;
        if (sizes[i])
            CHECK_OK(ovl_irecv(in[i], (int)(sizes[i] + 64), MPI_BYTE, src, TAG, &rq[i]));
        else
            CHECK_OK(ovl_irecv(in[i], 1, vec, src, TAG, &rq[i]));
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
        if (!sizes[i]) {
            CHECK_OK(ovl_isend(out[i], 1, vec, peer, TAG, &sq[i]));
        } else if (!is_delta[i]) {
            CHECK_OK(ovl_isend(out[i], (int)sizes[i], MPI_BYTE, peer, TAG, &sq[i]));
        } else {
            CHECK_OK(ovl_delta_send_begin(out[i], (int)sizes[i], MPI_BYTE, peer, TAG,
                                          TH_MONITOR(OVL_MONITOR_EXPLICIT), &sq[i]));
            CHECK_OK(ovl_delta_produced(sq[i], 0, sizes[i]));
            CHECK_OK(ovl_delta_send_end(sq[i], NULL));
        }
    }
    for (int i = 0; i < N; i++) {
        uint64_t key = 0x1f00 + (uint64_t)(peer * 16 + i);
        ovl_status_t st = { .error = 1 };
        CHECK_OK(ovl_wait(&rq[i], &st));
        size_t want = sizes[i] ? sizes[i] : vbytes;
        CHECKF(st.error == OVL_SUCCESS && st.bytes == want && st.source == peer && st.tag == TAG,
               "receive %d: status {%d, %d, %zu, %d}, expected message %d {%d, %d, %zu}", i,
               st.source, st.tag, st.bytes, st.error, i, peer, TAG, want);
        if (sizes[i]) {
            size_t bad = th_verify(in[i], sizes[i], key, 0);
            CHECKF(bad == TH_OK, "receive %d: byte %zu wrong: order lost", i, bad);
            for (size_t k = sizes[i]; k < sizes[i] + 64; k++)
                CHECKF(in[i][k] == 0xee, "receive %d: byte %zu past the message written", i, k);
        } else {
            /* the blocks at the same places, the gaps untouched */
            unsigned char *ref = dt_alloc(vspan);
            CHECK(ref);
            th_fill(ref, vspan, key, 0);
            for (size_t k = 0; k < vspan + 64; k++) {
                int inblk = k < vspan && (k % STRIDE) < BLK;
                CHECKF(in[i][k] == (inblk ? ref[k] : 0xee), "strided receive: byte %zu wrong", k);
            }
            dt_free(ref, vspan);
        }
    }
    CHECK_OK(ovl_waitall(N, sq, OVL_STATUS_IGNORE));
    for (int i = 0; i < N; i++) {
        size_t n = sizes[i] ? sizes[i] : vspan;
        dt_free(in[i], n + 64);
        dt_free(out[i], n);
    }
    CHECK_MPI(MPI_Type_free(&vec));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
}

/* ---- the matrix -------------------------------------------------------------- */

struct xfer {
    int skind, rkind, tag;
    size_t sbytes, rbytes;
    unsigned char *sbuf, *rbuf;
    ovl_request_t sreq, rreq;
    uint64_t skey, rkey;
};

static size_t xfer_bytes(int src, int tag)
{
    th_rng_t r;
    th_rng_init(&r, 0x1a7e, (uint64_t)src, (uint64_t)tag);
    return 1 + (size_t)th_below(&r, (size_t)1 << 20);
}

static void matrix(void)
{
    int kinds[4] = { KIND_PLAIN };
    for (int i = 0; i < nmon; i++)
        kinds[1 + i] = (int)monitors[i];
    int nk = 1 + nmon, n = 0;
    struct xfer x[16];
    th_rng_t rng;
    th_rng_init(&rng, 0x3a7, (uint64_t)th_rank, 0);
    for (int a = 0; a < nk; a++)
        for (int b = 0; b < nk; b++) {
            if (a == 0 && b == 0)
                continue; /* plain to plain: test_message */
            struct xfer *t = &x[n];
            t->skind = kinds[a];
            t->rkind = kinds[b];
            t->tag = 10 + n;
            t->sbytes = xfer_bytes(th_rank, t->tag);
            t->rbytes = xfer_bytes(peer, t->tag);
            t->skey = 0x3a70000 + ((uint64_t)th_rank << 8) + (uint64_t)t->tag;
            t->rkey = 0x3a70000 + ((uint64_t)peer << 8) + (uint64_t)t->tag;
            t->sbuf = dt_alloc(t->sbytes);
            t->rbuf = dt_alloc(t->rbytes);
            CHECK(t->sbuf && t->rbuf);
            n++;
        }
    /* receives first, then the delta sends begin, all at once */
    for (int i = 0; i < n; i++) {
        struct xfer *t = &x[i];
        if (t->rkind == KIND_PLAIN)
            CHECK_OK(ovl_irecv(t->rbuf, (int)t->rbytes, MPI_BYTE, peer, t->tag, &t->rreq));
        else
            CHECK_OK(ovl_delta_recv(t->rbuf, (int)t->rbytes, MPI_BYTE, peer, t->tag,
                                    TH_MONITOR((ovl_monitor_t)t->rkind), &t->rreq));
    }
    for (int i = 0; i < n; i++) {
        struct xfer *t = &x[i];
        if (t->skind != KIND_PLAIN)
            CHECK_OK(ovl_delta_send_begin(t->sbuf, (int)t->sbytes, MPI_BYTE, peer, t->tag,
                                          TH_MONITOR((ovl_monitor_t)t->skind), &t->sreq));
    }
    /* produce: every buffer in order, strips of all buffers interleaved */
    size_t strip = 2 * dt_page() + 11;
    for (size_t o = 0; o < ((size_t)1 << 20); o += strip) {
        for (int i = 0; i < n; i++) {
            struct xfer *t = &x[i];
            if (o >= t->sbytes)
                continue;
            size_t len = dt_min(strip, t->sbytes - o);
            th_fill(t->sbuf + o, len, t->skey, o);
            if (t->skind == OVL_MONITOR_EXPLICIT)
                CHECK_OK(ovl_delta_produced(t->sreq, o, len));
        }
    }
    for (int i = 0; i < n; i++) {
        struct xfer *t = &x[i];
        if (t->skind == KIND_PLAIN)
            CHECK_OK(ovl_isend(t->sbuf, (int)t->sbytes, MPI_BYTE, peer, t->tag, &t->sreq));
        else
            CHECK_OK(ovl_delta_send_end(t->sreq, NULL));
    }
    /* use the delta receive buffers before waiting */
    for (int i = 0; i < n; i++) {
        struct xfer *t = &x[i];
        if (t->rkind != KIND_PLAIN)
            dt_use(t->rreq, t->rkind == OVL_MONITOR_EXPLICIT, t->rbuf, t->rbytes, t->rkey, &rng);
    }
    for (int i = 0; i < n; i++) {
        struct xfer *t = &x[i];
        ovl_status_t st = { .error = 1 };
        CHECK_OK(ovl_wait(&t->rreq, &st));
        CHECKF(st.source == peer && st.tag == t->tag && st.bytes == t->rbytes &&
                   st.error == OVL_SUCCESS,
               "%s -> %s: status {%d, %d, %zu, %d}, expected %zu bytes", kind_name(t->skind),
               kind_name(t->rkind), st.source, st.tag, st.bytes, st.error, t->rbytes);
        size_t bad = t->rkind == KIND_PLAIN ? th_verify(t->rbuf, t->rbytes, t->rkey, 0)
                                            : dt_check_used(t->rbuf, t->rbytes, t->rkey);
        CHECKF(bad == TH_OK, "%s -> %s: byte %zu of %zu wrong", kind_name(t->skind),
               kind_name(t->rkind), bad, t->rbytes);
        st = (ovl_status_t){ .error = 1 };
        CHECK_OK(ovl_wait(&t->sreq, &st));
        CHECK(st.bytes == t->sbytes && st.error == OVL_SUCCESS);
        dt_free(t->sbuf, t->sbytes);
        dt_free(t->rbuf, t->rbytes);
    }
    if (th_rank == 0)
        printf("test_delta_interop: %d sender/receiver pairings in flight at once\n", n);
}

/* ---- wildcards ----------------------------------------------------------------- */

static void wildcards(void)
{
    int right = (th_rank + 1) % th_size, left = (th_rank + th_size - 1) % th_size;
    th_rng_t rng;
    th_rng_init(&rng, 0x11d, (uint64_t)th_rank, 0);
    for (int i = 0; i < nmon; i++) {
        for (int w = 0; w < 3; w++) {
            ovl_monitor_t m = monitors[i];
            int stag = 400 + 10 * i + w;
            /* w = 0: any source and tag; 1: any source; 2: any tag */
            int src = w == 2 ? left : OVL_ANY_SOURCE, rtag = w == 1 ? stag : OVL_ANY_TAG;
            size_t cap = (size_t)1 << 20, sbytes = 100000 + 4097 * (size_t)th_rank;
            size_t rbytes = 100000 + 4097 * (size_t)left;
            uint64_t skey = 0x11d00 + (uint64_t)(th_rank * 64 + stag);
            uint64_t rkey = 0x11d00 + (uint64_t)(left * 64 + stag);
            dt_region_t in, out;
            dt_region_alloc(&in, cap, 17, 0xa1);
            dt_region_alloc(&out, sbytes, 0, 0xa2);
            ovl_request_t rr, sr;
            ovl_status_t st = { .error = 1 };
            CHECK_OK(ovl_delta_recv(in.buf, (int)cap, MPI_BYTE, src, rtag, TH_MONITOR(m), &rr));
            if (w == 1) { /* a plain send into the wildcard delta receive */
                th_fill(out.buf, sbytes, skey, 0);
                CHECK_OK(ovl_isend(out.buf, (int)sbytes, MPI_BYTE, right, stag, &sr));
            } else {
                CHECK_OK(ovl_delta_send_begin(out.buf, (int)sbytes, MPI_BYTE, right, stag,
                                              TH_MONITOR(m), &sr));
                dt_produce(sr, out.buf, sbytes, skey,
                           m == OVL_MONITOR_EXPLICIT ? DT_PROD_RANDOM : DT_PROD_PLAIN, &rng);
                CHECK_OK(ovl_delta_send_end(sr, NULL));
            }
            /* only the left neighbour sends here: use the data at once,
             * the page holding the end of the message (shorter than the
             * buffer) too */
            dt_use(rr, m == OVL_MONITOR_EXPLICIT, in.buf, rbytes, rkey, &rng);
            CHECK_OK(ovl_wait(&rr, &st));
            CHECKF(st.source == left && st.tag == 400 + 10 * i + w && st.bytes == rbytes &&
                       st.error == OVL_SUCCESS,
                   "%s wildcard %d: status {%d, %d, %zu, %d}, expected {%d, %d, %zu}",
                   ovl_monitor_name(m), w, st.source, st.tag, st.bytes, st.error, left, stag,
                   rbytes);
            CHECK(dt_check_used(in.buf, rbytes, rkey) == TH_OK);
            CHECK_OK(ovl_wait(&sr, &st));
            CHECK(st.bytes == sbytes && st.error == OVL_SUCCESS);
            CHECK(dt_sentinel_check(&in) == TH_OK && dt_sentinel_check(&out) == TH_OK);
            dt_region_free(&in);
            dt_region_free(&out);
            /* the next round's wildcards must not see this round's messages */
            CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        }
    }
}

/* ---- order on one tag --------------------------------------------------------- */

static void order(void)
{
    enum { N = 6, TAG = 600 };
    /* message i: size, and how it is sent / received */
    static const size_t sizes[N] = { 1000, 300000, 5000, 2000000, 1, 700000 };
    size_t cap = 2000000;
    th_rng_t rng;
    th_rng_init(&rng, 0x0de, (uint64_t)th_rank, 0);
    for (int round = 0; round < nmon; round++) {
        ovl_monitor_t m = monitors[round];
        int ex = m == OVL_MONITOR_EXPLICIT;
        unsigned char *in[N], *out[N];
        ovl_request_t rq[N], sq[N];
        for (int i = 0; i < N; i++) {
            in[i] = dt_alloc(cap);
            out[i] = dt_alloc(sizes[i]);
            CHECK(in[i] && out[i]);
        }
        /* receives alternate: delta, plain, delta, ... */
        for (int i = 0; i < N; i++) {
            if (i % 2 == 0)
                CHECK_OK(
                    ovl_delta_recv(in[i], (int)cap, MPI_BYTE, peer, TAG, TH_MONITOR(m), &rq[i]));
            else
                CHECK_OK(ovl_irecv(in[i], (int)cap, MPI_BYTE, peer, TAG, &rq[i]));
        }
        /* sends alternate the other way: plain, delta, plain, ... The last
         * two are both delta sends, the later one finished first. */
        for (int i = 0; i < N; i++) {
            uint64_t key = 0x0de00 + (uint64_t)(th_rank * 16 + i);
            if (i % 2 == 0 && i < N - 2) {
                th_fill(out[i], sizes[i], key, 0);
                CHECK_OK(ovl_isend(out[i], (int)sizes[i], MPI_BYTE, peer, TAG, &sq[i]));
            } else {
                CHECK_OK(ovl_delta_send_begin(out[i], (int)sizes[i], MPI_BYTE, peer, TAG,
                                              TH_MONITOR(m), &sq[i]));
                if (i < N - 2) {
                    dt_produce(sq[i], out[i], sizes[i], key, ex ? DT_PROD_INORDER : DT_PROD_PLAIN,
                               &rng);
                    CHECK_OK(ovl_delta_send_end(sq[i], NULL));
                }
            }
        }
        for (int i = N - 1; i >= N - 2; i--) {
            uint64_t key = 0x0de00 + (uint64_t)(th_rank * 16 + i);
            dt_produce(sq[i], out[i], sizes[i], key, ex ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
            CHECK_OK(ovl_delta_send_end(sq[i], NULL));
        }
        for (int i = 0; i < N; i++) {
            uint64_t key = 0x0de00 + (uint64_t)(peer * 16 + i);
            if (i % 2 == 0)
                dt_use(rq[i], ex, in[i], sizes[i], key, &rng);
            ovl_status_t st = { .error = 1 };
            CHECK_OK(ovl_wait(&rq[i], &st));
            CHECKF(st.bytes == sizes[i] && st.source == peer && st.tag == TAG &&
                       st.error == OVL_SUCCESS,
                   "%s: receive %d got %zu bytes, expected message %d (%zu bytes): order lost",
                   ovl_monitor_name(m), i, st.bytes, i, sizes[i]);
            size_t bad = i % 2 == 0 ? dt_check_used(in[i], sizes[i], key)
                                    : th_verify(in[i], sizes[i], key, 0);
            CHECKF(bad == TH_OK, "%s: receive %d: byte %zu wrong", ovl_monitor_name(m), i, bad);
        }
        CHECK_OK(ovl_waitall(N, sq, OVL_STATUS_IGNORE));
        for (int i = 0; i < N; i++) {
            dt_free(in[i], cap);
            dt_free(out[i], sizes[i]);
        }
    }
}

/* ---- truncation ------------------------------------------------------------------ */

static void truncation(void)
{
    th_rng_t rng;
    th_rng_init(&rng, 0x7c, (uint64_t)th_rank, 0);
    for (int i = 0; i < nmon; i++) {
        ovl_monitor_t m = monitors[i];
        for (int c = 0; c < 3; c++) {
            /* c = 0: plain 1000 B into a 600 B delta receive; 1: delta 3 MB
             * into a 1 MB delta receive; 2: delta 3 MB into a 1 MB ovl_irecv */
            size_t sbytes = c == 0 ? 1000 : (size_t)3 << 20;
            size_t rbytes = c == 0 ? 600 : (size_t)1 << 20;
            int tag = 700 + 10 * i + c;
            uint64_t key = 0x7c00 + (uint64_t)(th_rank / 2 * 64 + tag);
            dt_region_t r;
            ovl_request_t req;
            ovl_status_t st = { .error = 0 };
            if (even) {
                dt_region_alloc(&r, sbytes, 0, 0x7c1);
                if (c == 0) {
                    th_fill(r.buf, sbytes, key, 0);
                    CHECK_OK(ovl_isend(r.buf, (int)sbytes, MPI_BYTE, peer, tag, &req));
                } else {
                    CHECK_OK(ovl_delta_send_begin(r.buf, (int)sbytes, MPI_BYTE, peer, tag,
                                                  TH_MONITOR(m), &req));
                    dt_produce(req, r.buf, sbytes, key,
                               m == OVL_MONITOR_EXPLICIT ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
                    CHECK_OK(ovl_delta_send_end(req, NULL));
                }
                /* not specified by MPI on the sender's side: it must complete */
                int rc = ovl_wait(&req, &st);
                CHECKF(rc == OVL_SUCCESS || rc == OVL_ERR_TRUNCATE || rc == OVL_ERR_MPI,
                       "%s case %d: sender %s", ovl_monitor_name(m), c, th_code_name(rc));
            } else {
                /* the buffer ends 10 bytes before its last page does */
                size_t pg = dt_page();
                size_t off = (pg - (rbytes + 10) % pg) % pg;
                dt_region_alloc(&r, rbytes, off, 0x7c2);
                if (c == 2)
                    CHECK_OK(ovl_irecv(r.buf, (int)rbytes, MPI_BYTE, peer, tag, &req));
                else
                    CHECK_OK(ovl_delta_recv(r.buf, (int)rbytes, MPI_BYTE, peer, tag, TH_MONITOR(m),
                                            &req));
                if (c != 2 && m == OVL_MONITOR_EXPLICIT) {
                    int rc = ovl_delta_need(req, 0, rbytes);
                    CHECKF(rc == OVL_SUCCESS || rc == OVL_ERR_TRUNCATE, "need: %s",
                           th_code_name(rc));
                }
                if (c != 2) { /* the first count elements arrive */
                    size_t bad = th_verify(r.buf, rbytes, key, 0);
                    CHECKF(bad == TH_OK, "%s case %d: byte %zu wrong before ovl_wait",
                           ovl_monitor_name(m), c, bad);
                }
                EXPECT_ERR(ovl_wait(&req, &st), OVL_ERR_TRUNCATE);
                CHECK(st.error == OVL_ERR_TRUNCATE && req == OVL_REQUEST_NULL);
                size_t bad = th_verify(r.buf, rbytes, key, 0);
                CHECKF(bad == TH_OK, "%s case %d: byte %zu of the first %zu wrong",
                       ovl_monitor_name(m), c, bad, rbytes);
            }
            size_t bad = dt_sentinel_check(&r);
            CHECKF(bad == TH_OK, "%s case %d: %s: byte %zu past the buffer's end changed",
                   ovl_monitor_name(m), c, even ? "sender" : "receiver", bad);
            dt_region_free(&r);
        }
    }
}

/* ---- sending a buffer that is still arriving ---------------------------------- */

/* The odd rank delta-receives a buffer under each fault monitor and, before
 * any byte has come (the sender waits for a barrier), ovl_isends all of it
 * back (forwarded as it arrives), tries a part of it with ovl_isend, its
 * whole with ovl_put, and parts of it with delta sends (OVL_ERR_PENDING,
 * nothing sent: a delta send's own write protection would undo the
 * receive's guards, or, under uffd, replace its registration and lose
 * pages), then after ovl_wait sends the part, which now goes, by ovl_isend
 * and by delta send. The even rank checks the three messages. */
static void resend(void)
{
    size_t pg = dt_page(), bytes = 64 * pg + 77;
    void *segb = NULL;
    ovl_segment_t seg;
    CHECK_OK(ovl_segment_create(bytes, &segb, &seg));
    for (int m = 0; m < nmon; m++) {
        if (monitors[m] == OVL_MONITOR_EXPLICIT)
            continue; /* nothing is guarded: ovl_delta_need is the program's job */
        uint64_t key = 0x5e5e0 + (uint64_t)m;
        int tag = 70 + 4 * m;
        unsigned char *b = dt_alloc(bytes);
        th_rng_t rng;
        th_rng_init(&rng, 0x5e5, (uint64_t)th_rank, (uint64_t)m);
        if (even) {
            unsigned char *back = dt_alloc(bytes), *part = dt_alloc(bytes);
            ovl_request_t s, r1, r2;
            MPI_Barrier(MPI_COMM_WORLD); /* the peer has tried its sends */
            CHECK_OK(ovl_irecv(back, (int)bytes, MPI_BYTE, peer, tag + 1, &r1));
            CHECK_OK(ovl_delta_send_begin(b, (int)bytes, MPI_BYTE, peer, tag, NULL, &s));
            dt_produce(s, b, bytes, key, DT_PROD_PLAIN, &rng);
            CHECK_OK(ovl_wait(&s, NULL));
            ovl_status_t st;
            CHECK_OK(ovl_wait(&r1, &st));
            CHECK(st.bytes == bytes);
            size_t bad = th_verify(back, bytes, key, 0);
            CHECKF(bad == TH_OK, "%s: forwarded byte %zu wrong", ovl_monitor_name(monitors[m]),
                   bad);
            CHECK_OK(ovl_irecv(part, (int)(bytes - pg), MPI_BYTE, peer, tag + 2, &r2));
            CHECK_OK(ovl_wait(&r2, &st));
            CHECK(st.bytes == bytes - pg);
            CHECK(th_verify(part, bytes - pg, key, pg) == TH_OK);
            memset(part, 0, bytes);
            CHECK_OK(ovl_delta_recv(part, (int)(bytes - pg), MPI_BYTE, peer, tag + 3, NULL, &r2));
            CHECK_OK(ovl_wait(&r2, &st));
            CHECK(st.bytes == bytes - pg && st.error == OVL_SUCCESS);
            CHECKF(th_verify(part, bytes - pg, key, pg) == TH_OK,
                   "%s: the part sent by delta send after arrival is wrong",
                   ovl_monitor_name(monitors[m]));
            dt_free(back, bytes);
            dt_free(part, bytes);
        } else {
            ovl_request_t r, f, p2 = OVL_REQUEST_NULL;
            CHECK_OK(
                ovl_delta_recv(b, (int)bytes, MPI_BYTE, peer, tag, TH_MONITOR(monitors[m]), &r));
            CHECK_OK(ovl_isend(b, (int)bytes, MPI_BYTE, peer, tag + 1, &f));
            EXPECT_ERR(ovl_isend(b + pg, (int)(bytes - pg), MPI_BYTE, peer, tag + 2, &p2),
                       OVL_ERR_PENDING);
            CHECK(p2 == OVL_REQUEST_NULL);
            EXPECT_ERR(ovl_put(b, peer, 0, bytes, seg, NULL), OVL_ERR_PENDING);
            /* delta sends overlapping it, other than from its start */
            ovl_request_t d2 = OVL_REQUEST_NULL;
            EXPECT_ERR(
                ovl_delta_send_begin(b + pg, (int)(bytes - pg), MPI_BYTE, peer, tag + 3, NULL, &d2),
                OVL_ERR_PENDING);
            EXPECT_ERR(ovl_delta_send_begin(b + 1, (int)(bytes - 1), MPI_BYTE, peer, tag + 3,
                                            TH_MONITOR(OVL_MONITOR_EXPLICIT), &d2),
                       OVL_ERR_PENDING);
            for (int k = 0; k < nmon; k++)
                EXPECT_ERR(ovl_delta_send_begin(b + bytes / 2, (int)(bytes / 4), MPI_BYTE, peer,
                                                tag + 3, TH_MONITOR(monitors[k]), &d2),
                           OVL_ERR_PENDING);
            CHECK(d2 == OVL_REQUEST_NULL);
            MPI_Barrier(MPI_COMM_WORLD);
            CHECK_OK(ovl_wait(&r, NULL));
            size_t bad = th_verify(b, bytes, key, 0);
            CHECKF(bad == TH_OK, "%s: byte %zu of the receive wrong after refused delta sends",
                   ovl_monitor_name(monitors[m]), bad);
            CHECK_OK(ovl_isend(b + pg, (int)(bytes - pg), MPI_BYTE, peer, tag + 2, &p2));
            CHECK_OK(ovl_wait(&p2, NULL));
            CHECK_OK(ovl_delta_send_begin(b + pg, (int)(bytes - pg), MPI_BYTE, peer, tag + 3, NULL,
                                          &d2));
            CHECK_OK(ovl_delta_send_end(d2, NULL));
            CHECK_OK(ovl_wait(&d2, NULL));
            CHECK_OK(ovl_wait(&f, NULL));
            CHECK(th_verify(b, bytes, key, 0) == TH_OK);
        }
        dt_free(b, bytes);
    }
    CHECK_OK(ovl_segment_free(&seg));
}

/* ---- a message over 2 GiB --------------------------------------------------- */

/* Mode "big" (its own ctest, 2 ranks): a plain ovl_isend of 2 GiB + 24
 * bytes (MPI_DOUBLE) into an ovl_delta_recv, its first, middle and last
 * pages read while it arrives, then every byte checked. MPI's int count
 * cannot say that many bytes (ovl receives it with a datatype of that
 * size). Skipped where memory is short. */
static long long mem_available_mib(void)
{
    long long kib = -1;
    char line[128];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib < 0 ? -1 : kib / 1024;
}

static int big(void)
{
    const int count = (1 << 28) + 3;
    const size_t bytes = (size_t)count * sizeof(double), pg = dt_page();
    /* each rank one buffer, plus the receiver's staging or shadow */
    int ok = mem_available_mib() > (long long)(bytes >> 20) * 3 + 1024, all = 0;
    CHECK_MPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (!all) {
        if (th_rank == 0)
            printf("test_delta_interop big: SKIPPED: not enough memory for 2 x %zu bytes\n", bytes);
        fflush(stdout);
        dt_watchdog_stop();
        CHECK_OK(ovl_finalize());
        MPI_Finalize();
        return 77;
    }
    uint64_t key = 0xb16 + (uint64_t)(th_rank / 2);
    unsigned char *b = dt_alloc(bytes);
    ovl_request_t req;
    ovl_status_t st = { .error = 1 };
    if (even) {
        th_fill(b, bytes, key, 0);
        CHECK_OK(ovl_isend(b, count, MPI_DOUBLE, peer, 90, &req));
        CHECK_OK(ovl_wait(&req, &st));
    } else {
        int ex = dt_monitor() == OVL_MONITOR_EXPLICIT;
        CHECK_OK(ovl_delta_recv(b, count, MPI_DOUBLE, peer, 90, NULL, &req));
        const size_t at[3] = { 0, bytes / 2, bytes - pg };
        for (int i = 0; i < 3; i++) {
            if (ex)
                CHECK_OK(ovl_delta_need(req, at[i], pg));
            size_t bad = th_verify(b + at[i], pg, key, at[i]);
            CHECKF(bad == TH_OK, "byte %zu wrong while arriving", at[i] + bad);
        }
        CHECK_OK(ovl_wait(&req, &st));
        CHECKF(st.bytes == bytes && st.error == OVL_SUCCESS, "status {%zu, %d}, expected %zu bytes",
               st.bytes, st.error, bytes);
        size_t bad = th_verify(b, bytes, key, 0);
        CHECKF(bad == TH_OK, "byte %zu of %zu wrong", bad, bytes);
    }
    dt_free(b, bytes);
    return dt_finish();
}

int main(int argc, char **argv)
{
    int big_mode = argc > 1 && strcmp(argv[1], "big") == 0;
    dt_init(&argc, &argv, big_mode ? "test_delta_interop big" : "test_delta_interop", NULL);
    peer = th_rank ^ 1;
    even = th_rank % 2 == 0;
    CHECKF(peer < th_size, "test_delta_interop needs an even number of ranks");
    if (dt_uffd_available())
        monitors[nmon++] = OVL_MONITOR_UFFD;
    else if (th_rank == 0)
        printf("test_delta_interop: NOTE: no userfaultfd here, uffd not tested\n");
    monitors[nmon++] = OVL_MONITOR_MPROTECT;
    monitors[nmon++] = OVL_MONITOR_EXPLICIT;
    if (big_mode) {
        dt_phase("a message over 2 GiB", 60);
        return big();
    }
    dt_phase("first delta", 30);
    first_delta();
    dt_phase("matrix", 60);
    matrix();
    dt_phase("wildcards", 30);
    wildcards();
    dt_phase("order", 30);
    order();
    dt_phase("truncation", 30);
    truncation();
    dt_phase("resend", 30);
    resend();
    return dt_finish();
}
