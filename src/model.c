/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The performance model: what ovl knows about the link and the machine, and
 * the choices it derives from them. Inputs:
 *   - latency and bandwidth, measured at ovl_init (measure.c) by a short
 *     ping-pong between rank 0 and one peer (measuring_peer) on ovl's delta
 *     communicator, when any rank leaves OVL_DELTA_SIZE automatic
 *     (OVL_CALIBRATE=0 skips it and keeps the defaults below);
 *   - the cost of one access fault, measured on this process;
 *   - the MPI library's eager/rendezvous switch: OVL_EAGER_LIMIT, else the
 *     library's own control variable (MPI_T), else UCX_RNDV_THRESH, else
 *     64 KiB. The delta paper found a delta at or above the eager limit
 *     doubles its latency (rendezvous handshake), so the model charges the
 *     handshake to such sizes and in practice stays below the limit.
 *
 * Where the figures come from, first that applies (ovl__m.source):
 *   1. the performance database written by tools/ovl-calibrate (perfdb.c;
 *      OVL_PERFDB, else $XDG_CACHE_HOME/ovl/perfdb or ~/.cache/ovl/perfdb),
 *      if every rank can read it and it was measured with this MPI;
 *   2. the quick estimate below, at ovl_init;
 *   3. the defaults in ovl__m's initialiser.
 *
 * Split decisions (HUNT section 5.1): a transfer of S bytes followed by
 * computation on it costs o + RTT + G*S + C(S). Cut into strips issued
 * together, the first strip must hide the setup (message overheads,
 * protecting the destination, half a fault):
 *     o + M(S) + I/2 + M(N1) < RTT + G*N1                       (1)
 * and the transfer plus computation of a strip must cover the next one:
 *     RTT + G*N1 + I/2 + C(N1) > RTT + G*(S-N1) + I + M(S-N1)    (2)
 * C(n) is bounded below by the memory-to-cache rate (the worst case: the
 * program does nothing but read the data). (1) gives the smallest first
 * strip, (2) whether a second one is covered; among equal and
 * geometrically growing strip sizes that satisfy them, the model simulates
 * the pipeline (strip k arrives at setup + RTT + G * bytes so far, the
 * program faults on it if it is not there yet) and keeps the fastest,
 * splitting only if that beats the plain transfer.
 *
 * Delta size: a message of N bytes cut into n = N/d pieces flows through
 * three stages -- produce and post (d/P + fault + o), the wire (d/B; for
 * the part of the message within the link's burst, burst_B, the one-way
 * time measured at init), take in and consume (d/P + fault + o) --
 * simulated piece by piece (pipe_us): about the three stage times of the
 * first piece, plus the latency once, plus the slowest stage per further
 * piece, the wire's pace changing where the burst ends. The per-piece
 * costs (o, the fault or annotation, the protection calls) are what make
 * small pieces lose; the fill (three stages of one piece) is what makes
 * large ones lose. A
 * message in one piece is sent unwatched at send_end (no protection, no
 * sender fault). Under fault triggering each piece's last page reaches
 * the receiver with the next piece, which the fill is charged for. The
 * model evaluates every page multiple up to a cap below the eager limit
 * and takes the minimum.
 * P, the production rate, is that of the last delta sends of the same size,
 * peer and triggering (the median of the last five), else of the last of any, from begin to
 * ovl_delta_send_end (the caller, delta_send.c's ovl__delta_rate_for, passes it; 0 =
 * unknown, taken equal to B); the size is chosen once per send.
 */
#include "ovl_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defaults: a 1 Gbit/s Ethernet link and a typical x86 Linux node. */
#define MODEL_DEFAULTS                                                                  \
    {                                                                                   \
        .lat_us = 50.0, .bw_Bpus = 117.0, .fault_us = 5.0, .eager = 65536, .o_us = 5.0, \
        .gap_us = 5.0, .rtt_us = 100.0, .fault_mprotect_us = 5.0, .fault_uffd_us = 5.0, \
        .prot_base_us = 1.0, .prot_page_us = 0.05, .uffd_wp_base_us = 1.0,              \
        .uffd_wp_page_us = 0.05, .compute_us_per_B = 1.0 / 5000.0, .rma_lat_us = 100.0, \
        .rma_bw_Bpus = 117.0, .hidden = -1, .node_lat_us = -1, .node_hidden = -1,       \
        .source = OVL__MODEL_DEFAULTS, .source_detail = "built-in defaults"             \
    }
static const struct ovl__model model_defaults = MODEL_DEFAULTS;
struct ovl__model ovl__m = MODEL_DEFAULTS;

/* Largest piece a delta send uses; receivers size their buffers with it. */
#define MAX_DELTA (256u << 10)
/* delta sizes predicted within this fraction of the best count as a tie */
#define TIE 0.03

static size_t cvar_size(const char *name)
{
    int provided, n = 0, level = MPI_THREAD_SINGLE;
    size_t v = 0;
    /* At the level MPI runs at: Open MPI 4.1 takes MPI_T's level for its
     * own, and after MPI_T_init_thread(MPI_THREAD_SINGLE) MPI_Query_thread
     * answered MPI_THREAD_SINGLE in a program started with
     * MPI_THREAD_MULTIPLE (a second ovl_init then refused the progress
     * thread). */
    MPI_Query_thread(&level);
    if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS)
        return 0;
    if (MPI_T_cvar_get_num(&n) == MPI_SUCCESS) {
        for (int i = 0; i < n; i++) {
            char nm[128], desc[8];
            int nl = sizeof nm, dl = sizeof desc, verb, bind, scope;
            MPI_Datatype dt;
            MPI_T_enum en;
            if (MPI_T_cvar_get_info(i, nm, &nl, &verb, &dt, &en, desc, &dl, &bind, &scope) !=
                    MPI_SUCCESS ||
                strcmp(nm, name) != 0 || bind != MPI_T_BIND_NO_OBJECT)
                continue;
            MPI_T_cvar_handle h;
            int cnt;
            if (MPI_T_cvar_handle_alloc(i, NULL, &h, &cnt) != MPI_SUCCESS)
                break;
            if (dt == MPI_INT) {
                int x = 0;
                if (MPI_T_cvar_read(h, &x) == MPI_SUCCESS && x > 0)
                    v = (size_t)x;
            } else if (dt == MPI_UNSIGNED_LONG || dt == MPI_UNSIGNED_LONG_LONG ||
                       dt == MPI_LONG_LONG) {
                unsigned long long x = 0;
                if (MPI_T_cvar_read(h, &x) == MPI_SUCCESS && x > 0)
                    v = (size_t)x;
            }
            MPI_T_cvar_handle_free(&h);
            break;
        }
    }
    MPI_T_finalize();
    return v;
}

enum { EAGER_GUESS = 65536 };

/* The eager limit as named by OVL_EAGER_LIMIT, MPI_T or UCX_RNDV_THRESH;
 * else 64 KiB, and *@guessed = 1. */
