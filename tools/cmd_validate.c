/* etr validate FILE — structure and format of a trace (docs/FORMAT.md), streaming.
 *
 * Per node, as it streams by: key order, types, the base attrs and their order, attr names
 * and value kinds, inputs/outputs (equal lengths, each value well formed for its type).
 * Kept for the end (bounded: about 30 bytes per node, no node data): each node's id,
 * parent, tid, kind and offset, to check id uniqueness, that parents exist and that every
 * op reaches its thread node; the largest traceback index, checked against the tables.
 *
 * Problems are errors or warnings. Warnings are what real PyTorch traces do that our
 * stricter rules do not allow (a strides array shorter than values, ...): the command exits
 * 0 with warnings unless --strict.
 */
#include <getopt.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "validate"
#define PROCESS_NAME "[pytorch|profiler|execution_trace|process]"
#define THREAD_NAME "[pytorch|profiler|execution_trace|thread]"

/* ---- problems ---- */

typedef enum sev { SEV_WARN = 0, SEV_ERROR = 1 } sev;

/* Kinds of problem: each is listed up to --max times, then only counted. */
#define KINDS(X)                           \
  X(K_TOP, "top-level keys")               \
  X(K_HEADER, "header values")             \
  X(K_KEYS, "node keys")                   \
  X(K_FIELD, "node fields")                \
  X(K_TIMING, "timing")                    \
  X(K_ATTR, "attrs")                       \
  X(K_BASE, "base attrs")                  \
  X(K_IO, "inputs/outputs")                \
  X(K_VALUE, "values")                     \
  X(K_DUPID, "duplicate ids")              \
  X(K_PARENT, "parents")                   \
  X(K_REACH, "ops reaching their thread")  \
  X(K_SPECIAL, "process and thread nodes") \
  X(K_TB, "tracebacks")                    \
  X(K_FOOTER, "footer")                    \
  X(K_READER, "reader warnings")

typedef enum kind {
#define X(k, s) k,
  KINDS(X)
#undef X
      K_COUNT
} kind;
static const char *const kind_names[K_COUNT] = {
#define X(k, s) s,
    KINDS(X)
#undef X
};

typedef struct vstate {
  const char *file;
  bool strict, quiet;
  uint64_t max_per_kind;
  uint64_t count[2][K_COUNT];
  uint64_t errors, warnings;
  const rd_rheader *hdr;
  bool has_strides_schema; /* schema >= 1.1.1 */
} vstate;

