/* What a trace is told (trace.c opens it): its options, read in this library's layout or in
 * etr 0.1.0's, its traceback configuration, which can change while it records, the
 * paths that name one of this process's descriptors, and what a path's ending asks for. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "observer/internal.h"
#include "observer/registry.h"
#include "observer/trace_internal.h"

/* etr 0.1.0's etr_trace_options held its traceback options by value in the middle (104
 * bytes). A program built against that header passes this layout: it is read as such, so
 * that it keeps working with this library. */
typedef struct options_0_1 {
  size_t struct_size;
  etr_schema schema;
  bool no_timing;
  uint32_t buffer_kb, max_buffers;
  double sample_probability;
  uint32_t scopes;
  etr_traceback_options traceback;
  uint32_t flush_ms, flush_kb;
  bool sync, fatal_signals;
  uint32_t stall_ms;
  bool ns_timing;
} options_0_1;
_Static_assert(sizeof(options_0_1) == 104, "etr 0.1.0's etr_trace_options is 104 bytes");
_Static_assert(sizeof(etr_trace_options) != sizeof(options_0_1),
               "etr_trace_options may never be 104 bytes: that size means etr 0.1.0's layout");

void etr__trace_options_read(etr_trace_options *o, const etr_trace_options *in,
                             etr_traceback_options *tb) {
  etr_trace_options d = ETR_TRACE_OPTIONS_INIT;
  *o = d;
  if (in && in->struct_size == sizeof(options_0_1)) {
    options_0_1 old;
    memcpy(&old, in, sizeof old);
    o->schema = old.schema;
    o->no_timing = old.no_timing;
    o->buffer_kb = old.buffer_kb;
    o->max_buffers = old.max_buffers;
    o->sample_probability = old.sample_probability;
    o->scopes = old.scopes;
    *tb = old.traceback;
    o->traceback = tb;
    o->flush_ms = old.flush_ms;
    o->flush_kb = old.flush_kb;
    o->sync = old.sync;
    o->fatal_signals = old.fatal_signals;
    o->stall_ms = old.stall_ms;
    o->ns_timing = old.ns_timing;
    return;
  }
  if (in) {
    size_t n = in->struct_size && in->struct_size < sizeof *o ? in->struct_size : sizeof *o;
    memcpy(o, in, n);
    o->struct_size = sizeof *o;
  }
}

/* The sizes of the option structs in the first release that had their layout (a field
 * added later grows them): a struct_size between 0 and these is no layout any header had,
 * and its fields would be read short (tracebacks asked for, and silently off). 0 means
 * this libetr's own size. */
#define TRACE_OPTIONS_FIRST_SIZE (offsetof(etr_trace_options, ring_mb) + sizeof(uint32_t))
#define TRACEBACK_OPTIONS_FIRST_SIZE \
  (offsetof(etr_traceback_options, symbolize) + sizeof(etr_symbolize_mode))
_Static_assert(sizeof(etr_trace_options) >= TRACE_OPTIONS_FIRST_SIZE, "options grow only");
_Static_assert(sizeof(etr_traceback_options) >= TRACEBACK_OPTIONS_FIRST_SIZE, "options grow only");

bool etr__trace_options_size_ok(size_t n) { return n == 0 || n >= TRACE_OPTIONS_FIRST_SIZE; }
bool etr__traceback_options_size_ok(size_t n) {
  return n == 0 || n >= TRACEBACK_OPTIONS_FIRST_SIZE;
}

int etr__trace_tb_configure(etr_trace *tr, const etr_traceback_options *in) {
  etr_traceback_options o = ETR_TRACEBACK_OPTIONS_INIT;
  size_t n = in->struct_size && in->struct_size < sizeof o ? in->struct_size : sizeof o;
  memcpy(&o, in, n);
  if (o.max_depth > ETR__TB_DEPTH_MAX || (unsigned)o.symbolize > ETR_SYMBOLIZE_MODULE)
    return ETR_EINVAL;
  const char *pattern = o.pattern && *o.pattern ? o.pattern : NULL;
  uint32_t every = o.every ? o.every : 1, depth = o.max_depth ? o.max_depth : ETR__TB_DEPTH_DEFAULT;
  /* Recording threads may hold any configuration published before (they read it without a
   * lock), so none is freed before close. One the same as an earlier one is that one again:
   * a host that switches between a few settings (tracebacks on for some steps, off for the
   * others) keeps a few. Until 2026-11-28 each call kept a new one (62 bytes and a copy of
   * the pattern: 1 000 000 switches, 60 MB). Its version is its own, so the threads' cached
   * pattern matches, made under it, still hold. */
  pthread_mutex_lock(&tr->tb_mutex);
  for (etr__tbcfg *e = atomic_load(&tr->tb_cfg); e; e = e->older) {
    if (e->enabled != o.enabled || e->every != every || e->depth != depth ||
        (e->pattern == NULL) != (pattern == NULL) || (pattern && strcmp(e->pattern, pattern)))
      continue;
    atomic_store_explicit(&tr->tb_cfg_now, e, memory_order_release);
    if (e->enabled) atomic_store(&tr->tb_ever, true);
    pthread_mutex_unlock(&tr->tb_mutex);
    return 0;
  }
  pthread_mutex_unlock(&tr->tb_mutex);
  etr__tbcfg *c = calloc(1, sizeof *c);
  if (!c) return ETR_ENOMEM;
  c->enabled = o.enabled;
  if (pattern && !(c->pattern = strdup(pattern))) {
    free(c);
    return ETR_ENOMEM;
  }
  c->every = every;
  c->depth = depth;
  pthread_mutex_lock(&tr->tb_mutex);
  etr__tbcfg *old = atomic_load(&tr->tb_cfg);
  c->older = old;
  c->version = old ? old->version + 1 : 1;
  atomic_store_explicit(&tr->tb_cfg, c, memory_order_release);
  atomic_store_explicit(&tr->tb_cfg_now, c, memory_order_release);
  if (c->enabled) atomic_store(&tr->tb_ever, true);
  pthread_mutex_unlock(&tr->tb_mutex);
  return 0;
}

