/* tests/trace/test_trace_tree.c — the op tree (docs/API.md): ctrl_deps of nested ops, ops of
 * other threads under their thread node, fw_parent / fw_tid for ops run on behalf of another
 * thread, and the order nodes are written in. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_util.h"

static void test_nesting(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record a, b, c;
  tu_begin(&a, "A", NULL, 0);
  tu_begin(&b, "B", NULL, 0);
  tu_begin(&c, "C", NULL, 0);
  tu_end(&c, NULL, 0);
  tu_op("C2", NULL, 0, NULL, 0);
  tu_end(&b, NULL, 0);
  tu_op("B2", NULL, 0, NULL, 0);
  tu_end(&a, NULL, 0);
  tu_op("D", NULL, 0, NULL, 0);
  tu_close_ok(&t);

  json_t *tn = tu_thread_node(&t, (json_int_t)etr_thread_id());
  assert_non_null(tn);
  json_t *na = tu_node(&t, "A"), *nb = tu_node(&t, "B"), *nc = tu_node(&t, "C"),
         *nc2 = tu_node(&t, "C2"), *nb2 = tu_node(&t, "B2"), *nd = tu_node(&t, "D");
  assert_int_equal(tu_ctrl_deps(nc), tu_id(nb));
  assert_int_equal(tu_ctrl_deps(nc2), tu_id(nb));
  assert_int_equal(tu_ctrl_deps(nb), tu_id(na));
  assert_int_equal(tu_ctrl_deps(nb2), tu_id(na));
  assert_int_equal(tu_ctrl_deps(na), tu_id(tn));
  assert_int_equal(tu_ctrl_deps(nd), tu_id(tn));
  assert_int_equal(tu_ctrl_deps(tn), 1);
  /* The thread node first (when the thread starts recording), then ops as they complete:
   * children before parents; the process node last. */
  assert_true(tu_node_index(&t, tn) < tu_node_index(&t, nc));
  assert_true(tu_node_index(&t, nc) < tu_node_index(&t, nc2));
  assert_true(tu_node_index(&t, nc2) < tu_node_index(&t, nb));
  assert_true(tu_node_index(&t, nb) < tu_node_index(&t, nb2));
  assert_true(tu_node_index(&t, nb2) < tu_node_index(&t, na));
  assert_true(tu_node_index(&t, na) < tu_node_index(&t, nd));
  assert_int_equal(tu_node_count(&t), 8);
  /* Sequential siblings draw increasing ids. */
  assert_true(tu_id(nc) < tu_id(nc2));
  assert_true(tu_id(na) < tu_id(nd));
  tu_free(&t);
}

struct nested_arg {
  uint64_t tid;
};

static void *thread_nested(void *p) {
  struct nested_arg *a = p;
  a->tid = etr_thread_id();
  etr_record o;
  tu_begin(&o, "T_outer", NULL, 0);
  tu_op("T_inner", NULL, 0, NULL, 0);
  tu_end(&o, NULL, 0);
  tu_op("T_flat", NULL, 0, NULL, 0);
  return NULL;
}

static void test_second_thread(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record m;
  tu_begin(&m, "M_open", NULL, 0); /* open on main while the other thread records */
  struct nested_arg arg = {0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, thread_nested, &arg), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  tu_end(&m, NULL, 0);
  tu_close_ok(&t);
  json_t *tn2 = tu_thread_node(&t, (json_int_t)arg.tid);
  json_t *tn1 = tu_thread_node(&t, (json_int_t)etr_thread_id());
  assert_non_null(tn1);
  assert_non_null(tn2);
  assert_true(tu_id(tn1) != tu_id(tn2));
  json_t *o = tu_node(&t, "T_outer"), *in = tu_node(&t, "T_inner"), *fl = tu_node(&t, "T_flat");
  assert_int_equal(tu_ctrl_deps(o), tu_id(tn2));
  assert_int_equal(tu_ctrl_deps(fl), tu_id(tn2));
  assert_int_equal(tu_ctrl_deps(in), tu_id(o));
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "M_open")), tu_id(tn1));
  assert_int_equal(tu_attr_int(o, "tid"), (json_int_t)arg.tid);
  assert_int_equal(tu_attr_int(in, "tid"), (json_int_t)arg.tid);
  assert_int_equal(tu_attr_int(tn2, "tid"), (json_int_t)arg.tid);
  assert_int_equal(tu_attr_int(o, "fw_parent"), 0);
  tu_free(&t);
}