static void problem(vstate *v, sev s, kind k, uint64_t off, int64_t id, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void problem(vstate *v, sev s, kind k, uint64_t off, int64_t id, const char *fmt, ...) {
  if (v->strict) s = SEV_ERROR;
  uint64_t n = ++v->count[s][k];
  if (s == SEV_ERROR)
    v->errors++;
  else
    v->warnings++;
  if (v->quiet || n > v->max_per_kind) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (id >= 0 || id < -1)
    printf("%s: byte %" PRIu64 ": node %" PRId64 ": %s: %s\n", v->file, off, id,
           s == SEV_ERROR ? "error" : "warning", msg);
  else
    printf("%s: byte %" PRIu64 ": %s: %s\n", v->file, off, s == SEV_ERROR ? "error" : "warning",
           msg);
}

/* Reader warnings: most are quirks of real traces (warnings); the ones that break a rule
 * of docs/FORMAT.md real traces keep are errors. */
static void on_reader_warning(uint64_t off, int64_t id, const char *msg, void *user) {
  vstate *v = user;
  static const char *const error_prefixes[] = {
      ETR_READER_WARN_MISSING_ATTR, "node has no",        "attr ",
      "\"inputs\" is not",          "\"outputs\" is not", "inputs: \"values\"",
      "outputs: \"values\"",        "\"pid\" is not",     "\"start_ts\" is not",
      "\"finish_ts\" is not",       "\"schema\" is not"};
  /* inputs/outputs parts: only a strides array of the wrong length is a real-trace quirk */
  if ((!strncmp(msg, "inputs: ", 8) || !strncmp(msg, "outputs: ", 9)) &&
      (strstr(msg, "is not an array") || strstr(msg, "\"shapes\" has") ||
       strstr(msg, "\"types\" has") || strstr(msg, "is missing"))) {
    problem(v, SEV_ERROR, K_READER, off, id, "%s", msg);
    return;
  }
  for (size_t i = 0; i < sizeof error_prefixes / sizeof *error_prefixes; i++)
    if (!strncmp(msg, error_prefixes[i], strlen(error_prefixes[i]))) {
      problem(v, SEV_ERROR, K_READER, off, id, "%s", msg);
      return;
    }
  problem(v, SEV_WARN, K_READER, off, id, "%s", msg);
}

/* ---- the id table: dense per-node records in blocks, and an open-addressing index ---- */

enum { NK_OP = 0, NK_THREAD = 1, NK_PROCESS = 2 };
enum { ST_NONE = 0, ST_BUSY = 1, ST_OK = 2, ST_BAD = 3 };

/* 32 bytes a node (a 1 GB trace of ~1.2M nodes needs ~38 MB, plus 4 bytes a slot of index) */
typedef struct nrec {
  int64_t id;
  int64_t parent;       /* parent id; after check_tree pass 1 an index (the thread node's
                           index once resolved), or -1 */
  uint64_t offset : 44; /* byte offset of the node (up to 16 TB) */
  uint64_t kind : 2;    /* NK_* */
  uint64_t state : 2;   /* ST_* */
  uint64_t tid;         /* the tid attr, whole (PyTorch writes OS thread ids) */
} nrec;

#define BLK_SHIFT 16
#define BLK_SIZE (1u << BLK_SHIFT)

typedef struct idtab {
  nrec **blocks;
  size_t n_blocks, n;
  uint32_t *slots; /* index + 1, 0 = empty */
  size_t mask;     /* slots - 1 */
} idtab;

static inline nrec *rec_at(idtab *t, size_t i) {
  return &t->blocks[i >> BLK_SHIFT][i & (BLK_SIZE - 1)];
}

static inline size_t hash_id(int64_t id) {
  uint64_t x = (uint64_t)id * 0x9E3779B97F4A7C15ull;
  return (size_t)(x ^ (x >> 29));
}

static bool tab_grow(idtab *t) {
  size_t cap = t->slots ? (t->mask + 1) * 2 : 1u << 16;
  uint32_t *s = calloc(cap, sizeof *s);
  if (!s) return false;
  for (size_t i = 0; i < t->n; i++) {
    size_t h = hash_id(rec_at(t, i)->id) & (cap - 1);
    while (s[h]) h = (h + 1) & (cap - 1);
    s[h] = (uint32_t)(i + 1);
  }
  free(t->slots);
  t->slots = s;
  t->mask = cap - 1;
  return true;
}

/* Index of id, or -1. */
static int64_t tab_find(const idtab *t, int64_t id) {
  if (!t->slots) return -1;
  size_t h = hash_id(id) & t->mask;
  for (;;) {
    uint32_t s = t->slots[h];
    if (!s) return -1;
    if (t->blocks[(s - 1) >> BLK_SHIFT][(s - 1) & (BLK_SIZE - 1)].id == id) return (int64_t)s - 1;
    h = (h + 1) & t->mask;
  }
}

/* Adds a record; returns it, or NULL when out of memory. *dup is set when id was there. */
static nrec *tab_add(idtab *t, int64_t id, bool *dup) {
  *dup = false;
  if (t->n >= UINT32_MAX - 1) return NULL;
  if (!t->slots || (t->n + 1) * 4 > (t->mask + 1) * 3) {
    if (!tab_grow(t)) return NULL;
  }
  size_t h = hash_id(id) & t->mask;
  for (;;) {
    uint32_t s = t->slots[h];
    if (!s) break;
    if (rec_at(t, s - 1)->id == id) {
      *dup = true;
      return rec_at(t, s - 1);
    }
    h = (h + 1) & t->mask;
  }
  if ((t->n >> BLK_SHIFT) >= t->n_blocks) {
    nrec **b = realloc(t->blocks, (t->n_blocks + 1) * sizeof *b);
    if (!b) return NULL;
    t->blocks = b;
    t->blocks[t->n_blocks] = malloc(BLK_SIZE * sizeof(nrec));
    if (!t->blocks[t->n_blocks]) return NULL;
    t->n_blocks++;
  }
  size_t i = t->n++;
  t->slots[h] = (uint32_t)(i + 1);
  nrec *r = rec_at(t, i);
  memset(r, 0, sizeof *r);
  r->id = id;
  return r;
}

static void tab_free(idtab *t) {
  for (size_t i = 0; i < t->n_blocks; i++) free(t->blocks[i]);
  free(t->blocks);
  free(t->slots);
}

/* ---- value checks ---- */

typedef struct span {
  const char *s;
  size_t n;
} span;

static bool span_is(span a, const char *lit) {
  size_t n = strlen(lit);
  return a.n == n && !memcmp(a.s, lit, n);
}

static bool span_starts(span a, const char *lit) {
  size_t n = strlen(lit);
  return a.n >= n && !memcmp(a.s, lit, n);
}

/* The length strcmp sees of a string of node n: its decoded length, unless a string of the
 * node holds a NUL byte (from a \u0000 escape), which ends it for strcmp. Comparing that many
 * bytes with memcmp then agrees with strcmp, without a call per compare. */
static inline size_t cstr_len(const rd_rnode *n, const char *s, size_t len) {
  return n->has_nul_strings ? strlen(s) : len;
}

/* n bytes of a and b are equal. With n a constant and b a literal this is two loads and
 * compares with immediates (the first and the last 4 or 8 bytes, overlapping when n is not a
 * multiple), where gcc would call memcmp for lengths such as 5 and 6. */
static inline bool bytes_eq(const char *a, const char *b, size_t n) {
  if (n >= 4 && n <= 8) {
    uint32_t x0, x1, y0, y1;
    memcpy(&x0, a, 4), memcpy(&x1, a + n - 4, 4);
    memcpy(&y0, b, 4), memcpy(&y1, b + n - 4, 4);
    return ((x0 ^ y0) | (x1 ^ y1)) == 0;
  }
  if (n >= 8 && n <= 16) {
    uint64_t x0, x1, y0, y1;
    memcpy(&x0, a, 8), memcpy(&x1, a + n - 8, 8);
    memcpy(&y0, b, 8), memcpy(&y1, b + n - 8, 8);
    return ((x0 ^ y0) | (x1 ^ y1)) == 0;
  }
  return !memcmp(a, b, n);
}

/* s (n bytes as cstr_len gives them) equals the literal lit. */
#define STR_IS(s, n, lit) ((n) == sizeof(lit) - 1 && bytes_eq((s), (lit), sizeof(lit) - 1))

/* Element types of "GenericList[A,B]" / "Tuple[A,B]" (the part inside the brackets split at
 * top-level commas). Returns the count (may exceed max: only max are stored). */
static size_t split_types(span inner, span *out, size_t max) {
  size_t n = 0, start = 0;
  int depth = 0;
  if (inner.n == 0) return 0;
  for (size_t i = 0; i <= inner.n; i++) {
    char c = i < inner.n ? inner.s[i] : ',';
    if (c == '[' || c == '(' || c == '<')
      depth++;
    else if (c == ']' || c == ')' || c == '>')
      depth--;
    else if (c == ',' && depth == 0) {
      if (n < max) out[n] = (span){inner.s + start, i - start};
      n++;
      start = i + 1;
    }
  }
  return n;
}

static bool is_int(const rd_jval *x) { return x->kind == ETR_J_INT; }

static bool int_array(const rd_jval *x) {
  if (x->kind != ETR_J_ARRAY) return false;
  for (size_t i = 0; i < x->v.arr.n; i++)
    if (!is_int(&x->v.arr.items[i])) return false;
  return true;
}

typedef struct vctx {
  vstate *v;
  const rd_rnode *node;
  const char *where; /* "inputs" / "outputs" */
  size_t index;
} vctx;

#define VPROB(c, s, ...) \
  problem((c)->v, (s), K_VALUE, (c)->node->offset, (c)->node->id, "%s[%zu]: " __VA_ARGS__)

/* One value against its type; shape and strides may be NULL (absent). depth bounds recursion. */
static void check_value(vctx *c, span type, const rd_jval *val, const rd_jval *shape,
                        const rd_jval *strides, int depth) {
  if (depth > 32) return;
  if (span_starts(type, "Tensor(")) {
    bool ok = val->kind == ETR_J_ARRAY && val->v.arr.n == 6;
    for (size_t i = 0; ok && i < 5; i++)
      ok = is_int(&val->v.arr.items[i]) && val->v.arr.items[i].v.i >= 0;
    if (ok) ok = val->v.arr.items[5].kind == ETR_J_STRING;
    if (!ok) {
      VPROB(c, SEV_ERROR, "a %.*s value is not [id, storage, offset, numel, itemsize, \"device\"]",
            c->where, c->index, (int)type.n, type.s);
      return;
    }
    if (shape && !int_array(shape))
      VPROB(c, SEV_ERROR, "the shape of a tensor is not an array of integers", c->where, c->index);
    if (strides && !int_array(strides))
      VPROB(c, SEV_ERROR, "the strides of a tensor are not an array of integers", c->where,
            c->index);
    else if (strides && shape && shape->kind == ETR_J_ARRAY && strides->v.arr.n != shape->v.arr.n)
      VPROB(c, SEV_WARN, "tensor strides have %zu entries, its shape %zu", c->where, c->index,
            strides->v.arr.n, shape->v.arr.n);
    return;
  }
  bool list = span_starts(type, "GenericList[");
  bool tuple = !list && span_starts(type, "Tuple[");
  if (list || tuple) {
    if (val->kind != ETR_J_ARRAY) {
      VPROB(c, SEV_ERROR, "a %s value is not an array", c->where, c->index,
            list ? "GenericList" : "Tuple");
      return;
    }
    size_t pre = list ? 12 : 6;
    if (type.n < pre + 1 || type.s[type.n - 1] != ']') {
      VPROB(c, SEV_ERROR, "malformed type \"%.*s\"", c->where, c->index, (int)type.n, type.s);
      return;
    }
    span inner = {type.s + pre, type.n - pre - 1};
    span el[64];
    size_t nt = split_types(inner, el, 64);
    size_t nv = val->v.arr.n;
    if (shape && (shape->kind != ETR_J_ARRAY || shape->v.arr.n != nv)) {
      VPROB(c, SEV_ERROR, "the shape of a list does not nest like its value", c->where, c->index);
      shape = NULL;
    }
    if (strides && (strides->kind != ETR_J_ARRAY || strides->v.arr.n != nv)) {
      VPROB(c, SEV_ERROR, "the strides of a list do not nest like its value", c->where, c->index);
      strides = NULL;
    }
    if (nt != nv) {
      /* lists cut after 4096 elements keep the full count in neither; only note it */
      VPROB(c, SEV_WARN, "type names %zu elements, the value has %zu", c->where, c->index, nt, nv);
      return;
    }
    for (size_t i = 0; i < nv && i < 64; i++)
      check_value(c, el[i], &val->v.arr.items[i], shape ? &shape->v.arr.items[i] : NULL,
                  strides ? &strides->v.arr.items[i] : NULL, depth + 1);
    return;
  }
  /* scalars: shape [] */
  if (shape && !(shape->kind == ETR_J_ARRAY && shape->v.arr.n == 0))
    VPROB(c, SEV_ERROR, "the shape of a %.*s is not []", c->where, c->index, (int)type.n, type.s);
  if (strides && !(strides->kind == ETR_J_ARRAY && strides->v.arr.n == 0))
    VPROB(c, SEV_ERROR, "the strides of a %.*s are not []", c->where, c->index, (int)type.n,
          type.s);
  if (span_is(type, "Int")) {
    if (val->kind != ETR_J_INT)
      VPROB(c, SEV_ERROR, "an Int value is not an integer within int64", c->where, c->index);
  } else if (span_is(type, "Double")) {
    bool ok = val->kind == ETR_J_DOUBLE || val->kind == ETR_J_INT || val->kind == ETR_J_UINT;
    if (val->kind == ETR_J_STRING) {
      const char *vs = val->v.str.s;
      size_t vn = cstr_len(c->node, vs, val->v.str.len);
      ok = STR_IS(vs, vn, "nan") || STR_IS(vs, vn, "inf") || STR_IS(vs, vn, "-inf");
    }
    if (!ok) VPROB(c, SEV_ERROR, "a Double value is not a number", c->where, c->index);
  } else if (span_is(type, "Bool")) {
    if (val->kind != ETR_J_BOOL)
      VPROB(c, SEV_ERROR, "a Bool value is not true/false", c->where, c->index);
  } else if (span_is(type, "String") || span_is(type, "Device")) {
    if (val->kind != ETR_J_STRING)
      VPROB(c, SEV_ERROR, "a %.*s value is not a string", c->where, c->index, (int)type.n, type.s);
  } else if (span_is(type, "None")) {
    if (val->kind != ETR_J_STRING ||
        !STR_IS(val->v.str.s, cstr_len(c->node, val->v.str.s, val->v.str.len), "<None>"))
      VPROB(c, SEV_WARN, "a None value is not \"<None>\"", c->where, c->index);
  } else if (type.n == 0) {
    VPROB(c, SEV_ERROR, "empty type name", c->where, c->index);
  }
}

static void check_io(vstate *v, const rd_rnode *n, const rd_jval *io, const char *where) {
  if (!io) return; /* the reader has warned */
  const rd_jval *part[4] = {NULL, NULL, NULL, NULL};
  int k = 0;
  for (size_t i = 0; i < io->v.obj.n; i++) {
    const char *key = io->v.obj.items[i].key;
    size_t kn = cstr_len(n, key, io->v.obj.items[i].key_len);
    int j = -1;
    /* by length, then one fixed-size compare */
    if (kn == 6)
      j = STR_IS(key, kn, "values") ? 0 : STR_IS(key, kn, "shapes") ? 1 : -1;
    else if (kn == 5)
      j = STR_IS(key, kn, "types") ? 2 : -1;
    else if (kn == 7)
      j = STR_IS(key, kn, "strides") ? 3 : -1;
    if (j >= 0 && !part[j]) part[j] = &io->v.obj.items[i].val;
    if (j < k) {
      problem(v, SEV_ERROR, K_IO, n->offset, n->id,
              j >= 0 ? "%s: key \"%s\" out of order (values, shapes, types, strides)"
                     : "%s: unknown key \"%s\"",
              where, key);
      continue;
    }
    k = j + 1;
  }
  const rd_jval *vals = part[0], *shapes = part[1], *types = part[2], *strides = part[3];
  if (!strides && v->has_strides_schema)
    problem(v, SEV_WARN, K_IO, n->offset, n->id, "%s: no \"strides\" (schema %s)", where,
            v->hdr->schema);
  if (!vals || vals->kind != ETR_J_ARRAY || !types || types->kind != ETR_J_ARRAY) return;
  size_t nv = vals->v.arr.n;
  if (shapes && (shapes->kind != ETR_J_ARRAY || shapes->v.arr.n != nv)) shapes = NULL;
  if (strides && (strides->kind != ETR_J_ARRAY || strides->v.arr.n != nv)) strides = NULL;
  vctx c = {v, n, where, 0};
  for (size_t i = 0; i < nv && i < types->v.arr.n; i++) {
    const rd_jval *t = &types->v.arr.items[i];
    c.index = i;
    if (t->kind != ETR_J_STRING) {
      VPROB(&c, SEV_ERROR, "type is not a string", where, i);
      continue;
    }
    check_value(&c, (span){t->v.str.s, t->v.str.len}, &vals->v.arr.items[i],
                shapes ? &shapes->v.arr.items[i] : NULL, strides ? &strides->v.arr.items[i] : NULL,
                0);
  }
}

/* ---- per node ---- */

/* A node's fw_parent, checked once every id is known (only nodes that have one). */
typedef struct fwref {
  int64_t id, fw_parent;
  uint64_t offset;
} fwref;

typedef struct vrun {
  vstate v;
  idtab ids;
  fwref *fw; /* fw_parent references to check at the end */
  size_t n_fw, cap_fw;
  bool fw_oom;
  uint64_t nodes, ops, threads;
  bool have_process;
  uint64_t max_tb;
  int64_t max_tb_node;
  uint64_t max_tb_off;
  bool any_tb;
} vrun;

/* True for the attr names Chakra would copy over node fields (nm: n bytes, as cstr_len). */
static bool is_forbidden(const char *nm, size_t n) {
  switch (n) {
    case 2:
      return STR_IS(nm, n, "id");
    case 3:
      return STR_IS(nm, n, "cat");
    case 4:
      return STR_IS(nm, n, "name");
    case 6:
      return STR_IS(nm, n, "stream") || STR_IS(nm, n, "inputs") || STR_IS(nm, n, "parent");
    case 7:
      return STR_IS(nm, n, "outputs");
    default:
      return false;
  }
}

static void check_attrs(vstate *v, const rd_rnode *n) {
  const rd_jval *attrs = NULL;
  for (size_t i = n->raw->v.obj.n; i-- > 0;) { /* "attrs" comes last */
    const rd_jmember *m = &n->raw->v.obj.items[i];
    if (m->key[0] == 'a' && STR_IS(m->key, cstr_len(n, m->key, m->key_len), "attrs")) {
      attrs = &m->val;
      break;
    }
  }
  if (!attrs || attrs->kind != ETR_J_ARRAY) return; /* the reader has warned */
  int last_base = -1;
  bool seen_other = false;
  const char *seen[32];
  size_t seen_len[32];
  size_t n_seen = 0;
  static const char *const want[9] = {"uint64", "uint64", "int64",  "uint64", "uint64",
                                      "uint64", "string", "string", "string"};
  for (size_t i = 0; i < attrs->v.arr.n; i++) {
    const rd_jval *a = &attrs->v.arr.items[i];
    if (a->kind != ETR_J_OBJECT) continue; /* the reader has warned */
    const rd_jval *nm, *ty, *val;
    const rd_jmember *km = a->v.obj.items;
    if (a->v.obj.n == 3 && STR_IS(km[0].key, cstr_len(n, km[0].key, km[0].key_len), "name") &&
        STR_IS(km[1].key, cstr_len(n, km[1].key, km[1].key_len), "type") &&
        STR_IS(km[2].key, cstr_len(n, km[2].key, km[2].key_len), "value")) {
      nm = &km[0].val;
      ty = &km[1].val;
      val = &km[2].val;
    } else {
      problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
              "attr %zu: keys are not exactly \"name\", \"type\", \"value\" in this order", i);
      nm = rd_jobj_get(a, "name");
      ty = rd_jobj_get(a, "type");
      val = rd_jobj_get(a, "value");
    }
    if (!nm || nm->kind != ETR_J_STRING || !val) continue;
    const char *name = nm->v.str.s;
    size_t name_n = cstr_len(n, name, nm->v.str.len);
    bool ty_ok = ty && ty->kind == ETR_J_STRING;
    const char *type = ty_ok ? ty->v.str.s : "";
    size_t type_n = ty_ok ? cstr_len(n, type, ty->v.str.len) : 0;
    if (!ty_ok)
      problem(v, SEV_ERROR, K_ATTR, n->offset, n->id, "attr \"%s\": \"type\" is not a string",
              name);
    if (is_forbidden(name, name_n))
      problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
              "attr named \"%s\" (Chakra copies attrs over node fields)", name);
    size_t len = nm->v.str.len;
    for (size_t j = 0; j < n_seen; j++)
      if (seen_len[j] == len && seen[j][0] == name[0] && !memcmp(seen[j], name, len)) {
        problem(v, SEV_ERROR, K_ATTR, n->offset, n->id, "attr \"%s\" appears twice", name);
        break;
      }
    if (n_seen < 32) {
      seen[n_seen] = name;
      seen_len[n_seen++] = len;
    }
    int b = rd_base_attr_n(name, name_n);
    if (b >= 0) {
      if (b < last_base || seen_other)
        problem(
            v, SEV_ERROR, K_BASE, n->offset, n->id,
            "attr \"%s\" out of order (rf_id .. kernel_file come first, in docs/FORMAT.md order)",
            name);
      last_base = b;
      if (!(b == 2  ? STR_IS(type, type_n, "int64")
            : b < 6 ? STR_IS(type, type_n, "uint64")
                    : STR_IS(type, type_n, "string")))
        problem(v, SEV_ERROR, K_BASE, n->offset, n->id, "attr \"%s\" has type \"%s\", not \"%s\"",
                name, type, want[b]);
    } else {
      seen_other = true;
    }
    /* value against type */
    if (STR_IS(type, type_n, "uint64")) {
      if (val->kind == ETR_J_UINT)
        problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
                "attr \"%s\": %" PRIu64 " does not fit int64", name, val->v.u);
      else if (val->kind != ETR_J_INT || val->v.i < 0)
        problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
                "attr \"%s\": a uint64 value that is not a non-negative integer", name);
    } else if (STR_IS(type, type_n, "int64")) {
      if (val->kind != ETR_J_INT)
        problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
                "attr \"%s\": an int64 value that is not an integer within int64", name);
    } else if (STR_IS(type, type_n, "string")) {
      if (val->kind != ETR_J_STRING)
        problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
                "attr \"%s\": a string value that is not a string", name);
    }
  }
}

