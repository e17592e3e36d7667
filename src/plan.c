/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The loop-nest planner (front end): a loop nest's remote reads and writes
 * described once as LMADs (lmad.c), analysed at commit into a
 * communication plan, then executed strip by strip over one loop of the
 * nest (the outermost unless the commit allows deeper, choose_level()):
 * the reads of the strips ahead of the one the program computes on
 * in flight, the writes of a strip leaving once it is final (the next
 * ovl_plan_next, or ovl_plan_end, which completes them at their targets).
 * Write references that may overlap on one target are refused.
 *
 * The plan tuple (the paper's, section "Loop-nest planner" of
 * docs/ARCHITECTURE.md): Type is the protocol (ovl_plan_protocol_t),
 * Comm_Args the references, N the MPI operations of one execution, S the
 * iterations per strip of the loop strips are cut from, B_Issue the
 * operations one strip issues together, Init_Level and Sync_Level the
 * depth of that loop (the level: transfers are issued and retired there),
 * B_Sync the operations one ovl_plan_next retires.
 *
 * Each reference is cut per strip by replacing the count of its dimension
 * of the level's depth (those of the depths above: one point), on both
 * sides: a strip of n iterations at i is the strip of n iterations at 0
 * shifted by i strides of that depth and by the strides of the depths
 * above times their indices (remote: the target displacement; local: the
 * origin address). So the analysis is made for two strip shapes only, a
 * full strip and the last, shorter one of a row: their
 * runs paired remote to local (pieces), their bounding boxes, and their
 * derived datatypes, built with their lower bound at 0.
 *
 * Protocols: DATATYPE, one MPI_Rget per strip and reference with the two
 * datatypes (MPI packs and unpacks); RUNS, one MPI_Rget of MPI_BYTE per
 * piece, a strip's all issued together; BBOX, one MPI_Rget of the strip's
 * bounding box into a staging buffer, the pieces copied out when
 * ovl_plan_next hands the strip out. The choice is the least predicted
 * time: the measured protocol map (ovl__model_map_us) inside its grid, the
 * model's formulas elsewhere (ovl__m: RMA latency and bandwidth, the
 * per-message overhead, the copy rate), see predict(); then re-ranked on
 * measured executions (rerank()). The strip count is the model's split
 * decision for the plan's bytes (ovl__model_split).
 *
 * Every MPI request is an engine op of the domain in force at
 * ovl_plan_begin, through that domain's window of the segment (rma.c's
 * way); waits spin that engine. A plan belongs to one thread at a time.
 */
#include "ovl_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 255
/* RUNS and BBOX enumerate a strip's pieces; beyond this many per strip and
 * reference they are not offered (a datatype describes them instead). */
#define PIECES_MAX (1 << 16)
/* BBOX stages at most this many bytes per strip and reference. */
#define BBOX_MAX      ((int64_t)1 << 28)
#define LOOKAHEAD_MAX 64
/* Cost of one block of a derived datatype at both ends (MPI's datatype
 * engine walking it), in microseconds, in the DATATYPE formula. It prices
 * only strips the protocol maps do not cover (outside their grid, next to
 * a cell without a DATATYPE time, or no maps in the database): inside the
 * grid the measured times, which include this cost, decide (unloaded()). */
#define DT_BLOCK_US 0.05

/* Re-ranking (rerank()): an automatic plan whose executions take more
 * than RERANK_OVER x its prediction + RERANK_FLOOR_US (from the first
 * measured one: their mean, the median of the last RERANK_RUNS once there
 * are as many; the first execution not counted) tries the next protocol
 * by prediction, each at most once, and settles on the best measured. */
#define RERANK_RUNS     3
#define RERANK_OVER     1.25
#define RERANK_FLOOR_US 5.0

/* PACK chosen automatically without the progress thread: a read strip
 * whose target has not packed it within PACK_LATE_US + PACK_LATE_X x its
 * predicted time (the target computes, or waits outside ovl, say in
 * MPI_Barrier) is fetched by MPI_Rget instead (its receive cancelled, the
 * late message drained when it comes) and the plan leaves PACK. */
#define PACK_LATE_US 2000.0
#define PACK_LATE_X  10.0

enum { NPROTO = OVL_PLAN_PROTOCOLS };
static const char *const proto_name[NPROTO] = { "auto", "datatype", "runs", "bbox", "pack" };

struct piece {
    int64_t roff, loff, len; /* remote displacement, local offset, bytes */
};

/* PACK: the active message to the target (pack_serve()); a write's packed
 * bytes follow it. */
struct pack_hdr {
    uint64_t seg;   /* the segment's handle (the same on every rank) */
    int32_t write;  /* 1: unpack the payload into the segment, reply the code */
    int32_t tag;    /* a read's: the data's tag on comm_am_bulk */
    ovl_lmad_t rem; /* the strip's remote LMAD, base the displacement */
};

/* One strip shape of a reference: a full strip or the last one. */
struct shape {
    int64_t iters;
    ovl_lmad_t r, l; /* the sub-LMADs at iteration 0 */
    ovl_lmad_runs_t rr, lr;
    struct piece *pc;          /* built by prepare() for RUNS and BBOX only */
    int64_t npc;               /* pieces: exact once built, else est_pieces() */
    double slow;               /* the plan's load factor (load_factor()) */
    MPI_Datatype rtype, ltype; /* DATATYPE: lower bound 0 */
};

struct ref {
    int write; /* ovl_plan_write: puts when the strip is final */
    ovl_segment_t seg;
    int rank;
    ovl_lmad_t rem, loc;
    char *base;
    /* analysis */
    int invariant; /* no depth-0 dimension, or local: read whole with strip 0 (written
                    * with the last) */
    int local;     /* its target on this node (local_whole()): moved whole */
    /* combined (combine()): only the first @head iterations of the
     * program's reference are read (as loop-invariant), the others arrive
     * with reference @with, which reads the same bytes @head iterations
     * later into the same local bytes (the memory distance) */
    int64_t head;
    int with;
    /* interleaved (interleave()): the program's references @src, and the
     * @nsrc - 1 others of bitmask @members, each @gap bytes past the one
     * before on the target, read (or written) as this one */
    int src, nsrc;
    unsigned members;
    int64_t gap;
    int64_t rstep, lstep; /* bytes per outer iteration, each side */
    /* bytes per iteration of depth d <= the plan's level, each side
     * (choose_level(); moving references only) */
    int64_t rsd[OVL_PLAN_MAX_DEPTH], lsd[OVL_PLAN_MAX_DEPTH];
    struct shape sh[2]; /* full strip, last strip */
};

struct desc {
    int ndepth;
    int64_t trips[OVL_PLAN_MAX_DEPTH];
    int nrefs;
    struct ref refs[OVL_PLAN_MAX_REFS];
};

struct plan;
struct pop {
    struct ovl__op op;
    struct slot *sl;
    int64_t expect; /* PACK reads: the bytes the target sends (else -1) */
    /* PACK reads: what the op moves (the fallback's), and whether its
     * receive was cancelled */
    int ref, kind, tag, cancelled;
    int64_t rs, ls;
    char *stage;    /* PACK reads into a scattered local layout: received here, then
                  * unpacked (unpack()); NULL: straight into the buffer */
    atomic_int fin; /* completed (its MPI request no longer the op's) */
};
/* A strip in flight. */
struct slot {
    atomic_int left; /* ops not completed */
    atomic_int err;  /* first MPI error code of its ops, or PACK_REFUSED */
    int64_t strip;   /* -1: free */
    struct pop *ops;
    int64_t nops;                   /* the engine ops its last issue posted */
    char *stage[OVL_PLAN_MAX_REFS]; /* BBOX; PACK reads with a scattered local layout */
};

enum { ST_NEW, ST_COMMITTED, ST_RUNNING };

/* Strip runs remembered per plan (struct plan's rmemo): the 7 strip sizes
 * choose_strip() compares and their last strips, for up to 9 references
 * (more are computed again: still right, slower). */
#define RUNS_MEMO 128

/* A slot's err when a target answered a PACK read empty (not an MPI code:
 * those are >= 0). */
#define PACK_REFUSED (-1)

struct plan {
    struct plan *next;
    char *key;
    int state;
    struct desc d;   /* the description (committed when state > ST_NEW), references combined */
    struct desc u;   /* the program's description as committed (before combine()) */
    struct desc re;  /* a cached plan described again, compared at commit */
    int combined;    /* references combine() reduced to their heads */
    int interleaved; /* references interleave() merged into others */
    int redesc;
    ovl_param_t param; /* the commit's (field_mask 0: none) */
    /* analysis */
    ovl_plan_protocol_t proto;
    int forced;
    int64_t S, nstrips, ops, bytes;
    int64_t max_ops[2]; /* per strip: reads, writes */
    int writes;         /* references that write */
    unsigned lookahead;
    double slow; /* load factor: transfers' time beyond latency x this */
    int flows;   /* flows through this node the load factor assumes (0: none) */
    int direct;  /* every reference local (local_whole()): one strip */
    /* strips are cut from depth @level (choose_level(); Init_Level and
     * Sync_Level): @rows iterations of the depths above it, each cut into
     * strips of S of its @lt; ovl_plan_next counts iterations of depths 0
     * to the param's level flattened, @inner of them per iteration of
     * depth @level */
    int level;
    int64_t rows, lt, inner;
    const char *level_why; /* why not the param's level (NULL: it is, or none asked) */
    double pred[NPROTO];
    char pred_src[NPROTO]; /* 'm' the protocol map, 'f' the formulas, 'b' both */
    /* re-ranking: time spent in the plan's calls by recent executions, per
     * protocol (rerank()) */
    double meas[NPROTO][RERANK_RUNS];
    int nmeas[NPROTO];
    unsigned reranks;
    int ready;         /* the protocol's pieces and datatypes built (prepare()) */
    int pack_late;     /* this execution's PACK strips fetched by MPI_Rget instead (slot_wait()) */
    unsigned left_out; /* protocols (bit q) left out for good: PACK late, or not buildable */
    const char *out_why[NPROTO];
    int settled; /* no more re-ranking: forced, or every candidate measured */
    /* strip size from the measured computation (replan()) */
    int strip_measured;
    unsigned replans;
    double c_us;      /* computation per outermost iteration, first whole execution */
    uint64_t comp_ns; /* this execution's time between a strip handed out and the next call */
    uint64_t out_at;  /* when the last strip was handed out (0: none) */
    uint64_t in_ns;   /* this execution's time in begin / next / end */
    char why[NPROTO][96];
    /* the runs of reference j's strips of `iters` iterations, both sides,
     * computed once per analysis (the strip sizes the choice compares
     * repeat across protocols and calls); reset with the references */
    struct runs_memo {
        int j;
        int64_t iters;
        ovl_lmad_runs_t rr, lr;
    } rmemo[RUNS_MEMO];
    int nrmemo, rmemo_next;
    unsigned long analyses, runs;
    /* execution */
    struct slot *slots;  /* reads: lookahead + 1 */
    struct slot *wslots; /* writes: as many (NULL: no write reference) */
    int nslots;
    int64_t cur, issued; /* strip handed out (-1: none), strips issued */
    struct ovl__dom *dom;
};

static struct {
    pthread_mutex_t lock;
    struct plan *head;
} P = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ---- handles ------------------------------------------------------------- */

static int lookup(const char *fn, ovl_plan_t h, struct plan **out)
{
    struct plan *p = NULL;
    if (h == OVL_PLAN_NULL)
        return ovl__error(OVL_ERR_ARG, fn, "plan is OVL_PLAN_NULL");
    pthread_mutex_lock(&P.lock);
    for (struct plan *q = P.head; q; q = q->next)
        if (q == (struct plan *)h)
            p = q;
    pthread_mutex_unlock(&P.lock);
    if (!p)
        return ovl__error(OVL_ERR_ARG, fn, "plan %p was freed or never created", (void *)h);
    *out = p;
    return OVL_SUCCESS;
}

static void shapes_free(struct plan *p)
{
    for (int j = 0; j < p->d.nrefs; j++)
        for (int k = 0; k < 2; k++) {
            struct shape *s = &p->d.refs[j].sh[k];
            ovl__buf_free(s->pc);
            s->pc = NULL;
            if (s->rtype != MPI_DATATYPE_NULL)
                MPI_Type_free(&s->rtype);
            if (s->ltype != MPI_DATATYPE_NULL)
                MPI_Type_free(&s->ltype);
        }
}

/* @n zeroed elements of @size bytes from ovl__buf_alloc (a strip's ops:
 * up to 65536 pieces a reference). NULL on overflow or no memory. */
static void *buf_zalloc(int64_t n, size_t size)
{
    if (n <= 0 || (uint64_t)n > SIZE_MAX / size)
        return NULL;
    void *b = ovl__buf_alloc((size_t)n * size);
    if (b)
        memset(b, 0, (size_t)n * size);
    return b;
}

static void slots_free(struct plan *p)
{
    for (int i = 0; i < p->nslots; i++) {
        ovl__buf_free(p->slots[i].ops);
        for (int j = 0; j < OVL_PLAN_MAX_REFS; j++)
            ovl__buf_free(p->slots[i].stage[j]);
        if (p->wslots)
            ovl__buf_free(p->wslots[i].ops);
    }
    free(p->slots);
    free(p->wslots);
    p->slots = p->wslots = NULL;
    p->nslots = 0;
}

static void desc_init(struct desc *d)
{
    memset(d, 0, sizeof *d);
    for (int j = 0; j < OVL_PLAN_MAX_REFS; j++)
        for (int k = 0; k < 2; k++)
            d->refs[j].sh[k].rtype = d->refs[j].sh[k].ltype = MPI_DATATYPE_NULL;
}

int ovl_plan_create(const char *key, ovl_plan_t *plan, int *found)
{
    static const char *fn = "ovl_plan_create";
    int rc;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (!plan)
        return ovl__error(OVL_ERR_ARG, fn, "plan is NULL");
    if (key && strlen(key) > KEY_MAX)
        return ovl__error(OVL_ERR_ARG, fn, "key of %zu bytes, at most %d", strlen(key), KEY_MAX);
    pthread_mutex_lock(&P.lock);
    if (key)
        for (struct plan *q = P.head; q; q = q->next)
            if (q->key && !strcmp(q->key, key)) {
                pthread_mutex_unlock(&P.lock);
                *plan = (ovl_plan_t)q;
                if (found)
                    *found = 1;
                return OVL_SUCCESS;
            }
    struct plan *p = calloc(1, sizeof *p);
    if (!p || (key && !(p->key = strdup(key)))) {
        pthread_mutex_unlock(&P.lock);
        free(p);
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a plan");
    }
    desc_init(&p->d);
    desc_init(&p->re);
    p->cur = -1;
    p->next = P.head;
    P.head = p;
    pthread_mutex_unlock(&P.lock);
    *plan = (ovl_plan_t)p;
    if (found)
        *found = 0;
    return OVL_SUCCESS;
}

/* The description loop/read add to (lock-free: one thread per plan). */
static int desc_target(const char *fn, struct plan *p, struct desc **out)
{
    if (p->state == ST_RUNNING)
        return ovl__error(OVL_ERR_ARG, fn, "plan is executing (ovl_plan_end first)");
    if (p->state == ST_COMMITTED && !p->redesc) { /* a cached plan described again */
        desc_init(&p->re);
        p->redesc = 1;
    }
    *out = p->state == ST_COMMITTED ? &p->re : &p->d;
    return OVL_SUCCESS;
}

