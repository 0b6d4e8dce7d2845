/* The recording clock's calibration (clock.h says what it is for). */
#include "observer/clock.h"
#include "observer/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Atomic uint64_t etr__clock_gen;
etr__clock_map etr__clock_maps[ETR__CLOCK_SLOTS];

#define FIRST_AFTER_NS 20000000LL /* first mapping: 20 ms after the first reading */
#define ADJUST_EVERY_NS 1000000000LL
#define HORIZON_NS 1000000000LL /* an offset is steered away over this time */
#define READ_MAX_TICKS 2000u    /* a reading whose clock_gettime took longer is retried */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_state;   /* 0 not decided, 1 counter usable, -1 not usable */
static uint64_t g_anchor_tsc; /* the first reading (lock held) */
static int64_t g_anchor_ns;
static _Atomic uint64_t g_due_tsc; /* counter value from which a tick does something */

#if ETR__HAVE_TSC
/* Whether the kernel keeps time with the counter (it then checked that it is invariant and
 * synchronised across CPUs). */
static bool kernel_uses_tsc(void) {
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
  if (!f) return false;
  char buf[32] = {0};
  bool yes = fgets(buf, sizeof buf, f) && strncmp(buf, "tsc\n", 4) == 0;
  fclose(f);
  return yes;
}

/* A (counter, CLOCK_MONOTONIC) pair: the closest of 8 tries (the counter midway between
 * its readings before and after clock_gettime), false when every try was slow (preempted
 * between the reads). */
static bool reading(uint64_t *tsc, int64_t *ns) {
  uint64_t best = UINT64_MAX;
  *tsc = 0;
  *ns = 0;
  for (int i = 0; i < 8; i++) {
    uint64_t t1 = __rdtsc();
    int64_t n = etr__clock_mono_ns();
    uint64_t t2 = __rdtsc();
    if (t2 > t1 && t2 - t1 < READ_MAX_TICKS && t2 - t1 < best) {
      best = t2 - t1;
      *tsc = t1 + (t2 - t1) / 2;
      *ns = n;
    }
  }
  return best != UINT64_MAX;
}
#endif

void etr__clock_adjust(uint64_t tsc0, int64_t ns0, uint64_t mult, uint64_t tsc, int64_t true_ns,
                       uint64_t rate, int64_t horizon, uint64_t *out_tsc0, int64_t *out_ns0,
                       uint64_t *out_mult) {
  int64_t at = etr__clock_apply(tsc, tsc0, ns0, mult);
  int64_t off = true_ns - at;
  *out_tsc0 = tsc;
  *out_mult = rate;
  if (off > horizon / 2 || off < -horizon / 2) { /* a jump: take the clock, never go back */
    *out_ns0 = true_ns > at ? true_ns : at;
    return;
  }
  *out_ns0 = at; /* continuous */
  /* slope: rate * (horizon + off) / horizon, so that the line meets true time + horizon */
  double m = (double)rate * (double)(horizon + off) / (double)horizon;
  *out_mult = m > 0 && m < 1.8e19 ? (uint64_t)m : rate;
}

/* Publish a mapping (lock held). */
static void publish(uint64_t tsc0, int64_t ns0, uint64_t mult) {
  uint64_t g = atomic_load_explicit(&etr__clock_gen, memory_order_relaxed) + 1;
  etr__clock_map *m = &etr__clock_maps[g % ETR__CLOCK_SLOTS];
  atomic_store_explicit(&m->tsc0, tsc0, memory_order_release);
  atomic_store_explicit(&m->ns0, ns0, memory_order_release);
  atomic_store_explicit(&m->mult, mult, memory_order_release);
  atomic_store_explicit(&etr__clock_gen, g, memory_order_release);
}

void etr__clock_start(void) {
#if ETR__HAVE_TSC
  if (atomic_load_explicit(&g_state, memory_order_acquire) != 0) return;
  /* (trylock: a child forked while another thread held the lock must not wait for ever;
   * it keeps clock_gettime, and a later start tries again) */
  if (pthread_mutex_trylock(&g_lock) != 0) return;
  if (atomic_load_explicit(&g_state, memory_order_relaxed) == 0) {
    bool off = !etr__env_switch("ETR_TSC", true);
    int state = -1;
    if (!off && kernel_uses_tsc() && reading(&g_anchor_tsc, &g_anchor_ns)) {
      state = 1;
      /* (a due time in ticks before the rate is known: at least 1 ms at up to 10 GHz) */
      atomic_store_explicit(&g_due_tsc, g_anchor_tsc + 1000000u, memory_order_relaxed);
    }
    atomic_store_explicit(&g_state, state, memory_order_release);
  }
  pthread_mutex_unlock(&g_lock);
#endif
}

void etr__clock_tick(void) {
#if ETR__HAVE_TSC
  if (atomic_load_explicit(&g_state, memory_order_acquire) != 1) return;
  if (__rdtsc() < atomic_load_explicit(&g_due_tsc, memory_order_relaxed)) return;
  if (pthread_mutex_trylock(&g_lock) != 0) return; /* another thread is at it */
  uint64_t tsc = 0;
  int64_t ns = 0;
  if (reading(&tsc, &ns) && tsc > g_anchor_tsc) {
    uint64_t gen = atomic_load_explicit(&etr__clock_gen, memory_order_relaxed);
    int64_t span = ns - g_anchor_ns;
    if (gen == 0 && span < FIRST_AFTER_NS) { /* not yet: the rate would be too rough */
      atomic_store_explicit(&g_due_tsc, tsc + (tsc - g_anchor_tsc), memory_order_relaxed);
    } else if (span > 0) {
      uint64_t ticks = tsc - g_anchor_tsc;
      /* (span < 2^32 ns until 4 s after the first reading; then the rate's scale is kept
       * by dividing in two steps) */
      uint64_t rate = span < ((int64_t)1 << 31)
                          ? ((uint64_t)span << 32) / ticks
                          : (uint64_t)((double)span / (double)ticks * 4294967296.0);
      uint64_t ticks_per_s = (uint64_t)((double)ticks * 1e9 / (double)span);
      if (gen == 0) {
        publish(tsc, ns, rate);
      } else {
        const etr__clock_map *m = &etr__clock_maps[gen % ETR__CLOCK_SLOTS];
        uint64_t t0, mult;
        int64_t n0;
        etr__clock_adjust(atomic_load_explicit(&m->tsc0, memory_order_relaxed),
                          atomic_load_explicit(&m->ns0, memory_order_relaxed),
                          atomic_load_explicit(&m->mult, memory_order_relaxed), tsc, ns, rate,
                          HORIZON_NS, &t0, &n0, &mult);
        publish(t0, n0, mult);
      }
      atomic_store_explicit(&g_due_tsc, tsc + ticks_per_s, memory_order_relaxed);
    }
  }
  pthread_mutex_unlock(&g_lock);
#endif
}

bool etr__clock_uses_tsc(void) {
  return atomic_load_explicit(&etr__clock_gen, memory_order_acquire) != 0;
}
