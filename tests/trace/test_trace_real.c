/* tests/trace/test_trace_real.c — our trace against real PyTorch execution traces (the
 * format references in ETR_REAL_TRACES_DIR, see its README.md): the same top-level key order,
 * node key order, inputs/outputs key order, base attr names/types/order, process and thread
 * node attrs, collective attr names/types, and the same value encodings for tensors, lists,
 * tuples and scalars. The encoding rules live in check_value() below; they are first run over
 * every value of the real trace (so they describe what PyTorch writes) and then, strictly,
 * over ours. Skips cleanly when the folder (or a file, or zlib for the .gz) is absent.
 *
 * ETR_REAL_TRACES_DIR is passed by CMake. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trace_util.h"

#ifndef ETR_REAL_TRACES_DIR
#define ETR_REAL_TRACES_DIR ""
#endif

#define REAL_111 "param_pt2_et_1.1.1-chakra.0.0.4.json"
#define REAL_110 "param_resnet_et_1.1.0-chakra.0.0.4.json.gz"

typedef struct real_trace {
  char *text;
  size_t len;
  json_t *root;
  json_t *nodes;
} real_trace;

/* Load a real trace; skip the test when it is not there. */
static void load_real(real_trace *r, const char *file) {
  char path[1024];
  struct stat sb;
  if (ETR_REAL_TRACES_DIR[0] == '\0' || stat(ETR_REAL_TRACES_DIR, &sb) != 0) {
    fprintf(stderr, "real traces folder \"%s\" absent: skipped\n", ETR_REAL_TRACES_DIR);
    skip();
  }
  snprintf(path, sizeof path, "%s/%s", ETR_REAL_TRACES_DIR, file);
  if (stat(path, &sb) != 0) {
    fprintf(stderr, "%s absent: skipped\n", path);
    skip();
  }
  size_t n = strlen(file);
  if (n > 3 && strcmp(file + n - 3, ".gz") == 0) {
    r->text = tu_read_gz(path, &r->len);
    if (r->text == NULL) {
      fprintf(stderr, "%s: cannot read (built without zlib?): skipped\n", path);
      skip();
    }
  } else {
    r->text = tu_read_file(path, &r->len);
  }
  assert_non_null(r->text);
  json_error_t err;
  r->root = json_loadb(r->text, r->len, 0, &err);
  if (r->root == NULL) fail_msg("%s does not parse: %s", path, err.text);
  r->nodes = json_object_get(r->root, "nodes");
  assert_true(json_is_array(r->nodes));
  assert_true(json_array_size(r->nodes) > 2);
}

static void free_real(real_trace *r) {
  json_decref(r->root);
  free(r->text);
}

/* ---- value encoding rules ---- */

#define MAX_LEVEL 8
#define MAX_ELEMS 512

/* Split "GenericList[A,B(x,y),C[D,E]]" into its top-level element types. */
static size_t split_elems(const char *type, size_t prefix, char out[][256], size_t max) {
  const char *p = type + prefix;
  size_t len = strlen(p);
  if (len == 0 || p[len - 1] != ']') return (size_t)-1;
  len--; /* drop ']' */
  if (len == 0) return 0;
  size_t n = 0, start = 0;
  int depth = 0;
  for (size_t i = 0; i <= len; i++) {
    char c = i < len ? p[i] : ',';
    if (c == '[' || c == '(') depth++;
    if (c == ']' || c == ')') depth--;
    if (c == ',' && depth == 0) {
      if (n < max) {
        size_t l = i - start;
        if (l > 255) l = 255;
        memcpy(out[n], p + start, l);
        out[n][l] = '\0';
      }
      n++;
      start = i + 1;
    }
  }
  return n;
}

static int is_int_array(const json_t *a) {
  if (!json_is_array(a)) return 0;
  size_t i;
  json_t *x;
  json_array_foreach(a, i, x) {
    if (!json_is_integer(x)) return 0;
  }
  return 1;
}

static int is_empty_array(const json_t *a) { return json_is_array(a) && json_array_size(a) == 0; }

