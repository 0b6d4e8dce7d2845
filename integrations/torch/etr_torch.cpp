// etr for PyTorch: a global at::RecordFunction callback that records every op PyTorch
// reports (aten ops, autograd's backward functions, record_function scopes) as an etr
// record, with its inputs and outputs as etr values: tensors by identity (TensorImpl),
// storage identity, offset, numel, item size, dtype, device, sizes and strides; ints,
// doubles, bools, strings, devices, None, lists and tuples; anything else as an opaque
// object of its IValue kind. Sequence numbers, the forward thread of backward ops, the
// scope and the operator's schema come along.
//
// libetr_torch: the C entry points of etr/torch.h (attach.cpp) attach it for a C++ host; the
// Python extension etr._torch (etr.torch.trace) calls the same ones.
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "etr/etr.h"
#include "etr/torch.h"
#include "callback.h"
#include "comm.h"
#include "held.h"
#include "uncaught.h"
#include "python_errors.h"

namespace {

// Everything a thread needs on the per-op path hangs off one ThreadState, reached through
// one thread-local pointer (a trivially initialised thread_local costs one TLS lookup per
// callback; each access to a thread_local with a constructor costs a lookup and a guard).

// Tensor retirement: each thread holds the tensors and storages it reported in its Held
// set (held.h), so that ids never alias within a trace.
using etr_torch::Held;

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
    if (!big.empty()) big.clear();
  }
};

struct Context;

// Python errors. Reading a tensor may run Python (a __torch_dispatch__ subclass whose sizes
// or strides are its own), and when that Python raises, PyTorch throws a C++ exception
// (python_error) but leaves the Python error set on the thread, for the code that catches
// it to hand back to Python. etr catches it and writes the tensor without what it could not
// read (strides, or the shape); the error left set would make the op's Python caller fail
// ("returned a result with an exception set", SystemError) where the untraced program runs: a
// subclass that refuses strides to ops that never ask for them, as etr does. etr._torch gives the
// function that drops it (python_errors.h; a KeyboardInterrupt, a Ctrl-C that came while that
// code ran, it hands back to Python as an interrupt), called at once: the next read of the
// walk may run Python code again, which must not find an error set. (It takes the GIL with
// the thread's held set held, as a subclass's Python sizes code does: detach never waits for a
// set with the registry of sets held, held.cpp.)
std::atomic<void (*)(void)> error_drop{nullptr};

void python_error_left() {
  if (void (*drop)(void) = error_drop.load(std::memory_order_acquire)) drop();
}

// PyTorch's thread ids (RecordFunction::currentThreadId) to etr's, for the fw_tid of
// backward ops: each thread says its own when it first records.
std::mutex tid_mutex;
std::unordered_map<uint64_t, uint64_t> tid_map;

uint64_t etr_tid_of(uint64_t torch_tid) {
  std::lock_guard<std::mutex> g(tid_mutex);
  auto it = tid_map.find(torch_tid);
  return it == tid_map.end() ? 0 : it->second;
}

// The values of one call: everything the etr_values point into lives here until the call
// that reads them (begin or end) returns. (A callback that runs inside another's walk has its
// own: ThreadState::nest.)
struct WalkValues {
  std::unique_ptr<etr_value[]> top;           // the call's inputs or outputs
  std::unique_ptr<etr_tensor[]> top_tensors;  // their tensors (top[i]'s is top_tensors[i])
  size_t n_top = 0, top_cap = 0;
  Pool<etr_value> items;            // items of lists and tuples
  Pool<etr_tensor> tensors;         // tensors in lists and tuples
  std::deque<std::string> strings;  // opaque objects' kinds, odd dtypes' names
  bool pooled = false;              // items, tensors or strings used since clear()

