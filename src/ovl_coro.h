/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: coro.c: coroutines.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_CORO_H
#define OVL_INTERNAL_CORO_H

/* ---- coro.c ----------------------------------------------------------- */

typedef void (*ovl__coro_fn)(void *arg);
struct ovl__coro;
int ovl__coro_create(size_t stack_size, ovl__coro_fn fn, void *arg, struct ovl__coro **out);
/* Run @c until it yields or returns. Returns 1 if it has finished. */
int ovl__coro_resume(struct ovl__coro *c);
/* From inside a coroutine: go back to whoever resumed it. */
void ovl__coro_yield(void);
void ovl__coro_destroy(struct ovl__coro *c);
/* Scheduling state of a coroutine, kept by stream.c and progress.c under the
 * engine lock: RUNNING (some thread is in it), WAITING (parked until a
 * completion makes it ready), READY (queued for the driver), DONE. */
enum { OVL__CO_RUNNING, OVL__CO_WAITING, OVL__CO_READY, OVL__CO_DONE };
int *ovl__coro_state(struct ovl__coro *c);
void *ovl__coro_owner(struct ovl__coro *c);
/* @owner and its step that resumes @c and handles what follows, which the
 * engine's driver runs for a ready coroutine (ovl__coro_run). */
void ovl__coro_set_owner(struct ovl__coro *c, void *owner, void (*run)(struct ovl__coro *));
void ovl__coro_run(struct ovl__coro *c);
struct ovl__coro **ovl__coro_next(struct ovl__coro *c);

#endif /* OVL_INTERNAL_CORO_H */