/* 0 when (value, shape, strides, type) follow the encoding; else writes why into err.
 * strides is NULL when the schema has none (or, in lenient mode, when PyTorch left it out). */
static int check_value(const json_t *v, const json_t *shape, const json_t *strides,
                       const char *type, int strict, char *err, size_t errn) {
#define BAD(...)                      \
  do {                                \
    snprintf(err, errn, __VA_ARGS__); \
    return -1;                        \
  } while (0)
  if (type == NULL) BAD("type not a string");
  if (strcmp(type, "Tensor(nullptr (uninitialized))") == 0) {
    if (!json_is_array(v) || json_array_size(v) != 6) BAD("undefined tensor not a 6-list");
    if (!json_is_integer(json_array_get(v, 0))) BAD("undefined tensor id not an int");
    for (size_t i = 1; i < 5; i++)
      if (!json_is_integer(json_array_get(v, i)) || json_integer_value(json_array_get(v, i)) != 0)
        BAD("undefined tensor field %zu not 0", i);
    if (!json_is_string(json_array_get(v, 5)) || json_string_value(json_array_get(v, 5))[0])
      BAD("undefined tensor device not \"\"");
    if (!is_empty_array(shape)) BAD("undefined tensor shape not []");
    if (strides != NULL && !is_empty_array(strides)) BAD("undefined tensor strides not []");
    return 0;
  }
  if (strncmp(type, "Tensor(", 7) == 0) {
    if (type[strlen(type) - 1] != ')') BAD("bad tensor type %s", type);
    if (!json_is_array(v) || json_array_size(v) != 6) BAD("tensor value not a 6-list");
    for (size_t i = 0; i < 5; i++) {
      json_t *x = json_array_get(v, i);
      if (!json_is_integer(x) || json_integer_value(x) < 0)
        BAD("tensor field %zu not an int >= 0", i);
    }
    if (json_integer_value(json_array_get(v, 0)) == 0) BAD("tensor id 0");
    if (!json_is_string(json_array_get(v, 5))) BAD("tensor device not a string");
    if (!is_int_array(shape)) BAD("tensor shape not a list of ints");
    if (strides != NULL) {
      if (!is_int_array(strides)) BAD("tensor strides not a list of ints");
      if (json_array_size(strides) != json_array_size(shape)) BAD("tensor strides/shape lengths");
    }
    return 0;
  }
  int is_list = strncmp(type, "GenericList[", 12) == 0, is_tuple = strncmp(type, "Tuple[", 6) == 0;
  if (is_list || is_tuple) {
    static char elems[MAX_LEVEL][MAX_ELEMS][256];
    static int level = -1;
    if (level >= MAX_LEVEL - 1) return 0; /* deep enough */
    level++;
    size_t n = split_elems(type, is_list ? 12 : 6, elems[level], MAX_ELEMS);
    int rc = 0;
    if (n == (size_t)-1) {
      snprintf(err, errn, "bad list type %s", type);
      rc = -1;
    } else if (!json_is_array(v) || json_array_size(v) != n) {
      snprintf(err, errn, "%s: value not a list of %zu", type, n);
      rc = -1;
    } else if (!json_is_array(shape) || json_array_size(shape) != n) {
      snprintf(err, errn, "%s: shape not a list of %zu", type, n);
      rc = -1;
    } else if (strides != NULL && (!json_is_array(strides) || json_array_size(strides) != n)) {
      snprintf(err, errn, "%s: strides not a list of %zu", type, n);
      rc = -1;
    } else {
      for (size_t i = 0; i < n && i < MAX_ELEMS && rc == 0; i++)
        rc = check_value(json_array_get(v, i), json_array_get(shape, i),
                         strides ? json_array_get(strides, i) : NULL, elems[level][i], strict, err,
                         errn);
    }
    level--;
    return rc;
  }
  /* Scalars: shape [] and strides []. */
  if (!is_empty_array(shape)) BAD("%s: shape not []", type);
  if (strides != NULL && !is_empty_array(strides)) BAD("%s: strides not []", type);
  if (strcmp(type, "Int") == 0) {
    if (!json_is_integer(v)) BAD("Int not an integer");
  } else if (strcmp(type, "Double") == 0) {
    if (!json_is_number(v) && !(json_is_string(v) && (strcmp(json_string_value(v), "nan") == 0 ||
                                                      strcmp(json_string_value(v), "inf") == 0 ||
                                                      strcmp(json_string_value(v), "-inf") == 0)))
      BAD("Double not a number or nan/inf/-inf");
  } else if (strcmp(type, "Bool") == 0) {
    if (!json_is_boolean(v)) BAD("Bool not true/false");
  } else if (strcmp(type, "String") == 0 || strcmp(type, "Device") == 0) {
    if (!json_is_string(v)) BAD("%s not a string", type);
  } else if (strcmp(type, "None") == 0) {
    if (!json_is_string(v) || strcmp(json_string_value(v), "<None>") != 0)
      BAD("None not \"<None>\"");
  } else {
    /* Opaque object: "<Kind>". */
    if (!json_is_string(v)) BAD("%s: object value not a string", type);
    const char *s = json_string_value(v);
    size_t l = strlen(s);
    if (l < 2 || s[0] != '<' || s[l - 1] != '>') BAD("%s: object value %s not \"<Kind>\"", type, s);
  }
  (void)strict;
  return 0;
#undef BAD
}

