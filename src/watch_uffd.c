/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The userfaultfd backend, in SIGBUS mode: a fault on a registered page is
 * delivered as SIGBUS to the faulting thread, which resolves it itself
 * (watch.c's handler), so no handler thread has to be woken.
 *
 * Receive: interior pages are registered for missing-page faults and
 * emptied. Arriving bytes go to a page-aligned shadow of the buffer's pages
 * (ovl__watch_recv_landing: MPI may write there directly); a page that is
 * complete is installed atomically, so a reader sees either a fault or the
 * whole page, and the mapping is never split (no vm.max_map_count
 * pressure).
 *
 * With UFFDIO_MOVE (Linux >= 6.8) nothing is copied or allocated: the
 * buffer's own pages are moved into the shadow when it is guarded (MPI
 * then writes into memory that is already resident), and moved back one
 * complete page run at a time; pages the message never reached get their
 * old contents back. Without it (or for memory it cannot move: shared,
 * pinned, forked copy-on-write) the pages are dropped (MADV_DONTNEED) and
 * complete ones installed with UFFDIO_COPY from the shadow, which starts as
 * a copy of the old contents.
 *
 * Shadows are cached by page count: a get or receive into a buffer of a
 * size seen before then costs a registration, two moves and an
 * unregistration, without mapping, registering and unmapping a shadow
 * (four system calls and a TLB shootdown fewer). A cached shadow stays
 * registered in write-protect mode, never armed: UFFDIO_MOVE needs its
 * destination registered, and writes to the shadow's holes still allocate
 * as usual.
 *
 * Send: interior pages are registered for write-protect faults and
 * protected with UFFDIO_WRITEPROTECT (reads never fault).
 */

#include "watch_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <stdlib.h>
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
#ifndef UFFD_FEATURE_MINOR_SHMEM
#define UFFD_FEATURE_MINOR_SHMEM (1 << 10)
#endif
#ifndef UFFDIO_REGISTER_MODE_MINOR
#define UFFDIO_REGISTER_MODE_MINOR ((__u64)1 << 2)
#endif
#ifndef UFFDIO_MOVE /* Linux 6.8; older headers lack it */
#define UFFD_FEATURE_MOVE (1 << 16)
struct uffdio_move {
    __u64 dst, src, len, mode;
    __s64 move;
};
#define UFFDIO_MOVE_MODE_DONTWAKE        ((__u64)1 << 0)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES ((__u64)1 << 1)
#define UFFDIO_MOVE                      _IOWR(UFFDIO, 0x05, struct uffdio_move)
#endif

static int ufd = -1;
static uint64_t features;
static char why_open[256]; /* how ufd was opened, and why the kernel allowed it */

int ovl__uffd_fd(void)
{
    return ufd;
}

/* A new userfaultfd with @flags: the system call, else /dev/userfaultfd
 * (whose permissions grant it without privilege); *@dev says which. */
static int new_fd(int flags, int *dev)
{
    *dev = 0;
#ifdef SYS_userfaultfd
    int fd = (int)syscall(SYS_userfaultfd, flags);
    if (fd >= 0)
        return fd;
#endif
    int e = errno;
    int d = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (d < 0) {
        errno = e; /* the system call's reason */
        return -1;
    }
    int fd2 = ioctl(d, USERFAULTFD_IOC_NEW, flags);
    e = errno;
    close(d);
    errno = e;
    *dev = fd2 >= 0;
    return fd2;
}

/* Does this process have CAP_SYS_PTRACE (root has), which lets the system
 * call make a userfaultfd that also handles kernel-mode faults? */
static int cap_sys_ptrace(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    unsigned long long eff = 0;
    int found = 0;
    if (!f)
        return geteuid() == 0;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "CapEff: %llx", &eff) == 1;
    fclose(f);
    return found ? (eff >> 19) & 1 : geteuid() == 0; /* CAP_SYS_PTRACE is 19 */
}

/* Why the kernel let this process have a userfaultfd (for ovl-info). */
static const char *allowed_by(int user_mode_only, int dev)
{
    if (dev)
        return user_mode_only ? "/dev/userfaultfd, which this user may open (user-mode faults)"
                              : "/dev/userfaultfd, which this user may open";
    if (user_mode_only)
        return "UFFD_USER_MODE_ONLY (user-mode faults only), which any user may ask for on "
               "Linux >= 5.11";
    if (cap_sys_ptrace())
        return geteuid() == 0 ? "running as root (CAP_SYS_PTRACE)" : "CAP_SYS_PTRACE";
    return "vm.unprivileged_userfaultfd=1";
}

