/* Native capture (src/unwind/capture.c, cfi.c, modules.c): frames through code with and
 * without frame pointers, frames libunwind has to unwind, a library opened with dlopen and
 * one closed between two captures, corrupt frames, code made at run time in an anonymous
 * executable mapping (a JIT's), signal handlers (also on an alternate stack, also
 * interrupting a capture), threads, and the counters.
 *
 * Frames are checked against function ranges (dladdr1 with RTLD_DL_SYMENT): a return
 * address ra belongs to f when ra - 1 lies in [f, f + size). */
#include <dlfcn.h>
#include <execinfo.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "unwind/cfi.h"
#include "unwind/unwind.h"

typedef size_t (*chain_cb)(void *arg);
#define CHAIN_DECL(p)                          \
  size_t p##chain_a(chain_cb cb, void *arg);   \
  size_t p##chain_b(chain_cb cb, void *arg);   \
  size_t p##chain_c(chain_cb cb, void *arg);   \
  size_t p##chain_big(chain_cb cb, void *arg); \
  size_t p##chain_aligned(chain_cb cb, void *arg);
CHAIN_DECL(fp_)
CHAIN_DECL(nofp_)
size_t bad_rbp_call(chain_cb fn, void *arg, uintptr_t bad_rbp);
size_t rbx_cfa_call(chain_cb fn, void *arg);
size_t bad_ra_call(chain_cb fn, void *arg, uintptr_t bad_ra);
size_t nocfi_call(chain_cb fn, void *arg);

enum { MAXF = 128 };

typedef struct range {
  uintptr_t lo, hi;
} range;

static range fn_range(const void *fn) {
  Dl_info di;
  const ElfW(Sym) *sym = NULL;
  range r = {0, 0};
  if (dladdr1(fn, &di, (void **)&sym, RTLD_DL_SYMENT) && sym && di.dli_saddr) {
    r.lo = (uintptr_t)di.dli_saddr;
    r.hi = r.lo + sym->st_size;
  }
  return r;
}

static bool in_fn(uintptr_t ra, range r) { return r.hi > r.lo && ra - 1 >= r.lo && ra - 1 < r.hi; }

/* Index of the first frame at or after from that lies in r, -1 when none. */
static int find_frame(const uintptr_t *ips, size_t n, size_t from, range r) {
  for (size_t i = from; i < n; i++)
    if (in_fn(ips[i], r)) return (int)i;
  return -1;
}

static etr_traceback_stats stats(void) {
  etr_traceback_stats s;
  memset(&s, 0, sizeof s);
  etr__unwind_stats_add(&s);
  return s;
}

static void dump(const char *what, const uintptr_t *ips, size_t n) {
  if (!getenv("ETR_TEST_VERBOSE")) return;
  fprintf(stderr, "%s: %zu frames\n", what, n);
  for (size_t i = 0; i < n; i++) {
    Dl_info di;
    const char *s = "?";
    if (dladdr((void *)(ips[i] - 1), &di) && di.dli_sname) s = di.dli_sname;
    fprintf(stderr, "  #%zu %#lx %s\n", i, (unsigned long)ips[i], s);
  }
}

/* ---- the callback the chains call ---- */

typedef struct cap {
  uintptr_t ips[MAXF];
  size_t n, max, skip;
  uint64_t gen;
} cap;

__attribute__((noinline)) size_t test_cb(void *arg) {
  cap *c = arg;
  c->n = etr__unwind_capture(c->ips, c->max ? c->max : MAXF, c->skip, &c->gen);
  __asm__ volatile("" ::: "memory");
  return c->n + 1;
}

/* ---- chains ---- */

typedef size_t (*chain_fn)(chain_cb, void *);

/* Captures through entry (a, or big/aligned then a) and checks cb, c, b, a, [outer], then
 * this function, in that order and consecutively. */
__attribute__((noinline)) void check_chain(chain_fn entry, chain_fn a, chain_fn b, chain_fn c,
                                           chain_fn outer) {
  cap k;
  memset(&k, 0, sizeof k);
  size_t r = entry(test_cb, &k);
  __asm__ volatile("" ::: "memory");
  assert_true(r > 0);
  dump("chain", k.ips, k.n);
  assert_true(k.n >= 6);
  assert_true(in_fn(k.ips[0], fn_range((void *)test_cb)));
  assert_true(in_fn(k.ips[1], fn_range((void *)c)));
  assert_true(in_fn(k.ips[2], fn_range((void *)b)));
  assert_true(in_fn(k.ips[3], fn_range((void *)a)));
  size_t i = 4;
  if (outer) assert_true(in_fn(k.ips[i++], fn_range((void *)outer)));
  assert_true(in_fn(k.ips[i], fn_range((void *)check_chain)));
  assert_true(k.gen > 0);
}