static size_t detect_eager(int *guessed)
{
    *guessed = 0;
    if (ovl__g.cfg.mpi.eager_limit)
        return ovl__g.cfg.mpi.eager_limit;
    static const char *cvars[] = { "MPIR_CVAR_CH4_OFI_EAGER_MAX_MSG_SIZE",
                                   "MPIR_CVAR_CH3_EAGER_MAX_MSG_SIZE" };
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    int ucx = strstr(ver, "ucx") != NULL || strstr(ver, "UCX") != NULL;
    /* MPICH's control variables, not asked of Open MPI: it has no such
     * names, and each MPI_T session there took 0.2 s (ovl_init 419 ms
     * against 5 on Debian MPICH) */
    if (!ucx && !strstr(ver, "Open MPI")) {
        for (size_t i = 0; i < sizeof cvars / sizeof cvars[0]; i++) {
            size_t v = cvar_size(cvars[i]);
            if (v)
                return v;
        }
    }
    const char *r = getenv("UCX_RNDV_THRESH");
    if (r && *r >= '0' && *r <= '9') {
        char *end;
        unsigned long long v = strtoull(r, &end, 10);
        if (*end == 'k' || *end == 'K')
            v <<= 10;
        else if (*end == 'm' || *end == 'M')
            v <<= 20;
        if (v)
            return (size_t)v;
    }
    *guessed = 1;
    return EAGER_GUESS;
}

size_t ovl__model_detect_eager(void)
{
    int guessed;
    return detect_eager(&guessed);
}

/* The first rank on another node than rank @of (ovl__g.node_of), or -1. */
static int off_node_peer(int of)
{
    for (int r = 0; r < ovl__g.size; r++)
        if (ovl__g.node_of[r] != ovl__g.node_of[of])
            return r;
    return -1;
}

/* The rank that measures the network with rank 0: the first rank on
 * another node (MPI_COMM_TYPE_SHARED), since the links between nodes are
 * what pieces and strips are sized for; rank 1 if every rank shares rank
 * 0's node; -1 alone. */
static int measuring_peer(void)
{
    if (ovl__g.size < 2)
        return -1;
    int r = off_node_peer(0);
    return r >= 0 ? r : 1;
}

int ovl__model_link_peer(void)
{
    int me = ovl__g.rank, r = off_node_peer(me);
    if (r >= 0)
        return r;
    if ((me ^ 1) < ovl__g.size)
        return me ^ 1;
    return me > 0 ? me - 1 : me;
}

/* Whether another rank on this node is reached directly (OVL_RMA_LOCAL). */
static int node_direct(void)
{
    switch (ovl__g.cfg.mpi.rma_local) {
    case OVL_RMA_LOCAL_DIRECT:
        return 1;
    case OVL_RMA_LOCAL_OVERLAP:
        return 0;
    default:
        return !ovl__m.node_overlap;
    }
}

int ovl__model_direct(int peer)
{
    if (!ovl__peer_on_node(peer))
        return 0;
    /* auto: always for the caller itself; overlap means overlap for it too */
    if (peer == ovl__g.rank && ovl__g.cfg.mpi.rma_local == OVL_RMA_LOCAL_AUTO)
        return 1;
    return node_direct();
}

int ovl__model_cpu_bound(int peer)
{
    return ovl__g.cpus_per_rank < 2 && ovl__model_direct(peer);
}

int ovl__model_all_cpu_bound(void)
{
    return ovl__g.one_node && ovl__g.cpus_per_rank < 2 && node_direct();
}

/* The quick estimate at ovl_init: the link between rank 0 and
 * measuring_peer() (ovl__measure_link: 1 byte, page multiples below the
 * eager limit for a protocol switch, 128 KiB and 256 KiB for the
 * bandwidth), the fault and protection cost of this process, and the copy
 * rate. Budget: a few milliseconds on shared memory, about 35 ms on a
 * 1 Gbit/s link (docs/ENV.md, OVL_CALIBRATE). */
static int quick_estimate(int eager_search, size_t *eager_found)
{
    struct ovl__link_figures lf;
    int rc = ovl__measure_link(ovl__g.comm_delta, measuring_peer(), &lf);
    if (rc != OVL_SUCCESS)
        return rc;
    /* An eager limit nothing names is a guess (64 KiB): UCX over TCP
     * switched at 19 KiB on the emulated cluster, and delta pieces merged
     * up to the guess went by rendezvous, each waiting for the receiver's
     * next ovl call (PRK Transpose by the porting guide's recipe, inline:
     * 1.04x plain MPI's time, 0.91-0.93x with the limit set). So a send of
     * the guess is tried against a late receiver (10 round trips + 0.5 ms,
     * at most 5 ms), and if it waits, the smallest size that does: about
     * 0.7 ms a size, 8 sizes at most. */
    *eager_found = 0;
    if (eager_search && lf.lat_us > 0) {
        double late = 20 * lf.lat_us + 500;
        *eager_found = ovl__measure_eager_below(ovl__g.comm_delta, measuring_peer(), EAGER_GUESS,
                                                late > 5000 ? 5000 : late);
    }
    _Static_assert(sizeof ovl__m.oneway_us == sizeof lf.oneway_us, "one table of switch sizes");
    ovl__m.piece_switch = lf.piece_switch;
    memcpy(ovl__m.oneway_us, lf.oneway_us, sizeof ovl__m.oneway_us);
    ovl__m.burst_B = (size_t)lf.burst_B / ovl__watch_page() * ovl__watch_page();
    if (lf.lat_us > 0 && lf.G_us_per_B > 0) {
        ovl__m.lat_us = lf.lat_us;
        ovl__m.bw_Bpus = 1.0 / lf.G_us_per_B;
        ovl__m.rtt_us = 2 * lf.lat_us;
        /* No separate measurement of o and g here: take the one-way time as
         * the per-message cost (pessimistic) and half of it as the gap. */
        ovl__m.o_us = lf.lat_us;
        ovl__m.gap_us = lf.lat_us / 2;
        /* a get is a round trip at the link's rate (the loop-nest planner's
         * formulas); ovl-calibrate measures MPI_Rget itself */
        ovl__m.rma_lat_us = ovl__m.rtt_us;
        ovl__m.rma_bw_Bpus = ovl__m.bw_Bpus;
        ovl__m.calibrated = 1;
    }
    double f = ovl__watch_fault_cost_us(OVL_MONITOR_MPROTECT);
    if (f > 0)
        ovl__m.fault_mprotect_us = f;
    f = ovl__watch_fault_cost_us(OVL_MONITOR_UFFD);
    ovl__m.fault_uffd_us = f > 0 ? f : -1;
    double p1 = ovl__watch_protect_cost_us(OVL_MONITOR_MPROTECT, 1, 3);
    double p64 = ovl__watch_protect_cost_us(OVL_MONITOR_MPROTECT, 64, 3);
    if (p1 > 0 && p64 > p1) {
        ovl__m.prot_page_us = (p64 - p1) / 63;
        ovl__m.prot_base_us = p1 - ovl__m.prot_page_us;
    }
    p1 = ovl__watch_protect_cost_us(OVL_MONITOR_UFFD, 1, 3);
    p64 = ovl__watch_protect_cost_us(OVL_MONITOR_UFFD, 64, 3);
    if (p1 > 0 && p64 > p1) {
        ovl__m.uffd_wp_page_us = (p64 - p1) / 63;
        ovl__m.uffd_wp_base_us = p1 - ovl__m.uffd_wp_page_us;
    } else if (p1 < 0) {
        ovl__m.uffd_wp_base_us = ovl__m.uffd_wp_page_us = -1; /* unavailable */
    }
    /* from beyond L2 into it, in 256 KiB chunks: about 2 ms */
    double c = ovl__measure_copy_rate(0, OVL__COPY_CHUNK);
    ovl__m.compute_us_per_B = c > 0 ? c : model_defaults.compute_us_per_B;
    return OVL_SUCCESS;
}

