/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * OVL_TRACE and OVL_STATS: run a little of everything (messages with
 * continuations, an adopted MPI request, delta transfers whose receiver
 * reads pages before they arrive, up and then down, one-sided gets read at
 * once and puts), then check the timeline each rank wrote at ovl_finalize
 * with tests/check_trace.py: valid Chrome trace JSON, well-formed events,
 * the expected event names (get-strip, put-strip, install, and a `wait`
 * for ovl_get_need), and page-access traces with the access patterns the
 * program had, one of them for the get's destination.
 * Run with OVL_TRACE set (CMake does), OVL_DELTA_SIZE=4096 so each page
 * travels on its own, and OVL_RMA_LOCAL=overlap so gets on one node are
 * split, guarded and installed as across nodes.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGES 24
/* the get's bytes: a size of its own, so check_trace.py can tell its
 * page-access trace from the delta receives' */
#define GET_PAGES     40
#define GET_BYTES(ps) (GET_PAGES * (ps) + 123)

static atomic_int conts;

static void on_done(const ovl_status_t *st, void *arg)
{
    (void)st;
    (void)arg;
    atomic_fetch_add(&conts, 1);
}

static void on_mpi_done(MPI_Status *st, void *arg)
{
    (void)st;
    (void)arg;
    atomic_fetch_add(&conts, 1);
}

/* Rank 0 produces the pages one at a time (@down: last page first), rank 1
 * reads each as soon as it can, in the same order. */
static void paged(int down, char *buf, size_t ps)
{
    size_t n = PAGES * ps;
    if (th_rank == 0) {
        ovl_request_t sr;
        CHECK_OK(ovl_delta_send_begin(buf, (int)n, MPI_BYTE, 1, 7, TH_MONITOR(OVL_MONITOR_EXPLICIT),
                                      &sr));
        for (int k = 0; k < PAGES; k++) {
            int p = down ? PAGES - 1 - k : k;
            memset(buf + (size_t)p * ps, p + 1, ps);
            CHECK_OK(ovl_delta_produced(sr, (size_t)p * ps, ps));
            CHECK_OK(ovl_progress());
            th_sleep_ms(3);
        }
        CHECK_OK(ovl_delta_send_end(sr, NULL));
        CHECK_OK(ovl_wait(&sr, NULL));
    } else if (th_rank == 1) {
        ovl_request_t rr;
        CHECK_OK(ovl_delta_recv(buf, (int)n, MPI_BYTE, 0, 7, NULL, &rr));
        for (int k = 0; k < PAGES; k++) {
            int p = down ? PAGES - 1 - k : k;
            CHECKF(((volatile char *)buf)[(size_t)p * ps + 5] == p + 1, "page %d", p);
        }
        CHECK_OK(ovl_wait(&rr, NULL));
    }
}

/* One-sided transfers between the pairs (0, 1), (2, 3)...: a get read at
 * once, upwards (its first touches fault and wait, inline at least), a get
 * waited for with ovl_get_need, and a put whose source is rewritten at
 * once. Sets *@waited / *@faulted when this rank had an ovl_get_need that
 * waited / faults on the get's destination, the events check_trace.py
 * then requires (with inline progress nothing else can complete the gets
 * first, so both happen there). */
