/* tests/trace/test_trace_values.c — how every value kind is written (docs/FORMAT.md): values,
 * types, shapes, strides; string escaping and UTF-8 repair; the size limits. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_util.h"

/* Compact JSON text of a parsed value (for exact comparisons of nested structures). */
static char *dump(const json_t *v) {
  return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
}

#define assert_json(v, text)                                       \
  do {                                                             \
    char *d_ = dump(v);                                            \
    if (d_ == NULL || strcmp(d_, (text)) != 0)                     \
      fail_msg("got %s, expected %s", d_ ? d_ : "(null)", (text)); \
    free(d_);                                                      \
  } while (0)

/* values[i], shapes[i], types[i], strides[i] of the node's inputs (or outputs). */
typedef struct slot {
  json_t *value, *shape, *type, *strides;
} slot;

static slot get_slot(const json_t *node, const char *io, size_t i) {
  slot s = {tu_in(node, io, "values", i), tu_in(node, io, "shapes", i), tu_in(node, io, "types", i),
            tu_in(node, io, "strides", i)};
  if (s.value == NULL || s.shape == NULL || s.type == NULL || s.strides == NULL)
    fail_msg("node %s: %s slot %zu missing", tu_name(node), io, i);
  return s;
}

/* Slot i of io, its value and type reading as these JSON texts; returned for more checks. */
static slot slot_is(const json_t *node, const char *io, size_t i, const char *value,
                    const char *type) {
  slot s = get_slot(node, io, i);
  assert_json(s.value, value);
  assert_json(s.type, type);
  return s;
}

static void assert_scalar_shape(slot s) {
  assert_json(s.shape, "[]");
  assert_json(s.strides, "[]");
}

static void test_scalars(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_value in[] = {
      etr_value_none(),           etr_value_bool(true),
      etr_value_bool(false),      etr_value_int(INT64_MIN),
      etr_value_int(INT64_MAX),   etr_value_int(0),
      etr_value_int(-1),          etr_value_double(1.5),
      etr_value_double(0.1),      etr_value_double(-2.5e-300),
      etr_value_double(1e300),    etr_value_double(NAN),
      etr_value_double(INFINITY), etr_value_double(-INFINITY),
      etr_value_double(3.0),      etr_value_string("hello"),
      etr_value_string(""),       etr_value_device("cuda:0"),
      etr_value_device("cpu"),    etr_value_object("Generator"),
  };
  etr_value out[] = {etr_value_int(7), etr_value_string("done")};
  tu_op("scalars", in, TU_ARRAY_LEN(in), out, 2);
  tu_close_ok(&t);

  json_t *n = tu_node(&t, "scalars");
  assert_int_equal(json_array_size(json_object_get(json_object_get(n, "inputs"), "values")),
                   TU_ARRAY_LEN(in));
  size_t i = 0;
  slot s;
  s = slot_is(n, "inputs", i++, "\"<None>\"", "\"None\"");
  assert_scalar_shape(s);
  s = get_slot(n, "inputs", i++);
  assert_true(json_is_true(s.value));
  assert_json(s.type, "\"Bool\"");
  assert_scalar_shape(s);
  s = get_slot(n, "inputs", i++);
  assert_true(json_is_false(s.value));
  assert_json(s.type, "\"Bool\"");
  s = get_slot(n, "inputs", i++);
  assert_true(json_is_integer(s.value));
  assert_true(json_integer_value(s.value) == INT64_MIN);
  assert_json(s.type, "\"Int\"");
  assert_scalar_shape(s);
  assert_non_null(strstr(t.text, "-9223372036854775808"));
  s = get_slot(n, "inputs", i++);
  assert_true(json_integer_value(s.value) == INT64_MAX);
  assert_true(json_is_integer(s.value));
  assert_non_null(strstr(t.text, "9223372036854775807"));
  s = get_slot(n, "inputs", i++);
  assert_true(json_is_integer(s.value) && json_integer_value(s.value) == 0);
  s = get_slot(n, "inputs", i++);
  assert_true(json_is_integer(s.value) && json_integer_value(s.value) == -1);
  /* Doubles round-trip exactly. */
  static const double dv[] = {1.5, 0.1, -2.5e-300, 1e300};
  for (size_t k = 0; k < TU_ARRAY_LEN(dv); k++) {
    s = get_slot(n, "inputs", i++);
    assert_true(json_is_number(s.value));
    if (json_number_value(s.value) != dv[k])
      fail_msg("double %.17g written as %.17g", dv[k], json_number_value(s.value));
    assert_json(s.type, "\"Double\"");
    assert_scalar_shape(s);
  }
  s = slot_is(n, "inputs", i++, "\"nan\"", "\"Double\"");
  s = slot_is(n, "inputs", i++, "\"inf\"", "\"Double\"");
  s = slot_is(n, "inputs", i++, "\"-inf\"", "\"Double\"");
  assert_scalar_shape(s);
  s = get_slot(n, "inputs", i++);
  assert_true(json_is_number(s.value) && json_number_value(s.value) == 3.0);
  assert_json(s.type, "\"Double\"");
  s = slot_is(n, "inputs", i++, "\"hello\"", "\"String\"");
  assert_scalar_shape(s);
  s = slot_is(n, "inputs", i++, "\"\"", "\"String\"");
  s = slot_is(n, "inputs", i++, "\"cuda:0\"", "\"Device\"");
  assert_scalar_shape(s);
  s = slot_is(n, "inputs", i++, "\"cpu\"", "\"Device\"");
  s = get_slot(n, "inputs", i++);
  assert_json(s.value, "\"<Generator>\"");
  /* As PyTorch writes it (value "<Object>", type "Object"); docs/FORMAT.md. */
  assert_json(s.type, "\"Generator\"");
  assert_scalar_shape(s);

  s = slot_is(n, "outputs", 0, "7", "\"Int\"");
  s = get_slot(n, "outputs", 1);
  assert_json(s.value, "\"done\"");
  tu_free(&t);
}

