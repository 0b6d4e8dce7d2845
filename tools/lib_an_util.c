/* Shared helpers of the analysis subcommands (see lib_an_util.h). */
#define _POSIX_C_SOURCE 200809L

#include "lib_an_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json/writer.h"

/* ---- hash map ---- */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

#define EMPTY_KEY UINT64_MAX

static bool map_grow(an_u64map *m) {
  size_t ncap = m->cap ? m->cap * 2 : 64;
  uint64_t *nk = malloc(ncap * sizeof *nk);
  uint64_t *nv = malloc(ncap * sizeof *nv);
  if (nk == NULL || nv == NULL) {
    free(nk);
    free(nv);
    return false;
  }
  for (size_t i = 0; i < ncap; i++) nk[i] = EMPTY_KEY;
  for (size_t i = 0; i < m->cap; i++) {
    if (m->keys[i] == EMPTY_KEY) continue;
    size_t j = mix64(m->keys[i]) & (ncap - 1);
    while (nk[j] != EMPTY_KEY) j = (j + 1) & (ncap - 1);
    nk[j] = m->keys[i];
    nv[j] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = nk;
  m->vals = nv;
  m->cap = ncap;
  return true;
}

bool an_u64map_put(an_u64map *m, uint64_t key, uint64_t val) {
  if (key == EMPTY_KEY) {
    m->has_max = true;
    m->max_val = val;
    return true;
  }
  if ((m->n + 1) * 2 > m->cap && !map_grow(m)) return false;
  size_t j = mix64(key) & (m->cap - 1);
  while (m->keys[j] != EMPTY_KEY) {
    if (m->keys[j] == key) {
      m->vals[j] = val;
      return true;
    }
    j = (j + 1) & (m->cap - 1);
  }
  m->keys[j] = key;
  m->vals[j] = val;
  m->n++;
  return true;
}

bool an_u64map_get(const an_u64map *m, uint64_t key, uint64_t *val) {
  if (key == EMPTY_KEY) {
    if (m->has_max && val) *val = m->max_val;
    return m->has_max;
  }
  if (m->cap == 0) return false;
  size_t j = mix64(key) & (m->cap - 1);
  while (m->keys[j] != EMPTY_KEY) {
    if (m->keys[j] == key) {
      if (val) *val = m->vals[j];
      return true;
    }
    j = (j + 1) & (m->cap - 1);
  }
  return false;
}

void an_u64map_del(an_u64map *m, uint64_t key) {
  if (key == EMPTY_KEY) {
    m->has_max = false;
    return;
  }
  if (m->cap == 0) return;
  size_t mask = m->cap - 1;
  size_t j = mix64(key) & mask;
  while (m->keys[j] != key) {
    if (m->keys[j] == EMPTY_KEY) return;
    j = (j + 1) & mask;
  }
  /* Backward-shift deletion keeps probe chains intact without tombstones. */
  m->keys[j] = EMPTY_KEY;
  m->n--;
  size_t i = j;
  for (;;) {
    i = (i + 1) & mask;
    if (m->keys[i] == EMPTY_KEY) return;
    size_t home = mix64(m->keys[i]) & mask;
    /* Move entry i into the hole j when its home is not in (j, i]. */
    bool in_range = (j <= i) ? (home > j && home <= i) : (home > j || home <= i);
    if (!in_range) {
      m->keys[j] = m->keys[i];
      m->vals[j] = m->vals[i];
      m->keys[i] = EMPTY_KEY;
      j = i;
    }
  }
}

void an_u64map_free(an_u64map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

/* ---- string table ---- */

static uint64_t hash_bytes(const char *s, size_t len) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ULL;
  }
  return h;
}

