/* etr convert: the JSON execution trace of a binary event log (ETR_TRACE=x.etr; the format
 * is in docs/FORMAT.md, the code in src/observer/binlog.c).
 *
 * The log is read through the trace reader's byte source (json/reader.h), so a gzip- or
 * zstd-compressed log is read as it is. The JSON goes to a temporary file beside OUT first,
 * compressed already when OUT ends in .gz (so it takes about the output's room, not the
 * JSON's). A complete log gives a complete trace, moved (or copied) to OUT. A log cut short
 * (kill -9, power loss, full disk) gives the nodes of its complete events, and the traceback
 * tables its TABLES records kept, with a footer saying it was cut ("log_cut"); `etr repair`
 * then adds placeholders for the ops that were open and the process node (into a second
 * temporary file, compressed the same way). So does a log finalized at a fatal signal, whose
 * open ops were never written. When that repair fails, OUT gets the events as converted and
 * the command says so (exit 1).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "cli.h"
#include "json/reader.h"
#include "observer/binlog.h"
#include "repair.h"

#define CMD "convert"

#define GZIP_LEVEL 6

static void usage(FILE *f) {
  fprintf(f,
          "usage: etr convert FILE.etr [-o OUT]\n"
          "\n"
          "Makes the JSON execution trace of a binary event log, the file a program writes\n"
          "with ETR_TRACE=x.etr (docs/FORMAT.md). The trace is the one the program would\n"
          "have written with ETR_TRACE=x.json: the same nodes, ids and footer. FILE may be\n"
          "gzip- or zstd-compressed, or '-' (stdin).\n"
          "\n"
          "  -o, --output OUT  the JSON trace (default: FILE less a .gz or .zst, with .etr\n"
          "                    replaced by .json: run.etr.gz gives run.json); OUT ending\n"
          "                    in .gz is gzip-compressed; '-' is stdout; required when\n"
          "                    FILE is '-'\n"
          "  -h, --help        this text\n"
          "\n"
          "A log cut short (kill -9, power loss, a full disk) loses nothing that was\n"
          "written whole: every complete event becomes its node, its tracebacks keep their\n"
          "frames (the log writes the tables as it goes), the footer says \"log_cut\": 1,\n"
          "and 'etr repair' adds a placeholder for each op still open and the process node;\n"
          "the command says so. A log of another format version or event layout is refused.\n"
          "\n"
          "exit status: 0 converted (also a cut log, completed), 1 not a binary log, an I/O\n"
          "error, memory exhausted, a cut log that could not be completed (OUT then holds\n"
          "its events as converted), or bytes after the log's trailer (another log appended:\n"
          "OUT holds the first one's trace), 2 usage error.\n");
}

/* OUT by default: FILE less its ".etr", plus ".json". A log compressed to copy it off a
 * machine (run.etr.gz) names the same trace as the log (run.json, not run.etr.gz.json); the
 * trace is written plain, so the compression suffix goes too. */
static char *default_output(const char *in) {
  size_t n = strlen(in);
  if (n > 3 && strncasecmp(in + n - 3, ".gz", 3) == 0) /* (endings in any case) */
    n -= 3;
  else if (n > 4 && strncasecmp(in + n - 4, ".zst", 4) == 0)
    n -= 4;
  if (n > 4 && strncasecmp(in + n - 4, ".etr", 4) == 0) n -= 4;
  char *out = malloc(n + 6);
  if (out) {
    memcpy(out, in, n);
    memcpy(out + n, ".json", 6);
  }
  return out;
}

/* A temporary file in dir (NULL: $TMPDIR or /tmp); its fd, and its path in buf. */
static int temp_in(const char *out, char *buf, size_t cap) {
  const char *slash = out ? strrchr(out, '/') : NULL;
  const char *tmpdir = getenv("TMPDIR");
  if (!tmpdir || !*tmpdir) tmpdir = "/tmp";
  int w = out ? (slash ? snprintf(buf, cap, "%.*s/.etr-convert-XXXXXX", (int)(slash - out), out)
                       : snprintf(buf, cap, ".etr-convert-XXXXXX"))
              : snprintf(buf, cap, "%s/etr-convert-XXXXXX", tmpdir);
  if (w < 0 || (size_t)w >= cap) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int fd = cli_mkstemp(buf, out);
  if (fd >= 0) cli_temp_watch(buf); /* (removed if we are interrupted) */
  return fd;
}

