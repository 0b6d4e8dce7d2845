/* etr validate FILE — structure and format of a trace (docs/FORMAT.md), streaming.
 *
 * Per node, as it streams by: key order, types, the base attrs and their order, attr names
 * and value kinds, inputs/outputs (equal lengths, each value well formed for its type).
 * The tree, as nodes stream by, in memory bounded whatever their number (validate_tree.c):
 * ids unique, parents that exist, every op reaching its thread node; what the bounds leave
 * unchecked is said in the verdict. Kept for the end: the largest traceback index, checked
 * against the tables.
 *
 * The checks live in validate_node.c (per node), validate_tree.c (the tree) and
 * validate_file.c (at the end; validate.h says why they are split so); this file is the command:
 * options, the reader, the mapping of the reader's warnings, reporting.
 *
 * Problems are errors or warnings. Warnings are what real PyTorch traces do that our
 * stricter rules do not allow (a strides array shorter than values, ...): the command exits
 * 0 with warnings unless --strict.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "validate.h"

#define CMD "validate"

static const char *const kind_names[K_COUNT] = {
#define X(k, s) s,
    KINDS(X)
#undef X
};

void vd_problem(vstate *v, sev s, kind k, uint64_t off, int64_t id, const char *fmt, ...) {
  if (v->strict) s = SEV_ERROR;
  v->count[s][k]++;
  if (s == SEV_ERROR)
    v->errors++;
  else
    v->warnings++;
  if (v->quiet || v->listed[s][k] >= v->max_per_kind) return;
  v->listed[s][k]++;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* (the message quotes the trace's own strings: shown escaped, never obeyed) */
  if (id >= 0 || id < -1)
    printf("%s: byte %" PRIu64 ": node %" PRId64 ": %s: %s\n", cli_term(v->file), off, id,
           s == SEV_ERROR ? "error" : "warning", cli_term(msg));
  else
    printf("%s: byte %" PRIu64 ": %s: %s\n", cli_term(v->file), off,
           s == SEV_ERROR ? "error" : "warning", cli_term(msg));
}

void vd_unlisted(vstate *v, sev s, kind k, uint64_t n) {
  if (v->strict) s = SEV_ERROR;
  v->count[s][k] += n;
  if (s == SEV_ERROR)
    v->errors += n;
  else
    v->warnings += n;
}

/* Reader warnings: most are quirks of real traces (warnings); the ones that break a rule
 * of docs/FORMAT.md real traces keep are errors. */
static void on_reader_warning(uint64_t off, int64_t id, const char *msg, void *user) {
  vstate *v = user;
  static const char *const error_prefixes[] = {
      ETR_READER_WARN_MISSING_ATTR, "node has no",        "attr ",
      "\"inputs\" is not",          "\"outputs\" is not", "inputs: \"values\"",
      "outputs: \"values\"",        "\"pid\" is not",     "\"start_ts\" is not",
      "\"finish_ts\" is not",       "\"schema\" is not"};
  /* inputs/outputs parts: only a strides array of the wrong length is a real-trace quirk */
  if ((!strncmp(msg, "inputs: ", 8) || !strncmp(msg, "outputs: ", 9)) &&
      (strstr(msg, "is not an array") || strstr(msg, "\"shapes\" has") ||
       strstr(msg, "\"types\" has") || strstr(msg, "is missing"))) {
    vd_problem(v, SEV_ERROR, K_READER, off, id, "%s", msg);
    return;
  }
  for (size_t i = 0; i < sizeof error_prefixes / sizeof *error_prefixes; i++)
    if (!strncmp(msg, error_prefixes[i], strlen(error_prefixes[i]))) {
      vd_problem(v, SEV_ERROR, K_READER, off, id, "%s", msg);
      return;
    }
  vd_problem(v, SEV_WARN, K_READER, off, id, "%s", msg);
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: etr validate [--strict] [--max N] [--quiet] FILE\n"
      "\n"
      "Checks a trace's structure and format (docs/FORMAT.md), streaming: key order in the file\n"
      "and in each node; the base attrs rf_id .. op_schema on every node, in order, with\n"
      "their types; integer attrs within int64; no attr named cat/stream/name/id/inputs/\n"
      "outputs/parent; inputs/outputs with values, shapes, types (and strides) of equal\n"
      "length, each value well formed for its type (tensors as [id, storage, offset,\n"
      "numel, itemsize, \"device\"]); unique ids; parents and fw_parents that exist; every op "
      "reaching\n"
      "its thread node; the process node; traceback tables.\n"
      "\n"
      "Each problem is one line on stdout, 'FILE: byte N: node ID: error|warning: what',\n"
      "then a verdict line. Warnings are what real PyTorch traces do that our rules do\n"
      "not allow (e.g. a strides array shorter than values).\n"
      "\n"
      "  --strict   warnings count as errors\n"
      "  --max N    list at most N problems of each kind (default 50; the rest are counted)\n"
      "  --quiet    print only the verdict line\n"
      "  FILE       a trace, .json or gzip- or zstd-compressed; '-' reads stdin\n"
      "\n"
      "Memory is bounded whatever the number of nodes (docs/CLI.md); a trace past the\n"
      "bounds is checked in part, and the verdict says what was not checked.\n"
      "\n"
      "exit status: 0 valid, 1 errors found (or warnings with --strict) or unreadable\n"
      "input, 2 usage error.\n");
}

