/* etr repair FILE -o OUT — a trace cut short (kill -9, power loss, full disk) made valid again
 * (docs/RELIABILITY.md), streaming.
 *
 * Two streams over the same input: the reader (json/reader.h) parses it and hands over each
 * complete node with its byte offset; a second, raw stream (the same bytes, through the
 * reader's own byte source, rd_source: gzip and zstd decompressed by the one implementation)
 * copies those bytes to OUT unchanged. So the output is
 * the input's bytes up to the end of the last complete node — header, separators and nodes
 * byte for byte — followed by what repair adds: a placeholder node for each parent that
 * kept nodes name but the file lacks (ops still open at the crash), the process node, and
 * the footer (finish_ts, traceback tables, an "etr" object with a "repair" member).
 * An intact input is copied unchanged (decompressed when it was gzip).
 *
 * Memory: a bitset of the node ids seen (64-byte pages only where ids occur: ~1.5 bits an
 * id when ids are dense, ~150 bytes when scattered), one entry per parent referenced but
 * not read yet (children come before parents, so this is bounded by nesting depth times
 * threads), one word per thread, and the reader's own bounded buffers. An input that is not
 * a regular file (stdin from a pipe, a FIFO) is first copied to an unlinked temporary file,
 * which both streams then read.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "etr/common.h"
#include "lib_an_util.h"

#define CMD "repair"
#define PROCESS_NAME "[pytorch|profiler|execution_trace|process]"
#define THREAD_NAME "[pytorch|profiler|execution_trace|thread]"
#define PLACEHOLDER_NAME "[etr|repair|unfinished]"
#define RAW_BLOCK (64u << 10)   /* bytes read / inflated at once by the raw stream */
#define MAX_TB_TABLE (1u << 24) /* largest empty tracebacks table written for lost frames */

#ifndef ETR_TOOL_VERSION
#define ETR_TOOL_VERSION "unknown"
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: etr repair [--json] FILE -o OUT\n"
          "\n"
          "Makes a trace that was cut short (kill -9, power loss, full disk) valid again.\n"
          "OUT holds every node of FILE that was completely written, byte for byte (with\n"
          "the header and separators before it), then what repair adds:\n"
          "  - a placeholder node for each parent id that kept nodes name in ctrl_deps but\n"
          "    the file lacks (an op still open at the crash): name " PLACEHOLDER_NAME
          ",\n"
          "    the missing id, attr etr_incomplete = 1, the tid of its children, ctrl_deps =\n"
          "    that thread's node; ts / inclusive_dur span its written children (a lower\n"
          "    bound), exclusive_dur 0. A thread with ops but no thread node (in traces\n"
          "    that write it at thread exit) gets one with a new id;\n"
          "  - the process node (id 1), when absent;\n"
          "  - finish_ts (FILE's own when it was written, else the end of the last timed\n"
          "    node, ts + inclusive_dur, in ms; else start_ts), the tables after it that were\n"
          "    written whole, and \"etr\": {..., \"repair\": {nodes_kept, bytes_dropped, ...}}\n"
          "    so a repaired trace says so.\n"
          "Traceback frames are written only at close, so a cut trace has nodes with a\n"
          "\"traceback\" attr and no tables: the attrs are kept and each id gets an empty\n"
          "traceback ([]: frames unknown), counted as tracebacks_lost.\n"
          "An intact FILE is copied unchanged. The input stops at the first byte that cannot\n"
          "continue a trace (end of file, a zero-filled tail, corrupt data): everything from\n"
          "the end of the last complete node on is dropped and counted.\n"
          "\n"
          "One report line goes to stderr: nodes kept, bytes dropped, nodes added.\n"
          "\n"
          "  -o, --output OUT   where to write the repaired trace ('-' = stdout); never FILE\n"
          "                     itself; removed again when repair fails\n"
          "  --json             the report as one JSON object on stdout instead (not with\n"
          "                     -o -)\n"
          "  --name NAME        FILE's name in the report (etr convert names the log)\n"
          "  -h, --help         this text\n"
          "  FILE               a trace, .json or gzip- or zstd-compressed (a file cut short is\n"
          "                     repaired from what decompresses; OUT is plain JSON); '-'\n"
          "                     reads stdin; a pipe or FIFO is first copied to $TMPDIR\n"
          "\n"
          "exit status: 0 repaired (or intact, copied), 1 cannot write OUT or read FILE\n"
          "through, 2 usage error or FILE is not a trace (no complete header: nothing is\n"
          "written).\n");
}

/* ------------------------------------------------------------ raw stream ---- */

/* The input's bytes, decompressed as the reader decompresses them: read through the reader's
 * own byte source (json/reader.h, rd_source), with pread from `fd` so that it never disturbs
 * the reader's file offset. How the source says the input ended (a cut or corrupt gzip or
 * zstd stream) is where the raw stream stops, `stop` saying why; the bytes decompressed
 * before that point are copied. */
typedef struct rawsrc {
  int fd;
  uint64_t base; /* file offset of the input's first byte */
  rd_source *src;
  const unsigned char *buf; /* the source's current block */
  size_t len, pos;
  uint64_t off; /* offset of buf[0] in the (decompressed) input */
  bool eof;
  const char *stop; /* why the raw stream ended early (corrupt or cut gzip), or NULL */
  int err;          /* errno of a read error, 0 if none */
} rawsrc;