  // (nothing allocates: the pools' vectors and the deque trade their buffers)
  void swap_values(WalkValues &o) noexcept {
    top.swap(o.top);
    top_tensors.swap(o.top_tensors);
    std::swap(n_top, o.n_top);
    std::swap(top_cap, o.top_cap);
    std::swap(items, o.items);
    std::swap(tensors, o.tensors);
    strings.swap(o.strings);
    std::swap(pooled, o.pooled);
  }
};

struct ThreadState : WalkValues {
  // A callback inside a callback of the same thread: the values (WalkValues) hold a walk's
  // result until its record is begun or ended, and reading a tensor may run ops (a
  // __torch_dispatch__ subclass whose sizes or strides are Python code), whose callbacks come
  // back here before the walk is done. walking says a walk is under way (set by Walking,
  // below); a callback that finds one puts the walk's values aside (nest), works on fresh
  // ones, and gives them back when its record is begun or ended (unnest). Before, it
  // overwrote them: the outer op was written with the inner ops' tensors as its own, and a
  // larger inner op freed the outer's array under it.
  bool walking = false;
  std::vector<std::unique_ptr<WalkValues>> aside;

  Held *held = nullptr;  // registered (held_join)
  bool held_locked = false;
  bool sweep_due = false;

  // dtype and device names, made once per thread and interned (names_ keeps them when
  // etr_intern cannot)
  const char *dtype_names[static_cast<int>(c10::ScalarType::NumOptions)] = {};
  struct DeviceName {
    int key;
    const char *name;
  };
  std::vector<DeviceName> device_names;
  int last_device_key = -1;  // the last device looked up (no device has this key)
  const char *last_device_name = nullptr;
  std::deque<std::string> names_;

  // An op's name and schema, found by the name's address. For an operator, fn.name() is the
  // name held by its schema in the dispatcher: the same address on every call, so the name
  // is interned once (etr then knows it by address and compares no bytes of it) and the
  // schema string made once. Other records (custom autograd Functions, user scopes,
  // autograd's evaluate_function) name themselves with a string of their own, often inside
  // the RecordFunction on the stack, so one address holds many names in turn: they take no
  // slot, and their name is recorded as it is. An operator's address may still be taken by
  // another string once the operator is gone, so a slot keeps the bytes it was made for and
  // a hit compares them too: the address alone would give one record another's name or
  // schema. An address has two slots it may take (op_slot_pair), so that two names that keep
  // coming back do not take one slot from each other on every call: with one slot per
  // address (its low bits), and evaluate_function's names taking slots too, a training loop
  // remade a slot for one op in eight (docs/BENCHMARKS.md).
  struct OpSlot {
    const char *name = nullptr;  // fn.name() it was made for
    const char *text = nullptr;  // name's bytes: the interned copy, else copy's
    bool interned = false;
    std::string copy;
    const char *schema = nullptr;  // interned
    uint64_t made = 0;             // when it was made (made_): the older of two is remade
  };
  static constexpr size_t kOpSlots = 256;
  uint64_t made_ = 0;
  std::unique_ptr<OpSlot[]> op_slots{new OpSlot[kOpSlots]};
  // Schema strings by the operator's name address, each with the operator's name and
  // overload (a custom operator may go and another take its address).
  struct Schema {
    std::string name, overload, copy;
    const char *text;  // interned, else copy's
  };
  std::unordered_map<const void *, Schema> schemas;
  const char *no_schema = "";  // (interned "": what a record without a schema writes)

  // Freed op contexts, kept for the next ops.
  Context *free_contexts = nullptr;
  size_t n_free_contexts = 0;

  const etr_torch::EhGlobals *eh = etr_torch::eh_globals();  // (this thread's: uncaught_in)

  bool tid_known = false;
  uint64_t fw_torch_tid = 0, fw_etr_tid = 0;  // the last forward thread looked up

  ThreadState();
  ~ThreadState();

  void clear() {
    n_top = 0;
    if (!pooled) return;
    pooled = false;
    items.clear();
    tensors.clear();
    if (!strings.empty()) strings.clear();
  }