int ovl__uffd_open(char *why, size_t why_len)
{
    if (ufd >= 0) {
        snprintf(why, why_len, "%s", why_open);
        return 0;
    }
    const int base = O_CLOEXEC | O_NONBLOCK;
    int umo = 1, dev = 0;
    int fd = new_fd(base | UFFD_USER_MODE_ONLY, &dev);
    if (fd < 0) {
        umo = 0;
        fd = new_fd(base, &dev);
    }
    if (fd < 0) {
        int e = errno;
        snprintf(
            why, why_len,
            "userfaultfd unavailable (%s): needs UFFD_USER_MODE_ONLY support (Linux >= 5.11), "
            "root or CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1, or access to /dev/userfaultfd",
            strerror(e));
        return -1;
    }
    /* Ask what the kernel supports on a throw-away descriptor (the API
     * handshake happens once per descriptor). */
    struct uffdio_api api = { .api = UFFD_API, .features = 0 };
    uint64_t avail = 0;
    int pdev = 0;
    int probe = new_fd(base | (umo ? UFFD_USER_MODE_ONLY : 0), &pdev);
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
    const char *mv = getenv("OVL_UFFD_MOVE"); /* docs/ENV.md */
    if ((avail & UFFD_FEATURE_MOVE) && !(mv && !strcmp(mv, "0")))
        want |= UFFD_FEATURE_MOVE;
    if (avail & UFFD_FEATURE_MINOR_SHMEM) /* to recognise shared memory */
        want |= UFFD_FEATURE_MINOR_SHMEM;
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
    snprintf(why_open, sizeof why_open, "userfaultfd works (SIGBUS mode%s%s), allowed by %s",
             (want & UFFD_FEATURE_WP_UNPOPULATED) ? ", write-protect of unpopulated pages" : "",
             (want & UFFD_FEATURE_MOVE) ? ", zero-copy page moves" : "", allowed_by(umo, dev));
    snprintf(why, why_len, "%s", why_open);
    return 0;
}

void ovl__uffd_close(void)
{
    /* kept for the life of the process: regions of a later ovl_init use it */
}

static int reg_range(void *a, size_t len, uint64_t mode)
{
    struct uffdio_register r = { .range = { .start = (uintptr_t)a, .len = len }, .mode = mode };
    return ioctl(ufd, UFFDIO_REGISTER, &r) == 0 ? 0 : errno;
}

static void unreg_range(void *a, size_t len)
{
    struct uffdio_range r = { .start = (uintptr_t)a, .len = len };
    ioctl(ufd, UFFDIO_UNREGISTER, &r);
}

static int reg(struct ovl__watch *w, size_t i, size_t j, uint64_t mode)
{
    return reg_range(ovl__watch_page_addr(w, i), (j - i) * ovl__watch_page(), mode);
}

static void unreg(struct ovl__watch *w, size_t i, size_t j)
{
    unreg_range(ovl__watch_page_addr(w, i), (j - i) * ovl__watch_page());
}

/* ---- receive ---- */

/* Move [src, src+len) onto the registered [dst, dst+len) page by page
 * table, no copy. Returns the bytes moved before the first failure (errno
 * then says why). */
static size_t move_pages(char *dst, char *src, size_t len, uint64_t mode)
{
    size_t done = 0;
    while (done < len) {
        struct uffdio_move m = { .dst = (uintptr_t)(dst + done),
                                 .src = (uintptr_t)(src + done),
                                 .len = len - done,
                                 .mode = mode };
        if (ioctl(ufd, UFFDIO_MOVE, &m) == 0)
            return len;
        if (m.move > 0) {
            done += (size_t)m.move; /* partial (EAGAIN): go on from there */
            continue;
        }
        return done;
    }
    return done;
}

/* Shadow address of page i. */
static char *shadow_page(struct ovl__watch *w, size_t i)
{
    return w->shadow + i * ovl__watch_page();
}

/* Shared memory (shmem, hugetlbfs)? Missing-page faults never come for
 * its pages that are in the page cache, so it cannot be guarded this way.
 * Only shared memory accepts minor-fault registration. */
static int is_shared(void *a, size_t len)
{
    if (!(features & UFFD_FEATURE_MINOR_SHMEM) || reg_range(a, len, UFFDIO_REGISTER_MODE_MINOR))
        return 0;
    unreg_range(a, len);
    return 1;
}

/* Move the buffer's interior pages [a, a+len) into the shadow at sa
 * (holes stay holes), leaving them empty and registered for missing
 * faults. The shadow must be registered to be moved into: for the move
 * only, unless @sreg (registered for good). 0, or an errno with nothing
 * changed (not private anonymous memory, pinned pages). */
