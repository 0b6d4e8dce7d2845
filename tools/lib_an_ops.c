/* The op table of `etr graph` / `etr replay` and the dependency graph over it: one record
 * per op node read from a trace (its tensors, FLOPs and collective bytes taken from the
 * node), parents and start order resolved once all nodes are in, then the read-after-write
 * edges. The cost model is in lib_an_model.c, the scheduler and critical path in
 * lib_an_sched.c (lib_an_ops.h describes them all, and the memory per op). */
#define _POSIX_C_SOURCE 200809L

#include "lib_an_ops.h"

#include "cli.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- table ---- */

void an_optab_init(an_optab *t) { memset(t, 0, sizeof *t); }

void an_optab_free(an_optab *t) {
  free(t->ops);
  free(t->trefs);
  free(t->threads);
  free(t->order);
  an_strtab_free(&t->names);
  an_u64map_free(&t->id2ix);
  an_u64map_free(&t->tid2ix);
  an_colls_free(&t->colls);
  memset(t, 0, sizeof *t);
}

static uint32_t thread_ix(an_optab *t, uint64_t tid) {
  uint64_t v;
  if (an_u64map_get(&t->tid2ix, tid, &v)) return (uint32_t)v;
  if (!an_grow((void **)&t->threads, &t->capthreads, t->nthreads + 1, sizeof *t->threads))
    return ETR_NOIX;
  uint32_t ix = (uint32_t)t->nthreads;
  if (!an_u64map_put(&t->tid2ix, tid, ix)) return ETR_NOIX;
  t->threads[ix].tid = tid;
  t->threads[ix].node_id = -1;
  t->nthreads++;
  return ix;
}

bool an_optab_add_thread(an_optab *t, int64_t node_id, uint64_t tid) {
  uint32_t ix = thread_ix(t, tid);
  if (ix == ETR_NOIX) return false;
  t->threads[ix].node_id = node_id;
  return true;
}

bool an_optab_add_op(an_optab *t, const an_op_desc *d) {
  if (t->n >= ETR_NOIX - 1) return false;
  if (!an_grow((void **)&t->ops, &t->cap, t->n + 1, sizeof *t->ops)) return false;
  if (!an_grow((void **)&t->trefs, &t->captref, t->ntref + d->n_in + d->n_out, sizeof *t->trefs))
    return false;
  uint32_t th = thread_ix(t, d->tid);
  const char *nm = d->name ? d->name : "";
  uint32_t name = an_strtab_intern(&t->names, nm, d->name_len ? d->name_len : strlen(nm));
  if (th == ETR_NOIX || name == ETR_NOIX) return false;
  an_op *op = &t->ops[t->n];
  memset(op, 0, sizeof *op);
  op->id = d->id;
  op->parent = d->parent;
  op->fw_parent = d->fw_parent;
  op->thread = th;
  op->name = name;
  op->parent_ix = op->fw_parent_ix = ETR_NOIX;
  if (d->timed) {
    /* Clamp so that sums of times cannot overflow whatever a damaged file says. */
    const int64_t lim = (int64_t)1 << 60;
    op->flags |= ETR_OPF_TIMED;
    op->ts = d->ts < -lim ? -lim : d->ts > lim ? lim : d->ts;
    op->incl = d->incl < 0 ? 0 : d->incl > lim ? lim : d->incl;
    op->excl = d->excl < 0 ? 0 : d->excl > lim ? lim : d->excl;
  } else {
    t->n_untimed++;
  }
  op->tref_off = t->ntref;
  op->n_in = (uint32_t)d->n_in;
  op->n_out = (uint32_t)d->n_out;
  if (d->n_in) memcpy(t->trefs + t->ntref, d->in, d->n_in * sizeof *d->in);
  t->ntref += d->n_in;
  if (d->n_out) memcpy(t->trefs + t->ntref, d->out, d->n_out * sizeof *d->out);
  t->ntref += d->n_out;
  if (d->flops > 0) {
    op->flags |= ETR_OPF_FLOP_NAME;
    op->flops = d->flops;
  }
  if (d->coll_bytes >= 0) {
    op->flags |= ETR_OPF_COLLECTIVE;
    op->coll_bytes = d->coll_bytes;
    op->pg_size = d->pg_size;
  }
  if (an_u64map_get(&t->id2ix, (uint64_t)d->id, NULL)) t->n_dup_ids++;
  if (!an_u64map_put(&t->id2ix, (uint64_t)d->id, t->n)) return false;
  t->n++;
  return true;
}

