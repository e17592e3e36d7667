/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * lmad.c: linear memory access descriptors (ovl_lmad_t), the loop-nest
 * planner's description of the bytes one reference touches: a base, an
 * element of contiguous bytes, and up to OVL_LMAD_MAX_DIMS (stride, count)
 * dimensions, each tagged with the loop depth that drives it.
 *
 * Two families of operations live here:
 *  - conversions, which keep the order of the points (the order of an MPI
 *    type map, dim[0] fastest): from a subarray, from an MPI datatype
 *    (taken apart recursively), back to a committed MPI datatype. Only
 *    order-preserving merges are made on the way (neighbours that tile
 *    each other), so an origin and a target datatype converted to LMADs
 *    still pair the same bytes as MPI would;
 *  - analysis, which keeps the bytes and their multiplicity but not the
 *    order: normalise (positive strides, no unit counts, sorted), coalesce
 *    (merge dimensions that tile exactly), runs (N runs of S bytes and the
 *    bounding box), combine (references a multiple of a stride apart, with
 *    the memory distance the planner turns into lookahead), interleave
 *    (references that fill each other's gaps), overlap.
 *
 * Everything is a pure function of its arguments: no global state, no
 * communication (MPI is called for datatypes only), no ovl_init needed.
 * Byte offsets are int64_t and every product or sum that makes one is
 * checked; a validated LMAD's bounding box, point count and covered bytes
 * fit in int64_t, which the transformations below rely on (a partial sum
 * of a valid LMAD's terms lies inside its bounding box).
 */
#include "ovl_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>

/* ovl_lmad_overlap compares runs one by one up to this many. */
#define LMAD_EXACT_RUNS (1 << 16)
/* Dimensions an LMAD may have while it is being built or transformed: a
 * datatype's constructors add dimensions before neighbours merge, and
 * interleaving adds one before coalescing removes it. */
#define LMAD_WORK_DIMS 32
/* Datatypes nested deeper than this are refused (a malformed type loop
 * cannot exist in MPI, but the recursion stays bounded anyway). */
#define LMAD_TYPE_DEPTH 64

/* An LMAD being worked on. */
struct lm {
    int64_t base, elem;
    int n;
    ovl_lmad_dim_t d[LMAD_WORK_DIMS];
};

/* ---- checked arithmetic ------------------------------------------------ */

static int mul_ok(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}

static int add_ok(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_add_overflow(a, b, r);
}

static int sub_ok(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_sub_overflow(a, b, r);
}

/* floor(a / b) for b > 0 */
static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* ---- validity ------------------------------------------------------------ */

/* The bounding box [*lo, *hi) of @l, its number of points; 0 when any of
 * them, or the bytes covered, overflows. */
static int lm_box(const struct lm *l, int64_t *lo, int64_t *hi, int64_t *points)
{
    int64_t down = l->base, up = l->base, pts = 1, span, bytes, ext;
    for (int i = 0; i < l->n; i++) {
        if (!mul_ok(l->d[i].count - 1, l->d[i].stride, &span) ||
            !add_ok(span < 0 ? down : up, span, span < 0 ? &down : &up) ||
            !mul_ok(pts, l->d[i].count, &pts))
            return 0;
    }
    if (!add_ok(up, l->elem, &up) || !sub_ok(up, down, &ext) || !mul_ok(pts, l->elem, &bytes))
        return 0;
    *lo = down;
    *hi = up;
    *points = pts;
    return 1;
}

static int lm_ok(const struct lm *l)
{
    int64_t lo, hi, pts;
    if (l->n < 0 || l->n > LMAD_WORK_DIMS || l->elem < 1)
        return 0;
    for (int i = 0; i < l->n; i++)
        if (l->d[i].count < 1 || l->d[i].depth < -1)
            return 0;
    return lm_box(l, &lo, &hi, &pts);
}

/* Load a public LMAD into @l, or record why it is invalid. */
static int lm_load(const char *fn, const char *name, const ovl_lmad_t *p, struct lm *l)
{
    if (!p)
        return ovl__error(OVL_ERR_ARG, fn, "%s is NULL", name);
    if (p->ndims < 0 || p->ndims > OVL_LMAD_MAX_DIMS)
        return ovl__error(OVL_ERR_ARG, fn, "%s: ndims %d outside 0..%d", name, p->ndims,
                          OVL_LMAD_MAX_DIMS);
    if (p->elem < 1)
        return ovl__error(OVL_ERR_ARG, fn, "%s: element of %" PRId64 " bytes (at least 1)", name,
                          p->elem);
    for (int i = 0; i < p->ndims; i++) {
        if (p->dim[i].count < 1)
            return ovl__error(OVL_ERR_ARG, fn, "%s: dim[%d] has count %" PRId64 " (at least 1)",
                              name, i, p->dim[i].count);
        if (p->dim[i].depth < -1)
            return ovl__error(OVL_ERR_ARG, fn, "%s: dim[%d] has depth %d (at least -1)", name, i,
                              p->dim[i].depth);
    }
    l->base = p->base;
    l->elem = p->elem;
    l->n = p->ndims;
    for (int i = 0; i < p->ndims; i++)
        l->d[i] = p->dim[i];
    int64_t lo, hi, pts;
    if (!lm_box(l, &lo, &hi, &pts))
        return ovl__error(OVL_ERR_ARG, fn,
                          "%s: byte offsets, points or bytes covered overflow 64 bits", name);
    return OVL_SUCCESS;
}

/* Store @l (at most OVL_LMAD_MAX_DIMS dimensions) into @p. */
static void lm_store(const struct lm *l, ovl_lmad_t *p)
{
    ovl_lmad_t r = { .base = l->base, .elem = l->elem, .ndims = l->n };
    for (int i = 0; i < l->n; i++)
        r.dim[i] = l->d[i];
    *p = r;
}

static void lm_remove(struct lm *l, int i)
{
    for (int j = i + 1; j < l->n; j++)
        l->d[j - 1] = l->d[j];
    l->n--;
}

/* ---- normalise and coalesce (bytes and multiplicity kept, not order) -- */

static int dim_less(const ovl_lmad_dim_t *x, const ovl_lmad_dim_t *y)
{
    if (x->stride != y->stride)
        return x->stride < y->stride;
    if (x->count != y->count)
        return x->count < y->count;
    return x->depth < y->depth;
}

static void lm_sort(struct lm *l)
{
    for (int i = 1; i < l->n; i++) {
        ovl_lmad_dim_t x = l->d[i];
        int j = i;
        for (; j > 0 && dim_less(&x, &l->d[j - 1]); j--)
            l->d[j] = l->d[j - 1];
        l->d[j] = x;
    }
}

/* @l valid. A dimension walked backwards starts at its last point, which
 * lies inside the bounding box, so neither the base nor -stride overflows. */
static void lm_normalize(struct lm *l)
{
    for (int i = 0; i < l->n;) {
        ovl_lmad_dim_t *d = &l->d[i];
        if (d->count == 1) {
            lm_remove(l, i);
            continue;
        }
        if (d->stride < 0) {
            l->base += (d->count - 1) * d->stride;
            d->stride = -d->stride;
        }
        i++;
    }
    lm_sort(l);
}

/* @l valid. Merges only what tiles exactly, so every product stays below
 * the (valid) extent or point count it is part of. */
static void lm_coalesce(struct lm *l)
{
    lm_normalize(l);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < l->n && !changed; i++) {
            if (l->d[i].stride == l->elem) {
                l->elem *= l->d[i].count;
                lm_remove(l, i);
                changed = 1;
            }
        }
        for (int i = 0; i < l->n && !changed; i++) {
            for (int j = 0; j < l->n && !changed; j++) {
                int64_t span;
                if (i == j || !mul_ok(l->d[i].stride, l->d[i].count, &span) ||
                    span != l->d[j].stride)
                    continue;
                /* j repeats i's whole block end to end: one dimension of
                 * i's stride, driven (in strips) by j's loop */
                l->d[i].count *= l->d[j].count;
                l->d[i].depth = l->d[j].depth;
                lm_remove(l, j);
                changed = 1;
            }
        }
    }
    lm_sort(l);
}

