/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_stream: marshal streams, data checked byte for byte. Run under
 * several OVL_FRAGMENT_SIZE x OVL_STREAM_WINDOW variants (see
 * CMakeLists.txt); sizes scale with the fragment size so every variant
 * moves thousands of fragments, not millions.
 *  - random value counts (0 .. 2 million doubles), written value by value
 *    or in bulk, read back with a different chunking;
 *  - mixed types: int8..uint64, float, double, raw byte runs of random
 *    length; ovl_stream_tell tracks every write and read; status.bytes is
 *    the number of bytes written, on both sides;
 *  - several streams in flight at once to every rank (self included) on
 *    the same tag arrive in posting order; streams with continuations,
 *    freed right after ovl_continue (fire-and-forget), polled by ovl_test;
 *  - OVL_ANY_SOURCE / OVL_ANY_TAG stream receives report source and tag;
 *  - an unmarshal function returning early: the rest is discarded,
 *    status.bytes counts the whole message, the next stream on the same tag
 *    is intact; one returning its own error -> that error;
 *  - reading past the end -> OVL_ERR_EOF (the bytes there are delivered),
 *    also on an empty stream;
 *  - a marshal function returning -1000 -> the sender's ovl_wait returns
 *    -1000, the receiver reads the data sent before it and then
 *    OVL_ERR_CANCELLED, and its ovl_wait returns OVL_ERR_CANCELLED;
 *  - ovl_stream_write / read outside a marshal function, on the wrong kind
 *    of stream, or with NULL data -> OVL_ERR_ARG; blocking calls and new
 *    streams inside a marshal function -> OVL_ERR_IN_CALLBACK; argument
 *    checks of ovl_isend_stream / ovl_irecv_stream;
 *  - a stream that fits in its first window goes as one message
 *    (OVL_STREAM_WHOLE=on, and auto when written quickly), at every size
 *    around the window's edges (one fragment, the window, the window plus
 *    its stretch, one byte more), and every fragment as its own message
 *    otherwise (off, a slow marshal function under auto, longer streams);
 *    data checked byte for byte in each case;
 *  - streams on ovl_tag_ub(); ovl_tag_ub() + 1 and MPI's own tag bound
 *    -> OVL_ERR_TAG both ways; a NULL request pointer -> OVL_ERR_ARG;
 *  - ovl re-initialised a few times with a random fragment size (64 B ..
 *    64 KiB) and window (1 .. 16) through ovl_config_t, the same on every
 *    rank (seeded, the seed broadcast and printed), streams of random
 *    lengths from every rank to every rank, byte for byte.
 */
#include "harness.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC       0x5354524du
#define HDR_BYTES   16u
#define MAX_DOUBLES 2000000u
#define SCRATCH     (64u << 10)

enum {
    T_I8,
    T_I16,
    T_I32,
    T_I64,
    T_U8,
    T_U16,
    T_U32,
    T_U64,
    T_FLOAT,
    T_DOUBLE,
    T_RAW,
    T_DOUBLES, /* a run of doubles written and read in bulk */
    NTYPES
};
static const size_t type_bytes[NTYPES] = { 1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 1, 8 };

static size_t payload, big_budget, mixed_budget;
static int thread_mode;

/* What a stream carries: a header {MAGIC, src, idx, kind} then items drawn
 * from a generator both ends seed with (kind, src, dst, idx). */
enum { K_BIG, K_MIXED, K_ANY, K_EARLY, K_AFTER_EARLY, K_OWN_ERROR };

struct spec {
    th_rng_t rng;
    size_t left; /* bytes still to place */
    int kind;
};

static void spec_init(struct spec *sp, int kind, int src, int dst, int idx)
{
    th_rng_init(&sp->rng, (uint64_t)kind << 8 | 1, (uint64_t)src << 32 | (uint64_t)dst,
                (uint64_t)idx);
    sp->kind = kind;
    size_t budget = kind == K_BIG ? big_budget : mixed_budget;
    sp->left = (size_t)th_below(&sp->rng, budget + 1);
    if (kind == K_BIG && idx == 0 && budget >= MAX_DOUBLES * 8)
        sp->left = MAX_DOUBLES * 8; /* the largest case, every run */
    if (kind == K_EARLY || kind == K_OWN_ERROR)
        sp->left += 4 * payload; /* longer than what the receiver reads */
}

/* Next item: type, count and value key. 0 when the stream is complete. */
static int spec_next(struct spec *sp, int *type, size_t *count, uint64_t *key)
{
    if (sp->left == 0)
        return 0;
    int t = sp->kind == K_BIG ? T_DOUBLES : (int)th_below(&sp->rng, NTYPES);
    size_t max = sp->left / type_bytes[t];
    if (max == 0) {
        t = T_RAW;
        max = sp->left;
    }
    size_t n = sp->kind == K_BIG ? max : th_size_log(&sp->rng, max < 20000 ? max : 20000);
    if (n == 0)
        n = 1;
    *type = t;
    *count = n;
    *key = th_rand(&sp->rng);
    sp->left -= n * type_bytes[t];
    return 1;
}

/* Bytes in the stream (kind, src, dst, idx), header included. */
static size_t spec_total(int kind, int src, int dst, int idx)
{
    struct spec sp;
    spec_init(&sp, kind, src, dst, idx);
    size_t total = HDR_BYTES, n;
    int t;
    uint64_t key;
    while (spec_next(&sp, &t, &n, &key))
        total += n * type_bytes[t];
    return total;
}

static uint64_t value_bits(uint64_t key, size_t j)
{
    return th_mix(key ^ (j * 0x9e3779b97f4a7c15ull));
}

/* ---- writing ------------------------------------------------------------- */

struct ctx {
    int kind, src, dst, idx;
    int expect_idx;    /* receive: the stream that must arrive here */
    int check_src;     /* receive: src known in advance */
    size_t total;      /* bytes written / read by the function */
    size_t read_limit; /* K_EARLY: stop reading after this many bytes */
    int fn_rc;         /* what the function returned */
    atomic_int runs;
    atomic_int cont_runs;
    ovl_status_t cont_st;
    uint8_t *scratch;
    th_rng_t chunking; /* this side's own choices of how to split */
};

static void ctx_init(struct ctx *c, int kind, int src, int dst, int idx)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->src = src;
    c->dst = dst;
    c->idx = idx;
    c->expect_idx = idx;
    c->check_src = 1;
    c->read_limit = SIZE_MAX;
    c->scratch = malloc(SCRATCH);
    CHECK(c->scratch != NULL);
    th_rng_init(&c->chunking, 0xc4, (uint64_t)th_rank, (uint64_t)kind << 16 | (uint64_t)idx);
}

static void ctx_free(struct ctx *c)
{
    free(c->scratch);
    c->scratch = NULL;
}

