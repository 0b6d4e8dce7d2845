/* The hand parser of the trace reader (reader_int.h), its scan of a node for `etr validate`
 * (rd_options.conform): a node whose text has the shape our writer writes is checked against
 * the per-node rules of docs/FORMAT.md while it is scanned, and handed over without its tree
 * when every rule holds (rd_rnode.conforms). Building a node's tree is most of what reading
 * costs; a node that conforms needs none for validate.
 *
 * The scan accepts only what the general path reads the same way without a warning, and
 * what validate's checks (tools/validate_node.c: key order, attrs, inputs/outputs, each value
 * against its type) find nothing wrong with: the keys of a node, an attr and an
 * inputs/outputs object exactly in docs/FORMAT.md order, written with ": " and ", " (", " or
 * "," between array elements), other whitespace only around a node's keys (PyTorch puts
 * newlines there); strings of plain printable ASCII (no escapes); integers of at most 18
 * digits where an integer is wanted; "strides" present (optional before schema 1.1.1).
 * Anything else (another shape, a rule broken, a value it does not know) gives H_MISS with
 * nothing done, and the general path reads the node, with its warnings, and validate checks
 * its tree. The scan reads the window only up to its end: the NUL padding after it (H_PAD)
 * stops every loop, and whatever stops there is a miss.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "etr/common.h"
#include "json/reader_hand.h"

#define L_MAX_ITEMS 64 /* elements of an inputs/outputs array or of a list value */
#define L_MAX_ATTRS 32 /* attrs of a node (validate compares names among its first 32) */
#define L_MAX_DEPTH 8  /* arrays nested in a value */

typedef const unsigned char uch;

typedef rd_span lspan;

/* The n bytes at p (4 <= n <= 16) are those of lit: two overlapping loads and compares. */
static inline bool l_eq(uch *p, const char *lit, size_t n) {
  if (n <= 8) {
    uint32_t x0, x1, y0, y1;
    memcpy(&x0, p, 4), memcpy(&x1, p + n - 4, 4);
    memcpy(&y0, lit, 4), memcpy(&y1, lit + n - 4, 4);
    return ((x0 ^ y0) | (x1 ^ y1)) == 0;
  }
  uint64_t x0, x1, y0, y1;
  memcpy(&x0, p, 8), memcpy(&x1, p + n - 8, 8);
  memcpy(&y0, lit, 8), memcpy(&y1, lit + n - 8, 8);
  return ((x0 ^ y0) | (x1 ^ y1)) == 0;
}
#define L_EQ(p, lit) l_eq((p), (lit), sizeof(lit) - 1)
/* The first n bytes of s are those of lit (n a constant: compares with immediates, where
 * gcc calls memcmp for some lengths). */
static inline bool l_head(const char *s, const char *lit, size_t n) {
  if (n >= 4) return l_eq((uch *)s, lit, n);
  return s[0] == lit[0] && (n < 2 || s[1] == lit[1]) && (n < 3 || s[2] == lit[2]);
}
#define L_IS(sp, lit) ((sp).n == sizeof(lit) - 1 && l_head((sp).s, (lit), sizeof(lit) - 1))
#define L_STARTS(sp, lit) ((sp).n >= sizeof(lit) - 1 && l_head((sp).s, (lit), sizeof(lit) - 1))

/* The text of each base attr up to its value, {"name": "N", "type": "T", "value": , as our
 * writer writes it, zero-padded to 64 bytes; and its length (45 to 54 bytes). */
#define L_PRE(name, type) "{\"name\": \"" name "\", \"type\": \"" type "\", \"value\": "
static const char l_base_pre[9][64] = {
    L_PRE("rf_id", "uint64"),      L_PRE("fw_parent", "uint64"),
    L_PRE("seq_id", "int64"),      L_PRE("scope", "uint64"),
    L_PRE("tid", "uint64"),        L_PRE("fw_tid", "uint64"),
    L_PRE("op_schema", "string"),  L_PRE("kernel_backend", "string"),
    L_PRE("kernel_file", "string")};
