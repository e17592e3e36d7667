/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sched.c: how long the progress thread may sleep, as a pure function of
 * the engine's state (struct ovl__sched_in: counts, and a summary of each
 * op in flight), the time and the configuration. No MPI, no locks, no
 * global state: tests/test_sched.c checks it on its own. progress.c fills
 * the input under the engine lock and sleeps for what this returns.
 */
#include "ovl_internal.h"

/* cap_ops: the longest the progress thread may sleep now. Normally poll_max_us. When
 * the only work is transfers whose predicted completion (due_locked) is
 * further away than that, longer, up to poll_quiet_us: poll_quiet_share
 * (OVL_POLL_QUIET_SHARE, 75 %) of the way to one poll interval before the
 * earliest of them, so wake-ups thin out in the middle of a long transfer
 * and close in towards its end. Each wake-up costs the computation on this
 * core about 25 us on the test VM; against halfway (the policy before
 * 2026-11-25) three-quarters left a computation 0.63-0.66 of its CPU
 * during a 64 KB exchange instead of 0.54-0.60, with fewer wake-ups (3.0-3.3
 * against 3.1-4.0 per exchange) and no later completions (docs/PERFORMANCE.md,
 * "Fewer wake-ups before a predicted completion"). Patient work (delta
 * receive pieces and delta receives waiting for their message, whose
 * program's access fault or ovl_delta_need drives progress when it needs
 * the data; delta send pieces while the program still produces) sets no
 * limit of its own: with nothing else in flight the sleep doubles up to
 * poll_quiet_us, and a poll that completes only patient ops does not bring
 * it back to the first interval (the thread loop). Without that, a delta
 * message whose last piece comes only at the sender's send_end kept the
 * thread waking every 50 us through a whole computation, and pieces that
 * arrived one per poll kept it at the first interval, each wake-up taking
 * the computing thread's CPU (docs/PERFORMANCE.md, "Patient delta receives"
 * and "A progress thread that leaves delta messages to the program").
 * Other receives not yet matched,
 * continuations, coroutines, RMA or an operation of unknown size keep the
 * usual pace, since something may arrive at any moment. Over TCP the kernel
 * moves the bytes of a started transfer without MPI being polled; what a
 * poll is needed for is a handshake, caught by the short sleeps right after
 * posting, and the completion. An op added by ovl__engine_add_handshake (a
 * marshal stream sent whole) keeps the usual pace until two polls have
 * passed: with one, both ranks of an exchange answered each other's
 * request to send and slept before either sent its data. (Where the MPI
 * library copies itself, as over shared memory, the model's bandwidth is
 * that copy's and the predicted times are short, so little changes.) */
static unsigned cap_ops(const struct ovl__sched_in *in, const struct ovl__sched_cfg *c, double now,
                        int *predicted)
{
    unsigned max_us = c->max_us;
    const unsigned quiet_us = c->quiet_us;
    *predicted = 0;
    if (in->conts > 0) /* a callback waits: the shorter interval, same quiet middle */
        max_us = c->callback_us;
    if (quiet_us <= max_us || in->deferred > 0 || in->ready ||
        (in->conts > 0 ? in->posted : in->urgent))
        return max_us;
    if (in->n == 0) /* patient receives waiting for their first message */
        return in->posted ? quiet_us : max_us;
    double first = 0, firm = 0;
    int quiet = 0;
    for (int i = 0; i < in->n; i++) {
        const struct ovl__sched_op *op = &in->ops[i];
        if (op->patient)
            continue;
        if (op->handshake)
            return max_us; /* a rendezvous in its handshake */
        if (op->quiet) {
            quiet = 1;
            continue;
        }
        double d = op->due_us;
        if (d <= 0)
            return max_us;
        if (op->slack_us > 0) {
            /* a stream's checkpoint: its window has room for a late poll,
             * so the thread sleeps until it is due, not halfway there; if
             * overdue (its sender is behind), for up to its slack */
            if (d < now)
                d = now + op->slack_us;
            if (firm == 0 || d < firm)
                firm = d;
            continue;
        }
        if (first == 0 || d < first)
            first = d;
    }
    if (first == 0 && firm == 0) /* only patient ops, or quiet ones whose checkpoint is done */
        return quiet ? max_us : quiet_us;
    double cap = quiet_us;
    if (first > 0) {
        double part = (first - now - max_us) * c->quiet_share / 100.0;
        if (part <= max_us)
            return max_us;
        cap = part < cap ? part : cap;
    }
    if (firm > 0 && firm - now < cap)
        cap = firm - now;
    if (cap <= max_us)
        return max_us;
    *predicted = 1;
    return (unsigned)cap;
}

/* ovl__sched_cap: the sleep cap, also for serving: while this rank has a live segment,
 * other ranks' gets and puts on its memory may progress only when MPI is
 * polled here (MPI over TCP moves one-sided data through the target's
 * progress), so where segment.c's probe found that so (or
 * OVL_POLL_SERVE_US is set: a source's `serving` hook) the thread polls at
 * least every OVL_POLL_SERVE_US (default OVL_POLL_MAX_US), also with
 * nothing of its own in flight; a wake-up costs the computation on this
 * core about 25 us on the Xeon test VM (docs/PERFORMANCE.md, "What a live
 * segment costs"). Get/put strips in flight keep their own pace
 * (OVL_POLL_RMA_US). */
unsigned ovl__sched_cap(const struct ovl__sched_in *in, const struct ovl__sched_cfg *c, double now,
                        int *predicted)
{
    *predicted = 0;
    /* nothing queued for the driver, no continuation waiting */
    int calm = in->conts == 0 && in->deferred == 0 && !in->ready;
    /* Only get/put strips in flight: the program's access (a fault),
     * ovl_get_need or a fence drives a strip when it needs it, and a
     * computation running meanwhile loses less to a slower pace
     * (docs/PERFORMANCE.md, "The origin's pace during a get"). */
    if (calm && in->n > 0 && in->n == in->nrma && !in->urgent)
        return c->rma_us;
    if (calm && in->serving && in->n == 0 && !in->posted)
        return c->serve_us; /* serving only */
    unsigned cap = cap_ops(in, c, now, predicted);
    if (in->serving && cap > c->serve_us) {
        cap = c->serve_us;
        *predicted = cap > c->max_us;
    }
    return cap;
}
