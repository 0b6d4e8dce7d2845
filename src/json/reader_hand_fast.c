/* The hand parser of the trace reader (reader_int.h), its shortcuts for a node's values
 * (reader_hand.h): what nodes hold most, in the shapes our writer and PyTorch's json.dump write
 * it, read without the general loop of reader_hand.c (its member stack, a call and a dispatch
 * per value, key strings):
 *  - attr objects {"name": "N", "type": "T", "value": V} (h_attr), and a node's "attrs" array
 *    of them (h_attrs);
 *  - short arrays of numbers, literals and plain strings, and arrays of these, two levels
 *    down (h_flat: tensors, shapes, strides, types, values);
 *  - inputs/outputs objects {"values": A, "shapes": A, "types": A[, "strides": A]} (h_io).
 * Each reads its value when the text has that shape, and otherwise returns H_MISS with
 * nothing done that shows: the NULs that end its strings in place (as h_string does for a
 * node's strings) are written only on success, no warning is given, and what an abandoned
 * value took of the node's arena is freed with the node. The general path then reads the
 * value, with its own warnings and errors.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "etr/common.h"
#include "json/reader_hand.h"

/* The n bytes at p (8 <= n <= 16) are those of the literal lit: two overlapping 8-byte loads
 * and compares with constants, where memcmp would be a call for n = 10 or 11. */
static inline bool h_lit_eq(const unsigned char *p, const char *lit, size_t n) {
  uint64_t x0, x1, y0, y1;
  memcpy(&x0, p, 8);
  memcpy(&x1, p + n - 8, 8);
  memcpy(&y0, lit, 8);
  memcpy(&y1, lit + n - 8, 8);
  return ((x0 ^ y0) | (x1 ^ y1)) == 0;
}
#define H_LIT_EQ(p, lit) h_lit_eq((p), (lit), sizeof(lit) - 1)

#define H_FLAT_MAX 16  /* elements of an array h_flat reads */
#define H_NULS 128     /* closing quotes a shortcut may turn into NULs */
#define H_ATTRS_MAX 40 /* attrs of an array h_attrs reads (3 NULs each) */

/* The closing quotes of the strings a shortcut read, turned into their NULs on success. */
typedef struct h_nuls {
  unsigned char *at[H_NULS];
  size_t n;
} h_nuls;

static inline void h_nuls_write(rd_reader *r, const h_nuls *nuls) {
  for (size_t i = 0; i < nuls->n; i++) *nuls->at[i] = '\0';
  if (nuls->n) { /* the quotes are in text order: the last is the furthest */
    size_t last_off = (size_t)(nuls->at[nuls->n - 1] - r->hb) + 1;
    if (r->h_nul_end < last_off) r->h_nul_end = last_off;
  }
}

static inline rd_jval *h_copy(rd_reader *r, arena *a, const rd_jval *buf, size_t n) {
  rd_jval *items = arena_alloc(a, n * sizeof *items);
  if (!items) {
    etr__rd_set_error(r, ETR_ENOMEM, 0, "out of memory");
    return NULL;
  }
  memcpy(items, buf, n * sizeof *items);
  return items;
}

/* Keys of an attr object, pointed to by the trees h_attr builds (reader_int.h). */
const char etr__rd_key_name[] = "name", etr__rd_key_type[] = "type", etr__rd_key_value[] = "value";

/* An attr object of a node, {"name": "N", "type": "T", "value": V}, written with ", " and ": "
 * as our writer and PyTorch's json.dump write it, N and T plain ASCII, V a plain ASCII
 * string, a number, true, false or null, about half of a node's values being in attrs. *pp at
 * the '{', depth that of the array holding it. H_OK with *v built and the closing quotes of
 * its strings added to nuls; H_MISS when the text is any other shape (or nuls is full); or
 * the value's H_MORE or H_ERR, which the general path would give as well, at the same byte,
 * everything before the value being well formed. */
