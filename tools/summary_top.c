/* etr summary's largest tensors (summary_top.h). */
#include "summary_top.h"

#include <stdlib.h>
#include <string.h>

/* A total order on (bytes, id, storage): each tensor has one place, so the heap holds the
 * same N largest whatever the order they come in. */
static bool tens_less(const sum_tens *a, const sum_tens *b) {
  if (a->bytes != b->bytes) return a->bytes < b->bytes;
  if (a->id != b->id) return a->id > b->id; /* on a tie, the lower id ranks higher */
  return a->storage > b->storage;
}

/* ---- the heap's index: open addressing (linear probing) over heap positions, the key
 * read from the entry there; each entry knows its slot, so an entry moving in the heap
 * updates one slot, and a removal shifts the following slots back (no tombstones). ---- */

static size_t ix_home(const sum_top *s, int64_t id, int64_t storage) {
  uint64_t x = (uint64_t)id * 0x9e3779b97f4a7c15ull ^ (uint64_t)storage; /* splitmix64's mix */
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (size_t)(x ^ (x >> 31)) & s->ix_mask;
}

/* The heap position of tensor (id, storage), or n when it is not in the heap. */
static size_t ix_find(const sum_top *s, int64_t id, int64_t storage) {
  for (size_t i = ix_home(s, id, storage);; i = (i + 1) & s->ix_mask) {
    uint32_t at = s->ix[i];
    if (at == SUM_TOP_EMPTY) return s->n;
    if (s->heap[at].id == id && s->heap[at].storage == storage) return at;
  }
}

/* Index heap[at] (not indexed yet). */
static void ix_insert(sum_top *s, size_t at) {
  size_t i = ix_home(s, s->heap[at].id, s->heap[at].storage);
  while (s->ix[i] != SUM_TOP_EMPTY) i = (i + 1) & s->ix_mask;
  s->ix[i] = (uint32_t)at;
  s->heap[at].slot = (uint32_t)i;
}

/* Unindex heap[at]: the entries after its slot that probed past it move back. */
static void ix_remove(sum_top *s, size_t at) {
  size_t hole = s->heap[at].slot;
  s->ix[hole] = SUM_TOP_EMPTY;
  for (size_t k = (hole + 1) & s->ix_mask; s->ix[k] != SUM_TOP_EMPTY; k = (k + 1) & s->ix_mask) {
    const sum_tens *e = &s->heap[s->ix[k]];
    size_t home = ix_home(s, e->id, e->storage);
    /* it may fill the hole unless its home lies cyclically in (hole, k] */
    if (((k - home) & s->ix_mask) < ((k - hole) & s->ix_mask)) continue;
    s->ix[hole] = s->ix[k];
    s->heap[s->ix[hole]].slot = (uint32_t)hole;
    s->ix[k] = SUM_TOP_EMPTY;
    hole = k;
  }
}

static void heap_swap(sum_top *s, size_t i, size_t j) {
  sum_tens t = s->heap[i];
  s->heap[i] = s->heap[j];
  s->heap[j] = t;
  s->ix[s->heap[i].slot] = (uint32_t)i;
  s->ix[s->heap[j].slot] = (uint32_t)j;
}

static void heap_down(sum_top *s, size_t i) {
  sum_tens *h = s->heap;
  size_t n = s->n;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && tens_less(&h[l], &h[m])) m = l;
    if (r < n && tens_less(&h[r], &h[m])) m = r;
    if (m == i) return;
    heap_swap(s, i, m);
    i = m;
  }
}

static void heap_up(sum_top *s, size_t i) {
  while (i) {
    size_t p = (i - 1) / 2;
    if (!tens_less(&s->heap[i], &s->heap[p])) return;
    heap_swap(s, i, p);
    i = p;
  }
}

bool sum_top_init(sum_top *t, size_t max) {
  memset(t, 0, sizeof *t);
  t->max = max;
  t->heap = calloc(max ? max : 1, sizeof *t->heap);
  size_t cap = 2;
  while (cap < 2 * max) cap *= 2;
  t->ix = malloc(cap * sizeof *t->ix);
  t->ix_mask = cap - 1;
  if (!t->heap || !t->ix) {
    sum_top_free(t);
    return false;
  }
  memset(t->ix, 0xff, cap * sizeof *t->ix); /* all SUM_TOP_EMPTY */
  return true;
}

void sum_top_free(sum_top *t) {
  free(t->heap);
  free(t->ix);
  t->heap = NULL;
  t->ix = NULL;
}

/* A sighting no larger than the heap's smallest cannot enter it, nor grow an entry already
 * there; the same tensor seen again is grown in place, else kept as it was. */
bool sum_top_wants(const sum_top *t, const sum_tens *x) {
  if (t->n == t->max && !tens_less(&t->heap[0], x)) return false;
  size_t at = ix_find(t, x->id, x->storage);
  return at == t->n || t->heap[at].bytes < x->bytes;
}

void sum_top_put(sum_top *t, const sum_tens *x) {
  size_t at = ix_find(t, x->id, x->storage);
  if (at < t->n) {                    /* larger: it moves away from the smallest, at the root */
    uint32_t slot = t->heap[at].slot; /* (the same key: the same slot) */
    t->heap[at] = *x;
    t->heap[at].slot = slot;
    heap_down(t, at);
  } else if (t->n < t->max) {
    t->heap[t->n] = *x;
    ix_insert(t, t->n);
    heap_up(t, t->n++);
  } else { /* the smallest leaves */
    ix_remove(t, 0);
    t->heap[0] = *x;
    ix_insert(t, 0);
    heap_down(t, 0);
  }
}

static int cmp_tens(const void *a, const void *b) {
  const sum_tens *x = a, *y = b;
  if (tens_less(x, y)) return 1;
  if (tens_less(y, x)) return -1;
  return 0;
}

void sum_top_sort(sum_top *t) {
  if (t->n) qsort(t->heap, t->n, sizeof *t->heap, cmp_tens);
}
