/* tests/trace/trace_helper.c — a small program linked to etr that the trace tests run as a
 * child process:
 *
 *   trace_helper env                 records ops without calling any trace API (for
 *                                    ETR_TRACE activation) and returns from main
 *   trace_helper env-current         same, and exits 3 when etr_trace_current() is NULL
 *   trace_helper host-log            3 times: writes "host log line <i>\n" with write(1,...),
 *                                    records an op "host_log_op", flushes the trace
 *                                    (ETR_TRACE=/dev/stdout: the host's log and the trace)
 *   trace_helper exec                records "exec_parent" ops, runs itself as a child
 *                                    (fork + exec, mode env: ETR_TRACE is inherited), waits,
 *                                    records "exec_after" ops and returns
 *   trace_helper exec_unmarked       same, the child's environment without ETR_TRACE_WRITER
 *   trace_helper fork|fork_unmarked  a forked child records (ETR_TRACE_FORKS); the second
 *                                    with ETR_TRACE_WRITER unset before the fork
 *   trace_helper daemon              records, forks and returns; the child records once
 *                                    its parent has ended
 *                                    (exec, fork, daemon: ETR_HELPER_DUMP=1 dumps the trace,
 *                                    a flight recorder, after the parent's first ops, and
 *                                    checks that the writer mark names the new file: exit 6)
 *   trace_helper fork_open DIR       forks 50 times while a thread opens and closes traces
 *                                    from the process's first open on; each child opens one:
 *                                    exit 5 when a child hung
 *   trace_helper sigquery            records like env, then exits 0 when SIGINT still has
 *                                    its default action, 5 when a handler is installed
 *   trace_helper exit PATH           opens PATH, records, calls exit(0) without closing
 *   trace_helper quick-exit PATH     same, with quick_exit(0)
 *   trace_helper exit-open PATH      same, with two ops still open at exit()
 *   trace_helper exit-busy PATH      same, while another thread records in a loop
 *   trace_helper pexit PATH          opens PATH, records, leaves main by pthread_exit with
 *                                    an op open while a thread records and returns (an op
 *                                    open too): the process ends with it, exit 0; an atexit
 *                                    function makes PATH.atexit
 *   trace_helper pexit-fork PATH     the same, and the thread, once the main thread has
 *                                    left, forks a child that records into
 *                                    PATH.child.json across 100 ms pauses and closes it
 *   trace_helper signal PATH SIG HOW  opens PATH with fatal_signals on, records 100
 *                                    "before_signal" ops while two threads record in a
 *                                    loop, then gets SIG (SEGV: a null write; BUS: a read past
 *                                    the end of a mapped empty file; ABRT: abort(); FPE: a
 *                                    division by zero; ILL: __builtin_trap(); PIPE: a write
 *                                    to a pipe without reader; TERM, INT, HUP, QUIT, XCPU:
 *                                    kill(getpid()); STACK: recursion with an op open at
 *                                    each level until the stack overflows, TSTACK: the same
 *                                    on a thread with a 256 KiB stack: SIGSEGV). HOW: "default" (no
 * handler of ours before), "host-return" (a handler installed before the trace that counts and
 * returns: the program goes on, records 100 "after_signal" ops and closes: exit 0; for ABRT abort()
 * goes on and ends the process), "host-exit" (a handler that _exits 7; the ops are flushed before
 * the signal), "host-dfl" (a crash reporter's handler: it notes whether the file was finalized when
 * it ran, "sealed" or "unsealed" in PATH.host, restores the default action and returns, to fault
 * again, or raises a sent signal again), or "host-dfl-learnt" (TERM, INT: the same handler resolves
 * a first SIG, then ends the second); ETR_HELPER_RING_MB=n makes it a flight recorder trace_helper
 * kill PATH THREADS   records on THREADS threads until killed (flush_ms 20), printing the
 * nodes_written counter on stdout every 2 ms; op names "k<thread>", seq_id = the op's number
 *
 * Exit status 0 on success; 2 on bad usage or a failed call.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <etr/etr.h>

static void op(const char *name, int with_values) {
  static int impl, stor;
  static const int64_t sz[2] = {2, 2};
  etr_tensor t = {&impl, &stor, 0, 4, 4, "float", "cpu", 2, sz, NULL};
  etr_value in[3] = {etr_value_tensor(&t), etr_value_int(1), etr_value_string("s")};
  etr_record r;
  etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
  if (with_values && etr_record_needs_inputs(&r)) {
    r.inputs = in;
    r.n_inputs = 3;
  }
  etr_record_begin(&r);
  if (with_values && etr_record_needs_outputs(&r)) {
    r.outputs = in;
    r.n_outputs = 1;
  }
  etr_record_end(&r);
}

static void record_some(const char *prefix) {
  char outer_name[64], inner_name[64];
  snprintf(outer_name, sizeof outer_name, "%s_outer", prefix);
  snprintf(inner_name, sizeof inner_name, "%s_inner", prefix);
  for (int i = 0; i < 5; i++) {
    etr_record o;
    etr_record_init(&o, outer_name, ETR_SCOPE_USER_SCOPE);
    etr_record_begin(&o);
    op(inner_name, 1);
    op(inner_name, 1);
    etr_record_end(&o);
  }
}

static atomic_int busy_started;

static void *busy(void *p) {
  (void)p;
  for (;;) {
    op("busy_op", 1);
    atomic_store(&busy_started, 1);
  }
  return NULL;
}

/* pexit: the worker outlives the main thread, then returns; the process ends with it. */
static char pexit_mark[600];
static etr_trace *g_pexit_trace;
static int open_trace(const char *path, etr_trace **out);

