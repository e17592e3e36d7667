/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * watch: which access monitor this process gets, and what each costs. One
 * resolver, resolve(), is behind ovl_init (ovl__watch_init), every
 * request's monitor (ovl__watch_resolve) and ovl_monitor_probe, which
 * ovl-info prints, so the tool says exactly what the library does. The
 * fault and protection costs feed the performance model (model.c) and
 * ovl-calibrate.
 */

#include "watch_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- choosing a monitor ------------------------------------------------------ */

const char *ovl_monitor_name(ovl_monitor_t m)
{
    switch (m) {
    case OVL_MONITOR_AUTO:
        return "auto";
    case OVL_MONITOR_UFFD:
        return "uffd";
    case OVL_MONITOR_MPROTECT:
        return "mprotect";
    case OVL_MONITOR_EXPLICIT:
        return "explicit";
    }
    return "unknown";
}

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int uffd_ok;
static char uffd_why[256];

/* The descriptor is kept open: it serves every region of the process. */
static void probe_uffd(void)
{
    uffd_ok = ovl__uffd_open(uffd_why, sizeof uffd_why) == 0;
}

static pthread_once_t mem_once = PTHREAD_ONCE_INIT;
static char mem_why[160]; /* why /proc/self/mem cannot serve; "" when it can */

/* /proc/self/mem, through which fault monitors write arriving bytes onto
 * guarded pages: opened once, kept for the life of the process. Checked by
 * writing a PROT_NONE page, as a receive does: the open may succeed where
 * that write is refused (proc_mem.force_override=never, a security
 * module). */
static void open_mem(void)
{
    size_t ps = ovl__watch_page();
    int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(mem_why, sizeof mem_why, "/proc/self/mem cannot be opened for writing (%s)",
                 strerror(errno));
        return;
    }
    char *p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) { /* else: cannot tell, assume it works */
        const char c = 0x5a;
        p[0] = 0;
        int e = 0;
        ssize_t n = -1;
        if (mprotect(p, ps, PROT_NONE) == 0) {
            n = pwrite(fd, &c, 1, (off_t)(uintptr_t)p);
            e = errno;
            mprotect(p, ps, PROT_READ);
        }
        if (n == 1 && p[0] != c)
            n = 0;
        if (n != 1) {
            snprintf(mem_why, sizeof mem_why, "/proc/self/mem does not write protected pages (%s)",
                     n < 0 ? strerror(e) : "nothing written");
            close(fd);
            fd = -1;
        }
        munmap(p, ps);
    }
    ovl__watch_g.mem_fd = fd;
}

/* The one resolver behind ovl_monitor_probe (so ovl-info) and the library
 * (ovl_init, every request): what @req gives in this process, and why
 * (@why may be NULL). OVL_SUCCESS; OVL_ERR_UNSUPPORTED: uffd was asked for
 * and is unavailable, *chosen is the fallback ovl_init takes (mprotect);
 * OVL_ERR_MONITOR: a fault monitor was asked for where none can work
 * (ovl_init fails), *chosen = @req. Auto then gives explicit: nothing
 * guards arriving data, and ovl_init warns. */
static int resolve(ovl_monitor_t req, ovl_monitor_t *chosen, char *why, size_t len)
{
    pthread_once(&mem_once, open_mem);
    const char *name = ovl_monitor_name(req);
    if (req == OVL_MONITOR_EXPLICIT) {
        *chosen = OVL_MONITOR_EXPLICIT;
        if (why)
            snprintf(why, len,
                     "explicit: no faults, ovl_delta_produced/ovl_delta_need annotations "
                     "(requested)");
        return OVL_SUCCESS;
    }
    if (mem_why[0]) {
        if (req == OVL_MONITOR_AUTO) {
            *chosen = OVL_MONITOR_EXPLICIT;
            if (why)
                snprintf(why, len,
                         "auto -> explicit: %s, so no fault monitor can work: a program that "
                         "does not call ovl_delta_need/ovl_get_need reads data before it arrives",
                         mem_why);
            return OVL_SUCCESS;
        }
        *chosen = req;
        if (why)
            snprintf(why, len,
                     "%s: unusable: %s (fault monitors write arriving data through it); "
                     "asked for by name, ovl_init and requests fail with OVL_ERR_MONITOR",
                     name, mem_why);
        return OVL_ERR_MONITOR;
    }
    if (req == OVL_MONITOR_MPROTECT) {
        *chosen = OVL_MONITOR_MPROTECT;
        if (why)
            snprintf(why, len, "mprotect: page protection and a SIGSEGV handler (requested)");
        return OVL_SUCCESS;
    }
    pthread_once(&probe_once, probe_uffd);
    *chosen = uffd_ok ? OVL_MONITOR_UFFD : OVL_MONITOR_MPROTECT;
    if (why && uffd_ok)
        snprintf(why, len, "%s: %s", req == OVL_MONITOR_AUTO ? "auto -> uffd" : "uffd", uffd_why);
    else if (why)
        snprintf(why, len, "%s -> mprotect: %s%s", name, uffd_why,
                 req == OVL_MONITOR_UFFD ? "; ovl_init falls back to mprotect" : "");
    return uffd_ok || req == OVL_MONITOR_AUTO ? OVL_SUCCESS : OVL_ERR_UNSUPPORTED;
}

