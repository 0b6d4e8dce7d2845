/* The observer registry: slots, enable/disable, the record life cycle.
 *
 * Hot path (records while observers are enabled): no lock, no allocation. A record reads
 * the enabled mask and the registry epoch once at prepare; each begin/end publishes the set
 * of slots whose callbacks it is about to run in the thread's hazard word (one seq_cst
 * store), re-checks that each slot is still live, runs the callbacks and clears the word.
 * A remover marks the slot dead (seq_cst), bumps the epoch, then waits until no other
 * thread's hazard word holds the slot. The store-then-load on both sides (Dekker) makes
 * sure either the recorder sees the slot dead or the remover sees the hazard.
 *
 * A slot re-added after a removal gets a newer epoch than records prepared before, so such
 * records never call the new observer's exit for an enter it did not see.
 *
 * Lock order: the trace observer's locks (trace.c), then reg_lock, then threads_lock.
 * Callbacks never run under any of them.
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "etr/observer.h"
#include "observer/internal.h"
#include "observer/registry.h"

ETR_API uint32_t etr__observing;

typedef struct slot {
  _Atomic uint64_t live_epoch; /* 0: free or being removed; else the epoch it was added in */
  _Atomic(etr_enter_fn) enter;
  _Atomic(etr_exit_fn) exit;
  _Atomic(void *) user;
  _Atomic uint32_t needs;
  _Atomic uint32_t scopes;
  _Atomic uint64_t sample_threshold; /* 0 = every op; else observe when rng < threshold */
  _Atomic(etr__thread *) owner;      /* NULL = global */
  uint32_t gen;                      /* handle generation (under reg_lock) */
  bool used;                         /* slot taken, possibly being removed (reg_lock) */
} slot;

static slot slots[ETR_MAX_OBSERVERS];
static _Atomic uint64_t enabled_mask;
static _Atomic uint64_t epoch = 1;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static etr__thread *threads_head;
static _Atomic uint64_t next_tid = 1;
static _Atomic uint64_t next_rf = 1;
static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;
/* initial-exec: a plain %fs-relative load instead of a __tls_get_addr call per access. */
_Thread_local etr__thread *etr__tls_self __attribute__((tls_model("initial-exec")));
static _Thread_local bool tls_gone __attribute__((tls_model("initial-exec")));
/* The thread's state is being made (etr__thread_self_slow). */
static _Thread_local bool tls_making __attribute__((tls_model("initial-exec")));

/* With the membarrier system call, a recorder publishes its hazard word with a plain store
 * and the (rare) remover forces a full barrier on every thread of the process before it
 * reads the hazard words. Without it, recorders use a seq_cst store. Set once. */
bool etr__use_membarrier;

/* Counters of threads that have exited, so stats stay monotonic (threads_lock). */
static uint64_t dead_observed, dead_ends_without_begin, dead_begins_repeated, dead_in_callbacks;
/* Records made on a thread after its state was torn down: by the host's own thread-key
 * destructors that run after etr's in the last two rounds of destructors (etr's key is made
 * when libetr loads, before any of the host's, glibc runs them in order, and etr keeps its
 * state until the round before the last: etr__key_keep), or at exit. Not observed, counted
 * in records_in_callbacks. */
static _Atomic uint64_t records_after_teardown;

#define RF_BLOCK 256

/* Tests' hooks (tests/registry/ compiles this file with ETR_TEST_HOOKS; the library never
 * does): where a record's callbacks are about to publish the thread's hazard, and where a
 * thread's state is about to be allocated. */
#ifdef ETR_TEST_HOOKS
void (*etr__test_before_hazard)(const etr_record *rec);
void (*etr__test_making_thread)(void);
#define BEFORE_HAZARD(rec)                                     \
  do {                                                         \
    if (etr__test_before_hazard) etr__test_before_hazard(rec); \
  } while (0)
#define MAKING_THREAD()                                     \
  do {                                                      \
    if (etr__test_making_thread) etr__test_making_thread(); \
  } while (0)
#else
#define BEFORE_HAZARD(rec) ((void)0)
#define MAKING_THREAD() ((void)0)
#endif

static void thread_exit(void *arg);
static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

