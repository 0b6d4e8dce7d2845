/* tests/trace/test_trace_binary.c — the binary event log (ETR_TRACE=x.etr) and `etr convert`.
 *
 *  - the same recording to x.json and to y.etr: `etr convert y.etr` gives x.json byte for
 *    byte, but for the header's time and start_ts and the footer's finish_ts (tracebacks,
 *    hostile strings, a collective, a kernel, object deaths, a named thread included);
 *  - a log cut at any offset converts (completed as etr repair completes a cut trace) to a
 *    trace `etr validate --strict` accepts, and a longer cut never gives fewer nodes;
 *  - damaged logs: not a log, another format version, another event layout, flipped bytes:
 *    a clear error or a valid trace of what precedes the damage, never a crash;
 *  - the default output name, and the refusal to overwrite the input.
 * (kill -9 while writing a log: test_trace_durability.c.) ETR_TOOL is the etr command. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace_util.h"

#ifndef ETR_TOOL
#error "ETR_TOOL must name the etr command"
#endif
#ifndef TRACE_HELPER
#error "TRACE_HELPER must name the helper program"
#endif

/* ---- the recording ---- */

static void record_ops(int rounds) {
  static int impl[6], stor[4];
  const int64_t sz23[2] = {2, 3}, st23[2] = {3, 1}, sz3[1] = {3};
  etr_tensor a = {&impl[0], &stor[0], 0, 6, 4, "float", "cpu", 2, sz23, st23};
  etr_tensor b = {&impl[1], &stor[1], 0, 6, 4, "float", "cpu", 2, sz23, NULL};
  etr_tensor l = {&impl[2], &stor[2], 1, 3, 8, "long", "cuda:0", 1, sz3, NULL};
  etr_tensor und = {&impl[3], NULL, 0, 0, 0, NULL, NULL, 0, NULL, NULL};
  for (int i = 0; i < rounds; i++) {
    etr_record outer;
    etr_record_init(&outer, "## step ##", ETR_SCOPE_USER_SCOPE);
    etr_record_begin(&outer);
    etr_value size[2] = {etr_value_int(2), etr_value_int(i)};
    etr_value tens[2] = {etr_value_tensor(&l), etr_value_tensor(&und)};
    etr_value tup[2] = {etr_value_string("pg"), etr_value_list(tens, 2)};
    etr_value in[9] = {
        etr_value_tensor(&a),          etr_value_tensor(&b),
        etr_value_list(size, 2),       etr_value_double(NAN),
        etr_value_double(0.25),        etr_value_string("q\" bs\\ nl\n \x01 caf\xC3\xA9 bad\xFF"),
        etr_value_string_n("a\0b", 3), etr_value_object("Gen(erator)"),
        etr_value_tuple(tup, 2)};
    etr_value out[1] = {etr_value_tensor(&b)};
    etr_record r;
    etr_record_init(&r, "aten::add", ETR_SCOPE_FUNCTION);
    r.schema = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor";
    r.seq_nr = i;
    r.inputs = in;
    r.n_inputs = 9;
    etr_record_begin(&r);
    tu_op("aten::empty", NULL, 0, out, 1);
    r.outputs = out;
    r.n_outputs = 1;
    etr_record_end(&r);

    const int64_t splits[2] = {4, 2};
    etr_collective_info ci = ETR_COLLECTIVE_INFO_INIT;
    ci.name = "allreduce";
    ci.dtype = "Float";
    ci.in_msg_nelems = 6;
    ci.out_msg_nelems = 6;
    ci.in_split_sizes = splits;
    ci.n_in_splits = 2;
    ci.pg_name = "0";
    ci.pg_desc = "default_pg";
    ci.pg_size = 2;
    etr_record_init(&r, "record_param_comms", ETR_SCOPE_USER_SCOPE);
    r.inputs = in;
    r.n_inputs = 1;
    r.collective = &ci;
    etr_record_begin(&r);
    etr_record_end(&r);

    etr_kernel_info ki = ETR_KERNEL_INFO_INIT;
    ki.backend = "triton";
    ki.file = "/cache/x/triton_poi_fused_add_0.py";
    ki.grid[0] = 4;
    ki.stream = 0;
    etr_record_init(&r, "triton_poi_fused_add_0", ETR_SCOPE_FUNCTION);
    r.inputs = in;
    r.n_inputs = 2;
    r.kernel = &ki;
    etr_record_begin(&r);
    etr_record_end(&r);
    etr_record_end(&outer);
    if (i % 3 == 2) etr_tensor_died(&impl[1]);
  }
}

static void record_to(const char *path, int rounds, bool timing) {
  etr_trace_options o;
  etr_traceback_options o_tb;
  tu_traceback_options(&o, &o_tb);
  o.no_timing = !timing;
  o_tb.pattern = "aten::*";
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(path, &o, &tr), 0);
  assert_int_equal(etr_trace_enable(tr), 0);
  etr_thread_set_name("recorder \"main\"");
  record_ops(rounds);
  assert_int_equal(etr_trace_close(tr), 0);
}

/* ---- helpers ---- */

static int run_etr(const char *const *args) { return tu_etr(ETR_TOOL, args); }

/* The number after `"key": ` becomes 0 (times that differ between two recordings). */
static void zero_number(char *text, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  char *p = strstr(text, pat);
  assert_non_null(p);
  p += strlen(pat);
  char *e = p;
  while (*e == '-' || (*e >= '0' && *e <= '9')) e++;
  assert_true(e > p);
  *p = '0';
  memmove(p + 1, e, strlen(e) + 1);
}