static void test_chain_fp(void **state) {
  (void)state;
  etr_traceback_stats s0 = stats();
  check_chain(fp_chain_a, fp_chain_a, fp_chain_b, fp_chain_c, NULL);
  etr_traceback_stats s1 = stats();
  assert_int_equal(s1.captures - s0.captures, 1);
  assert_int_equal(s1.capture_failures, s0.capture_failures);
  assert_true(s1.frames_captured - s0.frames_captured >= 6);
}

static void test_chain_nofp(void **state) {
  (void)state;
  etr_traceback_stats s0 = stats();
  check_chain(nofp_chain_a, nofp_chain_a, nofp_chain_b, nofp_chain_c, NULL);
  etr_traceback_stats s1 = stats();
  assert_int_equal(s1.capture_failures, s0.capture_failures);
}

/* Without the frame cache: the same frames, every one through the rule cache. */
static void test_chain_no_frame_cache(void **state) {
  (void)state;
  etr__unwind_set_frame_cache(false);
  etr_traceback_stats s0 = stats();
  for (int i = 0; i < 3; i++) {
    check_chain(fp_chain_a, fp_chain_a, fp_chain_b, fp_chain_c, NULL);
    check_chain(nofp_chain_a, nofp_chain_a, nofp_chain_b, nofp_chain_c, NULL);
  }
  etr_traceback_stats s1 = stats();
  etr__unwind_set_frame_cache(true);
  assert_int_equal(s1.frames_reused, s0.frames_reused);
  assert_int_equal(s1.frame_cache_hits + s1.frame_cache_partial_hits + s1.frame_cache_misses,
                   s0.frame_cache_hits + s0.frame_cache_partial_hits + s0.frame_cache_misses);
  assert_true(s1.frames_walked - s0.frames_walked >= 6 * 6);
}

/* Our frames equal those of glibc's backtrace() (libgcc's DWARF unwinder) in the same
 * place, beyond the first one (each call has its own return address). */
__attribute__((noinline)) size_t cb_compare(void *arg) {
  cap *c = arg;
  void *theirs[MAXF];
  c->n = etr__unwind_capture(c->ips, MAXF, 0, &c->gen);
  int m = backtrace(theirs, MAXF);
  __asm__ volatile("" ::: "memory");
  assert_true(m > 4);
  dump("ours", c->ips, c->n);
  /* the same outer frames; a sanitizer's interceptor of backtrace() adds inner ones */
  assert_true(c->n > 4 && (size_t)m >= c->n);
  for (size_t i = 1; i < c->n; i++)
    assert_int_equal(c->ips[c->n - i], (uintptr_t)theirs[(size_t)m - i]);
  return c->n;
}

static void test_same_as_glibc(void **state) {
  (void)state;
  cap k;
  memset(&k, 0, sizeof k);
  backtrace((void *[1]){0}, 1); /* loads libgcc_s first */
  fp_chain_a(cb_compare, &k);
  nofp_chain_a(cb_compare, &k);
}

static void test_skip_and_truncate(void **state) {
  (void)state;
  cap k;
  memset(&k, 0, sizeof k);
  k.skip = 2;
  fp_chain_a(test_cb, &k);
  assert_true(k.n >= 3);
  assert_true(in_fn(k.ips[0], fn_range((void *)fp_chain_b)));
  assert_true(in_fn(k.ips[1], fn_range((void *)fp_chain_a)));

  etr_traceback_stats s0 = stats();
  memset(&k, 0, sizeof k);
  k.max = 3;
  nofp_chain_a(test_cb, &k);
  assert_int_equal(k.n, 3);
  assert_true(in_fn(k.ips[2], fn_range((void *)nofp_chain_b)));
  etr_traceback_stats s1 = stats();
  assert_int_equal(s1.captures_truncated - s0.captures_truncated, 1);
  assert_int_equal(s1.frames_captured - s0.frames_captured, 3);

  uint64_t g = 7;
  assert_int_equal(etr__unwind_capture(k.ips, 0, 0, &g), 0);
  assert_int_equal(g, 0);
  assert_int_equal(etr__unwind_capture(NULL, 4, 0, NULL), 0);
}

/* One call site for every capture (a loop may be peeled into several). */
__attribute__((noinline)) void capture_via_fp_chain(cap *k) {
  memset(k, 0, sizeof *k);
  fp_chain_a(test_cb, k);
  __asm__ volatile("" ::: "memory");
}

