/* tests/trace/test_trace_durability.c — what is in the file while the process runs and
 * when it dies (docs/RELIABILITY.md): the header at open, timed flushes of every thread's completed
 * nodes, etr_trace_flush across threads, a descriptor closed and reused under the
 * recorder, double close, fatal signals (with and without a host handler), and kill -9 at
 * random points followed by `etr repair`.
 *
 * TRACE_HELPER is the helper program (trace_helper.c), ETR_TOOL the `etr` command.
 * ETR_KILL_ROUNDS in the environment sets the number of kill -9 rounds (default 12). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace_util.h"

#ifndef TRACE_HELPER
#error "TRACE_HELPER must name the trace_helper executable"
#endif
#ifndef ETR_TOOL
#error "ETR_TOOL must name the etr executable"
#endif

/* Occurrences of needle in the file at path as it is on disk now. */
static size_t count_on_disk(const char *path, const char *needle) {
  size_t len, n = 0;
  char *text = tu_read_file(path, &len);
  if (!text) return 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  free(text);
  return n;
}

/* ---- a thread that records and then idles (neither exits nor records) ---- */

typedef struct idler {
  const char *name;
  int ops;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool recorded, release;
  pthread_t th;
} idler;

static void *idler_main(void *p) {
  idler *d = p;
  for (int i = 0; i < d->ops; i++) tu_op(d->name, NULL, 0, NULL, 0);
  pthread_mutex_lock(&d->mu);
  d->recorded = true;
  pthread_cond_broadcast(&d->cv);
  while (!d->release) pthread_cond_wait(&d->cv, &d->mu);
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void idler_start(idler *d, const char *name, int ops) {
  memset(d, 0, sizeof *d);
  d->name = name;
  d->ops = ops;
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
  assert_int_equal(pthread_create(&d->th, NULL, idler_main, d), 0);
  pthread_mutex_lock(&d->mu);
  while (!d->recorded) pthread_cond_wait(&d->cv, &d->mu);
  pthread_mutex_unlock(&d->mu);
}

static void idler_stop(idler *d) {
  pthread_mutex_lock(&d->mu);
  d->release = true;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->th, NULL);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->cv);
}

/* ---- tests ---- */

static void test_header_on_disk_at_open(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  size_t len;
  char *text = tu_read_file(t.path, &len);
  assert_non_null(text);
  assert_non_null(strstr(text, "\"schema\": \"1.1.1-chakra.0.0.4\""));
  assert_true(len > 10 && strcmp(text + len - 10, "\"nodes\": [") == 0);
  free(text);
  tu_close_ok(&t);
  tu_free(&t);
}

/* The trace's blocks are reserved ahead of its writes (a write into reserved blocks costs the
 * kernel less), and close gives back what the file did not use: no disk stays taken past
 * the end of a closed trace. */
static void test_reserve_given_back_at_close(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  for (int i = 0; i < 2000; i++) tu_op("aten::reserve", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  struct stat st;
  assert_int_equal(stat(t.path, &st), 0);
  bool reserved = (uint64_t)st.st_blocks * 512u >= (uint64_t)st.st_size + (512u << 10);
  tu_close_ok(&t);
  assert_true(tu_nothing_past_end(t.path));
  tu_free(&t);
  if (!reserved) skip(); /* (a file system that cannot reserve: only the end was checked) */
}

/* The same for a gzip trace (its writes are compressed members) and for the flight recorder,
 * whose dumps truncate the file and write it again. */
static void test_reserve_given_back_gz_and_ring(void **state) {
  (void)state;
  char dir[256], path[512];
  tu_mkdtemp(dir, sizeof dir);
  for (int ring = 0; ring < 2; ring++) {
    snprintf(path, sizeof path, "%s/%s", dir, ring ? "ring.json" : "trace.json.gz");
    etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
    opt.ring_mb = ring ? 1 : 0;
    etr_trace *t = NULL;
    assert_int_equal(etr_trace_open(path, &opt, &t), 0);
    assert_int_equal(etr_trace_enable(t), 0);
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < 2000; i++) tu_op("aten::reserve", NULL, 0, NULL, 0);
      assert_int_equal(ring ? etr_trace_dump(t) : etr_trace_flush(t), 0);
    }
    assert_int_equal(etr_trace_close(t), 0);
    assert_true(tu_nothing_past_end(path));
  }
  tu_rmdir(dir);
}

