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

static drained drain(const char *path, uint64_t base, bool positional) {
  drained d = {0};
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  rd_source *s = NULL;
  assert_int_equal(rd_source_open(fd, base, positional, 4096, &s), 0);
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

/* Two gzip members of text (split in the middle), one after the other. */
static unsigned char *gzip_text(size_t *len) {
  size_t cap = compressBound((uLong)text_len) + 256, n = 0;
  unsigned char *out = malloc(cap);
  assert_non_null(out);
  size_t half = text_len / 2;
  for (int m = 0; m < 2; m++) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = text + (m ? half : 0);
    zs.avail_in = (uInt)(m ? text_len - half : half);
    zs.next_out = out + n;
    zs.avail_out = (uInt)(cap - n);
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    n = cap - zs.avail_out;
    deflateEnd(&zs);
  }
  *len = n;
  return out;
}

static unsigned char *zstd_text(size_t *len) {
  size_t cap = ZSTD_compressBound(text_len);
  unsigned char *out = malloc(cap);
  assert_non_null(out);
  *len = ZSTD_compress(out, cap, text, text_len, 3);
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
  unsigned char *gz = gzip_text(&n);
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
  unsigned char *z = zstd_text(&n);
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
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