int ovl_plan_loop(ovl_plan_t plan, int depth, int64_t trips)
{
    static const char *fn = "ovl_plan_loop";
    int rc;
    struct plan *p = NULL;
    struct desc *d = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = lookup(fn, plan, &p)) || (rc = desc_target(fn, p, &d)))
        return rc;
    if (depth < 0 || depth >= OVL_PLAN_MAX_DEPTH)
        return ovl__error(OVL_ERR_ARG, fn, "depth %d outside 0..%d", depth, OVL_PLAN_MAX_DEPTH - 1);
    if (depth != d->ndepth)
        return ovl__error(OVL_ERR_ARG, fn, "depth %d declared out of order (next is %d)", depth,
                          d->ndepth);
    if (d->nrefs)
        return ovl__error(OVL_ERR_ARG, fn, "depth %d declared after a reference", depth);
    if (trips < 1)
        return ovl__error(OVL_ERR_ARG, fn, "depth %d: %" PRId64 " trips, at least 1", depth, trips);
    d->trips[d->ndepth++] = trips;
    return OVL_SUCCESS;
}

/* The index of @l's depth-0 dimension (-1: none); refuses one that is not
 * the slowest, or whose count is not @trips, or a depth not declared. */
static int depth0(const char *fn, const char *side, const ovl_lmad_t *l, int ndepth, int64_t trips,
                  int *out)
{
    int at = -1;
    for (int i = 0; i < l->ndims; i++) {
        if (l->dim[i].depth >= ndepth)
            return ovl__error(OVL_ERR_ARG, fn, "%s dim[%d] has depth %d; the nest has %d", side, i,
                              l->dim[i].depth, ndepth);
        if (l->dim[i].depth != 0)
            continue;
        if (at >= 0)
            return ovl__error(OVL_ERR_ARG, fn, "%s has two dimensions of depth 0", side);
        at = i;
    }
    if (at >= 0 && at != l->ndims - 1)
        return ovl__error(OVL_ERR_ARG, fn,
                          "%s dim[%d] has depth 0 but is not the slowest dimension (dim[%d])", side,
                          at, l->ndims - 1);
    if (at >= 0 && l->dim[at].count != trips)
        return ovl__error(OVL_ERR_ARG, fn,
                          "%s depth-0 dimension has %" PRId64 " points, the outermost loop %" PRId64
                          " trips",
                          side, l->dim[at].count, trips);
    *out = at;
    return OVL_SUCCESS;
}

static int add_ref(const char *fn, int write, ovl_plan_t plan, ovl_segment_t seg, int rank,
                   const ovl_lmad_t *remote, void *local_base, const ovl_lmad_t *local)
{
    int rc;
    struct plan *p = NULL;
    struct desc *d = NULL;
    struct ovl__seg *s = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = lookup(fn, plan, &p)) ||
        (rc = desc_target(fn, p, &d)) || (rc = ovl__seg_lookup(fn, seg, &s)) ||
        (rc = ovl__check_peer(fn, rank, 0)))
        return rc;
    if (!remote || !local || !local_base)
        return ovl__error(OVL_ERR_ARG, fn, "%s is NULL",
                          !remote  ? "remote"
                          : !local ? "local"
                                   : "local_base");
    if (d->ndepth == 0)
        return ovl__error(OVL_ERR_ARG, fn, "no loop declared (ovl_plan_loop first)");
    if (d->nrefs >= OVL_PLAN_MAX_REFS)
        return ovl__error(OVL_ERR_ARG, fn, "more than %d references", OVL_PLAN_MAX_REFS);
    ovl_lmad_runs_t rr, lr;
    char why[256];
    const int rbad = ovl_lmad_runs(remote, &rr) != OVL_SUCCESS;
    if (rbad || ovl_lmad_runs(local, &lr) != OVL_SUCCESS) {
        snprintf(why, sizeof why, "%s", ovl_error_detail()); /* before ovl__error rewrites it */
        return ovl__error(OVL_ERR_ARG, fn, "invalid %s LMAD (%s)", rbad ? "remote" : "local", why);
    }
    size_t cap = s->sizes[rank];
    if (rr.lo < 0 || (uint64_t)rr.lo + (uint64_t)rr.extent > cap)
        return ovl__error(OVL_ERR_ARG, fn,
                          "remote bytes [%" PRId64 ", %" PRId64 ") outside rank %d's segment "
                          "of %zu bytes",
                          rr.lo, rr.lo + rr.extent, rank, cap);
    if (rr.n * rr.size != lr.n * lr.size)
        return ovl__error(OVL_ERR_ARG, fn,
                          "remote covers %" PRId64 " bytes, local %" PRId64 ": they must pair",
                          rr.n * rr.size, lr.n * lr.size);
    int dr, dl;
    if ((rc = depth0(fn, "remote", remote, d->ndepth, d->trips[0], &dr)) ||
        (rc = depth0(fn, "local", local, d->ndepth, d->trips[0], &dl)))
        return rc;
    if ((dr < 0) != (dl < 0))
        return ovl__error(OVL_ERR_ARG, fn, "a depth-0 dimension on the %s side only",
                          dr < 0 ? "local" : "remote");
    struct ref *r = &d->refs[d->nrefs];
    r->src = d->nrefs++;
    r->nsrc = 1;
    r->members = 1u << r->src;
    r->gap = 0;
    r->write = write;
    r->seg = seg;
    r->rank = rank;
    r->rem = *remote;
    r->loc = *local;
    r->base = local_base;
    r->invariant = dr < 0;
    r->rstep = dr < 0 ? 0 : remote->dim[dr].stride;
    r->lstep = dl < 0 ? 0 : local->dim[dl].stride;
    return OVL_SUCCESS;
}

int ovl_plan_read(ovl_plan_t plan, ovl_segment_t seg, int rank, const ovl_lmad_t *remote,
                  void *local_base, const ovl_lmad_t *local)
{
    return add_ref("ovl_plan_read", 0, plan, seg, rank, remote, local_base, local);
}

int ovl_plan_read_subarray(ovl_plan_t plan, ovl_segment_t seg, int rank, size_t offset, int ndims,
                           const int sizes[], const int subsizes[], const int starts[], int order,
                           int64_t elem, void *local_base)
{
    static const char *fn = "ovl_plan_read_subarray";
    int rc;
    struct plan *p = NULL;
    struct desc *d = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = lookup(fn, plan, &p)) || (rc = desc_target(fn, p, &d)))
        return rc;
    if (!sizes || !subsizes || !starts)
        return ovl__error(OVL_ERR_ARG, fn, "sizes, subsizes or starts is NULL");
    if (offset > (size_t)INT64_MAX / 2)
        return ovl__error(OVL_ERR_ARG, fn, "offset %zu too large", offset);
    ovl_lmad_t rem, loc;
    int zero[OVL_LMAD_MAX_DIMS] = { 0 };
    char why[256];
    if (ovl_lmad_from_subarray(ndims, sizes, subsizes, starts, order, elem, &rem) != OVL_SUCCESS ||
        ovl_lmad_from_subarray(ndims, subsizes, subsizes, zero, order, elem, &loc) != OVL_SUCCESS) {
        snprintf(why, sizeof why, "%s", ovl_error_detail());
        return ovl__error(OVL_ERR_ARG, fn, "%s", why);
    }
    rem.base += (int64_t)offset;
    const int declare = d->ndepth == 0 && d->nrefs == 0;
    for (int k = 0; k < ndims && declare; k++) { /* the nest walking the subarray, slowest first */
        int dim = order == MPI_ORDER_C ? k : ndims - 1 - k;
        if ((rc = ovl_plan_loop(plan, k, subsizes[dim]))) {
            d->ndepth = 0;
            return rc;
        }
    }
    if ((rc = add_ref(fn, 0, plan, seg, rank, &rem, local_base, &loc)) && declare)
        d->ndepth = 0; /* a refused reference declares nothing */
    return rc;
}

static int strided(const char *fn, int write, ovl_plan_t plan, ovl_segment_t seg, int rank,
                   size_t offset, int ndims, const int64_t counts[], const int64_t strides[],
                   int64_t elem, void *local_base)
{
    int rc;
    struct plan *p = NULL;
    struct desc *d = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = lookup(fn, plan, &p)) || (rc = desc_target(fn, p, &d)))
        return rc;
    if (!counts || !strides)
        return ovl__error(OVL_ERR_ARG, fn, "%s is NULL", !counts ? "counts" : "strides");
    if (ndims < 1 || ndims > OVL_PLAN_MAX_DEPTH)
        return ovl__error(OVL_ERR_ARG, fn, "ndims %d, 1 to %d", ndims, OVL_PLAN_MAX_DEPTH);
    if (offset > (size_t)INT64_MAX / 2)
        return ovl__error(OVL_ERR_ARG, fn, "offset %zu too large", offset);
    if (elem < 1)
        return ovl__error(OVL_ERR_ARG, fn, "elem %" PRId64 ", at least 1", elem);
    ovl_lmad_t rem = { .base = (int64_t)offset, .elem = elem, .ndims = ndims };
    ovl_lmad_t loc = { .base = 0, .elem = elem, .ndims = ndims };
    int64_t dense = elem;
    for (int k = 0; k < ndims; k++) { /* dim[0] the fastest: the innermost loop */
        const int dep = ndims - 1 - k;
        if (counts[dep] < 1 || counts[dep] > INT64_MAX / 2 / dense)
            return ovl__error(OVL_ERR_ARG, fn, "counts[%d] %" PRId64 " out of range", dep,
                              counts[dep]);
        rem.dim[k] = (ovl_lmad_dim_t){ .stride = strides[dep], .count = counts[dep], .depth = dep };
        loc.dim[k] = (ovl_lmad_dim_t){ .stride = dense, .count = counts[dep], .depth = dep };
        dense *= counts[dep];
    }
    const int declare = d->ndepth == 0 && d->nrefs == 0;
    for (int k = 0; k < ndims && declare; k++) /* the nest, outermost first */
        if ((rc = ovl_plan_loop(plan, k, counts[k]))) {
            d->ndepth = 0;
            return rc;
        }
    if ((rc = add_ref(fn, write, plan, seg, rank, &rem, local_base, &loc)) && declare)
        d->ndepth = 0; /* a refused reference declares nothing */
    return rc;
}

int ovl_plan_read_strided(ovl_plan_t plan, ovl_segment_t seg, int rank, size_t offset, int ndims,
                          const int64_t counts[], const int64_t strides[], int64_t elem,
                          void *local_base)
{
    return strided("ovl_plan_read_strided", 0, plan, seg, rank, offset, ndims, counts, strides,
                   elem, local_base);
}

int ovl_plan_write_strided(ovl_plan_t plan, ovl_segment_t seg, int rank, size_t offset, int ndims,
                           const int64_t counts[], const int64_t strides[], int64_t elem,
                           void *local_base)
{
    return strided("ovl_plan_write_strided", 1, plan, seg, rank, offset, ndims, counts, strides,
                   elem, local_base);
}

int ovl_plan_write(ovl_plan_t plan, ovl_segment_t seg, int rank, const ovl_lmad_t *remote,
                   void *local_base, const ovl_lmad_t *local)
{
    return add_ref("ovl_plan_write", 1, plan, seg, rank, remote, local_base, local);
}

/* ---- analysis -------------------------------------------------------------- */

/* *@o = @l cut to @n iterations at iteration 0 of the plan's level
 * (its dimension of depth @level, the @level + 1-th slowest: choose_level()),
 * one iteration of the depths above it. */
static void cut(ovl_lmad_t *o, const ovl_lmad_t *l, int invariant, int64_t n, int level)
{
    *o = *l; /* in place: a copy returned and copied again stalls on the count stored */
    if (invariant)
        return;
    for (int d = 0; d < level; d++)
        o->dim[o->ndims - 1 - d].count = 1;
    o->dim[o->ndims - 1 - level].count = n;
}

/* Strips of @S iterations in one row of the plan's level. */
static int64_t per_row(const struct plan *p, int64_t S)
{
    return (p->lt + S - 1) / S;
}

/* Strip @k of the current S: its row (iteration of the depths above the
 * level, flattened), first iteration and iterations at the level, and
 * its shape (1: the last of its row, sh[1]). */
static void strip_of(const struct plan *p, int64_t k, int64_t *row, int64_t *first, int64_t *iters,
                     int *kind)
{
    const int64_t pr = per_row(p, p->S), j = k % pr;
    *row = k / pr;
    *first = j * p->S;
    *iters = j == pr - 1 ? p->lt - *first : p->S;
    *kind = j == pr - 1;
}

/* The remote and local byte shifts of reference @r's strip at @row,
 * @first (0 for a loop-invariant one). */
static void shifts(const struct plan *p, const struct ref *r, int64_t row, int64_t first,
                   int64_t *rs, int64_t *ls)
{
    *rs = *ls = 0;
    if (r->invariant)
        return;
    *rs = first * r->rsd[p->level];
    *ls = first * r->lsd[p->level];
    for (int d = p->level - 1; d >= 0; d--) {
        const int64_t i = row % p->d.trips[d];
        row /= p->d.trips[d];
        *rs += i * r->rsd[d];
        *ls += i * r->lsd[d];
    }
}

/* The runs of reference @j's strips of @iters iterations (its cut LMADs
 * @r, @l), from the plan's memo or computed into it. */
static void strip_runs(struct plan *p, int j, int64_t iters, const ovl_lmad_t *r,
                       const ovl_lmad_t *l, ovl_lmad_runs_t *rr, ovl_lmad_runs_t *lr)
{
    for (int i = 0; i < p->nrmemo; i++)
        if (p->rmemo[i].j == j && p->rmemo[i].iters == iters) {
            *rr = p->rmemo[i].rr;
            *lr = p->rmemo[i].lr;
            return;
        }
    ovl__lmad_runs_of(r, rr); /* cut from the checked references */
    ovl__lmad_runs_of(l, lr);
    int at = p->nrmemo;
    if (at < RUNS_MEMO) {
        p->nrmemo++;
    } else {
        at = p->rmemo_next;
        p->rmemo_next = (at + 1) % RUNS_MEMO;
    }
    p->rmemo[at] = (struct runs_memo){ j, iters, *rr, *lr };
}

/* The runs of @l in order (consecutive contiguous points merged): offsets
 * and lengths, at most PIECES_MAX (else 0 and *n = -1). */
static int runs_of(const ovl_lmad_t *in, int64_t **off, int64_t **len, int64_t *n)
{
    ovl_lmad_t l = *in;
    ovl__lmad_fold(&l);
    int64_t pts = 1;
    for (int i = 0; i < l.ndims; i++)
        pts *= l.dim[i].count; /* a valid LMAD's point count fits */
    *off = *len = NULL;
    *n = -1;
    if (pts > PIECES_MAX)
        return OVL_SUCCESS;
    int64_t *o = ovl__buf_alloc((size_t)pts * sizeof *o),
            *z = ovl__buf_alloc((size_t)pts * sizeof *z);
    if (!o || !z) {
        ovl__buf_free(o);
        ovl__buf_free(z);
        return OVL_ERR_NOMEM;
    }
    int64_t k[OVL_LMAD_MAX_DIMS] = { 0 }, m = 0;
    for (int64_t p = 0; p < pts; p++) {
        int64_t at = l.base;
        for (int i = 0; i < l.ndims; i++)
            at += k[i] * l.dim[i].stride;
        if (m && o[m - 1] + z[m - 1] == at) {
            z[m - 1] += l.elem;
        } else {
            o[m] = at;
            z[m++] = l.elem;
        }
        for (int i = 0; i < l.ndims && ++k[i] == l.dim[i].count; i++)
            k[i] = 0;
    }
    *off = o;
    *len = z;
    *n = m;
    return OVL_SUCCESS;
}

