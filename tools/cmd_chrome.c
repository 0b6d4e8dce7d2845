/* etr chrome: Chrome trace-event JSON (Perfetto UI, chrome://tracing) from an execution
 * trace, streamed: one complete ("X") event per op as its node is read, one track per
 * thread, flow arrows from each fw_parent to its backward ops.
 *
 * Memory: per thread a few words; per parent whose children were seen but which is not yet
 * read itself, one map entry (children come before parents, so this is bounded by nesting
 * depth times threads); for untimed traces, the flows still waiting for their fw_parent.
 */
#define _POSIX_C_SOURCE 200809L

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
      "per op and nesting kept; a note on stderr says so.\n"
      "\n"
      "options:\n"
      "  -o, --output OUT   write to OUT (default: stdout); removed again on bad input\n"
      "  --no-args          leave out the args (smaller output)\n"
      "  --no-flows         leave out the fw_parent flow arrows\n"
      "  -h, --help         this text\n"
      "\n"
      "FILE may be gzip-compressed; '-' reads stdin. Exit status: 0 ok, 1 bad input or\n"
      "write error, 2 usage error.\n");
}

typedef struct flow {
  int64_t op_id;
  uint64_t tid;
  int64_t ts;
  int64_t fw_parent;
} flow;

/* A thread's slices since its last top-level op ended, in file order (children before
 * their parent): written out in reverse once that op is read, so that every slice comes
 * after its parent's, which viewers need to nest slices that start at the same time. */
typedef struct tbuf {
  uint64_t tid;
  an_out out;   /* a memory output (out.f NULL): the slices' text back to back */
  size_t *offs; /* where each slice starts */
  size_t n, cap;
} tbuf;

#define TBUF_MAX                                                                  \
  (16u << 20) /* a thread's buffer past this is written as it is (bounded memory) \
               */

typedef struct chrome {
  an_out o;
  tbuf *tb; /* one per thread seen */
  size_t n_tb, cap_tb;
  an_u64map tb_ix;        /* tid -> index into tb */
  an_u64map thread_nodes; /* ids of thread nodes seen */
  int64_t pid;
  bool args, flows;
  int mode; /* 0 unknown, 1 timed, 2 synthetic */
  bool first_event;
  an_u64map threads; /* tid -> 1 (thread_name emitted) */
  an_u64map cursor;  /* synthetic: tid -> next free time */
  an_u64map pending; /* parent id -> earliest child start (synthetic) / latest child end (timed) */
  flow *waiting;     /* synthetic: flows whose fw_parent is not read yet */
  size_t n_waiting, cap_waiting;
  uint64_t n_ops, n_flows, n_skipped_untimed, n_flows_dropped;
} chrome;

static void sep(chrome *c) {
  if (!c->first_event) an_out_raw(&c->o, ",\n", 2);
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
  an_out_fmt(&c->o, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%llu,\"args\":{",
             (long long)c->pid, (unsigned long long)tid);
  char label[160];
  int64_t os_tid = os ? an_jint(&os->value, 0) : 0;
  if (nm && nm->value.kind == ETR_J_STRING && nm->value.v.str.len) {
    an_out_cstr(&c->o, "\"name\":");
    snprintf(label, sizeof label, "%.*s",
             (int)(nm->value.v.str.len < 100 ? nm->value.v.str.len : 100), nm->value.v.str.s);
    size_t l = strlen(label);
    if (os_tid > 0) snprintf(label + l, sizeof label - l, " (os tid %lld)", (long long)os_tid);
    an_out_jstr(&c->o, label, strlen(label));
  } else if (os_tid > 0) {
    an_out_fmt(&c->o, "\"name\":\"thread %llu (os tid %lld)\"", (unsigned long long)tid,
               (long long)os_tid);
  } else {
    an_out_fmt(&c->o, "\"name\":\"thread %llu\"", (unsigned long long)tid);
  }
  an_out_fmt(&c->o,
             "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%llu,"
             "\"args\":{\"sort_index\":%llu}}",
             (long long)c->pid, (unsigned long long)tid, (unsigned long long)tid);
}

