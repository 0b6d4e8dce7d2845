/* The execution-trace observer's life cycle: open, enable, disable, flush, close, fork,
 * exit, the options and the counters. The recording threads' side is in recorder.c, the
 * writer thread in writer_thread.c, the output formats in emit.c (JSON) and binlog.c.
 *
 * Locks, in the order they may nest: g_lock > threads_mutex > q_mutex > reg_lock and
 * threads_lock (registry.c). Recording threads take none on the per-op path; they take q_mutex once
 * per chunk (64 KiB by default) and threads_mutex once per thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "etr/version.h"
#include "observer/internal.h"
#include "observer/registry.h"
#include "observer/ring.h"
#include "observer/tbtable.h"
#include "observer/trace_internal.h"
#include "unwind/unwind.h"

ETR_API uint32_t etr__tracking_ids;

/* The open trace (at most one) and the serial that tells per-thread states apart. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static etr_trace *g_trace;
static uint64_t g_serial;
static etr_trace *g_env_trace;    /* opened through ETR_TRACE */
static etr_trace *g_forked_trace; /* in a forked child: the parent's trace, until closed */

/* ---- the registry's thread exits and the runtime's object deaths ---- */

static void on_thread_exit(etr__thread *thr) {
  etr__fatal_thread_exit(); /* (the thread's alternate signal stack, if fatal.c gave one) */
  pthread_mutex_lock(&g_lock);
  etr_trace *tr = g_trace;
  if (tr && thr->trace_state && thr->trace_serial == tr->serial && tr->pid == getpid()) {
    pthread_mutex_lock(&tr->threads_mutex);
    etr__tstate *ts = thr->trace_state;
    bool was_finished = ts->finished;
    etr__finish_thread(ts, &tr->ops_open_at_thread_exit);
    /* its thread is gone: a new thread may take the state; its tid now names its thread
     * node only (fw_parent) */
    _Atomic uint64_t *slot = etr__tid_slot(tr, ts->tid, false);
    if (slot && atomic_load_explicit(slot, memory_order_relaxed) ==
                    etr__tid_word(ts->tid, (uint64_t)(uintptr_t)ts))
      atomic_store_explicit(slot, etr__tid_word(ts->tid, etr__tid_exited(ts->thread_node_id)),
                            memory_order_release);
    thr->trace_state = NULL; /* (before another thread can take it) */
    if (!was_finished) {
      ts->free_next = tr->tstate_free;
      tr->tstate_free = ts;
    }
    pthread_mutex_unlock(&tr->threads_mutex);
  }
  pthread_mutex_unlock(&g_lock);
  thr->trace_state = NULL;
}

/* ---- object ids ---- */

static void object_died(bool tensor, const void *p) {
  etr__thread *thr = etr__thread_self();
  if (!thr || !p) return;
  etr__quiet_enter(thr); /* (a record here would wait for the shard this thread holds) */
  etr__hazard_publish(&thr->hazard_ids, 1); /* pairs with close's store of the flag */
  if (__atomic_load_n(&etr__tracking_ids, __ATOMIC_SEQ_CST)) {
    etr_trace *tr = __atomic_load_n(&g_trace, __ATOMIC_ACQUIRE);
    if (tr && etr__idmap_remove(tensor ? tr->tensors : tr->storages, p))
      atomic_fetch_add_explicit(&tr->ids_retired, 1, memory_order_relaxed);
  }
  atomic_store_explicit(&thr->hazard_ids, 0, memory_order_release);
  etr__quiet_leave(thr);
}

void etr__tensor_died(const void *impl) { object_died(true, impl); }
void etr__storage_died(const void *storage) { object_died(false, storage); }

/* A host's signal handler that interrupted this thread inside etr's wait for the writer, or
 * inside a call on the trace: close, flush, dump and disable would wait on what it
 * interrupted (they are not async-signal-safe); they return ETR_EBUSY instead. */
#define REFUSE_IN_HANDLER()                                              \
  do {                                                                   \
    if (etr__thread_waiting() || etr__trace_in_call()) return ETR_EBUSY; \
  } while (0)

/* ---- life cycle ---- */

static void set_when(etr_trace *tr) {
  snprintf(tr->when, sizeof tr->when, "1970-01-01 00:00:00");
  time_t now = time(NULL);
  struct tm tm;
  if (localtime_r(&now, &tm)) strftime(tr->when, sizeof tr->when, "%Y-%m-%d %H:%M:%S", &tm);
}