/* Drop unit dimensions and merge neighbours that tile each other in
 * order: dim[0] into the element when its stride is the element, dim[i+1]
 * into dim[i] when it repeats dim[i]'s points end to end. The points keep
 * their order. @l valid. */
static void lm_compact(struct lm *l)
{
    for (int i = 0; i < l->n;) {
        if (l->d[i].count == 1)
            lm_remove(l, i);
        else
            i++;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        if (l->n > 0 && l->d[0].stride == l->elem) {
            l->elem *= l->d[0].count;
            lm_remove(l, 0);
            changed = 1;
        }
        for (int i = 0; i + 1 < l->n && !changed; i++) {
            int64_t span;
            if (mul_ok(l->d[i].stride, l->d[i].count, &span) && span == l->d[i + 1].stride) {
                l->d[i].count *= l->d[i + 1].count;
                l->d[i].depth = l->d[i + 1].depth;
                lm_remove(l, i + 1);
                changed = 1;
            }
        }
    }
}

/* A public call that loads @lmad, applies @op and stores the result. */
static int transform(const char *fn, const ovl_lmad_t *lmad, ovl_lmad_t *out,
                     void (*op)(struct lm *))
{
    struct lm l;
    int rc = lm_load(fn, "lmad", lmad, &l);
    if (rc)
        return rc;
    if (!out)
        return ovl__error(OVL_ERR_ARG, fn, "out is NULL");
    op(&l);
    lm_store(&l, out);
    return OVL_SUCCESS;
}

int ovl_lmad_normalize(const ovl_lmad_t *lmad, ovl_lmad_t *out)
{
    return transform("ovl_lmad_normalize", lmad, out, lm_normalize);
}

int ovl_lmad_coalesce(const ovl_lmad_t *lmad, ovl_lmad_t *out)
{
    return transform("ovl_lmad_coalesce", lmad, out, lm_coalesce);
}

/* The runs of a loaded @l (coalesced here). */
static void lm_runs(struct lm *l, ovl_lmad_runs_t *runs)
{
    lm_coalesce(l);
    int64_t lo, hi, pts;
    lm_box(l, &lo, &hi, &pts); /* valid: coalescing keeps the box */
    *runs = (ovl_lmad_runs_t){ .n = pts, .size = l->elem, .lo = lo, .extent = hi - lo };
}

