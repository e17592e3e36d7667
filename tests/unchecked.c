/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A program ported to ovl the way OVL_ERRORS=fatal allows: no check macro,
 * no result looked at. Compiled only (tests/CMakeLists.txt, errors.*):
 * with -Wall -Wextra -Werror it must build without OVL_CHECK_RESULTS, and
 * with it every ignored result must be reported (-Wunused-result).
 */
#include <ovl.h>

static void arrived(const ovl_status_t *st, void *arg)
{
    (void)st;
    (void)arg;
}

static int marshal(ovl_stream_t s, void *arg)
{
    ovl_stream_write_double(s, *(const double *)arg);
    return OVL_SUCCESS;
}

static int unmarshal(ovl_stream_t s, void *arg)
{
    ovl_stream_read_double(s, arg);
    return OVL_SUCCESS;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    ovl_init(MPI_COMM_WORLD, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double out = rank, in = -1;
    ovl_request_t r, s;
    ovl_irecv(&in, 1, MPI_DOUBLE, (rank + size - 1) % size, 0, &r);
    ovl_continue(r, arrived, NULL);
    ovl_isend(&out, 1, MPI_DOUBLE, (rank + 1) % size, 0, &s);
    ovl_progress();
    ovl_wait(&s, NULL);
    ovl_wait(&r, NULL);
    double again = -1;
    ovl_irecv_stream((rank + size - 1) % size, 1, unmarshal, &again, &r);
    ovl_isend_stream((rank + 1) % size, 1, marshal, &out, &s);
    ovl_request_free(&s);
    ovl_wait(&r, NULL);
    ovl_finalize();
    MPI_Finalize();
    return in != (rank + size - 1) % size || again != in;
}
