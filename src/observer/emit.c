/* The writer thread's side: events to JSON nodes (docs/FORMAT.md), but for the inputs and outputs
 * objects (emit_values.c). Only this thread touches tr->jw. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "etr/version.h"
#include "observer/internal.h"
#include "observer/openrefs.h"
#include "observer/tbtable.h"
#include "observer/trace_internal.h"

#define PROCESS_NAME "[pytorch|profiler|execution_trace|process]"
#define THREAD_NAME "[pytorch|profiler|execution_trace|thread]"

static const char *schema_name(etr_schema s) {
  return s == ETR_SCHEMA_1_1_0 ? "1.1.0-chakra.0.0.4" : "1.1.1-chakra.0.0.4";
}

/* ---- attrs ---- */

/* Integer attrs must fit in int64 (docs/FORMAT.md): runtime-given values beyond are clamped. */
static inline uint64_t fit_i64(uint64_t v) {
  return v > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : v;
}

static void attr_u64(etr__jw *w, const char *name, uint64_t v) {
  ETR__JW_LIT(w, "{\"name\": \"");
  etr__jw_raw(w, name, strlen(name));
  ETR__JW_LIT(w, "\", \"type\": \"uint64\", \"value\": ");
  etr__jw_u64(w, fit_i64(v));
  etr__jw_char(w, '}');
}

static void attr_str(etr__jw *w, const char *name, const char *s, size_t n) {
  ETR__JW_LIT(w, "{\"name\": \"");
  etr__jw_raw(w, name, strlen(name));
  ETR__JW_LIT(w, "\", \"type\": \"string\", \"value\": ");
  etr__jw_str(w, s, n);
  etr__jw_char(w, '}');
}

static const uint8_t *coll_str(const uint8_t *p, const char **s, uint32_t *n) {
  *n = etr__rd32(p);
  *s = (const char *)p + 4;
  return p + 4 + *n;
}

static void split_sizes(etr__jw *w, const char *name, const uint8_t *p, uint32_t n) {
  ETR__JW_LIT(w, ",{\"name\": \"");
  etr__jw_raw(w, name, strlen(name));
  ETR__JW_LIT(w, "\", \"type\": \"string\", \"value\": \"[");
  for (uint32_t i = 0; i < n; i++) {
    if (i) ETR__JW_LIT(w, ", ");
    etr__jw_i64(w, (int64_t)etr__rd64(p + (size_t)i * 8));
  }
  ETR__JW_LIT(w, "]\"}");
}

static void collective_attrs(etr__jw *w, const uint8_t *p) {
  const char *s;
  uint32_t n;
  p = coll_str(p, &s, &n);
  etr__jw_char(w, ',');
  attr_str(w, "collective_name", s, n);
  p = coll_str(p, &s, &n);
  etr__jw_char(w, ',');
  attr_str(w, "dtype", s, n);
  etr__jw_char(w, ',');
  attr_u64(w, "in_msg_nelems", etr__rd64(p));
  etr__jw_char(w, ',');
  attr_u64(w, "out_msg_nelems", etr__rd64(p + 8));
  p += 16;
  uint32_t ni = etr__rd32(p);
  split_sizes(w, "in_split_size", p + 4, ni);
  p += 4 + (size_t)ni * 8;
  uint32_t no = etr__rd32(p);
  split_sizes(w, "out_split_size", p + 4, no);
  p += 4 + (size_t)no * 8;
  int64_t rank_start = (int64_t)etr__rd64(p), rank_stride = (int64_t)etr__rd64(p + 8);
  p += 16;
  if (rank_start >= 0) {
    etr__jw_char(w, ',');
    attr_u64(w, "global_rank_start", (uint64_t)rank_start);
  }
  if (rank_stride > 0) {
    etr__jw_char(w, ',');
    attr_u64(w, "global_rank_stride", (uint64_t)rank_stride);
  }
  p = coll_str(p, &s, &n);
  etr__jw_char(w, ',');
  attr_str(w, "pg_name", s, n);
  p = coll_str(p, &s, &n);
  etr__jw_char(w, ',');
  attr_str(w, "pg_desc", s, n);
  etr__jw_char(w, ',');
  attr_u64(w, "pg_size", etr__rd64(p));
  etr__jw_char(w, ',');
  attr_u64(w, "is_asynchronized_op", p[8] ? 1 : 0);
}