/* A thread that records and then idles has its nodes in the file within flush_ms. */
static void test_timed_flush_idle_thread(void **state) {
  (void)state;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.flush_ms = 50;
  tu_trace t;
  tu_open(&t, &opt);
  int64_t t0 = tu_mono_ms();
  idler d;
  idler_start(&d, "idle_thread_op", 10);
  for (int i = 0; i < 5; i++) tu_op("main_thread_op", NULL, 0, NULL, 0);
  size_t seen = 0, seen_main = 0;
  while (tu_mono_ms() - t0 < 5000) {
    seen = count_on_disk(t.path, "\"idle_thread_op\"");
    seen_main = count_on_disk(t.path, "\"main_thread_op\"");
    if (seen == 10 && seen_main == 5) break;
    tu_sleep_us(10000);
  }
  int64_t waited = tu_mono_ms() - t0;
  assert_int_equal(seen, 10);
  assert_int_equal(seen_main, 5);
  /* The thread node is on disk too (the ops' parent), so the prefix is repairable. */
  assert_true(count_on_disk(t.path, TU_THREAD_NAME) >= 2);
  print_message("timed flush (flush_ms 50): nodes of an idle thread on disk after %lld ms\n",
                (long long)waited);
  idler_stop(&d);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "idle_thread_op"), 10);
  assert_int_equal(tu_count(&t, "main_thread_op"), 5);
  tu_free(&t);
}

/* The control: with no timed flush, the same nodes stay in memory until close. */
static void test_no_timed_flush(void **state) {
  (void)state;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.flush_ms = ETR_FLUSH_NEVER;
  tu_trace t;
  tu_open(&t, &opt);
  idler d;
  idler_start(&d, "idle_thread_op", 10);
  tu_sleep_us(300000);
  assert_int_equal(count_on_disk(t.path, "\"idle_thread_op\""), 0);
  idler_stop(&d);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "idle_thread_op"), 10);
  tu_free(&t);
}

/* etr_trace_flush writes other threads' completed nodes, not only the caller's. */
static void test_flush_all_threads(void **state) {
  (void)state;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.flush_ms = ETR_FLUSH_NEVER;
  tu_trace t;
  tu_open(&t, &opt);
  idler d;
  idler_start(&d, "other_thread_op", 7);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  assert_int_equal(count_on_disk(t.path, "\"other_thread_op\""), 7);
  /* Nothing is written twice: more ops, another flush, then close. */
  tu_op("after_flush", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  assert_int_equal(count_on_disk(t.path, "\"other_thread_op\""), 7);
  assert_int_equal(count_on_disk(t.path, "\"after_flush\""), 1);
  idler_stop(&d);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "other_thread_op"), 7);
  assert_int_equal(tu_count(&t, "after_flush"), 1);
  tu_free(&t);
}

/* The host closes our descriptor and opens another file that gets the same number: that
 * file must receive nothing; recording stops with EBADF; the process goes on. */
