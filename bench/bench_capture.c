/* Native capture benchmark (see bench_capture.h). This file is compiled with frame
 * pointers (bench/CMakeLists.txt), so the recursion can be walked by the frame-pointer
 * walker too. */
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_capture.h"
#include "unwind/cfi.h"
#include "unwind/unwind.h"

#define NOINLINE __attribute__((noinline))

enum { M_ETR, M_ETR_NOFC, M_FP, M_GLIBC, M_UNW, M_COUNT, MAX_REPS = 31, BUF = 256 };
static const char *const method_names[M_COUNT] = {"etr", "etr-nofc", "fpwalk", "glibc",
                                                  "libunwind"};

typedef int (*unw_backtrace_fn)(void **buffer, int size);

typedef struct bctx {
  int quick;
  size_t depth;
  uintptr_t lo, hi; /* this thread's stack, for the frame-pointer walk */
  unw_backtrace_fn unw;
  bool methods[M_COUNT];
  double med[M_COUNT];
  size_t frames[M_COUNT];
} bctx;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void stack_of_thread(uintptr_t *lo, uintptr_t *hi) {
  pthread_attr_t a;
  void *addr = NULL;
  size_t size = 0;
  *lo = 0;
  *hi = UINTPTR_MAX;
  if (pthread_getattr_np(pthread_self(), &a) == 0) {
    if (pthread_attr_getstack(&a, &addr, &size) == 0) {
      *lo = (uintptr_t)addr;
      *hi = (uintptr_t)addr + size;
    }
    pthread_attr_destroy(&a);
  }
}

/* The frame-pointer walk: return addresses from our caller outwards, each frame checked
 * against the stack bounds (what a walker that must not fault needs at least). */
static NOINLINE size_t fp_walk(uintptr_t *ips, size_t max, uintptr_t lo, uintptr_t hi) {
  uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
  size_t n = 0;
  while (n < max) {
    if (fp < lo || fp > hi - 16 || (fp & 7)) break;
    const uintptr_t *f = (const uintptr_t *)fp;
    uintptr_t next = f[0], ra = f[1];
    if (!ra) break;
    ips[n++] = ra;
    if (next <= fp) break;
    fp = next;
  }
  return n;
}

static inline size_t run_method(const bctx *c, int m, uintptr_t *buf) {
  switch (m) {
    case M_ETR:
      return etr__unwind_capture(buf, c->depth, 0, NULL);
    case M_ETR_NOFC: {
      etr__unwind_set_frame_cache(false);
      size_t n = etr__unwind_capture(buf, c->depth, 0, NULL);
      etr__unwind_set_frame_cache(true);
      return n;
    }
    case M_FP:
      return fp_walk(buf, c->depth, c->lo, c->hi);
    case M_GLIBC:
      return (size_t)backtrace((void **)buf, (int)c->depth);
    default:
      return (size_t)c->unw((void **)buf, (int)c->depth);
  }
}

/* At the bottom of the recursion: every method on the same stack, interleaved. */
static NOINLINE void measure_here(bctx *c) {
  uintptr_t buf[BUF];
  int reps = c->quick ? 5 : 15;
  double target = c->quick ? 100e3 : 1e6; /* ns per repeat and method */
  double samples[M_COUNT][MAX_REPS];
  long iters[M_COUNT];
  for (int m = 0; m < M_COUNT; m++) {
    c->med[m] = NAN;
    c->frames[m] = 0;
    if (!c->methods[m]) continue;
    for (int i = 0; i < 3; i++) c->frames[m] = run_method(c, m, buf); /* warm */
    uint64_t t0 = now_ns();
    for (int i = 0; i < 10; i++) run_method(c, m, buf);
    double per = (double)(now_ns() - t0) / 10;
    long n = per > 0 ? (long)(target / per) : 100000;
    iters[m] = n < 5 ? 5 : n > 200000 ? 200000 : n;
  }
  for (int r = 0; r < reps; r++) {
    for (int m = 0; m < M_COUNT; m++) {
      if (!c->methods[m]) continue;
      uint64_t t0 = now_ns();
      for (long i = 0; i < iters[m]; i++) {
        run_method(c, m, buf);
        __asm__ volatile("" : : "r"(buf) : "memory");
      }
      samples[m][r] = (double)(now_ns() - t0) / (double)iters[m];
    }
  }
  for (int m = 0; m < M_COUNT; m++)
    if (c->methods[m]) c->med[m] = median(samples[m], reps);
}

static NOINLINE void recurse(bctx *c, size_t d) {
  if (d == 0)
    measure_here(c);
  else
    recurse(c, d - 1);
  __asm__ volatile("" ::: "memory");
}

/* ---- 2 threads capturing at depth 32 at once ---- */

typedef struct pair_arg {
  bctx c;
  pthread_barrier_t *bar;
} pair_arg;

static void *pair_thread(void *p) {
  pair_arg *a = p;
  etr__unwind_thread_init();
  stack_of_thread(&a->c.lo, &a->c.hi);
  pthread_barrier_wait(a->bar);
  recurse(&a->c, a->c.depth + 4);
  return NULL;
}

/* ---- a thread's first capture ---- */

static void *first_capture_thread(void *p) {
  uintptr_t buf[32];
  uint64_t t0 = now_ns();
  etr__unwind_capture(buf, 32, 0, NULL);
  *(double *)p = (double)(now_ns() - t0);
  return NULL;
}

static int counts_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  *(unsigned long long *)data += info->dlpi_adds;
  return 1;
}

