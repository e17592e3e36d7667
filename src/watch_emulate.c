/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * watch: the program's accesses to neighbour data on a guarded edge page,
 * done by the fault handler instead of the faulting instruction (x86-64).
 *
 * A pending receive's partial first or last page stays guarded while other
 * live data shares it. Single-stepping an access there costs two signals
 * and two mprotect calls (18-27 us here, the second with a TLB shootdown
 * once a second thread runs); doing the access through /proc/self/mem and
 * moving the instruction pointer past it costs one signal and one pread or
 * pwrite (3.3-3.5 us), and the page stays guarded throughout, so no other
 * thread can read the buffer's pending bytes meanwhile. Done here:
 *
 *   - string moves and stores (rep movs, rep stos: glibc's memcpy and
 *     memset of a few KiB and more): the part that stays on the current
 *     pages, registers advanced, one trap per page;
 *   - plain moves of one operand between memory and a register or an
 *     immediate: mov, movzx, movsx, movsxd, movnti, and the vector loads
 *     and stores of an xmm, ymm or zmm register (movups, movaps, movdqu,
 *     movdqa, movss, movsd, movlps, movhps, movq, movd, lddqu, movnt*;
 *     legacy SSE, VEX, and EVEX without a mask or broadcast, which is
 *     what glibc's memcpy uses on AVX-512 machines), the register's other
 *     bytes kept or zeroed as the encoding does;
 *   - integer operations with a memory operand, without lock: add, sub,
 *     and, or, xor, cmp, test, inc, dec (not adc, sbb: they read CF),
 *     their arithmetic flags computed as the CPU sets them.
 *
 * Not done, so stepped: vector arithmetic with a memory operand, masked
 * or broadcasting EVEX accesses, three-operand loads (vmovlps, vmovhps),
 * locked and exchanging operations, calls and jumps through memory. In a
 * halo exchange's layout with MPI's own heap objects next to the buffer,
 * 95 % of the neighbour accesses were done here.
 *
 * Anything else (another instruction, an access that would touch a byte
 * of a pending buffer or a page that is not a guarded edge, a segment or
 * address-size override) returns 0 and is single-stepped as before. Runs
 * inside the signal handler: no allocation, no lock. An access made here
 * is not single-copy atomic (the kernel copies its bytes): two threads
 * sharing a plain 8-byte variable on such a page may see it torn.
 */

#include "watch_internal.h"

#if defined(__x86_64__) && defined(__linux__)

#include <cpuid.h>
#include <string.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

/* Is @page either no region's, or a guarded edge page (which ovl writes
 * and reads through /proc/self/mem whatever its protection)? */
static int page_plain_or_edge(uintptr_t page)
{
    if (ovl__watch_edge_guarded(page))
        return 1;
    size_t ps = ovl__watch_page();
    for (int k = 0, rhi = ovl__watch_regs_hi(); k < rhi; k++) {
        struct ovl__watch *w = atomic_load(&ovl__watch_g.regs[k]);
        if (w && page >= w->p0 && page < w->p0 + w->npages * ps)
            return 0;
    }
    return 1;
}

/* Does [lo, hi) hold a byte of a pending receive buffer? */
static int range_pending(uintptr_t lo, uintptr_t hi)
{
    for (int k = 0, rhi = ovl__watch_regs_hi(); k < rhi; k++) {
        struct ovl__watch *w = atomic_load(&ovl__watch_g.regs[k]);
        if (w && !w->is_send && lo < (uintptr_t)w->base + w->len && (uintptr_t)w->base < hi)
            return 1;
    }
    return 0;
}

/* Read or write @n bytes at @addr, all on one page: a guarded edge page
 * through /proc/self/mem, any other page through process_vm_readv or
 * process_vm_writev on this process, which honour the page's protection
 * (a page the program itself protected fails, and the instruction is
 * stepped into the fault it would take). 0 on success. */
static int mem_rw(int write, uintptr_t addr, void *buf, size_t n)
{
    size_t ps = ovl__watch_page();
    if (ovl__watch_edge_guarded(addr & ~(uintptr_t)(ps - 1))) {
        ssize_t r = write ? pwrite(ovl__watch_g.mem_fd, buf, n, (off_t)addr)
                          : pread(ovl__watch_g.mem_fd, buf, n, (off_t)addr);
        return r == (ssize_t)n ? 0 : -1;
    }
    struct iovec local = { buf, n }, remote = { (void *)addr, n };
    ssize_t r = write ? process_vm_writev(getpid(), &local, 1, &remote, 1, 0)
                      : process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    return r == (ssize_t)n ? 0 : -1;
}

/* A string move or store: do the part of it that stays on the pages it is
 * on now, advance its registers, and let it run on. Only forward moves
 * whose bytes on these pages are no pending buffer's. @n: bytes of
 * prefixes before @op. */
static int string_move(greg_t *g, int n, int rep, int osize, int rexw, unsigned char op)
{
    if (!rep || (g[REG_EFL] & 0x400) || (op != 0xa4 && op != 0xa5 && op != 0xaa && op != 0xab))
        return 0;
    size_t sz = (op == 0xa4 || op == 0xaa) ? 1 : rexw ? 8 : osize ? 2 : 4;
    int move = op == 0xa4 || op == 0xa5;
    size_t ps = ovl__watch_page();
    uintptr_t dst = (uintptr_t)g[REG_RDI], src = move ? (uintptr_t)g[REG_RSI] : 0;
    size_t count = (size_t)g[REG_RCX];
    size_t k = count, room = (ps - (dst & (ps - 1))) / sz;
    if (room < k)
        k = room;
    if (move && (room = (ps - (src & (ps - 1))) / sz) < k)
        k = room;
    size_t bytes = k * sz;
    if (k == 0 || !page_plain_or_edge(dst & ~(uintptr_t)(ps - 1)) ||
        range_pending(dst, dst + bytes))
        return 0;
    if (move && (!page_plain_or_edge(src & ~(uintptr_t)(ps - 1)) ||
                 range_pending(src, src + bytes) || (dst > src && dst < src + bytes)))
        return 0;
    unsigned char b[4096];
    if (bytes > sizeof b)
        return 0;
    if (move) {
        if (mem_rw(0, src, b, bytes) != 0)
            return 0;
    } else {
        uint64_t v = (uint64_t)g[REG_RAX];
        for (size_t i = 0; i < bytes; i++)
            b[i] = (unsigned char)(v >> (8 * (i % sz)));
    }
    if (mem_rw(1, dst, b, bytes) != 0)
        return 0;
    g[REG_RDI] = (greg_t)(dst + bytes);
    if (move)
        g[REG_RSI] = (greg_t)(src + bytes);
    g[REG_RCX] = (greg_t)(count - k);
    if (count == k)
        g[REG_RIP] += n + 1;
    return 1;
}

/* x86 register number (REX-extended) -> index in gregs */
static const int gpr[16] = {
    REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
    REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15
};

/* What a decoded plain move does. */
enum { M_NONE, M_STORE_GPR, M_STORE_IMM, M_STORE_XMM, M_LOAD_GPR, M_LOAD_XMM, M_ALU };

/* The integer operations done on a memory operand (M_ALU), and what
 * their second operand is. */
enum { A_ADD, A_OR, A_AND, A_SUB, A_XOR, A_CMP, A_TEST, A_INC, A_DEC, A_NONE };
enum { SRC_REG, SRC_IMM, SRC_ONE };
/* the 0x00-0x3b rows and the 0x80-0x83 group, by their 3-bit operation
 * field: adc and sbb (which read CF) are not done */
static const int alu_row[8] = { A_ADD, A_OR, A_NONE, A_NONE, A_AND, A_SUB, A_XOR, A_CMP };

struct move {
    int kind;
    size_t size;   /* bytes of memory accessed */
    int reg;       /* register operand (0-15; vector registers 0-31) */
    int byte_hi;   /* 8-bit register without REX: 4-7 are AH, CH, DH, BH */
    int xmm_hi;    /* the high quadword of the xmm register (movhps, movhpd) */
    size_t zext;   /* M_LOAD_XMM: register bytes the load defines, zero beyond
                      its data (0: it merges, as movlps and movhps do) */
    int aligned;   /* the instruction requires an aligned operand */
    int sign;      /* load: sign-extend (movsx, movsxd) */
    size_t dsize;  /* load: destination register width in bytes */
    size_t immlen; /* immediate bytes after the ModRM operand */
    int alu;       /* M_ALU: the operation (A_NONE: from the ModRM reg field) */
    int src;       /* M_ALU: SRC_REG, SRC_IMM or SRC_ONE */
    int mem_dest;  /* M_ALU: memory is the first operand (else the register) */
    int group;     /* M_ALU: 0x80-0x83, 0xf6/0xf7 or 0xfe/0xff: the ModRM reg field
                      selects the operation */
};

/* The vector registers in the signal frame's XSAVE area. Component 1
 * holds xmm0-15 (the FXSAVE area), 2 the upper halves of ymm0-15, 6 the
 * upper halves of zmm0-15, 7 the whole of zmm16-31, 9 the protection-key
 * rights (PKRU); where 2, 6, 7 and 9 sit is the CPU's (CPUID leaf 0xd),
 * asked once. */
static _Atomic int xcomp_off[10], xcomp_len[10], xcomp_known;

static void xcomp_learn(void)
{
    if (atomic_load_explicit(&xcomp_known, memory_order_acquire))
        return;
    for (unsigned c = 2; c < 10; c++) {
        unsigned a = 0, b = 0, cx = 0, d = 0;
        if (__get_cpuid_max(0, NULL) >= 0xd)
            __cpuid_count(0xd, c, a, b, cx, d);
        atomic_store_explicit(&xcomp_off[c], (int)b, memory_order_relaxed);
        atomic_store_explicit(&xcomp_len[c], (int)a, memory_order_relaxed);
    }
    atomic_store_explicit(&xcomp_off[1], 160, memory_order_relaxed);
    atomic_store_explicit(&xcomp_len[1], 256, memory_order_relaxed);
    atomic_store_explicit(&xcomp_known, 1, memory_order_release);
}

/* Component @c of the frame's state, or NULL (not in the frame); @bv
 * points to XSTATE_BV, or is NULL in a frame without XSAVE state (an
 * FXSAVE area: component 1 alone, always in use). */
static unsigned char *xcomp(const ucontext_t *u, int c, uint64_t **bv)
{
    unsigned char *fx = (unsigned char *)u->uc_mcontext.fpregs;
    uint32_t magic, size;
    uint64_t feat;
    *bv = NULL;
    if (!fx)
        return NULL;
    memcpy(&magic, fx + 464, sizeof magic); /* struct _fpx_sw_bytes */
    memcpy(&feat, fx + 472, sizeof feat);
    memcpy(&size, fx + 480, sizeof size);
    if (magic == 0x46505853U)
        *bv = (uint64_t *)(void *)(fx + 512);
    if (c == 1)
        return fx + 160;
    int off = atomic_load_explicit(&xcomp_off[c], memory_order_relaxed),
        len = atomic_load_explicit(&xcomp_len[c], memory_order_relaxed);
    if (magic != 0x46505853U || !((feat >> c) & 1) || off <= 0 || len <= 0 ||
        (uint32_t)(off + len) > size)
        return NULL;
    return fx + off;
}

uint32_t *ovl__watch_frame_pkru(void *uc)
{
    uint64_t *bv;
    xcomp_learn();
    unsigned char *p = xcomp(uc, 9, &bv);
    if (!p || !bv)
        return NULL;
    if (!((*bv >> 9) & 1)) { /* initial state: PKRU 0, every key open */
        memset(p, 0, 8);
        *bv |= (uint64_t)1 << 9;
    }
    return (uint32_t *)(void *)p;
}

/* Where bytes [16k, 16k + 16) of vector register @r are kept: the
 * component in @c and the offset in it. */
static size_t vpart(int r, int k, int *c)
{
    if (r >= 16) {
        *c = 7;
        return (size_t)(64 * (r - 16) + 16 * k);
    }
    *c = k == 0 ? 1 : k == 1 ? 2 : 6;
    return k < 2 ? (size_t)(16 * r) : (size_t)(32 * r + 16 * (k - 2));
}

/* The first @n bytes (16, 32 or 64) of vector register @r into @out. 0
 * if the frame does not hold them. A component in its initial state
 * (its XSTATE_BV bit clear) reads as zeros. */
static int vreg_get(const ucontext_t *u, int r, unsigned char *out, size_t n)
{
    xcomp_learn();
    for (int k = 0; k < (int)(n / 16); k++) {
        int c;
        size_t off = vpart(r, k, &c);
        uint64_t *bv;
        unsigned char *base = xcomp(u, c, &bv);
        if (!base)
            return 0;
        if (!bv || ((*bv >> c) & 1))
            memcpy(out + 16 * k, base + off, 16);
        else
            memset(out + 16 * k, 0, 16);
    }
    return 1;
}

/* Write bytes [0, @n) of vector register @r from @in (@n a multiple of
 * 16, at most 64), as the return from the handler will load them. Zeros
 * for a component in its initial state leave it so (the CPU would
 * otherwise carry upper state it does not need); a component brought out
 * of it is zeroed first, so its other registers stay zero. 0 if the frame
 * cannot hold them (nothing then written). */
static int vreg_put(ucontext_t *u, int r, const unsigned char *in, size_t n)
{
    static const unsigned char zero[16];
    unsigned char *base[4];
    size_t off[4];
    uint64_t *bv = NULL;
    int comp[4];
    xcomp_learn();
    for (int k = 0; k < (int)(n / 16); k++) {
        off[k] = vpart(r, k, &comp[k]);
        if (!(base[k] = xcomp(u, comp[k], &bv)))
            return 0;
    }
    for (int k = 0; k < (int)(n / 16); k++) {
        int c = comp[k];
        if (bv && !((*bv >> c) & 1)) { /* initial */
            if (!memcmp(in + 16 * k, zero, 16))
                continue;
            memset(base[k], 0, (size_t)atomic_load_explicit(&xcomp_len[c], memory_order_relaxed));
            *bv |= (uint64_t)1 << c;
        }
        memcpy(base[k] + off[k], in + 16 * k, 16);
    }
    return 1;
}

/* How many bytes of a vector register this frame can show: 64 with
 * AVX-512 state, 32 with AVX, 16 otherwise. */
static size_t vreg_max(const ucontext_t *u)
{
    uint64_t *bv;
    xcomp_learn();
    if (xcomp(u, 6, &bv) && xcomp(u, 7, &bv))
        return 64;
    return xcomp(u, 2, &bv) ? 32 : 16;
}

/* An instruction's legacy prefixes and REX byte. */
struct prefixes {
    int n;     /* bytes of them */
    int osize; /* 0x66 */
    int rep;   /* 0xf2 or 0xf3, else 0 */
    int rex;   /* the REX byte, else 0 */
};

/* Read the prefixes at @ip into @p: 0 if there are more than 3 legacy
 * prefixes or one this file does not do (0x64/0x65 fs and gs, 0x67,
 * lock), which then stays the instruction's first byte and fails its
 * decoding. */
static int read_prefixes(const unsigned char *ip, struct prefixes *p)
{
    memset(p, 0, sizeof *p);
    for (;; p->n++) {
        unsigned char b = ip[p->n];
        if (p->n >= 4)
            return 0;
        if (b == 0x66)
            p->osize = 1;
        else if (b == 0xf2 || b == 0xf3)
            p->rep = b;
        else if (b != 0x2e && b != 0x3e && b != 0x26 && b != 0x36)
            break;
    }
    if ((ip[p->n] & 0xf0) == 0x40)
        p->rex = ip[p->n++];
    return 1;
}

/* Decode the plain move at @ip, whose prefixes @p has read, its ModRM
 * operand, and fill @m and the effective address; the instruction's
 * length in @len. 0 if it is not one this file does. */
static int decode(const ucontext_t *u, const unsigned char *ip, const struct prefixes *p, int *len,
                  struct move *m, uintptr_t *ea)
{
    const greg_t *g = u->uc_mcontext.gregs;
    int n = p->n, osize = p->osize, rep = p->rep, rex = p->rex;
    int vex = 0, evex = 0, vl = 0, vpp = 0, vw = 0, map = 0, rexr2 = 0;
    if (!rex && ip[n] == 0x62) {
        /* EVEX (0x62 is no instruction of its own in 64-bit mode): map 0f
         * only, no mask, no zeroing, no broadcast, vvvv and V' unused */
        unsigned char p0 = ip[n + 1], p1 = ip[n + 2], p2 = ip[n + 3];
        if (osize || rep || (p0 & 0x0f) != 1 || (p1 & 0x7c) != 0x7c || (p2 & 0x9f) != 0x08 ||
            ((p2 >> 5) & 3) == 3)
            return 0;
        vw = p1 >> 7;
        rex = 0x40 | (!(p0 & 0x80) << 2) | (!(p0 & 0x40) << 1) | !(p0 & 0x20) | (vw << 3);
        rexr2 = !(p0 & 0x10);
        vl = (p2 >> 5) & 3;
        vpp = p1 & 3;
        map = 1;
        n += 4;
        vex = evex = 1;
    } else if (!rex && (ip[n] == 0xc5 || ip[n] == 0xc4)) {
        if (osize || rep)
            return 0;
        unsigned char b1 = ip[n + 1];
        if (ip[n] == 0xc5) {
            rex = 0x40 | (!(b1 & 0x80) << 2);
            vl = (b1 >> 2) & 1;
            vpp = b1 & 3;
            map = 1;
            n += 2;
        } else {
            unsigned char b2 = ip[n + 2];
            if ((b1 & 0x1f) != 1)
                return 0;
            vw = b2 >> 7;
            rex = 0x40 | (!(b1 & 0x80) << 2) | (!(b1 & 0x40) << 1) | !(b1 & 0x20) | (vw << 3);
            vl = (b2 >> 2) & 1;
            vpp = b2 & 3;
            map = 1;
            n += 3;
        }
        vex = 1;
    }
    int rexw = (rex >> 3) & 1, rexr = (rex >> 2) & 1, rexx = (rex >> 1) & 1, rexb = rex & 1;
    unsigned char op = ip[n++];
    if (!vex && op == 0x0f) {
        map = 1;
        op = ip[n++];
    }
    memset(m, 0, sizeof *m);
    size_t wsize = rexw ? 8 : osize ? 2 : 4;
    /* prefix class of an SSE op: 0 none, 1 66, 2 F3, 3 F2 */
    int pp = vex ? vpp : rep == 0xf3 ? 2 : rep == 0xf2 ? 3 : osize ? 1 : 0;
    size_t vsize = vex ? (size_t)16 << vl : 16;
    /* bytes of the register a load defines: a legacy SSE load keeps the
     * bits above 128, a VEX or EVEX load zeroes them */
    size_t zfull = vex ? 64 : 16;
    if (!map) {
        if (rep)
            return 0;
        switch (op) {
        case 0x88:
            m->kind = M_STORE_GPR, m->size = 1;
            break;
        case 0x89:
            m->kind = M_STORE_GPR, m->size = wsize;
            break;
        case 0xc6:
            m->kind = M_STORE_IMM, m->size = 1, m->immlen = 1;
            break;
        case 0xc7:
            m->kind = M_STORE_IMM, m->size = wsize, m->immlen = wsize == 2 ? 2 : 4;
            break;
        case 0x8a:
            m->kind = M_LOAD_GPR, m->size = m->dsize = 1;
            break;
        case 0x8b:
            m->kind = M_LOAD_GPR, m->size = m->dsize = wsize;
            break;
        case 0x63:
            if (!rexw)
                return 0;
            m->kind = M_LOAD_GPR, m->size = 4, m->dsize = 8, m->sign = 1;
            break;
        case 0x80:
        case 0x81:
        case 0x83:
            m->kind = M_ALU, m->src = SRC_IMM, m->group = op;
            m->size = op == 0x80 ? 1 : wsize, m->mem_dest = 1;
            m->immlen = op == 0x81 ? (wsize == 2 ? 2 : 4) : 1;
            break;
        case 0x84:
        case 0x85:
            m->kind = M_ALU, m->alu = A_TEST, m->src = SRC_REG, m->mem_dest = 1;
            m->size = op == 0x84 ? 1 : wsize;
            break;
        case 0xf6:
        case 0xf7: /* test r/m, imm (reg field 0) */
            m->kind = M_ALU, m->alu = A_TEST, m->src = SRC_IMM, m->group = op, m->mem_dest = 1;
            m->size = op == 0xf6 ? 1 : wsize;
            m->immlen = op == 0xf6 ? 1 : wsize == 2 ? 2 : 4;
            break;
        case 0xfe:
        case 0xff: /* inc, dec (reg field 0, 1) */
            m->kind = M_ALU, m->src = SRC_ONE, m->group = op, m->mem_dest = 1;
            m->size = op == 0xfe ? 1 : wsize;
            break;
        default:
            /* add, or, and, sub, xor, cmp between memory and a register */
            if (op >= 0x40 || (op & 7) > 3 || alu_row[op >> 3] == A_NONE)
                return 0;
            m->kind = M_ALU, m->alu = alu_row[op >> 3], m->src = SRC_REG;
            m->size = (op & 1) ? wsize : 1, m->mem_dest = !(op & 2);
            break;
        }
    } else if (!vex && (op == 0xb6 || op == 0xb7 || op == 0xbe || op == 0xbf || op == 0xc3)) {
        if (rep)
            return 0;
        if (op == 0xc3) {
            if (osize)
                return 0;
            m->kind = M_STORE_GPR, m->size = wsize;
        } else {
            m->kind = M_LOAD_GPR, m->size = (op & 1) ? 2 : 1, m->dsize = wsize;
            m->sign = op >= 0xbe;
        }
    } else {
        /* SSE, AVX and AVX-512 moves between a vector register and memory */
        m->kind = M_STORE_XMM;
        switch (op) {
        case 0x10: /* movups, movupd, movss, movsd: loads */
        case 0x11: /* and stores */
            m->size = pp == 2 ? 4 : pp == 3 ? 8 : vsize;
            if (op == 0x10)
                m->kind = M_LOAD_XMM, m->zext = zfull;
            break;
        case 0x28: /* movaps, movapd */
        case 0x29:
        case 0x2b: /* movntps, movntpd */
            if (pp > 1)
                return 0;
            m->size = vsize, m->aligned = 1;
            if (op == 0x28)
                m->kind = M_LOAD_XMM, m->zext = zfull;
            break;
        case 0x12: /* movlps, movlpd, movhps, movhpd: legacy loads merge */
        case 0x16: /* (VEX and EVEX forms take a third operand) */
            if (pp > 1 || vex)
                return 0;
            m->kind = M_LOAD_XMM, m->size = 8, m->xmm_hi = op == 0x16;
            break;
        case 0x13:
        case 0x17:
            if (pp > 1 || vl)
                return 0;
            m->size = 8, m->xmm_hi = op == 0x17;
            break;
        case 0xd6: /* movq */
            if (pp != 1 || vl)
                return 0;
            m->size = 8;
            break;
        case 0x7e: /* movd, movq (66) stores; movq (F3) load */
            if ((pp != 1 && pp != 2) || vl || (pp == 2 && evex && !vw))
                return 0;
            m->size = pp == 2 || (vex ? vw : rexw) ? 8 : 4;
            if (pp == 2)
                m->kind = M_LOAD_XMM, m->zext = zfull;
            break;
        case 0x6e: /* movd, movq loads */
            if (pp != 1 || vl)
                return 0;
            m->kind = M_LOAD_XMM, m->size = (vex ? vw : rexw) ? 8 : 4, m->zext = zfull;
            break;
        case 0x6f: /* movdqa, movdqu (EVEX: vmovdqa32/64, vmovdqu8/16/32/64) */
        case 0x7f:
            if (pp == 0 || (pp == 3 && !evex))
                return 0;
            m->size = vsize, m->aligned = pp == 1;
            if (op == 0x6f)
                m->kind = M_LOAD_XMM, m->zext = zfull;
            break;
        case 0xe7: /* movntdq */
            if (pp != 1)
                return 0;
            m->size = vsize, m->aligned = 1;
            break;
        case 0xf0: /* lddqu */
            if (pp != 3 || evex)
                return 0;
            m->kind = M_LOAD_XMM, m->size = vsize, m->zext = zfull;
            break;
        default:
            return 0;
        }
    }
    /* the ModRM operand: memory only */
    unsigned char modrm = ip[n++];
    int mod = modrm >> 6, reg = ((modrm >> 3) & 7) | (rexr << 3) | (rexr2 << 4), rm = modrm & 7;
    if (mod == 3)
        return 0;
    if (m->kind == M_STORE_IMM && (reg & 7) != 0)
        return 0;
    if (m->group >= 0x80 && m->group <= 0x83 && (m->alu = alu_row[reg & 7]) == A_NONE)
        return 0;
    if ((m->group == 0xf6 || m->group == 0xf7) && (reg & 7) != 0)
        return 0;
    if (m->group == 0xfe || m->group == 0xff) {
        if ((reg & 7) > 1)
            return 0;
        m->alu = (reg & 7) ? A_DEC : A_INC;
    }
    uintptr_t a = 0;
    int riprel = 0;
    if (rm == 4) {
        unsigned char sib = ip[n++];
        int scale = sib >> 6, index = ((sib >> 3) & 7) | (rexx << 3), base = sib & 7;
        if (index != 4)
            a += (uintptr_t)g[gpr[index]] << scale;
        if (base == 5 && mod == 0) {
            int32_t d;
            memcpy(&d, ip + n, 4);
            n += 4;
            a += (uintptr_t)(intptr_t)d;
        } else {
            a += (uintptr_t)g[gpr[base | (rexb << 3)]];
        }
    } else if (rm == 5 && mod == 0) {
        riprel = 1;
        int32_t d;
        memcpy(&d, ip + n, 4);
        n += 4;
        a = (uintptr_t)(intptr_t)d;
    } else {
        a = (uintptr_t)g[gpr[rm | (rexb << 3)]];
    }
    if (mod == 1) { /* EVEX scales an 8-bit displacement by the operand's size */
        a += (uintptr_t)((intptr_t)(int8_t)ip[n++] * (evex ? (intptr_t)m->size : 1));
    } else if (mod == 2) {
        int32_t d;
        memcpy(&d, ip + n, 4);
        n += 4;
        a += (uintptr_t)(intptr_t)d;
    }
    n += (int)m->immlen;
    if (riprel)
        a += (uintptr_t)g[REG_RIP] + (uintptr_t)n;
    m->reg = reg;
    if ((m->kind == M_STORE_GPR && m->size == 1) || (m->kind == M_LOAD_GPR && m->dsize == 1) ||
        (m->kind == M_ALU && m->src == SRC_REG && m->size == 1))
        m->byte_hi = !rex && reg >= 4 && reg < 8;
    *ea = a;
    *len = n;
    return 1;
}

/* A general register's value as an operand of @size bytes (@byte_hi:
 * AH, CH, DH or BH), and writing one back as the CPU does: 8 and 16 bits
 * merge, 32 bits zero the upper half. */
static uint64_t reg_get(const greg_t *g, int reg, int byte_hi)
{
    uint64_t v = (uint64_t)g[gpr[byte_hi ? reg - 4 : reg]];
    return byte_hi ? v >> 8 : v;
}

static void reg_put(greg_t *g, int reg, int byte_hi, size_t size, uint64_t v)
{
    greg_t *r = &g[gpr[byte_hi ? reg - 4 : reg]];
    uint64_t old = (uint64_t)*r;
    switch (size) {
    case 1:
        old = byte_hi ? (old & ~(uint64_t)0xff00) | ((v & 0xff) << 8)
                      : (old & ~(uint64_t)0xff) | (v & 0xff);
        break;
    case 2:
        old = (old & ~(uint64_t)0xffff) | (v & 0xffff);
        break;
    case 4:
        old = v & 0xffffffffu;
        break;
    default:
        old = v;
        break;
    }
    *r = (greg_t)old;
}

/* A sign-extended immediate of @n bytes. */
static uint64_t imm_get(const unsigned char *p, size_t n)
{
    if (n == 1)
        return (uint64_t)(int64_t)(int8_t)p[0];
    if (n == 2) {
        int16_t v;
        memcpy(&v, p, 2);
        return (uint64_t)(int64_t)v;
    }
    int32_t v;
    memcpy(&v, p, 4);
    return (uint64_t)(int64_t)v;
}

#define F_CF 0x001
#define F_PF 0x004
#define F_AF 0x010
#define F_ZF 0x040
#define F_SF 0x080
#define F_OF 0x800

/* @op on @a and @b of @size bytes: the result, and the arithmetic flags
 * in *flags (which of them the operation sets in *mask). */
static uint64_t alu(int op, size_t size, uint64_t a, uint64_t b, uint64_t *flags, uint64_t *mask)
{
    unsigned bits = (unsigned)(8 * size);
    uint64_t all = bits == 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
    a &= all, b &= all;
    uint64_t r, f = 0;
    *mask = F_CF | F_PF | F_AF | F_ZF | F_SF | F_OF;
    switch (op) {
    case A_ADD:
    case A_INC:
        r = (a + b) & all;
        if (r < a)
            f |= F_CF;
        if ((((a ^ r) & (b ^ r)) >> (bits - 1)) & 1)
            f |= F_OF;
        f |= (a ^ b ^ r) & F_AF;
        if (op == A_INC)
            *mask &= ~(uint64_t)F_CF;
        break;
    case A_SUB:
    case A_CMP:
    case A_DEC:
        r = (a - b) & all;
        if (a < b)
            f |= F_CF;
        if ((((a ^ b) & (a ^ r)) >> (bits - 1)) & 1)
            f |= F_OF;
        f |= (a ^ b ^ r) & F_AF;
        if (op == A_DEC)
            *mask &= ~(uint64_t)F_CF;
        break;
    case A_OR:
        r = a | b;
        break;
    case A_XOR:
        r = a ^ b;
        break;
    default:
        r = a & b;
        break; /* and, test: CF, OF and AF cleared */
    }
    if (r == 0)
        f |= F_ZF;
    if ((r >> (bits - 1)) & 1)
        f |= F_SF;
    if (!__builtin_parity((unsigned)(r & 0xff)))
        f |= F_PF;
    *flags = f;
    return r;
}

/* Do the plain move that faulted at @addr. 1 if done. */
static int plain_move(ucontext_t *u, uintptr_t addr, const struct prefixes *p)
{
    greg_t *g = u->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    struct move m;
    uintptr_t ea;
    int len;
    if (!decode(u, ip, p, &len, &m, &ea))
        return 0;
    size_t ps = ovl__watch_page();
    /* the access the fault was for, wholly on guarded edge pages, and no
     * byte of it a pending buffer's */
    if (addr < ea || addr >= ea + m.size || (m.aligned && (ea & (m.size - 1))))
        return 0;
    if (!ovl__watch_edge_guarded(ea & ~(uintptr_t)(ps - 1)) ||
        !ovl__watch_edge_guarded((ea + m.size - 1) & ~(uintptr_t)(ps - 1)) ||
        range_pending(ea, ea + m.size))
        return 0;
    unsigned char b[64];
    /* a read-modify-write is done whole or not at all: a pwrite cut short
     * between two pages, then stepped, would apply it twice */
    if (m.kind == M_ALU && ((ea ^ (ea + m.size - 1)) & ~(uintptr_t)(ps - 1)))
        return 0;
    if (m.kind == M_ALU) {
        uint64_t mv = 0, other, flags, mask;
        if (pread(ovl__watch_g.mem_fd, &mv, m.size, (off_t)ea) != (ssize_t)m.size)
            return 0;
        other = m.src == SRC_ONE   ? 1
                : m.src == SRC_IMM ? imm_get(ip + len - m.immlen, m.immlen)
                                   : reg_get(g, m.reg, m.byte_hi);
        uint64_t r = m.mem_dest ? alu(m.alu, m.size, mv, other, &flags, &mask)
                                : alu(m.alu, m.size, other, mv, &flags, &mask);
        if (m.alu != A_CMP && m.alu != A_TEST) {
            if (!m.mem_dest)
                reg_put(g, m.reg, m.byte_hi, m.size, r);
            else if (pwrite(ovl__watch_g.mem_fd, &r, m.size, (off_t)ea) != (ssize_t)m.size)
                return 0;
        }
        g[REG_EFL] = (greg_t)(((uint64_t)g[REG_EFL] & ~mask) | (flags & mask));
    } else if (m.kind == M_LOAD_XMM) {
        /* the register as the load leaves it: the data at its place, then
         * zeros up to what the load defines, the rest kept */
        unsigned char v[64];
        size_t vmax = vreg_max(u), top = m.zext > vmax ? vmax : m.zext, at = m.xmm_hi ? 8 : 0;
        size_t whole = top > 16 ? top : 16;
        if (at + m.size > whole) /* a register wider than the frame holds */
            return 0;
        if (!vreg_get(u, m.reg, v, whole))
            return 0;
        if (pread(ovl__watch_g.mem_fd, b, m.size, (off_t)ea) != (ssize_t)m.size)
            return 0;
        if (m.zext)
            memset(v, 0, top);
        memcpy(v + at, b, m.size);
        if (!vreg_put(u, m.reg, v, whole))
            return 0;
    } else if (m.kind == M_LOAD_GPR) {
        if (pread(ovl__watch_g.mem_fd, b, m.size, (off_t)ea) != (ssize_t)m.size)
            return 0;
        uint64_t v = 0;
        memcpy(&v, b, m.size);
        if (m.sign && m.size < 8) {
            uint64_t top = (uint64_t)1 << (8 * m.size - 1);
            v = (v ^ top) - top;
        }
        reg_put(g, m.reg, m.byte_hi, m.dsize, v);
    } else {
        if (m.kind == M_STORE_GPR) {
            uint64_t v = reg_get(g, m.reg, m.byte_hi);
            memcpy(b, &v, m.size);
        } else if (m.kind == M_STORE_IMM) {
            uint64_t v = imm_get(ip + len - m.immlen, m.immlen);
            memcpy(b, &v, m.size);
        } else {
            unsigned char v[64];
            size_t at = m.xmm_hi ? 8 : 0;
            if (!vreg_get(u, m.reg, v, m.size + at > 16 ? m.size + at : 16))
                return 0;
            memcpy(b, v + at, m.size);
        }
        if (pwrite(ovl__watch_g.mem_fd, b, m.size, (off_t)ea) != (ssize_t)m.size)
            return 0;
    }
    g[REG_RIP] += len;
    return 1;
}

int ovl__watch_emulate(void *uc, uintptr_t addr)
{
    ucontext_t *u = uc;
    if (!u || ovl__watch_g.mem_fd < 0)
        return 0;
    greg_t *g = u->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    /* not while single-stepping (a debugger's, or ovl's own), whose trap
     * must come after this very instruction; not an instruction fetch from
     * a guarded page (its bytes cannot be read here) */
    if ((g[REG_EFL] & 0x100) || (addr >= (uintptr_t)ip && addr - (uintptr_t)ip < 16))
        return 0;
    struct prefixes p;
    if (!read_prefixes(ip, &p))
        return 0;
    unsigned char op = ip[p.n];
    if (op >= 0xa4 && op <= 0xab)
        return string_move(g, p.n, p.rep == 0xf3, p.osize, (p.rex >> 3) & 1, op);
    return plain_move(u, addr, &p);
}

#else

int ovl__watch_emulate(void *uc, uintptr_t addr)
{
    (void)uc;
    (void)addr;
    return 0;
}

uint32_t *ovl__watch_frame_pkru(void *uc)
{
    (void)uc;
    return NULL;
}

#endif