static void key_init(void) {
#ifdef __NR_membarrier
  etr__use_membarrier = syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) == 0;
#endif
  pthread_key_create(&thread_key, thread_exit);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void etr__registry_init(void) { pthread_once(&thread_key_once, key_init); }

/* At load: the fork handlers exist before any lock of etr's is taken, so that a fork while
 * another thread holds one (in the process's first trace open, say) never leaves the child
 * a lock nobody will release. */
__attribute__((constructor)) static void registry_load(void) { etr__registry_init(); }

static uint64_t seed_rng(uint64_t tid) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (tid * 0x9E3779B97F4A7C15ull);
  return x ? x : 0x2545F4914F6CDD1Dull;
}

etr__thread *etr__thread_self_slow(void) {
  etr__thread *t = etr__tls_self;
  if (t) return t;
  /* A record made meanwhile on this thread (by a handler of the host's signals that
   * interrupted us here) finds no state and is not observed: made again, the state would be
   * made twice, and calloc or threads_lock entered again by a thread that holds it. */
  if (tls_gone || tls_making) return NULL;
  tls_making = true;
  MAKING_THREAD();
  pthread_once(&thread_key_once, key_init);
  t = calloc(1, sizeof *t);
  if (!t) {
    tls_making = false;
    return NULL;
  }
  t->tid = atomic_fetch_add_explicit(&next_tid, 1, memory_order_relaxed);
  t->rng = seed_rng(t->tid);
  pthread_mutex_lock(&threads_lock);
  t->next = threads_head;
  if (threads_head) threads_head->prev = t;
  threads_head = t;
  pthread_mutex_unlock(&threads_lock);
  etr__tls_self = t;
  pthread_setspecific(thread_key, t);
  tls_making = false;
  return t;
}

uint64_t etr_thread_id(void) {
  etr__thread *t = etr__thread_self();
  return t ? t->tid : 0;
}

int etr_thread_set_name(const char *name) {
  ETR__QUIET_CALL();
  etr__thread *t = etr__thread_self();
  if (!t) return ETR_ESTATE;
  size_t n = name ? strlen(name) : 0;
  if (n >= sizeof t->name) n = sizeof t->name - 1;
  /* never cut inside a UTF-8 sequence (the writer would replace the broken tail) */
  while (n > 0 && n < (name ? strlen(name) : 0) && ((unsigned char)name[n] & 0xc0) == 0x80) n--;
  if (n) memcpy(t->name, name, n);
  t->name[n] = '\0';
  return 0;
}

static void unlink_thread(etr__thread *t) {
  if (t->prev)
    t->prev->next = t->next;
  else
    threads_head = t->next;
  if (t->next) t->next->prev = t->prev;
  dead_observed += atomic_load_explicit(&t->n_observed, memory_order_relaxed);
  dead_ends_without_begin += atomic_load_explicit(&t->n_ends_without_begin, memory_order_relaxed);
  dead_begins_repeated += atomic_load_explicit(&t->n_begins_repeated, memory_order_relaxed);
  dead_in_callbacks += atomic_load_explicit(&t->n_in_callbacks, memory_order_relaxed);
}

static void remove_slot_locked_and_wait(int i, bool wait);

static _Atomic(const etr__registry_hooks *) g_hooks;

void etr__registry_set_hooks(const etr__registry_hooks *hooks) {
  atomic_store_explicit(&g_hooks, hooks, memory_order_release);
}

static inline const etr__registry_hooks *hooks(void) {
  return atomic_load_explicit(&g_hooks, memory_order_acquire);
}

