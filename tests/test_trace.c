/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * OVL_TRACE and OVL_STATS: run a little of everything (messages with
 * continuations, an adopted MPI request, delta transfers whose receiver
 * reads pages before they arrive, up and then down), then check the
 * timeline each rank wrote at ovl_finalize with tests/check_trace.py:
 * valid Chrome trace JSON, well-formed events, the expected event names,
 * and page-access traces with the access patterns the program had.
 * Run with OVL_TRACE set (CMake does) and OVL_DELTA_SIZE=4096 so each page
 * travels on its own.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGES 24

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
        CHECK_OK(ovl_delta_send_begin_with(buf, (int)n, MPI_BYTE, 1, 7, OVL_MONITOR_EXPLICIT, &sr));
        for (int k = 0; k < PAGES; k++) {
            int p = down ? PAGES - 1 - k : k;
            memset(buf + (size_t)p * ps, p + 1, ps);
            CHECK_OK(ovl_delta_produced(sr, (size_t)p * ps, ps));
            CHECK_OK(ovl_progress());
            th_sleep_ms(3);
        }
        CHECK_OK(ovl_delta_send_end(sr));
        CHECK_OK(ovl_wait(&sr, NULL));
    } else if (th_rank == 1) {
        ovl_request_t rr;
        CHECK_OK(ovl_delta_recv(buf, (int)n, MPI_BYTE, 0, 7, &rr));
        for (int k = 0; k < PAGES; k++) {
            int p = down ? PAGES - 1 - k : k;
            CHECKF(((volatile char *)buf)[(size_t)p * ps + 5] == p + 1, "page %d", p);
        }
        CHECK_OK(ovl_wait(&rr, NULL));
    }
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
        const char *pm = getenv("OVL_PROGRESS");
        int thread = pm && !strcmp(pm, "thread");
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
            /* page-access verdicts: rank 1 read up, then down */
            const char *pat = r == 1 ? ":sequential-up,sequential-down" : "";
            at += (size_t)snprintf(cmd + at, cap - at, " '%s:%d:%s%s%s'", p, r, names,
                                   thread && r < 2 ? ",thread_name" : "", pat);
        }
        ok = system(cmd) == 0;
        CHECKF(ok, "check_trace.py failed: %.400s", cmd);
        free(cmd);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    remove(path);
    return th_finish();
}
