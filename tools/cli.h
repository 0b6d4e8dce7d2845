/* Helpers shared by every etr subcommand (docs/CLI.md).
 *
 * Conventions: a subcommand is `int cmd_<name>(int argc, char **argv)` with argv[0] the
 * command name; it returns ETR_CLI_OK (0), ETR_CLI_FAIL (1: bad input, or problems found) or
 * ETR_CLI_USAGE (2: bad command line). Errors are one line on stderr:
 *   etr <cmd>: FILE: byte N: reason          (bad input, from the reader)
 *   etr <cmd>: reason                         (anything else)
 * Inputs are opened through cli_open, which streams ("-" = stdin, gzip by magic bytes)
 * and draws a progress line on stderr while the input is long (only when stderr is a
 * terminal; ETR_PROGRESS=0 turns it off, ETR_PROGRESS=1 forces it on).
 * Single-threaded; nothing here is safe to call from two threads at once.
 */
#ifndef ETR_TOOLS_CLI_H
#define ETR_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "json/reader.h"

enum { ETR_CLI_OK = 0, ETR_CLI_FAIL = 1, ETR_CLI_USAGE = 2 };

/* "etr CMD: message\n" on stderr (the progress line, if any, is cleared first). */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "etr CMD: message (see 'etr CMD --help')\n" on stderr; returns ETR_CLI_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last branch of a command's option loop: `a` is an unknown option or the FILE operand
 * (stored in *file; a second one is an error). 0, or ETR_CLI_USAGE after printing the one-line
 * usage error. */
int cli_operand(const char *cmd, const char *a, const char **file);

/* For commands parsing with getopt_long (optstring starting with ':', opterr = 0, optind
 * reset to 1 first; options may come anywhere, "--" ends them): the usage error of the
 * option getopt_long just refused with c ('?' unknown, ':' value missing); ETR_CLI_USAGE. */
int cli_getopt_error(const char *cmd, int c, char **argv);
/* After getopt_long: the single FILE operand into *file; 0, or ETR_CLI_USAGE after the
 * message (none, or more than one). */
int cli_one_file(const char *cmd, int argc, char **argv, const char **file);

/* True when argv[1..] holds -h or --help (before a "--"). */
bool cli_wants_help(int argc, char **argv);

/* Option values: parse s as a non-negative integer / a finite double. On failure print a
 * usage error naming opt and return false. */
bool cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);
bool cli_parse_double(const char *cmd, const char *opt, const char *s, double *out);

/* Monotonic clock in seconds. */
double cli_now(void);

/* ---- input ---- */

typedef struct cli_input {
  const char *cmd;
  const char *path; /* as given ("-" = stdin) */
  rd_reader *r;     /* valid after a successful cli_open */
  uint64_t nodes;   /* nodes handed over so far */
  /* progress line (private) */
  bool progress;
  bool drawn;
  double t0, last;
} cli_input;

/* For a command reading several inputs: '-' (stdin) given more than once is a usage error
 * (the second read would find stdin at its end and call a whole trace cut short). ETR_CLI_OK,
 * or ETR_CLI_USAGE after the message. */
int cli_stdin_once(const char *cmd, const char *const *paths, size_t n);

/* Open path for command cmd with the reader options opt (NULL: defaults). 0, or
 * ETR_CLI_FAIL after printing the one-line error (also when stdout is that file: see
 * cli_stdout_check). On failure, in->r is closed already. */
int cli_open(cli_input *in, const char *cmd, const char *path, const rd_options *opt);
/* Reader options for a command that uses none of the values after "nodes" (the tables, the
 * footer): the reader passes over them without holding them (rd_options.trailer_keys). */
extern const rd_options cli_no_trailer;

/* The next node (valid until the next call): 1, 0 at the end of "nodes", or -1 after printing
 * the reader's one-line error. Updates the progress line. */
int cli_next(cli_input *in, const rd_rnode **node);

/* Reads the rest of the file (after cli_next returned 0; also fine to call earlier: the
 * remaining nodes are skipped). 0, or -1 after printing the error. Clears the progress line. */
int cli_finish(cli_input *in);

/* For commands that write the tables out again: -1 after the error when a top-level value
 * was over the reader's limit and skipped (rd_skipped), else 0. */
int cli_no_skipped(const char *cmd, const rd_reader *r);

/* Clears the progress line and closes the reader. Safe on a failed or closed input. */
void cli_close(cli_input *in);

/* ---- output ---- */

/* Strings of a trace in human output (op names, dtypes, devices, group names): control bytes
 * (C0, DEL, C1 such as CSI), which could drive a terminal, and invalid UTF-8 are shown
 * escaped (\x1b, \u009b); cut after CLI_TERM_MAX bytes ("..."). The result lives in one of 8
 * static buffers reused in turn: enough for one printf. Not thread-safe (etr is one thread). */
