/* Script frames: the plug-in through which a runtime's interpreter adds its own frames
 * (function, file, line of the script language) to the native tracebacks.
 *
 * Pieces:
 * - The unwinder: one at a time, a private copy published through an atomic pointer.
 *   register/unregister are control-plane (ctl_lock). The recording path publishes the
 *   unwinder it is about to use in its thread's hazard word (seq_cst store), then checks the
 *   pointer is still current (seq_cst load); unregister clears the pointer (seq_cst store),
 *   then waits until no other thread's hazard word holds the old unwinder. Either the
 *   recorder sees the pointer cleared or unregister sees its hazard (Dekker), so no
 *   gather/symbolize/release call is running when unregister returns.
 * - A per-thread handle cache: handle -> script-frame id, 2-way set associative, bounded.
 *   A cached handle keeps the reference gather took, so the runtime cannot reuse the same
 *   handle value for another frame while it is cached (no ABA). A cache hit makes the newly
 *   gathered reference surplus; evicted entries give theirs up too. Surplus references are
 *   released at a safe point (below). Only the owning thread touches its cache, inside its
 *   hazard; unregister and thread exit take it over when the owner cannot be using it.
 * - The global script-frame table: ids 0, 1, ... in order of first sight, one per unique
 *   (name, filename, line) (a content hash dedups, so the table grows with unique frames,
 *   not with cache misses). Append-only, in chunks published with release stores, so
 *   etr__script_frame_get reads it from any thread without a lock. Strings live until exit.
 * - Deferred releases. A runtime's release may need the runtime's own lock (CPython: the
 *   GIL), and the lock order is "runtime lock, then ours", so release never runs while an
 *   etr lock is held: handles are collected under our locks, the locks dropped, then
 *   released. When the unwinder says release_in_record, a recording thread releases its own
 *   surplus at the end of etr__script_interleave (plus the global list); otherwise surplus
 *   waits in the thread's pending list until etr_script_release_pending (any thread: it
 *   takes every thread's pending list) or unregister. Handles of exited threads go to a
 *   global pending list. So release may run on any thread that calls one of those entry
 *   points, never on etr's writer thread (which calls none of them), and with the handles of
 *   other threads than the caller.
 *
 * Interleaving: native ips innermost first; a native frame whose ip lies in one of the
 * entry functions (resolved at register with dlsym + dladdr1 st_size: only symbols in the
 * dynamic symbol table are found; split-off parts such as "fn.cold" are not covered) is an
 * interpreter activation. Just before (inside of) it go the script frames of that
 * activation: up to and including the next frame flagged ETR_SCRIPT_FRAME_ENTRY, or, when no
 * gathered frame carries a flag, one script frame. Script frames left over (no more entry
 * frames among the natives: native capture failed or was cut, or the unwinder reports more
 * activations than there are) go last, as the outermost frames.
 *
 * Lock order: ctl_lock, then threads_lock, then a thread's plock, then gp_lock. tab_lock is
 * taken alone. No callback runs under any of them.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "observer/internal.h"
#include "observer/registry.h"
#include "unwind/script.h"
#include "unwind/unwind.h"

#define SCRIPT_MAX 256         /* script frames gathered per capture */
#define CACHE_BUCKETS 512      /* default per-thread cache: 512 x 2 handles */
#define PENDING_MAX (1u << 16) /* deferred handles per thread before gathering pauses */
#define TAB_CHUNK_BITS 10
#define TAB_CHUNK (1u << TAB_CHUNK_BITS)
#define TAB_MAX_CHUNKS 4096 /* 4M unique script frames */
#define NO_ID UINT32_MAX

/* ---- handle lists ---- */

typedef struct hlist {
  uintptr_t *v;
  size_t n, cap;
} hlist;

/* False when memory runs out (the handle is then dropped: its reference is never released,
 * which leaks it rather than risking a crash). */
static bool hlist_push(hlist *l, uintptr_t h) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    uintptr_t *v = realloc(l->v, cap * sizeof *v);
    if (!v) return false;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = h;
  return true;
}

/* Move every handle of src to the end of dst (src ends empty). */
static void hlist_take(hlist *dst, hlist *src) {
  if (src->n == 0) return;
  if (dst->n == 0 && dst->cap < src->cap) {
    hlist t = *dst;
    *dst = *src;
    *src = t;
    src->n = 0;
    return;
  }
  for (size_t i = 0; i < src->n; i++) hlist_push(dst, src->v[i]);
  src->n = 0;
}

