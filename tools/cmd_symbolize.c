/* etr symbolize: resolve the native frames of a trace written in module mode
 * (ETR_SYMBOLIZE_MODULE: frames carry "module", "build_id", "offset") to function, source
 * file and line, on a machine that has the binaries (docs/CLI.md, docs/FORMAT.md).
 *
 * Streams: the header and every node are re-serialized as they are read (keys in file order,
 * the project's JSON escaping), so memory is bounded by the largest node, the tables after
 * "nodes" and the module files loaded (CLI_MAX_LOADED at once). Modules are found at their recorded
 * path (build-id checked when recorded), or by build-id / basename under each --search-dir and by
 * build-id under /usr/lib/debug; each unique (module, offset) is resolved once
 * (src/unwind/symbolize.c), all of them first in the order of their modules, as the symbolizer
 * keeps only a few module files loaded (modules that are the same file share one). An address in
 * inlined code becomes several frames (the inlined calls, innermost first), so the "frames" table
 * is rebuilt (each unique frame once) and "tracebacks" renumbered to it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "json/writer.h"
#include "unwind/symbolize_search.h"
#include "unwind/unwind.h"

#define CMD "symbolize"

static void usage(FILE *f) {
  fprintf(f,
          "usage: etr symbolize [-o OUT] [--search-dir DIR ...] FILE\n"
          "\n"
          "Resolves the frames of a trace recorded in module mode (ETR_TRACE_SYMBOLIZE=module):\n"
          "each frame with \"module\" and \"offset\" gets the function \"name\", source\n"
          "\"filename\" and \"line\" from the module file (its \"build_id\" must match);\n"
          "an address in inlined code becomes one frame per inlined call, and \"tracebacks\"\n"
          "is renumbered to match. Everything else is copied.\n"
          "FILE may be gzip- or zstd-compressed; '-' reads stdin.\n"
          "\n"
          "  -o, --output OUT     write the resolved trace to OUT (default '-': stdout)\n"
          "  -d, --search-dir DIR also look for modules in DIR: DIR/.build-id/xx/rest[.debug]\n"
          "                       by build-id, then DIR/<module basename> (repeatable)\n"
          "\n"
          "Prints how many frames were resolved on stderr. Exit status 0, 1 on bad input or a\n"
          "write error, 2 on a bad command line.\n");
}

/* ---- re-serialization of reader values ---- */

/* (a whole number stays a floating-point one: "2.0", not "2") */
static void put_double(etr__jw *w, double v) { etr__jw_double(w, v); }

static void put_val(etr__jw *w, const rd_jval *v) {
  switch (v->kind) {
    case ETR_J_NULL:
      ETR__JW_LIT(w, "null");
      break;
    case ETR_J_BOOL:
      if (v->v.b)
        ETR__JW_LIT(w, "true");
      else
        ETR__JW_LIT(w, "false");
      break;
    case ETR_J_INT:
      etr__jw_i64(w, v->v.i);
      break;
    case ETR_J_UINT:
      etr__jw_u64(w, v->v.u);
      break;
    case ETR_J_DOUBLE:
      put_double(w, v->v.d);
      break;
    case ETR_J_STRING:
      etr__jw_str(w, v->v.str.s, v->v.str.len);
      break;
    case ETR_J_ARRAY:
      etr__jw_char(w, '[');
      for (size_t i = 0; i < v->v.arr.n; i++) {
        if (i) etr__jw_char(w, ',');
        put_val(w, &v->v.arr.items[i]);
      }
      etr__jw_char(w, ']');
      break;
    case ETR_J_OBJECT:
      etr__jw_char(w, '{');
      for (size_t i = 0; i < v->v.obj.n; i++) {
        const rd_jmember *m = &v->v.obj.items[i];
        if (i) etr__jw_char(w, ',');
        etr__jw_str(w, m->key, m->key_len);
        etr__jw_char(w, ':');
        put_val(w, &m->val);
      }
      etr__jw_char(w, '}');
      break;
  }
}