static void test_tensors(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static int impl[8], storage[4];
  const int64_t sz3[3] = {2, 3, 4}, st3[3] = {12, 4, 1}, nc[3] = {1, 2, 6};
  etr_tensor a = {&impl[0], &storage[0], 3, 24, 4, "float", "cpu", 3, sz3, st3};
  etr_tensor b = {&impl[1], &storage[0], 0, 24, 4, "float", "cuda:1", 3, sz3, nc};
  etr_tensor c = {&impl[2], &storage[1], 0, 24, 8, "double", "cpu", 3, sz3, NULL};
  etr_tensor d = {&impl[3], &storage[2], 5, 1, 8, "long", "cpu", 0, NULL, NULL};
  etr_tensor u = {&impl[4], NULL, 0, 0, 0, NULL, NULL, 0, NULL, NULL};
  etr_tensor e = {&impl[5], NULL, 0, 0, 2, "c10::Half", NULL, 1, (const int64_t[]){0}, NULL};
  etr_value in[] = {etr_value_tensor(&a), etr_value_tensor(&b), etr_value_tensor(&c),
                    etr_value_tensor(&d), etr_value_tensor(&u), etr_value_tensor(&e)};
  etr_value out[] = {etr_value_tensor(&a)};
  tu_op("tensors", in, TU_ARRAY_LEN(in), out, 1);
  tu_close_ok(&t);

  json_t *n = tu_node(&t, "tensors");
  slot s = get_slot(n, "inputs", 0);
  json_int_t ta = json_integer_value(json_array_get(s.value, 0));
  json_int_t sa = json_integer_value(json_array_get(s.value, 1));
  assert_true(ta > 1 && sa > 1 && ta != sa);
  char want[256];
  snprintf(want, sizeof want, "[%lld,%lld,3,24,4,\"cpu\"]", (long long)ta, (long long)sa);
  assert_json(s.value, want);
  assert_json(s.type, "\"Tensor(float)\"");
  assert_json(s.shape, "[2,3,4]");
  assert_json(s.strides, "[12,4,1]");
  /* b shares a's storage, has its own id, keeps non-contiguous strides. */
  s = get_slot(n, "inputs", 1);
  json_int_t tb = json_integer_value(json_array_get(s.value, 0));
  assert_true(tb > 1 && tb != ta && tb != sa);
  snprintf(want, sizeof want, "[%lld,%lld,0,24,4,\"cuda:1\"]", (long long)tb, (long long)sa);
  assert_json(s.value, want);
  assert_json(s.strides, "[1,2,6]");
  /* NULL strides: contiguous strides. */
  s = get_slot(n, "inputs", 2);
  assert_json(s.type, "\"Tensor(double)\"");
  assert_json(s.shape, "[2,3,4]");
  assert_json(s.strides, "[12,4,1]");
  assert_int_equal(json_integer_value(json_array_get(s.value, 4)), 8);
  /* 0-dim tensor: shape [] strides []. */
  s = get_slot(n, "inputs", 3);
  assert_json(s.type, "\"Tensor(long)\"");
  assert_json(s.shape, "[]");
  assert_json(s.strides, "[]");
  assert_int_equal(json_integer_value(json_array_get(s.value, 2)), 5);
  assert_int_equal(json_integer_value(json_array_get(s.value, 3)), 1);
  /* Undefined tensor. */
  s = get_slot(n, "inputs", 4);
  json_int_t tu = json_integer_value(json_array_get(s.value, 0));
  assert_true(tu > 1);
  snprintf(want, sizeof want, "[%lld,0,0,0,0,\"\"]", (long long)tu);
  assert_json(s.value, want);
  assert_json(s.type, "\"Tensor(nullptr (uninitialized))\"");
  assert_json(s.shape, "[]");
  assert_json(s.strides, "[]");
  /* No storage: storage id 0; NULL device: "". */
  s = get_slot(n, "inputs", 5);
  json_int_t te = json_integer_value(json_array_get(s.value, 0));
  snprintf(want, sizeof want, "[%lld,0,0,0,2,\"\"]", (long long)te);
  assert_json(s.value, want);
  assert_json(s.type, "\"Tensor(c10::Half)\"");
  assert_json(s.shape, "[0]");
  assert_json(s.strides, "[1]");
  /* Output a is the same list as input a. */
  s = get_slot(n, "outputs", 0);
  char *x = dump(s.value), *y = dump(get_slot(n, "inputs", 0).value);
  assert_string_equal(x, y);
  free(x);
  free(y);
  tu_free(&t);
}

