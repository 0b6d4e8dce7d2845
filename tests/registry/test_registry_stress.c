/* Concurrent stress of the registry: recording threads make nested records while a control
 * thread adds, enables, disables and removes observers (docs/API.md: "State changes
 * are safe while other threads record. An op that began while an observer was enabled still
 * gets its exit callback.").
 *
 * Every observer counts, per recording thread, its enters and exits and keeps the stack of
 * records it entered; an exit must match the top of that stack. The per-thread counters are
 * plain (non-atomic) fields written by the recording thread and read by the control thread
 * after etr_observer_remove returns: that read is race-free only if remove really waits for
 * running callbacks, which TSan checks. Removed observers' user data is poisoned and freed,
 * so a late callback is caught by ASan (and by the magic check otherwise).
 *
 * Duration: ETR_STRESS_SECONDS (default 1).
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>
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

#include "record_nesting.h"

enum { NREC = 4, DEPTH = 3, MAXLIVE = 8 };
#define MAGIC_ALIVE 0xa11ce5u
#define MAGIC_DEAD 0xdeadu

typedef struct sobs {
  unsigned magic;
  etr_observer_id id;
  bool thread_local;
  bool enabled;
  int owner; /* recording thread index of a thread-local observer */
  rec_nesting t[NREC];
} sobs;

static _Thread_local int tls_idx = -1;
static _Atomic uint64_t g_bad_magic;  /* callback on poisoned user data */
static _Atomic uint64_t g_bad_thread; /* callback on a thread it must not see */
static atomic_int g_stop;

/* The calling thread's nesting check in observer o, or NULL (counted) when o is poisoned
 * or the thread is one o must not see. */
static rec_nesting *s_nesting(sobs *o) {
  if (o->magic != MAGIC_ALIVE) {
    atomic_fetch_add(&g_bad_magic, 1);
    return NULL;
  }
  int i = tls_idx;
  if (i < 0 || i >= NREC || (o->thread_local && o->owner != i)) {
    atomic_fetch_add(&g_bad_thread, 1);
    return NULL;
  }
  return &o->t[i];
}

static void s_enter(const etr_record *rec, void *user) {
  rec_nesting *p = s_nesting(user);
  if (p != NULL) rec_nesting_enter(p, rec);
}

static void s_exit(const etr_record *rec, void *user) {
  rec_nesting *p = s_nesting(user);
  if (p != NULL) rec_nesting_exit(p, rec);
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* ---- recording threads ------------------------------------------------------------------ */

static const char *const names[DEPTH + 1] = {"", "op::leaf", "op::mid", "op::root"};

static void nested(int d, const etr_value *vals) {
  etr_record r;
  etr_record_init(&r, names[d], (d & 1) ? ETR_SCOPE_USER_SCOPE : ETR_SCOPE_FUNCTION);
  if (etr_record_needs_inputs(&r)) {
    r.inputs = vals;
    r.n_inputs = 2;
  }
  etr_record_begin(&r);
  if (d > 1) nested(d - 1, vals);
  if (etr_record_needs_outputs(&r)) {
    r.outputs = vals;
    r.n_outputs = 1;
  }
  etr_record_end(&r);
}

typedef struct rec_ctx {
  int idx;
  uint64_t iterations;
  sobs *mine; /* this thread's thread-local observer */
  int add_rc;
  int remove_rc; /* even threads remove theirs; odd ones leave it to thread exit */
  bool mine_ok;  /* counts of the thread-local observer matched exactly */
  uint64_t mine_enters, mine_exits;
} rec_ctx;

static void *recorder(void *arg) {
  rec_ctx *c = arg;
  tls_idx = c->idx;
  etr_value vals[2] = {etr_value_int(c->idx), etr_value_string("x")};

  c->mine = calloc(1, sizeof *c->mine);
  if (c->mine == NULL) return NULL;
  c->mine->magic = MAGIC_ALIVE;
  c->mine->thread_local = true;
  c->mine->owner = c->idx;
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = s_enter;
  o.exit = s_exit;
  o.user = c->mine;
  o.thread_local_only = true;
  o.needs = ETR_NEEDS_INPUTS;
  c->add_rc = etr_observer_add(&o, &c->mine->id);

  while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
    nested(DEPTH, vals);
    c->iterations++;
  }

  /* The thread-local observer saw every record of this thread and nothing else. */
  rec_nesting *p = &c->mine->t[c->idx];
  c->mine_enters = p->enters;
  c->mine_exits = p->exits;
  c->mine_ok = p->enters == c->iterations * DEPTH && p->exits == p->enters && p->depth == 0 &&
               p->violations == 0;
  for (int j = 0; j < NREC; j++)
    if (j != c->idx && (c->mine->t[j].enters != 0 || c->mine->t[j].exits != 0)) c->mine_ok = false;
  if (c->idx % 2 == 0) c->remove_rc = etr_observer_remove(c->mine->id);
  return NULL;
}

