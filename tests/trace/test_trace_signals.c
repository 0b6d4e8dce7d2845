/* tests/trace/test_trace_signals.c — signals belong to the host (docs/RELIABILITY.md):
 * fatal-signal finalization is opt-in, and when it is on, a host that installed its handler
 * first keeps that handler's flags and mask (Ctrl-C still interrupts a blocking read(2), as
 * CPython needs), and a host handler that leaves by siglongjmp does not stall recording. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace_util.h"

static atomic_int host_calls;
static sigjmp_buf jump_back;

static void host_count(int sig) {
  (void)sig;
  atomic_fetch_add(&host_calls, 1);
}

static void host_jump(int sig) {
  (void)sig;
  atomic_fetch_add(&host_calls, 1);
  siglongjmp(jump_back, 1);
}

/* Installs handler for SIGINT the way CPython does: no SA_RESTART; SIGUSR1 in the mask. */
static void host_install(void (*handler)(int), struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR1);
  assert_int_equal(sigaction(SIGINT, &sa, old), 0);
}

static void open_with_signals(tu_trace *t) {
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.fatal_signals = true;
  tu_open(t, &opt);
}

/* Ours wraps the host's handler with the host's own flags and mask. */
static void test_host_flags_and_mask_kept(void **state) {
  (void)state;
  struct sigaction old, cur;
  host_install(host_count, &old);
  tu_trace t;
  open_with_signals(&t);
  assert_int_equal(sigaction(SIGINT, NULL, &cur), 0);
  assert_true(cur.sa_flags & SA_SIGINFO); /* ours is installed */
  assert_false(cur.sa_flags & SA_RESTART);
  assert_true(sigismember(&cur.sa_mask, SIGUSR1));
  assert_false(sigismember(&cur.sa_mask, SIGTERM)); /* not a full mask */
  tu_close_ok(&t);
  tu_free(&t);
  /* Closing puts the host's handler back as it was. */
  assert_int_equal(sigaction(SIGINT, NULL, &cur), 0);
  assert_true(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == host_count);
  sigaction(SIGINT, &old, NULL);
}

typedef struct {
  pthread_t target;
  int wfd;
} poke;

/* Sends SIGINT to the blocked thread; 3 s later, if the read is still blocked (restarted),
 * unblocks it with a byte so the test fails instead of hanging. */
static void *poker(void *p) {
  poke *k = p;
  tu_sleep_us(100000);
  pthread_kill(k->target, SIGINT);
  tu_sleep_us(3000000);
  if (write(k->wfd, "x", 1) != 1) return NULL;
  return NULL;
}

static void test_ctrl_c_interrupts_read(void **state) {
  (void)state;
  struct sigaction old;
  host_install(host_count, &old);
  atomic_store(&host_calls, 0);
  tu_trace t;
  open_with_signals(&t);
  tu_op("before_ctrl_c", NULL, 0, NULL, 0);
  int p[2];
  assert_int_equal(pipe(p), 0);
  poke k = {pthread_self(), p[1]};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, poker, &k), 0);
  char c;
  ssize_t n = read(p[0], &c, 1);
  int err = errno;
  pthread_join(th, NULL);
  if (n != -1 || err != EINTR)
    fail_msg("read returned %zd (errno %d): SIGINT did not interrupt it", n, err);
  assert_int_equal(atomic_load(&host_calls), 1); /* the host's handler ran */
  tu_op("after_ctrl_c", NULL, 0, NULL, 0);       /* the program goes on and records */
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "after_ctrl_c"), 1);
  close(p[0]);
  close(p[1]);
  tu_free(&t);
  sigaction(SIGINT, &old, NULL);
}

/* The host's handler jumps out of ours: recording goes on, and a flush completes (the hold
 * on the finalized file expires), with no deadlock. alarm() turns a hang into a failure. */
static void test_host_handler_longjmp(void **state) {
  (void)state;
  struct sigaction old;
  host_install(host_jump, &old);
  atomic_store(&host_calls, 0);
  tu_trace t;
  open_with_signals(&t);
  tu_op("before_jump", NULL, 0, NULL, 0);
  alarm(30);
  if (sigsetjmp(jump_back, 1) == 0) {
    raise(SIGINT);
    fail_msg("the host's handler did not jump back");
  }
  assert_int_equal(atomic_load(&host_calls), 1);
  for (int i = 0; i < 1000; i++) tu_op("after_jump", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_flush(t.trace), 0); /* waits for the writer */
  size_t len;
  char *text = tu_read_file(t.path, &len);
  assert_non_null(text);
  assert_non_null(strstr(text, "after_jump")); /* on disk while the trace is open */
  free(text);
  alarm(0);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "after_jump"), 1000);
  tu_free(&t);
  sigaction(SIGINT, &old, NULL);
}

/* ETR_TRACE alone installs no handler; ETR_TRACE_SIGNALS=1 does. */
static void test_env_signals_opt_in(void **state) {
  (void)state;
  char dir[256], var[600];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(var, sizeof var, "ETR_TRACE=%s/t-%%p.json", dir);
  const char *args[] = {"sigquery", NULL};
  const char *env_off[] = {var, NULL};
  int st = tu_run(TRACE_HELPER, args, env_off, NULL);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("ETR_TRACE alone: SIGINT handler installed (status 0x%x)", st);
  const char *env_on[] = {var, "ETR_TRACE_SIGNALS=1", NULL};
  st = tu_run(TRACE_HELPER, args, env_on, NULL);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 5)
    fail_msg("ETR_TRACE_SIGNALS=1: no SIGINT handler (status 0x%x)", st);
  tu_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_host_flags_and_mask_kept, tu_cleanup),
      cmocka_unit_test_teardown(test_ctrl_c_interrupts_read, tu_cleanup),
      cmocka_unit_test_teardown(test_host_handler_longjmp, tu_cleanup),
      cmocka_unit_test(test_env_signals_opt_in),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
