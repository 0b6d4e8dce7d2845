/* The execution-trace observer: per-thread op stacks, ids, timing, chunks, the writer
 * thread, and the trace's life cycle (open, enable, disable, flush, close, fork, exit).
 *
 * Locks, in the order they may nest: g_lock > threads_mutex > q_mutex > reg_lock and
 * threads_lock (registry.c). Recording threads take none on the per-op path; they take q_mutex once per
 * chunk (64 KiB by default) and threads_mutex once per thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "observer/internal.h"
#include "observer/registry.h"
#include "observer/tbtable.h"
#include "observer/trace_internal.h"
#include "unwind/unwind.h"

ETR_API uint32_t etr__tracking_ids;

/* The open trace (at most one) and the serial that tells per-thread states apart. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static etr_trace *g_trace;
static uint64_t g_serial;
static etr_trace *g_env_trace; /* opened through ETR_TRACE */
static etr_trace *g_forked_trace; /* in a forked child: the parent's trace, until closed */

static inline int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* ---- chunks (recording side) ---- */

static etr__chunk *chunk_alloc(uint32_t cap, bool oversized) {
  etr__chunk *c = malloc(sizeof *c + cap);
  if (!c) return NULL;
  c->next = NULL;
  c->len = 0;
  c->cap = cap;
  c->nodes = 0;
  c->oversized = oversized;
  return c;
}

/* Queue c for the writer (q_mutex held). */
static void enqueue_locked(etr_trace *tr, etr__chunk *c) {
  c->next = NULL;
  if (tr->q_tail)
    tr->q_tail->next = c;
  else
    tr->q_head = c;
  tr->q_tail = c;
  tr->q_pushed++;
  pthread_cond_signal(&tr->q_cond);
}

/* An empty or written chunk goes back to the pool, or is freed if it was made for one large
 * event (q_mutex held). */
static void recycle_locked(etr_trace *tr, etr__chunk *c) {
  if (c->oversized) {
    free(c);
  } else {
    c->next = tr->free_chunks;
    tr->free_chunks = c;
  }
}

/* A thread gives up its chunk: queued when it holds events, else recycled (q_mutex held). */
static void give_up_locked(etr_trace *tr, etr__chunk *c) {
  if (c->len)
    enqueue_locked(tr, c);
  else
    recycle_locked(tr, c);
}

/* Hands the thread's chunk to the writer (if it holds anything) and gets a chunk with room
 * for need bytes. Waits while max_chunks are queued for the writer: the bound is on the
 * queue, not on chunks threads hold, because a thread that stops recording keeps its
 * partly filled chunk until it exits or the trace closes, and any number of threads may do
 * so. NULL when memory is exhausted. */
static etr__chunk *next_chunk(etr__tstate *ts, size_t need) {
  etr_trace *tr = ts->trace;
  bool oversized = need > tr->chunk_size; /* one large event: a chunk of its own */
  pthread_mutex_lock(&tr->q_mutex);
  if (ts->chunk) give_up_locked(tr, ts->chunk);
  ts->chunk = NULL;
  bool waited = false;
  while (tr->q_pushed - tr->q_done >= tr->max_chunks && !tr->stop) {
    if (!waited) atomic_fetch_add_explicit(&tr->buffer_waits, 1, memory_order_relaxed);
    waited = true;
    pthread_cond_wait(&tr->space_cond, &tr->q_mutex);
  }
  etr__chunk *c = NULL;
  if (!oversized && tr->free_chunks) {
    c = tr->free_chunks;
    tr->free_chunks = c->next;
  }
  pthread_mutex_unlock(&tr->q_mutex);
  if (!c) return chunk_alloc(oversized ? (uint32_t)need : tr->chunk_size, oversized);
  c->len = 0;
  c->nodes = 0;
  c->next = NULL;
  return c;
}

/* Push the thread's partly filled chunk to the writer. */
static void hand_over(etr__tstate *ts) {
  if (!ts->chunk) return;
  etr_trace *tr = ts->trace;
  pthread_mutex_lock(&tr->q_mutex);
  give_up_locked(tr, ts->chunk);
  pthread_mutex_unlock(&tr->q_mutex);
  ts->chunk = NULL;
}

/* Room for an event of size bytes (a multiple of 8) in the thread's chunk; NULL, counted as
 * a dropped node, after a write error or when memory is exhausted. */
static uint8_t *event_room(etr__tstate *ts, size_t size) {
  etr__chunk *c = ts->chunk;
  if (atomic_load_explicit(&ts->trace->failed, memory_order_relaxed)) {
    c = NULL;
  } else if (!c || c->len + size > c->cap) {
    c = ts->chunk = next_chunk(ts, size);
  }
  if (!c) {
    etr__bump(&ts->nodes_dropped, 1);
    return NULL;
  }
  return c->data + c->len;
}

/* The event written at event_room's pointer is complete. A chunk made for one large event
 * is shipped at once. */
static void event_commit(etr__tstate *ts, size_t size) {
  ts->chunk->len += (uint32_t)size;
  ts->chunk->nodes++;
  if (ts->chunk->oversized) hand_over(ts);
}

