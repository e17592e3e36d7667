/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The tiny harness every test program shares. It starts MPI (thread level
 * MPI_THREAD_MULTIPLE unless a test asks for less) and ovl, counts checks,
 * and on the first failed check prints
 *
 *     FAIL file:line expression -> ovl_strerror(code) [rank, detail]
 *
 * and aborts the whole job, so ctest's FAIL_REGULAR_EXPRESSION and exit code
 * both see it. th_finish() prints "rank R: N checks passed" on every rank and
 * one collective success line. Random data comes from a per-rank generator
 * seeded from OVL_TEST_SEED (default fixed, printed), so a failing run can be
 * replayed exactly.
 *
 * Checks may be made from continuations and marshal functions, on any
 * thread: the counter is atomic and a failure aborts at once.
 */
#ifndef OVL_TEST_HARNESS_H
#define OVL_TEST_HARNESS_H

#include "ovl.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int th_rank; /* rank in MPI_COMM_WORLD (-1 before MPI_Init) */
extern int th_size;

/* MPI_Init_thread(MPI_THREAD_MULTIPLE) and ovl_init(MPI_COMM_WORLD, cfg)
 * (cfg may be NULL: environment and defaults). Fails the test if MPI does
 * not provide MPI_THREAD_MULTIPLE. */
void th_init(int *argc, char ***argv, const char *name, const ovl_config_t *cfg);
/* @cfg with the monitor OVL_TEST_MONITOR names (auto, uffd, mprotect,
 * explicit) when it is set and @cfg does not choose one: how a test variant
 * picks the explicit monitor, which ovl_init refuses from OVL_MONITOR. The
 * result is @cfg itself or static storage; th_init applies it. */
const ovl_config_t *th_config(const ovl_config_t *cfg);
/* MPI only, at thread level `required`; returns the level MPI provides. */
int th_init_mpi(int *argc, char ***argv, const char *name, int required);
/* Finalise ovl if it is initialised (checked), print the per-rank and the
 * collective success lines, MPI_Finalize. Returns 0 for main(). */
int th_finish(void);

_Noreturn void th_fail(const char *file, int line, const char *expr, const char *why);
_Noreturn void th_fail_rc(const char *file, int line, const char *expr, int got, int want);
void th_pass(void);
unsigned long th_checks(void);

/* An ovl return code as "OVL_ERR_TAG (tag out of range ...)". */
const char *th_code_name(int code);

#define CHECK(expr)                                   \
    do {                                              \
        if (expr)                                     \
            th_pass();                                \
        else                                          \
            th_fail(__FILE__, __LINE__, #expr, NULL); \
    } while (0)

/* CHECK with a printf-style explanation printed on failure. */
#define CHECKF(expr, ...)                                   \
    do {                                                    \
        if (expr) {                                         \
            th_pass();                                      \
        } else {                                            \
            char th_why_[512];                              \
            snprintf(th_why_, sizeof th_why_, __VA_ARGS__); \
            th_fail(__FILE__, __LINE__, #expr, th_why_);    \
        }                                                   \
    } while (0)

/* An ovl call that must succeed. */
#define CHECK_OK(call) EXPECT_ERR(call, OVL_SUCCESS)

/* An ovl call that must return exactly `code`. */
#define EXPECT_ERR(call, code)                                       \
    do {                                                             \
        int th_rc_ = (call), th_want_ = (code);                      \
        if (th_rc_ == th_want_)                                      \
            th_pass();                                               \
        else                                                         \
            th_fail_rc(__FILE__, __LINE__, #call, th_rc_, th_want_); \
    } while (0)

/* An ovl_param_t with one option set, for a call's param argument. */
#define TH_MONITOR(m) (&(ovl_param_t){ .field_mask = OVL_PARAM_FIELD_MONITOR, .monitor = (m) })
#define TH_COUNT(n)   (&(ovl_param_t){ .field_mask = OVL_PARAM_FIELD_COUNT, .count = (n) })
#define TH_DECOMP(n)  (&(ovl_param_t){ .field_mask = OVL_PARAM_FIELD_DECOMP, .decomp = (n) })
#define TH_ORDER(o)   (&(ovl_param_t){ .field_mask = OVL_PARAM_FIELD_ORDER, .order = (o) })
#define TH_PIGGYBACK(n) \
    (&(ovl_param_t){ .field_mask = OVL_PARAM_FIELD_PIGGYBACK, .piggyback = (n) })

/* An MPI call that must return MPI_SUCCESS. */
#define CHECK_MPI(call)                                   \
    do {                                                  \
        int th_mrc_ = (call);                             \
        if (th_mrc_ == MPI_SUCCESS) {                     \
            th_pass();                                    \
        } else {                                          \
            char th_why_[MPI_MAX_ERROR_STRING + 32];      \
            int th_len_ = 0;                              \
            MPI_Error_string(th_mrc_, th_why_, &th_len_); \
            th_fail(__FILE__, __LINE__, #call, th_why_);  \
        }                                                 \
    } while (0)

/* Spin until `cond` holds, calling `step` (e.g. ovl_progress() or nothing)
 * each time; FAIL after `secs` seconds. Only for hang detection: a correct
 * library meets the condition long before. */
#define TH_WAIT_UNTIL(cond, secs, step)                                  \
    do {                                                                 \
        double th_t0_ = th_now();                                        \
        while (!(cond)) {                                                \
            step;                                                        \
            if (th_now() - th_t0_ > (secs))                              \
                th_fail(__FILE__, __LINE__, #cond, "timed out (hang?)"); \
        }                                                                \
        th_pass();                                                       \
    } while (0)

/* ovl_progress(), failing the test if it returns an error. */
void th_progress(void);

double th_now(void); /* monotonic seconds */
void th_sleep_ms(unsigned ms);

/* ---- deterministic random numbers and byte patterns ------------------- */

typedef struct {
    uint64_t s;
} th_rng_t;

uint64_t th_seed(void);      /* OVL_TEST_SEED or the default */
uint64_t th_mix(uint64_t x); /* splitmix64 finaliser */
/* A generator for (seed, a, b, c): both ends of a message can derive the
 * same sequence from e.g. (source, destination, tag). */
void th_rng_init(th_rng_t *r, uint64_t a, uint64_t b, uint64_t c);
uint64_t th_rand(th_rng_t *r);
/* Uniform in [0, n) (n > 0). */
uint64_t th_below(th_rng_t *r, uint64_t n);
/* Log-uniform size in [0, max]: small sizes as likely as large ones. */
size_t th_size_log(th_rng_t *r, size_t max);
/* The per-rank generator (seeded with th_seed and the world rank). */
th_rng_t *th_rng(void);

/* Fill / verify n bytes of the pattern identified by `key`, starting at
 * byte `offset` of the pattern (so a message can be checked in pieces). */
void th_fill(void *buf, size_t n, uint64_t key, size_t offset);
/* Index of the first byte that differs, or SIZE_MAX if all match. */
size_t th_verify(const void *buf, size_t n, uint64_t key, size_t offset);
uint8_t th_pattern_byte(uint64_t key, size_t i);

#define TH_OK SIZE_MAX

#endif /* OVL_TEST_HARNESS_H */