/* ---- the unwinder ---- */

typedef struct range {
  uintptr_t lo, hi;
} range;

typedef struct unw {
  etr_script_unwinder cb; /* the caller's struct; entry_symbols is not kept */
  range ranges[16];
  size_t n_ranges;
} unw;

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(unw *) cur_unw;
static bool draining; /* ctl_lock: unregister is taking handles back */

/* ---- per-thread state ---- */

typedef struct centry {
  uintptr_t handle;
  uint32_t id1; /* script-frame id + 1; 0 = empty */
} centry;

typedef struct tstate {
  _Atomic(unw *) hazard; /* the unwinder this thread is using right now */
  bool busy;             /* inside etr__script_interleave (owner only) */
  centry *cache;         /* 2 * nbuckets entries, NULL until first use */
  uint8_t *mru;          /* per bucket: the way used last */
  size_t nbuckets;
  size_t cached;              /* valid cache entries */
  uintptr_t hbuf[SCRIPT_MAX]; /* gather buffers */
  uint8_t fbuf[SCRIPT_MAX];
  uint32_t idbuf[SCRIPT_MAX];
  hlist batch; /* surplus of the capture in progress (owner only) */
  pthread_mutex_t plock;
  hlist pending;                           /* plock: deferred releases */
  _Atomic uint64_t n_frames, n_symbolized; /* written by the owner only */
  uint8_t exit_rounds;                     /* rounds of key destructors seen (etr__key_keep) */
  struct tstate *prev, *next;              /* threads_lock */
} tstate;

static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static tstate *threads_head;
static uint64_t dead_frames, dead_symbolized; /* threads_lock */
static pthread_key_t ts_key;
static pthread_once_t ts_once = PTHREAD_ONCE_INIT;
static _Thread_local tstate *tls_ts;
static _Thread_local bool tls_gone;
static _Atomic size_t cache_buckets_override;

static pthread_mutex_t gp_lock = PTHREAD_MUTEX_INITIALIZER;
static hlist gp; /* gp_lock: handles of exited threads */

static _Atomic uint64_t pending_total; /* handles in all pending lists (for a cheap check) */
static _Atomic uint64_t n_released;

/* ---- the script-frame table ---- */

typedef struct tentry {
  const char *name, *filename;
  int64_t line;
  uint64_t hash;
} tentry;

static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(tentry *) tab_chunks[TAB_MAX_CHUNKS];
static _Atomic uint32_t tab_count;
static uint32_t *tab_index; /* tab_lock: open addressing, id + 1 per slot, 0 = empty */
static size_t tab_index_cap;

static void ts_exit(void *arg);
static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

