/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers shared by the ovl-bench subcommands (see common.h).
 */
#include "common.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int bench_rank = 0, bench_size = 1;
int bench_thread_level = MPI_THREAD_SINGLE;
double bench_daxpy_ns_clean = 0;

/* ---- time ------------------------------------------------------------------ */

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

/* ---- daxpy -------------------------------------------------------------------- */

static double dx[BENCH_DAXPY_N], dy[BENCH_DAXPY_N];
static int daxpy_ready;

__attribute__((noinline)) void bench_daxpy(void)
{
    /* a is tiny so y never overflows however long a run lasts */
    const double a = 1e-9;
    if (!daxpy_ready) {
        for (int i = 0; i < BENCH_DAXPY_N; i++) {
            dx[i] = 1.0 + (double)i / BENCH_DAXPY_N;
            dy[i] = 0.0;
        }
        daxpy_ready = 1;
    }
    for (int i = 0; i < BENCH_DAXPY_N; i++)
        dy[i] = a * dx[i] + dy[i];
}

double bench_daxpy_checksum(void)
{
    double s = 0;
    for (int i = 0; i < BENCH_DAXPY_N; i++)
        s += dy[i];
    return s;
}

long bench_daxpy_for(double seconds)
{
    long n = 0;
    double end = bench_now() + seconds;
    while (bench_now() < end) {
        bench_daxpy();
        n++;
    }
    return n;
}

double bench_daxpy_ns_median(int slices, double slice_s)
{
    double *v = malloc((size_t)slices * sizeof *v);
    if (!v)
        return 0;
    for (int i = 0; i < slices; i++) {
        long n = bench_daxpy_for(slice_s);
        v[i] = slice_s * 1e9 / (double)(n ? n : 1);
    }
    double m = bench_stat_of(v, slices).med;
    free(v);
    return m;
}

/* ---- statistics ---------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_quantile(const double *sorted, int n, double q)
{
    if (n <= 0)
        return 0;
    double pos = q * (double)(n - 1);
    int lo = (int)pos;
    if (lo >= n - 1)
        return sorted[n - 1];
    double f = pos - (double)lo;
    return sorted[lo] * (1 - f) + sorted[lo + 1] * f;
}

struct bench_stat bench_stat_of(double *v, int n)
{
    struct bench_stat s = { 0, 0, 0, 0, 0, 0 };
    if (n <= 0)
        return s;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    s.mean = sum / n;
    s.min = v[0];
    s.max = v[n - 1];
    s.med = bench_quantile(v, n, 0.5);
    s.p90 = bench_quantile(v, n, 0.9);
    s.p99 = bench_quantile(v, n, 0.99);
    return s;
}

/* ---- options -------------------------------------------------------------------- */

__attribute__((noreturn)) static void finish_and_exit(int code)
{
    fflush(stdout);
    fflush(stderr);
    MPI_Finalize();
    exit(code);
}

void bench_usage_error(const char *cmd, const char *fmt, ...)
{
    if (bench_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "ovl-bench %s: ", cmd);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\nTry 'ovl-bench %s --help'.\n", cmd);
        va_end(ap);
    }
    finish_and_exit(BENCH_EXIT_USAGE);
}

void bench_help_exit(const char *text)
{
    if (bench_rank == 0)
        fputs(text, stdout);
    finish_and_exit(0);
}

void bench_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ovl-bench (rank %d): ", bench_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
    exit(BENCH_EXIT_FAIL);
}

const char *bench_optarg(const char *cmd, int argc, char **argv, int *i)
{
    const char *opt = argv[*i];
    if (*i + 1 >= argc)
        bench_usage_error(cmd, "option %s needs a value", opt);
    return argv[++*i];
}

size_t bench_parse_size(const char *cmd, const char *opt, const char *s)
{
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        bench_usage_error(cmd, "%s: \"%s\" is not a size (e.g. 4k, 64k, 1m)", opt, s);
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0')
        bench_usage_error(cmd, "%s: \"%s\" is not a size (e.g. 4k, 64k, 1m)", opt, s);
    if (v > (1ull << 40) >> shift)
        bench_usage_error(cmd, "%s: \"%s\" is too large", opt, s);
    return (size_t)(v << shift);
}

