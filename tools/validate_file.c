/* `etr validate`: the checks that need the whole file, run after the last node (validate.h):
 * the top-level keys and header, the traceback tables, and the "etr" footer.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "validate.h"

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
        /* the footer counts nodes handed to the writer, the process node included; etr's
         * placeholders for ops never written (a fatal signal's seal, repair) are not */
        uint64_t own = w->nodes - w->placeholders;
        if (nw && nw->kind == ETR_J_INT && (uint64_t)nw->v.i != own &&
            (uint64_t)nw->v.i != w->nodes)
          vd_problem(v, SEV_WARN, K_FOOTER, end_off, -1,
                     "the footer says %" PRId64 " nodes written, the file has %" PRIu64, nw->v.i,
                     w->nodes);
      }
    }
  }
}
