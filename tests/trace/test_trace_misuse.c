/* tests/trace/test_trace_misuse.c — misuse never corrupts the tree (docs/API.md): ends without
 * begins, double ends, out-of-order ends, ops open at disable, at close and at thread exit,
 * close while other threads record, flush, dump and the other calls on other threads while
 * the trace closes, a second open, NULL handles. Each misuse is counted. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace_util.h"

static uint64_t reg_ends_without_begin(void) {
  etr_registry_stats rs;
  memset(&rs, 0, sizeof rs);
  rs.struct_size = sizeof rs;
  assert_int_equal(etr_registry_stats_get(&rs), 0);
  return rs.ends_without_begin;
}

static void test_end_without_begin(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  uint64_t before = reg_ends_without_begin();
  etr_record outer;
  tu_begin(&outer, "outer", NULL, 0);
  /* Initialised, never begun, ended. */
  etr_record r;
  etr_record_init(&r, "never_begun", ETR_SCOPE_FUNCTION);
  etr_record_end(&r);
  /* Begun and ended twice. */
  etr_record d;
  tu_begin(&d, "double_end", NULL, 0);
  tu_end(&d, NULL, 0);
  tu_end(&d, NULL, 0);
  tu_op("after_misuse", NULL, 0, NULL, 0);
  tu_end(&outer, NULL, 0);
  tu_op("top_after", NULL, 0, NULL, 0);
  tu_close_ok(&t);
  uint64_t after = reg_ends_without_begin();
  assert_int_equal(after - before, 2);
  assert_int_equal(tu_count(&t, "never_begun"), 0);
  assert_int_equal(tu_count(&t, "double_end"), 1);
  json_t *o = tu_node(&t, "outer");
  json_t *tn = tu_thread_node(&t, (json_int_t)etr_thread_id());
  assert_non_null(tn);
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "double_end")), tu_id(o));
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "after_misuse")), tu_id(o));
  assert_int_equal(tu_ctrl_deps(o), tu_id(tn));
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "top_after")), tu_id(tn));
  assert_null(tu_attr(o, "etr_incomplete"));
  tu_free(&t);
}

static void test_end_out_of_order(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record a, b;
  tu_begin(&a, "ooo_a", NULL, 0);
  tu_begin(&b, "ooo_b", NULL, 0);
  tu_end(&a, NULL, 0); /* a ends while b (inside it) is open */
  tu_end(&b, NULL, 0);
  tu_op("ooo_after", NULL, 0, NULL, 0);
  tu_close_ok(&t);
  json_t *tn = tu_thread_node(&t, (json_int_t)etr_thread_id());
  assert_int_equal(tu_count(&t, "ooo_a"), 1);
  assert_true(tu_count(&t, "ooo_b") <= 1);
  json_t *na = tu_node(&t, "ooo_a");
  assert_int_equal(tu_ctrl_deps(na), tu_id(tn));
  json_t *nb = tu_find(&t, "ooo_b");
  if (nb != NULL) assert_int_equal(tu_ctrl_deps(nb), tu_id(na));
  /* The stack is clean afterwards. */
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "ooo_after")), tu_id(tn));
  assert_true(tu_stat(&t, "ends_out_of_order") + tu_stat(&t, "ends_without_begin") >= 1);
  tu_free(&t);
}

static void test_open_at_disable(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record a, b;
  tu_begin(&a, "open_at_disable", NULL, 0);
  assert_int_equal(etr_trace_disable(t.trace), 0);
  assert_false(etr_trace_is_enabled(t.trace));
  tu_op("while_disabled", NULL, 0, NULL, 0);
  /* Began while disabled, ended while enabled: not written. */
  tu_begin(&b, "began_disabled", NULL, 0);
  static int impl, stor;
  etr_tensor x = {&impl, &stor, 0, 1, 4, "float", "cpu", 0, NULL, NULL};
  etr_value out[1] = {etr_value_tensor(&x)};
  tu_end(&a, out, 1);
  assert_int_equal(etr_trace_enable(t.trace), 0);
  tu_end(&b, NULL, 0);
  tu_op("after_enable", NULL, 0, NULL, 0);
  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  assert_int_equal(etr_trace_stats_get(t.trace, &st), 0);
  assert_int_equal(st.ops_open_at_disable, 1);
  tu_close_ok(&t);
  json_t *na = tu_node(&t, "open_at_disable");
  assert_null(tu_attr(na, "etr_incomplete"));
  assert_true(json_is_integer(json_object_get(na, "inclusive_dur")));
  /* Its outputs, given after disable, are still recorded. */
  assert_int_equal(json_array_size(tu_in(na, "outputs", "values", 0)), 6);
  assert_int_equal(tu_count(&t, "while_disabled"), 0);
  assert_int_equal(tu_count(&t, "began_disabled"), 0);
  json_t *tn = tu_thread_node(&t, (json_int_t)etr_thread_id());
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "after_enable")), tu_id(tn));
  assert_int_equal(tu_stat(&t, "ops_open_at_disable"), 1);
  tu_free(&t);
}

