/* Unit tests of the streaming trace reader (src/json/reader.h): our golden trace, every
 * value kind, gzip, stdin through a pipe, truncated and mangled input (an error naming the
 * file and a byte offset, never a crash), warnings, bounded memory. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cmocka.h>

#include "etr/common.h"
#include "json/reader.h"

#include "cli_test_util.h"

#ifndef ETR_GOLDEN
#error "ETR_GOLDEN must name tests/trace/golden/basic.json"
#endif

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  b[n] = '\0';
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* ---- collected results of reading a whole file ---- */

typedef struct result {
  int rc; /* 0, or the first negative code */
  size_t nodes;
  int64_t id_sum;
  char err[600];
  uint64_t warnings;
  char first_warning[400];
  int64_t first_warning_node;
  uint64_t first_warning_off;
  uint64_t max_memory;
} result;

static void on_warn(uint64_t off, int64_t id, const char *msg, void *user) {
  result *r = user;
  if (!r->first_warning[0]) {
    snprintf(r->first_warning, sizeof r->first_warning, "%s", msg);
    r->first_warning_node = id;
    r->first_warning_off = off;
  }
}

static result read_all(const char *path, size_t max_node_bytes) {
  result res;
  memset(&res, 0, sizeof res);
  rd_options o = ETR_READER_OPTIONS_INIT;
  o.warn = on_warn;
  o.user = &res;
  o.max_node_bytes = max_node_bytes;
  rd_reader *r = NULL;
  int rc = rd_open(path, &o, &r);
  if (rc == 0) {
    const rd_rnode *n;
    while ((rc = rd_next(r, &n)) == 1) {
      res.nodes++;
      res.id_sum += n->id;
      uint64_t m = rd_memory(r);
      if (m > res.max_memory) res.max_memory = m;
    }
    if (rc == 0) rc = rd_finish(r);
  }
  res.rc = rc;
  if (r) {
    snprintf(res.err, sizeof res.err, "%s", rd_error(r));
    res.warnings = rd_warnings(r);
  }
  rd_close(r);
  return res;
}

/* The same file through both backends: the same verdict, nodes and ids, and on success the
 * same warnings (offsets in messages may differ by a token; on bad input yajl may warn
 * about a value the hand parser never completes). Returns the hand backend's result. */
static result read_both(const char *path) {
  const char *env = getenv("ETR_READER_BACKEND");
  char saved[16] = "";
  if (env) snprintf(saved, sizeof saved, "%s", env);
  setenv("ETR_READER_BACKEND", "yajl", 1);
  result y = read_all(path, 0);
  setenv("ETR_READER_BACKEND", "hand", 1);
  result h = read_all(path, 0);
  if (env)
    setenv("ETR_READER_BACKEND", saved, 1);
  else
    unsetenv("ETR_READER_BACKEND");
  if ((y.rc < 0) != (h.rc < 0) || y.nodes != h.nodes || y.id_sum != h.id_sum ||
      (y.rc == 0 && y.warnings != h.warnings))
    fail_msg(
        "backends differ on %s: yajl rc %d nodes %zu warnings %llu (%s); hand rc %d nodes %zu "
        "warnings %llu (%s)",
        path, y.rc, y.nodes, (unsigned long long)y.warnings, y.err, h.rc, h.nodes,
        (unsigned long long)h.warnings, h.err);
  return h;
}

/* The error names the file and "byte N" with N <= limit. */
static void assert_error_names(const result *res, const char *file, uint64_t limit) {
  assert_true(res->rc < 0);
  assert_non_null(strstr(res->err, file));
  const char *b = strstr(res->err, ": byte ");
  assert_non_null(b);
  unsigned long long off = strtoull(b + 7, NULL, 10);
  assert_true(off <= limit);
  assert_null(strchr(res->err, '\n'));
}

/* ---- tests ---- */