static ETR_RD_ALWAYS_INLINE int h_attr_at(rd_reader *r, const unsigned char **pp,
                                          const unsigned char *end, arena *a, int depth, rd_jval *v,
                                          h_nuls *nuls) {
  /* every compare below reads at most 12 bytes past a byte before end: in the padding */
  const unsigned char *p = *pp;
  if (depth + 1 >= H_MAX_DEPTH || nuls->n + 3 > H_NULS || !H_LIT_EQ(p, "{\"name\": \""))
    return H_MISS;
  const unsigned char *name = p + 10, *name_end = scan_plain(name);
  if (*name_end != '"' || !H_LIT_EQ(name_end + 1, ", \"type\": \"")) return H_MISS;
  const unsigned char *type = name_end + 12, *type_end = scan_plain(type);
  if (*type_end != '"' || !H_LIT_EQ(type_end + 1, ", \"value\": ")) return H_MISS;
  const unsigned char *q = type_end + 12, *str_end = NULL;
  if (q >= end) return H_MISS;
  rd_jval val;
  int st = H_OK;
  unsigned c = *q;
  if (c == '"') {
    /* only a plain string: another one (escapes, non-ASCII) may warn, and a value read twice
     * (after H_MISS) would warn twice */
    const unsigned char *s = q + 1;
    str_end = scan_plain(s);
    if (*str_end != '"') return H_MISS;
    val.kind = ETR_J_STRING;
    val.v.str.s = (const char *)s;
    val.v.str.len = (size_t)(str_end - s);
    q = str_end + 1;
  } else if ((unsigned)(c - '0') < 10 && q[1] == '}') {
    val.kind = ETR_J_INT; /* "value": 0} */
    val.v.i = (int64_t)(c - '0');
    q++;
  } else if ((unsigned)(c - '0') < 10 || c == '-') {
    const unsigned char *e = h_int18(q, end, &val);
    if (e)
      q = e;
    else
      st = etr__rd_h_number(r, &q, end, &val);
  } else if (c == 't' || c == 'f' || c == 'n') {
    val.kind = c == 'n' ? ETR_J_NULL : ETR_J_BOOL;
    val.v.b = c == 't';
    st = c == 't'   ? etr__rd_h_literal(r, &q, end, "true", 4)
         : c == 'f' ? etr__rd_h_literal(r, &q, end, "false", 5)
                    : etr__rd_h_literal(r, &q, end, "null", 4);
  } else {
    return H_MISS; /* a container: the general path */
  }
  if (st) return st;
  if (*q != '}') q = h_ws(q, end);
  if (q >= end) return H_MORE;
  if (*q != '}') return H_MISS;
  rd_jmember *items = arena_alloc(a, 3 * sizeof *items);
  if (!items) {
    etr__rd_set_error(r, ETR_ENOMEM, 0, "out of memory");
    return H_ERR;
  }
  nuls->at[nuls->n++] = (unsigned char *)(uintptr_t)name_end;
  nuls->at[nuls->n++] = (unsigned char *)(uintptr_t)type_end;
  if (str_end) nuls->at[nuls->n++] = (unsigned char *)(uintptr_t)str_end;
  items[0].key = etr__rd_key_name;
  items[0].key_len = 4;
  items[0].val.kind = ETR_J_STRING;
  items[0].val.v.str.s = (const char *)name;
  items[0].val.v.str.len = (size_t)(name_end - name);
  items[1].key = etr__rd_key_type;
  items[1].key_len = 4;
  items[1].val.kind = ETR_J_STRING;
  items[1].val.v.str.s = (const char *)type;
  items[1].val.v.str.len = (size_t)(type_end - type);
  items[2].key = etr__rd_key_value;
  items[2].key_len = 5;
  items[2].val = val;
  v->kind = ETR_J_OBJECT;
  v->v.obj.items = items;
  v->v.obj.n = 3;
  *pp = q + 1;
  return H_OK;
}

