/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: segment.c, rma.c: one-sided get/put.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_RMA_H
#define OVL_INTERNAL_RMA_H

/* ---- segment.c, rma.c: one-sided get/put ------------------------------- */

struct ovl__seg {
    MPI_Win win; /* domain 0's (MPI_Win_allocate); ovl_lock's atomics */
    /* every domain's window over the same memory, by domain index
     * (OVL_DOMAINS_MAX entries, MPI_WIN_NULL where none; [0] is win) */
    MPI_Win *dwin;
    size_t win_bytes; /* each window's size at this rank */
    char *base;
    size_t bytes;   /* this rank's size */
    size_t *sizes;  /* every rank's size (checked before each transfer) */
    size_t lock_at; /* offset of the hidden lock word (ovl_lock) */
    uint32_t slot, gen;
    int live;
    /* ovl_segment_hint (rma.c, under its lock); segment.c sets the defaults */
    unsigned decomp, piggyback;
    int piggy_hint; /* piggyback was set: its count decides trains */
    ovl_order_t order;
};
/* A valid segment for a handle, or an error recorded for @fn. */
int ovl__seg_lookup(const char *fn, ovl_segment_t h, struct ovl__seg **out);
/* The live segment of handle @h, or NULL (nothing reported). */
struct ovl__seg *ovl__seg_find(ovl_segment_t h);
/* Retire every outstanding transfer on @s (NULL: all) to @rank (-1: all)
 * issued on domain @d (NULL: every domain): gets installed, puts left and
 * flushed. Blocking; drives each transfer's domain. */
int ovl__rma_retire(struct ovl__seg *s, int rank, struct ovl__dom *d);
/* The window of @s that domain @d's transfers use. */
MPI_Win ovl__seg_win(const struct ovl__seg *s, const struct ovl__dom *d);
/* Flush @s's window of @d (NULL: every one) to @rank (-1: all); an MPI code. */
int ovl__seg_flush(struct ovl__seg *s, const struct ovl__dom *d, int rank);
/* Transfers outstanding on @s (NULL: any). */
int ovl__rma_outstanding(struct ovl__seg *s);
/* Progress hook (driver): keeps passive-target RMA moving while segments exist. */
int ovl__rma_poll(void);
/* Serving others' RMA as a progress source (poll, serving), registered by init.c. */
extern const struct ovl__source ovl__rma_source;
int ovl__rma_wants_progress(void);
/* Whether this rank serves others' one-sided operations while a segment
 * lives (segment.c's probe, or OVL_SERVE_US set); 0 before the first
 * segment. */
int ovl__rma_serving(void);
/* That decision in words for OVL_STATS; the source's forget hook clears
 * it, and the decision itself, at the end of ovl_finalize. */
const char *ovl__rma_serving_said(void);
/* ovl_finalize (the source's close hook): free leftover segments
 * (collective), reset the counters. */
void ovl__rma_finalize(void);
void ovl__rma_stats(ovl_stats_t *s);
void ovl__segment_free_all(void);
/* ovl__seg_flush of every live segment (every domain's windows). */
int ovl__seg_flush_all(void);

#endif /* OVL_INTERNAL_RMA_H */
