/* The writer thread: it takes the chunks the recording threads fill (trace.c) and makes the
 * output of their events — JSON nodes (emit.c), a binary log's records (binlog.c), or the
 * flight recorder's ring (ring.c) and its dumps — and finalizes the file when a fatal signal
 * asks for it (fatal.c). Only this thread writes to the file, but for a signal handler that
 * finds it unresponsive.
 */
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "observer/binlog.h"
#include "observer/internal.h"
#include "observer/openrefs.h"
#include "observer/ring.h"
#include "observer/tbtable.h"
#include "observer/trace_internal.h"

/* How long the file stays as finalized while a host's signal handler runs (one that _exits
 * soon leaves it finalized; one that leaves by siglongjmp cannot stall the writer longer). */
#define FATAL_HOLD_MS 2000

/* The JSON buffer only ever holds whole nodes and is written out between nodes, so a write
 * error loses exactly the nodes counted in `buffered`, and the file always holds the header
 * and whole nodes: a prefix `etr repair` completes (only a kill during a write(2) can cut
 * a node). */

static inline bool fatal_pending(etr_trace *tr) {
  return atomic_load(&tr->fatal_req) != atomic_load(&tr->fatal_ack);
}

/* New output after a footer written at a fatal signal the process survived: that footer is
 * cut off at the next write, and nodes go on after the last one. */
static void unseal(etr_trace *tr) {
  if (!tr->sealed) return;
  tr->sealed = false;
  tr->unseal_pending = true;
  tr->any_node = tr->seal_any_node;
}

/* Whether the descriptor still refers to the file we created: the host may close it and
 * open another file that gets the same number, which must never receive our output. */
bool etr__fd_is_ours(const etr_trace *tr) {
  struct stat st;
  return fstat(tr->fd, &st) == 0 && st.st_dev == tr->file_dev && st.st_ino == tr->file_ino;
}

