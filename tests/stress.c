/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * stress: the randomized stress test. From a seed, every rank derives the
 * same schedule of rounds; each round mixes every front end with many
 * operations outstanding at once:
 *  - messages (ovl_isend/ovl_irecv, 0 B .. 1 MiB, receive buffers sometimes
 *    larger than the message, tags shared by consecutive messages between
 *    one pair, which must then match in order), with continuations on
 *    either side; a receive's continuation verifies the data and may post
 *    the next message of a chain (up to 3 deep), itself completed by a
 *    continuation and freed at once or waited for; plain MPI requests
 *    adopted with ovl_continue_mpi;
 *  - marshal streams written and read with independent granularities
 *    (typed values and raw blocks), receivers that return early or read
 *    past the end (OVL_ERR_EOF);
 *  - delta sends whose buffer is written while it is sent (in order, with
 *    or without ovl_delta_produced; in shuffled strips under the explicit
 *    monitor; ended early with a count in ovl_delta_send_end's param), received by
 *    ovl_delta_recv (buffer read before completion: directly under a fault
 *    monitor, after ovl_delta_need under the explicit one) or ovl_irecv,
 *    some forwarded to a third rank while still arriving; per-request
 *    explicit monitors (per request) under a fault-monitored process;
 *  - one-sided get/put on a segment, under fence (ovl_fence) and under
 *    ovl_lock/ovl_unlock, ovl_get with a request, order and decomposition hints, get
 *    destinations read before completion, put sources rewritten at once.
 * A round may run part of its work on a second application thread.
 * Every byte received is checked against f(seed, round, op, offset)
 * (th_fill's pattern), receive buffers' bytes past the message and the
 * sentinel bytes around every buffer are checked after every round, and
 * every segment is checked whole (gaps included) after every round.
 *
 * --mpi runs the same schedule with plain MPI (MPI_Isend/MPI_Irecv, an
 * MPI window with lock_all/lock, a delta send becomes a plain send after
 * the computation): a seed that fails under ovl but passes with --mpi is
 * ovl's bug (scripts/stress classifies failures so).
 *
 * A watchdog thread aborts the job when no operation has completed for
 * --watchdog seconds, after each rank has printed what it still waits for.
 * See tests/README.md ("The stress test") for the options and replays.
 */
#include "harness.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern char **environ;

#if defined(__SANITIZE_THREAD__)
#define STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRESS_TSAN 1
#endif
#endif
#ifndef STRESS_TSAN
#define STRESS_TSAN 0
#endif

#define MAX_RANKS 64
#define SEG_BYTES ((size_t)4 << 20)
#define MAX_MSG   ((size_t)1 << 20)
#define MAX_STRM  ((size_t)256 << 10)
#define MAX_RMA   ((size_t)1 << 20)
#define ROUND_MAX ((size_t)12 << 20) /* bytes moved by one round, at most */
#define MAX_OPS   400
#define MAX_WRONG 20 /* mismatch reports printed per rank */

/* ---- options ----------------------------------------------------------- */

static struct {
    uint64_t seed;
    long rounds, start;
    double seconds, watchdog;
    int mpi, threads, verbose;
    const char *monitor;
} opt = { .rounds = -1, .watchdog = 60, .threads = 1 };

static const char *argv0 = "./stress";
static int me, nranks;
static int proc_explicit; /* ovl mode, the process's monitor is explicit */
static size_t page;
static MPI_Comm pcomm = MPI_COMM_NULL; /* --mpi: messages; else adopted requests */
static ovl_segment_t seg = OVL_SEGMENT_NULL;
static MPI_Win win = MPI_WIN_NULL;
static unsigned char *segbase;

static atomic_ullong n_bytes, n_sides, n_wrong;
static atomic_llong last_event_ms;
static atomic_long cur_round = -1;

static long long now_ms(void)
{
    return (long long)(th_now() * 1000.0);
}

static void touch(void)
{
    atomic_store_explicit(&last_event_ms, now_ms(), memory_order_relaxed);
}

static void print_replay(const char *what, long start, long rounds)
{
    char envs[2048] = "";
    size_t used = 0;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "OVL_", 4) != 0 || strncmp(*e, "OVL_TEST_SEED=", 14) == 0)
            continue;
        int n = snprintf(envs + used, sizeof envs - used, "%s ", *e);
        if (n < 0 || (size_t)n >= sizeof envs - used)
            break;
        used += (size_t)n;
    }
    const char *mpiexec = getenv("MPIEXEC");
    char extra[256] = "";
    if (start > 0)
        snprintf(extra, sizeof extra, " --start %ld", start);
    if (opt.monitor) {
        size_t l = strlen(extra);
        snprintf(extra + l, sizeof extra - l, " --monitor %s", opt.monitor);
    }
    if (!opt.threads) {
        size_t l = strlen(extra);
        snprintf(extra + l, sizeof extra - l, " --threads off");
    }
    printf("%s: %s%s -n %d %s --seed %" PRIu64 "%s --rounds %ld --watchdog %g%s\n", what, envs,
           mpiexec && *mpiexec ? mpiexec : "mpiexec", nranks, argv0, opt.seed, extra, rounds,
           opt.watchdog, opt.mpi ? " --mpi" : "");
    fflush(stdout);
}

/* ---- the schedule -------------------------------------------------------- */

enum { K_MSG, K_STREAM, K_DELTA, K_GET, K_PUT };
static const char *const kind_name[] = { "msg", "stream", "delta", "get", "put" };

enum {
    F_SCONT = 1u << 0,     /* continuation on the send */
    F_RCONT = 1u << 1,     /* continuation on the receive (verifies, may chain) */
    F_ADOPT = 1u << 2,     /* plain MPI requests given to ovl_continue_mpi */
    F_DRECV = 1u << 3,     /* delta received with ovl_delta_recv (else ovl_irecv) */
    F_SEXPL = 1u << 4,     /* delta send with the explicit monitor (its param) */
    F_REXPL = 1u << 5,     /* delta receive with the explicit monitor (its param) */
    F_SHUFFLE = 1u << 6,   /* explicit delta send produced in shuffled strips */
    F_PRODUCED = 1u << 7,  /* fault-monitored delta send annotated in order too */
    F_LOCKED = 1u << 8,    /* get/put under ovl_lock instead of the fence */
    F_GETNB = 1u << 9,     /* ovl_get with a request */
    F_EARLY = 1u << 10,    /* stream receiver returns before the end */
    F_FDRECV = 1u << 11,   /* forwarded delta received with ovl_delta_recv */
    F_DSENDFWD = 1u << 12, /* early forward with ovl_delta_send_begin, else ovl_isend */
    F_MAPPED = 1u << 13,   /* message buffers in pages of their own (else malloc) */
    F_EOF = 1u << 14       /* stream receiver reads once more, expects OVL_ERR_EOF */
};

enum { ST_WAIT, ST_TEST, ST_ALL, ST_FREE };

typedef struct {
    int idx, kind, src, dst, fwd, tag, lane, parent, depth;
    unsigned flags;
    size_t size; /* bytes sent (delta: the count begun with) */
    size_t real; /* delta: bytes produced and sent (send_end with a count) */
    size_t cap;  /* receive buffer bytes */
    size_t esz;  /* delta element size: 1 (MPI_BYTE) or 8 (MPI_UINT64_T) */
    size_t roff; /* get/put: offset in the target's segment */
    int sstyle, rstyle;
    uint64_t key;
} op_t;

typedef struct {
    long round;
    int nops, threads;
    ovl_order_t order;
    unsigned decomp;
    op_t ops[MAX_OPS];
} sched_t;

static uint64_t key_of(long round, long idx, uint64_t salt)
{
    return th_mix(opt.seed ^ th_mix(((uint64_t)round << 32) ^ ((uint64_t)idx << 8) ^ salt));
}

static int coin(th_rng_t *r, unsigned in)
{
    return th_below(r, in) == 0;
}

static int pick_style(th_rng_t *r, int has_cont, int can_all)
{
    int s = (int)th_below(r, 4);
    if (s == ST_ALL && !can_all)
        s = ST_WAIT;
    if (s == ST_FREE && !has_cont)
        s = ST_TEST;
    return s;
}

