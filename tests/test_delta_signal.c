/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_delta_signal: access monitoring must not change what happens to the
 * program's own faults. One program, three modes (argv[1]), each its own
 * ctest:
 *  crash    with delta requests pending (a receive and a send), forked
 *           children fault outside ovl's regions (a PROT_NONE page read and
 *           written, a read-only page written, an address near NULL): each
 *           dies of SIGSEGV, promptly (a handler that hangs or exits
 *           otherwise fails); children that touch a file mapping past the
 *           end of its file, or raise SIGBUS, die of SIGBUS (the signal
 *           userfaultfd faults come as); afterwards the pending transfers
 *           complete intact;
 *  handler  SIGSEGV and SIGBUS handlers the program installed before
 *           ovl_init still get the program's own faults (they siglongjmp
 *           back): SIGSEGV from a PROT_NONE page, SIGBUS from a file mapping
 *           past the end of its file and from raise(SIGBUS); on the main
 *           thread and on another thread, before and while delta requests
 *           are pending and after ovl_finalize; faults inside ovl's regions
 *           (a pending receive used, a send buffer written) never reach
 *           them;
 *  stack    delta buffers on the stack, sharing pages with live stack frames
 *           (the receiver's and the sender's): the data arrives intact and
 *           the program runs on (an access to the shared pages at worst
 *           waits).
 * Pairs: rank r with r^1; the even rank sends.
 */
#include "delta_common.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>

#if defined(__SANITIZE_ADDRESS__)
/* ASan's own SIGSEGV handler would report a child's fault and exit(1)
 * instead of letting it die of the signal: this test is about exactly
 * that path, so ASan leaves SIGSEGV alone here. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "handle_segv=0:handle_sigbus=0";
}
#endif
#if defined(__SANITIZE_THREAD__)
/* The same for TSan: its deadly-signal handler (handle_segv=1) reports a
 * child's fault as "ThreadSanitizer: SEGV" and exits 66 instead of letting
 * the child die of SIGSEGV. TSAN_OPTIONS from the environment does not set
 * handle_segv, so this default stays in force. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "handle_segv=0:handle_sigbus=0";
}
#endif

static int peer, even, explicit_mode;

/* ---- crash: children die of SIGSEGV -------------------------------------------- */

/* write: 0 read, 1 write, 2 raise(SIGBUS) */
static _Noreturn void child_fault(volatile int *p, int write)
{
    /* MPI's own handler (UCX) prints a backtrace: keep the log clean */
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0)
        dup2(fd, 2);
    if (write == 2)
        raise(SIGBUS);
    else if (write)
        *p = 1;
    else
        (void)*p;
    _exit(0); /* not reached: the access must kill the child */
}

/* A page of a file mapping whose file has been cut to nothing: any access
 * raises SIGBUS (BUS_ADRERR), a genuine fault outside ovl's regions. */
static volatile int *truncated_page(void)
{
    size_t pg = dt_page();
    int fd = memfd_create("test_delta_signal", MFD_CLOEXEC);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)pg) == 0);
    void *p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(ftruncate(fd, 0) == 0);
    close(fd);
    return p;
}

static void expect_signal(pid_t pid, int sig, const char *what)
{
    int status = 0;
    double t0 = th_now();
    pid_t got;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0) {
        if (th_now() - t0 > 20.0 * DT_SLOW) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            th_fail(__FILE__, __LINE__, what,
                    "the child is still alive 20 s after its fault (hung in a fault handler?)");
        }
        th_sleep_ms(5);
    }
    CHECK(got == pid);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == sig, "%s: child %s %d, expected death by %s",
           what, WIFSIGNALED(status) ? "killed by signal" : "exited with",
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
           sig == SIGBUS ? "SIGBUS" : "SIGSEGV");
}

