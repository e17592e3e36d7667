/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench alloc: what receiving into ovl_alloc memory saves. Rank 0
 * receives @bytes into a buffer a fault monitor guards, then reads every
 * cache line of it at once (each page waits for its data), then waits for
 * the request; rank 1 sends. Three transfers:
 *
 *   delta   ovl_delta_send (explicit, produced at once) -> ovl_delta_recv:
 *           pieces arrive in ovl's slots and are placed in the buffer
 *   isend   ovl_isend -> ovl_delta_recv: one MPI message, received where
 *           the monitor lets MPI write
 *   get     ovl_get from rank 1's segment (strips as the model splits;
 *           on one node only with OVL_RMA_LOCAL=overlap, else a direct
 *           copy inside the call)
 *
 * each into private anonymous memory ("mmap") and into ovl_alloc memory,
 * under each fault monitor. mprotect places private memory's bytes through
 * /proc/self/mem after a staging copy; ovl_alloc memory is written through
 * its second mapping (delta) or received there by MPI directly (isend,
 * get). uffd receives private memory in a shadow and moves its pages back.
 * Rank 0 reports the median wall time from post to the last byte used (its
 * CPU time is not shown: a waiting access drives the progress engine, so
 * it equals the wall time). All variants run interleaved in every rep;
 * every byte is checked after each run (not timed).
 */
#include "common.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { OP_DELTA, OP_ISEND, OP_GET, NOP };
static const char *opname[NOP] = { "delta", "isend", "get" };
enum { MEM_MMAP, MEM_OVL, NMEM };
static const char *memname[NMEM] = { "mmap", "ovl_alloc" };

static unsigned char pattern(size_t i, int rep)
{
    return (unsigned char)(i * 131 + (size_t)rep * 7 + 5);
}

static volatile uint64_t sink;

/* One transfer; rank 0 returns the wall time in seconds. */
static void run_once(int op, ovl_monitor_t mon, unsigned char *dst, unsigned char *src,
                     size_t bytes, ovl_segment_t seg, int tag, double *wall)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (bench_rank == 1) {
        if (op == OP_GET) {
            MPI_Barrier(MPI_COMM_WORLD); /* MPI progress for the get, then done */
            return;
        }
        ovl_request_t r;
        if (op == OP_ISEND) {
            BENCH_OVL(ovl_isend(src, (int)bytes, MPI_BYTE, 0, tag, &r));
        } else {
            BENCH_OVL(ovl_delta_send_begin(src, (int)bytes, MPI_BYTE, 0, tag,
                                           BENCH_MONITOR(OVL_MONITOR_EXPLICIT), &r));
            BENCH_OVL(ovl_delta_produced(r, 0, bytes));
            BENCH_OVL(ovl_delta_send_end(r, NULL));
        }
        BENCH_OVL(ovl_wait(&r, NULL));
        MPI_Barrier(MPI_COMM_WORLD);
        return;
    }
    double t0 = bench_now();
    ovl_request_t r = OVL_REQUEST_NULL;
    if (op == OP_GET)
        BENCH_OVL(ovl_get(dst, 1, 0, bytes, seg, NULL, NULL));
    else
        BENCH_OVL(ovl_delta_recv(dst, (int)bytes, MPI_BYTE, 1, tag, BENCH_MONITOR(mon), &r));
    uint64_t s = 0;
    for (size_t i = 0; i < bytes; i += 64)
        s += dst[i];
    if (op == OP_GET)
        BENCH_OVL(ovl_fence(seg));
    else
        BENCH_OVL(ovl_wait(&r, NULL));
    *wall = bench_now() - t0;
    sink += s;
    MPI_Barrier(MPI_COMM_WORLD);
}

