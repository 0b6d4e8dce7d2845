/* Native stack capture: a walk with cached per-address unwind rules (x86_64), libunwind
 * for the frames whose rule does not reduce (see cfi.h).
 *
 * Hot path: for each frame, one lookup in a global rule cache keyed by the return address
 * (open addressing, each entry one 64-bit atomic word "address << 17 | rule", so readers
 * need no lock and never see a torn entry), then two loads from the stack. Every CFA is
 * checked against the bounds of the stack it lies on (the mapping that holds the stack
 * pointer, read once per thread from /proc/self/maps with plain system calls, so it works
 * on any stack: threads, the main thread, sigaltstack, fibers), and every return address
 * must lie in the executable part of a loaded module (checked when its rule is computed;
 * a cache hit implies it), so a corrupt frame ends the walk instead of faulting.
 *
 * libunwind is never linked: libunwind.so.8 is opened privately (RTLD_LOCAL) on the first
 * frame that needs it, and only unw_backtrace is used; its frames are spliced after ours.
 * A capture that interrupts a capture of the same thread (a signal handler) uses our
 * walker only and refreshes nothing.
 *
 * A library closed and another one opened at the same addresses changes no address, so
 * neither cache sees it: both would go on with the old library's rules and module map. A
 * rule of an address in a module that may be unloaded (R_MAY_UNLOAD: any module but the
 * program, what it needs, libetr and what libetr needs; modules.c) makes the capture read
 * the loader's counters after its walk and walk again with the new map when they moved
 * (capture_again): the first capture after a reload is right. A capture whose frames all
 * lie in permanent modules reads nothing more; one through a library opened with dlopen
 * reads the counters (dl_iterate_phdr: the loader's lock, about 8 ns).
 *
 * The per-thread state (the frame cache, stack bounds, counters) is capture_state.c's.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "unwind/capture_state.h"
#include "unwind/cfi.h"

#define ETR_NOINLINE __attribute__((noinline))
#define ETR_NO_SANITIZE_MEM __attribute__((no_sanitize_address, no_sanitize_thread))
/* walk_stack has two callers, the capture and its rare second walk (capture_again): inlined
 * into both, so that the capture's own copy is the one it had alone. Not under a sanitizer,
 * which does not inline a function it does not instrument into one it does. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ETR_WALK_INLINE
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ETR_WALK_INLINE
#endif
#endif
#ifndef ETR_WALK_INLINE
#define ETR_WALK_INLINE __attribute__((always_inline)) inline
#endif

/* ---- libunwind, opened privately on first need ---- */

typedef int (*unw_backtrace_fn)(void **buffer, int size);
static pthread_once_t g_unw_once = PTHREAD_ONCE_INIT;
static _Atomic(unw_backtrace_fn) g_unw_backtrace;

static void unw_init(void) {
  void *h = dlopen("libunwind.so.8", RTLD_LAZY | RTLD_LOCAL);
  if (!h) return;
  unw_backtrace_fn f;
  void *sym = dlsym(h, "unw_backtrace");
  memcpy(&f, &sym, sizeof f);
  atomic_store_explicit(&g_unw_backtrace, f, memory_order_release);
}

static unw_backtrace_fn unw_get(void) {
  pthread_once(&g_unw_once, unw_init);
  return atomic_load_explicit(&g_unw_backtrace, memory_order_acquire);
}

/* libunwind's view of the stack of this thread, starting around our caller. */
static ETR_NOINLINE int unw_fill(unw_backtrace_fn f, uintptr_t *buf, int n) {
  return f((void **)buf, n);
}

#if defined(__x86_64__)

/* ---- rule cache ----
 * entry = key << 17 | rule, key = return address (or exact ip + 1) < 2^47.
 * rule bits: 0-1 kind (0 simple, 1 end, 2 signal, 3 fallback), 2 CFA from rbp,
 * 3-12 CFA offset / 8, 13-15 k with the caller's rbp at CFA - 8k (0: unchanged; a prologue
 * saves at most 6 registers before the frame, so k <= 7), 16 the address is in a module
 * that may be unloaded (R_MAY_UNLOAD, see etr__unwind_capture). */
