/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Threads that communicate as fast as processes: each thread of each rank
 * binds a communication domain of its own and exchanges with the same
 * thread of the next rank, with the same tag on every thread (messages
 * match only within one domain index). Then an active message per thread
 * counts at the next rank. Run: mpiexec -n 2 ./example_thread_domains
 */
#include <ovl.h>

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 2
#define ROUNDS  100

static int rank, size;
static ovl_domain_t dom[THREADS];
static atomic_int arrived;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != OVL_SUCCESS) {                                                                  \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, ovl_strerror(rc_), ovl_error_detail()); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
        }                                                                                          \
    } while (0)

/* runs at the target, on the thread serving domain 0 */
static void count(ovl_am_token_t tok, const void *buf, size_t bytes, void *arg)
{
    (void)tok;
    (void)buf;
    (void)bytes;
    (void)arg;
    atomic_fetch_add(&arrived, 1);
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    CHECK(ovl_domain_bind(dom[t]));
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    long sum = 0;
    for (int k = 0; k < ROUNDS; k++) {
        long out = 1000L * rank + 10L * t + k, in = -1;
        ovl_request_t rq[2];
        CHECK(ovl_irecv(&in, 1, MPI_LONG, prev, 0, &rq[0]));
        CHECK(ovl_isend(&out, 1, MPI_LONG, next, 0, &rq[1]));
        CHECK(ovl_waitall(2, rq, OVL_STATUS_IGNORE));
        if (in != 1000L * prev + 10L * t + k) {
            fprintf(stderr, "rank %d thread %d: got %ld from another thread\n", rank, t, in);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        sum += in;
    }
    ovl_request_t r;
    CHECK(ovl_am_request(next, 1, NULL, 0, &r));
    CHECK(ovl_wait(&r, OVL_STATUS_IGNORE));
    CHECK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
    printf("rank %d thread %d: %d messages on domain %d, sum %ld\n", rank, t, ROUNDS, dom[t], sum);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided < MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "needs MPI_THREAD_MULTIPLE\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECK(ovl_am_register(1, count, NULL));
    /* private: one thread each; on MPICH with streams, an endpoint each */
    CHECK(ovl_domains_create(THREADS, OVL_DOMAIN_PRIVATE, dom));
    MPI_Barrier(MPI_COMM_WORLD);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    /* serve the other ranks' active messages until each rank has its own */
    while (atomic_load(&arrived) < THREADS)
        CHECK(ovl_progress());
    CHECK(ovl_domains_free(THREADS, dom));
    printf("rank %d: %d active messages handled\n", rank, atomic_load(&arrived));
    CHECK(ovl_finalize());
    MPI_Finalize();
    return 0;
}