static void test_lists_tuples(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static int impl[2], storage[2];
  etr_tensor a = {&impl[0], &storage[0], 0, 6, 4, "float", "cpu", 2, (const int64_t[]){2, 3}, NULL};
  etr_tensor b = {&impl[1], &storage[1], 0, 4, 4, "float", "cpu", 1, (const int64_t[]){4}, NULL};
  etr_value ints[3] = {etr_value_int(1), etr_value_int(2), etr_value_int(3)};
  etr_value tup[2] = {etr_value_string("a"), etr_value_int(1)};
  etr_value tens[2] = {etr_value_tensor(&a), etr_value_tensor(&b)};
  etr_value l12[2] = {etr_value_int(1), etr_value_int(2)};
  etr_value l3[1] = {etr_value_int(3)};
  etr_value ll[2] = {etr_value_list(l12, 2), etr_value_list(l3, 1)};
  etr_value mixed[4] = {etr_value_none(), etr_value_double(0.5), etr_value_bool(true),
                        etr_value_tuple(tup, 2)};
  etr_value in[] = {etr_value_list(ints, 3), etr_value_list(NULL, 0), etr_value_tuple(tup, 2),
                    etr_value_list(tens, 2), etr_value_list(ll, 2),   etr_value_list(mixed, 4),
                    etr_value_tuple(NULL, 0)};
  tu_op("lists", in, TU_ARRAY_LEN(in), NULL, 0);
  tu_close_ok(&t);

  json_t *n = tu_node(&t, "lists");
  slot s = get_slot(n, "inputs", 0);
  assert_json(s.value, "[1,2,3]");
  assert_json(s.type, "\"GenericList[Int,Int,Int]\"");
  assert_json(s.shape, "[[],[],[]]");
  assert_json(s.strides, "[[],[],[]]");
  s = slot_is(n, "inputs", 1, "[]", "\"GenericList[]\"");
  assert_json(s.shape, "[]");
  assert_json(s.strides, "[]");
  s = slot_is(n, "inputs", 2, "[\"a\",1]", "\"Tuple[String,Int]\"");
  assert_json(s.shape, "[[],[]]");
  assert_json(s.strides, "[[],[]]");
  s = get_slot(n, "inputs", 3);
  json_t *v0 = json_array_get(s.value, 0), *v1 = json_array_get(s.value, 1);
  assert_int_equal(json_array_size(s.value), 2);
  char want[256];
  snprintf(want, sizeof want, "[%lld,%lld,0,6,4,\"cpu\"]",
           (long long)json_integer_value(json_array_get(v0, 0)),
           (long long)json_integer_value(json_array_get(v0, 1)));
  assert_json(v0, want);
  assert_int_equal(json_array_size(v1), 6);
  assert_true(json_integer_value(json_array_get(v0, 0)) !=
              json_integer_value(json_array_get(v1, 0)));
  assert_json(s.type, "\"GenericList[Tensor(float),Tensor(float)]\"");
  assert_json(s.shape, "[[2,3],[4]]");
  assert_json(s.strides, "[[3,1],[1]]");
  s = slot_is(n, "inputs", 4, "[[1,2],[3]]",
              "\"GenericList[GenericList[Int,Int],GenericList[Int]]\"");
  assert_json(s.shape, "[[[],[]],[[]]]");
  assert_json(s.strides, "[[[],[]],[[]]]");
  s = slot_is(n, "inputs", 5, "[\"<None>\",0.5,true,[\"a\",1]]",
              "\"GenericList[None,Double,Bool,Tuple[String,Int]]\"");
  assert_json(s.shape, "[[],[],[],[[],[]]]");
  s = slot_is(n, "inputs", 6, "[]", "\"Tuple[]\"");
  tu_free(&t);
}

