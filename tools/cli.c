/* Helpers shared by the etr subcommands: see cli.h. */
#include "cli.h"

#include "observer/binlog.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define PROGRESS_MIN_BYTES (4u << 20) /* inputs shorter than this draw no progress line */
#define PROGRESS_PERIOD 0.2           /* seconds between redraws */

/* The input whose progress line is on screen, so errors can clear it first. */
static cli_input *g_drawn;

static void progress_clear(cli_input *in) {
  if (in && in->drawn) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
    in->drawn = false;
  }
  if (g_drawn == in) g_drawn = NULL;
}

void cli_error(const char *cmd, const char *fmt, ...) {
  progress_clear(g_drawn);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "etr %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int cli_usage(const char *cmd, const char *fmt, ...) {
  progress_clear(g_drawn);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "etr %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (see 'etr %s --help')\n", cmd);
  va_end(ap);
  return ETR_CLI_USAGE;
}

int cli_operand(const char *cmd, const char *a, const char **file) {
  if (a[0] == '-' && a[1] != '\0') return cli_usage(cmd, "unknown option '%s'", a);
  if (*file != NULL) return cli_usage(cmd, "one FILE only ('%s' is extra)", a);
  *file = a;
  return 0;
}

int cli_getopt_error(const char *cmd, int c, char **argv) {
  /* A long option is argv[optind - 1] itself (optopt holds its short alias, if any); a
   * short one is optopt, which may sit in a cluster such as -qZ. */
  const char *arg = optind > 0 ? argv[optind - 1] : "";
  const char *what = c == ':' ? "option '%s%.*s' wants a value" : "unknown option '%s%.*s'";
  if (!strncmp(arg, "--", 2)) return cli_usage(cmd, what, "", (int)strcspn(arg, "="), arg);
  char s[2] = {(char)optopt, 0};
  return cli_usage(cmd, what, "-", 1, s);
}

int cli_one_file(const char *cmd, int argc, char **argv, const char **file) {
  if (optind >= argc) return cli_usage(cmd, "no FILE given");
  if (argc - optind > 1) return cli_usage(cmd, "one FILE only ('%s' is extra)", argv[optind + 1]);
  *file = argv[optind];
  return 0;
}

bool cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--")) break;
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return true;
  }
  return false;
}

bool cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  if (!s || !*s || *s == '-' || *s == '+') goto bad;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) goto bad;
  *out = v;
  return true;
bad:
  cli_usage(cmd, "%s wants a non-negative integer, not '%s'", opt, s ? s : "");
  return false;
}

bool cli_parse_double(const char *cmd, const char *opt, const char *s, double *out) {
  char *end;
  errno = 0;
  if (!s || !*s) goto bad;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v)) goto bad;
  *out = v;
  return true;
bad:
  cli_usage(cmd, "%s wants a number, not '%s'", opt, s ? s : "");
  return false;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *cli_bytes(uint64_t n, char *buf, size_t size) {
  if (n < 10000)
    snprintf(buf, size, "%llu B", (unsigned long long)n);
  else if (n < 10000000)
    snprintf(buf, size, "%.1f kB", (double)n / 1e3);
  else if (n < 10000000000ull)
    snprintf(buf, size, "%.1f MB", (double)n / 1e6);
  else
    snprintf(buf, size, "%.2f GB", (double)n / 1e9);
  return buf;
}

/* ---- input ---- */

static bool progress_wanted(void) {
  const char *e = getenv("ETR_PROGRESS");
  if (e && *e) {
    if (!strcmp(e, "1") || !strcasecmp(e, "on") || !strcasecmp(e, "true") || !strcasecmp(e, "yes"))
      return true;
    if (!strcmp(e, "0") || !strcasecmp(e, "off") || !strcasecmp(e, "false") || !strcasecmp(e, "no"))
      return false;
    static bool said;
    if (!said) /* (once: several inputs ask) */
      fprintf(stderr,
              "etr: ETR_PROGRESS=%s unknown (1, on, true, yes or 0, off, false, no); "
              "progress on a terminal only\n",
              e);
    said = true;
  }
  return isatty(STDERR_FILENO);
}

/* Every input opened in this process (device, inode): an output that is one of them, by its
 * own name, a hard link or a symlink, would destroy what is being read. */
static struct {
  dev_t dev;
  ino_t ino;
} * g_inputs;
static size_t g_n_inputs, g_cap_inputs;

