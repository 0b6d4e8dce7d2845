/* The writer thread's side, values: an op's inputs or outputs (encoded values, as in a
 * full event) to the JSON object {"values", "shapes", "types"[, "strides"]} of its node
 * (docs/FORMAT.md), with the renderings of shapes and types seen before kept (emit.c writes
 * the rest of the node). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "observer/openrefs.h"
#include "observer/trace_internal.h"

/* ---- values ---- */

/* Writes n encoded int64s as a JSON array. */
static void int_array(etr__jw *w, const uint8_t *p, uint32_t n) {
  char *o = etr__jw_begin(w, 2 + (size_t)n * (ETR__I64_MAX_LEN + 1));
  if (!o) return;
  *o++ = '[';
  for (uint32_t i = 0; i < n; i++) {
    if (i) *o++ = ',';
    o = etr__put_i64(o, (int64_t)etr__rd64(p + (size_t)i * 8));
  }
  *o++ = ']';
  etr__jw_end(w, o);
}

/* Characters that would change the structure of a type string ("Tensor(x)",
 * "GenericList[a,b]") when they appear in a dtype or an object kind. Angle brackets only
 * when they do not pair up: PyTorch's complex dtypes are "c10::complex<float>", and
 * readers (ours, PARAM's dtype tables) take a balanced pair as part of the name. */
static bool type_char_ok(unsigned char c, bool angles) {
  return c != '(' && c != ')' && c != '[' && c != ']' && c != ',' &&
         (angles || (c != '<' && c != '>'));
}

/* Whether s[0..n)'s angle brackets pair up (each '>' closes an open '<', none left open). */
static bool angles_pair(const char *s, size_t n) {
  size_t open = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '<') {
      open++;
    } else if (s[i] == '>') {
      if (open == 0) return false;
      open--;
    }
  }
  return open == 0;
}

/* A dtype or object kind as it goes into a type name: escaped as any string, with the
 * characters above as '_'. */
static char *put_type_name(etr__jw *w, char *o, const char *s, size_t n) {
  /* The usual dtype ("float", "c10::Half") needs neither escaping nor '_': one copy. */
  size_t k = 0;
  while (k < n && etr__json_plain[(unsigned char)s[k]] && type_char_ok((unsigned char)s[k], false))
    k++;
  bool angles = k < n && angles_pair(s, n);
  if (angles)
    while (k < n && etr__json_plain[(unsigned char)s[k]] && type_char_ok((unsigned char)s[k], true))
      k++;
  if (k == n) {
    memcpy(o, s, n);
    return o + n;
  }
  bool fixed = false;
  size_t run = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && type_char_ok((unsigned char)s[i], angles)) continue;
    o = etr__put_str_body(o, s + run, i - run, &w->replaced);
    if (i < n) {
      *o++ = '_';
      fixed = true;
    }
    run = i + 1;
  }
  if (fixed) w->fixed++;
  return o;
}

/* An object's kind as written: built-in type names and an empty kind become "Object"
 * (the kind then tells nothing, but the type stays an object's). */
