/* Unit tests of the hand reader's shortcuts for nodes (src/json/reader_hand.c,
 * reader_hand_fast.c):
 *  - plain strings of a node are read in place, their closing quote turned into their NUL
 *    and given back when a step is undone (it ran off the end of the input window);
 *  - attr objects written as {"name": "N", "type": "T", "value": V} are read without the
 *    general object loop, and a node's attrs array of them too (h_attrs); any other shape
 *    falls back to it;
 *  - short arrays of numbers, literals and plain strings, and arrays of these two levels
 *    down (tensors, shapes, strides, types, values), are read without the general loop
 *    (h_flat), and any other shape falls back to it;
 *  - inputs/outputs objects of the usual shape, their four arrays in h_flat's shape, are
 *    read without the general object loop (h_io), and any other shape falls back to it;
 *  - what the node builder notes for commands to skip work (the node's keys present and in
 *    order, inputs/outputs with exactly their four keys) is the same through either parser.
 * Each test would fail if a shortcut broke: the nodes must equal what yajl (the other
 * backend, no shortcuts) gives, byte for byte, and malformed input inside a shortcut must be
 * reported with the error and byte offset the general path gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "etr/common.h"
#include "json/reader.h"

#include "cli_test_util.h"

static rd_reader *open_with(const char *path, const char *backend) {
  setenv("ETR_READER_BACKEND", backend, 1);
  rd_reader *r = NULL;
  int rc = rd_open(path, NULL, &r);
  unsetenv("ETR_READER_BACKEND");
  if (rc) fail_msg("%s: %s", backend, rd_error(r));
  return r;
}

/* Two values are the same, recursively: kinds, numbers, string bytes, keys in order. */
static void assert_same(const rd_jval *a, const rd_jval *b, const char *where) {
  if (a->kind != b->kind) fail_msg("%s: kind %d vs %d", where, a->kind, b->kind);
  switch (a->kind) {
    case ETR_J_STRING:
      if (a->v.str.len != b->v.str.len || memcmp(a->v.str.s, b->v.str.s, a->v.str.len) ||
          a->v.str.s[a->v.str.len] || b->v.str.s[b->v.str.len])
        fail_msg("%s: \"%s\" vs \"%s\"", where, a->v.str.s, b->v.str.s);
      break;
    case ETR_J_ARRAY:
      assert_int_equal(a->v.arr.n, b->v.arr.n);
      for (size_t i = 0; i < a->v.arr.n; i++)
        assert_same(&a->v.arr.items[i], &b->v.arr.items[i], where);
      break;
    case ETR_J_OBJECT:
      assert_int_equal(a->v.obj.n, b->v.obj.n);
      for (size_t i = 0; i < a->v.obj.n; i++) {
        const rd_jmember *x = &a->v.obj.items[i], *y = &b->v.obj.items[i];
        if (x->key_len != y->key_len || memcmp(x->key, y->key, x->key_len) || x->key[x->key_len])
          fail_msg("%s: key \"%s\" vs \"%s\"", where, x->key, y->key);
        assert_same(&x->val, &y->val, x->key);
      }
      break;
    case ETR_J_BOOL:
      assert_int_equal(a->v.b, b->v.b);
      break;
    case ETR_J_INT:
    case ETR_J_UINT:
      assert_true(a->v.u == b->v.u);
      break;
    case ETR_J_DOUBLE:
      assert_true(a->v.d == b->v.d);
      break;
    case ETR_J_NULL:
      break;
  }
}