static int other_rank(th_rng_t *r, int not )
{
    int v = (int)th_below(r, (uint64_t)nranks - 1);
    return v >= not ? v + 1 : v;
}

static void schedule(sched_t *s, long round)
{
    th_rng_t r = { key_of(round, -1, 0x5c4ed) };
    size_t budget = ROUND_MAX, seg_used[MAX_RANKS] = { 0 };
    memset(s, 0, sizeof *s);
    s->round = round;
    s->threads = opt.threads && coin(&r, 3);
    s->order = (ovl_order_t)th_below(&r, 3);
    static const unsigned decomps[] = { 1, 1, 0, 4 };
    s->decomp = decomps[th_below(&r, 4)];
    int want = 8 + (int)th_below(&r, (uint64_t)(20 * nranks));
    for (int i = 0; i < want && s->nops < MAX_OPS - 1 && budget > 0; i++) {
        op_t *o = &s->ops[s->nops];
        memset(o, 0, sizeof *o);
        o->idx = s->nops;
        o->tag = 1 + 2 * o->idx;
        o->parent = o->fwd = -1;
        o->key = key_of(round, o->idx, 0xda7a);
        o->lane = s->threads ? (int)th_below(&r, 2) : 0;
        o->esz = 1;
        unsigned k = (unsigned)th_below(&r, 20);
        o->kind = k < 8 ? K_MSG : k < 11 ? K_STREAM : k < 16 ? K_DELTA : k < 18 ? K_GET : K_PUT;
        o->src = (int)th_below(&r, (uint64_t)nranks);
        if (nranks < 2 && (o->kind == K_STREAM || o->kind == K_DELTA))
            o->kind = K_MSG;
        switch (o->kind) {
        case K_MSG:
            o->dst = coin(&r, 8) || nranks < 2 ? o->src : other_rank(&r, o->src);
            o->size = th_size_log(&r, MAX_MSG);
            o->cap = o->size + (coin(&r, 3) ? th_below(&r, 200) : 0);
            if (coin(&r, 8))
                o->flags |= F_ADOPT | F_SCONT | F_RCONT;
            else
                o->flags |= (coin(&r, 3) ? F_SCONT : 0) | (coin(&r, 3) ? F_RCONT : 0);
            o->flags |= coin(&r, 4) ? F_MAPPED : 0;
            /* share the tag of the message before it between this pair */
            if (o->idx > 0 && !(o->flags & F_ADOPT) && coin(&r, 3)) {
                const op_t *p = o - 1;
                if (p->kind == K_MSG && p->src == o->src && p->dst == o->dst &&
                    p->lane == o->lane && p->parent < 0 && !(p->flags & F_ADOPT))
                    o->tag = p->tag;
            }
            break;
        case K_STREAM:
            o->dst = other_rank(&r, o->src);
            o->size = o->cap = th_size_log(&r, MAX_STRM);
            o->flags |= (coin(&r, 4) ? F_SCONT : 0) | (coin(&r, 4) ? F_RCONT : 0);
            o->flags |= coin(&r, 6) ? F_EARLY : coin(&r, 4) ? F_EOF : 0;
            break;
        case K_DELTA:
            o->dst = other_rank(&r, o->src);
            o->size = coin(&r, 20) ? 0 : th_size_log(&r, MAX_MSG);
            if (o->size % 8 == 0 && coin(&r, 3))
                o->esz = 8;
            o->real = o->size;
            if (coin(&r, 6))
                o->real = th_below(&r, o->size / o->esz + 1) * o->esz;
            o->cap = o->size + (coin(&r, 4) ? o->esz * th_below(&r, 100) : 0);
            o->flags |= (coin(&r, 3) ? 0 : F_DRECV) | (coin(&r, 5) ? F_SEXPL : 0) |
                        (coin(&r, 5) ? F_REXPL : 0) | (coin(&r, 2) ? F_SHUFFLE : 0) |
                        (coin(&r, 4) ? F_PRODUCED : 0);
            if (o->real == o->size && o->cap == o->size && nranks > 1 && coin(&r, 4)) {
                o->fwd = other_rank(&r, o->dst);
                o->flags |= (coin(&r, 2) ? F_FDRECV : 0) | (coin(&r, 2) ? F_DSENDFWD : 0);
            }
            break;
        default: /* K_GET, K_PUT: src is the origin, dst the target */
            o->dst = (int)th_below(&r, (uint64_t)nranks);
            o->size = 1 + th_size_log(&r, MAX_RMA - 1);
            o->roff = seg_used[o->dst] + th_below(&r, 300);
            if (o->roff + o->size > SEG_BYTES)
                continue; /* the target's segment is full this round */
            seg_used[o->dst] = o->roff + o->size;
            o->lane = 0;
            o->flags |= coin(&r, 3) ? F_LOCKED : 0;
            if (o->kind == K_GET && !(o->flags & F_LOCKED) && coin(&r, 4))
                o->flags |= F_GETNB;
            break;
        }
        int can_all = 1;
        o->sstyle = pick_style(&r, !!(o->flags & F_SCONT), can_all);
        o->rstyle = pick_style(&r, !!(o->flags & F_RCONT), can_all);
        if (o->flags & F_ADOPT)
            o->sstyle = o->rstyle = ST_FREE;
        budget = budget > o->size ? budget - o->size : 0;
        s->nops++;
        /* a chain: the receive's continuation posts the next message */
        op_t *p = o;
        while (p->kind == K_MSG && (p->flags & F_RCONT) && !(p->flags & F_ADOPT) && p->depth < 3 &&
               s->nops < MAX_OPS - 1 && coin(&r, 3)) {
            op_t *c = &s->ops[s->nops];
            memset(c, 0, sizeof *c);
            c->idx = s->nops;
            c->tag = 1 + 2 * c->idx;
            c->fwd = -1;
            c->key = key_of(round, c->idx, 0xda7a);
            c->kind = K_MSG;
            c->parent = p->idx;
            c->depth = p->depth + 1;
            c->lane = p->lane;
            c->esz = 1;
            c->src = p->dst;
            c->dst = (int)th_below(&r, (uint64_t)nranks);
            c->size = th_size_log(&r, MAX_MSG / 4);
            c->cap = c->size;
            c->flags = F_SCONT | (coin(&r, 2) ? F_RCONT : 0) | (coin(&r, 4) ? F_MAPPED : 0);
            c->sstyle = coin(&r, 2) ? ST_FREE : ST_WAIT; /* posted from a continuation */
            c->rstyle = pick_style(&r, !!(c->flags & F_RCONT), 1);
            budget = budget > c->size ? budget - c->size : 0;
            s->nops++;
            p = c;
        }
    }
}

/* ---- buffers with sentinels ------------------------------------------------ */

typedef struct {
    unsigned char *base, *buf;
    size_t len, off, bytes;
    uint64_t skey;
    int mapped;
} region_t;

/* `bytes` at offset `off` into a fresh allocation (mapped: whole pages of
 * its own, off < page; else malloc with 64 sentinel bytes after it); the
 * rest of the allocation holds the sentinel pattern `skey`. */
static void region_alloc(region_t *g, size_t bytes, size_t off, int mapped, uint64_t skey)
{
    g->bytes = bytes;
    g->off = off;
    g->mapped = mapped;
    g->skey = skey;
    if (mapped) {
        g->len = (off + bytes + page - 1) / page * page;
        if (g->len == 0)
            g->len = page;
        void *p = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECKF(p != MAP_FAILED, "mmap %zu bytes", g->len);
        g->base = p;
    } else {
        g->len = off + bytes + 64;
        g->base = malloc(g->len);
        CHECKF(g->base != NULL, "malloc %zu bytes", g->len);
    }
    g->buf = g->base + off;
    th_fill(g->base, off, skey, 0);
    th_fill(g->buf + bytes, g->len - off - bytes, skey, off + bytes);
}

