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

/* ---- one-sided transfers: automatic strip-mining (HUNT 5.1) ----------------
 *
 * A get of `size` bytes cut into a first strip of N1 bytes and the rest pays
 * off when (HUNT's two inequalities, with o the per-message overhead, RTT
 * the round trip, G the inverse bandwidth, I one fault's service, M(N) the
 * cost of changing the protection of N bytes and C(N) the least computation
 * a program can do on N bytes -- reading them from memory):
 *
 *   (1) o + M(size) + I/2 + M(N1)  <  RTT + G*N1
 *       the set-up must hide inside the first strip's own transfer;
 *   (2) RTT + G*N1 + I/2 + C(N1)   >  RTT + G*(size - N1) + I/2 + I/2 + M(size - N1)
 *       the first strip's transfer and use must cover the rest's transfer
 *       and the extra fault.
 *
 * The smallest N1 (a page multiple) meeting both, if below `size`, is the
 * first strip; later strips grow geometrically while (2) keeps holding for
 * each next one against everything left, so the strips cover each other's
 * transfers and the number of faults stays logarithmic. M(N) and C(N) are
 * not calibrated yet: M(N) = fault_us/4 + 0.05 us per page, C(N) = N at
 * MEM_BPUS bytes/us (memory to cache). Every rank computes the same
 * decision from the same figures. */

#define MEM_BPUS 4000.0 /* bytes/us, lower bound of computation on data */

static double strip_M(size_t bytes)
{
    return ovl__m.fault_us / 4 + 0.05 * (double)((bytes + 4095) / 4096);
}

/* Smallest page-multiple N1 < size meeting (1) and (2), or 0. */
static size_t first_strip(size_t size)
{
    size_t ps = ovl__watch_page();
    double G = ovl__m.bw_Bpus > 0 ? 1.0 / ovl__m.bw_Bpus : 0.01;
    double o = ovl__m.lat_us < 1 ? 1 : ovl__m.lat_us, rtt = 2 * o, I = ovl__m.fault_us;
    for (size_t n1 = ps; n1 + ps <= size; n1 += ps) {
        double lhs1 = o + strip_M(size) + I / 2 + strip_M(n1), rhs1 = rtt + G * (double)n1;
        if (lhs1 >= rhs1)
            continue;
        double rest = (double)(size - n1);
        double lhs2 = rtt + G * (double)n1 + I / 2 + (double)n1 / MEM_BPUS;
        double rhs2 = rtt + G * rest + I + strip_M(size - n1);
        if (lhs2 > rhs2)
            return n1;
        if (n1 > 64 * ps && n1 * 2 > size)
            break; /* past half: the rest cannot get smaller than the first */
        if (n1 >= 64 * ps)
            n1 += n1 / 8 / ps * ps; /* coarser steps for large sizes */
    }
    return 0;
}

size_t ovl__model_strips(size_t bytes, int peer, size_t *sizes, size_t max)
{
    (void)peer; /* one set of link figures for every peer so far */
    if (max < 1)
        return 0;
    sizes[0] = bytes;
    if (max < 2 || bytes < ovl__model_split_threshold())
        return 1;
    size_t n1 = first_strip(bytes);
    if (!n1)
        return 1;
    /* growth: strip k+1 may be as large as strip k's transfer plus use
     * covers, i.e. (G + 1/MEM)/G times strip k; at least 1.5, at most 4 */
    double G = ovl__m.bw_Bpus > 0 ? 1.0 / ovl__m.bw_Bpus : 0.01;
    double r = (G + 1.0 / MEM_BPUS) / G;
    r = r < 1.5 ? 1.5 : r > 4 ? 4 : r;
    size_t n = 0, at = 0, s = n1;
    while (at < bytes && n < max) {
        size_t take = bytes - at;
        if (n + 1 < max && take > s + s / 2)
            take = s;
        sizes[n++] = take;
        at += take;
        s = (size_t)((double)s * r);
    }
    if (at < bytes)
        sizes[n - 1] += bytes - at;
    return n;
}

size_t ovl__model_split_threshold(void)
{
    /* the smallest size (page multiples, doubling then refining) for which
     * a first strip exists; cached for the figures it was computed from */
    static double key[3];
    static size_t cached;
    double k[3] = { ovl__m.lat_us, ovl__m.bw_Bpus, ovl__m.fault_us };
    if (cached && !memcmp(k, key, sizeof k))
        return cached;
    size_t ps = ovl__watch_page(), hi = 2 * ps;
    while (hi < ((size_t)1 << 32) && !first_strip(hi))
        hi *= 2;
    if (hi >= ((size_t)1 << 32))
        return (size_t)-1;
    size_t lo = hi / 2 > ps ? hi / 2 : ps;
    while (hi - lo > ps) {
        size_t mid = (lo + hi) / 2 / ps * ps;
        if (mid <= lo)
            break;
        if (first_strip(mid))
            hi = mid;
        else
            lo = mid;
    }
    memcpy(key, k, sizeof k);
    cached = hi;
    return hi;
}
