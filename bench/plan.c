/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench plan: the loop-nest planner (ovl_plan_*) against the protocols
 * it chooses from and against what a programmer writes with plain MPI.
 * Rank 0 reads from rank 1 (the target), which serves in ovl_barrier
 * (and with ovl's progress thread), except in transpose, where
 * every rank reads from every other, and overhead, where rank 0 describes
 * plans reading from rank 1 and executes one reading from itself.
 *
 *   map         the protocol map: RUN-byte runs at stride 2*RUN, per cell
 *               each protocol forced (the planner's strip size kept) and
 *               the planner's own choice, with the model's predictions.
 *   gemm-panel  C += A(block) * B row by row as the block's rows arrive, M
 *               set so that computation is --ratio times communication:
 *               plain MPI (blocking, non-blocking), the plan, and the best
 *               protocol x strip size of a sweep run beforehand (oracle).
 *   reduce      y = A(block) * x, communication-bound: plain MPI, the plan
 *               and the oracle, as gemm-panel's.
 *   stencil     rows i, i+1, i+2 summed: three references the planner
 *               combines (the memory distance) vs three it cannot.
 *   halo3d      the three faces of an N^3 array (contiguous, strided runs,
 *               strided scalars), each its own plan: every protocol at the
 *               planner's strip size, plain MPI, and the oracle.
 *   transpose   every rank reads a column block of every other rank's
 *               matrix and transposes it as strips arrive: plain MPI, the
 *               plan (steady, and its first execution), the oracle.
 *   overhead    the planner's own costs: describing, committing, finding a
 *               cached plan again, executing a one-strip plan.
 *
 * Every timed kernel runs its variants alternated, the order rotated every
 * rep, each after an idle gap (the emulated link's token bucket refills),
 * all ranks taking part in each. Each variant's first run is an untimed
 * warm-up whose result is checked against a reference computed locally
 * with the same arithmetic in the same order, bit for bit.
 */
#include "common.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const CMD = "plan";

static const char HELP[] =
    "Usage: mpiexec -n 2 ovl-bench plan KERNEL [options]\n"
    "\n"
    "The loop-nest planner (ovl_plan_*): a loop's remote reads are described once\n"
    "as access descriptors (LMADs); ovl_plan_commit chooses the protocol\n"
    "  datatype  one MPI_Rget per strip and reference, derived datatypes on both sides\n"
    "  runs      one MPI_Rget per contiguous run, a strip's issued together\n"
    "  bbox      one MPI_Rget of the strip's bounding box into staging, runs copied out\n"
    "  pack      the target packs the strip (an active message) and sends it as one\n"
    "            message\n"
    "the strip size S (outer-loop iterations per strip) and the lookahead (strips in\n"
    "flight ahead), and ovl_plan_next hands each strip out once its bytes are in\n"
    "place. Rank 0 reads from rank 1, which serves in ovl_barrier (spinning ovl's\n"
    "engine; with OVL_PROGRESS=thread, the default here, ovl's progress thread as\n"
    "well), as ovl-calibrate --maps measures.\n"
    "\n"
    "Kernels:\n"
    "  map         the protocol map: RUNS runs of RUN bytes at stride 2*RUN read into a\n"
    "              dense buffer, no computation; grid RUN x RUNS, cells above\n"
    "              --max-bytes skipped. Per cell one execution (begin, next until the\n"
    "              last strip, end) per forced protocol (the planner's S and\n"
    "              lookahead kept) and with the planner's choice (auto). Columns:\n"
    "              S; medians in us of datatype, runs, bbox, pack, auto; the model's\n"
    "              predictions (ovl_plan_query predicted_us); best = fastest\n"
    "              protocol measured; pick = the planner's; pick/best = the picked\n"
    "              protocol's median over the best's (the choice's cost); auto/best\n"
    "              = the auto run as measured over the best. Summary: cells with\n"
    "              pick/best <= 1.05 (target >= 90 %), the worst pick/best (target\n"
    "              <= 1.25), each fixed protocol's worst ratio to the best (> 1.25\n"
    "              somewhere: no one protocol suffices), and measured/predicted per\n"
    "              protocol (median over the cells: how well the model is calibrated).\n"
    "  gemm-panel  rank 1 holds an R x LD row-major matrix A; rank 0 reads the block\n"
    "              A[0:R, c0:c0+K] (R runs of K*8 bytes, stride LD*8) and computes\n"
    "              C(R x M) += block * B(K x M), row i as soon as the block's row i\n"
    "              is here. Per --ratio, M is chosen so that computing takes RATIO\n"
    "              times base's transfer alone (M and the measured ratio printed).\n"
    "              Variants: base (MPI_Get with an MPI_Type_vector + MPI_Win_flush,\n"
    "              then compute), hand (MPI_Rget of all, MPI_Wait, then compute),\n"
    "              plan (a keyed plan found again every rep, rows computed strip by\n"
    "              strip), oracle (the best protocol x S of a sweep run first over S\n"
    "              = R, R/2, ..., R/64; the sweep's medians are printed). 'ok' when\n"
    "              plan <= 1.05 x oracle.\n"
    "  stencil     rows i, i+1 and i+2 of a remote (ROWS+2) x K matrix summed into row\n"
    "              i, ROWS rows (communication-bound): plan = the three reads into\n"
    "              one halo buffer, which the planner combines into one stream of\n"
    "              rows (the memory distance); plan3 = the same reads into three\n"
    "              buffers (not combinable: three times the bytes); base = one\n"
    "              MPI_Get of every row, then the sums\n"
    "  fields      the x, y and z of ROWS rows of K structures of 3 doubles on rank 1,\n"
    "              summed per structure (communication-bound): plan = the three\n"
    "              reads into one array of structures, which the planner merges\n"
    "              into one reference (interleaved); plan3 = the same reads into\n"
    "              three arrays (not mergeable: three references); base = one\n"
    "              MPI_Get of the block, then the sums\n"
    "  reduce      y = block * x on the same block (little computation per byte):\n"
    "              base, hand, plan and oracle as gemm-panel's (the sweep over S = R,\n"
    "              R/2, ..., R/64 run once, its medians printed); plan/base (target\n"
    "              <= 1.02), plan/hand, plan/oracle.\n"
    "  halo3d      rank 1 holds N^3 doubles [z][y][x]; the faces z=1 (contiguous),\n"
    "              y=1 (N runs of N doubles) and x=1 (N*N single doubles) are read\n"
    "              apart, each a 2-deep plan (outer loop: the face's slowest\n"
    "              dimension): every forced protocol at the planner's S ('n/a' when\n"
    "              the commit refuses it), auto, base (MPI_Get of a subarray type +\n"
    "              flush, then the sums), hand (MPI_Rget of the subarray type,\n"
    "              MPI_Wait, then the sums) and oracle (the best protocol x S of a\n"
    "              sweep run first, per face and ratio, over S = N, N/2, ..., N/64;\n"
    "              the sweep's medians are printed). Each strip's rows are summed W\n"
    "              times, W chosen per --ratio as M is. Per face: the best fixed\n"
    "              protocol at the planner's S, the pick, pick/best, auto/best,\n"
    "              auto/base, auto/hand, auto/orac and the oracle's choice.\n"
    "  transpose   every rank holds an N x N matrix and reads from every other rank\n"
    "              the column block [me*N/P, (me+1)*N/P), all rows, transposing it\n"
    "              into its own buffer: base (MPI_Get + flush of each block with a\n"
    "              vector type, then its transpose), hand (MPI_Rget of all blocks,\n"
    "              MPI_Waitall, transpose), plan (one reference per other rank,\n"
    "              strips transposed as they arrive; a keyed plan, re-ranked on its\n"
    "              measured executions), cold (a new plan every rep: its first\n"
    "              execution, on the model's predictions alone), oracle (the best\n"
    "              protocol x S of a sweep run first over S = N, N/2, ..., N/64; the\n"
    "              sweep's medians are printed). Times are the slowest rank's.\n"
    "              2 to 17 ranks.\n"
    "  overhead    the planner's own costs in us (median of --iters), rank 0 alone:\n"
    "              describe (ovl_plan_create + 3 ovl_plan_loop + 2 ovl_plan_read of\n"
    "              prebuilt LMADs, target <= 5), analyse + plan (ovl_plan_commit of a\n"
    "              fresh plan, target <= 3), re-run (ovl_plan_create finding the key\n"
    "              + ovl_plan_commit, target <= 0.5; also with the description given\n"
    "              again), and one execution of a one-strip 8-byte plan read from\n"
    "              this rank itself against MPI_Rget + MPI_Wait of the same 8 bytes\n"
    "              on a plain window. Any number of ranks.\n"
    "\n"
    "Options:\n"
    "  --reps N          timed runs per variant (default 5), after one checked warm-up\n"
    "  --ratio LIST      gemm-panel, halo3d: compute/communication ratios\n"
    "                    (default 0.25,1,4)\n"
    "  --gap-us N        idle time before each timed run, us (default 1000; 0: none)\n"
    "  --csv FILE        one row per (kernel, case, variant): median/min/max us and\n"
    "                    the plan's protocol, S, lookahead, predicted us\n"
    "  --max-bytes SIZE  map: largest RUN * RUNS (default 1m)\n"
    "  --run LIST        map: run lengths in bytes (default 8,64,512,4096,32768)\n"
    "  --runs LIST       map: run counts (default 1,4,16,64,256,1024,4096)\n"
    "  --rows R          gemm-panel, reduce: block rows; stencil, fields: rows summed\n"
    "                    (default 1024)\n"
    "  --k K             gemm-panel, reduce: block columns; stencil: row length; fields:\n"
    "                    structures per row (default 128)\n"
    "  --ld LD           gemm-panel, reduce: A's row length (default 256)\n"
    "  --c0 C            gemm-panel, reduce: block's first column (default (LD-K)/2)\n"
    "  --planes P        gemm-panel: describe the block's rows as P planes of ROWS/P\n"
    "                    rows (a nest of 3, its outer loop P), committed with\n"
    "                    OVL_PARAM_FIELD_LEVEL 1 (strips may be cut from the rows of a\n"
    "                    plane); plan0, the same nest without it (strips of whole\n"
    "                    planes), is timed beside it (default 1: the nest of 2)\n"
    "  --sweep-reps N    gemm-panel, reduce, halo3d, transpose: runs per configuration\n"
    "                    of the oracle's sweep (default 3)\n"
    "  --n N             halo3d: array edge (default 64); transpose: matrix order, a\n"
    "                    multiple of the ranks (default: about 1 MiB read per rank)\n"
    "  --iters N         overhead: repetitions per figure (default 2000)\n"
    "  --explain         stencil, fields, transpose: print the plan (ovl_plan_explain, rank 0)\n"
    "  --help            this text\n"
    "Options a kernel does not use are ignored. A forced protocol the commit refuses\n"
    "(OVL_ERR_ARG, which ovl also prints on stderr) is reported as n/a, so do not run\n"
    "with OVL_ERRORS=fatal. Every variant's warm-up result is checked bit for bit\n"
    "against a local reference; a mismatch aborts. The plain MPI variants that use\n"
    "MPI_Rget with a derived datatype add MPI_Win_flush_local after the wait: MPICH's\n"
    "CH4/UCX completes such a request before its bytes are in place.\n";

/* ---- options ------------------------------------------------------------------------- */

struct opt {
    const char *kernel;
    int reps, sweep_reps, iters;
    long gap_us;
    const char *csv;
    double *ratio;
    int nratio;
    size_t max_bytes;
    long *run, *runs;
    int nrun, nruns;
    int rows, k, ld, c0, n, planes;
    int explain; /* --explain */
};

static int parse_ratios(const char *s, double **out)
{
    char *dup = strdup(s);
    int n = 0, cap = 8;
    double *v = malloc((size_t)cap * sizeof *v);
    if (!dup || !v)
        bench_fail("out of memory");
    for (char *save = NULL, *tok = strtok_r(dup, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == cap && !(v = realloc(v, (size_t)(cap *= 2) * sizeof *v)))
            bench_fail("out of memory");
        v[n++] = bench_parse_double(CMD, "--ratio", tok, 1e-3, 1e3);
    }
    free(dup);
    if (!n)
        bench_usage_error(CMD, "--ratio: empty list");
    *out = v;
    return n;
}

/* ---- plumbing ------------------------------------------------------------------------- */

static const char *const pname[OVL_PLAN_PROTOCOLS] = { "auto", "datatype", "runs", "bbox", "pack" };

/* Memory on every rank: a plain MPI window (passive target, locked for its
 * whole life as rma.c's) and an ovl segment of @bytes each, this rank's. */
struct mem {
    MPI_Win win;
    char *wbase;
    ovl_segment_t seg;
    char *sbase;
    size_t bytes;
};

static void mem_open(struct mem *m, size_t bytes)
{
    m->bytes = bytes;
    BENCH_MPI(
        MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &m->wbase, &m->win));
    BENCH_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, m->win));
    void *b = NULL;
    BENCH_OVL(ovl_segment_create(bytes, &b, &m->seg));
    m->sbase = b;
}

