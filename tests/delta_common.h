/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers shared by the delta send/receive tests (test_delta*.c), on top of
 * harness.h:
 *  - start-up: MPI, the monitor check (a uffd variant where userfaultfd is
 *    unavailable exits 77, "skipped"), ovl_init, a watchdog;
 *  - pairs: rank r works with r ^ 1, the even rank of a pair usually
 *    sends (dt_pair); EXPECT_REJECTED, a call that must fail and leave
 *    its request output untouched;
 *  - the watchdog: a thread that turns a hang (typically inside an access
 *    fault, where TH_WAIT_UNTIL cannot help) into a FAIL line naming the
 *    phase that did not finish;
 *  - test regions: an unaligned buffer inside whole pages, the rest of its
 *    first and last pages filled with sentinel bytes that must survive;
 *  - producing a delta-send buffer the way a program computes it (in order,
 *    or in shuffled strips with ovl_delta_produced in explicit mode), and
 *    using a pending delta-receive buffer the way a program would (page
 *    strides in random order, reads and writes, ovl_delta_need first in
 *    explicit mode), then checking every byte.
 * Everything is static inline: each test program uses a different subset.
 */
#ifndef OVL_TEST_DELTA_COMMON_H
#define OVL_TEST_DELTA_COMMON_H

#include "harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define DT_SLOW 2 /* time limits are multiplied by this under ASan */
#elif defined(__SANITIZE_THREAD__)
/* and by this under TSan: 4 ranks with a progress thread each on a small
 * machine take over 60 s for test_delta's 'sizes' (64 MiB rounds) */
#define DT_SLOW 3
#else
#define DT_SLOW 1
#endif

static inline size_t dt_page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* A byte with every bit flipped (what the tests write into received data). */
static inline uint8_t dt_flip(uint8_t b)
{
    return (uint8_t)(0xffu ^ b);
}

static inline size_t dt_min(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* ---- watchdog ------------------------------------------------------------ */

static pthread_t dt_wd_thread;
static atomic_int dt_wd_stop;
static _Atomic(const char *) dt_wd_phase = "start-up";
static atomic_llong dt_wd_deadline_ms; /* 0: no limit */

/* vm.max_map_count (-1 if unreadable), and the mappings this process has. */
static inline long dt_map_limit(void)
{
    long v = -1;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static inline long dt_map_count(void)
{
    long n = 0;
    int c;
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

static inline long long dt_now_ms(void)
{
    return (long long)(th_now() * 1000.0);
}

static inline void *dt_wd_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&dt_wd_stop)) {
        long long dl = atomic_load(&dt_wd_deadline_ms);
        if (dl && dt_now_ms() > dl) {
            char why[256];
            snprintf(why, sizeof why, "phase '%s' did not finish in time (hang?)",
                     atomic_load(&dt_wd_phase));
            th_fail(__FILE__, __LINE__, "watchdog", why);
        }
        th_sleep_ms(50);
    }
    return NULL;
}

static long long dt_phase_t0;

/* Enter a phase that must finish within `secs` seconds (times DT_SLOW,
 * times OVL_TEST_WATCHDOG_SCALE if set: leaves time to attach a debugger to
 * a hang). Rank 0 prints how long the previous phase took. */
static inline void dt_phase(const char *name, unsigned secs)
{
    const char *scale = getenv("OVL_TEST_WATCHDOG_SCALE");
    if (scale && atoi(scale) > 0)
        secs *= (unsigned)atoi(scale);
    long long now = dt_now_ms();
    if (th_rank == 0 && dt_phase_t0) {
        printf("  (phase '%s': %.2f s)\n", atomic_load(&dt_wd_phase), (now - dt_phase_t0) / 1e3);
        fflush(stdout);
    }
    dt_phase_t0 = now;
    atomic_store(&dt_wd_phase, name);
    atomic_store(&dt_wd_deadline_ms, dt_now_ms() + 1000LL * secs * DT_SLOW);
}

