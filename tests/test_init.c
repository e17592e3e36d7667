/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_init: the library's lifetime and configuration.
 *  - every call before ovl_init and after ovl_finalize returns
 *    OVL_ERR_NOT_INIT (and writes no output argument);
 *  - ovl_init(MPI_COMM_NULL) -> OVL_ERR_ARG, a second ovl_init ->
 *    OVL_ERR_ALREADY_INIT (the running session is unaffected);
 *  - bad values through ovl_config_t::field_mask and through OVL_*
 *    environment variables -> OVL_ERR_CONFIG, leaving ovl uninitialised;
 *    fields set in the config win over the environment; fields whose bit is
 *    not in field_mask are ignored; a fragment size or a stream window
 *    that differs between ranks -> OVL_ERR_CONFIG on every rank; so does
 *    a bad value on one rank only (environment or config), the others'
 *    detail naming that rank, and a valid ovl_init works after it;
 *    unknown field_mask bits, negative verbose and size suffixes that
 *    overflow 64 bits -> OVL_ERR_CONFIG; verbose above 2 is 2;
 *    OVL_PROGRESS=none is inline;
 *  - ovl_config_get reflects config and environment;
 *  - ovl_strerror gives every code of OVL_ERROR_MAP its own message (the
 *    table's), and something else for unknown codes (one past the table's
 *    last, ...); ovl_error_detail names the failing function, is per
 *    thread, and is empty on a thread that saw no error;
 *  - OVL_PROGRESS_PRIORITY: the progress thread runs under SCHED_FIFO
 *    where the process may; where it may not (CAP_SYS_NICE dropped,
 *    RLIMIT_RTPRIO 0) ovl still starts, says why, and reports 0;
 *  - OVL_VERBOSE / verbose: 0 prints nothing, 1 prints errors, 2 info too;
 *  - init -> finalize -> init works again (several times), on
 *    MPI_COMM_WORLD and on a split communicator.
 */
#include "harness.h"

#include <limits.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FORGED ((ovl_request_t)(uintptr_t)0xdead0000beefull)

static void cb_noop(const ovl_status_t *st, void *arg)
{
    (void)st;
    (void)arg;
}

static int marshal_noop(ovl_stream_t s, void *arg)
{
    (void)s;
    (void)arg;
    return OVL_SUCCESS;
}

static void mpi_cb_noop(MPI_Status *st, void *arg)
{
    (void)st;
    (void)arg;
}

/* The call fails with OVL_ERR_NOT_INIT and the detail names the function. */
#define EXPECT_NOT_INIT(call, fname)                                                \
    do {                                                                            \
        EXPECT_ERR(call, OVL_ERR_NOT_INIT);                                         \
        CHECKF(strstr(ovl_error_detail(), fname) != NULL, "detail \"%s\" lacks %s", \
               ovl_error_detail(), fname);                                          \
    } while (0)

static void expect_everything_not_init(void)
{
    ovl_request_t r = FORGED, rs[2] = { FORGED, OVL_REQUEST_NULL };
    ovl_status_t st = { .source = 77, .tag = 77, .bytes = 77, .error = 77 };
    ovl_config_t cfg = { .field_mask = 0 };
    ovl_stats_t stats = { .polls = 77 };
    int flag = 77;
    char buf[8] = "abcdefg";

    CHECK(ovl_initialized() == 0);
    CHECK(ovl_comm() == MPI_COMM_NULL);
    EXPECT_NOT_INIT(ovl_finalize(), "ovl_finalize");
    EXPECT_NOT_INIT(ovl_config_get(&cfg), "ovl_config_get");
    CHECK(cfg.field_mask == 0);
    EXPECT_NOT_INIT(ovl_stats_get(&stats, sizeof stats), "ovl_stats_get");
    CHECK(stats.polls == 77);
    EXPECT_NOT_INIT(ovl_progress(), "ovl_progress");
    EXPECT_NOT_INIT(ovl_isend(buf, 1, MPI_CHAR, 0, 0, &r), "ovl_isend");
    CHECK(r == FORGED);
    EXPECT_NOT_INIT(ovl_irecv(buf, 1, MPI_CHAR, 0, 0, &r), "ovl_irecv");
    CHECK(r == FORGED);
    EXPECT_NOT_INIT(ovl_isend_stream(0, 0, marshal_noop, NULL, &r), "ovl_isend_stream");
    EXPECT_NOT_INIT(ovl_irecv_stream(0, 0, marshal_noop, NULL, &r), "ovl_irecv_stream");
    CHECK(r == FORGED);
    EXPECT_NOT_INIT(ovl_wait(&r, &st), "ovl_wait");
    CHECK(r == FORGED && st.source == 77 && st.error == 77);
    ovl_request_t null = OVL_REQUEST_NULL;
    EXPECT_NOT_INIT(ovl_wait(&null, &st), "ovl_wait");
    EXPECT_NOT_INIT(ovl_wait(NULL, &st), "ovl_wait");
    EXPECT_NOT_INIT(ovl_test(&r, &flag, &st), "ovl_test");
    CHECK(flag == 77 && r == FORGED);
    EXPECT_NOT_INIT(ovl_waitall(2, rs, NULL), "ovl_waitall");
    CHECK(rs[0] == FORGED);
    EXPECT_NOT_INIT(ovl_request_free(&r), "ovl_request_free");
    CHECK(r == FORGED);
    EXPECT_NOT_INIT(ovl_continue(r, cb_noop, NULL), "ovl_continue");

    /* ovl_continue_mpi must leave the user's MPI request alone. */
    MPI_Request mreq = MPI_REQUEST_NULL;
    CHECK_MPI(MPI_Irecv(buf, 1, MPI_CHAR, th_rank, 4242, MPI_COMM_WORLD, &mreq));
    EXPECT_NOT_INIT(ovl_continue_mpi(&mreq, mpi_cb_noop, NULL), "ovl_continue_mpi");
    CHECK(mreq != MPI_REQUEST_NULL);
    MPI_Status mst;
    CHECK_MPI(MPI_Cancel(&mreq));
    CHECK_MPI(MPI_Wait(&mreq, &mst));
    int cancelled = 0;
    MPI_Test_cancelled(&mst, &cancelled);
    CHECK(cancelled);

    /* The stream calls are only valid inside marshal functions. */
    EXPECT_ERR(ovl_stream_write(NULL, buf, 1), OVL_ERR_ARG);
    EXPECT_ERR(ovl_stream_read(NULL, buf, 1), OVL_ERR_ARG);
    CHECK(ovl_stream_tell(NULL) == 0);
}

