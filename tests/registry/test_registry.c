/* Unit tests of the observer registry and the record life cycle (etr/observer.h,
 * etr/record.h; docs/API.md).
 *
 * The registry is process-wide state: every test removes the observers it added (teardown),
 * and counters are compared as deltas. Callbacks running on other threads never call cmocka
 * asserts; they record what they saw and the main thread asserts after joining.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <etr/etr.h>

/* ---- helpers ---------------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Wait until *flag == value; false after timeout_s seconds. */
static bool wait_flag(atomic_int *flag, int value, double timeout_s) {
  double deadline = now_s() + timeout_s;
  while (atomic_load(flag) != value) {
    if (now_s() > deadline) return false;
    sleep_ms(1);
  }
  return true;
}

static etr_registry_stats stats_now(void) {
  etr_registry_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  int rc = etr_registry_stats_get(&s);
  assert_int_equal(rc, 0);
  return s;
}

/* Handles added by the current test; teardown removes them (ETR_ENOENT is fine). */
static etr_observer_id g_handles[512];
static size_t g_nhandles;

static void track(etr_observer_id id) {
  assert_true(g_nhandles < sizeof g_handles / sizeof g_handles[0]);
  g_handles[g_nhandles++] = id;
}

static int teardown(void **state) {
  (void)state;
  for (size_t i = 0; i < g_nhandles; i++) (void)etr_observer_remove(g_handles[i]);
  g_nhandles = 0;
  return 0;
}

/* A counting observer. Counters are atomic so that tests with several threads may share it. */
typedef struct counter {
  _Atomic uint64_t enters;
  _Atomic uint64_t exits;
  const etr_record *last_enter;
  const etr_record *last_exit;
  uint64_t last_handle;
  uint64_t last_tid;          /* etr_thread_id() of the thread of the last callback */
  _Atomic uint64_t wrong_tid; /* callbacks on a thread other than expect_tid (when set) */
  uint64_t expect_tid;
} counter;

static void counter_enter(const etr_record *rec, void *user) {
  counter *c = user;
  c->last_enter = rec;
  c->last_handle = etr_record_handle(rec);
  c->last_tid = etr_thread_id();
  if (c->expect_tid != 0 && c->last_tid != c->expect_tid) atomic_fetch_add(&c->wrong_tid, 1);
  atomic_fetch_add(&c->enters, 1);
}

static void counter_exit(const etr_record *rec, void *user) {
  counter *c = user;
  c->last_exit = rec;
  c->last_tid = etr_thread_id();
  if (c->expect_tid != 0 && c->last_tid != c->expect_tid) atomic_fetch_add(&c->wrong_tid, 1);
  atomic_fetch_add(&c->exits, 1);
}

static etr_observer_options counter_opts(counter *c) {
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = counter_enter;
  o.exit = counter_exit;
  o.user = c;
  return o;
}

static etr_observer_id add_opts(const etr_observer_options *o) {
  etr_observer_id id = 0;
  int rc = etr_observer_add(o, &id);
  assert_int_equal(rc, 0);
  assert_true(id != 0);
  track(id);
  return id;
}

static etr_observer_id add_counter(counter *c) {
  etr_observer_options o = counter_opts(c);
  return add_opts(&o);
}

static uint64_t enters(counter *c) { return atomic_load(&c->enters); }
static uint64_t exits(counter *c) { return atomic_load(&c->exits); }

/* One complete op on the calling thread; returns whether it was active after init. */
static bool record_op(const char *name, etr_scope scope) {
  etr_record r;
  etr_record_init(&r, name, scope);
  bool active = etr_record_is_active(&r);
  etr_record_begin(&r);
  etr_record_end(&r);
  return active;
}

/* ---- handles: add / enable / disable / remove ------------------------------------------- */

static void test_handle_life_cycle(void **state) {
  (void)state;
  counter c = {0};
  etr_registry_stats s0 = stats_now();

  etr_observer_id h = add_counter(&c);
  assert_int_equal(etr_observer_is_enabled(h), 1);
  assert_int_equal(stats_now().observers, s0.observers + 1);
  record_op("a", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&c), 1);
  assert_int_equal(exits(&c), 1);

  /* disable / enable, each idempotent */
  assert_int_equal(etr_observer_disable(h), 0);
  assert_int_equal(etr_observer_is_enabled(h), 0);
  assert_int_equal(etr_observer_disable(h), 0);
  assert_int_equal(etr_observer_is_enabled(h), 0);
  record_op("b", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&c), 1);
  assert_int_equal(exits(&c), 1);
  assert_int_equal(etr_observer_enable(h), 0);
  assert_int_equal(etr_observer_enable(h), 0);
  assert_int_equal(etr_observer_is_enabled(h), 1);
  record_op("c", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&c), 2);
  assert_int_equal(exits(&c), 2);

  /* remove: the handle goes stale for every call */
  assert_int_equal(etr_observer_remove(h), 0);
  assert_int_equal(stats_now().observers, s0.observers);
  assert_int_equal(etr_observer_is_enabled(h), ETR_ENOENT);
  assert_int_equal(etr_observer_enable(h), ETR_ENOENT);
  assert_int_equal(etr_observer_disable(h), ETR_ENOENT);
  assert_int_equal(etr_observer_remove(h), ETR_ENOENT);
  record_op("d", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&c), 2);
  assert_int_equal(exits(&c), 2);
}

static void test_start_disabled(void **state) {
  (void)state;
  counter c = {0};
  etr_observer_options o = counter_opts(&c);
  o.start_disabled = true;
  etr_observer_id h = add_opts(&o);
  assert_int_equal(etr_observer_is_enabled(h), 0);
  assert_false(record_op("x", ETR_SCOPE_FUNCTION));
  assert_int_equal(enters(&c), 0);
  assert_int_equal(exits(&c), 0);
  assert_int_equal(etr_observer_enable(h), 0);
  assert_true(record_op("x", ETR_SCOPE_FUNCTION));
  assert_int_equal(enters(&c), 1);
  assert_int_equal(exits(&c), 1);
}

