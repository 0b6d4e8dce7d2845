/* Streaming JSON output. Hand-written rather than a library: the output side needs only
 * numbers, escaped strings and raw punctuation into one buffer, and the writer thread's cost
 * per node is dominated by these few loops (see docs/BENCHMARKS.md). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fallocate */
#endif
#include "json/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef ETR_WITH_ISAL
#include <isa-l/igzip_lib.h>
#else
#include <zlib.h>
#endif

#define JW_MIN_CAP (64u * 1024u)

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Write len bytes of p, retrying short writes; false (err set) on failure. A pipe or socket
 * is non-blocking (trace.c): when it is full, wait for room, but give up (ETIMEDOUT) once it
 * has taken nothing for stall_ms: a reader that stopped reading must not block the writer,
 * and through it every recording thread, forever. */
static bool write_all(etr__jw *w, const void *p, size_t len) {
  const char *b = p;
  size_t off = 0;
  int64_t since = -1; /* when the fd last stopped taking bytes */
  while (off < len && w->err == 0) {
    ssize_t n = write(w->fd, b + off, len - off);
    if (n > 0) {
      off += (size_t)n;
      w->written += (uint64_t)n;
      atomic_fetch_add_explicit(&w->progress, (uint64_t)n, memory_order_relaxed);
      since = -1;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int64_t now = mono_ms();
      if (since < 0) since = now;
      int left = w->stall_ms < 0 ? -1 : (int)(w->stall_ms - (now - since));
      if (w->stall_ms >= 0 && left <= 0) {
        w->err = ETIMEDOUT;
        break;
      }
      struct pollfd pfd = {w->fd, POLLOUT, 0};
      if (poll(&pfd, 1, left > 100 || left < 0 ? 100 : left) < 0 && errno != EINTR) w->err = errno;
    } else {
      w->err = n < 0 ? errno : EIO;
    }
  }
  return w->err == 0;
}

#ifdef ETR_WITH_ISAL
/* gzip through ISA-L's igzip: at its level 1 about 8x zlib's level 1 on traces (1.5 GB/s
 * against 0.19-0.25 on this project's 2-core VM, output 3% larger; docs/BENCHMARKS.md), so
 * that a `.json.gz` trace's writer keeps up with its recording threads. */
typedef struct gz_state {
  struct isal_zstream zs;
  uint32_t level, level_buf_size;
  uint8_t level_buf[]; /* the level's working memory */
} gz_state;

/* A fresh stream for the next member (isal_deflate_reset would not write the next
 * member's gzip header). */
static void member_start(gz_state *g) {
  isal_deflate_init(&g->zs);
  g->zs.level = g->level;
  g->zs.level_buf = g->level_buf;
  g->zs.level_buf_size = g->level_buf_size;
  g->zs.gzip_flag = IGZIP_GZIP;
  g->zs.end_of_stream = 1; /* each flush is one whole member */
  g->zs.flush = NO_FLUSH;
}

int etr__jw_set_gzip(etr__jw *w, int level) {
  if (w->gz) return 0;
  /* ISA-L has levels 0-3; 1 (zlib's fastest too) is what traces use */
  int lv = level < 0 ? 1 : level > 3 ? 3 : level;
  static const uint32_t bufs[4] = {ISAL_DEF_LVL0_DEFAULT, ISAL_DEF_LVL1_DEFAULT,
                                   ISAL_DEF_LVL2_DEFAULT, ISAL_DEF_LVL3_DEFAULT};
  gz_state *g = calloc(1, sizeof *g + bufs[lv]);
  unsigned char *zbuf = malloc(JW_MIN_CAP);
  if (!g || !zbuf) {
    free(g);
    free(zbuf);
    return -ENOMEM;
  }
  g->level = (uint32_t)lv;
  g->level_buf_size = bufs[lv];
  member_start(g);
  w->gz = g;
  w->zbuf = zbuf;
  w->zcap = JW_MIN_CAP;
  return 0;
}

/* The buffer as one gzip member. */
static void flush_gzip(etr__jw *w) {
  gz_state *g = w->gz;
  g->zs.next_in = (uint8_t *)w->buf;
  g->zs.avail_in = (uint32_t)w->len; /* the buffer never reaches 4 GiB between flushes */
  do {
    g->zs.next_out = w->zbuf;
    g->zs.avail_out = (uint32_t)w->zcap;
    if (isal_deflate(&g->zs) != COMP_OK) {
      w->err = EIO;
      break;
    }
    if (!write_all(w, w->zbuf, w->zcap - g->zs.avail_out)) break;
  } while (g->zs.internal_state.state != ZSTATE_END);
  member_start(g);
}

