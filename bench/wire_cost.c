/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench wire-cost: what the link itself costs the CPUs. Plain MPI, no
 * ovl: rank 0 sends --total bytes to rank 1 in messages of each size, both
 * ranks waiting in MPI_Test with --poll-us sleeps, so that they use almost
 * no CPU themselves. Rank 0 reads the machine-wide CPU time from /proc/stat
 * around each rep: on a real cluster's NICs that time is small; on the
 * emulated cluster (testbed/ovl-cluster, one kernel for every "host") it is the
 * kernel's TCP, veth, bridge and shaper work, which runs on the same cores as
 * the program and so takes CPU from any computation overlapped with the
 * transfer. The ranks' own CPU time (getrusage, which includes the system
 * calls that copy into and out of the sockets) is shown next to it; the two
 * come from different accounting (ticks against exact task time), so they
 * are not subtracted. Needs
 * both ranks on one kernel (the emulated cluster, or one host); elsewhere
 * the machine-wide column covers rank 0's host only and says so.
 */
#include "common.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Busy and total CPU time of the machine, in seconds (/proc/stat "cpu"). */
static int machine_cpu(double *busy, double *total)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    unsigned long long v[8] = { 0 };
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n != 8)
        return -1;
    double hz = (double)sysconf(_SC_CLK_TCK), t = 0;
    for (int i = 0; i < 8; i++)
        t += (double)v[i];
    *total = t / hz;
    *busy = (t - (double)v[3] - (double)v[4]) / hz; /* minus idle and iowait */
    return 0;
}

