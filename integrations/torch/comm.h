// The collectives of PyTorch's c10d dispatcher ops (c10d::allreduce_, c10d::allgather_, ...)
// as etr collective info (etr_collective_info): what PyTorch 2.x's record_param_comms tells
// its observer, for the PyTorch 1.x that tells it nothing (comm.cpp; docs/TORCH.md).
#ifndef ETR_TORCH_COMM_H
#define ETR_TORCH_COMM_H

#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

#include <cstddef>

#include "etr/etr.h"

namespace etr_torch {

// The collective a c10d op named `name` (its "c10d::" prefix included) runs with the
// arguments args: its name as PyTorch 2.x names it ("allreduce", "allgather", ...), the
// input and output messages (element counts and dtype: the argument that holds them), and
// its process group when the op names one and etr/dist.h knows exactly one declared group
// of its size holding this process at its rank in it (the name copied into pg_name[0..cap);
// its size in info->pg_size). False for an op that is no collective (no process group
// among its arguments). Throws what reading an IValue may throw.
bool comm_info(const char *name, c10::ArrayRef<const c10::IValue> args, etr_collective_info *info,
               char *pg_name, size_t cap);

}  // namespace etr_torch

#endif
