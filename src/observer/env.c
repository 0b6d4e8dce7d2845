/* Environment activation: ETR_TRACE=path records the whole process with no code change.
 *
 *   ETR_TRACE=path          trace file; "%p" becomes the process id, "%r" the rank
 *                           (etr/dist.h: RANK, else other launchers' variables, else 0)
 *   ETR_TRACE_SCHEMA=1.1.0  or 1.1.1 (default)
 *   ETR_TRACE_TIMING=0      omit ts / inclusive_dur / exclusive_dur
 *   ETR_TRACE_TIMING=ns     also the attrs ts_ns and dur_ns (nanoseconds)
 *   ETR_TRACE_SAMPLE=p      record this fraction of ops (0 < p <= 1)
 *   ETR_TRACE_BUFFER_KB=n   per-thread buffer chunk size
 *   ETR_TRACE_TRACEBACK=all  a traceback on every op ("1", "on" too); any other value but
 *                           "0"/"off" is an fnmatch(3) pattern of op names ("aten::mm*")
 *   ETR_TRACE_TRACEBACK_EVERY=n   then 1 op in n per thread
 *   ETR_TRACE_TRACEBACK_DEPTH=n   frames kept (default 64, at most 256)
 *   ETR_TRACE_SYMBOLIZE=module    write module+build-id+offset (resolve with etr symbolize)
 *   ETR_TRACE_FLUSH_MS=n    a completed node is in the file within n ms (default 1000)
 *   ETR_TRACE_FLUSH_KB=n    the writer writes whenever n KiB are buffered (default 512)
 *   ETR_TRACE_SYNC=1        fdatasync after each timed flush (survives power loss)
 *   ETR_TRACE_STALL_MS=n    a pipe/FIFO/socket output that takes nothing for n ms, or a writer
 *                           stuck that long while recorders wait, is given up (default 10000;
 *                           recording stops, losses counted)
 *   ETR_TRACE_RING_MB=n     flight recorder: keep the latest n MiB of events, written at exit,
 *                           etr_trace_dump and (with ETR_TRACE_SIGNALS=1) a fatal signal
 *   ETR_TRACE_SIGNALS=1     finalize the file on SIGSEGV, SIGBUS, SIGABRT, SIGTERM, SIGINT
 *                           (and SIGFPE, SIGILL, SIGHUP, SIGQUIT, SIGPIPE, SIGXCPU),
 *                           then hand the signal on (off by default: signals are the host's;
 *                           docs/RELIABILITY.md)
 *   ETR_TRACE_FORKS=1       a child forked without exec that records writes its own file
 *                           (path.<pid>, or the path %p makes), opened at its first record
 *                           (off by default: such a child records nothing)
 * Problems are reported through the log hook (ETR_LOG=1 shows them) and never stop the
 * process. At exit (or library unload) any trace still open is finalized.
 *
 * A setuid or setgid program (the kernel's secure-execution mode, AT_SECURE) ignores all
 * of these, as glibc ignores MALLOC_TRACE and LD_DEBUG_OUTPUT there: otherwise any user
 * could have it create or truncate a file of their choosing with its privileges.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* secure_getenv */
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "etr/dist.h"
#include "etr/trace.h"
#include "observer/registry.h"
#include "observer/internal.h"

void etr__trace_set_env(etr_trace *tr);
void etr__trace_shutdown(void);
bool etr__trace_file_id(const etr_trace *tr, unsigned long long *dev, unsigned long long *ino);
const char *etr__trace_path(const etr_trace *tr);

/* Our variables, NULL in secure-execution mode (see the top of this file). */
static const char *env_get(const char *name) { return secure_getenv(name); }