static void test_fd_closed_and_reused(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  tu_op("before_close", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  int fd = -1;
  for (int i = 3; i < 1024 && fd < 0; i++) {
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", i);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (strcmp(target, t.path) == 0) fd = i;
  }
  assert_true(fd >= 0);
  assert_int_equal(close(fd), 0);
  char other[700];
  snprintf(other, sizeof other, "%s/other.txt", t.dir);
  int ofd = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(ofd >= 0);
  if (ofd != fd) {
    assert_int_equal(dup2(ofd, fd), fd);
    close(ofd);
  }
  for (int i = 0; i < 100; i++) tu_op("after_close", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_flush(t.trace), ETR_EIO);
  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  assert_int_equal(etr_trace_stats_get(t.trace, &st), 0);
  assert_int_equal(st.write_error, EBADF);
  assert_false(etr_trace_is_enabled(t.trace));
  assert_int_equal(etr_trace_close(t.trace), ETR_EIO);
  t.trace = NULL;
  struct stat sb;
  assert_int_equal(stat(other, &sb), 0);
  assert_int_equal(sb.st_size, 0);
  /* close() left the host's descriptor alone. */
  assert_int_equal(fcntl(fd, F_GETFD), 0);
  assert_int_equal(write(fd, "x", 1), 1);
  close(fd);
  assert_int_equal(count_on_disk(t.path, "\"before_close\""), 1);
  assert_int_equal(count_on_disk(t.path, "\"after_close\""), 0);
  tu_free(&t);
}

static void test_double_close(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  tu_op("once", NULL, 0, NULL, 0);
  etr_trace *h = t.trace;
  tu_close_ok(&t);
  assert_int_equal(etr_trace_close(h), ETR_ESTATE);
  assert_int_equal(etr_trace_enable(h), ETR_ESTATE);
  assert_int_equal(etr_trace_flush(h), ETR_ESTATE);
  assert_false(etr_trace_is_enabled(h));
  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  assert_int_equal(etr_trace_stats_get(h, &st), 0);
  assert_int_equal(st.ops_recorded, 1); /* the final counters */
  /* A new trace never gets the handle of a closed one. */
  tu_trace t2;
  tu_open(&t2, NULL);
  assert_ptr_not_equal(t2.trace, h);
  assert_int_equal(etr_trace_close(h), ETR_ESTATE);
  assert_true(etr_trace_is_enabled(t2.trace));
  tu_close_ok(&t2);
  assert_int_equal(tu_count(&t, "once"), 1);
  tu_free(&t2);
  tu_free(&t);
}

/* ---- fatal signals ---- */

static int sig_of(const char *name) {
  return !strcmp(name, "SEGV")                                   ? SIGSEGV
         : !strcmp(name, "BUS")                                  ? SIGBUS
         : !strcmp(name, "ABRT")                                 ? SIGABRT
         : !strcmp(name, "TERM")                                 ? SIGTERM
         : !strcmp(name, "FPE")                                  ? SIGFPE
         : !strcmp(name, "ILL")                                  ? SIGILL
         : !strcmp(name, "HUP")                                  ? SIGHUP
         : !strcmp(name, "QUIT")                                 ? SIGQUIT
         : !strcmp(name, "PIPE")                                 ? SIGPIPE
         : !strcmp(name, "XCPU")                                 ? SIGXCPU
         : !strncmp(name, "STACK", 5) || !strcmp(name, "TSTACK") ? SIGSEGV
                                                                 : SIGINT;
}

/* A host handler that _exits, at the first signal of its kind: etr finalized the file
 * before it ran. */
static void host_exit_case(const char *path, int status) {
  (void)status;
  assert_int_equal(count_on_disk(path, "\"signal\":"), 1);
  tu_assert_valid(ETR_TOOL, path);
  tu_trace t;
  memset(&t, 0, sizeof t);
  snprintf(t.path, sizeof t.path, "%s", path);
  tu_load(&t);
  assert_int_equal(tu_count(&t, "before_signal"), 100);
  assert_int_equal(tu_count(&t, "child_of_open"), 5);
  assert_int_equal(tu_count(&t, "[etr|signal|unfinished]"), 1); /* open_at_signal's place */
  tu_free(&t);
}

/* gz: the trace is path.json.gz (gzip output: the footer written at the signal is a member
 * of its own, cut off again when the process goes on). */
static void signal_case_gz(const char *signame, const char *how, bool gz) {
  char dir[256], path[400];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/trace.json%s", dir, gz ? ".gz" : "");
  int sig = sig_of(signame);
  const char *args[] = {"signal", path, signame, how, NULL};
  /* A sanitizer's own SIGSEGV/SIGBUS handler, installed before ours, would be a host's
   * handler that reports and exits: the file would not be finalized (docs/RELIABILITY.md).
   * Off, so that "default" means the default action under a sanitizer too. */
  const char *env[] = {
      "ASAN_OPTIONS=detect_leaks=0:handle_abort=0:handle_segv=0:handle_sigbus=0:"
      "handle_sigfpe=0:handle_sigill=0",
      "TSAN_OPTIONS=handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0", NULL};
  int status = tu_run(TRACE_HELPER, args, env, NULL);
  /* A host handler that returns from abort()'s SIGABRT does not save the process. */
  bool survives = !strcmp(how, "host-return") && sig != SIGABRT;
  if (!strcmp(how, "host-exit")) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 7)
      fail_msg("SIG%s: status 0x%x, expected the host handler's exit 7", signame, status);
    host_exit_case(path, status);
    tu_rmdir(dir);
    return;
  } else if (!survives) {
    /* The signal went on to its default action: the process died of it. */
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == sig))
      fail_msg("SIG%s: status 0x%x, expected death by signal %d", signame, status, sig);
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fail_msg("SIG%s: status 0x%x, expected the program to go on and exit 0", signame, status);
  }
  if (!strncmp(how, "host-dfl", 8)) {
    /* The first signal of its kind: etr finalized the file before the host's handler ran
     * (a handler that kills the process itself finds it whole). After the host's handler
     * had resolved one (learnt): it ran first, on a file nobody had touched, and etr
     * finalized the file once it had given the signal back to the default action. */
    bool learnt = !strcmp(how, "host-dfl-learnt");
    char note[420];
    snprintf(note, sizeof note, "%s.host", path);
    size_t nlen;
    char *seen = tu_read_file(note, &nlen);
    assert_non_null(seen);
    if (strcmp(seen, learnt ? "unsealed\n" : "sealed\n") != 0)
      fail_msg("SIG%s (%s): the host's handler found the file %s", signame, how, seen);
    free(seen);
  }
  tu_trace t;
  memset(&t, 0, sizeof t);
  snprintf(t.path, sizeof t.path, "%s", path);
  if (gz) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fgetc(f), 0x1f); /* gzip magic */
    assert_int_equal(fgetc(f), 0x8b);
    fclose(f);
    t.text = tu_read_gz(path, &t.len); /* every member, in order */
    assert_non_null(t.text);
  }
  tu_load(&t); /* parses the whole file and checks the ctrl_deps tree */
  assert_int_equal(tu_count(&t, "before_signal"), 100);
  assert_int_equal(tu_count(&t, TU_PROCESS_NAME), 1);
  assert_true(tu_count(&t, "spin_op") > 0);
  json_t *etr = json_object_get(t.root, "etr");
  assert_non_null(etr);
  /* The op open at the signal has 5 children in the file: it is there too, whole (the
   * process went on) or as a placeholder (before, the children named a parent the file did
   * not hold, and tu_load and validate failed). */
  assert_int_equal(tu_count(&t, "child_of_open"), 5);
  if (survives) {
    /* The process went on: the footer written at the signal was replaced at close. */
    assert_int_equal(tu_count(&t, "after_signal"), 100);
    assert_int_equal(tu_count(&t, "open_at_signal"), 1);
    assert_int_equal(tu_count(&t, "[etr|signal|unfinished]"), 0);
    assert_null(json_object_get(etr, "signal"));
  } else {
    assert_int_equal(tu_count(&t, "open_at_signal"), 0);
    assert_int_equal(tu_count(&t, "[etr|signal|unfinished]"), 1);
    assert_int_equal(json_integer_value(json_object_get(etr, "signal")), sig);
  }
  /* `etr validate --strict` accepts it as it is. */
  tu_assert_valid(ETR_TOOL, path);
  tu_free(&t);
  tu_rmdir(dir);
}