/* All of buf to fd; false on an error. */
static bool write_all(int fd, const char *buf, size_t n) {
  while (n) {
    ssize_t k = write(fd, buf, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    buf += k;
    n -= (size_t)k;
  }
  return true;
}

/* The traceback-table entries the buffered nodes made go to `<path>.tables` before the
 * nodes go to the trace, so that a trace cut anywhere has the tables of the nodes it holds.
 * A failure here loses only that (logged once): the trace itself goes on. */
static void write_tables_beside(etr_trace *tr) {
  if (!tr->tables_path || tr->tables_failed || !tr->tbtab) return;
  etr__jw *o = &tr->tables_out;
  if (!o->buf && etr__jw_init(o, -1, 0) != 0) return;
  o->len = 0;
  if (tr->tables_fd < 0) {
    tr->tables_fd = open(tr->tables_path,
                         O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (tr->tables_fd < 0) {
      tr->tables_failed = true;
      etr__log(ETR_LOG_WARN,
               "cannot create %s (%s): a trace cut short will lack its traceback "
               "frames",
               tr->tables_path, strerror(errno));
      return;
    }
    etr__bin_header h;
    etr__bin_header_of(tr, &h);
    etr__jw_raw(o, (const char *)&h, sizeof h);
  }
  if (!etr__bin_new_tables(tr, o) && o->len == 0) return;
  if (o->err || !write_all(tr->tables_fd, o->buf, o->len)) {
    tr->tables_failed = true;
    etr__log(ETR_LOG_WARN, "cannot write %s: a trace cut short will lack its traceback frames",
             tr->tables_path);
  }
  o->len = 0;
}

/* A test's hook where the writer is about to write (tests/reliability/test_writer_stall.c
 * compiles this file with ETR_TEST_HOOKS and blocks there, as a write(2) to a regular file
 * on a hung NFS server would; the library has no such hook). */
#ifdef ETR_TEST_HOOKS
void (*etr__test_before_write)(void);
#define BEFORE_WRITE()                                    \
  do {                                                    \
    if (etr__test_before_write) etr__test_before_write(); \
  } while (0)
#else
#define BEFORE_WRITE() ((void)0)
#endif

/* etr__writer_flush on a host's thread (the header, at open). A pipe whose reader went
 * away raises SIGPIPE at the thread that writes, which ends a host that never writes to
 * that pipe itself (ETR_TRACE=/dev/stdout | head: killed in its constructor): SIGPIPE is
 * blocked meanwhile and one raised by this write is taken back; the write fails with EPIPE,
 * an error like any other (recording stops, close returns ETR_EIO). The writer thread has
 * every signal blocked already. */
void etr__writer_flush_host(etr_trace *tr, uint64_t *buffered) {
  sigset_t pipe_set, old, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  bool was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  etr__writer_flush(tr, buffered);
  if (!was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void etr__writer_flush(etr_trace *tr, uint64_t *buffered) {
  tr->jw.flush_kept = 0; /* (what a write error leaves of this flush, unless it writes) */
  if (tr->jw.len) BEFORE_WRITE();
  if (tr->jw.len && !tr->jw.err) write_tables_beside(tr);
  if (tr->jw.len && !tr->jw.err) {
    int idle = ETR__IO_IDLE;
    if (!atomic_compare_exchange_strong(&tr->io_state, &idle, ETR__IO_BUSY)) {
      /* A signal handler finalized the file and owns it now. */
      tr->jw.len = 0;
      atomic_fetch_add_explicit(&tr->nodes_dropped_writer, *buffered, memory_order_relaxed);
      *buffered = 0;
      return;
    }
    if (!etr__fd_is_ours(tr)) {
      tr->jw.err = EBADF;
    } else if (tr->restart_pending) { /* a flight-recorder dump replaces the file */
      etr__jw_truncate(&tr->jw, 0);
      tr->restart_pending = false;
    } else if (tr->unseal_pending) {
      etr__jw_truncate(&tr->jw, tr->seal_off);
      tr->unseal_pending = false;
    }
    etr__jw_flush(&tr->jw); /* after an error it only discards */
    atomic_store(&tr->io_state, ETR__IO_IDLE);
  }
  tr->jw.len = 0;
  tr->jw.n_marks = 0;
  /* (a flush the file took part of keeps its nodes up to the last one it took whole) */
  uint64_t kept = !tr->jw.err                     ? *buffered
                  : tr->jw.flush_kept < *buffered ? tr->jw.flush_kept
                                                  : *buffered;
  atomic_fetch_add_explicit(&tr->nodes_written, kept, memory_order_relaxed);
  atomic_fetch_add_explicit(&tr->nodes_dropped_writer, *buffered - kept, memory_order_relaxed);
  *buffered = 0;
  atomic_store_explicit(&tr->bytes_written, tr->jw.written, memory_order_relaxed);
  atomic_store_explicit(&tr->utf8_replaced, tr->jw.replaced, memory_order_relaxed);
  atomic_store_explicit(&tr->values_fixed, tr->jw.fixed, memory_order_relaxed);
  /* A write error is said and kept even when recording had already stopped for another
   * reason (memory ran out, a stalled output): the file is then cut, and what close
   * returns must say so (ETR_EIO, not ETR_ENOMEM, which promises a finalized file). */
  int had = atomic_load(&tr->write_error);
  if (tr->jw.err && had != tr->jw.err && (had == 0 || had == ENOMEM || had == ETIMEDOUT) &&
      !tr->jw_err_said) {
    tr->jw_err_said = true;
    atomic_store(&tr->write_error, tr->jw.err);
    atomic_store(&tr->failed, 1);
    if (tr->jw.err == EBADF)
      etr__log(ETR_LOG_ERROR,
               "the trace file descriptor was closed or replaced under the "
               "recorder; recording stopped");
    else
      etr__log(ETR_LOG_ERROR, "trace write failed (%s); recording stopped", strerror(tr->jw.err));
    /* Stop paying for ops that cannot be written; ops in flight still end normally. */
    etr_observer_disable(tr->obs);
  }
}

/* The footer: JSON text, or a binary log's trailer record. */
static void emit_footer(etr_trace *tr, int sig) {
  if (tr->binary)
    etr__bin_emit_trailer(tr, sig);
  else
    etr__emit_footer(tr, sig);
}

/* The events in [from, to) of c: a binary log takes them as they are; otherwise each is
 * decoded and its node written or kept in the ring. Returns the nodes among them. */
static uint32_t emit_range(etr_trace *tr, const etr__chunk *c, uint32_t from, uint32_t to,
                           uint64_t *buffered, bool may_flush) {
  unseal(tr);
  uint32_t off = from, n = 0;
  etr__tstate *owner = c->owner;
  if (tr->binary && !tr->ring) { /* in records of at most flush_bytes */
    while (off < to) {
      uint32_t at = off;
      uint32_t k =
          etr__bin_emit_cevents(tr, c->data, owner->stream, c->tid, &off, to, tr->flush_bytes);
      *buffered += k;
      n += k;
      etr__jw_mark(&tr->jw, *buffered);
      if (off == at) break; /* (no progress: out of memory) */
      if (may_flush && tr->jw.len >= tr->flush_bytes) etr__writer_flush(tr, buffered);
    }
    return n;
  }
  if (!owner->dec && !(owner->dec = etr__cev_dec_new())) {
    atomic_fetch_add_explicit(&tr->nodes_dropped_writer, c->nodes, memory_order_relaxed);
    etr__trace_out_of_memory(tr, "a thread's decoder");
    return 0;
  }
  while (off < to) {
    const etr__ev *ev;
    const char *why = NULL;
    size_t size = etr__cev_decode(owner->dec, &tr->cev_out, c->data + off, to - off, c->tid,
                                  tr->base_ns, !tr->ring, &ev, &why);
    if (!size) { /* memory exhausted (our own events are well-formed): the rest is lost */
      etr__log(ETR_LOG_ERROR, "cannot decode a thread's events (%s): %u bytes dropped",
               why ? why : "?", (unsigned)(to - off));
      etr__trace_out_of_memory(tr, "decoding a thread's events");
      break;
    }
    off += (uint32_t)size;
    if (!ev) continue; /* a definition */
    n++;
    if (tr->ring) { /* kept in memory until a dump */
      if (!etr__ring_add(tr->ring, ev))
        atomic_fetch_add_explicit(&tr->nodes_dropped_writer, 1, memory_order_relaxed);
      continue;
    }
    *buffered += etr__emit_event(tr, ev, owner->dec);
    etr__jw_mark(&tr->jw, *buffered);
    if (may_flush && tr->jw.len >= tr->flush_bytes) etr__writer_flush(tr, buffered);
  }
  if (tr->ring)
    atomic_store_explicit(&tr->ring_dropped, etr__ring_dropped(tr->ring), memory_order_relaxed);
  return n;
}

/* ---- flight recorder: a dump replaces the file with a trace of the ring ----
 *
 * A dump never destroys the previous one before it is whole itself. On a regular file it
 * is written to a temporary file beside it (FILE.dump-XXXXXX: the same directory, so the
 * same file system) and renamed over FILE (rename(2), atomic) once complete, so a kill -9,
 * a crash or a write error (a full disk) during a dump leaves FILE as the previous dump
 * left it (or with the header written at open), and the partial dump in FILE.dump-XXXXXX
 * after a kill. A dump that fails removes its temporary file; recording stops as on any
 * write error. Overwriting in place and truncating at the end would not do: the previous
 * dump is overwritten from its first byte on; nor would copying a finished temporary file
 * back into FILE, for the same reason.
 *
 * What goes with the file's identity moves with it: the writer's descriptor and the
 * identity etr__fd_is_ours checks (the temporary file's from the dump's start), the
 * advisory lock (taken on the temporary file before the rename, so FILE is never unlocked
 * while we write it; the old file's goes with its descriptor, closed after the rename),
 * and the writer mark ETR_TRACE_WRITER (env.c moves it to the new file; not at a fatal
 * signal, where the process is ending). A flight recorder has no FILE.tables (each dump
 * holds the whole tables), and a gzip or binary-log dump starts its file as any file
 * starts. A path that names a descriptor (/dev/stdout...) is never renamed nor cut (a dump
 * fails there, as before); a file that is not regular (a FIFO, a device), and one whose
 * directory takes no temporary file or that cannot be renamed over (a sticky directory, a
 * bind mount), is rewritten in place as before, said once on ETR_LOG. */

typedef struct dump_ctx {
  etr_trace *tr;
  uint64_t buffered;
} dump_ctx;

static void dump_put(void *ctx, const etr__ev *ev) {
  dump_ctx *d = ctx;
  etr_trace *tr = d->tr;
  if (tr->binary) {
    uint32_t off = 0;
    etr__bin_emit_events(tr, (const uint8_t *)ev, &off, ev->size, tr->flush_bytes);
    d->buffered++;
  } else {
    d->buffered += etr__emit_event(tr, ev, NULL);
  }
  if (tr->jw.len >= tr->flush_bytes) etr__writer_flush(tr, &d->buffered);
}

/* What a dump to a temporary file puts back if it fails: the file and its figures. */
typedef struct dump_prev {
  dev_t dev;
  ino_t ino;
  uint64_t written, prealloc_end, nodes;
} dump_prev;

/* Why a temporary file cannot be made beside the file, or renamed over it, that no later
 * dump would change (the file's place: permissions, a read-only or sticky directory, a
 * bind mount): dumps then rewrite the file in place. Another failure (a full disk, no
 * descriptor left) is a write error: the file keeps the previous dump, recording stops. */
static bool place_refuses(int e) {
  return e == EACCES || e == EPERM || e == EROFS || e == EBUSY || e == EXDEV || e == EINVAL ||
         e == ENOENT || e == ENOTDIR || e == ENAMETOOLONG || e == ELOOP;
}

/* From now on dumps rewrite the file in place (said once). */
static void dump_in_place(etr_trace *tr, const char *what, int err) {
  etr__log(ETR_LOG_WARN,
           "flight recorder: %s %s (%s): dumps rewrite the file in place from now on (a dump "
           "cut short then loses the previous one)",
           what, tr->dump_path, strerror(err));
  free(tr->dump_path);
  tr->dump_path = NULL;
}

/* A dump failed before it wrote anything: a write error, as etr__writer_flush reports it. */
static void dump_failed(etr_trace *tr, const char *what, int err) {
  etr__log(ETR_LOG_ERROR, "flight recorder: %s %s (%s); the file keeps the previous dump", what,
           tr->dump_path, strerror(err));
  if (!tr->jw.err) tr->jw.err = err;
  uint64_t none = 0;
  etr__writer_flush(tr, &none); /* (nothing buffered: it records the error and stops) */
}

enum { DUMP_BESIDE, DUMP_IN_PLACE, DUMP_FAILED };

/* Whether fd still refers to the file dev:ino (the host may have closed it and reused the
 * number: such a descriptor is never ours to close). */
/* Whether the output failed (a write error, a stalled output), rather than recording alone
 * (memory ran out: the file can still be written, a dump still made of what the ring holds,
 * with placeholders for what its events name and it lacks). */
static bool output_failed(etr_trace *tr) {
  return atomic_load(&tr->failed) && (tr->jw.err || atomic_load(&tr->write_error) != ENOMEM);
}

static bool fd_is(int fd, dev_t dev, ino_t ino) {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* The dump's output goes to a new temporary file beside the trace's. */
static int dump_file_begin(etr_trace *tr, dump_prev *prev) {
  if (!etr__fd_is_ours(tr)) { /* (as a write would find it: etr__writer_flush says so) */
    if (!tr->jw.err) tr->jw.err = EBADF;
    uint64_t none = 0;
    etr__writer_flush(tr, &none);
    return DUMP_FAILED;
  }
  size_t n = strlen(tr->dump_path);
  memcpy(tr->dump_tmp, tr->dump_path, n);
  memcpy(tr->dump_tmp + n, ".dump-XXXXXX", sizeof ".dump-XXXXXX");
  int fd = mkostemp(tr->dump_tmp, O_CLOEXEC);
  struct stat st, old;
  if (fd < 0 || fstat(fd, &st) != 0) {
    int e = errno;
    if (fd >= 0) {
      close(fd);
      unlink(tr->dump_tmp);
    }
    if (!place_refuses(e)) {
      dump_failed(tr, "cannot make a temporary file beside", e);
      return DUMP_FAILED;
    }
    dump_in_place(tr, "cannot make a temporary file beside", e);
    return DUMP_IN_PLACE;
  }
  if (fstat(tr->fd, &old) == 0) (void)fchmod(fd, old.st_mode & 0777); /* (mkostemp: 0600) */
  (void)flock(fd, LOCK_EX | LOCK_NB); /* (env.c: a process started meanwhile sees it) */
  *prev = (dump_prev){tr->file_dev, tr->file_ino, tr->jw.written, tr->jw.prealloc_end,
                      atomic_load(&tr->nodes_written)};
  tr->dump_prev_fd = tr->fd;
  tr->fd = tr->jw.fd = fd;
  tr->file_dev = st.st_dev;
  tr->file_ino = st.st_ino;
  tr->jw.written = 0;
  etr__jw_prealloc(&tr->jw);
  return DUMP_BESIDE;
}

/* The dump is written: rename it over the file, or (it failed) go back to the file as it
 * was. DUMP_IN_PLACE: the file cannot be renamed over, the dump must be made again in
 * place. */
static int dump_file_end(etr_trace *tr, const dump_prev *prev, int sig) {
  bool whole = !tr->jw.err && !output_failed(tr);
  if (whole && tr->opt.sync) fdatasync(tr->fd);
  if (whole) etr__jw_trim(&tr->jw); /* (nothing reserved past the end of a finished dump) */
  whole = whole && !tr->jw.err;
  int e = 0;
  if (whole) {
    if (rename(tr->dump_tmp, tr->dump_path) == 0) {
      if (fd_is(tr->dump_prev_fd, prev->dev, prev->ino))
        close(tr->dump_prev_fd); /* (the replaced file, and its lock) */
      tr->dump_prev_fd = -1;
      if (!sig) etr__env_file_replaced(tr, tr->file_dev, tr->file_ino);
      return DUMP_BESIDE;
    }
    e = errno;
  }
  /* The file keeps what it held: the previous dump. */
  unlink(tr->dump_tmp);
  if (etr__fd_is_ours(tr)) close(tr->fd);
  tr->fd = tr->jw.fd = tr->dump_prev_fd;
  tr->dump_prev_fd = -1;
  tr->file_dev = prev->dev;
  tr->file_ino = prev->ino;
  tr->jw.written = prev->written;
  tr->jw.prealloc_end = prev->prealloc_end;
  atomic_store(&tr->nodes_written, prev->nodes);
  atomic_store_explicit(&tr->bytes_written, prev->written, memory_order_relaxed);
  if (!whole) return DUMP_FAILED; /* a write error: recording stopped (etr__writer_flush) */
  if (!place_refuses(e)) {
    dump_failed(tr, "cannot rename a dump over", e);
    return DUMP_FAILED;
  }
  dump_in_place(tr, "cannot rename a dump over", e);
  return DUMP_IN_PLACE;
}

/* The caller has added the queued chunks and the threads' current events to the ring.
 * beside: to a temporary file renamed over the trace's (DUMP_IN_PLACE: it must be made
 * again in place). */
static int ring_dump_to(etr_trace *tr, int sig, bool beside) {
  dump_prev prev = {0, 0, 0, 0, 0};
  if (beside) {
    int how = dump_file_begin(tr, &prev);
    if (how != DUMP_BESIDE) return how;
  }
  atomic_store(&tr->nodes_written, 0); /* of the trace the file holds from now on */
  tr->restart_pending = !beside;
  tr->any_node = false;
  if (tr->tbtab) etr__tbtab_rewind(tr->tbtab); /* the new file gets the whole tables */
  if (tr->binary)
    etr__bin_emit_header(tr);
  else
    etr__emit_header(tr);
  dump_ctx d = {tr, 0};
  etr__emit_hold_reset(tr); /* (the ring's own nodes decide what the new file holds) */
  if (etr__ring_write(tr->ring, dump_put, &d) == UINT64_MAX)
    etr__log(ETR_LOG_WARN,
             "flight recorder: out of memory: ops still open at the dump have no "
             "node (their children name them)");
  d.buffered += etr__emit_held(tr);
  etr__writer_flush(tr, &d.buffered);
  emit_footer(tr, sig);
  d.buffered = 1; /* the process node */
  etr__writer_flush(tr, &d.buffered);
  if (beside) return dump_file_end(tr, &prev, sig);
  if (tr->opt.sync && !tr->jw.err) fdatasync(tr->fd);
  return DUMP_IN_PLACE;
}

static void ring_dump(etr_trace *tr, int sig) {
  uint64_t none = 0;
  etr__writer_flush(tr, &none);
  if (output_failed(tr)) return;
  if (!tr->dump_path || ring_dump_to(tr, sig, true) == DUMP_IN_PLACE) ring_dump_to(tr, sig, false);
}

/* (after memory ran out, what was recorded before still goes to the file: each thread's
 * events up to then are whole, its thread node first, as none is recorded after) */
static void process_chunk(etr_trace *tr, etr__chunk *c, uint64_t *buffered) {
  if (output_failed(tr)) {
    atomic_fetch_add_explicit(&tr->nodes_dropped_writer, c->nodes - c->peeked_nodes,
                              memory_order_relaxed);
    return;
  }
  emit_range(tr, c, c->peeked, c->len, buffered, true);
}

/* A written chunk of the queue goes back to the pool (q_mutex held). */
static void written_locked(etr_trace *tr, etr__chunk *c) {
  if (c->owner && c->owner->queued) c->owner->queued--;
  etr__chunk_recycle_locked(tr, c);
}

/* Every written chunk of the list *spare goes back (q_mutex held). */
static void put_back_locked(etr_trace *tr, etr__chunk **spare) {
  while (*spare) {
    etr__chunk *c = *spare;
    *spare = c->next;
    written_locked(tr, c);
  }
}

/* A timed flush (or etr_trace_flush): the complete events in every thread's current chunk,
 * which its thread keeps filling meanwhile (q_mutex held: no chunk changes hands). A thread
 * that records nothing more would otherwise keep them until it exits. A thread with a
 * chunk still queued is left for the next flush: its older events must go first (an op
 * comes after the ops it encloses). */
static void peek_threads_locked(etr_trace *tr, uint64_t *buffered) {
  if (output_failed(tr)) return;
  for (etr__tstate *ts = __atomic_load_n(&tr->threads, __ATOMIC_ACQUIRE); ts; ts = ts->next) {
    etr__chunk *c = __atomic_load_n(&ts->chunk, __ATOMIC_ACQUIRE);
    if (!c || ts->queued) continue;
    uint32_t len = __atomic_load_n(&c->len, __ATOMIC_ACQUIRE);
    if (len <= c->peeked) continue;
    c->peeked_nodes += emit_range(tr, c, c->peeked, len, buffered, false);
    c->peeked = len;
  }
}

/* The queue lock, unless a fatal signal is pending while another thread (perhaps the one
 * that crashed) holds it: then false, after at most about 20 ms. */
static bool writer_lock(etr_trace *tr) {
  for (;;) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += 20 * 1000000;
    if (dl.tv_nsec >= 1000000000) {
      dl.tv_sec++;
      dl.tv_nsec -= 1000000000;
    }
    if (pthread_mutex_timedlock(&tr->q_mutex, &dl) == 0) return true;
    if (fatal_pending(tr)) return false;
  }
}

/* Sleep until posted or until the monotonic deadline. */
static void writer_sleep(etr_trace *tr, int64_t deadline) {
  if (deadline == INT64_MAX) {
    sem_wait(&tr->wake);
  } else {
    int64_t left = deadline - etr__now_ns();
    if (left > 0) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      int64_t ns = ts.tv_nsec + left;
      ts.tv_sec += (time_t)(ns / 1000000000);
      ts.tv_nsec = (long)(ns % 1000000000);
      sem_timedwait(&tr->wake, &ts);
    }
  }
  while (sem_trywait(&tr->wake) == 0) {
  } /* posts since are covered: the state is checked next */
}

/* How often the writer looks whether it is the process's last thread, once the main
 * thread has left by pthread_exit (lastthread.c). */
#define LAST_THREAD_WATCH_MS 50

static int64_t next_deadline(const etr_trace *tr) {
  return tr->flush_ns == INT64_MAX ? INT64_MAX : etr__now_ns() + tr->flush_ns;
}

/* A fatal signal: everything complete goes to the file, then the process node and a footer.
 * With the queue lock, the queued chunks and every thread's current chunk are written
 * first; without it only what the writer holds. */
static void writer_seal(etr_trace *tr, uint64_t *buffered, bool locked, int sig) {
  if (locked) {
    etr__chunk *list = tr->q_head;
    tr->q_head = tr->q_tail = NULL;
    while (list) {
      etr__chunk *c = list;
      list = c->next;
      process_chunk(tr, c, buffered);
      written_locked(tr, c);
      tr->q_done++;
    }
    pthread_cond_broadcast(&tr->space_cond);
    peek_threads_locked(tr, buffered);
    pthread_mutex_unlock(&tr->q_mutex); /* (the caller takes it again) */
  }
  if (tr->ring) { /* the flight recorder's trace replaces the file; nothing to cut later */
    ring_dump(tr, sig);
    return;
  }
  unseal(tr);
  *buffered += etr__emit_held(tr);
  etr__writer_flush(tr, buffered);
  if (output_failed(tr)) return;
  uint64_t off = tr->unseal_pending ? tr->seal_off : tr->jw.written;
  tr->seal_any_node = tr->any_node;
  /* The ops open at the signal, or lost when memory ran out: their children are in the
   * file, so each gets a placeholder (cut off with the footer if the process goes on; not
   * counted, like the process node). Without memory for them, no footer after lost ops. */
  if (!tr->binary && etr__emit_open_placeholders(tr, ETR__SEAL_PLACEHOLDER) == UINT64_MAX &&
      atomic_load(&tr->failed))
    return;
  emit_footer(tr, sig);
  uint64_t process_node = 0; /* not counted: cut off again if the process goes on */
  etr__writer_flush(tr, &process_node);
  tr->seal_off = off;
  tr->sealed = !tr->jw.err;
}

/* Returns with q_mutex released. */
static void serve_fatal(etr_trace *tr, uint64_t *buffered, bool locked) {
  uint32_t req = atomic_load(&tr->fatal_req);
  writer_seal(tr, buffered, locked, atomic_load(&tr->fatal_sig));
  atomic_store(&tr->fatal_ack, req);
}

static void writer_run(etr_trace *tr);

/* The flight recorder keeps a copy of each thread's node (ring.c). A host that starts and
 * ends threads all the time would grow it without bound (and every dump with it: 100 000
 * short-lived threads made an 85 MB dump of a 1 MiB ring, 65 MB of memory), so the nodes
 * of the threads that are gone and have no op left in the ring are dropped now and then.
 * A thread may still record while a state holds its tid (a state keeps the tid of a thread
 * that exited until a new thread takes it); *live gets those tids (+ 1). threads_mutex is
 * only tried: q_mutex is held, which a thread that exits takes after it. A thread whose
 * tid no state holds handed its last chunk over (etr__finish_thread, under threads_mutex)
 * before its state was taken or freed, so that chunk is in the queue held now, and the
 * prune waits until that queue is processed (writer_run). */
static bool ring_live_threads(etr_trace *tr, etr__refmap *live) {
  if (pthread_mutex_trylock(&tr->threads_mutex) != 0) return false;
  etr__refmap_free(live);
  bool ok = etr__refmap_init(live, 64);
  for (etr__tstate *ts = tr->threads; ok && ts; ts = ts->next)
    if (!etr__refmap_put(live, ts->tid + 1)) ok = false;
  pthread_mutex_unlock(&tr->threads_mutex);
  return ok;
}

static void ring_prune(etr_trace *tr, const etr__refmap *live) {
  if (!etr__ring_prune_threads(tr->ring, live))
    etr__log(ETR_LOG_DEBUG, "flight recorder: no memory to prune its thread nodes (kept)");
}

bool etr__writer_main(etr_trace *tr) {
  writer_run(tr);
  /* (close waits for this, for at most stall_ms without progress: trace.c join_writer) */
  pthread_mutex_lock(&tr->q_mutex);
  tr->writer_ended = true;
  bool orphaned = tr->writer_orphaned;
  pthread_cond_broadcast(&tr->done_cond);
  pthread_mutex_unlock(&tr->q_mutex);
  return orphaned;
}

static void writer_run(etr_trace *tr) {
  /* (Signals are for the host's threads: this thread starts with all of them blocked,
   * trace.c etr_trace_open.) */
  atomic_store(&tr->writer_tid, etr__gettid());
  uint64_t buffered = 0;
  int64_t deadline = next_deadline(tr);
  unsigned flush_rounds = 0;
  etr__chunk *spare = NULL; /* written chunks not yet back in the pool */
  etr__refmap live = {0};   /* the threads that may record (a ring's prune) */
  uint64_t done_pending = 0;
  bool locked = writer_lock(tr);
  for (;;) {
    if (!locked || fatal_pending(tr)) {
      serve_fatal(tr, &buffered, locked);
      locked = writer_lock(tr);
      continue;
    }
    put_back_locked(tr, &spare);
    etr__clock_tick();
    uint32_t holds = atomic_load(&tr->fatal_hold);
    if (holds &&
        etr__now_ns() - atomic_load(&tr->fatal_hold_ns) >= (int64_t)FATAL_HOLD_MS * 1000000)
      /* Expired: forgotten, so that a hold never released (a SIGABRT the process survived,
       * a handler left by siglongjmp) does not make every later one last its full time. A
       * signal that took a hold meanwhile set a new time first: the exchange then fails. */
      if (atomic_compare_exchange_strong(&tr->fatal_hold, &holds, 0)) holds = 0;
    if (holds && !tr->stop &&
        etr__now_ns() - atomic_load(&tr->fatal_hold_ns) < (int64_t)FATAL_HOLD_MS * 1000000) {
      /* The file was finalized at a fatal signal whose outcome is not known yet: leave
       * it whole (recorders wait once the queue is full). A host handler that left by
       * siglongjmp never ends the hold: it expires, and recording goes on. */
      pthread_mutex_unlock(&tr->q_mutex);
      struct timespec ms = {0, 5000000};
      nanosleep(&ms, NULL);
      locked = writer_lock(tr);
      continue;
    }
    /* (the ring's thread nodes: those of the threads that were gone before now go once the
     * queue held now is processed, below, or at once when it is empty) */
    bool prune = tr->ring && etr__ring_threads_due(tr->ring) && ring_live_threads(tr, &live);
    if (prune && !tr->q_head) ring_prune(tr, &live);
    if (tr->q_head) {
      etr__chunk *list = tr->q_head;
      tr->q_head = tr->q_tail = NULL;
      pthread_mutex_unlock(&tr->q_mutex);
      uint64_t n = 0;
      while (list) {
        etr__chunk *c = list;
        list = c->next;
        process_chunk(tr, c, &buffered);
        n++;
        c->next = spare;
        spare = c;
        /* A recorder waiting for room gets it chunk by chunk, not at the batch's end (a
         * full queue of JSON is tens of ms of work). Never blocks: the lock may be held
         * by a thread in a fatal signal, and the batch is ours to finish. */
        if (list && atomic_load_explicit(&tr->space_waiters, memory_order_relaxed) &&
            pthread_mutex_trylock(&tr->q_mutex) == 0) {
          put_back_locked(tr, &spare);
          tr->q_done += done_pending + n;
          done_pending = n = 0;
          pthread_cond_broadcast(&tr->space_cond);
          pthread_mutex_unlock(&tr->q_mutex);
        }
      }
      done_pending += n;
      if (prune) ring_prune(tr, &live);
      if (!(locked = writer_lock(tr))) continue;
      put_back_locked(tr, &spare); /* before a peek: the queued counts must be current */
      tr->q_done += done_pending;
      done_pending = 0;
      pthread_cond_broadcast(&tr->space_cond);
      /* Under steady load the queue never empties: the timed flush must still come. */
      if (tr->flush_done == tr->flush_gen && etr__now_ns() < deadline) continue;
    }
    bool flush_req = tr->flush_done != tr->flush_gen;
    /* A flush waits for the chunks queued before it, and (a few rounds) for those queued
     * since, which may hold nodes completed before it. */
    if (flush_req && tr->q_head && (tr->q_done < tr->flush_target || flush_rounds++ < 8)) continue;
    if (flush_req || etr__now_ns() >= deadline) {
      flush_rounds = 0;
      uint64_t gen = tr->flush_gen;
      peek_threads_locked(tr, &buffered);
      pthread_mutex_unlock(&tr->q_mutex);
      if (tr->ring) {
        if (flush_req) ring_dump(tr, 0); /* a flush of a flight recorder is a dump */
      } else {
        etr__writer_flush(tr, &buffered);
        if (tr->opt.sync && !tr->jw.err) fdatasync(tr->fd);
      }
      /* An explicit flush is where deferred symbolization happens (besides close). */
      if (flush_req && tr->tbtab) {
        etr__tbtab_symbolize(tr->tbtab);
        atomic_store_explicit(&tr->tb_frames, etr__tbtab_frames(tr->tbtab), memory_order_relaxed);
        atomic_store_explicit(&tr->tb_cut, etr__tbtab_cut(tr->tbtab), memory_order_relaxed);
      }
      deadline = next_deadline(tr);
      if (!(locked = writer_lock(tr))) continue;
      tr->flush_done = gen;
      pthread_cond_broadcast(&tr->done_cond);
      continue;
    }
    if (tr->jw.len) { /* the queue is empty: put what we have on disk */
      pthread_mutex_unlock(&tr->q_mutex);
      etr__writer_flush(tr, &buffered);
      locked = writer_lock(tr);
      continue;
    }
    if (tr->q_head) continue;
    if (tr->stop) break;
    pthread_mutex_unlock(&tr->q_mutex);
    int64_t until = deadline;
    if (etr__main_gone()) { /* the host's last thread may be gone (lastthread.c) */
      if (etr__only_thread()) {
        etr__refmap_free(&live);
        etr__end_as_last_thread(); /* (closes the trace here: trace.c join_writer) */
      }
      int64_t watch = etr__now_ns() + (int64_t)LAST_THREAD_WATCH_MS * 1000000;
      if (watch < until) until = watch;
    }
    writer_sleep(tr, until);
    locked = writer_lock(tr);
  }
  etr__refmap_free(&live);
  put_back_locked(tr, &spare);
  /* (flush_done stays: a flush still waiting was overtaken by close, which woke it; it
   * returns ETR_ESTATE, and the rest below writes its nodes) */
  pthread_cond_broadcast(&tr->done_cond);
  pthread_mutex_unlock(&tr->q_mutex);
  if (tr->ring) {
    ring_dump(tr, 0);
    return;
  }
  unseal(tr);
  buffered += etr__emit_held(tr);
  /* Nodes lost after recording stopped (memory ran out) may be parents of nodes written
   * before: each gets a placeholder (not counted, like a seal's), so every ctrl_deps of the
   * file resolves. Without the memory to make them, no footer: the file stays a prefix that
   * etr repair completes, as after a write error. */
  if (!tr->binary && etr__emit_open_placeholders(tr, ETR__LOST_PLACEHOLDER) == UINT64_MAX &&
      atomic_load(&tr->failed)) {
    etr__log(ETR_LOG_ERROR,
             "out of memory: the trace is left without its end (etr repair "
             "completes it)");
    etr__writer_flush(tr, &buffered);
    return;
  }
  etr__writer_flush(tr, &buffered); /* (counted before the footer's stats) */
  emit_footer(tr, 0);
  buffered++; /* the process node */
  etr__writer_flush(tr, &buffered);
}
