/* Unit tests of the reader's byte source (rd_source in src/json/reader.h): the bytes of plain,
 * gzip (several members) and zstd input, and how each input ends: whole, cut, corrupt. The
 * reader and `etr repair` both read through it, so what it hands over before a cut or
 * corrupt stretch, and the end it reports, is what both of them act on. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cmocka.h>

#include "json/reader.h"

#include "cli_test_util.h"

static unsigned char *text; /* what every input decompresses to */
static size_t text_len;

/* What a source over path (from byte base, positional or not) hands over, and how it ends. */
typedef struct drained {
  unsigned char *data;
  size_t len;
  rd_source_end end;
  const char *detail;
  bool gzip, compressed;
} drained;

static drained drain_by(const char *path, uint64_t base, bool positional, size_t block) {
  drained d = {0};
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  rd_source *s = NULL;
  assert_int_equal(rd_source_open(fd, base, positional, block, &s), 0);
  const unsigned char *p;
  ssize_t k;
  while ((k = rd_source_read(s, &p)) > 0) {
    d.data = realloc(d.data, d.len + (size_t)k);
    assert_non_null(d.data);
    memcpy(d.data + d.len, p, (size_t)k);
    d.len += (size_t)k;
  }
  assert_int_equal(k, 0);
  assert_int_equal(rd_source_read(s, &p), 0); /* the end stays the end */
  d.end = rd_source_ended(s, &d.detail);
  d.gzip = rd_source_is_gzip(s);
  d.compressed = rd_source_is_compressed(s);
  if (positional) assert_int_equal(lseek(fd, 0, SEEK_CUR), 0); /* the fd's offset untouched */
  rd_source_close(s);
  close(fd);
  return d;
}

static drained drain(const char *path, uint64_t base, bool positional) {
  return drain_by(path, base, positional, 4096);
}

/* One gzip member of src[0..n) at out[0..cap); returns its length. */
static size_t gzip_member(unsigned char *out, size_t cap, const unsigned char *src, size_t n) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  zs.next_in = (unsigned char *)src;
  zs.avail_in = (uInt)n;
  zs.next_out = out;
  zs.avail_out = (uInt)cap;
  assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
  size_t len = zs.total_out;
  deflateEnd(&zs);
  return len;
}

/* Two gzip members of src[0..n) (split in the middle), one after the other. */
static unsigned char *gzip_of(const unsigned char *src, size_t n, size_t *len) {
  size_t cap = compressBound((uLong)n) + 256;
  unsigned char *out = malloc(cap);
  assert_non_null(out);
  size_t half = n / 2;
  *len = gzip_member(out, cap, src, half);
  *len += gzip_member(out + *len, cap - *len, src + half, n - half);
  return out;
}

static unsigned char *zstd_of(const unsigned char *src, size_t n, size_t *len) {
  size_t cap = ZSTD_compressBound(n);
  unsigned char *out = malloc(cap);
  assert_non_null(out);
  *len = ZSTD_compress(out, cap, src, n, 3);
  assert_false(ZSTD_isError(*len));
  return out;
}

static void test_plain(void **state) {
  (void)state;
  const char *p = ct_tmp_path("plain.json");
  /* four bytes before the input: a positional source starts after them */
  unsigned char *b = malloc(text_len + 4);
  memcpy(b, "XXXX", 4);
  memcpy(b + 4, text, text_len);
  ct_write_file(p, b, text_len + 4);
  drained d = drain(p, 4, true);
  assert_int_equal(d.len, text_len);
  assert_memory_equal(d.data, text, text_len);
  assert_int_equal(d.end, RD_SRC_DONE);
  assert_false(d.compressed);
  free(d.data);
  free(b);
}

static void test_gzip_whole_and_cut(void **state) {
  (void)state;
  size_t n;
  unsigned char *gz = gzip_of(text, text_len, &n);
  const char *p = ct_tmp_path("t.json.gz");
  ct_write_file(p, gz, n);
  drained d = drain(p, 0, false);
  assert_int_equal(d.len, text_len); /* both members */
  assert_memory_equal(d.data, text, text_len);
  assert_int_equal(d.end, RD_SRC_DONE);
  assert_true(d.gzip);
  free(d.data);
  for (size_t cut = 10; cut < n - 8; cut += n / 7) {
    ct_write_file(p, gz, cut);
    d = drain(p, 0, true);
    assert_int_equal(d.end, RD_SRC_CUT);
    assert_true(d.len < text_len);
    assert_memory_equal(d.data, text, d.len); /* what came out is the start of the text */
    free(d.data);
  }
  /* corrupt from the middle on: the bytes before, then the end, with zlib's words */
  memset(gz + n / 2, 0xA5, n / 4);
  ct_write_file(p, gz, n);
  d = drain(p, 0, false);
  assert_int_equal(d.end, RD_SRC_CORRUPT);
  assert_non_null(d.detail);
  assert_true(d.len < text_len);
  free(d.data);
  free(gz);
}