/* Both copies filled: make them visible to the other ranks. */
static void mem_ready(struct mem *m)
{
    BENCH_MPI(MPI_Win_sync(m->win));
    BENCH_OVL(ovl_barrier());
    MPI_Barrier(MPI_COMM_WORLD);
}

static void mem_close(struct mem *m)
{
    MPI_Barrier(MPI_COMM_WORLD);
    BENCH_MPI(MPI_Win_unlock_all(m->win));
    BENCH_MPI(MPI_Win_free(&m->win));
    BENCH_OVL(ovl_segment_free(&m->seg));
}

static void *xalloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes ? bytes : 8) != 0)
        bench_fail("no memory for %zu bytes", bytes);
    memset(p, 0, bytes);
    return p;
}

/* Idle the link for @us microseconds on every rank, then line up (rma.c's
 * reason: the emulated cluster's token bucket refills, so every variant
 * starts on the same link state). */
static void idle_gap(long us)
{
    if (us > 0) {
        struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
        nanosleep(&ts, NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* One timed run of variant @v; seconds (meaningful on the ranks that run it). */
typedef double (*variant_fn)(void *ctx, int v);

/* Time the variants with on[v] set (the same on every rank) @reps times
 * each, alternated, their order rotated every rep, each after an idle gap:
 * t[v * reps + r] on rank 0. @everyone: every rank runs @fn and the time
 * kept is the slowest rank's; otherwise rank 0 runs it while the others
 * serve in ovl_barrier (spinning ovl's engine, which also polls MPI: gets
 * and PACK requests are served at once, as ovl-calibrate --maps serves). */
static void time_variants(int nv, const int *on, int reps, long gap_us, int everyone, variant_fn fn,
                          void *ctx, double *t)
{
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < nv; k++) {
            int v = (r + k) % nv;
            if (!on[v])
                continue;
            idle_gap(gap_us);
            t[v * reps + r] = everyone || bench_rank == 0 ? fn(ctx, v) : 0;
            BENCH_OVL(ovl_barrier());
        }
    if (everyone)
        MPI_Reduce(bench_rank == 0 ? MPI_IN_PLACE : t, t, nv * reps, MPI_DOUBLE, MPI_MAX, 0,
                   MPI_COMM_WORLD);
}

/* One untimed run of each variant with *check set: @fn verifies its result. */
static void warm_variants(int nv, const int *on, long gap_us, int everyone, variant_fn fn,
                          void *ctx, int *check)
{
    *check = 1;
    for (int v = 0; v < nv; v++) {
        if (!on[v])
            continue;
        idle_gap(gap_us);
        if (everyone || bench_rank == 0)
            (void)fn(ctx, v);
        BENCH_OVL(ovl_barrier());
    }
    *check = 0;
}

/* A plan's description: its nest and read references. */
struct pref {
    int rank;
    ovl_lmad_t rem, loc;
    void *buf;
};
struct pdesc {
    ovl_segment_t seg;
    int level; /* committed with OVL_PARAM_FIELD_LEVEL when > 0 */
    int ndepth;
    int64_t trips[OVL_PLAN_MAX_DEPTH];
    int nrefs;
    struct pref ref[OVL_PLAN_MAX_REFS];
};

/* A two-dimensional LMAD: dim[0] (stride s0, count n0, depth d0) fastest. */
static ovl_lmad_t lmad2(int64_t base, int64_t elem, int64_t s0, int64_t n0, int d0, int64_t s1,
                        int64_t n1, int d1)
{
    ovl_lmad_t l = { .base = base, .elem = elem, .ndims = 2 };
    l.dim[0] = (ovl_lmad_dim_t){ .stride = s0, .count = n0, .depth = d0 };
    l.dim[1] = (ovl_lmad_dim_t){ .stride = s1, .count = n1, .depth = d1 };
    return l;
}

static void describe(ovl_plan_t p, const struct pdesc *d)
{
    for (int k = 0; k < d->ndepth; k++)
        BENCH_OVL(ovl_plan_loop(p, k, d->trips[k]));
    for (int j = 0; j < d->nrefs; j++)
        BENCH_OVL(ovl_plan_read(p, d->seg, d->ref[j].rank, &d->ref[j].rem, d->ref[j].buf,
                                &d->ref[j].loc));
}

/* A new plan of @d (never cached), committed with @proto forced
 * (OVL_PLAN_AUTO: the model's) and @strip iterations per strip (0: the
 * model's). OVL_PLAN_NULL when the commit refuses the forced protocol
 * (OVL_ERR_ARG), its reason in @why. */
static ovl_plan_t plan_new(const struct pdesc *d, ovl_plan_protocol_t proto, int64_t strip,
                           char *why, size_t len)
{
    ovl_plan_t p = OVL_PLAN_NULL;
    BENCH_OVL(ovl_plan_create(NULL, &p, NULL));
    describe(p, d);
    ovl_param_t pm = { .field_mask = d->level > 0 ? OVL_PARAM_FIELD_LEVEL : 0, .level = d->level };
    if (proto != OVL_PLAN_AUTO) {
        pm.field_mask |= OVL_PARAM_FIELD_PROTOCOL;
        pm.protocol = proto;
    }
    if (strip > 0) {
        pm.field_mask |= OVL_PARAM_FIELD_STRIP;
        pm.strip = strip;
    }
    int rc = ovl_plan_commit(p, pm.field_mask ? &pm : NULL);
    if (rc == OVL_ERR_ARG && proto != OVL_PLAN_AUTO) {
        if (why)
            snprintf(why, len, "%s", ovl_error_detail());
        BENCH_OVL(ovl_plan_free(&p));
        return OVL_PLAN_NULL;
    }
    if (rc != OVL_SUCCESS)
        bench_fail("ovl_plan_commit (%s): %s (%s)", pname[proto], ovl_strerror(rc),
                   ovl_error_detail());
    return p;
}

/* The plan of @key: found in the cache, or described and committed with
 * the model's choices the first time. */
static ovl_plan_t plan_keyed(const char *key, const struct pdesc *d)
{
    ovl_plan_t p = OVL_PLAN_NULL;
    int found = 0;
    BENCH_OVL(ovl_plan_create(key, &p, &found));
    if (!found) {
        describe(p, d);
        const ovl_param_t pm = { .field_mask = OVL_PARAM_FIELD_LEVEL, .level = d->level };
        BENCH_OVL(ovl_plan_commit(p, d->level > 0 ? &pm : NULL));
    }
    return p;
}

static ovl_plan_info_t plan_info(ovl_plan_t p)
{
    ovl_plan_info_t in;
    BENCH_OVL(ovl_plan_query(p, &in));
    return in;
}

typedef void (*strip_fn)(void *ctx, int64_t i0, int64_t n);

/* One execution: begin, every strip handed to @fn (NULL: none), end. */
static void plan_exec(ovl_plan_t p, strip_fn fn, void *ctx)
{
    int64_t i0 = 0, n = 0;
    BENCH_OVL(ovl_plan_begin(p));
    for (;;) {
        BENCH_OVL(ovl_plan_next(p, &i0, &n));
        if (n == 0)
            break;
        if (fn)
            fn(ctx, i0, n);
    }
    BENCH_OVL(ovl_plan_end(p));
}

static void free_plan(ovl_plan_t *p)
{
    if (*p != OVL_PLAN_NULL)
        BENCH_OVL(ovl_plan_free(p));
}

/* "runs S=64" */
static const char *fmt_choice(const ovl_plan_info_t *in, char *buf, size_t len)
{
    snprintf(buf, len, "%s S=%" PRId64, pname[in->protocol], in->strip);
    return buf;
}

/* @s seconds in us, or "n/a" (!@on), for a %*s field. */
static const char *fmt_us(double s, int on, char *buf, size_t len)
{
    if (on)
        snprintf(buf, len, "%.1f", s * 1e6);
    else
        snprintf(buf, len, "n/a");
    return buf;
}

static void csv_header(FILE *f)
{
    if (f)
        fprintf(f, "kernel,case,variant,reps,median_us,min_us,max_us,protocol,strip,lookahead,"
                   "predicted_us,note\n");
}

/* One CSV row: @in NULL for a plain MPI variant, @pred < 0 for none. */
static void csv_row(FILE *f, const char *kernel, const char *cas, const char *variant, int reps,
                    const struct bench_stat *st, const ovl_plan_info_t *in, double pred,
                    const char *note)
{
    if (!f)
        return;
    fprintf(f, "%s,%s,%s,%d,%.3f,%.3f,%.3f,", kernel, cas, variant, reps, st->med * 1e6,
            st->min * 1e6, st->max * 1e6);
    if (in)
        fprintf(f, "%s,%" PRId64 ",%u,", pname[in->protocol], in->strip, in->lookahead);
    else
        fprintf(f, ",,,");
    if (pred >= 0)
        fprintf(f, "%.3f,", pred);
    else
        fprintf(f, ",");
    fprintf(f, "%s\n", note ? note : "");
}

static double *times_alloc(int nv, int reps)
{
    double *t = calloc((size_t)nv * (size_t)reps, sizeof *t);
    if (!t)
        bench_fail("out of memory");
    return t;
}

static double median_of(double *v, int n)
{
    return bench_stat_of(v, n).med;
}

/* ---- the oracle's sweep (gemm-panel, reduce, halo3d, transpose) --------------------------- */

enum { SWEEP_MAX = (OVL_PLAN_PROTOCOLS - 1) * 16 };

/* Every protocol at strip sizes S = top, top/2, ... down to @lowest (at
 * least 1): configuration i is protocol i / nS + 1 at S[i % nS]. */
struct sweep {
    int64_t S[16];
    int nS, n, reps, best;
    ovl_plan_t p[SWEEP_MAX]; /* OVL_PLAN_NULL where the commit refused */
    int on[SWEEP_MAX];
    double med[SWEEP_MAX]; /* seconds, of the configurations timed */
    double *t;             /* reps per configuration */
};

static void sweep_open(struct sweep *w, int64_t top, int64_t lowest, int reps)
{
    memset(w, 0, sizeof *w);
    for (int64_t s = top; s >= 1 && s >= lowest && w->nS < 16; s /= 2)
        if (!w->nS || s != w->S[w->nS - 1])
            w->S[w->nS++] = s;
    w->n = (OVL_PLAN_PROTOCOLS - 1) * w->nS;
    w->reps = reps;
    w->best = -1;
    w->t = times_alloc(w->n, reps);
}

/* Every configuration of @d committed here; on[] says which the commit took. */
static void sweep_plans(struct sweep *w, const struct pdesc *d)
{
    for (int i = 0; i < w->n; i++) {
        w->p[i] = plan_new(d, (ovl_plan_protocol_t)(i / w->nS + 1), w->S[i % w->nS], NULL, 0);
        w->on[i] = w->p[i] != OVL_PLAN_NULL;
    }
}

/* The timed configurations' medians, and the least of them (best). */
static void sweep_rank(struct sweep *w)
{
    w->best = -1;
    for (int i = 0; i < w->n; i++) {
        w->med[i] = w->on[i] ? median_of(&w->t[i * w->reps], w->reps) : 0;
        if (w->on[i] && (w->best < 0 || w->med[i] < w->med[w->best]))
            w->best = i;
    }
}

/* The sweep of a kernel that rank 0 runs alone: every configuration of @d
 * committed on rank 0, then warmed (its result checked) and timed through
 * @fn (variant i: configuration i). Rank 0 returns the oracle, the other
 * ranks OVL_PLAN_NULL. The caller drops the plans (sweep_drop_plans). */
static ovl_plan_t sweep_oracle(struct sweep *w, const struct pdesc *d, long gap_us, variant_fn fn,
                               void *ctx, int *check)
{
    if (bench_rank == 0)
        sweep_plans(w, d);
    MPI_Bcast(w->on, w->n, MPI_INT, 0, MPI_COMM_WORLD);
    warm_variants(w->n, w->on, gap_us, 0, fn, ctx, check);
    time_variants(w->n, w->on, w->reps, gap_us, 0, fn, ctx, w->t);
    if (bench_rank != 0)
        return OVL_PLAN_NULL;
    sweep_rank(w);
    if (w->best < 0)
        bench_fail("the oracle's sweep: the commit refused every configuration");
    return w->p[w->best];
}

static void sweep_print(const struct sweep *w)
{
    char c[48];
    printf("  %-41s", "sweep (median us; * = the oracle)");
    for (int s = 0; s < w->nS; s++)
        printf(" %8s", (snprintf(c, sizeof c, "S=%" PRId64, w->S[s]), c));
    printf("\n");
    for (int q = 0; q < OVL_PLAN_PROTOCOLS - 1; q++) {
        printf("  %-41s", pname[q + 1]);
        for (int s = 0; s < w->nS; s++) {
            int i = q * w->nS + s;
            printf(" %7s%s", fmt_us(w->med[i], w->on[i], c, sizeof c), i == w->best ? "*" : " ");
        }
        printf("\n");
    }
}

static void sweep_csv(FILE *f, const char *kernel, const char *cas, const struct sweep *w,
                      const char *note)
{
    for (int i = 0; i < w->n; i++)
        if (w->on[i]) {
            ovl_plan_info_t in = plan_info(w->p[i]);
            struct bench_stat ss = bench_stat_of(&w->t[i * w->reps], w->reps);
            csv_row(f, kernel, cas, "sweep", w->reps, &ss, &in, in.predicted_us[in.protocol], note);
        }
}

static void sweep_drop_plans(struct sweep *w)
{
    for (int i = 0; i < w->n; i++)
        free_plan(&w->p[i]);
}

static void sweep_close(struct sweep *w)
{
    sweep_drop_plans(w);
    free(w->t);
    w->t = NULL;
}

/* The 8-byte words of map's target: distinct for every offset. */
static uint64_t word_at(uint64_t w)
{
    return (w + 1) * 0x9E3779B97F4A7C15ull;
}

/* ---- map --------------------------------------------------------------------------------- */

enum { M_DT, M_RUNS, M_BBOX, M_PACK, M_AUTO, M_NV, M_NQ = M_AUTO };

static ovl_plan_protocol_t map_proto(int v)
{
    return v == M_AUTO ? OVL_PLAN_AUTO : (ovl_plan_protocol_t)(v + 1);
}

struct map_ctx {
    ovl_plan_t p[M_NV];
    char *dst;
    const char *expect; /* rank 1's part of the segment, as rank 0 builds it */
    int64_t run, nr;
    int check;
};

static double map_run(void *ctx, int v)
{
    struct map_ctx *c = ctx;
    if (c->check)
        memset(c->dst, 0, (size_t)(c->run * c->nr));
    double t0 = bench_now();
    plan_exec(c->p[v], NULL, NULL);
    double t = bench_now() - t0;
    if (c->check)
        for (int64_t k = 0; k < c->nr; k++)
            if (memcmp(c->dst + k * c->run, c->expect + 2 * k * c->run, (size_t)c->run))
                bench_fail("map: run %" PRId64 " x %" PRId64 ", %s: run %" PRId64
                           " differs from the target's bytes",
                           c->run, c->nr, pname[map_proto(v)], k);
    return t;
}

static int bench_plan_map(const struct opt *o)
{
    bench_require_two_ranks(CMD);
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);
    const size_t tbytes = (o->max_bytes * 2 + 7) / 8 * 8;
    struct mem m;
    mem_open(&m, bench_rank == 1 ? tbytes : 0);
    /* rank 0 builds the same bytes to check against */
    uint64_t *expect = xalloc(tbytes);
    for (size_t w = 0; w < tbytes / 8; w++)
        expect[w] = word_at(w);
    if (bench_rank == 1)
        memcpy(m.sbase, expect, tbytes);
    mem_ready(&m);

    struct map_ctx c = { .dst = xalloc(o->max_bytes), .expect = (const char *)expect };
    double *t = times_alloc(M_NV, o->reps);
    FILE *f = bench_csv_open(CMD, o->csv);
    csv_header(f);
    int cells = 0, within = 0, na[M_NQ] = { 0 };
    double worst = 0, auto_worst = 0, fixed_worst[M_NQ] = { 0 };
    int64_t fixed_at[M_NQ][2] = { { 0, 0 } }, worst_at[2] = { 0, 0 };
    int ncells_max = o->nrun * o->nruns;
    double *mp[M_NQ]; /* measured/predicted per protocol and cell */
    int nmp[M_NQ] = { 0 };
    for (int q = 0; q < M_NQ; q++)
        mp[q] = times_alloc(ncells_max, 1);
    const int hosts = bench_hosts();
    if (bench_rank == 0) {
        printf("plan map: %d reps, gap %ld us, progress %s, %d hosts; medians in us, model's "
               "predictions (pred) beside them\n",
               o->reps, o->gap_us, eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline",
               hosts);
        printf("%6s %5s %8s %5s %3s | %9s %9s %9s %9s %9s | %9s %9s %9s %9s | %-8s %-8s %9s "
               "%9s\n",
               "run", "runs", "bytes", "S", "la", "datatype", "runs", "bbox", "pack", "auto",
               "pred-dt", "pred-runs", "pred-bbox", "pred-pack", "best", "pick", "pick/best",
               "auto/best");
    }
    for (int a = 0; a < o->nrun; a++)
        for (int b = 0; b < o->nruns; b++) {
            const int64_t run = o->run[a], nr = o->runs[b];
            if ((size_t)run * (size_t)nr > o->max_bytes)
                continue;
            const int64_t elem = run % 8 == 0 ? 8 : 1;
            struct pdesc d = { .seg = m.seg, .ndepth = 2, .trips = { nr, run / elem }, .nrefs = 1 };
            d.ref[0] = (struct pref){ .rank = 1,
                                      .rem = lmad2(0, elem, elem, run / elem, 1, 2 * run, nr, 0),
                                      .loc = lmad2(0, elem, elem, run / elem, 1, run, nr, 0),
                                      .buf = c.dst };
            c.run = run;
            c.nr = nr;
            int on[M_NV] = { 0 };
            char why[M_NV][160];
            ovl_plan_info_t in[M_NV];
            memset(in, 0, sizeof in);
            if (bench_rank == 0)
                for (int v = 0; v < M_NV; v++) {
                    why[v][0] = 0;
                    c.p[v] = plan_new(&d, map_proto(v), 0, why[v], sizeof why[v]);
                    if ((on[v] = c.p[v] != OVL_PLAN_NULL))
                        in[v] = plan_info(c.p[v]);
                }
            MPI_Bcast(on, M_NV, MPI_INT, 0, MPI_COMM_WORLD);
            warm_variants(M_NV, on, o->gap_us, 0, map_run, &c, &c.check);
            time_variants(M_NV, on, o->reps, o->gap_us, 0, map_run, &c, t);
            if (bench_rank == 0) {
                struct bench_stat st[M_NV];
                int best = -1;
                for (int v = 0; v < M_NV; v++) {
                    st[v] =
                        on[v] ? bench_stat_of(&t[v * o->reps], o->reps) : (struct bench_stat){ 0 };
                    if (v != M_AUTO && on[v] && (best < 0 || st[v].med < st[best].med))
                        best = v;
                }
                const ovl_plan_info_t *ai = &in[M_AUTO];
                const int pick = (int)ai->protocol - 1;
                const double pr = st[pick].med / st[best].med, ar = st[M_AUTO].med / st[best].med;
                cells++;
                within += pr <= 1.05;
                if (pr > worst) {
                    worst = pr;
                    worst_at[0] = run;
                    worst_at[1] = nr;
                }
                auto_worst = ar > auto_worst ? ar : auto_worst;
                for (int q = 0; q < M_NQ; q++) {
                    if (!on[q]) {
                        na[q]++;
                        continue;
                    }
                    double r = st[q].med / st[best].med;
                    if (r > fixed_worst[q]) {
                        fixed_worst[q] = r;
                        fixed_at[q][0] = run;
                        fixed_at[q][1] = nr;
                    }
                    if (ai->predicted_us[q + 1] > 0)
                        mp[q][nmp[q]++] = st[q].med * 1e6 / ai->predicted_us[q + 1];
                }
                char sz[32], u[M_NV][32], pd[M_NQ][32];
                for (int v = 0; v < M_NV; v++)
                    fmt_us(st[v].med, on[v], u[v], sizeof u[v]);
                for (int q = 0; q < M_NQ; q++)
                    fmt_us(ai->predicted_us[q + 1] * 1e-6, ai->predicted_us[q + 1] >= 0, pd[q],
                           sizeof pd[q]);
                printf("%6" PRId64 " %5" PRId64 " %8s %5" PRId64 " %3u | %9s %9s %9s %9s %9s | "
                       "%9s %9s %9s %9s | %-8s %-8s %9.3f %9.3f\n",
                       run, nr, bench_fmt_size((size_t)(run * nr), sz, sizeof sz), ai->strip,
                       ai->lookahead, u[0], u[1], u[2], u[3], u[4], pd[0], pd[1], pd[2], pd[3],
                       pname[best + 1], pname[pick + 1], pr, ar);
                for (int v = 0; v < M_NQ; v++)
                    if (!on[v])
                        printf("       %s n/a: %s\n", pname[v + 1], why[v]);
                char cas[64];
                snprintf(cas, sizeof cas, "run=%" PRId64 ";runs=%" PRId64, run, nr);
                for (int v = 0; v < M_NV; v++)
                    if (on[v])
                        csv_row(f, "map", cas, v == M_AUTO ? "auto" : pname[v + 1], o->reps, &st[v],
                                &in[v],
                                v == M_AUTO ? ai->predicted_us[ai->protocol]
                                            : ai->predicted_us[v + 1],
                                v == M_AUTO ? (pick == best ? "pick=best" : "pick!=best") : "");
                for (int v = 0; v < M_NV; v++)
                    free_plan(&c.p[v]);
            }
        }
    if (bench_rank == 0 && cells) {
        printf("planner within 5 %% of the best protocol: %d of %d cells (%.0f %%)  [target >= 90 "
               "%%: %s]\n",
               within, cells, 100.0 * within / cells, 10 * within >= 9 * cells ? "met" : "missed");
        printf("worst pick/best: %.3f (run %" PRId64 ", runs %" PRId64 ")  [target <= 1.25: %s]; "
               "worst auto/best as measured: %.3f\n",
               worst, worst_at[0], worst_at[1], worst <= 1.25 ? "met" : "missed", auto_worst);
        for (int q = 0; q < M_NQ; q++) {
            double r = nmp[q] ? median_of(mp[q], nmp[q]) : 0;
            printf("fixed %-8s worst/best %.3f (run %" PRId64 ", runs %" PRId64 ")%s, n/a in "
                   "%d cells; measured/predicted median %.2f\n",
                   pname[q + 1], fixed_worst[q], fixed_at[q][0], fixed_at[q][1],
                   fixed_worst[q] > 1.25 ? "" : " [never > 1.25: expected > 1.25 somewhere]", na[q],
                   r);
        }
    }
    for (int q = 0; q < M_NQ; q++)
        free(mp[q]);
    bench_csv_close(f, o->csv);
    free(t);
    free(c.dst);
    free(expect);
    mem_close(&m);
    bench_ovl_finalize();
    return 0;
}

/* ---- gemm-panel and reduce ---------------------------------------------------------------- */

enum { G_BASE, G_HAND, G_PLAN, G_ORACLE, G_XFER, G_PLAN0, G_NV };
static const char *const gname[G_NV] = { "base", "hand", "plan", "oracle", "xfer", "plan0" };

struct panel {
    int reduce; /* 0: gemm-panel, 1: reduce */
    int R, K, LD, c0, M;
    struct mem m;
    MPI_Datatype vec;   /* the block on the target: R blocks of K doubles, stride LD */
    struct pdesc d, d0; /* d0: --planes, strips of whole planes (no level) */
    const char *key;
    int planes;
    double *a, *aref;     /* R x K: the block as read, as it should be */
    double *b, *c, *cref; /* gemm: K x M, R x M */
    double *x, *y, *yref; /* reduce: K, R */
    ovl_plan_t oracle;
    struct sweep sw;
    int check;
};

static double a_val(int i, int j)
{
    return (double)((i * 37 + j * 11) % 97) * 0.125 - 6.0;
}

/* c[i][:] += a[i][:] * b for rows [i0, i0 + n): row i needs a's row i only.
 * The same code for every variant: the same arithmetic in the same order. */
static void gemm_rows(const double *a, const double *b, double *c, int K, int M, int64_t i0,
                      int64_t n)
{
    for (int64_t i = i0; i < i0 + n; i++) {
        const double *ai = a + i * K;
        double *ci = c + i * M;
        for (int k = 0; k < K; k++) {
            const double aik = ai[k];
            const double *bk = b + (size_t)k * (size_t)M;
            for (int j = 0; j < M; j++)
                ci[j] += aik * bk[j];
        }
    }
}

static void matvec_rows(const double *a, const double *x, double *y, int K, int64_t i0, int64_t n)
{
    for (int64_t i = i0; i < i0 + n; i++) {
        const double *ai = a + i * K;
        double s = 0;
        for (int k = 0; k < K; k++)
            s += ai[k] * x[k];
        y[i] = s;
    }
}

static void panel_strip(void *ctx, int64_t i0, int64_t n)
{
    struct panel *g = ctx;
    if (g->reduce)
        matvec_rows(g->a, g->x, g->y, g->K, i0, n);
    else
        gemm_rows(g->a, g->b, g->c, g->K, g->M, i0, n);
}

/* plan0's strips count planes (no level: depth-0 iterations). */
static void panel_strip_planes(void *ctx, int64_t p0, int64_t n)
{
    struct panel *g = ctx;
    const int64_t rp = g->R / g->planes;
    panel_strip(g, p0 * rp, n * rp);
}

static void panel_prepare(struct panel *g)
{
    if (!g->reduce && g->c)
        memset(g->c, 0, (size_t)g->R * (size_t)g->M * sizeof(double));
    if (g->check) { /* NaNs: a row computed before it arrived, or not at all, cannot match */
        memset(g->a, 0xff, (size_t)g->R * (size_t)g->K * sizeof(double));
        if (g->reduce)
            memset(g->y, 0xff, (size_t)g->R * sizeof(double));
    }
}

static void panel_verify(const struct panel *g, const char *what)
{
    const int bad = g->reduce ? memcmp(g->y, g->yref, (size_t)g->R * sizeof(double))
                              : memcmp(g->c, g->cref, (size_t)g->R * (size_t)g->M * sizeof(double));
    if (bad)
        bench_fail("%s, %s: the result differs from the local reference",
                   g->reduce ? "reduce" : "gemm-panel", what);
}

static double panel_run(void *ctx, int v)
{
    struct panel *g = ctx;
    panel_prepare(g);
    MPI_Request rq = MPI_REQUEST_NULL;
    double t0 = bench_now();
    switch (v) {
    case G_BASE:
    case G_XFER:
        BENCH_MPI(
            MPI_Get(g->a, g->R * g->K, MPI_DOUBLE, 1, (MPI_Aint)g->c0 * 8, 1, g->vec, g->m.win));
        BENCH_MPI(MPI_Win_flush(1, g->m.win));
        if (v == G_BASE)
            panel_strip(g, 0, g->R);
        break;
    case G_HAND:
        BENCH_MPI(MPI_Rget(g->a, g->R * g->K, MPI_DOUBLE, 1, (MPI_Aint)g->c0 * 8, 1, g->vec,
                           g->m.win, &rq));
        BENCH_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        /* MPICH CH4/UCX completes an MPI_Rget of a non-contiguous type
         * before its bytes are in place (plan.c's flush_strip says so too);
         * a program on it must flush */
        BENCH_MPI(MPI_Win_flush_local(1, g->m.win));
        panel_strip(g, 0, g->R);
        break;
    case G_PLAN:
        plan_exec(plan_keyed(g->key, &g->d), panel_strip, g);
        break;
    case G_PLAN0:
        plan_exec(plan_keyed("ovl-bench-plan-gemm-panel-planes0", &g->d0), panel_strip_planes, g);
        break;
    default:
        plan_exec(g->oracle, panel_strip, g);
        break;
    }
    double t = bench_now() - t0;
    if (g->check && v != G_XFER)
        panel_verify(g, gname[v]);
    return t;
}

static double panel_sweep_run(void *ctx, int v)
{
    struct panel *g = ctx;
    panel_prepare(g);
    double t0 = bench_now();
    plan_exec(g->sw.p[v], panel_strip, g);
    double t = bench_now() - t0;
    if (g->check)
        panel_verify(g, "a sweep configuration");
    return t;
}

/* gemm: B, C and the reference for @M columns (rank 0). */
static void panel_set_m(struct panel *g, int M)
{
    free(g->b);
    free(g->c);
    free(g->cref);
    g->M = M;
    g->b = xalloc((size_t)g->K * (size_t)M * sizeof(double));
    g->c = xalloc((size_t)g->R * (size_t)M * sizeof(double));
    g->cref = xalloc((size_t)g->R * (size_t)M * sizeof(double));
    for (int k = 0; k < g->K; k++)
        for (int j = 0; j < M; j++)
            g->b[(size_t)k * (size_t)M + (size_t)j] = (double)((k * 7 + j * 3) % 32) / 16.0 - 1.0;
    gemm_rows(g->aref, g->b, g->cref, g->K, M, 0, g->R);
}

/* Seconds to compute all rows with the current M (median of 3, rank 0). */
static double panel_compute_s(struct panel *g)
{
    double v[3];
    for (int k = 0; k < 3; k++) {
        memset(g->c, 0, (size_t)g->R * (size_t)g->M * sizeof(double));
        double t0 = bench_now();
        gemm_rows(g->aref, g->b, g->c, g->K, g->M, 0, g->R);
        v[k] = bench_now() - t0;
    }
    return median_of(v, 3);
}

/* Choose M so that computing takes @ratio x @tc seconds; the measured ratio. */
static double panel_choose_m(struct panel *g, double ratio, double tc)
{
    panel_set_m(g, 32);
    double per = panel_compute_s(g) / 32;
    int M = 1;
    double meas = 0;
    for (int round = 0; round < 3; round++) {
        double want = ratio * tc / per;
        M = want < 1 ? 1 : want > 65536 ? 65536 : (int)lround(want);
        panel_set_m(g, M);
        double tm = panel_compute_s(g);
        meas = tm / tc;
        if (fabs(meas / ratio - 1) < 0.1 || M == 1 || M == 65536)
            break;
        per = tm / M;
    }
    return meas;
}

static int bench_plan_panel(const struct opt *o, int reduce)
{
    const char *kname = reduce ? "reduce" : "gemm-panel";
    bench_require_two_ranks(CMD);
    struct panel g = { .reduce = reduce,
                       .R = o->rows,
                       .K = o->k,
                       .LD = o->ld,
                       .c0 = o->c0 >= 0 ? o->c0 : (o->ld - o->k) / 2,
                       .key = reduce ? "ovl-bench-plan-reduce" : "ovl-bench-plan-gemm-panel",
                       .planes = reduce ? 1 : o->planes,
                       .vec = MPI_DATATYPE_NULL };
    if (g.R % g.planes)
        bench_usage_error(CMD, "--planes %d does not divide --rows %d", g.planes, g.R);
    if (g.K > g.LD)
        bench_usage_error(CMD, "--k %d is larger than --ld %d", g.K, g.LD);
    if (g.c0 + g.K > g.LD)
        bench_usage_error(CMD, "the block's columns [%d, %d) do not fit in LD = %d", g.c0,
                          g.c0 + g.K, g.LD);
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);
    const size_t bytes = (size_t)g.R * (size_t)g.LD * sizeof(double);
    mem_open(&g.m, bench_rank == 1 ? bytes : 0);
    if (bench_rank == 1)
        for (int i = 0; i < g.R; i++)
            for (int j = 0; j < g.LD; j++)
                ((double *)g.m.wbase)[(size_t)i * g.LD + j] =
                    ((double *)g.m.sbase)[(size_t)i * g.LD + j] = a_val(i, j);
    mem_ready(&g.m);
    BENCH_MPI(MPI_Type_vector(g.R, g.K, g.LD, MPI_DOUBLE, &g.vec));
    BENCH_MPI(MPI_Type_commit(&g.vec));
    g.a = xalloc((size_t)g.R * (size_t)g.K * sizeof(double));
    g.aref = xalloc((size_t)g.R * (size_t)g.K * sizeof(double));
    for (int i = 0; i < g.R; i++)
        for (int k = 0; k < g.K; k++)
            g.aref[(size_t)i * g.K + k] = a_val(i, g.c0 + k);
    g.d = (struct pdesc){ .seg = g.m.seg, .ndepth = 2, .trips = { g.R, g.K }, .nrefs = 1 };
    g.d.ref[0] =
        (struct pref){ .rank = 1,
                       .rem = lmad2((int64_t)g.c0 * 8, 8, 8, g.K, 1, (int64_t)g.LD * 8, g.R, 0),
                       .loc = lmad2(0, 8, 8, g.K, 1, (int64_t)g.K * 8, g.R, 0),
                       .buf = g.a };
    if (g.planes > 1) { /* the same rows as planes x rows: a nest of 3, its outer loop short */
        const int rp = g.R / g.planes;
        g.d = (struct pdesc){
            .seg = g.m.seg, .level = 1, .ndepth = 3, .trips = { g.planes, rp, g.K }, .nrefs = 1
        };
        ovl_lmad_t rem = lmad2((int64_t)g.c0 * 8, 8, 8, g.K, 2, (int64_t)g.LD * 8, rp, 1);
        ovl_lmad_t loc = lmad2(0, 8, 8, g.K, 2, (int64_t)g.K * 8, rp, 1);
        rem.dim[rem.ndims++] = (ovl_lmad_dim_t){ (int64_t)rp * g.LD * 8, g.planes, 0 };
        loc.dim[loc.ndims++] = (ovl_lmad_dim_t){ (int64_t)rp * g.K * 8, g.planes, 0 };
        g.d.ref[0] = (struct pref){ .rank = 1, .rem = rem, .loc = loc, .buf = g.a };
        g.d0 = g.d;
        g.d0.level = 0;
    }
    char sz[32];
    FILE *f = bench_csv_open(CMD, o->csv);
    csv_header(f);
    int hosts = bench_hosts();
    if (bench_rank == 0)
        printf("plan %s: block %d x %d doubles of a %d x %d matrix on rank 1, columns from %d "
               "(%s in %d runs of %d B, stride %d B); %d reps, gap %ld us, progress %s, %d "
               "hosts; medians in us\n",
               kname, g.R, g.K, g.R, g.LD, g.c0,
               bench_fmt_size((size_t)g.R * (size_t)g.K * 8, sz, sizeof sz), g.R, g.K * 8, g.LD * 8,
               o->reps, o->gap_us, eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline",
               hosts);
    double *t = times_alloc(G_NV, o->reps > 5 ? o->reps : 5);

    if (reduce) {
        g.x = xalloc((size_t)g.K * sizeof(double));
        g.y = xalloc((size_t)g.R * sizeof(double));
        g.yref = xalloc((size_t)g.R * sizeof(double));
        for (int k = 0; k < g.K; k++)
            g.x[k] = 1.0 / (k + 1);
        matvec_rows(g.aref, g.x, g.yref, g.K, 0, g.R);
        /* the oracle's sweep, as gemm-panel's: S = R, R/2, ..., down to R/64 */
        sweep_open(&g.sw, g.R, g.R / 64, o->sweep_reps);
        g.oracle = sweep_oracle(&g.sw, &g.d, o->gap_us, panel_sweep_run, &g, &g.check);
        int on[G_NV] = { 1, 1, 1, 1, 0, 0 };
        warm_variants(G_NV, on, o->gap_us, 0, panel_run, &g, &g.check);
        time_variants(G_NV, on, o->reps, o->gap_us, 0, panel_run, &g, t);
        if (bench_rank == 0) {
            ovl_plan_info_t in = plan_info(plan_keyed(g.key, &g.d)), oin = plan_info(g.oracle);
            struct bench_stat st[4];
            for (int v = 0; v < 4; v++)
                st[v] = bench_stat_of(&t[v * o->reps], o->reps);
            const double pb = st[G_PLAN].med / st[G_BASE].med,
                         po = st[G_PLAN].med / st[G_ORACLE].med;
            char ch[48], c2[48];
            printf("%10s %10s %10s %10s %10s %10s %10s  %-16s %-10s %s\n", "base", "hand", "plan",
                   "oracle", "plan/base", "plan/hand", "plan/orac", "plan's choice", "predicted",
                   "oracle");
            printf("%10.1f %10.1f %10.1f %10.1f %10.3f %10.3f %10.3f  %-16s %-10.1f %s\n",
                   st[0].med * 1e6, st[1].med * 1e6, st[2].med * 1e6, st[3].med * 1e6, pb,
                   st[2].med / st[1].med, po, fmt_choice(&in, ch, sizeof ch),
                   in.predicted_us[in.protocol], fmt_choice(&oin, c2, sizeof c2));
            printf("plan/base %.3f  [target <= 1.02: %s]; plan/oracle %.3f\n", pb,
                   pb <= 1.02 ? "met" : "missed", po);
            sweep_print(&g.sw);
            for (int v = 0; v < 4; v++)
                csv_row(f, "reduce", "block", gname[v], o->reps, &st[v],
                        v == G_PLAN     ? &in
                        : v == G_ORACLE ? &oin
                                        : NULL,
                        v == G_PLAN     ? in.predicted_us[in.protocol]
                        : v == G_ORACLE ? oin.predicted_us[oin.protocol]
                                        : -1,
                        "");
            sweep_csv(f, "reduce", "block", &g.sw, "");
        }
        sweep_drop_plans(&g.sw);
        g.oracle = OVL_PLAN_NULL;
    } else {
        /* the oracle's sweep: S = R, R/2, ..., down to R/64 (at least 1) */
        sweep_open(&g.sw, g.R / g.planes, g.R / 64, o->sweep_reps);
        if (bench_rank == 0)
            printf("%-6s %6s %9s %8s %9s %9s %9s %9s %9s %9s %9s  %-14s %-14s %s\n", "ratio", "M",
                   "comm", "measured", "base", "hand", "plan", "oracle", "plan/base", "plan/hand",
                   "plan/orac", "plan", "oracle", "plan<=1.05*oracle");
        for (int ri = 0; ri < o->nratio; ri++) {
            const double ratio = o->ratio[ri];
            /* communication alone: base's transfer */
            int onx[G_NV] = { 0, 0, 0, 0, 1 };
            warm_variants(G_NV, onx, o->gap_us, 0, panel_run, &g, &g.check);
            time_variants(G_NV, onx, 5, o->gap_us, 0, panel_run, &g, t);
            double tc = 0, meas = 0;
            if (bench_rank == 0) {
                tc = median_of(&t[G_XFER * 5], 5);
                meas = panel_choose_m(&g, ratio, tc);
            }
            /* the sweep */
            g.oracle = sweep_oracle(&g.sw, &g.d, o->gap_us, panel_sweep_run, &g, &g.check);
            /* the timed variants */
            int on[G_NV] = { 1, 1, 1, 1, 0, g.planes > 1 };
            warm_variants(G_NV, on, o->gap_us, 0, panel_run, &g, &g.check);
            time_variants(G_NV, on, o->reps, o->gap_us, 0, panel_run, &g, t);
            if (bench_rank == 0) {
                ovl_plan_info_t pin = plan_info(plan_keyed(g.key, &g.d)), oin = plan_info(g.oracle);
                struct bench_stat st[4];
                for (int v = 0; v < 4; v++)
                    st[v] = bench_stat_of(&t[v * o->reps], o->reps);
                char c1[48], c2[48], cas[64], note[96];
                const double po = st[G_PLAN].med / st[G_ORACLE].med;
                printf("%-6g %6d %9.1f %8.2f %9.1f %9.1f %9.1f %9.1f %9.3f %9.3f %9.3f  %-14s "
                       "%-14s %s\n",
                       ratio, g.M, tc * 1e6, meas, st[0].med * 1e6, st[1].med * 1e6,
                       st[2].med * 1e6, st[3].med * 1e6, st[2].med / st[0].med,
                       st[2].med / st[1].med, po, fmt_choice(&pin, c1, sizeof c1),
                       fmt_choice(&oin, c2, sizeof c2), po <= 1.05 ? "ok" : "no");
                if (g.planes > 1) {
                    ovl_plan_info_t in0 =
                        plan_info(plan_keyed("ovl-bench-plan-gemm-panel-planes0", &g.d0));
                    struct bench_stat s0 = bench_stat_of(&t[G_PLAN0 * o->reps], o->reps);
                    printf("  plan0 (the same nest, strips of whole planes only): %.1f us, "
                           "%.3f x base; plan/plan0 %.3f; plan at depth %d, plan0 %s\n",
                           s0.med * 1e6, s0.med / st[0].med, st[2].med / s0.med, pin.level,
                           fmt_choice(&in0, c1, sizeof c1));
                    snprintf(cas, sizeof cas, "ratio=%g", ratio);
                    csv_row(f, "gemm-panel", cas, "plan0", o->reps, &s0, &in0,
                            in0.predicted_us[in0.protocol], "");
                }
                sweep_print(&g.sw);
                snprintf(cas, sizeof cas, "ratio=%g", ratio);
                snprintf(note, sizeof note, "M=%d;measured_ratio=%.3f;comm_us=%.1f", g.M, meas,
                         tc * 1e6);
                for (int v = 0; v < 4; v++)
                    csv_row(f, "gemm-panel", cas, gname[v], o->reps, &st[v],
                            v == G_PLAN     ? &pin
                            : v == G_ORACLE ? &oin
                                            : NULL,
                            v == G_PLAN     ? pin.predicted_us[pin.protocol]
                            : v == G_ORACLE ? oin.predicted_us[oin.protocol]
                                            : -1,
                            note);
                sweep_csv(f, "gemm-panel", cas, &g.sw, note);
                sweep_drop_plans(&g.sw);
                g.oracle = OVL_PLAN_NULL;
            }
        }
    }
    sweep_close(&g.sw);
    if (bench_rank == 0) {
        ovl_plan_t p = plan_keyed(g.key, &g.d);
        free_plan(&p);
        if (g.planes > 1) {
            p = plan_keyed("ovl-bench-plan-gemm-panel-planes0", &g.d0);
            free_plan(&p);
        }
    }
    bench_csv_close(f, o->csv);
    free(t);
    free(g.a);
    free(g.aref);
    free(g.b);
    free(g.c);
    free(g.cref);
    free(g.x);
    free(g.y);
    free(g.yref);
    BENCH_MPI(MPI_Type_free(&g.vec));
    mem_close(&g.m);
    bench_ovl_finalize();
    return 0;
}