/* Index of a node key (k: n bytes, as cstr_len) in node_order, or -1: by length, then one
 * fixed-size compare. */
static int node_key(const char *k, size_t n) {
  switch (n) {
    case 2:
      return STR_IS(k, n, "id") ? 0 : STR_IS(k, n, "ts") ? 5 : -1;
    case 4:
      return STR_IS(k, n, "name") ? 1 : -1;
    case 5:
      return STR_IS(k, n, "attrs") ? 8 : -1;
    case 6:
      return STR_IS(k, n, "inputs") ? 3 : -1;
    case 7:
      return STR_IS(k, n, "outputs") ? 4 : -1;
    case 9:
      return STR_IS(k, n, "ctrl_deps") ? 2 : -1;
    case 13:
      return STR_IS(k, n, "inclusive_dur") ? 6 : STR_IS(k, n, "exclusive_dur") ? 7 : -1;
    default:
      return -1;
  }
}

static void check_node(vrun *w, const rd_rnode *n) {
  vstate *v = &w->v;
  /* key order */
  int k = 0;
  bool present[9] = {false};
  for (size_t i = 0; i < n->raw->v.obj.n; i++) {
    const char *key = n->raw->v.obj.items[i].key;
    int j = node_key(key, cstr_len(n, key, n->raw->v.obj.items[i].key_len));
    if (j >= 0) present[j] = true;
    if (j < k) {
      if (j >= 0)
        problem(v, SEV_ERROR, K_KEYS, n->offset, n->id,
                "key \"%s\" out of order (id, name, ctrl_deps, inputs, outputs, [ts, "
                "inclusive_dur, exclusive_dur], attrs)",
                key);
      else
        problem(v, SEV_ERROR, K_KEYS, n->offset, n->id, "unknown key \"%s\"", key);
      continue;
    }
    k = j + 1;
  }
  /* timing */
  if (present[5] || present[6] || present[7]) {
    if (!n->has_timing)
      problem(v, SEV_ERROR, K_TIMING, n->offset, n->id,
              "ts, inclusive_dur and exclusive_dur must all be integers, or all absent");
    else if (n->inclusive_dur < 0 || n->exclusive_dur < 0 || n->exclusive_dur > n->inclusive_dur)
      problem(v, SEV_ERROR, K_TIMING, n->offset, n->id,
              "durations inclusive %" PRId64 ", exclusive %" PRId64
              " (want 0 <= exclusive <= inclusive)",
              n->inclusive_dur, n->exclusive_dur);
  }
  if (n->id <= 0 && present[0])
    problem(v, SEV_ERROR, K_FIELD, n->offset, n->id, "id %" PRId64 " is not positive", n->id);
  check_attrs(v, n);
  check_io(v, n, n->inputs, "inputs");
  check_io(v, n, n->outputs, "outputs");

  int nk = NK_OP;
  size_t name_n = cstr_len(n, n->name, n->name_len);
  if (STR_IS(n->name, name_n, PROCESS_NAME)) {
    nk = NK_PROCESS;
    if (n->id != 1)
      problem(v, SEV_ERROR, K_SPECIAL, n->offset, n->id, "process node with id %" PRId64 ", not 1",
              n->id);
    if (n->ctrl_deps != 1)
      problem(v, SEV_ERROR, K_SPECIAL, n->offset, n->id,
              "process node with ctrl_deps %" PRId64 ", not 1", n->ctrl_deps);
  } else if (STR_IS(n->name, name_n, THREAD_NAME)) {
    nk = NK_THREAD;
    w->threads++;
    if (n->ctrl_deps != 1)
      problem(v, SEV_ERROR, K_SPECIAL, n->offset, n->id,
              "thread node with ctrl_deps %" PRId64 ", not 1 (the process node)", n->ctrl_deps);
  } else {
    w->ops++;
    if (n->id == 1)
      problem(v, SEV_ERROR, K_SPECIAL, n->offset, n->id, "id 1 is not the process node");
  }
  if (n->has_traceback) {
    w->any_tb = true;
    if (n->traceback >= w->max_tb) {
      w->max_tb = n->traceback;
      w->max_tb_node = n->id;
      w->max_tb_off = n->offset;
    }
  }
  if (n->id < 0 && !present[0]) return; /* no id: the reader has warned */
  bool dup;
  nrec *r = tab_add(&w->ids, n->id, &dup);
  if (!r) {
    problem(v, SEV_ERROR, K_DUPID, n->offset, n->id,
            "out of memory for the id table: parents are not checked");
    return;
  }
  if (dup) {
    problem(v, SEV_ERROR, K_DUPID, n->offset, n->id,
            "id %" PRId64 " already used by the node at byte %" PRIu64, n->id, (uint64_t)r->offset);
    return;
  }
  r->parent = n->ctrl_deps;
  r->offset = n->offset;
  if (n->fw_parent != 0 && !w->fw_oom) {
    if (w->n_fw == w->cap_fw) {
      size_t cap = w->cap_fw ? w->cap_fw * 2 : 256;
      fwref *f = realloc(w->fw, cap * sizeof *f);
      if (f == NULL) {
        w->fw_oom = true;
        problem(v, SEV_WARN, K_PARENT, n->offset, n->id,
                "out of memory for fw_parent references: they are not checked");
      } else {
        w->fw = f;
        w->cap_fw = cap;
      }
    }
    if (!w->fw_oom) w->fw[w->n_fw++] = (fwref){n->id, (int64_t)n->fw_parent, n->offset};
  }
  r->tid = n->tid;
  r->kind = (unsigned)nk & 3;
  if (nk == NK_PROCESS) w->have_process = true;
}

