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
#include <string.h>

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
    ids[i] = etr__idmap_get(m, key(i), next, NULL, NULL);
    assert_true(ids[i] != 0);
  }
  assert_int_equal(etr__idmap_size(m), N);
  for (uintptr_t i = 0; i < N; i++)
    assert_int_equal(etr__idmap_get(m, key(i), next, NULL, NULL), ids[i]);
  /* Remove every other key: the rest must still be found with their ids (backward shift). */
  for (uintptr_t i = 0; i < N; i += 2) assert_true(etr__idmap_remove(m, key(i)));
  assert_false(etr__idmap_remove(m, key(0)));
  assert_int_equal(etr__idmap_size(m), N / 2);
  for (uintptr_t i = 1; i < N; i += 2)
    assert_int_equal(etr__idmap_get(m, key(i), next, NULL, NULL), ids[i]);
  /* A removed key comes back with a new id. */
  for (uintptr_t i = 0; i < N; i += 2) {
    uint64_t id = etr__idmap_get(m, key(i), next, NULL, NULL);
    assert_true(id > ids[N - 1]);
  }
  assert_int_equal(etr__idmap_get(m, NULL, next, NULL, NULL), 0);
  free(ids);
  etr__idmap_free(m);
}

/* Each thread owns keys it inserts, looks up and removes in a loop; all threads also look up
 * a set of shared keys that nobody removes. Shared keys must give one id to everyone, and an
 * owned key's id must stay the same between its insert and its removal. */
enum { THREADS = 4, OWN = 512, SHARED = 64, ROUNDS = 200 };
static etr__idmap *shared_map;
static uint64_t shared_ids[SHARED];

typedef struct {
  int t;
  int errors;
  etr__idcache cache;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  etr__idcache *c = (w->t & 1) ? &w->cache : NULL; /* half the threads use a cache */
  uint64_t mine[OWN], prev[OWN] = {0};
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < OWN; i++) {
      mine[i] = etr__idmap_get(shared_map, key(100000 + (uintptr_t)w->t * OWN + i), next, NULL, c);
      if (mine[i] == prev[i]) w->errors++; /* removed last round: must be a new id */
      prev[i] = mine[i];
    }
    for (int i = 0; i < SHARED; i++)
      if (etr__idmap_get(shared_map, key((uintptr_t)i), next, NULL, c) != shared_ids[i])
        w->errors++;
    for (int i = 0; i < OWN; i++)
      if (etr__idmap_get(shared_map, key(100000 + (uintptr_t)w->t * OWN + i), next, NULL, c) !=
          mine[i])
        w->errors++;
    for (int i = 0; i < OWN; i++)
      if (!etr__idmap_remove(shared_map, key(100000 + (uintptr_t)w->t * OWN + i))) w->errors++;
  }
  return NULL;
}

static void test_concurrent(void **state) {
  (void)state;
  shared_map = etr__idmap_new();
  for (int i = 0; i < SHARED; i++)
    shared_ids[i] = etr__idmap_get(shared_map, key((uintptr_t)i), next, NULL, NULL);
  pthread_t th[THREADS];
  worker w[THREADS];
  for (int t = 0; t < THREADS; t++) {
    memset(&w[t], 0, sizeof w[t]);
    w[t].t = t;
    assert_int_equal(pthread_create(&th[t], NULL, work, &w[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(th[t], NULL);
    assert_int_equal(w[t].errors, 0);
  }
  assert_int_equal(etr__idmap_size(shared_map), SHARED);
  etr__idmap_free(shared_map);
}

/* A cached id is never returned after the object was removed, whichever thread removed it. */
static void test_cache_invalidated_by_removal(void **state) {
  (void)state;
  etr__idmap *m = etr__idmap_new();
  etr__idcache cache;
  memset(&cache, 0, sizeof cache);
  uint64_t a = etr__idmap_get(m, key(7), next, NULL, &cache);
  assert_int_equal(etr__idmap_get(m, key(7), next, NULL, &cache), a); /* a hit */
  assert_true(etr__idmap_remove(m, key(7)));
  uint64_t b = etr__idmap_get(m, key(7), next, NULL, &cache);
  assert_true(b != a);
  assert_int_equal(etr__idmap_get(m, key(7), next, NULL, NULL), b);
  /* Removing another key of the same shard also invalidates (conservatively): still right. */
  for (uintptr_t i = 100; i < 400; i++) etr__idmap_get(m, key(i), next, NULL, &cache);
  for (uintptr_t i = 100; i < 400; i += 3) assert_true(etr__idmap_remove(m, key(i)));
  assert_int_equal(etr__idmap_get(m, key(7), next, NULL, &cache), b);
  for (uintptr_t i = 101; i < 400; i += 3) {
    uint64_t x = etr__idmap_get(m, key(i), next, NULL, &cache);
    assert_int_equal(etr__idmap_get(m, key(i), next, NULL, NULL), x);
  }
  etr__idmap_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_insert_lookup_remove_many),
      cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_cache_invalidated_by_removal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
