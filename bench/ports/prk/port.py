#!/usr/bin/env python3
"""Port three Parallel Research Kernels (PRK) to ovl, out of the tree.

    port.py PRK_SRC OUT_DIR

PRK_SRC is a checkout of https://github.com/ParRes/Kernels (BSD licence);
OUT_DIR must lie outside the ovl repository: PRK's code is copied there and
edited there, never into ovl's tree. The script writes

    OUT_DIR/COPYING                 PRK's licence (it covers the copied code)
    OUT_DIR/PRK_SOURCE              where the copy came from
    OUT_DIR/include/                PRK's headers, and prk_ovl.h (ours)
    OUT_DIR/common/                 wtime.c, MPI_bail_out.c (PRK's)
    OUT_DIR/transpose/plain/transpose.c     MPI1/Transpose, unchanged
    OUT_DIR/transpose/ovl/transpose.c       delta send/receive port
    OUT_DIR/stencil/plain/stencil.c         MPI1/Stencil, unchanged
    OUT_DIR/stencil/ovl/stencil.c           delta send/receive port
    OUT_DIR/stencil/ovl-isend/stencil.c     ovl_isend/ovl_irecv/ovl_wait port
    OUT_DIR/transpose-rma/plain/transpose.c MPIRMA/Transpose, unchanged
    OUT_DIR/transpose-rma/plan/transpose.c  loop-nest planner port (reads)

Every edit is an exact textual replacement of a piece of PRK's source that
must occur exactly once: if PRK changes, the script stops with the anchor
that was not found (and writes nothing), so the change is noticed instead of
silently producing a different port. The MPI1 ports keep PRK's allocation
(prk_malloc, the work and halo buffers carved from one block) as it is; the
MPIRMA port allocates A as an ovl segment, with the same layout.
bench/ports/README.md describes every edit in words.
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from porting import PortError, Source, check_calls_left, out_dir_refused  # noqa: E402


# --------------------------------------------------------------------------
# Our header, written into OUT_DIR/include: the return-code check.
# --------------------------------------------------------------------------

PRK_OVL_H = r"""/* prk_ovl.h: written by ovl's bench/ports/prk/port.py for the ovl ports of
 * the Parallel Research Kernels; not part of PRK. */
#ifndef PRK_OVL_H
#define PRK_OVL_H

#include <stdio.h>
#include <mpi.h>
#include <ovl.h>

/* Every ovl call is checked: on an error, say which call, where, and why,
 * then stop the whole job. */
#define OVL_CHECK(call)                                                        \
    do {                                                                       \
        int ovl_check_rc_ = (call);                                            \
        if (ovl_check_rc_ != OVL_SUCCESS) {                                    \
            int ovl_check_rank_ = -1;                                          \
            MPI_Comm_rank(MPI_COMM_WORLD, &ovl_check_rank_);                   \
            fprintf(stderr, "rank %d: %s:%d: %s: %s (%s)\n", ovl_check_rank_,  \
                    __FILE__, __LINE__, #call, ovl_strerror(ovl_check_rc_),    \
                    ovl_error_detail());                                       \
            fflush(stderr);                                                    \
            MPI_Abort(MPI_COMM_WORLD, 1);                                      \
        }                                                                      \
    } while (0)

#endif /* PRK_OVL_H */
"""

INCLUDE_OVL = """/* ---- ovl port (bench/ports/prk/port.py) ---- */
#include <prk_ovl.h>
"""

# Transpose's SYNCHRONOUS=1 build (MPI_Sendrecv) is not ported.
TRANSPOSE_ONLY_ASYNC = """#if SYNCHRONOUS
#error "ovl port: only PRK's non-blocking exchange (SYNCHRONOUS=0) is ported"
#endif
"""

INIT_OVL = """  /* ovl port: MPI_THREAD_MULTIPLE so that OVL_PROGRESS=thread works */
  int provided;
  MPI_Init_thread(&argc,&argv,MPI_THREAD_MULTIPLE,&provided);
  OVL_CHECK(ovl_init(MPI_COMM_WORLD, NULL));