/* Expands %p to the pid, %r to the rank and %% to %; false when the result does not fit. */
static bool expand_path(const char *in, char *out, size_t cap) {
  size_t o = 0;
  for (const char *p = in; *p; p++) {
    char tmp[32];
    const char *piece = p;
    size_t n = 1;
    if (p[0] == '%' && p[1] == 'p') {
      n = (size_t)snprintf(tmp, sizeof tmp, "%ld", (long)getpid());
      piece = tmp;
      p++;
    } else if (p[0] == '%' && p[1] == 'r') {
      n = (size_t)snprintf(tmp, sizeof tmp, "%lld", (long long)etr_dist_rank());
      piece = tmp;
      p++;
    } else if (p[0] == '%' && p[1] == '%') {
      p++;
    }
    if (o + n + 1 > cap) return false;
    memcpy(out + o, piece, n);
    o += n;
  }
  out[o] = '\0';
  return true;
}

/* A process that a traced process starts (fork+exec, posix_spawn, system()) inherits
 * ETR_TRACE. Without %p in it, it would truncate the file its parent is still writing. So
 * the process that opens the file exports ETR_TRACE_WRITER=pid:dev:ino, and a process that
 * finds the file it is about to open is that one, written by another process still alive,
 * writes its own file instead: path with ".<pid>" before ".json" (docs/API.md). A file the
 * writer closed and removed (a launcher that records nothing itself) is no conflict. A mark
 * that names this very process means it called exec without fork while tracing: the image
 * before it wrote a trace (left unfinalized, the writer gone with it), which the new image
 * must not truncate either; it writes ".<pid>" too, or ".<pid>.<n>" after further execs. */
#define WRITER_VAR "ETR_TRACE_WRITER"

/* The mark, when the variable holds one. */
typedef struct writer_mark {
  long pid;
  unsigned long long dev, ino;
} writer_mark;

/* The mark this process set (env_open) and the trace it names the file of. A flight
 * recorder's dump replaces that file by a new one (writer_thread.c), and its writer thread
 * then moves the mark along (etr__env_file_replaced). */
static char g_mark[96];
static _Atomic(const etr_trace *) g_marked;

void etr__env_file_replaced(const etr_trace *tr, unsigned long long dev, unsigned long long ino) {
  if (atomic_load_explicit(&g_marked, memory_order_acquire) != tr) return;
  /* Only a mark still as this process set it: one the host changed or removed is its own.
   * The variable exists then, so glibc's setenv replaces its value's pointer in place (one
   * store, under its lock), which a host thread's getenv reads whole, old or new; the old
   * value is never freed. So the environment array is never reallocated under a reader. */
  const char *v = getenv(WRITER_VAR);
  if (!v || strcmp(v, g_mark) != 0) return;
  char mark[sizeof g_mark];
  snprintf(mark, sizeof mark, "%ld:%llu:%llu", (long)getpid(), dev, ino);
  if (setenv(WRITER_VAR, mark, 1) == 0) memcpy(g_mark, mark, sizeof mark);
}

static bool read_mark(writer_mark *m) {
  const char *v = env_get(WRITER_VAR);
  return v && sscanf(v, "%ld:%llu:%llu", &m->pid, &m->dev, &m->ino) == 3;
}

/* Whether path is the file the mark names, whoever wrote it and whether or not that writer
 * is still alive. */
static bool names_marked_file(const writer_mark *m, const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && (unsigned long long)st.st_dev == m->dev &&
         (unsigned long long)st.st_ino == m->ino;
}

/* Whether another open file description holds the lock a trace takes on the regular file
 * it writes (trace.c): another process writes it, or a forked one still holds it. */
static bool locked_by_writer(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return false;
  bool locked = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return locked;
}

/* Whether a live process other than this one writes path: its writer mark says so, or (the
 * mark lost: an environment rebuilt by the host) the file's lock. */
static bool written_by_other_process(const char *path) {
  writer_mark m;
  if (read_mark(&m) && m.pid != (long)getpid() && names_marked_file(&m, path) &&
      (kill((pid_t)m.pid, 0) == 0 || errno == EPERM))
    return true;
  return locked_by_writer(path);
}

static bool written_before_exec(void) {
  writer_mark m;
  return read_mark(&m) && m.pid == (long)getpid();
}