/* The seven base attrs plus kernel_backend and kernel_file (docs/FORMAT.md). */
static void base_attrs(etr__jw *w, uint64_t rf_id, uint64_t fw_parent, int64_t seq, uint64_t scope,
                       uint64_t tid, uint64_t fw_tid, const char *schema, size_t schema_n,
                       bool schema_plain, const char *kback, size_t kback_n, const char *kfile,
                       size_t kfile_n) {
  char *o = etr__jw_begin(w, 600 + ETR__ESCAPED_MAX(schema_n + kback_n + kfile_n));
  if (!o) return;
  o = ETR__PUT_LIT(o, "\"attrs\": [{\"name\": \"rf_id\", \"type\": \"uint64\", \"value\": ");
  o = etr__put_u64(o, rf_id);
  o = ETR__PUT_LIT(o, "},{\"name\": \"fw_parent\", \"type\": \"uint64\", \"value\": ");
  o = etr__put_u64(o, fw_parent);
  o = ETR__PUT_LIT(o, "},{\"name\": \"seq_id\", \"type\": \"int64\", \"value\": ");
  o = etr__put_i64(o, seq);
  o = ETR__PUT_LIT(o, "},{\"name\": \"scope\", \"type\": \"uint64\", \"value\": ");
  o = etr__put_u64(o, scope);
  o = ETR__PUT_LIT(o, "},{\"name\": \"tid\", \"type\": \"uint64\", \"value\": ");
  o = etr__put_u64(o, tid);
  o = ETR__PUT_LIT(o, "},{\"name\": \"fw_tid\", \"type\": \"uint64\", \"value\": ");
  o = etr__put_u64(o, fit_i64(fw_tid));
  o = ETR__PUT_LIT(o, "},{\"name\": \"op_schema\", \"type\": \"string\", \"value\": ");
  o = etr__put_str_known(o, schema, schema_n, schema_plain, &w->replaced);
  o = ETR__PUT_LIT(o, "},{\"name\": \"kernel_backend\", \"type\": \"string\", \"value\": ");
  o = etr__put_str(o, kback, kback_n, &w->replaced);
  o = ETR__PUT_LIT(o, "},{\"name\": \"kernel_file\", \"type\": \"string\", \"value\": ");
  o = etr__put_str(o, kfile, kfile_n, &w->replaced);
  *o++ = '}';
  etr__jw_end(w, o);
}

/* The "traceback" attr: the index of the op's frame sequence in the tracebacks table. */
static void traceback_attr(etr_trace *tr, const etr__ev *ev, const uint64_t *words) {
  if (!tr->tbtab && !(tr->tbtab = etr__tbtab_new(tr->tb_symbolize))) return;
  uint64_t idx = etr__tbtab_intern(tr->tbtab, ev->tb_gen, words, ev->tb_n);
  if (idx == UINT64_MAX) return;
  atomic_store_explicit(&tr->tb_unique, etr__tbtab_tracebacks(tr->tbtab), memory_order_relaxed);
  etr__jw_char(&tr->jw, ',');
  attr_u64(&tr->jw, "traceback", idx);
}

static void node_start(etr_trace *tr, uint64_t id, const char *name, size_t name_n, bool plain,
                       uint64_t parent) {
  etr__jw *w = &tr->jw;
  char *o = etr__jw_begin(w, 64 + 2 * ETR__U64_MAX_LEN + ETR__ESCAPED_MAX(name_n));
  if (!o) return;
  if (tr->any_node) *o++ = ',';
  tr->any_node = true;
  o = ETR__PUT_LIT(o, "\n    {\"id\": ");
  o = etr__put_u64(o, id);
  o = ETR__PUT_LIT(o, ", \"name\": ");
  o = etr__put_str_known(o, name, name_n, plain, &w->replaced);
  o = ETR__PUT_LIT(o, ", \"ctrl_deps\": ");
  o = etr__put_u64(o, parent);
  o = ETR__PUT_LIT(o, ", ");
  etr__jw_end(w, o);
}

static void empty_io(etr_trace *tr) {
  etr__jw *w = &tr->jw;
  if (tr->opt.schema == ETR_SCHEMA_1_1_0)
    ETR__JW_LIT(w,
                "\"inputs\": {\"values\": [], \"shapes\": [], \"types\": []}, "
                "\"outputs\": {\"values\": [], \"shapes\": [], \"types\": []}, ");
  else
    ETR__JW_LIT(w,
                "\"inputs\": {\"values\": [], \"shapes\": [], \"types\": [], \"strides\": []}, "
                "\"outputs\": {\"values\": [], \"shapes\": [], \"types\": [], \"strides\": []}, ");
}

