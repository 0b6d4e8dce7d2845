/* Unit tests of etr chrome's output writers (tools/chrome_out.c) against the plain ones they
 * replace (tools/lib_an_util.c's an_out_*): the same bytes for edge and random integers,
 * times, strings (escapes, control characters, valid and invalid UTF-8, strings longer than
 * one piece) and JSON values (doubles, nan / inf, nesting), through a memory buffer and
 * through a file buffer that is written out as it fills. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chrome_out.h"
#include "lib_an_util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* The reference bytes so far, reset. */
static void expect_same(ch_buf *b, an_out *ref, const char *what) {
  if (b->len != ref->mem_len || memcmp(b->p, ref->mem, b->len) != 0) {
    fail_msg("%s: chrome_out wrote '%.*s', an_out '%.*s'", what, (int)b->len, b->p,
             (int)ref->mem_len, ref->mem);
  }
  b->len = 0;
  ref->mem_len = 0;
}

/* ---- integers and times ---- */

static const uint64_t edge_u64[] = {0,
                                    1,
                                    9,
                                    10,
                                    11,
                                    99,
                                    100,
                                    101,
                                    999,
                                    1000,
                                    9999,
                                    10000,
                                    99999999,
                                    100000000,
                                    4294967295ULL,
                                    4294967296ULL,
                                    999999999999999999ULL,
                                    1000000000000000000ULL,
                                    9999999999999999999ULL,
                                    10000000000000000000ULL,
                                    9223372036854775807ULL,
                                    9223372036854775808ULL,
                                    UINT64_MAX - 1,
                                    UINT64_MAX};

/* HEAD's put_us (cmd_chrome.c before chrome_out): the reference for ch_us. */
static void ref_us(an_out *o, int64_t ns) {
  if (ns < 0) {
    an_out_raw(o, "-", 1);
    ns = ns == INT64_MIN ? INT64_MAX : -ns;
  }
  an_out_i64(o, ns / 1000);
  int64_t frac = ns % 1000;
  if (frac) {
    char f[4] = {'.', (char)('0' + frac / 100), (char)('0' + frac / 10 % 10),
                 (char)('0' + frac % 10)};
    an_out_raw(o, f, 4);
  }
}

static void check_int(ch_buf *b, an_out *ref, uint64_t u) {
  char *p = ch_room(b, CH_US_MAX);
  assert_non_null(p);
  ch_done(b, etr__put_u64(p, u));
  an_out_u64(ref, u);
  expect_same(b, ref, "u64");
  p = ch_room(b, CH_US_MAX);
  ch_done(b, etr__put_i64(p, (int64_t)u));
  an_out_i64(ref, (int64_t)u);
  expect_same(b, ref, "i64");
  p = ch_room(b, CH_US_MAX);
  ch_done(b, ch_us(p, (int64_t)u));
  ref_us(ref, (int64_t)u);
  expect_same(b, ref, "us");
  assert_true(etr__dec_len(u) >= 1 && etr__dec_len(u) <= 20);
}

static void test_integers(void **state) {
  (void)state;
  ch_buf b = {0};
  an_out ref = {0};
  for (size_t i = 0; i < sizeof edge_u64 / sizeof edge_u64[0]; i++) {
    uint64_t u = edge_u64[i];
    check_int(&b, &ref, u);
    check_int(&b, &ref, (uint64_t)0 - u); /* the negatives, INT64_MIN among them */
  }
  /* every power of ten and its neighbours, times and their fractions */
  for (uint64_t t = 1; t <= 1000000000000000000ULL; t *= 10) {
    for (int64_t d = -3; d <= 3; d++) {
      check_int(&b, &ref, t + (uint64_t)d);
      check_int(&b, &ref, (uint64_t)0 - (t + (uint64_t)d));
    }
  }
  for (uint64_t ns = 0; ns < 3000; ns++) check_int(&b, &ref, ns);
  for (int i = 0; i < 200000; i++) {
    uint64_t u = next() >> (next() % 64); /* every magnitude */
    check_int(&b, &ref, u);
  }
  ch_free(&b);
  free(ref.mem);
}

/* ---- strings ---- */

/* Pieces that strings are made of: plain ASCII, what is escaped, UTF-8 valid and not. */
static const char *const pieces[] = {"a",
                                     "Z",
                                     " ",
                                     "~",
                                     "\x7f",
                                     "\"",
                                     "\\",
                                     "\n",
                                     "\t",
                                     "\r",
                                     "\x01",
                                     "\x1f",
                                     "\x00",
                                     "\x08",
                                     "\x0c",
                                     "\xc3\xa9",
                                     "\xe2\x82\xac",
                                     "\xf0\x9f\x98\x80",
                                     "\x80",
                                     "\xbf",
                                     "\xc0\xaf",
                                     "\xc1\xbf",
                                     "\xc2",
                                     "\xe0\x80\x80",
                                     "\xe0\xa0",
                                     "\xed\xa0\x80",
                                     "\xed\x9f\xbf",
                                     "\xf4\x8f\xbf\xbf",
                                     "\xf4\x90\x80\x80",
                                     "\xf5",
                                     "\xff",
                                     "\xfe",
                                     "\xf0\x90\x80",
                                     "\xc2\x80",
                                     "aten::mm",
                                     "Tensor(float)",
                                     "<None>"};