int etr__rd_h_attr(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                   int depth, rd_jval *v) {
  h_nuls nuls;
  nuls.n = 0;
  int st = h_attr_at(r, pp, end, a, depth, v, &nuls);
  if (st == H_OK) h_nuls_write(r, &nuls);
  return st;
}

/* A node's "attrs", [A, A, ...] with each A in h_attr's shape, written with "," or ", "
 * between them: no member stack, no dispatch per attr. *pp at the '['. The value of an attr
 * cut by the end of the window, or any other shape: H_MISS (the general path reads the array
 * again, attr by attr through h_attr, and comes to the same end or error). */
int etr__rd_h_attrs(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                    int depth, rd_jval *v) {
  rd_jval buf[H_ATTRS_MAX];
  h_nuls nuls;
  nuls.n = 0;
  size_t n = 0;
  const unsigned char *p = *pp + 1;
  for (;;) {
    if (n == H_ATTRS_MAX) return H_MISS;
    /* an error in a value is the general path's too (h_attr); a cut one it redoes */
    int st = h_attr_at(r, &p, end, a, depth + 1, &buf[n], &nuls);
    if (st) return st == H_ERR ? H_ERR : H_MISS;
    n++;
    if (*p == ',') {
      p += 1 + (p[1] == ' '); /* p[1] is in the window or its padding */
      continue;
    }
    if (*p != ']') return H_MISS;
    break;
  }
  rd_jval *items = h_copy(r, a, buf, n);
  if (!items) return H_ERR;
  h_nuls_write(r, &nuls);
  v->kind = ETR_J_ARRAY;
  v->v.arr.items = items;
  v->v.arr.n = n;
  *pp = p + 1;
  return H_OK;
}

/* One element of a flat array at p: an integer of up to 18 digits, another number without
 * anything the general path would refuse (then read by it: the same value), true, false,
 * null, or a plain ASCII string (its closing quote added to nuls). The byte after it, or NULL
 * when the text is any other shape, or may go on past end. */
static ETR_RD_ALWAYS_INLINE const unsigned char *h_flat_scalar(rd_reader *r, const unsigned char *p,
                                                               const unsigned char *end, rd_jval *x,
                                                               h_nuls *nuls) {
  unsigned c = *p;
  if ((unsigned)(c - '0') < 10 || c == '-') {
    const unsigned char *q = p + (c == '-'), *d = q;
    uint64_t acc = 0;
    if (*q == '0') {
      q++;
    } else if ((unsigned)(*q - '1') < 9) {
      do acc = acc * 10 + (unsigned)(*q++ - '0');
      while ((unsigned)(*q - '0') < 10); /* the NUL after the window stops it */
    } else {
      return NULL;
    }
    if (ETR_RD_UNLIKELY(*q == '.' || (*q | 0x20) == 'e')) {
      /* a fraction or an exponent (-0.35, 1e-05): checked here, converted as the general
       * path converts it */
      if (*q == '.') {
        if ((unsigned)(*++q - '0') >= 10) return NULL;
        while ((unsigned)(*q - '0') < 10) q++;
      }
      if ((*q | 0x20) == 'e') {
        q += 1 + (q[1] == '+' || q[1] == '-');
        if ((unsigned)(*q - '0') >= 10) return NULL;
        while ((unsigned)(*q - '0') < 10) q++;
      }
      if (q >= end) return NULL;
      const unsigned char *s = p;
      if (etr__rd_h_number(r, &s, end, x) != H_OK || s != q) return NULL; /* cannot happen */
      return q;
    }
    if (q - d > 18 || q >= end) return NULL;
    x->kind = ETR_J_INT;
    x->v.i = c == '-' ? -(int64_t)acc : (int64_t)acc;
    return q;
  }
  if (c == '"') {
    const unsigned char *e = scan_plain(p + 1);
    if (*e != '"' || nuls->n == H_NULS) return NULL;
    x->kind = ETR_J_STRING;
    x->v.str.s = (const char *)p + 1;
    x->v.str.len = (size_t)(e - p - 1);
    nuls->at[nuls->n++] = (unsigned char *)(uintptr_t)e;
    return e + 1;
  }
  /* true, false, null: whole before end (the padding holds the bytes read past it) */
  if (c == 't' && !memcmp(p, "true", 4) && p + 4 < end) {
    x->kind = ETR_J_BOOL;
    x->v.b = true;
    return p + 4;
  }
  if (c == 'f' && !memcmp(p, "false", 5) && p + 5 < end) {
    x->kind = ETR_J_BOOL;
    x->v.b = false;
    return p + 5;
  }
  if (c == 'n' && !memcmp(p, "null", 4) && p + 4 < end) {
    x->kind = ETR_J_NULL;
    return p + 4;
  }
  return NULL;
}

