/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_sched: the progress thread's sleep rule (src/sched.c,
 * ovl__sched_cap) on its own, without MPI: each case builds the engine's
 * state by hand and checks the cap and whether it comes from predicted
 * completions.
 *  - urgent work (deferred continuations, ready coroutines, urgent
 *    receives) keeps the usual pace; a waiting continuation the callback
 *    pace;
 *  - a predicted completion far away lets the thread sleep a share of the
 *    way to it, capped by the quiet interval; one close by does not;
 *  - patient ops set no pace, quiet ones keep the usual pace, an op of
 *    unknown completion or in its handshake the usual pace;
 *  - a stream checkpoint sleeps until it is due, or for its slack when
 *    overdue;
 *  - strips alone take the RMA pace; serving alone the serving pace, and
 *    serving caps whatever else the rule says.
 */
#include "ovl_internal.h"

#include <stdio.h>
#include <stdlib.h>

static int checks, failed;

static void expect(const char *what, const struct ovl__sched_in *in, double now, unsigned want,
                   int want_pred)
{
    static const struct ovl__sched_cfg cfg = {
        .max_us = 50,
        .quiet_us = 1000,
        .callback_us = 30,
        .rma_us = 100,
        .serve_us = 200,
        .quiet_share = 75,
    };
    int pred = -1;
    unsigned got = ovl__sched_cap(in, &cfg, now, &pred);
    checks++;
    if (got != want || pred != want_pred) {
        printf("FAIL %s: cap %u predicted %d, want %u predicted %d\n", what, got, pred, want,
               want_pred);
        failed++;
    }
}

#define OPS(...) ((const struct ovl__sched_op[]){ __VA_ARGS__ })
#define N(a)     ((int)(sizeof(a) / sizeof((a)[0])))

int main(void)
{
    const double now = 1e6;
    struct ovl__sched_in in;

    /* nothing at all: patient receives not yet matched count as posted */
    in = (struct ovl__sched_in){ 0 };
    expect("idle", &in, now, 50, 0);
    in = (struct ovl__sched_in){ .posted = 1 };
    expect("only patient receives posted", &in, now, 1000, 0);
    in = (struct ovl__sched_in){ .posted = 1, .urgent = 1 };
    expect("an urgent receive", &in, now, 50, 0);
    in = (struct ovl__sched_in){ .deferred = 1 };
    expect("a deferred continuation", &in, now, 50, 0);
    in = (struct ovl__sched_in){ .ready = 1 };
    expect("a ready coroutine", &in, now, 50, 0);

    /* one sized transfer, due far away, half-way, close by */
    const struct ovl__sched_op far[] = { { .due_us = now + 10000 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = far };
    expect("due in 10 ms: the quiet interval", &in, now, 1000, 1);
    const struct ovl__sched_op mid[] = { { .due_us = now + 500 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = mid };
    expect("due in 500 us: 75 % of the way to one interval before", &in, now,
           (unsigned)((500 - 50) * 0.75), 1);
    const struct ovl__sched_op close[] = { { .due_us = now + 100 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = close };
    expect("due in 100 us: the usual pace", &in, now, 50, 0);
    /* the earliest of several counts */
    const struct ovl__sched_op two[] = { { .due_us = now + 10000 }, { .due_us = now + 500 } };
    in = (struct ovl__sched_in){ .n = N(two), .ops = two };
    expect("the earliest of two", &in, now, (unsigned)((500 - 50) * 0.75), 1);

    /* a continuation waits on it: the callback pace, same quiet middle */
    in = (struct ovl__sched_in){ .conts = 1, .n = 1, .ops = mid };
    expect("a continuation waits", &in, now, (unsigned)((500 - 30) * 0.75), 1);
    const struct ovl__sched_op near[] = { { .due_us = now + 60 } };
    in = (struct ovl__sched_in){ .conts = 1, .n = 1, .ops = near };
    expect("a continuation waits, due soon", &in, now, 30, 0);

    /* ops that set no pace, or the usual one */
    const struct ovl__sched_op patient[] = { { .patient = 1, .due_us = now + 100 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = patient };
    expect("only patient ops", &in, now, 1000, 0);
    const struct ovl__sched_op quiet[] = { { .quiet = 1, .due_us = now + 10000 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = quiet };
    expect("only quiet fragments", &in, now, 50, 0);
    const struct ovl__sched_op unknown[] = { { .due_us = now + 10000 }, { .due_us = 0 } };
    in = (struct ovl__sched_in){ .n = N(unknown), .ops = unknown };
    expect("an op of unknown completion", &in, now, 50, 0);
    const struct ovl__sched_op hs[] = { { .due_us = now + 10000 },
                                        { .handshake = 1, .due_us = now + 10000 } };
    in = (struct ovl__sched_in){ .n = N(hs), .ops = hs };
    expect("a rendezvous in its handshake", &in, now, 50, 0);
    const struct ovl__sched_op mixed[] = { { .patient = 1, .due_us = 0 },
                                           { .due_us = now + 10000 } };
    in = (struct ovl__sched_in){ .n = N(mixed), .ops = mixed };
    expect("a patient op of unknown completion is ignored", &in, now, 1000, 1);

    /* stream checkpoints */
    const struct ovl__sched_op chk[] = { { .due_us = now + 400, .slack_us = 300 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = chk };
    expect("a checkpoint: until it is due", &in, now, 400, 1);
    const struct ovl__sched_op late[] = { { .due_us = now - 10, .slack_us = 300 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = late };
    expect("an overdue checkpoint: its slack", &in, now, 300, 1);
    const struct ovl__sched_op soon[] = { { .due_us = now + 20, .slack_us = 300 } };
    in = (struct ovl__sched_in){ .n = 1, .ops = soon };
    expect("a checkpoint due within the usual interval", &in, now, 50, 0);

    /* get/put strips, and serving */
    in = (struct ovl__sched_in){ .n = 1, .nrma = 1, .ops = far };
    expect("only strips: the RMA pace", &in, now, 100, 0);
    in = (struct ovl__sched_in){ .n = 1, .nrma = 1, .urgent = 1, .posted = 1, .ops = far };
    expect("strips and an urgent receive", &in, now, 50, 0);
    in = (struct ovl__sched_in){ .serving = 1 };
    expect("serving only", &in, now, 200, 0);
    in = (struct ovl__sched_in){ .serving = 1, .n = 1, .ops = far };
    expect("serving caps a long sleep", &in, now, 200, 1);
    in = (struct ovl__sched_in){ .serving = 1, .n = 1, .ops = close };
    expect("serving leaves a short one", &in, now, 50, 0);

    printf("test_sched: %d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}