static const uint8_t l_base_pre_len[9] = {
    sizeof L_PRE("rf_id", "uint64") - 1,      sizeof L_PRE("fw_parent", "uint64") - 1,
    sizeof L_PRE("seq_id", "int64") - 1,      sizeof L_PRE("scope", "uint64") - 1,
    sizeof L_PRE("tid", "uint64") - 1,        sizeof L_PRE("fw_tid", "uint64") - 1,
    sizeof L_PRE("op_schema", "string") - 1,  sizeof L_PRE("kernel_backend", "string") - 1,
    sizeof L_PRE("kernel_file", "string") - 1};

/* The n bytes at p (16 <= n <= 64) are those of pre: 16 bytes at a time, the last 16
 * overlapping. Reads at most 64 bytes from p <= end: in the padding (H_PAD). */
static inline bool l_eq_pre(uch *p, const char *pre, size_t n) {
  uint64_t d = 0;
  for (size_t i = 0; i + 16 <= n; i += 16) {
    uint64_t a0, a1, b0, b1;
    memcpy(&a0, p + i, 8), memcpy(&a1, p + i + 8, 8);
    memcpy(&b0, pre + i, 8), memcpy(&b1, pre + i + 8, 8);
    d |= (a0 ^ b0) | (a1 ^ b1);
  }
  uint64_t a0, a1, b0, b1;
  memcpy(&a0, p + n - 16, 8), memcpy(&a1, p + n - 8, 8);
  memcpy(&b0, pre + n - 16, 8), memcpy(&b1, pre + n - 8, 8);
  return (d | (a0 ^ b0) | (a1 ^ b1)) == 0;
}

/* Past an element separator at p ("," or ", "). */
static inline uch *l_sep(uch *p) { return p + 1 + (p[1] == ' '); }

/* An integer the general path reads as ETR_J_INT with the same value: 1 to 18 digits ("0"
 * alone, no leading zero, "-" allowed but not "-0"), not followed by a digit, a fraction or an
 * exponent. The byte after it and *v, else NULL. */
static inline uch *l_int(uch *p, int64_t *v) {
  uch *q = p + (*p == '-'), *d = q;
  uint64_t acc = 0;
  if (*q == '0') {
    if (q != p || (unsigned)(*++q - '0') < 10) return NULL;
  } else if ((unsigned)(*q - '1') < 9) {
    do acc = acc * 10 + (unsigned)(*q++ - '0');
    while ((unsigned)(*q - '0') < 10); /* the NUL after the window stops it */
    if (q - d > 18) return NULL;
  } else {
    return NULL;
  }
  if (*q == '.' || (*q | 0x20) == 'e') return NULL;
  *v = *p == '-' ? -(int64_t)acc : (int64_t)acc;
  return q;
}

/* l_int without its value (negative when *p is '-'): the byte after it, else NULL. Inlined,
 * the value's arithmetic goes unused and is dropped. */
static inline uch *l_is_int(uch *p) {
  int64_t v;
  return l_int(p, &v);
}

/* Any JSON number (RFC 8259): the byte after it, else NULL. */
static inline uch *l_num(uch *p) {
  uch *q = p + (*p == '-');
  if (*q == '0')
    q++;
  else if ((unsigned)(*q - '1') < 9)
    while ((unsigned)(*++q - '0') < 10) continue;
  else
    return NULL;
  if (*q == '.') {
    if ((unsigned)(*++q - '0') >= 10) return NULL;
    while ((unsigned)(*q - '0') < 10) q++;
  }
  if ((*q | 0x20) == 'e') {
    q++;
    if (*q == '+' || *q == '-') q++;
    if ((unsigned)(*q - '0') >= 10) return NULL;
    while ((unsigned)(*q - '0') < 10) q++;
  }
  return q;
}

/* A plain string at p (its '"'): its text in *s, the byte after its closing quote; else NULL. */
static inline uch *l_str(uch *p, lspan *s) {
  if (*p != '"') return NULL;
  uch *e = scan_plain(p + 1);
  if (*e != '"') return NULL;
  s->s = (const char *)p + 1;
  s->n = (size_t)(e - p - 1);
  return e + 1;
}

/* A value of the shape the scan reads (a number, a plain string, true, false, null, or an
 * array of these, depth arrays deep at most): the byte after it, else NULL. */
