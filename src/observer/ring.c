/* The flight recorder's ring (ring.h). */
#include "observer/ring.h"

#include <stdlib.h>
#include <string.h>

static inline size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

struct etr__ring {
  uint8_t *buf;
  size_t cap;
  size_t head, tail; /* oldest event; where the next one goes */
  size_t n;          /* op events kept */
  uint64_t dropped;
  /* thread events, copies back to back (8-aligned) */
  uint8_t *threads;
  size_t threads_len, threads_cap;
};

etr__ring *etr__ring_new(size_t bytes) {
  etr__ring *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->cap = round8(bytes < 4096 ? 4096 : bytes);
  r->buf = malloc(r->cap);
  if (!r->buf) {
    free(r);
    return NULL;
  }
  return r;
}

void etr__ring_free(etr__ring *r) {
  if (!r) return;
  free(r->buf);
  free(r->threads);
  free(r);
}

uint64_t etr__ring_dropped(const etr__ring *r) { return r->dropped; }

static inline uint32_t size_at(const etr__ring *r, size_t p) {
  uint32_t v;
  memcpy(&v, r->buf + p, 4);
  return v;
}

/* Where the event at p really starts: a wrap mark (size 0), or the end of the buffer,
 * sends the reader back to 0. */
static inline size_t event_at(const etr__ring *r, size_t p) {
  return p + 8 > r->cap || size_at(r, p) == 0 ? 0 : p;
}

static void drop_oldest(etr__ring *r) {
  r->head = event_at(r, r->head);
  r->head += size_at(r, r->head);
  r->n--;
  r->dropped++;
  if (r->n == 0) r->head = r->tail = 0;
}

static bool keep_thread(etr__ring *r, const etr__ev *ev) {
  if (r->threads_len + ev->size > r->threads_cap) {
    size_t cap = r->threads_cap ? r->threads_cap : 4096;
    while (cap < r->threads_len + ev->size) cap *= 2;
    uint8_t *p = realloc(r->threads, cap);
    if (!p) return false;
    r->threads = p;
    r->threads_cap = cap;
  }
  memcpy(r->threads + r->threads_len, ev, ev->size);
  r->threads_len += ev->size;
  return true;
}

bool etr__ring_add(etr__ring *r, const etr__ev *ev) {
  if (ev->type == ETR__EV_THREAD) return keep_thread(r, ev);
  size_t size = ev->size;
  if (size > r->cap) { /* larger than the whole ring */
    r->dropped++;
    return true;
  }
  for (;;) {
    size_t pos;
    if (r->n == 0) {
      r->head = r->tail = pos = 0;
    } else if (r->tail > r->head) { /* used: [head, tail) */
      if (r->cap - r->tail >= size) {
        pos = r->tail;
      } else if (size <= r->head) { /* wrap: mark the rest of the buffer unused */
        if (r->cap - r->tail >= 4) memset(r->buf + r->tail, 0, 4);
        pos = 0;
      } else {
        drop_oldest(r);
        continue;
      }
    } else if (r->tail + size <= r->head) { /* used: [head, cap) and [0, tail) */
      pos = r->tail;
    } else {
      drop_oldest(r);
      continue;
    }
    memcpy(r->buf + pos, ev, size);
    r->tail = pos + size;
    r->n++;
    return true;
  }
}

/* ---- writing out ---- */

/* An open-addressing map of ids (never 0) to a slot of extra data. */
typedef struct missing {
  uint64_t id, tid;
  int64_t ts_min, end_max; /* the span of the children that name it (ns) */
  bool timed;
} missing;

typedef struct idmap {
  missing *e;
  size_t mask, n;
} idmap;

static inline size_t slot_of(const idmap *m, uint64_t id) {
  uint64_t h = id * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 20) & m->mask;
}

static bool idmap_init(idmap *m, size_t want) {
  size_t cap = 64;
  while (cap < want * 2) cap *= 2;
  m->e = calloc(cap, sizeof *m->e);
  m->mask = cap - 1;
  m->n = 0;
  return m->e != NULL;
}

static missing *idmap_find(const idmap *m, uint64_t id) {
  for (size_t j = slot_of(m, id);; j = (j + 1) & m->mask) {
    if (m->e[j].id == id) return &m->e[j];
    if (m->e[j].id == 0) return NULL;
  }
}