#define TELL_IS(s, n) \
    CHECKF(ovl_stream_tell(s) == (n), "tell %zu, expected %zu", ovl_stream_tell(s), (size_t)(n))

static int write_one(ovl_stream_t s, int t, uint64_t bits)
{
    switch (t) {
#define W(T, name, type)                      \
    case T: {                                 \
        type v;                               \
        memcpy(&v, &bits, sizeof v);          \
        return ovl_stream_write_##name(s, v); \
    }
        W(T_I8, int8, int8_t)
        W(T_I16, int16, int16_t)
        W(T_I32, int32, int32_t)
        W(T_I64, int64, int64_t)
        W(T_U8, uint8, uint8_t)
        W(T_U16, uint16, uint16_t)
        W(T_U32, uint32, uint32_t)
        W(T_U64, uint64, uint64_t)
        W(T_FLOAT, float, float)
        W(T_DOUBLE, double, double)
#undef W
    default:
        return OVL_ERR_INTERNAL;
    }
}

/* Fill buf with `n` values of type t starting at index j0 (bulk layout). */
static void fill_values(uint8_t *buf, int t, uint64_t key, size_t j0, size_t n)
{
    size_t w = type_bytes[t];
    for (size_t j = 0; j < n; j++) {
        uint64_t bits = value_bits(key, j0 + j);
        memcpy(buf + j * w, &bits, w);
    }
}

static int marshal(ovl_stream_t s, void *arg)
{
    struct ctx *c = arg;
    atomic_fetch_add(&c->runs, 1);
    uint32_t hdr[4] = { MAGIC, (uint32_t)c->src, (uint32_t)c->idx, (uint32_t)c->kind };
    TELL_IS(s, 0);
    CHECK_OK(ovl_stream_write(s, hdr, sizeof hdr));
    size_t pos = sizeof hdr;
    struct spec sp;
    spec_init(&sp, c->kind, c->src, c->dst, c->idx);
    int t;
    size_t n;
    uint64_t key;
    while (spec_next(&sp, &t, &n, &key)) {
        size_t w = type_bytes[t];
        if (t == T_RAW) {
            for (size_t off = 0; off < n;) {
                size_t k = 1 + (size_t)th_below(&c->chunking, SCRATCH);
                if (k > n - off)
                    k = n - off;
                th_fill(c->scratch, k, key, off);
                CHECK_OK(ovl_stream_write(s, c->scratch, k));
                off += k;
            }
        } else if (t == T_DOUBLES || th_below(&c->chunking, 4) == 0) {
            /* bulk, in chunks of random size */
            for (size_t j = 0; j < n;) {
                size_t k = 1 + (size_t)th_below(&c->chunking, SCRATCH / w);
                if (k > n - j)
                    k = n - j;
                fill_values(c->scratch, t, key, j, k);
                CHECK_OK(ovl_stream_write(s, c->scratch, k * w));
                j += k;
            }
        } else {
            for (size_t j = 0; j < n; j++)
                CHECK_OK(write_one(s, t, value_bits(key, j)));
        }
        pos += n * w;
        TELL_IS(s, pos);
    }
    c->total = pos;
    return OVL_SUCCESS;
}

/* ---- reading ----------------------------------------------------------------- */

/* Read `n` bytes (at most the read limit); 0 if the limit stops it. */
static int limited_read(struct ctx *c, ovl_stream_t s, void *buf, size_t n, size_t *pos)
{
    if (*pos + n > c->read_limit)
        return 0;
    CHECK_OK(ovl_stream_read(s, buf, n));
    *pos += n;
    return 1;
}

static int check_one(ovl_stream_t s, int t, uint64_t bits)
{
    uint8_t got[8], want[8];
    memcpy(want, &bits, 8);
    int rc;
    switch (t) {
#define R(T, name, type)                    \
    case T: {                               \
        type v;                             \
        rc = ovl_stream_read_##name(s, &v); \
        memcpy(got, &v, sizeof v);          \
        break;                              \
    }
        R(T_I8, int8, int8_t)
        R(T_I16, int16, int16_t)
        R(T_I32, int32, int32_t)
        R(T_I64, int64, int64_t)
        R(T_U8, uint8, uint8_t)
        R(T_U16, uint16, uint16_t)
        R(T_U32, uint32, uint32_t)
        R(T_U64, uint64, uint64_t)
        R(T_FLOAT, float, float)
        R(T_DOUBLE, double, double)
#undef R
    default:
        return OVL_ERR_INTERNAL;
    }
    if (rc == OVL_SUCCESS && memcmp(got, want, type_bytes[t]) != 0)
        return 1;
    return rc;
}

static int unmarshal(ovl_stream_t s, void *arg)
{
    struct ctx *c = arg;
    atomic_fetch_add(&c->runs, 1);
    uint32_t hdr[4];
    size_t pos = 0;
    TELL_IS(s, 0);
    if (!limited_read(c, s, hdr, sizeof hdr, &pos))
        return c->fn_rc;
    CHECKF(hdr[0] == MAGIC, "stream header magic %#x", hdr[0]);
    CHECKF(hdr[3] == (uint32_t)c->kind, "stream kind %u, expected %d", hdr[3], c->kind);
    CHECKF(hdr[2] == (uint32_t)c->expect_idx, "stream %u arrived where %d was expected", hdr[2],
           c->expect_idx);
    if (c->check_src)
        CHECKF(hdr[1] == (uint32_t)c->src, "stream from %u, expected %d", hdr[1], c->src);
    CHECK(hdr[1] < (uint32_t)th_size);
    c->src = (int)hdr[1];
    struct spec sp;
    spec_init(&sp, c->kind, c->src, c->dst, (int)hdr[2]);
    int t;
    size_t n;
    uint64_t key;
    while (spec_next(&sp, &t, &n, &key)) {
        size_t w = type_bytes[t];
        if (t == T_RAW) {
            for (size_t off = 0; off < n;) {
                size_t k = 1 + (size_t)th_below(&c->chunking, SCRATCH);
                if (k > n - off)
                    k = n - off;
                if (!limited_read(c, s, c->scratch, k, &pos))
                    return c->fn_rc;
                size_t bad = th_verify(c->scratch, k, key, off);
                CHECKF(bad == TH_OK, "raw run of %zu: byte %zu differs", n, off + bad);
                off += k;
            }
        } else if (t == T_DOUBLES || th_below(&c->chunking, 2) == 0) {
            for (size_t j = 0; j < n;) {
                size_t k = 1 + (size_t)th_below(&c->chunking, SCRATCH / w / 2);
                if (k > n - j)
                    k = n - j;
                if (!limited_read(c, s, c->scratch, k * w, &pos))
                    return c->fn_rc;
                fill_values(c->scratch + SCRATCH / 2, t, key, j, k);
                CHECKF(memcmp(c->scratch, c->scratch + SCRATCH / 2, k * w) == 0,
                       "values %zu..%zu of type %d differ", j, j + k, t);
                j += k;
            }
        } else {
            for (size_t j = 0; j < n; j++) {
                if (pos + w > c->read_limit)
                    return c->fn_rc;
                int rc = check_one(s, t, value_bits(key, j));
                CHECKF(rc == 0, "value %zu of type %d: %s", j, t,
                       rc == 1 ? "differs" : th_code_name(rc));
                pos += w;
            }
        }
        TELL_IS(s, pos);
    }
    c->total = pos;
    /* the message ends exactly here */
    uint8_t extra;
    EXPECT_ERR(ovl_stream_read(s, &extra, 1), OVL_ERR_EOF);
    TELL_IS(s, pos);
    return c->kind == K_OWN_ERROR ? c->fn_rc : OVL_SUCCESS;
}

