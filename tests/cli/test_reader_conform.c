/* Unit tests of the reader's scan of conforming nodes for `etr validate` (rd_options.conform,
 * src/json/reader_lean.c): a node that the scan hands over without its tree must give the
 * same parts as the general path reading it, with no warning from the general path; a node
 * that breaks one rule (or has another shape) must come with its tree, as without the
 * option. That validate's checks find nothing in a conforming node is tested end to end by
 * test_validate_conform.py (etr validate against a build of it without the option). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json/reader.h"

#include "cli_test_util.h"

#ifndef ETR_GOLDEN
#error "ETR_GOLDEN must name tests/trace/golden/basic.json"
#endif

/* The parts of a node that a conforming node carries too, copied (the node is valid only
 * until the next rd_next). */
typedef struct parts {
  uint64_t offset;
  int64_t id, ctrl_deps, ts, inc, exc, seq_id;
  char name[128], op_schema[256], kernel_backend[64], kernel_file[64];
  uint32_t key_bits, missing_attrs;
  bool keys_in_order, has_timing, has_traceback, has_nul_strings, conforms;
  uint64_t rf_id, fw_parent, scope, tid, fw_tid, traceback;
} parts;

static void copy_str(char *dst, size_t size, const char *s) {
  snprintf(dst, size, "%s", s ? s : "(null)");
}

static parts parts_of(const rd_rnode *n) {
  parts p;
  memset(&p, 0, sizeof p);
  p.offset = n->offset;
  p.id = n->id;
  p.ctrl_deps = n->ctrl_deps;
  p.has_timing = n->has_timing;
  if (n->has_timing) {
    p.ts = n->ts;
    p.inc = n->inclusive_dur;
    p.exc = n->exclusive_dur;
  }
  p.seq_id = n->seq_id;
  copy_str(p.name, sizeof p.name, n->name);
  copy_str(p.op_schema, sizeof p.op_schema, n->op_schema);
  copy_str(p.kernel_backend, sizeof p.kernel_backend, n->kernel_backend);
  copy_str(p.kernel_file, sizeof p.kernel_file, n->kernel_file);
  p.key_bits = n->key_bits;
  p.missing_attrs = n->missing_attrs;
  p.keys_in_order = n->keys_in_order;
  p.has_traceback = n->has_traceback;
  p.traceback = n->has_traceback ? n->traceback : 0;
  p.has_nul_strings = n->has_nul_strings;
  p.rf_id = n->rf_id;
  p.fw_parent = n->fw_parent;
  p.scope = n->scope;
  p.tid = n->tid;
  p.fw_tid = n->fw_tid;
  p.conforms = n->conforms;
  if (n->conforms) {
    assert_null(n->raw);
    assert_null(n->attrs);
    assert_null(n->inputs);
    assert_null(n->outputs);
  }
  return p;
}

static void count_warning(uint64_t off, int64_t id, const char *msg, void *user) {
  (void)off, (void)id, (void)msg;
  (*(uint64_t *)user)++;
}

#define MAX_NODES 512

typedef struct read_out {
  int rc;
  size_t n;
  parts p[MAX_NODES];
  uint64_t warnings_of[MAX_NODES]; /* warnings given while reading up to node i */
  size_t conforming;
} read_out;

static void read_nodes(const char *path, bool conform, read_out *out) {
  memset(out, 0, sizeof *out);
  uint64_t warnings = 0;
  rd_options o = ETR_READER_OPTIONS_INIT;
  o.warn = count_warning;
  o.user = &warnings;
  o.conform = conform;
  rd_reader *r = NULL;
  int rc = rd_open(path, &o, &r);
  if (rc == 0) {
    const rd_rnode *n;
    while ((rc = rd_next(r, &n)) == 1) {
      assert_true(out->n < MAX_NODES);
      out->warnings_of[out->n] = warnings;
      out->p[out->n] = parts_of(n);
      out->conforming += n->conforms;
      out->n++;
    }
    if (rc == 0) rc = rd_finish(r);
  }
  out->rc = rc;
  rd_close(r);
}

/* path read with and without the option: the same nodes and parts; each node the scan took
 * had no warning on the general path. Returns how many it took. */
