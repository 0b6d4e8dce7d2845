/* etr chrome: Chrome trace-event JSON (Perfetto UI, chrome://tracing) from an execution
 * trace, streamed: one complete ("X") event per op as its node is read, one track per
 * thread, flow arrows from each fw_parent to its backward ops.
 *
 * Time: linear in the input; an op read looks up the flows waiting for it by its id (and
 * sorts them by their place, k log k for k of them).
 *
 * Memory: per thread a few words; per parent whose children were seen but which is not yet
 * read itself, one map entry (children come before parents, so this is nesting depth times
 * threads in a valid trace), at most 2 * PEND_GEN of them for timed parents and as many for
 * untimed ones: past PEND_GEN at once the oldest are forgotten with a warning (see pend);
 * for untimed ops, the flows still waiting for their fw_parent (40 bytes each, plus a map
 * entry per fw_parent waited for: not bounded, a valid trace may have every op wait);
 * per thread, its slices since its last top-level op (at most TBUF_MAX, and TBUF_TOTAL_MAX
 * for all threads together, see tbuf); the
 * output buffer (CH_FILE_BUF, chrome_out.h), written out in large blocks as it fills.
 */
#define _POSIX_C_SOURCE 200809L

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chrome_flows.h"
#include "chrome_out.h"
#include "cli.h"
#include "lib_an_util.h"

#define CMD "chrome"

static void help(void) {
  printf(
      "usage: etr chrome [options] FILE [-o OUT.json]\n"
      "\n"
      "Converts a trace to Chrome trace-event JSON, which Perfetto UI (ui.perfetto.dev) and\n"
      "chrome://tracing open: one track per thread (tid attr), a complete event per op\n"
      "(name, ts, dur = inclusive duration, args: id, rf_id, seq_id, scope, input/output\n"
      "shapes and types, op_schema, kernel and collective attrs, exclusive_dur), and a flow\n"
      "arrow from each forward op (fw_parent) to the backward ops that name it.\n"
      "A trace without timing (e.g. from PyTorch) is laid out in recorded order with 1 us\n"
      "per op and nesting kept; a note on stderr says so. Each op is placed by its own\n"
      "timing: in a trace with both kinds, the untimed ops alone are laid out so.\n"
      "\n"
      "options:\n"
      "  -o, --output OUT   write to OUT (default: stdout); left as it was on bad input\n"
      "  --no-args          leave out the args (smaller output)\n"
      "  --no-flows         leave out the fw_parent flow arrows\n"
      "  -h, --help         this text\n"
      "\n"
      "FILE may be gzip- or zstd-compressed; '-' reads stdin. Exit status: 0 ok, 1 bad\n"
      "input or write error, 2 usage error.\n");
}

/* Parent id -> a value (the latest end of its timed children, or the earliest start of its
 * untimed ones), for the parents whose children were read but which are not read
 * themselves yet. In two generations: an entry is put into `cur`, and moved there from
 * `old` when it is put again. When `cur` holds PEND_GEN entries, the entries of `old` (not
 * put since cur began) are forgotten, `cur` becomes `old` and a new `cur` begins. So
 * nothing is forgotten while at most PEND_GEN parents are pending at once (in a trace
 * whose children come before their parent, at most nesting depth x threads), and at most
 * 2 * PEND_GEN are held whatever the trace (parents that never come, say). */
typedef struct pend {
  an_u64map cur, old;
  uint64_t forgotten; /* entries forgotten */
  size_t most;        /* the most entries held at once */
} pend;

#define PEND_GEN ((size_t)1 << 17)

/* A thread's slices since its last top-level op ended, in file order (children before
 * their parent): written out in reverse once that op is read, so that every slice comes
 * after its parent's, which viewers need to nest slices that start at the same time. */
typedef struct tbuf {
  uint64_t tid;
  ch_buf out;   /* a memory buffer: the slices' text back to back */
  size_t *offs; /* where each slice starts */
  size_t n, cap;
  int64_t last_parent; /* ctrl_deps of the last slice buffered */
} tbuf;

/* A thread's buffer past TBUF_MAX, or all of them past TBUF_TOTAL_MAX together, is written
 * as it is (bounded memory, whatever the number of threads). With more than TBUF_KEEP_THREADS
 * threads, a buffer written out is freed, not kept for the thread's next slices, so that an
 * idle thread holds no buffer. */
#define TBUF_MAX (16u << 20)
#define TBUF_TOTAL_MAX (48u << 20)
#define TBUF_KEEP_THREADS 64

