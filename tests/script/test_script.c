/* Unit tests of the script-unwinder plug-in (src/unwind/script.c) with a fake interpreter.
 *
 * The fake unwinder hands out small integer handles from a per-thread "script stack" the
 * test sets, counts one reference per gathered handle and checks in release that each
 * reference is released once. Its callbacks call back into etr entry points that take
 * script.c's locks (etr_script_release_pending, etr__script_stats_add): if a callback were
 * run under one of those locks, the test would deadlock and fail on ctest's timeout.
 *
 * The interpreter entry function is fake_interp_entry below, exported to the dynamic
 * symbol table (ENABLE_EXPORTS) so that register finds it with dlsym.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "etr/etr.h"
#include "unwind/script.h"
#include "unwind/unwind.h"

#define NH 1024 /* handles are 1 .. NH-1, possibly with high bits set */
#define SLOT(h) ((h) & (NH - 1))

/* An exported function with a body, so that it has a size in the symbol table. */
__attribute__((noinline, visibility("default"))) int fake_interp_entry(int x) {
  volatile int y = x;
  for (int i = 0; i < 8; i++) y = y * 3 + i;
  return y;
}
__attribute__((noinline, visibility("default"))) int fake_other_fn(int x) {
  volatile int y = x;
  for (int i = 0; i < 8; i++) y = y * 5 + i;
  return y;
}

#define ENTRY_IP ((uintptr_t)&fake_interp_entry + 5)
#define OTHER_IP(k) ((uintptr_t)&fake_other_fn + 2 + (k))

/* ---- the fake interpreter ---- */

static _Atomic int refs[NH];
static _Atomic uint64_t gathered, released, symbolized, bad_releases;
static _Atomic uint64_t released_off_thread; /* released on another thread than gathered */
static _Atomic uint64_t gather_thread[NH];   /* last gathering thread tag per handle */
static _Atomic int fail_symbolize;           /* handle whose symbolize fails */
static _Atomic int reenter;                  /* callbacks call etr entry points */

static _Thread_local uintptr_t tl_stack[300];
static _Thread_local uint8_t tl_flags[300];
static _Thread_local size_t tl_n;
static _Thread_local uint64_t tl_tag;

/* cmocka's asserts work on the main thread only: threads count failures instead. */
static _Atomic int thread_failures;
#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      atomic_fetch_add(&thread_failures, 1);                                \
    }                                                                       \
  } while (0)

static void set_stack(size_t n, const uintptr_t *h, const uint8_t *f) {
  tl_n = n;
  for (size_t i = 0; i < n; i++) {
    tl_stack[i] = h[i];
    tl_flags[i] = f ? f[i] : 0;
  }
}

static void poke_etr(void) {
  if (!atomic_load(&reenter)) return;
  etr_script_release_pending(); /* takes threads_lock, every plock and gp_lock */
  etr_traceback_stats st = {0};
  etr__script_stats_add(&st); /* takes threads_lock */
  etr_script_frame f;
  (void)etr__script_frame_get(0, &f);
}

static size_t fake_gather(uintptr_t *handles, uint8_t *flags, size_t max, void *user) {
  (void)user;
  size_t n = tl_n < max ? tl_n : max;
  for (size_t i = 0; i < n; i++) {
    handles[i] = tl_stack[i];
    flags[i] = tl_flags[i];
    atomic_fetch_add(&refs[SLOT(tl_stack[i])], 1);
    atomic_store(&gather_thread[SLOT(tl_stack[i])], tl_tag);
  }
  atomic_fetch_add(&gathered, n);
  poke_etr();
  return n;
}

static int fake_symbolize(uintptr_t h, etr_script_frame *out, void *user) {
  (void)user;
  static _Thread_local char name[32], file[32];
  atomic_fetch_add(&symbolized, 1);
  poke_etr();
  if ((int)h == atomic_load(&fail_symbolize)) return 1;
  /* Handles 500+ describe the same frames as handles 0+ (same content: same id). */
  unsigned k = (unsigned)h % 500;
  snprintf(name, sizeof name, "fn%u", k);
  snprintf(file, sizeof file, "file%u.py", k % 3);
  out->name = name;
  out->filename = file;
  out->line = (int64_t)k * 10;
  return 0;
}