enum {
  RC_BITS = 13,
  RC_SIZE = 1 << RC_BITS,
  RC_PROBE = 4,
  K_SIMPLE = 0,
  K_END = 1,
  K_SIGNAL = 2,
  K_FALLBACK = 3
};
#define RC_KEY_SHIFT 17
#define R_MAY_UNLOAD (1u << 16)
#define R_K(r) (((r) >> 13) & 7)
#define RC_MAX_KEY (((uint64_t)1 << 47) - 1)

static _Atomic uint64_t g_rc[RC_SIZE];
static _Atomic uint64_t g_rc_gen; /* module-map generation the cache belongs to */

static inline size_t rc_slot(uintptr_t key) {
  return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> (64 - RC_BITS));
}

static inline uint32_t rc_lookup(uintptr_t key) {
  size_t h = rc_slot(key);
  for (size_t i = 0; i < RC_PROBE; i++) {
    uint64_t e = atomic_load_explicit(&g_rc[(h + i) & (RC_SIZE - 1)], memory_order_relaxed);
    if ((e >> RC_KEY_SHIFT) == key) return (uint32_t)(e & 0x1ffff) | 0x80000000u;
    if (e == 0) break;
  }
  return 0;
}

static void rc_insert(uintptr_t key, uint32_t rule) {
  uint64_t e = ((uint64_t)key << RC_KEY_SHIFT) | rule;
  size_t h = rc_slot(key);
  for (size_t i = 0; i < RC_PROBE; i++) {
    _Atomic uint64_t *s = &g_rc[(h + i) & (RC_SIZE - 1)];
    uint64_t old = atomic_load_explicit(s, memory_order_relaxed);
    if (old == 0 || (old >> RC_KEY_SHIFT) == key) {
      atomic_store_explicit(s, e, memory_order_relaxed);
      return;
    }
  }
  atomic_store_explicit(&g_rc[h], e, memory_order_relaxed); /* full: replace the home slot */
}

/* Make the cache belong to generation gen (one thread wins and clears it). */
static ETR_NOINLINE void rc_sync_slow(uint64_t gen) {
  uint64_t cur = atomic_load_explicit(&g_rc_gen, memory_order_acquire);
  while (cur < gen) {
    if (atomic_compare_exchange_weak_explicit(&g_rc_gen, &cur, gen, memory_order_acq_rel,
                                              memory_order_acquire)) {
      for (size_t i = 0; i < RC_SIZE; i++) atomic_store_explicit(&g_rc[i], 0, memory_order_relaxed);
      if (cur != 0) atomic_fetch_add_explicit(&etr__cap_resets, 1, memory_order_relaxed);
      return;
    }
  }
}

static inline void rc_sync(uint64_t gen) {
  if (__builtin_expect(atomic_load_explicit(&g_rc_gen, memory_order_acquire) != gen, 0))
    rc_sync_slow(gen);
}

static uint32_t encode_rule(const etr__cfi_rule *r) {
  switch (r->kind) {
    case ETR__CFI_END:
      return K_END;
    case ETR__CFI_SIGNAL:
      return K_SIGNAL;
    case ETR__CFI_SIMPLE:
      break;
    default:
      return K_FALLBACK;
  }
  if (r->cfa_off <= 0 || r->cfa_off > 1023 * 8 || (r->cfa_off & 7)) return K_FALLBACK;
  uint32_t k = 0;
  if (r->rbp_off != 0) {
    if (r->rbp_off > -16 || r->rbp_off < -7 * 8 || (r->rbp_off & 7)) return K_FALLBACK;
    k = (uint32_t)(-r->rbp_off / 8);
  }
  return K_SIMPLE | (r->cfa_rbp ? 4u : 0u) | ((uint32_t)(r->cfa_off / 8) << 3) | (k << 13);
}