/* path with ".<pid>" (n > 1: ".<pid>.<n>") before its ".json" / ".json.gz" / ".etr" ending
 * (else at its end): the ending chooses the format, so it stays last. */
static bool own_path(const char *path, unsigned n, char *out, size_t cap) {
  size_t len = strlen(path), base = len;
  /* (by the ending alone: a directory may hold ".json" in its name) */
  static const char *const endings[] = {".json.gz", ".json", ".etr"};
  for (size_t i = 0; i < sizeof endings / sizeof endings[0]; i++) {
    size_t k = strlen(endings[i]);
    if (len > k && strcasecmp(path + len - k, endings[i]) == 0) {
      base = len - k;
      break;
    }
  }
  char nth[16] = "";
  if (n > 1) snprintf(nth, sizeof nth, ".%u", n);
  int w = snprintf(out, cap, "%.*s.%ld%s%s", (int)base, path, (long)getpid(), nth, path + base);
  return w > 0 && (size_t)w < cap;
}

/* A positive integer no larger than max from the environment variable name, else 0. */
static uint32_t env_count(const char *name, unsigned long max) {
  const char *v = env_get(name);
  if (!v || !*v) return 0;
  char *end;
  unsigned long n = strtoul(v, &end, 10);
  if (*end || n == 0 || n > max) {
    etr__log(ETR_LOG_WARN, "%s=%s ignored (1..%lu)", name, v, max);
    return 0;
  }
  return (uint32_t)n;
}

static void env_traceback(etr_traceback_options *tb) {
  const char *v = env_get("ETR_TRACE_TRACEBACK");
  if (!v || !*v || etr__env_flag_off(v)) return;
  tb->enabled = true;
  if (!etr__env_flag_on(v)) tb->pattern = v; /* copied by etr_trace_open */
  tb->every = env_count("ETR_TRACE_TRACEBACK_EVERY", 1000000000ul);
  tb->max_depth = env_count("ETR_TRACE_TRACEBACK_DEPTH", 256);
  v = env_get("ETR_TRACE_SYMBOLIZE");
  if (v && !strcmp(v, "module"))
    tb->symbolize = ETR_SYMBOLIZE_MODULE;
  else if (v && *v && strcmp(v, "full"))
    etr__log(ETR_LOG_WARN, "ETR_TRACE_SYMBOLIZE=%s unknown (full or module); using full", v);
}

/* Open and enable the ETR_TRACE trace. parent: in a forked child (ETR_TRACE_FORKS), the
 * file of the parent's trace, which the path may name even after the parent ended (a
 * daemon's first process): that one is never reopened, nor the file the writer mark names
 * (the variable may have been unset or changed since; the parent's trace says it too), nor
 * the path the parent's trace opened (parent_path): a flight recorder's dump after the
 * fork replaced its file by another (writer_thread.c), which neither the mark nor the
 * child's copy of the parent's trace names. */
