/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * OVL_TRACE=FILE: a per-rank timeline in the Chrome trace-event JSON format
 * (`{"traceEvents":[...]}`), which Perfetto and chrome://tracing open.
 * pid is the rank, tid the Linux thread id; "ph":"X" events have a start
 * and a duration, "ph":"i" events are instants. Timestamps are
 * CLOCK_MONOTONIC microseconds, so the files of ranks on one host line up
 * when loaded together.
 *
 * Recording must be cheap when off (callers test `ovl__trace_on`, one
 * predictable branch) and safe anywhere when on, including the fault
 * handler: an event is a fixed-size slot in a buffer allocated at
 * ovl_init, claimed with one atomic increment, holding only pointers to
 * string literals and integers. Nothing is formatted until ovl_finalize
 * writes the file. A full buffer drops further events and the file says
 * how many (OVL_TRACE_EVENTS sets its size).
 */
#include "ovl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int ovl__trace_on;

struct ev {
    const char *cat, *name;
    char ph;
    int tid;
    double ts, dur;
    const char *k[3];
    long long v[3];
    char *json; /* ovl__trace_instant_json: owned */
};

static struct {
    struct ev *ev;
    size_t cap;
    atomic_size_t next;
    atomic_ullong dropped;
    char path[512];
} T;

static __thread int my_tid __attribute__((tls_model("initial-exec")));

static int tid(void)
{
    if (!my_tid)
        my_tid = (int)syscall(SYS_gettid);
    return my_tid;
}

uint64_t ovl__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double ovl__now_us(void)
{
    return (double)ovl__now_ns() / 1e3;
}

static struct ev *claim(void)
{
    size_t i = atomic_fetch_add_explicit(&T.next, 1, memory_order_relaxed);
    if (i >= T.cap) {
        atomic_fetch_add_explicit(&T.dropped, 1, memory_order_relaxed);
        return NULL;
    }
    return &T.ev[i];
}

void ovl__trace_complete(const char *cat, const char *name, double t0_us, double dur_us,
                         const char *k1, long long v1, const char *k2, long long v2, const char *k3,
                         long long v3)
{
    if (!ovl__trace_on)
        return;
    struct ev *e = claim();
    if (!e)
        return;
    *e = (struct ev){ .cat = cat,
                      .name = name,
                      .ph = 'X',
                      .tid = tid(),
                      .ts = t0_us,
                      .dur = dur_us > 0 ? dur_us : 0,
                      .k = { k1, k2, k3 },
                      .v = { v1, v2, v3 } };
}

void ovl__trace_instant(const char *cat, const char *name, const char *k1, long long v1,
                        const char *k2, long long v2)
{
    if (!ovl__trace_on)
        return;
    struct ev *e = claim();
    if (!e)
        return;
    *e = (struct ev){ .cat = cat,
                      .name = name,
                      .ph = 'i',
                      .tid = tid(),
                      .ts = ovl__now_us(),
                      .k = { k1, k2, NULL },
                      .v = { v1, v2, 0 } };
}

void ovl__trace_instant_json(const char *cat, const char *name, char *json_args)
{
    if (!ovl__trace_on) {
        free(json_args);
        return;
    }
    struct ev *e = claim();
    if (!e) {
        free(json_args);
        return;
    }
    *e = (struct ev){
        .cat = cat, .name = name, .ph = 'i', .tid = tid(), .ts = ovl__now_us(), .json = json_args
    };
}

void ovl__trace_thread_name(const char *name)
{
    if (!ovl__trace_on)
        return;
    struct ev *e = claim();
    if (e)
        *e = (struct ev){ .cat = name, .name = "thread_name", .ph = 'M', .tid = tid() };
}

/* Entry @i of a page-access list, which a fault still on its way may be
 * writing (atomically; an entry not written yet reads as 0). */
static uint32_t order_at(const uint32_t *order, size_t i)
{
    return __atomic_load_n(&order[i], __ATOMIC_RELAXED);
}

/* HUNT section 7's diagnostic: which pages of a transfer the program
 * touched first, in order, and what the order looks like. */