static size_t region_sentinels(const region_t *g)
{
    size_t bad = th_verify(g->base, g->off, g->skey, 0);
    if (bad != TH_OK)
        return bad;
    size_t tail = g->off + g->bytes;
    bad = th_verify(g->buf + g->bytes, g->len - tail, g->skey, tail);
    return bad == TH_OK ? TH_OK : tail + bad;
}

static void region_free(region_t *g)
{
    if (!g->base)
        return;
    if (g->mapped)
        CHECK(munmap(g->base, g->len) == 0);
    else
        free(g->base);
    g->base = g->buf = NULL;
}

/* ---- this rank's part of a round: sides ---------------------------------- */

enum { R_SEND, R_RECV, R_FSEND, R_FRECV, R_RMA };
static const char *const role_name[] = { "send", "recv", "fwd-send", "fwd-recv", "origin" };
enum { S_IDLE, S_POSTED, S_DONE };

typedef struct side {
    const op_t *op;
    int role, peer, tag, style, cont, expl;
    size_t expect; /* bytes to arrive (receives), to leave (sends) */
    size_t cap;
    region_t reg;
    struct side *child; /* posted when this one completes: a chain's next send, a late forward */
    struct side *from;  /* R_FSEND: the receive whose buffer it forwards */
    ovl_request_t req;
    MPI_Request mreq;
    ovl_status_t st;
    int released, early_fwd;
    atomic_int state, cont_ran, verified;
} side_t;

typedef struct {
    sched_t sched;
    side_t *sides;
    int nsides;
} round_t;

/* the round the watchdog reports on */
static pthread_mutex_t wd_lock = PTHREAD_MUTEX_INITIALIZER;
static round_t *wd_round;
static _Atomic(const char *) lane_phase[2] = { "start-up", "idle" };

