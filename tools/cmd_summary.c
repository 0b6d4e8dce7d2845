/* etr summary FILE — what a trace holds, streaming: nodes, threads, ops by count and by
 * exclusive time, the largest tensors, collectives by process group, recorder statistics.
 * A collective is a call as tools/lib_an_ops.h's an_colls counts them (record_param_comms,
 * collective attrs, c10d::X, gloo:X / nccl:X; one per call), the same as chakra and replay.
 *
 * Memory: one entry per distinct op name, per tid and per (process group, collective), one
 * record (~120 bytes) per collective op; the --top largest tensors (summary_top.h: a
 * sighting costs O(log N), not N).
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lib_an_ops.h"
#include "lib_an_ranks.h"
#include "json/writer.h"
#include "lib_an_util.h"
#include "summary_top.h"

#define CMD "summary"
#define PROCESS_NAME "[pytorch|profiler|execution_trace|process]"
#define THREAD_NAME "[pytorch|profiler|execution_trace|thread]"

/* ---- op names ---- */

typedef struct opent {
  char *name; /* len bytes and a NUL (a name may hold NULs of its own: "\u0000") */
  size_t len;
  uint64_t count;
  int64_t excl, incl;
} opent;

typedef struct optab {
  opent *slots;
  size_t cap, n;
} optab;

/* Sums of a trace's values saturate: a valid trace may hold durations near INT64_MAX. */
static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? INT64_MAX : INT64_MIN;
}

static int64_t sat_sub(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_sub_overflow(a, b, &r)) return r;
  return b < 0 ? INT64_MAX : INT64_MIN;
}