/* Collective (inside ovl_init, after the database or the estimate): the
 * figures of the link to a peer on this rank's node, kept apart from the
 * main link's (the database's node_* keys; on one node the main link is
 * the node's), and from them whether overlap can pay with such a peer:
 * where a byte's wire time that a computing rank does not pay (hidden /
 * bandwidth) exceeds the copy a delta receive or a guarded get adds for it
 * (compute_us_per_B). The hidden share comes only from ovl-calibrate:
 * measured at ovl_init, a rank descheduled by a busy node's other work
 * made shared memory look hidden (docs/perf-log/2026-11-29.md). Not
 * measured counts as none: such peers take the plain path. Every rank
 * takes the same decision. */
int ovl__model_overlap_pays(double hidden, double G_us_per_B, double copy_us_per_B)
{
    return hidden > 0 && G_us_per_B > 0 && hidden * G_us_per_B > copy_us_per_B;
}

static int node_link(void)
{
    if (off_node_peer(0) < 0) { /* one node: the main link is the node's */
        if (ovl__m.node_bw_Bpus <= 0 && ovl__m.calibrated) {
            ovl__m.node_lat_us = ovl__m.lat_us;
            ovl__m.node_bw_Bpus = ovl__m.bw_Bpus;
        }
        if (ovl__m.node_hidden < 0)
            ovl__m.node_hidden = ovl__m.hidden;
    }
    int pays = !ovl__g.node_oversubscribed && ovl__m.node_bw_Bpus > 0 &&
               ovl__model_overlap_pays(ovl__m.node_hidden, 1.0 / ovl__m.node_bw_Bpus,
                                       ovl__m.compute_us_per_B);
    if (MPI_Allreduce(&pays, &ovl__m.node_overlap, 1, MPI_INT, MPI_MIN, ovl__g.comm_delta) !=
        MPI_SUCCESS)
        return ovl__error(OVL_ERR_MPI, "ovl_init", "calibration: MPI_Allreduce failed");
    return OVL_SUCCESS;
}

/* Bumped whenever the model is set up again (its maps may change):
 * ovl__model_map_us's per-thread memo is keyed by it. */
static atomic_uint map_gen = 1;

int ovl__model_calibrate(void)
{
    double t0 = ovl__now_us();
    atomic_fetch_add(&map_gen, 1);
    ovl__m = model_defaults;
    int eager_guessed;
    const size_t own_eager = ovl__m.eager = detect_eager(&eager_guessed);
    int rc = OVL_SUCCESS;

    /* 1. The performance database. Every rank must agree on using it (the
     *    quick estimate is collective). */
    const char *env = getenv("OVL_PERFDB");
    int explicit_db = env && *env;
    int off = explicit_db && (!strcmp(env, "off") || !strcmp(env, "none") || !strcmp(env, "0"));
    char path[256] = "", why[300] = "";
    int loaded = 0, lrc = -1;
    struct ovl__model db = ovl__m;
    if (!off) {
        if (explicit_db)
            snprintf(path, sizeof path, "%s", env);
        else if (!ovl__perfdb_default_path(path, sizeof path))
            path[0] = 0;
        if (path[0]) {
            lrc = ovl__perfdb_load(path, &db, why, sizeof why);
            loaded = lrc == 0;
        }
    }
    /* The model sizes pieces and strips for the links between nodes when
     * the job spans nodes (peers on the node take the plain path), else for
     * the node's own: a database measured on the other kind describes
     * links this job does not use. */
    const int spans = measuring_peer() >= 0 && off_node_peer(0) >= 0;
    int mismatch = 0;
    if (loaded && db.db_link && db.db_link != (spans ? 2 : 1)) {
        snprintf(why, sizeof why, "%.200s was measured %s, and this job's model needs %s figures",
                 path, db.db_link == 1 ? "within a node" : "between nodes",
                 spans ? "inter-node" : "intra-node");
        loaded = 0;
        mismatch = 1;
    }
    int all = 0;
    if (MPI_Allreduce(&loaded, &all, 1, MPI_INT, MPI_MIN, ovl__g.comm_delta) != MPI_SUCCESS)
        return ovl__error(OVL_ERR_MPI, "ovl_init", "calibration: MPI_Allreduce failed");
    if (all) {
        size_t eager = ovl__g.cfg.mpi.eager_limit;
        ovl__m = db;
        if (eager)
            ovl__m.eager = eager; /* OVL_EAGER_LIMIT wins */
        ovl__m.calibrated = 1;
        ovl__m.source = OVL__MODEL_PERFDB;
        snprintf(ovl__m.source_detail, sizeof ovl__m.source_detail, "perfdb %s", why);
    } else {
        const char *fallback;
        /* 2. The quick estimate, unless nobody needs it. */
        const char *c = getenv("OVL_CALIBRATE");
        int want = !(c && !strcmp(c, "0"));
        int any = 0;
        if (MPI_Allreduce(&want, &any, 1, MPI_INT, MPI_MAX, ovl__g.comm_delta) != MPI_SUCCESS)
            return ovl__error(OVL_ERR_MPI, "ovl_init", "calibration: MPI_Allreduce failed");
        if (any) {
            /* The estimate's pair measurements try sizes below the eager
             * limit and search for it where it was guessed: every rank must
             * try the same, even where a limit is named on some ranks only
             * (a wrapper per node, an MPMD launch), or a pair would wait
             * for a message never sent. So the sizes come from the smallest
             * limit, the search runs if any rank guessed, and each rank
             * keeps its own named limit. */
            long agree[2] = { eager_guessed, -(long)own_eager };
            if (MPI_Allreduce(MPI_IN_PLACE, agree, 2, MPI_LONG, MPI_MAX, ovl__g.comm_delta) !=
                MPI_SUCCESS)
                return ovl__error(OVL_ERR_MPI, "ovl_init", "calibration: MPI_Allreduce failed");
            size_t found = 0;
            ovl__m.eager = (size_t)-agree[1];
            rc = quick_estimate((int)agree[0], &found);
            ovl__m.eager = eager_guessed && found ? found : own_eager;
            if (rc != OVL_SUCCESS)
                return rc;
            ovl__m.source = ovl__m.calibrated ? OVL__MODEL_INIT : OVL__MODEL_DEFAULTS;
        }
        fallback = ovl__m.source == OVL__MODEL_INIT ? "estimate at ovl_init" : "built-in defaults";
        if (off)
            snprintf(why, sizeof why, "OVL_PERFDB=%s", env);
        else if (!path[0])
            snprintf(why, sizeof why, "no perfdb path (HOME unset)");
        else if (loaded)
            snprintf(why, sizeof why, "%s: not usable on every rank", path);
        int said = 0;
        if (MPI_Allreduce(&mismatch, &said, 1, MPI_INT, MPI_MAX, ovl__g.comm_delta) != MPI_SUCCESS)
            return ovl__error(OVL_ERR_MPI, "ovl_init", "calibration: MPI_Allreduce failed");
        snprintf(ovl__m.source_detail, sizeof ovl__m.source_detail, "%s (%.290s)", fallback, why);
        /* Say so only if the user asked for a database: a missing default
         * database is the normal case before ovl-calibrate ran. */
        if ((explicit_db || said) && !off && ovl__g.rank == 0 && ovl__g.cfg.report.verbose >= 1)
            fprintf(stderr, "ovl: performance database ignored: %s; using the %s\n", why, fallback);
    }
    if ((rc = node_link()) != OVL_SUCCESS)
        return rc;
    ovl__m.poll_sleep_us = ovl__g.cfg.progress.mode == OVL_PROGRESS_THREAD
                               ? ovl__measure_sleep_us(ovl__sched_poll_us())
                               : 0;
    ovl__m.fault_us = ovl__m.fault_mprotect_us;
    if (ovl__watch_resolve(OVL_MONITOR_AUTO) == OVL_MONITOR_UFFD && ovl__m.fault_uffd_us > 0)
        ovl__m.fault_us = ovl__m.fault_uffd_us;
    ovl__m.init_us = ovl__now_us() - t0;
    ovl__info("model: latency %.1f us, bandwidth %.1f MB/s, eager limit %zu B, protocol switch "
              "%zu B, burst %zu B, fault %.1f us, poll sleep %.0f us; %s; %.0f us at init",
              ovl__m.lat_us, ovl__m.bw_Bpus, ovl__m.eager, ovl__m.piece_switch, ovl__m.burst_B,
              ovl__m.fault_us, ovl__m.poll_sleep_us, ovl__m.source_detail, ovl__m.init_us);
    ovl__info("model: within a node: latency %.1f us, bandwidth %.1f MB/s, hidden %.2f (main "
              "link %.2f; < 0: not measured): overlap with a peer on this node %s",
              ovl__m.node_lat_us, ovl__m.node_bw_Bpus, ovl__m.node_hidden, ovl__m.hidden,
              ovl__m.node_overlap ? "can pay" : "cannot pay, plain path");
    (void)lrc;
    return OVL_SUCCESS;
}