  // (as PyTorch names it: TypeMeta's name, "float", "c10::Half", ...)
  const char *dtype_name(caffe2::TypeMeta m) {
    if (C10_LIKELY(m.isScalarType())) {
      const char *&n = dtype_names[static_cast<int>(m.toScalarType())];
      if (C10_UNLIKELY(!n)) {  // interned: etr knows it by address (no bytes compared)
        names_.emplace_back(m.name());
        n = etr_intern(names_.back().c_str());
        if (!n) n = names_.back().c_str();
      }
      return n;
    }
    pooled = true;
    strings.emplace_back(m.name());  // (not a ScalarType: kept for this walk only)
    return strings.back().c_str();
  }

  const char *device_name(const c10::Device d) {
    // (the device's two bytes, type and index, as one key: one load)
    static_assert(sizeof(c10::Device) == 2, "c10::Device: a type and an index, a byte each");
    uint16_t raw;
    std::memcpy(&raw, &d, sizeof raw);
    int k = raw;
    if (C10_LIKELY(k == last_device_key)) return last_device_name;
    const char *name = nullptr;
    for (const DeviceName &e : device_names)
      if (e.key == k) name = e.name;
    if (!name) {
      names_.emplace_back(d.str());
      name = etr_intern(names_.back().c_str());
      if (!name) name = names_.back().c_str();
      device_names.push_back({k, name});
    }
    last_device_key = k;
    last_device_name = name;
    return name;
  }

