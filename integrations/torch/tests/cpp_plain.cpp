// torch_plain: a libtorch program that knows nothing of etr (ctest torch.cpp_preload runs it
// under LD_PRELOAD=libetr_torch.so and ETR_TRACE; torch_cpp_host checks the trace).
#include <cstdio>
#include <cstring>

#include "cpp_host_work.h"

int main(int argc, char **argv) {
  if (argc != 2 || std::strcmp(argv[1], "run") != 0) {
    std::fprintf(stderr, "usage: torch_plain run\n");
    return 2;
  }
  run_threads();
  return 0;
}