/* Whether unwinding with rule r uses the frame's rbp (CFA from rbp, or rbp kept). */
static inline bool rule_reads_bp(uint32_t r) {
  return (r & 3) != K_SIMPLE || (r & 4) || R_K(r) == 0;
}

/* ---- stack bounds ---- */

/* Bounds of the stack that holds sp, cached per thread. */
static ETR_NOINLINE bool stack_bounds_slow(tstate *ts, uintptr_t sp, uintptr_t *lo, uintptr_t *hi,
                                           bool may_store) {
  for (int i = 1; i < 2; i++) {
    if (sp >= ts->rlo[i] && sp < ts->rhi[i]) {
      *lo = ts->rlo[i];
      *hi = ts->rhi[i];
      return true;
    }
  }
  if (!etr__maps_find(sp, lo, hi)) return false;
  if (!may_store) return true; /* a nested capture must not change what the outer one reads */
  ts->rlo[1] = ts->rlo[0];
  ts->rhi[1] = ts->rhi[0];
  ts->rlo[0] = *lo;
  ts->rhi[0] = *hi;
  return true;
}

static inline bool stack_bounds(tstate *ts, uintptr_t sp, uintptr_t *lo, uintptr_t *hi,
                                bool may_store) {
  if (__builtin_expect(sp >= ts->rlo[0] && sp < ts->rhi[0], 1)) {
    *lo = ts->rlo[0];
    *hi = ts->rhi[0];
    return true;
  }
  return stack_bounds_slow(ts, sp, lo, hi, may_store);
}

static ETR_NO_SANITIZE_MEM inline uintptr_t peek(uintptr_t a) {
  return *(const volatile uintptr_t *)a;
}

/* ---- the walk ---- */

typedef struct walk {
  tstate *ts;
  const etr__modmap *map;
  bool nested;
  bool map_changed; /* a rule miss found a newer map midway (etr__unwind_capture) */
  uint64_t hits, misses;
} walk;

/* The rule for key when the module map has no module for it although the loader has one
 * there: the map could not be brought up to date (refresh_sync gave up on a builder stuck
 * behind the loader's lock). glibc's _dl_find_object (lock-free) gives the object's
 * unwind tables; an FDE covering the address says it is code. Not cached (the rule cache
 * follows the map), and the capture walks again once the map has caught up
 * (capture_again); until then the frame is kept, not the walk cut there. 0 when the loader
 * has nothing there either. */
static uint32_t rule_unmapped(walk *w, uintptr_t key) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
  struct dl_find_object fo;
  if (_dl_find_object((void *)(key - 1), &fo) != 0 || !fo.dlfo_eh_frame) return 0;
  etr__cfi_rule cr;
  etr__cfi_find((uintptr_t)fo.dlfo_eh_frame, key - 1, &cr);
  if (cr.kind == ETR__CFI_NOFDE) return 0;
  w->map_changed = true;
  return encode_rule(&cr) | R_MAY_UNLOAD | 0x80000000u;
#else
  (void)w;
  (void)key;
  return 0;
#endif
}

/* The rule for key (an address after the instruction of interest) when it is not cached:
 * compute it and cache it. 0 when key is not in a known executable module. */
static ETR_NOINLINE uint32_t rule_miss(walk *w, uintptr_t key) {
  if (key - 1 >= RC_MAX_KEY) return 0;
  if (!w->nested) { /* a miss may mean new libraries: keep the map and cache current */
    const etr__modmap *m = etr__modmap_refresh_sync(); /* (never older than the loader) */
    if (m) {
      if (m != w->map) w->map_changed = true;
      w->map = m;
      rc_sync(m->gen);
    }
  }
  const etr__modent *m = etr__modmap_exec(w->map, key - 1);
  if (!m) return w->nested ? 0 : rule_unmapped(w, key);
  etr__cfi_rule cr;
  etr__cfi_find(m->eh_frame_hdr, key - 1, &cr);
  uint32_t rule = encode_rule(&cr) | (m->permanent ? 0 : R_MAY_UNLOAD);
  rc_insert(key, rule);
  w->misses++;
  return rule | 0x80000000u;
}