static void env_open(const writer_mark *parent, const char *parent_path) {
  const char *path = env_get("ETR_TRACE");
  if (!path && getenv("ETR_TRACE"))
    etr__log(ETR_LOG_WARN, "ETR_TRACE ignored: a setuid or setgid program; not tracing");
  if (!path || !*path) return;
  char full[4096];
  if (!expand_path(path, full, sizeof full)) {
    etr__log(ETR_LOG_ERROR, "ETR_TRACE path too long; not tracing");
    return;
  }
  /* (an earlier image of this process wrote a trace: its file, wherever it went, is kept) */
  bool wrote_before = written_before_exec();
  bool other = written_by_other_process(full), exec_again = !other && wrote_before;
  writer_mark m;
  if (parent && !other && !exec_again &&
      (names_marked_file(parent, full) || (read_mark(&m) && names_marked_file(&m, full)) ||
       (parent_path && strcmp(parent_path, full) == 0)))
    other = true;
  if (other || exec_again) {
    char mine[4096];
    unsigned n = 1;
    do {
      if (!own_path(full, n, mine, sizeof mine)) {
        etr__log(ETR_LOG_ERROR, "ETR_TRACE path too long; not tracing");
        return;
      }
    } while ((exec_again || wrote_before) && access(mine, F_OK) == 0 && ++n < 10000);
    /* (information, not a warning: a forked worker or a child that inherits the variable
     * does this as designed, and prints nothing unless ETR_LOG asks) */
    if (other && read_mark(&m) && names_marked_file(&m, full))
      etr__log(ETR_LOG_INFO, "ETR_TRACE=%s is the file of process %ld; this process writes %s",
               full, m.pid, mine);
    else if (other)
      etr__log(ETR_LOG_INFO, "ETR_TRACE=%s is written by another process; this process writes %s",
               full, mine);
    else
      etr__log(ETR_LOG_WARN,
               "ETR_TRACE=%s: this process called exec while tracing; the trace of the image "
               "before it is kept as it was (unless that image closed it first, as the etr "
               "Python package does, it is not finalized: etr repair completes it); this "
               "image writes %s",
               full, mine);
    memcpy(full, mine, strlen(mine) + 1);
  }
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  const char *v = env_get("ETR_TRACE_SCHEMA");
  if (v && *v) {
    if (!strcmp(v, "1.1.0") || !strcmp(v, "1.1.0-chakra.0.0.4")) {
      opt.schema = ETR_SCHEMA_1_1_0;
    } else if (strcmp(v, "1.1.1") && strcmp(v, "1.1.1-chakra.0.0.4")) {
      etr__log(ETR_LOG_WARN, "ETR_TRACE_SCHEMA=%s unknown; using 1.1.1", v);
    }
  }
  opt.no_timing = etr__env_flag_off(env_get("ETR_TRACE_TIMING"));
  v = env_get("ETR_TRACE_TIMING");
  opt.ns_timing = v && !strcmp(v, "ns");
  if (v && *v && !opt.no_timing && !opt.ns_timing && !etr__env_flag_on(v))
    etr__log(ETR_LOG_WARN, "ETR_TRACE_TIMING=%s unknown (0, 1 or ns); timing on, in us", v);
  v = env_get("ETR_TRACE_SAMPLE");
  if (v && *v) {
    char *end;
    double p = strtod(v, &end);
    if (*end || !(p > 0.0 && p <= 1.0))
      etr__log(ETR_LOG_WARN, "ETR_TRACE_SAMPLE=%s is not in (0, 1]; recording every op", v);
    else
      opt.sample_probability = p;
  }
  v = env_get("ETR_TRACE_BUFFER_KB");
  if (v && *v) {
    char *end;
    unsigned long kb = strtoul(v, &end, 10);
    if (*end || kb == 0 || kb > ETR__BUFFER_KB_MAX)
      etr__log(ETR_LOG_WARN, "ETR_TRACE_BUFFER_KB=%s ignored (1..%u)", v, ETR__BUFFER_KB_MAX);
    else
      opt.buffer_kb = (uint32_t)kb;
  }
  etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT, tb_open;
  env_traceback(&tb);
  opt.flush_ms = env_count("ETR_TRACE_FLUSH_MS", 86400000ul);
  opt.flush_kb = env_count("ETR_TRACE_FLUSH_KB", 1048576ul);
  opt.sync = etr__env_switch("ETR_TRACE_SYNC", false);
  opt.stall_ms = env_count("ETR_TRACE_STALL_MS", 86400000ul);
  opt.ring_mb = env_count("ETR_TRACE_RING_MB", 1048576ul);
  /* Opt-in: a host's signal handling must not change because a library it links traces. */
  opt.fatal_signals = etr__env_switch("ETR_TRACE_SIGNALS", false);
  /* Every trace describes its process groups (the default one at least), as PyTorch's does:
   * that node is recorded first, without a traceback (it would show this constructor). */
  tb_open = tb; /* the symbolize mode is fixed at open; capture starts below */
  tb_open.enabled = false;
  opt.traceback = &tb_open;
  etr_trace *tr;
  int rc = etr_trace_open(full, &opt, &tr);
  if (rc != 0) {
    /* (the flight recorder's ring is allocated whole at open: a size the machine cannot give
     * is the likely cause, and the message names it) */
    if (rc == ETR_ENOMEM && opt.ring_mb)
      etr__log(ETR_LOG_ERROR,
               "ETR_TRACE=%s: out of memory for the flight recorder's ring "
               "(ETR_TRACE_RING_MB=%lu: a smaller ring, or none, records)",
               full, (unsigned long)opt.ring_mb);
    else
      etr__log(ETR_LOG_ERROR, "ETR_TRACE=%s: %s", full, etr_strerror(rc));
    return;
  }
  struct stat st;
  char mark[96];
  if (stat(full, &st) == 0) {
    snprintf(mark, sizeof mark, "%ld:%llu:%llu", (long)getpid(), (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    /* In the library's constructor: at process start, or inside the dlopen that loads it
     * (setenv is not thread-safe; a host reading environ on another thread at that moment
     * is the one risk, taken for a child's file never clobbering this one). In a forked
     * child the variable exists already (env_fork_child): glibc then replaces the value's
     * pointer in place, which a concurrent getenv reads whole, old or new. */
    if (setenv(WRITER_VAR, mark, 1) == 0) {
      memcpy(g_mark, mark, sizeof mark);
      atomic_store_explicit(&g_marked, tr, memory_order_release);
    }
  }
  rc = etr_trace_enable(tr);
  if (rc != 0) etr__log(ETR_LOG_ERROR, "ETR_TRACE: enable failed: %s", etr_strerror(rc));
  if (rc == 0) etr_dist_record_groups();
  if (tb.enabled && (rc = etr_trace_set_traceback(tr, &tb)) != 0)
    etr__log(ETR_LOG_ERROR, "ETR_TRACE: tracebacks not enabled: %s", etr_strerror(rc));
  etr__trace_set_env(tr);
}

/* ETR_TRACE_FORKS: the child of a fork (single-threaded here, the registry's handler has
 * already stopped the parent's trace in it) opens its own trace at its first record, not
 * here: a child that execs at once (fork+exec, system()) leaves no file behind. */
static void env_child_first_record(void) {
  etr_trace *parents = etr_trace_current();
  writer_mark p = {0, 0, 0}; /* (dev and ino 0 name no file) */
  char *parent_path = NULL;
  if (parents) {
    etr__trace_file_id(parents, &p.dev, &p.ino);
    const char *pp = etr__trace_path(parents);
    parent_path = pp ? strdup(pp) : NULL;
    etr_trace_close(parents); /* (this process's copy: freed, nothing written) */
  }
  env_open(&p, parent_path);
  free(parent_path);
}

static void env_fork_child(void) {
  if (!etr_trace_current()) return;
  /* The child sets the mark at its first record, when it may have started threads: make
   * the variable exist now, while it has one thread, so that setting it then replaces a
   * value in place and never grows (reallocates) the environment under another thread's
   * getenv. (An empty mark is no mark.) */
  if (!getenv(WRITER_VAR)) setenv(WRITER_VAR, "", 1);
  etr__registry_at_first_record(env_child_first_record);
}

__attribute__((constructor)) static void etr_env_start(void) {
  env_open(NULL, NULL);
  /* (registered after the registry's handlers, which run first in the child) */
  if (etr_trace_current() && etr__env_switch("ETR_TRACE_FORKS", false))
    pthread_atfork(NULL, NULL, env_fork_child);
}

__attribute__((destructor)) static void etr_env_stop(void) { etr__trace_shutdown(); }

/* quick_exit runs the functions given to at_quick_exit and no destructor: finalize there
 * too (registered when the library loads; before 2026-11-28 such a trace was left for
 * etr repair, every op since the last timed flush lost). */
static void etr_quick_exit(void) { etr__trace_shutdown(); }
__attribute__((constructor)) static void etr_quick_exit_register(void) {
  (void)at_quick_exit(etr_quick_exit);
}