static void structural_node(etr_trace *tr, uint64_t id, const char *name, uint64_t tid) {
  etr__jw *w = &tr->jw;
  node_start(tr, id, name, strlen(name), true, 1);
  empty_io(tr);
  base_attrs(w, 0, 0, -1, 7, tid, 0, "", 0, true, "", 0, "", 0);
  ETR__JW_LIT(w, "]}");
}

/* A thread node: the structural attrs, then the kernel's thread id and the thread's name
 * (attrs of etr's; Chrome export and viewers name threads with them). */
static void thread_node(etr_trace *tr, const etr__ev *ev) {
  etr__jw *w = &tr->jw;
  node_start(tr, ev->id, THREAD_NAME, strlen(THREAD_NAME), true, 1);
  empty_io(tr);
  base_attrs(w, 0, 0, -1, 7, ev->tid, 0, "", 0, true, "", 0, "", 0);
  ETR__JW_LIT(w, ",");
  attr_u64(w, "os_tid", ev->rf_id);
  if (ev->name_len) {
    char *o = etr__jw_begin(w, 64 + ETR__ESCAPED_MAX(ev->name_len));
    if (o) {
      o = ETR__PUT_LIT(o, ",{\"name\": \"thread_name\", \"type\": \"string\", \"value\": ");
      o = etr__put_str(o, (const char *)(ev + 1), ev->name_len, &w->replaced);
      *o++ = '}';
      etr__jw_end(w, o);
    }
  }
  ETR__JW_LIT(w, "]}");
}

/* ---- process-group nodes held back ----
 * PARAM's comm replay reads the first `## process_group:init ##` node of a trace and no
 * other; a runtime traced from the start (ETR_TRACE) records one when the trace opens and
 * again at each group it declares, so the first lists group "0" alone. Until the trace's
 * first collective such nodes are kept here and then written right before it, newest (every
 * group declared so far) first; a trace without a collective gets them before its footer.
 * At most PG_HOLD_MAX are held: a runtime that declares groups again and again and never
 * runs a collective would otherwise grow the writer's memory without bound. The one past
 * the cap releases them as a collective would (newest first), and later nodes pass as they
 * come; the first in the file then lists every group declared up to the cap. */
enum { PG_HOLD_MAX = 64 };

/* dist.c's node: that name, one string input, no output (no tensor to resolve later). */
bool etr__ev_is_pg_init(const etr__ev *ev) {
  if (ev->type != ETR__EV_OP || ev->name_len != sizeof ETR__PG_INIT_NAME - 1) return false;
  const char *name = (const char *)((const uint64_t *)(const void *)(ev + 1) + ev->tb_n);
  const uint8_t *in = (const uint8_t *)name + ev->name_len + ev->schema_len + ev->kback_len +
                      ev->kfile_len + ev->coll_len;
  return memcmp(name, ETR__PG_INIT_NAME, sizeof ETR__PG_INIT_NAME - 1) == 0 && ev->n_in == 1 &&
         ev->n_out == 0 && ev->in_len >= 1 && in[0] == ETR__V_STRING;
}

/* Keep a copy of ev; false when memory is exhausted (it is written now instead). */
static bool hold(etr_trace *tr, const etr__ev *ev) {
  if (tr->pg_n == tr->pg_cap) {
    uint32_t cap = tr->pg_cap ? tr->pg_cap * 2 : 4;
    etr__ev **h = realloc(tr->pg_held, cap * sizeof *h);
    if (!h) return false;
    tr->pg_held = h;
    tr->pg_cap = cap;
  }
  etr__ev *copy = malloc(ev->size);
  if (!copy) return false;
  memcpy(copy, ev, ev->size);
  tr->pg_held[tr->pg_n++] = copy;
  return true;
}

static void emit_node(etr_trace *tr, const etr__ev *ev, etr__cev_dec *dec);

uint32_t etr__emit_held(etr_trace *tr) {
  uint32_t n = tr->pg_n;
  tr->pg_released = true;
  for (uint32_t i = n; i-- > 0;) {
    emit_node(tr, tr->pg_held[i], NULL);
    free(tr->pg_held[i]);
  }
  tr->pg_n = 0;
  return n;
}