/* Pair the runs of both sides into pieces (NULL when either has too many). */
static int pieces_of(struct shape *s)
{
    int64_t *ro, *rl, *lo, *ll, rn, ln;
    int rc = runs_of(&s->r, &ro, &rl, &rn);
    if (rc == OVL_SUCCESS)
        rc = runs_of(&s->l, &lo, &ll, &ln);
    else
        lo = ll = NULL, ln = -1;
    s->pc = NULL;
    s->npc = -1;
    if (rc == OVL_SUCCESS && rn >= 0 && ln >= 0 &&
        (s->pc = ovl__buf_alloc((size_t)(rn + ln) * sizeof *s->pc)) != NULL) {
        int64_t i = 0, j = 0, ui = 0, uj = 0, m = 0; /* bytes used of run i, run j */
        while (i < rn && j < ln) {
            int64_t a = rl[i] - ui, b = ll[j] - uj, c = a < b ? a : b;
            s->pc[m++] = (struct piece){ ro[i] + ui, lo[j] + uj, c };
            ui += c;
            uj += c;
            if (ui == rl[i])
                i++, ui = 0;
            if (uj == ll[j])
                j++, uj = 0;
        }
        s->npc = m;
    } else if (rc == OVL_SUCCESS && rn >= 0 && ln >= 0) {
        rc = OVL_ERR_NOMEM;
    }
    ovl__buf_free(ro);
    ovl__buf_free(rl);
    ovl__buf_free(lo);
    ovl__buf_free(ll);
    return rc;
}

/* A datatype of @l with its lower bound moved to 0 (its bounding box at
 * displacement @lo). */
static int type_of(const ovl_lmad_t *l, int64_t lo, MPI_Datatype *t)
{
    ovl_lmad_t z = *l;
    z.base -= lo;
    return ovl_lmad_to_datatype(&z, t);
}

/* Whether @l's bytes, in its point order, are one run walked upwards: a
 * packed message lands on them in place. One run after coalescing is not
 * enough (the points may be permuted or walked downwards). */
static int in_order(const ovl_lmad_t *l)
{
    ovl_lmad_t f = *l;
    ovl__lmad_fold(&f);
    return f.ndims == 0;
}

#ifdef OMPI_MAJOR_VERSION
/* Whether Open MPI moves @l's datatype in its type map's order: Open MPI
 * 4.1 packs a datatype with a negative stride, or whose blocks overlap,
 * from other bytes or in another order (MPICH follows the type map).
 * Overlap is judged conservatively: with the dimensions taken by stride,
 * each must step past the span of those below it. */
static int ompi_order_safe(const ovl_lmad_t *l)
{
    int64_t st[OVL_LMAD_MAX_DIMS], cn[OVL_LMAD_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < l->ndims; i++) {
        if (l->dim[i].count < 2)
            continue;
        if (l->dim[i].stride <= 0)
            return 0;
        int k = n++;
        for (; k > 0 && st[k - 1] > l->dim[i].stride; k--)
            st[k] = st[k - 1], cn[k] = cn[k - 1];
        st[k] = l->dim[i].stride;
        cn[k] = l->dim[i].count;
    }
    int64_t span = l->elem;
    for (int k = 0; k < n; k++) {
        if (st[k] < span)
            return 0;
        span += (cn[k] - 1) * st[k];
    }
    return 1;
}
#endif

#ifdef OMPI_MAJOR_VERSION
/* Whether every strip shape of @p can be fetched with its two datatypes
 * in order under Open MPI (pack_fallback(), a late PACK strip). */
static int ompi_fallback_safe(const struct plan *p)
{
    for (int j = 0; j < p->d.nrefs; j++)
        for (int k = 0; k < 2; k++)
            if (!ompi_order_safe(&p->d.refs[j].sh[k].r) || !ompi_order_safe(&p->d.refs[j].sh[k].l))
                return 0;
    return 1;
}
#endif

static int fits_int(const ovl_lmad_t *l)
{
    if (l->elem > INT_MAX)
        return 0;
    for (int i = 0; i < l->ndims; i++)
        if (l->dim[i].count > INT_MAX)
            return 0;
    return 1;
}

/* Predicted time of one strip shape of one reference under @proto, in
 * microseconds; < 0 with *why set when @proto cannot move it. The terms:
 *   DATATYPE  lat + B / bw + blocks * DT_BLOCK_US
 *   RUNS      lat + max(pieces * max(o, g), B / bw)   (pipelined issue)
 *   BBOX      lat + E / bw + B * copy                 (box, then copy-out)
 * with lat, bw the model's MPI_Rget figures, o and g its per-message
 * overhead and gap, copy its memory-to-cache cost per byte, B the bytes,
 * E the remote bounding box, blocks the larger side's runs. */
static double formula(int proto, const struct shape *s, const char **why);

/* Predicted time of one strip shape under @proto: the measured protocol
 * map's (ovl-calibrate --maps) where the shape's remote runs fall inside
 * its grid, the formulas (formula()) elsewhere; *from_map says which. The
 * map is measured at stride 2 x run: a box of another extent is charged
 * its difference at the RMA bandwidth. */
static double unloaded(int proto, const struct shape *s, const char **why, int *from_map);

/* The latency of one strip under @proto: an MPI_Rget's round trip, or for
 * PACK its request and the packed message. */
static double proto_lat(int proto)
{
    if (proto != OVL_PLAN_PACK)
        return ovl__m.rma_lat_us;
    return ovl__m.lat_us > 0 ? 2 * ovl__m.lat_us + ovl__m.o_us : ovl__m.rma_lat_us;
}

/* ... under load (the plan's load factor, load_factor()): the part of the
 * time beyond the latency scaled by it. */
static double predict(int proto, const struct shape *s, const char **why, int *from_map)
{
    double t = unloaded(proto, s, why, from_map), lat = proto_lat(proto);
    if (t < 0 || s->slow == 1.0 || t <= lat)
        return t;
    return lat + (t - lat) * s->slow;
}

static double unloaded(int proto, const struct shape *s, const char **why, int *from_map)
{
    *from_map = 0;
    double f = formula(proto, s, why);
    if (f < 0)
        return f;
    double m = ovl__model_map_us(proto, (double)s->rr.size, (double)s->rr.n);
    if (m < 0)
        return f;
    *from_map = 1;
    if (proto == OVL_PLAN_BBOX) {
        double bw = ovl__m.rma_bw_Bpus > 0 ? ovl__m.rma_bw_Bpus : 1.0;
        double measured_box = (double)(2 * s->rr.n - 1) * (double)s->rr.size;
        double extra = ((double)s->rr.extent - measured_box) / bw;
        m = m + extra > m / 2 ? m + extra : m / 2;
    }
    return m;
}

static double formula(int proto, const struct shape *s, const char **why)
{
    double lat = ovl__m.rma_lat_us, bw = ovl__m.rma_bw_Bpus > 0 ? ovl__m.rma_bw_Bpus : 1.0;
    double o = ovl__m.o_us > ovl__m.gap_us ? ovl__m.o_us : ovl__m.gap_us;
    double B = (double)(s->rr.n * s->rr.size);
    double blocks = (double)(s->rr.n > s->lr.n ? s->rr.n : s->lr.n);
    switch (proto) {
    case OVL_PLAN_DATATYPE:
        if (!fits_int(&s->r) || !fits_int(&s->l)) {
            *why = "an element or count beyond MPI's int";
            return -1;
        }
#ifdef OMPI_MAJOR_VERSION
        if (!ompi_order_safe(&s->r) || !ompi_order_safe(&s->l)) {
            *why = "Open MPI 4.1 moves a datatype with a negative stride or overlapping blocks "
                   "out of its order";
            return -1;
        }
#endif
        return lat + B / bw + blocks * DT_BLOCK_US;
    case OVL_PLAN_RUNS: {
        if (s->npc > PIECES_MAX) {
            *why = "more than 65536 runs per strip";
            return -1;
        }
        if (s->rr.size > INT_MAX && s->lr.size > INT_MAX) {
            *why = "a run beyond MPI's int count";
            return -1;
        }
        double issue = (double)s->npc * o, wire = B / bw;
        return lat + (issue > wire ? issue : wire);
    }
    case OVL_PLAN_BBOX:
        if (s->npc > PIECES_MAX) {
            *why = "more than 65536 runs per strip";
            return -1;
        }
        if (s->rr.extent > BBOX_MAX || s->rr.extent > INT_MAX) {
            *why = "a bounding box above 256 MiB per strip";
            return -1;
        }
        return lat + (double)s->rr.extent / bw + B * ovl__m.compute_us_per_B;
    case OVL_PLAN_PACK: {
        if (!fits_int(&s->l) || B > INT_MAX - (double)sizeof(struct pack_hdr)) {
            *why = "a strip beyond MPI's int count";
            return -1;
        }
        /* request, then the packed data: two messages; packed and unpacked */
        double pbw = ovl__m.bw_Bpus > 0 ? ovl__m.bw_Bpus : bw;
        return proto_lat(proto) + B / pbw + 2 * B * ovl__m.compute_us_per_B;
    }
    }
    *why = "unknown protocol";
    return -1;
}

/* Operations one strip of shape @s issues under @proto. */
static int64_t ops_of(int proto, const struct shape *s)
{
    return proto == OVL_PLAN_RUNS ? s->npc : 1;
}

static int same_lmad(const ovl_lmad_t *a, const ovl_lmad_t *b)
{
    if (a->base != b->base || a->elem != b->elem || a->ndims != b->ndims)
        return 0;
    for (int i = 0; i < a->ndims; i++)
        if (a->dim[i].stride != b->dim[i].stride || a->dim[i].count != b->dim[i].count ||
            a->dim[i].depth != b->dim[i].depth)
            return 0;
    return 1;
}

/* Why @b differs from @a (NULL: the same shape). */
static const char *differs(const struct desc *a, const struct desc *b)
{
    if (a->ndepth != b->ndepth || memcmp(a->trips, b->trips, sizeof a->trips))
        return "the loop nests";
    if (a->nrefs != b->nrefs)
        return "the numbers of references";
    for (int j = 0; j < a->nrefs; j++) {
        const struct ref *x = &a->refs[j], *y = &b->refs[j];
        if (x->write != y->write || x->seg != y->seg || x->rank != y->rank)
            return "the segments or ranks of a reference";
        if (!same_lmad(&x->rem, &y->rem) || !same_lmad(&x->loc, &y->loc))
            return "the LMADs of a reference";
    }
    return NULL;
}

static int same_param(const ovl_param_t *a, const ovl_param_t *b)
{
    return a->field_mask == b->field_mask &&
           (!(a->field_mask & OVL_PARAM_FIELD_PROTOCOL) || a->protocol == b->protocol) &&
           (!(a->field_mask & OVL_PARAM_FIELD_STRIP) || a->strip == b->strip) &&
           (!(a->field_mask & OVL_PARAM_FIELD_LOOKAHEAD) || a->lookahead == b->lookahead) &&
           (!(a->field_mask & OVL_PARAM_FIELD_LEVEL) || a->level == b->level);
}

static int prepare(const char *fn, struct plan *p);

/* Strips in flight ahead of the one computed on: the param's, else up to
 * 8, and 1 under DATATYPE (its per-strip flush completes every strip in
 * flight: more ahead only delays the first; next_strip issues after it). */
static void set_lookahead(struct plan *p)
{
    const unsigned most = p->proto == OVL_PLAN_DATATYPE ? 1 : 8;
    p->lookahead = (p->param.field_mask & OVL_PARAM_FIELD_LOOKAHEAD) ? p->param.lookahead
                   : p->nstrips - 1 < most                           ? (unsigned)(p->nstrips - 1)
                                                                     : most;
}
static int build(const char *fn, struct plan *p, int make);
static double pipeline_us(struct plan *p, int proto, int64_t S, double c_us, unsigned la);

/* The pieces a strip's runs pair into, without listing them: as many as
 * the runs when both sides' runs are equal, else at most both counts. */
static int64_t est_pieces(const ovl_lmad_runs_t *r, const ovl_lmad_runs_t *l)
{
    if (r->size == l->size)
        return r->n;
    return r->n + l->n - 1;
}

/* The strips of S = p->S iterations: their count, the lookahead (unless
 * the commit's param gave it), and the two strip shapes of every reference
 * (the old ones and their pieces freed). */
static void shapes_build(struct plan *p)
{
    struct desc *d = &p->d;
    const int64_t T = p->lt, pr = per_row(p, p->S);
    shapes_free(p);
    p->nstrips = p->rows * pr;
    set_lookahead(p);
    const int64_t last = T - (pr - 1) * p->S; /* iterations of a row's last strip */
    /* the two strip shapes of every reference */
    for (int j = 0; j < d->nrefs; j++) {
        struct ref *r = &d->refs[j];
        for (int k = 0; k < 2; k++) {
            struct shape *s = &r->sh[k];
            s->iters = r->invariant ? T : k ? last : p->S;
            s->slow = p->slow;
            cut(&s->r, &r->rem, r->invariant, s->iters, p->level);
            cut(&s->l, &r->loc, r->invariant, s->iters, p->level);
            strip_runs(p, j, s->iters, &s->r, &s->l, &s->rr, &s->lr);
            s->npc = est_pieces(&s->rr, &s->lr);
        }
    }
}

/* p->why[q] = @why (cut to fit; every why is a short literal). */
static void set_why(struct plan *p, int q, const char *why)
{
    if (!why)
        why = "?";
    size_t n = strlen(why);
    if (n >= sizeof p->why[q])
        n = sizeof p->why[q] - 1;
    memcpy(p->why[q], why, n);
    p->why[q][n] = 0;
}

/* The predicted time of one execution's transfers per protocol (p->pred,
 * < 0 with p->why: not applicable), from the current shapes. */
static void predict_all(struct plan *p)
{
    struct desc *d = &p->d;
    const int64_t nfull = per_row(p, p->S) - 1; /* per row */
    for (int q = 1; q < NPROTO; q++) {
        double t = 0;
        const char *why = NULL;
        int mapped = 0, shapes = 0;
        for (int j = 0; j < d->nrefs && t >= 0; j++) {
            const struct ref *r = &d->refs[j];
            int ma = 0, mb = 0;
            double a = predict(q, &r->sh[0], &why, &ma), b = predict(q, &r->sh[1], &why, &mb);
            if (a < 0 || b < 0)
                t = -1;
            else
                t += r->invariant ? a : (double)p->rows * ((double)nfull * a + b);
            mapped += ma + mb;
            shapes += 2;
        }
        if (q == OVL_PLAN_BBOX && p->writes && t >= 0) {
            t = -1;
            why = "the plan writes (the box is for reads only)";
        }
        /* PACK chosen automatically without the progress thread */
        const int pack_auto_inline =
            q == OVL_PLAN_PACK && ovl__g.cfg.progress.mode != OVL_PROGRESS_THREAD &&
            !((p->param.field_mask & OVL_PARAM_FIELD_PROTOCOL) && (int)p->param.protocol == q);
        if (pack_auto_inline && t >= 0 && p->writes) {
            t = -1; /* a target in MPI_Barrier, say, would never unpack (reads fall back) */
            why = "the plan writes, and its targets unpack only in ovl calls "
                  "(OVL_PROGRESS=inline): forced only";
        }
#ifdef OMPI_MAJOR_VERSION
        if (pack_auto_inline && t >= 0 && !ompi_fallback_safe(p)) {
            t = -1; /* a late strip is fetched with both datatypes (pack_fallback()) */
            why = "a late strip would be fetched with a datatype Open MPI 4.1 moves out of "
                  "order (OVL_PROGRESS=inline): forced only";
        }
#endif
        if (t >= 0 && (p->left_out >> q & 1)) {
            t = -1;
            why = p->out_why[q];
        }
        p->pred[q] = t;
        p->pred_src[q] = mapped == 0 ? 'f' : mapped == shapes ? 'm' : 'b';
        set_why(p, q, t < 0 ? why : "");
    }
}

/* A later protocol (RUNS, then BBOX: more operations, or staging and
 * copies) is chosen over an earlier one only if predicted more than
 * PICK_MARGIN faster. */
#define PICK_MARGIN 0.03
static void predict_all(struct plan *p);