"""


def port_main_calls(src, finalize_anchor, include_extra=""):
    """MPI_Init -> MPI_Init_thread + ovl_init; ovl_finalize before the
    bail_out that follows validation (bail_out calls MPI_Finalize on an
    error, so ovl must be finalized before it, not just before the final
    MPI_Finalize)."""
    src.insert_after("#include <par-res-kern_mpi.h>\n", INCLUDE_OVL + include_extra,
                     "PRK MPI header")
    init = INIT_OVL
    src.replace("  MPI_Init(&argc,&argv);\n", init, 1, "MPI_Init")
    src.replace(finalize_anchor,
                "  OVL_CHECK(ovl_finalize()); /* ovl port: before bail_out, "
                "which may call MPI_Finalize */\n" + finalize_anchor,
                1, "validation bail_out")


# --------------------------------------------------------------------------
# MPI1/Transpose
# --------------------------------------------------------------------------

def port_transpose(src, irecv=False):
    """irecv: the porting guide's recipe for buffers carved from one block
    (Work_out starts on Work_in's last page): Work_in is received with
    ovl_irecv and waited for before the scatter loop, so no page is guarded
    and the pack loop's writes next to it never trap. The send is the same
    delta send."""
    port_main_calls(src,
                    "  bail_out(error);\n\n  MPI_Finalize();\n  exit(EXIT_SUCCESS);\n",
                    TRANSPOSE_ONLY_ASYNC)

    src.replace("""#if !SYNCHRONOUS
  MPI_Request send_req;
  MPI_Request recv_req;
#endif
""", """#if !SYNCHRONOUS
  ovl_request_t send_req;  /* ovl port: was MPI_Request */
  ovl_request_t recv_req;  /* ovl port: was MPI_Request */
#endif
""", 1, "request declarations")

    # The receive: posted where MPI_Irecv was, before the pack loop.
    src.replace("""#if !SYNCHRONOUS
      MPI_Irecv(Work_in_p, Block_size, MPI_DOUBLE,
                recv_from, phase, MPI_COMM_WORLD, &recv_req);
#endif
""", """#if !SYNCHRONOUS
      /* ovl port: was MPI_Irecv; the scatter loop below reads Work_in as
         it arrives (a page not yet here waits) */
      OVL_CHECK(ovl_delta_recv(Work_in_p, (int)Block_size, MPI_DOUBLE,
                               recv_from, phase, NULL, &recv_req));
#endif
""" if not irecv else """#if !SYNCHRONOUS
      /* ovl port (irecv recipe): was MPI_Irecv; waited for before the
         scatter loop, as in PRK, so nothing of Work_in's pages is guarded */
      OVL_CHECK(ovl_irecv(Work_in_p, (int)Block_size, MPI_DOUBLE,
                          recv_from, phase, &recv_req));
#endif
""", 1, "MPI_Irecv of Work_in")

    # Untiled pack: writes Work_out from its first to its last element
    # (Work_out(j,i) = Work_out_p[j+Block_order*i], j innermost), as a fault
    # monitor requires: the send starts before the loop.
    src.insert_after("""      istart = send_to*Block_order;
      if (!tiling) {
""", """        /* ovl port: the send starts before the loop that writes Work_out,
           which writes it in order; pieces leave as pages fill */
        OVL_CHECK(ovl_delta_send_begin(Work_out_p, (int)Block_size, MPI_DOUBLE,
                                       send_to, phase, NULL, &send_req));
""", "untiled pack loop")

    # Tiled pack: within a band of Tile_order columns i..i+Tile_order-1 of
    # the A block (= rows it of Work_out), the tiles j visit every jt of each
    # it, so the writes jump between the band's columns of Work_out: out of
    # order for a fault monitor (OVL_ERR_STALE). Announce each band instead.
    src.replace("""      else {
        for (i=0; i<Block_order; i+=Tile_order)
          for (j=0; j<Block_order; j+=Tile_order)
            for (it=i; it<MIN(Block_order,i+Tile_order); it++)
              for (jt=j; jt<MIN(Block_order,j+Tile_order);jt++) {
                Work_out(jt,it) = A(it,jt);
                A(it,jt) += 1.0;
\t      }
      }
""", """      else {
        /* ovl port: the tiled loop writes Work_out out of order within a
           band, so no fault monitor: it says which part is done */
        const ovl_param_t explicit_monitor = { .field_mask = OVL_PARAM_FIELD_MONITOR,
                                               .monitor = OVL_MONITOR_EXPLICIT };
        OVL_CHECK(ovl_delta_send_begin(Work_out_p, (int)Block_size, MPI_DOUBLE,
                                       send_to, phase, &explicit_monitor, &send_req));
        for (i=0; i<Block_order; i+=Tile_order) {
          for (j=0; j<Block_order; j+=Tile_order)
            for (it=i; it<MIN(Block_order,i+Tile_order); it++)
              for (jt=j; jt<MIN(Block_order,j+Tile_order);jt++) {
                Work_out(jt,it) = A(it,jt);
                A(it,jt) += 1.0;
\t      }
          /* ovl port: band i is complete. It wrote Work_out(jt,it) =
             Work_out_p[jt+Block_order*it] for every jt in [0,Block_order)
             and it in [i, MIN(Block_order,i+Tile_order)): the elements
             [i*Block_order, MIN(Block_order,i+Tile_order)*Block_order),
             i.e. bytes [i*Block_order*8, MIN(Block_order,i+Tile_order)*
             Block_order*8) of Work_out, contiguous and after every band
             before it. */
          OVL_CHECK(ovl_delta_produced(send_req,
                        (size_t)i*(size_t)Block_order*sizeof(double),
                        (size_t)(MIN(Block_order,i+Tile_order)-i)*
                        (size_t)Block_order*sizeof(double)));
        }
      }
""", 1, "tiled pack loop")

    # MPI_Isend + both waits -> the end of the send; the waits move after
    # the scatter loop, which reads Work_in while it arrives.
    src.replace("""#if !SYNCHRONOUS
      MPI_Isend(Work_out_p, Block_size, MPI_DOUBLE, send_to,
                phase, MPI_COMM_WORLD, &send_req);
      MPI_Wait(&recv_req, MPI_STATUS_IGNORE);
      MPI_Wait(&send_req, MPI_STATUS_IGNORE);
#else
""", """#if !SYNCHRONOUS
      /* ovl port: was MPI_Isend + MPI_Wait x2: Work_out is written, send
         the rest; the waits are after the scatter loop */
      OVL_CHECK(ovl_delta_send_end(send_req, NULL));
#else
""" if not irecv else """#if !SYNCHRONOUS
      /* ovl port (irecv recipe): was MPI_Isend + MPI_Wait x2: Work_out is
         written, send the rest; Work_in is waited for here, as in PRK */
      OVL_CHECK(ovl_delta_send_end(send_req, NULL));
      OVL_CHECK(ovl_wait(&recv_req, OVL_STATUS_IGNORE));
#else
""", 1, "MPI_Isend and waits")

    src.replace("""          B(i,j) += Work_in(i,j);

    }  /* end of phase loop  */
""", """          B(i,j) += Work_in(i,j);

      /* ovl port: the waits moved here from before the scatter loop */
""" + ("" if irecv else """      OVL_CHECK(ovl_wait(&recv_req, OVL_STATUS_IGNORE));
""") + """      OVL_CHECK(ovl_wait(&send_req, OVL_STATUS_IGNORE));

    }  /* end of phase loop  */