const char *an_optab_name(const an_optab *t, uint32_t i) { return t->names.strs[t->ops[i].name]; }

/* ---- tensors and shapes out of a node ---- */

typedef struct tref_buf {
  an_tref *v;
  size_t n, cap;
  bool oom;
} tref_buf;

static void collect_tensors(const rd_jval *v, int depth, tref_buf *b) {
  if (v->kind != ETR_J_ARRAY || depth > 32) return;
  if (an_is_tensor_value(v)) {
    const rd_jval *it = v->v.arr.items;
    if (it[5].v.str.len == 0) return; /* undefined tensor */
    if (!an_grow((void **)&b->v, &b->cap, b->n + 1, sizeof *b->v)) {
      b->oom = true;
      return;
    }
    b->v[b->n].tensor = an_ju64(&it[0]);
    b->v[b->n].storage = an_ju64(&it[1]);
    b->n++;
    return;
  }
  for (size_t i = 0; i < v->v.arr.n; i++) collect_tensors(&v->v.arr.items[i], depth + 1, b);
}

static void collect_io(const rd_jval *io, tref_buf *b) {
  if (io == NULL || io->kind != ETR_J_OBJECT) return;
  const rd_jval *vals = rd_jobj_get(io, "values");
  const rd_jval *types = rd_jobj_get(io, "types");
  if (vals == NULL || vals->kind != ETR_J_ARRAY) return;
  for (size_t i = 0; i < vals->v.arr.n; i++) {
    /* Descend only where the type names a tensor (when types are there to say). */
    if (types != NULL && types->kind == ETR_J_ARRAY && i < types->v.arr.n) {
      const rd_jval *ty = &types->v.arr.items[i];
      if (ty->kind == ETR_J_STRING && strstr(ty->v.str.s, "Tensor(") == NULL) continue;
    }
    collect_tensors(&vals->v.arr.items[i], 0, b);
  }
}

#define MAXDIM 8

/* Shape number i of an inputs/outputs object as dims; the rank, or -1. */
static int get_shape(const rd_jval *io, size_t i, int64_t *dims) {
  if (io == NULL || io->kind != ETR_J_OBJECT) return -1;
  const rd_jval *shapes = rd_jobj_get(io, "shapes");
  if (shapes == NULL || shapes->kind != ETR_J_ARRAY || i >= shapes->v.arr.n) return -1;
  const rd_jval *s = &shapes->v.arr.items[i];
  if (s->kind != ETR_J_ARRAY || s->v.arr.n > MAXDIM) return -1;
  for (size_t k = 0; k < s->v.arr.n; k++) {
    if (s->v.arr.items[k].kind != ETR_J_INT || s->v.arr.items[k].v.i < 0) return -1;
    dims[k] = s->v.arr.items[k].v.i;
  }
  return (int)s->v.arr.n;
}

static double prod(const int64_t *d, int from, int to) {
  double p = 1;
  for (int i = from; i < to; i++) p *= (double)d[i];
  return p;
}

static bool is_conv_name(const char *b) {
  if (strstr(b, "backward") != NULL || strstr(b, "transpose") != NULL) return false;
  if (strstr(b, "convolution") != NULL) return true;
  return strncmp(b, "conv", 4) == 0 && isdigit((unsigned char)b[4]) && b[5] == 'd' && b[6] == '\0';
}