static void test_cache_counters(void **state) {
  (void)state;
  cap k;
  etr_traceback_stats s0 = stats();
  volatile int rounds = 3;           /* not a constant: the loop must keep one call site */
  for (int i = 0; i < rounds; i++) { /* the same stack three times: warm, then all cached */
    if (i == rounds - 1) s0 = stats();
    capture_via_fp_chain(&k);
  }
  etr_traceback_stats s1 = stats();
  assert_int_equal(s1.unwind_cache_misses, s0.unwind_cache_misses);
  assert_int_equal(s1.unwind_fallbacks, s0.unwind_fallbacks);
  assert_int_equal(s1.unwind_cache_resets, s0.unwind_cache_resets);
  /* the same stack as the thread's previous capture: the rules (one per stored frame, plus
   * the capture's own frame) come from the frame cache, except where a frame passes on an
   * rbp that differs (a loop counter kept in rbp): those go through the rule cache */
  uint64_t reused = s1.frames_reused - s0.frames_reused,
           walked = s1.frames_walked - s0.frames_walked;
  assert_int_equal(reused + walked, k.n + 1);
  assert_true(reused >= k.n - 2);
  assert_int_equal(s1.unwind_cache_hits - s0.unwind_cache_hits, walked);
  assert_int_equal((s1.frame_cache_hits - s0.frame_cache_hits) +
                       (s1.frame_cache_partial_hits - s0.frame_cache_partial_hits),
                   1);

  /* a stack that shares only the outer part with the previous one: the inner frames are
   * walked, the outer part reused (a frame-cache hit); then the same stack again: all reused */
  cap k2;
  memset(&k2, 0, sizeof k2);
  fp_chain_b(test_cb, &k2);
  etr_traceback_stats s2 = stats(), s3 = s2;
  for (int i = 0; i < rounds - 1; i++) {
    if (i == rounds - 2) s3 = stats();
    capture_via_fp_chain(&k);
  }
  etr_traceback_stats s4 = stats();
  assert_int_equal((s3.frame_cache_hits - s2.frame_cache_hits) +
                       (s3.frame_cache_partial_hits - s2.frame_cache_partial_hits),
                   1);
  assert_true(s3.frames_walked - s2.frames_walked >= 4); /* cb, c, b, a at new depths */
  assert_true(s3.frames_reused > s2.frames_reused);      /* cmocka, main, libc */
  assert_true(s4.frames_reused - s3.frames_reused >= k.n - 2);
  assert_int_equal((s4.frames_reused - s3.frames_reused) + (s4.frames_walked - s3.frames_walked),
                   k.n + 1);
  /* every frame walked is a rule-cache lookup */
  assert_int_equal(s4.frames_walked - s0.frames_walked,
                   (s4.unwind_cache_hits - s0.unwind_cache_hits) +
                       (s4.unwind_cache_misses - s0.unwind_cache_misses));
}

/* The inner frames are the same (same addresses at the same stack positions) but the
 * caller further out alternates: the frame cache must notice the changed return address. */
__attribute__((noinline)) size_t fc_mid(cap *k) {
  size_t r = fp_chain_a(test_cb, k);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}
__attribute__((noinline)) size_t fc_outer_g(cap *k) {
  size_t r = fc_mid(k);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}
__attribute__((noinline)) size_t fc_outer_h(cap *k) {
  size_t r = fc_mid(k);
  __asm__ volatile("" ::: "memory");
  return r + 2;
}

static void test_frame_cache_changed_caller(void **state) {
  (void)state;
  range g = fn_range((void *)fc_outer_g), h = fn_range((void *)fc_outer_h);
  range mid = fn_range((void *)fc_mid);
  for (int i = 0; i < 20; i++) {
    cap k;
    memset(&k, 0, sizeof k);
    if (i % 3 == 0)
      fc_outer_h(&k);
    else
      fc_outer_g(&k);
    int m = find_frame(k.ips, k.n, 0, mid);
    assert_int_equal(m, 4);
    assert_true(in_fn(k.ips[m + 1], i % 3 == 0 ? h : g));
  }
}

/* Global (so the test finds its address range) caller of the assembly frame below. */
__attribute__((noinline)) size_t rbx_cfa_caller(cap *k) {
  size_t r = rbx_cfa_call(test_cb, k);
  __asm__ volatile("" ::: "memory");
  return r;
}

/* Called by nocfi_call: its frame is fine, the one above it (no unwind information) is not. */
__attribute__((noinline)) size_t rbx_cfa_thunk(void *k) {
  size_t r = rbx_cfa_call(test_cb, k);
  __asm__ volatile("" ::: "memory");
  return r;
}

/* libunwind takes over at a complex frame, adds some frames, then stops at a frame nothing
 * can unwind (no FDE, rbp 0) before any outermost frame: the traceback lacks main and _start,
 * and the capture counts as a failure, as it does when our walk stops there itself. */
static void test_fallback_stops_early(void **state) {
  (void)state;
  void *h = dlopen("libunwind.so.8", RTLD_LAZY | RTLD_LOCAL);
  if (!h) skip();
  etr_traceback_stats s0 = stats();
  cap k;
  memset(&k, 0, sizeof k);
  assert_true(nocfi_call(rbx_cfa_thunk, &k) > 0);
  etr_traceback_stats s1 = stats();
  dump("fallback stops early", k.ips, k.n);
  assert_true(s1.unwind_fallbacks > s0.unwind_fallbacks);
  assert_true(k.n >= 3);
  assert_true(in_fn(k.ips[1], fn_range((void *)rbx_cfa_call)));
  assert_true(in_fn(k.ips[2], fn_range((void *)rbx_cfa_thunk)));
  assert_int_equal(find_frame(k.ips, k.n, 0, fn_range((void *)test_fallback_stops_early)), -1);
  assert_int_equal(s1.capture_failures - s0.capture_failures, 1);
  assert_int_equal(s1.captures_truncated, s0.captures_truncated);
}