/* A handle stays stale when its slot is reused by later observers, however often. */
static void test_stale_handle_after_slot_reuse(void **state) {
  (void)state;
  enum { N = 300 };
  static etr_observer_id old[N];
  counter live = {0}, c = {0};
  etr_observer_options o = counter_opts(&c);
  for (int i = 0; i < N; i++) {
    assert_int_equal(etr_observer_add(&o, &old[i]), 0);
    assert_true(old[i] != 0);
    for (int j = 0; j < i; j++) assert_true(old[j] != old[i]);
    assert_int_equal(etr_observer_remove(old[i]), 0);
  }
  etr_observer_id h = add_counter(&live);
  for (int i = 0; i < N; i++) {
    assert_true(old[i] != h);
    assert_int_equal(etr_observer_is_enabled(old[i]), ETR_ENOENT);
    assert_int_equal(etr_observer_disable(old[i]), ETR_ENOENT);
    assert_int_equal(etr_observer_enable(old[i]), ETR_ENOENT);
    assert_int_equal(etr_observer_remove(old[i]), ETR_ENOENT);
  }
  /* None of the stale calls touched the live observer that may sit in the same slot. */
  assert_int_equal(etr_observer_is_enabled(h), 1);
  record_op("live", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&live), 1);
  assert_int_equal(exits(&live), 1);
  assert_int_equal(enters(&c), 0);
}

static void test_invalid_handles(void **state) {
  (void)state;
  /* 0 is never a valid handle; made-up handles are not either. */
  int rc = etr_observer_enable(0);
  assert_true(rc == ETR_ENOENT || rc == ETR_EINVAL);
  rc = etr_observer_remove(0);
  assert_true(rc == ETR_ENOENT || rc == ETR_EINVAL);
  rc = etr_observer_is_enabled(0);
  assert_true(rc == ETR_ENOENT || rc == ETR_EINVAL);
  const etr_observer_id bogus[] = {
      1, 2, 63, 64, 65, UINT64_MAX, UINT64_MAX - 1, 0x8000000000000000ull, 0xdeadbeefcafef00dull};
  for (size_t i = 0; i < sizeof bogus / sizeof bogus[0]; i++) {
    /* With no observer added, no handle at all can be valid. */
    assert_int_equal(etr_observer_enable(bogus[i]), ETR_ENOENT);
    assert_int_equal(etr_observer_disable(bogus[i]), ETR_ENOENT);
    assert_int_equal(etr_observer_is_enabled(bogus[i]), ETR_ENOENT);
    assert_int_equal(etr_observer_remove(bogus[i]), ETR_ENOENT);
  }
}

static void test_add_bad_options(void **state) {
  (void)state;
  counter c = {0};
  etr_observer_id id = 0;
  uint32_t n0 = stats_now().observers;

  assert_int_equal(etr_observer_add(NULL, &id), ETR_EINVAL);
  etr_observer_options o = counter_opts(&c);
  assert_int_equal(etr_observer_add(&o, NULL), ETR_EINVAL);

  const double bad_p[] = {-0.1, -1.0, 1.0000001, 2.0, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad_p / sizeof bad_p[0]; i++) {
    o = counter_opts(&c);
    o.sample_probability = bad_p[i];
    id = 0;
    assert_int_equal(etr_observer_add(&o, &id), ETR_EINVAL);
  }
  o = counter_opts(&c);
  o.struct_size = 1; /* cannot even hold the first field */
  assert_int_equal(etr_observer_add(&o, &id), ETR_EINVAL);

  /* Failed adds left nothing behind. */
  assert_int_equal(stats_now().observers, n0);
  record_op("nothing", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&c), 0);

  assert_int_equal(etr_registry_stats_get(NULL), ETR_EINVAL);
  /* struct_size 0 means sizeof(etr_registry_stats) */
  etr_registry_stats s;
  memset(&s, 0xff, sizeof s);
  s.struct_size = 0;
  assert_int_equal(etr_registry_stats_get(&s), 0);
  assert_int_equal(s.observers, n0);
}

/* ---- 64 observers at once --------------------------------------------------------------- */

typedef struct log_ent {
  int idx;
  char kind;
  const etr_record *rec;
} log_ent;
static log_ent g_log[2048];
static int g_nlog;

static void log_enter(const etr_record *rec, void *user) {
  if (g_nlog < 2048) g_log[g_nlog++] = (log_ent){*(const int *)user, 'E', rec};
}
static void log_exit(const etr_record *rec, void *user) {
  if (g_nlog < 2048) g_log[g_nlog++] = (log_ent){*(const int *)user, 'X', rec};
}

/* Checks g_log[from .. from+n) holds each of the n observers idx[] once, of the given kind,
 * for rec; writes the order seen to order[]. */
static void check_block(int from, int n, char kind, const etr_record *rec, const bool *expected,
                        int *order) {
  bool seen[ETR_MAX_OBSERVERS + 1] = {false};
  for (int i = 0; i < n; i++) {
    const log_ent *e = &g_log[from + i];
    assert_int_equal(e->kind, kind);
    assert_ptr_equal(e->rec, rec);
    assert_in_range(e->idx, 0, ETR_MAX_OBSERVERS);
    assert_true(expected[e->idx]);
    assert_false(seen[e->idx]);
    seen[e->idx] = true;
    order[i] = e->idx;
  }
}