uint32_t an_strtab_intern(an_strtab *t, const char *s, size_t len) {
  uint64_t h = hash_bytes(s, len);
  uint64_t first;
  bool have = an_u64map_get(&t->index, h, &first);
  if (have) {
    for (uint32_t i = (uint32_t)first; i != UINT32_MAX; i = t->next[i]) {
      if (t->lens[i] == len && memcmp(t->strs[i], s, len) == 0) return i;
    }
  }
  if (t->n >= UINT32_MAX - 1) return UINT32_MAX;
  if (t->n == t->cap) {
    size_t ncap = t->cap ? t->cap * 2 : 64;
    char **ns = realloc(t->strs, ncap * sizeof *ns);
    if (ns == NULL) return UINT32_MAX;
    t->strs = ns;
    size_t *nl = realloc(t->lens, ncap * sizeof *nl);
    if (nl == NULL) return UINT32_MAX;
    t->lens = nl;
    uint32_t *nn = realloc(t->next, ncap * sizeof *nn);
    if (nn == NULL) return UINT32_MAX;
    t->next = nn;
    t->cap = ncap;
  }
  char *copy = malloc(len + 1);
  if (copy == NULL) return UINT32_MAX;
  if (len) memcpy(copy, s, len);
  copy[len] = '\0';
  uint32_t ix = (uint32_t)t->n;
  if (!an_u64map_put(&t->index, h, ix)) {
    free(copy);
    return UINT32_MAX;
  }
  t->strs[ix] = copy;
  t->lens[ix] = len;
  t->next[ix] = have ? (uint32_t)first : UINT32_MAX;
  t->n++;
  return ix;
}

void an_strtab_free(an_strtab *t) {
  for (size_t i = 0; i < t->n; i++) free(t->strs[i]);
  free(t->strs);
  free(t->lens);
  free(t->next);
  an_u64map_free(&t->index);
  memset(t, 0, sizeof *t);
}

/* ---- output ---- */

/* Room for n more bytes in a memory output. */
static bool mem_reserve(an_out *o, size_t n) {
  if (o->mem_len + n <= o->mem_cap) return true;
  size_t cap = o->mem_cap ? o->mem_cap : 4096;
  while (cap < o->mem_len + n) cap *= 2;
  char *p = realloc(o->mem, cap);
  if (!p) {
    o->failed = true;
    return false;
  }
  o->mem = p;
  o->mem_cap = cap;
  return true;
}

void an_out_raw_any(an_out *o, const char *s, size_t len) {
  if (!o->f) {
    if (len && mem_reserve(o, len)) {
      memcpy(o->mem + o->mem_len, s, len);
      o->mem_len += len;
    }
  } else if (len && fwrite(s, 1, len, o->f) != len) {
    o->failed = true;
  }
  o->bytes += len;
}

void an_out_cstr(an_out *o, const char *s) { an_out_raw(o, s, strlen(s)); }

