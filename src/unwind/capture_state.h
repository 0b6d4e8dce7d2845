/* Internal to src/unwind/: the native capture's per-thread state and counters
 * (capture_state.c), shared by the walk (capture.c).
 *
 * Counters are per thread (plain relaxed stores by the owner), summed on demand through
 * the list of threads; the counts of exited threads are folded into a global total.
 */
#ifndef ETR_UNWIND_CAPTURE_STATE_H
#define ETR_UNWIND_CAPTURE_STATE_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum {
  C_CAPTURES,
  C_TRUNCATED,
  C_FAILURES,
  C_FRAMES,
  C_HITS,
  C_MISSES,
  C_FALLBACKS,
  C_FC_HITS,
  C_FC_PARTIAL,
  C_FC_MISSES,
  C_REUSED,
  C_WALKED,
  C_COUNT
};

enum {
  SKIP_KEEP = 16, /* skipped return addresses kept for aligning libunwind's frames */
  FB_MAX = 512,   /* frames asked from libunwind */
  FC_MAX = 256    /* frames kept by the per-thread frame cache */
};

/* The frames of a thread's previous capture, innermost first: each frame's registers
 * (sp, bp), key and rule, as the walk found them. */
typedef struct fent {
  uintptr_t sp, key, bp;
  uint32_t rule;
} fent;
typedef struct fcache {
  uint64_t gen; /* rule-cache generation of the rules */
  uint32_t n;
  /* f[ulo, uhi) holds every frame whose rule has R_MAY_UNLOAD (empty: ulo >= uhi), so that
   * a capture that reuses frames from here tests them only when there are such frames
   * (walk_stack). (n and these share the 8 bytes n alone had: f[] keeps its place, which
   * the walk's speed depends on.) */
  uint16_t ulo, uhi;
  fent f[FC_MAX];
} fcache;
_Static_assert(FC_MAX <= UINT16_MAX, "ulo and uhi index f[]");

typedef struct tstate {
  struct tstate *next, *prev;
  _Atomic uint64_t c[C_COUNT];
  volatile sig_atomic_t in_capture;
  bool fc_off;         /* frame cache disabled for this thread (benchmarks, tests) */
  uint8_t exit_rounds; /* rounds of key destructors seen (etr__key_keep) */
  uint32_t ncap;
  uintptr_t rlo[2], rhi[2]; /* stack mappings seen by this thread (most recent first) */
  unsigned fc_cur;          /* fc[fc_cur] holds the previous capture */
  fcache fc[2];
  uintptr_t fbuf[FB_MAX];
  /* The mapping of the last address outside every module a walk of this thread stopped at
   * (capture.c, jit_frame): [jlo, jhi), executable or not (jx); jnone: the last such address
   * that no mapping holds. */
  uintptr_t jlo, jhi, jnone;
  bool jx;
} tstate;

/* The calling thread's state (made on its first capture), or NULL (memory exhausted, or
 * the thread's exit destructors have destroyed it). initial-exec TLS: no __tls_get_addr
 * call on the hot path (a few bytes of static TLS, which glibc reserves room for even when
 * libetr.so is loaded with dlopen). */
extern _Thread_local tstate *etr__cap_tls __attribute__((tls_model("initial-exec")));
tstate *etr__cap_tstate_make(void);

static inline tstate *tstate_get(void) {
  tstate *ts = etr__cap_tls;
  return __builtin_expect(ts != NULL, 1) ? ts : etr__cap_tstate_make();
}

static inline void cadd(tstate *ts, int i, uint64_t v) {
  if (v)
    atomic_store_explicit(&ts->c[i], atomic_load_explicit(&ts->c[i], memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/* Rule-cache resets (capture.c), counted with the rest (etr__unwind_stats_add). */
extern _Atomic uint64_t etr__cap_resets;

#endif