void cli_remember_input(const char *path) {
  struct stat st;
  if ((strcmp(path, "-") == 0 ? fstat(STDIN_FILENO, &st) : stat(path, &st)) != 0) return;
  if (!S_ISREG(st.st_mode)) return;       /* a pipe or device cannot be truncated by an output */
  for (size_t i = 0; i < g_n_inputs; i++) /* (a fuzzer opens one file again and again) */
    if (g_inputs[i].dev == st.st_dev && g_inputs[i].ino == st.st_ino) return;
  if (g_n_inputs == g_cap_inputs) {
    size_t cap = g_cap_inputs ? g_cap_inputs * 2 : 16;
    void *v = realloc(g_inputs, cap * sizeof *g_inputs);
    if (!v) return;
    g_inputs = v;
    g_cap_inputs = cap;
  }
  g_inputs[g_n_inputs].dev = st.st_dev;
  g_inputs[g_n_inputs].ino = st.st_ino;
  g_n_inputs++;
}

/* Whether stdout is a regular file that is one of the inputs (`etr chrome t.json >> t.json`):
 * it would grow as it is read, and end with the command's output. */
static bool stdout_is_input(void) {
  struct stat st;
  if (fstat(STDOUT_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  for (size_t i = 0; i < g_n_inputs; i++)
    if (g_inputs[i].dev == st.st_dev && g_inputs[i].ino == st.st_ino) return true;
  return false;
}

int cli_stdout_check(const char *cmd) {
  if (!stdout_is_input()) return ETR_CLI_OK;
  cli_error(cmd, "<stdout>: is an input of this command: refusing to write into it");
  /* What the command has written to stdout so far sits in stdio's buffer (a regular file is
   * fully buffered): it goes nowhere, nor does anything written after. */
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, STDOUT_FILENO);
    close(null);
  }
  return ETR_CLI_FAIL;
}

const char *cli_term(const char *s) { return cli_termn(s, s ? strlen(s) : 0); }

const char *cli_termn(const char *s, size_t n) {
  /* A ring of buffers, so that one printf may take several. */
  static char ring[8][CLI_TERM_MAX + 16];
  static unsigned next;
  char *out = ring[next++ % 8];
  size_t o = 0;
  const unsigned char *p = (const unsigned char *)(s ? s : ""), *end = p + (s ? n : 0);
  while (p < end && o < CLI_TERM_MAX) {
    unsigned c = *p;
    size_t len = c < 0x80             ? 1
                 : (c & 0xe0) == 0xc0 ? 2
                 : (c & 0xf0) == 0xe0 ? 3
                 : (c & 0xf8) == 0xf0 ? 4
                                      : 0;
    bool ok = len > 0 && len <= (size_t)(end - p);
    for (size_t k = 1; ok && k < len; k++) ok = (p[k] & 0xc0) == 0x80;
    if (ok && len == 2 && (c == 0xc0 || c == 0xc1)) ok = false; /* overlong */
    /* C0 controls, DEL, and C1 controls (U+0080..U+009F: 0xc2 0x80..0x9f; CSI is 0x9b) are
     * shown escaped, as is any byte that is not valid UTF-8. */
    bool ctl =
        ok && ((len == 1 && (c < 0x20 || c == 0x7f)) || (len == 2 && c == 0xc2 && p[1] < 0xa0));
    if (!ok || ctl) {
      unsigned v = len == 2 && ok ? p[1] : c;
      o += (size_t)snprintf(out + o, 8, ok && len == 2 ? "\\u%04x" : "\\x%02x", v);
      p += ok ? len : 1;
      continue;
    }
    memcpy(out + o, p, len);
    o += len;
    p += len;
  }
  if (p < end) o += (size_t)snprintf(out + o, 8, "...");
  out[o] = '\0';
  return out;
}

bool cli_is_input(const char *path) {
  struct stat st;
  if (!path || stat(path, &st) != 0) return false;
  for (size_t i = 0; i < g_n_inputs; i++)
    if (g_inputs[i].dev == st.st_dev && g_inputs[i].ino == st.st_ino) return true;
  return false;
}