  // The two slots of an address: a multiplicative hash's top bytes (distinct).
  static C10_ALWAYS_INLINE void op_slot_pair(const char *name, size_t *a, size_t *b) {
    uint64_t h = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(name)) * 0x9E3779B97F4A7C15ull;
    *a = static_cast<size_t>(h >> 56);
    *b = static_cast<size_t>(h >> 48) & (kOpSlots - 1);
    if (*b == *a) *b ^= 1;
  }
  static_assert(kOpSlots == 256, "op_slot_pair takes a hash's top byte");

  // (strcmp, not memcmp: name may now be shorter than the slot's text, and nothing past
  // its end may be read)
  static C10_ALWAYS_INLINE bool op_slot_is(const OpSlot &slot, const char *name) {
    return slot.name == name && std::strcmp(slot.text, name) == 0;
  }

  // The name to record for fn (name: fn.name()) and its schema, through the slots.
  C10_ALWAYS_INLINE void op_of(const at::RecordFunction &fn, const char *name,
                               const char **out_name, const char **out_schema) {
    if (C10_LIKELY(fn.scope() == at::RecordScope::FUNCTION && name)) {
      size_t a, b;
      op_slot_pair(name, &a, &b);
      const OpSlot *slot = &op_slots[a];
      if (C10_UNLIKELY(!op_slot_is(*slot, name))) {
        slot = &op_slots[b];
        if (!op_slot_is(*slot, name)) slot = op_slot_fill(fn, name, a, b);
      }
      if (C10_LIKELY(slot != nullptr)) {
        *out_name = slot->interned ? slot->text : name;
        *out_schema = slot->schema;
        return;
      }
    }
    *out_name = name;
    *out_schema = no_schema;
  }

  // (a slot miss) Makes name's slot in the older of its two. nullptr, and the name is
  // recorded as it is without a schema, for a record that is not an operator's (autograd's
  // "evaluate_function: ..." records name themselves with a string of their own, another
  // name at the same address from one call to the next: a slot of theirs would be remade on
  // every call and take an operator's place), for a name too long to keep, or when memory
  // runs out.
  C10_NOINLINE OpSlot *op_slot_fill(const at::RecordFunction &fn, const char *name, size_t a,
                                    size_t b) noexcept {
    size_t len = strnlen(name, ETR_INTERN_MAX + 1);
    if (len > ETR_INTERN_MAX) return nullptr;
    try {
      c10::optional<c10::FunctionSchema> sc = fn.operator_schema();  // (a copy)
      if (!sc) return nullptr;
      OpSlot &slot = op_slots[op_slots[b].made < op_slots[a].made ? b : a];
      slot.name = nullptr;  // (until it is whole)
      op_slot_make(slot, *sc, name, len);
      slot.made = ++made_;
      return &slot;
    } catch (...) {
      return nullptr;
    }
  }

  void op_slot_make(OpSlot &slot, const c10::FunctionSchema &sc, const char *name, size_t len) {
    auto it = schemas.find(name);
    if (it == schemas.end() || it->second.name != sc.name() ||
        it->second.overload != sc.overload_name()) {
      std::ostringstream o;
      o << sc;
      Schema e{sc.name(), sc.overload_name(), o.str(), nullptr};
      it = schemas.insert_or_assign(name, std::move(e)).first;
      it->second.text = etr_intern(it->second.copy.c_str());  // (known by address)
      if (!it->second.text) it->second.text = it->second.copy.c_str();
    }
    const char *interned = etr_intern(name);  // an operator's name: one of a bounded set
    if (interned) {
      slot.copy.clear();
    } else {
      slot.copy.assign(name, len);
    }
    slot.interned = interned != nullptr;
    slot.text = interned ? interned : slot.copy.c_str();
    slot.schema = it->second.text;
    slot.name = name;
  }

  // (a callback inside a walk) Puts the walk's values aside; false when memory runs out
  // (nothing moved: the nested callback then records no values).
  C10_NOINLINE bool nest() noexcept {
    std::unique_ptr<WalkValues> a;
    try {  // (all that may fail, before anything moves)
      a.reset(new WalkValues());
      aside.reserve(aside.size() + 1);
    } catch (...) {
      return false;
    }
    swap_values(*a);
    aside.push_back(std::move(a));
    return true;
  }

  // Gives back the values nest() put aside (the nested callback's go).
  C10_NOINLINE void unnest() noexcept {
    swap_values(*aside.back());
    aside.pop_back();
  }

  uint64_t fw_tid(uint64_t torch_tid) {
    if (torch_tid != fw_torch_tid || fw_etr_tid == 0) {
      fw_etr_tid = etr_tid_of(torch_tid);
      fw_torch_tid = torch_tid;
    }
    return fw_etr_tid;
  }

  void note_thread() {
    if (tid_known) return;
    tid_known = true;
    std::lock_guard<std::mutex> g(tid_mutex);
    tid_map[at::RecordFunction::currentThreadId()] = etr_thread_id();
  }

  void hold(c10::TensorImpl *t, c10::StorageImpl *s) {
    if (!held_locked) {
      held->lock();
      held_locked = true;
    }
    sweep_due |= held->hold(t, s);
  }

  // After a walk of values that held objects: lets the set go, sweeping it when due.
  // (inline, and the sweep out of line: a walk ends twice per op, and a whole sweep is due
  // after some thousand new objects; with the sweep inlined, every call saved and restored
  // the registers it needs, 30 instructions an op)
  C10_ALWAYS_INLINE void walk_done() {
    if (!held_locked) return;
    if (C10_UNLIKELY(sweep_due)) return walk_done_sweep();
    held->unlock();
    held_locked = false;
  }
  C10_NOINLINE void walk_done_sweep() {
    held->sweep(false);
    held->unlock();
    held_locked = false;
    sweep_due = false;
    etr_torch::held_sweep_orphans();
  }

  // (e: where the tensor goes; the caller's slot, or one from the pool in a list)
  etr_value tensor(const at::Tensor &t, etr_tensor &e) {
    c10::TensorImpl *ti = t.unsafeGetTensorImpl();
    if (!t.defined()) {  // dtype NULL: an undefined tensor
      std::memset(&e, 0, sizeof e);
      // (PyTorch's one UndefinedTensorImpl, which never dies and is not held: one id for
      // every undefined tensor, as PyTorch's observer gives it; not id 0)
      e.impl = ti;
      return etr_value_tensor(&e);
    }
    // (unsafe_storage, not has_storage()/storage(): those two are virtual calls; the
    // storage pointer is null for a tensor without one, as has_storage() says)
    c10::StorageImpl *si = ti->unsafe_storage().unsafeGetStorageImpl();
    hold(ti, si);
    e.impl = ti;
    e.storage = si;
    caffe2::TypeMeta m = ti->dtype();
    e.itemsize = static_cast<int64_t>(m.itemsize());
    e.dtype = dtype_name(m);
    e.device = "";
    // A nested tensor has no one shape (its sizes() throws), and a tensor whose shape is
    // symbolic or kept by a Python subclass may refuse too: such a tensor is recorded by
    // identity, dtype and device, with no shape, rather than letting the exception out of
    // the callback (PyTorch would log it with a stack trace and the op would be lost).
    try {
      e.device = device_name(ti->device());
      if (C10_LIKELY(!ti->is_nested())) {
        e.numel = ti->numel();
        e.ndim = static_cast<int32_t>(ti->dim());
        e.sizes = ti->sizes().data();
        // A shape without strides (a subclass may refuse its strides and offset, which
        // PyTorch's observer never asks for) keeps its shape, with contiguous strides.
        e.storage_offset = 0;
        e.strides = nullptr;  // (sparse and other layouts without strides: contiguous)
        try {
          e.storage_offset = si ? ti->storage_offset() : 0;
          if (ti->layout() == c10::kStrided) e.strides = ti->strides().data();
        } catch (const c10::Error &) {
        } catch (...) {
          python_error_left();
        }
        return etr_value_tensor(&e);
      }
    } catch (const c10::Error &) {  // (PyTorch's own refusal: nothing left behind)
    } catch (...) {                 // (Python code that raised may have left its error set)
      python_error_left();
    }
    e.storage_offset = 0;
    e.numel = 0;
    e.ndim = 0;
    e.sizes = nullptr;
    e.strides = nullptr;
    return etr_value_tensor(&e);
  }

  etr_value of(const c10::IValue &v, int depth) {
    pooled = true;
    if (v.isTensor()) return tensor(v.toTensor(), *tensors.take(1));
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

  C10_ALWAYS_INLINE void all(const c10::IValue *vs, size_t n) {
    struct Done {  // (the set is let go even if a value throws)
      ThreadState *s;
      ~Done() { s->walk_done(); }
    } done{this};
    if (n > top_cap) {
      top.reset(new etr_value[n]);
      top_tensors.reset(new etr_tensor[n]);
      top_cap = n;
    }
    // (the usual kinds here, without a call: most values are tensors, then scalars)
    for (size_t i = 0; i < n; i++) {
      const c10::IValue &v = vs[i];
      etr_value &out = top[i];
      if (v.isTensor()) {
        out = tensor(v.toTensor(), top_tensors[i]);
      } else if (v.isNone()) {
        out = etr_value_none();
      } else if (v.isInt()) {
        out = etr_value_int(v.toInt());
      } else if (v.isDouble()) {
        out = etr_value_double(v.toDouble());
      } else if (v.isBool()) {
        out = etr_value_bool(v.toBool());
      } else {
        out = of(v, 0);
      }
    }
    n_top = n;
  }
};

