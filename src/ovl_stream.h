/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: stream.c: marshal streams.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_STREAM_H
#define OVL_INTERNAL_STREAM_H

/* ---- stream.c --------------------------------------------------------- */

/* What ovl_finalize waits for (struct ovl__source: its send streams,
 * then every stream). */
extern const struct ovl__source ovl__stream_source;
/* Every how many fragments a stream asks for a poll (its
 * checkpoints; the fragments between them are quiet), with @window
 * fragments in flight of @frag_bytes at @bw_Bpus: half the window for a
 * send; for a receive, which cannot know which fragment is the last one,
 * 1 + @age_us (how long it has been arriving) / 20 fragment times, at most
 * half the window, so its end is seen at most 5 % of its age late. 1
 * (every fragment) without a model or with a window below 4. */
unsigned ovl__stream_stride(unsigned window, size_t frag_bytes, double bw_Bpus, int is_send,
                            double age_us);

#endif /* OVL_INTERNAL_STREAM_H */