bool cli_is_binary_log(const char *path) {
  if (!path || !strcmp(path, "-")) return false;
  /* Regular files only, checked before any open: opening a FIFO would complete the open of
   * its writer, whose data would then go nowhere once we close it. */
  struct stat pre;
  if (stat(path, &pre) != 0 || !S_ISREG(pre.st_mode)) return false;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  /* Its first bytes decompressed, as the reader reads it (a log gzipped to copy it off a
   * machine is one too) */
  unsigned char head[8];
  size_t got = 0;
  struct stat st;
  rd_source *src = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && rd_source_open(fd, 0, true, 4096, &src) == 0) {
    while (got < sizeof head) {
      ssize_t k = rd_source_read_into(src, head + got, sizeof head - got);
      if (k <= 0) break;
      got += (size_t)k;
    }
  }
  rd_source_close(src);
  close(fd);
  return etr__bin_is_log(head, got);
}

int cli_stdin_once(const char *cmd, const char *const *paths, size_t n) {
  size_t seen = 0;
  for (size_t i = 0; i < n; i++)
    if (strcmp(paths[i], "-") == 0 && ++seen == 2)
      return cli_usage(cmd, "'-' given twice: stdin can be given once (it holds one trace)");
  return ETR_CLI_OK;
}

static const char *const no_keys[] = {NULL};
const rd_options cli_no_trailer = {sizeof(rd_options), NULL, NULL, 0, false, no_keys};

int cli_open(cli_input *in, const char *cmd, const char *path, const rd_options *opt) {
  memset(in, 0, sizeof *in);
  in->cmd = cmd;
  in->path = path;
  in->progress = progress_wanted();
  in->t0 = in->last = cli_now();
  int rc = rd_open(path, opt, &in->r);
  if (rc < 0) {
    if (cli_is_binary_log(path))
      cli_error(cmd,
                "%s: a binary event log (ETR_TRACE=x.etr): 'etr convert %s' makes its JSON "
                "trace",
                cli_term(path), cli_term(path));
    else if (in->r)
      cli_error(cmd, "%s", rd_error(in->r));
    else
      cli_error(cmd, "%s: byte 0: out of memory", path);
    rd_close(in->r);
    in->r = NULL;
    return ETR_CLI_FAIL;
  }
  cli_remember_input(path);
  if (cli_stdout_check(cmd) != ETR_CLI_OK) {
    rd_close(in->r);
    in->r = NULL;
    return ETR_CLI_FAIL;
  }
  return ETR_CLI_OK;
}

static void progress_draw(cli_input *in, double now) {
  uint64_t size = rd_input_size(in->r);
  uint64_t done = rd_input_consumed(in->r);
  uint64_t dec = rd_offset(in->r);
  if ((size ? size : done) < PROGRESS_MIN_BYTES) return;
  double el = now - in->t0;
  char b1[32], b2[32];
  char pct[16] = "";
  if (size) snprintf(pct, sizeof pct, "%3.0f%% ", 100.0 * (double)done / (double)size);
  fprintf(stderr, "\r\033[Ketr %s: %s %s%s read, %llu nodes, %.0f MB/s", in->cmd, rd_path(in->r),
          pct, cli_bytes(dec, b1, sizeof b1), (unsigned long long)in->nodes,
          el > 0 ? (double)dec / 1e6 / el : 0.0);
  if (size) fprintf(stderr, " (of %s)", cli_bytes(size, b2, sizeof b2));
  fflush(stderr);
  in->drawn = true;
  g_drawn = in;
}

int cli_next(cli_input *in, const rd_rnode **node) {
  int rc = rd_next(in->r, node);
  if (rc == 1) {
    in->nodes++;
    if (in->progress && (in->nodes & 1023) == 0) {
      double now = cli_now();
      if (now - in->last >= PROGRESS_PERIOD) {
        in->last = now;
        progress_draw(in, now);
      }
    }
    return 1;
  }
  if (rc == 0) return 0;
  cli_error(in->cmd, "%s", rd_error(in->r));
  return -1;
}

int cli_finish(cli_input *in) {
  int rc = rd_finish(in->r);
  progress_clear(in);
  if (rc < 0) {
    cli_error(in->cmd, "%s", rd_error(in->r));
    return -1;
  }
  return 0;
}

int cli_no_skipped(const char *cmd, const rd_reader *r) {
  size_t n;
  const char *const *k = rd_top_keys(r, &n);
  for (size_t i = 0; i < n; i++)
    if (rd_skipped(r, k[i])) {
      cli_error(cmd,
                "%s: the value of \"%s\" is over the reader's limit and was not loaded, so it "
                "would be lost (ETR_READER_LIMIT_MB raises the limit)",
                rd_path(r), k[i]);
      return -1;
    }
  return 0;
}

