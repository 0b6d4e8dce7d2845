// The registry of etr.torch's held sets (held.h): every living thread's set, and the sets
// of exited threads whose objects still live (orphans), swept by other threads and at
// detach.
#include "held.h"

#include <mutex>
#include <thread>

namespace etr_torch {
namespace {

std::mutex held_mutex;
std::vector<Held *> held_sets;     // of living threads
std::vector<Held *> held_orphans;  // of exited threads, with living objects
std::atomic<bool> have_orphans{false};
std::atomic<unsigned> release_waits{0};

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

// Never waits for a set with the registry held: a walk holds its set, and may wait inside it
// for a lock (Python's GIL, asked by a tensor subclass's sizes code) that another thread
// holds while it waits for the registry (held_join, its first op, run with the GIL held).
// A busy set is tried again once the registry was let go for a moment (sets joined or left
// meanwhile are in the next look; a set swept again lets go only what it held since).
void held_release_all() {
  std::unique_lock<std::mutex> g(held_mutex);
  for (;;) {
    bool busy = false;
    for (Held *h : held_sets) {
      if (!h->try_lock()) {
        busy = true;
        continue;
      }
      h->sweep(true);
      h->unlock();
    }
    if (!busy) break;
    release_waits.fetch_add(1, std::memory_order_relaxed);
    g.unlock();
    std::this_thread::yield();
    g.lock();
  }
  sweep_orphans_locked(true);  // (an orphan's thread is gone: nobody walks it)
}

unsigned held_test_release_waits() { return release_waits.load(); }

}  // namespace etr_torch
