/* The node builder of the trace reader (reader_int.h): what every tool needs of a node, pulled
 * out of the tree either parser built (etr__rd_node_done): id, name, parent, timing, inputs
 * and outputs, the base attrs and the attr list, with a warning for each part that is
 * missing or of the wrong kind; then the node is queued for rd_next.
 *
 * Its own file because it is the one place that knows the node layout of docs/FORMAT.md on
 * the reading side, whatever parser ran: the parsers (reader_hand.c, reader_yajl.c) know
 * JSON, reader.c the file around the nodes. Names are matched by length and a fixed-size
 * compare, by strcmp only when a string of the node holds a NUL (r->nul_str), as commands
 * compare them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "etr/common.h"
#include "json/reader_int.h"

static const char *const base_attrs[9] = {"rf_id",      "fw_parent", "seq_id",    "scope",
                                          "tid",        "fw_tid",    "op_schema", "kernel_backend",
                                          "kernel_file"};

const rd_jval *rd_jobj_get(const rd_jval *obj, const char *key) {
  if (!obj || obj->kind != ETR_J_OBJECT) return NULL;
  for (size_t i = 0; i < obj->v.obj.n; i++)
    if (!strcmp(obj->v.obj.items[i].key, key)) return &obj->v.obj.items[i].val;
  return NULL;
}

int rd_base_attr(const char *nm) {
  int b = -1;
  switch (nm[0]) {
    case 'r':
      b = 0;
      break;
    case 'f':
      b = nm[1] == 'w' && nm[2] == '_' && nm[3] == 'p' ? 1 : 5;
      break;
    case 's':
      b = nm[1] == 'e' ? 2 : 3;
      break;
    case 't':
      b = 4;
      break;
    case 'o':
      b = 6;
      break;
    case 'k':
      b = strncmp(nm, "kernel_b", 8) ? 8 : 7;
      break;
    default:
      return -1;
  }
  return strcmp(nm, base_attrs[b]) ? -1 : b;
}

/* True when name s (n bytes, NUL-terminated) equals lit as strcmp compares them: by length
 * and memcmp, unless a string of the node holds a NUL (nul: r->nul_str). */
static inline bool name_is(const char *s, size_t n, const char *lit, size_t lit_len, bool nul) {
  if (ETR_RD_UNLIKELY(nul)) return !strcmp(s, lit);
  return n == lit_len && !memcmp(s, lit, lit_len);
}
#define NAME_IS(s, n, lit, nul) name_is(s, n, lit, sizeof lit - 1, nul)

/* rd_jobj_get by name_is. */
static const rd_jval *obj_get(const rd_jval *obj, const char *key, size_t key_len, bool nul) {
  if (!obj || obj->kind != ETR_J_OBJECT) return NULL;
  for (size_t i = 0; i < obj->v.obj.n; i++) {
    const rd_jmember *m = &obj->v.obj.items[i];
    if (name_is(m->key, m->key_len, key, key_len, nul)) return &m->val;
  }
  return NULL;
}

/* The node keys in docs/FORMAT.md order (rd_rnode.key_bits). */
enum { K_ID, K_NAME, K_CTRL_DEPS, K_INPUTS, K_OUTPUTS, K_TS, K_INC, K_EXC, K_ATTRS };

/* The K_* of a node key k of n bytes (its length as strcmp sees it), or -1: by its length,
 * then a fixed-size compare. */
static inline int node_key(const char *k, size_t n) {
#define IS(lit) !memcmp(k, lit, sizeof lit - 1)
  switch (n) {
    case 2:
      return IS("id") ? K_ID : IS("ts") ? K_TS : -1;
    case 4:
      return IS("name") ? K_NAME : -1;
    case 5:
      return IS("attrs") ? K_ATTRS : -1;
    case 6:
      return IS("inputs") ? K_INPUTS : -1;
    case 7:
      return IS("outputs") ? K_OUTPUTS : -1;
    case 9:
      return IS("ctrl_deps") ? K_CTRL_DEPS : -1;
    case 13:
      return IS("inclusive_dur") ? K_INC : IS("exclusive_dur") ? K_EXC : -1;
    default:
      return -1;
  }
#undef IS
}

