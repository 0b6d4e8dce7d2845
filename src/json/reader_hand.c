/* The hand parser of the trace reader (the default; reader_int.h), its values: a parser
 * specialised for traces reading JSON values from the input window that reader_hand_step.c
 * keeps (reader_hand.h), building them directly into the arenas: no callback per token, no
 * intermediate copies. It accepts exactly RFC 8259 JSON, strings checked to be UTF-8.
 * Shortcuts for what traces hold most: plain strings scanned 16 bytes at a time and, in a
 * node, left in place in the window (their closing quote made their NUL); one-digit
 * integers and empty containers without the general paths; a node's attr objects, flat
 * arrays and inputs/outputs objects of the usual shape by the shortcuts of
 * reader_hand_fast.c.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "json/reader_hand.h"

#include <string.h>

#include "etr/common.h"

int etr__rd_h_fail(rd_reader *r, const unsigned char *at, const char *what) {
  uint64_t off = r->hb_base + (uint64_t)(at - r->hb);
  etr__rd_set_error(r, ETR_EFORMAT, off, "invalid JSON (%s)", what);
  return H_ERR;
}

static int hex4(const unsigned char *p, uint32_t *out) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = p[i], d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
      d = (c | 0x20) - 'a' + 10;
    else
      return 0;
    v = v * 16 + d;
  }
  *out = v;
  return 1;
}

static int h_string_slow(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                         const char **s, size_t *len);

/* A string; *pp at the opening quote. The result is NUL-terminated in arena a. Inline: the
 * common string, printable ASCII without escapes. */
static inline int h_string(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                           arena *a, const char **s, size_t *len) {
  const unsigned char *p = *pp + 1, *start = p;
  p = scan_plain(p);
  if (ETR_RD_LIKELY(*p == '"')) {
    size_t raw = (size_t)(p - start);
    *pp = p + 1;
    *len = raw;
    if (a == &r->nodes) {
      /* A node's string is left where it is, its closing quote turned into its NUL: the
       * node is valid until the next rd_next, and the window keeps its bytes until then. A
       * step undone is given its quotes back (h_restore_quotes). */
      r->h_nul_end = (size_t)(p - r->hb) + 1;
      *(unsigned char *)(uintptr_t)p = '\0';
      *s = (const char *)start;
      return H_OK;
    }
    unsigned char *o = arena_alloc(a, raw + 1);
    if (!o) {
      etr__rd_set_error(r, ETR_ENOMEM, 0, "out of memory");
      return H_ERR;
    }
    if (raw < 16)           /* arena_alloc gave 16 bytes, the window has them (H_PAD): */
      memcpy(o, start, 16); /* one fixed-size copy */
    else
      memcpy(o, start, raw);
    o[raw] = '\0';
    *s = (const char *)o;
    return H_OK;
  }
  return h_string_slow(r, pp, end, a, s, len);
}