/* The registry's thread-exit and fork events (registry.h), from the first open on. */
static void on_before_fork(void);
static void on_after_fork_parent(void);
static void on_after_fork_child(void);
static const etr__registry_hooks g_hooks = {on_thread_exit, on_before_fork, on_after_fork_parent,
                                            on_after_fork_child};
static pthread_once_t g_hooks_once = PTHREAD_ONCE_INIT;
static void install_hooks(void) {
  etr__registry_init(); /* (the fork handlers, before g_lock is ever taken) */
  etr__registry_set_hooks(&g_hooks);
}

static int trace_open(const char *path, const etr_trace_options *opt, etr_trace **out);

static void *writer_entry(void *arg); /* (the writer thread's start) */
int etr_trace_open(const char *path, const etr_trace_options *opt, etr_trace **out) {
  ETR__QUIET_CALL();
  int cancel = etr__cancel_off();
  int rc = trace_open(path, opt, out);
  etr__cancel_restore(cancel);
  return rc;
}

static int trace_open(const char *path, const etr_trace_options *opt, etr_trace **out) {
  pthread_once(&g_hooks_once, install_hooks);
  etr__main_watch(); /* (lastthread.c) */
  if (out) *out = NULL;
  if (!path || !*path || !out) return ETR_EINVAL;
  if (opt && !etr__trace_options_size_ok(opt->struct_size)) return ETR_EINVAL;
  etr_trace_options o;
  etr_traceback_options tb_0_1;
  etr__trace_options_read(&o, opt, &tb_0_1);
  /* (the 0.1.0 layout's traceback options are its own: read as that layout was) */
  if (o.traceback && o.traceback != &tb_0_1 &&
      !etr__traceback_options_size_ok(o.traceback->struct_size))
    return ETR_EINVAL;
  if ((unsigned)o.schema > ETR_SCHEMA_1_1_0) return ETR_EINVAL;
  if (!(o.sample_probability >= 0.0 && o.sample_probability <= 1.0)) return ETR_EINVAL;
  if (o.buffer_kb > ETR__BUFFER_KB_MAX) return ETR_EINVAL; /* (as ETR_TRACE_BUFFER_KB: env.c) */

  pthread_mutex_lock(&g_lock);
  if (g_trace) {
    pthread_mutex_unlock(&g_lock);
    return ETR_EBUSY;
  }
  etr_trace *tr = calloc(1, sizeof *tr);
  if (!tr) {
    pthread_mutex_unlock(&g_lock);
    return ETR_ENOMEM;
  }
  tr->cross_ends_at_open = atomic_load(&etr__ends_cross_thread);
  tr->opt = o;
  tr->pid = getpid();
  tr->serial = ++g_serial;
  tr->chunk_size = (o.buffer_kb ? o.buffer_kb : 64) * 1024u;
  if (tr->chunk_size < 4096) tr->chunk_size = 4096;
  tr->max_chunks = o.max_buffers ? o.max_buffers : 64;
  if (tr->max_chunks < 2) tr->max_chunks = 2;
  uint32_t ms = o.flush_ms ? o.flush_ms : 1000;
  tr->flush_ns = ms == ETR_FLUSH_NEVER ? INT64_MAX : (int64_t)ms * 1000000;
  tr->flush_bytes = (size_t)(o.flush_kb ? o.flush_kb : 512) * 1024u;
  atomic_init(&tr->next_id, 2); /* 1 is the process node */
  pthread_mutex_init(&tr->threads_mutex, NULL);
  pthread_mutex_init(&tr->tb_mutex, NULL);
  pthread_mutex_init(&tr->q_mutex, NULL);
  sem_init(&tr->wake, 0, 0);
  pthread_cond_init(&tr->space_cond, NULL);
  pthread_cond_init(&tr->done_cond, NULL);
  tr->tensors = etr__idmap_new();
  tr->storages = etr__idmap_new();
  int rc = 0, open_errno = 0;
  tr->fd = -1;
  tr->tables_fd = -1;
  tr->dump_prev_fd = -1;
  if (!(tr->path = strdup(path))) rc = ETR_ENOMEM;
  tr->tid_pages = calloc(ETR__TID_PAGES, sizeof *tr->tid_pages);
  if (!tr->tensors || !tr->storages || !tr->tid_pages || etr__jw_init(&tr->jw, -1, 1u << 20) != 0)
    rc = ETR_ENOMEM;
  size_t plen = strlen(path);
  bool gzip = false;
  if (rc == 0) rc = etr__trace_path_format(path, &tr->binary, &gzip);
  /* gzip at level 1: the writer thread keeps up with the recorders; a trace still shrinks
   * about tenfold */
  if (rc == 0 && gzip && etr__jw_set_gzip(&tr->jw, 1) != 0) rc = ETR_ENOMEM;
  if (rc == 0 && o.traceback) {
    etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
    size_t n = o.traceback->struct_size && o.traceback->struct_size < sizeof tb
                   ? o.traceback->struct_size
                   : sizeof tb;
    memcpy(&tb, o.traceback, n);
    if ((unsigned)tb.symbolize > ETR_SYMBOLIZE_MODULE) rc = ETR_EINVAL;
    tr->tb_symbolize = tb.symbolize;
    if (rc == 0 && tb.enabled) rc = etr__trace_tb_configure(tr, &tb);
  }
  tr->opt.traceback = NULL;   /* the caller's; copied above */
  if (rc == 0 && o.ring_mb) { /* the flight recorder: no timed writes, a dump writes */
    size_t mb = o.ring_mb > (1u << 20) ? (1u << 20) : o.ring_mb;
    if (!(tr->ring = etr__ring_new(mb << 20))) rc = ETR_ENOMEM;
    tr->flush_ns = INT64_MAX;
  }
  /* A path that names a descriptor the host has open (/dev/stdout, /dev/stderr, /dev/fd/N,
   * /proc/<pid>/fd/N), maybe on its own log file: it is written on, never truncated, and
   * gets no file beside it. (Other paths under /dev, such as /dev/shm/..., are files.) One
   * of this process's is written through a duplicate, never reopened: a new open file
   * description would have an offset of its own, and the host's writes would land on the
   * trace's bytes (stdout redirected to a file). */
  bool stream_path = !strncmp(path, "/dev/std", 8) || !strncmp(path, "/dev/fd/", 8) ||
                     (!strncmp(path, "/proc/", 6) && strstr(path, "/fd/") != NULL);
  int own_fd = stream_path ? etr__own_descriptor(path) : -1;
  if (rc == 0 && !tr->binary && !tr->ring && !stream_path) {
    /* path.tables: the traceback tables as they grow (writer_thread.c). One left by an
     * earlier run that was cut short would be taken for this trace's: removed now. */
    if (!(tr->tables_path = malloc(plen + sizeof ".tables"))) rc = ETR_ENOMEM;
    if (rc == 0) {
      memcpy(tr->tables_path, path, plen);
      memcpy(tr->tables_path + plen, ".tables", sizeof ".tables");
    }
  }
  if (rc == 0) {
    /* O_NONBLOCK: opening a FIFO with no reader must not block the host (ENXIO instead). */
    /* (not truncated yet: a regular file another process writes is left to it, below) */
    tr->fd =
        own_fd >= 0
            ? etr__dup_for_writing(own_fd)
            : open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (stream_path ? O_APPEND : 0),
                   0644);
    struct stat st;
    bool busy = false; /* (another writer's lock: not open's own EBUSY, a busy device) */
    if (tr->fd >= 0 && !stream_path && fstat(tr->fd, &st) == 0 && S_ISREG(st.st_mode)) {
      /* A regular file is locked while we write it (advisory, never waited for): a process
       * started under the same ETR_TRACE path sees it and writes its own file (env.c), even
       * when the environment it was given lost our writer mark; one that opens the same
       * path itself (two ranks given one name) is refused here instead of truncating the
       * other's trace. Released when the file's last descriptor closes (at close, or at
       * exec: it is O_CLOEXEC). A file system without locks (ENOLCK, EINVAL) is written
       * as before. */
      if (flock(tr->fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        close(tr->fd);
        tr->fd = -1;
        busy = true;
      } else if (ftruncate(tr->fd, 0) != 0) {
        int e = errno;
        close(tr->fd);
        tr->fd = -1;
        errno = e;
      }
    }
    if (tr->fd >= 0 && tr->tables_path) unlink(tr->tables_path);
    if (busy) {
      open_errno = EBUSY;
      etr__log(ETR_LOG_ERROR,
               "trace file %s is being written by another process (it holds the file's lock); "
               "give each process its own file (%%p, %%r)",
               path);
      rc = ETR_EOPEN;
    } else if (tr->fd < 0) {
      open_errno = errno;
      etr__log(ETR_LOG_ERROR, "cannot open trace file %s: %s", path,
               errno == ENXIO ? "a FIFO with no reader" : strerror(errno));
      rc = ETR_EOPEN;
    }
  }
  if (rc == 0) {
    /* A pipe, FIFO or socket stays non-blocking, so a reader that stops reading costs a
     * bounded wait (stall_ms), not a hang; other files block as usual. */
    struct stat st;
    if (fstat(tr->fd, &st) != 0) memset(&st, 0, sizeof st);
    bool stream = S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
    /* (a duplicate shares the host's flags: left as the host has them) */
    if (!stream && own_fd < 0) fcntl(tr->fd, F_SETFL, fcntl(tr->fd, F_GETFL) & ~O_NONBLOCK);
    if (tr->tables_path && !S_ISREG(st.st_mode)) { /* a pipe or device: no file beside it */
      free(tr->tables_path);
      tr->tables_path = NULL;
    }
    /* A flight recorder's dump goes to a file beside this one, renamed over it once whole
     * (writer_thread.c): beside the file itself, not a symbolic link to it. */
    if (tr->ring && S_ISREG(st.st_mode) && !stream_path) {
      char *real = realpath(path, NULL);
      tr->dump_path = real ? real : strdup(path);
      if (tr->dump_path && !(tr->dump_tmp = malloc(strlen(tr->dump_path) + sizeof ".dump-XXXXXX")))
        rc = ETR_ENOMEM;
      if (!tr->dump_path) rc = ETR_ENOMEM;
    }
    tr->jw.stall_ms = o.stall_ms == ETR_FLUSH_NEVER ? -1
                      : o.stall_ms ? (int)(o.stall_ms > INT32_MAX ? INT32_MAX : o.stall_ms)
                                   : 10000;
  }
  if (rc == 0) {
    struct stat st;
    if (fstat(tr->fd, &st) == 0) {
      tr->file_dev = st.st_dev;
      tr->file_ino = st.st_ino;
    }
    tr->jw.fd = tr->fd;
    tr->jw.shared = stream_path;
    etr__jw_prealloc(&tr->jw); /* (a file, not a pipe or a device) */
    etr__clock_start();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    tr->start_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    tr->base_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    set_when(tr);
    tr->seal_node_len = etr__emit_process_text(tr, tr->seal_node, sizeof tr->seal_node);
    /* The header goes to the file now: from here on the file is always a prefix that
     * etr repair (or a signal handler) can complete. A write error is reported later, as
     * any other (close returns ETR_EIO), and stops recording. */
    if (tr->binary)
      etr__bin_emit_header(tr);
    else
      etr__emit_header(tr);
    uint64_t none = 0;
    etr__writer_flush_host(tr, &none); /* (a pipe without reader: no SIGPIPE) */
    tr->header_len = tr->jw.written;   /* file bytes (compressed in a gzip trace) */
    etr_observer_options oo = ETR_OBSERVER_OPTIONS_INIT;
    oo.enter = etr__trace_enter;
    oo.exit = etr__trace_exit;
    oo.user = tr;
    oo.needs = ETR_NEEDS_INPUTS | ETR_NEEDS_OUTPUTS | ETR_NEEDS_IDS;
    oo.scopes = o.scopes;
    oo.sample_probability = o.sample_probability;
    oo.start_disabled = true;
    rc = etr_observer_add(&oo, &tr->obs);
  }
  if (rc == 0) {
    /* The writer starts with every signal blocked (it inherits this thread's mask), so
     * that none of the host's signals is delivered to it, not even before its first line. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int cr = pthread_create(&tr->writer, NULL, writer_entry, tr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (cr != 0) {
      etr_observer_remove(tr->obs);
      rc = ETR_ETHREAD;
    }
  }
  if (rc != 0) {
    if (tr->fd >= 0) {
      close(tr->fd);
      if (!stream_path) unlink(path); /* (never /dev/stdout, or the host's log behind it) */
    }
    etr__trace_free(tr, false);
    free(tr);
    pthread_mutex_unlock(&g_lock);
    if (open_errno) errno = open_errno; /* why the file could not be created */
    return rc;
  }
  __atomic_store_n(&g_trace, tr, __ATOMIC_RELEASE);
  __atomic_store_n(&etr__tracking_ids, 1u, __ATOMIC_SEQ_CST);
  if (o.fatal_signals && etr__fatal_install(tr) != 0)
    etr__log(ETR_LOG_WARN, "cannot install the fatal-signal handlers; recording goes on");
  pthread_mutex_unlock(&g_lock);
  *out = tr;
  return 0;
}