/* Frames without a simple rule (a 16 KiB frame, a realigned frame) go to libunwind. */
static void test_fallback(void **state) {
  (void)state;
  void *h = dlopen("libunwind.so.8", RTLD_LAZY | RTLD_LOCAL);
  if (!h) skip(); /* libunwind8 not installed: those frames end the walk */
  etr_traceback_stats s0 = stats();
  check_chain(nofp_chain_big, nofp_chain_a, nofp_chain_b, nofp_chain_c, nofp_chain_big);
  etr_traceback_stats s1 = stats();
  assert_int_equal(s1.capture_failures, s0.capture_failures);
  /* realigned: gcc keeps rbp as frame pointer (simple rule), clang may not */
  check_chain(nofp_chain_aligned, nofp_chain_a, nofp_chain_b, nofp_chain_c, nofp_chain_aligned);
  etr_traceback_stats s2 = stats();
  assert_int_equal(s2.capture_failures, s0.capture_failures);
  /* Whether these compiled frames have a simple rule depends on the compiler (gcc's
   * stack-clash probe loop makes the big one complex; clang's are simple); whatever the
   * path, the frames were right (check_chain). A frame with CFA = rbx + 16 (assembly) is
   * complex with any compiler: it must go to libunwind, and the walk must go on above it. */
  cap k;
  memset(&k, 0, sizeof k);
  assert_true(rbx_cfa_caller(&k) > 0);
  etr_traceback_stats s3 = stats();
  assert_true(s3.unwind_fallbacks > s2.unwind_fallbacks);
  assert_int_equal(s3.capture_failures, s0.capture_failures);
  assert_true(k.n >= 3);
  assert_true(in_fn(k.ips[0], fn_range((void *)test_cb)));
  assert_true(in_fn(k.ips[1], fn_range((void *)rbx_cfa_call)));
  assert_true(in_fn(k.ips[2], fn_range((void *)rbx_cfa_caller)));
  (void)s1;
  /* with frame pointers both frames have simple rules */
  check_chain(fp_chain_big, fp_chain_a, fp_chain_b, fp_chain_c, fp_chain_big);
  check_chain(fp_chain_aligned, fp_chain_a, fp_chain_b, fp_chain_c, fp_chain_aligned);
  dlclose(h);
}

/* ---- dlopen / dlclose ---- */

typedef size_t (*dl_entry_fn)(chain_cb cb, void *arg);

