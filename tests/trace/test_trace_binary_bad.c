/* tests/trace/test_trace_binary_bad.c — `etr convert` on logs that are not what a recorder
 * wrote whole, beyond a cut (test_trace_binary.c has cuts and flipped bytes):
 *  - a forged log that names many streams, each with a definition: refused as corrupt once
 *    the decoders' tables pass their bound (they once grew ~23 KiB a stream, unbounded);
 *  - memory that runs out while converting an intact log: exit 1, never a "cut short" log
 *    completed with exit 0 (it once lost half the events that way);
 *  - bytes after the trailer (two logs concatenated): said, exit 1, the first log's trace
 *    kept (they were once dropped without a word);
 *  - a damaged count in a traceback-tables record: the record is damage (a count outside
 *    the checksum once made convert invent empty tracebacks);
 *  - messages for an empty log, a cut inside the magic, a zeroed stretch in the middle
 *    against a zero-filled tail;
 *  - ETR_TRACE_RING_MB larger than memory: the error names the ring.
 * ETR_TOOL is the etr command, TRACE_HELPER the helper program. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
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

/* ---- helpers ---- */

static char g_dir[256];

static void path_in(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", g_dir, name);
}

/* Runs exe with args (argv[0] added), stdout and stderr into *out (NUL-terminated, the
 * caller frees), the address space limited to as_bytes when not 0 and the environment's
 * extra variables added; the exit status, or 128 + signal. */
