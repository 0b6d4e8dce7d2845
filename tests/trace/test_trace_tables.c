/* tests/trace/test_trace_tables.c — the recording thread names strings and tensors it has
 * seen before by a slot of its own tables (compact events, docs/FORMAT.md). Whatever the
 * runtime does with its buffers and tensors, every node must hold what was recorded for it:
 * slots taken over while an op that names them is still open, a name buffer reused with
 * other bytes, a tensor whose metadata changes under the same identity, a dtype string
 * rewritten in place, more tensors than an op may hold slots for. Checked in the JSON trace
 * and, through etr convert, in a binary log's. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace_util.h"

#define CHILDREN 1500 /* several times the tables' 256 slots */

static char *dump(const json_t *v) {
  return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
}

static void expect_json(const json_t *v, const char *text, const char *what, int i) {
  char *d = v ? dump(v) : NULL;
  if (!d || strcmp(d, text) != 0)
    fail_msg("%s %d: got %s, expected %s", what, i, d ? d : "(missing)", text);
  free(d);
}

typedef struct world {
  char impls[CHILDREN + 8];
  char storages[CHILDREN + 8];
  int64_t sizes[CHILDREN][3];
  etr_tensor t[CHILDREN];
  char names[CHILDREN][24]; /* distinct buffers */
  char reused[24];          /* one buffer, other bytes each time */
  etr_tensor outer_t[4];
  int64_t outer_sizes[4][2];
} world;

static void tensor_init(etr_tensor *t, const void *impl, const void *storage, const int64_t *sizes,
                        int32_t nd, const char *dtype) {
  memset(t, 0, sizeof *t);
  t->impl = impl;
  t->storage = storage;
  t->numel = 1;
  for (int32_t i = 0; i < nd; i++) t->numel *= sizes[i];
  t->itemsize = 4;
  t->dtype = dtype;
  t->device = "cpu";
  t->ndim = nd;
  t->sizes = sizes;
}

/* An op left open while CHILDREN ops with new tensors and names run inside it: the slots
 * it holds must not be taken over, and every child must get its own name and shapes. */
static void record_world(world *w) {
  for (int k = 0; k < 4; k++) {
    w->outer_sizes[k][0] = 100 + k;
    w->outer_sizes[k][1] = 7;
    tensor_init(&w->outer_t[k], &w->impls[CHILDREN + k], &w->storages[CHILDREN + k],
                w->outer_sizes[k], 2, "double");
  }
  etr_value oin[4];
  for (int k = 0; k < 4; k++) oin[k] = etr_value_tensor(&w->outer_t[k]);
  for (int i = 0; i < CHILDREN; i++) {
    w->sizes[i][0] = i + 1;
    w->sizes[i][1] = 3;
    w->sizes[i][2] = i % 5 + 1;
    tensor_init(&w->t[i], &w->impls[i], &w->storages[i], w->sizes[i], 3, "float");
  }
  etr_record outer;
  tu_begin(&outer, "tables::outer", oin, 4);
  for (int i = 0; i < CHILDREN; i++) {
    const char *name;
    if (i % 2) {
      snprintf(w->names[i], sizeof w->names[i], "tables::child%d", i);
      name = w->names[i];
    } else {
      snprintf(w->reused, sizeof w->reused, "tables::child%d", i);
      name = w->reused;
    }
    /* the child's own tensor, and one of the outer op's (a slot both hold) */
    etr_value in[2] = {etr_value_tensor(&w->t[i]), etr_value_tensor(&w->outer_t[i % 4])};
    etr_value out = etr_value_tensor(&w->t[(i + 1) % CHILDREN]);
    if (i + 1 == CHILDREN) out = etr_value_tensor(&w->t[0]);
    tu_op(name, in, 2, &out, 1);
  }
  etr_value oout = etr_value_tensor(&w->outer_t[3]);
  tu_end(&outer, &oout, 1);
}

