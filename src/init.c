/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Library lifetime: ovl_init duplicates the user's communicator (three
 * times, so point-to-point messages, stream heads and stream fragments can
 * never match each other or user traffic), resolves the configuration,
 * checks that every rank agrees on what must agree, and starts the progress
 * engine. ovl_finalize drains everything still in flight before freeing.
 * Also the argument checks every front end shares.
 */
#include "ovl_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ovl__global ovl__g;

int ovl_initialized(void)
{
    return atomic_load(&ovl__g.initialized) ? 1 : 0;
}

int ovl_tag_ub(void)
{
    return atomic_load(&ovl__g.initialized) ? ovl__g.tag_ub : 0;
}

MPI_Comm ovl_comm(void)
{
    return atomic_load(&ovl__g.initialized) ? ovl__g.comm_msg : MPI_COMM_NULL;
}

int ovl__check_init(const char *fn)
{
    /* read before written: the line stays shared while nobody clears it */
    if (!atomic_load_explicit(&ovl__g.called, memory_order_relaxed))
        atomic_store_explicit(&ovl__g.called, 1, memory_order_relaxed);
    if (!atomic_load(&ovl__g.initialized))
        return ovl__error(OVL_ERR_NOT_INIT, fn, "call ovl_init() first (or ovl was finalised)");
    return OVL_SUCCESS;
}

int ovl__check_peer(const char *fn, int rank, int any_ok)
{
    if (any_ok && rank == MPI_ANY_SOURCE)
        return OVL_SUCCESS;
    if (rank < 0 || rank >= ovl__g.size)
        return ovl__error(OVL_ERR_RANK, fn, "rank %d out of range (communicator size %d)", rank,
                          ovl__g.size);
    return OVL_SUCCESS;
}

int ovl__check_tag(const char *fn, int tag, int any_ok)
{
    if (any_ok && tag == MPI_ANY_TAG)
        return OVL_SUCCESS;
    if (tag < 0 || tag > ovl__g.tag_ub)
        return ovl__error(OVL_ERR_TAG, fn, "tag %d out of range [0, %d]", tag, ovl__g.tag_ub);
    return OVL_SUCCESS;
}

int ovl__check_not_in_callback(const char *fn)
{
    struct ovl__tls *t = ovl__tls();
    if (t->in_callback || t->coro)
        return ovl__error(OVL_ERR_IN_CALLBACK, fn,
                          "blocking call from inside a continuation or marshal function");
    return OVL_SUCCESS;
}

static atomic_int probe_hits; /* OVL__ERRORS_ON_WORLD / _SELF: where it was raised */

static void probe_hit(MPI_Comm *comm, int *code, ...)
{
    OVL__UNUSED(code);
    if (comm && *comm == MPI_COMM_SELF)
        atomic_fetch_or(&probe_hits, OVL__ERRORS_ON_SELF);
    else
        atomic_fetch_or(&probe_hits, OVL__ERRORS_ON_WORLD);
}

/* Whether this MPI raises a completed request's error on MPI_COMM_WORLD's
 * or MPI_COMM_SELF's error handler rather than on its communicator's
 * (MPICH 4.0 does, on WORLD's): a receive truncated by a send to this
 * process, on a duplicate of MPI_COMM_SELF whose handler returns, tested
 * with MPI_Testsome as the engine tests, while a recording handler is on
 * WORLD and SELF. The answer says which of the two (OVL__ERRORS_ON_*), so
 * the engine swaps only that one's handler around each MPI_Testsome (two
 * MPI calls fewer a poll). Local. Anything failing answers both, the safe
 * side. */