/* After the last node: parents exist, and every op reaches its thread node. */
static void check_tree(vrun *w, uint64_t end_off) {
  vstate *v = &w->v;
  idtab *t = &w->ids;
  if (!w->have_process)
    problem(v, SEV_ERROR, K_SPECIAL, end_off, -1, "no process node (id 1, name " PROCESS_NAME ")");
  /* fw_parent names a node of the file, as ctrl_deps does (a trace cut by kill -9 can lose
   * the forward op a backward op points to: etr repair adds a placeholder for it) */
  for (size_t i = 0; i < w->n_fw; i++)
    if (tab_find(t, w->fw[i].fw_parent) < 0)
      problem(v, SEV_ERROR, K_PARENT, w->fw[i].offset, w->fw[i].id,
              "fw_parent %" PRId64 " does not exist", w->fw[i].fw_parent);
  /* pass 1: parent ids -> indexes */
  for (size_t i = 0; i < t->n; i++) {
    nrec *r = rec_at(t, i);
    if (r->kind == NK_PROCESS) {
      r->state = ST_OK;
      r->parent = -1;
      continue;
    }
    int64_t p = tab_find(t, r->parent);
    if (p < 0) {
      problem(v, SEV_ERROR, K_PARENT, (uint64_t)r->offset, r->id,
              "parent %" PRId64 " (ctrl_deps) does not exist", r->parent);
      r->state = ST_BAD;
      r->parent = -1;
      continue;
    }
    if (r->kind == NK_THREAD) {
      if (rec_at(t, (size_t)p)->kind != NK_PROCESS) { /* reported in check_node */
      }
      r->state = ST_OK;
      r->parent = (int64_t)i; /* a thread node reaches itself */
      continue;
    }
    r->parent = p;
  }
  /* pass 2: follow parents, compressing paths to the thread node reached */
  size_t *path = NULL, cap = 0;
  for (size_t i = 0; i < t->n; i++) {
    nrec *r = rec_at(t, i);
    if (r->state != ST_NONE) continue;
    size_t len = 0;
    size_t cur = i;
    int64_t result = -1;
    const char *why = NULL;
    for (;;) {
      nrec *c = rec_at(t, cur);
      if (c->state == ST_OK) {
        result = c->kind == NK_PROCESS ? -1 : c->parent;
        if (c->kind == NK_PROCESS) why = "reaches the process node without a thread node";
        break;
      }
      if (c->state == ST_BAD) {
        why = "its chain of parents is broken";
        break;
      }
      if (c->state == ST_BUSY) {
        why = "its chain of parents has a cycle";
        break;
      }
      c->state = ST_BUSY;
      if (len == cap) {
        cap = cap ? cap * 2 : 64;
        size_t *np = realloc(path, cap * sizeof *np);
        if (!np) {
          free(path);
          return;
        }
        path = np;
      }
      path[len++] = cur;
      cur = (size_t)c->parent;
    }
    for (size_t j = 0; j < len; j++) {
      nrec *c = rec_at(t, path[j]);
      if (result >= 0) {
        c->state = ST_OK;
        c->parent = result;
        nrec *th = rec_at(t, (size_t)result);
        if (c->tid != th->tid)
          problem(v, SEV_ERROR, K_REACH, c->offset, c->id,
                  "tid %" PRIu64 ", but it hangs under the thread node %" PRId64 " of tid %" PRIu64,
                  (uint64_t)c->tid, th->id, (uint64_t)th->tid);
      } else {
        c->state = ST_BAD;
      }
    }
    /* a broken chain was reported where it breaks (a missing parent); a cycle or an op
     * right under the process node is reported once, at the top of the chain walked */
    if (result < 0 && len && why && strcmp(why, "its chain of parents is broken")) {
      nrec *c = rec_at(t, path[len - 1]);
      problem(v, SEV_ERROR, K_REACH, c->offset, c->id, "does not reach a thread node: %s", why);
    }
  }
  free(path);
}