void etr__emit_hold_reset(etr_trace *tr) {
  for (uint32_t i = 0; i < tr->pg_n; i++) free(tr->pg_held[i]);
  tr->pg_n = 0;
  tr->pg_released = false;
}

uint32_t etr__emit_event(etr_trace *tr, const etr__ev *ev, etr__cev_dec *dec) {
  uint32_t held = 0;
  if (ETR__UNLIKELY(!tr->pg_released) && ev->type == ETR__EV_OP) {
    if (ev->flags & ETR__EVF_COLLECTIVE) {
      held = etr__emit_held(tr);
    } else if (etr__ev_is_pg_init(ev)) {
      if (tr->pg_n < PG_HOLD_MAX && hold(tr, ev)) return 0;
      held = etr__emit_held(tr);
    }
  }
  emit_node(tr, ev, dec);
  return held + 1;
}

/* The live JSON writer notes what it writes, for the seal's placeholders (openrefs.h). */
static void note_written(etr_trace *tr, const etr__ev *ev, const etr__cev_dec *dec) {
  if (tr->ring || tr->binary || !dec) return; /* (no decoder: a placeholder) */
  if (!tr->open_refs && !(tr->open_refs = calloc(1, sizeof *tr->open_refs))) {
    tr->open_refs_lost = true;
    return;
  }
  etr__openrefs_note(tr->open_refs, ev, etr__cev_dec_thread_node(dec));
}

static void put_placeholder(void *ctx, const etr__ev *ev) {
  emit_node(ctx, ev, NULL); /* (not noted: cut off again if the process goes on) */
}

uint64_t etr__emit_open_placeholders(etr_trace *tr, const char *name) {
  etr__openrefs *o = tr->open_refs;
  uint64_t made = 0;
  if (tr->open_refs_lost || (o && o->failed)) return UINT64_MAX;
  if (!o) return 0;
  o->paused = true;
  bool ok = etr__put_placeholders(&o->open, NULL, name, put_placeholder, tr, &made);
  o->paused = false;
  return ok ? made : UINT64_MAX;
}