double an_flops(const char *name, const rd_jval *in, const rd_jval *out) {
  if (name == NULL || strncmp(name, "aten::", 6) != 0) return 0;
  const char *b = name + 6;
  int64_t a[MAXDIM], w[MAXDIM], o[MAXDIM];
  int ra, rw, ro;
  if (strcmp(b, "mm") == 0 || strcmp(b, "addmm") == 0) {
    size_t k = b[0] == 'a' ? 1 : 0;
    ra = get_shape(in, k, a);
    rw = get_shape(in, k + 1, w);
    if (ra != 2 || rw != 2) return 0;
    return 2.0 * (double)a[0] * (double)a[1] * (double)w[1];
  }
  if (strcmp(b, "bmm") == 0 || strcmp(b, "baddbmm") == 0) {
    size_t k = b[0] == 'b' && b[1] == 'a' ? 1 : 0;
    ra = get_shape(in, k, a);
    rw = get_shape(in, k + 1, w);
    if (ra != 3 || rw != 3) return 0;
    return 2.0 * (double)a[0] * (double)a[1] * (double)a[2] * (double)w[2];
  }
  if (strcmp(b, "matmul") == 0) {
    ra = get_shape(in, 0, a);
    rw = get_shape(in, 1, w);
    if (ra < 1 || rw < 1) return 0;
    if (ra == 1 && rw == 1) return 2.0 * (double)a[0];
    if (rw == 1) return 2.0 * prod(a, 0, ra); /* matrix x vector */
    if (ra == 1) return 2.0 * prod(w, 0, rw); /* vector x matrix */
    double batch_a = prod(a, 0, ra - 2), batch_w = prod(w, 0, rw - 2);
    double batch = batch_a > batch_w ? batch_a : batch_w;
    return 2.0 * batch * (double)a[ra - 2] * (double)a[ra - 1] * (double)w[rw - 1];
  }
  if (strcmp(b, "linear") == 0) {
    ra = get_shape(in, 0, a);
    rw = get_shape(in, 1, w);
    if (ra < 1 || rw != 2) return 0;
    return 2.0 * prod(a, 0, ra) * (double)w[0];
  }
  if (is_conv_name(b)) {
    rw = get_shape(in, 1, w);
    ro = get_shape(out, 0, o);
    if (rw < 3 || ro < 3) return 0;
    return 2.0 * prod(o, 0, ro) * prod(w, 1, rw);
  }
  return 0;
}

unsigned an_dtype_size(const char *dt) {
  static const struct {
    const char *n;
    unsigned s;
  } tab[] = {
      {"float", 4},       {"float32", 4}, {"double", 8},       {"float64", 8},
      {"half", 2},        {"float16", 2}, {"bfloat16", 2},     {"long", 8},
      {"int64", 8},       {"int", 4},     {"int32", 4},        {"short", 2},
      {"int16", 2},       {"char", 1},    {"int8", 1},         {"byte", 1},
      {"uint8", 1},       {"bool", 1},    {"complexfloat", 8}, {"complexdouble", 16},
      {"complexhalf", 4}, {"uint16", 2},  {"uint32", 4},       {"uint64", 8},
  };
  char low[32];
  size_t n = 0;
  if (dt == NULL) return 0;
  if (strncmp(dt, "c10::", 5) == 0) dt += 5;
  for (; dt[n] && n + 1 < sizeof low; n++) low[n] = (char)tolower((unsigned char)dt[n]);
  low[n] = '\0';
  if (strncmp(low, "float8", 6) == 0) return 1;
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
    if (strcmp(low, tab[i].n) == 0) return tab[i].s;
  }
  return 0;
}

bool an_optab_add_rnode(an_optab *t, const rd_rnode *n) {
  if (!an_colls_add(&t->colls, n)) return false;
  if (an_is_process_node(n)) return true;
  if (an_is_thread_node(n)) return an_optab_add_thread(t, n->id, n->tid);
  tref_buf in = {0}, out = {0};
  collect_io(n->inputs, &in);
  collect_io(n->outputs, &out);
  an_op_desc d = {0};
  d.id = n->id;
  d.parent = n->ctrl_deps;
  d.fw_parent = (int64_t)n->fw_parent;
  d.tid = n->tid;
  d.name = n->name;
  d.name_len = n->name_len;
  d.timed = n->has_timing;
  d.ts = n->ts;
  d.incl = n->inclusive_dur;
  d.excl = n->exclusive_dur;
  d.in = in.v;
  d.n_in = in.n;
  d.out = out.v;
  d.n_out = out.n;
  d.flops = an_flops(n->name, n->inputs, n->outputs);
  d.coll_bytes = -1; /* (collectives: an_optab_finish, from t->colls) */
  bool ok = !in.oom && !out.oom && an_optab_add_op(t, &d);
  free(in.v);
  free(out.v);
  return ok;
}

/* ---- finishing: parents, order, span ---- */

typedef struct sortkey {
  int64_t ts, id;
  uint32_t ix;
} sortkey;

static int cmp_sortkey(const void *a, const void *b) {
  const sortkey *x = a, *y = b;
  if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  return x->ix < y->ix ? -1 : x->ix > y->ix;
}

