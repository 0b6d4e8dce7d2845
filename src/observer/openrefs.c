/* Ops named but not written, and their placeholders (openrefs.h). */
#include "observer/openrefs.h"

#include <stdlib.h>
#include <string.h>

static inline size_t slot_of(const etr__refmap *m, uint64_t id) {
  uint64_t h = id * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 20) & m->mask;
}

bool etr__refmap_init(etr__refmap *m, size_t want) {
  size_t cap = 64;
  while (cap < want * 2) cap *= 2;
  m->e = calloc(cap, sizeof *m->e);
  m->mask = cap - 1;
  m->n = 0;
  return m->e != NULL;
}

void etr__refmap_free(etr__refmap *m) {
  free(m->e);
  m->e = NULL;
  m->mask = m->n = 0;
}

etr__missing *etr__refmap_find(const etr__refmap *m, uint64_t id) {
  if (!m->e) return NULL;
  for (size_t j = slot_of(m, id);; j = (j + 1) & m->mask) {
    if (m->e[j].id == id) return &m->e[j];
    if (m->e[j].id == 0) return NULL;
  }
}

etr__missing *etr__refmap_put(etr__refmap *m, uint64_t id) {
  if (!m->e && !etr__refmap_init(m, 32)) return NULL;
  if ((m->n + 1) * 2 > m->mask + 1) {
    etr__refmap bigger;
    if (!etr__refmap_init(&bigger, (m->mask + 1))) return NULL;
    for (size_t i = 0; i <= m->mask; i++)
      if (m->e[i].id) *etr__refmap_put(&bigger, m->e[i].id) = m->e[i];
    free(m->e);
    *m = bigger;
  }
  size_t j = slot_of(m, id);
  while (m->e[j].id != 0 && m->e[j].id != id) j = (j + 1) & m->mask;
  if (m->e[j].id == 0) {
    memset(&m->e[j], 0, sizeof m->e[j]);
    m->e[j].id = id;
    m->n++;
  }
  return &m->e[j];
}

void etr__refmap_del(etr__refmap *m, uint64_t id) {
  etr__missing *hit = etr__refmap_find(m, id);
  if (!hit) return;
  /* (linear probing: the entries after it in its run move back where they may) */
  size_t i = (size_t)(hit - m->e);
  m->e[i].id = 0;
  m->n--;
  for (size_t j = (i + 1) & m->mask; m->e[j].id; j = (j + 1) & m->mask) {
    size_t home = slot_of(m, m->e[j].id);
    /* moves back to i unless its home lies cyclically in (i, j] */
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    m->e[i] = m->e[j];
    m->e[j].id = 0;
    i = j;
  }
}

void etr__missing_note(etr__missing *m, uint64_t tid, const etr__ev *ev, bool span) {
  if (!m->tid) m->tid = tid;
  if (span && (ev->flags & ETR__EVF_TIMING)) {
    int64_t end = ev->ts_ns + ev->incl_ns;
    if (!m->timed || ev->ts_ns < m->ts_min) m->ts_min = ev->ts_ns;
    if (!m->timed || end > m->end_max) m->end_max = end;
    m->timed = true;
  }
}

static inline size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

static int cmp_missing(const void *a, const void *b) {
  const etr__missing *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

bool etr__put_placeholders(const etr__refmap *miss, const etr__refmap *threads, const char *name,
                           void (*put)(void *ctx, const etr__ev *ev), void *ctx, uint64_t *made) {
  *made = 0;
  if (!miss->n) return true;
  etr__missing *v = malloc(miss->n * sizeof *v);
  if (!v) return false;
  size_t k = 0;
  for (size_t i = 0; i <= miss->mask; i++)
    if (miss->e[i].id) v[k++] = miss->e[i];
  qsort(v, k, sizeof *v, cmp_missing);
  size_t name_len = strlen(name);
  _Alignas(8) uint8_t buf[sizeof(etr__ev) + 64];
  if (name_len > 64) name_len = 64;
  for (size_t i = 0; i < k; i++) {
    etr__ev *ev = (etr__ev *)(void *)buf;
    memset(ev, 0, sizeof *ev);
    ev->size = (uint32_t)round8(sizeof *ev + name_len);
    ev->type = ETR__EV_OP;
    ev->flags = ETR__EVF_INCOMPLETE;
    if (v[i].timed) {
      ev->flags |= ETR__EVF_TIMING;
      ev->ts_ns = v[i].ts_min;
      ev->incl_ns = v[i].end_max - v[i].ts_min;
    }
    ev->id = v[i].id;
    etr__missing *t = v[i].under || !threads ? NULL : etr__refmap_find(threads, v[i].tid + 1);
    ev->parent = v[i].under ? v[i].under : t ? t->tid : 1;
    ev->tid = v[i].tid;
    ev->seq = -1;
    ev->kstream = -1;
    ev->name_len = (uint32_t)name_len;
    memcpy(ev + 1, name, name_len);
    put(ctx, ev);
    (*made)++;
  }
  free(v);
  return true;
}

void etr__openrefs_note(etr__openrefs *o, const etr__ev *ev, uint64_t thread_node) {
  if (o->failed || o->paused || ev->type != ETR__EV_OP) return;
  etr__refmap_del(&o->open, ev->id);
  if (ev->parent <= 1 || ev->parent == thread_node) return; /* (top-level: its thread's) */
  etr__missing *m = etr__refmap_put(&o->open, ev->parent);
  if (!m) {
    o->failed = true;
    return;
  }
  m->under = thread_node;
  etr__missing_note(m, ev->tid, ev, true);
}

void etr__openrefs_free(etr__openrefs *o) {
  etr__refmap_free(&o->open);
  o->failed = false;
}
