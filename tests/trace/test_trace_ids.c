/* tests/trace/test_trace_ids.c — node and object ids (docs/API.md, docs/FORMAT.md): the same tensor
 * gives the identical list everywhere, shared storages share an id, ids are retired when the
 * runtime says an object died, and node ids and object ids never collide. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_util.h"

static char *dump(const json_t *v) { return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY); }

static json_int_t tensor_id(const json_t *v) { return json_integer_value(json_array_get(v, 0)); }
static json_int_t storage_id(const json_t *v) { return json_integer_value(json_array_get(v, 1)); }

static void test_same_tensor_same_list(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static int impl, stor;
  const int64_t sz[2] = {4, 5};
  etr_tensor a = {&impl, &stor, 2, 20, 4, "float", "cuda:0", 2, sz, NULL};
  etr_value in[1] = {etr_value_tensor(&a)};
  tu_op("first", in, 1, NULL, 0);
  tu_op("unrelated", NULL, 0, NULL, 0);
  /* A different etr_tensor struct describing the same object. */
  etr_tensor a2 = a;
  etr_value in2[2] = {etr_value_int(1), etr_value_tensor(&a2)};
  etr_value out2[1] = {etr_value_tensor(&a)};
  tu_op("second", in2, 2, out2, 1);
  etr_value lst[2] = {etr_value_tensor(&a), etr_value_tensor(&a2)};
  etr_value in3[1] = {etr_value_list(lst, 2)};
  tu_op("third", in3, 1, NULL, 0);
  tu_close_ok(&t);
  char *x = dump(tu_in(tu_node(&t, "first"), "inputs", "values", 0));
  char *y = dump(tu_in(tu_node(&t, "second"), "inputs", "values", 1));
  char *z = dump(tu_in(tu_node(&t, "second"), "outputs", "values", 0));
  json_t *l = tu_in(tu_node(&t, "third"), "inputs", "values", 0);
  char *w0 = dump(json_array_get(l, 0)), *w1 = dump(json_array_get(l, 1));
  assert_string_equal(x, y);
  assert_string_equal(x, z);
  assert_string_equal(x, w0);
  assert_string_equal(x, w1);
  free(x);
  free(y);
  free(z);
  free(w0);
  free(w1);
  assert_int_equal(tu_stat(&t, "objects"), 2);
  tu_free(&t);
}

static void test_shared_storage(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static int impl[3], stor[2];
  const int64_t sz[1] = {8};
  etr_tensor a = {&impl[0], &stor[0], 0, 8, 4, "float", "cpu", 1, sz, NULL};
  etr_tensor b = {&impl[1], &stor[0], 4, 4, 4, "float", "cpu", 1, (const int64_t[]){4}, NULL};
  etr_tensor c = {&impl[2], &stor[1], 0, 8, 4, "float", "cpu", 1, sz, NULL};
  etr_value in[2] = {etr_value_tensor(&a), etr_value_tensor(&c)};
  etr_value out[1] = {etr_value_tensor(&b)};
  tu_op("view", in, 2, out, 1);
  tu_close_ok(&t);
  json_t *n = tu_node(&t, "view");
  json_t *va = tu_in(n, "inputs", "values", 0), *vc = tu_in(n, "inputs", "values", 1),
         *vb = tu_in(n, "outputs", "values", 0);
  assert_int_equal(storage_id(va), storage_id(vb));
  assert_true(tensor_id(va) != tensor_id(vb));
  assert_true(storage_id(vc) != storage_id(va));
  json_int_t ids[5] = {tensor_id(va), tensor_id(vb), tensor_id(vc), storage_id(va), storage_id(vc)};
  for (int i = 0; i < 5; i++) {
    assert_true(ids[i] > 1);
    for (int j = 0; j < i; j++) assert_true(ids[i] != ids[j]);
  }
  assert_int_equal(json_integer_value(json_array_get(vb, 2)), 4);
  assert_int_equal(tu_stat(&t, "objects"), 5);
  tu_free(&t);
}

