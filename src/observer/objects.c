/* Object-id map: 64 shards, linear probing, backward-shift deletion (no tombstones). */
#include "observer/objects.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SHARDS 64
#define INIT_CAP 64 /* entries per shard, power of two */

typedef struct entry {
  uintptr_t key; /* 0 = empty (NULL identities are never mapped) */
  uint64_t id;
} entry;

typedef struct shard {
  _Atomic int lock;
  uint32_t count;
  uint32_t mask; /* capacity - 1 */
  entry *tab;
} __attribute__((aligned(64))) shard;

struct etr__idmap {
  shard shards[SHARDS];
};

static inline void shard_lock(shard *s) {
  for (unsigned spins = 0;; spins++) {
    if (!atomic_load_explicit(&s->lock, memory_order_relaxed) &&
        !atomic_exchange_explicit(&s->lock, 1, memory_order_acquire))
      return;
    if (spins > 100) sched_yield();
  }
}

static inline void shard_unlock(shard *s) { atomic_store_explicit(&s->lock, 0, memory_order_release); }

static inline uint64_t mix(uintptr_t k) {
  uint64_t x = (uint64_t)k;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

etr__idmap *etr__idmap_new(void) {
  etr__idmap *m = calloc(1, sizeof *m);
  return m;
}

void etr__idmap_free(etr__idmap *m) {
  if (!m) return;
  for (int i = 0; i < SHARDS; i++) free(m->shards[i].tab);
  free(m);
}

static bool grow(shard *s) {
  uint32_t ncap = s->tab ? (s->mask + 1) * 2 : INIT_CAP;
  entry *nt = calloc(ncap, sizeof *nt);
  if (!nt) return false;
  if (s->tab) {
    for (uint32_t i = 0; i <= s->mask; i++) {
      if (!s->tab[i].key) continue;
      uint32_t j = (uint32_t)(mix(s->tab[i].key) >> 6) & (ncap - 1);
      while (nt[j].key) j = (j + 1) & (ncap - 1);
      nt[j] = s->tab[i];
    }
    free(s->tab);
  }
  s->tab = nt;
  s->mask = ncap - 1;
  return true;
}

uint64_t etr__idmap_get(etr__idmap *m, const void *key, etr__id_source src, void *ctx) {
  uintptr_t k = (uintptr_t)key;
  if (!k) return 0;
  uint64_t h = mix(k);
  shard *s = &m->shards[h & (SHARDS - 1)];
  shard_lock(s);
  if (s->tab) {
    uint32_t j = (uint32_t)(h >> 6) & s->mask;
    while (s->tab[j].key) {
      if (s->tab[j].key == k) {
        uint64_t id = s->tab[j].id;
        shard_unlock(s);
        return id;
      }
      j = (j + 1) & s->mask;
    }
  }
  /* Keep the load factor under 3/4. */
  if ((!s->tab || (s->count + 1) * 4 > (s->mask + 1) * 3) && !grow(s)) {
    shard_unlock(s);
    return 0;
  }
  uint32_t j = (uint32_t)(h >> 6) & s->mask;
  while (s->tab[j].key) j = (j + 1) & s->mask;
  uint64_t id = src(ctx);
  s->tab[j].key = k;
  s->tab[j].id = id;
  s->count++;
  shard_unlock(s);
  return id;
}

bool etr__idmap_remove(etr__idmap *m, const void *key) {
  uintptr_t k = (uintptr_t)key;
  if (!k) return false;
  uint64_t h = mix(k);
  shard *s = &m->shards[h & (SHARDS - 1)];
  shard_lock(s);
  bool found = false;
  if (s->tab) {
    uint32_t j = (uint32_t)(h >> 6) & s->mask;
    while (s->tab[j].key && s->tab[j].key != k) j = (j + 1) & s->mask;
    if (s->tab[j].key == k) {
      found = true;
      s->count--;
      /* Backward-shift: move later entries of the probe run into the hole. */
      uint32_t hole = j;
      uint32_t i = (j + 1) & s->mask;
      while (s->tab[i].key) {
        uint32_t home = (uint32_t)(mix(s->tab[i].key) >> 6) & s->mask;
        /* Entry i may move to the hole if its home is not in (hole, i]. */
        bool movable = hole <= i ? (home <= hole || home > i) : (home <= hole && home > i);
        if (movable) {
          s->tab[hole] = s->tab[i];
          hole = i;
        }
        i = (i + 1) & s->mask;
      }
      s->tab[hole].key = 0;
      s->tab[hole].id = 0;
    }
  }
  shard_unlock(s);
  return found;
}

uint64_t etr__idmap_size(etr__idmap *m) {
  uint64_t n = 0;
  for (int i = 0; i < SHARDS; i++) {
    shard *s = &m->shards[i];
    shard_lock(s);
    n += s->count;
    shard_unlock(s);
  }
  return n;
}