static size_t compare_paths(const char *path) {
  static read_out with, without;
  read_nodes(path, true, &with);
  read_nodes(path, false, &without);
  assert_int_equal(with.rc, without.rc);
  assert_int_equal(with.n, without.n);
  assert_int_equal(without.conforming, 0);
  for (size_t i = 0; i < with.n; i++) {
    parts a = with.p[i], b = without.p[i];
    if (!a.conforms) {
      assert_memory_equal(&a, &b, sizeof a);
      continue;
    }
    /* the general path warned about none of it (warnings_of[i]: those given up to node i) */
    assert_int_equal(without.warnings_of[i], i ? without.warnings_of[i - 1] : 0);
    b.conforms = true;
    if (memcmp(&a, &b, sizeof a))
      fail_msg("%s: node %zu (id %lld): the scan's parts differ from the general path's", path, i,
               (long long)b.id);
  }
  return with.conforming;
}

/* A node of our writer's shape that conforms: every kind of value validate checks. */
static const char node_ok[] =
    "{\"id\": 12, \"name\": \"aten::add\", \"ctrl_deps\": 3, \"inputs\": {\"values\": "
    "[[5,6,0,128,4,\"cpu\"],2,-0.5,\"nan\",true,\"<None>\",\"cpu\",\"s\",[1,2],"
    "[[7,8,0,4,4,\"cpu\"],3],[[]],7], \"shapes\": [[16,8],[],[],[],[],[],[],[],[[],[]],"
    "[[4],[]],[],[]], \"types\": [\"Tensor(float)\",\"Int\",\"Double\",\"Double\",\"Bool\","
    "\"None\",\"Device\",\"String\",\"GenericList[Int,Int]\",\"Tuple[Tensor(float),Int]\","
    "\"Object\",\"Object\"], \"strides\": [[8,1],[],[],[],[],[],[],[],[[],[]],[[1],[]],[],[]]}, "
    "\"outputs\": {\"values\": [], \"shapes\": [], \"types\": [], \"strides\": []}, \"ts\": 100, "
    "\"inclusive_dur\": 9, \"exclusive_dur\": 4, \"attrs\": [{\"name\": \"rf_id\", \"type\": "
    "\"uint64\", \"value\": 7},{\"name\": \"fw_parent\", \"type\": \"uint64\", \"value\": 2},"
    "{\"name\": \"seq_id\", \"type\": \"int64\", \"value\": -1},{\"name\": \"scope\", \"type\": "
    "\"uint64\", \"value\": 0},{\"name\": \"tid\", \"type\": \"uint64\", \"value\": 2},{\"name\": "
    "\"fw_tid\", \"type\": \"uint64\", \"value\": 0},{\"name\": \"op_schema\", \"type\": "
    "\"string\", \"value\": \"aten::add(Tensor a) -> Tensor\"},{\"name\": \"kernel_backend\", "
    "\"type\": \"string\", \"value\": \"\"},{\"name\": \"kernel_file\", \"type\": \"string\", "
    "\"value\": \"k.py\"},{\"name\": \"traceback\", \"type\": \"uint64\", \"value\": 4},"
    "{\"name\": \"x\", \"type\": \"double\", \"value\": 1.5e3},{\"name\": \"y\", \"type\": "
    "\"bool\", \"value\": false}, {\"name\": \"z\", \"type\": \"string\", \"value\": \"w\"}]}";

/* One change to node_ok each (the first occurrence of `from` becomes `to`), and whether the
 * node still conforms. */