/* ---- stencil and fields: combined and interleaved references --------------------------- */

enum { S_BASE, S_PLAN, S_PLAN3, S_NV };
static const char *const sname[S_NV] = { "base", "plan", "plan3" };

/* stencil: rows i, i+1, i+2 of a (T+2) x N matrix (the memory distance);
 * fields: the x, y and z of T rows of N structures of 3 doubles (the
 * interleaved references). Three reads each: into one buffer (plan, which
 * the planner reduces) or three (plan3, which it cannot). */
struct stencil {
    int fields;
    int T, N;
    struct mem m;
    struct pdesc d, d3;
    double *h, *h3[3], *out, *ref; /* the whole block; three T x N; T x N */
    size_t bytes;
    int check;
};

/* out[i] = the three inputs of row i summed: rows i, i+1, i+2 (a 3-point
 * stencil across rows), or a row's structures' fields (@st: the doubles
 * from one structure to the next, 1 or 3). */
static void st_rows(const double *r0, const double *r1, const double *r2, int64_t st, int64_t rs,
                    double *out, int N, int64_t i0, int64_t n)
{
    for (int64_t i = i0; i < i0 + n; i++)
        for (int j = 0; j < N; j++)
            out[i * N + j] = r0[i * rs + j * st] + r1[i * rs + j * st] + r2[i * rs + j * st];
}