/* One signal case: the signal, what the host does about it (signal_case_gz's how), gzip. */
typedef struct signal_args {
  const char *signame, *how;
  bool gz;
} signal_args;

static void test_signal(void **state) {
  const signal_args *a = *state;
  signal_case_gz(a->signame, a->how, a->gz);
}

/* A cmocka test called test_name that runs test_signal on these arguments. */
#define SIGNAL_TEST(test_name, sig, handling, gzip)                                 \
  {                                                                                 \
    .name = #test_name, .test_func = test_signal, .initial_state = &(signal_args) { \
      sig, handling, gzip                                                           \
    }                                                                               \
  }

/* ---- a full disk ---- */

/* The file size limit (RLIMIT_FSIZE) makes write(2) take what fits and then fail, as a
 * full disk does, at a chosen size and without root. In a child: record until the writer
 * fails, report nodes_written. The file must end on a node boundary (etr repair drops no
 * byte) and hold exactly the nodes reported written, and (plain output) every node that fit.
 * gz: the same with gzip output, cut back to where the straddling flush began. */
static void full_disk_case(bool gz, unsigned flush_kb) {
  char dir[256], path[400], fixed[400];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/full.json%s", dir, gz ? ".gz" : "");
  snprintf(fixed, sizeof fixed, "%s/full.fixed.json", dir);
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(pfd[0]);
    struct rlimit rl = {300 * 1024, 300 * 1024};
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
    etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
    opt.flush_kb = flush_kb; /* one of the flushes straddles the limit */
    etr_trace *t;
    if (etr_trace_open(path, &opt, &t) != 0 || etr_trace_enable(t) != 0) _exit(4);
    static int impl, stor;
    const int64_t sz[1] = {16};
    etr_tensor x = {&impl, &stor, 0, 16, 4, "float", "cpu", 1, sz, NULL};
    etr_value in[2] = {etr_value_tensor(&x), etr_value_string("a payload to fill the disk")};
    int rc = 0;
    for (int round = 0; round < 10000 && rc == 0; round++) {
      for (int i = 0; i < 50; i++) tu_op("disk_op", in, 2, in, 1);
      rc = etr_trace_flush(t);
    }
    etr_trace_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    int crc = etr_trace_close_stats(t, &st);
    dprintf(pfd[1], "%d %d %llu %llu\n", rc, crc, (unsigned long long)st.nodes_written,
            (unsigned long long)st.nodes_dropped);
    _exit(st.write_error == EFBIG ? 0 : 5);
  }
  close(pfd[1]);
  char line[128] = "";
  FILE *in = fdopen(pfd[0], "r");
  assert_non_null(in);
  if (!fgets(line, sizeof line, in)) line[0] = '\0';
  fclose(in);
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("child: status 0x%x (%s)", status, line);
  int rc, crc;
  unsigned long long written, dropped;
  assert_int_equal(sscanf(line, "%d %d %llu %llu", &rc, &crc, &written, &dropped), 4);
  assert_int_equal(rc, ETR_EIO);
  assert_int_equal(crc, ETR_EIO);
  assert_true(dropped > 0);
  struct stat fst;
  assert_int_equal(stat(path, &fst), 0);
  assert_true(fst.st_size <= 300 * 1024);
  /* Plain output keeps the nodes of the straddling flush that fit: the file is full but
   * for less than a node (a node here is under 1 KiB). Before, the flush was taken back
   * whole, up to flush_kb lost. */
  if (!gz && fst.st_size < 300 * 1024 - 1024)
    fail_msg("a flush of %u KiB across the limit left the file at %lld bytes of %d", flush_kb,
             (long long)fst.st_size, 300 * 1024);
  /* etr repair keeps every complete node and says how many bytes it dropped: none. */
  char out[600];
  snprintf(out, sizeof out, "%s/repair.txt", dir);
  const char *rargs[] = {"repair", path, "-o", fixed, NULL};
  int saved = dup(2);
  int ofd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(ofd, 2);
  int rs = tu_run(ETR_TOOL, rargs, NULL, NULL);
  dup2(saved, 2);
  close(saved);
  close(ofd);
  if (!WIFEXITED(rs) || WEXITSTATUS(rs) != 0) fail_msg("etr repair %s: status 0x%x", path, rs);
  size_t rlen;
  char *report = tu_read_file(out, &rlen);
  assert_non_null(report);
  if (!strstr(report, "dropped 0 bytes")) fail_msg("the file ends inside a node: %s", report);
  free(report);
  tu_trace t;
  tu_load_path(&t, fixed);
  size_t nodes = json_array_size(t.nodes);
  size_t placeholders = tu_count(&t, "[etr|repair|unfinished]");
  /* Every node but the process node repair added (and placeholders) was reported written. */
  assert_int_equal(nodes - 1 - placeholders, written);
  tu_free(&t);
  tu_rmdir(dir);
}