/* rd_base_attr of a name of n bytes (etr__rd_base_attr_len), or by strcmp when a string of
 * the node holds a NUL (nul: r->nul_str). */
static int base_attr_n(const char *nm, size_t n, bool nul) {
  if (ETR_RD_UNLIKELY(nul)) return rd_base_attr(nm);
  return etr__rd_base_attr_len(nm, n);
}

int rd_base_attr_n(const char *name, size_t len) { return base_attr_n(name, len, false); }

static bool as_u64(const rd_jval *v, uint64_t *out) {
  if (v->kind == ETR_J_INT) {
    *out = (uint64_t)v->v.i;
    return true;
  }
  if (v->kind == ETR_J_UINT) {
    *out = v->v.u;
    return true;
  }
  return false;
}

/* True when io's members are the parts values, shapes, types[, strides] in this order: their
 * keys are h_io's (reader_hand_fast.c), or equal to them. */
static bool io_exact(const rd_jval *io) {
  const rd_jmember *m = io->v.obj.items;
  return (io->v.obj.n == 3 || (io->v.obj.n == 4 && m[3].key == etr__rd_key_strides)) &&
         m[0].key == etr__rd_key_values && m[1].key == etr__rd_key_shapes &&
         m[2].key == etr__rd_key_types;
}

/* Warns about what is missing or of the wrong kind in io; true when its keys are exactly
 * values, shapes, types[, strides] in this order (rd_rnode). */
static bool check_io(rd_reader *r, rd_rnode *n, const rd_jval *io, const char *which) {
  if (!io) {
    etr__rd_warn(r, n->offset, n->id, "node has no \"%s\"", which);
    return false;
  }
  if (io->kind != ETR_J_OBJECT) {
    etr__rd_warn(r, n->offset, n->id, "\"%s\" is not an object", which);
    return false;
  }
  /* one pass over the members: values, shapes, types, strides (the first of each, as
   * rd_jobj_get finds them) */
  static const char *const parts[4] = {"values", "shapes", "types", "strides"};
  const rd_jval *got[4] = {NULL, NULL, NULL, NULL};
  bool nul = r->nul_str;
  bool fast = io_exact(io), exact = io->v.obj.n == 3 || io->v.obj.n == 4;
  if (fast) /* as h_io read them: no name to compare */
    for (size_t i = 0; i < io->v.obj.n; i++) got[i] = &io->v.obj.items[i].val;
  for (size_t i = 0; !fast && i < io->v.obj.n; i++) {
    const rd_jmember *m = &io->v.obj.items[i];
    int w = -1;
    if (ETR_RD_UNLIKELY(nul)) {
      for (int j = 0; j < 4 && w < 0; j++)
        if (!strcmp(m->key, parts[j])) w = j;
    } else if (m->key_len == 6) {
      w = !memcmp(m->key, "values", 6) ? 0 : !memcmp(m->key, "shapes", 6) ? 1 : -1;
    } else if (m->key_len == 5) {
      w = !memcmp(m->key, "types", 5) ? 2 : -1;
    } else if (m->key_len == 7) {
      w = !memcmp(m->key, "strides", 7) ? 3 : -1;
    }
    if (w >= 0 && !got[w]) got[w] = &m->val;
    if (w != (int)i) exact = false;
  }
  const rd_jval *vals = got[0];
  if (!vals || vals->kind != ETR_J_ARRAY) {
    etr__rd_warn(r, n->offset, n->id, "%s: \"values\" is missing or not an array", which);
    return exact;
  }
  for (int i = 1; i < 4; i++) {
    const rd_jval *p = got[i];
    if (!p) {
      if (i < 3) /* "strides" is optional (schemas before 1.1.1 have none) */
        etr__rd_warn(r, n->offset, n->id, "%s: \"%s\" is missing", which, parts[i]);
      continue;
    }
    if (p->kind != ETR_J_ARRAY) {
      etr__rd_warn(r, n->offset, n->id, "%s: \"%s\" is not an array", which, parts[i]);
    } else if (p->v.arr.n != vals->v.arr.n) {
      etr__rd_warn(r, n->offset, n->id, "%s: \"%s\" has %zu entries, \"values\" %zu", which,
                   parts[i], p->v.arr.n, vals->v.arr.n);
    }
  }
  return exact;
}