/* ---- per-thread state ---- */

static _Atomic(etr__tstate *) *tid_slot(etr_trace *tr, uint64_t tid, bool create) {
  if (tid == 0 || tid >= (uint64_t)ETR__TID_PAGE * ETR__TID_PAGES) return NULL;
  size_t page = (size_t)(tid / ETR__TID_PAGE);
  _Atomic(etr__tstate *) *p = __atomic_load_n(&tr->tid_pages[page], __ATOMIC_ACQUIRE);
  if (!p && create) {
    p = calloc(ETR__TID_PAGE, sizeof *p);
    if (!p) return NULL;
    __atomic_store_n(&tr->tid_pages[page], p, __ATOMIC_RELEASE);
  }
  return p ? &p[tid % ETR__TID_PAGE] : NULL;
}

static etr__tstate *tstate_new(etr_trace *tr, etr__thread *thr) {
  etr__tstate *ts = calloc(1, sizeof *ts);
  if (!ts) return NULL;
  ts->trace = tr;
  ts->tid = thr->tid;
  ts->thread_node_id = etr__next_id(ts);
  pthread_mutex_lock(&tr->threads_mutex);
  ts->next = tr->threads;
  tr->threads = ts;
  _Atomic(etr__tstate *) *slot = tid_slot(tr, ts->tid, true);
  if (slot) atomic_store_explicit(slot, ts, memory_order_release);
  pthread_mutex_unlock(&tr->threads_mutex);
  atomic_fetch_add_explicit(&tr->threads_count, 1, memory_order_relaxed);
  thr->trace_state = ts;
  thr->trace_serial = tr->serial;
  return ts;
}

static inline etr__tstate *tstate_of(etr_trace *tr, etr__thread *thr) {
  if (ETR__LIKELY(thr->trace_state && thr->trace_serial == tr->serial)) {
    etr__tstate *ts = thr->trace_state;
    return ts->finished ? NULL : ts;
  }
  return tstate_new(tr, thr);
}

/* Writes frame `idx` as a node, ended at end_ns, and removes it from the stack. */
static void finish_frame(etr__tstate *ts, uint32_t idx, int64_t end_ns, const etr_record *rec,
                         bool incomplete) {
  etr__frame *f = &ts->frames[idx];
  int64_t incl = end_ns - f->start_ns;
  if (incl < 0) incl = 0;
  if (idx > 0) ts->frames[idx - 1].child_ns += incl;

  size_t out_off = ts->arena_len;
  uint32_t n_out = 0;
  size_t out_len = 0;
  if (rec && !incomplete && rec->outputs && rec->n_outputs)
    out_len = etr__encode_values(ts, rec->outputs, rec->n_outputs, &n_out);

  etr__ev *ev = (etr__ev *)(void *)(ts->arena + f->off);
  ev->n_out = n_out;
  ev->out_len = (uint32_t)out_len;
  ev->incl_ns = incl;
  ev->excl_ns = incl - f->child_ns > 0 ? incl - f->child_ns : 0;
  if (incomplete) ev->flags |= ETR__EVF_INCOMPLETE;
  size_t total = f->payload + out_len;
  size_t size = round8(total);
  ev->size = (uint32_t)size;

  uint8_t *dst = event_room(ts, size);
  if (dst) {
    memcpy(dst, ts->arena + f->off, f->payload);
    memcpy(dst + f->payload, ts->arena + out_off, out_len);
    memset(dst + total, 0, size - total);
    event_commit(ts, size);
    etr__bump(&ts->ops_recorded, 1);
  }

  /* Drop the frame's region (and the outputs) from the arena. */
  if (idx + 1 == ts->depth) {
    ts->arena_len = f->off;
  } else {
    size_t tail = out_off - (f->off + f->len);
    memmove(ts->arena + f->off, ts->arena + f->off + f->len, tail);
    for (uint32_t j = idx + 1; j < ts->depth; j++) ts->frames[j].off -= f->len;
    ts->arena_len = f->off + tail;
    memmove(&ts->frames[idx], &ts->frames[idx + 1], (ts->depth - idx - 1) * sizeof *f);
  }
  ts->depth--;
  atomic_store_explicit(&ts->top_id, ts->depth ? ts->frames[ts->depth - 1].id : 0,
                        memory_order_relaxed);
  atomic_store_explicit(&ts->depth_pub, ts->depth, memory_order_relaxed);
}

/* ---- tracebacks (recording side) ---- */

static uint64_t name_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* Whether this op gets a traceback under cfg: the name pattern (results cached per thread
 * by name pointer and hash, as runtimes pass the same few name strings again and again),
 * then 1 in N. */
