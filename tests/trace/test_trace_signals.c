/* tests/trace/test_trace_signals.c — signals belong to the host (docs/RELIABILITY.md):
 * fatal-signal finalization is opt-in, and when it is on, a host that installed its handler
 * first keeps that handler's flags and mask (Ctrl-C still interrupts a blocking read(2), as
 * CPython needs), and a host handler that leaves by siglongjmp does not stall recording. A
 * host may record from its own signal handlers while its threads record and exit. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
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
  long target_tid;
  int wfd;
  atomic_bool read_back; /* the target's read returned: no byte needed */
} poke;

/* Whether thread tid of this process is blocked in read(2) now (/proc's syscall file
 * starts with the number of the call it waits in; 0 is read on x86-64). Elsewhere, true:
 * only a fixed wait is left there. */
static bool blocked_in_read(long tid) {
#if defined(__x86_64__)
  char path[64], buf[64] = "";
  snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
  FILE *f = fopen(path, "r");
  if (!f) return true;
  bool in_read = fgets(buf, sizeof buf, f) && strncmp(buf, "0 ", 2) == 0;
  fclose(f);
  return in_read;
#else
  (void)tid;
  return true;
#endif
}

/* Sends SIGINT to the thread once it is blocked in read(2) (a loaded machine may take a
 * while to get it there: a signal before the read would not interrupt it); if the read is
 * still blocked (restarted) 3 s later, unblocks it with a byte so the test fails instead
 * of hanging. */
static void *poker(void *p) {
  poke *k = p;
  tu_sleep_us(100000);
  for (int i = 0; i < 5000 && !blocked_in_read(k->target_tid); i++) tu_sleep_us(1000);
  pthread_kill(k->target, SIGINT);
  for (int i = 0; i < 3000 && !atomic_load(&k->read_back); i++) tu_sleep_us(1000);
  if (!atomic_load(&k->read_back) && write(k->wfd, "x", 1) != 1) return NULL;
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
  poke k = {pthread_self(), (long)gettid(), p[1], false};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, poker, &k), 0);
  char c;
  ssize_t n = read(p[0], &c, 1);
  int err = errno;
  atomic_store(&k.read_back, true);
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

/* ---- a signal the host's handler resolves is not fatal ----
 *
 * etr calls the host's handler first and finalizes the file only when the handler gave the
 * signal back to the default action. Until 2026-11-27, every signal was finalized
 * first (a wait for the writer: ~5 ms) and the footer cut off again after: a GC write
 * barrier or a JIT's guard page that takes SIGSEGV by design ran 1000 times slower. The
 * trace is opened with ETR_FLUSH_NEVER, so that nothing but a finalization writes to the
 * file between the faults: the file must stay as it was, fault after fault. */

static char *gc_page;
static long gc_page_size;
static atomic_int gc_faults;

static void gc_on_segv(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  char *a = si->si_addr;
  if (a >= gc_page && a < gc_page + gc_page_size) { /* the barrier: make it writable */
    mprotect(gc_page, (size_t)gc_page_size, PROT_READ | PROT_WRITE);
    atomic_fetch_add(&gc_faults, 1);
    return;
  }
  signal(sig, SIG_DFL); /* a real crash: fault again and die */
}

/* Whether the file at path ends as it was: size bytes, no footer of a signal. */
static void assert_untouched(const char *path, size_t size, const char *when) {
  size_t len;
  char *text = tu_read_file(path, &len);
  assert_non_null(text);
  if (strstr(text, "\"signal\":") || len != size)
    fail_msg("%s: the file was written (%zu bytes, %zu before)%s", when, len, size,
             strstr(text, "\"signal\":") ? ", finalized at a signal" : "");
  free(text);
}

/* `faults` writes to gc_page, each a fault that the host's handler resolves (it makes the
 * page writable, and the loop protects it again), between two ops. The first fault was
 * finalized before the host's handler (etr could not know it resolves SIGSEGV); the flush
 * waits until the writer has reopened the file. From then on the host's handler runs first,
 * and nothing is written at a fault. */