static void test_golden(void **state) {
  (void)state;
  rd_reader *r = NULL;
  assert_int_equal(rd_open(ETR_GOLDEN, NULL, &r), 0);
  const rd_rheader *h = rd_header(r);
  assert_string_equal(h->schema, "1.1.1-chakra.0.0.4");
  assert_int_equal(h->schema_major, 1);
  assert_int_equal(h->schema_minor, 1);
  assert_int_equal(h->schema_patch, 1);
  assert_int_equal(h->pid, 0);
  assert_null(h->time); /* the golden file normalises "time" to 0 */
  size_t len;
  char *text = slurp(ETR_GOLDEN, &len);
  const rd_rnode *n;
  int rc, count = 0;
  bool saw_kinds = false, saw_process = false;
  while ((rc = rd_next(r, &n)) == 1) {
    count++;
    assert_true(n->offset < len);
    assert_int_equal(text[n->offset], '{'); /* offsets point at the node's '{' */
    assert_int_equal(n->raw->kind, ETR_J_OBJECT);
    assert_string_equal(n->raw->v.obj.items[0].key, "id");
    assert_int_equal(n->missing_attrs, 0);
    assert_true(n->n_attrs >= 9);
    assert_string_equal(n->attrs[0].name, "rf_id");
    if (count == 1) { /* the thread node comes first */
      assert_int_equal(n->id, 2);
      assert_string_equal(n->name, "[pytorch|profiler|execution_trace|thread]");
      assert_int_equal(n->ctrl_deps, 1);
    }
    if (count == 2) {
      assert_int_equal(n->id, 3);
      assert_string_equal(n->name, "aten::empty");
      assert_int_equal(n->ctrl_deps, 2);
      assert_true(n->has_timing);
      assert_int_equal(n->tid, 1);
      assert_int_equal(n->seq_id, -1);
      assert_string_equal(
          n->op_schema,
          "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None) -> Tensor");
      const rd_jval *vals = rd_jobj_get(n->outputs, "values");
      assert_non_null(vals);
      assert_int_equal(vals->v.arr.n, 1);
      const rd_jval *t = &vals->v.arr.items[0];
      assert_int_equal(t->kind, ETR_J_ARRAY);
      assert_int_equal(t->v.arr.n, 6);
      assert_int_equal(t->v.arr.items[3].v.i, 6);
      assert_string_equal(t->v.arr.items[5].v.str.s, "cpu");
    }
    if (!strcmp(n->name, "misc::kinds")) {
      saw_kinds = true;
      const rd_jval *vals = rd_jobj_get(n->inputs, "values");
      assert_int_equal(vals->v.arr.items[0].kind, ETR_J_INT);
      assert_true(vals->v.arr.items[0].v.i == INT64_MIN);
      assert_true(vals->v.arr.items[1].v.i == INT64_MAX);
      assert_string_equal(vals->v.arr.items[2].v.str.s, "nan");
      assert_int_equal(vals->v.arr.items[5].kind, ETR_J_DOUBLE);
      assert_true(vals->v.arr.items[5].v.d == 0.5);
      const rd_jval *s = &vals->v.arr.items[6];
      assert_int_equal(s->kind, ETR_J_STRING);
      assert_non_null(strstr(s->v.str.s, "quote\" backslash\\ tab\t nl\n \x01 caf\xc3\xa9"));
      const rd_jval *z = &vals->v.arr.items[7]; /* "a\u0000b" keeps its length */
      assert_int_equal(z->v.str.len, 3);
      assert_memory_equal(z->v.str.s, "a\0b", 3);
    }
    if (n->id == 1) {
      saw_process = true;
      assert_string_equal(n->name, "[pytorch|profiler|execution_trace|process]");
      assert_int_equal(n->ctrl_deps, 1);
      assert_int_equal(n->scope, 7);
      assert_false(n->has_timing);
    }
  }
  assert_int_equal(rc, 0);
  assert_int_equal(count, 10);
  assert_true(saw_kinds);
  assert_true(saw_process);
  assert_int_equal(rd_finish(r), 0);
  assert_int_equal(rd_finish_ts(r), 0);
  const rd_jval *etr = rd_trailer(r, "etr");
  assert_non_null(etr);
  const rd_jval *ver = rd_jobj_get(etr, "version");
  assert_non_null(ver);
  assert_string_equal(ver->v.str.s, "0.1.0");
  const rd_jval *nw = rd_jobj_get(rd_jobj_get(etr, "stats"), "nodes_written");
  assert_non_null(nw);
  assert_int_equal(nw->v.i, 10);
  size_t nk;
  const char *const *keys = rd_top_keys(r, &nk);
  assert_int_equal(nk, 7);
  assert_string_equal(keys[0], "schema");
  assert_string_equal(keys[4], "nodes");
  assert_string_equal(keys[6], "etr");
  assert_int_equal(rd_offset(r), len);
  assert_string_equal(rd_error(r), "");
  rd_close(r);
  free(text);
}

static void test_value_kinds(void **state) {
  (void)state;
  const char *doc =
      "{\"schema\": \"1.0.3\", \"pid\": 7, \"time\": \"2024-01-02 03:04:05\", \"start_ts\": 9,\n"
      " \"nodes\": [{\"id\": 5, \"name\": \"k\\u00e9\\ud83d\\ude00\", \"ctrl_deps\": 1, "
      "\"inputs\": {\"values\": [null, true, false, 18446744073709551615, -1.5e300, 1e-3, "
      "-9223372036854775808, 99999999999999999999, {\"a\": [], \"b\": {}}, [[1], [2, [3]]]], "
      "\"shapes\": [[],[],[],[],[],[],[],[],[],[]], \"types\": [\"None\",\"Bool\",\"Bool\",\"Int\","
      "\"Double\",\"Double\",\"Int\",\"Int\",\"X\",\"Y\"]}, \"outputs\": {\"values\": [], "
      "\"shapes\": [], "
      "\"types\": []}, \"attrs\": [{\"name\": \"rf_id\", \"type\": \"uint64\", \"value\": 1}, "
      "{\"name\": \"fw_parent\", \"type\": \"uint64\", \"value\": 0}, {\"name\": \"seq_id\", "
      "\"type\": "
      "\"int64\", \"value\": -1}, {\"name\": \"scope\", \"type\": \"uint64\", \"value\": 0}, "
      "{\"name\": "
      "\"tid\", \"type\": \"uint64\", \"value\": 3}, {\"name\": \"fw_tid\", \"type\": \"uint64\", "
      "\"value\": 0}, {\"name\": \"op_schema\", \"type\": \"string\", \"value\": \"\"}, {\"name\": "
      "\"traceback\", \"type\": \"uint64\", \"value\": 4}]}],\n \"finish_ts\": 11, \"frames\": [], "
      "\"tracebacks\": [[0, 1]]}";
  const char *p = ct_tmp_path("kinds.json");
  ct_write_file(p, doc, strlen(doc));
  rd_reader *r = NULL;
  assert_int_equal(rd_open(p, NULL, &r), 0);
  assert_string_equal(rd_header(r)->time, "2024-01-02 03:04:05");
  assert_int_equal(rd_header(r)->schema_patch, 3);
  assert_int_equal(rd_header(r)->start_ts, 9);
  const rd_rnode *n;
  assert_int_equal(rd_next(r, &n), 1);
  assert_string_equal(n->name, "k\xc3\xa9\xf0\x9f\x98\x80");
  assert_int_equal(n->tid, 3);
  assert_true(n->has_traceback);
  assert_int_equal(n->traceback, 4);
  assert_int_equal(n->missing_attrs, (1u << 7) | (1u << 8)); /* no kernel_backend/file */
  const rd_jval *v = rd_jobj_get(n->inputs, "values");
  assert_int_equal(v->v.arr.n, 10);
  assert_int_equal(v->v.arr.items[0].kind, ETR_J_NULL);
  assert_int_equal(v->v.arr.items[1].kind, ETR_J_BOOL);
  assert_true(v->v.arr.items[1].v.b);
  assert_false(v->v.arr.items[2].v.b);
  assert_int_equal(v->v.arr.items[3].kind, ETR_J_UINT);
  assert_true(v->v.arr.items[3].v.u == UINT64_MAX);
  assert_int_equal(v->v.arr.items[4].kind, ETR_J_DOUBLE);
  assert_true(v->v.arr.items[4].v.d == -1.5e300);
  assert_true(v->v.arr.items[5].v.d == 1e-3);
  assert_int_equal(v->v.arr.items[6].kind, ETR_J_INT);
  assert_true(v->v.arr.items[6].v.i == INT64_MIN);
  assert_int_equal(v->v.arr.items[7].kind, ETR_J_DOUBLE); /* beyond uint64 */
  const rd_jval *o = &v->v.arr.items[8];
  assert_int_equal(o->kind, ETR_J_OBJECT);
  assert_int_equal(o->v.obj.n, 2);
  assert_string_equal(o->v.obj.items[1].key, "b");
  assert_int_equal(rd_jobj_get(o, "a")->kind, ETR_J_ARRAY);
  assert_null(rd_jobj_get(o, "c"));
  const rd_jval *nest = &v->v.arr.items[9];
  assert_int_equal(nest->v.arr.items[1].v.arr.items[1].v.arr.items[0].v.i, 3);
  assert_int_equal(rd_next(r, &n), 0);
  assert_int_equal(rd_next(r, &n), 0); /* stays at the end */
  assert_int_equal(rd_finish(r), 0);
  assert_int_equal(rd_finish_ts(r), 11);
  const rd_jval *tb = rd_trailer(r, "tracebacks");
  assert_non_null(tb);
  assert_int_equal(tb->v.arr.items[0].v.arr.items[1].v.i, 1);
  assert_null(rd_trailer(r, "nope"));
  rd_close(r);
}

