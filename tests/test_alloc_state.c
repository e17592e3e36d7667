/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_alloc_state: ovl leaves glibc's allocator as it found it.
 *
 * glibc serves a malloc of 128 KiB or more from a mapping of its own, until
 * a free() of such a block raises its dynamic mmap threshold to that
 * block's size: from then on blocks up to that size come from the heap,
 * next to each other and not page-aligned. A library that mallocs and frees
 * one large buffer inside the program changes where the program's large
 * blocks go. ovl's large internal buffers (the quick estimate's copy-rate
 * source and ping-pong buffer, its pages of its own) come from mmap.
 *
 * On each rank, before ovl_init, after ovl_init (no perfdb: the quick
 * estimate runs, white-box check), after transfers (a delta message, with
 * receive slots of the largest piece, 256 KiB; a plain message into a
 * delta receive under mprotect, through a staging buffer that ovl keeps
 * until ovl_finalize; a marshal stream; an active message of 1 MiB; a
 * plan's strided read and write of 1 MiB in one strip, packed at the
 * source and by bounding box) and after ovl_finalize, a malloc of 192 KiB, of
 * 1 MiB and of 4 MiB each get a mapping of their own: mallinfo2().hblks,
 * glibc's count of mmapped blocks, grows by one. The probe blocks stay
 * live until the end, since freeing one would itself raise the threshold.
 *
 * Under ASan or TSan malloc is the sanitizer's and has no such threshold:
 * the test says SKIPPED and exits 77. So it does on a C library other than
 * glibc 2.33 or later (mallinfo2), and where the program's large blocks
 * already come from the heap before ovl_init (MPI_Init raised the
 * threshold): there is nothing to tell ovl's effect from.
 */
#include "harness.h"
#include "ovl_internal.h"

#include <inttypes.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TA_SKIP "malloc is the sanitizer's"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define TA_SKIP "malloc is the sanitizer's"
#endif
#endif
#if !defined(TA_SKIP) && defined(__GLIBC__)
#if !__GLIBC_PREREQ(2, 33)
#define TA_SKIP "glibc before 2.33 (no mallinfo2)"
#endif
#elif !defined(TA_SKIP)
#define TA_SKIP "not glibc (no mallinfo2)"
#endif

#ifndef TA_SKIP

#define MIB ((size_t)1 << 20)

static void *held[32];
static int nheld;

static const size_t probe_bytes[] = { 192 << 10, 1 * MIB, 4 * MIB };
#define NPROBES (sizeof probe_bytes / sizeof probe_bytes[0])

/* Does a malloc of @bytes get a mapping of its own? The block is kept
 * until the end; the count of mmapped blocks before and after in @hb. */
static int own_mapping(size_t bytes, size_t hb[2])
{
    hb[0] = mallinfo2().hblks;
    void *p = malloc(bytes);
    hb[1] = mallinfo2().hblks;
    CHECK(p != NULL);
    CHECK(nheld < (int)(sizeof held / sizeof held[0]));
    held[nheld++] = p;
    return hb[1] == hb[0] + 1;
}

static void expect_state(const char *when)
{
    for (size_t i = 0; i < NPROBES; i++) {
        size_t hb[2];
        CHECKF(own_mapping(probe_bytes[i], hb),
               "%s: malloc(%zu KiB) came from the heap (mmapped blocks %zu -> %zu): glibc's "
               "mmap threshold was raised",
               when, probe_bytes[i] >> 10, hb[0], hb[1]);
    }
}

static void free_probes(void)
{
    for (int i = 0; i < nheld; i++)
        free(held[i]);
    nheld = 0;
}

static char *map(size_t bytes)
{
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    return p;
}

struct chunk {
    char *p;
    size_t n;
};

static int marshal(ovl_stream_t st, void *arg)
{
    const struct chunk *c = arg;
    for (size_t at = 0; at < c->n; at += 100000) {
        int rc = ovl_stream_write(st, c->p + at, c->n - at < 100000 ? c->n - at : 100000);
        if (rc)
            return rc;
    }
    return OVL_SUCCESS;
}

static int unmarshal(ovl_stream_t st, void *arg)
{
    const struct chunk *c = arg;
    return ovl_stream_read(st, c->p, c->n);
}

#define AM_ID 7
static atomic_size_t am_got;

static void am_handler(ovl_am_token_t tok, const void *buf, size_t bytes, void *arg)
{
    (void)tok;
    (void)arg;
    int peer = th_rank ^ 1;
    atomic_store(&am_got, th_verify(buf, bytes, 0xa110c + (uint64_t)peer, 0) == TH_OK ? bytes : 1);
}

