/* etr chakra TRACE... -o DIR — Chakra's protobuf execution trace (.et), one file per rank, as
 * ASTRA-sim's workload layer and Chakra's feeder read it (docs/FORMAT.md, "Chakra output").
 *
 * Which ops become simulated nodes: the leaves of each thread's op tree (what actually ran:
 * an op's own time before and between its children is small next to them, and a parent's
 * inclusive time would count its children twice), except that a collective call is one
 * COMM_COLL node standing for its whole subtree (its children are the transport's own steps).
 * Which record of a call that is, and which are its other records (twins: neither COMM nor
 * COMP; their children stay), is an_colls' rule (lib_an_ops.h), the same for summary and
 * replay. A record naming no collective ("wait", point-to-point) is plain work.
 * `## process_group:init ##` becomes a METADATA node that declares the groups.
 * Dependencies: ctrl deps put the simulated nodes of one thread in start order and make an
 * op that runs for another thread (fw_parent, autograd's backward) wait for what that thread
 * had finished when it began, and each COMM node wait for the previous one of its process
 * group (chakra_parts.h); data deps go from the last simulated node that wrote a tensor's
 * storage (or the tensor, without storage) to each later node that reads it.
 *
 * Memory: the whole op table (about 300 bytes per op, lib_an_ops.h) plus the IOInfo text of
 * the simulated nodes; the output is written node by node.
 */
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chakra/et_def.pb-c.h"
#include "chakra_parts.h"
#include "cli.h"
#include "lib_an_ops.h"
#include "lib_an_util.h"

#define CMD "chakra"
#define PG_INIT_NAME "## process_group:init ##"
#define MAX_INPUTS 4096

enum { SIM_NONE = 0, SIM_COMP = 1, SIM_COLL = 2, SIM_META = 3 };

/* What Chakra needs of one op beyond the op table (index = op index). */
typedef struct cx_op {
  int comm_type;        /* CollectiveCommType when the op is a collective, else -1 */
  uint8_t twin;         /* another record of a collective call counted on another op */
  uint8_t sim;          /* SIM_* after classification */
  uint8_t covered;      /* inside a collective's subtree */
  uint8_t has_child;    /* some op names it as parent */
  uint64_t comm_size;   /* bytes of the collective's input message */
  uint64_t tensor_size; /* bytes of the input and output tensors */
  int64_t comm_dur;     /* the call's recorded span (an_coll_rec: ts to span_end) */
  uint32_t pg_name;     /* t.colls.strs index, AN_NOSTR = none */
  size_t io_off;        /* six NUL-terminated texts in the arena: in values/shapes/types, out ... */
  uint8_t has_io;
} cx_op;

typedef struct cx_trace {
  const char *path;
  an_optab t;
  cx_op *x;
  size_t xcap;
  char *arena;
  size_t alen, acap;
  bool oom;
  int64_t rank;     /* from the process-group node, -1 when none */
  int64_t world;    /* group "0"'s group_size there, -1 when none */
  uint64_t skipped; /* duplicate op ids left out */
  const char *schema;
} cx_trace;

static bool arena_put(cx_trace *c, const char *s, size_t n) {
  if (c->alen + n + 1 > c->acap) {
    size_t cap = c->acap ? c->acap : 1 << 16;
    while (cap < c->alen + n + 1) cap *= 2;
    char *a = realloc(c->arena, cap);
    if (a == NULL) return false;
    c->arena = a;
    c->acap = cap;
  }
  memcpy(c->arena + c->alen, s, n);
  c->arena[c->alen + n] = '\0';
  c->alen += n + 1;
  return true;
}

