/* Registry internals shared with the trace observer: per-thread state and hazards.
 *
 * Every thread that touches etr gets one etr__thread, linked in a global list, freed at
 * thread exit. Its hazard words say what shared state the thread is using right now, so
 * that removers (observer removal, trace close) can wait until nobody uses it.
 */
#ifndef ETR_OBSERVER_REGISTRY_H
#define ETR_OBSERVER_REGISTRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "etr/common.h"

typedef struct etr__thread etr__thread;

#define ETR__THREAD_NAME_MAX 64 /* bytes of a thread name kept, NUL included */

struct etr__thread {
  _Atomic uint64_t hazard_slots; /* bit i: inside a callback of observer slot i */
  _Atomic uint64_t hazard_ids;   /* nonzero: inside an object-id map operation */
  uint32_t in_callback;          /* depth of callbacks on this thread */
  uint64_t tid;                  /* logical id, 1, 2, ... */
  uint64_t rng;                  /* sampling state */
  uint64_t rf_next, rf_end;      /* block of record handles */
  /* The registry's decision for this thread at (dec_epoch, dec_mask): the slots that observe
   * every record (dec_active, their needs in dec_needs) and those that decide per record
   * (dec_per_record: a scope filter, sampling, another thread's owner). Recomputed when the
   * epoch or the enabled mask changes; dec_epoch 0 never matches. */
  uint64_t dec_epoch, dec_mask, dec_active, dec_per_record;
  uint32_t dec_needs;
  /* Per-thread counters: written by the owner only, read by stats. */
  _Atomic uint64_t n_observed, n_ends_without_begin, n_begins_repeated, n_in_callbacks;
  /* State an observer module keeps for this thread (the trace observer's, through the hooks
   * below), valid while trace_serial matches; the registry only clears it. */
  void *trace_state;
  uint64_t trace_serial;
  /* Return address of the runtime's call to etr__record_begin: tracebacks captured in an
   * enter callback start at this frame (etr's own frames above it are dropped). */
  uintptr_t begin_ra;
  /* etr_thread_set_name: written by the owner; read by the owner when it writes its thread
   * node (the trace observer copies it into the thread event). */
  char name[ETR__THREAD_NAME_MAX];
  /* Nonzero while the thread waits inside etr for the writer (a full queue): a handler of
   * the host's signals that interrupts that wait and calls etr's control functions (close,
   * flush, dump, disable) gets ETR_EBUSY instead of deadlocking on the wait it interrupted. */
  volatile int waiting;
  uint8_t exit_rounds; /* rounds of key destructors seen (etr__key_keep) */
  etr__thread *prev, *next;
};

/* The calling thread's state, created on first use; NULL during/after thread exit, at
 * shutdown, or if memory is exhausted. (Inline: every record reads it several times.) */
extern _Thread_local etr__thread *etr__tls_self __attribute__((tls_model("initial-exec")));
etr__thread *etr__thread_self_slow(void);
static inline etr__thread *etr__thread_self(void) {
  etr__thread *t = etr__tls_self;
  return ETR__LIKELY(t != NULL) ? t : etr__thread_self_slow();
}

/* Whether the calling thread is inside etr's wait for the writer (etr__thread.waiting): a
 * signal handler interrupted it. */
static inline bool etr__thread_waiting(void) {
  etr__thread *t = etr__tls_self;
  return t && t->waiting;
}

/* Publish a hazard word before reading the state it protects (Dekker with the waiters
 * below, which store first, then wait). */
extern bool etr__use_membarrier;
static inline void etr__hazard_publish(_Atomic uint64_t *word, uint64_t v) {
  if (etr__use_membarrier) {
    atomic_store_explicit(word, v, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst); /* the CPU fence is the waiter's membarrier */
  } else {
    atomic_store(word, v);
  }
}

/* Around a call of the host into etr that takes a lock the recording path also takes (an id
 * map's shard, a trace's chunk queue or thread list, the registry's at fork): records made
 * meanwhile on the calling thread, by a handler of the host's signals that interrupted the
 * call, are not observed (counted as made inside callbacks), so that recording never waits
 * for a lock its own thread holds. The fences keep the count's change where it is written
 * (the handler runs on this thread). */
static inline void etr__quiet_enter(etr__thread *t) {
  t->in_callback++;
  atomic_signal_fence(memory_order_seq_cst);
}
static inline void etr__quiet_leave(etr__thread *t) {
  atomic_signal_fence(memory_order_seq_cst);
  t->in_callback--;
}

/* The host's calls into etr that take a lock or allocate (open, close, enable, disable,
 * set_traceback, stats, intern, the observer and dist calls) begin with ETR__QUIET_CALL():
 * the calling thread is quiet (above) until the call returns, whatever path it returns by,
 * so that a signal handler that records while it interrupted one never waits for a lock or
 * for malloc's lock its own thread holds. */
static inline etr__thread *etr__quiet_self(void) {
  etr__thread *t = etr__thread_self();
  if (t) etr__quiet_enter(t);
  return t;
}
static inline void etr__quiet_scope_end(etr__thread **t) {
  if (*t) etr__quiet_leave(*t);
}
#define ETR__QUIET_CALL()                                                            \
  etr__thread *etr__quiet_t __attribute__((cleanup(etr__quiet_scope_end), unused)) = \
      etr__quiet_self()

/* Wait until no thread other than the caller has any of `mask` in hazard_slots. */
void etr__wait_slots(uint64_t mask);
/* Wait until no thread other than the caller is inside an object-id map operation. */
void etr__wait_ids(void);

/* In a forked child, with the registry lock held: forget an observer without waiting. */
void etr__observer_drop_in_child(uint64_t id);

/* Events of the registry's threads and of fork that an observer module needs (the trace
 * observer sets them when its first trace opens): the registry calls them and knows nothing
 * else of that module. Any member may be NULL. */
typedef struct etr__registry_hooks {
  void (*thread_exit)(etr__thread *self); /* a thread exits, before its state is freed */
  void (*before_fork)(void);              /* before the registry takes its locks */
  void (*after_fork_parent)(void);        /* with the registry lock still held */
  void (*after_fork_child)(void);         /* single-threaded, the registry reset */
} etr__registry_hooks;
/* Install hooks (static storage; replaces the previous ones). Any thread. */
void etr__registry_set_hooks(const etr__registry_hooks *hooks);

/* Call fn, once, from the next record made while no observer takes it, before that record
 * is decided on: fn may add an observer, which then observes the record. Until then every
 * record site calls into the registry (etr__observing stays set), so arm it only where
 * nothing else observes (a forked child, env.c). From a fork child handler, or from any
 * thread while no observer is being added or removed (it sets etr__observing unlocked). */
void etr__registry_at_first_record(void (*fn)(void));

/* Ends called on another thread than their begin, since the process started (misuse:
 * ignored by the registry; a trace reports those made while it was open). */
extern _Atomic uint64_t etr__ends_cross_thread;

/* The thread key and the fork handlers, once (also done at load). */
void etr__registry_init(void);

#endif
