/* The recording thread's common case, inline where an op is encoded: a value that is a
 * tensor the thread's table holds is written as a reference to its slot (encode.c has the
 * rest: new tensors, other values, the tables' definitions). */
#ifndef ETR_OBSERVER_ENCODE_HIT_H
#define ETR_OBSERVER_ENCODE_HIT_H

#include <stdbool.h>
#include <stdint.h>

#include "observer/trace_internal.h"

/* Whether s holds the n bytes of copy (which ends with a NUL) and ends there; reads s only
 * up to its first difference, so never past its own end. */
static inline bool etr__same_str(const char *s, const char *copy, size_t n) {
  for (size_t i = 0; i <= n; i++)
    if (s[i] != copy[i]) return false;
  return true;
}

/* Whether s holds the string of a slot: the same fixed pointer (bytes that cannot have
 * changed), else the same bytes. */
static inline bool etr__slot_str(const char *s, const char *fixed, const char *copy, size_t n) {
  return s == fixed || etr__same_str(s, copy, n);
}

/* The shard numbers a slot that cannot hit points at: iseq_p at `never` with iseq 1 (a
 * slot being defined, or ids not read through the caches), sseq_p at `always` with sseq 0
 * (a tensor without storage). Read-only; the hit compares them like any other. (A slot
 * never used is all zeros instead: see etr__tensor_find.) */
extern const _Atomic uint64_t etr__seq_never, etr__seq_always;

static inline void etr__cten_unhittable(etr__cten *c) {
  c->impl = NULL;
  c->iseq_p = &etr__seq_never;
  c->iseq = 1;
  c->sseq_p = &etr__seq_always;
  c->sseq = 0;
}

/* tensor_same without the ids, for a slot c that holds t's identity (impl): the storage is
 * the slot's too and the id-map shards they map in have not changed since the slot's ids
 * were read, so the ids are the slot's. For a tensor with a dtype, strides, and sizes
 * unless it has no dimension. The rest of the key, the dimension count and the shard
 * numbers are compared with one branch (a hit is the common case). */
static inline bool etr__tensor_hit(const etr__cten *c, const etr_tensor *t) {
  uint64_t d = ((uintptr_t)t->storage ^ (uintptr_t)c->storage) |
               ((uint64_t)t->storage_offset ^ (uint64_t)c->off) |
               ((uint64_t)t->numel ^ (uint64_t)c->numel) |
               ((uint64_t)t->itemsize ^ (uint64_t)c->itemsize) | ((uint32_t)t->ndim ^ c->nd) |
               (c->iseq ^ atomic_load_explicit(c->iseq_p, memory_order_acquire)) |
               (c->sseq ^ atomic_load_explicit(c->sseq_p, memory_order_acquire));
  if (d) return false;
  const int64_t *sizes = t->sizes, *strides = t->strides;
  for (uint32_t i = 0, nd = c->nd; i < nd; i++)
    d |= ((uint64_t)c->sizes[i] ^ (uint64_t)sizes[i]) |
         ((uint64_t)c->strides[i] ^ (uint64_t)strides[i]);
  if (d) return false;
  const char *dev = t->device;
  return etr__slot_str(t->dtype, c->dtp, c->dtype, c->dn) &&
         (dev ? etr__slot_str(dev, c->dvp, c->dev, c->vn) : c->vn == 0);
}

/* The slot of the thread's table that t hits, or -1. The one of its two slots that holds
 * t's identity is tried first, picked by the identity alone: which of the two a tensor sits
 * in varies from tensor to tensor, and a branch on the whole hit, which waits for the
 * id-map shard numbers, was mispredicted about as often (3 ns an op in etr-bench). The
 * other slot is still tried when that one fails (a stale slot may hold the identity too).
 * A slot is read past its identity only when it holds t's: a slot never used is all zeros
 * (its shard pointers NULL), so that the table costs no memory until its slots are used. */
static inline int etr__tensor_find(const etr__tstate *ts, const etr_tensor *t) {
  /* (a slot's nd is at most ETR__CTEN_NDIM: etr__tensor_hit reads at most that many) */
  if (!t || !t->impl || !t->dtype || !t->strides || (!t->sizes && t->ndim != 0)) return -1;
  uint32_t k, k1;
  etr__slot_pair(t->impl, &k, &k1);
  uint32_t first = ts->cten[k].impl == t->impl ? k : k1;
  if (ts->cten[first].impl != t->impl) return -1;
  if (ETR__LIKELY(etr__tensor_hit(&ts->cten[first], t))) return (int)first;
  if (first == k && ts->cten[k1].impl == t->impl && etr__tensor_hit(&ts->cten[k1], t))
    return (int)k1;
  return -1;
}

/* The reference (V_TREF) to slot k at p, which the open op pin (if any) then holds. */
static inline void etr__tref_at(etr__tstate *ts, uint8_t *p, uint32_t k, etr__frame *pin) {
  etr__cten *c = &ts->cten[k];
  c->used = ++ts->table_clock;
  p[0] = ETR__V_TREF;
  p[1] = (uint8_t)k;
  if (pin) {
    c->pins++;
    pin->pins[pin->n_pins++] = (uint8_t)k;
  }
}

/* Append to the arena a value count and the values kept of vals[0..n) (tensors seen before
 * by reference; the slots they take are held by pin, the open op, when not NULL). False
 * when memory is exhausted.
 *
 * Most ops pass a few tensors that the thread's table holds: their references are written
 * here, inline, with no budget to watch (a few references stand for a few KB at most).
 * At the first value that is not such a tensor, encode.c goes on from there (`done`
 * references written after the count byte at `start`, standing for `expanded` bytes; value
 * `done`, if a tensor, was looked up and is not in the table); when the fast path does
 * not apply (many values, no table yet), it does all of them (done and start unused). */
#define ETR__HITS_MAX 8u
#define ETR__HITS_NONE UINT32_MAX
_Static_assert(ETR__HITS_MAX <= ETR__FRAME_PINS, "an op's fast references all pin");
bool etr__encode_values_from(etr__tstate *ts, const etr_value *vals, uint32_t n, etr__frame *pin,
                             size_t start, uint32_t done, size_t expanded);
static inline ETR__ALWAYS_INLINE bool etr__encode_values(etr__tstate *ts, const etr_value *vals,
                                                         uint32_t n, etr__frame *pin) {
  size_t start = ts->arena_len;
  if (ETR__UNLIKELY(n > ETR__HITS_MAX || !ts->cten || (n && !vals) ||
                    (pin && pin->n_pins + n > ETR__FRAME_PINS) ||
                    !etr__arena_reserve(ts, 1 + 2 * ETR__HITS_MAX)))
    return etr__encode_values_from(ts, vals, n, pin, start, ETR__HITS_NONE, 0);
  uint8_t *p = ts->arena + start;
  size_t expanded = 0;
  for (uint32_t i = 0; i < n; i++) {
    int k = vals[i].kind == ETR_VALUE_TENSOR ? etr__tensor_find(ts, vals[i].u.tensor) : -1;
    if (k < 0) {
      ts->arena_len = start + 1 + 2 * i;
      return etr__encode_values_from(ts, vals, n, pin, start, i, expanded);
    }
    etr__tref_at(ts, p + 1 + 2 * i, (uint32_t)k, pin);
    expanded += ts->cten[k].expand;
  }
  p[0] = (uint8_t)n;
  ts->arena_len = start + 1 + 2 * n;
  return true;
}

#endif