void cli_close(cli_input *in) {
  progress_clear(in);
  rd_close(in->r);
  in->r = NULL;
}

/* ---- output ---- */

/* An output to a regular file (or to a path that does not exist yet) is written to a
 * temporary file beside it and renamed over it once complete: an error, a full disk or an
 * interruption leaves the file that was there as it was, and no half-written one. The
 * temporary files are removed at SIGINT, SIGTERM, SIGHUP and SIGQUIT too (before the
 * signal goes on), so that none is left behind. */
/* The slots grow as needed: `etr chakra` keeps one per rank until every rank is written. */
#define OUT_SLOTS_FIRST 8
/* (read by the signal handler, which may run at any instruction of ours: a larger array is
 * filled before it is published, and its size published after it) */
static char *volatile *volatile g_temps;
static volatile size_t g_n_slots;
static struct out_slot {
  FILE *f;      /* (NULL: written through a descriptor) */
  char *final;  /* the path as the command was given it (how the slot is found) */
  char *target; /* what the temporary file is renamed to: a symlink's target, else final */
} * g_outs;

static void remove_temps_on_signal(int sig) {
  size_t n = g_n_slots;
  char *volatile *temps = g_temps;
  for (size_t i = 0; i < n; i++) {
    char *t = temps[i];
    if (t) unlink(t);
  }
  raise(sig); /* (the handler was reset: delivered, at the default action, once we return) */
}

/* A free slot, the slots grown when all are taken; -1 when memory ran out. */
static int free_slot(void) {
  size_t n = g_n_slots;
  for (size_t i = 0; i < n; i++)
    if (!g_temps[i] && !g_outs[i].final) return (int)i;
  size_t cap = n ? n * 2 : OUT_SLOTS_FIRST;
  if (cap > INT_MAX) return -1;
  char *volatile *temps = calloc(cap, sizeof *temps);
  struct out_slot *outs = temps ? calloc(cap, sizeof *outs) : NULL;
  if (!outs) {
    free((void *)temps);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    temps[i] = g_temps[i];
    outs[i] = g_outs[i];
  }
  char *volatile *old_temps = g_temps;
  g_temps = temps;
  atomic_signal_fence(memory_order_seq_cst);
  g_n_slots = cap;
  free((void *)old_temps);
  free(g_outs);
  g_outs = outs;
  return (int)n;
}

static void watch_signals(void) {
  static bool done;
  if (done) return;
  done = true;
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old, sa;
    if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    memset(&sa, 0, sizeof sa); /* (ignored, or handled by a caller's code: left alone) */
    sa.sa_handler = remove_temps_on_signal;
    sa.sa_flags = (int)SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(sigs[i], &sa, NULL);
  }
}

int cli_mkstemp(char *tmpl, const char *replaces) {
  int fd = mkstemp(tmpl);
  if (fd < 0) return -1;
  /* the mode of the file it replaces, else the one open(2) would give (not mkstemp's 0600) */
  struct stat old;
  mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, replaces && stat(replaces, &old) == 0 ? (old.st_mode & 07777) : (0666 & ~mask));
  return fd;
}

static bool wants_temp(const char *path) {
  struct stat st;
  return stat(path, &st) != 0 || S_ISREG(st.st_mode); /* (a device or FIFO: as it is) */
}

/* The file an output path stands for: a symlink's target (written as before, through the
 * link: the link stays), else path itself. A new string, or NULL (memory). */
static char *output_target(const char *path) {
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
    char *real = realpath(path, NULL);
    if (real) return real;
    /* (a dangling link: its target is made where it points) */
    char buf[4096];
    ssize_t n = readlink(path, buf, sizeof buf - 1);
    if (n > 0 && buf[0] == '/') {
      buf[n] = '\0';
      return strdup(buf);
    }
  }
  return strdup(path);
}

