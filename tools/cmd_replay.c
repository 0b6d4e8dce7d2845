/* etr replay: a discrete-event simulation of a trace — threads as streams running their
 * ops in recorded start order, data dependencies through tensors, fw_parent links — with
 * recorded or modelled op costs (model: tools/lib_an_ops.h; format: docs/CLI.md). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lib_an_ops.h"
#include "lib_an_ranks.h"

#define CMD "replay"

static void help(void) {
  printf(
      "usage: etr replay [options] FILE\n"
      "       etr replay [--alpha-us US --beta-gbps GBPS] [--path N] RANK_FILE RANK_FILE...\n"
      "\n"
      "Simulates the trace: each thread is a stream that runs its ops one at a time in\n"
      "recorded start order; an op also waits for the ops that wrote the storages of the\n"
      "tensors it reads, for its fw_parent to have started, and for its parent's own time.\n"
      "An op's cost is its recorded exclusive duration (1 us per op when the trace has no\n"
      "timing), or what --model says. Recorded idle time of a thread (no op open) is kept\n"
      "as a delay unless --no-idle. Prints the predicted makespan, the recorded wall time\n"
      "and the error, per-thread busy time, and the critical path.\n"
      "\n"
      "options:\n"
      "  --model FILE     cost model, one directive per line ('#' comments):\n"
      "                     speedup NAME FACTOR     divide NAME's cost (NAME* = prefix,\n"
      "                                             * = every op; quote names with spaces)\n"
      "                     flops_per_s RATE        mm/bmm/addmm/matmul/linear/conv cost =\n"
      "                                             FLOPs (from shapes) / RATE\n"
      "                     link LATENCY_US GBPS    collectives: latency + bytes / bandwidth,\n"
      "                                             bytes scaled by the group size\n"
      "                     untimed_us COST         cost of an op with no recorded timing\n"
      "  --no-idle        drop recorded idle time between a thread's ops\n"
      "  --path N         print the first N ops of the critical path (default 30, 0 = all)\n"
      "  --csv OUT        write every op's schedule as CSV to OUT: id, tid, name, recorded\n"
      "                   start (us from the first op, empty without timing), simulated\n"
      "                   start and end, cost\n"
      "  --alpha-us US, --beta-gbps GBPS\n"
      "                   network model: a collective takes US + bytes / GBPS GB/s (10^9\n"
      "                   bytes/s); for one FILE the same as the model's 'link US GBPS'\n"
      "  -h, --help       this text\n"
      "\n"
      "With several files (one trace per rank), simulates the ranks together: each runs its\n"
      "recorded compute between collectives, a collective (matched across ranks by process\n"
      "group and order) starts when its last rank, the straggler, reaches it and lasts what\n"
      "the network model says, or without one the shortest time a rank spent in it. Prints\n"
      "per rank the predicted makespan, the time exposed in communication and how much of it\n"
      "was waiting, and per collective (first --path N) its start, duration and straggler.\n"
      "\n"
      "FILE may be gzip- or zstd-compressed; '-' reads stdin. Exit status: 0 ok, 1 bad\n"
      "input or bad model file, 2 usage error.\n");
}

int cmd_replay(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    help();
    return ETR_CLI_OK;
  }
  const char *model_path = NULL, *csv = NULL;
  uint64_t path_limit = 30;
  bool keep_idle = true;
  an_ranks_opts ro = {0, 0, 0, false, false};
  static const struct option opts[] = {
      {"model", required_argument, NULL, 'm'},    {"path", required_argument, NULL, 'p'},
      {"csv", required_argument, NULL, 'c'},      {"no-idle", no_argument, NULL, 'n'},
      {"alpha-us", required_argument, NULL, 'a'}, {"beta-gbps", required_argument, NULL, 'b'},
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int c;
  /* getopt_long moves the files after the options, so options may follow them. */
  while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    switch (c) {
      case 'm':
        model_path = optarg;
        break;
      case 'c':
        csv = optarg;
        break;
      case 'p':
        if (!cli_parse_u64(CMD, "--path", optarg, &path_limit)) return ETR_CLI_USAGE;
        break;
      case 'n':
        keep_idle = false;
        break;
      case 'a':
      case 'b':
        if (an_ranks_net_option(CMD, c, optarg, &ro)) return ETR_CLI_USAGE;
        break;
      case 'h':
        help();
        return ETR_CLI_OK;
      default:
        return cli_getopt_error(CMD, c, argv);
    }
  }
  if (optind >= argc) return cli_usage(CMD, "no FILE given");
  if (an_ranks_net_check(CMD, &ro)) return ETR_CLI_USAGE;
  if (cli_stdin_once(CMD, (const char *const *)(argv + optind), (size_t)(argc - optind)) !=
      ETR_CLI_OK)
    return ETR_CLI_USAGE;
  if (argc - optind > 1) {
    if (model_path || csv || !keep_idle)
      return cli_usage(CMD, "--model, --csv and --no-idle take one FILE, not several ranks");
    ro.limit = (size_t)path_limit;
    int rc = an_ranks_replay(CMD, argv + optind, argc - optind, &ro, stdout);
    if (rc == ETR_CLI_OK && (fflush(stdout) != 0 || ferror(stdout))) {
      cli_error(CMD, "writing the report failed");
      rc = ETR_CLI_FAIL;
    }
    return rc;
  }
  const char *file = argv[optind];

  an_model m;
  an_model_init(&m);
  if (model_path != NULL) {
    char err[512];
    if (an_model_load(&m, model_path, err, sizeof err) != 0) {
      cli_error(CMD, "%s", err);
      an_model_free(&m);
      return ETR_CLI_FAIL;
    }
  }
  if (ro.beta_GBps > 0) { /* the command line's network model wins over the file's link */
    m.link_latency_us = ro.alpha_us;
    m.link_GBps = ro.beta_GBps;
  }
  an_optab t;
  an_optab_init(&t);
  int rc = an_optab_load(&t, CMD, file);
  if (rc != ETR_CLI_OK) {
    an_optab_free(&t);
    an_model_free(&m);
    return rc;
  }
  an_deps d = {0};
  an_sched s = {0};
  double *cost = malloc((t.n ? t.n : 1) * sizeof *cost);
  size_t *nops = calloc(t.nthreads ? t.nthreads : 1, sizeof *nops);
  an_sched_opts so = {true, keep_idle};
  if (cost == NULL || nops == NULL || !an_deps_build(&t, &d) || !an_model_costs(&m, &t, cost) ||
      !an_schedule(&t, &d, cost, &so, &s)) {
    cli_error(CMD, "%s: out of memory", file);
    rc = ETR_CLI_FAIL;
    goto done;
  }
  /* Under a network model a collective call costs the link's time once, on its counted
   * record; its other records (a gloo worker's, a c10d:: op around record_param_comms) are
   * the same call: nothing more. Calls whose group size is unknown cost the latency only. */
  size_t no_size = 0, calls = 0;
  for (size_t i = 0; i < t.n; i++) {
    nops[t.ops[i].thread]++;
    if (m.link_GBps > 0 && (t.ops[i].flags & ETR_OPF_COLL_TWIN) &&
        !(t.ops[i].flags & ETR_OPF_COLLECTIVE))
      cost[i] = 0;
    if (t.ops[i].flags & ETR_OPF_COLLECTIVE) {
      calls++;
      if (t.ops[i].pg_size == 0) no_size++;
    }
  }
  /* An extreme model (--alpha-us 1e308 --beta-gbps 1e-300, a tiny flops_per_s) overflows a
   * double: the times would be inf and their shares inf / inf, not a number. Say so (before
   * --csv writes anything) rather than print them. */
  if (!isfinite(s.makespan)) {
    cli_error(CMD,
              "%s: the model overflows: the predicted times exceed the range of a double; give "
              "a smaller latency or a larger bandwidth or FLOP/s",
              file);
    rc = ETR_CLI_FAIL;
    goto done;
  }
  if (csv != NULL) {
    FILE *cf = cli_open_output(CMD, csv);
    if (cf == NULL) {
      rc = ETR_CLI_FAIL;
      goto done;
    }
    an_out o = {.f = cf};
    an_out_cstr(&o, "id,tid,name,recorded_start_us,sim_start_us,sim_end_us,cost_us\n");
    for (size_t k = 0; k < t.n; k++) {
      uint32_t i = t.order[k];
      const an_op *op = &t.ops[i];
      an_out_fmt(&o, "%lld,%llu,\"", (long long)op->id,
                 (unsigned long long)t.threads[op->thread].tid);
      /* RFC 4180: a quote inside the quoted name is doubled (it was written as '), so a
       * CSV reader gets the name back; control characters are spaces, one row a line. */
      const char *nm = t.names.strs[op->name], *q;
      size_t left = t.names.lens[op->name];
      while ((q = memchr(nm, '"', left)) != NULL) {
        an_out_sanitized(&o, nm, (size_t)(q - nm), "", ' ');
        an_out_cstr(&o, "\"\"");
        left -= (size_t)(q - nm) + 1;
        nm = q + 1;
      }
      an_out_sanitized(&o, nm, left, "", ' ');
      an_out_cstr(&o, "\",");
      if (op->flags & ETR_OPF_TIMED) an_out_fmt(&o, "%lld", (long long)(op->ts - t.t0));
      an_out_fmt(&o, ",%.3f,%.3f,%.3f\n", s.start[i], s.end[i], cost[i]);
    }
    rc = cli_close_output(CMD, cf, csv);
    if (rc != ETR_CLI_OK) goto done;
  }

  FILE *out = stdout;
  fprintf(out, "replay of %s: %zu ops on %zu thread(s), %zu data edges, %zu fw links\n",
          strcmp(file, "-") == 0 ? "<stdin>" : file, t.n, t.nthreads, d.n_data, d.n_fw);
  if (model_path == NULL && m.link_GBps <= 0) {
    fprintf(out, "costs: recorded exclusive durations");
  } else {
    fprintf(out, "costs: model %s (%zu speed-up rule(s)",
            model_path ? model_path : "of the command line", m.n_speedups);
    if (m.flops_per_s > 0) fprintf(out, ", mm/conv at %.3g FLOP/s", m.flops_per_s);
    if (m.link_GBps > 0)
      fprintf(out, ", collectives at %.3g us + bytes / %.3g GB/s", m.link_latency_us, m.link_GBps);
    fprintf(out, "), else recorded exclusive durations");
    if (m.link_GBps > 0)
      fprintf(out, "; %zu collective call(s)%s", calls,
              calls ? "" : " (none in the trace: the link costs nothing)");
    if (m.link_GBps > 0 && no_size)
      fprintf(out, ", %zu of unknown group size (the trace names none): latency only", no_size);
  }
  if (t.n_untimed > 0)
    fprintf(out, "; %zu op(s) without timing cost %.3g us each%s", t.n_untimed, m.untimed_us,
            t.n_untimed == t.n ? " (the trace has no timing: unit costs)" : "");
  fprintf(out, "\n");
  fprintf(out, "idle time: %s\n",
          !keep_idle ? "dropped (--no-idle)"
          : t.timed  ? "recorded idle time of each thread kept"
                     : "none (no timing)");
  fprintf(out, "predicted makespan: %.1f us\n", s.makespan);
  if (t.timed) {
    double rec = (double)(t.t1 - t.t0);
    fprintf(out, "recorded wall time: %.0f us (first op start to last op end)", rec);
    if (rec > 0) fprintf(out, "; predicted/recorded %+.2f%%", 100.0 * (s.makespan - rec) / rec);
    fprintf(out, "\n");
  }
  fprintf(out, "threads:\n  %8s %8s %14s %14s %6s\n", "tid", "ops", "busy_us", "end_us", "busy%");
  for (size_t th = 0; th < t.nthreads; th++) {
    if (nops[th] == 0) continue;
    fprintf(out, "  %8llu %8zu %14.1f %14.1f %5.1f%%\n", (unsigned long long)t.threads[th].tid,
            nops[th], s.busy[th], s.thread_end[th],
            s.makespan > 0 ? 100.0 * s.busy[th] / s.makespan : 0.0);
  }
  fprintf(out,
          "critical path ('via' says what set a start: thread = the previous op of the "
          "thread ended, data = a tensor's writer ended, fw = the fw_parent started, parent = "
          "the parent's own time before it, idle = recorded idle time):\n");
  an_sched_print_path(out, &t, &s, cost, (size_t)path_limit);
  if (fflush(out) != 0 || ferror(out)) {
    cli_error(CMD, "writing the report failed");
    rc = ETR_CLI_FAIL;
  }
done:
  free(cost);
  free(nops);
  an_sched_free(&s);
  an_deps_free(&d);
  an_optab_free(&t);
  an_model_free(&m);
  return rc;
}