// A callback's use of its thread's values, from its walk to the begin or end of its record
// (ThreadState::walking). ok is false when a nested callback could not put the outer walk's
// values aside: it must then walk none.
struct Walking {
  ThreadState *st;
  bool nested, ok = true;
  explicit Walking(ThreadState *s) : st(s), nested(s->walking) {
    if (C10_UNLIKELY(nested)) {
      ok = s->nest();
    } else {
      s->walking = true;
    }
  }
  ~Walking() {
    if (C10_LIKELY(!nested)) {
      st->walking = false;
    } else if (ok) {
      st->unnest();
    }
  }
};

// The thread's state: made at its first callback, gone at its exit (gone: callbacks that
// run during thread exit are not recorded).
// (initial-exec, as libetr's own: a %fs-relative load, where this module, loaded by dlopen,
// would otherwise call __tls_get_addr on each of the three accesses per op; 9 bytes of the
// static TLS that glibc keeps for such modules)
thread_local ThreadState *tls_state __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local bool tls_state_gone __attribute__((tls_model("initial-exec"))) = false;

struct ThreadStateOwner {
  ThreadState *s = nullptr;
  ~ThreadStateOwner() {
    tls_state = nullptr;
    tls_state_gone = true;
    delete s;
  }
};
thread_local ThreadStateOwner tls_owner;