/* ---- escaping and UTF-8 ---- */

static json_t *string_value(const json_t *node, size_t i) {
  json_t *v = tu_in(node, "inputs", "values", i);
  if (!json_is_string(v)) fail_msg("input %zu of %s is not a string", i, tu_name(node));
  return v;
}

static void test_escaping(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  char ctl[34];
  for (int c = 1; c < 0x20; c++) ctl[c - 1] = (char)c;
  ctl[31] = 0x7f;
  ctl[32] = 'x';
  ctl[33] = '\0';
  static const char utf8[] =
      "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9D\x84\x9E \xE4\xB8\xAD\xE6\x96\x87"
      " \xEF\xBF\xBF \xF4\x8F\xBF\xBF";
  static const char nul[] = {'a', '\0', 'b', '"', '\0'};
  etr_value in[] = {etr_value_string("a\"b\\c/d"), etr_value_string(ctl), etr_value_string(utf8),
                    etr_value_string_n(nul, 4), etr_value_device("dev\"\\\n")};
  etr_record r;
  etr_record_init(&r, "esc\"name\\\x01\xC3\xA9", ETR_SCOPE_FUNCTION);
  r.schema = "aten::x(Tensor \"self\") -> \\ \t";
  r.inputs = in;
  r.n_inputs = TU_ARRAY_LEN(in);
  etr_record_begin(&r);
  etr_record_end(&r);
  tu_close_ok(&t);

  json_t *n = tu_node(&t, "esc\"name\\\x01\xC3\xA9");
  assert_string_equal(tu_attr_str(n, "op_schema"), "aten::x(Tensor \"self\") -> \\ \t");
  assert_string_equal(json_string_value(string_value(n, 0)), "a\"b\\c/d");
  json_t *v = string_value(n, 1);
  assert_int_equal(json_string_length(v), 33);
  assert_memory_equal(json_string_value(v), ctl, 33);
  v = string_value(n, 2);
  assert_int_equal(json_string_length(v), strlen(utf8));
  assert_string_equal(json_string_value(v), utf8);
  v = string_value(n, 3);
  assert_int_equal(json_string_length(v), 4);
  assert_memory_equal(json_string_value(v), nul, 4);
  assert_non_null(strstr(t.text, "a\\u0000b\\\""));
  v = tu_in(n, "inputs", "values", 4);
  assert_string_equal(json_string_value(v), "dev\"\\\n");
  /* No raw control byte anywhere inside a string of the file. */
  int in_str = 0;
  for (size_t i = 0; i < t.len; i++) {
    unsigned char c = (unsigned char)t.text[i];
    if (in_str && c < 0x20) fail_msg("raw control byte 0x%02x inside a string at %zu", c, i);
    if (c == '"') in_str = !in_str;
    if (c == '\\' && in_str) i++;
  }
  assert_int_equal(tu_stat(&t, "utf8_replaced"), 0);
  tu_free(&t);
}

