/* `etr validate`: the checks that need the whole file, run after the last node (validate.h):
 * the id table (dense per-node records and an open-addressing index: ids unique, parents and
 * fw_parents that exist, every op reaching its thread node with its tid), the top-level keys
 * and header, the traceback tables, and the "etr" footer.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "validate.h"

static inline nrec *rec_at(idtab *t, size_t i) {
  return &t->blocks[i >> BLK_SHIFT][i & (BLK_SIZE - 1)];
}

static inline size_t hash_id(int64_t id) {
  uint64_t x = (uint64_t)id * 0x9E3779B97F4A7C15ull;
  return (size_t)(x ^ (x >> 29));
}

static bool tab_grow(idtab *t) {
  size_t cap = t->slots ? (t->mask + 1) * 2 : 1u << 16;
  uint32_t *s = calloc(cap, sizeof *s);
  if (!s) return false;
  for (size_t i = 0; i < t->n; i++) {
    size_t h = hash_id(rec_at(t, i)->id) & (cap - 1);
    while (s[h]) h = (h + 1) & (cap - 1);
    s[h] = (uint32_t)(i + 1);
  }
  free(t->slots);
  t->slots = s;
  t->mask = cap - 1;
  return true;
}

/* Index of id, or -1. */
static int64_t tab_find(const idtab *t, int64_t id) {
  if (!t->slots) return -1;
  size_t h = hash_id(id) & t->mask;
  for (;;) {
    uint32_t s = t->slots[h];
    if (!s) return -1;
    if (t->blocks[(s - 1) >> BLK_SHIFT][(s - 1) & (BLK_SIZE - 1)].id == id) return (int64_t)s - 1;
    h = (h + 1) & t->mask;
  }
}

/* Adds a record; returns it, or NULL when out of memory. *dup is set when id was there. */
nrec *vd_tab_add(idtab *t, int64_t id, bool *dup) {
  *dup = false;
  if (t->n >= UINT32_MAX - 1) return NULL;
  if (!t->slots || (t->n + 1) * 4 > (t->mask + 1) * 3) {
    if (!tab_grow(t)) return NULL;
  }
  size_t h = hash_id(id) & t->mask;
  for (;;) {
    uint32_t s = t->slots[h];
    if (!s) break;
    if (rec_at(t, s - 1)->id == id) {
      *dup = true;
      return rec_at(t, s - 1);
    }
    h = (h + 1) & t->mask;
  }
  if ((t->n >> BLK_SHIFT) >= t->n_blocks) {
    nrec **b = realloc(t->blocks, (t->n_blocks + 1) * sizeof *b);
    if (!b) return NULL;
    t->blocks = b;
    t->blocks[t->n_blocks] = malloc(BLK_SIZE * sizeof(nrec));
    if (!t->blocks[t->n_blocks]) return NULL;
    t->n_blocks++;
  }
  size_t i = t->n++;
  t->slots[h] = (uint32_t)(i + 1);
  nrec *r = rec_at(t, i);
  memset(r, 0, sizeof *r);
  r->id = id;
  return r;
}

void vd_tab_free(idtab *t) {
  for (size_t i = 0; i < t->n_blocks; i++) free(t->blocks[i]);
  free(t->blocks);
  free(t->slots);
}