/* The strip size of least pipeline_us under @proto with @c_us of
 * computation per iteration, among T, T/2, T/4, ... (at most STRIPS_MAX
 * strips: with computation equal to communication 64 strips hide all but
 * 1/64 of it): the largest within 2 % of the least. */
#define STRIPS_MAX 64
static int64_t choose_strip(struct plan *p, int proto, double c_us)
{
    const int64_t T = p->lt;
    if (p->direct) /* MPI copies with this CPU: no wire time to hide, strips only cost */
        return T;
    const unsigned la = p->param.field_mask & OVL_PARAM_FIELD_LOOKAHEAD ? p->param.lookahead
                        : proto == OVL_PLAN_DATATYPE                    ? 1
                                                                        : 8;
    int64_t cand[32];
    double t[32], least = -1;
    int nc = 0;
    for (int64_t n = 1; n <= T && (n == 1 || p->rows * n <= STRIPS_MAX); n *= 2) {
        cand[nc] = (T + n - 1) / n;
        t[nc] = pipeline_us(p, proto, cand[nc], c_us, la);
        if (t[nc] >= 0 && (least < 0 || t[nc] < least))
            least = t[nc];
        nc++;
    }
    for (int i = 0; i < nc; i++) /* the fewest strips within 2 % of the least */
        if (t[i] >= 0 && t[i] <= least * 1.02)
            return cand[i];
    return T;
}

/* The protocol (only @only when > 0) of least predicted time for the
 * current shapes (p->pred: one strip of the whole loop, or the param's
 * strips; PICK_MARGIN), and its strip size (*S: the param's, else the
 * least pipeline time with @c_us of computation per iteration).
 * OVL_PLAN_AUTO: none can move the plan. The protocols are ranked on the
 * single strip because the maps measure single strips: how strips in
 * flight overlap is the pipeline model's guess, and it decides S only. */
static ovl_plan_protocol_t choose(struct plan *p, double c_us, int only, int64_t *S)
{
    const int64_t T = p->lt;
    int best = OVL_PLAN_AUTO;
    for (int q = 1; q < NPROTO; q++)
        if ((!only || q == only) && p->pred[q] >= 0 &&
            (best == OVL_PLAN_AUTO || p->pred[q] < p->pred[best] * (1 - PICK_MARGIN)))
            best = q;
    if (best == OVL_PLAN_AUTO)
        return OVL_PLAN_AUTO;
    if (p->param.field_mask & OVL_PARAM_FIELD_STRIP)
        *S = p->param.strip < T ? p->param.strip : T;
    else
        *S = choose_strip(p, best, c_us);
    return (ovl_plan_protocol_t)best;
}

/* Whether every moving reference is driven by depths 0..@L through its
 * @L + 1 slowest dimensions on both sides (depth d the d + 1-th slowest),
 * with the loops' trip counts; their bytes per iteration of each depth are
 * recorded (rsd, lsd). */
static int level_fits(struct plan *p, int L)
{
    for (int j = 0; j < p->d.nrefs; j++) {
        struct ref *r = &p->d.refs[j];
        if (r->invariant)
            continue;
        for (int side = 0; side < 2; side++) {
            const ovl_lmad_t *l = side ? &r->loc : &r->rem;
            if (l->ndims < L + 1)
                return 0;
            for (int d = 0; d <= L; d++) {
                const ovl_lmad_dim_t *m = &l->dim[l->ndims - 1 - d];
                if (m->depth != d || m->count != p->d.trips[d])
                    return 0;
                (side ? r->lsd : r->rsd)[d] = m->stride;
            }
        }
    }
    return 1;
}

/* The depth strips are cut from (Init_Level = Sync_Level): 0 unless the
 * commit's param allows deeper (OVL_PARAM_FIELD_LEVEL: the program counts
 * iterations of depths 0 to that level flattened); then the shallowest
 * depth L at or above it whose loops 0..L run at least STRIPS_MAX
 * iterations between them (enough strips for a pipeline: deeper strips
 * would only add operations), if every moving reference fits it
 * (level_fits(), else the deepest shallower one that does). A plan of
 * on-node references only stays at 0: it is one strip. */
static void choose_level(struct plan *p)
{
    struct desc *d = &p->d;
    const int want = p->param.field_mask & OVL_PARAM_FIELD_LEVEL ? p->param.level : 0;
    int L = 0;
    p->level_why = NULL;
    if (want > 0 && p->direct) {
        p->level_why = "every target on this node: one strip";
    } else if (want > 0) {
        for (int64_t it = d->trips[0]; L < want && it < STRIPS_MAX;)
            it *= d->trips[++L]; /* it < 64 before: no overflow (the product fits, commit) */
        for (; L > 0 && !level_fits(p, L); L--)
            p->level_why = "a reference is not driven by every depth down to it "
                           "through its slowest dimensions";
    }
    p->level = L;
    p->rows = 1;
    for (int i = 0; i < L; i++)
        p->rows *= d->trips[i];
    p->lt = d->trips[L];
    p->inner = 1;
    for (int i = L + 1; i <= want; i++)
        p->inner *= d->trips[i];
    for (int j = 0; L == 0 && j < d->nrefs; j++) { /* deeper: level_fits() recorded them */
        d->refs[j].rsd[0] = d->refs[j].rstep;
        d->refs[j].lsd[0] = d->refs[j].lstep;
    }
    p->nrmemo = p->rmemo_next = 0; /* strips of other shapes */
}

/* Load estimation (the paper's section 6): every rank of this node is
 * taken to run the same plan, so ppn x (its targets on other nodes) flows
 * cross the node's link at once; each of this rank's flows gets the load
 * table's per-flow bandwidth for that many (ovl__model_flow_Bpus), and the
 * rank, its targets' flows together, their sum. The predictions assume
 * one transfer at a time at the RMA bandwidth; the factor scales their
 * time beyond latency by the ratio, clamped to [0.25, 64]. 1 without a
 * load table or off-node target. */
static void load_factor(struct plan *p)
{
    p->slow = 1.0;
    p->flows = 0;
    int targets = 0, ppn = 0;
    for (int j = 0; j < p->d.nrefs; j++) {
        int r = p->d.refs[j].rank, seen = 0;
        for (int i = 0; i < j; i++)
            seen |= p->d.refs[i].rank == r;
        targets += !seen && !ovl__peer_on_node(r);
    }
    for (int r = 0; r < ovl__g.size; r++)
        ppn += ovl__peer_on_node(r);
    if (!targets)
        return;
    const int flows = ppn * targets;
    const double per = ovl__model_flow_Bpus(flows), bw = ovl__m.rma_bw_Bpus;
    if (per <= 0 || bw <= 0)
        return;
    double f = bw / (per * targets);
    p->slow = f < 0.25 ? 0.25 : f > 64 ? 64 : f;
    p->flows = flows;
}

static int analyse(const char *fn, struct plan *p)
{
    struct desc *d = &p->d;
    const ovl_param_t *pm = &p->param;
    p->left_out = 0; /* analysed again: every protocol gets another chance */
    load_factor(p);
    choose_level(p);
    const int64_t T = p->lt;
    /* first the protocols over the whole loop as one strip (or the strips
     * the commit asked for) */
    p->S = (pm->field_mask & OVL_PARAM_FIELD_STRIP) && pm->strip < T ? pm->strip : T;
    shapes_build(p);
    p->writes = 0;
    for (int j = 0; j < d->nrefs; j++)
        p->writes += d->refs[j].write;
    predict_all(p);
    /* Ranked where the maps measured: a whole loop beyond their grid is
     * ranked on halves, quarters, ... of it, the first strip size at which
     * every protocol that applies is predicted from the maps alone (each
     * prediction is of the whole execution, so they compare at any S). */
    while (ovl__m.nmap > 0 && !(pm->field_mask & OVL_PARAM_FIELD_STRIP)) {
        int off = 0;
        for (int q = 1; q < NPROTO; q++)
            off |= p->pred[q] >= 0 && p->pred_src[q] != 'm';
        if (!off)
            break;
        p->S = p->S > 1 ? (p->S + 1) / 2 : T; /* nowhere inside: the whole loop's formulas */
        shapes_build(p);
        predict_all(p);
        if (p->S == T)
            break;
    }
    /* the choice: per protocol its best strip size, then the protocol, all
     * by the predicted pipeline with as much computation per iteration as
     * the best protocol's communication (one strip of the whole loop), until
     * the first execution measures it (replan()) */
    double c = -1;
    for (int q = 1; q < NPROTO; q++)
        if (p->pred[q] >= 0 && (c < 0 || p->pred[q] / (double)(p->rows * T) < c))
            c = p->pred[q] / (double)(p->rows * T);
    p->forced = (pm->field_mask & OVL_PARAM_FIELD_PROTOCOL) && pm->protocol != OVL_PLAN_AUTO;
    int64_t S = p->S;
    const int only = p->forced ? (int)pm->protocol : 0;
    if (only && p->pred[only] < 0 && !(pm->field_mask & OVL_PARAM_FIELD_STRIP)) {
        /* forced, and one strip of the whole loop is too much for it: its
         * strip size first, then the shapes for it */
        p->S = choose_strip(p, only, c > 0 ? c : 0);
        S = p->S;
        shapes_build(p);
        predict_all(p);
    }
    p->proto = choose(p, c > 0 ? c : 0, only, &S);
    if (p->proto == OVL_PLAN_AUTO) {
        if (p->forced)
            return ovl__error(OVL_ERR_ARG, fn,
                              "protocol %s forced, but it cannot move this plan: %s",
                              proto_name[only], p->why[only]);
        return ovl__error(OVL_ERR_ARG, fn, "no protocol can move this plan (%s)", p->why[1]);
    }
    if (S != p->S) {
        p->S = S;
        shapes_build(p);
    }
    set_lookahead(p);
    predict_all(p);
    for (int q = 0; q < NPROTO; q++)
        p->nmeas[q] = 0;
    p->reranks = p->replans = 0;
    p->settled = p->forced;
    p->strip_measured = 0;
    p->c_us = -1;
    p->analyses++;
    /* the pieces and datatypes are built by the first ovl_plan_begin */
    return build(fn, p, 0);
}

/* The chosen protocol's datatypes (built once per shape), operation and
 * byte counts. */
static int prepare(const char *fn, struct plan *p)
{
    return build(fn, p, 1);
}

/* What the chosen protocol needs: with @make its pieces and datatypes
 * (once per shape), else nothing built and the piece counts estimated;
 * the operation and byte counts either way. */
static int build(const char *fn, struct plan *p, int make)
{
    struct desc *d = &p->d;
    const int64_t nfull = per_row(p, p->S) - 1; /* per row */
    int rc;
    p->ready = make;
    p->ops = p->bytes = p->max_ops[0] = p->max_ops[1] = 0;
    int64_t mx[2][2] = { { 0, 0 }, { 0, 0 } };
    for (int j = 0; j < d->nrefs; j++) {
        struct ref *r = &d->refs[j];
        for (int k = 0; k < 2; k++) {
            struct shape *s = &r->sh[k];
            if (make && p->proto != OVL_PLAN_DATATYPE && p->proto != OVL_PLAN_PACK && !s->pc) {
                rc = pieces_of(s);
                if (!s->pc)
                    s->npc = est_pieces(&s->rr, &s->lr);
                if (rc)
                    return ovl__error(rc, fn, "no memory for reference %d's runs", j);
                if (!s->pc)
                    return ovl__error(OVL_ERR_ARG, fn, "reference %d: more than %d runs per strip",
                                      j, PIECES_MAX);
            }
            if (make && p->proto == OVL_PLAN_DATATYPE &&
                ((s->rtype == MPI_DATATYPE_NULL && (rc = type_of(&s->r, s->rr.lo, &s->rtype))) ||
                 (s->ltype == MPI_DATATYPE_NULL && (rc = type_of(&s->l, s->lr.lo, &s->ltype))))) {
                char why[256];
                snprintf(why, sizeof why, "%s", ovl_error_detail());
                return ovl__error(rc, fn, "reference %d's datatypes (%s)", j, why);
            }
            if (make && p->proto == OVL_PLAN_PACK && !r->write && s->ltype == MPI_DATATYPE_NULL &&
                (rc = type_of(&s->l, s->lr.lo, &s->ltype))) {
                char why[256];
                snprintf(why, sizeof why, "%s", ovl_error_detail());
                return ovl__error(rc, fn, "reference %d's datatypes (%s)", j, why);
            }
            mx[r->write][k] += ops_of(p->proto, s);
        }
        int64_t o0 = ops_of(p->proto, &r->sh[0]), o1 = ops_of(p->proto, &r->sh[1]);
        int64_t b0 = r->sh[0].rr.n * r->sh[0].rr.size, b1 = r->sh[1].rr.n * r->sh[1].rr.size;
        p->ops += r->invariant ? o0 : p->rows * (nfull * o0 + o1);
        p->bytes += r->invariant ? b0 : p->rows * (nfull * b0 + b1);
    }
    for (int w = 0; w < 2; w++)
        p->max_ops[w] = mx[w][0] > mx[w][1] ? mx[w][0] : mx[w][1];
    return OVL_SUCCESS;
}

/* Same LMADs but for their bases. */
static int same_but_base(const ovl_lmad_t *a, const ovl_lmad_t *b)
{
    ovl_lmad_t x = *b;
    x.base = a->base;
    return same_lmad(a, &x);
}

/* The paper's combination of references with the memory distance: a read
 * reference A whose bytes, remote and local, are those of another read
 * reference B (same segment, rank, local buffer and shape) d outer
 * iterations earlier (0 < d < trips: B's bases d depth-0 strides further
 * on both sides) reads only its first d iterations (loop-invariant, with
 * the first strip); its iteration i >= d is B's iteration i - d, which B's
 * strips bring no later than A's strip needs it, into the same local
 * bytes. The nearest such B is taken; chains (rows i-1, i, i+1) end in
 * the one reference still read whole. */
static void combine(struct plan *p)
{
    struct desc *d = &p->d;
    p->nrmemo = p->rmemo_next = 0; /* the references change */
    const struct desc *u = &p->u;
    const int64_t T = d->trips[0];
    p->combined = 0;
    for (int i = 0; i < d->nrefs; i++) {
        const struct ref *a = &u->refs[i];
        d->refs[i].head = 0;
        d->refs[i].with = -1;
        if (a->write || a->invariant || a->rstep == 0 || a->lstep == 0)
            continue;
        int64_t best = 0;
        int with = -1;
        for (int j = 0; j < d->nrefs; j++) {
            const struct ref *b = &u->refs[j];
            if (j == i || b->write || b->invariant || b->seg != a->seg || b->rank != a->rank ||
                b->base != a->base || b->rstep != a->rstep || b->lstep != a->lstep ||
                !same_but_base(&a->rem, &b->rem) || !same_but_base(&a->loc, &b->loc))
                continue;
            const int64_t dr = b->rem.base - a->rem.base, dl = b->loc.base - a->loc.base;
            if (dr % a->rstep)
                continue;
            const int64_t dist = dr / a->rstep;
            if (dist < 1 || dist >= T || dl != dist * a->lstep)
                continue;
            if (with < 0 || dist < best) {
                best = dist;
                with = j;
            }
        }
        if (with < 0)
            continue;
        struct ref *h = &d->refs[i];
        h->head = best;
        h->with = with;
        h->invariant = 1;
        h->rem.dim[h->rem.ndims - 1].count = best;
        h->loc.dim[h->loc.ndims - 1].count = best;
        p->combined++;
    }
}

/* Dimensions of @l once coalesced (-1: invalid). */
static int coalesced_dims(const ovl_lmad_t *l)
{
    ovl_lmad_t c;
    return ovl_lmad_coalesce(l, &c) == OVL_SUCCESS ? c.ndims : -1;
}

/* Dimensions of @l once folded in its order (the runs a copy or a put
 * walks). */