/* The error table of ovl.h, so that a code added there is checked here. */
#define X_CODE(name, value, msg) value,
static const int table_codes[] = { OVL_ERROR_MAP(X_CODE) };
#undef X_CODE
#define X_MSG(name, value, msg) msg,
static const char *const table_msgs[] = { OVL_ERROR_MAP(X_MSG) };
#undef X_MSG
#define NCODES ((int)(sizeof table_codes / sizeof table_codes[0]))

static void check_strerror(void)
{
    /* the codes run 0, -1, ... without a gap, each with its own message */
    int last = 0;
    for (int i = 0; i < NCODES; i++) {
        int c = table_codes[i];
        CHECKF(c == -i, "code %d at position %d of OVL_ERROR_MAP", c, i);
        const char *m = ovl_strerror(c);
        CHECKF(m != NULL && m[0] != '\0', "ovl_strerror(%d) empty", c);
        CHECKF(strcmp(m, table_msgs[i]) == 0, "ovl_strerror(%d) \"%s\", the table says \"%s\"", c,
               m, table_msgs[i]);
        for (int d = 0; d < i; d++)
            CHECKF(strcmp(m, ovl_strerror(table_codes[d])) != 0, "codes %d and %d share \"%s\"", c,
                   table_codes[d], m);
        if (c < last)
            last = c;
    }
    CHECK(OVL_SUCCESS == 0 && OVL_ERR_ARG == -1 && last == -(NCODES - 1));
    CHECK(last <= OVL_ERR_MONITOR); /* the table goes at least this far */
    const int unknown[] = { 1, 42, last - 1, last - 2, -1000, INT_MIN, INT_MAX };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *m = ovl_strerror(unknown[i]);
        CHECKF(m != NULL && m[0] != '\0', "ovl_strerror(%d) empty", unknown[i]);
        for (int d = 0; d < NCODES; d++)
            CHECKF(strcmp(m, ovl_strerror(table_codes[d])) != 0, "unknown %d reads as code %d",
                   unknown[i], table_codes[d]);
    }
}

/* ---- error details are per thread ---------------------------------------- */

static void *detail_thread(void *arg)
{
    int *ok = arg;
    char buf[4];
    ovl_request_t r;
    /* A thread that saw no error has an empty detail. */
    ok[0] = ovl_error_detail() != NULL && ovl_error_detail()[0] == '\0';
    ok[1] = ovl_isend(buf, 1, MPI_CHAR, -5, 0, &r) == OVL_ERR_RANK;
    ok[2] = strstr(ovl_error_detail(), "ovl_isend") != NULL;
    return NULL;
}