/* Check every value of every node; returns the number of values checked. In lenient mode a
 * strides list shorter than values is tolerated (PyTorch omits strides of trailing scalars). */
static size_t check_all_values(json_t *nodes, int strict, const char *what) {
  size_t count = 0, i;
  json_t *node;
  json_array_foreach(nodes, i, node) {
    static const char *const io[2] = {"inputs", "outputs"};
    for (size_t k = 0; k < 2; k++) {
      json_t *o = json_object_get(node, io[k]);
      json_t *vals = json_object_get(o, "values"), *shapes = json_object_get(o, "shapes"),
             *types = json_object_get(o, "types"), *strides = json_object_get(o, "strides");
      assert_true(json_is_array(vals));
      if (strict && strides != NULL)
        assert_int_equal(json_array_size(strides), json_array_size(vals));
      size_t j;
      json_t *v;
      json_array_foreach(vals, j, v) {
        char err[512];
        json_t *st = strides ? json_array_get(strides, j) : NULL;
        if (strict && strides != NULL && st == NULL) fail_msg("%s: missing strides", what);
        if (check_value(v, json_array_get(shapes, j), st,
                        json_string_value(json_array_get(types, j)), strict, err, sizeof err)) {
          char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
          fail_msg("%s: node %lld (%s) %s[%zu] = %.200s: %s", what,
                   (long long)json_integer_value(json_object_get(node, "id")),
                   json_string_value(json_object_get(node, "name")), io[k], j, d ? d : "?", err);
        }
        count++;
      }
    }
  }
  return count;
}

/* ---- structure comparisons ---- */

static const char *join_keys(const char *text, size_t len, size_t off, char *buf, size_t n,
                             int drop_timing) {
  tu_keys k, kept;
  tu_raw_keys(text, len, off, &k);
  memset(&kept, 0, sizeof kept);
  for (size_t i = 0; i < k.n && i < TU_MAX_KEYS; i++) {
    if (drop_timing && (strcmp(k.name[i], "ts") == 0 || strcmp(k.name[i], "inclusive_dur") == 0 ||
                        strcmp(k.name[i], "exclusive_dur") == 0))
      continue;
    memcpy(kept.name[kept.n], k.name[i], sizeof k.name[i]);
    kept.val_off[kept.n++] = k.val_off[i];
  }
  return tu_keys_join(&kept, buf, n);
}

/* Offsets of the nodes in the raw text. */
static size_t node_offsets(const char *text, size_t len, size_t *offs, size_t max) {
  tu_keys root;
  tu_raw_keys(text, len, 0, &root);
  for (size_t i = 0; i < root.n; i++)
    if (strcmp(root.name[i], "nodes") == 0)
      return tu_raw_elems(text, len, root.val_off[i], offs, max);
  fail_msg("no nodes key");
  return 0;
}

