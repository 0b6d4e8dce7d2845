/* Encoding on the recording thread: raw bytes and resolved ids, no formatting, and the
 * thread's tables of strings and tensors that compact events name by slot (the format is in
 * trace_internal.h and docs/FORMAT.md). Layout of a value per tag (all fields native-endian,
 * unaligned, copied with memcpy):
 *   NONE, CUT                    tag
 *   BOOL                         tag u8
 *   INT, DOUBLE                  tag 8 bytes
 *   STRING, DEVICE, OBJECT       tag u32-len bytes
 *   TENSOR  tag u8-defined u8-ndim u8-dtype-len u8-device-len
 *           u64-id u64-storage-id i64-offset i64-numel i64-itemsize dtype device
 *           i64-sizes[ndim] i64-strides[ndim]
 *   LIST, TUPLE                  tag u32-count values...
 *   TREF (compact events only)   tag u8-slot: the tensor of the thread's table slot
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "observer/internal.h"
#include "observer/encode_hit.h"

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

bool etr__arena_grow(etr__tstate *ts, size_t n) {
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
  size_t limit;    /* arena length beyond which lists and strings are cut */
  size_t expanded; /* bytes tensor references stand for beyond their own two */
  etr__frame *pin; /* the open op that holds the tensor slots it names; NULL for outputs */
  bool failed;     /* out of memory: the rest is cut */
} enc;

/* The budget counts a reference as the tensor it stands for: the node the writer makes of
 * the event stays as bounded as if every tensor were written whole. */
