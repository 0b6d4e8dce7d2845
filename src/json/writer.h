/* Streaming JSON output: a byte buffer that drains to a file descriptor in large writes.
 *
 * The buffer grows as needed and is written out only by etr__jw_flush, so the caller
 * decides the boundaries (the trace writer flushes between nodes, so that what reaches the
 * file is always whole nodes).
 *
 * Used by one thread at a time (the trace writer thread). Everything written is valid JSON
 * whatever the input bytes: strings are escaped and invalid UTF-8 is replaced by U+FFFD.
 * After a write error the buffer keeps accepting output and discards it, so callers need no
 * error checks per call; the first errno is kept in `err`.
 * With fd < 0 the buffer only grows (for tests and in-memory use).
 *
 * Gzip (etr__jw_set_gzip): each flush writes what is buffered as one complete gzip member
 * (RFC 1952 allows any number of members; gunzip, zlib and Python's gzip read them as one
 * stream). So the file is always a sequence of whole members: a file cut after a flush
 * decompresses up to that flush, and a footer written by one flush can be cut off again at
 * a member boundary. `written` counts the bytes that reached the file (compressed).
 */
#ifndef ETR_JSON_WRITER_H
#define ETR_JSON_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <string.h>

typedef struct etr__jw {
  int fd;
  int err; /* errno of the first failed write, 0 if none */
  char *buf;
  size_t len;
  size_t cap;
  uint64_t written;          /* bytes handed to the file */
  _Atomic uint64_t progress; /* the same, for a thread that watches the writer make progress */
  uint64_t replaced;         /* invalid UTF-8 sequences replaced */
  uint64_t fixed;            /* values the trace writer had to make valid (its own count) */
  int stall_ms;        /* a non-blocking fd that takes no bytes this long: err ETIMEDOUT (< 0: wait
                          forever) */
  void *gz;            /* z_stream of the gzip output, NULL for plain output */
  unsigned char *zbuf; /* compressed bytes on their way to the file */
  size_t zcap;
  bool shared;           /* a file the host writes too (/dev/stdout...): never cut nor reserved */
  bool prealloc;         /* reserve the file's blocks ahead of the writes (etr__jw_prealloc) */
  uint64_t prealloc_end; /* reserved up to this offset (0: nothing reserved past `written`) */
  /* Where the records in the buffer end (etr__jw_mark), so that a flush the file takes only
   * part of (a full disk) keeps the records that fit; and how many the last flush kept. */
  struct etr__jw_mark {
    size_t len;
    uint64_t count;
  } * marks;
  uint32_t n_marks, cap_marks;
  uint64_t flush_kept; /* a flush that failed: the count of its last mark the file took */
} etr__jw;

/* Initialise with a buffer of cap bytes (at least 64 KiB is used). 0 or -ENOMEM. */
int etr__jw_init(etr__jw *w, int fd, size_t cap);
void etr__jw_free(etr__jw *w);

/* From now on, when fd is a regular file, reserve its disk blocks a few MiB ahead of the
 * writes (fallocate, the file's size unchanged): a write into blocks already reserved costs
 * the kernel about a third less CPU. Where the file system cannot, nothing changes. `written`
 * must be the file's offset (as it is when the writer starts at 0). */
void etr__jw_prealloc(etr__jw *w);
/* Give back the blocks reserved past `written` (the file's end): call after the last flush,
 * before closing. */
void etr__jw_trim(etr__jw *w);
/* Cut the file back to off bytes and write on from there (`written` = off; the reserve went
 * with the cut). 0, or the errno of the failure, also kept in `err` unless one is already. */
int etr__jw_truncate(etr__jw *w, uint64_t off);

/* Write out everything buffered; returns 0 or the errno of the failure. A flush that fails
 * part way is cut back to the last mark the file took whole (plain output; gzip: to where
 * the flush began), `flush_kept` the count given with that mark (0: none). */
int etr__jw_flush(etr__jw *w);
/* A record ends here in the buffer; count: what the caller counts up to here since the last
 * flush (nodes). At most 65536 marks a flush are kept (past them, a partial flush keeps
 * the records up to the last one kept). */
bool etr__jw_marks_grow(etr__jw *w);
static inline void etr__jw_mark(etr__jw *w, uint64_t count) {
  if (w->n_marks == w->cap_marks && !etr__jw_marks_grow(w)) return;
  w->marks[w->n_marks].len = w->len; /* (the writer's every node: inline) */
  w->marks[w->n_marks].count = count;
  w->n_marks++;
}

