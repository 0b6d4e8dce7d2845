// Between libetr_torch and etr._torch, not for hosts: the names etr._torch gives the process
// groups it declared, by the address of their C++ ProcessGroup (comm.cpp), so that a
// collective names its own group even when another group has the same size and holds this
// process at the same rank (PyTorch 1.13's groups have no name). No PyTorch type, as
// python_errors.h.
#ifndef ETR_TORCH_PYTHON_GROUPS_H
#define ETR_TORCH_PYTHON_GROUPS_H

#include <stdint.h>

#include "etr/torch.h"

#ifdef __cplusplus
extern "C" {
#endif

// The group at address pg (0: ignored) is the declared group `name` (copied; at most 63
// bytes), of `size` members with this process at `group_rank`: a collective on it is
// given that name while its group has that size and rank (an address a new group took
// without being named again is not trusted beyond that). Returns 0, or ETR_EINVAL.
ETR_TORCH_API int etr_torch__name_group(uintptr_t pg, const char *name, int64_t size,
                                        int64_t group_rank);

#ifdef __cplusplus
}
#endif

#endif  // ETR_TORCH_PYTHON_GROUPS_H