void an_optab_mark_flops(an_optab *t) {
  for (size_t i = 0; i < t->n; i++)
    t->ops[i].flags &= ~(ETR_OPF_HAS_FLOP_DESC | ETR_OPF_FLOP_INNER);
  for (size_t i = 0; i < t->n; i++) {
    if (!(t->ops[i].flags & ETR_OPF_FLOP_NAME)) continue;
    size_t guard = 0;
    for (uint32_t p = t->ops[i].parent_ix; p != ETR_NOIX && guard < t->n; p = t->ops[p].parent_ix) {
      if (t->ops[p].flags & ETR_OPF_HAS_FLOP_DESC) break;
      t->ops[p].flags |= ETR_OPF_HAS_FLOP_DESC;
      guard++;
    }
  }
  for (size_t i = 0; i < t->n; i++) {
    if ((t->ops[i].flags & ETR_OPF_FLOP_NAME) && !(t->ops[i].flags & ETR_OPF_HAS_FLOP_DESC))
      t->ops[i].flags |= ETR_OPF_FLOP_INNER;
  }
}

bool an_optab_finish(an_optab *t) {
  t->timed = t->n > 0 && t->n_untimed == 0;
  for (size_t i = 0; i < t->n; i++) {
    an_op *op = &t->ops[i];
    uint64_t v;
    op->parent_ix = op->fw_parent_ix = ETR_NOIX;
    if (op->parent != op->id && an_u64map_get(&t->id2ix, (uint64_t)op->parent, &v))
      op->parent_ix = (uint32_t)v;
    if (op->fw_parent != 0 && op->fw_parent != op->id &&
        an_u64map_get(&t->id2ix, (uint64_t)op->fw_parent, &v))
      op->fw_parent_ix = (uint32_t)v;
  }
  /* A parent cycle (only in a damaged file) would make walks endless: cut it. One pass,
   * each parent link followed once (linear whatever the nesting depth): a walk up from an op
   * not seen yet marks the ops it passes with its own number and stops at the top, at an op
   * an earlier walk passed (no cycle above it), or at one of its own ops: a cycle, cut above
   * that op, which becomes a top-level op. */
  uint32_t *walk = calloc(t->n ? t->n : 1, sizeof *walk); /* 0: not passed yet */
  if (walk == NULL) return false;
  t->cycle_steps = 0;
  for (size_t i = 0; i < t->n; i++) {
    uint32_t x = (uint32_t)i;
    for (; x != ETR_NOIX && walk[x] == 0; x = t->ops[x].parent_ix) {
      walk[x] = (uint32_t)i + 1;
      t->cycle_steps++;
    }
    if (x != ETR_NOIX && walk[x] == (uint32_t)i + 1) t->ops[x].parent_ix = ETR_NOIX;
  }
  free(walk);
  free(t->order);
  t->order = NULL;
  sortkey *keys = malloc((t->n ? t->n : 1) * sizeof *keys);
  t->order = malloc((t->n ? t->n : 1) * sizeof *t->order);
  if (keys == NULL || t->order == NULL) {
    free(keys);
    return false;
  }
  t->t0 = INT64_MAX;
  t->t1 = INT64_MIN;
  for (size_t i = 0; i < t->n; i++) {
    const an_op *op = &t->ops[i];
    keys[i].ts = t->timed ? op->ts : 0;
    keys[i].id = op->id;
    keys[i].ix = (uint32_t)i;
    if (op->flags & ETR_OPF_TIMED) {
      if (op->ts < t->t0) t->t0 = op->ts;
      if (op->ts + op->incl > t->t1) t->t1 = op->ts + op->incl;
    }
  }
  if (t->t0 == INT64_MAX) t->t0 = t->t1 = 0;
  qsort(keys, t->n, sizeof *keys, cmp_sortkey);
  for (size_t i = 0; i < t->n; i++) t->order[i] = keys[i].ix;
  free(keys);
  an_optab_mark_flops(t);
  if (!an_colls_resolve(&t->colls)) return false;
  /* The collective calls: the op of each counted record carries the call, the others are
   * twins. (Ops described directly, an_optab_add_op, keep what their description says.) */
  for (size_t k = 0; k < t->colls.n; k++) {
    const an_coll_rec *r = &t->colls.r[k];
    uint64_t i;
    if (!an_u64map_get(&t->id2ix, (uint64_t)r->id, &i)) continue;
    an_op *op = &t->ops[i];
    if (r->role == AN_COLL_TWIN) {
      op->flags |= ETR_OPF_COLL_TWIN;
      continue;
    }
    uint64_t p = r->pg_size ? r->pg_size : t->colls.world;
    op->flags |= ETR_OPF_COLLECTIVE;
    op->coll_bytes = an_coll_rec_wire(&t->colls, r, t->colls.world);
    op->pg_size = p > UINT32_MAX ? UINT32_MAX : (uint32_t)p;
  }
  return true;
}