void vd_check_tree(vrun *w, uint64_t end_off) {
  vstate *v = &w->v;
  idtab *t = &w->ids;
  if (!w->have_process)
    vd_problem(v, SEV_ERROR, K_SPECIAL, end_off, -1,
               "no process node (id 1, name " PROCESS_NAME ")");
  /* fw_parent names a node of the file, as ctrl_deps does (a trace cut by kill -9 can lose
   * the forward op a backward op points to: etr repair adds a placeholder for it) */
  for (size_t i = 0; i < w->n_fw; i++)
    if (tab_find(t, w->fw[i].fw_parent) < 0)
      vd_problem(v, SEV_ERROR, K_PARENT, w->fw[i].offset, w->fw[i].id,
                 "fw_parent %" PRId64 " does not exist", w->fw[i].fw_parent);
  /* pass 1: parent ids -> indexes */
  for (size_t i = 0; i < t->n; i++) {
    nrec *r = rec_at(t, i);
    if (r->kind == NK_PROCESS) {
      r->state = ST_OK;
      r->parent = -1;
      continue;
    }
    int64_t p = tab_find(t, r->parent);
    if (p < 0) {
      vd_problem(v, SEV_ERROR, K_PARENT, (uint64_t)r->offset, r->id,
                 "parent %" PRId64 " (ctrl_deps) does not exist", r->parent);
      r->state = ST_BAD;
      r->parent = -1;
      continue;
    }
    if (r->kind == NK_THREAD) {
      if (rec_at(t, (size_t)p)->kind != NK_PROCESS) { /* reported in check_node */
      }
      r->state = ST_OK;
      r->parent = (int64_t)i; /* a thread node reaches itself */
      continue;
    }
    r->parent = p;
  }
  /* pass 2: follow parents, compressing paths to the thread node reached */
  size_t *path = NULL, cap = 0;
  for (size_t i = 0; i < t->n; i++) {
    nrec *r = rec_at(t, i);
    if (r->state != ST_NONE) continue;
    size_t len = 0;
    size_t cur = i;
    int64_t result = -1;
    const char *why = NULL;
    for (;;) {
      nrec *c = rec_at(t, cur);
      if (c->state == ST_OK) {
        result = c->kind == NK_PROCESS ? -1 : c->parent;
        if (c->kind == NK_PROCESS) why = "reaches the process node without a thread node";
        break;
      }
      if (c->state == ST_BAD) {
        why = "its chain of parents is broken";
        break;
      }
      if (c->state == ST_BUSY) {
        why = "its chain of parents has a cycle";
        break;
      }
      c->state = ST_BUSY;
      if (len == cap) {
        cap = cap ? cap * 2 : 64;
        size_t *np = realloc(path, cap * sizeof *np);
        if (!np) {
          free(path);
          return;
        }
        path = np;
      }
      path[len++] = cur;
      cur = (size_t)c->parent;
    }
    for (size_t j = 0; j < len; j++) {
      nrec *c = rec_at(t, path[j]);
      if (result >= 0) {
        c->state = ST_OK;
        c->parent = result;
        nrec *th = rec_at(t, (size_t)result);
        if (c->tid != th->tid)
          vd_problem(v, SEV_ERROR, K_REACH, c->offset, c->id,
                     "tid %" PRIu64 ", but it hangs under the thread node %" PRId64
                     " of tid %" PRIu64,
                     (uint64_t)c->tid, th->id, (uint64_t)th->tid);
      } else {
        c->state = ST_BAD;
      }
    }
    /* a broken chain was reported where it breaks (a missing parent); a cycle or an op
     * right under the process node is reported once, at the top of the chain walked */
    if (result < 0 && len && why && strcmp(why, "its chain of parents is broken")) {
      nrec *c = rec_at(t, path[len - 1]);
      vd_problem(v, SEV_ERROR, K_REACH, c->offset, c->id, "does not reach a thread node: %s", why);
    }
  }
  free(path);
}

/* ---- file level ---- */

void vd_check_top(vstate *v, rd_reader *r, uint64_t end_off) {
  static const char *const want[6] = {"schema", "pid", "time", "start_ts", "nodes", "finish_ts"};
  size_t nk;
  const char *const *keys = rd_top_keys(r, &nk);
  int last = -1;
  bool seen[6] = {false};
  for (size_t i = 0; i < nk; i++) {
    int w = -1;
    for (int q = 0; q < 6; q++)
      if (!strcmp(keys[i], want[q])) w = q;
    if (w < 0) continue;
    seen[w] = true;
    if (w < last)
      vd_problem(
          v, SEV_ERROR, K_TOP, 0, -1,
          "top-level key \"%s\" out of order (schema, pid, time, start_ts, nodes, finish_ts)",
          keys[i]);
    last = w;
  }
  for (int q = 0; q < 6; q++)
    if (!seen[q])
      vd_problem(v, SEV_ERROR, K_TOP, q < 4 ? 0 : end_off, -1, "no top-level \"%s\"", want[q]);
  const rd_rheader *h = rd_header(r);
  if (h->time) {
    int Y, M, D, hh, mm, ss, n = 0;
    if (sscanf(h->time, "%4d-%2d-%2d %2d:%2d:%2d%n", &Y, &M, &D, &hh, &mm, &ss, &n) != 6 ||
        h->time[n] || strlen(h->time) != 19)
      vd_problem(v, SEV_WARN, K_HEADER, 0, -1, "\"time\" \"%s\" is not YYYY-MM-DD HH:MM:SS",
                 h->time);
  }
}

