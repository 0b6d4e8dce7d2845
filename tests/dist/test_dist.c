/* tests/dist/test_dist.c — ranks and process groups (etr/dist.h, docs/API.md): defaults from
 * the launcher's environment, validation, the JSON list of groups, the
 * `## process_group:init ##` node recorded into a trace (docs/FORMAT.md), and ETR_TRACE with
 * %r in a child process. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "trace_util.h"

#define PG_INIT "## process_group:init ##"

static void clear_env(void) {
  static const char *const vars[] = {
      "RANK",     "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
      "PMI_RANK", "PMI_SIZE",   "SLURM_PROCID",         "SLURM_NTASKS"};
  for (size_t i = 0; i < TU_ARRAY_LEN(vars); i++) unsetenv(vars[i]);
  etr_dist_reset();
}

/* The current list, parsed (asserts it parses as a JSON array). */
static json_t *groups(void) {
  char buf[8192];
  size_t n = etr_dist_groups_json(buf, sizeof buf);
  assert_true(n < sizeof buf);
  assert_int_equal(strlen(buf), n);
  json_error_t err;
  json_t *j = json_loads(buf, 0, &err);
  if (!j) fail_msg("not JSON (%s): %s", err.text, buf);
  assert_true(json_is_array(j));
  return j;
}

static json_t *group(json_t *list, const char *name) {
  size_t i;
  json_t *g;
  json_array_foreach(list, i, g) {
    if (!strcmp(json_string_value(json_object_get(g, "pg_name")), name)) return g;
  }
  return NULL;
}

static json_int_t ival(json_t *g, const char *key) {
  json_t *v = json_object_get(g, key);
  assert_true(json_is_integer(v));
  return json_integer_value(v);
}

static void test_defaults_from_environment(void **state) {
  (void)state;
  clear_env();
  assert_int_equal(etr_dist_rank(), 0);
  assert_int_equal(etr_dist_world_size(), 1);
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  etr_dist_reset();
  assert_int_equal(etr_dist_rank(), 3);
  assert_int_equal(etr_dist_world_size(), 8);
  /* Other launchers' variables when RANK is absent; garbage is ignored. */
  clear_env();
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  etr_dist_reset();
  assert_int_equal(etr_dist_rank(), 2);
  assert_int_equal(etr_dist_world_size(), 4);
  clear_env();
  setenv("RANK", "x1", 1);
  setenv("WORLD_SIZE", "-4", 1);
  etr_dist_reset();
  assert_int_equal(etr_dist_rank(), 0);
  assert_int_equal(etr_dist_world_size(), 1);
  /* A rank beyond the world grows the world rather than being dropped. */
  clear_env();
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "2", 1);
  etr_dist_reset();
  assert_int_equal(etr_dist_rank(), 5);
  assert_int_equal(etr_dist_world_size(), 6);
  clear_env();
}

static void test_set_rank_validates(void **state) {
  (void)state;
  clear_env();
  assert_int_equal(etr_dist_set_rank(-1, 2), ETR_EINVAL);
  assert_int_equal(etr_dist_set_rank(2, 2), ETR_EINVAL);
  assert_int_equal(etr_dist_set_rank(0, 0), ETR_EINVAL);
  assert_int_equal(etr_dist_set_rank(1, 4), 0);
  assert_int_equal(etr_dist_rank(), 1);
  assert_int_equal(etr_dist_world_size(), 4);
  /* The API wins over the environment. */
  setenv("RANK", "3", 1);
  assert_int_equal(etr_dist_rank(), 1);
  clear_env();
}

static void test_declare_validates(void **state) {
  (void)state;
  clear_env();
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  assert_int_equal(etr_dist_declare_group(NULL), ETR_EINVAL);
  assert_int_equal(etr_dist_declare_group(&pg), ETR_EINVAL); /* no name */
  pg.name = "";
  assert_int_equal(etr_dist_declare_group(&pg), ETR_EINVAL);
  pg.name = "1";
  pg.n_ranks = 2; /* ranks NULL */
  assert_int_equal(etr_dist_declare_group(&pg), ETR_EINVAL);
  const int64_t bad[2] = {0, -1};
  pg.ranks = bad;
  assert_int_equal(etr_dist_declare_group(&pg), ETR_EINVAL);
  pg.struct_size = 0;
  pg.n_ranks = 0;
  assert_int_equal(etr_dist_declare_group(&pg), ETR_EINVAL);
  /* A size no header has had (smaller than the first release's): the fields past it are
   * not the caller's, and reading them would read past the caller's struct. */
  pg.struct_size = sizeof pg - 8;
  assert_int_equal(etr_dist_declare_group(&pg), ETR_EINVAL);
  /* Nothing was kept: only the default group. */
  json_t *l = groups();
  assert_int_equal(json_array_size(l), 1);
  json_decref(l);
  clear_env();
}