static void fake_release(const uintptr_t *h, size_t n, void *user) {
  (void)user;
  poke_etr();
  for (size_t i = 0; i < n; i++) {
    if (SLOT(h[i]) == 0 || atomic_fetch_sub(&refs[SLOT(h[i])], 1) <= 0) {
      atomic_fetch_add(&bad_releases, 1);
      continue;
    }
    if (atomic_load(&gather_thread[SLOT(h[i])]) != tl_tag)
      atomic_fetch_add(&released_off_thread, 1);
  }
  atomic_fetch_add(&released, n);
}

static const char *entry_names[] = {"no_such_symbol_xyz", "fake_interp_entry"};

static etr_script_unwinder fake_unwinder(bool release_in_record) {
  etr_script_unwinder u = ETR_SCRIPT_UNWINDER_INIT;
  u.entry_symbols = entry_names;
  u.n_entry_symbols = 2;
  u.gather = fake_gather;
  u.symbolize = fake_symbolize;
  u.release = fake_release;
  u.release_in_record = release_in_record;
  return u;
}

static uint64_t outstanding(void) {
  uint64_t n = 0;
  for (int i = 0; i < NH; i++) n += (uint64_t)atomic_load(&refs[i]);
  return n;
}

static int setup(void **state) {
  (void)state;
  for (int i = 0; i < NH; i++) atomic_store(&refs[i], 0);
  atomic_store(&gathered, 0);
  atomic_store(&released, 0);
  atomic_store(&symbolized, 0);
  atomic_store(&bad_releases, 0);
  atomic_store(&released_off_thread, 0);
  atomic_store(&fail_symbolize, -1);
  atomic_store(&reenter, 1);
  tl_tag = 1;
  tl_n = 0;
  etr__script_test_set_cache_buckets(0);
  return 0;
}

/* Every test leaves no unwinder behind and every reference released exactly once. */
static int teardown(void **state) {
  (void)state;
  (void)etr_script_unwinder_unregister();
  assert_int_equal(outstanding(), 0);
  assert_int_equal(atomic_load(&bad_releases), 0);
  assert_int_equal(atomic_load(&gathered), atomic_load(&released));
  assert_int_equal(etr__script_pending_count(), 0);
  assert_int_equal(atomic_load(&thread_failures), 0);
  return 0;
}

static const char *frame_name(uint64_t word) {
  static char buf[8][64];
  static int k;
  char *b = buf[k++ & 7];
  if (!(word & ETR__SCRIPT_TAG)) {
    if (word == ENTRY_IP) return "E";
    snprintf(b, 64, "n%d", (int)(word - ((uintptr_t)&fake_other_fn + 2)));
    return b;
  }
  etr_script_frame f;
  if (etr__script_frame_get(word & ~ETR__SCRIPT_TAG, &f) != 0) return "<bad id>";
  snprintf(b, 64, "%s@%s:%lld", f.name, f.filename, (long long)f.line);
  return b;
}

/* Render a traceback as "a b c" for readable comparisons. */
static const char *render(const uint64_t *w, size_t n) {
  static char out[4096];
  size_t len = 0;
  out[0] = 0;
  for (size_t i = 0; i < n; i++)
    len += (size_t)snprintf(out + len, sizeof out - len, "%s%s", i ? " " : "", frame_name(w[i]));
  return out;
}

/* ---- tests ---- */