void vd_check_trailer(vrun *w, rd_reader *r, uint64_t end_off) {
  vstate *v = &w->v;
  const rd_jval *frames = rd_trailer(r, "frames");
  const rd_jval *tbs = rd_trailer(r, "tracebacks");
  size_t n_frames = 0;
  /* a table over the reader's limit was skipped (the reader warned): what needs it is not
   * checked */
  bool skipped = rd_skipped(r, "frames") || rd_skipped(r, "tracebacks");
  if (skipped) frames = tbs = NULL;
  if (frames) {
    if (frames->kind != ETR_J_ARRAY) {
      vd_problem(v, SEV_ERROR, K_TB, end_off, -1, "\"frames\" is not an array");
      frames = NULL;
    } else {
      n_frames = frames->v.arr.n;
      for (size_t i = 0; i < n_frames; i++) {
        const rd_jval *f = &frames->v.arr.items[i];
        const rd_jval *nm = rd_jobj_get(f, "name"), *fn = rd_jobj_get(f, "filename"),
                      *ln = rd_jobj_get(f, "line");
        if (f->kind != ETR_J_OBJECT || !nm || nm->kind != ETR_J_STRING || !fn ||
            fn->kind != ETR_J_STRING || !ln || ln->kind != ETR_J_INT)
          vd_problem(v, SEV_ERROR, K_TB, end_off, -1,
                     "frame %zu is not {\"name\": string, \"filename\": string, \"line\": int}", i);
      }
    }
  }
  if (tbs) {
    if (tbs->kind != ETR_J_ARRAY) {
      vd_problem(v, SEV_ERROR, K_TB, end_off, -1, "\"tracebacks\" is not an array");
      tbs = NULL;
    } else {
      if (!frames && tbs->v.arr.n)
        vd_problem(v, SEV_ERROR, K_TB, end_off, -1, "\"tracebacks\" without \"frames\"");
      for (size_t i = 0; i < tbs->v.arr.n; i++) {
        const rd_jval *t = &tbs->v.arr.items[i];
        if (t->kind != ETR_J_ARRAY) {
          vd_problem(v, SEV_ERROR, K_TB, end_off, -1, "traceback %zu is not an array", i);
          continue;
        }
        for (size_t j = 0; j < t->v.arr.n; j++) {
          const rd_jval *x = &t->v.arr.items[j];
          if (x->kind != ETR_J_INT || x->v.i < 0 || (uint64_t)x->v.i >= n_frames) {
            vd_problem(v, SEV_ERROR, K_TB, end_off, -1,
                       "traceback %zu: entry %zu is not an index into \"frames\" (%zu entries)", i,
                       j, n_frames);
            break;
          }
        }
      }
    }
  }
  if (w->any_tb && !skipped) {
    size_t n_tbs = tbs ? tbs->v.arr.n : 0;
    if (!tbs)
      vd_problem(v, SEV_ERROR, K_TB, w->max_tb_off, w->max_tb_node,
                 "nodes carry a \"traceback\" attr but the file has no \"tracebacks\" table");
    else if (w->max_tb >= n_tbs)
      vd_problem(v, SEV_ERROR, K_TB, w->max_tb_off, w->max_tb_node,
                 "traceback %" PRIu64 " is beyond the \"tracebacks\" table (%zu entries)",
                 w->max_tb, n_tbs);
  }
  const rd_jval *etr = rd_trailer(r, "etr");
  if (etr) {
    const rd_jval *ver = rd_jobj_get(etr, "version"), *st = rd_jobj_get(etr, "stats");
    if (etr->kind != ETR_J_OBJECT || !ver || ver->kind != ETR_J_STRING)
      vd_problem(v, SEV_ERROR, K_FOOTER, end_off, -1, "\"etr\" has no \"version\" string");
    if (st) {
      if (st->kind != ETR_J_OBJECT) {
        vd_problem(v, SEV_ERROR, K_FOOTER, end_off, -1, "\"etr\".\"stats\" is not an object");
      } else {
        for (size_t i = 0; i < st->v.obj.n; i++)
          if (st->v.obj.items[i].val.kind != ETR_J_INT)
            vd_problem(v, SEV_ERROR, K_FOOTER, end_off, -1, "stat \"%s\" is not an integer",
                       st->v.obj.items[i].key);
        /* What the recorder repaired or lost on the way: the trace is valid, but the runtime
         * misused begin/end, or nodes are missing. Said once, as a note. */
        static const char *const misuse[] = {
            "ends_without_begin", "ends_out_of_order",   "ends_cross_thread",
            "ops_abandoned",      "ops_open_at_disable", "ops_open_at_thread_exit",
            "ops_open_at_close",  "nodes_dropped",       "write_error"};
        char note[512];
        size_t k = 0;
        note[0] = '\0';
        for (size_t i = 0; i < sizeof misuse / sizeof misuse[0]; i++) {
          const rd_jval *c = rd_jobj_get(st, misuse[i]);
          if (c && c->kind == ETR_J_INT && c->v.i != 0 && k < sizeof note)
            k += (size_t)snprintf(note + k, sizeof note - k, "%s%s %" PRId64, k ? ", " : "",
                                  misuse[i], c->v.i);
        }
        if (k && !v->quiet) printf("%s: note: the recorder reports %s\n", v->file, note);
        const rd_jval *nw = rd_jobj_get(st, "nodes_written");
        /* the footer counts nodes handed to the writer, the process node included */
        if (nw && nw->kind == ETR_J_INT && (uint64_t)nw->v.i != w->nodes &&
            (uint64_t)nw->v.i != w->nodes + 1)
          vd_problem(v, SEV_WARN, K_FOOTER, end_off, -1,
                     "the footer says %" PRId64 " nodes written, the file has %" PRIu64, nw->v.i,
                     w->nodes);
      }
    }
  }
}