/* ---- file level ---- */

static void check_top(vstate *v, rd_reader *r, uint64_t end_off) {
  static const char *const want[6] = {"schema", "pid", "time", "start_ts", "nodes", "finish_ts"};
  size_t nk;
  const char *const *keys = rd_top_keys(r, &nk);
  int last = -1;
  bool seen[6] = {false};
  for (size_t i = 0; i < nk; i++) {
    int w = -1;
    for (int q = 0; q < 6; q++)
      if (!strcmp(keys[i], want[q])) w = q;
    if (w < 0) continue;
    seen[w] = true;
    if (w < last)
      problem(v, SEV_ERROR, K_TOP, 0, -1,
              "top-level key \"%s\" out of order (schema, pid, time, start_ts, nodes, finish_ts)",
              keys[i]);
    last = w;
  }
  for (int q = 0; q < 6; q++)
    if (!seen[q])
      problem(v, SEV_ERROR, K_TOP, q < 4 ? 0 : end_off, -1, "no top-level \"%s\"", want[q]);
  const rd_rheader *h = rd_header(r);
  if (h->time) {
    int Y, M, D, hh, mm, ss, n = 0;
    if (sscanf(h->time, "%4d-%2d-%2d %2d:%2d:%2d%n", &Y, &M, &D, &hh, &mm, &ss, &n) != 6 ||
        h->time[n] || strlen(h->time) != 19)
      problem(v, SEV_WARN, K_HEADER, 0, -1, "\"time\" \"%s\" is not YYYY-MM-DD HH:MM:SS", h->time);
  }
}

