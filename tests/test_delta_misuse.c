/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_misuse: what delta send/receive must refuse or report.
 *  - before MPI and ovl: ovl_monitor_probe (auto resolves to uffd or
 *    mprotect, and to uffd whenever uffd itself probes fine; explicit and
 *    mprotect resolve to themselves; NULL / unknown -> OVL_ERR_ARG; the
 *    reason string is NUL-terminated within why_len), ovl_monitor_name,
 *    ovl_tag_ub() == 0, OVL_ERR_NOT_INIT;
 *  - ovl_tag_ub() == MPI_TAG_UB / 2 (ovl keeps the upper half); tag_ub
 *    itself works for delta messages, tag_ub + 1 is refused by every call;
 *  - argument errors of ovl_delta_send_begin / ovl_delta_recv, with and
 *    without a monitor in their param (NULL request, negative count, NULL
 *    buffer, MPI_DATATYPE_NULL, non-contiguous types, bad rank, bad tag,
 *    unknown monitor, a field_mask bit no OVL_PARAM_FIELD_* names or one
 *    the call does not take, named in the detail), a failed call leaves
 *    *req untouched; a param with field_mask 0 is not read;
 *  - request errors: ovl_delta_send_end on OVL_REQUEST_NULL, an ovl_isend /
 *    ovl_irecv / delta-receive request, twice; ovl_delta_send_end with a
 *    count (OVL_PARAM_FIELD_COUNT) negative, above the posted count, below
 *    what was already sent, or with a field it does not take (the request
 *    stays usable); ovl_delta_produced outside
 *    the buffer or on a non-delta request; ovl_delta_need on non-delta
 *    requests, outside the buffer, and from a continuation
 *    (OVL_ERR_IN_CALLBACK); ovl_delta_size;
 *  - OS-triggered stale writes (uffd and mprotect, per request): the whole
 *    buffer written, then bytes at its start written again before
 *    send_end -> a report on stderr naming the buffer and the offset (at
 *    the fault and at completion), the sender's and the receiver's
 *    requests complete with OVL_ERR_STALE, the program's write is not lost;
 *  - explicit mode: ovl_delta_produced over a range already sent ->
 *    OVL_ERR_STALE;
 *  - configuration: OVL_MONITOR / OVL_DELTA_SIZE bad values and a bad
 *    monitor field -> OVL_ERR_CONFIG; the fields win over the environment
 *    and ovl_delta_size reports the configured size;
 *  - mode "nomem" (its own ctest: /proc/self/mem made unusable): a fault
 *    monitor asked for by name fails (ovl_init, per request) with
 *    OVL_ERR_MONITOR, auto warns on stderr and gives explicit, which works.
 * Pairs: rank r with r^1; the even rank sends.
 */
#include "delta_common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/mman.h>
#include <unistd.h>

static int peer, even, uffd_ok;

static void before_init(void)
{
    ovl_monitor_t chosen = (ovl_monitor_t)-1;
    char why[256];
    CHECK(strcmp(ovl_monitor_name(OVL_MONITOR_AUTO), "auto") == 0);
    CHECK(strcmp(ovl_monitor_name(OVL_MONITOR_UFFD), "uffd") == 0);
    CHECK(strcmp(ovl_monitor_name(OVL_MONITOR_MPROTECT), "mprotect") == 0);
    CHECK(strcmp(ovl_monitor_name(OVL_MONITOR_EXPLICIT), "explicit") == 0);
    CHECK(ovl_monitor_name((ovl_monitor_t)42) != NULL);
    CHECK(strcmp(ovl_strerror(OVL_ERR_STALE), ovl_strerror(OVL_ERR_MONITOR)) != 0);
    CHECK(strcmp(ovl_strerror(OVL_ERR_STALE), ovl_strerror(12345)) != 0);

    /* probe works before MPI_Init */
    why[0] = 'x';
    int rc = ovl_monitor_probe(OVL_MONITOR_UFFD, &chosen, why, sizeof why);
    CHECKF(rc == OVL_SUCCESS || rc == OVL_ERR_UNSUPPORTED, "probe(uffd): %s", th_code_name(rc));
    CHECKF(strlen(why) > 0 && strlen(why) < sizeof why, "probe(uffd) gave no reason");
    uffd_ok = rc == OVL_SUCCESS;
    if (uffd_ok)
        CHECK(chosen == OVL_MONITOR_UFFD);
    printf("test_delta_misuse: probe(uffd): %s: %s\n", th_code_name(rc), why);

    chosen = (ovl_monitor_t)-1;
    CHECK_OK(ovl_monitor_probe(OVL_MONITOR_AUTO, &chosen, why, sizeof why));
    CHECKF(chosen == (uffd_ok ? OVL_MONITOR_UFFD : OVL_MONITOR_MPROTECT),
           "auto resolves to %s although uffd %s", ovl_monitor_name(chosen),
           uffd_ok ? "works" : "does not");
    CHECK(strlen(why) > 0);
    printf("test_delta_misuse: probe(auto): %s\n", why);
    chosen = (ovl_monitor_t)-1;
    CHECK_OK(ovl_monitor_probe(OVL_MONITOR_MPROTECT, &chosen, NULL, 0));
    CHECK(chosen == OVL_MONITOR_MPROTECT);
    chosen = (ovl_monitor_t)-1;
    CHECK_OK(ovl_monitor_probe(OVL_MONITOR_EXPLICIT, &chosen, why, sizeof why));
    CHECK(chosen == OVL_MONITOR_EXPLICIT);
    /* truncated reasons stay NUL-terminated */
    char small[5];
    memset(small, 'x', sizeof small);
    CHECK_OK(ovl_monitor_probe(OVL_MONITOR_AUTO, &chosen, small, sizeof small));
    CHECK(memchr(small, '\0', sizeof small) != NULL);
    small[0] = 'x';
    CHECK_OK(ovl_monitor_probe(OVL_MONITOR_AUTO, &chosen, small, 1));
    CHECK(small[0] == '\0');
    /* bad arguments; the output is untouched */
    chosen = (ovl_monitor_t)-1;
    EXPECT_ERR(ovl_monitor_probe(OVL_MONITOR_AUTO, NULL, why, sizeof why), OVL_ERR_ARG);
    EXPECT_ERR(ovl_monitor_probe((ovl_monitor_t)42, &chosen, why, sizeof why), OVL_ERR_ARG);
    EXPECT_ERR(ovl_monitor_probe((ovl_monitor_t)-3, &chosen, why, sizeof why), OVL_ERR_ARG);
    CHECK(chosen == (ovl_monitor_t)-1);

    CHECK(ovl_tag_ub() == 0);
    char buf[8];
    ovl_request_t r;
    EXPECT_REJECTED(ovl_delta_send_begin(buf, 8, MPI_BYTE, 0, 0, NULL, &r), OVL_ERR_NOT_INIT);
    EXPECT_REJECTED(ovl_delta_recv(buf, 8, MPI_BYTE, 0, 0, NULL, &r), OVL_ERR_NOT_INIT);
}

