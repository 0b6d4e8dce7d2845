// c10d dispatcher ops as etr collective info (comm.h).
#include "comm.h"

#include "python_groups.h"

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#if __has_include(<torch/csrc/distributed/c10d/ProcessGroup.hpp>)
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define ETR_TORCH_HAVE_C10D 1
#else
#define ETR_TORCH_HAVE_C10D 0
#endif

namespace etr_torch {

namespace {

// The groups etr._torch named, by address (python_groups.h).
struct NamedGroup {
  std::string name;
  int64_t size, group_rank;
};
std::mutex named_mutex;
std::unordered_map<uintptr_t, NamedGroup> named;

// The name given to the group at pg when it still has the size and rank it had then.
bool named_group(uintptr_t pg, int64_t size, int64_t group_rank, char *out, size_t cap) {
  std::lock_guard<std::mutex> g(named_mutex);
  auto it = named.find(pg);
  if (it == named.end() || it->second.size != size || it->second.group_rank != group_rank)
    return false;
  std::snprintf(out, cap, "%s", it->second.name.c_str());
  return true;
}

// The elements of the tensors a value holds (a tensor, a list of them, a list of lists),
// and the dtype of the first. Nested at most two deep, as c10d's arguments are.
void count(const c10::IValue &v, int depth, uint64_t *n, const char **dtype) {
  if (v.isTensor()) {
    const at::Tensor &t = v.toTensor();
    if (!t.defined()) return;
    *n += static_cast<uint64_t>(t.numel());
    if (!*dtype) *dtype = c10::toString(t.scalar_type());
  } else if ((v.isList() || v.isTensorList()) && depth < 2) {
    for (const c10::IValue &x : v.toListRef()) count(x, depth + 1, n, dtype);
  }
}

bool holds_tensors(const c10::IValue &v) { return v.isTensor() || v.isList() || v.isTensorList(); }

// The process group an argument is (c10d passes it as a TorchScript custom-class object),
// or null: the check is by type (a dynamic_cast), never by assumption.
#if ETR_TORCH_HAVE_C10D
const c10d::ProcessGroup *group_of(const c10::IValue &v) {
  if (!v.isObject()) return nullptr;
  const c10::ivalue::Object &obj = v.toObjectRef();
  if (obj.slots().size() != 1 || !obj.getSlot(0).isCapsule()) return nullptr;
  c10::intrusive_ptr<torch::CustomClassHolder> held = obj.getSlot(0).toCapsule();
  return dynamic_cast<const c10d::ProcessGroup *>(held.get());
}
#endif

}  // namespace

bool comm_info(const char *name, c10::ArrayRef<const c10::IValue> args, CommCall *call) {
  etr_collective_info *info = &call->info;
  call->pg_name[0] = '\0';
  call->in_arg = call->out_arg = -1;
  call->group_rank = 0;
#if ETR_TORCH_HAVE_C10D
  if (std::strncmp(name, "c10d::", 6) != 0) return false;
  const c10d::ProcessGroup *pg = nullptr;
  size_t pg_arg = 0;
  for (; pg_arg < args.size(); pg_arg++)
    if ((pg = group_of(args[pg_arg])) != nullptr) break;
  if (!pg) return false;
  // The collective's name is the op's, without the namespace and the trailing "_" of an
  // in-place op: c10d::allgather_ is "allgather", c10d::_allgather_base_ "_allgather_base",
  // as PyTorch 2.x's record_param_comms names them.
  call->name.assign(name + 6);
  if (!call->name.empty() && call->name.back() == '_') call->name.pop_back();
  const char *cname = call->name.c_str();
  // The messages: an op that takes two tensor arguments first (allgather_: outputs then
  // inputs; reduce_scatter_, gather_, scatter_, alltoall_, the _base_ ops) reads the second
  // and writes the first; the others (allreduce_, broadcast_, reduce_, send, recv_) work in
  // place on the first. A barrier has none.
  const c10::IValue *in = nullptr, *out = nullptr;
  if (args.size() >= 2 && holds_tensors(args[0]) && holds_tensors(args[1])) {
    in = &args[1];
    out = &args[0];
    call->in_arg = 1;
    call->out_arg = 0;
  } else if (!args.empty() && holds_tensors(args[0])) {
    in = out = &args[0];
    call->in_arg = call->out_arg = 0;
  }
  const char *dtype = nullptr;
  uint64_t n_in = 0, n_out = 0;
  if (in) count(*in, 0, &n_in, &dtype);
  if (out) count(*out, 0, &n_out, &dtype);
  *info = ETR_COLLECTIVE_INFO_INIT;
  info->name = cname;
  info->dtype = dtype;
  info->in_msg_nelems = n_in;
  info->out_msg_nelems = n_out;
  info->pg_size = static_cast<uint64_t>(pg->getSize());
  call->group_rank = pg->getRank();
  // A rooted collective: PyTorch's record_param_comms holds the root's group rank there
  // (opts.rootRank), the same on every rank, and PARAM's comm replay takes it as the root.
  // A point-to-point op: the peer's (send's dstRank, recv's srcRank), PARAM's destination or
  // source. c10d passes it as the first int after the process group (broadcast_, reduce_,
  // gather_, scatter_, send, recv_; reduce_'s ReduceOp, an object, comes between;
  // recv_any_source_'s first int is its tag, and it is not listed).
  static const char *const rooted[] = {"broadcast", "reduce", "gather", "scatter", "send", "recv"};
  for (const char *r : rooted)
    if (std::strcmp(cname, r) == 0)
      for (size_t i = pg_arg + 1; i < args.size(); i++)
        if (args[i].isInt()) {
          call->group_rank = args[i].toInt();
          break;
        }
  if (named_group(reinterpret_cast<uintptr_t>(pg), pg->getSize(), pg->getRank(), call->pg_name,
                  sizeof call->pg_name) ||
      etr_dist_group_of(pg->getSize(), pg->getRank(), call->pg_name, sizeof call->pg_name) == 1)
    info->pg_name = call->pg_name;
  return true;
#else
  (void)name;
  (void)args;
  (void)info;
  return false;
#endif
}

int64_t comm_next_seq(const char *pg_name) {
  static std::mutex m;
  static std::unordered_map<std::string, int64_t> next;
  std::lock_guard<std::mutex> g(m);
  return next[pg_name]++;
}

}  // namespace etr_torch

extern "C" int etr_torch__name_group(uintptr_t pg, const char *name, int64_t size,
                                     int64_t group_rank) {
  if (!name || !*name || std::strlen(name) >= sizeof etr_torch::CommCall::pg_name || size < 1 ||
      group_rank < 0 || group_rank >= size)
    return ETR_EINVAL;
  if (pg == 0) return 0;
  try {
    std::lock_guard<std::mutex> g(etr_torch::named_mutex);
    etr_torch::named[pg] = etr_torch::NamedGroup{name, size, group_rank};
  } catch (...) {
    return ETR_ENOMEM;
  }
  return 0;
}