struct bad_case {
  const char *bytes;
  const char *prefix, *suffix;
  size_t kmin, kmax; /* how many U+FFFD may stand for the bad bytes */
};

static void test_invalid_utf8(void **state) {
  (void)state;
  static const struct bad_case cases[] = {
      {"a\x80z", "a", "z", 1, 1},                             /* lone continuation byte */
      {"a\x80\xBF\x80z", "a", "z", 1, 3},                     /* run of continuation bytes */
      {"a\xC0\xAFz", "a", "z", 1, 2},                         /* overlong '/' (2 bytes) */
      {"a\xC1\xBFz", "a", "z", 1, 2},                         /* overlong (C1) */
      {"a\xE0\x80\xAFz", "a", "z", 1, 3},                     /* overlong (3 bytes) */
      {"a\xF0\x80\x80\xAFz", "a", "z", 1, 4},                 /* overlong (4 bytes) */
      {"a\xED\xA0\x80z", "a", "z", 1, 3},                     /* UTF-8 encoded surrogate U+D800 */
      {"a\xED\xBF\xBFz", "a", "z", 1, 3},                     /* surrogate U+DFFF */
      {"a\xF4\x90\x80\x80z", "a", "z", 1, 4},                 /* above U+10FFFF */
      {"a\xFFz", "a", "z", 1, 1},                             /* 0xFF */
      {"a\xFEz", "a", "z", 1, 1},                             /* 0xFE */
      {"a\xC3z", "a", "z", 1, 1},                             /* lead byte then ASCII */
      {"ab\xE2\x82", "ab", "", 1, 2},                         /* truncated sequence at the end */
      {"\xF0\x9F\x98", "", "", 1, 3},                         /* truncated 4-byte, alone */
      {"\xC3\xA9\xFF\xC3\xA9", "\xC3\xA9", "\xC3\xA9", 1, 1}, /* valid around invalid */
  };
  size_t nc = TU_ARRAY_LEN(cases);
  tu_trace t;
  tu_open(&t, NULL);
  etr_value in[TU_ARRAY_LEN(cases)];
  for (size_t i = 0; i < nc; i++) in[i] = etr_value_string(cases[i].bytes);
  etr_record r;
  etr_record_init(&r, "bad\xFFname", ETR_SCOPE_FUNCTION);
  r.schema = "sch\xC0\xAF";
  r.inputs = in;
  r.n_inputs = (uint32_t)nc;
  etr_record_begin(&r);
  etr_record_end(&r);
  etr_value dev[2] = {etr_value_device("cu\xFF"), etr_value_object("K\x80")};
  tu_op("bad_more", dev, 2, NULL, 0);
  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  assert_int_equal(etr_trace_flush(t.trace), 0);
  assert_int_equal(etr_trace_stats_get(t.trace, &st), 0);
  tu_close_ok(&t); /* tu_load: jansson rejects invalid UTF-8, so parsing proves repair */

  json_t *n = tu_find(&t, "bad\xEF\xBF\xBDname");
  if (n == NULL) fail_msg("op named bad<FFFD>name not found");
  assert_true(tu_replaced_as(tu_attr_str(n, "op_schema"), strlen(tu_attr_str(n, "op_schema")),
                             "sch", "", 1, 2));
  size_t bad_bytes = 0;
  for (size_t i = 0; i < nc; i++) {
    json_t *v = string_value(n, i);
    const char *s = json_string_value(v);
    if (!tu_replaced_as(s, json_string_length(v), cases[i].prefix, cases[i].suffix, cases[i].kmin,
                        cases[i].kmax))
      fail_msg("case %zu: got \"%s\"", i, s);
    bad_bytes += strlen(cases[i].bytes) - strlen(cases[i].prefix) - strlen(cases[i].suffix);
  }
  json_t *m = tu_node(&t, "bad_more");
  const char *dv = json_string_value(tu_in(m, "inputs", "values", 0));
  assert_non_null(dv);
  assert_true(tu_replaced_as(dv, strlen(dv), "cu", "", 1, 1));
  const char *ov = json_string_value(tu_in(m, "inputs", "values", 1));
  assert_non_null(ov);
  assert_true(tu_replaced_as(ov, strlen(ov), "<K", ">", 1, 1));
  /* At least one replacement per case, name, schema, device and object kind. */
  json_int_t rep = tu_stat(&t, "utf8_replaced");
  size_t min = nc + 4, max = bad_bytes + 1 + 2 + 1 + 1 + 4; /* object kind may be seen twice */
  if ((size_t)rep < min || (size_t)rep > max)
    fail_msg("utf8_replaced = %lld, expected in [%zu, %zu]", (long long)rep, min, max);
  assert_true(st.utf8_replaced >= nc + 2);
  tu_free(&t);
}