static void test_zstd_whole_and_cut(void **state) {
  (void)state;
  size_t n;
  unsigned char *z = zstd_of(text, text_len, &n);
  const char *p = ct_tmp_path("t.json.zst");
  ct_write_file(p, z, n);
  drained d = drain(p, 0, false);
  assert_int_equal(d.len, text_len);
  assert_memory_equal(d.data, text, text_len);
  assert_int_equal(d.end, RD_SRC_DONE);
  assert_true(d.compressed && !d.gzip);
  free(d.data);
  for (size_t cut = 8; cut < n; cut += n / 5) {
    ct_write_file(p, z, cut);
    d = drain(p, 0, true);
    assert_int_equal(d.end, RD_SRC_CUT);
    assert_memory_equal(d.data, text, d.len);
    free(d.data);
  }
  free(z);
}

/* What zlib (gzip) or zstd alone makes of the first cut bytes of z: its length. */
static size_t reference_len(const unsigned char *z, size_t cut, bool gzip, unsigned char *buf,
                            size_t cap) {
  if (gzip) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(inflateInit2(&zs, 15 + 16), Z_OK);
    zs.next_in = (unsigned char *)z;
    zs.avail_in = (uInt)cut;
    zs.next_out = buf;
    zs.avail_out = (uInt)cap;
    int r = inflate(&zs, Z_SYNC_FLUSH);
    assert_true(r == Z_OK || r == Z_BUF_ERROR || r == Z_STREAM_END);
    size_t n = zs.total_out;
    inflateEnd(&zs);
    return n;
  }
  ZSTD_DStream *d = ZSTD_createDStream();
  assert_non_null(d);
  ZSTD_inBuffer in = {z, cut, 0};
  ZSTD_outBuffer out = {buf, cap, 0};
  assert_false(ZSTD_isError(ZSTD_decompressStream(d, &out, &in)));
  ZSTD_freeDStream(d);
  return out.pos;
}

/* A cut input gives every byte its decompressor can make of it, also when the output that
 * the last input bytes make crosses the end of one of the source's 64 KiB output blocks (the
 * decompressor then holds the rest until it is called again, with no input left). The text
 * has a long run of one byte across that end, so the stream there is long matches. */
static void cut_at_block_end(bool gzip) {
  size_t len = 200000;
  unsigned char *t = malloc(len), *buf = malloc(len);
  assert_non_null(t);
  assert_non_null(buf);
  memcpy(t, text, len);
  memset(t + 65536 - 700, 'x', 2000);
  size_t n;
  unsigned char *z = gzip ? gzip_of(t, len, &n) : zstd_of(t, len, &n);
  /* the shortest cut whose output passes the block's end, by bisection */
  size_t lo = 20, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (reference_len(z, mid, gzip, buf, len) > 65536)
      hi = mid;
    else
      lo = mid + 1;
  }
  const char *p = ct_tmp_path(gzip ? "b.json.gz" : "b.json.zst");
  unsigned passing = 0;
  for (size_t cut = lo - 8; cut < lo + 48 && cut < n; cut++) {
    size_t want = reference_len(z, cut, gzip, buf, len);
    ct_write_file(p, z, cut);
    /* the whole input read at once: output blocks end where the source's 64 KiB do */
    drained d = drain_by(p, 0, true, 1u << 20);
    assert_int_equal(d.end, RD_SRC_CUT);
    assert_int_equal(d.len, want);
    assert_memory_equal(d.data, t, d.len);
    passing += want > 65536;
    free(d.data);
  }
  assert_true(passing > 0); /* the sweep did cross the block's end */
  free(z);
  free(t);
  free(buf);
}

static void test_gzip_cut_at_block_end(void **state) {
  (void)state;
  cut_at_block_end(true);
}

static void test_zstd_cut_at_block_end(void **state) {
  (void)state;
  cut_at_block_end(false);
}

static int setup(void **state) {
  if (ct_tmpdir_setup(state) != 0) return -1;
  /* a few hundred KB of trace-like text: several blocks of the source */
  text_len = 0;
  text = malloc(400000);
  if (!text) return -1;
  for (unsigned i = 0; text_len + 100 < 400000; i++)
    text_len += (size_t)snprintf((char *)text + text_len, 100,
                                 "{\"id\": %u, \"name\": \"op%u\"},\n", i, i * 7919u % 1000u);
  return 0;
}

static int teardown(void **state) {
  free(text);
  return ct_tmpdir_teardown(state);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain),
      cmocka_unit_test(test_gzip_whole_and_cut),
      cmocka_unit_test(test_zstd_whole_and_cut),
      cmocka_unit_test(test_gzip_cut_at_block_end),
      cmocka_unit_test(test_zstd_cut_at_block_end),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
