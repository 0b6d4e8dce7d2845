/* tests/trace/test_trace_tbbound.c — the traceback tables stay small enough for etr's own
 * reader, in every output mode.
 *
 * etr's reader takes a top-level value whole and skips one that needs more than its limit to
 * read (16 MiB by default, ETR_READER_LIMIT_MB), so `etr validate --strict` called a trace
 * with ~30,000 distinct stacks INVALID and `etr flame` refused it. The recorder now adds a
 * traceback to the tables only while they stay under 7/8 of that limit by the reader's
 * measure (src/observer/tbtable.c); one that would pass it is left out, its ops carry no
 * traceback attr, and tracebacks_cut counts it.
 *
 * Linked with its own copy of src/observer/tbtable.c compiled with ETR_TEST_HOOKS, which
 * bounds the tables for a reader limit of 1 MiB instead of 16, and the tools run with
 * ETR_READER_LIMIT_MB=1: 2^14 distinct stacks (a few thousand, not a few hundred thousand)
 * pass the bound. Each mode is checked: the JSON trace, .json.gz, the binary log through
 * `etr convert`, the flight recorder's dump, and `etr repair` of a trace cut short, whose
 * tables come from FILE.tables. A trace under the bound is checked to keep every traceback.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trace_util.h"

#ifndef ETR_TOOL
#error "built with ETR_TOOL"
#endif

/* Under TSan only the JSON and binary modes run (tsan_modes): the others share their
 * bound code and threads, and each records 2^DEEP ops with tracebacks, half of the suite's
 * longest TSan test; gcc, clang and ASan run them all. */

/* Recording: 2^depth ops, each under its own chain of calls through f and g (bit d of `path`
 * picks the callee at depth d), so each has a stack of its own. */
static long g_path;
static int g_depth;
__attribute__((noinline)) static void tb_g(int d);
__attribute__((noinline)) static void tb_leaf(void) { tu_op("tbbound::leaf", NULL, 0, NULL, 0); }
__attribute__((noinline)) static void tb_f(int d) {
  if (d == g_depth)
    tb_leaf();
  else if ((g_path >> d) & 1)
    tb_g(d + 1);
  else
    tb_f(d + 1);
  __asm__ volatile(""); /* not a tail call: the return address stays on the stack */
}
__attribute__((noinline)) static void tb_g(int d) {
  if (d == g_depth)
    tb_leaf();
  else if ((g_path >> d) & 1)
    tb_g(d + 1);
  else
    tb_f(d + 1);
  __asm__ volatile("");
}

static void record_paths(int depth) {
  g_depth = depth;
  for (g_path = 0; g_path < (1L << depth); g_path++) tb_f(0);
}

#define DEEP 14   /* 16384 stacks: about 9.6 MB of tables to read, past the test's bound (7 MiB) */
#define SHALLOW 6 /* 64 stacks: well under it */

/* Open a trace with a traceback on every op at dir/name (opt's other settings kept). */
static void open_named(tu_trace *t, etr_trace_options *opt, const char *name) {
  etr_traceback_options tb;
  etr_trace_options o;
  tu_traceback_options(&o, &tb);
  if (opt) {
    opt->traceback = &tb;
    o = *opt;
  }
  memset(t, 0, sizeof *t);
  tu_mkdtemp(t->dir, sizeof t->dir);
  snprintf(t->path, sizeof t->path, "%s/%s", t->dir, name);
  int rc = etr_trace_open(t->path, &o, &t->trace);
  if (rc != 0) fail_msg("etr_trace_open(%s) = %d (%s)", t->path, rc, etr_strerror(rc));
  assert_int_equal(etr_trace_enable(t->trace), 0);
}

static void close_stats(tu_trace *t, etr_trace_stats *st) {
  memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
  int rc = etr_trace_close_stats(t->trace, st);
  t->trace = NULL;
  if (rc != 0) fail_msg("etr_trace_close = %d (%s)", rc, etr_strerror(rc));
}

