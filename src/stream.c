/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Marshal streams: messages whose contents a user function writes or reads
 * value by value while the message is in flight (Strumpen's marshal
 * threads). The marshal function runs as a coroutine (coro.c); the stream
 * maps its bytes onto fixed-size fragments:
 *
 *   fragment = 16-byte header {magic, stream id, flags, sequence} + payload
 *   fragment 0   on comm_stream, tag = user tag  (so streams match in MPI order)
 *   fragment k>0 on comm_frag,   tag = stream id (private to this stream)
 *   the last fragment carries OVL__F_LAST (and OVL__F_ABORT if the marshal
 *   function failed); it may be short or empty.
 *
 * One MPI message carries one fragment, except the first: a marshal
 * function that fills its stream within the first window, quickly, sends
 * it as one message of consecutive fragment images (each with its header,
 * the way they lie in the ring), as a hand-written pack loop would send
 * one buffer (see lead_hold). The receiver posts the first receive over
 * its whole ring and reads however many images arrive.
 *
 * Both sides own a ring of OVL_STREAM_WINDOW fragment buffers, one block
 * of memory (slot i at i * fragment size); fragment k lives in slot k %
 * window on the receiver. Fragments are sent with MPI_Issend, which
 * completes only once the receiver has matched it, so a slow receiver stops
 * the sender after `window` fragments: memory stays bounded on both sides
 * (the receiver's MPI never queues more than `window` unexpected fragments).
 * The receiver pre-posts up to `window` receives and cancels those left over
 * once the last fragment is in.
 *
 * The typed helpers of ovl.h write and read inside the current fragment
 * without a call, through the windows at the head of the stream
 * (`struct ovl_stream_s`, s->win): [wpos, wend) is the free part of the
 * fragment being filled, [rpos, rend) the unread part of the head fragment.
 * The windows are open only while the stream's coroutine runs between two
 * calls of ovl_stream_write/read: every call first folds what the helpers
 * did into the fragment (wsync/rsync) and closes them, and reopens them on
 * success; the coroutine parks or returns only with them closed, so a
 * handle used from outside its function always reaches the checks.
 *
 * Scheduling (engine lock): a completion handler that finds the coroutine
 * WAITING makes it READY and queues it for the driver; if it is RUNNING it
 * leaves a `kick`, which the thread that resumed it turns into a READY once
 * the coroutine yields. A woken coroutine re-checks its condition, so
 * spurious wake-ups are harmless and none is lost.
 */
#include "ovl_internal.h"

#include <stdlib.h>

#define OVL__HDR_MAGIC 0x534c564fu /* "OVLS" */
#define OVL__HDR_BYTES 16u
enum { OVL__F_LAST = 1u, OVL__F_ABORT = 2u };
enum { FR_FREE, FR_FILLING, FR_INFLIGHT, FR_POSTED, FR_READY };

struct frag_hdr {
    uint32_t magic, sid, flags, seq;
};

struct frag {
    struct ovl__op op;
    struct ovl__stream *s;
    char *buf;
    int state;
    size_t len; /* payload bytes */
    uint32_t flags, seq;
    unsigned nimg; /* send: fragments in this slot's message (this and the next slots) */
};

struct ovl__stream {
    struct ovl_stream_s win; /* first: the handle's inline windows (ovl.h) */
    struct ovl__req *req;
    int is_send;
    int peer, tag;
    uint32_t sid;
    ovl_marshal_fn fn;
    void *arg;
    struct ovl__coro *co;
    int kick;
    int fn_rc;
    int err;        /* first transfer error */
    int completing; /* completion claimed (engine lock) */
    size_t payload_max;
    unsigned window;
    char *block; /* the slots' buffers: slot i at i * (header + payload_max) */
    struct frag *frags;
    unsigned nposted; /* fragments with an MPI request in flight */
    size_t tell;      /* bytes written or read by the marshal function */
    /* send side */
    int cur;
    uint32_t next_seq;
    int in_lead;    /* full fragments are held for one first message (lead_hold) */
    unsigned held;  /* fragments held: slots 0 .. held - 1 */
    size_t excess;  /* bytes past the last slot's payload that open the next fragment (post_full) */
    double t_start; /* ovl__now_us when the marshal function started */
    /* receive side */
    unsigned head;
    size_t rpos;
    uint32_t next_post;
    int last_seen;
    int aborted;     /* ended early: its sender aborted it, or ovl_finalize cancelled it */
    int cancelled;   /* ... ovl_finalize cancelled it (before it arrived) */
    size_t received; /* payload bytes arrived */
    double t_first;  /* ovl__now_us when fragment 0 arrived (receive side) */
    int head_ready;  /* frags[head] seen FR_READY (coroutine only) */
};

static struct ovl__stream *of(ovl_stream_t h)
{
    return (struct ovl__stream *)h; /* win is the first member */
}

/* ---- the inline windows --------------------------------------------------- */

/* A closed window is empty and points here (both ends of one object, so the
 * helpers' `end - pos` is defined). */
static unsigned char closed[1];

static void wclose(struct ovl__stream *s)
{
    s->win.ovl_wpos_ = s->win.ovl_wend_ = closed;
}

static void rclose(struct ovl__stream *s)
{
    s->win.ovl_rpos_ = s->win.ovl_rend_ = closed;
}

static unsigned char *payload(const struct frag *f)
{
    return (unsigned char *)f->buf + OVL__HDR_BYTES;
}

/* Bytes the helpers wrote / read that the stream has not counted yet. */
static size_t wmoved(const struct ovl__stream *s)
{
    if (s->win.ovl_wpos_ == closed)
        return 0;
    const struct frag *f = &s->frags[s->cur];
    return (size_t)(s->win.ovl_wpos_ - payload(f)) - f->len;
}

static size_t rmoved(const struct ovl__stream *s)
{
    if (s->win.ovl_rpos_ == closed)
        return 0;
    return (size_t)(s->win.ovl_rpos_ - payload(&s->frags[s->head])) - s->rpos;
}

/* Fold the helpers' writes into the fragment being filled and close. */
static void wsync(struct ovl__stream *s)
{
    size_t n = wmoved(s);
    if (n)
        s->frags[s->cur].len += n;
    s->tell += n;
    wclose(s);
}

/* Bytes past the ring's last slot in its block: a first message that fills
 * the ring may carry that much more in its last fragment, so that a
 * stream of window x fragment size bytes (128 KiB with the defaults: 8 x
 * 16 KiB, less the 8 headers) still goes in one message. */
static size_t stretch_bytes(const struct ovl__stream *s)
{
    size_t x = (size_t)s->window * OVL__HDR_BYTES;
    return x < s->payload_max ? x : s->payload_max;
}

static size_t block_bytes(const struct ovl__stream *s)
{
    return (size_t)s->window * (OVL__HDR_BYTES + s->payload_max) + stretch_bytes(s);
}

/* Payload bytes fragment f may take: the last slot, when every slot before
 * it is held for one first message, takes the stretch too. */
static size_t frag_cap(const struct ovl__stream *s, const struct frag *f)
{
    if (s->in_lead && s->held + 1 == s->window && f == &s->frags[s->window - 1])
        return s->payload_max + stretch_bytes(s);
    return s->payload_max;
}

/* Open the write window on the fragment being filled, if any. */
static void wopen(struct ovl__stream *s)
{
    if (s->cur < 0)
        return;
    struct frag *f = &s->frags[s->cur];
    s->win.ovl_wpos_ = payload(f) + f->len;
    s->win.ovl_wend_ = payload(f) + frag_cap(s, f);
}

/* Fold the helpers' reads into the head fragment's position and close. */
static void rsync(struct ovl__stream *s)
{
    size_t n = rmoved(s);
    s->rpos += n;
    s->tell += n;
    rclose(s);
}

/* Open the read window on the head fragment if it is known to be there. */
static void ropen(struct ovl__stream *s)
{
    if (!s->head_ready)
        return;
    const struct frag *f = &s->frags[s->head];
    s->win.ovl_rpos_ = payload(f) + s->rpos;
    s->win.ovl_rend_ = payload(f) + f->len;
}

static atomic_uint next_sid;
static atomic_int active_send, active_recv;

static int stream_active(void)
{
    return atomic_load(&active_send) + atomic_load(&active_recv);
}

static int stream_sending(void)
{
    return atomic_load(&active_send);
}

/* Streams run as coroutines the engine schedules and as ops: this source
 * only tells ovl_finalize what is still in flight. */
const struct ovl__source ovl__stream_source = {
    .name = "stream",
    .sending = stream_sending,
    .active = stream_active,
};

/* ---- scheduling ----------------------------------------------------------- */

/* engine lock held: a fragment event happened */
static void wake_locked(struct ovl__stream *s)
{
    int *st = ovl__coro_state(s->co);
    if (*st == OVL__CO_WAITING) {
        *st = OVL__CO_READY;
        ovl__engine_schedule_coro(s->co);
    } else if (*st == OVL__CO_RUNNING) {
        s->kick = 1;
    }
}

static void finish(struct ovl__stream *s);

/* engine lock held: claim completion once the coroutine is done and no
 * fragment has a request in flight. Whoever claims it calls finish(); a
 * thread that did not claim must not touch the stream after unlocking. */
static int claim_locked(struct ovl__stream *s)
{
    if (s->completing || *ovl__coro_state(s->co) != OVL__CO_DONE || s->nposted != 0)
        return 0;
    s->completing = 1;
    return 1;
}

/* Resume s's coroutine (state already RUNNING) and settle its state after. */
static void run(struct ovl__stream *s)
{
    int finished = ovl__coro_resume(s->co);
    ovl__engine_lock();
    int *st = ovl__coro_state(s->co);
    if (finished) {
        *st = OVL__CO_DONE;
    } else if (s->kick) {
        s->kick = 0;
        *st = OVL__CO_READY;
        ovl__engine_schedule_coro(s->co);
    } else {
        *st = OVL__CO_WAITING;
    }
    int claim = claim_locked(s);
    ovl__engine_unlock();
    if (claim)
        finish(s);
}

/* The coroutine's step for the driver (ovl__coro_set_owner). */
static void stream_step(struct ovl__coro *c)
{
    struct ovl__stream *s = ovl__coro_owner(c);
    ovl__engine_lock();
    *ovl__coro_state(c) = OVL__CO_RUNNING;
    ovl__engine_unlock();
    run(s);
}

/* From the coroutine: park until a fragment event. */
static void park(void)
{
    ovl__coro_yield();
}

/* ---- completion ------------------------------------------------------------ */

static void finish(struct ovl__stream *s)
{
    struct ovl__req *r = s->req;
    r->status.error = s->fn_rc < 0 ? s->fn_rc
                      : s->err     ? s->err
                      : s->aborted ? OVL_ERR_CANCELLED
                                   : OVL_SUCCESS;
    r->status.bytes = s->is_send ? s->tell : s->received;
    r->status.source = s->is_send ? ovl__g.rank : s->peer;
    r->status.tag = s->tag;
    ovl__page_free(s->block);
    free(s->frags);
    ovl__coro_destroy(s->co);
    atomic_fetch_sub(s->is_send ? &active_send : &active_recv, 1);
    r->stream = NULL;
    free(s);
    ovl__req_complete(r);
}

/* A fragment's request is over: wake the coroutine, maybe complete. */
static void frag_settled(struct ovl__stream *s)
{
    ovl__engine_lock();
    s->nposted--;
    wake_locked(s);
    int claim = claim_locked(s);
    ovl__engine_unlock();
    if (claim)
        finish(s);
}

static void record_error(struct ovl__stream *s, int err, const char *what)
{
    int code = ovl__mpi_error(err, s->is_send ? "ovl_isend_stream" : "ovl_irecv_stream", what);
    if (!s->err)
        s->err = code;
}

/* ---- send side -------------------------------------------------------------- */

static void send_done(struct ovl__op *op, MPI_Status *st)
{
    struct frag *f = op->ctx;
    struct ovl__stream *s = f->s;
    if (st->MPI_ERROR != MPI_SUCCESS)
        record_error(s, st->MPI_ERROR, "fragment send");
    ovl__engine_lock();
    for (unsigned i = 0; i < f->nimg; i++)
        f[i].state = FR_FREE;
    ovl__engine_unlock();
    frag_settled(s);
}

/* Every how many fragments a stream asks the progress thread for a poll.
 * A stream keeps `window` fragments in flight; a poll at each fragment's
 * predicted completion (every 137 us at 16 KiB on 1 Gbit/s) costs the
 * computation a wake-up each, about 25 us on the Xeon test VM
 * (docs/PERFORMANCE.md, "What a wake-up costs"). The window needs a poll
 * only once half of it has drained: so only every (window/2)-th fragment
 * (a checkpoint) sets the pace, and the poll at its completion settles the
 * quiet ones before it, the link never running dry. A send's last fragment
 * completes the stream: always a checkpoint; its first window, posted at
 * once, is polled fragment by fragment (frag_add), since MPI may need polls
 * to push so much out (quiet from the start, a 64 KB exchange took 1.3x
 * its wire time). A receive cannot know which fragment is the last one,
 * and the end is seen only at the next checkpoint's time, up to k - 1
 * fragment times late: k grows with the stream's age, one fragment per
 * 20 fragment times, so short streams poll at every fragment and the end
 * of a long one is seen at most 5 % of its age late. */
unsigned ovl__stream_stride(unsigned window, size_t frag_bytes, double bw_Bpus, int is_send,
                            double age_us)
{
    if (bw_Bpus <= 0 || window < 4 || frag_bytes == 0)
        return 1;
    unsigned k = window / 2;
    if (is_send)
        return k;
    double fit = 1 + age_us / 20 / ((double)frag_bytes / bw_Bpus);
    if (fit < (double)k)
        k = (unsigned)fit;
    return k;
}

/* Add fragment f (its MPI request started; @last: a send's last) to the
 * engine, quiet unless it is a checkpoint. A whole stream in one message
 * is tracked as a plain send is. */
static int frag_add(struct ovl__stream *s, struct frag *f, size_t bytes, int last)
{
    if (s->is_send && f->nimg > 1)
        return ovl__engine_post(&f->op, &(struct ovl__post){ .bytes = bytes, .handshake = 1 });
    double tau = ovl__m.bw_Bpus > 0 ? (double)bytes / ovl__m.bw_Bpus : 0;
    double age = s->t_first > 0 ? ovl__now_us() - s->t_first : 0;
    unsigned k = ovl__stream_stride(s->window, bytes, ovl__m.bw_Bpus, s->is_send, age);
    if (s->is_send && f->seq < s->window)
        k = 1; /* the first window, posted at once: MPI may need polls to push it out */
    int quiet = !last && k > 1 && (f->seq + 1) % k != 0;
    return ovl__engine_post(
        &f->op,
        &(struct ovl__post){ .bytes = bytes, .follows = quiet, .slack_us = (double)(k - 1) * tau });
}

/* Post the @nimg fragments from slot f on (consecutive slots, all full but
 * the last) as one message, @flags on the last. Runs in the coroutine. */
static void send_frag(struct ovl__stream *s, struct frag *f, uint32_t flags, unsigned nimg)
{
    for (unsigned i = 0; i < nimg; i++) {
        struct frag_hdr h = { OVL__HDR_MAGIC, s->sid, i + 1 == nimg ? flags : 0u, s->next_seq };
        memcpy(f[i].buf, &h, sizeof h);
        f[i].seq = s->next_seq++;
    }
    f->nimg = nimg;
    f->op.done = send_done;
    f->op.ctx = f;
    f->op.kind = OVL__OP_SEND;
    f->op.peer = s->peer;
    int count =
        (int)((nimg - 1) * (OVL__HDR_BYTES + s->payload_max) + OVL__HDR_BYTES + f[nimg - 1].len);
    int rc = f->seq == 0 ? MPI_Issend(f->buf, count, MPI_BYTE, s->peer, s->tag,
                                      ovl__dom_cur()->comm_stream, &f->op.mreq)
                         : MPI_Issend(f->buf, count, MPI_BYTE, s->peer, (int)s->sid,
                                      ovl__dom_cur()->comm_frag, &f->op.mreq);
    if (rc != MPI_SUCCESS) {
        record_error(s, rc, "MPI_Issend");
        for (unsigned i = 0; i < nimg; i++)
            f[i].state = FR_FREE;
        return;
    }
    ovl__engine_lock();
    for (unsigned i = 0; i < nimg; i++)
        f[i].state = FR_INFLIGHT;
    s->nposted++;
    ovl__engine_unlock();
    atomic_fetch_add_explicit(&ovl__g.st_frag_sent, nimg, memory_order_relaxed);
    atomic_fetch_add_explicit(&ovl__g.st_stream_msgs, 1, memory_order_relaxed);
    if (ovl__trace_on)
        ovl__trace_instant("stream", "fragment-send", "seq", f->seq, "bytes", count);
    if (frag_add(s, f, (size_t)count, (flags & OVL__F_LAST) != 0) != OVL_SUCCESS) {
        /* cannot track it: complete it here */
        MPI_Status st;
        MPI_Wait(&f->op.mreq, &st);
        f->op.mreq = MPI_REQUEST_NULL;
        send_done(&f->op, &st);
    }
}

/* Whether the fragment that just filled (slot s->held; slots before it
 * held already) is held too rather than posted: while the stream is in its
 * first window, a slot is left for the next fragment, and the marshal
 * function has taken no longer than the costs that sending the fragments
 * one by one would add (o per message, from the model) plus a tenth of
 * their wire time. A function that outruns the wire this way and ends
 * within the window sends its whole stream as one message (send_body): a
 * hand-written pack loop's one buffer, where fragment by fragment each
 * eager send took 12-35 us of the caller's CPU on the emulated 1 Gbit/s
 * link (docs/PERFORMANCE.md, "One message for a short stream"). A slower
 * function, or one that fills the window, streams as before
 * (flush_held), having delayed the wire by at most that allowance. */
static int lead_hold(struct ovl__stream *s)
{
    if (!s->in_lead || s->held + 2 > s->window)
        return 0;
    if (ovl__g.cfg.stream.whole == OVL_STREAM_WHOLE_ON)
        return 1;
    double k = (double)(s->held + 1);
    double o = ovl__m.o_us < 1 ? 1 : ovl__m.o_us > 100 ? 100 : ovl__m.o_us;
    double allow = k * o;
    if (ovl__m.bw_Bpus > 0)
        allow += k * (double)s->payload_max / ovl__m.bw_Bpus / 10;
    return ovl__now_us() - s->t_start <= allow;
}

/* Post the held fragments one by one, and stream from here on. */
static void flush_held(struct ovl__stream *s)
{
    unsigned n = s->held;
    s->held = 0;
    s->in_lead = 0;
    for (unsigned i = 0; i < n && !s->err; i++)
        send_frag(s, &s->frags[i], 0, 1);
}

/* Fragment f is full and more follows, and it is not held: post what is
 * held, then f. A stretched last slot goes as a plain fragment, its bytes
 * past one fragment's payload opening the next (they stay in the block's
 * stretch, which nothing else writes, until acquire_next copies them). */
static void post_full(struct ovl__stream *s, struct frag *f)
{
    flush_held(s);
    if (f->len > s->payload_max) {
        s->excess = f->len - s->payload_max;
        f->len = s->payload_max;
    }
    send_frag(s, f, 0, 1);
}

/* Get a buffer to fill, parking while the whole window is in flight. */
static int acquire(struct ovl__stream *s, struct frag **out)
{
    for (;;) {
        ovl__engine_lock();
        struct frag *f = NULL;
        for (unsigned i = 0; i < s->window && !f; i++)
            if (s->frags[i].state == FR_FREE)
                f = &s->frags[i];
        if (f)
            f->state = FR_FILLING;
        ovl__engine_unlock();
        if (f) {
            f->len = 0;
            *out = f;
            return OVL_SUCCESS;
        }
        park();
    }
}

/* acquire, and start the fragment with the bytes post_full moved out. */
static int acquire_next(struct ovl__stream *s, struct frag **out)
{
    int rc = acquire(s, out);
    if (rc == OVL_SUCCESS && s->excess) {
        memcpy(payload(*out), payload(&s->frags[s->window - 1]) + s->payload_max, s->excess);
        (*out)->len = s->excess;
        s->excess = 0;
    }
    return rc;
}

static void send_body(void *arg)
{
    struct ovl__stream *s = arg;
    s->t_start = ovl__now_us();
    s->fn_rc = s->fn(&s->win, s->arg);
    wsync(s);
    if (s->fn_rc > 0)
        s->fn_rc = OVL_SUCCESS;
    struct frag *f;
    if (s->cur >= 0) {
        f = &s->frags[s->cur];
    } else if (acquire_next(s, &f) != OVL_SUCCESS) {
        if (!s->err)
            s->err = OVL_ERR_NOMEM;
        return;
    }
    s->cur = -1;
    uint32_t flags = OVL__F_LAST | (s->fn_rc < 0 ? OVL__F_ABORT : 0u);
    if (s->in_lead && f == &s->frags[s->held]) { /* the whole stream in one message */
        unsigned n = s->held + 1;
        s->held = 0;
        s->in_lead = 0;
        send_frag(s, s->frags, flags, n);
        return;
    }
    flush_held(s);
    send_frag(s, f, flags, 1);
}

int ovl_stream_write(ovl_stream_t stream, const void *data, size_t bytes)
{
    static const char *fn = "ovl_stream_write";
    struct ovl__stream *s = of(stream);
    struct ovl__coro *c = ovl__tls()->coro;
    if (!s || !c || ovl__coro_owner(c) != s || !s->is_send)
        return ovl__error(OVL_ERR_ARG, fn, "not inside this send stream's marshal function");
    wsync(s);
    if (!data && bytes)
        return ovl__error(OVL_ERR_ARG, fn, "data is NULL");
    if (s->err)
        return ovl__error_returned(s->err, fn);
    const char *p = data;
    while (bytes) {
        struct frag *f;
        if (s->cur < 0) {
            int rc = acquire_next(s, &f);
            if (rc)
                return rc;
            s->cur = (int)(f - s->frags);
        }
        f = &s->frags[s->cur];
        size_t cap = frag_cap(s, f);
        if (f->len == cap) {
            /* full, and more follows: while the stream may still go as one
             * message, this is decided only now (a stream that ends
             * exactly here goes whole, send_body) */
            s->cur = -1;
            if (lead_hold(s)) {
                s->held++;
                continue;
            }
            post_full(s, f);
            if (s->err)
                return ovl__error_returned(s->err, fn);
            continue;
        }
        size_t n = cap - f->len;
        if (n > bytes)
            n = bytes;
        memcpy(f->buf + OVL__HDR_BYTES + f->len, p, n);
        f->len += n;
        p += n;
        bytes -= n;
        s->tell += n;
        if (!s->in_lead && f->len == s->payload_max) {
            s->cur = -1;
            send_frag(s, f, 0, 1);
            if (s->err)
                return ovl__error_returned(s->err, fn);
        }
    }
    wopen(s);
    return OVL_SUCCESS;
}

/* ---- receive side ------------------------------------------------------------ */

/* The size of the last stream received whole from each source with each
 * tag (a few slots, by hash; 0 after one that came in fragments): a
 * stream's first receive is sized with it, so that the progress thread
 * sleeps towards its predicted arrival as for a plain receive instead of
 * polling at the callback pace through the whole message (a program
 * exchanges the same streams again and again). Unknown, 0, or a wildcard:
 * not sized, polled at that pace as before. A stale size only moves a
 * poll. */
#define LEAD_SEEN 64
static struct {
    _Atomic int key; /* 0: empty */
    _Atomic size_t bytes;
} lead_seen[LEAD_SEEN];

static int lead_key(int peer, int tag, unsigned *slot)
{
    if (peer < 0 || tag < 0)
        return 0;
    unsigned h = (unsigned)peer * 2654435761u ^ (unsigned)tag * 40503u;
    *slot = h % LEAD_SEEN;
    return (int)(h & 0x3fffffffu) | 1;
}

static size_t lead_expected(int peer, int tag)
{
    unsigned i;
    int k = lead_key(peer, tag, &i);
    if (!k || atomic_load_explicit(&lead_seen[i].key, memory_order_relaxed) != k)
        return 0;
    return atomic_load_explicit(&lead_seen[i].bytes, memory_order_relaxed);
}

static void lead_arrived(int peer, int tag, size_t bytes)
{
    unsigned i;
    int k = lead_key(peer, tag, &i);
    if (!k)
        return;
    atomic_store_explicit(&lead_seen[i].key, k, memory_order_relaxed);
    atomic_store_explicit(&lead_seen[i].bytes, bytes, memory_order_relaxed);
}

static void recv_done(struct ovl__op *op, MPI_Status *st);

/* Post a receive for fragment `seq` into f. Called with no lock. */
static int post_recv(struct ovl__stream *s, struct frag *f, uint32_t seq)
{
    f->seq = seq;
    f->op.done = recv_done;
    f->op.ctx = f;
    f->op.kind = seq == 0 ? OVL__OP_RECV : OVL__OP_FRAG;
    f->op.peer = s->peer;
    /* the first receive spans the whole block: a short stream comes whole */
    int count = (int)(seq == 0 ? block_bytes(s) : OVL__HDR_BYTES + s->payload_max);
    int rc = seq == 0 ? MPI_Irecv(f->buf, count, MPI_BYTE, s->peer, s->tag,
                                  ovl__dom_cur()->comm_stream, &f->op.mreq)
                      : MPI_Irecv(f->buf, count, MPI_BYTE, s->peer, (int)s->sid,
                                  ovl__dom_cur()->comm_frag, &f->op.mreq);
    if (rc != MPI_SUCCESS)
        return ovl__mpi_error(rc, "ovl_irecv_stream", "MPI_Irecv");
    ovl__engine_lock();
    f->state = FR_POSTED;
    s->nposted++;
    ovl__engine_unlock();
    size_t expect = seq == 0 ? lead_expected(s->peer, s->tag) : 0;
    if ((seq > 0  ? frag_add(s, f, (size_t)count, 0)
         : expect ? ovl__engine_post(
                        &f->op, &(struct ovl__post){ .bytes = expect, .wake = OVL__WAKE_GRACE })
                  : ovl__engine_post(&f->op, NULL)) != OVL_SUCCESS) {
        MPI_Cancel(&f->op.mreq);
        MPI_Wait(&f->op.mreq, MPI_STATUS_IGNORE);
        ovl__engine_lock();
        f->state = FR_FREE;
        s->nposted--;
        ovl__engine_unlock();
        return OVL_ERR_NOMEM;
    }
    return OVL_SUCCESS;
}

/* Post the next fragment's receive into f (if the message is not over). */
static void repost(struct ovl__stream *s, struct frag *f)
{
    ovl__engine_lock();
    int more = !s->last_seen && !s->err;
    f->state = FR_FREE;
    ovl__engine_unlock();
    if (more) {
        int rc = post_recv(s, f, s->next_post++);
        if (rc && !s->err)
            s->err = rc;
    }
}

static void recv_done(struct ovl__op *op, MPI_Status *st)
{
    struct frag *f = op->ctx;
    struct ovl__stream *s = f->s;
    int cancelled = 0, first = f->seq == 0;
    MPI_Test_cancelled(st, &cancelled);
    struct frag_hdr h = { 0, 0, 0, 0 };
    int count = 0;
    /* fragment images in the message: several only in a first one */
    const size_t fb = OVL__HDR_BYTES + s->payload_max;
    unsigned nimg = 1;
    if (!cancelled && st->MPI_ERROR == MPI_SUCCESS) {
        MPI_Get_count(st, MPI_BYTE, &count);
        if (count >= (int)OVL__HDR_BYTES)
            memcpy(&h, f->buf, sizeof h);
        if (first && (size_t)count > fb)
            nimg = (unsigned)(((size_t)count + fb - 1) / fb);
        if (nimg > s->window) /* a ring-filling first message: the last one stretched */
            nimg = s->window;
        int ok = 1;
        for (unsigned i = 0; ok && i < nimg; i++) {
            struct frag_hdr g;
            size_t ilen = i + 1 < nimg ? fb : (size_t)count - i * fb;
            if (ilen < OVL__HDR_BYTES) {
                ok = 0;
                break;
            }
            memcpy(&g, f[i].buf, sizeof g);
            /* in order, of one stream, and only the last image ends it */
            ok = g.magic == OVL__HDR_MAGIC && g.seq == f->seq + i && g.sid == h.sid &&
                 (i + 1 == nimg || !(g.flags & OVL__F_LAST));
        }
        ok = ok && count >= (int)OVL__HDR_BYTES;
        if (!ok)
            record_error(s, MPI_ERR_OTHER, "stream fragment check (not an ovl stream message?)");
    } else if (!cancelled) {
        record_error(s, st->MPI_ERROR, "fragment receive");
    }
    int post_more = 0;
    ovl__engine_lock(); /* nposted still counts this fragment: s stays alive */
    if (cancelled || s->err) {
        f->state = FR_FREE;
        if (first || s->err) {
            /* Nothing more will come: let the reader see the end. */
            if (cancelled && first)
                s->aborted = s->cancelled = 1;
            s->last_seen = 1;
            f->state = FR_READY;
            f->len = 0;
            f->flags = OVL__F_LAST;
        }
    } else {
        for (unsigned i = 0; i < nimg; i++) {
            struct frag *g = &f[i];
            struct frag_hdr gh;
            memcpy(&gh, g->buf, sizeof gh);
            g->state = FR_READY;
            g->len = (i + 1 < nimg ? fb : (size_t)count - i * fb) - OVL__HDR_BYTES;
            g->flags = gh.flags;
            s->received += g->len;
            if (gh.flags & OVL__F_LAST) {
                s->last_seen = 1;
                if (gh.flags & OVL__F_ABORT)
                    s->aborted = 1;
            }
        }
        if (ovl__trace_on)
            ovl__trace_instant("stream", "fragment-recv", "seq", f->seq, "bytes", count);
        if (first) {
            s->t_first = ovl__now_us();
            s->peer = st->MPI_SOURCE;
            s->tag = st->MPI_TAG;
            s->sid = h.sid;
            s->next_post = nimg;
            post_more = !s->last_seen;
            lead_arrived(s->peer, s->tag, nimg > 1 ? (size_t)count : 0);
        }
    }
    int cancel_rest = s->last_seen;
    ovl__engine_unlock();
    if (!cancelled && first && st->MPI_ERROR == MPI_SUCCESS && s->peer >= 0 &&
        s->peer < ovl__g.size)
        atomic_fetch_add(&ovl__dom_cur()->recvd_from[s->peer], 1);
    if (!cancelled)
        atomic_fetch_add_explicit(&ovl__g.st_frag_recv, nimg, memory_order_relaxed);
    if (post_more) {
        /* The stream id is known now: pre-post the rest of the window. */
        for (unsigned i = nimg; i < s->window; i++) {
            int rc = post_recv(s, &s->frags[i], s->next_post++);
            if (rc && !s->err)
                s->err = rc;
        }
    }
    if (cancel_rest) {
        /* Receives posted beyond the last fragment can never match. */
        ovl__engine_lock();
        for (unsigned i = 0; i < s->window; i++)
            if (s->frags[i].state == FR_POSTED && s->frags[i].op.mreq != MPI_REQUEST_NULL)
                MPI_Cancel(&s->frags[i].op.mreq);
        ovl__engine_unlock();
    }
    frag_settled(s);
}

/* Read up to `bytes` into data (NULL: discard). Runs in the coroutine. */
static int read_bytes(struct ovl__stream *s, char *data, size_t bytes)
{
    while (bytes) {
        struct frag *f = &s->frags[s->head];
        /* Only this coroutine takes the head fragment out of FR_READY
         * (repost), so once seen READY under the lock it stays READY: skip
         * the lock on every further read of it (one per value marshalled). */
        if (!s->head_ready) {
            ovl__engine_lock();
            s->head_ready = f->state == FR_READY;
            ovl__engine_unlock();
            if (!s->head_ready) {
                park();
                continue;
            }
        }
        size_t n = f->len - s->rpos;
        if (n > bytes)
            n = bytes;
        if (data) {
            memcpy(data, f->buf + OVL__HDR_BYTES + s->rpos, n);
            data += n;
        }
        s->rpos += n;
        s->tell += n;
        bytes -= n;
        if (s->rpos == f->len) {
            if (f->flags & OVL__F_LAST)
                return bytes ? OVL_ERR_EOF : OVL_SUCCESS;
            s->rpos = 0;
            s->head = (s->head + 1) % s->window;
            s->head_ready = 0;
            repost(s, f);
        }
    }
    return OVL_SUCCESS;
}

static void recv_body(void *arg)
{
    struct ovl__stream *s = arg;
    s->fn_rc = s->fn(&s->win, s->arg);
    rsync(s);
    if (s->fn_rc > 0)
        s->fn_rc = OVL_SUCCESS;
    /* Receive and discard whatever the unmarshal function left. */
    size_t tell = s->tell;
    while (read_bytes(s, NULL, SIZE_MAX / 2) == OVL_SUCCESS)
        ;
    s->tell = tell;
}

int ovl_stream_read(ovl_stream_t stream, void *data, size_t bytes)
{
    static const char *fn = "ovl_stream_read";
    struct ovl__stream *s = of(stream);
    struct ovl__coro *c = ovl__tls()->coro;
    if (!s || !c || ovl__coro_owner(c) != s || s->is_send)
        return ovl__error(OVL_ERR_ARG, fn, "not inside this receive stream's unmarshal function");
    rsync(s);
    if (!data && bytes)
        return ovl__error(OVL_ERR_ARG, fn, "data is NULL");
    size_t at = s->tell;
    int rc = read_bytes(s, data, bytes);
    if (rc == OVL_SUCCESS)
        ropen(s);
    if (rc == OVL_ERR_EOF) {
        /* ovl_finalize's cancel is ovl's own shutdown, no failure: under
         * OVL_ERRORS=fatal it no more aborts here than for ovl_irecv */
        if (s->cancelled)
            return ovl__report(OVL_ERR_CANCELLED, fn,
                               "ovl_finalize cancelled the message before it arrived");
        if (s->aborted)
            return ovl__error(OVL_ERR_CANCELLED, fn, "the message was aborted by its sender");
        if (s->err)
            return ovl__error_returned(s->err, fn);
        return ovl__error(OVL_ERR_EOF, fn, "%zu bytes asked for at byte %zu of a %zu-byte message",
                          bytes, at, s->tell);
    }
    return rc;
}

size_t ovl_stream_tell(ovl_stream_t stream)
{
    return stream ? of(stream)->tell + wmoved(of(stream)) + rmoved(of(stream)) : 0;
}

/* ---- creation ------------------------------------------------------------------ */

static int create(const char *fn, int is_send, int peer, int tag, ovl_marshal_fn mf, void *arg,
                  ovl_request_t *req)
{
    int rc;
    if ((rc = ovl__check_init(fn)))
        return rc;
    if (!req || !mf)
        return ovl__error(OVL_ERR_ARG, fn, "%s is NULL",
                          req ? "marshal function" : "request pointer");
    if ((peer != MPI_PROC_NULL && (rc = ovl__check_peer(fn, peer, !is_send))) ||
        (rc = ovl__check_tag(fn, tag, !is_send)))
        return rc;
    if (ovl__tls()->coro)
        return ovl__error(OVL_ERR_IN_CALLBACK, fn,
                          "cannot start a stream inside a marshal function");
    /* As MPI: nothing travels, the (un)marshal function never runs. */
    if (peer == MPI_PROC_NULL)
        return ovl__post_proc_null(fn, is_send ? OVL__REQ_SEND : OVL__REQ_RECV, req);

    struct ovl__stream *s = calloc(1, sizeof *s);
    if (!s)
        return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a stream");
    s->window = ovl__g.cfg.stream.window;
    s->payload_max = ovl__g.cfg.stream.fragment_size - OVL__HDR_BYTES;
    s->frags = calloc(s->window, sizeof *s->frags);
    s->block = ovl__page_alloc(block_bytes(s)); /* not malloc: see ovl__page_alloc */
    if (!s->frags || !s->block)
        goto nomem;
    for (unsigned i = 0; i < s->window; i++) {
        s->frags[i].s = s;
        s->frags[i].buf = s->block + (size_t)i * (OVL__HDR_BYTES + s->payload_max);
        s->frags[i].nimg = 1;
    }
    s->is_send = is_send;
    s->peer = peer;
    s->tag = tag;
    s->fn = mf;
    s->arg = arg;
    s->cur = -1;
    s->in_lead = is_send && ovl__g.cfg.stream.whole != OVL_STREAM_WHOLE_OFF;
    wclose(s);
    rclose(s);
    if (ovl__coro_create(ovl__g.cfg.stream.stack_size, is_send ? send_body : recv_body, s, &s->co))
        goto nomem;
    ovl__coro_set_owner(s->co, s, stream_step);

    ovl_request_t h;
    if (ovl__req_alloc(is_send ? OVL__REQ_SSEND : OVL__REQ_SRECV, &s->req, &h)) {
        ovl__coro_destroy(s->co);
        goto nomem;
    }
    s->req->stream = s;
    atomic_fetch_add(is_send ? &active_send : &active_recv, 1);
    *req = h;
    if (is_send) {
        s->sid = atomic_fetch_add(&next_sid, 1) % ((unsigned)ovl__g.tag_ub + 1u);
        atomic_fetch_add(&ovl__dom_cur()->sent_to[peer], 1);
        /* Run the marshal function until it first waits (errors from here on
         * are reported through the request). */
        run(s);
        return OVL_SUCCESS;
    }
    /* Receive: start the unmarshal function first (it parks at once, the
     * first fragment not being posted yet), so that from here on only the
     * thread driving progress resumes it and posts its fragment receives. */
    s->next_post = 1;
    run(s);
    if ((rc = post_recv(s, &s->frags[0], 0)) != OVL_SUCCESS) {
        /* Not posted: complete the request with the error at once. */
        ovl__engine_lock();
        s->last_seen = 1;
        s->err = rc;
        s->frags[0].state = FR_READY;
        s->frags[0].len = 0;
        s->frags[0].flags = OVL__F_LAST;
        s->nposted++; /* balanced by frag_settled */
        ovl__engine_unlock();
        frag_settled(s);
    }
    return OVL_SUCCESS;

nomem:
    ovl__page_free(s->block);
    free(s->frags);
    free(s);
    return ovl__error(OVL_ERR_NOMEM, fn, "no memory for a stream");
}

int ovl_isend_stream(int dest, int tag, ovl_marshal_fn fn, void *arg, ovl_request_t *req)
{
    return create("ovl_isend_stream", 1, dest, tag, fn, arg, req);
}

int ovl_irecv_stream(int source, int tag, ovl_marshal_fn fn, void *arg, ovl_request_t *req)
{
    return create("ovl_irecv_stream", 0, source, tag, fn, arg, req);
}
