/* etr/common.h — export macro, error codes and the diagnostic log hook.
 *
 * Every public header includes this one. Control-plane calls return 0 or a negative
 * ETR_E... code; hot-path calls never fail loudly (they drop and count). The library never
 * aborts or exits on its own: diagnostics go to the log hook, which by default writes to
 * stderr every level when the environment variable ETR_LOG is set (none when it is 0, off,
 * false or no), and when it is not, errors and warnings only while ETR_TRACE is set (the
 * trace it opens has no caller to return an error to); a program that only calls the API
 * gets nothing on stderr.
 */
#ifndef ETR_COMMON_H
#define ETR_COMMON_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ETR_API
#elif defined(__GNUC__)
#define ETR_API __attribute__((visibility("default")))
#else
#define ETR_API
#endif

#if defined(__GNUC__)
#define ETR__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define ETR__LIKELY(x) __builtin_expect(!!(x), 1)
/* The record-site functions are inlined even without optimization: no call on the disabled
 * path, and no frame of etr's between the runtime's code and a captured traceback. */
#define ETR__ALWAYS_INLINE __attribute__((always_inline))
/* Relaxed atomic load usable from C and C++ alike (the flag is a plain integer in the ABI). */
#define ETR__LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#else
#define ETR__UNLIKELY(x) (x)
#define ETR__LIKELY(x) (x)
#define ETR__ALWAYS_INLINE
#define ETR__LOAD_RELAXED(p) (*(volatile const __typeof__(*(p)) *)(p))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* X-macro list: name, value, message. Values are explicit and never reused. */
#define ETR_ERRNO_MAP(X)                                                                \
  X(OK, 0, "success")                                                                   \
  X(EINVAL, -1, "invalid argument")                                                     \
  X(ENOMEM, -2, "out of memory")                                                        \
  X(EBUSY, -3, "resource busy (another trace is open, or the call is not allowed now)") \
  X(ENOSPC, -4, "no free slot (observers, or process groups)")                          \
  X(ENOENT, -5, "no such observer (stale or removed handle)")                           \
  X(EIO, -6, "write error on the trace file")                                           \
  X(EOPEN, -7, "cannot open the trace file")                                            \
  X(ESTATE, -8, "call not valid in the current state")                                  \
  X(ETHREAD, -9, "cannot start the writer thread")                                      \
  X(EFORKED, -10, "the trace belongs to the parent process")                            \
  X(EFORMAT, -11, "malformed trace input")                                              \
  X(ENOTSUP, -12, "not supported on this platform or build")

typedef enum etr_error {
#define ETR__ERR_ENUM(name, value, msg) ETR_##name = (value),
  ETR_ERRNO_MAP(ETR__ERR_ENUM)
#undef ETR__ERR_ENUM
} etr_error;

/* A static message for an error code; never NULL. Any thread. */
ETR_API const char *etr_strerror(int err);

/* The symbolic name of an error code ("ETR_EINVAL"); never NULL. Any thread. */
ETR_API const char *etr_err_name(int err);

typedef enum etr_log_level {
  ETR_LOG_ERROR = 0,
  ETR_LOG_WARN = 1,
  ETR_LOG_INFO = 2,
  ETR_LOG_DEBUG = 3
} etr_log_level;

typedef void (*etr_log_fn)(etr_log_level level, const char *msg, void *user);

/* Route diagnostics to fn (NULL restores the default: stderr, as said above).
 * The hook may be called from any thread, including the writer thread; it must not record
 * operators. Not to be called concurrently with itself. */
ETR_API void etr_set_log(etr_log_fn fn, void *user);

#ifdef __cplusplus
}
#endif

#endif /* ETR_COMMON_H */
