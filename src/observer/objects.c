/* Object-id map: 64 shards, linear probing, backward-shift deletion (no tombstones).
 *
 * Lookups of known objects (the common case: a model's tensors are seen many times) take no
 * lock and write no shared memory: each shard is a seqlock. A reader notes the shard's
 * sequence number, probes, and retries if a writer was active or the number changed.
 * Inserts and removals take the shard's spin lock and make the number odd while they
 * change the table. Tables replaced by growth are kept until the map is freed, so a reader
 * never touches freed memory; that costs at most as much again as the final tables.
 */
#include "observer/objects.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "etr/common.h"

#define SHARDS 64
#define INIT_CAP 64 /* entries per shard, power of two */

typedef struct entry {
  _Atomic uintptr_t key; /* 0 = empty (NULL identities are never mapped) */
  _Atomic uint64_t id;
} entry;

typedef struct table {
  uint32_t mask;         /* capacity - 1 */
  struct table *retired; /* older tables of the shard, freed with the map */
  entry e[];
} table;

typedef struct shard {
  _Atomic int lock;
  _Atomic uint64_t seq; /* odd while a writer changes the table; never wraps in practice */
  _Atomic(table *) tab;
  uint32_t count; /* under lock */
} __attribute__((aligned(64))) shard;

struct etr__idmap {
  shard shards[SHARDS];
  uint8_t *first; /* the shards' first tables, in one block (NULL: made one by one) */
};

#define FIRST_TABLE_BYTES (sizeof(table) + INIT_CAP * sizeof(entry))

static inline void shard_lock(shard *s) {
  for (unsigned spins = 0;; spins++) {
    if (!atomic_load_explicit(&s->lock, memory_order_relaxed) &&
        !atomic_exchange_explicit(&s->lock, 1, memory_order_acquire))
      return;
    if (spins > 100) sched_yield();
  }
}

static inline void shard_unlock(shard *s) {
  atomic_store_explicit(&s->lock, 0, memory_order_release);
}

/* Writer side of the seqlock (lock held). Entries are stored with release, so a reader
 * that sees a new entry also sees the odd sequence number stored before it; readers load
 * entries with acquire, so their second look at the number comes after. No fences, which
 * ThreadSanitizer does not model; on x86 all of these are plain moves. */
static inline void write_begin(shard *s) {
  atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) + 1,
                        memory_order_relaxed);
}
static inline void write_end(shard *s) {
  atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) + 1,
                        memory_order_release);
}

static inline uint64_t mix(uintptr_t k) { return etr__idmap_mix(k); }

static inline uintptr_t key_at(const table *t, uint32_t j) {
  return atomic_load_explicit(&t->e[j].key, memory_order_acquire);
}
static inline void put_entry(table *t, uint32_t j, uintptr_t k, uint64_t id) {
  atomic_store_explicit(&t->e[j].id, id, memory_order_release);
  atomic_store_explicit(&t->e[j].key, k, memory_order_release);
}

/* Every shard starts with a table of INIT_CAP entries, all from one allocation: a trace's
 * first objects then cost no allocation each (a shard's first insert used to make its table,
 * about 14 000 instructions in malloc while the process traces). */
etr__idmap *etr__idmap_new(void) {
  etr__idmap *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->first = calloc(SHARDS, FIRST_TABLE_BYTES);
  if (m->first) {
    for (int i = 0; i < SHARDS; i++) {
      table *t = (table *)(void *)(m->first + (size_t)i * FIRST_TABLE_BYTES);
      t->mask = INIT_CAP - 1;
      atomic_store_explicit(&m->shards[i].tab, t, memory_order_relaxed);
    }
  }
  return m;
}

void etr__idmap_free(etr__idmap *m) {
  if (!m) return;
  for (int i = 0; i < SHARDS; i++) {
    table *t = atomic_load_explicit(&m->shards[i].tab, memory_order_relaxed);
    while (t) {
      table *old = t->retired;
      bool first = m->first && (uint8_t *)t >= m->first &&
                   (uint8_t *)t < m->first + SHARDS * FIRST_TABLE_BYTES;
      if (!first) free(t);
      t = old;
    }
  }
  free(m->first);
  free(m);
}

static table *table_new(uint32_t cap) {
  table *t = calloc(1, sizeof *t + (size_t)cap * sizeof(entry));
  if (t) t->mask = cap - 1;
  return t;
}

/* Lock held. Publishes a twice-as-large copy of the table. */
static bool grow(shard *s) {
  table *old = atomic_load_explicit(&s->tab, memory_order_relaxed);
  uint32_t ncap = old ? (old->mask + 1) * 2 : INIT_CAP;
  table *nt = table_new(ncap);
  if (!nt) return false;
  if (old) {
    for (uint32_t i = 0; i <= old->mask; i++) {
      uintptr_t k = key_at(old, i);
      if (!k) continue;
      uint32_t j = (uint32_t)(mix(k) >> 6) & nt->mask;
      while (key_at(nt, j)) j = (j + 1) & nt->mask;
      atomic_store_explicit(&nt->e[j].key, k, memory_order_relaxed);
      atomic_store_explicit(&nt->e[j].id, atomic_load_explicit(&old->e[i].id, memory_order_relaxed),
                            memory_order_relaxed);
    }
  }
  nt->retired = old;
  atomic_store_explicit(&s->tab, nt, memory_order_release);
  return true;
}

