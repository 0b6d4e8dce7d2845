/* etr chrome's output buffer and its JSON writers (chrome_out.h). */
#include "chrome_out.h"

#include "lib_an_util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

/* ---- the buffer ---- */

static void write_out(ch_buf *b, const char *s, size_t len) {
  errno = 0;
  if (fwrite(s, 1, len, b->f) != len) b->write_err = errno ? errno : EIO; /* and ferror(f) */
}

void ch_flush(ch_buf *b) {
  if (b->f == NULL) return;
  if (b->len) write_out(b, b->p, b->len);
  b->len = 0;
  b->flushes++;
}

char *ch_room_slow(ch_buf *b, size_t n) {
  if (b->f != NULL) {
    if (b->cap == 0) {
      size_t cap = n > CH_FILE_BUF ? n : CH_FILE_BUF;
      b->p = malloc(cap);
      if (b->p == NULL) {
        b->failed = true;
        return NULL;
      }
      b->cap = cap;
    }
    ch_flush(b);
    if (n <= b->cap) return b->p;
    /* (not reached with requests <= CH_MAX_ROOM; grown below if it were) */
  }
  size_t cap = b->cap ? b->cap : 4096;
  while (cap - b->len < n) {
    if (cap > SIZE_MAX / 2) {
      b->failed = true;
      return NULL;
    }
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  if (p == NULL) {
    b->failed = true;
    return NULL;
  }
  b->p = p;
  b->cap = cap;
  return b->p + b->len;
}

void ch_raw(ch_buf *b, const char *s, size_t len) {
  if (b->f != NULL && len > CH_MAX_ROOM) {
    ch_flush(b);
    write_out(b, s, len);
    return;
  }
  char *p = ch_room(b, len);
  if (p == NULL) return;
  memcpy(p, s, len);
  b->len += len;
}

void ch_fmt(ch_buf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    ch_raw(b, small, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (big == NULL) {
    b->failed = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  ch_raw(b, big, (size_t)n);
  free(big);
}

void ch_free(ch_buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

/* ---- strings ---- */

/* 1: a byte written as it is in a JSON string (0x20..0x7f but '"' and '\\'). */
static const unsigned char plain[256] = {
    ['"'] = 0, [' '] = 1, ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1,  ['\''] = 1,
    ['('] = 1, [')'] = 1, ['*'] = 1, ['+'] = 1, [','] = 1, ['-'] = 1, ['.'] = 1,  ['/'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,  ['7'] = 1,
    ['8'] = 1, ['9'] = 1, [':'] = 1, [';'] = 1, ['<'] = 1, ['='] = 1, ['>'] = 1,  ['?'] = 1,
    ['@'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1,  ['G'] = 1,
    ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1,  ['O'] = 1,
    ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1,  ['W'] = 1,
    ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['['] = 1, [']'] = 1, ['^'] = 1, ['_'] = 1,  ['`'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1,  ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1,  ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1,  ['x'] = 1,
    ['y'] = 1, ['z'] = 1, ['{'] = 1, ['|'] = 1, ['}'] = 1, ['~'] = 1, [0x7f] = 1,
};

static const char hex[] = "0123456789abcdef";

/* The byte(s) at s[i] that are not plain ASCII, escaped or checked as UTF-8, written at *pp;
 * returns the index after them. At most 6 bytes out per byte in. */
static size_t jstr_special(const unsigned char *s, size_t len, size_t i, char **pp) {
  char *p = *pp;
  unsigned char c = s[i];
  if (c >= 0x80) {
    size_t n = etr__utf8_seq(s + i, len - i);
    if (n == 0) {
      memcpy(p, "\xEF\xBF\xBD", 3); /* U+FFFD */
      *pp = p + 3;
      return i + 1;
    }
    memcpy(p, s + i, n);
    *pp = p + n;
    return i + n;
  }
  p[0] = '\\';
  switch (c) {
    case '"':
    case '\\':
      p[1] = (char)c;
      *pp = p + 2;
      break;
    case '\n':
      p[1] = 'n';
      *pp = p + 2;
      break;
    case '\t':
      p[1] = 't';
      *pp = p + 2;
      break;
    case '\r':
      p[1] = 'r';
      *pp = p + 2;
      break;
    default: /* another control character: \u00XX */
      memcpy(p + 1, "u00", 3);
      p[4] = hex[c >> 4];
      p[5] = hex[c & 15];
      *pp = p + 6;
      break;
  }
  return i + 1;
}

/* A word of 8 bytes has one that is not plain: >= 0x80, < 0x20, '"' or '\\'. A byte below
 * 0x80 gets its high bit set by subtracting 0x20 when it is below 0x20, by subtracting 1 from
 * it xor '"' (or '\\') when it is that character; a borrow into the next byte comes only
 * from such a byte. So the answer is exact as to whether there is one (not which). */
static inline bool word_special(uint64_t w) {
  const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
  uint64_t q = w ^ (ones * '"'), bs = w ^ (ones * '\\');
  return ((w | (w - ones * 0x20) | (q - ones) | (bs - ones)) & highs) != 0;
}

#define CH_STR_PIECE 4096 /* bytes of a string escaped per request for room */

/* The bytes s[i..end) escaped at *pp (room: 6 bytes per byte); returns the index reached
 * (`end`, or up to 3 bytes past it when a UTF-8 sequence runs on) and moves *pp. */
static inline size_t jstr_run(const unsigned char *s, size_t len, size_t i, size_t end, char **pp) {
  char *p = *pp;
  const size_t start = i;
  while (i < end && end - i >= 8) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    if (!word_special(w)) {
      memcpy(p, s + i, 8);
      p += 8;
      i += 8;
      continue;
    }
    for (size_t stop = i + 8; i < stop;) {
      if (plain[s[i]])
        *p++ = (char)s[i++];
      else
        i = jstr_special(s, len, i, &p);
    }
  }
  if (i < end && end - start >= 8) {
    /* The last word, which ends at `end`, when all of its bytes are plain: the ones before i
     * were written as they are, just before p, so the word is written over them. */
    uint64_t w;
    memcpy(&w, s + end - 8, 8);
    if (!word_special(w)) {
      size_t back = i - (end - 8);
      memcpy(p - back, s + end - 8, 8);
      p += end - i;
      i = end;
    }
  }
  while (i < end) {
    if (plain[s[i]])
      *p++ = (char)s[i++];
    else
      i = jstr_special(s, len, i, &p);
  }
  *pp = p;
  return i;
}

void ch_jstr(ch_buf *b, const char *str, size_t len) {
  const unsigned char *s = (const unsigned char *)str;
  char *p;
  if (len <= CH_STR_PIECE) { /* one room for all: 6 bytes out per byte in at most */
    p = ch_room(b, 6 * len + 2);
    if (p == NULL) return;
    *p++ = '"';
    jstr_run(s, len, 0, len, &p);
    *p++ = '"';
    ch_done(b, p);
    return;
  }
  p = ch_room(b, 1);
  if (p == NULL) return;
  *p++ = '"';
  ch_done(b, p);
  for (size_t i = 0; i < len;) {
    size_t end = len - i > CH_STR_PIECE ? i + CH_STR_PIECE : len;
    /* 6 bytes out per byte in at most; a UTF-8 sequence may run 3 bytes past `end` */
    p = ch_room(b, 6 * (end - i) + 8);
    if (p == NULL) return;
    i = jstr_run(s, len, i, end, &p);
    ch_done(b, p);
  }
  p = ch_room(b, 1);
  if (p == NULL) return;
  *p++ = '"';
  ch_done(b, p);
}

/* ---- values ---- */

static void jval_number_or_literal(ch_buf *b, const rd_jval *v) {
  char *p = ch_room(b, ETR__DOUBLE_MAX_LEN); /* (the longest value written here) */
  if (p == NULL) return;
  switch (v->kind) {
    case ETR_J_NULL:
      memcpy(p, "null", 4);
      p += 4;
      break;
    case ETR_J_BOOL:
      if (v->v.b) {
        memcpy(p, "true", 4);
        p += 4;
      } else {
        memcpy(p, "false", 5);
        p += 5;
      }
      break;
    case ETR_J_INT:
      p = etr__put_i64(p, v->v.i);
      break;
    case ETR_J_UINT:
      p = etr__put_u64(p, v->v.u);
      break;
    case ETR_J_DOUBLE:
      if (isfinite(v->v.d)) {
        p += etr__fmt_double(p, v->v.d);
      } else {
        const char *t = isnan(v->v.d) ? "\"nan\"" : v->v.d > 0 ? "\"inf\"" : "\"-inf\"";
        size_t n = strlen(t);
        memcpy(p, t, n);
        p += n;
      }
      break;
    default:
      break;
  }
  ch_done(b, p);
}

void ch_jval(ch_buf *b, const rd_jval *v) {
  char *p;
  switch (v->kind) {
    case ETR_J_STRING:
      ch_jstr(b, v->v.str.s, v->v.str.len);
      return;
    case ETR_J_ARRAY: {
      const rd_jval *it = v->v.arr.items;
      size_t n = v->v.arr.n;
      p = ch_room(b, 1);
      if (p == NULL) return;
      *p++ = '[';
      ch_done(b, p);
      for (size_t i = 0; i < n; i++) {
        p = ch_room(b, 1 + ETR__I64_MAX_LEN); /* a comma and an integer */
        if (p == NULL) return;
        if (i) *p++ = ',';
        if (it[i].kind == ETR_J_INT) {
          ch_done(b, etr__put_i64(p, it[i].v.i));
        } else if (it[i].kind == ETR_J_STRING) {
          ch_done(b, p);
          ch_jstr(b, it[i].v.str.s, it[i].v.str.len);
        } else {
          ch_done(b, p);
          ch_jval(b, &it[i]);
        }
      }
      p = ch_room(b, 1);
      if (p == NULL) return;
      *p++ = ']';
      ch_done(b, p);
      return;
    }
    case ETR_J_OBJECT:
      p = ch_room(b, 1);
      if (p == NULL) return;
      *p++ = '{';
      ch_done(b, p);
      for (size_t i = 0; i < v->v.obj.n; i++) {
        if (i) {
          p = ch_room(b, 1);
          if (p == NULL) return;
          *p++ = ',';
          ch_done(b, p);
        }
        ch_jstr(b, v->v.obj.items[i].key, v->v.obj.items[i].key_len);
        p = ch_room(b, 1);
        if (p == NULL) return;
        *p++ = ':';
        ch_done(b, p);
        ch_jval(b, &v->v.obj.items[i].val);
      }
      p = ch_room(b, 1);
      if (p == NULL) return;
      *p++ = '}';
      ch_done(b, p);
      return;
    default:
      jval_number_or_literal(b, v);
      return;
  }
}