static void wrongf(const side_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void wrongf(const side_t *s, const char *fmt, ...)
{
    unsigned long long n = atomic_fetch_add(&n_wrong, 1);
    if (n >= MAX_WRONG)
        return;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (s)
        fprintf(stderr,
                "STRESS WRONG rank %d round %ld op %d (%s %s, %d->%d, %zu bytes, tag %d): %s\n", me,
                atomic_load(&cur_round), s->op->idx, kind_name[s->op->kind], role_name[s->role],
                s->op->src, s->op->dst, s->op->size, s->tag, why);
    else
        fprintf(stderr, "STRESS WRONG rank %d round %ld: %s\n", me, atomic_load(&cur_round), why);
    fflush(stderr);
}

/* Check buf[from, to) against pattern `key`; report the first bad byte. */
static int verify_range(const side_t *s, const char *what, const unsigned char *buf, size_t from,
                        size_t to, uint64_t key)
{
    if (to <= from)
        return 1;
    size_t bad = th_verify(buf + from, to - from, key, from);
    if (bad == TH_OK)
        return 1;
    wrongf(s, "%s: byte %zu is %#x, expected %#x", what, from + bad, buf[from + bad],
           th_pattern_byte(key, from + bad));
    return 0;
}

static uint64_t before_key(const op_t *o)
{
    return o->key ^ 0xbef0e;
}

/* A receive (of any kind) completed: check what the status says and, for
 * buffers, every byte (the message, then the bytes past it untouched). */
static void check_recv(side_t *s, int source, int tag, size_t bytes, int err)
{
    if (err != OVL_SUCCESS)
        wrongf(s, "completed with error %s", th_code_name(err));
    if (source != s->peer || tag != s->tag || bytes != s->expect)
        wrongf(s, "status {source %d, tag %d, %zu bytes}, expected {%d, %d, %zu}", source, tag,
               bytes, s->peer, s->tag, s->expect);
    if (s->op->kind == K_STREAM && !opt.mpi)
        return; /* the unmarshal function checked the bytes */
    verify_range(s, "received data", s->reg.buf, 0, s->expect, s->op->key);
    verify_range(s, "past the message", s->reg.buf, s->expect, s->cap, before_key(s->op));
    atomic_fetch_add(&n_bytes, s->expect);
}

/* ---- streams ------------------------------------------------------------- */

#define STREAM_CHUNK 6000

/* The next piece of a stream: a typed value (1, 2, 4, 8 bytes) or a raw
 * block, never past `left`. */
static size_t stream_piece(th_rng_t *r, size_t left, int *typed)
{
    static const size_t widths[] = { 1, 2, 4, 8 };
    unsigned how = (unsigned)th_below(r, 8);
    *typed = how < 4 && widths[how] <= left;
    if (*typed)
        return widths[how];
    size_t n = 1 + th_below(r, left < STREAM_CHUNK ? left : STREAM_CHUNK);
    return n;
}

static int marshal(ovl_stream_t st, void *arg)
{
    side_t *s = arg;
    const op_t *o = s->op;
    th_rng_t r = { o->key ^ 0x3e2d };
    unsigned char tmp[STREAM_CHUNK];
    for (size_t pos = 0; pos < o->size;) {
        int typed, rc;
        size_t n = stream_piece(&r, o->size - pos, &typed);
        th_fill(tmp, n, o->key, pos);
        if (typed && n == 1) {
            rc = ovl_stream_write_uint8(st, tmp[0]);
        } else if (typed && n == 2) {
            uint16_t v;
            memcpy(&v, tmp, n);
            rc = ovl_stream_write_uint16(st, v);
        } else if (typed && n == 4) {
            uint32_t v;
            memcpy(&v, tmp, n);
            rc = ovl_stream_write_uint32(st, v);
        } else if (typed) {
            uint64_t v;
            memcpy(&v, tmp, n);
            rc = ovl_stream_write_uint64(st, v);
        } else {
            rc = ovl_stream_write(st, tmp, n);
        }
        if (rc != OVL_SUCCESS) {
            wrongf(s, "ovl_stream_write at byte %zu: %s", pos, th_code_name(rc));
            return rc;
        }
        pos += n;
    }
    if (ovl_stream_tell(st) != o->size)
        wrongf(s, "ovl_stream_tell %zu after writing %zu", ovl_stream_tell(st), o->size);
    return OVL_SUCCESS;
}

static int unmarshal(ovl_stream_t st, void *arg)
{
    side_t *s = arg;
    const op_t *o = s->op;
    th_rng_t r = { o->key ^ 0x7ead };
    unsigned char tmp[STREAM_CHUNK], want[STREAM_CHUNK];
    size_t end = o->size;
    if (o->flags & F_EARLY)
        end = th_below(&r, o->size + 1);
    for (size_t pos = 0; pos < end;) {
        int typed, rc;
        size_t n = stream_piece(&r, end - pos, &typed);
        if (typed && n == 2) {
            uint16_t v = 0;
            rc = ovl_stream_read_uint16(st, &v);
            memcpy(tmp, &v, n);
        } else if (typed && n == 4) {
            uint32_t v = 0;
            rc = ovl_stream_read_uint32(st, &v);
            memcpy(tmp, &v, n);
        } else if (typed && n == 8) {
            uint64_t v = 0;
            rc = ovl_stream_read_uint64(st, &v);
            memcpy(tmp, &v, n);
        } else {
            rc = ovl_stream_read(st, tmp, n);
        }
        if (rc != OVL_SUCCESS) {
            wrongf(s, "ovl_stream_read of %zu bytes at byte %zu: %s", n, pos, th_code_name(rc));
            return rc;
        }
        th_fill(want, n, o->key, pos);
        if (memcmp(tmp, want, n) != 0) {
            size_t j = 0;
            while (tmp[j] == want[j])
                j++;
            wrongf(s, "stream byte %zu is %#x, expected %#x", pos + j, tmp[j], want[j]);
            return OVL_SUCCESS;
        }
        atomic_fetch_add(&n_bytes, n);
        pos += n;
    }
    if (end == o->size && (o->flags & F_EOF)) {
        unsigned char x;
        int rc = ovl_stream_read(st, &x, 1);
        if (rc != OVL_ERR_EOF)
            wrongf(s, "a read past the end gave %s, expected OVL_ERR_EOF", th_code_name(rc));
    }
    return OVL_SUCCESS;
}

/* ---- continuations --------------------------------------------------------- */

static MPI_Datatype dtype_of(const op_t *o)
{
    return o->esz == 8 ? MPI_UINT64_T : MPI_BYTE;
}

static void post_chained(side_t *c);

static void send_cont(const ovl_status_t *st, void *arg)
{
    side_t *s = arg;
    if (st->error != OVL_SUCCESS)
        wrongf(s, "send completed with %s", th_code_name(st->error));
    atomic_store_explicit(&s->cont_ran, 1, memory_order_release);
    touch();
}

static void recv_cont(const ovl_status_t *st, void *arg)
{
    side_t *s = arg;
    check_recv(s, st->source, st->tag, st->bytes, st->error);
    atomic_store_explicit(&s->verified, 1, memory_order_relaxed);
    if (s->child)
        post_chained(s->child);
    atomic_store_explicit(&s->cont_ran, 1, memory_order_release);
    touch();
}

static void mpi_send_cont(MPI_Status *st, void *arg)
{
    (void)st;
    side_t *s = arg;
    atomic_store_explicit(&s->cont_ran, 1, memory_order_release);
    touch();
}

static void mpi_recv_cont(MPI_Status *st, void *arg)
{
    side_t *s = arg;
    int n = -1;
    MPI_Get_count(st, MPI_BYTE, &n);
    check_recv(s, st->MPI_SOURCE, st->MPI_TAG, (size_t)n, OVL_SUCCESS);
    atomic_store_explicit(&s->verified, 1, memory_order_relaxed);
    atomic_store_explicit(&s->cont_ran, 1, memory_order_release);
    touch();
}

/* What waited for a receive, from its continuation (any thread): the next
 * message of a chain, or the forwarding of a delta receive's buffer. It
 * is completed by its own continuation, and freed at once (fire and
 * forget) or left for the lane to wait on. Posting it here, not from the
 * lane that waits, keeps ranks blocked in ovl_waitall from waiting on
 * each other. */
static void post_chained(side_t *c)
{
    const op_t *o = c->op;
    ovl_request_t q;
    if (c->role == R_FSEND)
        CHECK_OK(
            ovl_isend(c->from->reg.buf, (int)(o->size / o->esz), dtype_of(o), c->peer, c->tag, &q));
    else
        CHECK_OK(ovl_isend(c->reg.buf, (int)c->expect, MPI_BYTE, c->peer, c->tag, &q));
    CHECK_OK(ovl_continue(q, send_cont, c));
    if (c->style == ST_FREE)
        CHECK_OK(ovl_request_free(&q));
    c->req = q;
    atomic_store_explicit(&c->state, S_POSTED, memory_order_release);
}

/* ---- building and posting ---------------------------------------------------- */

static side_t *add_side(round_t *rd, const op_t *o, int role, th_rng_t *r)
{
    side_t *s = &rd->sides[rd->nsides++];
    memset(s, 0, sizeof *s);
    s->op = o;
    s->role = role;
    s->tag = o->tag;
    s->cap = s->expect = o->size;
    uint64_t skey = key_of(rd->sched.round, o->idx, 0x5e00u + (unsigned)role);
    size_t off = th_below(r, 2) ? 0 : th_below(r, page);
    switch (role) {
    case R_SEND:
        s->peer = o->dst;
        s->style = o->sstyle;
        s->cont = !opt.mpi && (o->flags & F_SCONT);
        s->expl = !opt.mpi && (proc_explicit || (o->flags & F_SEXPL));
        if (o->kind == K_DELTA)
            s->expect = o->real;
        break;
    case R_RECV:
        s->peer = o->src;
        s->style = o->rstyle;
        s->cont = !opt.mpi && (o->flags & F_RCONT);
        s->expl = !opt.mpi && (proc_explicit || (o->flags & F_REXPL));
        s->cap = o->cap;
        if (o->kind == K_DELTA)
            s->expect = o->real;
        break;
    case R_FSEND:
        s->peer = o->fwd;
        s->tag = o->tag + 1;
        s->style = ST_WAIT;
        break;
    case R_FRECV:
        s->peer = o->dst;
        s->tag = o->tag + 1;
        s->style = o->rstyle == ST_FREE ? ST_WAIT : o->rstyle;
        s->expl = !opt.mpi && proc_explicit;
        break;
    default:
        s->peer = o->dst;
        s->style = ST_WAIT;
        break;
    }
    if (s->style == ST_FREE && !s->cont)
        s->style = ST_TEST;
    if (role == R_FSEND)
        return s; /* sends the receive's buffer */
    if (o->kind == K_STREAM && !opt.mpi)
        return s; /* no buffer */
    int mapped =
        o->kind == K_DELTA || o->kind == K_GET || o->kind == K_PUT || (o->flags & F_MAPPED);
    region_alloc(&s->reg, s->cap, mapped ? off : th_below(r, 64), mapped, skey);
    return s;
}

static void build(round_t *rd)
{
    sched_t *sc = &rd->sched;
    th_rng_t r = { key_of(sc->round, me, 0xb17d) };
    rd->sides = calloc((size_t)sc->nops * 4 + 1, sizeof *rd->sides);
    CHECK(rd->sides != NULL);
    rd->nsides = 0;
    side_t **recv_of = calloc((size_t)sc->nops + 1, sizeof *recv_of);
    CHECK(recv_of != NULL);
    for (int i = 0; i < sc->nops; i++) {
        const op_t *o = &sc->ops[i];
        if (o->kind == K_GET || o->kind == K_PUT) {
            if (o->src == me)
                add_side(rd, o, R_RMA, &r);
            continue;
        }
        side_t *snd = NULL, *rcv = NULL;
        if (o->src == me)
            snd = add_side(rd, o, R_SEND, &r);
        if (o->dst == me)
            rcv = recv_of[i] = add_side(rd, o, R_RECV, &r);
        if (o->parent >= 0 && snd) {
            side_t *p = recv_of[o->parent];
            CHECK(p != NULL && p->op->dst == me);
            p->child = snd;
            /* before the receive that posts it can complete */
            th_fill(snd->reg.buf, snd->expect, o->key, 0);
        }
        if (o->fwd >= 0 && rcv) {
            side_t *f = add_side(rd, o, R_FSEND, &r);
            f->from = rcv;
            /* early: forwarded while it arrives (a fault-monitored delta
             * receive); else when the receive has completed */
            f->early_fwd = !opt.mpi && (o->flags & F_DRECV) && !rcv->expl;
            if (!f->early_fwd) {
                rcv->child = f;
                if (!opt.mpi) { /* the receive's continuation forwards it */
                    rcv->cont = f->cont = 1;
                    f->style = coin(&r, 2) ? ST_FREE : ST_WAIT;
                }
            }
        }
        if (o->fwd == me)
            add_side(rd, o, R_FRECV, &r);
    }
    free(recv_of);
}

static void post_ovl(side_t *s)
{
    const op_t *o = s->op;
    unsigned char *b = s->reg.buf;
    ovl_request_t *q = &s->req;
    switch (o->kind * 8 + s->role) {
    case K_MSG * 8 + R_SEND:
        if (o->parent >= 0)
            return; /* filled at build, posted by the receive before it in the chain */
        th_fill(b, s->expect, o->key, 0);
        if (o->flags & F_ADOPT) {
            CHECK_MPI(MPI_Isend(b, (int)s->expect, MPI_BYTE, s->peer, s->tag, pcomm, &s->mreq));
            CHECK_OK(ovl_continue_mpi(&s->mreq, mpi_send_cont, s));
            s->released = 1;
            break;
        }
        CHECK_OK(ovl_isend(b, (int)s->expect, MPI_BYTE, s->peer, s->tag, q));
        break;
    case K_MSG * 8 + R_RECV:
        th_fill(b, s->cap, before_key(o), 0);
        if (o->flags & F_ADOPT) {
            CHECK_MPI(MPI_Irecv(b, (int)s->cap, MPI_BYTE, s->peer, s->tag, pcomm, &s->mreq));
            CHECK_OK(ovl_continue_mpi(&s->mreq, mpi_recv_cont, s));
            s->released = 1;
            break;
        }
        CHECK_OK(ovl_irecv(b, (int)s->cap, MPI_BYTE, s->peer, s->tag, q));
        break;
    case K_STREAM * 8 + R_SEND:
        CHECK_OK(ovl_isend_stream(s->peer, s->tag, marshal, s, q));
        break;
    case K_STREAM * 8 + R_RECV:
        CHECK_OK(ovl_irecv_stream(s->peer, s->tag, unmarshal, s, q));
        break;
    case K_DELTA * 8 + R_SEND:
        th_fill(b, s->cap, before_key(o), 0);
        CHECK_OK(ovl_delta_send_begin(b, (int)(o->size / o->esz), dtype_of(o), s->peer, s->tag,
                                      TH_MONITOR(s->expl ? OVL_MONITOR_EXPLICIT : OVL_MONITOR_AUTO),
                                      q));
        break;
    case K_DELTA * 8 + R_RECV:
    case K_DELTA * 8 + R_FRECV: {
        th_fill(b, s->cap, before_key(o), 0);
        int count = (int)(s->cap / o->esz);
        unsigned f = s->role == R_RECV ? F_DRECV : F_FDRECV;
        if (o->flags & f)
            CHECK_OK(ovl_delta_recv(b, count, dtype_of(o), s->peer, s->tag,
                                    TH_MONITOR(s->expl ? OVL_MONITOR_EXPLICIT : OVL_MONITOR_AUTO),
                                    q));
        else
            CHECK_OK(ovl_irecv(b, count, dtype_of(o), s->peer, s->tag, q));
        break;
    }
    case K_DELTA * 8 + R_FSEND: {
        if (!s->early_fwd)
            return;
        unsigned char *fb = s->from->reg.buf;
        int count = (int)(o->size / o->esz);
        if (o->flags & F_DSENDFWD) {
            CHECK_OK(ovl_delta_send_begin(fb, count, dtype_of(o), s->peer, s->tag, NULL, q));
            CHECK_OK(ovl_delta_send_end(*q, NULL));
        } else {
            CHECK_OK(ovl_isend(fb, count, dtype_of(o), s->peer, s->tag, q));
        }
        break;
    }
    default:
        return;
    }
    if (s->cont && *q != OVL_REQUEST_NULL) {
        CHECK_OK(ovl_continue(*q, s->role == R_SEND ? send_cont : recv_cont, s));
        if (s->style == ST_FREE)
            CHECK_OK(ovl_request_free(q));
    }
    atomic_store_explicit(&s->state, S_POSTED, memory_order_release);
}

static void post_mpi(side_t *s)
{
    const op_t *o = s->op;
    unsigned char *b = s->reg.buf;
    switch (o->kind * 8 + s->role) {
    case K_MSG * 8 + R_SEND:
    case K_STREAM * 8 + R_SEND:
        if (o->parent >= 0)
            return;
        th_fill(b, s->expect, o->key, 0);
        CHECK_MPI(MPI_Isend(b, (int)s->expect, MPI_BYTE, s->peer, s->tag, pcomm, &s->mreq));
        break;
    case K_MSG * 8 + R_RECV:
    case K_STREAM * 8 + R_RECV:
    case K_DELTA * 8 + R_RECV:
    case K_DELTA * 8 + R_FRECV:
        th_fill(b, s->cap, before_key(o), 0);
        CHECK_MPI(
            MPI_Irecv(b, (int)(s->cap / o->esz), dtype_of(o), s->peer, s->tag, pcomm, &s->mreq));
        break;
    default:
        return; /* delta sends go after the computation, forwards after the receive */
    }
    atomic_store_explicit(&s->state, S_POSTED, memory_order_release);
}

/* ---- computing and using ----------------------------------------------------- */

static void shuffle(size_t *a, size_t n, th_rng_t *r)
{
    for (size_t i = 0; i + 1 < n; i++) {
        size_t j = i + th_below(r, n - i), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Write a delta send's buffer as a computation would, then end it. */
static void produce(side_t *s, th_rng_t *r)
{
    const op_t *o = s->op;
    unsigned char *b = s->reg.buf;
    size_t real = o->real;
    if (opt.mpi) {
        th_fill(b, real, o->key, 0);
        CHECK_MPI(
            MPI_Isend(b, (int)(real / o->esz), dtype_of(o), s->peer, s->tag, pcomm, &s->mreq));
        atomic_store_explicit(&s->state, S_POSTED, memory_order_release);
        return;
    }
    if (s->expl && (o->flags & F_SHUFFLE)) {
        size_t strip = page + 123, n = (real + strip - 1) / strip;
        size_t *order = malloc((n ? n : 1) * sizeof *order);
        CHECK(order != NULL);
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        shuffle(order, n, r);
        for (size_t k = 0; k < n; k++) {
            size_t off = order[k] * strip, len = real - off < strip ? real - off : strip;
            th_fill(b + off, len, o->key, off);
            CHECK_OK(ovl_delta_produced(s->req, off, len));
        }
        free(order);
    } else {
        int annotate = s->expl || (o->flags & F_PRODUCED);
        for (size_t off = 0; off < real;) {
            size_t len = 1 + th_below(r, 3 * page);
            if (len > real - off)
                len = real - off;
            th_fill(b + off, len, o->key, off);
            if (annotate)
                CHECK_OK(ovl_delta_produced(s->req, off, len));
            off += len;
        }
    }
    if (real == o->size && coin(r, 2))
        CHECK_OK(ovl_delta_send_end(s->req, NULL));
    else
        CHECK_OK(ovl_delta_send_end(s->req, TH_COUNT((int)(real / o->esz))));
    touch();
}

/* Read buf[0, n) page by page (slices that never cross a page), in the
 * given order, checking each against `key`: a pending delta receive or
 * get waits for each page as it is touched (fault monitors), or is asked
 * for first (need: 1 ovl_delta_need on req, 2 ovl_get_need). */
static void read_early(side_t *s, const unsigned char *buf, size_t n, uint64_t key, int order,
                       int need, th_rng_t *r)
{
    if (n == 0)
        return;
    uintptr_t a0 = (uintptr_t)buf;
    size_t first = page - a0 % page; /* bytes on the first page */
    size_t ns = n <= first ? 1 : 1 + (n - first + page - 1) / page;
    size_t *idx = malloc(ns * sizeof *idx);
    CHECK(idx != NULL);
    for (size_t i = 0; i < ns; i++)
        idx[i] = order == OVL_ORDER_DOWN ? ns - 1 - i : i;
    if (order == OVL_ORDER_RANDOM)
        shuffle(idx, ns, r);
    for (size_t k = 0; k < ns; k++) {
        size_t off = idx[k] == 0 ? 0 : first + (idx[k] - 1) * page;
        size_t end = idx[k] == 0 ? first : off + page;
        if (end > n)
            end = n;
        if (need == 1)
            CHECK_OK(ovl_delta_need(s->req, off, end - off));
        else if (need == 2)
            CHECK_OK(ovl_get_need(buf + off, end - off));
        (void)*(volatile const unsigned char *)(buf + off); /* touch the page first */
        verify_range(s, "read before completion", buf, off, end, key);
    }
    free(idx);
    touch();
}

/* Use the delta receives of a lane before they complete. */
static void consume(side_t *s, th_rng_t *r)
{
    const op_t *o = s->op;
    if (opt.mpi || o->kind != K_DELTA || (s->role != R_RECV && s->role != R_FRECV))
        return;
    if (!(o->flags & (s->role == R_RECV ? F_DRECV : F_FDRECV)))
        return; /* ovl_irecv: nothing may be read before it completes */
    read_early(s, s->reg.buf, s->expect, o->key, OVL_ORDER_RANDOM, s->expl ? 1 : 0, r);
}

/* ---- completing ---------------------------------------------------------------- */

/* --mpi: forward a delta receive's buffer once it has arrived. */
static void post_late_forward(side_t *f)
{
    const op_t *o = f->op;
    CHECK_MPI(MPI_Isend(f->from->reg.buf, (int)(o->size / o->esz), dtype_of(o), f->peer, f->tag,
                        pcomm, &f->mreq));
    atomic_store_explicit(&f->state, S_POSTED, memory_order_release);
}

/* A side whose request is released (and continuation run): check it, post
 * what waited for it, count it. */
static void finish(side_t *s)
{
    int recv = s->role == R_RECV || s->role == R_FRECV;
    if (recv && !atomic_load_explicit(&s->verified, memory_order_relaxed))
        check_recv(s, s->st.source, s->st.tag, s->st.bytes, s->st.error);
    else if (!recv && s->st.error != OVL_SUCCESS)
        wrongf(s, "completed with %s", th_code_name(s->st.error));
    side_t *c = s->child;
    if (c && opt.mpi && c->role == R_FSEND) {
        post_late_forward(c);
    } else if (c && opt.mpi) {
        CHECK_MPI(
            MPI_Isend(c->reg.buf, (int)c->expect, MPI_BYTE, c->peer, c->tag, pcomm, &c->mreq));
        atomic_store_explicit(&c->state, S_POSTED, memory_order_release);
    }
    atomic_store_explicit(&s->state, S_DONE, memory_order_release);
    atomic_fetch_add(&n_sides, 1);
    touch();
}

static void mpi_status(side_t *s, MPI_Status *ms)
{
    int n = 0;
    MPI_Get_count(ms, MPI_BYTE, &n);
    s->st.source = ms->MPI_SOURCE;
    s->st.tag = ms->MPI_TAG;
    s->st.bytes = (size_t)n;
    s->st.error = OVL_SUCCESS;
}

static int in_lane(const side_t *s, int lane)
{
    return s->role != R_RMA && s->op->lane == lane;
}

/* Complete every side of a lane: those collected for one ovl_waitall
 * first, then by each side's style, until all are done. */
static void complete(round_t *rd, int lane)
{
    if (!opt.mpi) {
        ovl_request_t q[MAX_OPS * 4];
        ovl_status_t st[MAX_OPS * 4];
        side_t *who[MAX_OPS * 4];
        int n = 0;
        for (int i = 0; i < rd->nsides; i++) {
            side_t *s = &rd->sides[i];
            if (in_lane(s, lane) && s->style == ST_ALL && s->req != OVL_REQUEST_NULL &&
                atomic_load_explicit(&s->state, memory_order_acquire) == S_POSTED) {
                who[n] = s;
                q[n++] = s->req;
            }
        }
        if (n) {
            CHECK_OK(ovl_waitall(n, q, st));
            for (int k = 0; k < n; k++) {
                who[k]->req = q[k];
                who[k]->st = st[k];
                who[k]->released = 1;
            }
            touch();
        }
    }
    for (;;) {
        int pending = 0, moved = 0;
        for (int i = 0; i < rd->nsides; i++) {
            side_t *s = &rd->sides[i];
            if (!in_lane(s, lane))
                continue;
            int state = atomic_load_explicit(&s->state, memory_order_acquire);
            if (state == S_DONE)
                continue;
            pending++;
            if (state == S_IDLE)
                continue; /* a chain's send or a forward not posted yet */
            if (opt.mpi) {
                int flag = 0;
                MPI_Status ms;
                CHECK_MPI(MPI_Test(&s->mreq, &flag, &ms));
                if (!flag)
                    continue;
                mpi_status(s, &ms);
                s->released = 1;
            } else if (!s->released) {
                if (s->req == OVL_REQUEST_NULL) {
                    s->released = 1; /* freed at once: the continuation completes it */
                } else if (s->style == ST_TEST || s->style == ST_FREE) {
                    int flag = 0;
                    CHECK_OK(ovl_test(&s->req, &flag, &s->st));
                    s->released = flag;
                } else {
                    CHECK_OK(ovl_wait(&s->req, &s->st));
                    s->released = 1;
                }
                if (!s->released)
                    continue;
            }
            if (s->cont && !atomic_load_explicit(&s->cont_ran, memory_order_acquire))
                continue;
            finish(s);
            pending--;
            moved = 1;
        }
        if (!pending)
            break;
        if (!moved) {
            if (opt.mpi) {
                int flag;
                MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, pcomm, &flag, MPI_STATUS_IGNORE);
            } else {
                CHECK_OK(ovl_progress());
            }
            sched_yield();
        }
    }
}

/* ---- one-sided ------------------------------------------------------------------ */

static void seg_prepare(const sched_t *sc)
{
    if (opt.mpi)
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me, 0, win));
    th_fill(segbase, SEG_BYTES, key_of(sc->round, me, 0x6a9), 0);
    for (int i = 0; i < sc->nops; i++) {
        const op_t *o = &sc->ops[i];
        if (o->kind == K_GET && o->dst == me)
            th_fill(segbase + o->roff, o->size, o->key, 0);
    }
    if (opt.mpi)
        CHECK_MPI(MPI_Win_unlock(me, win));
}