/* Both backends over path: the same nodes (whole trees, names, attrs), the same count. */
static size_t assert_backends_same(const char *path) {
  rd_reader *h = open_with(path, "hand"), *y = open_with(path, "yajl");
  size_t nodes = 0;
  for (;;) {
    const rd_rnode *a, *b;
    int ra = rd_next(h, &a), rb = rd_next(y, &b);
    if (ra != rb)
      fail_msg("node %zu: hand %d (%s), yajl %d (%s)", nodes, ra, rd_error(h), rb, rd_error(y));
    if (ra != 1) {
      /* the same warnings: a value read twice (a shortcut, then the general path) would warn
       * twice */
      if (ra == 0) assert_int_equal(rd_warnings(h), rd_warnings(y));
      break;
    }
    assert_same(a->raw, b->raw, "node");
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->n_attrs, b->n_attrs);
    for (size_t i = 0; i < a->n_attrs; i++) {
      assert_string_equal(a->attrs[i].name, b->attrs[i].name);
      assert_string_equal(a->attrs[i].type, b->attrs[i].type);
      assert_same(&a->attrs[i].value, &b->attrs[i].value, a->attrs[i].name);
    }
    assert_true(a->tid == b->tid && a->rf_id == b->rf_id && a->seq_id == b->seq_id);
    assert_int_equal(a->key_bits, b->key_bits);
    assert_int_equal(a->keys_in_order, b->keys_in_order);
    assert_int_equal(a->inputs_exact_keys, b->inputs_exact_keys);
    assert_int_equal(a->outputs_exact_keys, b->outputs_exact_keys);
    assert_true(a->op_schema == NULL ? b->op_schema == NULL : !strcmp(a->op_schema, b->op_schema));
    nodes++;
  }
  rd_close(h);
  rd_close(y);
  return nodes;
}

/* A generated trace at p: its header written, the nodes next. */
static FILE *doc_begin(const char *p) {
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  fputs("{\"schema\": \"1.1.1\", \"pid\": 1, \"time\": \"t\", \"start_ts\": 0, \"nodes\": [\n", f);
  return f;
}