/* ---- limits ---- */

static void test_long_strings(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  char *a10k = malloc(10001);
  memset(a10k, 'a', 10000);
  a10k[10000] = '\0';
  char *exact = malloc(8193);
  memset(exact, 'b', 8192);
  exact[8192] = '\0';
  /* 8191 'c' then a 3-byte character across the 8192 boundary. */
  char *span = malloc(8191 + 3 + 100 + 1);
  memset(span, 'c', 8191);
  memcpy(span + 8191, "\xE2\x82\xAC", 3);
  memset(span + 8194, 'd', 100);
  span[8294] = '\0';
  /* 4-byte character ending exactly at 8192: kept. */
  char *fits = malloc(8192 + 10 + 1);
  memset(fits, 'e', 8188);
  memcpy(fits + 8188, "\xF0\x9D\x84\x9E", 4);
  memset(fits + 8192, 'f', 10);
  fits[8202] = '\0';
  etr_value in[] = {etr_value_string(a10k), etr_value_string(exact), etr_value_string(span),
                    etr_value_string(fits)};
  tu_op("long", in, 4, NULL, 0);
  tu_close_ok(&t);
  json_t *n = tu_node(&t, "long");
  json_t *v = string_value(n, 0);
  assert_int_equal(json_string_length(v), 8192);
  assert_memory_equal(json_string_value(v), a10k, 8192);
  v = string_value(n, 1);
  assert_int_equal(json_string_length(v), 8192);
  assert_string_equal(json_string_value(v), exact);
  v = string_value(n, 2);
  assert_int_equal(json_string_length(v), 8191);
  assert_memory_equal(json_string_value(v), span, 8191);
  v = string_value(n, 3);
  assert_int_equal(json_string_length(v), 8192);
  assert_memory_equal(json_string_value(v), fits, 8192);
  assert_int_equal(tu_stat(&t, "strings_cut"), 3);
  assert_int_equal(tu_stat(&t, "utf8_replaced"), 0);
  free(a10k);
  free(exact);
  free(span);
  free(fits);
  tu_free(&t);
}

static size_t count_type_items(const char *type, const char *item) {
  size_t n = 0;
  for (const char *p = type; (p = strstr(p, item)) != NULL; p += strlen(item)) n++;
  return n;
}

static void test_long_lists(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_value *items = malloc(sizeof(etr_value) * 5000);
  for (size_t i = 0; i < 5000; i++) items[i] = etr_value_int((int64_t)i);
  etr_value in[1] = {etr_value_list(items, 5000)};
  tu_op("list5000", in, 1, NULL, 0);
  etr_value in2[1] = {etr_value_list(items, 4096)};
  tu_op("list4096", in2, 1, NULL, 0);
  tu_close_ok(&t);
  for (int k = 0; k < 2; k++) {
    json_t *n = tu_node(&t, k ? "list4096" : "list5000");
    json_t *v = tu_in(n, "inputs", "values", 0);
    assert_true(json_is_array(v));
    assert_int_equal(json_array_size(v), 4096);
    for (size_t i = 0; i < 4096; i += 511)
      assert_int_equal(json_integer_value(json_array_get(v, i)), i);
    assert_int_equal(json_integer_value(json_array_get(v, 4095)), 4095);
    assert_int_equal(json_array_size(tu_in(n, "inputs", "shapes", 0)), 4096);
    assert_int_equal(json_array_size(tu_in(n, "inputs", "strides", 0)), 4096);
    const char *ty = json_string_value(tu_in(n, "inputs", "types", 0));
    assert_non_null(ty);
    assert_true(strncmp(ty, "GenericList[Int,", 16) == 0);
    assert_true(ty[strlen(ty) - 1] == ']');
    assert_int_equal(count_type_items(ty, "Int"), 4096);
  }
  assert_int_equal(tu_stat(&t, "lists_cut"), 1);
  free(items);
  tu_free(&t);
}