/* ---- argument and request errors ---------------------------------------------- */

struct need_in_cb {
    ovl_request_t delta;
    atomic_int runs;
    int rc;
};

static void need_cb(const ovl_status_t *st, void *arg)
{
    (void)st;
    struct need_in_cb *n = arg;
    n->rc = ovl_delta_need(n->delta, 0, 1);
    atomic_fetch_add(&n->runs, 1);
}

static void arguments(void)
{
    int tag_ub = ovl_tag_ub();
    int *mpi_ub = NULL, flag = 0;
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &mpi_ub, &flag));
    CHECK(flag && mpi_ub);
    CHECKF(tag_ub == *mpi_ub / 2, "ovl_tag_ub() %d, MPI_TAG_UB %d", tag_ub, *mpi_ub);

    char buf[64];
    ovl_request_t r;
    MPI_Datatype vec, resized, contig;
    CHECK_MPI(MPI_Type_vector(4, 1, 2, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    CHECK_MPI(MPI_Type_create_resized(MPI_INT, 0, 8, &resized)); /* gaps between elements */
    CHECK_MPI(MPI_Type_commit(&resized));
    CHECK_MPI(MPI_Type_contiguous(2, MPI_DOUBLE, &contig)); /* 16 bytes */
    CHECK_MPI(MPI_Type_commit(&contig));
    for (int send = 0; send < 2; send++) {
        for (int with = 0; with < 2; with++) {
            ovl_monitor_t m = OVL_MONITOR_MPROTECT;
#define POST(b, n, dt, p, t, rq)                                                        \
    (send ? (with ? ovl_delta_send_begin((b), (n), (dt), (p), (t), TH_MONITOR(m), (rq)) \
                  : ovl_delta_send_begin((b), (n), (dt), (p), (t), NULL, (rq)))         \
          : (with ? ovl_delta_recv((b), (n), (dt), (p), (t), TH_MONITOR(m), (rq))       \
                  : ovl_delta_recv((b), (n), (dt), (p), (t), NULL, (rq))))
            EXPECT_ERR(POST(buf, 8, MPI_BYTE, peer, 0, NULL), OVL_ERR_ARG);
            EXPECT_REJECTED(POST(buf, -1, MPI_BYTE, peer, 0, &r), OVL_ERR_ARG);
            EXPECT_REJECTED(POST(buf, INT_MIN, MPI_BYTE, peer, 0, &r), OVL_ERR_ARG);
            EXPECT_REJECTED(POST(NULL, 8, MPI_BYTE, peer, 0, &r), OVL_ERR_ARG);
            EXPECT_REJECTED(POST(buf, 8, MPI_DATATYPE_NULL, peer, 0, &r), OVL_ERR_ARG);
            EXPECT_REJECTED(POST(buf, 2, vec, peer, 0, &r), OVL_ERR_ARG);
            EXPECT_REJECTED(POST(buf, 4, resized, peer, 0, &r), OVL_ERR_ARG);
            EXPECT_REJECTED(POST(buf, 8, MPI_BYTE, -5, 0, &r), OVL_ERR_RANK);
            EXPECT_REJECTED(POST(buf, 8, MPI_BYTE, th_size, 0, &r), OVL_ERR_RANK);
            EXPECT_REJECTED(POST(buf, 8, MPI_BYTE, MPI_PROC_NULL, 0, &r), OVL_ERR_RANK);
            if (send || OVL_ANY_TAG != -1)
                EXPECT_REJECTED(POST(buf, 8, MPI_BYTE, peer, -1, &r), OVL_ERR_TAG);
            EXPECT_REJECTED(POST(buf, 8, MPI_BYTE, peer, -12345, &r), OVL_ERR_TAG);
            EXPECT_REJECTED(POST(buf, 8, MPI_BYTE, peer, tag_ub + 1, &r), OVL_ERR_TAG);
            if (*mpi_ub < INT_MAX)
                EXPECT_REJECTED(POST(buf, 8, MPI_BYTE, peer, *mpi_ub, &r), OVL_ERR_TAG);
#undef POST
        }
        /* unknown monitor */
        if (send)
            EXPECT_REJECTED(
                ovl_delta_send_begin(buf, 8, MPI_BYTE, peer, 0, TH_MONITOR((ovl_monitor_t)42), &r),
                OVL_ERR_ARG);
        else
            EXPECT_REJECTED(
                ovl_delta_recv(buf, 8, MPI_BYTE, peer, 0, TH_MONITOR((ovl_monitor_t)42), &r),
                OVL_ERR_ARG);
    }
    /* optional parameters: a field_mask bit no OVL_PARAM_FIELD_* names, or
     * one the call does not take, is refused before anything happens, and
     * the detail names it and what the call takes */
    {
        const ovl_param_t unknown = { .field_mask = OVL_PARAM_FIELD_MONITOR | (1ull << 40) };
        for (int send = 0; send < 2; send++) {
            EXPECT_REJECTED(send ? ovl_delta_send_begin(buf, 8, MPI_BYTE, peer, 0, &unknown, &r)
                                 : ovl_delta_recv(buf, 8, MPI_BYTE, peer, 0, &unknown, &r),
                            OVL_ERR_ARG);
            CHECKF(strstr(ovl_error_detail(), "bit 40") &&
                       strstr(ovl_error_detail(), "takes: OVL_PARAM_FIELD_MONITOR"),
                   "%s", ovl_error_detail());
            EXPECT_REJECTED(send ? ovl_delta_send_begin(buf, 8, MPI_BYTE, peer, 0, TH_COUNT(8), &r)
                                 : ovl_delta_recv(buf, 8, MPI_BYTE, peer, 0, TH_COUNT(8), &r),
                            OVL_ERR_ARG);
            CHECKF(strstr(ovl_error_detail(), "sets OVL_PARAM_FIELD_COUNT, which this call does "
                                              "not take") != NULL,
                   "%s", ovl_error_detail());
        }
    }
    /* a delta receive into shared memory: the fault monitors cannot guard
     * it (a clear error, the buffer untouched); explicit can */
    {
        size_t ps = (size_t)sysconf(_SC_PAGESIZE), shn = 3 * ps;
        unsigned char *sh =
            mmap(NULL, shn, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        CHECK(sh != MAP_FAILED);
        memset(sh, 0x7e, shn);
        for (int k = 0; k < 2; k++) { /* whole pages; a part of one page */
            ovl_monitor_t ms[] = { OVL_MONITOR_MPROTECT, OVL_MONITOR_UFFD };
            for (int mi = 0; mi < 2; mi++) {
                int cnt = k ? 200 : (int)(2 * ps);
                EXPECT_REJECTED(ovl_delta_recv(k ? sh + 100 : sh, cnt, MPI_BYTE, peer, 0,
                                               TH_MONITOR(ms[mi]), &r),
                                OVL_ERR_MONITOR);
                CHECKF(strstr(ovl_error_detail(), "shared memory") != NULL, "%s",
                       ovl_error_detail());
                for (size_t i = 0; i < shn; i++)
                    CHECKF(sh[i] == 0x7e, "%s: byte %zu changed", ovl_monitor_name(ms[mi]), i);
                sh[0] = 0x7e; /* not left guarded */
            }
        }
        munmap(sh, shn);
    }
    /* wildcards are for receives only */
    EXPECT_REJECTED(ovl_delta_send_begin(buf, 8, MPI_BYTE, OVL_ANY_SOURCE, 0, NULL, &r),
                    OVL_ERR_RANK);
    EXPECT_REJECTED(ovl_delta_send_begin(buf, 8, MPI_BYTE, peer, OVL_ANY_TAG, NULL, &r),
                    OVL_ERR_TAG);
    /* the reserved upper half of the tags is refused by plain messages too */
    EXPECT_REJECTED(ovl_isend(buf, 8, MPI_BYTE, peer, tag_ub + 1, &r), OVL_ERR_TAG);
    EXPECT_REJECTED(ovl_irecv(buf, 8, MPI_BYTE, peer, tag_ub + 1, &r), OVL_ERR_TAG);

    /* tag_ub itself works, and a contiguous derived type (buffers in
     * their own pages: see test_delta_interop for buffers sharing pages) */
    dt_region_t rin, rout;
    dt_region_alloc(&rin, 16 * sizeof(double), 0, 0x1a);
    dt_region_alloc(&rout, 16 * sizeof(double), 0, 0x1b);
    double *in = (double *)rin.buf, *out = (double *)rout.buf;
    for (int i = 0; i < 16; i++)
        out[i] = 1000.0 * th_rank + i;
    ovl_request_t q[2];
    ovl_status_t st[2];
    /* field_mask 0: no field is read (the monitor here is not one) */
    const ovl_param_t none = { .field_mask = 0, .monitor = (ovl_monitor_t)42, .count = -7 };
    CHECK_OK(ovl_delta_recv(in, 8, contig, peer, tag_ub, &none, &q[0]));
    CHECK_OK(ovl_delta_send_begin(out, 8, contig, peer, tag_ub, &none, &q[1]));
    CHECK_OK(ovl_delta_send_end(q[1], &none));
    CHECK_OK(ovl_waitall(2, q, st));
    CHECK(st[0].tag == tag_ub && st[0].source == peer && st[0].bytes == 16 * sizeof(double));
    for (int i = 0; i < 16; i++)
        CHECK(in[i] == 1000.0 * peer + i);
    CHECK(dt_sentinel_check(&rin) == TH_OK && dt_sentinel_check(&rout) == TH_OK);
    dt_region_free(&rin);
    dt_region_free(&rout);
    MPI_Type_free(&vec);
    MPI_Type_free(&resized);
    MPI_Type_free(&contig);

    /* ---- requests ---- */
    dt_region_t sreg, rreg;
    dt_region_alloc(&sreg, 4096, 0, 0x2a);
    dt_region_alloc(&rreg, 4096, 0, 0x2b);
    unsigned char *sbuf = sreg.buf, *rbuf = rreg.buf;
    size_t sbytes = sreg.bytes, rbytes = rreg.bytes;
    char pbuf[16], pin[16];
    th_fill(sbuf, sbytes, 0x4e9 + (uint64_t)th_rank, 0);
    th_fill(pbuf, sizeof pbuf, 0x4ea + (uint64_t)th_rank, 0);
    ovl_request_t ds, dr, ps, pr;
    EXPECT_ERR(ovl_delta_send_end(OVL_REQUEST_NULL, NULL), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_send_end(OVL_REQUEST_NULL, TH_COUNT(1)), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_produced(OVL_REQUEST_NULL, 0, 1), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_need(OVL_REQUEST_NULL, 0, 1), OVL_ERR_REQUEST);
    size_t dsz = 12345;
    EXPECT_ERR(ovl_delta_size(OVL_REQUEST_NULL, &dsz), OVL_ERR_REQUEST);
    CHECK(dsz == 12345);
    CHECK_OK(ovl_irecv(pin, sizeof pin, MPI_CHAR, peer, 1, &pr));
    CHECK_OK(ovl_isend(pbuf, sizeof pbuf, MPI_CHAR, peer, 1, &ps));
    CHECK_OK(ovl_delta_recv(rbuf, (int)rbytes, MPI_BYTE, peer, 2, NULL, &dr));
    CHECK_OK(ovl_delta_send_begin(sbuf, (int)sbytes, MPI_BYTE, peer, 2, NULL, &ds));
    /* not delta sends */
    EXPECT_ERR(ovl_delta_send_end(ps, NULL), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_send_end(pr, NULL), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_send_end(dr, NULL), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_send_end(ps, TH_COUNT(1)), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_send_end(dr, TH_COUNT(1)), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_produced(ps, 0, 1), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_produced(pr, 0, 1), OVL_ERR_REQUEST);
    /* delta calls on the other direction's requests: refused one way or
     * the other (the spec lists both codes) */
    int rc = ovl_delta_produced(dr, 0, 1);
    CHECKF(rc == OVL_ERR_REQUEST || rc == OVL_ERR_ARG, "produced on a receive: %s",
           th_code_name(rc));
    rc = ovl_delta_need(ds, 0, 1);
    CHECKF(rc == OVL_ERR_REQUEST || rc == OVL_ERR_ARG, "need on a send: %s", th_code_name(rc));
    EXPECT_ERR(ovl_delta_need(ps, 0, 1), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_need(pr, 0, 1), OVL_ERR_REQUEST);
    dsz = 12345;
    EXPECT_ERR(ovl_delta_size(ps, &dsz), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_size(ds, NULL), OVL_ERR_ARG);
    CHECK(dsz == 12345);
    CHECK_OK(ovl_delta_size(ds, &dsz));
    CHECK(dsz > 0 && dsz != 12345);
    /* ranges outside the buffer */
    EXPECT_ERR(ovl_delta_produced(ds, sbytes, 1), OVL_ERR_ARG);
    EXPECT_ERR(ovl_delta_produced(ds, 0, sbytes + 1), OVL_ERR_ARG);
    EXPECT_ERR(ovl_delta_produced(ds, 10, SIZE_MAX), OVL_ERR_ARG); /* offset + bytes overflows */
    EXPECT_ERR(ovl_delta_produced(ds, SIZE_MAX, 2), OVL_ERR_ARG);
    EXPECT_ERR(ovl_delta_need(dr, 10, SIZE_MAX), OVL_ERR_ARG);
    /* interpretation: a range outside the posted buffer is an argument
     * error, as for ovl_delta_produced (the spec lists OVL_ERR_ARG) */
    EXPECT_ERR(ovl_delta_need(dr, rbytes, 1), OVL_ERR_ARG);
    /* send_end with bad counts or fields leaves the request open */
    EXPECT_ERR(ovl_delta_send_end(ds, TH_COUNT(-1)), OVL_ERR_ARG);
    EXPECT_ERR(ovl_delta_send_end(ds, TH_COUNT((int)sbytes + 1)), OVL_ERR_ARG);
    EXPECT_ERR(ovl_delta_send_end(ds, TH_MONITOR(OVL_MONITOR_AUTO)), OVL_ERR_ARG);
    CHECKF(strstr(ovl_error_detail(), "OVL_PARAM_FIELD_MONITOR") != NULL, "%s", ovl_error_detail());
    EXPECT_ERR(ovl_delta_send_end(ds, &(ovl_param_t){ .field_mask = 1ull << 63 }), OVL_ERR_ARG);
    CHECK_OK(ovl_delta_send_end(ds, NULL));
    EXPECT_ERR(ovl_delta_send_end(ds, NULL), OVL_ERR_REQUEST); /* already ended */
    EXPECT_ERR(ovl_delta_send_end(ds, TH_COUNT(1)), OVL_ERR_REQUEST);
    ovl_status_t s4[4];
    ovl_request_t all[4] = { pr, ps, dr, ds };
    CHECK_OK(ovl_waitall(4, all, s4));
    CHECK(s4[0].bytes == sizeof pin &&
          th_verify(pin, sizeof pin, 0x4ea + (uint64_t)peer, 0) == TH_OK);
    CHECK(s4[2].bytes == rbytes && s4[2].tag == 2);
    CHECK(th_verify(rbuf, rbytes, 0x4e9 + (uint64_t)peer, 0) == TH_OK);
    CHECK(s4[3].bytes == sbytes && s4[3].error == OVL_SUCCESS);
    /* released handles */
    EXPECT_ERR(ovl_delta_send_end(ds, NULL), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_produced(ds, 0, 1), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_delta_need(dr, 0, 1), OVL_ERR_REQUEST);

    /* ovl_delta_need from a continuation is a blocking call: the delta
     * receive is surely pending (the peer starts that send only once it
     * has heard that this rank's continuation has run) */
    ovl_request_t dn, cs, cr, dns;
    char cout = 1, cin = 0, done_out = 2, done_in = 0;
    struct need_in_cb n = { .rc = 1 };
    CHECK_OK(ovl_delta_recv(rbuf, (int)rbytes, MPI_BYTE, peer, 4, NULL, &dn));
    n.delta = dn;
    CHECK_OK(ovl_irecv(&cin, 1, MPI_CHAR, peer, 5, &cr));
    CHECK_OK(ovl_isend(&cout, 1, MPI_CHAR, peer, 5, &cs));
    CHECK_OK(ovl_continue(cs, need_cb, &n));
    CHECK_OK(ovl_wait(&cs, OVL_STATUS_IGNORE)); /* returns after the continuation */
    CHECKF(atomic_load(&n.runs) == 1 && n.rc == OVL_ERR_IN_CALLBACK,
           "ovl_delta_need in a continuation: %s", th_code_name(n.rc));
    CHECK_OK(ovl_wait(&cr, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_irecv(&done_in, 1, MPI_CHAR, peer, 6, &cr));
    CHECK_OK(ovl_isend(&done_out, 1, MPI_CHAR, peer, 6, &cs));
    CHECK_OK(ovl_wait(&cs, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&cr, OVL_STATUS_IGNORE));
    th_fill(sbuf, sbytes, 0x4eb + (uint64_t)th_rank, 0);
    CHECK_OK(ovl_delta_send_begin(sbuf, (int)sbytes, MPI_BYTE, peer, 4, NULL, &dns));
    CHECK_OK(ovl_wait(&dns, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&dn, OVL_STATUS_IGNORE));
    CHECK(th_verify(rbuf, rbytes, 0x4eb + (uint64_t)peer, 0) == TH_OK);
    dt_region_free(&sreg);
    dt_region_free(&rreg);
}

/* send_end with a count below what has already left: refused, request still open */
static void end_count_below_sent(void)
{
    size_t bytes = (size_t)4 << 20;
    unsigned char *b = dt_alloc(bytes);
    CHECK(b != NULL);
    uint64_t key = 0xbe10 + (uint64_t)(th_rank / 2);
    ovl_request_t req;
    ovl_status_t st = { .error = 1 };
    if (even) {
        th_rng_t rng;
        th_rng_init(&rng, 0xbe11, (uint64_t)th_rank, 0);
        CHECK_OK(ovl_delta_send_begin(b, (int)bytes, MPI_BYTE, peer, 3,
                                      TH_MONITOR(OVL_MONITOR_EXPLICIT), &req));
        size_t dsz = 0;
        CHECK_OK(ovl_delta_size(req, &dsz));
        CHECKF(dsz > 0 && 2 * dsz <= bytes, "delta size %zu for a %zu-byte buffer", dsz, bytes);
        dt_produce(req, b, 2 * dsz, key, DT_PROD_INORDER, &rng); /* at least one delta left */
        EXPECT_ERR(ovl_delta_send_end(req, TH_COUNT(1)), OVL_ERR_ARG);
        th_fill(b + 2 * dsz, bytes - 2 * dsz, key, 2 * dsz);
        CHECK_OK(ovl_delta_send_end(req, NULL));
        CHECK_OK(ovl_wait(&req, &st));
        CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);
    } else {
        CHECK_OK(ovl_delta_recv(b, (int)bytes, MPI_BYTE, peer, 3, NULL, &req));
        CHECK_OK(ovl_wait(&req, &st));
        CHECKF(st.bytes == bytes && st.error == OVL_SUCCESS, "status {%zu, %d}", st.bytes,
               st.error);
        CHECK(th_verify(b, bytes, key, 0) == TH_OK);
    }
    dt_free(b, bytes);
}

/* ---- stale writes ------------------------------------------------------------- */

/* Runs `write` with stderr going to a pipe; returns what was printed. */
struct capture {
    int saved, rd;
    char text[4096];
};

static void capture_start(struct capture *c)
{
    int p[2];
    fflush(stderr);
    CHECK(pipe(p) == 0);
    CHECK(fcntl(p[0], F_SETFL, O_NONBLOCK) == 0);
    c->saved = dup(2);
    CHECK(c->saved >= 0 && dup2(p[1], 2) == 2);
    close(p[1]);
    c->rd = p[0];
}

static void capture_end(struct capture *c)
{
    fflush(stderr);
    CHECK(dup2(c->saved, 2) == 2);
    close(c->saved);
    size_t n = 0;
    for (;;) {
        ssize_t k = read(c->rd, c->text + n, sizeof c->text - 1 - n);
        if (k > 0 && n + (size_t)k < sizeof c->text - 1) {
            n += (size_t)k;
            continue;
        }
        if (k > 0)
            n += (size_t)k;
        break;
    }
    c->text[n] = '\0';
    close(c->rd);
}

/* The buffer starts `off` bytes into a page; the stale write goes to
 * offset `at` of the buffer once all of it has been written. */
static void stale_os(ovl_monitor_t m, int tag, size_t off, size_t at)
{
    size_t bytes = (size_t)8 << 20;
    dt_region_t r;
    dt_region_alloc(&r, bytes, off, 0x57a1e + (uint64_t)tag);
    uint64_t key = 0x57a1e0 + (uint64_t)tag;
    ovl_request_t req;
    ovl_status_t st = { .error = 0 };
    if (even) {
        CHECK_OK(ovl_delta_send_begin(r.buf, (int)bytes, MPI_BYTE, peer, tag, TH_MONITOR(m), &req));
        size_t dsz = 0;
        CHECK_OK(ovl_delta_size(req, &dsz));
        CHECKF(dsz > 0 && 4 * dsz <= bytes, "%s: delta size %zu for %zu bytes", ovl_monitor_name(m),
               dsz, bytes);
        th_rng_t rng;
        th_rng_init(&rng, 0x57a, (uint64_t)th_rank, (uint64_t)tag);
        dt_produce(req, r.buf, bytes, key, DT_PROD_PLAIN, &rng); /* the whole buffer, in order */
        for (int i = 0; i < 20; i++) { /* the first deltas are surely on their way */
            th_progress();
            th_sleep_ms(1);
        }
        /* now write again into the first delta, long sent */
        struct capture cap;
        capture_start(&cap);
        r.buf[at] = dt_flip(r.buf[at]);
        r.buf[at + 1] = dt_flip(r.buf[at + 1]);
        int end_rc = ovl_delta_send_end(req, NULL);
        int wait_rc = ovl_wait(&req, &st);
        capture_end(&cap);
        CHECK_OK(end_rc);
        CHECKF(wait_rc == OVL_ERR_STALE && st.error == OVL_ERR_STALE,
               "%s: buffer %zu bytes into a page, stale write at offset %zu: ovl_wait %s, "
               "status.error %d",
               ovl_monitor_name(m), off, at, th_code_name(wait_rc), st.error);
        CHECK(req == OVL_REQUEST_NULL);
        /* the program's writes took effect and nothing else changed */
        CHECK(r.buf[at] == dt_flip(th_pattern_byte(key, at)));
        CHECK(r.buf[at + 1] == dt_flip(th_pattern_byte(key, at + 1)));
        CHECK(th_verify(r.buf, at, key, 0) == TH_OK);
        CHECK(th_verify(r.buf + at + 2, bytes - at - 2, key, at + 2) == TH_OK);
        /* reported on stderr (OVL_VERBOSE >= 1, the default), naming the
         * buffer and the offset: at the fault (the handler prints 16 hex
         * digits) and when the send completes (ovl_delta_send's error) */
        CHECKF(strlen(cap.text) > 0, "%s: the stale write was not reported on stderr",
               ovl_monitor_name(m));
        char at_fault[96], at_end[96];
        snprintf(at_fault, sizeof at_fault, "buffer 0x%016" PRIxPTR " written at offset 0x%016zx",
                 (uintptr_t)r.buf, at);
        snprintf(at_end, sizeof at_end, "buffer %p written at offset %zu", (void *)r.buf, at);
        CHECKF(strstr(cap.text, at_fault) != NULL,
               "%s: the report at the fault does not say \"%s\": %.200s", ovl_monitor_name(m),
               at_fault, cap.text);
        CHECKF(strstr(cap.text, at_end) != NULL,
               "%s: the error at completion does not say \"%s\": %.200s", ovl_monitor_name(m),
               at_end, cap.text);
        printf("test_delta_misuse: rank %d, %s: stale write at offset %zu reported as: %s", th_rank,
               ovl_monitor_name(m), at, cap.text);
        fflush(stdout);
    } else {
        CHECK_OK(ovl_delta_recv(r.buf, (int)bytes, MPI_BYTE, peer, tag, TH_MONITOR(m), &req));
        int wait_rc = ovl_wait(&req, &st);
        CHECKF(wait_rc == OVL_ERR_STALE && st.error == OVL_ERR_STALE,
               "%s: receiver of a stale send (buffer %zu bytes into a page): ovl_wait %s, "
               "status.error %d",
               ovl_monitor_name(m), off, th_code_name(wait_rc), st.error);
        /* the buffer is usable afterwards */
        memset(r.buf, 0, bytes);
    }
    CHECK(dt_sentinel_check(&r) == TH_OK);
    dt_region_free(&r);
}

static void stale_explicit(void)
{
    size_t bytes = (size_t)4 << 20;
    unsigned char *b = dt_alloc(bytes);
    CHECK(b != NULL);
    uint64_t key = 0x57e1 + (uint64_t)(th_rank / 2);
    ovl_request_t req;
    ovl_status_t st = { .error = 1 };
    int send_rc = 0;
    if (even) {
        CHECK_OK(ovl_delta_send_begin(b, (int)bytes, MPI_BYTE, peer, 20,
                                      TH_MONITOR(OVL_MONITOR_EXPLICIT), &req));
        size_t dsz = 0;
        CHECK_OK(ovl_delta_size(req, &dsz));
        CHECKF(dsz > 0 && 8 * dsz <= bytes, "delta size %zu for %zu bytes", dsz, bytes);
        th_fill(b, bytes, key, 0);
        CHECK_OK(ovl_delta_produced(req, 0, 4 * dsz)); /* reaches the delta size: sent */
        EXPECT_ERR(ovl_delta_produced(req, 0, 10), OVL_ERR_STALE);
        EXPECT_ERR(ovl_delta_produced(req, dsz, 1), OVL_ERR_STALE);
        EXPECT_ERR(ovl_delta_produced(req, 4 * dsz - 1, 2), OVL_ERR_STALE);
        CHECK_OK(ovl_delta_produced(req, 4 * dsz, bytes - 4 * dsz));
        CHECK_OK(ovl_delta_send_end(req, NULL));
        send_rc = ovl_wait(&req, &st);
        /* The refused calls changed nothing: the message may complete
         * normally (or be marked stale on both ends). */
        CHECKF(send_rc == OVL_SUCCESS || send_rc == OVL_ERR_STALE, "ovl_wait %s",
               th_code_name(send_rc));
        CHECK_MPI(MPI_Send(&send_rc, 1, MPI_INT, peer, 21, MPI_COMM_WORLD));
    } else {
        CHECK_OK(ovl_delta_recv(b, (int)bytes, MPI_BYTE, peer, 20, NULL, &req));
        int rc = ovl_wait(&req, &st);
        CHECK_MPI(MPI_Recv(&send_rc, 1, MPI_INT, peer, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECKF(rc == send_rc, "receiver %s, sender %s", th_code_name(rc), th_code_name(send_rc));
        if (rc == OVL_SUCCESS)
            CHECK(st.bytes == bytes && th_verify(b, bytes, key, 0) == TH_OK);
    }
    dt_free(b, bytes);
}

/* ---- an edge page at vm.max_map_count ---------------------------------------------- */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DT_SANITIZER 1 /* its runtime maps memory as it goes: no room at the limit */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DT_SANITIZER 1
#endif
#endif

#ifndef DT_SANITIZER
/* Use up every mapping the process may still make: a block whose pages
 * alternate between two protections, until mprotect says ENOMEM. */
static void fill_maps(char **p, size_t *len)
{
    long limit = dt_map_limit();
    *p = NULL;
    *len = 0;
    long want = limit - dt_map_count() + 64;
    if (limit <= 0 || limit > 1000000 || want < 2)
        return;
    size_t pg = dt_page();
    *len = (size_t)want * pg;
    *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(*p != MAP_FAILED);
    for (long i = 1; i < want; i += 2)
        if (mprotect(*p + (size_t)i * pg, pg, PROT_READ) != 0)
            break;
}
#endif

/* A delta receive (mprotect) of two pages whose first and last pages are
 * shared with other data, in a mapping of its own (read-only pages around
 * it), every mapping used up after it was posted: when its data arrives,
 * opening an edge page alone would need one more mapping (ENOMEM). It
 * must not spin waiting for one (it would hang, holding the monitor's
 * lock): it opens the edges with the rest at the end, and the data, the
 * reads that waited for it and the neighbour bytes are intact. */
static void edge_at_map_limit(void)
{
    size_t pg = dt_page(), bytes = 2 * pg, off = 100;
    uint64_t key = 0xed9e + (uint64_t)(th_rank / 2);
    ovl_request_t req;
    ovl_status_t st = { .error = 1 };
#ifndef DT_SANITIZER
    const int rounds = 2; /* a warm-up, then at the limit */
#else
    const int rounds = 1;
#endif
    if (even) { /* each round: a go message, then the delta send */
        unsigned char *b = dt_alloc(bytes);
        th_fill(b, bytes, key, 0);
        for (int k = 0; k < rounds; k++) {
            CHECK_MPI(
                MPI_Recv(NULL, 0, MPI_BYTE, peer, 41 + 2 * k, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK_OK(ovl_delta_send_begin(b, (int)bytes, MPI_BYTE, peer, 40 + 2 * k,
                                          TH_MONITOR(OVL_MONITOR_EXPLICIT), &req));
            CHECK_OK(ovl_delta_produced(req, 0, bytes));
            CHECK_OK(ovl_delta_send_end(req, NULL));
            CHECK_OK(ovl_wait(&req, &st));
            CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);
        }
        dt_free(b, bytes);
        return;
    }
    (void)rounds;
    /* [read-only | p0 p1 p2 | read-only]: the buffer is p0 + off .. p2 + off */
    unsigned char *m = dt_alloc(5 * pg);
    th_fill(m, 5 * pg, key ^ 0x5e, 0);
    CHECK(mprotect(m, pg, PROT_READ) == 0 && mprotect(m + 4 * pg, pg, PROT_READ) == 0);
    unsigned char *buf = m + pg + off;
    char *fill = NULL;
    size_t fill_len = 0;
#ifndef DT_SANITIZER
    /* warm up what the receive allocates (piece slots) before the limit */
    CHECK_OK(ovl_delta_recv(buf, (int)bytes, MPI_BYTE, peer, 40, TH_MONITOR(OVL_MONITOR_MPROTECT),
                            &req));
    CHECK_MPI(MPI_Send(NULL, 0, MPI_BYTE, peer, 41, MPI_COMM_WORLD));
    CHECK_OK(ovl_wait(&req, &st));
    CHECK(th_verify(buf, bytes, key, 0) == TH_OK);
    th_fill(m + pg, 3 * pg, key ^ 0x5e, pg);
    CHECK_OK(ovl_delta_recv(buf, (int)bytes, MPI_BYTE, peer, 42, TH_MONITOR(OVL_MONITOR_MPROTECT),
                            &req));
    fill_maps(&fill, &fill_len);
    CHECK_MPI(MPI_Send(NULL, 0, MPI_BYTE, peer, 43, MPI_COMM_WORLD));
#else
    if (th_rank == 1)
        printf("test_delta_misuse: NOTE: edge page at vm.max_map_count not at the limit under a "
               "sanitizer\n");
    CHECK_OK(ovl_delta_recv(buf, (int)bytes, MPI_BYTE, peer, 40, TH_MONITOR(OVL_MONITOR_MPROTECT),
                            &req));
    CHECK_MPI(MPI_Send(NULL, 0, MPI_BYTE, peer, 41, MPI_COMM_WORLD));
#endif
    /* read the first and last bytes (edge pages) while they may be pending */
    CHECK(buf[0] == th_pattern_byte(key, 0));
    CHECK(buf[bytes - 1] == th_pattern_byte(key, bytes - 1));
    CHECK_OK(ovl_wait(&req, &st));
    if (fill)
        munmap(fill, fill_len);
    CHECKF(st.bytes == bytes && st.error == OVL_SUCCESS, "status {%zu, %d}", st.bytes, st.error);
    size_t bad = th_verify(buf, bytes, key, 0);
    CHECKF(bad == TH_OK, "byte %zu of %zu wrong", bad, bytes);
    CHECK(th_verify(m, pg + off, key ^ 0x5e, 0) == TH_OK);
    CHECK(th_verify(buf + bytes, 4 * pg - off - bytes, key ^ 0x5e, pg + off + bytes) == TH_OK);
    CHECK(mprotect(m, 5 * pg, PROT_READ | PROT_WRITE) == 0);
    dt_free(m, 5 * pg);
}

/* ---- configuration --------------------------------------------------------------- */

static void configuration(void)
{
    CHECK_OK(ovl_finalize());
    setenv("OVL_MONITOR", "bogus", 1);
    EXPECT_ERR(ovl_init(MPI_COMM_WORLD, NULL), OVL_ERR_CONFIG);
    setenv("OVL_MONITOR", "explicit", 1);
    setenv("OVL_DELTA_SIZE", "12abc", 1);
    EXPECT_ERR(ovl_init(MPI_COMM_WORLD, NULL), OVL_ERR_CONFIG);
    unsetenv("OVL_DELTA_SIZE");
    ovl_config_t cfg = { .field_mask = OVL_CONFIG_FIELD_MONITOR,
                         .access.monitor = (ovl_monitor_t)9 };
    EXPECT_ERR(ovl_init(MPI_COMM_WORLD, &cfg), OVL_ERR_CONFIG);
    CHECK(!ovl_initialized());

    /* environment: explicit; fields: mprotect and 64 KiB deltas (fields win) */
    setenv("OVL_DELTA_SIZE", "8k", 1);
    cfg = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_MONITOR | OVL_CONFIG_FIELD_DELTA_SIZE,
                          .access.monitor = OVL_MONITOR_MPROTECT,
                          .access.delta_size = 65536 };
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &cfg));
    ovl_config_t got;
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.access.monitor == OVL_MONITOR_MPROTECT && got.access.delta_size == 65536);
    size_t bytes = (size_t)1 << 20;
    unsigned char *b = dt_alloc(bytes);
    CHECK(b != NULL);
    ovl_request_t req;
    ovl_status_t st;
    uint64_t key = 0xc0f + (uint64_t)(th_rank / 2);
    if (even) {
        CHECK_OK(ovl_delta_send_begin(b, (int)bytes, MPI_BYTE, peer, 30, NULL, &req));
        size_t d = 0;
        CHECK_OK(ovl_delta_size(req, &d));
        CHECKF(d == 65536, "ovl_delta_size %zu, configured 65536", d);
        th_fill(b, bytes, key, 0);
        CHECK_OK(ovl_delta_send_end(req, NULL));
        CHECK_OK(ovl_wait(&req, &st));
    } else {
        CHECK_OK(ovl_delta_recv(b, (int)bytes, MPI_BYTE, peer, 30, NULL, &req));
        CHECK_OK(ovl_wait(&req, &st));
        CHECK(st.bytes == bytes && th_verify(b, bytes, key, 0) == TH_OK);
    }
    dt_free(b, bytes);
    CHECK_OK(ovl_finalize());
    /* the environment alone may not choose explicit: a program that does
     * not annotate would read data before it arrives. Refused, naming where
     * to choose it; the code's choice is taken (above). */
    EXPECT_ERR(ovl_init(MPI_COMM_WORLD, NULL), OVL_ERR_CONFIG);
    CHECKF(strstr(ovl_error_detail(), "mprotect") != NULL &&
               strstr(ovl_error_detail(), "in code") != NULL,
           "detail: %s", ovl_error_detail());
    CHECK(!ovl_initialized());
    setenv("OVL_MONITOR", "mprotect", 1);
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.access.monitor == OVL_MONITOR_MPROTECT && got.access.delta_size == 8192);
    unsetenv("OVL_MONITOR");
    unsetenv("OVL_DELTA_SIZE");
}