static void check_detail_per_thread(void)
{
    char buf[4];
    ovl_request_t r;
    EXPECT_ERR(ovl_irecv(buf, 1, MPI_CHAR, 0, -7, &r), OVL_ERR_TAG);
    char mine[256];
    snprintf(mine, sizeof mine, "%s", ovl_error_detail());
    CHECKF(strstr(mine, "ovl_irecv") != NULL, "detail \"%s\"", mine);
    pthread_t t;
    int ok[3] = { 0, 0, 0 };
    CHECK(pthread_create(&t, NULL, detail_thread, ok) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(ok[0]);
    CHECK(ok[1]);
    CHECK(ok[2]);
    CHECKF(strcmp(ovl_error_detail(), mine) == 0, "other thread changed \"%s\" to \"%s\"", mine,
           ovl_error_detail());
}

/* ---- configuration --------------------------------------------------------- */

/* Environment variables this test changes, and their values at start. */
static const char *const env_names[] = { "OVL_PROGRESS", "OVL_FRAGMENT_SIZE", "OVL_STREAM_WINDOW",
                                         "OVL_STACK_SIZE", "OVL_VERBOSE", "OVL_RMA_LOCAL",
                                         "OVL_STREAM_WHOLE", "OVL_LATENESS_US", "OVL_SERVE_US",
                                         "OVL_PROGRESS_PRIORITY", "OVL_DOMAINS", "OVL_AM_POLL_MASK",
                                         /* removed in 0.1.0: set, ovl_init refuses them */
                                         "OVL_POLL_MAX_US", "OVL_SPIN_US", "OVL_PROGRESS_SLICE_US",
                                         "OVL_POLL_QUIET_US", "OVL_POLL_MIN_US",
                                         "OVL_POLL_CALLBACK_US", "OVL_POLL_RMA_US",
                                         "OVL_POLL_SERVE_US", "OVL_POLL_QUIET_SHARE" };
#define NENV (sizeof env_names / sizeof env_names[0])
static char *env_saved[NENV];

static void env_save(void)
{
    for (size_t i = 0; i < NENV; i++) {
        const char *v = getenv(env_names[i]);
        env_saved[i] = v ? strdup(v) : NULL;
    }
}

static void env_restore(void)
{
    for (size_t i = 0; i < NENV; i++) {
        if (env_saved[i])
            setenv(env_names[i], env_saved[i], 1);
        else
            unsetenv(env_names[i]);
    }
}

static ovl_progress_mode_t variant_progress(void)
{
    const char *p = getenv("OVL_PROGRESS");
    return p && strcmp(p, "thread") == 0 ? OVL_PROGRESS_THREAD : OVL_PROGRESS_INLINE;
}

/* ovl_init with this environment variable set must fail with CONFIG. */
static void expect_env_rejected(const char *name, const char *value)
{
    setenv(name, value, 1);
    int rc = ovl_init(MPI_COMM_WORLD, NULL);
    CHECKF(rc == OVL_ERR_CONFIG, "%s=\"%s\" gave %s", name, value, th_code_name(rc));
    CHECKF(strstr(ovl_error_detail(), name) != NULL, "%s=\"%s\": detail \"%s\"", name, value,
           ovl_error_detail());
    CHECK(!ovl_initialized());
    CHECK(ovl_comm() == MPI_COMM_NULL);
    env_restore();
}

static void expect_cfg_rejected(const ovl_config_t *c, const char *what)
{
    int rc = ovl_init(MPI_COMM_WORLD, c);
    CHECKF(rc == OVL_ERR_CONFIG, "config %s gave %s", what, th_code_name(rc));
    CHECK(!ovl_initialized());
}

/* Counts this process's threads whose /proc/self/task/<tid>/@file content
 * @match says 1 for; -1 if @match said -1 (not shown) for every thread. */
static int count_threads(const char *file, int (*match)(char *content, const void *arg),
                         const void *arg)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int seen = 0, n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], content[8192];
        snprintf(path, sizeof path, "/proc/self/task/%s/%s", e->d_name, file);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(content, 1, sizeof content - 1, f);
        fclose(f);
        content[len] = '\0';
        int m = match(content, arg);
        seen |= m >= 0;
        n += m == 1;
    }
    closedir(d);
    return seen ? n : -1;
}

/* sched: the se.slice line (Linux >= 6.6) equals *(unsigned long long *)ns. */
static int slice_is(char *content, const void *ns)
{
    char *line = strstr(content, "\nse.slice");
    unsigned long long v;
    if (!line || !strchr(line, ':') || sscanf(strchr(line, ':') + 1, "%llu", &v) != 1)
        return -1;
    return v == *(const unsigned long long *)ns;
}

/* stat: field 41, the scheduling policy, equals *(int *)policy. */
static int policy_is(char *content, const void *policy)
{
    char *p = strrchr(content, ')'); /* the command name may hold spaces */
    int field = 2;
    for (char *tok = p ? strtok(p + 1, " ") : NULL; tok; tok = strtok(NULL, " "))
        if (++field == 41)
            return atoi(tok) == *(const int *)policy;
    return -1;
}

/* How many of this process's threads have scheduler slice @ns; -1 if the
 * kernel does not show slices. */
static int threads_with_slice_ns(unsigned long long ns)
{
    return count_threads("sched", slice_is, &ns);
}

/* How many of this process's threads run under scheduling policy @policy. */
static int threads_with_policy(int policy)
{
    int n = count_threads("stat", policy_is, &policy);
    CHECK(n >= 0);
    return n;
}

static void *nothing(void *arg)
{
    return arg;
}

/* Whether this thread may start a SCHED_FIFO thread at priority 1. */
static int may_fifo(void)
{
    pthread_attr_t at;
    struct sched_param sp = { .sched_priority = 1 };
    pthread_t t;
    pthread_attr_init(&at);
    pthread_attr_setinheritsched(&at, PTHREAD_EXPLICIT_SCHED);
    pthread_attr_setschedpolicy(&at, SCHED_FIFO);
    pthread_attr_setschedparam(&at, &sp);
    int rc = pthread_create(&t, &at, nothing, NULL);
    pthread_attr_destroy(&at);
    if (rc == 0)
        pthread_join(t, NULL);
    return rc == 0;
}

/* Sets CAP_SYS_NICE in this thread's effective set on (1) or off (0);
 * returns 0 on success. */
static int cap_sys_nice(int on)
{
    struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        return -1;
    if (on)
        d[0].effective |= 1u << CAP_SYS_NICE;
    else
        d[0].effective &= ~(1u << CAP_SYS_NICE);
    return syscall(SYS_capset, &h, d) == 0 ? 0 : -1;
}

static void ring_exchange(int round);

/* stderr redirected to a temporary file between stderr_capture and
 * stderr_release, which restores it and returns what was written. */
struct capture {
    int saved;
    FILE *tmp;
};

static struct capture stderr_capture(void)
{
    fflush(stderr);
    struct capture c = { dup(2), tmpfile() };
    CHECK(c.saved >= 0 && c.tmp != NULL);
    dup2(fileno(c.tmp), 2);
    return c;
}

static size_t stderr_release(struct capture *c, char *out, size_t cap)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    rewind(c->tmp);
    size_t n = fread(out, 1, cap - 1, c->tmp);
    out[n] = '\0';
    fclose(c->tmp);
    return n;
}

/* A ring exchange whose receive waits (up to 2 s) while this rank watches
 * its threads: 1 if one more than @before ran under SCHED_FIFO meanwhile.
 * The progress thread holds SCHED_FIFO only while it sleeps on its poll
 * timer, which it does while the receive is pending. */