""", 1, "end of the scatter loop")
    return src


# --------------------------------------------------------------------------
# MPI1/Stencil
# --------------------------------------------------------------------------

class Dir:
    """One halo direction of MPI1/Stencil: PRK's calls, verbatim."""

    def __init__(self, out, inb, nbr, count, rtag, stag, si, ri, guard, pack, irecv, isend):
        self.out, self.inb, self.nbr, self.count = out, inb, nbr, count
        self.rtag, self.stag, self.si, self.ri = rtag, stag, si, ri
        self.guard = guard  # the if that guards the direction
        self.pack = pack    # the pack loop's first two lines
        self.irecv = irecv  # PRK's MPI_Irecv statement
        self.isend = isend  # PRK's MPI_Isend statement
        self.waits = ("      MPI_Wait(&(request[%s]), MPI_STATUS_IGNORE);\n"
                      "      MPI_Wait(&(request[%s]), MPI_STATUS_IGNORE);\n" % (si, ri))


STENCIL_DIRS = [
    Dir("top_buf_out", "top_buf_in", "top_nbr", "RADIUS*width", "101", "99", "0", "1",
        "if (my_IDy < Num_procsy-1) {",
        "      for (int kk=0,j=jend-RADIUS+1; j<=jend; j++) for (int i=istart; i<=iend; i++) {\n"
        "          top_buf_out[kk++]= IN(i,j);\n",
        "      MPI_Irecv(top_buf_in, RADIUS*width, MPI_DTYPE, top_nbr, 101,\n"
        "                MPI_COMM_WORLD, &(request[1]));\n",
        "      MPI_Isend(top_buf_out, RADIUS*width,MPI_DTYPE, top_nbr, 99,\n"
        "                MPI_COMM_WORLD, &(request[0]));\n"),
    Dir("bottom_buf_out", "bottom_buf_in", "bottom_nbr", "RADIUS*width", "99", "101", "2", "3",
        "if (my_IDy > 0) {",
        "      for (int kk=0,j=jstart; j<=jstart+RADIUS-1; j++) for (int i=istart; i<=iend; i++) {\n"
        "          bottom_buf_out[kk++]= IN(i,j);\n",
        "      MPI_Irecv(bottom_buf_in,RADIUS*width, MPI_DTYPE, bottom_nbr, 99,\n"
        "                MPI_COMM_WORLD, &(request[3]));\n",
        "      MPI_Isend(bottom_buf_out, RADIUS*width,MPI_DTYPE, bottom_nbr, 101,\n"
        "                MPI_COMM_WORLD, &(request[2]));\n"),
    Dir("right_buf_out", "right_buf_in", "right_nbr", "RADIUS*height", "1010", "990", "0+4", "1+4",
        "if (my_IDx < Num_procsx-1) {",
        "      for (int kk=0,j=jstart; j<=jend; j++) for (int i=iend-RADIUS+1; i<=iend; i++) {\n"
        "          right_buf_out[kk++]= IN(i,j);\n",
        "      MPI_Irecv(right_buf_in, RADIUS*height, MPI_DTYPE, right_nbr, 1010,\n"
        "                MPI_COMM_WORLD, &(request[1+4]));\n",
        "      MPI_Isend(right_buf_out, RADIUS*height, MPI_DTYPE, right_nbr, 990,\n"
        "              MPI_COMM_WORLD, &(request[0+4]));\n"),
    Dir("left_buf_out", "left_buf_in", "left_nbr", "RADIUS*height", "990", "1010", "2+4", "3+4",
        "if (my_IDx > 0) {",
        "      for (int kk=0,j=jstart; j<=jend; j++) for (int i=istart; i<=istart+RADIUS-1; i++) {\n"
        "          left_buf_out[kk++]= IN(i,j);\n",
        "      MPI_Irecv(left_buf_in, RADIUS*height, MPI_DTYPE, left_nbr, 990,\n"
        "                MPI_COMM_WORLD, &(request[3+4]));\n",
        "      MPI_Isend(left_buf_out, RADIUS*height, MPI_DTYPE, left_nbr, 1010,\n"
        "                MPI_COMM_WORLD, &(request[2+4]));\n"),
]


