// C++ hosts on libtorch alone, no Python (ctest torch.cpp_host, torch.cpp_env,
// torch.cpp_preload). Modes:
//   api TRACE ETR_TOOL    opens an etr trace with the C API, attaches libetr_torch
//                         (etr/torch.h), runs aten ops on two threads, detaches, closes,
//                         then checks the trace (below); ops run before attach and after
//                         detach must not be in it
//   run                   only runs the ops on two threads: under ETR_TRACE, libetr_torch
//                         attaches by itself as it loads
//   check TRACE ETR_TOOL  checks a trace of `run`'s ops
// Checked: `etr validate --strict` accepts the trace; it holds every aten::mm of the two
// threads (their tid attrs), with the input shapes of each thread's first mm.
// The ops are cpp_host_work.cpp's; torch_plain (cpp_plain.cpp) runs the same ones knowing
// nothing of etr, for LD_PRELOAD=libetr_torch.so.
#include <jansson.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "cpp_host_work.h"
#include "etr/etr.h"
#include "etr/torch.h"

static int failures = 0;
#define HOST_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) {                                              \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                        \
      std::fprintf(stderr, "\n");                               \
      failures++;                                               \
    }                                                           \
  } while (0)

// The trace at path holds run_threads()'s ops, and only those aten::mm.
static void check_trace(const char *path, const char *tool) {
  std::string cmd = std::string(tool) + " validate --strict --quiet '" + path + "'";
  HOST_CHECK(std::system(cmd.c_str()) == 0, "%s", cmd.c_str());
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  HOST_CHECK(root != nullptr, "%s: %s", path, err.text);
  if (!root) return;
  json_t *nodes = json_object_get(root, "nodes");
  int mm = 0;
  std::set<json_int_t> tids;
  std::set<std::string> shapes;
  for (size_t i = 0; i < json_array_size(nodes); i++) {
    json_t *n = json_array_get(nodes, i);
    if (std::strcmp(json_string_value(json_object_get(n, "name")), "aten::mm") != 0) continue;
    mm++;
    json_t *attrs = json_object_get(n, "attrs");
    for (size_t k = 0; k < json_array_size(attrs); k++) {
      json_t *a = json_array_get(attrs, k);
      if (std::strcmp(json_string_value(json_object_get(a, "name")), "tid") == 0)
        tids.insert(json_integer_value(json_object_get(a, "value")));
    }
    char *s = json_dumps(json_object_get(json_object_get(n, "inputs"), "shapes"), JSON_COMPACT);
    shapes.insert(s ? s : "");
    std::free(s);
  }
  HOST_CHECK(mm == 2 * 2 * kOps, "%d aten::mm in the trace, %d expected", mm, 4 * kOps);
  HOST_CHECK(tids.size() == 2, "aten::mm on %zu threads, 2 expected", tids.size());
  HOST_CHECK(shapes.count("[[4,3],[3,2]]") && shapes.count("[[6,3],[3,2]]"),
             "the input shapes of both threads' first mm (%zu shapes)", shapes.size());
  json_decref(root);
  if (failures == 0) std::printf("torch_cpp_host: %d aten::mm on 2 threads, trace valid\n", mm);
}

static void api(const char *path, const char *tool) {
  etr_trace *tr = nullptr;
  int rc = etr_trace_open(path, nullptr, &tr);
  HOST_CHECK(rc == 0, "etr_trace_open: %s", etr_strerror(rc));
  if (rc != 0) return;
  HOST_CHECK(etr_trace_enable(tr) == 0, "enable");
  work(4);  // before attach: not recorded
  HOST_CHECK(!etr_torch_attached(), "not attached yet (no ETR_TRACE)");
  HOST_CHECK(etr_torch_attach() == 0 && etr_torch_attached(), "attach");
  HOST_CHECK(etr_torch_attach() == 0, "attach again (idempotent)");
  run_threads();
  HOST_CHECK(etr_torch_detach() == 0 && !etr_torch_attached(), "detach");
  work(4);  // after detach: not recorded
  etr_trace_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  HOST_CHECK(etr_trace_close_stats(tr, &st) == 0, "close");
  HOST_CHECK(st.nodes_dropped == 0 && st.ends_without_begin == 0, "nothing dropped or misused");
  check_trace(path, tool);
}

int main(int argc, char **argv) {
  if (argc == 4 && !std::strcmp(argv[1], "api")) {
    api(argv[2], argv[3]);
  } else if (argc == 2 && !std::strcmp(argv[1], "run")) {
    run_threads();
  } else if (argc == 4 && !std::strcmp(argv[1], "check")) {
    check_trace(argv[2], argv[3]);
  } else {
    std::fprintf(stderr, "usage: torch_cpp_host api|check TRACE ETR_TOOL, or run\n");
    return 2;
  }
  return failures ? 1 : 0;
}