static inline uint32_t rule_for(walk *w, uintptr_t key) {
  uint32_t r = rc_lookup(key);
  if (__builtin_expect(r != 0, 1)) {
    w->hits++;
    return r;
  }
  return rule_miss(w, key);
}

/* Append libunwind's frames after the f return addresses found so far (kept in skipped[]
 * for the first min(f, skip, SKIP_KEEP) and in ips[] after skip). Returns the new count
 * of stored frames; *more tells whether frames were left over, *last is the last return
 * address libunwind gave (0 when its list ended with a zero one, which ends some stacks, or
 * filled its buffer: either way not a walk that stopped early). */
static size_t splice_libunwind(walk *w, const uintptr_t *skipped, size_t f, uintptr_t *ips,
                               size_t n, size_t max, size_t skip, size_t *added, bool *more,
                               uintptr_t *last) {
  *added = 0;
  *more = false;
  *last = 0;
  if (w->nested || f == 0) return n;
  unw_backtrace_fn fn = unw_get();
  if (!fn) return n;
  int m = unw_fill(fn, w->ts->fbuf, FB_MAX);
  if (m <= 0) return n;
  uintptr_t r0 = skip > 0 ? skipped[0] : ips[0];
  size_t d = 0;
  while (d < 8 && d < (size_t)m && w->ts->fbuf[d] != r0) d++;
  if (d == 8 || d + f > (size_t)m) return n;
  for (size_t i = 0; i < f; i++) { /* the frames must be the same ones */
    uintptr_t ours = i < skip ? (i < SKIP_KEEP ? skipped[i] : w->ts->fbuf[d + i]) : ips[i - skip];
    if (w->ts->fbuf[d + i] != ours) return n;
  }
  for (size_t j = d + f, i = f; j < (size_t)m; j++, i++) {
    uintptr_t ra = w->ts->fbuf[j];
    if (ra == 0) {
      *last = 0;
      break;
    }
    *last = m == FB_MAX ? 0 : ra;
    if (i >= skip) {
      if (n == max) {
        *more = true;
        break;
      }
      ips[n++] = ra;
    }
    (*added)++;
  }
  return n;
}

/* Whether ip (a return address - 1 for which no module has code) lies in an executable
 * mapping: code made at run time (a JIT), whose frame the walk keeps as its last one (it
 * cannot unwind through it; an address anywhere else is a corrupt frame). The thread keeps
 * the mapping it found last, executable or not, and the last address no mapping holds, so
 * a stack that keeps ending there reads /proc/self/maps once; a nested capture (a signal
 * handler) reads the maps without keeping anything (the outer one may be reading it). Cold:
 * only a walk that stops comes here. */
static ETR_NOINLINE __attribute__((cold)) bool jit_frame(tstate *ts, uintptr_t ip, bool nested) {
  if (!nested && ip >= ts->jlo && ip < ts->jhi) return ts->jx;
  if (!nested && ip == ts->jnone) return false;
  uintptr_t lo, hi;
  bool x;
  if (!etr__maps_find_any(ip, &lo, &hi, &x)) {
    if (!nested) ts->jnone = ip;
    return false;
  }
  if (!nested) {
    ts->jlo = lo;
    ts->jhi = hi;
    ts->jx = x;
  }
  return x;
}

typedef struct walk_out {
  uint64_t walked, reused, fallbacks;
  bool failed, truncated;
  bool recheck; /* a frame may lie in a module that may be unloaded (R_MAY_UNLOAD), or
                  comes from libunwind (not classified) */
  int fc;       /* frame cache: -1 not used, 0 miss, 1 partial hit, 2 hit */
} walk_out;