/* The grid values of the map's axis @axis (0: run_B, 1: runs) nearest at
 * or below and at or above @x; 0 when @x is outside them. */
/* The grid values around @x on both axes (run_B, runs): *lo the largest
 * at most x, *hi the smallest at least x; 0 if x is outside either. */
static int map_bracket(double run_B, double runs, double lo[2], double hi[2])
{
    lo[0] = lo[1] = hi[0] = hi[1] = -1;
    const double x[2] = { run_B, runs };
    for (int i = 0; i < ovl__m.nmap; i++) {
        const double v[2] = { ovl__m.map[i].run_B, ovl__m.map[i].runs };
        for (int a = 0; a < 2; a++) {
            if (v[a] <= x[a] && (lo[a] < 0 || v[a] > lo[a]))
                lo[a] = v[a];
            if (v[a] >= x[a] && (hi[a] < 0 || v[a] < hi[a]))
                hi[a] = v[a];
        }
    }
    return lo[0] > 0 && hi[0] > 0 && lo[1] > 0 && hi[1] > 0;
}

/* The four corners' times under @proto, in one pass: [s0 n0, s1 n0, s0 n1,
 * s1 n1]; -1 where a cell is missing. */
static void map_corners(int proto, const double lo[2], const double hi[2], double t[4])
{
    t[0] = t[1] = t[2] = t[3] = -1;
    for (int i = 0; i < ovl__m.nmap; i++) {
        const struct ovl__map_cell *c = &ovl__m.map[i];
        const int s = c->run_B == lo[0] ? 0 : c->run_B == hi[0] ? 1 : -1;
        const int n = c->runs == lo[1] ? 0 : c->runs == hi[1] ? 2 : -1;
        if (s < 0 || n < 0)
            continue;
        t[s + n] = c->us[proto - 1];
        if (lo[0] == hi[0]) /* one column: both sides */
            t[1 - s + n] = t[s + n];
        if (lo[1] == hi[1])
            t[s + 2 - n] = t[s + n];
        if (lo[0] == hi[0] && lo[1] == hi[1])
            t[3 - s - n] = t[s + n];
    }
}

static double map_us(int proto, double run_B, double runs);

/* A commit asks for the same few strips many times (each protocol, strip
 * sizes, the pipeline): the last answers are kept per thread. */
#define MAP_MEMO 32
double ovl__model_map_us(int proto, double run_B, double runs)
{
    static _Thread_local struct {
        unsigned gen;
        int proto;
        double run_B, runs, us;
    } memo[MAP_MEMO];
    if (ovl__m.nmap == 0)
        return -1; /* no map */
    if (!(run_B > 0 && runs > 0 && run_B < 1e18 && runs < 1e18))
        return map_us(proto, run_B, runs);
    const unsigned gen = atomic_load_explicit(&map_gen, memory_order_relaxed);
    const unsigned h =
        (unsigned)(((uint64_t)proto * 31u + (uint64_t)run_B * 131u + (uint64_t)runs * 17u) %
                   MAP_MEMO);
    if (memo[h].gen == gen && memo[h].proto == proto && memo[h].run_B == run_B &&
        memo[h].runs == runs)
        return memo[h].us;
    const double us = map_us(proto, run_B, runs);
    memo[h].gen = gen;
    memo[h].proto = proto;
    memo[h].run_B = run_B;
    memo[h].runs = runs;
    memo[h].us = us;
    return us;
}

static double map_us(int proto, double run_B, double runs)
{
    double lo[2], hi[2], t[4];
    if (proto < 1 || proto > OVL__MAP_NPROTO || ovl__m.nmap == 0 || run_B <= 0 || runs <= 0 ||
        !map_bracket(run_B, runs, lo, hi))
        return -1;
    map_corners(proto, lo, hi, t);
    for (int i = 0; i < 4; i++)
        if (!(t[i] > 0))
            return -1; /* a corner not measured: outside the grid */
    const double fs = hi[0] > lo[0] ? log(run_B / lo[0]) / log(hi[0] / lo[0]) : 0;
    const double fn = hi[1] > lo[1] ? log(runs / lo[1]) / log(hi[1] / lo[1]) : 0;
    if (fs == 0 && fn == 0)
        return t[0]; /* on a cell */
    const double l0 = log(t[0]), l2 = log(t[2]);
    const double a = l0 + fs * (log(t[1]) - l0);
    const double b = fn > 0 ? l2 + fs * (log(t[3]) - l2) : a;
    return exp(a + fn * (b - a));
}