/* Why the raw stream stops where the source ended, or NULL at the end of a whole input. */
static const char *raw_stop_reason(const rawsrc *s, rd_source_end end) {
  bool gz = rd_source_is_gzip(s->src);
  switch (end) {
    case RD_SRC_CUT:
      return gz ? "the gzip stream is cut short" : "the zstd stream is cut short";
    case RD_SRC_CORRUPT:
      return gz ? "the gzip data is corrupt" : "the zstd data is corrupt";
    case RD_SRC_NO_RESET:
      return "gzip: cannot reset";
    default:
      return NULL;
  }
}

/* Makes buf[pos..len) non-empty. Returns bytes available, 0 at the end, -1 on read error. */
static ssize_t raw_fill(rawsrc *s) {
  if (s->pos < s->len) return (ssize_t)(s->len - s->pos);
  if (s->eof) return 0;
  s->off += s->len;
  s->len = s->pos = 0;
  const unsigned char *p = NULL;
  ssize_t k = rd_source_read(s->src, &p);
  if (k < 0) {
    s->err = rd_source_errno(s->src);
    return -1;
  }
  rd_source_end end = rd_source_ended(s->src, NULL);
  if (end != RD_SRC_OPEN) {
    s->eof = true;
    s->stop = raw_stop_reason(s, end);
  }
  s->buf = p;
  s->len = (size_t)k;
  return k;
}

static uint64_t raw_at(const rawsrc *s) { return s->off + s->pos; }

/* Copies the input up to offset `to` (or the end) to o (NULL: skips). Returns the offset
 * reached, or UINT64_MAX after a read error. */
static uint64_t raw_copy(rawsrc *s, an_out *o, uint64_t to) {
  while (raw_at(s) < to) {
    ssize_t k = raw_fill(s);
    if (k < 0) return UINT64_MAX;
    if (k == 0) break;
    uint64_t want = to - raw_at(s);
    size_t n = want < (uint64_t)k ? (size_t)want : (size_t)k;
    if (o) an_out_raw(o, (const char *)s->buf + s->pos, n);
    s->pos += n;
  }
  return raw_at(s);
}

/* Copies one JSON object starting at the current byte (a '{') to o and returns the offset
 * just past its closing '}'; 0 when the input does not hold one there (which the reader,
 * having parsed it, rules out), UINT64_MAX after a read error. */
static uint64_t raw_copy_object(rawsrc *s, an_out *o) {
  size_t depth = 0;
  bool in_str = false, esc = false, started = false;
  for (;;) {
    ssize_t k = raw_fill(s);
    if (k < 0) return UINT64_MAX;
    if (k == 0) return 0;
    const unsigned char *p = s->buf + s->pos, *e = s->buf + s->len, *start = p;
    if (!started) {
      if (*p != '{') return 0;
      started = true;
    }
    bool done = false;
    while (p < e) {
      if (esc) {
        esc = false;
        p++;
      } else if (in_str) {
        while (p < e && *p != '"' && *p != '\\') p++;
        if (p == e) break;
        if (*p == '\\')
          esc = true;
        else
          in_str = false;
        p++;
      } else {
        unsigned char c = *p++;
        if (c == '"') {
          in_str = true;
        } else if (c == '{' || c == '[') {
          depth++;
        } else if (c == '}' || c == ']') {
          if (--depth == 0) {
            done = true;
            break;
          }
        }
      }
    }
    an_out_raw(o, (const char *)start, (size_t)(p - start));
    s->pos += (size_t)(p - start);
    if (done) return raw_at(s);
  }
}

/* Copies the header to o: the input up to and including the '[' that opens the top-level
 * "nodes" array. Returns the offset after it; 0 when there is none (which the reader, having
 * read the header, rules out), UINT64_MAX after a read error. */
static uint64_t raw_copy_header(rawsrc *s, an_out *o) {
  size_t depth = 0, klen = 0;
  bool in_str = false, esc = false, str_top = false;
  int st = 0; /* 1: a top-level string "nodes" was read, 2: then its ':' */
  char key[6];
  for (;;) {
    ssize_t k = raw_fill(s);
    if (k < 0) return UINT64_MAX;
    if (k == 0) return 0;
    const unsigned char *p = s->buf + s->pos, *e = s->buf + s->len, *start = p;
    bool done = false;
    while (p < e && !done) {
      unsigned char c = *p++;
      if (in_str) {
        if (esc || c == '\\') {
          esc = !esc;
          klen = sizeof key; /* an escape: not the plain key "nodes" */
        } else if (c == '"') {
          in_str = false;
          if (str_top) st = klen == 5 && !memcmp(key, "nodes", 5) ? 1 : 0;
        } else if (klen < sizeof key) {
          key[klen++] = (char)c;
        } else {
          klen = sizeof key;
        }
        continue;
      }
      switch (c) {
        case '"':
          in_str = true;
          str_top = depth == 1;
          klen = 0;
          break;
        case ':':
          st = depth == 1 && st == 1 ? 2 : 0;
          break;
        case '[':
          if (depth == 1 && st == 2) done = true;
          depth++;
          st = 0;
          break;
        case '{':
          depth++;
          st = 0;
          break;
        case '}':
        case ']':
          if (depth) depth--;
          st = 0;
          break;
        case ' ':
        case '\t':
        case '\n':
        case '\r':
          break;
        default:
          st = 0;
          break;
      }
    }
    an_out_raw(o, (const char *)start, (size_t)(p - start));
    s->pos += (size_t)(p - start);
    if (done) return raw_at(s);
  }
}

static void raw_free(rawsrc *s) { rd_source_close(s->src); }

/* ------------------------------------------------------------- id tables ---- */

