// etr/torch.h from an installed etr: open a trace, attach the PyTorch callback (which loads
// libtorch through libetr_torch and registers with its RecordFunction), detach, close.
// Nothing of PyTorch's headers is needed for that; a real host runs its ops in between.
#include <etr/etr.h>
#include <etr/torch.h>

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  etr_trace *t = nullptr;
  if (etr_trace_open(argv[1], nullptr, &t) != 0 || etr_trace_enable(t) != 0) return 1;
  if (etr_torch_attach() != 0 || !etr_torch_attached()) {
    std::fprintf(stderr, "etr_torch_attach failed\n");
    return 1;
  }
  if (etr_torch_detach() != 0 || etr_torch_attached()) return 1;
  return etr_trace_close(t) == 0 ? 0 : 1;
}
