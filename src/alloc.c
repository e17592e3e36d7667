/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl_alloc: memory mapped twice. The pages of a memfd are mapped at the
 * address the program sees (the "view") and once more at an address only
 * ovl writes (the "alias"). While a delta receive or a get is pending, the
 * access monitor guards the view's pages; MPI and ovl write arriving bytes
 * through the alias, which is never guarded, so a receive needs neither a
 * staging copy nor a write through /proc/self/mem. Opening a complete page
 * is then one mprotect of the view (watch_mprotect.c, the alias backend).
 *
 * Without memfd (an old kernel, a seccomp filter) ovl_alloc falls back to
 * private anonymous memory, which the monitors handle as any other buffer.
 */
#include "ovl_internal.h"
#include "watch_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct block {
    char *view, *alias; /* alias NULL: the fallback, mapped once */
    size_t bytes;       /* mapped length (whole pages) */
};

static struct {
    pthread_mutex_t lock;
    struct block *v;
    size_t n, cap;
} A = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int map_twice(size_t bytes, char **view, char **alias)
{
    int fd = memfd_create("ovl_alloc", MFD_CLOEXEC);
    if (fd < 0)
        return errno;
    int err = 0;
    *view = *alias = MAP_FAILED;
    if (ftruncate(fd, (off_t)bytes) != 0)
        err = errno;
    if (!err &&
        (*view = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        err = errno;
    if (!err &&
        (*alias = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        err = errno;
        munmap(*view, bytes);
    }
    close(fd); /* the mappings keep the pages */
    return err;
}

int ovl_alloc(size_t bytes, void *baseptr)
{
    static const char *fn = "ovl_alloc";
    if (!baseptr)
        return ovl__error(OVL_ERR_ARG, fn, "baseptr is NULL");
    size_t ps = ovl__watch_page();
    if (bytes > (size_t)INT64_MAX - ps) /* an off_t for ftruncate */
        return ovl__error(OVL_ERR_NOMEM, fn, "%zu bytes cannot be mapped", bytes);
    size_t len = bytes ? (bytes + ps - 1) / ps * ps : ps;
    char *view = NULL, *alias = NULL;
    int err = map_twice(len, &view, &alias);
    if (err == ENOSYS || err == EPERM || err == EACCES || err == EINVAL) {
        alias = NULL; /* no memfd here: memory the monitors guard as any other */
        view = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        err = view == MAP_FAILED ? errno : 0;
    }
    if (err)
        return ovl__error(OVL_ERR_NOMEM, fn, "cannot map %zu bytes: %s%s", len, strerror(err),
                          err == ENOMEM ? " (out of memory, or vm.max_map_count reached)" : "");
    pthread_mutex_lock(&A.lock);
    if (A.n == A.cap) {
        size_t ncap = A.cap ? 2 * A.cap : 16;
        struct block *nv = realloc(A.v, ncap * sizeof *nv);
        if (!nv) {
            pthread_mutex_unlock(&A.lock);
            munmap(view, len);
            if (alias)
                munmap(alias, len);
            return ovl__error(OVL_ERR_NOMEM, fn, "no memory to record the block");
        }
        A.v = nv;
        A.cap = ncap;
    }
    A.v[A.n++] = (struct block){ view, alias, len };
    pthread_mutex_unlock(&A.lock);
    *(void **)baseptr = view;
    return OVL_SUCCESS;
}

int ovl_free(void *base)
{
    static const char *fn = "ovl_free";
    if (!base)
        return OVL_SUCCESS;
    pthread_mutex_lock(&A.lock);
    size_t k = 0;
    while (k < A.n && A.v[k].view != base)
        k++;
    if (k == A.n) {
        pthread_mutex_unlock(&A.lock);
        return ovl__error(OVL_ERR_ARG, fn,
                          "%p was not returned by ovl_alloc (or was already freed)", base);
    }
    struct block b = A.v[k];
    if (ovl__watch_pending(b.view, b.bytes, 0)) {
        pthread_mutex_unlock(&A.lock);
        return ovl__error(OVL_ERR_PENDING, fn,
                          "a delta transfer or get/put on [%p, +%zu) is still pending: wait "
                          "for it first",
                          base, b.bytes);
    }
    A.v[k] = A.v[--A.n];
    pthread_mutex_unlock(&A.lock);
    munmap(b.view, b.bytes);
    if (b.alias)
        munmap(b.alias, b.bytes);
    return OVL_SUCCESS;
}

char *ovl__alloc_alias(const void *base, size_t len)
{
    uintptr_t a = (uintptr_t)base;
    char *out = NULL;
    pthread_mutex_lock(&A.lock);
    for (size_t k = 0; k < A.n && !out; k++) {
        uintptr_t lo = (uintptr_t)A.v[k].view;
        if (A.v[k].alias && a >= lo && a - lo <= A.v[k].bytes && len <= A.v[k].bytes - (a - lo))
            out = A.v[k].alias + (a - lo);
    }
    pthread_mutex_unlock(&A.lock);
    return out;
}
