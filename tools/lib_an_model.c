/* The replay cost model of `etr replay` (lib_an_ops.h, "cost model"): a model file's
 * directives (speed-ups by op name, a FLOP rate, a link for collectives; format in
 * docs/CLI.md) and the cost of every op under them. */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"
#include "lib_an_ops.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void an_model_init(an_model *m) {
  memset(m, 0, sizeof *m);
  m->untimed_us = 1.0;
}

void an_model_free(an_model *m) {
  for (size_t i = 0; i < m->n_speedups; i++) free(m->speedups[i].pattern);
  free(m->speedups);
  memset(m, 0, sizeof *m);
}

static bool num(const char *s, double *out) { return an_parse_double(s, out); }

int an_model_line(an_model *m, const char *line, char *err, size_t errlen) {
  char buf[1024];
  size_t len = strlen(line);
  if (len >= sizeof buf) {
    snprintf(err, errlen, "line too long");
    return -1;
  }
  memcpy(buf, line, len + 1);
  char *tok[8];
  int nt = 0;
  char *p = buf;
  while (*p && nt < 8) {
    while (isspace((unsigned char)*p)) p++;
    /* '#' starts a comment only at the start of a word outside quotes ("## forward ##"
     * names need quotes; a quoted name may hold '#' and be followed by a comment). */
    if (!*p || *p == '#') break;
    if (*p == '"') { /* quoted name: "## forward ##" */
      char *q = strchr(p + 1, '"');
      if (q == NULL) {
        snprintf(err, errlen, "unterminated quote");
        return -1;
      }
      *q = '\0';
      tok[nt++] = p + 1;
      p = q + 1;
      continue;
    }
    tok[nt++] = p;
    while (*p && !isspace((unsigned char)*p)) p++;
    if (*p) *p++ = '\0';
  }
  if (nt == 0) return 1;
  double a, b;
  if (strcmp(tok[0], "speedup") == 0) {
    if (nt != 3 || !num(tok[2], &a) || a <= 0) {
      snprintf(err, errlen, "expected: speedup NAME FACTOR (FACTOR > 0)");
      return -1;
    }
    /* (the array doubles when n_speedups reaches a power of two: its capacity is the next
     * power of two, so a model of many lines is read in time linear in them) */
    size_t n = m->n_speedups;
    if ((n & (n - 1)) == 0) {
      an_speedup *ns = realloc(m->speedups, (n ? 2 * n : 1) * sizeof *ns);
      if (ns == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
      }
      m->speedups = ns;
    }
    char *pat = strdup(tok[1]);
    if (pat == NULL) {
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    m->speedups[m->n_speedups].pattern = pat;
    m->speedups[m->n_speedups].factor = a;
    m->n_speedups++;
  } else if (strcmp(tok[0], "flops_per_s") == 0) {
    if (nt != 2 || !num(tok[1], &a) || a <= 0) {
      snprintf(err, errlen, "expected: flops_per_s RATE (RATE > 0)");
      return -1;
    }
    m->flops_per_s = a;
  } else if (strcmp(tok[0], "link") == 0) {
    if (nt != 3 || !num(tok[1], &a) || !num(tok[2], &b) || a < 0 || b <= 0) {
      snprintf(err, errlen, "expected: link LATENCY_US BANDWIDTH_GBPS (bandwidth > 0)");
      return -1;
    }
    m->link_latency_us = a;
    m->link_GBps = b;
  } else if (strcmp(tok[0], "untimed_us") == 0) {
    if (nt != 2 || !num(tok[1], &a) || a < 0) {
      snprintf(err, errlen, "expected: untimed_us COST (>= 0)");
      return -1;
    }
    m->untimed_us = a;
  } else {
    snprintf(err, errlen, "unknown directive '%.40s' (speedup, flops_per_s, link, untimed_us)",
             tok[0]);
    return -1;
  }
  return 0;
}

int an_model_load(an_model *m, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  cli_remember_input(path); /* (no output of the command may overwrite it) */
  char line[1024], why[256];
  int ln = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    ln++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      snprintf(err, errlen, "%s: line %d: line too long", path, ln);
      fclose(f);
      return -1;
    }
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
    if (an_model_line(m, line, why, sizeof why) < 0) {
      snprintf(err, errlen, "%s: line %d: %s", path, ln, why);
      fclose(f);
      return -1;
    }
  }
  if (ferror(f)) { /* (a directory opens, and fails at the first read: EISDIR) */
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    fclose(f);
    return -1;
  }
  fclose(f);
  return 0;
}

/* ---- speed-up lookup: each op name's factor in time linear in the name, whatever the
 * number of directives ----
 *
 * The rule (docs/CLI.md, "Model file"): the last `speedup NAME` whose NAME is the op name
 * exactly; else the longest `speedup PREFIX*` whose PREFIX starts the name (of several
 * equal ones, the first in the file; "*" is the empty prefix); else 1. A pattern is a prefix
 * when it ends with '*', taken literally otherwise ("a*b" is an exact name); names compare
 * up to their first NUL, as C strings. Exact names go into one hash table, prefixes into
 * another, and the distinct prefix lengths into a sorted list: a name is hashed once, byte
 * by byte (FNV-1a, whose hash of the first k bytes is a step on the way to the next), and
 * the prefix table is asked only at the lengths some prefix has, longest first, up to the
 * name's length. */

typedef struct sp_ent {
  const char *key; /* NULL: empty slot */
  size_t len;
  uint64_t hash;
  double factor;
} sp_ent;