static int folded_dims(const ovl_lmad_t *l)
{
    ovl_lmad_t c = *l;
    ovl__lmad_fold(&c);
    return c.ndims;
}

/* @a with a fastest dimension of @k points @g bytes apart (*out); 0 when
 * there is no room for one. */
static int with_copies(const ovl_lmad_t *a, int64_t g, int64_t k, ovl_lmad_t *out)
{
    if (a->ndims >= OVL_LMAD_MAX_DIMS)
        return 0;
    *out = *a;
    memmove(&out->dim[1], &a->dim[0], (size_t)a->ndims * sizeof a->dim[0]);
    out->dim[0] = (ovl_lmad_dim_t){ .stride = g, .count = k, .depth = -1 };
    out->ndims++;
    return 1;
}

/* Whether reference @b can be read (or written) with @a as an interleaved
 * copy: same kind, segment, rank, local buffer, strides and shape. */
static int interleaves(const struct ref *a, const struct ref *b)
{
    return b->write == a->write && !b->invariant && b->seg == a->seg && b->rank == a->rank &&
           b->base == a->base && b->rstep == a->rstep && b->lstep == a->lstep &&
           same_but_base(&a->rem, &b->rem) && same_but_base(&a->loc, &b->loc);
}

/* The paper's interleaved references: k >= 2 references of one kind,
 * segment, rank, local buffer and shape whose bases step by g bytes on the
 * target and by gl here (a[2i] and a[2i+1]; the x, y and z of an array of
 * structures) become one, the lowest with a fastest dimension of k points
 * (g apart remote, gl local, so the points pair as before), when their
 * union on the target coalesces into no more dimensions than one of them
 * alone: one operation where there were k, and runs that merge. Runs after
 * combine(), whose references to a merged one (with) follow it. */
static void interleave(struct plan *p)
{
    struct desc *d = &p->d;
    p->interleaved = 0;
    int n = d->nrefs, order[OVL_PLAN_MAX_REFS], gone[OVL_PLAN_MAX_REFS] = { 0 };
    int into[OVL_PLAN_MAX_REFS];
    for (int i = 0; i < n; i++) { /* by remote base, lowest first */
        int j = i;
        for (; j > 0 && d->refs[order[j - 1]].rem.base > d->refs[i].rem.base; j--)
            order[j] = order[j - 1];
        order[j] = i;
        into[i] = i;
    }
    int merged = 0;
    for (int oi = 0; oi < n; oi++) {
        struct ref *a = &d->refs[order[oi]];
        if (gone[order[oi]] || a->invariant)
            continue;
        int b = -1; /* the nearest above a */
        for (int oj = oi + 1; oj < n && b < 0; oj++)
            if (!gone[order[oj]] && d->refs[order[oj]].rem.base > a->rem.base &&
                interleaves(a, &d->refs[order[oj]]))
                b = order[oj];
        if (b < 0)
            continue;
        const int64_t g = d->refs[b].rem.base - a->rem.base, gl = d->refs[b].loc.base - a->loc.base;
        if (gl == 0)
            continue;
        int mem[OVL_PLAN_MAX_REFS], k = 1;
        mem[0] = order[oi];
        for (int found = 1; found && k < n;) { /* the progression a, b, ... */
            found = 0;
            for (int j = 0; j < n && !found; j++) {
                const struct ref *c = &d->refs[j];
                if (!gone[j] && c->rem.base - a->rem.base == k * g &&
                    c->loc.base - a->loc.base == k * gl && interleaves(a, c)) {
                    mem[k++] = j;
                    found = 1;
                }
            }
        }
        ovl_lmad_t rem, loc;
        if (!with_copies(&a->rem, g, k, &rem) || !with_copies(&a->loc, gl, k, &loc))
            continue;
        /* no less regular than one alone: on the target as a set, and on
         * both sides in order (the order the runs pair in) */
        const int alone = coalesced_dims(&a->rem), both = coalesced_dims(&rem);
        if (alone < 0 || both < 0 || both > alone || coalesced_dims(&loc) < 0 ||
            folded_dims(&rem) > folded_dims(&a->rem) || folded_dims(&loc) > folded_dims(&a->loc))
            continue;
        a->rem = rem;
        a->loc = loc;
        a->gap = g;
        for (int m = 1; m < k; m++) {
            gone[mem[m]] = 1;
            into[mem[m]] = mem[0];
            a->members |= d->refs[mem[m]].members;
        }
        a->nsrc = k;
        merged += k - 1;
    }
    if (!merged)
        return;
    int to[OVL_PLAN_MAX_REFS], m = 0; /* compact: the analysed references */
    for (int i = 0; i < n; i++) {
        to[i] = gone[i] ? -1 : m;
        if (!gone[i])
            d->refs[m++] = d->refs[i];
    }
    d->nrefs = m;
    for (int i = 0; i < m; i++)
        if (d->refs[i].head)
            d->refs[i].with = to[into[d->refs[i].with]];
    p->interleaved = merged;
    p->nrmemo = p->rmemo_next = 0;
}

/* References whose target is on this node (ovl__model_direct():
 * the rule of a local ovl_get, ovl_rma_local_t) move whole, as
 * loop-invariant ones do: a read with the first strip, a write with the
 * last. MPI copies their bytes with this CPU, so strips would only add
 * operations, and with ranks sharing a CPU each would wait for the
 * target's turn. A plan of such references only is one strip (p->direct,
 * choose_strip()). */
static void local_whole(struct plan *p)
{
    p->direct = p->d.nrefs > 0;
    for (int j = 0; j < p->d.nrefs; j++) {
        struct ref *r = &p->d.refs[j];
        r->local = ovl__model_direct(r->rank);
        r->invariant |= r->local;
        p->direct &= r->local;
    }
}

/* *to = *from for the references in use (a whole desc is ~25 KB). */
static void desc_copy(struct desc *to, const struct desc *from)
{
    to->ndepth = from->ndepth;
    memcpy(to->trips, from->trips, sizeof to->trips);
    to->nrefs = from->nrefs;
    memcpy(to->refs, from->refs, (size_t)from->nrefs * sizeof to->refs[0]);
}

/* The program's write references (@d as described): none may overlap
 * another on the same target. */
static int writes_disjoint(const char *fn, const struct desc *d)
{
    for (int j = 0; j < d->nrefs; j++) {
        const struct ref *a = &d->refs[j];
        for (int i = 0; i < j && a->write; i++) {
            const struct ref *b = &d->refs[i];
            int res = OVL_LMAD_MAY_OVERLAP, rc;
            if (!b->write || b->seg != a->seg || b->rank != a->rank)
                continue;
            if ((rc = ovl_lmad_overlap(&b->rem, &a->rem, &res)))
                return ovl__error(rc, fn, "comparing write references %d and %d", i, j);
            if (res != OVL_LMAD_DISJOINT)
                return ovl__error(OVL_ERR_ARG, fn,
                                  "write references %d and %d %s on rank %d: their order would "
                                  "be undefined",
                                  i, j, res == OVL_LMAD_OVERLAP ? "overlap" : "may overlap",
                                  a->rank);
        }
    }
    return OVL_SUCCESS;
}

/* Commit of a plan not analysed yet: the references combined, then
 * analysed (on failure the description is left as the program gave it). */
static int commit_new(const char *fn, struct plan *p, const ovl_param_t *pm)
{
    int rc = writes_disjoint(fn, &p->d);
    if (rc)
        return rc;
    p->param = *pm;
    desc_copy(&p->u, &p->d);
    combine(p);
    interleave(p);
    local_whole(p);
    rc = analyse(fn, p);
    if (rc) {
        shapes_free(p);
        desc_copy(&p->d, &p->u);
        return rc;
    }
    p->state = ST_COMMITTED;
    return OVL_SUCCESS;
}

int ovl_plan_commit(ovl_plan_t plan, const ovl_param_t *param)
{
    static const char *fn = "ovl_plan_commit";
    int rc;
    struct plan *p = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = lookup(fn, plan, &p)) ||
        (rc = ovl__param_check(fn, param,
                               OVL_PARAM_FIELD_PROTOCOL | OVL_PARAM_FIELD_STRIP |
                                   OVL_PARAM_FIELD_LOOKAHEAD | OVL_PARAM_FIELD_LEVEL)))
        return rc;
    ovl_param_t pm = param ? *param : (ovl_param_t){ 0 };
    if ((pm.field_mask & OVL_PARAM_FIELD_PROTOCOL) && (unsigned)pm.protocol >= NPROTO)
        return ovl__error(OVL_ERR_ARG, fn, "unknown param->protocol %d", (int)pm.protocol);
    if ((pm.field_mask & OVL_PARAM_FIELD_STRIP) && pm.strip < 1)
        return ovl__error(OVL_ERR_ARG, fn, "param->strip %" PRId64 ", at least 1", pm.strip);
    if ((pm.field_mask & OVL_PARAM_FIELD_LOOKAHEAD) && pm.lookahead > LOOKAHEAD_MAX)
        return ovl__error(OVL_ERR_ARG, fn, "param->lookahead %u above %d", pm.lookahead,
                          LOOKAHEAD_MAX);
    if (p->state == ST_RUNNING)
        return ovl__error(OVL_ERR_ARG, fn, "plan is executing (ovl_plan_end first)");
    if (p->state == ST_COMMITTED) { /* cached: compare, never analyse again */
        const char *what = p->redesc ? differs(&p->u, &p->re) : NULL;
        if (!what && !same_param(&p->param, &pm))
            what = "the commit params";
        if (what) {
            p->redesc = 0;
            return ovl__error(OVL_ERR_ARG, fn,
                              "plan \"%s\" was committed with another shape: %s differ (use "
                              "another key, or ovl_plan_free it first)",
                              p->key ? p->key : "", what);
        }
        /* a combined reference still shares its partner's buffer, an
         * interleaved one its group's */
        int same_buffers = 1;
        for (int j = 0; p->redesc && j < p->d.nrefs; j++) {
            const struct ref *r = &p->d.refs[j];
            char *b = p->re.refs[r->src].base;
            same_buffers &= !r->head || b == p->re.refs[p->d.refs[r->with].src].base;
            for (int i = 0; i < p->re.nrefs; i++)
                same_buffers &= !(r->members >> i & 1) || p->re.refs[i].base == b;
        }
        if (p->redesc && !same_buffers) { /* analysed again for the new buffers */
            shapes_free(p);
            slots_free(p);
            desc_copy(&p->d, &p->re);
            p->redesc = 0;
            p->state = ST_NEW;
            return commit_new(fn, p, &pm);
        }
        if (p->redesc) {
            for (int j = 0; j < p->u.nrefs; j++)
                p->u.refs[j].base = p->re.refs[j].base;
            for (int j = 0; j < p->d.nrefs; j++)
                p->d.refs[j].base = p->re.refs[p->d.refs[j].src].base;
        }
        p->redesc = 0;
        return OVL_SUCCESS;
    }
    if (p->d.ndepth == 0 || p->d.nrefs == 0)
        return ovl__error(OVL_ERR_ARG, fn, "plan has %s", p->d.ndepth ? "no reference" : "no loop");
    if (pm.field_mask & OVL_PARAM_FIELD_LEVEL) {
        if (pm.level < 0 || pm.level >= p->d.ndepth)
            return ovl__error(OVL_ERR_ARG, fn, "param->level %d: the plan's depths are 0 to %d",
                              pm.level, p->d.ndepth - 1);
        int64_t it = 1;
        for (int i = 0; i <= pm.level; i++)
            if (__builtin_mul_overflow(it, p->d.trips[i], &it))
                return ovl__error(OVL_ERR_ARG, fn,
                                  "param->level %d: the iterations of depths 0 to %d do not fit "
                                  "in int64_t",
                                  pm.level, pm.level);
    }
    return commit_new(fn, p, &pm);
}

/* ---- execution ------------------------------------------------------------- */

static void op_done(struct ovl__op *op, MPI_Status *st)
{
    struct pop *o = (struct pop *)op;
    int none = MPI_SUCCESS, got = 0, cancelled = 0;
    atomic_store(&o->fin, 1);
    if (st && o->expect >= 0 && MPI_Test_cancelled(st, &cancelled) == MPI_SUCCESS && cancelled)
        o->cancelled = 1; /* slot_wait() fetches it otherwise */
    else if (st && st->MPI_ERROR != MPI_SUCCESS)
        atomic_compare_exchange_strong(&o->sl->err, &none, st->MPI_ERROR);
    else if (st && o->expect >= 0 && /* PACK: the target could not serve it */
             (MPI_Get_count(st, MPI_BYTE, &got) != MPI_SUCCESS || got != o->expect))
        atomic_compare_exchange_strong(&o->sl->err, &none, PACK_REFUSED);
    atomic_fetch_sub(&o->sl->left, 1);
}

/* ---- PACK: packing at the target, through an active message -------------------- */

/* A write's active message in flight: its packed bytes and the target's
 * answer. */
struct pack_put {
    struct slot *sl;
    void *buf;
    int32_t code;
};

static void pack_put_done(const ovl_status_t *st, void *arg)
{
    struct pack_put *w = arg;
    int none = MPI_SUCCESS;
    if (st->error != OVL_SUCCESS || w->code != OVL_SUCCESS)
        atomic_compare_exchange_strong(&w->sl->err, &none, MPI_ERR_OTHER);
    atomic_fetch_sub(&w->sl->left, 1);
    ovl__buf_free(w->buf);
    free(w);
}

/* Issue one PACK transfer of strip shape @sh of reference @r, shifted by
 * @rs remote and @ls local bytes: a read posts the receive of the packed
 * bytes into the local layout (op @o, not yet given to the engine) and
 * asks the target to pack and send them; a write packs the local points
 * and sends them with the request, counted in @sl until the target has
 * unpacked them. Returns an ovl code. */
static int pack_issue(const char *fn, struct ref *r, const struct shape *sh, int64_t rs, int64_t ls,
                      struct slot *sl, struct pop *o, char *stage)
{
    const int64_t B = sh->rr.n * sh->rr.size;
    struct pack_hdr h = { .seg = (uint64_t)(uintptr_t)r->seg, .write = r->write, .rem = sh->r };
    h.rem.base += rs;
    ovl_request_t req = OVL_REQUEST_NULL;
    int rc;
    if (!r->write) {
        h.tag = ovl__am_data_tag();
        /* Bytes, never the local datatype: a late strip's receive is
         * cancelled (slot_wait()), and MPICH 4.0 leaks a cancelled receive
         * of a derived datatype. A local layout of one run in point order
         * takes them in place; any other through the slot's staging
         * (unpack()). */
        o->stage = in_order(&sh->l) ? NULL : stage;
        int mrc = MPI_Irecv(o->stage ? o->stage : r->base + sh->lr.lo + ls, (int)B, MPI_BYTE,
                            r->rank, h.tag, ovl__g.comm_am_bulk, &o->op.mreq);
        if (mrc != MPI_SUCCESS)
            return ovl__mpi_error(mrc, fn, "MPI_Irecv");
        o->expect = B;
        o->tag = h.tag;
        o->cancelled = 0;
        if ((rc = ovl__am_call(fn, r->rank, OVL__AM_PLAN, &h, sizeof h, NULL, 0, &req))) {
            MPI_Cancel(&o->op.mreq);
            MPI_Wait(&o->op.mreq, MPI_STATUS_IGNORE);
            return rc;
        }
        return ovl_request_free(&req);
    }
    struct pack_put *w = malloc(sizeof *w);
    char *buf = ovl__buf_alloc(sizeof h + (size_t)B);
    if (!w || !buf) {
        free(w);
        ovl__buf_free(buf);
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a packed strip of %" PRId64 " bytes",
                          B);
    }
    memcpy(buf, &h, sizeof h);
    ovl_lmad_t l = sh->l;
    l.base += ls;
    ovl__lmad_copy(&l, r->base, buf + sizeof h, 0);
    *w = (struct pack_put){ .sl = sl, .buf = buf, .code = OVL_ERR_INTERNAL };
    if ((rc = ovl__am_call(fn, r->rank, OVL__AM_PLAN, buf, sizeof h + (size_t)B, &w->code,
                           sizeof w->code, &req))) {
        ovl__buf_free(buf);
        free(w);
        return rc;
    }
    /* counted in sl->left by the caller; the continuation takes it off */
    if ((rc = ovl_continue(req, pack_put_done, w)) != OVL_SUCCESS) {
        int e = ovl_wait(&req, OVL_STATUS_IGNORE);
        ovl_status_t st = { .error = e };
        pack_put_done(&st, w);
        return rc;
    }
    return ovl_request_free(&req);
}