static void test_register_errors(void **state) {
  (void)state;
  etr_script_unwinder u = fake_unwinder(true);
  assert_int_equal(etr_script_unwinder_register(NULL), ETR_EINVAL);
  etr_script_unwinder bad = u;
  bad.release = NULL;
  assert_int_equal(etr_script_unwinder_register(&bad), ETR_EINVAL);
  bad = u;
  bad.struct_size = 8;
  assert_int_equal(etr_script_unwinder_register(&bad), ETR_EINVAL);
  bad = u;
  bad.n_entry_symbols = 1; /* only the missing symbol */
  assert_int_equal(etr_script_unwinder_register(&bad), ETR_ENOENT);
  assert_false(etr__script_active());
  assert_int_equal(etr_script_unwinder_unregister(), ETR_ENOENT);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  assert_true(etr__script_active());
  assert_int_equal(etr_script_unwinder_register(&u), ETR_EBUSY);
  assert_int_equal(etr_script_unwinder_unregister(), 0);
  assert_false(etr__script_active());
  assert_int_equal(etr_script_unwinder_register(&u), 0);
}

static void test_no_unwinder_copies(void **state) {
  (void)state;
  uintptr_t ips[3] = {OTHER_IP(0), ENTRY_IP, OTHER_IP(1)};
  uint64_t out[8];
  uintptr_t h[2] = {1, 2};
  set_stack(2, h, NULL);
  assert_int_equal(etr__script_interleave(ips, 3, out, 8), 3);
  assert_string_equal(render(out, 3), "n0 E n1");
  assert_int_equal(etr__script_interleave(ips, 3, out, 2), 2);
  assert_int_equal(atomic_load(&gathered), 0);
}

static void test_interleave_entry_flags(void **state) {
  (void)state;
  etr_script_unwinder u = fake_unwinder(true);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  /* Two activations: s1 s2 run by the inner one, s3 by the outer one; s4 beyond. */
  uintptr_t ips[6] = {OTHER_IP(0), OTHER_IP(1), ENTRY_IP, OTHER_IP(2), ENTRY_IP, OTHER_IP(3)};
  uintptr_t h[4] = {1, 2, 3, 4};
  uint8_t f[4] = {0, ETR_SCRIPT_FRAME_ENTRY, ETR_SCRIPT_FRAME_ENTRY, 0};
  set_stack(4, h, f);
  uint64_t out[16];
  size_t n = etr__script_interleave(ips, 6, out, 16);
  assert_string_equal(render(out, n),
                      "n0 n1 fn1@file1.py:10 fn2@file2.py:20 E n2 fn3@file0.py:30 E n3 "
                      "fn4@file1.py:40");
  /* Cut at max: innermost frames kept. */
  n = etr__script_interleave(ips, 6, out, 4);
  assert_string_equal(render(out, n), "n0 n1 fn1@file1.py:10 fn2@file2.py:20");
  n = etr__script_interleave(ips, 6, out, 5);
  assert_string_equal(render(out, n), "n0 n1 fn1@file1.py:10 fn2@file2.py:20 E");
  /* Each handle symbolized once while cached; the rest of the references released. */
  assert_int_equal(atomic_load(&symbolized), 4);
  assert_int_equal(outstanding(), 4);
  assert_int_equal(atomic_load(&released), atomic_load(&gathered) - 4);
}

static void test_interleave_one_per_activation(void **state) {
  (void)state;
  etr_script_unwinder u = fake_unwinder(true);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  uintptr_t ips[4] = {OTHER_IP(0), ENTRY_IP, ENTRY_IP, OTHER_IP(1)};
  uintptr_t h[3] = {1, 2, 3};
  set_stack(3, h, NULL);
  uint64_t out[16];
  size_t n = etr__script_interleave(ips, 4, out, 16);
  assert_string_equal(render(out, n), "n0 fn1@file1.py:10 E fn2@file2.py:20 E n1 fn3@file0.py:30");
}

static void test_interleave_no_entry_frames(void **state) {
  (void)state;
  etr_script_unwinder u = fake_unwinder(true);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  uintptr_t h[2] = {7, 8};
  uint8_t f[2] = {ETR_SCRIPT_FRAME_ENTRY, ETR_SCRIPT_FRAME_ENTRY};
  set_stack(2, h, f);
  uintptr_t ips[2] = {OTHER_IP(0), OTHER_IP(1)};
  uint64_t out[16];
  /* No interpreter frame among the natives: script frames go last (outermost). */
  size_t n = etr__script_interleave(ips, 2, out, 16);
  assert_string_equal(render(out, n), "n0 n1 fn7@file1.py:70 fn8@file2.py:80");
  /* Native capture gave nothing: the script frames alone. */
  n = etr__script_interleave(NULL, 0, out, 16);
  assert_string_equal(render(out, n), "fn7@file1.py:70 fn8@file2.py:80");
  /* No script frames: natives as they are. */
  set_stack(0, NULL, NULL);
  n = etr__script_interleave(ips, 2, out, 16);
  assert_string_equal(render(out, n), "n0 n1");
}