static inline size_t room(const enc *e) {
  size_t used = e->ts->arena_len + e->expanded;
  return used >= e->limit ? 0 : e->limit - used;
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
/* A tag byte and n bytes of p, with one reservation (scalars: most values of an op). */
static inline void put_tagged(enc *e, uint8_t tag, const void *p, size_t n) {
  etr__tstate *ts = e->ts;
  if (e->failed) return;
  if (!etr__arena_reserve(ts, 1 + n)) {
    e->failed = true;
    return;
  }
  uint8_t *d = ts->arena + ts->arena_len;
  d[0] = tag;
  if (n) memcpy(d + 1, p, n);
  ts->arena_len += 1 + n;
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

/* Bytes of a tensor's whole encoding (V_TENSOR) with names of dn and vn bytes. */
static inline size_t tensor_size(size_t dn, size_t vn, int32_t nd) {
  return 5 + 5 * sizeof(uint64_t) + dn + vn + (size_t)nd * 16;
}

/* Writes the tensor whole (V_TENSOR) at p, with its ids f[0] and f[1] already resolved and
 * its names' lengths dn and vn (dev: its device, "" for none); strides NULL: contiguous. */
static void write_tensor(uint8_t *p, const etr_tensor *t, bool defined, int32_t nd,
                         const uint64_t f[5], const char *dev, size_t dn, size_t vn,
                         const int64_t *strides) {
  p[0] = ETR__V_TENSOR;
  p[1] = defined;
  p[2] = (uint8_t)nd;
  p[3] = (uint8_t)dn;
  p[4] = (uint8_t)vn;
  p += 5;
  memcpy(p, f, 5 * sizeof f[0]);
  p += 5 * sizeof f[0];
  if (!defined) return;
  memcpy(p, t->dtype, dn);
  p += dn;
  memcpy(p, dev, vn);
  p += vn;
  if (nd) memcpy(p, t->sizes, (size_t)nd * 8); /* (sizes may be NULL for a scalar) */
  p += (size_t)nd * 8;
  if (strides) {
    if (nd) memcpy(p, strides, (size_t)nd * 8);
  } else { /* contiguous; a product beyond INT64_MAX stays at INT64_MAX */
    int64_t acc = 1;
    for (int32_t i = nd - 1; i >= 0; i--) {
      memcpy(p + (size_t)i * 8, &acc, 8);
      int64_t s = t->sizes[i] > 0 ? t->sizes[i] : 1;
      acc = acc > INT64_MAX / s ? INT64_MAX : acc * s;
    }
  }
}

/* The tensor whole (V_TENSOR) at the arena's end, with its ids f[0] and f[1] already
 * resolved. */
static void put_tensor_whole(enc *e, const etr_tensor *t, bool defined, int32_t nd,
                             const uint64_t f[5]) {
  etr__tstate *ts = e->ts;
  size_t dn = 0, vn = 0;
  const char *dev = defined && t->device ? t->device : "";
  if (defined) {
    dn = cut_len(ts, t->dtype, 0, ETR__SHORT_MAX);
    vn = cut_len(ts, dev, 0, ETR__SHORT_MAX);
  }
  /* One reservation for the whole tensor, then plain copies. */
  size_t need = tensor_size(dn, vn, nd);
  if (e->failed || !etr__arena_reserve(ts, need)) {
    e->failed = true;
    return;
  }
  write_tensor(ts->arena + ts->arena_len, t, defined, nd, f, dev, dn, vn,
               defined ? t->strides : NULL);
  ts->arena_len += need;
}

/* Length of s if it is at most max bytes long, else max + 1. */
static inline size_t short_len(const char *s, size_t max) {
  size_t n = 0;
  while (n <= max && s[n]) n++;
  return n;
}

/* The contiguous strides of sizes[0..nd) into out (a product beyond INT64_MAX stays there). */
static void contiguous_strides(const int64_t *sizes, int32_t nd, int64_t *out) {
  int64_t acc = 1;
  for (int32_t i = nd - 1; i >= 0; i--) {
    out[i] = acc;
    int64_t s = sizes[i] > 0 ? sizes[i] : 1;
    acc = acc > INT64_MAX / s ? INT64_MAX : acc * s;
  }
}

/* Whether slot c holds exactly what put_tensor_whole would write for t (defined, nd
 * dimensions with sizes, ids id and sid). */
static inline bool tensor_same(const etr__cten *c, const etr_tensor *t, uint32_t nd, uint64_t id,
                               uint64_t sid, const char *dev, const int64_t *strides) {
  if (!c->valid || c->id != id || c->sid != sid || c->nd != nd || c->off != t->storage_offset ||
      c->numel != t->numel || c->itemsize != t->itemsize)
    return false;
  for (uint32_t i = 0; i < nd; i++)
    if (c->sizes[i] != t->sizes[i] || c->strides[i] != strides[i]) return false;
  return etr__slot_str(t->dtype, c->dtp, c->dtype, c->dn) &&
         etr__slot_str(dev, c->dvp, c->dev, c->vn);
}

/* Notes in slot c the identities of t and the shard numbers its ids were just read at (ie
 * and se: the thread's id caches' entries, NULL when they do not hold them), so that the
 * next hit needs no lookup. */
static void note_identity(etr__cten *c, const etr_tensor *t, const etr__idcache_entry *ie,
                          const etr__idcache_entry *se) {
  etr__cten_unhittable(c);
  if (!ie || ie->id != c->id || (t->storage && (!se || se->id != c->sid))) return;
  c->impl = t->impl;
  c->storage = t->storage;
  c->iseq_p = ie->shard_seq;
  c->iseq = ie->seq;
  if (se) {
    c->sseq_p = se->shard_seq;
    c->sseq = se->seq;
  }
}

/* The slot's reference at the arena's end. */
static inline void put_tref(enc *e, etr__cten *c, uint32_t k) {
  etr__tstate *ts = e->ts;
  if (!etr__arena_reserve(ts, 2)) {
    e->failed = true;
    return;
  }
  /* (p, not ts->arena[ts->arena_len++]: a byte store may alias arena_len, then reloaded) */
  etr__tref_at(ts, ts->arena + ts->arena_len, k, e->pin);
  ts->arena_len += 2;
  e->expanded += c->expand;
}

/* Room in the thread's stream for a definition (type DEF_STR or DEF_TEN) of slot k with n
 * bytes of payload, its header written: the payload goes at the pointer returned, then
 * etr__event_commit(ts, *size, false). NULL when it cannot be written. */
static inline ETR__ALWAYS_INLINE uint8_t *define_room(etr__tstate *ts, uint8_t type, uint32_t k,
                                                      size_t n, size_t *size) {
  size_t body = etr__uv_len(k) + n;
  *size = 2 + etr__uv_len(body) + body;
  uint8_t *p = etr__event_room(ts, *size, false);
  if (!p) return NULL;
  *p++ = type;
  *p++ = 0;
  p = etr__put_uv(p, body);
  return etr__put_uv(p, k);
}

/* A definition of slot k holding v[0..n); false when it could not be written (the value is
 * then written whole where it is used). */
static bool define_slot(etr__tstate *ts, uint8_t type, uint32_t k, const void *v, size_t n) {
  size_t size;
  uint8_t *p = define_room(ts, type, k, n, &size);
  if (!p) return false;
  memcpy(p, v, n);
  etr__event_commit(ts, size, false);
  return true;
}

/* The thread's tensor table, every slot unused: all zeros, which etr__tensor_find never
 * reads past the identity, so that the pages of slots never used are never touched (70 KiB
 * a thread: 2 000 threads alive that had recorded a tensor each took 219 MB, 78 MB with
 * no tensor). */
static bool cten_alloc(etr__tstate *ts) {
  etr__cten *t = calloc(ETR__CTEN_SLOTS, sizeof *t);
  if (!t) return false;
  ts->cten = t;
  return true;
}

/* Everything but a tensor found by etr__tensor_hit: its ids are looked up and compared with its
 * two slots (a shard that changed since, for another object, is only a slower hit); a new
 * tensor takes the least recently used of its slots that no open op holds (defined first);
 * else, and when it is unusual (many dimensions, long names) or the op already holds as
 * many slots as it may, it is whole. */
static __attribute__((noinline)) void put_tensor_rest(enc *e, const etr_tensor *t) {
  etr__tstate *ts = e->ts;
  etr_trace *tr = ts->trace;
  bool defined = t && t->dtype != NULL;
  int32_t nd = defined ? t->ndim : 0;
  if (nd < 0 || (nd > 0 && !t->sizes)) nd = 0;
  if (nd > ETR_MAX_NDIM) {
    nd = ETR_MAX_NDIM;
    etr__bump(&ts->lists_cut, 1);
  }
  uint64_t f[5] = {0, 0, 0, 0, 0};
  const etr__idcache_entry *ie = NULL, *se = NULL; /* where the ids were read */
  if (t) f[0] = etr__idmap_get_cached(tr->tensors, t->impl, id_source, ts, &ts->tensor_ids, &ie);
  if (defined) {
    f[1] = t->storage ? etr__idmap_get_cached(tr->storages, t->storage, id_source, ts,
                                              &ts->storage_ids, &se)
                      : 0;
    f[2] = (uint64_t)t->storage_offset;
    f[3] = (uint64_t)t->numel;
    f[4] = (uint64_t)t->itemsize;
  }
  if (!defined || !f[0] || (unsigned)nd > ETR__CTEN_NDIM || e->failed ||
      (e->pin && e->pin->n_pins >= ETR__FRAME_PINS) || (!ts->cten && !cten_alloc(ts))) {
    put_tensor_whole(e, t, defined, nd, f);
    return;
  }
  const char *dev = t->device ? t->device : "";
  int64_t cstrides[ETR__CTEN_NDIM];
  const int64_t *strides = t->strides;
  if (!strides) {
    contiguous_strides(t->sizes, nd, cstrides);
    strides = cstrides;
  }
  uint32_t k, k1;
  etr__slot_pair(t->impl, &k, &k1);
  etr__cten *c = &ts->cten[k], *c1 = &ts->cten[k1];
  uint32_t hk = tensor_same(c, t, (uint32_t)nd, f[0], f[1], dev, strides)    ? k
                : tensor_same(c1, t, (uint32_t)nd, f[0], f[1], dev, strides) ? k1
                                                                             : UINT32_MAX;
  if (hk != UINT32_MAX) {
    if (t->strides)
      note_identity(&ts->cten[hk], t, ie, se); /* (etr__tensor_hit reads its strides) */
    put_tref(e, &ts->cten[hk], hk);
    return;
  }
  if (c->pins || (!c1->pins && (int32_t)(c1->used - c->used) < 0)) {
    k = k1;
    c = c1;
  }
  size_t dn = short_len(t->dtype, ETR__CTEN_NAME), vn = short_len(dev, ETR__CTEN_NAME);
  if (c->pins || dn > ETR__CTEN_NAME || vn > ETR__CTEN_NAME || e->failed) {
    put_tensor_whole(e, t, defined, nd, f);
    return;
  }
  c->valid = 0;
  etr__cten_unhittable(c);
  /* The definition (trace_internal.h): the tensor whole, written straight into the stream. */
  size_t size;
  uint8_t *p = define_room(ts, ETR__CEV_DEF_TEN, k, tensor_size(dn, vn, nd), &size);
  if (!p) { /* (stays whole) */
    put_tensor_whole(e, t, defined, nd, f);
    return;
  }
  write_tensor(p, t, true, nd, f, dev, dn, vn, strides);
  etr__event_commit(ts, size, false);
  c->valid = 1;
  c->id = f[0];
  c->sid = f[1];
  c->off = (int64_t)f[2];
  c->numel = (int64_t)f[3];
  c->itemsize = (int64_t)f[4];
  c->nd = (uint8_t)nd;
  c->dn = (uint8_t)dn;
  c->vn = (uint8_t)vn;
  memcpy(c->dtype, t->dtype, dn + 1);
  memcpy(c->dev, dev, vn + 1);
  c->expand = 45u + dn + vn + (uint32_t)nd * 16u - 2u;
  c->dtp = etr__str_fixed(t->dtype) ? t->dtype : NULL;
  c->dvp = etr__str_fixed(dev) ? dev : NULL;
  if (nd) {
    memcpy(c->sizes, t->sizes, (size_t)nd * 8);
    memcpy(c->strides, strides, (size_t)nd * 8);
  }
  if (t->strides) note_identity(c, t, ie, se);
  put_tref(e, c, k);
}

/* A tensor: by reference when the thread's table has it (the common case, kept short: no
 * id lookup, see etr__tensor_hit). */
static inline void put_tensor(enc *e, const etr_tensor *t) {
  etr__tstate *ts = e->ts;
  if (ts->cten && (!e->pin || e->pin->n_pins < ETR__FRAME_PINS)) {
    int k = etr__tensor_find(ts, t);
    if (k >= 0) {
      put_tref(e, &ts->cten[k], (uint32_t)k);
      return;
    }
  }
  put_tensor_rest(e, t);
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
    /* Each value costs its text in the node beyond its bytes here ("<None>", [] and a type:
     * 256 lists of 4096 Nones were 1 MiB here and a 41 MB node, past what a reader takes) */
    e->expanded += ETR__VALUE_COST;
    if (vals[i].kind == ETR_VALUE_TENSOR)
      put_tensor(e, vals[i].u.tensor);
    else
      put_value(e, &vals[i], depth);
  }
  if (kept < n) etr__bump(&e->ts->lists_cut, 1);
  return kept;
}

static void put_value(enc *e, const etr_value *v, unsigned depth) {
  switch (v->kind) {
    case ETR_VALUE_BOOL: {
      uint8_t b = v->u.b ? 1 : 0;
      put_tagged(e, ETR__V_BOOL, &b, 1);
      return;
    }
    case ETR_VALUE_INT:
      put_tagged(e, ETR__V_INT, &v->u.i, 8);
      return;
    case ETR_VALUE_DOUBLE:
      put_tagged(e, ETR__V_DOUBLE, &v->u.d, 8);
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
      /* (the budget counts what the node's text will hold: a list is "[...]" in values and
       * shapes and "GenericList[...]" in types, about 24 bytes beyond its 5 here; a cut, "<...>",
       * "[]" and a type. A list that holds itself thousands of times over was 48 MB of text,
       * past the 16 MiB a reader takes, in 5 MB of events) */
      if (depth >= ETR__DEPTH_MAX) {
        put_u8(e, ETR__V_CUT);
        e->expanded += 16;
        etr__bump(&e->ts->nesting_cut, 1);
        return;
      }
      e->expanded += 24;
      put_u8(e, v->kind == ETR_VALUE_LIST ? ETR__V_LIST : ETR__V_TUPLE);
      size_t count_at = e->ts->arena_len;
      put_u32(e, 0);
      uint32_t kept = put_values(e, v->u.items, v->count, depth + 1);
      if (!e->failed) memcpy(e->ts->arena + count_at, &kept, 4);
      return;
    }
    case ETR_VALUE_NONE:
    default:
      put_tagged(e, ETR__V_NONE, NULL, 0);
      return;
  }
}