int an_optab_load(an_optab *t, const char *cmd, const char *path) {
  cli_input in;
  if (cli_open(&in, cmd, path, &cli_no_trailer) != 0) return ETR_CLI_FAIL;
  if (cli_check_schema(cmd, path, rd_header(in.r)) != ETR_CLI_OK) {
    cli_close(&in);
    return ETR_CLI_FAIL;
  }
  const rd_rnode *n;
  int rc;
  while ((rc = cli_next(&in, &n)) == 1) {
    if (!an_optab_add_rnode(t, n)) {
      cli_error(cmd, "%s: byte %llu: out of memory", path, (unsigned long long)n->offset);
      cli_close(&in);
      return ETR_CLI_FAIL;
    }
  }
  if (rc == 0) rc = cli_finish(&in);
  cli_close(&in);
  if (rc != 0) return ETR_CLI_FAIL;
  if (!an_optab_finish(t)) {
    cli_error(cmd, "%s: out of memory", path);
    return ETR_CLI_FAIL;
  }
  return ETR_CLI_OK;
}

/* ---- dependencies ---- */

static bool add_edge(an_deps *d, uint32_t from, uint32_t to, uint32_t kind, uint64_t tensor) {
  if (!an_grow((void **)&d->edges, &d->cap, d->n + 1, sizeof *d->edges)) return false;
  an_dep *e = &d->edges[d->n++];
  e->from = from;
  e->to = to;
  e->kind = kind;
  e->pad = 0;
  e->tensor = tensor;
  return true;
}

static uint64_t tref_key(const an_tref *r) {
  return r->storage ? (r->storage | (1ULL << 63)) : (r->tensor & ~(1ULL << 63));
}

bool an_deps_build(const an_optab *t, an_deps *d) {
  memset(d, 0, sizeof *d);
  size_t nn = t->n ? t->n : 1;
  d->first = calloc(nn, sizeof *d->first);
  d->count = calloc(nn, sizeof *d->count);
  uint32_t *pos = malloc(nn * sizeof *pos);
  uint32_t *stamp = malloc(nn * sizeof *stamp); /* per source: the last op given an edge */
  an_u64map lastw = {0};
  bool ok = d->first && d->count && pos && stamp;
  for (size_t k = 0; ok && k < t->n; k++) {
    pos[t->order[k]] = (uint32_t)k;
    stamp[k] = ETR_NOIX;
  }
  for (size_t k = 0; ok && k < t->n; k++) {
    uint32_t i = t->order[k];
    const an_op *op = &t->ops[i];
    d->first[i] = d->n;
    if (op->fw_parent_ix != ETR_NOIX && pos[op->fw_parent_ix] < k) {
      ok = add_edge(d, op->fw_parent_ix, i, ETR_DEP_FW, 0);
      d->n_fw++;
    } else if (op->fw_parent != 0) {
      d->n_fw_missing++;
    }
    /* no tensor in the whole trace: trefs is NULL, and NULL + 0 is undefined behaviour */
    const an_tref *in = op->n_in + op->n_out ? t->trefs + op->tref_off : NULL;
    for (uint32_t j = 0; ok && j < op->n_in; j++) {
      uint64_t w;
      if (!an_u64map_get(&lastw, tref_key(&in[j]), &w) || w == i) continue;
      if (stamp[w] == i) continue; /* already an edge w -> i */
      stamp[w] = i;
      ok = add_edge(d, (uint32_t)w, i, ETR_DEP_DATA, in[j].tensor);
      d->n_data++;
    }
    for (uint32_t j = 0; ok && j < op->n_out; j++)
      ok = an_u64map_put(&lastw, tref_key(&in[op->n_in + j]), i);
    d->count[i] = (uint32_t)(d->n - d->first[i]);
  }
  free(pos);
  free(stamp);
  an_u64map_free(&lastw);
  if (!ok) an_deps_free(d);
  return ok;
}

void an_deps_free(an_deps *d) {
  free(d->edges);
  free(d->first);
  free(d->count);
  memset(d, 0, sizeof *d);
}