/* Forward thread A keeps ops open; backward thread B records with fw_tid = A. */
struct fw_ctx {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stage;
  uint64_t a_tid, b_tid;
};

static void wait_stage(struct fw_ctx *c, int s) {
  pthread_mutex_lock(&c->mu);
  while (c->stage < s) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
}

static void set_stage(struct fw_ctx *c, int s) {
  pthread_mutex_lock(&c->mu);
  c->stage = s;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void bw_op(const char *name, uint64_t fw_tid) {
  etr_record r;
  etr_record_init(&r, name, ETR_SCOPE_BACKWARD_FUNCTION);
  if (etr_record_is_active(&r)) {
    r.fw_tid = fw_tid;
    r.seq_nr = 11;
  }
  etr_record_begin(&r);
  etr_record_end(&r);
}

static void *thread_a(void *p) {
  struct fw_ctx *c = p;
  c->a_tid = etr_thread_id();
  etr_record outer, inner;
  tu_begin(&outer, "fwd_outer", NULL, 0);
  set_stage(c, 1); /* B: record with only fwd_outer open */
  wait_stage(c, 2);
  tu_begin(&inner, "fwd_inner", NULL, 0);
  set_stage(c, 3); /* B: record with fwd_inner on top */
  wait_stage(c, 4);
  tu_end(&inner, NULL, 0);
  tu_end(&outer, NULL, 0);
  set_stage(c, 5); /* B: record with nothing open on A */
  return NULL;
}

static void *thread_b(void *p) {
  struct fw_ctx *c = p;
  c->b_tid = etr_thread_id();
  wait_stage(c, 1);
  bw_op("bwd_1", c->a_tid);
  set_stage(c, 2);
  wait_stage(c, 3);
  etr_record holder;
  tu_begin(&holder, "bwd_holder", NULL, 0);
  bw_op("bwd_2", c->a_tid);
  tu_end(&holder, NULL, 0);
  set_stage(c, 4);
  wait_stage(c, 5);
  bw_op("bwd_3", c->a_tid);
  bw_op("bwd_unknown", 999999);
  bw_op("bwd_none", 0);
  return NULL;
}

static void fw_parent_case(void) {
  tu_trace t;
  tu_open(&t, NULL);
  struct fw_ctx c;
  memset(&c, 0, sizeof c);
  pthread_mutex_init(&c.mu, NULL);
  pthread_cond_init(&c.cv, NULL);
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, thread_a, &c), 0);
  assert_int_equal(pthread_create(&tb, NULL, thread_b, &c), 0);
  assert_int_equal(pthread_join(ta, NULL), 0);
  assert_int_equal(pthread_join(tb, NULL), 0);
  bw_op("bwd_after_exit", c.a_tid); /* A has exited */
  pthread_mutex_destroy(&c.mu);
  pthread_cond_destroy(&c.cv);
  tu_close_ok(&t);

  json_t *fo = tu_node(&t, "fwd_outer"), *fi = tu_node(&t, "fwd_inner");
  json_t *b1 = tu_node(&t, "bwd_1"), *b2 = tu_node(&t, "bwd_2"), *b3 = tu_node(&t, "bwd_3");
  json_t *bu = tu_node(&t, "bwd_unknown"), *bn = tu_node(&t, "bwd_none");
  json_t *hold = tu_node(&t, "bwd_holder");
  json_t *tnb = tu_thread_node(&t, (json_int_t)c.b_tid);
  assert_non_null(tnb);
  assert_int_equal(tu_attr_int(b1, "fw_parent"), tu_id(fo));
  assert_int_equal(tu_attr_int(b1, "fw_tid"), (json_int_t)c.a_tid);
  assert_int_equal(tu_attr_int(b2, "fw_parent"), tu_id(fi));
  assert_int_equal(tu_attr_int(b2, "fw_tid"), (json_int_t)c.a_tid);
  /* A with nothing open, or gone: its thread node, as PyTorch's observer writes it */
  json_t *tna = tu_thread_node(&t, (json_int_t)c.a_tid);
  assert_non_null(tna);
  assert_int_equal(tu_attr_int(b3, "fw_parent"), tu_id(tna));
  assert_int_equal(tu_attr_int(b3, "fw_tid"), (json_int_t)c.a_tid);
  json_t *bx = tu_node(&t, "bwd_after_exit");
  assert_int_equal(tu_attr_int(bx, "fw_parent"), tu_id(tna));
  assert_int_equal(tu_attr_int(bu, "fw_parent"), 0);
  assert_int_equal(tu_attr_int(bu, "fw_tid"), 999999);
  assert_int_equal(tu_attr_int(bn, "fw_parent"), 0);
  assert_int_equal(tu_attr_int(bn, "fw_tid"), 0);
  /* ctrl_deps stays on B's own stack. */
  assert_int_equal(tu_ctrl_deps(b1), tu_id(tnb));
  assert_int_equal(tu_ctrl_deps(b2), tu_id(hold));
  assert_int_equal(tu_attr_int(b1, "tid"), (json_int_t)c.b_tid);
  assert_int_equal(tu_attr_int(b1, "seq_id"), 11);
  assert_int_equal(tu_attr_int(b1, "scope"), 1);
  /* Forward ops themselves have no fw_parent. */
  assert_int_equal(tu_attr_int(fo, "fw_parent"), 0);
  assert_int_equal(tu_ctrl_deps(fi), tu_id(fo));
  tu_free(&t);
}