static void run_tool(const char *const *args, const char *const *env, const char *what) {
  int st = tu_run(ETR_TOOL, args, env, NULL);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("%s: etr %s exits %d", what, args[0], WIFEXITED(st) ? WEXITSTATUS(st) : 128);
}

/* What the tools must say of the trace at path, whose recording left out `cut` stacks of
 * 2^depth (cut < 0: the footer need not say, as a repaired trace's does not): valid under
 * --strict with either parser, flame writes its stacks, every traceback attr names an entry,
 * the ops without one are the stacks left out. */
static void check_trace(const char *dir, const char *path, int depth, int64_t cut) {
  const char *env_hand[] = {"ETR_READER_LIMIT_MB=1", NULL};
  const char *env_yajl[] = {"ETR_READER_LIMIT_MB=1", "ETR_READER_BACKEND=yajl", NULL};
  const char *validate[] = {"validate", "--strict", "--quiet", path, NULL};
  run_tool(validate, env_hand, path);
#if !defined(TU_ASAN) && !defined(TU_TSAN) /* (the yajl backend: gcc and clang stages) */
  run_tool(validate, env_yajl, path);
#else
  (void)env_yajl;
#endif
  char folded[600];
  snprintf(folded, sizeof folded, "%s/trace.folded", dir);
  const char *flame[] = {"flame", path, "-o", folded, NULL};
  run_tool(flame, env_hand, path);
  size_t flen = 0;
  char *ftext = tu_read_file(folded, &flen);
  assert_non_null(ftext);
  if (flen == 0) fail_msg("%s: etr flame wrote nothing", path);
  free(ftext);

  size_t len = 0;
  char *text = tu_read_gz(path, &len);
  if (!text) fail_msg("cannot read %s", path);
  json_error_t err;
  json_t *root = json_loadb(text, len, 0, &err);
  free(text);
  if (!root) fail_msg("%s: %s", path, err.text);
  size_t n_tbs = json_array_size(json_object_get(root, "tracebacks"));
  size_t with = 0, without = 0;
  json_t *nodes = json_object_get(root, "nodes"), *node;
  size_t i;
  json_array_foreach(nodes, i, node) {
    if (strcmp(json_string_value(json_object_get(node, "name")), "tbbound::leaf") != 0) continue;
    json_t *a = tu_attr(node, "traceback");
    if (!a) {
      without++;
      continue;
    }
    with++;
    json_int_t v = json_integer_value(json_object_get(a, "value"));
    if (v < 0 || (size_t)v >= n_tbs)
      fail_msg("%s: traceback %lld past the table (%zu)", path, (long long)v, n_tbs);
  }
  assert_int_equal(with + without, (size_t)1 << depth);
  json_t *stats = json_object_get(json_object_get(root, "etr"), "stats");
  json_t *foot = json_object_get(stats, "tracebacks_cut");
  if (cut >= 0) {
    assert_int_equal(without, (size_t)cut);
    assert_int_equal(with, n_tbs); /* each stack its own entry */
    if (cut == 0)
      assert_null(foot); /* a trace under the bound is written as before */
    else
      assert_int_equal(json_integer_value(foot), cut);
  } else {
    assert_true(without > 0);
  }
  json_decref(root);
}

/* Record 2^depth stacks into name (opt: NULL or the settings), close, check; the count of
 * stacks left out. */
static uint64_t record_check(etr_trace_options *opt, const char *name, int depth) {
  tu_trace t;
  open_named(&t, opt, name);
  record_paths(depth);
  etr_trace_stats st;
  close_stats(&t, &st);
  assert_int_equal(st.tracebacks, (uint64_t)1 << depth);
  assert_int_equal(st.tracebacks_unique + st.tracebacks_cut, (uint64_t)1 << depth);
  char path[600];
  snprintf(path, sizeof path, "%s", t.path);
  if (strstr(name, ".etr")) {
    snprintf(path, sizeof path, "%s/trace.json", t.dir);
    const char *conv[] = {"convert", t.path, "-o", path, NULL};
    run_tool(conv, NULL, "etr convert");
  }
  check_trace(t.dir, path, depth, (int64_t)st.tracebacks_cut);
  tu_rmdir(t.dir);
  return st.tracebacks_cut;
}