static int fifo_while_waiting(int before, int round)
{
    int rank, size, seen = 0;
    MPI_Comm_rank(ovl_comm(), &rank);
    MPI_Comm_size(ovl_comm(), &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int in = -1, out = rank;
    ovl_request_t r[2];
    CHECK_OK(ovl_irecv(&in, 1, MPI_INT, left, 40 + round, &r[0]));
    for (int k = 0; k < 400 && !seen; k++) {
        usleep(5000);
        int n = threads_with_policy(SCHED_FIFO);
        CHECKF(n <= before + 1, "%d SCHED_FIFO threads, %d before ovl_init", n, before);
        seen = n == before + 1;
    }
    MPI_Barrier(MPI_COMM_WORLD); /* every rank has looked before any sends */
    CHECK_OK(ovl_isend(&out, 1, MPI_INT, right, 40 + round, &r[1]));
    CHECK_OK(ovl_waitall(2, r, NULL));
    CHECK(in == left);
    return seen;
}

/* ovl_init asking for a SCHED_FIFO progress thread at priority 1: started
 * so where allowed; refused with a message and an effective 0 otherwise. */
static void check_priority(void)
{
    expect_env_rejected("OVL_PROGRESS_PRIORITY", "100");
    expect_env_rejected("OVL_PROGRESS_PRIORITY", "high");
    ovl_config_t c = { .field_mask = OVL_CONFIG_FIELD_PROGRESS_PRIORITY | OVL_CONFIG_FIELD_VERBOSE,
                       .progress.priority = -1,
                       .report.verbose = 1 };
    expect_cfg_rejected(&c, "progress_priority=-1");
    if (variant_progress() != OVL_PROGRESS_THREAD)
        return;
    int before = threads_with_policy(SCHED_FIFO);
    int allowed = may_fifo();
    c.progress.priority = 1;
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &c));
    ovl_config_t got;
    CHECK_OK(ovl_config_get(&got));
    CHECKF(got.progress.priority == (allowed ? 1 : 0), "priority %d, may use SCHED_FIFO: %d",
           got.progress.priority, allowed);
    int seen = fifo_while_waiting(before, 0);
    CHECKF(seen == allowed, "SCHED_FIFO progress thread seen: %d, may use SCHED_FIFO: %d", seen,
           allowed);
    CHECK_OK(ovl_finalize());

    /* Refused: no CAP_SYS_NICE, no real-time allowance. */
    struct rlimit saved;
    CHECK(getrlimit(RLIMIT_RTPRIO, &saved) == 0);
    struct rlimit none = { .rlim_cur = 0, .rlim_max = saved.rlim_max };
    int dropped = cap_sys_nice(0) == 0;
    CHECK(setrlimit(RLIMIT_RTPRIO, &none) == 0);
    if (dropped && !may_fifo()) {
        struct capture cap = stderr_capture();
        int rc = ovl_init(MPI_COMM_WORLD, &c);
        char msg[1024];
        stderr_release(&cap, msg, sizeof msg);
        CHECK_OK(rc);
        CHECK_OK(ovl_config_get(&got));
        CHECK(got.progress.priority == 0);
        CHECK(fifo_while_waiting(before, 1) == 0);
        if (th_rank == 0)
            CHECKF(strstr(msg, "OVL_PROGRESS_PRIORITY=1") && strstr(msg, "refused"),
                   "no warning: \"%.300s\"", msg);
        CHECK_OK(ovl_finalize());
    } else if (th_rank == 0) {
        printf("SCHED_FIFO refusal not tested: cannot drop CAP_SYS_NICE here\n");
    }
    CHECK(setrlimit(RLIMIT_RTPRIO, &saved) == 0);
    if (dropped)
        CHECK(cap_sys_nice(1) == 0);
}