int ovl_lmad_runs(const ovl_lmad_t *lmad, ovl_lmad_runs_t *runs)
{
    static const char fn[] = "ovl_lmad_runs";
    struct lm l;
    int rc = lm_load(fn, "lmad", lmad, &l);
    if (rc)
        return rc;
    if (!runs)
        return ovl__error(OVL_ERR_ARG, fn, "runs is NULL");
    lm_runs(&l, runs);
    return OVL_SUCCESS;
}

void ovl__lmad_runs_of(const ovl_lmad_t *lmad, ovl_lmad_runs_t *runs)
{
    struct lm l; /* not zeroed: dims beyond n are never read */
    l.base = lmad->base;
    l.elem = lmad->elem;
    l.n = lmad->ndims;
    for (int i = 0; i < lmad->ndims; i++)
        l.d[i] = lmad->dim[i];
    lm_runs(&l, runs);
}

/* ---- combine and interleave ----------------------------------------------- */

static int same_shape(const struct lm *a, const struct lm *b)
{
    if (a->elem != b->elem || a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (a->d[i].stride != b->d[i].stride || a->d[i].count != b->d[i].count ||
            a->d[i].depth != b->d[i].depth)
            return 0;
    return 1;
}

/* Load and normalise both references of a combine/interleave; *lower is
 * the one with the lower base and *gap the distance to the other's base
 * (-1 if the shapes differ or the distance overflows). */
static int load_pair(const char *fn, const ovl_lmad_t *a, const ovl_lmad_t *b, const void *out,
                     const void *how, struct lm *la, struct lm *lb, int64_t *gap)
{
    int rc = lm_load(fn, "a", a, la);
    if (!rc)
        rc = lm_load(fn, "b", b, lb);
    if (rc)
        return rc;
    if (!out)
        return ovl__error(OVL_ERR_ARG, fn, "out is NULL");
    if (!how)
        return ovl__error(OVL_ERR_ARG, fn, "how is NULL");
    lm_normalize(la);
    lm_normalize(lb);
    if (lb->base < la->base) {
        struct lm t = *la;
        *la = *lb;
        *lb = t;
    }
    if (!same_shape(la, lb) || !sub_ok(lb->base, la->base, gap))
        *gap = -1;
    return OVL_SUCCESS;
}

int ovl_lmad_combine(const ovl_lmad_t *a, const ovl_lmad_t *b, ovl_lmad_t *out,
                     ovl_lmad_combine_t *how)
{
    static const char fn[] = "ovl_lmad_combine";
    struct lm lo, hi;
    int64_t gap;
    int rc = load_pair(fn, a, b, out, how, &lo, &hi, &gap);
    if (rc)
        return rc;
    ovl_lmad_combine_t h = { .combined = 0, .dim = -1, .depth = -1, .distance = 0 };
    struct lm r = lo;
    if (gap == 0) {
        h.combined = 1;
    } else if (gap > 0) {
        /* the fewest points of any dimension: the least lookahead */
        int best = -1;
        int64_t m = 0;
        for (int i = 0; i < r.n; i++) {
            int64_t s = r.d[i].stride;
            if (s > 0 && gap % s == 0 && gap / s <= r.d[i].count && (best < 0 || gap / s < m)) {
                best = i;
                m = gap / s;
            }
        }
        if (best >= 0) {
            ovl_lmad_dim_t grown = r.d[best];
            if (add_ok(grown.count, m, &grown.count)) {
                r.d[best] = grown;
                if (lm_ok(&r)) {
                    lm_sort(&r); /* a count is the sort's second key */
                    for (int i = 0; i < r.n; i++)
                        if (r.d[i].stride == grown.stride && r.d[i].count == grown.count &&
                            r.d[i].depth == grown.depth)
                            h = (ovl_lmad_combine_t){
                                .combined = 1, .dim = i, .depth = grown.depth, .distance = m
                            };
                }
            }
        } else if (gap <= r.elem) {
            if (add_ok(r.elem, gap, &r.elem) && lm_ok(&r))
                h = (ovl_lmad_combine_t){ .combined = 1, .dim = -1, .depth = -1, .distance = gap };
        }
    }
    *how = h;
    if (h.combined)
        lm_store(&r, out);
    return OVL_SUCCESS;
}

int ovl_lmad_interleave(const ovl_lmad_t *a, const ovl_lmad_t *b, ovl_lmad_t *out,
                        ovl_lmad_combine_t *how)
{
    static const char fn[] = "ovl_lmad_interleave";
    struct lm lo, hi;
    int64_t gap;
    int rc = load_pair(fn, a, b, out, how, &lo, &hi, &gap);
    if (rc)
        return rc;
    ovl_lmad_combine_t h = { .combined = 0, .dim = -1, .depth = -1, .distance = 0 };
    struct lm alone = lo, both = lo;
    lm_coalesce(&alone);
    if (gap == 0) {
        h.combined = 1;
        both = alone;
    } else if (gap > 0) {
        /* the union is lo plus a dimension of two points, gap apart;
         * lo has at most OVL_LMAD_MAX_DIMS, so there is room for it */
        both.d[both.n++] = (ovl_lmad_dim_t){ .stride = gap, .count = 2, .depth = -1 };
        if (lm_ok(&both)) {
            lm_coalesce(&both);
            if (both.n <= alone.n)
                h = (ovl_lmad_combine_t){ .combined = 1, .dim = -1, .depth = -1, .distance = gap };
        }
    }
    *how = h;
    if (h.combined)
        lm_store(&both, out);
    return OVL_SUCCESS;
}

/* ---- overlap ------------------------------------------------------------ */

/* Visit the start of every run of @l (normalised) in order, until @fn
 * returns nonzero; returns that value, or 0. Every offset visited is a
 * point of @l, so none overflows. */
static int lm_visit(const struct lm *l, int (*fn)(void *, int64_t), void *ctx)
{
    int64_t k[LMAD_WORK_DIMS] = { 0 }, off = l->base;
    for (;;) {
        int r = fn(ctx, off);
        if (r)
            return r;
        int i = 0;
        for (; i < l->n; i++) {
            if (++k[i] < l->d[i].count) {
                off += l->d[i].stride;
                break;
            }
            off -= (l->d[i].count - 1) * l->d[i].stride;
            k[i] = 0;
        }
        if (i == l->n)
            return 0;
    }
}

/* Normalised, coalesced @l whose runs are disjoint and in increasing
 * order: each stride at least the span of everything inside it. */
static int lm_ordered(const struct lm *l)
{
    int64_t span = l->elem;
    for (int i = 0; i < l->n; i++) {
        if (l->d[i].stride < span)
            return 0;
        span += (l->d[i].count - 1) * l->d[i].stride;
    }
    return 1;
}

/* Does [x, x + len) meet a run of @l (lm_ordered)? The run that starts
 * last at or before x is found digit by digit from the outermost
 * dimension; the next run is the one after it in order. */
static int lm_hits(const struct lm *l, int64_t x, int64_t len)
{
    int64_t k[LMAD_WORK_DIMS] = { 0 }, rel, start = l->base, end;
    if (!add_ok(x, len, &end))
        end = INT64_MAX;
    if (x >= l->base) {
        if (!sub_ok(x, l->base, &rel))
            rel = INT64_MAX; /* beyond every run: the last one is chosen */
        for (int i = l->n - 1; i >= 0; i--) {
            int64_t q = rel / l->d[i].stride;
            k[i] = q < l->d[i].count - 1 ? q : l->d[i].count - 1;
            rel -= k[i] * l->d[i].stride;
            start += k[i] * l->d[i].stride;
        }
        if (start + l->elem > x)
            return 1;
        int i = 0;
        for (; i < l->n; i++) {
            if (++k[i] < l->d[i].count) {
                start += l->d[i].stride;
                break;
            }
            start -= (l->d[i].count - 1) * l->d[i].stride;
            k[i] = 0;
        }
        if (i == l->n)
            return 0; /* x is past the last run */
    }
    return start < end;
}

struct probe {
    const struct lm *other;
    int64_t len;
    int64_t *starts;
    size_t n;
};

static int probe_hits(void *ctx, int64_t off)
{
    struct probe *p = ctx;
    return lm_hits(p->other, off, p->len);
}

static int probe_collect(void *ctx, int64_t off)
{
    struct probe *p = ctx;
    p->starts[p->n++] = off;
    return 0;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* One dimension each, the same stride s > 0:
 * a's runs [A + k s, + Sa), b's [B + j s, + Sb) meet iff some
 * t = k - j in [-(Nb - 1), Na - 1] has D - Sa < t s < D + Sb, D = B - A.
 * The smallest t above the lower bound decides. -1 if an offset
 * overflows (the caller goes on with the other tests). */
static int one_dim(const struct lm *a, const struct lm *b)
{
    int64_t s = a->d[0].stride, d, low, high, ts;
    if (!sub_ok(b->base, a->base, &d) || !sub_ok(d, a->elem, &low) || !add_ok(d, b->elem, &high))
        return -1;
    int64_t t = floor_div(low, s) + 1, tmin = -(b->d[0].count - 1);
    if (t < tmin)
        t = tmin;
    if (t > a->d[0].count - 1)
        return 0;
    if (!mul_ok(t, s, &ts))
        return -1;
    return ts < high;
}

int ovl_lmad_overlap(const ovl_lmad_t *a, const ovl_lmad_t *b, int *result)
{
    static const char fn[] = "ovl_lmad_overlap";
    struct lm la, lb;
    int rc = lm_load(fn, "a", a, &la);
    if (!rc)
        rc = lm_load(fn, "b", b, &lb);
    if (rc)
        return rc;
    if (!result)
        return ovl__error(OVL_ERR_ARG, fn, "result is NULL");
    lm_coalesce(&la);
    lm_coalesce(&lb);
    int64_t alo, ahi, an, blo, bhi, bn;
    lm_box(&la, &alo, &ahi, &an);
    lm_box(&lb, &blo, &bhi, &bn);
    if (ahi <= blo || bhi <= alo) {
        *result = OVL_LMAD_DISJOINT;
        return OVL_SUCCESS;
    }
    if (la.n == 1 && lb.n == 1 && la.d[0].stride == lb.d[0].stride && la.d[0].stride > 0) {
        int r = one_dim(&la, &lb);
        if (r >= 0) {
            *result = r ? OVL_LMAD_OVERLAP : OVL_LMAD_DISJOINT;
            return OVL_SUCCESS;
        }
    }
    /* look each run of one up in the other */
    const struct lm *few = an <= bn ? &la : &lb, *many = an <= bn ? &lb : &la;
    int64_t nfew = an <= bn ? an : bn, nmany = an <= bn ? bn : an;
    for (int pass = 0; pass < 2; pass++) {
        if (nfew <= LMAD_EXACT_RUNS && lm_ordered(many)) {
            struct probe p = { .other = many, .len = few->elem };
            *result = lm_visit(few, probe_hits, &p) ? OVL_LMAD_OVERLAP : OVL_LMAD_DISJOINT;
            return OVL_SUCCESS;
        }
        const struct lm *t = few;
        few = many;
        many = t;
        int64_t tn = nfew;
        nfew = nmany;
        nmany = tn;
    }
    if (an + bn > LMAD_EXACT_RUNS) {
        *result = OVL_LMAD_MAY_OVERLAP;
        return OVL_SUCCESS;
    }
    /* both small: sort the run starts of each (uniform lengths, so the ends
     * are sorted too) and sweep */
    int64_t *sa = ovl__buf_alloc((size_t)(an + bn) * sizeof *sa);
    if (!sa)
        return ovl__error(OVL_ERR_NOMEM, fn, "%" PRId64 " run offsets", an + bn);
    int64_t *sb = sa + an;
    struct probe pa = { .starts = sa }, pb = { .starts = sb };
    lm_visit(&la, probe_collect, &pa);
    lm_visit(&lb, probe_collect, &pb);
    qsort(sa, (size_t)an, sizeof *sa, cmp_i64);
    qsort(sb, (size_t)bn, sizeof *sb, cmp_i64);
    int hit = 0;
    for (int64_t i = 0, j = 0; i < an && !hit; i++) {
        /* b's runs that end at or before this a-run starts end before
         * every later a-run too */
        while (j < bn && sb[j] + lb.elem <= sa[i])
            j++;
        hit = j < bn && sb[j] < sa[i] + la.elem;
    }
    ovl__buf_free(sa);
    *result = hit ? OVL_LMAD_OVERLAP : OVL_LMAD_DISJOINT;
    return OVL_SUCCESS;
}

/* ---- from a subarray ------------------------------------------------------ */

int ovl_lmad_from_subarray(int ndims, const int sizes[], const int subsizes[], const int starts[],
                           int order, int64_t elem, ovl_lmad_t *lmad)
{
    static const char fn[] = "ovl_lmad_from_subarray";
    if (ndims < 1 || ndims > OVL_LMAD_MAX_DIMS)
        return ovl__error(OVL_ERR_ARG, fn, "ndims %d outside 1..%d", ndims, OVL_LMAD_MAX_DIMS);
    if (!sizes || !subsizes || !starts || !lmad)
        return ovl__error(OVL_ERR_ARG, fn, "%s is NULL",
                          !sizes      ? "sizes"
                          : !subsizes ? "subsizes"
                          : !starts   ? "starts"
                                      : "lmad");
    if (order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN)
        return ovl__error(OVL_ERR_ARG, fn, "order %d is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN",
                          order);
    if (elem < 1)
        return ovl__error(OVL_ERR_ARG, fn, "element of %" PRId64 " bytes (at least 1)", elem);
    for (int i = 0; i < ndims; i++) {
        if (sizes[i] < 1 || subsizes[i] < 1)
            return ovl__error(OVL_ERR_ARG, fn, "dimension %d: size %d, subsize %d (at least 1)", i,
                              sizes[i], subsizes[i]);
        if (starts[i] < 0 || (int64_t)starts[i] + subsizes[i] > sizes[i])
            return ovl__error(OVL_ERR_ARG, fn,
                              "dimension %d: start %d + subsize %d outside size %d", i, starts[i],
                              subsizes[i], sizes[i]);
    }
    /* from the fastest array dimension to the slowest */
    struct lm l = { .base = 0, .elem = elem, .n = ndims };
    int64_t stride = elem, off;
    for (int i = 0; i < ndims; i++) {
        int a = order == MPI_ORDER_C ? ndims - 1 - i : i;
        l.d[i] = (ovl_lmad_dim_t){ .stride = stride, .count = subsizes[a], .depth = ndims - 1 - i };
        if (!mul_ok(stride, starts[a], &off) || !add_ok(l.base, off, &l.base) ||
            !mul_ok(stride, sizes[a], &stride))
            return ovl__error(OVL_ERR_ARG, fn, "the array's byte offsets overflow 64 bits");
    }
    if (!lm_ok(&l))
        return ovl__error(OVL_ERR_ARG, fn, "the array's byte offsets overflow 64 bits");
    lm_store(&l, lmad);
    return OVL_SUCCESS;
}

/* ---- MPI datatypes ---------------------------------------------------------- */

static int mpi_ready(const char *fn)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up)
        MPI_Finalized(&down);
    if (!up || down)
        return ovl__error(OVL_ERR_NOT_INIT, fn, "MPI is %s", up ? "finalised" : "not initialised");
    return OVL_SUCCESS;
}