static void test_json_list(void **state) {
  (void)state;
  clear_env();
  assert_int_equal(etr_dist_set_rank(2, 4), 0);
  /* Without declarations: the default group of every rank, as PyTorch names it. */
  json_t *l = groups();
  assert_int_equal(json_array_size(l), 1);
  json_t *g = group(l, "0");
  assert_non_null(g);
  assert_string_equal(json_string_value(json_object_get(g, "pg_desc")), "default_pg");
  assert_true(json_is_string(json_object_get(g, "backend_config")));
  assert_int_equal(json_array_size(json_object_get(g, "ranks")), 0);
  assert_int_equal(ival(g, "group_size"), 4);
  assert_int_equal(ival(g, "group_count"), 1);
  assert_int_equal(ival(g, "rank"), 2);
  json_decref(l);

  /* A subgroup holding this rank, one without it, a name that needs escaping. */
  const int64_t evens[2] = {0, 2}, odds[2] = {1, 3};
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  pg.name = "1";
  pg.desc = "evens";
  pg.backend = "cpu:gloo";
  pg.ranks = evens;
  pg.n_ranks = 2;
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  pg.name = "2";
  pg.desc = "odd \"ones\"\n";
  pg.ranks = odds;
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  l = groups();
  assert_int_equal(json_array_size(l), 3);
  size_t i;
  json_array_foreach(l, i, g) assert_int_equal(ival(g, "group_count"), 3);
  g = group(l, "1");
  assert_non_null(g);
  assert_string_equal(json_string_value(json_object_get(g, "backend_config")), "cpu:gloo");
  assert_int_equal(ival(g, "group_size"), 2);
  assert_int_equal(ival(g, "rank"), 1); /* global rank 2 is the group's rank 1 */
  assert_int_equal(json_integer_value(json_array_get(json_object_get(g, "ranks"), 1)), 2);
  g = group(l, "2");
  assert_string_equal(json_string_value(json_object_get(g, "pg_desc")), "odd \"ones\"\n");
  assert_int_equal(ival(g, "rank"), -1); /* not a member */
  json_decref(l);

  /* Redeclaring replaces; declaring "0" replaces the default one. */
  pg.name = "1";
  pg.desc = "evens again";
  pg.ranks = NULL;
  pg.n_ranks = 0;
  pg.size = 0;
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  pg.name = "0";
  pg.desc = "world";
  pg.backend = "cpu:minitensor";
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  l = groups();
  assert_int_equal(json_array_size(l), 3);
  g = group(l, "1");
  assert_string_equal(json_string_value(json_object_get(g, "pg_desc")), "evens again");
  assert_int_equal(ival(g, "group_size"), 4); /* every rank */
  g = group(l, "0");
  assert_string_equal(json_string_value(json_object_get(g, "backend_config")), "cpu:minitensor");
  json_decref(l);

  /* A buffer too small: the length needed comes back, the text is cut and terminated. */
  char small[16];
  size_t need = etr_dist_groups_json(small, sizeof small);
  assert_true(need >= sizeof small);
  assert_int_equal(strlen(small), sizeof small - 1);
  /* NULL asks for the length, whatever the capacity says (100 once wrote through NULL) */
  assert_int_equal(etr_dist_groups_json(NULL, 0), need);
  assert_int_equal(etr_dist_groups_json(NULL, 100), need);
  clear_env();
}

/* etr_dist_group_of: the group a collective used, from its size and this rank's place in
 * it; none or several alike give no name (a runtime then leaves the group unsaid). */