static void check_world(const tu_trace *t, const world *w) {
  json_t *outer = tu_node(t, "tables::outer");
  char want[128];
  for (int k = 0; k < 4; k++) {
    snprintf(want, sizeof want, "[%d,7]", 100 + k);
    expect_json(tu_in(outer, "inputs", "shapes", (size_t)k), want, "outer input", k);
    expect_json(tu_in(outer, "inputs", "types", (size_t)k), "\"Tensor(double)\"", "outer type", k);
  }
  expect_json(tu_in(outer, "outputs", "shapes", 0), "[103,7]", "outer output", 0);
  json_int_t outer_ids[4];
  for (int k = 0; k < 4; k++)
    outer_ids[k] =
        json_integer_value(json_array_get(tu_in(outer, "inputs", "values", (size_t)k), 0));
  for (int i = 0; i < CHILDREN; i++) {
    char name[32];
    snprintf(name, sizeof name, "tables::child%d", i);
    json_t *n = tu_node(t, name);
    snprintf(want, sizeof want, "[%d,3,%d]", i + 1, i % 5 + 1);
    expect_json(tu_in(n, "inputs", "shapes", 0), want, "child input", i);
    expect_json(tu_in(n, "inputs", "types", 0), "\"Tensor(float)\"", "child type", i);
    snprintf(want, sizeof want, "[%d,7]", 100 + i % 4);
    expect_json(tu_in(n, "inputs", "shapes", 1), want, "child's outer input", i);
    json_int_t id = json_integer_value(json_array_get(tu_in(n, "inputs", "values", 1), 0));
    if (id != outer_ids[i % 4])
      fail_msg("child %d: the outer tensor's id %lld, not %lld", i, (long long)id,
               (long long)outer_ids[i % 4]);
    int o = (i + 1) % CHILDREN;
    snprintf(want, sizeof want, "[%d,3,%d]", o + 1, o % 5 + 1);
    expect_json(tu_in(n, "outputs", "shapes", 0), want, "child output", i);
    if (tu_ctrl_deps(n) != tu_id(outer)) fail_msg("child %d: not the outer op's child", i);
  }
  (void)w;
}

static void test_slots_held_by_an_open_op(void **state) {
  (void)state;
  world *w = calloc(1, sizeof *w);
  assert_non_null(w);
  tu_trace t;
  tu_open(&t, NULL);
  record_world(w);
  tu_close_ok(&t);
  check_world(&t, w);
  tu_free(&t);
  free(w);
}

/* The same tensor identity with new metadata, a dtype buffer rewritten in place, a device
 * string at another address: never the bytes of an earlier op. */
