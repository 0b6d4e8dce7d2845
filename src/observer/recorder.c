/* The recording threads' side of the trace observer: each thread's state, the compact
 * events it makes of an op at begin and end (encode.c encodes the values), the traceback
 * selection and capture, and the chunks that carry the events to the writer thread
 * (writer_thread.c). No lock, no formatting and no syscall on the common path: a thread
 * takes the queue's lock only to hand over a full chunk.
 */
#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "observer/internal.h"
#include "observer/registry.h"
#include "observer/encode_hit.h"
#include "observer/trace_internal.h"
#include "unwind/unwind.h"

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

void etr__chunk_recycle_locked(etr_trace *tr, etr__chunk *c) {
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
    etr__chunk_recycle_locked(tr, c);
}

void etr__trace_stalled(etr_trace *tr, int ms, const char *who) {
  int none = 0;
  atomic_compare_exchange_strong(&tr->write_error, &none, ETIMEDOUT);
  if (!atomic_exchange(&tr->failed, 1))
    etr__log(ETR_LOG_ERROR,
             "trace output stalled: the writer wrote nothing for %d ms while %s waited; "
             "recording stopped (what is lost is counted in nodes_dropped)",
             ms, who);
}

void etr__trace_out_of_memory(etr_trace *tr, const char *what) {
  int none = 0;
  atomic_compare_exchange_strong(&tr->write_error, &none, ENOMEM);
  if (atomic_exchange(&tr->failed, 1)) return;
  etr__log(ETR_LOG_ERROR,
           "out of memory for %s: recording stopped (what is lost is counted in "
           "nodes_dropped; close returns ETR_ENOMEM)",
           what);
  etr_observer_disable(tr->obs); /* (stop paying for ops that cannot be written) */
}

/* A test's hook where a thread needs a chunk (tests/reliability/test_out_of_memory.c
 * compiles this file with ETR_TEST_HOOKS and makes it fail, as malloc would when memory is
 * exhausted; the library has no such hook). */
#ifdef ETR_TEST_HOOKS
bool (*etr__test_chunk_alloc_fails)(void);
#define CHUNK_ALLOC_FAILS() (etr__test_chunk_alloc_fails && etr__test_chunk_alloc_fails())
#else
#define CHUNK_ALLOC_FAILS() false
#endif

static etr__chunk *take_chunk(etr__tstate *ts, size_t need);

/* Hands the thread's chunk to the writer (if it holds anything) and gets a chunk with room
 * for need bytes. Waits while max_chunks are queued for the writer: the bound is on the
 * queue, not on chunks threads hold, because a thread that stops recording keeps its
 * partly filled chunk until it exits or the trace closes, and any number of threads may do
 * so. NULL when memory is exhausted or the trace failed (a write error, a stalled
 * output: the wait gives up after stall_ms without progress). */
static etr__chunk *next_chunk(etr__tstate *ts, size_t need) {
  int cancel = etr__cancel_off(); /* (the wait below is a cancellation point) */
  etr__chunk *c = take_chunk(ts, need);
  etr__cancel_restore(cancel);
  return c;
}