static void thread_meta(chrome *c, uint64_t tid) { thread_meta_named(c, tid, NULL); }

static const char *scope_cat(uint64_t scope) {
  switch (scope) {
    case 1:
      return "backward";
    case 2:
      return "torchscript";
    case 7:
      return "user_annotation";
    default:
      return "cpu_op";
  }
}

/* Attrs the slice already shows (as args of their own, or as its ts and dur). */
static bool shown_elsewhere(const char *n) {
  return rd_base_attr(n) >= 0 || !strcmp(n, "ts_ns") || !strcmp(n, "dur_ns");
}

static void io_args(chrome *c, const char *prefix, const rd_jval *io) {
  if (io == NULL || io->kind != ETR_J_OBJECT) return;
  const rd_jval *shapes = rd_jobj_get(io, "shapes");
  const rd_jval *types = rd_jobj_get(io, "types");
  if (shapes) {
    AN_OUT_LIT(&c->o, ",\"");
    an_out_cstr(&c->o, prefix);
    AN_OUT_LIT(&c->o, "_shapes\":");
    an_out_jval(&c->o, shapes);
  }
  if (types) {
    AN_OUT_LIT(&c->o, ",\"");
    an_out_cstr(&c->o, prefix);
    AN_OUT_LIT(&c->o, "_types\":");
    an_out_jval(&c->o, types);
  }
}

static void str_arg(chrome *c, const char *key, const char *v) {
  if (v == NULL || v[0] == '\0') return;
  AN_OUT_LIT(&c->o, ",\"");
  an_out_cstr(&c->o, key);
  AN_OUT_LIT(&c->o, "\":");
  an_out_jstr(&c->o, v, strlen(v));
}

/* A time in ns as the trace-event format's µs: "12" or "12.345". */
static void put_us(an_out *o, int64_t ns) {
  if (ns < 0) {
    an_out_raw(o, "-", 1);
    ns = ns == INT64_MIN ? INT64_MAX : -ns;
  }
  an_out_i64(o, ns / 1000);
  int64_t frac = ns % 1000;
  if (frac) {
    char f[4] = {'.', (char)('0' + frac / 100), (char)('0' + frac / 10 % 10),
                 (char)('0' + frac % 10)};
    an_out_raw(o, f, 4);
  }
}