static void test_metadata_changes_under_one_identity(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static char impl, storage;
  char dtype[16] = "float";
  char dev_a[8] = "cpu", dev_b[8] = "cuda:1";
  int64_t sizes[3] = {2, 3, 4};
  int64_t strides[3] = {12, 4, 1};
  etr_tensor x;
  tensor_init(&x, &impl, &storage, sizes, 3, dtype);
  x.strides = strides;
  etr_value in = etr_value_tensor(&x);
  tu_op("meta::a", &in, 1, NULL, 0);
  sizes[1] = 5; /* resized in place */
  tu_op("meta::b", &in, 1, NULL, 0);
  strides[0] = 1; /* made non-contiguous */
  tu_op("meta::c", &in, 1, NULL, 0);
  strcpy(dtype, "c10::Half"); /* the dtype buffer rewritten */
  tu_op("meta::d", &in, 1, NULL, 0);
  x.device = dev_b;
  tu_op("meta::e", &in, 1, NULL, 0);
  x.device = dev_a;
  x.storage_offset = 9;
  tu_op("meta::f", &in, 1, NULL, 0);
  x.ndim = 1;
  tu_op("meta::g", &in, 1, NULL, 0);
  /* each word of a slot's key alone: numel, itemsize, the storage identity, the offset */
  x.ndim = 3;
  x.storage_offset = 0;
  tu_op("meta::h", &in, 1, NULL, 0);
  x.numel = 7;
  tu_op("meta::i", &in, 1, NULL, 0);
  x.itemsize = 2;
  tu_op("meta::j", &in, 1, NULL, 0);
  static char storage2;
  x.storage = &storage2;
  tu_op("meta::k", &in, 1, NULL, 0);
  x.storage = &storage;
  tu_op("meta::l", &in, 1, NULL, 0);
  tu_close_ok(&t);
  expect_json(tu_in(tu_node(&t, "meta::a"), "inputs", "shapes", 0), "[2,3,4]", "a", 0);
  expect_json(tu_in(tu_node(&t, "meta::b"), "inputs", "shapes", 0), "[2,5,4]", "b", 0);
  expect_json(tu_in(tu_node(&t, "meta::b"), "inputs", "strides", 0), "[12,4,1]", "b", 0);
  expect_json(tu_in(tu_node(&t, "meta::c"), "inputs", "strides", 0), "[1,4,1]", "c", 0);
  expect_json(tu_in(tu_node(&t, "meta::c"), "inputs", "types", 0), "\"Tensor(float)\"", "c", 0);
  expect_json(tu_in(tu_node(&t, "meta::d"), "inputs", "types", 0), "\"Tensor(c10::Half)\"", "d", 0);
  json_t *e = tu_in(tu_node(&t, "meta::e"), "inputs", "values", 0);
  expect_json(json_array_get(e, 5), "\"cuda:1\"", "e device", 0);
  json_t *f = tu_in(tu_node(&t, "meta::f"), "inputs", "values", 0);
  expect_json(json_array_get(f, 5), "\"cpu\"", "f device", 0);
  expect_json(json_array_get(f, 2), "9", "f offset", 0);
  expect_json(tu_in(tu_node(&t, "meta::g"), "inputs", "shapes", 0), "[2]", "g", 0);
  json_t *h = tu_in(tu_node(&t, "meta::h"), "inputs", "values", 0);
  json_t *i = tu_in(tu_node(&t, "meta::i"), "inputs", "values", 0);
  json_t *j = tu_in(tu_node(&t, "meta::j"), "inputs", "values", 0);
  json_t *k = tu_in(tu_node(&t, "meta::k"), "inputs", "values", 0);
  json_t *l = tu_in(tu_node(&t, "meta::l"), "inputs", "values", 0);
  expect_json(json_array_get(h, 2), "0", "h offset", 0);
  expect_json(json_array_get(i, 3), "7", "i numel", 0);
  expect_json(json_array_get(i, 4), "4", "i itemsize", 0);
  expect_json(json_array_get(j, 4), "2", "j itemsize", 0);
  /* another storage gets another id; the first storage keeps its own */
  assert_int_not_equal(json_integer_value(json_array_get(k, 1)),
                       json_integer_value(json_array_get(j, 1)));
  assert_int_equal(json_integer_value(json_array_get(l, 1)),
                   json_integer_value(json_array_get(j, 1)));
  assert_int_equal(json_integer_value(json_array_get(k, 0)),
                   json_integer_value(json_array_get(j, 0)));
  tu_free(&t);
}

/* Known tensors mixed with scalars and new tensors, in every position: the references the
 * recording thread writes as it finds them and the values after the first other one (which
 * encode.c goes on with) come out in order, each with its own shape. */