/* ---- control thread --------------------------------------------------------------------- */

typedef struct ctl_ctx {
  uint64_t seed;
  uint64_t adds, enables, disables, removes, nospc;
  uint64_t errors;        /* unexpected return codes */
  uint64_t bad_at_remove; /* counts inconsistent when an observer was removed */
  uint64_t bad_at_end;    /* counts inconsistent for observers left at the end */
  uint64_t entered_total; /* enters seen by global observers (the test did something) */
} ctl_ctx;

/* Counts of a removed observer: an op may have entered and not exited yet (at most DEPTH
 * per thread, exactly the ones on its stack); never more exits than enters. */
static bool consistent_at_remove(const sobs *o) {
  for (int i = 0; i < NREC; i++) {
    const rec_nesting *p = &o->t[i];
    if (p->violations != 0 || p->exits > p->enters) return false;
    if (p->enters - p->exits > DEPTH) return false;
    if ((uint64_t)p->depth != p->enters - p->exits) return false;
  }
  return true;
}

static bool balanced(const sobs *o) {
  for (int i = 0; i < NREC; i++) {
    const rec_nesting *p = &o->t[i];
    if (p->violations != 0 || p->exits != p->enters || p->depth != 0) return false;
  }
  return true;
}

static uint64_t total_enters(const sobs *o) {
  uint64_t n = 0;
  for (int i = 0; i < NREC; i++) n += o->t[i].enters;
  return n;
}

static void kill_obs(sobs *o) {
  o->magic = MAGIC_DEAD;
  free(o);
}

static sobs *g_live[MAXLIVE];
static int g_nlive;

static void *control(void *arg) {
  ctl_ctx *c = arg;
  uint64_t s = c->seed;
  while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
    uint64_t r = rng_next(&s);
    int action = (int)(r % 5);
    if (g_nlive == 0) action = 0;
    sobs *o = g_nlive ? g_live[(r >> 8) % (uint64_t)g_nlive] : NULL;
    switch (action) {
      case 0:
      case 1: {
        if (g_nlive >= MAXLIVE) break;
        sobs *n = calloc(1, sizeof *n);
        if (n == NULL) {
          c->errors++;
          break;
        }
        n->magic = MAGIC_ALIVE;
        etr_observer_options opt = ETR_OBSERVER_OPTIONS_INIT;
        opt.enter = s_enter;
        opt.exit = s_exit;
        opt.user = n;
        opt.needs = (uint32_t)(r >> 16) & 15u;
        static const double probs[3] = {0.0, 1.0, 0.5};
        opt.sample_probability = probs[(r >> 20) % 3];
        static const uint32_t scopes[3] = {0, 1u << ETR_SCOPE_FUNCTION, 1u << ETR_SCOPE_USER_SCOPE};
        opt.scopes = scopes[(r >> 24) % 3];
        opt.start_disabled = ((r >> 28) & 1) != 0;
        n->enabled = !opt.start_disabled;
        int rc = etr_observer_add(&opt, &n->id);
        if (rc == ETR_ENOSPC) {
          c->nospc++;
          free(n);
        } else if (rc != 0) {
          c->errors++;
          free(n);
        } else {
          c->adds++;
          g_live[g_nlive++] = n;
        }
        break;
      }
      case 2:
        if (etr_observer_enable(o->id) != 0) c->errors++;
        o->enabled = true;
        if (etr_observer_is_enabled(o->id) != 1) c->errors++;
        c->enables++;
        break;
      case 3:
        if (etr_observer_disable(o->id) != 0) c->errors++;
        o->enabled = false;
        if (etr_observer_is_enabled(o->id) != 0) c->errors++;
        c->disables++;
        break;
      case 4: {
        if (etr_observer_remove(o->id) != 0) c->errors++;
        if (!consistent_at_remove(o)) c->bad_at_remove++;
        c->entered_total += total_enters(o);
        if (etr_observer_is_enabled(o->id) != ETR_ENOENT) c->errors++;
        for (int i = 0; i < g_nlive; i++)
          if (g_live[i] == o) {
            g_live[i] = g_live[--g_nlive];
            break;
          }
        kill_obs(o);
        c->removes++;
        break;
      }
    }
    if ((r & 63) == 0) sched_yield();
  }
  return NULL;
}