typedef struct chrome {
  ch_buf o; /* the output (written to its file as it fills) */
  tbuf *tb; /* one per thread seen */
  size_t n_tb, cap_tb;
  an_u64map tb_ix;        /* tid -> index into tb */
  size_t last_tb;         /* index of the last thread buffer used (n_tb: none) */
  size_t tb_bytes;        /* memory the thread buffers hold, all together */
  uint64_t last_meta_tid; /* a thread whose name was written (has_last_meta) */
  bool has_last_meta;
  bool out_of_memory;     /* an output buffer ran out of memory: bytes were dropped */
  an_u64map thread_nodes; /* ids of thread nodes seen */
  int64_t pid;
  char pid_text[24]; /* pid in decimal (pid_len bytes), copied into every event */
  size_t pid_len;
  bool args, flows;
  bool first_event;
  an_u64map threads;    /* tid -> 1 (thread_name emitted) */
  an_u64map cursor;     /* synthetic: tid -> next free time */
  an_u64map last_synth; /* synthetic: tid -> id of the last untimed op read there */
  /* parent id -> the latest end of its timed children / the earliest start of its untimed
   * ones (each op is laid out by its own timing: a parent spans its children of its kind) */
  pend pending, pending_synth;
  ch_flows waiting; /* untimed ops' flows whose fw_parent is not read yet */
  uint64_t n_timed, n_untimed, n_flows_dropped;
  uint64_t n_after_parent; /* untimed ops read right after their parent on their thread */
} chrome;

static bool pend_get(const pend *p, uint64_t id, uint64_t *val) {
  return an_u64map_get(&p->cur, id, val) || an_u64map_get(&p->old, id, val);
}

static void pend_del(pend *p, uint64_t id) {
  an_u64map_del(&p->cur, id);
  an_u64map_del(&p->old, id);
}

/* false when memory ran out. */
static bool pend_put(pend *p, uint64_t id, uint64_t val) {
  an_u64map_del(&p->old, id);
  if (!an_u64map_get(&p->cur, id, NULL) && p->cur.n + (p->cur.has_max ? 1 : 0) >= PEND_GEN) {
    p->forgotten += p->old.n + (p->old.has_max ? 1 : 0);
    an_u64map_free(&p->old);
    p->old = p->cur;
    memset(&p->cur, 0, sizeof p->cur);
  }
  if (!an_u64map_put(&p->cur, id, val)) return false;
  size_t held = p->cur.n + p->old.n + (p->cur.has_max ? 1 : 0) + (p->old.has_max ? 1 : 0);
  if (held > p->most) p->most = held;
  return true;
}

static void pend_free(pend *p) {
  an_u64map_free(&p->cur);
  an_u64map_free(&p->old);
}

static void sep(chrome *c) {
  if (!c->first_event) CH_LIT(&c->o, ",\n");
  c->first_event = false;
}

/* The thread's name in the viewer: "<thread_name> (os tid N)" from its thread node's attrs
 * when it has them (etr writes thread nodes before their ops), else "thread <tid>". */
static void thread_meta_named(chrome *c, uint64_t tid, const rd_rnode *thread_node) {
  const rd_rattr *nm = thread_node ? an_attr(thread_node, "thread_name") : NULL;
  const rd_rattr *os = thread_node ? an_attr(thread_node, "os_tid") : NULL;
  /* 1: named "thread N" (an op or a flow got there first), 2: named from its thread node;
   * a later thread node names it again (viewers keep a thread's last thread_name). */
  uint64_t had = 0;
  bool known = an_u64map_get(&c->threads, tid, &had);
  if (known && (had == 2 || (!nm && !os))) return;
  an_u64map_put(&c->threads, tid, nm || os ? 2 : 1);
  sep(c);
  ch_fmt(&c->o, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%llu,\"args\":{",
         (long long)c->pid, (unsigned long long)tid);
  char label[160];
  int64_t os_tid = os ? an_jint(&os->value, 0) : 0;
  if (nm && nm->value.kind == ETR_J_STRING && nm->value.v.str.len) {
    CH_LIT(&c->o, "\"name\":");
    snprintf(label, sizeof label, "%.*s",
             (int)(nm->value.v.str.len < 100 ? nm->value.v.str.len : 100), nm->value.v.str.s);
    size_t l = strlen(label);
    if (os_tid > 0) snprintf(label + l, sizeof label - l, " (os tid %lld)", (long long)os_tid);
    ch_jstr(&c->o, label, strlen(label));
  } else if (os_tid > 0) {
    ch_fmt(&c->o, "\"name\":\"thread %llu (os tid %lld)\"", (unsigned long long)tid,
           (long long)os_tid);
  } else {
    ch_fmt(&c->o, "\"name\":\"thread %llu\"", (unsigned long long)tid);
  }
  ch_fmt(&c->o,
         "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%llu,"
         "\"args\":{\"sort_index\":%llu}}",
         (long long)c->pid, (unsigned long long)tid, (unsigned long long)tid);
}

