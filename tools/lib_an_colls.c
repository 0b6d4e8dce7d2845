/* Collectives in a trace (lib_an_ops.h, docs/FORMAT.md "Collectives in a trace"): which op
 * nodes are records of a collective call, their kind, group and message sizes, records of
 * one call found through nesting and pairing (one counted, the others its twins), and the
 * bytes a call puts on the wire. Shared by etr chakra, summary and replay. */
#define _POSIX_C_SOURCE 200809L

#include "lib_an_ops.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

double an_coll_wire(int kind, double in, double out, uint64_t pg_size) {
  double p = (double)pg_size;
  if (pg_size <= 1) return 0;
  switch (kind) {
    case AN_COLL_BARRIER:
      return 0;
    case AN_COLL_ALL_REDUCE:
      return in * 2.0 * (p - 1) / p;
    case AN_COLL_ALL_GATHER:
      return (out > in ? out : in * p) * (p - 1) / p;
    case AN_COLL_REDUCE_SCATTER:
      return (in > out ? in : out * p) * (p - 1) / p;
    case AN_COLL_ALL_TO_ALL:
      return in * (p - 1) / p;
    default:
      return in > out ? in : out; /* broadcast, reduce, send, recv, gather, scatter */
  }
}

double an_coll_bytes(const char *coll, const char *dtype, uint64_t in_nelems, uint64_t out_nelems,
                     uint64_t pg_size) {
  if (coll == NULL) return 0;
  unsigned es = an_dtype_size(dtype);
  double e = es ? (double)es : 4;
  return an_coll_wire(an_coll_kind_of(coll), (double)in_nelems * e, (double)out_nelems * e,
                      pg_size);
}

/* ---- collectives: records, nesting, twins (lib_an_ops.h) ---- */

int an_coll_kind_of(const char *name) {
  if (name == NULL) return AN_COLL_NONE;
  const char *p = strrchr(name, ':');
  p = p ? p + 1 : name;
  char low[64];
  size_t k = 0;
  for (; *p && k + 1 < sizeof low; p++)
    if (*p != '_') low[k++] = (char)tolower((unsigned char)*p);
  low[k] = '\0';
  /* The first that the name holds: a longer name before one it contains ("allreduce" holds
   * "reduce"; NCCL's barrier is "nccl:all_reduce_barrier"). */
  static const struct {
    const char *part;
    int kind;
  } map[] = {
      {"barrier", AN_COLL_BARRIER},
      {"reducescatter", AN_COLL_REDUCE_SCATTER},
      {"allreduce", AN_COLL_ALL_REDUCE},
      {"allgather", AN_COLL_ALL_GATHER},
      {"alltoall", AN_COLL_ALL_TO_ALL},
      {"broadcast", AN_COLL_BROADCAST},
      {"reduce", AN_COLL_REDUCE},
      {"gather", AN_COLL_GATHER},
      {"scatter", AN_COLL_SCATTER},
      {"send", AN_COLL_SEND},
      {"recv", AN_COLL_RECV},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strstr(low, map[i].part) != NULL) return map[i].kind;
  return AN_COLL_NONE;
}

const char *an_coll_kind_name(int kind) {
  static const char *const names[] = {
      "",           "all_reduce",     "reduce",  "all_gather", "gather", "scatter", "broadcast",
      "all_to_all", "reduce_scatter", "barrier", "send",       "recv",   "other"};
  return kind >= 0 && kind <= AN_COLL_OTHER ? names[kind] : "";
}

static const char *str_attr(const rd_rnode *n, const char *name) {
  const rd_rattr *a = an_attr(n, name);
  return a && a->value.kind == ETR_J_STRING ? a->value.v.str.s : NULL;
}

/* The name of the collective an attrs record names: its collective_name attr, else
 * record_param_comms' first String input (PyTorch's inputs: [tensors,] seq, group, rank,
 * "name", ...). */
static const char *attrs_coll_name(const rd_rnode *n) {
  const char *s = str_attr(n, "collective_name");
  if (s != NULL || n->inputs == NULL || n->inputs->kind != ETR_J_OBJECT) return s;
  const rd_jval *v = rd_jobj_get(n->inputs, "values"), *ty = rd_jobj_get(n->inputs, "types");
  if (v == NULL || ty == NULL || v->kind != ETR_J_ARRAY || ty->kind != ETR_J_ARRAY) return NULL;
  for (size_t i = 0; i < v->v.arr.n && i < ty->v.arr.n; i++) {
    const rd_jval *t = &ty->v.arr.items[i], *x = &v->v.arr.items[i];
    if (t->kind == ETR_J_STRING && strcmp(t->v.str.s, "String") == 0 && x->kind == ETR_J_STRING)
      return x->v.str.s;
  }
  return NULL;
}