long bench_parse_long(const char *cmd, const char *opt, const char *s, long lo, long hi)
{
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0')
        bench_usage_error(cmd, "%s: \"%s\" is not an integer", opt, s);
    if (v < lo || v > hi)
        bench_usage_error(cmd, "%s: %ld out of range [%ld, %ld]", opt, v, lo, hi);
    return v;
}

double bench_parse_double(const char *cmd, const char *opt, const char *s, double lo, double hi)
{
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || v != v)
        bench_usage_error(cmd, "%s: \"%s\" is not a number", opt, s);
    if (v < lo || v > hi)
        bench_usage_error(cmd, "%s: %g out of range [%g, %g]", opt, v, lo, hi);
    return v;
}

/* Split a comma list; calls item() on each element. Returns the count. */
static int split_list(const char *cmd, const char *opt, const char *s, char ***items)
{
    if (!*s)
        bench_usage_error(cmd, "%s: empty list", opt);
    char *copy = strdup(s);
    int n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    char **v = calloc((size_t)n, sizeof *v);
    if (!copy || !v)
        bench_fail("out of memory");
    int k = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        v[k++] = tok;
    if (k != n)
        bench_usage_error(cmd, "%s: empty element in \"%s\"", opt, s);
    *items = v;
    return n;
}

int bench_parse_size_list(const char *cmd, const char *opt, const char *s, size_t **out)
{
    char **items;
    int n = split_list(cmd, opt, s, &items);
    size_t *v = malloc((size_t)n * sizeof *v);
    if (!v)
        bench_fail("out of memory");
    for (int i = 0; i < n; i++) {
        v[i] = bench_parse_size(cmd, opt, items[i]);
        if (v[i] == 0)
            bench_usage_error(cmd, "%s: sizes must be > 0", opt);
    }
    free(items[0]);
    free(items);
    *out = v;
    return n;
}

int bench_parse_long_list(const char *cmd, const char *opt, const char *s, long lo, long hi,
                          long **out)
{
    char **items;
    int n = split_list(cmd, opt, s, &items);
    long *v = malloc((size_t)n * sizeof *v);
    if (!v)
        bench_fail("out of memory");
    for (int i = 0; i < n; i++)
        v[i] = bench_parse_long(cmd, opt, items[i], lo, hi);
    free(items[0]);
    free(items);
    *out = v;
    return n;
}

void bench_require_two_ranks(const char *cmd)
{
    if (bench_size == 2)
        return;
    if (bench_rank == 0)
        fprintf(stderr,
                "ovl-bench %s: needs exactly 2 MPI ranks, got %d.\n"
                "Run e.g. 'mpiexec -n 2 ovl-bench %s' or "
                "'testbed/ovl-cluster run --np 2 -- ovl-bench %s'.\n",
                cmd, bench_size, cmd, cmd);
    finish_and_exit(BENCH_EXIT_USAGE);
}

const char *bench_fmt_size(size_t b, char *buf, size_t len)
{
    if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(buf, len, "%zu MB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(buf, len, "%zu KB", b >> 10);
    else
        snprintf(buf, len, "%zu B", b);
    return buf;
}

/* ---- ovl ------------------------------------------------------------------------- */

void bench_ovl_init(const ovl_config_t *cfg)
{
    BENCH_OVL(ovl_init(MPI_COMM_WORLD, cfg));
}

void bench_ovl_start_thread(ovl_config_t *effective)
{
    /* The progress thread, unless OVL_PROGRESS asks otherwise. */
    ovl_config_t cfg = { .field_mask = getenv("OVL_PROGRESS") ? 0u : OVL_CONFIG_FIELD_PROGRESS,
                         .progress.mode = OVL_PROGRESS_THREAD };
    bench_ovl_init(&cfg);
    BENCH_OVL(ovl_config_get(effective));
}

void bench_ovl_start(int inline_only, ovl_config_t *effective)
{
    if (!inline_only) {
        bench_ovl_start_thread(effective);
        return;
    }
    ovl_config_t cfg = { .field_mask = OVL_CONFIG_FIELD_PROGRESS,
                         .progress.mode = OVL_PROGRESS_INLINE };
    bench_ovl_init(&cfg);
    BENCH_OVL(ovl_config_get(effective));
}

void bench_ovl_finalize(void)
{
    BENCH_OVL(ovl_finalize());
}

int bench_hosts(void)
{
    char name[MPI_MAX_PROCESSOR_NAME] = { 0 };
    int len = 0;
    MPI_Get_processor_name(name, &len);
    char *all = calloc((size_t)bench_size, MPI_MAX_PROCESSOR_NAME);
    if (!all)
        bench_fail("out of memory");
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                  MPI_COMM_WORLD);
    int distinct = 0;
    for (int i = 0; i < bench_size; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = !strncmp(all + (size_t)i * MPI_MAX_PROCESSOR_NAME,
                            all + (size_t)j * MPI_MAX_PROCESSOR_NAME, MPI_MAX_PROCESSOR_NAME);
        distinct += !seen;
    }
    free(all);
    return distinct;
}