/* Name the thread "thread <tid>" unless it is named already. */
static void thread_meta(chrome *c, uint64_t tid) {
  if (c->has_last_meta && c->last_meta_tid == tid) return; /* (entries are never removed) */
  thread_meta_named(c, tid, NULL);
  c->last_meta_tid = tid;
  c->has_last_meta = true;
}

/* ",\"cat\":\"<cat from the scope>\"" */
static char *put_cat(char *p, uint64_t scope) {
  switch (scope) {
    case 1:
      return ETR__PUT_LIT(p, ",\"cat\":\"backward\"");
    case 2:
      return ETR__PUT_LIT(p, ",\"cat\":\"torchscript\"");
    case 7:
      return ETR__PUT_LIT(p, ",\"cat\":\"user_annotation\"");
    default:
      return ETR__PUT_LIT(p, ",\"cat\":\"cpu_op\"");
  }
}

/* The attr names ts_ns and dur_ns: shown as the slice's ts and dur. */
static bool is_ns_time(const char *n) {
  return (n[0] == 't' && !strcmp(n, "ts_ns")) || (n[0] == 'd' && !strcmp(n, "dur_ns"));
}

/* Whether an attr is written in args as "attr:NAME": when NAME is a key emit_op writes there
 * itself (the base attrs are not written as attrs at all), or begins with "attr:". So each
 * key comes once, the op's own value under its own name, and no two attrs of different
 * names share a key. */
static bool attr_renamed(const char *n) {
  static const char *const own[] = {"id",
                                    "exclusive_dur",
                                    "External id",
                                    "Record function id",
                                    "Sequence number",
                                    "Fwd thread id",
                                    "Input Dims",
                                    "Input type",
                                    "input_shapes",
                                    "input_types",
                                    "output_shapes",
                                    "output_types"};
  if (n[0] == '\0' || !strchr("ieERSFIoa", n[0])) return false; /* (most attrs: one test) */
  if (!strncmp(n, "attr:", 5)) return true;
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    if (!strcmp(n, own[i])) return true;
  return false;
}

/* The shapes and types of an inputs / outputs object, or NULL. */
static void io_parts(const rd_jval *io, bool exact_keys, const rd_jval **shapes,
                     const rd_jval **types) {
  *shapes = *types = NULL;
  if (io == NULL || io->kind != ETR_J_OBJECT) return;
  if (exact_keys && io->v.obj.n >= 3) { /* values, shapes, types[, strides] */
    *shapes = &io->v.obj.items[1].val;
    *types = &io->v.obj.items[2].val;
  } else {
    *shapes = rd_jobj_get(io, "shapes");
    *types = rd_jobj_get(io, "types");
  }
}

/* Where a value was written into b (from `at` to `end`, while b has been written out to its
 * file `flushes` times), for a second key that copies its bytes. */
typedef struct jspan {
  size_t at, end;
  uint64_t flushes;
} jspan;

/* A value written a second time: the bytes of the first time (when b was not written out to
 * its file since), else written again. */
static void jval_again(ch_buf *b, const rd_jval *v, const jspan *first) {
  size_t len = first->end - first->at;
  if (b->flushes == first->flushes && len <= CH_MAX_ROOM) {
    char *p = ch_room(b, len);
    if (p == NULL) return;
    if (b->flushes == first->flushes) {
      memcpy(p, b->p + first->at, len);
      b->len += len;
      return;
    }
  }
  ch_jval(b, v);
}

#define KEY(lit) (lit), sizeof(lit) - 1

/* The key (its quotes, comma and colon included) at the cursor p (room for it asked), then v:
 * a copy of the bytes at *first when given, else v written anew, where it went noted in *at
 * when given. The cursor after it with 32 bytes of room, NULL when memory ran out. */
static inline char *jval_arg(ch_buf *b, char *p, const char *key, size_t key_len, const rd_jval *v,
                             const jspan *first, jspan *at) {
  memcpy(p, key, key_len);
  ch_done(b, p + key_len);
  if (first) {
    jval_again(b, v, first);
  } else {
    if (at) *at = (jspan){b->len, 0, b->flushes};
    ch_jval(b, v);
    if (at) at->end = b->len;
  }
  return ch_room(b, 32);
}

static void str_arg(ch_buf *b, const char *key, size_t key_len, const char *v) {
  if (v == NULL || v[0] == '\0') return;
  char *p = ch_room(b, key_len + 4);
  if (p == NULL) return;
  p = ETR__PUT_LIT(p, ",\"");
  memcpy(p, key, key_len);
  p = ETR__PUT_LIT(p + key_len, "\":");
  ch_done(b, p);
  ch_jstr(b, v, strlen(v));
}