/* A set of ids: 512-bit (64-byte) bitmap pages, only where ids occur, allocated in slabs
 * of 256 pages. Dense ids (a counter shared with tensor ids) cost about 1.5 bits an id;
 * scattered ones at worst a page and its index slots (~150 bytes) each. */
#define PAGE_BITS 9
#define PAGE_WORDS ((1u << PAGE_BITS) / 64)
#define SLAB_PAGES 256u
typedef struct idset {
  an_u64map index; /* id >> PAGE_BITS -> page number */
  uint64_t **slabs;
  size_t n_pages, n_slabs;
} idset;

static uint64_t *idset_page(idset *s, uint64_t id, bool create) {
  uint64_t pg;
  if (!an_u64map_get(&s->index, id >> PAGE_BITS, &pg)) {
    if (!create) return NULL;
    if (s->n_pages == s->n_slabs * SLAB_PAGES) {
      uint64_t **ns = realloc(s->slabs, (s->n_slabs + 1) * sizeof *ns);
      if (!ns) return NULL;
      s->slabs = ns;
      if (!(ns[s->n_slabs] = calloc(SLAB_PAGES * PAGE_WORDS, sizeof(uint64_t)))) return NULL;
      s->n_slabs++;
    }
    pg = s->n_pages;
    if (!an_u64map_put(&s->index, id >> PAGE_BITS, pg)) return NULL;
    s->n_pages++;
  }
  return s->slabs[pg / SLAB_PAGES] + (pg % SLAB_PAGES) * PAGE_WORDS;
}

static bool idset_add(idset *s, uint64_t id) {
  uint64_t *p = idset_page(s, id, true);
  if (!p) return false;
  uint64_t bit = id & ((1u << PAGE_BITS) - 1);
  p[bit >> 6] |= 1ull << (bit & 63);
  return true;
}

static bool idset_has(idset *s, uint64_t id) {
  uint64_t *p = idset_page(s, id, false);
  uint64_t bit = id & ((1u << PAGE_BITS) - 1);
  return p && (p[bit >> 6] >> (bit & 63) & 1);
}

static void idset_free(idset *s) {
  for (size_t i = 0; i < s->n_slabs; i++) free(s->slabs[i]);
  free(s->slabs);
  an_u64map_free(&s->index);
}

/* A parent named by a kept node but not read (yet). */
typedef struct pend {
  uint64_t id, tid;
  int64_t ts_min, end_max; /* span of its timed children, when `timed` */
  bool timed, live;
  size_t next_free;
} pend;

/* ---------------------------------------------------------------- repair ---- */

typedef struct repair {
  const char *file; /* as messages give it */
  const char *out_path;
  an_out o;
  rd_reader *r;
  rawsrc raw;
  bool strides; /* schema >= 1.1.1: empty inputs/outputs carry "strides" */
  /* what was read */
  uint64_t kept, last_end;
  bool any_node_out; /* a node is in the output (for the separator) */
  bool have_process;
  idset seen;
  an_u64map threads; /* tid -> thread node id */
  an_u64map pend_ix; /* id -> index in pends */
  pend *pends;
  size_t n_pends, cap_pends, free_head; /* free list through next_free; SIZE_MAX ends */
  uint64_t max_id;                      /* the largest id a kept node has or names as its parent */
  bool timed_any;
  int64_t end_us_max;
  uint64_t tb_nodes, tb_max;
  /* what was added */
  uint64_t placeholders, threads_added;
  bool process_added;
  uint64_t tracebacks_lost;
  int64_t finish_ts;
  /* the outcome */
  bool intact;
  bool intact_fixed; /* complete, but placeholders were added for nodes it names */
  uint64_t input_bytes, dropped;
  const char *reason; /* why the input stops (NULL when intact) */
  uint64_t reason_at;
  char why[600];
} repair;

/* a + b and a - b, saturated (timing values come from the file: no overflow on any input) */
static int64_t sat_add(int64_t a, int64_t b) {
  if (b > 0 && a > INT64_MAX - b) return INT64_MAX;
  if (b < 0 && a < INT64_MIN - b) return INT64_MIN;
  return a + b;
}

static int64_t sat_sub(int64_t a, int64_t b) {
  if (b < 0 && a > INT64_MAX + b) return INT64_MAX;
  if (b > 0 && a < INT64_MIN + b) return INT64_MIN;
  return a - b;
}

/* A reference to id from node n (its ctrl_deps parent, or with fw its fw_parent, an op of
 * the forward thread fw_tid); the referenced node's thread and, for a parent, the time span
 * it must cover are remembered in case it never comes. */
static bool pend_ref_as(repair *w, uint64_t id, const rd_rnode *n, bool fw) {
  uint64_t ix;
  pend *p;
  if (an_u64map_get(&w->pend_ix, id, &ix)) {
    p = &w->pends[ix];
  } else {
    if (w->free_head != SIZE_MAX) {
      ix = w->free_head;
      w->free_head = w->pends[ix].next_free;
    } else {
      if (w->n_pends == w->cap_pends) {
        size_t cap = w->cap_pends ? w->cap_pends * 2 : 64;
        pend *np = realloc(w->pends, cap * sizeof *np);
        if (!np) return false;
        w->pends = np;
        w->cap_pends = cap;
      }
      ix = w->n_pends++;
    }
    if (!an_u64map_put(&w->pend_ix, id, ix)) return false;
    p = &w->pends[ix];
    memset(p, 0, sizeof *p);
    p->id = id;
    p->tid = fw && n->fw_tid ? n->fw_tid : n->tid;
    p->live = true;
  }
  if (n->has_timing && !fw) {
    int64_t end = sat_add(n->ts, n->inclusive_dur);
    if (!p->timed || n->ts < p->ts_min) p->ts_min = n->ts;
    if (!p->timed || end > p->end_max) p->end_max = end;
    p->timed = true;
  }
  return true;
}

