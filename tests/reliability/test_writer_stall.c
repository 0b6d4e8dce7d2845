/* A writer that cannot make progress on a regular file (a write(2) blocked on a hung NFS
 * server) must not block the host's threads. Recorders wait for room at most stall_ms after
 * the writer last finished a chunk; then the trace gives up as on a write error: recording
 * stops, the rest is counted as dropped, and the threads go on (docs/RELIABILITY.md).
 * Before 2026-11-27 they waited for room forever: only a pipe's stall was seen, by the
 * writer itself, which a blocked write(2) never returns to see.
 *
 * Linked with its own copy of src/observer/writer_thread.c compiled with ETR_TEST_HOOKS,
 * which calls etr__test_before_write where the writer is about to write: the test blocks
 * there as the kernel would. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <etr/etr.h>

extern void (*etr__test_before_write)(void);
extern size_t etr__trace_left_behind(void); /* (trace.c, internal) */

static atomic_int g_release;
static atomic_int g_blocked; /* the writer is inside the hook */

static void block_until_released(void) {
  atomic_store(&g_blocked, 1);
  while (!atomic_load(&g_release)) usleep(1000);
}

#define STALL_OPS 20000

static void *record_many(void *arg) {
  (void)arg;
  char s[200];
  memset(s, 'x', sizeof s - 1);
  s[sizeof s - 1] = '\0';
  for (int i = 0; i < STALL_OPS; i++) {
    etr_record r;
    etr_value in[1];
    etr_record_init(&r, "stall_op", ETR_SCOPE_FUNCTION);
    if (etr_record_is_active(&r) && etr_record_needs_inputs(&r)) {
      in[0] = etr_value_string(s);
      r.inputs = in;
      r.n_inputs = 1;
    }
    etr_record_begin(&r);
    etr_record_end(&r);
  }
  return NULL;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One case: a trace in a temp dir, opened with opt and enabled, its writer blocked in the
 * hook from its first write until g_release. */
typedef struct stall_case {
  char dir[32], path[64];
  etr_trace *tr;
} stall_case;

static void open_stuck(stall_case *c, const etr_trace_options *opt) {
  snprintf(c->dir, sizeof c->dir, "/tmp/etr-stall-XXXXXX");
  assert_non_null(mkdtemp(c->dir));
  snprintf(c->path, sizeof c->path, "%s/t.json", c->dir);
  c->tr = NULL;
  assert_int_equal(etr_trace_open(c->path, opt, &c->tr), 0);
  atomic_store(&g_release, 0);
  atomic_store(&g_blocked, 0);
  etr__test_before_write = block_until_released;
  assert_int_equal(etr_trace_enable(c->tr), 0);
}

static int close_stats(stall_case *c, etr_trace_stats *st) {
  memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
  return etr_trace_close_stats(c->tr, st);
}

static void remove_files(const stall_case *c) {
  char tables[80];
  snprintf(tables, sizeof tables, "%s.tables", c->path);
  unlink(c->path);
  unlink(tables);
  rmdir(c->dir);
}

static void test_recorders_go_on_when_the_writer_is_stuck(void **state) {
  (void)state;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.buffer_kb = 4;
  opt.max_buffers = 2;
  opt.stall_ms = 300;
  stall_case c;
  open_stuck(&c, &opt);
  double t0 = now_s();
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, record_many, NULL), 0);
  alarm(30); /* (a hang is a failure) */
  assert_int_equal(pthread_join(th, NULL), 0);
  double took = now_s() - t0;
  assert_true(atomic_load(&g_blocked)); /* the writer did block */
  assert_true(took >= 0.25);            /* the recorder waited about stall_ms */
  atomic_store(&g_release, 1);
  etr_trace_stats st;
  assert_int_equal(close_stats(&c, &st), ETR_EIO);
  alarm(0);
  etr__test_before_write = NULL;
  assert_int_equal(st.write_error, ETIMEDOUT);
  assert_true(st.nodes_dropped > 0);
  assert_true(st.nodes_written + st.nodes_dropped >= STALL_OPS);
  remove_files(&c);
}

/* Close, and so exit, must not hang on such a writer either: it waits while the writer
 * writes, and once it has written nothing for stall_ms it leaves it behind (the trace kept
 * for it) and returns ETR_EIO. Before, close joined the writer forever. When the write
 * returns, the writer ends and frees the trace; before 2026-11-27 it was never freed. */