ThreadState *make_state() {
  if (tls_state_gone) return nullptr;
  try {
    tls_owner.s = new ThreadState();
  } catch (...) {
    return nullptr;
  }
  tls_state = tls_owner.s;
  return tls_state;
}

inline ThreadState *state() {
  ThreadState *s = tls_state;
  return s ? s : make_state();
}

ThreadState::ThreadState() {
  if (const char *e = etr_intern("")) no_schema = e;
  if (eh && etr_torch::uncaught_in(eh) != std::uncaught_exceptions())
    eh = nullptr;  // (not the ABI's)
  held = etr_torch::held_join();
}

struct Context final : at::ObserverContext {
  etr_record rec;
  Context *next_free;
  // A c10d collective's record_param_comms child (comm.h), begun after rec and ended before
  std::unique_ptr<etr_record> comm;
  // The op's argument the collective writes (comm.h: out_arg), comm's output at its end:
  // held from the begin, where PyTorch's inputs() are the dispatcher's stack, gone by the end.
  c10::IValue comm_out;
  // Exceptions in flight when the op began: more of them at its end means one left the op
  // (PyTorch ends a record from its guard's destructor while an exception unwinds through
  // it), and the op is ended as failed.
  int uncaught = 0;

  // A context from the thread's freed ones, else a new one.
  static Context *make(ThreadState *s) {
    void *p;
    if (s->free_contexts) {
      p = s->free_contexts;
      s->free_contexts = s->free_contexts->next_free;
      s->n_free_contexts--;
    } else {
      p = ::operator new(sizeof(Context));
    }
    return ::new (p) Context;
  }
  // Destroys c and keeps its memory in s's free list (or frees it when that is full).
  static void recycle(ThreadState *s, Context *c) {
    c->~Context();
    put(s, c);
  }
  static void put(ThreadState *s, void *p) {
    if (s && s->n_free_contexts < 256) {
      Context *c = static_cast<Context *>(p);
      c->next_free = s->free_contexts;
      s->free_contexts = c;
      s->n_free_contexts++;
      return;
    }
    ::operator delete(p);
  }
  // (the deleting thread keeps it: usually the thread that made it)
  static void operator delete(void *p, size_t n) {
    if (n == sizeof(Context)) {
      put(tls_state, p);
    } else {
      ::operator delete(p);
    }
  }
};

ThreadState::~ThreadState() {
  while (free_contexts) {
    Context *c = free_contexts;
    free_contexts = c->next_free;
    ::operator delete(c);
  }
  etr_torch::held_leave(held);
}

// An op's own values among those PyTorch gives the callback: the last n. For an op the
// TorchScript interpreter runs, inputs() and outputs() are the interpreter's whole stack
// (values of earlier ops, waiting to be used, come first), and num_inputs() /
// num_outputs() are the operator's schema's argument / return counts; for other records
// they are the sizes of inputs() / outputs() themselves. PyTorch 1.13's observer keeps the
// last ones too. A count larger than what is there keeps all (never read out of range).
c10::ArrayRef<const c10::IValue> own_values(c10::ArrayRef<const c10::IValue> vs, size_t n) {
  return n < vs.size() ? vs.slice(vs.size() - n) : vs;
}