double ovl__model_flow_Bpus(int flows)
{
    if (flows < 1)
        flows = 1;
    int lo = 0, hi = 0; /* measured counts around @flows */
    for (int f = 1; f <= OVL__LOAD_MAX; f++) {
        if (!(ovl__m.loaded_Bpus[f] > 0))
            continue;
        if (f <= flows)
            lo = f;
        if (f >= flows && !hi)
            hi = f;
    }
    if (!lo && !hi)
        return -1;
    if (lo == flows)
        return ovl__m.loaded_Bpus[lo];
    if (!hi) /* beyond the table: the link's total at lo shared by more */
        return ovl__m.loaded_Bpus[lo] * lo / flows;
    if (!lo)
        return ovl__m.loaded_Bpus[hi];
    double a = ovl__m.loaded_Bpus[lo], b = ovl__m.loaded_Bpus[hi];
    return a + (b - a) * (double)(flows - lo) / (double)(hi - lo);
}

double ovl__model_protect_us(ovl_monitor_t mon, size_t npages)
{
    if (mon == OVL_MONITOR_EXPLICIT)
        return 0;
    if (mon == OVL_MONITOR_UFFD && ovl__m.uffd_wp_base_us >= 0 && ovl__m.uffd_wp_page_us >= 0)
        return ovl__m.uffd_wp_base_us + (double)npages * ovl__m.uffd_wp_page_us;
    return ovl__m.prot_base_us + (double)npages * ovl__m.prot_page_us;
}

/* ---- split decisions (HUNT 5.1) -------------------------------------------- */

const char *ovl__split_reason_name(int reason)
{
    static const char *names[OVL__SPLIT_NREASONS] = {
        [OVL__SPLIT_YES] = "split",
        [OVL__SPLIT_SMALL] = "too-small",
        [OVL__SPLIT_NO_OVERLAP] = "not-covered",
        [OVL__SPLIT_NO_GAIN] = "no-gain",
        [OVL__SPLIT_LOCAL] = "local",
        [OVL__SPLIT_TRAIN] = "train",
        [OVL__SPLIT_NONBLOCKING] = "nonblocking",
        [OVL__SPLIT_HINT] = "hint",
    };
    return reason >= 0 && reason < OVL__SPLIT_NREASONS ? names[reason] : "?";
}

#define MAX_STRIPS 64

static size_t pages_of(size_t bytes, size_t ps)
{
    return (bytes + ps - 1) / ps;
}

static size_t round_page(double bytes, size_t ps)
{
    if (bytes < (double)ps)
        return ps;
    if (bytes > 1e18)
        return SIZE_MAX / 2;
    return ((size_t)bytes + ps - 1) / ps * ps;
}

size_t ovl__model_strip_size(const struct ovl__split *sp, size_t bytes, int k)
{
    if (!sp->should_split || sp->nstrips <= 1)
        return k == 0 ? bytes : 0;
    size_t ps = ovl__watch_page(), off = 0, s = 0;
    for (int i = 0; i <= k && off < bytes; i++) {
        double want = (double)sp->first;
        for (int j = 0; j < i; j++)
            want *= sp->growth;
        s = i == sp->nstrips - 1 ? bytes - off : round_page(want, ps);
        if (s > bytes - off)
            s = bytes - off;
        if (i == k)
            return s;
        off += s;
    }
    return 0;
}

/* Number of strips for (first, growth) over @bytes. */
static int count_strips(size_t bytes, size_t first, double growth, size_t ps)
{
    size_t off = 0;
    double want = (double)first;
    int n = 0;
    while (off < bytes) {
        size_t s = round_page(want, ps);
        off += s < bytes - off ? s : bytes - off;
        want *= growth;
        n++;
    }
    return n;
}

/* The link terms of a kind of peer: a peer on this node that is not
 * reached directly (cls 3) has the node's link, when it was measured (its
 * o and g taken as the quick estimate takes them); any other the main one. */
struct link_terms {
    double G, o, gap, rtt;
};
static struct link_terms link_of(int cls)
{
    if (cls == 3 && ovl__m.node_bw_Bpus > 0 && ovl__m.node_lat_us > 0)
        return (struct link_terms){ 1.0 / ovl__m.node_bw_Bpus, ovl__m.node_lat_us,
                                    ovl__m.node_lat_us / 2, 2 * ovl__m.node_lat_us };
    return (struct link_terms){ 1.0 / ovl__m.bw_Bpus, ovl__m.o_us, ovl__m.gap_us, ovl__m.rtt_us };
}

/* Predicted time from the call until the program has read every strip of
 * a guarded get: the whole destination is guarded (M(S)), then the strips'
 * requests are issued one after the other (o each), so the first strip is
 * on the wire while the later ones are issued; the program reads a strip
 * when it has arrived (a fault, I, if it had to wait), after its pages are
 * opened (M of the strip) and computes on it (c per byte). With n = 1 this
 * is the unsplit guarded get, the alternative a split must beat. */
static double simulate(const struct link_terms *lk, size_t bytes, size_t first, double growth,
                       int n, ovl_monitor_t mon)
{
    size_t ps = ovl__watch_page();
    double G = lk->G, c = ovl__m.compute_us_per_B, I = ovl__m.fault_us;
    double guard = ovl__model_protect_us(mon, pages_of(bytes, ps));
    double per = lk->o > lk->gap ? lk->o : lk->gap;
    double cpu = guard + n * lk->o, wire = 0;
    size_t off = 0;
    double want = (double)first;
    for (int k = 0; k < n && off < bytes; k++) {
        size_t s = k == n - 1 ? bytes - off : round_page(want, ps);
        if (s > bytes - off)
            s = bytes - off;
        double send_at = guard + (k + 1) * per + lk->rtt / 2; /* the request reached the target */
        wire = (wire > send_at ? wire : send_at) + lk->gap + G * (double)s;
        double arrive = wire + lk->rtt / 2;
        if (arrive > cpu)
            cpu = arrive + I; /* faulted: wait, then the handler returns */
        cpu += ovl__model_protect_us(mon, pages_of(s, ps)) + c * (double)s;
        off += s;
        want *= growth;
    }
    return cpu;
}

/* The decision for one size is a search over some hundred simulated
 * pipelines (4-20 us at 32 KiB-8 MiB on the Xeon VM), which an ovl_get of
 * 64 KiB paid on every call. Decisions are kept, per size and kind of
 * peer, with the model terms they were made from: a calibration, or a
 * test that sets the terms, makes a fresh one. */