int etr_trace_enable(etr_trace *tr) {
  ETR__QUIET_CALL();
  int rc = etr__trace_call_enter(tr);
  if (rc != 0) return rc;
  if (atomic_load(&tr->failed)) {
    int e = etr__trace_error(tr);
    rc = e ? e : ETR_EIO;
  } else {
    rc = etr_observer_enable(tr->obs);
  }
  if (rc == ETR_ENOENT) rc = ETR_ESTATE; /* (a close that began meanwhile removed it) */
  etr__trace_call_leave(tr);
  return rc;
}

int etr_trace_disable(etr_trace *tr) {
  ETR__QUIET_CALL();
  if (!etr__trace_usable(tr)) return etr__trace_unusable(tr);
  REFUSE_IN_HANDLER();
  int rc = etr__trace_call_enter(tr);
  if (rc != 0) return rc;
  /* Ops in flight are counted at the transition only: threads_mutex orders racing calls. */
  pthread_mutex_lock(&tr->threads_mutex);
  bool was_enabled = etr_observer_is_enabled(tr->obs) == 1;
  rc = etr_observer_disable(tr->obs);
  if (rc == ETR_ENOENT) rc = ETR_ESTATE; /* (a close that began meanwhile removed it) */
  uint64_t open = 0;
  if (was_enabled)
    for (etr__tstate *ts = tr->threads; ts; ts = ts->next)
      open += atomic_load_explicit(&ts->depth_pub, memory_order_relaxed);
  pthread_mutex_unlock(&tr->threads_mutex);
  atomic_fetch_add_explicit(&tr->ops_open_at_disable, open, memory_order_relaxed);
  etr__trace_call_leave(tr);
  etr_script_release_pending(); /* a safe point for the script unwinder (no lock held) */
  return rc;
}

