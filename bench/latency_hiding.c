/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench latency-hiding: the paper's benchmark (Strumpen 1995, section 5,
 * Tables 1-3). Two ranks exchange two messages of equal payload; per payload
 * and variant it measures
 *   (a) the transfer time of the exchange alone (median of reps),
 *   (b) the dedicated daxpy count: daxpys that fit in that time,
 *   (c) the daxpys done while the exchange runs, the loop ended by the
 *       send's (then the receive's) completion,
 * and reports the useful CPU utilisation (c)/(b) next to the communication
 * time with and without the overlapped loop, and per payload the bound the
 * machine sets on it (xchg_bound), measured in the same run.
 */
#include "exchange.h"

#include <stdlib.h>
#include <string.h>

static const char *const CMD = "latency-hiding";

static const char HELP[] =
    "Usage: ovl-bench latency-hiding [options]   (exactly 2 ranks)\n"
    "\n"
    "The latency-hiding benchmark of Strumpen (1995), section 5: both ranks exchange\n"
    "one message of each payload at the same time. For each variant and payload:\n"
    "  transfer    ms for the exchange alone (median over reps)\n"
    "  dedicated   daxpys (y = a*x + y, n = 1000) that fit in that time\n"
    "  send/recv   daxpys done while the exchange runs, loop stopped by the send's\n"
    "              / receive's completion (an ovl continuation, or MPI_Test)\n"
    "  util        send/recv count divided by dedicated: useful CPU utilisation\n"
    "  bound       per payload, the most useful CPU this machine allows: 1 - the\n"
    "              share of each rank's core that the exchange alone takes when\n"
    "              nothing polls (below); the same on every row of a payload\n"
    "  comm        communication time while daxpy runs, relative to alone\n"
    "  post        us to post both messages (and, for ovl, their continuations)\n"
    "\n"
    "Variants:\n"
    "  ovl             ovl_isend/ovl_irecv + ovl_continue, progress thread on\n"
    "  ovl-marshal     ovl_isend_stream/ovl_irecv_stream writing/reading each double\n"
    "                  with ovl_stream_write_double/read_double\n"
    "  mpi-poll-K      MPI_Isend/MPI_Irecv, MPI_Test every K daxpys\n"
    "  mpi-poll-marshal-K  the same with a hand-written pack/unpack loop (--marshal)\n"
    "  mpi-wait        MPI_Isend/MPI_Irecv, the dedicated count of daxpys (no MPI call\n"
    "                  among them), then MPI_Waitany until both completed: what most\n"
    "                  users write. Nothing can stop its loop at a completion, so its\n"
    "                  send/recv columns show that fixed work, comm the time to each\n"
    "                  request's completion, and util = 2 - comm: the share of the\n"
    "                  transfer time hidden behind the work (blocking MPI takes twice\n"
    "                  the transfer time, a perfect overlap once; below 0: slower\n"
    "                  than blocking). For an exchange that ends on time it is the\n"
    "                  paper's ratio, and the same bound holds\n"
    "  mpi-async       mpi-wait with MPICH's asynchronous progress thread on: needs\n"
    "                  MPICH, MPIR_CVAR_ASYNC_PROGRESS=1 in the ranks' environment, and\n"
    "                  a run of its own (the thread spins on the cores of every variant\n"
    "                  in the process, so no other variant is accepted with it; the\n"
    "                  bound is not measured there). Its dedicated count comes from the\n"
    "                  daxpy rate measured before MPI_Init started the thread.\n"
    "                  bench/peers.sh alternates such runs with runs of the others.\n"
    "  tcp-thread      not MPI and NOT a bound: one TCP connection, two helper threads\n"
    "                  blocked in send()/recv(). The helpers share the computing core,\n"
    "                  and when the scheduler runs them decides when its loop ends: its\n"
    "                  util can exceed 1 or fall far below the bound\n"
    "\n"
    "The bound: the exchange alone with MPI_Wait (its transfer time), then about\n"
    "--bound-secs of back-to-back exchanges in which both ranks sleep --bound-poll-us\n"
    "between MPI_Testall calls; each rank reads from /proc/stat how busy the CPUs it\n"
    "may run on were (per core). Before it the same polls with no message in flight\n"
    "give the background (the polls' own cost and whatever else runs there), which\n"
    "is taken off: bound = 1 - (busy time per exchange - background) / transfer\n"
    "time. On the emulated cluster (one kernel, a CPU per host with --pin) what is\n"
    "left is the kernel's network work and the socket copies on the rank's core, the\n"
    "part no mechanism avoids. It is sound only on an otherwise idle machine: where\n"
    "other processes keep the CPUs busy the kernel's work only displaces theirs and\n"
    "does not show (a background above 25 % prints a warning). bound_err in the CSV\n"
    "is its resolution. A util above the bound means the exchange took longer under\n"
    "computation than alone (comm > 1) and the paper's ratio counted the daxpys done\n"
    "in the extra time.\n"
    "\n"
    "Options:\n"
    "  --sizes LIST     payloads, e.g. 4k,64k,1m (default 4k,8k,...,1m)\n"
    "  --reps N         measured reps per point (default 20)\n"
    "  --warmup N       discarded reps before them (default 2)\n"
    "  --variants LIST  any of ovl,ovl-marshal,mpi-poll,mpi-poll-marshal,mpi-wait,\n"
    "                   mpi-async (alone),tcp-thread (default ovl,ovl-marshal,mpi-poll,\n"
    "                   mpi-wait)\n"
    "  --poll-k LIST    K values of the mpi-poll variants (default 1,10,100)\n"
    "  --marshal        add the mpi-poll-marshal variants\n"
    "  --bound-secs S   length of the bound's measured window per payload, and twice\n"
    "                   its background's (default 1; 0: no bound). /proc/stat counts\n"
    "                   in 10 ms: shorter is coarser\n"
    "  --bound-poll-us N  the bound's sleep between MPI_Testall calls (default 50;\n"
    "                   sparser polls stretch the exchange and cost more per exchange)\n"
    "  --csv FILE       write one row per (variant, payload) with all raw numbers\n"
    "  --help           this text\n"
    "\n"
    "The ovl variants take OVL_LATENESS_US, OVL_FRAGMENT_SIZE and\n"
    "OVL_STREAM_WINDOW from the environment (docs/ENV.md); OVL_PROGRESS is forced\n"
    "to thread.\n";

