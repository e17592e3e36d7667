/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench: performance benchmarks of ovl on two MPI ranks. One program,
 * one subcommand per benchmark (the table below); each prints a human table
 * on rank 0 and writes CSV with --csv, which bench/plot.py turns into PNGs.
 * Benchmarks are never pass/fail tests: docs/PERFORMANCE.md reads them.
 */
#include "common.h"

#include <stdlib.h>
#include <string.h>

static const struct bench_cmd cmds[] = {
    { "latency-hiding", "the paper's daxpy benchmark: useful CPU while two ranks exchange",
      bench_latency_hiding },
    { "callback-latency", "delay from a message's arrival to its continuation, vs poll interval",
      bench_callback_latency },
    { "overview", "a < 60 s summary: plain MPI vs ovl (what 'make demo' runs)", bench_overview },
    { "delta", "delta send/receive kernels (pair, cascade, ring, reduce, ...) vs MPI",
      bench_delta },
    { "delta-sweep", "pair kernel: delta size x message size, both monitors, auto size",
      bench_delta_sweep },
    { "layouts", "real codes' memory layouts (transpose, halo): plain MPI vs ovl", bench_layouts },
    { "edges", "data sharing a page with a pending receive: cost per access kind", bench_edges },
    { "alloc", "receive into ovl_alloc memory vs private memory, per monitor", bench_alloc },
    { "dds", "one-sided: cost of demand-driven synchronisation (HUNT Table 2)", bench_dds },
    { "decomposition", "one-sided: get + use, strip-mined or not, vs MPI (HUNT Figs 8-9)",
      bench_decomposition },
    { "wire-cost", "plain MPI: CPU time the link itself takes (emulated cluster: the kernel's)",
      bench_wire_cost },
    { "wakeup-cost", "what one wake-up on the computing core costs it (thread, signal, ovl)",
      bench_wakeup_cost },
    { "domains", "threads vs processes: bidirectional latency and message rate per worker",
      bench_domains },
    { "am", "active messages: round trip vs ping-pong, and the polling-mask sweep", bench_am },
    { "plan", "loop-nest planner: protocol map, gemm panel, reduce, halo, transpose, overheads",
      bench_plan },
};
#define NCMDS (int)(sizeof cmds / sizeof cmds[0])

static void usage(FILE *f)
{
    fprintf(f, "Usage: mpiexec -n 2 ovl-bench COMMAND [options]\n\nCommands:\n");
    for (int i = 0; i < NCMDS; i++)
        fprintf(f, "  %-18s %s\n", cmds[i].name, cmds[i].summary);
    fprintf(f, "\n'ovl-bench COMMAND --help' describes each. On the emulated cluster:\n"
               "  testbed/ovl-cluster run --np 2 -- ovl-bench COMMAND ...\n");
}

int main(int argc, char **argv)
{
    /* MPICH's asynchronous progress thread spins from MPI_Init on: measure a
     * dedicated CPU's daxpy rate before it starts (the mpi-async variant). */
    if (bench_async_env())
        bench_daxpy_ns_clean = bench_daxpy_ns_median(10, 0.02);
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "ovl-bench: MPI_Init_thread failed\n");
        return 1;
    }
    bench_thread_level = provided;
    MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &bench_size);
    int rc = -1;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        if (bench_rank == 0)
            usage(argc < 2 ? stderr : stdout);
        rc = argc < 2 ? BENCH_EXIT_USAGE : 0;
    } else {
        for (int i = 0; i < NCMDS && rc < 0; i++)
            if (!strcmp(argv[1], cmds[i].name))
                rc = cmds[i].run(argc - 1, argv + 1);
        if (rc < 0) {
            if (bench_rank == 0) {
                fprintf(stderr, "ovl-bench: unknown command '%s'\n\n", argv[1]);
                usage(stderr);
            }
            rc = BENCH_EXIT_USAGE;
        }
    }
    if (rc == 0 && provided < MPI_THREAD_MULTIPLE && bench_rank == 0)
        fprintf(stderr, "ovl-bench: note: MPI provides thread level %d only\n", provided);
    fflush(stdout);
    MPI_Finalize();
    return rc;
}