static void test_open_at_close(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record a, b;
  tu_begin(&a, "open_a", NULL, 0);
  tu_begin(&b, "open_b", NULL, 0);
  tu_op("done_c", NULL, 0, NULL, 0);
  tu_close_ok(&t);
  /* Ending after close is harmless. */
  tu_end(&b, NULL, 0);
  tu_end(&a, NULL, 0);
  json_t *na = tu_node(&t, "open_a"), *nb = tu_node(&t, "open_b"), *nc = tu_node(&t, "done_c");
  json_t *tn = tu_thread_node(&t, (json_int_t)etr_thread_id());
  assert_non_null(tn);
  assert_int_equal(tu_ctrl_deps(nc), tu_id(nb));
  assert_int_equal(tu_ctrl_deps(nb), tu_id(na));
  assert_int_equal(tu_ctrl_deps(na), tu_id(tn));
  json_t *inc = tu_attr(na, "etr_incomplete");
  assert_non_null(inc);
  assert_string_equal(json_string_value(json_object_get(inc, "type")), "uint64");
  assert_int_equal(json_integer_value(json_object_get(inc, "value")), 1);
  assert_int_equal(tu_attr_int(nb, "etr_incomplete"), 1);
  assert_null(tu_attr(nc, "etr_incomplete"));
  /* etr_incomplete is the last attr. */
  json_t *attrs = json_object_get(nb, "attrs");
  assert_string_equal(
      json_string_value(json_object_get(json_array_get(attrs, json_array_size(attrs) - 1), "name")),
      "etr_incomplete");
  assert_int_equal(tu_stat(&t, "ops_open_at_close"), 2);
  assert_true(tu_node_index(&t, nb) < tu_node_index(&t, na));
  tu_free(&t);
}

static void *end_elsewhere(void *p) {
  tu_end((etr_record *)p, NULL, 0); /* this thread never recorded an op */
  return NULL;
}

/* Opens t, begins "begun_here" (a) on this thread and ends it on another. */
static void begin_and_end_elsewhere(tu_trace *t, etr_record *a) {
  tu_open(t, NULL);
  tu_begin(a, "begun_here", NULL, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, end_elsewhere, a), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
}

/* An op ended on another thread than it began on: counted (ends_cross_thread, in the stats
 * and the footer), ignored; the op stays open on its own thread and is written at close. */
static void test_end_on_other_thread(void **state) {
  (void)state;
  tu_trace t;
  etr_record a;
  begin_and_end_elsewhere(&t, &a);
  tu_op("after_cross_end", NULL, 0, NULL, 0);
  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  assert_int_equal(etr_trace_stats_get(t.trace, &st), 0);
  assert_int_equal(st.ends_cross_thread, 1);
  tu_close_ok(&t);
  assert_int_equal(tu_stat(&t, "ends_cross_thread"), 1);
  json_t *na = tu_node(&t, "begun_here");
  assert_int_equal(tu_attr_int(na, "etr_incomplete"), 1);
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "after_cross_end")), tu_id(na));
  assert_int_equal(tu_stat(&t, "ops_open_at_close"), 1);
  tu_free(&t);
}

/* The same, then the op ends on its own thread: that end ends it (before, the end on the
 * other thread had marked the record ended and called the observers' exit callbacks there,
 * so the right end counted as ends_without_begin and the op stayed open to close). */
static void test_end_on_other_thread_then_own(void **state) {
  (void)state;
  tu_trace t;
  etr_record a;
  begin_and_end_elsewhere(&t, &a);
  tu_op("inside_it", NULL, 0, NULL, 0);
  tu_end(&a, NULL, 0);
  tu_op("after_it", NULL, 0, NULL, 0);
  etr_registry_stats rs;
  memset(&rs, 0, sizeof rs);
  rs.struct_size = sizeof rs;
  assert_int_equal(etr_registry_stats_get(&rs), 0);
  uint64_t ewb = rs.ends_without_begin;
  tu_close_ok(&t);
  assert_int_equal(tu_stat(&t, "ends_cross_thread"), 1);
  assert_int_equal(tu_stat(&t, "ops_open_at_close"), 0);
  json_t *na = tu_node(&t, "begun_here");
  assert_null(tu_attr(na, "etr_incomplete")); /* (ended, not at close) */
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "inside_it")), tu_id(na));
  assert_true(tu_ctrl_deps(tu_node(&t, "after_it")) != tu_id(na));
  memset(&rs, 0, sizeof rs);
  rs.struct_size = sizeof rs;
  assert_int_equal(etr_registry_stats_get(&rs), 0);
  assert_int_equal(rs.ends_without_begin, ewb); /* (the right end was no misuse) */
  tu_free(&t);
}