/* ---- without /proc/self/mem --------------------------------------------------- */

/* Mode "nomem" (ctest binds /dev/null over each rank's /proc/<pid>/mem in a
 * private mount namespace): no fault monitor can work. A fault monitor
 * asked for by name (OVL_MONITOR, the config field, a request's param)
 * fails with OVL_ERR_MONITOR saying why; auto warns on stderr at the
 * default verbosity and gives explicit, whose annotated transfers work;
 * ovl_monitor_probe says the same. */
static int no_proc_mem(int *argc, char ***argv)
{
    int provided = th_init_mpi(argc, argv, "test_delta_misuse nomem", MPI_THREAD_MULTIPLE);
    CHECK(provided == MPI_THREAD_MULTIPLE);
    peer = dt_pair("test_delta_misuse nomem", &even);
    ovl_monitor_t chosen = OVL_MONITOR_AUTO;
    char why[512] = "";
    int rc = ovl_monitor_probe(OVL_MONITOR_MPROTECT, &chosen, why, sizeof why);
    int usable = rc == OVL_SUCCESS, all = 0;
    CHECK_MPI(MPI_Allreduce(&usable, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (all) {
        if (th_rank == 0)
            printf("test_delta_misuse nomem: SKIPPED: /proc/self/mem works here (%s)\n", why);
        MPI_Finalize();
        return 77;
    }
    CHECKF(rc == OVL_ERR_MONITOR && strstr(why, "/proc/self/mem") && chosen == OVL_MONITOR_MPROTECT,
           "probe(mprotect): %s, %s: %.300s", th_code_name(rc), ovl_monitor_name(chosen), why);
    EXPECT_ERR(ovl_monitor_probe(OVL_MONITOR_UFFD, &chosen, why, sizeof why), OVL_ERR_MONITOR);
    CHECK_OK(ovl_monitor_probe(OVL_MONITOR_AUTO, &chosen, why, sizeof why));
    CHECKF(chosen == OVL_MONITOR_EXPLICIT && strstr(why, "/proc/self/mem"),
           "probe(auto): %s: %.300s", ovl_monitor_name(chosen), why);

    /* asked for by name: ovl_init fails, saying why */
    static const char *const names[] = { "mprotect", "uffd" };
    for (int i = 0; i < 2; i++) {
        setenv("OVL_MONITOR", names[i], 1);
        EXPECT_ERR(ovl_init(MPI_COMM_WORLD, NULL), OVL_ERR_MONITOR);
        CHECKF(strstr(ovl_error_detail(), "/proc/self/mem") != NULL, "OVL_MONITOR=%s: %s", names[i],
               ovl_error_detail());
        CHECK(!ovl_initialized());
    }
    unsetenv("OVL_MONITOR");
    ovl_config_t cfg = { .field_mask = OVL_CONFIG_FIELD_MONITOR,
                         .access.monitor = OVL_MONITOR_MPROTECT };
    EXPECT_ERR(ovl_init(MPI_COMM_WORLD, &cfg), OVL_ERR_MONITOR);

    /* auto: a warning on stderr (the first rank of each node), explicit */
    struct capture cap;
    capture_start(&cap);
    rc = ovl_init(MPI_COMM_WORLD, NULL);
    capture_end(&cap);
    CHECK_OK(rc);
    if (th_rank == 0)
        CHECKF(strstr(cap.text, "warning") && strstr(cap.text, "/proc/self/mem") &&
                   strstr(cap.text, "explicit"),
               "no warning on stderr: \"%.300s\"", cap.text);
    printf("test_delta_misuse nomem: rank %d: ovl_init said: %s", th_rank,
           cap.text[0] ? cap.text : "(nothing)\n");
    fflush(stdout);

    size_t bytes = (size_t)1 << 20;
    unsigned char *b = dt_alloc(bytes);
    uint64_t key = 0x90e + (uint64_t)(th_rank / 2);
    ovl_request_t r = OVL_REQUEST_NULL;
    ovl_status_t st = { .error = 1 };
    /* asked for by name per request: refused, not silently explicit */
    EXPECT_ERR(
        ovl_delta_recv(b, (int)bytes, MPI_BYTE, peer, 5, TH_MONITOR(OVL_MONITOR_MPROTECT), &r),
        OVL_ERR_MONITOR);
    EXPECT_ERR(
        ovl_delta_send_begin(b, (int)bytes, MPI_BYTE, peer, 5, TH_MONITOR(OVL_MONITOR_UFFD), &r),
        OVL_ERR_MONITOR);
    CHECK(r == OVL_REQUEST_NULL);
    if (even) {
        CHECK_OK(ovl_delta_send_begin(b, (int)bytes, MPI_BYTE, peer, 6, NULL, &r));
        th_fill(b, bytes, key, 0);
        CHECK_OK(ovl_delta_produced(r, 0, bytes));
        CHECK_OK(ovl_delta_send_end(r, NULL));
        CHECK_OK(ovl_wait(&r, &st));
    } else {
        capture_start(&cap); /* the first degraded receive says so */
        rc = ovl_delta_recv(b, (int)bytes, MPI_BYTE, peer, 6, NULL, &r);
        capture_end(&cap);
        CHECK_OK(rc);
        CHECKF(strstr(cap.text, "complete inside the call") != NULL, "no notice: \"%.300s\"",
               cap.text);
        CHECK_OK(ovl_delta_need(r, 0, bytes));
        CHECK(th_verify(b, bytes, key, 0) == TH_OK);
        CHECK_OK(ovl_wait(&r, &st));
    }
    CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);

    /* Nobody chose explicit in code and nothing guards the buffer: the
     * receive completes inside the call (no stale byte can be read); the
     * unannotated send leaves at its end. */
    key ^= 0x77;
    if (even) {
        CHECK_OK(ovl_delta_send_begin(b, (int)bytes, MPI_BYTE, peer, 7, NULL, &r));
        th_fill(b, bytes, key, 0);
        CHECK_OK(ovl_delta_send_end(r, NULL));
        CHECK_OK(ovl_wait(&r, &st));
    } else {
        memset(b, 0, bytes);
        CHECK_OK(ovl_delta_recv(b, (int)bytes, MPI_BYTE, peer, 7, NULL, &r));
        size_t bad = th_verify(b, bytes, key, 0); /* no need, no wait */
        CHECKF(bad == TH_OK, "degraded receive: byte %zu not there when the call returned", bad);
        CHECK_OK(ovl_wait(&r, &st));
    }
    CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);

    /* Explicit chosen in code is not degraded: the receive returns before
     * the peer sends, which it does only once told so (else: a hang). */
    key ^= 0x78;
    char go = 1;
    if (even) {
        CHECK_MPI(MPI_Recv(&go, 1, MPI_CHAR, peer, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_OK(ovl_delta_send_begin(b, (int)bytes, MPI_BYTE, peer, 8, NULL, &r));
        th_fill(b, bytes, key, 0);
        CHECK_OK(ovl_delta_send_end(r, NULL));
        CHECK_OK(ovl_wait(&r, &st));
    } else {
        CHECK_OK(
            ovl_delta_recv(b, (int)bytes, MPI_BYTE, peer, 8, TH_MONITOR(OVL_MONITOR_EXPLICIT), &r));
        CHECK_MPI(MPI_Send(&go, 1, MPI_CHAR, peer, 99, MPI_COMM_WORLD));
        CHECK_OK(ovl_delta_need(r, 0, bytes));
        CHECK(th_verify(b, bytes, key, 0) == TH_OK);
        CHECK_OK(ovl_wait(&r, &st));
    }
    CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);

    /* ovl_get the same way: complete when it returns */
    void *sb = NULL;
    ovl_segment_t seg = NULL;
    CHECK_OK(ovl_segment_create(bytes, &sb, &seg));
    th_fill(sb, bytes, key + (uint64_t)th_rank, 0);
    CHECK_OK(ovl_barrier()); /* the peer's part is filled (ovl_fence is local) */
    memset(b, 0, bytes);
    CHECK_OK(ovl_get(b, peer, 0, bytes, seg, NULL, NULL));
    size_t bad = th_verify(b, bytes, key + (uint64_t)peer, 0);
    CHECKF(bad == TH_OK, "degraded get: byte %zu not there when the call returned", bad);
    CHECK_OK(ovl_fence(seg));
    CHECK_OK(ovl_segment_free(&seg));
    dt_free(b, bytes);
    return th_finish();
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "nomem") == 0)
        return no_proc_mem(&argc, &argv);
    before_init();
    dt_init(&argc, &argv, "test_delta_misuse", NULL);
    peer = dt_pair("test_delta_misuse", &even);
    dt_phase("arguments", 30);
    arguments();
    dt_phase("send_end with a count below what was sent", 30);
    end_count_below_sent();
    ovl_monitor_t fm[2] = { OVL_MONITOR_MPROTECT, OVL_MONITOR_UFFD };
    int nfm = uffd_ok ? 2 : 1;
    if (!uffd_ok && th_rank == 0)
        printf("test_delta_misuse: NOTE: no userfaultfd here, uffd stale writes not tested\n");
    size_t pg = dt_page();
    /* a page-aligned buffer written again at offset 0 */
    for (int i = 0; i < nfm; i++) {
        dt_phase("stale write at offset 0 of a page-aligned buffer", 30);
        stale_os(fm[i], 11 + i, 0, 0);
    }
    /* an unaligned buffer written again on a whole page well behind */
    for (int i = 0; i < nfm; i++) {
        dt_phase("stale write on an inner page of an unaligned buffer", 30);
        stale_os(fm[i], 13 + i, 100, 5 * pg + 7);
    }
    dt_phase("stale ranges, explicit", 30);
    stale_explicit();
    dt_phase("an edge page at vm.max_map_count", 30);
    edge_at_map_limit();
    dt_phase("configuration", 30);
    configuration();
    /* Not checked, by design (ovl.h): a write into the partial first or
     * last page of a send buffer, which it shares with other data; those
     * pages are never write-protected, so neighbours are never slowed. */
    return dt_finish();
}