/* One op's complete event, into b (no separator); ts and dur in ns. */
static void emit_op(chrome *c, ch_buf *b, const rd_rnode *n, int64_t ts, int64_t dur) {
  char *p = ch_room(b, 8);
  if (p == NULL) return;
  ch_done(b, ETR__PUT_LIT(p, "{\"name\":"));
  ch_jstr(b, n->name ? n->name : "", n->name ? n->name_len : 0);
  /* everything up to the inputs: at most 2 * CH_US_MAX + 13 * ETR__I64_MAX_LEN + 210 bytes */
  p = ch_room(b, 640);
  if (p == NULL) return;
  p = put_cat(p, n->scope);
  p = ETR__PUT_LIT(p, ",\"ph\":\"X\",\"ts\":");
  p = ch_us(p, ts);
  p = ETR__PUT_LIT(p, ",\"dur\":");
  p = ch_us(p, dur);
  p = ETR__PUT_LIT(p, ",\"pid\":");
  memcpy(p, c->pid_text, 20); /* (room for 24) */
  p += c->pid_len;
  p = ETR__PUT_LIT(p, ",\"tid\":");
  p = etr__put_u64(p, n->tid);
  if (!c->args) {
    *p++ = '}';
    ch_done(b, p);
    return;
  }
  p = ETR__PUT_LIT(p, ",\"args\":{\"id\":");
  p = etr__put_i64(p, n->id);
  p = ETR__PUT_LIT(p, ",\"rf_id\":");
  char *rf = p; /* copied twice below (20 bytes, the longest; 36 or more bytes back) */
  p = etr__put_u64(p, n->rf_id);
  size_t rf_len = (size_t)(p - rf);
  p = ETR__PUT_LIT(p, ",\"seq_id\":");
  p = etr__put_i64(p, n->seq_id);
  p = ETR__PUT_LIT(p, ",\"scope\":");
  p = etr__put_u64(p, n->scope);
  if (n->fw_parent) {
    p = ETR__PUT_LIT(p, ",\"fw_parent\":");
    p = etr__put_u64(p, n->fw_parent);
    p = ETR__PUT_LIT(p, ",\"fw_tid\":");
    p = etr__put_u64(p, n->fw_tid);
  }
  if (n->has_timing) {
    p = ETR__PUT_LIT(p, ",\"exclusive_dur\":");
    p = etr__put_i64(p, n->exclusive_dur);
  }
  /* The same facts under the names PyTorch's Kineto profiler gives them, which tools that
   * correlate host and device traces (and Kineto's own viewers) look for. */
  p = ETR__PUT_LIT(p, ",\"External id\":");
  memcpy(p, rf, ETR__U64_MAX_LEN);
  p += rf_len;
  p = ETR__PUT_LIT(p, ",\"Record function id\":");
  memcpy(p, rf, ETR__U64_MAX_LEN);
  p += rf_len;
  if (n->seq_id >= 0) {
    p = ETR__PUT_LIT(p, ",\"Sequence number\":");
    p = etr__put_i64(p, n->seq_id);
  }
  if (n->fw_tid) {
    p = ETR__PUT_LIT(p, ",\"Fwd thread id\":");
    p = etr__put_u64(p, n->fw_tid);
  }
  /* The inputs' shapes and types twice (Kineto's names, then ours): the second time a copy
   * of the first's bytes. */
  const rd_jval *dims, *typ, *oshapes, *otypes;
  io_parts(n->inputs, n->inputs_exact_keys, &dims, &typ);
  io_parts(n->outputs, n->outputs_exact_keys, &oshapes, &otypes);
  jspan dims_at = {0, 0, 0}, typ_at = {0, 0, 0};
  if ((dims && !(p = jval_arg(b, p, KEY(",\"Input Dims\":"), dims, NULL, &dims_at))) ||
      (typ && !(p = jval_arg(b, p, KEY(",\"Input type\":"), typ, NULL, &typ_at))) ||
      (dims && !(p = jval_arg(b, p, KEY(",\"input_shapes\":"), dims, &dims_at, NULL))) ||
      (typ && !(p = jval_arg(b, p, KEY(",\"input_types\":"), typ, &typ_at, NULL))) ||
      (oshapes && !(p = jval_arg(b, p, KEY(",\"output_shapes\":"), oshapes, NULL, NULL))) ||
      (otypes && !(p = jval_arg(b, p, KEY(",\"output_types\":"), otypes, NULL, NULL))))
    return;
  ch_done(b, p);
  str_arg(b, "op_schema", 9, n->op_schema);
  str_arg(b, "kernel_backend", 14, n->kernel_backend);
  str_arg(b, "kernel_file", 11, n->kernel_file);
  for (size_t i = 0; i < n->n_attrs; i++) {
    const rd_rattr *a = &n->attrs[i];
    /* (the base attrs are args of their own; ts_ns and dur_ns are ts and dur) */
    if (a->name == NULL || a->base >= 0 || is_ns_time(a->name)) continue;
    bool renamed = attr_renamed(a->name);
    p = ch_room(b, 1);
    if (p == NULL) return;
    *p++ = ',';
    ch_done(b, p);
    if (renamed) { /* the key is "attr:" and the name: one string */
      char small[64];
      size_t len = strlen(a->name);
      char *key = len + 5 <= sizeof small ? small : malloc(len + 5);
      if (key == NULL) {
        b->failed = true;
        return;
      }
      memcpy(key, "attr:", 5);
      memcpy(key + 5, a->name, len);
      ch_jstr(b, key, len + 5);
      if (key != small) free(key);
    } else {
      ch_jstr(b, a->name, strlen(a->name));
    }
    p = ch_room(b, 1);
    if (p == NULL) return;
    *p++ = ':';
    ch_done(b, p);
    ch_jval(b, &a->value);
  }
  p = ch_room(b, 2);
  if (p == NULL) return;
  ch_done(b, ETR__PUT_LIT(p, "}}"));
}

