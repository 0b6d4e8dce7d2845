/* etr repair FILE -o OUT — a trace cut short (kill -9, power loss, full disk) made valid again
 * (docs/RELIABILITY.md), streaming.
 *
 * Two streams over the same input: the reader (json/reader.h) parses it and hands over each
 * complete node with its byte offset; a second, raw stream (the same bytes, through the
 * reader's own byte source, rd_source: gzip and zstd decompressed by the one implementation)
 * copies those bytes to OUT unchanged. So the output is
 * the input's bytes up to the end of the last complete node — header, separators and nodes
 * byte for byte — followed by what repair adds: a placeholder node for each parent that
 * kept nodes name but the file lacks (ops still open at the crash), the process node, and
 * the footer (finish_ts, traceback tables, an "etr" object with a "repair" member).
 * An intact input is copied unchanged (decompressed when it was gzip or zstd).
 *
 * This file is the command: options, the input and output, the two streams side by side
 * (copy_nodes), the report. The raw stream is repair_raw.c, what repair notes of each node
 * and adds after them is repair_add.c (repair.h says why they are apart).
 *
 * Memory: a bitset of the node ids seen (64-byte pages only where ids occur: ~1.5 bits an
 * id when ids are dense, ~150 bytes when scattered), one entry per parent referenced but
 * not read yet (children come before parents, so this is bounded by nesting depth times
 * threads), one word per thread, and the reader's own bounded buffers. An input that is not
 * a regular file (stdin from a pipe, a FIFO) is first copied to an unlinked temporary file,
 * which both streams then read.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "cli.h"
#include "etr/common.h"
#include "lib_an_util.h"
#include "repair.h"

#define CMD "repair"

static void usage(FILE *f) {
  fprintf(f,
          "usage: etr repair [--json] [--name NAME] FILE -o OUT\n"
          "\n"
          "Makes a trace that was cut short (kill -9, power loss, full disk) valid again.\n"
          "OUT holds every node of FILE that was completely written, byte for byte (with\n"
          "the header and separators before it), then what repair adds:\n"
          "  - a placeholder node for each parent id that kept nodes name in ctrl_deps but\n"
          "    the file lacks (an op still open at the crash): name " PLACEHOLDER_NAME
          ",\n"
          "    the missing id, attr etr_incomplete = 1, the tid of its children, ctrl_deps =\n"
          "    that thread's node; ts / inclusive_dur span its written children (a lower\n"
          "    bound), exclusive_dur 0. A thread with ops but no thread node (in traces\n"
          "    that write it at thread exit) gets one with a new id;\n"
          "  - the process node (id 1), when absent;\n"
          "  - finish_ts (FILE's own when it was written, else the end of the last timed\n"
          "    node, ts + inclusive_dur, in ms; else start_ts), the tables after it that were\n"
          "    written whole, and \"etr\": {..., \"repair\": {nodes_kept, bytes_dropped, ...}}\n"
          "    so a repaired trace says so.\n"
          "Traceback frames go into the trace's tables at close; a cut trace has nodes with\n"
          "a \"traceback\" attr and no tables. Repair takes them from FILE.tables, which\n"
          "etr writes beside the trace as they grow (when it belongs to FILE: same pid and\n"
          "start_ts); without it (stdin, the file removed) each id gets an empty traceback\n"
          "([]: frames unknown), counted as tracebacks_lost.\n"
          "An intact FILE is copied unchanged. The input stops at the first byte that cannot\n"
          "continue a trace (end of file, a zero-filled tail, corrupt data): everything from\n"
          "the end of the last complete node on is dropped and counted. A node over the\n"
          "reader's limit (ETR_READER_LIMIT_MB) is not a cut: repair fails and says so.\n"
          "\n"
          "One report line goes to stderr: nodes kept, bytes dropped, nodes added.\n"
          "\n"
          "  -o, --output OUT   where to write the repaired trace ('-' = stdout); never FILE\n"
          "                     itself; left as it was when repair fails\n"
          "  --json             the report as one JSON object on stdout instead (not with\n"
          "                     -o -)\n"
          "  --name NAME        FILE's name in the report (etr convert names the log)\n"
          "  -h, --help         this text\n"
          "  FILE               a trace, .json or gzip- or zstd-compressed (a file cut short is\n"
          "                     repaired from what decompresses; OUT is plain JSON unless\n"
          "                     named .gz); '-' reads stdin; a pipe or FIFO is first copied\n"
          "                     to $TMPDIR\n"
          "\n"
          "exit status: 0 repaired (or intact, copied), 1 cannot write OUT or read FILE\n"
          "through, or FILE's schema is before 1.0.2 (PyTorch's execution_graph traces,\n"
          "which etr does not read: nothing is written), 2 usage error or FILE is not a\n"
          "trace (no complete header: nothing is written).\n");
}

/* Splits the reader's "FILE: byte N: reason" into N and reason. */
static const char *split_error(rd_reader *r, uint64_t *at) {
  const char *m = rd_error(r);
  const char *p = strstr(m + strlen(rd_path(r)), ": byte ");
  *at = 0;
  if (!p) return m;
  char *end;
  *at = strtoull(p + 7, &end, 10);
  return !strncmp(end, ": ", 2) ? end + 2 : end;
}

