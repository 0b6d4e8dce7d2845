/* The recording clock: CLOCK_MONOTONIC in ns, read from the CPU's time-stamp counter where
 * the kernel itself keeps time with it (clocksource "tsc": invariant and synchronised
 * across CPUs), else from clock_gettime.
 *
 * Reading the counter and scaling it costs about 12 ns here against 32 for clock_gettime,
 * twice per op. The scale comes from pairs of (counter, CLOCK_MONOTONIC) readings: the
 * first mapping 20 ms after etr__clock_start, then one adjustment a second at most,
 * made by whichever thread calls etr__clock_tick. An adjustment keeps the mapping
 * continuous (the new line starts where the old one is) and steers it back to
 * CLOCK_MONOTONIC over the next second, so a thread's timestamps never go back and stay
 * within a few µs of CLOCK_MONOTONIC. ETR_TSC=0 in the environment keeps clock_gettime.
 */
#ifndef ETR_OBSERVER_CLOCK_H
#define ETR_OBSERVER_CLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <x86intrin.h>
#define ETR__HAVE_TSC 1
#else
#define ETR__HAVE_TSC 0
#endif

/* A mapping from counter to ns: ns = ns0 + (tsc - tsc0) * mult / 2^32. Published in one of
 * ETR__CLOCK_SLOTS slots; the index only grows (0: no mapping yet). */
#define ETR__CLOCK_SLOTS 64u
typedef struct etr__clock_map {
  _Atomic uint64_t tsc0;
  _Atomic int64_t ns0;
  _Atomic uint64_t mult;
} etr__clock_map;
extern _Atomic uint64_t etr__clock_gen;
extern etr__clock_map etr__clock_maps[ETR__CLOCK_SLOTS];

static inline int64_t etr__clock_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* (a * b) >> 32, without overflow for any a and b whose result fits in 64 bits. */
static inline uint64_t etr__mul_shr32(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
  return (uint64_t)(((unsigned __int128)a * b) >> 32);
#else /* (a * b) / 2^32 from the 32-bit halves: exact, the low product's carry included */
  uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
  return ((ah * bh) << 32) + ah * bl + al * bh + ((al * bl) >> 32);
#endif
}

/* ns of counter value tsc under mapping (tsc0, ns0, mult). */
static inline int64_t etr__clock_apply(uint64_t tsc, uint64_t tsc0, int64_t ns0, uint64_t mult) {
  if (tsc >= tsc0) return ns0 + (int64_t)etr__mul_shr32(tsc - tsc0, mult);
  return ns0 - (int64_t)etr__mul_shr32(tsc0 - tsc, mult);
}

/* CLOCK_MONOTONIC ns for a recorded timestamp. Async-signal-safe. */
static inline int64_t etr__clock_now(void) {
#if ETR__HAVE_TSC
  for (;;) {
    uint64_t g = atomic_load_explicit(&etr__clock_gen, memory_order_acquire);
    if (g == 0) break;
    const etr__clock_map *m = &etr__clock_maps[g % ETR__CLOCK_SLOTS];
    /* (acquire loads: the second look at the generation comes after them) */
    uint64_t tsc0 = atomic_load_explicit(&m->tsc0, memory_order_acquire);
    int64_t ns0 = atomic_load_explicit(&m->ns0, memory_order_acquire);
    uint64_t mult = atomic_load_explicit(&m->mult, memory_order_acquire);
    uint64_t tsc = __rdtsc();
    /* A slot is reused only after ETR__CLOCK_SLOTS - 1 later mappings (a second apart). */
    if (atomic_load_explicit(&etr__clock_gen, memory_order_acquire) - g < ETR__CLOCK_SLOTS - 1)
      return etr__clock_apply(tsc, tsc0, ns0, mult);
  }
#endif
  return etr__clock_mono_ns();
}

/* At trace open: decides whether the counter can be used and takes the first reading. */
void etr__clock_start(void);
/* Makes or adjusts the mapping when it is due (cheap otherwise). Any thread, not from a
 * signal handler. */
void etr__clock_tick(void);
/* Whether timestamps come from the counter now (for tests and diagnostics). */
bool etr__clock_uses_tsc(void);

/* The adjustment (exposed for unit tests): given the current mapping, a reading
 * (tsc, true_ns) and the counter's long-term rate (ns per tick, scaled by 2^32), the next
 * mapping: it starts at the current mapping's value at tsc and reaches true_ns + horizon
 * after `horizon` ns (offsets beyond horizon / 2 are corrected at once, never backwards). */
void etr__clock_adjust(uint64_t tsc0, int64_t ns0, uint64_t mult, uint64_t tsc, int64_t true_ns,
                       uint64_t rate, int64_t horizon, uint64_t *out_tsc0, int64_t *out_ns0,
                       uint64_t *out_mult);

#endif