struct lh_opts {
    size_t *sizes;
    int nsizes;
    int reps, warmup;
    const char *csv;
    struct xchg_variant *var;
    int nvar;
    double bound_secs;
    long bound_poll_us;
    int async; /* mpi-async asked for */
};

static void add_variant(struct lh_opts *o, enum xchg_kind kind, const char *name, long k)
{
    struct xchg_variant *v = realloc(o->var, (size_t)(o->nvar + 1) * sizeof *v);
    if (!v)
        bench_fail("out of memory");
    o->var = v;
    v = &o->var[o->nvar++];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->k = k;
    if (k > 0)
        snprintf(v->name, sizeof v->name, "%s-%ld", name, k);
    else
        snprintf(v->name, sizeof v->name, "%s", name);
}

static void parse(int argc, char **argv, struct lh_opts *o)
{
    const char *sizes = "4k,8k,16k,32k,64k,128k,256k,512k,1m";
    const char *variants = "ovl,ovl-marshal,mpi-poll,mpi-wait";
    const char *pollk = "1,10,100";
    int marshal = 0;
    o->reps = 20;
    o->warmup = 2;
    o->csv = NULL;
    o->bound_secs = 1.0;
    o->bound_poll_us = 50;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            bench_help_exit(HELP);
        else if (!strcmp(a, "--sizes"))
            sizes = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--reps"))
            o->reps = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 100000);
        else if (!strcmp(a, "--warmup"))
            o->warmup = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 0, 1000);
        else if (!strcmp(a, "--csv"))
            o->csv = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--variants"))
            variants = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--poll-k"))
            pollk = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--marshal"))
            marshal = 1;
        else if (!strcmp(a, "--bound-secs"))
            o->bound_secs = bench_parse_double(CMD, a, bench_optarg(CMD, argc, argv, &i), 0, 3600);
        else if (!strcmp(a, "--bound-poll-us"))
            o->bound_poll_us =
                bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1000000);
        else
            bench_usage_error(CMD, "unknown option '%s'", a);
    }
    o->nsizes = bench_parse_size_list(CMD, "--sizes", sizes, &o->sizes);
    for (int i = 0; i < o->nsizes; i++)
        if (o->sizes[i] % sizeof(double) || o->sizes[i] > (1u << 30))
            bench_usage_error(CMD, "--sizes: %zu is not a multiple of 8 bytes up to 1g",
                              o->sizes[i]);
    long *k;
    int nk = bench_parse_long_list(CMD, "--poll-k", pollk, 1, 1000000, &k);

    char *copy = strdup(variants), *save = NULL;
    if (!copy)
        bench_fail("out of memory");
    int want_mpm = marshal;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "ovl"))
            add_variant(o, XK_OVL, "ovl", 0);
        else if (!strcmp(t, "ovl-marshal"))
            add_variant(o, XK_OVL_MARSHAL, "ovl-marshal", 0);
        else if (!strcmp(t, "mpi-poll"))
            for (int j = 0; j < nk; j++)
                add_variant(o, XK_MPI_POLL, "mpi-poll", k[j]);
        else if (!strcmp(t, "mpi-poll-marshal"))
            want_mpm = 1;
        else if (!strcmp(t, "mpi-wait"))
            add_variant(o, XK_MPI_WAIT, "mpi-wait", 0);
        else if (!strcmp(t, "mpi-async")) {
            if (!o->async)
                add_variant(o, XK_MPI_ASYNC, "mpi-async", 0);
            o->async = 1;
        } else if (!strcmp(t, "tcp-thread"))
            add_variant(o, XK_TCP_THREAD, "tcp-thread", 0);
        else
            bench_usage_error(CMD,
                              "--variants: unknown variant '%s' (ovl, ovl-marshal, "
                              "mpi-poll, mpi-poll-marshal, mpi-wait, mpi-async, tcp-thread)",
                              t);
    }
    if (want_mpm)
        for (int j = 0; j < nk; j++)
            add_variant(o, XK_MPI_POLL_MARSHAL, "mpi-poll-marshal", k[j]);
    free(copy);
    free(k);
    if (o->nvar == 0)
        bench_usage_error(CMD, "--variants: nothing to run");
}

