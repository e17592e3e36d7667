/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: init.c: the global state and statistics.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_GLOBAL_H
#define OVL_INTERNAL_GLOBAL_H

/* ---- init.c: global state ---------------------------------------------- */

/* ovl__g.errors_on_world: the communicators whose handlers MPI raises a
 * completed request's error on */
#define OVL__ERRORS_ON_WORLD 1
#define OVL__ERRORS_ON_SELF  2

struct ovl__global {
    atomic_int initialized;
    MPI_Comm comm_msg;     /* ovl_isend / ovl_irecv */
    MPI_Comm comm_stream;  /* first fragment of a stream, user tag */
    MPI_Comm comm_frag;    /* later fragments, tag = stream id */
    MPI_Comm comm_delta;   /* delta pieces, tag = delta id */
    MPI_Comm comm_am;      /* active messages: requests and replies (am.c) */
    MPI_Comm comm_am_bulk; /* active messages: large payloads, tag from the sequence */
    int mpi_tag_ub;        /* MPI's; ovl's tag_ub is half of it */
    int rank, size;
    int tag_ub;
    int thread_level;
    /* MPI raises a completed request's error on MPI_COMM_WORLD's or
     * MPI_COMM_SELF's handler, not its communicator's (MPICH 4.0: WORLD's):
     * the engine then makes that one return around its MPI_Testsome
     * (init.c probes which) */
    int errors_on_world; /* OVL__ERRORS_ON_WORLD | OVL__ERRORS_ON_SELF, or 0 */
    ovl_config_t cfg;
    int serve_auto; /* OVL_SERVE_US left 0: serve only where the probe says so */
    /* the per-peer counts (messages sent, received; delta headers sent)
     * are each domain's (struct ovl__dom) */
    /* node of each rank: the lowest rank on it (MPI_COMM_TYPE_SHARED) */
    int *node_of;
    /* CPUs this rank may count as its own (ovl__sched_cpus_per_rank) */
    int cpus_per_rank;
    /* more ranks on this node than CPUs its ranks may run on, together */
    int node_oversubscribed;
    /* every rank of the communicator runs on this node */
    int one_node;
    /* set by every ovl call (ovl__check_init), cleared by the progress
     * thread: whether the program called ovl since (ovl__model_all_cpu_bound) */
    atomic_int called;
    /* statistics */
    atomic_ullong st_polls, st_wakeups, st_completions, st_callbacks, st_frag_sent, st_frag_recv,
        st_switches, st_faults, st_fault_waits, st_deltas_sent, st_deltas_recv, st_stream_msgs,
        st_edge_steps, st_edge_emulated, st_edge_bounces;
    /* OVL_STATS: transfers of every front end, their strips, bytes, time
     * spent waiting, and the split decisions by reason */
    atomic_ullong st_transfers, st_strips, st_bytes, st_wait_ns;
    atomic_ullong st_split[OVL__SPLIT_NREASONS];
    /* OVL_STATS set at ovl_init: transfers are counted and waits timed
     * (a message's two clock reads and three counters otherwise saved) */
    int stats_on;
};
extern struct ovl__global ovl__g;

/* Common argument checks; return 0 or an ovl error (recorded). */
int ovl__check_init(const char *fn);
int ovl__check_peer(const char *fn, int rank, int any_ok);
int ovl__check_tag(const char *fn, int tag, int any_ok);
int ovl__check_not_in_callback(const char *fn);
/* @peer runs on this rank's node (this rank included). */
int ovl__peer_on_node(int peer);

/* ---- statistics (init.c), for every front end ----------------------------- */

/* One transfer of @bytes moved in @nstrips strips (pieces, fragments). */
void ovl__stats_transfer(size_t bytes, unsigned nstrips);
/* A split decision was taken, for the reason (enum ovl__split_reason). */
void ovl__stats_split_reason(int reason);
/* Time spent blocked waiting for data or completion. */
void ovl__stats_wait_ns(uint64_t ns);
/* CLOCK_MONOTONIC in nanoseconds (async-signal-safe). */
uint64_t ovl__now_ns(void);

#endif /* OVL_INTERNAL_GLOBAL_H */