static bool kind_is_reserved(const char *s, size_t n) {
  static const char *const names[] = {"Int",  "Double", "Bool",        "String", "Device",
                                      "None", "Tensor", "GenericList", "Tuple"};
  if (n == 0) return true;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    size_t k = strlen(names[i]);
    if (n >= k && memcmp(s, names[i], k) == 0 &&
        (n == k || !((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z'))))
      return true;
  }
  return false;
}

/* count: whether a change is counted in values_fixed (once per value: with its type). */
static void put_kind(etr__jw *w, const char *s, size_t n, bool count) {
  uint64_t fixed = w->fixed;
  if (kind_is_reserved(s, n)) {
    w->fixed++;
    ETR__JW_LIT(w, "Object");
  } else {
    char *o = etr__jw_begin(w, ETR__ESCAPED_MAX(n));
    if (o) etr__jw_end(w, put_type_name(w, o, s, n));
  }
  if (!count) w->fixed = fixed;
}

/* One walk over the encoded values writes their four renderings at once: w[V] the values,
 * w[S] the shapes, w[T] the types, w[ST] the strides (NULL in schema 1.1.0). Walking the
 * encoding once, not once per rendering, is a quarter of the decoding (the writer's
 * largest cost per node). */
enum { V = 0, S = 1, T = 2, ST = 3 };
typedef etr__jw *const quad[4];
/* What a value's writing needs besides its outputs: the trace (scratch outputs) and the
 * decoder whose tensor slots V_TREF values name. */
typedef struct vx {
  etr_trace *tr;
  etr__cev_dec *dec;
} vx;

#define LIT(w, lit) ETR__JW_LIT((w), lit)
/* The rendering of a value without a shape (scalars, strings, none): "[]" for both shapes
 * and strides. */
static inline void no_shape(quad w) {
  if (w[S]) LIT(w[S], "[]");
  if (w[ST]) LIT(w[ST], "[]");
}

static const uint8_t *tensor(quad w, const uint8_t *p) {
  bool defined = p[1];
  uint32_t nd = p[2], dn = p[3], vn = p[4];
  const uint8_t *f = p + 5;
  const uint8_t *dtype = f + 40;
  const uint8_t *dev = dtype + dn;
  const uint8_t *sizes = dev + vn;
  const uint8_t *strides = sizes + (size_t)nd * 8;
  const uint8_t *end = defined ? strides + (size_t)nd * 8 : f + 40;
  char *o = etr__jw_begin(w[V], 16 + 5 * ETR__I64_MAX_LEN + ETR__ESCAPED_MAX(vn));
  if (o) {
    *o++ = '[';
    o = etr__put_u64(o, etr__rd64(f));
    *o++ = ',';
    o = etr__put_u64(o, etr__rd64(f + 8));
    for (int i = 2; i < 5; i++) { /* offset, numel, itemsize: never negative */
      *o++ = ',';
      int64_t v = (int64_t)etr__rd64(f + i * 8);
      if (v < 0) {
        v = 0;
        w[V]->fixed++;
      }
      o = etr__put_i64(o, v);
    }
    *o++ = ',';
    o = etr__put_str(o, (const char *)dev, defined ? vn : 0, &w[V]->replaced);
    *o++ = ']';
    etr__jw_end(w[V], o);
  }
  if (w[S]) int_array(w[S], sizes, defined ? nd : 0);
  if (w[ST]) int_array(w[ST], strides, defined ? nd : 0);
  if (!w[T]) {
  } else if (defined) {
    o = etr__jw_begin(w[T], 8 + ETR__ESCAPED_MAX(dn));
    if (o) {
      o = ETR__PUT_LIT(o, "Tensor(");
      o = put_type_name(w[T], o, (const char *)dtype, dn);
      *o++ = ')';
      etr__jw_end(w[T], o);
    }
  } else {
    LIT(w[T], "Tensor(nullptr (uninitialized))");
  }
  return end;
}

/* The writer's scratch outputs for the shapes, types and strides of one values object. */
static etr__jw *scratch(etr_trace *tr, int i) {
  etr__jw *w = &tr->scratch[i];
  if (!w->buf && etr__jw_init(w, -1, 0) != 0) return NULL;
  w->len = 0;
  return w;
}

#define FRAG_SLACK 32

/* Renders the V_TENSOR value t of a slot into its texts f; false when memory is short. */
static bool render_slot(etr_trace *tr, etr__tfrag *f, const uint8_t *t) {
  uint32_t nd = t[2], dn = t[3], vn = t[4];
  /* the most tensor() writes into each (then it cannot run out of room half-way) */
  const size_t max[4] = {16 + 5 * ETR__I64_MAX_LEN + ETR__ESCAPED_MAX(vn),
                         2 + (size_t)nd * (ETR__I64_MAX_LEN + 1), 32 + ETR__ESCAPED_MAX(dn),
                         2 + (size_t)nd * (ETR__I64_MAX_LEN + 1)};
  etr__jw *s[4];
  for (int k = 0; k < 4; k++) {
    s[k] = scratch(tr, 4 + k);
    if (!s[k] || !etr__jw_reserve(s[k], max[k])) return false;
    s[k]->fixed = s[k]->replaced = 0;
  }
  const quad q = {s[0], s[1], s[2], s[3]};
  tensor(q, t);
  /* (FRAG_SLACK more: put_frag reads whole 16-byte blocks) */
  size_t need = s[0]->len + s[1]->len + s[2]->len + s[3]->len + FRAG_SLACK;
  if (need > f->cap) {
    char *nb = realloc(f->buf, need);
    if (!nb) return false;
    f->buf = nb;
    f->cap = (uint32_t)need;
  }
  size_t at = 0;
  f->counted = false;
  for (int k = 0; k < 4; k++) {
    memcpy(f->buf + at, s[k]->buf, s[k]->len);
    at += s[k]->len;
    f->len[k] = (uint32_t)s[k]->len;
    f->fixed[k] = (uint32_t)s[k]->fixed;
    f->replaced[k] = (uint32_t)s[k]->replaced;
    f->counted |= s[k]->fixed || s[k]->replaced;
    s[k]->fixed = s[k]->replaced = 0;
  }
  memset(f->buf + at, 0, FRAG_SLACK); /* (copied past a text's end, never written out) */
  f->ok = true;
  return true;
}

/* n bytes of a slot's texts to o, which has FRAG_SLACK bytes of room after them (the texts
 * have as many after them in the slot): the usual short text in two fixed-size copies, no
 * call. */
static inline char *put_frag(char *o, const char *s, size_t n) {
  if (n <= FRAG_SLACK) {
    memcpy(o, s, 16);
    memcpy(o + 16, s + 16, 16);
  } else {
    memcpy(o, s, n);
  }
  return o + n;
}

static inline void copy_frag(etr__jw *w, const char *s, size_t n) {
  char *o = etr__jw_begin(w, n + FRAG_SLACK);
  if (o) etr__jw_end(w, put_frag(o, s, n));
}

/* Text k (V, S, T or ST) of a slot's texts. */
static inline const char *frag_part(const etr__tfrag *f, int k) {
  const char *s = f->buf;
  for (int i = 0; i < k; i++) s += f->len[i];
  return s;
}

/* The texts of the slot that tensor reference p names, made now when the slot has none; the
 * slot's tensor in *t. NULL when there is no such slot (*t NULL) or memory is short. */
static inline etr__tfrag *slot_texts(etr_trace *tr, etr__cev_dec *dec, const uint8_t *p,
                                     const uint8_t **t) {
  etr__tfrag *f = NULL;
  *t = dec ? etr__cev_slot(dec, p[1], NULL, &f) : NULL;
  return *t && (f->ok || render_slot(tr, f, *t)) ? f : NULL;
}

/* What making f's texts counted (values_fixed, utf8_replaced), to the outputs that get them:
 * counted again for each value written, as writing the tensor itself would. */
static inline void add_counts(quad w, const etr__tfrag *f) {
  if (!f->counted) return;
  for (int k = 0; k < 4; k++)
    if (w[k]) {
      w[k]->fixed += f->fixed[k];
      w[k]->replaced += f->replaced[k];
    }
}

/* A tensor reference (V_TREF): the texts of its slot, rendered once per definition of the
 * slot, then copied (a slot holds one tensor with its ids: its texts never change). */
static const uint8_t *tensor_ref(quad w, const uint8_t *p, const vx *x) {
  const uint8_t *t;
  const etr__tfrag *f = slot_texts(x->tr, x->dec, p, &t);
  if (f) {
    const char *b = f->buf;
    for (int k = 0; k < 4; b += f->len[k++])
      if (w[k]) copy_frag(w[k], b, f->len[k]);
    add_counts(w, f);
  } else if (t) { /* (memory short for the texts: the tensor itself) */
    tensor(w, t);
  } else { /* (the decoder and etr convert's checks let none through) */
    no_shape(w);
    if (w[T]) ETR__JW_LIT(w[T], "None");
    ETR__JW_LIT(w[V], "\"<None>\"");
  }
  return p + 2;
}

static const uint8_t *value(quad w, const uint8_t *p, const vx *x) {
  uint8_t tag = p[0];
  switch (tag) {
    case ETR__V_BOOL:
      no_shape(w);
      if (w[T]) LIT(w[T], "Bool");
      if (p[1])
        LIT(w[V], "true");
      else
        LIT(w[V], "false");
      return p + 2;
    case ETR__V_INT:
    case ETR__V_DOUBLE:
      no_shape(w);
      if (tag == ETR__V_INT) {
        if (w[T]) LIT(w[T], "Int");
        etr__jw_i64(w[V], (int64_t)etr__rd64(p + 1));
      } else {
        if (w[T]) LIT(w[T], "Double");
        double d;
        memcpy(&d, p + 1, 8);
        etr__jw_double(w[V], d);
      }
      return p + 9;
    case ETR__V_STRING:
    case ETR__V_DEVICE:
    case ETR__V_OBJECT: {
      uint32_t n = etr__rd32(p + 1);
      const char *s = (const char *)p + 5;
      no_shape(w);
      if (tag == ETR__V_STRING) {
        if (w[T]) LIT(w[T], "String");
        etr__jw_str(w[V], s, n);
      } else if (tag == ETR__V_DEVICE) {
        if (w[T]) LIT(w[T], "Device");
        etr__jw_str(w[V], s, n);
      } else { /* PyTorch writes value "<Object>" with type "Object" */
        if (w[T]) put_kind(w[T], s, n, true);
        LIT(w[V], "\"<");
        put_kind(w[V], s, n, false);
        LIT(w[V], ">\"");
      }
      return p + 5 + n;
    }
    case ETR__V_TENSOR:
      return tensor(w, p);
    case ETR__V_TREF:
      return tensor_ref(w, p, x);
    case ETR__V_LIST:
    case ETR__V_TUPLE: {
      uint32_t n = etr__rd32(p + 1);
      const uint8_t *q = p + 5;
      if (!w[T])
        ;
      else if (tag == ETR__V_LIST)
        LIT(w[T], "GenericList[");
      else
        LIT(w[T], "Tuple[");
      etr__jw_char(w[V], '[');
      if (w[S]) etr__jw_char(w[S], '[');
      if (w[ST]) etr__jw_char(w[ST], '[');
      for (uint32_t i = 0; i < n; i++) {
        if (i)
          for (int k = 0; k < 4; k++)
            if (w[k]) etr__jw_char(w[k], ',');
        q = value(w, q, x);
      }
      for (int k = 0; k < 4; k++)
        if (w[k]) etr__jw_char(w[k], ']');
      return q;
    }
    case ETR__V_CUT:
      no_shape(w);
      if (w[T]) LIT(w[T], "<...>");
      LIT(w[V], "\"<...>\"");
      return p + 1;
    case ETR__V_NONE:
    default:
      no_shape(w);
      if (w[T]) LIT(w[T], "None");
      LIT(w[V], "\"<None>\"");
      return p + 1;
  }
}
#undef LIT

/* ---- the shapes, types and strides of ops seen before ----
 *
 * A training loop runs the same ops on tensors of the same shapes again and again: their
 * shapes, types and strides text is the same each time while their ids change. The writer
 * keeps the text of recent values objects, keyed by the bytes it depends on (tags, list
 * lengths, object kinds, dtypes, sizes and strides), and writes only the values anew. */

#define MEMO_SLOTS 256u
#define MEMO_MAX (16u << 10) /* a larger values object is not kept */

struct etr__shape_memo {
  uint64_t hash;
  uint32_t key_len, sh_len, ty_len, st_len;
  uint64_t fixed, replaced; /* what writing the text counted */
  char *buf;                /* key, then the three texts */
  size_t cap;
};

/* The bytes of one encoded value that its shapes, types and strides depend on, copied to *o
 * (room for them reserved: they are fewer than the value's encoded bytes). A tensor
 * reference sets *refs instead: its texts are copies already, not worth a memo. */
static const uint8_t *shape_key(const uint8_t *p, char **o, bool *refs) {
  switch (p[0]) {
    case ETR__V_TREF:
      *refs = true;
      return p + 2;
    case ETR__V_BOOL:
      *(*o)++ = (char)p[0];
      return p + 2;
    case ETR__V_INT:
    case ETR__V_DOUBLE:
      *(*o)++ = (char)p[0];
      return p + 9;
    case ETR__V_STRING:
    case ETR__V_DEVICE:
      *(*o)++ = (char)p[0];
      return p + 5 + etr__rd32(p + 1);
    case ETR__V_OBJECT: { /* its kind is its type */
      size_t n = 5 + (size_t)etr__rd32(p + 1);
      memcpy(*o, p, n);
      *o += n;
      return p + n;
    }
    case ETR__V_TENSOR: {
      bool defined = p[1];
      uint32_t nd = p[2], dn = p[3], vn = p[4];
      const uint8_t *dtype = p + 45;
      memcpy(*o, p, 5);
      *o += 5;
      if (!defined) return p + 45;
      memcpy(*o, dtype, dn);
      *o += dn;
      memcpy(*o, dtype + dn + vn, (size_t)nd * 16); /* sizes, strides */
      *o += (size_t)nd * 16;
      return dtype + dn + vn + (size_t)nd * 16;
    }
    case ETR__V_LIST:
    case ETR__V_TUPLE: {
      uint32_t n = etr__rd32(p + 1);
      memcpy(*o, p, 5);
      *o += 5;
      const uint8_t *q = p + 5;
      for (uint32_t i = 0; i < n; i++) q = shape_key(q, o, refs);
      return q;
    }
    default: /* none, a nesting cut (and unknown tags, written as none) */
      *(*o)++ = (char)p[0];
      return p + 1;
  }
}

static uint64_t key_hash(const char *s, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, s + i, 8);
    h = (h ^ v) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  for (; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

/* ---- the usual values object, written directly ----
 *
 * An op's inputs and outputs are mostly tensors the thread's table knows (references) and
 * small scalars. Their four sections are then written straight into the trace's output from
 * the slots' texts, in one reservation: no key, no memo, no scratch outputs. */

#define DIRECT_MAX 64 /* values of an object written this way, at most */

/* The shapes (k = S) or strides (k = ST) of n values: a tensor reference's from its slot's
 * texts, "[]" for a scalar. */
static inline char *put_dims(char *o, const uint8_t *kind, const etr__tfrag *const *fr, uint32_t n,
                             int k) {
  for (uint32_t i = 0; i < n; i++) {
    if (i) *o++ = ',';
    if (kind[i] == ETR__V_TREF)
      o = put_frag(o, frag_part(fr[i], k), fr[i]->len[k]);
    else
      o = ETR__PUT_LIT(o, "[]");
  }
  return o;
}

/* Writes the values object of n values in p[0..len) when each is a tensor reference, an
 * integer, a boolean or none; false (nothing written) when one is not. */
static bool emit_direct(etr_trace *tr, const uint8_t *p, uint32_t n, size_t len, etr__cev_dec *dec,
                        bool strides) {
  if (!dec || n > DIRECT_MAX) return false;
  const etr__tfrag *fr[DIRECT_MAX];
  uint8_t kind[DIRECT_MAX];
  size_t need = 64 + FRAG_SLACK;
  const uint8_t *q = p, *end = p + len;
  for (uint32_t i = 0; i < n; i++) {
    if (q >= end) return false;
    kind[i] = q[0];
    switch (q[0]) {
      case ETR__V_TREF: {
        const uint8_t *t;
        const etr__tfrag *f = end - q >= 2 ? slot_texts(tr, dec, q, &t) : NULL;
        if (!f) return false;
        fr[i] = f;
        need += (size_t)f->len[V] + f->len[S] + f->len[T] + f->len[ST] + 8;
        q += 2;
        break;
      }
      case ETR__V_INT:
        need += ETR__I64_MAX_LEN + 16;
        q += 9;
        break;
      case ETR__V_BOOL:
      case ETR__V_NONE:
        need += 24;
        q += q[0] == ETR__V_BOOL ? 2 : 1;
        break;
      default:
        return false;
    }
  }
  etr__jw *w = &tr->jw;
  char *o = etr__jw_begin(w, need);
  if (!o) return false;
  o = ETR__PUT_LIT(o, "{\"values\": [");
  q = p;
  for (uint32_t i = 0; i < n; i++) {
    if (i) *o++ = ',';
    switch (kind[i]) {
      case ETR__V_TREF:
        o = put_frag(o, fr[i]->buf, fr[i]->len[V]);
        q += 2;
        break;
      case ETR__V_INT:
        o = etr__put_i64(o, (int64_t)etr__rd64(q + 1));
        q += 9;
        break;
      case ETR__V_BOOL:
        o = q[1] ? ETR__PUT_LIT(o, "true") : ETR__PUT_LIT(o, "false");
        q += 2;
        break;
      default:
        o = ETR__PUT_LIT(o, "\"<None>\"");
        q += 1;
        break;
    }
  }
  o = ETR__PUT_LIT(o, "], \"shapes\": [");
  o = put_dims(o, kind, fr, n, S);
  o = ETR__PUT_LIT(o, "], \"types\": [");
  for (uint32_t i = 0; i < n; i++) {
    if (i) *o++ = ',';
    *o++ = '"';
    switch (kind[i]) {
      case ETR__V_TREF:
        o = put_frag(o, frag_part(fr[i], T), fr[i]->len[T]);
        break;
      case ETR__V_INT:
        o = ETR__PUT_LIT(o, "Int");
        break;
      case ETR__V_BOOL:
        o = ETR__PUT_LIT(o, "Bool");
        break;
      default:
        o = ETR__PUT_LIT(o, "None");
        break;
    }
    *o++ = '"';
  }
  if (strides) {
    o = ETR__PUT_LIT(o, "], \"strides\": [");
    o = put_dims(o, kind, fr, n, ST);
  }
  o = ETR__PUT_LIT(o, "]}");
  etr__jw_end(w, o);
  const quad counted = {w, w, w, strides ? w : NULL};
  for (uint32_t i = 0; i < n; i++)
    if (kind[i] == ETR__V_TREF) add_counts(counted, fr[i]);
  return true;
}

/* n values encoded in len bytes at p. */
void etr__emit_values(etr_trace *tr, const uint8_t *p, uint32_t n, size_t len, etr__cev_dec *dec) {
  etr__jw *w = &tr->jw;
  bool strides = tr->opt.schema != ETR_SCHEMA_1_1_0;
  if (emit_direct(tr, p, n, len, dec, strides)) return;
  etr__jw *sh = scratch(tr, 0), *ty = scratch(tr, 1), *key = scratch(tr, 3);
  etr__jw *st = strides ? scratch(tr, 2) : NULL;
  if (!tr->memo) tr->memo = calloc(MEMO_SLOTS, sizeof *tr->memo);
  if (!sh || !ty || !key || (strides && !st) || !tr->memo) {
    w->err = w->err ? w->err : ENOMEM; /* (out of memory: the trace stops, as on a write error) */
    return;
  }
  char *ko = etr__jw_begin(key, sizeof n + len);
  if (!ko) {
    w->err = w->err ? w->err : ENOMEM;
    return;
  }
  memcpy(ko, &n, sizeof n);
  ko += sizeof n;
  const uint8_t *q = p;
  bool refs = false;
  for (uint32_t i = 0; i < n; i++) q = shape_key(q, &ko, &refs);
  etr__jw_end(key, ko);
  /* (with tensor references: no memo) */
  uint64_t h = refs ? 0 : key_hash(key->buf, key->len);
  struct etr__shape_memo *m = refs ? NULL : &tr->memo[h & (MEMO_SLOTS - 1)];
  bool hit = m && m->buf && m->hash == h && m->key_len == key->len &&
             memcmp(m->buf, key->buf, key->len) == 0;
  const vx x = {tr, dec};
  quad qd = {w, hit ? NULL : sh, hit ? NULL : ty, hit ? NULL : st};
  ETR__JW_LIT(w, "{\"values\": [");
  if (!hit) {
    etr__jw_char(sh, '[');
    etr__jw_char(ty, '[');
    if (st) etr__jw_char(st, '[');
  }
  for (uint32_t i = 0; i < n; i++) {
    if (i)
      for (int k = 0; k < 4; k++)
        if (qd[k]) etr__jw_char(qd[k], ',');
    if (!hit) etr__jw_char(ty, '"');
    p = value(qd, p, &x);
    if (!hit) etr__jw_char(ty, '"');
  }
  const char *sh_s, *ty_s, *st_s;
  size_t sh_n, ty_n, st_n;
  if (hit) {
    sh_s = m->buf + m->key_len;
    ty_s = sh_s + m->sh_len;
    st_s = ty_s + m->ty_len;
    sh_n = m->sh_len;
    ty_n = m->ty_len;
    st_n = m->st_len;
    w->fixed += m->fixed;
    w->replaced += m->replaced;
  } else {
    sh_s = sh->buf;
    ty_s = ty->buf;
    st_s = st ? st->buf : "";
    sh_n = sh->len;
    ty_n = ty->len;
    st_n = st ? st->len : 0;
    uint64_t fixed = 0, replaced = 0;
    for (int k = 1; k < 4; k++) { /* what the scratch outputs counted is the trace's */
      if (!qd[k]) continue;
      fixed += qd[k]->fixed;
      replaced += qd[k]->replaced;
      qd[k]->replaced = qd[k]->fixed = 0;
    }
    w->fixed += fixed;
    w->replaced += replaced;
    size_t need = key->len + sh_n + ty_n + st_n;
    if (!m) {
    } else if (need <= MEMO_MAX && need > m->cap) {
      char *nb = realloc(m->buf, need);
      if (nb) { /* (else the slot keeps what it held) */
        m->buf = nb;
        m->cap = need;
      }
    }
    if (m && need <= m->cap) {
      memcpy(m->buf, key->buf, key->len);
      memcpy(m->buf + key->len, sh_s, sh_n);
      memcpy(m->buf + key->len + sh_n, ty_s, ty_n);
      memcpy(m->buf + key->len + sh_n + ty_n, st_s, st_n);
      m->hash = h;
      m->key_len = (uint32_t)key->len;
      m->sh_len = (uint32_t)sh_n;
      m->ty_len = (uint32_t)ty_n;
      m->st_len = (uint32_t)st_n;
      m->fixed = fixed;
      m->replaced = replaced;
    }
  }
  ETR__JW_LIT(w, "], \"shapes\": ");
  etr__jw_raw(w, sh_s, sh_n);
  ETR__JW_LIT(w, "], \"types\": ");
  etr__jw_raw(w, ty_s, ty_n);
  etr__jw_char(w, ']');
  if (strides) {
    ETR__JW_LIT(w, ", \"strides\": ");
    etr__jw_raw(w, st_s, st_n);
    etr__jw_char(w, ']');
  }
  etr__jw_char(w, '}');
}

void etr__emit_free(etr_trace *tr) {
  etr__emit_hold_reset(tr);
  free(tr->pg_held);
  tr->pg_held = NULL;
  tr->pg_cap = 0;
  for (int i = 0; i < 8; i++) etr__jw_free(&tr->scratch[i]);
  if (tr->memo)
    for (unsigned i = 0; i < MEMO_SLOTS; i++) free(tr->memo[i].buf);
  free(tr->memo);
  tr->memo = NULL;
  if (tr->open_refs) etr__openrefs_free(tr->open_refs); /* (emit.c's, for the seal) */
  free(tr->open_refs);
  tr->open_refs = NULL;
}
