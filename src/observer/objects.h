/* Object ids: a concurrent map from an object's identity pointer to its trace id.
 *
 * Sharded open-addressing tables, each behind its own small spin lock on its own cache
 * line, so recording threads that look up different objects do not contend. An entry lives
 * until the runtime says the object died; a new object at the same address then draws a
 * new id. Memory grows with the number of live objects, not with the trace.
 */
#ifndef ETR_OBSERVER_OBJECTS_H
#define ETR_OBSERVER_OBJECTS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct etr__idmap etr__idmap;

/* Draws a fresh id (from the calling thread's block of the trace's counter). */
typedef uint64_t (*etr__id_source)(void *ctx);

etr__idmap *etr__idmap_new(void);
void etr__idmap_free(etr__idmap *m);

/* The id of key, drawing a new one from src when key is unknown. Returns 0 only when
 * memory is exhausted (the caller writes 0, as for an unknown object). Any thread. */
uint64_t etr__idmap_get(etr__idmap *m, const void *key, etr__id_source src, void *ctx);

/* Forget key; true when it was present. Any thread. */
bool etr__idmap_remove(etr__idmap *m, const void *key);

/* Objects currently mapped (approximate while other threads insert). */
uint64_t etr__idmap_size(etr__idmap *m);

#endif
