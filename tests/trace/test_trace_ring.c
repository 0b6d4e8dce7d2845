/* tests/trace/test_trace_ring.c — the flight recorder (ring_mb, ETR_TRACE_RING_MB).
 *
 *  - at close the file holds exactly the latest ops, a contiguous run ending with the last
 *    one, and ring_dropped counts the others; memory does not grow with the run;
 *  - etr_trace_dump while an op is open: a valid trace (the open op a placeholder, named by
 *    its children), recording goes on, and the next dump replaces the file;
 *  - forward ops (fw_parent) the ring dropped get a placeholder too;
 *  - a fatal signal writes the ring (signals on), etr_trace_dump without a ring is a flush.
 *  - a dump that fails part way leaves the previous dump whole.
 *  - a host that starts and ends threads all the time: the node of a thread that is gone
 *    leaves the ring with its last op, so memory and dumps do not grow with the threads the
 *    process ever had; a backward op naming such a thread still resolves.
 * TRACE_HELPER is the helper program (trace_helper.c), ETR_TOOL the etr command. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace_util.h"

#ifndef TRACE_HELPER
#error "TRACE_HELPER must name the helper program"
#endif

#define PLACEHOLDER "[etr|ring|unfinished]"

static int tensor_impl[4], tensor_stor[4];

static void op_seq(const char *name, int64_t seq, uint64_t fw_parent) {
  const int64_t sz[2] = {16, 16};
  etr_tensor t = {
      &tensor_impl[seq % 4], &tensor_stor[seq % 4], 0, 256, 4, "float", "cpu", 2, sz, NULL};
  etr_value in[2] = {etr_value_tensor(&t), etr_value_int(seq)};
  etr_record r;
  etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
  r.seq_nr = seq;
  r.inputs = in;
  r.n_inputs = 2;
  (void)fw_parent;
  etr_record_begin(&r);
  etr_record_end(&r);
}

/* seq_id of every node named name, in file order; how many. */
static size_t seqs_of(const tu_trace *t, const char *name, int64_t *out, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < json_array_size(t->nodes); i++) {
    json_t *node = json_array_get(t->nodes, i);
    if (strcmp(tu_name(node), name) == 0 && n < max) out[n++] = tu_attr_int(node, "seq_id");
  }
  return n;
}

static void test_keeps_the_latest(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.ring_mb = 1;
  tu_open(&t, &o);
  const int64_t total = 30000;
  for (int64_t i = 0; i < total; i++) op_seq("r::op", i, 0);
  tu_close_ok(&t); /* loads the file and checks that every ctrl_deps resolves */
  static int64_t seq[40000];
  size_t n = seqs_of(&t, "r::op", seq, 40000);
  assert_true(n > 500);
  assert_true(n < (size_t)total / 2);
  for (size_t i = 0; i < n; i++) assert_int_equal(seq[i], total - (int64_t)n + (int64_t)i);
  assert_int_equal(tu_stat(&t, "ring_dropped"), total - (int64_t)n);
  assert_int_equal(tu_stat(&t, "ops_recorded"), total);
  assert_int_equal(tu_stat(&t, "nodes_written"), (int64_t)tu_node_count(&t));
  tu_free(&t);
}

static void test_dump_with_an_open_op(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.ring_mb = 1;
  tu_open(&t, &o);
  etr_record outer;
  etr_record_init(&outer, "r::outer", ETR_SCOPE_USER_SCOPE);
  etr_record_begin(&outer);
  for (int64_t i = 0; i < 3000; i++) op_seq("r::early", i, 0);
  assert_int_equal(etr_trace_dump(t.trace), 0);

  /* the file now: a valid trace whose open op is a placeholder */
  tu_trace d;
  tu_load_path(&d, t.path);
  tu_check_tree(&d);
  json_t *ph = tu_node(&d, PLACEHOLDER);
  assert_non_null(ph);
  assert_int_equal(tu_attr_int(ph, "etr_incomplete"), 1);
  assert_null(tu_find(&d, "r::outer"));
  json_t *child = tu_find(&d, "r::early");
  assert_non_null(child);
  assert_int_equal(tu_ctrl_deps(child), tu_id(ph));
  json_int_t outer_id = tu_id(ph);
  /* the placeholder spans its children: [ts, ts + inclusive_dur] holds each */
  json_int_t ts = json_integer_value(json_object_get(ph, "ts"));
  json_int_t end = ts + json_integer_value(json_object_get(ph, "inclusive_dur"));
  for (size_t i = 0; i < json_array_size(d.nodes); i++) {
    json_t *n = json_array_get(d.nodes, i);
    if (strcmp(tu_name(n), "r::early")) continue;
    json_int_t cts = json_integer_value(json_object_get(n, "ts"));
    assert_true(cts >= ts);
    assert_true(cts + json_integer_value(json_object_get(n, "inclusive_dur")) <= end);
  }
  tu_free(&d);

  /* recording goes on; at close the outer op is a real node with the same id */
  for (int64_t i = 0; i < 100; i++) op_seq("r::late", i, 0);
  etr_record_end(&outer);
  tu_close_ok(&t);
  json_t *real = tu_node(&t, "r::outer");
  assert_non_null(real);
  assert_int_equal(tu_id(real), outer_id);
  assert_null(tu_find(&t, PLACEHOLDER));
  assert_int_equal(tu_count(&t, "r::late"), 100);
  tu_free(&t);
}