static void emit_node(etr_trace *tr, const etr__ev *ev, etr__cev_dec *dec) {
  etr__jw *w = &tr->jw;
  if (ev->type == ETR__EV_THREAD) {
    thread_node(tr, ev);
    return;
  }
  const uint64_t *tb = (const uint64_t *)(const void *)(ev + 1);
  const char *name = (const char *)(tb + ev->tb_n);
  const char *schema = name + ev->name_len;
  const char *kback = schema + ev->schema_len;
  const char *kfile = kback + ev->kback_len;
  const uint8_t *coll = (const uint8_t *)kfile + ev->kfile_len;
  const uint8_t *in = coll + ev->coll_len;
  const uint8_t *out = in + ev->in_len;

  node_start(tr, ev->id, name, ev->name_len, ev->plain & ETR__EVP_NAME, ev->parent);
  ETR__JW_LIT(w, "\"inputs\": ");
  etr__emit_values(tr, in, ev->n_in, ev->in_len, dec);
  ETR__JW_LIT(w, ", \"outputs\": ");
  etr__emit_values(tr, out, ev->n_out, ev->out_len, dec);
  ETR__JW_LIT(w, ", ");
  if (ev->flags & ETR__EVF_TIMING) {
    char *o = etr__jw_begin(w, 64 + 3 * ETR__I64_MAX_LEN);
    if (o) {
      /* Start and end are each rounded down to the µs, and the duration is their
       * difference: a child's [ts, ts + inclusive_dur] then always lies inside its
       * parent's (rounding the duration by itself lost up to 1 µs at the end). */
      int64_t ts_us = ev->ts_ns / 1000, end_us = (ev->ts_ns + ev->incl_ns) / 1000;
      int64_t incl_us = end_us - ts_us, excl_us = ev->excl_us; /* (finish_frame) */
      o = ETR__PUT_LIT(o, "\"ts\": ");
      o = etr__put_i64(o, ts_us);
      o = ETR__PUT_LIT(o, ", \"inclusive_dur\": ");
      o = etr__put_i64(o, incl_us);
      o = ETR__PUT_LIT(o, ", \"exclusive_dur\": ");
      o = etr__put_i64(o, excl_us);
      o = ETR__PUT_LIT(o, ", ");
      etr__jw_end(w, o);
    }
  }
  /* A triton kernel as PyTorch writes it: the kernel file's base name (the generated file
   * lives in a per-user cache directory; consumers look it up by name), then `tensor_range`
   * (PyTorch's ranges of the kernel's tensor arguments; etr has none to give: ""). */
  bool triton = ev->kback_len == 6 && memcmp(kback, "triton", 6) == 0;
  size_t kfile_len = ev->kfile_len;
  if (triton) {
    const char *slash = memrchr(kfile, '/', kfile_len);
    if (slash) {
      kfile_len -= (size_t)(slash + 1 - kfile);
      kfile = slash + 1;
    }
  }
  base_attrs(w, ev->rf_id, ev->fw_parent, ev->seq, ev->scope, ev->tid, ev->fw_tid, schema,
             ev->schema_len, ev->plain & ETR__EVP_SCHEMA, kback, ev->kback_len, kfile, kfile_len);
  if (triton)
    ETR__JW_LIT(w, ",{\"name\": \"tensor_range\", \"type\": \"string\", \"value\": \"\"}");
  if (ev->flags & ETR__EVF_COLLECTIVE) collective_attrs(w, coll);
  if (ev->flags & ETR__EVF_KERNEL) {
    if (ev->kgrid[0] || ev->kgrid[1] || ev->kgrid[2]) {
      ETR__JW_LIT(w, ",{\"name\": \"kernel_grid\", \"type\": \"string\", \"value\": \"[");
      for (int i = 0; i < 3; i++) {
        if (i) ETR__JW_LIT(w, ", ");
        etr__jw_u64(w, ev->kgrid[i]);
      }
      ETR__JW_LIT(w, "]\"}");
    }
    if (ev->kstream >= 0) {
      etr__jw_char(w, ',');
      attr_u64(w, "kernel_stream", (uint64_t)ev->kstream);
    }
  }
  if (ev->flags & ETR__EVF_TBINDEX) { /* from a binary log: interned when it was written */
    etr__jw_char(w, ',');
    attr_u64(w, "traceback", ev->tb_gen);
  } else if (ev->flags & ETR__EVF_TRACEBACK) {
    traceback_attr(tr, ev, tb);
  }
  if ((ev->flags & ETR__EVF_TIMING) && tr->opt.ns_timing) {
    etr__jw_char(w, ',');
    attr_u64(w, "ts_ns", (uint64_t)ev->ts_ns);
    etr__jw_char(w, ',');
    attr_u64(w, "dur_ns", (uint64_t)ev->incl_ns);
  }
  if (ev->flags & ETR__EVF_INCOMPLETE) {
    etr__jw_char(w, ',');
    attr_u64(w, "etr_incomplete", 1);
  }
  if (ev->flags & ETR__EVF_FAILED) {
    etr__jw_char(w, ',');
    attr_u64(w, "etr_failed", 1);
  }
  ETR__JW_LIT(w, "]}");
  note_written(tr, ev, dec);
}

void etr__emit_header(etr_trace *tr) {
  etr__jw *w = &tr->jw;
  ETR__JW_LIT(w, "{\n  \"schema\": \"");
  const char *sn = schema_name(tr->opt.schema);
  etr__jw_raw(w, sn, strlen(sn));
  ETR__JW_LIT(w, "\", \"pid\": ");
  etr__jw_i64(w, (int64_t)tr->pid);
  ETR__JW_LIT(w, ", \"time\": ");
  etr__jw_str(w, tr->when, strnlen(tr->when, sizeof tr->when));
  ETR__JW_LIT(w, ", \"start_ts\": ");
  etr__jw_i64(w, tr->start_ms);
  ETR__JW_LIT(w, ",\n  \"nodes\": [");
}

static void stat(etr__jw *w, const char *name, uint64_t v, bool first) {
  if (!first) ETR__JW_LIT(w, ", ");
  etr__jw_char(w, '"');
  etr__jw_raw(w, name, strlen(name));
  ETR__JW_LIT(w, "\": ");
  etr__jw_u64(w, v);
}