int cli_out_temp(const char *cmd, const char *path) {
  char *target = output_target(path); /* (the temporary file goes beside the real file) */
  if (!target) {
    cli_error(cmd, "%s: out of memory", cli_term(path));
    return -1;
  }
  int slot = free_slot();
  const char *slash = strrchr(target, '/');
  size_t dir = slash ? (size_t)(slash - target) + 1 : 0;
  size_t need = strlen(target) + sizeof ".etr-XXXXXX" + 1;
  char *tmp = slot >= 0 ? malloc(need) : NULL;
  char *final = tmp ? strdup(path) : NULL;
  if (!final) {
    free(tmp);
    free(target);
    cli_error(cmd, "%s: out of memory", cli_term(path));
    return -1;
  }
  /* ".<name>.etr-XXXXXX" in the output's directory: rename(2) stays in one file system */
  snprintf(tmp, need, "%.*s.%s.etr-XXXXXX", (int)dir, target, target + dir);
  watch_signals();
  int fd = cli_mkstemp(tmp, target);
  if (fd < 0) {
    cli_error(cmd, "%s: cannot create a file beside it: %s", cli_term(path), strerror(errno));
    free(tmp);
    free(final);
    free(target);
    return -1;
  }
  g_outs[slot].final = final;
  g_outs[slot].target = target;
  g_outs[slot].f = NULL;
  g_temps[slot] = tmp;
  return fd;
}

static int slot_of(const char *path) {
  for (int i = 0; i < (int)g_n_slots; i++)
    if (g_outs[i].final && !strcmp(g_outs[i].final, path)) return i;
  return -1;
}

static void slot_free(int i) {
  char *t = g_temps[i];
  g_temps[i] = NULL;
  free(t);
  free(g_outs[i].final);
  free(g_outs[i].target);
  g_outs[i].final = g_outs[i].target = NULL;
  g_outs[i].f = NULL;
}

void cli_temp_watch(const char *tmp) {
  int i = free_slot();
  if (i < 0) return; /* (not watched; nothing worse) */
  watch_signals();
  g_temps[i] = strdup(tmp);
}

void cli_temp_unwatch(const char *tmp) {
  for (int i = 0; i < (int)g_n_slots; i++)
    if (g_temps[i] && !g_outs[i].final && !strcmp(g_temps[i], tmp)) {
      slot_free(i);
      return;
    }
}

int cli_out_commit(const char *cmd, const char *path) {
  int i = slot_of(path);
  if (i < 0) return ETR_CLI_OK; /* (written in place: a device, a FIFO) */
  int rc = ETR_CLI_OK;
  if (rename(g_temps[i], g_outs[i].target) != 0) {
    cli_error(cmd, "%s: cannot replace it: %s", cli_term(path), strerror(errno));
    unlink(g_temps[i]);
    rc = ETR_CLI_FAIL;
  }
  slot_free(i);
  return rc;
}

int cli_out_compression(const char *cmd, const char *path) {
  if (!path || !strcmp(path, "-")) return 0;
  size_t n = strlen(path);
  if (n > 3 && !strcasecmp(path + n - 3, ".gz")) return 1;
  static const char *const unwritten[] = {".zst", ".zstd", ".xz", ".bz2", ".lz4"};
  for (size_t i = 0; i < sizeof unwritten / sizeof unwritten[0]; i++) {
    size_t k = strlen(unwritten[i]);
    if (n > k && !strcasecmp(path + n - k, unwritten[i])) {
      cli_error(cmd, "%s: etr writes gzip (.gz) or plain files, not this compression",
                cli_term(path));
      return -1;
    }
  }
  return 0;
}

/* A FILE writing gzip through zlib onto a descriptor (fopencookie): every command's output
 * named .gz is compressed, as `etr convert`'s and the library's are. Level 1: the output is
 * written as fast as it is made. */
static ssize_t gz_cookie_write(void *c, const char *buf, size_t n) {
  size_t done = 0;
  while (done < n) { /* (gzwrite takes an unsigned count) */
    unsigned part = n - done > (1u << 30) ? (1u << 30) : (unsigned)(n - done);
    int w = gzwrite((gzFile)c, buf + done, part);
    if (w <= 0) {
      int zerr;
      gzerror((gzFile)c, &zerr);
      if (zerr != Z_ERRNO) errno = EIO;
      return -1;
    }
    done += (size_t)w;
  }
  return (ssize_t)n;
}

static int gz_cookie_close(void *c) {
  errno = 0;
  int rc = gzclose((gzFile)c); /* (finishes the stream, closes the descriptor) */
  if (rc == Z_OK) return 0;
  if (rc != Z_ERRNO || !errno) errno = EIO;
  return -1;
}

static FILE *open_stream(int fd, bool gz) {
  if (!gz) return fdopen(fd, "w");
  gzFile g = gzdopen(fd, "wb1");
  if (!g) return NULL;
  cookie_io_functions_t io = {NULL, gz_cookie_write, NULL, gz_cookie_close};
  FILE *f = fopencookie(g, "w", io);
  if (!f) gzclose(g);
  return f;
}