static void thread_exit(void *arg) {
  etr__thread *t = arg;
  if (etr__key_keep(thread_key, t, &t->exit_rounds)) return;
  /* From here on the thread's records are not observed (etr__quiet_enter): a handler of
   * the host's signals that records while the observers tear this thread's state down (the
   * trace observer frees it, inside malloc's locks) would otherwise find it half freed, or
   * wait for a lock its own thread holds. */
  etr__quiet_enter(t);
  /* Thread-local observers die with their thread. */
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < ETR_MAX_OBSERVERS; i++) {
    if (slots[i].used && atomic_load_explicit(&slots[i].owner, memory_order_relaxed) == t &&
        atomic_load_explicit(&slots[i].live_epoch, memory_order_relaxed) != 0)
      remove_slot_locked_and_wait(i, false);
  }
  pthread_mutex_unlock(&reg_lock);
  const etr__registry_hooks *h = hooks();
  if (h && h->thread_exit) h->thread_exit(t);
  /* Gone first, then no state: a handler of the host's signals that lands between the two
   * must find the thread gone, not a thread without a state to make again (it made one,
   * observed its record, and the capture of its traceback found the unwinder's state of
   * this thread already destroyed by its own thread-exit destructor: an op without its
   * traceback, about 1 run in 7 of trace.signals under ASan). */
  tls_gone = true;
  atomic_signal_fence(memory_order_seq_cst);
  etr__tls_self = NULL;
  pthread_mutex_lock(&threads_lock);
  unlink_thread(t);
  pthread_mutex_unlock(&threads_lock);
  free(t);
}

/* Waits (yielding, then sleeping 50 us at a time) until no thread other than the caller
 * has a bit of mask in its hazard_slots, or (ids) is inside an object-id operation. */
static void wait_until_clear_on(uint64_t mask, bool ids);
static void wait_until_clear(uint64_t mask, bool ids) {
  int cancel = etr__cancel_off(); /* (it sleeps: a cancellation point) */
  wait_until_clear_on(mask, ids);
  etr__cancel_restore(cancel);
}

static void wait_until_clear_on(uint64_t mask, bool ids) {
  etr__thread *self = etr__tls_self;
#ifdef __NR_membarrier
  if (etr__use_membarrier) syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0);
