/* `etr validate`: the checks of one node, run as it streams by (validate.h): its keys and
 * their order, timing, attrs (shape, base attrs, types, values, names), inputs and outputs
 * (parts, lengths, each value against its type), the process and thread nodes; then its id,
 * parent and tid go on to the tree checks (validate_tree.c).
 *
 * This is validate's hot path (one call per node of files of many GB): names are compared
 * by length and fixed-size loads (STR_IS), not strcmp. Most nodes do not come here whole: the
 * reader's scan (src/json/reader_lean.c, rd_options.conform) checks the same rules (keys,
 * attrs, inputs/outputs, values against types) on a node's text and hands it over without its
 * tree when all hold (rd_rnode.conforms). A rule changed here must change there too; tests
 * cli.reader_conform and cli.validate_conform compare the two.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "validate.h"

/* ---- value checks ---- */

typedef rd_span span;

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
static inline size_t cstr_len(bool nul, const char *s, size_t len) { return nul ? strlen(s) : len; }

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
  vd_problem((c)->v, (s), K_VALUE, (c)->node->offset, (c)->node->id, "%s[%zu]: " __VA_ARGS__)

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
    size_t nt = rd_split_types(inner, el, 64);
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
      size_t vn = cstr_len(c->node->has_nul_strings, vs, val->v.str.len);
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
        !STR_IS(val->v.str.s, cstr_len(c->node->has_nul_strings, val->v.str.s, val->v.str.len),
                "<None>"))
      VPROB(c, SEV_WARN, "a None value is not \"<None>\"", c->where, c->index);
  } else if (type.n == 0) {
    VPROB(c, SEV_ERROR, "empty type name", c->where, c->index);
  }
}

