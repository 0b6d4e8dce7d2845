/* tests/trace/test_trace_golden.c — a deterministic single-thread recording of ops of every
 * kind, normalised and compared byte for byte with tests/trace/golden/basic.json.
 *
 * Normalisation (see normalise()): "pid", "time", "start_ts", "finish_ts", and on each node
 * "ts", "inclusive_dur", "exclusive_dur" and the thread nodes' "os_tid" attr become 0; ids (node
 * ids, ctrl_deps, fw_parent, tensor and storage ids) are renumbered in order of first appearance in
 * the file (0 and the process node's 1 are kept); rf_id values are renumbered the same way on their
 * own; in the footer, counters that depend on the run (bytes_written, buffer_waits) become 0. The
 * result is written one node per line, compact, keys in file order.
 *
 * To regenerate the golden file after an intended format change, run
 *     ETR_UPDATE_GOLDEN=1 ctest -R trace.golden        (or run trace_test_golden directly)
 * and review the diff of tests/trace/golden/basic.json before committing it. On a mismatch
 * the normalised output is left in basic.actual.json in the test's working directory.
 *
 * ETR_TRACE_GOLDEN_DIR is the source folder tests/trace/golden, passed by CMake. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_util.h"

#ifndef ETR_TRACE_GOLDEN_DIR
#error "ETR_TRACE_GOLDEN_DIR must name tests/trace/golden"
#endif

/* ---- the recording ---- */

static void record_everything(void) {
  static int impl[8], stor[4];
  const int64_t sz23[2] = {2, 3}, st23[2] = {3, 1}, sz3[1] = {3}, szt[2] = {3, 2}, stt[2] = {1, 3};
  etr_tensor a = {&impl[0], &stor[0], 0, 6, 4, "float", "cpu", 2, sz23, st23};
  etr_tensor b = {&impl[1], &stor[1], 0, 6, 4, "float", "cpu", 2, sz23, NULL};
  etr_tensor at = {&impl[2], &stor[0], 0, 6, 4, "float", "cpu", 2, szt, stt}; /* view of a */
  etr_tensor l = {&impl[3], &stor[2], 1, 3, 8, "long", "cuda:0", 1, sz3, NULL};
  etr_tensor und = {&impl[4], NULL, 0, 0, 0, NULL, NULL, 0, NULL, NULL};
  etr_tensor sc = {&impl[5], &stor[3], 0, 1, 8, "double", "cpu", 0, NULL, NULL};

  /* aten::empty(int[] size, *, Device? device, bool pin_memory) -> Tensor */
  etr_value size[2] = {etr_value_int(2), etr_value_int(3)};
  etr_value in1[4] = {etr_value_list(size, 2), etr_value_none(), etr_value_device("cpu"),
                      etr_value_bool(false)};
  etr_value out1[1] = {etr_value_tensor(&a)};
  etr_record r;
  etr_record_init(&r, "aten::empty", ETR_SCOPE_FUNCTION);
  r.schema = "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None) -> Tensor";
  r.inputs = in1;
  r.n_inputs = 4;
  etr_record_begin(&r);
  r.outputs = out1;
  r.n_outputs = 1;
  etr_record_end(&r);

  /* A user scope with nested ops. */
  etr_record outer;
  etr_record_init(&outer, "## forward ##", ETR_SCOPE_USER_SCOPE);
  etr_record_begin(&outer);
  {
    etr_value in2[3] = {etr_value_tensor(&a), etr_value_tensor(&b), etr_value_double(2.5)};
    etr_value out2[1] = {etr_value_tensor(&b)};
    etr_record_init(&r, "aten::add", ETR_SCOPE_FUNCTION);
    r.schema = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor";
    r.seq_nr = 7;
    r.inputs = in2;
    r.n_inputs = 3;
    etr_record_begin(&r);
    {
      etr_value in3[2] = {etr_value_tensor(&a), etr_value_list(size, 2)};
      etr_value out3[1] = {etr_value_tensor(&at)};
      etr_record inner;
      etr_record_init(&inner, "aten::t", ETR_SCOPE_FUNCTION);
      inner.inputs = in3;
      inner.n_inputs = 2;
      etr_record_begin(&inner);
      inner.outputs = out3;
      inner.n_outputs = 1;
      etr_record_end(&inner);
    }
    r.outputs = out2;
    r.n_outputs = 1;
    etr_record_end(&r);

    /* Every scalar kind, a tuple, a nested list of tensors, strings that need escaping. */
    etr_value tens[2] = {etr_value_tensor(&l), etr_value_tensor(&und)};
    etr_value tup[3] = {etr_value_string("0"), etr_value_string("default_pg"),
                        etr_value_list(tens, 2)};
    etr_value in4[12] = {
        etr_value_int(INT64_MIN),
        etr_value_int(INT64_MAX),
        etr_value_double(NAN),
        etr_value_double(INFINITY),
        etr_value_double(-INFINITY),
        etr_value_double(0.5),
        etr_value_string("quote\" backslash\\ tab\t nl\n \x01 caf\xC3\xA9 bad\xFF"),
        etr_value_string_n("a\0b", 3),
        etr_value_object("Generator"),
        etr_value_tuple(tup, 3),
        etr_value_tensor(&und),
        etr_value_tensor(&sc)};
    etr_record_init(&r, "misc::kinds", ETR_SCOPE_FUNCTION);
    r.inputs = in4;
    r.n_inputs = 12;
    etr_record_begin(&r);
    etr_record_end(&r);
  }
  etr_record_end(&outer);

  /* A collective. */
  const int64_t splits[2] = {4, 2};
  etr_collective_info ci = ETR_COLLECTIVE_INFO_INIT;
  ci.name = "allreduce";
  ci.dtype = "Float";
  ci.in_msg_nelems = 6;
  ci.out_msg_nelems = 6;
  ci.in_split_sizes = splits;
  ci.n_in_splits = 2;
  ci.global_rank_start = 0;
  ci.global_rank_stride = 1;
  ci.pg_name = "0";
  ci.pg_desc = "default_pg";
  ci.pg_size = 2;
  ci.is_async = true;
  etr_value in5[1] = {etr_value_tensor(&b)};
  etr_record_init(&r, "record_param_comms", ETR_SCOPE_USER_SCOPE);
  r.inputs = in5;
  r.n_inputs = 1;
  r.collective = &ci;
  etr_record_begin(&r);
  etr_record_end(&r);

  /* A kernel launch. */
  etr_kernel_info ki = ETR_KERNEL_INFO_INIT;
  ki.backend = "triton";
  ki.file = "kernels/triton_poi_fused_add_0.py";
  ki.grid[0] = 4;
  ki.grid[1] = 1;
  ki.grid[2] = 1;
  ki.stream = 0;
  etr_value in6[3] = {etr_value_tensor(&a), etr_value_tensor(&b), etr_value_int(6)};
  etr_record_init(&r, "triton_poi_fused_add_0", ETR_SCOPE_FUNCTION);
  r.inputs = in6;
  r.n_inputs = 3;
  r.kernel = &ki;
  etr_record_begin(&r);
  etr_record_end(&r);

  /* b dies; a new tensor at its address gets a new id. */
  etr_tensor_died(&impl[1]);
  etr_tensor b2 = b;
  etr_value in7[1] = {etr_value_tensor(&b2)};
  etr_record_init(&r, "aten::relu", ETR_SCOPE_BACKWARD_FUNCTION);
  r.seq_nr = 7;
  r.inputs = in7;
  r.n_inputs = 1;
  etr_record_begin(&r);
  r.outputs = in7;
  r.n_outputs = 1;
  etr_record_end(&r);
}