static void gzip_file(const char *src, const char *dst, int members) {
  size_t len;
  char *b = slurp(src, &len);
  FILE *out = fopen(dst, "wb");
  assert_non_null(out);
  size_t cut = len / (size_t)members;
  for (int m = 0; m < members; m++) {
    size_t from = cut * (size_t)m, to = m == members - 1 ? len : cut * (size_t)(m + 1);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&zs, to - from);
    unsigned char *o = malloc(cap);
    zs.next_in = (unsigned char *)b + from;
    zs.avail_in = (uInt)(to - from);
    zs.next_out = o;
    zs.avail_out = (uInt)cap;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    fwrite(o, 1, cap - zs.avail_out, out);
    deflateEnd(&zs);
    free(o);
  }
  fclose(out);
  free(b);
}

static void test_gzip(void **state) {
  (void)state;
  result plain = read_all(ETR_GOLDEN, 0);
  assert_int_equal(plain.rc, 0);
  const char *p = ct_tmp_path("golden.gz"); /* no .json in the name: found by magic bytes */
  gzip_file(ETR_GOLDEN, p, 1);
  result gz = read_all(p, 0);
  assert_int_equal(gz.rc, 0);
  assert_int_equal(gz.nodes, plain.nodes);
  assert_int_equal(gz.id_sum, plain.id_sum);
  gzip_file(ETR_GOLDEN, p, 3); /* concatenated members */
  gz = read_all(p, 0);
  assert_int_equal(gz.rc, 0);
  assert_int_equal(gz.nodes, plain.nodes);
  /* a cut gzip stream is an error naming the file */
  size_t len;
  char *b = slurp(p, &len);
  const char *q = ct_tmp_path("cut.gz");
  ct_write_file(q, b, len - 30);
  result cut = read_all(q, 0);
  assert_error_names(&cut, q, 100000);
  /* corrupt compressed bytes */
  b[len / 2] ^= 0x55;
  b[len / 2 + 1] ^= 0x55;
  ct_write_file(q, b, len);
  cut = read_all(q, 0);
  assert_error_names(&cut, q, 100000);
  free(b);
}

/* zstd input (by magic bytes), in one frame or several; a cut or corrupt stream is an error
 * naming the file. */
static void test_zstd(void **state) {
  (void)state;
  result plain = read_all(ETR_GOLDEN, 0);
  assert_int_equal(plain.rc, 0);
  size_t len;
  char *src = slurp(ETR_GOLDEN, &len);
  size_t cap = ZSTD_compressBound(len) * 2 + 64;
  char *z = malloc(cap);
  assert_non_null(z);
  /* two frames: the first half, then the rest */
  size_t a = ZSTD_compress(z, cap, src, len / 2, 3);
  assert_false(ZSTD_isError(a));
  size_t b = ZSTD_compress(z + a, cap - a, src + len / 2, len - len / 2, 3);
  assert_false(ZSTD_isError(b));
  const char *p = ct_tmp_path("golden.zst");
  ct_write_file(p, z, a + b);
  result zr = read_all(p, 0);
  assert_int_equal(zr.rc, 0);
  assert_int_equal(zr.nodes, plain.nodes);
  assert_int_equal(zr.id_sum, plain.id_sum);
  const char *q = ct_tmp_path("cut.zst");
  ct_write_file(q, z, a + b - 20);
  result cut = read_all(q, 0);
  assert_error_names(&cut, q, 100000);
  assert_non_null(strstr(cut.err, "zstd"));
  z[a + b / 2] ^= 0x55;
  z[a + b / 2 + 1] ^= 0x55;
  ct_write_file(q, z, a + b);
  cut = read_all(q, 0);
  assert_error_names(&cut, q, 100000);
  free(z);
  free(src);
}

static void test_stdin_pipe(void **state) {
  (void)state;
  size_t len;
  char *b = slurp(ETR_GOLDEN, &len);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    /* dribble it in small pieces, so the reader sees short reads */
    for (size_t i = 0; i < len; i += 100) {
      size_t k = len - i < 100 ? len - i : 100;
      if (write(fds[1], b + i, k) != (ssize_t)k) _exit(1);
    }
    _exit(0);
  }
  close(fds[1]);
  int saved = dup(0);
  assert_true(saved >= 0);
  assert_int_equal(dup2(fds[0], 0), 0);
  close(fds[0]);
  result res = read_all("-", 0);
  dup2(saved, 0);
  close(saved);
  int st;
  waitpid(pid, &st, 0);
  assert_int_equal(res.rc, 0);
  assert_int_equal(res.nodes, 10);
  free(b);
  /* an error on stdin names it */
  assert_int_equal(pipe(fds), 0);
  assert_int_equal(write(fds[1], "{\"nodes\": [", 11), 11);
  close(fds[1]);
  saved = dup(0);
  dup2(fds[0], 0);
  close(fds[0]);
  res = read_all("-", 0);
  dup2(saved, 0);
  close(saved);
  assert_error_names(&res, "<stdin>", 11);
}

/* Every prefix of the golden file (step 1 over the header, then a prime step) is an error
 * with an offset inside the prefix; all complete nodes before the cut are handed over. */