static void st_strip(void *ctx, int64_t i0, int64_t n)
{
    struct stencil *x = ctx;
    if (x->fields)
        st_rows(x->h, x->h + 1, x->h + 2, 3, 3 * x->N, x->out, x->N, i0, n);
    else
        st_rows(x->h, x->h + x->N, x->h + 2 * x->N, 1, x->N, x->out, x->N, i0, n);
}

static void st_strip3(void *ctx, int64_t i0, int64_t n)
{
    struct stencil *x = ctx;
    st_rows(x->h3[0], x->h3[1], x->h3[2], 1, x->N, x->out, x->N, i0, n);
}

static const char *st_key(const struct stencil *x, int v)
{
    static const char *const k[2][2] = { { "ovl-bench-plan-stencil", "ovl-bench-plan-stencil3" },
                                         { "ovl-bench-plan-fields", "ovl-bench-plan-fields3" } };
    return k[x->fields][v == S_PLAN3];
}

static double st_run(void *ctx, int v)
{
    struct stencil *x = ctx;
    const size_t row = (size_t)x->N * 8;
    if (x->check) {
        memset(x->out, 0xff, (size_t)x->T * row);
        memset(x->h, 0xff, x->bytes);
    }
    double t0 = bench_now();
    if (v == S_BASE) {
        const int n = (int)(x->bytes / 8);
        BENCH_MPI(MPI_Get(x->h, n, MPI_DOUBLE, 1, 0, n, MPI_DOUBLE, x->m.win));
        BENCH_MPI(MPI_Win_flush(1, x->m.win));
        st_strip(x, 0, x->T);
    } else {
        plan_exec(plan_keyed(st_key(x, v), v == S_PLAN ? &x->d : &x->d3),
                  v == S_PLAN ? st_strip : st_strip3, x);
    }
    double t = bench_now() - t0;
    if (x->check && memcmp(x->out, x->ref, (size_t)x->T * row))
        bench_fail("%s, %s: the result differs from the local reference",
                   x->fields ? "fields" : "stencil", sname[v]);
    return t;
}