/* ---- normalisation ---- */

typedef struct idmap {
  json_int_t from[4096];
  json_int_t to[4096];
  size_t n;
  json_int_t next;
  json_int_t keep; /* ids up to this one are kept as they are */
} idmap;

static json_int_t map_id(idmap *m, json_int_t id) {
  if (id <= m->keep) return id;
  for (size_t i = 0; i < m->n; i++)
    if (m->from[i] == id) return m->to[i];
  assert_true(m->n < 4096);
  m->from[m->n] = id;
  m->to[m->n] = m->next++;
  return m->to[m->n++];
}

static void remap_int(json_t *obj, const char *key, idmap *m) {
  json_t *v = json_object_get(obj, key);
  if (json_is_integer(v))
    json_object_set_new(obj, key, json_integer(map_id(m, json_integer_value(v))));
}

static int is_tensor(const json_t *v, const json_t *shape) {
  if (!json_is_array(v) || json_array_size(v) != 6 || !json_is_array(shape)) return 0;
  for (size_t i = 0; i < 5; i++)
    if (!json_is_integer(json_array_get(v, i))) return 0;
  if (!json_is_string(json_array_get(v, 5))) return 0;
  size_t i;
  json_t *d;
  json_array_foreach(shape, i, d) {
    if (!json_is_integer(d)) return 0;
  }
  return 1;
}

static void remap_value(json_t *v, const json_t *shape, idmap *m) {
  if (is_tensor(v, shape)) {
    for (size_t k = 0; k < 2; k++)
      json_array_set_new(v, k, json_integer(map_id(m, json_integer_value(json_array_get(v, k)))));
    return;
  }
  if (json_is_array(v) && json_is_array(shape)) {
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) { remap_value(x, json_array_get(shape, i), m); }
  }
}

static void zero(json_t *obj, const char *key) {
  if (json_object_get(obj, key) != NULL) json_object_set_new(obj, key, json_integer(0));
}