static const struct {
  const char *from, *to;
  bool conforms;
} variants[] = {
    {"", "", true},
    {", \"ts\": 100, \"inclusive_dur\": 9, \"exclusive_dur\": 4", "", true},
    {"\"exclusive_dur\": 4", "\"exclusive_dur\": 40", true}, /* validate's own check */
    {"\"id\": 12", "\"id\": 0", true},                       /* validate's own check */
    {"{\"name\": \"traceback\", \"type\": \"uint64\", \"value\": 4},", "", true},
    {"{\"name\": \"kernel_file\", \"type\": \"string\", \"value\": \"k.py\"},", "", true},
    {"{\"name\": \"kernel_backend\", \"type\": \"string\", \"value\": \"\"},", "", true},
    {"},{\"name\": \"x\"", "}, {\"name\": \"x\"", true},
    {"\"id\": 12", "\"id\": 1234567890123456789", false},
    {"\"id\": 12", "\"id\": -0", false},
    {"\"id\": 12", "\"id\": 12.0", false},
    {"\"id\": 12", "\"id\":12", false},
    {"\"ctrl_deps\": 3", "\"ctrl_deps\": -3", false},
    {"\"name\": \"aten::add\"", "\"name\": \"aten\\u0000add\"", false},
    {"\"name\": \"aten::add\"", "\"name\": \"at\xc3\xa9n\"", false},
    {"\"ts\": 100", "\"ts\": 100.5", false},
    {", \"inclusive_dur\": 9", "", false},
    {"[5,6,0,128,4,\"cpu\"]", "[5,6,0,128,-4,\"cpu\"]", false},
    {"[5,6,0,128,4,\"cpu\"]", "[5,6,0,128,4,7]", false},
    {"[5,6,0,128,4,\"cpu\"]", "[5,6,0,128,4,\"cpu\",1]", false},
    {"[5,6,0,128,4,\"cpu\"]", "[5,6,0,128,\"cpu\"]", false},
    {"[[16,8]", "[[16,8.0]", false},
    {"[[16,8]", "[[16,8,]", false},
    {"[[16,8]", "[[16,,8]", false},
    {"[5,6,0,128,4,\"cpu\"]", "[5,6,0,128,4,\"cpu\",]", false},
    {"],2,-0.5", "],02,-0.5", false},
    {"-0.5,", "-.5,", false},
    {"true,", "tru,", false},
    {"[1,2],", "[1,2 ],", false},
    {"\"strides\": [[8,1]", "\"strides\": [[8]", false},
    {"\"strides\": [[8,1]", "\"strides\": [[8,\"1\"]", false},
    {"],2,-0.5", "],2.5,-0.5", false},
    {"],2,-0.5", "],9223372036854775808,-0.5", false},
    {"-0.5,\"nan\"", "-0.5,\"nanx\"", false},
    {"-0.5,\"nan\"", "-0.5,\"-inf\"", true},
    {"-0.5,\"nan\"", "-0.5,1e400", true},
    {"true,\"<None>\"", "1,\"<None>\"", false},
    {"true,\"<None>\"", "true,\"None\"", false},
    {"\"cpu\",\"s\"", "1,\"s\"", false},
    {"\"s\",[1,2]", "null,[1,2]", false},
    {"[1,2],", "[1,2,3],", false},
    {"[1,2],", "[1,\"2\"],", false},
    {"[[],[]],[[4]", "[[],[1]],[[4]", false},
    {"\"GenericList[Int,Int]\"", "\"GenericList[Int,Int\"", false},
    {"\"GenericList[Int,Int]\"", "\"GenericList[Int,Double]\"", true},
    {"\"GenericList[Int,Int]\"", "\"Tuple[Int,Int,Int]\"", false},
    {"\"Tuple[Tensor(float),Int]\"", "\"Tuple[Int,Int]\"", false},
    {"[[7,8,0,4,4,\"cpu\"],3]", "[[7,8,0,4,4,\"cpu\"],3.5]", false},
    {"\"Object\",\"Object\"]", "\"Object\",\"\"]", false},
    {"\"Object\",\"Object\"]", "\"Object\",7]", false},
    {"\"Bool\"", "\"Int\"", false},
    {"[[]],7]", "[[]],{\"k\": 1}]", false},
    {"\"values\": [], \"shapes\": []", "\"values\": [1], \"shapes\": []", false},
    {", \"strides\": []}", "}", false},
    {"\"values\": [], \"shapes\": []", "\"shapes\": [], \"values\": []", false},
    {"\"values\": [], \"shapes\": [], \"types\": [], \"strides\": []",
     "\"values\": [], \"shapes\": [], \"types\": [], \"strides\": [], \"x\": 1", false},
    {"\"value\": 7}", "\"value\": -7}", false},
    {"\"value\": 7}", "\"value\": 9223372036854775808}", false},
    {"\"value\": 7}", "\"value\": \"7\"}", false},
    {"\"type\": \"int64\", \"value\": -1}", "\"type\": \"uint64\", \"value\": -1}", false},
    {"\"type\": \"int64\", \"value\": -1}", "\"type\": \"int64\", \"value\": 1.0}", false},
    {"\"value\": \"aten::add(Tensor a) -> Tensor\"}", "\"value\": 5}", false},
    {"\"value\": \"aten::add(Tensor a) -> Tensor\"}",
     "\"value\": \"aten::add(Tensor a) -\\u003e Tensor\"}", false},
    {"{\"name\": \"fw_parent\", \"type\": \"uint64\", \"value\": 2},", "", false},
    {"{\"name\": \"rf_id\", \"type\": \"uint64\", \"value\": 7},{\"name\": \"fw_parent\", "
     "\"type\": \"uint64\", \"value\": 2},",
     "{\"name\": \"fw_parent\", \"type\": \"uint64\", \"value\": 2},{\"name\": \"rf_id\", "
     "\"type\": \"uint64\", \"value\": 7},",
     false},
    {"{\"name\": \"rf_id\", \"type\": \"uint64\", \"value\": 7},",
     "{\"name\": \"rf_id\", \"type\": \"uint64\", \"value\": 7},{\"name\": \"rf_id\", \"type\": "
     "\"uint64\", \"value\": 7},",
     false},
    {"\"name\": \"z\"", "\"name\": \"x\"", false},
    {"\"name\": \"z\"", "\"name\": \"tid\"", false},
    {"\"name\": \"z\"", "\"name\": \"stream\"", false},
    {"\"name\": \"z\", \"type\": \"string\", \"value\": \"w\"",
     "\"name\": \"z\", \"type\": "
     "\"string\", \"value\": 1",
     false},
    {"\"name\": \"z\", \"type\": \"string\", \"value\": \"w\"",
     "\"name\": \"z\", \"type\": "
     "\"int64\", \"value\": 1",
     true},
    {"\"name\": \"z\", \"type\": \"string\", \"value\": \"w\"",
     "\"name\": \"z\", \"type\": "
     "\"string\", \"value\": [1]",
     false},
    {"\"type\": \"uint64\", \"value\": 4}", "\"type\": \"uint64\", \"value\": 4 }", false},
    {"\"type\": \"uint64\", \"value\": 4}", "\"type\": \"other\", \"value\": \"4\"}", true},
    {"\"type\": \"uint64\", \"value\": 4}", "\"type\": \"other\", \"value\": 12345678901234567890}",
     false},
    {"{\"name\": \"x\", \"type\": \"double\"", "{\"type\": \"double\", \"name\": \"x\"", false},
    {"\"attrs\": [", "\"attrs\": [{\"name\": \"q\", \"type\": \"int64\", \"value\": 1},", false},
    {"\"ctrl_deps\": 3, \"inputs\"", "\"ctrl_deps\": 3, \"extra\": 1, \"inputs\"", false},
    /* whitespace between a node's keys, as PyTorch writes them; anywhere else it is a miss */
    {"{\"id\": 12, ", "{\n      \"id\": 12,\n      ", true},
    {", \"inputs\": ", ",\n\t \"inputs\": ", true},
    {"\"value\": false}, {\"name\": \"z\", \"type\": \"string\", \"value\": \"w\"}]}",
     "\"value\": false}, {\"name\": \"z\", \"type\": \"string\", \"value\": \"w\"}]\n    }", true},
    {"{\"id\": 12, ", "{\"id\" : 12, ", false},
    {"\"inputs\": {\"values\"", "\"inputs\": { \"values\"", false},
    {", \"shapes\": [[16,8]", ",\n\"shapes\": [[16,8]", false},
};