/* h_string for the other strings (escapes, non-ASCII, control bytes, cut by the end). */
static ETR_RD_NOINLINE int h_string_slow(rd_reader *r, const unsigned char **pp,
                                         const unsigned char *end, arena *a, const char **s,
                                         size_t *len) {
  const unsigned char *p = *pp + 1, *start = p;
  bool simple = true;
  size_t bad = 0; /* bytes of invalid UTF-8: each becomes U+FFFD (3 bytes) */
  /* pass 1: find the closing quote, check the bytes */
  for (;;) {
    p = scan_plain(p);
    if (p >= end) return H_MORE;
    unsigned c = *p;
    if (c == '"') break;
    if (c < 0x20) return etr__rd_h_fail(r, p, "control character in a string");
    simple = false;
    if (c == '\\') {
      if (end - p < 2) return H_MORE;
      unsigned e = p[1];
      if (e == 'u') {
        if (end - p < 6) return H_MORE;
        uint32_t u;
        if (!hex4(p + 2, &u)) return etr__rd_h_fail(r, p, "bad \\u escape");
        p += 6;
      } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                 e == 'r' || e == 't') {
        p += 2;
      } else {
        return etr__rd_h_fail(r, p, "bad escape in a string");
      }
    } else {
      size_t n = etr__rd_utf8_len(p, end);
      if (n == (size_t)-1) return H_MORE;
      if (!n) { /* a writer that passed raw bytes through: keep reading, replace them */
        bad++;
        n = etr__rd_bad_len(p, end);
      }
      p += n;
    }
  }
  /* (one warning for the string, after pass 2: its lone surrogate escapes count too, as
   * the yajl backend counts them, in one sum) */
  size_t raw = (size_t)(p - start);
  unsigned char *o = arena_alloc(a, raw + 2 * bad + 1);
  if (!o) {
    etr__rd_set_error(r, ETR_ENOMEM, 0, "out of memory");
    return H_ERR;
  }
  *s = (const char *)o;
  if (simple) {
    memcpy(o, start, raw);
    o[raw] = '\0';
    *len = raw;
    *pp = p + 1;
    return H_OK;
  }
  /* pass 2: decode (never longer than the source plus 2 bytes per replaced byte) */
  unsigned char *q = o;
  size_t lone = 0;
  for (const unsigned char *x = start; x < p;) {
    if (*x >= 0x80) {
      x = etr__rd_put_utf8_seq(&q, x, p);
      continue;
    }
    if (*x != '\\') {
      *q++ = *x++;
      continue;
    }
    unsigned e = x[1];
    x += 2;
    switch (e) {
      case 'b':
        *q++ = '\b';
        break;
      case 'f':
        *q++ = '\f';
        break;
      case 'n':
        *q++ = '\n';
        break;
      case 'r':
        *q++ = '\r';
        break;
      case 't':
        *q++ = '\t';
        break;
      case 'u': {
        uint32_t u = 0, lo = 0;
        hex4(x, &u);
        x += 4;
        if (u >= 0xD800 && u <= 0xDBFF && p - x >= 6 && x[0] == '\\' && x[1] == 'u' &&
            hex4(x + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
          u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
          x += 6;
        } else if (u >= 0xD800 && u <= 0xDFFF) {
          u = 0xFFFD; /* a lone surrogate */
          lone++;
        } else if (u == 0) {
          r->nul_str = true;
        }
        put_utf8(&q, u);
        break;
      }
      default:
        *q++ = (unsigned char)e;
        break; /* " \ / */
    }
  }
  if (bad + lone)
    etr__rd_warn(r, r->hb_base + (uint64_t)(start - r->hb), -1,
                 "invalid UTF-8 in a string (%zu sequence%s replaced by U+FFFD)", bad + lone,
                 bad + lone == 1 ? "" : "s");
  *q = '\0';
  *len = (size_t)(q - o);
  *pp = p + 1;
  return H_OK;
}

static inline int h_number(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                           rd_jval *v) {
  const unsigned char *p = *pp, *s = p;
  bool neg = *p == '-';
  p += neg;
  if (p >= end) return H_MORE;
  const unsigned char *digits = p;
  uint64_t acc = 0;
  if (*p == '0') {
    p++;
  } else if ((unsigned)(*p - '1') < 9) {
    /* no overflow check per digit: 19 digits always fit, longer ones are redone below */
    do acc = acc * 10 + (unsigned)(*p++ - '0');
    while ((unsigned)(*p - '0') < 10); /* the NUL after the window stops it */
  } else {
    return etr__rd_h_fail(r, p, "bad number");
  }
  size_t n_digits = (size_t)(p - digits);
  bool is_int = true;
  if (*p == '.') {
    is_int = false;
    p++;
    if (p >= end) return H_MORE;
    if (*p < '0' || *p > '9') return etr__rd_h_fail(r, p, "bad number");
    while ((unsigned)(*p - '0') < 10) p++;
  }
  if (*p == 'e' || *p == 'E') {
    is_int = false;
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end) return H_MORE;
    if (*p < '0' || *p > '9') return etr__rd_h_fail(r, p, "bad number");
    while ((unsigned)(*p - '0') < 10) p++;
  }
  if (p >= end) return H_MORE; /* the number may go on */
  bool overflow = false;
  if (is_int && n_digits > 19) {
    acc = 0;
    for (const unsigned char *x = digits; x < digits + n_digits; x++) {
      unsigned d = *x - '0';
      if (acc > (UINT64_MAX - d) / 10) overflow = true;
      acc = acc * 10 + d;
    }
  }
  if (is_int && !overflow && !neg && acc <= (uint64_t)INT64_MAX) {
    v->kind = ETR_J_INT;
    v->v.i = (int64_t)acc;
  } else if (is_int && !overflow && neg && acc <= (uint64_t)INT64_MAX + 1) {
    v->kind = ETR_J_INT;
    v->v.i = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
  } else if (is_int && !overflow && !neg) {
    v->kind = ETR_J_UINT;
    v->v.u = acc;
  } else {
    char buf[128];
    size_t n = (size_t)(p - s);
    if (n > sizeof buf - 1) n = sizeof buf - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    v->kind = ETR_J_DOUBLE;
    v->v.d = strtod(buf, NULL);
  }
  *pp = p;
  return H_OK;
}