static int bench_plan_stencil(const struct opt *o, int fields)
{
    bench_require_two_ranks(CMD);
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);
    struct stencil x = { .fields = fields, .T = o->rows, .N = o->k };
    const int64_t row = (int64_t)x.N * 8, srow = fields ? 3 * row : row;
    x.bytes = (size_t)(fields ? x.T : x.T + 2) * (size_t)srow;
    mem_open(&x.m, bench_rank == 1 ? x.bytes : 0);
    if (bench_rank == 1)
        for (size_t w = 0; w < x.bytes / 8; w++)
            ((double *)x.m.wbase)[w] = ((double *)x.m.sbase)[w] = a_val((int)(w / 7), (int)w);
    mem_ready(&x.m);
    x.h = xalloc(x.bytes);
    x.out = xalloc((size_t)x.T * (size_t)row);
    x.ref = xalloc((size_t)x.T * (size_t)row);
    double *src = xalloc(x.bytes);
    for (size_t w = 0; w < x.bytes / 8; w++)
        src[w] = a_val((int)(w / 7), (int)w);
    double *keep = x.h;
    x.h = src; /* the reference from the same layout */
    st_strip(&x, 0, x.T);
    memcpy(x.ref, x.out, (size_t)x.T * (size_t)row);
    x.h = keep;
    free(src);
    x.d = (struct pdesc){ .seg = x.m.seg, .ndepth = 1 + fields, .trips = { x.T, x.N }, .nrefs = 3 };
    x.d3 = x.d;
    for (int k = 0; k < 3; k++) {
        const ovl_lmad_t one =
            fields ? lmad2(k * 8, 8, 24, x.N, 1, srow, x.T, 0)
                   : (ovl_lmad_t){ .base = k * row,
                                   .elem = row,
                                   .ndims = 1,
                                   .dim = { { .stride = row, .count = x.T, .depth = 0 } } };
        ovl_lmad_t loc3 = fields ? lmad2(0, 8, 8, x.N, 1, row, x.T, 0) : one;
        loc3.base = 0;
        x.h3[k] = xalloc((size_t)x.T * (size_t)row);
        x.d.ref[k] = (struct pref){ .rank = 1, .rem = one, .loc = one, .buf = x.h };
        x.d3.ref[k] = (struct pref){ .rank = 1, .rem = one, .loc = loc3, .buf = x.h3[k] };
    }
    FILE *f = bench_csv_open(CMD, o->csv);
    csv_header(f);
    double *t = times_alloc(S_NV, o->reps);
    int on[S_NV] = { 1, 1, 1 };
    const int hosts = bench_hosts(); /* collective */
    warm_variants(S_NV, on, o->gap_us, 0, st_run, &x, &x.check);
    time_variants(S_NV, on, o->reps, o->gap_us, 0, st_run, &x, t);
    if (bench_rank == 0) {
        char sz[32], c1[48], c3[48];
        ovl_plan_info_t in = plan_info(plan_keyed(st_key(&x, S_PLAN), &x.d));
        ovl_plan_info_t in3 = plan_info(plan_keyed(st_key(&x, S_PLAN3), &x.d3));
        struct bench_stat st[S_NV];
        for (int v = 0; v < S_NV; v++)
            st[v] = bench_stat_of(&t[v * o->reps], o->reps);
        if (fields)
            printf("plan fields: x, y, z of %d rows of %d structures of 3 doubles on rank 1 "
                   "(%s), summed per structure; plan: the three reads into one array of "
                   "structures (interleaved: %d merged), plan3: into three arrays; ",
                   x.T, x.N, bench_fmt_size(x.bytes, sz, sizeof sz), in.interleaved);
        else
            printf("plan stencil: rows i, i+1, i+2 of a %d x %d matrix of doubles on rank 1 "
                   "(%s), %d rows summed; plan: the three reads into one halo buffer "
                   "(combined: %d), plan3: into three buffers; ",
                   x.T + 2, x.N, bench_fmt_size(x.bytes, sz, sizeof sz), x.T, in.combined);
        printf("%d reps, gap %ld us, progress %s, %d hosts; medians in us\n", o->reps, o->gap_us,
               eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline", hosts);
        printf("%10s %10s %10s %10s %10s  %-16s %-16s %s\n", "base", "plan", "plan3", "plan/base",
               "plan/plan3", "plan's choice", "plan3's", "ops plan / plan3");
        printf("%10.1f %10.1f %10.1f %10.3f %10.3f  %-16s %-16s %" PRId64 " / %" PRId64 "\n",
               st[0].med * 1e6, st[1].med * 1e6, st[2].med * 1e6, st[1].med / st[0].med,
               st[1].med / st[2].med, fmt_choice(&in, c1, sizeof c1),
               fmt_choice(&in3, c3, sizeof c3), in.ops, in3.ops);
        if (o->explain)
            BENCH_OVL(ovl_plan_explain(plan_keyed(st_key(&x, S_PLAN), &x.d), stdout));
        for (int v = 0; v < S_NV; v++)
            csv_row(f, fields ? "fields" : "stencil", fields ? "aos" : "rows", sname[v], o->reps,
                    &st[v],
                    v == S_PLAN    ? &in
                    : v == S_PLAN3 ? &in3
                                   : NULL,
                    v == S_PLAN    ? in.predicted_us[in.protocol]
                    : v == S_PLAN3 ? in3.predicted_us[in3.protocol]
                                   : -1,
                    "");
    }
    {
        ovl_plan_t p = plan_keyed(st_key(&x, S_PLAN), &x.d);
        free_plan(&p);
        p = plan_keyed(st_key(&x, S_PLAN3), &x.d3);
        free_plan(&p);
    }
    bench_csv_close(f, o->csv);
    free(t);
    free(x.h);
    free(x.out);
    free(x.ref);
    for (int k = 0; k < 3; k++)
        free(x.h3[k]);
    mem_close(&x.m);
    bench_ovl_finalize();
    return 0;
}