// A c10d collective gets a record_param_comms child, as PyTorch 2.x records one inside the
// c10d op: the collective attrs (comm.h) and the inputs PyTorch gives it, which PARAM's comm
// replay reads by position (docs/FORMAT.md): the input message's tensors, the group's
// sequence number, (pg_name, pg_desc), the rank in the group, the collective's name, the
// split sizes (none), the global rank start and stride (the world group's: 0, 1; else
// unknown, -1 and 0) and the group size. Begun now (its values are read at begin: st's
// converted inputs are still there), ended in on_end before its parent.
void comm_begin(ThreadState *st, Context *ctx, const char *name, const at::RecordFunction &fn) {
  etr_torch::CommCall call;
  try {
    // (the op's own inputs, as converted into st->top: in_arg indexes both)
    if (!etr_torch::comm_info(name, own_values(fn.inputs(), fn.num_inputs()), &call))
      return;  // (no process group)
  } catch (...) {
    return;
  }
  std::unique_ptr<etr_record> rc(new (std::nothrow) etr_record);
  if (!rc) return;
  etr_record_init(rc.get(), "record_param_comms", ETR_SCOPE_FUNCTION);
  if (!etr_record_is_active(rc.get())) return;
  const char *pg = call.info.pg_name ? call.info.pg_name : "";
  bool world = !std::strcmp(pg, "0");
  etr_value pgv[2] = {etr_value_string(pg), etr_value_string(world ? "default_pg" : "undefined")};
  etr_value in[10] = {call.in_arg >= 0 && static_cast<size_t>(call.in_arg) < st->n_top
                          ? st->top[call.in_arg]
                          : etr_value_list(nullptr, 0),
                      etr_value_int(etr_torch::comm_next_seq(pg)),
                      etr_value_tuple(pgv, 2),
                      etr_value_int(call.group_rank),
                      etr_value_string(call.info.name),
                      etr_value_list(nullptr, 0),
                      etr_value_list(nullptr, 0),
                      etr_value_int(world ? 0 : -1),
                      etr_value_int(world ? 1 : 0),
                      etr_value_int(static_cast<int64_t>(call.info.pg_size))};
  if (world) {
    call.info.global_rank_start = 0;
    call.info.global_rank_stride = 1;
  }
  call.info.pg_desc = world ? "default_pg" : "undefined";
  rc->collective = &call.info;
  if (etr_record_needs_inputs(rc.get())) {
    rc->inputs = in;
    rc->n_inputs = 10;
  }
  etr_record_begin(rc.get());
  rc->collective = nullptr;
  rc->inputs = nullptr;
  rc->n_inputs = 0;
  c10::ArrayRef<const c10::IValue> args = own_values(fn.inputs(), fn.num_inputs());
  if (call.out_arg >= 0 && static_cast<size_t>(call.out_arg) < args.size())
    ctx->comm_out = args[call.out_arg];
  ctx->comm = std::move(rc);
}

// Ends a c10d op's record_param_comms child, with the message the collective wrote as its
// output, as PyTorch 2.x records its outputTensors (the in-place ones: the input's tensors,
// now holding the result).
void comm_end(ThreadState *st, Context *ctx) {
  etr_record *rc = ctx->comm.get();
  if (st && !ctx->comm_out.isNone() && etr_record_needs_outputs(rc)) {
    st->clear();
    try {
      st->all(&ctx->comm_out, 1);
      rc->outputs = st->top.get();
      rc->n_outputs = 1;
    } catch (...) {
      rc->outputs = nullptr;
      rc->n_outputs = 0;
    }
  }
  etr_record_end(rc);
  ctx->comm.reset();
  ctx->comm_out = c10::IValue();
}

}  // namespace