static void test_symbolize_failure_and_dedup(void **state) {
  (void)state;
  etr_script_unwinder u = fake_unwinder(true);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  atomic_store(&fail_symbolize, 9);
  /* 9 fails ("??"), 1 and 501 describe the same frame: the same id. 1 twice (recursion). */
  uintptr_t h[4] = {9, 1, 501, 1};
  set_stack(4, h, NULL);
  uint64_t out[16];
  size_t n = etr__script_interleave(NULL, 0, out, 16);
  assert_int_equal(n, 4);
  assert_string_equal(render(out, n), "??@??:0 fn1@file1.py:10 fn1@file1.py:10 fn1@file1.py:10");
  assert_int_equal(out[1], out[2]);
  assert_int_equal(out[1], out[3]);
  assert_int_equal(atomic_load(&symbolized), 3); /* 9, 1, 501; the second 1 hits */
  assert_int_equal(outstanding(), 3);            /* one reference per cached handle */
  uint64_t before = etr__script_frame_count();
  n = etr__script_interleave(NULL, 0, out, 16);
  assert_int_equal(etr__script_frame_count(), before);
  assert_int_equal(atomic_load(&symbolized), 3);
  etr_script_frame fr;
  assert_int_equal(etr__script_frame_get(etr__script_frame_count(), &fr), ETR_ENOENT);
}

/* Eviction runs on a fresh thread (its cache gets the small size). */
static void *eviction_thread(void *arg) {
  (void)arg;
  tl_tag = 2;
  uintptr_t h[5] = {11, 12, 13, 14, 15};
  set_stack(5, h, NULL);
  uint64_t out[16];
  size_t n = etr__script_interleave(NULL, 0, out, 16);
  CHECK(n == 5);
  CHECK(atomic_load(&symbolized) == 5);
  CHECK(outstanding() <= 2); /* evicted references released at once */
  uint64_t s = atomic_load(&symbolized);
  n = etr__script_interleave(NULL, 0, out, 16);
  CHECK(atomic_load(&symbolized) > s); /* evicted handles symbolized again... */
  uint64_t ids[5];
  memcpy(ids, out, sizeof ids);
  n = etr__script_interleave(NULL, 0, out, 16);
  CHECK(memcmp(ids, out, sizeof ids) == 0); /* ...into the same ids */
  CHECK(outstanding() <= 2);
  return NULL;
}

static void test_eviction(void **state) {
  (void)state;
  etr__script_test_set_cache_buckets(1); /* 2 handles per thread */
  etr_script_unwinder u = fake_unwinder(true);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, eviction_thread, NULL), 0);
  pthread_join(t, NULL);
  /* The thread's cached handles went to the global list at exit. */
  assert_true(etr__script_pending_count() <= 2);
}

/* Handles that differ only in their high bits (etrdemo keeps the instruction index above a
 * code pointer) spread over the cache: a second capture of the same stack symbolizes
 * nothing. Runs on a fresh thread so that the cache has its default size. */
static void *high_bits_thread(void *arg) {
  (void)arg;
  uint64_t out[16];
  uintptr_t h[8];
  for (int i = 0; i < 8; i++) h[i] = 3 + ((uintptr_t)(i + 1) << 60);
  set_stack(8, h, NULL);
  CHECK(etr__script_interleave(NULL, 0, out, 16) == 8);
  uint64_t s = atomic_load(&symbolized);
  for (int k = 0; k < 10; k++) CHECK(etr__script_interleave(NULL, 0, out, 16) == 8);
  CHECK(atomic_load(&symbolized) == s);
  return NULL;
}