static void count_cont(const ovl_status_t *st, void *arg)
{
    struct ctx *c = arg;
    c->cont_st = *st;
    atomic_fetch_add(&c->cont_runs, 1);
}

/* ---- the phases --------------------------------------------------------------- */

/* One big stream of doubles to the right neighbour. */
static void big_doubles(void)
{
    int right = (th_rank + 1) % th_size, left = (th_rank + th_size - 1) % th_size;
    for (int idx = 0; idx < 2; idx++) {
        struct ctx out, in;
        ctx_init(&out, K_BIG, th_rank, right, idx);
        ctx_init(&in, K_BIG, left, th_rank, idx);
        ovl_request_t q[2];
        ovl_status_t st[2];
        CHECK_OK(ovl_irecv_stream(left, 10 + idx, unmarshal, &in, &q[0]));
        CHECK_OK(ovl_isend_stream(right, 10 + idx, marshal, &out, &q[1]));
        CHECK_OK(ovl_waitall(2, q, st));
        CHECK(atomic_load(&in.runs) == 1 && atomic_load(&out.runs) == 1);
        CHECKF(st[0].bytes == in.total && st[1].bytes == out.total,
               "status bytes %zu / %zu, functions saw %zu / %zu", st[0].bytes, st[1].bytes,
               in.total, out.total);
        CHECK(st[0].source == left && st[0].tag == 10 + idx && st[0].error == OVL_SUCCESS);
        CHECK(st[1].tag == 10 + idx && st[1].error == OVL_SUCCESS);
        if (th_rank == 0)
            printf("test_stream: %zu-byte stream of doubles (%zu fragments) ok\n", out.total,
                   out.total / payload + 1);
        ctx_free(&out);
        ctx_free(&in);
    }
}

/* K streams to every rank (self too) on one tag, all in flight at once. */
static void mixed_all_to_all(void)
{
    enum { K = 3, TAG = 5 };
    int n = th_size * K;
    struct ctx *out = calloc((size_t)n, sizeof *out), *in = calloc((size_t)n, sizeof *in);
    ovl_request_t *q = calloc((size_t)(2 * n), sizeof *q);
    ovl_status_t *st = calloc((size_t)(2 * n), sizeof *st);
    CHECK(out && in && q && st);
    for (int p = 0; p < th_size; p++)
        for (int k = 0; k < K; k++) {
            struct ctx *c = &in[p * K + k];
            ctx_init(c, K_MIXED, p, th_rank, k);
            CHECK_OK(ovl_irecv_stream(p, TAG, unmarshal, c, &q[p * K + k]));
            CHECK_OK(ovl_continue(q[p * K + k], count_cont, c));
        }
    for (int i = 0; i < n; i++) {
        int p = (th_rank + i / K) % th_size, k = i % K;
        struct ctx *c = &out[p * K + k];
        ctx_init(c, K_MIXED, th_rank, p, k);
        CHECK_OK(ovl_isend_stream(p, TAG, marshal, c, &q[n + p * K + k]));
        CHECK_OK(ovl_continue(q[n + p * K + k], count_cont, c));
    }
    CHECK_OK(ovl_waitall(2 * n, q, st));
    for (int i = 0; i < n; i++) {
        CHECK(atomic_load(&in[i].runs) == 1 && atomic_load(&in[i].cont_runs) == 1);
        CHECK(atomic_load(&out[i].runs) == 1 && atomic_load(&out[i].cont_runs) == 1);
        CHECK(st[i].bytes == in[i].total && st[i].source == i / K && st[i].tag == TAG);
        CHECK(memcmp(&st[i], &in[i].cont_st, sizeof st[i]) == 0);
        CHECK(st[n + i].bytes == out[i].total && st[n + i].error == OVL_SUCCESS);
        ctx_free(&in[i]);
        ctx_free(&out[i]);
    }
    free(out);
    free(in);
    free(q);
    free(st);
}

/* Stream receives with OVL_ANY_SOURCE (and OVL_ANY_TAG). */
static void any_source(void)
{
    int right = (th_rank + 1) % th_size, left = (th_rank + th_size - 1) % th_size;
    for (int any_tag = 0; any_tag < 2; any_tag++) {
        struct ctx out, in;
        ctx_init(&out, K_ANY, th_rank, right, any_tag);
        ctx_init(&in, K_ANY, -1, th_rank, any_tag);
        in.check_src = 0;
        ovl_request_t q[2];
        ovl_status_t st[2];
        int tag = 20 + th_rank, ltag = 20 + left;
        CHECK_OK(
            ovl_irecv_stream(OVL_ANY_SOURCE, any_tag ? OVL_ANY_TAG : ltag, unmarshal, &in, &q[0]));
        CHECK_OK(ovl_isend_stream(right, tag, marshal, &out, &q[1]));
        CHECK_OK(ovl_waitall(2, q, st));
        CHECKF(st[0].source == left && st[0].tag == ltag, "status source %d tag %d", st[0].source,
               st[0].tag);
        CHECK(in.src == left && st[0].bytes == in.total && st[1].bytes == out.total);
        ctx_free(&out);
        ctx_free(&in);
    }
}