/* A PACK message on comm_am_bulk that owns its buffer: a read's packed
 * bytes leaving the target, or a late one drained at the reader. */
struct bulk_op {
    struct ovl__op op;
    void *buf;
};

static void bulk_done(struct ovl__op *op, MPI_Status *st)
{
    (void)st;
    struct bulk_op *x = (struct bulk_op *)op;
    ovl__buf_free(x->buf);
    free(x);
}

/* Send (@send) or receive @bytes at @buf (ovl__buf_alloc'd, owned from here on)
 * with @peer and @tag on comm_am_bulk, freed when done; on failure freed
 * at once (a receive that could not be handed to the engine cancelled
 * first). 0, or -1 if nothing is in flight. */
static int bulk_post(int send, void *buf, size_t bytes, int peer, int tag)
{
    struct bulk_op *x = calloc(1, sizeof *x);
    if (!x) {
        ovl__buf_free(buf);
        return -1;
    }
    *x = (struct bulk_op){ .op = { .done = bulk_done,
                                   .ctx = x,
                                   /* a drain, once started, completes (finalize) */
                                   .kind = send ? OVL__OP_SEND : OVL__OP_FRAG,
                                   .peer = peer },
                           .buf = buf };
    int mrc =
        send ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, ovl__g.comm_am_bulk, &x->op.mreq)
             : MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, ovl__g.comm_am_bulk, &x->op.mreq);
    if (mrc != MPI_SUCCESS) {
        bulk_done(&x->op, NULL);
        return -1;
    }
    if (ovl__engine_post(&x->op, &(struct ovl__post){ .bytes = bytes }) != OVL_SUCCESS) {
        if (!send)
            MPI_Cancel(&x->op.mreq);
        MPI_Wait(&x->op.mreq, MPI_STATUS_IGNORE);
        bulk_done(&x->op, NULL);
    }
    return 0;
}

/* The target's side of PACK (an active-message handler of domain 0): a
 * read's points packed in order and sent back with the request's tag (an
 * empty message when it cannot be served, which fails the reader's
 * strip); a write's payload unpacked into the segment, the code replied. */
static void pack_serve(ovl_am_token_t tok, const void *buf, size_t bytes, void *arg)
{
    static const char *fn = "ovl_plan (serving a packed transfer)";
    (void)arg;
    struct pack_hdr h;
    int src = -1, rc = OVL_ERR_ARG;
    ovl_lmad_runs_t rr = { 0 };
    struct ovl__seg *s = NULL;
    if (ovl_am_source(tok, &src) != OVL_SUCCESS || bytes < sizeof h)
        return;
    memcpy(&h, buf, sizeof h);
    const char *payload = (const char *)buf + sizeof h;
    /* a read of a segment freed since is a late read's request (the reader
     * took the bytes by MPI_Rget and drains the empty answer): not reported;
     * a write's is */
    if (ovl_lmad_runs(&h.rem, &rr) == OVL_SUCCESS &&
        (s = ovl__seg_find((ovl_segment_t)(uintptr_t)h.seg)) == NULL && h.write)
        rc = ovl__error(OVL_ERR_ARG, fn, "rank %d wrote to segment %p, freed or never created", src,
                        (void *)(uintptr_t)h.seg);
    if (s) {
        if (rr.lo < 0 || rr.lo + rr.extent > (int64_t)s->bytes)
            rc = ovl__error(OVL_ERR_ARG, fn,
                            "rank %d's bytes [%" PRId64 ", %" PRId64
                            ") outside this rank's %zu-byte segment",
                            src, rr.lo, rr.lo + rr.extent, s->bytes);
        else if (h.write && bytes - sizeof h != (size_t)(rr.n * rr.size))
            rc = ovl__error(OVL_ERR_ARG, fn, "rank %d sent %zu bytes for %" PRId64, src,
                            bytes - sizeof h, rr.n * rr.size);
        else
            rc = OVL_SUCCESS;
    }
    if (h.write) {
        if (rc == OVL_SUCCESS)
            ovl__lmad_copy(&h.rem, s->base, (char *)(uintptr_t)payload, 1);
        int32_t code = rc;
        if (ovl_am_reply(tok, &code, sizeof code) != OVL_SUCCESS) /* the writer waits on */
            ovl__report(OVL_ERR_NOMEM, fn, "cannot answer rank %d", src);
        return;
    }
    const size_t B = rc == OVL_SUCCESS ? (size_t)(rr.n * rr.size) : 0;
    char *out = ovl__buf_alloc(B ? B : 1);
    if (out && B)
        ovl__lmad_copy(&h.rem, s->base, out, 0);
    if (!out || bulk_post(1, out, B, src, h.tag) != 0) {
        /* answered empty (the reader's strip fails) from a static byte */
        static char none;
        MPI_Send(&none, 0, MPI_BYTE, src, h.tag, ovl__g.comm_am_bulk);
    }
}

void ovl__plan_init(void)
{
    ovl__am_register(OVL__AM_PLAN, pack_serve, NULL);
}

/* Issue strip @k's reads (@w 0) or writes (@w 1) into slot @sl; returns
 * an ovl code (ops not issued count as done). */
static int issue(const char *fn, struct plan *p, struct slot *sl, int64_t k, int w)
{
    int64_t row, i0, it;
    int kind;
    strip_of(p, k, &row, &i0, &it, &kind);
    int64_t n = 0, am = 0; /* engine ops, PACK writes' active messages */
    MPI_Win wins[OVL_PLAN_MAX_REFS];
    sl->strip = k;
    atomic_store(&sl->err, MPI_SUCCESS);
    atomic_store(&sl->left, 0);
    sl->nops = 0;
    for (int j = 0; j < p->d.nrefs; j++) { /* a segment freed meanwhile: nothing issued */
        struct ovl__seg *s = NULL;
        int rc = ovl__seg_lookup(fn, p->d.refs[j].seg, &s);
        if (rc)
            return rc;
        wins[j] = ovl__seg_win(s, p->dom);
    }
    atomic_store(&sl->left, (int)p->max_ops[w]);
    int mrc = MPI_SUCCESS;
    for (int j = 0; j < p->d.nrefs && mrc == MPI_SUCCESS; j++) {
        struct ref *r = &p->d.refs[j];
        /* a loop-invariant read comes with the first strip, a write leaves with the last */
        if (r->write != w || (r->invariant && k != (w ? p->nstrips - 1 : 0)))
            continue;
        MPI_Win win = wins[j];
        const struct shape *sh = &r->sh[r->invariant ? 0 : kind];
        int64_t rs, ls;
        shifts(p, r, row, i0, &rs, &ls);
        const int64_t from = n;
        switch (p->proto) {
        case OVL_PLAN_DATATYPE:
            mrc = w ? MPI_Rput(r->base + sh->lr.lo + ls, 1, sh->ltype, r->rank,
                               (MPI_Aint)(sh->rr.lo + rs), 1, sh->rtype, win, &sl->ops[n].op.mreq)
                    : MPI_Rget(r->base + sh->lr.lo + ls, 1, sh->ltype, r->rank,
                               (MPI_Aint)(sh->rr.lo + rs), 1, sh->rtype, win, &sl->ops[n].op.mreq);
            if (mrc == MPI_SUCCESS)
                n++;
            break;
        case OVL_PLAN_RUNS:
            for (int64_t i = 0; i < sh->npc && mrc == MPI_SUCCESS; i++) {
                const struct piece *c = &sh->pc[i];
                mrc = w ? MPI_Rput(r->base + c->loff + ls, (int)c->len, MPI_BYTE, r->rank,
                                   (MPI_Aint)(c->roff + rs), (int)c->len, MPI_BYTE, win,
                                   &sl->ops[n].op.mreq)
                        : MPI_Rget(r->base + c->loff + ls, (int)c->len, MPI_BYTE, r->rank,
                                   (MPI_Aint)(c->roff + rs), (int)c->len, MPI_BYTE, win,
                                   &sl->ops[n].op.mreq);
                if (mrc == MPI_SUCCESS)
                    n++;
            }
            break;
        case OVL_PLAN_PACK: {
            sl->ops[n].expect = -1;
            int prc = pack_issue(fn, r, sh, rs, ls, sl, &sl->ops[n], sl->stage[j]);
            if (prc != OVL_SUCCESS) {
                atomic_fetch_sub(&sl->left, (int)(p->max_ops[w] - n - am));
                for (int64_t i = 0; i < n; i++) { /* posted already: wait for them here */
                    MPI_Status st;
                    sl->ops[i].sl = sl;
                    MPI_Wait(&sl->ops[i].op.mreq, &st);
                    op_done(&sl->ops[i].op, &st);
                }
                return prc;
            }
            if (w) {
                am++;
            } else {
                struct pop *o = &sl->ops[n++];
                o->ref = j;
                o->kind = r->invariant ? 0 : kind;
                o->rs = rs;
                o->ls = ls;
            }
            break;
        }
        default: /* OVL_PLAN_BBOX */
            mrc = MPI_Rget(sl->stage[j], (int)sh->rr.extent, MPI_BYTE, r->rank,
                           (MPI_Aint)(sh->rr.lo + rs), (int)sh->rr.extent, MPI_BYTE, win,
                           &sl->ops[n].op.mreq);
            if (mrc == MPI_SUCCESS)
                n++;
            break;
        }
        for (int64_t i = from; i < n; i++) {
            sl->ops[i].op.peer = r->rank;
            if (p->proto != OVL_PLAN_PACK)
                sl->ops[i].expect = -1;
        }
    }
    /* the ops that will not be issued count as done before any is posted */
    atomic_fetch_sub(&sl->left, (int)(p->max_ops[w] - n - am));
    sl->nops = n;
    for (int64_t i = 0; i < n; i++) {
        struct pop *o = &sl->ops[i];
        atomic_store(&o->fin, 0);
        o->sl = sl;
        o->op.ctx = o;
        o->op.done = op_done;
        o->op.kind = OVL__OP_RMA;
        if (ovl__engine_post(&o->op, NULL) != OVL_SUCCESS) {
            MPI_Status st;
            MPI_Wait(&o->op.mreq, &st);
            st.MPI_ERROR = MPI_SUCCESS;
            op_done(&o->op, &st);
        }
    }
    if (mrc != MPI_SUCCESS)
        return ovl__mpi_error(mrc, fn, w ? "MPI_Rput" : "MPI_Rget");
    return OVL_SUCCESS;
}

static int slot_done(const void *a)
{
    return atomic_load(&((const struct slot *)a)->left) == 0;
}

/* PACK op @o's receive was cancelled: the strip's bytes by MPI_Rget with
 * both datatypes (the remote one built now), waited for here; the packed
 * message, if the target sends it after all, drained. An MPI code. */
static int pack_fallback(struct plan *p, const struct pop *o)
{
    struct ref *r = &p->d.refs[o->ref];
    struct shape *sh = &r->sh[o->kind];
    struct ovl__seg *s = NULL;
    MPI_Request q;
    int mrc;
    if (ovl__seg_lookup("ovl_plan_next", r->seg, &s) != OVL_SUCCESS)
        return MPI_ERR_WIN;
    if (sh->rtype == MPI_DATATYPE_NULL && type_of(&sh->r, sh->rr.lo, &sh->rtype) != OVL_SUCCESS)
        return MPI_ERR_TYPE;
    const MPI_Win win = ovl__seg_win(s, p->dom);
    if ((mrc = MPI_Rget(r->base + sh->lr.lo + o->ls, 1, sh->ltype, r->rank,
                        (MPI_Aint)(sh->rr.lo + o->rs), 1, sh->rtype, win, &q)) != MPI_SUCCESS ||
        (mrc = MPI_Wait(&q, MPI_STATUS_IGNORE)) != MPI_SUCCESS ||
        (mrc = MPI_Win_flush_local(r->rank, win)) != MPI_SUCCESS) /* pmodels/mpich#7896 */
        return mrc;
    const size_t B = (size_t)o->expect;
    void *scratch = ovl__buf_alloc(B ? B : 1);
    if (scratch) /* else (or failing) the late message stays in MPI's queue */
        (void)bulk_post(0, scratch, B, r->rank, o->tag);
    return MPI_SUCCESS;
}

struct late_wait {
    const struct slot *sl;
    uint64_t until;
};

static int slot_done_or_late(const void *a)
{
    const struct late_wait *w = a;
    return slot_done(w->sl) || ovl__now_ns() > w->until;
}

/* Wait for @sl's ops; its first MPI error as an ovl code. A PACK read
 * strip of an automatic plan without the progress thread waits at most
 * PACK_LATE_US + PACK_LATE_X x its prediction, then is fetched by
 * MPI_Rget (pack_fallback()). */
static int slot_wait(const char *fn, struct plan *p, struct slot *sl, int w)
{
    if (!w && p->proto == OVL_PLAN_PACK && !p->forced &&
        ovl__g.cfg.progress.mode != OVL_PROGRESS_THREAD && !slot_done(sl)) {
        const double per =
            p->pred[OVL_PLAN_PACK] > 0 ? p->pred[OVL_PLAN_PACK] / (double)p->nstrips : 0;
        struct late_wait lw = { sl, ovl__now_ns() +
                                        (uint64_t)((PACK_LATE_US + PACK_LATE_X * per) * 1e3) };
        ovl__engine_spin(slot_done_or_late, &lw);
        if (!slot_done(sl)) { /* late: cancel what has not arrived (the engine completes it) */
            for (int64_t i = 0; i < sl->nops; i++) {
                MPI_Request h = sl->ops[i].op.mreq;
                if (!atomic_load(&sl->ops[i].fin) && h != MPI_REQUEST_NULL)
                    MPI_Cancel(&h);
            }
        }
    }
    if (!slot_done(sl))
        ovl__engine_spin(slot_done, sl);
    for (int64_t i = 0; !w && p->proto == OVL_PLAN_PACK && i < sl->nops; i++) {
        struct pop *o = &sl->ops[i];
        if (!o->cancelled)
            continue;
        o->cancelled = 0;
        o->stage = NULL; /* the fallback's MPI_Rget put the bytes in place */
        p->pack_late++;
        int mrc = pack_fallback(p, o), none = MPI_SUCCESS;
        if (mrc != MPI_SUCCESS)
            atomic_compare_exchange_strong(&sl->err, &none, mrc);
    }
    int e = atomic_load(&sl->err);
    if (e == PACK_REFUSED)
        return ovl__error(OVL_ERR_ARG, fn,
                          "a target could not serve a packed read (its segment freed, the bytes "
                          "outside it, or no memory there): it answered empty");
    return e == MPI_SUCCESS ? OVL_SUCCESS : ovl__mpi_error(e, fn, "a strip's transfer");
}

