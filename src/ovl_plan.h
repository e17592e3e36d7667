/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: plan.c, the loop-nest planner.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_PLAN_H
#define OVL_INTERNAL_PLAN_H

/* ---- lmad.c: point-order walks ---------------------------------------- */

/* Merge neighbouring dimensions of @l that tile each other (and the
 * element into the first), keeping the order of its points. */
void ovl__lmad_fold(ovl_lmad_t *l);
/* ovl_lmad_runs of an LMAD known valid (a part of a checked one), unchecked. */
void ovl__lmad_runs_of(const ovl_lmad_t *l, ovl_lmad_runs_t *runs);
/* Copy the points of the valid LMAD @l in order between @mem (offsets
 * from it) and the dense @buf: into @mem with @to_mem, else out of it.
 * Returns the bytes moved. */
int64_t ovl__lmad_copy(const ovl_lmad_t *l, char *mem, char *buf, int to_mem);

/* ---- plan.c: the loop-nest planner ------------------------------------- */

/* ovl_init (init.c): register the planner's active-message handler (its
 * PACK protocol's target side). */
void ovl__plan_init(void);

/* ovl_finalize (init.c), before segments are freed: end every plan still
 * executing and free every plan of the cache. */
void ovl__plan_free_all(void);

#endif /* OVL_INTERNAL_PLAN_H */