int an_coll_classify(const rd_rnode *n, int *kind) {
  *kind = AN_COLL_NONE;
  if (n->name == NULL) return 0;
  if (strcmp(n->name, "record_param_comms") == 0 || an_attr(n, "collective_name") != NULL) {
    const char *s = attrs_coll_name(n);
    if (s == NULL) return 0;
    *kind = an_coll_kind_of(s);
    if (*kind == AN_COLL_NONE) *kind = AN_COLL_OTHER;
    return AN_COLL_BY_ATTRS;
  }
  int level = strncmp(n->name, "c10d::", 6) == 0 ? AN_COLL_BY_DISPATCH
              : strncmp(n->name, "gloo:", 5) == 0 || strncmp(n->name, "nccl:", 5) == 0
                  ? AN_COLL_BY_BACKEND
                  : 0;
  if (level == 0) return 0;
  *kind = an_coll_kind_of(n->name);
  return *kind == AN_COLL_NONE ? 0 : level;
}

/* Bytes of every tensor inside v, and the id of the first one (*first, when 0 so far). */
static uint64_t tensor_bytes(const rd_jval *v, int depth, uint64_t *first) {
  if (v == NULL || v->kind != ETR_J_ARRAY || depth > 32) return 0;
  if (an_is_tensor_value(v)) {
    const rd_jval *it = v->v.arr.items;
    if (*first == 0) *first = an_ju64(&it[0]);
    int64_t numel = an_jint(&it[3], 0), item = an_jint(&it[4], 0);
    if (numel <= 0 || item <= 0) return 0;
    if ((uint64_t)numel > UINT64_MAX / (uint64_t)item) return UINT64_MAX;
    return (uint64_t)numel * (uint64_t)item;
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < v->v.arr.n; i++) {
    uint64_t b = tensor_bytes(&v->v.arr.items[i], depth + 1, first);
    sum = sum > UINT64_MAX - b ? UINT64_MAX : sum + b;
  }
  return sum;
}

/* Bytes of the tensors of inputs/outputs value number i (every value when i < 0); only
 * values whose type names a tensor are looked into (when types are there to say). */
static uint64_t io_bytes(const rd_jval *io, int i, uint64_t *first) {
  if (io == NULL || io->kind != ETR_J_OBJECT) return 0;
  const rd_jval *v = rd_jobj_get(io, "values"), *ty = rd_jobj_get(io, "types");
  if (v == NULL || v->kind != ETR_J_ARRAY) return 0;
  uint64_t sum = 0;
  for (size_t k = i < 0 ? 0 : (size_t)i; k < v->v.arr.n && (i < 0 || k == (size_t)i); k++) {
    if (ty != NULL && ty->kind == ETR_J_ARRAY && k < ty->v.arr.n &&
        ty->v.arr.items[k].kind == ETR_J_STRING &&
        strstr(ty->v.arr.items[k].v.str.s, "Tensor(") == NULL)
      continue;
    uint64_t b = tensor_bytes(&v->v.arr.items[k], 0, first);
    sum = sum > UINT64_MAX - b ? UINT64_MAX : sum + b;
  }
  return sum;
}

/* Whether the kind moves the same message in and out (in place). */
static bool in_place(int kind) {
  return kind == AN_COLL_ALL_REDUCE || kind == AN_COLL_BROADCAST || kind == AN_COLL_REDUCE ||
         kind == AN_COLL_BARRIER || kind == AN_COLL_SEND || kind == AN_COLL_RECV;
}

/* The messages of a record (an_coll_rec.in_bytes, out_bytes, tensor, bytes_exact, dtype).
 * false when memory ran out. */
