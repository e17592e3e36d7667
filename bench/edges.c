/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench edges: what the program pays to use other data that shares a
 * page with a pending fault-monitored receive. Rank 0 receives into a
 * buffer 64 bytes into a page-aligned block (as buffers carved from one
 * block lie), so the block's data after the buffer shares its last page;
 * while the receive is pending it runs one kind of access on that data
 * --calls times, then lets rank 1 send. The same calls on the same bytes
 * with no receive pending are the reference: what a buffer with pages of
 * its own (ovl_alloc, page-aligned) costs.
 *
 * Kinds (each call touches the shared page; a vector kind runs where the
 * CPU has the instructions):
 *   store      an 8-byte store (mov)
 *   load       an 8-byte load (mov)
 *   add        an add to memory (addl $1, mem)
 *   memcpy-to  a 256-byte memcpy into the data (the C library's own)
 *   memcpy-from a 256-byte memcpy out of it
 *   sse-load   8 16-byte loads (movdqu)
 *   avx2-load  8 32-byte loads (vmovdqu)
 *   memset     a 2 KiB memset (the C library's: vector stores at this size)
 *   xchg       an atomic exchange (xchg: locked, single-stepped)
 *
 * For each: the median time per call pending and not, their ratio, and
 * the faults per call (OVL_STATS' neighbour accesses) with the part ovl's
 * handler made itself (the rest single-stepped). Kinds rotate every rep;
 * the received bytes and the data the calls wrote are checked every rep.
 *
 * Then the floor under any of these (x86-64): a store to a page nobody
 * guards but that is inaccessible, which ovl's handler passes on to a
 * handler installed before ovl_init that only moves past the store. What
 * is left is the kernel's delivery of a fault, which no handler avoids.
 */
#include "common.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static const char *const CMD = "edges";

#if defined(__x86_64__) && defined(__linux__)
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>

static void *floor_page;
static struct sigaction floor_prev;

static void floor_handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    if (si->si_addr == floor_page) {
        ((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP] += 3; /* movb $1, (%rdi) */
        return;
    }
    sigaction(SIGSEGV, &floor_prev, NULL); /* not ours: the access faults again, as before */
}

/* Install the floor's handler (before ovl_init, so ovl's passes it on). */
static void floor_install(void)
{
    floor_page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (floor_page == MAP_FAILED)
        bench_fail("edges: mmap: out of memory");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = floor_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &floor_prev) != 0)
        bench_fail("edges: sigaction failed");
}

/* Seconds per fault over @n stores to the floor page. */
static double floor_time(int n)
{
    double t0 = bench_now();
    for (int i = 0; i < n; i++)
        __asm__ volatile("movb $1, (%0)" : : "D"(floor_page) : "memory");
    return (bench_now() - t0) / n;
}
#endif

enum { K_STORE, K_LOAD, K_ADD, K_MEMCPY_TO, K_MEMCPY_FROM, K_SSE, K_AVX2, K_MEMSET, K_XCHG, NK };
static const char *const kname[NK] = { "store",     "load",        "add",
                                       "memcpy-to", "memcpy-from", "sse-load",
                                       "avx2-load", "memset",      "xchg" };

/* the C library's memcpy and memset, never inlined */
static void *(*volatile lib_memcpy)(void *, const void *, size_t) = memcpy;
static void *(*volatile lib_memset)(void *, int, size_t) = memset;

static unsigned char scratch[256] __attribute__((aligned(64)));
static volatile uint64_t sink;

#if defined(__x86_64__)
static void sse_loads(const unsigned char *p)
{
    for (int i = 0; i < 8; i++)
        _mm_store_si128((__m128i *)(void *)scratch + i,
                        _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i)));
}

__attribute__((target("avx2"))) static void avx2_loads(const unsigned char *p)
{
    for (int i = 0; i < 8; i++)
        _mm256_store_si256((__m256i *)(void *)scratch + i,
                           _mm256_loadu_si256((const __m256i *)(const void *)(p + 32 * i)));
}
#endif

static int kind_runs(int k)
{
#if defined(__x86_64__)
    if (k == K_AVX2)
        return __builtin_cpu_supports("avx2");
    return 1;
#else
    return k != K_SSE && k != K_AVX2;
#endif
}

/* One call of kind @k on @p (256 bytes of the shared page's data, 2 KiB
 * for memset); @i varies what is written. */
