/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_leave: without a progress thread, an ended delta send has left
 * when ovl_delta_send_end returns, so a receiver waiting for it does not
 * wait for the sender's next ovl call (as with MPI_Send: its message has
 * left when it returns). Pairs: rank r with r^1; the even rank sends
 * MSG bytes (several pieces, each within the eager limit) and then computes
 * for HOLD seconds without calling ovl or MPI; the odd rank waits for the
 * message at once and must have it within HOLD/2 seconds, every byte as
 * sent. Then the roles swap. A receiver that is not scheduled for a while
 * (a loaded machine) lets the sender give up early, as documented, so each
 * direction has three tries; without the push every try waits HOLD. Run
 * with OVL_PROGRESS=inline, on one node with OVL_RMA_LOCAL=overlap (pieces,
 * not one plain transfer) and across the emulated cluster's hosts.
 */
#include "delta_common.h"

#define MSG   (1u << 20)
#define HOLD  2.0
#define TRIES 3

static void spin_for(double secs)
{
    volatile double x = 1.0;
    double t0 = th_now();
    while (th_now() - t0 < secs)
        for (int i = 0; i < 1000; i++)
            x = x * 1.0000001 + 1e-9;
}

/* One try; 1 on every rank when the receiver had the message in time. */
static int one_way(int sender, int round)
{
    const int peer = th_rank ^ 1;
    uint64_t key = th_mix(th_seed() + 31u * (uint64_t)round);
    dt_region_t rg;
    dt_region_alloc(&rg, MSG, 0, th_mix(key + 1));
    ovl_request_t r = OVL_REQUEST_NULL;
    ovl_status_t st = { .error = 1 };
    double waited = 0;
    if (!sender)
        CHECK_OK(ovl_delta_recv(rg.buf, MSG, MPI_BYTE, peer, 60 + round, NULL, &r));
    MPI_Barrier(MPI_COMM_WORLD);
    if (sender) {
        th_fill(rg.buf, MSG, key, 0);
        CHECK_OK(ovl_delta_send_begin(rg.buf, MSG, MPI_BYTE, peer, 60 + round,
                                      TH_MONITOR(OVL_MONITOR_EXPLICIT), &r));
        CHECK_OK(ovl_delta_produced(r, 0, MSG));
        CHECK_OK(ovl_delta_send_end(r, NULL));
        spin_for(HOLD); /* the program computes: no ovl or MPI call */
        CHECK_OK(ovl_wait(&r, &st));
    } else {
        double t0 = th_now();
        CHECK_OK(ovl_wait(&r, &st));
        waited = th_now() - t0;
        if (waited >= HOLD / 2)
            printf("rank %d, round %d: the receive waited %.2f s\n", th_rank, round, waited);
        size_t bad = th_verify(rg.buf, MSG, key, 0);
        CHECKF(bad == TH_OK, "round %d: wrong byte at offset %zu", round, bad);
    }
    CHECKF(st.error == OVL_SUCCESS && st.bytes == MSG, "round %d: status {%zu, %d}", round,
           st.bytes, st.error);
    CHECKF(dt_sentinel_check(&rg) == TH_OK, "round %d: a sentinel byte changed", round);
    dt_region_free(&rg);
    int late = waited >= HOLD / 2, any_late = 0;
    MPI_Allreduce(&late, &any_late, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return !any_late;
}

static void both_tries(int sender, int first_round, const char *what)
{
    for (int t = 0; t < TRIES; t++)
        if (one_way(sender, first_round + t))
            return;
    CHECKF(0,
           "%s: in %d tries the receive waited for the sender's next call (it computes for "
           "%.1f s after ovl_delta_send_end)",
           what, TRIES, HOLD);
}

int main(int argc, char **argv)
{
    dt_init(&argc, &argv, "test_delta_leave", NULL);
    CHECKF(th_size % 2 == 0, "%d ranks: the test pairs ranks (an even number)", th_size);
    dt_phase("one way", (unsigned)(TRIES * 4 * HOLD) + 60);
    both_tries(th_rank % 2 == 0, 0, "one way");
    dt_phase("the other way", (unsigned)(TRIES * 4 * HOLD) + 60);
    both_tries(th_rank % 2 == 1, TRIES, "the other way");
    return dt_finish();
}