/* After an element at p: 1 and p past a ',' or ", ", 0 at the ']', -1 for anything else (a
 * fraction, whitespace, the end of the window, ...). */
static inline int h_flat_next(const unsigned char **pp) {
  const unsigned char *p = *pp;
  if (*p == ',') {
    *pp = p + 1 + (p[1] == ' ');
    return 1;
  }
  return *p == ']' ? 0 : -1;
}

static int h_flat_deep(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                       rd_jval *v, h_nuls *nuls);

/* An array of h_flat_scalar elements, or when deeper of such arrays too (an inner array of
 * h_flat, inlined there: no call for each). *pp at the '['. */
static ETR_RD_ALWAYS_INLINE int h_flat_leaf(rd_reader *r, const unsigned char **pp,
                                            const unsigned char *end, arena *a, rd_jval *v,
                                            h_nuls *nuls, bool deeper) {
  const unsigned char *p = *pp + 1;
  v->kind = ETR_J_ARRAY;
  if (*p == ']') {
    v->v.arr.items = NULL;
    v->v.arr.n = 0;
    *pp = p + 1;
    return H_OK;
  }
  rd_jval buf[H_FLAT_MAX];
  size_t n = 0;
  for (;;) {
    if (ETR_RD_UNLIKELY(*p == '[') && deeper) {
      /* a third level (the shape of a GenericList[Int,Int] in "shapes": [[[], []]]) */
      int st = h_flat_deep(r, &p, end, a, &buf[n], nuls);
      if (st) return st;
    } else {
      p = h_flat_scalar(r, p, end, &buf[n], nuls);
      if (!p) return H_MISS;
    }
    n++;
    int next = h_flat_next(&p);
    if (next < 0 || (next && n == H_FLAT_MAX)) return H_MISS;
    if (!next) break;
  }
  if (!(v->v.arr.items = h_copy(r, a, buf, n))) return H_ERR;
  v->v.arr.n = n;
  *pp = p + 1;
  return H_OK;
}

/* h_flat_leaf at the third level, out of line: one call for each such array. */
static ETR_RD_NOINLINE int h_flat_deep(rd_reader *r, const unsigned char **pp,
                                       const unsigned char *end, arena *a, rd_jval *v,
                                       h_nuls *nuls) {
  return h_flat_leaf(r, pp, end, a, v, nuls, false);
}

/* Short arrays of a node, [e, ...] with up to H_FLAT_MAX elements, each a h_flat_scalar or
 * (levels > 0) a h_flat_leaf array (levels > 1: which may hold such arrays too), written with ","
 * or ", ": a tensor [id, storage, offset, numel, itemsize, "device"], shapes and strides [[16, 8],
 * [16], []], a list of types, a node's inputs "values". *pp at the '['. */