static void check_config(void)
{
    ovl_config_t c;

    /* bad values in the config */
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_PROGRESS, .progress.mode = 7 };
    expect_cfg_rejected(&c, "progress=7");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_FRAGMENT_SIZE, .stream.fragment_size = 12 };
    expect_cfg_rejected(&c, "fragment_size=12");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_FRAGMENT_SIZE, .stream.fragment_size = 1 };
    expect_cfg_rejected(&c, "fragment_size=1");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_FRAGMENT_SIZE, .stream.fragment_size = 63 };
    expect_cfg_rejected(&c, "fragment_size=63");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_FRAGMENT_SIZE,
                        .stream.fragment_size = ((size_t)64 << 20) + 1 };
    expect_cfg_rejected(&c, "fragment_size=64M+1");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_STREAM_WINDOW, .stream.window = 0 };
    expect_cfg_rejected(&c, "stream_window=0");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_STREAM_WINDOW, .stream.window = 100000 };
    expect_cfg_rejected(&c, "stream_window=100000");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_STACK_SIZE, .stream.stack_size = 100 };
    expect_cfg_rejected(&c, "stack_size=100");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_LATENESS_US, .progress.lateness_us = 0 };
    expect_cfg_rejected(&c, "lateness_us=0");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_LATENESS_US,
                        .progress.lateness_us = 1000001 };
    expect_cfg_rejected(&c, "lateness_us=1000001");
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_SERVE_US, .progress.serve_us = 1000001 };
    expect_cfg_rejected(&c, "serve_us=1000001");
    /* the bits of removed fields are refused, not taken for another field */
    for (int bit = 1; bit <= 18; bit++) {
        if (bit != 1 && bit != 2 && bit != 10 && bit != 11 && bit != 14 && bit != 16 && bit != 18)
            continue;
        c = (ovl_config_t){ .field_mask = 1ull << bit };
        expect_cfg_rejected(&c, "a removed field's bit");
    }
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_STREAM_WHOLE,
                        .stream.whole = (ovl_stream_whole_t)3 };
    expect_cfg_rejected(&c, "stream_whole=3");

    /* bad values in the environment */
    env_save();
    expect_env_rejected("OVL_PROGRESS", "bogus");
    expect_env_rejected("OVL_FRAGMENT_SIZE", "12");
    expect_env_rejected("OVL_FRAGMENT_SIZE", "abc");
    expect_env_rejected("OVL_FRAGMENT_SIZE", "64x");
    expect_env_rejected("OVL_FRAGMENT_SIZE", "-5");
    expect_env_rejected("OVL_STREAM_WINDOW", "0");
    expect_env_rejected("OVL_STREAM_WINDOW", "two");
    expect_env_rejected("OVL_STACK_SIZE", "1");
    expect_env_rejected("OVL_VERBOSE", "loud");
    expect_env_rejected("OVL_LATENESS_US", "0");
    expect_env_rejected("OVL_LATENESS_US", "2000000");
    expect_env_rejected("OVL_LATENESS_US", "soon");
    expect_env_rejected("OVL_SERVE_US", "2000000");
    expect_env_rejected("OVL_SERVE_US", "idle");
    /* removed variables: refused whatever their value, naming what
     * replaces them */
    static const char *const removed[][2] = {
        { "OVL_POLL_MAX_US", "OVL_LATENESS_US" },
        { "OVL_POLL_MIN_US", "OVL_LATENESS_US" },
        { "OVL_POLL_CALLBACK_US", "OVL_LATENESS_US" },
        { "OVL_POLL_SERVE_US", "OVL_SERVE_US" },
        { "OVL_POLL_RMA_US", "100 us" },
        { "OVL_POLL_QUIET_US", "1 ms" },
        { "OVL_POLL_QUIET_SHARE", "75 %" },
        { "OVL_SPIN_US", "ovl_wait" },
        { "OVL_PROGRESS_SLICE_US", "100 us" },
    };
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
        expect_env_rejected(removed[i][0], "50");
        CHECKF(strstr(ovl_error_detail(), removed[i][1]) != NULL,
               "%s: the detail \"%s\" does not name its replacement (%s)", removed[i][0],
               ovl_error_detail(), removed[i][1]);
    }
    expect_env_rejected("OVL_RMA_LOCAL", "sometimes");
    expect_env_rejected("OVL_STREAM_WHOLE", "sometimes");
    expect_env_rejected("OVL_STREAM_WHOLE", "1");
    /* a suffix that would shift a value past 64 bits is refused, not wrapped
     * (17179869184g is 2^64: it wrapped to 0, the model's choice) */
    expect_env_rejected("OVL_FRAGMENT_SIZE", "17179869184g");
    expect_env_rejected("OVL_FRAGMENT_SIZE", "18014398509481984k");
    expect_env_rejected("OVL_STACK_SIZE", "17592186044416m");
    expect_env_rejected("OVL_FRAGMENT_SIZE", "18446744073709551616"); /* 2^64 */
    expect_env_rejected("OVL_FRAGMENT_SIZE", " -5");                  /* strtoull: 2^64 - 5 */
    expect_env_rejected("OVL_FRAGMENT_SIZE", "+4096");
    expect_env_rejected("OVL_DOMAINS", "0");
    expect_env_rejected("OVL_DOMAINS", "1025");
    expect_env_rejected("OVL_AM_POLL_MASK", "65536");

    /* field_mask bits that name no field */
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_AM_POLL_MASK << 1 };
    expect_cfg_rejected(&c, "field_mask bit 23");
    CHECK(strstr(ovl_error_detail(), "field_mask") != NULL);
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_VERBOSE | 1ull << 63, .report.verbose = 1 };
    expect_cfg_rejected(&c, "field_mask bit 63");
    /* verbose through the config: negative refused, above 2 taken as 2,
     * as OVL_VERBOSE is */
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_VERBOSE, .report.verbose = -1 };
    expect_cfg_rejected(&c, "verbose=-1");
    CHECK(strstr(ovl_error_detail(), "verbose") != NULL);
    {
        ovl_config_t got;
        struct capture cap = stderr_capture(); /* verbose 2 prints its configuration */
        c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_VERBOSE, .report.verbose = 7 };
        int rc = ovl_init(MPI_COMM_WORLD, &c);
        int rc_get = rc == OVL_SUCCESS ? ovl_config_get(&got) : rc;
        int rc_fin = rc == OVL_SUCCESS ? ovl_finalize() : rc;
        setenv("OVL_VERBOSE", "9", 1);
        int rc2 = ovl_init(MPI_COMM_WORLD, NULL);
        ovl_config_t got2;
        int rc2_get = rc2 == OVL_SUCCESS ? ovl_config_get(&got2) : rc2;
        int rc2_fin = rc2 == OVL_SUCCESS ? ovl_finalize() : rc2;
        char msg[8192];
        stderr_release(&cap, msg, sizeof msg);
        env_restore();
        CHECK_OK(rc);
        CHECK_OK(rc_get);
        CHECK_OK(rc_fin);
        CHECKF(got.report.verbose == 2, "verbose 7 in force as %d", got.report.verbose);
        CHECK_OK(rc2);
        CHECK_OK(rc2_get);
        CHECK_OK(rc2_fin);
        CHECKF(got2.report.verbose == 2, "OVL_VERBOSE=9 in force as %d", got2.report.verbose);
        /* OVL_PROGRESS=none: inline by another name (docs/ENV.md) */
        setenv("OVL_PROGRESS", "None", 1);
        CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
        CHECK_OK(ovl_config_get(&got));
        CHECK(got.progress.mode == OVL_PROGRESS_INLINE);
        CHECK_OK(ovl_finalize());
        env_restore();
    }

    /* Fields whose bit is not in field_mask are ignored. */
    c = (ovl_config_t){
        .field_mask = 0, .stream.fragment_size = 12, .stream.window = 0, .progress.mode = 9
    };
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &c));
    ovl_config_t got;
    CHECK_OK(ovl_config_get(&got));
    const char *fs_env = getenv("OVL_FRAGMENT_SIZE");
    if (fs_env && strtoull(fs_env, NULL, 10) != 0) {
        CHECK(got.stream.fragment_size == strtoull(fs_env, NULL, 10));
    } else {
        /* chosen from the model: a power of two, 4-64 KiB, the same everywhere */
        CHECKF(got.stream.fragment_size >= 4096 && got.stream.fragment_size <= 65536 &&
                   (got.stream.fragment_size & (got.stream.fragment_size - 1)) == 0,
               "model fragment size %zu", got.stream.fragment_size);
        unsigned long long f[2] = { got.stream.fragment_size,
                                    ~(unsigned long long)got.stream.fragment_size };
        CHECK_MPI(
            MPI_Allreduce(MPI_IN_PLACE, f, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
        CHECKF(f[0] == ~f[1], "fragment size differs between ranks (%zu here)",
               got.stream.fragment_size);
    }
    CHECK(got.progress.mode == variant_progress());
    CHECK(got.stream.window >= 1);
    CHECK(got.mpi.rma_local == OVL_RMA_LOCAL_AUTO || getenv("OVL_RMA_LOCAL"));
    CHECK(got.stream.whole == OVL_STREAM_WHOLE_AUTO || getenv("OVL_STREAM_WHOLE"));
    /* while a callback waits: 30 us by default */
    CHECKF(got.progress.lateness_us == 30 || getenv("OVL_LATENESS_US"), "lateness_us %u",
           got.progress.lateness_us);
    /* serving a live segment: the usual pace (50 us) by default */
    CHECKF(got.progress.serve_us == 50 || getenv("OVL_SERVE_US"), "serve_us %u",
           got.progress.serve_us);
    EXPECT_ERR(ovl_config_get(NULL), OVL_ERR_ARG);
    CHECK_OK(ovl_finalize());

    /* Valid environment values show up in ovl_config_get. */
    setenv("OVL_FRAGMENT_SIZE", "8k", 1);
    setenv("OVL_STREAM_WINDOW", "3", 1);
    setenv("OVL_STACK_SIZE", "1m", 1);
    setenv("OVL_VERBOSE", "0", 1);
    setenv("OVL_LATENESS_US", "9", 1);
    setenv("OVL_SERVE_US", "2000", 1);
    setenv("OVL_RMA_LOCAL", "Overlap", 1);
    setenv("OVL_STREAM_WHOLE", "OFF", 1);
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.stream.fragment_size == 8192);
    CHECK(got.stream.window == 3);
    CHECK(got.stream.stack_size == (size_t)1 << 20);
    CHECK(got.report.verbose == 0);
    CHECK(got.progress.lateness_us == 9);
    CHECK(got.progress.serve_us == 2000); /* may exceed the longest sleep */
    CHECK(got.mpi.rma_local == OVL_RMA_LOCAL_OVERLAP);
    CHECK(got.stream.whole == OVL_STREAM_WHOLE_OFF);
    CHECK(got.progress.mode == variant_progress());
    CHECK_OK(ovl_finalize());
    env_restore();

    /* A live segment with nothing in flight: the progress thread polls (to
     * serve other ranks' gets and puts) every serve_us, here 200 ms, not
     * at the usual pace (50 us: thousands of wake-ups in 0.5 s). */
    if (variant_progress() == OVL_PROGRESS_THREAD) {
        setenv("OVL_SERVE_US", "200000", 1);
        CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
        void *base = NULL;
        ovl_segment_t sg;
        CHECK_OK(ovl_segment_create(4096, &base, &sg));
        usleep(50000); /* the ramp from the usual pace up */
        ovl_stats_t a, b;
        CHECK_OK(ovl_stats_get(&a, sizeof a));
        usleep(500000);
        CHECK_OK(ovl_stats_get(&b, sizeof b));
        unsigned long long w = (unsigned long long)(b.thread_wakeups - a.thread_wakeups);
        CHECKF(w <= 12, "%llu wake-ups in 0.5 s serving a segment at a 200 ms pace", w);
        CHECK_OK(ovl_segment_free(&sg));
        CHECK_OK(ovl_finalize());
        env_restore();
    }

    /* Config fields win over (even invalid) environment values. */
    setenv("OVL_FRAGMENT_SIZE", "12", 1);
    setenv("OVL_PROGRESS", "bogus", 1);
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_FRAGMENT_SIZE | OVL_CONFIG_FIELD_PROGRESS,
                        .stream.fragment_size = 4096,
                        .progress.mode = variant_progress() };
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &c));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.stream.fragment_size == 4096);
    CHECK(got.progress.mode == variant_progress());
    CHECK_OK(ovl_finalize());
    env_restore();

    /* rma_local through the config: an unknown value is refused, a valid
     * one wins over the environment */
    setenv("OVL_RMA_LOCAL", "overlap", 1);
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_RMA_LOCAL | OVL_CONFIG_FIELD_VERBOSE,
                        .mpi.rma_local = (ovl_rma_local_t)5,
                        .report.verbose = 1 };
    expect_cfg_rejected(&c, "rma_local=5");
    c.mpi.rma_local = OVL_RMA_LOCAL_DIRECT;
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &c));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.mpi.rma_local == OVL_RMA_LOCAL_DIRECT);
    CHECK_OK(ovl_finalize());
    env_restore();
    setenv("OVL_RMA_LOCAL", "auto", 1);
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.mpi.rma_local == OVL_RMA_LOCAL_AUTO);
    CHECK_OK(ovl_finalize());
    env_restore();

    /* Every field through the config. */
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_PROGRESS | OVL_CONFIG_FIELD_FRAGMENT_SIZE |
                                      OVL_CONFIG_FIELD_STREAM_WINDOW | OVL_CONFIG_FIELD_STACK_SIZE |
                                      OVL_CONFIG_FIELD_VERBOSE |
                                      OVL_CONFIG_FIELD_PROGRESS_PRIORITY |
                                      OVL_CONFIG_FIELD_LATENESS_US | OVL_CONFIG_FIELD_SERVE_US,
                        .progress.mode = variant_progress(),
                        .stream.fragment_size = 64,
                        .stream.window = 1,
                        .stream.stack_size = 65536,
                        .report.verbose = 1,
                        .progress.priority = 0,
                        .progress.lateness_us = 300,
                        .progress.serve_us = 0 };
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &c));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.progress.mode == c.progress.mode && got.progress.priority == 0);
    CHECKF(got.progress.lateness_us == 300, "lateness_us 300 reported as %u",
           got.progress.lateness_us);
    CHECKF(got.progress.serve_us == 50, "serve_us 0 reported as %u, not the usual pace 50",
           got.progress.serve_us);
    if (c.progress.mode == OVL_PROGRESS_THREAD) {
        int n = threads_with_slice_ns(100000); /* the thread sets it when it starts */
        for (int k = 0; k < 500 && n == 0; k++) {
            usleep(10000);
            n = threads_with_slice_ns(100000);
        }
        CHECKF(n == 1 || n < 0,
               "%d threads run with the 100 us slice, expected the progress thread", n);
    }
    CHECK(got.stream.fragment_size == 64 && got.stream.window == 1 &&
          got.stream.stack_size == 65536);
    CHECK(got.report.verbose == 1);
    CHECK_OK(ovl_finalize());

    /* The fragment size must agree on every rank: all of them refuse. */
    if (th_size > 1) {
        c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_FRAGMENT_SIZE,
                            .stream.fragment_size = th_rank == 0 ? 4096 : 8192 };
        int rc = ovl_init(MPI_COMM_WORLD, &c);
        CHECKF(rc == OVL_ERR_CONFIG, "mismatched fragment sizes gave %s", th_code_name(rc));
        CHECK(!ovl_initialized());
        CHECK(ovl_comm() == MPI_COMM_NULL);
        /* so must the stream window: a stream's first receive spans it */
        c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_STREAM_WINDOW,
                            .stream.window = th_rank == 0 ? 8 : 4 };
        rc = ovl_init(MPI_COMM_WORLD, &c);
        CHECKF(rc == OVL_ERR_CONFIG, "mismatched stream windows gave %s", th_code_name(rc));
        CHECK(!ovl_initialized());
    }

    /* A bad value on one rank only: every rank fails (none waits in a
     * collective the failing one never reaches), that rank with its own
     * detail, the others naming it; then a valid ovl_init works. */
    if (th_size > 1) {
        for (int via_cfg = 0; via_cfg < 2; via_cfg++) {
            c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_LATENESS_US,
                                .progress.lateness_us = th_rank == 1 ? 0 : 30 };
            if (!via_cfg && th_rank == 1)
                setenv("OVL_FRAGMENT_SIZE", "garbage", 1);
            int rc = ovl_init(MPI_COMM_WORLD, via_cfg ? &c : NULL);
            if (!via_cfg && th_rank == 1)
                unsetenv("OVL_FRAGMENT_SIZE");
            env_restore();
            CHECKF(rc == OVL_ERR_CONFIG, "%s bad on rank 1 only: rank %d got %s",
                   via_cfg ? "lateness_us" : "OVL_FRAGMENT_SIZE", th_rank, th_code_name(rc));
            CHECK(!ovl_initialized());
            CHECK(ovl_comm() == MPI_COMM_NULL);
            const char *want = th_rank != 1 ? "rank 1 failed"
                               : via_cfg    ? "OVL_LATENESS_US"
                                            : "OVL_FRAGMENT_SIZE";
            CHECKF(strstr(ovl_error_detail(), want) != NULL, "rank %d: detail \"%s\" lacks \"%s\"",
                   th_rank, ovl_error_detail(), want);
            CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
            ring_exchange(20 + via_cfg);
            CHECK_OK(ovl_finalize());
        }
    }
}