static const char *combiner_name(int c)
{
    if (c == MPI_COMBINER_NAMED)
        return "predefined";
    if (c == MPI_COMBINER_DUP)
        return "dup";
    if (c == MPI_COMBINER_CONTIGUOUS)
        return "contiguous";
    if (c == MPI_COMBINER_VECTOR)
        return "vector";
    if (c == MPI_COMBINER_HVECTOR)
        return "hvector";
    if (c == MPI_COMBINER_INDEXED)
        return "indexed";
    if (c == MPI_COMBINER_HINDEXED)
        return "hindexed";
    if (c == MPI_COMBINER_INDEXED_BLOCK)
        return "indexed_block";
    if (c == MPI_COMBINER_HINDEXED_BLOCK)
        return "hindexed_block";
    if (c == MPI_COMBINER_STRUCT)
        return "struct";
    if (c == MPI_COMBINER_SUBARRAY)
        return "subarray";
    if (c == MPI_COMBINER_DARRAY)
        return "darray";
    if (c == MPI_COMBINER_RESIZED)
        return "resized";
    return "Fortran or other";
}

/* Free the datatypes MPI_Type_get_contents returned that are not named. */
static void free_contents(MPI_Datatype *types, int n)
{
    for (int i = 0; i < n; i++) {
        int ni, na, nd, comb;
        if (MPI_Type_get_envelope(types[i], &ni, &na, &nd, &comb) == MPI_SUCCESS &&
            comb != MPI_COMBINER_NAMED)
            MPI_Type_free(&types[i]);
    }
}