/* ts and dur in ns */
static void emit_op(chrome *c, const rd_rnode *n, int64_t ts, int64_t dur) {
  sep(c);
  an_out_cstr(&c->o, "{\"name\":");
  an_out_jstr(&c->o, n->name ? n->name : "", n->name ? n->name_len : 0);
  AN_OUT_LIT(&c->o, ",\"cat\":\"");
  an_out_cstr(&c->o, scope_cat(n->scope));
  AN_OUT_LIT(&c->o, "\",\"ph\":\"X\",\"ts\":");
  put_us(&c->o, ts);
  AN_OUT_LIT(&c->o, ",\"dur\":");
  put_us(&c->o, dur);
  AN_OUT_LIT(&c->o, ",\"pid\":");
  an_out_i64(&c->o, c->pid);
  AN_OUT_LIT(&c->o, ",\"tid\":");
  an_out_u64(&c->o, n->tid);
  if (c->args) {
    AN_OUT_LIT(&c->o, ",\"args\":{\"id\":");
    an_out_i64(&c->o, n->id);
    AN_OUT_LIT(&c->o, ",\"rf_id\":");
    an_out_u64(&c->o, n->rf_id);
    AN_OUT_LIT(&c->o, ",\"seq_id\":");
    an_out_i64(&c->o, n->seq_id);
    AN_OUT_LIT(&c->o, ",\"scope\":");
    an_out_u64(&c->o, n->scope);
    if (n->fw_parent) {
      AN_OUT_LIT(&c->o, ",\"fw_parent\":");
      an_out_u64(&c->o, n->fw_parent);
      AN_OUT_LIT(&c->o, ",\"fw_tid\":");
      an_out_u64(&c->o, n->fw_tid);
    }
    if (n->has_timing) {
      AN_OUT_LIT(&c->o, ",\"exclusive_dur\":");
      an_out_i64(&c->o, n->exclusive_dur);
    }
    /* The same facts under the names PyTorch's Kineto profiler gives them, which tools that
     * correlate host and device traces (and Kineto's own viewers) look for. */
    AN_OUT_LIT(&c->o, ",\"External id\":");
    an_out_u64(&c->o, n->rf_id);
    AN_OUT_LIT(&c->o, ",\"Record function id\":");
    an_out_u64(&c->o, n->rf_id);
    if (n->seq_id >= 0) {
      AN_OUT_LIT(&c->o, ",\"Sequence number\":");
      an_out_i64(&c->o, n->seq_id);
    }
    if (n->fw_tid) {
      AN_OUT_LIT(&c->o, ",\"Fwd thread id\":");
      an_out_u64(&c->o, n->fw_tid);
    }
    const rd_jval *ins = n->inputs && n->inputs->kind == ETR_J_OBJECT ? n->inputs : NULL;
    const rd_jval *dims = ins ? rd_jobj_get(ins, "shapes") : NULL;
    const rd_jval *typ = ins ? rd_jobj_get(ins, "types") : NULL;
    if (dims) {
      an_out_cstr(&c->o, ",\"Input Dims\":");
      an_out_jval(&c->o, dims);
    }
    if (typ) {
      an_out_cstr(&c->o, ",\"Input type\":");
      an_out_jval(&c->o, typ);
    }
    io_args(c, "input", n->inputs);
    io_args(c, "output", n->outputs);
    str_arg(c, "op_schema", n->op_schema);
    str_arg(c, "kernel_backend", n->kernel_backend);
    str_arg(c, "kernel_file", n->kernel_file);
    for (size_t i = 0; i < n->n_attrs; i++) {
      const rd_rattr *a = &n->attrs[i];
      if (a->name == NULL || shown_elsewhere(a->name)) continue;
      an_out_raw(&c->o, ",", 1);
      an_out_jstr(&c->o, a->name, strlen(a->name));
      an_out_raw(&c->o, ":", 1);
      an_out_jval(&c->o, &a->value);
    }
    an_out_raw(&c->o, "}", 1);
  }
  an_out_raw(&c->o, "}", 1);
  c->n_ops++;
}

static void emit_flow(chrome *c, int64_t id, uint64_t from_tid, int64_t from_ts, uint64_t to_tid,
                      int64_t to_ts) {
  thread_meta(c, from_tid);
  sep(c);
  an_out_fmt(&c->o,
             "{\"name\":\"fw_parent\",\"cat\":\"fw_link\",\"ph\":\"s\",\"id\":%lld,"
             "\"pid\":%lld,\"tid\":%llu,\"ts\":",
             (long long)id, (long long)c->pid, (unsigned long long)from_tid);
  put_us(&c->o, from_ts);
  an_out_fmt(&c->o,
             "},\n{\"name\":\"fw_parent\",\"cat\":\"fw_link\",\"ph\":\"f\",\"bp\":\"e\","
             "\"id\":%lld,\"pid\":%lld,\"tid\":%llu,\"ts\":",
             (long long)id, (long long)c->pid, (unsigned long long)to_tid);
  put_us(&c->o, to_ts);
  an_out_raw(&c->o, "}", 1);
  c->n_flows++;
}