static void ts_key_init(void) {
  pthread_key_create(&ts_key, ts_exit);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static tstate *ts_self(void) {
  tstate *ts = tls_ts;
  if (ETR__LIKELY(ts != NULL)) return ts;
  if (tls_gone) return NULL;
  pthread_once(&ts_once, ts_key_init);
  ts = calloc(1, sizeof *ts);
  if (!ts) return NULL;
  pthread_mutex_init(&ts->plock, NULL);
  pthread_mutex_lock(&threads_lock);
  ts->next = threads_head;
  if (threads_head) threads_head->prev = ts;
  threads_head = ts;
  pthread_mutex_unlock(&threads_lock);
  tls_ts = ts;
  pthread_setspecific(ts_key, ts);
  return ts;
}

/* Move the cached handles of ts to dst and empty its cache (caller owns ts's cache). */
static void cache_drain(tstate *ts, hlist *dst) {
  if (!ts->cache) return;
  for (size_t i = 0; i < 2 * ts->nbuckets; i++) {
    if (ts->cache[i].id1) {
      hlist_push(dst, ts->cache[i].handle);
      ts->cache[i].id1 = 0;
    }
  }
  ts->cached = 0;
}

/* Thread exit: the thread's handles go to the global pending list (released at the next
 * safe point, on another thread); the state is freed. */
static void ts_exit(void *arg) {
  tstate *ts = arg;
  /* (kept like the registry's state: a host's key destructor that records in a later round
   * gets its script frames, registry.c thread_exit) */
  if (etr__key_keep(ts_key, ts, &ts->exit_rounds)) return;
  tls_ts = NULL;
  tls_gone = true;
  pthread_mutex_lock(&threads_lock);
  if (ts->prev)
    ts->prev->next = ts->next;
  else
    threads_head = ts->next;
  if (ts->next) ts->next->prev = ts->prev;
  dead_frames += atomic_load_explicit(&ts->n_frames, memory_order_relaxed);
  dead_symbolized += atomic_load_explicit(&ts->n_symbolized, memory_order_relaxed);
  hlist mine = {0};
  cache_drain(ts, &mine);
  hlist_take(&mine, &ts->batch);
  pthread_mutex_lock(&ts->plock);
  size_t were_pending = ts->pending.n;
  hlist_take(&mine, &ts->pending);
  pthread_mutex_unlock(&ts->plock);
  pthread_mutex_lock(&gp_lock);
  size_t before = gp.n;
  hlist_take(&gp, &mine);
  atomic_fetch_add(&pending_total, (gp.n - before) - were_pending);
  pthread_mutex_unlock(&gp_lock);
  pthread_mutex_unlock(&threads_lock);
  free(mine.v);
  free(ts->batch.v);
  free(ts->pending.v);
  free(ts->cache);
  free(ts->mru);
  pthread_mutex_destroy(&ts->plock);
  free(ts);
}

static void fork_prepare(void) {
  pthread_mutex_lock(&ctl_lock);
  pthread_mutex_lock(&threads_lock);
  for (tstate *t = threads_head; t; t = t->next) pthread_mutex_lock(&t->plock);
  pthread_mutex_lock(&gp_lock);
  pthread_mutex_lock(&tab_lock);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&tab_lock);
  pthread_mutex_unlock(&gp_lock);
  for (tstate *t = threads_head; t; t = t->next) pthread_mutex_unlock(&t->plock);
  pthread_mutex_unlock(&threads_lock);
  pthread_mutex_unlock(&ctl_lock);
}

/* In the child only the forking thread exists: nobody else is inside a hazard. */
static void fork_child(void) {
  for (tstate *t = threads_head; t; t = t->next) {
    if (t != tls_ts) {
      atomic_store_explicit(&t->hazard, NULL, memory_order_relaxed);
      t->busy = false;
    }
  }
  fork_parent();
}

/* ---- hazards ---- */

static bool hazard_enter(tstate *ts, unw *u) {
  atomic_store(&ts->hazard, u); /* seq_cst: pairs with unregister's store, then load */
  if (atomic_load(&cur_unw) == u) return true;
  atomic_store_explicit(&ts->hazard, NULL, memory_order_release);
  return false;
}

static void hazard_exit(tstate *ts) {
  atomic_store_explicit(&ts->hazard, NULL, memory_order_release);
}