/* A backward op names its forward op (fw_parent) on another thread. At a dump while that
 * op is still open, and its children long dropped by the ring, the name still resolves: to
 * a placeholder on the forward thread. */
static pthread_barrier_t fw_bar;
static uint64_t fw_thread_id;
static void *forward_thread(void *arg) {
  (void)arg;
  fw_thread_id = etr_thread_id();
  etr_record outer;
  etr_record_init(&outer, "r::forward", ETR_SCOPE_FUNCTION);
  etr_record_begin(&outer);
  for (int64_t i = 0; i < 10; i++) op_seq("r::forward_child", i, 0);
  pthread_barrier_wait(&fw_bar); /* 1: open, with children */
  pthread_barrier_wait(&fw_bar); /* 2: the main thread has dumped */
  etr_record_end(&outer);
  return NULL;
}

static void test_forward_op_placeholder(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.ring_mb = 1;
  tu_open(&t, &o);
  pthread_barrier_init(&fw_bar, NULL, 2);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, forward_thread, NULL), 0);
  pthread_barrier_wait(&fw_bar);
  assert_int_equal(etr_trace_flush(t.trace), 0);               /* the children reach the ring */
  for (int64_t i = 0; i < 20000; i++) op_seq("r::fill", i, 0); /* and are dropped */
  etr_record bw;
  etr_record_init(&bw, "r::backward", ETR_SCOPE_BACKWARD_FUNCTION);
  bw.fw_tid = fw_thread_id;
  etr_record_begin(&bw);
  etr_record_end(&bw);
  assert_int_equal(etr_trace_dump(t.trace), 0);
  tu_trace d;
  tu_load_path(&d, t.path);
  tu_check_tree(&d);
  json_t *b = tu_node(&d, "r::backward");
  assert_non_null(b);
  json_int_t fw = tu_attr_int(b, "fw_parent");
  assert_true(fw > 1);
  assert_null(tu_find(&d, "r::forward"));
  assert_null(tu_find(&d, "r::forward_child"));
  json_t *ph = tu_node_by_id(&d, fw);
  assert_non_null(ph);
  assert_string_equal(tu_name(ph), PLACEHOLDER);
  assert_int_equal(tu_attr_int(ph, "tid"), (json_int_t)fw_thread_id);
  tu_free(&d);
  pthread_barrier_wait(&fw_bar);
  pthread_join(th, NULL);
  pthread_barrier_destroy(&fw_bar);
  tu_close_ok(&t);
  json_t *real = tu_node(&t, "r::forward"); /* at close it ended: a node of its own */
  assert_non_null(real);
  assert_int_equal(tu_id(real), fw);
  tu_free(&t);
}