static void zero_string(char *text, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": \"", key);
  char *p = strstr(text, pat);
  assert_non_null(p);
  p += strlen(pat);
  char *e = strchr(p, '"');
  assert_non_null(e);
  memmove(p, e, strlen(e) + 1);
}

/* rf_id values less the first one: the record-function counter is the process's, so a
 * second recording starts where the first ended. */
static char *rebase_rf_ids(char *t) {
  static const char key[] = "{\"name\": \"rf_id\", \"type\": \"uint64\", \"value\": ";
  size_t cap = strlen(t) + 1, n = 0;
  char *out = malloc(cap);
  assert_non_null(out);
  long long base = -1;
  const char *p = t;
  for (const char *k; (k = strstr(p, key)) != NULL;) {
    k += sizeof key - 1;
    memcpy(out + n, p, (size_t)(k - p));
    n += (size_t)(k - p);
    char *e;
    long long v = strtoll(k, &e, 10);
    if (base < 0 && v > 0) base = v;
    n += (size_t)snprintf(out + n, cap - n, "%lld", v > 0 ? v - base : v);
    p = e;
  }
  memcpy(out + n, p, strlen(p) + 1);
  free(t);
  return out;
}

static char *normalised(const char *path) {
  size_t n;
  char *t = tu_read_file(path, &n);
  assert_non_null(t);
  zero_string(t, "time");
  zero_number(t, "start_ts");
  zero_number(t, "finish_ts");
  return rebase_rf_ids(t);
}

/* convert in -> out; its exit status. */
static int convert(const char *in, const char *out) {
  const char *args[] = {"convert", in, "-o", out, NULL};
  return run_etr(args);
}

static void assert_valid(const char *path) { tu_assert_valid(ETR_TOOL, path); }

/* ---- tests ---- */

static void test_same_trace_as_json(void **state) {
  (void)state;
  char dir[256], js[300], bin[300], conv[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(js, sizeof js, "%s/a.json", dir);
  snprintf(bin, sizeof bin, "%s/b.etr", dir);
  snprintf(conv, sizeof conv, "%s/b.json", dir);
  for (int k = 0; k < 2; k++) /* one call site: the tracebacks are the same */
    record_to(k ? bin : js, 40, false);
  assert_int_equal(convert(bin, conv), 0);
  char *x = normalised(js), *y = normalised(conv);
  if (strcmp(x, y) != 0) {
    size_t i = 0;
    while (x[i] && x[i] == y[i]) i++;
    fail_msg("the converted trace differs at byte %zu: ...%.80s... vs ...%.80s...", i,
             x + (i > 40 ? i - 40 : 0), y + (i > 40 ? i - 40 : 0));
  }
  /* what the comparison relies on is there */
  assert_non_null(strstr(x, "\"tracebacks_unique\": "));
  assert_null(strstr(x, "\"tracebacks_unique\": 0"));
  assert_non_null(strstr(x, "test_trace_binary.c\", \"line\": "));
  assert_non_null(strstr(x, "\"utf8_replaced\": 40"));
  assert_non_null(strstr(x, "recorder \\\"main\\\""));
  /* the log is smaller than its JSON */
  struct stat sj, sb;
  assert_int_equal(stat(js, &sj), 0);
  assert_int_equal(stat(bin, &sb), 0);
  assert_true(sb.st_size < sj.st_size / 2);
  free(x);
  free(y);
  assert_valid(conv);
  tu_rmdir(dir);
}

/* A JSON written to a pipe or device goes through a temporary copy in $TMPDIR first: when that
 * cannot be written (a small TMPDIR; here a file-size limit), the error names the copy and
 * where it is, not "the output" (the pipe, which was fine). */
static void test_full_tmpdir_is_named(void **state) {
  (void)state;
  char dir[256], bin[300], err[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/run.etr", dir);
  snprintf(err, sizeof err, "%s/err.txt", dir);
  record_to(bin, 40, true);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct rlimit rl = {4096, 4096}; /* (the log's JSON is larger) */
    signal(SIGXFSZ, SIG_IGN);
    int o = open("/dev/null", O_WRONLY), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || setenv("TMPDIR", dir, 1) != 0 ||
        setrlimit(RLIMIT_FSIZE, &rl) != 0)
      _exit(99);
    execl(ETR_TOOL, "etr", "convert", bin, "-o", "-", (char *)NULL);
    _exit(98);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  char *text = tu_read_file(err, NULL);
  assert_non_null(text);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 1) fail_msg("status 0x%x: %s", st, text);
  char want[400];
  snprintf(want, sizeof want, "cannot write the temporary copy of the JSON in %s", dir);
  if (!strstr(text, want)) fail_msg("stderr does not say '%s': %s", want, text);
  free(text);
  tu_rmdir(dir);
}