static etr__chunk *take_chunk(etr__tstate *ts, size_t need) {
  etr_trace *tr = ts->trace;
  bool oversized = need > tr->chunk_size; /* one large event: a chunk of its own */
  etr__clock_tick();                      /* (now and then: the clock's scale is adjusted) */
  pthread_mutex_lock(&tr->q_mutex);
  if (ts->chunk) give_up_locked(tr, ts->chunk);
  set_chunk(ts, NULL);
  bool waited = false;
  /* The wait ends once the writer has finished no chunk and written no byte for stall_ms
   * (unless that is ETR_FLUSH_NEVER): the output is stalled, whatever it is (a pipe's stall the
   * writer sees itself; a regular file on a hung NFS server keeps it inside write(2), where it
   * cannot see time pass). The trace then gives up as on a write error: recording stops, the rest
   * is counted as dropped, and the host's threads go on. */
  int stall_ms = tr->jw.stall_ms;
  uint64_t done0 = tr->q_done, took0 = 0;
  struct timespec deadline;
  while (tr->q_pushed - tr->q_done >= tr->max_chunks && !tr->stop &&
         !atomic_load_explicit(&tr->failed, memory_order_relaxed)) {
    if (!waited) {
      atomic_fetch_add_explicit(&tr->buffer_waits, 1, memory_order_relaxed);
      took0 = atomic_load_explicit(&tr->jw.progress, memory_order_relaxed);
      if (stall_ms >= 0) etr__deadline_ms(&deadline, stall_ms);
    }
    waited = true;
    atomic_fetch_add_explicit(&tr->space_waiters, 1, memory_order_relaxed);
    etr__thread *me = etr__tls_self;
    if (me) me->waiting = 1;
    atomic_signal_fence(memory_order_seq_cst);
    int rc = stall_ms < 0 ? pthread_cond_wait(&tr->space_cond, &tr->q_mutex)
                          : pthread_cond_clockwait(&tr->space_cond, &tr->q_mutex, CLOCK_MONOTONIC,
                                                   &deadline);
    atomic_signal_fence(memory_order_seq_cst);
    if (me) me->waiting = 0;
    atomic_fetch_sub_explicit(&tr->space_waiters, 1, memory_order_relaxed);
    uint64_t took = atomic_load_explicit(&tr->jw.progress, memory_order_relaxed);
    if (tr->q_done != done0 || took != took0) { /* progress (a slow reader): a new wait */
      done0 = tr->q_done;
      took0 = took;
      if (stall_ms >= 0) etr__deadline_ms(&deadline, stall_ms);
    } else if (rc == ETIMEDOUT) {
      etr__trace_stalled(tr, stall_ms, "a recording thread");
      pthread_cond_broadcast(&tr->space_cond); /* (the other waiters go too) */
      break;
    }
  }
  if (atomic_load_explicit(&tr->failed, memory_order_relaxed)) {
    pthread_mutex_unlock(&tr->q_mutex);
    return NULL; /* (counted as dropped by the caller) */
  }
  etr__chunk *c = NULL;
  bool fails = CHUNK_ALLOC_FAILS();
  if (!oversized && tr->free_chunks && !fails) {
    c = tr->free_chunks;
    tr->free_chunks = c->next;
  }
  pthread_mutex_unlock(&tr->q_mutex);
  if (!c && (fails || !(c = chunk_alloc(oversized ? (uint32_t)need : tr->chunk_size, oversized)))) {
    etr__trace_out_of_memory(tr, "a thread's buffer"); /* (the caller counts the node) */
    return NULL;
  }
  __atomic_store_n(&c->len, 0, __ATOMIC_RELAXED);
  c->nodes = 0;
  c->next = NULL;
  c->owner = ts;
  c->tid = ts->tid;
  return c;
}

/* Push the thread's partly filled chunk to the writer. */
void etr__hand_over(etr__tstate *ts) {
  if (!ts->chunk) return;
  etr_trace *tr = ts->trace;
  pthread_mutex_lock(&tr->q_mutex);
  give_up_locked(tr, ts->chunk);
  set_chunk(ts, NULL);
  pthread_mutex_unlock(&tr->q_mutex);
}

