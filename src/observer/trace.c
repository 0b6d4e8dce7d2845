/* The execution-trace observer: per-thread op stacks, ids, timing, chunks, the writer
 * thread, and the trace's life cycle (open, enable, disable, flush, close, fork, exit).
 *
 * Locks, in the order they may nest: g_lock > threads_mutex > q_mutex > reg_lock and
 * threads_lock (registry.c). Recording threads take none on the per-op path; they take q_mutex once
 * per chunk (64 KiB by default) and threads_mutex once per thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static inline int64_t now_ns(void) { return etr__now_ns(); }

static pid_t my_tid(void) { return etr__gettid(); }

/* How long the file stays as finalized while a host's signal handler runs (one that _exits
 * soon leaves it finalized; one that leaves by siglongjmp cannot stall the writer longer). */
#define FATAL_HOLD_MS 2000

/* ---- chunks (recording side) ---- */

static etr__chunk *chunk_alloc(uint32_t cap, bool oversized) {
  etr__chunk *c = malloc(sizeof *c + cap);
  if (!c) return NULL;
  c->next = NULL;
  c->len = 0;
  c->cap = cap;
  c->nodes = 0;
  c->peeked = c->peeked_nodes = 0;
  c->owner = NULL;
  c->oversized = oversized;
  return c;
}

/* The thread's current chunk, which the writer reads during a timed flush. */
static inline void set_chunk(etr__tstate *ts, etr__chunk *c) {
  __atomic_store_n(&ts->chunk, c, __ATOMIC_RELEASE);
}

/* Queue c for the writer (q_mutex held). */
static void enqueue_locked(etr_trace *tr, etr__chunk *c) {
  c->next = NULL;
  if (c->owner) c->owner->queued++;
  if (tr->q_tail)
    tr->q_tail->next = c;
  else
    tr->q_head = c;
  tr->q_tail = c;
  tr->q_pushed++;
  sem_post(&tr->wake);
}

/* An empty or written chunk goes back to the pool, or is freed if it was made for one large
 * event (q_mutex held). */
static void recycle_locked(etr_trace *tr, etr__chunk *c) {
  c->peeked = c->peeked_nodes = 0;
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
  set_chunk(ts, NULL);
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
  if (!c && !(c = chunk_alloc(oversized ? (uint32_t)need : tr->chunk_size, oversized))) return NULL;
  __atomic_store_n(&c->len, 0, __ATOMIC_RELAXED);
  c->nodes = 0;
  c->next = NULL;
  c->owner = ts;
  c->tid = ts->tid;
  return c;
}

/* Push the thread's partly filled chunk to the writer. */
static void hand_over(etr__tstate *ts) {
  if (!ts->chunk) return;
  etr_trace *tr = ts->trace;
  pthread_mutex_lock(&tr->q_mutex);
  give_up_locked(tr, ts->chunk);
  set_chunk(ts, NULL);
  pthread_mutex_unlock(&tr->q_mutex);
}

uint8_t *etr__event_room(etr__tstate *ts, size_t size, bool node) {
  etr__chunk *c = ts->chunk;
  if (atomic_load_explicit(&ts->trace->failed, memory_order_relaxed)) {
    c = NULL;
  } else if (!c || c->len + size > c->cap) {
    c = next_chunk(ts, size);
    set_chunk(ts, c);
  }
  if (!c) {
    if (node) etr__bump(&ts->nodes_dropped, 1);
    return NULL;
  }
  return c->data + c->len;
}