static bool pend_ref(repair *w, uint64_t id, const rd_rnode *n) {
  return pend_ref_as(w, id, n, false);
}

static void pend_done(repair *w, uint64_t id) {
  uint64_t ix;
  if (!an_u64map_get(&w->pend_ix, id, &ix)) return;
  an_u64map_del(&w->pend_ix, id);
  w->pends[ix].live = false;
  w->pends[ix].next_free = w->free_head;
  w->free_head = ix;
}

/* Bookkeeping of one kept node. false when memory ran out. */
static bool note_node(repair *w, const rd_rnode *n) {
  if (n->id > 0 && (uint64_t)n->id > w->max_id) w->max_id = (uint64_t)n->id;
  if (n->ctrl_deps > 0 && (uint64_t)n->ctrl_deps > w->max_id) w->max_id = (uint64_t)n->ctrl_deps;
  if (n->id > 0) {
    if (!idset_add(&w->seen, (uint64_t)n->id)) return false;
    pend_done(w, (uint64_t)n->id);
  }
  if (an_is_process_node(n)) {
    w->have_process = true;
  } else if (an_is_thread_node(n)) {
    if (n->id > 0 && !an_u64map_put(&w->threads, n->tid, (uint64_t)n->id)) return false;
  } else if (n->ctrl_deps > 0 && !idset_has(&w->seen, (uint64_t)n->ctrl_deps)) {
    if (!pend_ref(w, (uint64_t)n->ctrl_deps, n)) return false;
  }
  /* The forward op a backward op names may come later (it was still open), or never (cut
   * off): a reference like the parent's, resolved by a placeholder on the forward thread. */
  if (n->fw_parent > 0 && n->fw_parent > w->max_id) w->max_id = n->fw_parent;
  if (n->fw_parent > 0 && !idset_has(&w->seen, n->fw_parent) &&
      !pend_ref_as(w, n->fw_parent, n, true))
    return false;
  if (n->has_timing) {
    int64_t end = sat_add(n->ts, n->inclusive_dur);
    if (!w->timed_any || end > w->end_us_max) w->end_us_max = end;
    w->timed_any = true;
  }
  if (n->has_traceback) {
    if (!w->tb_nodes || n->traceback > w->tb_max) w->tb_max = n->traceback;
    w->tb_nodes++;
  }
  return true;
}

/* ---- writing what repair adds ---- */

static void put_attr_u64(an_out *o, const char *name, uint64_t v, bool first) {
  an_out_fmt(o, "%s{\"name\": \"%s\", \"type\": \"uint64\", \"value\": %" PRIu64 "}",
             first ? "" : ",", name, v);
}

/* A node in the recorder's layout (emit.c): empty inputs/outputs, the nine base attrs. */
static void put_node(repair *w, uint64_t id, const char *name, uint64_t parent, uint64_t tid,
                     uint64_t scope, const pend *timing, bool incomplete) {
  an_out *o = &w->o;
  an_out_fmt(o, "%s\n    {\"id\": %" PRIu64 ", \"name\": \"%s\", \"ctrl_deps\": %" PRIu64 ", ",
             w->any_node_out ? "," : "", id, name, parent);
  w->any_node_out = true;
  const char *io = w->strides ? "{\"values\": [], \"shapes\": [], \"types\": [], \"strides\": []}"
                              : "{\"values\": [], \"shapes\": [], \"types\": []}";
  an_out_fmt(o, "\"inputs\": %s, \"outputs\": %s, ", io, io);
  if (timing && timing->timed)
    an_out_fmt(o, "\"ts\": %" PRId64 ", \"inclusive_dur\": %" PRId64 ", \"exclusive_dur\": 0, ",
               timing->ts_min, sat_sub(timing->end_max, timing->ts_min));
  an_out_cstr(o, "\"attrs\": [");
  put_attr_u64(o, "rf_id", 0, true);
  put_attr_u64(o, "fw_parent", 0, false);
  an_out_cstr(o, ",{\"name\": \"seq_id\", \"type\": \"int64\", \"value\": -1}");
  put_attr_u64(o, "scope", scope, false);
  put_attr_u64(o, "tid", tid, false);
  put_attr_u64(o, "fw_tid", 0, false);
  an_out_cstr(o,
              ",{\"name\": \"op_schema\", \"type\": \"string\", \"value\": \"\"}"
              ",{\"name\": \"kernel_backend\", \"type\": \"string\", \"value\": \"\"}"
              ",{\"name\": \"kernel_file\", \"type\": \"string\", \"value\": \"\"}");
  if (incomplete) put_attr_u64(o, "etr_incomplete", 1, false);
  an_out_cstr(o, "]}");
}