static void crash_mode(void)
{
    size_t bytes = ((size_t)2 << 20) + 77;
    uint64_t key = 0xc4a5 + (uint64_t)(th_rank / 2);
    th_rng_t rng;
    th_rng_init(&rng, 0xc4a, (uint64_t)th_rank, 0);
    dt_region_t r;
    dt_region_alloc(&r, bytes, 55, 0xc4a6);
    ovl_request_t req;
    if (even)
        CHECK_OK(ovl_delta_send_begin(r.buf, (int)bytes, MPI_BYTE, peer, 1, NULL, &req));
    else
        CHECK_OK(ovl_delta_recv(r.buf, (int)bytes, MPI_BYTE, peer, 1, NULL, &req));
    if (even) /* the send is half written */
        dt_produce(req, r.buf, bytes / 2, key, explicit_mode ? DT_PROD_INORDER : DT_PROD_PLAIN,
                   &rng);

    size_t pg = dt_page();
    void *none = mmap(NULL, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *ro = mmap(NULL, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(none != MAP_FAILED && ro != MAP_FAILED);
    volatile int *cut = truncated_page();
    struct {
        const char *what;
        volatile int *addr;
        int write, sig;
    } cases[] = {
        { "write to a PROT_NONE page", (volatile int *)none, 1, SIGSEGV },
        { "read of a PROT_NONE page", (volatile int *)none + 3, 0, SIGSEGV },
        { "write to a read-only page", (volatile int *)ro + 5, 1, SIGSEGV },
        { "write near NULL", (volatile int *)(uintptr_t)16, 1, SIGSEGV },
        { "read past the end of a mapped file", cut + 2, 0, SIGBUS },
        { "write past the end of a mapped file", cut, 1, SIGBUS },
        { "raise(SIGBUS)", NULL, 2, SIGBUS },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0)
            child_fault(cases[c].addr, cases[c].write);
        expect_signal(pid, cases[c].sig, cases[c].what);
    }
    munmap(none, pg);
    munmap(ro, pg);
    munmap((void *)cut, pg);

    /* the transfer goes on unharmed */
    ovl_status_t st = { .error = 1 };
    if (even) {
        for (size_t o = bytes / 2; o < bytes; o += pg) {
            size_t len = dt_min(pg, bytes - o);
            th_fill(r.buf + o, len, key, o);
            if (explicit_mode)
                CHECK_OK(ovl_delta_produced(req, o, len));
        }
        CHECK_OK(ovl_delta_send_end(req, NULL));
        CHECK_OK(ovl_wait(&req, &st));
        CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);
    } else {
        dt_use(req, explicit_mode, r.buf, bytes, key, &rng);
        CHECK_OK(ovl_wait(&req, &st));
        CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);
        CHECK(dt_check_used(r.buf, bytes, key) == TH_OK);
    }
    CHECK(dt_sentinel_check(&r) == TH_OK);
    dt_region_free(&r);
}

/* ---- handler: the program's own SIGSEGV handler ------------------------------- */

static atomic_int h_calls;
static void *volatile h_addr;
static volatile sig_atomic_t h_sig;
static _Thread_local sigjmp_buf h_env;
static _Thread_local volatile sig_atomic_t h_armed;

static void app_handler(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    atomic_fetch_add(&h_calls, 1);
    h_addr = si->si_addr;
    h_sig = sig;
    if (h_armed) {
        h_armed = 0;
        siglongjmp(h_env, 1);
    }
    /* not expected: crash as a program without a handler would */
    signal(sig, SIG_DFL);
}

/* A fault of the program's own (write: 0 read, 1 write, 2 raise(SIGBUS)):
 * must reach app_handler as signal @sig, which jumps back. */
static void own_fault(volatile int *p, int write, int sig, const char *what)
{
    int before = atomic_load(&h_calls);
    h_sig = 0;
    if (sigsetjmp(h_env, 1) == 0) {
        h_armed = 1;
        if (write == 2)
            raise(SIGBUS);
        else if (write)
            *p = 1;
        else
            (void)*p;
        h_armed = 0;
        th_fail(__FILE__, __LINE__, what, "the access did not fault");
    }
    CHECKF(atomic_load(&h_calls) == before + 1, "%s: the program's handler ran %d times", what,
           atomic_load(&h_calls) - before);
    CHECKF(h_sig == sig, "%s: the program's handler got signal %d, expected %d", what, (int)h_sig,
           sig);
    if (p)
        CHECKF(h_addr == (void *)p, "%s: si_addr %p, expected %p", what, h_addr, (void *)p);
}

static volatile int *h_page, *h_cut;

