/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A loop-nest plan: each rank holds an N x N row-major matrix of doubles
 * in a segment, and every step reads a column panel (NB columns) of the
 * next rank's matrix, row by row, to multiply it by a vector. The loop's
 * remote reference is described once, as an MPI subarray would be:
 *
 *   ovl_plan_create("panel", &p, &found);           // found again next step
 *   ovl_plan_loop(p, 0, N); ovl_plan_loop(p, 1, NB); // for i, for j
 *   ovl_plan_read(p, seg, next, &remote, panel, &local);
 *   ovl_plan_commit(p, NULL);                       // analysed the first time only
 *   ovl_plan_begin(p);
 *   while (ovl_plan_next(p, &i0, &n) == OVL_SUCCESS && n > 0)
 *       ...rows [i0, i0 + n) of the panel are in place...
 *   ovl_plan_end(p);
 *
 * ovl picks how to move the panel (a derived datatype per strip, a get per
 * row, or the bounding box) and how many rows a strip holds, and keeps the
 * next strips in flight while the program computes; rank 0 prints the
 * plan (ovl_plan_explain). The result is checked.
 *
 * Run: mpiexec -n 2 ./example_plan_panel   (any number of ranks)
 */
#include <ovl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N     512
#define NB    32
#define C0    100 /* first column of the panel */
#define STEPS 3

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (ovl_init(MPI_COMM_WORLD, NULL) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int next = (rank + 1) % size;

    double *a;
    ovl_segment_t seg;
    if (ovl_segment_create(sizeof(double) * N * N, (void **)&a, &seg) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            a[i * N + j] = rank + 0.001 * i + j;
    if (ovl_barrier() != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);

    /* the panel on the next rank, and where it goes here (a dense N x NB) */
    ovl_lmad_t remote, local;
    if (ovl_lmad_from_subarray(2, (int[]){ N, N }, (int[]){ N, NB }, (int[]){ 0, C0 }, MPI_ORDER_C,
                               sizeof(double), &remote) != OVL_SUCCESS ||
        ovl_lmad_from_subarray(2, (int[]){ N, NB }, (int[]){ N, NB }, (int[]){ 0, 0 }, MPI_ORDER_C,
                               sizeof(double), &local) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    double *panel = malloc(sizeof(double) * N * NB), *y = malloc(sizeof(double) * N);
    double x[NB];
    for (int j = 0; j < NB; j++)
        x[j] = 1.0 / (j + 1);
    int bad = 0;
    for (int step = 0; step < STEPS; step++) {
        ovl_plan_t p;
        int found;
        if (ovl_plan_create("panel", &p, &found) != OVL_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 1);
        if (!found) { /* the first step describes and analyses; later ones find it */
            if (ovl_plan_loop(p, 0, N) != OVL_SUCCESS || ovl_plan_loop(p, 1, NB) != OVL_SUCCESS ||
                ovl_plan_read(p, seg, next, &remote, panel, &local) != OVL_SUCCESS ||
                ovl_plan_commit(p, NULL) != OVL_SUCCESS)
                MPI_Abort(MPI_COMM_WORLD, 1);
            if (rank == 0 && ovl_plan_explain(p, stdout) != OVL_SUCCESS)
                MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (ovl_plan_begin(p) != OVL_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 1);
        int64_t i0, n;
        while (ovl_plan_next(p, &i0, &n) == OVL_SUCCESS && n > 0)
            for (int64_t i = i0; i < i0 + n; i++) { /* these rows are in place */
                y[i] = 0;
                for (int j = 0; j < NB; j++)
                    y[i] += panel[i * NB + j] * x[j];
            }
        if (ovl_plan_end(p) != OVL_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 1);
        for (int i = 0; i < N; i++) {
            double want = 0;
            for (int j = 0; j < NB; j++)
                want += (next + 0.001 * i + (C0 + j)) * x[j];
            bad += fabs(y[i] - want) > 1e-9 * fabs(want);
        }
    }
    ovl_plan_t p;
    if (ovl_plan_create("panel", &p, NULL) != OVL_SUCCESS || ovl_plan_free(&p) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    printf("rank %d: %d steps, %s\n", rank, STEPS, bad ? "WRONG RESULT" : "result checked");
    free(panel);
    free(y);
    if (ovl_barrier() != OVL_SUCCESS || ovl_segment_free(&seg) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    ovl_finalize();
    MPI_Finalize();
    return bad ? 1 : 0;
}