/* Early return and own errors in the unmarshal function. */
static void early_return(void)
{
    int right = (th_rank + 1) % th_size, left = (th_rank + th_size - 1) % th_size;
    enum { TAG = 30 };
    struct ctx out[4], in[4];
    ovl_request_t q[8];
    ovl_status_t st[8];
    /* 0: read a few bytes then return 0; 1: intact;
     * 2: read some then return -2000; 3: intact */
    const int kinds[4] = { K_EARLY, K_AFTER_EARLY, K_OWN_ERROR, K_AFTER_EARLY };
    for (int i = 0; i < 4; i++) {
        ctx_init(&in[i], kinds[i], left, th_rank, i);
        ctx_init(&out[i], kinds[i], th_rank, right, i);
    }
    in[0].read_limit = 16 + (size_t)th_below(th_rng(), 3 * payload);
    in[0].fn_rc = OVL_SUCCESS;
    in[2].read_limit = 16 + (size_t)th_below(th_rng(), 2 * payload);
    in[2].fn_rc = -2000;
    for (int i = 0; i < 4; i++)
        CHECK_OK(ovl_irecv_stream(left, TAG, unmarshal, &in[i], &q[i]));
    for (int i = 0; i < 4; i++)
        CHECK_OK(ovl_isend_stream(right, TAG, marshal, &out[i], &q[4 + i]));
    for (int i = 0; i < 4; i++) {
        int rc = ovl_wait(&q[i], &st[i]);
        CHECKF(rc == (i == 2 ? -2000 : OVL_SUCCESS), "stream %d: %s", i, th_code_name(rc));
        CHECK(st[i].error == rc);
    }
    CHECK_OK(ovl_waitall(4, &q[4], &st[4]));
    for (int i = 0; i < 4; i++) {
        /* the whole message counts, however much the function read */
        size_t sent = spec_total(kinds[i], left, th_rank, i);
        CHECKF(st[i].bytes == sent, "stream %d: receiver status.bytes %zu, sent %zu", i,
               st[i].bytes, sent);
        if (i == 1 || i == 3)
            CHECK(in[i].total == sent);
        else
            CHECK(in[i].total == 0 || in[i].total == sent); /* set only when all read */
        CHECK(st[4 + i].bytes == out[i].total && st[4 + i].error == OVL_SUCCESS);
        ctx_free(&in[i]);
        ctx_free(&out[i]);
    }
}

/* ---- end of stream, aborted streams, misuse ------------------------------ */

struct small {
    size_t nbytes; /* sender: bytes to write */
    int abort_rc;  /* sender: return this after writing */
    size_t want;   /* receiver: bytes to try to read in the second read */
    int rc1, rc2, rc3;
    size_t tell1, tell2;
    uint8_t *buf; /* receiver: where the data lands */
    int stage;
};

static int small_marshal(ovl_stream_t s, void *arg)
{
    struct small *m = arg;
    uint8_t chunk[512];
    for (size_t off = 0; off < m->nbytes;) {
        size_t k = m->nbytes - off < sizeof chunk ? m->nbytes - off : sizeof chunk;
        th_fill(chunk, k, 0xe0f, off);
        CHECK_OK(ovl_stream_write(s, chunk, k));
        off += k;
    }
    /* wrong kind / bad arguments / blocking calls from in here */
    uint8_t b;
    EXPECT_ERR(ovl_stream_read(s, &b, 1), OVL_ERR_ARG);
    /* the inline helpers too, with the write window open */
    EXPECT_ERR(ovl_stream_read_uint8(s, &b), OVL_ERR_ARG);
    EXPECT_ERR(ovl_stream_read_double(s, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_stream_write(s, NULL, 5), OVL_ERR_ARG);
    CHECK_OK(ovl_stream_write(s, NULL, 0));
    EXPECT_ERR(ovl_finalize(), OVL_ERR_IN_CALLBACK);
    ovl_request_t r = OVL_REQUEST_NULL;
    EXPECT_ERR(ovl_isend_stream(0, 0, small_marshal, m, &r), OVL_ERR_IN_CALLBACK);
    EXPECT_ERR(ovl_irecv_stream(0, 0, small_marshal, m, &r), OVL_ERR_IN_CALLBACK);
    CHECK(r == OVL_REQUEST_NULL);
    TELL_IS(s, m->nbytes);
    return m->abort_rc;
}

/* First read nbytes/2, then try `want` more, then 1 more. */
static int small_unmarshal(ovl_stream_t s, void *arg)
{
    struct small *m = arg;
    EXPECT_ERR(ovl_stream_write(s, "x", 1), OVL_ERR_ARG);
    EXPECT_ERR(ovl_stream_read(s, NULL, 1), OVL_ERR_ARG);
    m->stage = 1;
    size_t first = m->nbytes / 2;
    m->rc1 = ovl_stream_read(s, m->buf, first);
    /* With the read window open on arrived data: the inline helpers must
     * neither write into it nor read into NULL (tell1 and the data are
     * checked by the caller). */
    EXPECT_ERR(ovl_stream_write_uint8(s, 0x5a), OVL_ERR_ARG);
    EXPECT_ERR(ovl_stream_write_double(s, 1.5), OVL_ERR_ARG);
    EXPECT_ERR(ovl_stream_read_uint32(s, NULL), OVL_ERR_ARG);
    m->tell1 = ovl_stream_tell(s);
    m->rc2 = ovl_stream_read(s, m->buf + first, m->want);
    m->tell2 = ovl_stream_tell(s);
    uint8_t b;
    m->rc3 = ovl_stream_read(s, &b, 1);
    return m->rc2 < 0 && m->rc2 != OVL_ERR_EOF ? m->rc2 : OVL_SUCCESS;
}

static void end_and_abort(void)
{
    int peer = th_rank ^ 1;
    enum { TAG = 40 };
    /* n bytes sent, receiver asks for more: EOF with everything delivered */
    const size_t sizes[] = { 0, 1, 10, payload, 3 * payload + payload / 2 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int aborted = 0; aborted < 2; aborted++) {
            size_t n = sizes[i];
            struct small snd = { .nbytes = n, .abort_rc = aborted ? -1000 : OVL_SUCCESS };
            struct small rcv = { .nbytes = n, .want = n + 8 };
            rcv.buf = calloc(1, 2 * n + 16);
            CHECK(rcv.buf != NULL);
            ovl_request_t q[2];
            ovl_status_t st[2];
            CHECK_OK(ovl_irecv_stream(peer, TAG, small_unmarshal, &rcv, &q[0]));
            CHECK_OK(ovl_isend_stream(peer, TAG, small_marshal, &snd, &q[1]));
            int rc0 = ovl_wait(&q[0], &st[0]), rc1 = ovl_wait(&q[1], &st[1]);
            CHECK(rcv.stage == 1);
            CHECK_OK(rcv.rc1);
            CHECK(rcv.tell1 == n / 2);
            if (!aborted) {
                EXPECT_ERR(rcv.rc2, OVL_ERR_EOF);
                EXPECT_ERR(rcv.rc3, OVL_ERR_EOF);
                CHECK_OK(rc0);
                CHECK_OK(rc1);
                CHECK(st[0].bytes == n && st[1].bytes == n);
            } else {
                EXPECT_ERR(rcv.rc2, OVL_ERR_CANCELLED);
                CHECK(rcv.rc3 == OVL_ERR_CANCELLED || rcv.rc3 == OVL_ERR_EOF);
                EXPECT_ERR(rc0, OVL_ERR_CANCELLED);
                EXPECT_ERR(rc1, -1000);
                CHECK(st[0].error == OVL_ERR_CANCELLED && st[1].error == -1000);
            }
            /* what was sent before the end (or the abort) was delivered */
            CHECKF(rcv.tell2 == n, "tell %zu after reading past %zu bytes", rcv.tell2, n);
            CHECK(th_verify(rcv.buf, n, 0xe0f, 0) == TH_OK);
            free(rcv.buf);
        }
    }
}