STENCIL_FINALIZE_ANCHOR = ("  bail_out(error);\n\n  if (my_ID == root) {\n"
                           "    /* flops/stencil: 2 flops (fma) for each point in the stencil,\n")


def port_stencil_delta(src):
    port_main_calls(src, STENCIL_FINALIZE_ANCHOR)
    src.replace("  MPI_Request request[8];\n",
                "  ovl_request_t request[8]; /* ovl port: was MPI_Request */\n", 1,
                "request array")
    final_waits = ""
    for d in STENCIL_DIRS:
        # The receive: where MPI_Irecv was, before the pack loop.
        src.replace(d.irecv,
                    "      /* ovl port: was MPI_Irecv; the copy into IN below reads\n"
                    "         %s as it arrives */\n"
                    "      OVL_CHECK(ovl_delta_recv(%s, %s, MPI_DTYPE, %s, %s,\n"
                    "                               NULL, &(request[%s])));\n"
                    % (d.inb, d.inb, d.count, d.nbr, d.rtag, d.ri), 1, "MPI_Irecv of " + d.inb)
        # The send begins before the pack loop, which writes the buffer in
        # order (kk++), and ends where MPI_Isend was.
        src.insert_before(d.pack,
                          "      /* ovl port: the send starts before the pack loop */\n"
                          "      OVL_CHECK(ovl_delta_send_begin(%s, %s, MPI_DTYPE, %s, %s,\n"
                          "                                     NULL, &(request[%s])));\n"
                          % (d.out, d.count, d.nbr, d.stag, d.si), "pack loop of " + d.out)
        src.replace(d.isend,
                    "      OVL_CHECK(ovl_delta_send_end(request[%s], NULL)); /* ovl port: was MPI_Isend */\n"
                    % d.si, 1, "MPI_Isend of " + d.out)
        # The waits leave the unpack: it reads the halo as it arrives.
        src.replace(d.waits,
                    "      /* ovl port: the two MPI_Waits moved after the stencil */\n", 1,
                    "MPI_Waits before unpacking " + d.inb)
        final_waits += ("    %s\n"
                        "      OVL_CHECK(ovl_wait(&(request[%s]), OVL_STATUS_IGNORE));\n"
                        "      OVL_CHECK(ovl_wait(&(request[%s]), OVL_STATUS_IGNORE));\n"
                        "    }\n" % (d.guard, d.si, d.ri))
    # Every halo is read whole by its unpack loop, so the receives have
    # completed by then; the sends may still be leaving. Their buffers are
    # written again only by the next iteration's pack loops, so the waits go
    # after the stencil and the update of IN: the latest correct place.
    src.insert_after("    for (int j=jstart; j<=jend; j++) for (int i=istart; i<=iend; i++) IN(i,j)+= 1.0;\n",
                     "\n    /* ovl port: the waits of this iteration's exchanges */\n" + final_waits,
                     "update of IN at the end of an iteration")
    return src