static bool wants_traceback(etr__tstate *ts, const etr__tbcfg *cfg, const char *name) {
  if (cfg->pattern) {
    if (ts->tb_cfg_version != cfg->version) {
      memset(ts->tb_names, 0, sizeof ts->tb_names);
      ts->tb_cfg_version = cfg->version;
    }
    const char *n = name ? name : "";
    uint64_t h = name_hash(n);
    size_t i = (size_t)((h ^ ((uintptr_t)n >> 4)) & 15);
    bool match;
    if (ts->tb_names[i].name == n && ts->tb_names[i].hash == h) {
      match = ts->tb_names[i].match;
    } else {
      match = fnmatch(cfg->pattern, n, 0) == 0;
      ts->tb_names[i].name = n;
      ts->tb_names[i].hash = h;
      ts->tb_names[i].match = match;
    }
    if (!match) return false;
  }
  if (cfg->every > 1) {
    if (ts->tb_countdown > 1) {
      ts->tb_countdown--;
      return false;
    }
    ts->tb_countdown = cfg->every;
  }
  return true;
}

/* Capture the calling op's traceback into the arena, right after the event header (so the
 * frame words are 8-aligned and written in place); returns the words written. The walk
 * starts inside etr; the frames above the runtime's call to etr__record_begin (whose return
 * address the registry saved) are etr's own and dropped. */
static uint32_t capture_traceback(etr__tstate *ts, const etr__tbcfg *cfg, uintptr_t begin_ra,
                                  uint64_t *gen) {
  if (!ts->tb_ips) {
    etr__unwind_thread_init(); /* the thread's first capture allocates: do it here, not later */
    ts->tb_ips = malloc((ETR__TB_DEPTH_MAX + ETR__TB_OWN_FRAMES) * sizeof *ts->tb_ips);
    if (!ts->tb_ips) return 0;
  }
  if (!etr__arena_reserve(ts, cfg->depth * sizeof(uint64_t))) return 0;
  size_t n = etr__unwind_capture(ts->tb_ips, cfg->depth + ETR__TB_OWN_FRAMES, 0, gen);
  size_t first = 0;
  for (size_t i = 0; i < n && i < ETR__TB_OWN_FRAMES; i++) {
    if (ts->tb_ips[i] == begin_ra) {
      first = i;
      break;
    }
  }
  size_t keep = n - first;
  if (keep > cfg->depth) keep = cfg->depth;
  uint64_t *out = (uint64_t *)(void *)(ts->arena + ts->arena_len);
  size_t words = etr__script_interleave(ts->tb_ips + first, keep, out, cfg->depth);
  ts->arena_len += words * sizeof *out;
  if (words) etr__bump(&ts->tracebacks, 1);
  return (uint32_t)words;
}

static void trace_enter(const etr_record *rec, void *user) {
  etr_trace *tr = user;
  etr__thread *thr = etr__thread_self();
  if (!thr) return;
  etr__tstate *ts = tstate_of(tr, thr);
  if (!ts) return;
  if (ts->depth == ts->frames_cap) {
    uint32_t cap = ts->frames_cap ? ts->frames_cap * 2 : 32;
    etr__frame *f = realloc(ts->frames, cap * sizeof *f);
    if (!f) {
      etr__bump(&ts->nodes_dropped, 1);
      return;
    }
    ts->frames = f;
    ts->frames_cap = cap;
  }
  /* Frame regions start 8-aligned so the header can be used in place. */
  size_t off = round8(ts->arena_len);
  if (!etr__arena_reserve(ts, off - ts->arena_len + sizeof(etr__ev))) {
    etr__bump(&ts->nodes_dropped, 1);
    return;
  }
  ts->arena_len = off + sizeof(etr__ev);
  etr__ev hdr;
  memset(&hdr, 0, sizeof hdr);
  hdr.type = ETR__EV_OP;
  hdr.flags = tr->opt.no_timing ? 0 : ETR__EVF_TIMING;
  hdr.id = etr__next_id(ts);
  hdr.parent = ts->depth ? ts->frames[ts->depth - 1].id : ts->thread_node_id;
  hdr.rf_id = rec->_rf_id;
  hdr.tid = ts->tid;
  hdr.fw_tid = rec->fw_tid;
  if (rec->fw_tid) {
    _Atomic(etr__tstate *) *slot = tid_slot(tr, rec->fw_tid, false);
    etr__tstate *fw = slot ? atomic_load_explicit(slot, memory_order_acquire) : NULL;
    if (fw) hdr.fw_parent = atomic_load_explicit(&fw->top_id, memory_order_relaxed);
  }
  hdr.seq = rec->seq_nr;
  hdr.scope = rec->scope;
  hdr.kstream = -1;
  const etr__tbcfg *cfg = atomic_load_explicit(&tr->tb_cfg, memory_order_acquire);
  if (cfg && cfg->enabled && wants_traceback(ts, cfg, rec->name)) {
    hdr.tb_n = capture_traceback(ts, cfg, thr->begin_ra, &hdr.tb_gen);
    if (hdr.tb_n) hdr.flags |= ETR__EVF_TRACEBACK;
  }
  hdr.name_len = (uint32_t)etr__encode_str(ts, rec->name, 0, ETR__STRING_MAX);
  hdr.schema_len = (uint32_t)etr__encode_str(ts, rec->schema, 0, ETR__STRING_MAX);
  if (rec->kernel) {
    hdr.flags |= ETR__EVF_KERNEL;
    hdr.kback_len = (uint32_t)etr__encode_str(ts, rec->kernel->backend, 0, ETR__STRING_MAX);
    hdr.kfile_len = (uint32_t)etr__encode_str(ts, rec->kernel->file, 0, ETR__STRING_MAX);
    memcpy(hdr.kgrid, rec->kernel->grid, sizeof hdr.kgrid);
    hdr.kstream = rec->kernel->stream;
  }
  if (rec->collective) {
    hdr.coll_len = (uint32_t)etr__encode_collective(ts, rec->collective);
    if (hdr.coll_len) hdr.flags |= ETR__EVF_COLLECTIVE;
  }
  if (rec->inputs && rec->n_inputs)
    hdr.in_len = (uint32_t)etr__encode_values(ts, rec->inputs, rec->n_inputs, &hdr.n_in);
  memcpy(ts->arena + off, &hdr, sizeof hdr);

  etr__frame *f = &ts->frames[ts->depth++];
  f->rec = rec;
  f->id = hdr.id;
  f->child_ns = 0;
  f->off = off;
  f->payload = ts->arena_len - off;
  ts->arena_len = off + round8(f->payload); /* (the pad is never read) */
  f->len = ts->arena_len - off;
  atomic_store_explicit(&ts->top_id, hdr.id, memory_order_relaxed);
  atomic_store_explicit(&ts->depth_pub, ts->depth, memory_order_relaxed);
  /* Last, so that the op's own time excludes our encoding. */
  f->start_ns = tr->opt.no_timing ? 0 : now_ns();
  ((etr__ev *)(void *)(ts->arena + off))->ts_ns = f->start_ns;
}

