/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One-sided halo exchange with demand-driven synchronisation: a 1-D ring of
 * ranks, each owning ROWS rows of a field in a segment. Every step a rank
 * reads its neighbours' boundary rows with ovl_get and starts computing at
 * once: the rows it reads first arrive first (the transfer is cut into
 * strips), and the first access to a row that is not there yet waits for
 * exactly that strip. No wait call before using the data:
 *
 *   ovl_get(halo, left, last_row, ROW, seg, NULL, NULL); // returns at once
 *   for (...) use(halo[...]);                            // waits per strip
 *   ovl_barrier();                                       // step done everywhere
 *
 * (The two NULLs: no optional parameters, no request.)
 *
 * A neighbour on the same node is read by a plain copy inside ovl_get
 * (OVL_RMA_LOCAL=auto, the default, through shared memory: nothing to
 * overlap there); the demand-driven path is for neighbours on other nodes.
 *
 * Run: mpiexec -n 2 ./example_rma_halo   (any number of ranks)
 */
#include <ovl.h>

#include <stdio.h>
#include <stdlib.h>

#define ROWS  64
#define COLS  (1 << 15) /* doubles per row: 256 KB, split into strips */
#define STEPS 5

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (ovl_init(MPI_COMM_WORLD, NULL) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    size_t row = COLS * sizeof(double);

    /* this rank's rows, readable by the others */
    double *u = NULL;
    ovl_segment_t seg = OVL_SEGMENT_NULL;
    if (ovl_segment_create(ROWS * row, (void **)&u, &seg) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
        u[i] = rank;
    /* halos on the heap: fault monitors cannot guard stack pages */
    double *lo = malloc(row), *hi = malloc(row);
    /* the loops below read upwards: a hint for the gets on this segment */
    const ovl_param_t up = { .field_mask = OVL_PARAM_FIELD_ORDER, .order = OVL_ORDER_UP };
    int rc = ovl_segment_hint(seg, &up);
    rc = rc ? rc : ovl_barrier();
    ovl_config_t cfg;
    rc = rc ? rc : ovl_config_get(&cfg);
    int annotate = rc == OVL_SUCCESS && cfg.access.monitor == OVL_MONITOR_EXPLICIT;

    double sum = 0;
    for (int s = 0; rc == OVL_SUCCESS && s < STEPS; s++) {
        /* the left neighbour's last row and the right one's first */
        rc = ovl_get(lo, left, (ROWS - 1) * row, row, seg, NULL, NULL);
        rc = rc ? rc : ovl_get(hi, right, 0, row, seg, NULL, NULL);
        /* interior work needs no halo: it overlaps the transfers */
        for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
            sum += 1e-9 * u[i];
        /* the halos are read as they arrive, strip by strip (with
         * the explicit monitor there are no faults: say what is needed) */
        if (annotate) {
            rc = rc ? rc : ovl_get_need(lo, row);
            rc = rc ? rc : ovl_get_need(hi, row);
        }
        for (int j = 0; rc == OVL_SUCCESS && j < COLS; j++)
            sum += lo[j] + hi[j];
        /* nobody overwrites rows another rank may still be reading */
        rc = rc ? rc : ovl_barrier();
        for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
            u[i] += 1;
        rc = rc ? rc : ovl_barrier();
    }
    if (rc != OVL_SUCCESS)
        fprintf(stderr, "rank %d: %s (%s)\n", rank, ovl_strerror(rc), ovl_error_detail());
    double want = 0;
    for (int s = 0; s < STEPS; s++)
        want += 1e-9 * (double)ROWS * COLS * (rank + s) + (double)COLS * (left + right + 2 * s);
    int ok = rc == OVL_SUCCESS && sum > want * (1 - 1e-9) && sum < want * (1 + 1e-9);
    printf("rank %d: halo sum %.6g (%s)\n", rank, sum, ok ? "ok" : "WRONG");
    free(lo);
    free(hi);
    if (ovl_segment_free(&seg) != OVL_SUCCESS || ovl_finalize() != OVL_SUCCESS)
        ok = 0;
    MPI_Finalize();
    return ok ? 0 : 1;
}