/* From now on each flush writes one gzip member (level 1..9). 0, or -ENOMEM. */
int etr__jw_set_gzip(etr__jw *w, int level);

/* A gzip member holding in[0..n) uncompressed (stored blocks), into out (cap bytes): its
 * length, or 0 when it does not fit (n + 18 bytes, plus 5 per started 65535 bytes).
 * Async-signal-safe: no allocation, no lock (a fatal-signal handler writes its footer with it). */
size_t etr__gz_stored_member(unsigned char *out, size_t cap, const char *in, size_t n);

/* Make room for n more bytes by growing the buffer. False when memory is exhausted. */
bool etr__jw_reserve_slow(etr__jw *w, size_t n);
static inline bool etr__jw_reserve(etr__jw *w, size_t n) {
  return w->len + n <= w->cap || etr__jw_reserve_slow(w, n);
}

static inline void etr__jw_raw(etr__jw *w, const char *s, size_t n) {
  if (!etr__jw_reserve(w, n)) return;
  memcpy(w->buf + w->len, s, n);
  w->len += n;
}
#define ETR__JW_LIT(w, lit) etr__jw_raw((w), (lit), sizeof(lit) - 1)

static inline void etr__jw_char(etr__jw *w, char c) {
  if (!etr__jw_reserve(w, 1)) return;
  w->buf[w->len++] = c;
}

extern const char etr__digits2[201]; /* "00".."99" */

extern const uint64_t etr__pow10[20]; /* 10^0 .. 10^19 */

/* Decimal digits of v: from its bit length (log10(2) ~ 1233/4096 gives the digits of the
 * largest number of that length, at most one too many), then one compare. */
static inline unsigned etr__dec_len(uint64_t v) {
  if (v < 10) return 1;
  unsigned t = ((64u - (unsigned)__builtin_clzll(v)) * 1233u) >> 12;
  return t + (v >= etr__pow10[t]);
}

/* The 8 decimal digits of v < 10^8, leading zeros included, into p[0..8). Little-endian:
 * the digits are made in one word, two groups of four, then pairs, then single digits, each
 * step one multiply for all the lanes (division by 100 and 10 as multiply and shift, exact
 * below 10 000 and 100). Where the trace's timestamps (16 digits) and ids spend the
 * writer's time, a digit pair at a time was a 64-bit division each. */
static inline void etr__put_8digits(char *p, uint32_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint64_t x = (uint64_t)(v / 10000) | ((uint64_t)(v % 10000) << 32);
  uint64_t h = ((x * 10486) >> 20) & 0x0000007F0000007Full;
  x = h | ((x - h * 100) << 16);
  uint64_t t = ((x * 103) >> 10) & 0x000F000F000F000Full;
  x = t | ((x - t * 10) << 8);
  x += 0x3030303030303030ull;
  memcpy(p, &x, 8);
#else
  for (int i = 7; i >= 0; i--) {
    p[i] = (char)('0' + v % 10);
    v /= 10;
  }
#endif
}

/* Writes v in decimal into p[0..len) with len = etr__dec_len(v), and nothing past it. */
static inline void etr__put_dec(char *p, uint64_t v, unsigned len) {
  char *q = p + len;
  while (v >= 100000000u) {
    uint64_t hi = v / 100000000u;
    q -= 8;
    etr__put_8digits(q, (uint32_t)(v - hi * 100000000u));
    v = hi;
  }
  uint32_t w = (uint32_t)v; /* (32-bit division from here on) */
  while (w >= 100) {
    unsigned i = (w % 100) * 2;
    w /= 100;
    q -= 2;
    q[0] = etr__digits2[i];
    q[1] = etr__digits2[i + 1];
  }
  if (w >= 10) {
    q -= 2;
    q[0] = etr__digits2[w * 2];
    q[1] = etr__digits2[w * 2 + 1];
  } else {
    *--q = (char)('0' + w);
  }
}

/* Cursor writing, for hot spots: reserve the most a piece can take (etr__jw_begin returns
 * NULL when memory is exhausted), write with the unchecked etr__put_* functions, which
 * return the new cursor, then etr__jw_end. */