static uch *l_skip(uch *p, int depth) {
  unsigned c = *p;
  if (c == '"') {
    uch *e = scan_plain(p + 1);
    return *e == '"' ? e + 1 : NULL;
  }
  if (c == '-' || c - '0' < 10) return l_num(p);
  if (c == '[') {
    p++;
    if (*p == ']') return p + 1;
    if (depth >= L_MAX_DEPTH) return NULL;
    for (;;) {
      p = l_skip(p, depth + 1);
      if (!p) return NULL;
      if (*p == ',') {
        p = l_sep(p);
        continue;
      }
      return *p == ']' ? p + 1 : NULL;
    }
  }
  if (c == 't') return memcmp(p, "true", 4) ? NULL : p + 4;
  if (c == 'f') return memcmp(p, "false", 5) ? NULL : p + 5;
  if (c == 'n') return memcmp(p, "null", 4) ? NULL : p + 4;
  return NULL;
}

/* An array of l_skip values at p: where each element starts (at most L_MAX_ITEMS) and their
 * count; the byte after it, else NULL. */
static uch *l_items(uch *p, uch **at, size_t *n, int depth) {
  size_t k = 0;
  if (*p != '[') return NULL;
  p++;
  if (*p != ']') {
    for (;;) {
      if (k == L_MAX_ITEMS) return NULL;
      at[k++] = p;
      p = l_skip(p, depth);
      if (!p) return NULL;
      if (*p == ',') {
        p = l_sep(p);
        continue;
      }
      if (*p != ']') return NULL;
      break;
    }
  }
  *n = k;
  return p + 1;
}

/* An array of integers (as is_int of validate_node.c takes them; the text is well formed):
 * its count, else -1. */
static long l_int_array(uch *p) {
  if (*p != '[') return -1;
  p++;
  if (*p == ']') return 0;
  long k = 0;
  for (;;) {
    p = l_is_int(p);
    if (!p) return -1;
    k++;
    if (*p != ',') return k; /* the ']' */
    p = l_sep(p);
  }
}

size_t rd_split_types(rd_span inner, rd_span *out, size_t max) {
  size_t n = 0, start = 0;
  int depth = 0;
  if (inner.n == 0) return 0;
  for (size_t i = 0; i <= inner.n; i++) {
    char c = i < inner.n ? inner.s[i] : ',';
    if (c == '[' || c == '(' || c == '<')
      depth++;
    else if (c == ']' || c == ')' || c == '>')
      depth--;
    else if (c == ',' && depth == 0) {
      if (n < max) out[n] = (rd_span){inner.s + start, i - start};
      n++;
      start = i + 1;
    }
  }
  return n;
}

/* check_value of validate_node.c on text already found well formed (l_skip): true when it
 * reports nothing for value v of type t with shape s and strides st (NULL: absent, in a
 * schema without them). */
static bool l_check(lspan t, uch *v, uch *s, uch *st, int depth) {
  if (L_STARTS(t, "Tensor(")) {
    if (*v != '[') return false;
    uch *p = v + 1;
    for (int i = 0; i < 5; i++) {
      if (*p == '-' || !(p = l_is_int(p)) || *p != ',') return false;
      p = l_sep(p);
    }
    if (*p != '"') return false;
    p = scan_plain(p + 1) + 1; /* a plain string (l_skip) */
    if (*p != ']') return false;
    long ns = l_int_array(s);
    return ns >= 0 && (!st || l_int_array(st) == ns);
  }
  bool list = L_STARTS(t, "GenericList[");
  if (list || L_STARTS(t, "Tuple[")) {
    size_t pre = list ? 12 : 6;
    if (*v != '[' || t.n < pre + 1 || t.s[t.n - 1] != ']' || depth >= L_MAX_DEPTH) return false;
    lspan el[L_MAX_ITEMS];
    size_t nt = rd_split_types((lspan){t.s + pre, t.n - pre - 1}, el, L_MAX_ITEMS);
    uch *va[L_MAX_ITEMS], *sa[L_MAX_ITEMS], *sta[L_MAX_ITEMS];
    size_t nv, ns, nst = 0;
    if (!l_items(v, va, &nv, depth) || !l_items(s, sa, &ns, depth) ||
        (st && !l_items(st, sta, &nst, depth)) || ns != nv || (st && nst != nv) || nt != nv)
      return false;
    for (size_t i = 0; i < nv; i++)
      if (!l_check(el[i], va[i], sa[i], st ? sta[i] : NULL, depth + 1)) return false;
    return true;
  }
  /* scalars: shape [] and strides [] (no whitespace: l_skip) */
  if (s[0] != '[' || s[1] != ']' || (st && (st[0] != '[' || st[1] != ']'))) return false;
  if (L_IS(t, "Int")) return l_is_int(v) != NULL;
  if (L_IS(t, "Double")) {
    if (*v == '-' || (unsigned)(*v - '0') < 10) return true;
    lspan x;
    return l_str(v, &x) && (L_IS(x, "nan") || L_IS(x, "inf") || L_IS(x, "-inf"));
  }
  if (L_IS(t, "Bool")) return *v == 't' || *v == 'f';
  if (L_IS(t, "String") || L_IS(t, "Device")) return *v == '"';
  if (L_IS(t, "None")) {
    lspan x;
    return l_str(v, &x) && L_IS(x, "<None>");
  }
  return t.n != 0;
}