static void test_close_leaves_a_stuck_writer_behind(void **state) {
  (void)state;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.stall_ms = 300;
  stall_case c;
  open_stuck(&c, &opt);
  for (int i = 0; i < 50; i++) {
    etr_record r;
    etr_record_init(&r, "before_close", ETR_SCOPE_FUNCTION);
    etr_record_begin(&r);
    etr_record_end(&r);
  }
  alarm(30); /* (a hang is a failure) */
  double t0 = now_s();
  etr_trace_stats st;
  assert_int_equal(close_stats(&c, &st), ETR_EIO);
  double took = now_s() - t0;
  alarm(0);
  assert_true(atomic_load(&g_blocked)); /* the writer was stuck when close gave up */
  assert_true(took >= 0.25);
  assert_int_equal(st.write_error, ETIMEDOUT);
  assert_int_equal(etr_trace_close(c.tr), ETR_ESTATE); /* closed: the handle says so */
  assert_int_equal(etr__trace_left_behind(), 1);
  etr_trace_stats again;
  again.struct_size = sizeof again;
  assert_int_equal(etr_trace_stats_get(c.tr, &again), 0); /* the stats at close */
  assert_int_equal(again.write_error, ETIMEDOUT);
  atomic_store(&g_release, 1); /* its write returns: the writer discards the rest and ends */
  for (int i = 0; i < 3000 && etr__trace_left_behind() != 0; i++) usleep(10000);
  assert_int_equal(etr__trace_left_behind(), 0);          /* and freed the trace */
  assert_int_equal(etr_trace_stats_get(c.tr, &again), 0); /* the handle still answers */
  assert_int_equal(again.write_error, ETIMEDOUT);
  assert_int_equal(etr_trace_close(c.tr), ETR_ESTATE);
  remove_files(&c);
}

/* A flush waiting for that writer when close begins is woken and returns ETR_ESTATE (close
 * wrote nothing more either); close still gives up after about stall_ms, and waits for the
 * flush to return before it hands the trace to the writer, which may free it. */
static atomic_int g_flush_rc = 1;

static void *flush_once(void *arg) {
  atomic_store(&g_flush_rc, etr_trace_flush(arg));
  return NULL;
}

static void test_flush_waiting_when_close_leaves_the_writer(void **state) {
  (void)state;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.stall_ms = 300;
  stall_case c;
  open_stuck(&c, &opt);
  etr_record r;
  etr_record_init(&r, "before_flush", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  alarm(30); /* (a hang is a failure) */
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, flush_once, c.tr), 0);
  while (!atomic_load(&g_blocked)) usleep(1000); /* the flush made the writer write */
  usleep(20000);
  assert_int_equal(atomic_load(&g_flush_rc), 1); /* (still waiting) */
  etr_trace_stats st;
  assert_int_equal(close_stats(&c, &st), ETR_EIO);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(atomic_load(&g_flush_rc), ETR_ESTATE);
  assert_int_equal(etr_trace_flush(c.tr), ETR_ESTATE);
  atomic_store(&g_release, 1);
  for (int i = 0; i < 3000 && etr__trace_left_behind() != 0; i++) usleep(10000);
  alarm(0);
  assert_int_equal(etr__trace_left_behind(), 0);
  etr__test_before_write = NULL;
  remove_files(&c);
}

/* A fatal signal while the writer cannot answer (here blocked before a write; in a crash,
 * perhaps on the allocator's lock the crashed thread holds): after its 3 s wait the handler
 * writes the process node and a short footer itself, so the file is a whole trace
 * (docs/API.md). Until 2026-11-28 it wrote nothing: the process node's text, made at open
 * for it, is about 690 bytes, and the 320 bytes kept for it took none (so the file ended
 * after its last node). In a child, which the signal ends. */
static void test_fatal_signal_while_the_writer_is_stuck(void **state) {
  (void)state;
  char path[] = "/tmp/etr-stall-fatal-XXXXXX.json";
  int fd = mkstemps(path, 5);
  assert_true(fd >= 0);
  close(fd);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
    o.fatal_signals = true;
    o.flush_ms = 10;
    etr_trace *t;
    if (etr_trace_open(path, &o, &t) != 0 || etr_trace_enable(t) != 0) _exit(3);
    for (int i = 0; i < 5; i++) {
      etr_record r;
      etr_record_init(&r, "before_the_stall", ETR_SCOPE_FUNCTION);
      etr_record_begin(&r);
      etr_record_end(&r);
    }
    if (etr_trace_flush(t) != 0) _exit(4);
    atomic_store(&g_release, 0); /* (the earlier tests' values, inherited) */
    atomic_store(&g_blocked, 0);
    etr__test_before_write = block_until_released; /* (never released in the child) */
    etr_record r;
    etr_record_init(&r, "lost_in_the_stall", ETR_SCOPE_FUNCTION);
    etr_record_begin(&r);
    etr_record_end(&r);
    while (!atomic_load(&g_blocked)) usleep(1000); /* (the timed flush reached the hook) */
    raise(SIGTERM);
    _exit(5);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGTERM) fail_msg("child status 0x%x", st);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  unlink(path);
  text[n] = '\0';
  assert_int_equal(strlen(text), n); /* (no NUL inside) */
  fprintf(stderr, "the file's end: %s\n", n > 300 ? text + n - 300 : text);
  assert_non_null(strstr(text, "before_the_stall"));
  assert_null(strstr(text, "lost_in_the_stall"));
  assert_non_null(strstr(text, "[pytorch|profiler|execution_trace|process]"));
  assert_non_null(strstr(text, "\"finish_ts\""));
  assert_non_null(strstr(text, "\"signal\": 15"));
  assert_true(n >= 3 && strcmp(text + n - 3, "}\n}") != 0);
  assert_true(n >= 2 && text[n - 2] == '}' && text[n - 1] == '\n');
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_recorders_go_on_when_the_writer_is_stuck),
      cmocka_unit_test(test_close_leaves_a_stuck_writer_behind),
      cmocka_unit_test(test_flush_waiting_when_close_leaves_the_writer),
      cmocka_unit_test(test_fatal_signal_while_the_writer_is_stuck),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
