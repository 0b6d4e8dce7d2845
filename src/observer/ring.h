/* The flight recorder's ring (ETR_TRACE_RING_MB, etr_trace_options.ring_mb): the latest
 * events, kept in memory by the writer thread instead of being written, and written out as
 * one complete trace by a dump (etr_trace_dump or etr_trace_flush, close, exit, a fatal
 * signal when signals are on).
 *
 * Op events go to a circular buffer of a fixed size; the oldest are dropped (and counted) to
 * make room. Thread events are kept apart, so every kept op has its thread's node; the node
 * of a thread that exited goes once no kept op needs it (etr__ring_prune_threads), so that
 * a host that starts and ends threads all the time does not grow the recorder without bound. A
 * process-group node (dist.c's `## process_group:init ##`, which says the process's rank) goes to
 * the ring like an op, keeping its place among them, and a copy of it is kept apart (the newest
 * 64), so every dump has it: where it was while the ring holds it, before every op once the ring
 * dropped it. Because events are in end order per thread, a kept op's parent is kept too unless it
 * was still open at the dump; those, and forward ops (fw_parent) that were dropped, get a
 * placeholder node so every reference of the written trace resolves.
 *
 * Writer thread only: no locks.
 */
#ifndef ETR_OBSERVER_RING_H
#define ETR_OBSERVER_RING_H

#include <stddef.h>
#include <stdint.h>

#include "observer/openrefs.h"
#include "observer/trace_internal.h"

#define ETR__RING_PLACEHOLDER "[etr|ring|unfinished]"

typedef struct etr__ring etr__ring;

/* A ring of `bytes` (rounded up to a multiple of 8); NULL when memory runs out. */
etr__ring *etr__ring_new(size_t bytes);
void etr__ring_free(etr__ring *r); /* NULL is a no-op */

/* Keep a copy of ev (dropping the oldest op events as needed); false when memory runs out
 * (the event is lost and counted as dropped). */
bool etr__ring_add(etr__ring *r, const etr__ev *ev);

/* Op events dropped so far to make room. */
uint64_t etr__ring_dropped(const etr__ring *r);

/* True when the thread nodes kept have grown enough since the last prune to be pruned again
 * (the larger of twice what the last one kept, a sixteenth of the ring and 64 KiB). */
bool etr__ring_threads_due(const etr__ring *r);
/* Drop the node of every thread that is not in live (keys: tid + 1), has no op among the
 * events kept and is named by none as fw_parent: a thread that has exited and whose events
 * have all reached the ring (the caller's duty) records nothing more. False when memory ran
 * out (nothing dropped). */
bool etr__ring_prune_threads(etr__ring *r, const etr__refmap *live);
/* Thread nodes dropped so far. */
uint64_t etr__ring_threads_pruned(const etr__ring *r);

/* Hand every event of a complete trace to put, in the order a trace holds them: the thread
 * events, the process-group nodes the ring dropped (their copies), the kept op events oldest
 * first, then a placeholder for each op a kept event names
 * (ctrl_deps parent or fw_parent) that is not among them (a thread node instead for the node of a
 * pruned thread that a backward op names). Returns the placeholders made, or
 * UINT64_MAX when memory ran out (the events are all handed over, without placeholders). */
uint64_t etr__ring_write(etr__ring *r, void (*put)(void *ctx, const etr__ev *ev), void *ctx);

#endif