static void check_trailer(vrun *w, rd_reader *r, uint64_t end_off) {
  vstate *v = &w->v;
  const rd_jval *frames = rd_trailer(r, "frames");
  const rd_jval *tbs = rd_trailer(r, "tracebacks");
  size_t n_frames = 0;
  /* a table over the reader's limit was skipped (the reader warned): what needs it is not
   * checked */
  bool skipped = rd_skipped(r, "frames") || rd_skipped(r, "tracebacks");
  if (skipped) frames = tbs = NULL;
  if (frames) {
    if (frames->kind != ETR_J_ARRAY) {
      problem(v, SEV_ERROR, K_TB, end_off, -1, "\"frames\" is not an array");
      frames = NULL;
    } else {
      n_frames = frames->v.arr.n;
      for (size_t i = 0; i < n_frames; i++) {
        const rd_jval *f = &frames->v.arr.items[i];
        const rd_jval *nm = rd_jobj_get(f, "name"), *fn = rd_jobj_get(f, "filename"),
                      *ln = rd_jobj_get(f, "line");
        if (f->kind != ETR_J_OBJECT || !nm || nm->kind != ETR_J_STRING || !fn ||
            fn->kind != ETR_J_STRING || !ln || ln->kind != ETR_J_INT)
          problem(v, SEV_ERROR, K_TB, end_off, -1,
                  "frame %zu is not {\"name\": string, \"filename\": string, \"line\": int}", i);
      }
    }
  }
  if (tbs) {
    if (tbs->kind != ETR_J_ARRAY) {
      problem(v, SEV_ERROR, K_TB, end_off, -1, "\"tracebacks\" is not an array");
      tbs = NULL;
    } else {
      if (!frames && tbs->v.arr.n)
        problem(v, SEV_ERROR, K_TB, end_off, -1, "\"tracebacks\" without \"frames\"");
      for (size_t i = 0; i < tbs->v.arr.n; i++) {
        const rd_jval *t = &tbs->v.arr.items[i];
        if (t->kind != ETR_J_ARRAY) {
          problem(v, SEV_ERROR, K_TB, end_off, -1, "traceback %zu is not an array", i);
          continue;
        }
        for (size_t j = 0; j < t->v.arr.n; j++) {
          const rd_jval *x = &t->v.arr.items[j];
          if (x->kind != ETR_J_INT || x->v.i < 0 || (uint64_t)x->v.i >= n_frames) {
            problem(v, SEV_ERROR, K_TB, end_off, -1,
                    "traceback %zu: entry %zu is not an index into \"frames\" (%zu entries)", i, j,
                    n_frames);
            break;
          }
        }
      }
    }
  }
  if (w->any_tb && !skipped) {
    size_t n_tbs = tbs ? tbs->v.arr.n : 0;
    if (!tbs)
      problem(v, SEV_ERROR, K_TB, w->max_tb_off, w->max_tb_node,
              "nodes carry a \"traceback\" attr but the file has no \"tracebacks\" table");
    else if (w->max_tb >= n_tbs)
      problem(v, SEV_ERROR, K_TB, w->max_tb_off, w->max_tb_node,
              "traceback %" PRIu64 " is beyond the \"tracebacks\" table (%zu entries)", w->max_tb,
              n_tbs);
  }
  const rd_jval *etr = rd_trailer(r, "etr");
  if (etr) {
    const rd_jval *ver = rd_jobj_get(etr, "version"), *st = rd_jobj_get(etr, "stats");
    if (etr->kind != ETR_J_OBJECT || !ver || ver->kind != ETR_J_STRING)
      problem(v, SEV_ERROR, K_FOOTER, end_off, -1, "\"etr\" has no \"version\" string");
    if (st) {
      if (st->kind != ETR_J_OBJECT) {
        problem(v, SEV_ERROR, K_FOOTER, end_off, -1, "\"etr\".\"stats\" is not an object");
      } else {
        for (size_t i = 0; i < st->v.obj.n; i++)
          if (st->v.obj.items[i].val.kind != ETR_J_INT)
            problem(v, SEV_ERROR, K_FOOTER, end_off, -1, "stat \"%s\" is not an integer",
                    st->v.obj.items[i].key);
        /* What the recorder repaired or lost on the way: the trace is valid, but the runtime
         * misused begin/end, or nodes are missing. Said once, as a note. */
        static const char *const misuse[] = {
            "ends_without_begin", "ends_out_of_order",   "ends_cross_thread",
            "ops_abandoned",      "ops_open_at_disable", "ops_open_at_thread_exit",
            "ops_open_at_close",  "nodes_dropped",       "write_error"};
        char note[512];
        size_t k = 0;
        note[0] = '\0';
        for (size_t i = 0; i < sizeof misuse / sizeof misuse[0]; i++) {
          const rd_jval *c = rd_jobj_get(st, misuse[i]);
          if (c && c->kind == ETR_J_INT && c->v.i != 0 && k < sizeof note)
            k += (size_t)snprintf(note + k, sizeof note - k, "%s%s %" PRId64, k ? ", " : "",
                                  misuse[i], c->v.i);
        }
        if (k && !v->quiet) printf("%s: note: the recorder reports %s\n", v->file, note);
        const rd_jval *nw = rd_jobj_get(st, "nodes_written");
        /* the footer counts nodes handed to the writer, the process node included */
        if (nw && nw->kind == ETR_J_INT && (uint64_t)nw->v.i != w->nodes &&
            (uint64_t)nw->v.i != w->nodes + 1)
          problem(v, SEV_WARN, K_FOOTER, end_off, -1,
                  "the footer says %" PRId64 " nodes written, the file has %" PRIu64, nw->v.i,
                  w->nodes);
      }
    }
  }
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: etr validate [--strict] [--max N] [--quiet] FILE\n"
      "\n"
      "Checks a trace's structure and format (docs/FORMAT.md), streaming: key order in the file\n"
      "and in each node; the base attrs rf_id .. op_schema on every node, in order, with\n"
      "their types; integer attrs within int64; no attr named cat/stream/name/id/inputs/\n"
      "outputs/parent; inputs/outputs with values, shapes, types (and strides) of equal\n"
      "length, each value well formed for its type (tensors as [id, storage, offset,\n"
      "numel, itemsize, \"device\"]); unique ids; parents and fw_parents that exist; every op "
      "reaching\n"
      "its thread node; the process node; traceback tables.\n"
      "\n"
      "Each problem is one line on stdout, 'FILE: byte N: node ID: error|warning: what',\n"
      "then a verdict line. Warnings are what real PyTorch traces do that our rules do\n"
      "not allow (e.g. a strides array shorter than values).\n"
      "\n"
      "  --strict   warnings count as errors\n"
      "  --max N    list at most N problems of each kind (default 50; the rest are counted)\n"
      "  --quiet    print only the verdict line\n"
      "  FILE       a trace, .json or gzip-compressed; '-' reads stdin\n"
      "\n"
      "exit status: 0 valid, 1 errors found (or warnings with --strict) or unreadable\n"
      "input, 2 usage error.\n");
}