/* ---- verbosity: what ovl prints on stderr --------------------------------- */

/* Run an init / bad call / finalize cycle at `verbose`, capturing stderr. */
static size_t captured_stderr(int verbose, char *out, size_t cap)
{
    struct capture c_err = stderr_capture();
    ovl_config_t c = { .field_mask = OVL_CONFIG_FIELD_VERBOSE, .report.verbose = verbose };
    int rc_init = ovl_init(MPI_COMM_WORLD, &c);
    char buf[4];
    ovl_request_t r;
    int rc_bad = ovl_isend(buf, 1, MPI_CHAR, th_size + 3, 0, &r);
    int rc_fin = ovl_finalize();
    size_t n = stderr_release(&c_err, out, cap);
    CHECK_OK(rc_init);
    EXPECT_ERR(rc_bad, OVL_ERR_RANK);
    CHECK_OK(rc_fin);
    return n;
}

static void check_verbose(void)
{
    char out[4096];
    size_t n = captured_stderr(0, out, sizeof out);
    CHECKF(n == 0, "verbose=0 printed \"%.300s\"", out);
    n = captured_stderr(1, out, sizeof out);
    CHECKF(strstr(out, "ovl: error") != NULL && strstr(out, "ovl_isend") != NULL,
           "verbose=1 printed \"%.300s\"", out);
    CHECKF(strstr(out, "initialised") == NULL, "verbose=1 printed info \"%.300s\"", out);
    n = captured_stderr(2, out, sizeof out);
    CHECKF(strstr(out, "ovl: error") != NULL && strstr(out, "initialised") != NULL,
           "verbose=2 printed \"%.300s\"", out);
}

