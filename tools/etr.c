/* etr — the command-line tool for execution traces (docs/CLI.md).
 *
 * `etr <command> [args]`: each command lives in tools/cmd_<name>.c and is compiled in when
 * the file exists (ETR_HAVE_CMD_<NAME>); see tools/CMakeLists.txt.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#ifndef ETR_TOOL_VERSION
#define ETR_TOOL_VERSION "unknown"
#endif

typedef int (*cmd_fn)(int argc, char **argv);

#define DECL(name) int cmd_##name(int argc, char **argv);
#ifdef ETR_HAVE_CMD_VALIDATE
DECL(validate)
#endif
#ifdef ETR_HAVE_CMD_SUMMARY
DECL(summary)
#endif
#ifdef ETR_HAVE_CMD_CHROME
DECL(chrome)
#endif
#ifdef ETR_HAVE_CMD_GRAPH
DECL(graph)
#endif
#ifdef ETR_HAVE_CMD_REPLAY
DECL(replay)
#endif
#ifdef ETR_HAVE_CMD_FLAME
DECL(flame)
#endif
#ifdef ETR_HAVE_CMD_SYMBOLIZE
DECL(symbolize)
#endif
#ifdef ETR_HAVE_CMD_REPAIR
DECL(repair)
#endif
#ifdef ETR_HAVE_CMD_CONVERT
DECL(convert)
#endif
#ifdef ETR_HAVE_CMD_CHAKRA
DECL(chakra)
#endif

static const struct {
  const char *name;
  cmd_fn fn;
  const char *what;
} commands[] = {
#ifdef ETR_HAVE_CMD_VALIDATE
    {"validate", cmd_validate, "check a trace's structure and format (docs/FORMAT.md)"},
#endif
#ifdef ETR_HAVE_CMD_SUMMARY
    {"summary", cmd_summary, "ops, threads, time by op, tensors, collectives"},
#endif
#ifdef ETR_HAVE_CMD_CHROME
    {"chrome", cmd_chrome, "convert to Chrome trace events (Perfetto UI)"},
#endif
#ifdef ETR_HAVE_CMD_GRAPH
    {"graph", cmd_graph, "data dependencies through tensor ids (DOT), critical path"},
#endif
#ifdef ETR_HAVE_CMD_REPLAY
    {"replay", cmd_replay, "simulate the trace on a machine model"},
#endif
#ifdef ETR_HAVE_CMD_FLAME
    {"flame", cmd_flame, "folded stacks for flame graphs"},
#endif
#ifdef ETR_HAVE_CMD_SYMBOLIZE
    {"symbolize", cmd_symbolize, "resolve traceback frames to function, file, line"},
#endif
#ifdef ETR_HAVE_CMD_REPAIR
    {"repair", cmd_repair, "recover the complete nodes of a truncated trace"},
#endif
#ifdef ETR_HAVE_CMD_CONVERT
    {"convert", cmd_convert, "the JSON trace of a binary event log (ETR_TRACE=x.etr)"},
#endif
#ifdef ETR_HAVE_CMD_CHAKRA
    {"chakra", cmd_chakra, "Chakra protobuf execution traces (.et) for ASTRA-sim, one per rank"},
#endif
    {NULL, NULL, NULL}};

static void usage(FILE *f) {
  fprintf(f,
          "usage: etr <command> [options] FILE\n"
          "       etr --help | --version\n"
          "\n"
          "Reads execution traces (PyTorch / Chakra format, ours and real ones). FILE may be\n"
          "gzip- or zstd-compressed; '-' reads stdin. 'etr <command> --help' describes a command.\n"
          "\n"
          "commands:\n");
  for (size_t i = 0; commands[i].name; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].what);
  fprintf(f,
          "\n"
          "exit status: 0 ok, 1 bad input or problems found, 2 usage error.\n");
}

/* The reader's variables, said once when they are not understood (the reader, a library,
 * never prints: it takes its defaults). */
static void check_reader_env(void) {
  const char *lim = getenv("ETR_READER_LIMIT_MB");
  if (lim) {
    char *e = NULL;
    unsigned long long mb = strtoull(lim, &e, 10);
    if (!*lim || *e || lim[0] == '-' || mb == 0 || mb > (1ull << 20))
      fprintf(stderr, "etr: ETR_READER_LIMIT_MB=%s ignored (1..1048576 MiB); using 16\n",
              cli_term(lim));
  }
  const char *be = getenv("ETR_READER_BACKEND");
  if (be && *be && strcmp(be, "yajl") != 0 && strcmp(be, "hand") != 0)
    fprintf(stderr, "etr: ETR_READER_BACKEND=%s unknown (yajl); using the built-in reader\n",
            cli_term(be));
}

/* What went to stdout must have reached it: a report written to a full disk or /dev/full
 * is an error, not a success. */
static int stdout_written(int rc) {
  errno = 0;
  if ((fflush(stdout) == 0 && !ferror(stdout)) || rc != ETR_CLI_OK)
    return rc; /* (a failed
command has said why already) */
  fprintf(stderr, "etr: <stdout>: write error: %s\n", errno ? strerror(errno) : "I/O error");
  return ETR_CLI_FAIL;
}

static int run(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return ETR_CLI_USAGE;
  }
  const char *c = argv[1];
  if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
    usage(stdout);
    return ETR_CLI_OK;
  }
  if (!strcmp(c, "--version") || !strcmp(c, "-V")) {
    printf("etr %s\n", ETR_TOOL_VERSION);
    return ETR_CLI_OK;
  }
  check_reader_env();
  /* A file size limit (ulimit -f) reached: a write error (EFBIG) that the command reports,
   * its output left as it was, rather than SIGXFSZ's default, which kills it with its
   * temporary file beside the output. (A handler the caller chose, or SIG_IGN, stays.) */
  struct sigaction xfsz;
  if (sigaction(SIGXFSZ, NULL, &xfsz) == 0 && !(xfsz.sa_flags & SA_SIGINFO) &&
      xfsz.sa_handler == SIG_DFL)
    signal(SIGXFSZ, SIG_IGN);
  for (size_t i = 0; commands[i].name; i++)
    if (!strcmp(c, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "etr: unknown command '%s' (see 'etr --help')\n", c);
  return ETR_CLI_USAGE;
}

int main(int argc, char **argv) { return stdout_written(run(argc, argv)); }