static void test_fatal_signal_writes_the_ring(void **state) {
  (void)state;
  char dir[256], path[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ring.json", dir);
  const char *args[] = {"signal", path, "ABRT", "default", NULL};
  const char *env[] = {"ETR_HELPER_RING_MB=1", NULL};
  int st = tu_run(TRACE_HELPER, args, env, NULL);
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  tu_trace t;
  tu_load_path(&t, path);
  tu_check_tree(&t);
  assert_int_equal(tu_count(&t, "before_signal"), 100);
  json_t *etr = json_object_get(t.root, "etr");
  assert_int_equal(json_integer_value(json_object_get(etr, "signal")), SIGABRT);
  tu_free(&t);
  tu_rmdir(dir);
}

/* A dump never destroys the previous complete one before the new one is complete. A dump
 * that fails part way (a file-size limit here, as a full disk would; a kill -9 is the same
 * moment) leaves the file as the previous dump left it, a complete trace, and no temporary
 * file beside it; recording stops as on any write error. Before, a dump cut the file to
 * nothing first, so it held a footer-less prefix of the new dump (or nothing at all). */
#ifndef ETR_TOOL
#define ETR_TOOL "etr"
#endif
static void failed_dump_keeps_the_previous(const char *name) {
  char dir[256], path[400];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  bool binary = strstr(name, ".etr") != NULL;
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(pfd[0]);
    struct rlimit rl = {256 * 1024, 256 * 1024};
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
    etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
    o.ring_mb = 8;
    o.flush_kb = 16; /* (the failing dump writes many pieces before the limit) */
    etr_trace *tr;
    if (etr_trace_open(path, &o, &tr) != 0 || etr_trace_enable(tr) != 0) _exit(4);
    for (int64_t i = 0; i < 200; i++) op_seq("r::first", i, 0);
    int rc1 = etr_trace_dump(tr); /* fits */
    for (int64_t i = 0; i < 20000; i++) op_seq("r::second", i, 0);
    int rc2 = etr_trace_dump(tr); /* does not */
    etr_trace_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    int crc = etr_trace_close_stats(tr, &st);
    dprintf(pfd[1], "%d %d %d %d\n", rc1, rc2, crc, st.write_error);
    _exit(0);
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
    fail_msg("%s: child status 0x%x (%s)", name, status, line);
  int rc1, rc2, crc, werr;
  assert_int_equal(sscanf(line, "%d %d %d %d", &rc1, &rc2, &crc, &werr), 4);
  assert_int_equal(rc1, 0);
  assert_int_equal(rc2, ETR_EIO);
  assert_int_equal(crc, ETR_EIO);
  assert_int_equal(werr, EFBIG);
  assert_int_equal(tu_dir_entries(dir), 1); /* no temporary file left */
  tu_trace t;
  if (binary) {
    char out[600];
    snprintf(out, sizeof out, "%s/converted.json", dir);
    tu_convert_load(&t, ETR_TOOL, path, out);
    assert_null(json_object_get(tu_stats(&t), "log_cut")); /* a whole log, with its trailer */
  } else {
    memset(&t, 0, sizeof t);
    snprintf(t.path, sizeof t.path, "%s", path);
    t.text = tu_read_gz(path, &t.len); /* (plain JSON too) */
    tu_load(&t);
    tu_assert_valid(ETR_TOOL, path);
  }
  assert_int_equal(tu_count(&t, "r::first"), 200);
  assert_int_equal(tu_count(&t, "r::second"), 0);
  tu_free(&t);
  tu_rmdir(dir);
}

static void test_failed_dump_keeps_the_previous(void **state) {
  (void)state;
#ifndef ETR_TOOL
  skip(); /* (the etr command validates and converts the files) */
#endif
  failed_dump_keeps_the_previous("ring.json");
  failed_dump_keeps_the_previous("ring.json.gz");
  failed_dump_keeps_the_previous("ring.etr");
}

/* A dump replaces the file it is renamed over, not a symbolic link that names it, and the
 * file keeps its mode; nothing is left beside it. */
static void test_dump_through_a_symlink(void **state) {
  (void)state;
  char dir[256], real[400], link[400];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(real, sizeof real, "%s/real.json", dir);
  snprintf(link, sizeof link, "%s/link.json", dir);
  int fd = open(real, O_WRONLY | O_CREAT | O_TRUNC, 0640);
  assert_true(fd >= 0);
  assert_int_equal(fchmod(fd, 0640), 0); /* (whatever the umask) */
  close(fd);
  assert_int_equal(symlink("real.json", link), 0);
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.ring_mb = 1;
  etr_trace *tr;
  assert_int_equal(etr_trace_open(link, &o, &tr), 0);
  assert_int_equal(etr_trace_enable(tr), 0);
  for (int64_t i = 0; i < 10; i++) op_seq("r::linked", i, 0);
  assert_int_equal(etr_trace_dump(tr), 0);
  for (int64_t i = 0; i < 10; i++) op_seq("r::linked", i, 0);
  assert_int_equal(etr_trace_close(tr), 0);
  struct stat st;
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_int_equal(stat(real, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0640);
  assert_int_equal(tu_dir_entries(dir), 2);
  tu_trace t;
  tu_load_path(&t, real);
  assert_int_equal(tu_count(&t, "r::linked"), 20);
  tu_free(&t);
  tu_rmdir(dir);
}

static void test_dump_without_a_ring(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  for (int64_t i = 0; i < 10; i++) op_seq("r::plain", i, 0);
  assert_int_equal(etr_trace_dump(t.trace), 0); /* a flush */
  assert_int_equal(etr_trace_dump(NULL), ETR_EINVAL);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "r::plain"), 10);
  assert_null(json_object_get(tu_stats(&t), "ring_dropped")); /* only with a ring */
  tu_free(&t);
}