static void test_fw_parent(void **state) {
  (void)state;
  fw_parent_case();
}

/* Thread ids count the threads a process ever had. Until 2026-11-28 the trace knew a
 * forward thread by its id only below 65 536: in a process that had had that many threads
 * (a server that starts a thread per request, even before the trace opened), every backward
 * op had fw_parent 0. The same case once the ids are past that, far enough that the
 * threads' slots are those of the first threads (the main thread's among them). */
static void *thread_id_only(void *p) {
  *(uint64_t *)p = etr_thread_id();
  return NULL;
}

static void test_fw_parent_past_65536_threads(void **state) {
  (void)state;
#ifdef TU_TSAN
  skip(); /* (65 600 threads take TSan 25 s; test_fw_parent runs the same case) */
#endif
  uint64_t id = 0;
  pthread_attr_t small; /* (a small stack: 65 600 threads, fast under ASan too) */
  pthread_attr_init(&small);
  pthread_attr_setstacksize(&small, 64 * 1024);
  while (id < 65536 + 64) {
    pthread_t th;
    assert_int_equal(pthread_create(&th, &small, thread_id_only, &id), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
  }
  pthread_attr_destroy(&small);
  fw_parent_case();
}

/* A forward thread whose id is 65 536 away from a live thread's, here the main thread's:
 * the slot of its id is the main thread's, which keeps it. Until 2026-11-28 a backward op
 * of the main thread then had fw_parent 0 for it; the trace now finds the forward thread
 * among its threads. */
static void *thread_fw_collide(void *p) {
  struct fw_ctx *c = p;
  c->a_tid = etr_thread_id();
  etr_record open;
  tu_begin(&open, "fwd_collide", NULL, 0);
  set_stage(c, 1); /* the main thread: a backward op for this one */
  wait_stage(c, 2);
  tu_end(&open, NULL, 0);
  return NULL;
}

static void test_fw_parent_slot_of_a_live_thread(void **state) {
  (void)state;
#ifdef TU_TSAN
  skip(); /* (tens of thousands of threads: test_fw_parent_past_65536_threads) */
#endif
  tu_trace t;
  tu_open(&t, NULL);
  tu_op("main_first", NULL, 0, NULL, 0); /* the main thread takes its slot */
  uint64_t main_tid = etr_thread_id(), id = 0;
  pthread_attr_t small;
  pthread_attr_init(&small);
  pthread_attr_setstacksize(&small, 64 * 1024);
  pthread_t th0;
  assert_int_equal(pthread_create(&th0, &small, thread_id_only, &id), 0);
  assert_int_equal(pthread_join(th0, NULL), 0);
  uint64_t want = main_tid + 65536 * ((id - main_tid) / 65536 + 1); /* A's id */
  while (id + 1 < want) {
    pthread_t th;
    assert_int_equal(pthread_create(&th, &small, thread_id_only, &id), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
  }
  pthread_attr_destroy(&small);
  struct fw_ctx c;
  memset(&c, 0, sizeof c);
  pthread_mutex_init(&c.mu, NULL);
  pthread_cond_init(&c.cv, NULL);
  pthread_t ta;
  assert_int_equal(pthread_create(&ta, NULL, thread_fw_collide, &c), 0);
  wait_stage(&c, 1);
  assert_int_equal(c.a_tid, want);
  bw_op("bwd_collide", c.a_tid);
  set_stage(&c, 2);
  assert_int_equal(pthread_join(ta, NULL), 0);
  bw_op("bwd_own", main_tid); /* its own thread as the forward one: what is open here */
  etr_record holder;
  tu_begin(&holder, "own_holder", NULL, 0);
  bw_op("bwd_own_inner", main_tid);
  tu_end(&holder, NULL, 0);
  pthread_mutex_destroy(&c.mu);
  pthread_cond_destroy(&c.cv);
  tu_close_ok(&t);
  json_t *fw = tu_node(&t, "fwd_collide"), *bw = tu_node(&t, "bwd_collide");
  assert_non_null(fw);
  assert_int_equal(tu_attr_int(bw, "fw_tid"), (json_int_t)want);
  assert_int_equal(tu_attr_int(bw, "fw_parent"), tu_id(fw));
  json_t *main_node = tu_thread_node(&t, (json_int_t)main_tid);
  assert_non_null(main_node);
  assert_int_equal(tu_attr_int(tu_node(&t, "bwd_own"), "fw_parent"), tu_id(main_node));
  assert_int_equal(tu_attr_int(tu_node(&t, "bwd_own_inner"), "fw_parent"),
                   tu_id(tu_node(&t, "own_holder")));
  tu_free(&t);
}

/* Many threads at once: every op hangs under its own thread's node. */
#define NTHREADS 4
static void *thread_many(void *p) {
  uint64_t *tid = p;
  *tid = etr_thread_id();
  char name[32];
  snprintf(name, sizeof name, "many_%llu", (unsigned long long)*tid);
  for (int i = 0; i < 200; i++) {
    etr_record o;
    tu_begin(&o, name, NULL, 0);
    tu_op("many_leaf", NULL, 0, NULL, 0);
    tu_end(&o, NULL, 0);
  }
  return NULL;
}

static void test_many_threads(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.buffer_kb = 4; /* small chunks: many hand-offs to the writer */
  tu_open(&t, &opt);
  pthread_t th[NTHREADS];
  uint64_t tids[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, thread_many, &tids[i]), 0);
  for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "many_leaf"), NTHREADS * 200);
  for (int i = 0; i < NTHREADS; i++) {
    char name[32];
    snprintf(name, sizeof name, "many_%llu", (unsigned long long)tids[i]);
    assert_int_equal(tu_count(&t, name), 200);
    json_t *tn = tu_thread_node(&t, (json_int_t)tids[i]);
    assert_non_null(tn);
    size_t k;
    json_t *node;
    json_array_foreach(t.nodes, k, node) {
      if (strcmp(tu_name(node), name) == 0) {
        assert_int_equal(tu_ctrl_deps(node), tu_id(tn));
        assert_int_equal(tu_attr_int(node, "tid"), (json_int_t)tids[i]);
      } else if (strcmp(tu_name(node), "many_leaf") == 0 &&
                 tu_attr_int(node, "tid") == (json_int_t)tids[i]) {
        json_t *parent = tu_node_by_id(&t, tu_ctrl_deps(node));
        assert_string_equal(tu_name(parent), name);
      }
    }
  }
  assert_int_equal(tu_stat(&t, "ops_recorded"), NTHREADS * 400);
  assert_int_equal(tu_stat(&t, "nodes_dropped"), 0);
  tu_free(&t);
}

