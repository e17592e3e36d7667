/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Marshal streams: send a linked list whose length the sender never counts.
 * The marshal function walks the list and writes values; ovl ships each
 * fragment as it fills, so the walk overlaps the transfer. The receiver's
 * unmarshal function rebuilds the list as fragments arrive.
 *
 *   mpiexec -n 2 ./example_marshal_stream
 */
#include <ovl.h>
#include <stdio.h>
#include <stdlib.h>

struct node {
    int32_t id;
    double value;
    struct node *next;
};

static int marshal_list(ovl_stream_t s, void *arg)
{
    int rc;
    for (struct node *n = arg; n; n = n->next)
        if ((rc = ovl_stream_write_int32(s, n->id)) || (rc = ovl_stream_write_double(s, n->value)))
            return rc;
    return ovl_stream_write_int32(s, -1); /* end marker */
}

static int unmarshal_list(ovl_stream_t s, void *arg)
{
    struct node **tail = arg;
    int32_t id;
    int rc;
    while ((rc = ovl_stream_read_int32(s, &id)) == OVL_SUCCESS && id >= 0) {
        struct node *n = calloc(1, sizeof *n);
        if (!n)
            return OVL_ERR_NOMEM;
        n->id = id;
        if ((rc = ovl_stream_read_double(s, &n->value))) {
            free(n);
            return rc;
        }
        *tail = n;
        tail = &n->next;
    }
    return rc;
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
    if (size < 2) {
        fprintf(stderr, "run with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    struct node *head = NULL;
    ovl_request_t req = OVL_REQUEST_NULL;
    ovl_status_t st;
    int rc = OVL_SUCCESS;
    if (rank == 0) {
        for (int i = 99999; i >= 0; i--) {
            struct node *n = malloc(sizeof *n);
            n->id = i;
            n->value = i * 0.25;
            n->next = head;
            head = n;
        }
        rc = ovl_isend_stream(1, 0, marshal_list, head, &req);
    } else if (rank == 1) {
        rc = ovl_irecv_stream(0, 0, unmarshal_list, &head, &req);
    }
    if (rc == OVL_SUCCESS)
        rc = ovl_wait(&req, &st);
    if (rc != OVL_SUCCESS) {
        fprintf(stderr, "rank %d: %s (%s)\n", rank, ovl_strerror(rc), ovl_error_detail());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long count = 0, bad = 0;
    for (struct node *n = head, *next; n; n = next, count++) {
        bad += n->id != count || n->value != count * 0.25;
        next = n->next;
        free(n);
    }
    if (rank <= 1)
        printf("rank %d: %ld nodes, %ld wrong, %zu bytes on the wire\n", rank, count, bad,
               st.bytes);
    if (ovl_finalize() != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    return bad != 0;
}