int ovl_plan_begin(ovl_plan_t plan)
{
    static const char *fn = "ovl_plan_begin";
    int rc;
    struct plan *p = NULL;
    /* refused before anything changes: a plan begun there could be neither
     * stepped nor ended (ovl_plan_next and ovl_plan_end block) */
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)) ||
        (rc = lookup(fn, plan, &p)))
        return rc;
    if (p->state == ST_NEW)
        return ovl__error(OVL_ERR_ARG, fn, "plan not committed (ovl_plan_commit first)");
    if (p->state == ST_RUNNING)
        return ovl__error(OVL_ERR_ARG, fn, "plan already begun (ovl_plan_end first)");
    if (p->redesc)
        return ovl__error(OVL_ERR_ARG, fn, "plan described again but not committed");
    const uint64_t t0 = ovl__now_ns();
    if (!p->ready) {
        slots_free(p); /* sized by the exact counts */
        if ((rc = prepare(fn, p)))
            return rc;
    }
    for (int j = 0; j < p->d.nrefs; j++) {
        struct ovl__seg *s = NULL;
        if ((rc = ovl__seg_lookup(fn, p->d.refs[j].seg, &s)))
            return rc;
    }
    int want = (int)p->lookahead + 1;
    if (want > p->nstrips)
        want = (int)p->nstrips;
    if (p->nslots != want) {
        slots_free(p);
        p->slots = calloc((size_t)want, sizeof *p->slots);
        p->wslots = p->writes ? calloc((size_t)want, sizeof *p->wslots) : NULL;
        if (!p->slots || (p->writes && !p->wslots)) {
            free(p->slots);
            free(p->wslots);
            p->slots = p->wslots = NULL;
            return ovl__error(OVL_ERR_NOMEM, fn, "no memory for %d strips", want);
        }
        p->nslots = want;
        for (int i = 0; i < want; i++) {
            struct slot *sl = &p->slots[i];
            sl->strip = -1;
            sl->ops = buf_zalloc(p->max_ops[0] ? p->max_ops[0] : 1, sizeof *sl->ops);
            int ok = sl->ops != NULL;
            if (ok && p->wslots) {
                p->wslots[i].strip = -1;
                ok = (p->wslots[i].ops =
                          buf_zalloc(p->max_ops[1] ? p->max_ops[1] : 1, sizeof *sl->ops)) != NULL;
            }
            for (int j = 0; j < p->d.nrefs && ok && p->proto == OVL_PLAN_BBOX; j++)
                ok = (sl->stage[j] = ovl__buf_alloc((size_t)p->d.refs[j].sh[0].rr.extent + 1)) !=
                     NULL;
            for (int j = 0; j < p->d.nrefs && ok && p->proto == OVL_PLAN_PACK; j++) {
                const struct ref *r = &p->d.refs[j];
                if (!r->write && (!in_order(&r->sh[0].l) || !in_order(&r->sh[1].l)))
                    ok = (sl->stage[j] = ovl__buf_alloc((size_t)(r->sh[0].rr.n * r->sh[0].rr.size) +
                                                        1)) != NULL;
            }
            if (!ok) {
                slots_free(p);
                return ovl__error(OVL_ERR_NOMEM, fn, "no memory for strip staging");
            }
        }
    }
    p->dom = ovl__dom_cur();
    p->cur = -1;
    p->issued = 0;
    p->state = ST_RUNNING;
    p->runs++;
    p->pack_late = 0;
    rc = OVL_SUCCESS;
    for (; p->issued < p->nslots && rc == OVL_SUCCESS; p->issued++)
        rc = issue(fn, p, &p->slots[p->issued % p->nslots], p->issued, 0);
    p->comp_ns = p->out_at = 0;
    p->in_ns = ovl__now_ns() - t0;
    return rc;
}

/* DATATYPE: MPICH's CH4/UCX (4.0.2 here; pmodels/mpich#7896) completes an
 * MPI_Rget with a non-contiguous datatype before its bytes are in the
 * origin buffer (they land at the next flush: the netmod falls back to an
 * active message without a request), so a strip's requests completing is
 * not enough: flush
 * (locally) every target of strip @k (@k < 0: of every reference). This
 * also waits for the strips issued after it to those targets. */
static int flush_strip(const char *fn, struct plan *p, int64_t k)
{
    for (int j = 0; j < p->d.nrefs; j++) {
        const struct ref *r = &p->d.refs[j];
        int dup = 0;
        for (int i = 0; i < j; i++)
            dup |= p->d.refs[i].seg == r->seg && p->d.refs[i].rank == r->rank &&
                   !p->d.refs[i].write && !(k > 0 && p->d.refs[i].invariant);
        if (dup || r->write || (k > 0 && r->invariant))
            continue;
        struct ovl__seg *s = NULL;
        int rc = ovl__seg_lookup(fn, r->seg, &s);
        if (rc)
            return rc;
        int mrc = MPI_Win_flush_local(r->rank, ovl__seg_win(s, p->dom));
        if (mrc != MPI_SUCCESS)
            return ovl__mpi_error(mrc, fn, "MPI_Win_flush_local");
    }
    return OVL_SUCCESS;
}

/* Writes: strip @k is final, its puts leave (slot @k's previous puts, a
 * lookahead's worth of strips ago, retired first). */
static int put_strip(const char *fn, struct plan *p, int64_t k)
{
    if (!p->writes)
        return OVL_SUCCESS;
    struct slot *sl = &p->wslots[k % p->nslots];
    int rc = slot_wait(fn, p, sl, 1);
    return rc ? rc : issue(fn, p, sl, k, 1);
}

/* Writes complete at their targets: MPI_Win_flush to every write target. */
static int flush_writes(const char *fn, struct plan *p)
{
    for (int j = 0; j < p->d.nrefs; j++) {
        const struct ref *r = &p->d.refs[j];
        int dup = 0;
        for (int i = 0; i < j; i++)
            dup |= p->d.refs[i].write && p->d.refs[i].seg == r->seg && p->d.refs[i].rank == r->rank;
        if (dup || !r->write)
            continue;
        struct ovl__seg *s = NULL;
        int rc = ovl__seg_lookup(fn, r->seg, &s);
        if (rc)
            return rc;
        int mrc = MPI_Win_flush(r->rank, ovl__seg_win(s, p->dom));
        if (mrc != MPI_SUCCESS)
            return ovl__mpi_error(mrc, fn, "MPI_Win_flush");
    }
    return OVL_SUCCESS;
}

/* Copy a BBOX strip out of its staging. */
static void copy_out(struct plan *p, struct slot *sl)
{
    const int64_t k = sl->strip;
    int64_t row, i0, it, rs, ls;
    int kind;
    strip_of(p, k, &row, &i0, &it, &kind);
    for (int j = 0; j < p->d.nrefs; j++) {
        struct ref *r = &p->d.refs[j];
        if (r->invariant && k > 0)
            continue;
        const struct shape *sh = &r->sh[r->invariant ? 0 : kind];
        shifts(p, r, row, i0, &rs, &ls);
        for (int64_t i = 0; i < sh->npc; i++)
            memcpy(r->base + sh->pc[i].loff + ls, sl->stage[j] + (sh->pc[i].roff - sh->rr.lo),
                   (size_t)sh->pc[i].len);
    }
}

/* Unpack a PACK strip's reads that came through staging. */
static void unpack(struct plan *p, struct slot *sl)
{
    for (int64_t i = 0; i < sl->nops; i++) {
        struct pop *o = &sl->ops[i];
        if (!o->stage)
            continue;
        const struct ref *r = &p->d.refs[o->ref];
        ovl_lmad_t l = r->sh[o->kind].l;
        l.base += o->ls;
        ovl__lmad_copy(&l, r->base, o->stage, 1);
        o->stage = NULL;
    }
}

static int next_strip(const char *fn, struct plan *p, int64_t *first, int64_t *iters);

int ovl_plan_next(ovl_plan_t plan, int64_t *first, int64_t *iters)
{
    static const char *fn = "ovl_plan_next";
    int rc;
    struct plan *p = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = lookup(fn, plan, &p)))
        return rc;
    if (!first || !iters)
        return ovl__error(OVL_ERR_ARG, fn, "%s is NULL", !first ? "first" : "iters");
    if (p->state != ST_RUNNING)
        return ovl__error(OVL_ERR_ARG, fn, "plan not begun (ovl_plan_begin first)");
    if ((rc = ovl__check_not_in_callback(fn)))
        return rc;
    const uint64_t t0 = ovl__now_ns();
    if (p->out_at)
        p->comp_ns += t0 - p->out_at;
    rc = next_strip(fn, p, first, iters);
    const uint64_t t1 = ovl__now_ns();
    p->in_ns += t1 - t0;
    p->out_at = rc == OVL_SUCCESS && *iters > 0 ? t1 : 0;
    return rc;
}

static int next_strip(const char *fn, struct plan *p, int64_t *first, int64_t *iters)
{
    int rc = OVL_SUCCESS;
    struct ovl__dom *prev = ovl__dom_enter(p->dom);
    /* the strip handed out before is final: its puts leave */
    if (p->cur >= 0 && p->cur < p->nstrips && (rc = put_strip(fn, p, p->cur))) {
        ovl__dom_leave(prev);
        return rc;
    }
    if (p->cur + 1 >= p->nstrips) { /* past the last strip */
        ovl__dom_leave(prev);
        p->cur = p->nstrips;
        *first = p->rows * p->lt * p->inner;
        *iters = 0;
        return OVL_SUCCESS;
    }
    /* and its slot takes the next strip's reads; under DATATYPE after the
     * wait, whose flush completes every strip in flight to the target: one
     * issued before it would be waited for too */
    const int late = p->proto == OVL_PLAN_DATATYPE;
    if (!late && p->cur >= 0 && p->issued < p->nstrips) {
        rc = issue(fn, p, &p->slots[p->issued % p->nslots], p->issued, 0);
        p->issued++;
    }
    p->cur++;
    if (late && !rc && p->issued <= p->cur) { /* the strip handed out now (lookahead 0) */
        rc = issue(fn, p, &p->slots[p->issued % p->nslots], p->issued, 0);
        p->issued++;
    }
    struct slot *sl = &p->slots[p->cur % p->nslots];
    int wrc = slot_wait(fn, p, sl, 0);
    if (!wrc && late)
        wrc = flush_strip(fn, p, p->cur);
    while (late && !wrc && !rc && p->issued < p->nstrips && p->issued - p->cur < p->nslots) {
        rc = issue(fn, p, &p->slots[p->issued % p->nslots], p->issued, 0);
        p->issued++;
    }
    ovl__dom_leave(prev);
    if (rc || (rc = wrc))
        return rc;
    if (p->proto == OVL_PLAN_BBOX)
        copy_out(p, sl);
    if (p->proto == OVL_PLAN_PACK)
        unpack(p, sl);
    int64_t row, i0, it;
    int kind;
    strip_of(p, p->cur, &row, &i0, &it, &kind);
    *first = (row * p->lt + i0) * p->inner;
    *iters = it * p->inner;
    return OVL_SUCCESS;
}

/* Wait for every slot in flight; the first error. */
/* Predicted time of one execution under protocol @proto with strips of
 * @S iterations, @c_us of computation per iteration and @la strips ahead:
 * the strips' transfers follow each other on the link (each its predicted
 * time less the latency, which they overlap), a strip is issued when the
 * program takes the one @la + 1 places before it, and the program computes
 * on a strip once it is in place and the previous one is done, paying
 * the overhead of handing it out (o). */
static double pipeline_us(struct plan *p, int proto, int64_t S, double c_us, unsigned la)
{
    const struct desc *d = &p->d;
    const int64_t T = p->lt, pr = per_row(p, S), ns = p->rows * pr, last = T - (pr - 1) * S;
    if (proto == OVL_PLAN_BBOX && p->writes)
        return -1;
    double w[2] = { 0, 0 }, first = 0; /* a full strip, the last; the invariant references */
    for (int j = 0; j < d->nrefs; j++) {
        const struct ref *r = &d->refs[j];
        for (int k = 0; k < 2; k++) {
            if (k == 1 && (r->invariant || last == S)) /* the same as the full one */
                continue;
            struct shape t; /* what predict() reads (not zeroed: ~0.5 KB) */
            t.iters = r->invariant ? T : k ? last : S;
            t.slow = p->slow;
            t.pc = NULL;
            t.rtype = t.ltype = MPI_DATATYPE_NULL;
            cut(&t.r, &r->rem, r->invariant, t.iters, p->level);
            cut(&t.l, &r->loc, r->invariant, t.iters, p->level);
            strip_runs(p, j, t.iters, &t.r, &t.l, &t.rr, &t.lr);
            t.npc = est_pieces(&t.rr, &t.lr);
            const char *why;
            int mapped;
            double x = predict(proto, &t, &why, &mapped);
            if (x < 0)
                return -1;
            if (r->invariant)
                first += k ? 0 : x;
            else
                w[k] += x;
        }
    }
    if (last == S)
        w[1] = w[0];
    if (proto == OVL_PLAN_DATATYPE) /* issued after the flush: at the previous strip's start */
        la = la > 0 ? la - 1 : 0;
    const double lat = proto_lat(proto), h = ovl__m.o_us;
    double link = 0, done = 0, start[LOOKAHEAD_MAX + 2];
    for (int64_t k = 0; k < ns; k++) {
        double issued = k <= (int64_t)la ? 0 : start[(k - la - 1) % (LOOKAHEAD_MAX + 2)];
        const int rl = k % pr == pr - 1; /* a row's last strip */
        double x = (rl ? w[1] : w[0]) + (k == 0 ? first : 0);
        double occ = x > lat ? x - lat : 0;
        link = (link > issued ? link : issued) + occ;
        double arrive = link + lat, st = arrive > done ? arrive : done;
        start[k % (LOOKAHEAD_MAX + 2)] = st;
        done = st + h + c_us * (double)(rl ? last : S);
    }
    return done;
}

/* After the first whole execution, the strip size from its measured
 * computation (@c_us per iteration): the S among T, T/2, T/4, ... of
 * least pipeline_us, unless the commit's param set S. The plan is
 * re-shaped for it (strips, pieces, datatypes, predictions); the protocol
 * stays if it can move the new strips. */
static void replan(const char *fn, struct plan *p, double c_us)
{
    p->strip_measured = 1;
    p->c_us = c_us;
    if (p->param.field_mask & OVL_PARAM_FIELD_STRIP)
        return;
    const int64_t best = choose_strip(p, p->proto, c_us);
    if (best == p->S)
        return;
    const int64_t old = p->S;
    p->S = best;
    shapes_build(p);
    predict_all(p);
    if (p->pred[p->proto] >= 0 && prepare(fn, p) == OVL_SUCCESS) {
        slots_free(p);
        p->replans++;
        return;
    }
    p->S = old; /* could not: back to what ran */
    shapes_build(p);
    predict_all(p);
    if (prepare(fn, p) == OVL_SUCCESS)
        return;
    shapes_free(p); /* nothing to run with: the next begin says commit first */
    slots_free(p);
    desc_copy(&p->d, &p->u);
    p->state = ST_NEW;
}

