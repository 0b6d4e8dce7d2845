/* The registry's callbacks against an observer removed at the worst moment: after a record
 * was prepared for it and before the recording thread publishes its hazard. Remove then
 * finds no hazard and returns, and the caller may free what the observer's callbacks use
 * (a trace closing at exit frees its thread states). So after the hazard is published the
 * slot must be checked again, and the callback must not run. A check made only before
 * (7b30f72, the one-observer path) ran it. This file is linked with its own copy of
 * src/observer/registry.c compiled with ETR_TEST_HOOKS, which calls etr__test_before_hazard
 * at that point; the library itself has no such hook. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <etr/etr.h>

#include "observer/registry.h"

extern void (*etr__test_before_hazard)(const etr_record *rec);
extern void (*etr__test_making_thread)(void);

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

/* ---- records made by a handler of the host's signals, on a thread whose state is being
 * made or torn down ----
 *
 * A host may record from a signal handler (a sampling profiler marking its samples as ops).
 * The handler runs on whatever thread the signal interrupted, maybe in the middle of the
 * registry making that thread's state (inside calloc, or holding threads_lock) or of the
 * observers tearing it down at thread exit (the trace observer frees the thread's buffers
 * there, inside malloc's locks). Observed there, the handler's record made a second state
 * for the thread, or ran the trace observer on half-freed buffers: a process that recorded
 * from a SIGALRM handler while threads exited hung in malloc (2026-11-27). Such records are
 * not observed; at thread exit they are counted as made inside callbacks. The hooks raise
 * the signal at those two points, so the handler runs exactly there. */

typedef struct by_name {
  int own, in_handler;
} by_name;

static void count_by_name(const etr_record *rec, void *user) {
  by_name *c = user;
  if (strcmp(rec->name, "in_handler") == 0)
    c->in_handler++;
  else
    c->own++;
}

static volatile sig_atomic_t g_handler_ran;

static void record_in_handler(int sig) {
  (void)sig;
  etr_record r;
  etr_record_init(&r, "in_handler", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  g_handler_ran++;
}

static void raise_usr1(void) { raise(SIGUSR1); }
static void raise_usr1_at_exit(etr__thread *t) {
  (void)t;
  raise(SIGUSR1);
}

static void *record_once(void *arg) {
  (void)arg;
  etr_record r;
  etr_record_init(&r, "own", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  return NULL;
}

/* A counting observer (enter only) and SIGUSR1 recording from its handler. */
static etr_observer_id watch(by_name *c, struct sigaction *old) {
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = count_by_name;
  o.user = c;
  etr_observer_id h = 0;
  assert_int_equal(etr_observer_add(&o, &h), 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = record_in_handler;
  assert_int_equal(sigaction(SIGUSR1, &sa, old), 0);
  g_handler_ran = 0;
  return h;
}

static void run_thread(void) {
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, record_once, NULL), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
}

static void test_signal_record_while_thread_state_is_made(void **state) {
  (void)state;
  by_name c = {0, 0};
  struct sigaction old;
  etr_observer_id h = watch(&c, &old);
  etr__test_making_thread = raise_usr1;
  run_thread();
  etr__test_making_thread = NULL;
  assert_int_equal(g_handler_ran, 1);
  assert_int_equal(c.in_handler, 0); /* (was 1: a second state for the thread) */
  assert_int_equal(c.own, 1);
  /* the thread's own state is whole: a thread made without the signal records as usual */
  run_thread();
  assert_int_equal(c.own, 2);
  assert_int_equal(etr_observer_remove(h), 0);
  sigaction(SIGUSR1, &old, NULL);
}

static void test_signal_record_during_thread_exit_not_observed(void **state) {
  (void)state;
  by_name c = {0, 0};
  struct sigaction old;
  etr_observer_id h = watch(&c, &old);
  etr_registry_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
  assert_int_equal(etr_registry_stats_get(&before), 0);
  static const etr__registry_hooks hooks = {.thread_exit = raise_usr1_at_exit};
  etr__registry_set_hooks(&hooks);
  run_thread();
  etr__registry_set_hooks(NULL);
  assert_int_equal(etr_registry_stats_get(&after), 0);
  assert_int_equal(g_handler_ran, 1);
  assert_int_equal(c.own, 1);
  assert_int_equal(c.in_handler, 0); /* (was 1: run while the state was torn down) */
  assert_int_equal(after.records_in_callbacks - before.records_in_callbacks, 1);
  assert_int_equal(etr_observer_remove(h), 0);
  sigaction(SIGUSR1, &old, NULL);
}

/* A host's thread-key destructor runs after etr's own in each round of destructors (etr's
 * key is made when libetr loads, before any of the host's; glibc runs them in order). etr
 * keeps the thread's state until the round before the last POSIX guarantees, so a host
 * destructor that records in an earlier round is observed (it was not, 2026-11-27: the state
 * was gone after the first round); one that sets its key again and records in the last two
 * rounds, after etr's state is torn down, is counted. */
static pthread_key_t g_host_key;
/* (atomic: its last round runs after TSan's own end of the thread, which the join then does
 * not order before the main thread's read) */
static _Atomic int g_host_rounds;

static void host_key_destructor(void *value) {
  g_host_rounds++;
  etr_record r;
  etr_record_init(&r, "in_handler", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  if (g_host_rounds < PTHREAD_DESTRUCTOR_ITERATIONS) pthread_setspecific(g_host_key, value);
}

static void *record_with_host_key(void *arg) {
  pthread_setspecific(g_host_key, &g_host_key);
  return record_once(arg);
}

static void test_record_in_host_key_destructor(void **state) {
  (void)state;
  by_name c = {0, 0};
  struct sigaction old;
  etr_observer_id h = watch(&c, &old);
  g_host_rounds = 0;
  assert_int_equal(pthread_key_create(&g_host_key, host_key_destructor), 0);
  etr_registry_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
  assert_int_equal(etr_registry_stats_get(&before), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, record_with_host_key, NULL), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(etr_registry_stats_get(&after), 0);
  assert_int_equal(g_host_rounds, PTHREAD_DESTRUCTOR_ITERATIONS);
  assert_int_equal(c.own, 1);
  assert_int_equal(c.in_handler, PTHREAD_DESTRUCTOR_ITERATIONS - 2);
  assert_int_equal(after.records_in_callbacks - before.records_in_callbacks, 2);
  pthread_key_delete(g_host_key);
  assert_int_equal(etr_observer_remove(h), 0);
  sigaction(SIGUSR1, &old, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_removed_before_hazard_alone),
      cmocka_unit_test(test_removed_before_hazard_loop),
      cmocka_unit_test(test_signal_record_while_thread_state_is_made),
      cmocka_unit_test(test_signal_record_during_thread_exit_not_observed),
      cmocka_unit_test(test_record_in_host_key_destructor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