/* The entry of id, added when absent; NULL when memory runs out. */
static missing *idmap_put(idmap *m, uint64_t id) {
  if ((m->n + 1) * 2 > m->mask + 1) {
    idmap bigger;
    if (!idmap_init(&bigger, (m->mask + 1))) return NULL;
    for (size_t i = 0; i <= m->mask; i++)
      if (m->e[i].id) *idmap_put(&bigger, m->e[i].id) = m->e[i];
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

static int cmp_missing(const void *a, const void *b) {
  const missing *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* A reference from ev to id: remembered unless id is a kept op or a thread node. */
static bool note_ref(idmap *missing_ids, const idmap *kept, uint64_t id, uint64_t tid,
                     const etr__ev *ev, bool span) {
  if (id <= 1 || idmap_find(kept, id)) return true;
  missing *m = idmap_put(missing_ids, id);
  if (!m) return false;
  if (!m->tid) m->tid = tid;
  if (span && (ev->flags & ETR__EVF_TIMING)) {
    int64_t end = ev->ts_ns + ev->incl_ns;
    if (!m->timed || ev->ts_ns < m->ts_min) m->ts_min = ev->ts_ns;
    if (!m->timed || end > m->end_max) m->end_max = end;
    m->timed = true;
  }
  return true;
}

uint64_t etr__ring_write(etr__ring *r, void (*put)(void *ctx, const etr__ev *ev), void *ctx) {
  /* the thread nodes, and the ids that need no placeholder: thread nodes and kept ops */
  idmap kept = {0}, miss = {0}, threads = {0};
  bool ok = idmap_init(&kept, r->n + r->threads_len / sizeof(etr__ev) + 1) &&
            idmap_init(&miss, 64) && idmap_init(&threads, r->threads_len / sizeof(etr__ev) + 1);
  for (size_t off = 0; off < r->threads_len;) {
    const etr__ev *ev = (const etr__ev *)(const void *)(r->threads + off);
    put(ctx, ev);
    missing *t = NULL;
    if (ok && (!idmap_put(&kept, ev->id) || !(t = idmap_put(&threads, ev->tid + 1)))) ok = false;
    if (ok) t->tid = ev->id; /* tid + 1 -> its thread node (a tid may be 0) */
    off += ev->size;
  }
  size_t p = r->head;
  for (size_t i = 0; ok && i < r->n; i++) {
    p = event_at(r, p);
    const etr__ev *ev = (const etr__ev *)(const void *)(r->buf + p);
    if (!idmap_put(&kept, ev->id)) ok = false;
    p += ev->size;
  }
  p = r->head;
  for (size_t i = 0; i < r->n; i++) {
    p = event_at(r, p);
    const etr__ev *ev = (const etr__ev *)(const void *)(r->buf + p);
    put(ctx, ev);
    if (ok &&
        (!note_ref(&miss, &kept, ev->parent, ev->tid, ev, true) ||
         !note_ref(&miss, &kept, ev->fw_parent, ev->fw_tid ? ev->fw_tid : ev->tid, ev, false)))
      ok = false;
    p += ev->size;
  }
  uint64_t made = 0;
  if (ok && miss.n) {
    /* placeholders, by id: empty inputs and outputs, under their thread's node */
    missing *v = malloc(miss.n * sizeof *v);
    size_t k = 0;
    if (v) {
      for (size_t i = 0; i <= miss.mask; i++)
        if (miss.e[i].id) v[k++] = miss.e[i];
      qsort(v, k, sizeof *v, cmp_missing);
      const size_t name_len = sizeof ETR__RING_PLACEHOLDER - 1;
      _Alignas(8) uint8_t buf[sizeof(etr__ev) + 32];
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
        missing *t = idmap_find(&threads, v[i].tid + 1);
        ev->parent = t ? t->tid : 1;
        ev->tid = v[i].tid;
        ev->seq = -1;
        ev->kstream = -1;
        ev->name_len = (uint32_t)name_len;
        memcpy(ev + 1, ETR__RING_PLACEHOLDER, name_len);
        put(ctx, ev);
        made++;
      }
      free(v);
    } else {
      ok = false;
    }
  }
  free(kept.e);
  free(miss.e);
  free(threads.e);
  return ok ? made : UINT64_MAX;
}