/* Walk from the frame (rip, sp, bp) of etr__unwind_capture itself. A frame is (key, sp,
 * bp): key = its return address (its ip + 1 for the innermost and interrupted frames), sp =
 * the CFA of the frame it called, bp its rbp.
 *
 * The per-thread frame cache holds the frames of the thread's previous capture. When a
 * frame equals one of them (same key, sp and bp; frames are matched by sp, which grows
 * outwards), its rule is reused, and the next frame is taken from the cache after checking
 * that the stack words the unwinding reads (the return-address slot, the saved-rbp slot)
 * still hold the cached values: the walk is a function of the registers and those words,
 * so the result is the one a full walk gives, but the loads no longer depend on each other
 * (no hash lookup, no CFA arithmetic on the critical path). */
static ETR_WALK_INLINE ETR_NO_SANITIZE_MEM size_t walk_stack(walk *w, uintptr_t rip, uintptr_t sp,
                                                             uintptr_t bp, uintptr_t *restrict ips,
                                                             size_t max, size_t skip, walk_out *o) {
  uintptr_t lo, hi;
  uintptr_t skipped[SKIP_KEEP];
  size_t n = 0, f = 0;
  if (!stack_bounds(w->ts, sp, &lo, &hi, !w->nested)) {
    o->failed = true;
    return 0;
  }
  /* frame cache: previous capture (read) and this one (written); not in nested captures.
   * This one's frames belong to the map the walk begins with: a rule miss that finds a new
   * map midway leaves the frames before it walked with the older rules. */
  uint64_t gen = w->map->gen;
  const fent *prev = NULL;
  fent *restrict cur = NULL;
  size_t pk = 0, pn = 0, cj = 0;
  const fcache *pc = NULL;
  fcache *curc = NULL;
  bool prev_unload = false; /* the previous capture holds such frames (fcache.ulo, uhi) */
  /* and then, where the frames taken from it went: prev[from, from + len) to
   * cur[to, to + len); more runs than this (or a full cache) and the frames are looked
   * through at the end */
  struct {
    size_t from, to, len;
  } runs[4];
  size_t nruns = 0;
  if (!w->nested && !w->ts->fc_off) {
    pc = &w->ts->fc[w->ts->fc_cur];
    curc = &w->ts->fc[w->ts->fc_cur ^ 1];
    prev = pc->f;
    cur = curc->f;
    pn = pc->gen == gen ? pc->n : 0;
    prev_unload = pc->uhi != 0;
  }
  size_t first_reuse = SIZE_MAX, walked_after = 0;
  uint64_t reused = 0, walked = 0; /* locals: o-> fields could alias ips[] */
  uint32_t rules = 0;              /* the rules used, or'ed: R_MAY_UNLOAD */
  uintptr_t key = rip + 1;
  for (;;) {
    /* the rule of frame (key, sp, bp) */
    uint32_t rule;
    while (pk < pn && prev[pk].sp < sp) pk++;
    /* bp must match only when the rule reads it (CFA from rbp, or rbp passed on as is) */
    bool hit = pk < pn && prev[pk].sp == sp && prev[pk].key == key &&
               (prev[pk].bp == bp || !rule_reads_bp(prev[pk].rule));
    if (hit) {
      rule = prev[pk++].rule;
      reused++;
      if (first_reuse == SIZE_MAX) first_reuse = f;
    } else {
      rule = rule_for(w, key);
      if (!rule) { /* not code we know: a corrupt frame, or JIT code (kept: the last frame) */
        if (f > 0 && f - 1 >= skip && n < max && jit_frame(w->ts, key - 1, w->nested))
          ips[n++] = key;
        o->failed = true;
        break;
      }
      walked++;
      if (first_reuse != SIZE_MAX) walked_after++;
    }
    rules |= rule;
    if (cur && cj < FC_MAX) {
      cur[cj].sp = sp;
      cur[cj].key = key;
      cur[cj].bp = bp;
      cur[cj++].rule = rule;
    }
    /* store the frame (the innermost one is etr__unwind_capture itself) */
    if (f > 0) {
      size_t i = f - 1;
      if (i >= skip) {
        ips[n++] = key;
        if (n == max) {
          o->truncated = (rule & 3) != K_END;
          break;
        }
      } else if (i < SKIP_KEEP) {
        skipped[i] = key;
      }
    }
    /* unwind it */
    uint32_t kind = rule & 3;
    if (hit && kind == K_SIMPLE && pk < pn && f >= skip) {
      /* Frames of the previous capture, as long as the words they were read from are
       * unchanged (all of them stored: f >= skip). */
      const fent *p = &prev[pk - 1], *end = prev + pn;
      size_t n0 = n;
      bool at_max = false;
      for (;;) {
        const fent *nx = p + 1;
        if (nx == end || nx->sp > hi) break;
        uintptr_t pk_ = R_K(p->rule);
        if (peek(nx->sp - 8) != nx->key || (pk_ ? peek(nx->sp - 8 * pk_) : p->bp) != nx->bp) break;
        p = nx;
        ips[n++] = p->key;
        if (cj < FC_MAX) cur[cj++] = *p;
        if (n == max) {
          at_max = true;
          break;
        }
        if ((p->rule & 3) != K_SIMPLE) break;
      }
      if (n != n0) {
        size_t moved = n - n0;
        reused += moved;
        f += moved;
        sp = p->sp;
        bp = p->bp;
        key = p->key;
        rule = p->rule;
        kind = rule & 3;
        pk = (size_t)(p - prev) + 1;
        if (__builtin_expect(prev_unload, 0)) {
          if (nruns < 4 && cj < FC_MAX) { /* (then all of them were copied) */
            runs[nruns].from = pk - moved;
            runs[nruns].to = cj - moved;
            runs[nruns].len = moved;
            nruns++;
          } else {
            nruns = 5;
          }
        }
        if (at_max) {
          o->truncated = kind != K_END;
          break;
        }
      }
    }
    uintptr_t k = R_K(rule);
    uintptr_t ra, nsp, nbp;
    if (__builtin_expect(kind == K_SIMPLE, 1)) {
      uintptr_t cfa = ((rule & 4) ? bp : sp) + (((rule >> 3) & 1023) << 3);
      if (cfa <= sp || cfa > hi || (cfa & 7) || cfa - 8 * k < sp) {
        o->failed = true;
        break;
      }
      ra = peek(cfa - 8);
      nbp = k ? peek(cfa - 8 * k) : bp;
      nsp = cfa;
    } else if (kind == K_END) {
      break;
    } else if (kind == K_SIGNAL) {
      /* sp points at the ucontext the kernel pushed; the interrupted frame's registers are
       * there, and its ip is exact (keyed ip + 1 like a return address) */
      const size_t greg0 = offsetof(ucontext_t, uc_mcontext.gregs);
      if (sp + greg0 + sizeof(greg_t) * NGREG > hi) {
        o->failed = true;
        break;
      }
      ra = peek(sp + greg0 + sizeof(greg_t) * REG_RIP) + 1;
      nsp = peek(sp + greg0 + sizeof(greg_t) * REG_RSP);
      nbp = peek(sp + greg0 + sizeof(greg_t) * REG_RBP);
      if ((nsp & 7) || !stack_bounds(w->ts, nsp, &lo, &hi, !w->nested)) {
        o->failed = true;
        break;
      }
      pk = pn; /* another stack: frames are no longer ordered by sp */
    } else {   /* K_FALLBACK: libunwind from here on */
      if (f == 0) {
        o->failed = true;
        break;
      }
      size_t added;
      bool more;
      uintptr_t last;
      n = splice_libunwind(w, skipped, f, ips, n, max, skip, &added, &more, &last);
      o->fallbacks += added;
      rules |= R_MAY_UNLOAD; /* (libunwind's frames are not classified) */
      /* libunwind also stops where it cannot go on (a frame without unwind information, a
       * bad rbp), without saying so: as for our own walk, only an outermost frame (return
       * address undefined: _start, clone3) ends a complete stack. */
      if (added == 0 || (!more && last != 0 && (rule_for(w, last) & 3) != K_END)) o->failed = true;
      o->truncated = more;
      break;
    }
    if (ra <= 1) break; /* a zero return address ends some stacks */
    f++;
    sp = nsp;
    bp = nbp;
    key = ra;
  }
  o->reused += reused;
  o->walked += walked;
  if (curc) {
    /* Which frames of this capture lie in a module that may be unloaded: those it walked
     * say so in `rules`; those it took from the previous capture (the loop above tests
     * none) can only when that one held some, and then they are found from its span and
     * the runs. So the common capture pays one test here. */
    uint16_t ulo = FC_MAX, uhi = 0;
    if (__builtin_expect((rules & R_MAY_UNLOAD) || nruns > 4, 0)) {
      for (size_t i = 0; i < cj; i++)
        if (cur[i].rule & R_MAY_UNLOAD) {
          if (ulo == FC_MAX) ulo = (uint16_t)i;
          uhi = (uint16_t)(i + 1);
        }
      if (uhi || (prev_unload && cj == FC_MAX)) rules |= R_MAY_UNLOAD; /* (frames past FC_MAX) */
    } else if (__builtin_expect(prev_unload, 0)) {
      for (size_t r = 0; r < nruns; r++) {
        size_t lo = runs[r].from > pc->ulo ? runs[r].from : pc->ulo;
        size_t hi = runs[r].from + runs[r].len < pc->uhi ? runs[r].from + runs[r].len : pc->uhi;
        if (lo >= hi) continue;
        lo = runs[r].to + (lo - runs[r].from);
        hi = runs[r].to + (hi - runs[r].from);
        if (lo < ulo) ulo = (uint16_t)lo;
        if (hi > uhi) uhi = (uint16_t)hi;
      }
      if (uhi) rules |= R_MAY_UNLOAD;
    }
    curc->ulo = ulo;
    curc->uhi = uhi;
    curc->n = (uint32_t)cj;
    curc->gen = gen;
    w->ts->fc_cur ^= 1;
    o->fc = first_reuse == SIZE_MAX ? 0 : walked_after == 0 ? 2 : 1;
  }
  o->recheck = (rules & R_MAY_UNLOAD) != 0;
  return n;
}

