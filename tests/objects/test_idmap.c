/* The object-id map: ids are stable until removal, new after it, never shared between two
 * live keys; growth and backward-shift deletion keep every other key reachable; lock-free
 * readers stay correct while other threads insert and remove in the same shards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "observer/objects.h"

static _Atomic uint64_t counter = 1;
static uint64_t next(void *ctx) {
  (void)ctx;
  return atomic_fetch_add(&counter, 1);
}

static void *key(uintptr_t i) { return (void *)(i * 16 + 4096); }

static void test_insert_lookup_remove_many(void **state) {
  (void)state;
  enum { N = 100000 };
  etr__idmap *m = etr__idmap_new();
  assert_non_null(m);
  uint64_t *ids = calloc(N, sizeof *ids);
  for (uintptr_t i = 0; i < N; i++) {
    ids[i] = etr__idmap_get(m, key(i), next, NULL);
    assert_true(ids[i] != 0);
  }
  assert_int_equal(etr__idmap_size(m), N);
  for (uintptr_t i = 0; i < N; i++) assert_int_equal(etr__idmap_get(m, key(i), next, NULL), ids[i]);
  /* Remove every other key: the rest must still be found with their ids (backward shift). */
  for (uintptr_t i = 0; i < N; i += 2) assert_true(etr__idmap_remove(m, key(i)));
  assert_false(etr__idmap_remove(m, key(0)));
  assert_int_equal(etr__idmap_size(m), N / 2);
  for (uintptr_t i = 1; i < N; i += 2) assert_int_equal(etr__idmap_get(m, key(i), next, NULL), ids[i]);
  /* A removed key comes back with a new id. */
  for (uintptr_t i = 0; i < N; i += 2) {
    uint64_t id = etr__idmap_get(m, key(i), next, NULL);
    assert_true(id > ids[N - 1]);
  }
  assert_int_equal(etr__idmap_get(m, NULL, next, NULL), 0);
  free(ids);
  etr__idmap_free(m);
}

/* Each thread owns keys it inserts, looks up and removes in a loop; all threads also look up
 * a set of shared keys that nobody removes. Shared keys must give one id to everyone, and an
 * owned key's id must stay the same between its insert and its removal. */
enum { THREADS = 4, OWN = 512, SHARED = 64, ROUNDS = 200 };
static etr__idmap *shared_map;
static uint64_t shared_ids[SHARED];

typedef struct { int t; int errors; } worker;

static void *work(void *arg) {
  worker *w = arg;
  uint64_t mine[OWN];
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < OWN; i++) mine[i] = etr__idmap_get(shared_map, key(100000 + (uintptr_t)w->t * OWN + i), next, NULL);
    for (int i = 0; i < SHARED; i++)
      if (etr__idmap_get(shared_map, key((uintptr_t)i), next, NULL) != shared_ids[i]) w->errors++;
    for (int i = 0; i < OWN; i++)
      if (etr__idmap_get(shared_map, key(100000 + (uintptr_t)w->t * OWN + i), next, NULL) != mine[i]) w->errors++;
    for (int i = 0; i < OWN; i++)
      if (!etr__idmap_remove(shared_map, key(100000 + (uintptr_t)w->t * OWN + i))) w->errors++;
  }
  return NULL;
}

static void test_concurrent(void **state) {
  (void)state;
  shared_map = etr__idmap_new();
  for (int i = 0; i < SHARED; i++) shared_ids[i] = etr__idmap_get(shared_map, key((uintptr_t)i), next, NULL);
  pthread_t th[THREADS];
  worker w[THREADS];
  for (int t = 0; t < THREADS; t++) {
    w[t].t = t;
    w[t].errors = 0;
    assert_int_equal(pthread_create(&th[t], NULL, work, &w[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(th[t], NULL);
    assert_int_equal(w[t].errors, 0);
  }
  assert_int_equal(etr__idmap_size(shared_map), SHARED);
  etr__idmap_free(shared_map);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_insert_lookup_remove_many),
      cmocka_unit_test(test_concurrent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