static void test_truncated(void **state) {
  (void)state;
  size_t len;
  char *b = slurp(ETR_GOLDEN, &len);
  const char *p = ct_tmp_path("cut.json");
  size_t end = len;
  while (end > 0 && (b[end - 1] == '\n' || b[end - 1] == ' ')) end--;
  for (size_t cut = 0; cut < end; cut += cut < 200 ? 1 : 13) {
    ct_write_file(p, b, cut);
    result res = read_both(p);
    assert_error_names(&res, p, cut);
    assert_true(res.nodes <= 10);
  }
  free(b);
}

/* Bytes replaced anywhere: either still valid JSON, or an error with an offset in the
 * file. Never a crash (the sanitizer builds run this too). */
static void test_mangled(void **state) {
  (void)state;
  size_t len;
  char *orig = slurp(ETR_GOLDEN, &len);
  char *b = malloc(len);
  const char *p = ct_tmp_path("mangled.json");
  static const char subst[] = {'{',  '}',  '[',        ']',        '"', ',', ':', 'x',
                               '\0', '\\', (char)0xff, (char)0xc3, '9', '-', ' '};
  size_t errors = 0, runs = 0;
  for (size_t pos = 0; pos < len; pos += 29) {
    for (size_t k = 0; k < sizeof subst; k += (pos % 3) + 1) {
      memcpy(b, orig, len);
      if (b[pos] == subst[k]) continue;
      b[pos] = subst[k];
      ct_write_file(p, b, len);
      result res = read_both(p);
      runs++;
      if (res.rc < 0) {
        errors++;
        assert_error_names(&res, p, len);
      }
    }
  }
  assert_true(runs > 500);
  assert_true(errors > runs / 3);
  /* an exact position: a stray letter where a value should be */
  memcpy(b, orig, len);
  const char *at = strstr(orig, "\"ctrl_deps\":2");
  assert_non_null(at);
  size_t pos = (size_t)(at - orig) + 12;
  b[pos] = 'x';
  ct_write_file(p, b, len);
  result res = read_all(p, 0);
  assert_error_names(&res, p, pos + 1);
  const char *off = strstr(res.err, ": byte ");
  assert_true(strtoull(off + 7, NULL, 10) + 2 >= pos);
  free(b);
  free(orig);
}

static void expect_error(const char *doc, const char *reason) {
  const char *p = ct_tmp_path("bad.json");
  ct_write_file(p, doc, strlen(doc));
  result res = read_all(p, 0);
  assert_error_names(&res, p, strlen(doc));
  if (!strstr(res.err, reason)) fail_msg("error \"%s\" lacks \"%s\"", res.err, reason);
}

/* A number cut by the end of the input is no value: "finish_ts": 1234 cut to 12 must not
 * read as 12 (yajl handed over the digits it had when the input ended). */
static void test_number_cut_at_end(void **state) {
  (void)state;
  static const char doc[] =
      "{\"schema\": \"1.1.1\", \"pid\": 7, \"time\": \"t\", "
      "\"start_ts\": 5, \"nodes\": [], \"finish_ts\": 12";
  const char *p = ct_tmp_path("cutnum.json");
  ct_write_file(p, doc, strlen(doc));
  for (int b = 0; b < 2; b++) {
    setenv("ETR_READER_BACKEND", b ? "yajl" : "hand", 1);
    rd_reader *r = NULL;
    assert_int_equal(rd_open(p, NULL, &r), 0);
    const rd_rnode *n;
    assert_int_equal(rd_next(r, &n), 0);
    assert_int_equal(rd_finish(r), ETR_EFORMAT);
    assert_int_equal(rd_finish_ts(r), -1);
    assert_non_null(strstr(rd_error(r), "end of input"));
    rd_close(r);
    /* the same in the header: cut right after "start_ts": 5 */
    ct_write_file(p, doc, (size_t)(strstr(doc, "5,") - doc) + 1);
    assert_true(rd_open(p, NULL, &r) < 0);
    assert_int_equal(rd_header(r)->start_ts, -1);
    rd_close(r);
    ct_write_file(p, doc, strlen(doc));
  }
  unsetenv("ETR_READER_BACKEND");
}