/* A capture's counters, and the end of its time inside the capture. */
static inline void capture_done(tstate *ts, const walk *w, const walk_out *o, size_t n) {
  cadd(ts, C_CAPTURES, 1);
  cadd(ts, C_TRUNCATED, o->truncated);
  cadd(ts, C_FAILURES, o->failed);
  cadd(ts, C_FRAMES, n);
  cadd(ts, C_HITS, w->hits);
  cadd(ts, C_MISSES, w->misses);
  cadd(ts, C_FALLBACKS, o->fallbacks);
  cadd(ts, C_WALKED, o->walked + o->fallbacks);
  cadd(ts, C_REUSED, o->reused);
  if (o->fc >= 0) cadd(ts, o->fc == 2 ? C_FC_HITS : o->fc == 1 ? C_FC_PARTIAL : C_FC_MISSES, 1);
  atomic_signal_fence(memory_order_seq_cst);
  ts->in_capture = w->nested;
}

/* What the second walk needs of the first (capture_again). */
typedef struct walk_first {
  tstate *ts;
  uintptr_t rip, sp, bp; /* etr__unwind_capture's frame, still live */
  uintptr_t *ips;
  size_t max, skip, n;
  uint64_t *modgen;
  uint64_t gen0, hits, misses;
  walk_out o; /* (a copy: the address of the capture's own would keep it in memory) */
  const etr__modmap *map;
} walk_first;