/* ----------------------------------------------------------------- report ---- */

static int report(const repair *w, bool json) {
  if (json) {
    an_out jo = {.f = stdout};
    an_out_cstr(&jo, "{\"file\": ");
    an_out_jstr(&jo, w->file, strlen(w->file));
    an_out_cstr(&jo, ", \"output\": ");
    an_out_jstr(&jo, w->out_path, strlen(w->out_path));
    an_out_fmt(&jo,
               ", \"intact\": %s, \"gzip\": %s, \"nodes_kept\": %" PRIu64
               ", \"bytes_dropped\": %" PRIu64 ", \"cut_at\": %" PRIu64
               ", \"placeholders_added\": %" PRIu64 ", \"thread_nodes_added\": %" PRIu64
               ", \"process_node_added\": %s, \"tracebacks_lost\": %" PRIu64
               ", \"finish_ts\": %" PRId64 ", \"source_bytes\": %" PRIu64
               ", \"source_json_bytes\": %" PRIu64 ", \"stopped_at\": %" PRIu64 ", \"reason\": ",
               w->intact ? "true" : "false", rd_source_is_gzip(w->raw.src) ? "true" : "false",
               w->kept, w->dropped, w->intact ? w->input_bytes : w->last_end, w->placeholders,
               w->threads_added, w->process_added ? "true" : "false", w->tracebacks_lost,
               w->intact ? rd_finish_ts(w->r) : w->finish_ts, rd_source_input_read(w->raw.src),
               w->input_bytes, w->reason_at);
    if (w->reason)
      an_out_jstr(&jo, w->reason, strlen(w->reason));
    else
      an_out_cstr(&jo, "null");
    an_out_cstr(&jo, "}\n");
    if (fflush(stdout) != 0 || jo.failed) {
      cli_error(CMD, "<stdout>: write error");
      return ETR_CLI_FAIL;
    }
    return ETR_CLI_OK;
  }
  if (w->intact && w->intact_fixed && w->placeholders == 0) { /* only the process node */
    fprintf(stderr,
            "etr repair: %s: complete (%" PRIu64 " nodes) but for the process node: added\n",
            w->file, w->kept);
    return ETR_CLI_OK;
  }
  if (w->intact && w->intact_fixed) {
    fprintf(stderr,
            "etr repair: %s: complete (%" PRIu64 " nodes), but it names %" PRIu64
            " node%s it lacks (a parent or fw_parent): %" PRIu64 " placeholder%s%s%s added\n",
            w->file, w->kept, w->placeholders, w->placeholders == 1 ? "" : "s", w->placeholders,
            w->placeholders == 1 ? "" : "s", w->threads_added ? " and thread nodes" : "",
            w->process_added ? " and the process node" : "");
    return ETR_CLI_OK;
  }
  if (w->intact) {
    fprintf(stderr, "etr repair: %s: intact (%" PRIu64 " nodes): copied unchanged%s\n", w->file,
            w->kept, rd_source_is_compressed(w->raw.src) ? " (decompressed)" : "");
    return ETR_CLI_OK;
  }
  char added[160] = "nothing";
  int k = 0;
  if (w->process_added) k += snprintf(added, sizeof added, "1 process node");
  if (w->placeholders)
    k += snprintf(added + k, sizeof added - (size_t)k, "%s%" PRIu64 " placeholder%s", k ? ", " : "",
                  w->placeholders, w->placeholders == 1 ? "" : "s");
  if (w->threads_added)
    snprintf(added + k, sizeof added - (size_t)k, "%s%" PRIu64 " thread node%s", k ? ", " : "",
             w->threads_added, w->threads_added == 1 ? "" : "s");
  char tb[128] = "";
  if (w->tracebacks_lost)
    snprintf(tb, sizeof tb, "; %" PRIu64 " traceback attr%s kept, their frames lost",
             w->tracebacks_lost, w->tracebacks_lost == 1 ? "" : "s");
  fprintf(stderr,
          "etr repair: %s: kept %" PRIu64 " nodes, added %s; dropped %" PRIu64
          " bytes after the %s (byte %" PRIu64 "): %s at byte %" PRIu64 "%s\n",
          w->file, w->kept, added, w->dropped, w->kept ? "last complete node" : "header",
          w->last_end, w->reason, w->reason_at, tb);
  return ETR_CLI_OK;
}