/* One element of an inputs/outputs array, classed as it is read (l_elem): what the checks
 * of a value, a shape or strides need of it without reading it again. */
enum {
  E_INT = 0,    /* an l_int integer */
  E_NUM = 1,    /* another number */
  E_STR = 2,    /* a plain string (str) */
  E_BOOL = 3,   /* true, false */
  E_NULL = 4,   /* null */
  E_INTS = 5,   /* an array of l_int integers, cnt of them (0: []) */
  E_TENSOR = 6, /* [5 l_int integers >= 0, a plain string] */
  E_ARR = 7     /* another array (l_skip) */
};

typedef struct lelem {
  uch *at; /* its text */
  uint32_t tag, cnt;
  lspan str;
} lelem;

/* The element at p into *e: the byte after it, else NULL. depth: as l_skip's. */
static inline uch *l_elem(uch *p, lelem *e, int depth) {
  unsigned c = *p;
  e->at = p;
  if (c == '"') {
    e->tag = E_STR;
    return l_str(p, &e->str);
  }
  if (c == '-' || c - '0' < 10) {
    uch *q = l_is_int(p);
    if (q) {
      e->tag = E_INT;
      return q;
    }
    e->tag = E_NUM;
    return l_num(p);
  }
  if (c == '[') {
    /* integers, and whether they start a tensor [id, storage, offset, numel, itemsize, "d"] */
    uch *q = p + 1;
    uint32_t n = 0;
    bool neg = false, cut = false; /* cut: an element that is no l_int integer ends them */
    if (*q != ']') {
      for (;;) {
        neg |= *q == '-';
        uch *r = l_is_int(q);
        if (!r) {
          cut = true;
          break;
        }
        n++;
        q = r;
        if (*q != ',') break;
        q = l_sep(q);
      }
    }
    if (*q == ']' && !cut) {
      e->tag = E_INTS;
      e->cnt = n;
      return q + 1;
    }
    if (n == 5 && !neg && *q == '"') {
      uch *z = scan_plain(q + 1);
      if (*z == '"' && z[1] == ']') {
        e->tag = E_TENSOR;
        return z + 2;
      }
    }
    e->tag = E_ARR; /* anything else: read again, whole */
    return l_skip(p, depth);
  }
  if (c == 't' || c == 'f') {
    e->tag = E_BOOL;
    return l_skip(p, depth);
  }
  e->tag = E_NULL;
  return c == 'n' ? l_skip(p, depth) : NULL;
}

/* An array of l_elem elements at p (at most L_MAX_ITEMS): their count in *n; the byte after
 * it, else NULL. */
static uch *l_elems(uch *p, lelem *e, size_t *n) {
  size_t k = 0;
  if (*p != '[') return NULL;
  p++;
  if (*p != ']') {
    for (;;) {
      if (k == L_MAX_ITEMS || !(p = l_elem(p, &e[k++], 3))) return NULL;
      if (*p == ',') {
        p = l_sep(p);
        continue;
      }
      if (*p != ']') return NULL;
      break;
    }
  }
  *n = k;
  return p + 1;
}

/* l_check of a value of an inputs/outputs array, its shape and strides classed (l_elem; st
 * NULL: no strides). */
