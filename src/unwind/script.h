/* Private helpers of script.c (the script-unwinder plug-in) for tests and benchmarks.
 *
 * The interface the trace observer uses is in unwind.h ("script frames"); these only tune
 * or inspect script.c's state. Reached through the static library.
 */
#ifndef ETR_UNWIND_SCRIPT_H
#define ETR_UNWIND_SCRIPT_H

#include <stddef.h>
#include <stdint.h>

/* Buckets (2 entries each, a power of two) of the per-thread handle cache of threads that
 * create their cache after this call; 0 restores the default (512 buckets, 1024 handles).
 * Tests use a tiny cache to exercise eviction. Any thread. */
void etr__script_test_set_cache_buckets(size_t nbuckets);

/* Number of script-frame ids handed out so far (ids are 0 .. count-1). Any thread. */
uint64_t etr__script_frame_count(void);

/* Handles whose release is deferred right now (all threads and the global list). */
uint64_t etr__script_pending_count(void);

#endif