static inline char *etr__jw_begin(etr__jw *w, size_t max) {
  return etr__jw_reserve(w, max) ? w->buf + w->len : NULL;
}
static inline void etr__jw_end(etr__jw *w, char *o) { w->len = (size_t)(o - w->buf); }

#define ETR__U64_MAX_LEN 20
#define ETR__I64_MAX_LEN 20
/* Escaped length of n bytes is at most this (a control byte becomes \u00XX). */
#define ETR__ESCAPED_MAX(n) ((size_t)(n)*6)

static inline char *etr__put_u64(char *o, uint64_t v) {
  if (v < 10) { /* (the most frequent: counts, flags, small ids) */
    *o = (char)('0' + v);
    return o + 1;
  }
  unsigned len = etr__dec_len(v);
  etr__put_dec(o, v, len);
  return o + len;
}
static inline char *etr__put_i64(char *o, int64_t v) {
  if (v < 0) *o++ = '-';
  return etr__put_u64(o, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
}
#define ETR__PUT_LIT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) + sizeof(lit) - 1)

/* The escaped bytes of s (no quotes); counts replaced invalid UTF-8 in *replaced. */
char *etr__put_str_body_any(char *o, const char *s, size_t n, uint64_t *replaced);
extern const bool etr__json_plain[256]; /* bytes copied as they are */
static inline char *etr__put_str_body(char *o, const char *s, size_t n, uint64_t *replaced) {
  if (n <= 16) { /* short names (dtypes, devices): inline, byte by byte */
    size_t i = 0;
    while (i < n && etr__json_plain[(unsigned char)s[i]]) {
      o[i] = s[i];
      i++;
    }
    if (i == n) return o + n;
    return etr__put_str_body_any(o + i, s + i, n - i, replaced);
  }
  return etr__put_str_body_any(o, s, n, replaced);
}
static inline char *etr__put_str(char *o, const char *s, size_t n, uint64_t *replaced) {
  *o++ = '"';
  o = etr__put_str_body(o, s, n, replaced);
  *o++ = '"';
  return o;
}

/* etr__put_str for a string the caller knows to need no escaping (plain: every byte in
 * etr__json_plain), copied as it is; else escaped. */
static inline char *etr__put_str_known(char *o, const char *s, size_t n, bool plain,
                                       uint64_t *replaced) {
  if (!plain) return etr__put_str(o, s, n, replaced);
  *o++ = '"';
  memcpy(o, s, n);
  o += n;
  *o++ = '"';
  return o;
}

static inline void etr__jw_u64(etr__jw *w, uint64_t v) {
  char *o = etr__jw_begin(w, ETR__U64_MAX_LEN);
  if (o) etr__jw_end(w, etr__put_u64(o, v));
}

static inline void etr__jw_i64(etr__jw *w, int64_t v) {
  char *o = etr__jw_begin(w, ETR__I64_MAX_LEN);
  if (o) etr__jw_end(w, etr__put_i64(o, v));
}
/* Finite doubles in shortest round-trip form; NaN and infinities as "nan", "inf", "-inf". */
void etr__jw_double(etr__jw *w, double v);
/* A finite double as JSON number text at buf (ETR__DOUBLE_MAX_LEN bytes, NUL-terminated):
 * the shortest of 15, 16 and 17 digits that reads back as v, a whole number with ".0" (a
 * double never reads as an int: docs/FORMAT.md, Values). Returns its length (at most 26). */
#define ETR__DOUBLE_MAX_LEN 32
size_t etr__fmt_double(char *buf, double v);

/* A quoted JSON string of n bytes. */
void etr__jw_str(etr__jw *w, const char *s, size_t n);
/* The escaped bytes only, no quotes (to build one string out of several pieces). */
void etr__jw_str_body(etr__jw *w, const char *s, size_t n);

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when the bytes there are invalid
 * (overlong forms, surrogates, code points above U+10FFFF, truncated sequences); n >= 1 bytes
 * are readable at s. */
static inline size_t etr__utf8_seq(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
    if (c == 0xF4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
    return 4;
  }
  return 0;
}

/* Length of the longest prefix of s[0..n) of at most max bytes that does not split a UTF-8
 * sequence (only well-formed lead bytes are respected; invalid bytes are single units). */
size_t etr__utf8_cut(const char *s, size_t n, size_t max);

#endif
