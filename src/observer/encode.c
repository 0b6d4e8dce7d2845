/* Encoding of values on the recording thread: raw bytes and resolved ids, no formatting.
 * Layout per tag (all fields native-endian, unaligned, copied with memcpy):
 *   NONE, CUT                    tag
 *   BOOL                         tag u8
 *   INT, DOUBLE                  tag 8 bytes
 *   STRING, DEVICE, OBJECT       tag u32-len bytes
 *   TENSOR  tag u8-defined u8-ndim u8-dtype-len u8-device-len
 *           u64-id u64-storage-id i64-offset i64-numel i64-itemsize dtype device
 *           i64-sizes[ndim] i64-strides[ndim]
 *   LIST, TUPLE                  tag u32-count values...
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "observer/trace_internal.h"

#define ID_BLOCK 64

uint64_t etr__next_id(etr__tstate *ts) {
  if (ts->id_next == ts->id_end) {
    ts->id_next = atomic_fetch_add_explicit(&ts->trace->next_id, ID_BLOCK, memory_order_relaxed);
    ts->id_end = ts->id_next + ID_BLOCK;
  }
  return ts->id_next++;
}

static uint64_t id_source(void *ctx) {
  etr__tstate *ts = ctx;
  etr__bump(&ts->objects, 1);
  return etr__next_id(ts);
}

bool etr__arena_reserve(etr__tstate *ts, size_t n) {
  if (ts->arena_len + n <= ts->arena_cap) return true;
  size_t cap = ts->arena_cap ? ts->arena_cap : 4096;
  while (cap < ts->arena_len + n) cap *= 2;
  uint8_t *p = realloc(ts->arena, cap);
  if (!p) return false;
  ts->arena = p;
  ts->arena_cap = cap;
  return true;
}

typedef struct enc {
  etr__tstate *ts;
  size_t limit; /* arena length beyond which lists and strings are cut */
  bool failed;  /* out of memory: the rest is cut */
} enc;

static inline size_t room(const enc *e) {
  return e->ts->arena_len >= e->limit ? 0 : e->limit - e->ts->arena_len;
}

static inline void put(enc *e, const void *p, size_t n) {
  if (e->failed || n == 0) return;
  if (!etr__arena_reserve(e->ts, n)) {
    e->failed = true;
    return;
  }
  memcpy(e->ts->arena + e->ts->arena_len, p, n);
  e->ts->arena_len += n;
}
static inline void put_u8(enc *e, uint8_t v) { put(e, &v, 1); }
static inline void put_u32(enc *e, uint32_t v) { put(e, &v, 4); }
static inline void put_u64(enc *e, uint64_t v) { put(e, &v, 8); }

/* Length of s (NUL-terminated, or len bytes when len != 0) cut at max bytes without
 * splitting a UTF-8 character; a cut is counted. */
static size_t cut_len(etr__tstate *ts, const char *s, size_t len, size_t max) {
  /* strlen, not strnlen: cheaper on the short strings of every op (measured); a huge name
   * costs its length in strlen, at tens of GB/s */
  size_t n = !s ? 0 : len ? len : strlen(s);
  if (n > max) {
    n = etr__utf8_cut(s, n, max);
    etr__bump(&ts->strings_cut, 1);
  }
  return n;
}

/* A length-prefixed string. */
static void put_str(enc *e, const char *s, size_t len, size_t max) {
  size_t n = cut_len(e->ts, s, len, max);
  put_u32(e, (uint32_t)n);
  put(e, s, n);
}

static void put_tensor(enc *e, const etr_tensor *t) {
  etr__tstate *ts = e->ts;
  etr_trace *tr = ts->trace;
  bool defined = t && t->dtype != NULL;
  int32_t nd = defined ? t->ndim : 0;
  if (nd < 0 || (nd > 0 && !t->sizes)) nd = 0;
  if (nd > ETR_MAX_NDIM) {
    nd = ETR_MAX_NDIM;
    etr__bump(&ts->lists_cut, 1);
  }
  size_t dn = 0, vn = 0;
  const char *dev = defined && t->device ? t->device : "";
  if (defined) {
    dn = cut_len(ts, t->dtype, 0, ETR__SHORT_MAX);
    vn = cut_len(ts, dev, 0, ETR__SHORT_MAX);
  }
  uint64_t f[5] = {0, 0, 0, 0, 0};
  if (t) f[0] = etr__idmap_get(tr->tensors, t->impl, id_source, ts, &ts->tensor_ids);
  if (defined) {
    f[1] =
        t->storage ? etr__idmap_get(tr->storages, t->storage, id_source, ts, &ts->storage_ids) : 0;
    f[2] = (uint64_t)t->storage_offset;
    f[3] = (uint64_t)t->numel;
    f[4] = (uint64_t)t->itemsize;
  }
  /* One reservation for the whole tensor, then plain copies. */
  size_t need = 5 + sizeof f + dn + vn + (size_t)nd * 16;
  if (e->failed || !etr__arena_reserve(ts, need)) {
    e->failed = true;
    return;
  }
  uint8_t *p = ts->arena + ts->arena_len;
  p[0] = ETR__V_TENSOR;
  p[1] = defined;
  p[2] = (uint8_t)nd;
  p[3] = (uint8_t)dn;
  p[4] = (uint8_t)vn;
  p += 5;
  memcpy(p, f, sizeof f);
  p += sizeof f;
  if (defined) {
    memcpy(p, t->dtype, dn);
    p += dn;
    memcpy(p, dev, vn);
    p += vn;
    if (nd) memcpy(p, t->sizes, (size_t)nd * 8); /* (sizes may be NULL for a scalar) */
    p += (size_t)nd * 8;
    if (t->strides) {
      if (nd) memcpy(p, t->strides, (size_t)nd * 8);
    } else { /* contiguous; a product beyond INT64_MAX stays at INT64_MAX */
      int64_t acc = 1;
      for (int32_t i = nd - 1; i >= 0; i--) {
        memcpy(p + (size_t)i * 8, &acc, 8);
        int64_t s = t->sizes[i] > 0 ? t->sizes[i] : 1;
        acc = acc > INT64_MAX / s ? INT64_MAX : acc * s;
      }
    }
  }
  ts->arena_len += need;
}