/* Add a dimension outside those of @l (the slowest so far). */
static int push_dim(const char *fn, struct lm *l, int64_t stride, int64_t count)
{
    if (count < 1)
        return ovl__error(OVL_ERR_UNSUPPORTED, fn, "a constructor with an empty block");
    if (count == 1)
        return OVL_SUCCESS;
    if (l->n == LMAD_WORK_DIMS)
        return ovl__error(OVL_ERR_UNSUPPORTED, fn,
                          "more than %d dimensions before merging (more than %d remain after)",
                          LMAD_WORK_DIMS, OVL_LMAD_MAX_DIMS);
    l->d[l->n++] = (ovl_lmad_dim_t){ .stride = stride, .count = count, .depth = -1 };
    return OVL_SUCCESS;
}

static int overflow(const char *fn)
{
    return ovl__error(OVL_ERR_ARG, fn, "the datatype's byte offsets overflow 64 bits");
}

/* The subarray constructor's dimensions over an old type of extent @ext:
 * ints = ndims, sizes[ndims], subsizes[ndims], starts[ndims], order. */
static int push_subarray(const char *fn, struct lm *l, const int *ints, int64_t ext)
{
    int nd = ints[0], order = ints[1 + 3 * nd];
    const int *sizes = ints + 1, *subsizes = ints + 1 + nd, *starts = ints + 1 + 2 * nd;
    int64_t stride = ext, off;
    for (int i = 0; i < nd; i++) {
        int a = order == MPI_ORDER_C ? nd - 1 - i : i;
        int rc = push_dim(fn, l, stride, subsizes[a]);
        if (rc)
            return rc;
        if (!mul_ok(stride, starts[a], &off) || !add_ok(l->base, off, &l->base) ||
            !mul_ok(stride, sizes[a], &stride))
            return overflow(fn);
    }
    return OVL_SUCCESS;
}

