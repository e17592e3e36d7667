/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared pieces of ovl-bench: the subcommand table, option parsing that fails
 * the same way on every rank, the daxpy kernel that stands for "useful
 * computation" (as in the paper), one clock, order statistics, and a CSV
 * writer. Most benchmarks run on exactly two ranks (delta and delta-sweep on
 * two or more); rank 0 prints.
 */
#ifndef OVL_BENCH_COMMON_H
#define OVL_BENCH_COMMON_H

#include <ovl.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_EXIT_USAGE 2
#define BENCH_EXIT_FAIL  1

/* One subcommand of ovl-bench. run() returns the process exit code. */
struct bench_cmd {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

int bench_latency_hiding(int argc, char **argv);
int bench_callback_latency(int argc, char **argv);
int bench_overview(int argc, char **argv);
int bench_delta(int argc, char **argv);
int bench_delta_sweep(int argc, char **argv);
int bench_alloc(int argc, char **argv);
int bench_layouts(int argc, char **argv);
int bench_edges(int argc, char **argv);
/* The layouts benchmark's transpose (ovl initialised by the caller). */
void bench_layouts_transpose(int order, int iters, int reps);
int bench_dds(int argc, char **argv);
int bench_decomposition(int argc, char **argv);
int bench_wire_cost(int argc, char **argv);
int bench_wakeup_cost(int argc, char **argv);
int bench_domains(int argc, char **argv);
int bench_am(int argc, char **argv);
int bench_plan(int argc, char **argv);

extern int bench_rank, bench_size;

/* ---- time ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in seconds / nanoseconds. One clock for every rank of one
 * machine (network namespaces share it), which callback-latency relies on. */
double bench_now(void);
int64_t bench_now_ns(void);

/* ---- the computation ----------------------------------------------------------- */

#define BENCH_DAXPY_N 1000
/* y = a*x + y on two vectors of BENCH_DAXPY_N doubles (noinline, its own
 * translation unit: the compiler cannot hoist it out of a loop). */
void bench_daxpy(void);
/* Sum of y: print or use it so the work cannot be dropped. */
double bench_daxpy_checksum(void);
/* Run daxpy for @p seconds, reading the clock once per daxpy. */
long bench_daxpy_for(double seconds);
/* Nanoseconds per daxpy + clock read: the median of @p slices runs of
 * @p slice_s seconds each (a slice another process disturbed does not count). */
double bench_daxpy_ns_median(int slices, double slice_s);

/* ---- statistics ---------------------------------------------------------------- */

struct bench_stat {
    double med, min, max, p90, p99, mean;
};
/* Order statistics of v[0..n) (v is sorted in place). n == 0 gives zeros. */
struct bench_stat bench_stat_of(double *v, int n);
double bench_quantile(const double *sorted, int n, double q);

/* ---- options -------------------------------------------------------------------- */

/* Print the message (rank 0) and exit with BENCH_EXIT_USAGE on every rank.
 * Every rank parses the same argv, so all take this path together. */
void bench_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
/* Print @p text on rank 0 and exit 0 on every rank. */
void bench_help_exit(const char *text) __attribute__((noreturn));
/* Fatal runtime failure: message from any rank, MPI_Abort. */
void bench_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* The value of option argv[*i] (advances *i), or a usage error. */
const char *bench_optarg(const char *cmd, int argc, char **argv, int *i);
/* "4k" -> 4096 etc. (k, m, g: powers of 1024). */
size_t bench_parse_size(const char *cmd, const char *opt, const char *s);
long bench_parse_long(const char *cmd, const char *opt, const char *s, long lo, long hi);
double bench_parse_double(const char *cmd, const char *opt, const char *s, double lo, double hi);
/* Comma-separated lists; *out is malloc'ed. */
int bench_parse_size_list(const char *cmd, const char *opt, const char *s, size_t **out);
int bench_parse_long_list(const char *cmd, const char *opt, const char *s, long lo, long hi,
                          long **out);
/* Exit with a clear message unless there are exactly two ranks. */
void bench_require_two_ranks(const char *cmd);

/* "64 KB", "1 MB" */
const char *bench_fmt_size(size_t bytes, char *buf, size_t len);

/* ---- ovl ------------------------------------------------------------------------- */

/* ovl_init or die with ovl's detail. */
void bench_ovl_init(const ovl_config_t *cfg);
/* ovl_init with the progress thread on unless OVL_PROGRESS is set (other
 * options from OVL_*), and the configuration in force. */
void bench_ovl_start_thread(ovl_config_t *effective);
/* bench_ovl_start_thread, or with @inline_only ovl without its thread (a
 * process that runs no ovl variant, such as mpi-async's). */
void bench_ovl_start(int inline_only, ovl_config_t *effective);
void bench_ovl_finalize(void);
#define BENCH_OVL(call)                                                                          \
    do {                                                                                         \
        int bench_rc_ = (call);                                                                  \
        if (bench_rc_ != OVL_SUCCESS)                                                            \
            bench_fail("%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call, ovl_strerror(bench_rc_), \
                       ovl_error_detail());                                                      \
    } while (0)
#define BENCH_MPI(call)                                                                          \
    do {                                                                                         \
        int bench_rc_ = (call);                                                                  \
        if (bench_rc_ != MPI_SUCCESS)                                                            \
            bench_fail("%s:%d: %s failed (MPI error %d)", __FILE__, __LINE__, #call, bench_rc_); \
    } while (0)
/* An ovl_param_t with one option set, for a call's param argument. */
#define BENCH_MONITOR(m) (&(ovl_param_t){ .field_mask = OVL_PARAM_FIELD_MONITOR, .monitor = (m) })
#define BENCH_DECOMP(n)  (&(ovl_param_t){ .field_mask = OVL_PARAM_FIELD_DECOMP, .decomp = (n) })

/* Number of distinct hosts (processor names) among the ranks. */
int bench_hosts(void);
/* This machine's boot_id ("" if unreadable): identifies a running kernel. */
void bench_boot_id(char id[64]);
/* 1 if every rank runs on the same kernel (same boot_id): one clock. */
int bench_same_kernel(void);

/* ---- the MPI library ------------------------------------------------------------ */

/* The thread level MPI_Init_thread provided. */
extern int bench_thread_level;
/* 1 if the environment asks MPICH for its asynchronous progress thread
 * (MPIR_CVAR_ASYNC_PROGRESS or its aliases MPICH_ASYNC_PROGRESS,
 * MPIR_PARAM_ASYNC_PROGRESS set, and not to 0/no/false). */
int bench_async_env(void);
/* ns per daxpy + clock read, measured in main() before MPI_Init when
 * bench_async_env(): from MPI_Init on MPICH's thread spins on the computing
 * core, so this is the only dedicated rate such a process can measure.
 * 0 when not measured. */
extern double bench_daxpy_ns_clean;
/* Whether MPICH's asynchronous progress thread runs in this process, as the
 * library reports it (MPI_T control variable MPIR_CVAR_ASYNC_PROGRESS): 1 on,
 * 0 off, -1 the library is not MPICH (Open MPI 4.1 has no such thread).
 * @p lib gets the first line of MPI_Get_library_version. */
int bench_mpich_async(char *lib, size_t len);

/* ---- CPU accounting -------------------------------------------------------------- */

/* Seconds the CPUs this thread may run on (sched_getaffinity) spent idle,
 * in iowait or stolen by the hypervisor (/proc/stat, 1/USER_HZ resolution;
 * under NO_HZ the idle count itself is exact), and how many CPUs that is.
 * Returns 0, or -1 if /proc/stat cannot be read. */
int bench_cpus_unbusy(double *seconds, int *ncpu);
/* /proc/stat's unit: 1 / USER_HZ seconds. */
double bench_proc_stat_tick(void);

/* ---- CSV ------------------------------------------------------------------------- */

/* Open @p path for writing on rank 0 (NULL path or other ranks: NULL). */
FILE *bench_csv_open(const char *cmd, const char *path);
void bench_csv_close(FILE *f, const char *path);

#endif /* OVL_BENCH_COMMON_H */