static int cmp_pend(const void *a, const void *b) {
  const pend *x = *(const pend *const *)a, *y = *(const pend *const *)b;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static size_t live_pends(const repair *w) {
  size_t n = 0;
  for (size_t i = 0; i < w->n_pends; i++)
    if (w->pends[i].live && w->pends[i].id != 1) n++;
  return n;
}

/* Placeholders for the missing parents, thread nodes a thread lacks, the process node.
 * false when memory ran out. */
static bool add_nodes(repair *w) {
  size_t n = 0;
  pend **v = malloc((w->n_pends ? w->n_pends : 1) * sizeof *v);
  if (!v) return false;
  for (size_t i = 0; i < w->n_pends; i++)
    if (w->pends[i].live && w->pends[i].id != 1) v[n++] = &w->pends[i];
  qsort(v, n, sizeof *v, cmp_pend); /* by tid, then id */
  for (size_t i = 0; i < n; i++) {
    pend *p = v[i];
    uint64_t th;
    if (!an_u64map_get(&w->threads, p->tid, &th)) {
      /* no thread node for this tid (one written at thread exit): a new one, with an id
       * above every id the file names */
      th = ++w->max_id;
      if (!an_u64map_put(&w->threads, p->tid, th)) {
        free(v);
        return false;
      }
      put_node(w, th, THREAD_NAME, 1, p->tid, 7, NULL, false);
      w->threads_added++;
    }
    put_node(w, p->id, PLACEHOLDER_NAME, th, p->tid, 0, p, true);
    w->placeholders++;
  }
  free(v);
  if (!w->have_process) {
    put_node(w, 1, PROCESS_NAME, 1, 0, 7, NULL, false);
    w->process_added = true;
  }
  return true;
}

static void put_repair_member(repair *w) {
  an_out_fmt(&w->o,
             "\"repair\": {\"nodes_kept\": %" PRIu64 ", \"bytes_dropped\": %" PRIu64
             ", \"cut_at\": %" PRIu64 ", \"placeholders_added\": %" PRIu64
             ", \"thread_nodes_added\": %" PRIu64
             ", \"process_node_added\": %d"
             ", \"tracebacks_lost\": %" PRIu64 ", \"source_bytes\": %" PRIu64
             ", \"source_json_bytes\": %" PRIu64 "}",
             w->kept, w->dropped, w->last_end, w->placeholders, w->threads_added,
             w->process_added ? 1 : 0, w->tracebacks_lost, rd_source_input_read(w->raw.src),
             w->input_bytes);
}

/* The footer: "]", finish_ts, the tables written whole, "etr". */
static void put_footer(repair *w) {
  an_out *o = &w->o;
  rd_reader *r = w->r;
  const rd_rheader *h = rd_header(r);
  int64_t fin = rd_finish_ts(r);
  if (fin < 0) {
    fin = h->start_ts > 0 ? h->start_ts : 0;
    if (w->timed_any && w->end_us_max > 0) {
      int64_t ms = w->end_us_max / 1000 + (w->end_us_max % 1000 != 0);
      if (ms > fin) fin = ms;
    }
  }
  w->finish_ts = fin;
  an_out_fmt(o, "\n  ],\n  \"finish_ts\": %" PRId64 ",\n  ", fin);
  /* other keys of the trailer read whole, in file order */
  size_t nk;
  const char *const *keys = rd_top_keys(r, &nk);
  bool after = false;
  for (size_t i = 0; i < nk; i++) {
    const char *k = keys[i];
    if (!strcmp(k, "nodes")) {
      after = true;
      continue;
    }
    if (!after || !strcmp(k, "finish_ts") || !strcmp(k, "frames") || !strcmp(k, "tracebacks") ||
        !strcmp(k, "etr"))
      continue;
    const rd_jval *v = rd_trailer(r, k);
    if (!v) continue;
    an_out_jstr(o, k, strlen(k));
    an_out_cstr(o, ": ");
    an_out_jval(o, v);
    an_out_cstr(o, ",\n  ");
  }
  const rd_jval *frames = rd_trailer(r, "frames");
  const rd_jval *tbs = rd_trailer(r, "tracebacks");
  if (tbs || (w->tb_nodes && w->tb_max < MAX_TB_TABLE) || frames) {
    an_out_cstr(o, "\"frames\": ");
    if (frames)
      an_out_jval(o, frames);
    else
      an_out_cstr(o, "[]");
    if (tbs) {
      an_out_cstr(o, ",\n  \"tracebacks\": ");
      an_out_jval(o, tbs);
    } else if (w->tb_nodes && w->tb_max < MAX_TB_TABLE) {
      /* the frames of these tracebacks were never written: each id maps to [] (unknown) */
      w->tracebacks_lost = w->tb_nodes;
      an_out_cstr(o, ",\n  \"tracebacks\": [");
      for (uint64_t i = 0; i <= w->tb_max; i++) an_out_raw(o, i ? ",[]" : "[]", i ? 3 : 2);
      an_out_cstr(o, "]");
    }
    an_out_cstr(o, ",\n  ");
  }
  const rd_jval *etr = rd_trailer(r, "etr");
  const rd_jval *ver = etr ? rd_jobj_get(etr, "version") : NULL;
  an_out_cstr(o, "\"etr\": {\"version\": ");
  if (ver && ver->kind == ETR_J_STRING)
    an_out_jval(o, ver);
  else
    an_out_cstr(o, "\"" ETR_TOOL_VERSION "\"");
  if (etr && etr->kind == ETR_J_OBJECT)
    for (size_t i = 0; i < etr->v.obj.n; i++) {
      const rd_jmember *m = &etr->v.obj.items[i];
      if (!strcmp(m->key, "version") || !strcmp(m->key, "repair")) continue;
      an_out_cstr(o, ", ");
      an_out_jstr(o, m->key, m->key_len);
      an_out_cstr(o, ": ");
      an_out_jval(o, &m->val);
    }
  an_out_cstr(o, ", ");
  put_repair_member(w);
  an_out_cstr(o, "}\n}\n");
}

/* ------------------------------------------------------------------ input ---- */

/* Splits the reader's "FILE: byte N: reason" into N and reason. */
static const char *split_error(rd_reader *r, uint64_t *at) {
  const char *m = rd_error(r);
  const char *p = strstr(m + strlen(rd_path(r)), ": byte ");
  *at = 0;
  if (!p) return m;
  char *end;
  *at = strtoull(p + 7, &end, 10);
  return !strncmp(end, ": ", 2) ? end + 2 : end;
}

/* The raw stream's source for an input that is open on in_fd (stdin, or FILE opened here):
 * a regular file is read again with pread from its current offset; anything else (a pipe,
 * a FIFO, <(...)) is first copied to an unlinked temporary file, which is then put on
 * stdin for the reader ("-"). Returns the fd for the raw stream (its base offset in *base;
 * *spooled says the reader must read "-"), or -1 after printing the error. */
static int raw_source(int in_fd, const char *file, uint64_t *base, bool *spooled) {
  struct stat st;
  *spooled = false;
  if (fstat(in_fd, &st) == 0 && S_ISREG(st.st_mode)) {
    off_t at = lseek(in_fd, 0, SEEK_CUR);
    if (at >= 0) {
      *base = (uint64_t)at;
      return in_fd;
    }
  }
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  char tmpl[4096];
  snprintf(tmpl, sizeof tmpl, "%s/etr-repair-XXXXXX", dir);
  int fd = mkstemp(tmpl);
  if (fd < 0) {
    cli_error(CMD, "%s: cannot create a temporary copy in %s: %s", file, dir, strerror(errno));
    return -1;
  }
  unlink(tmpl);
  char *buf = malloc(RAW_BLOCK);
  if (!buf) {
    cli_error(CMD, "%s: out of memory", file);
    goto fail;
  }
  for (;;) {
    ssize_t k = read(in_fd, buf, RAW_BLOCK);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      cli_error(CMD, "%s: read error: %s", file, strerror(errno));
      goto fail;
    }
    if (k == 0) break;
    for (ssize_t done = 0; done < k;) {
      ssize_t m = write(fd, buf + done, (size_t)(k - done));
      if (m < 0 && errno == EINTR) continue;
      if (m < 0) {
        cli_error(CMD, "%s: cannot write the temporary copy in %s: %s", file, dir, strerror(errno));
        goto fail;
      }
      done += m;
    }
  }
  free(buf);
  buf = NULL;
  if (lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, STDIN_FILENO) < 0) {
    cli_error(CMD, "%s: cannot read back the temporary copy: %s", file, strerror(errno));
    goto fail;
  }
  *base = 0;
  *spooled = true;
  return fd;