static int run_captured(const char *exe, const char *const *args, size_t as_bytes,
                        const char *const *extra_env, char **out) {
  char log[300];
  path_in(log, sizeof log, "run.log");
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(120);
    dup2(fd, 1);
    dup2(fd, 2);
    if (as_bytes) {
      struct rlimit rl = {as_bytes, as_bytes};
      if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(121);
    }
    for (const char *const *e = extra_env; e && *e; e++) putenv((char *)*e);
    const char *argv[16];
    size_t n = 0;
    argv[n++] = exe;
    for (const char *const *a = args; *a && n < 15; a++) argv[n++] = *a;
    argv[n] = NULL;
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  size_t len;
  *out = tu_read_file(log, &len);
  assert_non_null(*out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int convert_captured(const char *in, const char *out_path, size_t as_bytes, char **out) {
  const char *args[] = {"convert", in, "-o", out_path, NULL};
  return run_captured(ETR_TOOL, args, as_bytes, NULL, out);
}

/* Ops with distinct names and tensors, a traceback on each (the log's tables records). */
static void record_ops(int rounds, int salt) {
  static int impl[64], stor[64];
  const int64_t sz[2] = {2, 3}, st[2] = {3, 1};
  char name[32];
  for (int i = 0; i < rounds; i++) {
    etr_tensor a = {
        &impl[(i + salt) % 64], &stor[(i + salt) % 64], 0, 6, 4, "float", "cpu", 2, sz, st};
    etr_value in[2] = {etr_value_tensor(&a), etr_value_int(i)};
    etr_record outer;
    etr_record_init(&outer, "## step ##", ETR_SCOPE_USER_SCOPE);
    etr_record_begin(&outer);
    snprintf(name, sizeof name, "aten::op%d_%d", salt, i % 50);
    tu_op(name, in, 2, in, 1);
    tu_op("aten::mul", in, 2, in, 1);
    etr_record_end(&outer);
  }
}

typedef struct worker {
  pthread_t th;
  pthread_barrier_t *all_in;
  int rounds, salt;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  record_ops(w->rounds, w->salt);
  pthread_barrier_wait(w->all_in); /* (alive together: a stream each) */
  return NULL;
}

/* A log of `threads` threads (each its own stream), `rounds` ops each. */
static void record_log_threads(const char *path, int threads, int rounds) {
  etr_trace_options o;
  etr_traceback_options tb;
  tu_traceback_options(&o, &tb);
  tb.pattern = "aten::*";
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(path, &o, &tr), 0);
  assert_int_equal(etr_trace_enable(tr), 0);
  record_ops(rounds, 0);
  pthread_barrier_t all_in;
  pthread_barrier_init(&all_in, NULL, (unsigned)threads);
  worker w[16];
  for (int i = 1; i < threads && i < 16; i++) {
    w[i] = (worker){0, &all_in, rounds, i};
    assert_int_equal(pthread_create(&w[i].th, NULL, worker_main, &w[i]), 0);
  }
  pthread_barrier_wait(&all_in);
  for (int i = 1; i < threads && i < 16; i++) pthread_join(w[i].th, NULL);
  pthread_barrier_destroy(&all_in);
  assert_int_equal(etr_trace_close(tr), 0);
}

static void record_log(const char *path, int rounds) { record_log_threads(path, 1, rounds); }

typedef struct rec_at {
  size_t off;
  uint32_t type, len;
} rec_at;

/* The records of a log (after its 80-byte header): up to max of them, their count. */
static size_t records(const uint8_t *d, size_t n, rec_at *out, size_t max) {
  size_t k = 0, o = 80;
  while (o + 8 <= n && k < max) {
    uint32_t t, l;
    memcpy(&t, d + o, 4);
    memcpy(&l, d + o + 4, 4);
    out[k++] = (rec_at){o, t, l};
    o += 8 + (((size_t)l + 7) & ~(size_t)7);
  }
  return k;
}

enum { REC_LAYOUT = 1, REC_TABLES = 4, REC_CEVENTS = 5 };

static uint8_t *read_all(const char *path, size_t *n) {
  uint8_t *d = (uint8_t *)tu_read_file(path, n);
  assert_non_null(d);
  return d;
}

/* ---- tests ---- */

static void test_many_streams_refused(void **state) {
  (void)state;
#if defined(TU_TSAN) || defined(TU_ASAN)
  skip(); /* (half a GiB of decoder tables before the refusal: too much under a sanitizer) */
#else
  char log[300], forged[300], out[300];
  path_in(log, sizeof log, "a.etr");
  path_in(forged, sizeof forged, "streams.etr");
  path_in(out, sizeof out, "streams.json");
  record_log(log, 4);
  size_t n;
  uint8_t *d = read_all(log, &n);
  rec_at r[4];
  assert_true(records(d, n, r, 4) >= 2);
  assert_int_equal(r[0].type, REC_LAYOUT);
  /* The header and layout, then one CEVENTS record per stream, each defining string slot 0
   * (a few bytes of file for a decoder's string table). */
  size_t keep = r[1].off;
  const uint32_t streams = 120000;
  const uint8_t def[] = {3, 0, 2, 0, 'x'}; /* DEF_STR, flags, body length, slot 0, "x" */
  const size_t body = 24 + sizeof def, one = 8 + ((body + 7) & ~(size_t)7);
  size_t total = keep + (size_t)streams * one;
  uint8_t *f = calloc(1, total);
  assert_non_null(f);
  memcpy(f, d, keep);
  for (uint32_t s = 0; s < streams; s++) {
    uint8_t *p = f + keep + (size_t)s * one;
    uint32_t type = REC_CEVENTS, len = (uint32_t)body;
    uint64_t tid = 1;
    memcpy(p, &type, 4);
    memcpy(p + 4, &len, 4);
    memcpy(p + 8, &s, 4); /* stream, reserved, tid, base_ns */
    memcpy(p + 16, &tid, 8);
    memcpy(p + 32, def, sizeof def);
  }
  tu_write_file(forged, f, total);
  free(f);
  free(d);
  char *text;
  int rc = convert_captured(forged, out, 0, &text);
  if (rc != 1 || !strstr(text, "more tables than any process")) fail_msg("exit %d: %s", rc, text);
  free(text);
#endif
}

static void test_out_of_memory_is_an_error(void **state) {
  (void)state;
#if defined(TU_TSAN) || defined(TU_ASAN)
  skip(); /* (a sanitizer's runtime does not run under a small address-space limit) */
#else
  char log[300], out[300];
  path_in(log, sizeof log, "tb.etr");
  path_in(out, sizeof out, "tb.json");
  record_log_threads(log, 8, 300);
  /* The smallest address space (in 256 KiB steps) in which the log converts whole... */
  size_t whole = 0;
  for (size_t as = 2u << 20; as <= (512u << 20); as += 256u << 10) {
    char *text;
    int rc = convert_captured(log, out, as, &text);
    bool ok = rc == 0 && strstr(text, " events -> ") != NULL;
    free(text);
    if (ok) {
      whole = as;
      break;
    }
  }
  if (!whole) skip(); /* (never converted under a limit: nothing to look at) */
  /* ...and below it, where memory runs out somewhere in the conversion: an error each time,
   * never a log taken for cut and completed with exit 0. */
  int failed = 0;
  for (size_t as = whole - (2u << 20); as < whole; as += 4u << 10) {
    char *text;
    int rc = convert_captured(log, out, as, &text);
    if (rc == 0 && !strstr(text, " events -> ")) fail_msg("limit %zu: exit 0 with: %s", as, text);
    if (rc == 0 && strstr(text, "cut short")) fail_msg("limit %zu: %s", as, text);
    if (rc != 0) failed++;
    free(text);
  }
  assert_true(failed > 0);
#endif
}

static void test_bytes_after_the_trailer(void **state) {
  (void)state;
  char log[300], both[300], out[300];
  path_in(log, sizeof log, "one.etr");
  path_in(both, sizeof both, "two.etr");
  path_in(out, sizeof out, "two.json");
  record_log(log, 3);
  size_t n;
  uint8_t *d = read_all(log, &n);
  uint8_t *two = malloc(2 * n);
  assert_non_null(two);
  memcpy(two, d, n);
  memcpy(two + n, d, n);
  tu_write_file(both, two, 2 * n);
  free(two);
  free(d);
  char *text;
  int rc = convert_captured(both, out, 0, &text);
  char want[96];
  snprintf(want, sizeof want, "%zu bytes follow the log's trailer (from byte %zu)", n, n);
  if (rc != 1 || !strstr(text, want)) fail_msg("exit %d: %s", rc, text);
  free(text);
  tu_assert_valid(ETR_TOOL, out); /* (the first log's trace) */
}

static void test_damaged_table_counts(void **state) {
  (void)state;
  char log[300], bad[300], out[300];
  path_in(log, sizeof log, "t.etr");
  path_in(bad, sizeof bad, "t-bad.etr");
  path_in(out, sizeof out, "t-bad.json");
  record_log(log, 6);
  size_t n;
  uint8_t *d = read_all(log, &n);
  rec_at r[64];
  size_t k = records(d, n, r, 64), t = 0;
  while (t < k && r[t].type != REC_TABLES) t++;
  assert_true(t < k);
  /* The tables record's header: n_frames, frames_len, n_tbs, tbs_len, crc (the counts are
   * outside the checksum). 1000 more tracebacks than its text holds, and the log cut after
   * that record: a cut log's footer is sized by the counts. */
  uint8_t *p = d + r[t].off + 8;
  uint32_t n_tbs;
  memcpy(&n_tbs, p + 8, 4);
  n_tbs += 1000;
  memcpy(p + 8, &n_tbs, 4);
  size_t cut = r[t].off + 8 + ((r[t].len + 7) & ~(size_t)7) + 16;
  tu_write_file(bad, d, cut < n ? cut : n);
  free(d);
  char *text;
  int rc = convert_captured(bad, out, 0, &text);
  if (rc != 0 || !strstr(text, "damaged traceback tables") || strstr(text, "1000 tracebacks") ||
      strstr(text, " lost; ") == NULL)
    fail_msg("exit %d: %s", rc, text);
  free(text);
  tu_assert_valid(ETR_TOOL, out);
  /* No traceback made up: the footer holds none of the record's (it was refused). */
  size_t len;
  char *json = tu_read_file(out, &len);
  assert_non_null(json);
  assert_null(strstr(json, "[],\n    [],\n    []"));
  free(json);
}

static void test_stop_messages(void **state) {
  (void)state;
  char log[300], x[300], out[300];
  path_in(log, sizeof log, "m.etr");
  path_in(out, sizeof out, "m.json");
  record_log(log, 3000);
  size_t n;
  uint8_t *d = read_all(log, &n);
  char *text;
  /* empty, and cut inside the magic */
  path_in(x, sizeof x, "empty.etr");
  tu_write_file(x, d, 0);
  assert_int_equal(convert_captured(x, out, 0, &text), 1);
  if (!strstr(text, "an empty log")) fail_msg("%s", text);
  free(text);
  path_in(x, sizeof x, "m4.etr");
  tu_write_file(x, d, 4);
  assert_int_equal(convert_captured(x, out, 0, &text), 1);
  if (!strstr(text, "ends inside its header (4 of 80 bytes)")) fail_msg("%s", text);
  free(text);
  /* zeros where a record starts: to the end (a tail), or followed by records (damage) */
  rec_at r[64];
  size_t k = records(d, n, r, 64);
  assert_true(k >= 5);
  size_t b = r[2].off, e = r[4].off;
  uint8_t *z = malloc(n + 4096);
  assert_non_null(z);
  memcpy(z, d, b);
  memset(z + b, 0, 4096);
  path_in(x, sizeof x, "ztail.etr");
  tu_write_file(x, z, b + 4096);
  assert_int_equal(convert_captured(x, out, 0, &text), 0);
  if (!strstr(text, "a zero-filled tail")) fail_msg("%s", text);
  free(text);
  memcpy(z, d, n);
  memset(z + b, 0, e - b);
  path_in(x, sizeof x, "zmid.etr");
  tu_write_file(x, z, n);
  assert_int_equal(convert_captured(x, out, 0, &text), 0);
  if (!strstr(text, "a zeroed stretch") || strstr(text, "tail")) fail_msg("%s", text);
  free(text);
  free(z);
  free(d);
}

static void test_ring_too_large_named(void **state) {
  (void)state;
#if defined(TU_TSAN) || defined(TU_ASAN)
  skip(); /* (a sanitizer's allocator aborts on a request this large) */
#else
  char trace[300], env_trace[340];
  path_in(trace, sizeof trace, "ring.json");
  snprintf(env_trace, sizeof env_trace, "ETR_TRACE=%s", trace);
  const char *env[] = {env_trace, "ETR_TRACE_RING_MB=4096", NULL};
  const char *args[] = {"env", NULL};
  char *text;
  /* (1 GiB of address space: the 4 GiB ring cannot be had, whatever the machine's memory) */
  int rc = run_captured(TRACE_HELPER, args, (size_t)1 << 30, env, &text);
  if (rc != 0 || !strstr(text, "ETR_TRACE_RING_MB=4096") || !strstr(text, "ring"))
    fail_msg("exit %d: %s", rc, text);
  free(text);
#endif
}

static int setup(void **state) {
  (void)state;
  tu_mkdtemp(g_dir, sizeof g_dir);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tu_rmdir(g_dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_many_streams_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_out_of_memory_is_an_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bytes_after_the_trailer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_table_counts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stop_messages, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ring_too_large_named, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
