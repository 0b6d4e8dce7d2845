/* Unit tests of the engines behind etr graph / replay / chrome / flame (tools/lib_an_*.c):
 * hash map, JSON escaping, FLOPs and collective bytes, the model parser, dependencies with
 * storage aliasing, and schedules / critical paths checked against hand computations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib_an_ops.h"
#include "lib_an_util.h"

/* ---- hash map against a plain array ---- */

static void test_u64map(void **state) {
  (void)state;
  an_u64map m = {0};
  enum { N = 5000 };
  static uint64_t ref[N];
  static bool present[N];
  uint64_t x = 88172645463325252ULL;
  for (int round = 0; round < 20000; round++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int k = (int)(x % N);
    uint64_t key = (uint64_t)k * 0x9E3779B97F4A7C15ULL; /* spread, includes 0 */
    if (k == 17) key = UINT64_MAX;                      /* the reserved empty marker */
    if (x & 0x100) {
      assert_true(an_u64map_put(&m, key, x));
      ref[k] = x;
      present[k] = true;
    } else {
      an_u64map_del(&m, key);
      present[k] = false;
    }
  }
  for (int k = 0; k < N; k++) {
    uint64_t key = k == 17 ? UINT64_MAX : (uint64_t)k * 0x9E3779B97F4A7C15ULL;
    uint64_t v = 0;
    assert_int_equal(an_u64map_get(&m, key, &v), present[k]);
    if (present[k]) assert_int_equal(v, ref[k]);
  }
  an_u64map_free(&m);
}

static void test_strtab(void **state) {
  (void)state;
  an_strtab t = {0};
  uint32_t a = an_strtab_intern(&t, "aten::mm", 8);
  uint32_t b = an_strtab_intern(&t, "aten::add", 9);
  uint32_t z = an_strtab_intern(&t, "a\0b", 3);
  assert_int_not_equal(a, b);
  assert_int_equal(an_strtab_intern(&t, "aten::mm", 8), a);
  assert_int_equal(an_strtab_intern(&t, "a\0b", 3), z);
  assert_int_not_equal(an_strtab_intern(&t, "a", 1), z);
  for (int i = 0; i < 1000; i++) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "op%d", i);
    assert_int_equal(an_strtab_intern(&t, buf, (size_t)n), an_strtab_intern(&t, buf, (size_t)n));
  }
  assert_string_equal(t.strs[b], "aten::add");
  an_strtab_free(&t);
}

/* ---- JSON escaping ---- */

static char *render_jstr(const char *s, size_t len) {
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  an_out o = {.f = f};
  an_out_jstr(&o, s, len);
  fclose(f);
  return buf;
}

static void test_jstr(void **state) {
  (void)state;
  char *r = render_jstr("a\"b\\c\n\t\x01", 8);
  assert_string_equal(r, "\"a\\\"b\\\\c\\n\\t\\u0001\"");
  free(r);
  r = render_jstr("x\0y", 3);
  assert_string_equal(r, "\"x\\u0000y\"");
  free(r);
  /* valid multi-byte UTF-8 passes, invalid bytes and overlong / surrogate forms become U+FFFD */
  r = render_jstr("\xc3\xa9\xff\xc0\xaf\xed\xa0\x80z\xe2\x82", 11);
  assert_string_equal(r,
                      "\"\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                      "\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd\"");
  free(r);
}

/* ---- FLOPs and collectives ---- */

/* A jval inputs/outputs object with the given shapes (rank <= 4, up to 3 shapes). */
typedef struct shape_obj {
  rd_jval dims[3][4];
  rd_jval shapes[3];
  rd_jval shapes_arr;
  rd_jmember member;
  rd_jval obj;
} shape_obj;