static void pexit_atexit(void) {
  FILE *f = fopen(pexit_mark, "w");
  if (f) fclose(f);
}

static void *pexit_worker(void *p) {
  (void)p;
  struct timespec ts = {0, 20000000}; /* (the main thread has left by then, mostly) */
  nanosleep(&ts, NULL);
  record_some("pexit_worker");
  etr_record a;
  etr_record_init(&a, "pexit_worker_open", ETR_SCOPE_FUNCTION);
  etr_record_begin(&a);
  op("pexit_worker_leaf", 0);
  return NULL;
}

/* pexit-fork: once the main thread has left, the worker forks; the child (whose main
 * thread the forking one now is) records into its own trace across pauses longer than the
 * writer's watch, then closes it. */
static char pexit_child_path[600];

static bool main_thread_gone(void) {
  char p[64], buf[512];
  snprintf(p, sizeof p, "/proc/self/task/%d/stat", (int)getpid());
  FILE *f = fopen(p, "r");
  if (!f) return true;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *e = strrchr(buf, ')');
  return !e || e[1] == 0 || e[2] == 'Z';
}

static void *pexit_forker(void *p) {
  (void)p;
  for (int i = 0; i < 10000 && !main_thread_gone(); i++) usleep(1000);
  record_some("pexit_worker");
  pid_t pid = fork();
  if (pid == 0) {
    etr_trace_close(g_pexit_trace); /* (the parent's copy: ETR_EFORKED) */
    etr_trace *t;
    if (open_trace(pexit_child_path, &t) != 0) _exit(2);
    for (int i = 0; i < 3; i++) {
      usleep(100000);
      record_some("pexit_child");
    }
    _exit(etr_trace_close(t) == 0 ? 0 : 3);
  }
  int st = 0;
  if (pid > 0) waitpid(pid, &st, 0);
  return NULL;
}

static int open_trace(const char *path, etr_trace **out) {
  int rc = etr_trace_open(path, NULL, out);
  if (rc != 0) {
    fprintf(stderr, "trace_helper: etr_trace_open(%s): %s\n", path, etr_strerror(rc));
    return 2;
  }
  rc = etr_trace_enable(*out);
  if (rc != 0) return 2;
  return 0;
}

/* ---- signal ---- */

static volatile sig_atomic_t host_calls;

static void host_return(int sig) {
  (void)sig;
  host_calls++;
}

/* host-dfl: the trace file's path, and its PATH.host (made before the signal). */
static char host_trace_path[400];
static int host_note_fd = -1;

/* Whether the file ends with a footer written at a signal (its tail names the signal),
 * noted in PATH.host. Async-signal-safe. */
static void host_note_sealed(void) {
  static char tail[8192 + 1];
  bool sealed = false;
  int fd = open(host_trace_path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0) {
    off_t from = st.st_size > 8192 ? st.st_size - 8192 : 0;
    ssize_t n = pread(fd, tail, sizeof tail - 1, from);
    tail[n > 0 ? n : 0] = '\0';
    sealed = n > 0 && strstr(tail, "\"signal\":") != NULL;
  }
  if (fd >= 0) close(fd);
  const char *msg = sealed ? "sealed\n" : "unsealed\n";
  if (write(host_note_fd, msg, strlen(msg)) < 0) _exit(8);
}