enum { SPLIT_MEMO = 64, SPLIT_TERMS = 13 };
static struct {
    pthread_mutex_t lock;
    struct split_memo {
        size_t bytes; /* 0: empty */
        int cls;
        double terms[SPLIT_TERMS];
        struct ovl__split r;
    } e[SPLIT_MEMO];
} split_memo = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void split_terms(ovl_monitor_t mon, double *t)
{
    t[0] = ovl__m.bw_Bpus;
    t[1] = ovl__m.compute_us_per_B;
    t[2] = ovl__m.fault_us;
    t[3] = ovl__m.o_us;
    t[4] = ovl__m.gap_us;
    t[5] = ovl__m.rtt_us;
    t[6] = ovl__m.prot_base_us;
    t[7] = ovl__m.prot_page_us;
    t[8] = ovl__m.uffd_wp_base_us;
    t[9] = ovl__m.uffd_wp_page_us;
    t[10] = (double)mon;
    t[11] = ovl__m.node_lat_us;
    t[12] = ovl__m.node_bw_Bpus;
}

static void split_decide(size_t bytes, int cls, ovl_monitor_t mon, struct ovl__split *out);

int ovl__model_split(size_t bytes, int peer, struct ovl__split *out)
{
    /* the kind of peer: this rank, one on this node reached directly, a
     * remote one, one on this node reached as a remote one */
    int cls = peer == ovl__g.rank && ovl__g.size > 1 ? 0
              : ovl__model_direct(peer)              ? 1
              : ovl__peer_on_node(peer)              ? 3
                                                     : 2;
    ovl_monitor_t mon = ovl__watch_resolve(OVL_MONITOR_AUTO);
    double terms[SPLIT_TERMS];
    split_terms(mon, terms);
    uint64_t h = ((uint64_t)bytes * 4 + (uint64_t)cls) * 0x9E3779B97F4A7C15ull;
    _Static_assert(SPLIT_MEMO == 64, "the hash keeps 6 bits");
    struct split_memo *e = &split_memo.e[h >> 58];
    pthread_mutex_lock(&split_memo.lock);
    if (e->bytes == bytes && e->cls == cls && !memcmp(e->terms, terms, sizeof terms)) {
        *out = e->r;
        pthread_mutex_unlock(&split_memo.lock);
        return 0;
    }
    pthread_mutex_unlock(&split_memo.lock);
    split_decide(bytes, cls, mon, out);
    pthread_mutex_lock(&split_memo.lock);
    e->bytes = bytes;
    e->cls = cls;
    memcpy(e->terms, terms, sizeof terms);
    e->r = *out;
    pthread_mutex_unlock(&split_memo.lock);
    return 0;
}

static void split_decide(size_t bytes, int cls, ovl_monitor_t mon, struct ovl__split *out)
{
    size_t ps = ovl__watch_page();
    const struct link_terms lk = link_of(cls);
    double G = lk.G, c = ovl__m.compute_us_per_B, I = ovl__m.fault_us;
    struct ovl__split r = { .should_split = 0, .nstrips = 1, .first = bytes, .growth = 1.0 };
    /* the unsplit get is guarded too: its own guard, fault and install */
    r.t_plain_us = simulate(&lk, bytes, bytes, 1.0, 1, mon);
    r.t_split_us = r.t_plain_us;
    if (cls == 0) {
        r.reason = OVL__SPLIT_LOCAL;
        r.why = "local transfer: nothing to overlap";
        goto done;
    }
    if (cls == 1) {
        /* MPI moves the bytes with this rank's own CPU (a copy through
         * shared memory): no wire time to hide, and a strip would add an
         * install and a fault (docs/PERFORMANCE.md, shared memory). */
        r.reason = OVL__SPLIT_LOCAL;
        r.why = "peer on this node: MPI copies with this CPU, nothing to overlap";
        goto done;
    }
    if (bytes < 2 * ps) {
        r.reason = OVL__SPLIT_SMALL;
        r.why = "smaller than two pages";
        goto done;
    }
    /* (1): o + M(S) + I/2 + M(N1) < RTT + G*N1, with M(N1) = b + p*N1/ps:
     * N1 > (o + M(S) + I/2 + b - RTT) / (G - p/ps). */
    double pb = ovl__model_protect_us(mon, 0), pp = ovl__model_protect_us(mon, 1) - pb;
    double setup = lk.o + ovl__model_protect_us(mon, pages_of(bytes, ps)) + I / 2 + pb;
    double slope = G - pp / (double)ps;
    double n1;
    if (setup < lk.rtt)
        n1 = (double)ps;
    else if (slope <= 0)
        n1 = 1e300;
    else
        n1 = (setup - lk.rtt) / slope;
    size_t N1 = round_page(n1, ps);
    if (n1 > (double)(bytes - ps)) {
        r.reason = OVL__SPLIT_SMALL;
        r.why = "first strip cannot hide the setup (HUNT 5.1 (1))";
        goto done;
    }
    /* (2): G*N1 + C(N1) + I/2 > G*(S-N1) + I + M(S-N1):
     * N1 >= (G*S + I/2 + b + p*S/ps) / (2G + c + p/ps). */
    double n2 = (G * (double)bytes + I / 2 + pb + pp * (double)bytes / (double)ps) /
                (2 * G + c + pp / (double)ps);
    if (n2 > (double)N1)
        N1 = round_page(n2, ps);
    if (N1 > bytes - ps) {
        r.reason = OVL__SPLIT_NO_OVERLAP;
        r.why = "second strip not covered by the first (HUNT 5.1 (2))";
        goto done;
    }
    /* Candidates: equal strips (n = 2.. while each is at least the (1)
     * minimum) and geometric growth from the (1) minimum. */
    size_t n1min = round_page(n1, ps);
    double best = r.t_plain_us;
    int found = 0;
    for (int n = 2; n <= MAX_STRIPS; n++) {
        size_t s = round_page((double)bytes / n, ps);
        if (s < n1min || s >= bytes)
            break;
        int real = count_strips(bytes, s, 1.0, ps);
        double t = simulate(&lk, bytes, s, 1.0, real, mon);
        if (t < best) {
            best = t;
            r.first = s;
            r.growth = 1.0;
            r.nstrips = real;
            found = 1;
        }
    }
    static const double growths[] = { 1.5, 2.0, 3.0, 4.0 };
    for (size_t g = 0; g < sizeof growths / sizeof growths[0]; g++) {
        for (size_t f = n1min; f < bytes; f *= 2) {
            int real = count_strips(bytes, f, growths[g], ps);
            if (real < 2 || real > MAX_STRIPS)
                continue;
            double t = simulate(&lk, bytes, f, growths[g], real, mon);
            if (t < best) {
                best = t;
                r.first = f;
                r.growth = growths[g];
                r.nstrips = real;
                found = 1;
            }
        }
    }
    if (!found) {
        r.reason = OVL__SPLIT_NO_GAIN;
        r.why = "no strip sizes beat one transfer";
        r.first = bytes;
        goto done;
    }
    r.should_split = 1;
    r.reason = OVL__SPLIT_YES;
    r.t_split_us = best;
    r.why = r.growth > 1.0 ? "split, geometric strips" : "split, equal strips";
done:
    if (!r.should_split) {
        r.nstrips = 1;
        r.first = bytes;
        r.growth = 1.0;
    }
    *out = r;
}