static const rd_jval *make_shapes(shape_obj *so, int n, const int64_t dims[][4], const int *ranks) {
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < ranks[i]; k++) {
      so->dims[i][k].kind = ETR_J_INT;
      so->dims[i][k].v.i = dims[i][k];
    }
    so->shapes[i].kind = ETR_J_ARRAY;
    so->shapes[i].v.arr.items = so->dims[i];
    so->shapes[i].v.arr.n = (size_t)ranks[i];
  }
  so->shapes_arr.kind = ETR_J_ARRAY;
  so->shapes_arr.v.arr.items = so->shapes;
  so->shapes_arr.v.arr.n = (size_t)n;
  so->member.key = "shapes";
  so->member.key_len = 6;
  so->member.val = so->shapes_arr;
  so->obj.kind = ETR_J_OBJECT;
  so->obj.v.obj.items = &so->member;
  so->obj.v.obj.n = 1;
  return &so->obj;
}

static void test_flops(void **state) {
  (void)state;
  shape_obj a, b;
  const int64_t mm[][4] = {{2, 3}, {3, 4}};
  const int r22[] = {2, 2};
  const rd_jval *in = make_shapes(&a, 2, mm, r22);
  assert_true(an_flops("aten::mm", in, NULL) == 2.0 * 2 * 3 * 4);
  assert_true(an_flops("aten::add", in, NULL) == 0);
  assert_true(an_flops("mm", in, NULL) == 0);
  const int64_t addmm[][4] = {{4}, {2, 3}, {3, 4}};
  const int r122[] = {1, 2, 2};
  in = make_shapes(&a, 3, addmm, r122);
  assert_true(an_flops("aten::addmm", in, NULL) == 48.0);
  /* conv2d: input [32,3,224,224], weight [64,3,7,7], output [32,64,112,112] */
  const int64_t conv_in[][4] = {{32, 3, 224, 224}, {64, 3, 7, 7}};
  const int r44[] = {4, 4};
  const int64_t conv_out[][4] = {{32, 64, 112, 112}};
  const int r4[] = {4};
  in = make_shapes(&a, 2, conv_in, r44);
  const rd_jval *out = make_shapes(&b, 1, conv_out, r4);
  assert_true(an_flops("aten::cudnn_convolution", in, out) ==
              2.0 * 32 * 64 * 112 * 112 * 3 * 7 * 7);
  assert_true(an_flops("aten::conv2d", in, out) > 0);
  assert_true(an_flops("aten::convolution_backward", in, out) == 0);
  /* linear: x [8, 16], W [32, 16] */
  const int64_t lin[][4] = {{8, 16}, {32, 16}};
  in = make_shapes(&a, 2, lin, r22);
  assert_true(an_flops("aten::linear", in, NULL) == 2.0 * 8 * 16 * 32);
  /* wrong ranks give 0, not garbage */
  const int64_t bad[][4] = {{8}, {32, 16}};
  const int r12[] = {1, 2};
  in = make_shapes(&a, 2, bad, r12);
  assert_true(an_flops("aten::mm", in, NULL) == 0);

  assert_true(an_coll_bytes("allreduce", "Float", 1000, 1000, 4) == 4000.0 * 2 * 3 / 4);
  assert_true(an_coll_bytes("all_gather", "Half", 10, 40, 4) == 80.0 * 3 / 4);
  assert_true(an_coll_bytes("broadcast", "Double", 10, 10, 8) == 80.0);
  assert_true(an_coll_bytes("allreduce", "Float", 1000, 1000, 1) == 0);
  assert_true(an_coll_bytes("barrier", "Float", 1000, 1000, 4) == 0);
}

/* ---- model parser ---- */