#define CLI_TERM_MAX 1024
const char *cli_term(const char *s);
/* The same for len bytes, which may hold NULs (shown as \x00): a name of the trace with its
 * length ("a\u0000b" in the file). */
const char *cli_termn(const char *s, size_t len);

/* True when path is a regular file holding a binary event log (`etr convert` reads it). */
bool cli_is_binary_log(const char *path);

/* True when path names a file that cli_open has opened as an input in this process (the same
 * file by another name too: a hard link, a symlink). */
bool cli_is_input(const char *path);
/* Count path as an input too (a file a command reads other than through cli_open: a model,
 * a list), so that no output overwrites it. */
void cli_remember_input(const char *path);
/* Refuse a stdout that is a regular file among the inputs so far (`etr CMD t.json >> t.json`):
 * ETR_CLI_FAIL after the error, stdout then pointed at /dev/null (what the command has
 * buffered for it never reaches the file); else ETR_CLI_OK. cli_open calls it for each input
 * (before the command writes anything, so every command refuses it, whether or not it would
 * write there), cli_open_output for stdout; a command reading its input otherwise calls it
 * after cli_remember_input. */
int cli_stdout_check(const char *cmd);

/* How an output named path is written: 1 gzip (a name ending in .gz, in any case), 0 plain
 * (stdout too), -1 after printing an error for an ending of a compression etr reads but does
 * not write (.zst, .zstd) or does not know (.xz, .bz2, .lz4): never plain bytes under a
 * compressed name. */
int cli_out_compression(const char *cmd, const char *path);
/* Open an output file ("-" or NULL = stdout). NULL after printing an error, also when path
 * is one of the command's inputs (it would be truncated before it is read). A regular file
 * (or a new one) is written beside path and renamed over it by cli_close_output: until then,
 * and after any failure or interruption, path keeps what it held. Written gzip-compressed
 * when cli_out_compression says so (refused when it refuses). */
FILE *cli_open_output(const char *cmd, const char *path);
/* The same for an output written through a descriptor: a temporary file beside path (its
 * descriptor, or -1 after printing an error), made path by cli_out_commit, removed by
 * cli_discard_output (and at SIGINT, SIGTERM, SIGHUP, SIGQUIT). */
int cli_out_temp(const char *cmd, const char *path);
/* Rename the temporary file of path over it (the descriptor closed first). ETR_CLI_OK, or
 * ETR_CLI_FAIL after printing why (the temporary file removed); ETR_CLI_OK when path has
 * none (written in place). */
int cli_out_commit(const char *cmd, const char *path);
/* mkstemp(tmpl) for a file that will replace `replaces` (NULL: none): its mode is that
 * file's, else what open(2) would give a new file (not mkstemp's 0600). The descriptor, or
 * -1 (errno set). */
int cli_mkstemp(char *tmpl, const char *replaces);
/* A temporary file of the command's own, removed at those signals until unwatched. */
void cli_temp_watch(const char *tmp);
void cli_temp_unwatch(const char *tmp);

/* Flush and close an output from cli_open_output (stdout is flushed, not closed), then
 * make it path. ETR_CLI_OK, or ETR_CLI_FAIL after printing the write error (path as it
 * was). */
int cli_close_output(const char *cmd, FILE *f, const char *path);
/* The same for an output written with fwrite in large blocks (nothing left in stdio's
 * buffer to fail again at the flush): the error printed is `write_err` (the errno of the
 * last write that failed, 0 if none) when the flush and close give none. */
int cli_close_output_err(const char *cmd, FILE *f, const char *path, int write_err);
/* The same as cli_close_output, but path is not made yet: its temporary file (removed at the
 * signals above) waits for cli_out_commit or cli_discard_output, so that a command writing
 * several files makes all of them or none. */
int cli_close_output_pending(const char *cmd, FILE *f, const char *path);
/* Drop a half-written output: its temporary file, or (written in place) path itself if it
 * is a regular file, never a device such as /dev/null or /dev/full (which, run as root,
 * unlink would delete). */
void cli_discard_output(const char *path);

/* Write s as a JSON string literal (quotes included; control characters escaped; bytes
 * passed through otherwise, the reader's strings being valid UTF-8 already). */
void cli_json_str(FILE *f, const char *s);
/* The same for len bytes (NUL bytes inside are written as \u0000). */
void cli_json_strn(FILE *f, const char *s, size_t len);

/* A trace of a schema before 1.0.2 (PyTorch's `execution_graph` traces, whose nodes name
 * their parent `parent` and hold flat inputs: read as ours they give meaningless numbers,
 * and validate an error per node) is refused, after the one-line error naming path:
 * ETR_CLI_FAIL; else ETR_CLI_OK. */
int cli_check_schema(const char *cmd, const char *path, const rd_rheader *h);

/* Human-readable byte count into buf ("12.3 MB"); returns buf. */
const char *cli_bytes(uint64_t n, char *buf, size_t size);

#endif /* ETR_TOOLS_CLI_H */