static const size_t piece_len[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3,  4, 1,
                                   1, 2, 2, 1, 3, 2, 3, 3, 4, 4, 1, 1, 1, 3, 2, 8, 13, 6};
#define N_PIECES (sizeof piece_len / sizeof piece_len[0])

static size_t random_string(char *s, size_t max, size_t want, int plainness) {
  size_t n = 0;
  while (n < want) {
    size_t k = (size_t)(next() % 100) < (size_t)plainness ? 0 : (size_t)(next() % N_PIECES);
    const char *pc = k == 0 ? &"abcdefghijklmnop"[next() % 16] : pieces[k];
    size_t pl = k == 0 ? 1 : piece_len[k];
    if (n + pl > max) break;
    memcpy(s + n, pc, pl);
    n += pl;
  }
  return n;
}

static void test_strings(void **state) {
  (void)state;
  _Static_assert(sizeof pieces / sizeof pieces[0] == N_PIECES, "one length per piece");
  for (size_t k = 0; k < N_PIECES; k++)
    assert_int_equal(piece_len[k], k == 12 ? 1 : strlen(pieces[k]));
  ch_buf b = {0};
  an_out ref = {0};
  static char s[20000];
  /* every piece alone, and at every offset of a plain run (the 8-byte words) */
  for (size_t k = 0; k < N_PIECES; k++) {
    for (size_t off = 0; off < 24; off++) {
      for (size_t tail = 0; tail < 12; tail++) {
        memset(s, 'x', off);
        memcpy(s + off, pieces[k], piece_len[k]);
        memset(s + off + piece_len[k], 'y', tail);
        size_t n = off + piece_len[k] + tail;
        ch_jstr(&b, s, n);
        an_out_jstr(&ref, s, n);
        expect_same(&b, &ref, "string with one piece");
        /* a multi-byte sequence cut off by the string's end */
        ch_jstr(&b, s, off + piece_len[k] - 1);
        an_out_jstr(&ref, s, off + piece_len[k] - 1);
        expect_same(&b, &ref, "string cut");
      }
    }
  }
  /* random ones: short, long, and around the 4096-byte pieces */
  for (int i = 0; i < 20000; i++) {
    size_t want = i % 100 == 0 ? 4000 + next() % 9000 : next() % 64;
    int plainness = (int)(next() % 101);
    size_t n = random_string(s, sizeof s, want, plainness);
    ch_jstr(&b, s, n);
    an_out_jstr(&ref, s, n);
    expect_same(&b, &ref, "random string");
  }
  /* a multi-byte sequence across the boundary of two pieces */
  for (size_t at = 4090; at < 4100; at++) {
    memset(s, 'q', sizeof s);
    memcpy(s + at, "\xf0\x9f\x98\x80\x01\xe2\x82\xac", 8);
    ch_jstr(&b, s, 9000);
    an_out_jstr(&ref, s, 9000);
    expect_same(&b, &ref, "sequence across pieces");
  }
  ch_free(&b);
  free(ref.mem);
}

/* ---- values ---- */

