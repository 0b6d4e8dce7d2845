/* etr/observer.h — the observer registry: who receives begin/end calls.
 *
 * Up to ETR_MAX_OBSERVERS observers, global (see every thread) or thread-local (see only the
 * thread that added them). Each has enter/exit callbacks, user data, what it needs from the
 * runtime, an optional sampling probability and a scope filter. Add returns a handle;
 * enable, disable and remove take it, from any thread, while other threads record.
 *
 * Guarantees:
 * - An op whose enter callback ran gets its exit callback, even if the observer was
 *   disabled in between; not if it was removed.
 * - etr_observer_remove returns only after every callback of that observer already running
 *   on another thread has returned; after it, none starts. (Removing an observer from inside
 *   its own callback does not wait for that callback. Two callbacks that remove each
 *   other's observers at the same time on two threads wait for each other forever: remove
 *   only your own observer from a callback.)
 * - Records made inside any callback are not observed again (no recursion, no deadlock).
 * - Callbacks run on the recording thread without any etr lock held.
 */
#ifndef ETR_OBSERVER_H
#define ETR_OBSERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "etr/common.h"
#include "etr/record.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ETR_MAX_OBSERVERS 64

/* Handle of an added observer; 0 is never a valid handle. */
typedef uint64_t etr_observer_id;

/* rec is the caller's record: read-only, valid only during the call. */
typedef void (*etr_enter_fn)(const etr_record *rec, void *user);
typedef void (*etr_exit_fn)(const etr_record *rec, void *user);

typedef struct etr_observer_options {
  size_t struct_size;        /* sizeof(etr_observer_options) */
  etr_enter_fn enter;        /* may be NULL */
  etr_exit_fn exit;          /* may be NULL */
  void *user;                /* passed to both callbacks */
  uint32_t needs;            /* ETR_NEEDS_* bits */
  uint32_t scopes;           /* bit (1u << scope) per accepted scope; 0 = all scopes */
  double sample_probability; /* chance that a given op is observed; 0 = every op (default) */
  bool thread_local_only;    /* only the adding thread is observed; removed at its exit */
  bool start_disabled;       /* added disabled (default: enabled at once) */
} etr_observer_options;
#define ETR_OBSERVER_OPTIONS_INIT \
  { sizeof(etr_observer_options), NULL, NULL, NULL, 0, 0, 0.0, false, false }

/* Add an observer. Returns 0 and the handle in *out, ETR_ENOSPC when all slots are taken,
 * ETR_EINVAL for bad options. Any thread; takes the registry lock, does not allocate. */
ETR_API int etr_observer_add(const etr_observer_options *opt, etr_observer_id *out);

/* Enable or disable by handle. ETR_ENOENT for a stale handle. Any thread, cheap. */
ETR_API int etr_observer_enable(etr_observer_id id);
ETR_API int etr_observer_disable(etr_observer_id id);

/* 1 when enabled, 0 when disabled, ETR_ENOENT for a stale handle. */
ETR_API int etr_observer_is_enabled(etr_observer_id id);

/* Remove; waits until callbacks of this observer running on other threads have returned.
 * Any thread, including from a callback. */
ETR_API int etr_observer_remove(etr_observer_id id);

/* Process-wide misuse and activity counters of the registry. */
typedef struct etr_registry_stats {
  size_t struct_size;
  uint64_t records_observed;     /* records that reached at least one observer */
  uint64_t ends_without_begin;   /* end on a record that never began, or a second end */
  uint64_t begins_repeated;      /* begin called twice on one record */
  uint64_t records_in_callbacks; /* records made inside callbacks, or on a thread inside
                                    etr (a signal handler's: docs/RELIABILITY.md), not
                                    observed */
  uint32_t observers;            /* observers currently added */
} etr_registry_stats;

/* Fill *out (struct_size 0 means sizeof(etr_registry_stats)). Any thread. */
ETR_API int etr_registry_stats_get(etr_registry_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* ETR_OBSERVER_H */