/* One end of a flow event: `ph` is its phase keys ("s", or "f" bound to the enclosing slice). */
static char *flow_end(char *p, const chrome *c, const char *ph, size_t ph_len, int64_t id,
                      uint64_t tid, int64_t ts) {
  p = ETR__PUT_LIT(p, "{\"name\":\"fw_parent\",\"cat\":\"fw_link\",");
  memcpy(p, ph, ph_len);
  p += ph_len;
  p = ETR__PUT_LIT(p, ",\"id\":");
  p = etr__put_i64(p, id);
  p = ETR__PUT_LIT(p, ",\"pid\":");
  p = etr__put_i64(p, c->pid);
  p = ETR__PUT_LIT(p, ",\"tid\":");
  p = etr__put_u64(p, tid);
  p = ETR__PUT_LIT(p, ",\"ts\":");
  p = ch_us(p, ts);
  *p++ = '}';
  return p;
}

static void emit_flow(chrome *c, int64_t id, uint64_t from_tid, int64_t from_ts, uint64_t to_tid,
                      int64_t to_ts) {
  static const char start[] = "\"ph\":\"s\"", finish[] = "\"ph\":\"f\",\"bp\":\"e\"";
  thread_meta(c, from_tid);
  sep(c);
  char *p = ch_room(&c->o, 256);
  if (p == NULL) return;
  p = flow_end(p, c, start, sizeof start - 1, id, from_tid, from_ts);
  p = ETR__PUT_LIT(p, ",\n");
  p = flow_end(p, c, finish, sizeof finish - 1, id, to_tid, to_ts);
  ch_done(&c->o, p);
}

/* The flow arrows waiting for the op just laid out at (tid, start) (chrome_flows.c). */
typedef struct flows_to {
  chrome *c;
  uint64_t tid;
  int64_t start;
} flows_to;

static void emit_waited(void *ctx, const ch_flow *f) {
  const flows_to *t = ctx;
  emit_flow(t->c, f->op_id, t->tid, t->start, f->tid, f->ts);
}

static bool resolve_flows(chrome *c, int64_t id, uint64_t tid, int64_t start) {
  flows_to t = {c, tid, start};
  return ch_flows_resolve(&c->waiting, id, emit_waited, &t);
}

static tbuf *tbuf_of(chrome *c, uint64_t tid) {
  if (c->last_tb < c->n_tb && c->tb[c->last_tb].tid == tid) return &c->tb[c->last_tb];
  uint64_t ix;
  if (an_u64map_get(&c->tb_ix, tid, &ix)) {
    c->last_tb = (size_t)ix;
    return &c->tb[ix];
  }
  if (c->n_tb == c->cap_tb) {
    size_t cap = c->cap_tb ? c->cap_tb * 2 : 16;
    tbuf *v = realloc(c->tb, cap * sizeof *v);
    if (!v) return NULL;
    c->tb = v;
    c->cap_tb = cap;
  }
  tbuf *b = &c->tb[c->n_tb];
  memset(b, 0, sizeof *b);
  b->tid = tid;
  if (!an_u64map_put(&c->tb_ix, tid, c->n_tb)) return NULL;
  c->last_tb = c->n_tb;
  c->n_tb++;
  return b;
}

/* The memory a thread buffer holds. */
static size_t tb_mem(const tbuf *b) { return b->out.cap + b->cap * sizeof *b->offs; }

