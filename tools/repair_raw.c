/* `etr repair`: the raw stream (repair.h). While the reader parses the input and hands over
 * each complete node with its offset, this stream reads the same input a second time and
 * copies its bytes unchanged: the header, the separators and each kept node byte for byte.
 * It reads through the reader's own byte source (rd_source), so gzip and zstd input is
 * decompressed by the one implementation the reader uses, and where that source says a cut
 * or corrupt stream ends is where repair stops. An input that cannot be read twice (a pipe)
 * is first spooled to an unlinked temporary file (rp_raw_source).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "repair.h"

#define CMD "repair"

/* Why the raw stream stops where the source ended, or NULL at the end of a whole input. */
static const char *raw_stop_reason(const rawsrc *s, rd_source_end end) {
  bool gz = rd_source_is_gzip(s->src);
  switch (end) {
    case RD_SRC_CUT:
      return gz ? "the gzip stream is cut short" : "the zstd stream is cut short";
    case RD_SRC_CORRUPT:
      return gz ? "the gzip data is corrupt" : "the zstd data is corrupt";
    case RD_SRC_NO_RESET:
      return "gzip: cannot reset";
    default:
      return NULL;
  }
}

/* Makes buf[pos..len) non-empty. Returns bytes available, 0 at the end, -1 on read error. */
static ssize_t raw_fill(rawsrc *s) {
  if (s->pos < s->len) return (ssize_t)(s->len - s->pos);
  if (s->eof) return 0;
  s->off += s->len;
  s->len = s->pos = 0;
  const unsigned char *p = NULL;
  ssize_t k = rd_source_read(s->src, &p);
  if (k < 0) {
    s->err = rd_source_errno(s->src);
    return -1;
  }
  rd_source_end end = rd_source_ended(s->src, NULL);
  if (end != RD_SRC_OPEN) {
    s->eof = true;
    s->stop = raw_stop_reason(s, end);
  }
  s->buf = p;
  s->len = (size_t)k;
  return k;
}

uint64_t rp_raw_at(const rawsrc *s) { return s->off + s->pos; }

/* Copies the input up to offset `to` (or the end) to o (NULL: skips). Returns the offset
 * reached, or UINT64_MAX after a read error. */
uint64_t rp_raw_copy(rawsrc *s, an_out *o, uint64_t to) {
  while (rp_raw_at(s) < to) {
    ssize_t k = raw_fill(s);
    if (k < 0) return UINT64_MAX;
    if (k == 0) break;
    uint64_t want = to - rp_raw_at(s);
    size_t n = want < (uint64_t)k ? (size_t)want : (size_t)k;
    if (o) an_out_raw(o, (const char *)s->buf + s->pos, n);
    s->pos += n;
  }
  return rp_raw_at(s);
}

/* Copies one JSON object starting at the current byte (a '{') to o and returns the offset
 * just past its closing '}'; 0 when the input does not hold one there (which the reader,
 * having parsed it, rules out), UINT64_MAX after a read error. */
uint64_t rp_raw_copy_object(rawsrc *s, an_out *o) {
  size_t depth = 0;
  bool in_str = false, esc = false, started = false;
  for (;;) {
    ssize_t k = raw_fill(s);
    if (k < 0) return UINT64_MAX;
    if (k == 0) return 0;
    const unsigned char *p = s->buf + s->pos, *e = s->buf + s->len, *start = p;
    if (!started) {
      if (*p != '{') return 0;
      started = true;
    }
    bool done = false;
    while (p < e) {
      if (esc) {
        esc = false;
        p++;
      } else if (in_str) {
        while (p < e && *p != '"' && *p != '\\') p++;
        if (p == e) break;
        if (*p == '\\')
          esc = true;
        else
          in_str = false;
        p++;
      } else {
        unsigned char c = *p++;
        if (c == '"') {
          in_str = true;
        } else if (c == '{' || c == '[') {
          depth++;
        } else if (c == '}' || c == ']') {
          if (--depth == 0) {
            done = true;
            break;
          }
        }
      }
    }
    an_out_raw(o, (const char *)start, (size_t)(p - start));
    s->pos += (size_t)(p - start);
    if (done) return rp_raw_at(s);
  }
}