int bench_alloc(int argc, char **argv)
{
    static const char *cmd = "alloc";
    size_t bytes = (size_t)16 << 20;
    int reps = 9, warmup = 1;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes"))
            bytes = bench_parse_size(cmd, "--bytes", bench_optarg(cmd, argc, argv, &i));
        else if (!strcmp(argv[i], "--reps"))
            reps =
                (int)bench_parse_long(cmd, "--reps", bench_optarg(cmd, argc, argv, &i), 1, 100000);
        else if (!strcmp(argv[i], "--warmup"))
            warmup =
                (int)bench_parse_long(cmd, "--warmup", bench_optarg(cmd, argc, argv, &i), 0, 1000);
        else if (!strcmp(argv[i], "--csv"))
            csv = bench_optarg(cmd, argc, argv, &i);
        else if (!strcmp(argv[i], "--help"))
            bench_help_exit(
                "ovl-bench alloc [--bytes SIZE] [--reps N] [--warmup N] [--csv FILE]\n"
                "Receive --bytes (default 16m) into private memory and into ovl_alloc\n"
                "memory, under each fault monitor, by delta send, ovl_isend and ovl_get;\n"
                "rank 0 reads every cache line at once. Median wall time from post to the\n"
                "last byte used, and the mmap / ovl_alloc ratio.\n"
                "Reps: --reps (default 9) after --warmup (default 1), variants interleaved.\n");
        else
            bench_usage_error(cmd, "unknown option %s", argv[i]);
    }
    if (bytes == 0 || bytes > (size_t)1 << 30)
        bench_usage_error(cmd, "--bytes: %zu is not in [1, 1g]", bytes);
    bench_require_two_ranks(cmd);
    int hosts = bench_hosts();
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);

    ovl_monitor_t mons[2];
    int nmon = 0;
    mons[nmon++] = OVL_MONITOR_MPROTECT;
    ovl_monitor_t chosen;
    int have_uffd = ovl_monitor_probe(OVL_MONITOR_UFFD, &chosen, NULL, 0) == OVL_SUCCESS;
    int both_uffd = 0;
    MPI_Allreduce(&have_uffd, &both_uffd, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (both_uffd)
        mons[nmon++] = OVL_MONITOR_UFFD;

    /* buffers: rank 0 receives into one of each kind, rank 1 sends from one */
    unsigned char *dst[NMEM];
    dst[MEM_MMAP] = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dst[MEM_MMAP] == MAP_FAILED)
        bench_fail("mmap of %zu bytes failed", bytes);
    BENCH_OVL(ovl_alloc(bytes, &dst[MEM_OVL]));
    unsigned char *src = NULL;
    BENCH_OVL(ovl_alloc(bytes, &src));
    for (int m = 0; m < NMEM; m++)
        memset(dst[m], 0, bytes);
    ovl_segment_t seg;
    void *sbase = NULL;
    BENCH_OVL(ovl_segment_create(bench_rank == 1 ? bytes : 0, &sbase, &seg));

    int nvar = NOP * nmon * NMEM;
    double *wall = calloc((size_t)nvar * (size_t)reps, sizeof(double));
    if (!wall)
        bench_fail("out of memory");
    for (int r = -warmup; r < reps; r++) {
        /* new data every rep, so a stale page would show */
        if (bench_rank == 1) {
            for (size_t i = 0; i < bytes; i++)
                src[i] = pattern(i, r + warmup);
            memcpy(sbase, src, bytes);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        for (int k = 0; k < nvar; k++) {
            int v = (k + (r + warmup)) % nvar; /* rotate the order every rep */
            int op = v / (nmon * NMEM), mi = (v / NMEM) % nmon, me = v % NMEM;
            double w = 0;
            run_once(op, mons[mi], dst[me], src, bytes, seg, 100 + v, &w);
            if (bench_rank == 0) {
                for (size_t i = 0; i < bytes; i++)
                    if (dst[me][i] != pattern(i, r + warmup))
                        bench_fail("alloc: %s/%s/%s: byte %zu of %zu is %#x, expected %#x",
                                   opname[op], ovl_monitor_name(mons[mi]), memname[me], i, bytes,
                                   dst[me][i], pattern(i, r + warmup));
                memset(dst[me], 0, bytes);
                if (r >= 0)
                    wall[v * reps + r] = w;
            }
        }
    }

    if (bench_rank == 0) {
        char sz[32];
        printf("ovl-bench alloc: %s received on rank 0, %d reps (median), %d hosts\n",
               bench_fmt_size(bytes, sz, sizeof sz), reps, hosts);
        printf("%-6s %-9s | %-16s | %-16s | %s\n", "", "", "mmap", "ovl_alloc", "mmap/");
        printf("%-6s %-9s | %9s %6s | %9s %6s | %s\n", "op", "monitor", "wall ms", "GB/s",
               "wall ms", "GB/s", "ovl_alloc");
    }
    FILE *f = bench_csv_open(cmd, csv);
    if (f)
        fprintf(f, "bench,op,monitor,memory,bytes,reps,hosts,wall_med_ms,wall_min_ms,wall_p90_ms,"
                   "gbs\n");
    if (bench_rank == 0) {
        for (int op = 0; op < NOP; op++)
            for (int mi = 0; mi < nmon; mi++) {
                struct bench_stat sw[NMEM];
                for (int me = 0; me < NMEM; me++) {
                    int v = (op * nmon + mi) * NMEM + me;
                    sw[me] = bench_stat_of(&wall[v * reps], reps);
                    if (f)
                        fprintf(f, "alloc,%s,%s,%s,%zu,%d,%d,%.4f,%.4f,%.4f,%.4f\n", opname[op],
                                ovl_monitor_name(mons[mi]), memname[me], bytes, reps, hosts,
                                sw[me].med * 1e3, sw[me].min * 1e3, sw[me].p90 * 1e3,
                                (double)bytes / sw[me].med / 1e9);
                }
                printf("%-6s %-9s | %9.3f %6.3f | %9.3f %6.3f | %6.2f\n", opname[op],
                       ovl_monitor_name(mons[mi]), sw[0].med * 1e3, (double)bytes / sw[0].med / 1e9,
                       sw[1].med * 1e3, (double)bytes / sw[1].med / 1e9, sw[0].med / sw[1].med);
            }
    }
    bench_csv_close(f, csv);
    free(wall);
    BENCH_OVL(ovl_segment_free(&seg));
    munmap(dst[MEM_MMAP], bytes);
    BENCH_OVL(ovl_free(dst[MEM_OVL]));
    BENCH_OVL(ovl_free(src));
    bench_ovl_finalize();
    return 0;
}
