/* Object ids: a concurrent map from an object's identity pointer to its trace id.
 *
 * Sharded open-addressing tables, each behind its own small spin lock on its own cache
 * line, so recording threads that look up different objects do not contend. An entry lives
 * until the runtime says the object died; a new object at the same address then draws a
 * new id. Memory grows with the number of live objects, not with the trace.
 */
#ifndef ETR_OBSERVER_OBJECTS_H
#define ETR_OBSERVER_OBJECTS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct etr__idmap etr__idmap;

/* Draws a fresh id (from the calling thread's block of the trace's counter). */
typedef uint64_t (*etr__id_source)(void *ctx);

etr__idmap *etr__idmap_new(void);
void etr__idmap_free(etr__idmap *m);

/* A thread's small cache of recent lookups in one map. An entry is used only while the
 * shard it came from has not changed (its sequence number is the same), so it never returns
 * an id that a removal retired. Zero-initialise; owned by one thread. */
#define ETR__IDCACHE_SIZE 256
typedef struct etr__idcache_entry {
  uintptr_t key;
  uint64_t id;
  uint64_t seq;
  const _Atomic uint64_t *shard_seq; /* where the shard's number is (NULL: entry unused) */
} etr__idcache_entry;
typedef struct etr__idcache {
  etr__idcache_entry e[ETR__IDCACHE_SIZE];
} etr__idcache;

/* The id of key, drawing a new one from src when key is unknown. Returns 0 only when
 * memory is exhausted (the caller writes 0, as for an unknown object). Any thread; cache
 * (may be NULL) must be the calling thread's. */
uint64_t etr__idmap_get(etr__idmap *m, const void *key, etr__id_source src, void *ctx,
                        etr__idcache *cache);

/* The hash both the map and the caches use. */
static inline uint64_t etr__idmap_mix(uintptr_t k) {
  uint64_t x = (uint64_t)k;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

/* etr__idmap_get with the cache's hit inline (the recording thread's common case: a
 * model's tensors are seen again and again). *entry is then the cache's entry for key (its id
 * and the shard number it was read at), NULL when the cache does not hold it (memory
 * exhausted, or the shard was contended). */
static inline uint64_t etr__idmap_get_cached(etr__idmap *m, const void *key, etr__id_source src,
                                             void *ctx, etr__idcache *cache,
                                             const etr__idcache_entry **entry) {
  uintptr_t k = (uintptr_t)key;
  const etr__idcache_entry *c = &cache->e[(etr__idmap_mix(k) >> 40) & (ETR__IDCACHE_SIZE - 1)];
  if (k && c->key == k && c->shard_seq &&
      c->seq == atomic_load_explicit(c->shard_seq, memory_order_acquire)) {
    *entry = c;
    return c->id;
  }
  uint64_t id = etr__idmap_get(m, key, src, ctx, cache);
  *entry = id && c->key == k && c->shard_seq ? c : NULL;
  return id;
}

/* Forget key; true when it was present. Any thread. */
bool etr__idmap_remove(etr__idmap *m, const void *key);

/* Objects currently mapped (approximate while other threads insert). */
uint64_t etr__idmap_size(etr__idmap *m);

#endif