static uint64_t sat_add_u(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t hash_str(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static bool optab_grow(optab *t) {
  size_t cap = t->cap ? t->cap * 2 : 1024;
  opent *s = calloc(cap, sizeof *s);
  if (!s) return false;
  for (size_t i = 0; i < t->cap; i++) {
    if (!t->slots[i].name) continue;
    size_t h = hash_str(t->slots[i].name, t->slots[i].len) & (cap - 1);
    while (s[h].name) h = (h + 1) & (cap - 1);
    s[h] = t->slots[i];
  }
  free(t->slots);
  t->slots = s;
  t->cap = cap;
  return true;
}

static opent *optab_get(optab *t, const char *name, size_t len) {
  if ((t->n + 1) * 2 > t->cap && !optab_grow(t)) return NULL;
  size_t h = hash_str(name, len) & (t->cap - 1);
  for (;;) {
    opent *e = &t->slots[h];
    if (!e->name) {
      char *copy = malloc(len + 1);
      if (!copy) return NULL;
      memcpy(copy, name, len);
      copy[len] = '\0';
      e->name = copy;
      e->len = len;
      t->n++;
      return e;
    }
    if (e->len == len && memcmp(e->name, name, len) == 0) return e;
    h = (h + 1) & (t->cap - 1);
  }
}

/* ---- threads, collectives ---- */

typedef struct thr {
  uint64_t tid;
  uint64_t ops;
  int64_t busy; /* sum of exclusive durations */
  int64_t first_ts, last_end;
} thr;

typedef struct coll {
  char pg[64], name[64];
  uint64_t count, in_bytes, out_bytes;
  bool size_unknown;
  bool no_pg; /* the nodes have no pg_name (not an empty one) */
} coll;

typedef struct srun {
  uint64_t top;
  bool json;
  const char *file;
  uint64_t nodes, ops, thread_nodes;
  bool timing;
  optab ops_by_name;
  thr *thr;
  size_t n_thr, cap_thr;
  an_u64map thr_index; /* tid -> index in thr */
  coll *coll;
  size_t n_coll, cap_coll;
  an_strtab coll_keys; /* "pg\0name" (as kept) -> index in coll: the same index */
  an_colls colls;      /* the collective records, resolved after the last node */
  sum_top top_tens;    /* the --top largest tensors */
  uint64_t tensor_values;
  bool oom;
} srun;

/* The length copied (at most size - 1 bytes, then a NUL). */
static size_t copy_trunc(char *dst, size_t size, const char *src, size_t len) {
  if (len >= size) len = size - 1;
  memcpy(dst, src, len);
  dst[len] = '\0';
  return len;
}

static void add_tensor(srun *s, const rd_rnode *n, const char *type, size_t type_len,
                       const rd_jval *v) {
  if (v->kind != ETR_J_ARRAY || v->v.arr.n != 6) return;
  const rd_jval *it = v->v.arr.items;
  for (int i = 0; i < 5; i++)
    if (it[i].kind != ETR_J_INT) return;
  s->tensor_values++;
  if (!s->top) return;
  sum_tens t;
  memset(&t, 0, sizeof t);
  t.id = it[0].v.i;
  t.storage = it[1].v.i;
  t.offset = it[2].v.i;
  t.numel = it[3].v.i;
  t.itemsize = it[4].v.i;
  if (t.numel < 0 || t.itemsize < 0) return;
  if (__builtin_mul_overflow((uint64_t)t.numel, (uint64_t)t.itemsize, &t.bytes))
    t.bytes = UINT64_MAX; /* (saturates, as every size here does) */
  if (!sum_top_wants(&s->top_tens, &t)) return;
  t.node = n->id;
  /* "Tensor(float)" -> "float" */
  if (type_len > 8)
    t.dtype_len = (uint8_t)copy_trunc(t.dtype, sizeof t.dtype, type + 7, type_len - 8);
  if (it[5].kind == ETR_J_STRING)
    t.device_len = (uint8_t)copy_trunc(t.device, sizeof t.device, it[5].v.str.s, it[5].v.str.len);
  t.op_len = (uint8_t)copy_trunc(t.op, sizeof t.op, n->name, n->name_len);
  sum_top_put(&s->top_tens, &t);
}

/* Tensors inside a value of the given type (lists and tuples are walked). */
static void scan_value(srun *s, const rd_rnode *n, const char *type, size_t tl, const rd_jval *v,
                       int depth) {
  if (depth > 32) return;
  if (tl > 7 && !memcmp(type, "Tensor(", 7)) {
    add_tensor(s, n, type, tl, v);
    return;
  }
  size_t pre = 0;
  if (tl > 12 && !memcmp(type, "GenericList[", 12))
    pre = 12;
  else if (tl > 6 && !memcmp(type, "Tuple[", 6))
    pre = 6;
  if (!pre || v->kind != ETR_J_ARRAY || type[tl - 1] != ']') return;
  /* element types, split at top-level commas */
  const char *p = type + pre, *end = type + tl - 1;
  size_t i = 0;
  while (p < end && i < v->v.arr.n) {
    const char *q = p;
    int d = 0;
    while (q < end && (d > 0 || *q != ',')) {
      if (*q == '[' || *q == '(' || *q == '<') d++;
      if (*q == ']' || *q == ')' || *q == '>') d--;
      q++;
    }
    scan_value(s, n, p, (size_t)(q - p), &v->v.arr.items[i++], depth + 1);
    p = q + 1;
  }
}

static void scan_io(srun *s, const rd_rnode *n, const rd_jval *io) {
  if (!io) return;
  const rd_jval *vals = rd_jobj_get(io, "values"), *types = rd_jobj_get(io, "types");
  if (!vals || !types || vals->kind != ETR_J_ARRAY || types->kind != ETR_J_ARRAY) return;
  for (size_t i = 0; i < vals->v.arr.n && i < types->v.arr.n; i++) {
    const rd_jval *t = &types->v.arr.items[i];
    if (t->kind == ETR_J_STRING)
      scan_value(s, n, t->v.str.s, t->v.str.len, &vals->v.arr.items[i], 0);
  }
}

/* One collective call: its counted record r, added to the (group, collective) entries. */
static void add_collective(srun *s, const an_coll_rec *r) {
  bool no_pg = r->pg == AN_NOSTR;
  const char *pgs = an_colls_str(&s->colls, r->pg), *name = an_colls_str(&s->colls, r->name);
  /* (looked up by the strings as kept, cut at 63 bytes, after a byte that tells a missing
   * pg_name from an empty one: one entry per pair, in time linear in the nodes however many
   * pairs there are) */
  char key[130];
  size_t pl = strnlen(pgs, sizeof s->coll[0].pg - 1),
         nl = strnlen(name, sizeof s->coll[0].name - 1);
  key[0] = no_pg ? '-' : 's';
  memcpy(key + 1, pgs, pl);
  key[1 + pl] = '\0';
  memcpy(key + pl + 2, name, nl);
  uint32_t k = an_strtab_intern(&s->coll_keys, key, pl + 2 + nl);
  if (k == UINT32_MAX) {
    s->oom = true;
    return;
  }
  coll *c = k < s->n_coll ? &s->coll[k] : NULL;
  if (!c) {
    if (s->n_coll == s->cap_coll) {
      size_t cap = s->cap_coll ? s->cap_coll * 2 : 16;
      coll *nc = realloc(s->coll, cap * sizeof *nc);
      if (!nc) {
        s->oom = true;
        return;
      }
      s->coll = nc;
      s->cap_coll = cap;
    }
    c = &s->coll[s->n_coll++];
    memset(c, 0, sizeof *c);
    c->no_pg = no_pg;
    copy_trunc(c->pg, sizeof c->pg, pgs, strlen(pgs));
    copy_trunc(c->name, sizeof c->name, name, strlen(name));
  }
  c->count++;
  if (!r->bytes_exact) c->size_unknown = true;
  c->in_bytes = sat_add_u(c->in_bytes, r->in_bytes);
  c->out_bytes = sat_add_u(c->out_bytes, r->out_bytes);
}

/* After the last node: the collective calls of the trace. */
static void collectives(srun *s) {
  if (!an_colls_resolve(&s->colls)) {
    s->oom = true;
    return;
  }
  for (size_t i = 0; i < s->colls.n && !s->oom; i++)
    if (s->colls.r[i].role == AN_COLL_COUNTED) add_collective(s, &s->colls.r[i]);
}

static thr *get_thr(srun *s, uint64_t tid) {
  uint64_t at;
  if (an_u64map_get(&s->thr_index, tid, &at)) return &s->thr[at];
  if (s->n_thr == s->cap_thr) {
    size_t cap = s->cap_thr ? s->cap_thr * 2 : 16;
    thr *t = realloc(s->thr, cap * sizeof *t);
    if (!t) return NULL;
    s->thr = t;
    s->cap_thr = cap;
  }
  if (!an_u64map_put(&s->thr_index, tid, s->n_thr)) return NULL;
  thr *t = &s->thr[s->n_thr++];
  memset(t, 0, sizeof *t);
  t->tid = tid;
  t->first_ts = INT64_MAX;
  t->last_end = INT64_MIN;
  return t;
}

static void on_node(srun *s, const rd_rnode *n) {
  s->nodes++;
  if (!an_colls_add(&s->colls, n)) s->oom = true;
  if (!strcmp(n->name, THREAD_NAME)) {
    s->thread_nodes++;
    return;
  }
  if (!strcmp(n->name, PROCESS_NAME)) return;
  s->ops++;
  opent *e = optab_get(&s->ops_by_name, n->name, n->name_len);
  thr *t = get_thr(s, n->tid);
  if (!e || !t) {
    s->oom = true;
    return;
  }
  e->count++;
  t->ops++;
  if (n->has_timing) {
    s->timing = true;
    /* A negative duration (an invalid trace: `etr validate` reports it) counts as 0, as in
     * graph and replay: a sum of times never goes below 0. */
    int64_t ex = n->exclusive_dur > 0 ? n->exclusive_dur : 0;
    int64_t in = n->inclusive_dur > 0 ? n->inclusive_dur : 0;
    e->excl = sat_add(e->excl, ex);
    e->incl = sat_add(e->incl, in);
    t->busy = sat_add(t->busy, ex);
    if (n->ts < t->first_ts) t->first_ts = n->ts;
    int64_t end = sat_add(n->ts, in);
    if (end > t->last_end) t->last_end = end;
  }
  scan_io(s, n, n->inputs);
  scan_io(s, n, n->outputs);
}

/* ---- output ---- */

/* Names by their bytes (NULs included), a prefix first. */
static int cmp_name(const opent *x, const opent *y) {
  int c = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int cmp_count(const void *a, const void *b) {
  const opent *x = *(const opent *const *)a, *y = *(const opent *const *)b;
  if (x->count != y->count) return x->count < y->count ? 1 : -1;
  return cmp_name(x, y);
}

static int cmp_excl(const void *a, const void *b) {
  const opent *x = *(const opent *const *)a, *y = *(const opent *const *)b;
  if (x->excl != y->excl) return x->excl < y->excl ? 1 : -1;
  return cmp_name(x, y);
}

static int cmp_thr(const void *a, const void *b) {
  const thr *x = a, *y = b;
  return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static int cmp_coll(const void *a, const void *b) {
  const coll *x = a, *y = b;
  int c = (int)y->no_pg - (int)x->no_pg; /* (no pg_name first) */
  if (!c) c = strcmp(x->pg, y->pg);
  return c ? c : strcmp(x->name, y->name);
}

static void json_kv_str(FILE *f, const char *k, const char *v, bool comma) {
  fprintf(f, "%s\"%s\": ", comma ? ", " : "", k);
  if (v)
    cli_json_str(f, v);
  else
    fputs("null", f);
}

static void json_kv_strn(FILE *f, const char *k, const char *v, size_t len) {
  fprintf(f, ", \"%s\": ", k);
  cli_json_strn(f, v, len);
}

static void print_json_value(FILE *f, const rd_jval *v) {
  switch (v->kind) {
    case ETR_J_NULL:
      fputs("null", f);
      break;
    case ETR_J_BOOL:
      fputs(v->v.b ? "true" : "false", f);
      break;
    case ETR_J_INT:
      fprintf(f, "%" PRId64, v->v.i);
      break;
    case ETR_J_UINT:
      fprintf(f, "%" PRIu64, v->v.u);
      break;
    case ETR_J_DOUBLE: /* (1e400 reads as inf: written as docs/FORMAT.md spells it) */
      if (isfinite(v->v.d)) {
        char buf[ETR__DOUBLE_MAX_LEN];
        etr__fmt_double(buf, v->v.d);
        fputs(buf, f);
      } else
        fputs(isnan(v->v.d) ? "\"nan\"" : v->v.d > 0 ? "\"inf\"" : "\"-inf\"", f);
      break;
    case ETR_J_STRING:
      cli_json_strn(f, v->v.str.s, v->v.str.len);
      break;
    case ETR_J_ARRAY:
      fputc('[', f);
      for (size_t i = 0; i < v->v.arr.n; i++) {
        if (i) fputs(", ", f);
        print_json_value(f, &v->v.arr.items[i]);
      }
      fputc(']', f);
      break;
    case ETR_J_OBJECT:
      fputc('{', f);
      for (size_t i = 0; i < v->v.obj.n; i++) {
        if (i) fputs(", ", f);
        cli_json_str(f, v->v.obj.items[i].key);
        fputs(": ", f);
        print_json_value(f, &v->v.obj.items[i].val);
      }
      fputc('}', f);
      break;
  }
}

static void report(srun *s, FILE *f, const rd_rheader *h, int64_t finish_ts, const rd_jval *etr) {
  optab *t = &s->ops_by_name;
  opent **all = malloc((t->n ? t->n : 1) * sizeof *all);
  if (!all) {
    s->oom = true;
    return;
  }
  size_t k = 0;
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i].name) all[k++] = &t->slots[i];
  size_t top = s->top < k ? (size_t)s->top : k;
  if (s->n_thr) qsort(s->thr, s->n_thr, sizeof *s->thr, cmp_thr);
  sum_top_sort(&s->top_tens);
  if (s->n_coll) qsort(s->coll, s->n_coll, sizeof *s->coll, cmp_coll);
  const rd_jval *ver = etr ? rd_jobj_get(etr, "version") : NULL;
  const rd_jval *stats = etr ? rd_jobj_get(etr, "stats") : NULL;

  if (s->json) {
    fputc('{', f);
    json_kv_str(f, "file", s->file, false);
    json_kv_str(f, "schema", h->schema, true);
    fprintf(f, ", \"pid\": %" PRId64, h->pid);
    json_kv_str(f, "time", h->time, true);
    fprintf(f, ", \"start_ts\": %" PRId64 ", \"finish_ts\": %" PRId64, h->start_ts, finish_ts);
    fprintf(f,
            ", \"nodes\": %" PRIu64 ", \"ops\": %" PRIu64 ", \"thread_nodes\": %" PRIu64
            ", \"timing\": %s, \"op_names\": %zu",
            s->nodes, s->ops, s->thread_nodes, s->timing ? "true" : "false", k);
    fputs(",\n \"threads\": [", f);
    for (size_t i = 0; i < s->n_thr; i++) {
      thr *x = &s->thr[i];
      fprintf(f, "%s{\"tid\": %" PRIu64 ", \"ops\": %" PRIu64 ", \"busy_us\": %" PRId64,
              i ? ", " : "", x->tid, x->ops, x->busy);
      if (x->first_ts <= x->last_end)
        fprintf(f, ", \"first_ts\": %" PRId64 ", \"last_end_ts\": %" PRId64 "}", x->first_ts,
                x->last_end);
      else
        fputs(", \"first_ts\": null, \"last_end_ts\": null}", f);
    }
    for (int pass = 0; pass < 2; pass++) {
      if (k) qsort(all, k, sizeof *all, pass ? cmp_excl : cmp_count);
      fprintf(f, "],\n \"%s\": [", pass ? "ops_by_exclusive_time" : "ops_by_count");
      for (size_t i = 0; i < top; i++) {
        fputs(i ? ",\n   {" : "\n   {", f);
        fputs("\"name\": ", f);
        cli_json_strn(f, all[i]->name, all[i]->len);
        fprintf(f,
                ", \"count\": %" PRIu64 ", \"exclusive_us\": %" PRId64
                ", \"inclusive_us\": %" PRId64 "}",
                all[i]->count, all[i]->excl, all[i]->incl);
      }
    }
    fprintf(f, "],\n \"tensors\": {\"values\": %" PRIu64 ", \"top_by_bytes\": [", s->tensor_values);
    for (size_t i = 0; i < s->top_tens.n; i++) {
      const sum_tens *x = &s->top_tens.heap[i];
      fprintf(f,
              "%s{\"bytes\": %" PRIu64 ", \"tensor_id\": %" PRId64 ", \"storage_id\": %" PRId64
              ", \"offset\": %" PRId64 ", \"numel\": %" PRId64 ", \"itemsize\": %" PRId64,
              i ? ",\n   " : "\n   ", x->bytes, x->id, x->storage, x->offset, x->numel,
              x->itemsize);
      json_kv_strn(f, "dtype", x->dtype, x->dtype_len);
      json_kv_strn(f, "device", x->device, x->device_len);
      json_kv_strn(f, "op", x->op, x->op_len);
      fprintf(f, ", \"node\": %" PRId64 "}", x->node);
    }
    fputs("]},\n \"collectives\": [", f);
    for (size_t i = 0; i < s->n_coll; i++) {
      coll *c = &s->coll[i];
      fputs(i ? ",\n   {" : "\n   {", f);
      json_kv_str(f, "pg_name", c->no_pg ? NULL : c->pg, false);
      json_kv_str(f, "collective", c->name, true);
      fprintf(f,
              ", \"count\": %" PRIu64 ", \"in_bytes\": %" PRIu64 ", \"out_bytes\": %" PRIu64
              ", \"bytes_exact\": %s}",
              c->count, c->in_bytes, c->out_bytes, c->size_unknown ? "false" : "true");
    }
    fputs("],\n \"recorder\": ", f);
    if (etr) {
      fputs("{\"version\": ", f);
      if (ver)
        print_json_value(f, ver);
      else
        fputs("null", f);
      fputs(", \"stats\": ", f);
      if (stats)
        print_json_value(f, stats);
      else
        fputs("null", f);
      fputc('}', f);
    } else {
      fputs("null", f);
    }
    fputs("}\n", f);
    free(all);
    return;
  }

  fprintf(f, "%s: schema %s, pid %" PRId64 ", time %s\n", s->file,
          h->schema ? cli_term(h->schema) : "?", h->pid, h->time ? cli_term(h->time) : "?");
  fprintf(f, "nodes %" PRIu64 ": %" PRIu64 " ops, %" PRIu64 " thread nodes, %zu op names%s\n",
          s->nodes, s->ops, s->thread_nodes, k, s->timing ? "" : " (no timing in this trace)");
  fprintf(f, "\nthreads (busy = sum of exclusive time)\n  %8s %12s %14s %14s\n", "tid", "ops",
          "busy_us", "span_us");
  for (size_t i = 0; i < s->n_thr; i++) {
    thr *x = &s->thr[i];
    fprintf(f, "  %8" PRIu64 " %12" PRIu64 " %14" PRId64 " %14" PRId64 "\n", x->tid, x->ops,
            x->busy, x->first_ts <= x->last_end ? sat_sub(x->last_end, x->first_ts) : 0);
  }
  for (int pass = 0; pass < (s->timing ? 2 : 1); pass++) {
    if (k) qsort(all, k, sizeof *all, pass ? cmp_excl : cmp_count);
    fprintf(f, "\nops by %s (top %zu of %zu)\n  %10s %14s %14s  %s\n",
            pass ? "exclusive time" : "count", top, k, "count", "exclusive_us", "inclusive_us",
            "name");
    for (size_t i = 0; i < top; i++)
      fprintf(f, "  %10" PRIu64 " %14" PRId64 " %14" PRId64 "  %s\n", all[i]->count, all[i]->excl,
              all[i]->incl, cli_termn(all[i]->name, all[i]->len));
  }
  fprintf(f, "\ntensors: %" PRIu64 " tensor values; largest (numel x itemsize)\n",
          s->tensor_values);
  if (s->top_tens.n)
    fprintf(f, "  %14s %10s %10s %12s %-12s %-10s %s\n", "bytes", "tensor", "storage", "numel",
            "dtype", "device", "seen in");
  for (size_t i = 0; i < s->top_tens.n; i++) {
    const sum_tens *x = &s->top_tens.heap[i];
    fprintf(f,
            "  %14" PRIu64 " %10" PRId64 " %10" PRId64 " %12" PRId64
            " %-12s %-10s %s (node %" PRId64 ")\n",
            x->bytes, x->id, x->storage, x->numel, cli_termn(x->dtype, x->dtype_len),
            cli_termn(x->device, x->device_len), cli_termn(x->op, x->op_len), x->node);
  }
  fprintf(f, "\ncollectives: %zu kinds\n", s->n_coll);
  if (s->n_coll)
    fprintf(f, "  %-16s %-20s %10s %16s %16s\n", "pg_name", "collective", "count", "in_bytes",
            "out_bytes");
  for (size_t i = 0; i < s->n_coll; i++) {
    coll *c = &s->coll[i];
    fprintf(f, "  %-16s %-20s %10" PRIu64 " %16" PRIu64 " %16" PRIu64 "%s\n",
            c->no_pg   ? "-"
            : c->pg[0] ? cli_term(c->pg)
                       : "\"\"",
            cli_term(c->name), c->count, c->in_bytes, c->out_bytes,
            c->size_unknown ? "  (some sizes unknown)" : "");
  }
  if (etr) {
    fprintf(f, "\nrecorder statistics (etr %s)\n",
            ver && ver->kind == ETR_J_STRING ? ver->v.str.s : "?");
    if (stats && stats->kind == ETR_J_OBJECT)
      for (size_t i = 0; i < stats->v.obj.n; i++) {
        fprintf(f, "  %-24s ", stats->v.obj.items[i].key);
        print_json_value(f, &stats->v.obj.items[i].val);
        fputc('\n', f);
      }
  } else {
    fputs("\nrecorder statistics: none (no \"etr\" footer)\n", f);
  }
  free(all);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: etr summary [--top N] [--json] [-o OUT] FILE\n"
          "       etr summary [--top N] [--json] [-o OUT] [--alpha-us US --beta-gbps GBPS]\n"
          "                   RANK_FILE RANK_FILE...\n"
          "\n"
          "Summarises a trace, streaming: nodes and threads (per tid: ops, busy time = sum of\n"
          "exclusive durations, span); ops by count and by exclusive time; the largest\n"
          "tensors by bytes (numel x itemsize, each tensor once); collectives by process\n"
          "group (pg_name) and kind, one per call whichever records it left\n"
          "(record_param_comms, c10d::X, gloo:X / nccl:X), with the bytes of its input and\n"
          "output messages; the recorder statistics of the \"etr\" footer when present.\n"
          "Times in microseconds.\n"
          "\n"
          "With several files (one trace per rank): per rank the makespan and the time in\n"
          "collectives; collectives matched across ranks by process group and order; the\n"
          "straggler of each (the rank that spent the least time in it: it arrived last);\n"
          "with --beta-gbps, what each would take on that network.\n"
          "\n"
          "  --top N    entries in each top list (default 20)\n"
          "  --json     one JSON object (keys documented in docs/CLI.md)\n"
          "  -o OUT     write to OUT instead of stdout\n"
          "  --alpha-us US, --beta-gbps GBPS\n"
          "             network model of several ranks: a collective takes US + bytes / GBPS\n"
          "             GB/s (10^9 bytes/s); bytes as `etr replay` counts them\n"
          "  FILE       a trace, .json or gzip- or zstd-compressed; '-' reads stdin\n"
          "\n"
          "exit status: 0 ok, 1 unreadable input, 2 usage error.\n");
}

int cmd_summary(int argc, char **argv) {
  srun s;
  memset(&s, 0, sizeof s);
  s.top = 20;
  const char *out = NULL;
  an_ranks_opts ro = {0, 0, 0, false, false};
  static const struct option opts[] = {{"top", required_argument, NULL, 't'},
                                       {"alpha-us", required_argument, NULL, 'a'},
                                       {"beta-gbps", required_argument, NULL, 'b'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"output", required_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int c;
  /* getopt_long moves the files after the options: options may follow the files (`etr
   * summary TRACE -o OUT`); "--" ends the options. */
  while ((c = getopt_long(argc, argv, ":t:jo:h", opts, NULL)) != -1) {
    switch (c) {
      case 't':
        if (!cli_parse_u64(CMD, "--top", optarg, &s.top)) return ETR_CLI_USAGE;
        if (s.top > 100000) return cli_usage(CMD, "--top %" PRIu64 " is too large", s.top);
        break;
      case 'j':
        s.json = true;
        break;
      case 'o':
        out = optarg;
        break;
      case 'a':
      case 'b':
        if (an_ranks_net_option(CMD, c, optarg, &ro)) return ETR_CLI_USAGE;
        break;
      case 'h':
        usage(stdout);
        return ETR_CLI_OK;
      default:
        return cli_getopt_error(CMD, c, argv);
    }
  }
  char **files = argv + optind;
  int nfiles = argc - optind;
  if (nfiles == 0) return cli_usage(CMD, "no input file");
  if (an_ranks_net_check(CMD, &ro)) return ETR_CLI_USAGE;
  if (cli_stdin_once(CMD, (const char *const *)files, (size_t)nfiles) != ETR_CLI_OK)
    return ETR_CLI_USAGE;
  if (nfiles > 1) {
    ro.limit = (size_t)s.top;
    ro.json = s.json;
    return an_ranks_summary(CMD, files, nfiles, &ro, out);
  }
  if (ro.beta_GBps > 0) return cli_usage(CMD, "--alpha-us/--beta-gbps need several rank traces");
  const char *path = files[0];
  s.file = strcmp(path, "-") ? path : "<stdin>";
  if (!sum_top_init(&s.top_tens, (size_t)s.top)) {
    cli_error(CMD, "out of memory");
    return ETR_CLI_FAIL;
  }
  int ret = ETR_CLI_FAIL;
  cli_input in;
  static const char *const footer[] = {"etr", NULL}; /* (the tables are not summed up) */
  rd_options rdo = ETR_READER_OPTIONS_INIT;
  rdo.trailer_keys = footer;
  if (cli_open(&in, CMD, path, &rdo)) goto done;
  if (cli_check_schema(CMD, path, rd_header(in.r)) != ETR_CLI_OK) goto done;
  const rd_rnode *n;
  int rc;
  while ((rc = cli_next(&in, &n)) == 1) on_node(&s, n);
  if (rc == 0) rc = cli_finish(&in);
  if (rc < 0) goto done;
  if (!s.oom) collectives(&s);
  if (s.oom) {
    cli_error(CMD, "out of memory");
    goto done;
  }
  FILE *f = cli_open_output(CMD, out);
  if (!f) goto done;
  report(&s, f, rd_header(in.r), rd_finish_ts(in.r), rd_trailer(in.r, "etr"));
  ret = cli_close_output(CMD, f, out);
  if (s.oom) {
    cli_error(CMD, "out of memory");
    ret = ETR_CLI_FAIL;
  }
done:
  cli_close(&in);
  for (size_t i = 0; i < s.ops_by_name.cap; i++) free(s.ops_by_name.slots[i].name);
  free(s.ops_by_name.slots);
  free(s.thr);
  an_u64map_free(&s.thr_index);
  free(s.coll);
  an_strtab_free(&s.coll_keys);
  an_colls_free(&s.colls);
  sum_top_free(&s.top_tens);
  return ret;
}