#endif
  for (unsigned spins = 0;; spins++) {
    bool busy = false;
    pthread_mutex_lock(&threads_lock);
    for (etr__thread *t = threads_head; t && !busy; t = t->next) {
      if (t == self) continue;
      if (mask && (atomic_load(&t->hazard_slots) & mask)) busy = true;
      if (ids && atomic_load(&t->hazard_ids)) busy = true;
    }
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

void etr__wait_slots(uint64_t mask) { wait_until_clear(mask, false); }
void etr__wait_ids(void) { wait_until_clear(0, true); }

/* ---- observers ---- */

static void (*_Atomic first_record_fn)(void); /* etr__registry_at_first_record */

static void publish_enabled(uint64_t mask) {
  atomic_store(&enabled_mask, mask);
  bool armed = atomic_load_explicit(&first_record_fn, memory_order_relaxed) != NULL;
  __atomic_store_n(&etr__observing, mask != 0 || armed ? 1u : 0u, __ATOMIC_RELAXED);
}

void etr__registry_at_first_record(void (*fn)(void)) {
  atomic_store(&first_record_fn, fn);
  if (fn) __atomic_store_n(&etr__observing, 1u, __ATOMIC_RELAXED);
}

/* The armed function, from a record no observer took: returns true when it ran (the record
 * is then decided again, once). */
static bool run_first_record_fn(void) {
  if (ETR__LIKELY(atomic_load_explicit(&first_record_fn, memory_order_relaxed) == NULL))
    return false;
  void (*fn)(void) = atomic_exchange(&first_record_fn, NULL);
  if (!fn) return false;
  fn();
  pthread_mutex_lock(&reg_lock); /* (etr__observing back to what the observers say) */
  publish_enabled(atomic_load(&enabled_mask));
  pthread_mutex_unlock(&reg_lock);
  return true;
}

static int slot_of(etr_observer_id id) {
  uint32_t idx = (uint32_t)(id & 0xFFFFFFFFu);
  uint32_t gen = (uint32_t)(id >> 32);
  if (idx == 0 || idx > ETR_MAX_OBSERVERS) return -1;
  slot *s = &slots[idx - 1];
  if (!s->used || s->gen != gen || atomic_load_explicit(&s->live_epoch, memory_order_relaxed) == 0)
    return -1;
  return (int)(idx - 1);
}

/* etr_observer_options as it was first released, up to its last field then (any later
 * field goes after it; the padding after it is not required of a caller). */
#define OBSERVER_OPTIONS_FIRST_SIZE (offsetof(etr_observer_options, start_disabled) + sizeof(bool))
_Static_assert(sizeof(etr_observer_options) >= OBSERVER_OPTIONS_FIRST_SIZE, "options grow only");

int etr_observer_add(const etr_observer_options *in, etr_observer_id *out) {
  ETR__QUIET_CALL();
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  if (!in || !out || !etr__options_in(&o, sizeof o, in, OBSERVER_OPTIONS_FIRST_SIZE))
    return ETR_EINVAL;
  const etr_observer_options *opt = &o;
  double p = opt->sample_probability;
  if (!(p >= 0.0 && p <= 1.0)) return ETR_EINVAL; /* also rejects NaN */
  etr__thread *self = NULL;
  if (opt->thread_local_only) {
    self = etr__thread_self();
    if (!self) return ETR_ENOMEM;
  } else {
    pthread_once(&thread_key_once, key_init);
  }
  uint64_t threshold = 0;
  if (p > 0.0 && p < 1.0) {
    threshold = (uint64_t)(p * 18446744073709551616.0);
    if (threshold == 0) threshold = 1;
  }
  pthread_mutex_lock(&reg_lock);
  int idx = -1;
  for (int i = 0; i < ETR_MAX_OBSERVERS; i++)
    if (!slots[i].used) {
      idx = i;
      break;
    }
  if (idx < 0) {
    pthread_mutex_unlock(&reg_lock);
    return ETR_ENOSPC;
  }
  slot *s = &slots[idx];
  s->used = true;
  s->gen++;
  if (s->gen == 0) s->gen = 1;
  atomic_store_explicit(&s->enter, opt->enter, memory_order_relaxed);
  atomic_store_explicit(&s->exit, opt->exit, memory_order_relaxed);
  atomic_store_explicit(&s->user, opt->user, memory_order_relaxed);
  atomic_store_explicit(&s->needs, opt->needs, memory_order_relaxed);
  atomic_store_explicit(&s->scopes, opt->scopes, memory_order_relaxed);
  atomic_store_explicit(&s->sample_threshold, threshold, memory_order_relaxed);
  atomic_store_explicit(&s->owner, self, memory_order_relaxed);
  atomic_store(&s->live_epoch, atomic_load(&epoch));
  if (!opt->start_disabled) publish_enabled(atomic_load(&enabled_mask) | (1ull << idx));
  *out = ((uint64_t)s->gen << 32) | (uint64_t)(idx + 1);
  pthread_mutex_unlock(&reg_lock);
  return 0;
}

static int set_enabled(etr_observer_id id, bool on) {
  pthread_mutex_lock(&reg_lock);
  int i = slot_of(id);
  if (i < 0) {
    pthread_mutex_unlock(&reg_lock);
    return ETR_ENOENT;
  }
  uint64_t m = atomic_load(&enabled_mask);
  publish_enabled(on ? (m | (1ull << i)) : (m & ~(1ull << i)));
  pthread_mutex_unlock(&reg_lock);
  return 0;
}

int etr_observer_enable(etr_observer_id id) { return set_enabled(id, true); }
int etr_observer_disable(etr_observer_id id) { return set_enabled(id, false); }

int etr_observer_is_enabled(etr_observer_id id) {
  pthread_mutex_lock(&reg_lock);
  int i = slot_of(id);
  int r = i < 0 ? ETR_ENOENT : (int)((atomic_load(&enabled_mask) >> i) & 1u);
  pthread_mutex_unlock(&reg_lock);
  return r;
}

/* Marks slot i dead under reg_lock. With wait, drops reg_lock while waiting for other
 * threads to leave its callbacks (they may call into the registry), then frees the slot. */
static void remove_slot_locked_and_wait(int i, bool wait) {
  slot *s = &slots[i];
  atomic_store(&s->live_epoch, 0);
  publish_enabled(atomic_load(&enabled_mask) & ~(1ull << i));
  atomic_fetch_add(&epoch, 1);
  if (wait) {
    pthread_mutex_unlock(&reg_lock);
    etr__wait_slots(1ull << i);
    pthread_mutex_lock(&reg_lock);
  }
  s->used = false;
}

void etr__observer_drop_in_child(uint64_t id) {
  int i = slot_of(id);
  if (i >= 0) remove_slot_locked_and_wait(i, false);
}

int etr_observer_remove(etr_observer_id id) {
  ETR__QUIET_CALL();
  pthread_mutex_lock(&reg_lock);
  int i = slot_of(id);
  if (i < 0) {
    pthread_mutex_unlock(&reg_lock);
    return ETR_ENOENT;
  }
  remove_slot_locked_and_wait(i, true);
  pthread_mutex_unlock(&reg_lock);
  return 0;
}

int etr_registry_stats_get(etr_registry_stats *out) {
  if (!out) return ETR_EINVAL;
  etr_registry_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < ETR_MAX_OBSERVERS; i++)
    if (slots[i].used && atomic_load(&slots[i].live_epoch) != 0) s.observers++;
  pthread_mutex_unlock(&reg_lock);
  pthread_mutex_lock(&threads_lock);
  s.records_observed = dead_observed;
  s.ends_without_begin = dead_ends_without_begin;
  s.begins_repeated = dead_begins_repeated;
  s.records_in_callbacks =
      dead_in_callbacks + atomic_load_explicit(&records_after_teardown, memory_order_relaxed);
  for (etr__thread *t = threads_head; t; t = t->next) {
    s.records_observed += atomic_load_explicit(&t->n_observed, memory_order_relaxed);
    s.ends_without_begin += atomic_load_explicit(&t->n_ends_without_begin, memory_order_relaxed);
    s.begins_repeated += atomic_load_explicit(&t->n_begins_repeated, memory_order_relaxed);
    s.records_in_callbacks += atomic_load_explicit(&t->n_in_callbacks, memory_order_relaxed);
  }
  pthread_mutex_unlock(&threads_lock);
  size_t n = out->struct_size == 0 || out->struct_size > sizeof s ? sizeof s : out->struct_size;
  memcpy(out, &s, n);
  out->struct_size = n;
  return 0;
}