static int errors_raised_on_world(void)
{
    MPI_Comm pc = MPI_COMM_NULL;
    MPI_Errhandler rec = MPI_ERRHANDLER_NULL, world = MPI_ERRHANDLER_NULL,
                   self = MPI_ERRHANDLER_NULL;
    int yes = OVL__ERRORS_ON_WORLD | OVL__ERRORS_ON_SELF;
    if (MPI_Comm_dup(MPI_COMM_SELF, &pc) != MPI_SUCCESS)
        return yes;
    MPI_Comm_set_errhandler(pc, MPI_ERRORS_RETURN);
    if (MPI_Comm_create_errhandler(probe_hit, &rec) == MPI_SUCCESS &&
        MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world) == MPI_SUCCESS &&
        MPI_Comm_get_errhandler(MPI_COMM_SELF, &self) == MPI_SUCCESS) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, rec);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, rec);
        atomic_store(&probe_hits, 0);
        char out[16] = { 0 }, in[8];
        MPI_Request rq[2] = { MPI_REQUEST_NULL, MPI_REQUEST_NULL };
        int ok = MPI_Irecv(in, (int)sizeof in, MPI_BYTE, 0, 0, pc, &rq[0]) == MPI_SUCCESS &&
                 MPI_Isend(out, (int)sizeof out, MPI_BYTE, 0, 0, pc, &rq[1]) == MPI_SUCCESS;
        for (int left = ok ? 2 : 0, spins = 0; left > 0 && spins < 1000000; spins++) {
            int n = 0, idx[2];
            MPI_Status st[2];
            MPI_Testsome(2, rq, &n, idx, st);
            if (n == MPI_UNDEFINED)
                break;
            left -= n;
        }
        MPI_Comm_set_errhandler(MPI_COMM_SELF, self);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
        if (ok && rq[0] == MPI_REQUEST_NULL && rq[1] == MPI_REQUEST_NULL)
            yes = atomic_load(&probe_hits);
        for (int i = 0; i < 2; i++)
            if (rq[i] != MPI_REQUEST_NULL) { /* not completed: leave it be */
                MPI_Cancel(&rq[i]);
                MPI_Request_free(&rq[i]);
            }
    }
    MPI_Errhandler *h[] = { &world, &self, &rec };
    for (int i = 0; i < 3; i++)
        if (*h[i] != MPI_ERRHANDLER_NULL && *h[i] != MPI_ERRORS_ARE_FATAL &&
            *h[i] != MPI_ERRORS_RETURN)
            MPI_Errhandler_free(h[i]);
    MPI_Comm_free(&pc);
    return yes;
}

static void free_comms(void)
{
    MPI_Comm *c[] = { &ovl__g.comm_msg,   &ovl__g.comm_stream, &ovl__g.comm_frag,
                      &ovl__g.comm_delta, &ovl__g.comm_am,     &ovl__g.comm_am_bulk };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (*c[i] != MPI_COMM_NULL)
            MPI_Comm_free(c[i]);
}

/* Which node each rank runs on (ovl__g.node_of: the lowest rank sharing its
 * MPI_COMM_TYPE_SHARED communicator), and so the CPUs this rank may count
 * as its own (ovl__g.cpus_per_rank). Collective. */