bool etr_trace_is_enabled(const etr_trace *tr) {
  if (etr__trace_call_enter(tr) != 0) return false;
  bool on = etr_observer_is_enabled(tr->obs) == 1;
  etr__trace_call_leave(tr);
  return on;
}

static int trace_flush(etr_trace *tr);
int etr_trace_flush(etr_trace *tr) {
  int cancel = etr__cancel_off();
  int rc = trace_flush(tr);
  etr__cancel_restore(cancel);
  return rc;
}

/* A flush (or dump) that close overtakes, before the writer did its work, returns ETR_ESTATE
 * at once: close writes those nodes (and says how that went). */
static int trace_flush(etr_trace *tr) {
  if (!etr__trace_usable(tr)) return etr__trace_unusable(tr);
  REFUSE_IN_HANDLER();
  int rc = etr__trace_call_enter(tr);
  if (rc != 0) return rc;
  etr__thread *thr = etr__thread_self();
  /* The caller's own chunk is safe to take only outside our callbacks on this thread. */
  bool own = thr && thr->in_callback == 0 && thr->trace_state && thr->trace_serial == tr->serial;
  if (thr) etr__quiet_enter(thr); /* (the queue's lock, held below, is the recorders') */
  if (own) {
    /* (threads_mutex: close may be finishing this thread's state right now) */
    pthread_mutex_lock(&tr->threads_mutex);
    etr__tstate *ts = thr->trace_state;
    if (!ts->finished) etr__hand_over(ts);
    pthread_mutex_unlock(&tr->threads_mutex);
  }
  pthread_mutex_lock(&tr->q_mutex);
  bool served = false;
  if (!tr->stop) {
    uint64_t gen = ++tr->flush_gen;
    tr->flush_target = tr->q_pushed;
    sem_post(&tr->wake);
    while (tr->flush_done < gen && !tr->stop) pthread_cond_wait(&tr->done_cond, &tr->q_mutex);
    served = tr->flush_done >= gen;
  }
  pthread_mutex_unlock(&tr->q_mutex);
  rc = !served ? ETR_ESTATE : etr__trace_error(tr); /* (before leave: then tr may be freed) */
  etr__trace_call_leave(tr);
  etr_script_release_pending();
  if (thr) etr__quiet_leave(thr);
  return rc;
}

