/* Memory that runs out while threads record (a thread's buffer cannot be allocated: a
 * process under `ulimit -v`, 64 threads with 64 MiB buffers) must be said, reported and
 * leave a valid trace (docs/RELIABILITY.md, "Out of memory"): recording stops as after a
 * write error, the log says so once, close returns ETR_ENOMEM with write_error ENOMEM and
 * the losses in nodes_dropped, and the file passes `etr validate --strict`: no op without
 * its thread node, a placeholder for each op whose children were written and it was not.
 * Before 2026-11-27 the nodes were dropped silently, close returned 0, and a thread whose
 * thread node was lost had its later ops written naming it (thousands of missing parents).
 *
 * Linked with its own copy of src/observer/recorder.c compiled with ETR_TEST_HOOKS, which
 * asks etr__test_chunk_alloc_fails whenever a thread needs a buffer chunk: the test makes
 * it fail there, as malloc would. Also: buffer_kb beyond its range is refused. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <etr/etr.h>

#ifndef ETR_TOOL
#error "ETR_TOOL must name the etr command"
#endif

extern bool (*etr__test_chunk_alloc_fails)(void);

static _Thread_local int t_fail_next; /* chunk requests of this thread that fail next */
static atomic_int g_fail_next;        /* chunk requests of any thread that fail next */

static bool chunk_alloc_fails(void) {
  if (t_fail_next > 0) {
    t_fail_next--;
    return true;
  }
  int n = atomic_load(&g_fail_next);
  while (n > 0)
    if (atomic_compare_exchange_weak(&g_fail_next, &n, n - 1)) return true;
  return false;
}

static atomic_int g_oom_lines; /* log lines that say memory ran out */

static void count_log(etr_log_level level, const char *msg, void *user) {
  (void)level;
  (void)user;
  if (strstr(msg, "out of memory")) atomic_fetch_add(&g_oom_lines, 1);
}

static void op(const char *name) {
  etr_record r;
  etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
}

typedef struct oom_case {
  char dir[32], path[64];
  etr_trace *tr;
} oom_case;

static etr_trace *g_open; /* the case's trace until it is closed (a failed test: teardown) */

static int close_left_open(void **state) {
  (void)state;
  etr__test_chunk_alloc_fails = NULL;
  etr_set_log(NULL, NULL);
  if (g_open) etr_trace_close(g_open);
  g_open = NULL;
  return 0;
}

static void open_case(oom_case *c, const char *file) {
  snprintf(c->dir, sizeof c->dir, "/tmp/etr-oom-XXXXXX");
  assert_non_null(mkdtemp(c->dir));
  snprintf(c->path, sizeof c->path, "%s/%s", c->dir, file);
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.buffer_kb = 4; /* small chunks: a thread asks for new ones all the time */
  atomic_store(&g_oom_lines, 0);
  atomic_store(&g_fail_next, 0);
  etr_set_log(count_log, NULL);
  etr__test_chunk_alloc_fails = chunk_alloc_fails;
  c->tr = NULL;
  assert_int_equal(etr_trace_open(c->path, &opt, &c->tr), 0);
  g_open = c->tr;
  assert_int_equal(etr_trace_enable(c->tr), 0);
}

static int close_case(oom_case *c, etr_trace_stats *st) {
  memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
  int rc = etr_trace_close_stats(c->tr, st);
  g_open = NULL;
  etr__test_chunk_alloc_fails = NULL;
  etr_set_log(NULL, NULL);
  return rc;
}

/* `etr validate --strict --quiet path`: its exit status. */
static int validate(const char *path) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    execl(ETR_TOOL, ETR_TOOL, "validate", "--strict", "--quiet", path, (char *)NULL);
    _exit(127);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  size_t k;
  while ((k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += k;
    if (cap - len < 2) {
      buf = realloc(buf, cap *= 2);
      assert_non_null(buf);
    }
  }
  fclose(f);
  buf[len] = '\0';
  return buf;
}

static size_t count_of(const char *text, const char *needle) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p++) n++;
  return n;
}

static void remove_case(const oom_case *c) {
  unlink(c->path);
  rmdir(c->dir);
}

static void *worker(void *arg) {
  (void)arg;
  t_fail_next = 1; /* the thread's first chunk, which would hold its thread node */
  for (int i = 0; i < 500; i++) op("worker_op");
  return NULL;
}

/* A new thread cannot get the chunk for its thread node. Before, the node was dropped, its
 * later ops written naming it (validate: "parent N does not exist"), close returned 0. */
static void test_thread_node_lost(void **state) {
  (void)state;
  oom_case c;
  open_case(&c, "t.json");
  for (int i = 0; i < 50; i++) op("main_op");
  assert_int_equal(etr_trace_flush(c.tr), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, worker, NULL), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  int flushed = etr_trace_flush(c.tr);
  for (int i = 0; i < 50; i++) op("main_after");
  etr_trace_stats st;
  int closed = close_case(&c, &st);
  assert_int_equal(validate(c.path), 0);
  assert_int_equal(closed, ETR_ENOMEM);
  assert_int_equal(flushed, ETR_ENOMEM);
  assert_int_equal(st.write_error, ENOMEM);
  assert_true(st.nodes_dropped >= 1);
  assert_int_equal(atomic_load(&g_oom_lines), 1); /* said once */
  char *text = read_all(c.path);
  assert_int_equal(count_of(text, "\"main_op\""), 50);
  assert_int_equal(count_of(text, "\"worker_op\""), 0); /* (no thread node: none of its ops) */
  assert_non_null(strstr(text, "\"write_error\": 12")); /* the footer says why */
  free(text);
  remove_case(&c);
}