static void test_group_of(void **state) {
  (void)state;
  clear_env();
  char name[8];
  assert_int_equal(etr_dist_set_rank(2, 4), 0);
  /* The world group, undeclared: the world size and this rank. */
  assert_int_equal(etr_dist_group_of(4, 2, name, sizeof name), 1);
  assert_string_equal(name, "0");
  assert_int_equal(etr_dist_group_of(4, 1, name, sizeof name), 0);
  assert_string_equal(name, "");
  const int64_t evens[2] = {0, 2}, pair[2] = {2, 3}, other[2] = {1, 2};
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  pg.name = "1";
  pg.ranks = evens; /* global rank 2 at group rank 1 */
  pg.n_ranks = 2;
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  pg.name = "2";
  pg.ranks = pair; /* at group rank 0 */
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  assert_int_equal(etr_dist_group_of(2, 1, name, sizeof name), 1);
  assert_string_equal(name, "1");
  assert_int_equal(etr_dist_group_of(2, 0, name, sizeof name), 1);
  assert_string_equal(name, "2");
  /* Another group of two holding this rank at group rank 1: two alike, no name. */
  pg.name = "longer-than-8";
  pg.ranks = other;
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  assert_int_equal(etr_dist_group_of(2, 1, name, sizeof name), 2);
  assert_string_equal(name, "");
  char one[2]; /* (a name cut to the buffer, terminated) */
  assert_int_equal(etr_dist_group_of(2, 0, one, 1), 1);
  assert_string_equal(one, "");
  pg.name = "2";
  pg.ranks = NULL; /* every rank now: "2" is no group of two */
  pg.n_ranks = 0;
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  assert_int_equal(etr_dist_group_of(2, 0, name, sizeof name), 0);
  assert_int_equal(etr_dist_group_of(4, 2, name, 2), 2); /* "0" and "2" alike */
  clear_env();
  assert_int_equal(etr_dist_group_of(1, 0, NULL, 0), 1); /* (no buffer: the count only) */
}

static void test_too_many_groups(void **state) {
  (void)state;
  clear_env();
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  char name[16];
  pg.name = name;
  for (int i = 1; i <= ETR_DIST_MAX_GROUPS; i++) {
    snprintf(name, sizeof name, "%d", i);
    assert_int_equal(etr_dist_declare_group(&pg), 0);
  }
  snprintf(name, sizeof name, "%d", ETR_DIST_MAX_GROUPS + 1);
  assert_int_equal(etr_dist_declare_group(&pg), ETR_ENOSPC);
  strcpy(name, "7"); /* replacing still works when full */
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  clear_env();
}

/* The value of the one String input of a process-group node, parsed. */
static json_t *node_groups(json_t *n) {
  json_t *types = json_object_get(json_object_get(n, "inputs"), "types");
  assert_int_equal(json_array_size(types), 1);
  assert_string_equal(json_string_value(json_array_get(types, 0)), "String");
  const char *s = json_string_value(tu_in(n, "inputs", "values", 0));
  assert_non_null(s);
  json_error_t err;
  json_t *j = json_loads(s, 0, &err);
  if (!j) fail_msg("process-group input is not JSON (%s): %s", err.text, s);
  return j;
}

static void test_node_in_trace(void **state) {
  (void)state;
  clear_env();
  assert_int_equal(etr_dist_set_rank(1, 2), 0); /* no trace: nothing recorded, no error */
  tu_trace t;
  tu_open(&t, NULL);
  assert_int_equal(etr_dist_record_groups(), 0);
  tu_op("aten::add", NULL, 0, NULL, 0);
  const int64_t both[2] = {0, 1};
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  pg.name = "1";
  pg.desc = "pair";
  pg.backend = "cpu:gloo";
  pg.ranks = both;
  pg.n_ranks = 2;
  assert_int_equal(etr_dist_declare_group(&pg), 0); /* records the list again */
  tu_close_ok(&t);

  json_t *first = NULL, *last = NULL, *n;
  size_t i, count = 0;
  json_array_foreach(t.nodes, i, n) {
    if (strcmp(tu_name(n), PG_INIT) != 0) continue;
    count++;
    if (!first || json_integer_value(json_object_get(n, "id")) <
                      json_integer_value(json_object_get(first, "id")))
      first = n;
    if (!last || json_integer_value(json_object_get(n, "id")) >
                     json_integer_value(json_object_get(last, "id")))
      last = n;
  }
  assert_int_equal(count, 2);
  /* As PyTorch writes it: a user-scope op node with the base attrs. */
  assert_int_equal(tu_attr_int(first, "scope"), 7);
  json_t *l = node_groups(first);
  assert_int_equal(json_array_size(l), 1);
  assert_int_equal(ival(group(l, "0"), "rank"), 1);
  assert_int_equal(ival(group(l, "0"), "group_size"), 2);
  json_decref(l);
  l = node_groups(last);
  assert_int_equal(json_array_size(l), 2);
  assert_non_null(group(l, "1"));
  json_decref(l);
  tu_free(&t);
  clear_env();
}