uint8_t *etr__event_room_slow(etr__tstate *ts, size_t size, bool node) {
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

/* ---- per-thread state ---- */

_Atomic uint64_t *etr__tid_slot(etr_trace *tr, uint64_t tid, bool create) {
  if (tid == 0) return NULL;
  tid %= (uint64_t)ETR__TID_PAGE * ETR__TID_PAGES;
  size_t page = (size_t)(tid / ETR__TID_PAGE);
  _Atomic uint64_t *p = __atomic_load_n(&tr->tid_pages[page], __ATOMIC_ACQUIRE);
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
  /* (before top_id changes, which publishes it: fw_top_by_walk) */
  atomic_store_explicit(&ts->tid_pub, 0, memory_order_relaxed);
  ts->id_next = ts->id_end = 0;
  ts->depth = 0;
  memset(&ts->tensor_ids, 0, sizeof ts->tensor_ids);
  memset(&ts->storage_ids, 0, sizeof ts->storage_ids);
  ts->tb_countdown = 0;
  ts->tb_cfg_version = 0;
  memset(ts->tb_names, 0, sizeof ts->tb_names);
  atomic_store_explicit(&ts->top_id, 0, memory_order_release);
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
    atomic_fetch_add_explicit(&tr->nodes_dropped_writer, 1, memory_order_relaxed); /* its op */
    etr__trace_out_of_memory(tr, "a thread's state");
    return NULL;
  }
  ts->trace = tr;
  ts->tid = thr->tid;
  /* (from the shared counter, like op ids: a thread node comes before its first op) */
  ts->thread_node_id = atomic_fetch_add_explicit(&tr->next_id, 1, memory_order_relaxed);
  atomic_store_explicit(&ts->top_id, ts->thread_node_id, memory_order_relaxed);
  atomic_store_explicit(&ts->tid_pub, ts->tid, memory_order_release);
  if (fresh) {
    ts->stream = tr->n_streams++;
    ts->next = tr->threads;
    __atomic_store_n(&tr->threads, ts, __ATOMIC_RELEASE); /* the writer walks the list */
  }
  /* (a slot a live thread holds stays its: only an exited thread's is taken over) */
  _Atomic uint64_t *slot = etr__tid_slot(tr, ts->tid, true);
  uint64_t held = slot ? atomic_load_explicit(slot, memory_order_relaxed) : 1;
  if (held == 0 || (held & 1))
    atomic_store_explicit(slot, etr__tid_word(ts->tid, (uint64_t)(uintptr_t)ts),
                          memory_order_release);
  pthread_mutex_unlock(&tr->threads_mutex);
  atomic_fetch_add_explicit(&tr->threads_count, 1, memory_order_relaxed);
  thr->trace_state = ts;
  thr->trace_serial = tr->serial;
  if (tr->opt.fatal_signals) etr__fatal_thread_stack(); /* (a stack overflow is finalized) */
  /* The thread node goes first, so that a file cut short (kill -9) has the parent of every
   * op the thread finished; only ops still open at the cut lack theirs. When it cannot be
   * written (memory ran out, a write error), the trace has failed: none of the thread's ops
   * is written either (etr__event_room). */
  /* Thread events carry the kernel's thread id in rf_id and the thread's name as payload:
   * the one given to etr_thread_set_name, else the OS name (we run on that thread here). */
  char os_name[ETR__THREAD_NAME_MAX];
  const char *tname = thr->name;
  if (!tname[0] && pthread_getname_np(pthread_self(), os_name, sizeof os_name) == 0)
    tname = os_name;
  size_t tlen = strnlen(tname, ETR__THREAD_NAME_MAX - 1);
  uint64_t os_tid = (uint64_t)etr__gettid();
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
    if (outputs) etr__trace_out_of_memory(ts->trace, "an op's outputs");
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
  /* (room for the whole of head too: it is copied whole, a fixed size that compiles to a
   * few moves, and the bytes past the event are overwritten by the next one) */
  uint8_t *dst = out_len ? etr__event_room(ts, size + sizeof head, true) : NULL;
  if (dst) {
    *dst++ = ETR__CEV_OP;
    *dst++ = flags;
    dst = etr__put_uv(dst, body);
    memcpy(dst, head, sizeof head);
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
    etr__bump(&ts->nodes_dropped, 1);
    etr__trace_out_of_memory(ts->trace, "an op's outputs");
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
  atomic_store_explicit(&ts->top_id, ts->depth ? ts->frames[ts->depth - 1].id : ts->thread_node_id,
                        memory_order_relaxed);
  atomic_store_explicit(&ts->depth_pub, ts->depth, memory_order_relaxed);
}

/* ---- tracebacks (recording side) ---- */

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
    uint64_t h = etr__fnv1a(n, len);
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

/* The innermost op open on thread tid, found by walking the trace's states: for a thread
 * whose slot another live thread holds (ids 65 536 apart, etr__tid_slot). Rare, so a walk;
 * without a lock, as a signal handler may record. A state that changes hands meanwhile
 * changes tid_pub first (to 0, then to a new thread's id, never tid again: ids are not
 * reused), so a top read between two equal looks at tid_pub is tid's. 0 when not found
 * (the thread is gone and its state taken by another). */
static __attribute__((noinline)) uint64_t fw_top_by_walk(etr_trace *tr, uint64_t tid) {
  for (etr__tstate *s = __atomic_load_n(&tr->threads, __ATOMIC_ACQUIRE); s; s = s->next) {
    if (atomic_load_explicit(&s->tid_pub, memory_order_acquire) != tid) continue;
    uint64_t top = atomic_load_explicit(&s->top_id, memory_order_acquire);
    if (top && atomic_load_explicit(&s->tid_pub, memory_order_relaxed) == tid) return top;
  }
  return 0;
}

/* fw_parent for forward thread tid: its innermost open op, else its thread node (when it
 * has no op open or has exited, as PyTorch's observer writes it: the backward ops of a
 * forward run outside any op); 0 for a thread the trace does not know. */
static uint64_t fw_top(etr_trace *tr, uint64_t tid) {
  _Atomic uint64_t *slot = etr__tid_slot(tr, tid, false);
  uint64_t w = slot ? atomic_load_explicit(slot, memory_order_acquire) : 0;
  uint64_t fw = etr__tid_value(w, tid);
  if (fw & 1) return fw >> 1;
  if (fw)
    return atomic_load_explicit(&((etr__tstate *)(uintptr_t)fw)->top_id, memory_order_relaxed);
  return w ? fw_top_by_walk(tr, tid) : 0; /* (w: another thread's slot) */
}

void etr__trace_enter(const etr_record *rec, void *user) {
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
      etr__trace_out_of_memory(tr, "a thread's stack of ops");
      return;
    }
    ts->frames = f;
    ts->frames_cap = cap;
  }
  /* (the id counter's line, for writing: another recording thread may hold it, and the
   * locked add at the end would otherwise wait for it with nothing else in flight) */