static bool coll_sizes(an_colls *c, an_coll_rec *r, const rd_rnode *n) {
  uint64_t first = 0, dummy = 0;
  if (r->level == AN_COLL_BY_ATTRS) {
    const rd_rattr *in = an_attr(n, "in_msg_nelems"), *out = an_attr(n, "out_msg_nelems");
    const char *dt = str_attr(n, "dtype");
    unsigned es = an_dtype_size(dt);
    int64_t ni = in ? an_jint(&in->value, 0) : 0, no = out ? an_jint(&out->value, 0) : 0;
    r->in_nelems = ni > 0 ? (uint64_t)ni : 0;
    r->out_nelems = no > 0 ? (uint64_t)no : 0;
    if (dt != NULL && (r->dtype = an_strtab_intern(&c->strs, dt, strlen(dt))) == AN_NOSTR)
      return false;
    /* the tensors: record_param_comms' first input (PyTorch's, and etr's example); a c10d::
     * op with the attrs (etr.torch's) holds its input message where a dispatch record does
     * (below: allgather_'s second argument), and its first tensor pairs it with its backend
     * record */
    bool c10d = n->name != NULL && strncmp(n->name, "c10d::", 6) == 0;
    uint64_t tin = io_bytes(n->inputs, c10d && !in_place(r->kind) ? 1 : 0, &first);
    if (in && out && (es || (r->in_nelems == 0 && r->out_nelems == 0))) { /* (a barrier) */
      r->in_bytes = r->in_nelems * es;
      r->out_bytes = r->out_nelems * es;
      r->bytes_exact = true;
    } else {
      r->in_bytes = tin;
      r->out_bytes = in_place(r->kind) ? tin : io_bytes(n->outputs, -1, &dummy);
    }
  } else if (r->level == AN_COLL_BY_DISPATCH) {
    /* c10d::X(...): the input message, as record_param_comms counts in_msg_nelems. In-place
     * collectives (allreduce_, broadcast_, reduce_, send, recv_) take it first; the others
     * take their output first and the input second: allgather_(Tensor[][] output_tensors,
     * Tensor[] input_tensors, ...), reduce_scatter_, gather_, scatter_, alltoall_,
     * alltoall_base_(Tensor output, Tensor input, ...). A barrier has none. */
    bool ip = in_place(r->kind);
    r->in_bytes = io_bytes(n->inputs, ip ? 0 : 1, &first);
    r->out_bytes = ip ? r->in_bytes : io_bytes(n->inputs, 0, &dummy);
    r->bytes_exact = first != 0 || r->kind == AN_COLL_BARRIER;
    if (r->kind == AN_COLL_SCATTER && first == 0) /* off the root: only the chunk received */
      r->in_bytes = io_bytes(n->inputs, 0, &first);
  } else {
    r->in_bytes = io_bytes(n->inputs, -1, &first);
    r->out_bytes = in_place(r->kind) ? r->in_bytes : io_bytes(n->outputs, -1, &dummy);
    r->bytes_exact = in_place(r->kind);
  }
  r->tensor = first;
  return true;
}

/* The group an attrs record names: the pg_name attr, else the (pg_name, pg_desc) input.
 * An empty name names none (PyTorch numbers its groups; etr.torch writes "" for a group it
 * could not tell): such a collective is one without a group. */
static const char *attrs_pg_any(const rd_rnode *n);
static const char *attrs_pg(const rd_rnode *n) {
  const char *s = attrs_pg_any(n);
  return s != NULL && *s ? s : NULL;
}
static const char *attrs_pg_any(const rd_rnode *n) {
  const char *s = str_attr(n, "pg_name");
  if ((s != NULL && *s) || n->inputs == NULL || n->inputs->kind != ETR_J_OBJECT) return s;
  const rd_jval *v = rd_jobj_get(n->inputs, "values"), *ty = rd_jobj_get(n->inputs, "types");
  if (v == NULL || ty == NULL || v->kind != ETR_J_ARRAY || ty->kind != ETR_J_ARRAY) return NULL;
  for (size_t i = 0; i < v->v.arr.n && i < ty->v.arr.n; i++) {
    const rd_jval *t = &ty->v.arr.items[i], *x = &v->v.arr.items[i];
    if (t->kind == ETR_J_STRING && strcmp(t->v.str.s, "Tuple[String,String]") == 0 &&
        x->kind == ETR_J_ARRAY && x->v.arr.n >= 1 && x->v.arr.items[0].kind == ETR_J_STRING)
      return x->v.arr.items[0].v.str.s;
  }
  return NULL;
}