int cmd_validate(int argc, char **argv) {
  vrun w;
  memset(&w, 0, sizeof w);
  w.v.max_per_kind = 50;
  static const struct option opts[] = {{"strict", no_argument, NULL, 's'},
                                       {"max", required_argument, NULL, 'm'},
                                       {"quiet", no_argument, NULL, 'q'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":sm:qh", opts, NULL)) != -1) {
    switch (c) {
      case 's':
        w.v.strict = true;
        break;
      case 'q':
        w.v.quiet = true;
        break;
      case 'm':
        if (!cli_parse_u64(CMD, "--max", optarg, &w.v.max_per_kind)) return ETR_CLI_USAGE;
        break;
      case 'h':
        usage(stdout);
        return ETR_CLI_OK;
      default:
        return cli_getopt_error(CMD, c, argv);
    }
  }
  if (optind != argc - 1)
    return cli_usage(CMD, optind >= argc ? "no input file" : "one input file only");
  const char *path = argv[optind];

  rd_options ro = ETR_READER_OPTIONS_INIT;
  ro.warn = on_reader_warning;
  ro.user = &w.v;
  cli_input in;
  w.v.file = strcmp(path, "-") ? path : "<stdin>";
  if (cli_open(&in, CMD, path, &ro)) return ETR_CLI_FAIL;
  w.v.hdr = rd_header(in.r);
  w.v.has_strides_schema =
      w.v.hdr->schema_major > 1 ||
      (w.v.hdr->schema_major == 1 &&
       (w.v.hdr->schema_minor > 1 || (w.v.hdr->schema_minor == 1 && w.v.hdr->schema_patch >= 1)));
  const rd_rnode *n;
  int rc;
  while ((rc = cli_next(&in, &n)) == 1) {
    w.nodes++;
    check_node(&w, n);
  }
  if (rc == 0) rc = cli_finish(&in);
  if (rc < 0) {
    fflush(stdout);
    cli_close(&in);
    tab_free(&w.ids);
    free(w.fw);
    return ETR_CLI_FAIL;
  }
  uint64_t end = rd_offset(in.r);
  check_top(&w.v, in.r, end);
  check_trailer(&w, in.r, end);
  check_tree(&w, end);
  char schema[128];
  snprintf(schema, sizeof schema, "%s", w.v.hdr->schema ? w.v.hdr->schema : "?");
  cli_close(&in);
  tab_free(&w.ids);
  free(w.fw);

  vstate *v = &w.v;
  for (int s = 1; s >= 0; s--)
    for (int k = 0; k < K_COUNT; k++)
      if (!v->quiet && v->count[s][k] > v->max_per_kind)
        printf("%s: ... %" PRIu64 " more %s about %s\n", v->file, v->count[s][k] - v->max_per_kind,
               s ? "errors" : "warnings", kind_names[k]);
  if (v->errors)
    printf("%s: INVALID: %" PRIu64 " errors, %" PRIu64 " warnings (%" PRIu64 " nodes)\n", v->file,
           v->errors, v->warnings, w.nodes);
  else
    printf("%s: valid: %" PRIu64 " nodes (%" PRIu64 " ops, %" PRIu64 " threads), %" PRIu64
           " warnings, schema %s\n",
           v->file, w.nodes, w.ops, w.threads, v->warnings, schema);
  if (fflush(stdout) != 0) {
    cli_error(CMD, "<stdout>: write error");
    return ETR_CLI_FAIL;
  }
  return v->errors ? ETR_CLI_FAIL : ETR_CLI_OK;
}