static int take_pages(char *a, char *sa, size_t len, int sreg)
{
    const uint64_t mode = UFFDIO_MOVE_MODE_DONTWAKE | UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES;
    int err = reg_range(a, len, UFFDIO_REGISTER_MODE_MISSING);
    if (err)
        return err;
    if (sreg || (err = reg_range(sa, len, UFFDIO_REGISTER_MODE_MISSING)) == 0) {
        size_t n = move_pages(sa, a, len, mode);
        if (n != len) {
            err = errno ? errno : EIO;
            move_pages(a, sa, n, mode); /* put back what moved */
        }
        if (!sreg)
            unreg_range(sa, len);
    }
    if (err)
        unreg_range(a, len);
    return err;
}

/* ---- shadow cache ---- */

#define SHADOW_CACHE 8
/* A cached shadow: every page empty, except perhaps the first and the last
 * (MPI wrote there when they were edge pages of the buffer). */
struct shadow {
    char *p;
    size_t npages;
    int pop_first, pop_last;
};
static struct {
    pthread_mutex_t lock;
    struct shadow v[SHADOW_CACHE]; /* most recently released last */
    int n;
} SC = { .lock = PTHREAD_MUTEX_INITIALIZER };

void ovl__uffd_shadow_trim(void)
{
    pthread_mutex_lock(&SC.lock);
    for (int i = 0; i < SC.n; i++)
        munmap(SC.v[i].p, SC.v[i].npages * ovl__watch_page());
    SC.n = 0;
    pthread_mutex_unlock(&SC.lock);
}

/* A shadow of w->npages pages whose interior [ilo, ihi) is empty: from the
 * cache, else mapped (and registered, when the kernel allows). 0 or ENOMEM. */
static int shadow_get(struct ovl__watch *w)
{
    size_t ps = ovl__watch_page();
    w->shadow_len = w->npages * ps; /* edge pages too: the landing is the whole buffer */
    struct shadow c = { NULL, 0, 0, 0 };
    pthread_mutex_lock(&SC.lock);
    for (int i = SC.n - 1; i >= 0; i--)
        if (SC.v[i].npages == w->npages) {
            c = SC.v[i];
            memmove(&SC.v[i], &SC.v[i + 1], (size_t)(SC.n - 1 - i) * sizeof SC.v[0]);
            SC.n--;
            break;
        }
    pthread_mutex_unlock(&SC.lock);
    if (c.p) {
        /* a former edge page that is interior now must be empty to be moved into */
        int ok = 1;
        if (c.pop_first && w->ilo == 0)
            ok &= madvise(c.p, ps, MADV_DONTNEED) == 0;
        if (c.pop_last && w->ihi == w->npages && w->npages > 1)
            ok &= madvise(c.p + (w->npages - 1) * ps, ps, MADV_DONTNEED) == 0;
        if (ok) {
            w->shadow = c.p;
            w->shadow_reg = 1;
            return 0;
        }
        munmap(c.p, w->shadow_len);
    }
    for (int attempt = 0; attempt < 2 && !w->shadow; attempt++) {
        void *p =
            mmap(NULL, w->shadow_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED)
            w->shadow = p;
        else
            ovl__uffd_shadow_trim(); /* mappings ran out (vm.max_map_count)? */
    }
    if (!w->shadow)
        return ENOMEM;
    w->shadow_reg = (features & UFFD_FEATURE_MOVE) &&
                    reg_range(w->shadow, w->shadow_len, UFFDIO_REGISTER_MODE_WP) == 0;
    return 0;
}

static void recv_release(struct ovl__watch *w)
{
    size_t ps = ovl__watch_page();
    if (w->shadow_reg && w->moved && !w->shadow_dirty) {
        struct shadow c = { w->shadow, w->npages, w->ilo > 0, w->ihi < w->npages };
        pthread_mutex_lock(&SC.lock);
        if (SC.n == SHADOW_CACHE) { /* evict the least recently released */
            munmap(SC.v[0].p, SC.v[0].npages * ps);
            memmove(&SC.v[0], &SC.v[1], (SHADOW_CACHE - 1) * sizeof SC.v[0]);
            SC.n--;
        }
        SC.v[SC.n++] = c;
        pthread_mutex_unlock(&SC.lock);
        w->shadow = NULL;
        return;
    }
    munmap(w->shadow, w->shadow_len);
    w->shadow = NULL;
}

