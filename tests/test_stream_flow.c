/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_stream_flow: a slow receiver bounds the sender's memory.
 * Pairs (even rank sends, odd rank receives): the sender streams up to
 * 64 MB (fewer bytes for small fragments); the receiver posts its
 * ovl_irecv_stream only when told to, reads in random chunks, sleeps now
 * and then, and stops once in the middle.
 *  - before the receiver has posted anything, the marshal function never
 *    gets more than (window + 1) * fragment_size bytes ahead (it is
 *    suspended, not buffering);
 *  - while the receiver is stopped at byte R, the sender never gets past
 *    R + (2 * window + 1) * fragment_size (window buffers on each side);
 *  - every byte arrives intact; status.bytes is the length on both sides;
 *  - ovl_stats_get: fragments sent and received add up over all ranks, and
 *    the sender sent length / payload (+1 for the last) fragments.
 * The limits are checked against what the sender did, never against time:
 * the waits only give a broken implementation time to overrun.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define HDR_BYTES  16u
#define KEY        0xf10f10ull
#define TAG        1
#define TAG_GO     100
#define TAG_PAUSED 101
#define TAG_RESUME 102

static size_t total, fragment, payload;
static unsigned window;
static int peer, thread_mode;

struct sender {
    atomic_size_t tell; /* bytes written so far (read by the main thread) */
    uint8_t *chunk;
};

static int flow_marshal(ovl_stream_t s, void *arg)
{
    struct sender *snd = arg;
    enum { CH = 4000 }; /* not a divisor of any fragment payload */
    for (size_t off = 0; off < total;) {
        size_t k = total - off < CH ? total - off : CH;
        th_fill(snd->chunk, k, KEY, off);
        CHECK_OK(ovl_stream_write(s, snd->chunk, k));
        off += k;
        atomic_store(&snd->tell, ovl_stream_tell(s));
    }
    return OVL_SUCCESS;
}

struct receiver {
    uint8_t *buf;
    th_rng_t rng;
    size_t paused_at;
    size_t got;
};