static void rma(size_t ps, int *waited, int *faulted)
{
    size_t segb = 2 * GET_PAGES * ps + ps;
    unsigned char *base = NULL;
    ovl_segment_t seg = OVL_SEGMENT_NULL;
    CHECK_OK(ovl_segment_create(segb, (void **)&base, &seg));
    for (size_t i = 0; i < segb; i++)
        base[i] = (unsigned char)(i * 7 + (size_t)th_rank);
    CHECK_OK(ovl_barrier());
    int peer = th_rank ^ 1;
    *waited = *faulted = 0;
    if (peer < th_size) {
        size_t n = GET_BYTES(ps), mlen = (n + ps - 1) / ps * ps;
        unsigned char *d =
            mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        unsigned char *e =
            mmap(NULL, 4 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(d != MAP_FAILED && e != MAP_FAILED);
        ovl_stats_t s0, s1, s2;
        CHECK_OK(ovl_stats_get(&s0, sizeof s0));
        CHECK_OK(ovl_get(d, peer, 5, n, seg, NULL, NULL));
        for (size_t i = 0; i < n; i += 512) /* upwards, at once */
            CHECKF(((volatile unsigned char *)d)[i] == (unsigned char)((i + 5) * 7 + (size_t)peer),
                   "get byte %zu", i);
        CHECK_OK(ovl_stats_get(&s1, sizeof s1));
        CHECK_OK(ovl_get(e, peer, 0, 4 * ps, seg, NULL, NULL));
        CHECK_OK(ovl_get_need(e, 4 * ps));
        CHECK_OK(ovl_stats_get(&s2, sizeof s2));
        for (size_t i = 0; i < 4 * ps; i++)
            CHECK(e[i] == (unsigned char)(i * 7 + (size_t)peer));
        *faulted = s1.faults > s0.faults;
        *waited = s2.rma_waits > s1.rma_waits;
        /* put: the bytes as they were at the call reach the peer */
        for (size_t i = 0; i < n; i++)
            d[i] = (unsigned char)(i + 1);
        CHECK_OK(ovl_put(d, peer, GET_PAGES * ps, n, seg, NULL));
        memset(d, 0, n);
        CHECK_OK(ovl_fence(seg));
        munmap(d, mlen);
        munmap(e, 4 * ps);
    }
    CHECK_OK(ovl_barrier());
    if (peer < th_size)
        for (size_t i = 0; i < GET_BYTES(ps); i++)
            CHECKF(base[GET_PAGES * ps + i] == (unsigned char)(i + 1), "put byte %zu", i);
    CHECK_OK(ovl_segment_free(&seg));
}

/* OVL_TRACE's file name for @rank: FILE.<rank>.json, or %r replaced. */
static void trace_path(const char *tr, int rank, char *out, size_t len)
{
    const char *r = strstr(tr, "%r");
    if (r)
        snprintf(out, len, "%.*s%d%s", (int)(r - tr), tr, rank, r + 2);
    else
        snprintf(out, len, "%s.%d.json", tr, rank);
}

int main(int argc, char **argv)
{
    th_init(&argc, &argv, "test_trace", NULL);
    const char *tr = getenv("OVL_TRACE");
    CHECKF(tr && *tr, "run with OVL_TRACE set");
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    int peer = th_rank ^ 1;

    /* messages with continuations; ovl_wait waits */
    if (peer < th_size) {
        static char big[1 << 20];
        int x = th_rank, y = -1;
        ovl_request_t r[3];
        CHECK_OK(ovl_irecv(&y, 1, MPI_INT, peer, 1, &r[0]));
        CHECK_OK(ovl_continue(r[0], on_done, NULL));
        CHECK_OK(ovl_isend(&x, 1, MPI_INT, peer, 1, &r[1]));
        if (th_rank & 1)
            CHECK_OK(ovl_irecv(big, sizeof big, MPI_BYTE, peer, 2, &r[2]));
        else
            CHECK_OK(ovl_isend(big, sizeof big, MPI_BYTE, peer, 2, &r[2]));
        CHECK_OK(ovl_waitall(3, r, NULL));
        CHECK(y == peer);
        MPI_Request m;
        MPI_Irecv(&y, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &m);
        CHECK_OK(ovl_continue_mpi(&m, on_mpi_done, NULL));
        MPI_Send(&x, 1, MPI_INT, peer, 3, MPI_COMM_WORLD);
        while (atomic_load(&conts) < 2)
            CHECK_OK(ovl_progress());
    }
    char *buf = mmap(NULL, PAGES * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(buf != MAP_FAILED);
    if (th_rank < 2) {
        paged(0, buf, ps);
        paged(1, buf, ps);
    }
    int waited = 0, faulted = 0, flags[2], *all = calloc(2 * (size_t)th_size, sizeof *all);
    CHECK(all != NULL);
    rma(ps, &waited, &faulted);
    const char *pm = getenv("OVL_PROGRESS");
    int thread = pm && !strcmp(pm, "thread");
    if (!thread && (th_rank ^ 1) < th_size) /* nothing completes a get behind the program */
        CHECK(waited && faulted);
    flags[0] = waited;
    flags[1] = faulted;
    MPI_Allgather(flags, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
    CHECK_OK(ovl_finalize());
    munmap(buf, PAGES * ps);

    /* The files every rank wrote, checked by rank 0 in one python run. */
    char path[400];
    trace_path(tr, th_rank, path, sizeof path);
    CHECKF(access(path, R_OK) == 0, "no trace file %.300s", path);
    MPI_Barrier(MPI_COMM_WORLD);
    int ok = 1;
    if (th_rank == 0 && system("python3 -c 'import json' 2>/dev/null") != 0) {
        printf("test_trace: no python3, JSON not validated\n");
    } else if (th_rank == 0) {
        size_t cap = 1200 * (size_t)th_size + 600, at;
        char *cmd = malloc(cap);
        CHECK(cmd != NULL);
        snprintf(cmd, cap, "python3 -m json.tool '%s' > /dev/null", path);
        CHECKF(system(cmd) == 0, "%.300s is not valid JSON", path);
        at = (size_t)snprintf(cmd, cap, "python3 '%s'", OVL_CHECK_TRACE);
        for (int r = 0; r < th_size; r++) {
            char p[400];
            trace_path(tr, r, p, sizeof p);
            const char *names =
                r == 0   ? "send,recv,continuation,mpi-continuation,delta-send,piece-send"
                : r == 1 ? "send,recv,continuation,mpi-continuation,delta-recv,piece-recv,"
                           "fault-recv,fault-wait,page-access"
                : (r ^ 1) < th_size ? "send,recv,continuation"
                                    : "process_name"; /* no peer: just a valid file */
            /* every rank with a peer got and put; a `wait` with the bytes
             * of an ovl_get_need that waited */
            int pair = (r ^ 1) < th_size;
            char rma_names[96];
            snprintf(rma_names, sizeof rma_names, "%s%s",
                     pair ? ",get-strip,put-strip,install" : "", all[2 * r] ? ",wait/bytes" : "");
            /* page-access verdicts: rank 1 read up, then down; the get's
             * destination, where its first touches faulted */
            char pat[96], getpat[32] = "";
            if (all[2 * r + 1])
                snprintf(getpat, sizeof getpat, "bytes=%zu", GET_BYTES(ps));
            snprintf(pat, sizeof pat, "%s%s%s", r == 1 ? "sequential-up,sequential-down" : "",
                     r == 1 && getpat[0] ? "," : "", getpat);
            at +=
                (size_t)snprintf(cmd + at, cap - at, " '%s:%d:%s%s%s%s%s'", p, r, names, rma_names,
                                 thread && r < 2 ? ",thread_name" : "", pat[0] ? ":" : "", pat);
        }
        ok = system(cmd) == 0;
        CHECKF(ok, "check_trace.py failed: %.400s", cmd);
        free(cmd);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(all);
    remove(path);
    return th_finish();
}
