/* tools/chakra_help.c — etr chakra's --help text (cmd_chakra.c). */
#include <stdio.h>

#include "chakra_parts.h"

void chakra_help(void) {
  printf(
      "usage: etr chakra TRACE... -o DIR [--prefix NAME] [--rank N]\n"
      "\n"
      "Writes Chakra's protobuf execution trace (.et) of each trace: DIR/NAME.RANK.et\n"
      "(NAME 'rank' by default), the files ASTRA-sim's workload layer opens. The rank of a\n"
      "trace is the one its process-group node names (etr_dist_set_rank, RANK); a trace\n"
      "without one gets its position among the arguments (0, 1, ...), or --rank N when it\n"
      "is the only one.\n"
      "\n"
      "Nodes: the leaves of each thread's op tree become COMP nodes (duration_micros = the\n"
      "op's exclusive time); each collective call becomes one COMM_COLL node (comm_type,\n"
      "comm_size in bytes, pg_name) for its whole subtree, whichever records it left\n"
      "(record_param_comms, c10d::X, gloo:X / nccl:X on another thread: one counts); the\n"
      "'## process_group:init ##' node becomes a METADATA node declaring the groups.\n"
      "ctrl deps: start order per thread, backward work waits for its forward thread, and\n"
      "each collective for the previous one of its process group (on any thread);\n"
      "data deps: the last node that wrote a tensor's storage, for each later reader.\n"
      "Details: docs/FORMAT.md (Chakra output).\n"
      "\n"
      "  -o, --output DIR   output directory (created when missing)\n"
      "  --prefix NAME      file name prefix (default rank)\n"
      "  --rank N           rank of the single TRACE (overrides the trace's own)\n"
      "Prints one line per file: its path, rank and node counts.\n"
      "\n"
      "TRACE may be gzip- or zstd-compressed; '-' reads stdin (once). The files are\n"
      "written only once every TRACE is converted: after an error none is (DIR keeps\n"
      "what it held).\n"
      "Several TRACEs that record their world size must be all its ranks, of one run.\n"
      "Exit status: 0 ok, 1 bad input (two traces of one rank, a rank missing, traces of\n"
      "different runs, a trace in DIR under an output's name) or write error, 2 usage\n"
      "error.\n");
}