/* Copy src to the open fd out; 0 or an errno. */
static int copy_to(const char *src, int out) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno;
  static char buf[1 << 16];
  int err = 0;
  for (;;) {
    ssize_t k = read(in, buf, sizeof buf);
    if (k == 0) break;
    if (k < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    for (ssize_t done = 0; done < k;) {
      ssize_t w = write(out, buf + done, (size_t)(k - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err = w < 0 ? errno : EIO;
        break;
      }
      done += w;
    }
    if (err) break;
  }
  close(in);
  return err;
}

/* The finished trace at src (already compressed when out wants it) goes to out: renamed over
 * it when it is (or will be) a regular file in the same place, else copied, into a
 * temporary file beside a regular out that is then renamed over it (out keeps what it held
 * until then). 0 or an errno. */
static int deliver(const char *src, const char *out) {
  if (!strcmp(out, "-")) return copy_to(src, STDOUT_FILENO);
  struct stat st;
  bool regular = stat(out, &st) != 0 || S_ISREG(st.st_mode);
  if (regular && rename(src, out) == 0) return 0;
  char tmp[PATH_MAX];
  int fd = regular ? temp_in(out, tmp, sizeof tmp)
                   : open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = copy_to(src, fd);
  if (close(fd) != 0 && !err) err = errno;
  if (regular) {
    if (!err && rename(tmp, out) != 0) err = errno;
    if (err) unlink(tmp);
    cli_temp_unwatch(tmp);
  }
  return err;
}

/* The log through the reader's byte source: gzip and zstd decompressed (etr__bin_source). */
typedef struct log_in {
  rd_source *src;
  int fd;
} log_in;

static long log_read(void *user, void *buf, size_t n) {
  log_in *l = user;
  ssize_t k = rd_source_read_into(l->src, buf, n);
  if (k < 0) errno = rd_source_errno(l->src);
  return (long)k;
}

static long long log_size(void *user) {
  log_in *l = user;
  struct stat st;
  if (rd_source_is_compressed(l->src) || fstat(l->fd, &st) != 0 || !S_ISREG(st.st_mode))
    return -1; /* (the rest is read to be counted) */
  return (long long)st.st_size;
}

int cmd_convert(int argc, char **argv) {
  const char *path = NULL, *out_arg = NULL;
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  if (cli_wants_help(argc, argv)) {
    usage(stdout);
    return ETR_CLI_OK;
  }
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "-:o:", opts, NULL)) != -1) {
    switch (c) {
      case 'o':
        if (out_arg) return cli_usage(CMD, "one -o only");
        out_arg = optarg;
        break;
      case 1:
        if (cli_operand(CMD, optarg, &path)) return ETR_CLI_USAGE;
        break;
      default:
        return cli_getopt_error(CMD, c, argv);
    }
  }
  for (; optind < argc; optind++) /* after "--" */
    if (cli_operand(CMD, argv[optind], &path)) return ETR_CLI_USAGE;
  if (!path) return cli_usage(CMD, "no input file");
  bool from_stdin = !strcmp(path, "-");
  if (from_stdin && !out_arg) return cli_usage(CMD, "reading stdin: give -o OUT");
  char *out_own = out_arg ? NULL : default_output(path);
  const char *out = out_arg ? out_arg : out_own;
  if (!out) {
    cli_error(CMD, "out of memory");
    return ETR_CLI_FAIL;
  }
  int comp = cli_out_compression(CMD, out); /* (gzip for .gz; .zst refused) */
  if (comp < 0) {
    free(out_own);
    return ETR_CLI_FAIL;
  }
  bool to_stdout = !strcmp(out, "-");
  int status = ETR_CLI_OK;
  int in = from_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
  char tmp[PATH_MAX], tmp2[PATH_MAX];
  tmp[0] = tmp2[0] = '\0';
  struct stat si, so;
  if (in < 0) {
    cli_error(CMD, "%s: %s", path, strerror(errno));
    status = ETR_CLI_FAIL;
    goto done;
  }
  if (fstat(in, &si) == 0 && S_ISDIR(si.st_mode)) {
    cli_error(CMD, "%s: is a directory", path);
    status = ETR_CLI_FAIL;
    goto done;
  }
  cli_remember_input(path); /* (stdout, the trace's or the report's, is not the input) */
  if (cli_stdout_check(CMD) != ETR_CLI_OK) {
    status = ETR_CLI_FAIL;
    goto done;
  }
  if (!to_stdout && stat(out, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
    cli_error(CMD, "%s: is the input: write the trace to another file", out);
    status = ETR_CLI_FAIL; /* (exit 1, as every command's refusal to overwrite an input) */
    goto done;
  }
  bool regular_out = !to_stdout && (stat(out, &so) != 0 || S_ISREG(so.st_mode));
  int tfd = temp_in(regular_out ? out : NULL, tmp, sizeof tmp);
  if (tfd < 0) {
    cli_error(CMD, "cannot create a temporary file beside %s: %s", out, strerror(errno));
    tmp[0] = '\0';
    status = ETR_CLI_FAIL;
    goto done;
  }
  rd_source *src = NULL;
  if (rd_source_open(in, 0, false, 0, &src) != 0) {
    cli_error(CMD, "out of memory");
    close(tfd);
    status = ETR_CLI_FAIL;
    goto done;
  }
  log_in li = {src, in};
  etr__bin_source bs = {log_read, log_size, &li};
  bool gz = comp == 1;
  etr__bin_result res;
  int rc = etr__bin_convert_from(&bs, tfd, gz ? GZIP_LEVEL : 0, &res);
  const char *detail = NULL;
  rd_source_end ended = rd_source_ended(src, &detail);
  rd_source_close(src);
  if (close(tfd) != 0 && rc == 0) {
    snprintf(res.error, sizeof res.error, "cannot write the output: %s", strerror(errno));
    rc = -1;
  }
  static const char k_out[] = "cannot write the output";
  if (rc != 0 && !regular_out && !strncmp(res.error, k_out, sizeof k_out - 1)) {
    /* (what failed is the copy in $TMPDIR that a pipe or device output is written from) */
    const char *slash = strrchr(tmp, '/');
    cli_error(CMD,
              "%s: cannot write the temporary copy of the JSON in %.*s (set TMPDIR to a "
              "larger file system)%s",
              from_stdin ? "<stdin>" : path, slash ? (int)(slash - tmp) : 1, slash ? tmp : ".",
              cli_term(res.error + sizeof k_out - 1));
    status = ETR_CLI_FAIL;
    goto done;
  }
  if (rc != 0) {
    /* (a compressed log cut or damaged early: what the decompressor saw explains the rest) */
    cli_error(CMD, "%s: %s%s%s", from_stdin ? "<stdin>" : path, cli_term(res.error),
              ended == RD_SRC_CUT       ? "; the compressed stream is cut short"
              : ended == RD_SRC_CORRUPT ? "; the compressed stream is corrupt: "
                                        : "",
              ended == RD_SRC_CORRUPT ? (detail ? detail : "corrupt data") : "");
    status = ETR_CLI_FAIL;
    goto done;
  }
  FILE *say = to_stdout ? stderr : stdout;
  const char *final = tmp;
  char why[512];
  if (!res.complete && (ended == RD_SRC_CUT || ended == RD_SRC_CORRUPT)) {
    snprintf(why, sizeof why, "%s; the compressed stream %s%s",
             res.stop_reason ? res.stop_reason : "no trailer",
             ended == RD_SRC_CUT ? "is cut short" : "is corrupt: ",
             ended == RD_SRC_CUT ? ""
             : detail            ? detail
                                 : "corrupt data");
    res.stop_reason = why;
  }
  if (!res.complete || res.signal || res.nodes_lost) {
    /* Completed as a cut JSON trace is: etr repair, into a second temporary file. Its report
     * goes where ours goes (never into a trace written on stdout). */
    int t2 = temp_in(regular_out ? out : NULL, tmp2, sizeof tmp2);
    if (t2 < 0) {
      cli_error(CMD, "cannot create a temporary file: %s", strerror(errno));
      tmp2[0] = '\0';
      status = ETR_CLI_FAIL;
      goto done;
    }
    close(t2);
    if (res.complete && res.signal)
      fprintf(say,
              "%s: finalized at signal %d, %llu events; ops open then are completed as etr "
              "repair does:\n",
              from_stdin ? "<stdin>" : path, res.signal, (unsigned long long)res.events);
    else if (res.complete)
      fprintf(say,
              "%s: the recorder lost %llu node(s) (nodes_dropped: memory ran out, or a write "
              "error), %llu events; parents their children name are completed as etr repair "
              "does:\n",
              from_stdin ? "<stdin>" : path, (unsigned long long)res.nodes_lost,
              (unsigned long long)res.events);
    else
      fprintf(say,
              "%s: cut short after %llu complete events (%s; %llu bytes after them "
              "dropped); %llu traceback%s kept with %s frames, %llu lost; completing the "
              "trace as etr repair does:\n",
              from_stdin ? "<stdin>" : path, (unsigned long long)res.events,
              res.stop_reason ? res.stop_reason : "no trailer",
              (unsigned long long)res.bytes_dropped, (unsigned long long)res.tables_recovered,
              res.tables_recovered == 1 ? "" : "s", res.tables_recovered == 1 ? "its" : "their",
              (unsigned long long)res.tables_lost);
    fflush(say);
    char *rargv[] = {"repair", tmp, "-o", tmp2, "--name", (char *)(from_stdin ? "<stdin>" : path),
                     NULL};
    int rs = cli_repair(6, rargv, gz); /* its report goes to stderr */
    if (rs == ETR_CLI_OK) {
      final = tmp2;
    } else {
      /* Not completed (a node over the reader's limit, a full disk, ...: repair said why).
       * The events converted are not thrown away with it: OUT gets them as they are. */
      status = ETR_CLI_FAIL;
      int err = deliver(tmp, out);
      if (err) {
        cli_error(CMD, "%s: %s", to_stdout ? "<stdout>" : out, strerror(err));
        goto done;
      }
      cli_error(CMD,
                "%s: the trace was not completed (above: byte offsets of its JSON); %s holds "
                "its %llu events as converted, with the footer of a cut log but no "
                "placeholders and no process node: 'etr repair' completes it once what "
                "stopped it is fixed",
                from_stdin ? "<stdin>" : path, to_stdout ? "<stdout>" : out,
                (unsigned long long)res.events);
      goto done;
    }
  }
  int err = deliver(final, out);
  if (err) {
    cli_error(CMD, "%s: %s", to_stdout ? "<stdout>" : out, strerror(err)); /* (out as it was) */
    status = ETR_CLI_FAIL;
    goto done;
  }
  if (res.tracebacks_damaged)
    fprintf(say,
            "%s: %llu event%s named a traceback index past the next new one (damaged data): "
            "written without a traceback\n",
            from_stdin ? "<stdin>" : path, (unsigned long long)res.tracebacks_damaged,
            res.tracebacks_damaged == 1 ? "" : "s");
  if (res.complete && !res.signal)
    fprintf(say, "%s: %llu events -> %s%s\n", from_stdin ? "<stdin>" : path,
            (unsigned long long)res.events, to_stdout ? "<stdout>" : out,
            res.records_skipped ? " (records of a later version skipped)" : "");
  if (res.complete && res.bytes_dropped) {
    /* (a log ends at its trailer: what follows is another log appended to it, or damage) */
    cli_error(CMD,
              "%s: %llu bytes follow the log's trailer (from byte %llu) and were not converted: "
              "another log appended to it (convert each log on its own) or damage",
              from_stdin ? "<stdin>" : path, (unsigned long long)res.bytes_dropped,
              (unsigned long long)res.bytes_read);
    status = ETR_CLI_FAIL;
  }

done:
  if (tmp[0]) unlink(tmp);
  if (tmp2[0]) unlink(tmp2);
  if (tmp[0]) cli_temp_unwatch(tmp);
  if (tmp2[0]) cli_temp_unwatch(tmp2);
  if (in > STDIN_FILENO) close(in);
  free(out_own);
  return status;
}
