/* Private to the hand parser of the trace reader (reader_hand.c, reader_hand_step.c): what
 * its two files share. reader_hand.c reads values (strings, numbers, containers, the attr
 * shortcut) from the input window; reader_hand_step.c owns the window and the steps of the
 * top-level state machine (the '{', a top-level member, a node), undoing and redoing a step
 * that runs off the end of the window. reader_hand_fast.c holds the shortcuts for what nodes
 * hold most (attr objects and arrays of them, flat arrays, inputs/outputs objects).
 */
#ifndef ETR_JSON_READER_HAND_H
#define ETR_JSON_READER_HAND_H

#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "json/reader_int.h"

/* H_BIG: the step needs more memory than r->limit (its text, or the values it builds);
 * H_MISS: a fast path does not apply, nothing was done (h_attr) */
enum { H_OK = 0, H_MORE = 1, H_ERR = 2, H_BIG = 3, H_MISS = 4 };
#define H_MAX_DEPTH 1024
/* Zero bytes kept after the window's data (hb[hb_len..hb_len + H_PAD)): a NUL stops every
 * scanning loop at the end (it is not whitespace, a digit or a plain string byte), so the
 * loops need no bounds check, and the string scanner may load 16 bytes from any position up
 * to the end. Whatever stops at the end then checks p >= end and asks for more input. */
#define H_PAD 64

/* An "invalid JSON (what)" error at byte `at` of the window; H_ERR. */
int etr__rd_h_fail(rd_reader *r, const unsigned char *at, const char *what);

/* The first byte at or after p that is not JSON whitespace (the NUL after the window ends it:
 * H_PAD). */
static inline const unsigned char *h_ws(const unsigned char *p, const unsigned char *end) {
  (void)end; /* the NUL after the window stops the loop (H_PAD) */
  while (*p <= ' ' && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  return p;
}

/* A string (*pp at its opening quote) into arena a, NUL-terminated: H_OK and *pp after it,
 * or H_MORE / H_ERR. A node's plain strings are left in place in the window (a == &r->nodes;
 * reader_hand.c says how). */
int etr__rd_h_string(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                     const char **s, size_t *len);
/* Any JSON value at *pp into *v, its strings and containers in arena a; depth: containers
 * open around it. H_OK and *pp after it, or H_MORE / H_ERR / H_BIG. */
int etr__rd_h_value(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                    int depth, rd_jval *v);

/* The first byte at or after p that a string cannot simply copy: '"', '\\', a control byte
 * (< 0x20) or a non-ASCII one (>= 0x80). The window's NUL padding (H_PAD) stops it at the
 * end; it reads at most 15 bytes past that. 16 bytes at a time with SSE2 (every x86-64 has
 * it), 8 at a time on other little-endian machines (SWAR), else one at a time. */
static inline const unsigned char *scan_plain(const unsigned char *p) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                space = _mm_set1_epi8(0x20);
  for (;; p += 16) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    /* signed compare: bytes >= 0x80 are negative, so "< 0x20" catches them too */
    __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                             _mm_cmplt_epi8(x, space));
    unsigned bits = (unsigned)_mm_movemask_epi8(m);
    if (bits) return p + ETR_RD_CTZ32(bits);
  }
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && \
    defined(__SIZEOF_POINTER__) && __SIZEOF_POINTER__ == 8
  const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
  for (;; p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    /* a borrow only carries into bytes above a flagged one: the lowest flag is exact */
    uint64_t t = ((w - ones * 0x20) | w | ((q - ones) & ~q) | ((b - ones) & ~b)) & highs;
    if (t) return p + ETR_RD_CTZ64(t) / 8;
  }
#else
  while (*p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80) p++;
  return p;
#endif
}

/* The number at p when it is an integer of 1 to 18 digits without fraction or exponent ("-"
 * allowed, no leading zero) that ends before end: *v an ETR_J_INT, and the byte after it;
 * else NULL, and the general number parser reads it (or refuses it). Inline, for the callers
 * of the general parser where most numbers are such (a node's ids, times, attr values). */
static inline const unsigned char *h_int18(const unsigned char *p, const unsigned char *end,
                                           rd_jval *v) {
  const unsigned char *q = p + (*p == '-'), *d = q;
  uint64_t acc = 0;
  if ((unsigned)(*q - '1') >= 9) return NULL; /* "0..." and "-0..." too: the general parser */
  do acc = acc * 10 + (unsigned)(*q++ - '0');
  while ((unsigned)(*q - '0') < 10); /* the NUL after the window stops it */
  if (q - d > 18 || q >= end || *q == '.' || (*q | 0x20) == 'e') return NULL;
  v->kind = ETR_J_INT;
  v->v.i = *p == '-' ? -(int64_t)acc : (int64_t)acc;
  return q;
}

/* A number at *pp into *v: H_OK and *pp after it, or H_MORE / H_ERR. */
int etr__rd_h_number(rd_reader *r, const unsigned char **pp, const unsigned char *end, rd_jval *v);
/* The literal lit (n bytes: true, false, null) at *pp: H_OK and *pp after it, or H_MORE / H_ERR. */
int etr__rd_h_literal(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                      const char *lit, size_t n);

/* The shortcuts of reader_hand_fast.c, for a node's values (a == &r->nodes): each reads the
 * value at *pp when its text has the usual shape, else returns H_MISS with nothing done that
 * shows (no warning, no NUL written), and the general path reads it. depth: that of the
 * container holding the value. H_OK with *v built and *pp after it; H_ERR (out of memory, or
 * an error in a value that the general path would give as well, at the same byte); h_attr
 * and h_attrs also H_MORE (a value cut by the end of the window). */
/* An attr object {"name": "N", "type": "T", "value": V}. */
int etr__rd_h_attr(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                   int depth, rd_jval *v);
/* An array of such attr objects, a node's "attrs" ([{...},{...}] or [{...}, {...}]). */
int etr__rd_h_attrs(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                    int depth, rd_jval *v);
/* A short array of integers and plain strings, or of such arrays (tensors, shapes, types). */
int etr__rd_h_flat(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                   int depth, rd_jval *v);
/* An inputs/outputs object {"values": A, "shapes": A, "types": A[, "strides": A]}. */
int etr__rd_h_io(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                 int depth, rd_jval *v);

/* The hand parser's scan of a node for rd_options.conform (reader_lean.c): at *pp (the
 * node's '{'), a node whose text has our writer's (or PyTorch's) shape and conforms to
 * docs/FORMAT.md is queued without its tree (rd_rnode.conforms): H_OK and *pp after it; any other,
 * H_MISS with nothing done (the general path reads it); H_ERR when memory ran out. */
int etr__rd_h_lean(rd_reader *r, const unsigned char **pp, const unsigned char *end);

#endif /* ETR_JSON_READER_HAND_H */