static int find_nodes(void)
{
    MPI_Comm node;
    int rc = MPI_Comm_split_type(ovl__g.comm_msg, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS)
        return ovl__mpi_error(rc, "ovl_init", "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    int lead = ovl__g.rank;
    rc = MPI_Allreduce(MPI_IN_PLACE, &lead, 1, MPI_INT, MPI_MIN, node);
    /* the CPUs the node's ranks may run on, all together */
    cpu_set_t set, all;
    CPU_ZERO(&set);
    CPU_ZERO(&all);
    int affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (rc == MPI_SUCCESS)
        rc = MPI_Allreduce(&set, &all, (int)sizeof set, MPI_BYTE, MPI_BOR, node);
    MPI_Comm_free(&node);
    if (rc == MPI_SUCCESS)
        rc = MPI_Allgather(&lead, 1, MPI_INT, ovl__g.node_of, 1, MPI_INT, ovl__g.comm_msg);
    if (rc != MPI_SUCCESS)
        return ovl__mpi_error(rc, "ovl_init", "finding nodes");
    int node_ranks = 0;
    for (int r = 0; r < ovl__g.size; r++)
        node_ranks += ovl__g.node_of[r] == ovl__g.node_of[ovl__g.rank];
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int node_cpus = affinity > 0 ? CPU_COUNT(&all) : online > 0 ? (int)online : 1;
    ovl__g.node_oversubscribed = node_ranks > node_cpus;
    ovl__g.one_node = node_ranks == ovl__g.size;
    ovl__g.cpus_per_rank = ovl__sched_cpus_per_rank(affinity, online, node_ranks);
    return OVL_SUCCESS;
}

int ovl__peer_on_node(int peer)
{
    return peer >= 0 && peer < ovl__g.size && ovl__g.node_of &&
           ovl__g.node_of[peer] == ovl__g.node_of[ovl__g.rank];
}

int ovl_init(MPI_Comm comm, const ovl_config_t *cfg)
{
    static const char *fn = "ovl_init";
    int flag = 0, rc;
    if (atomic_load(&ovl__g.initialized))
        return ovl__error(OVL_ERR_ALREADY_INIT, fn, "ovl_init() called twice");
    MPI_Initialized(&flag);
    if (!flag)
        return ovl__error(OVL_ERR_ARG, fn, "MPI is not initialised: call MPI_Init first");
    MPI_Finalized(&flag);
    if (flag)
        return ovl__error(OVL_ERR_ARG, fn, "MPI is already finalised");
    if (comm == MPI_COMM_NULL)
        return ovl__error(OVL_ERR_ARG, fn, "communicator is MPI_COMM_NULL");

    /* A bad OVL_* value, or a thread level too low, on some ranks only:
     * such a rank must not return before the collectives below, or the
     * others hang in them. Its error is kept (with its detail) and every
     * rank learns of it in the agreement after the duplicates, which need
     * no configuration. */
    ovl_config_t c = { .field_mask = 0 };
    int serve_auto = 0;
    int local = ovl__config_resolve(cfg, &c, &serve_auto);
    MPI_Query_thread(&ovl__g.thread_level);
    if (local == OVL_SUCCESS && c.progress.mode == OVL_PROGRESS_THREAD &&
        ovl__g.thread_level < MPI_THREAD_MULTIPLE)
        local = ovl__error(OVL_ERR_THREAD, fn,
                           "OVL_PROGRESS=thread needs MPI_THREAD_MULTIPLE, but MPI provides "
                           "level %d: start MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, "
                           "...) or use OVL_PROGRESS=inline",
                           ovl__g.thread_level);

    ovl__g.comm_msg = ovl__g.comm_stream = ovl__g.comm_frag = ovl__g.comm_delta = MPI_COMM_NULL;
    ovl__g.comm_am = ovl__g.comm_am_bulk = MPI_COMM_NULL;
    if ((rc = MPI_Comm_dup(comm, &ovl__g.comm_msg)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(comm, &ovl__g.comm_stream)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(comm, &ovl__g.comm_frag)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(comm, &ovl__g.comm_delta)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(comm, &ovl__g.comm_am)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(comm, &ovl__g.comm_am_bulk)) != MPI_SUCCESS) {
        rc = ovl__mpi_error(rc, fn, "MPI_Comm_dup");
        goto fail_comms;
    }
    MPI_Comm_set_errhandler(ovl__g.comm_msg, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(ovl__g.comm_stream, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(ovl__g.comm_frag, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(ovl__g.comm_delta, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(ovl__g.comm_am, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(ovl__g.comm_am_bulk, MPI_ERRORS_RETURN);
    ovl__g.errors_on_world = errors_raised_on_world();
    MPI_Comm_rank(comm, &ovl__g.rank);
    MPI_Comm_size(comm, &ovl__g.size);
    int *ub = NULL;
    MPI_Comm_get_attr(ovl__g.comm_msg, MPI_TAG_UB, &ub, &flag);
    ovl__g.mpi_tag_ub = (flag && ub) ? *ub : 32767;
    /* The upper half of the tag space marks delta headers (match.c). */
    ovl__g.tag_ub = ovl__g.mpi_tag_ub / 2;

    /* What every rank must agree on, in one MPI_MAX: whether any rank failed
     * above (its code's magnitude over the complement of its rank, so the
     * maximum names the most negative code and, among the ranks with it,
     * the lowest rank), then fragment size and stream window, each value
     * and its complement (the maximum finds both the largest and the
     * smallest). Fragment size and window must agree: receivers post
     * fragment-sized buffers, and a stream's first receive spans its ring
     * (stream.c). */
    static const char *const agree[2] = { "OVL_FRAGMENT_SIZE", "OVL_STREAM_WINDOW" };
    const unsigned long long here[2] = { c.stream.fragment_size, c.stream.window };
    unsigned long long failed = 0;
    if (local != OVL_SUCCESS)
        failed = ((unsigned long long)(-local) << 32) | (0xffffffffull - (unsigned)ovl__g.rank);
    unsigned long long fs[5] = { failed, here[0], ~here[0], here[1], ~here[1] }, fsr[5];
    rc = MPI_Allreduce(fs, fsr, 5, MPI_UNSIGNED_LONG_LONG, MPI_MAX, ovl__g.comm_msg);
    if (rc != MPI_SUCCESS) {
        rc = ovl__mpi_error(rc, fn, "MPI_Allreduce");
        goto fail_comms;
    }
    if (fsr[0] != 0) {
        /* This rank keeps its own code and detail; the others say which
         * rank failed, with its code. */
        int code = -(int)(fsr[0] >> 32), who = (int)(0xffffffffull - (fsr[0] & 0xffffffffull));
        rc = local != OVL_SUCCESS
                 ? local
                 : ovl__error(code, fn,
                              "rank %d failed (%s; its own error says why), so no rank "
                              "initialised ovl",
                              who, ovl_strerror(code));
        goto fail_comms;
    }
    for (int i = 0; i < 2; i++)
        if (fsr[1 + 2 * i] != ~fsr[2 + 2 * i]) {
            rc = ovl__error(OVL_ERR_CONFIG, fn,
                            "%s differs between ranks (this rank %llu, max %llu): set the same "
                            "value everywhere, or leave it unset on every rank",
                            agree[i], here[i], fsr[1 + 2 * i]);
            goto fail_comms;
        }

    ovl__g.node_of = calloc((size_t)ovl__g.size, sizeof *ovl__g.node_of);
    if (!ovl__g.node_of || ovl__match_init(ovl__g.size) != OVL_SUCCESS) {
        rc = ovl__error(OVL_ERR_NOMEM, fn, "allocating per-rank counters");
        goto fail_counts;
    }
    if ((rc = ovl__doms_init()) != OVL_SUCCESS)
        goto fail_counts;
    if ((rc = find_nodes()) != OVL_SUCCESS)
        goto fail_counts;
    ovl__g.cfg = c;
    ovl__g.serve_auto = serve_auto;
    atomic_store(&ovl__g.st_polls, 0);
    atomic_store(&ovl__g.st_wakeups, 0);
    atomic_store(&ovl__g.st_completions, 0);
    atomic_store(&ovl__g.st_callbacks, 0);
    atomic_store(&ovl__g.st_frag_sent, 0);
    atomic_store(&ovl__g.st_stream_msgs, 0);
    atomic_store(&ovl__g.st_frag_recv, 0);
    atomic_store(&ovl__g.st_switches, 0);
    atomic_store(&ovl__g.st_faults, 0);
    atomic_store(&ovl__g.st_fault_waits, 0);
    atomic_store(&ovl__g.st_edge_steps, 0);
    atomic_store(&ovl__g.st_edge_emulated, 0);
    atomic_store(&ovl__g.st_edge_bounces, 0);
    atomic_store(&ovl__g.st_deltas_sent, 0);
    atomic_store(&ovl__g.st_deltas_recv, 0);
    atomic_store(&ovl__g.st_transfers, 0);
    atomic_store(&ovl__g.st_strips, 0);
    atomic_store(&ovl__g.st_bytes, 0);
    atomic_store(&ovl__g.st_wait_ns, 0);
    for (int i = 0; i < OVL__SPLIT_NREASONS; i++)
        atomic_store(&ovl__g.st_split[i], 0);
    {
        const char *st = getenv("OVL_STATS");
        ovl__g.stats_on = st && *st && strcmp(st, "0") != 0;
    }
    ovl__trace_init();
    if ((rc = ovl__watch_init()) != OVL_SUCCESS)
        goto fail_counts;
    if ((rc = ovl__model_calibrate()) != OVL_SUCCESS)
        goto fail_watch;
    if (ovl__g.cfg.stream.fragment_size == 0) {
        /* From the model; every rank must use the same (receivers post
         * fragment-sized buffers) and a perfdb is read per node. */
        unsigned long long mine = ovl__model_fragment_size(), all = mine;
        if ((rc = MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN,
                                ovl__g.comm_msg)) != MPI_SUCCESS) {
            rc = ovl__mpi_error(rc, fn, "MPI_Allreduce");
            goto fail_watch;
        }
        ovl__g.cfg.stream.fragment_size = (size_t)all;
    }
    if ((rc = ovl__req_table_init()) != OVL_SUCCESS)
        goto fail_watch;
    /* the front ends' work besides their ops in flight, which the engine
     * polls without knowing whose it is */
    /* (in the order ovl_finalize's steps take them: segments are freed
     * before delta sends are ended) */
    if ((rc = ovl__engine_add_source(&ovl__match_source)) != OVL_SUCCESS ||
        (rc = ovl__engine_add_source(&ovl__rma_source)) != OVL_SUCCESS ||
        (rc = ovl__engine_add_source(&ovl__stream_source)) != OVL_SUCCESS ||
        (rc = ovl__engine_add_source(&ovl__delta_source)) != OVL_SUCCESS ||
        (rc = ovl__engine_add_source(&ovl__am_source)) != OVL_SUCCESS) {
        rc = ovl__error(rc, fn, "too many progress sources");
        goto fail_table;
    }
    ovl__plan_init(); /* the front ends' own active-message handlers */
    atomic_store(&ovl__g.initialized, 1);
    if ((rc = ovl__engine_start()) != OVL_SUCCESS) {
        atomic_store(&ovl__g.initialized, 0);
        rc = ovl__error(rc, fn, "cannot start the progress thread");
        goto fail_table;
    }
    if ((rc = ovl__doms_create_env()) != OVL_SUCCESS) {
        ovl__engine_stop();
        atomic_store(&ovl__g.initialized, 0);
        goto fail_table;
    }
    ovl__info("initialised: %d ranks, progress %s, %d CPU(s) this rank's own, fragment %zu B, "
              "window %u; MPI raises a request's error on %s",
              ovl__g.size, c.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline",
              ovl__g.cpus_per_rank, ovl__g.cfg.stream.fragment_size, c.stream.window,
              ovl__g.errors_on_world == OVL__ERRORS_ON_WORLD
                  ? "MPI_COMM_WORLD's handler (swapped around each poll)"
              : ovl__g.errors_on_world == OVL__ERRORS_ON_SELF
                  ? "MPI_COMM_SELF's handler (swapped around each poll)"
              : ovl__g.errors_on_world
                  ? "MPI_COMM_WORLD's or MPI_COMM_SELF's handler (both swapped around each poll)"
                  : "its communicator's");
    return OVL_SUCCESS;

fail_table:
    ovl__req_table_fini();
fail_watch:
    ovl__watch_fini();
fail_counts:
    ovl__trace_fini();
    ovl__doms_fini();
    free(ovl__g.node_of);
    ovl__g.node_of = NULL;
    ovl__match_fini();
fail_comms:
    free_comms();
    return rc;
}

/* ---- statistics ----------------------------------------------------------- */

void ovl__stats_transfer(size_t bytes, unsigned nstrips)
{
    if (!ovl__g.stats_on)
        return;
    atomic_fetch_add_explicit(&ovl__g.st_transfers, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ovl__g.st_strips, nstrips, memory_order_relaxed);
    atomic_fetch_add_explicit(&ovl__g.st_bytes, bytes, memory_order_relaxed);
}

void ovl__stats_split_reason(int reason)
{
    if (reason >= 0 && reason < OVL__SPLIT_NREASONS)
        atomic_fetch_add_explicit(&ovl__g.st_split[reason], 1, memory_order_relaxed);
}

void ovl__stats_wait_ns(uint64_t ns)
{
    atomic_fetch_add_explicit(&ovl__g.st_wait_ns, ns, memory_order_relaxed);
}

/* OVL_STATS=1: what this rank did and why, printed at ovl_finalize (one
 * block per rank, each line prefixed so ranks' output can be told apart). */
static void print_stats(void)
{
    if (!ovl__g.stats_on)
        return;
    char split[512];
    size_t at = 0;
    split[0] = 0;
    for (int i = 0; i < OVL__SPLIT_NREASONS && at < sizeof split; i++) {
        unsigned long long n = atomic_load(&ovl__g.st_split[i]);
        if (n)
            at += (size_t)snprintf(split + at, sizeof split - at, " %s=%llu",
                                   ovl__split_reason_name(i), n);
    }
    int r = ovl__g.rank;
    char buf[2048];
    int n = snprintf(
        buf, sizeof buf,
        "ovl stats [rank %d] model: %s; %.2f ms at init\n"
        "ovl stats [rank %d] model: L %.2f us, o %.2f us, g %.2f us, %.1f MB/s, eager %zu B, "
        "fault %.2f us, M(1) %.2f us, copy %.0f MB/s, split from %zu B\n"
        "ovl stats [rank %d] model within the node: L %.2f us, %.1f MB/s, hidden %.2f (main link "
        "%.2f; -1 not measured): a peer on this node %s\n"
        "ovl stats [rank %d] transfers %llu, strips %llu, bytes %llu, waiting %.3f ms\n"
        "ovl stats [rank %d] faults %llu (waited %llu; neighbour accesses on shared edge pages "
        "%llu, %llu of them done by ovl, ovl's copies from them %llu), delta pieces sent %llu "
        "received %llu, "
        "fragments sent %llu (in %llu messages) received %llu\n"
        "ovl stats [rank %d] split decisions:%s\n"
        "ovl stats [rank %d] serving others' gets and puts while a segment lives: %s\n"
        "ovl stats [rank %d] progress: polls %llu, completions %llu, continuations %llu, "
        "thread wake-ups %llu\n"
        "ovl stats [rank %d] domains %d (on MPIX streams of their own %d), active-message "
        "handlers run %llu\n",
        r, ovl__m.source_detail, ovl__m.init_us / 1e3, r, ovl__m.lat_us, ovl__m.o_us, ovl__m.gap_us,
        ovl__m.bw_Bpus, ovl__m.eager, ovl__m.fault_us,
        ovl__model_protect_us(ovl__watch_resolve(OVL_MONITOR_AUTO), 1),
        1.0 / ovl__m.compute_us_per_B, ovl__model_split_threshold(ovl__model_link_peer()), r,
        ovl__m.node_lat_us, ovl__m.node_bw_Bpus, ovl__m.node_hidden, ovl__m.hidden,
        ovl__g.cfg.mpi.rma_local == OVL_RMA_LOCAL_DIRECT
            ? "takes the plain path (OVL_RMA_LOCAL=direct)"
        : ovl__g.cfg.mpi.rma_local == OVL_RMA_LOCAL_OVERLAP
            ? "is overlapped (OVL_RMA_LOCAL=overlap)"
        : ovl__m.node_overlap ? "is overlapped (the model)"
                              : "takes the plain path (the model)",
        r, (unsigned long long)atomic_load(&ovl__g.st_transfers),
        (unsigned long long)atomic_load(&ovl__g.st_strips),
        (unsigned long long)atomic_load(&ovl__g.st_bytes),
        (double)atomic_load(&ovl__g.st_wait_ns) / 1e6, r,
        (unsigned long long)atomic_load(&ovl__g.st_faults),
        (unsigned long long)atomic_load(&ovl__g.st_fault_waits),
        (unsigned long long)atomic_load(&ovl__g.st_edge_steps),
        (unsigned long long)atomic_load(&ovl__g.st_edge_emulated),
        (unsigned long long)atomic_load(&ovl__g.st_edge_bounces),
        (unsigned long long)atomic_load(&ovl__g.st_deltas_sent),
        (unsigned long long)atomic_load(&ovl__g.st_deltas_recv),
        (unsigned long long)atomic_load(&ovl__g.st_frag_sent),
        (unsigned long long)atomic_load(&ovl__g.st_stream_msgs),
        (unsigned long long)atomic_load(&ovl__g.st_frag_recv), r, at ? split : " none", r,
        ovl__rma_serving_said(), r, (unsigned long long)atomic_load(&ovl__g.st_polls),
        (unsigned long long)atomic_load(&ovl__g.st_completions),
        (unsigned long long)atomic_load(&ovl__g.st_callbacks),
        (unsigned long long)atomic_load(&ovl__g.st_wakeups), r, ovl__doms_count(),
        ovl__doms_on_streams(), (unsigned long long)ovl__am_handled());
    if (n > 0)
        fwrite(buf, 1, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1, stderr);
}

/* Finalize's drain runs over every domain: the conditions below hold
 * for each (entered in turn), and ovl__doms_spin drives them all. */
static int each_domain(int (*ok)(struct ovl__dom *d, int k))
{
    for (int i = 0, k = 0; i < OVL_DOMAINS_MAX && k < ovl__doms_count(); i++) {
        struct ovl__dom *d = ovl__dom_at(i);
        if (!d)
            continue;
        struct ovl__dom *prev = ovl__dom_enter(d);
        int yes = ok(d, k++);
        ovl__dom_leave(prev);
        if (!yes)
            return 0;
    }
    return 1;
}

static int sends_done_in(struct ovl__dom *d, int k)
{
    OVL__UNUSED(d);
    OVL__UNUSED(k);
    return ovl__engine_count(OVL__OP_SEND) == 0 && !ovl__engine_sources_sending();
}

static int sends_done(const void *unused)
{
    OVL__UNUSED(unused);
    return each_domain(sends_done_in);
}

/* [peer][domain k]: messages each peer sent on each domain */
static unsigned long long *expected_from;

static int receives_matched_in(struct ovl__dom *d, int k)
{
    /* Nothing posted could take a missing message: stop waiting for it
     * (the program sent a message nobody receives). */
    if (ovl__engine_count(OVL__OP_RECV) == 0 && !ovl__engine_sources_active())
        return 1;
    int nd = ovl__doms_count();
    for (int p = 0; p < ovl__g.size; p++)
        if (atomic_load(&d->recvd_from[p]) + (unsigned long long)ovl__match_unexpected_from(p) <
            expected_from[(size_t)p * (size_t)nd + (size_t)k])
            return 0;
    return 1;
}

static int receives_matched(const void *unused)
{
    OVL__UNUSED(unused);
    return each_domain(receives_matched_in);
}

static int nothing_in_flight_in(struct ovl__dom *d, int k)
{
    OVL__UNUSED(d);
    OVL__UNUSED(k);
    return ovl__engine_count(-1) == 0 && !ovl__engine_sources_active();
}

static int nothing_in_flight(const void *unused)
{
    OVL__UNUSED(unused);
    return each_domain(nothing_in_flight_in);
}

static unsigned long long *sent_counts;

static int take_sent_in(struct ovl__dom *d, int k)
{
    int nd = ovl__doms_count();
    for (int p = 0; p < ovl__g.size; p++)
        sent_counts[(size_t)p * (size_t)nd + (size_t)k] = atomic_load(&d->sent_to[p]);
    return 1;
}

static int cancel_in(struct ovl__dom *d, int k)
{
    OVL__UNUSED(d);
    OVL__UNUSED(k);
    ovl__engine_cancel_receives();
    ovl__engine_sources_cancel();
    return 1;
}

static int forget_in(struct ovl__dom *d, int k)
{
    OVL__UNUSED(d);
    OVL__UNUSED(k);
    ovl__engine_sources_forget();
    return 1;
}

int ovl_finalize(void)
{
    static const char *fn = "ovl_finalize";
    int rc;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)))
        return rc;
    /* The drain runs on domain 0's thread state; every domain is entered
     * in turn (ovl__doms_spin, each_domain). */
    struct ovl__dom *caller = ovl__dom_enter(ovl__dom0());
    /* 1. What the program left open is ended: segments are freed
     *    (collective, like their creation), delta sends ended. Then
     *    everything this rank sends has left. */
    ovl__plan_free_all(); /* plans read segments: before they are freed */
    ovl__engine_sources_close();
    ovl__doms_spin(sends_done, NULL);
    /* 2. Learn how many messages each peer sent here on each domain;
     *    receive them all. */
    size_t cells = (size_t)ovl__g.size * (size_t)ovl__doms_count();
    sent_counts = malloc(cells * sizeof *sent_counts);
    expected_from = malloc(cells * sizeof *expected_from);
    if (!sent_counts || !expected_from) {
        free(sent_counts);
        free(expected_from);
        sent_counts = expected_from = NULL;
        ovl__dom_leave(caller);
        return ovl__error(OVL_ERR_NOMEM, fn, "allocating drain counters");
    }
    each_domain(take_sent_in);
    /* Not a blocking MPI_Alltoall: a peer may still need this rank's
     * progress (stream fragment receives to re-post) to finish its sends. */
    MPI_Request a2a = MPI_REQUEST_NULL;
    rc = MPI_Ialltoall(sent_counts, ovl__doms_count(), MPI_UNSIGNED_LONG_LONG, expected_from,
                       ovl__doms_count(), MPI_UNSIGNED_LONG_LONG, ovl__g.comm_msg, &a2a);
    if (rc == MPI_SUCCESS)
        rc = ovl__engine_spin_mpi(&a2a);
    free(sent_counts);
    sent_counts = NULL;
    if (rc == MPI_SUCCESS)
        ovl__doms_spin(receives_matched, NULL);
    free(expected_from);
    expected_from = NULL;
    /* 3. Receives still posted can no longer match: cancel them. Their
     *    requests complete with OVL_ERR_CANCELLED and continuations run. */
    each_domain(cancel_in);
    ovl__doms_spin(nothing_in_flight, NULL);

    print_stats();
    /* 4. What is left is dropped: unexpected messages nobody received,
     *    the serving decision (made again at the next ovl_init). */
    each_domain(forget_in);
    ovl__dom_leave(caller);
    ovl__engine_stop();
    ovl__trace_fini();
    atomic_store(&ovl__g.initialized, 0);
    ovl__req_table_fini();
    ovl__watch_fini();
    ovl__stage_drop_all();
    ovl__page_trim();
    ovl__doms_fini();
    free(ovl__g.node_of);
    ovl__g.node_of = NULL;
    ovl__match_fini();
    MPI_Barrier(ovl__g.comm_msg);
    free_comms();
    return rc == MPI_SUCCESS ? OVL_SUCCESS : ovl__mpi_error(rc, fn, "MPI_Ialltoall");
}

int ovl_config_get(ovl_config_t *cfg)
{
    int rc;
    if ((rc = ovl__check_init("ovl_config_get")))
        return rc;
    if (!cfg)
        return ovl__error(OVL_ERR_ARG, "ovl_config_get", "cfg is NULL");
    *cfg = ovl__g.cfg;
    return OVL_SUCCESS;
}

/* The caller's struct may be older (smaller) or newer (larger) than this
 * library's: counters are only ever appended, so the common prefix is the
 * same fields. */
int ovl_stats_get(ovl_stats_t *stats, size_t size)
{
    static const char *fn = "ovl_stats_get";
    int rc;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (!stats)
        return ovl__error(OVL_ERR_ARG, fn, "stats is NULL");
    if (size == 0)
        return ovl__error(OVL_ERR_ARG, fn, "size is 0 (pass sizeof(ovl_stats_t))");
    ovl_stats_t all, *s = &all;
    memset(&all, 0, sizeof all);
    s->polls = atomic_load(&ovl__g.st_polls);
    s->thread_wakeups = atomic_load(&ovl__g.st_wakeups);
    s->completions = atomic_load(&ovl__g.st_completions);
    s->callbacks = atomic_load(&ovl__g.st_callbacks);
    s->fragments_sent = atomic_load(&ovl__g.st_frag_sent);
    s->stream_messages = atomic_load(&ovl__g.st_stream_msgs);
    s->fragments_received = atomic_load(&ovl__g.st_frag_recv);
    s->coroutine_switches = atomic_load(&ovl__g.st_switches);
    s->faults = atomic_load(&ovl__g.st_faults);
    s->fault_waits = atomic_load(&ovl__g.st_fault_waits);
    s->edge_steps = atomic_load(&ovl__g.st_edge_steps);
    s->edge_bounces = atomic_load(&ovl__g.st_edge_bounces);
    s->edge_emulated = atomic_load(&ovl__g.st_edge_emulated);
    s->deltas_sent = atomic_load(&ovl__g.st_deltas_sent);
    s->deltas_received = atomic_load(&ovl__g.st_deltas_recv);
    s->domains = (uint64_t)ovl__doms_count();
    s->domains_on_streams = (uint64_t)ovl__doms_on_streams();
    s->am_handled = ovl__am_handled();
    ovl__rma_stats(s);
    size_t n = size < sizeof all ? size : sizeof all;
    memcpy(stats, &all, n);
    if (size > n)
        memset((char *)stats + n, 0, size - n);
    return OVL_SUCCESS;
}