static void csv_stat(FILE *f, struct bench_stat s)
{
    fprintf(f, ",%.6g,%.6g,%.6g", s.med, s.min, s.max);
}

static void print_header(int hosts, const ovl_config_t *c, double daxpy_ns, const struct lh_opts *o,
                         int bound)
{
    printf("ovl-bench latency-hiding: 2 ranks on %d host%s; medians of %d reps (%d warm-up "
           "discarded)\n",
           hosts, hosts == 1 ? "" : "s", o->reps, o->warmup);
    if (o->async)
        printf("MPICH's asynchronous progress thread on (MPIR_CVAR_ASYNC_PROGRESS); one daxpy "
               "(n=%d) + clock read = %.0f ns before MPI_Init (the dedicated rate), %.0f ns "
               "with the thread; ovl inline, unused; no bound measured (see the other run)\n",
               BENCH_DAXPY_N, bench_daxpy_ns_clean, daxpy_ns);
    else
        printf("ovl: progress thread, lateness_us %u, fragment %zu B, window %u; "
               "one daxpy (n=%d) + clock read = %.0f ns\n",
               c->progress.lateness_us, c->stream.fragment_size, c->stream.window, BENCH_DAXPY_N,
               daxpy_ns);
    printf("util = overlapped daxpys / dedicated daxpys (the paper's ratio); mpi-wait, "
           "mpi-async: fixed work, util = 2 - comm (the share of the transfer hidden)\n");
    if (bound)
        printf("bound = 1 - share of a rank's core the exchange alone takes with nothing "
               "polling (MPI, sleeping %ld us between MPI_Testall, ~%.1f s per payload), less "
               "the background (the same polls, no message)\n",
               o->bound_poll_us, o->bound_secs);
    printf("comm = communication time with daxpy / alone\n\n");
    printf("%-20s %8s %10s %9s %9s %9s %7s %7s %6s %6s %6s %6s\n", "variant", "payload", "transfer",
           "dedicated", "daxpy", "daxpy", "util", "util", "bound", "comm", "comm", "post");
    printf("%-20s %8s %10s %9s %9s %9s %7s %7s %6s %6s %6s %6s\n", "", "", "ms", "daxpy", "(send)",
           "(recv)", "send", "recv", "", "send", "recv", "us");
}