static void gc_faults_cost_nothing(tu_trace *t, int faults) {
  size_t len = 0;
  for (int i = 0; i < faults; i++) {
    tu_op("gc_before", NULL, 0, NULL, 0);
    ((volatile char *)gc_page)[0] = (char)i;
    assert_int_equal(mprotect(gc_page, (size_t)gc_page_size, PROT_READ), 0);
    tu_op("gc_after", NULL, 0, NULL, 0);
    if (i == 0) {
      assert_int_equal(etr_trace_flush(t->trace), 0);
      char *text = tu_read_file(t->path, &len);
      assert_non_null(text);
      assert_null(strstr(text, "\"signal\":"));
      free(text);
      continue;
    }
    char when[64];
    snprintf(when, sizeof when, "after fault %d", i + 1);
    assert_untouched(t->path, len, when);
  }
}

static void test_gc_barrier_faults_not_finalized(void **state) {
  (void)state;
  enum { FAULTS = 50 };
  gc_page_size = sysconf(_SC_PAGESIZE);
  gc_page = mmap(NULL, (size_t)gc_page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(gc_page != MAP_FAILED);
  atomic_store(&gc_faults, 0);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = gc_on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGSEGV, &sa, &old), 0);
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.fatal_signals = true;
  opt.flush_ms = ETR_FLUSH_NEVER;
  tu_trace t;
  tu_open(&t, &opt);
  struct sigaction cur;
  assert_int_equal(sigaction(SIGSEGV, NULL, &cur), 0);
  assert_true(cur.sa_flags & SA_SIGINFO);
  assert_true(cur.sa_sigaction != gc_on_segv); /* ours wraps the host's */
  gc_faults_cost_nothing(&t, FAULTS);
  assert_int_equal(atomic_load(&gc_faults), FAULTS);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "gc_before"), FAULTS);
  assert_int_equal(tu_count(&t, "gc_after"), FAULTS);
  assert_null(json_object_get(json_object_get(t.root, "etr"), "signal"));
  tu_free(&t);
  sigaction(SIGSEGV, &old, NULL);
  munmap(gc_page, (size_t)gc_page_size);
}

/* A handler installed after etr's that chains to it (a crash reporter, libjsig): the faults
 * the GC barrier installed before resolves still cost nothing after the first. Before, etr
 * took the later handler, still installed when the barrier's returned, for a crash
 * handler's hand-over and finalized the file at every fault. */
static struct sigaction gc_chained_to;

static void later_chains(int sig, siginfo_t *si, void *uc) {
  gc_chained_to.sa_sigaction(sig, si, uc);
}

static void test_gc_barrier_faults_with_a_later_handler(void **state) {
  (void)state;
  enum { FAULTS = 20 };
  gc_page_size = sysconf(_SC_PAGESIZE);
  gc_page = mmap(NULL, (size_t)gc_page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(gc_page != MAP_FAILED);
  atomic_store(&gc_faults, 0);
  struct sigaction sa, old, ours;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = gc_on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGSEGV, &sa, &old), 0);
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.fatal_signals = true;
  opt.flush_ms = ETR_FLUSH_NEVER;
  tu_trace t;
  tu_open(&t, &opt);
  sa.sa_sigaction = later_chains; /* installed after etr's, chains to it */
  assert_int_equal(sigaction(SIGSEGV, &sa, &gc_chained_to), 0);
  assert_true(gc_chained_to.sa_flags & SA_SIGINFO);
  gc_faults_cost_nothing(&t, FAULTS);
  assert_int_equal(atomic_load(&gc_faults), FAULTS);
  assert_int_equal(sigaction(SIGSEGV, &gc_chained_to, &ours), 0); /* etr's back, then close */
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "gc_after"), FAULTS);
  tu_free(&t);
  sigaction(SIGSEGV, &old, NULL);
  munmap(gc_page, (size_t)gc_page_size);
}

/* CPython's SIGINT handler only sets a flag: the file is not finalized, recording goes on,
 * and close gives a valid trace with every op. */
