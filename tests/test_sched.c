/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_sched: the progress thread's sleep rule (src/sched.c,
 * ovl__sched_cap) on its own, without MPI: each case builds the engine's
 * state by hand and checks the sleep and whether it comes from a predicted
 * completion. The rule: the thread polls next at the earliest
 * max(completion, now + lateness budget) over what is in flight, where a
 * predicted completion is trusted to 75 % of the time left to it.
 *  - work that may complete at any moment (unknown completion, a
 *    rendezvous in its handshake, urgent receives, queued continuations or
 *    coroutines) has the usual budget, 50 us, or OVL_LATENESS_US while a
 *    continuation waits;
 *  - a predicted completion: 75 % of the way to it, no sooner than the
 *    budget, capped by the longest sleep (1 ms);
 *  - patient work: the longest sleep; strips: 100 us;
 *  - a stream checkpoint: its deadline, or its slack once overdue; fragments between
 *    checkpoints follow their checkpoint;
 *  - serving: its pace alone, else a cap on the rest.
 */
#include "ovl_internal.h"

#include <stdio.h>
#include <stdlib.h>

static int checks, failed;

static void expect(const char *what, const struct ovl__sched_in *in, double now, unsigned want,
                   int want_pred)
{
    static const struct ovl__sched_cfg cfg = { .lateness_us = 30, .serve_us = 200 };
    int pred = -1;
    unsigned got = ovl__sched_cap(in, &cfg, now, &pred);
    checks++;
    if (got != want || pred != want_pred) {
        printf("FAIL %s: sleep %u predicted %d, want %u predicted %d\n", what, got, pred, want,
               want_pred);
        failed++;
    }
}

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