static void test_model_parse(void **state) {
  (void)state;
  an_model m;
  an_model_init(&m);
  char err[256];
  assert_int_equal(an_model_line(&m, "  # comment", err, sizeof err), 1);
  assert_int_equal(an_model_line(&m, "", err, sizeof err), 1);
  assert_int_equal(an_model_line(&m, "speedup aten::mm 2.5  # faster", err, sizeof err), 0);
  assert_int_equal(an_model_line(&m, "speedup \"## forward ##\" 2", err, sizeof err), 0);
  assert_int_equal(an_model_line(&m, "speedup aten::* 1.5", err, sizeof err), 0);
  assert_int_equal(an_model_line(&m, "flops_per_s 1e12", err, sizeof err), 0);
  assert_int_equal(an_model_line(&m, "link 5 12.5", err, sizeof err), 0);
  assert_int_equal(an_model_line(&m, "untimed_us 3", err, sizeof err), 0);
  /* a '#' inside quotes is the name's, one after a quoted name starts a comment */
  assert_int_equal(an_model_line(&m, "speedup \"a #b\" 4 # comment", err, sizeof err), 0);
  assert_int_equal(an_model_line(&m, "speedup \"## x\" 5 #comment", err, sizeof err), 0);
  assert_int_equal(an_model_line(&m, "speedup a#b 6", err, sizeof err), 0);
  assert_int_equal(an_model_line(&m, "#speedup a 7", err, sizeof err), 1);
  assert_int_equal(m.n_speedups, 6);
  assert_string_equal(m.speedups[1].pattern, "## forward ##");
  assert_string_equal(m.speedups[3].pattern, "a #b");
  assert_true(m.speedups[3].factor == 4);
  assert_string_equal(m.speedups[4].pattern, "## x");
  assert_true(m.speedups[4].factor == 5);
  assert_string_equal(m.speedups[5].pattern, "a#b");
  assert_true(m.flops_per_s == 1e12 && m.link_latency_us == 5 && m.link_GBps == 12.5);
  assert_true(m.untimed_us == 3);
  assert_int_equal(an_model_line(&m, "speedup aten::mm 0", err, sizeof err), -1);
  assert_int_equal(an_model_line(&m, "speedup aten::mm", err, sizeof err), -1);
  assert_int_equal(an_model_line(&m, "flops_per_s fast", err, sizeof err), -1);
  assert_int_equal(an_model_line(&m, "link 5 0", err, sizeof err), -1);
  assert_int_equal(an_model_line(&m, "warp 9", err, sizeof err), -1);
  assert_non_null(strstr(err, "unknown directive"));
  assert_int_equal(an_model_line(&m, "speedup \"unterminated 2", err, sizeof err), -1);
  an_model_free(&m);
}

/* ---- a hand-built trace ---- */

/* A timed op with no tensors, FLOPs or collective (the tests add those where they need
 * them). */
static an_op_desc op_desc(int64_t id, int64_t parent, uint64_t tid, const char *name, int64_t ts,
                          int64_t incl, int64_t excl) {
  return (an_op_desc){.id = id,
                      .parent = parent,
                      .tid = tid,
                      .name = name,
                      .timed = true,
                      .ts = ts,
                      .incl = incl,
                      .excl = excl,
                      .coll_bytes = -1};
}

/* The trace of tests/analysis/data/replay_small.json:
 *   thread 1: producer #10 [100,110) writes t50 (storage 51)
 *             outer #11 [115,135) excl 8, child aten::mm #12 [118,130) reads t50, writes t70
 *             (storage 71)
 *   thread 2: consumer #20 [140,146) reads t72, a view on storage 71
 *             bw #21 [150,154) fw_parent 11 */
static void build_small(an_optab *t, bool timed) {
  an_optab_init(t);
  assert_true(an_optab_add_thread(t, 2, 1));
  assert_true(an_optab_add_thread(t, 3, 2));
  static const an_tref t50 = {50, 51}, mm_in[2] = {{50, 51}, {52, 53}}, t70 = {70, 71},
                       t72 = {72, 71};
  an_op_desc d[5] = {
      /* id, parent, tid, name, ts, incl, excl */
      op_desc(10, 2, 1, "producer", 100, 10, 10),  /* d[0] */
      op_desc(12, 11, 1, "aten::mm", 118, 12, 12), /* d[1] */
      op_desc(11, 2, 1, "outer", 115, 20, 8),      /* d[2] */
      op_desc(20, 3, 2, "consumer", 140, 6, 6),    /* d[3] */
      op_desc(21, 3, 2, "bw", 150, 4, 4),          /* d[4] */
  };
  d[0].out = &t50;
  d[0].n_out = 1;
  d[1].in = mm_in;
  d[1].n_in = 2;
  d[1].out = &t70;
  d[1].n_out = 1;
  d[1].flops = 48;
  d[3].in = &t72;
  d[3].n_in = 1;
  d[4].fw_parent = 11;
  for (int i = 0; i < 5; i++) {
    d[i].timed = timed;
    assert_true(an_optab_add_op(t, &d[i]));
  }
  assert_true(an_optab_finish(t));
}

