/* etr for PyTorch (integrations/torch): attach a global at::RecordFunction callback that
 * records every op PyTorch reports into the open etr trace. docs/TORCH.md.
 *
 * Attach once; ops are recorded while an etr trace is enabled (etr_trace_open/enable, or
 * ETR_TRACE), and cost PyTorch's callback machinery only (a relaxed load in etr) otherwise.
 * Any thread; idempotent. Returns 0, or ETR_EINVAL when PyTorch refused the callback. */
#ifndef ETR_TORCH_H
#define ETR_TORCH_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

int etr_torch_attach(void);
int etr_torch_detach(void);
bool etr_torch_attached(void);

#ifdef __cplusplus
}
#endif

#endif /* ETR_TORCH_H */