/* The LMAD of one item of @type relative to its origin, in type-map
 * order, compacted. */
static int walk_type(const char *fn, MPI_Datatype type, struct lm *l, int level)
{
    int ni, na, nd, comb, rc;
    if (level > LMAD_TYPE_DEPTH)
        return ovl__error(OVL_ERR_UNSUPPORTED, fn, "datatype nested more than %d deep",
                          LMAD_TYPE_DEPTH);
    rc = MPI_Type_get_envelope(type, &ni, &na, &nd, &comb);
    if (rc != MPI_SUCCESS)
        return ovl__mpi_error(rc, fn, "MPI_Type_get_envelope");
    if (comb == MPI_COMBINER_NAMED) {
        MPI_Count size = 0, lb = 0, extent = 0;
        if ((rc = MPI_Type_size_x(type, &size)) != MPI_SUCCESS ||
            (rc = MPI_Type_get_true_extent_x(type, &lb, &extent)) != MPI_SUCCESS)
            return ovl__mpi_error(rc, fn, "MPI_Type_size_x/MPI_Type_get_true_extent_x");
        if (size < 1 || extent != size)
            return ovl__error(OVL_ERR_UNSUPPORTED, fn,
                              "a predefined type of %lld bytes spread over %lld (a pair type "
                              "with a hole, such as MPI_SHORT_INT, or an empty one)",
                              (long long)size, (long long)extent);
        *l = (struct lm){ .base = lb, .elem = size, .n = 0 };
        return OVL_SUCCESS;
    }
    /* the block count, known from the envelope: one block only */
    int blocks = -1;
    if (comb == MPI_COMBINER_INDEXED)
        blocks = (ni - 1) / 2;
    else if (comb == MPI_COMBINER_HINDEXED || comb == MPI_COMBINER_STRUCT)
        blocks = ni - 1;
    else if (comb == MPI_COMBINER_INDEXED_BLOCK)
        blocks = ni - 2;
    else if (comb == MPI_COMBINER_HINDEXED_BLOCK)
        blocks = na;
    else if (comb != MPI_COMBINER_DUP && comb != MPI_COMBINER_CONTIGUOUS &&
             comb != MPI_COMBINER_VECTOR && comb != MPI_COMBINER_HVECTOR &&
             comb != MPI_COMBINER_SUBARRAY && comb != MPI_COMBINER_RESIZED)
        return ovl__error(OVL_ERR_UNSUPPORTED, fn,
                          "%s datatypes are not supported (contiguous, vector, hvector, "
                          "subarray, resized, dup and one-block indexed or struct are)",
                          combiner_name(comb));
    if (blocks != -1 && blocks != 1)
        return ovl__error(OVL_ERR_UNSUPPORTED, fn,
                          "%s datatype of %d blocks (only one block, a displacement, is supported)",
                          combiner_name(comb), blocks);

    int *ints = malloc((size_t)(ni > 0 ? ni : 1) * sizeof *ints);
    MPI_Aint *addrs = malloc((size_t)(na > 0 ? na : 1) * sizeof *addrs);
    MPI_Datatype *types = malloc((size_t)(nd > 0 ? nd : 1) * sizeof *types);
    int got = 0;
    if (!ints || !addrs || !types) {
        rc = ovl__error(OVL_ERR_NOMEM, fn, "datatype contents");
        goto out;
    }
    rc = MPI_Type_get_contents(type, ni, na, nd, ints, addrs, types);
    if (rc != MPI_SUCCESS) {
        rc = ovl__mpi_error(rc, fn, "MPI_Type_get_contents");
        goto out;
    }
    got = 1;
    struct lm in;
    rc = walk_type(fn, types[0], &in, level + 1);
    if (rc)
        goto out;
    MPI_Aint lb, ext_a;
    rc = MPI_Type_get_extent(types[0], &lb, &ext_a);
    if (rc != MPI_SUCCESS) {
        rc = ovl__mpi_error(rc, fn, "MPI_Type_get_extent");
        goto out;
    }
    int64_t ext = (int64_t)ext_a, stride, disp = 0;
    if (comb == MPI_COMBINER_CONTIGUOUS) {
        rc = push_dim(fn, &in, ext, ints[0]);
    } else if (comb == MPI_COMBINER_VECTOR) {
        rc = push_dim(fn, &in, ext, ints[1]);
        if (!rc)
            rc = mul_ok(ints[2], ext, &stride) ? push_dim(fn, &in, stride, ints[0]) : overflow(fn);
    } else if (comb == MPI_COMBINER_HVECTOR) {
        rc = push_dim(fn, &in, ext, ints[1]);
        if (!rc)
            rc = push_dim(fn, &in, (int64_t)addrs[0], ints[0]);
    } else if (comb == MPI_COMBINER_SUBARRAY) {
        rc = push_subarray(fn, &in, ints, ext);
    } else if (blocks == 1) {
        /* one block of ints[1] items at a displacement: in items of the old
         * type for indexed and indexed_block, in bytes for the others */
        rc = push_dim(fn, &in, ext, ints[1]);
        if (!rc && (comb == MPI_COMBINER_INDEXED || comb == MPI_COMBINER_INDEXED_BLOCK))
            rc = mul_ok(ints[2], ext, &disp) ? OVL_SUCCESS : overflow(fn);
        else if (!rc)
            disp = (int64_t)addrs[0];
        if (!rc && !add_ok(in.base, disp, &in.base))
            rc = overflow(fn);
    }
    /* dup and resized: the same bytes (resized changes only the extent,
     * which the constructor around this one reads from MPI) */
    if (rc)
        goto out;
    if (!lm_ok(&in)) {
        rc = overflow(fn);
        goto out;
    }
    lm_compact(&in);
    *l = in;
out:
    if (got)
        free_contents(types, nd);
    free(types);
    free(addrs);
    free(ints);
    return rc;
}