/* ---- records ---- */

/* Single-writer counter bump: a plain load and store, no locked instruction. */
static inline void bump(_Atomic uint64_t *c) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static inline uint64_t rng_next(etr__thread *t) {
  uint64_t x = t->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t->rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Computes the thread's decision for (ep, mask): which enabled slots observe every record of
 * t and which decide record by record. A slot added after ep (live_epoch > ep) is left out:
 * a later epoch is another key. The slots' options are set before they are published and
 * never change, and begin checks each slot's epoch again, so a cached decision is as good
 * as one made at the record. */
static __attribute__((noinline)) void decide_for_thread(etr__thread *t, uint64_t ep,
                                                        uint64_t mask) {
  uint64_t all = 0, per_record = 0;
  uint32_t needs = 0;
  for (uint64_t m = mask; m; m &= m - 1) {
    int i = __builtin_ctzll(m);
    slot *s = &slots[i];
    uint64_t le = atomic_load_explicit(&s->live_epoch, memory_order_acquire);
    if (le == 0 || le > ep) continue;
    etr__thread *owner = atomic_load_explicit(&s->owner, memory_order_relaxed);
    if (owner && owner != t) continue;
    if (atomic_load_explicit(&s->scopes, memory_order_relaxed) ||
        atomic_load_explicit(&s->sample_threshold, memory_order_relaxed)) {
      per_record |= 1ull << i;
      continue;
    }
    all |= 1ull << i;
    needs |= atomic_load_explicit(&s->needs, memory_order_relaxed);
  }
  t->dec_active = all;
  t->dec_needs = needs;
  t->dec_per_record = per_record;
  t->dec_mask = mask;
  t->dec_epoch = ep;
}

void etr__record_prepare(etr_record *rec, const char *name, etr_scope scope) {
  rec->name = name;
  rec->scope = (uint32_t)scope;
  rec->_active = 0;
  rec->_state = 0;
  etr__thread *t = etr__thread_self();
  if (!t) {
    if (tls_gone) atomic_fetch_add_explicit(&records_after_teardown, 1, memory_order_relaxed);
    return;
  }
  if (t->in_callback) {
    bump(&t->n_in_callbacks);
    return;
  }
  uint64_t ep, mask, active;
  uint32_t needs;
decide:
  ep = atomic_load_explicit(&epoch, memory_order_acquire);
  mask = atomic_load_explicit(&enabled_mask, memory_order_acquire);
  if (ETR__UNLIKELY(ep != t->dec_epoch || mask != t->dec_mask)) decide_for_thread(t, ep, mask);
  active = t->dec_active;
  needs = t->dec_needs;
  for (uint64_t m = t->dec_per_record; ETR__UNLIKELY(m); m &= m - 1) {
    int i = __builtin_ctzll(m);
    slot *s = &slots[i];
    uint32_t scopes = atomic_load_explicit(&s->scopes, memory_order_relaxed);
    if (scopes && (rec->scope >= 32 || !(scopes & (1u << rec->scope)))) continue;
    uint64_t thr = atomic_load_explicit(&s->sample_threshold, memory_order_relaxed);
    if (thr && rng_next(t) >= thr) continue;
    active |= 1ull << i;
    needs |= atomic_load_explicit(&s->needs, memory_order_relaxed);
  }
  if (!active) {
    if (run_first_record_fn()) goto decide;
    return;
  }
  if (t->rf_next == t->rf_end) {
    t->rf_next = atomic_fetch_add_explicit(&next_rf, RF_BLOCK, memory_order_relaxed);
    t->rf_end = t->rf_next + RF_BLOCK;
  }
  rec->n_inputs = 0;
  rec->n_outputs = 0;
  rec->seq_nr = -1;
  rec->fw_tid = 0;
  rec->schema = NULL;
  rec->inputs = NULL;
  rec->outputs = NULL;
  rec->kernel = NULL;
  rec->collective = NULL;
  rec->_needs = needs;
  rec->_active = active;
  rec->_epoch = ep;
  rec->_rf_id = t->rf_next++;
  rec->_tid = (uint32_t)t->tid;
  rec->_state = 1;
  bump(&t->n_observed);
}

/* Around a record's callbacks: the slots they belong to in the thread's hazard word (for a
 * remover to wait on), and the depth that keeps records made inside them unobserved.
 * Returns the word's previous value, which callbacks_leave puts back. */
static inline ETR__ALWAYS_INLINE uint64_t callbacks_enter(etr__thread *t, uint64_t mask) {
  uint64_t saved = atomic_load_explicit(&t->hazard_slots, memory_order_relaxed);
  etr__hazard_publish(&t->hazard_slots, saved | mask);
  t->in_callback++;
  return saved;
}

static inline ETR__ALWAYS_INLINE void callbacks_leave(etr__thread *t, uint64_t saved) {
  t->in_callback--;
  atomic_store_explicit(&t->hazard_slots, saved, memory_order_release);
}

/* Slot s's enter (or exit) callback for rec. */
static inline ETR__ALWAYS_INLINE void call_slot(const slot *s, etr_record *rec, bool enter) {
  void *user = atomic_load_explicit(&s->user, memory_order_relaxed);
  if (enter) {
    etr_enter_fn fn = atomic_load_explicit(&s->enter, memory_order_relaxed);
    if (fn) fn(rec, user);
  } else {
    etr_exit_fn fn = atomic_load_explicit(&s->exit, memory_order_relaxed);
    if (fn) fn(rec, user);
  }
}

/* Runs the enter (or exit) callbacks of the record's active slots. */
static __attribute__((noinline)) void run_callbacks(etr__thread *t, etr_record *rec, bool enter) {
  BEFORE_HAZARD(rec);
  uint64_t saved = callbacks_enter(t, rec->_active);
  uint64_t m = rec->_active;
  while (m) {
    int i = __builtin_ctzll(m);
    m &= m - 1;
    slot *s = &slots[i];
    uint64_t le = atomic_load(&s->live_epoch);
    if (le == 0 || le > rec->_epoch) {
      rec->_active &= ~(1ull << i); /* removed: no exit for it either */
      continue;
    }
    call_slot(s, rec, enter);
  }
  callbacks_leave(t, saved);
}

/* run_callbacks for a record that one observer sees (the common case: the trace alone),
 * without the loop; other records go there. The loop stays out of line (run_callbacks), so
 * that begin and end save two registers around the callback instead of six. As in the
 * loop, the slot is checked after the hazard is published, never before: a remover that
 * finds no hazard may free what the callback uses (a trace closing at exit finishes the
 * thread states), so a check made before could let the callback run on it. */
static inline ETR__ALWAYS_INLINE void callbacks(etr__thread *t, etr_record *rec, bool enter) {
  uint64_t mask = rec->_active;
  if (mask & (mask - 1)) {
    run_callbacks(t, rec, enter); /* (several observers) */
    return;
  }
  slot *s = &slots[__builtin_ctzll(mask)];
  BEFORE_HAZARD(rec);
  uint64_t saved = callbacks_enter(t, mask);
  uint64_t le = atomic_load(&s->live_epoch);
  if (le == 0 || le > rec->_epoch)
    rec->_active = 0; /* removed: no exit for it either */
  else
    call_slot(s, rec, enter);
  callbacks_leave(t, saved);
}

void etr__record_begin(etr_record *rec) {
  if (!rec) return;
  etr__thread *t = etr__thread_self();
  if (!t) return;
  if (rec->_state != 1) {
    bump(&t->n_begins_repeated);
    return;
  }
  rec->_state = 2;
  t->begin_ra = (uintptr_t)__builtin_return_address(0);
  callbacks(t, rec, true);
}

_Atomic uint64_t etr__ends_cross_thread;

/* Ends a begun record in `state`: 3 ended, 4 ended failed (etr_record_failed() tells the
 * exit callbacks). */
static void record_end(etr_record *rec, uint32_t state) {
  if (!rec) return;
  etr__thread *t = etr__thread_self();
  if (!t) return;
  if (rec->_state != 2) {
    bump(&t->n_ends_without_begin);
    rec->_state = 3;
    return;
  }
  /* Ended on another thread than it began on (misuse): ignored, counted. No observer sees
   * it (their callbacks run on the recording thread), and the record stays begun, so that
   * its end on its own thread still ends it. */
  if (rec->_tid != (uint32_t)t->tid) {
    atomic_fetch_add_explicit(&etr__ends_cross_thread, 1, memory_order_relaxed);
    return;
  }
  rec->_state = state;
  if (rec->_active) callbacks(t, rec, false);
}

void etr__record_end(etr_record *rec) { record_end(rec, 3); }
void etr__record_end_failed(etr_record *rec) { record_end(rec, 4); }

/* ---- fork ---- */

/* Same order as everywhere else: the trace's locks (etr_trace_open holds them while it adds
 * its observer), then reg_lock, then threads_lock. */
/* The forking thread holds the registry's and the trace's locks from prepare to parent or
 * child: its records meanwhile are not observed (etr__quiet_enter), and a thread without a
 * state yet makes none (as while one is being made: threads_lock is held). */
static void quiet_for_fork(etr__thread *t, bool on) {
  if (!t)
    tls_making = on;
  else if (on)
    etr__quiet_enter(t);
  else
    etr__quiet_leave(t);
}

static void fork_prepare(void) {
  quiet_for_fork(etr__tls_self, true);
  const etr__registry_hooks *h = hooks();
  if (h && h->before_fork) h->before_fork();
  pthread_mutex_lock(&reg_lock);
  pthread_mutex_lock(&threads_lock);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&threads_lock);
  const etr__registry_hooks *h = hooks();
  if (h && h->after_fork_parent) h->after_fork_parent();
  pthread_mutex_unlock(&reg_lock);
  quiet_for_fork(etr__tls_self, false);
}

static void fork_child(void) {
  /* Only the forking thread exists now: forget the others (their memory is the parent's
   * business) so that nobody waits on their hazards. */
  etr__thread *self = etr__tls_self;
  etr__thread *t = threads_head;
  while (t) {
    etr__thread *next = t->next;
    if (t != self) {
      unlink_thread(t);
      free(t);
    }
    t = next;
  }
  pthread_mutex_unlock(&threads_lock);
  const etr__registry_hooks *h = hooks();
  if (h && h->after_fork_child) h->after_fork_child();
  pthread_mutex_unlock(&reg_lock);
  quiet_for_fork(self, false);
}