/* PARAM's comm replay reads the first process-group node in file order. A runtime traced
 * from the start records one when the trace opens (group "0" alone) and one per group it
 * declares: the nodes wait for the first collective and come right before it, newest
 * first, so the first lists every group declared by then; later ones come as they are
 * recorded, and none is lost. The same through a binary log and `etr convert`, and a
 * flight recorder's dump. */
static void record_collective(const char *pg_name) {
  etr_collective_info ci = ETR_COLLECTIVE_INFO_INIT;
  ci.name = "allreduce";
  ci.dtype = "Float";
  ci.in_msg_nelems = ci.out_msg_nelems = 16;
  ci.pg_name = pg_name;
  ci.pg_size = 2;
  etr_record r;
  etr_record_init(&r, "c10d::allreduce_", ETR_SCOPE_FUNCTION);
  if (etr_record_is_active(&r)) r.collective = &ci;
  etr_record_begin(&r);
  etr_record_end(&r);
}

static void record_run(void) {
  clear_env();
  assert_int_equal(etr_dist_set_rank(0, 2), 0);
  assert_int_equal(etr_dist_record_groups(), 0); /* as ETR_TRACE does when the trace opens */
  tu_op("aten::add", NULL, 0, NULL, 0);
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  pg.name = "1";
  pg.desc = "first";
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  tu_op("aten::mul", NULL, 0, NULL, 0);
  record_collective("1");
  pg.name = "2";
  pg.desc = "later";
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  record_collective("2");
}

static void check_first_node(const tu_trace *t, const char *what) {
  size_t i, count = 0, first_pg = SIZE_MAX, first_coll = SIZE_MAX, later_pg = SIZE_MAX;
  json_t *n;
  json_array_foreach(t->nodes, i, n) {
    if (!strcmp(tu_name(n), PG_INIT)) {
      count++;
      json_t *l = node_groups(n);
      if (first_pg == SIZE_MAX) {
        first_pg = i;
        if (!group(l, "0") || !group(l, "1") || json_array_size(l) != 2)
          fail_msg(
              "%s: the first process-group node lacks a group declared before the first "
              "collective",
              what);
      } else if (group(l, "2")) {
        later_pg = i;
      }
      json_decref(l);
    } else if (!strcmp(tu_name(n), "c10d::allreduce_") && first_coll == SIZE_MAX) {
      first_coll = i;
    }
  }
  assert_int_equal(count, 4); /* set_rank, the open, group "1", group "2": none lost */
  assert_true(first_pg < first_coll);
  assert_true(later_pg != SIZE_MAX && later_pg > first_coll);
}

static void test_first_node_before_first_collective(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  record_run();
  tu_close_ok(&t);
  check_first_node(&t, "JSON");
  json_t *stats = json_object_get(json_object_get(t.root, "etr"), "stats");
  assert_int_equal(json_array_size(t.nodes),
                   json_integer_value(json_object_get(stats, "nodes_written")));
  tu_free(&t);

  tu_open_binary(&t, NULL);
  record_run();
  tu_close_convert(&t, ETR_TOOL);
  check_first_node(&t, "etr convert");
  tu_free(&t);

  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.ring_mb = 4;
  tu_open(&t, &o);
  record_run();
  tu_close_ok(&t);
  check_first_node(&t, "flight recorder");
  tu_free(&t);

  /* No collective at all: the nodes are there at the end, newest first. */
  clear_env();
  tu_open(&t, NULL);
  assert_int_equal(etr_dist_record_groups(), 0);
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  pg.name = "1";
  assert_int_equal(etr_dist_declare_group(&pg), 0);
  tu_close_ok(&t);
  json_t *first = NULL, *n;
  size_t i, count = 0;
  json_array_foreach(t.nodes, i, n) {
    if (strcmp(tu_name(n), PG_INIT) != 0) continue;
    if (!first) first = n;
    count++;
  }
  assert_int_equal(count, 2);
  json_t *l = node_groups(first);
  assert_non_null(group(l, "1"));
  json_decref(l);
  tu_free(&t);
  clear_env();
}

