/* etr for PyTorch: a global at::RecordFunction callback that records every op libtorch
 * reports (aten ops, autograd's backward functions, record_function scopes) into the open
 * etr trace, as PyTorch's own execution-trace observer records them (docs/TORCH.md).
 *
 * libetr_torch (CMake: find_package(etr) then etr::torch; pkg-config etr-torch), for C++
 * hosts on libtorch; the Python package's etr.torch is built on it. Attach once; ops are
 * recorded while an etr trace is enabled (etr_trace_open + etr_trace_enable, or
 * ETR_TRACE), and cost PyTorch's callback machinery only (a relaxed load in etr)
 * otherwise. Any thread; idempotent. attach returns 0, or ETR_EINVAL when PyTorch refused
 * the callback.
 *
 * Under ETR_TRACE the library attaches by itself as it loads (ETR_TRACE_TORCH=0: not), so
 * that a libtorch program records its ops with no code change, even one built without etr:
 *   ETR_TRACE=trace.json LD_PRELOAD=libetr_torch.so ./my_libtorch_app */
#ifndef ETR_TORCH_H
#define ETR_TORCH_H

#include <stdbool.h>

#if defined(__GNUC__)
#define ETR_TORCH_API __attribute__((visibility("default")))
#else
#define ETR_TORCH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

ETR_TORCH_API int etr_torch_attach(void);
ETR_TORCH_API int etr_torch_detach(void);
ETR_TORCH_API bool etr_torch_attached(void);

#ifdef __cplusplus
}
#endif

#endif /* ETR_TORCH_H */