void bench_boot_id(char id[64])
{
    memset(id, 0, 64);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(id, 64, f))
            id[0] = '\0';
        fclose(f);
    }
}

int bench_same_kernel(void)
{
    char id[64];
    bench_boot_id(id);
    char first[64];
    memcpy(first, id, sizeof first);
    MPI_Bcast(first, (int)sizeof first, MPI_CHAR, 0, MPI_COMM_WORLD);
    int same = id[0] != '\0' && !memcmp(first, id, sizeof id), all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all;
}

/* ---- the MPI library ------------------------------------------------------------ */

int bench_async_env(void)
{
    static const char *const names[] = { "MPIR_CVAR_ASYNC_PROGRESS", "MPICH_ASYNC_PROGRESS",
                                         "MPIR_PARAM_ASYNC_PROGRESS" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v && strcmp(v, "0") && strcasecmp(v, "no") && strcasecmp(v, "false"))
            return 1;
    }
    return 0;
}

int bench_mpich_async(char *lib, size_t len)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING + 1] = "";
    int n = 0;
    MPI_Get_library_version(v, &n);
    if (len > 0) {
        size_t k = strcspn(v, "\n");
        if (k >= len)
            k = len - 1;
        memcpy(lib, v, k);
        lib[k] = '\0';
    }
    if (!strstr(v, "MPICH"))
        return -1;
    int on = 0, level = 0, idx = -1;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &level) != MPI_SUCCESS)
        return 0;
    if (MPI_T_cvar_get_index("MPIR_CVAR_ASYNC_PROGRESS", &idx) == MPI_SUCCESS) {
        MPI_T_cvar_handle h;
        int count = 0;
        if (MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS) {
            union {
                int i; /* MPICH's boolean */
                char room[64];
            } val;
            memset(&val, 0, sizeof val);
            if (count == 1 && MPI_T_cvar_read(h, &val) == MPI_SUCCESS)
                on = val.i != 0;
            MPI_T_cvar_handle_free(&h);
        }
    }
    MPI_T_finalize();
    return on;
}

/* ---- CPU accounting -------------------------------------------------------------- */

double bench_proc_stat_tick(void)
{
    long hz = sysconf(_SC_CLK_TCK);
    return 1.0 / (double)(hz > 0 ? hz : 100);
}

int bench_cpus_unbusy(double *seconds, int *ncpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    char line[512];
    double ticks = 0;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        /* "cpuN user nice system idle iowait irq softirq steal ..." (not the "cpu " total) */
        if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9')
            continue;
        int cpu = -1;
        unsigned long long x[8] = { 0 };
        if (sscanf(line + 3, "%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &x[0], &x[1],
                   &x[2], &x[3], &x[4], &x[5], &x[6], &x[7]) != 9)
            continue;
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set))
            continue;
        ticks += (double)x[3] + (double)x[4] + (double)x[7];
        n++;
    }
    fclose(f);
    if (n == 0)
        return -1;
    *seconds = ticks * bench_proc_stat_tick();
    *ncpu = n;
    return 0;
}

/* ---- CSV ------------------------------------------------------------------------- */

FILE *bench_csv_open(const char *cmd, const char *path)
{
    int ok = 1;
    FILE *f = NULL;
    if (path && bench_rank == 0) {
        f = fopen(path, "w");
        ok = f != NULL;
        if (!ok)
            fprintf(stderr, "ovl-bench %s: cannot write %s: %s\n", cmd, path, strerror(errno));
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok)
        finish_and_exit(BENCH_EXIT_FAIL);
    return f;
}

void bench_csv_close(FILE *f, const char *path)
{
    if (!f)
        return;
    if (fclose(f) != 0)
        fprintf(stderr, "ovl-bench: error writing %s\n", path);
    else
        printf("CSV written to %s\n", path);
}