int main(void)
{
    const double now = 1e6;
    struct ovl__sched_in in;

    if (ovl__sched_poll_us() != 50 || ovl__sched_longest_us() != 1000) {
        printf("FAIL budgets: usual %u, longest %u\n", ovl__sched_poll_us(),
               ovl__sched_longest_us());
        failed++;
    }

    /* nothing in flight (the thread then waits idle; the rule says the
     * longest sleep); receives posted */
    in = (struct ovl__sched_in){ 0 };
    expect("nothing", &in, now, 1000, 0);
    in = (struct ovl__sched_in){ .posted = 1 };
    expect("only patient receives posted", &in, now, 1000, 0);
    in = (struct ovl__sched_in){ .posted = 1, .urgent = 1 };
    expect("an urgent receive", &in, now, 50, 0);
    in = (struct ovl__sched_in){ .posted = 1, .conts = 1 };
    expect("a posted receive while a continuation waits", &in, now, 30, 0);
    in = (struct ovl__sched_in){ .deferred = 1 };
    expect("a deferred continuation", &in, now, 50, 0);
    in = (struct ovl__sched_in){ .ready = 1 };
    expect("a ready coroutine", &in, now, 50, 0);

    /* one transfer with a predicted completion: far, mid-way, close by */
    const struct ovl__sched_op far[] = { { .due_us = now + 10000 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = far };
    expect("due in 10 ms: the longest sleep", &in, now, 1000, 1);
    const struct ovl__sched_op mid[] = { { .due_us = now + 500 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = mid };
    expect("due in 500 us: 75 % of the way", &in, now, 375, 1);
    const struct ovl__sched_op close[] = { { .due_us = now + 20 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = close };
    expect("due in 20 us: the budget", &in, now, 50, 0);
    const struct ovl__sched_op overdue[] = { { .due_us = now - 100 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = overdue };
    expect("overdue: the budget alone", &in, now, 50, 0);
    const struct ovl__sched_op two[] = { { .due_us = now + 10000 }, { .due_us = now + 500 } };
    in = (struct ovl__sched_in){ .n = N(two), .ops = two };
    expect("the earliest of two", &in, now, 375, 1);

    /* a continuation waits: every budget of work that may complete soon
     * is the lateness budget */
    in = (struct ovl__sched_in){ .conts = 1, .n = 1, .ops = mid };
    expect("a continuation waits", &in, now, 375, 1);
    const struct ovl__sched_op soon[] = { { .due_us = now + 60 } };
    in = (struct ovl__sched_in){ .conts = 1, .n = 1, .ops = soon };
    expect("a continuation waits, due in 60 us: 75 % of the way", &in, now, 45, 1);
    const struct ovl__sched_op unknown1[] = { { .due_us = 0 } };
    in = (struct ovl__sched_in){ .conts = 1, .n = 1, .ops = unknown1 };
    expect("a continuation waits, completion unknown", &in, now, 30, 0);

    /* ops of other paces */
    const struct ovl__sched_op patient[] = { { .pace = OVL__PACE_PATIENT } };
    in = (struct ovl__sched_in){ .n = 1, .ops = patient };
    expect("only patient ops", &in, now, 1000, 0);
    in = (struct ovl__sched_in){ .conts = 1, .n = 1, .ops = patient };
    expect("patient ops keep their budget while a continuation waits", &in, now, 1000, 0);
    const struct ovl__sched_op unknown[] = { { .due_us = now + 10000 }, { .due_us = 0 } };
    in = (struct ovl__sched_in){ .n = N(unknown), .ops = unknown };
    expect("an op of unknown completion", &in, now, 50, 0);
    const struct ovl__sched_op mixed[] = { { .pace = OVL__PACE_PATIENT },
                                           { .due_us = now + 1000 } };
    in = (struct ovl__sched_in){ .n = N(mixed), .ops = mixed };
    expect("patient and predicted", &in, now, 750, 1);
    const struct ovl__sched_op strip[] = { { .pace = OVL__PACE_STRIP } };
    in = (struct ovl__sched_in){ .n = 1, .ops = strip };
    expect("only strips", &in, now, 100, 0);
    in = (struct ovl__sched_in){ .n = 1, .urgent = 1, .posted = 1, .ops = strip };
    expect("strips and an urgent receive", &in, now, 50, 0);

    /* stream checkpoints, and the fragments between them */
    const struct ovl__sched_op chk[] = {
        { .pace = OVL__PACE_CHECKPOINT, .due_us = now + 400, .slack_us = 300 }
    };
    in = (struct ovl__sched_in){ .n = 1, .ops = chk };
    expect("a checkpoint: its deadline", &in, now, 400, 1);
    const struct ovl__sched_op late[] = {
        { .pace = OVL__PACE_CHECKPOINT, .due_us = now - 10, .slack_us = 300 }
    };
    in = (struct ovl__sched_in){ .n = 1, .ops = late };
    expect("an overdue checkpoint: its slack", &in, now, 300, 0);
    const struct ovl__sched_op frag_chk[] = {
        { .pace = OVL__PACE_FOLLOWS },
        { .pace = OVL__PACE_CHECKPOINT, .due_us = now + 400, .slack_us = 100 }
    };
    in = (struct ovl__sched_in){ .n = N(frag_chk), .ops = frag_chk };
    expect("fragments follow their checkpoint", &in, now, 400, 1);
    const struct ovl__sched_op frag[] = { { .pace = OVL__PACE_FOLLOWS } };
    in = (struct ovl__sched_in){ .n = 1, .ops = frag };
    expect("fragments with no checkpoint: the usual budget", &in, now, 50, 0);

    /* serving */
    in = (struct ovl__sched_in){ .serving = 1 };
    expect("serving only: its pace", &in, now, 200, 0);
    in = (struct ovl__sched_in){ .serving = 1, .n = 1, .ops = far };
    expect("serving caps a long sleep", &in, now, 200, 1);
    in = (struct ovl__sched_in){ .serving = 1, .n = 1, .ops = strip };
    expect("serving with strips of its own: their budget", &in, now, 100, 0);
    in = (struct ovl__sched_in){ .serving = 1, .n = 1, .ops = close };
    expect("serving leaves a short one", &in, now, 50, 0);

    /* the CPUs a rank counts as its own (whether the progress thread has
     * one: on-node work is polled at the patient pace without) */
    static const struct {
        int affinity;
        long online;
        int ranks, want;
        const char *what;
    } cpus[] = {
        { 2, 2, 2, 1, "2 unbound ranks on 2 CPUs: one each" },
        { 1, 2, 2, 1, "bound to one CPU" },
        { 64, 64, 8, 8, "8 unbound ranks on 64 CPUs" },
        { 4, 64, 8, 4, "bound to 4 of 64" },
        { 2, 2, 4, 1, "more ranks than CPUs: still one" },
        { 0, 16, 1, 16, "affinity unknown: the share" },
        { 8, -1, 1, 8, "online unknown: the affinity" },
        { 8, 16, 0, 8, "no rank count: the node's CPUs, capped by the affinity" },
        { 0, 0, 2, 1, "nothing known: one" },
    };
    for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; i++) {
        int got = ovl__sched_cpus_per_rank(cpus[i].affinity, cpus[i].online, cpus[i].ranks);
        checks++;
        if (got != cpus[i].want) {
            printf("FAIL cpus per rank, %s: %d, want %d\n", cpus[i].what, got, cpus[i].want);
            failed++;
        }
    }

    printf("test_sched: %d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}
