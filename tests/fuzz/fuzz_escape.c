/* fuzz_escape — the trace writer's JSON string escaper (src/json/writer.h).
 *
 * For any input bytes:
 *  - etr__jw_str (and etr__put_str_body_any, and the inline short-string path of
 *    etr__put_str_body) writes at most ETR__ESCAPED_MAX(n) + 2 bytes that parse (jansson) as
 *    exactly one JSON string;
 *  - no byte below 0x20 and no DEL appears unescaped in the output;
 *  - decoding gives back the input with each byte that does not start a complete, valid
 *    UTF-8 sequence replaced by one U+FFFD (writer.c replaces invalid bytes one at a time:
 *    a truncated 3-byte sequence is 2 replacements), and the `replaced` counter equals the
 *    number of those bytes. The reference decoder below is written independently of
 *    writer.h's etr__utf8_seq (code-point ranges instead of lead/continuation tables);
 *  - etr__utf8_cut(s, n, max) returns the longest prefix of at most max bytes that ends on a
 *    unit boundary (a valid sequence or one invalid byte);
 *  - the string built from two pieces with etr__jw_str_body decodes to the concatenation;
 *  - etr__jw_double writes a JSON number that reads back as the same double, or "nan",
 *    "inf", "-inf" strings.
 * Any failure aborts (a crash for libFuzzer) after printing what differed.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/writer.h"

#define FUZZ_TARGET "fuzz_escape"
#include "fuzz_check.h"

/* Length of the valid UTF-8 sequence at s[0..n), or 0 (reference: decode, then range-check
 * the code point). */
static size_t ref_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len]) return 0;             /* overlong */
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0; /* surrogate */
  if (cp > 0x10FFFF) return 0;
  return len;
}

/* The expected decoded string: valid sequences kept, each other byte -> U+FFFD. */
static size_t ref_expect(const unsigned char *s, size_t n, unsigned char *out, uint64_t *repl) {
  size_t i = 0, o = 0;
  *repl = 0;
  while (i < n) {
    size_t k = ref_seq(s + i, n - i);
    if (k) {
      memcpy(out + o, s + i, k);
      o += k;
      i += k;
    } else {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i++;
      (*repl)++;
    }
  }
  return o;
}

/* Parse buf[0..len) as one JSON string; checks and returns the decoded bytes (malloc'd). */
static char *decode(const char *buf, size_t len, size_t *out_len, const char *what) {
  json_error_t err;
  json_t *j = json_loadb(buf, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
  CHECK(j != NULL, "%s: output does not parse: %s (at %d)", what, err.text, err.position);
  CHECK(json_is_string(j), "%s: output is not a JSON string", what);
  size_t n = json_string_length(j);
  char *s = malloc(n + 1);
  CHECK(s != NULL, "out of memory");
  memcpy(s, json_string_value(j), n);
  *out_len = n;
  json_decref(j);
  return s;
}

static void check_escaped(const char *buf, size_t len, const char *what) {
  CHECK(len >= 2 && buf[0] == '"' && buf[len - 1] == '"', "%s: not quoted", what);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)buf[i];
    CHECK(c >= 0x20 && c != 0x7F, "%s: raw control byte 0x%02x at %zu", what, c, i);
  }
}