static void check_io(vstate *v, const rd_rnode *n, const rd_jval *io, bool exact,
                     const char *where) {
  if (!io) return; /* the reader has warned */
  const rd_jval *part[4] = {NULL, NULL, NULL, NULL};
  int k = 0;
  if (exact) /* the reader found the keys in order, one of each: nothing to report */
    for (size_t i = 0; i < io->v.obj.n; i++) part[i] = &io->v.obj.items[i].val;
  for (size_t i = 0; !exact && i < io->v.obj.n; i++) {
    const char *key = io->v.obj.items[i].key;
    size_t kn = cstr_len(n->has_nul_strings, key, io->v.obj.items[i].key_len);
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
      vd_problem(v, SEV_ERROR, K_IO, n->offset, n->id,
                 j >= 0 ? "%s: key \"%s\" out of order (values, shapes, types, strides)"
                        : "%s: unknown key \"%s\"",
                 where, key);
      continue;
    }
    k = j + 1;
  }
  const rd_jval *vals = part[0], *shapes = part[1], *types = part[2], *strides = part[3];
  if (!strides && v->has_strides_schema)
    vd_problem(v, SEV_WARN, K_IO, n->offset, n->id, "%s: no \"strides\" (schema %s)", where,
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

/* The attr types whose values are checked. */
enum { T_UINT64 = 0, T_INT64 = 1, T_STRING = 2 };

/* T_UINT64, T_INT64, T_STRING for a type name (n bytes, as cstr_len), else -1. */
static inline int type_kind(const char *t, size_t n) {
  if (n == 6) return STR_IS(t, n, "uint64") ? T_UINT64 : STR_IS(t, n, "string") ? T_STRING : -1;
  return STR_IS(t, n, "int64") ? T_INT64 : -1;
}

static void check_attrs(vstate *v, const rd_rnode *n) {
  const rd_jval *attrs = NULL;
  bool nul = n->has_nul_strings;
  for (size_t i = n->raw->v.obj.n; i-- > 0;) { /* "attrs" comes last */
    const rd_jmember *m = &n->raw->v.obj.items[i];
    if (m->key[0] == 'a' && STR_IS(m->key, cstr_len(nul, m->key, m->key_len), "attrs")) {
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
  uint64_t seen_bits = 0; /* a bit per length and first byte seen: most names need no loop */
  /* the reader's attr list matches the array one for one when it dropped none: what it found
   * of each (exact keys, the base attr index) then serves here */
  const rd_rattr *ra = n->n_attrs == attrs->v.arr.n ? n->attrs : NULL;
  static const char *const want[9] = {"uint64", "uint64", "int64",  "uint64", "uint64",
                                      "uint64", "string", "string", "string"};
  for (size_t i = 0; i < attrs->v.arr.n; i++) {
    const rd_jval *a = &attrs->v.arr.items[i];
    if (a->kind != ETR_J_OBJECT) continue; /* the reader has warned */
    const rd_jval *nm, *ty, *val;
    const rd_jmember *km = a->v.obj.items;
    if (ra ? ra[i].exact_keys
           : a->v.obj.n == 3 &&
                 STR_IS(km[0].key, cstr_len(nul, km[0].key, km[0].key_len), "name") &&
                 STR_IS(km[1].key, cstr_len(nul, km[1].key, km[1].key_len), "type") &&
                 STR_IS(km[2].key, cstr_len(nul, km[2].key, km[2].key_len), "value")) {
      nm = &km[0].val;
      ty = &km[1].val;
      val = &km[2].val;
    } else {
      vd_problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
                 "attr %zu: keys are not exactly \"name\", \"type\", \"value\" in this order", i);
      nm = rd_jobj_get(a, "name");
      ty = rd_jobj_get(a, "type");
      val = rd_jobj_get(a, "value");
    }
    if (!nm || nm->kind != ETR_J_STRING || !val) continue;
    const char *name = nm->v.str.s;
    size_t name_n = cstr_len(nul, name, nm->v.str.len);
    bool ty_ok = ty && ty->kind == ETR_J_STRING;
    const char *type = ty_ok ? ty->v.str.s : "";
    size_t type_n = ty_ok ? cstr_len(nul, type, ty->v.str.len) : 0;
    if (!ty_ok)
      vd_problem(v, SEV_ERROR, K_ATTR, n->offset, n->id, "attr \"%s\": \"type\" is not a string",
                 name);
    int b = ra ? ra[i].base : rd_base_attr_n(name, name_n);
    if (b < 0 && is_forbidden(name, name_n)) /* no base attr is */
      vd_problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
                 "attr named \"%s\" (Chakra copies attrs over node fields)", name);
    size_t len = nm->v.str.len;
    uint64_t bit = 1ull << ((len * 7u + (unsigned char)name[0]) & 63);
    if (seen_bits & bit) {
      for (size_t j = 0; j < n_seen; j++)
        if (seen_len[j] == len && !memcmp(seen[j], name, len)) {
          vd_problem(v, SEV_ERROR, K_ATTR, n->offset, n->id, "attr \"%s\" appears twice", name);
          break;
        }
    }
    seen_bits |= bit;
    if (n_seen < 32) {
      seen[n_seen] = name;
      seen_len[n_seen++] = len;
    }
    int tk; /* the type: T_UINT64, T_INT64, T_STRING or -1 (another) */
    if (b >= 0) {
      if (b < last_base || seen_other)
        vd_problem(
            v, SEV_ERROR, K_BASE, n->offset, n->id,
            "attr \"%s\" out of order (rf_id .. kernel_file come first, in docs/FORMAT.md order)",
            name);
      last_base = b;
      tk = b == 2 ? T_INT64 : b < 6 ? T_UINT64 : T_STRING;
      if (type_kind(type, type_n) != tk) {
        vd_problem(v, SEV_ERROR, K_BASE, n->offset, n->id,
                   "attr \"%s\" has type \"%s\", not \"%s\"", name, type, want[b]);
        tk = type_kind(type, type_n);
      }
    } else {
      seen_other = true;
      tk = type_kind(type, type_n);
    }
    /* value against type */
    if (tk == T_UINT64) {
      if (val->kind == ETR_J_UINT)
        vd_problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
                   "attr \"%s\": %" PRIu64 " does not fit int64", name, val->v.u);
      else if (val->kind != ETR_J_INT || val->v.i < 0)
        vd_problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
                   "attr \"%s\": a uint64 value that is not a non-negative integer", name);
    } else if (tk == T_INT64) {
      if (val->kind != ETR_J_INT)
        vd_problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
                   "attr \"%s\": an int64 value that is not an integer within int64", name);
    } else if (tk == T_STRING) {
      if (val->kind != ETR_J_STRING)
        vd_problem(v, SEV_ERROR, K_ATTR, n->offset, n->id,
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

void vd_check_node(vrun *w, const rd_rnode *n) {
  vstate *v = &w->v;
  /* key order */
  int k = 0;
  bool present[9] = {false};
  for (int j = 0; j < 9; j++) present[j] = n->key_bits >> j & 1;
  /* the reader found every key known and in order: nothing to report */
  for (size_t i = 0; !n->keys_in_order && i < n->raw->v.obj.n; i++) {
    const char *key = n->raw->v.obj.items[i].key;
    int j = node_key(key, cstr_len(n->has_nul_strings, key, n->raw->v.obj.items[i].key_len));
    if (j >= 0) present[j] = true;
    if (j < k) {
      if (j >= 0)
        vd_problem(v, SEV_ERROR, K_KEYS, n->offset, n->id,
                   "key \"%s\" out of order (id, name, ctrl_deps, inputs, outputs, [ts, "
                   "inclusive_dur, exclusive_dur], attrs)",
                   key);
      else
        vd_problem(v, SEV_ERROR, K_KEYS, n->offset, n->id, "unknown key \"%s\"", key);
      continue;
    }
    k = j + 1;
  }
  /* timing */
  if (present[5] || present[6] || present[7]) {
    if (!n->has_timing)
      vd_problem(v, SEV_ERROR, K_TIMING, n->offset, n->id,
                 "ts, inclusive_dur and exclusive_dur must all be integers, or all absent");
    else if (n->inclusive_dur < 0 || n->exclusive_dur < 0 || n->exclusive_dur > n->inclusive_dur)
      vd_problem(v, SEV_ERROR, K_TIMING, n->offset, n->id,
                 "durations inclusive %" PRId64 ", exclusive %" PRId64
                 " (want 0 <= exclusive <= inclusive)",
                 n->inclusive_dur, n->exclusive_dur);
  }
  if (n->id <= 0 && present[0])
    vd_problem(v, SEV_ERROR, K_FIELD, n->offset, n->id, "id %" PRId64 " is not positive", n->id);
  if (!n->conforms) { /* else the reader found all of this to hold, and built no tree */
    check_attrs(v, n);
    check_io(v, n, n->inputs, n->inputs_exact_keys, "inputs");
    check_io(v, n, n->outputs, n->outputs_exact_keys, "outputs");
  }

  int nk = NK_OP;
  size_t name_n = cstr_len(n->has_nul_strings, n->name, n->name_len);
  if (STR_IS(n->name, name_n, PROCESS_NAME)) {
    nk = NK_PROCESS;
    if (n->id != 1)
      vd_problem(v, SEV_ERROR, K_SPECIAL, n->offset, n->id,
                 "process node with id %" PRId64 ", not 1", n->id);
    if (n->ctrl_deps != 1)
      vd_problem(v, SEV_ERROR, K_SPECIAL, n->offset, n->id,
                 "process node with ctrl_deps %" PRId64 ", not 1", n->ctrl_deps);
  } else if (STR_IS(n->name, name_n, THREAD_NAME)) {
    nk = NK_THREAD;
    w->threads++;
    if (n->ctrl_deps != 1)
      vd_problem(v, SEV_ERROR, K_SPECIAL, n->offset, n->id,
                 "thread node with ctrl_deps %" PRId64 ", not 1 (the process node)", n->ctrl_deps);
  } else {
    w->ops++;
    if (n->id == 1)
      vd_problem(v, SEV_ERROR, K_SPECIAL, n->offset, n->id, "id 1 is not the process node");
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
  vd_tree_node(w, n, nk);
}