/* ------------------------------------------------------------------- main ---- */

/* The reader's last error, naming the input as w->file (--name: etr convert's log, not the
 * hidden temporary file it converted it into). */
static const char *read_error(const repair *w) {
  const char *e = rd_error(w->r), *p = rd_path(w->r);
  size_t n = p ? strlen(p) : 0;
  if (!p || !strcmp(p, w->file) || strncmp(e, p, n) != 0 || e[n] != ':') return e;
  static char buf[1024];
  snprintf(buf, sizeof buf, "%s%s", w->file, e + n);
  return buf;
}

/* A stdio stream that gzip-compresses into a gzFile (etr convert -o OUT.gz). */
static ssize_t gz_write(void *c, const char *buf, size_t n) {
  int err = errno;
  errno = 0;
  int k = n ? gzwrite((gzFile)c, buf, (unsigned)n) : 0;
  if (n && k <= 0) {
    if (!errno) errno = EIO;
    return -1;
  }
  errno = err;
  return k;
}

static int gz_close(void *c) {
  errno = 0;
  if (gzclose((gzFile)c) == Z_OK) return 0;
  if (!errno) errno = EIO;
  return EOF;
}

static FILE *gz_stream(FILE *f) {
  int d = dup(fileno(f));
  gzFile z = d >= 0 ? gzdopen(d, "wb6") : NULL;
  if (!z) {
    if (d >= 0) close(d);
    return NULL;
  }
  gzbuffer(z, 1u << 17);
  cookie_io_functions_t io = {NULL, gz_write, NULL, gz_close};
  FILE *g = fopencookie(z, "w", io);
  if (!g) gzclose(z);
  return g;
}

/* The message and status when the reader cannot read FILE's header. */
static int open_failed(repair *w, int rc) {
  if (!w->r) {
    cli_error(CMD, "%s: byte 0: out of memory", w->file);
    return ETR_CLI_FAIL;
  }
  if (rc == ETR_EFORMAT) {
    uint64_t at;
    const char *why = split_error(w->r, &at);
    if (rd_input_consumed(w->r) == 0)
      cli_error(CMD, "%s: byte 0: empty file: not a trace, nothing written", w->file);
    else
      cli_error(CMD,
                "%s: byte %" PRIu64
                ": %s: not a trace, or its header (up to "
                "\"nodes\": [) is cut short; no node to recover, nothing written",
                w->file, at, why);
    return ETR_CLI_USAGE;
  }
  cli_error(CMD, "%s", read_error(w));
  return rc == ETR_EOPEN ? ETR_CLI_USAGE : ETR_CLI_FAIL;
}