int cmd_validate(int argc, char **argv) {
  vrun w;
  memset(&w, 0, sizeof w);
  w.v.max_per_kind = 50;
  static const struct option opts[] = {{"strict", no_argument, NULL, 's'},
                                       {"max", required_argument, NULL, 'm'},
                                       {"quiet", no_argument, NULL, 'q'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":sm:qh", opts, NULL)) != -1) {
    switch (c) {
      case 's':
        w.v.strict = true;
        break;
      case 'q':
        w.v.quiet = true;
        break;
      case 'm':
        if (!cli_parse_u64(CMD, "--max", optarg, &w.v.max_per_kind)) return ETR_CLI_USAGE;
        break;
      case 'h':
        usage(stdout);
        return ETR_CLI_OK;
      default:
        return cli_getopt_error(CMD, c, argv);
    }
  }
  if (optind != argc - 1)
    return cli_usage(CMD, optind >= argc ? "no input file" : "one input file only");
  const char *path = argv[optind];

  rd_options ro = ETR_READER_OPTIONS_INIT;
  ro.warn = on_reader_warning;
  ro.user = &w.v;
#ifndef ETR_VALIDATE_GENERAL /* (defined for a test: tests/cli/validate_general_main.c) */
  ro.conform = true;         /* nodes that conform come without their tree (vd_check_node) */
#endif
  cli_input in;
  w.v.file = strcmp(path, "-") ? path : "<stdin>";
  if (vd_tree_init(&w)) {
    vd_tree_free(&w);
    cli_error(CMD, "out of memory");
    return ETR_CLI_FAIL;
  }
  if (cli_open(&in, CMD, path, &ro)) {
    vd_tree_free(&w);
    return ETR_CLI_FAIL;
  }
  w.v.hdr = rd_header(in.r);
  if (cli_check_schema(CMD, path, w.v.hdr) != ETR_CLI_OK) {
    cli_close(&in);
    vd_tree_free(&w);
    return ETR_CLI_FAIL;
  }
  w.v.has_strides_schema =
      w.v.hdr->schema_major > 1 ||
      (w.v.hdr->schema_major == 1 &&
       (w.v.hdr->schema_minor > 1 || (w.v.hdr->schema_minor == 1 && w.v.hdr->schema_patch >= 1)));
  const rd_rnode *n;
  int rc;
  while ((rc = cli_next(&in, &n)) == 1) {
    w.nodes++;
    /* (a placeholder of etr's: repair's, a flight recorder's, a fatal signal's seal) */
    if (n->name && n->name_len > 16 && !strncmp(n->name, "[etr|", 5) &&
        !memcmp(n->name + n->name_len - 12, "|unfinished]", 12))
      w.placeholders++;
    vd_check_node(&w, n);
  }
  if (rc == 0) rc = cli_finish(&in);
  if (rc < 0) {
    fflush(stdout);
    cli_close(&in);
    vd_tree_free(&w);
    return ETR_CLI_FAIL;
  }
  uint64_t end = rd_offset(in.r);
  vd_check_top(&w.v, in.r, end);
  vd_check_trailer(&w, in.r, end);
  vd_tree_finish(&w, end);
  char schema[128];
  snprintf(schema, sizeof schema, "%s", cli_term(w.v.hdr->schema ? w.v.hdr->schema : "?"));
  char unchecked[256];
  bool partial = vd_tree_unchecked(&w, unchecked, sizeof unchecked);
  cli_close(&in);
  vd_tree_free(&w);

  vstate *v = &w.v;
  for (int s = 1; s >= 0; s--)
    for (int k = 0; k < K_COUNT; k++)
      if (!v->quiet && v->count[s][k] > v->listed[s][k])
        printf("%s: ... %" PRIu64 " more %s about %s\n", cli_term(v->file),
               v->count[s][k] - v->listed[s][k], s ? "errors" : "warnings", kind_names[k]);
  if (v->errors)
    printf("%s: INVALID: %" PRIu64 " errors, %" PRIu64 " warnings (%" PRIu64 " nodes)%s%s\n",
           cli_term(v->file), v->errors, v->warnings, w.nodes, partial ? "; " : "",
           partial ? unchecked : "");
  else
    printf("%s: valid: %" PRIu64 " nodes (%" PRIu64 " ops, %" PRIu64 " threads), %" PRIu64
           " warnings, schema %s%s%s\n",
           cli_term(v->file), w.nodes, w.ops, w.threads, v->warnings, schema, partial ? "; " : "",
           partial ? unchecked : "");
  if (fflush(stdout) != 0) {
    cli_error(CMD, "<stdout>: write error");
    return ETR_CLI_FAIL;
  }
  return v->errors ? ETR_CLI_FAIL : ETR_CLI_OK;
}
