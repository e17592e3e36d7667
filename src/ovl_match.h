/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: match.c: ovl's own matching of comm_msg messages.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_MATCH_H
#define OVL_INTERNAL_MATCH_H

/* ---- match.c ---------------------------------------------------------- */

int ovl__match_init(int size);
void ovl__match_fini(void);
/* Every function acts on the current domain's matching state (domain 0's
 * is match.c's own; the others', the match source's dom_new makes). */
/* Post a receive: matched at once against messages already probed, else
 * pre-posted to MPI (m->prepost, when safe), else queued. Wakes the engine. */
void ovl__match_post(struct ovl__match *m);
/* The MPI receive of a pre-posted receive completed (driver). Returns 1
 * when match.c took the receive back (it was cancelled to let a delta
 * header through: it will be matched again); else the caller completes it
 * (@cancelled: by finalize). */
int ovl__match_prepost_done(struct ovl__match *m, int cancelled);
/* The header of a plain message sent as header + body (message.c, to a
 * peer that has been sent delta messages): 32 bytes, so a probe tells it
 * from a 40-byte delta header by its size. The body follows on comm_delta
 * with tag sid. */
struct ovl__plain_hdr {
    uint32_t magic, sid;
    uint64_t bytes;
    uint64_t reserved[2];
};
#define OVL__PLAIN_MAGIC 0x6f766c50u /* "ovlP" */
/* Probe comm_msg for messages and hand them to posted receives (driver). */
int ovl__match_poll(void);
int ovl__match_posted(void);
/* Posted receives that are not patient (struct ovl__match). */
int ovl__match_urgent(void);
/* Matching as a progress source (poll, posted, urgent), registered by init.c. */
extern const struct ovl__source ovl__match_source;
/* @m (posted, or matched already) is no longer patient. */
void ovl__match_hurry(struct ovl__match *m);
int ovl__match_unexpected_from(int source);
/* Finalize: cancel every posted receive; receive and drop probed messages
 * nobody took. */
/* The MPI tag of a delta header carrying user tag @t. */
static inline int ovl__delta_tag(int t);
/* Helpers for receives matched by match.c: keep a derived datatype alive. */
int ovl__dt_keep(MPI_Datatype dt, MPI_Datatype *out, int *owned);
void ovl__dt_release(struct ovl__req *r);
/* A predefined datatype among the common ones (1), by handle alone; 0 may
 * still be predefined (MPI_Type_get_envelope says). */
int ovl__dt_common(MPI_Datatype dt);

#endif /* OVL_INTERNAL_MATCH_H */