static ovl_stream_t parked_stream;
static atomic_int parked;

static int parking_unmarshal(ovl_stream_t s, void *arg)
{
    (void)arg;
    parked_stream = s;
    atomic_store(&parked, 1);
    uint8_t b[4];
    CHECK_OK(ovl_stream_read(s, b, sizeof b));
    CHECK(th_verify(b, sizeof b, 0xe0f, 0) == TH_OK);
    return OVL_SUCCESS;
}

static void misuse(void)
{
    int peer = th_rank ^ 1;
    uint8_t b[4] = { 0 };
    ovl_request_t r = OVL_REQUEST_NULL;
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(ovl_comm(), MPI_TAG_UB, &ub, &flag);
    CHECK(flag && ub);

    EXPECT_ERR(ovl_stream_write(NULL, b, 1), OVL_ERR_ARG);
    EXPECT_ERR(ovl_stream_read(NULL, b, 1), OVL_ERR_ARG);
    CHECK(ovl_stream_tell(NULL) == 0);
    EXPECT_ERR(ovl_isend_stream(peer, 0, NULL, NULL, &r), OVL_ERR_ARG);
    EXPECT_ERR(ovl_isend_stream(peer, 0, small_marshal, NULL, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_isend_stream(-5, 0, small_marshal, NULL, &r), OVL_ERR_RANK);
    EXPECT_ERR(ovl_isend_stream(th_size, 0, small_marshal, NULL, &r), OVL_ERR_RANK);
    EXPECT_ERR(ovl_isend_stream(OVL_ANY_SOURCE, 0, small_marshal, NULL, &r), OVL_ERR_RANK);
    EXPECT_ERR(ovl_isend_stream(peer, OVL_ANY_TAG, small_marshal, NULL, &r), OVL_ERR_TAG);
    EXPECT_ERR(ovl_isend_stream(peer, -7, small_marshal, NULL, &r), OVL_ERR_TAG);
    EXPECT_ERR(ovl_irecv_stream(peer, -7, small_unmarshal, NULL, &r), OVL_ERR_TAG);
    EXPECT_ERR(ovl_irecv_stream(th_size + 1, 0, small_unmarshal, NULL, &r), OVL_ERR_RANK);
    EXPECT_ERR(ovl_irecv_stream(peer, 0, NULL, NULL, &r), OVL_ERR_ARG);
    EXPECT_ERR(ovl_irecv_stream(peer, 0, small_unmarshal, NULL, NULL), OVL_ERR_ARG);
    CHECK(strstr(ovl_error_detail(), "request pointer") != NULL);
    EXPECT_ERR(ovl_irecv_stream(OVL_ANY_SOURCE, OVL_ANY_TAG, small_unmarshal, NULL, NULL),
               OVL_ERR_ARG);
    /* ovl's tags end at ovl_tag_ub(), half of MPI's (the upper half marks
     * delta messages): one past it, and MPI's own bound, are refused both
     * ways (ovl_tag_ub() itself carries a stream in tag_bounds()) */
    int tub = ovl_tag_ub();
    CHECK(tub == *ub / 2 && tub >= 16383);
    EXPECT_ERR(ovl_isend_stream(peer, tub + 1, small_marshal, NULL, &r), OVL_ERR_TAG);
    CHECK(strstr(ovl_error_detail(), "ovl_isend_stream") != NULL);
    EXPECT_ERR(ovl_irecv_stream(peer, tub + 1, small_unmarshal, NULL, &r), OVL_ERR_TAG);
    CHECK(strstr(ovl_error_detail(), "ovl_irecv_stream") != NULL);
    EXPECT_ERR(ovl_isend_stream(peer, *ub, small_marshal, NULL, &r), OVL_ERR_TAG);
    EXPECT_ERR(ovl_irecv_stream(OVL_ANY_SOURCE, *ub, small_unmarshal, NULL, &r), OVL_ERR_TAG);
    CHECK(r == OVL_REQUEST_NULL);

    /* A live stream's handle used from outside its function. */
    if (th_rank % 2 == 0) {
        ovl_request_t q;
        CHECK_OK(ovl_irecv_stream(peer, 45, parking_unmarshal, NULL, &q));
        TH_WAIT_UNTIL(atomic_load(&parked), 30, th_progress());
        EXPECT_ERR(ovl_stream_read(parked_stream, b, 1), OVL_ERR_ARG);
        EXPECT_ERR(ovl_stream_write(parked_stream, b, 1), OVL_ERR_ARG);
        double d = 0;
        EXPECT_ERR(ovl_stream_read_double(parked_stream, &d), OVL_ERR_ARG);
        EXPECT_ERR(ovl_stream_write_double(parked_stream, d), OVL_ERR_ARG);
        EXPECT_ERR(ovl_stream_read_double(NULL, &d), OVL_ERR_ARG);
        EXPECT_ERR(ovl_stream_write_uint16(NULL, 1), OVL_ERR_ARG);
        if (!thread_mode) /* (the progress thread may be inside it) */
            CHECK(ovl_stream_tell(parked_stream) == 0);
        CHECK_MPI(MPI_Send(NULL, 0, MPI_BYTE, peer, 46, MPI_COMM_WORLD));
        CHECK_OK(ovl_wait(&q, OVL_STATUS_IGNORE));
    } else {
        struct small snd = { .nbytes = 4 };
        ovl_request_t q;
        CHECK_MPI(MPI_Recv(NULL, 0, MPI_BYTE, peer, 46, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_OK(ovl_isend_stream(peer, 45, small_marshal, &snd, &q));
        CHECK_OK(ovl_wait(&q, OVL_STATUS_IGNORE));
    }
}

/* Fire-and-forget streams (freed right after ovl_continue), and a stream
 * request polled with ovl_test. */
static void detached_streams(void)
{
    int right = (th_rank + 1) % th_size, left = (th_rank + th_size - 1) % th_size;
    struct ctx out, in;
    ctx_init(&out, K_MIXED, th_rank, right, 7);
    ctx_init(&in, K_MIXED, left, th_rank, 7);
    ovl_request_t r, s;
    CHECK_OK(ovl_irecv_stream(left, 60, unmarshal, &in, &r));
    CHECK_OK(ovl_continue(r, count_cont, &in));
    CHECK_OK(ovl_request_free(&r));
    CHECK_OK(ovl_isend_stream(right, 60, marshal, &out, &s));
    CHECK_OK(ovl_continue(s, count_cont, &out));
    CHECK_OK(ovl_request_free(&s));
    CHECK(r == OVL_REQUEST_NULL && s == OVL_REQUEST_NULL);
    TH_WAIT_UNTIL(atomic_load(&in.cont_runs) == 1 && atomic_load(&out.cont_runs) == 1, 30,
                  th_progress());
    CHECK(in.cont_st.error == OVL_SUCCESS && in.cont_st.bytes == in.total);
    CHECK(in.cont_st.source == left && in.cont_st.tag == 60);
    CHECK(out.cont_st.error == OVL_SUCCESS && out.cont_st.bytes == out.total);
    ctx_free(&out);
    ctx_free(&in);

    ctx_init(&out, K_MIXED, th_rank, right, 8);
    ctx_init(&in, K_MIXED, left, th_rank, 8);
    ovl_request_t q[2];
    CHECK_OK(ovl_irecv_stream(left, 61, unmarshal, &in, &q[0]));
    CHECK_OK(ovl_isend_stream(right, 61, marshal, &out, &q[1]));
    ovl_status_t st[2];
    double t0 = th_now();
    for (int done = 0; done < 2;) {
        done = 0;
        for (int k = 0; k < 2; k++) {
            int flag = 1;
            if (q[k] != OVL_REQUEST_NULL)
                CHECK_OK(ovl_test(&q[k], &flag, &st[k]));
            done += flag;
        }
        CHECKF(th_now() - t0 < 30, "stream requests never tested complete");
    }
    CHECK(st[0].bytes == in.total && st[1].bytes == out.total && st[0].source == left);
    ctx_free(&out);
    ctx_free(&in);
}

/* ---- whole streams: one message for a stream that fits its first window ---- */

struct whole {
    size_t n;      /* bytes */
    uint64_t key;  /* pattern */
    unsigned slow; /* marshal: sleep this many ms before the first fragment fills */
    size_t bad;    /* receive: first wrong byte, or TH_OK */
};

static int whole_marshal(ovl_stream_t s, void *arg)
{
    struct whole *w = arg;
    static const size_t step[] = { 1, 8, 333, 4096, 17, 65536, 3 };
    uint8_t buf[65536];
    size_t at = 0;
    for (unsigned i = 0; at < w->n; i++) {
        size_t c = step[i % 7] < w->n - at ? step[i % 7] : w->n - at;
        if (w->slow && at == 0) {
            th_sleep_ms(w->slow);
        }
        th_fill(buf, c, w->key, at);
        if (c == 8) { /* the inline helper too */
            uint64_t v;
            memcpy(&v, buf, 8);
            int rc = ovl_stream_write_uint64(s, v);
            if (rc)
                return rc;
        } else {
            int rc = ovl_stream_write(s, buf, c);
            if (rc)
                return rc;
        }
        at += c;
    }
    return OVL_SUCCESS;
}

static int whole_unmarshal(ovl_stream_t s, void *arg)
{
    struct whole *w = arg;
    static const size_t step[] = { 5, 1000, 64, 16384, 7 };
    uint8_t buf[16384];
    w->bad = TH_OK;
    for (size_t at = 0, i = 0; at < w->n; i++) {
        size_t c = step[i % 5] < w->n - at ? step[i % 5] : w->n - at;
        int rc = ovl_stream_read(s, buf, c);
        if (rc)
            return rc;
        size_t b = th_verify(buf, c, w->key, at);
        if (b != TH_OK && w->bad == TH_OK)
            w->bad = at + b;
        at += c;
    }
    uint8_t extra;
    return ovl_stream_read(s, &extra, 1) == OVL_ERR_EOF ? OVL_SUCCESS : OVL_ERR_INTERNAL;
}

/* One stream of @n bytes to the right neighbour, one from the left; returns
 * the MPI messages this rank's stream went in, and its fragments. */
static void whole_one(size_t n, unsigned slow, uint64_t *msgs, uint64_t *frags)
{
    int right = (th_rank + 1) % th_size, left = (th_rank + th_size - 1) % th_size;
    struct whole out = { n, 0x57484f4cull ^ n ^ (uint64_t)th_rank << 40, slow, TH_OK };
    struct whole in = { n, 0x57484f4cull ^ n ^ (uint64_t)left << 40, 0, 1 };
    ovl_stats_t a, b;
    CHECK_OK(ovl_stats_get(&a, sizeof a));
    ovl_request_t q[2];
    ovl_status_t st[2];
    CHECK_OK(ovl_irecv_stream(left, 31, whole_unmarshal, &in, &q[0]));
    CHECK_OK(ovl_isend_stream(right, 31, whole_marshal, &out, &q[1]));
    CHECK_OK(ovl_waitall(2, q, st));
    CHECK_OK(ovl_stats_get(&b, sizeof b));
    CHECKF(in.bad == TH_OK, "%zu-byte stream: byte %zu wrong", n, in.bad);
    CHECKF(st[0].bytes == n && st[1].bytes == n, "%zu-byte stream: status bytes %zu / %zu", n,
           st[0].bytes, st[1].bytes);
    *msgs = b.stream_messages - a.stream_messages;
    *frags = b.fragments_sent - a.fragments_sent;
}

/* Streams on ovl_tag_ub(), the largest tag ovl accepts, several fragments
 * long: received on that tag and with OVL_ANY_TAG. */
static void tag_bounds(void)
{
    int right = (th_rank + 1) % th_size, left = (th_rank + th_size - 1) % th_size;
    int tub = ovl_tag_ub();
    for (int any = 0; any < 2; any++) {
        size_t n = 3 * payload + 5 + (size_t)any;
        struct whole out = { n, 0x7a9ull ^ n ^ (uint64_t)th_rank << 40, 0, TH_OK };
        struct whole in = { n, 0x7a9ull ^ n ^ (uint64_t)left << 40, 0, 1 };
        ovl_request_t q[2];
        ovl_status_t st[2];
        CHECK_OK(ovl_irecv_stream(left, any ? OVL_ANY_TAG : tub, whole_unmarshal, &in, &q[0]));
        CHECK_OK(ovl_isend_stream(right, tub, whole_marshal, &out, &q[1]));
        CHECK_OK(ovl_waitall(2, q, st));
        CHECKF(in.bad == TH_OK, "stream on tag %d: byte %zu wrong", tub, in.bad);
        CHECKF(st[0].tag == tub && st[0].source == left && st[0].bytes == n,
               "stream on tag %d: status tag %d source %d bytes %zu", tub, st[0].tag, st[0].source,
               st[0].bytes);
        CHECK(st[1].bytes == n && st[1].error == OVL_SUCCESS);
    }
}

static void whole_streams(void)
{
    const int modes[] = { OVL_STREAM_WHOLE_ON, OVL_STREAM_WHOLE_OFF, OVL_STREAM_WHOLE_AUTO };
    size_t w = 0, p = 0, x = 0, cap = 0;
    for (int m = 0; m < 3; m++) {
        CHECK_OK(ovl_finalize());
        ovl_config_t c = { .field_mask = OVL_CONFIG_FIELD_STREAM_WHOLE,
                           .stream.whole = (ovl_stream_whole_t)modes[m] };
        CHECK_OK(ovl_init(MPI_COMM_WORLD, &c));
        /* each ovl_init may choose its own fragment size (the model's) */
        CHECK_OK(ovl_config_get(&c));
        CHECK(c.stream.whole == (ovl_stream_whole_t)modes[m]);
        w = c.stream.window;
        p = c.stream.fragment_size - HDR_BYTES;
        x = w * HDR_BYTES < p ? w * HDR_BYTES : p; /* the last fragment's stretch */
        cap = w * p + x;                           /* one message at most */
        const size_t sizes[] = { 0,         1,           p - 1,      p,       p + 1,
                                 2 * p + 5, (w - 1) * p, w * p,      cap - 1, cap,
                                 cap + 1,   cap + p + 3, 3 * cap + 7 };
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            size_t n = sizes[i];
            uint64_t msgs, frags;
            whole_one(n, 0, &msgs, &frags);
            CHECKF(msgs >= 1 && msgs <= frags, "%zu bytes: %llu messages for %llu fragments", n,
                   (unsigned long long)msgs, (unsigned long long)frags);
            if (modes[m] == OVL_STREAM_WHOLE_ON && n <= cap) {
                size_t want = n <= p ? 1 : n > w * p ? w : (n + p - 1) / p;
                CHECKF(msgs == 1 && frags == want,
                       "on, %zu bytes (window %zu x %zu + %zu): %llu messages, %llu fragments, "
                       "want 1 and %zu",
                       n, w, p, x, (unsigned long long)msgs, (unsigned long long)frags, want);
            } else if (modes[m] != OVL_STREAM_WHOLE_AUTO) {
                CHECKF(msgs == frags, "%s, %zu bytes: %llu messages for %llu fragments",
                       modes[m] == OVL_STREAM_WHOLE_ON ? "on" : "off", n, (unsigned long long)msgs,
                       (unsigned long long)frags);
            }
        }
        if (modes[m] == OVL_STREAM_WHOLE_AUTO && w > 1) {
            /* a marshal function that takes 30 ms before its first fragment is
             * full streams from that fragment on */
            uint64_t msgs, frags;
            whole_one(2 * p + 1, 30, &msgs, &frags);
            CHECKF(msgs == frags && frags >= 3, "slow marshal: %llu messages for %llu fragments",
                   (unsigned long long)msgs, (unsigned long long)frags);
        }
    }
    if (th_rank == 0)
        printf("test_stream: whole streams up to %zu B (window %zu x %zu + %zu) ok\n", cap, w, p,
               x);
}

/* ---- random fragment sizes ------------------------------------------------ */

/* One stream of the random phase: its bytes, and how one side cuts them. */
struct rnd {
    uint64_t key;    /* pattern */
    size_t n;        /* bytes in the stream */
    size_t payload;  /* fragment payload in force: chunks go up to 3 of them */
    th_rng_t chunks; /* this side's own cutting */
    uint8_t *buf;    /* 3 payloads + 8 */
    size_t bad;      /* receive: first wrong or missing byte, or TH_OK */
    int rc;          /* receive: first failed read, or what followed the end */
};

static size_t rnd_chunk(struct rnd *x, size_t left)
{
    size_t c = 1 + th_size_log(&x->chunks, 3 * x->payload);
    return c < left ? c : left;
}

static int rnd_marshal(ovl_stream_t s, void *arg)
{
    struct rnd *x = arg;
    for (size_t at = 0; at < x->n;) {
        size_t c = rnd_chunk(x, x->n - at);
        th_fill(x->buf, c, x->key, at);
        int rc;
        if (c == 8) { /* the inline helpers too */
            uint64_t v;
            memcpy(&v, x->buf, 8);
            rc = ovl_stream_write_uint64(s, v);
        } else if (c == 2) {
            uint16_t v;
            memcpy(&v, x->buf, 2);
            rc = ovl_stream_write_uint16(s, v);
        } else {
            rc = ovl_stream_write(s, x->buf, c);
        }
        if (rc)
            return rc;
        at += c;
    }
    return OVL_SUCCESS;
}

static int rnd_unmarshal(ovl_stream_t s, void *arg)
{
    struct rnd *x = arg;
    x->bad = TH_OK;
    x->rc = OVL_SUCCESS;
    for (size_t at = 0; at < x->n;) {
        size_t c = rnd_chunk(x, x->n - at);
        int rc;
        if (c == 8) {
            uint64_t v = 0;
            rc = ovl_stream_read_uint64(s, &v);
            memcpy(x->buf, &v, 8);
        } else if (c == 4) {
            uint32_t v = 0;
            rc = ovl_stream_read_uint32(s, &v);
            memcpy(x->buf, &v, 4);
        } else {
            rc = ovl_stream_read(s, x->buf, c);
        }
        if (rc) {
            x->rc = rc;
            x->bad = at;
            return rc;
        }
        size_t b = th_verify(x->buf, c, x->key, at);
        if (b != TH_OK && x->bad == TH_OK)
            x->bad = at + b;
        at += c;
    }
    uint8_t extra;
    int rc = ovl_stream_read(s, &extra, 1);
    if (rc != OVL_ERR_EOF)
        x->rc = rc == OVL_SUCCESS ? OVL_ERR_INTERNAL : rc; /* longer than sent? */
    return x->rc;
}

/* Re-initialise ovl a few times with a random fragment size (64 B to
 * 64 KiB, log-uniform, any value) and window (1 to 16), the same on every
 * rank, and stream random lengths (around the window's edges, or
 * log-uniform up to several windows) from every rank to every rank, cut
 * differently on each side; byte for byte. The seed comes from
 * OVL_TEST_SEED (the harness's fixed default otherwise), the variant's
 * environment and the rank count; it is printed, and in every failure. */
static void random_fragment_sizes(void)
{
    enum { ROUNDS = 4, K = 2, TAG = 80 };
    /* Each variant (its environment) and rank count draws its own sizes,
     * the same on every run of it. */
    uint64_t seed = th_seed() ^ (uint64_t)th_size;
    const char *vars[] = { "OVL_FRAGMENT_SIZE", "OVL_STREAM_WINDOW", "OVL_PROGRESS" };
    for (size_t v = 0; v < sizeof vars / sizeof *vars; v++)
        for (const char *c = getenv(vars[v]); c && *c; c++)
            seed = th_mix(seed ^ (uint64_t)(unsigned char)*c);
    seed >>= 1;
    CHECK_MPI(MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    if (th_rank == 0) {
        printf("test_stream: random fragment sizes, seed %" PRIu64 " (from OVL_TEST_SEED=%" PRIu64
               ", this variant's environment and %d ranks)\n",
               seed, th_seed(), th_size);
        fflush(stdout);
    }
    th_rng_t rng = { th_mix(seed ^ 0x72616e64667261ull) }; /* the same on every rank */
    int n = th_size * K;
    struct rnd *out = calloc((size_t)n, sizeof *out), *in = calloc((size_t)n, sizeof *in);
    ovl_request_t *q = calloc((size_t)(2 * n), sizeof *q);
    ovl_status_t *st = calloc((size_t)(2 * n), sizeof *st);
    CHECK(out && in && q && st);
    for (int round = 0; round < ROUNDS; round++) {
        unsigned e = (unsigned)th_below(&rng, 11);
        size_t lo = (size_t)64 << e;
        size_t fs = e == 10 ? lo : lo + (size_t)th_below(&rng, lo);
        unsigned win = 1 + (unsigned)th_below(&rng, 16);
        CHECK_OK(ovl_finalize());
        ovl_config_t c = { .field_mask =
                               OVL_CONFIG_FIELD_FRAGMENT_SIZE | OVL_CONFIG_FIELD_STREAM_WINDOW,
                           .stream.fragment_size = fs,
                           .stream.window = win };
        int rc = ovl_init(MPI_COMM_WORLD, &c);
        CHECKF(rc == OVL_SUCCESS,
               "seed %" PRIu64 " round %d: ovl_init(fragment %zu, window %u): %s", seed, round, fs,
               win, th_code_name(rc));
        CHECK_OK(ovl_config_get(&c));
        CHECKF(c.stream.fragment_size == fs && c.stream.window == win,
               "seed %" PRIu64 ": fragment %zu window %u in force, asked %zu and %u", seed,
               c.stream.fragment_size, c.stream.window, fs, win);
        size_t pl = fs - HDR_BYTES, wp = win * pl;
        size_t x = win * HDR_BYTES < pl ? win * HDR_BYTES : pl; /* the stretch */
        size_t max = pl * (4 * win + 8) < (1u << 20) ? pl * (4 * win + 8) : (1u << 20);
        const size_t edges[] = { 0, 1, pl - 1, pl, pl + 1, wp - 1, wp, wp + x, wp + x + 1, 2 * wp };
        /* every rank draws every stream's length, in the same order */
        for (int src = 0; src < th_size; src++)
            for (int dst = 0; dst < th_size; dst++)
                for (int k = 0; k < K; k++) {
                    size_t len = th_below(&rng, 3) == 0
                                     ? edges[th_below(&rng, sizeof edges / sizeof *edges)]
                                     : th_size_log(&rng, max);
                    uint64_t key = th_mix(seed ^ (uint64_t)round << 48 ^ (uint64_t)src << 32 ^
                                          (uint64_t)dst << 16 ^ (uint64_t)k);
                    struct rnd *r = src == th_rank   ? &out[dst * K + k]
                                    : dst == th_rank ? &in[src * K + k]
                                                     : NULL;
                    if (src == th_rank && dst == th_rank) /* to itself: both ends here */
                        in[src * K + k] = (struct rnd){ .key = key, .n = len, .payload = pl };
                    if (r)
                        *r = (struct rnd){ .key = key, .n = len, .payload = pl };
                }
        for (int i = 0; i < n; i++) {
            out[i].chunks.s = th_mix(out[i].key ^ 0x5e);
            in[i].chunks.s = th_mix(in[i].key ^ 0x7e);
            out[i].buf = malloc(3 * pl + 8);
            in[i].buf = malloc(3 * pl + 8);
            CHECK(out[i].buf && in[i].buf);
            in[i].bad = 1;
        }
        for (int i = 0; i < n; i++)
            CHECK_OK(ovl_irecv_stream(i / K, TAG + i % K, rnd_unmarshal, &in[i], &q[i]));
        for (int j = 0; j < n; j++) {
            int i = (th_rank * K + j) % n; /* not everyone to rank 0 first */
            CHECK_OK(ovl_isend_stream(i / K, TAG + i % K, rnd_marshal, &out[i], &q[n + i]));
        }
        rc = ovl_waitall(2 * n, q, st);
        CHECKF(rc == OVL_SUCCESS, "seed %" PRIu64 " round %d (fragment %zu, window %u): %s", seed,
               round, fs, win, th_code_name(rc));
        for (int i = 0; i < n; i++) {
            CHECKF(in[i].bad == TH_OK && in[i].rc == OVL_SUCCESS,
                   "seed %" PRIu64 " round %d (fragment %zu, window %u): %zu-byte stream %d from "
                   "rank %d: byte %zu wrong or missing (%s)",
                   seed, round, fs, win, in[i].n, i % K, i / K, in[i].bad, th_code_name(in[i].rc));
            CHECKF(st[i].bytes == in[i].n && st[i].source == i / K && st[i].tag == TAG + i % K &&
                       st[n + i].bytes == out[i].n,
                   "seed %" PRIu64 " round %d (fragment %zu, window %u): stream %d from rank %d: "
                   "status bytes %zu (sent %zu), source %d, tag %d; sent %zu of %zu",
                   seed, round, fs, win, i % K, i / K, st[i].bytes, in[i].n, st[i].source,
                   st[i].tag, st[n + i].bytes, out[i].n);
            free(out[i].buf);
            free(in[i].buf);
        }
        if (th_rank == 0)
            printf("test_stream: random round %d: fragment %zu B, window %u, streams up to %zu B "
                   "ok\n",
                   round, fs, win, max);
    }
    free(out);
    free(in);
    free(q);
    free(st);
}

int main(int argc, char **argv)
{
    th_init(&argc, &argv, "test_stream", NULL);
    CHECKF(th_size % 2 == 0, "needs an even number of ranks, got %d", th_size);
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    thread_mode = cfg.progress.mode == OVL_PROGRESS_THREAD;
    payload = cfg.stream.fragment_size - HDR_BYTES;
    /* 1500 fragments per stream at most, 16 MB (2M doubles) tops */
    big_budget = payload * 1500 < MAX_DOUBLES * 8 ? payload * 1500 : MAX_DOUBLES * 8;
    mixed_budget = payload * 150 < (512u << 10) ? payload * 150 : (512u << 10);
    if (th_rank == 0)
        printf("test_stream: fragment %zu B, window %u, up to %zu B per big stream\n",
               cfg.stream.fragment_size, cfg.stream.window, big_budget);

    misuse();
    tag_bounds();
    end_and_abort();
    big_doubles();
    mixed_all_to_all();
    any_source();
    early_return();
    detached_streams();
    whole_streams();
    /* It draws its own fragment sizes: once per rank count, in the
     * variants that leave the fragment size to the defaults, and not on
     * the emulated cluster ("no-random"), where its re-initialisations
     * cost seconds. */
    if (!getenv("OVL_FRAGMENT_SIZE") && !(argc > 1 && !strcmp(argv[1], "no-random")))
        random_fragment_sizes();
    return th_finish();
}