static void write_trace_schema(const char *path, const char *node, const char *schema) {
  char *doc = malloc(2 * strlen(node) + 512);
  assert_non_null(doc);
  sprintf(doc,
          "{\"schema\": \"%s\", \"pid\": 1, \"time\": \"2026-01-01 00:00:00\", "
          "\"start_ts\": 0, \"nodes\": [\n%s,\n%s\n], \"finish_ts\": 1}",
          schema, node, node);
  ct_write_text(path, doc);
  free(doc);
}

static void write_trace(const char *path, const char *node) {
  write_trace_schema(path, node, "1.1.1-chakra.0.0.4");
}

static void test_variants(void **state) {
  (void)state;
  const char *p = ct_tmp_path("conform.json");
  for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
    char node[sizeof node_ok + 512];
    const char *at = strstr(node_ok, variants[v].from);
    assert_non_null(at);
    size_t pre = (size_t)(at - node_ok), from = strlen(variants[v].from);
    snprintf(node, sizeof node, "%.*s%s%s", (int)pre, node_ok, variants[v].to, at + from);
    write_trace(p, node);
    size_t took = compare_paths(p);
    if (took != (variants[v].conforms ? 2u : 0u))
      fail_msg("variant %zu (%s -> %s): the scan took %zu of 2 nodes", v, variants[v].from,
               variants[v].to, took);
  }
}