/* After the closing barrier: gaps hold the gap pattern, get sources their
 * data, put targets what was put. */
static void seg_verify(const sched_t *sc)
{
    static const op_t gap = { .kind = K_PUT, .idx = -1 };
    side_t g = { .op = &gap, .role = R_RMA, .peer = me };
    uint64_t gkey = key_of(sc->round, me, 0x6a9);
    size_t at = 0;
    if (opt.mpi)
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me, 0, win));
    for (int i = 0; i < sc->nops; i++) {
        const op_t *o = &sc->ops[i];
        if ((o->kind != K_GET && o->kind != K_PUT) || o->dst != me)
            continue;
        side_t s = { .op = o, .role = R_RMA, .peer = o->dst, .tag = o->tag };
        verify_range(&g, "segment gap", segbase, at, o->roff, gkey);
        if (verify_range(&s, "segment (target side)", segbase + o->roff, 0, o->size, o->key) &&
            o->kind == K_PUT)
            atomic_fetch_add(&n_bytes, o->size);
        at = o->roff + o->size;
    }
    verify_range(&g, "segment gap", segbase, at, SEG_BYTES, gkey);
    if (opt.mpi)
        CHECK_MPI(MPI_Win_unlock(me, win));
}

static uint64_t over_key(const op_t *o)
{
    return o->key ^ 0x0e7e;
}