static void call(int k, unsigned char *p, size_t i)
{
    switch (k) {
    case K_STORE:
        *(volatile uint64_t *)(void *)p = i;
        break;
    case K_LOAD:
        sink += *(volatile uint64_t *)(void *)p;
        break;
    case K_ADD:
#if defined(__x86_64__)
        __asm__ volatile("addl $1, %0" : "+m"(*(uint32_t *)(void *)(p + 8)));
#else
        (*(volatile uint32_t *)(void *)(p + 8))++;
#endif
        break;
    case K_MEMCPY_TO:
        memset(scratch, (int)(i & 0xff), sizeof scratch);
        lib_memcpy(p, scratch, 256);
        break;
    case K_MEMCPY_FROM:
        lib_memcpy(scratch, p, 256);
        sink += scratch[i & 255];
        break;
#if defined(__x86_64__)
    case K_SSE:
        sse_loads(p);
        break;
    case K_AVX2:
        avx2_loads(p);
        break;
#endif
    case K_MEMSET:
        lib_memset(p, (int)(i & 0xff), 2048);
        break;
    case K_XCHG:
        sink += __atomic_exchange_n((uint64_t *)(void *)(p + 16), i, __ATOMIC_SEQ_CST);
        break;
    default:
        break;
    }
}

static unsigned char pattern(size_t i, int rep)
{
    return (unsigned char)(i * 37 + (size_t)rep * 11 + 1);
}

int bench_edges(int argc, char **argv)
{
    size_t bytes = (size_t)64 << 10;
    int reps = 5, warmup = 1, calls = 400;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes"))
            bytes = bench_parse_size(CMD, "--bytes", bench_optarg(CMD, argc, argv, &i));
        else if (!strcmp(argv[i], "--calls"))
            calls = (int)bench_parse_long(CMD, "--calls", bench_optarg(CMD, argc, argv, &i), 1,
                                          1000000);
        else if (!strcmp(argv[i], "--reps"))
            reps = (int)bench_parse_long(CMD, "--reps", bench_optarg(CMD, argc, argv, &i), 1, 1000);
        else if (!strcmp(argv[i], "--warmup"))
            warmup =
                (int)bench_parse_long(CMD, "--warmup", bench_optarg(CMD, argc, argv, &i), 0, 100);
        else if (!strcmp(argv[i], "--csv"))
            csv = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(argv[i], "--help"))
            bench_help_exit(
                "ovl-bench edges [--bytes SIZE] [--calls N] [--reps N] [--warmup N] [--csv FILE]\n"
                "(2 ranks) The cost of using data that shares a page with a pending\n"
                "fault-monitored receive of --bytes (default 64k, placed 64 bytes into a\n"
                "page): per kind of access (store, load, add, memcpy-to, memcpy-from,\n"
                "sse-load, avx2-load, memset, xchg), the median time of --calls (default\n"
                "400) calls on that data with the receive pending and with none, their\n"
                "ratio, faults per call and how many of them ovl's handler made.\n"
                "Reps: --reps (default 5) after --warmup (default 1), kinds rotated.\n"
                "Last row (x86-64), bare-fault: --calls stores to an inaccessible page ovl\n"
                "does not guard, each moved past by a handler of the benchmark's: the\n"
                "kernel's delivery of a fault, the floor under every row.\n");
        else
            bench_usage_error(CMD, "unknown option %s", argv[i]);
    }
    if (bytes < 64 || bytes > (size_t)1 << 30)
        bench_usage_error(CMD, "--bytes: %zu is not in [64, 1g]", bytes);
    bench_require_two_ranks(CMD);
#if defined(__x86_64__) && defined(__linux__)
    floor_install();