/* A library closed and another opened at the same addresses changes no address: the walk
 * may have used the rules cached for the old one (the rule cache, the frame cache) and its
 * module map. Only a module that may be unloaded can be replaced so (R_MAY_UNLOAD; and
 * libunwind's frames, which are not classified): after a walk through one, the loader's
 * counters say whether anything changed since the map the walk began with (gen0), and if
 * so the walk is made again with the new map and an emptied rule cache, so that the first
 * capture after a reload is right. A capture whose frames all lie in permanent modules
 * (the program, its dependencies, libetr) does not come here. Out of line and the end of
 * the capture (nothing of the common path lives across the call, so that path keeps its
 * registers). Returns the frame count. */
static ETR_NOINLINE __attribute__((cold)) size_t capture_again(const walk_first *a) {
  walk w = {a->ts, a->map, false, false, a->hits, a->misses};
  walk_out o = a->o;
  size_t n = a->n;
  const etr__modmap *now = etr__modmap_refresh_sync();
  if (now && now->gen != a->gen0) {
    w.map = now;
    rc_sync(now->gen);
    o = (walk_out){0, 0, 0, false, false, false, -1};
    n = walk_stack(&w, a->rip, a->sp, a->bp, a->ips, a->max, a->skip, &o);
  }
  if (a->modgen) *a->modgen = w.map->gen;
  capture_done(a->ts, &w, &o, n);
  return n;
}