static uint32_t ix_of(const an_optab *t, int64_t id) {
  uint64_t v;
  assert_true(an_u64map_get(&t->id2ix, (uint64_t)id, &v));
  return (uint32_t)v;
}

static void test_deps_aliasing(void **state) {
  (void)state;
  an_optab t;
  build_small(&t, true);
  assert_int_equal(t.t0, 100);
  assert_int_equal(t.t1, 154);
  assert_true(t.timed);
  /* start order: 10, 11, 12, 20, 21 */
  assert_int_equal(t.ops[t.order[1]].id, 11);
  assert_int_equal(t.ops[t.order[2]].id, 12);
  an_deps d;
  assert_true(an_deps_build(&t, &d));
  assert_int_equal(d.n_data, 2);
  assert_int_equal(d.n_fw, 1);
  uint32_t mm = ix_of(&t, 12), cons = ix_of(&t, 20), bw = ix_of(&t, 21);
  assert_int_equal(d.count[mm], 1);
  assert_int_equal(d.edges[d.first[mm]].from, ix_of(&t, 10));
  assert_int_equal(d.edges[d.first[mm]].tensor, 50);
  /* t72 is a different tensor on t70's storage: the consumer depends on the mm */
  assert_int_equal(d.count[cons], 1);
  assert_int_equal(d.edges[d.first[cons]].from, mm);
  assert_int_equal(d.edges[d.first[cons]].kind, ETR_DEP_DATA);
  assert_int_equal(d.edges[d.first[bw]].kind, ETR_DEP_FW);
  assert_int_equal(d.edges[d.first[bw]].from, ix_of(&t, 11));
  assert_true(t.ops[mm].flags & ETR_OPF_FLOP_INNER);
  an_deps_free(&d);
  an_optab_free(&t);
}

static double run(const an_optab *t, const an_model *m, bool thread_order, bool idle, an_sched *s,
                  double **cost_out) {
  an_deps d;
  assert_true(an_deps_build(t, &d));
  double *cost = malloc(t->n * sizeof *cost);
  assert_true(an_model_costs(m, t, cost));
  an_sched_opts o = {thread_order, idle};
  assert_true(an_schedule(t, &d, cost, &o, s));
  an_deps_free(&d);
  if (cost_out) {
    *cost_out = cost;
  } else {
    free(cost);
  }
  return s->makespan;
}

/* Replay with recorded durations reproduces the recorded schedule; without idle time the
 * hand-computed ASAP schedule. */
static void test_replay_hand_schedule(void **state) {
  (void)state;
  an_optab t;
  build_small(&t, true);
  an_model m;
  an_model_init(&m);
  an_sched s;
  /* idle kept: every op starts at its recorded time - 100 */
  assert_true(run(&t, &m, true, true, &s, NULL) == 54.0);
  const int64_t ids[] = {10, 11, 12, 20, 21};
  const double rec_start[] = {0, 15, 18, 40, 50};
  for (int k = 0; k < 5; k++) assert_true(s.start[ix_of(&t, ids[k])] == rec_start[k]);
  assert_true(s.end[ix_of(&t, 11)] == 35.0);
  an_sched_free(&s);
  /* no idle: A[0,10) B from 10, mm [13,25) (lead 3), B ends 30; consumer waits for mm:
   * [25,31); bw after it [31,35) (its fw_parent started at 10) */
  assert_true(run(&t, &m, true, false, &s, NULL) == 35.0);
  const double asap[] = {0, 10, 13, 25, 31};
  for (int k = 0; k < 5; k++) assert_true(s.start[ix_of(&t, ids[k])] == asap[k]);
  assert_true(s.end[ix_of(&t, 11)] == 30.0);
  assert_true(s.busy[0] == 30.0 && s.busy[1] == 10.0);
  /* the critical path: producer -> outer -> mm -> consumer -> bw */
  an_path_step *p = NULL;
  size_t n = an_sched_path(&s, &t, &p);
  const int64_t want[] = {10, 10, 11, 12, 12, 20, 20, 21, 21};
  assert_int_equal(n, 9);
  for (size_t k = 0; k < n; k++) assert_int_equal(t.ops[p[k].op].id, want[k]);
  assert_int_equal(p[5].bind, ETR_BIND_DATA);
  assert_int_equal(p[3].bind, ETR_BIND_PARENT);
  assert_int_equal(p[3].spent_by, ix_of(&t, 11)); /* the 3 us lead is outer's time */
  free(p);
  an_sched_free(&s);
  /* model: mm twice as fast -> mm [13,19), outer ends 24, consumer [19,25), bw [25,29) */
  assert_int_equal(an_model_line(&m, "speedup aten::mm 2", NULL, 0), 0);
  assert_true(run(&t, &m, true, false, &s, NULL) == 29.0);
  an_sched_free(&s);
  an_model_free(&m);
  /* FLOP model: 48 FLOPs at 4.8 MFLOP/s = 10 us -> makespan 33 */
  an_model_init(&m);
  assert_int_equal(an_model_line(&m, "flops_per_s 4.8e6", NULL, 0), 0);
  assert_true(run(&t, &m, true, false, &s, NULL) == 33.0);
  an_sched_free(&s);
  an_model_free(&m);
  an_optab_free(&t);
}