static void test_sigint_flag_handler_not_finalized(void **state) {
  (void)state;
  struct sigaction old;
  host_install(host_count, &old);
  atomic_store(&host_calls, 0);
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.fatal_signals = true;
  opt.flush_ms = ETR_FLUSH_NEVER;
  tu_trace t;
  tu_open(&t, &opt);
  for (int i = 0; i < 10; i++) tu_op("before_int", NULL, 0, NULL, 0);
  assert_int_equal(raise(SIGINT), 0); /* finalized first: the handler is not known yet */
  assert_int_equal(atomic_load(&host_calls), 1);
  /* It returned: the writer reopens the file at the next node it writes. */
  for (int i = 0; i < 10; i++) tu_op("after_int", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  size_t len;
  char *text = tu_read_file(t.path, &len);
  assert_non_null(text);
  assert_null(strstr(text, "\"signal\":"));
  free(text);
  assert_int_equal(raise(SIGINT), 0);
  assert_int_equal(atomic_load(&host_calls), 2);
  assert_untouched(t.path, len, "after a second SIGINT");
  assert_int_equal(raise(SIGINT), 0);
  assert_int_equal(atomic_load(&host_calls), 3);
  assert_untouched(t.path, len, "after a third SIGINT");
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "before_int"), 10);
  assert_int_equal(tu_count(&t, "after_int"), 10);
  assert_null(json_object_get(json_object_get(t.root, "etr"), "signal"));
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

/* tu_run with the child's stderr in the file err (our own fd 2 redirected around it). */
static int run_err(const char *const *args, const char *const *env, const char *err) {
  int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  assert_true(saved >= 0);
  dup2(fd, 2);
  close(fd);
  int st = tu_run(TRACE_HELPER, args, env, NULL);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  return st;
}

/* The switch's values in any case ("TRUE", "Yes" turn it on); another value keeps it off
 * and says so on ETR_LOG (before, any value but 1/on/true/yes/all meant off, silently). */
static void test_env_signals_switch_values(void **state) {
  (void)state;
  char dir[256], var[600], err[700];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(var, sizeof var, "ETR_TRACE=%s/t-%%p.json", dir);
  snprintf(err, sizeof err, "%s/err.txt", dir);
  const char *args[] = {"sigquery", NULL};
  static const char *const on[] = {"ETR_TRACE_SIGNALS=TRUE", "ETR_TRACE_SIGNALS=Yes",
                                   "ETR_TRACE_SIGNALS=ON"};
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
    const char *env[] = {var, on[i], NULL};
    int st = tu_run(TRACE_HELPER, args, env, NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 5)
      fail_msg("%s: no SIGINT handler (status 0x%x)", on[i], st);
  }
  const char *env_bad[] = {var, "ETR_TRACE_SIGNALS=2", "ETR_LOG=1", NULL};
  int st = run_err(args, env_bad, err);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("ETR_TRACE_SIGNALS=2: SIGINT handler installed (status 0x%x)", st);
  size_t len;
  char *text = tu_read_file(err, &len);
  assert_non_null(text);
  if (!strstr(text, "ETR_TRACE_SIGNALS=2 unknown")) fail_msg("no warning on ETR_LOG: %s", text);
  free(text);
  unlink(err);
  tu_rmdir(dir);
}

/* The tasks of this process, as tids, into tids[0..max); returns how many. */
static int list_tasks(long *tids, int max) {
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.' && n < max) tids[n++] = atol(e->d_name);
  closedir(d);
  return n;
}

/* The blocked-signal mask of task tid, from /proc. */
static unsigned long long task_sigblk(long tid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  unsigned long long m = 0;
  bool found = false;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "SigBlk: %llx", &m) == 1) found = true;
  fclose(f);
  assert_true(found);
  return m;
}

/* The writer thread takes none of the host's signals (a process-directed SIGINT or SIGTERM
 * goes to a host thread, whose handler may expect to run there), and the thread that opened
 * the trace gets its own mask back. */
static void test_writer_blocks_signals(void **state) {
  (void)state;
  long before[64], after[64];
  int nb = list_tasks(before, 64);
  tu_trace t;
  tu_open(&t, NULL);
  int na = list_tasks(after, 64);
  long writer = 0;
  for (int i = 0; i < na; i++) {
    bool old = false;
    for (int j = 0; j < nb; j++) old |= after[i] == before[j];
    if (!old) writer = after[i];
  }
  assert_true(writer > 0);
  /* (read once the writer has run: glibc starts a thread with every signal blocked and sets
   * the creator's mask at its start) */
  tu_op("after_open", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  unsigned long long m = task_sigblk(writer);
  const int sigs[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGUSR1,
                      SIGUSR2, SIGALRM, SIGCHLD, SIGPIPE};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    if (!(m & (1ull << (sigs[i] - 1))))
      fail_msg("the writer does not block signal %d (SigBlk %llx)", sigs[i], m);
  sigset_t mine;
  assert_int_equal(pthread_sigmask(SIG_BLOCK, NULL, &mine), 0);
  assert_false(sigismember(&mine, SIGINT));
  assert_false(sigismember(&mine, SIGTERM));
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "after_open"), 1);
  tu_free(&t);
}