static void test_known_tensors_mixed_with_others(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static char impl[6], storage[6];
  static const int64_t one[1] = {1};
  int64_t sizes[6][1];
  etr_tensor x[6];
  for (int k = 0; k < 6; k++) {
    sizes[k][0] = 10 + k;
    tensor_init(&x[k], &impl[k], &storage[k], sizes[k], 1, "float");
    x[k].strides = one;
  }
  etr_value seen[3] = {etr_value_tensor(&x[0]), etr_value_tensor(&x[1]), etr_value_tensor(&x[2])};
  tu_op("mix::define", seen, 3, NULL, 0);
  /* known, int, known, new, known, new, none, known */
  etr_value in[8] = {etr_value_tensor(&x[0]), etr_value_int(5),        etr_value_tensor(&x[1]),
                     etr_value_tensor(&x[3]), etr_value_tensor(&x[2]), etr_value_tensor(&x[4]),
                     etr_value_none(),        etr_value_tensor(&x[0])};
  etr_value out[2] = {etr_value_tensor(&x[5]), etr_value_tensor(&x[1])}; /* new, known */
  tu_op("mix::a", in, 8, out, 2);
  tu_op("mix::b", in, 8, out, 2); /* all known now but the scalars */
  tu_op("mix::c", in + 2, 1, out + 1, 1);
  tu_close_ok(&t);
  const char *shapes = "[[10],[],[11],[13],[12],[14],[],[10]]";
  const char *types =
      "[\"Tensor(float)\",\"Int\",\"Tensor(float)\",\"Tensor(float)\",\"Tensor(float)\","
      "\"Tensor(float)\",\"None\",\"Tensor(float)\"]";
  for (const char *op = "a"; *op; op = *op == 'a' ? "b" : "") {
    char name[8];
    snprintf(name, sizeof name, "mix::%s", op);
    json_t *node = tu_node(&t, name);
    expect_json(json_object_get(json_object_get(node, "inputs"), "shapes"), shapes, name, 0);
    expect_json(json_object_get(json_object_get(node, "inputs"), "types"), types, name, 0);
    expect_json(json_object_get(json_object_get(node, "outputs"), "shapes"), "[[15],[11]]", name,
                1);
    json_t *v = json_object_get(json_object_get(node, "inputs"), "values");
    /* the same tensor twice: one id */
    assert_int_equal(json_integer_value(json_array_get(json_array_get(v, 0), 0)),
                     json_integer_value(json_array_get(json_array_get(v, 7), 0)));
    expect_json(json_array_get(v, 1), "5", name, 2);
  }
  expect_json(tu_in(tu_node(&t, "mix::c"), "inputs", "shapes", 0), "[11]", "c", 0);
  tu_free(&t);
}

/* A 3x4 tensor with explicit strides (arrays owned by the caller, which keeps them). */
static void small_tensor(etr_tensor *x, const void *impl, const void *storage, int64_t sizes[2],
                         int64_t strides[2], const char *dtype) {
  sizes[0] = 3;
  sizes[1] = 4;
  strides[0] = 4;
  strides[1] = 1;
  tensor_init(x, impl, storage, sizes, 2, dtype);
  x->strides = strides;
}

/* A tensor's slot is found without an id lookup while the id map has not changed (the
 * thread notes where its ids were read): after the runtime says the tensor or its storage
 * died, the same identity with the same metadata must still get a new id. */
static void test_identity_reused_after_death(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static char impl, storage;
  int64_t sizes[2], strides[2];
  etr_tensor x;
  small_tensor(&x, &impl, &storage, sizes, strides, "float");
  etr_value in = etr_value_tensor(&x);
  tu_op("life::a", &in, 1, NULL, 0);
  tu_op("life::a2", &in, 1, NULL, 0); /* a hit */
  etr_tensor_died(&impl);
  tu_op("life::b", &in, 1, NULL, 0);
  etr_storage_died(&storage);
  tu_op("life::c", &in, 1, NULL, 0);
  tu_close_ok(&t);
  json_t *a = tu_in(tu_node(&t, "life::a"), "inputs", "values", 0);
  json_t *a2 = tu_in(tu_node(&t, "life::a2"), "inputs", "values", 0);
  json_t *b = tu_in(tu_node(&t, "life::b"), "inputs", "values", 0);
  json_t *c = tu_in(tu_node(&t, "life::c"), "inputs", "values", 0);
  assert_non_null(a);
  assert_non_null(a2);
  assert_non_null(b);
  assert_non_null(c);
  json_int_t ta = json_integer_value(json_array_get(a, 0));
  json_int_t sa = json_integer_value(json_array_get(a, 1));
  assert_int_equal(json_integer_value(json_array_get(a2, 0)), ta);
  assert_int_equal(json_integer_value(json_array_get(a2, 1)), sa);
  json_int_t tb = json_integer_value(json_array_get(b, 0));
  assert_true(tb != ta); /* the tensor died: a new one */
  assert_int_equal(json_integer_value(json_array_get(b, 1)), sa);
  assert_int_equal(json_integer_value(json_array_get(c, 0)), tb);
  assert_true(json_integer_value(json_array_get(c, 1)) != sa); /* the storage died */
  tu_free(&t);
}

