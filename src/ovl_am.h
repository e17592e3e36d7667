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
/* Handlers run on this rank so far (ovl_stats_t::am_handled). */
uint64_t ovl__am_handled(void);

#endif /* OVL_INTERNAL_AM_H */