#endif
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);

    /* the block: a page, the buffer from offset 64, then 4 pages of data;
     * the data the calls use starts where the buffer ends, on its page */
    size_t ps = 4096, blen = ps + bytes + 4 * ps;
    blen = (blen + ps - 1) / ps * ps;
    unsigned char *blk = aligned_alloc(ps, blen);
    if (!blk)
        bench_fail("out of memory");
    memset(blk, 0, blen);
    unsigned char *buf = blk + 64, *data = buf + bytes;
    unsigned char *src = malloc(bytes);
    if (!src)
        bench_fail("out of memory");

    int nk = 0, kinds[NK];
    for (int k = 0; k < NK; k++)
        if (kind_runs(k))
            kinds[nk++] = k;
    double *pend = calloc((size_t)NK * (size_t)reps, sizeof(double));
    double *free_ = calloc((size_t)NK * (size_t)reps, sizeof(double));
    double *faults = calloc((size_t)NK * (size_t)reps, sizeof(double));
    double *made = calloc((size_t)NK * (size_t)reps, sizeof(double));
    double *bare = calloc((size_t)reps, sizeof(double));
    if (!pend || !free_ || !faults || !made || !bare)
        bench_fail("out of memory");

    for (int r = -warmup; r < reps; r++) {
        int rr = r + warmup;
        for (int j = 0; j < nk; j++) {
            int k = kinds[(j + rr) % nk];
            int tag = 700 + k;
            if (bench_rank == 1) {
                for (size_t i = 0; i < bytes; i++)
                    src[i] = pattern(i, rr);
                char tok;
                BENCH_MPI(MPI_Recv(&tok, 1, MPI_CHAR, 0, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                ovl_request_t s;
                BENCH_OVL(ovl_isend(src, (int)bytes, MPI_BYTE, 0, tag, &s));
                BENCH_OVL(ovl_wait(&s, NULL));
                continue;
            }
            uint32_t added;
            memcpy(&added, data + 8, sizeof added);
            ovl_request_t q;
            BENCH_OVL(ovl_delta_recv(buf, (int)bytes, MPI_BYTE, 1, tag, NULL, &q));
            ovl_stats_t a, b;
            BENCH_OVL(ovl_stats_get(&a, sizeof a));
            double t0 = bench_now();
            for (int i = 0; i < calls; i++)
                call(k, data, (size_t)i);
            double t1 = bench_now();
            BENCH_OVL(ovl_stats_get(&b, sizeof b));
            char tok = 1;
            BENCH_MPI(MPI_Send(&tok, 1, MPI_CHAR, 1, tag, MPI_COMM_WORLD));
            BENCH_OVL(ovl_wait(&q, NULL));
            /* what the last call left, then the same calls with nothing pending */
            unsigned char want[2048];
            memcpy(want, data, sizeof want);
            double t2 = bench_now();
            for (int i = 0; i < calls; i++)
                call(k, data, (size_t)i);
            double t3 = bench_now();
            if (memcmp(want, data, sizeof want) != 0 && k != K_ADD && k != K_XCHG)
                bench_fail("edges: %s: the data differs between the pending and the free runs",
                           kname[k]);
            for (size_t i = 0; i < bytes; i++)
                if (buf[i] != pattern(i, rr))
                    bench_fail("edges: %s: byte %zu of the receive is %#x, expected %#x", kname[k],
                               i, buf[i], pattern(i, rr));
            if (r >= 0) {
                pend[k * reps + r] = (t1 - t0) / calls;
                free_[k * reps + r] = (t3 - t2) / calls;
                faults[k * reps + r] = (double)(b.edge_steps - a.edge_steps) / calls;
                made[k * reps + r] = (double)(b.edge_emulated - a.edge_emulated) / calls;
            }
        }
#if defined(__x86_64__) && defined(__linux__)
        if (bench_rank == 0) {
            double t = floor_time(calls);
            if (r >= 0)
                bare[r] = t;
        }
#endif
    }

    FILE *f = bench_csv_open(CMD, csv);
    if (f)
        fprintf(f, "bench,kind,bytes,calls,reps,pending_us,free_us,ratio,faults_per_call,"
                   "made_by_ovl_per_call,us_per_fault\n");
    if (bench_rank == 0) {
        char sz[32];
        printf("ovl-bench edges: data sharing the last page of a pending %s receive, "
               "%d calls, median of %d reps\n",
               bench_fmt_size(bytes, sz, sizeof sz), calls, reps);
        printf("%-12s %12s %12s %9s %8s %8s %9s\n", "kind", "pending us", "free us", "ratio",
               "faults", "by ovl", "us/fault");
        for (int j = 0; j < nk; j++) {
            int k = kinds[j];
            struct bench_stat p = bench_stat_of(&pend[k * reps], reps),
                              fr = bench_stat_of(&free_[k * reps], reps),
                              fa = bench_stat_of(&faults[k * reps], reps),
                              m = bench_stat_of(&made[k * reps], reps);
            double per = fa.med > 0 ? (p.med - fr.med) / fa.med : 0;
            printf("%-12s %12.3f %12.3f %9.1f %8.2f %8.2f %9.2f\n", kname[k], p.med * 1e6,
                   fr.med * 1e6, fr.med > 0 ? p.med / fr.med : 0, fa.med, m.med, per * 1e6);
            if (f)
                fprintf(f, "edges,%s,%zu,%d,%d,%.4f,%.4f,%.2f,%.3f,%.3f,%.3f\n", kname[k], bytes,
                        calls, reps, p.med * 1e6, fr.med * 1e6, fr.med > 0 ? p.med / fr.med : 0,
                        fa.med, m.med, per * 1e6);
        }
#if defined(__x86_64__) && defined(__linux__)
        struct bench_stat bs = bench_stat_of(bare, reps);
        printf("%-12s %12.3f %12s %9s %8.2f %8.2f %9.2f\n", "bare-fault", bs.med * 1e6, "-", "-",
               1.0, 0.0, bs.med * 1e6);
        if (f)
            fprintf(f, "edges,bare-fault,0,%d,%d,%.4f,0,0,1,0,%.3f\n", calls, reps, bs.med * 1e6,
                    bs.med * 1e6);
#endif
        printf("(pending: the receive posted, its sender not yet started; free: the same calls\n"
               " once it completed. faults: neighbour accesses per call, by ovl: of those, made\n"
               " by ovl's handler, the rest single-stepped. bare-fault: a store to an\n"
               " inaccessible page ovl does not guard, passed on by ovl's handler to one that\n"
               " only moves past it: the kernel's delivery of a fault, the floor of every row)\n");
    }
    bench_csv_close(f, csv);
    free(pend);
    free(free_);
    free(faults);
    free(made);
    free(bare);
    free(src);
    free(blk);
    bench_ovl_finalize();
    return 0;
}