/* More threads than max_buffers each keep a partly filled buffer while they wait: the bound
 * on buffers queued for the writer must not make later threads wait for ever. */
enum { IDLE_THREADS = 24 };
static pthread_barrier_t idle_barrier;

static void *thread_idle_holder(void *arg) {
  (void)arg;
  tu_op("idle_holder_op", NULL, 0, NULL, 0);
  pthread_barrier_wait(&idle_barrier); /* everyone holds a buffer now */
  tu_op("idle_holder_after", NULL, 0, NULL, 0);
  pthread_barrier_wait(&idle_barrier); /* let the main thread close while we are alive */
  pthread_barrier_wait(&idle_barrier);
  return NULL;
}

static void test_idle_threads_hold_buffers(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.max_buffers = 2;
  opt.buffer_kb = 4;
  tu_open(&t, &opt);
  assert_int_equal(pthread_barrier_init(&idle_barrier, NULL, IDLE_THREADS + 1), 0);
  pthread_t th[IDLE_THREADS];
  for (int i = 0; i < IDLE_THREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, thread_idle_holder, NULL), 0);
  pthread_barrier_wait(&idle_barrier);
  /* The main thread, too, must get buffers and fill many of them. */
  for (int i = 0; i < 2000; i++) tu_op("main_after_idle", NULL, 0, NULL, 0);
  pthread_barrier_wait(&idle_barrier);
  tu_close_ok(&t); /* the holders are alive: close writes their buffers */
  pthread_barrier_wait(&idle_barrier);
  for (int i = 0; i < IDLE_THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  pthread_barrier_destroy(&idle_barrier);
  assert_int_equal(tu_count(&t, "idle_holder_op"), IDLE_THREADS);
  assert_int_equal(tu_count(&t, "idle_holder_after"), IDLE_THREADS);
  assert_int_equal(tu_count(&t, "main_after_idle"), 2000);
  assert_int_equal(tu_stat(&t, "nodes_dropped"), 0);
  tu_free(&t);
}

