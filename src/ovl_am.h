/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: am.c: active messages.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_AM_H
#define OVL_INTERNAL_AM_H

/* Active-message reception and the requests waiting for replies, as a
 * progress source of engine 0 (registered by init.c). */
extern const struct ovl__source ovl__am_source;
/* ovl's own handler ids, after the program's 0 .. OVL_AM_MAX - 1 */
enum { OVL__AM_PLAN = OVL_AM_MAX, OVL__AM_IDS };
/* Register ovl's own handler @id (>= OVL_AM_MAX; ovl_finalize keeps it). */
void ovl__am_register(int id, ovl_am_fn fn, void *arg);
/* ovl_am_call (a NULL @reply: ovl_am_request) for any id, ovl's own
 * included; errors recorded for @fn. */
int ovl__am_call(const char *fn, int rank, int id, const void *buf, size_t bytes, void *reply,
                 size_t reply_cap, ovl_request_t *req);
/* A tag of comm_am_bulk for data a handler sends back to this rank (its
 * own range: never that of a large request's payload). */
int ovl__am_data_tag(void);
/* Handlers run on this rank so far (ovl_stats_t::am_handled). */
uint64_t ovl__am_handled(void);

#endif /* OVL_INTERNAL_AM_H */