static void test_deep_nesting(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  enum { DEPTH = 100 };
  etr_value chain[DEPTH + 1];
  chain[DEPTH] = etr_value_int(42);
  for (int i = DEPTH - 1; i >= 0; i--) chain[i] = etr_value_list(&chain[i + 1], 1);
  etr_value tchain[DEPTH + 1];
  tchain[DEPTH] = etr_value_string("leaf");
  for (int i = DEPTH - 1; i >= 0; i--) tchain[i] = etr_value_tuple(&tchain[i + 1], 1);
  etr_value in[3] = {chain[0], tchain[0], etr_value_int(7)};
  tu_op("deep", in, 3, NULL, 0);
  /* 30 levels: under the limit, written in full. */
  tu_op("shallow", &chain[DEPTH - 30], 1, NULL, 0);
  tu_close_ok(&t);
  json_t *n = tu_node(&t, "deep");
  for (size_t k = 0; k < 2; k++) {
    json_t *v = tu_in(n, "inputs", "values", k), *s = tu_in(n, "inputs", "shapes", k),
           *st = tu_in(n, "inputs", "strides", k);
    int depth = 0;
    while (json_is_array(v)) {
      assert_int_equal(json_array_size(v), 1);
      assert_true(json_is_array(s) && json_array_size(s) == 1);
      assert_true(json_is_array(st) && json_array_size(st) == 1);
      v = json_array_get(v, 0);
      s = json_array_get(s, 0);
      st = json_array_get(st, 0);
      depth++;
    }
    if (depth > 33 || depth < 30)
      fail_msg("value %zu nested %d deep (cut at 32 expected)", k, depth);
    assert_true(json_is_string(v));
    assert_string_equal(json_string_value(v), "<...>");
    const char *ty = json_string_value(tu_in(n, "inputs", "types", k));
    assert_non_null(ty);
    assert_true(strlen(ty) < 2000);
  }
  assert_int_equal(json_integer_value(tu_in(n, "inputs", "values", 2)), 7);
  assert_int_equal(tu_stat(&t, "nesting_cut"), 2);
  json_t *sh = tu_node(&t, "shallow");
  json_t *v = tu_in(sh, "inputs", "values", 0);
  int depth = 0;
  while (json_is_array(v)) {
    v = json_array_get(v, 0);
    depth++;
  }
  assert_int_equal(depth, 30);
  assert_int_equal(json_integer_value(v), 42);
  tu_free(&t);
}

static void test_max_ndim(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  enum { ND = ETR_MAX_NDIM + 6 };
  int64_t sizes[ND], strides[ND];
  for (int i = 0; i < ND; i++) {
    sizes[i] = 1;
    strides[i] = i + 1;
  }
  static int impl, stor;
  etr_tensor a = {&impl, &stor, 0, 1, 4, "float", "cpu", ND, sizes, strides};
  etr_value in[2] = {etr_value_tensor(&a), etr_value_int(9)};
  tu_op("ndim", in, 2, NULL, 0);
  tu_close_ok(&t);
  json_t *n = tu_node(&t, "ndim");
  json_t *sh = tu_in(n, "inputs", "shapes", 0), *st = tu_in(n, "inputs", "strides", 0);
  assert_int_equal(json_array_size(sh), ETR_MAX_NDIM);
  assert_int_equal(json_array_size(st), ETR_MAX_NDIM);
  assert_int_equal(json_integer_value(json_array_get(st, 0)), 1);
  assert_int_equal(json_integer_value(json_array_get(st, ETR_MAX_NDIM - 1)), ETR_MAX_NDIM);
  assert_int_equal(json_array_size(tu_in(n, "inputs", "values", 0)), 6);
  assert_int_equal(json_integer_value(tu_in(n, "inputs", "values", 1)), 9);
  /* The cut is counted. */
  assert_true(tu_stat(&t, "lists_cut") + tu_stat(&t, "strings_cut") + tu_stat(&t, "nesting_cut") >=
              1);
  tu_free(&t);
}

