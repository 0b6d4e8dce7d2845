/* The native capture's per-thread state and counters (capture_state.h). */
#include "unwind/capture_state.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "observer/internal.h"
#include "unwind/unwind.h"

static pthread_mutex_t g_threads_lock = PTHREAD_MUTEX_INITIALIZER;
static tstate *g_threads;
static uint64_t g_dead[C_COUNT];
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static bool g_key_ok;
_Thread_local tstate *etr__cap_tls __attribute__((tls_model("initial-exec")));
static _Thread_local bool t_dead __attribute__((tls_model("initial-exec")));
_Atomic uint64_t etr__cap_resets;

static pthread_key_t g_key;

static void tstate_destroy(void *p) {
  tstate *ts = p;
  /* (kept like the registry's: a host's destructor that records in a later round gets its
   * traceback, registry.c thread_exit) */
  if (etr__key_keep(g_key, ts, &ts->exit_rounds)) return;
  pthread_mutex_lock(&g_threads_lock);
  for (int i = 0; i < C_COUNT; i++)
    g_dead[i] += atomic_load_explicit(&ts->c[i], memory_order_relaxed);
  if (ts->prev)
    ts->prev->next = ts->next;
  else
    g_threads = ts->next;
  if (ts->next) ts->next->prev = ts->prev;
  pthread_mutex_unlock(&g_threads_lock);
  etr__cap_tls = NULL;
  t_dead = true;
  free(ts);
}

static void key_init(void) { g_key_ok = pthread_key_create(&g_key, tstate_destroy) == 0; }

tstate *etr__cap_tstate_make(void) {
  tstate *ts = etr__cap_tls;
  if (ts != NULL) return ts;
  if (t_dead) return NULL; /* thread-exit destructors: no-op */
  pthread_once(&g_key_once, key_init);
  if (!g_key_ok) return NULL;
  ts = calloc(1, sizeof *ts);
  if (!ts) return NULL;
  if (pthread_setspecific(g_key, ts) != 0) {
    free(ts);
    return NULL;
  }
  pthread_mutex_lock(&g_threads_lock);
  ts->next = g_threads;
  if (g_threads) g_threads->prev = ts;
  g_threads = ts;
  pthread_mutex_unlock(&g_threads_lock);
  etr__cap_tls = ts;
  return ts;
}

void etr__unwind_stats_add(etr_traceback_stats *out) {
  uint64_t sum[C_COUNT];
  pthread_mutex_lock(&g_threads_lock);
  memcpy(sum, g_dead, sizeof sum);
  for (tstate *ts = g_threads; ts; ts = ts->next)
    for (int i = 0; i < C_COUNT; i++)
      sum[i] += atomic_load_explicit(&ts->c[i], memory_order_relaxed);
  pthread_mutex_unlock(&g_threads_lock);
  out->captures += sum[C_CAPTURES];
  out->captures_truncated += sum[C_TRUNCATED];
  out->capture_failures += sum[C_FAILURES];
  out->frames_captured += sum[C_FRAMES];
  out->unwind_cache_hits += sum[C_HITS];
  out->unwind_cache_misses += sum[C_MISSES];
  out->unwind_cache_resets += atomic_load_explicit(&etr__cap_resets, memory_order_relaxed);
  out->unwind_fallbacks += sum[C_FALLBACKS];
  out->frame_cache_hits += sum[C_FC_HITS];
  out->frame_cache_partial_hits += sum[C_FC_PARTIAL];
  out->frame_cache_misses += sum[C_FC_MISSES];
  out->frames_reused += sum[C_REUSED];
  out->frames_walked += sum[C_WALKED];
}