/* Interned strings (etr_intern) are known by address: one pointer per distinct string, and
 * a trace made with them holds the same names, types and devices as with the runtime's own
 * buffers, also when a buffer of the runtime holds the same bytes at another address. */
static void test_interned_strings(void **state) {
  (void)state;
  const char *mm = etr_intern("intern::mm");
  assert_non_null(mm);
  char buf[32] = "intern::mm";
  assert_ptr_equal(etr_intern(buf), mm); /* same bytes, same pointer */
  assert_ptr_not_equal(mm, buf);
  assert_string_equal(mm, "intern::mm");
  const char *f32 = etr_intern("float"), *f16 = etr_intern("c10::Half");
  assert_ptr_not_equal(f32, f16);
  assert_null(etr_intern(NULL));
  char *big = malloc(ETR_INTERN_MAX + 2);
  assert_non_null(big);
  memset(big, 'x', ETR_INTERN_MAX + 1);
  big[ETR_INTERN_MAX + 1] = '\0';
  assert_null(etr_intern(big)); /* too long */
  big[ETR_INTERN_MAX] = '\0';
  assert_non_null(etr_intern(big)); /* at the limit */
  free(big);

  tu_trace t;
  tu_open(&t, NULL);
  static char impl, storage;
  int64_t sizes[2], strides[2];
  etr_tensor x;
  small_tensor(&x, &impl, &storage, sizes, strides, f32);
  x.device = etr_intern("cuda:0");
  etr_value in = etr_value_tensor(&x);
  tu_op(mm, &in, 1, NULL, 0);
  tu_op(mm, &in, 1, NULL, 0);
  x.dtype = f16; /* another interned dtype under the same identity */
  tu_op("intern::half", &in, 1, NULL, 0);
  strcpy(buf, "float");
  x.dtype = buf; /* the runtime's buffer, same bytes as an interned string */
  tu_op("intern::buf", &in, 1, NULL, 0);
  strcpy(buf, "bfloat16"); /* bytes no slot holds: the buffer's own slot */
  tu_op("intern::buf1", &in, 1, NULL, 0);
  strcpy(buf, "double"); /* rewritten: known by bytes, never by the address */
  tu_op("intern::buf2", &in, 1, NULL, 0);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "intern::mm"), 2);
  int mms = 0;
  for (size_t i = 0; i < json_array_size(t.nodes); i++) {
    json_t *node = json_array_get(t.nodes, i);
    const char *name = tu_name(node);
    if (name && strcmp(name, "intern::mm") == 0) {
      mms++;
      expect_json(tu_in(node, "inputs", "types", 0), "\"Tensor(float)\"", "mm", mms);
      json_t *v = tu_in(node, "inputs", "values", 0);
      expect_json(json_array_get(v, 5), "\"cuda:0\"", "mm device", mms);
    }
  }
  assert_int_equal(mms, 2);
  expect_json(tu_in(tu_node(&t, "intern::half"), "inputs", "types", 0), "\"Tensor(c10::Half)\"",
              "half", 0);
  expect_json(tu_in(tu_node(&t, "intern::buf"), "inputs", "types", 0), "\"Tensor(float)\"", "buf",
              0);
  expect_json(tu_in(tu_node(&t, "intern::buf1"), "inputs", "types", 0), "\"Tensor(bfloat16)\"",
              "buf1", 0);
  expect_json(tu_in(tu_node(&t, "intern::buf2"), "inputs", "types", 0), "\"Tensor(double)\"",
              "buf2", 0);
  tu_free(&t);
}