/* Copies the header to o: the input up to and including the '[' that opens the top-level
 * "nodes" array. Returns the offset after it; 0 when there is none (which the reader, having
 * read the header, rules out), UINT64_MAX after a read error. */
uint64_t rp_raw_copy_header(rawsrc *s, an_out *o) {
  size_t depth = 0, klen = 0;
  bool in_str = false, esc = false, str_top = false;
  int st = 0; /* 1: a top-level string "nodes" was read, 2: then its ':' */
  char key[6];
  for (;;) {
    ssize_t k = raw_fill(s);
    if (k < 0) return UINT64_MAX;
    if (k == 0) return 0;
    const unsigned char *p = s->buf + s->pos, *e = s->buf + s->len, *start = p;
    bool done = false;
    while (p < e && !done) {
      unsigned char c = *p++;
      if (in_str) {
        if (esc || c == '\\') {
          esc = !esc;
          klen = sizeof key; /* an escape: not the plain key "nodes" */
        } else if (c == '"') {
          in_str = false;
          if (str_top) st = klen == 5 && !memcmp(key, "nodes", 5) ? 1 : 0;
        } else if (klen < sizeof key) {
          key[klen++] = (char)c;
        } else {
          klen = sizeof key;
        }
        continue;
      }
      switch (c) {
        case '"':
          in_str = true;
          str_top = depth == 1;
          klen = 0;
          break;
        case ':':
          st = depth == 1 && st == 1 ? 2 : 0;
          break;
        case '[':
          if (depth == 1 && st == 2) done = true;
          depth++;
          st = 0;
          break;
        case '{':
          depth++;
          st = 0;
          break;
        case '}':
        case ']':
          if (depth) depth--;
          st = 0;
          break;
        case ' ':
        case '\t':
        case '\n':
        case '\r':
          break;
        default:
          st = 0;
          break;
      }
    }
    an_out_raw(o, (const char *)start, (size_t)(p - start));
    s->pos += (size_t)(p - start);
    if (done) return rp_raw_at(s);
  }
}

void rp_raw_free(rawsrc *s) { rd_source_close(s->src); }

/* The raw stream's source for an input that is open on in_fd (stdin, or FILE opened here):
 * a regular file is read again with pread from its current offset; anything else (a pipe,
 * a FIFO, <(...)) is first copied to an unlinked temporary file, which is then put on
 * stdin for the reader ("-"). Returns the fd for the raw stream (its base offset in *base;
 * *spooled says the reader must read "-"), or -1 after printing the error. */
int rp_raw_source(int in_fd, const char *file, uint64_t *base, bool *spooled) {
  struct stat st;
  *spooled = false;
  if (fstat(in_fd, &st) == 0 && S_ISREG(st.st_mode)) {
    off_t at = lseek(in_fd, 0, SEEK_CUR);
    if (at >= 0) {
      *base = (uint64_t)at;
      return in_fd;
    }
  }
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  char tmpl[4096];
  snprintf(tmpl, sizeof tmpl, "%s/etr-repair-XXXXXX", dir);
  int fd = mkstemp(tmpl);
  if (fd < 0) {
    cli_error(CMD, "%s: cannot create a temporary copy in %s: %s", file, dir, strerror(errno));
    return -1;
  }
  unlink(tmpl);
  char *buf = malloc(RAW_BLOCK);
  if (!buf) {
    cli_error(CMD, "%s: out of memory", file);
    goto fail;
  }
  for (;;) {
    ssize_t k = read(in_fd, buf, RAW_BLOCK);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      cli_error(CMD, "%s: read error: %s", file, strerror(errno));
      goto fail;
    }
    if (k == 0) break;
    for (ssize_t done = 0; done < k;) {
      ssize_t m = write(fd, buf + done, (size_t)(k - done));
      if (m < 0 && errno == EINTR) continue;
      if (m < 0) {
        cli_error(CMD, "%s: cannot write the temporary copy in %s: %s", file, dir, strerror(errno));
        goto fail;
      }
      done += m;
    }
  }
  free(buf);
  buf = NULL;
  if (lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, STDIN_FILENO) < 0) {
    cli_error(CMD, "%s: cannot read back the temporary copy: %s", file, strerror(errno));
    goto fail;
  }
  *base = 0;
  *spooled = true;
  return fd;
fail:
  free(buf);
  close(fd);
  return -1;
}