/* The compact JSON text of a value ("" for NULL) into the arena. */
static bool arena_json(cx_trace *c, const rd_jval *v) {
  if (v == NULL) return arena_put(c, "", 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (f == NULL) return false;
  an_out o = {.f = f};
  an_out_jval(&o, v); /* 1.0 stays 1.0, not the int 1 (docs/FORMAT.md, Values) */
  bool ok = fclose(f) == 0 && !o.failed;
  ok = ok && arena_put(c, buf, len);
  free(buf);
  return ok;
}

/* ---- collectives ---- */

/* A barrier is what it is on the wire: NCCL's (ProcessGroupNCCL::barrier) is an all-reduce
 * of one float. ASTRA-sim's workload layer runs no BARRIER (it throws "Unsupported collective
 * comm type"); it runs ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL and BROADCAST. */
#define BARRIER_BYTES 4

/* Chakra's CollectiveCommType of a collective kind (an_coll_kind), -1 for the kinds that are
 * no COMM_COLL node (point-to-point, other). A barrier is an ALL_REDUCE (BARRIER_BYTES). */
static int comm_type_of(int kind) {
  switch (kind) {
    case AN_COLL_ALL_REDUCE:
      return CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__ALL_REDUCE;
    case AN_COLL_REDUCE:
      return CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__REDUCE;
    case AN_COLL_ALL_GATHER:
      return CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__ALL_GATHER;
    case AN_COLL_GATHER:
      return CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__GATHER;
    case AN_COLL_SCATTER:
      return CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__SCATTER;
    case AN_COLL_BROADCAST:
      return CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__BROADCAST;
    case AN_COLL_ALL_TO_ALL:
      return CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__ALL_TO_ALL;
    case AN_COLL_REDUCE_SCATTER:
      return CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__REDUCE_SCATTER;
    case AN_COLL_BARRIER:
      return CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__ALL_REDUCE;
    default:
      return -1;
  }
}

static bool is_tensor(const rd_jval *v) {
  if (v->kind != ETR_J_ARRAY || v->v.arr.n != 6) return false;
  for (int i = 0; i < 5; i++)
    if (v->v.arr.items[i].kind != ETR_J_INT && v->v.arr.items[i].kind != ETR_J_UINT) return false;
  return v->v.arr.items[5].kind == ETR_J_STRING;
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* Bytes (numel x itemsize) of every tensor inside v. */
static uint64_t tensor_bytes(const rd_jval *v, int depth) {
  if (v == NULL || v->kind != ETR_J_ARRAY || depth > 32) return 0;
  if (is_tensor(v)) {
    int64_t numel = an_jint(&v->v.arr.items[3], 0), item = an_jint(&v->v.arr.items[4], 0);
    if (numel <= 0 || item <= 0) return 0;
    if ((uint64_t)numel > UINT64_MAX / (uint64_t)item) return UINT64_MAX;
    return (uint64_t)numel * (uint64_t)item;
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < v->v.arr.n; i++)
    sum = sat_add(sum, tensor_bytes(&v->v.arr.items[i], depth + 1));
  return sum;
}

static const rd_jval *io_values(const rd_jval *io) {
  if (io == NULL || io->kind != ETR_J_OBJECT) return NULL;
  const rd_jval *v = rd_jobj_get(io, "values");
  return v && v->kind == ETR_J_ARRAY ? v : NULL;
}

/* ---- loading ---- */

static bool add_node(cx_trace *c, const rd_rnode *n) {
  size_t before = c->t.n;
  if (!an_optab_add_rnode(&c->t, n)) return false;
  if (c->t.n == before) return true; /* a thread or process node */
  if (c->t.n > c->xcap) {
    size_t cap = c->xcap ? c->xcap * 2 : 1024;
    cx_op *x = realloc(c->x, cap * sizeof *x);
    if (x == NULL) return false;
    c->x = x;
    c->xcap = cap;
  }
  cx_op *x = &c->x[before];
  memset(x, 0, sizeof *x);
  x->comm_type = -1;
  x->pg_name = AN_NOSTR;
  uint64_t in_bytes = tensor_bytes(io_values(n->inputs), 0);
  x->tensor_size = sat_add(in_bytes, tensor_bytes(io_values(n->outputs), 0));
  /* IOInfo texts; the process-group node keeps its list in Chakra's converter's form. */
  x->io_off = c->alen;
  x->has_io = 1;
  if (strcmp(n->name, PG_INIT_NAME) == 0) {
    const rd_jval *v = io_values(n->inputs);
    const char *json = v && v->v.arr.n >= 1 && v->v.arr.items[0].kind == ETR_J_STRING
                           ? v->v.arr.items[0].v.str.s
                           : "[]";
    /* The first node is the newest (docs/FORMAT.md): it wins over stale ones. */
    int64_t rank0 = -1, size0 = -1;
    if ((c->rank < 0 || c->world < 0) && an_groups_zero(n, &rank0, &size0)) {
      if (c->rank < 0 && rank0 >= 0) c->rank = rank0;
      if (c->world < 0 && size0 >= 0) c->world = size0;
    }
    /* ASTRA-sim strips two characters at each end: "['" and "']" (a Python list literal). */
    size_t jl = strlen(json);
    char *wrapped = malloc(jl + 5);
    if (wrapped == NULL) return false;
    memcpy(wrapped, "['", 2);
    memcpy(wrapped + 2, json, jl);
    memcpy(wrapped + 2 + jl, "']", 3);
    bool ok = arena_put(c, wrapped, jl + 4);
    free(wrapped);
    if (!ok || !arena_put(c, "[[]]", 4) || !arena_put(c, "[\"String\"]", 10)) return false;
    return arena_put(c, "[]", 2) && arena_put(c, "[]", 2) && arena_put(c, "[]", 2);
  }
  static const char *const keys[3] = {"values", "shapes", "types"};
  for (int side = 0; side < 2; side++) {
    const rd_jval *io = side ? n->outputs : n->inputs;
    for (int k = 0; k < 3; k++) {
      const rd_jval *v = io && io->kind == ETR_J_OBJECT ? rd_jobj_get(io, keys[k]) : NULL;
      if (!arena_json(c, v)) return false;
    }
  }
  return true;
}

static int load(cx_trace *c) {
  cli_input in;
  if (cli_open(&in, CMD, c->path, &cli_no_trailer) != 0) return ETR_CLI_FAIL;
  const rd_rheader *h = rd_header(in.r);
  if (cli_check_schema(CMD, c->path, h) != ETR_CLI_OK) {
    cli_close(&in);
    return ETR_CLI_FAIL;
  }
  c->schema = strdup(h && h->schema ? h->schema : "");
  const rd_rnode *n;
  int rc;
  while ((rc = cli_next(&in, &n)) == 1) {
    if (!add_node(c, n)) {
      cli_error(CMD, "%s: byte %llu: out of memory", c->path, (unsigned long long)n->offset);
      cli_close(&in);
      return ETR_CLI_FAIL;
    }
  }
  if (rc == 0) rc = cli_finish(&in);
  cli_close(&in);
  if (rc != 0) return ETR_CLI_FAIL;
  if (c->schema == NULL || !an_optab_finish(&c->t)) {
    cli_error(CMD, "%s: out of memory", c->path);
    return ETR_CLI_FAIL;
  }
  return ETR_CLI_OK;
}

/* ---- classification ---- */

static bool is_pg_init(const cx_trace *c, size_t i) {
  return strcmp(an_optab_name(&c->t, (uint32_t)i), PG_INIT_NAME) == 0;
}

static void classify(cx_trace *c) {
  an_optab *t = &c->t;
  for (size_t i = 0; i < t->n; i++)
    if (t->ops[i].parent_ix != ETR_NOIX) c->x[t->ops[i].parent_ix].has_child = 1;
  /* Collectives: the counted record of each call; its other records are twins. */
  for (size_t k = 0; k < t->colls.n; k++) {
    const an_coll_rec *r = &t->colls.r[k];
    uint64_t i;
    if (!an_u64map_get(&t->id2ix, (uint64_t)r->id, &i)) continue;
    cx_op *x = &c->x[i];
    if (r->role == AN_COLL_TWIN) {
      x->twin = 1;
      continue;
    }
    x->comm_type = comm_type_of(r->kind);
    x->comm_size = r->kind == AN_COLL_BARRIER ? BARRIER_BYTES : r->in_bytes;
    x->pg_name = r->pg;
    x->comm_dur = r->timed ? r->span_end - r->ts : 0;
  }
  /* Start order visits a parent before its children: `covered` flows down. */
  for (size_t k = 0; k < t->n; k++) {
    uint32_t i = t->order[k];
    uint32_t p = t->ops[i].parent_ix;
    if (p != ETR_NOIX && (c->x[p].covered || c->x[p].comm_type >= 0)) c->x[i].covered = 1;
  }
  for (size_t i = 0; i < t->n; i++) {
    cx_op *x = &c->x[i];
    if (is_pg_init(c, i))
      x->sim = SIM_META;
    else if (x->covered)
      x->sim = SIM_NONE;
    else if (x->comm_type >= 0)
      x->sim = SIM_COLL;
    else if (!x->has_child && !x->twin)
      x->sim = SIM_COMP;
  }
  /* Two ops with one id cannot both be nodes (every dep must name one node): keep the first. */
  an_u64map seen = {0};
  for (size_t k = 0; k < t->n; k++) {
    uint32_t i = t->order[k];
    if (c->x[i].sim == SIM_NONE) continue;
    uint64_t dummy;
    if (an_u64map_get(&seen, (uint64_t)t->ops[i].id, &dummy)) {
      c->x[i].sim = SIM_NONE;
      c->skipped++;
    } else if (!an_u64map_put(&seen, (uint64_t)t->ops[i].id, i)) {
      c->oom = true;
    }
  }
  an_u64map_free(&seen);
}

/* ---- output ---- */

typedef struct deps {
  uint64_t *v;
  size_t n, cap;
} deps;

static bool dep_add(deps *d, uint64_t id) {
  for (size_t i = 0; i < d->n; i++)
    if (d->v[i] == id) return true;
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 8;
    uint64_t *v = realloc(d->v, cap * sizeof *v);
    if (v == NULL) return false;
    d->v = v;
    d->cap = cap;
  }
  d->v[d->n++] = id;
  return true;
}

/* One message, preceded by its varint length (Chakra's length-delimited stream). */
static bool write_delimited(FILE *f, const ProtobufCMessage *m) {
  size_t len = protobuf_c_message_get_packed_size(m);
  uint8_t hdr[10];
  size_t h = 0;
  for (size_t v = len;; v >>= 7) {
    hdr[h++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    if (v < 0x80) break;
  }
  uint8_t stack[4096];
  uint8_t *buf = len <= sizeof stack ? stack : malloc(len);
  if (buf == NULL) return false;
  protobuf_c_message_pack(m, buf);
  bool ok = fwrite(hdr, 1, h, f) == h && fwrite(buf, 1, len, f) == len;
  if (buf != stack) free(buf);
  return ok;
}

static void attr_i64(ChakraProtoMsg__AttributeProto *a, const char *name, int64_t v) {
  chakra_proto_msg__attribute_proto__init(a);
  a->name = (char *)name;
  a->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_VAL;
  a->int64_val = v;
}

static void attr_bool(ChakraProtoMsg__AttributeProto *a, const char *name, bool v) {
  chakra_proto_msg__attribute_proto__init(a);
  a->name = (char *)name;
  a->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_BOOL_VAL;
  a->bool_val = v;
}

static void attr_str(ChakraProtoMsg__AttributeProto *a, const char *name, const char *v) {
  chakra_proto_msg__attribute_proto__init(a);
  a->name = (char *)name;
  a->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_STRING_VAL;
  a->string_val = (char *)v;
}

static int64_t clamp_i64(uint64_t v) { return v > INT64_MAX ? INT64_MAX : (int64_t)v; }

/* Counts of what one file holds, for the summary line and the tests. */
typedef struct cx_counts {
  uint64_t comp, coll, meta, data_deps, ctrl_deps;
  uint64_t unsimulated; /* COMM nodes of a type ASTRA-sim's workload layer does not run */
  uint64_t no_pg;       /* COMM nodes whose trace names no process group (put in "0") */
} cx_counts;

static int write_et(cx_trace *c, const char *out_path, cx_counts *cnt) {
  an_optab *t = &c->t;
  FILE *f = cli_open_output(CMD, out_path);
  if (f == NULL) return ETR_CLI_FAIL;
  bool ok = true;

  ChakraProtoMsg__GlobalMetadata gm = CHAKRA_PROTO_MSG__GLOBAL_METADATA__INIT;
  ChakraProtoMsg__AttributeProto ga[3], *gap[3] = {&ga[0], &ga[1], &ga[2]};
  gm.version = "0.0.4";
  attr_str(&ga[0], "producer", "etr " ETR_TOOL_VERSION);
  attr_str(&ga[1], "source_schema", c->schema);
  attr_i64(&ga[2], "rank", c->rank);
  gm.attr = gap;
  gm.n_attr = 3;
  ok = write_delimited(f, &gm.base);

  /* Per thread: its simulated nodes so far (start order), for ctrl deps and fw waits. */
  size_t nth = t->nthreads ? t->nthreads : 1;
  uint32_t **th_nodes = calloc(nth, sizeof *th_nodes);
  size_t *th_n = calloc(nth, sizeof *th_n), *th_cap = calloc(nth, sizeof *th_cap);
  uint32_t *last_fw_target = malloc(nth * sizeof *last_fw_target);
  an_u64map writer = {0}; /* tensor key -> op index of the last simulated writer */
  deps ctrl = {0}, data = {0};
  chakra_groups groups = {0}; /* per process group: its last COMM node */
  if (th_nodes == NULL || th_n == NULL || th_cap == NULL || last_fw_target == NULL) ok = false;
  for (size_t i = 0; ok && i < nth; i++) last_fw_target[i] = ETR_NOIX;

  /* METADATA nodes first: nothing depends on them. In the trace's order, not start or id
   * order: the writer puts the newest first, so that the first lists every group (what PARAM
   * reads; docs/FORMAT.md). The op table keeps the file's order. */
  for (uint32_t i = 0; ok && i < t->n; i++) {
    if (c->x[i].sim != SIM_META) continue;
    const char *io = c->arena + c->x[i].io_off;
    ChakraProtoMsg__Node node = CHAKRA_PROTO_MSG__NODE__INIT;
    ChakraProtoMsg__IOInfo in = CHAKRA_PROTO_MSG__IOINFO__INIT;
    ChakraProtoMsg__AttributeProto a0, *ap[1] = {&a0};
    node.id = (uint64_t)t->ops[i].id;
    node.name = (char *)an_optab_name(t, i);
    node.type = CHAKRA_PROTO_MSG__NODE_TYPE__METADATA_NODE;
    in.values = (char *)io;
    in.shapes = (char *)(io += strlen(io) + 1);
    in.types = (char *)(io += strlen(io) + 1);
    node.inputs = &in;
    node.start_time_micros = t->ops[i].ts > 0 ? (uint64_t)t->ops[i].ts : 0;
    attr_bool(&a0, "is_cpu_op", false);
    node.attr = ap;
    node.n_attr = 1;
    ok = write_delimited(f, &node.base);
    cnt->meta++;
  }

  for (size_t k = 0; ok && k < t->n; k++) {
    uint32_t i = t->order[k];
    const cx_op *x = &c->x[i];
    if (x->sim != SIM_COMP && x->sim != SIM_COLL) continue;
    const an_op *op = &t->ops[i];
    ctrl.n = data.n = 0;
    uint32_t th = op->thread < nth ? op->thread : 0;
    /* Program order on the thread. */
    if (th_n[th] > 0) ok = ok && dep_add(&ctrl, (uint64_t)t->ops[th_nodes[th][th_n[th] - 1]].id);
    /* Work for another thread: wait for what that thread had finished when this began. */
    uint32_t fw = ETR_NOIX;
    for (uint32_t a = i; a != ETR_NOIX && fw == ETR_NOIX; a = t->ops[a].parent_ix)
      fw = t->ops[a].fw_parent_ix;
    if (fw != ETR_NOIX && t->ops[fw].thread < nth && t->ops[fw].thread != th) {
      uint32_t ft = t->ops[fw].thread, target = ETR_NOIX;
      for (size_t j = th_n[ft]; j > 0; j--) {
        const an_op *o = &t->ops[th_nodes[ft][j - 1]];
        if (o->ts + o->incl <= op->ts) {
          target = th_nodes[ft][j - 1];
          break;
        }
      }
      if (target != ETR_NOIX && target != last_fw_target[th]) {
        ok = ok && dep_add(&ctrl, (uint64_t)t->ops[target].id);
        last_fw_target[th] = target;
      }
    }
    /* A group's collectives in order (chakra_parts.h). */
    const char *pg = x->pg_name != AN_NOSTR ? an_colls_str(&t->colls, x->pg_name) : "0";
    uint32_t prev = ETR_NOIX;
    if (x->sim == SIM_COLL) ok = ok && chakra_group_next(&groups, pg, i, &prev);
    if (prev != ETR_NOIX) ok = ok && dep_add(&ctrl, (uint64_t)t->ops[prev].id);
    /* Data: the last simulated writer of each tensor read. */
    for (uint32_t r = 0; r < op->n_in; r++) {
      const an_tref *tr = &t->trefs[op->tref_off + r];
      uint64_t key = tr->storage ? (tr->storage | (1ULL << 63)) : (tr->tensor & ~(1ULL << 63));
      uint64_t w;
      if (an_u64map_get(&writer, key, &w) && w != i)
        ok = ok && dep_add(&data, (uint64_t)t->ops[w].id);
    }
    for (uint32_t r = 0; r < op->n_out; r++) {
      const an_tref *tr = &t->trefs[op->tref_off + op->n_in + r];
      uint64_t key = tr->storage ? (tr->storage | (1ULL << 63)) : (tr->tensor & ~(1ULL << 63));
      ok = ok && an_u64map_put(&writer, key, i);
    }
    if (th_n[th] == th_cap[th]) {
      size_t cap = th_cap[th] ? th_cap[th] * 2 : 64;
      uint32_t *v = realloc(th_nodes[th], cap * sizeof *v);
      if (v == NULL) {
        ok = false;
        break;
      }
      th_nodes[th] = v;
      th_cap[th] = cap;
    }
    th_nodes[th][th_n[th]++] = i;

    ChakraProtoMsg__Node node = CHAKRA_PROTO_MSG__NODE__INIT;
    ChakraProtoMsg__IOInfo in = CHAKRA_PROTO_MSG__IOINFO__INIT,
                           out = CHAKRA_PROTO_MSG__IOINFO__INIT;
    ChakraProtoMsg__AttributeProto a[6], *ap[6];
    size_t na = 0;
    node.id = (uint64_t)op->id;
    node.name = (char *)an_optab_name(t, i);
    node.ctrl_deps = ctrl.v;
    node.n_ctrl_deps = ctrl.n;
    node.data_deps = data.v;
    node.n_data_deps = data.n;
    node.start_time_micros = op->ts > 0 ? (uint64_t)op->ts : 0;
    const char *io = c->arena + x->io_off;
    in.values = (char *)io;
    in.shapes = (char *)(io += strlen(io) + 1);
    in.types = (char *)(io += strlen(io) + 1);
    out.values = (char *)(io += strlen(io) + 1);
    out.shapes = (char *)(io += strlen(io) + 1);
    out.types = (char *)(io += strlen(io) + 1);
    node.inputs = &in;
    node.outputs = &out;
    int64_t tid = t->threads && op->thread < t->nthreads ? (int64_t)t->threads[op->thread].tid : 0;
    if (x->sim == SIM_COMP) {
      node.type = CHAKRA_PROTO_MSG__NODE_TYPE__COMP_NODE;
      node.duration_micros = op->excl > 0 ? (uint64_t)op->excl : 0;
      attr_bool(&a[na++], "is_cpu_op", true);
      cnt->comp++;
    } else {
      node.type = CHAKRA_PROTO_MSG__NODE_TYPE__COMM_COLL_NODE;
      node.duration_micros = x->comm_dur > 0 ? (uint64_t)x->comm_dur : 0;
      attr_bool(&a[na++], "is_cpu_op", false);
      attr_i64(&a[na++], "comm_type", x->comm_type);
      if (x->comm_type == CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__REDUCE ||
          x->comm_type == CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__GATHER ||
          x->comm_type == CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__SCATTER)
        cnt->unsimulated++;
      attr_i64(&a[na++], "comm_size", clamp_i64(x->comm_size));
      attr_str(&a[na++], "pg_name", pg);
      if (x->pg_name == AN_NOSTR) cnt->no_pg++;
      cnt->coll++;
    }
    attr_i64(&a[na++], "tensor_size", clamp_i64(x->tensor_size));
    attr_i64(&a[na++], "tid", tid);
    for (size_t j = 0; j < na; j++) ap[j] = &a[j];
    node.attr = ap;
    node.n_attr = na;
    cnt->ctrl_deps += ctrl.n;
    cnt->data_deps += data.n;
    ok = ok && write_delimited(f, &node.base);
  }

  for (size_t i = 0; th_nodes && i < nth; i++) free(th_nodes[i]);
  free(th_nodes);
  free(th_n);
  free(th_cap);
  free(last_fw_target);
  free(groups.v);
  free(ctrl.v);
  free(data.v);
  an_u64map_free(&writer);
  if (!ok) {
    cli_error(CMD, "%s: %s", out_path, ferror(f) ? strerror(errno) : "out of memory");
    fclose(f);
    cli_discard_output(out_path);
    return ETR_CLI_FAIL;
  }
  /* (made out_path by cmd_chakra once every rank is written) */
  return cli_close_output_pending(CMD, f, out_path) == 0 ? ETR_CLI_OK : ETR_CLI_FAIL;
}

static void cx_free(cx_trace *c) {
  an_optab_free(&c->t);
  free(c->x);
  free(c->arena);
  free((void *)c->schema);
}

/* Whether path is a file of dir (the same directory by any name) named prefix.N.et. */
static bool in_output_dir(const char *path, const char *dir, const char *prefix) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t pl = strlen(prefix);
  if (strncmp(base, prefix, pl) != 0 || base[pl] != '.') return false;
  const char *d = base + pl + 1, *e = d;
  while (*e >= '0' && *e <= '9') e++;
  if (e == d || strcmp(e, ".et") != 0) return false;
  char *pdir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
  struct stat a, b;
  bool same = pdir && stat(pdir, &a) == 0 && stat(dir, &b) == 0 && a.st_dev == b.st_dev &&
              a.st_ino == b.st_ino;
  free(pdir);
  return same;
}

int cmd_chakra(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    chakra_help();
    return ETR_CLI_OK;
  }
  const char *dir = NULL, *prefix = "rank";
  int64_t force_rank = -1;
  const char **files = calloc((size_t)argc, sizeof *files);
  size_t nfiles = 0;
  if (files == NULL) {
    cli_error(CMD, "out of memory");
    return ETR_CLI_FAIL;
  }
  int rc = ETR_CLI_OK;
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"prefix", required_argument, NULL, 'P'},
                                       {"rank", required_argument, NULL, 'R'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  for (int c; rc == ETR_CLI_OK && (c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1;) {
    if (c == 'o') {
      dir = optarg;
    } else if (c == 'P') {
      prefix = optarg;
    } else if (c == 'R') {
      uint64_t r;
      if (!cli_parse_u64(CMD, "--rank", optarg, &r))
        rc = ETR_CLI_USAGE;
      else if (r > INT32_MAX)
        rc = cli_usage(CMD, "--rank %s: at most %d", optarg, INT32_MAX);
      else
        force_rank = (int64_t)r;
    } else {
      rc = cli_getopt_error(CMD, c, argv);
    }
  }
  for (int i = optind; rc == ETR_CLI_OK && i < argc; i++) files[nfiles++] = argv[i];
  if (rc == ETR_CLI_OK && nfiles == 0) rc = cli_usage(CMD, "no TRACE given");
  if (rc == ETR_CLI_OK && dir == NULL) rc = cli_usage(CMD, "no output directory (-o DIR)");
  if (rc == ETR_CLI_OK && force_rank >= 0 && nfiles != 1)
    rc = cli_usage(CMD, "--rank needs exactly one TRACE");
  if (rc == ETR_CLI_OK && (prefix[0] == '\0' || strchr(prefix, '/')))
    rc = cli_usage(CMD, "--prefix must be a file name without '/'");
  if (rc == ETR_CLI_OK) rc = cli_stdin_once(CMD, files, nfiles);
  if (rc != ETR_CLI_OK) {
    free(files);
    return rc;
  }
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    cli_error(CMD, "%s: %s", dir, strerror(errno));
    free(files);
    return ETR_CLI_FAIL;
  }
  /* A trace in DIR under an output's name (PREFIX.N.et) could be overwritten by the output
   * of a trace read before it: refused before anything is written. */
  for (size_t f = 0; f < nfiles; f++)
    if (in_output_dir(files[f], dir, prefix)) {
      cli_error(CMD, "%s: is in %s under an output's name (%s.N.et): refusing to overwrite it",
                cli_term(files[f]), cli_term(dir), cli_term(prefix));
      free(files);
      return ETR_CLI_FAIL;
    }
  /* Nor may stdout be one of them: the lines of the ranks before it would reach it. */
  for (size_t f = 0; f < nfiles; f++) cli_remember_input(files[f]);
  if (cli_stdout_check(CMD) != ETR_CLI_OK) {
    free(files);
    return ETR_CLI_FAIL;
  }
  /* A rank is known only once its trace is read (the process-group node may come last).
   * So each file is written beside its name and all are made theirs at the end: a later
   * trace of a rank already written, or any other error, leaves DIR as it was, never a
   * partial set that ASTRA-sim would take for a run of fewer ranks. The report lines and the
   * per-file notes wait for that too. */
  an_rank_given *ranks = calloc(nfiles, sizeof *ranks);
  char **outs = calloc(nfiles, sizeof *outs);
  size_t n_outs = 0;
  char *report = NULL, *notes = NULL;
  size_t report_len = 0, notes_len = 0;
  FILE *rep = ranks && outs ? open_memstream(&report, &report_len) : NULL;
  FILE *nts = rep ? open_memstream(&notes, &notes_len) : NULL;
  if (nts == NULL) {
    if (rep) fclose(rep);
    free(report);
    free(ranks);
    free(outs);
    free(files);
    cli_error(CMD, "out of memory");
    return ETR_CLI_FAIL;
  }
  for (size_t f = 0; f < nfiles && rc == ETR_CLI_OK; f++) {
    cx_trace c;
    memset(&c, 0, sizeof c);
    c.path = files[f];
    c.rank = -1;
    c.world = -1;
    an_optab_init(&c.t);
    rc = load(&c);
    if (rc == ETR_CLI_OK) {
      classify(&c);
      if (c.oom) {
        cli_error(CMD, "%s: out of memory", c.path);
        rc = ETR_CLI_FAIL;
      }
    }
    if (rc == ETR_CLI_OK) {
      int64_t rank = force_rank >= 0 ? force_rank : c.rank >= 0 ? c.rank : (int64_t)f;
      ranks[f] = (an_rank_given){rank, c.world, force_rank < 0 && c.rank < 0};
      for (size_t g = 0; g < f && rc == ETR_CLI_OK; g++)
        if (ranks[g].rank == rank) {
          rc = ETR_CLI_FAIL;
          /* A rank from the position is no rank the trace has: say where it came from. */
          if (ranks[f].by_pos)
            cli_error(CMD,
                      "%s: rank %lld again: it records no rank and is rank %lld by its position "
                      "among the arguments, which %s records; give each rank's trace once",
                      cli_term(c.path), (long long)rank, (long long)rank, cli_term(files[g]));
          else if (ranks[g].by_pos)
            cli_error(CMD,
                      "%s: rank %lld again: %s records no rank and is rank %lld by its position "
                      "among the arguments; give each rank's trace once",
                      cli_term(c.path), (long long)rank, cli_term(files[g]), (long long)rank);
          else
            cli_error(CMD, "%s: rank %lld again (%s has it too); give each rank's trace once",
                      cli_term(c.path), (long long)rank, cli_term(files[g]));
        }
      c.rank = rank;
      char *out = NULL;
      if (rc == ETR_CLI_OK && asprintf(&out, "%s/%s.%lld.et", dir, prefix, (long long)rank) < 0) {
        cli_error(CMD, "out of memory");
        rc = ETR_CLI_FAIL;
        out = NULL;
      }
      cx_counts cnt = {0};
      if (rc == ETR_CLI_OK) rc = write_et(&c, out, &cnt);
      if (rc == ETR_CLI_OK) {
        outs[n_outs++] = out;
        out = NULL;
        fprintf(rep,
                "%s: rank %lld: %llu COMP, %llu COMM_COLL, %llu METADATA nodes; %llu data deps, "
                "%llu ctrl deps",
                outs[n_outs - 1], (long long)rank, (unsigned long long)cnt.comp,
                (unsigned long long)cnt.coll, (unsigned long long)cnt.meta,
                (unsigned long long)cnt.data_deps, (unsigned long long)cnt.ctrl_deps);
        if (c.skipped)
          fprintf(rep, "; %llu ops with a repeated id left out", (unsigned long long)c.skipped);
        fprintf(rep, "\n");
        if (cnt.no_pg)
          fprintf(nts,
                  "%s: %llu collective(s) name no process group: written in group \"0\" "
                  "(every rank), wrong for a collective of a sub-group, on which ASTRA-sim "
                  "then waits forever (docs/FORMAT.md, \"Collectives in a trace\")\n",
                  cli_term(c.path), (unsigned long long)cnt.no_pg);
        if (cnt.unsimulated)
          fprintf(nts,
                  "%s: %llu reduce, gather or scatter COMM_COLL node(s): ASTRA-sim's "
                  "workload layer runs none of these (only all-reduce, all-gather, "
                  "reduce-scatter, all-to-all and broadcast)\n",
                  cli_term(c.path), (unsigned long long)cnt.unsimulated);
      }
      free(out);
    }
    cx_free(&c);
  }
  char world_note[512];
  if (rc == ETR_CLI_OK && nfiles > 1 &&
      an_world_note(world_note, sizeof world_note, files, ranks, nfiles)) {
    cli_error(CMD,
              "%s: refusing to write a partial set of ranks; give every rank's trace of one run",
              world_note);
    rc = ETR_CLI_FAIL;
  }
  bool closed = fclose(rep) == 0;
  closed = fclose(nts) == 0 && closed;
  if (!closed && rc == ETR_CLI_OK) {
    cli_error(CMD, "out of memory");
    rc = ETR_CLI_FAIL;
  }
  for (size_t i = 0; i < n_outs; i++) {
    if (rc == ETR_CLI_OK)
      rc = cli_out_commit(CMD, outs[i]);
    else
      cli_discard_output(outs[i]);
    free(outs[i]);
  }
  if (rc == ETR_CLI_OK && report_len) fwrite(report, 1, report_len, stdout);
  for (char *line = notes, *nl; rc == ETR_CLI_OK && line && *line; line = nl + 1) {
    nl = strchr(line, '\n');
    *nl = '\0';
    cli_error(CMD, "%s", line);
  }
  free(report);
  free(notes);
  free(outs);
  free(ranks);
  free(files);
  return rc;
}