static void check_string(const unsigned char *s, size_t n) {
  unsigned char *want = malloc(n * 3 + 1);
  CHECK(want != NULL, "out of memory");
  uint64_t want_repl;
  size_t want_len = ref_expect(s, n, want, &want_repl);

  /* 1. etr__jw_str into a growing buffer (fd < 0). */
  etr__jw w;
  CHECK(etr__jw_init(&w, -1, 0) == 0, "init");
  etr__jw_str(&w, (const char *)s, n);
  CHECK(w.len <= ETR__ESCAPED_MAX(n) + 2, "jw_str wrote %zu > max %zu", w.len,
        ETR__ESCAPED_MAX(n) + 2);
  CHECK(w.replaced == want_repl, "jw_str replaced %llu, expected %llu",
        (unsigned long long)w.replaced, (unsigned long long)want_repl);
  check_escaped(w.buf, w.len, "jw_str");
  size_t got_len;
  char *got = decode(w.buf, w.len, &got_len, "jw_str");
  CHECK(got_len == want_len && memcmp(got, want, want_len) == 0,
        "jw_str round trip: %zu bytes decoded, %zu expected", got_len, want_len);
  free(got);

  /* 2. etr__put_str_body_any into an exact-size buffer (ASan catches any overrun). */
  size_t cap = ETR__ESCAPED_MAX(n) + 2;
  char *buf = malloc(cap ? cap : 1);
  CHECK(buf != NULL, "out of memory");
  uint64_t repl = 0;
  char *o = buf;
  *o++ = '"';
  o = etr__put_str_body_any(o, (const char *)s, n, &repl);
  *o++ = '"';
  size_t blen = (size_t)(o - buf);
  CHECK(blen == w.len && memcmp(buf, w.buf, blen) == 0, "put_str_body_any differs from jw_str");
  CHECK(repl == want_repl, "put_str_body_any replaced %llu", (unsigned long long)repl);
  free(buf);

  /* 3. The same string in two pieces (str_body), split at a unit boundary: decodes to the
   *    concatenation. Split where the first byte says. */
  if (n > 0) {
    size_t cut = etr__utf8_cut((const char *)s, n, s[0] % (n + 1));
    etr__jw w2;
    CHECK(etr__jw_init(&w2, -1, 0) == 0, "init");
    etr__jw_char(&w2, '"');
    etr__jw_str_body(&w2, (const char *)s, cut);
    etr__jw_str_body(&w2, (const char *)s + cut, n - cut);
    etr__jw_char(&w2, '"');
    CHECK(w2.len == w.len && memcmp(w2.buf, w.buf, w.len) == 0,
          "two pieces cut at %zu differ from one", cut);
    CHECK(w2.replaced == want_repl, "pieces replaced");
    etr__jw_free(&w2);
  }
  etr__jw_free(&w);
  free(want);
}

static void check_cut(const unsigned char *s, size_t n, size_t max) {
  size_t got = etr__utf8_cut((const char *)s, n, max);
  size_t want = 0;
  if (n <= max) {
    want = n;
  } else {
    size_t i = 0;
    while (i < n) {
      size_t k = ref_seq(s + i, n - i);
      if (!k) k = 1;
      if (i + k > max) break;
      i += k;
    }
    want = i;
  }
  CHECK(got == want, "utf8_cut(n=%zu, max=%zu) = %zu, expected %zu", n, max, got, want);
}

static void check_double(const unsigned char *s, size_t n) {
  if (n < 8) return;
  double v;
  memcpy(&v, s, 8);
  etr__jw w;
  CHECK(etr__jw_init(&w, -1, 0) == 0, "init");
  etr__jw_double(&w, v);
  char tmp[64];
  CHECK(w.len < sizeof tmp, "double too long");
  memcpy(tmp, w.buf, w.len);
  tmp[w.len] = 0;
  if (isnan(v)) {
    CHECK(!strcmp(tmp, "\"nan\""), "nan written as %s", tmp);
  } else if (isinf(v)) {
    CHECK(!strcmp(tmp, v > 0 ? "\"inf\"" : "\"-inf\""), "inf written as %s", tmp);
  } else {
    json_error_t err;
    json_t *j = json_loadb(w.buf, w.len, JSON_DECODE_ANY, &err);
    /* jansson rejects numbers it cannot hold as a double (it has no bignums); ours always
     * fit, so it must accept every one. */
    CHECK(j != NULL, "double %s does not parse: %s", tmp, err.text);
    double back = json_is_integer(j) ? (double)json_integer_value(j) : json_real_value(j);
    CHECK(json_is_number(j), "double %s is not a number", tmp);
    /* An integer-looking output ("1e+20" is a real for jansson, "123" an integer) must read
     * back to the same value; strtod is the reference for both. */
    double ref = strtod(tmp, NULL);
    CHECK(ref == v, "double %.17g written as %s", v, tmp);
    if (json_is_real(j)) CHECK(back == v, "jansson reads %s as %.17g", tmp, back);
    json_decref(j);
  }
  etr__jw_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_string(data, size);
  /* The first two bytes choose a cut length; cut the rest of the input. */
  if (size >= 2) {
    size_t max = ((size_t)data[0] << 8 | data[1]) % (size + 2);
    check_cut(data + 2, size - 2, max);
  }
  check_double(data, size);
  return 0;
}