/* Its end written, then both backends read it alike: n nodes. */
static void doc_end_same(FILE *f, const char *p, size_t n) {
  fputs("], \"finish_ts\": 9}\n", f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(assert_backends_same(p), n);
}

/* Enough nodes (a few MB) that many steps run off the end of the window and are redone, at
 * every kind of place in a node: strings of every length, escaped ones, attr objects in the
 * shortcut's shape and in others, attr values of every kind. */
static void test_redone_steps_keep_their_strings(void **state) {
  (void)state;
  const char *p = ct_tmp_path("many.json");
  FILE *f = doc_begin(p);
  const size_t n = 12000;
  for (size_t i = 0; i < n; i++) {
    char name[80];
    size_t len = i % 61;
    for (size_t k = 0; k < len; k++) name[k] = (char)('a' + (i + k) % 26);
    name[len] = '\0';
    fprintf(f,
            "%s{\"id\": %zu, \"name\": \"%s\", \"ctrl_deps\": 1, \"inputs\": {\"values\": "
            "[\"%s\", 3, [1, \"x\"]], \"shapes\": [[], [], [[], []]], \"types\": [\"String\", "
            "\"Int\", \"GenericList[Int,String]\"]}, \"outputs\": {\"values\": [], \"shapes\": "
            "[], \"types\": []}, \"attrs\": [{\"name\": \"rf_id\", \"type\": \"uint64\", "
            "\"value\": %zu}, {\"name\": \"tid\", \"type\": \"uint64\", \"value\": 7}, "
            "{\"name\": \"op_schema\", \"type\": \"string\", \"value\": \"%s\\n\"}, "
            "{\"name\": \"l%zu\", \"type\": \"list\", \"value\": [\"%s\", {\"k\": \"%s\"}]}, "
            "{\"name\": \"e\\u00e9\", \"type\": \"string\", \"value\": \"\"}, "
            "{\"name\": \"four\", \"type\": \"string\", \"value\": \"v%s\", \"more\": \"m\"}, "
            "{\"type\": \"string\", \"name\": \"swapped\", \"value\": \"s\"}, "
            "{\"name\":\"tight\",\"type\":\"bool\",\"value\":true}]}",
            i ? ",\n" : "", i + 2, name, name, i, name, i, name, name, name);
  }
  doc_end_same(f, p, n);
}

/* The error the hand reader gives for doc, "FILE: byte N: reason" cut to "byte N: reason". */
static const char *hand_error(const char *doc) {
  static char buf[600];
  const char *p = ct_tmp_path("bad.json");
  ct_write_text(p, doc);
  setenv("ETR_READER_BACKEND", "hand", 1);
  rd_reader *r = NULL;
  int rc = rd_open(p, NULL, &r);
  const rd_rnode *n;
  while (rc == 0 && (rc = rd_next(r, &n)) == 1) {
  }
  if (rc == 0) rc = rd_finish(r);
  unsetenv("ETR_READER_BACKEND");
  assert_true(rc < 0);
  const char *e = strstr(rd_error(r), "byte ");
  assert_non_null(e);
  snprintf(buf, sizeof buf, "%s", e);
  rd_close(r);
  return buf;
}

/* Malformed values inside an attr object of the shortcut's shape are reported as the general
 * path reports them in an object of another shape (here: the keys in another order, so the
 * shortcut does not apply), at the same byte of the value. */
static void test_errors_inside_attr_shortcut(void **state) {
  (void)state;
  static const char *const bad_values[] = {
      "0x",          "tru",  "nul",        "\"a\x01\"", "\"\\q\"", "[1,]", "{\"k\" 1}",
      "-",           "1.e5", "[1 2]",      "\"abc",     "}",       "[[[[", "{\"k\": [1,}",
      "\"\\u12G4\"", "01",   "\"x\" \"y\""};
  for (size_t i = 0; i < sizeof bad_values / sizeof *bad_values; i++) {
    char fast[400], general[400];
    /* the value starts at the same byte in both documents */
    snprintf(fast, sizeof fast,
             "{\"nodes\": [{\"id\": 2, \"attrs\": [{\"name\": \"ab\", \"type\": \"int64\", "
             "\"value\": %s}]}]}",
             bad_values[i]);
    snprintf(general, sizeof general,
             "{\"nodes\": [{\"id\": 2, \"attrs\": [{\"type\": \"ab\", \"name\": \"int64\", "
             "\"value\": %s}]}]}",
             bad_values[i]);
    char want[600];
    snprintf(want, sizeof want, "%s", hand_error(general));
    const char *got = hand_error(fast);
    if (strcmp(got, want)) fail_msg("value %s: \"%s\", want \"%s\"", bad_values[i], got, want);
  }
  /* a cut inside the shortcut's value: the end of input, as anywhere else */
  assert_non_null(strstr(hand_error("{\"nodes\": [{\"attrs\": [{\"name\": \"a\", \"type\": "
                                    "\"s\", \"value\": \"abc"),
                         "end of input"));
}

/* An attr object that matches the shortcut up to its value and then goes on (a fourth key, a
 * missing '}') falls back to the general path with the value's strings intact. */
static void test_attr_shortcut_falls_back(void **state) {
  (void)state;
  const char *p = ct_tmp_path("fallback.json");
  ct_write_text(p,
                "{\"nodes\": [{\"id\": 2, \"name\": \"n\", \"attrs\": [{\"name\": \"a\", \"type\": "
                "\"string\", \"value\": \"vv\", \"x\": \"y\"}, {\"name\": \"b\", \"type\": "
                "\"list\", \"value\": [\"p\", \"q\"] , \"z\": 1}, {\"name\": \"c\", "
                "\"type\": \"string\", \"value\": \"bad \xff utf-8\", \"w\": 2}, {\"name\": "
                "\"d\", \"type\": \"string\", \"value\": \"esc\\n\"}, {\"name\": \"e\", "
                "\"type\": \"int64\", \"value\": -12 , \"v\": true}]}]}");
  assert_int_equal(assert_backends_same(p), 1);
  rd_reader *r = open_with(p, "hand");
  const rd_rnode *n;
  assert_int_equal(rd_next(r, &n), 1);
  assert_int_equal(n->n_attrs, 5);
  assert_string_equal(n->attrs[0].value.v.str.s, "vv");
  assert_string_equal(n->attrs[1].value.v.arr.items[1].v.str.s, "q");
  rd_close(r);
  /* the trailing garbage after the value is still an error */
  assert_non_null(strstr(hand_error("{\"nodes\": [{\"attrs\": [{\"name\": \"a\", \"type\": "
                                    "\"s\", \"value\": \"v\" x}]}]}"),
                         "expected ',' or '}'"));
}

/* Arrays in and out of h_flat's shape, many nodes (steps redone at the window's end inside
 * them): the same values as yajl's. */
static void test_flat_arrays_like_yajl(void **state) {
  (void)state;
  static const char *const arrays[] = {"[1, -2, 0, 123456789012345678]",
                                       "[1234567890123456789]",
                                       "[-9223372036854775808]",
                                       "[18446744073709551615]",
                                       "[1.5, 2]",
                                       "[1e3]",
                                       "[1E3, 1]",
                                       "[\"s\", \"\"]",
                                       "[\"esc\\n\"]",
                                       "[\"\\u00e9\", 1]",
                                       "[\"\xc3\xa9\"]",
                                       "[]",
                                       "[[]]",
                                       "[[], [1, 2]]",
                                       "[[[1]]]",
                                       "[ 1]",
                                       "[1 ]",
                                       "[1 ,2]",
                                       "[1,2]",
                                       "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]",
                                       "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]",
                                       "[true]",
                                       "[null, 1]",
                                       "[{\"k\": 1}]",
                                       "[[1386,1387,0,4,4,\"cpu\"],[2,2],\"<Object>\",-1]",
                                       "[[16, 8], [16], [], [4, 16]]",
                                       "[\"Tensor(float)\",\"GenericList[Int,Int]\"]",
                                       "[[1.5], [2]]",
                                       "[[1], {\"a\": [2]}]",
                                       "[-0, -01]",
                                       "[-0.35, 0.35, 1e-05, 2E+3, -0.0, 0e0]",
                                       "[1.00000000000000000000000000001, 12345678901234567890.5]",
                                       "[true, false, null]",
                                       "[[16,8],6,\"<None>\",\"cpu\",false,\"<None>\"]",
                                       "[[[]], [[1, 2], []], [[\"a\"], [true]]]",
                                       "[[[[1]]]]",
                                       "[[[1.5]], [[-2]]]",
                                       "[[[1], [2 ]]]",
                                       "[truex]"};
  const size_t n_arrays = sizeof arrays / sizeof *arrays;
  const char *p = ct_tmp_path("flat.json");
  FILE *f = doc_begin(p);
  const size_t n = 20000;
  size_t written = 0;
  for (size_t i = 0; i < n; i++) {
    const char *x = arrays[i % n_arrays], *y = arrays[(i * 7 + 3) % n_arrays];
    if (strstr(x, "-01") || strstr(y, "-01") || strstr(x, "truex") || strstr(y, "truex"))
      continue; /* invalid JSON: below */
    fprintf(f,
            "%s{\"id\": %zu, \"name\": \"n%zu\", \"ctrl_deps\": 1, \"inputs\": {\"values\": "
            "[%s, %s], \"shapes\": %s, \"types\": [\"a%zu\", \"b\"]}, \"outputs\": {\"values\": "
            "%s, \"shapes\": [], \"types\": []}, \"attrs\": [{\"name\": \"l\", \"type\": "
            "\"list\", \"value\": %s}]}",
            written ? ",\n" : "", i + 2, i, x, y, y, i, x, y);
    written++;
  }
  doc_end_same(f, p, written);
}

/* inputs/outputs objects in and out of h_io's shape (keys, spacing, arrays), many nodes: the
 * same values as yajl's. */
static void test_io_shortcut_like_yajl(void **state) {
  (void)state;
  static const char *const ios[] = {
      "{\"values\": [[1,2,0,4,4,\"cpu\"],\"s\"], \"shapes\": [[4],[]], \"types\": "
      "[\"Tensor(float)\",\"String\"], \"strides\": [[1],[]]}",
      "{\"values\": [], \"shapes\": [], \"types\": []}",
      "{\"values\": [], \"shapes\": [], \"types\": [], \"strides\": []}",
      "{\"values\": [1], \"shapes\": [[]], \"types\": [\"Int\"], \"strides\": [[]], "
      "\"extra\": 1}",
      "{\"values\":[1], \"shapes\": [[]], \"types\": [\"Int\"]}",
      "{\"values\": [1], \"shapes\": [[]], \"types\": [\"Int\"] }",
      "{\"values\": [1.5], \"shapes\": [[]], \"types\": [\"Double\"]}",
      "{\"values\": [\"\\u00e9\"], \"shapes\": [[]], \"types\": [\"String\"]}",
      "{\"values\": [1], \"types\": [\"Int\"], \"shapes\": [[]]}",
      "{\"values\": [1], \"shapes\": [[]], \"types\": [\"Int\"], \"strides\": [[]], "
      "\"strides\": [[]]}",
      "{\"values\": [[[1]]], \"shapes\": [[[]]], \"types\": [\"GenericList[GenericList[Int]]\"]}",
      "{\"values\": [true], \"shapes\": [[]], \"types\": [\"Bool\"]}",
      "{\"values\": [1], \"shapes\": 2, \"types\": [\"Int\"]}",
      "{\"vals\": [1]}",
      "{}"};
  const size_t n_ios = sizeof ios / sizeof *ios;
  const char *p = ct_tmp_path("io.json");
  FILE *f = doc_begin(p);
  const size_t n = 20000;
  for (size_t i = 0; i < n; i++)
    fprintf(f,
            "%s{\"id\": %zu, \"name\": \"n%zu\", \"ctrl_deps\": 1, \"inputs\": %s, "
            "\"outputs\": %s, \"attrs\": [{\"name\": \"l\", \"type\": \"x\", \"value\": %s}]}",
            i ? ",\n" : "", i + 2, i, ios[i % n_ios], ios[(i * 5 + 1) % n_ios],
            ios[(i + 3) % n_ios]);
  doc_end_same(f, p, n);
}

/* Malformed arrays that start as h_flat's shape are reported as the general path reports
 * them (here: the same text as a top-level value, outside a node, where h_flat does not
 * apply), at the same byte. */
static void test_errors_inside_flat(void **state) {
  (void)state;
  static const char *const bad[] = {
      "[1,]",      "[1 2]",   "[01]",       "[-]",      "[,1]",        "[1,,2]",   "[\"a\x01\"]",
      "[1.]",      "[[1,]]",  "[1, [2 3]]", "[1, -]",   "[[1], [2,]]", "[1]]",     "[1.5e]",
      "[-.5]",     "[1e+]",   "[tru]",      "[nul]",    "[falsey]",    "[[[1,]]]", "[[[]]]]",
      "[[[1 2]]]", "[0.5.5]", "[truex]",    "[[1.5e]]", "[[tru]]"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char fast[400], general[400];
    /* the inner array starts at byte 18 of both */
    snprintf(fast, sizeof fast, "{\"nodes\": [{\"a\": [%s]}]}", bad[i]);
    snprintf(general, sizeof general, "{\"abcdefghijkl\": [%s], \"nodes\": []}", bad[i]);
    char want[600];
    snprintf(want, sizeof want, "%s", hand_error(general));
    const char *got = hand_error(fast);
    if (strcmp(got, want)) fail_msg("array %s: \"%s\", want \"%s\"", bad[i], got, want);
  }
}

/* attrs arrays in and out of h_attrs' shape (separators, spacing, an attr of another shape
 * after some of the usual one, over 40 attrs, strings the general path must decode), many
 * nodes (steps redone at the window's end inside them): the same nodes and warnings as
 * yajl's. An attr that leaves the shortcut after others were read must find their strings
 * as they were (their NULs are written only when the whole array is read). */
static void test_attrs_array_like_yajl(void **state) {
  (void)state;
  static const char *const attrs[] = {
      "[{\"name\": \"rf_id\", \"type\": \"uint64\", \"value\": 7},{\"name\": \"tid\", \"type\": "
      "\"uint64\", \"value\": 1}]",
      "[{\"name\": \"a\", \"type\": \"string\", \"value\": \"x\"}, {\"name\": \"b\", \"type\": "
      "\"int64\", \"value\": -12345678901}]",
      "[{\"name\": \"a\", \"type\": \"string\", \"value\": \"x\"}, {\"name\": \"b\", \"type\": "
      "\"list\", \"value\": [1, \"y\"]}]",
      "[{\"name\": \"a\", \"type\": \"string\", \"value\": \"x\"}, {\"name\": \"b\", \"type\": "
      "\"string\", \"value\": \"esc\\n\"}]",
      "[{\"name\": \"a\", \"type\": \"string\", \"value\": \"x\"} ,{\"name\": \"b\", \"type\": "
      "\"bool\", \"value\": true}]",
      "[{\"name\": \"a\", \"type\": \"double\", \"value\": 1.5},  {\"name\": \"n\", \"type\": "
      "\"none\", \"value\": null}]",
      "[{\"name\": \"a\", \"type\": \"s\", \"value\": \"x\"}, {\"type\": \"s\", \"name\": \"b\", "
      "\"value\": \"y\"}, {\"name\": \"c\", \"type\": \"s\", \"value\": \"\\u00e9\"}]",
      "[{\"name\": \"a\", \"type\": \"s\", \"value\": \"x\"}, 5]",
      "[{\"name\": \"a\", \"type\": \"s\", \"value\": \"x\"} ]",
      "[ {\"name\": \"a\", \"type\": \"s\", \"value\": \"x\"}]",
      "[{\"name\": \"a\", \"type\": \"s\", \"value\": \"x\"}, {\"name\": \"a\", \"type\": \"s\", "
      "\"value\": \"\xc3\xa9\"}]",
      "[{\"name\": \"a\", \"type\": \"s\", \"value\": 0}, {\"name\": \"b\", \"type\": \"s\", "
      "\"value\": {\"k\": 1}}]",
      "[{}]",
      "[]",
      NULL /* 41 attrs: made below */};
  const size_t n_attrs = sizeof attrs / sizeof *attrs;
  char many[41 * 64 + 8];
  size_t m = 0;
  many[m++] = '[';
  for (int i = 0; i < 41; i++)
    m += (size_t)snprintf(many + m, sizeof many - m,
                          "%s{\"name\": \"k%d\", \"type\": \"s\", "
                          "\"value\": %d}",
                          i ? "," : "", i, i);
  snprintf(many + m, sizeof many - m, "]");
  const char *p = ct_tmp_path("attrs.json");
  FILE *f = doc_begin(p);
  const size_t n = 20000;
  for (size_t i = 0; i < n; i++) {
    const char *a = attrs[i % n_attrs] ? attrs[i % n_attrs] : many;
    fprintf(f,
            "%s{\"id\": %zu, \"name\": \"n%zu\", \"ctrl_deps\": 1, \"inputs\": {\"values\": [], "
            "\"shapes\": [], \"types\": []}, \"outputs\": {\"values\": [], \"shapes\": [], "
            "\"types\": []}, \"attrs\": %s}",
            i ? ",\n" : "", i + 2, i, a);
  }
  doc_end_same(f, p, n);
}

/* Malformed values in the second attr of an attrs array in h_attrs' shape are reported as
 * the general path reports them in an array of another shape (the keys of both attrs in
 * another order), at the same byte. */
static void test_errors_inside_attrs_array(void **state) {
  (void)state;
  static const char *const bad_values[] = {"0x",   "tru",  "nul",       "-",
                                           "1.e5", "01",   "\"a\x01\"", "\"abc",
                                           "}",    "[1,]", "1 2",       "\"x\" \"y\""};
  for (size_t i = 0; i < sizeof bad_values / sizeof *bad_values; i++) {
    char fast[400], general[400];
    snprintf(fast, sizeof fast,
             "{\"nodes\": [{\"id\": 2, \"attrs\": [{\"name\": \"ab\", \"type\": \"int64\", "
             "\"value\": 1},{\"name\": \"cd\", \"type\": \"int64\", \"value\": %s}]}]}",
             bad_values[i]);
    snprintf(general, sizeof general,
             "{\"nodes\": [{\"id\": 2, \"attrs\": [{\"type\": \"ab\", \"name\": \"int64\", "
             "\"value\": 1},{\"type\": \"cd\", \"name\": \"int64\", \"value\": %s}]}]}",
             bad_values[i]);
    char want[600];
    snprintf(want, sizeof want, "%s", hand_error(general));
    const char *got = hand_error(fast);
    if (strcmp(got, want)) fail_msg("value %s: \"%s\", want \"%s\"", bad_values[i], got, want);
  }
}

/* The node builder's notes that let validate skip work: the node's keys (present, all known
 * and in order) and inputs/outputs with exactly values, shapes, types[, strides]. */
static void test_key_notes(void **state) {
  (void)state;
  static const struct {
    const char *node;
    uint32_t bits;
    bool in_order, in_exact, out_exact;
  } cases[] = {
      {"{\"id\": 2, \"name\": \"n\", \"ctrl_deps\": 1, \"inputs\": {\"values\": [], \"shapes\": "
       "[], \"types\": []}, \"outputs\": {\"values\": [], \"shapes\": [], \"types\": [], "
       "\"strides\": []}, \"ts\": 1, \"inclusive_dur\": 2, \"exclusive_dur\": 1, \"attrs\": []}",
       0x1ff, true, true, true},
      {"{\"name\": \"n\", \"id\": 2, \"inputs\": {\"shapes\": [], \"values\": [], \"types\": []}, "
       "\"outputs\": {\"values\":[], \"shapes\":[], \"types\":[]}, \"attrs\": []}",
       0x11b, false, false, true},
      {"{\"id\": 2, \"id\": 3, \"outputs\": {\"values\": [], \"shapes\": [], \"types\": [], "
       "\"x\": 1}}",
       0x11, false, false, false},
      {"{\"id\": 2, \"nam\\u0065\": \"n\", \"extra\": 1, \"attrs\": []}", 0x103, false, false,
       false},
      {"{\"id\": 2, \"inputs\": {\"values\": [], \"shapes\": [], \"types\": [], \"strides\": [], "
       "\"strides\": []}, \"attrs\": []}",
       0x109, true, false, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char doc[600];
    snprintf(doc, sizeof doc, "{\"nodes\": [%s]}", cases[i].node);
    const char *p = ct_tmp_path("notes.json");
    ct_write_text(p, doc);
    assert_int_equal(assert_backends_same(p), 1);
    rd_reader *r = open_with(p, "hand");
    const rd_rnode *n;
    assert_int_equal(rd_next(r, &n), 1);
    if (n->key_bits != cases[i].bits || n->keys_in_order != cases[i].in_order ||
        n->inputs_exact_keys != cases[i].in_exact || n->outputs_exact_keys != cases[i].out_exact)
      fail_msg("case %zu: bits %#x in order %d, inputs %d, outputs %d", i, n->key_bits,
               n->keys_in_order, n->inputs_exact_keys, n->outputs_exact_keys);
    rd_close(r);
  }
}

/* Numbers of every form as a node's own values and as attr values (integers read inline by
 * h_int18 up to 18 digits, the others by the general parser), many nodes: the same values as
 * yajl's. */
static void test_numbers_like_yajl(void **state) {
  (void)state;
  static const char *const nums[] = {"0",
                                     "-0",
                                     "7",
                                     "-12",
                                     "10",
                                     "123456789012345678",
                                     "-123456789012345678",
                                     "1234567890123456789",
                                     "9223372036854775807",
                                     "-9223372036854775808",
                                     "9223372036854775808",
                                     "18446744073709551615",
                                     "18446744073709551616",
                                     "1.5",
                                     "-0.0",
                                     "1e3",
                                     "12E-2",
                                     "100000000000000000000000000000.5"};
  const size_t n_nums = sizeof nums / sizeof *nums;
  const char *p = ct_tmp_path("nums.json");
  FILE *f = doc_begin(p);
  const size_t n = 20000;
  for (size_t i = 0; i < n; i++)
    fprintf(f,
            "%s{\"id\": %zu, \"name\": \"n\", \"ctrl_deps\": %s, \"ts\": %s , \"x\": %s,"
            "\"attrs\": [{\"name\": \"a\", \"type\": \"int64\", \"value\": %s}, {\"name\": \"b\", "
            "\"type\": \"int64\", \"value\": %s }]}",
            i ? ",\n" : "", i + 2, nums[i % n_nums], nums[(i + 1) % n_nums],
            nums[(i * 7 + 2) % n_nums], nums[(i * 5 + 3) % n_nums], nums[(i + 4) % n_nums]);
  doc_end_same(f, p, n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_redone_steps_keep_their_strings),
      cmocka_unit_test(test_errors_inside_attr_shortcut),
      cmocka_unit_test(test_attr_shortcut_falls_back),
      cmocka_unit_test(test_flat_arrays_like_yajl),
      cmocka_unit_test(test_errors_inside_flat),
      cmocka_unit_test(test_io_shortcut_like_yajl),
      cmocka_unit_test(test_attrs_array_like_yajl),
      cmocka_unit_test(test_errors_inside_attrs_array),
      cmocka_unit_test(test_key_notes),
      cmocka_unit_test(test_numbers_like_yajl),
  };
  return cmocka_run_group_tests(tests, ct_tmpdir_setup, ct_tmpdir_teardown);
}