/* host-dfl-learnt: the first signal the handler resolves (returns), the next it ends. */
static volatile sig_atomic_t host_resolve_first;

static void host_dfl(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  if (host_resolve_first) {
    host_resolve_first = 0;
    host_calls++;
    return;
  }
  host_note_sealed();
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  if (si->si_code <= 0) raise(sig); /* pending until this handler returns */
}

static void host_exit(int sig) {
  (void)sig;
  static const char msg[] = "host handler\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(8);
  _exit(7);
}

static atomic_int spinning;

static void *spin_ops(void *p) {
  (void)p;
  op("spin_op", 1);
  atomic_fetch_add(&spinning, 1);
  for (int i = 0;; i++) {
    op("spin_op", 1);
    if (i % 4 == 0) { /* busy, but files of a few MB */
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

/* fork_open DIR: a thread opens and closes traces in a loop from the process's very first
 * open on, while the main thread forks 50 times; each child opens a trace of its own (an
 * alarm ends it if it hangs). Exit 0 when every child did, 5 when one hung. */
static atomic_int fork_open_stop;
static char fork_open_dir[256];

static void *fork_open_loop(void *arg) {
  (void)arg;
  char path[400];
  snprintf(path, sizeof path, "%s/loop.json", fork_open_dir);
  while (!atomic_load(&fork_open_stop)) {
    etr_trace *t;
    if (etr_trace_open(path, NULL, &t) == 0) etr_trace_close(t);
  }
  return NULL;
}

static int fork_open_main(const char *dir) {
  snprintf(fork_open_dir, sizeof fork_open_dir, "%s", dir);
  pthread_t th;
  if (pthread_create(&th, NULL, fork_open_loop, NULL) != 0) return 2;
  int hung = 0;
  for (int i = 0; i < 50; i++) {
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      alarm(10);
      char path[400];
      snprintf(path, sizeof path, "%s/child_%d.json", fork_open_dir, i);
      etr_trace *t;
      if (etr_trace_open(path, NULL, &t) == 0) etr_trace_close(t);
      _exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) == pid && WIFSIGNALED(st)) hung++;
  }
  atomic_store(&fork_open_stop, 1);
  pthread_join(th, NULL);
  return hung ? 5 : 0;
}

/* Recursion with an op open at each level until the stack runs out. */
static int overflow_stack(int depth) {
  etr_record r;
  etr_record_init(&r, "deep", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  volatile char pad[512];
  pad[depth % 512] = (char)depth;
  int x = depth == INT32_MAX ? 0 : overflow_stack(depth + 1) + pad[(depth * 7) % 512];
  etr_record_end(&r);
  return x;
}

static void *overflow_thread(void *p) {
  (void)p;
  for (int i = 0; i < 10; i++) op("before_overflow", 0);
  (void)overflow_stack(0);
  return NULL;
}

/* An integer division the sanitizers leave to the CPU (SIGFPE for 0). */
__attribute__((noinline, no_sanitize("undefined"))) static int divide(volatile int a,
                                                                      volatile int b) {
  return a / b;
}

static int signal_main(const char *path, const char *signame, const char *how) {
  int sig = !strcmp(signame, "SEGV")                                  ? SIGSEGV
            : !strcmp(signame, "BUS")                                 ? SIGBUS
            : !strcmp(signame, "ABRT")                                ? SIGABRT
            : !strcmp(signame, "TERM")                                ? SIGTERM
            : !strcmp(signame, "INT")                                 ? SIGINT
            : !strcmp(signame, "FPE")                                 ? SIGFPE
            : !strcmp(signame, "ILL")                                 ? SIGILL
            : !strcmp(signame, "HUP")                                 ? SIGHUP
            : !strcmp(signame, "QUIT")                                ? SIGQUIT
            : !strcmp(signame, "PIPE")                                ? SIGPIPE
            : !strcmp(signame, "XCPU")                                ? SIGXCPU
            : !strcmp(signame, "STACK") || !strcmp(signame, "TSTACK") ? SIGSEGV
                                                                      : 0;
  bool overflow = !strcmp(signame, "STACK") || !strcmp(signame, "TSTACK");
  if (!sig) return 2;
  int pipe_fds[2] = {-1, -1}; /* (PIPE: a pipe whose reader is gone) */
  if (sig == SIGPIPE && pipe(pipe_fds) != 0) return 2;
  if (strcmp(how, "default")) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (!strcmp(how, "host-dfl") || !strcmp(how, "host-dfl-learnt")) {
      host_resolve_first = !strcmp(how, "host-dfl-learnt");
      snprintf(host_trace_path, sizeof host_trace_path, "%s", path);
      char note[420];
      snprintf(note, sizeof note, "%s.host", path);
      host_note_fd = open(note, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (host_note_fd < 0) return 2;
      sa.sa_sigaction = host_dfl;
      sa.sa_flags = SA_SIGINFO;
    } else {
      sa.sa_handler = strcmp(how, "host-return") ? host_exit : host_return;
    }
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) return 2;
  }
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.fatal_signals = true;
  const char *ring = getenv("ETR_HELPER_RING_MB"); /* as a flight recorder */
  if (ring) opt.ring_mb = (uint32_t)atoi(ring);
  etr_trace *t;
  if (etr_trace_open(path, &opt, &t) != 0 || etr_trace_enable(t) != 0) return 2;
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&th[i], NULL, spin_ops, NULL) != 0) return 2;
  while (atomic_load(&spinning) < 2) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (!strcmp(how, "host-dfl-learnt")) {
    /* A first signal the host's handler resolves (sent ones only): etr then lets that
     * handler run first. The flush waits until the writer has reopened the file. */
    if (sig != SIGTERM && sig != SIGINT) return 2;
    kill(getpid(), sig);
    while (host_calls == 0) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    if (etr_trace_flush(t) != 0) return 2;
  }
  for (int i = 0; i < 100; i++) op("before_signal", 1);
  etr_record open_op; /* open when the signal comes: written by nobody */
  etr_record_init(&open_op, "open_at_signal", ETR_SCOPE_FUNCTION);
  etr_record_begin(&open_op);
  for (int i = 0; i < 5; i++) op("child_of_open", 1); /* (in the file: they name it) */
  /* A handler that _exits leaves the file as written so far: put these ops there. */
  if (!strcmp(how, "host-exit") && etr_trace_flush(t) != 0) return 2;
  if (overflow && !strcmp(signame, "TSTACK")) { /* on a thread with a small stack */
    pthread_attr_t attr;
    pthread_t deep;
    if (pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, 256 * 1024) != 0 ||
        pthread_create(&deep, &attr, overflow_thread, NULL) != 0)
      return 2;
    pthread_join(deep, NULL);
  } else if (overflow) {
    (void)overflow_stack(0);
  } else if (sig == SIGSEGV) {
    volatile uintptr_t bad = 8; /* unmapped, and not NULL, which UBSan would stop at */
    *(volatile int *)bad = 1;
  } else if (sig == SIGBUS) {
    char tmpl[] = "/tmp/etr-bus-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) return 2;
    unlink(tmpl);
    if (ftruncate(fd, 4096) != 0) return 2;
    volatile char *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED || ftruncate(fd, 0) != 0) return 2;
    (void)m[0];
  } else if (sig == SIGABRT) {
    abort();
  } else if (sig == SIGFPE) {
    volatile int q = divide(1, 0); /* a real fault: x86's divide error */
    (void)q;
  } else if (sig == SIGILL) {
    __builtin_trap(); /* ud2 on x86 */
  } else if (sig == SIGPIPE) {
    close(pipe_fds[0]);
    if (write(pipe_fds[1], "x", 1) == 1) return 2;
  } else {
    kill(getpid(), sig);
    if (strcmp(how, "host-return") == 0) {
      while (host_calls == 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
      }
    }
  }
  if (strcmp(how, "host-return") != 0) return 9; /* the signal should have ended us */
  etr_record_end(&open_op);
  for (int i = 0; i < 100; i++) op("after_signal", 1);
  return etr_trace_close(t) == 0 ? 0 : 2;
}