/* "name:type:jsontype;..." of the first n attrs (all when n == 0); with values when asked. */
static const char *attr_sig(const json_t *node, size_t n, int with_values, char *buf, size_t bn) {
  size_t w = 0, i;
  json_t *a;
  buf[0] = '\0';
  json_array_foreach(json_object_get(node, "attrs"), i, a) {
    if (n != 0 && i >= n) break;
    json_t *v = json_object_get(a, "value");
    char val[128] = "";
    if (with_values) {
      char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
      snprintf(val, sizeof val, "=%s", d ? d : "?");
      free(d);
    }
    int r = snprintf(buf + w, bn - w, "%s%s:%s:%s%s", i ? ";" : "",
                     json_string_value(json_object_get(a, "name")),
                     json_string_value(json_object_get(a, "type")),
                     json_is_integer(v)  ? "int"
                     : json_is_string(v) ? "str"
                                         : "other",
                     val);
    if (r < 0 || (size_t)r >= bn - w) break;
    w += (size_t)r;
  }
  return buf;
}

static json_t *find_named(json_t *nodes, const char *name) {
  size_t i;
  json_t *node;
  json_array_foreach(nodes, i, node) {
    if (strcmp(json_string_value(json_object_get(node, "name")), name) == 0) return node;
  }
  return NULL;
}

/* Record ops with the kinds of values the real traces hold. */
static void record_like_pytorch(void) {
  static int impl[6], stor[4];
  const int64_t sz[4] = {32, 64, 56, 56}, sz1[1] = {64};
  etr_tensor x = {&impl[0], &stor[0], 0, 32 * 64 * 56 * 56, 4, "float", "cuda:0", 4, sz, NULL};
  etr_tensor w = {&impl[1], &stor[1], 0, 64, 4, "float", "cuda:0", 1, sz1, NULL};
  etr_tensor v = {&impl[2], &stor[1], 0, 64, 4, "float", "cuda:0", 1, sz1, NULL};
  etr_tensor u = {&impl[3], NULL, 0, 0, 0, NULL, NULL, 0, NULL, NULL};
  etr_tensor l = {&impl[4], &stor[2], 0, 1, 8, "long", "cuda:0", 0, NULL, NULL};
  etr_value i2[2] = {etr_value_int(1), etr_value_int(1)};
  etr_value b3[3] = {etr_value_bool(true), etr_value_bool(true), etr_value_bool(false)};
  etr_value ts[2] = {etr_value_tensor(&w), etr_value_tensor(&v)};
  etr_value pg[2] = {etr_value_string("0"), etr_value_string("default_pg")};
  etr_value in[] = {
      etr_value_tensor(&x),       etr_value_tensor(&w),          etr_value_tensor(&u),
      etr_value_list(i2, 2),      etr_value_bool(false),         etr_value_int(1),
      etr_value_list(b3, 3),      etr_value_double(0.1),         etr_value_none(),
      etr_value_device("cuda:0"), etr_value_list(ts, 2),         etr_value_tuple(pg, 2),
      etr_value_list(NULL, 0),    etr_value_string("broadcast"), etr_value_tensor(&l),
      etr_value_object("Object")};
  etr_value out[1] = {etr_value_tensor(&v)};
  etr_record outer;
  etr_record_init(&outer, "## forward ##", ETR_SCOPE_USER_SCOPE);
  etr_record_begin(&outer);
  etr_record r;
  etr_record_init(&r, "aten::convolution", ETR_SCOPE_FUNCTION);
  r.schema = "aten::convolution(Tensor input, Tensor weight, Tensor? bias) -> Tensor";
  r.inputs = in;
  r.n_inputs = TU_ARRAY_LEN(in);
  etr_record_begin(&r);
  r.outputs = out;
  r.n_outputs = 1;
  etr_record_end(&r);
  etr_collective_info ci = ETR_COLLECTIVE_INFO_INIT;
  ci.name = "broadcast";
  ci.dtype = "Float";
  ci.in_msg_nelems = 53120;
  ci.out_msg_nelems = 53120;
  ci.global_rank_start = 0;
  ci.global_rank_stride = 1;
  ci.pg_name = "0";
  ci.pg_desc = "default_pg";
  ci.pg_size = 1;
  etr_record_init(&r, "record_param_comms", ETR_SCOPE_USER_SCOPE);
  r.inputs = in + 10;
  r.n_inputs = 4;
  r.collective = &ci;
  etr_record_begin(&r);
  etr_record_end(&r);
  etr_record_end(&outer);
}

