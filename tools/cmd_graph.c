/* etr graph: the data-dependency graph through tensor ids, DOT output, and the critical
 * path by recorded durations (model and memory: tools/lib_an_ops.h; docs/CLI.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lib_an_ops.h"

#define CMD "graph"

static void help(void) {
  printf(
      "usage: etr graph [options] FILE\n"
      "\n"
      "The data-dependency graph of a trace: an edge from the op that last wrote a storage\n"
      "(a tensor among its outputs) to each later op that reads a tensor on that storage,\n"
      "plus fw_parent links (forward op -> backward op). Every op node is a graph node.\n"
      "Prints its size and the critical path: the longest chain of dependencies weighted by\n"
      "recorded exclusive durations (1 per op when the trace has no timing), with unlimited\n"
      "threads (`etr replay` gives the path with each thread running its ops in order).\n"
      "\n"
      "options:\n"
      "  -o, --dot OUT    also write the graph as Graphviz DOT to OUT ('-' = stdout; the\n"
      "                   summary then goes to stderr); critical-path nodes are red\n"
      "  --max-nodes N    refuse --dot above N ops (default 2000)\n"
      "  --path N         print the first N ops of the critical path (default 30, 0 = all)\n"
      "  -h, --help       this text\n"
      "\n"
      "FILE may be gzip- or zstd-compressed; '-' reads stdin. Exit status: 0 ok, 1 bad\n"
      "input, 2 usage error.\n");
}

/* The inside of a DOT string: quotes and backslashes escaped, control bytes and invalid
 * UTF-8 replaced. */
static void dot_str(an_out *o, const char *s, size_t len) {
  size_t run = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '"' || s[i] == '\\') {
      an_out_sanitized(o, s + i - run, run, "", ' ');
      run = 0;
      an_out_raw(o, "\\", 1);
      an_out_raw(o, s + i, 1);
    } else {
      run++;
    }
  }
  an_out_sanitized(o, s + len - run, run, "", ' ');
}

static void write_dot(FILE *f, const an_optab *t, const an_deps *d, const an_sched *s) {
  an_out o = {.f = f};
  bool *crit = calloc(t->n ? t->n : 1, sizeof *crit);
  an_path_step *path = NULL;
  size_t np = an_sched_path(s, t, &path);
  for (size_t k = 0; crit && k < np; k++) crit[path[k].op] = true;
  free(path);
  an_out_cstr(&o, "digraph etr {\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n");
  for (size_t th = 0; th < t->nthreads; th++) {
    an_out_fmt(&o, "  subgraph cluster_t%zu {\n    label=\"thread %llu\";\n", th,
               (unsigned long long)t->threads[th].tid);
    for (size_t i = 0; i < t->n; i++) {
      if (t->ops[i].thread != th) continue;
      an_out_fmt(&o, "    n%zu [label=\"", i);
      dot_str(&o, t->names.strs[t->ops[i].name], t->names.lens[t->ops[i].name]);
      an_out_fmt(&o, "\\n#%lld\"%s];\n", (long long)t->ops[i].id,
                 crit && crit[i] ? ", color=red, penwidth=2" : "");
    }
    an_out_cstr(&o, "  }\n");
  }
  for (size_t e = 0; e < d->n; e++) {
    const an_dep *ed = &d->edges[e];
    if (ed->kind == ETR_DEP_FW) {
      an_out_fmt(&o, "  n%u -> n%u [style=dashed, label=\"fw\"];\n", ed->from, ed->to);
    } else {
      bool c = crit && crit[ed->from] && crit[ed->to] && s->pred[ed->to] == ed->from;
      an_out_fmt(&o, "  n%u -> n%u [label=\"t%llu\"%s];\n", ed->from, ed->to,
                 (unsigned long long)ed->tensor, c ? ", color=red" : "");
    }
  }
  an_out_cstr(&o, "}\n");
  free(crit);
}

