/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Delta send/receive: rank 0 computes an array and sends it WHILE computing;
 * rank 1 uses it WHILE it arrives. Compared with MPI_Send after the loop and
 * MPI_Recv before the loop, the only changes are where the calls sit:
 *
 *   rank 0:  ovl_delta_send_begin(a, ...);   // before the loop that writes a
 *            for (i...) a[i] = f(i);          // unchanged
 *            ovl_wait(&req, NULL);            // after independent work
 *   rank 1:  ovl_delta_recv(a, ...);          // before the loop that reads a
 *            for (i...) sum += g(a[i]);       // unchanged: waits per page if early
 *            ovl_wait(&req, NULL);            // releases the request
 *
 * By default page faults tell ovl how far the writer has got and which page
 * the reader needs (OVL_MONITOR=auto). The NULL before &req is the call's
 * optional parameters (ovl_param_t): NULL takes the defaults. Run:
 * mpiexec -n 2 ./example_delta_pipeline
 */
#include <ovl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N (1 << 20)

int main(int argc, char **argv)
{
    int provided; /* MPI_THREAD_MULTIPLE: OVL_PROGRESS=thread then works */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (ovl_init(MPI_COMM_WORLD, NULL) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double *a = malloc(N * sizeof *a);
    ovl_request_t req;
    int rc = OVL_SUCCESS, wrong = 0;

    if (size >= 2 && rank == 0) {
        rc = ovl_delta_send_begin(a, N, MPI_DOUBLE, 1, 0, NULL, &req);
        for (int i = 0; rc == OVL_SUCCESS && i < N; i++)
            a[i] = sin(i * 1e-3) * cos(i * 2e-3);
        if (rc == OVL_SUCCESS)
            rc = ovl_wait(&req, OVL_STATUS_IGNORE);
    } else if (size >= 2 && rank == 1) {
        rc = ovl_delta_recv(a, N, MPI_DOUBLE, 0, 0, NULL, &req);
        double sum = 0;
        for (int i = 0; rc == OVL_SUCCESS && i < N; i++)
            sum += a[i] * a[i];
        ovl_status_t st;
        if (rc == OVL_SUCCESS)
            rc = ovl_wait(&req, &st);
        /* The same values computed here must give the same sum, bit for bit. */
        double expect = 0;
        for (int i = 0; i < N; i++) {
            double v = sin(i * 1e-3) * cos(i * 2e-3);
            expect += v * v;
        }
        if (rc == OVL_SUCCESS) {
            wrong = st.bytes != N * sizeof *a || sum != expect;
            printf("rank 1 received %zu bytes, sum of squares %.6f (%s)\n", st.bytes, sum,
                   wrong ? "WRONG" : "ok");
        }
    }
    if (rc != OVL_SUCCESS)
        fprintf(stderr, "rank %d: %s: %s\n", rank, ovl_strerror(rc), ovl_error_detail());
    free(a);
    if (ovl_finalize() != OVL_SUCCESS)
        rc = OVL_ERR_INTERNAL;
    MPI_Finalize();
    return rc != OVL_SUCCESS || wrong;
}