static void rma_issue(side_t *s)
{
    const op_t *o = s->op;
    unsigned char *b = s->reg.buf;
    if (o->kind == K_GET) {
        th_fill(b, o->size, before_key(o), 0);
        if (opt.mpi)
            CHECK_MPI(MPI_Get(b, (int)o->size, MPI_BYTE, o->dst, (MPI_Aint)o->roff, (int)o->size,
                              MPI_BYTE, win));
        else if (o->flags & F_GETNB)
            CHECK_OK(ovl_get(b, o->dst, o->roff, o->size, seg, NULL, &s->req));
        else
            CHECK_OK(ovl_get(b, o->dst, o->roff, o->size, seg, NULL, NULL));
    } else {
        th_fill(b, o->size, o->key, 0);
        if (opt.mpi) {
            CHECK_MPI(MPI_Put(b, (int)o->size, MPI_BYTE, o->dst, (MPI_Aint)o->roff, (int)o->size,
                              MPI_BYTE, win));
        } else {
            CHECK_OK(ovl_put(b, o->dst, o->roff, o->size, seg, NULL));
            /* the source may be rewritten at once (a fault monitor makes
             * the write wait for the strip to leave). Not under TSan: it
             * records the write before the store faults and waits, so the
             * read by UCX in the progress thread looks unordered (and its
             * stack is lost, so tsan.supp's race:libucp.so cannot match) */
            if (!STRESS_TSAN)
                th_fill(b, o->size, over_key(o), 0);
        }
    }
    atomic_store_explicit(&s->state, S_POSTED, memory_order_release);
}