static void gz_free(void *gz) { free(gz); }
#else
int etr__jw_set_gzip(etr__jw *w, int level) {
  if (w->gz) return 0;
  z_stream *zs = calloc(1, sizeof *zs);
  unsigned char *zbuf = malloc(JW_MIN_CAP);
  /* windowBits 15 + 16: a gzip wrapper; memLevel 8 (zlib's default). */
  if (!zs || !zbuf || deflateInit2(zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    free(zs);
    free(zbuf);
    return -ENOMEM;
  }
  w->gz = zs;
  w->zbuf = zbuf;
  w->zcap = JW_MIN_CAP;
  return 0;
}

/* The buffer as one gzip member. */
static void flush_gzip(etr__jw *w) {
  z_stream *zs = w->gz;
  zs->next_in = (Bytef *)w->buf;
  zs->avail_in = (uInt)w->len; /* the buffer never reaches 4 GiB between flushes */
  int zr;
  do {
    zs->next_out = w->zbuf;
    zs->avail_out = (uInt)w->zcap;
    zr = deflate(zs, Z_FINISH);
    size_t produced = w->zcap - zs->avail_out;
    if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && produced)) {
      w->err = EIO;
      break;
    }
    if (!write_all(w, w->zbuf, produced)) break;
  } while (zr != Z_STREAM_END);
  deflateReset(zs); /* the next flush starts a new member */
}

static void gz_free(void *gz) {
  deflateEnd(gz);
  free(gz);
}
#endif