static inline void dt_watchdog_start(void)
{
    atomic_store(&dt_wd_stop, 0);
    CHECK(pthread_create(&dt_wd_thread, NULL, dt_wd_main, NULL) == 0);
}

static inline void dt_watchdog_stop(void)
{
    atomic_store(&dt_wd_stop, 1);
    CHECK(pthread_join(dt_wd_thread, NULL) == 0);
}

/* ---- monitors -------------------------------------------------------------- */

/* 1 if this process may use userfaultfd (ovl_monitor_probe says so). */
static inline int dt_uffd_available(void)
{
    ovl_monitor_t chosen = OVL_MONITOR_AUTO;
    char why[256] = "";
    int rc = ovl_monitor_probe(OVL_MONITOR_UFFD, &chosen, why, sizeof why);
    CHECKF(rc == OVL_SUCCESS || rc == OVL_ERR_UNSUPPORTED, "probe(uffd): %s", th_code_name(rc));
    if (rc == OVL_SUCCESS)
        CHECKF(chosen == OVL_MONITOR_UFFD, "probe(uffd) chose %s", ovl_monitor_name(chosen));
    return rc == OVL_SUCCESS;
}

/* The monitor of requests that name none (the configuration in force). */
static inline ovl_monitor_t dt_monitor(void)
{
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    return cfg.access.monitor;
}

/* MPI (MPI_THREAD_MULTIPLE), ovl (cfg may be NULL) and the watchdog. A
 * variant asking for OVL_MONITOR=uffd where userfaultfd cannot be used
 * exits 77 on every rank (ctest: skipped). */
static inline void dt_init(int *argc, char ***argv, const char *name, const ovl_config_t *cfg)
{
    int provided = th_init_mpi(argc, argv, name, MPI_THREAD_MULTIPLE);
    CHECKF(provided == MPI_THREAD_MULTIPLE, "MPI provides thread level %d only", provided);
    const char *env = getenv("OVL_MONITOR");
    if (env && strcmp(env, "uffd") == 0 && !dt_uffd_available()) {
        if (th_rank == 0)
            printf("%s: SKIPPED: OVL_MONITOR=uffd but userfaultfd is not available here\n", name);
        fflush(stdout);
        MPI_Finalize();
        exit(77);
    }
    CHECK_OK(ovl_init(MPI_COMM_WORLD, th_config(cfg)));
    if (th_rank == 0) {
        size_t dsz = 0;
        ovl_config_t c;
        CHECK_OK(ovl_config_get(&c));
        dsz = c.access.delta_size;
        printf("%s: monitor %s, OVL_DELTA_SIZE %zu\n", name, ovl_monitor_name(c.access.monitor),
               dsz);
        fflush(stdout);
    }
    dt_watchdog_start();
}

/* This rank's peer, r ^ 1; *@even (may be NULL): whether this rank is the
 * even one of the pair. Fails the test, naming @name, when the job has an
 * odd number of ranks (the last rank would have no peer). */
static inline int dt_pair(const char *name, int *even)
{
    int peer = th_rank ^ 1;
    if (even)
        *even = th_rank % 2 == 0;
    CHECKF(peer < th_size, "%s needs an even number of ranks", name);
    return peer;
}

/* A request handle no call returns: what a failed call must leave behind. */
#define DT_SENTINEL ((ovl_request_t)(uintptr_t)0x5e5e5e5eull)

/* The call fails with `code` and does not write the request `r` (an
 * ovl_request_t in scope, the call's output argument). */
#define EXPECT_REJECTED(call, code) \
    do {                            \
        r = DT_SENTINEL;            \
        EXPECT_ERR(call, code);     \
        CHECK(r == DT_SENTINEL);    \
    } while (0)

static inline int dt_finish(void)
{
    dt_phase("finish", 60);
    dt_watchdog_stop();
    return th_finish();
}

/* ---- regions: an unaligned buffer and sentinels on its pages -------------- */