__attribute__((noinline)) void test_dlopen_dlclose(void **state) {
  (void)state;
  etr__unwind_thread_init();
  etr_traceback_stats s0 = stats();
  uint64_t gen0 = etr__modules_generation();
  void *h = dlopen(UNWIND_DL_PATH, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(h);
  dl_entry_fn entry;
  void *sym = dlsym(h, "unwind_dl_entry");
  assert_non_null(sym);
  memcpy(&entry, &sym, sizeof entry);
  range inner = fn_range(dlsym(h, "unwind_dl_inner")), outer = fn_range(sym);
  assert_true(inner.hi > inner.lo);

  cap k;
  memset(&k, 0, sizeof k);
  entry(test_cb, &k);
  dump("dl", k.ips, k.n);
  assert_true(k.n >= 4);
  assert_true(in_fn(k.ips[1], inner));
  assert_true(in_fn(k.ips[2], outer));
  assert_true(in_fn(k.ips[3], fn_range((void *)test_dlopen_dlclose)));
  assert_true(k.gen > gen0);
  etr_traceback_stats s1 = stats();
  assert_true(s1.unwind_cache_resets > s0.unwind_cache_resets); /* the load was seen */

  const etr__module *m = etr__modules_find(k.gen, k.ips[1]);
  assert_non_null(m);
  assert_non_null(strstr(m->path, "libunwind_dl.so"));
  assert_true(m->build_id_len > 0);
  uintptr_t bias = m->bias;
  uintptr_t inner_v = inner.lo - bias, inner_hi_v = inner.hi - bias;
  uint64_t vaddr = k.ips[1] - 1 - bias;

  assert_int_equal(dlclose(h), 0);
  assert_null(dlopen(UNWIND_DL_PATH, RTLD_NOW | RTLD_NOLOAD));

  /* captures after the close see the change (the 64th capture at the latest) */
  cap k2;
  for (int i = 0; i < 70; i++) {
    memset(&k2, 0, sizeof k2);
    fp_chain_a(test_cb, &k2);
  }
  assert_true(k2.gen > k.gen);
  etr_traceback_stats s2 = stats();
  assert_true(s2.unwind_cache_resets > s1.unwind_cache_resets);
  assert_int_equal(s2.capture_failures, s0.capture_failures);
  assert_true(in_fn(k2.ips[1], fn_range((void *)fp_chain_c)));

  /* the first capture's addresses still resolve, in its generation only */
  const etr__module *m2 = etr__modules_find(k.gen, k.ips[1]);
  assert_ptr_equal(m2, m);
  assert_string_equal(m2->path, m->path);
  assert_true(vaddr >= inner_v && vaddr < inner_hi_v);
  assert_null(etr__modules_find(k2.gen, k.ips[1]));
  assert_null(etr__modules_find(k2.gen + 1000, k.ips[1]));

  /* open again (often at the same address): frames right again */
  h = dlopen(UNWIND_DL_PATH, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(h);
  sym = dlsym(h, "unwind_dl_entry");
  memcpy(&entry, &sym, sizeof entry);
  memset(&k, 0, sizeof k);
  entry(test_cb, &k);
  assert_true(in_fn(k.ips[1], fn_range(dlsym(h, "unwind_dl_inner"))));
  assert_true(in_fn(k.ips[3], fn_range((void *)test_dlopen_dlclose)));
  dlclose(h);
}

/* ---- another library at the same address ---- */

typedef struct dl2 {
  void *h;
  dl_entry_fn entry;
  range inner, outer;
  uintptr_t base;
} dl2;

static dl2 dl2_open(const char *path) {
  dl2 d;
  memset(&d, 0, sizeof d);
  d.h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(d.h);
  void *sym = dlsym(d.h, "unwind_dl2_entry");
  assert_non_null(sym);
  memcpy(&d.entry, &sym, sizeof d.entry);
  d.outer = fn_range(sym);
  d.inner = fn_range(dlsym(d.h, "unwind_dl2_inner"));
  assert_true(d.inner.hi > d.inner.lo);
  Dl_info di;
  assert_true(dladdr(sym, &di));
  d.base = (uintptr_t)di.dli_fbase;
  return d;
}

/* Three captures through d: each must be d's frames, then this function, in d's module
 * (path ending in lib_name), and none may fail. */
__attribute__((noinline)) void dl2_check(const dl2 *d, const char *lib_name) {
  for (int i = 0; i < 3; i++) {
    etr_traceback_stats s0 = stats();
    cap k;
    memset(&k, 0, sizeof k);
    d->entry(test_cb, &k);
    etr_traceback_stats s1 = stats();
    dump(lib_name, k.ips, k.n);
    if (!(k.n >= 4 && in_fn(k.ips[1], d->inner) && in_fn(k.ips[2], d->outer) &&
          in_fn(k.ips[3], fn_range((void *)dl2_check))))
      fail_msg(
          "capture %d through %s: %zu frames, not its own then the test's "
          "(ETR_TEST_VERBOSE=1 lists them)",
          i, lib_name, k.n);
    assert_int_equal(s1.capture_failures, s0.capture_failures);
    const etr__module *m = etr__modules_find(k.gen, k.ips[1]);
    assert_non_null(m);
    if (!strstr(m->path, lib_name))
      fail_msg("capture %d through %s: the address is in %s in generation %llu", i, lib_name,
               m->path, (unsigned long long)k.gen);
  }
}

/* A library is closed and another one opened at the same address (a plugin replaced by a
 * new build): the first capture through the new one uses its unwind rules and its module.
 * Before, for up to 63 captures a thread reused the rules cached for the old library (here
 * a 256-byte frame where the new one has 4000 bytes: the walk read its return address inside
 * the buffer) and tagged the frames with the old module-map generation (the old library's
 * path and build id). With the frame cache and without it. */
static void test_reload_same_address(void **state) {
  (void)state;
  etr__unwind_thread_init();
  for (int fc = 1; fc >= 0; fc--) {
    etr__unwind_set_frame_cache(fc != 0);
    dl2 a = dl2_open(UNWIND_DL2A_PATH);
    dl2_check(&a, "libunwind_dl2a.so");
    assert_int_equal(dlclose(a.h), 0);
    dl2 b = dl2_open(UNWIND_DL2B_PATH);
    if (b.base != a.base) { /* (the kernel chose another address: nothing to test) */
      dlclose(b.h);
      etr__unwind_set_frame_cache(true);
      skip();
    }
    dl2_check(&b, "libunwind_dl2b.so");
    assert_int_equal(dlclose(b.h), 0);
    a = dl2_open(UNWIND_DL2A_PATH); /* and back */
    if (a.base == b.base) dl2_check(&a, "libunwind_dl2a.so");
    assert_int_equal(dlclose(a.h), 0);
  }
  etr__unwind_set_frame_cache(true);
}

static void test_module_map(void **state) {
  (void)state;
  uint64_t gen = etr__modules_generation();
  const etr__module *m = etr__modules_find(gen, (uintptr_t)test_cb);
  assert_non_null(m);
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  assert_true(n > 0);
  exe[n] = '\0';
  assert_string_equal(m->path, exe);
  assert_true(m->lo <= (uintptr_t)test_cb && (uintptr_t)test_cb < m->hi);
  /* a libc function that sanitizers do not intercept */
  const etr__module *libc = etr__modules_find(gen, (uintptr_t)&gnu_get_libc_version);
  assert_non_null(libc);
  assert_non_null(strstr(libc->path, "libc"));
  assert_true(libc->build_id_len == 20);
  Dl_info di;
  assert_true(dladdr((void *)&gnu_get_libc_version, &di));
  assert_int_equal(libc->bias, (uintptr_t)di.dli_fbase);
  assert_null(etr__modules_find(gen, 16));
  assert_null(etr__modules_find(gen, (uintptr_t)&di)); /* the stack is no module */
  /* Which modules can never be unloaded: the program, what it needs (the chain libraries,
   * libc: DT_NEEDED, transitively), not a library opened with dlopen. */
  const etr__modmap *map = etr__modmap_refresh();
  assert_true(etr__modmap_exec(map, (uintptr_t)test_cb)->permanent);
  assert_true(etr__modmap_exec(map, (uintptr_t)fp_chain_a)->permanent);
  assert_true(etr__modmap_exec(map, (uintptr_t)&gnu_get_libc_version)->permanent);
  void *h = dlopen(UNWIND_DL2A_PATH, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(h);
  void *entry = dlsym(h, "unwind_dl2_entry");
  map = etr__modmap_refresh();
  const etr__modent *e = etr__modmap_exec(map, (uintptr_t)entry);
  assert_non_null(e);
  assert_false(e->permanent);
  dlclose(h);
}

/* ---- corrupt frames ---- */

static void check_bad(size_t (*call)(chain_cb, void *, uintptr_t), uintptr_t bad) {
  etr_traceback_stats s0 = stats();
  cap k;
  memset(&k, 0, sizeof k);
  call(test_cb, &k, bad);
  etr_traceback_stats s1 = stats();
  assert_int_equal(k.n, 2);
  assert_true(in_fn(k.ips[0], fn_range((void *)test_cb)));
  assert_true(in_fn(k.ips[1], fn_range((void *)call)));
  assert_int_equal(s1.capture_failures - s0.capture_failures, 1);
}

__attribute__((noinline)) void bad_frames_inner(void) {
  volatile uintptr_t garbage[64];
  for (int i = 0; i < 64; i++) garbage[i] = 0x4141414141414141ull;
  uintptr_t heap = (uintptr_t)malloc(64);
  uintptr_t here = (uintptr_t)&garbage[8];
  /* rbp: null, tiny, unaligned, the heap, below the stack pointer, on the stack over
   * garbage, far above */
  uintptr_t rbps[] = {0, 8, here + 3, heap, here - 65536, here, UINTPTR_MAX - 8};
  for (size_t i = 0; i < sizeof rbps / sizeof rbps[0]; i++) check_bad(bad_rbp_call, rbps[i]);
  /* return address: garbage, the heap, the stack, a data address, a non-canonical one */
  static int data;
  uintptr_t ras[] = {0x4141414141414141ull, heap, here, (uintptr_t)&data, 1ull << 47, 0x1000};
  for (size_t i = 0; i < sizeof ras / sizeof ras[0]; i++) check_bad(bad_ra_call, ras[i]);
  free((void *)heap);
}

static void test_bad_frames(void **state) {
  (void)state;
  bad_frames_inner();
}

/* ---- code made at run time (a JIT) ----
 *
 * test_cb called from a trampoline written into an anonymous executable mapping: no module
 * holds it, so no unwind rule either. The walk cannot go past it, but it keeps its frame as
 * the last one (findings-21: the traceback ended at test_cb, and the op seemed called from
 * nowhere); a corrupt return address (test_bad_frames) is still not kept. */
typedef size_t (*jit_fn)(void *arg);

static void *make_trampoline(size_t *ra_off) {
  unsigned char *code =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(code != MAP_FAILED);
  unsigned char *p = code;
  static const unsigned char sub[] = {0x48, 0x83, 0xec, 0x08}; /* sub $8, %rsp */
  static const unsigned char add[] = {0x48, 0x83, 0xc4, 0x08}; /* add $8, %rsp */
  memcpy(p, sub, sizeof sub);
  p += sizeof sub;
  *p++ = 0x48; /* movabs $test_cb, %rax */
  *p++ = 0xb8;
  uintptr_t fn = (uintptr_t)test_cb;
  memcpy(p, &fn, sizeof fn);
  p += sizeof fn;
  *p++ = 0xff; /* call *%rax (the argument stays in %rdi) */
  *p++ = 0xd0;
  *ra_off = (size_t)(p - code);
  memcpy(p, add, sizeof add);
  p += sizeof add;
  *p++ = 0xc3; /* ret */
  assert_int_equal(mprotect(code, 4096, PROT_READ | PROT_EXEC), 0);
  return code;
}

static void test_jit_frame(void **state) {
  (void)state;
#if defined(__x86_64__)
  size_t ra_off;
  unsigned char *code = make_trampoline(&ra_off);
  jit_fn tramp;
  memcpy(&tramp, &code, sizeof tramp);
  for (int round = 0; round < 2; round++) { /* (the second: the thread's cached mapping) */
    etr_traceback_stats s0 = stats();
    cap k;
    memset(&k, 0, sizeof k);
    size_t r = tramp(&k);
    assert_int_equal(r, k.n + 1);
    etr_traceback_stats s1 = stats();
    dump("jit", k.ips, k.n);
    assert_int_equal(k.n, 2);
    assert_true(in_fn(k.ips[0], fn_range((void *)test_cb)));
    assert_true(k.ips[1] == (uintptr_t)code + ra_off); /* the trampoline's return address */
    assert_int_equal(s1.capture_failures - s0.capture_failures, 1); /* (still counted) */
  }
  munmap(code, 4096);
#else
  skip();
#endif
}

/* ---- signals ---- */

static cap g_sig;

__attribute__((noinline)) void sig_handler(int sig, siginfo_t *si, void *uc) {
  (void)sig, (void)si, (void)uc;
  g_sig.n = etr__unwind_capture(g_sig.ips, MAXF, 0, &g_sig.gen);
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) size_t cb_raise(void *arg) {
  (void)arg;
  raise(SIGUSR1);
  __asm__ volatile("" ::: "memory");
  return 1;
}

__attribute__((noinline)) void signal_case(bool altstack) {
  stack_t ss, old_ss;
  void *alt = NULL;
  if (altstack) {
    alt = malloc(256 * 1024);
    ss.ss_sp = alt;
    ss.ss_size = 256 * 1024;
    ss.ss_flags = 0;
    assert_int_equal(sigaltstack(&ss, &old_ss), 0);
  }
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = sig_handler;
  sa.sa_flags = SA_SIGINFO | (altstack ? SA_ONSTACK : 0);
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
  for (int v = 0; v < 2; v++) {
    memset(&g_sig, 0, sizeof g_sig);
    if (v == 0)
      fp_chain_a(cb_raise, NULL);
    else
      nofp_chain_a(cb_raise, NULL);
    dump("signal", g_sig.ips, g_sig.n);
    assert_true(g_sig.n > 4);
    assert_true(in_fn(g_sig.ips[0], fn_range((void *)sig_handler)));
    /* through the signal frame into the interrupted code */
    int i = find_frame(g_sig.ips, g_sig.n, 1, fn_range((void *)cb_raise));
    assert_true(i > 0);
    chain_fn c = v == 0 ? fp_chain_c : nofp_chain_c, a = v == 0 ? fp_chain_a : nofp_chain_a;
    assert_true(in_fn(g_sig.ips[i + 1], fn_range((void *)c)));
    assert_true(in_fn(g_sig.ips[i + 3], fn_range((void *)a)));
    assert_true(find_frame(g_sig.ips, g_sig.n, (size_t)i + 4, fn_range((void *)signal_case)) > 0);
  }
  sigaction(SIGUSR1, &old, NULL);
  if (altstack) {
    sigaltstack(&old_ss, NULL);
    free(alt);
  }
}

static void test_signal(void **state) {
  (void)state;
  signal_case(false);
}

static void test_signal_altstack(void **state) {
  (void)state;
  signal_case(true);
}

/* A thread is interrupted by signals, whose handler captures, while it captures itself in a
 * loop: nested captures (our walker only) and plain ones must not crash. */
static atomic_int g_storm_stop;
static atomic_int g_storm_handled;
static pthread_t g_storm_target;

static void storm_handler(int sig) {
  (void)sig;
  uintptr_t ips[64];
  etr__unwind_capture(ips, 64, 0, NULL);
  atomic_fetch_add(&g_storm_handled, 1);
}

static void *storm_killer(void *arg) {
  (void)arg;
  while (!atomic_load(&g_storm_stop)) {
    pthread_kill(g_storm_target, SIGUSR2);
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static void test_signal_storm(void **state) {
  (void)state;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = storm_handler;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR2, &sa, &old), 0);
  atomic_store(&g_storm_stop, 0);
  atomic_store(&g_storm_handled, 0);
  g_storm_target = pthread_self();
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, storm_killer, NULL), 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  size_t loops = 0;
  do {
    cap k;
    memset(&k, 0, sizeof k);
    for (int i = 0; i < 100; i++) nofp_chain_a(test_cb, &k);
    assert_true(in_fn(k.ips[1], fn_range((void *)nofp_chain_c)));
    loops++;
    clock_gettime(CLOCK_MONOTONIC, &t1);
  } while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 300000000L);
  atomic_store(&g_storm_stop, 1);
  pthread_join(t, NULL);
  sigaction(SIGUSR2, &old, NULL);
  assert_true(loops > 0);
  assert_true(atomic_load(&g_storm_handled) > 0);
}

/* ---- threads ---- */

enum { THREADS = 4, PER_THREAD = 3000 };
static range g_r_cb, g_r_c[2], g_r_a[2];
static atomic_int g_thread_bad;
static atomic_int g_churn_stop;

static void *capture_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < PER_THREAD; i++) {
    cap k;
    memset(&k, 0, sizeof k);
    int v = i & 1;
    if (v)
      nofp_chain_a(test_cb, &k);
    else
      fp_chain_a(test_cb, &k);
    if (k.n < 5 || !in_fn(k.ips[0], g_r_cb) || !in_fn(k.ips[1], g_r_c[v]) ||
        !in_fn(k.ips[3], g_r_a[v]))
      atomic_fetch_add(&g_thread_bad, 1);
  }
  return NULL;
}