static void compare_with(const char *file, etr_schema schema, size_t n_base_attrs) {
  real_trace real;
  memset(&real, 0, sizeof real);
  load_real(&real, file);
  /* The rules describe what PyTorch writes. */
  size_t nreal = check_all_values(real.nodes, 0, file);
  assert_true(nreal > 0);

  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.schema = schema;
  tu_open(&t, &opt);
  record_like_pytorch();
  tu_close_ok(&t);
  check_all_values(t.nodes, 1, "ours");

  char a[512], b[512];
  /* Top-level keys: ours starts with exactly the real ones. */
  tu_keys rk, ok;
  tu_raw_keys(real.text, real.len, 0, &rk);
  tu_raw_keys(t.text, t.len, 0, &ok);
  tu_keys_join(&rk, a, sizeof a);
  tu_keys_join(&ok, b, sizeof b);
  assert_string_equal(a, "schema,pid,time,start_ts,nodes,finish_ts");
  assert_true(strncmp(b, a, strlen(a)) == 0);
  assert_string_equal(json_string_value(json_object_get(real.root, "schema")),
                      json_string_value(json_object_get(t.root, "schema")));
  /* The JSON types of the header fields. */
  static const char *const hdr[] = {"pid", "start_ts", "finish_ts"};
  for (size_t i = 0; i < 3; i++) {
    assert_true(json_is_integer(json_object_get(real.root, hdr[i])));
    assert_true(json_is_integer(json_object_get(t.root, hdr[i])));
  }
  assert_int_equal(strlen(json_string_value(json_object_get(real.root, "time"))),
                   strlen(json_string_value(json_object_get(t.root, "time"))));

  /* Node keys and inputs/outputs keys: every node of both files. */
  size_t rn = json_array_size(real.nodes), on = json_array_size(t.nodes);
  size_t *roff = malloc(sizeof(size_t) * rn), *ooff = malloc(sizeof(size_t) * on);
  assert_int_equal(node_offsets(real.text, real.len, roff, rn), rn);
  assert_int_equal(node_offsets(t.text, t.len, ooff, on), on);
  char rnode[512], rio[256], oio[256];
  join_keys(real.text, real.len, roff[0], rnode, sizeof rnode, 0);
  tu_keys nk;
  tu_raw_keys(real.text, real.len, roff[0], &nk);
  join_keys(real.text, real.len, nk.val_off[3], rio, sizeof rio, 0);
  for (size_t i = 0; i < rn; i++) {
    join_keys(real.text, real.len, roff[i], a, sizeof a, 0);
    assert_string_equal(a, rnode);
  }
  for (size_t i = 0; i < on; i++) {
    join_keys(t.text, t.len, ooff[i], a, sizeof a, 1);
    assert_string_equal(a, rnode);
    tu_raw_keys(t.text, t.len, ooff[i], &nk);
    for (size_t k = 3; k <= 4; k++) {
      join_keys(t.text, t.len, nk.val_off[k], oio, sizeof oio, 0);
      assert_string_equal(oio, rio);
    }
  }
  free(roff);
  free(ooff);

  /* Base attrs: names, types, JSON types, order; every real node has them. */
  json_t *rop = NULL;
  size_t i;
  json_t *node;
  json_array_foreach(real.nodes, i, node) {
    if (json_string_value(json_object_get(node, "name"))[0] != '[') {
      rop = node;
      break;
    }
  }
  assert_non_null(rop);
  char rs[4096], os[4096];
  attr_sig(rop, n_base_attrs, 0, rs, sizeof rs);
  json_array_foreach(t.nodes, i, node) {
    attr_sig(node, n_base_attrs, 0, os, sizeof os);
    assert_string_equal(os, rs);
  }
  /* Process node: same attrs and values; thread node: same names/types and fixed values. */
  json_t *rp = find_named(real.nodes, TU_PROCESS_NAME), *op = tu_find(&t, TU_PROCESS_NAME);
  assert_non_null(rp);
  assert_int_equal(json_integer_value(json_object_get(rp, "id")), 1);
  assert_string_equal(attr_sig(op, n_base_attrs, 1, os, sizeof os),
                      attr_sig(rp, n_base_attrs, 1, rs, sizeof rs));
  json_t *rt = find_named(real.nodes, TU_THREAD_NAME), *ot = tu_find(&t, TU_THREAD_NAME);
  assert_non_null(rt);
  assert_non_null(ot);
  assert_int_equal(json_integer_value(json_object_get(rt, "ctrl_deps")), tu_ctrl_deps(ot));
  static const char *const fixed[] = {"rf_id", "fw_parent", "seq_id", "scope", "fw_tid"};
  for (size_t k = 0; k < TU_ARRAY_LEN(fixed); k++)
    assert_int_equal(tu_attr_int(rt, fixed[k]), tu_attr_int(ot, fixed[k]));

  /* Collective attrs (only the 1.1.0 reference has them). */
  json_t *rc = find_named(real.nodes, "record_param_comms");
  if (rc != NULL) {
    json_t *oc = tu_node(&t, "record_param_comms");
    char *rtail, *otail;
    attr_sig(rc, 0, 0, rs, sizeof rs);
    attr_sig(oc, 0, 0, os, sizeof os);
    rtail = strstr(rs, "collective_name");
    otail = strstr(os, "collective_name");
    assert_non_null(rtail);
    assert_non_null(otail);
    /* Ours adds is_asynchronized_op at the end. */
    assert_true(strncmp(otail, rtail, strlen(rtail)) == 0);
    assert_string_equal(otail + strlen(rtail), ";is_asynchronized_op:uint64:int");
  }
  tu_free(&t);
  free_real(&real);
}