size_t etr__emit_process_text(etr_trace *tr, char *buf, size_t cap) {
  etr__jw saved = tr->jw, tmp;
  bool any = tr->any_node;
  size_t n = 0;
  if (etr__jw_init(&tmp, -1, 0) != 0) return 0;
  tr->jw = tmp;
  tr->any_node = false;
  structural_node(tr, 1, PROCESS_NAME, 0);
  if (tr->jw.len <= cap) {
    n = tr->jw.len;
    memcpy(buf, tr->jw.buf, n);
  }
  etr__jw_free(&tr->jw);
  tr->jw = saved;
  tr->any_node = any;
  return n;
}

size_t etr__footer_stats(etr_trace *tr, etr__stat_pair *out) {
  etr_trace_stats s;
  etr__trace_collect_stats(tr, &s);
  size_t n = 0;
#define PAIR(field) out[n++] = (etr__stat_pair){#field, s.field}
  out[n++] = (etr__stat_pair){"nodes_written", s.nodes_written + 1}; /* and the process node */
  PAIR(ops_recorded);
  out[n++] = (etr__stat_pair){"threads", s.threads};
  PAIR(objects);
  PAIR(ids_retired);
  PAIR(strings_cut);
  PAIR(lists_cut);
  PAIR(utf8_replaced);
  PAIR(values_fixed);
  PAIR(nesting_cut);
  PAIR(ends_without_begin);
  PAIR(ends_out_of_order);
  PAIR(ends_cross_thread);
  PAIR(ops_abandoned);
  PAIR(ops_open_at_disable);
  PAIR(ops_open_at_thread_exit);
  PAIR(ops_open_at_close);
  PAIR(nodes_dropped);
  PAIR(buffer_waits);
  /* (recording stopped: memory ran out, or a stalled output the writer came back from) */
  if (s.write_error) out[n++] = (etr__stat_pair){"write_error", (uint64_t)s.write_error};
  if (tr->ring) PAIR(ring_dropped);
  if (tr->tbtab) {
    PAIR(tracebacks);
    PAIR(tracebacks_unique);
    PAIR(frames_unique);
    if (s.tracebacks_cut) PAIR(tracebacks_cut); /* (the tables were full) */
  }
#undef PAIR
  return n;
}

int64_t etr__footer_time_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool etr__footer_tables(etr_trace *tr, etr__jw *out) {
  if (!tr->tbtab && !atomic_load(&tr->tb_ever)) return false;
  if (!tr->tbtab) tr->tbtab = etr__tbtab_new(tr->tb_symbolize);
  if (!tr->tbtab) return false;
  etr__tbtab_emit(tr->tbtab, out);
  atomic_store(&tr->tb_frames, etr__tbtab_frames(tr->tbtab));
  atomic_store(&tr->tb_cut, etr__tbtab_cut(tr->tbtab));
  return true;
}

void etr__emit_footer_with(etr_trace *tr, bool process_node, int64_t finish_ms, int fatal_sig,
                           const char *tables, size_t tables_len, const etr__stat_pair *st,
                           size_t n) {
  etr__jw *w = &tr->jw;
  if (process_node) structural_node(tr, 1, PROCESS_NAME, 0);
  ETR__JW_LIT(w, "\n  ],\n  \"finish_ts\": ");
  etr__jw_i64(w, finish_ms);
  ETR__JW_LIT(w, ",\n  ");
  etr__jw_raw(w, tables, tables_len);
  ETR__JW_LIT(w, "\"etr\": {\"version\": \"" ETR_VERSION_STRING "\", ");
  if (fatal_sig) { /* finalized by a fatal signal; the process may have gone on after it */
    ETR__JW_LIT(w, "\"signal\": ");
    etr__jw_i64(w, fatal_sig);
    ETR__JW_LIT(w, ", ");
  }
  ETR__JW_LIT(w, "\"stats\": {");
  for (size_t i = 0; i < n; i++) stat(w, st[i].name, st[i].value, i == 0);
  ETR__JW_LIT(w, "}}\n}\n");
}

void etr__emit_footer(etr_trace *tr, int fatal_sig) {
  int64_t finish_ms = etr__footer_time_ms();
  etr__jw tables;
  bool have = etr__jw_init(&tables, -1, 0) == 0;
  if (have) etr__footer_tables(tr, &tables);
  etr__stat_pair st[ETR__STATS_MAX];
  size_t n = etr__footer_stats(tr, st);
  etr__emit_footer_with(tr, true, finish_ms, fatal_sig, have ? tables.buf : "",
                        have ? tables.len : 0, st, n);
  if (have) etr__jw_free(&tables);
}