static bool l_check_elem(lspan t, const lelem *v, const lelem *s, const lelem *st) {
  if (L_STARTS(t, "Tensor("))
    return v->tag == E_TENSOR && s->tag == E_INTS &&
           (!st || (st->tag == E_INTS && st->cnt == s->cnt));
  if (L_STARTS(t, "GenericList[") || L_STARTS(t, "Tuple["))
    return l_check(t, v->at, s->at, st ? st->at : NULL, 0);
  /* scalars: shape [] and strides [] */
  if (s->tag != E_INTS || s->cnt || (st && (st->tag != E_INTS || st->cnt))) return false;
  if (L_IS(t, "Int")) return v->tag == E_INT;
  if (L_IS(t, "Double"))
    return v->tag == E_INT || v->tag == E_NUM ||
           (v->tag == E_STR &&
            (L_IS(v->str, "nan") || L_IS(v->str, "inf") || L_IS(v->str, "-inf")));
  if (L_IS(t, "Bool")) return v->tag == E_BOOL;
  if (L_IS(t, "String") || L_IS(t, "Device")) return v->tag == E_STR;
  if (L_IS(t, "None")) return v->tag == E_STR && L_IS(v->str, "<None>");
  return t.n != 0;
}

/* An inputs/outputs object {"values": A, "shapes": A, "types": A, "strides": A} at p (without
 * "strides" when no_strides: a schema before 1.1.1), its arrays of one length, each type a
 * string and each value conforming to it: the byte after it, else NULL. */
static uch *l_io(uch *p, bool no_strides) {
  lelem ve[L_MAX_ITEMS], se[L_MAX_ITEMS], ste[L_MAX_ITEMS];
  lspan ty[L_MAX_ITEMS];
  size_t nv, ns, nst, nt = 0;
  if (!L_EQ(p, "{\"values\": ") || !(p = l_elems(p + 11, ve, &nv))) return NULL;
  if (!L_EQ(p, ", \"shapes\": ") || !(p = l_elems(p + 12, se, &ns))) return NULL;
  if (!L_EQ(p, ", \"types\": ") || p[11] != '[') return NULL;
  p += 12;
  if (*p != ']') {
    for (;;) {
      if (nt == L_MAX_ITEMS || !(p = l_str(p, &ty[nt]))) return NULL;
      nt++;
      if (*p != ',') break;
      p = l_sep(p);
    }
  }
  if (*p != ']') return NULL;
  p++;
  bool strides = !no_strides || *p != '}';
  if (strides && (!L_EQ(p, ", \"strides\": ") || !(p = l_elems(p + 13, ste, &nst)))) return NULL;
  if (*p != '}' || ns != nv || nt != nv || (strides && nst != nv)) return NULL;
  for (size_t i = 0; i < nv; i++)
    if (!l_check_elem(ty[i], &ve[i], &se[i], strides ? &ste[i] : NULL)) return NULL;
  return p + 1;
}

/* is_forbidden of validate_node.c: the attr names Chakra would copy over node fields. */
static bool l_forbidden(lspan nm) {
  return L_IS(nm, "id") || L_IS(nm, "cat") || L_IS(nm, "name") || L_IS(nm, "stream") ||
         L_IS(nm, "inputs") || L_IS(nm, "parent") || L_IS(nm, "outputs");
}

/* The value of an attr: its kind (what the general path would make of it, as far as the
 * checks need it) and the integer or string. */
enum { LV_INT = 0, LV_NUM = 1, LV_STR = 2, LV_LIT = 3 };

/* Where a string of the node ends: its closing quote becomes its NUL on success. */
typedef struct lnuls {
  unsigned char *at[4];
  size_t n;
} lnuls;

/* Base attr b of node n has value x (an integer) or sv (a string). */
static inline void l_base_set(rd_rnode *n, int b, int64_t x, lspan sv, lnuls *nuls) {
  switch (b) {
    case 0:
      n->rf_id = (uint64_t)x;
      break;
    case 1:
      n->fw_parent = (uint64_t)x;
      break;
    case 2:
      n->seq_id = x;
      break;
    case 3:
      n->scope = (uint64_t)x;
      break;
    case 4:
      n->tid = (uint64_t)x;
      break;
    case 5:
      n->fw_tid = (uint64_t)x;
      break;
    default:
      *(b == 6 ? &n->op_schema : b == 7 ? &n->kernel_backend : &n->kernel_file) = sv.s;
      nuls->at[nuls->n++] = (unsigned char *)(uintptr_t)(sv.s + sv.n);
      break;
  }
}

