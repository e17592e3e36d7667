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
 * until ovl_finalize; a marshal stream) and after ovl_finalize, a malloc of 192 KiB, of
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

#include <malloc.h>
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

/* Between rank pairs (the last rank of an odd count sits out): a delta
 * message of @bytes each way (receive slots of the largest piece, 256 KiB,
 * and page bookkeeping of the whole buffer), then a plain message of
 * @bytes into a delta receive under mprotect (a staging buffer of the
 * whole message, kept in ovl's cache until ovl_finalize), and a marshal
 * stream of 4 MiB each way in 64 KiB fragments (its fragment window). */
static void transfers(size_t bytes)
{
    int peer = th_rank ^ 1;
    if (peer >= th_size)
        return;
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
    transfers(8 * MIB);
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