const _Atomic uint64_t etr__seq_never = 0, etr__seq_always = 0;

bool etr__encode_values_from(etr__tstate *ts, const etr_value *vals, uint32_t n, etr__frame *pin,
                             size_t start, uint32_t done, size_t expanded) {
  enc e = {ts, start + ETR__NODE_BUDGET, expanded, pin, false};
  /* The count before the values: one byte when it is below 128, else five (a padded
   * varint), so that it can be written once the values kept are known. */
  size_t cw = n < 128 ? 1 : 5;
  uint32_t kept = 0;
  if (done == ETR__HITS_NONE) {
    if (!etr__arena_reserve(ts, cw)) return false;
    ts->arena_len += cw;
  } else {
    kept = done; /* (n <= ETR__HITS_MAX: the count is one byte, the references after it) */
    if (vals[kept].kind == ETR_VALUE_TENSOR) put_tensor_rest(&e, vals[kept++].u.tensor);
  }
  kept += put_values(&e, kept ? vals + kept : vals, n - kept, 0);
  if (e.failed) { /* out of memory: keep nothing rather than half a value */
    ts->arena_len = start + cw;
    kept = 0;
  }
  uint8_t *p = ts->arena + start;
  if (cw == 1) {
    p[0] = (uint8_t)kept;
  } else {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(((kept >> (7 * i)) & 0x7f) | 0x80);
    p[4] = (uint8_t)(kept >> 28);
  }
  return true;
}