static void test_full_disk_exact(void **state) {
  (void)state;
  full_disk_case(false, 7);
  full_disk_case(false, 128); /* (the default is 512: one flush may hold hundreds of nodes) */
}

static void test_full_disk_exact_gzip(void **state) {
  (void)state;
  full_disk_case(true, 7);
}

/* ---- kill -9 ---- */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* One round: the helper records on 3 threads and prints nodes_written; kill it after
 * delay_ms, repair the file, and check that every node reported written is there. */
static void kill_round(const char *dir, int round, int delay_ms, uint64_t *reported_out,
                       uint64_t *recovered_out) {
  char path[400], fixed[400];
  /* Odd rounds write gzip: whole members up to the kill, which repair reads like any file.
   * Every third round writes a binary log, made into the trace by etr convert. */
  bool binary = round % 3 == 2;
  snprintf(path, sizeof path, "%s/kill%d%s", dir, round,
           binary      ? ".etr"
           : round % 2 ? ".json.gz"
                       : ".json");
  snprintf(fixed, sizeof fixed, "%s/kill%d.fixed.json", dir, round);
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(pipefd[1], 1);
    close(pipefd[0]);
    close(pipefd[1]);
    unsetenv("ETR_TRACE");
    execl(TRACE_HELPER, TRACE_HELPER, "kill", path, "3", (char *)NULL);
    _exit(127);
  }
  close(pipefd[1]);
  FILE *in = fdopen(pipefd[0], "r");
  assert_non_null(in);
  uint64_t reported = 0;
  char line[64];
  int64_t start = -1;
  while (fgets(line, sizeof line, in)) {
    if (start < 0) start = tu_mono_ms(); /* the trace is open and recording */
    reported = strtoull(line, NULL, 10);
    if (tu_mono_ms() - start >= delay_ms) break;
  }
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  fclose(in);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const char *rargs[] = {binary ? "convert" : "repair", path, "-o", fixed, NULL};
  int rs = tu_run(ETR_TOOL, rargs, NULL, NULL);
  if (!WIFEXITED(rs) || WEXITSTATUS(rs) != 0)
    fail_msg("round %d: etr %s %s: status 0x%x", round, rargs[0], path, rs);
  const char *vargs[] = {"validate", "--strict", "--quiet", fixed, NULL};
  int vs = tu_run(ETR_TOOL, vargs, NULL, NULL);
  if (!WIFEXITED(vs) || WEXITSTATUS(vs) != 0)
    fail_msg("round %d: etr validate --strict %s: status 0x%x", round, fixed, vs);
  tu_trace t;
  tu_load_path(&t, fixed);
  /* Recovered nodes: ops and thread nodes (not the process node, not placeholders). Each
   * op at most once: (thread, seq_id) is unique. */
  uint64_t recovered = 0;
  size_t n = json_array_size(t.nodes), k_ops = 0;
  uint64_t *keys = calloc(n + 1, sizeof *keys);
  assert_non_null(keys);
  for (size_t i = 0; i < n; i++) {
    json_t *node = json_array_get(t.nodes, i);
    const char *name = tu_name(node);
    if (!strcmp(name, TU_PROCESS_NAME) || !strncmp(name, "[etr|", 5)) continue;
    recovered++;
    if (name[0] == 'k' && name[1] >= '0' && name[1] <= '9')
      keys[k_ops++] = ((uint64_t)(name[1] - '0') << 48) | (uint64_t)tu_attr_int(node, "seq_id");
  }
  qsort(keys, k_ops, sizeof *keys, cmp_u64);
  for (size_t i = 1; i < k_ops; i++)
    if (keys[i] == keys[i - 1])
      fail_msg("round %d: op %llx written twice", round, (unsigned long long)keys[i]);
  free(keys);
  /* Tracebacks: the repaired trace has the frames of every traceback its nodes name (a JSON
   * trace's tables are kept beside it as they grow, a binary log's in its records). */
  size_t with_tb = 0;
  for (size_t i = 0; i < n; i++)
    if (tu_attr(json_array_get(t.nodes, i), "traceback")) with_tb++;
  json_t *tbs = json_object_get(t.root, "tracebacks");
  json_t *etr = json_object_get(t.root, "etr");
  json_t *rep = json_object_get(etr, binary ? "stats" : "repair");
  json_t *lost = json_object_get(rep, "tracebacks_lost");
  if (with_tb && (!json_is_array(tbs) || json_integer_value(lost) != 0))
    fail_msg("round %d: %zu nodes with a traceback, tracebacks_lost %lld", round, with_tb,
             (long long)json_integer_value(lost));
  for (size_t i = 0; with_tb && i < json_array_size(tbs); i++)
    if (json_array_size(json_array_get(tbs, i)) == 0)
      fail_msg("round %d: traceback %zu has no frames", round, i);
  if (recovered < reported)
    fail_msg("round %d: %llu nodes reported written, %llu recovered", round,
             (unsigned long long)reported, (unsigned long long)recovered);
  *reported_out = reported;
  *recovered_out = recovered;
  tu_free(&t);
}

