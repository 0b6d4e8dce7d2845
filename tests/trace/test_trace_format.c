/* tests/trace/test_trace_format.c — file and node structure of the execution trace
 * (docs/FORMAT.md): top-level keys and their order, header fields, the process and
 * thread nodes, node key order, the nine base attrs, schema 1.1.0 vs 1.1.1, timing keys,
 * collective and kernel attrs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trace_util.h"

static const char *const base_attr_names[9] = {
    "rf_id",  "fw_parent", "seq_id",         "scope",      "tid",
    "fw_tid", "op_schema", "kernel_backend", "kernel_file"};
static const char *const base_attr_types[9] = {"uint64", "uint64", "int64",  "uint64", "uint64",
                                               "uint64", "string", "string", "string"};

/* The attrs of node as "name:type:value" joined with ';' (values: integers and strings). */
static const char *attrs_str(const json_t *node, char *buf, size_t n) {
  size_t w = 0, i;
  json_t *a;
  buf[0] = '\0';
  json_array_foreach(json_object_get(node, "attrs"), i, a) {
    json_t *v = json_object_get(a, "value");
    char val[256];
    if (json_is_integer(v))
      snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
    else if (json_is_string(v))
      snprintf(val, sizeof val, "\"%s\"", json_string_value(v));
    else
      snprintf(val, sizeof val, "?");
    int r = snprintf(buf + w, n - w, "%s%s:%s:%s", i ? ";" : "",
                     json_string_value(json_object_get(a, "name")),
                     json_string_value(json_object_get(a, "type")), val);
    if (r < 0 || (size_t)r >= n - w) break;
    w += (size_t)r;
  }
  return buf;
}

/* The attrs of node that follow the attr `after` (as attrs_str writes it, "name:type:value;")
 * read exactly expect. */
static void assert_attrs_after(const json_t *node, const char *after, const char *expect) {
  char buf[4096];
  const char *s = attrs_str(node, buf, sizeof buf);
  const char *tail = strstr(s, after);
  if (tail == NULL) fail_msg("%s: no %s in %s", tu_name(node), after, s);
  assert_string_equal(tail + strlen(after), expect);
}

/* Every attr object has keys name,type,value in that order (raw text of node i), the first
 * nine are the base attrs with their types, integers where the type says so. */
static void check_attrs_shape(const tu_trace *t, size_t idx) {
  json_t *node = json_array_get(t->nodes, idx);
  json_t *attrs = json_object_get(node, "attrs");
  assert_true(json_array_size(attrs) >= 9);
  for (size_t i = 0; i < 9; i++) {
    json_t *a = json_array_get(attrs, i);
    const char *nm = json_string_value(json_object_get(a, "name"));
    const char *ty = json_string_value(json_object_get(a, "type"));
    if (nm == NULL || strcmp(nm, base_attr_names[i]) != 0)
      fail_msg("node %s: attr %zu is %s, expected %s", tu_name(node), i, nm ? nm : "(null)",
               base_attr_names[i]);
    assert_non_null(ty);
    assert_string_equal(ty, base_attr_types[i]);
  }
  size_t i;
  json_t *a;
  json_array_foreach(attrs, i, a) {
    const char *nm = json_string_value(json_object_get(a, "name"));
    const char *ty = json_string_value(json_object_get(a, "type"));
    json_t *v = json_object_get(a, "value");
    assert_non_null(nm);
    assert_non_null(ty);
    assert_int_equal(json_object_size(a), 3);
    static const char *const forbidden[] = {"cat",    "stream",  "name",  "id",
                                            "inputs", "outputs", "parent"};
    for (size_t k = 0; k < TU_ARRAY_LEN(forbidden); k++)
      if (strcmp(nm, forbidden[k]) == 0) fail_msg("attr named %s is forbidden", nm);
    if (strcmp(ty, "uint64") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < 0)
        fail_msg("node %s attr %s: uint64 value not a non-negative integer", tu_name(node), nm);
    } else if (strcmp(ty, "int64") == 0) {
      if (!json_is_integer(v)) fail_msg("attr %s: int64 value not an integer", nm);
    } else if (strcmp(ty, "string") == 0) {
      if (!json_is_string(v)) fail_msg("attr %s: string value not a string", nm);
    } else {
      fail_msg("attr %s has unexpected type %s", nm, ty);
    }
  }
  /* Raw key order of every attr object. */
  tu_keys nk;
  tu_node_keys(t, idx, &nk);
  size_t k;
  for (k = 0; k < nk.n; k++)
    if (strcmp(nk.name[k], "attrs") == 0) break;
  assert_true(k < nk.n);
  size_t offs[64];
  size_t na = tu_raw_elems(t->text, t->len, nk.val_off[k], offs, 64);
  assert_int_equal(na, json_array_size(attrs));
  for (size_t j = 0; j < na && j < 64; j++) {
    tu_keys ak;
    char buf[128];
    tu_raw_keys(t->text, t->len, offs[j], &ak);
    assert_string_equal(tu_keys_join(&ak, buf, sizeof buf), "name,type,value");
  }
}