/* A chunk made for one large event is shipped at once. */
void etr__event_commit(etr__tstate *ts, size_t size, bool node) {
  etr__chunk *c = ts->chunk;
  if (node) c->nodes++;
  __atomic_store_n(&c->len, c->len + (uint32_t)size, __ATOMIC_RELEASE); /* for the writer */
  if (c->oversized) hand_over(ts);
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

/* A new thread takes the state an exited thread left (threads_mutex held), so that a
 * process that starts and ends threads all the time keeps as many states as it has threads
 * at once, not one per thread it ever had. The list of states is never shortened while the
 * trace is open (the writer and a fatal signal walk it without a lock), and the counters
 * stay (they are sums over the states). A chunk of the old thread may still be queued: the
 * writer then only waits for it before peeking at the new thread's (the `queued` count). */
static etr__tstate *tstate_reuse_locked(etr_trace *tr) {
  etr__tstate *ts = tr->tstate_free;
  if (!ts) return NULL;
  tr->tstate_free = ts->free_next;
  ts->free_next = NULL;
  ts->id_next = ts->id_end = 0;
  ts->depth = 0;
  memset(&ts->tensor_ids, 0, sizeof ts->tensor_ids);
  memset(&ts->storage_ids, 0, sizeof ts->storage_ids);
  ts->tb_countdown = 0;
  ts->tb_cfg_version = 0;
  memset(ts->tb_names, 0, sizeof ts->tb_names);
  atomic_store_explicit(&ts->top_id, 0, memory_order_relaxed);
  atomic_store_explicit(&ts->depth_pub, 0, memory_order_relaxed);
  ts->finished = false;
  return ts;
}

static etr__tstate *tstate_new(etr_trace *tr, etr__thread *thr) {
  pthread_mutex_lock(&tr->threads_mutex);
  etr__tstate *ts = tstate_reuse_locked(tr);
  bool fresh = ts == NULL;
  if (fresh && !(ts = calloc(1, sizeof *ts))) {
    pthread_mutex_unlock(&tr->threads_mutex);
    return NULL;
  }
  ts->trace = tr;
  ts->tid = thr->tid;
  /* (from the shared counter, like op ids: a thread node comes before its first op) */
  ts->thread_node_id = atomic_fetch_add_explicit(&tr->next_id, 1, memory_order_relaxed);
  if (fresh) {
    ts->stream = tr->n_streams++;
    ts->next = tr->threads;
    __atomic_store_n(&tr->threads, ts, __ATOMIC_RELEASE); /* the writer walks the list */
  }
  _Atomic(etr__tstate *) *slot = tid_slot(tr, ts->tid, true);
  if (slot) atomic_store_explicit(slot, ts, memory_order_release);
  pthread_mutex_unlock(&tr->threads_mutex);
  atomic_fetch_add_explicit(&tr->threads_count, 1, memory_order_relaxed);
  thr->trace_state = ts;
  thr->trace_serial = tr->serial;
  /* The thread node goes first, so that a file cut short (kill -9) has the parent of every
   * op the thread finished; only ops still open at the cut lack theirs. */
  /* Thread events carry the kernel's thread id in rf_id and the thread's name as payload:
   * the one given to etr_thread_set_name, else the OS name (we run on that thread here). */
  char os_name[ETR__THREAD_NAME_MAX];
  const char *tname = thr->name;
  if (!tname[0] && pthread_getname_np(pthread_self(), os_name, sizeof os_name) == 0)
    tname = os_name;
  size_t tlen = strnlen(tname, ETR__THREAD_NAME_MAX - 1);
  uint64_t os_tid = (uint64_t)my_tid();
  size_t body = etr__uv_len(ts->thread_node_id) + etr__uv_len(ts->tid) + etr__uv_len(os_tid) + tlen;
  size_t size = 2 + etr__uv_len(body) + body;
  uint8_t *p = etr__event_room(ts, size, true);
  if (p) {
    *p++ = ETR__CEV_THREAD;
    *p++ = 0;
    p = etr__put_uv(p, body);
    p = etr__put_uv(p, ts->thread_node_id);
    p = etr__put_uv(p, ts->tid);
    p = etr__put_uv(p, os_tid);
    memcpy(p, tname, tlen);
    etr__event_commit(ts, size, true);
  }
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
  /* As written: start and end each rounded down to the µs. Children's rounded durations
   * are subtracted, so that a thread's exclusive times add up to at most its span. */
  int64_t incl_us = (f->start_ns + incl) / 1000 - f->start_ns / 1000;
  if (idx > 0) ts->frames[idx - 1].child_us += incl_us;
  int64_t excl_us = incl_us - f->child_us > 0 ? incl_us - f->child_us : 0;

  /* The outputs follow the frame's begin part when it is the innermost (as always but at
   * an abandoned op's end, which has none). */
  size_t out_off = ts->arena_len;
  bool failed = rec && etr_record_failed(rec);
  bool outputs = rec && !incomplete && !failed && rec->n_outputs; /* (NULL: none, counted) */
  if (!outputs || !etr__encode_values(ts, rec->outputs, rec->n_outputs, NULL)) {
    ts->arena_len = out_off;
    if (etr__arena_reserve(ts, 1)) ts->arena[ts->arena_len++] = 0; /* n_out */
  }
  size_t out_len = ts->arena_len - out_off;

  uint8_t flags = f->flags;
  if (incomplete) flags |= ETR__EVF_INCOMPLETE;
  if (failed) flags |= ETR__EVF_FAILED;
  uint8_t head[64];
  uint8_t *h = head;
  h = etr__put_uv(h, f->id);
  h = etr__put_uv(h, etr__zz((int64_t)(f->id - f->parent)));
  if (flags & ETR__EVF_TIMING) {
    h = etr__put_uv(h, etr__zz(f->start_ns - ts->trace->base_ns));
    h = etr__put_uv(h, (uint64_t)incl);
    h = etr__put_uv(h, (uint64_t)excl_us);
  }
  size_t fixed = (size_t)(h - head);
  size_t body = fixed + f->len + out_len;
  size_t size = 2 + etr__uv_len(body) + body;
  uint8_t *dst = out_len ? etr__event_room(ts, size, true) : NULL;
  if (dst) {
    *dst++ = ETR__CEV_OP;
    *dst++ = flags;
    dst = etr__put_uv(dst, body);
    for (size_t i = 0; i < fixed; i++) dst[i] = head[i]; /* (a few bytes: no call) */
    dst += fixed;
    if (out_off == f->off + f->len) { /* the begin part and the outputs are one run */
      memcpy(dst, ts->arena + f->off, f->len + out_len);
    } else {
      memcpy(dst, ts->arena + f->off, f->len);
      memcpy(dst + f->len, ts->arena + out_off, out_len);
    }
    etr__event_commit(ts, size, true);
    etr__bump(&ts->ops_recorded, 1);
  } else if (!out_len) {
    etr__bump(&ts->nodes_dropped, 1); /* (memory exhausted) */
  }
  etr__unpin(ts, f);

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

static uint64_t name_hash(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
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
    /* The pattern sees the name as the trace records it, cut at ETR__STRING_MAX bytes: a
     * huge name costs no more than one at the limit (hash, match). */
    const char *n = name ? name : "";
    size_t len = strnlen(n, ETR__STRING_MAX + 4); /* a character across the cut, whole */
    if (len > ETR__STRING_MAX) len = etr__utf8_cut(n, len, ETR__STRING_MAX);
    uint64_t h = name_hash(n, len);
    size_t i = (size_t)((h ^ ((uintptr_t)n >> 4)) & 15);
    bool match;
    if (ts->tb_names[i].name == n && ts->tb_names[i].hash == h) {
      match = ts->tb_names[i].match;
    } else {
      if (n[len] != '\0') { /* cut: fnmatch needs it NUL-terminated */
        char *cut = malloc(len + 1);
        if (!cut) return false;
        memcpy(cut, n, len);
        cut[len] = '\0';
        match = fnmatch(cfg->pattern, cut, 0) == 0;
        free(cut);
      } else {
        match = fnmatch(cfg->pattern, n, 0) == 0;
      }
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

/* Capture the calling op's traceback into the arena as the compact event's traceback part
 * (u64 module-map generation, u32 words, the words); false when none was captured. The walk
 * starts inside etr; the frames above the runtime's call to etr__record_begin (whose return
 * address the registry saved) are etr's own and dropped. */
static bool capture_traceback(etr__tstate *ts, const etr__tbcfg *cfg, uintptr_t begin_ra) {
  if (!ts->tb_ips) {
    etr__unwind_thread_init(); /* the thread's first capture allocates: do it here, not later */
    ts->tb_ips = malloc((ETR__TB_DEPTH_MAX + ETR__TB_OWN_FRAMES) * sizeof *ts->tb_ips);
    if (!ts->tb_ips) return false;
  }
  if (!etr__arena_reserve(ts, 12 + cfg->depth * sizeof(uint64_t))) return false;
  uint64_t gen = 0;
  size_t n = etr__unwind_capture(ts->tb_ips, cfg->depth + ETR__TB_OWN_FRAMES, 0, &gen);
  size_t first = 0;
  for (size_t i = 0; i < n && i < ETR__TB_OWN_FRAMES; i++) {
    if (ts->tb_ips[i] == begin_ra) {
      first = i;
      break;
    }
  }
  size_t keep = n - first;
  if (keep > cfg->depth) keep = cfg->depth;
  uint8_t *p = ts->arena + ts->arena_len;
  uint64_t words_buf[ETR__TB_DEPTH_MAX]; /* (the arena's place is not 8-aligned) */
  size_t words = etr__script_interleave(ts->tb_ips + first, keep, words_buf, cfg->depth);
  if (!words) return false;
  uint32_t w32 = (uint32_t)words;
  memcpy(p, &gen, 8);
  memcpy(p + 8, &w32, 4);
  memcpy(p + 12, words_buf, words * 8);
  ts->arena_len += 12 + words * 8;
  etr__bump(&ts->tracebacks, 1);
  return true;
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
  /* The compact event's begin part (trace_internal.h), at the arena's end: finish_frame
   * puts the id and times before it and the outputs after it. */
  etr__frame *f = &ts->frames[ts->depth];
  size_t off = ts->arena_len;
  f->name_slot = f->schema_slot = -1;
  f->n_pins = 0;
  uint8_t flags = tr->opt.no_timing ? 0 : ETR__EVF_TIMING;
  f->parent = ts->depth ? ts->frames[ts->depth - 1].id : ts->thread_node_id;
  uint64_t fw_parent = 0;
  if (rec->fw_tid) {
    _Atomic(etr__tstate *) *slot = tid_slot(tr, rec->fw_tid, false);
    etr__tstate *fw = slot ? atomic_load_explicit(slot, memory_order_acquire) : NULL;
    if (fw) fw_parent = atomic_load_explicit(&fw->top_id, memory_order_relaxed);
    flags |= ETR__EVF_FW;
  }
  const etr__tbcfg *cfg = atomic_load_explicit(&tr->tb_cfg, memory_order_acquire);
  if (cfg && cfg->enabled && wants_traceback(ts, cfg, rec->name) &&
      capture_traceback(ts, cfg, thr->begin_ra))
    flags |= ETR__EVF_TRACEBACK;
  bool ok = etr__encode_sref(ts, rec->name, &f->name_slot) &&
            etr__encode_sref(ts, rec->schema, &f->schema_slot) && etr__arena_reserve(ts, 50);
  if (ok) { /* the fixed numbers, in one reservation */
    uint8_t *p = ts->arena + ts->arena_len;
    p = etr__put_uv(p, rec->_rf_id);
    p = etr__put_uv(p, etr__zz(rec->seq_nr));
    p = etr__put_uv(p, rec->scope);
    if (flags & ETR__EVF_FW) {
      p = etr__put_uv(p, rec->fw_tid);
      p = etr__put_uv(p, fw_parent);
    }
    ts->arena_len = (size_t)(p - ts->arena);
  }
  if (ok && rec->kernel) {
    const etr_kernel_info *k = rec->kernel;
    flags |= ETR__EVF_KERNEL;
    ok = etr__encode_inline_str(ts, k->backend, ETR__STRING_MAX) &&
         etr__encode_inline_str(ts, k->file, ETR__STRING_MAX) && etr__encode_uv(ts, k->grid[0]) &&
         etr__encode_uv(ts, k->grid[1]) && etr__encode_uv(ts, k->grid[2]) &&
         etr__encode_uv(ts, etr__zz(k->stream));
  }
  if (ok && rec->collective) {
    size_t at = ts->arena_len;
    uint32_t len = 0;
    ok = etr__encode_raw(ts, &len, 4);
    if (ok && (len = (uint32_t)etr__encode_collective(ts, rec->collective)) != 0) {
      memcpy(ts->arena + at, &len, 4);
      flags |= ETR__EVF_COLLECTIVE;
    } else {
      ts->arena_len = at;
    }
  }
  /* (NULL inputs: none kept, counted as cut) */
  if (ok) ok = etr__encode_values(ts, rec->n_inputs ? rec->inputs : NULL, rec->n_inputs, f);
  if (!ok) { /* memory exhausted */
    etr__unpin(ts, f);
    ts->arena_len = off;
    etr__bump(&ts->nodes_dropped, 1);
    return;
  }
  ts->depth++;
  f->rec = rec;
  f->child_us = 0;
  f->off = off;
  f->len = ts->arena_len - off;
  f->flags = flags;
  /* Last, the id and then the clock: ids come from one counter shared by all threads and
   * are drawn right before the op's start is read, so they follow the order in which ops
   * begin across threads (consumers walk ids in order); the op's own time excludes our
   * encoding. */
  f->id = atomic_fetch_add_explicit(&tr->next_id, 1, memory_order_relaxed);
  atomic_store_explicit(&ts->top_id, f->id, memory_order_relaxed);
  atomic_store_explicit(&ts->depth_pub, ts->depth, memory_order_relaxed);
  f->start_ns = tr->opt.no_timing ? 0 : now_ns();
}

static void trace_exit(const etr_record *rec, void *user) {
  etr_trace *tr = user;
  int64_t end = tr->opt.no_timing ? 0 : now_ns();
  etr__thread *thr = etr__thread_self();
  if (!thr) return;
  /* Ended on another thread than it began on (misuse): the op stays open on its own thread
   * (closed when an op enclosing it ends, or at thread exit or close); counted, since this
   * thread may not even have a state of ours to count it in. */
  if (rec->_tid != (uint32_t)thr->tid) {
    atomic_fetch_add_explicit(&tr->ends_cross_thread, 1, memory_order_relaxed);
    return;
  }
  if (!thr->trace_state || thr->trace_serial != tr->serial) return;
  etr__tstate *ts = thr->trace_state;
  if (ts->finished) return;
  uint32_t idx = ts->depth;
  while (idx > 0 && ts->frames[idx - 1].rec != rec) idx--;
  if (idx == 0) {
    etr__bump(&ts->ends_without_begin, 1);
    return;
  }
  idx--;
  if (idx + 1 != ts->depth) {
    /* The ops it enclosed were left without their end (a longjmp, an exception, a coroutine
     * switch): they end here, marked incomplete, so that later ops of this thread do not
     * become their descendants. */
    etr__bump(&ts->ends_out_of_order, 1);
    etr__bump(&ts->ops_abandoned, ts->depth - idx - 1);
    while (ts->depth > idx + 1) finish_frame(ts, ts->depth - 1, end, NULL, true);
  }
  finish_frame(ts, idx, end, rec, false);
}

/* Writes the thread's open ops (innermost first, marked incomplete) and hands its chunk
 * over. Caller guarantees the owner thread is not inside our callbacks. */
static void finish_thread(etr__tstate *ts, _Atomic uint64_t *open_counter) {
  if (ts->finished) return;
  int64_t end = now_ns();
  if (ts->depth) atomic_fetch_add_explicit(open_counter, ts->depth, memory_order_relaxed);
  while (ts->depth) finish_frame(ts, ts->depth - 1, end, NULL, true);
  hand_over(ts);
  free(ts->arena);
  ts->arena = NULL;
  ts->arena_len = ts->arena_cap = 0;
  free(ts->frames);
  ts->frames = NULL;
  ts->frames_cap = 0;
  free(ts->tb_ips);
  ts->tb_ips = NULL;
  /* The tables go too: a thread that takes this state starts with empty ones, and defines
   * every slot again before naming it, so the decoder's copies need no reset. */
  if (ts->cstr)
    for (uint32_t i = 0; i < ETR__CSTR_SLOTS; i++) free(ts->cstr[i].copy);
  free(ts->cstr);
  ts->cstr = NULL;
  free(ts->cten);
  ts->cten = NULL;
  ts->finished = true;
}

static void on_thread_exit(etr__thread *thr) {
  pthread_mutex_lock(&g_lock);
  etr_trace *tr = g_trace;
  if (tr && thr->trace_state && thr->trace_serial == tr->serial && tr->pid == getpid()) {
    pthread_mutex_lock(&tr->threads_mutex);
    etr__tstate *ts = thr->trace_state;
    bool was_finished = ts->finished;
    finish_thread(ts, &tr->ops_open_at_thread_exit);
    /* its thread is gone: nobody looks it up by tid any more, a new thread may take it */
    _Atomic(etr__tstate *) *slot = tid_slot(tr, ts->tid, false);
    if (slot && atomic_load_explicit(slot, memory_order_relaxed) == ts)
      atomic_store_explicit(slot, NULL, memory_order_release);
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
static bool fd_is_ours(const etr_trace *tr) {
  struct stat st;
  return fstat(tr->fd, &st) == 0 && st.st_dev == tr->file_dev && st.st_ino == tr->file_ino;
}

static void writer_flush(etr_trace *tr, uint64_t *buffered) {
  if (tr->jw.len && !tr->jw.err) {
    int idle = ETR__IO_IDLE;
    if (!atomic_compare_exchange_strong(&tr->io_state, &idle, ETR__IO_BUSY)) {
      /* A signal handler finalized the file and owns it now. */
      tr->jw.len = 0;
      atomic_fetch_add_explicit(&tr->nodes_dropped_writer, *buffered, memory_order_relaxed);
      *buffered = 0;
      return;
    }
    if (!fd_is_ours(tr)) {
      tr->jw.err = EBADF;
    } else if (tr->restart_pending) { /* a flight-recorder dump replaces the file */
      if (ftruncate(tr->fd, 0) != 0 || lseek(tr->fd, 0, SEEK_SET) < 0)
        tr->jw.err = errno;
      else
        tr->jw.written = 0;
      tr->restart_pending = false;
    } else if (tr->unseal_pending) {
      if (ftruncate(tr->fd, (off_t)tr->seal_off) != 0 ||
          lseek(tr->fd, (off_t)tr->seal_off, SEEK_SET) < 0)
        tr->jw.err = errno;
      else
        tr->jw.written = tr->seal_off;
      tr->unseal_pending = false;
    }
    etr__jw_flush(&tr->jw); /* after an error it only discards */
    atomic_store(&tr->io_state, ETR__IO_IDLE);
  }
  tr->jw.len = 0;
  if (tr->jw.err)
    atomic_fetch_add_explicit(&tr->nodes_dropped_writer, *buffered, memory_order_relaxed);
  else
    atomic_fetch_add_explicit(&tr->nodes_written, *buffered, memory_order_relaxed);
  *buffered = 0;
  atomic_store_explicit(&tr->bytes_written, tr->jw.written, memory_order_relaxed);
  atomic_store_explicit(&tr->utf8_replaced, tr->jw.replaced, memory_order_relaxed);
  atomic_store_explicit(&tr->values_fixed, tr->jw.fixed, memory_order_relaxed);
  if (tr->jw.err && !atomic_load(&tr->failed)) {
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
      if (off == at) break; /* (no progress: out of memory) */
      if (may_flush && tr->jw.len >= tr->flush_bytes) writer_flush(tr, buffered);
    }
    return n;
  }
  if (!owner->dec && !(owner->dec = etr__cev_dec_new())) {
    atomic_fetch_add_explicit(&tr->nodes_dropped_writer, c->nodes, memory_order_relaxed);
    return 0;
  }
  while (off < to) {
    const etr__ev *ev;
    const char *why = NULL;
    size_t size = etr__cev_decode(owner->dec, &tr->cev_out, c->data + off, to - off, c->tid,
                                  tr->base_ns, &ev, &why);
    if (!size) { /* memory exhausted (our own events are well-formed): the rest is lost */
      etr__log(ETR_LOG_ERROR, "cannot decode a thread's events (%s): %u bytes dropped",
               why ? why : "?", (unsigned)(to - off));
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
    etr__emit_event(tr, ev);
    (*buffered)++;
    if (may_flush && tr->jw.len >= tr->flush_bytes) writer_flush(tr, buffered);
  }
  if (tr->ring)
    atomic_store_explicit(&tr->ring_dropped, etr__ring_dropped(tr->ring), memory_order_relaxed);
  return n;
}

/* ---- flight recorder: a dump replaces the file with a trace of the ring ---- */

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
  } else {
    etr__emit_event(tr, ev);
  }
  d->buffered++;
  if (tr->jw.len >= tr->flush_bytes) writer_flush(tr, &d->buffered);
}

/* The caller has added the queued chunks and the threads' current events to the ring. */
static void ring_dump(etr_trace *tr, int sig) {
  uint64_t none = 0;
  writer_flush(tr, &none);
  if (atomic_load(&tr->failed)) return;
  atomic_store(&tr->nodes_written, 0); /* of the trace the file holds from now on */
  tr->restart_pending = true;
  tr->any_node = false;
  if (tr->tbtab) etr__tbtab_rewind(tr->tbtab); /* the new file gets the whole tables */
  if (tr->binary)
    etr__bin_emit_header(tr);
  else
    etr__emit_header(tr);
  dump_ctx d = {tr, 0};
  if (etr__ring_write(tr->ring, dump_put, &d) == UINT64_MAX)
    etr__log(ETR_LOG_WARN,
             "flight recorder: out of memory: ops still open at the dump have no "
             "node (their children name them)");
  writer_flush(tr, &d.buffered);
  emit_footer(tr, sig);
  d.buffered = 1; /* the process node */
  writer_flush(tr, &d.buffered);
  if (tr->opt.sync && !tr->jw.err) fdatasync(tr->fd);
}

static void process_chunk(etr_trace *tr, etr__chunk *c, uint64_t *buffered) {
  if (atomic_load_explicit(&tr->failed, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&tr->nodes_dropped_writer, c->nodes - c->peeked_nodes,
                              memory_order_relaxed);
    return;
  }
  emit_range(tr, c, c->peeked, c->len, buffered, true);
}

/* A written chunk of the queue goes back to the pool (q_mutex held). */
static void written_locked(etr_trace *tr, etr__chunk *c) {
  if (c->owner && c->owner->queued) c->owner->queued--;
  recycle_locked(tr, c);
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
  if (atomic_load_explicit(&tr->failed, memory_order_relaxed)) return;
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
    int64_t left = deadline - now_ns();
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

static int64_t next_deadline(const etr_trace *tr) {
  return tr->flush_ns == INT64_MAX ? INT64_MAX : now_ns() + tr->flush_ns;
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
  writer_flush(tr, buffered);
  if (atomic_load(&tr->failed)) return;
  uint64_t off = tr->unseal_pending ? tr->seal_off : tr->jw.written;
  tr->seal_any_node = tr->any_node;
  emit_footer(tr, sig);
  uint64_t process_node = 0; /* not counted: cut off again if the process goes on */
  writer_flush(tr, &process_node);
  tr->seal_off = off;
  tr->sealed = !tr->jw.err;
}

/* Returns with q_mutex released. */
static void serve_fatal(etr_trace *tr, uint64_t *buffered, bool locked) {
  uint32_t req = atomic_load(&tr->fatal_req);
  writer_seal(tr, buffered, locked, atomic_load(&tr->fatal_sig));
  atomic_store(&tr->fatal_ack, req);
}

static void *writer_main(void *arg) {
  etr_trace *tr = arg;
  /* Signals are for the host's threads, not ours. */
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  atomic_store(&tr->writer_tid, my_tid());
  uint64_t buffered = 0;
  int64_t deadline = next_deadline(tr);
  unsigned flush_rounds = 0;
  etr__chunk *spare = NULL; /* written chunks not yet back in the pool */
  uint64_t done_pending = 0;
  bool locked = writer_lock(tr);
  for (;;) {
    if (!locked || fatal_pending(tr)) {
      serve_fatal(tr, &buffered, locked);
      locked = writer_lock(tr);
      continue;
    }
    put_back_locked(tr, &spare);
    if (atomic_load(&tr->fatal_hold) && !tr->stop &&
        now_ns() - atomic_load(&tr->fatal_hold_ns) < (int64_t)FATAL_HOLD_MS * 1000000) {
      /* The file was finalized at a fatal signal whose outcome is not known yet: leave
       * it whole (recorders wait once the queue is full). A host handler that left by
       * siglongjmp never ends the hold: it expires, and recording goes on. */
      pthread_mutex_unlock(&tr->q_mutex);
      struct timespec ms = {0, 5000000};
      nanosleep(&ms, NULL);
      locked = writer_lock(tr);
      continue;
    }
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
      }
      done_pending += n;
      if (!(locked = writer_lock(tr))) continue;
      put_back_locked(tr, &spare); /* before a peek: the queued counts must be current */
      tr->q_done += done_pending;
      done_pending = 0;
      pthread_cond_broadcast(&tr->space_cond);
      /* Under steady load the queue never empties: the timed flush must still come. */
      if (tr->flush_done == tr->flush_gen && now_ns() < deadline) continue;
    }
    bool flush_req = tr->flush_done != tr->flush_gen;
    /* A flush waits for the chunks queued before it, and (a few rounds) for those queued
     * since, which may hold nodes completed before it. */
    if (flush_req && tr->q_head && (tr->q_done < tr->flush_target || flush_rounds++ < 8)) continue;
    if (flush_req || now_ns() >= deadline) {
      flush_rounds = 0;
      uint64_t gen = tr->flush_gen;
      peek_threads_locked(tr, &buffered);
      pthread_mutex_unlock(&tr->q_mutex);
      if (tr->ring) {
        if (flush_req) ring_dump(tr, 0); /* a flush of a flight recorder is a dump */
      } else {
        writer_flush(tr, &buffered);
        if (tr->opt.sync && !tr->jw.err) fdatasync(tr->fd);
      }
      /* An explicit flush is where deferred symbolization happens (besides close). */
      if (flush_req && tr->tbtab) {
        etr__tbtab_symbolize(tr->tbtab);
        atomic_store_explicit(&tr->tb_frames, etr__tbtab_frames(tr->tbtab), memory_order_relaxed);
      }
      deadline = next_deadline(tr);
      if (!(locked = writer_lock(tr))) continue;
      tr->flush_done = gen;
      pthread_cond_broadcast(&tr->done_cond);
      continue;
    }
    if (tr->jw.len) { /* the queue is empty: put what we have on disk */
      pthread_mutex_unlock(&tr->q_mutex);
      writer_flush(tr, &buffered);
      locked = writer_lock(tr);
      continue;
    }
    if (tr->q_head) continue;
    if (tr->stop) break;
    pthread_mutex_unlock(&tr->q_mutex);
    writer_sleep(tr, deadline);
    locked = writer_lock(tr);
  }
  put_back_locked(tr, &spare);
  tr->flush_done = tr->flush_gen;
  pthread_cond_broadcast(&tr->done_cond);
  pthread_mutex_unlock(&tr->q_mutex);
  if (tr->ring) {
    ring_dump(tr, 0);
    return NULL;
  }
  unseal(tr);
  emit_footer(tr, 0);
  buffered++; /* the process node */
  writer_flush(tr, &buffered);
  return NULL;
}

static bool usable(const etr_trace *tr) { return tr && !tr->closed && tr->pid == getpid(); }
/* The error for a handle that is not usable. */
static int unusable(const etr_trace *tr) {
  return !tr ? ETR_EINVAL : tr->closed ? ETR_ESTATE : ETR_EFORKED;
}

/* ---- life cycle ---- */

static void set_when(etr_trace *tr) {
  snprintf(tr->when, sizeof tr->when, "1970-01-01 00:00:00");
  time_t now = time(NULL);
  struct tm tm;
  if (localtime_r(&now, &tm)) strftime(tr->when, sizeof tr->when, "%Y-%m-%d %H:%M:%S", &tm);
}

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

/* *tb receives 0.1.0's traceback options, which o->traceback then points at. */
static void default_options(etr_trace_options *o, const etr_trace_options *in,
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
  if (!usable(tr)) return unusable(tr);
  if (!opt) return ETR_EINVAL;
  return tb_configure(tr, opt);
}

/* Closed traces stay allocated as small tombstones, so that a second close (or any call)
 * on the handle is recognised and returns ETR_ESTATE instead of touching freed memory, and
 * a new trace never reuses the address of a recent one. The oldest are freed beyond this
 * many. g_lock held. */
#define TOMBSTONES 1024
static etr_trace *g_tombs[TOMBSTONES];
static size_t g_tomb_next;

static void entomb_locked(etr_trace *tr) {
  tr->closed = true;
  etr_trace *old = g_tombs[g_tomb_next];
  g_tombs[g_tomb_next] = tr;
  g_tomb_next = (g_tomb_next + 1) % TOMBSTONES;
  free(old);
}

/* Frees everything but the handle itself (see entomb_locked).
 * in_child: a forked child's copy, whose mutexes and condition variables may show waiters
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
    free(ts->tb_ips);
    if (ts->cstr)
      for (uint32_t i = 0; i < ETR__CSTR_SLOTS; i++) free(ts->cstr[i].copy);
    free(ts->cstr);
    free(ts->cten);
    etr__cev_dec_free(ts->dec);
    free(ts);
    ts = n;
  }
  if (tr->tid_pages)
    for (size_t i = 0; i < ETR__TID_PAGES; i++) free(tr->tid_pages[i]);
  free(tr->tid_pages);
  for (etr__tbcfg *c = atomic_load(&tr->tb_cfg); c;) {
    etr__tbcfg *o = c->older;
    free(c->pattern);
    free(c);
    c = o;
  }
  etr__tbtab_free(tr->tbtab);
  etr__ring_free(tr->ring);
  tr->ring = NULL;
  etr__idmap_free(tr->tensors);
  etr__idmap_free(tr->storages);
  etr__jw_free(&tr->jw);
  etr__emit_free(tr);
  free(tr->cev_out.buf);
  tr->cev_out.buf = NULL;
  tr->q_head = tr->free_chunks = NULL;
  tr->threads = NULL;
  tr->tid_pages = NULL;
  tr->tb_cfg = NULL;
  tr->tbtab = NULL;
  tr->tensors = tr->storages = NULL;
  if (in_child) return;
  pthread_mutex_destroy(&tr->threads_mutex);
  pthread_mutex_destroy(&tr->tb_mutex);
  pthread_mutex_destroy(&tr->q_mutex);
  sem_destroy(&tr->wake);
  pthread_cond_destroy(&tr->space_cond);
  pthread_cond_destroy(&tr->done_cond);
}

/* The registry's thread-exit and fork events (registry.h), from the first open on. */
static void on_before_fork(void);
static void on_after_fork_parent(void);
static void on_after_fork_child(void);
static const etr__registry_hooks g_hooks = {on_thread_exit, on_before_fork, on_after_fork_parent,
                                            on_after_fork_child};
static pthread_once_t g_hooks_once = PTHREAD_ONCE_INIT;
static void install_hooks(void) { etr__registry_set_hooks(&g_hooks); }

int etr_trace_open(const char *path, const etr_trace_options *opt, etr_trace **out) {
  pthread_once(&g_hooks_once, install_hooks);
  if (out) *out = NULL;
  if (!path || !*path || !out) return ETR_EINVAL;
  if (opt && opt->struct_size != 0 && opt->struct_size < offsetof(etr_trace_options, no_timing))
    return ETR_EINVAL;
  etr_trace_options o;
  etr_traceback_options tb_0_1;
  default_options(&o, opt, &tb_0_1);
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
  tr->tid_pages = calloc(ETR__TID_PAGES, sizeof *tr->tid_pages);
  if (!tr->tensors || !tr->storages || !tr->tid_pages || etr__jw_init(&tr->jw, -1, 1u << 20) != 0)
    rc = ETR_ENOMEM;
  /* path.gz: gzip output, at level 1 (the writer thread keeps up with the recorders; a trace
   * still shrinks about tenfold). */
  size_t plen = strlen(path);
  tr->binary = plen > 4 && strcmp(path + plen - 4, ".etr") == 0; /* a binary log (binlog.h) */
  if (plen > 7 && strcmp(path + plen - 7, ".etr.gz") == 0) {
    /* JSON under a binary log's name, or a log etr convert cannot read: neither */
    etr__log(ETR_LOG_ERROR,
             "%s: a binary log is written uncompressed (.etr, about a tenth of "
             "the JSON's size); .json.gz is compressed JSON",
             path);
    rc = ETR_EINVAL;
  }
  if (rc == 0 && plen > 3 && strcmp(path + plen - 3, ".gz") == 0 &&
      etr__jw_set_gzip(&tr->jw, 1) != 0)
    rc = ETR_ENOMEM;
  if (rc == 0 && o.traceback) {
    etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
    size_t n = o.traceback->struct_size && o.traceback->struct_size < sizeof tb
                   ? o.traceback->struct_size
                   : sizeof tb;
    memcpy(&tb, o.traceback, n);
    if ((unsigned)tb.symbolize > ETR_SYMBOLIZE_MODULE) rc = ETR_EINVAL;
    tr->tb_symbolize = tb.symbolize;
    if (rc == 0 && tb.enabled) rc = tb_configure(tr, &tb);
  }
  tr->opt.traceback = NULL;   /* the caller's; copied above */
  if (rc == 0 && o.ring_mb) { /* the flight recorder: no timed writes, a dump writes */
    size_t mb = o.ring_mb > (1u << 20) ? (1u << 20) : o.ring_mb;
    if (!(tr->ring = etr__ring_new(mb << 20))) rc = ETR_ENOMEM;
    tr->flush_ns = INT64_MAX;
  }
  if (rc == 0) {
    /* O_NONBLOCK: opening a FIFO with no reader must not block the host (ENXIO instead). */
    tr->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
    if (tr->fd < 0) {
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
    bool stream = fstat(tr->fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
    if (!stream) fcntl(tr->fd, F_SETFL, fcntl(tr->fd, F_GETFL) & ~O_NONBLOCK);
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
    writer_flush(tr, &none);
    tr->header_len = tr->jw.written; /* file bytes (compressed in a gzip trace) */
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
  if (!usable(tr)) return unusable(tr);
  if (atomic_load(&tr->failed)) return ETR_EIO;
  return etr_observer_enable(tr->obs);
}

int etr_trace_disable(etr_trace *tr) {
  if (!usable(tr)) return unusable(tr);
  /* Ops in flight are counted at the transition only: threads_mutex orders racing calls. */
  pthread_mutex_lock(&tr->threads_mutex);
  bool was_enabled = etr_observer_is_enabled(tr->obs) == 1;
  int rc = etr_observer_disable(tr->obs);
  uint64_t open = 0;
  if (was_enabled)
    for (etr__tstate *ts = tr->threads; ts; ts = ts->next)
      open += atomic_load_explicit(&ts->depth_pub, memory_order_relaxed);
  pthread_mutex_unlock(&tr->threads_mutex);
  atomic_fetch_add_explicit(&tr->ops_open_at_disable, open, memory_order_relaxed);
  etr_script_release_pending(); /* a safe point for the script unwinder (no lock held) */
  return rc;
}

bool etr_trace_is_enabled(const etr_trace *tr) {
  return usable(tr) && etr_observer_is_enabled(tr->obs) == 1;
}

int etr_trace_flush(etr_trace *tr) {
  if (!usable(tr)) return unusable(tr);
  etr__thread *thr = etr__thread_self();
  /* The caller's own chunk is safe to take only outside our callbacks on this thread. */
  if (thr && thr->in_callback == 0 && thr->trace_state && thr->trace_serial == tr->serial) {
    etr__tstate *ts = thr->trace_state;
    if (!ts->finished) hand_over(ts);
  }
  pthread_mutex_lock(&tr->q_mutex);
  uint64_t gen = ++tr->flush_gen;
  tr->flush_target = tr->q_pushed;
  sem_post(&tr->wake);
  while (tr->flush_done < gen && !tr->stop) pthread_cond_wait(&tr->done_cond, &tr->q_mutex);
  pthread_mutex_unlock(&tr->q_mutex);
  etr_script_release_pending();
  return atomic_load(&tr->write_error) ? ETR_EIO : 0;
}

int etr_trace_dump(etr_trace *tr) { return etr_trace_flush(tr); }

int etr_trace_close(etr_trace *tr) { return etr_trace_close_stats(tr, NULL); }

int etr_trace_close_stats(etr_trace *tr, etr_trace_stats *out) {
  if (!tr) return 0;
  pthread_mutex_lock(&g_lock);
  if (tr->closed) { /* closed before (a tombstone): nothing to do */
    pthread_mutex_unlock(&g_lock);
    return ETR_ESTATE;
  }
  if (tr->pid != getpid()) {
    /* A forked child: the file and the writer are the parent's. Free quietly. */
    if (g_forked_trace == tr) g_forked_trace = NULL;
    if (g_env_trace == tr) g_env_trace = NULL;
    trace_free(tr, true);
    entomb_locked(tr);
    pthread_mutex_unlock(&g_lock);
    return ETR_EFORKED;
  }
  if (g_trace != tr) {
    pthread_mutex_unlock(&g_lock);
    return ETR_ESTATE;
  }
  /* From here on thread exits leave their state to us. */
  __atomic_store_n(&g_trace, NULL, __ATOMIC_RELEASE);
  if (g_env_trace == tr) g_env_trace = NULL;
  etr__fatal_remove(tr);
  pthread_mutex_unlock(&g_lock);

  etr_observer_remove(tr->obs); /* waits for callbacks running on other threads */
  __atomic_store_n(&etr__tracking_ids, 0u, __ATOMIC_SEQ_CST);
  etr__wait_ids();

  pthread_mutex_lock(&tr->threads_mutex);
  for (etr__tstate *ts = tr->threads; ts; ts = ts->next) finish_thread(ts, &tr->ops_open_at_close);
  pthread_mutex_unlock(&tr->threads_mutex);

  pthread_mutex_lock(&tr->q_mutex);
  tr->stop = true;
  sem_post(&tr->wake);
  pthread_cond_broadcast(&tr->space_cond);
  pthread_cond_broadcast(&tr->done_cond);
  pthread_mutex_unlock(&tr->q_mutex);
  pthread_join(tr->writer, NULL);

  int rc = 0;
  /* Never close a descriptor that is no longer ours (the host closed it and reused it). */
  if (fd_is_ours(tr) && close(tr->fd) != 0 && !atomic_load(&tr->write_error))
    atomic_store(&tr->write_error, errno);
  if (atomic_load(&tr->write_error)) rc = ETR_EIO;
  etr__trace_collect_stats(tr, &tr->final_stats);
  if (out) etr_trace_stats_get(tr, out);
  trace_free(tr, false);
  pthread_mutex_lock(&g_lock);
  entomb_locked(tr);
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

/* At process exit (or library unload): finalize the trace still open. */
void etr__trace_shutdown(void) {
  etr_trace *tr = __atomic_load_n(&g_trace, __ATOMIC_ACQUIRE);
  if (tr && tr->pid == getpid()) etr_trace_close(tr);
}

void etr__trace_collect_stats(const etr_trace *tr, etr_trace_stats *s) {
  memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
  /* The list is walked without threads_mutex (prepended with release stores, never
   * shortened while the trace is open): the writer calls this at a fatal signal, when the
   * thread that crashed may hold that lock. */
  for (etr__tstate *ts = __atomic_load_n(&tr->threads, __ATOMIC_ACQUIRE); ts; ts = ts->next) {
    s->ops_recorded += atomic_load_explicit(&ts->ops_recorded, memory_order_relaxed);
    s->ends_without_begin += atomic_load_explicit(&ts->ends_without_begin, memory_order_relaxed);
    s->ends_out_of_order += atomic_load_explicit(&ts->ends_out_of_order, memory_order_relaxed);
    s->strings_cut += atomic_load_explicit(&ts->strings_cut, memory_order_relaxed);
    s->lists_cut += atomic_load_explicit(&ts->lists_cut, memory_order_relaxed);
    s->nesting_cut += atomic_load_explicit(&ts->nesting_cut, memory_order_relaxed);
    s->nodes_dropped += atomic_load_explicit(&ts->nodes_dropped, memory_order_relaxed);
    s->objects += atomic_load_explicit(&ts->objects, memory_order_relaxed);
    s->tracebacks += atomic_load_explicit(&ts->tracebacks, memory_order_relaxed);
    s->ops_abandoned += atomic_load_explicit(&ts->ops_abandoned, memory_order_relaxed);
  }
  s->nodes_written = atomic_load(&tr->nodes_written);
  s->bytes_written = atomic_load(&tr->bytes_written);
  s->threads = atomic_load(&tr->threads_count);
  s->ids_retired = atomic_load(&tr->ids_retired);
  s->utf8_replaced = atomic_load(&tr->utf8_replaced);
  s->values_fixed = atomic_load(&tr->values_fixed);
  s->ends_cross_thread = atomic_load(&tr->ends_cross_thread);
  s->ops_open_at_disable = atomic_load(&tr->ops_open_at_disable);
  s->ops_open_at_thread_exit = atomic_load(&tr->ops_open_at_thread_exit);
  s->ops_open_at_close = atomic_load(&tr->ops_open_at_close);
  s->nodes_dropped += atomic_load(&tr->nodes_dropped_writer);
  s->buffer_waits = atomic_load(&tr->buffer_waits);
  s->write_error = atomic_load(&tr->write_error);
  s->tracebacks_unique = atomic_load(&tr->tb_unique);
  s->frames_unique = atomic_load(&tr->tb_frames);
  s->ring_dropped = atomic_load(&tr->ring_dropped);
}

int etr_trace_stats_get(const etr_trace *tr, etr_trace_stats *out) {
  if (!tr || !out) return ETR_EINVAL;
  etr_trace_stats s;
  if (tr->closed)
    s = tr->final_stats;
  else
    etr__trace_collect_stats(tr, &s);
  size_t n = out->struct_size == 0 || out->struct_size > sizeof s ? sizeof s : out->struct_size;
  memcpy(out, &s, n);
  out->struct_size = n;
  return 0;
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
    g_forked_trace = tr;
    g_trace = NULL;
  }
  pthread_mutex_unlock(&g_lock);
}