static void test_tensor_died(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static int slot, stor;
  const int64_t sz[1] = {3};
  etr_tensor a = {&slot, &stor, 0, 3, 4, "float", "cpu", 1, sz, NULL};
  etr_value in[1] = {etr_value_tensor(&a)};
  tu_op("before", in, 1, NULL, 0);
  tu_op("again", in, 1, NULL, 0);
  etr_tensor_died(&slot);
  /* A new tensor at the same address. */
  etr_tensor b = {&slot, &stor, 0, 3, 4, "float", "cpu", 1, sz, NULL};
  etr_value in2[1] = {etr_value_tensor(&b)};
  tu_op("after", in2, 1, NULL, 0);
  etr_tensor_died(&slot);
  etr_tensor_died((void *)0x12345); /* never seen: ignored */
  tu_op("after2", in2, 1, NULL, 0);
  tu_close_ok(&t);
  json_t *v0 = tu_in(tu_node(&t, "before"), "inputs", "values", 0);
  json_t *v1 = tu_in(tu_node(&t, "again"), "inputs", "values", 0);
  json_t *v2 = tu_in(tu_node(&t, "after"), "inputs", "values", 0);
  json_t *v3 = tu_in(tu_node(&t, "after2"), "inputs", "values", 0);
  assert_int_equal(tensor_id(v0), tensor_id(v1));
  assert_true(tensor_id(v2) != tensor_id(v0));
  assert_true(tensor_id(v3) != tensor_id(v2));
  assert_true(tensor_id(v3) != tensor_id(v0));
  /* The storage did not die: same storage id throughout. */
  assert_int_equal(storage_id(v0), storage_id(v2));
  assert_int_equal(storage_id(v0), storage_id(v3));
  assert_int_equal(tu_stat(&t, "objects"), 4);
  json_t *retired = json_object_get(tu_stats(&t), "ids_retired");
  assert_true(json_is_integer(retired));
  assert_int_equal(json_integer_value(retired), 2);
  tu_free(&t);
}

static void test_storage_died(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static int impl[2], stor;
  const int64_t sz[1] = {3};
  etr_tensor a = {&impl[0], &stor, 0, 3, 4, "float", "cpu", 1, sz, NULL};
  etr_value in[1] = {etr_value_tensor(&a)};
  tu_op("s_before", in, 1, NULL, 0);
  etr_storage_died(&stor);
  etr_tensor b = {&impl[1], &stor, 0, 3, 4, "float", "cpu", 1, sz, NULL};
  etr_value in2[2] = {etr_value_tensor(&b), etr_value_tensor(&a)};
  tu_op("s_after", in2, 2, NULL, 0);
  tu_close_ok(&t);
  json_t *v0 = tu_in(tu_node(&t, "s_before"), "inputs", "values", 0);
  json_t *vb = tu_in(tu_node(&t, "s_after"), "inputs", "values", 0);
  json_t *va = tu_in(tu_node(&t, "s_after"), "inputs", "values", 1);
  assert_true(storage_id(vb) != storage_id(v0));
  /* The tensor a did not die: same tensor id; its storage is looked up again. */
  assert_int_equal(tensor_id(va), tensor_id(v0));
  assert_int_equal(storage_id(va), storage_id(vb));
  assert_int_equal(tu_stat(&t, "ids_retired"), 1);
  tu_free(&t);
}

/* Ids drawn on two threads: node ids, thread-node ids, object ids all distinct. */
struct worker {
  int base;
  uint64_t tid;
};

static int shared_impl, shared_stor;

static void record_batch(int base) {
  static int impls[2][64], stors[2][64];
  const int64_t sz[1] = {2};
  for (int i = 0; i < 40; i++) {
    etr_tensor a = {&impls[base][i], &stors[base][i / 2], 0, 2, 4, "float", "cpu", 1, sz, NULL};
    etr_tensor s = {&shared_impl, &shared_stor, 0, 2, 4, "float", "cpu", 1, sz, NULL};
    etr_value in[2] = {etr_value_tensor(&a), etr_value_tensor(&s)};
    etr_record outer;
    tu_begin(&outer, base ? "w_outer" : "m_outer", in, 2);
    tu_op(base ? "w_inner" : "m_inner", in, 1, in, 1);
    tu_end(&outer, NULL, 0);
  }
}

