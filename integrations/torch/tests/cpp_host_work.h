// The aten ops the C++ host tests run (cpp_host_work.cpp, the one file of them that includes
// ATen: torch_cpp_host and torch_plain link it instead of compiling it each).
#ifndef ETR_TORCH_CPP_HOST_WORK_H
#define ETR_TORCH_CPP_HOST_WORK_H

#include <cstdint>

constexpr int kOps = 5;  // iterations of 2 aten::mm per thread

// kOps iterations of relu(mm(mm(a, b), b^T)) with a n x 3, b 3 x 2.
void work(int64_t n);
// work(4) and work(6) on two threads.
void run_threads();

#endif
