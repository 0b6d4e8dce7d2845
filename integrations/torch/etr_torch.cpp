// etr for PyTorch: a global at::RecordFunction callback that records every op PyTorch
// reports (aten ops, autograd's backward functions, record_function scopes) as an etr
// record, with its inputs and outputs as etr values: tensors by identity (TensorImpl),
// storage identity, offset, numel, item size, dtype, device, sizes and strides; ints,
// doubles, bools, strings, devices, None, lists and tuples; anything else as an opaque
// object of its IValue kind. Sequence numbers, the forward thread of backward ops, the
// scope and the operator's schema come along.
//
// Built into the Python extension etr._torch (etr.torch.trace attaches it); the C entry
// points etr_torch_attach/detach let a C++ host attach it without Python.
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "etr/etr.h"
#include "etr_torch.h"

namespace {

// Tensor retirement. PyTorch has no hook for a TensorImpl's death, so each tensor and
// storage etr has given an id is held by a weak reference: its memory (the object's shell;
// the data is freed as usual) cannot be reused by a new object while etr still knows the
// address. From time to time the expired ones are retired (etr_tensor_died /
// etr_storage_died) and let go; only then can the address come back, and it then gets a new
// id. So ids never alias within a trace. docs/TORCH.md.
using WeakTensor = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
using WeakStorage = c10::weak_intrusive_ptr<c10::StorageImpl>;
std::mutex objs_mutex;
std::unordered_map<const void *, WeakTensor> tensors_seen;
std::unordered_map<const void *, WeakStorage> storages_seen;
size_t objs_added = 0;
// Each thread remembers the objects it saw held since the last sweep (a small direct-mapped
// cache, emptied when the sweep epoch moves): most ops take tensors seen just before, and
// need no lock.
std::atomic<uint64_t> sweep_epoch{1};
struct HeldCache {
  uint64_t epoch = 0;
  const void *p[256] = {};
};
thread_local HeldCache held_cache;

bool held_recently(const void *p) {
  HeldCache &c = held_cache;
  uint64_t e = sweep_epoch.load(std::memory_order_acquire);
  if (c.epoch != e) {
    std::memset(c.p, 0, sizeof c.p);
    c.epoch = e;
    return false;
  }
  return c.p[(reinterpret_cast<uintptr_t>(p) >> 4) & 255] == p;
}

void note_held(const void *p) { held_cache.p[(reinterpret_cast<uintptr_t>(p) >> 4) & 255] = p; }

// (objs_mutex held) retire what died; amortised: after as many new objects as are held
void sweep_locked() {
  for (auto it = tensors_seen.begin(); it != tensors_seen.end();) {
    if (it->second.expired()) {
      etr_tensor_died(it->first);
      it = tensors_seen.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = storages_seen.begin(); it != storages_seen.end();) {
    if (it->second.expired()) {
      etr_storage_died(it->first);
      it = storages_seen.erase(it);
    } else {
      ++it;
    }
  }
  objs_added = 0;
  sweep_epoch.fetch_add(1, std::memory_order_release); /* every thread's cache is stale */
}

void hold(const at::Tensor &t) {
  const void *p = t.unsafeGetTensorImpl();
  const void *sp = t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
  if (held_recently(p) && (!sp || held_recently(sp))) return;
  std::lock_guard<std::mutex> g(objs_mutex);
  if (tensors_seen.find(p) == tensors_seen.end()) {
    tensors_seen.emplace(p, WeakTensor(t.getIntrusivePtr()));
    objs_added++;
  }
  if (t.has_storage()) {
    const void *s = t.storage().unsafeGetStorageImpl();
    if (storages_seen.find(s) == storages_seen.end()) {
      storages_seen.emplace(s, t.storage().getWeakStorageImpl());
      objs_added++;
    }
  }
  if (objs_added > 1024 && objs_added > tensors_seen.size() / 2) {
    sweep_locked();
    return;
  }
  note_held(p);
  if (sp) note_held(sp);
}

void release_all() {
  std::lock_guard<std::mutex> g(objs_mutex);
  sweep_locked();
  tensors_seen.clear(); /* the living ones: etr forgets them with the trace */
  storages_seen.clear();
}

// The values of one call: everything the etr_values point into lives here until the call
// that reads them (begin or end) returns.
// Contiguous runs of T handed out from chunks that are kept for the next call (no malloc
// per op once warm); a run larger than a chunk gets its own block, freed at clear().
template <typename T>
struct Pool {
  static constexpr size_t kChunk = 1024;
  std::vector<std::unique_ptr<T[]>> chunks, big;
  size_t chunk = 0, used = 0;  // the chunk being filled, and how much of it

  T *take(size_t n) {
    if (n > kChunk) {
      big.emplace_back(new T[n]);
      return big.back().get();
    }
    if (chunks.empty() || used + n > kChunk) {
      if (!chunks.empty()) chunk++;
      if (chunk == chunks.size()) chunks.emplace_back(new T[kChunk]);
      used = 0;
    }
    T *p = chunks[chunk].get() + used;
    used += n;
    return p;
  }
  void clear() {
    chunk = 0;
    used = 0;
    big.clear();
  }
};

struct Values {
  std::vector<etr_value> top;
  Pool<etr_value> items;  // items of lists and tuples
  Pool<etr_tensor> tensors;
  std::deque<std::string> strings;

  void clear() {
    top.clear();
    items.clear();
    tensors.clear();
    strings.clear();
  }

  // dtype and device names, made once per thread
  std::unordered_map<int, std::string> dtype_names, device_names;

  const char *dtype_name(const at::Tensor &t) {
    int k = static_cast<int>(t.scalar_type());
    auto it = dtype_names.find(k);
    if (it == dtype_names.end()) it = dtype_names.emplace(k, std::string(t.dtype().name())).first;
    return it->second.c_str();
  }

  const char *device_name(const c10::Device &d) {
    int k = static_cast<int>(d.type()) * 65536 + d.index() + 1;
    auto it = device_names.find(k);
    if (it == device_names.end()) it = device_names.emplace(k, d.str()).first;
    return it->second.c_str();
  }

  etr_value tensor(const at::Tensor &t) {
    etr_tensor &e = *tensors.take(1);
    std::memset(&e, 0, sizeof e);
    if (!t.defined()) return etr_value_tensor(&e);  // dtype NULL: an undefined tensor
    hold(t);
    e.impl = t.unsafeGetTensorImpl();
    if (t.has_storage()) e.storage = t.storage().unsafeGetStorageImpl();
    e.storage_offset = t.has_storage() ? t.storage_offset() : 0;
    e.numel = t.numel();
    e.itemsize = static_cast<int64_t>(t.dtype().itemsize());
    e.dtype = dtype_name(t);
    e.device = device_name(t.device());
    e.ndim = static_cast<int32_t>(t.dim());
    e.sizes = t.sizes().data();
    // (sparse and other layouts without strides: etr writes contiguous strides)
    e.strides = t.layout() == c10::kStrided ? t.strides().data() : nullptr;
    return etr_value_tensor(&e);
  }

  etr_value of(const c10::IValue &v, int depth) {
    if (v.isTensor()) return tensor(v.toTensor());
    if (v.isNone()) return etr_value_none();
    if (v.isBool()) return etr_value_bool(v.toBool());
    if (v.isInt()) return etr_value_int(v.toInt());
    if (v.isDouble()) return etr_value_double(v.toDouble());
    if (v.isString()) {
      const std::string &s = v.toStringRef();
      return s.empty() ? etr_value_string("")
                       : etr_value_string_n(s.data(), static_cast<uint32_t>(s.size()));
    }
    if (v.isDevice()) return etr_value_device(device_name(v.toDevice()));
    if ((v.isList() || v.isTuple()) && depth < 34) {
      c10::ArrayRef<c10::IValue> items =
          v.isList() ? v.toListRef() : c10::ArrayRef<c10::IValue>(v.toTupleRef().elements());
      size_t n = items.size() > 4097 ? 4097 : items.size();  // etr keeps 4096, counts the cut
      etr_value *out = this->items.take(n);                  // (taken before the items' own lists)
      for (size_t i = 0; i < n; i++) out[i] = of(items[i], depth + 1);
      return v.isList() ? etr_value_list(out, static_cast<uint32_t>(n))
                        : etr_value_tuple(out, static_cast<uint32_t>(n));
    }
    strings.emplace_back(v.tagKind());
    return etr_value_object(strings.back().c_str());
  }

  void all(const c10::IValue *vs, size_t n) {
    top.reserve(n);
    for (size_t i = 0; i < n; i++) top.push_back(of(vs[i], 0));
  }
};

// One per thread, reused: a callback's values are needed only until it returns, and the
// start and end callbacks of a thread never run inside one another.
thread_local Values values;

// Contexts are made and dropped once per op: each thread keeps a few freed ones.
struct ContextCache {
  std::vector<void *> free_blocks;
  ~ContextCache() {
    for (void *p : free_blocks) ::operator delete(p);
  }
};
thread_local ContextCache context_cache;

struct Context : at::ObserverContext {
  etr_record rec;

  static void *operator new(size_t n) {
    std::vector<void *> &f = context_cache.free_blocks;
    if (n == sizeof(Context) && !f.empty()) {
      void *p = f.back();
      f.pop_back();
      return p;
    }
    return ::operator new(n);
  }
  static void operator delete(void *p, size_t n) {
    std::vector<void *> &f = context_cache.free_blocks;
    if (n == sizeof(Context) && f.size() < 256) {
      f.push_back(p);
      return;
    }
    ::operator delete(p);
  }
};

// PyTorch's thread ids (RecordFunction::currentThreadId) to etr's, for the fw_tid of
// backward ops: each thread says its own when it first records.
std::mutex tid_mutex;
std::unordered_map<uint64_t, uint64_t> tid_map;
thread_local bool tid_known = false;

void note_thread() {
  if (tid_known) return;
  tid_known = true;
  std::lock_guard<std::mutex> g(tid_mutex);
  tid_map[at::RecordFunction::currentThreadId()] = etr_thread_id();
}

uint64_t etr_tid_of(uint64_t torch_tid) {
  std::lock_guard<std::mutex> g(tid_mutex);
  auto it = tid_map.find(torch_tid);
  return it == tid_map.end() ? 0 : it->second;
}

// Schema strings, made once per operator and thread (the name pointer is the operator's own).
thread_local std::unordered_map<const void *, std::string> schema_cache;

const std::string &schema_of(const at::RecordFunction &fn) {
  auto it = schema_cache.find(fn.name());
  if (it != schema_cache.end()) return it->second;
  std::string s;
  if (auto sc = fn.operator_schema()) {
    std::ostringstream o;
    o << *sc;
    s = o.str();
  }
  return schema_cache.emplace(fn.name(), std::move(s)).first->second;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn) {
  auto ctx = std::make_unique<Context>();
  size_t scope = static_cast<size_t>(fn.scope());
  // (PyTorch's RecordScope numbers are etr_scope's)
  etr_record_init(&ctx->rec, fn.name(),
                  static_cast<etr_scope>(scope < ETR_SCOPE_COUNT ? scope : 0));
  if (!etr_record_is_active(&ctx->rec)) return nullptr;  // nothing observes: nothing to end
  note_thread();
  etr_record &r = ctx->rec;
  r.seq_nr = fn.seqNr();
  if (fn.forwardThreadId() != 0) r.fw_tid = etr_tid_of(fn.forwardThreadId());
  r.schema = schema_of(fn).c_str();
  Values &in = values;
  in.clear();
  if (etr_record_needs_inputs(&r)) {
    c10::ArrayRef<const c10::IValue> args = fn.inputs();
    in.all(args.data(), args.size());
    r.inputs = in.top.data();
    r.n_inputs = static_cast<uint32_t>(in.top.size());
  }
  etr_record_begin(&r);
  r.inputs = nullptr;
  r.n_inputs = 0;
  return ctx;
}

void on_end(const at::RecordFunction &fn, at::ObserverContext *c) {
  auto *ctx = static_cast<Context *>(c);
  if (!ctx) return;
  Values &out = values;
  out.clear();
  if (etr_record_needs_outputs(&ctx->rec)) {
    const std::vector<c10::IValue> &o = fn.outputs();
    out.all(o.data(), o.size());
    ctx->rec.outputs = out.top.data();
    ctx->rec.n_outputs = static_cast<uint32_t>(out.top.size());
  }
  etr_record_end(&ctx->rec);
}

std::mutex attach_mutex;
at::CallbackHandle handle = 0;

}  // namespace

extern "C" int etr_torch_attach(void) {
  std::lock_guard<std::mutex> g(attach_mutex);
  if (handle != 0) return 0;
  try {
    handle = at::addGlobalCallback(
        at::RecordFunctionCallback(on_start, on_end).needsInputs(true).needsOutputs(true));
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
  release_all();
  return 0;
}

extern "C" bool etr_torch_attached(void) {
  std::lock_guard<std::mutex> g(attach_mutex);
  return handle != 0;
}