int etr__rd_node_done(rd_reader *r, const rd_jval *root) {
  rd_rnode *n = arena_alloc(&r->nodes, sizeof *n);
  rd_jval *raw = arena_alloc(&r->nodes, sizeof *raw);
  if (!n || !raw) {
    etr__rd_set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
    return 0;
  }
  memset(n, 0, sizeof *n);
  *raw = *root;
  n->raw = raw;
  n->offset = r->node_off;
  n->id = -1;
  n->ctrl_deps = -1;
  n->name = "";
  n->seq_id = 0;
  n->missing_attrs = 0x1ff;
  n->has_nul_strings = r->nul_str;
  bool has_id = false, has_name = false, has_ts = false, has_inc = false, has_exc = false;
  const rd_jval *attrs = NULL;
  bool nul = r->nul_str;
  int next = 0; /* the order index a key must have at least to be in order */
  bool ordered = true;
  uint32_t bits = 0;
  for (size_t i = 0; i < root->v.obj.n; i++) {
    const rd_jmember *m = &root->v.obj.items[i];
    const rd_jval *v = &m->val;
    int j = node_key(m->key, ETR_RD_UNLIKELY(nul) ? strlen(m->key) : m->key_len);
    if (j < next) ordered = false; /* unknown (-1), twice, or out of order */
    if (j < 0) continue;
    next = j + 1;
    bits |= 1u << j;
    switch (j) {
      case K_ID:
        if (v->kind == ETR_J_INT) {
          n->id = v->v.i;
          has_id = true;
        }
        break;
      case K_NAME:
        if (v->kind == ETR_J_STRING) {
          n->name = v->v.str.s;
          n->name_len = v->v.str.len;
          has_name = true;
        }
        break;
      case K_CTRL_DEPS:
        if (v->kind == ETR_J_INT) n->ctrl_deps = v->v.i;
        break;
      case K_INPUTS:
        n->inputs = v;
        break;
      case K_OUTPUTS:
        n->outputs = v;
        break;
      case K_TS:
        if (v->kind == ETR_J_INT) {
          n->ts = v->v.i;
          has_ts = true;
        }
        break;
      case K_INC:
        if (v->kind == ETR_J_INT) {
          n->inclusive_dur = v->v.i;
          has_inc = true;
        }
        break;
      case K_EXC:
        if (v->kind == ETR_J_INT) {
          n->exclusive_dur = v->v.i;
          has_exc = true;
        }
        break;
      default: /* K_ATTRS */
        attrs = v;
        break;
    }
  }
  n->key_bits = bits;
  n->keys_in_order = ordered;
  n->has_timing = has_ts && has_inc && has_exc;
  if (!has_id) etr__rd_warn(r, n->offset, -1, "node has no integer \"id\"");
  if (!has_name) etr__rd_warn(r, n->offset, n->id, "node has no string \"name\"");
  if (n->ctrl_deps < 0) etr__rd_warn(r, n->offset, n->id, "node has no integer \"ctrl_deps\"");
  n->inputs_exact_keys = check_io(r, n, n->inputs, "inputs");
  n->outputs_exact_keys = check_io(r, n, n->outputs, "outputs");
  if (n->inputs && n->inputs->kind != ETR_J_OBJECT) n->inputs = NULL;
  if (n->outputs && n->outputs->kind != ETR_J_OBJECT) n->outputs = NULL;

  if (attrs && attrs->kind == ETR_J_ARRAY) {
    size_t na = attrs->v.arr.n;
    rd_rattr *ra = na ? arena_alloc(&r->nodes, na * sizeof *ra) : NULL;
    if (na && !ra) {
      etr__rd_set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
      return 0;
    }
    size_t k = 0;
    for (size_t i = 0; i < na; i++) {
      const rd_jval *a = &attrs->v.arr.items[i];
      const rd_jval *an, *at, *av;
      const rd_jmember *am = a->kind == ETR_J_OBJECT ? a->v.obj.items : NULL;
      bool exact = false;
      if (am && a->v.obj.n == 3 &&
          ((am[0].key == etr__rd_key_name && am[1].key == etr__rd_key_type &&
            am[2].key == etr__rd_key_value) ||
           (NAME_IS(am[0].key, am[0].key_len, "name", nul) &&
            NAME_IS(am[1].key, am[1].key_len, "type", nul) &&
            NAME_IS(am[2].key, am[2].key_len, "value", nul)))) {
        an = &a->v.obj.items[0].val;
        at = &a->v.obj.items[1].val;
        av = &a->v.obj.items[2].val;
        exact = true;
      } else {
        an = obj_get(a, "name", 4, nul);
        at = obj_get(a, "type", 4, nul);
        av = obj_get(a, "value", 5, nul);
      }
      if (!an || an->kind != ETR_J_STRING || !av) {
        etr__rd_warn(r, n->offset, n->id,
                     "attr %zu is not a {\"name\", \"type\", \"value\"} object", i);
        continue;
      }
      rd_rattr *x = &ra[k++];
      x->name = an->v.str.s;
      x->type = at && at->kind == ETR_J_STRING ? at->v.str.s : "";
      x->value = *av;
      const char *nm = x->name;
      size_t nm_len = an->v.str.len;
      int b = base_attr_n(nm, nm_len, nul);
      x->base = b;
      x->exact_keys = exact;
      if (b >= 0) {
        bool ok = true;
        switch (b) {
          case 0:
            ok = as_u64(av, &n->rf_id);
            break;
          case 1:
            ok = as_u64(av, &n->fw_parent);
            break;
          case 2:
            ok = av->kind == ETR_J_INT;
            if (ok) n->seq_id = av->v.i;
            break;
          case 3:
            ok = as_u64(av, &n->scope);
            break;
          case 4:
            ok = as_u64(av, &n->tid);
            break;
          case 5:
            ok = as_u64(av, &n->fw_tid);
            break;
          default:
            ok = av->kind == ETR_J_STRING;
            if (ok) {
              if (b == 6)
                n->op_schema = av->v.str.s;
              else if (b == 7)
                n->kernel_backend = av->v.str.s;
              else
                n->kernel_file = av->v.str.s;
            }
            break;
        }
        if (ok)
          n->missing_attrs &= ~(1u << b);
        else
          etr__rd_warn(r, n->offset, n->id, "attr \"%s\" has a value of the wrong kind", nm);
      }
      if (nm[0] == 't' && NAME_IS(nm, nm_len, "traceback", nul))
        n->has_traceback = as_u64(av, &n->traceback);
    }
    n->attrs = ra;
    n->n_attrs = k;
  } else {
    etr__rd_warn(r, n->offset, n->id, "node has no \"attrs\" array");
  }
  if (n->missing_attrs & 0x7f) {
    for (int b = 0; b < 7; b++)
      if (n->missing_attrs & (1u << b))
        etr__rd_warn(r, n->offset, n->id, ETR_READER_WARN_MISSING_ATTR " \"%s\"", base_attrs[b]);
  }
  return etr__rd_node_queue(r, n);
}

int etr__rd_node_queue(rd_reader *r, rd_rnode *n) {
  if (r->q_len == r->q_cap) {
    size_t cap = r->q_cap ? r->q_cap * 2 : 64;
    qent *q = malloc(cap * sizeof *q);
    if (!q) {
      etr__rd_set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
      return 0;
    }
    for (size_t i = 0; i < r->q_len; i++) q[i] = r->q[(r->q_head + i) % r->q_cap];
    free(r->q);
    r->q = q;
    r->q_cap = cap;
    r->q_head = 0;
  }
  qent *e = &r->q[(r->q_head + r->q_len) % r->q_cap];
  e->node = n;
  e->mark = r->node_mark;
  r->q_len++;
  return 1;
}