int ovl_monitor_probe(ovl_monitor_t req, ovl_monitor_t *chosen, char *why, size_t why_len)
{
    if (!chosen || (unsigned)req > OVL_MONITOR_EXPLICIT)
        return OVL_ERR_ARG;
    char buf[480];
    int rc = resolve(req, chosen, buf, sizeof buf);
    if (why && why_len) {
        strncpy(why, buf, why_len - 1);
        why[why_len - 1] = 0;
    }
    return rc;
}

/* A transfer whose monitor nobody chose in code (the request's is auto and so
 * is the configuration's) resolved to explicit because no fault monitor works
 * here: nothing would stop the program from reading bytes that have not
 * arrived, so the caller completes it inside the call. Says so once. */
int ovl__watch_degraded(const char *fn, ovl_monitor_t asked, ovl_monitor_t got)
{
    static atomic_int said;
    if (got != OVL_MONITOR_EXPLICIT || asked != OVL_MONITOR_AUTO ||
        ovl__g.cfg.access.monitor != OVL_MONITOR_AUTO)
        return 0;
    if (ovl__g.cfg.report.verbose >= 1 && !atomic_exchange(&said, 1))
        fprintf(stderr,
                "ovl: warning: %s (rank %d): no fault monitor works here (%s), so delta "
                "receives and gets complete inside the call, without overlap (a receive waits "
                "there for its sender, as MPI_Recv does: post the matching sends first); "
                "choose OVL_MONITOR_EXPLICIT in code with ovl_delta_need/ovl_get_need to "
                "overlap\n",
                fn, ovl__g.rank, mem_why[0] ? mem_why : "fault handler not installed");
    return 1;
}

ovl_monitor_t ovl__watch_resolve(ovl_monitor_t m)
{
    if (m == OVL_MONITOR_AUTO)
        m = ovl__g.cfg.access.monitor;
    ovl_monitor_t chosen = OVL_MONITOR_EXPLICIT;
    if (resolve(m, &chosen, NULL, 0) == OVL_ERR_MONITOR || !ovl__watch_g.installed)
        return OVL_MONITOR_EXPLICIT; /* no fault can be served (ovl_init said so) */
    return chosen;
}

/* ---- fault cost ------------------------------------------------------------- */

static double measure_mprotect_fault(void)
{
    size_t ps = ovl__watch_page();
    char *p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 5.0;
    p[0] = 1;
    atomic_store(&ovl__watch_g.probe, (uintptr_t)p);
    double best = 1e9;
    for (int k = 0; k < 8; k++) {
        mprotect(p, ps, PROT_NONE);
        double t0 = ovl__now_us();
        *(volatile char *)p = (char)k;
        double t = ovl__now_us() - t0;
        if (t < best)
            best = t;
    }
    atomic_store(&ovl__watch_g.probe, 0);
    munmap(p, ps);
    return best;
}

/* userfaultfd in SIGBUS mode: a missing-page fault on a registered page,
 * resolved by the handler with UFFDIO_ZEROPAGE (as a receive is installed
 * with UFFDIO_COPY). */
static double measure_uffd_fault(void)
{
    size_t ps = ovl__watch_page();
    int fd = ovl__uffd_fd();
    if (fd < 0)
        return -1;
    char *p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    struct uffdio_register r = { .range = { .start = (uintptr_t)p, .len = ps },
                                 .mode = UFFDIO_REGISTER_MODE_MISSING };
    double best = -1;
    if (ioctl(fd, UFFDIO_REGISTER, &r) == 0) {
        ovl__watch_g.probe_uffd = 1;
        atomic_store(&ovl__watch_g.probe, (uintptr_t)p);
        best = 1e9;
        for (int k = 0; k < 8; k++) {
            madvise(p, ps, MADV_DONTNEED);
            double t0 = ovl__now_us();
            (void)*(volatile char *)p;
            double t = ovl__now_us() - t0;
            if (t < best)
                best = t;
        }
        atomic_store(&ovl__watch_g.probe, 0);
        ovl__watch_g.probe_uffd = 0;
        struct uffdio_range u = { .start = (uintptr_t)p, .len = ps };
        ioctl(fd, UFFDIO_UNREGISTER, &u);
    }
    munmap(p, ps);
    return best;
}