static void trace_exit(const etr_record *rec, void *user) {
  etr_trace *tr = user;
  int64_t end = tr->opt.no_timing ? 0 : now_ns();
  etr__thread *thr = etr__thread_self();
  if (!thr || !thr->trace_state || thr->trace_serial != tr->serial) return;
  etr__tstate *ts = thr->trace_state;
  if (ts->finished) return;
  uint32_t idx = ts->depth;
  while (idx > 0 && ts->frames[idx - 1].rec != rec) idx--;
  if (idx == 0) {
    etr__bump(&ts->ends_without_begin, 1);
    return;
  }
  idx--;
  if (idx + 1 != ts->depth) etr__bump(&ts->ends_out_of_order, 1);
  finish_frame(ts, idx, end, rec, false);
}

/* Writes the thread's open ops (innermost first, marked incomplete), its thread node, and
 * hands its chunk over. Caller guarantees the owner thread is not inside our callbacks. */
static void finish_thread(etr__tstate *ts, _Atomic uint64_t *open_counter) {
  if (ts->finished) return;
  int64_t end = now_ns();
  if (ts->depth) atomic_fetch_add_explicit(open_counter, ts->depth, memory_order_relaxed);
  while (ts->depth) finish_frame(ts, ts->depth - 1, end, NULL, true);
  etr__ev ev;
  memset(&ev, 0, sizeof ev);
  ev.size = (uint32_t)round8(sizeof ev);
  ev.type = ETR__EV_THREAD;
  ev.id = ts->thread_node_id;
  ev.parent = 1;
  ev.tid = ts->tid;
  uint8_t *dst = event_room(ts, ev.size);
  if (dst) {
    memcpy(dst, &ev, sizeof ev);
    event_commit(ts, ev.size);
  }
  hand_over(ts);
  free(ts->arena);
  ts->arena = NULL;
  ts->arena_len = ts->arena_cap = 0;
  free(ts->frames);
  ts->frames = NULL;
  ts->frames_cap = 0;
  free(ts->tb_ips);
  ts->tb_ips = NULL;
  ts->finished = true;
}

void etr__trace_thread_exit(etr__thread *thr) {
  pthread_mutex_lock(&g_lock);
  etr_trace *tr = g_trace;
  if (tr && thr->trace_state && thr->trace_serial == tr->serial && tr->pid == getpid()) {
    pthread_mutex_lock(&tr->threads_mutex);
    finish_thread(thr->trace_state, &tr->ops_open_at_thread_exit);
    pthread_mutex_unlock(&tr->threads_mutex);
  }
  pthread_mutex_unlock(&g_lock);
  thr->trace_state = NULL;
}

/* ---- object ids ---- */

static void object_died(bool tensor, const void *p) {
  etr__thread *thr = etr__thread_self();
  if (!thr || !p) return;
  etr__hazard_publish(&thr->hazard_ids, 1); /* pairs with close's store of the flag */
  if (__atomic_load_n(&etr__tracking_ids, __ATOMIC_SEQ_CST)) {
    etr_trace *tr = __atomic_load_n(&g_trace, __ATOMIC_ACQUIRE);
    if (tr && etr__idmap_remove(tensor ? tr->tensors : tr->storages, p))
      atomic_fetch_add_explicit(&tr->ids_retired, 1, memory_order_relaxed);
  }
  atomic_store_explicit(&thr->hazard_ids, 0, memory_order_release);
}