/* A top-level key: the first one opens the object's first line. */
static void put_key(etr__jw *w, const char *key, bool *first) {
  etr__jw_raw(w, *first ? "\n " : ",\n ", *first ? 2 : 3);
  *first = false;
  etr__jw_str(w, key, strlen(key));
  etr__jw_raw(w, ": ", 2);
}

static bool is_header_key(const char *k) {
  return !strcmp(k, "schema") || !strcmp(k, "pid") || !strcmp(k, "time") || !strcmp(k, "start_ts");
}

/* A header key (is_header_key) with the value the reader took from the file; nothing when it
 * kept none (a schema or time that is not a string). */
static void put_header_key(etr__jw *w, const rd_rheader *h, const char *k, bool *first) {
  if (!strcmp(k, "schema") || !strcmp(k, "time")) {
    const char *v = k[0] == 's' ? h->schema : h->time;
    if (v != NULL) {
      put_key(w, k, first);
      etr__jw_str(w, v, strlen(v));
    }
  } else if (!strcmp(k, "pid") || !strcmp(k, "start_ts")) {
    put_key(w, k, first);
    etr__jw_i64(w, k[0] == 'p' ? h->pid : h->start_ts);
  }
}

/* ---- frames ----
 *
 * Each input frame becomes one or more output frames: a module frame whose address is in
 * inlined code expands into its chain of inlined calls (etr__symbolize_frames, innermost
 * first), each carrying the input frame's other keys (module, build_id, offset); any other
 * frame is copied. Output frames are deduplicated (equal name, filename, line and other keys:
 * each unique frame written once, as the trace writer does), so "tracebacks" is rewritten:
 * each index of an input frame becomes the indices of its output frames.
 */

typedef struct counts {
  uint64_t frames, with_module, resolved, unresolved, inlined;
} counts;

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Build-id bytes from hex into out: *len bytes, and out itself; NULL when absent or malformed
 * (then not checked). "" gives out with *len 0: the module was recorded without a build id,
 * so a file that has one is another build (etr__symbolize). */