/* ---- records from a signal handler ----
 *
 * A host that records from a signal handler (a sampling profiler marking its samples as
 * ops) while its threads record, retire tensors and exit. The handler runs wherever the
 * signal lands, inside etr too: there it must not wait for a lock its own thread holds
 * (an id-map shard inside etr_tensor_died; the handler records the very tensor being
 * retired, so that its lookup goes to that shard) nor work on the thread's state while
 * thread exit tears it down. Before the fix (2026-11-27) this hung within a second, in five
 * runs of five, or aborted in free(). alarm() turns a hang into a failure. */

#define SIG_THREADS 4
/* (A sanitizer makes every handler call ~10x dearer: a quarter of the rounds, still many
 * times what the bugs needed to show.) */
#if defined(TU_ASAN) || defined(TU_TSAN)
#define SIG_ROUNDS 25
#else
#define SIG_ROUNDS 100
#endif
#define SIG_OPS 20 /* per thread and round */

static char sig_impl[SIG_THREADS][64], sig_stor[SIG_THREADS][64];
static etr_tensor sig_tens[SIG_THREADS];
static int64_t sig_sizes[2] = {4, 4}, sig_strides[2] = {4, 1};
static _Thread_local const etr_tensor *sig_dying; /* being retired on this thread */
static atomic_long sig_handled;

static void sig_record(const char *name, const etr_tensor *t) {
  etr_record r;
  etr_value in[1];
  etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
  if (etr_record_is_active(&r) && etr_record_needs_inputs(&r)) {
    in[0] = etr_value_tensor(t);
    r.inputs = in;
    r.n_inputs = 1;
  }
  etr_record_begin(&r);
  etr_record_end(&r);
}

/* A handler that records takes at most a fifth of its thread's CPU time: after recording it
 * lets pass the signals of four times as much CPU time as the record took. The timer fires
 * every 20 µs of wall time, often enough to land inside etr anywhere; without this bound, on
 * a loaded machine the process got less CPU than the records it was signalled for needed
 * (slow under ASan with tracebacks) and the workers stopped making progress: the traceback
 * case hit its 60 s hang guard beside other builds. (A CPU-time timer instead fires only at
 * the scheduler's ticks: too seldom.) clock_gettime is async-signal-safe. */
static int64_t duty_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
static _Thread_local int64_t duty_next; /* this thread's CPU time before which records wait */
static bool duty_wait(int64_t *t0) {
  *t0 = duty_cpu_ns();
  return *t0 < duty_next;
}
static void duty_done(int64_t t0) {
  int64_t t1 = duty_cpu_ns();
  duty_next = t1 + 4 * (t1 - t0);
}

static void sig_handler(int sig) {
  (void)sig;
  int64_t t0;
  if (duty_wait(&t0)) return;
  const etr_tensor *t = sig_dying;
  sig_record("in_handler", t ? t : &sig_tens[0]);
  atomic_fetch_add(&sig_handled, 1);
  duty_done(t0);
}

static void *sig_worker(void *arg) {
  const etr_tensor *t = arg;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  for (int i = 0; i < SIG_OPS; i++) {
    etr_record outer;
    etr_record_init(&outer, "outer", ETR_SCOPE_FUNCTION);
    etr_record_begin(&outer);
    sig_record("churn_op", t);
    etr_record_end(&outer);
    sig_dying = t;
    etr_tensor_died(t->impl); /* (its address comes back next op: a new id) */
    sig_dying = NULL;
  }
  return NULL;
}

/* rounds of SIG_THREADS workers with the timer on; with_tb: a traceback on every op, the
 * handler's included (capture reads the module map, libunwind's caches and the thread's
 * frame cache, which the handler may interrupt). */