/* A node's "attrs" at p, each {"name": N, "type": T, "value": V} with V a scalar: the base
 * attrs rf_id .. op_schema all there, first and in order, with their types; every value
 * matching its type; no name twice, none of the forbidden ones. Fills n's base attrs and
 * traceback; the byte after the array, else NULL. */
static uch *l_attrs(uch *p, rd_rnode *n, lnuls *nuls) {
  static const uint8_t want[9] = {0, 0, 1, 0, 0, 0, 2, 2, 2}; /* uint64, int64, string */
  lspan others[L_MAX_ATTRS];
  size_t n_others = 0, k = 0;
  int last = -1;
  uint32_t have = 0;
  if (*p != '[') return NULL;
  p++;
  for (;;) {
    if (k++ == L_MAX_ATTRS) return NULL;
    lspan sv = {NULL, 0};
    int64_t x = 0;
    int b = last + 1;
    if (b < 9 && !n_others && l_eq_pre(p, l_base_pre[b], l_base_pre_len[b])) {
      /* the next base attr as our writer writes it: its name and type need no look */
      uch *q = p + l_base_pre_len[b];
      if (b < 6)
        q = l_int(q, &x);
      else
        q = l_str(q, &sv);
      if (!q || *q != '}' || (b != 2 && b < 6 && x < 0)) return NULL;
      p = q + 1;
      have |= 1u << b;
      last = b;
      l_base_set(n, b, x, sv, nuls);
      if (*p == ',') {
        p = l_sep(p);
        continue;
      }
      if (*p != ']') return NULL;
      break;
    }
    if (!L_EQ(p, "{\"name\": \"")) return NULL;
    lspan nm, ty;
    uch *q = l_str(p + 9, &nm);
    if (!q || !L_EQ(q, ", \"type\": \"") || !(q = l_str(q + 10, &ty)) || !L_EQ(q, ", \"value\": "))
      return NULL;
    q += 11;
    int kind;
    unsigned c = *q;
    if (c == '"') {
      kind = LV_STR;
      q = l_str(q, &sv);
    } else if (c == '-' || c - '0' < 10) {
      uch *e = l_int(q, &x);
      kind = e ? LV_INT : LV_NUM;
      q = e ? e : l_num(q);
    } else {
      kind = LV_LIT;
      q = c == 't' || c == 'f' || c == 'n' ? l_skip(q, 0) : NULL;
    }
    if (!q || *q != '}') return NULL;
    p = q + 1;
    b = etr__rd_base_attr_len(nm.s, nm.n);
    int tk; /* the type: 0 uint64, 1 int64, 2 string, -1 another */
    if (L_IS(ty, "uint64"))
      tk = 0;
    else if (L_IS(ty, "int64"))
      tk = 1;
    else if (L_IS(ty, "string"))
      tk = 2;
    else
      tk = -1;
    if (b >= 0) {
      if (b <= last || n_others || tk != want[b]) return NULL;
      last = b;
      have |= 1u << b;
    } else {
      if (l_forbidden(nm)) return NULL;
      for (size_t j = 0; j < n_others; j++)
        if (others[j].n == nm.n && !memcmp(others[j].s, nm.s, nm.n)) return NULL;
      others[n_others++] = nm;
    }
    if ((tk == 0 && (kind != LV_INT || x < 0)) || (tk == 1 && kind != LV_INT) ||
        (tk == 2 && kind != LV_STR))
      return NULL;
    if (b >= 0) {
      l_base_set(n, b, x, sv, nuls);
    } else if (L_IS(nm, "traceback")) { /* as_u64 of reader_node.c */
      if (kind == LV_NUM) return NULL;  /* maybe above INT64_MAX */
      n->has_traceback = kind == LV_INT;
      if (kind == LV_INT) n->traceback = (uint64_t)x;
    }
    if (*p == ',') {
      p = l_sep(p);
      continue;
    }
    if (*p != ']') return NULL;
    break;
  }
  if ((have & 0x7f) != 0x7f) return NULL;
  n->missing_attrs = 0x1ffu & ~have;
  return p + 1;
}

/* After a node's value at p, its ',' and whitespace, then key lit (n bytes, its ": " included,
 * as l_eq compares them): the byte after it, else NULL. */