static void own_faults(const char *when)
{
    char what[128];
    snprintf(what, sizeof what, "%s: write", when);
    own_fault(h_page, 1, SIGSEGV, what);
    snprintf(what, sizeof what, "%s: read", when);
    own_fault(h_page + 7, 0, SIGSEGV, what);
    snprintf(what, sizeof what, "%s: SIGBUS, read past the end of a mapped file", when);
    own_fault(h_cut + 3, 0, SIGBUS, what);
    snprintf(what, sizeof what, "%s: SIGBUS, write past the end of a mapped file", when);
    own_fault(h_cut, 1, SIGBUS, what);
    snprintf(what, sizeof what, "%s: raise(SIGBUS)", when);
    own_fault(NULL, 2, SIGBUS, what);
}

static void *own_faults_thread(void *arg)
{
    own_faults(arg);
    return NULL;
}

static void handler_mode(void)
{
    size_t pg = dt_page();
    void *p = mmap(NULL, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    h_page = p;
    h_cut = truncated_page();
    own_faults("before any delta request");

    size_t bytes = ((size_t)4 << 20) + 1;
    uint64_t key = 0x4a4d + (uint64_t)(th_rank / 2);
    th_rng_t rng;
    th_rng_init(&rng, 0x4a4, (uint64_t)th_rank, 0);
    dt_region_t r;
    dt_region_alloc(&r, bytes, 3, 0x4a4e);
    ovl_request_t req, go;
    char gobyte = 1;
    ovl_status_t st = { .error = 1 };
    if (even) {
        CHECK_OK(ovl_delta_send_begin(r.buf, (int)bytes, MPI_BYTE, peer, 1, NULL, &req));
        CHECK_OK(ovl_irecv(&gobyte, 1, MPI_CHAR, peer, 2, &go));
        own_faults("delta send pending");
        pthread_t t;
        CHECK(pthread_create(&t, NULL, own_faults_thread, "delta send pending, other thread") == 0);
        CHECK(pthread_join(t, NULL) == 0);
        CHECK_OK(ovl_wait(&go, OVL_STATUS_IGNORE));
        int before = atomic_load(&h_calls);
        dt_produce(req, r.buf, bytes, key, explicit_mode ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
        CHECK_OK(ovl_delta_send_end(req, NULL));
        CHECK_OK(ovl_wait(&req, &st));
        CHECKF(atomic_load(&h_calls) == before,
               "writing a delta-send buffer reached the program's handler %d times",
               atomic_load(&h_calls) - before);
        CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);
    } else {
        CHECK_OK(ovl_delta_recv(r.buf, (int)bytes, MPI_BYTE, peer, 1, NULL, &req));
        own_faults("delta receive pending");
        pthread_t t;
        CHECK(pthread_create(&t, NULL, own_faults_thread, "delta receive pending, other thread") ==
              0);
        CHECK(pthread_join(t, NULL) == 0);
        CHECK_OK(ovl_isend(&gobyte, 1, MPI_CHAR, peer, 2, &go));
        int before = atomic_load(&h_calls);
        dt_use(req, explicit_mode, r.buf, bytes, key, &rng); /* the data is still coming */
        CHECKF(atomic_load(&h_calls) == before,
               "using a pending receive buffer reached the program's handler %d times",
               atomic_load(&h_calls) - before);
        CHECK_OK(ovl_wait(&req, &st));
        CHECK_OK(ovl_wait(&go, OVL_STATUS_IGNORE));
        CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);
        CHECK(dt_check_used(r.buf, bytes, key) == TH_OK);
    }
    own_faults("after the transfer");
    CHECK(dt_sentinel_check(&r) == TH_OK);
    dt_region_free(&r);
    CHECK_OK(ovl_finalize());
    own_faults("after ovl_finalize");
    munmap(p, pg);
    munmap((void *)h_cut, pg);
}

/* ---- stack: delta buffers sharing pages with live stack frames ----------------
 * FAILS when first written with uffd and mprotect (SIGSEGV: the edge page
 * ovl guards holds the thread's own stack frames); explicit works. */

#define STACK_BYTES (3 * 4096 + 1000)

