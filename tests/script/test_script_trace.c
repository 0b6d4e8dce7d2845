/* Script frames through the whole recorder: a fake interpreter (public API only) runs ops
 * from inside its "entry function" on 4 threads while a trace records a traceback on every
 * op; the trace's frames/tracebacks tables must show the fake script frames interleaved
 * at the entry function's native frames. The fake release calls etr entry points that
 * take the trace's and the unwinder's locks (etr_trace_stats_get, etr_traceback_stats_get,
 * etr_script_release_pending): released under one of them, the test would deadlock (ctest
 * timeout). Every gathered handle must be released exactly once by the end.
 *
 * Native stack of each op, innermost first:
 *   run_op ← fake_entry (inner activation) ← middle_fn ← fake_entry (outer) ← thread_main
 * Script stack gathered: s_inner1, s_inner2 (ENTRY), s_outer (ENTRY). Expected traceback:
 *   run_op s_inner1 s_inner2 fake_entry middle_fn s_outer fake_entry thread_main ...
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "etr/etr.h"

#define NTHREADS 4
#define OPS 200

static _Atomic int64_t refs[4];
static _Atomic uint64_t gathered, released, bad;
static etr_trace *trace;

static const char *const script_names[4] = {"", "s_inner1", "s_inner2", "s_outer"};

static size_t gather(uintptr_t *h, uint8_t *f, size_t max, void *user) {
  (void)user;
  if (max < 3) return 0;
  for (int i = 0; i < 3; i++) {
    h[i] = (uintptr_t)(i + 1);
    atomic_fetch_add(&refs[i + 1], 1);
  }
  f[0] = 0;
  f[1] = ETR_SCRIPT_FRAME_ENTRY;
  f[2] = ETR_SCRIPT_FRAME_ENTRY;
  atomic_fetch_add(&gathered, 3);
  return 3;
}

static int symbolize(uintptr_t h, etr_script_frame *out, void *user) {
  (void)user;
  if (h < 1 || h > 3) return 1;
  out->name = script_names[h];
  out->filename = "fake_script.py";
  out->line = (int64_t)h * 100;
  return 0;
}

static void release(const uintptr_t *h, size_t n, void *user) {
  (void)user;
  /* Deadlocks if called under the trace's, the registry's or the unwinder's locks. */
  etr_trace_stats ts = {0};
  ts.struct_size = sizeof ts;
  if (trace) etr_trace_stats_get(trace, &ts);
  etr_traceback_stats tb = {0};
  tb.struct_size = sizeof tb;
  etr_traceback_stats_get(&tb);
  etr_script_release_pending();
  for (size_t i = 0; i < n; i++) {
    if (h[i] < 1 || h[i] > 3 || atomic_fetch_sub(&refs[h[i]], 1) <= 0) atomic_fetch_add(&bad, 1);
  }
  atomic_fetch_add(&released, n);
}

/* Keep each call a real call with a frame of its own (no inlining, no tail call). */
#define NO_TAIL(x) __asm__ volatile("" : "+r"(x))

__attribute__((noinline, visibility("default"))) int run_op(int k) {
  etr_record rec;
  etr_record_init(&rec, "fake::op", ETR_SCOPE_FUNCTION);
  etr_record_begin(&rec);
  etr_record_end(&rec);
  NO_TAIL(k);
  return k + 1;
}

int fake_entry(int depth, int k);
int run_op(int k);
int middle_fn(int k);

__attribute__((noinline, visibility("default"))) int middle_fn(int k) {
  int r = fake_entry(1, k);
  NO_TAIL(r);
  return r + 1;
}

/* The fake interpreter's entry function, exported (ENABLE_EXPORTS) for dlsym. */
__attribute__((noinline, visibility("default"))) int fake_entry(int depth, int k) {
  int r = depth == 0 ? middle_fn(k) : run_op(k);
  NO_TAIL(r);
  return r + 1;
}

__attribute__((noinline, visibility("default"))) void *thread_main(void *arg);
void *thread_main(void *arg) {
  (void)arg;
  int s = 0;
  for (int i = 0; i < OPS; i++) s += fake_entry(0, i);
  NO_TAIL(s);
  return NULL;
}

static const char *frame_name(json_t *frames, json_t *idx) {
  json_t *f = json_array_get(frames, (size_t)json_integer_value(idx));
  return f ? json_string_value(json_object_get(f, "name")) : NULL;
}