static void test_default_output_and_input_kept(void **state) {
  (void)state;
  char dir[256], bin[300], js[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/run.etr", dir);
  snprintf(js, sizeof js, "%s/run.json", dir);
  record_to(bin, 3, true);
  const char *a1[] = {"convert", bin, NULL};
  assert_int_equal(run_etr(a1), 0);
  assert_valid(js);
  struct stat st;
  assert_int_equal(stat(js, &st), 0);
  mode_t mask = umask(0);
  umask(mask);
  assert_int_equal(st.st_mode & 0777, 0666 & ~mask); /* as created by open(2), not 0600 */
  /* never over the input (also through another name) */
  char link[300];
  snprintf(link, sizeof link, "%s/alias.json", dir);
  assert_int_equal(symlink(bin, link), 0);
  off_t size = 0;
  assert_int_equal(stat(bin, &st), 0);
  size = st.st_size;
  assert_int_equal(convert(bin, link), 1); /* (exit 1, as every refusal to overwrite an input) */
  assert_int_equal(stat(bin, &st), 0);
  assert_int_equal(st.st_size, size);
  /* gzip output */
  char gz[300];
  snprintf(gz, sizeof gz, "%s/run.json.gz", dir);
  assert_int_equal(convert(bin, gz), 0);
  assert_valid(gz);
  /* other commands name the format */
  const char *a2[] = {"summary", bin, NULL};
  assert_int_equal(run_etr(a2), 1);
  tu_rmdir(dir);
}

/* Nodes of the trace at path; *with_tb of them carry a traceback, and every traceback they
 * name has its frames (a log keeps its tables as it goes: a cut loses none of them). */
static size_t node_count_of(const char *path, size_t *with_tb) {
  tu_trace t;
  tu_load_path(&t, path);
  size_t n = tu_node_count(&t), k = 0;
  json_t *tbs = json_object_get(t.root, "tracebacks");
  for (size_t i = 0; i < n; i++) {
    json_t *a = tu_attr(json_array_get(t.nodes, i), "traceback");
    if (!a) continue;
    k++;
    json_t *tb = json_array_get(tbs, (size_t)json_integer_value(a));
    if (!json_is_array(tb) || json_array_size(tb) == 0)
      fail_msg("%s: node %zu names traceback %lld, which has no frames", path, i,
               (long long)json_integer_value(a));
  }
  *with_tb = k;
  tu_free(&t);
  return n;
}

static void test_cut_anywhere(void **state) {
  (void)state;
  char dir[256], bin[300], cut[300], out[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/full.etr", dir);
  snprintf(cut, sizeof cut, "%s/cut.etr", dir);
  snprintf(out, sizeof out, "%s/cut.json", dir);
  etr_trace_options o;
  etr_traceback_options o_tb;
  tu_traceback_options(&o, &o_tb);
  o.flush_kb = 4; /* many records */
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(bin, &o, &tr), 0);
  assert_int_equal(etr_trace_enable(tr), 0);
  record_ops(60);
  assert_int_equal(etr_trace_close(tr), 0);
  size_t len;
  char *full = tu_read_file(bin, &len);
  assert_non_null(full);
  assert_true(len > 20000);
  size_t prev = 0;
  unsigned seed = 12345;
  size_t offs[40];
  size_t n_offs = 0;
  offs[n_offs++] = 80;  /* the header alone */
  offs[n_offs++] = 100; /* inside the layout record */
  for (; n_offs < 38;) offs[n_offs++] = 80 + (size_t)(rand_r(&seed) % (len - 80));
  offs[n_offs++] = len - 1;
  offs[n_offs++] = len;
  for (size_t i = 0; i < n_offs; i++)
    for (size_t j = i + 1; j < n_offs; j++)
      if (offs[j] < offs[i]) {
        size_t t = offs[i];
        offs[i] = offs[j];
        offs[j] = t;
      }
  for (size_t i = 0; i < n_offs; i++) {
    tu_write_file(cut, full, offs[i]);
    unlink(out);
    int rc = convert(cut, out);
    if (rc != 0) fail_msg("etr convert of the log cut at %zu of %zu: status %d", offs[i], len, rc);
    assert_valid(out);
    size_t with_tb;
    size_t n = node_count_of(out, &with_tb);
    if (offs[i] > len / 3 && with_tb == 0) fail_msg("cut at %zu: no traceback kept", offs[i]);
    if (n < prev)
      fail_msg("cut at %zu: %zu nodes, fewer than a shorter cut's %zu", offs[i], n, prev);
    prev = n;
  }
  /* a cut inside the file header is an error, not a trace */
  tu_write_file(cut, full, 40);
  assert_int_equal(convert(cut, out), 1);
  free(full);
  tu_rmdir(dir);
}

static void test_damaged_logs(void **state) {
  (void)state;
  char dir[256], bin[300], bad[300], out[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/good.etr", dir);
  snprintf(bad, sizeof bad, "%s/bad.etr", dir);
  snprintf(out, sizeof out, "%s/bad.json", dir);
  record_to(bin, 10, true);
  size_t len;
  char *good = tu_read_file(bin, &len);
  assert_non_null(good);
  char *b = malloc(len);
  assert_non_null(b);

  /* not a log */
  tu_write_file(bad, "{\"schema\": \"1.1.1\"}", 20);
  assert_int_equal(convert(bad, out), 1);
  /* a later format version, and version 1 (full events only, before compact events) */
  assert_int_equal(good[8], 2);
  memcpy(b, good, len);
  b[8] = 3;
  tu_write_file(bad, b, len);
  assert_int_equal(convert(bad, out), 1);
  b[8] = 1;
  tu_write_file(bad, b, len);
  assert_int_equal(convert(bad, out), 1);
  /* another event layout */
  memcpy(b, good, len);
  b[80 + 8 + 8] ^= 1;
  tu_write_file(bad, b, len);
  assert_int_equal(convert(bad, out), 1);
  /* flipped bytes after the layout: a valid trace of what precedes the damage, or a clear
   * error; never a crash (a signal) */
  unsigned seed = 777;
  for (int i = 0; i < 60; i++) {
    memcpy(b, good, len);
    for (int k = 0; k < 1 + i % 4; k++) {
      size_t at = 200 + (size_t)rand_r(&seed) % (len - 200);
      b[at] = (char)(i % 2 ? rand_r(&seed) : 0xff);
    }
    tu_write_file(bad, b, len);
    unlink(out);
    const char *args[] = {"convert", bad, "-o", out, NULL};
    int st = tu_run(ETR_TOOL, args, NULL, NULL);
    if (!WIFEXITED(st)) fail_msg("mutation %d: etr convert died (status 0x%x)", i, st);
    /* Bytes changed inside an event (ids, counts) cannot be told from real ones (the log
     * has no checksums: a crash cuts it, it does not flip bits): the trace must be JSON. */
    if (WEXITSTATUS(st) == 0) {
      json_error_t je;
      json_t *root = json_load_file(out, JSON_ALLOW_NUL, &je);
      if (!root) fail_msg("mutation %d: the output is not JSON: %s", i, je.text);
      json_decref(root);
    }
  }
  free(b);
  free(good);
  tu_rmdir(dir);
}

/* An event naming a traceback index no log could give it: indices are made one by one in
 * the order of the log's events (docs/FORMAT.md), so an index past the next new one is
 * damaged data. The node is written without its traceback, and the output stays the size of
 * the log: the index once asked a cut log's footer for as many empty tracebacks (fuzz_convert
 * found an index that took 2 GiB; 2^22 here made a table of 4 million empty entries, 32 MiB). An
 * index that is the next new one keeps its empty traceback. */
static void test_traceback_index_past_the_tables(void **state) {
  (void)state;
  char dir[256], bin[300], out[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/t.etr", dir);
  snprintf(out, sizeof out, "%s/t.json", dir);
  /* the header and layout record of a log this build writes */
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(bin, NULL, &tr), 0);
  assert_int_equal(etr_trace_close(tr), 0);
  size_t len;
  char *log = tu_read_file(bin, &len);
  assert_non_null(log);
  uint32_t rtype, rlen;
  memcpy(&rtype, log + 80, 4);
  memcpy(&rlen, log + 84, 4);
  assert_int_equal(rtype, 1); /* the layout record follows the 80-byte header */
  size_t pre = 80 + 8 + ((rlen + 7u) & ~7u);
  assert_true(pre <= len);
  /* One compact-events record and no trailer (a log cut short): stream 0 of thread 1, its
   * thread node (id 2), then two ops in it: id 3 names traceback 2^22 (flag 64: an index
   * follows the parent), id 4 names traceback 0. Each op: uv id, zv (id - parent), uv index,
   * name "x" / "y" and schema "" written in the op, uv rf_id, zv seq -1, uv scope, no
   * inputs, no outputs. */
  static const uint8_t events[] = {
      /* header: u32 stream, u32 0, u64 tid, i64 clock base */
      0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      /* thread: type 2, flags 0, body 4: id 2, tid 1, os tid 7, name "t" */
      2, 0, 4, 2, 1, 7, 't',
      /* op 3: type 1, flags 64, body 16 */
      1, 64, 16, 3, 2, 0x80, 0x80, 0x80, 0x02, 0, 1, 'x', 0, 0, 1, 1, 0, 0, 0,
      /* op 4: type 1, flags 64, body 13 */
      1, 64, 13, 4, 4, 0, 0, 1, 'y', 0, 0, 2, 1, 0, 0, 0};
  uint8_t rec[8 + sizeof events + 8];
  uint32_t h[2] = {5, (uint32_t)sizeof events};
  memcpy(rec, h, 8);
  memcpy(rec + 8, events, sizeof events);
  size_t rec_len = 8 + ((sizeof events + 7u) & ~7u);
  memset(rec + 8 + sizeof events, 0, rec_len - 8 - sizeof events);
  FILE *f = fopen(bin, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(log, 1, pre, f), pre);
  assert_int_equal(fwrite(rec, 1, rec_len, f), rec_len);
  assert_int_equal(fclose(f), 0);
  free(log);

  assert_int_equal(convert(bin, out), 0);
  struct stat st;
  assert_int_equal(stat(out, &st), 0);
  if (st.st_size > 64 * 1024)
    fail_msg("%lld bytes of JSON from a log of 3 events", (long long)st.st_size);
  assert_valid(out);
  tu_trace t;
  memset(&t, 0, sizeof t);
  tu_load_path(&t, out);
  json_t *x = NULL, *y = NULL;
  for (size_t i = 0; i < json_array_size(t.nodes); i++) {
    json_t *n = json_array_get(t.nodes, i);
    const char *name = json_string_value(json_object_get(n, "name"));
    if (name && strcmp(name, "x") == 0) x = n;
    if (name && strcmp(name, "y") == 0) y = n;
  }
  assert_non_null(x);
  assert_non_null(y);
  assert_null(tu_attr(x, "traceback"));
  assert_int_equal(tu_attr_int(y, "traceback"), 0);
  json_t *tbs = json_object_get(t.root, "tracebacks");
  assert_int_equal(json_array_size(tbs), 1);
  assert_int_equal(json_array_size(json_array_get(tbs, 0)), 0);
  tu_free(&t);
  tu_rmdir(dir);
}

/* A flight recorder writing a binary log: the dump is a log etr convert makes a valid trace
 * of, the open op a placeholder. */
static void test_ring_as_binary_log(void **state) {
  (void)state;
  char dir[256], bin[300], out[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/ring.etr", dir);
  snprintf(out, sizeof out, "%s/ring.json", dir);
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.ring_mb = 1;
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(bin, &o, &tr), 0);
  assert_int_equal(etr_trace_enable(tr), 0);
  etr_record outer;
  etr_record_init(&outer, "ring::outer", ETR_SCOPE_USER_SCOPE);
  etr_record_begin(&outer);
  record_ops(1500); /* more than the ring holds */
  assert_int_equal(etr_trace_dump(tr), 0);
  tu_trace t;
  tu_convert_load(&t, ETR_TOOL, bin, out);
  assert_non_null(tu_find(&t, "[etr|ring|unfinished]"));
  assert_true(tu_stat(&t, "ring_dropped") > 0);
  tu_free(&t);
  etr_record_end(&outer);
  assert_int_equal(etr_trace_close(tr), 0);
  assert_int_equal(convert(bin, out), 0);
  assert_valid(out);
  tu_rmdir(dir);
}

/* A fatal signal while recording to a log: the writer finalizes it (a trailer that names the
 * signal); convert gives every op recorded before it, and completes the ops open then. */
static void test_fatal_signal(void **state) {
  (void)state;
  char dir[256], bin[300], out[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/sig.etr", dir);
  snprintf(out, sizeof out, "%s/sig.json", dir);
  const char *args[] = {"signal", bin, "ABRT", "default", NULL};
  int st = tu_run(TRACE_HELPER, args, NULL, NULL);
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  tu_trace t;
  tu_convert_load(&t, ETR_TOOL, bin, out);
  assert_int_equal(tu_count(&t, "before_signal"), 100);
  json_t *etr = json_object_get(t.root, "etr");
  assert_int_equal(json_integer_value(json_object_get(etr, "signal")), SIGABRT);
  tu_free(&t);
  /* a gzip binary log is refused, not written as JSON under its name */
  char gz[300];
  snprintf(gz, sizeof gz, "%s/x.etr.gz", dir);
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(gz, NULL, &tr), ETR_EINVAL);
  assert_int_equal(access(gz, F_OK), -1);
  tu_rmdir(dir);
}

/* A tensor the writer has to mend (a negative offset, a '(' in its dtype, invalid UTF-8 in
 * its device) written again and again, at the top level, in a list and as an output. The
 * writer keeps the texts of a tensor slot once made; each node must still count what was
 * mended in it. Live JSON, the converted binary log and a flight recorder's JSON (whose
 * events are kept whole, not by slot) must agree. */
static void record_mended(int rounds) {
  static int impl[1], stor[1];
  const int64_t sz[2] = {2, 3}, st[2] = {3, 1};
  etr_tensor x = {&impl[0],
                  &stor[0],
                  -3,
                  6,
                  4,
                  "fl(oat",
                  "cu\xFF"
                  "da",
                  2,
                  sz,
                  st};
  for (int i = 0; i < rounds; i++) {
    etr_value inner[1] = {etr_value_tensor(&x)};
    etr_value in[3] = {etr_value_tensor(&x), etr_value_int(i), etr_value_list(inner, 1)};
    etr_value out[1] = {etr_value_tensor(&x)};
    tu_op("mended", in, 3, out, 1);
  }
  /* Angle brackets that pair up are part of a dtype's name (PyTorch's complex dtypes), those
   * that do not are mended like the rest. */
  static int impl2[2], stor2[2];
  etr_tensor c = {&impl2[0], &stor2[0], 0, 6, 8, "c10::complex<float>", "cpu", 2, sz, st};
  etr_tensor u = {&impl2[1], &stor2[1], 0, 6, 8, "q>r<", "cpu", 2, sz, st};
  for (int i = 0; i < rounds; i++) {
    etr_value in[2] = {etr_value_tensor(&c), etr_value_tensor(&u)};
    tu_op("angles", in, 2, NULL, 0);
  }
}

static void test_tensor_texts_counted(void **state) {
  (void)state;
  enum { ROUNDS = 50 };
  char dir[256], path[3][300], conv[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path[0], sizeof path[0], "%s/live.json", dir);
  snprintf(path[1], sizeof path[1], "%s/log.etr", dir);
  snprintf(path[2], sizeof path[2], "%s/ring.json", dir);
  snprintf(conv, sizeof conv, "%s/log.json", dir);
  for (int k = 0; k < 3; k++) {
    etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
    o.ring_mb = k == 2 ? 4 : 0;
    etr_trace *tr = NULL;
    assert_int_equal(etr_trace_open(path[k], &o, &tr), 0);
    assert_int_equal(etr_trace_enable(tr), 0);
    record_mended(ROUNDS);
    assert_int_equal(etr_trace_close(tr), 0);
  }
  assert_int_equal(convert(path[1], conv), 0);
  const char *json[3] = {path[0], conv, path[2]};
  for (int k = 0; k < 3; k++) {
    tu_trace t;
    tu_load_path(&t, json[k]);
    assert_int_equal(tu_count(&t, "mended"), ROUNDS);
    /* three tensors a node, each with its offset and dtype mended and its device repaired;
     * and one dtype of each "angles" node */
    assert_int_equal(tu_stat(&t, "values_fixed"), 7 * ROUNDS);
    json_t *an = tu_find(&t, "angles");
    assert_non_null(an);
    assert_string_equal(json_string_value(tu_in(an, "inputs", "types", 0)),
                        "Tensor(c10::complex<float>)");
    assert_string_equal(json_string_value(tu_in(an, "inputs", "types", 1)), "Tensor(q_r_)");
    assert_int_equal(tu_stat(&t, "utf8_replaced"), 3 * ROUNDS);
    json_t *n = tu_find(&t, "mended");
    assert_non_null(n);
    json_t *v = tu_in(n, "inputs", "values", 0);
    assert_int_equal(json_integer_value(json_array_get(v, 2)), 0);
    assert_string_equal(json_string_value(json_array_get(v, 5)),
                        "cu\xEF\xBF\xBD"
                        "da");
    assert_string_equal(json_string_value(tu_in(n, "inputs", "types", 0)), "Tensor(fl_oat)");
    assert_string_equal(json_string_value(tu_in(n, "inputs", "types", 2)),
                        "GenericList[Tensor(fl_oat)]");
    assert_string_equal(json_string_value(tu_in(n, "outputs", "types", 0)), "Tensor(fl_oat)");
    char *a = json_dumps(tu_in(n, "inputs", "strides", 2), JSON_COMPACT);
    assert_string_equal(a, "[[3,1]]");
    free(a);
    tu_free(&t);
    tu_assert_valid(ETR_TOOL, json[k]);
  }
  tu_rmdir(dir);
}

/* A `.json.gz` trace is one gzip member per flush of the writer: a run long enough for many
 * flushes must read back whole, each member complete with its own gzip header. */
static void test_gzip_members(void **state) {
  (void)state;
  char dir[256], gz[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(gz, sizeof gz, "%s/long.json.gz", dir);
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.flush_kb = 64;
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(gz, &o, &tr), 0);
  assert_int_equal(etr_trace_enable(tr), 0);
  record_ops(200);
  etr_trace_stats st;
  assert_int_equal(etr_trace_close_stats(tr, &st), 0);
  size_t members = tu_gz_members(gz);
  if (members < 10) fail_msg("%zu gzip members in %s, expected one per 64 KiB flush", members, gz);
  size_t len = 0;
  char *text = tu_read_gz(gz, &len);
  assert_non_null(text);
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_ALLOW_NUL, &err);
  if (!root) fail_msg("%s does not parse: %s", gz, err.text);
  json_t *stats = json_object_get(json_object_get(root, "etr"), "stats");
  size_t nodes = json_array_size(json_object_get(root, "nodes"));
  assert_int_equal(nodes, json_integer_value(json_object_get(stats, "nodes_written")));
  assert_int_equal(nodes, st.nodes_written);
  assert_true(nodes > 1000);
  json_decref(root);
  free(text);
  assert_valid(gz);
  tu_rmdir(dir);
}

/* ---- damaged and hostile logs (findings 6: 2, 4, 6, 8) ---- */

/* `sh -c cmd` with extra environment env (NULL-terminated, or NULL); its exit status. */
static int run_sh(const char *cmd, const char *const *env) {
  const char *args[] = {"-c", cmd, NULL};
  int st = tu_run("/bin/sh", args, env, NULL);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Whether the file at path holds s. */
static bool file_has(const char *path, const char *s) {
  size_t n;
  char *t = tu_read_file(path, &n);
  assert_non_null(t);
  bool has = memmem(t, n, s, strlen(s)) != NULL;
  free(t);
  return has;
}

/* A flight recorder's dump writes full events, whose header says whether the name and the
 * schema need escaping. One damaged byte of a name (0x1f) once went into the JSON raw, the
 * bit taken from the file: invalid JSON, exit 0. Now it is escaped. */
static void test_ring_damaged_name_escaped(void **state) {
  (void)state;
  char dir[256], bin[300], bad[300], out[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/ring.etr", dir);
  snprintf(bad, sizeof bad, "%s/bad.etr", dir);
  snprintf(out, sizeof out, "%s/bad.json", dir);
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.ring_mb = 1;
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(bin, &o, &tr), 0);
  assert_int_equal(etr_trace_enable(tr), 0);
  for (int i = 0; i < 10; i++) {
    etr_record r;
    etr_record_init(&r, "aten::mm", ETR_SCOPE_FUNCTION);
    r.schema = "aten::mm(Tensor a) -> Tensor";
    etr_record_begin(&r);
    etr_record_end(&r);
  }
  assert_int_equal(etr_trace_close(tr), 0);
  size_t len;
  char *b = tu_read_file(bin, &len);
  assert_non_null(b);
  char *at = memmem(b, len, "aten::mm(Tensor", 15);
  assert_non_null(at);
  at[4] = 0x1f;
  tu_write_file(bad, b, len);
  free(b);
  assert_int_equal(convert(bad, out), 0);
  assert_valid(out);
  assert_true(file_has(out, "\"aten\\u001f:mm(Tensor a) -> Tensor\""));
  tu_rmdir(dir);
}

/* The header and layout record of a log (the first bytes of it up to its first events), and
 * its trailer record: a frame for events made up by a test. */
static void log_frame(const char *bin, char **head, size_t *head_n, char **trailer,
                      size_t *trailer_n) {
  size_t len;
  char *b = tu_read_file(bin, &len);
  assert_non_null(b);
  uint32_t t, l;
  memcpy(&t, b + 80, 4);
  memcpy(&l, b + 84, 4);
  assert_int_equal(t, 1);
  *head_n = 80 + 8 + ((l + 7u) & ~7u);
  *head = malloc(*head_n);
  assert_non_null(*head);
  memcpy(*head, b, *head_n);
  *trailer = NULL;
  for (size_t off = 80; off + 8 <= len;) {
    memcpy(&t, b + off, 4);
    memcpy(&l, b + off + 4, 4);
    size_t n = 8 + ((l + 7u) & ~7u);
    if (t == 3) {
      *trailer = malloc(n);
      assert_non_null(*trailer);
      memcpy(*trailer, b + off, n);
      *trailer_n = n;
    }
    off += n;
  }
  assert_non_null(*trailer);
  free(b);
}

typedef struct bytes {
  unsigned char *p;
  size_t n, cap;
} bytes;

static void put_bytes(bytes *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
}

static void put_byte(bytes *b, unsigned v) {
  unsigned char c = (unsigned char)v;
  put_bytes(b, &c, 1);
}

static void put_uv(bytes *b, uint64_t v) {
  do {
    put_byte(b, (unsigned)(v & 0x7f) | (v > 0x7f ? 0x80u : 0));
    v >>= 7;
  } while (v);
}

/* A compact event: type, flags, the body's length, the body. */
static void put_event(bytes *b, unsigned type, const bytes *body) {
  put_byte(b, type);
  put_byte(b, 0);
  put_uv(b, body->n);
  put_bytes(b, body->p, body->n);
}

/* A log of 34 KB whose one op lists 8192 two-byte references to a tensor of 1,579 bytes: it
 * once converted, exit 0, to a node of 20 MB that no etr command reads (and took ~200 MB).
 * The recorder never writes that much (its budget counts a reference as its tensor): the
 * event is damage, where the conversion stops; the trace is valid without it. */
static void test_tensor_references_bounded(void **state) {
  (void)state;
  char dir[256], bin[300], big[300], out[300], cmd[1400], err[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/good.etr", dir);
  snprintf(big, sizeof big, "%s/big.etr", dir);
  snprintf(out, sizeof out, "%s/big.json", dir);
  snprintf(err, sizeof err, "%s/report.txt", dir);
  record_to(bin, 1, false);
  char *head, *trailer;
  size_t head_n, trailer_n = 0;
  log_frame(bin, &head, &head_n, &trailer, &trailer_n);

  bytes evs = {0}, body = {0};
  put_uv(&body, 2); /* thread event: id 2, tid 1, OS tid 99, its name */
  put_uv(&body, 1);
  put_uv(&body, 99);
  put_bytes(&body, "thr", 3);
  put_event(&evs, 2, &body);
  body.n = 0;
  put_uv(&body, 0); /* tensor definition, slot 0: 64 dimensions, names of 255 bytes */
  const unsigned char th[5] = {6, 1, 64, 255, 255};
  put_bytes(&body, th, 5);
  const uint64_t ids[5] = {5, 6, 0, 1, 4};
  put_bytes(&body, ids, sizeof ids);
  for (int i = 0; i < 255; i++) put_byte(&body, 'f');
  for (int i = 0; i < 255; i++) put_byte(&body, 'c');
  for (int i = 0; i < 128; i++) {
    int64_t d = 123456789012;
    put_bytes(&body, &d, 8);
  }
  put_event(&evs, 4, &body);
  body.n = 0;
  put_uv(&body, 3); /* op 3 under the thread node, named "big" */
  put_uv(&body, 2);
  put_uv(&body, 0);
  put_uv(&body, 3);
  put_bytes(&body, "big", 3);
  for (int i = 0; i < 5; i++) put_uv(&body, 0); /* schema "", rf_id, seq, scope */
  put_uv(&body, 2);
  for (int k = 0; k < 2; k++) { /* two lists of 4096 references to slot 0 */
    put_byte(&body, 7);
    uint32_t count = 4096;
    put_bytes(&body, &count, 4);
    for (uint32_t i = 0; i < count; i++) {
      put_byte(&body, 11);
      put_byte(&body, 0);
    }
  }
  put_uv(&body, 0);
  put_event(&evs, 1, &body);

  bytes file = {0};
  put_bytes(&file, head, head_n);
  uint32_t rec[2] = {5, (uint32_t)(24 + evs.n)};
  put_bytes(&file, rec, 8);
  const uint32_t stream[2] = {0, 0};
  const int64_t tid_base[2] = {1, 0};
  put_bytes(&file, stream, 8);
  put_bytes(&file, tid_base, 16);
  put_bytes(&file, evs.p, evs.n);
  while (file.n % 8) put_byte(&file, 0);
  put_bytes(&file, trailer, trailer_n);
  tu_write_file(big, file.p, file.n);
  assert_true(file.n < 40000);

  snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s' >'%s' 2>&1", ETR_TOOL, big, out, err);
  assert_int_equal(run_sh(cmd, NULL), 0);
  assert_valid(out);
  struct stat st;
  assert_int_equal(stat(out, &st), 0);
  assert_true(st.st_size < (1 << 20));
  tu_trace t;
  tu_load_path(&t, out);
  assert_null(tu_find(&t, "big"));
  assert_non_null(tu_find(&t, "[pytorch|profiler|execution_trace|thread]"));
  tu_free(&t);
  if (!file_has(err, "values larger than the recorder writes"))
    fail_msg("convert does not say why it stopped");
  free(head);
  free(trailer);
  free(evs.p);
  free(body.p);
  free(file.p);
  tu_rmdir(dir);
}

/* A cut log is completed by etr repair; when that fails (here: a node over a reader limit
 * lowered to 1 MiB), the message named convert's hidden temporary file and every event
 * was lost (exit 1, nothing written). Now it names the log, and OUT holds the events as
 * converted (exit 1, and the command says so). */
static void test_cut_log_repair_fails(void **state) {
  (void)state;
  char dir[256], bin[300], cut[300], out[300], cmd[1400], err[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/run.etr", dir);
  snprintf(cut, sizeof cut, "%s/cut.etr", dir);
  snprintf(out, sizeof out, "%s/cut.json", dir);
  snprintf(err, sizeof err, "%s/report.txt", dir);
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(bin, NULL, &tr), 0);
  assert_int_equal(etr_trace_enable(tr), 0);
  static char text[8000];
  memset(text, 'a', sizeof text);
  etr_value in[120];
  for (int i = 0; i < 120; i++) in[i] = etr_value_string_n(text, sizeof text);
  tu_op("small::before", NULL, 0, NULL, 0);
  tu_op("big::strings", in, 120, in, 120); /* ~2 MB of JSON: within the recorder's budget */
  tu_op("small::after", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_close(tr), 0);
  size_t len;
  char *b = tu_read_file(bin, &len);
  assert_non_null(b);
  tu_write_file(cut, b, len - 64); /* (the trailer cut off) */
  free(b);

  snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s' >'%s' 2>&1", ETR_TOOL, cut, out, err);
  const char *env[] = {"ETR_READER_LIMIT_MB=1", NULL};
  assert_int_equal(run_sh(cmd, env), 1);
  size_t n;
  char *report = tu_read_file(err, &n);
  assert_non_null(report);
  if (strstr(report, ".etr-convert-") || !strstr(report, "cut.etr: byte") ||
      !strstr(report, "not completed"))
    fail_msg("the report names the temporary file, not the log: %s", report);
  free(report);
  json_error_t je;
  json_t *root = json_load_file(out, JSON_ALLOW_NUL, &je);
  if (!root) fail_msg("%s: not the events converted: %s", out, je.text);
  size_t nodes = json_array_size(json_object_get(root, "nodes"));
  assert_true(nodes >= 4); /* the thread node, the three ops */
  json_decref(root);
  tu_rmdir(dir);
}

/* A log compressed with gzip (or zstd) converts as it is, to the trace of the plain log;
 * other commands say it is a binary log and name etr convert, as for a plain one. Before:
 * "not an etr binary event log", and "the trace is not a JSON object". */
static void test_compressed_log(void **state) {
  (void)state;
  char dir[256], bin[300], out[300], outz[300], cmd[1400], err[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/run.etr", dir);
  snprintf(out, sizeof out, "%s/plain.json", dir);
  snprintf(outz, sizeof outz, "%s/gz.json", dir);
  snprintf(err, sizeof err, "%s/report.txt", dir);
  record_to(bin, 3, true);
  assert_int_equal(convert(bin, out), 0);
  snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s.gz'", bin, bin);
  assert_int_equal(run_sh(cmd, NULL), 0);
  char gz[310];
  snprintf(gz, sizeof gz, "%s.gz", bin);
  assert_int_equal(convert(gz, outz), 0);
  size_t n1, n2;
  char *a = tu_read_file(out, &n1), *z = tu_read_file(outz, &n2);
  assert_non_null(a);
  assert_non_null(z);
  if (n1 != n2 || memcmp(a, z, n1) != 0) fail_msg("the gzipped log gives another trace");
  free(a);
  free(z);
  snprintf(cmd, sizeof cmd, "'%s' validate '%s' >'%s' 2>&1", ETR_TOOL, gz, err);
  assert_int_equal(run_sh(cmd, NULL), 1);
  if (!file_has(err, "a binary event log") || !file_has(err, "etr convert"))
    fail_msg("validate of a gzipped log does not name etr convert");
  tu_rmdir(dir);
}

/* One flipped bit in the layout record of a log this very etr wrote: "written by etr 0.1.0:
 * convert it with that version" from etr 0.1.0. Now: the record is damaged (or the log is
 * from another build of the version), refused. */
static void test_damaged_layout_of_our_version(void **state) {
  (void)state;
  char dir[256], bin[300], bad[300], out[300], cmd[1400], err[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/run.etr", dir);
  snprintf(bad, sizeof bad, "%s/bad.etr", dir);
  snprintf(out, sizeof out, "%s/bad.json", dir);
  snprintf(err, sizeof err, "%s/report.txt", dir);
  record_to(bin, 1, true);
  size_t len;
  char *b = tu_read_file(bin, &len);
  assert_non_null(b);
  b[100] ^= 0x20;
  tu_write_file(bad, b, len);
  free(b);
  snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s' >'%s' 2>&1", ETR_TOOL, bad, out, err);
  assert_int_equal(run_sh(cmd, NULL), 1);
  if (file_has(err, "convert it with that version") || !file_has(err, "damaged") ||
      !file_has(err, "byte 100"))
    fail_msg("the message does not say the layout record is damaged");
  tu_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_same_trace_as_json),
      TU_TEST(test_default_output_and_input_kept),
      TU_TEST(test_full_tmpdir_is_named),
      TU_TEST(test_cut_anywhere),
      TU_TEST(test_damaged_logs),
      TU_TEST(test_traceback_index_past_the_tables),
      TU_TEST(test_ring_as_binary_log),
      TU_TEST(test_fatal_signal),
      TU_TEST(test_tensor_texts_counted),
      TU_TEST(test_gzip_members),
      TU_TEST(test_ring_damaged_name_escaped),
      TU_TEST(test_tensor_references_bounded),
      TU_TEST(test_cut_log_repair_fails),
      TU_TEST(test_compressed_log),
      TU_TEST(test_damaged_layout_of_our_version),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