static inline int h_flat_items(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                               arena *a, rd_jval *v, h_nuls *nuls, int levels) {
  const unsigned char *p = *pp + 1;
  v->kind = ETR_J_ARRAY;
  if (*p == ']') {
    v->v.arr.items = NULL;
    v->v.arr.n = 0;
    *pp = p + 1;
    return H_OK;
  }
  rd_jval buf[H_FLAT_MAX];
  size_t n = 0;
  for (;;) {
    if (*p == '[' && levels > 0) {
      int st = h_flat_leaf(r, &p, end, a, &buf[n], nuls, levels > 1);
      if (st) return st;
    } else {
      p = h_flat_scalar(r, p, end, &buf[n], nuls);
      if (!p) return H_MISS;
    }
    n++;
    int next = h_flat_next(&p);
    if (next < 0 || (next && n == H_FLAT_MAX)) return H_MISS;
    if (!next) break;
  }
  if (!(v->v.arr.items = h_copy(r, a, buf, n))) return H_ERR;
  v->v.arr.n = n;
  *pp = p + 1;
  return H_OK;
}

/* depth: that of the container holding the array at *pp (its own is depth + 1, its inner
 * arrays' depth + 2, theirs depth + 3). */
int etr__rd_h_flat(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                   int depth, rd_jval *v) {
  h_nuls nuls;
  nuls.n = 0;
  int levels = depth + 3 < H_MAX_DEPTH ? 2 : depth + 2 < H_MAX_DEPTH ? 1 : 0;
  int st = h_flat_items(r, pp, end, a, v, &nuls, levels);
  if (st == H_OK) h_nuls_write(r, &nuls);
  return st;
}

/* Keys of an inputs/outputs object, pointed to by the trees h_io builds (reader_int.h). */
const char etr__rd_key_values[] = "values", etr__rd_key_shapes[] = "shapes",
           etr__rd_key_types[] = "types", etr__rd_key_strides[] = "strides";

/* A node's inputs or outputs, {"values": A, "shapes": A, "types": A[, "strides": A]} with
 * each A in h_flat's shape, written with ", " and ": ", most of a node's bytes being there.
 * *pp at the '{', depth that of the object holding it. */
int etr__rd_h_io(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                 int depth, rd_jval *v) {
  static const char *const keys[4] = {etr__rd_key_values, etr__rd_key_shapes, etr__rd_key_types,
                                      etr__rd_key_strides};
  static const size_t key_len[4] = {6, 6, 5, 7};
  /* the object is at depth + 1, its arrays at depth + 2, theirs at depth + 3 and + 4 */
  if (depth + 3 >= H_MAX_DEPTH) return H_MISS;
  int levels = depth + 4 < H_MAX_DEPTH ? 2 : 1;
  const unsigned char *p = *pp;
  rd_jval part[4];
  h_nuls nuls;
  nuls.n = 0;
  size_t n = 0;
  /* every compare reads at most 16 bytes from a byte at or before end: in the padding */
  for (;;) {
    size_t skip;
    bool ok;
    switch (n) {
      case 0:
        ok = H_LIT_EQ(p, "{\"values\": "), skip = 11;
        break;
      case 1:
        ok = H_LIT_EQ(p, ", \"shapes\": "), skip = 12;
        break;
      case 2:
        ok = H_LIT_EQ(p, ", \"types\": "), skip = 11;
        break;
      default:
        ok = *p == ',' && H_LIT_EQ(p, ", \"strides\": "), skip = 13;
        break;
    }
    if (!ok || p[skip] != '[') return H_MISS;
    p += skip;
    int st = h_flat_items(r, &p, end, a, &part[n], &nuls, levels);
    if (st) return st;
    n++;
    if (n >= 3 && *p == '}') break;
    if (n == 4) return H_MISS;
  }
  rd_jmember *items = arena_alloc(a, n * sizeof *items);
  if (!items) {
    etr__rd_set_error(r, ETR_ENOMEM, 0, "out of memory");
    return H_ERR;
  }
  for (size_t i = 0; i < n; i++) {
    items[i].key = keys[i];
    items[i].key_len = key_len[i];
    items[i].val = part[i];
  }
  h_nuls_write(r, &nuls);
  v->kind = ETR_J_OBJECT;
  v->v.obj.items = items;
  v->v.obj.n = n;
  *pp = p + 1;
  return H_OK;
}
