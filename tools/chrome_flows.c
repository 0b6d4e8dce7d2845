/* etr chrome's flows waiting for their fw_parent (chrome_flows.h).
 *
 * Time: an op read looks up the flows waiting for it by its id (and sorts them by their
 * place, k log k for k of them). Memory: 40 bytes a waiting flow plus a map entry per
 * fw_parent waited for; not bounded: a valid trace may have every op wait. */
#include "chrome_flows.h"

#include <stdlib.h>

/* The chain (flows waiting for one fw_parent) of the flow at position `at` points at it
 * from its neighbours, or from ix when it is the head. */
static bool relink(ch_flows *f, uint32_t at) {
  const ch_flow *x = &f->w[at];
  if (x->next != CH_NO_FLOW) f->w[x->next].prev = at;
  if (x->prev != CH_NO_FLOW) {
    f->w[x->prev].next = at;
    return true;
  }
  return an_u64map_put(&f->ix, (uint64_t)x->fw_parent, at);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The flows of id's chain only. They are handed out, and taken out of w, in the order (and
 * with the moves) of the scan this replaces, which went through the whole array for each op
 * laid out (quadratic): from the front, each flow found handed out and the array's last
 * flow moved into its place, and looked at there again. So the output is byte for byte
 * what it was. */
bool ch_flows_resolve(ch_flows *f, int64_t id, void (*emit)(void *ctx, const ch_flow *fl),
                      void *ctx) {
  uint64_t head;
  if (!f->n || !an_u64map_get(&f->ix, (uint64_t)id, &head)) return true;
  an_u64map_del(&f->ix, (uint64_t)id);
  size_t k = 0;
  for (uint32_t at = (uint32_t)head; at != CH_NO_FLOW; at = f->w[at].next) {
    if (k == f->cap_found) {
      size_t cap = f->cap_found ? f->cap_found * 2 : 64;
      uint32_t *v = realloc(f->found, cap * sizeof *v);
      if (v == NULL) return false;
      f->found = v;
      f->cap_found = cap;
    }
    f->found[k++] = at;
  }
  f->visits += k;
  qsort(f->found, k, sizeof *f->found, cmp_u32);
  uint32_t n = (uint32_t)f->n;
  /* (positions at or past n were taken from the array's end already) */
  for (size_t j = 0; j < k && f->found[j] < n; j++) {
    uint32_t i = f->found[j];
    for (;;) {
      emit(ctx, &f->w[i]);
      uint32_t last = --n;
      if (last == i) break;
      f->w[i] = f->w[last];
      if (f->w[i].fw_parent == id) continue; /* another of them: handed out next */
      f->visits++;
      if (!relink(f, i)) return false;
      break;
    }
  }
  f->n = n;
  return true;
}

/* At its fw_parent's chain's head. */
bool ch_flows_wait(ch_flows *f, int64_t op_id, uint64_t tid, int64_t ts, uint64_t fw_parent) {
  if (f->n >= CH_NO_FLOW - 1) return false;
  if (f->n == f->cap) {
    size_t nc = f->cap ? f->cap * 2 : 64;
    ch_flow *nw = realloc(f->w, nc * sizeof *nw);
    if (nw == NULL) return false;
    f->w = nw;
    f->cap = nc;
  }
  uint64_t head;
  uint32_t at = (uint32_t)f->n;
  bool chained = an_u64map_get(&f->ix, fw_parent, &head);
  f->w[at] = (ch_flow){
      op_id, tid, ts, (int64_t)fw_parent, CH_NO_FLOW, chained ? (uint32_t)head : CH_NO_FLOW};
  if (!relink(f, at)) return false;
  f->n++;
  f->waited++;
  return true;
}

void ch_flows_free(ch_flows *f) {
  free(f->w);
  free(f->found);
  an_u64map_free(&f->ix);
}