/* More tensors than an op may hold slots for, the same tensor twice, tensors in nested
 * lists, a tensor of many dimensions and one with a long dtype: all written as recorded. */
static void test_many_and_unusual_tensors(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static char impls[40], storages[40];
  int64_t sizes[40][12];
  etr_tensor ts[40];
  for (int i = 0; i < 40; i++) {
    for (int d = 0; d < 12; d++) sizes[i][d] = i + d + 1;
    tensor_init(&ts[i], &impls[i], &storages[i], sizes[i], i == 30 ? 12 : 2,
                i == 31 ? "a.dtype.name.longer.than.fifteen" : "float");
  }
  for (int round = 0; round < 3; round++) { /* first seen, then by slot */
    etr_value items[20], inner[2], in[24];
    for (int i = 0; i < 20; i++) items[i] = etr_value_tensor(&ts[i]);
    inner[0] = etr_value_tensor(&ts[20]);
    inner[1] = etr_value_list(items + 18, 2);
    uint32_t n = 0;
    in[n++] = etr_value_tensor(&ts[21]);
    in[n++] = etr_value_tensor(&ts[21]);
    in[n++] = etr_value_list(items, 20);
    in[n++] = etr_value_tuple(inner, 2);
    in[n++] = etr_value_tensor(&ts[30]);
    in[n++] = etr_value_tensor(&ts[31]);
    for (int i = 22; i < 30; i++) in[n++] = etr_value_tensor(&ts[i]);
    char name[32];
    snprintf(name, sizeof name, "many::%d", round);
    tu_op(name, in, n, NULL, 0);
  }
  tu_close_ok(&t);
  for (int round = 0; round < 3; round++) {
    char name[32];
    snprintf(name, sizeof name, "many::%d", round);
    json_t *n = tu_node(&t, name);
    expect_json(tu_in(n, "inputs", "shapes", 0), "[22,23]", "twice, first", round);
    expect_json(tu_in(n, "inputs", "shapes", 1), "[22,23]", "twice, second", round);
    char want[512];
    size_t o = (size_t)snprintf(want, sizeof want, "[");
    for (int i = 0; i < 20; i++)
      o += (size_t)snprintf(want + o, sizeof want - o, "%s[%d,%d]", i ? "," : "", i + 1, i + 2);
    snprintf(want + o, sizeof want - o, "]");
    expect_json(tu_in(n, "inputs", "shapes", 2), want, "list", round);
    expect_json(tu_in(n, "inputs", "shapes", 3), "[[21,22],[[19,20],[20,21]]]", "tuple", round);
    expect_json(tu_in(n, "inputs", "shapes", 4), "[31,32,33,34,35,36,37,38,39,40,41,42]", "12 dims",
                round);
    expect_json(tu_in(n, "inputs", "types", 5), "\"Tensor(a.dtype.name.longer.than.fifteen)\"",
                "long dtype", round);
    for (int i = 22; i < 30; i++) {
      snprintf(want, sizeof want, "[%d,%d]", i + 1, i + 2);
      expect_json(tu_in(n, "inputs", "shapes", (size_t)(i - 16)), want, "tail", i);
    }
  }
  tu_free(&t);
}

/* Threads that start after others ended take over their state and stream: the new thread's
 * tables start empty (the decoder's copies of the old ones must never answer for it), even
 * when its name buffer and tensors sit at the addresses the previous thread used. */
