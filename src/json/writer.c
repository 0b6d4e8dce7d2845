/* Streaming JSON output. Hand-written rather than a library: the output side needs only
 * numbers, escaped strings and raw punctuation into one buffer, and the writer thread's cost
 * per node is dominated by these few loops (see docs/BENCHMARKS.md). */
#include "json/writer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define JW_MIN_CAP (64u * 1024u)

int etr__jw_init(etr__jw *w, int fd, size_t cap) {
  memset(w, 0, sizeof *w);
  if (cap < JW_MIN_CAP) cap = JW_MIN_CAP;
  w->buf = malloc(cap);
  if (!w->buf) return -ENOMEM;
  w->cap = cap;
  w->fd = fd;
  return 0;
}

void etr__jw_free(etr__jw *w) {
  free(w->buf);
  w->buf = NULL;
  w->len = w->cap = 0;
}

int etr__jw_flush(etr__jw *w) {
  if (w->fd < 0) return w->err;
  size_t off = 0;
  while (off < w->len && w->err == 0) {
    ssize_t n = write(w->fd, w->buf + off, w->len - off);
    if (n > 0) {
      off += (size_t)n;
      w->written += (uint64_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      w->err = n < 0 ? errno : EIO;
    }
  }
  w->len = 0; /* after an error the rest is discarded: the caller counts what was lost */
  return w->err;
}

bool etr__jw_reserve_slow(etr__jw *w, size_t n) {
  if (!w->buf) return false;
  size_t cap = w->cap;
  while (cap < w->len + n) cap *= 2;
  char *p = realloc(w->buf, cap);
  if (!p) return false;
  w->buf = p;
  w->cap = cap;
  return true;
}

const char etr__digits2[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

void etr__jw_double(etr__jw *w, double v) {
  if (isnan(v)) {
    ETR__JW_LIT(w, "\"nan\"");
    return;
  }
  if (isinf(v)) {
    if (v > 0)
      ETR__JW_LIT(w, "\"inf\"");
    else
      ETR__JW_LIT(w, "\"-inf\"");
    return;
  }
  char tmp[40];
  int n = snprintf(tmp, sizeof tmp, "%.15g", v);
  if (strtod(tmp, NULL) != v) n = snprintf(tmp, sizeof tmp, "%.17g", v);
  /* The C locale is assumed by JSON; a ',' decimal separator would break the file. */
  for (int i = 0; i < n; i++)
    if (tmp[i] == ',') tmp[i] = '.';
  etr__jw_raw(w, tmp, (size_t)n);
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when the bytes there are invalid
 * (overlong forms, surrogates, code points above U+10FFFF, truncated sequences). */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
      return 0;
    if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
    if (c == 0xF4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
    return 4;
  }
  return 0;
}

size_t etr__utf8_cut(const char *s, size_t n, size_t max) {
  if (n <= max) return n;
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < max) {
    size_t k = utf8_seq(u + i, n - i);
    if (k == 0) k = 1;
    if (i + k > max) break;
    i += k;
  }
  return i;
}

/* Bytes that can be copied as they are: printable ASCII other than '"' and '\\'. */
static const bool plain_tab[256] = {
#define R16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
    R16(0), R16(0),                                           /* 0x00-0x1f control */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,           /* 0x20-0x2f: '"' */
    R16(1), R16(1),                                           /* 0x30-0x4f */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,           /* 0x50-0x5f: '\\' */
    R16(1),                                                   /* 0x60-0x6f */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,           /* 0x70-0x7f: DEL */
    R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0) /* 0x80-0xff */
#undef R16
};
static inline bool plain(unsigned char c) { return plain_tab[c]; }

void etr__jw_str_body(etr__jw *w, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    size_t run = i;
    while (run < n && plain(u[run])) run++;
    if (run > i) {
      etr__jw_raw(w, s + i, run - i);
      i = run;
      if (i == n) break;
    }
    unsigned char c = u[i];
    if (c >= 0x80) {
      size_t k = utf8_seq(u + i, n - i);
      if (k) {
        etr__jw_raw(w, s + i, k);
        i += k;
      } else {
        ETR__JW_LIT(w, "\xEF\xBF\xBD"); /* U+FFFD */
        w->replaced++;
        i++;
      }
      continue;
    }
    char esc[6] = {'\\', 0, 0, 0, 0, 0};
    size_t len = 2;
    switch (c) {
      case '"': esc[1] = '"'; break;
      case '\\': esc[1] = '\\'; break;
      case '\n': esc[1] = 'n'; break;
      case '\r': esc[1] = 'r'; break;
      case '\t': esc[1] = 't'; break;
      case '\b': esc[1] = 'b'; break;
      case '\f': esc[1] = 'f'; break;
      default: /* other control bytes and DEL */
        esc[1] = 'u';
        esc[2] = '0';
        esc[3] = '0';
        esc[4] = hex[c >> 4];
        esc[5] = hex[c & 15];
        len = 6;
    }
    etr__jw_raw(w, esc, len);
    i++;
  }
}

void etr__jw_str(etr__jw *w, const char *s, size_t n) {
  etr__jw_char(w, '"');
  etr__jw_str_body(w, s, n);
  etr__jw_char(w, '"');
}
