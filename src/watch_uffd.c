/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The userfaultfd backend, in SIGBUS mode: a fault on a registered page is
 * delivered as SIGBUS to the faulting thread, which resolves it itself
 * (watch.c's handler), so no handler thread has to be woken.
 *
 * Receive: interior pages are emptied (MADV_DONTNEED: their old contents
 * are about to be overwritten) and registered for missing-page faults.
 * Arriving bytes go to a page-aligned shadow of those pages; a page that is
 * complete is installed atomically with UFFDIO_COPY, so a reader sees
 * either a fault or the whole page, and the mapping is never split (no
 * vm.max_map_count pressure). Pages beyond the real message end read as
 * zero.
 *
 * Send: interior pages are registered for write-protect faults and
 * protected with UFFDIO_WRITEPROTECT (reads never fault).
 */

#include "watch_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static int ufd = -1;
static uint64_t features;

int ovl__uffd_fd(void)
{
    return ufd;
}

static int new_fd(int flags)
{
#ifdef SYS_userfaultfd
    int fd = (int)syscall(SYS_userfaultfd, flags);
    if (fd >= 0)
        return fd;
#endif
    int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev < 0)
        return -1;
    int fd2 = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
    close(dev);
    return fd2;
}

int ovl__uffd_open(char *why, size_t why_len)
{
    if (ufd >= 0) {
        snprintf(why, why_len, "userfaultfd in SIGBUS mode works");
        return 0;
    }
    const int base = O_CLOEXEC | O_NONBLOCK;
    const char *mode = "UFFD_USER_MODE_ONLY";
    int fd = new_fd(base | UFFD_USER_MODE_ONLY);
    if (fd < 0) {
        mode = "full";
        fd = new_fd(base);
    }
    if (fd < 0) {
        int e = errno;
        snprintf(
            why, why_len,
            "userfaultfd unavailable (%s): needs CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1, "
            "access to /dev/userfaultfd, or UFFD_USER_MODE_ONLY support (Linux >= 5.11)",
            strerror(e));
        return -1;
    }
    /* Ask what the kernel supports on a throw-away descriptor (the API
     * handshake happens once per descriptor). */
    struct uffdio_api api = { .api = UFFD_API, .features = 0 };
    uint64_t avail = 0;
    int probe = new_fd(base | (strcmp(mode, "full") ? UFFD_USER_MODE_ONLY : 0));
    if (probe >= 0) {
        if (ioctl(probe, UFFDIO_API, &api) == 0)
            avail = api.features;
        close(probe);
    }
    uint64_t want = UFFD_FEATURE_SIGBUS;
    if (!(avail & UFFD_FEATURE_SIGBUS)) {
        close(fd);
        snprintf(why, why_len, "userfaultfd lacks UFFD_FEATURE_SIGBUS (Linux >= 4.14)");
        return -1;
    }
    if (avail & UFFD_FEATURE_WP_UNPOPULATED)
        want |= UFFD_FEATURE_WP_UNPOPULATED;
    api.api = UFFD_API;
    api.features = want;
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        int e = errno;
        close(fd);
        snprintf(why, why_len, "UFFDIO_API failed: %s", strerror(e));
        return -1;
    }
    features = want;
    ufd = fd;
    snprintf(why, why_len, "userfaultfd (%s, SIGBUS mode%s) works", mode,
             (want & UFFD_FEATURE_WP_UNPOPULATED) ? ", write-protect of unpopulated pages" : "");
    return 0;
}

void ovl__uffd_close(void)
{
    /* kept for the life of the process: regions of a later ovl_init use it */
}

static int reg(struct ovl__watch *w, size_t i, size_t j, uint64_t mode)
{
    struct uffdio_register r = {
        .range = { .start = (uintptr_t)ovl__watch_page_addr(w, i),
                   .len = (j - i) * ovl__watch_page() },
        .mode = mode,
    };
    return ioctl(ufd, UFFDIO_REGISTER, &r) == 0 ? 0 : errno;
}

static void unreg(struct ovl__watch *w, size_t i, size_t j)
{
    struct uffdio_range r = { .start = (uintptr_t)ovl__watch_page_addr(w, i),
                              .len = (j - i) * ovl__watch_page() };
    ioctl(ufd, UFFDIO_UNREGISTER, &r);
}

/* ---- receive ---- */

static int recv_guard(struct ovl__watch *w)
{
    size_t ps = ovl__watch_page(), n = w->ihi - w->ilo;
    w->shadow_len = n * ps;
    w->shadow =
        mmap(NULL, w->shadow_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (w->shadow == MAP_FAILED) {
        w->shadow = NULL;
        return ENOMEM;
    }
    char *a = ovl__watch_page_addr(w, w->ilo);
    if (madvise(a, w->shadow_len, MADV_DONTNEED) != 0)
        return errno;
    return reg(w, w->ilo, w->ihi, UFFDIO_REGISTER_MODE_MISSING);
}

static void recv_place(struct ovl__watch *w, size_t off, const void *src, size_t len)
{
    uintptr_t a = (uintptr_t)w->base + off;
    memcpy(w->shadow + (a - (uintptr_t)ovl__watch_page_addr(w, w->ilo)), src, len);
}

static int recv_open(struct ovl__watch *w, size_t i, size_t j)
{
    size_t ps = ovl__watch_page();
    struct uffdio_copy c = {
        .dst = (uintptr_t)ovl__watch_page_addr(w, i),
        .src = (uintptr_t)(w->shadow + (i - w->ilo) * ps),
        .len = (j - i) * ps,
        .mode = 0,
    };
    while (ioctl(ufd, UFFDIO_COPY, &c) != 0) {
        if (errno == EAGAIN && c.copy > 0) { /* partial copy: go on from there */
            c.dst += (uint64_t)c.copy;
            c.src += (uint64_t)c.copy;
            c.len -= (uint64_t)c.copy;
            c.copy = 0;
            continue;
        }
        if (errno == EEXIST) /* already populated: cannot happen unless remapped */
            return 0;
        return errno;
    }
    return 0;
}

static void recv_done(struct ovl__watch *w)
{
    unreg(w, w->ilo, w->ihi);
}

/* ---- send ---- */

static int send_guard(struct ovl__watch *w)
{
    if (!(features & UFFD_FEATURE_WP_UNPOPULATED)) {
        /* Write protection only holds on present pages: populate them
         * (contents unchanged). */
        char *a = ovl__watch_page_addr(w, w->ilo);
        if (madvise(a, (w->ihi - w->ilo) * ovl__watch_page(), MADV_POPULATE_WRITE) != 0)
            return errno;
    }
    return reg(w, w->ilo, w->ihi, UFFDIO_REGISTER_MODE_WP);
}

static int send_protect(struct ovl__watch *w, size_t i, size_t j, int protect)
{
    if (i >= j)
        return 0;
    struct uffdio_writeprotect p = {
        .range = { .start = (uintptr_t)ovl__watch_page_addr(w, i),
                   .len = (j - i) * ovl__watch_page() },
        .mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
    };
    return ioctl(ufd, UFFDIO_WRITEPROTECT, &p) == 0 ? 0 : errno;
}

static void send_done(struct ovl__watch *w)
{
    send_protect(w, w->ilo, w->ihi, 0);
    unreg(w, w->ilo, w->ihi);
}

const struct ovl__watch_backend ovl__watch_uffd = {
    .recv_guard = recv_guard,
    .recv_place = recv_place,
    .recv_open = recv_open,
    .recv_done = recv_done,
    .send_guard = send_guard,
    .send_protect = send_protect,
    .send_done = send_done,
};