fail:
  free(buf);
  close(fd);
  return -1;
}

/* ----------------------------------------------------------------- report ---- */

static int report(const repair *w, bool json) {
  if (json) {
    an_out jo = {.f = stdout};
    an_out_cstr(&jo, "{\"file\": ");
    an_out_jstr(&jo, w->file, strlen(w->file));
    an_out_cstr(&jo, ", \"output\": ");
    an_out_jstr(&jo, w->out_path, strlen(w->out_path));
    an_out_fmt(&jo,
               ", \"intact\": %s, \"gzip\": %s, \"nodes_kept\": %" PRIu64
               ", \"bytes_dropped\": %" PRIu64 ", \"cut_at\": %" PRIu64
               ", \"placeholders_added\": %" PRIu64 ", \"thread_nodes_added\": %" PRIu64
               ", \"process_node_added\": %s, \"tracebacks_lost\": %" PRIu64
               ", \"finish_ts\": %" PRId64 ", \"source_bytes\": %" PRIu64
               ", \"source_json_bytes\": %" PRIu64 ", \"stopped_at\": %" PRIu64 ", \"reason\": ",
               w->intact ? "true" : "false", rd_source_is_gzip(w->raw.src) ? "true" : "false",
               w->kept, w->dropped, w->intact ? w->input_bytes : w->last_end, w->placeholders,
               w->threads_added, w->process_added ? "true" : "false", w->tracebacks_lost,
               w->intact ? rd_finish_ts(w->r) : w->finish_ts, rd_source_input_read(w->raw.src),
               w->input_bytes, w->reason_at);
    if (w->reason)
      an_out_jstr(&jo, w->reason, strlen(w->reason));
    else
      an_out_cstr(&jo, "null");
    an_out_cstr(&jo, "}\n");
    if (fflush(stdout) != 0 || jo.failed) {
      cli_error(CMD, "<stdout>: write error");
      return ETR_CLI_FAIL;
    }
    return ETR_CLI_OK;
  }
  if (w->intact && w->intact_fixed && w->placeholders == 0) { /* only the process node */
    fprintf(stderr,
            "etr repair: %s: complete (%" PRIu64 " nodes) but for the process node: added\n",
            w->file, w->kept);
    return ETR_CLI_OK;
  }
  if (w->intact && w->intact_fixed) {
    fprintf(stderr,
            "etr repair: %s: complete (%" PRIu64 " nodes), but it names %" PRIu64
            " node%s it lacks (a parent or fw_parent): %" PRIu64 " placeholder%s%s%s added\n",
            w->file, w->kept, w->placeholders, w->placeholders == 1 ? "" : "s", w->placeholders,
            w->placeholders == 1 ? "" : "s", w->threads_added ? " and thread nodes" : "",
            w->process_added ? " and the process node" : "");
    return ETR_CLI_OK;
  }
  if (w->intact) {
    fprintf(stderr, "etr repair: %s: intact (%" PRIu64 " nodes): copied unchanged%s\n", w->file,
            w->kept, rd_source_is_gzip(w->raw.src) ? " (decompressed)" : "");
    return ETR_CLI_OK;
  }
  char added[160] = "nothing";
  int k = 0;
  if (w->process_added) k += snprintf(added, sizeof added, "1 process node");
  if (w->placeholders)
    k += snprintf(added + k, sizeof added - (size_t)k, "%s%" PRIu64 " placeholder%s", k ? ", " : "",
                  w->placeholders, w->placeholders == 1 ? "" : "s");
  if (w->threads_added)
    snprintf(added + k, sizeof added - (size_t)k, "%s%" PRIu64 " thread node%s", k ? ", " : "",
             w->threads_added, w->threads_added == 1 ? "" : "s");
  char tb[128] = "";
  if (w->tracebacks_lost)
    snprintf(tb, sizeof tb, "; %" PRIu64 " traceback attr%s kept, their frames lost",
             w->tracebacks_lost, w->tracebacks_lost == 1 ? "" : "s");
  fprintf(stderr,
          "etr repair: %s: kept %" PRIu64 " nodes, added %s; dropped %" PRIu64
          " bytes after the %s (byte %" PRIu64 "): %s at byte %" PRIu64 "%s\n",
          w->file, w->kept, added, w->dropped, w->kept ? "last complete node" : "header",
          w->last_end, w->reason, w->reason_at, tb);
  return ETR_CLI_OK;
}

