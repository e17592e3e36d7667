/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Coroutines: the "marshal threads" of latency-driven messaging. A marshal
 * function runs on its own stack and is suspended when it must wait (no free
 * fragment buffer, next fragment not arrived); the progress engine resumes it
 * when a completion changes that, on whichever thread is driving. This is a
 * plain context switch (ucontext), not a kernel thread: no core is spent
 * waiting. Stacks are mmap'ed with a guard page below them so an overflow
 * faults instead of corrupting memory. Sanitizer runtimes are told about
 * each switch so ASan/TSan keep working across stacks.
 */
#include "ovl_internal.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define OVL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OVL_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define OVL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OVL_TSAN 1
#endif
#endif

#ifdef OVL_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
                                     size_t *size_old);
#endif
#ifdef OVL_TSAN
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
#endif

struct ovl__coro {
    ucontext_t ctx;   /* the coroutine's context */
    ucontext_t *back; /* the resumer's context (valid while running) */
    ucontext_t back_ctx;
    void *map; /* mmap'ed region: guard page + stack */
    size_t map_size;
    char *stack;
    size_t stack_size;
    ovl__coro_fn fn;
    void *arg;
    int finished;
    int state; /* OVL__CO_*, engine lock */
    void *owner;
    void (*run)(struct ovl__coro *); /* the owner's resume step (ovl__coro_run) */
    struct ovl__coro *next;          /* ready queue link */
    struct ovl__coro *prev_running;  /* coroutine this one was resumed from */
#ifdef OVL_ASAN
    void *fake_stack;
    const void *back_bottom;
    size_t back_size;
#endif
#ifdef OVL_TSAN
    void *fiber;
    void *back_fiber;
#endif
};

int *ovl__coro_state(struct ovl__coro *c)
{
    return &c->state;
}

void *ovl__coro_owner(struct ovl__coro *c)
{
    return c->owner;
}

void ovl__coro_set_owner(struct ovl__coro *c, void *owner, void (*run)(struct ovl__coro *))
{
    c->owner = owner;
    c->run = run;
}

void ovl__coro_run(struct ovl__coro *c)
{
    c->run(c);
}

struct ovl__coro **ovl__coro_next(struct ovl__coro *c)
{
    return &c->next;
}

/* makecontext passes int arguments only: split the pointer in two. */
static void trampoline(unsigned hi, unsigned lo)
{
    struct ovl__coro *c = (struct ovl__coro *)(uintptr_t)(((uint64_t)hi << 32) | (uint64_t)lo);
#ifdef OVL_ASAN
    __sanitizer_finish_switch_fiber(NULL, &c->back_bottom, &c->back_size);
#endif
    c->fn(c->arg);
    c->finished = 1;
#ifdef OVL_ASAN
    /* NULL: this stack is going away, ASan may drop its fake frames. */
    __sanitizer_start_switch_fiber(NULL, c->back_bottom, c->back_size);
#endif
#ifdef OVL_TSAN
    __tsan_switch_to_fiber(c->back_fiber, 0);
#endif
    setcontext(c->back);
}

int ovl__coro_create(size_t stack_size, ovl__coro_fn fn, void *arg, struct ovl__coro **out)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096u;
    stack_size = (stack_size + page - 1) & ~(page - 1);
    struct ovl__coro *c = calloc(1, sizeof *c);
    if (!c)
        return OVL_ERR_NOMEM;
    c->map_size = stack_size + page;
    c->map = mmap(NULL, c->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c->map == MAP_FAILED) {
        free(c);
        return OVL_ERR_NOMEM;
    }
    mprotect(c->map, page, PROT_NONE); /* guard page: overflow faults */
    c->stack = (char *)c->map + page;
    c->stack_size = stack_size;
    c->fn = fn;
    c->arg = arg;
    c->state = OVL__CO_RUNNING;
    if (getcontext(&c->ctx) != 0) {
        munmap(c->map, c->map_size);
        free(c);
        return OVL_ERR_INTERNAL;
    }
    c->ctx.uc_stack.ss_sp = c->stack;
    c->ctx.uc_stack.ss_size = c->stack_size;
    c->ctx.uc_link = NULL;
    uint64_t p = (uint64_t)(uintptr_t)c;
    makecontext(&c->ctx, (void (*)(void))trampoline, 2, (unsigned)(p >> 32),
                (unsigned)(p & 0xffffffffu));
#ifdef OVL_TSAN
    c->fiber = __tsan_create_fiber(0);
#endif
    *out = c;
    return OVL_SUCCESS;
}

int ovl__coro_resume(struct ovl__coro *c)
{
    struct ovl__tls *t = ovl__tls();
    c->prev_running = t->coro;
    t->coro = c;
    c->back = &c->back_ctx;
#ifdef OVL_TSAN
    c->back_fiber = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(c->fiber, 0);
#endif
#ifdef OVL_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, c->stack, c->stack_size);
#endif
    swapcontext(&c->back_ctx, &c->ctx);
#ifdef OVL_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    /* The thread may differ from the one that entered: re-read TLS. */
    t = ovl__tls();
    t->coro = c->prev_running;
    atomic_fetch_add_explicit(&ovl__g.st_switches, 1, memory_order_relaxed);
    return c->finished;
}

void ovl__coro_yield(void)
{
    struct ovl__coro *c = ovl__tls()->coro;
    if (!c)
        return;
#ifdef OVL_ASAN
    __sanitizer_start_switch_fiber(&c->fake_stack, c->back_bottom, c->back_size);
#endif
#ifdef OVL_TSAN
    __tsan_switch_to_fiber(c->back_fiber, 0);
#endif
    swapcontext(&c->ctx, c->back);
#ifdef OVL_ASAN
    __sanitizer_finish_switch_fiber(c->fake_stack, &c->back_bottom, &c->back_size);
#endif
}

void ovl__coro_destroy(struct ovl__coro *c)
{
    if (!c)
        return;
#ifdef OVL_TSAN
    __tsan_destroy_fiber(c->fiber);
#endif
    munmap(c->map, c->map_size);
    free(c);
}