double ovl__watch_fault_cost_us(ovl_monitor_t m)
{
    if (m == OVL_MONITOR_EXPLICIT)
        return 0.1;
    if (!ovl__watch_g.installed)
        return -1;
    if (m == OVL_MONITOR_UFFD) {
        if (ovl__watch_resolve(OVL_MONITOR_UFFD) != OVL_MONITOR_UFFD)
            return -1;
        if (ovl__watch_g.fault_us[OVL_MONITOR_UFFD] == 0)
            ovl__watch_g.fault_us[OVL_MONITOR_UFFD] = measure_uffd_fault();
        return ovl__watch_g.fault_us[OVL_MONITOR_UFFD];
    }
    if (ovl__watch_g.fault_us[OVL_MONITOR_MPROTECT] == 0)
        ovl__watch_g.fault_us[OVL_MONITOR_MPROTECT] = measure_mprotect_fault();
    return ovl__watch_g.fault_us[OVL_MONITOR_MPROTECT];
}

double ovl__watch_protect_cost_us(ovl_monitor_t m, size_t npages, int reps)
{
    size_t ps = ovl__watch_page(), len = npages * ps;
    if (!npages || m == OVL_MONITOR_EXPLICIT || m == OVL_MONITOR_AUTO)
        return -1;
    int fd = -1;
    if (m == OVL_MONITOR_UFFD) {
        if (ovl__watch_resolve(OVL_MONITOR_UFFD) != OVL_MONITOR_UFFD)
            return -1;
        fd = ovl__uffd_fd();
    }
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    memset(p, 1, len); /* populated, as a buffer the program wrote */
    double best = -1;
    if (fd >= 0) {
        struct uffdio_register r = { .range = { .start = (uintptr_t)p, .len = len },
                                     .mode = UFFDIO_REGISTER_MODE_WP };
        if (ioctl(fd, UFFDIO_REGISTER, &r) == 0) {
            best = 1e30;
            for (int k = 0; k < reps; k++) {
                struct uffdio_writeprotect w = { .range = { .start = (uintptr_t)p, .len = len },
                                                 .mode = UFFDIO_WRITEPROTECT_MODE_WP };
                double t0 = ovl__now_us();
                int rc = ioctl(fd, UFFDIO_WRITEPROTECT, &w);
                double t = ovl__now_us() - t0;
                w.mode = 0;
                ioctl(fd, UFFDIO_WRITEPROTECT, &w);
                if (rc != 0) {
                    best = -1;
                    break;
                }
                if (t < best)
                    best = t;
            }
            struct uffdio_range u = { .start = (uintptr_t)p, .len = len };
            ioctl(fd, UFFDIO_UNREGISTER, &u);
        }
    } else {
        best = 1e30;
        for (int k = 0; k < reps; k++) {
            double t0 = ovl__now_us();
            mprotect(p, len, PROT_NONE);
            double t = ovl__now_us() - t0;
            mprotect(p, len, PROT_READ | PROT_WRITE);
            if (t < best)
                best = t;
        }
    }
    munmap(p, len);
    return best;
}

/* ---- life cycle --------------------------------------------------------------- */

int ovl__watch_init(void)
{
    ovl__watch_page();
    ovl_monitor_t m = ovl__g.cfg.access.monitor, chosen;
    char why[480];
    int rc = resolve(m, &chosen, why, sizeof why);
    if (rc == OVL_ERR_MONITOR)
        return ovl__error(OVL_ERR_MONITOR, "ovl_init",
                          "OVL_MONITOR=%s cannot work in this process: %s. Use "
                          "OVL_MONITOR=auto, choose OVL_MONITOR_EXPLICIT in code with "
                          "ovl_delta_produced/ovl_delta_need and ovl_get_need, or make "
                          "/proc/self/mem writable (ovl-info)",
                          ovl_monitor_name(m), mem_why);
    if (ovl__watch_g.mem_fd < 0 && m == OVL_MONITOR_AUTO &&
        (ovl__g.cfg.report.verbose >= 2 ||
         (ovl__g.cfg.report.verbose >= 1 &&
          (!ovl__g.node_of || ovl__g.node_of[ovl__g.rank] == ovl__g.rank))))
        fprintf(stderr,
                "ovl: warning: %s: no fault monitor, OVL_MONITOR=auto gives explicit: delta "
                "receives and gets complete inside the call unless the code chooses "
                "OVL_MONITOR_EXPLICIT (ovl-info)\n",
                mem_why);
    if (!ovl__watch_g.installed && ovl__watch_g.mem_fd >= 0)
        return ovl__watch_handler_install();
    return OVL_SUCCESS;
}