static void *thread_exits_open(void *p) {
  uint64_t *tid = p;
  *tid = etr_thread_id();
  etr_record a, b;
  tu_begin(&a, "exit_open_a", NULL, 0);
  tu_begin(&b, "exit_open_b", NULL, 0);
  tu_op("exit_done", NULL, 0, NULL, 0);
  return NULL; /* exits with a and b open */
}

static void test_thread_exit_open(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  uint64_t tid = 0;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, thread_exits_open, &tid), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  tu_op("main_after", NULL, 0, NULL, 0);
  tu_close_ok(&t);
  json_t *tn = tu_thread_node(&t, (json_int_t)tid);
  assert_non_null(tn);
  json_t *na = tu_node(&t, "exit_open_a"), *nb = tu_node(&t, "exit_open_b");
  json_t *nd = tu_node(&t, "exit_done");
  assert_int_equal(tu_ctrl_deps(na), tu_id(tn));
  assert_int_equal(tu_ctrl_deps(nb), tu_id(na));
  assert_int_equal(tu_ctrl_deps(nd), tu_id(nb));
  assert_int_equal(tu_attr_int(na, "etr_incomplete"), 1);
  assert_int_equal(tu_attr_int(nb, "etr_incomplete"), 1);
  assert_null(tu_attr(nd, "etr_incomplete"));
  assert_int_equal(tu_stat(&t, "ops_open_at_thread_exit"), 2);
  assert_int_equal(tu_stat(&t, "ops_open_at_close"), 0);
  tu_free(&t);
}

/* Workers record in a loop while the main thread closes the trace. */
static atomic_int stop_workers;
static atomic_int worker_ops;

static void *worker_loop(void *p) {
  (void)p;
  static int impl, stor;
  const int64_t sz[1] = {4};
  etr_tensor x = {&impl, &stor, 0, 4, 4, "float", "cpu", 1, sz, NULL};
  etr_value in[3] = {etr_value_tensor(&x), etr_value_string("payload"), etr_value_int(3)};
  while (!atomic_load(&stop_workers)) {
    etr_record o;
    tu_begin(&o, "worker_outer", in, 3);
    tu_op("worker_inner", in, 3, in, 1);
    tu_end(&o, NULL, 0);
    etr_tensor_died(&impl);
    atomic_fetch_add(&worker_ops, 1);
  }
  return NULL;
}

static void test_close_while_recording(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.buffer_kb = 4;
  tu_open(&t, &opt);
  atomic_store(&stop_workers, 0);
  atomic_store(&worker_ops, 0);
  pthread_t th[3];
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, worker_loop, NULL), 0);
  while (atomic_load(&worker_ops) < 300) tu_sleep_us(1000);
  t.close_rc = etr_trace_close(t.trace);
  t.trace = NULL;
  int at_close = atomic_load(&worker_ops);
  while (atomic_load(&worker_ops) < at_close + 300) tu_sleep_us(1000);
  /* A new trace may be opened while they still record. */
  tu_trace t2;
  tu_open(&t2, NULL);
  /* (ops, not a fixed time: a loaded machine may not run the workers for a while; of 30
   * ops completed from here on, some began after the open) */
  int at_open = atomic_load(&worker_ops);
  while (atomic_load(&worker_ops) < at_open + 30) tu_sleep_us(1000);
  atomic_store(&stop_workers, 1);
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  tu_close_ok(&t2);
  assert_int_equal(t.close_rc, 0);
  tu_load(&t); /* valid JSON, tree invariants hold */
  size_t n_outer = tu_count(&t, "worker_outer"), n_inner = tu_count(&t, "worker_inner");
  /* Every op completed before close is there; at most one outer per worker was open at
   * close with its inner not begun yet. */
  if (n_outer < 300 || n_inner + 3 < n_outer)
    fail_msg("worker_outer %zu, worker_inner %zu", n_outer, n_inner);
  size_t i;
  json_t *node;
  json_array_foreach(t.nodes, i, node) {
    if (strcmp(tu_name(node), "worker_inner") != 0) continue;
    json_t *p = tu_node_by_id(&t, tu_ctrl_deps(node));
    assert_non_null(p);
    assert_string_equal(tu_name(p), "worker_outer");
  }
  assert_int_equal(tu_stat(&t, "nodes_dropped"), 0);
  /* The second trace: the workers' threads got their own thread nodes there too. */
  assert_true(tu_count(&t2, TU_THREAD_NAME) >= 1);
  tu_free(&t);
  tu_free(&t2);
}