int etr_trace_dump(etr_trace *tr) { return etr_trace_flush(tr); }

int etr_trace_close(etr_trace *tr) { return etr_trace_close_stats(tr, NULL); }

/* Traces whose writer close left behind (join_writer), kept for it until it ends (g_lock). */
static etr_trace *g_abandoned;

/* With no trace open and no writer left behind, no capture runs through the recorder and no
 * writer resolves an older module-map generation: their maps can go (unwind.h). g_lock held,
 * so that a trace opened meanwhile waits. */
static void release_modules_locked(void) {
  if (!g_trace && !g_abandoned) etr__modules_release_old();
}

/* Frees a trace close left behind, once its writer has ended (the file is not finalized:
 * etr repair completes it). By the writer thread itself, or by close when the writer ended
 * before close handed the trace over. */
static void free_left_behind(etr_trace *tr) {
  if (etr__fd_is_ours(tr)) {
    if (!tr->jw.shared) (void)flock(tr->fd, LOCK_UN); /* (as trace_close, for a child's copy) */
    close(tr->fd);
  }
  pthread_mutex_lock(&g_lock);
  for (etr_trace **p = &g_abandoned; *p; p = &(*p)->abandoned_next)
    if (*p == tr) {
      *p = tr->abandoned_next;
      break;
    }
  pthread_mutex_unlock(&g_lock);
  etr__trace_free(tr, false);
  pthread_mutex_lock(&g_lock);
  etr__trace_entomb(tr);
  release_modules_locked();
  pthread_mutex_unlock(&g_lock);
}

