/* The disabled path calls nothing (etr/record.h: "While no observer is enabled, init is a
 * relaxed atomic load and two stores, and begin/end are one predictable branch each").
 *
 * Linked with -Wl,--wrap for the out-of-line entry points, so every call that the inline
 * functions of this file make into the library goes through a counting wrapper.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <etr/etr.h>

static uint64_t n_prepare, n_begin, n_end;

void __real_etr__record_prepare(etr_record *rec, const char *name, etr_scope scope);
void __real_etr__record_begin(etr_record *rec);
void __real_etr__record_end(etr_record *rec);
void __wrap_etr__record_prepare(etr_record *rec, const char *name, etr_scope scope);
void __wrap_etr__record_begin(etr_record *rec);
void __wrap_etr__record_end(etr_record *rec);

void __wrap_etr__record_prepare(etr_record *rec, const char *name, etr_scope scope) {
  n_prepare++;
  __real_etr__record_prepare(rec, name, scope);
}
void __wrap_etr__record_begin(etr_record *rec) {
  n_begin++;
  __real_etr__record_begin(rec);
}
void __wrap_etr__record_end(etr_record *rec) {
  n_end++;
  __real_etr__record_end(rec);
}

static uint64_t calls(void) { return n_prepare + n_begin + n_end; }

static int n_enter, n_exit;
static void cb_enter(const etr_record *rec, void *user) {
  (void)rec;
  (void)user;
  n_enter++;
}
static void cb_exit(const etr_record *rec, void *user) {
  (void)rec;
  (void)user;
  n_exit++;
}

/* 1000 nested pairs of records; returns how many were active. */
static int record_many(void) {
  int active = 0;
  for (int i = 0; i < 500; i++) {
    etr_record a, b;
    etr_record_init(&a, "outer", ETR_SCOPE_FUNCTION);
    active += etr_record_is_active(&a);
    etr_record_begin(&a);
    etr_record_init(&b, "inner", ETR_SCOPE_USER_SCOPE);
    active += etr_record_is_active(&b);
    etr_record_begin(&b);
    etr_record_end(&b);
    etr_record_end(&a);
  }
  return active;
}

static void test_disabled_path(void **state) {
  (void)state;
  /* Nothing added. */
  uint64_t c0 = calls();
  assert_int_equal(record_many(), 0);
  assert_int_equal(calls(), c0);

  /* Observers added but disabled. */
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = cb_enter;
  o.exit = cb_exit;
  o.needs = ETR_NEEDS_INPUTS | ETR_NEEDS_OUTPUTS;
  o.start_disabled = true;
  etr_observer_id h1 = 0, h2 = 0;
  assert_int_equal(etr_observer_add(&o, &h1), 0);
  assert_int_equal(etr_observer_add(&o, &h2), 0);
  assert_int_equal(record_many(), 0);
  assert_int_equal(calls(), c0);

  /* Enabled: the wrappers do see the calls (so the checks above can fail). */
  assert_int_equal(etr_observer_enable(h1), 0);
  assert_int_equal(record_many(), 1000);
  assert_true(n_prepare >= 1000);
  assert_true(n_begin >= 1000);
  assert_true(n_end >= 1000);
  assert_int_equal(n_enter, 1000);
  assert_int_equal(n_exit, 1000);

  /* Disabled again: back to no calls at all. */
  assert_int_equal(etr_observer_disable(h1), 0);
  c0 = calls();
  assert_int_equal(record_many(), 0);
  assert_int_equal(calls(), c0);

  /* Two enabled, then both disabled; then one enabled and removed. */
  assert_int_equal(etr_observer_enable(h1), 0);
  assert_int_equal(etr_observer_enable(h2), 0);
  assert_int_equal(record_many(), 1000);
  assert_int_equal(etr_observer_disable(h2), 0);
  assert_int_equal(etr_observer_disable(h1), 0);
  c0 = calls();
  assert_int_equal(record_many(), 0);
  assert_int_equal(calls(), c0);

  assert_int_equal(etr_observer_enable(h2), 0);
  assert_int_equal(etr_observer_remove(h2), 0);
  c0 = calls();
  assert_int_equal(record_many(), 0);
  assert_int_equal(calls(), c0);

  assert_int_equal(etr_observer_remove(h1), 0);
  assert_int_equal(record_many(), 0);
  assert_int_equal(calls(), c0);
  assert_int_equal(n_enter, 3000);
  assert_int_equal(n_exit, 3000);
}

/* A record that began while everything was off stays off when an observer is enabled before
 * its end: no call into the library, no callback. */
static void test_off_record_stays_off(void **state) {
  (void)state;
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = cb_enter;
  o.exit = cb_exit;
  o.start_disabled = true;
  etr_observer_id h = 0;
  assert_int_equal(etr_observer_add(&o, &h), 0);
  int e0 = n_enter, x0 = n_exit;
  uint64_t c0 = calls();
  etr_record r;
  etr_record_init(&r, "off", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  assert_int_equal(etr_observer_enable(h), 0);
  etr_record_end(&r);
  assert_int_equal(calls(), c0);
  assert_int_equal(n_enter, e0);
  assert_int_equal(n_exit, x0);
  assert_int_equal(etr_observer_remove(h), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_disabled_path),
      cmocka_unit_test(test_off_record_stays_off),
  };
  return cmocka_run_group_tests_name("registry_hotpath", tests, NULL, NULL);
}