size_t ovl__model_split_threshold(int peer)
{
    size_t ps = ovl__watch_page(), lo = ps, hi = 0;
    struct ovl__split sp;
    for (size_t s = 2 * ps; s <= ((size_t)1 << 30); s *= 2) {
        ovl__model_split(s, peer, &sp);
        if (sp.should_split) {
            hi = s;
            break;
        }
        lo = s;
    }
    if (!hi)
        return SIZE_MAX;
    /* Bisect in pages between the last size not split and the first split. */
    size_t a = lo / ps, b = hi / ps;
    while (b - a > 1) {
        size_t m = a + (b - a) / 2;
        ovl__model_split(m * ps, peer, &sp);
        if (sp.should_split)
            b = m;
        else
            a = m;
    }
    return b * ps;
}

int ovl_model_split_threshold(size_t *bytes)
{
    static const char *fn = "ovl_model_split_threshold";
    int rc;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (!bytes)
        return ovl__error(OVL_ERR_ARG, fn, "bytes is NULL");
    *bytes = ovl__model_split_threshold(ovl__model_link_peer());
    return OVL_SUCCESS;
}

size_t ovl__model_piggyback_threshold(void)
{
    /* Guarding a transfer costs M(pages) + I; it can hide at most its own
     * wire time G*s. Below s* = (b + I) / (G - p/ps) guarding costs more
     * than it could hide. */
    size_t ps = ovl__watch_page();
    ovl_monitor_t mon = ovl__watch_resolve(OVL_MONITOR_AUTO);
    double pb = ovl__model_protect_us(mon, 0), pp = ovl__model_protect_us(mon, 1) - pb;
    double slope = 1.0 / ovl__m.bw_Bpus - pp / (double)ps;
    if (slope <= 0)
        return SIZE_MAX;
    double s = (pb + ovl__m.fault_us) / slope;
    return s > 1e15 ? SIZE_MAX : round_page(s, ps);
}

size_t ovl__model_fragment_size(void)
{
    /* Smaller fragments start the transfer and the receiver's unmarshalling
     * sooner, and keep short what a fragment's completion (MPI_Issend's
     * acknowledgement) waits behind in the other direction of an exchange:
     * on the 1 Gbit/s cluster, fragments of 32 KiB and more made a 1 MiB
     * exchange of streams 1.4-1.75x slower than the wire, 8-16 KiB ran at
     * wire speed (docs/PERFORMANCE.md, "Marshal streams at wire speed").
     * Larger ones cost fewer per-message overheads: take the smallest
     * whose overhead is at most 5 % of its wire time. */
    double want = 20.0 * ovl__m.o_us * ovl__m.bw_Bpus;
    size_t cap = 65536, f = 4096;
    while (cap > f && cap > ovl__m.eager && ovl__m.eager >= f) /* within the eager switch */
        cap /= 2;
    while (f < cap && (double)f < want)
        f *= 2;
    return f;
}

size_t ovl__model_max_delta(void)
{
    return MAX_DELTA;
}

size_t ovl__model_rendezvous_bytes(void)
{
    size_t sw = ovl__m.piece_switch;
    return sw > 0 && sw < ovl__m.eager ? sw : ovl__m.eager;
}

/* Whether a delta piece whose message (header and bytes) is @len bytes is
 * copied behind its header and sent contiguous rather than as a two-block
 * struct datatype. Measured with
 * MPICH 4.0 (ch4:ucx), MPI_Isend of header + 4/8/16 KiB: struct 27/39/103
 * us, copy and send 19/22/25 us over TCP; 7/11 us against 1.2/2.8 us on
 * shared memory. Above the protocol switch the struct goes zero-copy and
 * wins (shared memory, 16 KiB and up: 0.8-1.5 us against 4-5). */
int ovl__model_copy_piece(size_t len)
{
    size_t sw = ovl__m.piece_switch > 0 ? ovl__m.piece_switch : 16384;
    if (ovl__m.eager > 0 && sw > ovl__m.eager)
        sw = ovl__m.eager;
    return len < sw;
}

/* How many of a message's @bytes the link passes in one burst, priced at
 * the one-way times measured at init (@sz[0..*n), below the eager limit,
 * every one of them measured; 0 if not measured): all of them within the
 * measured sizes, else the link's burst allowance (burst_B, the token
 * bucket a shaped link or a switch buffer lets through before its
 * long-run rate applies). */
static size_t burst_part(size_t bytes, size_t *sz, size_t *n)
{
    *n = ovl__measure_switch_sizes(sz, 16, (size_t)-1);
    if (*n < 2)
        return 0;
    for (size_t i = 0; i < *n; i++)
        if (ovl__m.oneway_us[i] <= 0)
            return 0;
    if (bytes <= sz[*n - 1])
        return bytes;
    return ovl__m.burst_B < bytes ? ovl__m.burst_B : bytes;
}

/* The measured one-way time of @d bytes (sz[0] <= d <= sz[n - 1]), less the
 * latency L, interpolated between the two sizes around it. */
static double burst_wire_us(size_t d, const size_t *sz, size_t n, double L)
{
    size_t i = 1;
    while (i + 1 < n && d > sz[i])
        i++;
    double f = (double)(d - sz[i - 1]) / (double)(sz[i] - sz[i - 1]);
    double t = ovl__m.oneway_us[i - 1] + f * (ovl__m.oneway_us[i] - ovl__m.oneway_us[i - 1]);
    return t > L ? t - L : 0;
}

/* The terms of one delta-size decision. */
struct dterms {
    double P, B, o, f, L, pb;
    int faults;
    const size_t *bsz; /* measured one-way sizes (burst_wire_us) */
    size_t nb;
};

/* Predicted time of @m bytes in pieces of @d through the three stages --
 * produce and post, the wire, take in and consume -- simulated piece by
 * piece: a piece leaves once produced and the wire is free, crosses in the
 * measured one-way time of its size while the message is still within the
 * link's burst (@bk bytes), at the long-run rate after it, and is consumed
 * once arrived (plus the latency) and the one before is. In the burst the
 * pieces' fixed costs set the pace, so larger pieces win; at the long-run
 * rate the wire does, and smaller pieces fill the pipeline sooner. Past
 * the burst and a few pieces the stages are steady, each further piece
 * adding the slowest of them. @one: the whole message is one piece (sent
 * unwatched: no protection, no sender fault). */