static int recv_guard(struct ovl__watch *w)
{
    size_t ps = ovl__watch_page(), ilen = (w->ihi - w->ilo) * ps;
    if (shadow_get(w) != 0)
        return ENOMEM;
    char *a = ovl__watch_page_addr(w, w->ilo), *sa = shadow_page(w, w->ilo);
    if (features & UFFD_FEATURE_MOVE) {
        int err = take_pages(a, sa, ilen, w->shadow_reg);
        if (err == ENOMEM) { /* mappings ran out: give back the cached shadows, once */
            ovl__uffd_shadow_trim();
            err = take_pages(a, sa, ilen, w->shadow_reg);
        }
        if (err == 0) {
            w->moved = 1;
            return 0;
        }
    }
    if (is_shared(a, ilen))
        return EXDEV;
    /* Keep the old contents for the pages no message reaches (read
     * before registering: a hole read after it would wait for itself),
     * then empty the pages. */
    memcpy(sa, a, ilen);
    if (madvise(a, ilen, MADV_DONTNEED) != 0)
        return errno;
    return reg_range(a, ilen, UFFDIO_REGISTER_MODE_MISSING);
}

static void recv_place(struct ovl__watch *w, size_t off, const void *src, size_t len)
{
    char *t = w->shadow + ((uintptr_t)w->base + off - w->p0);
    if (t != src) /* else it landed in place */
        memcpy(t, src, len);
}

/* Install [src, src+len) at the missing pages [dst, dst+len). */
static int copy_pages(char *dst, const char *src, size_t len)
{
    const size_t ps = ovl__watch_page();
    struct uffdio_copy c = { .dst = (uintptr_t)dst, .src = (uintptr_t)src, .len = len, .mode = 0 };
    while (c.len > 0 && ioctl(ufd, UFFDIO_COPY, &c) != 0) {
        if (errno == EAGAIN && c.copy > 0) { /* partial copy: go on from there */
            c.dst += (uint64_t)c.copy;
            c.src += (uint64_t)c.copy;
            c.len -= (uint64_t)c.copy;
            c.copy = 0;
            continue;
        }
        if (errno != EEXIST)
            return errno;
        /* The page at c.dst is present although it should be missing:
         * something populated it behind the monitor's back (a registration
         * replaced, the range remapped), and UFFDIO_COPY wrote nothing
         * there. Write the bytes into it anyway and say so: whoever read
         * the page before may have seen old bytes. */
        int err = ovl__watch_poke((void *)(uintptr_t)c.dst, (const void *)(uintptr_t)c.src, ps);
        ovl__report(OVL_ERR_MONITOR, "ovl delta receive",
                    "page %p of a pending buffer was populated before its data arrived "
                    "(userfaultfd EEXIST): its data was written %s; a read before may have "
                    "seen old bytes",
                    (void *)(uintptr_t)c.dst, err ? "NOT written" : "through /proc/self/mem");
        if (err)
            return err;
        c.dst += ps;
        c.src += ps;
        c.len -= ps;
        c.copy = 0;
    }
    return 0;
}

/* Give interior pages [i, j) their contents from the shadow: moved back by
 * page table (a page that cannot move, pinned or shared copy-on-write, is
 * copied, and the shadow no longer cached), or copied when the pages were
 * never moved out. */
static int put_back(struct ovl__watch *w, size_t i, size_t j, uint64_t mode)
{
    size_t ps = ovl__watch_page(), len = (j - i) * ps, at = 0;
    char *d = ovl__watch_page_addr(w, i), *s = shadow_page(w, i);
    if (!w->moved)
        return copy_pages(d, s, len);
    while ((at += move_pages(d + at, s + at, len - at, mode)) < len) {
        w->shadow_dirty = 1;
        int err = copy_pages(d + at, s + at, ps);
        if (err)
            return err;
        at += ps;
    }
    return 0;
}

static int recv_open(struct ovl__watch *w, size_t i, size_t j)
{
    return put_back(w, i, j, 0);
}

static void recv_done(struct ovl__watch *w)
{
    /* pages the message never reached get their old contents back */
    for (size_t i = w->ilo; i < w->ihi; i++)
        if (!atomic_load(&w->valid[i]))
            put_back(w, i, i + 1, UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES);
    unreg(w, w->ilo, w->ihi);
}

static char *recv_landing(struct ovl__watch *w)
{
    return w->shadow ? w->shadow + ((uintptr_t)w->base - w->p0) : NULL;
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
    .recv_landing = recv_landing,
    .recv_release = recv_release,
    .send_guard = send_guard,
    .send_protect = send_protect,
    .send_done = send_done,
};