static void records_from_a_signal_handler(int rounds, bool with_tb) {
#ifdef TU_TSAN
  /* ThreadSanitizer reports any malloc inside a signal handler, and a thread's first op
   * allocates its state (docs/RELIABILITY.md says when a handler may record). */
  skip();
#endif
  atomic_store(&sig_handled, 0);
  for (int k = 0; k < SIG_THREADS; k++)
    sig_tens[k] =
        (etr_tensor){sig_impl[k], sig_stor[k], 0, 16, 4, "float", "cpu", 2, sig_sizes, sig_strides};
  tu_trace t;
  if (with_tb)
    tu_open_traceback(&t, NULL);
  else
    tu_open(&t, NULL);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = sig_handler;
  sa.sa_flags = SA_RESTART;
  assert_int_equal(sigaction(SIGUSR2, &sa, &old), 0);
  sigset_t set, old_mask;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, &old_mask); /* the workers take it, not this thread */
  timer_t timer;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGUSR2;
  assert_int_equal(timer_create(CLOCK_MONOTONIC, &ev, &timer), 0);
  struct itimerspec every = {{0, 20000}, {0, 20000}}, stop = {{0, 0}, {0, 0}};
  assert_int_equal(timer_settime(timer, 0, &every, NULL), 0);
  alarm(60);
  for (int round = 0; round < rounds; round++) {
    pthread_t th[SIG_THREADS];
    for (int k = 0; k < SIG_THREADS; k++)
      assert_int_equal(pthread_create(&th[k], NULL, sig_worker, &sig_tens[k]), 0);
    for (int k = 0; k < SIG_THREADS; k++) assert_int_equal(pthread_join(th[k], NULL), 0);
  }
  assert_int_equal(timer_settime(timer, 0, &stop, NULL), 0);
  timer_delete(timer);
  alarm(0);
  sigaction(SIGUSR2, &old, NULL);
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  assert_true(atomic_load(&sig_handled) > 0);
  tu_close_ok(&t); /* (loaded: every node's parent is in the file) */
  assert_int_equal(tu_count(&t, "churn_op"), rounds * SIG_THREADS * SIG_OPS);
  assert_int_equal(tu_count(&t, "outer"), rounds * SIG_THREADS * SIG_OPS);
  if (with_tb) { /* every op has its traceback, the handler's ones too */
    size_t in_handler = 0;
    for (size_t i = 0; i < json_array_size(t.nodes); i++) {
      json_t *n = json_array_get(t.nodes, i);
      const char *name = json_string_value(json_object_get(n, "name"));
      if (!name ||
          (strcmp(name, "churn_op") && strcmp(name, "outer") && strcmp(name, "in_handler")))
        continue;
      if (!tu_attr(n, "traceback")) fail_msg("node %zu (%s) has no traceback", i, name);
      in_handler += !strcmp(name, "in_handler");
    }
    assert_true(in_handler > 0);
  }
  tu_free(&t);
}

static void test_records_from_a_signal_handler(void **state) {
  (void)state;
  records_from_a_signal_handler(SIG_ROUNDS, false);
}

static void test_records_with_tracebacks_from_a_signal_handler(void **state) {
  (void)state;
  records_from_a_signal_handler(SIG_ROUNDS / 2, true);
}

/* A host handler installed with SA_RESETHAND (one-shot, sysv_signal's kind): its first
 * SIGINT is the host's, the second ends the process, and the file is finalized then. Before,
 * etr's handler took the host's flags, SA_RESETHAND included: the kernel reset it with the
 * first signal, and the second went to the default action unfinalized. In a child. */
static volatile sig_atomic_t oneshot_calls;

static void oneshot_host(int sig) {
  (void)sig;
  oneshot_calls++;
}

static int oneshot_child(const char *path) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = oneshot_host;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGINT, &sa, NULL) != 0) return 2;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.fatal_signals = true;
  etr_trace *t;
  if (etr_trace_open(path, &opt, &t) != 0 || etr_trace_enable(t) != 0) return 3;
  for (int i = 0; i < 10; i++) tu_op("before_int", NULL, 0, NULL, 0);
  raise(SIGINT); /* the host's, once */
  if (oneshot_calls != 1) return 4;
  for (int i = 0; i < 10; i++) tu_op("after_int", NULL, 0, NULL, 0);
  raise(SIGINT); /* the default action now: the process ends here */
  return 5;
}