/* A runtime that declares groups again and again and never runs a collective: the writer
 * holds at most 64 nodes (docs/FORMAT.md), then writes them (newest first) and lets later
 * ones pass as they come. None is lost, and the nodes after the cap come in id order, which
 * a hold without a cap (every node newest first, before the footer) does not give. */
static void test_hold_is_capped(void **state) {
  (void)state;
  enum { DECLARED = 200 };
  clear_env();
  tu_trace t;
  tu_open(&t, NULL);
  assert_int_equal(etr_dist_record_groups(), 0);
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  pg.name = "1";
  for (int i = 0; i < DECLARED; i++) assert_int_equal(etr_dist_declare_group(&pg), 0);
  tu_close_ok(&t);
  size_t i, count = 0;
  json_int_t prev = -1, ascending_tail = 0;
  json_t *n;
  json_array_foreach(t.nodes, i, n) {
    if (strcmp(tu_name(n), PG_INIT) != 0) continue;
    count++;
    json_int_t id = json_integer_value(json_object_get(n, "id"));
    ascending_tail = id > prev ? ascending_tail + 1 : 0;
    prev = id;
  }
  assert_int_equal(count, DECLARED + 1);
  assert_true(ascending_tail >= DECLARED - 64 - 1);
  json_t *stats = json_object_get(json_object_get(t.root, "etr"), "stats");
  assert_int_equal(json_array_size(t.nodes),
                   json_integer_value(json_object_get(stats, "nodes_written")));
  tu_free(&t);
  clear_env();
}

/* A flight recorder whose ring wraps: its dumps still say which rank they are. The
 * process-group nodes are kept apart from the ring, as the thread nodes are, so every dump
 * (several, each after several wraps, and the one at close) has both nodes recorded, the
 * first in the file listing every group and this process's rank, before the first
 * collective; the same through a binary log and `etr convert`. Before, the ring dropped
 * them with the oldest ops: a dump had no process-group node (etr chakra numbered it by
 * its argument position). */
static void check_ring_dump(const tu_trace *t, const char *what, int round) {
  size_t i, count = 0, first_pg = SIZE_MAX, first_coll = SIZE_MAX, ops = 0;
  json_t *n;
  json_array_foreach(t->nodes, i, n) {
    const char *name = tu_name(n);
    if (!strcmp(name, PG_INIT)) {
      if (count++ == 0) {
        first_pg = i;
        json_t *l = node_groups(n);
        json_t *g = group(l, "0");
        if (!g || !group(l, "1"))
          fail_msg("%s, dump %d: the first process-group node lacks a group", what, round);
        assert_int_equal(ival(g, "rank"), 1);
        assert_int_equal(ival(g, "group_size"), 2);
        json_decref(l);
      }
    } else if (!strcmp(name, "c10d::allreduce_")) {
      if (first_coll == SIZE_MAX) first_coll = i;
    } else if (!strcmp(name, "aten::add")) {
      ops++;
    }
  }
  if (count != 2) fail_msg("%s, dump %d: %zu process-group nodes, not 2", what, round, count);
  assert_true(first_coll != SIZE_MAX);
  assert_true(first_pg < first_coll);
  /* the ring wrapped more than twice since the last dump: most ops were dropped */
  json_int_t dropped = tu_stat(t, "ring_dropped");
  if (dropped < 2 * (json_int_t)ops * round)
    fail_msg("%s, dump %d: the ring did not wrap twice (%lld dropped, %zu kept)", what, round,
             (long long)dropped, ops);
}

static void test_flight_recorder_keeps_groups(void **state) {
  (void)state;
  enum { ROUNDS = 3, OPS = 20000 };
  for (int form = 0; form < 2; form++) {
    const char *what = form ? "binary log" : "JSON";
    clear_env();
    assert_int_equal(etr_dist_set_rank(1, 2), 0); /* no trace yet: nothing recorded */
    etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
    o.ring_mb = 1;
    tu_trace t;
    if (form)
      tu_open_binary(&t, &o);
    else
      tu_open(&t, &o);
    assert_int_equal(etr_dist_record_groups(), 0);
    etr_process_group pg = ETR_PROCESS_GROUP_INIT;
    pg.name = "1";
    pg.desc = "pair";
    assert_int_equal(etr_dist_declare_group(&pg), 0);
    char json_out[600];
    snprintf(json_out, sizeof json_out, "%s/dump.json", t.dir);
    for (int round = 1; round <= ROUNDS; round++) {
      for (int i = 0; i < OPS; i++) {
        etr_value v = etr_value_int(i);
        tu_op("aten::add", &v, 1, NULL, 0);
      }
      record_collective("0");
      assert_int_equal(etr_trace_dump(t.trace), 0);
      tu_trace d;
      if (form) {
        tu_convert_load(&d, ETR_TOOL, t.path, json_out);
      } else {
        tu_load_path(&d, t.path);
        tu_check_tree(&d);
      }
      check_ring_dump(&d, what, round);
      tu_free(&d);
    }
    if (form) {
      tu_close_convert(&t, ETR_TOOL);
    } else {
      tu_close_ok(&t);
      tu_assert_valid(ETR_TOOL, t.path);
    }
    check_ring_dump(&t, what, ROUNDS);
    tu_free(&t);
  }
  clear_env();
}