/* One op with a few values, one nested op. */
static void record_small(void) {
  etr_tensor tt = {(void *)0x1000,          (void *)0x2000,         0, 6, 4, "float", "cpu", 2,
                   (const int64_t[]){2, 3}, (const int64_t[]){3, 1}};
  etr_value in[2] = {etr_value_tensor(&tt), etr_value_int(5)};
  etr_value out[1] = {etr_value_tensor(&tt)};
  etr_record outer;
  tu_begin(&outer, "outer", NULL, 0);
  tu_op("inner", in, 2, out, 1);
  tu_end(&outer, NULL, 0);
}

static void test_top_level(void **state) {
  (void)state;
  tu_trace t;
  int64_t before = tu_mono_ms();
  time_t wall_before = time(NULL);
  tu_open(&t, NULL);
  record_small();
  tu_close_ok(&t);
  int64_t after = tu_mono_ms();
  time_t wall_after = time(NULL);

  tu_keys k, jk;
  char buf[512], jbuf[512];
  tu_root_keys(&t, &k);
  assert_string_equal(tu_keys_join(&k, buf, sizeof buf),
                      "schema,pid,time,start_ts,nodes,finish_ts,etr");
  /* jansson keeps insertion order: the parsed object iterates in file order. */
  tu_json_keys(t.root, &jk);
  assert_string_equal(tu_keys_join(&jk, jbuf, sizeof jbuf), buf);

  assert_string_equal(json_string_value(json_object_get(t.root, "schema")), "1.1.1-chakra.0.0.4");
  json_t *pid = json_object_get(t.root, "pid");
  assert_true(json_is_integer(pid));
  assert_int_equal(json_integer_value(pid), getpid());

  const char *tm = json_string_value(json_object_get(t.root, "time"));
  assert_non_null(tm);
  assert_int_equal(strlen(tm), 19);
  for (size_t i = 0; i < 19; i++) {
    char c = tm[i];
    if (i == 4 || i == 7)
      assert_int_equal(c, '-');
    else if (i == 10)
      assert_int_equal(c, ' ');
    else if (i == 13 || i == 16)
      assert_int_equal(c, ':');
    else
      assert_true(c >= '0' && c <= '9');
  }
  /* Local wall clock of about now. */
  struct tm parsed;
  memset(&parsed, 0, sizeof parsed);
  assert_non_null(strptime(tm, "%Y-%m-%d %H:%M:%S", &parsed));
  parsed.tm_isdst = -1;
  time_t wall = mktime(&parsed);
  assert_true(wall >= wall_before - 2 && wall <= wall_after + 2);

  json_t *st = json_object_get(t.root, "start_ts"), *ft = json_object_get(t.root, "finish_ts");
  assert_true(json_is_integer(st));
  assert_true(json_is_integer(ft));
  assert_true(json_integer_value(st) <= json_integer_value(ft));
  /* Monotonic clock, milliseconds. */
  assert_true(json_integer_value(st) >= before - 1);
  assert_true(json_integer_value(ft) <= after + 1);

  json_t *etr = json_object_get(t.root, "etr");
  assert_true(json_is_object(etr));
  assert_string_equal(json_string_value(json_object_get(etr, "version")), ETR_VERSION_STRING);
  assert_string_equal(etr_version_string(), ETR_VERSION_STRING);
  json_t *stats = tu_stats(&t);
  static const char *const counters[] = {"nodes_written",
                                         "ops_recorded",
                                         "threads",
                                         "objects",
                                         "strings_cut",
                                         "lists_cut",
                                         "utf8_replaced",
                                         "nesting_cut",
                                         "ends_without_begin",
                                         "ops_open_at_disable",
                                         "ops_open_at_thread_exit",
                                         "ops_open_at_close",
                                         "nodes_dropped"};
  for (size_t i = 0; i < TU_ARRAY_LEN(counters); i++)
    if (!json_is_integer(json_object_get(stats, counters[i])))
      fail_msg("etr.stats.%s missing", counters[i]);
  assert_int_equal(tu_stat(&t, "ops_recorded"), 2);
  assert_int_equal(tu_stat(&t, "threads"), 1);
  /* 2 ops + 1 thread node + the process node */
  assert_int_equal(tu_node_count(&t), 4);
  assert_int_equal(tu_stat(&t, "nodes_written"), 4);
  assert_int_equal(tu_stat(&t, "objects"), 2);
  assert_int_equal(tu_stat(&t, "nodes_dropped"), 0);
  tu_free(&t);
}