int ovl_lmad_from_datatype(MPI_Datatype type, int count, ovl_lmad_t *lmad)
{
    static const char fn[] = "ovl_lmad_from_datatype";
    int rc = mpi_ready(fn);
    if (rc)
        return rc;
    if (!lmad)
        return ovl__error(OVL_ERR_ARG, fn, "lmad is NULL");
    if (type == MPI_DATATYPE_NULL)
        return ovl__error(OVL_ERR_ARG, fn, "type is MPI_DATATYPE_NULL");
    if (count < 1)
        return ovl__error(OVL_ERR_ARG, fn, "count %d (at least 1)", count);
    MPI_Count size = 0;
    if ((rc = MPI_Type_size_x(type, &size)) != MPI_SUCCESS)
        return ovl__mpi_error(rc, fn, "MPI_Type_size_x");
    if (size == 0)
        return ovl__error(OVL_ERR_ARG, fn, "the datatype describes no bytes (size 0)");
    struct lm l;
    rc = walk_type(fn, type, &l, 0);
    if (rc)
        return rc;
    MPI_Aint lb, ext;
    if ((rc = MPI_Type_get_extent(type, &lb, &ext)) != MPI_SUCCESS)
        return ovl__mpi_error(rc, fn, "MPI_Type_get_extent");
    rc = push_dim(fn, &l, (int64_t)ext, count);
    if (rc)
        return rc;
    if (!lm_ok(&l))
        return overflow(fn);
    lm_compact(&l);
    if (l.n > OVL_LMAD_MAX_DIMS)
        return ovl__error(OVL_ERR_UNSUPPORTED, fn,
                          "the datatype needs %d dimensions after merging (at most %d)", l.n,
                          OVL_LMAD_MAX_DIMS);
    lm_store(&l, lmad);
    return OVL_SUCCESS;
}

