/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The mprotect backend: portable page protection. Receive: interior pages
 * are PROT_NONE until their data is there; the data is written through
 * /proc/self/mem, which ignores the protection, so a page is opened only
 * when it is complete (a reader never sees half of it). Send: pages after
 * the current delta are read-only; the first write to one is the signal
 * that everything before it is final.
 *
 * Buffers must be ordinary read-write memory: opening restores
 * PROT_READ | PROT_WRITE.
 *
 * The alias backend is the same protection for ovl_alloc memory (alloc.c),
 * whose pages are mapped a second time: bytes go there with memcpy, or MPI
 * writes them there directly (recv_landing), so nothing passes through
 * /proc/self/mem, and shared memory is no obstacle.
 */
#include "watch_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

static int prot(struct ovl__watch *w, size_t i, size_t j, int p)
{
    if (i >= j)
        return 0;
    return mprotect(ovl__watch_page_addr(w, i), (j - i) * ovl__watch_page(), p) == 0 ? 0 : errno;
}

static int recv_guard(struct ovl__watch *w)
{
    char *a = ovl__watch_page_addr(w, w->ilo);
    return ovl__watch_protect_probed(a, (w->ihi - w->ilo) * ovl__watch_page(), (uintptr_t)a);
}

static void recv_place(struct ovl__watch *w, size_t off, const void *src, size_t len)
{
    ovl__watch_poke(w->base + off, src, len);
}

static int recv_open(struct ovl__watch *w, size_t i, size_t j)
{
    return prot(w, i, j, PROT_READ | PROT_WRITE);
}

static void recv_done(struct ovl__watch *w)
{
    /* One call over the whole range also merges the mappings again. If
     * the map count is exhausted, open page by page (each may merge). */
    if (prot(w, w->ilo, w->ihi, PROT_READ | PROT_WRITE) == 0)
        return;
    for (size_t i = w->ilo; i < w->ihi; i++)
        if (prot(w, i, i + 1, PROT_READ | PROT_WRITE) != 0)
            ovl__report(OVL_ERR_MONITOR, "ovl delta receive", "cannot open page %zu: %s", i,
                        strerror(errno));
}

static int send_guard(struct ovl__watch *w)
{
    (void)w;
    return 0;
}

static int send_protect(struct ovl__watch *w, size_t i, size_t j, int protect)
{
    return prot(w, i, j, protect ? PROT_READ : PROT_READ | PROT_WRITE);
}

static void send_done(struct ovl__watch *w)
{
    prot(w, w->ilo, w->ihi, PROT_READ | PROT_WRITE);
}

static int alias_guard(struct ovl__watch *w)
{
    return prot(w, w->ilo, w->ihi, PROT_NONE);
}

static void alias_place(struct ovl__watch *w, size_t off, const void *src, size_t len)
{
    if (w->alias + off != src) /* else MPI wrote it in place */
        memcpy(w->alias + off, src, len);
}

static char *alias_landing(struct ovl__watch *w)
{
    return w->alias;
}

const struct ovl__watch_backend ovl__watch_alias = {
    .recv_guard = alias_guard,
    .recv_place = alias_place,
    .recv_open = recv_open,
    .recv_done = recv_done,
    .recv_landing = alias_landing,
    .send_guard = send_guard,
    .send_protect = send_protect,
    .send_done = send_done,
};

const struct ovl__watch_backend ovl__watch_mprotect = {
    .recv_guard = recv_guard,
    .recv_place = recv_place,
    .recv_open = recv_open,
    .recv_done = recv_done,
    .send_guard = send_guard,
    .send_protect = send_protect,
    .send_done = send_done,
};