static void *worker_main(void *p) {
  struct worker *w = p;
  w->tid = etr_thread_id();
  record_batch(w->base);
  return NULL;
}

static int cmp_ll(const void *a, const void *b) {
  json_int_t x = *(const json_int_t *)a, y = *(const json_int_t *)b;
  return x < y ? -1 : x > y;
}

static void test_ids_unique(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  struct worker w = {1, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, worker_main, &w), 0);
  record_batch(0);
  assert_int_equal(pthread_join(th, NULL), 0);
  tu_close_ok(&t);

  size_t nn = tu_node_count(&t);
  json_int_t *obj = malloc(sizeof(json_int_t) * 4096);
  size_t no = tu_collect_object_ids(&t, obj, 4096);
  qsort(obj, no, sizeof obj[0], cmp_ll);
  size_t distinct = 0;
  for (size_t i = 0; i < no; i++)
    if (i == 0 || obj[i] != obj[i - 1]) obj[distinct++] = obj[i];
  /* 40 + 40 tensors, 20 + 20 storages, one shared tensor and its storage. */
  assert_int_equal(distinct, 80 + 40 + 2);
  assert_int_equal(tu_stat(&t, "objects"), 80 + 40 + 2);
  size_t i;
  json_t *node;
  json_array_foreach(t.nodes, i, node) {
    json_int_t id = tu_id(node);
    assert_true(id >= 1);
    if (bsearch(&id, obj, distinct, sizeof obj[0], cmp_ll) != NULL)
      fail_msg("node id %lld is also an object id", (long long)id);
  }
  for (size_t k = 0; k < distinct; k++) assert_true(obj[k] > 1);
  assert_int_equal(nn, 160 + 2 + 1);
  /* The shared tensor has one id on both threads. */
  json_t *m = tu_find(&t, "m_outer"), *wo = tu_find(&t, "w_outer");
  assert_int_equal(tensor_id(tu_in(m, "inputs", "values", 1)),
                   tensor_id(tu_in(wo, "inputs", "values", 1)));
  /* Within a thread, ids of successive sibling ops increase. */
  json_int_t last[2] = {0, 0};
  json_array_foreach(t.nodes, i, node) {
    const char *nm = tu_name(node);
    int k = strcmp(nm, "m_outer") == 0 ? 0 : strcmp(nm, "w_outer") == 0 ? 1 : -1;
    if (k < 0) continue;
    assert_true(tu_id(node) > last[k]);
    last[k] = tu_id(node);
  }
  free(obj);
  tu_free(&t);
}

/* Disable and enable again: ops recorded while disabled are not written, and a tensor keeps
 * its id across the gap. */
static void test_ids_stable_while_open(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static int impl, stor;
  const int64_t sz[1] = {1};
  etr_tensor a = {&impl, &stor, 0, 1, 4, "float", "cpu", 1, sz, NULL};
  etr_value in[1] = {etr_value_tensor(&a)};
  tu_op("e1", in, 1, NULL, 0);
  assert_int_equal(etr_trace_disable(t.trace), 0);
  tu_op("while_disabled", in, 1, NULL, 0);
  assert_int_equal(etr_trace_enable(t.trace), 0);
  tu_op("e2", in, 1, NULL, 0);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "while_disabled"), 0);
  char *x = dump(tu_in(tu_node(&t, "e1"), "inputs", "values", 0));
  char *y = dump(tu_in(tu_node(&t, "e2"), "inputs", "values", 0));
  assert_string_equal(x, y);
  free(x);
  free(y);
  tu_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_same_tensor_same_list),
      TU_TEST(test_shared_storage),
      TU_TEST(test_tensor_died),
      TU_TEST(test_storage_died),
      TU_TEST(test_ids_unique),
      TU_TEST(test_ids_stable_while_open),
  };
  return cmocka_run_group_tests_name("trace_ids", tests, NULL, NULL);
}