static void *writer_entry(void *arg) {
  etr_trace *tr = arg;
  if (etr__writer_main(tr)) free_left_behind(tr); /* (detached: nobody joins it) */
  return NULL;
}

size_t etr__trace_left_behind(void) {
  size_t n = 0;
  pthread_mutex_lock(&g_lock);
  for (etr_trace *t = g_abandoned; t; t = t->abandoned_next) n++;
  pthread_mutex_unlock(&g_lock);
  return n;
}

/* Waits for the writer to end; false when it is stuck: inside write(2) on a file that takes
 * nothing (a hung NFS server), it has written nothing for stall_ms. Close then leaves it
 * behind rather than hang the host (at exit too): the trace is marked failed, so when its
 * write returns the writer discards the rest and ends. */
static bool join_writer(etr_trace *tr) {
  if (pthread_equal(pthread_self(), tr->writer)) { /* (exit on the writer: lastthread.c) */
    (void)etr__writer_main(tr);                    /* its work, done here; never joined */
    return true;
  }
  int ms = tr->jw.stall_ms;
  uint64_t took0 = atomic_load_explicit(&tr->jw.progress, memory_order_relaxed);
  struct timespec dl;
  pthread_mutex_lock(&tr->q_mutex);
  for (bool armed = false; !tr->writer_ended;) {
    if (ms < 0) {
      pthread_cond_wait(&tr->done_cond, &tr->q_mutex);
      continue;
    }
    if (!armed) {
      etr__deadline_ms(&dl, ms);
      armed = true;
    }
    if (pthread_cond_clockwait(&tr->done_cond, &tr->q_mutex, CLOCK_MONOTONIC, &dl) != ETIMEDOUT)
      continue;
    uint64_t took = atomic_load_explicit(&tr->jw.progress, memory_order_relaxed);
    if (took != took0) { /* slow, not stuck */
      took0 = took;
      armed = false;
      continue;
    }
    pthread_mutex_unlock(&tr->q_mutex);
    etr__trace_stalled(tr, ms, "close");
    etr__log(ETR_LOG_ERROR, "trace close: the writer is left behind; the file is not finalized");
    return false;
  }
  pthread_mutex_unlock(&tr->q_mutex);
  pthread_join(tr->writer, NULL);
  return true;
}