static void test_cache_high_bits(void **state) {
  (void)state;
  etr_script_unwinder u = fake_unwinder(true);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  atomic_store(&reenter, 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, high_bits_thread, NULL), 0);
  pthread_join(t, NULL);
  atomic_store(&reenter, 1);
}

/* release_in_record false: nothing is released during captures; release_pending does. */
static void test_deferred_release(void **state) {
  (void)state;
  atomic_store(&reenter, 0); /* callbacks would release the pending handles */
  etr_script_unwinder u = fake_unwinder(false);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  uintptr_t h[3] = {21, 22, 23};
  set_stack(3, h, NULL);
  uint64_t out[16];
  for (int i = 0; i < 10; i++) etr__script_interleave(NULL, 0, out, 16);
  assert_int_equal(atomic_load(&gathered), 30);
  assert_int_equal(atomic_load(&released), 0);
  assert_int_equal(etr__script_pending_count(), 27);
  etr_script_release_pending();
  assert_int_equal(atomic_load(&released), 27);
  assert_int_equal(outstanding(), 3);
  assert_int_equal(etr__script_pending_count(), 0);
  etr_traceback_stats st = {0};
  etr__script_stats_add(&st);
  assert_true(st.script_frames >= 30);
  assert_true(st.script_released >= 27);
  assert_int_equal(etr_script_unwinder_unregister(), 0);
  assert_int_equal(outstanding(), 0);
}

/* A thread's handles survive its exit and are released later on another thread. */
static void *exiting_thread(void *arg) {
  (void)arg;
  tl_tag = 3;
  uintptr_t h[3] = {31, 32, 33};
  set_stack(3, h, NULL);
  uint64_t out[16];
  for (int i = 0; i < 4; i++) etr__script_interleave(NULL, 0, out, 16);
  return NULL;
}

static void test_thread_exit(void **state) {
  (void)state;
  atomic_store(&reenter, 0); /* callbacks would release the pending handles */
  etr_script_unwinder u = fake_unwinder(false);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, exiting_thread, NULL), 0);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&released), 0);
  assert_int_equal(etr__script_pending_count(), 12); /* 9 surplus + 3 cached */
  etr_script_release_pending();
  assert_int_equal(atomic_load(&released), 12);
  assert_int_equal(atomic_load(&released_off_thread), 12);
  assert_int_equal(outstanding(), 0);
}

/* A capture in a host's thread-key destructor (its key made after the plug-in's, so it runs
 * after the plug-in's own destructor in each round) still gathers the script frames: the
 * plug-in keeps the thread's state until the round before the last (it was gone after the first).
 */
static pthread_key_t host_key;

static void host_key_gone(void *value) {
  (void)value;
  uintptr_t h[3] = {41, 42, 43};
  set_stack(3, h, NULL);
  uint64_t out[16];
  etr__script_interleave(NULL, 0, out, 16);
}

static void *thread_with_host_key(void *arg) {
  (void)arg;
  uint64_t out[4];
  set_stack(0, NULL, NULL);
  etr__script_interleave(NULL, 0, out, 4); /* (the plug-in's key exists before the host's) */
  pthread_setspecific(host_key, &host_key);
  return NULL;
}

static void test_capture_in_host_key_destructor(void **state) {
  (void)state;
  atomic_store(&reenter, 0);
  etr_script_unwinder u = fake_unwinder(false);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  assert_int_equal(pthread_key_create(&host_key, host_key_gone), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, thread_with_host_key, NULL), 0);
  pthread_join(t, NULL);
  pthread_key_delete(host_key);
  assert_int_equal(atomic_load(&gathered), 3);
  etr_script_release_pending();
  assert_int_equal(outstanding(), 0);
}

/* With release in records, another thread's next capture releases the exited thread's. */
static void test_thread_exit_release_in_record(void **state) {
  (void)state;
  etr_script_unwinder u = fake_unwinder(true);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, exiting_thread, NULL), 0);
  pthread_join(t, NULL);
  assert_int_equal(etr__script_pending_count(), 3);
  set_stack(0, NULL, NULL);
  uint64_t out[4];
  etr__script_interleave(NULL, 0, out, 4);
  assert_int_equal(etr__script_pending_count(), 0);
  assert_int_equal(outstanding(), 0);
}