static inline uch *l_key(uch *p, const char *lit, size_t n) {
  if (*p != ',') return NULL;
  if (p[1] == ' ' && p[2] == '"') /* ", " as our writer puts it: no loop */
    p += 2;
  else
    p = h_ws(p + 1, NULL);
  return l_eq(p, lit, n) ? p + n : NULL;
}
#define L_KEY(p, lit) l_key((p), (lit), sizeof(lit) - 1)

int etr__rd_h_lean(rd_reader *r, const unsigned char **pp, const unsigned char *end) {
  uch *p = *pp, *start = p;
  p = h_ws(p + 1, end); /* after the '{' (h_step saw it) */
  if (!L_EQ(p, "\"id\": ")) return H_MISS;
  /* "strides" is optional in schemas before 1.1.1 (validate's has_strides_schema) */
  const rd_rheader *h = &r->hdr;
  bool no_strides = !(h->schema_major > 1 ||
                      (h->schema_major == 1 &&
                       (h->schema_minor > 1 || (h->schema_minor == 1 && h->schema_patch >= 1))));
  rd_rnode nd;
  memset(&nd, 0, sizeof nd);
  lnuls nuls;
  nuls.n = 0;
  lspan name;
  int64_t ts = 0, inc = 0, exc = 0;
  bool timing = false;
  if (!(p = l_int(p + 6, &nd.id))) return H_MISS;
  if (!(p = L_KEY(p, "\"name\": ")) || !(p = l_str(p, &name))) return H_MISS;
  if (!(p = L_KEY(p, "\"ctrl_deps\": ")) || !(p = l_int(p, &nd.ctrl_deps)) || nd.ctrl_deps < 0)
    return H_MISS;
  if (!(p = L_KEY(p, "\"inputs\": ")) || !(p = l_io(p, no_strides))) return H_MISS;
  if (!(p = L_KEY(p, "\"outputs\": ")) || !(p = l_io(p, no_strides))) return H_MISS;
  uch *q = L_KEY(p, "\"ts\": ");
  if (q) {
    if (!(p = l_int(q, &ts)) || !(p = L_KEY(p, "\"inclusive")) || !L_EQ(p, "_dur\": ") ||
        !(p = l_int(p + 7, &inc)) || !(p = L_KEY(p, "\"exclusive")) || !L_EQ(p, "_dur\": ") ||
        !(p = l_int(p + 7, &exc)))
      return H_MISS;
    timing = true;
  }
  if (!(p = L_KEY(p, "\"attrs\": ")) || !(p = l_attrs(p, &nd, &nuls))) return H_MISS;
  p = h_ws(p, end);
  if (*p != '}') return H_MISS;
  p++;
  /* the general path would refuse a node this large, or might find its tree over the limit
   * (with the member stack, at most ~40 bytes per byte of text, plus a block): let it */
  size_t len = (size_t)(p - start), room = 4 * (size_t)ARENA_BLOCK + r->nodes.live;
  if (p > end || len > r->opt.max_node_bytes || r->limit < room || len > (r->limit - room) / 64)
    return H_MISS;
  rd_rnode *n = arena_alloc(&r->nodes, sizeof *n);
  if (!n) {
    etr__rd_set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
    return H_ERR;
  }
  *n = nd;
  n->offset = r->node_off;
  n->name = name.s;
  n->name_len = name.n;
  n->key_bits = timing ? 0x1ffu : 0x11fu;
  n->keys_in_order = true;
  n->inputs_exact_keys = n->outputs_exact_keys = true;
  n->has_timing = timing;
  n->ts = ts;
  n->inclusive_dur = inc;
  n->exclusive_dur = exc;
  n->conforms = true;
  /* NUL-terminate the strings the node points to, in place (as h_string does) */
  unsigned char *last = (unsigned char *)(uintptr_t)(name.s + name.n);
  *last = '\0';
  for (size_t i = 0; i < nuls.n; i++) {
    *nuls.at[i] = '\0';
    if (nuls.at[i] > last) last = nuls.at[i];
  }
  size_t nul_end = (size_t)(last - r->hb) + 1;
  if (r->h_nul_end < nul_end) r->h_nul_end = nul_end;
  if (!etr__rd_node_queue(r, n)) return H_ERR;
  *pp = p;
  return H_OK;
}