static int trace_close(etr_trace *tr, etr_trace_stats *out);
int etr_trace_close_stats(etr_trace *tr, etr_trace_stats *out) {
  ETR__QUIET_CALL();
  int cancel = etr__cancel_off();
  int rc = trace_close(tr, out);
  etr__cancel_restore(cancel);
  return rc;
}

static int trace_close(etr_trace *tr, etr_trace_stats *out) {
  if (!tr) return 0;
  REFUSE_IN_HANDLER();
  pthread_mutex_lock(&g_lock);
  if (tr->closed) { /* closed before (a tombstone): nothing to do */
    pthread_mutex_unlock(&g_lock);
    return ETR_ESTATE;
  }
  if (tr->pid != getpid()) {
    /* A forked child: the file and the writer are the parent's. Free quietly, unless the
     * parent was closing it when it forked: then part of it is freed already (the fork
     * handlers take none of its locks once close has let it go), and what is left stays. */
    if (g_forked_trace == tr) g_forked_trace = NULL;
    if (g_env_trace == tr) g_env_trace = NULL;
    etr__fatal_forget(tr);
    if (atomic_load(&tr->closing)) {
      pthread_mutex_unlock(&g_lock);
      return ETR_EFORKED;
    }
    etr__trace_free(tr, true);
    etr__trace_entomb(tr);
    pthread_mutex_unlock(&g_lock);
    return ETR_EFORKED;
  }
  if (g_trace != tr) {
    pthread_mutex_unlock(&g_lock);
    return ETR_ESTATE;
  }
  atomic_store(&tr->closing, true); /* new calls on the handle are refused (calls against close) */
  /* From here on thread exits leave their state to us. */
  __atomic_store_n(&g_trace, NULL, __ATOMIC_RELEASE);
  if (g_env_trace == tr) g_env_trace = NULL;
  etr__fatal_remove(tr);
  pthread_mutex_unlock(&g_lock);

  etr_observer_remove(tr->obs); /* waits for callbacks running on other threads */
  __atomic_store_n(&etr__tracking_ids, 0u, __ATOMIC_SEQ_CST);
  etr__wait_ids();

  pthread_mutex_lock(&tr->threads_mutex);
  for (etr__tstate *ts = tr->threads; ts; ts = ts->next)
    etr__finish_thread(ts, &tr->ops_open_at_close);
  pthread_mutex_unlock(&tr->threads_mutex);

  pthread_mutex_lock(&tr->q_mutex);
  tr->stop = true;
  sem_post(&tr->wake);
  pthread_cond_broadcast(&tr->space_cond);
  pthread_cond_broadcast(&tr->done_cond);
  pthread_mutex_unlock(&tr->q_mutex);
  if (!join_writer(tr)) {
    /* Left behind: the trace stays whole for its writer, reachable from g_abandoned, and
     * the writer frees it when its write returns (if it ever does). Handed over last, once
     * close is done with it. */
    etr__trace_collect_stats(tr, &tr->final_stats);
    tr->closed = true;
    etr__trace_wait_calls(tr); /* (before the writer may free the trace) */
    if (out) etr_trace_stats_get(tr, out);
    pthread_mutex_lock(&g_lock);
    tr->abandoned_next = g_abandoned;
    g_abandoned = tr;
    pthread_mutex_unlock(&g_lock);
    etr_script_release_pending();
    pthread_t writer = tr->writer;
    pthread_mutex_lock(&tr->q_mutex);
    bool ended = tr->writer_ended;
    tr->writer_orphaned = !ended;
    pthread_mutex_unlock(&tr->q_mutex);
    if (ended) { /* (it ended meanwhile: it frees nothing) */
      pthread_join(writer, NULL);
      free_left_behind(tr);
    } else {
      pthread_detach(writer);
    }
    return ETR_EIO;
  }

  int rc = 0;
  /* Never close a descriptor that is no longer ours (the host closed it and reused it). */
  if (etr__fd_is_ours(tr)) {
    etr__jw_trim(&tr->jw); /* the blocks reserved past the end go back */
    /* The file's lock goes now, not with the last descriptor: a child forked meanwhile
     * holds a copy until its fork handler closes it, which a child scheduled late has not
     * done by the time this process ends, and a run started then took the file for another
     * process's. (Not on the host's descriptor that a stream path shares: no lock of ours.) */
    if (!tr->jw.shared) (void)flock(tr->fd, LOCK_UN);
    if (close(tr->fd) != 0 && !atomic_load(&tr->write_error)) atomic_store(&tr->write_error, errno);
  }
  rc = etr__trace_error(tr);
  if (tr->tables_fd >= 0) { /* the footer holds the whole tables now (unless it failed) */
    close(tr->tables_fd);
    tr->tables_fd = -1;
    if (rc == 0) unlink(tr->tables_path);
  }
  etr__trace_collect_stats(tr, &tr->final_stats);
  tr->closed = true;         /* (stats_get copies final_stats from here on) */
  etr__trace_wait_calls(tr); /* the calls that began before closing (the writer's stop woke them) */
  if (out) etr_trace_stats_get(tr, out);
  etr__trace_free(tr, false);
  pthread_mutex_lock(&g_lock);
  etr__trace_entomb(tr);
  release_modules_locked();
  pthread_mutex_unlock(&g_lock);
  etr_script_release_pending();
  return rc;
}