/* Several threads declare groups while a trace records: every node holds a whole list. */
enum { DECLARERS = 4, PER_THREAD = 10 };

static void *declarer(void *arg) {
  int t = (int)(intptr_t)arg;
  char name[32];
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  pg.name = name;
  pg.desc = "concurrent";
  for (int i = 0; i < PER_THREAD; i++) {
    snprintf(name, sizeof name, "%d", 1 + t * PER_THREAD + i);
    if (etr_dist_declare_group(&pg) != 0) return (void *)1;
    tu_op("aten::add", NULL, 0, NULL, 0);
  }
  return NULL;
}

static void test_concurrent_declarations(void **state) {
  (void)state;
  clear_env();
  assert_int_equal(etr_dist_set_rank(0, 2), 0);
  tu_trace t;
  tu_open(&t, NULL);
  pthread_t th[DECLARERS];
  for (int i = 0; i < DECLARERS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, declarer, (void *)(intptr_t)i), 0);
  for (int i = 0; i < DECLARERS; i++) {
    void *rv;
    assert_int_equal(pthread_join(th[i], &rv), 0);
    assert_null(rv);
  }
  tu_close_ok(&t);
  size_t i, nodes = 0, most = 0;
  json_t *n;
  json_array_foreach(t.nodes, i, n) {
    if (strcmp(tu_name(n), PG_INIT) != 0) continue;
    nodes++;
    json_t *l = node_groups(n); /* fails unless each is a whole JSON list */
    size_t k = json_array_size(l);
    assert_int_equal(ival(json_array_get(l, 0), "group_count"), k);
    if (k > most) most = k;
    json_decref(l);
  }
  assert_int_equal(nodes, DECLARERS * PER_THREAD);
  assert_int_equal(most, DECLARERS * PER_THREAD + 1); /* and the default group */
  tu_free(&t);
  clear_env();
}

/* ETR_TRACE in a child: %r is the rank of the launcher's RANK, and the trace has the node
 * although the program never calls the dist API. */
static void test_env_trace_has_groups(void **state) {
  (void)state;
  char dir[256], pattern[512], path[512], env_trace[600];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(pattern, sizeof pattern, "%s/rank-%%r.json", dir);
  snprintf(path, sizeof path, "%s/rank-3.json", dir);
  snprintf(env_trace, sizeof env_trace, "ETR_TRACE=%s", pattern);
  const char *const args[] = {"env", NULL};
  const char *const env[] = {env_trace, "RANK=3", "WORLD_SIZE=4", NULL};
  int st = tu_run(TRACE_HELPER, args, env, NULL);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  tu_trace t;
  tu_load_path(&t, path);
  json_t *n = tu_node(&t, PG_INIT);
  json_t *l = node_groups(n);
  json_t *g = group(l, "0");
  assert_non_null(g);
  assert_int_equal(ival(g, "rank"), 3);
  assert_int_equal(ival(g, "group_size"), 4);
  json_decref(l);
  tu_free(&t);
  tu_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_from_environment),
      cmocka_unit_test(test_set_rank_validates),
      cmocka_unit_test(test_declare_validates),
      cmocka_unit_test(test_json_list),
      cmocka_unit_test(test_group_of),
      cmocka_unit_test(test_too_many_groups),
      cmocka_unit_test(test_node_in_trace),
      cmocka_unit_test(test_first_node_before_first_collective),
      cmocka_unit_test(test_hold_is_capped),
      TU_TEST(test_flight_recorder_keeps_groups),
      cmocka_unit_test(test_env_trace_has_groups),
      cmocka_unit_test(test_concurrent_declarations),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