static void put_value(enc *e, const etr_value *v, unsigned depth);

/* Encodes up to n values of vals; returns how many were kept. A NULL vals with n > 0 keeps
 * none, counted as a cut like any other list that lost items. */
static uint32_t put_values(enc *e, const etr_value *vals, uint32_t n, unsigned depth) {
  uint32_t kept = n > ETR__LIST_MAX ? ETR__LIST_MAX : n;
  if (!vals) kept = 0;
  for (uint32_t i = 0; i < kept; i++) {
    if (room(e) == 0) { /* over the per-op budget: cut here */
      kept = i;
      break;
    }
    put_value(e, &vals[i], depth);
  }
  if (kept < n) etr__bump(&e->ts->lists_cut, 1);
  return kept;
}

static void put_value(enc *e, const etr_value *v, unsigned depth) {
  switch (v->kind) {
    case ETR_VALUE_BOOL:
      put_u8(e, ETR__V_BOOL);
      put_u8(e, v->u.b ? 1 : 0);
      return;
    case ETR_VALUE_INT:
      put_u8(e, ETR__V_INT);
      put_u64(e, (uint64_t)v->u.i);
      return;
    case ETR_VALUE_DOUBLE:
      put_u8(e, ETR__V_DOUBLE);
      put(e, &v->u.d, 8);
      return;
    case ETR_VALUE_STRING:
    case ETR_VALUE_DEVICE:
    case ETR_VALUE_OBJECT: {
      uint8_t tag = v->kind == ETR_VALUE_STRING   ? ETR__V_STRING
                    : v->kind == ETR_VALUE_DEVICE ? ETR__V_DEVICE
                                                  : ETR__V_OBJECT;
      put_u8(e, tag);
      size_t max = ETR__STRING_MAX < room(e) ? ETR__STRING_MAX : room(e);
      put_str(e, v->u.str, v->kind == ETR_VALUE_OBJECT ? 0 : v->count, max);
      return;
    }
    case ETR_VALUE_TENSOR:
      put_tensor(e, v->u.tensor);
      return;
    case ETR_VALUE_LIST:
    case ETR_VALUE_TUPLE: {
      if (depth >= ETR__DEPTH_MAX) {
        put_u8(e, ETR__V_CUT);
        etr__bump(&e->ts->nesting_cut, 1);
        return;
      }
      put_u8(e, v->kind == ETR_VALUE_LIST ? ETR__V_LIST : ETR__V_TUPLE);
      size_t count_at = e->ts->arena_len;
      put_u32(e, 0);
      uint32_t kept = put_values(e, v->u.items, v->count, depth + 1);
      if (!e->failed) memcpy(e->ts->arena + count_at, &kept, 4);
      return;
    }
    case ETR_VALUE_NONE:
    default:
      put_u8(e, ETR__V_NONE);
      return;
  }
}

size_t etr__encode_values(etr__tstate *ts, const etr_value *vals, uint32_t n, uint32_t *kept) {
  size_t start = ts->arena_len;
  enc e = {ts, start + ETR__NODE_BUDGET, false};
  *kept = put_values(&e, vals, n, 0);
  if (e.failed) { /* out of memory: keep nothing rather than half a value */
    ts->arena_len = start;
    *kept = 0;
  }
  return ts->arena_len - start;
}

size_t etr__encode_str(etr__tstate *ts, const char *s, size_t len, size_t max) {
  size_t n = cut_len(ts, s, len, max);
  if (n == 0 || !etr__arena_reserve(ts, n)) return 0;
  memcpy(ts->arena + ts->arena_len, s, n);
  ts->arena_len += n;
  return n;
}

size_t etr__encode_collective(etr__tstate *ts, const etr_collective_info *c) {
  size_t start = ts->arena_len;
  enc e = {ts, start + ETR__NODE_BUDGET, false};
  put_str(&e, c->name, 0, ETR__STRING_MAX);
  put_str(&e, c->dtype, 0, ETR__STRING_MAX);
  put_u64(&e, c->in_msg_nelems);
  put_u64(&e, c->out_msg_nelems);
  uint32_t ni =
      c->in_split_sizes ? (c->n_in_splits > ETR__LIST_MAX ? ETR__LIST_MAX : c->n_in_splits) : 0;
  uint32_t no =
      c->out_split_sizes ? (c->n_out_splits > ETR__LIST_MAX ? ETR__LIST_MAX : c->n_out_splits) : 0;
  if (ni < c->n_in_splits || no < c->n_out_splits) etr__bump(&ts->lists_cut, 1);
  put_u32(&e, ni);
  put(&e, c->in_split_sizes, (size_t)ni * 8);
  put_u32(&e, no);
  put(&e, c->out_split_sizes, (size_t)no * 8);
  put_u64(&e, (uint64_t)c->global_rank_start);
  put_u64(&e, (uint64_t)c->global_rank_stride);
  put_str(&e, c->pg_name, 0, ETR__STRING_MAX);
  put_str(&e, c->pg_desc, 0, ETR__STRING_MAX);
  put_u64(&e, c->pg_size);
  put_u8(&e, c->is_async ? 1 : 0);
  if (e.failed) {
    ts->arena_len = start;
    return 0;
  }
  return ts->arena_len - start;
}