etr_trace *etr_trace_current(void) {
  pthread_mutex_lock(&g_lock);
  etr_trace *t = g_env_trace;
  pthread_mutex_unlock(&g_lock);
  return t;
}

void etr__trace_set_env(etr_trace *tr) {
  pthread_mutex_lock(&g_lock);
  g_env_trace = tr;
  pthread_mutex_unlock(&g_lock);
}

/* The path tr was opened with (its copy in a forked child too). */
const char *etr__trace_path(const etr_trace *tr) { return tr ? tr->path : NULL; }

/* The identity of the file tr writes (its copy in a forked child too): false when none. */
bool etr__trace_file_id(const etr_trace *tr, unsigned long long *dev, unsigned long long *ino) {
  if (!tr || tr->file_ino == 0) return false;
  *dev = (unsigned long long)tr->file_dev;
  *ino = (unsigned long long)tr->file_ino;
  return true;
}

/* Wakes the open trace's writer (lastthread.c: the main thread left). */
void etr__trace_wake_writer(void) {
  pthread_mutex_lock(&g_lock);
  if (g_trace && g_trace->pid == getpid()) sem_post(&g_trace->wake);
  pthread_mutex_unlock(&g_lock);
}

/* At process exit (or library unload): finalize the trace still open. */
void etr__trace_shutdown(void) {
  etr_trace *tr = __atomic_load_n(&g_trace, __ATOMIC_ACQUIRE);
  if (tr && tr->pid == getpid()) etr_trace_close(tr);
}

/* ---- fork ---- */

static void on_before_fork(void) {
  pthread_mutex_lock(&g_lock);
  if (g_trace) {
    pthread_mutex_lock(&g_trace->threads_mutex);
    pthread_mutex_lock(&g_trace->q_mutex);
  }
}

static void on_after_fork_parent(void) {
  if (g_trace) {
    pthread_mutex_unlock(&g_trace->q_mutex);
    pthread_mutex_unlock(&g_trace->threads_mutex);
  }
  pthread_mutex_unlock(&g_lock);
}

static void on_after_fork_child(void) {
  etr_trace *tr = g_trace;
  if (tr) {
    pthread_mutex_unlock(&tr->q_mutex);
    pthread_mutex_unlock(&tr->threads_mutex);
    /* The child must never write into the parent's file: stop recording here. The trace
     * stays allocated (the child may still call close, which frees it). */
    __atomic_store_n(&etr__tracking_ids, 0u, __ATOMIC_SEQ_CST);
    etr__observer_drop_in_child(tr->obs);
    /* The child's copy of the file's descriptor goes now: it would keep the file's lock
     * (shared with the parent's descriptor) for as long as the child lives, and tell a later
     * process under the same ETR_TRACE path that somebody still writes it (env.c). */
    if (tr->fd >= 0) close(tr->fd);
    tr->fd = tr->jw.fd = -1;
    if (tr->dump_prev_fd >= 0) close(tr->dump_prev_fd); /* (forked during a dump) */
    tr->dump_prev_fd = -1;
    g_forked_trace = tr;
    g_trace = NULL;
  }
  pthread_mutex_unlock(&g_lock);
}