static double median3(const double *v)
{
    double a = v[0], b = v[1], c = v[2];
    return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

/* Protocol @r's measured time: the median of its last RERANK_RUNS whole
 * executions, the mean of fewer; < 0 never measured. */
static double measured_of(const struct plan *p, int r)
{
    const int n = p->nmeas[r] < RERANK_RUNS ? p->nmeas[r] : RERANK_RUNS;
    if (n == RERANK_RUNS)
        return median3(p->meas[r]);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += p->meas[r][i];
    return n ? sum / n : -1;
}

static void switch_proto(const char *fn, struct plan *p, int q, int to);

/* Protocol @q left out for good (until analysed again), for @why. */
static void leave_out(struct plan *p, int q, const char *why)
{
    p->left_out |= 1u << q;
    p->out_why[q] = why;
    predict_all(p);
}

/* The protocol of least measured time among those not left out (a late
 * PACK's measurements no longer count); 0 if none is measured. */
static int best_measured(const struct plan *p)
{
    int best = 0;
    for (int r = 1; r < NPROTO; r++)
        if (p->nmeas[r] > 0 && p->pred[r] >= 0 &&
            (!best || measured_of(p, r) < measured_of(p, best)))
            best = r;
    return best;
}

/* Strips of @S iterations (the shapes and predictions for them). */
static void restrip(struct plan *p, int64_t S)
{
    if (S == p->S)
        return;
    p->S = S;
    shapes_build(p);
    predict_all(p);
}

/* After a whole execution of @us microseconds in the plan's calls: the
 * bounded exploration of RERANK_*. Switching protocol rebuilds what it
 * needs (prepare()) and the strips' slots at the next ovl_plan_begin. */
static void rerank(const char *fn, struct plan *p, double us)
{
    const int q = p->proto;
    if (p->settled || p->runs < 2) /* the first execution warms MPI up */
        return;
    p->meas[q][p->nmeas[q]++ % RERANK_RUNS] = us;
    const int trying = p->reranks > 0; /* q is on trial: judged on each execution */
    int to = q;
    if (trying || measured_of(p, q) > RERANK_OVER * p->pred[q] + RERANK_FLOOR_US) {
        const int bm = best_measured(p), best = bm ? bm : q;
        int next = 0; /* the untried one predicted best, if below the best measured */
        for (int r = 1; r < NPROTO; r++)
            if (p->pred[r] >= 0 && p->nmeas[r] == 0 && p->pred[r] < measured_of(p, best) &&
                (!next || p->pred[r] < p->pred[next]))
                next = r;
        if (next) {
            to = next;
        } else if (trying) { /* every candidate tried: the best measured, for good once
                              * it has RERANK_RUNS executions (one lucky one does not
                              * decide: it keeps running until its median does) */
            to = best;
            p->settled = p->nmeas[best] >= RERANK_RUNS;
        }
    }
    if (to != q)
        switch_proto(fn, p, q, to);
}

/* Execute with protocol @to from the next execution on (@q until now), at
 * its own strip size once the computation is measured; left out (its
 * prediction -1) if it cannot be built. */
static void switch_proto(const char *fn, struct plan *p, int q, int to)
{
    p->proto = (ovl_plan_protocol_t)to;
    const int64_t old = p->S;
    if (p->strip_measured && !(p->param.field_mask & OVL_PARAM_FIELD_STRIP))
        restrip(p, choose_strip(p, to, p->c_us)); /* its own strip size */
    set_lookahead(p);
    if (prepare(fn, p) != OVL_SUCCESS) { /* cannot build it after all: left out */
        leave_out(p, to, "its datatypes could not be built");
        p->proto = (ovl_plan_protocol_t)q;
        restrip(p, old);
        set_lookahead(p);
        if (prepare(fn, p) != OVL_SUCCESS)
            p->settled = 1;
        return;
    }
    slots_free(p); /* sized for the other protocol */
    p->reranks++;
}

static int drain(const char *fn, struct plan *p)
{
    int rc = OVL_SUCCESS;
    struct ovl__dom *prev = ovl__dom_enter(p->dom);
    if (p->cur >= 0 && p->cur < p->nstrips) /* the strip handed out last is final too */
        rc = put_strip(fn, p, p->cur);
    for (int i = 0; i < p->nslots; i++) {
        int r = slot_wait(fn, p, &p->slots[i], 0);
        if (!rc)
            rc = r;
        p->slots[i].strip = -1;
        if (p->wslots) {
            r = slot_wait(fn, p, &p->wslots[i], 1);
            if (!rc)
                rc = r;
            p->wslots[i].strip = -1;
        }
    }
    if (p->writes && p->proto != OVL_PLAN_PACK) { /* PACK: answered once unpacked */
        int r = flush_writes(fn, p);
        if (!rc)
            rc = r;
    }
    if (p->proto == OVL_PLAN_DATATYPE) {
        int r = flush_strip(fn, p, -1);
        if (!rc)
            rc = r;
    }
    ovl__dom_leave(prev);
    return rc;
}

int ovl_plan_end(ovl_plan_t plan)
{
    static const char *fn = "ovl_plan_end";
    int rc;
    struct plan *p = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = lookup(fn, plan, &p)))
        return rc;
    if (p->state != ST_RUNNING)
        return ovl__error(OVL_ERR_ARG, fn, "plan not begun");
    if ((rc = ovl__check_not_in_callback(fn)))
        return rc;
    const uint64_t t0 = ovl__now_ns();
    if (p->out_at)
        p->comp_ns += t0 - p->out_at;
    p->out_at = 0;
    const int whole = p->cur >= p->nstrips; /* every strip handed out */
    rc = drain(fn, p);
    p->state = ST_COMMITTED;
    p->cur = -1;
    p->in_ns += ovl__now_ns() - t0;
    const int late = p->pack_late && p->proto == OVL_PLAN_PACK && !p->forced;
    if (rc == OVL_SUCCESS && whole && !p->strip_measured) {
        const unsigned before = p->replans;
        replan(fn, p, (double)p->comp_ns / 1e3 / (double)(p->rows * p->lt));
        if (p->replans != before && !late)
            return rc; /* other strips: re-ranking counts from the next execution */
    }
    if (late && p->proto == OVL_PLAN_PACK && p->state == ST_COMMITTED) {
        /* a target did not answer in time: PACK is out for this plan */
        leave_out(p, OVL_PLAN_PACK,
                  "a target did not pack in time (it computes, or waits "
                  "outside ovl)");
        p->settled = 0; /* the best measured, else the least predicted; judged from now on */
        for (int tries = 0; tries < NPROTO && p->proto == OVL_PLAN_PACK; tries++) {
            int64_t S = p->S;
            int to = best_measured(p);
            if (!to)
                to = choose(p, p->strip_measured ? p->c_us : 0, 0, &S);
            if (to == OVL_PLAN_AUTO)
                break; /* none left: PACK's strips keep falling back to MPI_Rget */
            switch_proto(fn, p, OVL_PLAN_PACK, to); /* leaves @to out if it cannot be built */
        }
        return rc;
    }
    if (rc == OVL_SUCCESS && whole)
        rerank(fn, p, (double)p->in_ns / 1e3);
    return rc;
}

int ovl_plan_run(ovl_plan_t plan, ovl_plan_strip_fn cb, void *arg)
{
    static const char *fn = "ovl_plan_run";
    int rc;
    struct plan *p = NULL;
    if ((rc = ovl__check_init(fn)) || (rc = ovl__check_not_in_callback(fn)) ||
        (rc = lookup(fn, plan, &p)))
        return rc;
    if (!cb)
        return ovl__error(OVL_ERR_ARG, fn, "the strip callback is NULL");
    if ((rc = ovl_plan_begin(plan)))
        return rc;
    int64_t first, iters;
    int stop = 0;
    while (!stop && (rc = ovl_plan_next(plan, &first, &iters)) == OVL_SUCCESS && iters > 0)
        stop = cb(first, iters, arg) != 0;
    int erc = ovl_plan_end(plan);
    if (rc)
        return rc;
    if (erc)
        return erc;
    return stop ? ovl__error(OVL_ERR_CANCELLED, fn,
                             "the strip callback stopped the execution at "
                             "iteration %" PRId64,
                             first)
                : OVL_SUCCESS;
}

/* ---- reporting ------------------------------------------------------------- */

/* A committed plan for a report into @dst (@what names it), or the error. */
static int lookup_committed(const char *fn, ovl_plan_t plan, const void *dst, const char *what,
                            struct plan **out)
{
    int rc;
    if ((rc = lookup(fn, plan, out)))
        return rc;
    if (!dst)
        return ovl__error(OVL_ERR_ARG, fn, "%s is NULL", what);
    if ((*out)->state == ST_NEW)
        return ovl__error(OVL_ERR_ARG, fn, "plan not committed");
    return OVL_SUCCESS;
}

int ovl_plan_query(ovl_plan_t plan, ovl_plan_info_t *info)
{
    struct plan *p = NULL;
    int rc = lookup_committed("ovl_plan_query", plan, info, "info", &p);
    if (rc)
        return rc;
    *info = (ovl_plan_info_t){ .protocol = p->proto,
                               .forced = p->forced,
                               .strip = p->S,
                               .nstrips = p->nstrips,
                               .lookahead = p->lookahead,
                               .ops = p->ops,
                               .bytes = p->bytes,
                               .analyses = p->analyses,
                               .runs = p->runs };
    for (int q = 0; q < NPROTO; q++) {
        info->predicted_us[q] = q ? p->pred[q] : -1;
        info->measured_us[q] = q ? measured_of(p, q) : -1;
    }
    info->reranks = p->reranks;
    info->combined = p->combined;
    info->interleaved = p->interleaved;
    info->compute_us = p->strip_measured ? p->c_us : -1;
    info->replans = p->replans;
    info->level = p->level;
    info->flows = p->flows;
    info->load_factor = p->slow;
    return OVL_SUCCESS;
}

int ovl_plan_explain(ovl_plan_t plan, FILE *out)
{
    struct plan *p = NULL;
    int rc = lookup_committed("ovl_plan_explain", plan, out, "out", &p);
    if (rc)
        return rc;
    const struct desc *d = &p->d;
    fprintf(out, "plan \"%s\": %d loop%s (", p->key ? p->key : "", d->ndepth,
            d->ndepth > 1 ? "s" : "");
    for (int i = 0; i < d->ndepth; i++)
        fprintf(out, "%sdepth %d: %" PRId64 " trips", i ? ", " : "", i, d->trips[i]);
    fprintf(out, "), %d reference%s\n", d->nrefs, d->nrefs > 1 ? "s" : "");
    for (int j = 0; j < d->nrefs; j++) {
        const struct ref *r = &d->refs[j];
        ovl_lmad_runs_t rr;
        if (ovl_lmad_runs(&r->rem, &rr) != OVL_SUCCESS)
            rr = (ovl_lmad_runs_t){ 0 };
        fprintf(out,
                "  ref %d: %s rank %d, %" PRId64 " bytes in %" PRId64 " runs of %" PRId64
                ", bounding box [%" PRId64 ", %" PRId64 ")",
                j, r->write ? "write to" : "read from", r->rank, rr.n * rr.size, rr.n, rr.size,
                rr.lo, rr.lo + rr.extent);
        if (r->nsrc > 1) {
            fprintf(out, ", the program's refs");
            for (int i = 0, c = 0; i < OVL_PLAN_MAX_REFS; i++)
                if (r->members >> i & 1)
                    fprintf(out, "%s%d", c++ ? ", " : " ", i);
            fprintf(out, " interleaved (%" PRId64 " bytes apart on the target) as one", r->gap);
        }
        fprintf(out, "%s",
                r->local       ? (r->write ? ", on this node: written whole with the last strip"
                                           : ", on this node: read whole with the first strip")
                : r->invariant ? (r->write ? ", loop-invariant (written with the last strip)"
                                           : ", loop-invariant (read with the first strip)")
                               : "");
        if (r->head)
            fprintf(out,
                    ": combined with ref %d (memory distance %" PRId64 " iteration%s), only its "
                    "first %" PRId64 " read, the rest arrive with ref %d",
                    r->with, r->head, r->head > 1 ? "s" : "", r->head, r->with);
        fprintf(out, "\n");
    }
    fprintf(out,
            "  tuple: Type=%s Comm_Args=%d ref%s N=%" PRId64 " S=%" PRId64 " B_Issue=%" PRId64
            " Init_Level=%d Sync_Level=%d B_Sync=%" PRId64 "\n",
            proto_name[p->proto], d->nrefs, d->nrefs > 1 ? "s" : "", p->ops, p->S,
            p->max_ops[0] + p->max_ops[1], p->level, p->level, p->max_ops[0] + p->max_ops[1]);
    fprintf(out, "  strips: %" PRId64 " of %" PRId64 " iteration%s of depth %d", p->nstrips, p->S,
            p->S > 1 ? "s" : "", p->level);
    if (p->level > 0)
        fprintf(out, " (%" PRId64 " per iteration of the depth%s above)", per_row(p, p->S),
                p->level > 1 ? "s" : "");
    fprintf(out, ", %u ahead of the one computed on; %" PRId64 " bytes per execution\n",
            p->lookahead, p->bytes);
    if (p->param.field_mask & OVL_PARAM_FIELD_LEVEL && p->param.level > p->level)
        fprintf(out, "  level %d allowed, %d taken: %s\n", p->param.level, p->level,
                p->level_why ? p->level_why
                             : "the depths above it run enough iterations for the strips");
    int contiguous = 1;
    for (int j = 0; j < d->nrefs; j++)
        for (int k = 0; k < 2; k++)
            contiguous &= in_order(&d->refs[j].sh[k].r) && in_order(&d->refs[j].sh[k].l);
    if (contiguous)
        fprintf(out,
                "  contiguous: each strip of each reference is one run on both sides, which runs "
                "moves as one transfer (the paper's contiguous protocol)%s\n",
                p->proto == OVL_PLAN_RUNS ? ": chosen" : "");
    if (p->direct && !(p->param.field_mask & OVL_PARAM_FIELD_STRIP))
        fprintf(
            out,
            "  every target on this node, reached directly (OVL_RMA_LOCAL): MPI copies with this "
            "CPU, nothing to overlap, one strip\n");
    fprintf(out,
            "  predicted (protocol map: %d cells; formulas: rma latency %.2f us, %.1f B/us, "
            "overhead %.2f us):\n",
            ovl__m.nmap, ovl__m.rma_lat_us, ovl__m.rma_bw_Bpus, ovl__m.o_us);
    if (p->flows)
        fprintf(out,
                "  load: %d flows across this node's link at once (%.1f MB/s each): transfers "
                "x%.2f beyond latency\n",
                p->flows, ovl__model_flow_Bpus(p->flows), p->slow);
    for (int q = 1; q < NPROTO; q++) {
        if (p->pred[q] < 0) {
            fprintf(out, "    %-8s  n/a (%s)\n", proto_name[q], p->why[q]);
            continue;
        }
        fprintf(out, "    %-8s %10.1f us (%s)", proto_name[q], p->pred[q],
                p->pred_src[q] == 'm'   ? "map"
                : p->pred_src[q] == 'b' ? "map and formulas"
                                        : "formulas");
        if (p->nmeas[q] > 0)
            fprintf(out, ", measured %.1f us", measured_of(p, q));
        fprintf(out, "%s\n",
                q != (int)p->proto ? ""
                : p->forced        ? "  <- chosen (forced by the commit's param)"
                : p->reranks       ? "  <- chosen (re-ranked on measured executions)"
                                   : "  <- chosen (least predicted time)");
    }
    return OVL_SUCCESS;
}

/* ---- freeing ------------------------------------------------------------- */

static void plan_destroy(struct plan *p)
{
    slots_free(p);
    shapes_free(p);
    free(p->key);
    free(p);
}

int ovl_plan_free(ovl_plan_t *plan)
{
    static const char *fn = "ovl_plan_free";
    int rc;
    struct plan *p = NULL;
    if (!plan)
        return ovl__error(OVL_ERR_ARG, fn, "plan is NULL");
    if ((rc = lookup(fn, *plan, &p)))
        return rc;
    if (p->state == ST_RUNNING)
        return ovl__error(OVL_ERR_PENDING, fn, "plan is executing (ovl_plan_end first)");
    pthread_mutex_lock(&P.lock);
    for (struct plan **q = &P.head; *q; q = &(*q)->next)
        if (*q == p) {
            *q = p->next;
            break;
        }
    pthread_mutex_unlock(&P.lock);
    plan_destroy(p);
    *plan = OVL_PLAN_NULL;
    return OVL_SUCCESS;
}

void ovl__plan_free_all(void)
{
    pthread_mutex_lock(&P.lock);
    struct plan *p = P.head;
    P.head = NULL;
    pthread_mutex_unlock(&P.lock);
    while (p) {
        struct plan *n = p->next;
        if (p->state == ST_RUNNING)
            (void)drain("ovl_finalize", p);
        plan_destroy(p);
        p = n;
    }
}