/* Wait until no thread other than self uses u. */
static void hazard_wait(unw *u, tstate *self) {
  for (unsigned spins = 0;; spins++) {
    bool busy = false;
    pthread_mutex_lock(&threads_lock);
    for (tstate *t = threads_head; t && !busy; t = t->next)
      if (t != self && atomic_load(&t->hazard) == u) busy = true;
    pthread_mutex_unlock(&threads_lock);
    if (!busy) return;
    if (spins < 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
}

/* ---- the table ---- */

static uint64_t hash_bytes(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
  return (h ^ 0xFF) * 0x100000001B3ull; /* terminator, so ("ab","c") != ("a","bc") */
}

static tentry *tab_at(uint32_t id) {
  tentry *c = atomic_load_explicit(&tab_chunks[id >> TAB_CHUNK_BITS], memory_order_acquire);
  return &c[id & (TAB_CHUNK - 1)];
}

/* tab_lock held. */
static bool tab_index_grow(void) {
  size_t cap = tab_index_cap ? tab_index_cap * 2 : 1024;
  uint32_t *ix = calloc(cap, sizeof *ix);
  if (!ix) return false;
  uint32_t n = atomic_load_explicit(&tab_count, memory_order_relaxed);
  for (uint32_t id = 0; id < n; id++) {
    size_t i = (size_t)tab_at(id)->hash & (cap - 1);
    while (ix[i]) i = (i + 1) & (cap - 1);
    ix[i] = id + 1;
  }
  free(tab_index);
  tab_index = ix;
  tab_index_cap = cap;
  return true;
}

/* The id of (name, filename, line), added when new. NO_ID when memory runs out. Takes
 * tab_lock (alone). */
static uint32_t tab_add(const char *name, const char *filename, int64_t line) {
  if (!name) name = "";
  if (!filename) filename = "";
  uint64_t h = hash_bytes(hash_bytes(0xCBF29CE484222325ull, name), filename);
  h = (h ^ (uint64_t)line) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  uint32_t id = NO_ID;
  pthread_mutex_lock(&tab_lock);
  uint32_t n = atomic_load_explicit(&tab_count, memory_order_relaxed);
  if (((size_t)n + 1) * 2 > tab_index_cap && !tab_index_grow()) goto out;
  size_t i = (size_t)h & (tab_index_cap - 1);
  for (; tab_index[i]; i = (i + 1) & (tab_index_cap - 1)) {
    tentry *e = tab_at(tab_index[i] - 1);
    if (e->hash == h && e->line == line && strcmp(e->name, name) == 0 &&
        strcmp(e->filename, filename) == 0) {
      id = tab_index[i] - 1;
      goto out;
    }
  }
  if (n >= (uint32_t)TAB_MAX_CHUNKS * TAB_CHUNK) goto out;
  tentry *chunk = atomic_load_explicit(&tab_chunks[n >> TAB_CHUNK_BITS], memory_order_relaxed);
  if (!chunk) {
    chunk = calloc(TAB_CHUNK, sizeof *chunk);
    if (!chunk) goto out;
    atomic_store_explicit(&tab_chunks[n >> TAB_CHUNK_BITS], chunk, memory_order_release);
  }
  size_t ln = strlen(name) + 1, lf = strlen(filename) + 1;
  char *s = malloc(ln + lf);
  if (!s) goto out;
  memcpy(s, name, ln);
  memcpy(s + ln, filename, lf);
  tentry *e = &chunk[n & (TAB_CHUNK - 1)];
  e->name = s;
  e->filename = s + ln;
  e->line = line;
  e->hash = h;
  tab_index[i] = n + 1;
  id = n;
  atomic_store_explicit(&tab_count, n + 1, memory_order_release);
out:
  pthread_mutex_unlock(&tab_lock);
  return id;
}

int etr__script_frame_get(uint64_t id, etr_script_frame *out) {
  if (!out || id >= atomic_load_explicit(&tab_count, memory_order_acquire)) return ETR_ENOENT;
  const tentry *e = tab_at((uint32_t)id);
  out->name = e->name;
  out->filename = e->filename;
  out->line = e->line;
  return 0;
}

uint64_t etr__script_frame_count(void) {
  return atomic_load_explicit(&tab_count, memory_order_acquire);
}

/* ---- the per-thread cache ---- */

void etr__script_test_set_cache_buckets(size_t nbuckets) {
  if (nbuckets & (nbuckets - 1)) nbuckets = CACHE_BUCKETS; /* not a power of two */
  atomic_store(&cache_buckets_override, nbuckets);
}

static bool cache_alloc(tstate *ts) {
  size_t nb = atomic_load_explicit(&cache_buckets_override, memory_order_relaxed);
  if (nb == 0) nb = CACHE_BUCKETS;
  ts->cache = calloc(2 * nb, sizeof *ts->cache);
  ts->mru = calloc(nb, 1);
  if (!ts->cache || !ts->mru) {
    free(ts->cache);
    free(ts->mru);
    ts->cache = NULL;
    ts->mru = NULL;
    return false;
  }
  ts->nbuckets = nb;
  return true;
}

/* Every bit of the handle matters (a runtime may keep its data in the high bits, as etrdemo
 * puts the instruction index above a pointer): a full 64-bit mix (murmur3's finalizer). */
static size_t cache_bucket(const tstate *ts, uintptr_t h) {
  uint64_t x = (uint64_t)h;
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return (size_t)x & (ts->nbuckets - 1);
}

static centry *cache_find(tstate *ts, uintptr_t h) {
  size_t b = cache_bucket(ts, h);
  for (int w = 0; w < 2; w++) {
    centry *e = &ts->cache[2 * b + w];
    if (e->id1 && e->handle == h) {
      ts->mru[b] = (uint8_t)w;
      return e;
    }
  }
  return NULL;
}

/* Insert; the evicted entry's handle (its reference now surplus) goes to the batch. */
static void cache_insert(tstate *ts, uintptr_t h, uint32_t id) {
  size_t b = cache_bucket(ts, h);
  int w = !ts->cache[2 * b].id1 ? 0 : !ts->cache[2 * b + 1].id1 ? 1 : !ts->mru[b];
  centry *e = &ts->cache[2 * b + w];
  if (e->id1)
    hlist_push(&ts->batch, e->handle);
  else
    ts->cached++;
  e->handle = h;
  e->id1 = id + 1;
  ts->mru[b] = (uint8_t)w;
}

/* Map ts->hbuf[0..m) to ids in ts->idbuf (NO_ID for a frame that could not be stored).
 * Symbolizes new handles: runs the unwinder's callback with no etr lock held. */
static void map_ids(tstate *ts, unw *u, size_t m) {
  if (!ts->cache && !cache_alloc(ts)) {
    /* No cache: every frame is symbolized and its reference given back at once. */
    for (size_t i = 0; i < m; i++) {
      etr_script_frame f = {NULL, NULL, 0};
      int rc = u->cb.symbolize(ts->hbuf[i], &f, u->cb.user);
      atomic_store_explicit(&ts->n_symbolized,
                            atomic_load_explicit(&ts->n_symbolized, memory_order_relaxed) + 1,
                            memory_order_relaxed);
      ts->idbuf[i] = rc == 0 ? tab_add(f.name, f.filename, f.line) : tab_add("??", "??", 0);
      hlist_push(&ts->batch, ts->hbuf[i]);
    }
    return;
  }
  uint64_t symbolized = 0;
  for (size_t i = 0; i < m; i++) {
    uintptr_t h = ts->hbuf[i];
    centry *e = cache_find(ts, h);
    if (e) { /* also a handle seen earlier in this same stack (recursion) */
      ts->idbuf[i] = e->id1 - 1;
      hlist_push(&ts->batch, h);
      continue;
    }
    etr_script_frame f = {NULL, NULL, 0};
    int rc = u->cb.symbolize(h, &f, u->cb.user);
    symbolized++;
    uint32_t id = rc == 0 ? tab_add(f.name, f.filename, f.line) : tab_add("??", "??", 0);
    ts->idbuf[i] = id;
    if (id == NO_ID)
      hlist_push(&ts->batch, h);
    else
      cache_insert(ts, h, id);
  }
  if (symbolized)
    atomic_store_explicit(
        &ts->n_symbolized,
        atomic_load_explicit(&ts->n_symbolized, memory_order_relaxed) + symbolized,
        memory_order_relaxed);
}

/* ---- releases ---- */

static void release_list(unw *u, hlist *l) {
  if (l->n == 0) return;
  u->cb.release(l->v, l->n, u->cb.user);
  atomic_fetch_add_explicit(&n_released, l->n, memory_order_relaxed);
  l->n = 0;
}

/* Take the global pending list into dst. */
static void take_global(hlist *dst) {
  pthread_mutex_lock(&gp_lock);
  atomic_fetch_sub(&pending_total, gp.n);
  hlist_take(dst, &gp);
  pthread_mutex_unlock(&gp_lock);
}

/* Take every thread's pending list and the global one into dst. */
static void take_all_pending(hlist *dst) {
  pthread_mutex_lock(&threads_lock);
  for (tstate *t = threads_head; t; t = t->next) {
    pthread_mutex_lock(&t->plock);
    atomic_fetch_sub(&pending_total, t->pending.n);
    hlist_take(dst, &t->pending);
    pthread_mutex_unlock(&t->plock);
  }
  take_global(dst);
  pthread_mutex_unlock(&threads_lock);
}

uint64_t etr__script_pending_count(void) { return atomic_load(&pending_total); }

void etr_script_release_pending(void) {
  if (atomic_load_explicit(&pending_total, memory_order_relaxed) == 0) return;
  unw *u = atomic_load_explicit(&cur_unw, memory_order_acquire);
  tstate *ts = ts_self();
  if (!u || !ts) return;
  /* Called from inside one of the unwinder's callbacks: the hazard is already ours. */
  bool nested = atomic_load_explicit(&ts->hazard, memory_order_relaxed) == u;
  if (!nested && !hazard_enter(ts, u)) return; /* no unwinder: unregister releases all */
  hlist all = {0};
  take_all_pending(&all);
  release_list(u, &all);
  free(all.v);
  if (!nested) hazard_exit(ts);
}

/* ---- register / unregister ---- */

static bool resolve(unw *x, const char *name) {
  void *p = dlsym(RTLD_DEFAULT, name);
  if (!p) return false;
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (!dladdr1(p, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || sym->st_size == 0) return false;
  uintptr_t lo = (uintptr_t)info.dli_saddr ? (uintptr_t)info.dli_saddr : (uintptr_t)p;
  for (size_t i = 0; i < x->n_ranges; i++)
    if (x->ranges[i].lo == lo) return true;
  if (x->n_ranges == sizeof x->ranges / sizeof x->ranges[0]) return false;
  x->ranges[x->n_ranges].lo = lo;
  x->ranges[x->n_ranges].hi = lo + sym->st_size;
  x->n_ranges++;
  return true;
}

/* etr_script_unwinder as it was first released, up to its last field then (any later field
 * goes after it). */
#define SCRIPT_UNWINDER_FIRST_SIZE (offsetof(etr_script_unwinder, user) + sizeof(void *))
_Static_assert(sizeof(etr_script_unwinder) >= SCRIPT_UNWINDER_FIRST_SIZE, "structs grow only");

int etr_script_unwinder_register(const etr_script_unwinder *in) {
  ETR__QUIET_CALL();
  etr_script_unwinder uo = ETR_SCRIPT_UNWINDER_INIT;
  if (!in || !etr__options_in(&uo, sizeof uo, in, SCRIPT_UNWINDER_FIRST_SIZE)) return ETR_EINVAL;
  const etr_script_unwinder *u = &uo;
  if (!u->gather || !u->symbolize || !u->release || !u->entry_symbols || u->n_entry_symbols == 0)
    return ETR_EINVAL;
  unw *x = calloc(1, sizeof *x);
  if (!x) return ETR_ENOMEM;
  x->cb = *u;
  x->cb.entry_symbols = NULL;
  x->cb.n_entry_symbols = 0;
  for (size_t i = 0; i < u->n_entry_symbols; i++) {
    if (u->entry_symbols[i] && !resolve(x, u->entry_symbols[i]))
      etr__log(ETR_LOG_WARN,
               "script unwinder: entry symbol %s not found in the dynamic symbol "
               "table (or its size is unknown)",
               u->entry_symbols[i]);
  }
  if (x->n_ranges == 0) {
    free(x);
    return ETR_ENOENT;
  }
  pthread_once(&ts_once, ts_key_init);
  pthread_mutex_lock(&ctl_lock);
  if (atomic_load(&cur_unw) || draining) {
    pthread_mutex_unlock(&ctl_lock);
    free(x);
    return ETR_EBUSY;
  }
  atomic_store_explicit(&cur_unw, x, memory_order_release);
  pthread_mutex_unlock(&ctl_lock);
  return 0;
}

int etr_script_unwinder_unregister(void) {
  ETR__QUIET_CALL();
  tstate *self = tls_ts;
  if (self && self->busy) return ETR_EBUSY; /* from inside one of the unwinder's callbacks */
  pthread_mutex_lock(&ctl_lock);
  unw *u = atomic_load(&cur_unw);
  if (!u || draining) {
    pthread_mutex_unlock(&ctl_lock);
    return u ? ETR_EBUSY : ETR_ENOENT;
  }
  draining = true;
  atomic_store(&cur_unw, NULL); /* seq_cst: pairs with hazard_enter */
  pthread_mutex_unlock(&ctl_lock);

  hazard_wait(u, self);
  /* Nobody uses u now, and new captures see no unwinder: every cache is ours to empty. */
  hlist all = {0};
  pthread_mutex_lock(&threads_lock);
  for (tstate *t = threads_head; t; t = t->next) cache_drain(t, &all);
  pthread_mutex_unlock(&threads_lock);
  take_all_pending(&all);
  release_list(u, &all);
  free(all.v);

  pthread_mutex_lock(&ctl_lock);
  draining = false;
  pthread_mutex_unlock(&ctl_lock);
  free(u);
  return 0;
}

bool etr__script_active(void) {
  return atomic_load_explicit(&cur_unw, memory_order_relaxed) != NULL;
}

/* ---- interleaving ---- */

static bool in_entry(const unw *u, uintptr_t ip) {
  uintptr_t a = ip - 1; /* return addresses point after the call */
  for (size_t i = 0; i < u->n_ranges; i++)
    if (a >= u->ranges[i].lo && a < u->ranges[i].hi) return true;
  return false;
}

static size_t copy_ips(const uintptr_t *ips, size_t n, uint64_t *out, size_t max) {
  if (n > max) n = max;
  for (size_t i = 0; i < n; i++) out[i] = ips[i];
  return n;
}

static size_t merge(const unw *u, const uintptr_t *ips, size_t n_ips, const uint8_t *flags,
                    const uint32_t *ids, size_t m, uint64_t *out, size_t max) {
  bool any_flag = false;
  for (size_t j = 0; j < m; j++) any_flag |= (flags[j] & ETR_SCRIPT_FRAME_ENTRY) != 0;
  size_t n = 0, j = 0;
  for (size_t i = 0; i < n_ips && n < max; i++) {
    if (j < m && in_entry(u, ips[i])) {
      for (bool last = false; j < m && !last && n < max; j++) {
        last = !any_flag || (flags[j] & ETR_SCRIPT_FRAME_ENTRY);
        if (ids[j] != NO_ID) out[n++] = ETR__SCRIPT_TAG | ids[j];
      }
      if (n == max) break;
    }
    out[n++] = ips[i];
  }
  for (; j < m && n < max; j++)
    if (ids[j] != NO_ID) out[n++] = ETR__SCRIPT_TAG | ids[j];
  return n;
}

size_t etr__script_interleave(const uintptr_t *ips, size_t n_ips, uint64_t *out, size_t max) {
  unw *u = atomic_load_explicit(&cur_unw, memory_order_acquire);
  tstate *ts;
  if (!u || max == 0 || !(ts = ts_self()) || ts->busy) return copy_ips(ips, n_ips, out, max);
  if (!hazard_enter(ts, u)) return copy_ips(ips, n_ips, out, max);
  ts->busy = true;
  size_t m = 0;
  /* Without release in records, deferred handles pile up until the runtime calls
   * etr_script_release_pending: past a bound, gather nothing (memory stays bounded). */
  bool room = true;
  if (!u->cb.release_in_record) {
    pthread_mutex_lock(&ts->plock);
    room = ts->pending.n < PENDING_MAX;
    pthread_mutex_unlock(&ts->plock);
  }
  if (room) {
    size_t cap = max < SCRIPT_MAX ? max : SCRIPT_MAX;
    memset(ts->fbuf, 0, cap);
    m = u->cb.gather(ts->hbuf, ts->fbuf, cap, u->cb.user);
    if (m > cap) m = cap;
    map_ids(ts, u, m);
    atomic_store_explicit(&ts->n_frames,
                          atomic_load_explicit(&ts->n_frames, memory_order_relaxed) + m,
                          memory_order_relaxed);
  }
  size_t n = merge(u, ips, n_ips, ts->fbuf, ts->idbuf, m, out, max);
  if (u->cb.release_in_record) {
    if (atomic_load_explicit(&pending_total, memory_order_relaxed) != 0) {
      pthread_mutex_lock(&ts->plock);
      atomic_fetch_sub(&pending_total, ts->pending.n);
      hlist_take(&ts->batch, &ts->pending);
      pthread_mutex_unlock(&ts->plock);
      take_global(&ts->batch);
    }
    release_list(u, &ts->batch);
  } else if (ts->batch.n) {
    pthread_mutex_lock(&ts->plock);
    atomic_fetch_add(&pending_total, ts->batch.n);
    hlist_take(&ts->pending, &ts->batch);
    pthread_mutex_unlock(&ts->plock);
  }
  ts->busy = false;
  hazard_exit(ts);
  return n;
}

/* ---- counters ---- */

void etr__script_stats_add(etr_traceback_stats *out) {
  uint64_t frames, symbolized;
  pthread_mutex_lock(&threads_lock);
  frames = dead_frames;
  symbolized = dead_symbolized;
  for (tstate *t = threads_head; t; t = t->next) {
    frames += atomic_load_explicit(&t->n_frames, memory_order_relaxed);
    symbolized += atomic_load_explicit(&t->n_symbolized, memory_order_relaxed);
  }
  pthread_mutex_unlock(&threads_lock);
  out->script_frames += frames;
  out->script_symbolized += symbolized;
  out->script_released += atomic_load_explicit(&n_released, memory_order_relaxed);
}