/* The critical path of the dependency graph (unlimited threads), by hand: producer [0,10),
 * mm waits for producer's t50: [10,22), consumer [22,28): 28 us through 3 ops. */
static void test_graph_critical_path(void **state) {
  (void)state;
  an_optab t;
  build_small(&t, true);
  an_model m;
  an_model_init(&m);
  an_sched s;
  assert_true(run(&t, &m, false, false, &s, NULL) == 28.0);
  an_path_step *p = NULL;
  size_t n = an_sched_path(&s, &t, &p);
  const int64_t want[] = {10, 10, 12, 12, 20, 20};
  assert_int_equal(n, 6);
  for (size_t k = 0; k < n; k++) assert_int_equal(t.ops[p[k].op].id, want[k]);
  assert_true(s.start[ix_of(&t, 21)] == 0.0); /* bw only needs outer to have started */
  free(p);
  an_sched_free(&s);
  an_model_free(&m);
  an_optab_free(&t);
}

/* Without timing: order by id, 1 us per op (untimed_us), parents after their children. */
static void test_untimed(void **state) {
  (void)state;
  an_optab t;
  build_small(&t, false);
  assert_false(t.timed);
  assert_int_equal(t.n_untimed, 5);
  an_model m;
  an_model_init(&m);
  an_sched s;
  /* thread 1: producer [0,1), outer starts 1, mm [1,2), outer ends 3; thread 2: consumer
   * after mm [2,3), bw [3,4) */
  assert_true(run(&t, &m, true, true, &s, NULL) == 4.0);
  assert_true(s.end[ix_of(&t, 11)] == 3.0);
  assert_true(s.start[ix_of(&t, 20)] == 2.0);
  an_sched_free(&s);
  an_model_free(&m);
  an_optab_free(&t);
}

/* Damaged input must not break the engine: a parent cycle, a parent on another thread, an
 * fw_parent that starts later, duplicate ids. */