/* dtype and device names are cut at 255 bytes (docs/FORMAT.md). */
static void test_long_names(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  char dtype[400], device[400];
  memset(dtype, 'd', 399);
  dtype[399] = '\0';
  memset(device, 'v', 399);
  device[399] = '\0';
  static int impl, stor;
  const int64_t sz[1] = {2};
  etr_tensor a = {&impl, &stor, 0, 2, 4, dtype, device, 1, sz, NULL};
  etr_value in[2] = {etr_value_tensor(&a), etr_value_tensor(&a)};
  tu_op("long_names", in, 2, NULL, 0);
  tu_close_ok(&t);
  json_t *n = tu_node(&t, "long_names");
  const char *ty = json_string_value(tu_in(n, "inputs", "types", 0));
  assert_non_null(ty);
  assert_int_equal(strlen(ty), strlen("Tensor()") + 255);
  assert_true(strncmp(ty, "Tensor(ddd", 10) == 0);
  json_t *v = tu_in(n, "inputs", "values", 0);
  const char *dev = json_string_value(json_array_get(v, 5));
  assert_non_null(dev);
  assert_int_equal(strlen(dev), 255);
  assert_memory_equal(dev, device, 255);
  char *x = json_dumps(v, JSON_COMPACT),
       *y = json_dumps(tu_in(n, "inputs", "values", 1), JSON_COMPACT);
  assert_string_equal(x, y);
  free(x);
  free(y);
  assert_true(tu_stat(&t, "strings_cut") >= 1);
  tu_free(&t);
}

/* The encoded values of one op are cut at 1 MiB: the node stays valid and the cut counted. */
static void test_node_budget(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  enum { N = 200 };
  char *big = malloc(8193);
  memset(big, 'x', 8192);
  big[8192] = '\0';
  etr_value *in = malloc(sizeof(etr_value) * N);
  for (size_t i = 0; i < N; i++) in[i] = etr_value_string(big);
  etr_value l[1] = {etr_value_list(in, N)};
  tu_op("budget_flat", in, N, NULL, 0);
  tu_op("budget_list", l, 1, l, 1);
  tu_op("after_budget", NULL, 0, NULL, 0);
  tu_close_ok(&t); /* parses; equal array lengths checked by tu_check_tree */
  json_t *n = tu_node(&t, "budget_flat");
  size_t nv = json_array_size(json_object_get(json_object_get(n, "inputs"), "values"));
  assert_true(nv < N);
  assert_true(nv >= 100); /* 1 MiB holds at least 100 strings of 8 KiB */
  json_t *m = tu_node(&t, "budget_list");
  json_t *lv = tu_in(m, "inputs", "values", 0);
  assert_true(json_is_array(lv));
  assert_true(json_array_size(lv) < N);
  assert_int_equal(json_array_size(lv), json_array_size(tu_in(m, "inputs", "shapes", 0)));
  const char *ty = json_string_value(tu_in(m, "inputs", "types", 0));
  assert_non_null(ty);
  size_t items = 0;
  for (const char *p = ty; (p = strstr(p, "String")) != NULL; p += 6) items++;
  assert_int_equal(items, json_array_size(lv));
  assert_true(tu_stat(&t, "lists_cut") >= 1);
  assert_int_equal(tu_count(&t, "after_budget"), 1);
  free(in);
  free(big);
  tu_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_scalars),    TU_TEST(test_tensors),      TU_TEST(test_lists_tuples),
      TU_TEST(test_escaping),   TU_TEST(test_invalid_utf8), TU_TEST(test_long_strings),
      TU_TEST(test_long_lists), TU_TEST(test_deep_nesting), TU_TEST(test_max_ndim),
      TU_TEST(test_long_names), TU_TEST(test_node_budget),
  };
  return cmocka_run_group_tests_name("trace_values", tests, NULL, NULL);
}