static void test_max_observers(void **state) {
  (void)state;
  static int idx[ETR_MAX_OBSERVERS + 1];
  static etr_observer_id h[ETR_MAX_OBSERVERS + 1];
  bool expected[ETR_MAX_OBSERVERS + 1] = {false};
  int enter_order[ETR_MAX_OBSERVERS], exit_order[ETR_MAX_OBSERVERS];
  int order2[ETR_MAX_OBSERVERS];
  const int n = ETR_MAX_OBSERVERS;

  assert_true(n >= 64);
  /* Needs a registry with nothing added (ETR_TRACE in the environment adds one). */
  if (stats_now().observers != 0 && getenv("ETR_TRACE") != NULL) skip();
  assert_int_equal(stats_now().observers, 0);

  for (int i = 0; i < n; i++) {
    idx[i] = i;
    etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
    o.enter = log_enter;
    o.exit = log_exit;
    o.user = &idx[i];
    h[i] = add_opts(&o);
    expected[i] = true;
  }
  assert_int_equal(stats_now().observers, n);

  /* The 65th does not fit, and its failure changes nothing. */
  idx[n] = n;
  etr_observer_options o65 = ETR_OBSERVER_OPTIONS_INIT;
  o65.enter = log_enter;
  o65.exit = log_exit;
  o65.user = &idx[n];
  etr_observer_id extra = 0;
  assert_int_equal(etr_observer_add(&o65, &extra), ETR_ENOSPC);
  assert_int_equal(stats_now().observers, n);

  /* One record: every observer enters once, then every one exits once. */
  uint64_t obs0 = stats_now().records_observed;
  g_nlog = 0;
  etr_record r;
  etr_record_init(&r, "all", ETR_SCOPE_FUNCTION);
  assert_true(etr_record_is_active(&r));
  etr_record_begin(&r);
  assert_int_equal(g_nlog, n);
  etr_record_end(&r);
  assert_int_equal(g_nlog, 2 * n);
  check_block(0, n, 'E', &r, expected, enter_order);
  check_block(n, n, 'X', &r, expected, exit_order);
  assert_int_equal(stats_now().records_observed, obs0 + 1);

  /* Exit order is the enter order or its reverse. */
  bool same = true, reversed = true;
  for (int i = 0; i < n; i++) {
    if (exit_order[i] != enter_order[i]) same = false;
    if (exit_order[i] != enter_order[n - 1 - i]) reversed = false;
  }
  assert_true(same || reversed);

  /* The order is defined: a nested pair of records repeats it exactly. */
  g_nlog = 0;
  etr_record outer, inner;
  etr_record_init(&outer, "outer", ETR_SCOPE_FUNCTION);
  etr_record_begin(&outer);
  etr_record_init(&inner, "inner", ETR_SCOPE_FUNCTION);
  etr_record_begin(&inner);
  etr_record_end(&inner);
  etr_record_end(&outer);
  assert_int_equal(g_nlog, 4 * n);
  check_block(0, n, 'E', &outer, expected, order2);
  assert_memory_equal(order2, enter_order, sizeof order2);
  check_block(n, n, 'E', &inner, expected, order2);
  assert_memory_equal(order2, enter_order, sizeof order2);
  check_block(2 * n, n, 'X', &inner, expected, order2);
  assert_memory_equal(order2, exit_order, sizeof order2);
  check_block(3 * n, n, 'X', &outer, expected, order2);
  assert_memory_equal(order2, exit_order, sizeof order2);

  /* Removing one frees a slot for exactly one more. */
  assert_int_equal(etr_observer_remove(h[17]), 0);
  expected[17] = false;
  h[n] = add_opts(&o65);
  expected[n] = true;
  assert_int_equal(etr_observer_add(&o65, &extra), ETR_ENOSPC);
  assert_int_equal(stats_now().observers, n);

  g_nlog = 0;
  etr_record_init(&r, "after", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  assert_int_equal(g_nlog, 2 * n);
  check_block(0, n, 'E', &r, expected, order2);
  check_block(n, n, 'X', &r, expected, order2);
}

/* ---- enter/exit pairing ----------------------------------------------------------------- */

typedef struct stack_obs {
  const etr_record *stack[16];
  int depth;
  int mismatches;
  int enters, exits;
  const char *names[16];
  uint32_t scopes[16];
  uint64_t handles[16];
} stack_obs;

static void stack_enter(const etr_record *rec, void *user) {
  stack_obs *s = user;
  if (s->depth < 16) {
    s->names[s->enters % 16] = rec->name;
    s->scopes[s->enters % 16] = rec->scope;
    s->handles[s->enters % 16] = etr_record_handle(rec);
    s->stack[s->depth++] = rec;
  }
  s->enters++;
}

static void stack_exit(const etr_record *rec, void *user) {
  stack_obs *s = user;
  if (s->depth == 0 || s->stack[s->depth - 1] != rec)
    s->mismatches++;
  else
    s->depth--;
  s->exits++;
}

static void test_enter_exit_same_record(void **state) {
  (void)state;
  stack_obs s = {0};
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = stack_enter;
  o.exit = stack_exit;
  o.user = &s;
  add_opts(&o);

  etr_record a, b, c;
  etr_record_init(&a, "op::a", ETR_SCOPE_FUNCTION);
  etr_record_begin(&a);
  assert_int_equal(s.enters, 1);
  assert_ptr_equal(s.stack[0], &a);
  etr_record_init(&b, "op::b", ETR_SCOPE_BACKWARD_FUNCTION);
  etr_record_begin(&b);
  etr_record_init(&c, "op::c", ETR_SCOPE_USER_SCOPE);
  etr_record_begin(&c);
  assert_int_equal(s.depth, 3);
  etr_record_end(&c);
  etr_record_end(&b);
  etr_record_end(&a);
  assert_int_equal(s.enters, 3);
  assert_int_equal(s.exits, 3);
  assert_int_equal(s.mismatches, 0);
  assert_int_equal(s.depth, 0);

  /* The callbacks saw the record's fields. */
  assert_string_equal(s.names[0], "op::a");
  assert_string_equal(s.names[1], "op::b");
  assert_string_equal(s.names[2], "op::c");
  assert_int_equal(s.scopes[0], ETR_SCOPE_FUNCTION);
  assert_int_equal(s.scopes[1], ETR_SCOPE_BACKWARD_FUNCTION);
  assert_int_equal(s.scopes[2], ETR_SCOPE_USER_SCOPE);
  /* Each active record has its own non-zero handle. */
  for (int i = 0; i < 3; i++) {
    assert_true(s.handles[i] != 0);
    for (int j = 0; j < i; j++) assert_true(s.handles[i] != s.handles[j]);
  }
}

/* An op that began while the observer was enabled gets its exit after a disable. */
static void test_exit_after_disable(void **state) {
  (void)state;
  counter c = {0};
  etr_observer_id h = add_counter(&c);

  etr_record outer;
  etr_record_init(&outer, "outer", ETR_SCOPE_FUNCTION);
  etr_record_begin(&outer);
  assert_int_equal(enters(&c), 1);
  assert_int_equal(etr_observer_disable(h), 0);

  /* Nothing is enabled now: an op inside is not observed at all. */
  etr_record inner;
  etr_record_init(&inner, "inner", ETR_SCOPE_FUNCTION);
  assert_false(etr_record_is_active(&inner));
  etr_record_begin(&inner);
  etr_record_end(&inner);
  assert_int_equal(enters(&c), 1);
  assert_int_equal(exits(&c), 0);

  etr_record_end(&outer);
  assert_int_equal(exits(&c), 1);
  assert_ptr_equal(c.last_exit, &outer);

  /* Same, with a disable then re-enable in between: still exactly one exit. */
  assert_int_equal(etr_observer_enable(h), 0);
  etr_record_init(&outer, "outer2", ETR_SCOPE_FUNCTION);
  etr_record_begin(&outer);
  assert_int_equal(etr_observer_disable(h), 0);
  assert_int_equal(etr_observer_enable(h), 0);
  etr_record_end(&outer);
  assert_int_equal(enters(&c), 2);
  assert_int_equal(exits(&c), 2);
}

/* An op that began while the observer was disabled gets no exit if it is enabled before the
 * op ends. */
static void test_no_exit_when_enabled_midway(void **state) {
  (void)state;
  counter c = {0}, other = {0};

  /* Case 1: nothing at all enabled when the op began. */
  etr_observer_options o = counter_opts(&c);
  o.start_disabled = true;
  etr_observer_id h = add_opts(&o);
  etr_record r;
  etr_record_init(&r, "r1", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  assert_int_equal(etr_observer_enable(h), 0);
  etr_record_end(&r);
  assert_int_equal(enters(&c), 0);
  assert_int_equal(exits(&c), 0);

  /* Case 2: another observer is enabled, so the record is live; ours is not in it. */
  assert_int_equal(etr_observer_disable(h), 0);
  add_counter(&other);
  etr_record_init(&r, "r2", ETR_SCOPE_FUNCTION);
  assert_true(etr_record_is_active(&r));
  etr_record_begin(&r);
  assert_int_equal(etr_observer_enable(h), 0);
  etr_record_end(&r);
  assert_int_equal(enters(&c), 0);
  assert_int_equal(exits(&c), 0);
  assert_int_equal(enters(&other), 1);
  assert_int_equal(exits(&other), 1);

  /* Case 3: enabled between init and begin of a live record: still not entered mid-op, and
   * in any case never an exit without its enter. */
  assert_int_equal(etr_observer_disable(h), 0);
  etr_record_init(&r, "r3", ETR_SCOPE_FUNCTION);
  assert_int_equal(etr_observer_enable(h), 0);
  etr_record_begin(&r);
  etr_record_end(&r);
  assert_int_equal(enters(&c), exits(&c));

  /* A later op sees it normally. */
  uint64_t e = enters(&c);
  record_op("r4", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&c), e + 1);
  assert_int_equal(exits(&c), e + 1);
}

/* An op in flight when its observer is removed and the slot is taken by a new observer: the
 * new one gets no exit for an enter it never saw; the others get theirs. The registry is
 * filled so that the new observer must land in the freed slot. */
static void test_slot_reuse_during_op(void **state) {
  (void)state;
  counter fill = {0}, a = {0}, b = {0};
  uint32_t base = stats_now().observers;
  int n_fill = ETR_MAX_OBSERVERS - (int)base - 1;
  for (int i = 0; i < n_fill; i++) add_counter(&fill);
  etr_observer_id ha = add_counter(&a);
  etr_observer_id extra;
  etr_observer_options ob = counter_opts(&b);
  assert_int_equal(etr_observer_add(&ob, &extra), ETR_ENOSPC);

  etr_record r;
  etr_record_init(&r, "in_flight", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  assert_int_equal(enters(&a), 1);
  assert_int_equal(enters(&fill), (uint64_t)n_fill);

  assert_int_equal(etr_observer_remove(ha), 0);
  add_opts(&ob); /* necessarily the slot a had */
  etr_record_end(&r);
  assert_int_equal(exits(&a), 0); /* removed: no exit */
  assert_int_equal(enters(&b), 0);
  assert_int_equal(exits(&b), 0); /* never an exit without its enter */
  assert_int_equal(exits(&fill), (uint64_t)n_fill);

  record_op("next", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&b), 1);
  assert_int_equal(exits(&b), 1);
}

/* The same with one observer, the registry's direct path: its slot removed and taken by
 * another between begin and end. */
static void test_slot_reuse_during_op_alone(void **state) {
  (void)state;
  assert_int_equal(stats_now().observers, 0);
  counter a = {0}, b = {0};
  etr_observer_id ha = add_counter(&a);
  etr_record r;
  etr_record_init(&r, "in_flight", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  assert_int_equal(enters(&a), 1);
  assert_int_equal(etr_observer_remove(ha), 0);
  etr_observer_options ob = counter_opts(&b);
  add_opts(&ob);
  etr_record_end(&r);
  assert_int_equal(exits(&a), 0);
  assert_int_equal(enters(&b), 0);
  assert_int_equal(exits(&b), 0);
  record_op("next", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&b), 1);
  assert_int_equal(exits(&b), 1);
  assert_int_equal(enters(&a), 1);
}

/* ---- needs and the disabled path -------------------------------------------------------- */

typedef struct needs_seen {
  bool in, out, active;
} needs_seen;

static needs_seen needs_of_new_record(etr_scope scope) {
  etr_record r;
  etr_record_init(&r, "needs", scope);
  needs_seen n = {etr_record_needs_inputs(&r), etr_record_needs_outputs(&r),
                  etr_record_is_active(&r)};
  etr_record_begin(&r);
  etr_record_end(&r);
  return n;
}

static void test_needs_union(void **state) {
  (void)state;
  counter ci = {0}, co = {0}, cn = {0};
  etr_observer_options o = counter_opts(&ci);
  o.needs = ETR_NEEDS_INPUTS;
  etr_observer_id hi = add_opts(&o);
  o = counter_opts(&co);
  o.needs = ETR_NEEDS_OUTPUTS;
  etr_observer_id ho = add_opts(&o);
  o = counter_opts(&cn);
  o.needs = 0;
  etr_observer_id hn = add_opts(&o);

  needs_seen n = needs_of_new_record(ETR_SCOPE_FUNCTION);
  assert_true(n.active);
  assert_true(n.in);
  assert_true(n.out);

  assert_int_equal(etr_observer_disable(ho), 0);
  n = needs_of_new_record(ETR_SCOPE_FUNCTION);
  assert_true(n.active);
  assert_true(n.in);
  assert_false(n.out);

  assert_int_equal(etr_observer_disable(hi), 0);
  assert_int_equal(etr_observer_enable(ho), 0);
  n = needs_of_new_record(ETR_SCOPE_FUNCTION);
  assert_true(n.active);
  assert_false(n.in);
  assert_true(n.out);

  assert_int_equal(etr_observer_disable(ho), 0);
  n = needs_of_new_record(ETR_SCOPE_FUNCTION);
  assert_true(n.active); /* cn needs nothing, but observes */
  assert_false(n.in);
  assert_false(n.out);

  assert_int_equal(etr_observer_disable(hn), 0);
  n = needs_of_new_record(ETR_SCOPE_FUNCTION);
  assert_false(n.active);
  assert_false(n.in);
  assert_false(n.out);

  /* Removed observers' needs are gone too. */
  assert_int_equal(etr_observer_enable(hi), 0);
  assert_int_equal(etr_observer_remove(hi), 0);
  assert_int_equal(etr_observer_enable(hn), 0);
  n = needs_of_new_record(ETR_SCOPE_FUNCTION);
  assert_true(n.active);
  assert_false(n.in);
  assert_false(n.out);

  /* An observer that filters this scope out does not ask for anything on it. */
  counter cf = {0};
  o = counter_opts(&cf);
  o.needs = ETR_NEEDS_INPUTS | ETR_NEEDS_OUTPUTS;
  o.scopes = 1u << ETR_SCOPE_USER_SCOPE;
  add_opts(&o);
  n = needs_of_new_record(ETR_SCOPE_FUNCTION);
  assert_true(n.active);
  assert_false(n.in);
  assert_false(n.out);
  n = needs_of_new_record(ETR_SCOPE_USER_SCOPE);
  assert_true(n.active);
  assert_true(n.in);
  assert_true(n.out);
  assert_int_equal(enters(&cf), 1);
}

static void test_disabled_path_calls_nothing(void **state) {
  (void)state;
  counter c[3] = {{0}};
  etr_observer_id h[3];
  for (int i = 0; i < 3; i++) {
    etr_observer_options o = counter_opts(&c[i]);
    o.needs = ETR_NEEDS_INPUTS | ETR_NEEDS_OUTPUTS | ETR_NEEDS_IDS;
    o.start_disabled = (i == 0);
    h[i] = add_opts(&o);
  }
  assert_int_equal(etr_observer_disable(h[1]), 0);
  assert_int_equal(etr_observer_remove(h[2]), 0);

  etr_registry_stats s0 = stats_now();
  for (int i = 0; i < 1000; i++) {
    etr_record r;
    etr_record_init(&r, "off", (etr_scope)(i % ETR_SCOPE_COUNT));
    assert_false(etr_record_is_active(&r));
    assert_false(etr_record_needs_inputs(&r));
    assert_false(etr_record_needs_outputs(&r));
    etr_record_begin(&r);
    etr_record_end(&r);
  }
  etr_registry_stats s1 = stats_now();
  for (int i = 0; i < 3; i++) {
    assert_int_equal(enters(&c[i]), 0);
    assert_int_equal(exits(&c[i]), 0);
  }
  assert_int_equal(s1.records_observed, s0.records_observed);
  assert_int_equal(s1.ends_without_begin, s0.ends_without_begin);
  assert_int_equal(s1.begins_repeated, s0.begins_repeated);
}

/* ---- scope filter and sampling ---------------------------------------------------------- */

static void test_scope_filter(void **state) {
  (void)state;
  counter f = {0}, all = {0};
  etr_observer_options o = counter_opts(&f);
  o.scopes = (1u << ETR_SCOPE_BACKWARD_FUNCTION) | (1u << ETR_SCOPE_USER_SCOPE);
  etr_observer_id hf = add_opts(&o);

  for (int s = 0; s < ETR_SCOPE_COUNT; s++) {
    uint64_t e = enters(&f);
    bool active = record_op("scoped", (etr_scope)s);
    bool want = (s == ETR_SCOPE_BACKWARD_FUNCTION || s == ETR_SCOPE_USER_SCOPE);
    assert_int_equal(enters(&f) - e, want ? 1 : 0);
    assert_int_equal(active, want); /* the only observer: active iff it will see the op */
  }
  assert_int_equal(enters(&f), 2);
  assert_int_equal(exits(&f), 2);

  /* scopes == 0 accepts every scope. */
  assert_int_equal(etr_observer_remove(hf), 0);
  add_counter(&all);
  for (int s = 0; s < ETR_SCOPE_COUNT; s++) assert_true(record_op("any", (etr_scope)s));
  assert_int_equal(enters(&all), ETR_SCOPE_COUNT);
  assert_int_equal(exits(&all), ETR_SCOPE_COUNT);
}

static void test_sampling_half(void **state) {
  (void)state;
  enum { N = 100000 };
  counter c = {0};
  etr_observer_options o = counter_opts(&c);
  o.sample_probability = 0.5;
  add_opts(&o);

  long sampled = 0, pairs = 0, active_mismatch = 0;
  bool prev = false;
  for (int i = 0; i < N; i++) {
    uint64_t e0 = enters(&c);
    etr_record r;
    etr_record_init(&r, "sampled", ETR_SCOPE_FUNCTION);
    bool active = etr_record_is_active(&r);
    etr_record_begin(&r);
    etr_record_end(&r);
    bool entered = enters(&c) != e0;
    if (active != entered) active_mismatch++;
    if (entered) sampled++;
    if (entered && prev) pairs++;
    prev = entered;
  }
  /* Binomial(100000, 0.5): sd 158; 1000 is more than 6 sd. */
  print_message("sampled %ld of %d, consecutive pairs %ld\n", sampled, N, pairs);
  assert_in_range(sampled, N / 2 - 1000, N / 2 + 1000);
  /* Decisions look independent: consecutive pairs both sampled ~ N/4 (sd ~177). */
  assert_in_range(pairs, N / 4 - 1200, N / 4 + 1200);
  /* The only observer: a record is active exactly when it is going to be observed. */
  assert_int_equal(active_mismatch, 0);
  assert_int_equal(exits(&c), enters(&c));
}

static void test_sampling_all(void **state) {
  (void)state;
  enum { N = 10000 };
  counter c1 = {0}, c0 = {0};
  etr_observer_options o = counter_opts(&c1);
  o.sample_probability = 1.0;
  add_opts(&o);
  o = counter_opts(&c0);
  o.sample_probability = 0.0;
  add_opts(&o);
  for (int i = 0; i < N; i++) assert_true(record_op("every", ETR_SCOPE_FUNCTION));
  assert_int_equal(enters(&c1), N);
  assert_int_equal(exits(&c1), N);
  assert_int_equal(enters(&c0), N);
  assert_int_equal(exits(&c0), N);
}

/* ---- thread-local observers ------------------------------------------------------------- */

typedef struct tl_ctx {
  counter *c;        /* observer of the other side */
  etr_observer_id h; /* handle added by the thread (test 2) */
  int add_rc;
  atomic_int step; /* handshake */
  int n_active;    /* records of this thread that were active */
  uint64_t tid;
} tl_ctx;

/* Thread that only records (the main thread owns a thread-local observer). */
static void *tl_recorder(void *arg) {
  tl_ctx *t = arg;
  t->tid = etr_thread_id();
  for (int i = 0; i < 100; i++)
    if (record_op("other", ETR_SCOPE_FUNCTION)) t->n_active++;
  return NULL;
}

static void test_thread_local_sees_own_thread(void **state) {
  (void)state;
  counter c = {0};
  etr_observer_options o = counter_opts(&c);
  o.thread_local_only = true;
  o.needs = ETR_NEEDS_INPUTS;
  c.expect_tid = etr_thread_id();
  add_opts(&o);

  tl_ctx t = {0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, tl_recorder, &t), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_true(t.tid != c.expect_tid);
  assert_int_equal(enters(&c), 0);
  assert_int_equal(exits(&c), 0);
  assert_int_equal(t.n_active, 0); /* nobody observes that thread */

  etr_record r;
  etr_record_init(&r, "mine", ETR_SCOPE_FUNCTION);
  assert_true(etr_record_is_active(&r));
  assert_true(etr_record_needs_inputs(&r));
  etr_record_begin(&r);
  etr_record_end(&r);
  assert_int_equal(enters(&c), 1);
  assert_int_equal(exits(&c), 1);
  assert_int_equal(atomic_load(&c.wrong_tid), 0);
}

/* Thread that adds a thread-local observer, records, and waits for the main thread. */
static void *tl_owner(void *arg) {
  tl_ctx *t = arg;
  t->tid = etr_thread_id();
  t->c->expect_tid = t->tid;
  etr_observer_options o = counter_opts(t->c);
  o.thread_local_only = true;
  o.needs = ETR_NEEDS_INPUTS | ETR_NEEDS_OUTPUTS;
  t->add_rc = etr_observer_add(&o, &t->h);
  for (int i = 0; i < 5; i++)
    if (record_op("owner", ETR_SCOPE_FUNCTION)) t->n_active++;
  atomic_store(&t->step, 1);
  /* Main records now and checks; then tells us to record more and exit. */
  wait_flag(&t->step, 2, 30.0);
  for (int i = 0; i < 5; i++)
    if (record_op("owner2", ETR_SCOPE_FUNCTION)) t->n_active++;
  return NULL; /* the observer must go away with this thread */
}

static void test_thread_local_removed_at_exit(void **state) {
  (void)state;
  counter c = {0};
  tl_ctx t = {0};
  t.c = &c;
  uint32_t n0 = stats_now().observers;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, tl_owner, &t), 0);
  bool ok = wait_flag(&t.step, 1, 30.0);
  if (!ok) atomic_store(&t.step, 2);
  assert_true(ok);
  assert_int_equal(t.add_rc, 0);
  track(t.h);
  assert_int_equal(etr_observer_is_enabled(t.h), 1);
  assert_int_equal(stats_now().observers, n0 + 1);
  assert_int_equal(enters(&c), 5);
  assert_int_equal(exits(&c), 5);

  /* The main thread is not observed by the other thread's observer, and gets no needs. */
  etr_record r;
  etr_record_init(&r, "main", ETR_SCOPE_FUNCTION);
  bool active = etr_record_is_active(&r), in = etr_record_needs_inputs(&r);
  etr_record_begin(&r);
  etr_record_end(&r);
  atomic_store(&t.step, 2);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_false(active);
  assert_false(in);

  assert_int_equal(t.n_active, 10);
  assert_int_equal(enters(&c), 10);
  assert_int_equal(exits(&c), 10);
  assert_int_equal(atomic_load(&c.wrong_tid), 0);

  /* Gone with its thread. */
  assert_int_equal(etr_observer_is_enabled(t.h), ETR_ENOENT);
  assert_int_equal(etr_observer_remove(t.h), ETR_ENOENT);
  assert_int_equal(stats_now().observers, n0);
  record_op("after", ETR_SCOPE_FUNCTION);
  assert_int_equal(enters(&c), 10);
}