/* A cut input's footer is written again from the values the reader kept (rp_put_footer): a
 * value after "nodes" written whole but over the reader's limit (skipped, not loaded) would
 * be lost, or its table replaced by an empty one. True after the error. (An intact input is
 * copied as it is, and a value the input stops inside was not written whole: neither is
 * lost.) */
static bool lost_to_limit(repair *w) {
  size_t n;
  const char *const *k = rd_top_keys(w->r, &n);
  bool after = false;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(k[i], "nodes")) {
      after = true;
    } else if (after && rd_skipped_whole(w->r, k[i])) {
      cli_error(CMD,
                "%s: the value of \"%s\" is over the reader's limit and was not loaded: the "
                "repaired trace would lose it (ETR_READER_LIMIT_MB raises the limit)",
                w->file, k[i]);
      return true;
    }
  }
  return false;
}

/* Copies the header and each complete node. ETR_CLI_OK, or an error status after printing
 * the error. Sets w->intact, or w->reason / w->reason_at for where the input stops. */
static int copy_nodes(repair *w) {
  const rd_rnode *n;
  int rc = 0;
  bool raw_bad = false;
  w->last_end = rp_raw_copy_header(&w->raw, &w->o);
  if (w->last_end == 0 || w->last_end == UINT64_MAX) raw_bad = true;
  while (!raw_bad && (rc = rd_next(w->r, &n)) == 1) {
    rp_flush_held(w); /* (a node after the process node: it was not the last) */
    bool process = n->id == 1 && n->name && !strcmp(n->name, PROCESS_NAME);
    an_out *to = process ? &w->held : &w->o;
    if (process) w->held_at = w->o.bytes;
    if (rp_raw_copy(&w->raw, to, n->offset) != n->offset) {
      raw_bad = true;
      break;
    }
    uint64_t end = rp_raw_copy_object(&w->raw, to);
    if (end == 0 || end == UINT64_MAX || (process && to->failed)) {
      raw_bad = true;
      break;
    }
    w->last_end = end;
    w->kept++;
    if (!process) w->any_node_out = true;
    if (!rp_note_node(w, n)) {
      cli_error(CMD, "%s: out of memory", w->file);
      return ETR_CLI_FAIL;
    }
  }
  if (raw_bad) {
    if (w->raw.err)
      cli_error(CMD, "%s: read error: %s", w->file, strerror(w->raw.err));
    else
      cli_error(CMD, "%s: byte %" PRIu64 ": the input changed while it was read", w->file,
                rp_raw_at(&w->raw));
    return ETR_CLI_FAIL;
  }
  if (rc == 0) {
    rc = rd_finish(w->r);
    /* (copied to its end as it is: a value the reader skipped, over its limit, is kept too) */
    w->intact = rc == 0;
    if (w->intact) return ETR_CLI_OK;
  }
  if (rc != ETR_EFORMAT) { /* out of memory, a read error: no repair from a partial view */
    cli_error(CMD, "%s", read_error(w));
    return ETR_CLI_FAIL;
  }
  if (rd_error_is_limit(w->r)) { /* not where the file was cut: it may go on, whole */
    cli_error(CMD, "%s; not repaired: a limit of the reader, not a cut", read_error(w));
    return ETR_CLI_FAIL;
  }
  if (lost_to_limit(w)) return ETR_CLI_FAIL;
  snprintf(w->why, sizeof w->why, "%s", split_error(w->r, &w->reason_at));
  w->reason = w->why;
  return ETR_CLI_OK;
}

int cmd_repair(int argc, char **argv) { return cli_repair(argc, argv, false); }

