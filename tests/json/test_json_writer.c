#define _GNU_SOURCE
/* The JSON writer must produce valid JSON for any bytes: strings are escaped, invalid UTF-8
 * is replaced (and counted), numbers round-trip. Each output is parsed back with jansson. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "json/writer.h"

/* Writes s as a JSON string into memory and returns the parsed-back value (caller frees). */
static char *roundtrip(const char *s, size_t n, uint64_t *replaced, size_t *out_len) {
  etr__jw w;
  assert_int_equal(etr__jw_init(&w, -1, 0), 0);
  etr__jw_char(&w, '[');
  etr__jw_str(&w, s, n);
  etr__jw_char(&w, ']');
  json_error_t err;
  json_t *root = json_loadb(w.buf, w.len, JSON_ALLOW_NUL, &err);
  if (!root) fail_msg("invalid JSON: %s in %.*s", err.text, (int)w.len, w.buf);
  json_t *str = json_array_get(root, 0);
  assert_true(json_is_string(str));
  size_t len = json_string_length(str);
  char *copy = malloc(len + 1);
  memcpy(copy, json_string_value(str), len + 1);
  *out_len = len;
  if (replaced) *replaced = w.replaced;
  json_decref(root);
  etr__jw_free(&w);
  return copy;
}

static void test_ascii_and_escapes(void **state) {
  (void)state;
  const char in[] = "plain \"quoted\" back\\slash\nnew\tline\r\b\f end";
  size_t n;
  uint64_t rep;
  char *out = roundtrip(in, sizeof in - 1, &rep, &n);
  assert_int_equal(n, sizeof in - 1);
  assert_memory_equal(out, in, n);
  assert_int_equal(rep, 0);
  free(out);
}

static void test_every_control_byte(void **state) {
  (void)state;
  char in[34];
  for (int i = 0; i < 32; i++) in[i] = (char)(i + 1 == 32 ? 0x7f : i + 1);
  in[32] = 0; /* embedded NUL too */
  in[33] = 'x';
  size_t n;
  char *out = roundtrip(in, sizeof in, NULL, &n);
  assert_int_equal(n, sizeof in);
  assert_memory_equal(out, in, sizeof in);
  free(out);
}

static void test_valid_utf8_kept(void **state) {
  (void)state;
  const char in[] = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE2\x80\xA8";
  size_t n;
  uint64_t rep;
  char *out = roundtrip(in, sizeof in - 1, &rep, &n);
  assert_int_equal(rep, 0);
  assert_int_equal(n, sizeof in - 1);
  assert_memory_equal(out, in, n);
  free(out);
}

static void check_replaced(const char *in, size_t len, const char *expect, uint64_t expect_rep) {
  size_t n;
  uint64_t rep;
  char *out = roundtrip(in, len, &rep, &n);
  assert_int_equal(rep, expect_rep);
  assert_int_equal(n, strlen(expect));
  assert_memory_equal(out, expect, n);
  free(out);
}

#define FFFD "\xEF\xBF\xBD"

static void test_invalid_utf8_replaced(void **state) {
  (void)state;
  check_replaced("a\x80z", 3, "a" FFFD "z", 1);                  /* lone continuation */
  check_replaced("\xC0\xAF", 2, FFFD FFFD, 2);                   /* overlong '/' */
  check_replaced("\xE0\x80\xAF", 3, FFFD FFFD FFFD, 3);          /* overlong 3-byte */
  check_replaced("\xED\xA0\x80", 3, FFFD FFFD FFFD, 3);          /* UTF-16 surrogate */
  check_replaced("\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD, 4); /* above U+10FFFF */
  check_replaced("ok\xE2\x82", 4, "ok" FFFD FFFD, 2);            /* truncated at end */
  check_replaced("\xFF\xFE", 2, FFFD FFFD, 2);
}

static void test_utf8_cut_respects_characters(void **state) {
  (void)state;
  const char *s = "ab\xE2\x82\xAC"; /* 'a' 'b' then a 3-byte euro sign */
  assert_int_equal(etr__utf8_cut(s, 5, 5), 5);
  assert_int_equal(etr__utf8_cut(s, 5, 4), 2);
  assert_int_equal(etr__utf8_cut(s, 5, 3), 2);
  assert_int_equal(etr__utf8_cut(s, 5, 2), 2);
  assert_int_equal(etr__utf8_cut("\xFF\xFF\xFF", 3, 2), 2); /* invalid bytes are units */
}

static void test_integers(void **state) {
  (void)state;
  etr__jw w;
  assert_int_equal(etr__jw_init(&w, -1, 0), 0);
  const int64_t vals[] = {0, 1, -1, 9, 10, 99, 100, 12345, -987654321, INT64_MAX, INT64_MIN};
  etr__jw_char(&w, '[');
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    if (i) etr__jw_char(&w, ',');
    etr__jw_i64(&w, vals[i]);
  }
  etr__jw_char(&w, ',');
  etr__jw_u64(&w, UINT64_MAX);
  etr__jw_char(&w, ']');
  etr__jw_char(&w, '\0');
  const char *expect =
      "[0,1,-1,9,10,99,100,12345,-987654321,9223372036854775807,-9223372036854775808,"
      "18446744073709551615]";
  assert_string_equal(w.buf, expect);
  etr__jw_free(&w);
}