size_t etr__gz_stored_member(unsigned char *out, size_t cap, const char *in, size_t n) {
  size_t blocks = n ? (n + 65534) / 65535 : 1; /* stored blocks hold 65535 bytes each */
  if (cap < 18 || n > cap - 18 || blocks * 5 > cap - 18 - n) return 0;
  static const unsigned char hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  size_t o = 0;
  for (size_t i = 0; i < sizeof hdr; i++) out[o++] = hdr[i];
  uint32_t crc = 0xffffffffu;
  size_t done = 0;
  do {
    size_t len = n - done > 65535 ? 65535 : n - done;
    out[o++] = done + len == n ? 1 : 0; /* BFINAL on the last block, BTYPE 00 (stored) */
    out[o++] = (unsigned char)(len & 0xff);
    out[o++] = (unsigned char)(len >> 8);
    out[o++] = (unsigned char)(~len & 0xff);
    out[o++] = (unsigned char)((~len >> 8) & 0xff);
    for (size_t i = 0; i < len; i++) {
      unsigned char c = (unsigned char)in[done + i];
      out[o++] = c;
      crc ^= c;
      for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    done += len;
  } while (done < n);
  crc ^= 0xffffffffu;
  for (int k = 0; k < 4; k++) out[o++] = (unsigned char)(crc >> (8 * k));
  for (int k = 0; k < 4; k++) out[o++] = (unsigned char)((uint32_t)n >> (8 * k));
  return o;
}

int etr__jw_init(etr__jw *w, int fd, size_t cap) {
  memset(w, 0, sizeof *w);
  if (cap < JW_MIN_CAP) cap = JW_MIN_CAP;
  w->buf = malloc(cap);
  if (!w->buf) return -ENOMEM;
  w->cap = cap;
  w->fd = fd;
  w->stall_ms = -1;
  return 0;
}

void etr__jw_free(etr__jw *w) {
  if (w->gz) {
    gz_free(w->gz);
    free(w->zbuf);
    w->gz = NULL;
    w->zbuf = NULL;
  }
  free(w->buf);
  w->buf = NULL;
  w->len = w->cap = 0;
  free(w->marks);
  w->marks = NULL;
  w->n_marks = w->cap_marks = 0;
}

bool etr__jw_marks_grow(etr__jw *w) {
  uint32_t cap = w->cap_marks ? w->cap_marks * 2 : 256;
  if (cap > 65536) return false;
  void *m = realloc(w->marks, cap * sizeof *w->marks);
  if (!m) return false;
  w->marks = m;
  w->cap_marks = cap;
  return true;
}

void etr__jw_prealloc(etr__jw *w) {
  struct stat st;
  w->prealloc = !w->shared && w->fd >= 0 && fstat(w->fd, &st) == 0 && S_ISREG(st.st_mode);
  w->prealloc_end = 0;
}

/* Blocks reserved for the next n bytes: from 1 MiB ahead, up to 8 MiB ahead as the file
 * grows (a small trace reserves little; after kill -9 at most that much stays reserved past
 * the file's end until it is truncated or removed). A file system that cannot reserve
 * (EOPNOTSUPP), or a full disk, turns it off: the writes then go on as before, and report
 * a full disk themselves. */
static void reserve_ahead(etr__jw *w, size_t n) {
  uint64_t from = w->prealloc_end > w->written ? w->prealloc_end : w->written;
  if (w->written + n <= from) return;
  uint64_t step = w->written < (1u << 20)   ? (1u << 20)
                  : w->written > (8u << 20) ? (8u << 20)
                                            : w->written;
  uint64_t to = w->written + n + step;
  if (fallocate(w->fd, FALLOC_FL_KEEP_SIZE, (off_t)from, (off_t)(to - from)) != 0) {
    w->prealloc = false;
    return;
  }
  w->prealloc_end = to;
}

void etr__jw_trim(etr__jw *w) {
  if (w->fd < 0 || w->shared || w->prealloc_end <= w->written) return;
  /* (truncating to the size the file has frees its blocks past the end) */
  if (ftruncate(w->fd, (off_t)w->written) != 0 && w->err == 0) w->err = errno;
  w->prealloc_end = 0;
}

int etr__jw_truncate(etr__jw *w, uint64_t off) {
  if (w->shared) { /* (what it holds is the host's too: as a pipe, it cannot be cut) */
    if (w->err == 0) w->err = ESPIPE;
    return ESPIPE;
  }
  if (ftruncate(w->fd, (off_t)off) != 0 || lseek(w->fd, (off_t)off, SEEK_SET) < 0) {
    int e = errno;
    if (w->err == 0) w->err = e;
    return e;
  }
  w->written = off;
  w->prealloc_end = 0; /* (the truncation freed what was reserved) */
  return 0;
}

int etr__jw_flush(etr__jw *w) {
  w->flush_kept = 0;
  if (w->fd < 0) {
    w->n_marks = 0;
    return w->err;
  }
  if (w->len && w->err == 0) {
    uint64_t start = w->written;
    if (w->prealloc) reserve_ahead(w, w->len);
    if (w->gz)
      flush_gzip(w);
    else
      write_all(w, w->buf, w->len);
    /* A flush that failed part way (a full disk takes what fits) is cut back to the end of
     * the last record the file took whole (the marks; gzip: to where the flush began, a
     * member boundary), so that the file ends on a node boundary and what the caller counts
     * as written is exactly what the file holds. A pipe cannot take bytes back: its reader
     * has them already. */
    if (w->err) {
      uint64_t got = w->written - start, keep = 0;
      for (uint32_t i = w->n_marks; !w->gz && i-- > 0;)
        if (w->marks[i].len <= got) {
          keep = w->marks[i].len;
          w->flush_kept = w->marks[i].count;
          break;
        }
      if (w->written > start + keep && etr__jw_truncate(w, start + keep) != 0) w->flush_kept = 0;
    }
  }
  w->n_marks = 0;
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

const uint64_t etr__pow10[20] = {1u,
                                 10u,
                                 100u,
                                 1000u,
                                 10000u,
                                 100000u,
                                 1000000u,
                                 10000000u,
                                 100000000u,
                                 1000000000u,
                                 10000000000u,
                                 100000000000u,
                                 1000000000000u,
                                 10000000000000u,
                                 100000000000000u,
                                 1000000000000000u,
                                 10000000000000000u,
                                 100000000000000000u,
                                 1000000000000000000u,
                                 10000000000000000000u};

const char etr__digits2[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

size_t etr__fmt_double(char *buf, double v) {
  /* The shortest of 15, 16 and 17 digits that reads back as v (0.7999999999999999, not
   * 0.79999999999999993; %.17g alone turns -0.1 into -0.10000000000000001). */
  int n = snprintf(buf, ETR__DOUBLE_MAX_LEN, "%.15g", v);
  if (strtod(buf, NULL) != v) n = snprintf(buf, ETR__DOUBLE_MAX_LEN, "%.16g", v);
  if (strtod(buf, NULL) != v) n = snprintf(buf, ETR__DOUBLE_MAX_LEN, "%.17g", v);
  /* The C locale is assumed by JSON; a ',' decimal separator would break the file. */
  for (int i = 0; i < n; i++)
    if (buf[i] == ',') buf[i] = '.';
  /* A whole number stays a floating-point one ("3.0", "-0.0", not "3", "-0"): a JSON reader
   * would take it for an int, and a replay run the op on ints (as PyTorch's "%f" does). */
  if (!memchr(buf, '.', (size_t)n) && !memchr(buf, 'e', (size_t)n)) {
    memcpy(buf + n, ".0", 3);
    n += 2;
  }
  return (size_t)n;
}

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
  char tmp[ETR__DOUBLE_MAX_LEN];
  etr__jw_raw(w, tmp, etr__fmt_double(tmp, v));
}

/* Only the bytes around max are looked at: a unit (a valid sequence, or one invalid byte)
 * straddles max only when u[max] continues a valid sequence that starts at most 3 bytes
 * before it, at a lead byte, which no earlier unit can contain. So the answer is the same as
 * a walk from the start, at a cost that does not grow with max. */
size_t etr__utf8_cut(const char *s, size_t n, size_t max) {
  if (n <= max) return n;
  const unsigned char *u = (const unsigned char *)s;
  if ((u[max] & 0xC0) != 0x80) return max;
  size_t j = max;
  while (j > 0 && max - j < 3 && (u[j] & 0xC0) == 0x80) j--;
  if ((u[j] & 0xC0) == 0x80) return max; /* a run of stray continuation bytes */
  size_t k = etr__utf8_seq(u + j, n - j);
  return k > 0 && j + k > max ? j : max;
}

/* Bytes that can be copied as they are: printable ASCII other than '"' and '\\'. */
const bool etr__json_plain[256] = {
#define R16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
    R16(0), R16(0), /* 0x00-0x1f control */
    1,      1,      0,      1,      1,      1,      1,      1,
    1,      1,      1,      1,      1,      1,      1,      1, /* 0x20-0x2f: '"' */
    R16(1), R16(1),                                            /* 0x30-0x4f */
    1,      1,      1,      1,      1,      1,      1,      1,
    1,      1,      1,      1,      0,      1,      1,      1, /* 0x50-0x5f: '\\' */
    R16(1),                                                    /* 0x60-0x6f */
    1,      1,      1,      1,      1,      1,      1,      1,
    1,      1,      1,      1,      1,      1,      1,      0,     /* 0x70-0x7f: DEL */
    R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0) /* 0x80-0xff */
#undef R16
};
static inline bool plain(unsigned char c) { return etr__json_plain[c]; }

/* Nonzero when one of the 8 bytes in x needs more than a copy: a control byte, '"', '\\',
 * DEL or any byte >= 0x80 (SWAR: each test sets the high bit of the bytes it matches). */
static inline uint64_t special8(uint64_t x) {
  const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\'), d = x ^ (ones * 0x7F);
  uint64_t lt20 = (x - ones * 0x20) & ~x;
  uint64_t zq = (q - ones) & ~q, zb = (b - ones) & ~b, zd = (d - ones) & ~d;
  return (lt20 | zq | zb | zd | x) & high;
}

char *etr__put_str_body_any(char *o, const char *s, size_t n, uint64_t *replaced) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    /* Most strings are plain ASCII: copy them 8 bytes at a time. */
    while (i + 8 <= n) {
      uint64_t x;
      memcpy(&x, s + i, 8);
      if (special8(x)) break;
      memcpy(o, &x, 8);
      o += 8;
      i += 8;
    }
    if (i == n) break;
    unsigned char c = u[i];
    if (plain(c)) {
      *o++ = (char)c;
      i++;
      continue;
    }
    if (c >= 0x80) {
      size_t k = etr__utf8_seq(u + i, n - i);
      if (k) {
        memcpy(o, s + i, k);
        o += k;
        i += k;
      } else {
        o = ETR__PUT_LIT(o, "\xEF\xBF\xBD"); /* U+FFFD */
        (*replaced)++;
        i++;
      }
      continue;
    }
    *o++ = '\\';
    switch (c) {
      case '"':
        *o++ = '"';
        break;
      case '\\':
        *o++ = '\\';
        break;
      case '\n':
        *o++ = 'n';
        break;
      case '\r':
        *o++ = 'r';
        break;
      case '\t':
        *o++ = 't';
        break;
      case '\b':
        *o++ = 'b';
        break;
      case '\f':
        *o++ = 'f';
        break;
      default: /* other control bytes and DEL */
        o[0] = 'u';
        o[1] = '0';
        o[2] = '0';
        o[3] = hex[c >> 4];
        o[4] = hex[c & 15];
        o += 5;
    }
    i++;
  }
  return o;
}

void etr__jw_str_body(etr__jw *w, const char *s, size_t n) {
  char *o = etr__jw_begin(w, ETR__ESCAPED_MAX(n));
  if (o) etr__jw_end(w, etr__put_str_body(o, s, n, &w->replaced));
}

void etr__jw_str(etr__jw *w, const char *s, size_t n) {
  char *o = etr__jw_begin(w, ETR__ESCAPED_MAX(n) + 2);
  if (o) etr__jw_end(w, etr__put_str(o, s, n, &w->replaced));
}