static void test_damaged(void **state) {
  (void)state;
  an_optab t;
  an_optab_init(&t);
  an_op_desc d[4] = {
      /* id, parent, tid, name, ts, incl, excl */
      op_desc(5, 6, 1, "a", 10, 5, 5), /* d[0]: parent cycle 5 <-> 6 */
      op_desc(6, 5, 1, "b", 12, 1, 1), /* d[1] */
      op_desc(7, 5, 2, "c", 11, 3, 3), /* d[2]: parent on another thread, fw_parent 8 later */
      op_desc(8, 8, 2, "d", 30, 1, 1), /* d[3]: its own parent */
  };
  d[2].fw_parent = 8;
  for (int i = 0; i < 4; i++) assert_true(an_optab_add_op(&t, &d[i]));
  d[3].ts = 40;
  assert_true(an_optab_add_op(&t, &d[3])); /* duplicate id */
  assert_true(an_optab_finish(&t));
  assert_int_equal(t.n_dup_ids, 1);
  an_deps deps;
  assert_true(an_deps_build(&t, &deps));
  assert_int_equal(deps.n_fw_missing, 1);
  double cost[5];
  an_model m;
  an_model_init(&m);
  assert_true(an_model_costs(&m, &t, cost));
  for (int mode = 0; mode < 2; mode++) {
    an_sched s;
    an_sched_opts o = {mode == 0, true};
    assert_true(an_schedule(&t, &deps, cost, &o, &s));
    for (size_t i = 0; i < t.n; i++) assert_true(s.end[i] >= s.start[i] && s.start[i] >= 0);
    an_path_step *p = NULL;
    size_t n = an_sched_path(&s, &t, &p);
    assert_true(n >= 1 && n <= 4 * t.n + 4);
    free(p);
    an_sched_free(&s);
  }
  an_model_free(&m);
  an_deps_free(&deps);
  an_optab_free(&t);
}

/* Nesting depth costs linear work: a chain of 200,000 ops, each the child of the next one
 * (children first, as etr and PyTorch write them), and a parent cycle of three ops under a
 * long tail. The cycle check follows each parent link once (it walked every op up to the
 * root before: 2 * 10^10 steps for this chain, which `etr graph` took minutes over). */
static void test_deep_nesting(void **state) {
  (void)state;
  enum { N = 200000 };
  an_optab t;
  an_optab_init(&t);
  assert_true(an_optab_add_thread(&t, 2, 1));
  for (int64_t i = 0; i < N; i++) {
    int64_t id = 3 + N - 1 - i; /* the deepest op first; the top one's parent is the thread */
    an_op_desc d = op_desc(id, id - 1, 1, "op", N - id, 2 * id, 1);
    assert_true(an_optab_add_op(&t, &d));
  }
  assert_true(an_optab_finish(&t));
  assert_true(t.cycle_steps <= (size_t)N);
  for (size_t i = 0; i + 1 < t.n; i++) assert_int_equal(t.ops[i].parent_ix, i + 1);
  assert_int_equal(t.ops[t.n - 1].parent_ix, ETR_NOIX);
  an_optab_free(&t);

  /* 10 -> 11 -> 12 -> 10, and a tail of 1000 ops hanging under 10 */
  an_optab_init(&t);
  for (int64_t id = 2000; id > 1000; id--) {
    an_op_desc d = op_desc(id, id == 1001 ? 10 : id - 1, 1, "tail", 0, 1, 1);
    assert_true(an_optab_add_op(&t, &d));
  }
  for (int64_t id = 10; id <= 12; id++) {
    an_op_desc d = op_desc(id, id == 12 ? 10 : id + 1, 1, "ring", 0, 1, 1);
    assert_true(an_optab_add_op(&t, &d));
  }
  assert_true(an_optab_finish(&t));
  assert_true(t.cycle_steps <= t.n);
  size_t tops = 0;
  for (size_t i = 0; i < t.n; i++) {
    tops += t.ops[i].parent_ix == ETR_NOIX;
    size_t up = 0; /* every op reaches a top-level op */
    for (uint32_t x = (uint32_t)i; x != ETR_NOIX; x = t.ops[x].parent_ix) assert_true(up++ <= t.n);
  }
  assert_int_equal(tops, 1); /* one link of the ring cut: 10, where the walks enter it */
  assert_int_equal(t.ops[ix_of(&t, 10)].parent_ix, ETR_NOIX);
  an_optab_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_u64map),
      cmocka_unit_test(test_strtab),
      cmocka_unit_test(test_jstr),
      cmocka_unit_test(test_flops),
      cmocka_unit_test(test_model_parse),
      cmocka_unit_test(test_deps_aliasing),
      cmocka_unit_test(test_replay_hand_schedule),
      cmocka_unit_test(test_graph_critical_path),
      cmocka_unit_test(test_untimed),
      cmocka_unit_test(test_damaged),
      cmocka_unit_test(test_deep_nesting),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