/* ---- halo3d ------------------------------------------------------------------------------- */

/* halo_run's variants; H_NV + i is the oracle's sweep configuration i */
enum { H_DT, H_RUNS, H_BBOX, H_PACK, H_AUTO, H_BASE, H_HAND, H_ORACLE, H_XFER, H_NV };
static const char *const hname[H_NV] = { "datatype", "runs", "bbox",   "pack", "auto",
                                         "base",     "hand", "oracle", "xfer" };
static const char *const face_name[3] = { "z", "y", "x" };

struct halo {
    int N, w;
    struct mem m;
    MPI_Datatype sub;
    ovl_plan_t p[H_AUTO + 1];
    ovl_plan_t oracle;
    struct sweep sw;
    double *buf, *fref; /* the face as read, as it should be (N x N) */
    double *res, *rref; /* per row: the sum */
    int check;
};

static double h_val(int z, int y, int x)
{
    return (double)(((z * 131 + y) * 17 + x) % 4099) * 0.5 - 1000.0;
}

/* Row i of the face summed w times, in order. */
static void halo_rows(const double *buf, double *res, int N, int w, int64_t i0, int64_t n)
{
    for (int64_t i = i0; i < i0 + n; i++) {
        const double *r = buf + i * N;
        double s = 0;
        for (int pass = 0; pass < w; pass++)
            for (int x = 0; x < N; x++)
                s += r[x];
        res[i] = s;
    }
}

static void halo_strip(void *ctx, int64_t i0, int64_t n)
{
    struct halo *h = ctx;
    halo_rows(h->buf, h->res, h->N, h->w, i0, n);
}

static double halo_run(void *ctx, int v)
{
    struct halo *h = ctx;
    const size_t fb = (size_t)h->N * (size_t)h->N * sizeof(double);
    if (h->check) { /* NaNs: a row summed before it arrived, or not at all, cannot match */
        memset(h->buf, 0xff, fb);
        memset(h->res, 0xff, (size_t)h->N * sizeof(double));
    }
    MPI_Request rq = MPI_REQUEST_NULL;
    double t0 = bench_now();
    if (v == H_BASE || v == H_XFER) {
        BENCH_MPI(MPI_Get(h->buf, h->N * h->N, MPI_DOUBLE, 1, 0, 1, h->sub, h->m.win));
        BENCH_MPI(MPI_Win_flush(1, h->m.win));
        if (v == H_BASE)
            halo_strip(h, 0, h->N);
    } else if (v == H_HAND) {
        BENCH_MPI(MPI_Rget(h->buf, h->N * h->N, MPI_DOUBLE, 1, 0, 1, h->sub, h->m.win, &rq));
        BENCH_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        /* MPICH CH4/UCX: a non-contiguous MPI_Rget's bytes land at a flush
         * (pmodels/mpich#7896), so a program on it must flush */
        BENCH_MPI(MPI_Win_flush_local(1, h->m.win));
        halo_strip(h, 0, h->N);
    } else if (v == H_ORACLE) {
        plan_exec(h->oracle, halo_strip, h);
    } else if (v >= H_NV) {
        plan_exec(h->sw.p[v - H_NV], halo_strip, h);
    } else {
        plan_exec(h->p[v], halo_strip, h);
    }
    double t = bench_now() - t0;
    if (h->check && v != H_XFER && memcmp(h->res, h->rref, (size_t)h->N * sizeof(double)))
        bench_fail("halo3d, %s: the sums differ from the local reference",
                   v < H_NV ? hname[v] : "a sweep configuration");
    return t;
}

static double halo_sweep_run(void *ctx, int i)
{
    return halo_run(ctx, H_NV + i);
}

/* Seconds to sum the reference face's rows @w times (median of 3, rank 0). */
static double halo_compute_s(struct halo *h, int w)
{
    double v[3];
    for (int k = 0; k < 3; k++) {
        double t0 = bench_now();
        halo_rows(h->fref, h->rref, h->N, w, 0, h->N);
        v[k] = bench_now() - t0;
    }
    return median_of(v, 3);
}

/* Choose W so that the sums take @ratio x @tc seconds; the measured ratio.
 * The reference sums (h->rref) are left computed with that W. */
static double halo_choose_w(struct halo *h, double ratio, double tc)
{
    double per = halo_compute_s(h, 8) / 8, meas = 0;
    for (int round = 0; round < 3; round++) {
        double want = ratio * tc / (per > 0 ? per : 1e-9);
        h->w = want < 1 ? 1 : want > 1e6 ? 1000000 : (int)lround(want);
        double tw = halo_compute_s(h, h->w);
        meas = tw / tc;
        if (fabs(meas / ratio - 1) < 0.1 || h->w == 1 || h->w == 1000000)
            break;
        per = tw / h->w;
    }
    return meas;
}

static int bench_plan_halo3d(const struct opt *o)
{
    bench_require_two_ranks(CMD);
    const int N = o->n > 0 ? o->n : 64, idx = 1;
    if (N < 2 || N > 512)
        bench_usage_error(CMD, "--n %d: halo3d takes 2 to 512", N);
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);
    struct halo h = { .N = N, .sub = MPI_DATATYPE_NULL };
    const size_t bytes = (size_t)N * N * N * sizeof(double);
    mem_open(&h.m, bench_rank == 1 ? bytes : 0);
    if (bench_rank == 1)
        for (int z = 0; z < N; z++)
            for (int y = 0; y < N; y++)
                for (int x = 0; x < N; x++) {
                    size_t at = ((size_t)z * N + y) * N + x;
                    ((double *)h.m.wbase)[at] = ((double *)h.m.sbase)[at] = h_val(z, y, x);
                }
    mem_ready(&h.m);
    h.buf = xalloc((size_t)N * N * sizeof(double));
    h.fref = xalloc((size_t)N * N * sizeof(double));
    h.res = xalloc((size_t)N * sizeof(double));
    h.rref = xalloc((size_t)N * sizeof(double));
    FILE *f = bench_csv_open(CMD, o->csv);
    csv_header(f);
    int hosts = bench_hosts();
    double *t = times_alloc(H_NV, o->reps > 5 ? o->reps : 5);
    const int64_t E = 8, row = (int64_t)N * 8, plane = (int64_t)N * N * 8;
    if (bench_rank == 0)
        printf("plan halo3d: %d^3 doubles on rank 1, faces at index %d (%zu B each); %d reps, gap "
               "%ld us, progress %s, %d hosts; medians in us, W = passes of the sum per row\n",
               N, idx, (size_t)N * N * 8, o->reps, o->gap_us,
               eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline", hosts);
    /* the oracle's sweep, per face and ratio: S = N, N/2, ..., down to N/64 */
    sweep_open(&h.sw, N, N / 64, o->sweep_reps);
    for (int face = 0; face < 3; face++) {
        /* the face: rows along its slowest remaining dimension, N elements each */
        struct pdesc d = { .seg = h.m.seg, .ndepth = 2, .trips = { N, N }, .nrefs = 1 };
        ovl_lmad_t loc = lmad2(0, E, E, N, 1, row, N, 0), rem;
        int subsz[3] = { N, N, N }, start[3] = { 0, 0, 0 };
        subsz[face] = 1;
        start[face] = idx;
        if (face == 0) /* z = idx: one contiguous block */
            rem = lmad2(idx * plane, E, E, N, 1, row, N, 0);
        else if (face == 1) /* y = idx: N runs of N doubles */
            rem = lmad2(idx * row, E, E, N, 1, plane, N, 0);
        else /* x = idx: single doubles */
            rem = lmad2(idx * E, E, row, N, 1, plane, N, 0);
        d.ref[0] = (struct pref){ .rank = 1, .rem = rem, .loc = loc, .buf = h.buf };
        BENCH_MPI(MPI_Type_create_subarray(3, (int[]){ N, N, N }, subsz, start, MPI_ORDER_C,
                                           MPI_DOUBLE, &h.sub));
        BENCH_MPI(MPI_Type_commit(&h.sub));
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++)
                h.fref[(size_t)i * N + j] = face == 0   ? h_val(idx, i, j)
                                            : face == 1 ? h_val(i, idx, j)
                                                        : h_val(i, j, idx);
        int on[H_NV] = { 0 };
        on[H_BASE] = on[H_HAND] = on[H_ORACLE] = 1;
        char why[H_AUTO + 1][160];
        ovl_plan_info_t in[H_AUTO + 1];
        memset(in, 0, sizeof in);
        if (bench_rank == 0)
            for (int v = 0; v <= H_AUTO; v++) {
                why[v][0] = 0;
                h.p[v] = plan_new(&d, map_proto(v), 0, why[v], sizeof why[v]);
                if ((on[v] = h.p[v] != OVL_PLAN_NULL))
                    in[v] = plan_info(h.p[v]);
            }
        MPI_Bcast(on, H_NV, MPI_INT, 0, MPI_COMM_WORLD);
        if (bench_rank == 0) {
            char pd[H_AUTO][32];
            for (int q = 0; q < H_AUTO; q++)
                fmt_us(in[H_AUTO].predicted_us[q + 1] * 1e-6, in[H_AUTO].predicted_us[q + 1] >= 0,
                       pd[q], sizeof pd[q]);
            printf("face %s (%s): plan S=%" PRId64 ", lookahead %u; predicted us: datatype %s, "
                   "runs %s, bbox %s, pack %s\n",
                   face_name[face],
                   face == 0   ? "contiguous"
                   : face == 1 ? "N runs of N doubles, strided"
                               : "N*N single doubles, strided",
                   in[H_AUTO].strip, in[H_AUTO].lookahead, pd[0], pd[1], pd[2], pd[3]);
            for (int v = 0; v < H_AUTO; v++)
                if (!on[v])
                    printf("  %s n/a: %s\n", hname[v], why[v]);
            printf("  %-6s %6s %8s %9s %9s %9s %9s %9s %9s %9s %9s  %-8s %-8s %9s %9s %9s %9s "
                   "%9s  %s\n",
                   "ratio", "W", "measured", "datatype", "runs", "bbox", "pack", "auto", "base",
                   "hand", "oracle", "best", "pick", "pick/best", "auto/best", "auto/base",
                   "auto/hand", "auto/orac", "oracle");
        }
        for (int ri = 0; ri < o->nratio; ri++) {
            const double ratio = o->ratio[ri];
            int onx[H_NV] = { 0 };
            onx[H_XFER] = 1;
            warm_variants(H_NV, onx, o->gap_us, 0, halo_run, &h, &h.check);
            time_variants(H_NV, onx, 5, o->gap_us, 0, halo_run, &h, t);
            double tc = 0, meas = 0;
            if (bench_rank == 0) {
                tc = median_of(&t[H_XFER * 5], 5);
                meas = halo_choose_w(&h, ratio, tc);
            }
            h.oracle = sweep_oracle(&h.sw, &d, o->gap_us, halo_sweep_run, &h, &h.check);
            warm_variants(H_NV, on, o->gap_us, 0, halo_run, &h, &h.check);
            time_variants(H_NV, on, o->reps, o->gap_us, 0, halo_run, &h, t);
            if (bench_rank != 0)
                continue;
            struct bench_stat st[H_ORACLE + 1];
            int best = -1;
            for (int v = 0; v <= H_ORACLE; v++) {
                st[v] = on[v] ? bench_stat_of(&t[v * o->reps], o->reps) : (struct bench_stat){ 0 };
                if (v < H_AUTO && on[v] && (best < 0 || st[v].med < st[best].med))
                    best = v;
            }
            const int pick = (int)in[H_AUTO].protocol - 1;
            const ovl_plan_info_t oin = plan_info(h.oracle);
            char u[H_ORACLE + 1][32], cas[64], note[96], oc[48];
            for (int v = 0; v <= H_ORACLE; v++)
                fmt_us(st[v].med, on[v], u[v], sizeof u[v]);
            printf("  %-6g %6d %8.2f %9s %9s %9s %9s %9s %9s %9s %9s  %-8s %-8s %9.3f %9.3f %9.3f "
                   "%9.3f %9.3f  %s\n",
                   ratio, h.w, meas, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], hname[best],
                   hname[pick], st[pick].med / st[best].med, st[H_AUTO].med / st[best].med,
                   st[H_AUTO].med / st[H_BASE].med, st[H_AUTO].med / st[H_HAND].med,
                   st[H_AUTO].med / st[H_ORACLE].med, fmt_choice(&oin, oc, sizeof oc));
            sweep_print(&h.sw);
            snprintf(cas, sizeof cas, "face=%s;ratio=%g", face_name[face], ratio);
            snprintf(note, sizeof note, "W=%d;measured_ratio=%.3f;comm_us=%.1f", h.w, meas,
                     tc * 1e6);
            for (int v = 0; v <= H_ORACLE; v++)
                if (on[v])
                    csv_row(f, "halo3d", cas, hname[v], o->reps, &st[v],
                            v <= H_AUTO     ? &in[v]
                            : v == H_ORACLE ? &oin
                                            : NULL,
                            v < H_AUTO      ? in[H_AUTO].predicted_us[v + 1]
                            : v == H_AUTO   ? in[H_AUTO].predicted_us[in[H_AUTO].protocol]
                            : v == H_ORACLE ? oin.predicted_us[oin.protocol]
                                            : -1,
                            note);
            sweep_csv(f, "halo3d", cas, &h.sw, note);
            sweep_drop_plans(&h.sw);
            h.oracle = OVL_PLAN_NULL;
        }
        for (int v = 0; v <= H_AUTO; v++)
            free_plan(&h.p[v]);
        BENCH_MPI(MPI_Type_free(&h.sub));
    }
    sweep_close(&h.sw);
    bench_csv_close(f, o->csv);
    free(t);
    free(h.buf);
    free(h.fref);
    free(h.res);
    free(h.rref);
    mem_close(&h.m);
    bench_ovl_finalize();
    return 0;
}

