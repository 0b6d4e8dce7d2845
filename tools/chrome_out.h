/* The output of etr chrome: a byte buffer written through a cursor. A writer asks for room
 * for the most bytes it may write (ch_room), writes them with plain stores and moves the end
 * (ch_done): one bounds check per piece instead of one per byte or per call, and no stdio
 * call per piece. The bytes are the same as lib_an_util.h's an_out_* writes (an_out_jstr,
 * an_out_jval, an_out_i64, ...), which tests/analysis/test_chrome_out.c checks.
 *
 * A buffer with a FILE is chrome's output: it is written to the file when full (so its
 * memory stays at CH_FILE_BUF whatever the output; a request for room is at most
 * CH_MAX_ROOM, long strings are written in pieces). A buffer without one grows in memory
 * (a thread's slices held until their parent is read).
 *
 * Internal to the etr command; not thread-safe. Memory running out is not fatal: the bytes
 * are dropped and `failed` says so.
 */
#ifndef ETR_TOOLS_CHROME_OUT_H
#define ETR_TOOLS_CHROME_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "json/reader.h"
#include "json/writer.h"

#define CH_FILE_BUF ((size_t)256 << 10) /* a file buffer's size */
#define CH_MAX_ROOM ((size_t)32 << 10)  /* the most room one request may ask of a file buffer */

typedef struct ch_buf {
  char *p;
  size_t len, cap;
  FILE *f;          /* NULL: a memory buffer that grows; else flushed to f when full */
  uint64_t flushes; /* times the bytes were written out to f (offsets from before are gone) */
  bool failed;      /* memory ran out: bytes were dropped */
  int write_err;    /* errno of the last write to f that failed (0: none) */
} ch_buf;

/* Room for n more bytes (n <= CH_MAX_ROOM for a file buffer), at the buffer's end: a file
 * buffer is written out first when they do not fit. NULL (and `failed`) when memory ran
 * out. */
char *ch_room_slow(ch_buf *b, size_t n);
static inline char *ch_room(ch_buf *b, size_t n) {
  if (b->cap - b->len >= n) return b->p + b->len;
  return ch_room_slow(b, n);
}
/* The bytes up to `end` (in the room just asked for) are written. */
static inline void ch_done(ch_buf *b, char *end) { b->len = (size_t)(end - b->p); }

/* Append len bytes (any length). */
void ch_raw(ch_buf *b, const char *s, size_t len);
#define CH_LIT(b, lit) ch_raw((b), (lit), sizeof(lit) - 1)
/* printf into the buffer (for the few lines that are not per op). */
void ch_fmt(ch_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A file buffer's bytes to its file (errors show in ferror of the file and write_err). */
void ch_flush(ch_buf *b);
/* Free the memory (a file buffer is not flushed). */
void ch_free(ch_buf *b);

/* ---- cursor writers: each writes at p and returns the new end ---- */

/* (integers: json/writer.h's etr__put_u64 and etr__put_i64, ETR__U64_MAX_LEN bytes at most) */
#define CH_US_MAX 25 /* bytes of the longest ch_us */

/* A time in ns as the trace-event format's µs: "12" or "12.345" (a fraction only when not
 * 0; INT64_MIN is written as -INT64_MAX). */
static inline char *ch_us(char *p, int64_t ns) {
  if (ns < 0) {
    *p++ = '-';
    ns = ns == INT64_MIN ? INT64_MAX : -ns;
  }
  p = etr__put_u64(p, (uint64_t)(ns / 1000));
  unsigned frac = (unsigned)(ns % 1000);
  if (frac) {
    p[0] = '.';
    p[1] = (char)('0' + frac / 100);
    memcpy(p + 2, etr__digits2 + 2 * (frac % 100), 2);
    p += 4;
  }
  return p;
}

/* ---- JSON ---- */

/* A JSON string with quotes, as an_out_jstr writes it: '"', '\\' and control characters
 * escaped, each invalid UTF-8 sequence replaced with U+FFFD. */
void ch_jstr(ch_buf *b, const char *s, size_t len);
/* A JSON value, compact, as an_out_jval writes it. */
void ch_jval(ch_buf *b, const rd_jval *v);

#endif /* ETR_TOOLS_CHROME_OUT_H */