/* Flows waiting for fw_parent `id`, which was just laid out at (tid, start). */
static void resolve_flows(chrome *c, int64_t id, uint64_t tid, int64_t start) {
  for (size_t i = 0; i < c->n_waiting;) {
    if (c->waiting[i].fw_parent == id) {
      emit_flow(c, c->waiting[i].op_id, tid, start, c->waiting[i].tid, c->waiting[i].ts);
      c->waiting[i] = c->waiting[--c->n_waiting];
    } else {
      i++;
    }
  }
}

static tbuf *tbuf_of(chrome *c, uint64_t tid) {
  uint64_t ix;
  if (an_u64map_get(&c->tb_ix, tid, &ix)) return &c->tb[ix];
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
  c->n_tb++;
  return b;
}

/* The thread's buffered slices, last first (each one's parent before it). */
static void tbuf_flush(chrome *c, tbuf *b) {
  if (b->out.failed) c->o.failed = true;
  for (size_t i = b->n; i-- > 0;) {
    size_t end = i + 1 < b->n ? b->offs[i + 1] : b->out.mem_len;
    sep(c);
    an_out_raw(&c->o, b->out.mem + b->offs[i], end - b->offs[i]);
  }
  b->out.mem_len = 0; /* the buffer is kept for the thread's next slices */
  b->out.failed = false;
  b->n = 0;
}

/* emit_op into the slice's thread buffer (directly when memory runs out). */
static bool emit_op_buffered(chrome *c, const rd_rnode *n, int64_t ts, int64_t dur) {
  tbuf *b = tbuf_of(c, n->tid);
  if (b && b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    size_t *v = realloc(b->offs, cap * sizeof *v);
    if (v) {
      b->offs = v;
      b->cap = cap;
    } else {
      b = NULL;
    }
  }
  if (!b) {
    emit_op(c, n, ts, dur);
    return true;
  }
  b->offs[b->n++] = b->out.mem_len;
  an_out saved = c->o;
  bool first = c->first_event;
  c->o = b->out;
  c->first_event = true; /* no separator inside the buffer */
  emit_op(c, n, ts, dur);
  b->out = c->o;
  c->o = saved;
  c->first_event = first;
  /* A top-level op ends its thread's batch; a huge one is written as it is. */
  bool top = an_u64map_get(&c->thread_nodes, (uint64_t)n->ctrl_deps, NULL);
  if (top || b->out.mem_len > TBUF_MAX) tbuf_flush(c, b);
  return true;
}

