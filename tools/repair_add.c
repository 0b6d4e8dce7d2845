/* `etr repair`: what it notes of each kept node and what it adds after them (repair.h). Each
 * kept node's id goes into a set, each parent or fw_parent it names that has not been read
 * yet into a pending list (with the thread and time span a placeholder would need); once the
 * input stops, the pending ones become placeholders, missing thread nodes and the process
 * node are added, and the footer closes the trace.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json/writer.h"
#include "observer/binlog.h"
#include "repair.h"

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

void rp_idset_free(idset *s) {
  for (size_t i = 0; i < s->n_slabs; i++) free(s->slabs[i]);
  free(s->slabs);
  an_u64map_free(&s->index);
}

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
bool rp_note_node(repair *w, const rd_rnode *n) {
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
    if (!w->side || n->traceback >= w->side_n_tbs) w->tb_unresolved++;
  }
  return true;
}

/* ---- the tables the recorder kept beside the trace ---- */

bool rp_read_side_tables(repair *w, const char *path, int64_t pid, int64_t start_ts) {
  size_t n = strlen(path);
  char *side = malloc(n + sizeof ".tables");
  if (!side) return false;
  memcpy(side, path, n);
  memcpy(side + n, ".tables", sizeof ".tables");
  int fd = open(side, O_RDONLY | O_CLOEXEC);
  free(side);
  if (fd < 0) return false;
  etr__jw f, t;
  bool ok = etr__jw_init(&f, -1, 0) == 0 && etr__jw_init(&t, -1, 0) == 0;
  const char *stop = NULL;
  uint64_t n_tbs = 0;
  /* (pid and start_ts < 0, absent from the trace: the file must not be taken on trust) */
  ok = ok && pid >= 0 && start_ts >= 0 &&
       etr__bin_read_tables(fd, pid, start_ts, &f, &t, &n_tbs, &stop) == 0 && !f.err && !t.err;
  close(fd);
  if (ok) {
    w->side_frames = f.buf; /* (the buffers change hands) */
    w->side_frames_len = f.len;
    w->side_tbs = t.buf;
    w->side_tbs_len = t.len;
    w->side_n_tbs = n_tbs;
    w->side = true;
  } else {
    etr__jw_free(&f);
    etr__jw_free(&t);
  }
  return ok;
}

void rp_side_tables_free(repair *w) {
  free(w->side_frames);
  free(w->side_tbs);
  w->side_frames = w->side_tbs = NULL;
  w->side = false;
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

size_t rp_live_pends(const repair *w) {
  size_t n = 0;
  for (size_t i = 0; i < w->n_pends; i++)
    if (w->pends[i].live && w->pends[i].id != 1) n++;
  return n;
}

/* Placeholders for the missing parents, thread nodes a thread lacks, the process node.
 * false when memory ran out. */
void rp_flush_held(repair *w) {
  an_out *h = &w->held;
  if (!h->mem_len) return;
  if (w->o.bytes == w->held_at) { /* nothing went before it: the input's bytes, as they were */
    an_out_raw(&w->o, h->mem, h->mem_len);
  } else {
    /* placeholders went before it: the output's separator, then the node (the input's
     * separator was whitespace and, unless it was the first node, a comma) */
    size_t at = 0;
    while (at < h->mem_len && h->mem[at] != '{') at++;
    an_out_cstr(&w->o, w->any_node_out ? ",\n    " : "\n    ");
    an_out_raw(&w->o, h->mem + at, h->mem_len - at);
  }
  w->any_node_out = true;
  h->mem_len = 0;
}

bool rp_add_nodes(repair *w) {
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

/* Whether top-level key k came before "nodes": then the header, copied as it is, holds it
 * (a trace whose keys were sorted has "etr", "finish_ts" and "frames" there). */
static bool in_header(const rd_reader *r, const char *k) {
  size_t n;
  const char *const *keys = rd_top_keys(r, &n);
  for (size_t i = 0; i < n && strcmp(keys[i], "nodes") != 0; i++)
    if (!strcmp(keys[i], k)) return true;
  return false;
}

/* The footer: "]", finish_ts, the tables written whole, "etr"; each key once (one the header
 * holds is not written again). */
void rp_put_footer(repair *w) {
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
  an_out_cstr(o, "\n  ]");
  if (!in_header(r, "finish_ts")) an_out_fmt(o, ",\n  \"finish_ts\": %" PRId64, fin);
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
    an_out_cstr(o, ",\n  ");
    an_out_jstr(o, k, strlen(k));
    an_out_cstr(o, ": ");
    an_out_jval(o, v);
  }
  const rd_jval *frames = rd_trailer(r, "frames");
  const rd_jval *tbs = rd_trailer(r, "tracebacks");
  bool named = w->tb_nodes && w->tb_max < MAX_TB_TABLE;
  if (!tbs && !frames && named && w->side) {
    /* the tables the recorder kept beside the trace: the tracebacks the trace names beyond
     * them (their nodes written after the last entries reached that file) map to [] */
    w->tracebacks_lost = w->tb_unresolved;
    an_out_cstr(o, ",\n  \"frames\": [");
    an_out_raw(o, w->side_frames, w->side_frames_len);
    an_out_cstr(o, "\n  ],\n  \"tracebacks\": [");
    an_out_raw(o, w->side_tbs, w->side_tbs_len);
    for (uint64_t i = w->side_n_tbs; i <= w->tb_max; i++)
      an_out_raw(o, i ? ",[]" : "[]", i ? 3 : 2);
    an_out_cstr(o, "\n  ]");
  } else if (tbs || named || frames) {
    if (!in_header(r, "frames")) {
      an_out_cstr(o, ",\n  \"frames\": ");
      if (frames)
        an_out_jval(o, frames);
      else
        an_out_cstr(o, "[]");
    }
    if (tbs) {
      if (!in_header(r, "tracebacks")) {
        an_out_cstr(o, ",\n  \"tracebacks\": ");
        an_out_jval(o, tbs);
      }
    } else if (named) {
      /* the frames of these tracebacks were never written: each id maps to [] (unknown) */
      w->tracebacks_lost = w->tb_nodes;
      an_out_cstr(o, ",\n  \"tracebacks\": [");
      for (uint64_t i = 0; i <= w->tb_max; i++) an_out_raw(o, i ? ",[]" : "[]", i ? 3 : 2);
      an_out_cstr(o, "]");
    }
  }
  /* (an "etr" before "nodes" stays there as it was, without the "repair" member) */
  if (!in_header(r, "etr")) {
    const rd_jval *etr = rd_trailer(r, "etr");
    const rd_jval *ver = etr ? rd_jobj_get(etr, "version") : NULL;
    an_out_cstr(o, ",\n  \"etr\": {\"version\": ");
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
    an_out_cstr(o, "}");
  }
  an_out_cstr(o, "\n}\n");
}