static double stress_seconds(void) {
  const char *e = getenv("ETR_STRESS_SECONDS");
  double s = 1.0;
  if (e != NULL && *e != '\0') {
    char *end = NULL;
    double v = strtod(e, &end);
    if (end != e && v > 0) s = v;
  }
  if (s < 0.05) s = 0.05;
  if (s > 3600) s = 3600;
  return s;
}

static void test_concurrent_stress(void **state) {
  (void)state;
  double secs = stress_seconds();
  etr_registry_stats s0 = {sizeof s0, 0, 0, 0, 0, 0};
  assert_int_equal(etr_registry_stats_get(&s0), 0);

  atomic_store(&g_stop, 0);
  rec_ctx rc[NREC];
  pthread_t rth[NREC], cth;
  ctl_ctx ctl;
  memset(&ctl, 0, sizeof ctl);
  ctl.seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL);
  g_nlive = 0;

  for (int i = 0; i < NREC; i++) {
    memset(&rc[i], 0, sizeof rc[i]);
    rc[i].idx = i;
    assert_int_equal(pthread_create(&rth[i], NULL, recorder, &rc[i]), 0);
  }
  assert_int_equal(pthread_create(&cth, NULL, control, &ctl), 0);

  struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  atomic_store(&g_stop, 1);
  for (int i = 0; i < NREC; i++) assert_int_equal(pthread_join(rth[i], NULL), 0);
  assert_int_equal(pthread_join(cth, NULL), 0);

  /* Every op has ended: observers still present are balanced on every thread. */
  for (int i = 0; i < g_nlive; i++) {
    sobs *o = g_live[i];
    if (!balanced(o)) ctl.bad_at_end++;
    ctl.entered_total += total_enters(o);
    if (etr_observer_remove(o->id) != 0) ctl.errors++;
    kill_obs(o);
  }
  g_nlive = 0;

  uint64_t iters = 0;
  for (int i = 0; i < NREC; i++) {
    print_message("thread %d: %llu iterations, thread-local observer %llu/%llu\n", i,
                  (unsigned long long)rc[i].iterations, (unsigned long long)rc[i].mine_enters,
                  (unsigned long long)rc[i].mine_exits);
    iters += rc[i].iterations;
  }
  print_message(
      "%.2f s: %llu adds, %llu enables, %llu disables, %llu removes, %llu ENOSPC, "
      "%llu enters on global observers\n",
      secs, (unsigned long long)ctl.adds, (unsigned long long)ctl.enables,
      (unsigned long long)ctl.disables, (unsigned long long)ctl.removes,
      (unsigned long long)ctl.nospc, (unsigned long long)ctl.entered_total);

  for (int i = 0; i < NREC; i++) {
    assert_non_null(rc[i].mine);
    assert_int_equal(rc[i].add_rc, 0);
    assert_true(rc[i].iterations > 0);
    assert_true(rc[i].mine_ok);
    if (i % 2 == 0) {
      assert_int_equal(rc[i].remove_rc, 0);
    }
    /* Odd threads' observers went away with their threads. */
    assert_int_equal(etr_observer_is_enabled(rc[i].mine->id), ETR_ENOENT);
    kill_obs(rc[i].mine);
  }
  assert_int_equal(ctl.errors, 0);
  assert_int_equal(ctl.nospc, 0);
  assert_int_equal(ctl.bad_at_remove, 0);
  assert_int_equal(ctl.bad_at_end, 0);
  assert_int_equal(atomic_load(&g_bad_magic), 0);
  assert_int_equal(atomic_load(&g_bad_thread), 0);
  assert_true(ctl.removes > 0);
  assert_true(ctl.entered_total > 0);

  etr_registry_stats s1 = {sizeof s1, 0, 0, 0, 0, 0};
  assert_int_equal(etr_registry_stats_get(&s1), 0);
  assert_int_equal(s1.observers, s0.observers);
  /* Correct use is never counted as misuse. */
  assert_int_equal(s1.ends_without_begin, s0.ends_without_begin);
  assert_int_equal(s1.begins_repeated, s0.begins_repeated);
  assert_true(s1.records_observed - s0.records_observed >= iters * DEPTH);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_concurrent_stress),
  };
  return cmocka_run_group_tests_name("registry_stress", tests, NULL, NULL);
}
