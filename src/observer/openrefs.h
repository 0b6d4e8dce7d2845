/* Ops that written nodes name but that are not written (yet), for the writer thread: the
 * flight recorder's dump (ring.c) and the live writer's seal at a fatal signal give each a
 * placeholder node, so that every ctrl_deps of the file resolves.
 *
 * The live writer needs no set of the ids it wrote: an op's node comes after its children's
 * on its thread's stream (it ends after them), so a parent that a written node names either
 * comes later, and leaves the set then, or is still open (the seal's placeholders).
 *
 * Writer thread only: no locks.
 */
#ifndef ETR_OBSERVER_OPENREFS_H
#define ETR_OBSERVER_OPENREFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "observer/trace_internal.h"

/* An open-addressing map of ids (never 0) to the span and thread of what names them. */
typedef struct etr__missing {
  uint64_t id, tid;
  uint64_t under;          /* the node to hang its placeholder under (0: by threads) */
  int64_t ts_min, end_max; /* the span of the children that name it (ns) */
  bool timed;
} etr__missing;

typedef struct etr__refmap {
  etr__missing *e;
  size_t mask, n;
} etr__refmap;

bool etr__refmap_init(etr__refmap *m, size_t want);
void etr__refmap_free(etr__refmap *m);
etr__missing *etr__refmap_find(const etr__refmap *m, uint64_t id);
/* The entry of id, added when absent; NULL when memory runs out. */
etr__missing *etr__refmap_put(etr__refmap *m, uint64_t id);
/* Remove id (no-op when absent). */
void etr__refmap_del(etr__refmap *m, uint64_t id);

/* Widen m's span by ev's (the child that names it), and take ev's thread if it has none. */
void etr__missing_note(etr__missing *m, uint64_t tid, const etr__ev *ev, bool span);

/* Hand put a placeholder node named name for each entry of miss, by id: empty inputs and
 * outputs, `incomplete`, the span of its children, under its thread's node (the entry's
 * `under`, else what threads maps tid + 1 to; else the process node). False when memory
 * runs out (none handed). threads may be NULL. */
bool etr__put_placeholders(const etr__refmap *miss, const etr__refmap *threads, const char *name,
                           void (*put)(void *ctx, const etr__ev *ev), void *ctx, uint64_t *made);

/* The live writer's tracker: no memory per thread (a host that starts threads all the time
 * keeps none), only per op open. */
typedef struct etr__openrefs {
  etr__refmap open; /* parents named by written nodes and not written */
  bool failed;      /* memory ran out: no placeholders at the seal */
  bool paused;      /* the placeholders themselves are being written: not noted */
} etr__openrefs;

/* The name of the seal's placeholders, and of close's after recording stopped for lack of
 * memory (nodes lost). */
#define ETR__SEAL_PLACEHOLDER "[etr|signal|unfinished]"
#define ETR__LOST_PLACEHOLDER "[etr|lost|unfinished]"

/* The op event ev was written; thread_node: its thread's node id (its parent when it is a
 * top-level op). */
void etr__openrefs_note(etr__openrefs *o, const etr__ev *ev, uint64_t thread_node);
void etr__openrefs_free(etr__openrefs *o);

#endif