bool an_groups_zero(const rd_rnode *n, int64_t *rank, int64_t *size) {
  if (n->name == NULL || strcmp(n->name, "## process_group:init ##") != 0) return false;
  const rd_jval *vals = n->inputs ? rd_jobj_get(n->inputs, "values") : NULL;
  if (!vals || vals->kind != ETR_J_ARRAY || vals->v.arr.n < 1) return false;
  const rd_jval *s = &vals->v.arr.items[0];
  if (s->kind != ETR_J_STRING) return false;
  char err[128];
  yajl_val root = yajl_tree_parse(s->v.str.s, err, sizeof err);
  if (!root) return false;
  bool found = false;
  if (YAJL_IS_ARRAY(root)) {
    static const char *k_name[] = {"pg_name", NULL}, *k_rank[] = {"rank", NULL},
                      *k_size[] = {"group_size", NULL};
    for (size_t i = 0; i < root->u.array.len; i++) {
      yajl_val g = root->u.array.values[i];
      yajl_val name = yajl_tree_get(g, k_name, yajl_t_string);
      const char *nm = name ? YAJL_GET_STRING(name) : NULL;
      if (!nm || strcmp(nm, "0") != 0) continue;
      yajl_val r = yajl_tree_get(g, k_rank, yajl_t_number);
      yajl_val w = yajl_tree_get(g, k_size, yajl_t_number);
      if (r && YAJL_IS_INTEGER(r) && YAJL_GET_INTEGER(r) >= 0) *rank = YAJL_GET_INTEGER(r);
      if (w && YAJL_IS_INTEGER(w)) *size = YAJL_GET_INTEGER(w);
      found = true;
    }
  }
  yajl_tree_free(root);
  return found;
}

void an_colls_free(an_colls *c) {
  free(c->r);
  free(c->wnext);
  an_strtab_free(&c->strs);
  an_u64map_free(&c->waiting);
  an_u64map_free(&c->by_id);
  an_u64map_free(&c->roots);
  memset(c, 0, sizeof *c);
}

const char *an_colls_str(const an_colls *c, uint32_t ix) {
  return ix == AN_NOSTR || ix >= c->strs.n ? "" : c->strs.strs[ix];
}

/* Records waiting for op `id` (nested in it, it not read yet): the head of their list, or
 * UINT32_MAX; the list is taken out of the map. */
static uint32_t take_waiting(an_colls *c, int64_t id) {
  uint64_t v;
  if (c->waiting.n == 0 && !c->waiting.has_max) return UINT32_MAX;
  if (!an_u64map_get(&c->waiting, (uint64_t)id, &v)) return UINT32_MAX;
  an_u64map_del(&c->waiting, (uint64_t)id);
  return (uint32_t)v;
}

/* Put the list at head to wait for op `id` (in front of what waits for it already); a thread
 * or process node read already ends the chains instead. */
static bool wait_for(an_colls *c, int64_t id, uint32_t head) {
  uint64_t v;
  if (an_u64map_get(&c->roots, (uint64_t)id, NULL)) return true;
  uint32_t tail = head;
  while (c->wnext[tail] != UINT32_MAX) tail = c->wnext[tail];
  if (an_u64map_get(&c->waiting, (uint64_t)id, &v)) c->wnext[tail] = (uint32_t)v;
  return an_u64map_put(&c->waiting, (uint64_t)id, head);
}