int etr_trace_set_traceback(etr_trace *tr, const etr_traceback_options *opt) {
  ETR__QUIET_CALL();
  int rc = etr__trace_call_enter(tr); /* (close frees tb_mutex and the configurations) */
  if (rc != 0) return rc;
  rc = opt && etr__traceback_options_size_ok(opt->struct_size) ? etr__trace_tb_configure(tr, opt)
                                                               : ETR_EINVAL;
  etr__trace_call_leave(tr);
  return rc;
}

/* ---- paths that name a descriptor (etr_trace_open) ---- */

/* The number at p when p holds only digits (at most 9), else -1. */
static int whole_number(const char *p) {
  int n = 0, k = 0;
  for (; p[k] >= '0' && p[k] <= '9' && k < 9; k++) n = n * 10 + (p[k] - '0');
  return k && !p[k] ? n : -1;
}

/* The descriptor of this process that path names: /dev/stdin, /dev/stdout, /dev/stderr,
 * /dev/fd/N, /proc/self/fd/N, /proc/thread-self/fd/N, /proc/<our pid>/fd/N; else -1 (a
 * path of another process's descriptor is opened as any file). */
int etr__own_descriptor(const char *path) {
  static const char *const std[] = {"/dev/stdin", "/dev/stdout", "/dev/stderr"};
  for (int i = 0; i < 3; i++)
    if (!strcmp(path, std[i])) return i;
  static const char *const dirs[] = {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"};
  for (int i = 0; i < 3; i++)
    if (!strncmp(path, dirs[i], strlen(dirs[i]))) return whole_number(path + strlen(dirs[i]));
  if (strncmp(path, "/proc/", 6) != 0) return -1;
  const char *fd = strstr(path + 6, "/fd/");
  char pid[16];
  size_t n = fd ? (size_t)(fd - (path + 6)) : 0;
  if (!n || n >= sizeof pid) return -1;
  memcpy(pid, path + 6, n);
  pid[n] = '\0';
  return whole_number(pid) == (int)getpid() ? whole_number(fd + 4) : -1;
}

/* A descriptor of this process to write through: a duplicate of fd (close-on-exec), which
 * shares its open file description, so its offset (the host's output and ours follow each
 * other, as a shell's `> file` or `2>&1` makes them) and its flags. -1 with errno when fd is
 * not open for writing. */
int etr__dup_for_writing(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -1;
  if ((fl & O_ACCMODE) == O_RDONLY) {
    errno = EBADF;
    return -1;
  }
  return fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

int etr__trace_path_format(const char *path, bool *binary, bool *gzip) {
  size_t plen = strlen(path);
#define ENDS_WITH(e) (plen > sizeof e - 1 && strcasecmp(path + plen - (sizeof e - 1), e) == 0)
  *binary = ENDS_WITH(".etr");
  *gzip = ENDS_WITH(".gz");
  int rc = 0;
  if (ENDS_WITH(".etr.gz")) {
    /* JSON under a binary log's name, or a log etr convert cannot read: neither */
    etr__log(ETR_LOG_ERROR,
             "%s: a binary log is written uncompressed (.etr, about a tenth of "
             "the JSON's size); .json.gz is compressed JSON",
             path);
    rc = ETR_EINVAL;
  }
  if (ENDS_WITH(".zst") || ENDS_WITH(".zstd") || ENDS_WITH(".bz2") || ENDS_WITH(".xz") ||
      ENDS_WITH(".lz4")) {
    /* (the commands read zstd, but the library writes gzip only: plain JSON under a
     * compressed name would fail every tool that goes by the name) */
    etr__log(ETR_LOG_ERROR, "%s: etr writes gzip (.json.gz), not this compression", path);
    rc = ETR_EINVAL;
  }
#undef ENDS_WITH
  return rc;
}
