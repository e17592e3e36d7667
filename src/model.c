/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The performance model: what ovl knows about the link and the machine, and
 * the choices it derives from them. Inputs:
 *   - latency and bandwidth, measured at ovl_init by a short ping-pong
 *     between rank pairs (2r, 2r+1) on ovl's delta communicator, when any
 *     rank leaves OVL_DELTA_SIZE automatic (OVL_CALIBRATE=0 skips it and
 *     keeps the defaults below);
 *   - the cost of one access fault, measured on this process;
 *   - the MPI library's eager/rendezvous switch: OVL_EAGER_LIMIT, else the
 *     library's own control variable (MPI_T), else UCX_RNDV_THRESH, else
 *     64 KiB. The delta paper found a delta at or above the eager limit
 *     doubles its latency (rendezvous handshake), so the model charges the
 *     handshake to such sizes and in practice stays below the limit.
 *
 * Delta size: a message of N bytes cut into n = N/d pieces flows through
 * three stages -- produce (d/P + fault), transfer (overhead + d/B), consume
 * (d/P + fault) -- and a pipeline takes about the sum of the three stage
 * times for the first piece plus (n - 1) times the slowest stage. The
 * model evaluates that for every page multiple up to a cap and takes the
 * minimum. P, the production rate, is observed while a send runs (the
 * caller passes it; 0 = unknown, taken equal to B).
 */
#include "ovl_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ovl__model ovl__m = { .lat_us = 50.0, .bw_Bpus = 117.0, .fault_us = 5.0, .eager = 65536 };

/* Largest piece a delta send uses; receivers size their buffers with it. */
#define MAX_DELTA (256u << 10)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static size_t cvar_size(const char *name)
{
    int provided, n = 0;
    size_t v = 0;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS)
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

static size_t detect_eager(void)
{
    if (ovl__g.cfg.eager_limit)
        return ovl__g.cfg.eager_limit;
    static const char *cvars[] = { "MPIR_CVAR_CH4_OFI_EAGER_MAX_MSG_SIZE",
                                   "MPIR_CVAR_CH3_EAGER_MAX_MSG_SIZE" };
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    int ucx = strstr(ver, "ucx") != NULL || strstr(ver, "UCX") != NULL;
    if (!ucx) {
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
    return 65536;
}

/* One-way time of a @bytes message between this rank and @peer (best of
 * @reps round trips, halved). */
static double pingpong(int peer, char *buf, int bytes, int reps)
{
    double best = 1e30;
    for (int k = 0; k < reps; k++) {
        double t0 = now_us();
        if (ovl__g.rank < peer) {
            MPI_Send(buf, bytes, MPI_BYTE, peer, 1, ovl__g.comm_delta);
            MPI_Recv(buf, bytes, MPI_BYTE, peer, 1, ovl__g.comm_delta, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, bytes, MPI_BYTE, peer, 1, ovl__g.comm_delta, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_BYTE, peer, 1, ovl__g.comm_delta);
        }
        double t = (now_us() - t0) / 2;
        if (t < best)
            best = t;
    }
    return best;
}

int ovl__model_calibrate(void)
{
    ovl__m.eager = detect_eager();
    ovl__m.calibrated = 0;
    const char *c = getenv("OVL_CALIBRATE");
    int want = ovl__g.cfg.delta_size == 0 && !(c && !strcmp(c, "0"));
    int all = 0;
    if (MPI_Allreduce(&want, &all, 1, MPI_INT, MPI_MAX, ovl__g.comm_delta) != MPI_SUCCESS)
        return ovl__error(OVL_ERR_MPI, "ovl_init", "calibration: MPI_Allreduce failed");
    if (!all)
        return OVL_SUCCESS;
    int peer = ovl__g.rank ^ 1;
    double lat = 0, bw = 0;
    if (peer < ovl__g.size) {
        enum { SMALL = 4096, BIG = 131072 };
        char *buf = calloc(1, BIG);
        if (!buf)
            return ovl__error(OVL_ERR_NOMEM, "ovl_init", "calibration buffer");
        pingpong(peer, buf, 1, 2); /* warm up the connection */
        double ts = pingpong(peer, buf, SMALL, 4);
        double tb = pingpong(peer, buf, BIG, 3);
        free(buf);
        if (tb > ts) {
            bw = (double)(BIG - SMALL) / (tb - ts);
            lat = ts - SMALL / bw;
            if (lat < 1)
                lat = 1;
        }
    }
    /* Every rank uses the same (slowest) figures: pieces flow both ways. */
    double in[2] = { lat, bw > 0 ? 1.0 / bw : 0 }, out[2];
    if (MPI_Allreduce(in, out, 2, MPI_DOUBLE, MPI_MAX, ovl__g.comm_delta) != MPI_SUCCESS)
        return ovl__error(OVL_ERR_MPI, "ovl_init", "calibration: MPI_Allreduce failed");
    if (out[0] > 0 && out[1] > 0) {
        ovl__m.lat_us = out[0];
        ovl__m.bw_Bpus = 1.0 / out[1];
        ovl__m.calibrated = 1;
    }
    ovl__info("model: latency %.1f us, bandwidth %.1f MB/s, eager limit %zu B%s", ovl__m.lat_us,
              ovl__m.bw_Bpus, ovl__m.eager, ovl__m.calibrated ? "" : " (defaults)");
    return OVL_SUCCESS;
}

size_t ovl__model_max_delta(void)
{
    return MAX_DELTA;
}

size_t ovl__model_delta_size(size_t bytes, double rate, int faults)
{
    size_t ps = ovl__watch_page();
    if (ovl__g.cfg.delta_size)
        return ovl__g.cfg.delta_size > MAX_DELTA ? MAX_DELTA : ovl__g.cfg.delta_size;
    if (bytes <= ps)
        return ps;
    double B = ovl__m.bw_Bpus, P = rate > 0 ? rate : B;
    double f = faults ? ovl__m.fault_us : 0.2;
    /* Per-message cost, clamped: a calibration taken on a loaded machine
     * must not push the size to either extreme. */
    double o = ovl__m.lat_us < 2 ? 2 : ovl__m.lat_us > 100 ? 100 : ovl__m.lat_us;
    double best_t = 1e300;
    size_t best = ps;
    size_t cap = bytes < MAX_DELTA ? bytes : MAX_DELTA;
    /* Stay below the rendezvous switch (the delta paper: a delta at or above
     * the eager limit doubles its latency). */
    if (ovl__m.eager > 2 * ps && cap >= ovl__m.eager)
        cap = (ovl__m.eager - 1) / ps * ps;
    for (size_t d = ps; d <= cap; d += ps) {
        double n = (double)((bytes + d - 1) / d);
        double s = (double)d / P + f;
        double t = o + (double)d / B;
        if (d >= ovl__m.eager)
            t += 2 * ovl__m.lat_us; /* rendezvous handshake */
        double r = s;
        double slow = s > t ? s : t;
        if (r > slow)
            slow = r;
        double total = s + t + r + (n - 1) * slow;
        if (total < best_t) {
            best_t = total;
            best = d;
        }
    }
    return best;
}