int etr_bench_capture(int quick, FILE *report, double *capture32_ns, double *fpwalk32_ns) {
  static const size_t depths[] = {8, 32, 128};
  int rc = 0;
  unw_backtrace_fn unw = NULL;
  void *h = dlopen("libunwind.so.8", RTLD_LAZY | RTLD_LOCAL);
  if (h) {
    void *sym = dlsym(h, "unw_backtrace");
    memcpy(&unw, &sym, sizeof unw);
  }
  backtrace((void *[1]){0}, 1); /* glibc loads libgcc_s on its first call */
  etr__unwind_thread_init();
  etr_traceback_stats s0;
  memset(&s0, 0, sizeof s0);
  etr__unwind_stats_add(&s0);

  if (report) {
    fprintf(report,
            "capture: ns per capture of exactly `depth` frames of the same stack "
            "(medians of %d repeats)\n",
            quick ? 5 : 15);
    fprintf(report, "  etr-nofc: etr without its per-thread frame cache (rule cache only)\n");
    fprintf(report, "  %5s %10s %10s %10s %8s %10s %10s %8s %8s\n", "depth", "etr", "etr-nofc",
            "fpwalk", "etr/fp", "glibc", "libunwind", "glibc/fp", "unw/fp");
  }
  *capture32_ns = *fpwalk32_ns = NAN;
  double cap32_1t = NAN;
  for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
    bctx c;
    memset(&c, 0, sizeof c);
    c.quick = quick;
    c.depth = depths[i];
    c.unw = unw;
    for (int m = 0; m < M_COUNT; m++) c.methods[m] = m != M_UNW || unw;
    stack_of_thread(&c.lo, &c.hi);
    recurse(&c, c.depth + 4);
    for (int m = 0; m < M_COUNT; m++) {
      if (c.methods[m] && c.frames[m] != c.depth) {
        rc = -1;
        if (report)
          fprintf(report, "  (%s stored %zu frames of %zu)\n", method_names[m], c.frames[m],
                  c.depth);
      }
    }
    if (report)
      fprintf(report, "  %5zu %10.1f %10.1f %10.1f %8.2f %10.1f %10.1f %8.1f %8.1f\n", c.depth,
              c.med[M_ETR], c.med[M_ETR_NOFC], c.med[M_FP], c.med[M_ETR] / c.med[M_FP],
              c.med[M_GLIBC], c.med[M_UNW], c.med[M_GLIBC] / c.med[M_FP],
              c.med[M_UNW] / c.med[M_FP]);
    if (c.depth == 32) {
      *capture32_ns = cap32_1t = c.med[M_ETR];
      *fpwalk32_ns = c.med[M_FP];
    }
  }

  /* 2 threads at once, etr only, depth 32 */
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  pair_arg pa[2];
  pthread_t t[2];
  int started = 0;
  for (int i = 0; i < 2; i++) {
    memset(&pa[i], 0, sizeof pa[i]);
    pa[i].c.quick = quick;
    pa[i].c.depth = 32;
    pa[i].c.methods[M_ETR] = true;
    pa[i].bar = &bar;
    if (pthread_create(&t[i], NULL, pair_thread, &pa[i]) == 0) started++;
  }
  if (started < 2) pthread_barrier_wait(&bar); /* let the one thread go */
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  double two = started == 2 ? (pa[0].c.med[M_ETR] + pa[1].c.med[M_ETR]) / 2 : NAN;

  /* a thread's first capture */
  double first[5];
  int nfirst = 0;
  for (int i = 0; i < (quick ? 3 : 5); i++) {
    pthread_t ft;
    if (pthread_create(&ft, NULL, first_capture_thread, &first[nfirst]) == 0) {
      pthread_join(ft, NULL);
      nfirst++;
    }
  }
  double first_med = nfirst ? median(first, nfirst) : NAN;

  /* reading dl_iterate_phdr's counters (what a check per capture would add) */
  unsigned long long sink = 0;
  long n = quick ? 20000 : 200000;
  uint64_t t0 = now_ns();
  for (long i = 0; i < n; i++) dl_iterate_phdr(counts_cb, &sink);
  double dlcheck = (double)(now_ns() - t0) / (double)n;

  etr_traceback_stats s1;
  memset(&s1, 0, sizeof s1);
  etr__unwind_stats_add(&s1);
  if (report) {
    fprintf(report,
            "  etr at depth 32 on 2 threads at once: %.1f ns per capture per thread "
            "(%.2fx one thread)\n",
            two, two / cap32_1t);
    fprintf(report, "  a thread's first capture (depth 32): %.1f us (median of %d threads)\n",
            first_med / 1000, nfirst);
    fprintf(report,
            "  dl_iterate_phdr counters read: %.1f ns (etr reads them on a rule miss "
            "and every 64th capture of a thread)\n",
            dlcheck);
    fprintf(report,
            "  counters: captures %llu, rule cache hits %llu misses %llu resets %llu, "
            "fallback frames %llu, failures %llu\n",
            (unsigned long long)(s1.captures - s0.captures),
            (unsigned long long)(s1.unwind_cache_hits - s0.unwind_cache_hits),
            (unsigned long long)(s1.unwind_cache_misses - s0.unwind_cache_misses),
            (unsigned long long)(s1.unwind_cache_resets - s0.unwind_cache_resets),
            (unsigned long long)(s1.unwind_fallbacks - s0.unwind_fallbacks),
            (unsigned long long)(s1.capture_failures - s0.capture_failures));
    fprintf(report, "  target (docs/BENCHMARKS.md): etr at depth 32 <= 3x fpwalk: %.2fx\n",
            *capture32_ns / *fpwalk32_ns);
  }
  if (h) dlclose(h);
  return rc;
}
