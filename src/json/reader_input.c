/* The byte source of the trace reader (reader.h, "the byte source"): an input's bytes,
 * decompressed when they are gzip or zstd (by magic bytes, whatever the file name), with
 * concatenated gzip members and zstd frames read as one stream.
 *
 * Its own file because two consumers read inputs this way: the reader (reader.c, which parses
 * what it hands over) and `etr repair`, whose second, raw stream copies the same bytes to its
 * output; one implementation means both see the same bytes and the same end. It knows nothing
 * of JSON. How an input ends is a fact it reports (rd_source_end), not an error: the reader
 * makes "gzip: the compressed stream is truncated" of a cut stream, repair makes it the place
 * where it stops copying.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "etr/common.h"
#include "json/reader.h"

#define SRC_OUT_BLOCK (64u * 1024u) /* the most one rd_source_read hands over */

struct rd_source {
  int fd;
  bool positional; /* pread from base + file_off, else read() */
  uint64_t base;
  uint64_t file_off; /* input bytes read so far (compressed) */
  size_t block;      /* input bytes read at once */
  bool sniffed, eof;
  rd_source_end end;
  const char *detail; /* the decompressor's own words when end is RD_SRC_CORRUPT */
  int err;            /* errno of a read error or of memory running out */
  unsigned char *in;  /* input bytes */
  size_t in_len, in_pos;
  bool gz, gz_init, gz_end;
  z_stream zs;
  ZSTD_DStream *zst;
  size_t zst_last;    /* ZSTD_decompressStream's last answer: 0 = a frame just ended */
  bool out_full;      /* the last decompression filled out: it may hold more without input */
  unsigned char *out; /* decompressed bytes */
  /* What rd_source_read_into took from a block but could not hand over (n smaller than the
   * block); given out first by the next rd_source_read_into. */
  const unsigned char *left;
  size_t left_n;
};

int rd_source_open(int fd, uint64_t base, bool positional, size_t block, rd_source **out) {
  *out = NULL;
  rd_source *s = calloc(1, sizeof *s);
  if (!s) return ETR_ENOMEM;
  s->fd = fd;
  s->base = base;
  s->positional = positional;
  s->block = block ? block : 256u * 1024u;
  s->in = malloc(s->block);
  if (!s->in) {
    free(s);
    return ETR_ENOMEM;
  }
  *out = s;
  return 0;
}

/* Up to n input bytes to dst: bytes read, 0 at the end of the file, -1 on a read error. */
static ssize_t src_read(rd_source *s, unsigned char *dst, size_t n) {
  for (;;) {
    ssize_t k =
        s->positional ? pread(s->fd, dst, n, (off_t)(s->base + s->file_off)) : read(s->fd, dst, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      s->err = errno;
      return -1;
    }
    s->file_off += (uint64_t)k;
    if (k == 0) s->eof = true;
    return k;
  }
}

/* Makes in[in_pos..in_len) non-empty: bytes available, 0 at the end of the file, -1. */
static ssize_t src_fill(rd_source *s) {
  if (s->in_pos < s->in_len) return (ssize_t)(s->in_len - s->in_pos);
  if (s->eof) return 0;
  ssize_t k = src_read(s, s->in, s->block);
  if (k < 0) return -1;
  s->in_pos = 0;
  s->in_len = (size_t)k;
  return k;
}

/* The first bytes: at least four, to tell gzip (2 magic bytes) and zstd (4) from plain. */
static int src_sniff(rd_source *s) {
  s->sniffed = true;
  if (src_fill(s) < 0) return -1;
  while (s->in_len < 4 && !s->eof) {
    ssize_t m = src_read(s, s->in + s->in_len, s->block - s->in_len);
    if (m < 0) return -1;
    s->in_len += (size_t)m;
  }
  const unsigned char *m = s->in;
  if (s->in_len >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) {
    s->zst = ZSTD_createDStream();
    s->out = malloc(SRC_OUT_BLOCK);
    if (!s->zst || !s->out || ZSTD_isError(ZSTD_initDStream(s->zst))) {
      s->err = ENOMEM;
      return -1;
    }
    s->zst_last = 1;
  } else if (s->in_len >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
    s->gz = true;
    if (inflateInit2(&s->zs, 15 + 32) != Z_OK) {
      s->err = ENOMEM;
      return -1;
    }
    s->gz_init = true;
    s->out = malloc(SRC_OUT_BLOCK);
    if (!s->out) {
      s->err = ENOMEM;
      return -1;
    }
  }
  return 0;
}

/* The stream ends here, in the way `how`; `produced` bytes of the last call still go out. */
static ssize_t src_stop(rd_source *s, rd_source_end how, const char *detail, size_t produced,
                        const unsigned char **p) {
  s->end = how;
  s->detail = detail;
  s->eof = true;
  s->in_pos = s->in_len;
  *p = s->out;
  return (ssize_t)produced;
}