/* Probe for k; 0 when absent. Bounded, so that a torn view cannot loop forever. */
static uint64_t probe(const table *t, uintptr_t k, uint64_t h) {
  if (!t) return 0;
  uint32_t j = (uint32_t)(h >> 6) & t->mask;
  for (uint32_t n = 0; n <= t->mask; n++) {
    uintptr_t kk = key_at(t, j);
    if (kk == k) return atomic_load_explicit(&t->e[j].id, memory_order_acquire);
    if (!kk) return 0;
    j = (j + 1) & t->mask;
  }
  return 0;
}

uint64_t etr__idmap_get(etr__idmap *m, const void *key, etr__id_source src, void *ctx,
                        etr__idcache *cache) {
  uintptr_t k = (uintptr_t)key;
  if (!k) return 0;
  uint64_t h = mix(k);
  shard *s = &m->shards[h & (SHARDS - 1)];
  /* The thread's cache: valid while the shard has not changed since it was filled. */
  etr__idcache_entry *c = cache ? &cache->e[(h >> 40) & (ETR__IDCACHE_SIZE - 1)] : NULL;
  if (c && c->key == k && c->seq == atomic_load_explicit(&s->seq, memory_order_acquire))
    return c->id;
  /* Lock-free read of a known object. */
  for (unsigned tries = 0; tries < 64; tries++) {
    uint64_t s0 = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (ETR__UNLIKELY(s0 & 1)) {
      sched_yield();
      continue;
    }
    uint64_t id = probe(atomic_load_explicit(&s->tab, memory_order_acquire), k, h);
    if (ETR__LIKELY(atomic_load_explicit(&s->seq, memory_order_relaxed) == s0)) {
      if (!id) break;
      if (c) *c = (etr__idcache_entry){k, id, s0, &s->seq};
      return id;
    }
  }
  /* Unknown (or contended): insert under the lock. */
  shard_lock(s);
  table *t = atomic_load_explicit(&s->tab, memory_order_relaxed);
  uint64_t id = probe(t, k, h);
  if (ETR__UNLIKELY(id)) { /* (inserted by another thread meanwhile) */
    if (c)
      *c =
          (etr__idcache_entry){k, id, atomic_load_explicit(&s->seq, memory_order_relaxed), &s->seq};
    shard_unlock(s);
    return id;
  }
  write_begin(s);
  /* Keep the load factor under 3/4. */
  if (ETR__UNLIKELY(!t || (s->count + 1) * 4 > (t->mask + 1) * 3)) {
    if (!grow(s)) {
      write_end(s);
      shard_unlock(s);
      return 0;
    }
    t = atomic_load_explicit(&s->tab, memory_order_relaxed);
  }
  uint32_t j = (uint32_t)(h >> 6) & t->mask;
  while (key_at(t, j)) j = (j + 1) & t->mask;
  id = src(ctx);
  put_entry(t, j, k, id);
  s->count++;
  write_end(s);
  if (c)
    *c = (etr__idcache_entry){k, id, atomic_load_explicit(&s->seq, memory_order_relaxed), &s->seq};
  shard_unlock(s);
  return id;
}

bool etr__idmap_remove(etr__idmap *m, const void *key) {
  uintptr_t k = (uintptr_t)key;
  if (!k) return false;
  uint64_t h = mix(k);
  shard *s = &m->shards[h & (SHARDS - 1)];
  shard_lock(s);
  table *t = atomic_load_explicit(&s->tab, memory_order_relaxed);
  bool found = false;
  if (t) {
    uint32_t j = (uint32_t)(h >> 6) & t->mask;
    while (key_at(t, j) && key_at(t, j) != k) j = (j + 1) & t->mask;
    if (key_at(t, j) == k) {
      found = true;
      write_begin(s);
      s->count--;
      /* Backward-shift: move later entries of the probe run into the hole. */
      uint32_t hole = j;
      uint32_t i = (j + 1) & t->mask;
      uintptr_t ki;
      while ((ki = key_at(t, i)) != 0) {
        uint32_t home = (uint32_t)(mix(ki) >> 6) & t->mask;
        /* Entry i may move to the hole if its home is not in (hole, i]. */
        bool movable = hole <= i ? (home <= hole || home > i) : (home <= hole && home > i);
        if (movable) {
          put_entry(t, hole, ki, atomic_load_explicit(&t->e[i].id, memory_order_relaxed));
          hole = i;
        }
        i = (i + 1) & t->mask;
      }
      put_entry(t, hole, 0, 0);
      write_end(s);
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