void an_out_u64(an_out *o, uint64_t v) {
  char buf[24], *p = buf + sizeof buf;
  do {
    *--p = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  an_out_raw(o, p, (size_t)(buf + sizeof buf - p));
}

void an_out_i64(an_out *o, int64_t v) {
  if (v < 0) {
    an_out_raw(o, "-", 1);
    an_out_u64(o, (uint64_t)0 - (uint64_t)v);
  } else {
    an_out_u64(o, (uint64_t)v);
  }
}

void an_out_fmt(an_out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n;
  if (!o->f) {
    va_list again;
    va_copy(again, ap);
    n = mem_reserve(o, 256) ? vsnprintf(o->mem + o->mem_len, o->mem_cap - o->mem_len, fmt, ap) : -1;
    if (n >= 0 && (size_t)n >= o->mem_cap - o->mem_len)
      n = mem_reserve(o, (size_t)n + 1)
              ? vsnprintf(o->mem + o->mem_len, o->mem_cap - o->mem_len, fmt, again)
              : -1;
    va_end(again);
    if (n >= 0) o->mem_len += (size_t)n;
  } else {
    n = vfprintf(o->f, fmt, ap);
  }
  if (n < 0)
    o->failed = true;
  else
    o->bytes += (uint64_t)n;
  va_end(ap);
}

static const char REPLACEMENT[] = "\xEF\xBF\xBD";

void an_out_jstr(an_out *o, const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, run = 0;
  an_out_raw(o, "\"", 1);
  while (i < len) {
    unsigned char c = p[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      i++;
      run++;
      continue;
    }
    size_t n = c >= 0x80 ? etr__utf8_seq(p + i, len - i) : 1;
    if (c >= 0x80 && n > 0) {
      i += n;
      run += n;
      continue;
    }
    an_out_raw(o, (const char *)p + i - run, run);
    run = 0;
    if (c >= 0x80) {
      an_out_raw(o, REPLACEMENT, 3);
    } else if (c == '"') {
      an_out_raw(o, "\\\"", 2);
    } else if (c == '\\') {
      an_out_raw(o, "\\\\", 2);
    } else if (c == '\n') {
      an_out_raw(o, "\\n", 2);
    } else if (c == '\t') {
      an_out_raw(o, "\\t", 2);
    } else if (c == '\r') {
      an_out_raw(o, "\\r", 2);
    } else {
      an_out_fmt(o, "\\u%04x", c);
    }
    i++;
  }
  an_out_raw(o, (const char *)p + i - run, run);
  an_out_raw(o, "\"", 1);
}

static void out_jval(an_out *o, const rd_jval *v) {
  switch (v->kind) {
    case ETR_J_NULL:
      an_out_raw(o, "null", 4);
      break;
    case ETR_J_BOOL:
      an_out_cstr(o, v->v.b ? "true" : "false");
      break;
    case ETR_J_INT:
      an_out_i64(o, v->v.i);
      break;
    case ETR_J_UINT:
      an_out_u64(o, v->v.u);
      break;
    case ETR_J_DOUBLE:
      if (isfinite(v->v.d)) {
        char buf[ETR__DOUBLE_MAX_LEN];
        an_out_raw(o, buf, etr__fmt_double(buf, v->v.d));
      } else {
        an_out_cstr(o, isnan(v->v.d) ? "\"nan\"" : v->v.d > 0 ? "\"inf\"" : "\"-inf\"");
      }
      break;
    case ETR_J_STRING:
      an_out_jstr(o, v->v.str.s, v->v.str.len);
      break;
    case ETR_J_ARRAY:
      an_out_raw(o, "[", 1);
      for (size_t i = 0; i < v->v.arr.n; i++) {
        if (i) an_out_raw(o, ",", 1);
        out_jval(o, &v->v.arr.items[i]);
      }
      an_out_raw(o, "]", 1);
      break;
    case ETR_J_OBJECT:
      an_out_raw(o, "{", 1);
      for (size_t i = 0; i < v->v.obj.n; i++) {
        if (i) an_out_raw(o, ",", 1);
        an_out_jstr(o, v->v.obj.items[i].key, v->v.obj.items[i].key_len);
        an_out_raw(o, ":", 1);
        out_jval(o, &v->v.obj.items[i].val);
      }
      an_out_raw(o, "}", 1);
      break;
  }
}

void an_out_jval(an_out *o, const rd_jval *v) { out_jval(o, v); }

/* p[from..to) as it is (nothing when empty). */
static void out_run(an_out *o, const unsigned char *p, size_t from, size_t to) {
  if (to > from) an_out_raw(o, (const char *)p + from, to - from);
}

void an_out_sanitized(an_out *o, const char *s, size_t len, const char *bad, char repl) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, from = 0; /* p[from..i): bytes kept as they are, written at once */
  while (i < len) {
    unsigned char c = p[i];
    if (c >= 0x80) {
      size_t n = etr__utf8_seq(p + i, len - i);
      if (n != 0 && !(n == 2 && c == 0xc2 && p[i + 1] < 0xa0)) { /* (C1 controls: below) */
        i += n;
        continue;
      }
      out_run(o, p, from, i);
      if (n == 0) {
        an_out_raw(o, REPLACEMENT, 3);
        i++;
      } else {
        an_out_raw(o, " ", 1); /* a C1 control (U+0080..U+009F, CSI among them) */
        i += n;
      }
      from = i;
      continue;
    }
    bool control = c < 0x20 || c == 0x7f;
    if (!control && (*bad == '\0' || strchr(bad, c) == NULL)) {
      i++;
      continue;
    }
    out_run(o, p, from, i);
    an_out_raw(o, control ? " " : &repl, 1);
    from = ++i;
  }
  out_run(o, p, from, len);
}

void an_out_sanitized_cut(an_out *o, const char *s, size_t len, size_t max, const char *bad,
                          char repl) {
  if (len <= max) {
    an_out_sanitized(o, s, len, bad, repl);
    return;
  }
  size_t n = max;
  while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--; /* (a character's start) */
  an_out_sanitized(o, s, n, bad, repl);
  an_out_raw(o, "...", 3);
}

/* ---- growable arrays ---- */

bool an_grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t ncap = *cap ? *cap * 2 : 16;
  while (ncap < need) ncap *= 2;
  void *np = realloc(*p, ncap * elem);
  if (np == NULL) return false;
  *p = np;
  *cap = ncap;
  return true;
}