/* @n elements of 16 bytes, every other one of the peer's segment, read
 * (then written back) as one strip with protocol @proto: the target packs
 * the read's points into one buffer and unpacks the write's (PACK, 1 MiB);
 * BBOX stages the strip's bounding box (2 MiB); RUNS tables its runs,
 * pieces and ops (8192: 192 KiB of pieces, more of ops). Not DATATYPE,
 * and not more runs: MPICH's own frees then raise the threshold (its
 * packing of derived datatypes for MPI_Rget; with 16384 requests at once
 * on 4 ranks, sometimes its own bookkeeping), as they would for the
 * program's own calls. */
#define PL_N ((int64_t)1 << 16)
static void plan_transfers(ovl_segment_t seg, char *base, int peer, ovl_plan_protocol_t proto,
                           int64_t n_el)
{
    char *local = map((size_t)n_el * 16);
    int64_t *seg64 = (int64_t *)(void *)base;
    for (int64_t i = 0; i < 4 * n_el; i++)
        seg64[i] = (int64_t)th_rank << 40 | i;
    CHECK_OK(ovl_barrier()); /* ovl's: a PACK target packs only in ovl calls */
    ovl_param_t pm = { .field_mask = OVL_PARAM_FIELD_PROTOCOL | OVL_PARAM_FIELD_STRIP,
                       .protocol = proto,
                       .strip = n_el };
    ovl_plan_t p = OVL_PLAN_NULL;
    CHECK_OK(ovl_plan_create(NULL, &p, NULL));
    CHECK_OK(OVL_PLAN_READ_1D(p, seg, peer, 0, 16, n_el, 32, local));
    CHECK_OK(ovl_plan_commit(p, &pm));
    CHECK_OK(ovl_plan_begin(p));
    int64_t i0, n;
    do
        CHECK_OK(ovl_plan_next(p, &i0, &n));
    while (n > 0);
    CHECK_OK(ovl_plan_end(p));
    CHECK_OK(ovl_plan_free(&p));
    const int64_t *got = (const int64_t *)(const void *)local;
    for (int64_t i = 0; i < 2 * n_el; i++)
        CHECKF(got[i] == ((int64_t)peer << 40 | (i / 2 * 4 + i % 2)), "plan read, word %" PRId64,
               i);
    CHECK_OK(ovl_barrier());
    if (proto != OVL_PLAN_BBOX) { /* reads only */
        CHECK_OK(ovl_plan_create(NULL, &p, NULL));
        CHECK_OK(OVL_PLAN_WRITE_1D(p, seg, peer, 16, 16, n_el, 32, local));
        CHECK_OK(ovl_plan_commit(p, &pm));
        CHECK_OK(ovl_plan_begin(p));
        do
            CHECK_OK(ovl_plan_next(p, &i0, &n));
        while (n > 0);
        CHECK_OK(ovl_plan_end(p));
        CHECK_OK(ovl_plan_free(&p));
        CHECK_OK(ovl_barrier());
        /* the odd elements now hold this rank's own even ones, back */
        for (int64_t i = 0; i < 4 * n_el; i++)
            CHECKF(seg64[i] == ((int64_t)th_rank << 40 | (i % 4 < 2 ? i : i - 2)),
                   "plan write, word %" PRId64, i);
    }
    munmap(local, (size_t)n_el * 16);
}

/* Between rank pairs (the last rank of an odd count sits out): a delta
 * message of @bytes each way (receive slots of the largest piece, 256 KiB,
 * and page bookkeeping of the whole buffer), then a plain message of
 * @bytes into a delta receive under mprotect (a staging buffer of the
 * whole message, kept in ovl's cache until ovl_finalize), and a marshal
 * stream of 4 MiB each way in 64 KiB fragments (its fragment window). */
