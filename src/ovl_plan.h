/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: plan.c, the loop-nest planner.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_PLAN_H
#define OVL_INTERNAL_PLAN_H

/* ---- plan.c: the loop-nest planner ------------------------------------- */

/* ovl_finalize (init.c), before segments are freed: end every plan still
 * executing and free every plan of the cache. */
void ovl__plan_free_all(void);

#endif /* OVL_INTERNAL_PLAN_H */