ssize_t rd_source_read(rd_source *s, const unsigned char **p) {
  *p = NULL;
  if (s->end != RD_SRC_OPEN) return 0;
  if (!s->sniffed && src_sniff(s) < 0) return -1;
  if (s->zst) {
    for (;;) {
      ssize_t k = src_fill(s);
      if (k < 0) return -1;
      /* at the end of the input, a decompressor whose last call filled the output block may
       * still hold bytes of what it read: they come out before the end is reported */
      if (k == 0 && !s->out_full)
        return src_stop(s, s->zst_last != 0 ? RD_SRC_CUT : RD_SRC_DONE, NULL, 0, p);
      ZSTD_inBuffer in = {s->in + s->in_pos, s->in_len - s->in_pos, 0};
      ZSTD_outBuffer out = {s->out, SRC_OUT_BLOCK, 0};
      size_t z = ZSTD_decompressStream(s->zst, &out, &in);
      s->in_pos += in.pos;
      s->out_full = out.pos == SRC_OUT_BLOCK;
      if (ZSTD_isError(z)) return src_stop(s, RD_SRC_CORRUPT, ZSTD_getErrorName(z), out.pos, p);
      s->zst_last = z;
      if (out.pos) {
        *p = s->out;
        return (ssize_t)out.pos;
      }
    }
  }
  if (!s->gz) {
    ssize_t k = src_fill(s);
    if (k < 0) return -1;
    if (k == 0) return src_stop(s, RD_SRC_DONE, NULL, 0, p);
    size_t n = (size_t)k > SRC_OUT_BLOCK ? SRC_OUT_BLOCK : (size_t)k;
    *p = s->in + s->in_pos;
    s->in_pos += n;
    return (ssize_t)n;
  }
  for (;;) {
    if (s->gz_end) {
      /* a member ended: another one may follow (concatenated gzip) */
      ssize_t k = src_fill(s);
      if (k < 0) return -1;
      if (k == 0) return src_stop(s, RD_SRC_DONE, NULL, 0, p);
      if (inflateReset(&s->zs) != Z_OK) return src_stop(s, RD_SRC_NO_RESET, NULL, 0, p);
      s->gz_end = false;
    }
    ssize_t k = src_fill(s);
    if (k < 0) return -1;
    if (k == 0 && !s->out_full) return src_stop(s, RD_SRC_CUT, NULL, 0, p);
    s->zs.next_in = s->in + s->in_pos;
    s->zs.avail_in = (uInt)(s->in_len - s->in_pos);
    s->zs.next_out = s->out;
    s->zs.avail_out = SRC_OUT_BLOCK;
    int zr = inflate(&s->zs, Z_NO_FLUSH);
    s->in_pos = s->in_len - s->zs.avail_in;
    size_t produced = SRC_OUT_BLOCK - s->zs.avail_out;
    s->out_full = s->zs.avail_out == 0 && zr != Z_STREAM_END;
    if (zr == Z_STREAM_END)
      s->gz_end = true;
    else if (zr != Z_OK && zr != Z_BUF_ERROR)
      return src_stop(s, RD_SRC_CORRUPT, s->zs.msg ? s->zs.msg : "corrupt data", produced, p);
    if (produced) {
      *p = s->out;
      return (ssize_t)produced;
    }
  }
}

ssize_t rd_source_read_into(rd_source *s, unsigned char *dst, size_t n) {
  if (s->left_n) {
    size_t k = s->left_n < n ? s->left_n : n;
    memcpy(dst, s->left, k);
    s->left += k;
    s->left_n -= k;
    return (ssize_t)k;
  }
  if (s->sniffed && !s->zst && !s->gz && s->in_pos == s->in_len && s->end == RD_SRC_OPEN) {
    /* plain input, its sniffed bytes used up: straight into dst, one copy less */
    if (s->eof) {
      s->end = RD_SRC_DONE;
      return 0;
    }
    ssize_t k = src_read(s, dst, n);
    if (k == 0) s->end = RD_SRC_DONE;
    return k;
  }
  const unsigned char *blk = NULL;
  ssize_t k = rd_source_read(s, &blk);
  if (k > (ssize_t)n) { /* (the block stays valid until rd_source_read is called again) */
    s->left = blk + n;
    s->left_n = (size_t)k - n;
    k = (ssize_t)n;
  }
  if (k > 0) memcpy(dst, blk, (size_t)k);
  return k;
}

rd_source_end rd_source_ended(const rd_source *s, const char **detail) {
  if (detail) *detail = s->detail;
  return s->end;
}

int rd_source_errno(const rd_source *s) { return s->err; }
bool rd_source_is_compressed(const rd_source *s) { return s->gz || s->zst; }
bool rd_source_is_gzip(const rd_source *s) { return s->gz; }
uint64_t rd_source_input_read(const rd_source *s) { return s->file_off; }

uint64_t rd_source_memory(const rd_source *s) {
  return s ? sizeof *s + s->block + (s->out ? SRC_OUT_BLOCK : 0) : 0;
}

void rd_source_close(rd_source *s) {
  if (!s) return;
  if (s->gz_init) inflateEnd(&s->zs);
  if (s->zst) ZSTD_freeDStream(s->zst);
  free(s->in);
  free(s->out);
  free(s);
}