int bench_latency_hiding(int argc, char **argv)
{
    struct lh_opts o = { 0 };
    parse(argc, argv, &o);
    bench_require_two_ranks(CMD);
    int async_on = xchg_check_async(CMD, o.async, o.nvar - o.async);
    FILE *csv = bench_csv_open(CMD, o.csv);

    /* A process of mpi-async runs no ovl variant: ovl without its thread. */
    ovl_config_t eff;
    bench_ovl_start(o.async, &eff);
    int hosts = bench_hosts();
    double dns = xchg_daxpy_ns();
    const int do_bound = o.bound_secs > 0 && !o.async;

    if (bench_rank == 0) {
        print_header(hosts, &eff, dns, &o, do_bound);
        if (csv)
            fprintf(csv, "bench,variant,payload_bytes,hosts,reps,warmup,"
                         "fragment_size,stream_window,daxpy_ns,"
                         "transfer_ms_med,transfer_ms_min,transfer_ms_max,"
                         "dedicated_med,dedicated_min,dedicated_max,"
                         "send_daxpy_med,send_daxpy_min,send_daxpy_max,"
                         "recv_daxpy_med,recv_daxpy_min,recv_daxpy_max,"
                         "util_send,util_recv,"
                         "comm_send_ms_med,comm_send_ms_min,comm_send_ms_max,"
                         "comm_recv_ms_med,comm_recv_ms_min,comm_recv_ms_max,"
                         "loop_send_ms_med,loop_recv_ms_med,"
                         "cpu_share_send,cpu_share_recv,wakeups_send,wakeups_recv,"
                         "oncpu_send,oncpu_recv,wakeups_alone,"
                         "post_us_med,post_us_min,post_us_max,lateness_us,"
                         "util_kind,async_progress,daxpy_ns_clean,"
                         "bound,bound_share,bound_err,bound_core_ms,bound_transfer_ms,"
                         "bound_exchanges,bound_window_s,bound_poll_us,bound_ncpu,"
                         "bound_background\n");
    }
    for (int s = 0; s < o.nsizes; s++) {
        xchg_setup(o.sizes[s]);
        struct xchg_bound b;
        double bg = 0, bg_err = 0;
        int have_bound =
            do_bound &&
            xchg_bound_background(o.bound_secs / 2, o.bound_poll_us, &bg, &bg_err) == 0 &&
            xchg_bound(o.reps, o.warmup, o.bound_secs, o.bound_poll_us, bg, bg_err, &b) == 0;
        if (do_bound && !have_bound && bench_rank == 0 && s == 0)
            fprintf(stderr, "ovl-bench %s: /proc/stat unreadable: no bound\n", CMD);
        if (have_bound && bg > 0.25 && bench_rank == 0)
            fprintf(stderr,
                    "ovl-bench %s: warning: with no message in flight %.0f%% of the ranks' "
                    "cores were busy: something else runs there, and the bound (with every "
                    "figure here) is unsound\n",
                    CMD, 100 * bg);
        for (int vi = 0; vi < o.nvar; vi++) {
            const struct xchg_variant *v = &o.var[vi];
            struct lh_result r;
            lh_measure(v, o.reps, o.warmup, &r);
            if (bench_rank != 0)
                continue;
            char sz[32], bd[16] = "-";
            if (have_bound)
                snprintf(bd, sizeof bd, "%5.1f%%", 100 * b.bound);
            double tm = r.transfer_ms.med;
            printf("%-20s %8s %10.3f %9.0f %9.0f %9.0f %6.1f%% %6.1f%% %6s %6.2f %6.2f %6.1f\n",
                   v->name, bench_fmt_size(r.payload, sz, sizeof sz), tm, r.dedicated.med,
                   r.ovl_daxpy[0].med, r.ovl_daxpy[1].med, 100 * r.util[0], 100 * r.util[1], bd,
                   tm > 0 ? r.comm_ms[0].med / tm : 0, tm > 0 ? r.comm_ms[1].med / tm : 0,
                   r.post_us.med);
            fflush(stdout);
            if (!csv)
                continue;
            fprintf(csv, "latency-hiding,%s,%zu,%d,%d,%d,%zu,%u,%.1f", v->name, r.payload, hosts,
                    o.reps, o.warmup, eff.stream.fragment_size, eff.stream.window, dns);
            csv_stat(csv, r.transfer_ms);
            csv_stat(csv, r.dedicated);
            csv_stat(csv, r.ovl_daxpy[0]);
            csv_stat(csv, r.ovl_daxpy[1]);
            fprintf(csv, ",%.4f,%.4f", r.util[0], r.util[1]);
            csv_stat(csv, r.comm_ms[0]);
            csv_stat(csv, r.comm_ms[1]);
            fprintf(csv, ",%.6g,%.6g,%.4f,%.4f,%.1f,%.1f,%.4f,%.4f,%.1f", r.loop_ms[0].med,
                    r.loop_ms[1].med, r.cpu_share[0], r.cpu_share[1], r.wakeups[0], r.wakeups[1],
                    r.oncpu[0], r.oncpu[1], r.transfer_wakeups);
            csv_stat(csv, r.post_us);
            fprintf(csv, ",%u,%s,%d,", eff.progress.lateness_us, r.fixed ? "fixed" : "stop",
                    async_on);
            if (bench_daxpy_ns_clean > 0)
                fprintf(csv, "%.1f", bench_daxpy_ns_clean);
            if (have_bound)
                fprintf(csv, ",%.4f,%.4f,%.4f,%.6g,%.6g,%ld,%.3f,%ld,%d,%.4f\n", b.bound, b.share,
                        b.err, b.core_ms, b.transfer_ms, b.exchanges, b.window_s, b.poll_us, b.ncpu,
                        b.background);
            else
                fprintf(csv, ",,,,,,,,,,\n");
        }
        xchg_teardown();
    }
    xchg_shutdown();
    if (bench_rank == 0)
        printf("(daxpy checksum %.3g)\n", bench_daxpy_checksum());
    bench_ovl_finalize();
    bench_csv_close(csv, o.csv);
    free(o.sizes);
    free(o.var);
    return 0;
}
