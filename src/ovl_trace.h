/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: trace.c: the OVL_TRACE timeline.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_TRACE_H
#define OVL_INTERNAL_TRACE_H

/* ---- trace.c: OVL_TRACE timeline ------------------------------------------ */

/* Non-zero while OVL_TRACE records. Test it before building arguments:
 * `if (ovl__trace_on) ovl__trace_complete(...)`. */
extern int ovl__trace_on;
/* Read OVL_TRACE (ovl_init, rank known); write the file (ovl_finalize). */
void ovl__trace_init(void);
void ovl__trace_fini(void);
/* Microseconds on ovl's monotonic clock (ovl__now_ns / 1000): every timing
 * in the library and the trace's timestamps. */
double ovl__now_us(void);
/* A complete event ("ph":"X") that began at @t0_us and lasted @dur_us, with
 * up to three integer arguments (@k* NULL: unused). @cat, @name and the
 * keys must be string literals (stored by pointer). Async-signal-safe: no
 * allocation, no lock (the fault handler records too). */
void ovl__trace_complete(const char *cat, const char *name, double t0_us, double dur_us,
                         const char *k1, long long v1, const char *k2, long long v2, const char *k3,
                         long long v3);
/* An instant event ("ph":"i"). */
void ovl__trace_instant(const char *cat, const char *name, const char *k1, long long v1,
                        const char *k2, long long v2);
/* An instant whose arguments are a JSON object body written by the caller
 * (taken over; freed after writing). Not for signal handlers. */
void ovl__trace_instant_json(const char *cat, const char *name, char *json_args);
/* Name the calling thread in the timeline (@name: a string literal). */
void ovl__trace_thread_name(const char *name);
/* The page-access trace of a watched transfer: @order[0..n) are the page
 * indices in the order the program first touched them, of @npages. */
void ovl__trace_page_access(const void *base, size_t len, size_t npages, const uint32_t *order,
                            size_t n);

static inline int ovl__delta_tag(int t)
{
    return t + ovl__g.tag_ub + 1;
}

#endif /* OVL_INTERNAL_TRACE_H */