static int h_literal(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                     const char *lit, size_t n);

static int h_container(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                       int depth, rd_jval *v);

static int h_container(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                       int depth, rd_jval *v) {
  const unsigned char *p = *pp;
  bool is_obj = *p == '{';
  unsigned char close = is_obj ? '}' : ']';
  if (depth >= H_MAX_DEPTH) {
    r->err_limit = true;
    return etr__rd_h_fail(r, p, "nesting too deep");
  }
  p = h_ws(p + 1, end);
  if (p >= end) return H_MORE;
  size_t start = r->stk_len;
  if (*p != close) {
    for (;;) {
      /* the member's slot is taken before its value is read: a container's children go
       * above it on the stack */
      if (ETR_RD_UNLIKELY(r->stk_len == r->stk_cap) &&
          !grow((void **)&r->stk, &r->stk_cap, r->stk_len, sizeof *r->stk, 256)) {
        etr__rd_set_error(r, ETR_ENOMEM, 0, "out of memory");
        return H_ERR;
      }
      size_t slot = r->stk_len++;
      rd_jmember *m = &r->stk[slot];
      int st;
      if (is_obj) {
        if (*p != '"') return etr__rd_h_fail(r, p, "expected a key");
        st = h_string(r, &p, end, a, &m->key, &m->key_len);
        if (st) return st;
        if (*p != ':') {
          p = h_ws(p, end);
          if (p >= end) return H_MORE;
          if (*p != ':') return etr__rd_h_fail(r, p, "expected ':'");
        }
        /* ": " as writers put it: one space, then no loop */
        p += 1 + (p[1] == ' ');
        if (ETR_RD_UNLIKELY(*p <= ' ')) {
          p = h_ws(p, end);
          if (p >= end) return H_MORE;
        }
      } else {
        m->key = NULL;
        m->key_len = 0;
      }
      /* the value: scalars straight into the slot, containers through the recursion */
      unsigned c = *p;
      if (c == '"') {
        m->val.kind = ETR_J_STRING;
        st = h_string(r, &p, end, a, &m->val.v.str.s, &m->val.v.str.len);
      } else if (c == '-' || c - '0' < 10) {
        if ((unsigned)(c - '0') < 10 && (unsigned)(p[1] - '0') >= 10 && p[1] != '.' &&
            (p[1] | 0x20) != 'e' && p + 1 < end) {
          /* one digit ("value": 0, shapes [16, 8]'s neighbours): no general parse; p[1] is in
           * the window or its padding */
          m->val.kind = ETR_J_INT;
          m->val.v.i = (int64_t)(c - '0');
          p++;
          st = H_OK;
        } else {
          const unsigned char *q = h_int18(p, end, &m->val);
          if (q)
            p = q, st = H_OK;
          else
            st = h_number(r, &p, end, &m->val);
        }
      } else if (((c == '[' && p[1] == ']') || (c == '{' && p[1] == '}')) &&
                 depth + 1 < H_MAX_DEPTH) {
        /* an empty container ("shapes": [[],[]]): no recursion; p[1] is in the window or
         * its NUL padding */
        if (c == '[') {
          m->val.kind = ETR_J_ARRAY;
          m->val.v.arr.items = NULL;
          m->val.v.arr.n = 0;
        } else {
          m->val.kind = ETR_J_OBJECT;
          m->val.v.obj.items = NULL;
          m->val.v.obj.n = 0;
        }
        p += 2;
        st = H_OK;
      } else if (c == '{' || c == '[') {
        rd_jval item;
        st = H_MISS;
        if (a != &r->nodes)
          ; /* a header or trailer value: the general path */
        else if (c == '{' && p[1] == '"' && p[2] == 'n')
          st = etr__rd_h_attr(r, &p, end, a, depth, &item);
        else if (c == '[' && p[1] == '{')
          st = etr__rd_h_attrs(r, &p, end, a, depth, &item);
        else if (c == '[' && depth + 1 < H_MAX_DEPTH)
          st = etr__rd_h_flat(r, &p, end, a, depth, &item);
        else if (c == '{' && p[2] == 'v')
          st = etr__rd_h_io(r, &p, end, a, depth, &item);
        if (st == H_MISS) st = h_container(r, &p, end, a, depth + 1, &item);
        if (st == H_OK) r->stk[slot].val = item; /* the stack may have moved */
      } else if (c == 't') {
        m->val.kind = ETR_J_BOOL;
        m->val.v.b = true;
        st = h_literal(r, &p, end, "true", 4);
      } else if (c == 'f') {
        m->val.kind = ETR_J_BOOL;
        m->val.v.b = false;
        st = h_literal(r, &p, end, "false", 5);
      } else if (c == 'n') {
        m->val.kind = ETR_J_NULL;
        st = h_literal(r, &p, end, "null", 4);
      } else {
        return etr__rd_h_fail(r, p, "unexpected character");
      }
      if (st) return st;
      /* a few hundred thousand tiny values build a tree far larger than their text */
      if ((r->stk_len & 1023) == 0 && r->stk_len * sizeof *r->stk + a->live > r->limit)
        return H_BIG;
      if (*p != ',') p = h_ws(p, end); /* the NUL after the window ends it (H_PAD) */
      if (*p == ',') {
        p += 1 + (p[1] == ' '); /* ", " or "," as writers put them: no loop */
        if (ETR_RD_UNLIKELY(*p <= ' ')) {
          p = h_ws(p, end);
          if (p >= end) return H_MORE;
        }
        continue;
      }
      if (p >= end) return H_MORE;
      if (*p == close) break;
      return etr__rd_h_fail(r, p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  size_t n = r->stk_len - start;
  if (is_obj) {
    v->kind = ETR_J_OBJECT;
    rd_jmember *items = NULL;
    if (n) {
      items = arena_alloc(a, n * sizeof *items);
      if (!items) goto oom;
      memcpy(items, r->stk + start, n * sizeof *items);
    }
    v->v.obj.items = items;
    v->v.obj.n = n;
  } else {
    v->kind = ETR_J_ARRAY;
    rd_jval *items = NULL;
    if (n) {
      items = arena_alloc(a, n * sizeof *items);
      if (!items) goto oom;
      const rd_jmember *src = r->stk + start;
      for (size_t i = 0; i < n; i++) items[i] = src[i].val;
    }
    v->v.arr.items = items;
    v->v.arr.n = n;
  }
  r->stk_len = start;
  *pp = p + 1;
  return H_OK;
oom:
  etr__rd_set_error(r, ETR_ENOMEM, 0, "out of memory");
  return H_ERR;
}

static int h_literal(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                     const char *lit, size_t n) {
  const unsigned char *p = *pp;
  size_t have = (size_t)(end - p) < n ? (size_t)(end - p) : n;
  if (memcmp(p, lit, have)) return etr__rd_h_fail(r, p, "invalid literal");
  if (have < n) return H_MORE;
  *pp = p + n;
  return H_OK;
}

static int h_value(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                   int depth, rd_jval *v) {
  const unsigned char *p = *pp;
  switch (*p) {
    case '"': {
      v->kind = ETR_J_STRING;
      return h_string(r, pp, end, a, &v->v.str.s, &v->v.str.len);
    }
    case '{':
    case '[':
      return h_container(r, pp, end, a, depth, v);
    case 't':
      v->kind = ETR_J_BOOL;
      v->v.b = true;
      return h_literal(r, pp, end, "true", 4);
    case 'f':
      v->kind = ETR_J_BOOL;
      v->v.b = false;
      return h_literal(r, pp, end, "false", 5);
    case 'n':
      v->kind = ETR_J_NULL;
      return h_literal(r, pp, end, "null", 4);
    default:
      if (*p == '-' || (*p >= '0' && *p <= '9')) return h_number(r, pp, end, v);
      return etr__rd_h_fail(r, p, "unexpected character");
  }
}

int etr__rd_h_string(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                     const char **s, size_t *len) {
  return h_string(r, pp, end, a, s, len);
}

int etr__rd_h_value(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                    int depth, rd_jval *v) {
  return h_value(r, pp, end, a, depth, v);
}

int etr__rd_h_number(rd_reader *r, const unsigned char **pp, const unsigned char *end, rd_jval *v) {
  return h_number(r, pp, end, v);
}

int etr__rd_h_literal(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                      const char *lit, size_t n) {
  return h_literal(r, pp, end, lit, n);
}
