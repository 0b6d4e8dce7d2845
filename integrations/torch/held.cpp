// The registry of etr.torch's held sets (held.h): every living thread's set, and the sets
// of exited threads whose objects still live (orphans), swept by other threads and at
// detach.
#include "held.h"

#include <mutex>

namespace etr_torch {
namespace {

std::mutex held_mutex;
std::vector<Held *> held_sets;     // of living threads
std::vector<Held *> held_orphans;  // of exited threads, with living objects
std::atomic<bool> have_orphans{false};

void sweep_orphans_locked(bool forget_living) {
  for (size_t i = 0; i < held_orphans.size();) {
    Held *h = held_orphans[i];
    h->lock();
    h->sweep(forget_living);
    h->unlock();
    if (h->size() == 0) {
      delete h;
      held_orphans[i] = held_orphans.back();
      held_orphans.pop_back();
    } else {
      i++;
    }
  }
  have_orphans.store(!held_orphans.empty(), std::memory_order_relaxed);
}

}  // namespace

Held *held_join() {
  Held *h = new Held();
  std::lock_guard<std::mutex> g(held_mutex);
  held_sets.push_back(h);
  return h;
}

void held_leave(Held *h) {
  std::lock_guard<std::mutex> g(held_mutex);
  held_sets.erase(std::find(held_sets.begin(), held_sets.end(), h));
  h->lock();
  h->sweep(false);
  h->unlock();
  if (h->size() == 0) {
    delete h;
  } else {  // living objects stay held until they die or the trace closes
    held_orphans.push_back(h);
    have_orphans.store(true, std::memory_order_relaxed);
  }
}

void held_sweep_orphans() {
  if (!have_orphans.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> g(held_mutex, std::try_to_lock);
  if (g.owns_lock()) sweep_orphans_locked(false);
}

void held_release_all() {
  std::lock_guard<std::mutex> g(held_mutex);
  for (Held *h : held_sets) {
    h->lock();
    h->sweep(true);
    h->unlock();
  }
  sweep_orphans_locked(true);
}

}  // namespace etr_torch