static void rma_phase(round_t *rd, th_rng_t *r)
{
    sched_t *sc = &rd->sched;
    ovl_order_t order = sc->order;
    int need = proc_explicit ? 2 : 0;
    if (!opt.mpi) {
        CHECK_OK(ovl_segment_hint(seg, TH_ORDER(order)));
        CHECK_OK(ovl_segment_hint(seg, TH_DECOMP(sc->decomp)));
    } else {
        CHECK_MPI(MPI_Win_lock_all(0, win));
    }
    /* under the fence */
    for (int i = 0; i < rd->nsides; i++)
        if (rd->sides[i].role == R_RMA && !(rd->sides[i].op->flags & F_LOCKED))
            rma_issue(&rd->sides[i]);
    if (opt.mpi)
        CHECK_MPI(MPI_Win_unlock_all(win));
    /* under each target's lock, one target after the other */
    for (int t = 0; t < nranks; t++) {
        int any = 0;
        for (int i = 0; i < rd->nsides; i++) {
            side_t *s = &rd->sides[i];
            if (s->role != R_RMA || !(s->op->flags & F_LOCKED) || s->op->dst != t)
                continue;
            if (!any) {
                if (opt.mpi)
                    CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win));
                else
                    CHECK_OK(ovl_lock(seg, t));
                any = 1;
            }
            rma_issue(s);
        }
        if (!any)
            continue;
        for (int i = 0; i < rd->nsides && !opt.mpi; i++) {
            side_t *s = &rd->sides[i];
            if (s->role == R_RMA && (s->op->flags & F_LOCKED) && s->op->dst == t &&
                s->op->kind == K_GET)
                read_early(s, s->reg.buf, s->op->size, s->op->key, order, need, r);
        }
        if (opt.mpi)
            CHECK_MPI(MPI_Win_unlock(t, win));
        else
            CHECK_OK(ovl_unlock(seg, t));
        touch();
    }
    /* the fence's gets, used before the fence */
    for (int i = 0; i < rd->nsides && !opt.mpi; i++) {
        side_t *s = &rd->sides[i];
        if (s->role == R_RMA && !(s->op->flags & F_LOCKED) && s->op->kind == K_GET)
            read_early(s, s->reg.buf, s->op->size, s->op->key, order, need, r);
    }
    if (!opt.mpi)
        CHECK_OK(ovl_fence(seg));
    for (int i = 0; i < rd->nsides; i++) {
        side_t *s = &rd->sides[i];
        if (s->role != R_RMA)
            continue;
        const op_t *o = s->op;
        if (s->req != OVL_REQUEST_NULL) {
            CHECK_OK(ovl_wait(&s->req, &s->st));
            if (s->st.error != OVL_SUCCESS)
                wrongf(s, "ovl_get's request completed with %s", th_code_name(s->st.error));
        }
        if (o->kind == K_GET) {
            if (verify_range(s, "got data", s->reg.buf, 0, o->size, o->key))
                atomic_fetch_add(&n_bytes, o->size);
        } else {
            if (opt.mpi || STRESS_TSAN) /* rewritten after the epoch */
                th_fill(s->reg.buf, o->size, over_key(o), 0);
            verify_range(s, "put source after rewriting", s->reg.buf, 0, o->size, over_key(o));
        }
        atomic_store_explicit(&s->state, S_DONE, memory_order_release);
        atomic_fetch_add(&n_sides, 1);
    }
    touch();
}

/* ---- lanes and rounds -------------------------------------------------------------- */

typedef struct {
    round_t *rd;
    int lane;
} lane_arg_t;

static void run_lane_post(round_t *rd, int lane)
{
    atomic_store(&lane_phase[lane], "posting");
    for (int i = 0; i < rd->nsides; i++)
        if (in_lane(&rd->sides[i], lane))
            (opt.mpi ? post_mpi : post_ovl)(&rd->sides[i]);
}

static void run_lane_rest(round_t *rd, int lane)
{
    th_rng_t r = { key_of(rd->sched.round, me * 2 + lane, 0x1a4e) };
    atomic_store(&lane_phase[lane], "computing delta sends");
    for (int i = 0; i < rd->nsides; i++) {
        side_t *s = &rd->sides[i];
        if (in_lane(s, lane) && s->op->kind == K_DELTA && s->role == R_SEND)
            produce(s, &r);
    }
    atomic_store(&lane_phase[lane], "using delta receives before completion");
    for (int i = 0; i < rd->nsides; i++)
        if (in_lane(&rd->sides[i], lane))
            consume(&rd->sides[i], &r);
    atomic_store(&lane_phase[lane], "completing");
    complete(rd, lane);
    atomic_store(&lane_phase[lane], "done");
}

static void *lane_main(void *arg)
{
    lane_arg_t *a = arg;
    run_lane_post(a->rd, a->lane);
    run_lane_rest(a->rd, a->lane);
    return NULL;
}

static void barrier(const char *why)
{
    atomic_store(&lane_phase[0], why);
    if (opt.mpi)
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    else
        CHECK_OK(ovl_barrier());
    touch();
}

static void run_round(long round, round_t *rd)
{
    atomic_store(&cur_round, round);
    schedule(&rd->sched, round);
    build(rd);
    pthread_mutex_lock(&wd_lock);
    wd_round = rd;
    pthread_mutex_unlock(&wd_lock);
    touch();
    th_rng_t r = { key_of(round, me, 0x3a1) };
    atomic_store(&lane_phase[0], "preparing the segment");
    seg_prepare(&rd->sched);
    pthread_t helper;
    lane_arg_t la = { rd, 1 };
    if (rd->sched.threads)
        CHECK(pthread_create(&helper, NULL, lane_main, &la) == 0);
    run_lane_post(rd, 0);
    barrier("barrier before get/put");
    atomic_store(&lane_phase[0], "get/put");
    rma_phase(rd, &r);
    run_lane_rest(rd, 0);
    if (rd->sched.threads)
        CHECK(pthread_join(helper, NULL) == 0);
    atomic_store(&lane_phase[1], "idle");
    barrier("barrier after the round");
    atomic_store(&lane_phase[0], "checking");
    seg_verify(&rd->sched);
    for (int i = 0; i < rd->nsides; i++) {
        side_t *s = &rd->sides[i];
        if (!s->reg.base)
            continue;
        size_t bad = region_sentinels(&s->reg);
        if (bad != TH_OK)
            wrongf(s, "sentinel byte %zu of the allocation (buffer at %zu, %zu bytes) changed", bad,
                   s->reg.off, s->reg.bytes);
        if (s->op->kind == K_DELTA && s->role == R_SEND)
            verify_range(s, "delta send buffer after completion", s->reg.buf, 0, s->op->real,
                         s->op->key);
    }
    pthread_mutex_lock(&wd_lock);
    wd_round = NULL;
    pthread_mutex_unlock(&wd_lock);
    for (int i = 0; i < rd->nsides; i++)
        region_free(&rd->sides[i].reg);
    free(rd->sides);
    rd->sides = NULL;
}

/* ---- the watchdog ------------------------------------------------------------------- */

static atomic_int wd_stop;

static void *watchdog_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&wd_stop)) {
        th_sleep_ms(200);
        long long idle = now_ms() - atomic_load(&last_event_ms);
        if (idle < (long long)(opt.watchdog * 1000))
            continue;
        pthread_mutex_lock(&wd_lock);
        fprintf(stderr,
                "STRESS FAIL (hang): rank %d: nothing completed for %.0f s in round %ld; lane 0: "
                "%s, lane 1: %s; pending:\n",
                me, idle / 1e3, atomic_load(&cur_round), atomic_load(&lane_phase[0]),
                atomic_load(&lane_phase[1]));
        int shown = 0;
        for (int i = 0; wd_round && i < wd_round->nsides; i++) {
            side_t *s = &wd_round->sides[i];
            int st = atomic_load(&s->state);
            if (st == S_DONE || shown++ >= 40)
                continue;
            fprintf(stderr,
                    "  rank %d round %ld op %d: %s %s, peer %d, %zu bytes, tag %d, lane %d, %s\n",
                    me, wd_round->sched.round, s->op->idx, kind_name[s->op->kind],
                    role_name[s->role], s->peer, s->role == R_RECV ? s->cap : s->expect, s->tag,
                    s->op->lane, st == S_IDLE ? "not posted yet (waits for another)" : "posted");
        }
        pthread_mutex_unlock(&wd_lock);
        fflush(stderr);
        if (me == 0)
            print_replay("replay", opt.start, atomic_load(&cur_round) + 1 - opt.start);
        th_sleep_ms(2000); /* let the other ranks report too */
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    return NULL;
}