void ovl__trace_page_access(const void *base, size_t len, size_t npages, const uint32_t *order,
                            size_t n)
{
    if (!ovl__trace_on)
        return;
    enum { MAX_LISTED = 4096 };
    size_t shown = n < MAX_LISTED ? n : MAX_LISTED;
    size_t up = 0, down = 0;
    for (size_t i = 1; i < n; i++) {
        uint32_t a = order_at(order, i), b = order_at(order, i - 1);
        if (a > b) /* monotonic, not necessarily adjacent: */
            up++;  /* pages that came first never fault */
        else if (a < b)
            down++;
    }
    const char *pattern = n < 2                     ? (n ? "single" : "none")
                          : up * 4 >= 3 * (n - 1)   ? "sequential-up"
                          : down * 4 >= 3 * (n - 1) ? "sequential-down"
                                                    : "random";
    size_t cap = 160 + shown * 11;
    char *s = malloc(cap);
    if (!s)
        return;
    int w = snprintf(s, cap,
                     "\"base\":\"%p\",\"bytes\":%zu,\"pages\":%zu,\"touched\":%zu,"
                     "\"pattern\":\"%s\",\"order\":[",
                     base, len, npages, n, pattern);
    size_t at = (size_t)w;
    for (size_t i = 0; i < shown && at < cap; i++)
        at += (size_t)snprintf(s + at, cap - at, "%s%u", i ? "," : "", order_at(order, i));
    if (at < cap)
        snprintf(s + at, cap - at, "]%s", shown < n ? ",\"order_truncated\":true" : "");
    ovl__trace_instant_json("watch", "page-access", s);
}

void ovl__trace_init(void)
{
    const char *f = getenv("OVL_TRACE");
    ovl__trace_on = 0;
    atomic_store(&T.next, 0);
    atomic_store(&T.dropped, 0);
    if (!f || !*f)
        return;
    const char *r = strstr(f, "%r");
    int n;
    if (r)
        n = snprintf(T.path, sizeof T.path, "%.*s%d%s", (int)(r - f), f, ovl__g.rank, r + 2);
    else
        n = snprintf(T.path, sizeof T.path, "%s.%d.json", f, ovl__g.rank);
    if (n < 0 || (size_t)n >= sizeof T.path) {
        ovl__info("trace: OVL_TRACE path too long: tracing off");
        return;
    }
    size_t cap = 1u << 18;
    const char *c = getenv("OVL_TRACE_EVENTS");
    if (c && *c) {
        char *end;
        unsigned long long v = strtoull(c, &end, 10);
        if (*end == 0 && v >= 16 && v <= (1ull << 26))
            cap = (size_t)v;
    }
    T.ev = ovl__page_alloc(cap * sizeof *T.ev); /* zeroed; megabytes: never malloc'd */
    if (!T.ev) {
        ovl__info("trace: no memory for %zu events: tracing off", cap);
        return;
    }
    T.cap = cap;
    ovl__trace_on = 1;
}

static void put_event(FILE *f, const struct ev *e, int first)
{
    if (e->ph == 'M') {
        fprintf(f,
                "%s\n{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,"
                "\"args\":{\"name\":\"%s\"}}",
                first ? "" : ",", e->name, ovl__g.rank, e->tid, e->cat);
        return;
    }
    fprintf(f,
            "%s\n{\"ph\":\"%c\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f",
            first ? "" : ",", e->ph, e->cat, e->name, ovl__g.rank, e->tid, e->ts);
    if (e->ph == 'X')
        fprintf(f, ",\"dur\":%.3f", e->dur);
    else
        fputs(",\"s\":\"t\"", f);
    if (e->json) {
        fprintf(f, ",\"args\":{%s}", e->json);
    } else if (e->k[0]) {
        fputs(",\"args\":{", f);
        for (int i = 0; i < 3 && e->k[i]; i++)
            fprintf(f, "%s\"%s\":%lld", i ? "," : "", e->k[i], e->v[i]);
        fputc('}', f);
    }
    fputc('}', f);
}

void ovl__trace_fini(void)
{
    if (!ovl__trace_on)
        return;
    ovl__trace_on = 0;
    size_t n = atomic_load(&T.next);
    if (n > T.cap)
        n = T.cap;
    FILE *f = fopen(T.path, "w");
    if (!f) {
        ovl__report(OVL_ERR_ARG, "ovl_finalize", "OVL_TRACE: cannot write %s", T.path);
    } else {
        fputs("{\"traceEvents\":[", f);
        fprintf(f,
                "\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"name\":\"rank %d\"}}",
                ovl__g.rank, ovl__g.rank);
        fprintf(f,
                ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"sort_index\":%d}}",
                ovl__g.rank, ovl__g.rank);
        for (size_t i = 0; i < n; i++)
            if (T.ev[i].name)
                put_event(f, &T.ev[i], 0);
        unsigned long long dropped = atomic_load(&T.dropped);
        fprintf(f,
                "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"rank\":%d,\"size\":%d,"
                "\"events\":%zu,\"dropped\":%llu}}\n",
                ovl__g.rank, ovl__g.size, n, dropped);
        if (fclose(f) != 0)
            ovl__report(OVL_ERR_ARG, "ovl_finalize", "OVL_TRACE: error writing %s", T.path);
        if (dropped)
            fprintf(stderr,
                    "ovl: trace %s: buffer full, %llu events dropped (raise OVL_TRACE_EVENTS)\n",
                    T.path, dropped);
    }
    for (size_t i = 0; i < n; i++)
        free(T.ev[i].json);
    ovl__page_free(T.ev);
    T.ev = NULL;
    T.cap = 0;
}