static void *churn_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 40 && !atomic_load(&g_churn_stop); i++) {
    void *h = dlopen(UNWIND_DL_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  g_r_cb = fn_range((void *)test_cb);
  g_r_c[0] = fn_range((void *)fp_chain_c);
  g_r_c[1] = fn_range((void *)nofp_chain_c);
  g_r_a[0] = fn_range((void *)fp_chain_a);
  g_r_a[1] = fn_range((void *)nofp_chain_a);
  atomic_store(&g_thread_bad, 0);
  atomic_store(&g_churn_stop, 0);
  etr_traceback_stats s0 = stats();
  pthread_t t[THREADS], churn;
  assert_int_equal(pthread_create(&churn, NULL, churn_thread, NULL), 0);
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, capture_thread, NULL), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  atomic_store(&g_churn_stop, 1);
  pthread_join(churn, NULL);
  etr_traceback_stats s1 = stats(); /* exited threads are still counted */
  assert_int_equal(atomic_load(&g_thread_bad), 0);
  assert_int_equal(s1.captures - s0.captures, THREADS * PER_THREAD);
  /* each thread's first capture has no previous stack */
  assert_true(s1.frame_cache_misses - s0.frame_cache_misses >= THREADS);
  assert_true(s1.frames_reused > s0.frames_reused);
  assert_int_equal(s1.capture_failures, s0.capture_failures);
}

