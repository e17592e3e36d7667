/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_thread_level: ovl_init against the state of MPI.
 *  - before MPI_Init: ovl_init -> OVL_ERR_ARG (MPI not initialised);
 *  - MPI started with MPI_THREAD_SERIALIZED: OVL_PROGRESS=thread (config or
 *    environment) -> OVL_ERR_THREAD, with a detail naming
 *    MPI_THREAD_MULTIPLE. If the MPI library grants MPI_THREAD_MULTIPLE
 *    anyway that assertion is skipped (and the reason printed), and thread
 *    mode must work instead;
 *  - inline progress works at that level (a byte-checked ring exchange);
 *  - after MPI_Finalize: ovl_init -> OVL_ERR_ARG (MPI finalised).
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

static void ring_exchange(int tag)
{
    int right = (th_rank + 1) % th_size, left = (th_rank + th_size - 1) % th_size;
    char out[512], in[512];
    th_fill(out, sizeof out, (uint64_t)th_rank * 1000 + (uint64_t)tag, 0);
    ovl_request_t r[2];
    ovl_status_t st[2];
    CHECK_OK(ovl_irecv(in, sizeof in, MPI_CHAR, left, tag, &r[0]));
    CHECK_OK(ovl_isend(out, sizeof out, MPI_CHAR, right, tag, &r[1]));
    CHECK_OK(ovl_waitall(2, r, st));
    CHECK(st[0].source == left && st[0].bytes == sizeof in);
    CHECK(th_verify(in, sizeof in, (uint64_t)left * 1000 + (uint64_t)tag, 0) == TH_OK);
}

int main(int argc, char **argv)
{
    /* MPI is not running yet. */
    EXPECT_ERR(ovl_init(MPI_COMM_WORLD, NULL), OVL_ERR_ARG);
    CHECK(strstr(ovl_error_detail(), "ovl_init") != NULL);
    CHECK(!ovl_initialized());

    int provided = th_init_mpi(&argc, &argv, "test_thread_level", MPI_THREAD_SERIALIZED);
    int query = -1;
    MPI_Query_thread(&query);
    CHECK(query == provided);
    const char *env = getenv("OVL_PROGRESS");
    int env_thread = env && strcmp(env, "thread") == 0;

    ovl_config_t thread_cfg = { .field_mask = OVL_CONFIG_FIELD_PROGRESS,
                                .progress.mode = OVL_PROGRESS_THREAD };
    ovl_config_t inline_cfg = { .field_mask = OVL_CONFIG_FIELD_PROGRESS,
                                .progress.mode = OVL_PROGRESS_INLINE };
    if (provided < MPI_THREAD_MULTIPLE) {
        EXPECT_ERR(ovl_init(MPI_COMM_WORLD, &thread_cfg), OVL_ERR_THREAD);
        CHECKF(strstr(ovl_error_detail(), "MPI_THREAD_MULTIPLE") != NULL, "detail \"%s\"",
               ovl_error_detail());
        CHECK(!ovl_initialized());
        /* the same through the environment */
        setenv("OVL_PROGRESS", "thread", 1);
        EXPECT_ERR(ovl_init(MPI_COMM_WORLD, NULL), OVL_ERR_THREAD);
        CHECK(!ovl_initialized());
        if (env)
            setenv("OVL_PROGRESS", env, 1);
        else
            unsetenv("OVL_PROGRESS");
        /* Under the thread variant the environment asks for the thread. */
        if (env_thread)
            EXPECT_ERR(ovl_init(MPI_COMM_WORLD, NULL), OVL_ERR_THREAD);
    } else {
        if (th_rank == 0)
            printf("test_thread_level: NOTE: asked MPI for MPI_THREAD_SERIALIZED but it "
                   "provides MPI_THREAD_MULTIPLE (level %d): the OVL_ERR_THREAD assertion "
                   "does not apply, checking that thread mode works instead\n",
                   provided);
        CHECK_OK(ovl_init(MPI_COMM_WORLD, &thread_cfg));
        ring_exchange(1);
        CHECK_OK(ovl_finalize());
    }

    /* Inline progress needs no more than what MPI gave. */
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &inline_cfg));
    ovl_config_t got;
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.progress.mode == OVL_PROGRESS_INLINE);
    for (int i = 0; i < 3; i++)
        ring_exchange(10 + i);
    CHECK_OK(ovl_finalize());

    th_finish(); /* MPI_Finalize */

    /* MPI is gone: ovl must notice rather than call into it. */
    int rc = ovl_init(MPI_COMM_WORLD, NULL);
    if (rc != OVL_ERR_ARG) {
        fprintf(stderr, "FAIL test_thread_level.c: ovl_init after MPI_Finalize -> %s\n",
                th_code_name(rc));
        return 1;
    }
    return 0;
}