/* Every number of digits at its edges (10^k - 1, 10^k), and numbers from a generator,
 * written as printf writes them. */
static void test_integer_lengths(void **state) {
  (void)state;
  uint64_t vals[200];
  size_t n = 0;
  uint64_t p = 1;
  for (int k = 0; k < 20; k++, p *= 10) {
    vals[n++] = p - 1;
    vals[n++] = p;
    vals[n++] = p + 1;
  }
  vals[n++] = UINT64_MAX;
  vals[n++] = UINT64_MAX - 1;
  uint64_t x = 88172645463325252ull;
  while (n < sizeof vals / sizeof vals[0]) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    vals[n++] = x >> (x % 64); /* (every length) */
  }
  for (size_t i = 0; i < n; i++) {
    char want[32], got[32];
    int len = snprintf(want, sizeof want, "%llu", (unsigned long long)vals[i]);
    assert_int_equal(etr__dec_len(vals[i]), len);
    char *end = etr__put_u64(got, vals[i]);
    *end = '\0';
    assert_string_equal(got, want);
  }
  /* Every value below 10^6 and below 10^6 past 10^8 (the eight-digit groups), every digit in
   * every position of a group, and random ones: the same text as printf, and not a byte
   * written past it. */
  for (uint64_t i = 0; i < 3000000; i++) {
    uint64_t v = i < 1000000   ? i
                 : i < 2000000 ? 100000000ull + (i - 1000000) * 97
                               : (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x >> (x % 64));
    if (i % 100000 == 7) v = 99999999ull * (i / 100000 + 1); /* groups of nines */
    char want[32], got[32];
    int len = snprintf(want, sizeof want, "%llu", (unsigned long long)v);
    memset(got, '#', sizeof got);
    char *end = etr__put_u64(got, v);
    if (end - got != len || memcmp(got, want, (size_t)len) != 0 || got[len] != '#')
      fail_msg("%llu: got %.*s", (unsigned long long)v, (int)(end - got), got);
  }
}

static void test_doubles(void **state) {
  (void)state;
  const double vals[] = {0.0, -0.0, 1.0, 0.1, 1.0 / 3.0, 1e300, -2.5e-300, 123456789.125};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    etr__jw w;
    assert_int_equal(etr__jw_init(&w, -1, 0), 0);
    etr__jw_char(&w, '[');
    etr__jw_double(&w, vals[i]);
    etr__jw_char(&w, ']');
    json_error_t err;
    json_t *root = json_loadb(w.buf, w.len, JSON_DECODE_INT_AS_REAL, &err);
    assert_non_null(root);
    assert_true(json_number_value(json_array_get(root, 0)) == vals[i]);
    json_decref(root);
    etr__jw_free(&w);
  }
  /* The shortest text that reads back the same; a whole number keeps its ".0". */
  static const struct {
    double v;
    const char *text;
  } shortest[] = {{0.1, "0.1"},
                  {0.1 + 0.7, "0.7999999999999999"},
                  {0.1 + 0.2, "0.30000000000000004"},
                  {-0.0, "-0.0"},
                  {3.0, "3.0"},
                  {2.5e-7, "2.5e-07"}};
  for (size_t i = 0; i < sizeof shortest / sizeof shortest[0]; i++) {
    etr__jw w;
    assert_int_equal(etr__jw_init(&w, -1, 0), 0);
    etr__jw_double(&w, shortest[i].v);
    etr__jw_char(&w, '\0');
    assert_string_equal(w.buf, shortest[i].text);
    etr__jw_free(&w);
  }
  etr__jw w;
  assert_int_equal(etr__jw_init(&w, -1, 0), 0);
  etr__jw_double(&w, NAN);
  etr__jw_char(&w, ' ');
  etr__jw_double(&w, INFINITY);
  etr__jw_char(&w, ' ');
  etr__jw_double(&w, -INFINITY);
  etr__jw_char(&w, '\0');
  assert_string_equal(w.buf, "\"nan\" \"inf\" \"-inf\"");
  etr__jw_free(&w);
}