bool etr__encode_raw(etr__tstate *ts, const void *p, size_t n) {
  if (!etr__arena_reserve(ts, n)) return false;
  if (n) memcpy(ts->arena + ts->arena_len, p, n);
  ts->arena_len += n;
  return true;
}

bool etr__encode_uv(etr__tstate *ts, uint64_t v) {
  if (!etr__arena_reserve(ts, 10)) return false;
  ts->arena_len = (size_t)(etr__put_uv(ts->arena + ts->arena_len, v) - ts->arena);
  return true;
}

bool etr__encode_inline_str(etr__tstate *ts, const char *s, size_t max) {
  size_t n = cut_len(ts, s, 0, max);
  return etr__encode_uv(ts, n) && etr__encode_raw(ts, s, n);
}

/* Whether slot c holds s: the same pointer, and the same bytes unless they cannot change
 * (etr__str_fixed; runtimes pass the same few name strings again and again, but a buffer may be
 * reused for another name). */
static inline bool sref_hit(const etr__cstr *c, const char *s) {
  return c->ptr == s && (c->fixed || strncmp(s, c->copy, (size_t)c->len + 1) == 0);
}

/* A string not in its slots: it takes the least recently used one that no open op holds
 * (defined first), else it is written in the op. */
static __attribute__((noinline)) bool sref_new(etr__tstate *ts, const char *s, uint32_t k,
                                               uint32_t k1, int16_t *held) {
  etr__cstr *c = &ts->cstr[k], *c1 = &ts->cstr[k1];
  if (c->pins || (!c1->pins && (int32_t)(c1->used - c->used) < 0)) {
    k = k1;
    c = c1;
  }
  size_t n = cut_len(ts, s, 0, ETR__STRING_MAX);
  if (c->pins || s[n] != '\0') /* held by an open op, or cut: written in the op */
    return etr__encode_uv(ts, 0) && etr__encode_uv(ts, n) && etr__encode_raw(ts, s, n);
  if (n + 1 > c->cap) {
    char *nc = realloc(c->copy, n + 1);
    if (!nc) return etr__encode_uv(ts, 0) && etr__encode_uv(ts, n) && etr__encode_raw(ts, s, n);
    c->copy = nc;
    c->cap = (uint32_t)(n + 1);
  }
  c->ptr = NULL;
  if (!define_slot(ts, ETR__CEV_DEF_STR, k, s, n))
    return etr__encode_uv(ts, 0) && etr__encode_uv(ts, n) && etr__encode_raw(ts, s, n);
  memcpy(c->copy, s, n);
  c->copy[n] = '\0';
  c->len = (uint32_t)n;
  c->ptr = s;
  c->fixed = etr__str_fixed(s);
  return etr__put_sref_slot(ts, k, held);
}

