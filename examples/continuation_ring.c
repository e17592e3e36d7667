/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Latency-driven messaging: a token travels around a ring of ranks, each hop
 * started by a continuation, while every rank keeps computing. No rank waits
 * for the token; the continuation of each arrival posts the next send.
 *
 *   mpiexec -n 4 ./example_continuation_ring
 */
#include <ovl.h>
#include <stdatomic.h>
#include <stdio.h>

#define LAPS 10

static int rank, size, token, outgoing;
static atomic_int arrivals;
static ovl_request_t pending_send = OVL_REQUEST_NULL;

static void on_arrival(const ovl_status_t *st, void *arg);

static void post_receive(void)
{
    ovl_request_t r;
    if (ovl_irecv(&token, 1, MPI_INT, (rank + size - 1) % size, 0, &r) ||
        ovl_continue(r, on_arrival, NULL) || ovl_request_free(&r))
        MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Runs on whichever thread drives progress, as soon as the token is here. */
static void on_arrival(const ovl_status_t *st, void *arg)
{
    (void)arg;
    if (st->error != OVL_SUCCESS)
        return; /* cancelled at finalize */
    int laps = atomic_fetch_add(&arrivals, 1) + 1;
    outgoing = token + 1; /* the next arrival cannot come before this leaves */
    if (laps < LAPS || rank != 0) {
        if (laps < LAPS)
            post_receive();
        /* Fire and forget: the send completes on its own. */
        if (ovl_isend(&outgoing, 1, MPI_INT, (rank + 1) % size, 0, &pending_send) ||
            ovl_request_free(&pending_send))
            MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    ovl_config_t cfg = { .field_mask = OVL_CONFIG_FIELD_PROGRESS,
                         .progress.mode = provided == MPI_THREAD_MULTIPLE ? OVL_PROGRESS_THREAD
                                                                          : OVL_PROGRESS_INLINE };
    if (ovl_init(MPI_COMM_WORLD, &cfg) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    post_receive();
    if (rank == 0) {
        outgoing = 1;
        ovl_request_t s;
        if (ovl_isend(&outgoing, 1, MPI_INT, 1 % size, 0, &s) || ovl_request_free(&s))
            MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* The application computes; ovl_progress() keeps things moving when the
     * progress thread is off (it is cheap when there is nothing to do). */
    double x = 0;
    long iters = 0;
    while (atomic_load(&arrivals) < LAPS) {
        for (int i = 0; i < 1000; i++)
            x += 1e-9 * i;
        iters++;
        if (ovl_progress() != OVL_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Each hop adds one: rank r's last arrival carries (LAPS - 1) * size + r,
     * rank 0's carries LAPS * size. */
    int expect = rank == 0 ? LAPS * size : (LAPS - 1) * size + rank;
    printf("rank %d: %d arrivals, token %d (expected %d), computed %ld blocks meanwhile (%g)\n",
           rank, atomic_load(&arrivals), token, expect, iters, x);
    if (ovl_finalize() != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    return token != expect;
}
