// Tensor retirement for etr.torch (etr_torch.cpp): the per-thread sets that hold, by weak
// reference, every tensor and storage etr has given an id, and their registry (held.cpp).
#ifndef ETR_TORCH_HELD_H
#define ETR_TORCH_HELD_H

#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "etr/etr.h"

namespace etr_torch {

// Tensor retirement. PyTorch has no hook for a TensorImpl's death, so each tensor and
// storage etr has given an id is held by a weak reference: its memory (the object's shell;
// the data is freed as usual) cannot be reused by a new object while etr still knows the
// address. The expired ones are retired (etr_tensor_died / etr_storage_died) and let go;
// only then can the address come back, and it then gets a new id. So ids never alias
// within a trace. docs/TORCH.md.
//
// Each thread holds what it reported in its own set (no lock shared between threads on the
// per-op path). An object seen by two threads is held twice; the first thread to find it
// dead retires it, and the address stays taken until the second lets go too (its retirement
// then finds nothing to remove). A thread that exits leaves its set, with the objects still
// alive, to the registry as an orphan, swept by other threads' whole sweeps and at detach.
class Held {
 public:
  Held() : slots_(kMinSlots, 0), spare_(kMinSlots, 0), mask_(kMinSlots - 1) {}

  // The owner around each walk of values; detach and orphan sweeps around theirs.
  void lock() {
    while (busy_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  }
  void unlock() { busy_.store(false, std::memory_order_release); }
  bool try_lock() { return !busy_.exchange(true, std::memory_order_acquire); }

  // (locked) Holds t's TensorImpl and, if it has one, its StorageImpl. Returns true when the
  // set is due for a sweep.
  //
  // Most tensors an op reports were reported by an op just before (its inputs are earlier
  // ops' outputs) and are in the set already; a small direct-mapped cache of the last pairs
  // held answers for them without the set's two probes. An entry stands only while nothing
  // left the set since it was made (gen_, bumped by every sweep that lets an object go): a
  // released address can come back as a new object, which must be held anew (and a living
  // tensor may have been given another storage, at the address of one that was let go).
  bool hold(c10::TensorImpl *t, c10::StorageImpl *s) {
    uintptr_t tk = reinterpret_cast<uintptr_t>(t), sk = reinterpret_cast<uintptr_t>(s);
    Recent &r = recent_[((tk >> 4) ^ (tk >> 10)) & (kRecent - 1)];
    if (r.t == tk && r.s == sk && r.gen == gen_) return false;
    bool due = add(tk);
    if (s) due |= add(sk | 1);
    r.t = tk;  // (both are in the set now: an add's sweep lets go only the dead)
    r.s = sk;
    r.gen = gen_;
    return due;
  }

  // (locked) Retires the expired objects and lets them go; with forget_living, lets the
  // living go too (the trace is closed: etr forgets them with it).
  void sweep(bool forget_living) {
    gen_++;  // (the cache's entries are void)
    n_young_ = 0;
    young_new_ = 0;
    promoted_ = 0;
    if (count_ == 0) return;
    // (into the spare table: no allocation, so that a sweep cannot fail half way)
    spare_.swap(slots_);
    std::fill(slots_.begin(), slots_.end(), 0);
    count_ = 0;
    for (uintptr_t k : spare_) {
      if (!k) continue;
      if (expired(k)) {
        retire(k);
      } else if (forget_living) {
        release(k);
      } else {
        insert(k);
      }
    }
  }

  size_t size() const { return count_; }

 private:
  // Objects are swept in two generations. The young (the last added) are looked at each
  // time kYoungSweep more have come: most are an op's temporaries, dead a few ops later, and
  // letting them go then gives their memory back to the allocator while it is still warm
  // (held for long, they would make each new tensor take cold memory). Those that lived
  // through kYoungAge looks join the old, swept whole after kMinSweep have joined and as
  // many as are held.
  static constexpr size_t kYoungSweep = 8;
  static constexpr size_t kYoungAge = 3;
  static constexpr size_t kYoung = kYoungSweep * (kYoungAge + 1);  // room for all ages
  static constexpr size_t kMinSweep = 1024;
  static constexpr size_t kMinSlots = 256;
  static constexpr size_t kRecent = 64;  // the cache of hold()

  static size_t hash(uintptr_t k, size_t mask) {
    return static_cast<size_t>(((k >> 4) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
  }

  static bool is_storage(uintptr_t k) { return (k & 1) != 0; }
  static c10::intrusive_ptr_target *target(uintptr_t k) {
    if (is_storage(k)) return reinterpret_cast<c10::StorageImpl *>(k & ~uintptr_t{1});
    return reinterpret_cast<c10::TensorImpl *>(k);
  }
  static bool expired(uintptr_t k) {
    return c10::raw::weak_intrusive_ptr::use_count(target(k)) == 0;
  }
  static void release(uintptr_t k) {
    if (is_storage(k)) {
      (void)c10::weak_intrusive_ptr<c10::StorageImpl>::reclaim(
          reinterpret_cast<c10::StorageImpl *>(k & ~uintptr_t{1}));
    } else {
      (void)c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(
          reinterpret_cast<c10::TensorImpl *>(k));
    }
  }
  static void retire(uintptr_t k) {
    const void *p = reinterpret_cast<const void *>(k & ~uintptr_t{1});
    if (is_storage(k)) {
      etr_storage_died(p);
    } else {
      etr_tensor_died(p);
    }
    release(k);  // only now may a new object take the address
  }

  // (the set has room) k is not in it
  void insert(uintptr_t k) {
    size_t mask = mask_;
    size_t i = hash(k, mask);
    while (slots_[i]) i = (i + 1) & mask;
    slots_[i] = k;
    count_++;
  }

  // (k is in the set) Backward-shift deletion: no tombstones.
  void erase(uintptr_t k) {
    size_t mask = mask_;
    size_t i = hash(k, mask);
    while (slots_[i] != k) i = (i + 1) & mask;
    for (size_t j = (i + 1) & mask; slots_[j]; j = (j + 1) & mask) {
      size_t home = hash(slots_[j], mask);
      // the entry at j may fill the hole at i unless its home lies in (i, j]
      if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = 0;
    count_--;
  }

  C10_NOINLINE void sweep_young() {  // (out of line: add stays small)
    size_t kept = 0;
    for (size_t i = 0; i < n_young_; i++) {
      uintptr_t k = young_[i];
      if (expired(k)) {
        gen_++;  // (the cache's entries are void)
        erase(k);
        retire(k);
      } else if (size_t{young_age_[i]} + 1 < kYoungAge) {
        young_[kept] = k;
        young_age_[kept++] = static_cast<uint8_t>(young_age_[i] + 1);
      } else {
        promoted_++;
      }
    }
    n_young_ = kept;
    young_new_ = 0;
  }

  bool add(uintptr_t k) {
    uintptr_t *s = slots_.data();
    size_t mask = mask_;
    size_t i = hash(k, mask);
    for (; s[i]; i = (i + 1) & mask)
      if (s[i] == k) return false;
    if (count_ > mask >> 1) {  // (at most half full; grown first: it may throw)
      grow();
      c10::raw::weak_intrusive_ptr::incref(target(k));
      insert(k);
    } else {  // (where the probe ended)
      c10::raw::weak_intrusive_ptr::incref(target(k));
      s[i] = k;
      count_++;
    }
    young_age_[n_young_] = 0;
    young_[n_young_++] = k;
    if (++young_new_ == kYoungSweep) sweep_young();
    return promoted_ >= kMinSweep && promoted_ * 2 >= count_;
  }

  C10_NOINLINE void grow() {
    size_t cap = slots_.size() * 2;
    std::vector<uintptr_t> bigger(cap, 0);
    spare_.resize(cap);  // (first, so that a failure leaves the set as it was)
    bigger.swap(slots_);
    mask_ = cap - 1;
    count_ = 0;
    for (uintptr_t k : bigger)
      if (k) insert(k);
  }

  std::atomic<bool> busy_{false};
  std::vector<uintptr_t> slots_;  // open addressing, power-of-two size; 0 = empty
  std::vector<uintptr_t> spare_;  // as large, for sweeps
  size_t mask_;                   // slots_.size() - 1
  size_t count_ = 0;
  uintptr_t young_[kYoung] = {};    // the last added, oldest first
  uint8_t young_age_[kYoung] = {};  // young sweeps each lived through
  size_t n_young_ = 0;
  size_t young_new_ = 0;  // added since the last young sweep
  size_t promoted_ = 0;   // young found alive since the last sweep
  // hold()'s cache: pairs held while gen_ was gen (0: no entry; gen_ starts at 1)
  struct Recent {
    uintptr_t t = 0, s = 0;
    uint64_t gen = 0;
  };
  Recent recent_[kRecent];
  uint64_t gen_ = 1;
};

// The registry of the sets (held.cpp): every living thread's, and the orphans of exited
// threads. Each function takes the registry's mutex; lock order: the registry, then a set.

// A new set for the calling thread, registered (std::bad_alloc when memory runs out).
Held *held_join();
// The thread is exiting: its set is swept, and freed, or left as an orphan while objects in
// it live.
void held_leave(Held *h);
// (after a sweep of the caller's own set) Sweeps the orphans, unless there are none or
// another thread is at it (no wait).
void held_sweep_orphans();
// The trace is closed (detach): every set lets all its objects go, the living too.
void held_release_all();
// (for tests) How many times held_release_all found a set busy (its thread inside a walk).
unsigned held_test_release_waits();

}  // namespace etr_torch

#endif  // ETR_TORCH_HELD_H