/* The thread's buffered slices, last first (each one's parent before it). */
static void tbuf_flush(chrome *c, tbuf *b) {
  if (b->out.failed) c->out_of_memory = true;
  for (size_t i = b->n; i-- > 0;) {
    size_t end = i + 1 < b->n ? b->offs[i + 1] : b->out.len;
    sep(c);
    ch_raw(&c->o, b->out.p + b->offs[i], end - b->offs[i]);
  }
  b->out.len = 0; /* the buffer is kept for the thread's next slices (few threads) */
  b->out.failed = false;
  b->n = 0;
  if (c->n_tb > TBUF_KEEP_THREADS || c->tb_bytes > TBUF_TOTAL_MAX) {
    c->tb_bytes -= tb_mem(b);
    ch_free(&b->out);
    free(b->offs);
    b->offs = NULL;
    b->cap = 0;
  }
}

/* emit_op into the slice's thread buffer (directly when memory runs out). */
static bool emit_op_buffered(chrome *c, const rd_rnode *n, int64_t ts, int64_t dur) {
  tbuf *b = tbuf_of(c, n->tid);
  if (b && b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 16;
    size_t *v = realloc(b->offs, cap * sizeof *v);
    if (v) {
      c->tb_bytes += (cap - b->cap) * sizeof *v;
      b->offs = v;
      b->cap = cap;
    } else {
      b = NULL;
    }
  }
  size_t mem0 = b ? tb_mem(b) : 0;
  bool top = an_u64map_get(&c->thread_nodes, (uint64_t)n->ctrl_deps, NULL);
  /* A top-level op that the batch's last slice is not a child of ends no batch: it has no
   * children, and the batch belongs to a top-level op still to come (a process-group node
   * that etr's writer held back until the first collective comes amid another op's
   * children; docs/FORMAT.md). Written as it is. */
  if (!b || (top && b->n > 0 && b->last_parent != n->id)) {
    sep(c);
    emit_op(c, &c->o, n, ts, dur);
    return true;
  }
  b->offs[b->n++] = b->out.len;
  b->last_parent = n->ctrl_deps;
  emit_op(c, &b->out, n, ts, dur);
  c->tb_bytes += tb_mem(b) - mem0;
  /* A top-level op ends its thread's batch; a huge one is written as it is. */
  if (top || b->out.len > TBUF_MAX || c->tb_bytes > TBUF_TOTAL_MAX) tbuf_flush(c, b);
  return true;
}

static bool node(chrome *c, const rd_rnode *n) {
  /* (the names are 41 and 42 bytes: a shorter one is neither) */
  bool special = n->name != NULL && n->name_len >= 41 && n->name[0] == '[';
  if (special && an_is_process_node(n)) return true;
  if (special && an_is_thread_node(n)) {
    thread_meta_named(c, n->tid, n);
    if (n->id > 0 && !an_u64map_put(&c->thread_nodes, (uint64_t)n->id, 1)) return false;
    pend_del(&c->pending, (uint64_t)n->id);
    pend_del(&c->pending_synth, (uint64_t)n->id);
    return true;
  }
  thread_meta(c, n->tid);
  /* Each op by its own timing (so a trace that mixes both comes out the same whatever the
   * order of its nodes): recorded, else laid out in recorded order below. */
  pend *pd = n->has_timing ? &c->pending : &c->pending_synth;
  uint64_t pv;
  bool had = pend_get(pd, (uint64_t)n->id, &pv);
  if (had) pend_del(pd, (uint64_t)n->id);
  /* A parent that is a thread node read already is never looked up again (a thread node
   * read later deletes its entries): no entry for it. */
  bool parent_read = an_u64map_get(&c->thread_nodes, (uint64_t)n->ctrl_deps, NULL);
  if (n->has_timing) {
    c->n_timed++;
    /* In ns: the attrs ts_ns and dur_ns when the recorder wrote them (ETR_TRACE_TIMING=ns),
     * else ts and inclusive_dur in µs. Stretch a parent over its children so that every
     * child nests inside it whatever the file says. (Clamped: no overflow.) */
    const int64_t lim = (int64_t)1 << 50;
    int64_t ts = n->ts < -lim ? -lim : n->ts > lim ? lim : n->ts;
    int64_t dur = n->inclusive_dur < 0 ? 0 : n->inclusive_dur > lim ? lim : n->inclusive_dur;
    ts *= 1000;
    dur *= 1000;
    const rd_rattr *tns = NULL, *dns = NULL;
    for (size_t i = 0; i < n->n_attrs; i++) {
      const char *an = n->attrs[i].name;
      if (an[0] == 't' && !strcmp(an, "ts_ns")) tns = &n->attrs[i];
      if (an[0] == 'd' && !strcmp(an, "dur_ns")) dns = &n->attrs[i];
    }
    if (tns && dns && tns->value.kind == ETR_J_INT && dns->value.kind == ETR_J_INT &&
        tns->value.v.i >= 0 && tns->value.v.i < lim * 1000 && dns->value.v.i >= 0 &&
        dns->value.v.i < lim * 1000) {
      ts = tns->value.v.i;
      dur = dns->value.v.i;
    }
    if (had && (int64_t)pv - ts > dur) dur = (int64_t)pv - ts;
    if (!emit_op_buffered(c, n, ts, dur)) return false;
    uint64_t cur;
    int64_t end = ts + dur;
    if (!parent_read &&
        (!pend_get(&c->pending, (uint64_t)n->ctrl_deps, &cur) || (int64_t)cur < end)) {
      if (!pend_put(&c->pending, (uint64_t)n->ctrl_deps, (uint64_t)end)) return false;
    }
    if (c->flows && n->fw_parent != 0) emit_flow(c, n->id, n->fw_tid, ts, n->tid, ts);
    if (!resolve_flows(c, n->id, n->tid, ts)) return false;
    return true;
  }
  /* Synthetic layout (children come before their parent): a leaf takes the next 1 us of its
   * thread; a parent spans from its first child's start to 1 us after its last child. (ns) */
  c->n_untimed++;
  uint64_t cur = 0;
  an_u64map_get(&c->cursor, n->tid, &cur);
  int64_t start = had ? (int64_t)pv : (int64_t)cur;
  int64_t end = (int64_t)cur + 1000;
  if (!an_u64map_put(&c->cursor, n->tid, (uint64_t)end)) return false;
  /* The layout needs children before their parent: an op read right after its parent (nodes
   * sorted by id, say) is laid out after it, not inside it. Counted, said at the end. */
  uint64_t last;
  if (an_u64map_get(&c->last_synth, n->tid, &last) && n->ctrl_deps > 0 &&
      last == (uint64_t)n->ctrl_deps)
    c->n_after_parent++;
  if (n->id > 0 && !an_u64map_put(&c->last_synth, n->tid, (uint64_t)n->id)) return false;
  sep(c);
  emit_op(c, &c->o, n, start, end - start);
  if (!parent_read && !pend_get(&c->pending_synth, (uint64_t)n->ctrl_deps, NULL)) {
    if (!pend_put(&c->pending_synth, (uint64_t)n->ctrl_deps, (uint64_t)start)) return false;
  }
  if (!resolve_flows(c, n->id, n->tid, start)) return false;
  if (c->flows && n->fw_parent != 0 &&
      !ch_flows_wait(&c->waiting, n->id, n->tid, start, n->fw_parent))
    return false;
  return true;
}