/* The same through a library opened with dlopen, whose frames make each capture read the
 * loader's counters, while another thread opens and closes a library: captures see the
 * map change under them, rebuild it (one thread) or wait for it, and walk again; every
 * frame is right and none fails (run under ASan and TSan too). */
static dl2 g_dl2;

static void *capture_dl_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < PER_THREAD / 4; i++) {
    cap k;
    memset(&k, 0, sizeof k);
    g_dl2.entry(test_cb, &k);
    if (k.n < 4 || !in_fn(k.ips[0], g_r_cb) || !in_fn(k.ips[1], g_dl2.inner) ||
        !in_fn(k.ips[2], g_dl2.outer))
      atomic_fetch_add(&g_thread_bad, 1);
  }
  return NULL;
}

static void test_threads_through_dlopen(void **state) {
  (void)state;
  g_r_cb = fn_range((void *)test_cb);
  g_dl2 = dl2_open(UNWIND_DL2A_PATH);
  atomic_store(&g_thread_bad, 0);
  atomic_store(&g_churn_stop, 0);
  etr_traceback_stats s0 = stats();
  pthread_t t[THREADS], churn;
  assert_int_equal(pthread_create(&churn, NULL, churn_thread, NULL), 0);
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, capture_dl_thread, NULL), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  atomic_store(&g_churn_stop, 1);
  pthread_join(churn, NULL);
  etr_traceback_stats s1 = stats();
  assert_int_equal(atomic_load(&g_thread_bad), 0);
  assert_int_equal(s1.captures - s0.captures, THREADS * (PER_THREAD / 4));
  assert_int_equal(s1.capture_failures, s0.capture_failures);
  assert_int_equal(dlclose(g_dl2.h), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_fp),
      cmocka_unit_test(test_chain_nofp),
      cmocka_unit_test(test_chain_no_frame_cache),
      cmocka_unit_test(test_same_as_glibc),
      cmocka_unit_test(test_skip_and_truncate),
      cmocka_unit_test(test_cache_counters),
      cmocka_unit_test(test_frame_cache_changed_caller),
      cmocka_unit_test(test_fallback),
      cmocka_unit_test(test_fallback_stops_early),
      cmocka_unit_test(test_module_map),
      cmocka_unit_test(test_dlopen_dlclose),
      cmocka_unit_test(test_reload_same_address),
      cmocka_unit_test(test_bad_frames),
      cmocka_unit_test(test_jit_frame),
      cmocka_unit_test(test_signal),
      cmocka_unit_test(test_signal_altstack),
      cmocka_unit_test(test_signal_storm),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_threads_through_dlopen),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