static void test_trace_with_script_frames(void **state) {
  (void)state;
  char dir[] = "/tmp/etr-script-trace-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/trace.json", dir);

  static const char *entries[] = {"fake_entry"};
  etr_script_unwinder u = ETR_SCRIPT_UNWINDER_INIT;
  u.entry_symbols = entries;
  u.n_entry_symbols = 1;
  u.gather = gather;
  u.symbolize = symbolize;
  u.release = release;
  u.release_in_record = true;
  assert_int_equal(etr_script_unwinder_register(&u), 0);

  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  etr_traceback_options opt_tb = ETR_TRACEBACK_OPTIONS_INIT;
  opt.traceback = &opt_tb;
  opt_tb.enabled = true;
  assert_int_equal(etr_trace_open(path, &opt, &trace), 0);
  assert_int_equal(etr_trace_enable(trace), 0);
  pthread_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, thread_main, NULL), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  etr_trace *tr = trace;
  trace = NULL;
  assert_int_equal(etr_trace_close(tr), 0);
  assert_int_equal(etr_script_unwinder_unregister(), 0);

  /* Every reference released exactly once. */
  assert_int_equal(atomic_load(&bad), 0);
  assert_int_equal(atomic_load(&gathered), (uint64_t)NTHREADS * OPS * 3);
  assert_int_equal(atomic_load(&released), atomic_load(&gathered));
  for (int i = 1; i <= 3; i++) assert_int_equal(atomic_load(&refs[i]), 0);
  etr_traceback_stats tb = {0};
  tb.struct_size = sizeof tb;
  assert_int_equal(etr_traceback_stats_get(&tb), 0);
  assert_int_equal(tb.script_frames, atomic_load(&gathered));
  assert_int_equal(tb.script_released, atomic_load(&released));

  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) fail_msg("%s: %s (line %d col %d)", path, err.text, err.line, err.column);
  json_t *frames = json_object_get(root, "frames");
  json_t *tbs = json_object_get(root, "tracebacks");
  assert_true(json_is_array(frames));
  assert_true(json_is_array(tbs));
  static const char *want[] = {"run_op",    "s_inner1", "s_inner2",   "fake_entry",
                               "middle_fn", "s_outer",  "fake_entry", "thread_main"};
  size_t nw = sizeof want / sizeof want[0];
  size_t ops = 0, i;
  json_t *node;
  json_array_foreach(json_object_get(root, "nodes"), i, node) {
    if (strcmp(json_string_value(json_object_get(node, "name")), "fake::op") != 0) continue;
    ops++;
    json_int_t tbi = -1;
    size_t k;
    json_t *a;
    json_array_foreach(json_object_get(node, "attrs"), k, a) {
      if (strcmp(json_string_value(json_object_get(a, "name")), "traceback") == 0)
        tbi = json_integer_value(json_object_get(a, "value"));
    }
    assert_true(tbi >= 0);
    json_t *seq = json_array_get(tbs, (size_t)tbi);
    assert_true(json_array_size(seq) >= nw);
    char shown[2048] = "";
    size_t len = 0;
    for (k = 0; k < json_array_size(seq) && len < sizeof shown - 64; k++) {
      const char *nm = frame_name(frames, json_array_get(seq, k));
      len += (size_t)snprintf(shown + len, sizeof shown - len, " %s", nm ? nm : "?");
    }
    for (k = 0; k < nw; k++) {
      const char *nm = frame_name(frames, json_array_get(seq, k));
      if (!nm || strcmp(nm, want[k]) != 0)
        fail_msg("frame %zu is %s, expected %s; traceback:%s", k, nm ? nm : "?", want[k], shown);
    }
  }
  assert_int_equal(ops, (size_t)NTHREADS * OPS);
  /* The script frames carry their file and line. */
  json_array_foreach(frames, i, node) {
    const char *nm = json_string_value(json_object_get(node, "name"));
    if (nm && strcmp(nm, "s_outer") == 0) {
      assert_string_equal(json_string_value(json_object_get(node, "filename")), "fake_script.py");
      assert_int_equal(json_integer_value(json_object_get(node, "line")), 300);
    }
  }
  json_decref(root);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_trace_with_script_frames)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