static const uint8_t *parse_build_id(const rd_jval *v, uint8_t *out, size_t cap, size_t *len) {
  *len = 0;
  if (v == NULL || v->kind != ETR_J_STRING || v->v.str.len % 2 || v->v.str.len / 2 > cap)
    return NULL;
  for (size_t i = 0; i < v->v.str.len / 2; i++) {
    int hi = hexval(v->v.str.s[2 * i]), lo = hexval(v->v.str.s[2 * i + 1]);
    if (hi < 0 || lo < 0) return NULL;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  *len = v->v.str.len / 2;
  return out;
}

static bool key_is(const rd_jmember *m, const char *k) {
  return m->key_len == strlen(k) && memcmp(m->key, k, m->key_len) == 0;
}

/* The keys a resolved frame gets anew (the input's are dropped). */
static bool is_sym_key(const rd_jmember *m) {
  return key_is(m, "name") || key_is(m, "filename") || key_is(m, "line");
}

static uint64_t hash_mix(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t jval_hash(uint64_t h, const rd_jval *v) {
  h = hash_mix(h, &v->kind, sizeof v->kind);
  switch (v->kind) {
    case ETR_J_NULL:
      break;
    case ETR_J_BOOL:
      h = hash_mix(h, &v->v.b, sizeof v->v.b);
      break;
    case ETR_J_INT:
      h = hash_mix(h, &v->v.i, sizeof v->v.i);
      break;
    case ETR_J_UINT:
      h = hash_mix(h, &v->v.u, sizeof v->v.u);
      break;
    case ETR_J_DOUBLE:
      h = hash_mix(h, &v->v.d, sizeof v->v.d);
      break;
    case ETR_J_STRING:
      h = hash_mix(h, v->v.str.s, v->v.str.len);
      break;
    case ETR_J_ARRAY:
      for (size_t i = 0; i < v->v.arr.n; i++) h = jval_hash(h, &v->v.arr.items[i]);
      break;
    case ETR_J_OBJECT:
      for (size_t i = 0; i < v->v.obj.n; i++) {
        h = hash_mix(h, v->v.obj.items[i].key, v->v.obj.items[i].key_len);
        h = jval_hash(h, &v->v.obj.items[i].val);
      }
      break;
  }
  return h;
}

static bool jval_equal(const rd_jval *a, const rd_jval *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case ETR_J_NULL:
      return true;
    case ETR_J_BOOL:
      return a->v.b == b->v.b;
    case ETR_J_INT:
      return a->v.i == b->v.i;
    case ETR_J_UINT:
      return a->v.u == b->v.u;
    case ETR_J_DOUBLE:
      return memcmp(&a->v.d, &b->v.d, sizeof a->v.d) == 0;
    case ETR_J_STRING:
      return a->v.str.len == b->v.str.len && memcmp(a->v.str.s, b->v.str.s, a->v.str.len) == 0;
    case ETR_J_ARRAY:
      if (a->v.arr.n != b->v.arr.n) return false;
      for (size_t i = 0; i < a->v.arr.n; i++)
        if (!jval_equal(&a->v.arr.items[i], &b->v.arr.items[i])) return false;
      return true;
    case ETR_J_OBJECT:
      if (a->v.obj.n != b->v.obj.n) return false;
      for (size_t i = 0; i < a->v.obj.n; i++) {
        const rd_jmember *x = &a->v.obj.items[i], *y = &b->v.obj.items[i];
        if (x->key_len != y->key_len || memcmp(x->key, y->key, x->key_len) != 0 ||
            !jval_equal(&x->val, &y->val))
          return false;
      }
      return true;
  }
  return false;
}

/* The members of a frame object other than name, filename and line: hash and equality. */
static uint64_t extras_hash(uint64_t h, const rd_jval *fr) {
  for (size_t i = 0; i < fr->v.obj.n; i++) {
    const rd_jmember *m = &fr->v.obj.items[i];
    if (is_sym_key(m)) continue;
    h = hash_mix(h, m->key, m->key_len);
    h = jval_hash(h, &m->val);
  }
  return h;
}

static bool extras_equal(const rd_jval *a, const rd_jval *b) {
  size_t i = 0, j = 0;
  for (;;) {
    while (i < a->v.obj.n && is_sym_key(&a->v.obj.items[i])) i++;
    while (j < b->v.obj.n && is_sym_key(&b->v.obj.items[j])) j++;
    if (i == a->v.obj.n || j == b->v.obj.n) return i == a->v.obj.n && j == b->v.obj.n;
    const rd_jmember *x = &a->v.obj.items[i++], *y = &b->v.obj.items[j++];
    if (x->key_len != y->key_len || memcmp(x->key, y->key, x->key_len) != 0 ||
        !jval_equal(&x->val, &y->val))
      return false;
  }
}

/* One output frame: src copied as it is, or resolved (name, filename, line, then the other
 * members of src). */
typedef struct oframe {
  const rd_jval *src;
  bool copy;
  const char *name, *filename; /* owned by the symbolizer */
  int64_t line;
  uint64_t hash;
} oframe;

typedef struct frame_map {
  oframe *of; /* the output frames table */
  size_t nof, capof;
  uint32_t *slots; /* hash set of output frames: index + 1, 0 = empty */
  size_t nslots;   /* power of two */
  size_t nin;      /* input frames */
  size_t *start;   /* input frame i -> idx[start[i], start[i + 1]) */
  uint32_t *idx;
  size_t nidx, capidx;
} frame_map;

static void frame_map_free(frame_map *fm) {
  free(fm->of);
  free(fm->slots);
  free(fm->start);
  free(fm->idx);
}

static bool oframe_equal(const oframe *a, const oframe *b) {
  if (a->hash != b->hash || a->copy != b->copy) return false;
  if (a->copy) return jval_equal(a->src, b->src);
  return a->line == b->line && strcmp(a->name, b->name) == 0 &&
         strcmp(a->filename, b->filename) == 0 && extras_equal(a->src, b->src);
}

/* Add f to the output frames (once) and its index to the current input frame's list. 0 or
 * -1 on ENOMEM. */
static int add_oframe(frame_map *fm, oframe f) {
  if (f.copy) {
    f.hash = jval_hash(0xcbf29ce484222325ull, f.src);
  } else {
    uint64_t h = hash_mix(0x84222325cbf29ce4ull, f.name, strlen(f.name) + 1);
    h = hash_mix(h, f.filename, strlen(f.filename) + 1);
    f.hash = extras_hash(hash_mix(h, &f.line, sizeof f.line), f.src);
  }
  if ((fm->nof + 1) * 2 > fm->nslots) {
    size_t n = fm->nslots ? fm->nslots * 2 : 1024;
    uint32_t *t = calloc(n, sizeof *t);
    if (t == NULL) return -1;
    for (size_t i = 0; i < fm->nof; i++) {
      size_t j = fm->of[i].hash & (n - 1);
      while (t[j] != 0) j = (j + 1) & (n - 1);
      t[j] = (uint32_t)(i + 1);
    }
    free(fm->slots);
    fm->slots = t;
    fm->nslots = n;
  }
  size_t j = f.hash & (fm->nslots - 1);
  while (fm->slots[j] != 0 && !oframe_equal(&fm->of[fm->slots[j] - 1], &f))
    j = (j + 1) & (fm->nslots - 1);
  if (fm->slots[j] == 0) {
    if (fm->nof == fm->capof) {
      fm->capof = fm->capof ? fm->capof * 2 : 256;
      oframe *o = realloc(fm->of, fm->capof * sizeof *o);
      if (o == NULL) return -1;
      fm->of = o;
    }
    if (fm->nof >= UINT32_MAX) return -1;
    fm->of[fm->nof++] = f;
    fm->slots[j] = (uint32_t)fm->nof;
  }
  if (fm->nidx == fm->capidx) {
    fm->capidx = fm->capidx ? fm->capidx * 2 : 256;
    uint32_t *x = realloc(fm->idx, fm->capidx * sizeof *x);
    if (x == NULL) return -1;
    fm->idx = x;
  }
  fm->idx[fm->nidx++] = fm->slots[j] - 1;
  return 0;
}

#define MAX_INLINE_FRAMES 64

/* Module files (with their debug files) kept loaded at once (docs/CLI.md). */
#define CLI_MAX_LOADED 2

/* The module string and offset of a frame that names both (*mod, *vaddr); NULL otherwise. */
static const rd_jval *frame_module(const rd_jval *fr, uint64_t *vaddr) {
  const rd_jval *mod = fr->kind == ETR_J_OBJECT ? rd_jobj_get(fr, "module") : NULL;
  const rd_jval *off = fr->kind == ETR_J_OBJECT ? rd_jobj_get(fr, "offset") : NULL;
  if (mod == NULL || mod->kind != ETR_J_STRING || off == NULL ||
      !((off->kind == ETR_J_INT && off->v.i >= 0) || off->kind == ETR_J_UINT))
    return NULL;
  /* A path with a NUL names no file: it is not looked up at all (it was looked up up to the
   * NUL, so "/lib/libc.so.6\u0000x" was named after /lib/libc.so.6). */
  if (memchr(mod->v.str.s, '\0', mod->v.str.len) != NULL) return NULL;
  *vaddr = off->kind == ETR_J_INT ? (uint64_t)off->v.i : off->v.u;
  return mod;
}

/* One input frame: resolved (and expanded) when it names a module and an offset, else
 * copied. 0 or -1 on ENOMEM. */
static int map_frame(frame_map *fm, etr__symbolizer *s, const rd_jval *fr, counts *c) {
  c->frames++;
  oframe copy = {.src = fr, .copy = true};
  uint64_t vaddr;
  const rd_jval *mod = frame_module(fr, &vaddr);
  if (mod == NULL) return add_oframe(fm, copy);
  c->with_module++;
  uint8_t bid_buf[64];
  size_t bid_len;
  const uint8_t *bid =
      parse_build_id(rd_jobj_get(fr, "build_id"), bid_buf, sizeof bid_buf, &bid_len);
  etr__symbol sym[MAX_INLINE_FRAMES];
  int rc = etr__symbolize(s, mod->v.str.s, bid, bid_len, vaddr, 0, &sym[0]);
  if (rc < 0) return -1;
  if (rc == 0) {
    c->resolved++;
  } else {
    c->unresolved++;
    if (sym[0].line == 0) return add_oframe(fm, copy); /* nothing learned: keep it as it was */
  }
  int n = etr__symbolize_frames(s, mod->v.str.s, bid, bid_len, vaddr, 0, sym, MAX_INLINE_FRAMES);
  if (n < 0) return -1;
  c->inlined += (uint64_t)n - 1;
  for (int k = 0; k < n; k++) {
    oframe f = {.src = fr, .name = sym[k].name, .filename = sym[k].filename, .line = sym[k].line};
    if (add_oframe(fm, f) != 0) return -1;
  }
  return 0;
}

/* A module frame for the resolving pass in module order. */
typedef struct warm_item {
  const rd_jval *mod, *bid; /* bid: the "build_id" string, NULL when absent */
  uint64_t vaddr;
} warm_item;

static int str_cmp(const rd_jval *a, const rd_jval *b) {
  if (a == NULL || b == NULL) return (a != NULL) - (b != NULL);
  if (a->kind != ETR_J_STRING || b->kind != ETR_J_STRING) return (int)a->kind - (int)b->kind;
  size_t n = a->v.str.len < b->v.str.len ? a->v.str.len : b->v.str.len;
  int c = memcmp(a->v.str.s, b->v.str.s, n);
  if (c != 0) return c;
  return (a->v.str.len > b->v.str.len) - (a->v.str.len < b->v.str.len);
}

static int warm_cmp(const void *pa, const void *pb) {
  const warm_item *a = pa, *b = pb;
  int c = str_cmp(a->bid, b->bid);
  if (c == 0) c = str_cmp(a->mod, b->mod);
  if (c == 0) c = (a->vaddr > b->vaddr) - (a->vaddr < b->vaddr);
  return c;
}

/* Resolve every module frame once, in the order of build-id, module path, offset, so that
 * each module file is used in one stretch: the symbolizer keeps only a few files loaded
 * (src/unwind/symbolize.c), and frames of many modules interleaved would load them again
 * and again. The answers are cached; map_frames then takes them in the table's order. 0 or
 * -1 on ENOMEM. */
static int warm_frames(etr__symbolizer *s, const rd_jval *frames) {
  size_t n = 0;
  warm_item *items = malloc((frames->v.arr.n ? frames->v.arr.n : 1) * sizeof *items);
  if (items == NULL) return -1;
  for (size_t i = 0; i < frames->v.arr.n; i++) {
    const rd_jval *fr = &frames->v.arr.items[i];
    uint64_t vaddr;
    const rd_jval *mod = frame_module(fr, &vaddr);
    if (mod != NULL) items[n++] = (warm_item){mod, rd_jobj_get(fr, "build_id"), vaddr};
  }
  qsort(items, n, sizeof *items, warm_cmp);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    uint8_t bid_buf[64];
    size_t bid_len;
    const uint8_t *bid = parse_build_id(items[i].bid, bid_buf, sizeof bid_buf, &bid_len);
    etr__symbol sym;
    if (etr__symbolize(s, items[i].mod->v.str.s, bid, bid_len, items[i].vaddr, 0, &sym) < 0)
      rc = -1;
  }
  free(items);
  return rc;
}