int cmd_graph(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    help();
    return ETR_CLI_OK;
  }
  const char *file = NULL, *dot = NULL;
  uint64_t max_nodes = 2000, path_limit = 30;
  static const struct option opts[] = {{"dot", required_argument, NULL, 'd'},
                                       {"max-nodes", required_argument, NULL, 'm'},
                                       {"path", required_argument, NULL, 'p'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1;) {
    if (c == 'd' || c == 'o') {
      dot = optarg;
    } else if (c == 'm' || c == 'p') {
      if (!cli_parse_u64(CMD, c == 'p' ? "--path" : "--max-nodes", optarg,
                         c == 'p' ? &path_limit : &max_nodes))
        return ETR_CLI_USAGE;
    } else {
      return cli_getopt_error(CMD, c, argv);
    }
  }
  if (cli_one_file(CMD, argc, argv, &file)) return ETR_CLI_USAGE;

  an_optab t;
  an_optab_init(&t);
  int rc = an_optab_load(&t, CMD, file);
  if (rc != ETR_CLI_OK) {
    an_optab_free(&t);
    return rc;
  }
  if (dot != NULL && t.n > max_nodes) {
    cli_error(CMD,
              "%s: %zu ops is too many for --dot (limit %llu; raise it with "
              "--max-nodes)",
              file, t.n, (unsigned long long)max_nodes);
    an_optab_free(&t);
    return ETR_CLI_FAIL;
  }
  an_deps d;
  an_sched s;
  double *cost = malloc((t.n ? t.n : 1) * sizeof *cost);
  an_model m;
  an_model_init(&m);
  an_sched_opts so = {false, false};
  if (cost == NULL || !an_deps_build(&t, &d)) {
    cli_error(CMD, "%s: out of memory", file);
    free(cost);
    an_optab_free(&t);
    return ETR_CLI_FAIL;
  }
  if (!an_model_costs(&m, &t, cost) || !an_schedule(&t, &d, cost, &so, &s)) {
    cli_error(CMD, "%s: out of memory", file);
    free(cost);
    an_deps_free(&d);
    an_optab_free(&t);
    return ETR_CLI_FAIL;
  }

  rc = ETR_CLI_OK;
  FILE *out = stdout;
  if (dot != NULL) {
    FILE *df = cli_open_output(CMD, dot);
    if (df == NULL) {
      rc = ETR_CLI_FAIL;
    } else {
      write_dot(df, &t, &d, &s);
      rc = cli_close_output(CMD, df, dot);
      if (strcmp(dot, "-") == 0) out = stderr;
    }
  }
  if (rc == ETR_CLI_OK) {
    size_t nodeps = 0;
    for (size_t i = 0; i < t.n; i++) nodeps += d.count[i] == 0;
    fprintf(out, "graph of %s\n", strcmp(file, "-") == 0 ? "<stdin>" : file);
    fprintf(out, "  ops: %zu on %zu thread(s); tensor references: %zu\n", t.n, t.nthreads, t.ntref);
    fprintf(out,
            "  edges: %zu data (tensor read after a write to its storage), %zu fw "
            "(fw_parent -> backward op)\n",
            d.n_data, d.n_fw);
    if (d.n_fw_missing)
      fprintf(out,
              "  note: %zu fw_parent link(s) name an op that is not in the trace (or "
              "starts later): ignored\n",
              d.n_fw_missing);
    if (t.n_dup_ids)
      fprintf(out, "  note: %zu op id(s) appear more than once: links use the last one\n",
              t.n_dup_ids);
    fprintf(out, "  ops without incoming edges: %zu\n", nodeps);
    if (t.timed) {
      fprintf(out,
              "critical path (dependencies only, unlimited threads, recorded exclusive "
              "durations; recorded wall time %lld us):\n",
              (long long)(t.t1 - t.t0));
    } else if (t.n_untimed == t.n) {
      fprintf(out,
              "critical path (dependencies only, unlimited threads; the trace has no timing, "
              "so every op counts 1 unit):\n");
    } else { /* each op by its own timing, as replay costs them */
      fprintf(out,
              "critical path (dependencies only, unlimited threads; %zu of %zu ops have no "
              "timing and count 1 us each, the others their recorded exclusive durations):\n",
              t.n_untimed, t.n);
    }
    an_sched_print_path(out, &t, &s, cost, (size_t)path_limit);
    if (fflush(out) != 0 || ferror(out)) {
      cli_error(CMD, "writing the report failed");
      rc = ETR_CLI_FAIL;
    }
  }
  free(cost);
  an_sched_free(&s);
  an_deps_free(&d);
  an_model_free(&m);
  an_optab_free(&t);
  return rc;
}