/* ---- a working session ------------------------------------------------------ */

/* Ring exchange over ovl's communicator, byte-checked. */
static void ring_exchange(int round)
{
    int rank, size;
    MPI_Comm_rank(ovl_comm(), &rank);
    MPI_Comm_size(ovl_comm(), &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    char out[1000], in[1000];
    uint64_t key_out = (uint64_t)round << 32 | (uint64_t)rank;
    uint64_t key_in = (uint64_t)round << 32 | (uint64_t)left;
    th_fill(out, sizeof out, key_out, 0);
    memset(in, 0, sizeof in);
    ovl_request_t r[2];
    ovl_status_t st[2];
    CHECK_OK(ovl_irecv(in, sizeof in, MPI_CHAR, left, round, &r[0]));
    CHECK_OK(ovl_isend(out, sizeof out, MPI_CHAR, right, round, &r[1]));
    CHECK_OK(ovl_waitall(2, r, st));
    CHECK(r[0] == OVL_REQUEST_NULL && r[1] == OVL_REQUEST_NULL);
    CHECK(st[0].source == left && st[0].tag == round && st[0].bytes == sizeof in);
    CHECK(st[0].error == OVL_SUCCESS && st[1].error == OVL_SUCCESS);
    CHECK(th_verify(in, sizeof in, key_in, 0) == TH_OK);
}

int main(int argc, char **argv)
{
    int provided = th_init_mpi(&argc, &argv, "test_init", MPI_THREAD_MULTIPLE);
    CHECK(provided == MPI_THREAD_MULTIPLE);

    check_strerror();
    expect_everything_not_init();

    EXPECT_ERR(ovl_init(MPI_COMM_NULL, NULL), OVL_ERR_ARG);
    CHECK(strstr(ovl_error_detail(), "ovl_init") != NULL);
    CHECK(!ovl_initialized());

    check_config();
    /* ovl_init and ovl_finalize (many of them above) leave MPI's thread
     * level alone: Open MPI 4.1 took MPI_T_init_thread's level for its own,
     * and a second ovl_init then refused the progress thread */
    int level = -1;
    MPI_Query_thread(&level);
    CHECKF(level == provided, "MPI_Query_thread says %d after ovl_init, MPI gave %d", level,
           provided);
    check_priority();
    expect_everything_not_init();
    check_verbose();

    /* A normal session; a second ovl_init is refused and harms nothing. */
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECK(ovl_initialized() == 1);
    CHECK(ovl_comm() != MPI_COMM_NULL && ovl_comm() != MPI_COMM_WORLD);
    int cmp = MPI_UNEQUAL;
    MPI_Comm_compare(ovl_comm(), MPI_COMM_WORLD, &cmp);
    CHECK(cmp == MPI_CONGRUENT);
    EXPECT_ERR(ovl_init(MPI_COMM_WORLD, NULL), OVL_ERR_ALREADY_INIT);
    CHECK(strstr(ovl_error_detail(), "ovl_init") != NULL);
    EXPECT_ERR(ovl_init(MPI_COMM_NULL, NULL), OVL_ERR_ALREADY_INIT);
    CHECK(ovl_initialized() == 1);
    ring_exchange(1);
    EXPECT_ERR(ovl_stats_get(NULL, sizeof *(NULL)), OVL_ERR_ARG);
    check_detail_per_thread();
    CHECK_OK(ovl_finalize());
    expect_everything_not_init();

    /* Re-initialisation, with fresh statistics each time. */
    for (int round = 2; round < 5; round++) {
        CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
        ovl_stats_t s;
        CHECK_OK(ovl_stats_get(&s, sizeof s));
        CHECK(s.completions == 0 && s.callbacks == 0 && s.fragments_sent == 0);
        ring_exchange(round);
        CHECK_OK(ovl_stats_get(&s, sizeof s));
        CHECK(s.completions >= 2);
        CHECK_OK(ovl_finalize());
        CHECK(!ovl_initialized());
    }

    /* On a sub-communicator: ranks and collectives are those of the split. */
    MPI_Comm half;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, th_rank % 2, th_rank, &half));
    CHECK_OK(ovl_init(half, NULL));
    int hs = 0, os = 0;
    MPI_Comm_size(half, &hs);
    MPI_Comm_size(ovl_comm(), &os);
    CHECK(hs == os);
    ring_exchange(9);
    CHECK_OK(ovl_finalize());
    MPI_Comm_free(&half);

    expect_everything_not_init();
    return th_finish();
}