/* `etr convert IN -o OUT`: its exit status. */
static int convert(const char *in, const char *out) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1);
    execl(ETR_TOOL, ETR_TOOL, "convert", in, "-o", out, (char *)NULL);
    _exit(127);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* Memory runs out while an op is open whose children are in the file already: the op is
 * lost, and close writes a placeholder in its place (the binary log: etr convert does, from
 * the trailer's nodes_dropped). Before, close returned 0; and the converted log's children
 * named a parent it lacked. */
static void open_parent_lost(const char *file) {
  bool binary = strstr(file, ".etr") != NULL;
  oom_case c;
  open_case(&c, file);
  etr_record outer;
  etr_record_init(&outer, "outer", ETR_SCOPE_FUNCTION);
  etr_record_begin(&outer);
  for (int i = 0; i < 500; i++) op("inner"); /* several chunks */
  assert_int_equal(etr_trace_flush(c.tr), 0);
  atomic_store(&g_fail_next, 1);
  for (int i = 0; i < 500; i++) op("inner_late"); /* needs a new chunk */
  etr_record_end(&outer);
  assert_int_equal(atomic_load(&g_fail_next), 0);
  etr_trace_stats st;
  int closed = close_case(&c, &st);
  char json[96];
  snprintf(json, sizeof json, "%s.json", c.path);
  if (binary) assert_int_equal(convert(c.path, json), 0);
  const char *trace = binary ? json : c.path;
  assert_int_equal(validate(trace), 0);
  assert_int_equal(closed, ETR_ENOMEM);
  assert_int_equal(st.write_error, ENOMEM);
  assert_true(st.nodes_dropped >= 2); /* an inner_late and outer at least */
  assert_int_equal(atomic_load(&g_oom_lines), 1);
  char *text = read_all(trace);
  assert_int_equal(count_of(text, "\"inner\""), 500);
  assert_int_equal(count_of(text, "\"outer\""), 0);
  assert_int_equal(count_of(text, "unfinished]\""), 1); /* (repair names it its way) */
  free(text);
  if (binary) unlink(json);
  remove_case(&c);
}

static void test_open_parent_lost(void **state) {
  (void)state;
  open_parent_lost("t.json");
}

static void test_open_parent_lost_binary(void **state) {
  (void)state;
  open_parent_lost("t.etr");
}

static atomic_int g_write_lines; /* log lines that say a write failed */

static void count_log_writes(etr_log_level level, const char *msg, void *user) {
  count_log(level, msg, user);
  if (strstr(msg, "trace write failed")) atomic_fetch_add(&g_write_lines, 1);
}

/* Memory runs out, then the file cannot take what close writes (a file-size limit, as a
 * full disk): the write error is said and returned (ETR_EIO, write_error EFBIG), not hidden
 * behind the memory one, whose ETR_ENOMEM promises a finalized file. In a child (the limit
 * is the process's). Before, close returned ETR_ENOMEM with write_error ENOMEM, nothing
 * said the write failed, and the file had no end. */
static void test_write_error_after_memory_ran_out(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    oom_case c;
    open_case(&c, "t.json");
    etr_set_log(count_log_writes, NULL);
    for (int i = 0; i < 50; i++) op("before");
    if (etr_trace_flush(c.tr) != 0) _exit(10);
    char *text = read_all(c.path);
    size_t size = strlen(text);
    free(text);
    atomic_store(&g_fail_next, 1);
    for (int i = 0; i < 500; i++) op("lost"); /* memory runs out: recording stops */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {(rlim_t)size + 16, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(11);
    etr_trace_stats st;
    int closed = close_case(&c, &st);
    if (closed != ETR_EIO) _exit(12);
    if (st.write_error != EFBIG) _exit(13);
    if (atomic_load(&g_write_lines) != 1) _exit(14);
    remove_case(&c);
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg(
        "the child: status 0x%x (10-11 set-up, 12 close's code, 13 write_error, 14 "
        "the log)",
        status);
}

/* buffer_kb has the range of ETR_TRACE_BUFFER_KB, 1..65536 (0: the default). Before, any
 * value was taken: 0xffffffff asked 4 GiB a thread, and from 4194304 on the size in bytes
 * wrapped. */
static void test_buffer_kb_beyond_its_range_is_refused(void **state) {
  (void)state;
  static const uint32_t bad[] = {65537, 4194304, 4194305, 0xffffffffu};
  char dir[32], path[64];
  snprintf(dir, sizeof dir, "/tmp/etr-oom-XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/t.json", dir);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
    opt.buffer_kb = bad[i];
    etr_trace *t = NULL;
    assert_int_equal(etr_trace_open(path, &opt, &t), ETR_EINVAL);
    assert_null(t);
  }
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.buffer_kb = 65536;
  etr_trace *t = NULL;
  assert_int_equal(etr_trace_open(path, &opt, &t), 0);
  op("big_buffer");
  assert_int_equal(etr_trace_close(t), 0);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_thread_node_lost, close_left_open),
      cmocka_unit_test_teardown(test_open_parent_lost, close_left_open),
      cmocka_unit_test_teardown(test_open_parent_lost_binary, close_left_open),
      cmocka_unit_test(test_buffer_kb_beyond_its_range_is_refused),
      cmocka_unit_test(test_write_error_after_memory_ran_out),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