static void test_backends_agree(void **state) {
  (void)state;
  result r = read_both(ETR_GOLDEN);
  assert_int_equal(r.rc, 0);
  assert_int_equal(r.nodes, 10);
  /* odd but valid JSON: whitespace everywhere, escapes, exponents, nesting */
  const char *doc =
      " \n{ \"schema\" :\"1.1.1\" , \"nodes\" : [ { \"id\" : 2 , \"name\" : \"a\\\"\\\\\\/\\b\\f\\n"
      "\\r\\t\\u0041\\ud834\\udd1e\\udc00\" , \"x\" : [ 1e5 , -0 , 0.25E-2 , true , false , null , "
      "[ [ [ ] ] ] , { } ] } , {\"id\":3} ] , \"finish_ts\" : -7 } \t\n";
  const char *p = ct_tmp_path("odd.json");
  ct_write_file(p, doc, strlen(doc));
  r = read_both(p);
  assert_int_equal(r.rc, 0);
  assert_int_equal(r.nodes, 2);
  rd_reader *rd = NULL;
  assert_int_equal(rd_open(p, NULL, &rd), 0);
  const char *be = getenv("ETR_READER_BACKEND");
  assert_string_equal(rd_backend(rd), be && !strcmp(be, "yajl") ? "yajl" : "hand");
  const rd_rnode *n;
  assert_int_equal(rd_next(rd, &n), 1);
  /* a lone surrogate becomes U+FFFD in the hand parser ('?' in yajl) */
  const char *want = "a\"\\/\b\f\n\r\tA\xf0\x9d\x84\x9e";
  assert_memory_equal(n->name, want, strlen(want));
  if (!be || strcmp(be, "yajl")) assert_string_equal(n->name + strlen(want), "\xef\xbf\xbd");
  const rd_jval *x = rd_jobj_get(n->raw, "x");
  assert_true(x->v.arr.items[0].v.d == 1e5);
  assert_int_equal(x->v.arr.items[1].kind, ETR_J_INT);
  assert_true(x->v.arr.items[2].v.d == 0.25e-2);
  assert_int_equal(rd_next(rd, &n), 1);
  assert_int_equal(rd_next(rd, &n), 0);
  assert_int_equal(rd_finish(rd), 0);
  assert_int_equal(rd_finish_ts(rd), -7);
  rd_close(rd);
  /* invalid JSON both reject */
  static const char *const bad[] = {
      "{\"nodes\": [01]}", "{\"nodes\": [{\"a\": 1.}]}", "{\"nodes\": [{\"a\": -}]}",
      "{\"nodes\": [{\"a\": tru}]}", "{\"nodes\": [{\"a\": \"\\x\"}]}",
      "{\"nodes\": [{\"a\": \"\\u12g4\"}]}", "{\"nodes\": [{\"a\": \"\x01\"}]}",
      "{\"nodes\": [{\"a\" 1}]}", "{\"nodes\": [{1: 1}]}", "{\"nodes\": [{}],}",
      "{\"nodes\": [{},]}", "{\"nodes\": []", "{\"nodes\": [{\"a\": [1 2]}]}",
      "{\"nodes\": [{\"a\": 1e}]}", "{\"nodes\": [{\"a\": +1}]}",
      /* form feed and vertical tab are not JSON whitespace (yajl took them for some; found
       * by tests/fuzz/fuzz_reader) */
      "{\"nodes\": [{\"a\":\f1}]}", "{\"nodes\":\v[{\"a\": 1}]}", "{\f\"nodes\": []}",
      "{\"nodes\": [{\"a\": 1}]\v}",
      /* an unterminated string after the object (yajl took it for a token still coming) */
      "{\"nodes\": []}\n\"val", "{\"nodes\": []} \"", "{\"nodes\": []}x", "{\"nodes\": []}{}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ct_write_file(p, bad[i], strlen(bad[i]));
    r = read_both(p);
    if (r.rc >= 0) fail_msg("accepted: %s", bad[i]);
    assert_error_names(&r, p, strlen(bad[i]));
  }
  /* Invalid UTF-8 in a string (raw bytes a writer passed through, an encoded surrogate, an
   * overlong form, a lone surrogate escape) is not fatal: both backends read the file, warn,
   * and hand over U+FFFD in place of each bad sequence. */
  static const struct {
    const char *doc, *want;
  } bad_utf8[] = {
      {"{\"nodes\": [{\"a\": \"x\xc3\x28y\"}]}", "x\xef\xbf\xbd(y"},
      {"{\"nodes\": [{\"a\": \"\xf8\x88\x80\x80\x80\"}]}",
       "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
      {"{\"nodes\": [{\"a\": \"\xed\xa0\x80\"}]}", "\xef\xbf\xbd"},
      {"{\"nodes\": [{\"a\": \"\\udc00\"}]}", "\xef\xbf\xbd"},
      {"{\"nodes\": [{\"a\": \"\xc0\x80\"}]}", "\xef\xbf\xbd\xef\xbf\xbd"},
      {"{\"nodes\": [{\"\xff\": \"\xe0\x80\x80\"}]}", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
      /* a raw bad byte and a lone surrogate escape in one string: one warning from each
       * backend (the hand parser gave one for each kind; fuzz_reader) */
      {"{\"nodes\": [{\"a\": \"x\xff\\udc00y\"}]}", "x\xef\xbf\xbd\xef\xbf\xbdy"}};
  for (size_t i = 0; i < sizeof bad_utf8 / sizeof *bad_utf8; i++) {
    ct_write_file(p, bad_utf8[i].doc, strlen(bad_utf8[i].doc));
    r = read_both(p);
    if (r.rc < 0) fail_msg("rejected: %s (%s)", bad_utf8[i].doc, r.err);
    assert_int_equal(r.nodes, 1);
    assert_true(r.warnings >= 1);
    rd_reader *rd = NULL;
    assert_int_equal(rd_open(p, NULL, &rd), 0);
    const rd_rnode *node = NULL;
    assert_int_equal(rd_next(rd, &node), 1);
    const rd_jval *raw = node->raw;
    assert_int_equal(raw->kind, ETR_J_OBJECT);
    assert_int_equal(raw->v.obj.n, 1);
    const rd_jval *v = &raw->v.obj.items[0].val;
    assert_int_equal(v->kind, ETR_J_STRING);
    assert_string_equal(v->v.str.s, bad_utf8[i].want);
    assert_int_equal(v->v.str.len, strlen(bad_utf8[i].want));
    rd_close(rd);
  }
  /* deep nesting is refused, not a stack overflow */
  FILE *f = fopen(p, "wb");
  fputs("{\"nodes\": [{\"a\": ", f);
  for (int i = 0; i < 5000; i++) fputc('[', f);
  for (int i = 0; i < 5000; i++) fputc(']', f);
  fputs("}]}", f);
  fclose(f);
  /* (the hand parser recurses: it stops at a depth limit; yajl's builder does not recurse) */
  bool yajl = be && !strcmp(be, "yajl");
  setenv("ETR_READER_BACKEND", "hand", 1);
  r = read_all(p, 0);
  if (yajl)
    setenv("ETR_READER_BACKEND", "yajl", 1);
  else
    unsetenv("ETR_READER_BACKEND");
  assert_true(r.rc < 0);
  assert_non_null(strstr(r.err, "nesting too deep"));
}

/* Read path through the given backend ("hand" or "yajl"): its first node's name, id, tid
 * and the kind and value of its "x" member, or rc < 0. */
typedef struct first_node {
  int rc;
  char name[128];
  size_t name_len;
  int64_t id;
  uint64_t tid;
  rd_jval x;
} first_node;

static first_node read_first(const char *path, const char *backend) {
  first_node f;
  memset(&f, 0, sizeof f);
  setenv("ETR_READER_BACKEND", backend, 1);
  rd_reader *r = NULL;
  f.rc = rd_open(path, NULL, &r);
  const rd_rnode *n = NULL;
  if (f.rc == 0) f.rc = rd_next(r, &n) == 1 ? 0 : -1;
  if (f.rc == 0) {
    assert_true(n->name_len < sizeof f.name);
    memcpy(f.name, n->name, n->name_len + 1);
    f.name_len = n->name_len;
    f.id = n->id;
    f.tid = n->tid;
    const rd_jval *x = rd_jobj_get(n->raw, "x");
    if (x) f.x = *x;
    if (x && x->kind == ETR_J_STRING) f.x.v.str.s = NULL; /* not valid after close */
  }
  rd_close(r);
  unsetenv("ETR_READER_BACKEND");
  return f;
}

/* The hand parser's fast paths (strings scanned 16 bytes at a time, integers without a
 * per-digit check, empty containers without recursion, names matched by length) give what
 * the general ones, and yajl, give. */
static void test_fast_paths(void **state) {
  (void)state;
  const char *p = ct_tmp_path("fast.json");
  static const char *const backends[2] = {"hand", "yajl"};
  /* strings of every length around the 16-byte blocks, plain or with an escape or a
   * two-byte character at every position */
  for (int len = 0; len <= 40; len++) {
    for (int at = -1; at < len; at++) {
      for (int kind = 0; kind < 2; kind++) {
        if (at < 0 && kind) continue;
        char doc[320], want[64], text[128];
        size_t t = 0, w = 0;
        for (int i = 0; i < len; i++) {
          if (i == at && kind == 0) {
            memcpy(text + t, "\\n", 2), t += 2;
            want[w++] = '\n';
          } else if (i == at) {
            memcpy(text + t, "\xc3\xa9", 2), t += 2;
            memcpy(want + w, "\xc3\xa9", 2), w += 2;
          } else {
            text[t++] = want[w++] = (char)('a' + i % 26);
          }
        }
        text[t] = want[w] = '\0';
        snprintf(doc, sizeof doc, "{\"nodes\": [{\"id\": 3, \"name\": \"%s\", \"%s\": 1}]}", text,
                 text);
        ct_write_file(p, doc, strlen(doc));
        for (int b = 0; b < 2; b++) {
          first_node f = read_first(p, backends[b]);
          assert_int_equal(f.rc, 0);
          assert_int_equal(f.name_len, w);
          assert_memory_equal(f.name, want, w + 1);
          assert_int_equal(f.id, 3);
        }
      }
    }
  }
  /* integers around the 19-digit bound, and beyond uint64 */
  static const struct {
    const char *text;
    rd_jkind kind;
    uint64_t u; /* the value as uint64 (INT: two's complement) */
  } nums[] = {{"9999999999999999999", ETR_J_UINT, 9999999999999999999u},
              {"9223372036854775807", ETR_J_INT, 9223372036854775807u},
              {"9223372036854775808", ETR_J_UINT, 9223372036854775808u},
              {"-9223372036854775808", ETR_J_INT, 9223372036854775808u},
              {"-9223372036854775809", ETR_J_DOUBLE, 0},
              {"10000000000000000000", ETR_J_UINT, 10000000000000000000u},
              {"18446744073709551615", ETR_J_UINT, 18446744073709551615u},
              {"18446744073709551616", ETR_J_DOUBLE, 0},
              {"99999999999999999999", ETR_J_DOUBLE, 0},
              {"123456789012345678901", ETR_J_DOUBLE, 0},
              {"0", ETR_J_INT, 0},
              {"7", ETR_J_INT, 7},
              {"70", ETR_J_INT, 70},
              {"7.5", ETR_J_DOUBLE, 0},
              {"7e2", ETR_J_DOUBLE, 0},
              {"7E2", ETR_J_DOUBLE, 0},
              {"-0", ETR_J_INT, 0},
              {"-12", ETR_J_INT, (uint64_t)-12}};
  for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
    char doc[160];
    snprintf(doc, sizeof doc, "{\"nodes\": [{\"id\": 3, \"x\": %s}]}", nums[i].text);
    ct_write_file(p, doc, strlen(doc));
    for (int b = 0; b < 2; b++) {
      first_node f = read_first(p, backends[b]);
      assert_int_equal(f.rc, 0);
      if (f.x.kind != nums[i].kind)
        fail_msg("%s: %s: kind %d", backends[b], nums[i].text, f.x.kind);
      if (nums[i].kind == ETR_J_DOUBLE)
        assert_true(f.x.v.d == strtod(nums[i].text, NULL));
      else
        assert_true(f.x.v.u == nums[i].u);
    }
  }
  /* names holding a NUL (a \u0000 escape) compare as C strings, as commands compare them */
  const char *nul_doc =
      "{\"nodes\": [{\"id\\u0000x\": 5, \"name\": \"n\", \"attrs\": [{\"name\": \"tid\\u0000y\", "
      "\"type\": \"uint64\", \"value\": 9}]}]}";
  ct_write_file(p, nul_doc, strlen(nul_doc));
  for (int b = 0; b < 2; b++) {
    first_node f = read_first(p, backends[b]);
    assert_int_equal(f.rc, 0);
    assert_int_equal(f.id, 5);
    assert_int_equal(f.tid, 9);
  }
  /* empty containers count toward the nesting limit like the others */
  for (int k = 1022; k <= 1024; k++) {
    for (int obj = 0; obj < 2; obj++) {
      FILE *fp = fopen(p, "wb");
      assert_non_null(fp);
      fputs("{\"nodes\": [{\"a\": ", fp);
      for (int i = 0; i < k - 1; i++) fputc('[', fp);
      fputs(obj ? "{}" : "[]", fp);
      for (int i = 0; i < k - 1; i++) fputc(']', fp);
      fputs("}]}", fp);
      fclose(fp);
      first_node f = read_first(p, "hand");
      if (k < 1024)
        assert_int_equal(f.rc, 0);
      else
        assert_true(f.rc < 0);
    }
  }
}

static void test_shape_errors(void **state) {
  (void)state;
  expect_error("", "end of input");
  expect_error("[1, 2]", "not a JSON object");
  expect_error("{\"schema\": \"1.1.1\", \"nodes\": {}}", "\"nodes\" is not an array");
  expect_error("{\"schema\": \"1.1.1\", \"nodes\": [1]}", "not an object");
  expect_error("{\"schema\": \"1.1.1\"}", "no \"nodes\"");
  expect_error("{\"nodes\": [], \"nodes\": []}", "twice");
  expect_error("{\"nodes\": []} {}", "invalid JSON");
  expect_error("{\"nodes\": [{\"id\": 1,}]}", "invalid JSON");
  /* a node larger than max_node_bytes */
  const char *doc =
      "{\"nodes\": [{\"id\": 2, \"name\": \"0123456789012345678901234567890123456789\"}]}";
  const char *p = ct_tmp_path("big.json");
  ct_write_file(p, doc, strlen(doc));
  result res = read_all(p, 32);
  assert_error_names(&res, p, 20);
  assert_non_null(strstr(res.err, "node larger than"));
  /* reading a directory, a missing file */
  res = read_all(ct_tmpdir(), 0);
  assert_true(res.rc < 0);
  assert_non_null(strstr(res.err, ct_tmpdir()));
  res = read_all(ct_tmp_path("does-not-exist.json"), 0);
  assert_int_equal(res.rc, ETR_EOPEN);
  assert_non_null(strstr(res.err, "does-not-exist.json: byte 0: cannot open"));
}

static void test_warnings(void **state) {
  (void)state;
  const char *doc =
      "{\"schema\": \"1.1.1-chakra.0.0.4\", \"pid\": 1, \"time\": \"x\", \"start_ts\": 0, "
      "\"nodes\": [{\"id\": 2, \"name\": \"a\", \"ctrl_deps\": 1, \"inputs\": {\"values\": [1, 2], "
      "\"shapes\": [[], []], \"types\": [\"Int\", \"Int\"], \"strides\": [[]]}, \"outputs\": "
      "{\"values\": [], \"shapes\": [], \"types\": []}, \"attrs\": [{\"name\": \"rf_id\", "
      "\"type\": "
      "\"uint64\", \"value\": 0}]}], \"finish_ts\": 1}";
  const char *p = ct_tmp_path("warn.json");
  ct_write_file(p, doc, strlen(doc));
  result res = read_all(p, 0);
  assert_int_equal(res.rc, 0);
  assert_int_equal(res.nodes, 1);
  assert_int_equal(res.first_warning_node, 2);
  assert_int_equal(res.first_warning_off, (uint64_t)(strstr(doc, "{\"id\"") - doc));
  assert_non_null(strstr(res.first_warning, "\"strides\" has 1 entries, \"values\" 2"));
  assert_int_equal(res.warnings, 1 + 6); /* strides, then 6 missing base attrs */
}

/* Memory stays bounded by a node, not the file: a 24 MB trace read with a small footprint. */
static void test_bounded_memory(void **state) {
  (void)state;
  size_t len;
  char *b = slurp(ETR_GOLDEN, &len);
  const char *start = strstr(b, "  {\"id\":2");
  const char *stop = strstr(b, "  {\"id\":1,");
  assert_non_null(start);
  assert_non_null(stop);
  const char *p = ct_tmp_path("long.json");
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  fwrite(b, 1, (size_t)(start - b), f);
  size_t body = (size_t)(stop - start), reps = (24u << 20) / body;
  for (size_t i = 0; i < reps; i++) fwrite(start, 1, body, f);
  fputs(stop, f);
  fclose(f);
  result res = read_all(p, 0);
  assert_int_equal(res.rc, 0);
  assert_int_equal(res.nodes, reps * 9 + 1);
  if (res.max_memory > (4u << 20))
    fail_msg("reader held %llu bytes", (unsigned long long)res.max_memory);
  free(b);
}

/* Hostile shapes end fast in bounded memory (hand backend): a huge node is read in linear
 * time or refused, a huge table is skipped, and whitespace is never held. */
static const char *node_head = "{\"id\": 2, \"name\": \"";
static const char *node_tail =
    "\", \"ctrl_deps\": 1, \"inputs\": {\"values\": [], \"shapes\": [], \"types\": []}, "
    "\"outputs\": {\"values\": [], \"shapes\": [], \"types\": []}, \"attrs\": []}";

static void fill(FILE *f, int c, size_t n) {
  char buf[4096];
  memset(buf, c, sizeof buf);
  for (; n >= sizeof buf; n -= sizeof buf) fwrite(buf, 1, sizeof buf, f);
  fwrite(buf, 1, n, f);
}

typedef struct shape_read {
  int rc;
  size_t nodes, name_len;
  uint64_t redone, max_memory, size;
  bool skipped_tb, has_tb, has_etr;
  int64_t finish_ts;
  char err[600], warning[400];
} shape_read;

static void on_skip_warn(uint64_t off, int64_t id, const char *msg, void *user) {
  (void)off;
  (void)id;
  shape_read *s = user;
  if (strstr(msg, "skipped")) snprintf(s->warning, sizeof s->warning, "%s", msg);
}

static shape_read read_shape(const char *path, size_t limit) {
  shape_read s;
  memset(&s, 0, sizeof s);
  rd_options o = ETR_READER_OPTIONS_INIT;
  o.warn = on_skip_warn;
  o.user = &s;
  o.max_node_bytes = limit;
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  s.size = (uint64_t)st.st_size;
  rd_reader *r = NULL;
  int rc = rd_open(path, &o, &r);
  if (rc == 0) {
    const rd_rnode *n;
    while ((rc = rd_next(r, &n)) == 1) {
      s.nodes++;
      if (n->id == 2) s.name_len = n->name_len;
      uint64_t m = rd_memory(r);
      if (m > s.max_memory) s.max_memory = m;
    }
    if (rc == 0) rc = rd_finish(r);
  }
  s.rc = rc;
  if (r) {
    uint64_t m = rd_memory(r);
    if (m > s.max_memory) s.max_memory = m;
    s.redone = rd_redone(r);
    snprintf(s.err, sizeof s.err, "%s", rd_error(r));
    if (rc == 0) {
      s.skipped_tb = rd_skipped(r, "tracebacks");
      s.has_tb = rd_trailer(r, "tracebacks") != NULL;
      s.has_etr = rd_trailer(r, "etr") != NULL;
      s.finish_ts = rd_finish_ts(r);
    }
  }
  rd_close(r);
  return s;
}

static void test_hostile_shapes(void **state) {
  (void)state;
  const char *env = getenv("ETR_READER_BACKEND");
  char saved[16] = "";
  if (env) snprintf(saved, sizeof saved, "%s", env);
  setenv("ETR_READER_BACKEND", "hand", 1);
  const char *hdr = "{\"schema\": \"1.1.1-chakra.0.0.4\", \"pid\": 1, \"nodes\": [";

  /* a 6 MiB name: linear (each byte parsed at most ~3 times; it was once per 64 KiB read,
   * 48 times on average here), or a clear error under a smaller limit */
  const char *p = ct_tmp_path("bigname.json");
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  fputs(hdr, f);
  fputs(node_head, f);
  fill(f, 'a', 6u << 20);
  fputs(node_tail, f);
  fputs("], \"finish_ts\": 5}", f);
  fclose(f);
  shape_read s = read_shape(p, 8u << 20);
  assert_int_equal(s.rc, 0);
  assert_int_equal(s.name_len, 6u << 20);
  if (s.redone > 2 * s.size)
    fail_msg("%llu bytes parsed again for a %llu-byte file", (unsigned long long)s.redone,
             (unsigned long long)s.size);
  s = read_shape(p, 1u << 20);
  assert_true(s.rc < 0);
  assert_non_null(strstr(s.err, "needs more than 1 MiB"));
  if (s.max_memory > (4u << 20)) fail_msg("held %llu bytes", (unsigned long long)s.max_memory);
  /* the same through yajl, which lexes a token spanning its feeds again from its start at
   * each feed: the feeds double while one does (it lexed this name about 50 times over, the
   * square of its length in 64 KiB feeds: 40 MB of name 5.9 s, now 0.3 s) */
  setenv("ETR_READER_BACKEND", "yajl", 1);
  s = read_shape(p, 8u << 20);
  setenv("ETR_READER_BACKEND", "hand", 1);
  assert_int_equal(s.rc, 0);
  assert_int_equal(s.name_len, 6u << 20);
  if (s.redone > 2 * s.size)
    fail_msg("yajl: %llu bytes lexed again for a %llu-byte file", (unsigned long long)s.redone,
             (unsigned long long)s.size);

  /* a node of 1.5M tiny values: its tree, not its 3 MiB of text, is over a 16 MiB limit */
  p = ct_tmp_path("bigvalues.json");
  f = fopen(p, "wb");
  assert_non_null(f);
  fputs(hdr, f);
  fputs("{\"id\": 2, \"name\": \"x\", \"ctrl_deps\": 1, \"inputs\": {\"values\": [0", f);
  for (int i = 0; i < 1500000; i++) fputs(",0", f);
  fputs("], \"shapes\": [], \"types\": []}}], \"finish_ts\": 5}", f);
  fclose(f);
  s = read_shape(p, 16u << 20);
  assert_true(s.rc < 0);
  assert_non_null(strstr(s.err, "needs more than 16 MiB"));

  /* a traceback table of 4M entries (8 MiB of text, ~250 MB as a tree) is skipped, with a
   * warning, past the trailer's limit (8 times a node's: ETR_READER_TABLES_FACTOR); the key
   * after it is still read */
  p = ct_tmp_path("bigtable.json");
  f = fopen(p, "wb");
  assert_non_null(f);
  fputs(hdr, f);
  fputs(node_head, f);
  fputs("op", f);
  fputs(node_tail, f);
  fputs("], \"finish_ts\": 5, \"frames\": [], \"tracebacks\": [[0", f);
  for (int i = 0; i < 4 * 1024 * 1024; i++) fputs(",0", f);
  fputs("], [\"]]\\\"\"]], \"etr\": {\"version\": \"0.1.0\"}}", f);
  fclose(f);
  s = read_shape(p, 0);
  assert_int_equal(s.rc, 0);
  assert_true(s.skipped_tb);
  assert_false(s.has_tb);
  assert_true(s.has_etr);
  assert_non_null(strstr(s.warning, "\"tracebacks\" needs more than 128 MiB: skipped"));
  if (s.max_memory > (192u << 20)) fail_msg("held %llu bytes", (unsigned long long)s.max_memory);
  setenv("ETR_READER_BACKEND", "yajl", 1); /* the same through yajl */
  s = read_shape(p, 0);
  setenv("ETR_READER_BACKEND", "hand", 1);
  assert_int_equal(s.rc, 0);
  assert_true(s.skipped_tb);
  assert_false(s.has_tb);
  assert_true(s.has_etr);
  assert_non_null(strstr(s.warning, "\"tracebacks\" needs more than 128 MiB: skipped"));
  if (s.max_memory > (192u << 20)) fail_msg("held %llu bytes", (unsigned long long)s.max_memory);

  /* 24 MiB of whitespace before the first key, after a ',' between nodes, after a ':' and
   * before the closing '}': read in full with a 1 MiB limit, never held */
  p = ct_tmp_path("space.json");
  f = fopen(p, "wb");
  assert_non_null(f);
  fill(f, ' ', 6u << 20);
  fputs(hdr, f);
  fputs(node_head, f);
  fputs(node_tail, f);
  fputs(",", f);
  fill(f, '\n', 6u << 20);
  fputs("{\"id\": 3, \"name\": \"b\"}], \"finish_ts\":", f);
  fill(f, '\t', 6u << 20);
  fputs("7", f);
  fill(f, ' ', 6u << 20);
  fputs("}", f);
  fclose(f);
  s = read_shape(p, 1u << 20);
  assert_int_equal(s.rc, 0);
  assert_int_equal(s.nodes, 2);
  assert_int_equal(s.finish_ts, 7);
  if (s.max_memory > (3u << 20)) fail_msg("held %llu bytes", (unsigned long long)s.max_memory);
  if (s.redone > s.size / 8)
    fail_msg("%llu bytes parsed again for a %llu-byte file", (unsigned long long)s.redone,
             (unsigned long long)s.size);

  if (env)
    setenv("ETR_READER_BACKEND", saved, 1);
  else
    unsetenv("ETR_READER_BACKEND");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_golden),
      cmocka_unit_test(test_value_kinds),
      cmocka_unit_test(test_gzip),
      cmocka_unit_test(test_zstd),
      cmocka_unit_test(test_stdin_pipe),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_mangled),
      cmocka_unit_test(test_shape_errors),
      cmocka_unit_test(test_warnings),
      cmocka_unit_test(test_bounded_memory),
      cmocka_unit_test(test_hostile_shapes),
      cmocka_unit_test(test_backends_agree),
      cmocka_unit_test(test_number_cut_at_end),
      cmocka_unit_test(test_fast_paths),
  };
  return cmocka_run_group_tests(tests, ct_tmpdir_setup, ct_tmpdir_teardown);
}