namespace etr_torch {

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn) {
  ThreadState *st = state();
  if (!st) return nullptr;
  std::unique_ptr<Context> ctx(Context::make(st));
  size_t scope = static_cast<size_t>(fn.scope());
  const char *name = fn.name();
  // (PyTorch's RecordScope numbers are etr_scope's)
  etr_record_init(&ctx->rec, name, static_cast<etr_scope>(scope < ETR_SCOPE_COUNT ? scope : 0));
  if (!etr_record_is_active(&ctx->rec)) {  // nothing observes: nothing to end
    Context::recycle(st, ctx.release());   // (straight back: no TLS lookup in delete)
    return nullptr;
  }
  st->note_thread();
  ctx->uncaught = etr_torch::uncaught_in(st->eh);
  etr_record &r = ctx->rec;
  // (rf_id is PyTorch's handle, as its own observer writes it: Kineto's "Record function
  // id", which links a Kineto trace's events to these nodes, e.g. Chakra's trace_link)
  etr_record_set_rf_id(&r, fn.handle());
  r.seq_nr = fn.seqNr();
  if (fn.forwardThreadId() != 0) r.fw_tid = st->fw_tid(fn.forwardThreadId());
  st->op_of(fn, name, &r.name, &r.schema);
  Walking walk(st);
  st->clear();
  bool comm = false;
  if (etr_record_needs_inputs(&r) && C10_LIKELY(walk.ok)) {
    // (a value that cannot be converted, memory exhausted: the op is recorded without its
    // inputs rather than lost, and nothing escapes into PyTorch's dispatch)
    try {
      c10::ArrayRef<const c10::IValue> args = own_values(fn.inputs(), fn.num_inputs());
      st->all(args.data(), args.size());
      r.inputs = st->top.get();
      r.n_inputs = static_cast<uint32_t>(st->n_top);
    } catch (...) {
      r.inputs = nullptr;
      r.n_inputs = 0;
    }
    comm = name[0] == 'c' && std::strncmp(name, "c10d::", 6) == 0;
  }
  etr_record_begin(&r);
  if (comm) comm_begin(st, ctx.get(), name, fn);
  r.inputs = nullptr;
  r.n_inputs = 0;
  return ctx;
}

void on_end(const at::RecordFunction &fn, at::ObserverContext *c) {
  auto *ctx = static_cast<Context *>(c);
  if (!ctx) return;
  ThreadState *st = state();
  int uncaught = st ? etr_torch::uncaught_in(st->eh) : std::uncaught_exceptions();
  if (uncaught > ctx->uncaught) {  // failed (no outputs: the op returned none)
    if (ctx->comm) etr_record_end_failed(ctx->comm.get());
    ctx->comm.reset();
    etr_record_end_failed(&ctx->rec);
    return;
  }
  if (!st) {  // (the thread is exiting)
    if (ctx->comm) comm_end(st, ctx);
    etr_record_end(&ctx->rec);
    return;
  }
  Walking walk(st);
  if (ctx->comm) comm_end(walk.ok ? st : nullptr, ctx);
  if (etr_record_needs_outputs(&ctx->rec) && C10_LIKELY(walk.ok)) {
    st->clear();
    try {  // (as in on_start; and the op is ended whatever happens, never left open)
      const std::vector<c10::IValue> &all = fn.outputs();
      c10::ArrayRef<const c10::IValue> o =
          own_values(c10::ArrayRef<const c10::IValue>(all.data(), all.size()), fn.num_outputs());
      st->all(o.data(), o.size());
      ctx->rec.outputs = st->top.get();
      ctx->rec.n_outputs = static_cast<uint32_t>(st->n_top);
    } catch (...) {
      ctx->rec.outputs = nullptr;
      ctx->rec.n_outputs = 0;
    }
  }
  etr_record_end(&ctx->rec);
}

}  // namespace etr_torch

extern "C" void etr_torch__set_error_drop(void (*drop)(void)) {
  error_drop.store(drop, std::memory_order_release);
}