#define CHURN 40
typedef struct churn_arg {
  int k;
  char *impl;
} churn_arg;

static void *churn_thread(void *p) {
  churn_arg *a = p;
  char name[32]; /* on the stack: the same address in thread after thread */
  int64_t sizes[2] = {a->k + 1, 2};
  etr_tensor x;
  tensor_init(&x, a->impl, a->impl + 1, sizes, 2, a->k % 2 ? "float" : "double");
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "churn::%d.%d", a->k, i);
    etr_value in = etr_value_tensor(&x);
    tu_op(name, &in, 1, &in, 1);
  }
  return NULL;
}

static void test_thread_churn(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static char impl[2];
  for (int k = 0; k < CHURN; k++) {
    churn_arg a = {k, impl}; /* one tensor address for all, a new tensor each time */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, churn_thread, &a), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    etr_tensor_died(impl);
    etr_storage_died(impl + 1);
  }
  tu_close_ok(&t);
  for (int k = 0; k < CHURN; k++)
    for (int i = 0; i < 3; i++) {
      char name[32], want[64];
      snprintf(name, sizeof name, "churn::%d.%d", k, i);
      json_t *n = tu_node(&t, name);
      snprintf(want, sizeof want, "[%d,2]", k + 1);
      expect_json(tu_in(n, "inputs", "shapes", 0), want, "churn shape", k);
      expect_json(tu_in(n, "outputs", "types", 0),
                  k % 2 ? "\"Tensor(float)\"" : "\"Tensor(double)\"", "churn type", k);
    }
  tu_free(&t);
}

/* A JSON trace with tracebacks keeps its tables beside it (path.tables) only while it may
 * be cut short: a clean close removes the file, and one left by an earlier run of the same
 * path goes at open (it would be taken for the new trace's). */
static void test_tables_beside_json(void **state) {
  (void)state;
  char dir[256], path[300], side[320];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/tb.json", dir);
  snprintf(side, sizeof side, "%s/tb.json.tables", dir);
  FILE *stale = fopen(side, "w");
  assert_non_null(stale);
  fputs("stale", stale);
  fclose(stale);
  etr_trace_options o;
  etr_traceback_options tb;
  tu_traceback_options(&o, &tb);
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(path, &o, &tr), 0);
  assert_int_equal(access(side, F_OK), -1); /* the stale one is gone */
  assert_int_equal(etr_trace_enable(tr), 0);
  tu_op("beside::a", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_flush(tr), 0);
  assert_int_equal(access(side, F_OK), 0); /* written with the node that named it */
  tu_op("beside::b", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_close(tr), 0);
  assert_int_equal(access(side, F_OK), -1); /* the footer holds the tables */
  tu_trace t;
  tu_load_path(&t, path);
  assert_non_null(tu_attr(tu_node(&t, "beside::a"), "traceback"));
  tu_free(&t);
  unlink(path);
  tu_rmdir(dir);
}

#ifdef ETR_TOOL
/* The binary log holds the same references: etr convert resolves them alike. */
static void test_binary_log(void **state) {
  (void)state;
  world *w = calloc(1, sizeof *w);
  assert_non_null(w);
  tu_trace t;
  tu_open_binary(&t, NULL);
  record_world(w);
  tu_close_convert(&t, ETR_TOOL);
  check_world(&t, w);
  tu_free(&t);
  free(w);
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_slots_held_by_an_open_op),
      TU_TEST(test_metadata_changes_under_one_identity),
      TU_TEST(test_known_tensors_mixed_with_others),
      TU_TEST(test_identity_reused_after_death),
      TU_TEST(test_interned_strings),
      TU_TEST(test_many_and_unusual_tensors),
      TU_TEST(test_thread_churn),
      TU_TEST(test_tables_beside_json),
#ifdef ETR_TOOL
      TU_TEST(test_binary_log),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