/* ---- transpose ----------------------------------------------------------------------------- */

enum { T_BASE, T_HAND, T_PLAN, T_COLD, T_ORACLE, T_NV };
static const char *const tname[T_NV] = { "base", "hand", "plan", "cold", "oracle" };

struct tr {
    int N, P, nb, me;
    struct mem m;
    MPI_Datatype vec; /* a column block: N blocks of nb doubles, stride N */
    struct pdesc d;
    double *recv, *out; /* per other rank k: N x nb as read, nb x N transposed */
    ovl_plan_t oracle;
    struct sweep sw;
    ovl_plan_info_t cold; /* the last cold plan's choice */
    int check;
};

static const char *const TR_KEY = "ovl-bench-plan-transpose";

static int tr_peer(const struct tr *x, int k)
{
    return (x->me + 1 + k) % x->P;
}

/* Rows [i0, i0 + n) of block k, transposed into out. */
static void tr_rows(struct tr *x, int k, int64_t i0, int64_t n)
{
    const double *in = x->recv + (size_t)k * x->N * x->nb;
    double *o = x->out + (size_t)k * x->nb * x->N;
    for (int64_t i = i0; i < i0 + n; i++)
        for (int j = 0; j < x->nb; j++)
            o[(size_t)j * x->N + i] = in[i * x->nb + j];
}

static void tr_strip(void *ctx, int64_t i0, int64_t n)
{
    struct tr *x = ctx;
    for (int k = 0; k < x->P - 1; k++)
        tr_rows(x, k, i0, n);
}

static double tr_val(int r, int N, int i, int j)
{
    return (double)r * N * N + (double)i * N + j;
}

static double tr_run(void *ctx, int v)
{
    struct tr *x = ctx;
    const size_t blk = (size_t)x->N * x->nb;
    if (x->check) {
        memset(x->recv, 0xff, (size_t)(x->P - 1) * blk * sizeof(double));
        memset(x->out, 0xff, (size_t)(x->P - 1) * blk * sizeof(double));
    }
    MPI_Request rq[OVL_PLAN_MAX_REFS];
    MPI_Status sts[OVL_PLAN_MAX_REFS];
    const MPI_Aint disp = (MPI_Aint)x->me * x->nb * 8;
    double t0 = bench_now();
    if (v == T_BASE) {
        for (int k = 0; k < x->P - 1; k++) {
            BENCH_MPI(MPI_Get(x->recv + k * blk, (int)blk, MPI_DOUBLE, tr_peer(x, k), disp, 1,
                              x->vec, x->m.win));
            BENCH_MPI(MPI_Win_flush(tr_peer(x, k), x->m.win));
            tr_rows(x, k, 0, x->N);
        }
    } else if (v == T_HAND) {
        for (int k = 0; k < x->P - 1; k++)
            BENCH_MPI(MPI_Rget(x->recv + k * blk, (int)blk, MPI_DOUBLE, tr_peer(x, k), disp, 1,
                               x->vec, x->m.win, &rq[k]));
        BENCH_MPI(MPI_Waitall(x->P - 1, rq, sts));
        /* MPICH CH4/UCX: a non-contiguous MPI_Rget's bytes land at a flush */
        BENCH_MPI(MPI_Win_flush_local_all(x->m.win));
        tr_strip(x, 0, x->N);
    } else if (v == T_PLAN) {
        plan_exec(plan_keyed(TR_KEY, &x->d), tr_strip, x);
    } else if (v == T_COLD) { /* a new plan: its first execution, on predictions alone */
        ovl_plan_t p = plan_new(&x->d, OVL_PLAN_AUTO, 0, NULL, 0);
        plan_exec(p, tr_strip, x);
        x->cold = plan_info(p);
        free_plan(&p);
    } else if (v == T_ORACLE) {
        plan_exec(x->oracle, tr_strip, x);
    } else { /* the sweep's configuration v - T_NV */
        plan_exec(x->sw.p[v - T_NV], tr_strip, x);
    }
    double t = bench_now() - t0;
    if (x->check)
        for (int k = 0; k < x->P - 1; k++)
            for (int j = 0; j < x->nb; j++)
                for (int i = 0; i < x->N; i++)
                    if (x->out[k * blk + (size_t)j * x->N + i] !=
                        tr_val(tr_peer(x, k), x->N, i, x->me * x->nb + j))
                        bench_fail("transpose, %s: element (%d, %d) from rank %d is wrong",
                                   v < T_NV ? tname[v] : "a sweep configuration", j, i,
                                   tr_peer(x, k));
    return t;
}

static double tr_sweep_run(void *ctx, int i)
{
    return tr_run(ctx, T_NV + i);
}