def port_stencil_isend(src):
    port_main_calls(src, STENCIL_FINALIZE_ANCHOR)
    src.replace("  MPI_Request request[8];\n",
                "  ovl_request_t request[8]; /* ovl port: was MPI_Request */\n", 1,
                "request array")
    for d in STENCIL_DIRS:
        src.replace(d.irecv,
                    "      OVL_CHECK(ovl_irecv(%s, %s, MPI_DTYPE, %s, %s,\n"
                    "                          &(request[%s]))); /* ovl port: was MPI_Irecv */\n"
                    % (d.inb, d.count, d.nbr, d.rtag, d.ri), 1, "MPI_Irecv of " + d.inb)
        src.replace(d.isend,
                    "      OVL_CHECK(ovl_isend(%s, %s, MPI_DTYPE, %s, %s,\n"
                    "                          &(request[%s]))); /* ovl port: was MPI_Isend */\n"
                    % (d.out, d.count, d.nbr, d.stag, d.si), 1, "MPI_Isend of " + d.out)
        src.replace(d.waits,
                    "      OVL_CHECK(ovl_wait(&(request[%s]), OVL_STATUS_IGNORE)); /* ovl port: was MPI_Wait */\n"
                    "      OVL_CHECK(ovl_wait(&(request[%s]), OVL_STATUS_IGNORE)); /* ovl port: was MPI_Wait */\n"
                    % (d.si, d.ri), 1, "MPI_Waits before unpacking " + d.inb)
    return src


# --------------------------------------------------------------------------
# MPIRMA/Transpose: the loop-nest planner
# --------------------------------------------------------------------------

# The plan of a phase: cached under this key, found again every iteration
# (a phase's partner, recv_from, is the same in every iteration).
RMA_PLAN_KEY = 'snprintf(plan_key, sizeof plan_key, "prk-transpose-%d", phase);'