static bool node(chrome *c, const rd_rnode *n) {
  if (an_is_process_node(n)) return true;
  if (an_is_thread_node(n)) {
    thread_meta_named(c, n->tid, n);
    if (n->id > 0 && !an_u64map_put(&c->thread_nodes, (uint64_t)n->id, 1)) return false;
    an_u64map_del(&c->pending, (uint64_t)n->id);
    return true;
  }
  if (c->mode == 0) c->mode = n->has_timing ? 1 : 2;
  thread_meta(c, n->tid);
  uint64_t pv;
  bool had = an_u64map_get(&c->pending, (uint64_t)n->id, &pv);
  if (had) an_u64map_del(&c->pending, (uint64_t)n->id);
  if (c->mode == 1) {
    if (!n->has_timing) {
      c->n_skipped_untimed++;
      return true;
    }
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
      if (!strcmp(n->attrs[i].name, "ts_ns")) tns = &n->attrs[i];
      if (!strcmp(n->attrs[i].name, "dur_ns")) dns = &n->attrs[i];
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
    if (!an_u64map_get(&c->pending, (uint64_t)n->ctrl_deps, &cur) || (int64_t)cur < end) {
      if (!an_u64map_put(&c->pending, (uint64_t)n->ctrl_deps, (uint64_t)end)) return false;
    }
    if (c->flows && n->fw_parent != 0) emit_flow(c, n->id, n->fw_tid, ts, n->tid, ts);
    return true;
  }
  /* Synthetic layout (children come before their parent): a leaf takes the next 1 us of its
   * thread; a parent spans from its first child's start to 1 us after its last child. (ns) */
  uint64_t cur = 0;
  an_u64map_get(&c->cursor, n->tid, &cur);
  int64_t start = had ? (int64_t)pv : (int64_t)cur;
  int64_t end = (int64_t)cur + 1000;
  if (!an_u64map_put(&c->cursor, n->tid, (uint64_t)end)) return false;
  emit_op(c, n, start, end - start);
  if (!an_u64map_get(&c->pending, (uint64_t)n->ctrl_deps, NULL)) {
    if (!an_u64map_put(&c->pending, (uint64_t)n->ctrl_deps, (uint64_t)start)) return false;
  }
  resolve_flows(c, n->id, n->tid, start);
  if (c->flows && n->fw_parent != 0) {
    if (c->n_waiting == c->cap_waiting) {
      size_t nc = c->cap_waiting ? c->cap_waiting * 2 : 64;
      flow *nw = realloc(c->waiting, nc * sizeof *nw);
      if (nw == NULL) return false;
      c->waiting = nw;
      c->cap_waiting = nc;
    }
    c->waiting[c->n_waiting++] = (flow){n->id, n->tid, start, (int64_t)n->fw_parent};
  }
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
  if (to_file && strcmp(file, out_path) == 0)
    return cli_usage(CMD, "the output would overwrite the input '%s'", file);

  cli_input in;
  if (cli_open(&in, CMD, file, NULL) != 0) return ETR_CLI_FAIL;
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
  an_out_cstr(&c.o, "{\"traceEvents\":[\n");
  sep(&c);
  an_out_fmt(&c.o,
             "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":0,"
             "\"args\":{\"name\":",
             (long long)c.pid);
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  char pname[512];
  snprintf(pname, sizeof pname, "etr %s (pid %lld)", strcmp(file, "-") == 0 ? "<stdin>" : base,
           (long long)c.pid);
  an_out_jstr(&c.o, pname, strlen(pname));
  an_out_cstr(&c.o, "}}");

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
    c.n_flows_dropped = c.n_waiting;
    an_out_cstr(&c.o,
                "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"etr chrome\","
                "\"schema\":");
    const char *schema = h && h->schema ? h->schema : "";
    an_out_jstr(&c.o, schema, strlen(schema));
    an_out_fmt(&c.o, ",\"timing\":\"%s\"}}\n",
               c.mode == 2 ? "synthetic: no timing in the trace, 1 us per op in recorded order"
                           : "recorded");
    status = cli_close_output(CMD, f, out_path);
    f = NULL;
  }
  if (f != NULL) {
    if (to_file) {
      fclose(f);
      cli_discard_output(out_path); /* no half-written output */
    } else {
      fflush(f);
    }
  }
  if (status == ETR_CLI_OK) {
    if (c.mode == 2)
      fprintf(stderr,
              "etr chrome: note: %s has no timing; ops are laid out 1 us each in "
              "recorded order\n",
              file);
    if (c.n_skipped_untimed)
      fprintf(stderr, "etr chrome: note: %llu op(s) without timing left out\n",
              (unsigned long long)c.n_skipped_untimed);
    if (c.n_flows_dropped)
      fprintf(stderr,
              "etr chrome: note: %llu fw_parent flow(s) left out (fw_parent not found "
              "after the op)\n",
              (unsigned long long)c.n_flows_dropped);
  }
  cli_close(&in);
  an_u64map_free(&c.threads);
  an_u64map_free(&c.cursor);
  an_u64map_free(&c.pending);
  free(c.waiting);
  for (size_t i = 0; i < c.n_tb; i++) {
    free(c.tb[i].out.mem);
    free(c.tb[i].offs);
  }
  free(c.tb);
  an_u64map_free(&c.tb_ix);
  an_u64map_free(&c.thread_nodes);
  return status;
}