static int bench_plan_transpose(const struct opt *o)
{
    const int P = bench_size;
    if (P < 2 || P > OVL_PLAN_MAX_REFS + 1)
        bench_usage_error(CMD, "transpose needs 2 to %d ranks, got %d", OVL_PLAN_MAX_REFS + 1, P);
    int N = o->n;
    if (N <= 0) { /* about 1 MiB read per rank: (P - 1) blocks of N x N/P doubles */
        double n = sqrt((double)(1 << 20) * P / (8.0 * (P - 1)));
        N = (int)lround(n / P) * P;
        N = N < P ? P : N;
    }
    if (N % P)
        bench_usage_error(CMD, "--n %d is not a multiple of the %d ranks", N, P);
    if (N > 16384)
        bench_usage_error(CMD, "--n %d: at most 16384", N);
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);
    struct tr x = { .N = N, .P = P, .nb = N / P, .me = bench_rank, .vec = MPI_DATATYPE_NULL };
    const size_t bytes = (size_t)N * N * sizeof(double);
    mem_open(&x.m, bytes);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            ((double *)x.m.wbase)[(size_t)i * N + j] = ((double *)x.m.sbase)[(size_t)i * N + j] =
                tr_val(x.me, N, i, j);
    mem_ready(&x.m);
    BENCH_MPI(MPI_Type_vector(N, x.nb, N, MPI_DOUBLE, &x.vec));
    BENCH_MPI(MPI_Type_commit(&x.vec));
    const size_t blk = (size_t)N * x.nb;
    x.recv = xalloc((size_t)(P - 1) * blk * sizeof(double));
    x.out = xalloc((size_t)(P - 1) * blk * sizeof(double));
    x.d = (struct pdesc){ .seg = x.m.seg, .ndepth = 2, .trips = { N, x.nb }, .nrefs = P - 1 };
    for (int k = 0; k < P - 1; k++)
        x.d.ref[k] = (struct pref){ .rank = tr_peer(&x, k),
                                    .rem = lmad2((int64_t)x.me * x.nb * 8, 8, 8, x.nb, 1,
                                                 (int64_t)N * 8, N, 0),
                                    .loc = lmad2(0, 8, 8, x.nb, 1, (int64_t)x.nb * 8, N, 0),
                                    .buf = x.recv + k * blk };
    FILE *f = bench_csv_open(CMD, o->csv);
    csv_header(f);
    int hosts = bench_hosts();
    /* the oracle's sweep: every protocol at S = N, N/2, ..., N/64, every
     * rank planning; rank 0 holds the slowest rank's times and picks */
    struct sweep *w = &x.sw;
    sweep_open(w, N, N / 64, o->sweep_reps);
    sweep_plans(w, &x.d);
    BENCH_MPI(MPI_Allreduce(MPI_IN_PLACE, w->on, w->n, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    warm_variants(w->n, w->on, o->gap_us, 1, tr_sweep_run, &x, &x.check);
    time_variants(w->n, w->on, w->reps, o->gap_us, 1, tr_sweep_run, &x, w->t);
    sweep_rank(w);
    BENCH_MPI(MPI_Bcast(&w->best, 1, MPI_INT, 0, MPI_COMM_WORLD));
    x.oracle = w->p[w->best];
    double *t = times_alloc(T_NV, o->reps);
    int on[T_NV] = { 1, 1, 1, 1, 1 };
    warm_variants(T_NV, on, o->gap_us, 1, tr_run, &x, &x.check);
    time_variants(T_NV, on, o->reps, o->gap_us, 1, tr_run, &x, t);
    if (bench_rank == 0) {
        char sz[32], ch[48], c2[48], c3[48], cas[64];
        ovl_plan_info_t in = plan_info(plan_keyed(TR_KEY, &x.d)), oin = plan_info(x.oracle);
        printf("plan transpose: %d ranks, N = %d, column blocks of %d x %d doubles, %s read per "
               "rank; %d reps, gap %ld us, progress %s, %d hosts; medians in us, the slowest "
               "rank's\n",
               P, N, N, x.nb, bench_fmt_size((size_t)(P - 1) * blk * 8, sz, sizeof sz), o->reps,
               o->gap_us, eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline", hosts);
        struct bench_stat st[T_NV];
        for (int v = 0; v < T_NV; v++)
            st[v] = bench_stat_of(&t[v * o->reps], o->reps);
        printf("%10s %10s %10s %10s %10s %10s %10s %10s  %-16s %-16s %s\n", "base", "hand", "plan",
               "cold", "oracle", "plan/base", "plan/orac", "cold/orac", "plan's choice",
               "cold's choice", "oracle");
        printf("%10.1f %10.1f %10.1f %10.1f %10.1f %10.3f %10.3f %10.3f  %-16s %-16s %s\n",
               st[0].med * 1e6, st[1].med * 1e6, st[2].med * 1e6, st[3].med * 1e6, st[4].med * 1e6,
               st[2].med / st[0].med, st[2].med / st[4].med, st[3].med / st[4].med,
               fmt_choice(&in, ch, sizeof ch), fmt_choice(&x.cold, c2, sizeof c2),
               fmt_choice(&oin, c3, sizeof c3));
        sweep_print(w);
        if (o->explain) /* the plan and its alternatives, rank 0's */
            BENCH_OVL(ovl_plan_explain(plan_keyed(TR_KEY, &x.d), stdout));
        snprintf(cas, sizeof cas, "P=%d;N=%d", P, N);
        for (int v = 0; v < T_NV; v++)
            csv_row(f, "transpose", cas, tname[v], o->reps, &st[v],
                    v == T_PLAN     ? &in
                    : v == T_COLD   ? &x.cold
                    : v == T_ORACLE ? &oin
                                    : NULL,
                    v == T_PLAN     ? in.predicted_us[in.protocol]
                    : v == T_COLD   ? x.cold.predicted_us[x.cold.protocol]
                    : v == T_ORACLE ? oin.predicted_us[oin.protocol]
                                    : -1,
                    "");
        sweep_csv(f, "transpose", cas, w, "");
    }
    sweep_close(w);
    {
        ovl_plan_t p = plan_keyed(TR_KEY, &x.d);
        free_plan(&p);
    }
    bench_csv_close(f, o->csv);
    free(t);
    free(x.recv);
    free(x.out);
    BENCH_MPI(MPI_Type_free(&x.vec));
    mem_close(&x.m);
    bench_ovl_finalize();
    return 0;
}

/* ---- overhead ------------------------------------------------------------------------------ */

enum { O_DESCRIBE, O_COMMIT, O_RERUN, O_REDESCRIBE, O_EXEC, O_MPI, O_NV };

static int bench_plan_overhead(const struct opt *o)
{
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);
    const int me = bench_rank;
    /* a 64 x 32 x 16 array of doubles on this rank; two references to
     * 64 x 16 x 8 sub-blocks of it, read into dense local arrays */
    const int sizes[3] = { 64, 32, 16 }, sub[3] = { 64, 16, 8 };
    const size_t bytes = (size_t)64 * 32 * 16 * 8;
    struct mem m;
    mem_open(&m, bytes);
    for (size_t w = 0; w < bytes / 8; w++)
        ((uint64_t *)m.sbase)[w] = word_at(w);
    mem_ready(&m);
    ovl_lmad_t ra, rb, loc;
    BENCH_OVL(ovl_lmad_from_subarray(3, sizes, sub, (int[]){ 0, 0, 0 }, MPI_ORDER_C, 8, &ra));
    BENCH_OVL(ovl_lmad_from_subarray(3, sizes, sub, (int[]){ 0, 16, 8 }, MPI_ORDER_C, 8, &rb));
    BENCH_OVL(ovl_lmad_from_subarray(3, sub, sub, (int[]){ 0, 0, 0 }, MPI_ORDER_C, 8, &loc));
    double *la = xalloc((size_t)64 * 16 * 8 * 8), *lb = xalloc((size_t)64 * 16 * 8 * 8);
    struct pdesc d = { .seg = m.seg, .ndepth = 3, .trips = { 64, 16, 8 }, .nrefs = 2 };
    /* described as read from the next rank (another host on the cluster:
     * a plan on this node is one strip, OVL_RMA_LOCAL=direct, and skips
     * the strip-size search); committed only, never executed */
    const int next = (me + 1) % bench_size;
    d.ref[0] = (struct pref){ .rank = next, .rem = ra, .loc = loc, .buf = la };
    d.ref[1] = (struct pref){ .rank = next, .rem = rb, .loc = loc, .buf = lb };
    /* one strip of one 8-byte element */
    struct pdesc d1 = { .seg = m.seg, .ndepth = 1, .trips = { 1 }, .nrefs = 1 };
    ovl_lmad_t one = { .base = 0, .elem = 8, .ndims = 1 };
    one.dim[0] = (ovl_lmad_dim_t){ .stride = 8, .count = 1, .depth = 0 };
    uint64_t dst[2] = { 0, 0 };
    d1.ref[0] = (struct pref){ .rank = me, .rem = one, .loc = one, .buf = &dst[0] };
    const int n = o->iters;
    double *t = times_alloc(O_NV, n);
    static const char *const KEY = "ovl-bench-plan-overhead";
    ovl_plan_info_t ein = { .protocol = OVL_PLAN_AUTO };
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) {
        ovl_plan_t cached = plan_keyed(KEY, &d), ex = plan_new(&d1, OVL_PLAN_AUTO, 0, NULL, 0);
        ein = plan_info(ex);
        const int warm = n / 10 < 50 ? 50 : n / 10;
        for (int it = -warm; it < n; it++) {
            const int r = it < 0 ? 0 : it;
            ovl_plan_t p = OVL_PLAN_NULL;
            int found = 0;
            /* (a) describe */
            double t0 = bench_now();
            BENCH_OVL(ovl_plan_create(NULL, &p, NULL));
            describe(p, &d);
            double t1 = bench_now();
            t[O_DESCRIBE * n + r] = t1 - t0;
            /* (b) analyse and plan */
            t0 = bench_now();
            BENCH_OVL(ovl_plan_commit(p, NULL));
            t1 = bench_now();
            t[O_COMMIT * n + r] = t1 - t0;
            BENCH_OVL(ovl_plan_free(&p));
            /* (c) a cached plan found again and committed */
            t0 = bench_now();
            BENCH_OVL(ovl_plan_create(KEY, &p, &found));
            BENCH_OVL(ovl_plan_commit(p, NULL));
            t1 = bench_now();
            t[O_RERUN * n + r] = t1 - t0;
            if (!found || p != cached)
                bench_fail("overhead: the cached plan was not found again");
            /* ... with its description given again (compared at commit) */
            t0 = bench_now();
            BENCH_OVL(ovl_plan_create(KEY, &p, &found));
            describe(p, &d);
            BENCH_OVL(ovl_plan_commit(p, NULL));
            t1 = bench_now();
            t[O_REDESCRIBE * n + r] = t1 - t0;
            /* (d) one 8-byte strip from this rank: the plan, then plain MPI,
             * their order alternated */
            for (int k = 0; k < 2; k++) {
                if ((k + it) % 2 == 0) {
                    int64_t i0 = 0, cnt = 0;
                    dst[0] = 0;
                    t0 = bench_now();
                    BENCH_OVL(ovl_plan_begin(ex));
                    BENCH_OVL(ovl_plan_next(ex, &i0, &cnt));
                    int64_t c1 = cnt;
                    BENCH_OVL(ovl_plan_next(ex, &i0, &cnt));
                    BENCH_OVL(ovl_plan_end(ex));
                    t1 = bench_now();
                    if (c1 != 1 || cnt != 0 || dst[0] != ((uint64_t *)m.sbase)[0])
                        bench_fail("overhead: the one-strip plan handed out %" PRId64
                                   " then %" PRId64 " iterations",
                                   c1, cnt);
                    t[O_EXEC * n + r] = t1 - t0;
                } else {
                    MPI_Request rq;
                    t0 = bench_now();
                    BENCH_MPI(MPI_Rget(&dst[1], 8, MPI_BYTE, me, 0, 8, MPI_BYTE, m.win, &rq));
                    BENCH_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
                    t1 = bench_now();
                    t[O_MPI * n + r] = t1 - t0;
                }
            }
        }
        free_plan(&cached);
        free_plan(&ex);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    FILE *f = bench_csv_open(CMD, o->csv);
    csv_header(f);
    if (me == 0) {
        struct bench_stat st[O_NV];
        for (int v = 0; v < O_NV; v++)
            st[v] = bench_stat_of(&t[v * n], n);
        static const char *const what[O_NV] = {
            "describe: create + 3 loops + 2 reads",    "analyse + plan: commit of a fresh plan",
            "re-run: create finding the key + commit", "re-run, the description given again",
            "execute: one 8-byte strip from self",     "MPI_Rget + MPI_Wait, 8 bytes from self"
        };
        static const char *const target[O_NV] = { "<= 5", "<= 3", "<= 0.5", "(none)", "", "" };
        static const double tmax[O_NV] = { 5, 3, 0.5, 0, 0, 0 };
        static const char *const cname[O_NV] = { "describe",   "commit", "rerun",
                                                 "redescribe", "exec",   "mpi" };
        char ch[48];
        printf("plan overhead: median of %d repetitions (us), rank 0, progress %s\n", n,
               eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline");
        printf("%-42s %9s %9s %9s  %s\n", "", "median", "min", "max", "target");
        for (int v = 0; v < O_NV; v++) {
            printf("%-42s %9.3f %9.3f %9.3f  %s%s\n", what[v], st[v].med * 1e6, st[v].min * 1e6,
                   st[v].max * 1e6, target[v],
                   tmax[v] > 0 ? (st[v].med * 1e6 <= tmax[v] ? " met" : " missed") : "");
            csv_row(f, "overhead", cname[v], v == O_MPI ? "mpi" : "plan", n, &st[v],
                    v == O_EXEC ? &ein : NULL, -1, "");
        }
        printf("execution minus MPI_Rget + MPI_Wait: %.3f us (the plan's protocol: %s)\n",
               (st[O_EXEC].med - st[O_MPI].med) * 1e6, fmt_choice(&ein, ch, sizeof ch));
    }
    bench_csv_close(f, o->csv);
    free(t);
    free(la);
    free(lb);
    mem_close(&m);
    bench_ovl_finalize();
    return 0;
}

/* ---- the command ---------------------------------------------------------------------------- */

int bench_plan(int argc, char **argv)
{
    struct opt o = { .reps = 5,
                     .sweep_reps = 3,
                     .iters = 2000,
                     .gap_us = 1000,
                     .max_bytes = (size_t)1 << 20,
                     .rows = 1024,
                     .planes = 1,
                     .k = 128,
                     .ld = 256,
                     .c0 = -1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            bench_help_exit(HELP);
        else if (!strcmp(a, "--reps"))
            o.reps = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 100000);
        else if (!strcmp(a, "--sweep-reps"))
            o.sweep_reps =
                (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 100000);
        else if (!strcmp(a, "--iters"))
            o.iters = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 10000000);
        else if (!strcmp(a, "--gap-us"))
            o.gap_us = bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 0, 10000000);
        else if (!strcmp(a, "--csv"))
            o.csv = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--explain"))
            o.explain = 1;
        else if (!strcmp(a, "--ratio"))
            o.nratio = parse_ratios(bench_optarg(CMD, argc, argv, &i), &o.ratio);
        else if (!strcmp(a, "--max-bytes")) {
            o.max_bytes = bench_parse_size(CMD, a, bench_optarg(CMD, argc, argv, &i));
            if (o.max_bytes < 1 || o.max_bytes > ((size_t)1 << 30))
                bench_usage_error(CMD, "--max-bytes: 1 to 1g");
        } else if (!strcmp(a, "--run"))
            o.nrun = bench_parse_long_list(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1 << 26,
                                           &o.run);
        else if (!strcmp(a, "--runs"))
            o.nruns = bench_parse_long_list(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1 << 20,
                                            &o.runs);
        else if (!strcmp(a, "--rows"))
            o.rows = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--k"))
            o.k = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1 << 16);
        else if (!strcmp(a, "--ld"))
            o.ld = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--c0"))
            o.c0 = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--planes"))
            o.planes = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--n"))
            o.n = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1 << 20);
        else if (a[0] == '-')
            bench_usage_error(CMD, "unknown option %s", a);
        else if (o.kernel)
            bench_usage_error(CMD, "two kernels given: %s and %s", o.kernel, a);
        else
            o.kernel = a;
    }
    if (!o.kernel)
        bench_usage_error(CMD, "no kernel given (map, gemm-panel, reduce, halo3d, transpose, "
                               "overhead)");
    if ((size_t)o.rows * (size_t)o.ld * 8 > ((size_t)1 << 31))
        bench_usage_error(CMD, "--rows x --ld: the matrix is above 2 GiB");
    if (!o.nratio)
        o.nratio = parse_ratios("0.25,1,4", &o.ratio);
    static const long run_def[] = { 8, 64, 512, 4096, 32768 };
    static const long runs_def[] = { 1, 4, 16, 64, 256, 1024, 4096 };
    if (!o.nrun) {
        o.nrun = 5;
        o.run = malloc(sizeof run_def);
        memcpy(o.run, run_def, sizeof run_def);
    }
    if (!o.nruns) {
        o.nruns = 7;
        o.runs = malloc(sizeof runs_def);
        memcpy(o.runs, runs_def, sizeof runs_def);
    }
    int rc;
    if (!strcmp(o.kernel, "map"))
        rc = bench_plan_map(&o);
    else if (!strcmp(o.kernel, "gemm-panel"))
        rc = bench_plan_panel(&o, 0);
    else if (!strcmp(o.kernel, "reduce"))
        rc = bench_plan_panel(&o, 1);
    else if (!strcmp(o.kernel, "halo3d"))
        rc = bench_plan_halo3d(&o);
    else if (!strcmp(o.kernel, "stencil"))
        rc = bench_plan_stencil(&o, 0);
    else if (!strcmp(o.kernel, "fields"))
        rc = bench_plan_stencil(&o, 1);
    else if (!strcmp(o.kernel, "transpose"))
        rc = bench_plan_transpose(&o);
    else if (!strcmp(o.kernel, "overhead"))
        rc = bench_plan_overhead(&o);
    else
        bench_usage_error(CMD,
                          "unknown kernel %s (map, gemm-panel, reduce, stencil, halo3d, "
                          "transpose, overhead)",
                          o.kernel);
    free(o.ratio);
    free(o.run);
    free(o.runs);
    return rc;
}