static void test_process_node(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  record_small();
  tu_close_ok(&t);
  size_t n = tu_node_count(&t);
  json_t *p = json_array_get(t.nodes, n - 1);
  assert_int_equal(tu_id(p), 1);
  assert_string_equal(tu_name(p), TU_PROCESS_NAME);
  assert_int_equal(tu_ctrl_deps(p), 1);
  assert_int_equal(tu_count(&t, TU_PROCESS_NAME), 1);
  char buf[2048];
  assert_string_equal(attrs_str(p, buf, sizeof buf),
                      "rf_id:uint64:0;fw_parent:uint64:0;seq_id:int64:-1;scope:uint64:7;"
                      "tid:uint64:0;fw_tid:uint64:0;op_schema:string:\"\";"
                      "kernel_backend:string:\"\";kernel_file:string:\"\"");
  tu_keys k;
  tu_node_keys(&t, n - 1, &k);
  assert_string_equal(tu_keys_join(&k, buf, sizeof buf), "id,name,ctrl_deps,inputs,outputs,attrs");
  for (size_t i = 0; i < 2; i++) {
    const char *io = i ? "outputs" : "inputs";
    json_t *o = json_object_get(p, io);
    tu_keys ok;
    tu_raw_keys(t.text, t.len, k.val_off[3 + i], &ok);
    assert_string_equal(tu_keys_join(&ok, buf, sizeof buf), "values,shapes,types,strides");
    assert_int_equal(json_array_size(json_object_get(o, "values")), 0);
    assert_int_equal(json_array_size(json_object_get(o, "strides")), 0);
  }
  check_attrs_shape(&t, n - 1);
  tu_free(&t);
}

struct thread_arg {
  uint64_t tid;
  const char *op;
};

static void *thread_records(void *p) {
  struct thread_arg *a = p;
  a->tid = etr_thread_id();
  tu_op(a->op, NULL, 0, NULL, 0);
  tu_op(a->op, NULL, 0, NULL, 0);
  return NULL;
}

static void *thread_idle(void *p) {
  struct thread_arg *a = p;
  a->tid = etr_thread_id();
  return NULL;
}

