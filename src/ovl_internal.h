/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations shared by the files of libovl. Nothing here is
 * public. The layers, bottom up:
 *   error.c, config.c   -- error table and details; options from cfg/env
 *   request.c           -- the request table: generation-checked handles
 *   progress.c          -- the progress engine: MPI requests in flight,
 *                          their completion handlers, the progress thread
 *   domain.c            -- communication domains: an engine instance, its
 *                          communicators and matching state each
 *   coro.c              -- coroutines that run marshal functions
 *   continue.c          -- continuations on ovl and plain MPI requests
 *   match.c             -- ovl's own matching of comm_msg messages (plain
 *                          and delta) to posted receives, with MPI_Improbe
 *   watch.c, watch_*.c  -- the access monitor: regions whose pages become
 *                          valid over time; backends uffd, mprotect, explicit
 *   model.c             -- the performance model: link calibration, delta size
 *   measure.c           -- the timed measurements the model's figures come from
 *   message.c, stream.c -- front ends: point-to-point and marshal streams
 *   delta_*.c           -- front end: delta send/receive (wire, send, recv)
 *   am.c                -- front end: active messages (handlers on domain 0)
 *   plan.c              -- front end: the loop-nest planner (plans over get)
 *   init.c              -- ovl_init / ovl_finalize and the global state
 * Each layer's declarations are in its own header, src/ovl_<layer>.h
 * (error, request, engine, domain, match, watch, model, delta, rma, coro, stream, am,
 * plan, global, trace), included below in that order; a file includes this one.
 */
#ifndef OVL_INTERNAL_H
#define OVL_INTERNAL_H

#include "ovl.h"
#include "measure.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdbool.h>

#define OVL__UNUSED(x) ((void)(x))

/* One header per layer, bottom up (each needs the ones before it). */
#include "ovl_error.h"
#include "ovl_request.h"
#include "ovl_engine.h"
#include "ovl_domain.h"
#include "ovl_match.h"
#include "ovl_watch.h"
#include "ovl_model.h"
#include "ovl_delta.h"
#include "ovl_rma.h"
#include "ovl_coro.h"
#include "ovl_stream.h"
#include "ovl_am.h"
#include "ovl_plan.h"
#include "ovl_global.h"
#include "ovl_trace.h"

#endif /* OVL_INTERNAL_H */
