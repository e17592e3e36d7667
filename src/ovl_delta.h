/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: delta_*.c: delta send/receive, seen from the other layers.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_DELTA_H
#define OVL_INTERNAL_DELTA_H

/* ---- delta_wire.c, delta_send.c, delta_recv.c ------------------------- */

struct ovl__delta;
/* A fresh delta id: the tag of a message's pieces (or body) on comm_delta. */
unsigned ovl__delta_new_sid(void);
/* Give back @sid, taken by a call that then failed before using it, if no
 * id was taken since (a gap otherwise: ids need only be distinct). */
void ovl__delta_return_sid(unsigned sid);
/* A receive posted by ovl_irecv / ovl_delta_recv matched a delta header. */
void ovl__delta_matched_header(struct ovl__req *r, MPI_Message msg, MPI_Status *st);
/* What ovl_finalize ends and waits for (struct ovl__source). */
extern const struct ovl__source ovl__delta_source;
/* Free a delta state (its request's release hook, and failed posts). */
void ovl__delta_free(struct ovl__delta *d);
/* Fault injection, for tests only (no public call or variable reaches
 * it): the @n-th piece delta send @req sends from now on (1: the next)
 * finds no memory, as if malloc or ovl__page_alloc had returned NULL; 0
 * disarms. The pieces before it leave as usual. Costs the normal path one
 * test of a field per piece. OVL_ERR_REQUEST: not a delta send. */
int ovl__delta_fail_piece(ovl_request_t req, unsigned n);

#endif /* OVL_INTERNAL_DELTA_H */