/* Thread churn: 3000 short-lived threads, one op each (a 6 KB string: the 1 MiB ring holds
 * about 170 of them), joined one by one. Until 2026-11-28 the ring kept every thread's node
 * to the end: each dump held all 3000 (100 000 threads: an 85 MB dump of a 1 MiB ring, 65 MB
 * of memory). Now a thread's node goes once the thread is gone and its ops left the ring. A
 * forward thread gone that long is still named by a later backward op (fw_parent): a
 * placeholder, as for a forward op the ring dropped. */
static char churn_text[6000];
static void *churn_thread(void *arg) {
  (void)arg;
  etr_value in[1] = {etr_value_string(churn_text)};
  etr_record r;
  etr_record_init(&r, "r::churn", ETR_SCOPE_FUNCTION);
  r.inputs = in;
  r.n_inputs = 1;
  etr_record_begin(&r);
  etr_record_end(&r);
  return NULL;
}

static void *forward_gone_thread(void *arg) {
  (void)arg;
  fw_thread_id = etr_thread_id();
  op_seq("r::forward_gone", 0, 0);
  return NULL;
}

static size_t thread_nodes(const tu_trace *t) { return tu_count(t, TU_THREAD_NAME); }

static void test_exited_threads_leave_the_ring(void **state) {
  (void)state;
  memset(churn_text, 'x', sizeof churn_text - 1);
  tu_trace t;
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.ring_mb = 1;
  tu_open(&t, &o);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, forward_gone_thread, NULL), 0);
  pthread_join(th, NULL);
  const int threads = 3000;
  for (int i = 0; i < threads; i++) {
    assert_int_equal(pthread_create(&th, NULL, churn_thread, NULL), 0);
    pthread_join(th, NULL);
  }
  etr_record bw;
  etr_record_init(&bw, "r::backward_late", ETR_SCOPE_BACKWARD_FUNCTION);
  bw.fw_tid = fw_thread_id;
  etr_record_begin(&bw);
  etr_record_end(&bw);
  assert_int_equal(etr_trace_dump(t.trace), 0);
  tu_trace d;
  tu_load_path(&d, t.path);
  tu_check_tree(&d);
  size_t kept = tu_count(&d, "r::churn");
  assert_true(kept > 50 && kept < 1000);
  /* the threads of the ops kept, the main thread, and those not pruned yet (under 64 KiB
   * of nodes, about 400, or twice what the last prune kept) */
  fprintf(stderr, "dump: %zu thread nodes, %zu churn ops\n", thread_nodes(&d), kept);
  assert_true(thread_nodes(&d) < 1500);
  json_t *b = tu_node(&d, "r::backward_late");
  assert_non_null(b);
  assert_non_null(tu_node_by_id(&d, tu_attr_int(b, "fw_parent")));
  tu_free(&d);
#ifdef ETR_TOOL
  tu_assert_valid(ETR_TOOL, t.path);
#endif
  tu_close_ok(&t);
  assert_true(thread_nodes(&t) < 1500);
  assert_int_equal(tu_stat(&t, "threads"), threads + 2);
  assert_int_equal(tu_stat(&t, "ops_recorded"), threads + 2);
  assert_int_equal(tu_stat(&t, "nodes_dropped"), 0);
#ifdef ETR_TOOL
  tu_assert_valid(ETR_TOOL, t.path);
#endif
  tu_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_keeps_the_latest),       TU_TEST(test_dump_with_an_open_op),
      TU_TEST(test_forward_op_placeholder), TU_TEST(test_fatal_signal_writes_the_ring),
      TU_TEST(test_dump_without_a_ring),    TU_TEST(test_failed_dump_keeps_the_previous),
      TU_TEST(test_dump_through_a_symlink), TU_TEST(test_exited_threads_leave_the_ring),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