int ovl_lmad_to_datatype(const ovl_lmad_t *lmad, MPI_Datatype *type)
{
    static const char fn[] = "ovl_lmad_to_datatype";
    struct lm l;
    int rc = lm_load(fn, "lmad", lmad, &l);
    if (rc)
        return rc;
    if (!type)
        return ovl__error(OVL_ERR_ARG, fn, "type is NULL");
    if ((rc = mpi_ready(fn)))
        return rc;
    if (l.elem > INT_MAX)
        return ovl__error(OVL_ERR_UNSUPPORTED, fn, "element of %" PRId64 " bytes (MPI: at most %d)",
                          l.elem, INT_MAX);
    for (int i = 0; i < l.n; i++)
        if (l.d[i].count > INT_MAX)
            return ovl__error(OVL_ERR_UNSUPPORTED, fn,
                              "dim[%d] has %" PRId64 " points (MPI: at most %d)", i, l.d[i].count,
                              INT_MAX);
    MPI_Datatype t = MPI_DATATYPE_NULL, next = MPI_DATATYPE_NULL;
    const char *what = "MPI_Type_contiguous";
    if ((rc = MPI_Type_contiguous((int)l.elem, MPI_BYTE, &t)) != MPI_SUCCESS)
        goto fail;
    /* innermost first: the type map lists dim[0] fastest */
    what = "MPI_Type_create_hvector";
    for (int i = 0; i < l.n; i++) {
        rc = MPI_Type_create_hvector((int)l.d[i].count, 1, (MPI_Aint)l.d[i].stride, t, &next);
        if (rc != MPI_SUCCESS)
            goto fail;
        MPI_Type_free(&t);
        t = next;
    }
    if (l.base != 0) {
        int one = 1;
        MPI_Aint disp = (MPI_Aint)l.base;
        what = "MPI_Type_create_hindexed";
        if ((rc = MPI_Type_create_hindexed(1, &one, &disp, t, &next)) != MPI_SUCCESS)
            goto fail;
        MPI_Type_free(&t);
        t = next;
    }
    /* bounds set, not computed: the box, whatever the library makes of
     * negative or overlapping strides (Open MPI 4.1 gives some a larger
     * extent) */
    int64_t lo, hi, pts;
    lm_box(&l, &lo, &hi, &pts);
    what = "MPI_Type_create_resized";
    if ((rc = MPI_Type_create_resized(t, (MPI_Aint)lo, (MPI_Aint)(hi - lo), &next)) != MPI_SUCCESS)
        goto fail;
    MPI_Type_free(&t);
    t = next;
    what = "MPI_Type_commit";
    if ((rc = MPI_Type_commit(&t)) != MPI_SUCCESS)
        goto fail;
    *type = t;
    return OVL_SUCCESS;
fail:
    if (t != MPI_DATATYPE_NULL)
        MPI_Type_free(&t);
    return ovl__mpi_error(rc, fn, what);
}

/* ---- internal: point-order walks (the planner's PACK protocol) ----------------- */

void ovl__lmad_fold(ovl_lmad_t *l)
{
    int n = 0;
    for (int i = 0; i < l->ndims; i++)
        if (l->dim[i].count > 1)
            l->dim[n++] = l->dim[i];
    l->ndims = n;
    for (;;) {
        if (l->ndims && l->dim[0].stride == l->elem) {
            l->elem *= l->dim[0].count;
            memmove(&l->dim[0], &l->dim[1], (size_t)(l->ndims - 1) * sizeof l->dim[0]);
            l->ndims--;
            continue;
        }
        int merged = 0;
        for (int i = 0; i + 1 < l->ndims && !merged; i++)
            if (l->dim[i + 1].stride == l->dim[i].count * l->dim[i].stride) {
                l->dim[i].count *= l->dim[i + 1].count;
                memmove(&l->dim[i + 1], &l->dim[i + 2],
                        (size_t)(l->ndims - i - 2) * sizeof l->dim[0]);
                l->ndims--;
                merged = 1;
            }
        if (!merged)
            return;
    }
}

int64_t ovl__lmad_copy(const ovl_lmad_t *in, char *mem, char *buf, int to_mem)
{
    ovl_lmad_t l = *in;
    ovl__lmad_fold(&l);
    int64_t k[OVL_LMAD_MAX_DIMS] = { 0 }, at = l.base, moved = 0;
    const size_t e = (size_t)l.elem;
    for (;;) {
        if (to_mem)
            memcpy(mem + at, buf + moved, e);
        else
            memcpy(buf + moved, mem + at, e);
        moved += l.elem;
        int i = 0;
        for (; i < l.ndims; i++) {
            at += l.dim[i].stride;
            if (++k[i] < l.dim[i].count)
                break;
            at -= l.dim[i].stride * l.dim[i].count;
            k[i] = 0;
        }
        if (i == l.ndims)
            return moved;
    }
}