/* ------------------------------------------------------------------- main ---- */

/* The message and status when the reader cannot read FILE's header. */
static int open_failed(repair *w, int rc) {
  if (!w->r) {
    cli_error(CMD, "%s: byte 0: out of memory", w->file);
    return ETR_CLI_FAIL;
  }
  if (rc == ETR_EFORMAT) {
    uint64_t at;
    const char *why = split_error(w->r, &at);
    if (rd_input_consumed(w->r) == 0)
      cli_error(CMD, "%s: byte 0: empty file: not a trace, nothing written", w->file);
    else
      cli_error(CMD,
                "%s: byte %" PRIu64
                ": %s: not a trace, or its header (up to "
                "\"nodes\": [) is cut short; no node to recover, nothing written",
                w->file, at, why);
    return ETR_CLI_USAGE;
  }
  cli_error(CMD, "%s", rd_error(w->r));
  return rc == ETR_EOPEN ? ETR_CLI_USAGE : ETR_CLI_FAIL;
}

/* Copies the header and each complete node. ETR_CLI_OK, or an error status after printing
 * the error. Sets w->intact, or w->reason / w->reason_at for where the input stops. */
static int copy_nodes(repair *w) {
  const rd_rnode *n;
  int rc = 0;
  bool raw_bad = false;
  w->last_end = raw_copy_header(&w->raw, &w->o);
  if (w->last_end == 0 || w->last_end == UINT64_MAX) raw_bad = true;
  while (!raw_bad && (rc = rd_next(w->r, &n)) == 1) {
    if (raw_copy(&w->raw, &w->o, n->offset) != n->offset) {
      raw_bad = true;
      break;
    }
    uint64_t end = raw_copy_object(&w->raw, &w->o);
    if (end == 0 || end == UINT64_MAX) {
      raw_bad = true;
      break;
    }
    w->last_end = end;
    w->kept++;
    w->any_node_out = true;
    if (!note_node(w, n)) {
      cli_error(CMD, "%s: out of memory", w->file);
      return ETR_CLI_FAIL;
    }
  }
  if (raw_bad) {
    if (w->raw.err)
      cli_error(CMD, "%s: read error: %s", w->file, strerror(w->raw.err));
    else
      cli_error(CMD, "%s: byte %" PRIu64 ": the input changed while it was read", w->file,
                raw_at(&w->raw));
    return ETR_CLI_FAIL;
  }
  if (rc == 0) {
    rc = rd_finish(w->r);
    if (rc == 0 && cli_no_skipped(CMD, w->r)) return ETR_CLI_FAIL;
    w->intact = rc == 0;
    if (w->intact) return ETR_CLI_OK;
  }
  if (rc != ETR_EFORMAT) { /* out of memory, a read error: no repair from a partial view */
    cli_error(CMD, "%s", rd_error(w->r));
    return ETR_CLI_FAIL;
  }
  snprintf(w->why, sizeof w->why, "%s", split_error(w->r, &w->reason_at));
  w->reason = w->why;
  return ETR_CLI_OK;
}