bool etr__encode_sref_any(etr__tstate *ts, const char *s, int16_t *held) {
  *held = -1;
  if (!s || !s[0]) return etr__encode_uv(ts, 0) && etr__encode_uv(ts, 0);
  if (!ts->cstr && !(ts->cstr = calloc(ETR__CSTR_SLOTS, sizeof *ts->cstr)))
    return etr__encode_uv(ts, 0) && etr__encode_inline_str(ts, s, ETR__STRING_MAX);
  uint32_t k, k1;
  etr__slot_pair(s, &k, &k1);
  if (sref_hit(&ts->cstr[k], s)) return etr__put_sref_slot(ts, k, held);
  if (sref_hit(&ts->cstr[k1], s)) return etr__put_sref_slot(ts, k1, held);
  return sref_new(ts, s, k, k1, held);
}

void etr__unpin(etr__tstate *ts, etr__frame *f) {
  if (f->name_slot >= 0) ts->cstr[f->name_slot].pins--;
  if (f->schema_slot >= 0) ts->cstr[f->schema_slot].pins--;
  for (uint8_t i = 0; i < f->n_pins; i++) ts->cten[f->pins[i]].pins--;
  f->name_slot = f->schema_slot = -1;
  f->n_pins = 0;
}

size_t etr__encode_collective(etr__tstate *ts, const etr_collective_info *c) {
  size_t start = ts->arena_len;
  enc e = {ts, start + ETR__NODE_BUDGET, 0, NULL, false};
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