typedef struct {
    unsigned char *base; /* page aligned */
    size_t maplen;       /* whole pages */
    unsigned char *buf;  /* base + off */
    size_t off, bytes;
    uint64_t skey; /* pattern of the sentinel bytes */
} dt_region_t;

static inline void dt_sentinel_fill(dt_region_t *r, uint64_t skey)
{
    r->skey = skey;
    th_fill(r->base, r->off, skey, 0);
    th_fill(r->buf + r->bytes, r->maplen - r->off - r->bytes, skey, r->off + r->bytes);
}

/* `bytes` at offset `off` (< page) into whole pages from `map` (called
 * with their length; returns NULL on failure); the rest of the first and
 * last pages holds sentinel pattern `skey`. */
static inline void dt_region_alloc_with(dt_region_t *r, size_t bytes, size_t off, uint64_t skey,
                                        void *(*map)(size_t))
{
    size_t pg = dt_page();
    r->off = off;
    r->bytes = bytes;
    r->maplen = (off + bytes + pg - 1) / pg * pg;
    if (r->maplen == 0)
        r->maplen = pg;
    void *p = map(r->maplen);
    CHECKF(p != NULL, "cannot map %zu bytes", r->maplen);
    CHECK((uintptr_t)p % pg == 0);
    r->base = p;
    r->buf = r->base + off;
    dt_sentinel_fill(r, skey);
}