void etr__tensor_died(const void *impl) { object_died(true, impl); }
void etr__storage_died(const void *storage) { object_died(false, storage); }

/* ---- writer thread ---- */

/* The JSON buffer only ever holds whole nodes: it is flushed between nodes, so a write
 * error loses exactly the nodes counted in `buffered`. */
#define WRITER_FLUSH_AT (512u * 1024u)

static void writer_flush(etr_trace *tr, uint64_t *buffered) {
  etr__jw_flush(&tr->jw);
  if (tr->jw.err)
    atomic_fetch_add_explicit(&tr->nodes_dropped_writer, *buffered, memory_order_relaxed);
  else
    atomic_fetch_add_explicit(&tr->nodes_written, *buffered, memory_order_relaxed);
  *buffered = 0;
  atomic_store_explicit(&tr->bytes_written, tr->jw.written, memory_order_relaxed);
  atomic_store_explicit(&tr->utf8_replaced, tr->jw.replaced, memory_order_relaxed);
  if (tr->jw.err && !atomic_load(&tr->failed)) {
    atomic_store(&tr->write_error, tr->jw.err);
    atomic_store(&tr->failed, 1);
    etr__log(ETR_LOG_ERROR, "trace write failed (%s); recording stopped", strerror(tr->jw.err));
    /* Stop paying for ops that cannot be written; ops in flight still end normally. */
    etr_observer_disable(tr->obs);
  }
}

static void process_chunk(etr_trace *tr, etr__chunk *c, uint64_t *buffered) {
  if (atomic_load_explicit(&tr->failed, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&tr->nodes_dropped_writer, c->nodes, memory_order_relaxed);
    return;
  }
  uint32_t off = 0;
  while (off + sizeof(etr__ev) <= c->len) {
    const etr__ev *ev = (const etr__ev *)(const void *)(c->data + off);
    etr__emit_event(tr, ev);
    (*buffered)++;
    off += ev->size;
    if (tr->jw.len >= WRITER_FLUSH_AT) writer_flush(tr, buffered);
  }
}

static void *writer_main(void *arg) {
  etr_trace *tr = arg;
  /* Signals are for the host's threads, not ours. */
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  uint64_t buffered = 0;
  pthread_mutex_lock(&tr->q_mutex);
  for (;;) {
    if (tr->q_head) {
      etr__chunk *list = tr->q_head;
      tr->q_head = tr->q_tail = NULL;
      pthread_mutex_unlock(&tr->q_mutex);
      uint64_t n = 0;
      etr__chunk *done = NULL;
      while (list) {
        etr__chunk *c = list;
        list = c->next;
        process_chunk(tr, c, &buffered);
        n++;
        c->next = done;
        done = c;
      }
      pthread_mutex_lock(&tr->q_mutex);
      while (done) {
        etr__chunk *c = done;
        done = c->next;
        recycle_locked(tr, c);
      }
      tr->q_done += n;
      pthread_cond_broadcast(&tr->space_cond);
      /* A flusher waits for this batch: do not make it wait for an empty queue, which
       * other recording threads may never leave. */
      if (tr->flush_waiters == 0) continue;
    }
    /* Queue empty (or a flusher waiting): put what we have on disk, then tell flushers. */
    if (tr->jw.len || tr->q_synced != tr->q_done) {
      uint64_t done = tr->q_done;
      bool flushing = tr->flush_waiters != 0;
      pthread_mutex_unlock(&tr->q_mutex);
      writer_flush(tr, &buffered);
      /* An explicit flush is where deferred symbolization happens (besides close). */
      if (flushing && tr->tbtab) {
        etr__tbtab_symbolize(tr->tbtab);
        atomic_store_explicit(&tr->tb_frames, etr__tbtab_frames(tr->tbtab), memory_order_relaxed);
      }
      pthread_mutex_lock(&tr->q_mutex);
      tr->q_synced = done;
      pthread_cond_broadcast(&tr->done_cond);
      continue;
    }
    if (tr->q_head) continue;
    if (tr->stop) break;
    pthread_cond_wait(&tr->q_cond, &tr->q_mutex);
  }
  pthread_mutex_unlock(&tr->q_mutex);
  etr__emit_footer(tr);
  buffered++; /* the process node */
  writer_flush(tr, &buffered);
  return NULL;
}

/* ---- life cycle ---- */

static void default_options(etr_trace_options *o, const etr_trace_options *in) {
  etr_trace_options d = ETR_TRACE_OPTIONS_INIT;
  *o = d;
  if (in) {
    size_t n = in->struct_size && in->struct_size < sizeof *o ? in->struct_size : sizeof *o;
    memcpy(o, in, n);
    o->struct_size = sizeof *o;
  }
}