static void scoped_op(const char *name, etr_scope scope, etr_record *r) {
  etr_record_init(r, name, scope);
  etr_record_begin(r);
}

/* Scope filter: ops of other scopes are not written; an op's parent is the nearest written
 * op that encloses it. */
static void test_scope_filter(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.scopes = 1u << ETR_SCOPE_USER_SCOPE;
  tu_open(&t, &opt);
  etr_record u1, f1, u2;
  scoped_op("U1", ETR_SCOPE_USER_SCOPE, &u1);
  scoped_op("F1", ETR_SCOPE_FUNCTION, &f1);
  scoped_op("U2", ETR_SCOPE_USER_SCOPE, &u2);
  etr_record_end(&u2);
  etr_record_end(&f1);
  etr_record_end(&u1);
  scoped_op("F2", ETR_SCOPE_FUNCTION, &f1);
  etr_record_end(&f1);
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "F1"), 0);
  assert_int_equal(tu_count(&t, "F2"), 0);
  json_t *n1 = tu_node(&t, "U1"), *n2 = tu_node(&t, "U2");
  assert_int_equal(tu_ctrl_deps(n2), tu_id(n1));
  assert_int_equal(tu_attr_int(n2, "scope"), 7);
  tu_free(&t);
}

/* Sampling: about the given fraction of ops is written; the tree stays whole. */
static void test_sampling(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.sample_probability = 0.25;
  tu_open(&t, &opt);
  for (int i = 0; i < 4000; i++) {
    etr_record o;
    tu_begin(&o, "sampled_outer", NULL, 0);
    tu_op("sampled_inner", NULL, 0, NULL, 0);
    tu_end(&o, NULL, 0);
  }
  tu_close_ok(&t); /* tree invariants: every ctrl_deps names a written node */
  size_t n = tu_count(&t, "sampled_outer") + tu_count(&t, "sampled_inner");
  if (n < 1400 || n > 2600) fail_msg("%zu of 8000 ops written with p = 0.25", n);
  size_t i;
  json_t *node;
  json_t *tn = tu_thread_node(&t, (json_int_t)etr_thread_id());
  assert_non_null(tn);
  json_array_foreach(t.nodes, i, node) {
    if (strcmp(tu_name(node), "sampled_outer") == 0)
      assert_int_equal(tu_ctrl_deps(node), tu_id(tn));
    if (strcmp(tu_name(node), "sampled_inner") == 0) {
      json_int_t p = tu_ctrl_deps(node);
      assert_true(p == tu_id(tn) || strcmp(tu_name(tu_node_by_id(&t, p)), "sampled_outer") == 0);
    }
  }
  tu_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_nesting),
      TU_TEST(test_second_thread),
      TU_TEST(test_fw_parent),
      TU_TEST(test_fw_parent_slot_of_a_live_thread),
      TU_TEST(test_fw_parent_past_65536_threads),
      TU_TEST(test_many_threads),
      TU_TEST(test_idle_threads_hold_buffers),
      TU_TEST(test_scope_filter),
      TU_TEST(test_sampling),
  };
  return cmocka_run_group_tests_name("trace_tree", tests, NULL, NULL);
}
