/* A check that text copied verbatim into a JSON output is well-formed: the traceback tables
 * of a binary log (etr convert) and of the file beside a JSON trace (etr repair) come from
 * files, and a damaged or hostile file must not make an invalid trace. A checksum finds
 * damage; only a parse finds text made to break the output. */
#include "json/check.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ck {
  const unsigned char *p, *end;
} ck;

static void ws(ck *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static bool hex4(ck *c) {
  if (c->end - c->p < 4) return false;
  for (int i = 0; i < 4; i++) {
    unsigned char h = c->p[i];
    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return false;
  }
  c->p += 4;
  return true;
}

/* A string, from its opening quote. Bytes >= 0x80 pass as they are (the writer made them
 * valid UTF-8; a reader replaces what is not). */
static bool string(ck *c) {
  c->p++;
  while (c->p < c->end) {
    unsigned char ch = *c->p++;
    if (ch == '"') return true;
    if (ch < 0x20) return false;
    if (ch == '\\') {
      if (c->p >= c->end) return false;
      unsigned char e = *c->p++;
      if (e == 'u') {
        if (!hex4(c)) return false;
      } else if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' &&
                 e != 'r' && e != 't') {
        return false;
      }
    }
  }
  return false;
}

static bool number(ck *c) {
  const unsigned char *s = c->p;
  if (c->p < c->end && *c->p == '-') c->p++;
  const unsigned char *d = c->p;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
  if (c->p == d || (*d == '0' && c->p - d > 1)) return false;
  if (c->p < c->end && *c->p == '.') {
    d = ++c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    if (c->p == d) return false;
  }
  if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
    c->p++;
    if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
    d = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    if (c->p == d) return false;
  }
  return c->p > s;
}

static bool word(ck *c, const char *w, size_t n) {
  if ((size_t)(c->end - c->p) < n) return false;
  for (size_t i = 0; i < n; i++)
    if (c->p[i] != (unsigned char)w[i]) return false;
  c->p += n;
  return true;
}

static bool value(ck *c, unsigned depth);

/* Values separated by commas up to `close` (the opening bracket already taken). */
static bool members(ck *c, unsigned depth, unsigned char close, bool keys) {
  ws(c);
  if (c->p < c->end && *c->p == close) {
    c->p++;
    return true;
  }
  for (;;) {
    ws(c);
    if (keys) {
      if (c->p >= c->end || *c->p != '"' || !string(c)) return false;
      ws(c);
      if (c->p >= c->end || *c->p++ != ':') return false;
      ws(c);
    }
    if (!value(c, depth)) return false;
    ws(c);
    if (c->p >= c->end) return false;
    unsigned char ch = *c->p++;
    if (ch == close) return true;
    if (ch != ',') return false;
  }
}

static bool value(ck *c, unsigned depth) {
  if (c->p >= c->end || depth > ETR__JSON_CHECK_DEPTH) return false;
  switch (*c->p) {
    case '{':
      c->p++;
      return members(c, depth + 1, '}', true);
    case '[':
      c->p++;
      return members(c, depth + 1, ']', false);
    case '"':
      return string(c);
    case 't':
      return word(c, "true", 4);
    case 'f':
      return word(c, "false", 5);
    case 'n':
      return word(c, "null", 4);
    default:
      return number(c);
  }
}

bool etr__json_elements_count(const char *s, size_t n, uint64_t *count) {
  ck c = {(const unsigned char *)s, (const unsigned char *)s + n};
  *count = 0;
  ws(&c);
  if (c.p == c.end) return true; /* no elements */
  for (;;) {
    ws(&c);
    if (!value(&c, 0)) return false;
    ++*count;
    ws(&c);
    if (c.p == c.end) return true;
    if (*c.p++ != ',') return false;
  }
}

bool etr__json_elements_ok(const char *s, size_t n) {
  uint64_t count;
  return etr__json_elements_count(s, n, &count);
}

bool etr__json_members_ok(const char *s, size_t n) {
  ck c = {(const unsigned char *)s, (const unsigned char *)s + n};
  for (;;) {
    ws(&c);
    if (c.p == c.end) return true; /* (after a comma, too: the text ends with one) */
    if (*c.p != '"' || !string(&c)) return false;
    ws(&c);
    if (c.p >= c.end || *c.p++ != ':') return false;
    ws(&c);
    if (!value(&c, 0)) return false;
    ws(&c);
    if (c.p == c.end) return true;
    if (*c.p++ != ',') return false;
  }
}