def port_transpose_rma(src):
    """MPIRMA/Transpose with reads instead of puts: A's column block is an
    ovl segment, and in each phase a rank reads from recv_from the block of
    recv_from's A it needs through a plan (one per phase, created once with
    a key) and transposes each strip into B as ovl_plan_next hands it out.
    The owner adds 1.0 to the blocks the others read after a barrier that
    follows every rank's reads (PRK adds it in the pack loop, right after
    reading each element)."""
    # Teardown first: port_main_calls' anchor still holds the window's.
    port_main_calls(src, "  bail_out(error);\n\n  if (rma_win!=MPI_WIN_NULL) {\n")
    src.insert_before("  OVL_CHECK(ovl_finalize());", """  /* ovl port: the plans and A's segment go before ovl_finalize; every
     rank is past its last read (each iteration ends with ovl_barrier) */
  for (phase=1; phase<Num_procs; phase++) {
    char plan_key[32];
    ovl_plan_t plan;
    """ + RMA_PLAN_KEY + """
    OVL_CHECK(ovl_plan_create(plan_key, &plan, NULL));
    if (my_ID==0 && phase==1 && getenv("PRK_OVL_EXPLAIN")) /* what the planner chose */
      OVL_CHECK(ovl_plan_explain(plan, stdout));
    OVL_CHECK(ovl_plan_free(&plan));
  }
  OVL_CHECK(ovl_segment_free(&A_seg));
""", "ovl_finalize before bail_out")
    src.replace("""  if (rma_win!=MPI_WIN_NULL) {
#if MPI_VERSION >=3
    if (passive_target) {
      MPI_Win_unlock_all(rma_win);
    }
#endif
    PRK_Win_free(&rma_win);
  }

""", "", 1, "window teardown")

    # Declarations: no send_to (nobody sends), no Work_out (nobody packs),
    # no window; A's segment instead.
    src.replace("  int send_to, recv_from;  /* ranks with which to communicate       */\n",
                "  int recv_from;           /* ovl port: rank read from (was send_to, recv_from) */\n",
                1, "send_to, recv_from declaration")
    src.replace("  double * RESTRICT Work_out_p;/* workspace for transpose function  */\n",
                "", 1, "Work_out_p declaration")
    src.replace("  MPI_Win  rma_win = MPI_WIN_NULL;\n",
                "  ovl_segment_t A_seg;     /* ovl port: A_p's segment; replaces MPI_Win rma_win */\n",
                1, "rma_win declaration")

    # The synchronisation line of the output describes what this build does.
    src.replace("""    if (passive_target) {
#if MPI_VERSION < 3
        printf("Synchronization      = MPI_Win_(un)lock\\n");
#else
        printf("Synchronization      = MPI_Win_flush%s (bundle=%d)\\n", flush_local ? "_local" : "", flush_bundle);
#endif
    } else {
        printf("Synchronization      = MPI_Win_fence\\n");
    }
""", """    /* ovl port: PRK's sync arguments are read but unused: no puts */
    printf("Synchronization      = ovl_barrier, ovl_plan reads\\n");
""", 1, "synchronization output")

    # A: a segment, same layout, so that the others can read its blocks.
    src.replace("  A_p = (double *)prk_malloc(Colblock_size*sizeof(double));\n", """  /* ovl port: was prk_malloc; a segment, so that the other ranks read
     their blocks of it. Same layout: A(i,j) at A_p[(i+istart)+order*j] */
  {
    void *A_base;
    OVL_CHECK(ovl_segment_create(Colblock_size*sizeof(double), &A_base, &A_seg));
    A_p = (double *)A_base;
  }
""", 1, "allocation of A")

    # Work_out and the window go; Work_in is private memory the plans write.
    src.replace("""  if (Num_procs>1) {
    Work_out_p = (double *) prk_malloc(Block_size*(Num_procs-1)*sizeof(double));
    if (Work_out_p == NULL){
      printf(" Error allocating space for work_out on node %d\\n",my_ID);
      error = 1;
    }
    bail_out(error);

    PRK_Win_allocate(Block_size*(Num_procs-1)*sizeof(double), sizeof(double),
                     rma_winfo, MPI_COMM_WORLD, &Work_in_p, &rma_win);
""", """  if (Num_procs>1) {
    /* ovl port: no Work_out (nobody packs); Work_in, where phase p's plan
       puts the block it reads, is private memory (was PRK_Win_allocate) */
    Work_in_p = (double *) prk_malloc(Block_size*(Num_procs-1)*sizeof(double));
""", 1, "allocation of Work_out and of the window")
    src.replace("""#if MPI_VERSION >= 3
  if (passive_target && Num_procs>1) {
    MPI_Win_lock_all(MPI_MODE_NOCHECK,rma_win);
  }
#endif
""", """  /* ovl port: no MPI_Win_lock_all: a segment is open for passive-target
     access from its creation */
""", 1, "MPI_Win_lock_all")

    # After the local transpose: every owner's A holds this iteration's
    # values before anyone reads it.
    src.replace("""    if (!passive_target && Num_procs>1) {
      MPI_Win_fence(MPI_MODE_NOSTORE | MPI_MODE_NOPRECEDE, rma_win);
    }
""", """    /* ovl port: was MPI_Win_fence (fence mode). Before any rank reads
       another's A, every owner's A must hold this iteration's values: the
       initialisation, or the owner's A += 1.0 at the end of the previous
       iteration */
    if (Num_procs>1) {
      OVL_CHECK(ovl_barrier());
    }
""", 1, "fence after the local transpose")

    # The pack + put phase loop and its completion become reads.
    src.replace("""    for (phase=1; phase<Num_procs; phase++){
      send_to = (my_ID - phase + Num_procs)%Num_procs;

      istart = send_to*Block_order;
      if (!tiling) {
        for (i=0; i<Block_order; i++) {
          for (j=0; j<Block_order; j++) {
            Work_out(phase-1,j,i) = A(i,j);
            A(i,j) += 1.0;
          }
        }
      } else {
        for (i=0; i<Block_order; i+=Tile_order) {
          for (j=0; j<Block_order; j+=Tile_order) {
            for (it=i; it<MIN(Block_order,i+Tile_order); it++) {
              for (jt=j; jt<MIN(Block_order,j+Tile_order);jt++) {
                Work_out(phase-1,jt,it) = A(it,jt);
                A(it,jt) += 1.0;
              }
            }
          }
        }
      }

#if MPI_VERSION < 3
      if (passive_target) {
          MPI_Win_lock(MPI_LOCK_SHARED, send_to, MPI_MODE_NOCHECK, rma_win);
      }
#endif
      MPI_Put(Work_out_p+Block_size*(phase-1), Block_size, MPI_DOUBLE, send_to,
              Block_size*(phase-1), Block_size, MPI_DOUBLE, rma_win);

      if (passive_target) {
#if MPI_VERSION < 3
        MPI_Win_unlock(send_to, rma_win);
#else
        if (flush_bundle==1) {
          if (flush_local==1) {
              MPI_Win_flush_local(send_to, rma_win);
          } else {
              MPI_Win_flush(send_to, rma_win);
          }
        } else if ( (phase%flush_bundle) == 0) {
          /* Too lazy to record all targets, so let MPI do it internally (hopefully) */
          if (flush_local==1) {
              MPI_Win_flush_local_all(rma_win);
          } else {
              MPI_Win_flush_all(rma_win);
          }
        }
#endif
      }
    }  /* end of phase loop for puts  */
    if (Num_procs>1) {
      if (passive_target) {
#if MPI_VERSION >= 3
          MPI_Win_flush_all(rma_win);
#endif
          MPI_Barrier(MPI_COMM_WORLD);
      } else {
          MPI_Win_fence(MPI_MODE_NOSTORE, rma_win);
      }
    }
""", """    /* ovl port: was the phase loop in which each rank packed block send_to
       of A transposed into Work_out and MPI_Put it into send_to's Work_in,
       then the fence (or flush_all + MPI_Barrier). Instead each rank reads
       from recv_from the block it needs, untransposed: rows
       [my_ID*Block_order, +Block_order) of recv_from's Block_order columns
       of A, i.e. Block_order runs of Block_order doubles, order doubles
       apart, into Work_in(phase-1,..). One plan per phase (its partner is
       the same every iteration), described and analysed in the first
       iteration and found in the plan cache in every later one. */
    for (phase=1; phase<Num_procs; phase++) {
      char plan_key[32];
      ovl_plan_t plan;
      int found, rc;
      recv_from = (my_ID + phase)%Num_procs;
      """ + RMA_PLAN_KEY + """
      OVL_CHECK(ovl_plan_create(plan_key, &plan, &found));
      if (!found) {
        /* for jr (column of the remote block: the outer loop, strip-mined)
             for i: recv_from's A(my_ID*Block_order+i, jr)
                    -> Work_in_p[(phase-1)*Block_size + i+Block_order*jr] */
        OVL_CHECK(OVL_PLAN_READ_2D(plan, A_seg, recv_from,
                                   (size_t)my_ID*Block_order*sizeof(double), sizeof(double),
                                   Block_order, order*(long)sizeof(double),
                                   Block_order, sizeof(double),
                                   Work_in_p+(phase-1)*Block_size));
        /* PRK_OVL_PROTOCOL=1..4 forces a protocol (datatype, runs, bbox, pack) */
        ovl_param_t pm = { .field_mask = OVL_PARAM_FIELD_PROTOCOL };
        const char *force = getenv("PRK_OVL_PROTOCOL");
        pm.protocol = force ? (ovl_plan_protocol_t)atoi(force) : OVL_PLAN_AUTO;
        OVL_CHECK(ovl_plan_commit(plan, force ? &pm : NULL));
      }
      istart = recv_from*Block_order;
      OVL_CHECK(ovl_plan_begin(plan));
      OVL_PLAN_FOR_STRIPS(plan, j0, nj, rc) {
        /* columns [j0, j0+nj) of recv_from's block are in place:
           Work_in(phase-1,i,j) = recv_from's A(my_ID*Block_order+i, j),
           which is B(j,i) of B's block recv_from. The transpose PRK's
           pack loop did, with its tiling */
        if (!tiling) {
          for (i=0; i<Block_order; i++) {
            for (j=(int)j0; j<(int)(j0+nj); j++) {
              B(j,i) += Work_in(phase-1,i,j);
            }
          }
        } else {
          for (i=0; i<Block_order; i+=Tile_order) {
            for (j=(int)j0; j<(int)(j0+nj); j+=Tile_order) {
              for (it=i; it<MIN(Block_order,i+Tile_order); it++) {
                for (jt=j; jt<MIN(j0+nj,j+Tile_order); jt++) {
                  B(jt,it) += Work_in(phase-1,it,jt);
                }
              }
            }
          }
        }
      }
      OVL_CHECK(rc);
      OVL_CHECK(ovl_plan_end(plan));
    }
""", 1, "phase loop of packs and puts")

    src.replace("""    for (phase=1; phase<Num_procs; phase++) {
      recv_from = (my_ID + phase)%Num_procs;
      istart = recv_from*Block_order;
      /* scatter received block to transposed matrix; no need to tile */
      for (j=0; j<Block_order; j++) {
        for (i=0; i<Block_order; i++) {
          B(i,j) += Work_in(phase-1,i,j);
        }
      }
    } /* end of phase loop for scatters */
""", """    /* ovl port: no scatter loop: each strip went into B as it arrived */
""", 1, "phase loop of scatters")

    # The owner's A += 1.0 of the blocks the others read, after their reads.
    src.replace("""    /* for the flush case we need to make sure we have consumed Work_in
       before overwriting it in the next iteration                    */
    if (Num_procs>1 && passive_target) {
      MPI_Barrier(MPI_COMM_WORLD);
    }
""", """    /* ovl port: was MPI_Barrier (flush mode), so that Work_in was read
       before the next puts. Now every rank must have read this iteration's
       blocks of A before their owner adds 1.0 to them, which PRK's pack
       loop did right after reading each element: a barrier, then the
       owner's update of every block but its own (the local transpose
       updates that one) */
    if (Num_procs>1) {
      OVL_CHECK(ovl_barrier());
      istart = 0;
      for (j=0; j<Block_order; j++) {
        for (i=0; i<colstart; i++) A(i,j) += 1.0;
        for (i=colstart+Block_order; i<order; i++) A(i,j) += 1.0;
      }
    }
""", 1, "barrier at the end of an iteration")
    return src