static void transfers(size_t bytes)
{
    int peer = th_rank ^ 1;
    if (peer >= th_size) { /* sits out; the barrier below is collective */
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        return;
    }
    char *out = map(bytes), *in = map(bytes);
    th_fill(out, bytes, 0xa110c + (uint64_t)th_rank, 0);
    ovl_request_t r, s;
    CHECK_OK(
        ovl_delta_recv(in, (int)bytes, MPI_BYTE, peer, 5, TH_MONITOR(OVL_MONITOR_EXPLICIT), &r));
    CHECK_OK(ovl_delta_send_begin(out, (int)bytes, MPI_BYTE, peer, 5,
                                  TH_MONITOR(OVL_MONITOR_EXPLICIT), &s));
    CHECK_OK(ovl_delta_produced(s, 0, bytes));
    CHECK_OK(ovl_delta_send_end(s, NULL));
    CHECK_OK(ovl_wait(&r, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
    CHECK(th_verify(in, bytes, 0xa110c + (uint64_t)peer, 0) == TH_OK);

    memset(in, 0, bytes);
    CHECK_OK(
        ovl_delta_recv(in, (int)bytes, MPI_BYTE, peer, 6, TH_MONITOR(OVL_MONITOR_MPROTECT), &r));
    CHECK_OK(ovl_isend(out, (int)bytes, MPI_BYTE, peer, 6, &s));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&r, OVL_STATUS_IGNORE));
    CHECK(th_verify(in, bytes, 0xa110c + (uint64_t)peer, 0) == TH_OK);

    /* a marshal stream each way (its window of fragment buffers: window x
     * fragment size, 512 KiB at 64 KiB fragments) */
    size_t sb = 4 * MIB;
    CHECK_OK(ovl_irecv_stream(peer, 7, unmarshal, &(struct chunk){ in, sb }, &r));
    CHECK_OK(ovl_isend_stream(peer, 7, marshal, &(struct chunk){ out, sb }, &s));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&r, OVL_STATUS_IGNORE));
    CHECK(th_verify(in, sb, 0xa110c + (uint64_t)peer, 0) == TH_OK);

    /* an active message of 1 MiB each way: the target receives it into a
     * buffer of its own, handed to the handler */
    atomic_store(&am_got, 0);
    CHECK_OK(ovl_am_register(AM_ID, am_handler, NULL));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    CHECK_OK(ovl_am_request(peer, AM_ID, out, MIB, &s));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
    while (atomic_load(&am_got) == 0) /* the peer's message: its handler runs in ovl's progress */
        CHECK_OK(ovl_progress());
    CHECK(atomic_load(&am_got) == MIB);
    munmap(out, bytes);
    munmap(in, bytes);
}

int main(int argc, char **argv)
{
    th_init_mpi(&argc, &argv, "test_alloc_state", MPI_THREAD_MULTIPLE);
    /* no perfdb: ovl_init measures the quick estimate */
    setenv("OVL_PERFDB", "off", 1);
    setenv("OVL_CALIBRATE", "1", 1);
    setenv("OVL_FRAGMENT_SIZE", "65536", 1);

    /* the starting point, on every rank: large blocks get mappings */
    int ok = 1, all = 0;
    for (size_t i = 0; i < NPROBES; i++) {
        size_t hb[2];
        ok &= own_mapping(probe_bytes[i], hb);
    }
    CHECK_MPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (!all) {
        if (th_rank == 0)
            printf("test_alloc_state: SKIPPED: large blocks already come from the heap before "
                   "ovl_init (MPI_Init raised glibc's mmap threshold)\n");
        fflush(stdout);
        free_probes();
        MPI_Finalize();
        return 77;
    }
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECKF(ovl__m.source == OVL__MODEL_INIT, "the quick estimate did not run: %s",
           ovl__m.source_detail);
    expect_state("after ovl_init");
    void *base = NULL;
    ovl_segment_t seg = OVL_SEGMENT_NULL;
    CHECK_OK(ovl_segment_create((size_t)PL_N * 32, &base, &seg));
    transfers(8 * MIB);
    if (th_size % 2 == 0) {
#ifndef OMPI_MAJOR_VERSION /* Open MPI 4.1's own frees for 8192 requests at once raise it */
        plan_transfers(seg, base, th_rank ^ 1, OVL_PLAN_RUNS, PL_N / 8);
#endif
        plan_transfers(seg, base, th_rank ^ 1, OVL_PLAN_BBOX, PL_N);
        plan_transfers(seg, base, th_rank ^ 1, OVL_PLAN_PACK, PL_N);
    }
    CHECK_OK(ovl_segment_free(&seg));
    expect_state("after transfers");
    CHECK_OK(ovl_finalize());
    expect_state("after ovl_finalize");

    free_probes();
    return th_finish();
}

#else

int main(int argc, char **argv)
{
    th_init_mpi(&argc, &argv, "test_alloc_state", MPI_THREAD_MULTIPLE);
    if (th_rank == 0)
        printf("test_alloc_state: SKIPPED: %s\n", TA_SKIP);
    fflush(stdout);
    MPI_Finalize();
    return 77;
}

#endif
