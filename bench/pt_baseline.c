/* bench/pt_baseline.c — PyTorch-style execution-trace observer (see pt_baseline.h). */
#define _GNU_SOURCE

#include "pt_baseline.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PT_MAX_THREADS 1024
#define PT_MAX_DEPTH 64
#define PT_FIELD 1024 /* bytes per formatted list (values, shapes, types, strides) */

/* A growable-free string builder over a fixed buffer: appends are cut when full. */
typedef struct sbuf {
  char *p;
  size_t len, cap;
} sbuf;

static void sb_init(sbuf *s, char *buf, size_t cap) {
  s->p = buf;
  s->len = 0;
  s->cap = cap;
  buf[0] = '\0';
}
static void sb_putn(sbuf *s, const char *str, size_t n) {
  if (s->len + n + 1 > s->cap) n = s->cap - s->len - 1;
  memcpy(s->p + s->len, str, n);
  s->len += n;
  s->p[s->len] = '\0';
}
static void sb_puts(sbuf *s, const char *str) { sb_putn(s, str, strlen(str)); }
static void sb_putc(sbuf *s, char c) { sb_putn(s, &c, 1); }
/* Integer formatting in the style of fmt::format (no printf on this path). */
static void sb_u64(sbuf *s, uint64_t v) {
  char tmp[24];
  char *e = tmp + sizeof tmp, *q = e;
  do {
    *--q = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  sb_putn(s, q, (size_t)(e - q));
}
static void sb_i64(sbuf *s, int64_t v) {
  if (v < 0) {
    sb_putc(s, '-');
    sb_u64(s, (uint64_t)0 - (uint64_t)v);
  } else {
    sb_u64(s, (uint64_t)v);
  }
}
/* PyTorch's json_str_escape: quote, backslash and control characters. */
static void sb_escaped(sbuf *s, const char *str) {
  for (const unsigned char *c = (const unsigned char *)str; *c; c++) {
    switch (*c) {
      case '"':
        sb_puts(s, "\\\"");
        break;
      case '\\':
        sb_puts(s, "\\\\");
        break;
      case '\b':
        sb_puts(s, "\\b");
        break;
      case '\f':
        sb_puts(s, "\\f");
        break;
      case '\n':
        sb_puts(s, "\\n");
        break;
      case '\r':
        sb_puts(s, "\\r");
        break;
      case '\t':
        sb_puts(s, "\\t");
        break;
      default:
        if (*c < 0x20) {
          char u[8];
          snprintf(u, sizeof u, "\\u%04x", *c);
          sb_puts(s, u);
        } else {
          sb_putc(s, (char)*c);
        }
    }
  }
}

/* The four lists of one side (inputs or outputs) of a node. */
typedef struct pt_lists {
  char values[PT_FIELD], shapes[PT_FIELD], types[PT_FIELD], strides[PT_FIELD];
} pt_lists;

typedef struct pt_frame {
  uint64_t id, parent, fw_parent;
  uint64_t t0_ns, child_ns;
  pt_lists in;
} pt_frame;

typedef struct pt_thread {
  uint64_t tid;   /* etr_thread_id() */
  uint32_t sp;    /* entries on stack_ids (guarded by the mutex) */
  uint32_t depth; /* ops entered on this thread (owner thread only) */
  uint64_t stack_ids[PT_MAX_DEPTH + 1];
  pt_frame frames[PT_MAX_DEPTH]; /* owner thread only */
} pt_thread;

typedef struct pt_slot {
  const void *key;
  uint64_t id;
} pt_slot;

struct pt_baseline {
  pthread_mutex_t mu; /* recursive, like PyTorch's gMutex */
  FILE *out;
  uint64_t gen;
  uint64_t next_id; /* 1 = process node */
  uint64_t nodes;
  pt_slot *map;
  size_t map_cap, map_count;
  pt_thread *threads[PT_MAX_THREADS];
  size_t n_threads;
  etr_observer_id obs;
};

static atomic_uint_fast64_t pt_generation = 1;
static _Thread_local pt_thread *tl_thread;
static _Thread_local uint64_t tl_gen;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char NODE_FMT[] =
    "\n    {\n"
    "      \"id\": %" PRIu64 ", \"name\": \"%s\", \"ctrl_deps\": %" PRIu64
    ",\n"
    "      \"inputs\": {\"values\": %s, \"shapes\": %s, \"types\": %s, \"strides\": %s},\n"
    "      \"outputs\": {\"values\": %s, \"shapes\": %s, \"types\": %s, \"strides\": %s},\n"
    "%s"
    "      \"attrs\": [{\"name\": \"rf_id\", \"type\": \"uint64\", \"value\": %" PRIu64
    "},"
    "{\"name\": \"fw_parent\", \"type\": \"uint64\", \"value\": %" PRIu64
    "},"
    "{\"name\": \"seq_id\", \"type\": \"int64\", \"value\": %" PRId64
    "},"
    "{\"name\": \"scope\", \"type\": \"uint64\", \"value\": %" PRIu64
    "},"
    "{\"name\": \"tid\", \"type\": \"uint64\", \"value\": %" PRIu64
    "},"
    "{\"name\": \"fw_tid\", \"type\": \"uint64\", \"value\": %" PRIu64
    "},"
    "{\"name\": \"op_schema\", \"type\": \"string\", \"value\": \"%s\"},"
    "{\"name\": \"kernel_backend\", \"type\": \"string\", \"value\": \"%s\"},"
    "{\"name\": \"kernel_file\", \"type\": \"string\", \"value\": \"%s\"}]\n"
    "    }";

/* Caller holds the mutex. */
static void write_empty_node(pt_baseline *b, const char *name, uint64_t id, uint64_t tid) {
  fprintf(b->out, NODE_FMT, id, name, (uint64_t)1, "[]", "[]", "[]", "[]", "[]", "[]", "[]", "[]",
          "", (uint64_t)0, (uint64_t)0, (int64_t)-1, (uint64_t)ETR_SCOPE_USER_SCOPE, tid,
          (uint64_t)0, "", "", "");
  b->nodes++;
}

/* getObjectID: one lock per lookup, as PyTorch does. */
static uint64_t object_id(pt_baseline *b, const void *key) {
  pthread_mutex_lock(&b->mu);
  if (b->map_count * 2 >= b->map_cap) {
    size_t cap = b->map_cap ? b->map_cap * 2 : 1024;
    pt_slot *m = calloc(cap, sizeof *m);
    if (m != NULL) {
      for (size_t i = 0; i < b->map_cap; i++) {
        if (b->map[i].key == NULL) continue;
        size_t h = (size_t)(((uintptr_t)b->map[i].key >> 4) * 0x9E3779B97F4A7C15ull);
        for (h &= cap - 1; m[h].key != NULL; h = (h + 1) & (cap - 1)) {
        }
        m[h] = b->map[i];
      }
      free(b->map);
      b->map = m;
      b->map_cap = cap;
    }
  }
  uint64_t id = 0;
  if (b->map_cap != 0) {
    size_t mask = b->map_cap - 1;
    size_t h = (size_t)(((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull) & mask;
    while (b->map[h].key != NULL && b->map[h].key != key) h = (h + 1) & mask;
    if (b->map[h].key == key) {
      id = b->map[h].id;
    } else {
      id = b->next_id++;
      b->map[h].key = key;
      b->map[h].id = id;
      b->map_count++;
    }
  }
  pthread_mutex_unlock(&b->mu);
  return id;
}

static void append_value(pt_baseline *b, const etr_value *v, sbuf *val, sbuf *shp, sbuf *typ,
                         sbuf *str) {
  switch (v->kind) {
    case ETR_VALUE_TENSOR: {
      const etr_tensor *t = v->u.tensor;
      uint64_t tid = object_id(b, t->impl);
      uint64_t sid = t->storage != NULL ? object_id(b, t->storage) : 0;
      if (t->dtype != NULL) {
        sb_putc(shp, '[');
        sb_putc(str, '[');
        for (int32_t d = 0; d < t->ndim; d++) {
          if (d) {
            sb_putc(shp, ',');
            sb_putc(str, ',');
          }
          sb_i64(shp, t->sizes[d]);
          sb_i64(str, t->strides != NULL ? t->strides[d] : 0);
        }
        sb_putc(shp, ']');
        sb_putc(str, ']');
        sb_puts(typ, "\"Tensor(");
        sb_puts(typ, t->dtype);
        sb_puts(typ, ")\"");
      } else {
        sb_puts(shp, "[]");
        sb_puts(str, "[]");
        sb_puts(typ, "\"Tensor(nullptr (uninitialized))\"");
      }
      sb_putc(val, '[');
      sb_u64(val, tid);
      sb_putc(val, ',');
      sb_u64(val, sid);
      sb_putc(val, ',');
      sb_i64(val, t->storage_offset);
      sb_putc(val, ',');
      sb_i64(val, t->numel);
      sb_putc(val, ',');
      sb_i64(val, t->itemsize);
      sb_puts(val, ",\"");
      sb_puts(val, t->device != NULL ? t->device : "");
      sb_puts(val, "\"]");
      return;
    }
    case ETR_VALUE_INT:
      sb_i64(val, v->u.i);
      sb_puts(typ, "\"Int\"");
      break;
    case ETR_VALUE_DOUBLE: {
      char d[64];
      if (isnan(v->u.d) || isinf(v->u.d))
        snprintf(d, sizeof d, "\"%f\"", v->u.d);
      else
        snprintf(d, sizeof d, "%f", v->u.d);
      sb_puts(val, d);
      sb_puts(typ, "\"Double\"");
      break;
    }
    case ETR_VALUE_BOOL:
      sb_puts(val, v->u.b ? "true" : "false");
      sb_puts(typ, "\"Bool\"");
      break;
    case ETR_VALUE_STRING:
      sb_putc(val, '"');
      sb_escaped(val, v->u.str);
      sb_putc(val, '"');
      sb_puts(typ, "\"String\"");
      break;
    default:
      sb_puts(val, "\"<Object>\"");
      sb_puts(typ, "\"Object\"");
      break;
  }
  sb_puts(shp, "[]");
  sb_puts(str, "[]");
}

/* vectorToString over n values: "[a,b]" for each of the four lists. */
static void format_values(pt_baseline *b, const etr_value *vs, uint32_t n, pt_lists *l) {
  sbuf val, shp, typ, str;
  sb_init(&val, l->values, sizeof l->values);
  sb_init(&shp, l->shapes, sizeof l->shapes);
  sb_init(&typ, l->types, sizeof l->types);
  sb_init(&str, l->strides, sizeof l->strides);
  sb_putc(&val, '[');
  sb_putc(&shp, '[');
  sb_putc(&typ, '[');
  sb_putc(&str, '[');
  for (uint32_t i = 0; i < n; i++) {
    if (i) {
      sb_putc(&val, ',');
      sb_putc(&shp, ',');
      sb_putc(&typ, ',');
      sb_putc(&str, ',');
    }
    append_value(b, &vs[i], &val, &shp, &typ, &str);
  }
  sb_putc(&val, ']');
  sb_putc(&shp, ']');
  sb_putc(&typ, ']');
  sb_putc(&str, ']');
}

static pt_thread *self_thread(pt_baseline *b) {
  if (tl_thread != NULL && tl_gen == b->gen) return tl_thread;
  pt_thread *t = calloc(1, sizeof *t);
  if (t == NULL) return NULL;
  t->tid = etr_thread_id();
  pthread_mutex_lock(&b->mu);
  if (b->n_threads < PT_MAX_THREADS) {
    b->threads[b->n_threads++] = t;
  } else {
    free(t);
    t = NULL;
  }
  pthread_mutex_unlock(&b->mu);
  tl_thread = t;
  tl_gen = b->gen;
  return t;
}

static void pt_on_enter(const etr_record *rec, void *user) {
  pt_baseline *b = user;
  pt_thread *t = self_thread(b);
  if (t == NULL) return;
  uint32_t depth = t->depth++;
  if (depth >= PT_MAX_DEPTH) return;
  pt_frame *f = &t->frames[depth];

  pthread_mutex_lock(&b->mu);
  if (t->sp == 0) { /* first op on this thread: push and write its thread node */
    uint64_t tn = b->next_id++;
    t->stack_ids[t->sp++] = tn;
    write_empty_node(b, "[pytorch|profiler|execution_trace|thread]", tn, t->tid);
    fputc(',', b->out);
  }
  pthread_mutex_unlock(&b->mu);

  format_values(b, rec->inputs, rec->n_inputs, &f->in);

  pthread_mutex_lock(&b->mu);
  f->parent = t->stack_ids[t->sp - 1];
  f->fw_parent = 0;
  if (rec->fw_tid != 0) {
    for (size_t i = 0; i < b->n_threads; i++) {
      pt_thread *o = b->threads[i];
      if (o->tid == rec->fw_tid && o->sp != 0) f->fw_parent = o->stack_ids[o->sp - 1];
    }
  }
  f->id = b->next_id++;
  t->stack_ids[t->sp++] = f->id;
  pthread_mutex_unlock(&b->mu);
  f->child_ns = 0;
  f->t0_ns = now_ns();
}

static void pt_on_exit(const etr_record *rec, void *user) {
  uint64_t t1 = now_ns();
  pt_baseline *b = user;
  pt_thread *t = self_thread(b);
  if (t == NULL || t->depth == 0) return;
  uint32_t depth = --t->depth;
  if (depth >= PT_MAX_DEPTH) return;
  pt_frame *f = &t->frames[depth];
  uint64_t dur = t1 - f->t0_ns;
  if (depth > 0) t->frames[depth - 1].child_ns += dur;

  pt_lists out;
  format_values(b, rec->outputs, rec->n_outputs, &out);
  char schema[1024];
  sbuf sch;
  sb_init(&sch, schema, sizeof schema);
  if (rec->schema != NULL) sb_escaped(&sch, rec->schema);
  char timing[160];
  snprintf(timing, sizeof timing,
           "      \"ts\": %" PRIu64 ", \"inclusive_dur\": %" PRIu64 ", \"exclusive_dur\": %" PRIu64
           ",\n",
           f->t0_ns / 1000, dur / 1000, (dur - (f->child_ns < dur ? f->child_ns : dur)) / 1000);
  const char *backend = rec->kernel != NULL && rec->kernel->backend ? rec->kernel->backend : "";
  const char *kfile = rec->kernel != NULL && rec->kernel->file ? rec->kernel->file : "";

  pthread_mutex_lock(&b->mu);
  if (t->sp > 1) t->sp--;
  fprintf(b->out, NODE_FMT, f->id, rec->name != NULL ? rec->name : "", f->parent, f->in.values,
          f->in.shapes, f->in.types, f->in.strides, out.values, out.shapes, out.types, out.strides,
          timing, etr_record_handle(rec), f->fw_parent, rec->seq_nr, (uint64_t)rec->scope, t->tid,
          rec->fw_tid, schema, backend, kfile);
  fputc(',', b->out);
  b->nodes++;
  pthread_mutex_unlock(&b->mu);
}

int pt_baseline_open(const char *path, pt_baseline **out) {
  *out = NULL;
  pt_baseline *b = calloc(1, sizeof *b);
  if (b == NULL) return ETR_ENOMEM;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&b->mu, &a);
  pthread_mutexattr_destroy(&a);
  b->gen = atomic_fetch_add(&pt_generation, 1);
  b->next_id = 2;
  b->out = fopen(path, "w");
  if (b->out == NULL) {
    pthread_mutex_destroy(&b->mu);
    free(b);
    return ETR_EOPEN;
  }
  /* A 64 KiB stdio buffer (PyTorch's std::ofstream has 8 KiB): fewer write calls, so the
   * comparison is about locking and formatting on the recording thread, not syscalls. */
  setvbuf(b->out, NULL, _IOFBF, 64 * 1024);
  time_t now = time(NULL);
  struct tm tm;
  char when[32];
  localtime_r(&now, &tm);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  fprintf(b->out,
          "{\n  \"schema\": \"1.1.1-chakra.0.0.4\", \"pid\": %d, \"time\": \"%s\", "
          "\"start_ts\": %" PRIu64 ",\n  \"nodes\": [",
          (int)getpid(), when, now_ns() / 1000000);

  etr_observer_options opt = ETR_OBSERVER_OPTIONS_INIT;
  opt.enter = pt_on_enter;
  opt.exit = pt_on_exit;
  opt.user = b;
  opt.needs = ETR_NEEDS_INPUTS | ETR_NEEDS_OUTPUTS | ETR_NEEDS_IDS;
  int rc = etr_observer_add(&opt, &b->obs);
  if (rc != 0) {
    fclose(b->out);
    pthread_mutex_destroy(&b->mu);
    free(b);
    return rc;
  }
  *out = b;
  return 0;
}

int pt_baseline_close(pt_baseline *b, uint64_t *nodes_out) {
  if (b == NULL) return 0;
  int rc = etr_observer_remove(b->obs);
  pthread_mutex_lock(&b->mu);
  write_empty_node(b, "[pytorch|profiler|execution_trace|process]", 1, 0);
  fprintf(b->out, "\n  ],\n  \"finish_ts\": %" PRIu64 "\n}", now_ns() / 1000000);
  pthread_mutex_unlock(&b->mu);
  if (fclose(b->out) != 0 && rc == 0) rc = ETR_EIO;
  if (nodes_out != NULL) *nodes_out = b->nodes;
  for (size_t i = 0; i < b->n_threads; i++) free(b->threads[i]);
  free(b->map);
  pthread_mutex_destroy(&b->mu);
  free(b);
  return rc;
}