static rd_jval *random_value(int depth, char *strs, size_t *used) {
  rd_jval *v = calloc(1, sizeof *v);
  assert_non_null(v);
  static const double doubles[] = {0.0,
                                   -0.0,
                                   1.5,
                                   -2.25e-5,
                                   0.1,
                                   1e300,
                                   -1e-300,
                                   5e-324,
                                   1.7976931348623157e308,
                                   123456789.123456789,
                                   3.0};
  switch (next() % (depth > 3 ? 6 : 8)) {
    case 0:
      v->kind = ETR_J_NULL;
      break;
    case 1:
      v->kind = ETR_J_BOOL;
      v->v.b = next() & 1;
      break;
    case 2: {
      v->kind = ETR_J_INT;
      uint64_t u = next() >> (next() % 64);
      if (next() & 1) u = (uint64_t)0 - u;
      v->v.i = next() % 10 == 0 ? INT64_MIN : (int64_t)u;
      break;
    }
    case 3:
      v->kind = ETR_J_UINT;
      v->v.u = 9223372036854775808ULL + (next() >> (next() % 63 + 1));
      break;
    case 4: {
      v->kind = ETR_J_DOUBLE;
      uint64_t k = next() % 16;
      v->v.d = k < 11    ? doubles[k]
               : k == 11 ? NAN
               : k == 12 ? INFINITY
               : k == 13 ? -INFINITY
                         : (double)(int64_t)next() / 7.0;
      break;
    }
    case 5: {
      v->kind = ETR_J_STRING;
      size_t n = random_string(strs + *used, 200, next() % 40, (int)(next() % 101));
      strs[*used + n] = '\0';
      v->v.str.s = strs + *used;
      v->v.str.len = n;
      *used += n + 1;
      break;
    }
    case 6: {
      v->kind = ETR_J_ARRAY;
      size_t n = next() % 6;
      v->v.arr.items = calloc(n + 1, sizeof(rd_jval));
      v->v.arr.n = n;
      for (size_t i = 0; i < n; i++) {
        rd_jval *it = random_value(depth + 1, strs, used);
        v->v.arr.items[i] = *it;
        free(it);
      }
      break;
    }
    default: {
      v->kind = ETR_J_OBJECT;
      size_t n = next() % 5;
      v->v.obj.items = calloc(n + 1, sizeof(rd_jmember));
      v->v.obj.n = n;
      for (size_t i = 0; i < n; i++) {
        size_t kl = random_string(strs + *used, 200, next() % 12, 80);
        strs[*used + kl] = '\0';
        v->v.obj.items[i].key = strs + *used;
        v->v.obj.items[i].key_len = kl;
        *used += kl + 1;
        rd_jval *it = random_value(depth + 1, strs, used);
        v->v.obj.items[i].val = *it;
        free(it);
      }
      break;
    }
  }
  return v;
}

static void free_value(rd_jval *v) {
  if (v->kind == ETR_J_ARRAY) {
    for (size_t i = 0; i < v->v.arr.n; i++) free_value(&v->v.arr.items[i]);
    free(v->v.arr.items);
  } else if (v->kind == ETR_J_OBJECT) {
    for (size_t i = 0; i < v->v.obj.n; i++) free_value(&v->v.obj.items[i].val);
    free(v->v.obj.items);
  }
}

static void test_values(void **state) {
  (void)state;
  ch_buf b = {0};
  an_out ref = {0};
  char *strs = malloc(1 << 20);
  assert_non_null(strs);
  for (int i = 0; i < 20000; i++) {
    size_t used = 0;
    rd_jval *v = random_value(0, strs, &used);
    assert_true(used < (1 << 20));
    ch_jval(&b, v);
    an_out_jval(&ref, v);
    expect_same(&b, &ref, "value");
    free_value(v);
    free(v);
  }
  free(strs);
  ch_free(&b);
  free(ref.mem);
}

/* ---- a file buffer: written out as it fills, the same bytes in the file ---- */

static void test_file_buffer(void **state) {
  (void)state;
  FILE *f = tmpfile();
  assert_non_null(f);
  ch_buf b = {0};
  b.f = f;
  an_out ref = {0};
  static char s[100000];
  size_t total = 0;
  for (int i = 0; i < 3000; i++) {
    size_t n;
    switch (next() % 4) {
      case 0: /* a long string (over CH_MAX_ROOM) escaped in pieces */
        n = random_string(s, sizeof s, i % 100 == 0 ? 90000 : next() % 300, 70);
        ch_jstr(&b, s, n);
        an_out_jstr(&ref, s, n);
        break;
      case 1: /* raw bytes, some over CH_MAX_ROOM */
        n = i % 50 == 0 ? 40000 + next() % 50000 : next() % 100;
        memset(s, 'a' + (int)(next() % 26), n);
        ch_raw(&b, s, n);
        an_out_raw(&ref, s, n);
        break;
      case 2:
        ch_fmt(&b, "{\"n\":%d,\"s\":\"%s\"}", i, i % 7 == 0 ? "seven" : "");
        an_out_fmt(&ref, "{\"n\":%d,\"s\":\"%s\"}", i, i % 7 == 0 ? "seven" : "");
        break;
      default: {
        uint64_t u = next();
        char *p = ch_room(&b, ETR__U64_MAX_LEN);
        assert_non_null(p);
        ch_done(&b, etr__put_u64(p, u));
        an_out_u64(&ref, u);
        break;
      }
    }
    assert_true(b.cap <= CH_FILE_BUF); /* bounded whatever was written */
  }
  ch_fmt(&b, "%0600d", 1); /* longer than ch_fmt's own buffer */
  an_out_fmt(&ref, "%0600d", 1);
  ch_flush(&b);
  assert_true(b.flushes > 1);
  assert_false(b.failed);
  total = (size_t)ftell(f);
  assert_int_equal(total, ref.mem_len);
  char *got = malloc(total + 1);
  assert_non_null(got);
  rewind(f);
  assert_int_equal(fread(got, 1, total, f), total);
  assert_memory_equal(got, ref.mem, total);
  free(got);
  fclose(f);
  ch_free(&b);
  free(ref.mem);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_integers),
      cmocka_unit_test(test_strings),
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_file_buffer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