/* Publish a new traceback configuration (replacing, not freeing, the current one). */
static int tb_configure(etr_trace *tr, const etr_traceback_options *in) {
  etr_traceback_options o = ETR_TRACEBACK_OPTIONS_INIT;
  size_t n = in->struct_size && in->struct_size < sizeof o ? in->struct_size : sizeof o;
  memcpy(&o, in, n);
  if (o.max_depth > ETR__TB_DEPTH_MAX || (unsigned)o.symbolize > ETR_SYMBOLIZE_MODULE)
    return ETR_EINVAL;
  etr__tbcfg *c = calloc(1, sizeof *c);
  if (!c) return ETR_ENOMEM;
  c->enabled = o.enabled;
  if (o.pattern && *o.pattern && !(c->pattern = strdup(o.pattern))) {
    free(c);
    return ETR_ENOMEM;
  }
  c->every = o.every ? o.every : 1;
  c->depth = o.max_depth ? o.max_depth : ETR__TB_DEPTH_DEFAULT;
  pthread_mutex_lock(&tr->tb_mutex);
  etr__tbcfg *old = atomic_load(&tr->tb_cfg);
  c->older = old;
  c->version = old ? old->version + 1 : 1;
  atomic_store_explicit(&tr->tb_cfg, c, memory_order_release);
  if (c->enabled) atomic_store(&tr->tb_ever, true);
  pthread_mutex_unlock(&tr->tb_mutex);
  return 0;
}

int etr_trace_set_traceback(etr_trace *tr, const etr_traceback_options *opt) {
  if (!tr || !opt) return ETR_EINVAL;
  if (tr->pid != getpid()) return ETR_EFORKED;
  return tb_configure(tr, opt);
}

/* in_child: a forked child's copy, whose mutexes and condition variables may show waiters
 * that do not exist here (destroying them would block): leave them. */
static void trace_free(etr_trace *tr, bool in_child) {
  etr__chunk *lists[2] = {tr->q_head, tr->free_chunks};
  for (int i = 0; i < 2; i++)
    for (etr__chunk *c = lists[i]; c;) {
      etr__chunk *n = c->next;
      free(c);
      c = n;
    }
  for (etr__tstate *ts = tr->threads; ts;) {
    etr__tstate *n = ts->next;
    free(ts->chunk);
    free(ts->arena);
    free(ts->frames);
    free(ts);
    ts = n;
  }
  for (size_t i = 0; i < ETR__TID_PAGES; i++) free(tr->tid_pages[i]);
  for (etr__tbcfg *c = atomic_load(&tr->tb_cfg); c;) {
    etr__tbcfg *o = c->older;
    free(c->pattern);
    free(c);
    c = o;
  }
  etr__tbtab_free(tr->tbtab);
  etr__idmap_free(tr->tensors);
  etr__idmap_free(tr->storages);
  etr__jw_free(&tr->jw);
  if (in_child) {
    free(tr);
    return;
  }
  pthread_mutex_destroy(&tr->threads_mutex);
  pthread_mutex_destroy(&tr->tb_mutex);
  pthread_mutex_destroy(&tr->q_mutex);
  pthread_cond_destroy(&tr->q_cond);
  pthread_cond_destroy(&tr->space_cond);
  pthread_cond_destroy(&tr->done_cond);
  free(tr);
}

int etr_trace_open(const char *path, const etr_trace_options *opt, etr_trace **out) {
  if (out) *out = NULL;
  if (!path || !*path || !out) return ETR_EINVAL;
  if (opt && opt->struct_size != 0 && opt->struct_size < offsetof(etr_trace_options, no_timing))
    return ETR_EINVAL;
  etr_trace_options o;
  default_options(&o, opt);
  if ((unsigned)o.schema > ETR_SCHEMA_1_1_0) return ETR_EINVAL;
  if (!(o.sample_probability >= 0.0 && o.sample_probability <= 1.0)) return ETR_EINVAL;

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
  tr->opt = o;
  tr->pid = getpid();
  tr->serial = ++g_serial;
  tr->chunk_size = (o.buffer_kb ? o.buffer_kb : 64) * 1024u;
  if (tr->chunk_size < 4096) tr->chunk_size = 4096;
  tr->max_chunks = o.max_buffers ? o.max_buffers : 64;
  if (tr->max_chunks < 2) tr->max_chunks = 2;
  atomic_init(&tr->next_id, 2); /* 1 is the process node */
  pthread_mutex_init(&tr->threads_mutex, NULL);
  pthread_mutex_init(&tr->tb_mutex, NULL);
  pthread_mutex_init(&tr->q_mutex, NULL);
  pthread_cond_init(&tr->q_cond, NULL);
  pthread_cond_init(&tr->space_cond, NULL);
  pthread_cond_init(&tr->done_cond, NULL);
  tr->tensors = etr__idmap_new();
  tr->storages = etr__idmap_new();
  int rc = 0, open_errno = 0;
  tr->fd = -1;
  if (!tr->tensors || !tr->storages || etr__jw_init(&tr->jw, -1, 1u << 20) != 0) rc = ETR_ENOMEM;
  if (rc == 0 && o.traceback.enabled) rc = tb_configure(tr, &o.traceback);
  if (rc == 0) {
    tr->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (tr->fd < 0) {
      open_errno = errno;
      etr__log(ETR_LOG_ERROR, "cannot open trace file %s: %s", path, strerror(errno));
      rc = ETR_EOPEN;
    }
  }
  if (rc == 0) {
    tr->jw.fd = tr->fd;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    tr->start_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    /* Buffered: the writer thread writes it with the first nodes (or at close). */
    etr__emit_header(tr);
    etr_observer_options oo = ETR_OBSERVER_OPTIONS_INIT;
    oo.enter = trace_enter;
    oo.exit = trace_exit;
    oo.user = tr;
    oo.needs = ETR_NEEDS_INPUTS | ETR_NEEDS_OUTPUTS | ETR_NEEDS_IDS;
    oo.scopes = o.scopes;
    oo.sample_probability = o.sample_probability;
    oo.start_disabled = true;
    rc = etr_observer_add(&oo, &tr->obs);
  }
  if (rc == 0 && pthread_create(&tr->writer, NULL, writer_main, tr) != 0) {
    etr_observer_remove(tr->obs);
    rc = ETR_ETHREAD;
  }
  if (rc != 0) {
    if (tr->fd >= 0) {
      close(tr->fd);
      unlink(path);
    }
    trace_free(tr, false);
    pthread_mutex_unlock(&g_lock);
    if (open_errno) errno = open_errno; /* why the file could not be created */
    return rc;
  }
  __atomic_store_n(&g_trace, tr, __ATOMIC_RELEASE);
  __atomic_store_n(&etr__tracking_ids, 1u, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&g_lock);
  *out = tr;
  return 0;
}