#if defined(__x86_64__) && defined(__GNUC__)
  __asm__ volatile("prefetchw %0" ::"m"(tr->next_id)); /* (a no-op where not supported) */
#else
  __builtin_prefetch(&tr->next_id, 1, 3);
#endif
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
    /* (its own thread: what is open here, as the slot would say) */
    fw_parent = rec->fw_tid == ts->tid ? f->parent : fw_top(tr, rec->fw_tid);
    flags |= ETR__EVF_FW;
  }
  const etr__tbcfg *cfg = atomic_load_explicit(&tr->tb_cfg_now, memory_order_acquire);
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
    etr__trace_out_of_memory(tr, "an op's encoding");
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
  f->start_ns = tr->opt.no_timing ? 0 : etr__now_ns();
}

void etr__trace_exit(const etr_record *rec, void *user) {
  etr_trace *tr = user;
  int64_t end = tr->opt.no_timing ? 0 : etr__now_ns();
  etr__thread *thr = etr__thread_self();
  if (!thr) return;
  /* (an end on another thread than the begin never gets here: the registry ignores it and
   * counts it, registry.c record_end) */
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
  /* The process groups' node goes to the writer now, not when this thread's chunk fills:
   * the writer places it before the first collective it sees, and another thread's
   * collective (on a group declared here) would otherwise reach it first (emit.c). */
  if (ETR__UNLIKELY(rec->name == etr__pg_init_name)) etr__hand_over(ts);
}

/* Writes the thread's open ops (innermost first, marked incomplete) and hands its chunk
 * over. Caller guarantees the owner thread is not inside our callbacks. */
void etr__finish_thread(etr__tstate *ts, _Atomic uint64_t *open_counter) {
  if (ts->finished) return;
  int64_t end = etr__now_ns();
  if (ts->depth) atomic_fetch_add_explicit(open_counter, ts->depth, memory_order_relaxed);
  while (ts->depth) finish_frame(ts, ts->depth - 1, end, NULL, true);
  etr__hand_over(ts);
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
