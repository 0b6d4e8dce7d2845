// etr.torch's count of the exceptions in flight on a thread, read at each op's start and end
// (etr_torch.cpp, Context::uncaught): an op an exception left is ended as failed.
#ifndef ETR_TORCH_UNCAUGHT_H
#define ETR_TORCH_UNCAUGHT_H

#include <c10/macros/Macros.h>
#include <cxxabi.h>

#include <exception>

namespace etr_torch {

// Exceptions in flight on this thread (std::uncaught_exceptions()), asked at each op's start
// and end (Context::uncaught). std::uncaught_exceptions() finds the thread's exception
// globals through libstdc++'s thread-local storage on every call (a call to
// __cxa_get_globals and one to __tls_get_addr: about 26 instructions, twice per op); their
// address is fixed for the thread's life, so each thread asks for it once (ThreadState) and
// reads the count from there. The layout is the Itanium C++ ABI's (section 2.2.2: the
// caught exceptions' stack, then the unsigned count of uncaught ones), which libstdc++ and
// libc++abi follow; elsewhere the standard call.
#if defined(__GLIBCXX__) || defined(_LIBCPPABI_VERSION)
struct EhGlobals {
  void *caught_exceptions;
  unsigned int uncaught_exceptions;
};
inline const EhGlobals *eh_globals() {
  return reinterpret_cast<const EhGlobals *>(abi::__cxa_get_globals());
}
// (g: eh_globals(), or nullptr where its count did not agree with the standard call's)
inline int uncaught_in(const EhGlobals *g) {
  return C10_LIKELY(g != nullptr) ? static_cast<int>(g->uncaught_exceptions)
                                  : std::uncaught_exceptions();
}
#else
struct EhGlobals {};
inline const EhGlobals *eh_globals() { return nullptr; }
inline int uncaught_in(const EhGlobals *) { return std::uncaught_exceptions(); }
#endif

}  // namespace etr_torch

#endif  // ETR_TORCH_UNCAUGHT_H