static void test_real_1_1_1(void **state) {
  (void)state;
  compare_with(REAL_111, ETR_SCHEMA_1_1_1, 9);
}

static void test_real_1_1_0(void **state) {
  (void)state;
  compare_with(REAL_110, ETR_SCHEMA_1_1_0, 9);
}

/* The encoding rules reject what they should (so the comparisons above can fail). */
static void test_rules_reject(void **state) {
  (void)state;
  char err[256];
  json_t *v = json_loads("[1,2,0,4,4,\"cpu\"]", 0, NULL), *sh = json_loads("[2,2]", 0, NULL);
  json_t *st = json_loads("[2,1]", 0, NULL), *st1 = json_loads("[1]", 0, NULL);
  json_t *e = json_array();
  assert_int_equal(check_value(v, sh, st, "Tensor(float)", 1, err, sizeof err), 0);
  assert_int_equal(check_value(v, sh, st1, "Tensor(float)", 1, err, sizeof err), -1);
  assert_int_equal(check_value(v, e, NULL, "Int", 1, err, sizeof err), -1);
  json_t *l = json_loads("[1,2]", 0, NULL), *ls = json_loads("[[],[]]", 0, NULL);
  assert_int_equal(check_value(l, ls, NULL, "GenericList[Int,Int]", 1, err, sizeof err), 0);
  assert_int_equal(check_value(l, ls, NULL, "GenericList[Int]", 1, err, sizeof err), -1);
  assert_int_equal(check_value(l, e, NULL, "GenericList[Int,Int]", 1, err, sizeof err), -1);
  json_t *s = json_string("x");
  assert_int_equal(check_value(s, e, NULL, "None", 1, err, sizeof err), -1);
  json_decref(v);
  json_decref(sh);
  json_decref(st);
  json_decref(st1);
  json_decref(e);
  json_decref(l);
  json_decref(ls);
  json_decref(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_rules_reject),
      TU_TEST(test_real_1_1_1),
      TU_TEST(test_real_1_1_0),
  };
  return cmocka_run_group_tests_name("trace_real", tests, NULL, NULL);
}
