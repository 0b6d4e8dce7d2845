// etr.torch's RecordFunction callback (etr_torch.cpp), which attach.cpp registers with
// PyTorch: each op PyTorch reports begins an etr record at its start and ends it at its end.
#ifndef ETR_TORCH_CALLBACK_H
#define ETR_TORCH_CALLBACK_H

#include <ATen/record_function.h>

#include <memory>

namespace etr_torch {

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn);
void on_end(const at::RecordFunction &fn, at::ObserverContext *c);

}  // namespace etr_torch

#endif  // ETR_TORCH_CALLBACK_H
