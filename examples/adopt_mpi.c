/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Adopting ovl one call at a time: existing MPI code keeps its MPI_Isend /
 * MPI_Irecv on its own communicator and hands the requests to ovl, which runs
 * a continuation when each completes -- here, to start using a halo row the
 * moment it lands instead of at a later MPI_Waitall.
 *
 *   mpiexec -n 2 ./example_adopt_mpi
 */
#include <ovl.h>
#include <stdatomic.h>
#include <stdio.h>

#define N 4096

static double halo[N], mine[N];
static atomic_int halo_sum_ready;
static double halo_sum;

static void halo_arrived(MPI_Status *st, void *arg)
{
    (void)st;
    (void)arg;
    double s = 0;
    for (int i = 0; i < N; i++)
        s += halo[i];
    halo_sum = s;
    atomic_store(&halo_sum_ready, 1);
}

static void send_done(MPI_Status *st, void *arg)
{
    (void)st;
    *(int *)arg = 1;
}

int main(int argc, char **argv)
{
    int provided; /* MPI_THREAD_MULTIPLE: OVL_PROGRESS=thread then works */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (ovl_init(MPI_COMM_WORLD, NULL) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = rank ^ 1;
    if (peer >= size)
        peer = rank;
    for (int i = 0; i < N; i++)
        mine[i] = rank + i;

    MPI_Request rreq, sreq;
    MPI_Irecv(halo, N, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD, &rreq);
    MPI_Isend(mine, N, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD, &sreq);
    static int sent;
    if (ovl_continue_mpi(&rreq, halo_arrived, NULL) || ovl_continue_mpi(&sreq, send_done, &sent))
        MPI_Abort(MPI_COMM_WORLD, 1);
    /* rreq and sreq are MPI_REQUEST_NULL now: ovl owns them. */
    while (!atomic_load(&halo_sum_ready))
        if (ovl_progress())
            MPI_Abort(MPI_COMM_WORLD, 1);
    double expect = (double)N * peer + (double)N * (N - 1) / 2;
    printf("rank %d: halo sum %.0f (expected %.0f)\n", rank, halo_sum, expect);
    if (ovl_finalize() != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    return halo_sum != expect;
}