static void test_thread_nodes(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  uint64_t main_tid = etr_thread_id();
  tu_op("main_op", NULL, 0, NULL, 0);
  struct thread_arg a1 = {0, "t1_op"}, a2 = {0, "t2_op"}, idle = {0, NULL};
  pthread_t th1, th2, th3;
  assert_int_equal(pthread_create(&th1, NULL, thread_records, &a1), 0);
  assert_int_equal(pthread_join(th1, NULL), 0);
  assert_int_equal(pthread_create(&th2, NULL, thread_records, &a2), 0);
  assert_int_equal(pthread_create(&th3, NULL, thread_idle, &idle), 0);
  assert_int_equal(pthread_join(th2, NULL), 0);
  assert_int_equal(pthread_join(th3, NULL), 0);
  tu_close_ok(&t);

  assert_true(main_tid >= 1);
  assert_true(a1.tid != main_tid && a2.tid != main_tid && a1.tid != a2.tid);
  assert_true(idle.tid != a1.tid && idle.tid != a2.tid && idle.tid != main_tid);
  /* One thread node per thread that recorded; none for the idle one. */
  assert_int_equal(tu_count(&t, TU_THREAD_NAME), 3);
  assert_int_equal(tu_stat(&t, "threads"), 3);
  assert_null(tu_thread_node(&t, (json_int_t)idle.tid));
  uint64_t tids[3] = {main_tid, a1.tid, a2.tid};
  const char *ops[3] = {"main_op", "t1_op", "t2_op"};
  for (size_t i = 0; i < 3; i++) {
    json_t *tn = tu_thread_node(&t, (json_int_t)tids[i]);
    if (tn == NULL) fail_msg("no thread node with tid %llu", (unsigned long long)tids[i]);
    assert_int_equal(tu_ctrl_deps(tn), 1);
    char buf[2048], want[2048];
    /* then os_tid (the kernel's id of that thread) and thread_name (the OS name here) */
    snprintf(want, sizeof want,
             "rf_id:uint64:0;fw_parent:uint64:0;seq_id:int64:-1;scope:uint64:7;"
             "tid:uint64:%llu;fw_tid:uint64:0;op_schema:string:\"\";"
             "kernel_backend:string:\"\";kernel_file:string:\"\";os_tid:uint64:",
             (unsigned long long)tids[i]);
    const char *got = attrs_str(tn, buf, sizeof buf);
    if (strncmp(got, want, strlen(want)) != 0) fail_msg("thread node attrs: %s", got);
    assert_true(tu_attr_int(tn, "os_tid") > 0);
    assert_non_null(strstr(got, ";thread_name:string:\""));
    size_t idx = tu_node_index(&t, tn);
    tu_keys k;
    tu_node_keys(&t, idx, &k);
    assert_string_equal(tu_keys_join(&k, buf, sizeof buf),
                        "id,name,ctrl_deps,inputs,outputs,attrs");
    check_attrs_shape(&t, idx);
    /* The thread's ops hang under its node and carry its tid. */
    size_t j;
    json_t *node;
    size_t found = 0;
    json_array_foreach(t.nodes, j, node) {
      if (strcmp(tu_name(node), ops[i]) != 0) continue;
      found++;
      assert_int_equal(tu_ctrl_deps(node), tu_id(tn));
      assert_int_equal(tu_attr_int(node, "tid"), (json_int_t)tids[i]);
    }
    assert_int_equal(found, i == 0 ? 1 : 2);
  }
  tu_free(&t);
}