/* ---- trace helpers ---- */

bool an_is_thread_node(const rd_rnode *n) {
  return n->name != NULL && strcmp(n->name, "[pytorch|profiler|execution_trace|thread]") == 0;
}

bool an_is_process_node(const rd_rnode *n) {
  return n->name != NULL && strcmp(n->name, "[pytorch|profiler|execution_trace|process]") == 0;
}

const rd_rattr *an_attr(const rd_rnode *n, const char *name) {
  for (size_t i = 0; i < n->n_attrs; i++) {
    if (n->attrs[i].name != NULL && strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  }
  return NULL;
}

int64_t an_jint(const rd_jval *v, int64_t dflt) {
  if (v == NULL) return dflt;
  switch (v->kind) {
    case ETR_J_INT:
      return v->v.i;
    case ETR_J_UINT:
      return INT64_MAX;
    case ETR_J_DOUBLE:
      if (isfinite(v->v.d) && v->v.d > -9.2e18 && v->v.d < 9.2e18) return (int64_t)v->v.d;
      return dflt;
    case ETR_J_BOOL:
      return v->v.b ? 1 : 0;
    default:
      return dflt;
  }
}

bool an_parse_double(const char *s, double *out) {
  char *end;
  if (s == NULL || *s == '\0') return false;
  double d = strtod(s, &end);
  if (*end != '\0' || !isfinite(d)) return false;
  *out = d;
  return true;
}

bool an_is_tensor_value(const rd_jval *v) {
  if (v->kind != ETR_J_ARRAY || v->v.arr.n != 6) return false;
  for (int i = 0; i < 5; i++) {
    rd_jkind k = v->v.arr.items[i].kind;
    if (k != ETR_J_INT && k != ETR_J_UINT) return false;
  }
  return v->v.arr.items[5].kind == ETR_J_STRING;
}

uint64_t an_ju64(const rd_jval *v) {
  if (v->kind == ETR_J_UINT) return v->v.u;
  if (v->kind == ETR_J_INT) return (uint64_t)v->v.i;
  return 0;
}

static int cmp_rank(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

bool an_world_note(char *note, size_t cap, const char *const *files, const an_rank_given *r,
                   size_t n) {
  note[0] = '\0';
  size_t first = n;
  for (size_t f = 0; f < n; f++) {
    if (r[f].world <= 0) continue;
    if (first == n) {
      first = f;
    } else if (r[f].world != r[first].world) {
      snprintf(note, cap, "the traces record different world sizes (%lld in %s, %lld in %s)",
               (long long)r[first].world, cli_term(files[first]), (long long)r[f].world,
               cli_term(files[f]));
      return true;
    }
  }
  if (first == n) return false;
  int64_t world = r[first].world;
  int64_t *sorted = malloc((n ? n : 1) * sizeof *sorted);
  if (!sorted) {
    snprintf(note, cap, "out of memory");
    return true;
  }
  int64_t outside = 0;
  for (size_t f = 0; f < n; f++) {
    sorted[f] = r[f].rank;
    if (r[f].rank < 0 || r[f].rank >= world) outside++;
  }
  qsort(sorted, n, sizeof *sorted, cmp_rank);
  /* ranks 0..world-1 against the sorted ranks given: the first few missing named */
  size_t len = 0, nmiss = 0, i = 0;
  char miss[160] = "";
  for (int64_t want = 0; want < world; want++) {
    while (i < n && sorted[i] < want) i++;
    if (i < n && sorted[i] == want) continue;
    if (nmiss++ < 8 && len + 24 < sizeof miss)
      len += (size_t)snprintf(miss + len, sizeof miss - len, "%s%lld", nmiss > 1 ? ", " : "",
                              (long long)want);
  }
  free(sorted);
  if (nmiss)
    snprintf(note, cap, "the traces record a world of %lld ranks, %zu given: rank%s %s%s missing",
             (long long)world, n, nmiss > 1 ? "s" : "", miss, nmiss > 8 ? ", ..." : "");
  else if (outside)
    snprintf(note, cap,
             "the traces record a world of %lld ranks, %zu given: %lld of them outside 0..%lld",
             (long long)world, n, (long long)outside, (long long)world - 1);
  return note[0] != '\0';
}
