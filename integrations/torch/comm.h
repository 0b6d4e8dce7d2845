// The collectives of PyTorch's c10d dispatcher ops (c10d::allreduce_, c10d::allgather_, ...)
// as etr collective info (etr_collective_info): what PyTorch 2.x's record_param_comms tells
// its observer, for the PyTorch 1.x that tells it nothing (comm.cpp; docs/TORCH.md).
#ifndef ETR_TORCH_COMM_H
#define ETR_TORCH_COMM_H

#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

#include <cstddef>
#include <string>

#include "etr/etr.h"

namespace etr_torch {

// One c10d collective call, as comm_info reads it.
struct CommCall {
  etr_collective_info info;  // name, dtype, message sizes, pg_size, pg_name (when known)
  char pg_name[64];          // (info.pg_name points here)
  std::string name;          // (and info.name here)
  int in_arg;                // the argument that holds the input message, -1 none
  int out_arg;               // the one the collective writes (the input's when in place), -1
  int64_t group_rank;        // this process's rank in the call's group; a rooted one's root
};

// The collective a c10d op named `name` (its "c10d::" prefix included) runs with the
// arguments args: its name as PyTorch 2.x names it ("allreduce", "allgather", ...), the
// input and output messages (element counts and dtype: the argument that holds them), and
// its process group when the op names one and etr/dist.h knows exactly one declared group
// of its size holding this process at its rank in it. False for an op that is no
// collective (no process group among its arguments). Throws what reading an IValue may
// throw.
bool comm_info(const char *name, c10::ArrayRef<const c10::IValue> args, CommCall *call);

// The group's next sequence number (0, 1, ... per group name, "" for a group not known;
// process-wide), as record_param_comms numbers a group's collectives.
int64_t comm_next_seq(const char *pg_name);

}  // namespace etr_torch

#endif