bool an_colls_add(an_colls *c, const rd_rnode *n) {
  uint32_t below = take_waiting(c, n->id);
  if (an_is_thread_node(n) || an_is_process_node(n)) /* chains of parents end there */
    return an_u64map_put(&c->roots, (uint64_t)n->id, 0);
  int64_t rank = -1, world = -1;
  /* the first process-group node only: the newest (docs/FORMAT.md), later ones are older */
  if (!c->groups_seen && an_groups_zero(n, &rank, &world)) {
    c->groups_seen = true;
    if (world > 0) c->world = (uint64_t)world;
  }
  int kind;
  int level = an_coll_classify(n, &kind);
  if (level == 0) { /* not a record: what is nested in it is nested in its parent */
    return below == UINT32_MAX || n->ctrl_deps == n->id || wait_for(c, n->ctrl_deps, below);
  }
  if (c->n >= UINT32_MAX - 1 || !an_grow((void **)&c->r, &c->cap, c->n + 1, sizeof *c->r) ||
      !an_grow((void **)&c->wnext, &c->capw, c->n + 1, sizeof *c->wnext))
    return false;
  uint32_t ix = (uint32_t)c->n;
  an_coll_rec *r = &c->r[ix];
  memset(r, 0, sizeof *r);
  r->id = n->id;
  r->parent = n->ctrl_deps;
  r->tid = n->tid;
  r->timed = n->has_timing;
  if (n->has_timing) {
    const int64_t lim = (int64_t)1 << 60;
    r->ts = n->ts < -lim ? -lim : n->ts > lim ? lim : n->ts;
    r->end = r->ts + (n->inclusive_dur < 0 ? 0 : n->inclusive_dur > lim ? lim : n->inclusive_dur);
  }
  r->level = (uint8_t)level;
  r->kind = (uint8_t)kind;
  r->pg = r->name = r->dtype = AN_NOSTR;
  r->encl = r->counted = UINT32_MAX;
  const char *name = level == AN_COLL_BY_ATTRS ? attrs_coll_name(n) : an_coll_kind_name(kind);
  const char *pg = level == AN_COLL_BY_ATTRS ? attrs_pg(n) : NULL;
  r->name = an_strtab_intern(&c->strs, name, strlen(name));
  if (pg != NULL) r->pg = an_strtab_intern(&c->strs, pg, strlen(pg));
  const rd_rattr *ps = an_attr(n, "pg_size");
  if (ps != NULL && an_jint(&ps->value, 0) > 0) r->pg_size = (uint64_t)an_jint(&ps->value, 0);
  if (r->name == AN_NOSTR || (pg != NULL && r->pg == AN_NOSTR) || !coll_sizes(c, r, n))
    return false;
  c->wnext[ix] = UINT32_MAX;
  c->n++;
  /* The records read before that are nested in it (children come first)... */
  for (uint32_t k = below; k != UINT32_MAX;) {
    uint32_t next = c->wnext[k];
    c->r[k].encl = ix;
    c->wnext[k] = UINT32_MAX;
    k = next;
  }
  if (!an_u64map_put(&c->by_id, (uint64_t)n->id, ix)) return false;
  /* ...and the record it is nested in: its parent read already (a file that writes parents
   * first), else whatever its chain of parents reaches later. */
  uint64_t p;
  if (n->ctrl_deps == n->id) return true;
  if (an_u64map_get(&c->by_id, (uint64_t)n->ctrl_deps, &p)) {
    r->encl = (uint32_t)p;
    return true;
  }
  return wait_for(c, n->ctrl_deps, ix);
}

/* Start order of two records: ts (when both are timed), then id. */
static bool starts_before_eq(const an_coll_rec *a, const an_coll_rec *b) {
  if (a->timed && b->timed && a->ts != b->ts) return a->ts < b->ts;
  return a->id <= b->id;
}

static const an_colls *sort_colls;