static void test_fd_output_and_write_error(void **state) {
  (void)state;
  char path[] = "/tmp/etr-jw-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  etr__jw w;
  assert_int_equal(etr__jw_init(&w, fd, 0), 0);
  /* More than the buffer holds: it grows, and one flush writes all of it. */
  for (int i = 0; i < 200000; i++) ETR__JW_LIT(&w, "0123456789");
  assert_int_equal(etr__jw_flush(&w), 0);
  assert_int_equal(w.written, 2000000);
  assert_int_equal(lseek(fd, 0, SEEK_END), 2000000);
  close(fd);
  unlink(path);
  etr__jw_free(&w);

  int full = open("/dev/full", O_WRONLY);
  if (full < 0) skip();
  assert_int_equal(etr__jw_init(&w, full, 0), 0);
  ETR__JW_LIT(&w, "data");
  assert_int_equal(etr__jw_flush(&w), ENOSPC);
  assert_int_equal(w.err, ENOSPC);
  ETR__JW_LIT(&w, "more"); /* accepted and discarded, no crash */
  assert_int_equal(etr__jw_flush(&w), ENOSPC);
  assert_int_equal(w.len, 0);
  close(full);
  etr__jw_free(&w);
}

/* Bytes of disk the file holds (st_blocks), its size in *size. */
static uint64_t disk_bytes(int fd, uint64_t *size) {
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  *size = (uint64_t)st.st_size;
  return (uint64_t)st.st_blocks * 512u;
}

/* Preallocation: a regular file gets its blocks reserved ahead of the writes, its size
 * unchanged (readers see only what was written); trim gives the reserve back. A pipe and a
 * device are left alone. */
static void test_prealloc_and_trim(void **state) {
  (void)state;
  char path[] = "/tmp/etr-jw-pre-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  etr__jw w;
  assert_int_equal(etr__jw_init(&w, fd, 0), 0);
  etr__jw_prealloc(&w);
  assert_true(w.prealloc);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 10000; i++) ETR__JW_LIT(&w, "0123456789");
    assert_int_equal(etr__jw_flush(&w), 0);
  }
  if (!w.prealloc) { /* this file system cannot reserve blocks: nothing to check */
    close(fd);
    unlink(path);
    etr__jw_free(&w);
    skip();
  }
  uint64_t size, disk = disk_bytes(fd, &size);
  assert_int_equal(size, 300000);
  assert_int_equal(w.written, 300000);
  assert_true(w.prealloc_end >= size + (512u << 10)); /* 1 MiB ahead of the first write */
  assert_true(disk + 4096 >= w.prealloc_end);         /* reserved past the end */
  etr__jw_trim(&w);
  assert_int_equal(w.err, 0);
  disk = disk_bytes(fd, &size);
  assert_int_equal(size, 300000);
  assert_true(disk <= ((size + 4095) & ~(uint64_t)4095) + 8192); /* given back */
  close(fd);
  unlink(path);
  etr__jw_free(&w);

  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(etr__jw_init(&w, p[1], 0), 0);
  etr__jw_prealloc(&w);
  assert_false(w.prealloc);
  etr__jw_free(&w);
  close(p[0]);
  close(p[1]);
  int null = open("/dev/null", O_WRONLY);
  assert_true(null >= 0);
  assert_int_equal(etr__jw_init(&w, null, 0), 0);
  etr__jw_prealloc(&w);
  assert_false(w.prealloc);
  ETR__JW_LIT(&w, "data");
  assert_int_equal(etr__jw_flush(&w), 0);
  etr__jw_trim(&w); /* (nothing reserved: no truncation of a device) */
  assert_int_equal(w.err, 0);
  close(null);
  etr__jw_free(&w);
}

/* Inflates every gzip member of buf[0..n) (zlib: one member per inflate stream); the
 * members' count in *members. NULL when a member is cut or corrupt. */
static char *gunzip_members(const unsigned char *buf, size_t n, size_t *out_len, int *members) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  assert_int_equal(inflateInit2(&zs, 15 + 16), Z_OK);
  size_t cap = 1 << 20, len = 0;
  char *out = malloc(cap);
  zs.next_in = (Bytef *)buf;
  zs.avail_in = (uInt)n;
  *members = 0;
  while (zs.avail_in > 0) {
    if (cap - len < 65536) out = realloc(out, cap *= 2);
    zs.next_out = (Bytef *)out + len;
    zs.avail_out = (uInt)(cap - len);
    int zr = inflate(&zs, Z_NO_FLUSH);
    len = cap - zs.avail_out;
    if (zr == Z_STREAM_END) {
      (*members)++;
      inflateReset(&zs);
    } else if (zr != Z_OK) {
      free(out);
      inflateEnd(&zs);
      return NULL;
    }
  }
  bool whole = zs.total_in == 0; /* no member left half read */
  inflateEnd(&zs);
  if (!whole) {
    free(out);
    return NULL;
  }
  *out_len = len;
  return out;
}