/* Without "strides": a miss in schema 1.1.1 (validate warns), taken in earlier ones; then the
 * checks that need strides are left out, the others made. */
static void test_no_strides(void **state) {
  (void)state;
  const char *p = ct_tmp_path("conform-nostrides.json");
  static const struct {
    const char *schema;
    const char *from, *to; /* one change more ("" "": none) */
    bool conforms;
  } cases[] = {
      {"1.1.1-chakra.0.0.4", "", "", false},
      {"1.1.0-chakra.0.0.4", "", "", true},
      {"1.0.2-chakra.0.0.4", "", "", true},
      {"1.0.2", "", "", true},
      {"2.0.0", "", "", false},
      {"1.1.0-chakra.0.0.4", "[5,6,0,128,4,\"cpu\"]", "[5,6,0,128,-4,\"cpu\"]", false},
      {"1.1.0-chakra.0.0.4", "[[16,8]", "[[16,8.0]", false},
      {"1.1.0-chakra.0.0.4", "[[],[]],[[4]", "[[],[1]],[[4]", false},
      {"1.1.0-chakra.0.0.4", "[1,2],", "[1,2,3],", false},
      {"1.1.0-chakra.0.0.4", "-0.5,\"nan\"", "-0.5,\"nanx\"", false},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    /* node_ok without its strides (both of them), then the case's change */
    char a[sizeof node_ok], b[sizeof node_ok + 64];
    const char *s1 = strstr(node_ok, ", \"strides\": [[8,1]"), *e1 = strstr(s1, "]]}") + 2;
    const char *s2 = strstr(e1, ", \"strides\": []}"), *e2 = s2 + strlen(", \"strides\": []");
    int na =
        snprintf(a, sizeof a, "%.*s%.*s%s", (int)(s1 - node_ok), node_ok, (int)(s2 - e1), e1, e2);
    assert_true(na > 0 && (size_t)na < sizeof a);
    const char *at = strstr(a, cases[c].from);
    assert_non_null(at);
    snprintf(b, sizeof b, "%.*s%s%s", (int)(at - a), a, cases[c].to, at + strlen(cases[c].from));
    write_trace_schema(p, b, cases[c].schema);
    size_t took = compare_paths(p);
    if (took != (cases[c].conforms ? 2u : 0u))
      fail_msg("case %zu (schema %s, %s -> %s): the scan took %zu of 2 nodes", c, cases[c].schema,
               cases[c].from, cases[c].to, took);
  }
}

/* A node cut at every byte by the end of the file, and nodes over small limits: never taken
 * by the scan, the general path's error the same. */
static void test_cut_and_limits(void **state) {
  (void)state;
  const char *p = ct_tmp_path("conform-cut.json");
  char doc[sizeof node_ok + 256];
  int head = snprintf(doc, sizeof doc, "{\"schema\": \"1.1.1\", \"nodes\": [%s", node_ok);
  for (int cut = head - (int)strlen(node_ok); cut <= head; cut += 7) {
    ct_write_file(p, doc, (size_t)cut);
    compare_paths(p);
  }
  write_trace(p, node_ok);
  setenv("ETR_READER_LIMIT_MB", "1", 1);
  assert_int_equal(compare_paths(p), 2);
  unsetenv("ETR_READER_LIMIT_MB");
}

/* Our golden trace (written without spaces: the general path reads it all), the same parts. */
static void test_golden(void **state) {
  (void)state;
  assert_int_equal(compare_paths(ETR_GOLDEN), 0);
}

int main(void) {
  if (getenv("ETR_READER_BACKEND") && strcmp(getenv("ETR_READER_BACKEND"), "hand")) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_variants),
      cmocka_unit_test(test_no_strides),
      cmocka_unit_test(test_cut_and_limits),
      cmocka_unit_test(test_golden),
  };
  return cmocka_run_group_tests(tests, ct_tmpdir_setup, ct_tmpdir_teardown);
}