/* ---- kill -9 ---- */

static void *kill_worker(void *p) {
  char name[16];
  snprintf(name, sizeof name, "k%d", (int)(intptr_t)p);
  for (int64_t i = 0;; i++) {
    etr_record r;
    etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
    r.seq_nr = i;
    etr_record_begin(&r);
    if (i % 3 == 0) op("k_inner", 1); /* some nesting */
    etr_record_end(&r);
    if (i % 2 == 0) { /* a few thousand ops per thread and second: files of a few MB */
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

static int kill_main(const char *path, int threads) {
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.flush_ms = 20;
  /* tracebacks on some ops: a trace cut short must keep their frames (path.tables) */
  etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
  tb.enabled = true;
  tb.every = 4;
  tb.max_depth = 16;
  opt.traceback = &tb;
  etr_trace *t;
  if (etr_trace_open(path, &opt, &t) != 0 || etr_trace_enable(t) != 0) return 2;
  for (int i = 0; i < threads; i++) {
    pthread_t th;
    if (pthread_create(&th, NULL, kill_worker, (void *)(intptr_t)i) != 0) return 2;
  }
  for (;;) {
    etr_trace_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    etr_trace_stats_get(t, &st);
    printf("%llu\n", (unsigned long long)st.nodes_written);
    fflush(stdout);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

/* ETR_HELPER_DUMP=1 (with ETR_TRACE_RING_MB): a flight recorder's dump of the ETR_TRACE
 * trace now, which replaces its file by a new one; the writer mark must then name the new
 * file. 0, or 6 when the dump failed or the mark names another file. */
static int dump_if_asked(void) {
  if (!getenv("ETR_HELPER_DUMP")) return 0;
  if (etr_trace_dump(etr_trace_current()) != 0) return 6;
  const char *path = getenv("ETR_TRACE"), *mark = getenv("ETR_TRACE_WRITER");
  long pid;
  unsigned long long dev, ino;
  struct stat st;
  if (!path || !mark || sscanf(mark, "%ld:%llu:%llu", &pid, &dev, &ino) != 3 ||
      stat(path, &st) != 0)
    return 6;
  bool same = pid == (long)getpid() && dev == (unsigned long long)st.st_dev &&
              ino == (unsigned long long)st.st_ino;
  return same ? 0 : 6;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *mode = argv[1];
  /* Run setuid by another user: records like "env"; 10 when the kernel did not put it in
   * secure-execution mode (a file system mounted nosuid), so that the test skips. */
  if (strcmp(mode, "secure") == 0) {
    if (!getauxval(AT_SECURE)) return 10;
    record_some("env");
    return 0;
  }
  if (strcmp(mode, "env") == 0 || strcmp(mode, "env-current") == 0) {
    record_some("env");
    if (strcmp(mode, "env-current") == 0 && etr_trace_current() == NULL) return 3;
    return 0;
  }
  if (strcmp(mode, "host-log") == 0) {
    for (int i = 0; i < 3; i++) {
      char line[32];
      int n = snprintf(line, sizeof line, "host log line %d\n", i);
      if (write(1, line, (size_t)n) != n) return 2;
      etr_record r;
      etr_record_init(&r, "host_log_op", ETR_SCOPE_FUNCTION);
      etr_record_begin(&r);
      etr_record_end(&r);
      if (etr_trace_flush(etr_trace_current()) != 0) return 2;
    }
    return 0;
  }
  /* exec without fork: records, flushes, then becomes "env" (the same process). */
  if (strcmp(mode, "exec-self") == 0) {
    record_some("exec_self");
    etr_trace_flush(etr_trace_current());
    fflush(NULL);
    execl("/proc/self/exe", argv[0], "env", (char *)NULL);
    return 127;
  }
  if (strcmp(mode, "exec") == 0 || strcmp(mode, "exec_unmarked") == 0 ||
      strcmp(mode, "exec_reexec") == 0) {
    record_some("exec_parent");
    if (dump_if_asked()) return 6;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      /* (exec_unmarked: the child's environment lost the writer mark, as when a launcher
       * builds it anew; exec_reexec: the child, redirected to a file of its own, execs
       * itself again, as exec-self) */
      if (strcmp(mode, "exec_unmarked") == 0) unsetenv("ETR_TRACE_WRITER");
      if (strcmp(mode, "exec_reexec") == 0)
        execl("/proc/self/exe", argv[0], "exec-self", (char *)NULL);
      execl("/proc/self/exe", argv[0], "env", (char *)NULL);
      _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 4;
    record_some("exec_after");
    return 0;
  }
  /* fork without exec: the child records and exits; a second child execs at once (it must
   * leave no file); then the parent records again. */
  if (strcmp(mode, "fork") == 0 || strcmp(mode, "fork_unmarked") == 0) {
    record_some("fork_parent");
    if (dump_if_asked()) return 6;
    /* (fork_unmarked: the host dropped the writer mark; the child must still know the
     * parent's file) */
    if (strcmp(mode, "fork_unmarked") == 0) unsetenv("ETR_TRACE_WRITER");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      record_some("fork_child");
      exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 4;
    pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      execl("/bin/true", "true", (char *)NULL);
      _exit(127);
    }
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 5;
    record_some("fork_after");
    return 0;
  }
  /* ETR_TRACE_SIGNALS=1 with ETR_TRACE_FORKS=1: a forked child that records and is ended by
   * SIGTERM must die of SIGTERM (its file finalized), not of a SIGSEGV from the handler
   * calling itself. 0, or 7 with the child's status on stderr. */
  if (strcmp(mode, "fork_sigterm") == 0) {
    record_some("fork_parent");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      record_some("fork_child");
      raise(SIGTERM);
      _exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid) return 2;
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGTERM) {
      fprintf(stderr, "fork_sigterm: child status 0x%x\n", st);
      return 7;
    }
    return 0;
  }
  /* A daemon's start: the parent records, forks and exits; the child records only once the
   * parent is gone (its file finalized), then exits. */
  if (strcmp(mode, "daemon") == 0) {
    record_some("daemon_parent");
    if (dump_if_asked()) return 6;
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      for (int i = 0; i < 5000 && getppid() == parent; i++) usleep(1000);
      usleep(50000); /* (the parent's exit handlers have finalized its file by now) */
      record_some("daemon_child");
      exit(0);
    }
    return 0;
  }
  /* fork_linger DIR: records, forks a child that does nothing with etr and lives on until
   * DIR/done exists (10 s at most), and returns (its trace finalized at exit).
   * fork_linger_raw DIR: the same through the raw system call, which runs no fork handler:
   * the child keeps the trace's descriptor as one scheduled late still has it. */
  if ((strcmp(mode, "fork_linger") == 0 || strcmp(mode, "fork_linger_raw") == 0) && argc == 3) {
    record_some("linger_parent");
    fflush(NULL);
    pid_t pid = strcmp(mode, "fork_linger_raw") == 0 ? (pid_t)syscall(SYS_fork) : fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      char done[600];
      snprintf(done, sizeof done, "%s/done", argv[2]);
      for (int i = 0; i < 1000 && access(done, F_OK) != 0; i++) usleep(10000);
      _exit(0);
    }
    return 0;
  }
  if (strcmp(mode, "sigquery") == 0) {
    record_some("env");
    struct sigaction cur;
    if (sigaction(SIGINT, NULL, &cur) != 0) return 2;
    bool dfl = !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL;
    return dfl ? 0 : 5;
  }
  if (strcmp(mode, "signal") == 0 && argc == 5) return signal_main(argv[2], argv[3], argv[4]);
  if (strcmp(mode, "fork_open") == 0 && argc == 3) return fork_open_main(argv[2]);
  if (strcmp(mode, "kill") == 0 && argc == 4) return kill_main(argv[2], atoi(argv[3]));
  if (argc < 3) return 2;
  etr_trace *t;
  if (open_trace(argv[2], &t) != 0) return 2;
  record_some("exit");
  if (strcmp(mode, "exit") == 0) exit(0);
  if (strcmp(mode, "quick-exit") == 0) quick_exit(0);
  if (strcmp(mode, "exit-open") == 0) {
    etr_record a, b;
    etr_record_init(&a, "exit_open_a", ETR_SCOPE_FUNCTION);
    etr_record_begin(&a);
    etr_record_init(&b, "exit_open_b", ETR_SCOPE_FUNCTION);
    etr_record_begin(&b);
    op("exit_open_leaf", 0);
    exit(0);
  }
  if (strcmp(mode, "pexit") == 0 || strcmp(mode, "pexit-fork") == 0) {
    snprintf(pexit_mark, sizeof pexit_mark, "%s.atexit", argv[2]);
    snprintf(pexit_child_path, sizeof pexit_child_path, "%s.child.json", argv[2]);
    g_pexit_trace = t;
    if (atexit(pexit_atexit) != 0) return 2;
    pthread_t th;
    bool forks = strcmp(mode, "pexit-fork") == 0;
    if (pthread_create(&th, NULL, forks ? pexit_forker : pexit_worker, NULL) != 0) return 2;
    etr_record a;
    etr_record_init(&a, "pexit_main_open", ETR_SCOPE_FUNCTION);
    etr_record_begin(&a);
    op("pexit_main_leaf", 0);
    pthread_exit(NULL);
  }
  if (strcmp(mode, "exit-busy") == 0) {
    pthread_t th;
    if (pthread_create(&th, NULL, busy, NULL) != 0) return 2;
    while (!atomic_load(&busy_started)) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    exit(0);
  }
  return 2;
}