static unsigned char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  unsigned char *b = malloc(1 << 24);
  *n = fread(b, 1, 1 << 24, f);
  fclose(f);
  return b;
}

/* Gzip output: one member per flush, each complete, so the file decompresses after every
 * flush and a cut at a member boundary loses only what came after it. */
static void test_gzip_members(void **state) {
  (void)state;
  char path[] = "/tmp/etr-jw-gz-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  etr__jw w;
  assert_int_equal(etr__jw_init(&w, fd, 0), 0);
  assert_int_equal(etr__jw_set_gzip(&w, 1), 0);
  ETR__JW_LIT(&w, "[\"first\"");
  assert_int_equal(etr__jw_flush(&w), 0);
  uint64_t after_first = w.written;
  /* A large flush (several deflate output rounds) then a small one. */
  for (int i = 0; i < 100000; i++) ETR__JW_LIT(&w, ",\"0123456789abcdef\"");
  assert_int_equal(etr__jw_flush(&w), 0);
  ETR__JW_LIT(&w, "]");
  assert_int_equal(etr__jw_flush(&w), 0);
  assert_int_equal(etr__jw_flush(&w), 0); /* nothing buffered: no empty member */
  assert_int_equal(lseek(fd, 0, SEEK_END), (off_t)w.written);
  close(fd);
  etr__jw_free(&w);

  size_t n, len;
  int members;
  unsigned char *b = read_all(path, &n);
  assert_true(n < 1000000 / 4); /* compressed */
  char *text = gunzip_members(b, n, &len, &members);
  assert_non_null(text);
  assert_int_equal(members, 3);
  assert_int_equal(len, 8 + 100000 * 19 + 1);
  json_error_t err;
  json_t *root = json_loadb(text, len, 0, &err);
  if (!root) fail_msg("invalid JSON: %s", err.text);
  assert_int_equal(json_array_size(root), 100001);
  json_decref(root);
  free(text);
  /* Cut after the first member: that member alone decompresses. */
  text = gunzip_members(b, (size_t)after_first, &len, &members);
  assert_non_null(text);
  assert_int_equal(members, 1);
  assert_int_equal(len, 8);
  assert_memory_equal(text, "[\"first\"", 8);
  free(text);
  free(b);
  unlink(path);
}

/* The member a fatal-signal handler writes: stored blocks and a CRC computed by hand, which
 * zlib must accept (it checks the CRC and the length); large inputs take several blocks. */
static void test_gzip_stored_member(void **state) {
  (void)state;
  static const size_t sizes[] = {0, 1, 300, 65535, 65536, 200000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    char *in = malloc(n + 1);
    for (size_t i = 0; i < n; i++) in[i] = (char)("{}[],:\"abc 019\n"[i % 16] ^ (i / 65536));
    size_t cap = n + 18 + 5 * (n ? (n + 65534) / 65535 : 1);
    unsigned char *out = malloc(cap);
    assert_int_equal(etr__gz_stored_member(out, cap - 1, in, n), 0); /* one byte short */
    size_t m = etr__gz_stored_member(out, cap, in, n);
    assert_int_equal(m, cap);
    size_t len;
    int members;
    char *text = gunzip_members(out, m, &len, &members);
    assert_non_null(text);
    assert_int_equal(members, 1);
    assert_int_equal(len, n);
    if (n) assert_memory_equal(text, in, n);
    out[m - 5] ^= 1; /* a wrong CRC is refused */
    assert_null(gunzip_members(out, m, &len, &members));
    free(text);
    free(out);
    free(in);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ascii_and_escapes),
      cmocka_unit_test(test_every_control_byte),
      cmocka_unit_test(test_valid_utf8_kept),
      cmocka_unit_test(test_invalid_utf8_replaced),
      cmocka_unit_test(test_utf8_cut_respects_characters),
      cmocka_unit_test(test_integers),
      cmocka_unit_test(test_integer_lengths),
      cmocka_unit_test(test_doubles),
      cmocka_unit_test(test_fd_output_and_write_error),
      cmocka_unit_test(test_prealloc_and_trim),
      cmocka_unit_test(test_gzip_members),
      cmocka_unit_test(test_gzip_stored_member),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