static void test_op_node_keys_and_attrs(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record r;
  etr_record_init(&r, "aten::mm", ETR_SCOPE_BACKWARD_FUNCTION);
  assert_true(etr_record_is_active(&r));
  r.schema = "aten::mm(Tensor self, Tensor mat2) -> Tensor";
  r.seq_nr = 42;
  etr_record_begin(&r);
  etr_record_end(&r);
  tu_op("plain", NULL, 0, NULL, 0);
  tu_close_ok(&t);

  size_t i;
  json_t *node;
  json_array_foreach(t.nodes, i, node) {
    tu_keys k, jk;
    char buf[512], jbuf[512];
    tu_node_keys(&t, i, &k);
    tu_json_keys(node, &jk);
    assert_string_equal(tu_keys_join(&jk, jbuf, sizeof jbuf), tu_keys_join(&k, buf, sizeof buf));
    const char *nm = tu_name(node);
    int is_op = strcmp(nm, TU_PROCESS_NAME) != 0 && strcmp(nm, TU_THREAD_NAME) != 0;
    assert_string_equal(buf, is_op ? "id,name,ctrl_deps,inputs,outputs,ts,inclusive_dur,"
                                     "exclusive_dur,attrs"
                                   : "id,name,ctrl_deps,inputs,outputs,attrs");
    for (size_t j = 0; j < 2; j++) {
      tu_keys ok;
      tu_raw_keys(t.text, t.len, k.val_off[3 + j], &ok);
      assert_string_equal(tu_keys_join(&ok, buf, sizeof buf), "values,shapes,types,strides");
    }
    check_attrs_shape(&t, i);
  }
  json_t *mm = tu_node(&t, "aten::mm");
  json_t *plain = tu_node(&t, "plain");
  char buf[2048];
  (void)buf;
  assert_true(tu_attr_int(mm, "rf_id") > 0);
  assert_true(tu_attr_int(plain, "rf_id") > 0);
  assert_true(tu_attr_int(mm, "rf_id") != tu_attr_int(plain, "rf_id"));
  assert_int_equal(tu_attr_int(mm, "fw_parent"), 0);
  assert_int_equal(tu_attr_int(mm, "seq_id"), 42);
  assert_int_equal(tu_attr_int(plain, "seq_id"), -1);
  assert_int_equal(tu_attr_int(mm, "scope"), 1);
  assert_int_equal(tu_attr_int(plain, "scope"), 0);
  assert_int_equal(tu_attr_int(mm, "tid"), (json_int_t)etr_thread_id());
  assert_int_equal(tu_attr_int(mm, "fw_tid"), 0);
  assert_string_equal(tu_attr_str(mm, "op_schema"), "aten::mm(Tensor self, Tensor mat2) -> Tensor");
  assert_string_equal(tu_attr_str(plain, "op_schema"), "");
  assert_string_equal(tu_attr_str(mm, "kernel_backend"), "");
  assert_string_equal(tu_attr_str(mm, "kernel_file"), "");
  /* No optional attrs on a plain op. */
  assert_int_equal(json_array_size(json_object_get(mm, "attrs")), 9);
  assert_int_equal(json_array_size(json_object_get(plain, "attrs")), 9);
  tu_free(&t);
}

static void test_schema_1_1_0(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.schema = ETR_SCHEMA_1_1_0;
  tu_open(&t, &opt);
  record_small();
  tu_close_ok(&t);
  assert_string_equal(json_string_value(json_object_get(t.root, "schema")), "1.1.0-chakra.0.0.4");
  assert_null(strstr(t.text, "\"strides\""));
  size_t i;
  json_t *node;
  json_array_foreach(t.nodes, i, node) {
    tu_keys k;
    char buf[256];
    tu_node_keys(&t, i, &k);
    for (size_t j = 0; j < 2; j++) {
      tu_keys ok;
      tu_raw_keys(t.text, t.len, k.val_off[3 + j], &ok);
      assert_string_equal(tu_keys_join(&ok, buf, sizeof buf), "values,shapes,types");
    }
  }
  json_t *inner = tu_node(&t, "inner");
  json_t *sh = tu_in(inner, "inputs", "shapes", 0);
  assert_int_equal(json_array_size(sh), 2);
  assert_int_equal(json_integer_value(json_array_get(sh, 0)), 2);
  tu_free(&t);
}

static void test_schema_1_1_1(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.schema = ETR_SCHEMA_1_1_1;
  tu_open(&t, &opt);
  record_small();
  tu_close_ok(&t);
  assert_string_equal(json_string_value(json_object_get(t.root, "schema")), "1.1.1-chakra.0.0.4");
  json_t *inner = tu_node(&t, "inner");
  json_t *ins = json_object_get(inner, "inputs");
  json_t *strides = json_object_get(ins, "strides");
  assert_int_equal(json_array_size(strides), 2);
  json_t *s0 = json_array_get(strides, 0);
  assert_int_equal(json_array_size(s0), 2);
  assert_int_equal(json_integer_value(json_array_get(s0, 0)), 3);
  assert_int_equal(json_integer_value(json_array_get(s0, 1)), 1);
  assert_true(json_is_array(json_array_get(strides, 1)));
  assert_int_equal(json_array_size(json_array_get(strides, 1)), 0);
  tu_free(&t);
}