/* Calls on other threads while the main thread closes the trace (trace.h: a call that close
 * overtakes returns ETR_ESTATE, one made after close returned gets ETR_ESTATE, and close
 * waits for the calls in progress before it frees the trace). Until 2026-11-27 a flush or
 * dump racing close used the mutex close had destroyed and hung for good, in the first
 * round: a watchdog (SIGALRM's default action) ends a hang as a failure. */
enum { CALL_FLUSH, CALL_DUMP, CALL_EVERY };
typedef struct {
  etr_trace *tr;
  int what;
  atomic_int calls;  /* calls made */
  atomic_int estate; /* calls that returned ETR_ESTATE */
  atomic_int bad;    /* calls whose result the docs do not allow */
  atomic_int bad_rc; /* (the last of them) */
} close_caller;
static atomic_int callers_stop;
static atomic_int trace_closed; /* set once etr_trace_close returned */

static void caller_check(close_caller *c, bool after_close, int rc, bool ok) {
  if (rc == ETR_ESTATE) atomic_fetch_add(&c->estate, 1);
  /* (a call begun after close returned must see the handle closed) */
  if (!ok || (after_close && rc != ETR_ESTATE)) {
    atomic_fetch_add(&c->bad, 1);
    atomic_store(&c->bad_rc, rc);
  }
}

static void *close_caller_loop(void *p) {
  close_caller *c = p;
  etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
  for (unsigned i = 0; !atomic_load(&callers_stop); i++) {
    bool after = atomic_load(&trace_closed) != 0;
    unsigned what = c->what == CALL_EVERY ? i % 7 : (unsigned)c->what;
    int rc;
    switch (what) {
      case CALL_FLUSH:
        rc = etr_trace_flush(c->tr);
        caller_check(c, after, rc, rc == 0 || rc == ETR_ESTATE);
        break;
      case CALL_DUMP:
        rc = etr_trace_dump(c->tr);
        caller_check(c, after, rc, rc == 0 || rc == ETR_ESTATE);
        break;
      case 2: {
        etr_trace_stats st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        rc = etr_trace_stats_get(c->tr, &st); /* (a closed trace's: the final counters) */
        caller_check(c, false, rc, rc == 0);
        break;
      }
      case 3: {
        bool on = etr_trace_is_enabled(c->tr);
        caller_check(c, false, 0, !(after && on));
        break;
      }
      case 4:
        rc = etr_trace_enable(c->tr);
        caller_check(c, after, rc, rc == 0 || rc == ETR_ESTATE);
        break;
      case 5:
        rc = etr_trace_disable(c->tr);
        caller_check(c, after, rc, rc == 0 || rc == ETR_ESTATE);
        break;
      default:
        tb.enabled = (i & 8) != 0;
        rc = etr_trace_set_traceback(c->tr, &tb);
        caller_check(c, after, rc, rc == 0 || rc == ETR_ESTATE);
        break;
    }
    atomic_fetch_add(&c->calls, 1);
  }
  return NULL;
}

static void calls_during_close(int what, uint32_t ring_mb) {
  enum { ROUNDS = 50, THREADS = 4 };
  alarm(60); /* (the whole loop takes well under a second here) */
  int estate = 0;
  for (int round = 0; round < ROUNDS; round++) {
    tu_trace t;
    etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
    opt.ring_mb = ring_mb;
    tu_open(&t, &opt);
    tu_op("before_close", NULL, 0, NULL, 0);
    atomic_store(&callers_stop, 0);
    atomic_store(&trace_closed, 0);
    close_caller c[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
      c[i] = (close_caller){.tr = t.trace, .what = what};
      assert_int_equal(pthread_create(&th[i], NULL, close_caller_loop, &c[i]), 0);
    }
    if (round % 2) /* (half the rounds: the calls under way first) */
      for (int i = 0; i < THREADS; i++)
        while (atomic_load(&c[i].calls) == 0) tu_sleep_us(100);
    t.close_rc = etr_trace_close(t.trace);
    t.trace = NULL;
    atomic_store(&trace_closed, 1);
    int seen[THREADS];
    for (int i = 0; i < THREADS; i++) seen[i] = atomic_load(&c[i].calls);
    /* every caller makes a few calls on the closed handle too */
    for (int i = 0; i < THREADS; i++)
      while (atomic_load(&c[i].calls) < seen[i] + 2) tu_sleep_us(100);
    atomic_store(&callers_stop, 1);
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < THREADS; i++) {
      if (atomic_load(&c[i].bad))
        fail_msg("round %d, caller %d: %d calls returned what the docs do not allow (%d: %s)",
                 round, i, atomic_load(&c[i].bad), atomic_load(&c[i].bad_rc),
                 etr_strerror(atomic_load(&c[i].bad_rc)));
      estate += atomic_load(&c[i].estate);
    }
    assert_int_equal(t.close_rc, 0);
    tu_load(&t); /* valid JSON, tree invariants hold */
    assert_int_equal(tu_count(&t, "before_close"), 1);
    tu_free(&t);
  }
  alarm(0);
  if (what != CALL_EVERY) assert_true(estate >= ROUNDS * THREADS * 2);
}