static void test_oneshot_host_handler(void **state) {
  (void)state;
  char dir[256], path[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/oneshot.json", dir);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(oneshot_child(path));
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGINT)
    fail_msg(
        "the child: status 0x%x, expected death by SIGINT (exit 4: the host's handler "
        "was not called once, 5: the second SIGINT did not end it)",
        status);
  tu_trace t;
  tu_load_path(&t, path); /* (fails on a file without its end) */
  assert_int_equal(tu_count(&t, "after_int"), 10);
  json_t *sig = json_object_get(json_object_get(t.root, "etr"), "signal");
  assert_true(json_is_integer(sig) && json_integer_value(sig) == SIGINT);
  tu_free(&t);
  tu_rmdir(dir);
}

/* A profiler's timer handler that records, on a thread busy with etr's control calls (the
 * only thread: the handler can interrupt nothing else). Before, it deadlocked in round 0:
 * on the trace's thread list inside etr_trace_disable, on malloc's lock inside
 * etr_trace_set_traceback and etr_intern (the record's first op in a trace allocates). Now
 * the host's calls into etr make the thread quiet: such records are not observed. In a
 * child, so that a hang fails the test instead of stopping it. */
static volatile sig_atomic_t ctl_samples;

static void ctl_on_tick(int sig) {
  (void)sig;
  int64_t t0;
  if (duty_wait(&t0)) return;
  etr_record r;
  etr_record_init(&r, "profiler::sample", ETR_SCOPE_USER_SCOPE);
  etr_record_begin(&r);
  etr_record_end(&r);
  ctl_samples++;
  duty_done(t0);
}

static int control_calls_under_a_timer(const char *path) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = ctl_on_tick;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGALRM, &sa, NULL) != 0) return 2;
  struct itimerval it = {{0, 20}, {0, 20}};
  if (setitimer(ITIMER_REAL, &it, NULL) != 0) return 2;
  for (int round = 0; round < SIG_ROUNDS * 2 / 5; round++) {
    etr_trace *t;
    if (etr_trace_open(path, NULL, &t) != 0 || etr_trace_enable(t) != 0) return 3;
    for (int k = 0; k < 50; k++) {
      etr_trace_disable(t);
      etr_trace_enable(t);
      etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
      tb.enabled = true;
      tb.pattern = "aten::*";
      etr_trace_set_traceback(t, &tb);
      char b[64];
      snprintf(b, sizeof b, "interned-%d-%d", round, k);
      etr_intern(b);
      etr_trace_stats st;
      memset(&st, 0, sizeof st);
      etr_trace_stats_get(t, &st);
    }
    if (etr_trace_close(t) != 0) return 4;
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  return ctl_samples > 0 ? 0 : 5;
}

static void test_records_from_a_handler_during_control_calls(void **state) {
  (void)state;
#ifdef TU_TSAN
  skip(); /* (as above: a thread's first op in a trace allocates, which TSan reports) */
#endif
  char dir[256], path[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ctl.json", dir);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(control_calls_under_a_timer(path));
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < 6000 && (got = waitpid(pid, &status, WNOHANG)) == 0; i++) tu_sleep_us(10000);
  if (got == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    fail_msg("the child hung (60 s): a record from the timer's handler waited on its thread");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the child: status 0x%x (2 set-up, 3 open, 4 close, 5 no sample)", status);
  tu_assert_valid(ETR_TOOL, path);
  tu_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_host_flags_and_mask_kept, tu_cleanup),
      cmocka_unit_test_teardown(test_ctrl_c_interrupts_read, tu_cleanup),
      cmocka_unit_test_teardown(test_host_handler_longjmp, tu_cleanup),
      cmocka_unit_test_teardown(test_gc_barrier_faults_not_finalized, tu_cleanup),
      cmocka_unit_test_teardown(test_gc_barrier_faults_with_a_later_handler, tu_cleanup),
      cmocka_unit_test_teardown(test_sigint_flag_handler_not_finalized, tu_cleanup),
      cmocka_unit_test(test_env_signals_opt_in),
      cmocka_unit_test(test_env_signals_switch_values),
      cmocka_unit_test_teardown(test_writer_blocks_signals, tu_cleanup),
      cmocka_unit_test_teardown(test_records_from_a_signal_handler, tu_cleanup),
      cmocka_unit_test_teardown(test_records_with_tracebacks_from_a_signal_handler, tu_cleanup),
      cmocka_unit_test(test_records_from_a_handler_during_control_calls),
      cmocka_unit_test(test_oneshot_host_handler),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