static void test_timing(void **state) {
  (void)state;
  tu_trace t;
  int64_t before = tu_mono_us();
  tu_open(&t, NULL);
  etr_record parent, c1;
  tu_begin(&parent, "parent", NULL, 0);
  tu_sleep_us(2000);
  tu_begin(&c1, "child1", NULL, 0);
  tu_sleep_us(3000);
  tu_end(&c1, NULL, 0);
  tu_begin(&c1, "child2", NULL, 0);
  tu_sleep_us(1000);
  tu_end(&c1, NULL, 0);
  tu_sleep_us(1000);
  tu_end(&parent, NULL, 0);
  tu_op("leaf", NULL, 0, NULL, 0);
  tu_close_ok(&t);
  int64_t after = tu_mono_us();

  size_t i;
  json_t *node;
  json_array_foreach(t.nodes, i, node) {
    const char *nm = tu_name(node);
    if (strcmp(nm, TU_PROCESS_NAME) == 0 || strcmp(nm, TU_THREAD_NAME) == 0) {
      assert_null(json_object_get(node, "ts"));
      assert_null(json_object_get(node, "inclusive_dur"));
      assert_null(json_object_get(node, "exclusive_dur"));
      continue;
    }
    json_t *ts = json_object_get(node, "ts"), *inc = json_object_get(node, "inclusive_dur"),
           *exc = json_object_get(node, "exclusive_dur");
    if (!json_is_integer(ts) || !json_is_integer(inc) || !json_is_integer(exc))
      fail_msg("op %s: ts/inclusive_dur/exclusive_dur missing or not integers", nm);
    assert_true(json_integer_value(inc) >= json_integer_value(exc));
    assert_true(json_integer_value(exc) >= 0);
    /* Monotonic clock in microseconds. */
    assert_true(json_integer_value(ts) >= before - 1);
    assert_true(json_integer_value(ts) + json_integer_value(inc) <= after + 1);
  }
  json_t *p = tu_node(&t, "parent"), *k1 = tu_node(&t, "child1"), *k2 = tu_node(&t, "child2");
#define TS(n) json_integer_value(json_object_get((n), "ts"))
#define INC(n) json_integer_value(json_object_get((n), "inclusive_dur"))
#define EXC(n) json_integer_value(json_object_get((n), "exclusive_dur"))
  assert_true(INC(k1) >= 3000);
  assert_true(INC(k2) >= 1000);
  assert_true(INC(p) >= 7000);
  assert_true(EXC(p) >= 3000 - 2);
  assert_int_equal(EXC(k1), INC(k1));
  assert_int_equal(EXC(k2), INC(k2));
  /* exclusive = inclusive - children's inclusive, within rounding (1 us per term). */
  json_int_t d = EXC(p) - (INC(p) - INC(k1) - INC(k2));
  if (d < -2 || d > 2)
    fail_msg("parent exclusive %lld, inclusive %lld, children %lld + %lld", (long long)EXC(p),
             (long long)INC(p), (long long)INC(k1), (long long)INC(k2));
  /* Children lie inside the parent, in order. */
  assert_true(TS(k1) >= TS(p));
  assert_true(TS(k2) >= TS(k1) + INC(k1) - 1);
  assert_true(TS(k2) + INC(k2) <= TS(p) + INC(p) + 1);
  assert_true(TS(k1) - TS(p) >= 2000 - 1);
  /* ts relates to start_ts (ms, same clock). */
  json_int_t start_ms = json_integer_value(json_object_get(t.root, "start_ts"));
  json_int_t finish_ms = json_integer_value(json_object_get(t.root, "finish_ts"));
  assert_true(TS(p) / 1000 >= start_ms - 1);
  assert_true((TS(p) + INC(p)) / 1000 <= finish_ms + 1);
#undef TS
#undef INC
#undef EXC
  tu_free(&t);
}

static void test_no_timing(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.no_timing = true;
  tu_open(&t, &opt);
  record_small();
  tu_close_ok(&t);
  assert_null(strstr(t.text, "\"ts\""));
  assert_null(strstr(t.text, "\"inclusive_dur\""));
  assert_null(strstr(t.text, "\"exclusive_dur\""));
  size_t i;
  json_t *node;
  json_array_foreach(t.nodes, i, node) {
    tu_keys k;
    char buf[256];
    tu_node_keys(&t, i, &k);
    assert_string_equal(tu_keys_join(&k, buf, sizeof buf),
                        "id,name,ctrl_deps,inputs,outputs,attrs");
  }
  assert_int_equal(tu_count(&t, "inner"), 1);
  tu_free(&t);
}