/* ---- re-entrancy ------------------------------------------------------------------------ */

typedef struct reent {
  etr_observer_id self;
  int enters, exits;
  int inner_active; /* records made in callbacks that were active */
  int stats_rc;
  int is_enabled;
} reent;

static void reent_record(reent *re) {
  etr_record r;
  etr_record_init(&r, "inner::from_callback", ETR_SCOPE_FUNCTION);
  if (etr_record_is_active(&r)) re->inner_active++;
  etr_record_begin(&r);
  etr_record nested;
  etr_record_init(&nested, "inner::nested", ETR_SCOPE_USER_SCOPE);
  if (etr_record_is_active(&nested)) re->inner_active++;
  etr_record_begin(&nested);
  etr_record_end(&nested);
  etr_record_end(&r);
}

static void reent_enter(const etr_record *rec, void *user) {
  (void)rec;
  reent *re = user;
  re->enters++;
  reent_record(re);
  /* Control-plane calls from a callback do not deadlock. */
  etr_registry_stats s = {0};
  re->stats_rc = etr_registry_stats_get(&s);
  re->is_enabled = etr_observer_is_enabled(re->self);
}

static void reent_exit(const etr_record *rec, void *user) {
  (void)rec;
  reent *re = user;
  re->exits++;
  reent_record(re);
}

