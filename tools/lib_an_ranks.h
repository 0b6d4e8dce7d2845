/* Several rank traces together, for `etr summary` and `etr replay` given more than one FILE
 * (docs/CLI.md, "Several ranks").
 *
 * Each trace is one rank. Its rank number comes from the `## process_group:init ##` node
 * (the "rank" key of group "0", docs/FORMAT.md), else from the rank input of its first
 * record_param_comms in group "0", else from its position on the command line. Collectives
 * (the calls an_colls counts, lib_an_ops.h: one per call whichever records it left) are
 * matched across ranks by process group and order: the k-th collective of group G on one rank
 * is the k-th of G on every rank that uses G. A call lasts its recorded span.
 *
 * summary (recorded times): per rank the makespan (first op start to last op end), the time
 * inside collectives; per matched collective the straggler, i.e. the rank that spent the
 * least time in it (it arrived last, the others waited for it: a measure that needs no
 * clock common to the ranks), and how long the others waited.
 *
 * replay (simulation): each rank runs its recorded compute between collectives (the gaps
 * between its collectives, as recorded; without timing 1 µs per op between them, as the
 * single-trace replay's untimed_us), and a collective starts when the last member rank
 * reaches it (that rank is the straggler) and lasts alpha + bytes / beta under the network
 * model, or without one the shortest recorded duration among the ranks (the transfer without
 * the wait). Per rank: predicted makespan, time exposed in communication (waiting plus
 * transfer), of which waiting.
 *
 * Memory: the nodes are streamed; what is kept is ~80 bytes per collective per rank (and in
 * replay, while one rank is read, 8 bytes per op of it without timing). */
#ifndef ETR_TOOLS_LIB_AN_RANKS_H
#define ETR_TOOLS_LIB_AN_RANKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct an_ranks_opts {
  double alpha_us;  /* per-collective latency of the network model */
  double beta_GBps; /* bandwidth in GB/s (1e9 bytes/s); > 0 turns the model on */
  size_t limit;     /* collectives listed one by one (0 = all) */
  bool json;        /* summary: one JSON object */
  bool alpha_set;   /* --alpha-us was given (it needs --beta-gbps) */
} an_ranks_opts;

/* The network model's options, parsed the same way by summary and replay: opt 'a' for
 * --alpha-us (>= 0), 'b' for --beta-gbps (> 0). 0, or ETR_CLI_USAGE after the message. */
int an_ranks_net_option(const char *cmd, int opt, const char *arg, an_ranks_opts *o);
/* After the options: --alpha-us without --beta-gbps is a usage error (ETR_CLI_USAGE). */
int an_ranks_net_check(const char *cmd, const an_ranks_opts *o);

/* Read the n traces, then write the multi-rank summary to out_path (NULL or "-": stdout;
 * opened once every input was read; never one of the inputs: cli_open_output) / the replay report
 * to out. ETR_CLI_OK, or ETR_CLI_FAIL after printing the one-line error (unreadable input,
 * out of memory, a write error; in replay also collectives that do not match across ranks). */
int an_ranks_summary(const char *cmd, char *const *files, int n, const an_ranks_opts *o,
                     const char *out_path);
int an_ranks_replay(const char *cmd, char *const *files, int n, const an_ranks_opts *o, FILE *out);

#endif /* ETR_TOOLS_LIB_AN_RANKS_H */