static void test_kill9_then_repair(void **state) {
  (void)state;
  int rounds = 12;
  const char *e = getenv("ETR_KILL_ROUNDS");
  if (e && atoi(e) > 0) rounds = atoi(e);
  char dir[256];
  tu_mkdtemp(dir, sizeof dir);
  unsigned seed = (unsigned)tu_mono_us();
  uint64_t total_reported = 0, total_recovered = 0;
  for (int r = 0; r < rounds; r++) {
    int delay = 10 + (int)(rand_r(&seed) % 300);
    uint64_t rep = 0, rec = 0;
    kill_round(dir, r, delay, &rep, &rec);
    total_reported += rep;
    total_recovered += rec;
    char p[500];
    snprintf(p, sizeof p, "%s/kill%d%s", dir, r,
             r % 3 == 2 ? ".etr"
             : r % 2    ? ".json.gz"
                        : ".json");
    unlink(p);
    snprintf(p, sizeof p, "%s/kill%d.fixed.json", dir, r);
    unlink(p);
  }
  print_message(
      "kill -9: %d rounds, %llu nodes reported written, %llu recovered by etr repair or convert\n",
      rounds, (unsigned long long)total_reported, (unsigned long long)total_recovered);
  tu_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_on_disk_at_open),
      cmocka_unit_test(test_reserve_given_back_at_close),
      cmocka_unit_test(test_reserve_given_back_gz_and_ring),
      cmocka_unit_test(test_timed_flush_idle_thread),
      cmocka_unit_test(test_no_timed_flush),
      cmocka_unit_test(test_flush_all_threads),
      cmocka_unit_test(test_fd_closed_and_reused),
      cmocka_unit_test(test_double_close),
      SIGNAL_TEST(test_sigsegv, "SEGV", "default", false),
      SIGNAL_TEST(test_sigbus, "BUS", "default", false),
      SIGNAL_TEST(test_sigabrt, "ABRT", "default", false),
      SIGNAL_TEST(test_sigterm, "TERM", "default", false),
      SIGNAL_TEST(test_sigint, "INT", "default", false),
      SIGNAL_TEST(test_sigfpe, "FPE", "default", false),
      SIGNAL_TEST(test_sigill, "ILL", "default", false),
      SIGNAL_TEST(test_sighup, "HUP", "default", false),
      SIGNAL_TEST(test_sigquit, "QUIT", "default", false),
      SIGNAL_TEST(test_sigpipe, "PIPE", "default", false),
      SIGNAL_TEST(test_sigxcpu, "XCPU", "default", false),
      SIGNAL_TEST(test_sigfpe_host_handler_restores_default, "FPE", "host-dfl", false),
      SIGNAL_TEST(test_stack_overflow, "STACK", "default", false),
      SIGNAL_TEST(test_stack_overflow_small_thread, "TSTACK", "default", false),
      SIGNAL_TEST(test_gzip_stack_overflow, "STACK", "default", true),
      SIGNAL_TEST(test_sigint_host_handler_returns, "INT", "host-return", false),
      SIGNAL_TEST(test_sigterm_host_handler_exits, "TERM", "host-exit", false),
      SIGNAL_TEST(test_sigsegv_host_handler_restores_default, "SEGV", "host-dfl", false),
      SIGNAL_TEST(test_sigbus_host_handler_restores_default, "BUS", "host-dfl", false),
      SIGNAL_TEST(test_sigterm_host_handler_reraises, "TERM", "host-dfl", false),
      SIGNAL_TEST(test_sigint_host_handler_reraises, "INT", "host-dfl", false),
      SIGNAL_TEST(test_sigterm_host_handler_learnt_reraises, "TERM", "host-dfl-learnt", false),
      SIGNAL_TEST(test_sigint_host_handler_learnt_reraises, "INT", "host-dfl-learnt", false),
      SIGNAL_TEST(test_sigabrt_host_handler_returns, "ABRT", "host-return", false),
      SIGNAL_TEST(test_gzip_sigsegv, "SEGV", "default", true),
      SIGNAL_TEST(test_gzip_sigint_host_handler_returns, "INT", "host-return", true),
      cmocka_unit_test(test_full_disk_exact),
      cmocka_unit_test(test_full_disk_exact_gzip),
      cmocka_unit_test(test_kill9_then_repair),
  };
  return cmocka_run_group_tests(tests, NULL, tu_cleanup);
}