static void test_reentrant_records(void **state) {
  (void)state;
  reent re = {0};
  counter other = {0};
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = reent_enter;
  o.exit = reent_exit;
  o.user = &re;
  re.self = add_opts(&o);
  add_counter(&other);

  etr_registry_stats s0 = stats_now();
  etr_record r;
  etr_record_init(&r, "outer", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  etr_registry_stats s1 = stats_now();

  assert_int_equal(re.enters, 1);
  assert_int_equal(re.exits, 1);
  assert_int_equal(re.inner_active, 0);
  assert_int_equal(re.stats_rc, 0);
  assert_int_equal(re.is_enabled, 1);
  /* The other observer saw the outer op only. */
  assert_int_equal(enters(&other), 1);
  assert_int_equal(exits(&other), 1);
  assert_ptr_equal(other.last_enter, &r);
  assert_ptr_equal(other.last_exit, &r);
  /* Four records were made inside callbacks (two in each). */
  print_message("records_in_callbacks +%llu\n",
                (unsigned long long)(s1.records_in_callbacks - s0.records_in_callbacks));
  assert_true(s1.records_in_callbacks - s0.records_in_callbacks >= 2);
  assert_int_equal(s1.records_observed - s0.records_observed, 1);

  /* Recording still works normally afterwards (no thread state left "inside"). */
  record_op("after", ETR_SCOPE_FUNCTION);
  assert_int_equal(re.enters, 2);
  assert_int_equal(enters(&other), 2);
  assert_int_equal(exits(&other), 2);
}

typedef struct self_remove {
  etr_observer_id self;
  int enters, exits;
  int rc_enter, rc_exit;
  bool in_enter; /* remove in enter (else in exit) */
} self_remove;

static void sr_enter(const etr_record *rec, void *user) {
  (void)rec;
  self_remove *s = user;
  s->enters++;
  if (s->in_enter) s->rc_enter = etr_observer_remove(s->self);
}

static void sr_exit(const etr_record *rec, void *user) {
  (void)rec;
  self_remove *s = user;
  s->exits++;
  if (!s->in_enter) s->rc_exit = etr_observer_remove(s->self);
}

static void test_remove_self_in_callback(void **state) {
  (void)state;
  counter other = {0};
  add_counter(&other);

  for (int in_enter = 0; in_enter < 2; in_enter++) {
    self_remove s = {0};
    s.in_enter = in_enter != 0;
    s.rc_enter = s.rc_exit = 12345;
    etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
    o.enter = sr_enter;
    o.exit = sr_exit;
    o.user = &s;
    s.self = add_opts(&o);
    uint32_t n = stats_now().observers;

    uint64_t oe = enters(&other);
    record_op("self", ETR_SCOPE_FUNCTION);
    assert_int_equal(s.enters, 1);
    if (in_enter) {
      assert_int_equal(s.rc_enter, 0);
      assert_int_equal(s.exits, 0); /* removed: no exit (observer.h) */
    } else {
      assert_int_equal(s.rc_exit, 0);
      assert_int_equal(s.exits, 1);
    }
    assert_int_equal(etr_observer_is_enabled(s.self), ETR_ENOENT);
    assert_int_equal(stats_now().observers, n - 1);
    /* The other observer of the same op is undisturbed. */
    assert_int_equal(enters(&other), oe + 1);
    assert_int_equal(exits(&other), oe + 1);

    record_op("self2", ETR_SCOPE_FUNCTION);
    assert_int_equal(s.enters, 1);
    assert_int_equal(s.exits, in_enter ? 0 : 1);
  }
}

/* ---- misuse ----------------------------------------------------------------------------- */

static void test_misuse_counted(void **state) {
  (void)state;
  counter c = {0};
  add_counter(&c);
  etr_registry_stats s0 = stats_now();

  /* End without begin. */
  etr_record r;
  etr_record_init(&r, "no_begin", ETR_SCOPE_FUNCTION);
  etr_record_end(&r);
  etr_registry_stats s1 = stats_now();
  assert_int_equal(s1.ends_without_begin, s0.ends_without_begin + 1);
  assert_int_equal(enters(&c), 0);
  assert_int_equal(exits(&c), 0);

  /* Double end: one exit, one count. */
  etr_record_init(&r, "double_end", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  etr_record_end(&r);
  etr_registry_stats s2 = stats_now();
  assert_int_equal(s2.ends_without_begin, s1.ends_without_begin + 1);
  assert_int_equal(enters(&c), 1);
  assert_int_equal(exits(&c), 1);

  /* Begin twice: one enter, one exit, one count. */
  etr_record_init(&r, "double_begin", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_begin(&r);
  etr_record_end(&r);
  etr_registry_stats s3 = stats_now();
  assert_int_equal(s3.begins_repeated, s2.begins_repeated + 1);
  assert_int_equal(s3.ends_without_begin, s2.ends_without_begin);
  assert_int_equal(enters(&c), 2);
  assert_int_equal(exits(&c), 2);

  /* A record that began and is never ended (say, the runtime unwound past it) does not
   * disturb later ones. */
  {
    etr_record abandoned;
    etr_record_init(&abandoned, "abandoned", ETR_SCOPE_FUNCTION);
    etr_record_begin(&abandoned);
  }
  etr_record_init(&r, "later", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  assert_int_equal(enters(&c), 4);
  assert_int_equal(exits(&c), 3);
  assert_ptr_equal(c.last_exit, &r);

  /* Correct use counts nothing. */
  etr_registry_stats s4 = stats_now();
  record_op("fine", ETR_SCOPE_FUNCTION);
  etr_registry_stats s5 = stats_now();
  assert_int_equal(s5.ends_without_begin, s4.ends_without_begin);
  assert_int_equal(s5.begins_repeated, s4.begins_repeated);
  assert_int_equal(s5.records_observed, s4.records_observed + 1);
}

/* Counters are process-wide: what a thread did is still counted after it exits. */
static void *misuse_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 100; i++) record_op("t", ETR_SCOPE_FUNCTION);
  etr_record r;
  etr_record_init(&r, "t_no_begin", ETR_SCOPE_FUNCTION);
  etr_record_end(&r);
  etr_record_init(&r, "t_double_begin", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_begin(&r);
  etr_record_end(&r);
  return NULL;
}

static void test_stats_survive_thread_exit(void **state) {
  (void)state;
  counter c = {0};
  add_counter(&c);
  etr_registry_stats s0 = stats_now();
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, misuse_thread, NULL), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  etr_registry_stats s1 = stats_now();
  /* 101 ops entered; the one that never began may or may not count as observed. */
  assert_in_range(s1.records_observed - s0.records_observed, 101, 102);
  assert_int_equal(s1.ends_without_begin - s0.ends_without_begin, 1);
  assert_int_equal(s1.begins_repeated - s0.begins_repeated, 1);
  assert_int_equal(enters(&c), 101);
  assert_int_equal(exits(&c), 101);
}

/* ---- remove waits for running callbacks ------------------------------------------------- */

#define SLOW_ALIVE 0x51u
#define SLOW_DEAD 0xdeu

typedef struct slow_user {
  unsigned magic;
  uint64_t calls;
} slow_user;

static atomic_int slow_inside;      /* 1 while thread A is blocked in enter */
static atomic_int slow_release;     /* main lets A go */
static atomic_int slow_more;        /* main lets A record more ops after the removal */
static atomic_int slow_block;       /* block in the next enter */
static _Atomic uint64_t slow_calls; /* callbacks started (outside the user data) */
static _Atomic uint64_t slow_bad;   /* callbacks that found poisoned user data */
static etr_observer_id slow_handle;
static int slow_stats_rc = 12345, slow_disable_rc = 12345; /* written by thread A */

static void slow_touch(slow_user *u) {
  if (u->magic != SLOW_ALIVE) atomic_fetch_add(&slow_bad, 1);
  u->calls++;
}

static void slow_enter(const etr_record *rec, void *user) {
  (void)rec;
  atomic_fetch_add(&slow_calls, 1);
  slow_touch(user);
  if (atomic_exchange(&slow_block, 0)) {
    atomic_store(&slow_inside, 1);
    wait_flag(&slow_release, 1, 30.0);
    /* Remove is waiting for us now: registry calls must not deadlock. */
    etr_registry_stats st = {0};
    slow_stats_rc = etr_registry_stats_get(&st);
    slow_disable_rc = etr_observer_disable(slow_handle);
    slow_touch(user);
    atomic_store(&slow_inside, 0);
  }
}

static void slow_exit(const etr_record *rec, void *user) {
  (void)rec;
  atomic_fetch_add(&slow_calls, 1);
  slow_touch(user);
}

static void *slow_thread_a(void *arg) {
  (void)arg;
  record_op("slow", ETR_SCOPE_FUNCTION);
  wait_flag(&slow_more, 1, 30.0);
  for (int i = 0; i < 1000; i++) record_op("after_remove", ETR_SCOPE_FUNCTION);
  return NULL;
}

typedef struct remover {
  etr_observer_id h;
  int rc;
  atomic_int calling; /* about to call remove */
  atomic_int done;    /* remove returned */
} remover;

static void *slow_thread_b(void *arg) {
  remover *r = arg;
  atomic_store(&r->calling, 1);
  r->rc = etr_observer_remove(r->h);
  atomic_store(&r->done, 1);
  return NULL;
}

static void test_remove_waits_for_callbacks(void **state) {
  (void)state;
  atomic_store(&slow_inside, 0);
  atomic_store(&slow_release, 0);
  atomic_store(&slow_more, 0);
  atomic_store(&slow_block, 1);
  atomic_store(&slow_calls, 0);
  atomic_store(&slow_bad, 0);

  slow_user *u = malloc(sizeof *u);
  assert_non_null(u);
  u->magic = SLOW_ALIVE;
  u->calls = 0;
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = slow_enter;
  o.exit = slow_exit;
  o.user = u;
  remover rm = {0};
  rm.h = add_opts(&o);
  slow_handle = rm.h;

  pthread_t a, b;
  assert_int_equal(pthread_create(&a, NULL, slow_thread_a, NULL), 0);
  bool a_inside = wait_flag(&slow_inside, 1, 30.0);
  assert_int_equal(pthread_create(&b, NULL, slow_thread_b, &rm), 0);
  bool b_calling = wait_flag(&rm.calling, 1, 30.0);
  sleep_ms(200);
  int done_while_inside = atomic_load(&rm.done);
  int still_inside = atomic_load(&slow_inside);
  atomic_store(&slow_release, 1);
  assert_int_equal(pthread_join(b, NULL), 0);

  /* The observer is gone: poison and free its user data. Any later callback would touch
   * freed memory (ASan) and would bump slow_calls. */
  uint64_t calls_at_remove = atomic_load(&slow_calls);
  u->magic = SLOW_DEAD;
  free(u);
  atomic_store(&slow_more, 1);
  assert_int_equal(pthread_join(a, NULL), 0);

  assert_true(a_inside);
  assert_true(b_calling);
  assert_int_equal(still_inside, 1);
  assert_int_equal(done_while_inside, 0); /* remove did not return while A was inside */
  assert_int_equal(rm.rc, 0);
  /* While remove waited, the blocked callback could still use the control plane. */
  assert_int_equal(slow_stats_rc, 0);
  assert_true(slow_disable_rc == 0 || slow_disable_rc == ETR_ENOENT);
  assert_int_equal(atomic_load(&slow_inside), 0);
  assert_int_equal(atomic_load(&slow_calls), calls_at_remove); /* none ran after remove */
  assert_int_equal(atomic_load(&slow_bad), 0);
  assert_int_equal(etr_observer_is_enabled(rm.h), ETR_ENOENT);
}

/* ---- etr_thread_id ---------------------------------------------------------------------- */

enum { TID_THREADS = 8 };

typedef struct tid_ctx {
  pthread_barrier_t *bar;
  uint64_t id1, id2;
} tid_ctx;

static void *tid_thread(void *arg) {
  tid_ctx *t = arg;
  t->id1 = etr_thread_id();
  if (t->bar) pthread_barrier_wait(t->bar); /* all threads alive at once */
  t->id2 = etr_thread_id();
  return NULL;
}

static void test_thread_id(void **state) {
  (void)state;
  uint64_t me = etr_thread_id();
  assert_true(me >= 1);
  assert_int_equal(etr_thread_id(), me);

  pthread_barrier_t bar;
  assert_int_equal(pthread_barrier_init(&bar, NULL, TID_THREADS), 0);
  tid_ctx t[TID_THREADS];
  pthread_t th[TID_THREADS];
  for (int i = 0; i < TID_THREADS; i++) {
    t[i].bar = &bar;
    assert_int_equal(pthread_create(&th[i], NULL, tid_thread, &t[i]), 0);
  }
  for (int i = 0; i < TID_THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  pthread_barrier_destroy(&bar);

  uint64_t max_id = me;
  for (int i = 0; i < TID_THREADS; i++) {
    assert_true(t[i].id1 >= 1);
    assert_true(t[i].id1 <= 4096); /* small: this process made few threads */
    assert_int_equal(t[i].id1, t[i].id2);
    assert_true(t[i].id1 != me);
    for (int j = 0; j < i; j++) assert_true(t[i].id1 != t[j].id1);
    if (t[i].id1 > max_id) max_id = t[i].id1;
  }

  /* In order of first use: threads started one after another get increasing ids, larger
   * than any id handed out before. */
  uint64_t prev = max_id;
  for (int i = 0; i < 4; i++) {
    tid_ctx s = {NULL, 0, 0};
    pthread_t one;
    assert_int_equal(pthread_create(&one, NULL, tid_thread, &s), 0);
    assert_int_equal(pthread_join(one, NULL), 0);
    assert_int_equal(s.id1, s.id2);
    assert_true(s.id1 > prev);
    prev = s.id1;
  }
  assert_int_equal(etr_thread_id(), me);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      /* first: needs every slot free */
      cmocka_unit_test_teardown(test_max_observers, teardown),
      cmocka_unit_test_teardown(test_invalid_handles, teardown),
      cmocka_unit_test_teardown(test_handle_life_cycle, teardown),
      cmocka_unit_test_teardown(test_start_disabled, teardown),
      cmocka_unit_test_teardown(test_stale_handle_after_slot_reuse, teardown),
      cmocka_unit_test_teardown(test_add_bad_options, teardown),
      cmocka_unit_test_teardown(test_enter_exit_same_record, teardown),
      cmocka_unit_test_teardown(test_exit_after_disable, teardown),
      cmocka_unit_test_teardown(test_no_exit_when_enabled_midway, teardown),
      cmocka_unit_test_teardown(test_slot_reuse_during_op, teardown),
      cmocka_unit_test_teardown(test_slot_reuse_during_op_alone, teardown),
      cmocka_unit_test_teardown(test_needs_union, teardown),
      cmocka_unit_test_teardown(test_disabled_path_calls_nothing, teardown),
      cmocka_unit_test_teardown(test_scope_filter, teardown),
      cmocka_unit_test_teardown(test_sampling_half, teardown),
      cmocka_unit_test_teardown(test_sampling_all, teardown),
      cmocka_unit_test_teardown(test_thread_local_sees_own_thread, teardown),
      cmocka_unit_test_teardown(test_thread_local_removed_at_exit, teardown),
      cmocka_unit_test_teardown(test_reentrant_records, teardown),
      cmocka_unit_test_teardown(test_remove_self_in_callback, teardown),
      cmocka_unit_test_teardown(test_misuse_counted, teardown),
      cmocka_unit_test_teardown(test_stats_survive_thread_exit, teardown),
      cmocka_unit_test_teardown(test_remove_waits_for_callbacks, teardown),
      cmocka_unit_test_teardown(test_thread_id, teardown),
  };
  return cmocka_run_group_tests_name("registry", tests, NULL, NULL);
}