/* Map every input frame (frames is an array). 0 or -1 on ENOMEM. */
static int map_frames(frame_map *fm, etr__symbolizer *s, const rd_jval *frames, counts *c) {
  if (warm_frames(s, frames) != 0) return -1;
  fm->nin = frames->v.arr.n;
  fm->start = malloc((fm->nin + 1) * sizeof *fm->start);
  if (fm->start == NULL) return -1;
  for (size_t i = 0; i < fm->nin; i++) {
    fm->start[i] = fm->nidx;
    if (map_frame(fm, s, &frames->v.arr.items[i], c) != 0) return -1;
  }
  fm->start[fm->nin] = fm->nidx;
  return 0;
}

static void put_oframe(etr__jw *w, const oframe *f) {
  if (f->copy) {
    put_val(w, f->src);
    return;
  }
  ETR__JW_LIT(w, "{\"name\":");
  etr__jw_str(w, f->name, strlen(f->name));
  ETR__JW_LIT(w, ",\"filename\":");
  etr__jw_str(w, f->filename, strlen(f->filename));
  ETR__JW_LIT(w, ",\"line\":");
  etr__jw_i64(w, f->line);
  for (size_t i = 0; i < f->src->v.obj.n; i++) {
    const rd_jmember *m = &f->src->v.obj.items[i];
    if (is_sym_key(m)) continue;
    etr__jw_char(w, ',');
    etr__jw_str(w, m->key, m->key_len);
    etr__jw_char(w, ':');
    put_val(w, &m->val);
  }
  etr__jw_char(w, '}');
}

