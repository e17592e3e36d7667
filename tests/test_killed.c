/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A rank killed mid-transfer (README.md, "A process that dies").
 *
 * Every rank sets MPI_ERRORS_RETURN on MPI_COMM_WORLD before ovl_init, so
 * ovl's communicators (duplicates) inherit it. Rank 1 posts its part of a
 * ring of large transfers (messages and a delta receive), lets them start,
 * and kills itself with SIGKILL. The others wait for transfers that can
 * never complete. What is promised, and checked by ctest (ABORTS): the job
 * ends, it does not hang; a survivor whose wait needs the dead rank and
 * gets control back sees an error (OVL_ERR_MPI), never success; ovl_finalize
 * returns. With MPICH
 * and Open MPI the launcher ends the job when a process dies, so the
 * survivors are usually killed inside their wait.
 */
#include "harness.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    th_init_mpi(&argc, &argv, "test_killed", MPI_THREAD_MULTIPLE);
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECKF(th_size >= 3, "test_killed needs 3 ranks or more");
    const int right = (th_rank + 1) % th_size, left = (th_rank + th_size - 1) % th_size;
    const size_t bytes = (size_t)16 << 20;
    unsigned char *out = malloc(bytes), *in = malloc(bytes), *din = NULL;
    CHECK(out && in);
    CHECK_OK(ovl_alloc(bytes, &din));
    memset(out, 0x5a, bytes);
    ovl_request_t r[3];
    CHECK_OK(ovl_isend(out, (int)bytes, MPI_BYTE, right, 1, &r[0]));
    CHECK_OK(ovl_irecv(in, (int)bytes, MPI_BYTE, left, 1, &r[1]));
    CHECK_OK(ovl_delta_recv(din, (int)bytes, MPI_BYTE, right, 2, NULL, &r[2]));
    if (th_rank == 1) {
        usleep(50000); /* the transfers are under way */
        printf("test_killed: rank 1 kills itself\n");
        fflush(stdout);
        raise(SIGKILL);
    }
    /* a delta send to the left neighbour, written while it goes */
    ovl_request_t ds;
    CHECK_OK(ovl_delta_send_begin(out, (int)bytes, MPI_BYTE, left, 2, NULL, &ds));
    CHECK_OK(ovl_delta_send_end(ds, NULL));
    ovl_status_t st[3];
    int rc = ovl_waitall(3, r, st);
    printf("test_killed: rank %d: ovl_waitall returned %s\n", th_rank, th_code_name(rc));
    fflush(stdout);
    /* rank 1 never starts its delta send to rank 0, so rank 0's wait cannot
     * succeed; rank 2's may (rank 1's message to it had left) */
    if (th_rank == 0)
        CHECKF(rc != OVL_SUCCESS, "ovl_waitall succeeded with rank 1 dead");
    int frc = ovl_finalize();
    printf("test_killed: rank %d: ovl_finalize returned %s\n", th_rank, th_code_name(frc));
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
}