static int flow_unmarshal(ovl_stream_t s, void *arg)
{
    struct receiver *rcv = arg;
    enum { MAXCHUNK = 65536 };
    size_t pos = 0, next_nap = total / 16;
    int paused = 0;
    while (pos < total) {
        size_t k = 1 + (size_t)th_below(&rcv->rng, MAXCHUNK);
        if (k > total - pos)
            k = total - pos;
        CHECK_OK(ovl_stream_read(s, rcv->buf, k));
        size_t bad = th_verify(rcv->buf, k, KEY, pos);
        CHECKF(bad == TH_OK, "byte %zu of the stream differs", pos + bad);
        pos += k;
        CHECK(ovl_stream_tell(s) == pos);
        if (pos >= next_nap) { /* a slow reader */
            th_sleep_ms(1);
            next_nap += total / 16;
        }
        if (!paused && pos >= total / 2) {
            /* Stop reading: tell the sender where, wait until it has
             * looked how far ahead it got. Blocking here stalls this
             * rank's progress entirely, which is the point. */
            paused = 1;
            rcv->paused_at = pos;
            unsigned long long at = pos;
            CHECK_MPI(MPI_Send(&at, 1, MPI_UNSIGNED_LONG_LONG, peer, TAG_PAUSED, MPI_COMM_WORLD));
            CHECK_MPI(
                MPI_Recv(NULL, 0, MPI_BYTE, peer, TAG_RESUME, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        }
    }
    uint8_t extra;
    EXPECT_ERR(ovl_stream_read(s, &extra, 1), OVL_ERR_EOF);
    rcv->got = pos;
    return OVL_SUCCESS;
}

/* Give the sender time (and, inline, progress) to overrun if it would. */
static void let_sender_run(unsigned ms)
{
    double t0 = th_now();
    while (th_now() - t0 < ms * 1e-3) {
        if (thread_mode)
            th_sleep_ms(1);
        else
            th_progress();
    }
}

static void run_sender(void)
{
    struct sender snd = { .chunk = malloc(4000) };
    CHECK(snd.chunk != NULL);
    atomic_init(&snd.tell, 0);
    ovl_request_t req;
    CHECK_OK(ovl_isend_stream(peer, TAG, flow_marshal, &snd, &req));

    /* 1. the receiver has not posted its receive yet */
    let_sender_run(100);
    int flag = 1;
    CHECK_OK(ovl_test(&req, &flag, OVL_STATUS_IGNORE));
    CHECK(flag == 0);
    size_t ahead = atomic_load(&snd.tell);
    size_t limit = (window + 1) * fragment;
    CHECKF(ahead <= limit, "sender wrote %zu bytes with no receiver (limit %zu)", ahead, limit);
    CHECKF(ahead > 0 || total == 0, "marshal function did not start");
    printf("test_stream_flow: rank %d: %zu bytes written before the receiver started "
           "(window %u x fragment %zu; limit %zu)\n",
           th_rank, ahead, window, fragment, limit);
    CHECK_MPI(MPI_Send(NULL, 0, MPI_BYTE, peer, TAG_GO, MPI_COMM_WORLD));

    /* 2. the receiver stops in the middle */
    int arrived = 0;
    double t0 = th_now();
    while (!arrived) {
        CHECK_MPI(MPI_Iprobe(peer, TAG_PAUSED, MPI_COMM_WORLD, &arrived, MPI_STATUS_IGNORE));
        if (!thread_mode)
            th_progress();
        CHECKF(th_now() - t0 < 30, "receiver never paused (hang?)");
    }
    unsigned long long at = 0;
    CHECK_MPI(MPI_Recv(&at, 1, MPI_UNSIGNED_LONG_LONG, peer, TAG_PAUSED, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE));
    let_sender_run(100);
    size_t t = atomic_load(&snd.tell);
    size_t mid_limit = (size_t)at + (2 * window + 1) * fragment;
    CHECKF(t <= mid_limit || t == total, "receiver stopped at %llu, sender wrote %zu (limit %zu)",
           at, t, mid_limit);
    CHECK(t >= at);
    printf("test_stream_flow: rank %d: receiver paused at %llu, sender at %zu (%zu ahead)\n",
           th_rank, at, t, t - (size_t)at);
    CHECK_MPI(MPI_Send(NULL, 0, MPI_BYTE, peer, TAG_RESUME, MPI_COMM_WORLD));

    ovl_status_t st;
    CHECK_OK(ovl_wait(&req, &st));
    CHECK(st.bytes == total && st.error == OVL_SUCCESS && st.tag == TAG);
    CHECK(atomic_load(&snd.tell) == total);
    free(snd.chunk);
}

static void run_receiver(void)
{
    struct receiver rcv = { .buf = malloc(65536) };
    CHECK(rcv.buf != NULL);
    th_rng_init(&rcv.rng, 0xf1, (uint64_t)th_rank, 0);
    /* Wait for the sender's go (driving nothing: ovl has no work here). */
    CHECK_MPI(MPI_Recv(NULL, 0, MPI_BYTE, peer, TAG_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    ovl_request_t req;
    ovl_status_t st;
    CHECK_OK(ovl_irecv_stream(peer, TAG, flow_unmarshal, &rcv, &req));
    CHECK_OK(ovl_wait(&req, &st));
    CHECK(rcv.got == total);
    CHECK(rcv.paused_at >= total / 2 && rcv.paused_at <= total);
    CHECK(st.bytes == total && st.error == OVL_SUCCESS && st.source == peer && st.tag == TAG);
    free(rcv.buf);
}

int main(int argc, char **argv)
{
    th_init(&argc, &argv, "test_stream_flow", NULL);
    CHECKF(th_size % 2 == 0, "needs an even number of ranks, got %d", th_size);
    peer = th_rank ^ 1;
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    thread_mode = cfg.progress.mode == OVL_PROGRESS_THREAD;
    fragment = cfg.stream.fragment_size;
    payload = fragment - HDR_BYTES;
    window = cfg.stream.window;
    total = payload * 2000 + 12345;
    if (total > (64u << 20))
        total = 64u << 20;
    if (th_rank == 0)
        printf("test_stream_flow: %zu bytes per stream, fragment %zu, window %u\n", total, fragment,
               window);

    if (th_rank % 2 == 0)
        run_sender();
    else
        run_receiver();

    /* Fragment counts add up. */
    ovl_stats_t s;
    CHECK_OK(ovl_stats_get(&s, sizeof s));
    unsigned long long mine[2] = { s.fragments_sent, s.fragments_received }, sum[2];
    CHECK_MPI(MPI_Allreduce(mine, sum, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECKF(sum[0] == sum[1], "%llu fragments sent, %llu received", sum[0], sum[1]);
    /* full fragments, plus the last one (partial or empty) */
    unsigned long long lo = (total + payload - 1) / payload, hi = total / payload + 1;
    unsigned long long mine_dir = th_rank % 2 == 0 ? s.fragments_sent : s.fragments_received;
    unsigned long long other_dir = th_rank % 2 == 0 ? s.fragments_received : s.fragments_sent;
    CHECKF(mine_dir >= lo && mine_dir <= hi && other_dir == 0,
           "rank %d: %llu fragments sent, %llu received, expected %llu..%llu one way", th_rank,
           (unsigned long long)s.fragments_sent, (unsigned long long)s.fragments_received, lo, hi);
    CHECK(s.coroutine_switches > 0 && s.completions >= lo && s.polls > 0);
    return th_finish();
}