def check_no_mpi_rma_left(src):
    """Every one-sided MPI call of the exchange must be ported."""
    check_calls_left(src, ("MPI_Put(", "MPI_Win_fence(", "MPI_Win_lock(", "MPI_Win_lock_all(",
                           "MPI_Win_unlock", "MPI_Win_flush", "PRK_Win_allocate(",
                           "PRK_Win_free(", "rma_win)", "rma_win,"))


def check_no_mpi_p2p_left(src):
    """Every point-to-point call of the exchange must be ported."""
    # (Transpose's SYNCHRONOUS branch keeps MPI_Sendrecv: #error'd)
    check_calls_left(src, ("MPI_Irecv(", "MPI_Isend(", "MPI_Wait("))


# --------------------------------------------------------------------------

PRK_FILES = [
    "COPYING",
    "include/par-res-kern_general.h",
    "include/par-res-kern_mpi.h",
    "common/wtime.c",
    "common/MPI_bail_out.c",
    "common/PRKVERSION",
    "MPI1/Transpose/transpose.c",
    "MPI1/Stencil/stencil.c",
    "MPIRMA/Transpose/transpose.c",
]


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: port.py PRK_SRC OUT_DIR\n")
        return 2
    prk, out = argv[1], argv[2]
    refused = out_dir_refused(out, "PRK")
    if refused:
        sys.stderr.write(refused)
        return 2
    for rel in PRK_FILES:
        if not os.path.isfile(os.path.join(prk, rel)):
            sys.stderr.write("port.py: %s is not a PRK checkout (no %s)\n" % (prk, rel))
            return 2

    # All edits first: nothing is written if one anchor is missing.
    try:
        t = os.path.join(prk, "MPI1/Transpose/transpose.c")
        s = os.path.join(prk, "MPI1/Stencil/stencil.c")
        r = os.path.join(prk, "MPIRMA/Transpose/transpose.c")
        files = {
            "transpose/plain/transpose.c": Source(t),
            "transpose/ovl/transpose.c": port_transpose(Source(t)),
            "transpose/ovl-irecv/transpose.c": port_transpose(Source(t), irecv=True),
            "stencil/plain/stencil.c": Source(s),
            "stencil/ovl/stencil.c": port_stencil_delta(Source(s)),
            "stencil/ovl-isend/stencil.c": port_stencil_isend(Source(s)),
            "transpose-rma/plain/transpose.c": Source(r),
            "transpose-rma/plan/transpose.c": port_transpose_rma(Source(r)),
        }
        for rel, src in files.items():
            if rel.startswith("transpose-rma/"):
                if "/plain/" not in rel:
                    check_no_mpi_rma_left(src)
            elif "/plain/" not in rel:
                check_no_mpi_p2p_left(src)
    except PortError as e:
        sys.stderr.write("port.py: PRK's source is not what this port expects "
                         "(PRK changed?):\n%s\n" % e)
        return 1

    os.makedirs(out, exist_ok=True)
    for rel in ["COPYING", "include/par-res-kern_general.h",
                "include/par-res-kern_mpi.h", "common/wtime.c",
                "common/MPI_bail_out.c", "common/PRKVERSION"]:
        dst = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(prk, rel), dst)
    with open(os.path.join(out, "include", "prk_ovl.h"), "w") as f:
        f.write(PRK_OVL_H)
    with open(os.path.join(out, "PRK_SOURCE"), "w") as f:
        f.write("copied from %s by ovl's bench/ports/prk/port.py\n" % os.path.realpath(prk))
        f.write("PRK's code is BSD-licensed (COPYING); the ovl edits are marked 'ovl port'\n")
    for rel, src in files.items():
        src.write(os.path.join(out, rel))
    print("port.py: wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
