// ctest torch.held_cycle: detach never waits for a thread's held set while it holds the
// registry of sets (held.cpp). A thread's walk of an op's values holds its set, and may wait
// there for a lock another thread holds while that one joins the registry: Python's GIL,
// taken by a tensor subclass whose sizes are Python code, and held by a thread whose first op
// runs with it (torch.tensor(data)). Before, detach waited for the walk's set with the
// registry held, and the three threads hung for good. Here a mutex stands for the GIL, and
// the threads meet in that order without timing: the walk holds its set and waits for the
// "GIL"; detach finds the set busy (held_test_release_waits); then the "GIL"'s holder joins.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "../held.h"

namespace {

std::mutex gil;  // stands for Python's
std::atomic<bool> b_has_gil{false}, a_walking{false};

void on_alarm(int) {
  const char m[] = "held_cycle: FAIL: hung (walk, first op and detach wait on each other)\n";
  ssize_t w = write(2, m, sizeof m - 1);
  (void)w;
  _exit(1);
}

void wait_for(const std::atomic<bool> &f) {
  while (!f.load()) std::this_thread::yield();
}

}  // namespace

int main() {
  signal(SIGALRM, on_alarm);
  alarm(60);
  using namespace etr_torch;
  // A: an op's walk, whose tensor's sizes are asked of Python while the set is held
  std::thread a([] {
    Held *h = held_join();
    wait_for(b_has_gil);
    h->lock();
    a_walking = true;
    gil.lock();
    gil.unlock();
    h->unlock();
    held_leave(h);
  });
  // B: holds the GIL; its first op joins once detach is under way
  std::thread b([] {
    gil.lock();
    b_has_gil = true;
    while (held_test_release_waits() == 0) std::this_thread::yield();
    Held *h = held_join();
    gil.unlock();
    held_leave(h);
  });
  // C: detach
  wait_for(a_walking);
  held_release_all();
  a.join();
  b.join();
  if (held_test_release_waits() == 0) {
    std::fprintf(stderr, "held_cycle: FAIL: detach never found the walk's set busy\n");
    return 1;
  }
  std::printf("held_cycle: ok (detach found a busy set %u times, and let the registry go)\n",
              held_test_release_waits());
  return 0;
}
