/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sched.c: when the progress thread polls next, as a pure function of the
 * engine's state (struct ovl__sched_in: counts, and each op in flight), the
 * time and the configuration. No MPI, no locks, no global state:
 * tests/test_sched.c checks it on its own. progress.c fills the input under
 * the engine lock and sleeps for what this returns.
 *
 * The rule: every op in flight has a time it may complete by (its
 * predicted completion, or now if it may complete at any moment) and a
 * lateness budget (how late its completion may be noticed); the thread
 * polls next at the earliest, over everything in flight, of
 * max(completion, now + budget): work that may complete at any moment is
 * polled once per budget, work predicted to complete later when it is
 * predicted to. The budgets:
 *
 *   work someone waits for (a continuation on an op in flight)  OVL_LATENESS_US
 *   any other op that may complete at any moment                 OVL__SCHED_POLL_US
 *   a get/put strip (the program's access drives it)             OVL__SCHED_STRIP_US
 *   a stream checkpoint (when due, its window needs the poll)    0; overdue: its slack
 *   patient work (the program drives it when it needs it)        OVL__SCHED_LONGEST_US
 *   serving other ranks' one-sided transfers on a live segment   OVL_SERVE_US
 *     (while this rank's own strips are in flight, at least their budget:
 *     their polls serve too)
 *
 * A predicted completion is the model's (bytes over its bandwidth, behind
 * what the link carries first); the model may be optimistic or
 * pessimistic, so the rule trusts OVL__SCHED_TRUST of the time left to it
 * (the thread wakes at now + TRUST x (due - now), and again from there,
 * closing in, until the budget is the larger). A stream fragment between
 * two checkpoints leaves its pace to its stream's next checkpoint.
 */
#include "ovl_internal.h"

/* How late the completion of an op no continuation waits for may be
 * noticed: the thread's usual pace. */
#define OVL__SCHED_POLL_US 50.0
/* A get/put strip: the program's access (a fault), ovl_get_need or a fence
 * drives it when the program needs the data. */
#define OVL__SCHED_STRIP_US 100.0
/* Patient work, and the longest sleep with anything in flight. */
#define OVL__SCHED_LONGEST_US 1000.0
/* Share of the time left to a predicted completion the rule trusts. */
#define OVL__SCHED_TRUST 0.75

unsigned ovl__sched_poll_us(void)
{
    return (unsigned)OVL__SCHED_POLL_US;
}

unsigned ovl__sched_longest_us(void)
{
    return (unsigned)OVL__SCHED_LONGEST_US;
}

int ovl__sched_cpus_per_rank(int affinity, long online, int node_ranks)
{
    long n = affinity > 0 ? affinity : 0;
    if (online > 0) {
        long share = online / (node_ranks > 0 ? node_ranks : 1);
        share = share < 1 ? 1 : share;
        n = n > 0 && n < share ? n : share;
    }
    return n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
}

/* The earliest time an op may complete by, as the rule reads it. */
static double by_when(const struct ovl__sched_op *op, double now)
{
    if (op->due_us <= now)
        return now; /* at any moment, or overdue */
    if (op->pace == OVL__PACE_CHECKPOINT)
        return op->due_us; /* a deadline the stream set itself */
    return now + OVL__SCHED_TRUST * (op->due_us - now);
}

unsigned ovl__sched_cap(const struct ovl__sched_in *in, const struct ovl__sched_cfg *c, double now,
                        int *predicted)
{
    /* the budget of work that may complete at any moment */
    const double soon = in->conts > 0 ? (double)c->lateness_us : OVL__SCHED_POLL_US;
    double wake = now + OVL__SCHED_LONGEST_US;
    int from_due = 0, predicted_any = 0;
#define CONSIDER(t, due)      \
    do {                      \
        double t_ = (t);      \
        if (t_ < wake) {      \
            wake = t_;        \
            from_due = (due); \
        }                     \
    } while (0)

    /* queued for the driver: at the usual pace (the driver runs them) */
    if (in->deferred > 0 || in->ready)
        CONSIDER(now + soon, 0);
    /* receives a message may match at any moment: urgent ones, or any
     * while a continuation waits, at the usual pace; the others (a delta
     * receive waiting for its message) are patient */
    if (in->urgent || (in->posted && in->conts > 0))
        CONSIDER(now + soon, 0);
    else if (in->posted)
        CONSIDER(now + OVL__SCHED_LONGEST_US, 0);
    int checkpoint = 0;
    for (int i = 0; i < in->n; i++)
        checkpoint |= in->ops[i].pace == OVL__PACE_CHECKPOINT;
    for (int i = 0; i < in->n; i++) {
        const struct ovl__sched_op *op = &in->ops[i];
        double budget;
        switch (op->pace) {
        case OVL__PACE_PATIENT:
            budget = OVL__SCHED_LONGEST_US;
            break;
        case OVL__PACE_STRIP:
            budget = OVL__SCHED_STRIP_US;
            break;
        case OVL__PACE_CHECKPOINT:
            /* the window needs its poll when the checkpoint is due; once
             * overdue (its sender is behind), the window's slack */
            budget = op->due_us > now ? 0 : op->slack_us;
            break;
        case OVL__PACE_FOLLOWS:
            if (checkpoint)
                continue;
            budget = soon;
            break;
        default:
            budget = soon;
            break;
        }
        double t = by_when(op, now);
        predicted_any |= t > now;
        if (t > now + budget)
            CONSIDER(t, 1);
        else
            CONSIDER(now + budget, 0);
    }
#undef CONSIDER
    /* the longest sleep, reached because a predicted completion is
     * further: taken at once too */
    if (predicted_any && wake >= now + OVL__SCHED_LONGEST_US)
        from_due = 1;
    /* serving caps whatever else the rule says, and may exceed the
     * longest sleep when it is all there is; while this rank's own strips
     * are in flight, their polls serve too, at their budget if longer */
    if (in->serving) {
        double pace = c->serve_us;
        for (int i = 0; i < in->n; i++)
            if (in->ops[i].pace == OVL__PACE_STRIP && pace < OVL__SCHED_STRIP_US)
                pace = OVL__SCHED_STRIP_US;
        double s = now + pace;
        if (in->n == 0 && !in->posted && !in->deferred && !in->ready && in->conts == 0)
            wake = s, from_due = 0;
        else if (s < wake) /* a cap, taken at once like a prediction */
            wake = s, from_due = c->serve_us > OVL__SCHED_POLL_US;
    }
    *predicted = from_due;
    double us = wake - now;
    return us < 1 ? 1u : (unsigned)us;
}