static bool usable(const etr_trace *tr) { return tr && tr->pid == getpid(); }

int etr_trace_enable(etr_trace *tr) {
  if (!tr) return ETR_EINVAL;
  if (!usable(tr)) return ETR_EFORKED;
  if (atomic_load(&tr->failed)) return ETR_EIO;
  return etr_observer_enable(tr->obs);
}

int etr_trace_disable(etr_trace *tr) {
  if (!tr) return ETR_EINVAL;
  if (!usable(tr)) return ETR_EFORKED;
  int rc = etr_observer_disable(tr->obs);
  uint64_t open = 0;
  pthread_mutex_lock(&tr->threads_mutex);
  for (etr__tstate *ts = tr->threads; ts; ts = ts->next)
    open += atomic_load_explicit(&ts->depth_pub, memory_order_relaxed);
  pthread_mutex_unlock(&tr->threads_mutex);
  atomic_fetch_add_explicit(&tr->ops_open_at_disable, open, memory_order_relaxed);
  etr_script_release_pending(); /* a safe point for the script unwinder (no lock held) */
  return rc;
}

bool etr_trace_is_enabled(const etr_trace *tr) {
  return tr && usable(tr) && etr_observer_is_enabled(tr->obs) == 1;
}

int etr_trace_flush(etr_trace *tr) {
  if (!tr) return ETR_EINVAL;
  if (!usable(tr)) return ETR_EFORKED;
  etr__thread *thr = etr__thread_self();
  /* The caller's own chunk is safe to take only outside our callbacks on this thread. */
  if (thr && thr->in_callback == 0 && thr->trace_state && thr->trace_serial == tr->serial) {
    etr__tstate *ts = thr->trace_state;
    if (!ts->finished) hand_over(ts);
  }
  pthread_mutex_lock(&tr->q_mutex);
  uint64_t target = tr->q_pushed;
  pthread_cond_signal(&tr->q_cond);
  tr->flush_waiters++;
  while (tr->q_synced < target && !tr->stop) pthread_cond_wait(&tr->done_cond, &tr->q_mutex);
  tr->flush_waiters--;
  pthread_mutex_unlock(&tr->q_mutex);
  etr_script_release_pending();
  return atomic_load(&tr->write_error) ? ETR_EIO : 0;
}

int etr_trace_close(etr_trace *tr) { return etr_trace_close_stats(tr, NULL); }