ETR_NOINLINE size_t etr__unwind_capture(uintptr_t *ips, size_t max, size_t skip, uint64_t *modgen) {
  if (modgen) *modgen = 0;
  if (!ips || max == 0) return 0;
  tstate *ts = tstate_get();
  if (!ts) return 0;
  walk w = {ts, NULL, ts->in_capture != 0, false, 0, 0};
  ts->in_capture = 1;
  atomic_signal_fence(memory_order_seq_cst);
  if (!w.nested && (++ts->ncap & 63) == 0)
    w.map = etr__modmap_refresh();
  else
    w.map = etr__modmap_current();
  size_t n = 0;
  walk_out o = {0, 0, 0, true, false, false, -1};
  if (w.map) {
    rc_sync(w.map->gen);
    uintptr_t rip, sp, bp;
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                     : "=r"(rip), "=r"(sp), "=r"(bp));
    uint64_t gen0 = w.map->gen;
    o.failed = false;
    n = walk_stack(&w, rip, sp, bp, ips, max, skip, &o);
    if (__builtin_expect(o.recheck | w.map_changed, 0) && !w.nested) {
      walk_first a = {ts, rip, sp, bp, ips, max, skip, n, modgen, gen0, w.hits, w.misses, o, w.map};
      return capture_again(&a);
    }
    if (modgen) *modgen = w.map->gen;
  }
  capture_done(ts, &w, &o, n);
  return n;
}

void etr__unwind_set_frame_cache(bool on) {
  tstate *ts = tstate_get();
  if (!ts) return;
  ts->fc_off = !on;
  ts->fc[0].n = ts->fc[1].n = 0;
}

void etr__unwind_thread_init(void) {
  tstate *ts = tstate_get();
  if (!ts) return;
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0), lo, hi;
  stack_bounds(ts, sp, &lo, &hi, true);
  const etr__modmap *m = etr__modmap_refresh();
  if (m) rc_sync(m->gen);
}

#else /* other architectures: libunwind for every frame */

void etr__unwind_set_frame_cache(bool on) { (void)on; }

void etr__unwind_thread_init(void) {
  tstate_get();
  etr__modmap_refresh();
}

ETR_NOINLINE size_t etr__unwind_capture(uintptr_t *ips, size_t max, size_t skip, uint64_t *modgen) {
  if (modgen) *modgen = 0;
  if (!ips || max == 0) return 0;
  tstate *ts = tstate_get();
  if (!ts || ts->in_capture) return 0;
  ts->in_capture = 1;
  const etr__modmap *map = etr__modmap_refresh();
  unw_backtrace_fn fn = unw_get();
  size_t n = 0;
  int m = fn ? unw_fill(fn, ts->fbuf, FB_MAX) : 0;
  /* fbuf[0] is in this function, fbuf[1] in our caller */
  for (int j = 1 + (int)skip; j < m && n < max; j++) ips[n++] = ts->fbuf[j];
  if (modgen && map) *modgen = map->gen;
  cadd(ts, C_CAPTURES, 1);
  cadd(ts, C_FAILURES, m <= 0);
  cadd(ts, C_FRAMES, n);
  cadd(ts, C_FALLBACKS, n);
  cadd(ts, C_WALKED, n);
  ts->in_capture = 0;
  return n;
}

#endif
