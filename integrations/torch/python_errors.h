// Between libetr_torch and etr._torch, not for hosts: the function that drops a Python
// error which Python code run while etr read a tensor left set (etr_torch.cpp, "Python
// errors"). No PyTorch type, so that etr._torch, built without PyTorch's headers, can use it.
#ifndef ETR_TORCH_PYTHON_ERRORS_H
#define ETR_TORCH_PYTHON_ERRORS_H

#include "etr/torch.h"

#ifdef __cplusplus
extern "C" {
#endif

// drop: called on the thread, with the GIL held or not (it takes it itself), right after a
// read of a tensor threw something other than PyTorch's own c10::Error; it clears the error
// and hands a KeyboardInterrupt back to Python as an interrupt. nullptr: none.
ETR_TORCH_API void etr_torch__set_error_drop(void (*drop)(void));

#ifdef __cplusplus
}
#endif

#endif  // ETR_TORCH_PYTHON_ERRORS_H
