/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The shared test harness (see harness.h): MPI/ovl start-up, check counting,
 * failure reports that abort the job, and deterministic random data.
 */
#include "harness.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int th_rank = -1;
int th_size = 0;
static const char *th_name = "test";
static atomic_ulong checks;
static th_rng_t rank_rng;
static uint64_t seed;
static int seed_set;

void th_pass(void)
{
    atomic_fetch_add_explicit(&checks, 1, memory_order_relaxed);
}

unsigned long th_checks(void)
{
    return atomic_load(&checks);
}

const char *th_code_name(int code)
{
    static _Thread_local char buf[160];
    const char *name = "unknown code";
    switch (code) {
#define TH_X_NAME(n, value, msg) \
    case value:                  \
        name = "OVL_" #n;        \
        break;
        OVL_ERROR_MAP(TH_X_NAME)
#undef TH_X_NAME
    default:
        break;
    }
    snprintf(buf, sizeof buf, "%d %s (%s)", code, name, ovl_strerror(code));
    return buf;
}

static _Noreturn void die(void)
{
    fflush(stdout);
    fflush(stderr);
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void th_fail(const char *file, int line, const char *expr, const char *why)
{
    const char *base = strrchr(file, '/');
    fprintf(stderr, "FAIL %s:%d %s -> %s [%s, rank %d of %d, seed %" PRIu64 "]\n",
            base ? base + 1 : file, line, expr, why ? why : "false", th_name, th_rank, th_size,
            th_seed());
    die();
}

void th_fail_rc(const char *file, int line, const char *expr, int got, int want)
{
    char why[512];
    char gotname[160];
    snprintf(gotname, sizeof gotname, "%s", th_code_name(got));
    snprintf(why, sizeof why, "%s, expected %s; detail: \"%s\"", gotname, th_code_name(want),
             ovl_error_detail());
    th_fail(file, line, expr, why);
}

void th_progress(void)
{
    int rc = ovl_progress();
    if (rc != OVL_SUCCESS)
        th_fail_rc(__FILE__, __LINE__, "ovl_progress()", rc, OVL_SUCCESS);
    th_pass();
}

double th_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void th_sleep_ms(unsigned ms)
{
    struct timespec ts = { (time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ---- random numbers --------------------------------------------------- */

uint64_t th_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t th_seed(void)
{
    if (!seed_set) {
        const char *s = getenv("OVL_TEST_SEED");
        seed = (s && *s) ? strtoull(s, NULL, 0) : 20240611ull;
        seed_set = 1;
    }
    return seed;
}

void th_rng_init(th_rng_t *r, uint64_t a, uint64_t b, uint64_t c)
{
    r->s = th_mix(th_mix(th_mix(th_seed() ^ 0x5851f42d4c957f2dull) ^ a) ^ b) ^ c;
}

uint64_t th_rand(th_rng_t *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    uint64_t x = r->s;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t th_below(th_rng_t *r, uint64_t n)
{
    return n ? th_rand(r) % n : 0;
}

size_t th_size_log(th_rng_t *r, size_t max)
{
    if (max == 0)
        return 0;
    unsigned bits = 0;
    while (bits < 63 && ((size_t)1 << bits) <= max)
        bits++;
    size_t cap = (size_t)1 << th_below(r, bits + 1); /* 1 .. 2^bits */
    size_t v = (size_t)th_below(r, cap);
    return v > max ? max : v;
}

th_rng_t *th_rng(void)
{
    return &rank_rng;
}

uint8_t th_pattern_byte(uint64_t key, size_t i)
{
    return (uint8_t)(th_mix(key * 0x2545f4914f6cdd1dull + i / 8) >> (8 * (i % 8)));
}

void th_fill(void *buf, size_t n, uint64_t key, size_t offset)
{
    uint8_t *p = buf;
    size_t i = 0;
    uint64_t k = key * 0x2545f4914f6cdd1dull;
    for (; i < n && (offset + i) % 8; i++)
        p[i] = th_pattern_byte(key, offset + i);
    for (; i + 8 <= n; i += 8) {
        uint64_t w = th_mix(k + (offset + i) / 8);
        for (unsigned b = 0; b < 8; b++)
            p[i + b] = (uint8_t)(w >> (8 * b));
    }
    for (; i < n; i++)
        p[i] = th_pattern_byte(key, offset + i);
}

size_t th_verify(const void *buf, size_t n, uint64_t key, size_t offset)
{
    const uint8_t *p = buf;
    uint8_t tmp[4096];
    for (size_t done = 0; done < n;) {
        size_t c = n - done < sizeof tmp ? n - done : sizeof tmp;
        th_fill(tmp, c, key, offset + done);
        if (memcmp(tmp, p + done, c) != 0) {
            for (size_t j = 0; j < c; j++)
                if (tmp[j] != p[done + j])
                    return done + j;
        }
        done += c;
    }
    return TH_OK;
}

/* ---- start and end ------------------------------------------------------ */

int th_init_mpi(int *argc, char ***argv, const char *name, int required)
{
    int provided = MPI_THREAD_SINGLE;
    th_name = name;
    if (MPI_Init_thread(argc, argv, required, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "FAIL %s: MPI_Init_thread failed\n", name);
        exit(1);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &th_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &th_size);
    th_rng_init(&rank_rng, 0x72616e6bull, (uint64_t)th_rank, 0);
    if (th_rank == 0)
        printf("%s: %d ranks, seed %" PRIu64 " (set OVL_TEST_SEED to replay), OVL_PROGRESS=%s\n",
               name, th_size, th_seed(), getenv("OVL_PROGRESS") ? getenv("OVL_PROGRESS") : "");
    fflush(stdout);
    return provided;
}

const ovl_config_t *th_config(const ovl_config_t *cfg)
{
    static ovl_config_t merged;
    static const char *const names[] = { "auto", "uffd", "mprotect", "explicit" };
    const char *m = getenv("OVL_TEST_MONITOR");
    if (!m || !*m || (cfg && (cfg->field_mask & OVL_CONFIG_FIELD_MONITOR)))
        return cfg;
    int which = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(m, names[i]) == 0)
            which = i;
    CHECKF(which >= 0, "OVL_TEST_MONITOR=%s: expected auto, uffd, mprotect or explicit", m);
    merged = cfg ? *cfg : (ovl_config_t){ .field_mask = 0 };
    merged.field_mask |= OVL_CONFIG_FIELD_MONITOR;
    merged.access.monitor = (ovl_monitor_t)which;
    return &merged;
}

void th_init(int *argc, char ***argv, const char *name, const ovl_config_t *cfg)
{
    int provided = th_init_mpi(argc, argv, name, MPI_THREAD_MULTIPLE);
    CHECKF(provided == MPI_THREAD_MULTIPLE, "MPI provides thread level %d only", provided);
    CHECK_OK(ovl_init(MPI_COMM_WORLD, th_config(cfg)));
}

int th_finish(void)
{
    if (ovl_initialized())
        CHECK_OK(ovl_finalize());
    unsigned long mine = th_checks(), total = 0;
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    MPI_Get_processor_name(host, &len);
    printf("rank %d (%s): %lu checks passed\n", th_rank, host, mine);
    fflush(stdout);
    MPI_Reduce(&mine, &total, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (th_rank == 0)
        printf("%s: PASSED on all %d ranks (%lu checks, seed %" PRIu64 ")\n", th_name, th_size,
               total, th_seed());
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