/* comms_huge's integer attrs are clamped to INT64_MAX. */
static void n_huge_check(tu_trace *t) {
  json_t *n = tu_node(t, "comms_huge");
  assert_int_equal(tu_attr_int(n, "in_msg_nelems"), INT64_MAX);
  assert_int_equal(tu_attr_int(n, "out_msg_nelems"), INT64_MAX);
  assert_int_equal(tu_attr_int(n, "pg_size"), INT64_MAX);
  assert_int_equal(tu_attr_int(n, "fw_tid"), INT64_MAX);
}

static void test_collective_attrs(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  const int64_t in_splits[2] = {1, 2}, out_splits[3] = {3, 40, -5};
  etr_collective_info ci = ETR_COLLECTIVE_INFO_INIT;
  ci.name = "allreduce";
  ci.dtype = "Float";
  ci.in_msg_nelems = 100;
  ci.out_msg_nelems = 200;
  ci.in_split_sizes = in_splits;
  ci.n_in_splits = 2;
  ci.out_split_sizes = out_splits;
  ci.n_out_splits = 3;
  ci.global_rank_start = 0;
  ci.global_rank_stride = 1;
  ci.pg_name = "0";
  ci.pg_desc = "default_pg";
  ci.pg_size = 8;
  ci.is_async = true;
  etr_record r;
  etr_record_init(&r, "record_param_comms", ETR_SCOPE_USER_SCOPE);
  assert_true(etr_record_is_active(&r));
  r.collective = &ci;
  etr_record_begin(&r);
  etr_record_end(&r);

  etr_collective_info c2 = ETR_COLLECTIVE_INFO_INIT;
  c2.name = "broadcast";
  c2.dtype = "Int";
  c2.global_rank_start = -1;
  c2.global_rank_stride = 0;
  c2.pg_name = "1";
  c2.pg_desc = "sub";
  c2.pg_size = 2;
  etr_record_init(&r, "comms2", ETR_SCOPE_USER_SCOPE);
  r.collective = &c2;
  etr_record_begin(&r);
  etr_record_end(&r);

  etr_collective_info c3 = ETR_COLLECTIVE_INFO_INIT;
  c3.name = "all_gather";
  c3.global_rank_start = 4;
  c3.global_rank_stride = -2; /* not > 0: omitted */
  etr_record_init(&r, "comms3", ETR_SCOPE_USER_SCOPE);
  r.collective = &c3;
  etr_record_begin(&r);
  etr_record_end(&r);

  /* Integer attrs must fit in int64 (docs/FORMAT.md): huge runtime values are clamped. */
  etr_collective_info c4 = ETR_COLLECTIVE_INFO_INIT;
  c4.in_msg_nelems = UINT64_MAX;
  c4.out_msg_nelems = (uint64_t)INT64_MAX + 1;
  c4.pg_size = UINT64_MAX;
  etr_record_init(&r, "comms_huge", ETR_SCOPE_USER_SCOPE);
  r.collective = &c4;
  r.fw_tid = UINT64_MAX;
  etr_record_begin(&r);
  etr_record_end(&r);
  tu_close_ok(&t);

  n_huge_check(&t);

  json_t *n = tu_node(&t, "record_param_comms");
  assert_attrs_after(n, "kernel_file:string:\"\";",
                     "collective_name:string:\"allreduce\";dtype:string:\"Float\";"
                     "in_msg_nelems:uint64:100;out_msg_nelems:uint64:200;"
                     "in_split_size:string:\"[1, 2]\";out_split_size:string:\"[3, 40, -5]\";"
                     "global_rank_start:uint64:0;global_rank_stride:uint64:1;"
                     "pg_name:string:\"0\";pg_desc:string:\"default_pg\";pg_size:uint64:8;"
                     "is_asynchronized_op:uint64:1");
  assert_int_equal(tu_attr_int(n, "scope"), 7);
  check_attrs_shape(&t, tu_node_index(&t, n));

  n = tu_node(&t, "comms2");
  assert_attrs_after(n, "kernel_file:string:\"\";",
                     "collective_name:string:\"broadcast\";dtype:string:\"Int\";"
                     "in_msg_nelems:uint64:0;out_msg_nelems:uint64:0;"
                     "in_split_size:string:\"[]\";out_split_size:string:\"[]\";"
                     "pg_name:string:\"1\";pg_desc:string:\"sub\";pg_size:uint64:2;"
                     "is_asynchronized_op:uint64:0");
  n = tu_node(&t, "comms3");
  assert_int_equal(tu_attr_int(n, "global_rank_start"), 4);
  assert_null(tu_attr(n, "global_rank_stride"));
  assert_string_equal(tu_attr_str(n, "dtype"), "");
  assert_string_equal(tu_attr_str(n, "pg_name"), "");
  check_attrs_shape(&t, tu_node_index(&t, n));
  tu_free(&t);
}