/* ---- main ---------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: stress [--seed S] [--rounds N | --seconds T] [--start R] [--mpi]\n"
                    "              [--watchdog W] [--monitor auto|uffd|mprotect|explicit]\n"
                    "              [--threads on|off] [-v]\n");
    exit(2);
}

static void parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--seed") && v)
            opt.seed = strtoull(v, NULL, 0), i++, setenv("OVL_TEST_SEED", v, 1);
        else if (!strcmp(a, "--rounds") && v)
            opt.rounds = atol(v), i++;
        else if (!strcmp(a, "--seconds") && v)
            opt.seconds = atof(v), i++;
        else if (!strcmp(a, "--start") && v)
            opt.start = atol(v), i++;
        else if (!strcmp(a, "--watchdog") && v)
            opt.watchdog = atof(v), i++;
        else if (!strcmp(a, "--monitor") && v)
            opt.monitor = v, i++;
        else if (!strcmp(a, "--threads") && v)
            opt.threads = strcmp(v, "off") != 0, i++;
        else if (!strcmp(a, "--mpi"))
            opt.mpi = 1;
        else if (!strcmp(a, "-v"))
            opt.verbose = 1;
        else
            usage();
    }
    if (opt.rounds < 0 && opt.seconds <= 0)
        opt.rounds = 20;
}

int main(int argc, char **argv)
{
    argv0 = argv[0];
    parse(argc, argv);
    int have_seed = getenv("OVL_TEST_SEED") && *getenv("OVL_TEST_SEED");
    if (have_seed)
        opt.seed = strtoull(getenv("OVL_TEST_SEED"), NULL, 0);
    /* ranks on one node: the paths a peer on another node takes */
    setenv("OVL_RMA_LOCAL", "overlap", 0);
    int provided = th_init_mpi(&argc, &argv, "stress", MPI_THREAD_MULTIPLE);
    me = th_rank;
    nranks = th_size;
    page = (size_t)sysconf(_SC_PAGESIZE);
    CHECKF(nranks <= MAX_RANKS, "at most %d ranks", MAX_RANKS);
    if (provided != MPI_THREAD_MULTIPLE)
        opt.threads = 0;
    if (!have_seed) {
        uint64_t s = th_mix((uint64_t)(th_now() * 1e9)) % 1000000000u;
        MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        opt.seed = s;
    }
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &pcomm));
    const char *mon = "plain MPI";
    if (opt.mpi) {
        CHECK_MPI(MPI_Win_allocate((MPI_Aint)SEG_BYTES, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &segbase,
                                   &win));
    } else {
        ovl_config_t cfg = { .field_mask = 0 };
        if (!getenv("OVL_VERBOSE")) {
            /* the OVL_ERR_EOF a stream receiver asks for is not worth a line */
            cfg.field_mask |= OVL_CONFIG_FIELD_VERBOSE;
            cfg.report.verbose = 0;
        }
        if (opt.monitor) {
            static const char *const names[] = { "auto", "uffd", "mprotect", "explicit" };
            int m = -1;
            for (int i = 0; i < 4; i++)
                if (!strcmp(opt.monitor, names[i]))
                    m = i;
            CHECKF(m >= 0, "--monitor %s: expected auto, uffd, mprotect or explicit", opt.monitor);
            cfg.field_mask |= OVL_CONFIG_FIELD_MONITOR;
            cfg.access.monitor = (ovl_monitor_t)m;
        }
        CHECK_OK(ovl_init(MPI_COMM_WORLD, th_config(&cfg)));
        ovl_config_t c;
        CHECK_OK(ovl_config_get(&c));
        proc_explicit = c.access.monitor == OVL_MONITOR_EXPLICIT;
        mon = ovl_monitor_name(c.access.monitor);
        void *base = NULL;
        CHECK_OK(ovl_segment_create(SEG_BYTES, &base, &seg));
        segbase = base;
    }
    if (me == 0) {
        printf("stress: seed %" PRIu64 ", %d ranks, %s, monitor %s, OVL_PROGRESS=%s, threads %s\n",
               opt.seed, nranks, opt.mpi ? "--mpi" : "ovl", mon,
               getenv("OVL_PROGRESS") ? getenv("OVL_PROGRESS") : "(default)",
               opt.threads ? "on" : "off");
        if (opt.rounds >= 0)
            print_replay("replay", opt.start, opt.rounds);
        else
            printf("replay: (rounds decided by --seconds %g; the count is printed at the end)\n",
                   opt.seconds);
        fflush(stdout);
    }
    touch();
    pthread_t wd;
    CHECK(pthread_create(&wd, NULL, watchdog_main, NULL) == 0);

    double t0 = th_now();
    long done = 0;
    unsigned long long ops = 0, wrong_total = 0;
    round_t *rd = calloc(1, sizeof *rd);
    CHECK(rd != NULL);
    for (long round = opt.start;; round++) {
        if (opt.rounds >= 0 && round >= opt.start + opt.rounds)
            break;
        if (opt.verbose && me == 0) {
            printf("stress: round %ld\n", round);
            fflush(stdout);
        }
        unsigned long long before = atomic_load(&n_wrong);
        run_round(round, rd);
        done++;
        ops += (unsigned long long)rd->sched.nops;
        /* agree on the outcome, and (rank 0's clock) on going on */
        long long v[2] = { (long long)(atomic_load(&n_wrong) - before), 0 }, w[2];
        if (me == 0 && opt.rounds < 0 && th_now() - t0 >= opt.seconds)
            v[1] = 1;
        CHECK_MPI(MPI_Allreduce(v, w, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
        if (w[0] > 0) {
            wrong_total = 1;
            if (me == 0) {
                printf("STRESS FAIL: round %ld: wrong data (STRESS WRONG lines on stderr)\n",
                       round);
                printf("stress: failed in round %ld\n", round);
                print_replay("replay", opt.start, round + 1 - opt.start);
                print_replay("replay (that round only)", round, 1);
            }
            break;
        }
        if (w[1])
            break;
    }
    free(rd);
    double secs = th_now() - t0;

    unsigned long long mine[3] = { atomic_load(&n_sides), atomic_load(&n_bytes),
                                   atomic_load(&n_wrong) },
                       sum[3];
    char extra[256] = "";
    if (!opt.mpi) {
        ovl_stats_t st;
        CHECK_OK(ovl_stats_get(&st, sizeof st));
        snprintf(extra, sizeof extra,
                 "; faults %" PRIu64 ", deltas %" PRIu64 "/%" PRIu64 ", rma strips %" PRIu64
                 ", callbacks %" PRIu64,
                 st.faults, st.deltas_sent, st.deltas_received, st.rma_strips, st.callbacks);
    }
    printf("stress: rank %d: %ld rounds, %llu operations, %llu bytes verified, %llu wrong%s\n", me,
           done, mine[0], mine[1], mine[2], extra);
    fflush(stdout);
    CHECK_MPI(MPI_Reduce(mine, sum, 3, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    if (me == 0) {
        printf(
            "stress: %ld rounds, %llu ops, %llu bytes verified, %llu wrong (%.1f s, seed %" PRIu64
            ", %d ranks)\n",
            done, ops, sum[1], sum[2], secs, opt.seed, nranks);
        if (!wrong_total && opt.rounds < 0)
            print_replay("replay", opt.start, done);
        fflush(stdout);
    }
    atomic_store(&wd_stop, 1);
    CHECK(pthread_join(wd, NULL) == 0);
    if (opt.mpi)
        CHECK_MPI(MPI_Win_free(&win));
    else
        CHECK_OK(ovl_segment_free(&seg));
    CHECK_MPI(MPI_Comm_free(&pcomm));
    if (wrong_total) {
        if (ovl_initialized())
            CHECK_OK(ovl_finalize());
        MPI_Finalize();
        return 1;
    }
    return th_finish();
}
