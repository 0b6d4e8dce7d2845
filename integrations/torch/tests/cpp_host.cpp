// A C++ host on libtorch alone, no Python (ctest torch.cpp_host): it opens an etr trace with
// the C API, attaches libetr_torch (etr/torch.h) and runs aten ops on two threads. Checked:
// `etr validate` accepts the trace; every aten::mm run while attached is in it, on both
// threads (their tid attrs), with its input shapes; none from before attach or after detach.
//
// usage: torch_cpp_host TRACE.json ETR_TOOL
#include <ATen/ATen.h>
#include <jansson.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>

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

static const int kOps = 5;  // aten::mm per thread while attached

static void work(int64_t n) {
  at::Tensor a = at::randn({n, 3}), b = at::randn({3, 2});
  for (int i = 0; i < kOps; i++) a = at::relu(at::mm(at::mm(a, b), b.t()));
}

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: torch_cpp_host TRACE.json ETR_TOOL\n");
    return 2;
  }
  const char *path = argv[1];
  etr_trace *tr = nullptr;
  int rc = etr_trace_open(path, nullptr, &tr);
  HOST_CHECK(rc == 0, "etr_trace_open: %s", etr_strerror(rc));
  if (rc != 0) return 1;
  HOST_CHECK(etr_trace_enable(tr) == 0, "enable");
  work(4);  // before attach: not recorded
  HOST_CHECK(!etr_torch_attached(), "not attached yet");
  HOST_CHECK(etr_torch_attach() == 0 && etr_torch_attached(), "attach");
  HOST_CHECK(etr_torch_attach() == 0, "attach again (idempotent)");
  std::thread t1(work, 4), t2(work, 6);
  t1.join();
  t2.join();
  HOST_CHECK(etr_torch_detach() == 0 && !etr_torch_attached(), "detach");
  work(4);  // after detach: not recorded
  etr_trace_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  HOST_CHECK(etr_trace_close_stats(tr, &st) == 0, "close");
  HOST_CHECK(st.nodes_dropped == 0 && st.ends_without_begin == 0, "nothing dropped or misused");

  std::string cmd = std::string(argv[2]) + " validate --strict --quiet '" + path + "'";
  HOST_CHECK(std::system(cmd.c_str()) == 0, "%s", cmd.c_str());

  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  HOST_CHECK(root != nullptr, "%s: %s", path, err.text);
  if (!root) return 1;
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
  HOST_CHECK(mm == 2 * 2 * kOps, "%d aten::mm in the trace, %d run while attached", mm, 4 * kOps);
  HOST_CHECK(tids.size() == 2, "aten::mm on %zu threads, 2 expected", tids.size());
  HOST_CHECK(shapes.count("[[4,3],[3,2]]") && shapes.count("[[6,3],[3,2]]"),
             "the input shapes of both threads' first mm (%zu shapes)", shapes.size());
  json_decref(root);
  if (failures == 0) std::printf("torch_cpp_host: %d aten::mm on 2 threads, trace valid\n", mm);
  return failures ? 1 : 0;
}