FILE *cli_open_output(const char *cmd, const char *path) {
  if (!path || !strcmp(path, "-")) return cli_stdout_check(cmd) == ETR_CLI_OK ? stdout : NULL;
  if (cli_is_input(path)) {
    cli_error(cmd, "%s: is an input of this command (or a link to one): refusing to overwrite it",
              cli_term(path));
    return NULL;
  }
  int comp = cli_out_compression(cmd, path);
  if (comp < 0) return NULL;
  if (!wants_temp(path)) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? open_stream(fd, comp == 1) : NULL;
    if (!f) {
      cli_error(cmd, "%s: cannot create: %s", cli_term(path), strerror(errno));
      if (fd >= 0) close(fd);
    }
    return f;
  }
  int fd = cli_out_temp(cmd, path);
  if (fd < 0) return NULL;
  FILE *f = open_stream(fd, comp == 1);
  if (!f) {
    cli_error(cmd, "%s: %s", cli_term(path), strerror(errno ? errno : ENOMEM));
    close(fd);
    cli_discard_output(path);
    return NULL;
  }
  g_outs[slot_of(path)].f = f;
  return f;
}

void cli_discard_output(const char *path) {
  if (!path) return;
  int i = slot_of(path);
  if (i >= 0) { /* the temporary file goes; what path holds stays */
    unlink(g_temps[i]);
    slot_free(i);
    return;
  }
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) unlink(path);
}

static int close_output(const char *cmd, FILE *f, const char *path, int write_err, bool commit);

int cli_close_output(const char *cmd, FILE *f, const char *path) {
  return close_output(cmd, f, path, 0, true);
}

int cli_close_output_err(const char *cmd, FILE *f, const char *path, int write_err) {
  return close_output(cmd, f, path, write_err, true);
}

int cli_close_output_pending(const char *cmd, FILE *f, const char *path) {
  return close_output(cmd, f, path, 0, false);
}

static int close_output(const char *cmd, FILE *f, const char *path, int write_err, bool commit) {
  if (!f) return ETR_CLI_FAIL;
  const char *name = (!path || !strcmp(path, "-")) ? "<stdout>" : path;
  bool bad = ferror(f) != 0;
  int err = 0;
  if (fflush(f) != 0) {
    bad = true;
    err = errno;
  }
  if (f != stdout && fclose(f) != 0) {
    bad = true;
    if (!err) err = errno;
  }
  if (bad) {
    if (!err) err = write_err;
    cli_error(cmd, "%s: write error: %s", cli_term(name), err ? strerror(err) : "I/O error");
    if (f != stdout) cli_discard_output(path);
    return ETR_CLI_FAIL;
  }
  return f == stdout || !commit ? ETR_CLI_OK : cli_out_commit(cmd, path);
}

void cli_json_str(FILE *f, const char *s) { cli_json_strn(f, s, strlen(s)); }

void cli_json_strn(FILE *f, const char *s, size_t len) {
  putc('"', f);
  for (const unsigned char *p = (const unsigned char *)s, *e = p + len; p < e; p++) {
    unsigned c = *p;
    switch (c) {
      case '"':
        fputs("\\\"", f);
        break;
      case '\\':
        fputs("\\\\", f);
        break;
      case '\n':
        fputs("\\n", f);
        break;
      case '\r':
        fputs("\\r", f);
        break;
      case '\t':
        fputs("\\t", f);
        break;
      default:
        if (c < 0x20)
          fprintf(f, "\\u%04x", c);
        else
          putc((int)c, f);
    }
  }
  putc('"', f);
}

int cli_check_schema(const char *cmd, const char *path, const rd_rheader *h) {
  int a, b, c;
  if (h == NULL || h->schema == NULL || sscanf(h->schema, "%d.%d.%d", &a, &b, &c) != 3)
    return ETR_CLI_OK;
  if (a > 1 || (a == 1 && (b > 0 || c >= 2))) return ETR_CLI_OK;
  cli_error(cmd,
            "%s: byte 0: schema \"%s\" is PyTorch's execution_graph trace (before 1.0.2: "
            "nodes name their parent \"parent\", inputs are flat lists), which etr does not "
            "read; it reads schemas 1.0.2 to 1.1.1 (etr.torch writes 1.1.1)",
            strcmp(path, "-") ? cli_term(path) : "<stdin>", cli_term(h->schema));
  return ETR_CLI_FAIL;
}
