/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Buffers carved from one block, as real codes allocate them: a pending
 * delta receive R whose first and last pages hold other data the program
 * keeps using, and a send buffer S that starts on R's last page.
 *
 *   ovncopy   ovl's own copy of a delta piece of S reads R's guarded last
 *             page through /proc/self/mem: no fault at all (before, glibc's
 *             `rep movsb` trapped once per byte there).
 *   neighbours the program's own accesses to the data around R while R is
 *             pending: a string move or store takes one trap per page, the
 *             libc string functions and loops the compiler vectorises never
 *             one per byte, and every byte (R's and its neighbours') is
 *             verified; ovl's advice to give R pages of its own is said
 *             on stderr, once.
 *
 *   mpi        ovl_irecv into, ovl_isend from and ovl_get into buffers that
 *             start on R's guarded last page: MPI cannot reach that page,
 *             so ovl stages them (MPI's CMA copy failed with "Bad address").
 *   send       the same work around a pending delta send T while the
 *             program produces T: a send never guards its edge pages, so
 *             none of it faults, and producing T faults once a page at
 *             most; the receiver verifies every byte.
 *   get        the same work around a pending ovl_get's destination D,
 *             whose edge pages are guarded as a receive's (each rank gets
 *             from its partner).
 *
 * Ranks are paired (r, r^1); the even one is watched, the odd one only
 * sends after the even one says so, so R is pending through each phase.
 * R is fault-monitored through ovl_delta_recv with a monitor (MPROTECT) whatever the
 * variant (edge pages are guarded with mprotect under every fault monitor).
 */
#include "harness.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t ps;
static unsigned char *blk, *R, *S;
static size_t rlen, slen;
static int peer, even;

static unsigned char val(size_t i, int seed)
{
    return (unsigned char)((i * 131u + (size_t)seed * 7u) ^ (i >> 9));
}

static ovl_stats_t stats(void)
{
    ovl_stats_t s;
    CHECK_OK(ovl_stats_get(&s, sizeof s));
    return s;
}

static void token(int send, int tag)
{
    int t = tag;
    ovl_request_t q;
    if (send)
        CHECK_OK(ovl_isend(&t, 1, MPI_INT, peer, tag, &q));
    else
        CHECK_OK(ovl_irecv(&t, 1, MPI_INT, peer, tag, &q));
    CHECK_OK(ovl_wait(&q, NULL));
    CHECK(t == tag);
}

/* The odd rank's side of a phase: wait for the token, then send R's data. */
static void feed_n(int seed, int tag, size_t n)
{
    unsigned char *src = malloc(n);
    CHECK(src != NULL);
    for (size_t i = 0; i < n; i++)
        src[i] = val(i, seed);
    token(0, tag);
    ovl_request_t q;
    CHECK_OK(ovl_delta_send_begin(src, (int)n, MPI_BYTE, peer, tag, NULL, &q));
    CHECK_OK(ovl_delta_send_end(q, NULL));
    CHECK_OK(ovl_wait(&q, NULL));
    free(src);
}

static void feed(int seed, int tag)
{
    feed_n(seed, tag, rlen);
}

static void check_r(int seed)
{
    for (size_t i = 0; i < rlen; i++)
        CHECKF(R[i] == val(i, seed), "R[%zu] = %u, want %u", i, R[i], val(i, seed));
}