int cmd_repair(int argc, char **argv) {
  const char *out_path = NULL, *path = NULL, *name = NULL;
  bool json = false;
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"name", required_argument, NULL, 'n'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  if (cli_wants_help(argc, argv)) {
    usage(stdout);
    return ETR_CLI_OK;
  }
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "-:o:j", opts, NULL)) != -1) {
    switch (c) {
      case 'o':
        if (out_path) return cli_usage(CMD, "one -o only");
        out_path = optarg;
        break;
      case 'j':
        json = true;
        break;
      case 'n':
        name = optarg;
        break;
      case 1:
        if (cli_operand(CMD, optarg, &path)) return ETR_CLI_USAGE;
        break;
      default:
        return cli_getopt_error(CMD, c, argv);
    }
  }
  for (; optind < argc; optind++) /* after "--" */
    if (cli_operand(CMD, argv[optind], &path)) return ETR_CLI_USAGE;
  if (!path) return cli_usage(CMD, "no input file");
  if (!out_path) return cli_usage(CMD, "no output: give -o OUT ('-o -' for stdout)");
  bool to_stdout = !strcmp(out_path, "-");
  if (json && to_stdout) return cli_usage(CMD, "--json prints on stdout: not with -o -");
  bool from_stdin = !strcmp(path, "-");
  if (cli_is_binary_log(path)) {
    cli_error(CMD,
              "%s: a binary event log (ETR_TRACE=x.etr): 'etr convert %s -o OUT' makes its "
              "trace, completed as repair does when it was cut short",
              cli_term(path), cli_term(path));
    return ETR_CLI_USAGE;
  }

  /* never overwrite the input */
  struct stat si, so;
  if (!to_stdout && stat(out_path, &so) == 0 &&
      ((from_stdin && fstat(STDIN_FILENO, &si) == 0) || (!from_stdin && stat(path, &si) == 0)) &&
      si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
    cli_error(CMD, "%s: is the input: write the repaired trace to another file", out_path);
    return ETR_CLI_USAGE;
  }

  repair w;
  memset(&w, 0, sizeof w);
  w.file = name ? name : from_stdin ? "<stdin>" : path;
  w.out_path = out_path;
  w.free_head = SIZE_MAX;
  int status = ETR_CLI_OK, own_fd = -1, open_errno = 0;
  FILE *f = NULL;
  bool created = false;

  /* the raw stream's source, then the reader (which reads the header) */
  int in_fd = from_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
  const char *reader_path = path;
  struct stat st;
  if (in_fd > STDIN_FILENO && fstat(in_fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(in_fd); /* the reader says so */
    in_fd = -1;
  }
  if (in_fd >= 0) {
    bool spooled;
    w.raw.fd = raw_source(in_fd, w.file, &w.raw.base, &spooled);
    if (in_fd != STDIN_FILENO && w.raw.fd != in_fd) close(in_fd);
    if (w.raw.fd < 0) return ETR_CLI_FAIL;
    if (w.raw.fd != STDIN_FILENO) own_fd = w.raw.fd;
    if (spooled) reader_path = "-";
  } else {
    w.raw.fd = -1;
    open_errno = errno; /* reported by the reader below, in the usual form */
  }
  rd_options ro = ETR_READER_OPTIONS_INIT;
  int rc = rd_open(reader_path, &ro, &w.r);
  if (rc < 0) {
    status = open_failed(&w, rc);
    goto done;
  }
  if (w.raw.fd < 0 || rd_source_open(w.raw.fd, w.raw.base, true, RAW_BLOCK, &w.raw.src)) {
    cli_error(CMD, "%s: %s", w.file, w.raw.fd < 0 ? strerror(open_errno) : "out of memory");
    status = ETR_CLI_FAIL;
    goto done;
  }
  const rd_rheader *h = rd_header(w.r);
  w.strides = h->schema_major > 1 ||
              (h->schema_major == 1 &&
               (h->schema_minor > 1 || (h->schema_minor == 1 && h->schema_patch >= 1)));

  /* the output: only once FILE is known to be a trace */
  if (to_stdout) {
    f = stdout;
  } else {
    f = cli_open_output(CMD, out_path);
    if (!f) {
      status = ETR_CLI_FAIL;
      goto done;
    }
    /* removed again on failure only when it is a regular file (never /dev/full & co.) */
    struct stat os;
    created = fstat(fileno(f), &os) == 0 && S_ISREG(os.st_mode);
  }
  setvbuf(f, NULL, _IOFBF, 1u << 20);
  w.o.f = f;

  status = copy_nodes(&w);
  if (status != ETR_CLI_OK) goto done;
  /* A complete file can still name nodes it lacks: finalized at a crash while an op was
   * open (its children name it), or its forward op never written. The placeholders go in
   * before the file's own end, which is kept as it is (tables, stats). */
  if (w.intact && (live_pends(&w) > 0 || !w.have_process)) { /* (etr convert's cut logs) */
    if (!add_nodes(&w)) {
      cli_error(CMD, "%s: out of memory", w.file);
      status = ETR_CLI_FAIL;
      goto done;
    }
    w.intact_fixed = true;
  }
  /* the rest: copied when intact, else counted as dropped and the trace completed */
  w.input_bytes = raw_copy(&w.raw, w.intact ? &w.o : NULL, UINT64_MAX);
  if (w.input_bytes == UINT64_MAX) {
    cli_error(CMD, "%s: read error: %s", w.file, strerror(w.raw.err));
    status = ETR_CLI_FAIL;
    goto done;
  }
  if (!w.intact) {
    if (!add_nodes(&w)) {
      cli_error(CMD, "%s: out of memory", w.file);
      status = ETR_CLI_FAIL;
      goto done;
    }
    w.dropped = w.input_bytes - w.last_end;
    put_footer(&w);
    if (w.raw.stop) {
      w.reason = w.raw.stop;
      w.reason_at = w.input_bytes;
    } else if (strstr(w.reason, "unexpected end of input")) {
      w.reason = "the file ends";
      w.reason_at = w.input_bytes;
    }
  }
  status = cli_close_output(CMD, f, out_path);
  f = NULL;
  if (status != ETR_CLI_OK) {
    if (created) cli_discard_output(out_path); /* no half-written output */
    goto done;
  }
  status = report(&w, json);

done:
  if (f) {
    if (f != stdout) {
      fclose(f);
      if (created) cli_discard_output(out_path); /* no half-written output */
    } else {
      fflush(f);
    }
  }
  rd_close(w.r);
  raw_free(&w.raw);
  if (own_fd >= 0) close(own_fd);
  idset_free(&w.seen);
  an_u64map_free(&w.threads);
  an_u64map_free(&w.pend_ix);
  free(w.pends);
  return status;
}