/* Normalise in file order and return the text (caller frees). */
static char *normalise(json_t *root) {
  static idmap ids, rfs;
  memset(&ids, 0, sizeof ids);
  memset(&rfs, 0, sizeof rfs);
  ids.next = 2;
  ids.keep = 1; /* 0 (none) and the process node */
  rfs.next = 1;
  rfs.keep = 0;
  zero(root, "pid");
  zero(root, "time");
  zero(root, "start_ts");
  zero(root, "finish_ts");
  json_t *nodes = json_object_get(root, "nodes");
  size_t i;
  json_t *node;
  json_array_foreach(nodes, i, node) {
    remap_int(node, "id", &ids);
    remap_int(node, "ctrl_deps", &ids);
    static const char *const io[2] = {"inputs", "outputs"};
    for (size_t k = 0; k < 2; k++) {
      json_t *o = json_object_get(node, io[k]);
      json_t *vals = json_object_get(o, "values"), *shapes = json_object_get(o, "shapes");
      size_t j;
      json_t *v;
      json_array_foreach(vals, j, v) { remap_value(v, json_array_get(shapes, j), &ids); }
    }
    zero(node, "ts");
    zero(node, "inclusive_dur");
    zero(node, "exclusive_dur");
    json_t *a;
    size_t j;
    json_array_foreach(json_object_get(node, "attrs"), j, a) {
      const char *nm = json_string_value(json_object_get(a, "name"));
      if (nm == NULL) continue;
      if (strcmp(nm, "fw_parent") == 0) remap_int(a, "value", &ids);
      if (strcmp(nm, "rf_id") == 0) remap_int(a, "value", &rfs);
      if (strcmp(nm, "os_tid") == 0) zero(a, "value"); /* the kernel's id differs per run */
    }
  }
  json_t *stats = json_object_get(json_object_get(root, "etr"), "stats");
  if (stats != NULL) {
    zero(stats, "bytes_written");
    zero(stats, "buffer_waits");
  }

  /* Print: top-level keys one per line, nodes one per line. */
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
#define APPEND(s)                                            \
  do {                                                       \
    const char *s_ = (s);                                    \
    size_t l_ = strlen(s_);                                  \
    while (len + l_ + 1 > cap) out = realloc(out, cap *= 2); \
    memcpy(out + len, s_, l_ + 1);                           \
    len += l_;                                               \
  } while (0)
  const size_t flags = JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER;
  APPEND("{\n");
  size_t nkeys = json_object_size(root), ki = 0;
  for (void *it = json_object_iter(root); it != NULL; it = json_object_iter_next(root, it), ki++) {
    const char *key = json_object_iter_key(it);
    json_t *val = json_object_iter_value(it);
    json_t *ks = json_string(key);
    char *kd = json_dumps(ks, JSON_ENCODE_ANY);
    json_decref(ks);
    APPEND(" ");
    APPEND(kd);
    APPEND(": ");
    free(kd);
    if (strcmp(key, "nodes") == 0) {
      APPEND("[\n");
      json_array_foreach(val, i, node) {
        char *d = json_dumps(node, flags);
        APPEND("  ");
        APPEND(d);
        APPEND(i + 1 < json_array_size(val) ? ",\n" : "\n");
        free(d);
      }
      APPEND(" ]");
    } else {
      char *d = json_dumps(val, flags);
      APPEND(d);
      free(d);
    }
    APPEND(ki + 1 < nkeys ? ",\n" : "\n");
  }
  APPEND("}\n");
#undef APPEND
  return out;
}

static void test_golden_basic(void **state) {
  (void)state;
  (void)etr_thread_id(); /* this thread is the first to draw a logical id */
  tu_trace t;
  tu_open(&t, NULL);
  record_everything();
  tu_close_ok(&t);
  char *got = normalise(t.root);
  const char *golden = ETR_TRACE_GOLDEN_DIR "/basic.json";
  const char *upd = getenv("ETR_UPDATE_GOLDEN");
  if (upd != NULL && strcmp(upd, "1") == 0) {
    FILE *f = fopen(golden, "wb");
    if (f == NULL) fail_msg("cannot write %s", golden);
    fputs(got, f);
    fclose(f);
    fprintf(stderr, "updated %s\n", golden);
  } else {
    size_t glen = 0;
    char *want = tu_read_file(golden, &glen);
    if (want == NULL) fail_msg("cannot read %s (regenerate with ETR_UPDATE_GOLDEN=1)", golden);
    if (strcmp(want, got) != 0) {
      FILE *f = fopen("basic.actual.json", "wb");
      if (f != NULL) {
        fputs(got, f);
        fclose(f);
      }
      size_t line = 1, i = 0;
      while (want[i] != '\0' && want[i] == got[i]) {
        if (want[i] == '\n') line++;
        i++;
      }
      size_t ls = i;
      while (ls > 0 && got[ls - 1] != '\n') ls--;
      fail_msg(
          "normalised trace differs from %s at line %zu:\n  want: %.300s\n  got:  %.300s\n"
          "(full output in basic.actual.json; ETR_UPDATE_GOLDEN=1 regenerates)",
          golden, line, want + ls, got + ls);
    }
    free(want);
  }
  free(got);
  tu_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_golden_basic),
  };
  return cmocka_run_group_tests_name("trace_golden", tests, NULL, NULL);
}