static inline void *dt_map_anon(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* ... into fresh anonymous pages (free with dt_region_free). */
static inline void dt_region_alloc(dt_region_t *r, size_t bytes, size_t off, uint64_t skey)
{
    dt_region_alloc_with(r, bytes, off, skey, dt_map_anon);
}

/* Index (in the mapping) of the first sentinel byte that changed, or TH_OK. */
static inline size_t dt_sentinel_check(const dt_region_t *r)
{
    size_t bad = th_verify(r->base, r->off, r->skey, 0);
    if (bad != TH_OK)
        return bad;
    size_t tail = r->off + r->bytes;
    bad = th_verify(r->buf + r->bytes, r->maplen - tail, r->skey, tail);
    return bad == TH_OK ? TH_OK : tail + bad;
}

static inline void dt_region_free(dt_region_t *r)
{
    CHECK(munmap(r->base, r->maplen) == 0);
    r->base = r->buf = NULL;
}

/* A buffer in pages of its own (no other data on its pages: heap buffers
 * are tested on purpose in test_delta only), released with dt_free. */
static inline void *dt_alloc(size_t bytes)
{
    void *p =
        mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECKF(p != MAP_FAILED, "mmap %zu bytes", bytes);
    return p;
}

static inline void dt_free(void *p, size_t bytes)
{
    if (p)
        CHECK(munmap(p, bytes ? bytes : 1) == 0);
}

/* ---- shuffles and strips ------------------------------------------------- */

static inline void dt_shuffle(size_t *a, size_t n, th_rng_t *rng)
{
    for (size_t i = 0; i + 1 < n; i++) {
        size_t j = i + (size_t)th_below(rng, n - i);
        size_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* 0 .. n-1 in a random order (malloc'd). */
static inline size_t *dt_perm(size_t n, th_rng_t *rng)
{
    size_t *a = malloc((n ? n : 1) * sizeof *a);
    CHECK(a != NULL);
    for (size_t i = 0; i < n; i++)
        a[i] = i;
    dt_shuffle(a, n, rng);
    return a;
}

/* ---- producing a delta-send buffer ----------------------------------------- */

enum {
    DT_PROD_PLAIN,   /* write in order, no calls (fault monitors) */
    DT_PROD_INORDER, /* write in order, ovl_delta_produced after each strip */
    DT_PROD_RANDOM   /* strips in a shuffled order + ovl_delta_produced (explicit only) */
};

/* Write pattern `key` into buf[0, bytes) in strips of 1 .. 3 pages as a
 * computation would; `how` says in which order and whether to annotate. */
static inline void dt_produce(ovl_request_t req, unsigned char *buf, size_t bytes, uint64_t key,
                              int how, th_rng_t *rng)
{
    size_t pg = dt_page();
    if (how != DT_PROD_RANDOM) {
        for (size_t o = 0; o < bytes;) {
            size_t len = dt_min(bytes - o, 1 + (size_t)th_below(rng, 3 * pg));
            th_fill(buf + o, len, key, o);
            if (how == DT_PROD_INORDER)
                CHECK_OK(ovl_delta_produced(req, o, len));
            o += len;
        }
        return;
    }
    /* fixed strips (an odd size, so they straddle pages), shuffled */
    size_t strip = pg + 123;
    size_t n = (bytes + strip - 1) / strip;
    size_t *order = dt_perm(n, rng);
    for (size_t k = 0; k < n; k++) {
        size_t o = order[k] * strip, len = dt_min(strip, bytes - o);
        th_fill(buf + o, len, key, o);
        CHECK_OK(ovl_delta_produced(req, o, len));
    }
    free(order);
}

/* ---- using a pending delta-receive buffer -------------------------------- */

/* Visit the page-sized strides of buf[0, bytes) in a random order, as a
 * program using received data would, without ovl_wait: on every other
 * stride write first (complement its first byte) then read the rest, on
 * the others read everything then write. With `need` set (explicit mode)
 * call ovl_delta_need(req) for the stride first. Strides whose index is
 * not `part` mod `nparts` are only read beyond their first byte (for
 * several threads sharing one buffer: each writes its own strides). */
static inline void dt_use_part(ovl_request_t req, int need, unsigned char *buf, size_t bytes,
                               uint64_t key, th_rng_t *rng, size_t part, size_t nparts)
{
    size_t pg = dt_page(), n = (bytes + pg - 1) / pg;
    size_t *order = dt_perm(n, rng);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k], off = i * pg, len = dt_min(pg, bytes - off);
        int mine = i % nparts == part;
        if (need)
            CHECK_OK(ovl_delta_need(req, off, len));
        uint8_t want0 = th_pattern_byte(key, off);
        if (mine && k % 2) {
            buf[off] = dt_flip(want0); /* write before reading: waits for the data */
        } else if (mine) {
            CHECKF(buf[off] == want0, "byte %zu of %zu: %#x, expected %#x", off, bytes, buf[off],
                   want0);
        }
        size_t bad = th_verify(buf + off + 1, len - 1, key, off + 1);
        CHECKF(bad == TH_OK, "byte %zu of %zu differs: %#x, expected %#x (key %#llx)",
               off + 1 + bad, bytes, buf[off + 1 + bad], th_pattern_byte(key, off + 1 + bad),
               (unsigned long long)key);
        if (mine && !(k % 2))
            buf[off] = dt_flip(want0);
    }
    free(order);
}

static inline void dt_use(ovl_request_t req, int need, unsigned char *buf, size_t bytes,
                          uint64_t key, th_rng_t *rng)
{
    dt_use_part(req, need, buf, bytes, key, rng, 0, 1);
}

/* After dt_use: every stride's first byte complemented, the rest the
 * pattern. Returns the first wrong byte or TH_OK. */
static inline size_t dt_check_used(const unsigned char *buf, size_t bytes, uint64_t key)
{
    size_t pg = dt_page();
    for (size_t off = 0; off < bytes; off += pg) {
        size_t len = dt_min(pg, bytes - off);
        if (buf[off] != dt_flip(th_pattern_byte(key, off)))
            return off;
        size_t bad = th_verify(buf + off + 1, len - 1, key, off + 1);
        if (bad != TH_OK)
            return off + 1 + bad;
    }
    return TH_OK;
}

/* Counters, for before/after differences. */
static inline ovl_stats_t dt_stats(void)
{
    ovl_stats_t s;
    CHECK_OK(ovl_stats_get(&s, sizeof s));
    return s;
}

#endif /* OVL_TEST_DELTA_COMMON_H */