static void test_kernel_attrs(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_kernel_info k = ETR_KERNEL_INFO_INIT;
  k.backend = "triton";
  k.file = "/tmp/kernels/k1.py";
  k.grid[0] = 128;
  k.grid[1] = 2;
  k.grid[2] = 1;
  k.stream = 7;
  etr_record r;
  etr_record_init(&r, "triton_kernel", ETR_SCOPE_FUNCTION);
  r.kernel = &k;
  etr_record_begin(&r);
  etr_record_end(&r);

  etr_kernel_info k2 = ETR_KERNEL_INFO_INIT;
  k2.backend = "cuda";
  etr_record_init(&r, "cuda_kernel", ETR_SCOPE_FUNCTION);
  r.kernel = &k2;
  etr_record_begin(&r);
  etr_record_end(&r);

  /* Both: collective attrs come before the kernel ones. */
  etr_kernel_info k3 = ETR_KERNEL_INFO_INIT;
  k3.backend = "nccl";
  k3.stream = 0;
  etr_collective_info c = ETR_COLLECTIVE_INFO_INIT;
  c.name = "allreduce";
  etr_record_init(&r, "both", ETR_SCOPE_FUNCTION);
  r.kernel = &k3;
  r.collective = &c;
  etr_record_begin(&r);
  etr_record_end(&r);
  tu_close_ok(&t);

  json_t *n = tu_node(&t, "triton_kernel");
  assert_attrs_after(n, "op_schema:string:\"\";",
                     "kernel_backend:string:\"triton\";kernel_file:string:\"k1.py\";"
                     "tensor_range:string:\"\";kernel_grid:string:\"[128, 2, 1]\";"
                     "kernel_stream:uint64:7");
  check_attrs_shape(&t, tu_node_index(&t, n));
  n = tu_node(&t, "cuda_kernel");
  assert_string_equal(tu_attr_str(n, "kernel_backend"), "cuda");
  assert_string_equal(tu_attr_str(n, "kernel_file"), "");
  assert_null(tu_attr(n, "kernel_grid"));
  assert_null(tu_attr(n, "kernel_stream"));
  assert_int_equal(json_array_size(json_object_get(n, "attrs")), 9);
  n = tu_node(&t, "both");
  json_t *attrs = json_object_get(n, "attrs");
  size_t last = json_array_size(attrs) - 1;
  assert_string_equal(json_string_value(json_object_get(json_array_get(attrs, last), "name")),
                      "kernel_stream");
  assert_int_equal(tu_attr_int(n, "kernel_stream"), 0);
  assert_string_equal(json_string_value(json_object_get(json_array_get(attrs, 9), "name")),
                      "collective_name");
  assert_string_equal(tu_attr_str(n, "kernel_backend"), "nccl");
  tu_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_top_level),        TU_TEST(test_process_node),
      TU_TEST(test_thread_nodes),     TU_TEST(test_op_node_keys_and_attrs),
      TU_TEST(test_schema_1_1_0),     TU_TEST(test_schema_1_1_1),
      TU_TEST(test_timing),           TU_TEST(test_no_timing),
      TU_TEST(test_collective_attrs), TU_TEST(test_kernel_attrs),
  };
  return cmocka_run_group_tests_name("trace_format", tests, NULL, NULL);
}