static void test_json(void **state) {
  (void)state;
  uint64_t cut = record_check(NULL, "trace.json", DEEP);
  assert_true(cut > 0 && cut < (1u << DEEP));
}

static void test_gzip(void **state) {
  (void)state;
#ifdef TU_TSAN
  skip(); /* (tsan_modes) */
#endif
  assert_true(record_check(NULL, "trace.json.gz", DEEP) > 0);
}

static void test_binary(void **state) {
  (void)state;
  assert_true(record_check(NULL, "trace.etr", DEEP) > 0);
}

static void test_ring(void **state) {
  (void)state;
#ifdef TU_TSAN
  skip(); /* (tsan_modes) */
#endif
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.ring_mb = 64; /* holds every op: none dropped */
  assert_true(record_check(&opt, "trace.json", DEEP) > 0);
}

/* A trace cut short (its file and FILE.tables as they were after a flush): `etr repair`
 * takes the tables from FILE.tables, which hold only what the bound let in. */
static void test_repair(void **state) {
  (void)state;
#ifdef TU_TSAN
  skip(); /* (tsan_modes) */
#endif
  tu_trace t;
  open_named(&t, NULL, "trace.json");
  record_paths(DEEP);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  char cut[600], cut_tables[640], tables[640], out[600], cmd[3000];
  snprintf(cut, sizeof cut, "%s/cut.json", t.dir);
  snprintf(cut_tables, sizeof cut_tables, "%s.tables", cut);
  snprintf(tables, sizeof tables, "%s.tables", t.path);
  snprintf(out, sizeof out, "%s/repaired.json", t.dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s' && cp '%s' '%s'", t.path, cut, tables, cut_tables);
  assert_int_equal(system(cmd), 0);
  etr_trace_stats st;
  close_stats(&t, &st);
  assert_true(st.tracebacks_cut > 0);
  const char *repair[] = {"repair", cut, "-o", out, NULL};
  run_tool(repair, NULL, "etr repair");
  check_trace(t.dir, out, DEEP, -1);
  tu_rmdir(t.dir);
}

/* Stacks left out are remembered (counted once each) up to a limit; past it a new stack is
 * left out without being kept and counted through a filter of hashes. Until 2026-11-28 each
 * was kept as long as the trace was open: a run whose stacks never repeat grew the writer
 * by about 100 bytes per stack, the tables full or not. With the limit at 256 (the test
 * hook), 2^DEEP stacks keep at most the published ones and 256 more; the count of those
 * left out is exact up to the filter's collisions (a few among thousands); the outputs are
 * as valid as ever (JSON, and the binary log, which asks twice per event). */
extern uint32_t etr__tbtab_test_cut_kept, etr__tbtab_test_seqs;
static void cut_not_kept(const char *name) {
  etr__tbtab_test_cut_kept = 256;
  tu_trace t;
  open_named(&t, NULL, name);
  record_paths(DEEP);
  etr_trace_stats st;
  close_stats(&t, &st);
  uint32_t kept = etr__tbtab_test_seqs;
  etr__tbtab_test_cut_kept = 65536;
  const uint64_t all = (uint64_t)1 << DEEP;
  fprintf(stderr, "%s: %llu published, %llu cut, %u site sequences kept\n", name,
          (unsigned long long)st.tracebacks_unique, (unsigned long long)st.tracebacks_cut, kept);
  assert_true(st.tracebacks_cut > 1000);
  assert_true(kept <= st.tracebacks_unique + 256);
  assert_true(st.tracebacks_unique + st.tracebacks_cut <= all);
  assert_true(st.tracebacks_unique + st.tracebacks_cut >= all - 64);
  char path[600];
  snprintf(path, sizeof path, "%s", t.path);
  if (strstr(name, ".etr")) {
    snprintf(path, sizeof path, "%s/trace.json", t.dir);
    const char *conv[] = {"convert", t.path, "-o", path, NULL};
    run_tool(conv, NULL, "etr convert");
  }
  check_trace(t.dir, path, DEEP, -1);
  tu_rmdir(t.dir);
}

static void test_cut_stacks_not_kept(void **state) {
  (void)state;
#ifdef TU_TSAN
  skip(); /* (tsan_modes: the writer's own code, on one thread) */
#endif
  cut_not_kept("trace.json");
  cut_not_kept("trace.etr");
}

/* Under the bound nothing changes: every op keeps its traceback, the footer has no
 * tracebacks_cut. */
static void test_under_bound(void **state) {
  (void)state;
  assert_int_equal(record_check(NULL, "trace.json", SHALLOW), 0);
  assert_int_equal(record_check(NULL, "trace.etr", SHALLOW), 0);
}

/* A forked child closes its copy of the trace while, in the parent, the writer is between
 * freeing one of its tables' indexes and naming the new one (held there by the test hook):
 * the child's copy names a freed block. Until 2026-11-28 the child's close freed its copy's
 * tables, and so that block a second time (glibc: "double free or corruption", the child
 * aborted); now it frees only its chunk lists. (The recording thread goes on meanwhile:
 * glibc's malloc and etr's fork handlers leave the child no lock held.) */
extern void (*etr__tbtab_test_rehash_gap)(uint32_t old_slots);
static sem_t gap_in, gap_out;
static atomic_int gap_armed;
static volatile int in_forked_child;
int __lsan_is_turned_off(void); /* (the child's copy is left, as documented) */
int __lsan_is_turned_off(void) { return in_forked_child; }

/* (an index of 4 KiB or more: glibc checks a block freed twice outside its per-thread cache,
 * which holds blocks up to 1 KiB and does not see one freed by another thread) */
static void rehash_gap(uint32_t old_slots) {
  if (old_slots < 1024 || in_forked_child || !atomic_exchange(&gap_armed, 0)) return;
  sem_post(&gap_in);
  while (sem_wait(&gap_out) != 0) {
  }
}

static void *record_deep(void *arg) {
  (void)arg;
  record_paths(DEEP);
  return NULL;
}

static void test_fork_child_closes_tables_half_replaced(void **state) {
  (void)state;
#if defined(TU_TSAN) || defined(TU_ASAN)
  skip(); /* (a forked child that goes on: trace_util.h) */
#endif
  assert_int_equal(sem_init(&gap_in, 0, 0), 0);
  assert_int_equal(sem_init(&gap_out, 0, 0), 0);
  etr__tbtab_test_rehash_gap = rehash_gap;
  atomic_store(&gap_armed, 1);
  tu_trace t;
  open_named(&t, NULL, "trace.json");
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, record_deep, NULL), 0);
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 60;
  int waited;
  while ((waited = sem_timedwait(&gap_in, &dl)) != 0 && errno == EINTR) {
  }
  if (waited != 0) {
    etr__tbtab_test_rehash_gap = NULL;
    pthread_join(th, NULL);
    fail_msg("the writer never replaced an index");
  }
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    in_forked_child = 1;
    _exit(etr_trace_close(t.trace) == ETR_EFORKED ? 0 : 1);
  }
  int status = 0;
  int hung = tu_wait(pid, 30, &status);
  sem_post(&gap_out); /* the writer goes on */
  assert_int_equal(pthread_join(th, NULL), 0);
  etr__tbtab_test_rehash_gap = NULL;
  etr_trace_stats st;
  close_stats(&t, &st);
  if (hung) fail_msg("the child still closing after 30 s: killed");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the child's close: status 0x%x (%s %d)", status,
             WIFSIGNALED(status) ? "signal" : "exit",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  check_trace(t.dir, t.path, DEEP, (int64_t)st.tracebacks_cut);
  tu_rmdir(t.dir);
  sem_destroy(&gap_in);
  sem_destroy(&gap_out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_under_bound),
      TU_TEST(test_json),
      TU_TEST(test_gzip),
      TU_TEST(test_binary),
      TU_TEST(test_ring),
      TU_TEST(test_repair),
      TU_TEST(test_cut_stacks_not_kept),
      TU_TEST(test_fork_child_closes_tables_half_replaced),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