static void put_frames(etr__jw *w, const frame_map *fm) {
  etr__jw_char(w, '[');
  for (size_t i = 0; i < fm->nof; i++) {
    etr__jw_raw(w, i ? ",\n  " : "\n  ", i ? 4 : 3);
    put_oframe(w, &fm->of[i]);
  }
  if (fm->nof) etr__jw_raw(w, "\n ", 2);
  etr__jw_char(w, ']');
}

/* "tracebacks" with each input frame index replaced by its output frames' indices; anything
 * that is not a number is copied. An index past the input table stays past the output table:
 * nin + k becomes nof + k (copied as it was, it named an unrelated frame once inlined calls
 * made the table longer). *bad counts such indices and negative ones. */
static void put_tracebacks(etr__jw *w, const frame_map *fm, const rd_jval *tbs, uint64_t *bad) {
  if (tbs->kind != ETR_J_ARRAY) {
    put_val(w, tbs);
    return;
  }
  etr__jw_char(w, '[');
  for (size_t i = 0; i < tbs->v.arr.n; i++) {
    const rd_jval *tb = &tbs->v.arr.items[i];
    etr__jw_raw(w, i ? ",\n  " : "\n  ", i ? 4 : 3);
    if (tb->kind != ETR_J_ARRAY) {
      put_val(w, tb);
      continue;
    }
    etr__jw_char(w, '[');
    bool first = true;
    for (size_t k = 0; k < tb->v.arr.n; k++) {
      const rd_jval *x = &tb->v.arr.items[k];
      uint64_t fi = x->kind == ETR_J_INT && x->v.i >= 0 ? (uint64_t)x->v.i
                    : x->kind == ETR_J_UINT             ? x->v.u
                                                        : UINT64_MAX;
      if (fi >= fm->nin) {
        if (!first) etr__jw_char(w, ',');
        first = false;
        if (x->kind == ETR_J_INT || x->kind == ETR_J_UINT) (*bad)++;
        if (fi != UINT64_MAX && fi - fm->nin <= UINT64_MAX - fm->nof)
          etr__jw_u64(w, fi - fm->nin + fm->nof);
        else
          put_val(w, x);
        continue;
      }
      for (size_t j = fm->start[fi]; j < fm->start[fi + 1]; j++) {
        if (!first) etr__jw_char(w, ',');
        first = false;
        etr__jw_u64(w, fm->idx[j]);
      }
    }
    etr__jw_char(w, ']');
  }
  if (tbs->v.arr.n) etr__jw_raw(w, "\n ", 2);
  etr__jw_char(w, ']');
}