static double pipe_us(size_t m, size_t d, size_t bk, int one, const struct dterms *c)
{
    size_t n = (m + d - 1) / d;
    double s = (double)d / c->P + c->o + (one ? 0 : c->f + 2 * c->pb); /* produce and post */
    double r = (double)d / c->P + c->f + c->o + c->pb;                 /* take in and consume */
    double tb = bk > 0 ? burst_wire_us(d, c->bsz, c->nb, c->L) : 0;    /* in the burst */
    double tp = (double)d / c->B;                                      /* at the long-run rate */
    double hs = d >= ovl__m.eager ? 2 * c->L : 0;                      /* rendezvous handshake */
    double produced = 0, wire = 0, used = 0;
    size_t at = 0, i = 0, steady = bk / d + 4;
    for (; i < n && i < steady; i++) {
        size_t len = m - at < d ? m - at : d;
        produced += s;
        double start = produced > wire ? produced : wire;
        wire = start + hs + (at + len <= bk ? tb : (double)len / c->B);
        at += len;
        double arrive = wire + c->L;
        used = (arrive > used ? arrive : used) + r;
    }
    double slow = s > tp + hs ? s : tp + hs;
    if (r > slow)
        slow = r;
    double total = used + (double)(n - i) * slow + (one ? 0 : 4 * c->pb);
    /* A fault-triggered piece ends 64 bytes short of the page being
     * written (watch.c: a store may straddle the boundary), so the
     * receiver gets each piece's last page with the next piece: the last
     * piece's last page waits about one stage. With one-page pieces nothing
     * can be used before the next piece arrives. */
    if (c->faults && !one) {
        size_t ps = ovl__watch_page();
        double lag = slow - r * (double)(d - ps) / (double)d;
        total += lag > 0 ? lag : 0;
    }
    return total;
}

size_t ovl__model_delta_size(size_t bytes, double rate, int faults)
{
    size_t ps = ovl__watch_page();
    if (ovl__g.cfg.access.delta_size)
        return ovl__g.cfg.access.delta_size > MAX_DELTA ? MAX_DELTA : ovl__g.cfg.access.delta_size;
    if (bytes <= ps)
        return ps;
    struct dterms c;
    c.B = ovl__m.bw_Bpus;
    c.P = rate > 0 ? rate : c.B;
    c.f = faults ? ovl__m.fault_us : 0.2;
    c.faults = faults;
    /* What one piece costs besides its bytes, clamped so that a calibration
     * taken on a loaded machine cannot push the size to either extreme: the
     * sender posts it and the receiver takes it in (o each), each side
     * takes a fault or an annotation on it. The latency is paid once, in
     * the fill: pieces in flight overlap on the wire. */
    c.o = ovl__m.o_us < 1 ? 1 : ovl__m.o_us > 100 ? 100 : ovl__m.o_us;
    c.L = ovl__m.lat_us > 1000 ? 1000 : ovl__m.lat_us;
    /* A fault-triggered message's receiving progress thread notices its
     * last piece half a sleep late; the others the consumer either waits
     * for (its fault drives progress) or finds there while busy with
     * earlier data. Charged once, it moves no size; charged per piece (the
     * rule before 2026-11-25, last), it sent 256 KB messages to 16 KiB
     * pieces where 4-8 KiB ran 5-7 % faster (docs/PERFORMANCE.md, "Delta
     * sizes through the link's burst"). Under explicit annotation nothing
     * waits for it: a consumer that needs a piece drives progress itself
     * in ovl_delta_need. */
    double w = !faults ? 0 : ovl__m.poll_sleep_us > 2000 ? 1000 : ovl__m.poll_sleep_us / 2;
    size_t bsz[16];
    c.bsz = bsz;
    /* The part of the message the link passes in one burst (pipe_us; the
     * sweep on the emulated 1 Gbit/s link, with a 64 KiB token bucket: 8-16
     * KiB pieces best at 64 KB, 4-8 KiB at 256 KB). */
    size_t bk = burst_part(bytes, bsz, &c.nb);
    /* A fault-monitored send in several pieces write-protects the buffer
     * at begin (register + protect), opens each next delta and re-protects
     * the one sent (two protection calls per piece), seals the buffer at
     * send_end and drops the protection at completion; one piece needs none
     * of it (delta_send.c sends it at send_end, unwatched). The receiver installs
     * each piece (one call). */
    c.pb = 0;
    if (faults) {
        ovl_monitor_t mon = ovl__watch_resolve(OVL_MONITOR_AUTO);
        c.pb = ovl__model_protect_us(mon, 1);
        c.pb = c.pb < 0.5 ? 0.5 : c.pb > 50 ? 50 : c.pb;
    }
    double best_t = 1e300, totals[MAX_DELTA / 4096]; /* [k]: pieces of (k + 1) pages */
    size_t best = ps;
    size_t cap = bytes < MAX_DELTA ? bytes : MAX_DELTA;
    /* Stay below the rendezvous switch (the delta paper: a delta at or above
     * the eager limit doubles its latency). */
    if (ovl__m.eager > 2 * ps && cap >= ovl__m.eager)
        cap = (ovl__m.eager - 1) / ps * ps;
    /* ... and below a protocol switch seen under it (measured at init). */
    if (ovl__m.piece_switch > 2 * ps && cap >= ovl__m.piece_switch)
        cap = (ovl__m.piece_switch - 1) / ps * ps;
    const size_t kmax = sizeof totals / sizeof *totals;
    size_t nk = cap / ps < kmax ? cap / ps : kmax;
    for (size_t k = 0; k < nk; k++) {
        size_t d = (k + 1) * ps;
        int one = d >= bytes;
        double total = w + pipe_us(bytes, d, bk, one, &c);
        totals[k] = total;
        if (total < best_t) {
            best_t = total;
            best = d;
        }
    }
    /* A fault-triggered message: among sizes predicted within TIE of the
     * best, the largest. Each of its pieces carries costs the model may
     * undercharge (measured: OS-triggered 16-32 KB messages, where it
     * predicted a 1-2 % tie between 8 and 16 KB pieces and 16 KB was 6-16 %
     * faster), and the quick estimate moves from run to run by more than
     * that. An explicitly annotated piece costs a call: its best stands (the
     * tie sent explicit 128 and 256 KB messages to 8 KiB pieces, 5-11 %
     * slower than 4 KiB). */
    if (faults)
        for (size_t k = nk; k-- > 0 && (k + 1) * ps > best;)
            if (totals[k] <= best_t * (1 + TIE)) {
                best = (k + 1) * ps;
                break;
            }
    return best;
}

/* ---- one-sided transfers: strips of a get or put --------------------------
 * The plan of ovl__model_split (HUNT 5.1, above) as a list of strip sizes
 * for rma.c, with the decision's reason; rma.c counts one reason per
 * transfer for OVL_STATS (its own front-end reasons may replace this one). */
size_t ovl__model_strips(size_t bytes, int peer, size_t *sizes, size_t max, int *reason)
{
    if (max < 1)
        return 0;
    sizes[0] = bytes;
    struct ovl__split sp;
    ovl__model_split(bytes, peer, &sp);
    *reason = sp.reason;
    if (!sp.should_split || sp.nstrips < 2 || max < 2)
        return 1;
    size_t n = 0, at = 0;
    while (at < bytes && n < max) {
        size_t take = ovl__model_strip_size(&sp, bytes, (int)n);
        if (take == 0 || take > bytes - at || n + 1 == max)
            take = bytes - at;
        sizes[n++] = take;
        at += take;
    }
    return n;
}
