/* etr/traceback.h — where in the program an operator came from.
 *
 * The execution-trace observer can capture a traceback on selected ops (etr_trace_options:
 * traceback, traceback_pattern, traceback_every; or ETR_TRACE_TRACEBACK* in the
 * environment). The recording thread stores instruction pointers only; each unique address
 * is symbolized once (function, source file, line; C++ names demangled) by the writer
 * thread when a new stack first reaches it, in process, with elfutils' libdw, falling back
 * to dladdr and then to
 * "module+0xoffset". A node carries the attr "traceback" (an index into the "tracebacks"
 * table written after "finish_ts"); "frames" holds each unique frame once (docs/FORMAT.md).
 *
 * Runtimes with their own script language (an interpreter) register a script unwinder:
 * its frames are gathered on the recording thread as cheap handles, symbolized once per
 * unique handle, released later at a safe point, and interleaved with the native frames at
 * the native frames of the interpreter's entry functions.
 */
#ifndef ETR_TRACEBACK_H
#define ETR_TRACEBACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etr/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How frames are written in the "frames" table. */
typedef enum etr_symbolize_mode {
  ETR_SYMBOLIZE_FULL = 0,  /* name, filename, line resolved in process (default) */
  ETR_SYMBOLIZE_MODULE = 1 /* "module", "build_id", "offset" per native frame; resolve later
                            * with `etr symbolize` on a machine that has the binaries */
} etr_symbolize_mode;

/* Which ops get a traceback, and how frames are written. Part of etr_trace_options, and
 * changeable on an open trace with etr_trace_set_traceback. */
typedef struct etr_traceback_options {
  size_t struct_size;  /* sizeof(etr_traceback_options) */
  bool enabled;        /* capture tracebacks (default off) */
  const char *pattern; /* only ops whose name matches this fnmatch(3) pattern (copied);
                        * NULL or "" = every op */
  uint32_t every;      /* then 1 in N of those ops, per thread; 0 or 1 = each one */
  uint32_t max_depth;  /* frames captured per traceback, native and script; 0 = 64;
                        * <= 256 (calls inlined at an address add frames in the table) */
  etr_symbolize_mode symbolize;
} etr_traceback_options;
#define ETR_TRACEBACK_OPTIONS_INIT \
  { sizeof(etr_traceback_options), false, NULL, 0, 0, ETR_SYMBOLIZE_FULL }

/* ---- script frames (an interpreter's own stack) ---- */

/* Set on a gathered script frame that is the outermost one run by one activation of the
 * interpreter's native entry function (CPython: a frame with is_entry). Frames without any
 * such flag are matched one to one with the native entry frames. */
#define ETR_SCRIPT_FRAME_ENTRY 1u

typedef struct etr_script_frame {
  const char *name; /* function name */
  const char *filename;
  int64_t line;
} etr_script_frame;

typedef struct etr_script_unwinder {
  size_t struct_size; /* sizeof(etr_script_unwinder) */
  /* Native functions that run the interpreter (e.g. "_PyEval_EvalFrameDefault"): script
   * frames are inserted before (inside of) the native frames found in these functions. */
  const char *const *entry_symbols;
  size_t n_entry_symbols;
  /* Store the calling thread's current script frames, innermost first, as opaque handles
   * (each a reference the unwinder owns until `release`), with ETR_SCRIPT_FRAME_* flags;
   * return how many (<= max). Called on the recording thread, inside a record begin, with no
   * etr lock held. Must be cheap: no symbolization here. */
  size_t (*gather)(uintptr_t *handles, uint8_t *flags, size_t max, void *user);
  /* Describe one handle. The strings need to live only until the call returns (etr copies
   * them). Called on the recording thread, in the same context as gather, at most once per
   * unique handle while etr keeps it cached. 0 on success, nonzero to write "??". */
  int (*symbolize)(uintptr_t handle, etr_script_frame *out, void *user);
  /* Drop references taken by gather. Never called with an etr lock held, never from the
   * writer thread; called from etr_script_release_pending, etr_trace_flush/_disable/_close
   * on the calling thread, and (when release_in_record is true) on a recording thread in a
   * later record begin. The handles may have been gathered on other threads, including
   * threads that have exited since. */
  void (*release)(const uintptr_t *handles, size_t n, void *user);
  /* True when release may run inside a record begin on the recording thread (CPython: ops
   * are called holding the GIL, and release takes it reentrantly). When false, a thread
   * stops gathering script frames once 65,536 releases wait for a safe point. */
  bool release_in_record;
  void *user;
} etr_script_unwinder;
#define ETR_SCRIPT_UNWINDER_INIT \
  { sizeof(etr_script_unwinder), NULL, 0, NULL, NULL, NULL, false, NULL }

/* Register the process's script unwinder (one at a time; ETR_EBUSY if one is set). The
 * entry symbols are resolved once here (ETR_ENOENT if none is found). Any thread. */
ETR_API int etr_script_unwinder_register(const etr_script_unwinder *u);

/* Unregister: waits until no thread is inside the unwinder's callbacks, releases every
 * handle etr still holds (through the unwinder's release, on the calling thread), then
 * forgets the unwinder. Call it where release may run. ETR_ENOENT when none is registered,
 * ETR_EBUSY from inside one of its callbacks or during another unregister. */
ETR_API int etr_script_unwinder_unregister(void);

/* Release the script-frame handles whose release was deferred. Call it at a point where the
 * unwinder's release may run. Any thread; cheap when nothing is pending. */
ETR_API void etr_script_release_pending(void);

/* ---- counters ---- */

typedef struct etr_traceback_stats {
  size_t struct_size;
  uint64_t captures;            /* tracebacks captured */
  uint64_t captures_truncated;  /* tracebacks cut at the depth limit */
  uint64_t capture_failures;    /* walks that stopped early on a bad frame */
  uint64_t frames_captured;     /* native frames stored */
  uint64_t unwind_cache_hits;   /* frames unwound with a cached rule */
  uint64_t unwind_cache_misses; /* frames whose rule had to be computed */
  uint64_t unwind_cache_resets; /* cache flushes after libraries were loaded or unloaded */
  uint64_t unwind_fallbacks;    /* frames taken from libunwind (no simple rule) */
  /* The per-thread frame cache reuses the previous capture's outer frames where the stack
   * words they were read from are unchanged: a hit reuses them to the end of the walk, a
   * partial hit walks again after some were reused. frames_reused + frames_walked = all
   * frames unwound (walked = by the rule cache or libunwind). */
  uint64_t frame_cache_hits;
  uint64_t frame_cache_partial_hits;
  uint64_t frame_cache_misses;
  uint64_t frames_reused;
  uint64_t frames_walked;
  uint64_t symbol_cache_hits;   /* addresses symbolized from the cache */
  uint64_t symbol_cache_misses; /* addresses symbolized for the first time */
  uint64_t symbolize_fallbacks; /* addresses that fell back to dladdr or module+offset */
  uint64_t script_frames;       /* script frames gathered */
  uint64_t script_symbolized;   /* unique script frames symbolized */
  uint64_t script_released;     /* script-frame handles released */
} etr_traceback_stats;

/* Fill *out with process-wide counters (struct_size 0 means sizeof). Any thread. */
ETR_API int etr_traceback_stats_get(etr_traceback_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* ETR_TRACEBACK_H */