/* ---- the command ---- */

static bool same_file(const char *a, const char *b) {
  struct stat sa, sb;
  return strcmp(a, "-") != 0 && strcmp(b, "-") != 0 && stat(a, &sa) == 0 && stat(b, &sb) == 0 &&
         sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cmd_symbolize(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    usage(stdout);
    return ETR_CLI_OK;
  }
  const char *in_path = NULL, *out_path = "-";
  const char **dirs = calloc((size_t)argc, sizeof *dirs);
  size_t ndirs = 0;
  if (dirs == NULL) {
    cli_error(CMD, "out of memory");
    return ETR_CLI_FAIL;
  }
  bool opts = true;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (opts && strcmp(a, "--") == 0) {
      opts = false;
    } else if (opts && (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "-d") ||
                        !strcmp(a, "--search-dir"))) {
      if (i + 1 >= argc) {
        free(dirs);
        return cli_usage(CMD, "%s wants a value", a);
      }
      if (a[1] == 'o' || a[2] == 'o')
        out_path = argv[++i];
      else
        dirs[ndirs++] = argv[++i];
    } else if (opts && !strncmp(a, "--output=", 9)) {
      out_path = a + 9;
    } else if (opts && !strncmp(a, "--search-dir=", 13)) {
      dirs[ndirs++] = a + 13;
    } else if (!opts && in_path == NULL) {
      in_path = a; /* after "--" even "-x" is a file name */
    } else if (cli_operand(CMD, a, &in_path) != 0) {
      free(dirs);
      return ETR_CLI_USAGE;
    }
  }
  if (in_path == NULL) {
    free(dirs);
    return cli_usage(CMD, "no input file");
  }
  if (same_file(in_path, out_path)) {
    free(dirs);
    cli_error(CMD, "%s: the output would overwrite the input", out_path);
    return ETR_CLI_FAIL;
  }

  int comp = cli_out_compression(CMD, out_path); /* (gzip for .gz; .zst refused) */
  if (comp < 0) {
    free(dirs);
    return ETR_CLI_FAIL;
  }
  int result = ETR_CLI_FAIL;
  etr__symbolizer *s = etr__symbolizer_new();
  bool to_stdout = strcmp(out_path, "-") == 0;
  int fd = -1;
  bool created = false;
  etr__jw w;
  bool jw_ok = false;
  cli_input in = {0};
  counts c = {0};
  frame_map fm = {0};
  uint64_t bad_refs = 0; /* traceback entries that name no input frame */
  if (s == NULL) {
    cli_error(CMD, "out of memory");
    goto done;
  }
  /* Frames are resolved in module order (warm_frames): two loaded files are enough. */
  etr__symbolizer_set_max_loaded(s, CLI_MAX_LOADED);
  for (size_t i = 0; i < ndirs; i++) {
    if (etr__symbolizer_add_search_dir(s, dirs[i]) != 0) {
      cli_error(CMD, "out of memory");
      goto done;
    }
  }
  if (cli_open(&in, CMD, in_path, NULL) != 0) goto done;
  if (cli_check_schema(CMD, in_path, rd_header(in.r)) != ETR_CLI_OK) goto done;
  /* (a regular output is written beside it and renamed over it at the end: cli.h) */
  struct stat ost;
  bool in_place = !to_stdout && stat(out_path, &ost) == 0 && !S_ISREG(ost.st_mode);
  fd = to_stdout  ? STDOUT_FILENO
       : in_place ? open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                  : cli_out_temp(CMD, out_path);
  if (fd < 0) {
    if (in_place) cli_error(CMD, "%s: cannot create: %s", out_path, strerror(errno));
    goto done;
  }
  created = !to_stdout;
  if (etr__jw_init(&w, fd, 1 << 20) != 0) {
    cli_error(CMD, "out of memory");
    goto done;
  }
  jw_ok = true;
  if (comp == 1 && etr__jw_set_gzip(&w, 1) != 0) { /* (an output named .gz: gzip) */
    cli_error(CMD, "out of memory");
    goto done;
  }

  /* Header: the header keys before "nodes", in file order (every other key goes after the
   * nodes, below: tables before them, as a tool that sorts keys leaves them, are kept). */
  const rd_rheader *h = rd_header(in.r);
  size_t nkeys;
  const char *const *keys = rd_top_keys(in.r, &nkeys);
  etr__jw_char(&w, '{');
  bool first = true;
  size_t nodes_at = 0;
  for (; nodes_at < nkeys && strcmp(keys[nodes_at], "nodes") != 0; nodes_at++)
    put_header_key(&w, h, keys[nodes_at], &first);
  put_key(&w, "nodes", &first);
  etr__jw_char(&w, '[');

  const rd_rnode *node;
  int rc;
  uint64_t n = 0;
  while ((rc = cli_next(&in, &node)) == 1) {
    if (n++)
      etr__jw_raw(&w, ",\n  ", 4);
    else
      etr__jw_raw(&w, "\n  ", 3);
    put_val(&w, node->raw);
    if (w.len >= (1 << 20) && etr__jw_flush(&w) != 0) break;
  }
  if (rc < 0) goto done;
  if (w.err == 0 && (cli_finish(&in) != 0 || cli_no_skipped(CMD, in.r))) goto done;
  etr__jw_raw(&w, n ? "\n ]" : "]", n ? 3 : 1);

  /* Trailer: finish_ts and the tables, in file order; "frames" resolved (and inlined calls
   * expanded), "tracebacks" renumbered to match. */
  const rd_jval *frames = rd_trailer(in.r, "frames");
  bool mapped = frames != NULL && frames->kind == ETR_J_ARRAY;
  if (mapped && map_frames(&fm, s, frames, &c) != 0) {
    cli_error(CMD, "out of memory");
    goto done;
  }
  keys = rd_top_keys(in.r, &nkeys);
  for (size_t i = 0; i < nkeys && w.err == 0; i++) {
    const char *k = keys[i];
    if (i == nodes_at) continue;
    if (is_header_key(k)) {
      if (i > nodes_at) put_header_key(&w, h, k, &first); /* (the others are written) */
      continue;
    }
    if (!strcmp(k, "finish_ts")) {
      put_key(&w, k, &first);
      etr__jw_i64(&w, rd_finish_ts(in.r));
      continue;
    }
    const rd_jval *v = rd_trailer(in.r, k);
    if (v == NULL) continue;
    put_key(&w, k, &first);
    if (mapped && !strcmp(k, "frames")) {
      put_frames(&w, &fm);
    } else if (mapped && !strcmp(k, "tracebacks")) {
      put_tracebacks(&w, &fm, v, &bad_refs);
    } else {
      put_val(&w, v);
    }
  }
  etr__jw_raw(&w, "\n}\n", 3);
  etr__jw_flush(&w);
  if (w.err != 0) {
    cli_error(CMD, "%s: write error: %s", to_stdout ? "<stdout>" : out_path, strerror(w.err));
    goto done;
  }
  if (!to_stdout && close(fd) != 0) {
    fd = -1;
    cli_error(CMD, "%s: write error: %s", out_path, strerror(errno));
    goto done;
  }
  fd = -1;
  if (!to_stdout && cli_out_commit(CMD, out_path) != ETR_CLI_OK) {
    created = false; /* (nothing of ours left to remove) */
    goto done;
  }
  fprintf(stderr,
          "etr symbolize: %" PRIu64 " frames resolved, %" PRIu64 " unresolved (%" PRIu64
          " with a module, of %" PRIu64 " frames), %" PRIu64 " inlined frames added\n",
          c.resolved, c.unresolved, c.with_module, c.frames, c.inlined);
  if (bad_refs != 0)
    fprintf(stderr,
            "etr symbolize: note: %" PRIu64
            " traceback entries name no frame of the table (negative or past its end); "
            "those past it still are\n",
            bad_refs);
  result = ETR_CLI_OK;
done:
  if (jw_ok) etr__jw_free(&w);
  if (fd >= 0 && !to_stdout) close(fd);
  if (result != ETR_CLI_OK && created) cli_discard_output(out_path); /* no half-written output */
  cli_close(&in);
  frame_map_free(&fm);
  etr__symbolizer_free(s);
  free(dirs);
  return result;
}