static int unregister_rc_in_callback = 1;
static size_t unregistering_gather(uintptr_t *handles, uint8_t *flags, size_t max, void *user) {
  unregister_rc_in_callback = etr_script_unwinder_unregister();
  return fake_gather(handles, flags, max, user);
}

static void test_unregister_in_callback(void **state) {
  (void)state;
  etr_script_unwinder u = fake_unwinder(true);
  u.gather = unregistering_gather;
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  uintptr_t h[1] = {41};
  set_stack(1, h, NULL);
  uint64_t out[4];
  assert_int_equal(etr__script_interleave(NULL, 0, out, 4), 1);
  assert_int_equal(unregister_rc_in_callback, ETR_EBUSY);
  assert_true(etr__script_active());
}

/* ---- concurrency: captures on 4 threads while the unwinder comes and goes ---- */

static _Atomic int stop;

static void *stress_thread(void *arg) {
  uint64_t seed = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  tl_tag = 10 + (uintptr_t)arg;
  uintptr_t ips[8] = {OTHER_IP(0), ENTRY_IP, OTHER_IP(1), ENTRY_IP,
                      OTHER_IP(2), ENTRY_IP, OTHER_IP(3), OTHER_IP(4)};
  uint64_t out[64];
  for (int it = 0; it < 3000 && !atomic_load(&stop); it++) {
    uintptr_t h[20];
    uint8_t f[20];
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    size_t n = 1 + seed % 20;
    for (size_t i = 0; i < n; i++) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      h[i] = 100 + seed % 64;
      f[i] = (seed >> 20) % 4 == 0 ? ETR_SCRIPT_FRAME_ENTRY : 0;
    }
    set_stack(n, h, f);
    size_t k = etr__script_interleave(ips, 8, out, 64);
    size_t s = 0;
    for (size_t i = 0; i < k; i++) {
      if (!(out[i] & ETR__SCRIPT_TAG)) continue;
      etr_script_frame fr;
      CHECK(etr__script_frame_get(out[i] & ~ETR__SCRIPT_TAG, &fr) == 0);
      /* Script frames keep the gathered order. */
      char want[32];
      snprintf(want, sizeof want, "fn%u", (unsigned)(h[s] % 500));
      if (k > 8) CHECK(strcmp(fr.name, want) == 0);
      s++;
    }
    CHECK(k == 8 || k == 8 + n);
    if (it % 100 == 0) etr_script_release_pending();
  }
  return NULL;
}

static void run_stress(bool release_in_record) {
  etr__script_test_set_cache_buckets(4);
  etr_script_unwinder u = fake_unwinder(release_in_record);
  assert_int_equal(etr_script_unwinder_register(&u), 0);
  atomic_store(&stop, 0);
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, stress_thread, (void *)i), 0);
  for (int i = 0; i < 30; i++) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
    assert_int_equal(etr_script_unwinder_unregister(), 0);
    assert_int_equal(etr_script_unwinder_register(&u), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  etr_script_release_pending();
}

static void test_stress_release_in_record(void **state) {
  (void)state;
  run_stress(true);
}
static void test_stress_deferred(void **state) {
  (void)state;
  run_stress(false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_register_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_unwinder_copies, setup, teardown),
      cmocka_unit_test_setup_teardown(test_interleave_entry_flags, setup, teardown),
      cmocka_unit_test_setup_teardown(test_interleave_one_per_activation, setup, teardown),
      cmocka_unit_test_setup_teardown(test_interleave_no_entry_frames, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_failure_and_dedup, setup, teardown),
      cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cache_high_bits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deferred_release, setup, teardown),
      cmocka_unit_test_setup_teardown(test_thread_exit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_thread_exit_release_in_record, setup, teardown),
      cmocka_unit_test_setup_teardown(test_capture_in_host_key_destructor, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unregister_in_callback, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stress_release_in_record, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stress_deferred, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