typedef struct sp_tab {
  sp_ent *slots;
  size_t mask; /* capacity - 1, a power of two at least twice the entries */
} sp_tab;

typedef struct sp_index {
  sp_tab exact, prefix;
  size_t *lens; /* the distinct prefix lengths, ascending */
  size_t n_lens;
  uint64_t *hashes; /* scratch: hashes[k] = hash of a name's first k bytes, k <= lens[last] */
} sp_index;

#define FNV_OFFSET 1469598103934665603ull
#define FNV_PRIME 1099511628211ull

static uint64_t fnv_step(uint64_t h, unsigned char c) { return (h ^ c) * FNV_PRIME; }

static bool sp_tab_init(sp_tab *t, size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  t->slots = calloc(cap, sizeof *t->slots);
  t->mask = cap - 1;
  return t->slots != NULL;
}

/* The slot of (key, len, hash): its entry, or the empty slot where it goes. */
static sp_ent *sp_tab_slot(const sp_tab *t, const char *key, size_t len, uint64_t hash) {
  for (size_t i = (size_t)hash & t->mask;; i = (i + 1) & t->mask) {
    sp_ent *e = &t->slots[i];
    if (e->key == NULL || (e->hash == hash && e->len == len && memcmp(e->key, key, len) == 0))
      return e;
  }
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

static void sp_index_free(sp_index *x) {
  free(x->exact.slots);
  free(x->prefix.slots);
  free(x->lens);
  free(x->hashes);
}

static bool sp_index_build(sp_index *x, const an_model *m) {
  memset(x, 0, sizeof *x);
  size_t n_prefix = 0;
  for (size_t i = 0; i < m->n_speedups; i++) {
    size_t pl = strlen(m->speedups[i].pattern);
    if (pl > 0 && m->speedups[i].pattern[pl - 1] == '*') n_prefix++;
  }
  if (!sp_tab_init(&x->exact, m->n_speedups - n_prefix) || !sp_tab_init(&x->prefix, n_prefix) ||
      (x->lens = malloc((n_prefix ? n_prefix : 1) * sizeof *x->lens)) == NULL)
    return false;
  for (size_t i = 0; i < m->n_speedups; i++) {
    const char *pat = m->speedups[i].pattern;
    size_t pl = strlen(pat);
    bool is_prefix = pl > 0 && pat[pl - 1] == '*';
    size_t len = is_prefix ? pl - 1 : pl;
    uint64_t h = FNV_OFFSET;
    for (size_t k = 0; k < len; k++) h = fnv_step(h, (unsigned char)pat[k]);
    sp_ent *e = sp_tab_slot(is_prefix ? &x->prefix : &x->exact, pat, len, h);
    if (is_prefix && e->key != NULL) continue; /* the same prefix again: the first stays */
    if (is_prefix && e->key == NULL) x->lens[x->n_lens++] = len;
    *e = (sp_ent){pat, len, h, m->speedups[i].factor}; /* the same name again: the last wins */
  }
  if (x->n_lens > 0) {
    qsort(x->lens, x->n_lens, sizeof *x->lens, cmp_size);
    size_t w = 1;
    for (size_t i = 1; i < x->n_lens; i++)
      if (x->lens[i] != x->lens[w - 1]) x->lens[w++] = x->lens[i];
    x->n_lens = w;
  }
  size_t max_len = x->n_lens ? x->lens[x->n_lens - 1] : 0;
  x->hashes = malloc((max_len + 1) * sizeof *x->hashes);
  return x->hashes != NULL;
}

static double speedup_for(const sp_index *x, const char *name) {
  size_t max_len = x->n_lens ? x->lens[x->n_lens - 1] : 0;
  uint64_t h = FNV_OFFSET;
  size_t len = 0;
  for (; name[len] != '\0'; len++) {
    if (len <= max_len) x->hashes[len] = h;
    h = fnv_step(h, (unsigned char)name[len]);
  }
  if (len <= max_len) x->hashes[len] = h;
  const sp_ent *e = sp_tab_slot(&x->exact, name, len, h);
  if (e->key != NULL) return e->factor;
  for (size_t i = x->n_lens; i-- > 0;) {
    size_t k = x->lens[i];
    if (k > len) continue;
    e = sp_tab_slot(&x->prefix, name, k, x->hashes[k]);
    if (e->key != NULL) return e->factor;
  }
  return 1.0;
}

bool an_model_costs(const an_model *m, const an_optab *t, double *cost) {
  double *by_name = malloc((t->names.n ? t->names.n : 1) * sizeof *by_name);
  sp_index x;
  bool ok = sp_index_build(&x, m);
  if (by_name == NULL || !ok) {
    sp_index_free(&x);
    free(by_name);
    return false;
  }
  for (size_t i = 0; i < t->names.n; i++) by_name[i] = speedup_for(&x, t->names.strs[i]);
  sp_index_free(&x);
  for (size_t i = 0; i < t->n; i++) {
    const an_op *op = &t->ops[i];
    if (m->flops_per_s > 0 && (op->flags & ETR_OPF_FLOP_INNER)) {
      cost[i] = op->flops / m->flops_per_s * 1e6;
    } else if (m->link_GBps > 0 && (op->flags & ETR_OPF_COLLECTIVE)) {
      cost[i] = m->link_latency_us + op->coll_bytes / (m->link_GBps * 1e3);
    } else {
      double base = (op->flags & ETR_OPF_TIMED) ? (double)op->excl : m->untimed_us;
      cost[i] = base / by_name[op->name];
    }
  }
  free(by_name);
  return true;
}
