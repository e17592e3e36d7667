#!/usr/bin/env python3
"""Port the Mantevo HPCCG mini-app to ovl, out of the tree.

    port.py HPCCG_SRC OUT_DIR

HPCCG_SRC is a checkout of https://github.com/Mantevo/HPCCG (BSD 3-clause
licence); OUT_DIR must lie outside the ovl repository: HPCCG's code is copied
there and edited there, never into ovl's tree. The script writes

    OUT_DIR/LICENSE          HPCCG's licence (it covers the copied code)
    OUT_DIR/HPCCG_SOURCE     where the copy came from
    OUT_DIR/plain/           HPCCG's sources, unchanged
    OUT_DIR/ovl/             the same, with main.cpp, HPCCG.cpp,
                             exchange_externals.cpp and exchange_externals.hpp
                             ported to ovl (edits marked "ovl port")
    OUT_DIR/ovl-aligned/     ovl/, and HPCCG.cpp allocates p with ovl_alloc
                             (pages of its own): not HPCCG's layout, a
                             comparison that shows what the layout costs

Every edit is an exact textual replacement of a piece of HPCCG's source that
must occur exactly once: if HPCCG changes, the script stops with the anchor
that was not found (and writes nothing). HPCCG's allocation is kept as it
is (except in ovl-aligned): the vector p whose external entries are received is HPCCG.cpp's
new double[ncol] (locals first, then the externals of each neighbour, one
after the other), the send buffer make_local_matrix.cpp's
new double[total_to_be_sent]. bench/ports/README.md describes every edit.
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from porting import PortError, Source, check_calls_left, out_dir_refused  # noqa: E402


# --------------------------------------------------------------------------
# main.cpp: start and stop ovl.
# --------------------------------------------------------------------------

def port_main(src):
    src.insert_after(
        '#include "make_local_matrix.hpp" // Also include this function\n',
        "#include <ovl.h> // ovl port\n",
        "include of make_local_matrix.hpp under USING_MPI")
    src.replace(
        "  MPI_Init(&argc, &argv);\n",
        "  // ovl port: MPI_Init became MPI_Init_thread(MPI_THREAD_MULTIPLE), so\n"
        "  // that OVL_PROGRESS=thread works (ovl_init refuses the progress thread\n"
        "  // below MPI_THREAD_MULTIPLE), followed by ovl_init. errors =\n"
        "  // OVL_ERRORS_FATAL: a failing ovl call prints the call and the reason\n"
        "  // and aborts the job (as MPI_ERRORS_ARE_FATAL does for MPI), so no ovl\n"
        "  // return code needs checking in this port.\n"
        "  int ovl_port_provided;\n"
        "  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &ovl_port_provided);\n"
        "  ovl_config_t ovl_port_cfg = ovl_config_t();\n"
        "  ovl_port_cfg.field_mask = OVL_CONFIG_FIELD_ERRORS;\n"
        "  ovl_port_cfg.report.errors = OVL_ERRORS_FATAL;\n"
        "  ovl_init(MPI_COMM_WORLD, &ovl_port_cfg);\n",
        1, "MPI_Init")
    src.replace(
        "#ifdef USING_MPI\n  MPI_Finalize();\n#endif\n",
        "#ifdef USING_MPI\n"
        "  ovl_finalize(); // ovl port: ovl stops before MPI does\n"
        "  MPI_Finalize();\n"
        "#endif\n",
        1, "MPI_Finalize")
    return src


# --------------------------------------------------------------------------
# exchange_externals.hpp: declare the second half of the exchange.
# --------------------------------------------------------------------------

def port_exchange_hpp(src):
    src.insert_after(
        "void exchange_externals(HPC_Sparse_Matrix *A, const double *x);\n",
        "// ovl port: exchange_externals starts the exchange and returns with the\n"
        "// receives and sends in flight; the external entries of x may be read\n"
        "// at once (a read of a part not yet arrived waits for it).\n"
        "// exchange_externals_finish releases the requests; call it after the\n"
        "// last read of x's external part (after HPC_sparsemv) and before x or\n"
        "// the send buffer is written again.\n"
        "void exchange_externals_finish(HPC_Sparse_Matrix *A);\n",
        "declaration of exchange_externals")
    return src


# --------------------------------------------------------------------------
# exchange_externals.cpp: the halo exchange.
# --------------------------------------------------------------------------

EXCHANGE_STATE = r"""
// ovl port: the requests of the exchange in flight. They outlive
// exchange_externals (HPCCG allocated MPI_Requests per call and waited for
// them before returning): they are released by exchange_externals_finish,
// which HPCCG.cpp calls after the matrix-vector product that reads the
// received entries. At most max_num_neighbors neighbours
// (HPC_Sparse_Matrix.hpp; make_local_matrix.cpp stops beyond that).
static ovl_request_t ovl_port_recv_req[max_num_neighbors];
static ovl_request_t ovl_port_send_req[max_num_neighbors];
static int ovl_port_pending = 0; // neighbours of the exchange in flight
"""

EXCHANGE_FINISH = r"""
// ovl port: the second half of exchange_externals (where HPCCG's MPI_Wait
// loop was). By the time HPCCG.cpp calls it, HPC_sparsemv has read every
// external entry, so the receives have arrived and their waits only release
// the requests; the sends' waits make sure that send_buffer may be packed
// again by the next exchange (a send, like MPI_Isend, does not allow the
// buffer to be modified before completion). ovl_waitall before the next
// exchange writes p (waxpby) or send_buffer (the pack loop).
void exchange_externals_finish(HPC_Sparse_Matrix * A)
{
  (void) A;
  ovl_waitall(ovl_port_pending, ovl_port_recv_req, OVL_STATUS_IGNORE);
  ovl_waitall(ovl_port_pending, ovl_port_send_req, OVL_STATUS_IGNORE);
  ovl_port_pending = 0;
}
"""


def port_exchange_cpp(src):
    src.insert_after('#include "exchange_externals.hpp"\n',
                     "#include <ovl.h> // ovl port\n",
                     "include of exchange_externals.hpp")
    src.insert_after("#undef DEBUG\n", EXCHANGE_STATE, "#undef DEBUG")
    src.replace(
        "  MPI_Request * request = new MPI_Request[num_neighbors];\n",
        "  // ovl port: was MPI_Request * request = new MPI_Request[num_neighbors];\n"
        "  // the requests are ovl_port_recv_req/ovl_port_send_req (above). If the\n"
        "  // previous exchange was not finished, finish it first: its send may\n"
        "  // still be reading send_buffer, which the pack loop below rewrites.\n"
        "  if (ovl_port_pending) exchange_externals_finish(A);\n",
        1, "request allocation")
    src.replace(
        "      MPI_Irecv(x_external, n_recv, MPI_DOUBLE, neighbors[i], MPI_MY_TAG, \n"
        "\t\tMPI_COMM_WORLD, request+i);\n",
        "      // ovl port: was MPI_Irecv. A delta receive: the program may read\n"
        "      // x_external at once; under a fault monitor a read of a page that\n"
        "      // has not arrived waits for it, so HPC_sparsemv overlaps the\n"
        "      // arrival (rows that need no external entry do not wait at all).\n"
        "      ovl_delta_recv(x_external, n_recv, MPI_DOUBLE, neighbors[i], MPI_MY_TAG,\n"
        "                     NULL, ovl_port_recv_req + i);\n",
        1, "MPI_Irecv of x_external")
    src.replace(
        "  for (i=0; i<total_to_be_sent; i++) send_buffer[i] = x[elements_to_send[i]];\n",
        "  // ovl port: the pack loop is unchanged and not made a delta send. It\n"
        "  // is a gather of total_to_be_sent doubles (one nx*ny plane per\n"
        "  // neighbour: 32 KiB each at 64x64), a few microseconds of copying,\n"
        "  // while a watched delta send would take a page fault (5-40 us) per\n"
        "  // page written: the overlap it buys is smaller than what it costs.\n"
        "  // And send_buffer is one new[] block holding every neighbour's part\n"
        "  // back to back, so two delta sends would share the page where one\n"
        "  // part ends and the next begins (and the heap data around the block\n"
        "  // its edge pages). So the sends below begin after the loop.\n"
        "  for (i=0; i<total_to_be_sent; i++) send_buffer[i] = x[elements_to_send[i]];\n",
        1, "pack loop")
    src.replace(
        "      MPI_Send(send_buffer, n_send, MPI_DOUBLE, neighbors[i], MPI_MY_TAG, \n"
        "\t       MPI_COMM_WORLD);\n",
        "      // ovl port: was the blocking MPI_Send; a delta send of the packed\n"
        "      // part, all of it produced at once (the explicit monitor: nothing\n"
        "      // is watched), completed in exchange_externals_finish. Not\n"
        "      // ovl_isend: a plane above MPI's eager limit goes by rendezvous,\n"
        "      // which without a progress thread moves only at this rank's next\n"
        "      // MPI call, after its whole HPC_sparsemv, while the neighbour\n"
        "      // waits for it; a delta send's pieces stay within the eager limit\n"
        "      // and leave at once.\n"
        "      ovl_param_t ovl_port_explicit = { OVL_PARAM_FIELD_MONITOR, OVL_MONITOR_EXPLICIT };\n"
        "      ovl_delta_send_begin(send_buffer, n_send, MPI_DOUBLE, neighbors[i],\n"
        "                           MPI_MY_TAG, &ovl_port_explicit,\n"
        "                           ovl_port_send_req + i);\n"
        "      ovl_delta_produced(ovl_port_send_req[i], 0,\n"
        "                         (size_t)n_send * sizeof(double));\n"
        "      ovl_delta_send_end(ovl_port_send_req[i], NULL);\n",
        1, "MPI_Send of send_buffer")
    src.replace(
        "  MPI_Status status;\n"
        "  for (i = 0; i < num_neighbors; i++)\n"
        "    {\n"
        "      if ( MPI_Wait(request+i, &status) )\n"
        "\t{\n"
        "\t  cerr << \"MPI_Wait error\\n\"<<endl;\n"
        "\t  exit(-1);\n"
        "\t}\n"
        "    }\n"
        "\n"
        "  delete [] request;\n",
        "  // ovl port: the MPI_Wait loop (and delete [] request) moved to\n"
        "  // exchange_externals_finish, which HPCCG.cpp calls after HPC_sparsemv:\n"
        "  // the product reads the external entries as they arrive. Errors abort\n"
        "  // (OVL_ERRORS_FATAL in main.cpp), as the MPI_Wait check did.\n"
        "  ovl_port_pending = num_neighbors;\n",
        1, "MPI_Wait loop")
    src.replace("  return;\n}\n#endif // USING_MPI\n",
                "  return;\n}\n" + EXCHANGE_FINISH + "#endif // USING_MPI\n",
                1, "end of exchange_externals")
    return src


# --------------------------------------------------------------------------
# HPCCG.cpp: finish each exchange after the product that reads it.
# --------------------------------------------------------------------------

FINISH_CALL = ("#ifdef USING_MPI\n"
               "%s// ovl port: the exchange's waits, moved from the end of exchange_externals\n"
               "%s// to after the product (the last reader of p's external part), before\n"
               "%s// waxpby writes p again. Timed as exchange time (t5), as they were.\n"
               "%sTICK(); exchange_externals_finish(A); TOCK(t5);\n"
               "#endif\n")


def port_hpccg(src, aligned=False):
    if aligned:
        # Not HPCCG's layout: the comparison variant ovl-aligned (README).
        src.insert_after("#include \"HPCCG.hpp\"\n", "#include <ovl.h> // ovl port (aligned)\n",
                         "include of HPCCG.hpp")
        src.replace(
            "  double * p = new double [ncol]; // In parallel case, A is rectangular\n",
            "  // ovl port, aligned variant: was double * p = new double [ncol];\n"
            "  // ovl_alloc gives p pages of its own (page-aligned, whole pages), so\n"
            "  // the external part p+nrow starts on a page boundary when nrow*8 is\n"
            "  // a multiple of the page size (nx*ny*nz a multiple of 512 with 4 KiB\n"
            "  // pages): then no local entry of p shares a page with the pending\n"
            "  // receives, and reading them never traps. Only the layout changes.\n"
            "  double * p = 0;\n"
            "  ovl_alloc((size_t) ncol * sizeof(double), &p);\n",
            1, "allocation of p")
        src.replace("  delete [] p;\n",
                    "  ovl_free(p); // ovl port, aligned variant: was delete [] p;\n",
                    1, "delete of p")
    ind = "  "
    src.insert_after("  TICK(); HPC_sparsemv(A, p, Ap); TOCK(t3);\n",
                     FINISH_CALL % (ind, ind, ind, ind),
                     "HPC_sparsemv before the loop")
    ind = "      "
    src.insert_after("      TICK(); HPC_sparsemv(A, p, Ap); TOCK(t3); // 2*nnz ops\n",
                     FINISH_CALL % (ind, ind, ind, ind),
                     "HPC_sparsemv in the loop")
    if src.text.count("exchange_externals(A,p)") != 2:
        raise PortError("%s: expected exactly two exchange_externals calls" % src.path)
    return src


def check_no_mpi_p2p_left(src):
    """Every point-to-point call of the exchange must be ported."""
    check_calls_left(src, ("MPI_Irecv(", "MPI_Isend(", "MPI_Send(", "MPI_Wait("))


# --------------------------------------------------------------------------

# HPCCG's Makefile: TEST_CPP, and the headers they include.
HPCCG_SOURCES = [
    "main.cpp", "generate_matrix.cpp", "read_HPC_row.cpp", "compute_residual.cpp",
    "mytimer.cpp", "dump_matlab_matrix.cpp", "HPC_sparsemv.cpp", "HPCCG.cpp",
    "waxpby.cpp", "ddot.cpp", "make_local_matrix.cpp", "exchange_externals.cpp",
    "YAML_Element.cpp", "YAML_Doc.cpp",
]
HPCCG_HEADERS = [
    "generate_matrix.hpp", "read_HPC_row.hpp", "compute_residual.hpp", "mytimer.hpp",
    "dump_matlab_matrix.hpp", "HPC_sparsemv.hpp", "HPCCG.hpp", "waxpby.hpp",
    "ddot.hpp", "make_local_matrix.hpp", "exchange_externals.hpp", "HPC_Sparse_Matrix.hpp",
    "YAML_Element.hpp", "YAML_Doc.hpp",
]
PORTED = {
    "main.cpp": port_main,
    "HPCCG.cpp": port_hpccg,
    "exchange_externals.cpp": port_exchange_cpp,
    "exchange_externals.hpp": port_exchange_hpp,
}


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: port.py HPCCG_SRC OUT_DIR\n")
        return 2
    src_dir, out = argv[1], argv[2]
    refused = out_dir_refused(out, "HPCCG")
    if refused:
        sys.stderr.write(refused)
        return 2
    for rel in ["LICENSE"] + HPCCG_SOURCES + HPCCG_HEADERS:
        if not os.path.isfile(os.path.join(src_dir, rel)):
            sys.stderr.write("port.py: %s is not an HPCCG checkout (no %s)\n" % (src_dir, rel))
            return 2

    # All edits first: nothing is written if one anchor is missing.
    try:
        ported = {}
        for rel, fn in PORTED.items():
            ported[rel] = fn(Source(os.path.join(src_dir, rel)))
        check_no_mpi_p2p_left(ported["exchange_externals.cpp"])
        # ovl-aligned: the ovl port, and p from ovl_alloc (HPCCG.cpp only)
        aligned = dict(ported)
        aligned["HPCCG.cpp"] = port_hpccg(Source(os.path.join(src_dir, "HPCCG.cpp")),
                                          aligned=True)
    except PortError as e:
        sys.stderr.write("port.py: HPCCG's source is not what this port expects "
                         "(HPCCG changed?):\n%s\n" % e)
        return 1

    os.makedirs(out, exist_ok=True)
    shutil.copyfile(os.path.join(src_dir, "LICENSE"), os.path.join(out, "LICENSE"))
    for variant, edited in (("plain", {}), ("ovl", ported), ("ovl-aligned", aligned)):
        d = os.path.join(out, variant)
        os.makedirs(d, exist_ok=True)
        for rel in HPCCG_SOURCES + HPCCG_HEADERS:
            if rel in edited:
                edited[rel].write(os.path.join(d, rel))
            else:
                shutil.copyfile(os.path.join(src_dir, rel), os.path.join(d, rel))
    with open(os.path.join(out, "HPCCG_SOURCE"), "w") as f:
        f.write("copied from %s by ovl's bench/ports/hpccg/port.py\n" % os.path.realpath(src_dir))
        f.write("HPCCG's code is BSD-licensed (LICENSE); the ovl edits are marked 'ovl port'\n")
    print("port.py: wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