static double own_cpu(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_utime.tv_sec + (double)r.ru_stime.tv_sec +
           1e-6 * (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

static void nap(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

int bench_wire_cost(int argc, char **argv)
{
    static const char *cmd = "wire-cost";
    size_t *sizes = NULL;
    int nsizes = 0;
    size_t total = (size_t)64 << 20;
    long poll_us = 200;
    int reps = 3, both = 0;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes"))
            nsizes =
                bench_parse_size_list(cmd, "--sizes", bench_optarg(cmd, argc, argv, &i), &sizes);
        else if (!strcmp(argv[i], "--total"))
            total = bench_parse_size(cmd, "--total", bench_optarg(cmd, argc, argv, &i));
        else if (!strcmp(argv[i], "--poll-us"))
            poll_us =
                bench_parse_long(cmd, "--poll-us", bench_optarg(cmd, argc, argv, &i), 0, 100000);
        else if (!strcmp(argv[i], "--reps"))
            reps = (int)bench_parse_long(cmd, "--reps", bench_optarg(cmd, argc, argv, &i), 1, 1000);
        else if (!strcmp(argv[i], "--csv"))
            csv = bench_optarg(cmd, argc, argv, &i);
        else if (!strcmp(argv[i], "--both"))
            both = 1;
        else if (!strcmp(argv[i], "--help"))
            bench_help_exit(
                "ovl-bench wire-cost [--sizes LIST] [--total SIZE] [--poll-us N] [--reps N]\n"
                "                    [--both] [--csv FILE]\n"
                "Plain MPI (no ovl): rank 0 sends --total bytes (default 64m) to rank 1 in\n"
                "messages of each size (default 64k,1m,4m); both ranks wait in MPI_Test with\n"
                "--poll-us (default 200) sleeps. Per size, the median over --reps (default 3)\n"
                "of: rate, the machine's busy CPU during the transfer (/proc/stat, in cores\n"
                "and in core-ms per MB moved) and the two ranks' own CPU (getrusage; other\n"
                "accounting, so not subtracted). On the emulated cluster the machine figure\n"
                "is what the wire costs the cores a computation would use. Both ranks must\n"
                "share one kernel. --both: rank 1 sends the same to rank 0 at the same time\n"
                "(an exchange, as in latency-hiding); MB/s is then per direction.\n");
        else
            bench_usage_error(cmd, "unknown option %s", argv[i]);
    }
    if (nsizes == 0) {
        static size_t def[] = { 65536, 1 << 20, 4 << 20 };
        nsizes = 3;
        sizes = malloc(sizeof def);
        if (!sizes)
            bench_fail("out of memory");
        memcpy(sizes, def, sizeof def);
    }
    for (int s = 0; s < nsizes; s++)
        if (sizes[s] == 0 || sizes[s] > (size_t)1 << 30 || sizes[s] > total)
            bench_usage_error(cmd, "--sizes: %zu is not in [1, min(1g, --total)]", sizes[s]);
    bench_require_two_ranks(cmd);
    int hosts = bench_hosts(), same = bench_same_kernel();
    size_t maxsz = 0;
    for (int s = 0; s < nsizes; s++)
        if (sizes[s] > maxsz)
            maxsz = sizes[s];
    char *buf = malloc(maxsz), *rbuf = malloc(maxsz);
    if (!buf || !rbuf)
        bench_fail("out of memory");
    memset(buf, bench_rank + 1, maxsz);

    FILE *f = bench_csv_open(cmd, csv);
    if (f)
        fprintf(f, "bench,msg_bytes,total_bytes,reps,poll_us,hosts,same_kernel,time_s_med,mbs_med,"
                   "machine_cores_med,ranks_cores_med,machine_core_ms_per_mb,directions\n");
    if (bench_rank == 0)
        printf("ovl-bench wire-cost: plain MPI, rank 0 %s rank 1, %d hosts%s; waits poll every %ld "
               "us; medians of %d reps\n"
               "%10s %10s %8s %10s %10s %14s\n",
               both ? "<->" : "->", hosts,
               same ? "" : " (ranks on different kernels: machine column is rank 0's host)",
               poll_us, reps, "message", "time s", "MB/s", "machine", "ranks", "machine");
    if (bench_rank == 0)
        printf("%10s %10s %8s %10s %10s %14s\n", "", "", "", "cores", "cores", "core-ms/MB");
    double *tm = calloc((size_t)reps * 3, sizeof(double));
    if (!tm)
        bench_fail("out of memory");
    for (int s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        long count = (long)(total / n);
        for (int r = 0; r < reps; r++) {
            double b0 = 0, t0 = 0, b1 = 0, t1 = 0;
            MPI_Barrier(MPI_COMM_WORLD);
            if (bench_rank == 0 && machine_cpu(&b0, &t0) != 0)
                bench_fail("wire-cost: cannot read /proc/stat");
            double c0 = own_cpu(), w0 = bench_now();
            const int peer = 1 - bench_rank;
            for (long k = 0; k < count; k++) {
                MPI_Request rq[2] = { MPI_REQUEST_NULL, MPI_REQUEST_NULL };
                int done = 0;
                if (bench_rank == 1 || both)
                    MPI_Irecv(rbuf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &rq[0]);
                if (bench_rank == 0 || both)
                    MPI_Isend(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &rq[1]);
                for (;;) {
                    MPI_Status sts[2];
                    MPI_Testall(2, rq, &done, sts);
                    if (done)
                        break;
                    if (poll_us)
                        nap(poll_us);
                }
            }
            double own = own_cpu() - c0, ranks = 0;
            MPI_Reduce(&own, &ranks, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            if (bench_rank == 0) {
                double w = bench_now() - w0;
                if (machine_cpu(&b1, &t1) != 0)
                    bench_fail("wire-cost: cannot read /proc/stat");
                tm[r] = w;
                tm[reps + r] = b1 - b0;
                tm[2 * reps + r] = ranks;
            }
        }
        if (bench_rank == 0) {
            struct bench_stat st = bench_stat_of(tm, reps);
            struct bench_stat sb = bench_stat_of(tm + reps, reps);
            struct bench_stat sr = bench_stat_of(tm + 2 * reps, reps);
            double mb = (double)n * (double)count / 1e6; /* per direction */
            char sz[32];
            printf("%10s %10.3f %8.1f %10.2f %10.2f %14.2f\n", bench_fmt_size(n, sz, sizeof sz),
                   st.med, mb / st.med, sb.med / st.med, sr.med / st.med,
                   1e3 * sb.med / (mb * (both ? 2 : 1)));
            if (f)
                fprintf(f, "wire-cost,%zu,%zu,%d,%ld,%d,%d,%.4f,%.2f,%.3f,%.3f,%.3f,%d\n", n,
                        (size_t)count * n, reps, poll_us, hosts, same, st.med, mb / st.med,
                        sb.med / st.med, sr.med / st.med, 1e3 * sb.med / (mb * (both ? 2 : 1)),
                        both ? 2 : 1);
        }
    }
    if (bench_rank == 0)
        printf(
            "(/proc/stat counts in clock ticks of %ld Hz: a rep shorter than ~0.5 s is coarse)\n",
            sysconf(_SC_CLK_TCK));
    bench_csv_close(f, csv);
    free(tm);
    free(buf);
    free(rbuf);
    free(sizes);
    return 0;
}
