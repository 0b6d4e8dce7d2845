// The C++ host tests' aten ops (cpp_host_work.h).
#include "cpp_host_work.h"

#include <ATen/ATen.h>

#include <thread>

void work(int64_t n) {
  at::Tensor a = at::randn({n, 3}), b = at::randn({3, 2});
  for (int i = 0; i < kOps; i++) a = at::relu(at::mm(at::mm(a, b), b.t()));
}

void run_threads() {
  std::thread t1(work, 4), t2(work, 6);
  t1.join();
  t2.join();
}