int cli_repair(int argc, char **argv, bool gzip) {
  const char *out_path = NULL, *path = NULL, *name = NULL;
  bool json = false;
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"name", required_argument, NULL, 'n'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  if (cli_wants_help(argc, argv)) {
    usage(stdout);
    return ETR_CLI_OK;
  }
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "-:o:j", opts, NULL)) != -1) {
    switch (c) {
      case 'o':
        if (out_path) return cli_usage(CMD, "one -o only");
        out_path = optarg;
        break;
      case 'j':
        json = true;
        break;
      case 'n':
        name = optarg;
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
  if (!out_path) return cli_usage(CMD, "no output: give -o OUT ('-o -' for stdout)");
  bool to_stdout = !strcmp(out_path, "-");
  if (json && to_stdout) return cli_usage(CMD, "--json prints on stdout: not with -o -");
  bool from_stdin = !strcmp(path, "-");
  if (cli_is_binary_log(path)) {
    cli_error(CMD,
              "%s: a binary event log (ETR_TRACE=x.etr): 'etr convert %s -o OUT' makes its "
              "trace, completed as repair does when it was cut short",
              cli_term(path), cli_term(path));
    return ETR_CLI_USAGE;
  }

  /* never overwrite the input */
  struct stat si, so;
  if (!to_stdout && stat(out_path, &so) == 0 &&
      ((from_stdin && fstat(STDIN_FILENO, &si) == 0) || (!from_stdin && stat(path, &si) == 0)) &&
      si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
    cli_error(CMD, "%s: is the input: write the repaired trace to another file", out_path);
    return ETR_CLI_FAIL; /* (exit 1, as every command's refusal to overwrite an input) */
  }
  cli_remember_input(path); /* (nor is stdout the input: -o -, --json) */
  if (cli_stdout_check(CMD) != ETR_CLI_OK) return ETR_CLI_FAIL;

  repair w;
  memset(&w, 0, sizeof w);
  w.file = name ? name : from_stdin ? "<stdin>" : path;
  w.out_path = out_path;
  w.free_head = SIZE_MAX;
  int status = ETR_CLI_OK, own_fd = -1, open_errno = 0;
  FILE *f = NULL, *gz = NULL;
  bool created = false;

  /* the raw stream's source, then the reader (which reads the header) */
  int in_fd = from_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
  const char *reader_path = path;
  struct stat st;
  if (in_fd > STDIN_FILENO && fstat(in_fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(in_fd); /* the reader says so */
    in_fd = -1;
  }
  if (in_fd >= 0) {
    bool spooled;
    w.raw.fd = rp_raw_source(in_fd, w.file, &w.raw.base, &spooled);
    if (in_fd != STDIN_FILENO && w.raw.fd != in_fd) close(in_fd);
    if (w.raw.fd < 0) return ETR_CLI_FAIL;
    if (w.raw.fd != STDIN_FILENO) own_fd = w.raw.fd;
    if (spooled) reader_path = "-";
  } else {
    w.raw.fd = -1;
    open_errno = errno; /* reported by the reader below, in the usual form */
  }
  rd_options ro = ETR_READER_OPTIONS_INIT;
  int rc = rd_open(reader_path, &ro, &w.r);
  if (rc < 0) {
    status = open_failed(&w, rc);
    goto done;
  }
  if (w.raw.fd < 0 || rd_source_open(w.raw.fd, w.raw.base, true, RAW_BLOCK, &w.raw.src)) {
    cli_error(CMD, "%s: %s", w.file, w.raw.fd < 0 ? strerror(open_errno) : "out of memory");
    status = ETR_CLI_FAIL;
    goto done;
  }
  const rd_rheader *h = rd_header(w.r);
  /* A schema it does not read has its own process node ("execution_graph" before 1.0.2),
   * which repair would take for a missing one and add ours after it: a second id 1 in
   * another layout. Refused before OUT is created. */
  if (cli_check_schema(CMD, w.file, h) != ETR_CLI_OK) {
    status = ETR_CLI_FAIL;
    goto done;
  }
  /* before the nodes are read: they are counted against what the tables hold */
  if (!from_stdin) rp_read_side_tables(&w, path, h->pid, h->start_ts);
  w.strides = h->schema_major > 1 ||
              (h->schema_major == 1 &&
               (h->schema_minor > 1 || (h->schema_minor == 1 && h->schema_patch >= 1)));

  /* the output: only once FILE is known to be a trace */
  if (to_stdout) {
    f = stdout;
  } else {
    f = cli_open_output(CMD, out_path);
    if (!f) {
      status = ETR_CLI_FAIL;
      goto done;
    }
    /* Discarded on failure (once: see below): cli_discard_output takes this run's temporary
     * file, or a regular file written in place, never a device (/dev/full & co.). (Not by
     * fstat of the stream: a .gz output's has no descriptor, and its temporary file was
     * left.) */
    created = true;
  }
  setvbuf(f, NULL, _IOFBF, 1u << 20);
  w.o.f = f;
  if (gzip && !(w.o.f = gz = gz_stream(f))) {
    cli_error(CMD, "%s: out of memory", w.file);
    status = ETR_CLI_FAIL;
    goto done;
  }

  status = copy_nodes(&w);
  if (status != ETR_CLI_OK) goto done;
  /* A complete file can still name nodes it lacks: finalized at a crash while an op was
   * open (its children name it), or its forward op never written. The placeholders go in
   * before the file's own end, which is kept as it is (tables, stats). */
  if (w.intact && (rp_live_pends(&w) > 0 || !w.have_process)) { /* (etr convert's cut logs) */
    if (!rp_add_nodes(&w)) {
      cli_error(CMD, "%s: out of memory", w.file);
      status = ETR_CLI_FAIL;
      goto done;
    }
    w.intact_fixed = true;
  }
  if (w.intact) rp_flush_held(&w); /* (after the placeholders: last) */
  /* the rest: copied when intact, else counted as dropped and the trace completed */
  w.input_bytes = rp_raw_copy(&w.raw, w.intact ? &w.o : NULL, UINT64_MAX);
  if (w.input_bytes == UINT64_MAX) {
    cli_error(CMD, "%s: read error: %s", w.file, strerror(w.raw.err));
    status = ETR_CLI_FAIL;
    goto done;
  }
  if (!w.intact) {
    if (!rp_add_nodes(&w)) {
      cli_error(CMD, "%s: out of memory", w.file);
      status = ETR_CLI_FAIL;
      goto done;
    }
    rp_flush_held(&w);
    w.dropped = w.input_bytes - w.last_end;
    rp_put_footer(&w);
    if (w.raw.stop) {
      w.reason = w.raw.stop;
      w.reason_at = w.input_bytes;
    } else if (strstr(w.reason, "unexpected end of input")) {
      w.reason = "the file ends";
      w.reason_at = w.input_bytes;
    }
  }
  if (gz) {
    errno = 0;
    int gz_err = fclose(gz) != 0 ? (errno ? errno : EIO) : 0;
    gz = NULL;
    if (gz_err) {
      cli_error(CMD, "%s: write error: %s", cli_term(out_path), strerror(gz_err));
      fclose(f);
      if (created) cli_discard_output(out_path);
      status = ETR_CLI_FAIL;
    } else {
      status = cli_close_output(CMD, f, out_path);
    }
  } else {
    status = cli_close_output(CMD, f, out_path);
  }
  f = NULL;
  /* The output is settled: committed, or its temporary file discarded (by close on a write
   * error or a failed rename, or just above). Discarding it again would find no temporary
   * file left and take OUT for a file written in place: the file OUT held before, removed. */
  created = false;
  if (status != ETR_CLI_OK) goto done;
  status = report(&w, json);

done:
  if (gz) fclose(gz);
  if (f) {
    if (f != stdout) {
      fclose(f);
      if (created) cli_discard_output(out_path); /* no half-written output */
    } else {
      fflush(f);
    }
  }
  rd_close(w.r);
  rp_side_tables_free(&w);
  rp_raw_free(&w.raw);
  free(w.held.mem);
  if (own_fd >= 0) close(own_fd);
  rp_idset_free(&w.seen);
  an_u64map_free(&w.threads);
  an_u64map_free(&w.pend_ix);
  free(w.pends);
  return status;
}