static int cmp_start(const void *x, const void *y) {
  const an_coll_rec *a = &sort_colls->r[*(const uint32_t *)x];
  const an_coll_rec *b = &sort_colls->r[*(const uint32_t *)y];
  if (a->timed && b->timed && a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
  if (a->id != b->id) return a->id < b->id ? -1 : 1;
  return *(const uint32_t *)x < *(const uint32_t *)y ? -1 : 1;
}

/* A counted record of level `lower` left without a record nested with it: the twin of the
 * earliest counted record of a higher level (order: its place in `ord`) of the same kind
 * that started no later, whose first tensor agrees, and that took no twin of that level. At
 * most this many candidates are looked at for one record. */
#define PAIR_SCAN 64

static void pair(an_colls *c, const uint32_t *ord, size_t n, int lower) {
  uint8_t bit = (uint8_t)(1u << lower);
  /* per kind: the first place in ord that may still hold a partner */
  size_t from[AN_COLL_OTHER + 1] = {0};
  for (size_t k = 0; k < n; k++) {
    an_coll_rec *b = &c->r[ord[k]];
    if (b->level != lower || b->role != AN_COLL_COUNTED || b->kind == AN_COLL_OTHER) continue;
    size_t *f = &from[b->kind], seen = 0;
    for (size_t j = *f; j < n && seen < PAIR_SCAN; j++) {
      an_coll_rec *a = &c->r[ord[j]];
      if (a->level <= lower || a->role != AN_COLL_COUNTED || a->kind != b->kind) {
        if (j == *f) (*f)++;
        continue;
      }
      if (!starts_before_eq(a, b)) break;
      if (a->absorbed & bit) {
        if (j == *f) (*f)++;
        continue;
      }
      seen++;
      if (a->tensor != 0 && b->tensor != 0 && a->tensor != b->tensor) continue;
      a->absorbed |= bit;
      b->role = AN_COLL_TWIN;
      b->counted = ord[j];
      break;
    }
  }
}

bool an_colls_resolve(an_colls *c) {
  size_t n = c->n;
  if (n == 0) return true;
  uint32_t *root = malloc(n * sizeof *root), *depth = malloc(n * sizeof *depth);
  uint32_t *best = malloc(n * sizeof *best), *ord = malloc(n * sizeof *ord);
  if (root == NULL || depth == NULL || best == NULL || ord == NULL) {
    free(root);
    free(depth);
    free(best);
    free(ord);
    return false;
  }
  /* 1. Nested records are one call: the highest level counts, on a tie the outermost. */
  for (size_t i = 0; i < n; i++) {
    uint32_t r = (uint32_t)i, d = 0;
    while (c->r[r].encl != UINT32_MAX && d < n) {
      r = c->r[r].encl;
      d++;
    }
    root[i] = d < n ? r : (uint32_t)i; /* (a cycle, only in a damaged file: each alone) */
    depth[i] = d < n ? d : 0;
    best[i] = UINT32_MAX;
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t *b = &best[root[i]];
    if (*b == UINT32_MAX || c->r[i].level > c->r[*b].level ||
        (c->r[i].level == c->r[*b].level && depth[i] < depth[*b]))
      *b = (uint32_t)i;
  }
  for (size_t i = 0; i < n; i++) c->r[i].absorbed = 0;
  for (size_t i = 0; i < n; i++) {
    c->r[i].counted = best[root[i]];
    c->r[i].role = best[root[i]] == i ? AN_COLL_COUNTED : AN_COLL_TWIN;
    /* A record nested with one of its level has that twin already: pairing (2) must not give
     * it another (a c10d:: op whose record_param_comms was not recorded is a call of its own,
     * not the twin of an earlier call's record_param_comms, which has its own c10d:: op). */
    if (c->r[i].role == AN_COLL_TWIN && c->r[i].level < c->r[best[root[i]]].level)
      c->r[best[root[i]]].absorbed |= (uint8_t)(1u << c->r[i].level);
  }
  /* 2. Records of one call on two threads (gloo's worker): paired by kind, order and tensor. */
  for (size_t i = 0; i < n; i++) ord[i] = (uint32_t)i;
  sort_colls = c;
  qsort(ord, n, sizeof *ord, cmp_start);
  pair(c, ord, n, AN_COLL_BY_DISPATCH);
  pair(c, ord, n, AN_COLL_BY_BACKEND);
  /* 3. A call's span: from its counted record's start to the last end of its records, but
   * for those around it (a c10d:: op around record_param_comms adds its own tail only). */
  for (size_t i = 0; i < n; i++) c->r[i].span_end = c->r[i].end;
  for (size_t i = 0; i < n; i++) {
    an_coll_rec *r = &c->r[i];
    if (r->role != AN_COLL_TWIN) continue;
    /* (the counted record of its nest may have become a twin itself in 2) */
    for (size_t guard = 0; c->r[r->counted].role == AN_COLL_TWIN && guard < n; guard++)
      r->counted = c->r[r->counted].counted;
    an_coll_rec *k = &c->r[r->counted];
    bool around = root[i] == root[r->counted] && depth[i] < depth[r->counted];
    if (!around && r->timed && k->timed && r->end > k->span_end) k->span_end = r->end;
  }
  free(root);
  free(depth);
  free(best);
  free(ord);
  return true;
}

double an_coll_rec_wire(const an_colls *c, const an_coll_rec *r, uint64_t p) {
  uint64_t size = r->pg_size ? r->pg_size : p;
  if (r->level == AN_COLL_BY_ATTRS && (r->in_nelems || r->out_nelems))
    return an_coll_bytes(an_colls_str(c, r->name), an_colls_str(c, r->dtype), r->in_nelems,
                         r->out_nelems, size);
  return an_coll_wire(r->kind, (double)r->in_bytes, (double)r->out_bytes, size);
}
