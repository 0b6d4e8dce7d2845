// etr/etr.hpp: the guard begins and ends ops, carries inputs and outputs, closes an op left
// by an exception as failed (and the ops inside it as abandoned), and etr::Trace writes a
// complete file. Records through the public header, then reads the file with jansson.
#include <jansson.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "etr/etr.hpp"

static int failures = 0;
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                          \
    }                                                                      \
  } while (0)

static json_t *node(json_t *nodes, const char *name) {
  size_t i;
  json_t *n;
  json_array_foreach(nodes, i, n) {
    if (!std::strcmp(json_string_value(json_object_get(n, "name")), name)) return n;
  }
  std::fprintf(stderr, "FAIL: no node named %s\n", name);
  failures++;
  return nullptr;
}

static json_int_t id(json_t *n) { return n ? json_integer_value(json_object_get(n, "id")) : -1; }
static json_int_t parent(json_t *n) {
  return n ? json_integer_value(json_object_get(n, "ctrl_deps")) : -2;
}
static bool has_attr(json_t *n, const char *name) {
  if (!n) return false;
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(n, "attrs"), i, a) {
    if (!std::strcmp(json_string_value(json_object_get(a, "name")), name)) return true;
  }
  return false;
}
static json_t *values(json_t *n, const char *io) {
  return n ? json_object_get(json_object_get(n, io), "values") : nullptr;
}

static void throws_inside() {
  etr::Op inner("hpp_inner");
  etr::Op deeper("hpp_deeper");
  throw std::runtime_error("boom");
}

int main() {
  char path[] = "/tmp/etr-hpp-XXXXXX.json";
  int fd = mkstemps(path, 5);
  if (fd < 0) return 2;
  close(fd);
  {
    etr::Trace trace(path);
    CHECK(trace.ok());
    etr::set_thread_name("hpp-main");
    { etr::Op plain("hpp_plain"); }
    const std::string label = "a label";
    {
      etr::Op op("hpp_inputs", {etr::value(int64_t{7}), etr::value(2.5), etr::value(label),
                                etr::value(true), etr::none()});
      CHECK(op.active());
      op.set_outputs({etr::value(42)});
    }
    try {
      etr::Op failing("hpp_failing");
      throws_inside();
    } catch (const std::exception &) {
    }
    etr_registry_stats rs0{};
    rs0.struct_size = sizeof rs0;
    etr_registry_stats_get(&rs0);
    {
      // a deferred guard that is never begun: no op, and no misuse (it counted an end
      // without begin before)
      etr::Op unused(etr::Op::deferred, "hpp_never_begun");
    }
    etr_registry_stats rs1{};
    rs1.struct_size = sizeof rs1;
    etr_registry_stats_get(&rs1);
    CHECK(rs1.ends_without_begin == rs0.ends_without_begin);
    {
      etr::Op op(etr::Op::deferred, "hpp_deferred");
      op.set_schema("hpp_deferred(int x) -> int");
      etr_value in[1] = {etr::value(3)};
      if (op.needs_inputs()) op.set_inputs(in, 1);
      op.begin();
      etr::Op child("hpp_child");
    }
    etr::Op after("hpp_after");  // ended before the trace closes: members end in reverse
  }
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  CHECK(root != nullptr);
  if (!root) {
    std::fprintf(stderr, "%s: %s\n", path, err.text);
    return 1;
  }
  json_t *nodes = json_object_get(root, "nodes");
  json_t *thread = nullptr;
  size_t i;
  json_t *n;
  json_array_foreach(nodes, i, n) {
    if (!std::strcmp(json_string_value(json_object_get(n, "name")),
                     "[pytorch|profiler|execution_trace|thread]"))
      thread = n;
  }
  CHECK(thread != nullptr);
  json_t *plain = node(nodes, "hpp_plain"), *inputs = node(nodes, "hpp_inputs");
  json_t *failing = node(nodes, "hpp_failing"), *inner = node(nodes, "hpp_inner");
  json_t *deeper = node(nodes, "hpp_deeper"), *deferred = node(nodes, "hpp_deferred");
  json_t *child = node(nodes, "hpp_child"), *after = node(nodes, "hpp_after");
  CHECK(parent(plain) == id(thread));
  // inputs in order, the output, and no failure mark
  json_t *iv = values(inputs, "inputs");
  CHECK(json_array_size(iv) == 5);
  CHECK(json_integer_value(json_array_get(iv, 0)) == 7);
  CHECK(json_real_value(json_array_get(iv, 1)) == 2.5);
  const char *s2 = json_string_value(json_array_get(iv, 2));
  CHECK(s2 && !std::strcmp(s2, "a label"));
  CHECK(json_is_true(json_array_get(iv, 3)));
  CHECK(json_integer_value(json_array_get(values(inputs, "outputs"), 0)) == 42);
  CHECK(!has_attr(inputs, "etr_failed"));
  // the exception: every guard it unwound through ended the op failed, innermost first
  CHECK(has_attr(failing, "etr_failed") && has_attr(inner, "etr_failed"));
  CHECK(has_attr(deeper, "etr_failed"));
  CHECK(parent(inner) == id(failing) && parent(deeper) == id(inner));
  CHECK(parent(failing) == id(thread));
  CHECK(json_array_size(values(failing, "outputs")) == 0);
  // a deferred guard: schema and inputs set before begin; later ops are not under the failed
  CHECK(parent(deferred) == id(thread) && parent(child) == id(deferred));
  CHECK(json_integer_value(json_array_get(values(deferred, "inputs"), 0)) == 3);
  CHECK(parent(after) == id(thread));
  CHECK(!has_attr(after, "etr_failed") && !has_attr(after, "etr_incomplete"));
  // the thread node carries the name given through the C++ helper
  char *attrs = thread ? json_dumps(json_object_get(thread, "attrs"), 0) : nullptr;
  CHECK(attrs && std::strstr(attrs, "hpp-main"));
  std::free(attrs);
  json_t *stats = json_object_get(json_object_get(root, "etr"), "stats");
  CHECK(json_integer_value(json_object_get(stats, "ends_without_begin")) == 0);
  CHECK(json_integer_value(json_object_get(stats, "ops_abandoned")) == 0);
  json_decref(root);
  std::remove(path);
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
