/* The registry's callbacks against an observer removed at the worst moment: after a record
 * was prepared for it and before the recording thread publishes its hazard. Remove then
 * finds no hazard and returns, and the caller may free what the observer's callbacks use
 * (a trace closing at exit frees its thread states). So after the hazard is published the
 * slot must be checked again, and the callback must not run. A check made only before
 * (7b30f72, the one-observer path) ran it. This file is linked with its own copy of
 * src/observer/registry.c compiled with ETR_TEST_HOOKS, which calls etr__test_before_hazard
 * at that point; the library itself has no such hook. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <etr/etr.h>

extern void (*etr__test_before_hazard)(const etr_record *rec);

typedef struct victim {
  int dead;     /* set once its observer's remove has returned */
  int calls;    /* callbacks run while alive */
  int too_late; /* callbacks run after the remove returned */
} victim;

static victim g_victim[2];
static etr_observer_id g_target; /* removed by the hook, once */

static void cb(const etr_record *rec, void *user) {
  (void)rec;
  victim *v = user;
  if (v->dead)
    v->too_late++;
  else
    v->calls++;
}

static void remove_now(const etr_record *rec) {
  (void)rec;
  if (!g_target) return;
  etr_observer_id h = g_target;
  g_target = 0;
  assert_int_equal(etr_observer_remove(h), 0); /* no hazard to wait for: returns */
  g_victim[0].dead = 1;
}

static etr_observer_id add(victim *v) {
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = cb;
  o.exit = cb;
  o.user = v;
  etr_observer_id h = 0;
  assert_int_equal(etr_observer_add(&o, &h), 0);
  return h;
}

/* One observer (the registry's direct path), removed before begin's callbacks publish. */
static void test_removed_before_hazard_alone(void **state) {
  (void)state;
  g_victim[0] = (victim){0};
  g_target = add(&g_victim[0]);
  etr__test_before_hazard = remove_now;
  etr_record r;
  etr_record_init(&r, "op", ETR_SCOPE_FUNCTION);
  assert_true(etr_record_is_active(&r));
  etr_record_begin(&r);
  etr_record_end(&r);
  etr__test_before_hazard = NULL;
  assert_int_equal(g_victim[0].too_late, 0);
  assert_int_equal(g_victim[0].calls, 0);
}

/* Two observers (the loop), the first removed the same way: the other still sees both. */
static void test_removed_before_hazard_loop(void **state) {
  (void)state;
  g_victim[0] = (victim){0};
  g_victim[1] = (victim){0};
  g_target = add(&g_victim[0]);
  etr_observer_id other = add(&g_victim[1]);
  etr__test_before_hazard = remove_now;
  etr_record r;
  etr_record_init(&r, "op", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  etr__test_before_hazard = NULL;
  assert_int_equal(g_victim[0].too_late, 0);
  assert_int_equal(g_victim[0].calls, 0);
  assert_int_equal(g_victim[1].calls, 2);
  assert_int_equal(etr_observer_remove(other), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_removed_before_hazard_alone),
      cmocka_unit_test(test_removed_before_hazard_loop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