/* Phase 1: a delta send from S while R (sharing S's first page) is pending. */
static void own_copy(void)
{
    if (!even) {
        unsigned char *in = malloc(slen);
        CHECK(in != NULL);
        ovl_request_t q;
        CHECK_OK(ovl_irecv(in, (int)slen, MPI_BYTE, peer, 1, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        for (size_t i = 0; i < slen; i++)
            CHECKF(in[i] == val(i, 5), "S[%zu] arrived as %u", i, in[i]);
        free(in);
        feed(1, 2);
        return;
    }
    for (size_t i = 0; i < slen; i++)
        S[i] = val(i, 5);
    ovl_request_t r, s;
    CHECK_OK(ovl_delta_recv(R, (int)rlen, MPI_BYTE, peer, 2, TH_MONITOR(OVL_MONITOR_MPROTECT), &r));
    ovl_stats_t a = stats();
    CHECK_OK(ovl_delta_send_begin(S, (int)slen, MPI_BYTE, peer, 1, NULL, &s));
    CHECK_OK(ovl_delta_send_end(s, NULL));
    CHECK_OK(ovl_wait(&s, NULL));
    ovl_stats_t b = stats();
    CHECKF(b.edge_steps == a.edge_steps && b.faults - a.faults <= 2,
           "sending S took %llu faults, %llu neighbour steps",
           (unsigned long long)(b.faults - a.faults),
           (unsigned long long)(b.edge_steps - a.edge_steps));
    CHECKF(b.edge_bounces > a.edge_bounces, "no piece was copied around R's guarded page");
    token(1, 2);
    CHECK_OK(ovl_wait(&r, NULL));
    check_r(1);
    for (size_t i = 0; i < slen; i++)
        CHECKF(S[i] == val(i, 5), "S[%zu] changed to %u", i, S[i]);
}

#if defined(__x86_64__)
static void rep_movsb(void *dst, const void *src, size_t n)
{
    __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}
static void rep_stosq(void *dst, unsigned long v, size_t n)
{
    __asm__ volatile("rep stosq" : "+D"(dst), "+c"(n) : "a"(v) : "memory");
}
#endif

#if defined(__x86_64__)
/* One access each to memory at p (a neighbour of R on its guarded page,
 * or an ordinary buffer for reference), with fixed register contents; a
 * load returns what it loaded, merged into the register as the CPU does. */
typedef uint64_t (*access_fn)(unsigned char *p);
static const uint64_t X0[4] = { 0x1122334455667788ul, 0x99aabbccddeeff00ul, 0x0fedcba987654321ul,
                                0x5a5aa5a5c3c33c3cul };
#define A(name, body, ...)                                                                     \
    static uint64_t name(unsigned char *p)                                                     \
    {                                                                                          \
        uint64_t r = 0xf0e1d2c3b4a59687ul;                                                     \
        __asm__ volatile(body                                                                  \
                         : "+&r"(r)                                                            \
                         : "r"(p), "r"(X0), ##__VA_ARGS__                                      \
                         : "memory", "rax", "rcx", "rdx", "r9", "r11", "xmm0", "xmm1", "xmm2", \
                           "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",    \
                           "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");                       \
        return r;                                                                              \
    }
A(st8, "mov $0x1234, %%eax\n\tmovb %%al, 3(%1)")
A(st8h, "mov $0x1234, %%eax\n\tmovb %%ah, 5(%1)")
A(st16, "mov $0xbeef, %%eax\n\tmovw %%ax, 6(%1)")
A(st32sib, "mov $3, %%ecx\n\tmov $0xcafef00d, %%eax\n\tmovl %%eax, 4(%1,%%rcx,4)")
A(st64rex, "mov %1, %%r9\n\tmovq 8(%2), %%r11\n\tmovq %%r11, 40(%%r9)")
A(stimm64, "movq $-5, 48(%1)")
A(stimm8, "movb $0x7f, 1(%1)")
A(stimm16, "movw $0x1234, 56(%1)")
A(stnti, "movq 16(%2), %%rax\n\tmovnti %%rax, 64(%1)")
A(stsd, "movdqu (%2), %%xmm0\n\tmovsd %%xmm0, 72(%1)")
A(stss, "movdqu 8(%2), %%xmm1\n\tmovss %%xmm1, 84(%1)")
A(stups, "movdqu (%2), %%xmm0\n\tmovups %%xmm0, 90(%1)")
A(stlpd, "movdqu 8(%2), %%xmm0\n\tmovlpd %%xmm0, 110(%1)")
A(sthpd, "movdqu 8(%2), %%xmm0\n\tmovhpd %%xmm0, 120(%1)")
A(stq, "movdqu 16(%2), %%xmm1\n\tmovq %%xmm1, 130(%1)")
A(std, "movdqu 16(%2), %%xmm1\n\tmovd %%xmm1, 140(%1)")
A(stdqu9, "movdqu 4(%2), %%xmm9\n\tmovdqu %%xmm9, 150(%1)")
A(stzero, "pxor %%xmm0, %%xmm0\n\tmovups %%xmm0, 170(%1)")
A(ld64, "movq 3(%1), %0")
A(ld32, "movq $-1, %0\n\tmovl 9(%1), %k0")
A(ld16, "movq $-1, %0\n\tmovw 11(%1), %w0")
A(ld8h, "mov %0, %%rax\n\tmovb 13(%1), %%ah\n\tmov %%rax, %0")
A(ldzb, "movzbl 14(%1), %k0")
A(ldsb, "movsbq 15(%1), %0")
A(ldsw, "movswl 16(%1), %k0")
A(ldsl, "movslq 17(%1), %0")
A(ldr11, "movq $-1, %%r11\n\tmovl 18(%1,%%r11,1), %%r11d\n\tmov %%r11, %0")
/* integer operations on memory: the flags (and the register) they leave */
#define FL "\n\tpushfq\n\tpop %0"
A(cmpimm, "cmpl $5, 4(%1)" FL)
A(cmpb, "mov $0x1234, %%eax\n\tcmpb %%al, 3(%1)" FL)
A(cmpah, "mov $0x1234, %%eax\n\tcmpb %%ah, 5(%1)" FL)
A(cmpr, "movq 8(%2), %%rax\n\tcmpq 8(%1), %%rax" FL)
A(testimm, "testl $0x80, 12(%1)" FL)
A(testb, "mov $0x41, %%eax\n\ttestb %%al, 13(%1)" FL)
A(addimm, "addl $1, 20(%1)" FL)
A(addbig, "addl $0x7ffffff0, 60(%1)" FL)
A(subm, "movq (%2), %%rax\n\tsubq %%rax, 24(%1)" FL)
A(addr16, "movq $-1, %%rax\n\taddw 28(%1), %%ax" FL "\n\txor %%rax, %0")
A(subr32, "movq $-1, %%rax\n\tsubl 29(%1), %%eax" FL "\n\txor %%rax, %0")
A(incm, "stc\n\tincl 32(%1)" FL)
A(decb, "clc\n\tdecb 36(%1)" FL)
A(incwrap, "clc\n\tincb 300(%1)" FL) /* 0xff: wraps, CF stays clear */
A(decwrap, "clc\n\tdecb 353(%1)" FL) /* 0x00: wraps, CF stays clear */
A(orimm, "orb $0x81, 40(%1)" FL)
A(xorm, "mov $0x5555aaaa, %%eax\n\txorl %%eax, 44(%1)" FL)
A(andq, "andq $-16, 48(%1)" FL)
A(andr8, "mov $0x1234, %%ecx\n\tandb 50(%1), %%ch" FL "\n\txor %%rcx, %0")
#undef FL
/* AVX (VEX-encoded) stores, run where the CPU has AVX */
A(vupd, "vmovupd (%2), %%ymm0\n\tvmovupd %%ymm0, 8(%1)")
A(vdqu9, "vmovdqu (%2), %%ymm9\n\tvmovdqu %%ymm9, 41(%1)")
A(vsd, "vmovdqu 8(%2), %%xmm1\n\tvmovsd %%xmm1, 80(%1)")
A(vups, "vmovdqu 4(%2), %%xmm9\n\tvmovups %%xmm9, 96(%1)")
A(vhpd, "vmovdqu 8(%2), %%xmm0\n\tvmovhpd %%xmm0, 114(%1)")
A(vq, "vmovdqu 16(%2), %%xmm1\n\tvmovq %%xmm1, 124(%1)")
A(vdw, "vmovdqu 16(%2), %%xmm1\n\tvmovd %%xmm1, 134(%1)")
A(vzero, "vzeroall\n\tvmovupd %%ymm0, 140(%1)")
static const access_fn accesses_avx[] = { vupd, vdqu9, vsd, vups, vhpd, vq, vdw, vzero };
#undef A
/* Loads into vector registers, and stores from them: the register is
 * first filled from X1, then loaded, then dumped (16, 32 or 64 bytes, as
 * its list's instructions allow) into VD, which the returned hash covers,
 * so kept and zeroed bytes above the loaded ones are compared too. The
 * AVX-512 list uses registers 16-31, which a compiler without -mavx512f
 * never allocates; with it they are clobbers too. */
#if defined(__AVX512F__)
#define V_HI                                                                                    \
    , "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", \
        "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31"
#else
#define V_HI
#endif
static const uint64_t X1[8] = { 0x0102030405060708ul, 0x1112131415161718ul, 0x2122232425262728ul,
                                0x3132333435363738ul, 0x4142434445464748ul, 0x5152535455565758ul,
                                0x6162636465666768ul, 0x7172737475767778ul };
static unsigned char VD[64] __attribute__((aligned(64)));
#define V(name, body)                                                                              \
    static uint64_t name(unsigned char *p)                                                         \
    {                                                                                              \
        uint64_t r = 0xf0e1d2c3b4a59687ul, h = 0;                                                  \
        memset(VD, 0, sizeof VD);                                                                  \
        __asm__ volatile(body                                                                      \
                         : "+&r"(r)                                                                \
                         : "r"(p), "r"(X0), "r"(X1), "r"(VD)                                       \
                         : "memory", "rax", "rcx", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", \
                           "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",     \
                           "xmm14", "xmm15" V_HI);                                                 \
        for (size_t i = 0; i < sizeof VD; i++)                                                     \
            h = h * 1099511628211ul + VD[i];                                                       \
        return r ^ h;                                                                              \
    }
/* SSE2, any x86-64 */
#define D16(x) "\n\tmovdqu %%" x ", (%4)"
V(ldups, "movdqu (%3), %%xmm3\n\tmovups 5(%1), %%xmm3" D16("xmm3"))
V(ldss, "movdqu (%3), %%xmm4\n\tmovss 7(%1), %%xmm4" D16("xmm4"))
V(ldsd, "movdqu (%3), %%xmm12\n\tmovsd 9(%1), %%xmm12" D16("xmm12"))
V(ldq, "movdqu (%3), %%xmm5\n\tmovq 11(%1), %%xmm5" D16("xmm5"))
V(ldd, "movdqu (%3), %%xmm6\n\tmovd 13(%1), %%xmm6" D16("xmm6"))
/* movq 15(%rcx), %xmm13 in its 66 REX.W 0f 6e form (the assembler picks f3 0f 7e) */
V(ldqr,
  "movdqu (%3), %%xmm13\n\tmov %1, %%rcx\n\t.byte 0x66, 0x4c, 0x0f, 0x6e, 0x69, 0x0f" D16("xmm13"))
V(ldlps, "movdqu (%3), %%xmm7\n\tmovlps 17(%1), %%xmm7" D16("xmm7"))
V(ldhpd, "movdqu (%3), %%xmm8\n\tmovhpd 19(%1), %%xmm8" D16("xmm8"))
V(ldhps, "movdqu (%3), %%xmm1\n\tmovhps 20(%1), %%xmm1" D16("xmm1"))
V(ldlpd, "movdqu (%3), %%xmm2\n\tmovlpd 22(%1), %%xmm2" D16("xmm2"))
V(ldaps,
  "movdqu (%3), %%xmm9\n\tlea 79(%1), %%rax\n\tand $-64, %%rax\n\tmovaps 16(%%rax), %%xmm9" D16(
      "xmm9"))
V(lddqa, "lea 79(%1), %%rax\n\tand $-64, %%rax\n\tmovdqa 32(%%rax), %%xmm10" D16("xmm10"))
V(lddqu, "movdqu 21(%1), %%xmm15" D16("xmm15"))
#undef D16
/* AVX: legacy loads keep the upper half of the ymm register, VEX loads zero it */
#define D32(x) "\n\tvmovdqu %%" x ", (%4)"
V(vkeep, "vmovdqu (%3), %%ymm3\n\tmovups 23(%1), %%xmm3" D32("ymm3"))
V(vkeepq, "vmovdqu (%3), %%ymm11\n\tmovq 25(%1), %%xmm11" D32("ymm11"))
V(vldx, "vmovdqu (%3), %%ymm4\n\tvmovups 27(%1), %%xmm4" D32("ymm4"))
V(vldy, "vmovdqu (%3), %%ymm12\n\tvmovdqu 29(%1), %%ymm12" D32("ymm12"))
V(vldsd, "vmovdqu (%3), %%ymm5\n\tvmovsd 31(%1), %%xmm5" D32("ymm5"))
V(vldd, "vmovdqu (%3), %%ymm6\n\tvmovd 33(%1), %%xmm6" D32("ymm6"))
V(vldq, "vmovdqu (%3), %%ymm14\n\tvmovq 35(%1), %%xmm14" D32("ymm14"))
V(vldapd, "lea 79(%1), %%rax\n\tand $-64, %%rax\n\tvmovapd (%%rax), %%ymm7" D32("ymm7"))
V(vlddqu, "vmovdqu (%3), %%ymm8\n\tvlddqu 37(%1), %%ymm8" D32("ymm8"))
/* from the initial upper state (vzeroupper): the other registers' upper halves stay zero */
V(vinit, "vzeroupper\n\tvmovdqu (%3), %%xmm3\n\tvmovups 27(%1), %%xmm4" D32(
             "ymm3") "\n\tvmovdqu %%ymm4, 32(%4)")
V(vinit2, "vzeroupper\n\tvmovdqu (%3), %%xmm3\n\tvmovups 27(%1), %%ymm4" D32(
              "ymm3") "\n\tvmovdqu %%ymm4, 32(%4)")
#undef D32
static const access_fn vloads[] = { ldhps, ldlpd, ldups, ldss,  ldsd,  ldq,  ldd,
                                    ldqr,  ldlps, ldhpd, ldaps, lddqa, lddqu };
static const access_fn vloads_avx[] = { vkeep, vkeepq, vldx,   vldy,  vldsd, vldd,
                                        vldq,  vldapd, vlddqu, vinit, vinit2 };
/* AVX-512 (EVEX), as glibc's memcpy uses it: zmm and ymm 0-31, scaled
 * 8-bit displacements; registers 16-31 are written only here (the
 * compiler, without -mavx512f, never allocates them) */
#define D64(x) "\n\tvmovdqu64 %%" x ", (%4)"
V(e512ld, "vmovdqu64 (%3), %%zmm3\n\tvmovdqu64 64(%1), %%zmm3" D64("zmm3"))
V(e512st, "vmovdqu64 (%3), %%zmm16\n\tvmovdqu64 %%zmm16, 128(%1)")
V(e256ld, "vmovdqu64 (%3), %%zmm18\n\tvmovdqu64 35(%1), %%ymm18" D64("zmm18"))
V(e256st, "vmovdqu64 (%3), %%zmm31\n\tvmovdqu64 %%ymm31, 224(%1)")
V(e128ld, "vmovdqu64 (%3), %%zmm4\n\tvmovdqu8 3(%1), %%xmm4" D64("zmm4"))
V(e128st, "vmovdqu64 (%3), %%zmm20\n\tvmovdqu32 %%xmm20, 288(%1)")
V(esdld, "vmovdqu64 (%3), %%zmm21\n\tvmovsd 40(%1), %%xmm21" D64("zmm21"))
V(esdst, "vmovdqu64 (%3), %%zmm22\n\tvmovsd %%xmm22, 320(%1)")
V(eqld, "vmovdqu64 (%3), %%zmm23\n\tvmovq 48(%1), %%xmm23" D64("zmm23"))
V(eaps, "lea 79(%1), %%rax\n\tand $-64, %%rax\n\tvmovaps 64(%%rax), %%zmm24" D64("zmm24"))
V(ehps, "vmovdqu64 (%3), %%zmm25\n\tvmovhps %%xmm25, 336(%1)")
V(e256d8, "vmovdqu64 (%3), %%zmm26\n\tvmovdqu64 96(%1), %%ymm26" D64("zmm26"))
V(e128d8, "vmovdqu64 (%3), %%zmm27\n\tvmovdqu32 48(%1), %%xmm27" D64("zmm27"))
V(edld, "vmovdqu64 (%3), %%zmm28\n\tvmovd 44(%1), %%xmm28" D64("zmm28"))
V(edst, "vmovdqu64 (%3), %%zmm29\n\tvmovd %%xmm29, 352(%1)")
V(entdq,
  "vmovdqu64 (%3), %%zmm30\n\tlea 79(%1), %%rax\n\tand $-64, %%rax\n\tvmovntdq %%zmm30, 64(%%rax)")
/* with AVX-512 state, legacy loads keep bytes 16-63 and VEX loads zero them */
V(zkeep, "vmovdqu64 (%3), %%zmm3\n\tmovups 23(%1), %%xmm3" D64("zmm3"))
V(zvexx, "vmovdqu64 (%3), %%zmm5\n\tvmovups 27(%1), %%xmm5" D64("zmm5"))
V(zvexy, "vmovdqu64 (%3), %%zmm6\n\tvmovdqu 29(%1), %%ymm6" D64("zmm6"))
#undef D64
static const access_fn vloads_512[] = { e256d8, e128d8, edld,   edst,   entdq,  zkeep,  zvexx,
                                        zvexy,  e512ld, e512st, e256ld, e256st, e128ld, e128st,
                                        esdld,  esdst,  eqld,   eaps,   ehps };
#undef V
static const access_fn accesses[] = {
    st8,    st8h,   st16,  st32sib, st64rex, stimm64, stimm8, stimm16, stnti, stsd,   stss,   stups,
    stlpd,  sthpd,  stq,   std,     stdqu9,  stzero,  ld64,   ld32,    ld16,  ld8h,   ldzb,   ldsb,
    ldsw,   ldsl,   ldr11, cmpimm,  cmpb,    cmpah,   cmpr,   testimm, testb, addimm, addbig, subm,
    addr16, subr32, incm,  decb,    incwrap, decwrap, orimm,  xorm,    andq,  andr8
};
#define NACCESS (sizeof accesses / sizeof accesses[0])

/* Each access on a neighbour of pending R and on a plain copy of the same
 * bytes: the same memory and the same registers after it, and ovl did
 * every one of them itself (one fault each, no single step). */
static access_fn access_at(size_t k)
{
#define NOF(a) (sizeof a / sizeof a[0])
    static const access_fn *const lists[] = { accesses, vloads, accesses_avx, vloads_avx,
                                              vloads_512 };
    const size_t lens[] = { NACCESS, NOF(vloads), NOF(accesses_avx), NOF(vloads_avx),
                            NOF(vloads_512) };
#undef NOF
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; k -= lens[l++])
        if (k < lens[l])
            return lists[l][k];
    return NULL;
}

static void plain_accesses(unsigned char *nb, size_t room)
{
    /* what this CPU runs: the lists above in order */
    size_t n = NACCESS + sizeof vloads / sizeof vloads[0];
    if (__builtin_cpu_supports("avx")) {
        n +=
            sizeof accesses_avx / sizeof accesses_avx[0] + sizeof vloads_avx / sizeof vloads_avx[0];
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"))
            n += sizeof vloads_512 / sizeof vloads_512[0];
    }
    CHECK(room >= 512);
    /* the copy at the same place within 64 bytes (the aligned accesses
     * round the address) */
    unsigned char *refmem = aligned_alloc(64, (room + 127) / 64 * 64), *ref;
    CHECK(refmem != NULL);
    ref = refmem + ((uintptr_t)nb & 63);
    for (size_t i = 0; i < room; i++)
        nb[i] = ref[i] = (unsigned char)(i * 29 + 3);
    unsigned long long emulated = 0, steps = 0;
    for (size_t k = 0; k < n; k++) {
        access_fn f = access_at(k);
        uint64_t want = f(ref);
        ovl_stats_t a = stats();
        uint64_t got = f(nb);
        ovl_stats_t b = stats();
        emulated += b.edge_emulated - a.edge_emulated;
        steps += b.edge_steps - a.edge_steps;
        CHECKF(got == want, "access %zu loaded %#llx, want %#llx", k, (unsigned long long)got,
               (unsigned long long)want);
        CHECKF(memcmp(nb, ref, room) == 0, "access %zu left different memory", k);
    }
    CHECKF(emulated == n && steps == n,
           "%zu plain accesses: %llu faults done by ovl, %llu neighbour accesses", n, emulated,
           steps);
    free(refmem);
}
#endif

/* ---- the program's own work around a pending buffer ---------------------
 * Operations a program makes on the data that shares a pending buffer's
 * first and last pages: libc's string functions, loops the compiler
 * vectorises and a plain loop. Each runs on the neighbours and on a plain
 * copy of them, and must read and leave the same; the faults it takes are
 * counted against the most accesses it can make to those bytes. */

/* Loops the compiler vectorises: GCC at any -O level (the sanitizer builds
 * are -O1) by this attribute, and left uninstrumented, since a sanitizer's
 * checks of each byte keep GCC from vectorising; elsewhere only what the
 * build's -O gives, so their fault bound is asserted under GCC alone. */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORISED                                             \
    __attribute__((noinline, optimize("O3", "tree-vectorize"), \
                   no_sanitize("address", "undefined", "thread")))
#define VEC_SURE 1
#else
#define VECTORISED __attribute__((noinline))
#define VEC_SURE   0
#endif

VECTORISED static void vec_mix(unsigned char *restrict d, const unsigned char *restrict s, size_t n,
                               unsigned char k)
{
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)((d[i] + s[i]) ^ k);
}

VECTORISED static unsigned vec_sum(const unsigned char *p, size_t n)
{
    unsigned s = 0;
    for (size_t i = 0; i < n; i++)
        s += p[i];
    return s;
}

/* The most accesses to @n bytes with @per accesses a vector: x86-64 has
 * 16-byte vectors at least (SSE2), wider ones make fewer. LIB: libc's
 * functions add at most 8 vectors a call (overlapping head and tail,
 * alignment); LOOP: a vectorised loop adds its scalar remainder, 15
 * iterations at most. A byte-by-byte loop makes 16 times as many. */
#define LIB(n, per)  ((unsigned long)(per) * ((n) / 16 + 8))
#define LOOP(n, per) ((unsigned long)(per) * ((n) / 16 + 16))

enum { NB_OPS = 6, NB_LIBC = 3 }; /* operations 0-2 are libc's, 3-5 loops */

/* Operation @k on the neighbours of a pending buffer: @nlo bytes at @lo
 * below it, @nhi at @hi above it (128 each at least). Returns a digest of
 * what it read; *@most: the most accesses it makes to those bytes. */
static unsigned long nb_op(int k, unsigned char *lo, size_t nlo, unsigned char *hi, size_t nhi,
                           unsigned long *most)
{
    size_t m = (nlo < nhi ? nlo : nhi) - 64;
    unsigned long r = 0;
    const void *c;
    switch (k) {
    case 0: /* copies: from below to above, and below over itself */
        memcpy(hi + 32, lo + 16, m);
        memmove(lo + 5, lo, nlo - 5);
        r = hi[40] + (unsigned long)lo[nlo - 1] * 256;
        *most = LIB(m, 2) + LIB(nlo - 5, 2);
        break;
    case 1: /* a store and strings */
        memset(hi, 'a' + (nhi & 7), nhi - 1);
        hi[nhi - 1] = 0;
        strcpy((char *)lo + 3, "the neighbours of a pending buffer");
        r = strlen((const char *)hi) * 256 + strlen((const char *)lo + 3);
        *most = LIB(nhi, 1) + 1 + LIB(64, 2) + LIB(nhi, 1) + LIB(64, 1);
        break;
    case 2: /* reads: compare, search */
        r = (unsigned long)(memcmp(lo + 64, hi + 64, m) > 0);
        c = memchr(lo, 0xfe, nlo);
        r += c ? (unsigned long)((const unsigned char *)c - lo) * 2 : 0;
        *most = LIB(m, 2) + LIB(nlo, 1);
        break;
    case 3: /* a vectorised loop: reads above, adds and xors below */
        vec_mix(lo + 8, hi + 24, m, (unsigned char)(0x5a + nlo));
        r = lo[8] + (unsigned long)lo[m + 7] * 256;
        *most = LOOP(m, 3) + 2;
        break;
    case 4: /* vectorised sums of all of it */
        r = vec_sum(lo, nlo) + (unsigned long)vec_sum(hi, nhi) * 65536;
        *most = LOOP(nlo, 1) + LOOP(nhi, 1);
        break;
    default: /* a plain loop: a byte in 64, read and flipped */
        for (size_t i = 0; i < nhi; i += 64) {
            r = r * 31 + hi[i];
            hi[i] ^= (unsigned char)(i / 64 + 1);
        }
        *most = 2 * (nhi / 64 + 1);
        break;
    }
    return r;
}

struct nb_tally {
    unsigned long steps[2], most[2]; /* [0]: libc's functions, [1]: the loops */
    unsigned long emulated;
};

/* Operation @k on the neighbours and on their copies (ref_lo, ref_hi):
 * the same digest; its faults into @t. */
static void nb_work(int k, unsigned char *lo, unsigned char *ref_lo, size_t nlo, unsigned char *hi,
                    unsigned char *ref_hi, size_t nhi, struct nb_tally *t)
{
    unsigned long most = 0;
    unsigned long want = nb_op(k, ref_lo, nlo, ref_hi, nhi, &most);
    ovl_stats_t a = stats();
    unsigned long got = nb_op(k, lo, nlo, hi, nhi, &most);
    ovl_stats_t b = stats();
    CHECKF(got == want, "operation %d on the neighbours read %#lx, want %#lx", k, got, want);
    t->steps[k >= NB_LIBC] += b.edge_steps - a.edge_steps;
    t->most[k >= NB_LIBC] += most;
    t->emulated += b.edge_emulated - a.edge_emulated;
}

/* Every operation once; then the faults within their bounds: libc's not
 * under ASan and TSan, whose interceptors access byte by byte, the loops
 * where the compiler surely vectorised them. */
static void nb_all(const char *what, unsigned char *lo, unsigned char *ref_lo, size_t nlo,
                   unsigned char *hi, unsigned char *ref_hi, size_t nhi, struct nb_tally *t)
{
    for (int k = 0; k < NB_OPS; k++)
        nb_work(k, lo, ref_lo, nlo, hi, ref_hi, nhi, t);
    CHECKF(memcmp(lo, ref_lo, nlo) == 0 && memcmp(hi, ref_hi, nhi) == 0,
           "%s: the neighbours differ from their copy", what);
    printf("test_delta_edges: rank %d %s: libc %lu faults (at most %lu), loops %lu (at most %lu), "
           "%lu made by ovl\n",
           th_rank, what, t->steps[0], t->most[0], t->steps[1], t->most[1], t->emulated);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    CHECKF(t->steps[0] <= t->most[0], "%s: libc's functions took %lu faults, at most %lu", what,
           t->steps[0], t->most[0]);
#endif
#if VEC_SURE
    CHECKF(t->steps[1] <= t->most[1], "%s: the loops took %lu faults, at most %lu", what,
           t->steps[1], t->most[1]);
#endif
}

/* What ovl wrote to stderr (the file @fd) while a receive was pending and
 * the program made @steps neighbour accesses: passed on to stderr, and at
 * OVL_VERBOSE >= 1 (the default) past 64 accesses on a page it holds the
 * advice to give the buffer pages of its own, exactly once. */
static void check_said(int fd, unsigned long long steps)
{
    char buf[8192];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    CHECK(n >= 0);
    buf[n > 0 ? n : 0] = 0;
    if (n > 0)
        fputs(buf, stderr);
    ovl_config_t c;
    CHECK_OK(ovl_config_get(&c));
    int said = 0;
    for (const char *q = buf; (q = strstr(q, "the program touched other data on page")); q++)
        said++;
    int want = c.report.verbose >= 1 && steps >= 2 * 64 ? 1 : 0;
    CHECKF(said >= want && said <= 1,
           "the advice for a buffer sharing its pages was said %d times (%llu neighbour accesses, "
           "OVL_VERBOSE %d)",
           said, steps, c.report.verbose);
    CHECKF(!said || (strstr(buf, "ovl_alloc") && strstr(buf, "said once")),
           "the advice names no remedy: %.200s", buf);
}

/* Phase 2: the program works on R's neighbours while R is pending. */
static void neighbours(void)
{
    if (!even) {
        feed(3, 4);
        return;
    }
    unsigned char *lo = (unsigned char *)((uintptr_t)R & ~(uintptr_t)(ps - 1));
    unsigned char *hi = R + rlen, *hi_end = (unsigned char *)(((uintptr_t)hi + ps - 1) & ~(ps - 1));
    size_t nlo = (size_t)(R - lo), nhi = (size_t)(hi_end - hi);
    if (nlo < 16 || nhi < 16 || nlo >= ps || nhi >= ps)
        th_fail(__FILE__, __LINE__, "layout", "R must share both edge pages");
    unsigned char *ref_lo = malloc(nlo), *ref_hi = malloc(nhi), *tmp = malloc(ps);
    CHECK(ref_lo && ref_hi && tmp);
    /* stderr goes to a file until R completes: the advice to give R pages
     * of its own is said there, once */
    char said_path[] = "/tmp/ovl-test-advice-XXXXXX";
    int said_fd = mkstemp(said_path), saved_err = dup(2);
    CHECK(said_fd >= 0 && saved_err >= 0);
    unlink(said_path);
    fflush(stderr);
    CHECK(dup2(said_fd, 2) == 2);
    ovl_request_t r;
    CHECK_OK(ovl_delta_recv(R, (int)rlen, MPI_BYTE, peer, 4, TH_MONITOR(OVL_MONITOR_MPROTECT), &r));
    ovl_stats_t a = stats(), b, s0 = a;
#if defined(__x86_64__)
    /* a string move and a string store: one trap each, whatever the size */
    for (size_t i = 0; i < nlo; i++)
        tmp[i] = (unsigned char)(i * 3);
    rep_movsb(lo, tmp, nlo);
    b = stats();
    CHECKF(b.edge_steps - a.edge_steps <= 2, "rep movsb of %zu bytes took %llu steps", nlo,
           (unsigned long long)(b.edge_steps - a.edge_steps));
    rep_stosq(hi_end - nhi / 8 * 8, 0x0102030405060708ul, nhi / 8);
    a = stats();
    CHECKF(a.edge_steps - b.edge_steps <= 2, "rep stosq of %zu words took %llu steps", nhi / 8,
           (unsigned long long)(a.edge_steps - b.edge_steps));
    for (size_t i = 0; i < nlo; i++)
        CHECKF(lo[i] == (unsigned char)(i * 3), "rep movsb wrote %u at %zu", lo[i], i);
    for (size_t i = nhi % 8; i < nhi; i++)
        CHECK(hi[i] == ((0x0102030405060708ul >> (8 * ((i - nhi % 8) % 8))) & 0xff));
#endif
    /* libc's string functions and a loop: never a trap per byte */
    a = stats();
    for (size_t i = 0; i < nlo; i++)
        tmp[i] = (unsigned char)(i * 5 + 1);
    memcpy(lo, tmp, nlo);
    memmove(lo + 1, lo, nlo - 1);
    memset(hi, 'x', nhi - 1);
    hi[nhi - 1] = 0;
    size_t len = strlen((const char *)hi);
    char *dup = strdup((const char *)hi);
    CHECK(dup != NULL);
    strcpy((char *)hi, "neighbour");
    unsigned long sum = vec_sum(lo, nlo); /* vectorised whatever the -O */
    b = stats();
    unsigned long long steps = b.edge_steps - a.edge_steps;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* (under ASan and TSan, memcpy and memset are the sanitizer's
     * instrumented interceptors, which access byte by byte) */
    CHECKF(steps < (nlo + nhi) / 8, "string functions over %zu bytes took %llu steps", nlo + nhi,
           steps);
#else
    (void)steps;
#endif
    CHECK(len == nhi - 1 && strlen(dup) == nhi - 1);
    free(dup);
    memcpy(ref_lo, tmp, 1);
    memcpy(ref_lo + 1, tmp, nlo - 1);
    unsigned long want = 0;
    for (size_t i = 0; i < nlo; i++)
        want += ref_lo[i];
    CHECK(sum == want);
    memset(ref_hi, 'x', nhi - 1);
    ref_hi[nhi - 1] = 0;
    memcpy(ref_hi, "neighbour", 10);
#if defined(__x86_64__)
    /* plain loads and stores next to R, below and above it */
    plain_accesses(lo, nlo - 8);
    plain_accesses(hi + 8, nhi - 8);
    memcpy(lo, ref_lo, nlo);
    memcpy(hi, ref_hi, nhi);
#endif
    /* libc's functions again, loops the compiler vectorised, a plain loop:
     * a fault an access at most, every access faults (R is pending) */
    struct nb_tally t = { 0 };
    nb_all("receive", lo, ref_lo, nlo, hi, ref_hi, nhi, &t);
#if defined(__x86_64__)
    CHECKF(t.steps[0] >= NB_LIBC && t.steps[1] >= NB_OPS - NB_LIBC,
           "%lu + %lu faults: the neighbours of pending R were not guarded", t.steps[0],
           t.steps[1]);
#endif
    unsigned long long nsteps = stats().edge_steps - s0.edge_steps;
    /* R is still pending: only now may the sender start */
    token(1, 4);
    check_r(3); /* faults, and waits for each page */
    CHECK_OK(ovl_wait(&r, NULL));
    fflush(stderr);
    CHECK(dup2(saved_err, 2) == 2);
    close(saved_err);
    check_said(said_fd, nsteps);
    check_r(3);
    CHECK(memcmp(lo, ref_lo, nlo) == 0);
    CHECK(memcmp(hi, ref_hi, nhi) == 0);
    free(ref_lo);
    free(ref_hi);
    free(tmp);
}

#if defined(__x86_64__)
/* Phase 2a: another thread's stepped access. A second thread exchanges a
 * variable on R's last page over and over (xchg: locked, so the handler
 * lets it through one instruction at a time), while the main thread reads
 * R's last byte each time R is pending. The step opens the page to its
 * own thread alone (a protection key), so the read waits for the data;
 * opened to every thread, it read the byte of the message before. Needs
 * protection keys (x86 PKU): skipped without them. */
static _Atomic int xchg_stop;
static _Atomic unsigned long xchg_done;

static void *xchg_loop(void *arg)
{
    uint64_t *v = arg;
    for (uint64_t i = 1; !atomic_load(&xchg_stop); i++) {
        __atomic_exchange_n(v, i, __ATOMIC_SEQ_CST);
        atomic_fetch_add(&xchg_done, 1);
    }
    return NULL;
}

enum { XCHG_ROUNDS = 60 };

static void stepped_by_another_thread(void)
{
    int have_keys = 0;
#ifdef PKEY_DISABLE_ACCESS
    int key = pkey_alloc(0, 0);
    have_keys = key >= 0;
    if (have_keys)
        pkey_free(key);
#endif
    int both = 0;
    CHECK_MPI(MPI_Allreduce(&have_keys, &both, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
    if (!both) {
        if (th_rank == 0)
            printf("test_delta_edges: another thread's step: SKIPPED (no protection keys)\n");
        return;
    }
    if (!even) {
        for (int r = 0; r < XCHG_ROUNDS; r++) {
            unsigned char *src = malloc(rlen);
            CHECK(src != NULL);
            for (size_t i = 0; i < rlen; i++)
                src[i] = val(i, 10 + r % 30);
            token(0, 40 + r);
            usleep(1000); /* the reader reaches R meanwhile */
            ovl_request_t q;
            CHECK_OK(ovl_delta_send_begin(src, (int)rlen, MPI_BYTE, peer, 40 + r, NULL, &q));
            CHECK_OK(ovl_delta_send_end(q, NULL));
            CHECK_OK(ovl_wait(&q, NULL));
            free(src);
        }
        return;
    }
    uint64_t *v = (uint64_t *)(((uintptr_t)(R + rlen) + 7) & ~(uintptr_t)7);
    CHECK(((uintptr_t)v & ~(uintptr_t)(ps - 1)) ==
          ((uintptr_t)(R + rlen - 1) & ~(uintptr_t)(ps - 1)));
    atomic_store(&xchg_stop, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, xchg_loop, v) == 0);
    int stale = 0;
    ovl_stats_t a = stats();
    for (int r = 0; r < XCHG_ROUNDS; r++) {
        ovl_request_t q;
        CHECK_OK(ovl_delta_recv(R, (int)rlen, MPI_BYTE, peer, 40 + r,
                                TH_MONITOR(OVL_MONITOR_MPROTECT), &q));
        unsigned long d0 = atomic_load(&xchg_done);
        while (atomic_load(&xchg_done) < d0 + 2) /* the other thread is stepping */
            sched_yield();
        token(1, 40 + r);
        unsigned char got = *(volatile unsigned char *)(R + rlen - 1);
        stale += got != val(rlen - 1, 10 + r % 30);
        CHECK_OK(ovl_wait(&q, NULL));
    }
    atomic_store(&xchg_stop, 1);
    CHECK(pthread_join(t, NULL) == 0);
    ovl_stats_t b = stats();
    CHECKF(stale == 0, "%d of %d reads of R's last byte saw the message before", stale,
           XCHG_ROUNDS);
    CHECKF(b.edge_steps - b.edge_emulated > a.edge_steps - a.edge_emulated,
           "no access was stepped: the test tests nothing");
    check_r(10 + (XCHG_ROUNDS - 1) % 30);
}

/* Phase 2b: RIP-relative accesses (a program's static data) next to a
 * pending receive into a static block: G holds gblk[256, 256 + page),
 * so gblk[0, 256) and the rest of its second page are neighbours. */
static unsigned char gblk[3 * 65536] __attribute__((aligned(65536)));

static void rip_relative(void)
{
    size_t glen = ps;
    if (!even) {
        feed_n(21, 6, glen);
        return;
    }
    unsigned char *G = gblk + 256;
    for (size_t i = 0; i < 256; i++)
        gblk[i] = (unsigned char)(i + 1);
    ovl_request_t r;
    CHECK_OK(ovl_delta_recv(G, (int)glen, MPI_BYTE, peer, 6, TH_MONITOR(OVL_MONITOR_MPROTECT), &r));
    ovl_stats_t a = stats();
    uint64_t got, v = 0x0123456789abcdeful;
    /* a load; stores of an immediate (the displacement is relative to the
     * end of the immediate), of a register and of an xmm register */
    __asm__ volatile("movq gblk+16(%%rip), %0" : "=r"(got) : : "memory");
    __asm__ volatile("movl $0x7a6b5c4d, gblk+32(%%rip)" : : : "memory");
    __asm__ volatile("movw $0x1122, gblk+37(%%rip)" : : : "memory");
    __asm__ volatile("movq %0, gblk+48(%%rip)" : : "r"(v) : "memory");
    __asm__ volatile("movdqu (%0), %%xmm3\n\tmovups %%xmm3, gblk+64(%%rip)"
                     :
                     : "r"(X0)
                     : "memory", "xmm3");
    ovl_stats_t b = stats();
    CHECKF(b.edge_emulated - a.edge_emulated == 5, "5 RIP-relative accesses: %llu made by ovl",
           (unsigned long long)(b.edge_emulated - a.edge_emulated));
    token(1, 6);
    CHECK_OK(ovl_wait(&r, NULL));
    for (size_t i = 0; i < glen; i++)
        CHECKF(G[i] == val(i, 21), "G[%zu] = %u", i, G[i]);
    uint64_t want = 0;
    memcpy(&want, (unsigned char[8]){ 17, 18, 19, 20, 21, 22, 23, 24 }, 8);
    CHECKF(got == want, "RIP-relative load gave %#llx", (unsigned long long)got);
    uint32_t i32;
    uint16_t i16;
    memcpy(&i32, gblk + 32, 4);
    memcpy(&i16, gblk + 37, 2);
    CHECK(i32 == 0x7a6b5c4du && i16 == 0x1122);
    CHECK(gblk[36] == 37 && gblk[39] == 40);
    CHECK(memcmp(gblk + 48, &v, 8) == 0 && memcmp(gblk + 64, X0, 16) == 0);
    CHECK(gblk[47] == 48 && gblk[56] == 57 && gblk[63] == 64 && gblk[80] == 81);
}
#endif

/* Phase 3: MPI transfers of buffers that start on R's guarded last page
 * (ovl_irecv into one, ovl_isend from one, ovl_get into one): MPI, or the
 * kernel for it, cannot reach that page, so ovl stages them. Large enough
 * for MPI's zero-copy paths (CMA, rendezvous). */
static void mpi_neighbours(void)
{
    size_t n = (size_t)1 << 20;
    unsigned char *other = R + rlen; /* on R's last page */
    unsigned char *buf = malloc(n);
    CHECK(buf != NULL);
    void *base = NULL;
    ovl_segment_t seg;
    CHECK_OK(ovl_segment_create(n, &base, &seg));
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)base)[i] = val(i, 40 + th_rank);
    CHECK_OK(ovl_barrier());
    if (!even) {
        for (size_t i = 0; i < n; i++)
            buf[i] = val(i, 11);
        ovl_request_t q;
        CHECK_OK(ovl_isend(buf, (int)n, MPI_BYTE, peer, 6, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        CHECK_OK(ovl_irecv(buf, (int)n, MPI_BYTE, peer, 7, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        for (size_t i = 0; i < n; i++)
            CHECKF(buf[i] == val(i, 12), "ovl_isend from the guarded page sent %u at %zu", buf[i],
                   i);
        feed(13, 8);
    } else {
        ovl_request_t r, q;
        CHECK_OK(
            ovl_delta_recv(R, (int)rlen, MPI_BYTE, peer, 8, TH_MONITOR(OVL_MONITOR_MPROTECT), &r));
        CHECK_OK(ovl_irecv(other, (int)n, MPI_BYTE, peer, 6, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        for (size_t i = 0; i < n; i++)
            CHECKF(other[i] == val(i, 11), "ovl_irecv onto the guarded page got %u at %zu",
                   other[i], i);
        for (size_t i = 0; i < n; i++)
            other[i] = val(i, 12);
        CHECK_OK(ovl_isend(other, (int)n, MPI_BYTE, peer, 7, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        /* a get from this rank's own part: a local target, moved by MPI */
        CHECK_OK(ovl_get(other, th_rank, 0, n, seg, NULL, NULL));
        for (size_t i = 0; i < n; i++)
            CHECKF(other[i] == val(i, 40 + th_rank), "ovl_get onto the guarded page got %u at %zu",
                   other[i], i);
        token(1, 8);
        CHECK_OK(ovl_wait(&r, NULL));
        check_r(13);
    }
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_segment_free(&seg));
    free(buf);
}

/* A block of @pages pages (page-aligned) holding a buffer at @off of @len
 * bytes that shares its first and last pages with other data: *lo, *nlo
 * the bytes below it on its first page, *hi, *nhi those above it on its
 * last, both filled with a pattern and copied into *ref_lo, *ref_hi. */
static unsigned char *nb_block(size_t pages, size_t off, size_t len, unsigned char **lo,
                               size_t *nlo, unsigned char **hi, size_t *nhi, unsigned char **ref_lo,
                               unsigned char **ref_hi)
{
    void *p = NULL;
    CHECK(posix_memalign(&p, ps, pages * ps) == 0);
    unsigned char *b = p;
    memset(b, 0xee, pages * ps);
    *lo = b + off / ps * ps;
    *nlo = off % ps;
    *hi = b + off + len;
    *nhi = ps - (off + len) % ps;
    if (*nlo < 128 || *nhi < 128 || (off + len) % ps == 0 || (off + len + *nhi) > pages * ps)
        th_fail(__FILE__, __LINE__, "layout", "the buffer must share both edge pages");
    *ref_lo = malloc(*nlo);
    *ref_hi = malloc(*nhi);
    CHECK(*ref_lo && *ref_hi);
    for (size_t i = 0; i < *nlo; i++)
        (*lo)[i] = (*ref_lo)[i] = (unsigned char)(i * 7 + 1);
    for (size_t i = 0; i < *nhi; i++)
        (*hi)[i] = (*ref_hi)[i] = (unsigned char)(i * 13 + 2);
    return b;
}

/* Phase 4: a fault-monitored delta send from T, whose first and last
 * pages hold other data, while the program produces T in order and works
 * on that data between its pieces. A send guards only T's whole pages
 * (write protection, opened as the program writes in); its edge pages
 * never (their bytes leave with the piece that covers them, or at
 * send_end), so the program's accesses around T never fault, and
 * producing T faults once per whole page at most: the first write past
 * the current delta. The receiver checks every byte. */
static void send_neighbours(void)
{
    const size_t off = ps + 1200, tlen = 9 * ps - 300;
    if (!even) {
        unsigned char *in = malloc(tlen);
        CHECK(in != NULL);
        ovl_request_t q;
        ovl_status_t st;
        CHECK_OK(ovl_irecv(in, (int)tlen, MPI_BYTE, peer, 11, &q));
        CHECK_OK(ovl_wait(&q, &st));
        CHECKF(st.bytes == tlen, "%zu bytes arrived", st.bytes);
        for (size_t i = 0; i < tlen; i++)
            CHECKF(in[i] == val(i, 31), "T[%zu] arrived as %u, want %u", i, in[i], val(i, 31));
        free(in);
        return;
    }
    unsigned char *lo, *hi, *ref_lo, *ref_hi;
    size_t nlo, nhi;
    unsigned char *b = nb_block(12, off, tlen, &lo, &nlo, &hi, &nhi, &ref_lo, &ref_hi);
    unsigned char *T = b + off;
    size_t whole = (off + tlen) / ps - (off + ps - 1) / ps; /* T's whole pages */
    struct nb_tally t = { 0 };
    ovl_request_t q;
    ovl_stats_t a = stats();
    CHECK_OK(ovl_delta_send_begin(T, (int)tlen, MPI_BYTE, peer, 11, NULL, &q));
    /* half a page of T, then an operation around it, in turn */
    size_t chunk = ps / 2;
    for (size_t at = 0, k = 0; at < tlen; at += chunk, k++) {
        size_t e = at + chunk < tlen ? at + chunk : tlen;
        for (size_t i = at; i < e; i++)
            T[i] = val(i, 31);
        nb_work((int)(k % NB_OPS), lo, ref_lo, nlo, hi, ref_hi, nhi, &t);
    }
    ovl_stats_t z = stats();
    CHECK_OK(ovl_delta_send_end(q, NULL));
    CHECK_OK(ovl_wait(&q, NULL));
    unsigned long long faults = z.faults - a.faults, steps = z.edge_steps - a.edge_steps;
    printf("test_delta_edges: rank %d send: %llu faults producing %zu whole pages, %llu around "
           "them, %llu pieces\n",
           th_rank, faults, whole, steps,
           (unsigned long long)(stats().deltas_sent - a.deltas_sent));
    CHECKF(steps == 0 && t.steps[0] + t.steps[1] == 0,
           "the program's accesses around a delta send faulted %llu times", steps);
    CHECKF(faults <= whole, "producing %zu whole pages took %llu faults", whole, faults);
    CHECK(memcmp(lo, ref_lo, nlo) == 0 && memcmp(hi, ref_hi, nhi) == 0);
    for (size_t i = 0; i < tlen; i++)
        CHECKF(T[i] == val(i, 31), "T[%zu] changed to %u", i, T[i]);
    free(ref_lo);
    free(ref_hi);
    free(b);
}

/* Phase 5: an ovl_get into D, whose first and last pages hold other data,
 * while the program works on that data: as a receive, the get guards D's
 * edge pages until the strips holding them are in, and ovl makes the
 * program's accesses there (or steps them) without waiting for the get.
 * Every rank gets from its partner's part. Without a progress thread
 * nothing installs a strip between ovl_get and the program's next ovl
 * call (a neighbour's fault drives nothing), so every operation faults;
 * with one, the edges may open at any time. */
static void get_neighbours(void)
{
    const size_t off = ps + 1300, dlen = 5 * ps + 500, toff = 123;
    void *base = NULL;
    ovl_segment_t seg;
    CHECK_OK(ovl_segment_create(toff + dlen, &base, &seg));
    for (size_t i = 0; i < toff + dlen; i++)
        ((unsigned char *)base)[i] = val(i, 60 + th_rank);
    CHECK_OK(ovl_barrier());
    unsigned char *lo, *hi, *ref_lo, *ref_hi;
    size_t nlo, nhi;
    unsigned char *b = nb_block(8, off, dlen, &lo, &nlo, &hi, &nhi, &ref_lo, &ref_hi);
    unsigned char *D = b + off;
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    struct nb_tally t = { 0 };
    CHECK_OK(ovl_get(D, peer, toff, dlen, seg, NULL, NULL));
    nb_all("get", lo, ref_lo, nlo, hi, ref_hi, nhi, &t);
#if defined(__x86_64__)
    if (cfg.progress.mode == OVL_PROGRESS_INLINE)
        CHECKF(t.steps[0] >= NB_LIBC && t.steps[1] >= NB_OPS - NB_LIBC,
               "%lu + %lu faults: the neighbours of a pending get were not guarded", t.steps[0],
               t.steps[1]);
#endif
    for (size_t i = 0; i < dlen; i++) /* waits for each strip */
        CHECKF(D[i] == val(toff + i, 60 + peer), "D[%zu] = %u, want %u", i, D[i],
               val(toff + i, 60 + peer));
    CHECK_OK(ovl_fence(seg));
    CHECK(memcmp(lo, ref_lo, nlo) == 0 && memcmp(hi, ref_hi, nhi) == 0);
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_segment_free(&seg));
    free(ref_lo);
    free(ref_hi);
    free(b);
}

/* Send @len bytes at @x to the peer as a delta send (explicit monitor),
 * byte i = val(i, @seed), and wait for it. */
static void send_filled(unsigned char *x, size_t len, int tag, int seed)
{
    ovl_request_t q;
    CHECK_OK(ovl_delta_send_begin(x, (int)len, MPI_BYTE, peer, tag,
                                  TH_MONITOR(OVL_MONITOR_EXPLICIT), &q));
    for (size_t i = 0; i < len; i++)
        x[i] = val(i, seed);
    CHECK_OK(ovl_delta_send_end(q, NULL));
    CHECK_OK(ovl_wait(&q, NULL));
}

/* `local` (the plain path: OVL_RMA_LOCAL=auto, the default, on shared memory): the peer shares this node,
 * so a fault-monitored delta send is a plain transfer: nothing watched, no
 * fault, one message at send_end, which the receiver lands in place. */
static void local(void)
{
    size_t n = (size_t)1 << 20;
    unsigned char *b = NULL;
    CHECK(posix_memalign((void **)&b, ps, n) == 0);
    ovl_request_t q;
    if (even) {
        ovl_stats_t a = stats();
        CHECK_OK(ovl_delta_send_begin(b, (int)n, MPI_BYTE, peer, 9,
                                      TH_MONITOR(OVL_MONITOR_MPROTECT), &q));
        for (size_t i = 0; i < n; i++)
            b[i] = val(i, 21);
        CHECK_OK(ovl_delta_send_end(q, NULL));
        CHECK_OK(ovl_wait(&q, NULL));
        ovl_stats_t z = stats();
        CHECKF(z.faults == a.faults, "a delta send on one node took %llu faults",
               (unsigned long long)(z.faults - a.faults));
        CHECKF(z.deltas_sent - a.deltas_sent == 1,
               "a 1 MiB delta send on one node took %llu pieces",
               (unsigned long long)(z.deltas_sent - a.deltas_sent));
    } else {
        ovl_stats_t a = stats();
        CHECK_OK(
            ovl_delta_recv(b, (int)n, MPI_BYTE, peer, 9, TH_MONITOR(OVL_MONITOR_MPROTECT), &q));
        for (size_t i = 0; i < n; i++)
            CHECKF(b[i] == val(i, 21), "byte %zu arrived as %u", i, b[i]);
        CHECK_OK(ovl_wait(&q, NULL));
        ovl_stats_t z = stats();
        CHECKF(z.deltas_received - a.deltas_received == 1, "received in %llu pieces",
               (unsigned long long)(z.deltas_received - a.deltas_received));
    }
    /* into an ovl_irecv (in place, no monitor), unaligned, a short last
     * piece, and a message shorter than the receive */
    size_t m = n - 5000, off = 13;
    if (even) {
        send_filled(b + off, m, 10, 22);
    } else {
        memset(b, 0xee, n);
        ovl_status_t st;
        CHECK_OK(ovl_irecv(b + off, (int)(m + 1000), MPI_BYTE, peer, 10, &q));
        CHECK_OK(ovl_wait(&q, &st));
        CHECKF(st.bytes == m, "%zu bytes", st.bytes);
        for (size_t i = 0; i < m; i++)
            CHECKF(b[off + i] == val(i, 22), "byte %zu arrived as %u", i, b[off + i]);
        for (size_t i = 0; i < off; i++)
            CHECK(b[i] == 0xee);
        for (size_t i = off + m; i < n; i++)
            CHECKF(b[i] == 0xee, "byte %zu past the message changed", i);
    }
    /* into an ovl_irecv whose buffer B shares its first page with the
     * guarded last page of a pending delta receive A: ovl does not let
     * MPI write such a page in place (a kernel copy, CMA, would fail; a
     * copy by this process would fault), the bytes go through staging;
     * both arrive right (MPICH 4.0 here copies in-process either way) */
    {
        size_t alen = 2 * ps + 100, blen = 2 * ps;
        unsigned char *A = b + 100, *B = A + alen;
        if (even) {
            send_filled(B, blen, 21, 30);
            send_filled(A, alen, 20, 31);
        } else {
            ovl_request_t qa, qb;
            memset(b, 0xee, n);
            CHECK_OK(ovl_delta_recv(A, (int)alen, MPI_BYTE, peer, 20,
                                    TH_MONITOR(OVL_MONITOR_MPROTECT), &qa));
            CHECK_OK(ovl_irecv(B, (int)blen, MPI_BYTE, peer, 21, &qb));
            CHECK_OK(ovl_wait(&qb, NULL));
            for (size_t i = 0; i < blen; i++)
                CHECKF(B[i] == val(i, 30), "B byte %zu arrived as %u", i, B[i]);
            CHECK_OK(ovl_wait(&qa, NULL));
            for (size_t i = 0; i < alen; i++)
                CHECKF(A[i] == val(i, 31), "A byte %zu arrived as %u", i, A[i]);
        }
    }
    /* a delta send from a buffer B that shares its first page with the
     * guarded last page of a pending delta receive A: still one message,
     * its bytes copied past the guard (that page through the kernel, the
     * pages after it by memcpy), every one of them right */
    {
        size_t alen = 2 * ps + 100, blen = 4 * ps + 7;
        unsigned char *A = b + 100, *B = A + alen;
        memset(b, 0xee, n);
        if (even) {
            CHECK_OK(ovl_irecv(B, (int)blen, MPI_BYTE, peer, 41, &q));
            CHECK_OK(ovl_wait(&q, NULL));
            for (size_t i = 0; i < blen; i++)
                CHECKF(B[i] == val(i, 41), "B byte %zu arrived as %u", i, B[i]);
            send_filled(A, alen, 40, 40);
        } else {
            ovl_request_t qa;
            CHECK_OK(ovl_delta_recv(A, (int)alen, MPI_BYTE, peer, 40,
                                    TH_MONITOR(OVL_MONITOR_MPROTECT), &qa));
            ovl_stats_t a = stats();
            send_filled(B, blen, 41, 41);
            ovl_stats_t z = stats();
            CHECKF(z.deltas_sent - a.deltas_sent == 1, "sent in %llu pieces",
                   (unsigned long long)(z.deltas_sent - a.deltas_sent));
            CHECK_OK(ovl_wait(&qa, NULL));
            for (size_t i = 0; i < alen; i++)
                CHECKF(A[i] == val(i, 40), "A byte %zu arrived as %u", i, A[i]);
            for (size_t i = 0; i < blen; i++)
                CHECKF(B[i] == val(i, 41), "B byte %zu changed to %u", i, B[i]);
        }
    }
    /* a delta send from a buffer M between two pending delta receives,
     * sharing its first page with A's guarded last page and its last page
     * with C's guarded first page: one message, the bytes on those pages
     * behind its piece header, the pages between read by MPI in place;
     * received into a guarded delta receive at another offset in its
     * page, nothing around it written */
    {
        size_t alen = 2 * ps + 100, mlen = 4 * ps + 7, clen = 2 * ps + 50, to = 300;
        unsigned char *A = b + 100, *M = A + alen, *C = M + mlen;
        memset(b, 0xee, n);
        if (even) {
            unsigned char *T = b + to;
            CHECK_OK(ovl_delta_recv(T, (int)mlen, MPI_BYTE, peer, 44,
                                    TH_MONITOR(OVL_MONITOR_MPROTECT), &q));
            CHECK_OK(ovl_wait(&q, NULL));
            for (size_t i = 0; i < mlen; i++)
                CHECKF(T[i] == val(i, 44), "M byte %zu arrived as %u", i, T[i]);
            for (size_t i = 0; i < n; i++)
                CHECKF(i - to < mlen || b[i] == 0xee, "byte %zu around the receive changed", i);
            send_filled(A, alen, 45, 45);
            send_filled(C, clen, 46, 46);
        } else {
            ovl_request_t qa, qc;
            CHECK_OK(ovl_delta_recv(A, (int)alen, MPI_BYTE, peer, 45,
                                    TH_MONITOR(OVL_MONITOR_MPROTECT), &qa));
            CHECK_OK(ovl_delta_recv(C, (int)clen, MPI_BYTE, peer, 46,
                                    TH_MONITOR(OVL_MONITOR_MPROTECT), &qc));
            ovl_stats_t a = stats();
            send_filled(M, mlen, 44, 44);
            ovl_stats_t z = stats();
            CHECKF(z.deltas_sent - a.deltas_sent == 1, "sent in %llu pieces",
                   (unsigned long long)(z.deltas_sent - a.deltas_sent));
            CHECK_OK(ovl_wait(&qa, NULL));
            CHECK_OK(ovl_wait(&qc, NULL));
            for (size_t i = 0; i < alen; i++)
                CHECKF(A[i] == val(i, 45), "A byte %zu arrived as %u", i, A[i]);
            for (size_t i = 0; i < clen; i++)
                CHECKF(C[i] == val(i, 46), "C byte %zu arrived as %u", i, C[i]);
            for (size_t i = 0; i < mlen; i++)
                CHECKF(M[i] == val(i, 44), "M byte %zu changed to %u", i, M[i]);
        }
    }
    /* a delta message above the protocol switch (piece header and bytes as
     * two messages) into an ovl_irecv of a non-contiguous type: refused
     * with OVL_ERR_UNSUPPORTED, and its sender still completes (its bytes
     * are taken, not left unmatched); the next message arrives intact */
    {
        size_t len = 64 << 10;
        if (even) {
            send_filled(b, len, 42, 42);
            send_filled(b, len, 43, 43);
        } else {
            MPI_Datatype vec;
            CHECK_MPI(MPI_Type_vector((int)(len / 8), 8, 16, MPI_BYTE, &vec));
            CHECK_MPI(MPI_Type_commit(&vec));
            ovl_status_t st;
            memset(b, 0xee, n);
            CHECK_OK(ovl_irecv(b, 1, vec, peer, 42, &q));
            EXPECT_ERR(ovl_wait(&q, &st), OVL_ERR_UNSUPPORTED);
            CHECK_MPI(MPI_Type_free(&vec));
            CHECK_OK(ovl_irecv(b, (int)len, MPI_BYTE, peer, 43, &q));
            CHECK_OK(ovl_wait(&q, NULL));
            for (size_t i = 0; i < len; i++)
                CHECKF(b[i] == val(i, 43), "byte %zu arrived as %u", i, b[i]);
        }
    }
    /* a message longer than the receive, into an ovl_irecv and into a
     * guarded delta receive: OVL_ERR_TRUNCATE, the bytes that fit right,
     * none past the buffer */
    for (int k = 0; k < 2; k++) {
        size_t big = n / 2, small = n / 4;
        if (even) {
            send_filled(b, big, 11 + k, 23 + k);
        } else {
            memset(b, 0xee, n);
            ovl_status_t st;
            if (k == 0)
                CHECK_OK(ovl_irecv(b, (int)small, MPI_BYTE, peer, 11, &q));
            else
                CHECK_OK(ovl_delta_recv(b, (int)small, MPI_BYTE, peer, 12,
                                        TH_MONITOR(OVL_MONITOR_MPROTECT), &q));
            EXPECT_ERR(ovl_wait(&q, &st), OVL_ERR_TRUNCATE);
            CHECKF(st.error == OVL_ERR_TRUNCATE && st.bytes == small, "%s, %zu bytes",
                   th_code_name(st.error), st.bytes);
            for (size_t i = 0; i < small; i++)
                CHECKF(b[i] == val(i, 23 + k), "byte %zu arrived as %u", i, b[i]);
            for (size_t i = small; i < n; i++)
                CHECKF(b[i] == 0xee, "byte %zu past the receive changed", i);
        }
    }
    /* a message begun above the protocol switch (its piece header and its
     * bytes go as two messages) and ended shorter: empty (no bytes follow
     * the header, the receiver's second receive is cancelled) and 100
     * bytes; then one ended at full length on the same pair. Then the same
     * from a buffer 13 bytes into its page (its bytes before the first
     * page boundary and after the last go behind the piece header): ended
     * within those first bytes, at the boundary, one past it, past the next
     * boundary, and one short of full length */
    {
        const size_t h = ps - 13;
        const struct {
            size_t off, cnt;
        } ends[] = { { 0, 0 },  { 0, 100 },    { 0, n },           { 13, 50 },
                     { 13, h }, { 13, h + 1 }, { 13, h + ps + 5 }, { 13, n - 14 } };
        for (int k = 0; k < (int)(sizeof ends / sizeof ends[0]); k++) {
            size_t o = ends[k].off, cnt = ends[k].cnt;
            if (even) {
                CHECK_OK(ovl_delta_send_begin(b + o, (int)(n - o), MPI_BYTE, peer, 50 + k,
                                              TH_MONITOR(OVL_MONITOR_EXPLICIT), &q));
                for (size_t i = 0; i < cnt; i++)
                    b[o + i] = val(i, 50 + k);
                ovl_param_t pa = { .field_mask = OVL_PARAM_FIELD_COUNT, .count = (int)cnt };
                CHECK_OK(ovl_delta_send_end(q, &pa));
                CHECK_OK(ovl_wait(&q, NULL));
            } else {
                memset(b, 0xee, n);
                ovl_status_t st;
                CHECK_OK(ovl_delta_recv(b, (int)n, MPI_BYTE, peer, 50 + k,
                                        TH_MONITOR(OVL_MONITOR_MPROTECT), &q));
                CHECK_OK(ovl_wait(&q, &st));
                CHECKF(st.bytes == cnt, "ended at %zu: %zu bytes", cnt, st.bytes);
                for (size_t i = 0; i < cnt; i++)
                    CHECKF(b[i] == val(i, 50 + k), "ended at %zu: byte %zu arrived as %u", cnt, i,
                           b[i]);
                for (size_t i = cnt; i < n; i++)
                    CHECKF(b[i] == 0xee, "ended at %zu: byte %zu past it changed", cnt, i);
            }
        }
    }
    free(b);
}

int main(int argc, char **argv)
{
    th_init(&argc, &argv, "test_delta_edges", NULL);
    peer = th_rank ^ 1;
    even = th_rank % 2 == 0;
    ps = (size_t)sysconf(_SC_PAGESIZE);
    /* one block: [.. | R (head on page 1, tail on page 4) | S ...] */
    void *p = NULL;
    CHECK(posix_memalign(&p, ps, 10 * ps + ((size_t)1 << 20)) == 0);
    blk = p;
    memset(blk, 0xee, 10 * ps + ((size_t)1 << 20));
    R = blk + 2 * ps - 1000;
    rlen = 2 * ps + 2000;
    S = R + rlen;
    slen = 3 * ps;
    if (argc > 1 && !strcmp(argv[1], "local")) {
        local();
    } else {
        own_copy();
        neighbours();
#if defined(__x86_64__)
        stepped_by_another_thread();
        rip_relative();
#endif
        mpi_neighbours();
        send_neighbours();
        get_neighbours();
    }
    free(blk);
    return th_finish();
}