static void test_flush_during_close(void **state) {
  (void)state;
  calls_during_close(CALL_FLUSH, 0);
}

static void test_dump_during_close_ring(void **state) {
  (void)state;
  calls_during_close(CALL_DUMP, 1);
}

static void test_every_call_during_close(void **state) {
  (void)state;
  calls_during_close(CALL_EVERY, 0);
}

static void test_second_open_busy(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  char p2[600];
  snprintf(p2, sizeof p2, "%s/second.json", t.dir);
  etr_trace *other = (etr_trace *)0x1;
  assert_int_equal(etr_trace_open(p2, NULL, &other), ETR_EBUSY);
  assert_int_equal(access(p2, F_OK), -1);
  tu_op("still_fine", NULL, 0, NULL, 0);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "still_fine"), 1);
  /* Once closed, opening works again. */
  etr_trace *again = NULL;
  assert_int_equal(etr_trace_open(p2, NULL, &again), 0);
  assert_non_null(again);
  assert_int_equal(etr_trace_close(again), 0);
  tu_trace t3;
  tu_load_path(&t3, p2);
  assert_int_equal(tu_node_count(&t3), 1); /* just the process node */
  tu_free(&t3);
  tu_free(&t);
}

static void test_null_handles(void **state) {
  (void)state;
  assert_int_equal(etr_trace_close(NULL), 0);
  assert_true(etr_trace_enable(NULL) < 0);
  assert_true(etr_trace_disable(NULL) < 0);
  assert_false(etr_trace_is_enabled(NULL));
  assert_true(etr_trace_flush(NULL) < 0);
  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  assert_true(etr_trace_stats_get(NULL, &st) < 0);
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(NULL, NULL, &tr), ETR_EINVAL);
  assert_null(tr);
  char dir[256], path[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/x.json", dir);
  assert_int_equal(etr_trace_open(path, NULL, NULL), ETR_EINVAL);
  tu_rmdir(dir);
  /* Recording with no trace: nothing happens. */
  tu_op("no_trace", NULL, 0, NULL, 0);
  assert_null(etr_trace_current());
}

static void test_enable_disable_repeat(void **state) {
  (void)state;
  tu_trace t;
  tu_open_disabled(&t, NULL);
  assert_false(etr_trace_is_enabled(t.trace));
  tu_op("before_enable", NULL, 0, NULL, 0);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(etr_trace_enable(t.trace), 0);
    assert_int_equal(etr_trace_enable(t.trace), 0); /* idempotent */
    tu_op("on", NULL, 0, NULL, 0);
    assert_int_equal(etr_trace_disable(t.trace), 0);
    assert_int_equal(etr_trace_disable(t.trace), 0);
    tu_op("off", NULL, 0, NULL, 0);
  }
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "before_enable"), 0);
  assert_int_equal(tu_count(&t, "on"), 5);
  assert_int_equal(tu_count(&t, "off"), 0);
  assert_int_equal(tu_count(&t, TU_THREAD_NAME), 1);
  tu_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_end_without_begin),
      TU_TEST(test_end_out_of_order),
      TU_TEST(test_open_at_disable),
      TU_TEST(test_open_at_close),
      TU_TEST(test_thread_exit_open),
      TU_TEST(test_close_while_recording),
      TU_TEST(test_flush_during_close),
      TU_TEST(test_dump_during_close_ring),
      TU_TEST(test_every_call_during_close),
      TU_TEST(test_second_open_busy),
      TU_TEST(test_null_handles),
      TU_TEST(test_enable_disable_repeat),
      TU_TEST(test_end_on_other_thread),
      TU_TEST(test_end_on_other_thread_then_own),
  };
  return cmocka_run_group_tests_name("trace_misuse", tests, NULL, NULL);
}