static __attribute__((noinline)) void stack_transfer(ovl_monitor_t m, int tag)
{
    unsigned char local[STACK_BYTES + 64]; /* the buffer: local + 32 */
    unsigned char *buf = local + 32;
    size_t bytes = STACK_BYTES;
    memset(local, 0x3c, sizeof local);
    uint64_t key = 0x57ac + (uint64_t)(th_rank / 2 * 64 + tag);
    th_rng_t rng;
    th_rng_init(&rng, 0x57a, (uint64_t)th_rank, (uint64_t)tag);
    ovl_request_t req;
    ovl_status_t st = { .error = 1 };
    int ex = m == OVL_MONITOR_EXPLICIT;
    if (!ex) {
        /* Fault monitors refuse buffers on the calling thread's stack with a
         * clear error (the signal frame needs those pages): ovl.h. */
        int rc =
            even ? ovl_delta_send_begin(buf, (int)bytes, MPI_BYTE, peer, tag, TH_MONITOR(m), &req)
                 : ovl_delta_recv(buf, (int)bytes, MPI_BYTE, peer, tag, TH_MONITOR(m), &req);
        CHECKF(rc == OVL_ERR_ARG, "%s: stack buffer gave %s, expected OVL_ERR_ARG",
               ovl_monitor_name(m), th_code_name(rc));
        CHECK(strstr(ovl_error_detail(), "stack") != NULL);
        return;
    }
    if (even) {
        CHECK_OK(ovl_delta_send_begin(buf, (int)bytes, MPI_BYTE, peer, tag, TH_MONITOR(m), &req));
        /* function calls write stack frames next to the buffer */
        dt_produce(req, buf, bytes, key, ex ? DT_PROD_INORDER : DT_PROD_PLAIN, &rng);
        CHECK_OK(ovl_delta_send_end(req, NULL));
        CHECK_OK(ovl_wait(&req, &st));
        CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);
    } else {
        CHECK_OK(ovl_delta_recv(buf, (int)bytes, MPI_BYTE, peer, tag, TH_MONITOR(m), &req));
        dt_use(req, ex, buf, bytes, key, &rng);
        CHECK_OK(ovl_wait(&req, &st));
        CHECK(st.bytes == bytes && st.error == OVL_SUCCESS);
        CHECK(dt_check_used(buf, bytes, key) == TH_OK);
    }
    for (size_t i = 0; i < 32; i++)
        CHECKF(local[i] == 0x3c && local[32 + bytes + i] == 0x3c,
               "%s: stack bytes next to the buffer changed", ovl_monitor_name(m));
}

static void stack_mode(void)
{
    /* explicit first (no protection at all), then the variant's monitor */
    int tag = 1;
    ovl_monitor_t ms[2] = { OVL_MONITOR_EXPLICIT, dt_monitor() };
    for (int i = 0; i < 2; i++) {
        for (int rep = 0; rep < 3; rep++) {
            printf("test_delta_signal stack: rank %d: %s transfer %d\n", th_rank,
                   ovl_monitor_name(ms[i]), rep);
            fflush(stdout);
            stack_transfer(ms[i], tag++);
        }
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "handler") == 0) {
        /* the program's handler goes in before ovl_init (after MPI_Init,
         * which may install one of its own) */
        int provided = th_init_mpi(&argc, &argv, "test_delta_signal handler", MPI_THREAD_MULTIPLE);
        CHECK(provided == MPI_THREAD_MULTIPLE);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = app_handler;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
        CHECK(sigaction(SIGBUS, &sa, NULL) == 0);
        const char *env = getenv("OVL_MONITOR");
        if (env && strcmp(env, "uffd") == 0 && !dt_uffd_available()) {
            MPI_Finalize();
            return 77;
        }
        CHECK_OK(ovl_init(MPI_COMM_WORLD, th_config(NULL)));
        dt_watchdog_start();
    } else {
        dt_init(&argc, &argv,
                strcmp(mode, "crash") == 0 ? "test_delta_signal crash" : "test_delta_signal stack",
                NULL);
    }
    peer = th_rank ^ 1;
    even = th_rank % 2 == 0;
    CHECKF(peer < th_size, "needs an even number of ranks");
    explicit_mode = dt_monitor() == OVL_MONITOR_EXPLICIT;
    dt_phase(mode, 60);
    if (strcmp(mode, "crash") == 0)
        crash_mode();
    else if (strcmp(mode, "handler") == 0)
        handler_mode();
    else if (strcmp(mode, "stack") == 0)
        stack_mode();
    else
        th_fail(__FILE__, __LINE__, mode, "usage: test_delta_signal crash|handler|stack");
    return dt_finish();
}