int etr_trace_close_stats(etr_trace *tr, etr_trace_stats *out) {
  if (!tr) return 0;
  if (!usable(tr)) {
    /* A forked child: the file and the writer are the parent's. Free quietly. */
    pthread_mutex_lock(&g_lock);
    if (g_forked_trace == tr) g_forked_trace = NULL;
    if (g_env_trace == tr) g_env_trace = NULL;
    pthread_mutex_unlock(&g_lock);
    trace_free(tr, true);
    return ETR_EFORKED;
  }
  pthread_mutex_lock(&g_lock);
  if (g_trace != tr) {
    pthread_mutex_unlock(&g_lock);
    return ETR_ESTATE;
  }
  /* From here on thread exits leave their state to us. */
  __atomic_store_n(&g_trace, NULL, __ATOMIC_RELEASE);
  if (g_env_trace == tr) g_env_trace = NULL;
  pthread_mutex_unlock(&g_lock);

  etr_observer_remove(tr->obs); /* waits for callbacks running on other threads */
  __atomic_store_n(&etr__tracking_ids, 0u, __ATOMIC_SEQ_CST);
  etr__wait_ids();

  pthread_mutex_lock(&tr->threads_mutex);
  for (etr__tstate *ts = tr->threads; ts; ts = ts->next)
    finish_thread(ts, &tr->ops_open_at_close);
  pthread_mutex_unlock(&tr->threads_mutex);

  pthread_mutex_lock(&tr->q_mutex);
  tr->stop = true;
  pthread_cond_broadcast(&tr->q_cond);
  pthread_cond_broadcast(&tr->space_cond);
  pthread_mutex_unlock(&tr->q_mutex);
  pthread_join(tr->writer, NULL);

  int rc = 0;
  if (close(tr->fd) != 0 && !atomic_load(&tr->write_error)) atomic_store(&tr->write_error, errno);
  if (atomic_load(&tr->write_error)) rc = ETR_EIO;
  if (out) etr_trace_stats_get(tr, out);
  trace_free(tr, false);
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

/* At process exit (or library unload): finalize the trace still open. */
void etr__trace_shutdown(void) {
  etr_trace *tr = __atomic_load_n(&g_trace, __ATOMIC_ACQUIRE);
  if (tr && tr->pid == getpid()) etr_trace_close(tr);
}

void etr__trace_collect_stats(const etr_trace *tr, etr_trace_stats *s) {
  memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
  etr_trace *m = (etr_trace *)tr; /* counters are atomics; the lock only guards the list */
  pthread_mutex_lock(&m->threads_mutex);
  for (etr__tstate *ts = tr->threads; ts; ts = ts->next) {
    s->ops_recorded += atomic_load_explicit(&ts->ops_recorded, memory_order_relaxed);
    s->ends_without_begin += atomic_load_explicit(&ts->ends_without_begin, memory_order_relaxed);
    s->ends_out_of_order += atomic_load_explicit(&ts->ends_out_of_order, memory_order_relaxed);
    s->strings_cut += atomic_load_explicit(&ts->strings_cut, memory_order_relaxed);
    s->lists_cut += atomic_load_explicit(&ts->lists_cut, memory_order_relaxed);
    s->nesting_cut += atomic_load_explicit(&ts->nesting_cut, memory_order_relaxed);
    s->nodes_dropped += atomic_load_explicit(&ts->nodes_dropped, memory_order_relaxed);
    s->objects += atomic_load_explicit(&ts->objects, memory_order_relaxed);
    s->tracebacks += atomic_load_explicit(&ts->tracebacks, memory_order_relaxed);
  }
  pthread_mutex_unlock(&m->threads_mutex);
  s->nodes_written = atomic_load(&tr->nodes_written);
  s->bytes_written = atomic_load(&tr->bytes_written);
  s->threads = atomic_load(&tr->threads_count);
  s->ids_retired = atomic_load(&tr->ids_retired);
  s->utf8_replaced = atomic_load(&tr->utf8_replaced);
  s->ops_open_at_disable = atomic_load(&tr->ops_open_at_disable);
  s->ops_open_at_thread_exit = atomic_load(&tr->ops_open_at_thread_exit);
  s->ops_open_at_close = atomic_load(&tr->ops_open_at_close);
  s->nodes_dropped += atomic_load(&tr->nodes_dropped_writer);
  s->buffer_waits = atomic_load(&tr->buffer_waits);
  s->write_error = atomic_load(&tr->write_error);
  s->tracebacks_unique = atomic_load(&tr->tb_unique);
  s->frames_unique = atomic_load(&tr->tb_frames);
}

int etr_trace_stats_get(const etr_trace *tr, etr_trace_stats *out) {
  if (!tr || !out) return ETR_EINVAL;
  etr_trace_stats s;
  etr__trace_collect_stats(tr, &s);
  size_t n = out->struct_size == 0 || out->struct_size > sizeof s ? sizeof s : out->struct_size;
  memcpy(out, &s, n);
  out->struct_size = n;
  return 0;
}

/* ---- fork ---- */

void etr__trace_before_fork(void) {
  pthread_mutex_lock(&g_lock);
  if (g_trace) {
    pthread_mutex_lock(&g_trace->threads_mutex);
    pthread_mutex_lock(&g_trace->q_mutex);
  }
}

void etr__trace_after_fork_parent(void) {
  if (g_trace) {
    pthread_mutex_unlock(&g_trace->q_mutex);
    pthread_mutex_unlock(&g_trace->threads_mutex);
  }
  pthread_mutex_unlock(&g_lock);
}

void etr__trace_after_fork_child(void) {
  etr_trace *tr = g_trace;
  if (tr) {
    pthread_mutex_unlock(&tr->q_mutex);
    pthread_mutex_unlock(&tr->threads_mutex);
    /* The child must never write into the parent's file: stop recording here. The trace
     * stays allocated (the child may still call close, which frees it). */
    __atomic_store_n(&etr__tracking_ids, 0u, __ATOMIC_SEQ_CST);
    etr__observer_drop_in_child(tr->obs);
    g_forked_trace = tr;
    g_trace = NULL;
  }
  pthread_mutex_unlock(&g_lock);
}
