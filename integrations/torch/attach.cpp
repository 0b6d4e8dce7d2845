// libetr_torch's C entry points (etr/torch.h): attaching the RecordFunction callback of
// etr_torch.cpp to PyTorch and detaching it, and attaching as the library loads under
// ETR_TRACE.
#include <ATen/record_function.h>

#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "etr/etr.h"
#include "etr/torch.h"
#include "callback.h"
#include "held.h"

namespace {

std::mutex attach_mutex;
at::CallbackHandle handle = 0;

}  // namespace

extern "C" int etr_torch_attach(void) {
  std::lock_guard<std::mutex> g(attach_mutex);
  if (handle != 0) return 0;
  try {
    handle =
        at::addGlobalCallback(at::RecordFunctionCallback(etr_torch::on_start, etr_torch::on_end)
                                  .needsInputs(true)
                                  .needsOutputs(true)
                                  .needsIds(true));
  } catch (...) {
    return ETR_EINVAL;
  }
  return 0;
}

extern "C" int etr_torch_detach(void) {
  std::lock_guard<std::mutex> g(attach_mutex);
  if (handle == 0) return 0;
  at::removeCallback(handle);
  handle = 0;
  etr_torch::held_release_all();
  return 0;
}

extern "C" bool etr_torch_attached(void) {
  std::lock_guard<std::mutex> g(attach_mutex);
  return handle != 0;
}

namespace {

// Under ETR_TRACE ("record the whole run"), PyTorch's ops too: a process that loads
// libetr_torch (a C++ host linking it, LD_PRELOAD=libetr_torch.so for one that does not,
// the Python package's etr.torch) attaches as it loads, when libetr's constructor opened
// the ETR_TRACE trace (libetr and libtorch are initialized first: this library needs
// them). ETR_TRACE_TORCH=0 leaves it to the host.
bool attach_under_env() {
  if (!etr_trace_current()) return false;  // (the ETR_TRACE trace only)
  // The switch's values as libetr's (any case); another value keeps the default, on, and
  // says so where libetr's diagnostics go by default (ETR_LOG), never silently.
  const char *v = std::getenv("ETR_TRACE_TORCH");
  if (v && *v) {
    auto is = [v](const char *w) { return strcasecmp(v, w) == 0; };
    if (!std::strcmp(v, "0") || is("off") || is("no") || is("false")) return false;
    if (std::strcmp(v, "1") && !is("on") && !is("yes") && !is("true")) {
      const char *log = std::getenv("ETR_LOG");
      if (log && *log && *log != '0')
        std::fprintf(stderr,
                     "etr: warn: ETR_TRACE_TORCH=%s unknown (1, on, true, yes or 0, off, false, "
                     "no); on\n",
                     v);
    }
  }
  return etr_torch_attach() == 0;
}
[[maybe_unused]] const bool attached_under_env = attach_under_env();

}  // namespace