int cmd_chrome(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    help();
    return ETR_CLI_OK;
  }
  const char *file = NULL, *out_path = NULL;
  bool args = true, flows = true;
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"no-args", no_argument, NULL, 'A'},
                                       {"no-flows", no_argument, NULL, 'F'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1;) {
    if (c == 'o')
      out_path = optarg;
    else if (c == 'A')
      args = false;
    else if (c == 'F')
      flows = false;
    else
      return cli_getopt_error(CMD, c, argv);
  }
  if (cli_one_file(CMD, argc, argv, &file)) return ETR_CLI_USAGE;
  bool to_file = out_path != NULL && strcmp(out_path, "-") != 0;
  if (to_file && strcmp(file, out_path) == 0) { /* (a link to it: refused at open) */
    cli_error(CMD, "%s: is an input of this command (or a link to one): refusing to overwrite it",
              cli_term(out_path));
    return ETR_CLI_FAIL;
  }

  cli_input in;
  if (cli_open(&in, CMD, file, &cli_no_trailer) != 0) return ETR_CLI_FAIL;
  if (cli_check_schema(CMD, file, rd_header(in.r)) != ETR_CLI_OK) {
    cli_close(&in);
    return ETR_CLI_FAIL;
  }
  FILE *f = cli_open_output(CMD, out_path);
  if (f == NULL) {
    cli_close(&in);
    return ETR_CLI_FAIL;
  }
  chrome c;
  memset(&c, 0, sizeof c);
  c.o.f = f;
  c.args = args;
  c.flows = flows;
  c.first_event = true;
  const rd_rheader *h = rd_header(in.r);
  c.pid = h && h->pid >= 0 ? h->pid : 0;
  c.pid_len = (size_t)(etr__put_i64(c.pid_text, c.pid) - c.pid_text);
  CH_LIT(&c.o, "{\"traceEvents\":[\n");
  sep(&c);
  ch_fmt(&c.o,
         "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":0,"
         "\"args\":{\"name\":",
         (long long)c.pid);
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  char pname[512];
  snprintf(pname, sizeof pname, "etr %s (pid %lld)", strcmp(file, "-") == 0 ? "<stdin>" : base,
           (long long)c.pid);
  ch_jstr(&c.o, pname, strlen(pname));
  CH_LIT(&c.o, "}}");

  const rd_rnode *n;
  int rc;
  bool oom = false;
  while ((rc = cli_next(&in, &n)) == 1) {
    if (!node(&c, n)) {
      oom = true;
      break;
    }
  }
  if (!oom && rc == 0) rc = cli_finish(&in);
  int status = ETR_CLI_OK;
  if (oom) {
    cli_error(CMD, "%s: out of memory", file);
    status = ETR_CLI_FAIL;
  } else if (rc != 0) {
    status = ETR_CLI_FAIL;
  }
  if (status == ETR_CLI_OK) {
    for (size_t i = 0; i < c.n_tb; i++) tbuf_flush(&c, &c.tb[i]);
    c.n_flows_dropped = c.waiting.n;
    CH_LIT(&c.o,
           "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"etr chrome\","
           "\"schema\":");
    const char *schema = h && h->schema ? h->schema : "";
    ch_jstr(&c.o, schema, strlen(schema));
    if (c.n_untimed == 0)
      CH_LIT(&c.o, ",\"timing\":\"recorded\"}}\n");
    else if (c.n_timed == 0)
      CH_LIT(&c.o,
             ",\"timing\":\"synthetic: no timing in the trace, 1 us per op in recorded "
             "order\"}}\n");
    else
      ch_fmt(&c.o,
             ",\"timing\":\"mixed: %llu op(s) recorded, %llu without timing laid out 1 us "
             "each in recorded order from 0 on their thread\"}}\n",
             (unsigned long long)c.n_timed, (unsigned long long)c.n_untimed);
    if (c.out_of_memory || c.o.failed) {
      cli_error(CMD, "%s: out of memory (output)", file);
      status = ETR_CLI_FAIL;
    }
  }
  if (status == ETR_CLI_OK) {
    ch_flush(&c.o);
    status = cli_close_output_err(CMD, f, out_path, c.o.write_err);
    f = NULL;
  }
  if (f != NULL) {
    if (to_file) {
      fclose(f);
      cli_discard_output(out_path); /* no half-written output */
    } else {
      ch_flush(&c.o); /* what was written before the error, as it was written */
      fflush(f);
    }
  }
  if (status == ETR_CLI_OK) {
    if (c.n_untimed && !c.n_timed)
      fprintf(stderr,
              "etr chrome: note: %s has no timing; ops are laid out 1 us each in "
              "recorded order\n",
              file);
    else if (c.n_untimed)
      fprintf(stderr,
              "etr chrome: note: %s: %llu of %llu op(s) without timing, laid out 1 us each in "
              "recorded order from 0 on their thread; the others at their recorded times\n",
              file, (unsigned long long)c.n_untimed, (unsigned long long)(c.n_untimed + c.n_timed));
    if (c.n_after_parent)
      fprintf(stderr,
              "etr chrome: warning: %s: %llu op(s) without timing come right after their "
              "parent: the recorded-order layout needs children before their parent (as etr "
              "and PyTorch write them), so ops listed after their parent are laid out after "
              "it, not inside it (nesting not shown)\n",
              file, (unsigned long long)c.n_after_parent);
    if (c.n_flows_dropped)
      fprintf(stderr,
              "etr chrome: note: %llu fw_parent flow(s) left out (fw_parent not found "
              "after the op)\n",
              (unsigned long long)c.n_flows_dropped);
    uint64_t forgotten = c.pending.forgotten + c.pending_synth.forgotten;
    if (forgotten)
      fprintf(stderr,
              "etr chrome: warning: %s: more than %zu parents whose children were read were "
              "not read themselves at once (ids that never come?): %llu of them forgotten, "
              "each laid out, if it comes, without spanning the children read before it\n",
              file, PEND_GEN, (unsigned long long)forgotten);
  }
  const char *stats = getenv("ETR_CHROME_STATS");
  if (stats && strcmp(stats, "1") == 0) /* (for the tests: the work and memory counted) */
    fprintf(stderr,
            "etr chrome: stats: flows_waited %llu flow_visits %llu pending_most %zu "
            "pending_synth_most %zu pending_forgotten %llu\n",
            (unsigned long long)c.waiting.waited, (unsigned long long)c.waiting.visits,
            c.pending.most, c.pending_synth.most,
            (unsigned long long)(c.pending.forgotten + c.pending_synth.forgotten));
  cli_close(&in);
  an_u64map_free(&c.threads);
  an_u64map_free(&c.cursor);
  an_u64map_free(&c.last_synth);
  pend_free(&c.pending);
  pend_free(&c.pending_synth);
  ch_flows_free(&c.waiting);
  for (size_t i = 0; i < c.n_tb; i++) {
    ch_free(&c.tb[i].out);
    free(c.tb[i].offs);
  }
  free(c.tb);
  ch_free(&c.o);
  an_u64map_free(&c.tb_ix);
  an_u64map_free(&c.thread_nodes);
  return status;
}
